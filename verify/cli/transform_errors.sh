#!/usr/bin/env bash
# Bad input to the checkpoint subcommands: exit 2 for usage, 1 for bad input, nothing on stdout,
# one line on stderr naming the file, the parameter and the reason; the inputs unchanged (hashed
# before and after) and no output file left behind.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

"$PY" "$SC" gen retrain_8to4 "$tmp/base" >/dev/null  # 8 ranks, CRC trailers, str and map tensors
n=0
# fresh: a copy of the scenario in $d; S and D are its strategies
fresh() {
  n=$((n + 1))
  d=$tmp/case$n
  cp -r "$tmp/base" "$d"
  S=$d/src_strategy.ckpt
  D=$d/dst_strategy.ckpt
}
inputs() { (cd "$d" && find . -path ./out -prune -o -type f -print0 | sort -z | xargs -0 sha256sum); }

# fails_cleanly NAME CODE TEXT ARGS...: expect_error, then the inputs of $d are unchanged and
# $d/out holds no file
fails_cleanly() {
  local name=$1 before after
  before=$(inputs)
  expect_error "$@"
  after=$(inputs)
  if [[ $before == "$after" ]]; then pass; else fail "$name: an input changed"; fi
  if [[ -d $d/out && -n $(find "$d/out" -type f) ]]; then fail "$name: files left in out" "$(find "$d/out" -type f)"; else pass; fi
}

# edit FILE PYTHON: rewrites the checkpoint FILE with protobuf's Python library; PYTHON gets the
# parsed Checkpoint as `cp` (the crc_num trailer is dropped)
edit() {
  "$PY" - "$SRC/verify/python" "$1" "$2" <<'EOF'
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import ms_files, ms_proto
mods = ms_proto.load()
cp = ms_files.parse_ckpt(sys.argv[2])
exec(sys.argv[3])
open(sys.argv[2], "wb").write(b"".join(mods.checkpoint.Checkpoint(value=[v]).SerializeToString() for v in cp.value))
EOF
}

# usage: exit 2
fresh
expect_error "transform without --dst-dir" 2 "--dst-dir is required" transform --src-dir "$d/src"
expect_error "bad --format" 2 "--format: zip not in {ckpt,safetensors,hf,dcp}" transform --src-dir "$d/src" --dst-dir "$d/out" --format zip
expect_error "bad --jobs" 2 "--jobs" transform --src-dir "$d/src" --dst-dir "$d/out" --jobs many
expect_error "bad --max-memory" 2 "--max-memory: not a size: 12XB" transform --src-dir "$d/src" --dst-dir "$d/out" --max-memory 12XB
expect_error "overflowing --max-memory" 2 "--max-memory: not a size: 99999999999T" transform --src-dir "$d/src" --dst-dir "$d/out" --max-memory 99999999999T
expect_error "bad --checkpoint" 2 "'rank0.ckpt' is not SRC_RANK=FILE" transform-rank --rank 0 --checkpoint rank0.ckpt --out "$d/x.ckpt"
expect_error "negative --rank" 2 "--rank" rank-list --rank -1
expect_error "rank-list without --rank" 2 "--rank is required" rank-list
expect_error "inspect without a file" 2 "file is required" inspect
expect_error "merge-strategies without --dst-file" 2 "--dst-file is required" merge-strategies --src-dir "$d"

# bad input: exit 1
fresh
fails_cleanly "--max-memory below what the process holds" 1 "transform_checkpoints: max_memory 1 MiB is too small: the process holds" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D" --max-memory 1MiB
fails_cleanly "--max-memory with --read-mode mmap" 1 "max_memory cannot be kept with read_mode mmap" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D" --max-memory 1G --read-mode mmap
fails_cleanly "missing source directory" 1 "source directory $d/nowhere does not exist" \
  transform --src-dir "$d/nowhere" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"
rm -r "$d/src/rank_5"
fails_cleanly "missing rank directory" 1 "$d/src/rank_5: missing rank directory (the source has 8 ranks: rank_0 .. rank_7)" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"
mkdir "$d/src/rank_5"
fails_cleanly "rank directory without a checkpoint" 1 "$d/src/rank_5 holds no .ckpt or .safetensors file" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"

