#!/usr/bin/env bash
# `reshard check-plan --dcp`: the read items torch's own DCP load planner made (verify/data/dcp/
# *.read_items.json, by make_read_items.py; no torch needed here) are correct, with the figures
# they imply; each mutation of one item (dropped, duplicated, an offset shifted on either side, a
# length grown or shrunk, the wrong saved chunk, a chunk that does not exist) exits 1 with the
# problem on stdout and one line on stderr; the function of docs/formats.md is the script's;
# malformed files exit 1 naming the place, bad usage 2.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
DATA=$SRC/verify/data/dcp

expect_text "rows: torch's read items are correct" '^verdict     correct' check-plan --dcp "$DATA/rows.read_items.json"
# w [5,3] float32 saved as rows 0..2 (rank 0) and 3..4 (rank 1), read as one column a rank: rank
# 0 reads 2 elements from rank 1's file, rank 1 reads 3 from rank 0's, rank 2 reads all 5 from
# the others': 10 elements, 40 B, at most 20 B by one rank
expect_json "rows --json: per tensor, the figures" \
  'j["ok"] and j["problem_count"] == 0 and [t["fqn"] for t in j["tensors"]] == ["replicated", "w"] and
   j["tensors"][1] == {"fqn": "w", "size": [5, 3], "ok": True, "complete": True, "sound": True, "problem_count": 0,
   "problems": [], "items": 6, "meeting_pairs": 6, "read_bytes": 60, "target_bytes": 60, "other_rank_bytes": 40,
   "max_other_rank_bytes": 20} and j["tensors"][0]["read_bytes"] == 96 and j["tensors"][0]["other_rank_bytes"] == 64' \
  check-plan --dcp "$DATA/rows.read_items.json" --json
expect_json "grid --json: correct, one item per meeting pair" \
  'j["ok"] and all(t["ok"] and t["items"] == t["meeting_pairs"] and t["read_bytes"] == t["target_bytes"] for t in j["tensors"])' \
  check-plan --dcp "$DATA/grid.read_items.json" --json
if out=$("$RESHARD" check-plan --dcp - <"$DATA/grid.read_items.json" 2>&1) && grep -q '^verdict     correct' <<<"$out" &&
   grep -q 'from standard input' <<<"$out"; then
  pass
else
  fail "--dcp - reads standard input" "$out"
fi

# mutate FILE KIND: a copy of FILE with one read item changed, in $tmp/bad.json
mutate() {
  "$PY" - "$1" "$tmp/bad.json" "$2" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
kind = sys.argv[3]
# an item of the last rank that reads a 2-d tensor, and its tensor's saved chunks
rank = j["ranks"][-1]
items = rank["read_items"]
x = next(x for x in items if len(x["lengths"]) == 2)
saved = j["tensors"][x["fqn"]]["chunks"]
if kind == "drop":
    items.remove(x)
elif kind == "duplicate":
    items.append(dict(x))
elif kind == "shift-dest":
    x["dest_offsets"][0] += 1
elif kind == "shift-storage":
    x["storage_offsets"][0] += 1
elif kind == "grow":
    x["lengths"][0] += 1
elif kind == "shrink":
    x["lengths"][1] -= 1
elif kind == "wrong-chunk":  # another saved chunk's offsets, the offsets within left alone
    x["storage_index"] = next(c["offsets"] for c in saved if c["offsets"] != x["storage_index"])
elif kind == "no-chunk":
    x["storage_index"] = [x["storage_index"][0] + 1, x["storage_index"][1]]
elif kind == "no-dest":
    x["dest_index"] = [x["dest_index"][0], x["dest_index"][1] + 1]
json.dump(j, open(sys.argv[2], "w"))
PYEOF
}
for f in rows grid; do
  for m in drop:"uncovered" duplicate:"covered twice" shift-dest:"misplaced" shift-storage:"misplaced" \
           grow:"(outside the receiver|sender does not hold it)" shrink:"uncovered" wrong-chunk:"misplaced" \
           no-chunk:"no such chunk" no-dest:"no such chunk"; do
    kind=${m%%:*} problem=${m#*:}
    mutate "$DATA/$f.read_items.json" "$kind"
    run check-plan --dcp "$tmp/bad.json"
    lines=$(printf '%s\n' "$err" | grep -c .) || true
    if [[ $rc -eq 1 ]] && grep -q '^verdict     WRONG' <<<"$out" && grep -qE "^  tensor '[a-z]+': $problem" <<<"$out" &&
       grep -qE "WRONG \([0-9]+ problems?\)$" <<<"$out" && [[ $lines -eq 1 ]] && grep -qF -- "--dcp $tmp/bad.json: the read items are wrong" <<<"$err"; then
      pass
    else
      fail "$f: mutation $kind is caught as /$problem/" "exit code $rc" "stdout: $out" "stderr: $err"
    fi
    run check-plan --dcp "$tmp/bad.json" --json
    if [[ $rc -eq 1 ]] && printf '%s' "$out" | "$PY" -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if not j['ok'] and j['problem_count'] > 0 else 1)"; then
      pass
    else
      fail "$f: mutation $kind, --json: not ok" "exit code $rc" "stdout: $out"
    fi
  done
