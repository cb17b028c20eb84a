#!/usr/bin/env bash
# reshard execute: a plan saved with --plan-out, written whole or in K parts, each part a separate
# process (here run in a shuffled order, two of them at once), writes byte for byte the files of
# the transform itself (K = 1, 2, 3; a transform, an uneven one, a pipeline, a merge into a
# Hugging Face checkpoint, a split). A source that changed since the plan was made, a tampered
# plan (a transfer dropped, a box shifted, a sender that does not hold its box), a plan of
# another version, a bad --part and an existing output without --force are refused with exit 1
# (2 for the bad --part), nothing written.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

# same_tree A B: every file under A and B, byte for byte (no staged file left in B)
same_tree() {
  if diff -r "$1" "$2" >/dev/null 2>&1 && ! find "$2" -name '*.part' -o -name '*.tmp' | grep -q .; then
    return 0
  fi
  return 1
}

# parts NAME PLAN OUTDIR K: runs the K parts as separate processes, in a shuffled order, two at once
parts() {
  local name=$1 plan=$2 k=$3 i
  local order
  order=$(seq 1 "$k" | shuf --random-source=<(yes))
  local pids=() codes=0
  for i in $order; do
    "$RESHARD" execute "$plan" --part "$i/$k" --no-sync >"$tmp/part_$i.out" 2>"$tmp/part_$i.err" &
    pids+=($!)
    if [[ ${#pids[@]} -ge 2 ]]; then
      wait "${pids[0]}" || codes=1
      pids=("${pids[@]:1}")
    fi
  done
  for p in "${pids[@]}"; do wait "$p" || codes=1; done
  if [[ $codes -ne 0 ]]; then
    fail "$name: a part of $k failed" "$(cat "$tmp"/part_*.err)"
    return 1
  fi
  return 0
}

for name in retrain_8to4 uneven_8to3 to_pipeline; do
  scenario "$name"
  run transform --src-dir "$d/src" --dst-dir "$d/whole" "${strategies[@]}" --no-sync
  if [[ $rc -ne 0 ]]; then fail "$name: transform" "rc $rc" "$err"; continue; fi
  for k in 1 2 3; do
    run transform --src-dir "$d/src" --dst-dir "$d/p$k" "${strategies[@]}" --plan-out "$d/plan$k.json"
    if [[ $rc -ne 0 ]]; then fail "$name: --plan-out" "rc $rc" "$err"; continue; fi
    if parts "$name" "$d/plan$k.json" "$k"; then
      if same_tree "$d/whole" "$d/p$k"; then pass; else fail "$name: $k parts differ from the transform" "$(diff -r "$d/whole" "$d/p$k" 2>&1 | head -5)"; fi
    fi
  done
done

# the parts (law E9): each a contiguous run of the plan's targets, in part order, writing within
# the largest target's bytes of total / K, and opening exactly the source files its targets read
for name in uneven_8to3 to_pipeline; do
  scenario "$name"
  run transform --src-dir "$d/src" --dst-dir "$d/e9" "${strategies[@]}" --plan-out "$d/e9.json"
  for k in 2 3; do
    rm -rf "$d/e9"
    sums=()
    for i in $(seq 1 "$k"); do
      run execute "$d/e9.json" --part "$i/$k" --no-sync --json
      if [[ $rc -ne 0 ]]; then fail "$name: part $i/$k" "rc $rc" "$err"; fi
      sums+=("$out")
    done
    if report=$("$PY" - "$d/e9.json" "${sums[@]}" 2>&1 <<'PYEOF'
import json, sys
plan = json.load(open(sys.argv[1]))
parts = [json.loads(s) for s in sys.argv[2:]]
k = len(parts)
by_file = {t["path"]: t for t in plan["targets"]}
size = {t["path"]: sum(i["bytes"] for i in t["items"]) for t in plan["targets"]}
total, largest = sum(size.values()), max(size.values())
order = [t["path"] for t in plan["targets"]]
seen = []
for n, p in enumerate(parts):
    mine = [o for o in p["outputs"]]
    seen += mine
    load = sum(size[o] for o in mine)
    if not abs(load - total / k) < largest:
        sys.exit("part %d/%d writes %d bytes: not within %d of %d / %d" % (n + 1, k, load, largest, total, k))
    reads = set()
    for o in mine:
        for i in by_file[o]["items"]:
            if "copy" in i:
                reads.add(i["copy"]["rank"])
            for x in i.get("slice", {}).get("transfers", []):
                reads.add(x["rank"])
    if p["source_files"] != len(reads):
        sys.exit("part %d/%d opened %d source files, its targets read %d" % (n + 1, k, p["source_files"], len(reads)))
if seen != order:
    sys.exit("the parts are not contiguous runs of the plan's targets in order: %s" % seen)
PYEOF
    ); then pass; else fail "$name: $k parts: contiguous, balanced by bytes, each opening only its sources" "$report"; fi
  done
done

# merge into a Hugging Face checkpoint (shards and index), and split
scenario retrain_8to4
run merge --src-dir "$d/src" --out "$d/hf" "${strategies[0]}" "${strategies[1]}" --format hf --max-shard-size 100KB \
  --exclude optimizer_name --exclude 'emb_table*' --no-sync
run merge --src-dir "$d/src" --out "$d/hf2" "${strategies[0]}" "${strategies[1]}" --format hf --max-shard-size 100KB \
  --exclude optimizer_name --exclude 'emb_table*' --plan-out "$d/merge.json"
run execute "$d/merge.json" --no-sync --json
if [[ $rc -eq 0 ]] && same_tree "$d/hf" "$d/hf2"; then pass; else fail "execute of a merge --format hf plan" "rc $rc" "$err"; fi
run merge --src-dir "$d/src" --out "$d/full.ckpt" "${strategies[0]}" "${strategies[1]}" --no-sync
run split --checkpoint "$d/full.ckpt" --dst-dir "$d/split" "${strategies[2]}" "${strategies[3]}" --no-sync
run split --checkpoint "$d/full.ckpt" --dst-dir "$d/split2" "${strategies[2]}" "${strategies[3]}" --plan-out "$d/split.json"
if parts split "$d/split.json" 2 && same_tree "$d/split" "$d/split2"; then pass; else fail "execute of a split plan in 2 parts"; fi

# refusals: nothing written, exit 1 (a bad --part: 2)
scenario retrain_8to4
run transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}" --plan-out "$d/plan.json"
tamper() {  # tamper WHAT: writes $d/bad.json
  "$PY" - "$d/plan.json" "$d/bad.json" "$1" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
what = sys.argv[3]
for t in p["targets"]:
    for i in t["items"]:
        xs = i.get("slice", {}).get("transfers", [])
        if len(xs) < 2:
            continue
        if what == "drop":
            del xs[0]
        elif what == "shift":
            xs[0]["offset"][0] += 1
        elif what == "sender":
            # a source rank whose file does not hold the transfer's box
            name = i["source_name"]
            held = next(s["holds"][name] for s in p["sources"] if s["rank"] == xs[0]["rank"])
            for s in p["sources"]:
                h = s["holds"].get(name)
                if h is None or h != held:
                    xs[0]["rank"] = s["rank"]
                    break
            else:
                continue
        elif what == "version":
            p["checkpoint_plan_version"] = 1
        json.dump(p, open(sys.argv[2], "w"))
        sys.exit(0)
sys.exit(1)
PYEOF
}
for what in drop shift sender version; do
  tamper "$what"
  run execute "$d/bad.json" --no-sync
  if [[ $rc -eq 1 && ! -e $d/out ]] && grep -q "bad.json" <<<"$err"; then pass; else fail "a tampered plan ($what)" "rc $rc" "$err"; fi
done
if [[ $what == version ]] && grep -q "version 1" <<<"$err"; then pass; else fail "the version named" "$err"; fi
run execute "$d/plan.json" --part 3/2
if [[ $rc -eq 2 && ! -e $d/out ]]; then pass; else fail "--part 3/2" "rc $rc" "$err"; fi
run execute "$d/plan.json" --part x
if [[ $rc -eq 2 ]]; then pass; else fail "--part x" "rc $rc" "$err"; fi
# an existing output, then --force
run execute "$d/plan.json" --no-sync
if [[ $rc -eq 0 ]]; then pass; else fail "execute" "rc $rc" "$err"; fi
run execute "$d/plan.json" --no-sync
if [[ $rc -eq 1 ]] && grep -q "exists" <<<"$err"; then pass; else fail "execute onto existing outputs" "rc $rc" "$err"; fi
run execute "$d/plan.json" --no-sync --force
if [[ $rc -eq 0 ]]; then pass; else fail "execute --force" "rc $rc" "$err"; fi
# a source changed since the plan was made: refused, the outputs untouched
rm -rf "$d/out"
touch -d '2001-01-01' "$d/src/rank_3/"*.ckpt
run execute "$d/plan.json" --no-sync
if [[ $rc -eq 1 && ! -e $d/out ]] && grep -q "changed since the plan was made" <<<"$err"; then pass; else fail "a changed source" "rc $rc" "$err"; fi

finish
