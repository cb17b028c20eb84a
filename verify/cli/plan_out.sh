#!/usr/bin/env bash
# --plan-out FILE: the checkpoint plan as JSON, and nothing else. On the 8->4 retrain, 8->3
# (uneven) and 8 -> a 2-stage pipeline scenarios: the file parses, is version 1, and lists as
# target files exactly the files the real run then writes (its "outputs"), with the real run's
# bytes read; its totals are sums over its items; nothing is written beside it; under strace it
# makes no read(2)/pread(2) of a source file; merge (--format hf: the shards and index), split
# and convert take it; an existing FILE is replaced only with --force.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

# compare PLAN RUN_JSON: the plan's files are the run's outputs, its totals add up
compare() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
plan = json.load(open(sys.argv[1]))
real = json.loads(open(sys.argv[2]).read())
problems = []
if plan.get("checkpoint_plan_version") != 2:
    problems.append("version %r" % plan.get("checkpoint_plan_version"))
files = sorted(f for t in plan["targets"] for f in t["files"])
if files != sorted(real["outputs"]):
    problems.append("plan files %s, the run wrote %s" % (files, sorted(real["outputs"])))
if plan["bytes_read"] != real["bytes_read"]:
    problems.append("bytes read %d, the run read %d" % (plan["bytes_read"], real["bytes_read"]))
if sum(s["bytes_read"] for s in plan["sources"]) != plan["bytes_read"]:
    problems.append("the sources do not add up")
for t in plan["targets"]:
    if sum(i["bytes"] for i in t["items"]) != t["bytes_written"]:
        problems.append("target %d: the items do not add up" % t["rank"])
    for i in t["items"]:
        got = i["copy"]["ranges"] if "copy" in i else i["slice"]["transfers"]
        n = sum(r[1] for r in got) if "copy" in i else sum(x["bytes"] for x in got)
        if n != i["source_bytes"]:
            problems.append("target %d: %s reads %d, not %d" % (t["rank"], i["name"], n, i["source_bytes"]))
if sum(t["bytes_written"] for t in plan["targets"]) != plan["bytes_written"]:
    problems.append("the targets do not add up")
print("; ".join(problems))
PYEOF
}

for name in retrain_8to4 uneven_8to3 to_pipeline; do
  scenario "$name"
  run transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}" --plan-out "$d/plan.json"
  if [[ $rc -ne 0 ]]; then fail "$name: --plan-out" "exit code $rc" "stderr: $err"; continue; fi
  if [[ -e $d/out ]]; then fail "$name: --plan-out wrote $d/out"; else pass; fi
  if ls "$d"/plan.json.* >/dev/null 2>&1; then fail "$name: a temporary was left beside the plan"; else pass; fi
  run transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}" --json
  printf '%s' "$out" >"$d/real.json"
  verdict=$(compare "$d/plan.json" "$d/real.json" 2>&1) || true
  if [[ -z $verdict ]]; then pass; else fail "$name: plan vs run" "$verdict"; fi
done

# no data reads beyond indexing (strace), as --dry-run
scenario retrain_8to4
strace -ff -qq -e trace=read,pread64,readv,preadv,preadv2 -e signal=none -y -o "$tmp/tr" \
  "$RESHARD" transform --src-dir "$d/src" --dst-dir "$d/planned" "${strategies[@]}" --plan-out "$d/p.json" >/dev/null 2>&1 || true
cat "$tmp"/tr.* >"$tmp/trace"  # -ff: a log per thread, no call split into unfinished and resumed
extra=$(index_reads_only "$tmp/trace" "$d/src")  # only the pread that indexes a small file
if [[ -z $extra && -s $d/p.json ]]; then pass; else fail "no data reads" "reads beyond indexing: ${extra:-none}; plan: $(ls -l "$d/p.json" 2>&1)"; fi
if [[ -e $d/planned ]]; then fail "the traced --plan-out wrote $d/planned"; else pass; fi

# an existing plan file: refused, then replaced with --force
run transform --src-dir "$d/src" --dst-dir "$d/o2" "${strategies[@]}" --plan-out "$d/p.json"
if [[ $rc -eq 1 ]] && grep -q "exists" <<<"$err"; then pass; else fail "existing --plan-out file" "rc $rc" "$err"; fi
run transform --src-dir "$d/src" --dst-dir "$d/o2" "${strategies[@]}" --plan-out "$d/p.json" --force
if [[ $rc -eq 0 ]]; then pass; else fail "--plan-out --force" "rc $rc" "$err"; fi

# the other commands: merge into a Hugging Face checkpoint (its shards and index), split, convert
run merge --src-dir "$d/src" --out "$d/hf" "${strategies[0]}" "${strategies[1]}" --format hf --max-shard-size 100KB \
  --exclude optimizer_name --exclude 'emb_table*' --plan-out "$d/merge.json"
if [[ $rc -eq 0 && ! -e $d/hf ]]; then pass; else fail "merge --plan-out" "rc $rc" "$err"; fi
run merge --src-dir "$d/src" --out "$d/hf" "${strategies[0]}" "${strategies[1]}" --format hf --max-shard-size 100KB \
  --exclude optimizer_name --exclude 'emb_table*' --json
printf '%s' "$out" >"$d/merge_real.json"
verdict=$(compare "$d/merge.json" "$d/merge_real.json" 2>&1) || true
if [[ -z $verdict ]]; then pass; else fail "merge --format hf: plan vs run" "$verdict"; fi
run merge --src-dir "$d/src" --out "$d/full.ckpt" "${strategies[0]}" "${strategies[1]}"
run split --checkpoint "$d/full.ckpt" --dst-dir "$d/split" --dst-strategy "${strategies[3]}" --plan-out "$d/split.json"
if [[ $rc -eq 0 && ! -e $d/split && -s $d/split.json ]]; then pass; else fail "split --plan-out" "rc $rc" "$err"; fi
run convert --in "$d/full.ckpt" --out "$d/full.safetensors" --exclude optimizer_name --exclude 'emb_table*' --plan-out "$d/convert.json"
if [[ $rc -eq 0 && ! -e $d/full.safetensors ]] &&
  "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['targets'][0]['format'] == 'safetensors'" "$d/convert.json"; then
  pass
else
  fail "convert --plan-out" "rc $rc" "$err"
fi

finish
