#!/usr/bin/env bash
# reshard check-rank-list on the MindSpore tutorial's 8 -> 4 retrain scenario (verify/python/
# ms_scenario.py): MindSpore's rank list (every source rank holding a slice that overlaps the
# target's, computed here from the scenario's layouts) is sufficient and not minimal, and names
# rank-list's list, itself sufficient; the ranks kept suffice for transform-rank (the same bytes
# as transform), and without any one of them the list is insufficient and names what is missing
# (for target 1 the kept [0,1,2,3] is shorter than rank-list's [0,1,2,3,6,7]); the kept ranks
# of all eight suffice likewise for a merged pipeline source and a JSON target; bad input exits 1,
# bad usage 2.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

scenario retrain_8to4
run transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}"
[[ $rc -eq 0 ]] || fail "transform" "stderr: $err"

# MindSpore's rule for target rank $1: every source rank whose slice of some parameter overlaps
# the target's slice of it
overlapping() {
  PYTHONPATH="$SRC/verify/python" "$PY" -c "
import sys, ms_scenario as m
params, M, N, _ = m.scenario('retrain_8to4')
t, out = int(sys.argv[1]), set()
for p in params:
    if p.src is None or p.dst is None:
        continue
    tb = m.rank_box(p.dst, p.shape, t)
    for r in range(M):
        sb = m.rank_box(p.src, p.shape, r)
        if all(a < d and c < b for (a, b), (c, d) in zip(sb, tb)):
            out.add(r)
print('[' + ','.join(map(str, sorted(out))) + ']')" "$1"
}

for t in 0 1 2 3; do
  ms=$(overlapping "$t")
  run rank-list --rank "$t" "${strategies[@]}"
  minimal=$out
  expect_json "target $t: MindSpore's list $ms is sufficient, with the minimal list $minimal" \
    "j['sufficient'] and not j['minimal_list'] and j['rank_list'] == $minimal and set(j['kept']) <= set($minimal) and sorted(j['superfluous'] + j['kept']) == $ms and not j['missing']" \
    check-rank-list --rank "$t" --ranks "$ms" "${strategies[@]}" --json
  expect_json "target $t: rank-list's list $minimal is sufficient" \
    "j['sufficient'] and set(j['kept']) <= set($minimal)" \
    check-rank-list --rank "$t" --ranks "$minimal" "${strategies[@]}" --json
  # the ranks MindSpore's list keeps suffice for transform-rank: the same bytes as transform
  kept=$("$PY" -c "import json,sys; print(' '.join(map(str, json.loads(sys.argv[1])['kept'])))" "$out")
  files=()
  for r in $kept; do files+=("$r=$d/src/rank_$r/net.ckpt"); done
  run transform-rank --rank "$t" --checkpoint "${files[@]}" --out "$d/kept/rank_$t/checkpoint_$t.ckpt" "${strategies[@]}"
  if [[ $rc -eq 0 ]] && cmp -s "$d/out/rank_$t/checkpoint_$t.ckpt" "$d/kept/rank_$t/checkpoint_$t.ckpt"; then pass; else
    fail "target $t: transform-rank from the kept ranks [$kept] writes what transform does" "exit code $rc" "stderr: $err"
  fi
  # without any one of the kept ranks: insufficient, exit 1, what is missing named
  for r in $kept; do
    less=$("$PY" -c "import sys; print([int(x) for x in sys.argv[1].split() if x != sys.argv[2]])" "$kept" "$r")
    run check-rank-list --rank "$t" --ranks "$less" "${strategies[@]}" --json
    if [[ $rc -eq 1 ]] && printf '%s' "$out" | "$PY" -c "
import json, sys
j = json.load(sys.stdin)
base = j['base_rank'] == $r
sys.exit(0 if not j['sufficient'] and (j['missing'] or base) and j['base_listed'] != base else 1)"; then pass; else
      fail "target $t without rank $r of the kept [$kept] is insufficient (exit 1)" "exit code $rc" "stdout: $out" "stderr: $err"
    fi
  done
done