fresh
truncate -s -30 "$d/src/rank_3/net.ckpt"
fails_cleanly "truncated file" 1 "$d/src/rank_3/net.ckpt: parameter 'emb_table'" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"

fresh
"$PY" - "$d/src/rank_2/net.ckpt" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[b.index(b"layer1.weight") + 60] ^= 1  # a byte of the tensor's content: still parses
open(p, "wb").write(b)
EOF
fails_cleanly "CRC mismatch" 1 "ckpt: $d/src/rank_2/net.ckpt: CRC mismatch: the crc_num trailer holds" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"

fresh
edit "$d/src/rank_0/net.ckpt" "[setattr(v.tensor, 'tensor_type', 'Float33') for v in cp.value if v.tag == 'layer1.bias']"
fails_cleanly "unknown dtype" 1 "$d/src/rank_0/net.ckpt: parameter 'layer1.bias': unknown tensor_type 'Float33'" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"

fresh
edit "$d/src/rank_2/net.ckpt" "[(v.tensor.ClearField('dims'), v.tensor.dims.extend([8, 8])) for v in cp.value if v.tag == 'layer1.weight']"
fails_cleanly "dims disagree with the strategy" 1 \
  "$d/src/rank_2/net.ckpt: parameter 'layer1.weight': dims [8,8] disagree with the source strategy $S: layout dev[2,1,2,2] map[2,1] shape[16,8] gives rank 2 the slice [16,4]" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"

fresh
edit "$d/src/rank_0/net.ckpt" "keep = [v for v in cp.value if v.tag != 'layer1.bias']; del cp.value[:]; cp.value.extend(keep)"
fails_cleanly "a strategy names a parameter the checkpoint lacks" 1 \
  "$d/src/rank_0/net.ckpt: parameter 'layer1.bias' is listed in the source strategy $S (stage 0, ranks 0..7) but missing from this checkpoint" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"

fresh
edit "$d/src/rank_1/net.ckpt" "[setattr(v.tensor, 'tensor_type', 'BFloat16') for v in cp.value if v.tag == 'layer1.bias']"
fails_cleanly "mixed dtypes across ranks" 1 \
  "$d/src/rank_1/net.ckpt: parameter 'layer1.bias': dtype BFloat16 differs from Float16 in $d/src/rank_0/net.ckpt (mixed dtypes across ranks)" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"

fresh
printf 'not a checkpoint' >"$d/src/rank_4/z.ckpt"  # the last file in name order is the one read
fails_cleanly "corrupted file" 1 "$d/src/rank_4/z.ckpt: at byte 0" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"

fresh
fails_cleanly "missing strategy file" 1 "strategy: $d/nope.ckpt: cannot open for reading: No such file or directory" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$d/nope.ckpt" --dst-strategy "$D"
fails_cleanly "a checkpoint given as the strategy" 1 "strategy: $d/src/rank_0/net.ckpt:" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$d/src/rank_0/net.ckpt" --dst-strategy "$D"
printf '{"current_stage":1,"parallel_layout_item":{"layer1.weight":{"dev_matrix":[2,1,2,2],"tensor_map":[2,1],"field":1,"opt_weight_shard_step":0,"opt_weight_shard_size":0}}}' >"$d/field.json"
fails_cleanly "field != 0" 1 "strategy: $d/field.json: parameter 'layer1.weight': field 1 (MindSpore's embedding field split) is not supported" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$d/field.json" --dst-strategy "$D"
printf '{"current_stage":1,"parallel_layout_item":{"layer1.weight":{"dev_matrix":[2,1,2,2],"tensor_map":[-1,-1],"param_split_shape":[10,6],"indices_offset":[0,8],"field":0,"opt_weight_shard_step":0,"opt_weight_shard_size":0}}}' >"$d/offset.json"
fails_cleanly "indices_offset" 1 "parameter 'layer1.weight': indices_offset [0,8] is not supported (only the start rows of param_split_shape [10,6] are)" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$d/offset.json"
fails_cleanly "map and str tensors in safetensors" 1 "parameter 'optimizer_name' is a str tensor, which safetensors cannot hold (write ckpt)" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D" --format safetensors

