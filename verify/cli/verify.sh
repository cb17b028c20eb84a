#!/usr/bin/env bash
# `reshard verify`: a converted checkpoint checked against its sources. Identical outputs pass
# (exit 0); a flipped byte, two swapped rank files, a missing parameter, an extra parameter, a
# truncated file and a missing file are each reported with the file, the parameter and what
# differs (exit 1, every difference listed on stdout, one line on stderr); bad sources are errors.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

scenario retrain_8to4
run transform --src-dir "$d/src" --dst-dir "$d/good" "${strategies[@]}"
[[ $rc -eq 0 ]] || fail "transform" "$err"

# check NAME DIR EXPR: `reshard verify --json` of DIR exits 0 iff EXPR's list is empty, and
# EXPR (over the report `j`) is true
check() {
  local name=$1 dir=$2 expr=$3
  run verify --src-dir "$d/src" --dst-dir "$dir" "${strategies[@]}" --json
  local code=$rc
  if printf '%s' "$out" | "$PY" -c "
import json, sys
j = json.load(sys.stdin)
m = [(x['file'].split('/')[-2] + '/' + x['file'].split('/')[-1], x['parameter'], x['what']) for x in j['mismatches']]
ok = ($expr)
sys.exit(0 if ok and (j['ok'] == (not m)) and ($code == (0 if j['ok'] else 1)) else 1)"; then
    pass
  else
    fail "$name" "exit $code, not true: $expr" "stdout: $out" "stderr: $err"
  fi
}
# broken NAME PYTHON: a copy of the good outputs in $d/<NAME>, changed by PYTHON (cwd: the copy)
broken() {
  rm -rf "${d:?}/$1"
  cp -r "$d/good" "$d/$1"
  (cd "$d/$1" && "$PY" - "$SRC/verify/python" <<<"$2")
}

edit_py="
import sys
sys.path.insert(0, sys.argv[1])
import ms_proto
mods = ms_proto.load()
p = 'rank_0/checkpoint_0.ckpt'
cp = mods.checkpoint.Checkpoint()
cp.ParseFromString(open(p, 'rb').read())
"

check "identical" "$d/good" "j['ok'] and j['files'] == 4 and j['tensors'] > 4 and j['bytes'] > 0 and not m"

broken flipped "$edit_py
p = 'rank_1/checkpoint_1.ckpt'
cp = mods.checkpoint.Checkpoint()
cp.ParseFromString(open(p, 'rb').read())
v = next(v for v in cp.value if v.tag == 'layer1.weight')
c = bytearray(v.tensor.tensor_content); c[5] ^= 0x40; v.tensor.tensor_content = bytes(c)
open(p, 'wb').write(cp.SerializeToString())"
check "a flipped byte" "$d/flipped" "m == [('rank_1/checkpoint_1.ckpt', 'layer1.weight', 'differs from element 1 (byte 5)')]"

broken swapped "
import os
os.rename('rank_1/checkpoint_1.ckpt', 'x'); os.rename('rank_2/checkpoint_2.ckpt', 'rank_1/checkpoint_1.ckpt'); os.rename('x', 'rank_2/checkpoint_2.ckpt')"
check "two swapped ranks" "$d/swapped" "{f for f, _, _ in m} == {'rank_1/checkpoint_1.ckpt', 'rank_2/checkpoint_2.ckpt'} and all(w.startswith('differs from element') for _, _, w in m)"

broken dropped "$edit_py
keep = [v for v in cp.value if v.tag != 'embedding']
open(p, 'wb').write(mods.checkpoint.Checkpoint(value=keep).SerializeToString())"
check "a missing parameter" "$d/dropped" "m == [('rank_0/checkpoint_0.ckpt', 'embedding', 'missing')]"

broken extra "$edit_py
v = cp.value.add(); v.CopyFrom(cp.value[0]); v.tag = 'stray'
open(p, 'wb').write(cp.SerializeToString())"
check "an extra parameter" "$d/extra" "m == [('rank_0/checkpoint_0.ckpt', 'stray', 'not expected (no source makes it)')]"

