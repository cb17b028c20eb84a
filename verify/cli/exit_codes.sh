#!/usr/bin/env bash
# Exit codes (docs/cli.md#exit-codes): every subcommand refuses an unknown flag, a missing required
# option and a bad value with exit 2 and one line naming the option; so does every checkpoint
# command (and verify) for each shared option: --format, --rename, --rename-map, --dtype,
# --include, --exclude, --max-shard-size, --max-memory; the cases that once escaped as
# exit 3 ("internal error") now exit 1 (bad input) or 2 (bad usage) with a clear message; and the
# strict JSON inputs (strategy files, --rename-map) refuse unknown keys, trailing text and
# duplicate keys with exit 1.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

L='{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4]}'
S=$tmp/s.json
printf '%s\n' '{"current_stage": 0, "parallel_layout_item": {"w": {"dev_matrix": [2], "tensor_map": [0],
  "tensor_shape": [4], "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}' >"$S"
printf '{}' >"$tmp/map.json"

# every subcommand: an unknown flag, a missing required option, a bad value -> 2
expect_error "layout: unknown flag" 2 "--bogus" layout --layout "$L" --bogus
expect_error "layout: missing --layout" 2 "--layout is required" layout
expect_error "layout: bad value" 2 "--json" layout --layout "$L" --json=maybe
expect_error "plan: unknown flag" 2 "--bogus" plan --src "$L" --dst "$L" --bogus
expect_error "plan: missing --dst" 2 "--dst is required" plan --src "$L"
expect_error "plan: bad value" 2 'unknown dtype "float33"' plan --src "$L" --dst "$L" --dtype float33
expect_error "transform: unknown flag" 2 "--bogus" transform --src-dir "$tmp" --dst-dir "$tmp/o" --bogus
expect_error "transform: missing --dst-dir" 2 "--dst-dir is required" transform --src-dir "$tmp"
expect_error "transform: bad value" 2 "--read-mode" transform --src-dir "$tmp" --dst-dir "$tmp/o" --read-mode fast
expect_error "transform-rank: unknown flag" 2 "--bogus" transform-rank --rank 0 --checkpoint "0=$tmp/a.ckpt" --out "$tmp/o.ckpt" --bogus
expect_error "transform-rank: missing --rank" 2 "--rank is required" transform-rank --checkpoint "0=$tmp/a.ckpt" --out "$tmp/o.ckpt"
expect_error "transform-rank: bad value" 2 "--rank" transform-rank --rank x --checkpoint "0=$tmp/a.ckpt" --out "$tmp/o.ckpt"
expect_error "rank-list: unknown flag" 2 "--bogus" rank-list --rank 0 --bogus
expect_error "rank-list: missing --rank" 2 "--rank is required" rank-list
expect_error "rank-list: bad value" 2 "--rank: not a rank: -1 (a whole number, 0 or more)" rank-list --rank -1
expect_error "merge-strategies: unknown flag" 2 "--bogus" merge-strategies --src-dir "$tmp" --dst-file "$tmp/m.json" --bogus
expect_error "merge-strategies: missing --dst-file" 2 "--dst-file is required" merge-strategies --src-dir "$tmp"
expect_error "merge-strategies: bad value" 2 "--force" merge-strategies --src-dir "$tmp" --dst-file "$tmp/m.json" --force=maybe
expect_error "inspect: unknown flag" 2 "--bogus" inspect "$S" --bogus
expect_error "inspect: missing file" 2 "file is required" inspect
expect_error "inspect: bad value" 2 "--json" inspect "$S" --json=maybe
expect_error "merge: unknown flag" 2 "--bogus" merge --src-dir "$tmp" --out "$tmp/o.ckpt" --bogus
expect_error "merge: missing --out" 2 "--out is required" merge --src-dir "$tmp"
expect_error "merge: bad value" 2 "--format" merge --src-dir "$tmp" --out "$tmp/o.ckpt" --format zip
expect_error "split: unknown flag" 2 "--bogus" split --checkpoint "$tmp/a.ckpt" --dst-dir "$tmp/o" --dst-strategy "$S" --bogus
expect_error "split: missing --dst-strategy" 2 "--dst-strategy is required" split --checkpoint "$tmp/a.ckpt" --dst-dir "$tmp/o"
expect_error "split: bad value" 2 "--jobs" split --checkpoint "$tmp/a.ckpt" --dst-dir "$tmp/o" --dst-strategy "$S" --jobs many
expect_error "convert: unknown flag" 2 "--bogus" convert --in "$tmp/a.ckpt" --out "$tmp/o.ckpt" --bogus
expect_error "convert: missing --in" 2 "--in is required" convert --out "$tmp/o.ckpt"
expect_error "convert: bad value" 2 "--max-memory: not a size: 12XB" convert --in "$tmp/a.ckpt" --out "$tmp/o.ckpt" --max-memory 12XB
expect_error "verify: unknown flag" 2 "--bogus" verify --src-dir "$tmp" --dst-dir "$tmp" --bogus
expect_error "verify: missing --dst-dir" 2 "--dst-dir: the outputs are required: --dst-dir or --out" verify --src-dir "$tmp"
expect_error "verify: bad value" 2 "--read-mode" verify --src-dir "$tmp" --dst-dir "$tmp" --read-mode fast

