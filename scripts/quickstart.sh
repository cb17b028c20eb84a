#!/usr/bin/env bash
# Quick start: install the dependencies, build the checkpoint example and the reshard program in
# build/, then convert a MindSpore checkpoint trained on 8 ranks to the 4 ranks of a fine-tuning
# strategy (with optimizer sharding), twice: with the library (examples/transform_8to4.cpp, which
# writes the 8-rank checkpoint and both strategy files, transforms and checks every value against
# the full tensors) and with the program (rank-list, transform, inspect), which must write the same
# files byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

build_dir=${RESHARD_BUILD_DIR:-build}
jobs=${RESHARD_JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DRESHARD_WERROR=OFF
cmake --build "$build_dir" --target example_transform_8to4 reshard_cli -j "$jobs"

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
echo "quickstart: OK: reshard transform wrote the same 4 checkpoints as the library, byte for byte"
echo "(the files are in $work: train/ and *_strategy.ckpt the input, tune/ and tune_cli/ the output)"
