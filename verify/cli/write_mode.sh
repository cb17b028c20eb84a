#!/usr/bin/env bash
# --write-mode: buffered (through the page cache) and direct (O_DIRECT from an aligned buffer)
# write the same bytes for every format (ckpt, safetensors, a Hugging Face checkpoint, DCP), for
# transform, merge and execute, with one job and two; the summary says which mode ran (auto:
# direct where the outputs are fsynced on a local disk filesystem and reads are not mmap,
# buffered on tmpfs and with --no-sync); direct with --read-mode mmap is refused (exit 1, nothing
# written); an unknown mode is bad usage (exit 2). A filesystem that refuses O_DIRECT (injected:
# RESHARD_TEST_DIRECT_EINVAL_AFTER=0 refuses every direct write(2)) gets the same files written
# buffered, and the summary counts them (JSON direct_refused_files; the text "N files buffered"),
# summed over the jobs, for transform and execute; RESHARD_TEST_DIRECT_EINVAL_AFTER=2 lets two
# direct writes through, and two files of the four are counted. The default --jobs is one per core, two per core
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

# direct writes refused by the filesystem. The scenario's files are smaller than one direct block
# (they go out buffered at commit, no direct write tried): row_blocks_source's 4 targets of 16 KiB
# are each one direct write(2) and a buffered tail
big=$tmp/big
row_blocks_source "$big"
split=(--src-dir "$big/src" --dst-strategy "$big/dst.json")
ok "split by rows, buffered" transform "${split[@]}" --dst-dir "$big/ref" --write-mode buffered
# every direct write refused (=0), or those after the first two (=2: two files of the four); 1 and 2 jobs
for after in 0 2; do
  want=$((after == 0 ? 4 : 2))
  for jobs in 1 2; do
    RESHARD_TEST_DIRECT_EINVAL_AFTER=$after expect_json "direct refused after $after writes, --jobs $jobs: $want files counted" \
      "j[\"write_mode\"] == \"direct\" and j[\"files\"] == 4 and j[\"direct_refused_files\"] == $want" \
      transform "${split[@]}" --dst-dir "$big/refused_${after}_$jobs" --write-mode direct --jobs "$jobs" --json
    if same_tree "$big/ref" "$big/refused_${after}_$jobs"; then pass; else fail "refused after $after, --jobs $jobs: outputs differ"; fi
  done
done
RESHARD_TEST_DIRECT_EINVAL_AFTER=0 expect_text "direct refused: the text summary says so" \
  'writes direct \(4 files buffered: the filesystem refused O_DIRECT\)' \
  transform "${split[@]}" --dst-dir "$big/refused_text" --write-mode direct
if same_tree "$big/ref" "$big/refused_text"; then pass; else fail "direct refused (text): outputs differ"; fi
ok "split: plan-out" transform "${split[@]}" --dst-dir "$big/planned" --plan-out "$big/plan.json"
RESHARD_TEST_DIRECT_EINVAL_AFTER=0 expect_json "execute, direct refused: every file counted" \
  'j["write_mode"] == "direct" and j["direct_refused_files"] == 4' execute "$big/plan.json" --write-mode direct --json
if same_tree "$big/ref" "$big/planned"; then pass; else fail "execute, direct refused: outputs differ"; fi
if [[ $disk -eq 1 ]]; then  # a local disk takes O_DIRECT: nothing counted, the text plain
  expect_json "direct on $fs: no file buffered" 'j["direct_refused_files"] == 0' \
    transform "${split[@]}" --dst-dir "$big/taken" --write-mode direct --json
  expect_text "direct on $fs: the text summary says direct alone" 'writes direct$' \
    transform "${split[@]}" --dst-dir "$big/taken_text" --write-mode direct
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
