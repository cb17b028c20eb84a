#!/usr/bin/env bash
# `reshard verify` given the options of the run it checks (issue 20): --include, --exclude,
# --rename, --rename-map, --dtype and --format, on every workflow's outputs: transform
# (--src-dir, --dst-dir), split (--in, --dst-dir), merge (--src-dir, --out) and convert (--in,
# --out). For each: without the run's options verify reports what the options changed (the false
# "missing" of before), with them the outputs are identical (exit 0), and a real difference (a
# flipped byte, a dropped parameter) is still reported (exit 1). Sources and outputs given twice
# or not at all, and options that do not go with them, are bad usage (exit 2).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

scenario retrain_8to4
S=(--src-strategy "$d/src_strategy.ckpt")
T=(--dst-strategy "$d/dst_strategy.ckpt")

# vcheck NAME EXPR ARGS...: `reshard verify --json ARGS` exits 0 iff its list of differences is
# empty (1 otherwise), and EXPR over `m` (the differences as (rank_<t>/file or file, parameter,
# what)) and `j` (the report) is true
vcheck() {
  local name=$1 expr=$2
  shift 2
  run verify "$@" --json
  local code=$rc
  if printf '%s' "$out" | "$PY" -c "
import json, sys
j = json.load(sys.stdin)
m = [('/'.join(x['file'].split('/')[-2:]) if '/rank_' in x['file'] else x['file'].split('/')[-1], x['parameter'], x['what'])
     for x in j['mismatches']]
ok = ($expr)
sys.exit(0 if ok and (j['ok'] == (not m)) and ($code == (0 if j['ok'] else 1)) else 1)" 2>/dev/null; then
    pass
  else
    fail "$name" "exit $code, not true: $expr" "stdout: $out" "stderr: $err"
  fi
}
# flip FILE PARAM: flips a bit of PARAM's first byte in the ckpt FILE
flip() {
  "$PY" - "$SRC/verify/python" "$1" "$2" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import ms_proto
cp = ms_proto.load().checkpoint.Checkpoint()
cp.ParseFromString(open(sys.argv[2], 'rb').read())
v = next(v for v in cp.value if v.tag == sys.argv[3])
c = bytearray(v.tensor.tensor_content); c[0] ^= 0x40; v.tensor.tensor_content = bytes(c)
open(sys.argv[2], 'wb').write(cp.SerializeToString())
EOF
}
# drop FILE PARAM: removes PARAM from the ckpt FILE
drop() {
  "$PY" - "$SRC/verify/python" "$1" "$2" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import ms_proto
mods = ms_proto.load()
cp = mods.checkpoint.Checkpoint()
cp.ParseFromString(open(sys.argv[2], 'rb').read())
keep = [v for v in cp.value if v.tag != sys.argv[3]]
open(sys.argv[2], 'wb').write(mods.checkpoint.Checkpoint(value=keep).SerializeToString())
EOF
}

# ---- transform --include --exclude --dtype ------------------------------------------------------
sel=(--include 'layer1.*' --include 'embedding' --exclude '*.bias' --dtype bfloat16)
run transform --src-dir "$d/src" --dst-dir "$d/sel" "${S[@]}" "${T[@]}" "${sel[@]}"
[[ $rc -eq 0 ]] || fail "transform ${sel[*]}" "$err"
vcheck "transform: without the run's options, what they changed is reported" \
  "('rank_0/checkpoint_0.ckpt', 'layer1.bias', 'missing') in m and ('rank_0/checkpoint_0.ckpt', 'layer1.weight', 'dtype BFloat16, expected Float32') in m" \
  --src-dir "$d/src" --dst-dir "$d/sel" "${S[@]}" "${T[@]}"
vcheck "transform: with the run's --include, --exclude, --dtype: identical, no false missing" \
  "not m and j['files'] == 4 and j['tensors'] == 8" \
  --src-dir "$d/src" --dst-dir "$d/sel" "${S[@]}" "${T[@]}" "${sel[@]}"
vcheck "transform: --include without the --exclude: the excluded parameter is missing" \
  "sorted(m) == [('rank_%d/checkpoint_%d.ckpt' % (t, t), 'layer1.bias', 'missing') for t in range(4)]" \
  --src-dir "$d/src" --dst-dir "$d/sel" "${S[@]}" "${T[@]}" --include 'layer1.*' --include 'embedding' --dtype bfloat16