# the options every checkpoint command shares (and verify, which takes the run's): each with a bad
# value -> 2, one line naming the option, on every subcommand that has it
declare -A base=(
  [transform]="transform --src-dir $tmp --dst-dir $tmp/o"
  [split]="split --checkpoint $tmp/a.ckpt --dst-dir $tmp/o --dst-strategy $S"
  [merge]="merge --src-dir $tmp --out $tmp/o.ckpt"
  [convert]="convert --in $tmp/a.ckpt --out $tmp/o.ckpt"
  [transform-rank]="transform-rank --rank 0 --checkpoint 0=$tmp/a.ckpt --out $tmp/o.ckpt"
  [verify]="verify --src-dir $tmp --dst-dir $tmp/o"
)
for cmd in transform split merge convert transform-rank verify; do
  read -r -a b <<<"${base[$cmd]}"
  formats="ckpt,safetensors,hf"  # and dcp where all target ranks are written at once
  [[ $cmd == transform-rank ]] || formats+=",dcp"
  expect_error "$cmd: --format zip" 2 "--format: zip not in {$formats}" "${b[@]}" --format zip
  expect_error "$cmd: --rename without =" 2 "--rename: not REGEX=REPLACEMENT: layer1" "${b[@]}" --rename layer1
  expect_error "$cmd: --rename =x" 2 "--rename: not REGEX=REPLACEMENT: =x" "${b[@]}" --rename =x
  expect_error "$cmd: --rename-map that does not exist" 2 "--rename-map: Path does not exist: $tmp/none.json" \
    "${b[@]}" --rename-map "$tmp/none.json"
  expect_error "$cmd: --dtype float33" 2 "--dtype: not a dtype: float33" "${b[@]}" --dtype float33
  expect_error "$cmd: --dtype =float16" 2 "--dtype: not GLOB=DTYPE: =float16" "${b[@]}" --dtype =float16
  expect_error "$cmd: --include without a value" 2 "--include" "${b[@]}" --include
  expect_error "$cmd: --exclude without a value" 2 "--exclude" "${b[@]}" --exclude
  if [[ $cmd != verify ]]; then
    expect_error "$cmd: --max-shard-size 0" 2 "--max-shard-size: not a size: 0" "${b[@]}" --format hf --max-shard-size 0
    expect_error "$cmd: --max-shard-size 5XB" 2 "--max-shard-size: not a size: 5XB" "${b[@]}" --format hf --max-shard-size 5XB
    expect_error "$cmd: --max-memory 0" 2 "--max-memory: not a size: 0" "${b[@]}" --max-memory 0
  fi
done
for cmd in transform split; do  # --max-shard-size does nothing without --format hf: refused
  read -r -a b <<<"${base[$cmd]}"
  expect_error "$cmd: --max-shard-size without --format hf" 2 "--max-shard-size: only with --format hf" \
    "${b[@]}" --max-shard-size 1KB
  expect_error "$cmd: --max-shard-size with --format safetensors" 2 "--max-shard-size: only with --format hf" \
    "${b[@]}" --format safetensors --max-shard-size 1KB
