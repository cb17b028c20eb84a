#!/usr/bin/env bash
# Hugging Face sharded safetensors checkpoints (a directory holding model.safetensors.index.json
# and model-0000i-of-0000K.safetensors, or model.safetensors alone), cross-checked with
# verify/python/hf_reference.py, an independent writer and reader: a random model made by it
# (F32, F16, BF16, F64, I64, a 0-d scalar; several shards, one tensor alone in its shard) is split
# to 8 ranks by a MindSpore strategy (every rank's file checked against numpy slicing of the full
# tensors), transformed to the same ranks, merged back to HF (the same model; the shards by Hugging
# Face's rule for --max-shard-size in bytes, 20KB, 20KiB, 64KiB, 100KB and the default 5GB; the
# index's bytes; {"format": "pt"}; headers padded to 8; nothing else left behind), converted to
# one .safetensors and one .ckpt and back; --dtype casts (bfloat16 on the way out, every value
# against bf16_from_f32 of the source, the int64 tensor untouched; float32 on split; globs on
# convert); errors: a glob cast of the int64 tensor, an index naming a missing shard, an existing
# HF output without --force (exit 1, nothing written or changed).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
PYDIR="$SRC/verify/python"
HFR="$PYDIR/hf_reference.py"

hf() { "$PY" "$HFR" "$@"; }

# expect_hf NAME ARGS...: `hf_reference.py ARGS` exits 0 (equal, as expected)
expect_hf() {
  local name=$1 e
  shift
  if e=$("$PY" "$HFR" "$@" 2>&1 >/dev/null); then pass; else fail "$name" "hf_reference.py $*" "$e"; fi
}

# listing: the entries of $tmp; new_entries BEFORE: those that were not in BEFORE
listing() { ls -A "$tmp" | LC_ALL=C sort; }
new_entries() { comm -13 <(printf '%s\n' "$1") <(listing) | paste -sd' ' -; }

