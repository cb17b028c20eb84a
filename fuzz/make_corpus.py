#!/usr/bin/python3
"""Writes the seed corpora of reshard's fuzz targets: fuzz/corpus/<target>/seed-*.

Deterministic (run it again: no diff). Real MindSpore-schema files come from protobuf's own
Python library through verify/python/ms_files.py (checkpoints, strategy files in both encodings,
safetensors), plus the golden encodings of docs/formats.md, a few malformed variants,
the spec's layout examples as layout JSON and as plan_convert layout pairs (encoded as
fuzz/decode.hpp decodes them), and seeded random inputs for the decoding targets. Each input gets
the target's parameter prefix (for example ckpt's first byte, bit 0 = verify the CRC).

Files named regress-* (inputs of fixed findings) are never touched. Run with /usr/bin/python3:

  /usr/bin/python3 fuzz/make_corpus.py            # rewrites fuzz/corpus/*/seed-*
"""

import binascii
import json
import os
import random
import shutil
import struct
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "verify", "python"))
import ms_files  # noqa: E402
import ms_proto  # noqa: E402

CORPUS = os.path.join(HERE, "corpus")
MAX_SEED = 4096  # bytes: keep seeds small

# docs/formats.md#2-strategy-files and docs/formats.md#3-checkpoint-files
GOLDEN_CKPT_W = "0a240a0177121f080208021207466c6f617433321a100000803f000000400000404000008040"
GOLDEN_CKPT_STEP = "0a200a0b676c6f62616c5f7374657012111205496e7436341a080500000000000000"
GOLDEN_CKPT_TRAILER = "6372635f6e756d000000000000a9f61be4"
GOLDEN_STRATEGY = ("0801121a0a084d61744d756c5f77120e08001204080208011204080108041a240a0177121f0a0408020804120d"
                   "080108ffffffffffffffffff011a002200280030003800")
