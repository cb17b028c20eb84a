#!/usr/bin/env bash
# `reshard check-plan`: reshard's own plans pass (from a file, from standard input, with the
# layouts in the file or given); each class of mutation of a correct plan (a transfer dropped,
# duplicated, shifted, grown, shrunk, sent by a rank that does not hold it, naming a rank outside
# the layout) exits 1 with the problem on stdout and one line on stderr; bad input exits 1 or 2.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

# the seed scenario: 784 x 512, 8 ranks -> 4 with optimizer sharding
S='{"dev_matrix":[2,1,2,2],"tensor_map":[2,1],"shape":[784,512]}'
D='{"dev_matrix":[2,2,1],"tensor_map":[1,0],"shape":[784,512],"opt_shard":{"step":2,"size":2}}'
"$RESHARD" plan --src "$S" --dst "$D" --json >"$tmp/plan.json"

expect_text "reshard's plan passes" '^verdict  correct' check-plan --plan "$tmp/plan.json"
expect_json "--json: ok, no problems, cost == minimal" \
  'j["ok"] and j["problem_count"] == 0 and j["cost"] == j["minimal"] and j["cost"]["cross_bytes"] == j["lower_bound_bytes"] == 802816' \
  check-plan --plan "$tmp/plan.json" --json
# the layouts given instead of read from the file (a bare transfer list)
"$PY" -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['transfers'], open(sys.argv[2], 'w'))" \
  "$tmp/plan.json" "$tmp/list.json"
expect_text "a bare list with --src and --dst" '^verdict  correct' check-plan --plan "$tmp/list.json" --src "$S" --dst "$D"
# from standard input
if out=$("$RESHARD" plan --src "$S" --dst "$D" --json | "$RESHARD" check-plan --plan - 2>&1) && grep -q '^verdict  correct' <<<"$out"; then
  pass
else
  fail "plan --json | check-plan --plan -" "$out"
fi

# mutate KIND: a copy of the plan with one mutation, in $tmp/bad.json
mutate() {
  "$PY" - "$tmp/plan.json" "$tmp/bad.json" "$1" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
t, kind = j["transfers"], sys.argv[3]
x = next(x for x in t if x["src"] != x["dst"])  # a cross-rank transfer
if kind == "drop":
    t.remove(x)
elif kind == "duplicate":
    t.append(dict(x))
elif kind == "shift":
    x["offset"][1] -= 1
elif kind == "grow":
    x["shape"][0] += 1
elif kind == "shrink":
    x["shape"][1] -= 1
elif kind == "sender":
    x["src"] = next(r for r in range(8) if r != x["src"] and all(not (y["src"] == r and y["offset"] == x["offset"]) for y in t))
elif kind == "outside":
    x["src"] = 8
json.dump(j, open(sys.argv[2], "w"))
PYEOF
}
for m in drop:uncovered duplicate:"covered twice" shift:"(sender does not hold it|covered twice)" grow:"outside the receiver" \
         shrink:uncovered sender:"sender does not hold it" outside:"bad transfer"; do
  kind=${m%%:*} problem=${m#*:}
  mutate "$kind"
  run check-plan --plan "$tmp/bad.json"
  if [[ $rc -eq 1 ]] && grep -q '^verdict  WRONG' <<<"$out" && grep -qE "^  $problem" <<<"$out" &&
     [[ $(wc -l <<<"$err") -eq 1 && $err == "reshard check-plan: the plan is wrong: "* ]]; then
    pass
  else
    fail "check-plan catches a transfer $kind ($problem)" "exit code $rc" "stdout: $out" "stderr: $err"
  fi
done

# bad input
expect_error "no layouts anywhere" 1 "--src is required: --plan $tmp/list.json holds no \"src\" layout" \
  check-plan --plan "$tmp/list.json"
echo '{"plan_version": 2, "transfers": []}' >"$tmp/v2.json"
expect_error "a newer plan version" 1 "plan_version 2 is not one this reshard reads (1)" \
  check-plan --plan "$tmp/v2.json" --src "$S" --dst "$D"
echo '{"transfers": [{"src": 0, "dst": 0, "offset": [0], "shape": [1, 2]}]}' >"$tmp/dims.json"
expect_error "offset and shape of different lengths" 1 "transfers[0]: offset has 1 dims and shape 2" \
  check-plan --plan "$tmp/dims.json" --src "$S" --dst "$D"
echo '{"transfers": [' >"$tmp/junk.json"
expect_error "not JSON" 1 "--plan $tmp/junk.json:" check-plan --plan "$tmp/junk.json" --src "$S" --dst "$D"
expect_error "different tensors" 1 "--src and --dst describe different tensors" \
  check-plan --plan "$tmp/list.json" --src "$S" --dst '{"dev_matrix":[4],"tensor_map":[0,-1],"shape":[8,4]}'
run check-plan --src "$S" --dst "$D"
if [[ $rc -eq 2 ]]; then pass; else fail "--plan is required: exit 2" "exit code $rc" "stderr: $err"; fi

finish