# layout_ok NAME DIR [NFILES]: every shard's __metadata__ is {"format": "pt"} and its header
# padded to 8; the index (when there is one) is json.dumps(index, indent=2, sort_keys=True) + "\n";
# DIR holds nothing else; NFILES shards (or more than one when NFILES is "many")
layout_ok() {
  local name=$1 dir=$2 want=${3:-any} j verdict
  if ! j=$(hf shards "$dir" 2>&1); then fail "$name: hf_reference.py shards" "$j"; return; fi
  verdict=$(printf '%s' "$j" | "$PY" -c '
import json, sys
j, want = json.load(sys.stdin), sys.argv[1]
p = []
k = len(j["files"])
if want == "many" and k < 2 or want not in ("many", "any") and k != int(want):
    p.append("%d shard files, expected %s" % (k, want))
p += ["%s: __metadata__ %s" % (f, m) for f, m in j["metadata"].items() if m != {"format": "pt"}]
p += ["%s: header length %d is not a multiple of 8" % (f, n) for f, n in j["header_lengths"].items() if n % 8]
if j["index"] is not None and not j["index_canonical"]:
    p.append("the index is not json.dumps(index, indent=2, sort_keys=True) + newline")
if j["extra_files"]:
    p.append("also in the directory: %s" % j["extra_files"])
print("; ".join(p))
' "$want")
  if [[ -z $verdict ]]; then pass; else fail "$name" "$verdict"; fi
}

# the model: 7 shards at 20,000 bytes, the 32,768-byte embedding alone in the first
hf make "$tmp/hf" --seed 11 --max-shard-size 20000 >"$tmp/made.json"
layout_ok "the reference's own model" "$tmp/hf" 7

# the target strategy: 8 ranks, device matrix [2, 4]; model.norm.weight, model.step and
# model.scale in no strategy (copied whole); layouts.json for the rank check
"$PY" - "$PYDIR" "$tmp" <<'EOF'
import json, os, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import ms_proto, ms_scenario
tmp = sys.argv[2]
tensors = json.load(open(os.path.join(tmp, "made.json")))["tensors"]
rules = [("embed_tokens", [[1, 0], -1]), ("q_proj.weight", [1, 0]), ("q_proj.bias", [0]), ("k_proj", [-1, 1]),
         ("mlp.up", [0, -1]), ("mlp.down", [-1, 0]), ("input_layernorm", [-1]), ("inv_freq", [1])]
layouts = []
for name, (dtype, shape) in tensors.items():
    tmap = next((m for key, m in rules if key in name), None)
    if tmap is not None:
        layouts.append((name, ms_scenario.L([2, 4], tmap), shape))
mods = ms_proto.load()
ms_scenario._write_strategy(os.path.join(tmp, "strategy.ckpt"), layouts, mods, False)
ms_scenario._write_strategy(os.path.join(tmp, "strategy.json"), layouts, mods, True)
with open(os.path.join(tmp, "layouts.json"), "w") as f:
    json.dump({name: lay for name, lay, _ in layouts}, f)
EOF
S=$tmp/strategy.ckpt

# ranks_ok NAME DIR FORMAT [DTYPE]: DIR/rank_<t>/checkpoint_<t>.<FORMAT> (FORMAT hf: the Hugging
# Face directory DIR/rank_<t>/checkpoint_<t>/) for t < 8 hold every tensor of $tmp/hf, sliced by
# layouts.json (whole when not in it), cast to DTYPE if given
ranks_ok() {
  local verdict
  verdict=$("$PY" - "$PYDIR" "$tmp" "$2" "$3" "${4:-}" <<'EOF'
import json, os, sys
import numpy as np
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import hf_reference as hf, ms_files, ms_scenario
tmp, out, fmt, cast = sys.argv[2:6]
cast = hf.DTYPE_ALIASES.get(cast, cast)
model = hf.read_model(os.path.join(tmp, "hf"))
lays = json.load(open(os.path.join(tmp, "layouts.json")))
p = []
for t in range(8):
    path = os.path.join(out, "rank_%d" % t, "checkpoint_%d%s" % (t, "" if fmt == "hf" else "." + fmt))
    if not (os.path.isdir if fmt == "hf" else os.path.isfile)(path):
        p.append("%s is missing" % path)
        continue
    got = {}
    if fmt == "hf":
        got = {n: list(v) for n, v in hf.read_model(path).items()}
    elif fmt == "ckpt":
        for v in ms_files.parse_ckpt(path).value:
            g = got.setdefault(v.tag, [ms_scenario.ST_NAME.get(v.tensor.tensor_type, v.tensor.tensor_type),
                                       list(v.tensor.dims), b""])
            g[2] += v.tensor.tensor_content
    else:
        got = {n: [d, s, c] for n, d, s, c in hf.read_file(path)[1]}
    if sorted(got) != sorted(model):
        p.append("rank %d: tensors %s, expected %s" % (t, sorted(got), sorted(model)))
    for name, (dtype, shape, content) in model.items():
        if name not in got:
            continue
        full = np.frombuffer(content, hf.NUMPY[dtype]).reshape(shape)
        box = ms_scenario.rank_box(lays[name], shape, t) if name in lays else [[0, n] for n in shape]
        want = np.array(ms_scenario.cut(full, box), order="C")  # (ascontiguousarray makes a 0-d array 1-d)
        want_dtype, want_bytes = dtype, want.tobytes()
        if cast and dtype in hf.FLOATS:
            want_dtype, want_bytes = cast, hf.cast_bytes(dtype, want_bytes, cast)
        gd, gs, gc = got[name]
        if gd != want_dtype:
            p.append("rank %d: %r dtype %s, expected %s" % (t, name, gd, want_dtype))
        elif gs != list(want.shape) and not (want.ndim == 0 and gs in ([], [0])):
            p.append("rank %d: %r shape %s, expected %s" % (t, name, gs, list(want.shape)))
        elif not hf.same_values(gd, gc, want_bytes, dtype):
            p.append("rank %d: %r values differ from the full tensor sliced by the strategy" % (t, name))
print("; ".join(p[:10]) + (" (and %d more)" % (len(p) - 10) if len(p) > 10 else ""))
EOF
  ) || verdict="the rank check failed: $verdict"
  if [[ -z $verdict ]]; then pass; else fail "$1" "$verdict"; fi
}

# order_of FILE: the parameter names of a ckpt file in its order, as a JSON array, on stdout
order_of() {
  "$PY" - "$PYDIR" "$1" <<'EOF'
import json, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import ms_files
names = []
for v in ms_files.parse_ckpt(sys.argv[2]).value:
    if not names or names[-1] != v.tag:
        names.append(v.tag)
print(json.dumps(names))
EOF
}

# ---- split HF -> 8 ranks; transform with an HF source; merge back to HF ----------------------
if ok "split an HF directory" split --checkpoint "$tmp/hf" --dst-dir "$tmp/ranks" --dst-strategy "$S"; then
  ranks_ok "split an HF directory: every rank's slices" "$tmp/ranks" ckpt
fi
if ok "transform from an HF directory (no --src-strategy)" transform --src-dir "$tmp/hf" --dst-dir "$tmp/tr" --dst-strategy "$S"; then
  ranks_ok "transform from an HF directory: every rank's slices" "$tmp/tr" ckpt
fi
# the order of the merged target: the source files' (rank 0's)
order_of "$tmp/ranks/rank_0/checkpoint_0.ckpt" >"$tmp/order.json" || echo null >"$tmp/order.json"

before=$(listing)
if ok "merge to HF" merge --src-dir "$tmp/ranks" --src-strategy "$S" --out "$tmp/back" --format hf --max-shard-size 20000; then
  expect_hf "merge to HF: the same model" equal "$tmp/hf" "$tmp/back"
  expect_hf "merge to HF: shards by HF's rule (file order)" expect-shards "$tmp/back" --max-shard-size 20000 --order file
  expect_hf "merge to HF: shards by HF's rule over the source's order" \
    expect-shards "$tmp/back" --max-shard-size 20000 --order-file "$tmp/order.json"
  layout_ok "merge to HF: the files" "$tmp/back" many
  added=$(new_entries "$before")
  if [[ $added == back ]]; then pass; else fail "merge to HF: left in the parent directory: $added"; fi
fi

# --max-shard-size units: 20KB != 20KiB here (7 and 6 shards by name or state-dict order)
for size in 20KB:20000 20KiB:20480 64KiB:65536; do
  if ok "merge to HF, --max-shard-size ${size%%:*}" merge --src-dir "$tmp/ranks" --src-strategy "$S" \
      --out "$tmp/size_${size%%:*}" --format hf --max-shard-size "${size%%:*}"; then
    expect_hf "merge to HF, --max-shard-size ${size%%:*}: the same model" equal "$tmp/hf" "$tmp/size_${size%%:*}"
    expect_hf "merge to HF, --max-shard-size ${size%%:*} = ${size#*:} bytes" \
      expect-shards "$tmp/size_${size%%:*}" --max-shard-size "${size#*:}" --order-file "$tmp/order.json"
    layout_ok "merge to HF, --max-shard-size ${size%%:*}: the files" "$tmp/size_${size%%:*}"
  fi
done
if ok "merge to HF, the default size" merge --src-dir "$tmp/ranks" --src-strategy "$S" --out "$tmp/one" --format hf; then
  got=$(ls -A "$tmp/one" | paste -sd' ' -)
  if [[ $got == model.safetensors ]]; then pass; else fail "one shard (5GB): model.safetensors and no index" "got: $got"; fi
  expect_hf "merge to HF, the default size: the same model" equal "$tmp/hf" "$tmp/one"
  layout_ok "merge to HF, the default size: the file" "$tmp/one" 1
fi
if ok "merge to HF with --json" merge --src-dir "$tmp/ranks" --src-strategy "$S" --out "$tmp/json" --format hf --json; then
  expect_hf "merge to HF with --json: the same model" equal "$tmp/hf" "$tmp/json"
fi

# ---- split to safetensors by the JSON strategy, and back ---------------------------------------
if ok "split an HF directory to safetensors" split --checkpoint "$tmp/hf" --dst-dir "$tmp/ranks_st" \
    --dst-strategy "$tmp/strategy.json" --format safetensors; then
  ranks_ok "split to safetensors: every rank's slices" "$tmp/ranks_st" safetensors
  if ok "merge safetensors ranks to HF" merge --src-dir "$tmp/ranks_st" --src-strategy "$tmp/strategy.json" \
      --out "$tmp/back_st" --format hf --max-shard-size 20000; then
    expect_hf "merge safetensors ranks to HF: the same model" equal "$tmp/hf" "$tmp/back_st"
    expect_hf "merge safetensors ranks to HF: shards" expect-shards "$tmp/back_st" --max-shard-size 20000 --order file
  fi
fi

# ---- --format hf per target rank (split, transform): DIR/rank_<t>/checkpoint_<t>/ -------------
# each rank's directory is a Hugging Face checkpoint (shards by HF's rule, {"format": "pt"}, the
# index), its values those of the full tensors sliced by the strategy, and equal to the
# safetensors split's; verify --format hf accepts them and catches a flipped byte in a shard
if ok "split --format hf" split --checkpoint "$tmp/hf" --dst-dir "$tmp/ranks_hf" --dst-strategy "$S" \
    --format hf --max-shard-size 4KB; then
  if grep -q "^split $tmp/hf -> $tmp/ranks_hf (8 target ranks, hf)" <<<"$out"; then pass; else
    fail "split --format hf: the summary counts target ranks, not files" "$out"; fi
  ranks_ok "split --format hf: every rank's slices" "$tmp/ranks_hf" hf
  for t in 0 7; do
    layout_ok "split --format hf: rank $t's files" "$tmp/ranks_hf/rank_$t/checkpoint_$t" many
    expect_hf "split --format hf: rank $t's shards by HF's rule" \
      expect-shards "$tmp/ranks_hf/rank_$t/checkpoint_$t" --max-shard-size 4000 --order file
  done
  if [[ -d $tmp/ranks_st ]]; then
    for t in 0 1 2 3 4 5 6 7; do
      expect_hf "split --format hf: rank $t equals the safetensors split's" \
        equal "$tmp/ranks_st/rank_$t/checkpoint_$t.safetensors" "$tmp/ranks_hf/rank_$t/checkpoint_$t"
    done
  fi
  expect_text "verify --format hf of the split" ": identical" \
    verify --in "$tmp/hf" --dst-dir "$tmp/ranks_hf" --dst-strategy "$S" --format hf
  cp -r "$tmp/ranks_hf" "$tmp/ranks_hf_flipped"
  "$PY" - "$tmp/ranks_hf_flipped/rank_3/checkpoint_3" <<'EOF2'
import glob, struct, sys
path = glob.glob(sys.argv[1] + "/model-00001-of-*.safetensors")[0]
b = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n] ^= 0x10  # the first byte of the data section
open(path, "wb").write(bytes(b))
EOF2
  run verify --in "$tmp/hf" --dst-dir "$tmp/ranks_hf_flipped" --dst-strategy "$S" --format hf
  if [[ $rc -eq 1 ]] && grep -q "rank_3/checkpoint_3: parameter '.*': differs from element 0 (byte 0)" <<<"$out" \
     && [[ $(grep -c "differs" <<<"$out") -eq 1 ]]; then pass; else
    fail "verify --format hf: a flipped byte in a shard of rank 3" "rc $rc" "$out" "$err"; fi
