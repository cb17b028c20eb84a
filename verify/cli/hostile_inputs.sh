#!/usr/bin/env bash
# Hostile inputs to the reshard program: every option that names a file to read, given a FIFO, a
# Unix socket, a directory or /dev/zero, fails at once (a FIFO without a writer used to hang the
# program in open(2)) with exit code 1, nothing on stdout and one line on stderr naming the file
# and what it is. Each run is under `timeout 20`, a hang guard only: exit 124 is a failure. Also
# --src-dir naming a file, a manifest entry that is a FIFO, tensor_shape checks of rank-list,
# inspect of a bad strategy printing nothing, and "1 difference".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

"$PY" "$SC" gen retrain_8to4 "$tmp/s" >/dev/null  # 8 ranks to 4
S=$tmp/s/src_strategy.ckpt
D=$tmp/s/dst_strategy.ckpt
run transform --src-dir "$tmp/s/src" --dst-dir "$tmp/good" --src-strategy "$S" --dst-strategy "$D" \
  --manifest "$tmp/good/manifest.json"
[[ $rc -eq 0 ]] || { fail "setup: transform" "exit code $rc" "stderr: $err"; finish; }

mkfifo "$tmp/fifo"
"$PY" -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$tmp/sock"
mkdir "$tmp/dir"

guard=20  # every run under `timeout 20` (lib.bash): exit 124, a hang, is a failure

# guarded NAME TEXT ARGS...: expect_error with exit code 1 and a message holding "$file: TEXT"
# (or TEXT itself when it names $file)
guarded() {
  local name=$1 text=$2
  shift 2
  [[ $text == *"$file"* ]] || text="$file: $text"
  expect_error "$name" 1 "$text" "$@"
}

# the options, each a function of the file it is given ($file)
opt_convert_in() { guarded "convert --in $kind" "$1" convert --in "$file" --out "$tmp/out/c.ckpt"; }
opt_split_checkpoint() {
  guarded "split --checkpoint $kind" "$1" split --checkpoint "$file" --dst-dir "$tmp/out/split" --dst-strategy "$D"
}
opt_transform_rank_checkpoint() {
  guarded "transform-rank --checkpoint $kind" "$1" transform-rank --rank 0 --checkpoint "0=$file" \
    --out "$tmp/out/r.ckpt" --dst-strategy "$D"
}
opt_src_strategy() {
  guarded "transform --src-strategy $kind" "$1" transform --src-dir "$tmp/s/src" --dst-dir "$tmp/out/t" \
    --src-strategy "$file" --dst-strategy "$D"
}
opt_dst_strategy() {
  guarded "transform --dst-strategy $kind" "$1" transform --src-dir "$tmp/s/src" --dst-dir "$tmp/out/t" \
    --src-strategy "$S" --dst-strategy "$file"
}
opt_rename_map() {
  guarded "transform --rename-map $kind" "$1" transform --src-dir "$tmp/s/src" --dst-dir "$tmp/out/t" \
    --src-strategy "$S" --dst-strategy "$D" --rename-map "$file"
}
opt_verify_manifest() {
  guarded "verify --manifest $kind" "$1" verify --src-dir "$tmp/s/src" --dst-dir "$tmp/good" \
    --src-strategy "$S" --dst-strategy "$D" --manifest "$file"
}
opt_inspect() { guarded "inspect $kind" "$1" inspect "$file"; }
opt_rank_list_src() { guarded "rank-list --src-strategy $kind" "$1" rank-list --rank 0 --src-strategy "$file" --dst-strategy "$D"; }
opt_rank_list_dst() { guarded "rank-list --dst-strategy $kind" "$1" rank-list --rank 0 --src-strategy "$S" --dst-strategy "$file"; }
opt_layout_file() { guarded "layout --layout @$kind" "$1" layout --layout "@$file"; }
# the checkpoint options take a directory for a Hugging Face checkpoint
checkpoint_options="opt_convert_in opt_split_checkpoint opt_transform_rank_checkpoint"
file_options="opt_src_strategy opt_dst_strategy opt_rename_map opt_verify_manifest opt_rank_list_src opt_rank_list_dst opt_layout_file"

