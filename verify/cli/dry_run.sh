#!/usr/bin/env bash
# --dry-run: writes nothing, reads no tensor data, and says what the real run then does. On the
# 8->4 retrain (optimizer sharding, CRC trailers), 8->3 (uneven) and 8 -> a 2-stage pipeline
# scenarios: the dry run's per-target source ranks are the ranks `rank-list` prints, its bytes
# read and written are those of the real run's summary, its cross-rank bytes equal their lower
# bound; under strace the dry run makes no read(2)/pread(2) of a source file, the real run does;
# merge, split and convert take it too; a dry run still reports bad input (exit 1).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

for name in retrain_8to4 uneven_8to3 to_pipeline; do
  scenario "$name"
  run transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}" --dry-run --json
  if [[ $rc -ne 0 ]]; then fail "$name: dry run" "exit code $rc" "stderr: $err"; continue; fi
  dry=$out
  if [[ -e $d/out ]]; then fail "$name: the dry run wrote $d/out"; else pass; fi
  # the source ranks of each target are those rank-list names
  n=$(printf '%s' "$dry" | "$PY" -c "import json,sys; print(len(json.load(sys.stdin)['targets']))")
  for ((t = 0; t < n; t++)); do
    run rank-list --rank "$t" "${strategies[@]}"
    want=$(printf '%s' "$out" | "$PY" -c "import json,sys; print(sorted(json.load(sys.stdin)))")
    got=$(printf '%s' "$dry" | "$PY" -c "import json,sys; print(sorted(r['rank'] for r in json.load(sys.stdin)['targets'][$t]['reads']))")
    if [[ $want == "$got" ]]; then pass; else fail "$name: target $t reads $got, rank-list says $want"; fi
  done
  # the real run reads and writes what the dry run said
  run transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}" --json
  real=$out
  verdict=$(printf '%s\n%s' "$dry" "$real" | "$PY" -c '
import json, sys
text = sys.stdin.read()
dec = json.JSONDecoder()
dry, at = dec.raw_decode(text)
real, _ = dec.raw_decode(text[at:].lstrip())
problems = []
if dry["bytes_read"] != real["bytes_read"]:
    problems.append("bytes read %d, the run read %d" % (dry["bytes_read"], real["bytes_read"]))
if dry["cross_rank_bytes"] != dry["lower_bound_bytes"]:
    problems.append("cross-rank %d above the lower bound %d" % (dry["cross_rank_bytes"], dry["lower_bound_bytes"]))
if dry["source_files"] != real["source_files"]:
    problems.append("%d source files, the run read %d" % (dry["source_files"], real["source_files"]))
if sum(t["bytes_written"] for t in dry["targets"]) != dry["bytes_written"]:
    problems.append("the targets do not add up")
if dry["bytes_written"] > real["bytes_written"]:
    problems.append("more tensor bytes (%d) than the files written (%d)" % (dry["bytes_written"], real["bytes_written"]))
print("; ".join(problems))
')
  if [[ -z $verdict ]]; then pass; else fail "$name: dry run vs run" "$verdict"; fi
done

# no data reads: the dry run's only reads of a source file (strace) are the one whole-file pread
# that indexes a small file (index_reads_only); the real run reads more
scenario retrain_8to4
count_reads() {  # count_reads ARGS...: read-like calls on files under $d/src (the log in $tmp/trace)
  rm -f "$tmp"/tr.*  # -ff: a log per thread, so that no call is split into unfinished and resumed
  strace -ff -qq -e trace=read,pread64,readv,preadv,preadv2 -e signal=none -y -o "$tmp/tr" "$RESHARD" "$@" >/dev/null 2>&1 || true
  cat "$tmp"/tr.* >"$tmp/trace"
  grep -c "<$d/src/" "$tmp/trace" || true
}
dry_reads=$(count_reads transform --src-dir "$d/src" --dst-dir "$d/dry" "${strategies[@]}" --dry-run)
dry_extra=$(index_reads_only "$tmp/trace" "$d/src")
real_reads=$(count_reads transform --src-dir "$d/src" --dst-dir "$d/real" "${strategies[@]}" --read-mode pread)
if [[ -z $dry_extra && $real_reads -gt $dry_reads ]]; then pass; else
  fail "no data reads" "dry run: $dry_reads read calls on sources (beyond indexing: ${dry_extra:-none}), real run: $real_reads"
fi
if [[ -e $d/dry ]]; then fail "the traced dry run wrote $d/dry"; else pass; fi

# the other commands take it
run merge --src-dir "$d/src" --out "$d/full.ckpt" "${strategies[0]}" "${strategies[1]}" --dry-run
if [[ $rc -eq 0 && ! -e $d/full.ckpt ]] && grep -q "would be merged" <<<"$out"; then pass; else fail "merge --dry-run" "rc $rc" "$out" "$err"; fi
run merge --src-dir "$d/src" --out "$d/full.ckpt" "${strategies[0]}" "${strategies[1]}"
run convert --in "$d/full.ckpt" --out "$d/full2.ckpt" --dry-run --json
if [[ $rc -eq 0 && ! -e $d/full2.ckpt ]] && grep -q '"dry_run": true' <<<"$out"; then pass; else fail "convert --dry-run" "rc $rc" "$out" "$err"; fi

# bad input is still reported
expect_error "dry run of a missing source" 1 "source directory $d/nowhere does not exist" \
  transform --src-dir "$d/nowhere" --dst-dir "$d/out2" "${strategies[@]}" --dry-run
mkdir -p "$d/taken/rank_0" && : >"$d/taken/rank_0/checkpoint_0.ckpt"
expect_error "dry run onto an existing output" 1 "exists (pass force / --force to replace it)" \
  transform --src-dir "$d/src" --dst-dir "$d/taken" "${strategies[@]}" --dry-run

finish