# the text form: the verdict, the superfluous ranks and the minimal list
ms=$(overlapping 1)
expect_text "text: sufficient" "^verdict +sufficient" check-rank-list --rank 1 --ranks "$ms" "${strategies[@]}"
# (rank-list takes each slice from the replica nearest the target: [0,1,2,3], where round robin's
# turns gave [0,1,2,3,6,7])
if grep -qE "^superfluous +\[4,5,6,7\]" <<<"$out" && grep -qE "^kept +\[0,1,2,3\]" <<<"$out" &&
  grep -qE "^rank-list +\[0,1,2,3\]" <<<"$out"; then pass; else
  fail "text: target 1's superfluous ranks [4,5,6,7], kept [0,1,2,3], and rank-list's [0,1,2,3]" "stdout: $out"; fi
run check-rank-list --rank 1 --ranks '[0,1,2]' "${strategies[@]}"
if [[ $rc -eq 1 ]] && grep -qE "^verdict +INSUFFICIENT" <<<"$out" && grep -qE "^  missing '[^']+': \[" <<<"$out" &&
  grep -qF "the rank list is insufficient for target rank 1" <<<"$err"; then pass; else
  fail "text: an insufficient list prints the missing boxes and exits 1" "exit code $rc" "stdout: $out" "stderr: $err"; fi
printf '{"ranks": %s}' "$ms" >"$tmp/ranks.json"
expect_json "--ranks @file holding {\"ranks\": [...]}" "j['sufficient']" \
  check-rank-list --rank 1 --ranks "@$tmp/ranks.json" "${strategies[@]}" --json
expect_json "--ranks @- from standard input" "j['sufficient']" \
  check-rank-list --rank 1 --ranks @- "${strategies[@]}" --json <"$tmp/ranks.json"

# bad input: exit 1, one line naming it; bad usage: exit 2
expect_error "a listed rank outside the source" 1 "rank 8 is not a rank of the source strategy" \
  check-rank-list --rank 0 --ranks '[0,8]' "${strategies[@]}"
expect_error "a target rank outside the target" 1 "target rank 4 is not a rank of the target strategy" \
  check-rank-list --rank 4 --ranks '[0]' "${strategies[@]}"
expect_error "--ranks not JSON" 1 "--ranks" check-rank-list --rank 0 --ranks '[0,' "${strategies[@]}"
expect_error "--ranks not a list of ranks" 1 "ranks[1]" check-rank-list --rank 0 --ranks '[0,-1]' "${strategies[@]}"
expect_error "--ranks missing" 2 "--ranks" check-rank-list --rank 0 "${strategies[@]}"

# a merged 2-stage pipeline source and a JSON target strategy: with every source rank listed, the
# ranks kept suffice for transform-rank, for every target
for sc in pipeline_to4 infer_8to4; do
  scenario "$sc"
  if [[ $sc == pipeline_to4 ]]; then run merge-strategies --src-dir "$d/stages" --dst-file "$d/merged_strategy.ckpt"; fi
  run transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}"
  [[ $rc -eq 0 ]] || fail "$sc: transform" "stderr: $err"
  for t in 0 1 2 3; do
    run check-rank-list --rank "$t" --ranks '[0,1,2,3,4,5,6,7]' "${strategies[@]}" --json
    kept=$("$PY" -c "import json,sys; j=json.loads(sys.argv[1]); print(' '.join(map(str, j['kept'])) if j['sufficient'] else '')" "$out")
    files=()
    for r in $kept; do files+=("$r=$d/src/rank_$r/net.ckpt"); done
    run transform-rank --rank "$t" --checkpoint "${files[@]}" --out "$d/kept/rank_$t/checkpoint_$t.ckpt" "${strategies[@]}"
    if [[ -n $kept && $rc -eq 0 ]] && cmp -s "$d/out/rank_$t/checkpoint_$t.ckpt" "$d/kept/rank_$t/checkpoint_$t.ckpt"; then pass; else
      fail "$sc target $t: transform-rank from the kept ranks [$kept] writes what transform does" "exit code $rc" "stderr: $err"
    fi
  done
done

finish
