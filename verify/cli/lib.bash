# verify/cli/lib.bash: helpers sourced by the tests of the reshard program (verify/cli/*.sh,
# verify/mpi/transform.sh). $RESHARD is the program; $SRC the source tree, $SC its scenario
# generator, $tmp the test's scratch directory (removed on exit); results are counted and
# summarised by `finish`.
: "${RESHARD:?set RESHARD to the path of the reshard program}"
PY=${RESHARD_TEST_PY:-/usr/bin/python3}
# The source tree (verify/data, verify/python), the scenario generator most tests use, and the
# test's scratch directory, removed when it exits.
SRC=${RESHARD_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
SC="$SRC/verify/python/ms_scenario.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

pass() { passed=$((passed + 1)); }
fail() {
  failed=$((failed + 1))
  echo "FAIL: $1" >&2
  shift
  for line in "$@"; do echo "  $line" >&2; done
}

# run ARGS...: runs $RESHARD, setting $out, $err and $rc (never aborts the script). With $guard
# set (seconds), under `timeout $guard`: a hang guard, exit 124 when it fired.
run() {
  local e
  e=$(mktemp)
  if out=$(${guard:+timeout "$guard"} "$RESHARD" "$@" 2>"$e"); then rc=0; else rc=$?; fi
  err=$(cat "$e")
  rm -f "$e"
}

# ok NAME ARGS...: the program succeeds (else a failure, and returns 1)
ok() {
  local name=$1
  shift
  run "$@"
  if [[ $rc -eq 0 ]]; then pass; else fail "$name" "reshard $*" "exit code $rc" "stderr: $err"; return 1; fi
}

# expect_json NAME PYTHON-EXPR ARGS...: the program succeeds, prints JSON, and EXPR (over the
# parsed JSON `j`) is true.
expect_json() {
  local name=$1 expr=$2
  shift 2
  run "$@"
  if [[ $rc -ne 0 ]]; then
    fail "$name" "exit code $rc" "stderr: $err"
    return
  fi
  if printf '%s' "$out" | "$PY" -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($expr) else 1)" 2>/dev/null; then
    pass
  else
    fail "$name" "not true: $expr" "output: $out"
  fi
}

# expect_text NAME REGEX ARGS...: the program succeeds and its output matches REGEX (grep -E).
expect_text() {
  local name=$1 re=$2
  shift 2
  run "$@"
  if [[ $rc -eq 0 ]] && grep -qE -- "$re" <<<"$out"; then
    pass
  else
    fail "$name" "exit code $rc, output does not match /$re/" "stdout: $out" "stderr: $err"
  fi
}

# expect_error NAME CODE TEXT ARGS...: the program exits with CODE, prints nothing on stdout and
# exactly one line on stderr that contains TEXT (fixed string), and no crash report.
expect_error() {
  local name=$1 code=$2 text=$3
  shift 3
  run "$@"
  local lines
  lines=$(printf '%s\n' "$err" | grep -c .) || true
  if [[ -n ${guard:-} && $rc -eq 124 ]]; then
    fail "$name" "killed by the timeout after $guard s: the program hung"
  elif [[ $rc -ne $code ]]; then
    fail "$name" "exit code $rc, expected $code" "stderr: $err"
  elif [[ -n $out ]]; then
    fail "$name" "printed on stdout: $out"
  elif [[ $lines -ne 1 ]]; then
    fail "$name" "expected one line on stderr, got $lines" "stderr: $err"
  elif ! grep -qF -- "$text" <<<"$err"; then
    fail "$name" "stderr lacks '$text'" "stderr: $err"
  elif grep -qiE "terminate called|what\(\)|exception|core dumped" <<<"$err"; then
    fail "$name" "crash report on stderr" "stderr: $err"
  else
    pass
  fi
}

# scenario NAME: generates the scenario NAME of verify/python/ms_scenario.py (the script in $SC)
# in $tmp/NAME; sets d, and the strategy arguments for the CLI in the array $strategies
scenario() {
  d=$tmp/$1
  "$PY" "$SC" gen "$1" "$d" >/dev/null
  strategies=()
  local ss ds
  ss=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['src_strategy'] or '')" "$d/scenario.json")
  ds=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['dst_strategy'] or '')" "$d/scenario.json")
  [[ -n $ss ]] && strategies+=(--src-strategy "$d/$ss")
  [[ -n $ds ]] && strategies+=(--dst-strategy "$d/$ds")
  return 0
}

# row_blocks_source DIR: a source of one rank, DIR/src/rank_0/checkpoint_0.safetensors (a float32
# tensor "w" of [64, 256], 64 KiB), and DIR/dst.json, a JSON strategy splitting it by rows on 4
# ranks: 4 target files of 16 KiB, each larger than a direct write's 4 KiB block (the scenarios'
# files are smaller than one)
row_blocks_source() {
  mkdir -p "$1/src/rank_0"
  "$PY" - "$1" <<'EOF'
import json, struct, sys
d = sys.argv[1]
data = b"".join(struct.pack("<f", float(i % 1000)) for i in range(64 * 256))
h = {"w": {"dtype": "F32", "shape": [64, 256], "data_offsets": [0, len(data)]}}
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
with open(d + "/src/rank_0/checkpoint_0.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(t)) + t + data)
layout = {"dev_matrix": [4], "tensor_map": [0, -1], "tensor_shape": [64, 256], "field": 0,
          "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}
with open(d + "/dst.json", "w") as f:
    json.dump({"current_stage": 1, "parallel_layout_item": {"w": layout}}, f)
EOF
}

finish() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}

# index_reads_only TRACE DIR: '' when every read call on a file under DIR in the strace log TRACE
# (strace -y) is the one whole-file pread64 at offset 0 that indexes a small source file (at most
# 128 KiB: ckpt_file::index_copy_bytes), each file at most once; else what is not. A dry run or
# --plan-out reads no other bytes of the sources.
index_reads_only() {
  "$PY" - "$1" "$2" <<'PYEOF'
import os, re, sys
trace, d = sys.argv[1], sys.argv[2]
seen, bad = set(), []
for line in open(trace):
    if "<" + d + "/" not in line:
        continue
    m = re.search(r"pread64\(\d+<([^>]+)>, .*, (\d+), (\d+)\) = (\d+)", line)
    if not m:
        bad.append(line.strip()[:160])
        continue
    path, length, offset = m.group(1), int(m.group(2)), int(m.group(3))
    size = os.path.getsize(path)
    if offset != 0 or length < size or size > (128 << 10) or path in seen:
        bad.append(line.strip()[:160])
    seen.add(path)
print("; ".join(bad[:3]))
PYEOF
}
