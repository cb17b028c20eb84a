#!/usr/bin/env bash
# Checkpoint transformation through the program, every output cross-checked value for value by
# verify/python/ms_scenario.py (numpy slicing of the full tensors, protobuf's own parser): the
# seed scenarios 8->4 retrain (optimizer sharding), 8->4 inference, a 2-stage pipeline merged to
# 4 ranks, 8->3, 6->4, merge to full, split full -> 4, ckpt -> safetensors while transforming;
# transform-rank with exactly the ranks rank-list prints; inspect; progress and summaries.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"


# check NAME OUT: the Python checker accepts OUT for the scenario in $d
check() {
  local report
  if report=$("$PY" "$SC" check "$d" "$2" 2>&1); then pass; else fail "$1" "$report"; fi
}

# transform_ok NAME ARGS...: `reshard transform` succeeds, then the checker accepts $d/out
transform_ok() {
  local name=$1
  shift
  run transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}" "$@"
  if [[ $rc -ne 0 ]]; then
    fail "$name" "exit code $rc" "stderr: $err"
    return
  fi
  check "$name" "$d/out"
}

# by_rank N: transform-rank for targets 0..N-1, each from exactly the files rank-list names,
# writes the same bytes as transform did to $d/out
by_rank() {
  local t r ranks files
  for ((t = 0; t < $1; t++)); do
    run rank-list --rank "$t" "${strategies[@]}"
    ranks=$("$PY" -c "import json,sys; print(' '.join(map(str, json.loads(sys.argv[1]))))" "$out")
    files=()
    for r in $ranks; do files+=("$r=$d/src/rank_$r/net.ckpt"); done
    run transform-rank --rank "$t" --checkpoint "${files[@]}" --out "$d/byrank/rank_$t/checkpoint_$t.ckpt" "${strategies[@]}"
    if [[ $rc -ne 0 ]]; then fail "transform-rank $t" "stderr: $err"; continue; fi
    if cmp -s "$d/out/rank_$t/checkpoint_$t.ckpt" "$d/byrank/rank_$t/checkpoint_$t.ckpt"; then pass; else
      fail "transform-rank $t from ranks [$ranks] writes the same bytes as transform"
    fi
  done
  check "transform-rank outputs" "$d/byrank"
}

scenario retrain_8to4
transform_ok "8->4 retrain, optimizer sharding on the target" --jobs 2
expect_text "the summary names the files and bytes" "files written +4 \(" transform --src-dir "$d/src" \
  --dst-dir "$d/out2" "${strategies[@]}"
if grep -qxF "transformed $d/src -> $d/out2 (4 target ranks, ckpt)" <<<"$out"; then pass; else
  fail "the summary's first line names the directories, the target ranks and the format" "stdout: $out"; fi
expect_json "--json summary" "j['files'] == 4 and j['sliced'] == 28 and j['copied'] == 16 and j['bytes_written'] > 0 and j['peak_rss_bytes'] > 0" \
  transform --src-dir "$d/src" --dst-dir "$d/out3" "${strategies[@]}" --json
expect_json "rank-list is minimal" "j == [0, 1, 2, 3]" rank-list --rank 0 "${strategies[@]}"
# a negative control: the checker notices two target files swapped
mv "$d/out/rank_0/checkpoint_0.ckpt" "$d/x" && mv "$d/out/rank_1/checkpoint_1.ckpt" "$d/out/rank_0/checkpoint_0.ckpt" &&
  mv "$d/x" "$d/out/rank_1/checkpoint_1.ckpt"
if "$PY" "$SC" check "$d" "$d/out" >/dev/null 2>&1; then fail "the checker must notice swapped files"; else pass; fi
# progress: only when asked (stderr is not a terminal here)
run transform --src-dir "$d/src" --dst-dir "$d/out4" "${strategies[@]}"
if [[ $rc -eq 0 && -z $err ]]; then pass; else fail "no progress bar unless a terminal or --progress" "stderr: $err"; fi
run transform --src-dir "$d/src" --dst-dir "$d/out5" "${strategies[@]}" --progress
if [[ $rc -eq 0 && $err == *"100% [##############################]"*"4/4 files"* ]]; then pass; else
  fail "--progress draws a bar to 100%" "stderr: $err"