fi
if ok "transform --format hf (HF source)" transform --src-dir "$tmp/hf" --dst-dir "$tmp/tr_hf" --dst-strategy "$S" \
    --format hf; then
  ranks_ok "transform --format hf: every rank's slices" "$tmp/tr_hf" hf
  got=$(ls -A "$tmp/tr_hf/rank_5/checkpoint_5" | paste -sd' ' -)
  if [[ $got == model.safetensors ]]; then pass; else fail "transform --format hf, 5GB: one model.safetensors" "got: $got"; fi
  expect_text "verify --format hf of the transform" ": identical" \
    verify --src-dir "$tmp/hf" --dst-dir "$tmp/tr_hf" --dst-strategy "$S" --format hf
  expect_error "transform --format hf onto itself without --force" 1 "model.safetensors exists" \
    transform --src-dir "$tmp/hf" --dst-dir "$tmp/tr_hf" --dst-strategy "$S" --format hf
fi
if ok "transform --format hf, --dtype bfloat16 --exclude" transform --src-dir "$tmp/ranks" --src-strategy "$S" \
    --dst-dir "$tmp/tr_bf" --dst-strategy "$S" --format hf --dtype bfloat16 --exclude 'model.rope.*'; then
  expect_text "verify with the run's --format hf, --dtype and --exclude" ": identical" \
    verify --src-dir "$tmp/ranks" --src-strategy "$S" --dst-dir "$tmp/tr_bf" --dst-strategy "$S" --format hf \
    --dtype bfloat16 --exclude 'model.rope.*'
