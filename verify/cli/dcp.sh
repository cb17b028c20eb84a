#!/usr/bin/env bash
# PyTorch DCP checkpoints as a source, on the checkpoints torch 1.13 wrote (verify/data/dcp/, with
# the values torch loaded in <name>.expected.json): `reshard inspect DIR` lists the tensors, their
# chunks and the byte items (text and JSON); `reshard merge --src-dir DIR` writes every fixture to
# safetensors, ckpt and Hugging Face, each tensor equal to torch's (read back by a reader written
# here, from the safetensors header up), the byte items left out with a warning naming them;
# --dtype, --include, --exclude, --rename, --dry-run, --manifest and --plan-out then `reshard
# execute` go through the same plan; `reshard convert --in DIR`; `reshard transform --src-dir DIR
# --dst-strategy S` and `split --checkpoint DIR` write MindSpore ranks (the same bytes), and `reshard
# verify` checks them and a merge; a source strategy is
# refused naming it (exit 1, nothing written); --max-memory holds.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
DCP="$SRC/verify/data/dcp"

# same_as_torch NAME FIXTURE OUTPUT [RENAMES_JSON [DTYPES_JSON]]: OUTPUT (a .safetensors file or a
# Hugging Face directory of them) holds exactly the fixture's tensors (renamed), each with the bytes
# torch loaded (or, with a dtype given, the dtype named).
same_as_torch() {
  local name=$1 fixture=$2 output=$3 renames=${4:-"{}"} e
  if e=$("$PY" - "$DCP/$fixture.expected.json" "$output" "$renames" 2>&1 <<'EOF'
import json, os, struct, sys
expected, out, renames = json.load(open(sys.argv[1])), sys.argv[2], json.loads(sys.argv[3])
files = [out] if os.path.isfile(out) else sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".safetensors"))
got = {}
for f in files:
    b = open(f, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    for k, v in head.items():
        if k == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        got[k] = (v["dtype"], v["shape"], b[8 + n + lo:8 + n + hi].hex())
st = {"float32": "F32", "bfloat16": "BF16", "int64": "I64", "float16": "F16"}
want = {renames.get(k, k): (st[v["dtype"]], v["shape"], v["hex"]) for k, v in expected["tensors"].items()}
assert got == want, (got, want)
EOF
  ); then pass; else fail "$name" "$e"; fi
}

# ---- inspect --------------------------------------------------------------------------------

expect_text "inspect: the grid's tensors" '^g +Float32 +\[4,6\] +96 +4$' inspect "$DCP/grid"
expect_text "inspect: the empty shard has no chunk" '^i +Int64 +\[5,2\] +80 +3$' inspect "$DCP/grid"
expect_text "inspect: a chunk and where it is" '^g +\[3,4\] +\[1,2\] +__3_0.distcp +0 +747$' inspect "$DCP/grid"
expect_text "inspect: byte items" '^epoch +__0_[0-9].distcp' inspect "$DCP/plain"
expect_text "inspect: the module paths" 'torch 1.13 module paths' inspect "$DCP/rows"
expect_json "inspect --json" \
  'j["kind"] == "dcp" and [t["name"] for t in j["tensors"]] == ["g", "i"] and len(j["tensors"][0]["chunks"]) == 4 and j["tensors"][1]["chunks"][2] == {"offsets": [4, 0], "sizes": [1, 2], "file": "__2_0.distcp", "offset": 747, "length": 747} and j["files"] == ["__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp"]' \
  inspect --json "$DCP/grid"
expect_text "inspect one data file: its chunks and their offsets" '^g +Float32 +\[1,4\] +16 +\[3,0\]$' inspect "$DCP/grid/__2_0.distcp"
expect_json "inspect --json: byte items" '[b["name"] for b in j["byte_items"]] == ["epoch", "tag"]' inspect --json "$DCP/plain"

# ---- merge ----------------------------------------------------------------------------------

for f in minimal plain rows cols grid; do
  if ok "merge $f" merge --src-dir "$DCP/$f" --out "$tmp/$f.safetensors" --no-sync; then
    same_as_torch "merge $f: torch's values" "$f" "$tmp/$f.safetensors"
  fi
  if ok "merge $f --format hf" merge --src-dir "$DCP/$f" --out "$tmp/$f.hf" --format hf --max-shard-size 100 --no-sync; then
    same_as_torch "merge $f --format hf: torch's values" "$f" "$tmp/$f.hf"
  fi
  # ckpt, converted back to safetensors by reshard: the same values
  if ok "merge $f --format ckpt" merge --src-dir "$DCP/$f" --out "$tmp/$f.ckpt" --no-sync &&
     ok "convert $f.ckpt" convert --in "$tmp/$f.ckpt" --out "$tmp/$f.back.safetensors" --no-sync; then
    same_as_torch "merge $f --format ckpt: torch's values" "$f" "$tmp/$f.back.safetensors"
  fi