# existing outputs: refused without --force, replaced with it
fresh
mkdir -p "$d/out/rank_2"
echo precious >"$d/out/rank_2/checkpoint_2.ckpt"
expect_error "existing output" 1 "$d/out/rank_2/checkpoint_2.ckpt exists (pass force / --force to replace it)" \
  transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D"
if [[ $(cat "$d/out/rank_2/checkpoint_2.ckpt") == precious && ! -e $d/out/rank_0 ]]; then pass; else
  fail "the existing output is untouched and nothing else was written"
fi
run transform --src-dir "$d/src" --dst-dir "$d/out" --src-strategy "$S" --dst-strategy "$D" --force
if [[ $rc -eq 0 ]] && "$PY" "$SC" check "$d" "$d/out" >/dev/null; then pass; else fail "--force replaces it" "stderr: $err"; fi

# one rank
fresh
fails_cleanly "transform-rank without a needed file" 1 \
  "target rank 0 needs the box [0:4,4:8] of parameter 'layer1.weight' from one of the source ranks 2,3,6,7, but no file was given for any of them" \
  transform-rank --rank 0 --checkpoint "0=$d/src/rank_0/net.ckpt" "1=$d/src/rank_1/net.ckpt" --out "$d/out/x.ckpt" \
  --src-strategy "$S" --dst-strategy "$D"
fails_cleanly "transform-rank of a rank the target lacks" 1 "target rank 4 is not a rank of the target strategy $D, which has 4 ranks" \
  transform-rank --rank 4 --checkpoint "0=$d/src/rank_0/net.ckpt" --out "$d/out/x.ckpt" --src-strategy "$S" --dst-strategy "$D"
fails_cleanly "transform-rank of a source rank the source lacks" 1 "source rank 8 ($d/x.ckpt) is not a rank of the source strategy $S, which has 8 ranks" \
  transform-rank --rank 0 --checkpoint "8=$d/x.ckpt" --out "$d/out/x.ckpt" --src-strategy "$S" --dst-strategy "$D"
fails_cleanly "a rank given twice" 1 "--checkpoint: source rank 0 is given twice" \
  transform-rank --rank 0 --checkpoint "0=$d/a.ckpt" "0=$d/b.ckpt" --out "$d/out/x.ckpt"
expect_error "rank-list of a rank the target lacks" 1 "target rank 9 is not a rank of the target strategy $D, which has 4 ranks" \
  rank-list --rank 9 --src-strategy "$S" --dst-strategy "$D"

# inspect and merge-strategies
expect_error "inspect a missing file" 1 "inspect: $d/nope.ckpt: cannot open for reading: No such file or directory" inspect "$d/nope.ckpt"
printf '\x0a\xff\xff' >"$d/junk.ckpt"
expect_error "inspect junk" 1 "ckpt: $d/junk.ckpt:" inspect "$d/junk.ckpt"
mkdir "$d/stages"
expect_error "merge-strategies of an empty directory" 1 "$d/stages: holds no strategy files" merge-strategies --src-dir "$d/stages" --dst-file "$d/m.ckpt"

# the prefix starts the outputs' names: one that names another directory is refused before any
# directory is made (regression: ../../evil_ wrote outside --dst-dir and left empty rank dirs)
fresh
fails_cleanly "--prefix with a '/'" 1 "checkpoint prefix '../../evil_' holds a '/' or a NUL byte" \
  transform --src-dir "$d/src" --dst-dir "$d/out/x" --src-strategy "$S" --dst-strategy "$D" --prefix ../../evil_
if [[ -e $d/out || -n $(find "$tmp" -name 'evil_*') ]]; then fail "--prefix with a '/': nothing made" "$(find "$tmp" -name 'evil_*')"; else pass; fi

finish