fi

# ---- verify --out: a merged or converted output, HF or a file ----------------------------------
if [[ -d $tmp/back ]]; then
  expect_text "verify --out of the merge to HF" "1 file, [0-9]+ tensors, .*: identical" \
    verify --src-dir "$tmp/ranks" --src-strategy "$S" --out "$tmp/back" --format hf
fi

# ---- convert: HF -> one .safetensors / .ckpt -> HF ---------------------------------------------
if ok "convert HF -> .safetensors" convert --in "$tmp/hf" --out "$tmp/full.safetensors"; then
  expect_hf "convert HF -> .safetensors: the same tensors" equal "$tmp/hf" "$tmp/full.safetensors"
  expect_text "verify --in --out of the convert" "1 file, [0-9]+ tensors, .*: identical" \
    verify --in "$tmp/hf" --out "$tmp/full.safetensors"
  if ok "convert .safetensors -> HF" convert --in "$tmp/full.safetensors" --out "$tmp/from_st" --format hf --max-shard-size 20000; then
    expect_hf "convert .safetensors -> HF: the same model" equal "$tmp/hf" "$tmp/from_st"
    expect_hf "convert .safetensors -> HF: shards" expect-shards "$tmp/from_st" --max-shard-size 20000 --order file
    layout_ok "convert .safetensors -> HF: the files" "$tmp/from_st" many
  fi
