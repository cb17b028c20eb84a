#!/usr/bin/env bash
# `mpirun -n K reshard transform`: K processes share the target ranks. For each scenario of
# verify/python/ms_scenario.py (8->4 with optimizer sharding and CRC trailers, 8->4 inference, 8->3
# uneven, a merged 2-stage pipeline, 4 ranks to a pipeline, 6->4 from safetensors) and a PyTorch DCP
# checkpoint to 4 ranks, in ckpt and safetensors, the files of K = 2, 3 (and 5 > N) processes are byte for byte those of one process;
# into a DCP checkpoint (--format dcp) 2 processes are refused (its .metadata lists every rank's chunks).
# Then: each process opens only the source files its targets need (process 0 too), its targets a
# contiguous run of ranks; a missing rank directory that no target reads (each process checks
# only its share) is refused as one process refuses it; a bad source file that only
# one process reads, an unwritable target of one process and an existing output each fail the
# whole run with the message printed once and nothing written; a process killed after its first
# file fails the job and leaves no output under a final name; files written buffered because the
# filesystem refused direct writes are counted across the processes.
# Environment: RESHARD (the program, built with MPI), MPIEXEC (mpiexec), MPIEXEC_FLAGS (e.g.
# --oversubscribe), RESHARD_TEST_PY; Open MPI as root also needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.bash"  # SRC, SC, tmp
MPIEXEC=${MPIEXEC:-mpiexec}
read -r -a mpiflags <<<"${MPIEXEC_FLAGS:-}"

# mrun K ARGS...: runs $RESHARD ARGS as K processes, setting $out, $err and $rc
mrun() {
  local k=$1 e
  shift
  e=$(mktemp)
  if out=$("$MPIEXEC" -n "$k" "${mpiflags[@]}" "$RESHARD" "$@" 2>"$e"); then rc=0; else rc=$?; fi
  err=$(cat "$e")
  rm -f "$e"
}


# listing DIR: the files under DIR with their hashes (relative paths, sorted)
listing() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum); }

# same_as_one NAME FORMAT K...: one process writes $d/one-FORMAT; K processes write the same files
same_as_one() {
  local name=$1 fmt=$2 k
  shift 2
  run transform --src-dir "$d/src" --dst-dir "$d/one-$fmt" "${strategies[@]}" --format "$fmt"
  if [[ $rc -ne 0 ]]; then
    fail "$name ($fmt): one process" "exit code $rc" "stderr: $err"
    return
  fi
  for k in "$@"; do
    mrun "$k" transform --src-dir "$d/src" --dst-dir "$d/n$k-$fmt" "${strategies[@]}" --format "$fmt"
    if [[ $rc -ne 0 ]]; then
      fail "$name ($fmt): $k processes" "exit code $rc" "stderr: $err"
    elif [[ $(listing "$d/n$k-$fmt") != "$(listing "$d/one-$fmt")" ]]; then
      fail "$name ($fmt): $k processes write the files of one, byte for byte" \
        "$(diff <(listing "$d/one-$fmt") <(listing "$d/n$k-$fmt") || true)"
    elif [[ $out != *"$k processes)"* || -n $err ]]; then
      fail "$name ($fmt): $k processes: one summary naming $k processes, nothing on stderr" "stdout: $out" "stderr: $err"
    else
      pass
    fi
  done
}

