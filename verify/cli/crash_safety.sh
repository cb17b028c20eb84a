#!/usr/bin/env bash
# Crash safety of `reshard transform`: a multi-file conversion (8 ranks -> 3, about 11 MiB of
# tensors, ckpt and safetensors outputs) is killed with SIGKILL at many points, then:
#   * every file with a final name (rank_<t>/checkpoint_<t>.ckpt) is byte-identical to the output
#     of an uninterrupted run (no file that looks complete is wrong);
#   * every other file is a staged output, `<final name>.reshard-<pid>.<n>.part`, written in
#     place (no other temporary beside it), none ending in .ckpt or .safetensors (no temporary
#     can be taken for an output);
#   * the sources are unchanged (SHA-256 of every file);
#   * a rerun finishes the job: the same command, or with --force when the kill came while the
#     finished files were being renamed into place (then the plain rerun must refuse, changing
#     nothing); the result is byte-identical to the uninterrupted run, with no temporary left.
# Kill points come from two sources: seeded random delays from 0 to the duration of the
# uninterrupted run (a real SIGKILL from outside), and the test-only hook
# RESHARD_TEST_CRASH_AFTER=N (the process SIGKILLs itself after N units of progress, a unit
# being one byte written or one rename; include/reshard/io/temporary_files.hpp), which reaches every
# phase deterministically: mid-write, after a staged file's last byte, and between the renames
# that move the finished files into place.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
SEED=${CRASH_SEED:-20240607}
TIMED_KILLS=${CRASH_TIMED_KILLS:-14}
HOOK_KILLS=${CRASH_HOOK_KILLS:-10}
RANDOM=$SEED

# The scenario: ms_scenario.py's generator (MindSpore's slicing, protobuf's own serializer) with
# tensors big enough that a kill lands in the middle of a write.
s=$tmp/s
"$PY" - "$SRC/verify/python" "$s" <<'EOF'
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import ms_scenario as m
L, P = m.L, m.Param
def crash_scenario(name):
    params = [
        P("w1", "Float32", [1536, 512], L([2, 4], [1, 0]), L([3], [0, -1])),
        P("w2", "Float32", [768, 1536], L([2, 4], [0, 1]), L([3], [-1, 0])),
        P("emb", "Float16", [3072, 256], L([2, 4], [[1, 0], -1]), L([3], [0, -1])),
        P("m", "Float32", [768, 512], L([2, 4], [-1, -1], opt=(1, 8)), L([3], [0, -1]), pieces=65536),
        P("bias", "Float32", [1536], L([2, 4], [1]), L([3], [-1])),
    ]
    return params, 8, 3, {"absent": "tensors"}
