#!/usr/bin/env bash
# Quick start: install the dependencies, build the checkpoint example and the reshard program in
# build/, then convert a MindSpore checkpoint trained on 8 ranks to the 4 ranks of a fine-tuning
# strategy (with optimizer sharding), twice: with the library (examples/transform_8to4.cpp, which
# writes the 8-rank checkpoint and both strategy files, transforms and checks every value against
# the full tensors) and with the program (rank-list, transform, inspect), which must write the same
# files byte for byte. Then the Python module: built, installed where /usr/bin/python3 finds it
# (`cmake --install --component python`), and asked for the same rank lists as the program.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

build_dir=${RESHARD_BUILD_DIR:-build}
jobs=${RESHARD_JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DRESHARD_WERROR=OFF -DRESHARD_BUILD_PYTHON=ON
cmake --build "$build_dir" --target example_transform_8to4 reshard_cli reshard_python -j "$jobs"

work="$build_dir/quickstart"
rm -rf "$work"
echo
echo "== 1. the library: examples/transform_8to4.cpp"
"$build_dir/examples/example_transform_8to4" "$work"

reshard="$build_dir/examples/reshard"
strategies=(--src-strategy "$work/train_strategy.ckpt" --dst-strategy "$work/tune_strategy.ckpt")
echo
echo "== 2. the program: reshard rank-list, transform, inspect"
for t in 0 1 2 3; do
  echo "\$ reshard rank-list --rank $t ...  ->  $("$reshard" rank-list --rank "$t" "${strategies[@]}")"
done
echo "\$ reshard transform --src-dir $work/train --dst-dir $work/tune_cli ..."
"$reshard" transform --src-dir "$work/train" --dst-dir "$work/tune_cli" "${strategies[@]}" --jobs 2
echo "\$ reshard inspect $work/tune_cli/rank_1/checkpoint_1.ckpt"
"$reshard" inspect "$work/tune_cli/rank_1/checkpoint_1.ckpt"
for t in 0 1 2 3; do
  cmp "$work/tune/rank_$t/checkpoint_$t.ckpt" "$work/tune_cli/rank_$t/checkpoint_$t.ckpt"
done
echo
echo "== 3. Python: import reshard"
cmake --install "$build_dir" --component python
abs_work=$(cd "$work" && pwd)
for t in 0 1 2 3; do  # from / : the installed module, not a build tree
  py=$(cd / && /usr/bin/python3 -c "import reshard, sys; print(reshard.rank_list_for_transform($t, sys.argv[1], sys.argv[2]))" \
         "$abs_work/train_strategy.ckpt" "$abs_work/tune_strategy.ckpt")
  cli=$("$reshard" rank-list --rank "$t" "${strategies[@]}" | tr -d ' ')
  echo "\$ python3 -c \"import reshard; print(reshard.rank_list_for_transform($t, ...))\"  ->  $py"
  [[ $(tr -d ' ' <<<"$py") == "$cli" ]] || { echo "quickstart: Python says $py, the program $cli" >&2; exit 1; }
done
echo
echo "quickstart: OK: reshard transform wrote the same 4 checkpoints as the library, byte for byte,"
echo "and the Python module, installed for /usr/bin/python3, gives the program's rank lists"
echo "(the files are in $work: train/ and *_strategy.ckpt the input, tune/ and tune_cli/ the output)"