scenario retrain_8to4
same_as_one "8->4 retrain, optimizer sharding, CRC trailers" ckpt 2 3
scenario infer_8to4
same_as_one "8->4 inference" ckpt 2 3
same_as_one "8->4 inference" safetensors 2 3
scenario uneven_8to3
same_as_one "8->3 uneven" ckpt 2 3 5
same_as_one "8->3 uneven" safetensors 2
scenario six_to_4
same_as_one "6->4 from safetensors" ckpt 3
scenario to_pipeline
same_as_one "4 ranks to a 2-stage pipeline" ckpt 2 3
scenario pipeline_to4
run merge-strategies --src-dir "$d/stages" --dst-file "$d/merged_strategy.ckpt"
same_as_one "a merged 2-stage pipeline to 4 ranks" ckpt 2
# a PyTorch DCP checkpoint (torch 1.13's column split of verify/data/dcp/cols) to 4 ranks: its
# chunks are its layout, no source strategy
d=$tmp/dcp
mkdir -p "$d"
cp -r "$SRC/verify/data/dcp/cols" "$d/src"
cat >"$d/dst.json" <<'EOF'
{"current_stage": 1, "parallel_layout_item": {
  "w": {"dev_matrix": [4], "tensor_map": [-1, 0], "tensor_shape": [3, 4], "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}
EOF
strategies=(--dst-strategy "$d/dst.json")
same_as_one "a DCP checkpoint to 4 ranks" safetensors 2 3
# into a DCP checkpoint (--format dcp): its .metadata lists every rank's chunks, so K processes
# are refused (exit 1, said once, nothing written) and one process writes it
mrun 2 transform --src-dir "$d/src" --dst-dir "$d/dcp_out" "${strategies[@]}" --format dcp
n=$(grep -c "whose .metadata lists the chunks of every target rank" <<<"$err" || true)
if [[ $rc -eq 1 && $n -eq 1 && ! -e $d/dcp_out ]]; then pass; else
  fail "--format dcp under mpirun -n 2: exit 1, said once, nothing written" "exit code $rc" "stderr: $err"
fi
mrun 1 transform --src-dir "$d/src" --dst-dir "$d/dcp_out" "${strategies[@]}" --format dcp
[[ $rc -eq 0 && -e $d/dcp_out/.metadata ]] && pass || fail "--format dcp under mpirun -n 1" "exit code $rc" "stderr: $err"
# the checker (numpy, protobuf's parser) accepts what 3 processes wrote
scenario uneven_8to3
mrun 3 transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}" --jobs 2
if [[ $rc -eq 0 ]] && report=$("$PY" "$SC" check "$d" "$d/out" 2>&1); then pass; else
  fail "3 processes, 8->3, --jobs 2: the checker accepts the files" "exit code $rc" "stderr: $err" "${report:-}"
fi

# --json: the split and the sums; progress: one bar on process 0, to 100% of all processes' files
scenario retrain_8to4
mrun 2 transform --src-dir "$d/src" --dst-dir "$d/json" "${strategies[@]}" --json --progress
shares=$(printf '%s' "$out" | "$PY" -c "import json,sys; print(json.dumps(json.load(sys.stdin)['processes']))" 2>/dev/null || true)
if [[ $rc -eq 0 ]] && printf '%s' "$out" | "$PY" -c "
import json, sys
j = json.load(sys.stdin)
ok = j['files'] == 4 and j['sliced'] == 28 and j['copied'] == 16 and sorted(sum(j['processes'], [])) == [0, 1, 2, 3]
# contiguous runs of target ranks, balanced by bytes (io::balance_targets): equal targets, 2 each
ok = ok and j['processes'] == [[0, 1], [2, 3]] and len(j['outputs']) == 4
sys.exit(0 if ok else 1)"; then pass; else fail "--json: files, sums, processes" "stdout: $out" "stderr: $err"; fi
bars=$(grep -o '100% \[#*\][^%]*4/4 files' <<<"$err" | wc -l)
if [[ $bars -eq 1 ]]; then pass; else fail "--progress: one bar reaching 4/4 files" "stderr: $err"; fi

# every field of the summary merged (io::merge_summaries): the casts, the files written and the
# manifest of 2 processes are those of one process (the casts were once dropped: "casts": [])
run transform --src-dir "$d/src" --dst-dir "$d/cast1" "${strategies[@]}" --dtype bfloat16 --json \
  --manifest "$d/cast1.json"
one=$out
mrun 2 transform --src-dir "$d/src" --dst-dir "$d/cast2" "${strategies[@]}" --dtype bfloat16 --json \
  --manifest "$d/cast2.json"
if [[ $rc -eq 0 ]] && "$PY" -c "
import json, sys
one, two = json.loads(sys.argv[1]), json.loads(sys.argv[2])
m1, m2 = json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
strip = lambda fs: [dict(f, path=f['path'].replace('cast1', 'X').replace('cast2', 'X')) for f in fs]
ok = len(one['casts']) > 0 and one['casts'] == two['casts']
ok = ok and [f['sha256'] for f in one['written']] == [f['sha256'] for f in two['written']]
ok = ok and len(m1['files']) == 4 and strip(m1['files']) == strip(m2['files'])
sys.exit(0 if ok else 1)" "$one" "$out" "$d/cast1.json" "$d/cast2.json"; then pass; else
  fail "--dtype bfloat16 --json --manifest: 2 processes report the casts, files and manifest of one" \
    "one: $one" "two: $out" "stderr: $err"
fi

# each process opens the source files its targets need: the base file t % M and rank-list's ranks
needed() {  # needed TARGET...: the union of rank-list of the targets
  local t
  for t in "$@"; do
    run rank-list --rank "$t" "${strategies[@]}"
    printf '%s\n' "$out"
  done | "$PY" -c "import json,sys; print(' '.join(map(str, sorted(set().union(*(json.loads(l) for l in sys.stdin if l.strip()))))))"
}
if command -v strace >/dev/null; then
  # --jobs 1: each process one thread, so a pid's openat calls are its process's
  strace -f -qq -e trace=openat -o "$tmp/trace" "$MPIEXEC" -n 2 "${mpiflags[@]}" "$RESHARD" transform \
    --src-dir "$d/src" --dst-dir "$d/traced" "${strategies[@]}" --jobs 1 >/dev/null 2>&1 || true
  # every process opens exactly the source files its targets need (process 0 once planned the
  # whole transform, opening all 8 where its targets need 6)
  for k in 0 1; do
    ktargets=$("$PY" -c "import json,sys; print(' '.join(map(str, json.loads(sys.argv[1])[$k])))" "$shares")
    first=${ktargets%% *}
    # the pid of the process that wrote its first target's file, and the source files it opened
    pk=$(grep "traced/rank_$first/checkpoint_$first.ckpt.reshard" "$tmp/trace" | head -1 | awk '{print $1}')
    opened=$(grep "^$pk .*src/rank_[0-9]*/net.ckpt" "$tmp/trace" | sed 's|.*src/rank_\([0-9]*\)/net.ckpt.*|\1|' | sort -n -u | tr '\n' ' ')
    # shellcheck disable=SC2086
    want=$(needed $ktargets)
    if [[ -n $pk && "${opened% }" == "$want" ]]; then pass; else
      fail "process $k (targets [$ktargets]) opens source ranks [$want] only" "opened: [$opened] (pid $pk)"
    fi
  done
else
  echo "strace not found: the check of the files each process opens is skipped"
fi

# a bad source file that only one process reads: the run fails before anything is written, the
# message printed once (by process 0), naming the file and the process that found it
read -r -a p0 < <("$PY" -c "import json,sys; print(' '.join(map(str, json.loads(sys.argv[1])[0])))" "$shares")
read -r -a p1 < <("$PY" -c "import json,sys; print(' '.join(map(str, json.loads(sys.argv[1])[1])))" "$shares")
only1=$(comm -13 <(needed "${p0[@]}" | tr ' ' '\n' | sort) <(needed "${p1[@]}" | tr ' ' '\n' | sort) | sort -n | tail -1)
if [[ -z $only1 ]]; then
  fail "a source rank that only process 1 needs (targets ${p1[*]} vs ${p0[*]})"
else
  bad=$tmp/bad
  cp -r "$d" "$bad"
  f=$bad/src/rank_$only1/net.ckpt
  size=$(stat -c %s "$f")
  # flip one byte of the last tensor's data (before the 17-byte CRC trailer): a CRC mismatch
  printf '\xff' | dd of="$f" bs=1 seek=$((size - 18)) conv=notrunc 2>/dev/null
  mrun 2 transform --src-dir "$bad/src" --dst-dir "$bad/out" "${strategies[@]//$d/$bad}"
  n=$(grep -c "rank_$only1/net.ckpt: CRC mismatch" <<<"$err" || true)
  if [[ $rc -eq 1 && -z $out && $n -eq 1 && $err == *"(process 1 of 2)"* && ! -e $bad/out ]]; then pass; else
    fail "a CRC mismatch in rank_$only1, read by process 1 only: exit 1, printed once, nothing written" \
      "exit code $rc, printed $n times" "stdout: $out" "stderr: $err" "$(find "$bad/out" 2>/dev/null || true)"
  fi
fi

# a missing rank directory that no target reads: each process checks only its share of the rank
# directories (not all M), yet K processes refuse it as one process does: exit 1, the message
# once, nothing written. bench/scale_ranks.py's checkpoint at 16 -> 12 ranks: the targets read
# source ranks 0..11 (each slice from the nearest replica), so 12..15 are read by none
g=$tmp/gone
"$PY" - "$SRC" "$g" <<'PYEOF'
import os, sys
sys.path[:0] = [os.path.join(sys.argv[1], "bench"), os.path.join(sys.argv[1], "verify", "python")]
import ms_proto, scale_ranks as s
mods, params = ms_proto.load(), s.model(24)  # hidden 24: every dim splits 8 and 12 ways
fulls, d = s.full_tensors(params), sys.argv[2]
os.makedirs(d)
s.generate(d + "/src", s.class_files(mods, params, fulls, 16, s.SRC_TP), 16, s.SRC_TP)
s.write_strategy(d + "/src.ckpt", mods, params, 16, s.SRC_TP)
s.write_strategy(d + "/dst.ckpt", mods, params, 12, s.DST_TP)
PYEOF
gs=(--src-strategy "$g/src.ckpt" --dst-strategy "$g/dst.ckpt")
saved=("${strategies[@]}")
strategies=("${gs[@]}")  # for needed
read_by_some=$(needed 0 1 2 3 4 5 6 7 8 9 10 11)
if [[ $read_by_some != "0 1 2 3 4 5 6 7 8 9 10 11" ]]; then
  fail "16 -> 12: the targets read source ranks 0..11" "rank-list: $read_by_some"
fi
for r in 12 15; do
  mv "$g/src/rank_$r" "$g/away"
  run transform --src-dir "$g/src" --dst-dir "$g/one" "${gs[@]}"
  msg="rank_$r: missing rank directory"
  if [[ $rc -eq 1 && $err == *"$msg"* && ! -e $g/one ]]; then pass; else
    fail "rank_$r missing, one process: exit 1 naming it" "exit code $rc" "stderr: $err"
  fi
  for k in 2 3; do
    mrun "$k" transform --src-dir "$g/src" --dst-dir "$g/n$k" "${gs[@]}"
    n=$(grep -c "$msg" <<<"$err" || true)
    if [[ $rc -eq 1 && -z $out && $n -eq 1 && ! -e $g/n$k ]]; then pass; else
      fail "rank_$r (read by no target) missing, $k processes: exit 1, said once, nothing written" \
        "exit code $rc, said $n times" "stdout: $out" "stderr: $err"
    fi
  done
  mv "$g/away" "$g/src/rank_$r"
done
# 2 processes open the files their targets need, rank-list's, the two runs sharing only the files
# at their border: 12 for one process, 14 for two (targets 0..5 and 6..11 both read ranks 4, 5)
mrun 2 transform --src-dir "$g/src" --dst-dir "$g/n2" "${gs[@]}" --json
j2=$out
mrun 1 transform --src-dir "$g/src" --dst-dir "$g/n1" "${gs[@]}" --json
if [[ $rc -eq 0 ]] && "$PY" -c "
import json, sys
two, one = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ok = one['source_files'] == 12 and two['processes'] == [list(range(6)), list(range(6, 12))]
sys.exit(0 if ok and two['source_files'] == int(sys.argv[3]) + int(sys.argv[4]) == 14 else 1)" "$j2" "$out" \
  "$(needed 0 1 2 3 4 5 | wc -w)" "$(needed 6 7 8 9 10 11 | wc -w)"; then
  pass; else fail "16 -> 12: 12 source files for one process, 14 for two (rank-list's of each run)" "two: $j2" "one: $out"; fi
strategies=("${saved[@]}")

# a target that process 1 cannot write (its directory is a file): the files process 0 wrote are
# removed, not renamed into place
t1=${p1[-1]}
mkdir -p "$d/blocked"
: >"$d/blocked/rank_$t1"
mrun 2 transform --src-dir "$d/src" --dst-dir "$d/blocked" "${strategies[@]}"
n=$(grep -c "rank_$t1/checkpoint_$t1.ckpt" <<<"$err" || true)
left=$(find "$d/blocked" -mindepth 1 ! -name "rank_$t1")
if [[ $rc -eq 1 && $n -eq 1 && -z $left ]]; then pass; else
  fail "target $t1 unwritable on process 1: exit 1, printed once, process 0's files removed" "exit code $rc" \
    "stderr: $err" "left: $left"
fi

# an existing output of one process: nothing written unless --force, then the files of one process
mkdir -p "$d/exists/rank_$t1"
cp "$d/one-ckpt/rank_0/checkpoint_0.ckpt" "$d/exists/rank_$t1/checkpoint_$t1.ckpt"
mrun 2 transform --src-dir "$d/src" --dst-dir "$d/exists" "${strategies[@]}"
n=$(grep -c "checkpoint_$t1.ckpt exists (pass force / --force" <<<"$err" || true)
if [[ $rc -eq 1 && $n -eq 1 && $(find "$d/exists" -type f | wc -l) -eq 1 ]]; then pass; else
  fail "an existing output: exit 1, printed once, nothing written" "exit code $rc" "stderr: $err" "$(find "$d/exists")"
fi
mrun 2 transform --src-dir "$d/src" --dst-dir "$d/exists" "${strategies[@]}" --force
if [[ $rc -eq 0 && $(listing "$d/exists") == "$(listing "$d/one-ckpt")" ]]; then pass; else
  fail "--force replaces it: the files of one process" "exit code $rc" "stderr: $err"
fi

# a process killed after its first file: the job fails, and no file has an output's name
mrun 2 transform --src-dir "$d/src" --dst-dir "$d/killed" "${strategies[@]}" >/dev/null
rc_plain=$rc
RESHARD_TEST_KILL_PROCESS=1 mrun 2 transform --src-dir "$d/src" --dst-dir "$d/killed2" "${strategies[@]}"
finals=$(find "$d/killed2" -name 'checkpoint_*.ckpt')
parts=$(find "$d/killed2" -name '*.part' | wc -l)
if [[ $rc_plain -eq 0 && $rc -ne 0 && -z $finals && $parts -ge 1 ]]; then pass; else
  fail "process 1 killed after its first file: the job fails, no output under its final name" \
    "exit codes $rc_plain (no kill), $rc (kill)" "finals: $finals" "stderr: $err"
fi

# direct writes refused by the filesystem (RESHARD_TEST_DIRECT_EINVAL_AFTER=0, in every process):
# the files written buffered are counted in each process and summed in the one summary
row_blocks_source "$tmp/rows"
RESHARD_TEST_DIRECT_EINVAL_AFTER=0 mrun 2 transform --src-dir "$tmp/rows/src" --dst-dir "$tmp/rows/out" \
  --dst-strategy "$tmp/rows/dst.json" --write-mode direct --json
if [[ $rc -eq 0 ]] && printf '%s' "$out" | "$PY" -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if j["files"] == 4 and j["direct_refused_files"] == 4 and len(j["processes"]) == 2 else 1)'; then
  pass
else
  fail "2 processes, direct writes refused: the 4 files counted in the one summary" "exit code $rc" "stdout: $out" "stderr: $err"
fi

# the other subcommands run as one process only
mrun 2 inspect "$d/src/rank_0/net.ckpt"
n=$(grep -c "only 'reshard transform' runs as 2 processes" <<<"$err" || true)
if [[ $rc -eq 2 && -z $out && $n -eq 1 ]]; then pass; else fail "inspect under mpirun -n 2: exit 2, said once" "exit code $rc" "stderr: $err"; fi

finish