cp -r "$d/sel" "$d/sel_flipped"
flip "$d/sel_flipped/rank_2/checkpoint_2.ckpt" layer1.weight
vcheck "transform, with the run's options: a flipped byte is still caught" \
  "m == [('rank_2/checkpoint_2.ckpt', 'layer1.weight', 'differs from element 0 (byte 0)')]" \
  --src-dir "$d/src" --dst-dir "$d/sel_flipped" "${S[@]}" "${T[@]}" "${sel[@]}"
cp -r "$d/sel" "$d/sel_dropped"
drop "$d/sel_dropped/rank_1/checkpoint_1.ckpt" embedding
vcheck "transform, with the run's options: a dropped parameter is still missing" \
  "m == [('rank_1/checkpoint_1.ckpt', 'embedding', 'missing')]" \
  --src-dir "$d/src" --dst-dir "$d/sel_dropped" "${S[@]}" "${T[@]}" "${sel[@]}"
# the text report names the same
run verify --src-dir "$d/src" --dst-dir "$d/sel_dropped" "${S[@]}" "${T[@]}" "${sel[@]}"
if [[ $rc -eq 1 ]] && grep -q "rank_1/checkpoint_1.ckpt: parameter 'embedding': missing" <<<"$out" \
   && grep -q "1 difference between $d/sel_dropped and what $d/src makes" <<<"$err"; then pass; else
  fail "transform, text report of a dropped parameter" "rc $rc" "$out" "$err"; fi

# ---- transform --format safetensors --dtype GLOB=DTYPE -----------------------------------------
st=(--format safetensors --exclude optimizer_name --exclude emb_table --dtype 'layer1.*=float16')
run transform --src-dir "$d/src" --dst-dir "$d/st" "${S[@]}" "${T[@]}" "${st[@]}"
[[ $rc -eq 0 ]] || fail "transform ${st[*]}" "$err"
vcheck "transform --format safetensors: verify without --format looks for .ckpt files" \
  "len(m) == 4 and all(w == 'missing file' and f.endswith('.ckpt') for f, _, w in m)" \
  --src-dir "$d/src" --dst-dir "$d/st" "${S[@]}" "${T[@]}"
vcheck "transform --format safetensors, --dtype GLOB=DTYPE: identical with the run's options" \
  "not m and j['files'] == 4" --src-dir "$d/src" --dst-dir "$d/st" "${S[@]}" "${T[@]}" "${st[@]}"

# ---- merge --rename --rename-map, checked with verify --src-dir --out ---------------------------
printf '{"embedding": "tok_embeddings"}' >"$d/map.json"
ren=(--rename 'layer1=L1' --rename-map "$d/map.json" --exclude optimizer_name)
run merge --src-dir "$d/src" "${S[@]}" --out "$d/merged.ckpt" "${ren[@]}"
[[ $rc -eq 0 ]] || fail "merge ${ren[*]}" "$err"
vcheck "merge: without the run's renames, the old names are missing and the new ones extra" \
  "('merged.ckpt', 'layer1.weight', 'missing') in m and ('merged.ckpt', 'L1.weight', 'not expected (no source makes it)') in m and ('merged.ckpt', 'tok_embeddings', 'not expected (no source makes it)') in m" \
  --src-dir "$d/src" "${S[@]}" --out "$d/merged.ckpt" --exclude optimizer_name
vcheck "merge: with the run's --rename, --rename-map, --exclude: identical" \
  "not m and j['files'] == 1 and j['tensors'] == 10" --src-dir "$d/src" "${S[@]}" --out "$d/merged.ckpt" "${ren[@]}"
cp "$d/merged.ckpt" "$d/merged_flipped.ckpt"
flip "$d/merged_flipped.ckpt" tok_embeddings
vcheck "merge, with the run's options: a flipped byte of a renamed parameter is caught under its new name" \
  "m == [('merged_flipped.ckpt', 'tok_embeddings', 'differs from element 0 (byte 0)')]" \
  --src-dir "$d/src" "${S[@]}" --out "$d/merged_flipped.ckpt" "${ren[@]}"