broken truncated "
p = 'rank_3/checkpoint_3.ckpt'
b = open(p, 'rb').read()
open(p, 'wb').write(b[:len(b) // 2])"
check "a truncated file" "$d/truncated" "len(m) == 1 and m[0][0] == 'rank_3/checkpoint_3.ckpt' and m[0][1] == '' and m[0][2].startswith('cannot be read')"

broken gone "
import os
os.remove('rank_2/checkpoint_2.ckpt')"
check "a missing file" "$d/gone" "m == [('rank_2/checkpoint_2.ckpt', '', 'missing file')]"

# the text report and the exit status
run verify --src-dir "$d/src" --dst-dir "$d/dropped" "${strategies[@]}"
if [[ $rc -eq 1 ]] && grep -q "rank_0/checkpoint_0.ckpt: parameter 'embedding': missing" <<<"$out" \
   && grep -q "1 difference between" <<<"$err"; then pass; else fail "text report" "rc $rc" "$out" "$err"; fi
expect_text "identical, as text" "4 files, [0-9]+ tensors, .* compared in .*: identical" \
  verify --src-dir "$d/src" --dst-dir "$d/good" "${strategies[@]}"

# manifests: written with the outputs, every SHA-256 that of hashlib, checked by verify --manifest
run transform --src-dir "$d/src" --dst-dir "$d/signed" "${strategies[@]}" --manifest "$d/signed/manifest.json"
if [[ $rc -eq 0 ]] && grep -q "manifest        $d/signed/manifest.json (4 files" <<<"$out"; then pass; else fail "transform --manifest" "rc $rc" "$out" "$err"; fi
verdict=$("$PY" - "$d/signed/manifest.json" <<'PY'
import hashlib, json, os, sys
m = json.load(open(sys.argv[1]))
base = os.path.dirname(sys.argv[1])
bad = []
for f in m["files"]:
    data = open(os.path.join(base, f["path"]), "rb").read()
    if f["sha256"] != hashlib.sha256(data).hexdigest() or f["bytes"] != len(data):
        bad.append(f["path"])
if len(m["files"]) != 4 or not all(f["parameters"] for f in m["files"]) or m["files"][0]["path"] != "rank_0/checkpoint_0.ckpt":
    bad.append("files: %s" % [f["path"] for f in m["files"]])
print(" ".join(bad))
PY
)
if [[ -z $verdict ]]; then pass; else fail "manifest digests against hashlib" "$verdict"; fi
run verify --src-dir "$d/src" --dst-dir "$d/signed" "${strategies[@]}" --manifest "$d/signed/manifest.json" --json
if [[ $rc -eq 0 ]] && grep -q '"ok": true' <<<"$out"; then pass; else fail "verify --manifest, intact" "rc $rc" "$out" "$err"; fi
(cd "$d/signed" && "$PY" - "$SRC/verify/python" <<<"$edit_py
v = next(v for v in cp.value if v.tag == 'layer1.weight')
c = bytearray(v.tensor.tensor_content); c[0] ^= 1; v.tensor.tensor_content = bytes(c)
open(p, 'wb').write(cp.SerializeToString())")
run verify --src-dir "$d/src" --dst-dir "$d/signed" "${strategies[@]}" --manifest "$d/signed/manifest.json"
if [[ $rc -eq 1 ]] && grep -q "rank_0/checkpoint_0.ckpt: SHA-256 differs from the manifest's" <<<"$out" \
   && grep -q "rank_0/checkpoint_0.ckpt: parameter 'layer1.weight': differs from element 0 (byte 0)" <<<"$out"; then
  pass
else
  fail "verify --manifest, a flipped byte" "rc $rc" "$out" "$err"
fi
rm "$d/signed/rank_3/checkpoint_3.ckpt"
run verify --src-dir "$d/src" --dst-dir "$d/signed" "${strategies[@]}" --manifest "$d/signed/manifest.json"
if [[ $rc -eq 1 ]] && [[ $(grep -c "rank_3/checkpoint_3.ckpt: missing file" <<<"$out") -eq 2 ]]; then pass; else fail "verify --manifest, a missing file" "rc $rc" "$out"; fi
printf '{"manifest": "reshard", "version": 1, "files": [{"path": "x"}]}' >"$d/partial.json"
expect_error "a manifest entry without its fields" 1 "manifest: $d/partial.json: a file entry lacks a field" \
  verify --src-dir "$d/src" --dst-dir "$d/good" "${strategies[@]}" --manifest "$d/partial.json"
printf 'not json' >"$d/junk.json"
expect_error "a manifest that is not JSON" 1 "manifest: $d/junk.json: not JSON" \
  verify --src-dir "$d/src" --dst-dir "$d/good" "${strategies[@]}" --manifest "$d/junk.json"

# bad sources: an error, as for a transform
expect_error "verify with a missing source" 1 "source directory $d/nowhere does not exist" \
  verify --src-dir "$d/nowhere" --dst-dir "$d/good" "${strategies[@]}"
finish