for kind in fifo socket directory /dev/zero; do
  case $kind in
    fifo) file=$tmp/fifo what="is a FIFO, not a regular file" ;;
    socket) file=$tmp/sock what="is a socket, not a regular file" ;;
    directory) file=$tmp/dir what="is a directory, not a regular file" ;;
    /dev/zero) file=/dev/zero what="is a character device, not a regular file" ;;
  esac
  for o in $file_options; do "$o" "$what"; done
  for o in $checkpoint_options; do
    if [[ $kind == directory ]]; then "$o" "holds neither"; else "$o" "$what"; fi
  done
  if [[ $kind == directory ]]; then opt_inspect "holds neither"; else opt_inspect "$what"; fi
done
if [[ -e $tmp/out ]] && [[ -n $(find "$tmp/out" -type f) ]]; then fail "files left in out" "$(find "$tmp/out" -type f)"; else pass; fi

# --src-dir naming what is not a directory
for kind in fifo socket /dev/zero file; do
  case $kind in
    fifo) file=$tmp/fifo what="is a FIFO, not a directory" ;;
    socket) file=$tmp/sock what="is a socket, not a directory" ;;
    /dev/zero) file=/dev/zero what="is a character device, not a directory" ;;
    file) file=$S what="is a regular file, not a directory" ;;
  esac
  guarded "transform --src-dir $kind" "source directory $file $what" transform --src-dir "$file" \
    --dst-dir "$tmp/out/sd" --src-strategy "$S" --dst-strategy "$D"
done

# a manifest entry replaced by a FIFO: a difference saying what it is (its size was 2^64-1)
cp -r "$tmp/good" "$tmp/fifo_entry"  # its manifest's paths are relative to it
rm "$tmp/fifo_entry/rank_1/checkpoint_1.ckpt"
mkfifo "$tmp/fifo_entry/rank_1/checkpoint_1.ckpt"
run verify --src-dir "$tmp/s/src" --dst-dir "$tmp/good" --src-strategy "$S" --dst-strategy "$D" \
  --manifest "$tmp/fifo_entry/manifest.json"
if [[ $rc -eq 1 ]] && grep -qF "rank_1/checkpoint_1.ckpt: cannot be read: manifest: $tmp/fifo_entry/rank_1/checkpoint_1.ckpt: is a FIFO, not a regular file" <<<"$out" &&
  ! grep -q 18446744073709551615 <<<"$out" && grep -qF ": 1 difference" <<<"$out" &&
  grep -qF "1 difference between" <<<"$err"; then
  pass
else
  fail "verify --manifest with a FIFO entry" "exit code $rc" "stdout: $out" "stderr: $err"
fi

# rank-list checks the target strategy's tensor_shape as the transform does
strategy() {  # strategy FILE SHAPE: parameter w of SHAPE on 2 devices, dim 0 split in 2
  printf '{"current_stage": 0, "parallel_strategy_item": {}, "parallel_layout_item": {"w": {"dev_matrix": [2, 1], "tensor_map": [1, -1], "tensor_shape": %s, "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}' "$2" >"$1"
}
strategy "$tmp/src.json" "[64, 32]"
strategy "$tmp/neg.json" "[-64, 32]"
strategy "$tmp/odd.json" "[63, 32]"
neg="parameter 'w' dev[2,1] map[1,-1] shape[-64,32]: dim 0 has negative size -64"
odd="parameter 'w' dev[2,1] map[1,-1] shape[63,32]: dim 0 of size 63 does not divide into 2 equal slices"
file=$tmp/neg.json
guarded "rank-list, negative tensor_shape" "$neg" rank-list --rank 0 --dst-strategy "$file"
guarded "rank-list, tensor_shape against the source's" \
  "parameter 'w': tensor_shape [-64,32] disagrees with the source's full shape [64,32] (from the source strategy $tmp/src.json)" \
  rank-list --rank 0 --src-strategy "$tmp/src.json" --dst-strategy "$file"
file=$tmp/odd.json
guarded "rank-list, tensor_shape not divisible" "$odd" rank-list --rank 0 --src-strategy "$S" --dst-strategy "$file"
guarded "rank-list, odd tensor_shape against the source's" \
  "parameter 'w': tensor_shape [63,32] disagrees with the source's full shape [64,32]" \
  rank-list --rank 0 --src-strategy "$tmp/src.json" --dst-strategy "$file"
expect_text "rank-list, good tensor_shape" '^\[0\]$' rank-list --rank 0 --src-strategy "$tmp/src.json" --dst-strategy "$tmp/src.json"

# inspect of a strategy that fails half way prints nothing before the error
guarded "inspect a bad strategy" "$odd" inspect "$file"
file=$tmp/neg.json
guarded "inspect a bad strategy, JSON" "$neg" inspect "$file" --json

finish