fi

scenario infer_8to4
transform_ok "8->4 inference (JSON target strategy)"

scenario infer_8to4_safetensors
transform_ok "8->4 to safetensors while transforming" --format safetensors
expect_json "inspect safetensors" "j['kind'] == 'checkpoint' and j['format'] == 'safetensors' and len(j['parameters']) == 6" \
  inspect "$d/out/rank_3/checkpoint_3.safetensors" --json

scenario pipeline_to4
expect_text "merge-strategies" "^merged .*: 2 stages \[0,1\], 4 parameter layouts" merge-strategies --src-dir "$d/stages" \
  --dst-file "$d/merged_strategy.ckpt"
expect_json "inspect a merged strategy" "j['kind'] == 'strategy' and j['pipeline'] and j['stages'] == 2 and j['ranks'] == 8" \
  inspect "$d/merged_strategy.ckpt" --json
transform_ok "2-stage pipeline merged, to 4 ranks"

scenario to_pipeline
transform_ok "4 ranks to a 2-stage pipeline (a rank gets its stage's parameters)"
by_rank 4
expect_json "a target rank of stage 1 gets stage 1's parameters" "sorted(p['name'] for p in j['parameters']) == ['embedding', 'global_step', 'head', 'layer1.weight', 'learning_rate']" \
  inspect "$d/out/rank_3/checkpoint_3.ckpt" --json

scenario uneven_8to3
transform_ok "8->3 (param_split_shape, uneven source splits)"
by_rank 3

scenario six_to_4
transform_ok "6->4 (safetensors sources, JSON source strategy)" --jobs 3

scenario merge_8
run merge --src-dir "$d/src" --out "$d/merged.ckpt" "${strategies[@]}"
if [[ $rc -eq 0 ]]; then check "merge 8 ranks to one full checkpoint" "$d/merged.ckpt"; else fail "merge" "stderr: $err"; fi

scenario split_4
run split --checkpoint "$d/full.ckpt" --dst-dir "$d/out" "${strategies[@]}"
if [[ $rc -eq 0 ]]; then check "split a full checkpoint to 4 ranks" "$d/out"; else fail "split" "stderr: $err"; fi
if grep -qxF "split $d/full.ckpt -> $d/out (4 target ranks, ckpt)" <<<"$out"; then pass; else
  fail "split's summary names the file, the target ranks and the format" "stdout: $out"; fi
expect_json "inspect a checkpoint" "[p['name'] for p in j['parameters']][:3] == ['layer1.weight', 'layer1.bias', 'embedding'] and any(p.get('map_tensor') for p in j['parameters'])" \
  inspect "$d/full.ckpt" --json
expect_text "inspect a strategy" "^layer1.weight +0 +dev\[2,2,1\] map\[1,0\] opt\(step 2, size 2\)$" inspect "$d/dst_strategy.ckpt"

# convert: ckpt -> safetensors -> ckpt keeps every tensor
scenario infer_8to4
run transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}"
run convert --in "$d/out/rank_1/checkpoint_1.ckpt" --out "$d/c.safetensors"
run convert --in "$d/c.safetensors" --out "$d/c.ckpt"
same=$("$PY" - "$RESHARD" "$d/out/rank_1/checkpoint_1.ckpt" "$d/c.ckpt" <<'EOF'
import json, subprocess, sys
def params(f):
    j = json.loads(subprocess.run([sys.argv[1], "inspect", f, "--json"], capture_output=True, check=True).stdout)
    return sorted((p["name"], p["dtype"], p["dims"], p["bytes"]) for p in j["parameters"])
print(params(sys.argv[2]) == params(sys.argv[3]))
EOF
)
if [[ $same == True ]]; then pass; else fail "convert ckpt -> safetensors -> ckpt keeps names, dtypes, dims"; fi

finish