done

if ok "merge --max-memory" merge --src-dir "$DCP/grid" --out "$tmp/budget.safetensors" --max-memory 64MiB --no-sync; then
  same_as_torch "merge --max-memory: torch's values" grid "$tmp/budget.safetensors"
fi

run merge --src-dir "$DCP/plain" --out "$tmp/warn.safetensors" --no-sync
if [[ $rc -eq 0 ]] && grep -q "byte items 'epoch', 'tag'" <<<"$err$out"; then pass; else fail "merge: the byte items named in a warning" "rc $rc" "$out" "$err"; fi

ok "merge --dtype --exclude --rename" merge --src-dir "$DCP/plain" --out "$tmp/sel.safetensors" --no-sync \
  --exclude steps --rename '^w$=layer.weight' --dtype 'b=float32'
"$PY" - "$DCP/plain.expected.json" "$tmp/sel.safetensors" <<'EOF' && pass || fail "merge --dtype --exclude --rename: the values"
import json, struct, sys
exp = json.load(open(sys.argv[1]))["tensors"]
b = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
head = json.loads(b[8:8 + n])
data = lambda k: b[8 + n + head[k]["data_offsets"][0]:8 + n + head[k]["data_offsets"][1]]
assert sorted(k for k in head if k != "__metadata__") == ["b", "layer.weight", "scale"], head
assert data("layer.weight").hex() == exp["w"]["hex"]
# bfloat16 to float32 is exact: the high half of each float32 is the bfloat16
bf = bytes.fromhex(exp["b"]["hex"])
assert head["b"]["dtype"] == "F32"
assert data("b") == b"".join(b"\0\0" + bf[i:i + 2] for i in range(0, len(bf), 2))
EOF

if ok "merge --include" merge --src-dir "$DCP/rows" --out "$tmp/inc.safetensors" --include 'w*' --no-sync; then
  "$PY" - "$DCP/rows.expected.json" "$tmp/inc.safetensors" <<'EOF' && pass || fail "merge --include: only w, torch's values"
import json, struct, sys
exp = json.load(open(sys.argv[1]))["tensors"]
b = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
head = json.loads(b[8:8 + n])
assert sorted(k for k in head if k != "__metadata__") == ["w"], head
assert b[8 + n + head["w"]["data_offsets"][0]:8 + n + head["w"]["data_offsets"][1]].hex() == exp["w"]["hex"]
assert head["__metadata__"] == {"format": "pt"}, head
EOF
fi

expect_json "merge --dry-run: the plan's bytes" \
  'j["dry_run"] and j["bytes_read"] == 4 * 6 * 4 + 5 * 2 * 8 and j["bytes_written"] == j["bytes_read"] and j["source_files"] == 4' \
  merge --src-dir "$DCP/grid" --out "$tmp/dry.safetensors" --dry-run --json
[[ ! -e "$tmp/dry.safetensors" ]] && pass || fail "merge --dry-run wrote its output"

if ok "merge --manifest" merge --src-dir "$DCP/cols" --out "$tmp/m.safetensors" --manifest "$tmp/m.manifest.json" --no-sync; then
  "$PY" - "$tmp/m.manifest.json" "$tmp/m.safetensors" <<'EOF' && pass || fail "merge --manifest: the digest"
import hashlib, json, sys
m = json.load(open(sys.argv[1]))
digests = [f["sha256"] for f in m["files"]]
assert hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest() in digests, m
EOF
fi

if ok "merge --plan-out" merge --src-dir "$DCP/grid" --out "$tmp/planned.safetensors" --plan-out "$tmp/plan.json" --dry-run; then
  if ok "execute the plan" execute "$tmp/plan.json" --no-sync; then
    same_as_torch "execute: torch's values" grid "$tmp/planned.safetensors"
  fi
fi

# ---- convert and transform ------------------------------------------------------------------

if ok "convert --in DIR" convert --in "$DCP/rows" --out "$tmp/conv.safetensors" --no-sync; then
  same_as_torch "convert: torch's values" rows "$tmp/conv.safetensors"
fi