done
read -r -a b <<<"${base[transform-rank]}"
expect_error "transform-rank: --format safetensors with a .ckpt --out" 2 \
  "--format: safetensors, but --out $tmp/o.ckpt does not end in .safetensors" "${b[@]}" --format safetensors
read -r -a b <<<"${base[verify]}"
expect_error "verify: --max-shard-size (not a verify option)" 2 "--max-shard-size" "${b[@]}" --max-shard-size 1KB

# once exit 3 (internal error): options that do not go together are bad usage (2), with the option
expect_error "two dtypes for all parameters" 2 "--dtype: given two dtypes for all parameters: Float16 and BFloat16" \
  merge --src-dir "$tmp" --out "$tmp/o.ckpt" --dtype float16 --dtype bfloat16
expect_error "--max-shard-size without --format hf" 2 "--max-shard-size: only with --format hf" \
  merge --src-dir "$tmp" --out "$tmp/x.ckpt" --max-shard-size 1KB
expect_error "--format ckpt with a .safetensors --out" 2 "--format: ckpt, but --out $tmp/x.safetensors ends in .safetensors" \
  convert --in "$tmp/a.ckpt" --format ckpt --out "$tmp/x.safetensors"
# a size of 0: refused alike by --max-memory (once read as "no bound") and --max-shard-size
expect_error "--max-memory 0" 2 "--max-memory: not a size: 0 (a whole number above 0" \
  merge --src-dir "$tmp" --out "$tmp/o.ckpt" --max-memory 0
expect_error "--max-shard-size 0" 2 "--max-shard-size: not a size: 0 (a whole number above 0" \
  merge --src-dir "$tmp" --out "$tmp/o" --format hf --max-shard-size 0
# a layout of 2^31-1 ranks: refused before anything is allocated for them (once std::bad_alloc,
# exit 3, or the kernel's OOM killer), input error 1
huge='{"dev_matrix":[2147483647],"tensor_map":[0],"shape":[2147483647]}'
expect_error "plan of 2^31-1 ranks" 1 "--src: 2147483647 ranks, more than the 1048576 (2^20)" \
  plan --src "$huge" --dst '{"dev_matrix":[1],"tensor_map":[-1],"shape":[2147483647]}' --summary
expect_error "layout of 2^31-1 ranks" 1 "--layout: 2147483647 ranks, more than the 1048576" layout --layout "$huge"
expect_text "a plan of 2^20 ranks still runs" "minimal" \
  plan --src '{"dev_matrix":[1048576],"tensor_map":[0],"shape":[1048576]}' \
       --dst '{"dev_matrix":[1],"tensor_map":[-1],"shape":[1048576]}' --summary

# strict JSON inputs: bad input, 1
sed 's/opt_weight_shard_size/opt_weight_shard_sise/' "$S" >"$tmp/typo.json"
expect_error "strategy: unknown key" 1 \
  "strategy: $tmp/typo.json: parameter 'w': unknown key 'opt_weight_shard_sise' (did you mean 'opt_weight_shard_size'?)" \
  inspect "$tmp/typo.json"
expect_error "strategy: unknown key (rank-list)" 1 "unknown key 'opt_weight_shard_sise'" \
  rank-list --rank 0 --src-strategy "$tmp/typo.json"
{ cat "$S"; echo 'garbage'; } >"$tmp/trailing.json"
expect_error "strategy: trailing text" 1 "strategy: $tmp/trailing.json: invalid JSON: parse error at line 3" inspect "$tmp/trailing.json"
printf '{"w0": "q"} garbage' >"$tmp/trailing_map.json"
expect_error "rename map: trailing text" 1 "--rename-map $tmp/trailing_map.json: invalid JSON: parse error at line 1, column 13" \
  merge --src-dir "$tmp" --out "$tmp/o.ckpt" --rename-map "$tmp/trailing_map.json"
printf '{"w0": "q",\n "w0": "r"}' >"$tmp/duplicate_map.json"
expect_error "rename map: duplicate key" 1 \
  "--rename-map $tmp/duplicate_map.json: JSON object has the key 'w0' twice (the second at line 2, column 2)" \
  merge --src-dir "$tmp" --out "$tmp/o.ckpt" --rename-map "$tmp/duplicate_map.json"

finish