fi
if ok "convert HF -> .ckpt" convert --in "$tmp/hf" --out "$tmp/full.ckpt"; then
  order_of "$tmp/full.ckpt" >"$tmp/order_ckpt.json" || echo null >"$tmp/order_ckpt.json"
  if ok "convert .ckpt -> HF" convert --in "$tmp/full.ckpt" --out "$tmp/from_ckpt" --format hf --max-shard-size 20000; then
    expect_hf "convert .ckpt -> HF: the same model" equal "$tmp/hf" "$tmp/from_ckpt"
    expect_hf "convert .ckpt -> HF: shards over the ckpt's order" \
      expect-shards "$tmp/from_ckpt" --max-shard-size 20000 --order-file "$tmp/order_ckpt.json"
    layout_ok "convert .ckpt -> HF: the files" "$tmp/from_ckpt" many
  fi
fi
if ok "convert HF -> HF, 100KB" convert --in "$tmp/hf" --out "$tmp/kb" --format hf --max-shard-size 100KB; then
  expect_hf "convert HF -> HF, 100KB: the same model" equal "$tmp/hf" "$tmp/kb"
  expect_hf "convert HF -> HF, 100KB = 100000 bytes" expect-shards "$tmp/kb" --max-shard-size 100000 --order file
  layout_ok "convert HF -> HF, 100KB: the files" "$tmp/kb" 2
fi
# a one-file HF directory (no index) as the input
if [[ -f $tmp/one/model.safetensors ]] && ok "convert a one-file HF directory" convert --in "$tmp/one" --out "$tmp/one.ckpt"; then
  if ok "convert it back" convert --in "$tmp/one.ckpt" --out "$tmp/one_back" --format hf --max-shard-size 20000; then
    expect_hf "a one-file HF directory: the same model" equal "$tmp/hf" "$tmp/one_back"
  fi
fi

# ---- --dtype -----------------------------------------------------------------------------------
if ok "merge to HF as bfloat16" merge --src-dir "$tmp/ranks" --src-strategy "$S" --out "$tmp/bf16" --format hf \
    --max-shard-size 20000 --dtype bfloat16; then
  # every floating-point value is bf16_from_f32 of the source's (F16, BF16 exact as F32; F64 rounded once)
  expect_hf "merge to HF as bfloat16: every value" equal "$tmp/hf" "$tmp/bf16" --cast '*=bfloat16'
  step='import json, sys; print(json.load(sys.stdin)["model.step"])'
  a=$(hf check "$tmp/hf" | "$PY" -c "$step") || true
  b=$(hf check "$tmp/bf16" | "$PY" -c "$step") || true
  if [[ $a == "$b" && $a == *I64* ]]; then pass; else fail "bfloat16: the int64 tensor untouched" "source: $a" "got: $b"; fi
  expect_hf "merge to HF as bfloat16: shards" expect-shards "$tmp/bf16" --max-shard-size 20000 --order file
  layout_ok "merge to HF as bfloat16: the files" "$tmp/bf16" many
fi
if ok "split as float32" split --checkpoint "$tmp/hf" --dst-dir "$tmp/ranks32" --dst-strategy "$S" --dtype float32; then
  ranks_ok "split as float32: every rank's slices" "$tmp/ranks32" ckpt float32