done

# an item far outside the tensor: a problem (its bytes are not counted), not an overflow
mutate "$DATA/rows.read_items.json" drop
"$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); x=j['ranks'][0]['read_items'][0]; x['lengths']=[2**50, 1]
json.dump(j, open(sys.argv[1], 'w'))" "$tmp/bad.json"
run check-plan --dcp "$tmp/bad.json"
if [[ $rc -eq 1 ]] && grep -qE "^  tensor 'w': bad transfer: .*: the box leaves the tensor \[5,3\]" <<<"$out"; then pass; else
  fail "an item leaving the tensor is a bad transfer" "exit code $rc" "stdout: $out" "stderr: $err"
fi

# the function docs/formats.md shows is the one make_read_items.py ran
if "$PY" - "$SRC/docs/formats.md" "$DATA/make_read_items.py" <<'PYEOF'
import re, sys
doc, script = open(sys.argv[1]).read(), open(sys.argv[2]).read()
shown = re.search(r"<!-- dcp_read_items -->\n```python\n(.*?)```", doc, re.S).group(1)
ran = re.search(r"# --- dcp_read_items: as in docs/formats.md ---\n(.*?)# --- end of dcp_read_items ---", script, re.S).group(1)
sys.exit(0 if shown.strip() == ran.strip() and len(shown.splitlines()) <= 30 else 1)
PYEOF
then pass; else fail "docs/formats.md shows make_read_items.py's dcp_read_items"; fi

# malformed files: exit 1, one line naming the file, the place and the reason
bad() {  # bad NAME TEXT PYTHON-EDIT: the rows example edited by PYTHON-EDIT (over `j`)
  "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); $3; json.dump(j, open(sys.argv[2], 'w'))" \
    "$DATA/rows.read_items.json" "$tmp/bad.json"
  expect_error "$1" 1 "$2" check-plan --dcp "$tmp/bad.json"
}
bad "no version" "no 'dcp_read_items' version" 'del j["dcp_read_items"]'
bad "version 2" "dcp_read_items: version 2" 'j["dcp_read_items"] = 2'
bad "a misspelt key" "unknown key 'lenghts'" 'x = j["ranks"][0]["read_items"][0]; x["lenghts"] = x.pop("lengths")'
bad "dims that disagree" "ranks[0].read_items[0].lengths: 1 number, the tensor has 2 dims" \
  'j["ranks"][0]["read_items"][0]["lengths"] = [3]'
bad "a negative offset" "is not a list of non-negative integers" 'j["ranks"][1]["read_items"][0]["dest_offsets"] = [-1, 0]'
bad "an unknown tensor" "tensor 'v' is not in \"tensors\"" 'j["ranks"][0]["read_items"][0]["fqn"] = "v"'
bad "an unknown dtype" "tensors.w.dtype: \"float7\" is not a dtype" 'j["tensors"]["w"]["dtype"] = "float7"'
bad "a chunk outside the tensor" "the saved chunk [3:5,0:4] does not lie in the tensor [5,3]" \
  'j["tensors"]["w"]["chunks"][1]["sizes"] = [2, 4]'
bad "a tensor of more than 2^63 bytes" "tensors.w.size: [1099511627776,1099511627776] holds more than 2^63 - 1 bytes" \
  'j["tensors"]["w"]["size"] = [2**40, 2**40]'
bad "a rank twice" "ranks[1]: rank 0 twice" 'j["ranks"][1]["rank"] = 0'
expect_error "not read items" 1 "--dcp $DATA/rows.expected.json: no 'dcp_read_items' version" check-plan --dcp "$DATA/rows.expected.json"
expect_error "a missing file" 1 "$tmp/none.json" check-plan --dcp "$tmp/none.json"
expect_error "--dcp with --plan" 2 "excludes" check-plan --dcp "$DATA/rows.read_items.json" --plan x.json
expect_error "--dcp with --src" 2 "excludes" check-plan --dcp "$DATA/rows.read_items.json" --src '{"dev_matrix":[1],"tensor_map":[-1],"shape":[4]}'
expect_error "--dcp with --svg" 2 "not with --dcp" check-plan --dcp "$DATA/rows.read_items.json" --svg "$tmp/x.svg"
expect_error "neither --plan nor --dcp" 2 "one of --plan and --dcp is required" check-plan
finish