# ---- convert, checked with verify --in --out ----------------------------------------------------
conv=(--include '*L1*' --rename '^moments\.(.*)$=adam_m.$1' --dtype float64)
run convert --in "$d/merged.ckpt" --out "$d/conv.safetensors" "${conv[@]}"
[[ $rc -eq 0 ]] || fail "convert ${conv[*]}" "$err"
vcheck "convert: with the run's options: identical" "not m and j['tensors'] == 3" \
  --in "$d/merged.ckpt" --out "$d/conv.safetensors" "${conv[@]}"
vcheck "convert: without the run's --dtype, the dtypes differ" \
  "sorted(w.split(',')[0] for _, _, w in m) == ['dtype Float64', 'dtype Float64', 'dtype Float64']" \
  --in "$d/merged.ckpt" --out "$d/conv.safetensors" --include '*L1*' --rename '^moments\.(.*)$=adam_m.$1'

# ---- split, checked with verify --in --dst-dir --------------------------------------------------
run split --checkpoint "$d/merged.ckpt" --dst-dir "$d/split" "${T[@]}" --prefix part_ --exclude 'L1.*' --exclude step_count
[[ $rc -eq 0 ]] || fail "split --exclude" "$err"
vcheck "split: with the run's --exclude and --prefix: identical" "not m and j['files'] == 4" \
  --checkpoint "$d/merged.ckpt" --dst-dir "$d/split" "${T[@]}" --prefix part_ --exclude 'L1.*' --exclude step_count
vcheck "split: without one of the run's --exclude, that parameter is missing on every rank" \
  "len(m) == 4 and {p for _, p, _ in m} == {'step_count'} and all(w == 'missing' for _, _, w in m)" \
  --in "$d/merged.ckpt" --dst-dir "$d/split" "${T[@]}" --prefix part_ --exclude 'L1.*'

# ---- bad usage: exit 2, one line naming the option ----------------------------------------------
expect_error "verify: --src-dir and --in" 2 "--src-dir: give --src-dir or --in, not both" \
  verify --src-dir "$d/src" --in "$d/merged.ckpt" --out "$d/merged.ckpt"
expect_error "verify: no source" 2 "--src-dir: the sources are required: --src-dir or --in" verify --out "$d/merged.ckpt"
expect_error "verify: --dst-dir and --out" 2 "--dst-dir: give --dst-dir or --out, not both" \
  verify --src-dir "$d/src" --dst-dir "$d/sel" --out "$d/merged.ckpt"
expect_error "verify: no output" 2 "--dst-dir: the outputs are required: --dst-dir or --out" verify --src-dir "$d/src"
expect_error "verify: --src-strategy with --in" 2 "--src-strategy: only with --src-dir" \
  verify --in "$d/merged.ckpt" --out "$d/conv.safetensors" "${S[@]}"
expect_error "verify: --dst-strategy with --out" 2 "--dst-strategy: only with --dst-dir" \
  verify --src-dir "$d/src" --out "$d/merged.ckpt" "${T[@]}"
expect_error "verify: --prefix with --out" 2 "--prefix: only with --dst-dir" \
  verify --src-dir "$d/src" --out "$d/merged.ckpt" --prefix x_
expect_error "verify: --format safetensors with a .ckpt --out" 2 \
  "--format: safetensors, but --out $d/merged.ckpt does not end in .safetensors" \
  verify --src-dir "$d/src" "${S[@]}" --out "$d/merged.ckpt" --format safetensors
expect_error "verify: --rename without '='" 2 "not REGEX=REPLACEMENT: layer1" \
  verify --src-dir "$d/src" --dst-dir "$d/sel" --rename layer1
expect_error "verify: a bad --dtype" 2 "not a dtype: float33" verify --src-dir "$d/src" --dst-dir "$d/sel" --dtype float33
expect_error "verify: --format zip" 2 "--format: zip not in {ckpt,safetensors,hf,dcp}" \
  verify --src-dir "$d/src" --dst-dir "$d/sel" --format zip
# a bad input named: exit 1
expect_error "verify: an --include that matches nothing" 1 "include pattern 'no_such_*' matches no parameter of the sources" \
  verify --src-dir "$d/src" --dst-dir "$d/sel" "${S[@]}" "${T[@]}" --include 'no_such_*'
finish