fi
if ok "convert with glob casts" convert --in "$tmp/hf" --out "$tmp/glob" --format hf --max-shard-size 20000 \
    --dtype 'model.layers.*.mlp.*=float16' --dtype 'model.rope.*=float32'; then
  expect_hf "convert with glob casts: the matching tensors cast, the others as they were" equal "$tmp/hf" "$tmp/glob" \
    --cast 'model.layers.*.mlp.*=float16' --cast 'model.rope.*=float32'
fi
if ok "convert HF -> .ckpt as float64" convert --in "$tmp/hf" --out "$tmp/f64.ckpt" --dtype float64; then
  if ok "convert the float64 .ckpt -> HF" convert --in "$tmp/f64.ckpt" --out "$tmp/f64" --format hf; then
    expect_hf "float64: every value" equal "$tmp/hf" "$tmp/f64" --cast '*=float64'
  fi
fi

# ---- errors: exit 1, nothing written -----------------------------------------------------------
before=$(listing)
expect_error "a glob cast of the int64 tensor (convert)" 1 "model.step" \
  convert --in "$tmp/hf" --out "$tmp/e_int" --format hf --dtype 'model.st*=float16'
expect_error "a glob cast of the int64 tensor (merge)" 1 "model.step" \
  merge --src-dir "$tmp/ranks" --src-strategy "$S" --out "$tmp/e_int2" --format hf --dtype 'model.step=bfloat16'
expect_error "a glob cast of the int64 tensor (split)" 1 "model.step" \
  split --checkpoint "$tmp/hf" --dst-dir "$tmp/e_int3" --dst-strategy "$S" --dtype '*.step=float32'
added=$(new_entries "$before")
if [[ -z $added ]]; then pass; else fail "refused casts wrote: $added"; fi

cp -r "$tmp/hf" "$tmp/bad"
rm "$tmp/bad/model-00003-of-00007.safetensors"
before=$(listing)
expect_error "an index naming a missing shard (convert)" 1 "model-00003-of-00007.safetensors" \
  convert --in "$tmp/bad" --out "$tmp/e_missing.ckpt"
expect_error "an index naming a missing shard (split)" 1 "model-00003-of-00007.safetensors" \
  split --checkpoint "$tmp/bad" --dst-dir "$tmp/e_missing" --dst-strategy "$S"
expect_error "an index naming a missing shard (transform)" 1 "model-00003-of-00007.safetensors" \
  transform --src-dir "$tmp/bad" --dst-dir "$tmp/e_missing2" --dst-strategy "$S"
added=$(new_entries "$before")
if [[ -z $added ]]; then pass; else fail "a missing shard: wrote $added"; fi

# an existing HF output: refused without --force (unchanged), replaced with it (the old shards and
# index gone)
if [[ -d $tmp/back ]]; then
  sums=$(cd "$tmp/back" && sha256sum -- * | LC_ALL=C sort)
  run merge --src-dir "$tmp/ranks" --src-strategy "$S" --out "$tmp/back" --format hf --max-shard-size 20000
  now=$(cd "$tmp/back" && sha256sum -- * | LC_ALL=C sort)
  if [[ $rc -eq 1 && -z $out && -n $err && $sums == "$now" ]]; then pass; else
    fail "--format hf onto an existing HF directory without --force" "exit code $rc (expected 1)" "stdout: $out" \
      "stderr: $err" "$([[ $sums == "$now" ]] && echo "the directory unchanged" || echo "the directory CHANGED")"
  fi
  run convert --in "$tmp/hf" --out "$tmp/back" --format hf
  if [[ $rc -eq 1 ]]; then pass; else fail "convert --format hf onto an existing HF directory without --force" "exit code $rc" "stderr: $err"; fi
  # replaced by a different model (bfloat16, one file): a reader must find the new one
  if ok "--format hf --force onto an existing HF directory" merge --src-dir "$tmp/ranks" --src-strategy "$S" \
      --out "$tmp/back" --format hf --force --dtype bfloat16; then
    got=$(ls -A "$tmp/back" | paste -sd' ' -)
    if [[ $got == model.safetensors ]]; then pass; else
      fail "--force: the 7-shard output replaced by one model.safetensors, nothing else" "got: $got"; fi
    expect_hf "--force: the new model is what the directory holds" equal "$tmp/hf" "$tmp/back" --cast '*=bfloat16'
  fi
fi

finish