cat >"$tmp/dst.json" <<'EOF'
{"current_stage": 1, "parallel_layout_item": {
  "w": {"dev_matrix": [4], "tensor_map": [-1, 0], "tensor_shape": [3, 4], "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}
EOF
if ok "transform --src-dir DIR --dst-strategy" transform --src-dir "$DCP/cols" --dst-dir "$tmp/ms" --dst-strategy "$tmp/dst.json" \
     --format safetensors --no-sync; then
  "$PY" - "$DCP/cols.expected.json" "$tmp/ms" <<'EOF' && pass || fail "transform: every rank's columns"
import json, struct, sys
exp = json.load(open(sys.argv[1]))["tensors"]
w = bytes.fromhex(exp["w"]["hex"])  # [3,4] float32
for t in range(4):
    b = open(f"{sys.argv[2]}/rank_{t}/checkpoint_{t}.safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    data = lambda k: b[8 + n + head[k]["data_offsets"][0]:8 + n + head[k]["data_offsets"][1]]
    assert head["w"]["shape"] == [3, 1], head
    assert data("w") == b"".join(w[(r * 4 + t) * 4:(r * 4 + t + 1) * 4] for r in range(3)), t
    assert data("h").hex() == exp["h"]["hex"] and head["h"]["shape"] == [2, 2]  # not in the strategy: whole
EOF
  expect_text "verify the transform" '8 tensors.*identical' verify --src-dir "$DCP/cols" --dst-dir "$tmp/ms" --dst-strategy "$tmp/dst.json" --format safetensors
fi

if ok "split --checkpoint DIR" split --checkpoint "$DCP/cols" --dst-dir "$tmp/split" --dst-strategy "$tmp/dst.json" \
     --format safetensors --no-sync; then
  for t in 0 1 2 3; do
    cmp -s "$tmp/split/rank_$t/checkpoint_$t.safetensors" "$tmp/ms/rank_$t/checkpoint_$t.safetensors" && pass ||
      fail "split rank $t: not the transform's bytes"
  done
fi
expect_text "verify a merge of DIR" 'identical' verify --src-dir "$DCP/grid" --out "$tmp/grid.safetensors"

# transform-rank --src-dir DIR: one target rank from the DCP checkpoint, the transform's bytes
for t in 0 3; do
  if ok "transform-rank --src-dir DIR (rank $t)" transform-rank --rank "$t" --src-dir "$DCP/cols" \
       --out "$tmp/tr_$t.safetensors" --dst-strategy "$tmp/dst.json" --no-sync; then
    cmp -s "$tmp/tr_$t.safetensors" "$tmp/ms/rank_$t/checkpoint_$t.safetensors" && pass ||
      fail "transform-rank --src-dir rank $t: not the transform's bytes"
  fi
done
if ok "transform-rank --src-dir DIR, whole" transform-rank --rank 0 --src-dir "$DCP/rows" --out "$tmp/tr_rows.safetensors" \
     --no-sync; then
  same_as_torch "transform-rank --src-dir: torch's values" rows "$tmp/tr_rows.safetensors"
fi
expect_error "transform-rank: --src-dir and --checkpoint" 2 "excludes" \
  transform-rank --rank 0 --src-dir "$DCP/cols" --checkpoint 0="$DCP/cols/__0_0.distcp" --out "$tmp/never_tr.ckpt"
expect_error "transform-rank: --src-dir and --src-strategy" 2 "--src-strategy: not with --src-dir" \
  transform-rank --rank 0 --src-dir "$DCP/cols" --src-strategy "$tmp/dst.json" --out "$tmp/never_tr.ckpt"
expect_error "transform-rank: neither --src-dir nor --checkpoint" 2 "one of --checkpoint and --src-dir" \
  transform-rank --rank 0 --out "$tmp/never_tr.ckpt"
expect_error "transform-rank --src-dir: not a DCP directory" 1 "$tmp/ms" \
  transform-rank --rank 0 --src-dir "$tmp/ms" --out "$tmp/never_tr.ckpt"
[[ ! -e "$tmp/never_tr.ckpt" ]] && pass || fail "a refused transform-rank wrote its output"

# ---- errors ---------------------------------------------------------------------------------

echo '{}' >"$tmp/s.json"
expect_error "merge: a source strategy is refused" 1 "give no source strategy ($tmp/s.json was given)" \
  merge --src-dir "$DCP/rows" --out "$tmp/never.ckpt" --src-strategy "$tmp/s.json"
[[ ! -e "$tmp/never.ckpt" ]] && pass || fail "a refused merge wrote its output"

finish
