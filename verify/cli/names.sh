#!/usr/bin/env bash
# --include, --exclude, --rename and --rename-map on the checkpoint commands: the outputs hold
# exactly the selected parameters, under their new names, with the bytes the unfiltered run
# writes for them (compared tensor for tensor with protobuf's Python parser); bad rules (a pattern
# that matches nothing, two parameters renamed alike, a renamed parameter the target strategy
# lacks, a bad regex or map) exit 1 before anything is written, bad flags exit 2.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

scenario retrain_8to4
S=$d/src_strategy.ckpt

# tensors FILE: name -> (dtype, dims, sha256 of the content), as JSON
tensors() {
  "$PY" - "$SRC/verify/python" "$1" <<'EOF'
import hashlib, json, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import ms_files
cp = ms_files.parse_ckpt(sys.argv[2])
out = {}
for v in cp.value:
    t = v.tensor
    d = out.setdefault(v.tag, [t.tensor_type, list(t.dims), b""])
    d[2] += t.tensor_content
print(json.dumps({k: [a, b, hashlib.sha256(c).hexdigest()] for k, (a, b, c) in out.items()}, sort_keys=True))
EOF
}

# merge, all parameters: the reference
run merge --src-dir "$d/src" --out "$d/all.ckpt" --src-strategy "$S"
[[ $rc -eq 0 ]] || fail "merge" "$err"
all=$(tensors "$d/all.ckpt")

# compare NAME FILE PYTHON: PYTHON over `a` (the reference's tensors) and `b` (FILE's) is true
compare() {
  local got
  got=$(tensors "$2")
  if "$PY" -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); sys.exit(0 if ($3) else 1)" "$all" "$got"; then
    pass
  else
    fail "$1" "not true: $3" "reference: $all" "got: $got"
  fi
}

run merge --src-dir "$d/src" --out "$d/sel.ckpt" --src-strategy "$S" --include 'layer1.*' --include scale --exclude '*.bias'
compare "include and exclude" "$d/sel.ckpt" \
  "sorted(b) == sorted(k for k in a if (k.startswith('layer1.') or k == 'scale') and not k.endswith('.bias')) and all(b[k] == a[k] for k in b)"

# the first rule that matches a name applies: moments.layer1.weight -> m.layer1.weight
run merge --src-dir "$d/src" --out "$d/ren.ckpt" --src-strategy "$S" --rename '^moments\.=m.' --rename 'layer(\d)=block$1'
compare "rename by regex" "$d/ren.ckpt" \
  "len(a) == len(b) and all(b['m.' + k[8:] if k.startswith('moments.') else k.replace('layer1', 'block1')] == a[k] for k in a)"

printf '{"scale": "gain", "step_count": "steps"}' >"$d/map.json"
run merge --src-dir "$d/src" --out "$d/map.ckpt" --src-strategy "$S" --rename-map "$d/map.json" --exclude 'moments.*'
compare "rename map" "$d/map.ckpt" \
  "b['gain'] == a['scale'] and b['steps'] == a['step_count'] and 'scale' not in b and not any(k.startswith('moments.') for k in b) and len(b) == len(a) - sum(k.startswith('moments.') for k in a)"

# transform with a selection: each target file holds the selected subset of the unfiltered run's
run transform --src-dir "$d/src" --dst-dir "$d/full_out" "${strategies[@]}"
run transform --src-dir "$d/src" --dst-dir "$d/sel_out" "${strategies[@]}" --include 'layer1.*' --include global_step
for t in 0 3; do
  f=rank_$t/checkpoint_$t.ckpt
  all=$(tensors "$d/full_out/$f")
  compare "transform --include, rank $t" "$d/sel_out/$f" \
    "sorted(b) == sorted(k for k in a if k.startswith('layer1.') or k == 'global_step') and all(b[k] == a[k] for k in b)"
done

# bad rules: exit 1, nothing written
bad() {  # bad NAME TEXT ARGS...
  local name=$1 text=$2
  shift 2
  expect_error "$name" 1 "$text" "$@"
  if [[ -e $d/bad.ckpt || -e $d/bad_out ]]; then fail "$name: an output was written"; else pass; fi
}
bad "include matching nothing" "include pattern 'nothing*' matches no parameter of the sources" \
  merge --src-dir "$d/src" --out "$d/bad.ckpt" --src-strategy "$S" --include 'nothing*'
bad "exclude matching nothing" "exclude pattern 'zzz' matches no parameter" \
  merge --src-dir "$d/src" --out "$d/bad.ckpt" --src-strategy "$S" --exclude zzz
bad "everything excluded" "the include and exclude patterns select no parameter" \
  merge --src-dir "$d/src" --out "$d/bad.ckpt" --src-strategy "$S" --exclude '*'
bad "rename collision" "would both be written as 'x'" \
  merge --src-dir "$d/src" --out "$d/bad.ckpt" --src-strategy "$S" --rename '.+=x'
bad "rename matching nothing" "rename rule 'nope' matches no parameter" \
  merge --src-dir "$d/src" --out "$d/bad.ckpt" --src-strategy "$S" --rename 'nope=x'
bad "bad regex" "rename '(': not a regular expression" \
  merge --src-dir "$d/src" --out "$d/bad.ckpt" --src-strategy "$S" --rename '(=x'
printf '{"absent": "x"}' >"$d/absent.json"
bad "rename map of an absent parameter" "renamed parameter 'absent' matches no parameter" \
  merge --src-dir "$d/src" --out "$d/bad.ckpt" --src-strategy "$S" --rename-map "$d/absent.json"
printf '[1, 2]' >"$d/list.json"
bad "rename map not an object" "--rename-map $d/list.json: not a JSON object" \
  merge --src-dir "$d/src" --out "$d/bad.ckpt" --src-strategy "$S" --rename-map "$d/list.json"
printf '{"a": ' >"$d/broken.json"
bad "rename map not JSON" "--rename-map $d/broken.json: invalid JSON" \
  merge --src-dir "$d/src" --out "$d/bad.ckpt" --src-strategy "$S" --rename-map "$d/broken.json"
bad "renamed parameter missing from the target strategy" "parameter 'layer1.bias' is renamed 'block1.bias', which the target strategy" \
  transform --src-dir "$d/src" --dst-dir "$d/bad_out" "${strategies[@]}" --rename 'layer1=block1'
expect_error "--rename without =" 2 "not REGEX=REPLACEMENT: layer1" \
  merge --src-dir "$d/src" --out "$d/bad.ckpt" --src-strategy "$S" --rename layer1

finish
