#!/usr/bin/env bash
# PyTorch DCP checkpoints as a target (--format dcp), from the checkpoints torch 1.13 wrote
# (verify/data/dcp/): `convert` writes the minimal fixture's data file byte for byte as torch did;
# `merge`, `convert`, `transform` and `split` write one directory (.metadata and __<rank>_0.distcp
# per target rank), which reads back (convert to safetensors) as the direct merge, byte for byte;
# a DCP source's byte items are copied (left out, named, under name rules); a manifest lists the
# data files, then .metadata;
# a replicated parameter is stored once; --max-memory writes the same bytes; --dcp-torch chooses the module paths (inspect names
# them); --dry-run writes nothing; --plan-out then `execute` writes the same, `execute --part 1/2`
# is refused (exit 1, nothing written); an existing output is kept without --force; usage errors
# (--dcp-torch without --format dcp, a bad --dcp-torch, --format dcp on transform-rank) exit 2;
# verify --format dcp checks the transform and the merge, and finds a flipped byte (exit 1).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
DCP="$SRC/verify/data/dcp"

# same_file NAME A B: the files are equal, byte for byte
same_file() { cmp -s "$2" "$3" && pass || fail "$1" "$2 and $3 differ"; }

# files_are NAME DIR FILES...: DIR holds exactly FILES (hidden ones included)
files_are() {
  local name=$1 dir=$2 got want
  shift 2
  got=$(cd "$dir" && ls -A | sort | tr '\n' ' ')
  want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
  [[ $got == "$want" ]] && pass || fail "$name" "in $dir: $got" "expected: $want"
}

# ---- convert: torch's own bytes ---------------------------------------------------------------

if ok "convert --format dcp --dcp-torch 1.13" convert --in "$DCP/minimal" --out "$tmp/min" --format dcp --dcp-torch 1.13 --no-sync; then
  files_are "convert: the layout" "$tmp/min" .metadata __0_0.distcp
  same_file "convert: the data file is torch's" "$tmp/min/__0_0.distcp" "$DCP/minimal/__0_0.distcp"
  expect_text "convert: torch 1.13's module paths" 'torch 1.13 module paths' inspect "$tmp/min"
fi
if ok "convert --format dcp (torch 2 by default)" convert --in "$DCP/plain" --out "$tmp/plain2" --format dcp --no-sync; then
  [[ -z $err ]] && pass || fail "convert: no warning (the byte items are copied)" "stderr: $err"
  expect_text "convert: torch 2's module paths" 'torch 2 module paths' inspect "$tmp/plain2"
  expect_text "convert: the byte items copied after the tensors" '^tag +__0_0.distcp +[0-9]+ +431$' inspect "$tmp/plain2"
fi
if ok "convert --format dcp --exclude" convert --in "$DCP/plain" --out "$tmp/plain3" --format dcp --exclude steps --no-sync; then
  grep -q "byte items 'epoch', 'tag' .*under --include, --exclude or --rename (not copied yet)" <<<"$err" && pass ||
    fail "convert --exclude: the byte items left out are named" "stderr: $err"
  expect_text "convert --exclude: no byte items" '3 tensors, 0 byte items' inspect "$tmp/plain3"
fi

# ---- merge, transform, split: read back as the direct merge -------------------------------------

ok "merge to safetensors (the reference)" merge --src-dir "$DCP/cols" --out "$tmp/ref.safetensors" --no-sync
if ok "merge --format dcp" merge --src-dir "$DCP/cols" --out "$tmp/merged" --format dcp --no-sync; then
  files_are "merge: one data file" "$tmp/merged" .metadata __0_0.distcp
  ok "merge: read back" convert --in "$tmp/merged" --out "$tmp/merged.safetensors" --no-sync &&
    same_file "merge: the same tensors" "$tmp/merged.safetensors" "$tmp/ref.safetensors"
fi

