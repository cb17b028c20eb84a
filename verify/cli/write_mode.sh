#!/usr/bin/env bash
# --write-mode: buffered (through the page cache) and direct (O_DIRECT from an aligned buffer)
# write the same bytes for every format (ckpt, safetensors, a Hugging Face checkpoint, DCP), for
# transform, merge and execute, with one job and two; the summary says which mode ran (auto:
# direct where the outputs are fsynced on a local disk filesystem and reads are not mmap,
# buffered on tmpfs and with --no-sync); direct with --read-mode mmap is refused (exit 1, nothing
# written); an unknown mode is bad usage (exit 2). The default --jobs is one per core, two per core
# with direct writes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"  # $tmp: in the system's temporary directory, a disk usually

scenario retrain_8to4
strategies+=(--exclude optimizer_name --exclude emb_table)  # a str and a map tensor: only ckpt holds them
fs=$(stat -f -c %T "$tmp")
case $fs in ext2/ext3 | xfs | btrfs) disk=1 ;; *) disk=0 ;; esac

# same_tree A B: the same files, byte for byte, and nothing staged left in B
same_tree() {
  diff -r "$1" "$2" >/dev/null 2>&1 && ! find "$2" -name '*.reshard-*' | grep -q .
}

for fmt in ckpt safetensors hf dcp; do
  for jobs in 1 2; do
    ref=$tmp/ref_${fmt}_$jobs
    expect_json "transform --format $fmt --jobs $jobs --write-mode buffered says buffered" \
      'j["write_mode"] == "buffered"' \
      transform --src-dir "$d/src" --dst-dir "$ref" "${strategies[@]}" --format "$fmt" --jobs "$jobs" \
      --write-mode buffered --json
    out_dir=$tmp/direct_${fmt}_$jobs
    expect_json "transform --format $fmt --jobs $jobs --write-mode direct says direct" \
      'j["write_mode"] == "direct"' \
      transform --src-dir "$d/src" --dst-dir "$out_dir" "${strategies[@]}" --format "$fmt" --jobs "$jobs" \
      --write-mode direct --json
    if same_tree "$ref" "$out_dir"; then pass; else fail "$fmt --jobs $jobs: direct and buffered outputs differ"; fi
  done
done

# auto: direct on a local disk (fsynced outputs, pread), buffered with --no-sync or mmap reads
want=$([[ $disk -eq 1 ]] && echo direct || echo buffered)
expect_json "auto on $fs is $want" "j[\"write_mode\"] == \"$want\"" \
  transform --src-dir "$d/src" --dst-dir "$tmp/auto" "${strategies[@]}" --json
if same_tree "$tmp/ref_ckpt_1" "$tmp/auto"; then pass; else fail "auto: outputs differ from buffered"; fi
expect_json "auto with --no-sync is buffered" 'j["write_mode"] == "buffered"' \
  transform --src-dir "$d/src" --dst-dir "$tmp/nosync" "${strategies[@]}" --no-sync --json
expect_json "auto with --read-mode mmap is buffered" 'j["write_mode"] == "buffered"' \
  transform --src-dir "$d/src" --dst-dir "$tmp/mmap" "${strategies[@]}" --read-mode mmap --json
if [[ -d /dev/shm && $(stat -f -c %T /dev/shm) == tmpfs ]]; then
  shm=$(mktemp -d /dev/shm/reshard_write_mode.XXXXXX)
  expect_json "auto on tmpfs is buffered" 'j["write_mode"] == "buffered"' \
    transform --src-dir "$d/src" --dst-dir "$shm/out" "${strategies[@]}" --json
  rm -rf "$shm"
fi

# the default jobs: one per core, two per core with direct writes, at most one per target (4 here)
cores=$(nproc)
expect_json "direct: two jobs per core" "j[\"jobs\"] == min(4, 2 * $cores)" \
  transform --src-dir "$d/src" --dst-dir "$tmp/jobs_direct" "${strategies[@]}" --write-mode direct --json
expect_json "buffered: one job per core" "j[\"jobs\"] == min(4, $cores)" \
  transform --src-dir "$d/src" --dst-dir "$tmp/jobs_buffered" "${strategies[@]}" --write-mode buffered --json
expect_json "--jobs 3 is kept with direct writes" 'j["jobs"] == 3' \
  transform --src-dir "$d/src" --dst-dir "$tmp/jobs_3" "${strategies[@]}" --write-mode direct --jobs 3 --json

# merge into one ckpt file, and execute of a saved plan, in both modes
for mode in buffered direct; do
  ok "merge --write-mode $mode" merge --src-dir "$d/src" "${strategies[@]:0:2}" --exclude optimizer_name --exclude emb_table --out "$tmp/merged_$mode.ckpt" \
    --write-mode "$mode"
done
if cmp -s "$tmp/merged_buffered.ckpt" "$tmp/merged_direct.ckpt"; then pass; else fail "merge: direct and buffered differ"; fi
ok "plan-out" transform --src-dir "$d/src" --dst-dir "$tmp/planned" "${strategies[@]}" --plan-out "$tmp/plan.json"
expect_json "execute --write-mode direct says direct" 'j["write_mode"] == "direct"' \
  execute "$tmp/plan.json" --write-mode direct --json
if same_tree "$tmp/ref_ckpt_1" "$tmp/planned"; then pass; else fail "execute --write-mode direct: outputs differ"; fi

# refused: direct with mapped reads (exit 1, nothing written); an unknown mode (exit 2)
expect_error "direct with --read-mode mmap" 1 "write_mode direct cannot be used with read_mode mmap" \
  transform --src-dir "$d/src" --dst-dir "$tmp/refused" "${strategies[@]}" --write-mode direct --read-mode mmap
if [[ ! -e $tmp/refused ]]; then pass; else fail "the refused run left $tmp/refused"; fi
expect_error "an unknown --write-mode" 2 "--write-mode" \
  transform --src-dir "$d/src" --dst-dir "$tmp/bad" "${strategies[@]}" --write-mode sometimes

finish