GOLDEN_TUPLE_LAYOUTS = "0a06080208020802120408020801120208001a002200280030003800"
SPEC_STRATEGY_JSON = {
    "current_stage": 1,
    "parallel_strategy_item": {"MatMul_w": {"stage": 0, "parallel_strategy": [[2, 1], [1, 4]]}},
    "parallel_layout_item": {"w": {"dev_matrix": [2, 4], "tensor_map": [1, -1], "tensor_shape": [64, 32],
                                   "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}


class Corpus:
    def __init__(self):
        self.files = {}  # target -> {name: bytes}

    def add(self, target, name, data):
        assert len(data) <= MAX_SEED, (target, name, len(data))
        names = self.files.setdefault(target, {})
        assert name not in names, (target, name)
        names[name] = data

    def write(self):
        for target, names in sorted(self.files.items()):
            d = os.path.join(CORPUS, target)
            os.makedirs(d, exist_ok=True)
            for f in os.listdir(d):
                if f.startswith("seed-"):
                    os.remove(os.path.join(d, f))
            for name, data in sorted(names.items()):
                with open(os.path.join(d, "seed-" + name), "wb") as f:
                    f.write(data)
            print("%-22s %3d seeds, %6d bytes" % (target, len(names), sum(map(len, names.values()))))


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ------------------------------------------------------------------------------------------------
# readers

def ckpt_seeds(c, tmp):
    d = os.path.join(tmp, "ckpt")
    os.makedirs(d)
    ms_files.gen_ckpt(d)
    files = {f[:-5]: read(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".ckpt")}
    w, step = bytes.fromhex(GOLDEN_CKPT_W), bytes.fromhex(GOLDEN_CKPT_STEP)
    files["golden_w"] = w
    files["golden_step"] = step
    files["golden_crc"] = w + step + bytes.fromhex(GOLDEN_CKPT_TRAILER)
    files["bad_crc"] = w + step + bytes.fromhex(GOLDEN_CKPT_TRAILER)[:-1] + b"\x00"
    files["truncated"] = (w + step)[:50]
    files["encrypted"] = struct.pack("<I", 0x7F3A5ED8) + b"\x00" * 28
    files["repeated_param"] = w + step + w
    for name, data in sorted(files.items()):
        c.add("ckpt", name + "-crc", b"\x01" + data)  # byte 0 bit 0: verify the CRC
        if name in ("crc", "golden_crc", "bad_crc", "golden_w"):
            c.add("ckpt", name + "-nocrc", b"\x00" + data)


def strategy_seeds(c, tmp):
    mods = ms_proto.load()
    d = os.path.join(tmp, "strategy")
    os.makedirs(d)
    ms_files.gen_strategy(d)
    for sub in ("", "stages_pb", "stages_json"):
        for f in sorted(os.listdir(os.path.join(d, sub))):
            path = os.path.join(d, sub, f)
            if f.endswith(".expect.json") or not os.path.isfile(path):
                continue
            stem = (sub + "_" if sub else "") + f.rsplit(".", 1)[0]
            if f.endswith(".json"):
                c.add("strategy_json", stem, read(path))
            else:
                c.add("strategy_protobuf", stem, read(path))
                # the same content in JSON, written by MindSpore's JSON convention
                n = ms_files.neutral_from_pb(_parse_map(mods, read(path)))
                c.add("strategy_json", stem + "_as_json",
                      json.dumps(ms_files.json_from_neutral(n), indent=1).encode())
    golden = bytes.fromhex(GOLDEN_STRATEGY)
    c.add("strategy_protobuf", "golden_map", golden)
    c.add("strategy_protobuf", "golden_truncated", golden[:40])
    m = mods.strategy.ParallelStrategyMap()
    m.current_stage = 1
    item = m.parallel_layout_item.add()
    item.param_name = "t"
    item.parallel_layouts.ParseFromString(bytes.fromhex(GOLDEN_TUPLE_LAYOUTS))
    c.add("strategy_protobuf", "golden_tuple_layouts", m.SerializeToString())
    c.add("strategy_json", "spec_example", json.dumps(SPEC_STRATEGY_JSON).encode())
    c.add("strategy_json", "duplicate_key", b'{"current_stage": 1, "current_stage": 2}')
    c.add("strategy_json", "nested", b'{"current_stage": ' + b"[" * 70 + b"]" * 70 + b"}")


def _parse_map(mods, data):
    m = mods.strategy.ParallelStrategyMap()
    m.ParseFromString(data)
    return m


def safetensors_file(header, data=b""):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds(c, tmp):
    d = os.path.join(tmp, "safetensors")
    os.makedirs(d)
    ms_files.gen_safetensors(d)
    files = {"python_all": read(os.path.join(d, "all.safetensors"))}
    w = struct.pack("<4f", 1, 2, 3, 4)
    files["one"] = safetensors_file({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                                     "__metadata__": {"format": "ms"}}, w)
    files["int4"] = safetensors_file({"q": {"dtype": "I8", "shape": [2], "data_offsets": [0, 2]},
                                      "__metadata__": {"q": "Int4"}}, b"\x12\x34")
    files["empty"] = safetensors_file({})
    files["overlap"] = safetensors_file({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                                         "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, b"xyz")
    for name, data in sorted(files.items()):
        c.add("safetensors", name, b"\x00" + data)  # byte 0 bit 0 clear: the whole file
        n = struct.unpack("<Q", data[:8])[0]  # framed: 2-byte header length, header, data
        c.add("safetensors", name + "-framed", b"\x01" + struct.pack(">H", n) + data[8:])


# ------------------------------------------------------------------------------------------------
# layouts

LAYOUTS_JSON = {
    "rows": {"dev_matrix": [2, 4], "tensor_map": [1, -1], "shape": [8, 4]},
    "both_dims": {"dev_matrix": [2, 4], "tensor_map": [0, 1], "shape": [8, 4]},
    "repeat_middle": {"dev_matrix": [2, 2, 2], "tensor_map": [2, 0], "shape": [4, 6]},
    "tuple": {"dev_matrix": [4, 2, 2], "tensor_map": [[2, 1], 0], "shape": [8, 8]},
    "opt_shard": {"dev_matrix": [4, 2], "tensor_map": [-1, 0], "shape": [8, 4], "opt_shard": {"step": 2, "size": 4}},
    "opt_whole_group": {"dev_matrix": [8], "tensor_map": [-1, -1], "shape": [16, 2],
                        "opt_weight_shard_step": 1, "opt_weight_shard_size": -1},
    "chunk": {"dev_matrix": [3], "tensor_map": [0], "shape": [10], "split": "chunk", "stage": 1},
    "balanced": {"dev_matrix": [4, 2], "tensor_map": [1, 0], "shape": [7, 5], "split": "balanced", "first_rank": 3},
    "split_sizes": {"dev_matrix": [2], "tensor_map": [0, -1], "tensor_shape": [8, 4], "param_split_shape": [3, 5],
                    "indices_offset": [0, 3], "field": 0},
    "split_sizes_per_dim": {"dev_matrix": [2, 2], "tensor_map": [1, 0], "shape": [5, 5], "split": "chunk",
                            "split_sizes": [[2, 3], [4, 1]]},
    "scalar": {"dev_matrix": [4], "tensor_map": [], "shape": []},
    "no_devices": {"dev_matrix": [], "tensor_map": [-1], "shape": [3]},
    "uneven_divisible": {"dev_matrix": [3], "tensor_map": [0], "shape": [10]},
    "not_json": b'{"dev_matrix": [2,4], "tensor_map": [1,-1], "shape": [8,4]',
    "deep": b'{"dev_matrix": ' + b"[" * 70 + b"]" * 70 + b"}",
    "huge_opt": {"dev_matrix": [1073741824, 2], "tensor_map": [1], "shape": [1073741824],
                 "opt_shard": {"step": 1, "size": 2}},
}

OPT_SIZES = [-1, 2, 3, 4, 1, 0, -2]  # fuzz/decode.hpp
OPT_STEPS = [0, 1, 2, 4, -1, 1 << 20]
SPLIT_MODES = ["divisible", "chunk", "balanced"]
ELEMENT_SIZES = [1, 2, 3, 4, 8]


def encode_layout(dev, tmap, rank, mode="divisible", opt=None, first_rank=0):
    """The bytes fuzz/decode.hpp's decode_layout reads as this layout (MindSpore's right-counted
    tensor map, tuples as lists; sizes <= 8, at most 64 ranks, first rank <= 16)."""
    nd = len(dev)
    out = [nd]
    out += [d - 1 for d in dev]
    unused = list(range(nd))
    assert len(tmap) == rank
    for entry in tmap:
        axes = [] if entry == -1 else [nd - 1 - m for m in (entry if isinstance(entry, list) else [entry])]
        out.append(len(axes))
        for a in axes:
            j = unused.index(a)
            out.append(j)
            unused.pop(j)
    out.append(SPLIT_MODES.index(mode))
    if opt is None:
        out.append(0)
    else:
        step, size = opt
        out.append(next(b for b in range(160, 256) if b % 7 == OPT_SIZES.index(size)))
        out.append(OPT_STEPS.index(step))
    out.append(0 if first_rank == 0 else next(b for b in range(200, 250) if b % 17 == first_rank))
    out.append(0)  # no explicit split sizes
    return bytes(out)


def encode_pair(shape, a, b, element_bytes=4):
    out = bytes([ELEMENT_SIZES.index(element_bytes), len(shape)] + [s for s in shape])
    return out + encode_layout(*a[:2], len(shape), **a[2] if len(a) > 2 else {}) + \
        encode_layout(*b[:2], len(shape), **b[2] if len(b) > 2 else {})


PAIRS = {
    "rows_to_both_dims": ([8, 4], ([2, 4], [1, -1]), ([2, 4], [0, 1])),
    "repeat_middle_to_rows": ([4, 6], ([2, 2, 2], [2, 0]), ([4], [0, -1])),
    "tuple_to_rows": ([8, 8], ([4, 2, 2], [[2, 1], 0]), ([2, 4], [1, -1])),
    "opt_shard_to_cols": ([8, 4], ([4, 2], [-1, 0], {"opt": (2, 4)}), ([2], [0, -1])),
    "opt_group_to_one": ([8, 2], ([8], [-1, -1], {"opt": (1, -1)}), ([1], [-1, -1])),
    "8_to_3_uneven": ([10], ([8], [0], {"mode": "chunk"}), ([3], [0], {"mode": "balanced"})),
    "stages": ([6, 4], ([2, 2], [1, 0], {"first_rank": 4}), ([3], [0, -1], {"first_rank": 9})),
    "scalar": ([], ([4], []), ([2], [])),
    "zero_dim": ([0, 5], ([2], [0, -1]), ([5], [-1, 0])),
    "odd_element": ([3, 12, 2], ([3, 2], [1, -1, 0], {"mode": "balanced"}), ([4, 3], [-1, [0, 1], -1]), 3),
    "invalid_uneven": ([10], ([3], [0]), ([2], [0])),
}


def layout_seeds(c):
    for name, j in sorted(LAYOUTS_JSON.items()):
        c.add("layout_json", name, j if isinstance(j, bytes) else json.dumps(j).encode())
    for name, (shape, a, b, *elem) in sorted(PAIRS.items()):
        c.add("plan_convert", name, encode_pair(shape, a, b, *elem))
        c.add("plan_convert", name + "-back", encode_pair(shape, b, a, *elem))


# ------------------------------------------------------------------------------------------------
# the strict JSON reader and the JSON files read through it: rename maps, Hugging Face indexes

def json_seeds(c):
    for name, text in (("object", b'{"a": [1, 2.5, -3, true, null], "b": {"c": "\\u00e9"}}'),
                       ("array", b' [{"a": 1}, {"a": 2}] \n'),
                       ("known_keys", b'{"dev_matrix": [2, 4], "tensor_map": [1, -1], "field": 0}'),
                       ("unknown_key", b'{"dev_matrix": [2], "tensor_mpa": [0]}'),
                       ("trailing", b'{"w0": "q"} garbage'),
                       ("duplicate_key", b'{"a": {"k": 1,\n "k": 2}}'),
                       ("nested", b"[" * 70 + b"]" * 70),
                       ("huge_number", b"[1e999]")):
        c.add("json_reader", name, text)
    c.add("json_reader", "spec_strategy", json.dumps(SPEC_STRATEGY_JSON).encode())
    for name, text in (("plain", b'{"layer1.weight": "backbone.layer1.weight", "moments.w": "adam_m.w"}'),
                       ("empty", b"{}"),
                       ("trailing", b'{"w0": "q"} garbage'),
                       ("duplicate_key", b'{"w0": "q", "w0": "r"}'),
                       ("not_string", b'{"w0": 1}'),
                       ("list", b"[1, 2]")):
        c.add("rename_map", name, text)
    index = {"metadata": {"total_size": 1024},
             "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors",
                            "model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}
    c.add("hf_index", "two_shards", (json.dumps(index, indent=2, sort_keys=True) + "\n").encode())
    for name, text in (("trailing", b'{"weight_map": {"w": "a.safetensors"}} x'),
                       ("duplicate_tensor", b'{"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}}'),
                       ("path", b'{"weight_map": {"w": "../a.safetensors"}}'),
                       ("no_weight_map", b'{"metadata": {}}'),
                       ("empty_weight_map", b'{"weight_map": {}}')):
        c.add("hf_index", name, text)


# ------------------------------------------------------------------------------------------------
# PyTorch DCP: the pickles and torch.save archives of the committed fixtures (written by torch
# 1.13, verify/data/dcp/), CPython's own pickles, and malformed variants

DCP = os.path.join(HERE, "..", "verify", "data", "dcp")


def dcp_archives():
    """(name, bytes) of every torch.save archive inside the fixtures' .distcp files."""
    out = []
    for fixture in ("plain", "rows", "cols"):
        d = os.path.join(DCP, fixture)
        for f in sorted(os.listdir(d)):
            if not f.endswith(".distcp"):
                continue
            data, at, n = read(os.path.join(d, f)), 0, 0
            while at < len(data):  # items follow each other; each ends with its end record
                end = data.index(b"PK\x05\x06", at) + 22
                out.append(("%s_%s_%d" % (fixture, f[:-len(".distcp")], n), data[at:end]))
                at, n = end, n + 1
    return out


def zip64_archive(entries):
    """A stored zip of (name, bytes) with zip64 extra fields for every size and offset (as a
    torch archive over 4 GiB has them), and the zip64 end records torch always writes."""
    out, central = b"", b""
    for name, data in entries:
        local, crc, n = len(out), binascii.crc32(data), name.encode()
        out += struct.pack("<IHHHHHIIIHH", 0x04034b50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(n), 20)
        out += n + struct.pack("<HHQQ", 1, 16, len(data), len(data)) + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                               len(n), 28, 0, 0, 0, 0, 0xFFFFFFFF)
        central += n + struct.pack("<HHQQQ", 1, 24, len(data), len(data), local)
    cd, z = len(out), len(out) + len(central)
    out += central
    out += struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, len(entries), len(entries), len(central), cd)
    out += struct.pack("<IIQI", 0x07064b50, 0, z, 1)
    return out + struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)


def dcp_seeds(c):
    import io
    import pickle
    import zipfile
    for fixture in ("plain", "rows", "cols", "grid"):
        meta = read(os.path.join(DCP, fixture, ".metadata"))
        c.add("pickle", "metadata_" + fixture, b"\x02" + meta)
        c.add("pickle", "metadata_" + fixture + "_plain", b"\x00" + meta)
    value = {"a": [1, (2, "x")], "b": None, "c": b"\x00\xff", "d": -70000, "e": 1.5, "f": True, "g": 2 ** 40}
    for protocol in (2, 3, 4, 5):
        c.add("pickle", "cpython_p%d" % protocol, b"\x00" + pickle.dumps(value, protocol=protocol))
    c.add("pickle", "os_system", b"\x00" + b"cos\nsystem\n(S'echo pwned'\ntR.")
    c.add("pickle", "self_list", b"\x00\x80\x04]\x94h\x00a.")
    for name, archive in dcp_archives():
        c.add("torch_archive", name, archive)
        with zipfile.ZipFile(io.BytesIO(archive)) as z:
            pkl = z.read(z.namelist()[0])
            entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
        c.add("pickle", "data_pkl_" + name, b"\x01" + pkl)
        if name == "plain___0_0_0":
            c.add("torch_archive", name + "_truncated", archive[:-30])
            deflated = io.BytesIO()
            with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as z:
                for entry, data in entries:
                    z.writestr(zipfile.ZipInfo(entry), data, compress_type=zipfile.ZIP_DEFLATED)
            c.add("torch_archive", name + "_deflated", deflated.getvalue())
            c.add("torch_archive", name + "_zip64", zip64_archive(entries + [("archive/byteorder", b"little")]))


# ------------------------------------------------------------------------------------------------
# decoding targets: seeded random bytes (every input decodes to something)

def random_seeds(c):
    rng = random.Random(20240611)
    for target, count, lo, hi in (("plan_convert", 12, 16, 64), ("ckpt_roundtrip", 16, 8, 256),
                                  ("safetensors_roundtrip", 16, 8, 256), ("strategy_roundtrip", 16, 8, 192)):
        for i in range(count):
            c.add(target, "random%02d" % i, bytes(rng.randrange(256) for _ in range(rng.randrange(lo, hi))))


def main(argv):
    if len(argv) != 1:
        print(__doc__)
        return 2
    c = Corpus()
    tmp = tempfile.mkdtemp(prefix="reshard_corpus_")
    try:
        ckpt_seeds(c, tmp)
        strategy_seeds(c, tmp)
        safetensors_seeds(c, tmp)
        layout_seeds(c)
        json_seeds(c)
        dcp_seeds(c)
        random_seeds(c)
    finally:
        shutil.rmtree(tmp, True)
    c.write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