cat >"$tmp/dst.json" <<'EOF'
{"current_stage": 1, "parallel_layout_item": {
  "w": {"dev_matrix": [4], "tensor_map": [-1, 0], "tensor_shape": [3, 4], "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}
EOF
if ok "transform --format dcp" transform --src-dir "$DCP/cols" --dst-dir "$tmp/t" --dst-strategy "$tmp/dst.json" --format dcp --no-sync; then
  files_are "transform: a data file per target rank" "$tmp/t" .metadata __0_0.distcp __1_0.distcp __2_0.distcp __3_0.distcp
  grep -q "(4 target ranks, dcp)" <<<"$out" && pass || fail "transform: the summary counts the target ranks" "$out"
  expect_text "transform: w in 4 column chunks" '^w +Float32 +\[3,4\] +48 +4$' inspect "$tmp/t"
  expect_text "transform: h (replicated) stored once, by rank 0" '^h +\[0,0\] +\[2,2\] +__0_0.distcp ' inspect "$tmp/t"
  run inspect "$tmp/t"
  [[ $(grep -c '^h ' <<<"$out") -eq 2 ]] && pass || fail "transform: h listed once as a tensor, once as a chunk" "$out"
  ok "transform: read back" convert --in "$tmp/t" --out "$tmp/t.safetensors" --no-sync &&
    same_file "transform: the same tensors" "$tmp/t.safetensors" "$tmp/ref.safetensors"
fi
if ok "transform --format dcp --max-memory 64MiB --jobs 1" transform --src-dir "$DCP/cols" --dst-dir "$tmp/tm" \
     --dst-strategy "$tmp/dst.json" --format dcp --max-memory 64MiB --jobs 1 --no-sync; then
  for f in .metadata __0_0.distcp __1_0.distcp __2_0.distcp __3_0.distcp; do
    same_file "--max-memory: $f as without" "$tmp/tm/$f" "$tmp/t/$f"
  done
fi
ok "convert the merge to ckpt" convert --in "$DCP/cols" --out "$tmp/full.ckpt" --no-sync
if ok "split --format dcp" split --checkpoint "$tmp/full.ckpt" --dst-dir "$tmp/s" --dst-strategy "$tmp/dst.json" --format dcp --dcp-torch 1.13 --no-sync; then
  for f in __0_0.distcp __1_0.distcp __2_0.distcp __3_0.distcp; do  # .metadata: other module paths
    same_file "split: $f as the transform's" "$tmp/s/$f" "$tmp/t/$f"
  done
  cmp -s "$tmp/s/.metadata" "$tmp/t/.metadata" && fail "split: --dcp-torch 1.13 wrote torch 2's .metadata" || pass
  ok "split: read back" convert --in "$tmp/s" --out "$tmp/s.safetensors" --no-sync &&
    same_file "split: the same tensors" "$tmp/s.safetensors" "$tmp/ref.safetensors"
fi

# ---- a manifest, dry run, plans, existing outputs ------------------------------------------------

if ok "transform --format dcp --manifest" transform --src-dir "$DCP/cols" --dst-dir "$tmp/mf" --dst-strategy "$tmp/dst.json" \
     --format dcp --manifest "$tmp/mf.json" --no-sync; then
  "$PY" - "$tmp/mf.json" <<'EOF' && pass || fail "the manifest lists the data files, then .metadata, with their digests"
import hashlib, json, os, sys
m = json.load(open(sys.argv[1]))
names = [os.path.basename(f["path"]) for f in m["files"]]
assert names == ["__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp", ".metadata"], names
for f in m["files"]:
    path = f["path"] if os.path.isabs(f["path"]) else os.path.join(os.path.dirname(sys.argv[1]), f["path"])
    data = open(path, "rb").read()
    assert len(data) == f["bytes"] and hashlib.sha256(data).hexdigest() == f["sha256"], f
EOF
fi


ok "transform --format dcp --dry-run" transform --src-dir "$DCP/cols" --dst-dir "$tmp/dry" --dst-strategy "$tmp/dst.json" --format dcp --dry-run
[[ ! -e "$tmp/dry" ]] && pass || fail "a dry run wrote $tmp/dry"
if ok "transform --format dcp --plan-out" transform --src-dir "$DCP/cols" --dst-dir "$tmp/p" --dst-strategy "$tmp/dst.json" \
     --format dcp --dcp-torch 1.13 --plan-out "$tmp/plan.json"; then
  expect_error "execute --part 1/2 of a DCP plan" 1 "whose .metadata lists the chunks of every target rank" \
    execute "$tmp/plan.json" --part 1/2 --no-sync
  [[ ! -e "$tmp/p" ]] && pass || fail "a refused part wrote $tmp/p"
  if ok "execute the DCP plan whole" execute "$tmp/plan.json" --no-sync; then
    for f in .metadata __0_0.distcp __1_0.distcp __2_0.distcp __3_0.distcp; do
      same_file "execute: $f as the transform wrote it" "$tmp/p/$f" "$tmp/s/$f"
    done
  fi
fi
expect_error "an existing DCP output is kept" 1 "exists (pass force / --force to replace it)" \
  transform --src-dir "$DCP/cols" --dst-dir "$tmp/t" --dst-strategy "$tmp/dst.json" --format dcp --no-sync
ok "--force replaces it" transform --src-dir "$DCP/cols" --dst-dir "$tmp/t" --dst-strategy "$tmp/dst.json" --format dcp --force --no-sync

# ---- verify -------------------------------------------------------------------------------------

expect_text "verify --format dcp: the transform" '5 tensors.*identical' \
  verify --src-dir "$DCP/cols" --dst-dir "$tmp/t" --dst-strategy "$tmp/dst.json" --format dcp
expect_text "verify --format dcp: the merge" 'identical' verify --src-dir "$DCP/cols" --out "$tmp/merged" --format dcp
"$PY" - "$tmp/t/__3_0.distcp" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[0x140] ^= 1  # the first byte of the tensor data (64-byte aligned after data.pkl's record)
open(sys.argv[1], "wb").write(bytes(b))
EOF
run verify --src-dir "$DCP/cols" --dst-dir "$tmp/t" --dst-strategy "$tmp/dst.json" --format dcp
[[ $rc -eq 1 ]] && grep -q "__3_0.distcp" <<<"$out$err" && grep -q "differs from element 0" <<<"$out$err" && pass ||
  fail "verify --format dcp finds a flipped byte" "exit code $rc" "stdout: $out" "stderr: $err"

# ---- usage errors -------------------------------------------------------------------------------

expect_error "--dcp-torch without --format dcp" 2 "--dcp-torch: only with --format dcp" \
  merge --src-dir "$DCP/cols" --out "$tmp/never.safetensors" --dcp-torch 1.13
expect_error "--dcp-torch 3" 2 "--dcp-torch" \
  convert --in "$DCP/cols" --out "$tmp/never" --format dcp --dcp-torch 3
expect_error "transform-rank --format dcp" 2 "--format: dcp not in" \
  transform-rank --rank 0 --checkpoint "0=$tmp/full.ckpt" --out "$tmp/never" --dst-strategy "$tmp/dst.json" --format dcp
[[ ! -e "$tmp/never" && ! -e "$tmp/never.safetensors" ]] && pass || fail "a usage error wrote an output"

finish
