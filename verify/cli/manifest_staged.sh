#!/usr/bin/env bash
# --manifest is an output like the others (issue "Hostile input, round two", rows 4 and 5): it is
# staged with the outputs and renamed into place after all of them, so it never lists files that
# are not all there: killed after each unit of progress (RESHARD_TEST_CRASH_AFTER, every rename
# included), a run leaves either no manifest or one whose every file exists and checks. It may not
# be a source or an output, even with --force, and an existing one needs --force. When it cannot
# be written, nothing is committed, and with --force the old outputs stay as they were.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
sums() { find "$@" -type f -exec sha256sum {} + 2>/dev/null | sort; }

scenario retrain_8to4
srcsum=$(sums "$d/src")

# a manifest that is a source or an output: refused even with --force, nothing written
run merge --src-dir "$d/src" --out "$d/m.ckpt" "${strategies[0]}" "${strategies[1]}" --manifest "$d/m.ckpt" --force
if [[ $rc -eq 1 && ! -e $d/m.ckpt ]] && grep -q "is an output of this run" <<<"$err"; then pass; else fail "--manifest = --out" "rc $rc" "$err"; fi
src0=$(ls "$d"/src/rank_0/*.ckpt | tail -1)  # the file the run reads: the last by name
run merge --src-dir "$d/src" --out "$d/m.ckpt" "${strategies[0]}" "${strategies[1]}" --manifest "$src0" --force
if [[ $rc -eq 1 && ! -e $d/m.ckpt ]] && grep -q "is the source file of rank 0" <<<"$err"; then pass; else fail "--manifest = a source" "rc $rc" "$err"; fi
run transform --src-dir "$d/src" --dst-dir "$d/out" "${strategies[@]}" --manifest "$d/out/rank_1/checkpoint_1.ckpt" --force
if [[ $rc -eq 1 && ! -e $d/out ]] && grep -q "is an output of this run" <<<"$err"; then pass; else fail "--manifest = a target rank's file" "rc $rc" "$err"; fi
run merge --src-dir "$d/src" --out "$d/hf" "${strategies[0]}" "${strategies[1]}" --format hf --manifest "$d/hf/model.safetensors.index.json"
if [[ $rc -eq 1 && ! -e $d/hf/model.safetensors.index.json ]] && grep -q "Hugging Face checkpoint" <<<"$err"; then pass; else fail "--manifest in an hf output" "rc $rc" "$err"; fi
if [[ $(sums "$d/src") == "$srcsum" ]]; then pass; else fail "the sources changed"; fi

# an existing manifest: refused without --force (nothing written), replaced with it
echo old >"$d/m.json"
rm -f "$d/m.ckpt"
run merge --src-dir "$d/src" --out "$d/m.ckpt" "${strategies[0]}" "${strategies[1]}" --manifest "$d/m.json"
if [[ $rc -eq 1 && ! -e $d/m.ckpt && $(cat "$d/m.json") == old ]] && grep -q "exists" <<<"$err"; then pass; else fail "an existing manifest" "rc $rc" "$err"; fi
run merge --src-dir "$d/src" --out "$d/m.ckpt" "${strategies[0]}" "${strategies[1]}" --manifest "$d/m.json" --force
if [[ $rc -eq 0 && -e $d/m.ckpt ]] && grep -q '"manifest": "reshard"' "$d/m.json"; then pass; else fail "--manifest --force" "rc $rc" "$err"; fi

# a manifest that cannot be written: nothing committed; with --force the old outputs unchanged
echo file >"$d/not_a_dir"
run transform --src-dir "$d/src" --dst-dir "$d/o1" "${strategies[@]}" --manifest "$d/not_a_dir/m.json"
if [[ $rc -eq 1 && ! -e $d/o1 ]]; then pass; else fail "unwritable manifest: outputs committed" "rc $rc" "$err"; fi
run transform --src-dir "$d/src" --dst-dir "$d/o2" "${strategies[@]}" --no-sync
before=$(sums "$d/o2")
run transform --src-dir "$d/src" --dst-dir "$d/o2" "${strategies[@]}" --dtype float32 --force --manifest "$d/not_a_dir/m.json"
if [[ $rc -eq 1 && $(sums "$d/o2") == "$before" ]] && ! grep -q "pass overwrite" <<<"$err"; then pass; else fail "unwritable manifest with --force" "rc $rc" "$err"; fi

# killed at every rename into place, and before and in the writes: no manifest, or one whose files
# are all there and check. A unit is a byte written or a rename (two per file: its temporary to
# the staged name, then into place); the last F + 1 units are the renames into place, the
# manifest's last.
run transform --src-dir "$d/src" --dst-dir "$d/full" "${strategies[@]}" --no-sync --manifest "$d/full.json"
F=$(find "$d/full" -type f | wc -l)
bytes=$(( $(find "$d/full" -type f -printf '%s+' ; echo 0) + $(stat -c %s "$d/full.json") ))
U=$((bytes + 2 * (F + 1)))
bad=0 seen=0
for n in 0 $((bytes / 2)) $(seq $((U - F - 3)) $U); do
  rm -rf "$d/k" "$d/k.json"
  RESHARD_TEST_CRASH_AFTER=$n "$RESHARD" transform --src-dir "$d/src" --dst-dir "$d/k" "${strategies[@]}" --no-sync \
    --manifest "$d/k.json" >/dev/null 2>&1 || true
  if [[ -e $d/k.json ]]; then
    seen=$((seen + 1))
    run verify --src-dir "$d/src" --dst-dir "$d/k" "${strategies[@]}" --manifest "$d/k.json"
    if [[ $rc -ne 0 ]]; then bad=1; fail "killed after $n of $U units: the manifest lists files that are not all there" "$out"; fi
  elif [[ $n -ge $U ]]; then
    bad=1; fail "not killed ($n of $U units): no manifest"
  fi
done
if [[ $bad -eq 0 && $seen -ge 1 ]]; then pass; else fail "kills: $seen runs left a manifest"; fi

finish