m.scenario = crash_scenario
sys.exit(m.gen("crash_8to3", sys.argv[2]))
EOF
T=3
strategies=(--src-strategy "$s/src_strategy.ckpt" --dst-strategy "$s/dst_strategy.ckpt")
args=(transform --src-dir "$s/src" "${strategies[@]}")
src_sums() { (cd "$s" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
src_before=$(src_sums)

now_ns() { date +%s%N; }

# Uninterrupted references (ckpt and safetensors), checked value for value by the scenario checker.
declare -A ref ref_ns
for fmt in ckpt safetensors; do
  ref[$fmt]=$tmp/ref_$fmt
  t0=$(now_ns)
  run "${args[@]}" --dst-dir "${ref[$fmt]}" --format "$fmt"
  ref_ns[$fmt]=$(($(now_ns) - t0))
  if [[ $rc -ne 0 ]]; then
    fail "uninterrupted $fmt transform" "exit code $rc" "stderr: $err"
    finish
    exit 1
  fi
  if [[ $fmt == ckpt ]]; then
    if report=$("$PY" "$SRC/verify/python/ms_scenario.py" check "$s" "${ref[$fmt]}" 2>&1); then pass; else
      fail "the uninterrupted transform is right" "$report"
    fi
  fi
done
if [[ $(find "${ref[ckpt]}" -type f | wc -l) -eq $T && $(find "${ref[safetensors]}" -type f | wc -l) -eq $T ]]; then pass; else
  fail "the references have $T files each"
fi
echo "uninterrupted: ckpt $((ref_ns[ckpt] / 1000000)) ms, safetensors $((ref_ns[safetensors] / 1000000)) ms," \
  "$(du -sb "${ref[ckpt]}" | cut -f1) bytes written"

# units FMT: the hook's units of a whole run: every byte of every file, plus one rename a file
# (the staged .part, written in place, -> final name).
units() {
  local total
  total=$(find "${ref[$1]}" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
  echo $((total + T))
}

# listing DIR: "relative-path size sha256" of every file, sorted (a snapshot to compare)
listing() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum); }

# check_killed NAME DST FMT: the state a kill left in DST; sets n_final (files with a final name).
check_killed() {
  local name=$1 dst=$2 fmt=$3 f rel base final ok=1
  n_final=0
  while IFS= read -r -d '' f; do
    rel=${f#"$dst"/}
    if [[ -f ${ref[$fmt]}/$rel ]]; then
      n_final=$((n_final + 1))
      if ! cmp -s "$f" "${ref[$fmt]}/$rel"; then
        fail "$name: $rel has a final name but differs from the uninterrupted run" \
          "size $(stat -c %s "$f"), expected $(stat -c %s "${ref[$fmt]}/$rel")"
        ok=0
      fi
      continue
    fi
    base=${rel##*/}
    final=${base%%.reshard-*}
    if [[ $base =~ ^checkpoint_[0-9]+\.(ckpt|safetensors)\.reshard-[0-9]+\.[0-9]+\.part$ &&
      -f ${ref[$fmt]}/${rel%/*}/$final && $base != *.ckpt && $base != *.safetensors ]]; then
      continue
    fi
    fail "$name: $rel is neither an output nor one of reshard's temporaries"
    ok=0
  done < <(find "$dst" -type f -print0 2>/dev/null)  # (killed before making DST: no DST)
  if [[ $(src_sums) != "$src_before" ]]; then
    fail "$name: the sources changed"
    ok=0
  fi
  ((ok)) && pass
  return 0
}

# rerun NAME DST FMT [JOBS]: finishes the job after a kill, then DST must equal the reference.
rerun() {
  local name=$1 dst=$2 fmt=$3 jobs=${4:-1} before
  if ((n_final > 0 && n_final < T)); then
    # killed while renaming: some outputs exist; the plain rerun refuses and changes nothing
    before=$(listing "$dst")
    run "${args[@]}" --dst-dir "$dst" --format "$fmt" --jobs "$jobs"
    if [[ $rc -eq 1 && $err == *"exists (pass force / --force to replace it)"* && $(listing "$dst") == "$before" ]]; then
      pass
    else
      fail "$name: a rerun without --force over $n_final of $T outputs refuses, changing nothing" "exit $rc" "stderr: $err"
    fi
    run "${args[@]}" --dst-dir "$dst" --format "$fmt" --jobs "$jobs" --force
  elif ((n_final == 0)); then
    run "${args[@]}" --dst-dir "$dst" --format "$fmt" --jobs "$jobs"
  else
    rc=0  # the run was complete
  fi
  if [[ $rc -ne 0 ]]; then
    fail "$name: the rerun succeeds" "exit code $rc" "stderr: $err"
  elif [[ $(listing "$dst") != "$(listing "${ref[$fmt]}")" ]]; then
    fail "$name: after the rerun the outputs are byte-identical to the uninterrupted run, no temporary left" \
      "$(diff <(listing "$dst") <(listing "${ref[$fmt]}") | head -5)"
  else
    pass
  fi
}

# negative controls: check_killed notices a truncated file with a final name, and a file that
# is not one of reshard's temporaries
control() {
  local what=$1 f=$2
  rm -rf "$tmp/control" && cp -r "${ref[ckpt]}" "$tmp/control"
  eval "$f"
  if (failed=0 && check_killed control "$tmp/control" ckpt 2>/dev/null && exit "$failed"); then
    fail "the check must notice $what"
  else
    pass
  fi
}
control "a truncated output" 'truncate -s -100 "$tmp/control/rank_1/checkpoint_1.ckpt"'
control "a foreign temporary" 'echo x >"$tmp/control/rank_1/checkpoint_1.ckpt.tmp"'
control "a staged file named like an output" 'mv "$tmp/control/rank_2/checkpoint_2.ckpt" "$tmp/control/rank_2/checkpoint_2.ckpt.reshard-1.part.ckpt"'
control "a second temporary beside a staged file" 'mv "$tmp/control/rank_2/checkpoint_2.ckpt" "$tmp/control/rank_2/checkpoint_2.ckpt.reshard-1.0.part.reshard-1.1.tmp"'

# -- 1. SIGKILL from outside after seeded random delays in [0, duration of the uninterrupted run]
declare -A outcome=()
for ((i = 0; i < TIMED_KILLS; i++)); do
  fmt=ckpt
  ((i % 4 == 3)) && fmt=safetensors
  jobs=$((1 + i % 2))
  dst=$tmp/timed
  rm -rf "$dst"
  delay_us=$(((RANDOM * 32768 + RANDOM) % (ref_ns[$fmt] / 1000 + 1)))
  "$RESHARD" "${args[@]}" --dst-dir "$dst" --format "$fmt" --jobs "$jobs" >/dev/null 2>&1 &
  pid=$!
  sleep "$(printf '%d.%06d' $((delay_us / 1000000)) $((delay_us % 1000000)))"
  kill -KILL "$pid" 2>/dev/null || true
  status=0
  wait "$pid" 2>/dev/null || status=$?  # (2>: no "Killed" notice)
  check_killed "timed kill $i ($fmt, --jobs $jobs, after ${delay_us} us, exit $status)" "$dst" "$fmt"
  temps=$( (find "$dst" -type f -name '*.reshard-*' 2>/dev/null || true) | wc -l)
  key="finals=$n_final,temps=$((temps > 0))"
  outcome[$key]=$((${outcome[$key]:-0} + 1))
  rerun "timed kill $i" "$dst" "$fmt" "$jobs"
done
echo "timed kills (finals present, temporaries present): $(for k in "${!outcome[@]}"; do printf '%s x%d; ' "$k" "${outcome[$k]}"; done)"

# -- 2. the hook: deterministic kill points
# crash_at NAME FMT JOBS N: runs with RESHARD_TEST_CRASH_AFTER=N; sets status and dst.
crash_at() {
  dst=$tmp/hook
  rm -rf "$dst"
  status=0
  (
    RESHARD_TEST_CRASH_AFTER=$4 "$RESHARD" "${args[@]}" --dst-dir "$dst" --format "$2" --jobs "$3" \
      >/dev/null 2>"$tmp/hook.err"
    exit $?
  ) 2>/dev/null || status=$?  # (a subshell, 2>: no "Killed" notice)
}

for fmt in ckpt safetensors; do
  U=$(units "$fmt")
  s0=$(stat -c %s "${ref[$fmt]}/rank_0/checkpoint_0.$fmt")
  # N: (expected files with a final name, what the point is)
  declare -A points=(
    [0]="0 before the first byte"
    [$((s0 / 2))]="0 in the middle of the first file"
    [$s0]="0 after the first file's last byte (its .part complete, not renamed)"
    [$((s0 + 1))]="0 after the second file's first byte"
    [$((U - T))]="0 every file staged, before the first rename into place"
    [$((U - T + 1))]="1 after the first rename into place"
    [$((U - 1))]="$((T - 1)) before the last rename into place"
  )
  for ((k = 0; k < HOOK_KILLS / 2; k++)); do
    n=$(((RANDOM * 32768 + RANDOM) % U))
    [[ -n ${points[$n]:-} ]] || points[$n]="- random"
  done
  for n in "${!points[@]}"; do
    read -r want what <<<"${points[$n]}"
    name="hook $fmt: RESHARD_TEST_CRASH_AFTER=$n of $U ($what)"
    crash_at "$name" "$fmt" 1 "$n"
    if [[ $status -ne 137 ]]; then
      fail "$name: the process is killed by SIGKILL" "exit status $status" "stderr: $(cat "$tmp/hook.err")"
      continue
    fi
    check_killed "$name" "$dst" "$fmt"
    if [[ $want != - && $n_final -ne $want ]]; then fail "$name: $want files with a final name, got $n_final"; fi
    if ((n < s0)); then  # the hook's accounting is exact: the staged files hold n bytes (the
      # targets of a read group, here all 3, are written in step: each holds a part of them)
      got=$(find "$dst" -type f -name 'checkpoint_*.part' -printf '%s\n' | awk '{ t += $1 } END { print t + 0 }')
      if [[ $got == "$n" ]]; then pass; else fail "$name: the staged files hold exactly $n bytes" "got: $got"; fi
    fi
    rerun "$name" "$dst" "$fmt"
  done
  unset points
  # N = U: every unit happens, the run completes
  crash_at "hook $fmt complete" "$fmt" 1 "$U"
  if [[ $status -eq 0 && $(listing "$dst") == "$(listing "${ref[$fmt]}")" ]]; then pass; else
    fail "hook $fmt: RESHARD_TEST_CRASH_AFTER=$U (every unit of a run) completes" "exit $status" "$(cat "$tmp/hook.err")"
  fi
  # two writers at once
  for ((k = 0; k < 2; k++)); do
    n=$(((RANDOM * 32768 + RANDOM) % U))
    crash_at "hook $fmt --jobs 2" "$fmt" 2 "$n"
    if [[ $status -ne 137 ]]; then fail "hook $fmt --jobs 2 at $n: killed" "exit status $status"; continue; fi
    check_killed "hook $fmt --jobs 2: RESHARD_TEST_CRASH_AFTER=$n" "$dst" "$fmt"
    rerun "hook $fmt --jobs 2: RESHARD_TEST_CRASH_AFTER=$n" "$dst" "$fmt" 2
  done
done

# -- 3. what the cleanup of a rerun removes, and what it keeps
dst=$tmp/cleanup
crash_at "cleanup" ckpt 1 $(($(units ckpt) / 2))
dead=$(find "$dst" -type f -name '*.reshard-*' | head -1)
sleep 1000 &
live=$!
d0=$dst/rank_0
keep=("$d0/checkpoint_0.ckpt.reshard-$live.part" "$d0/checkpoint_0.ckpt.reshard-$live.3.tmp"
  "$d0/checkpoint_0.ckpt.bak" "$d0/checkpoint_0.ckpt.reshard-x.part" "$d0/other.ckpt.reshard-999999999.part")
for f in "${keep[@]}"; do echo keep >"$f"; done
mkdir "$d0/checkpoint_0.ckpt.reshard-999999998.part"
run "${args[@]}" --dst-dir "$dst"
kill "$live" 2>/dev/null || true
wait "$live" 2>/dev/null || true
missing=()
for f in "${keep[@]}" "$d0/checkpoint_0.ckpt.reshard-999999998.part"; do [[ -e $f ]] || missing+=("$f"); done
if [[ $rc -eq 0 && -n $dead && ! -e $dead && ${#missing[@]} -eq 0 ]]; then pass; else
  fail "a rerun removes the temporaries of dead processes only (their own pattern, regular files)" \
    "exit $rc, stderr: $err" "dead temporary: $dead (exists: $([[ -e $dead ]] && echo yes || echo no))" \
    "removed but should be kept: ${missing[*]:-none}"
fi
rm -rf "${keep[@]}" "$d0/checkpoint_0.ckpt.reshard-999999998.part"
if [[ $(listing "$dst") == "$(listing "${ref[ckpt]}")" ]]; then pass; else fail "cleanup: the rerun's outputs equal the reference"; fi

finish
