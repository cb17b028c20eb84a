#!/usr/bin/python3
"""MindSpore-format files for reshard's cross-checks, made and read by independent code.

Files are generated with protobuf's own Python library (messages from ms_proto/*.proto, compiled
by protoc at run time) and numpy, and files written by reshard are parsed the same way and
compared value for value with an expectation. Run with /usr/bin/python3 (the interpreter that
has python3-protobuf and python3-numpy).

  ms_files.py gen-ckpt DIR                      DIR/<case>.ckpt + DIR/<case>.expect.json
  ms_files.py check-ckpt FILE EXPECT [FILE EXPECT ...] [--chunk N] [--exact]
  ms_files.py gen-strategy DIR                  strategy files + expectations, stage dirs
  ms_files.py check-strategy FILE EXPECT [FILE EXPECT ...] [--exact]
  ms_files.py merge-strategy SRC_DIR OUT        MindSpore's merge: OUT.expect.json (+ OUT.pb)
  ms_files.py gen-safetensors DIR
  ms_files.py check-safetensors FILE EXPECT [FILE EXPECT ...] [--exact]

--exact (for files written by reshard): the bytes must also equal protobuf's own serialization
of the parsed messages (MindSpore's writer: one Checkpoint per Value, unpacked repeated fields),
and safetensors data must be in name order with the header padded to a multiple of 8.

Expectations are JSON. Checkpoint: {"crc": bool, "entries": [{"name", "kind": "tensor",
"tensor_type", "dims", "content": hex, "pieces": [bytes per Value]} | {"name", "kind": "map",
"values": [hex of each serialized Value]}]}. Strategy: {"current_stage", "nodes": [[name, stage,
[[dim..]..]]], "layouts": [[name, {"dev_matrix", "tensor_map": [[axis..]..], "tuple_form",
"tensor_shape", "param_split_shape", "indices_offset", "field", "opt_weight_shard_step",
"opt_weight_shard_size"}]]}. Safetensors: {"metadata": {..}, "entries": [{"name", "dtype" (MindSpore
name), "shape", "content": hex}]} sorted by name.

Exit status: 0 all matched, 1 mismatch (each difference printed), 2 bad usage or unreadable input.
"""

import binascii
import json
import os
import struct
import sys

import numpy as np

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ms_proto  # noqa: E402

CHUNK = 536870912


class Mismatch:
    """Collects differences; report() prints them and gives the exit status."""

    def __init__(self, what):
        self.what = what
        self.diffs = []

    def eq(self, where, got, want):
        if got != want:
            self.diffs.append("%s: got %s, expected %s" % (where, _short(got), _short(want)))

    def add(self, text):
        self.diffs.append(text)

    def report(self):
        if not self.diffs:
            print("%s: OK" % self.what)
            return 0
        print("%s: %d difference(s)" % (self.what, len(self.diffs)))
        for d in self.diffs:
            print("  " + d)
        return 1


def parse_ckpt(path):
    """The Checkpoint message of the ckpt file at path (a crc_num trailer dropped)."""
    data = open(path, "rb").read()
    if data[-17:-10] == b"crc_num":
        data = data[:-17]
    cp = ms_proto.load().checkpoint.Checkpoint()
    cp.ParseFromString(data)
    return cp


def _short(v):
    s = repr(v)
    return s if len(s) <= 200 else s[:197] + "..."


def _load_json(path):
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise ValueError("duplicate JSON keys %s in %s" % (sorted(dup), path))
        return dict(pairs)

    with open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"), object_pairs_hook=no_duplicates)


def _dump_json(obj, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)


# ------------------------------------------------------------------------------------------------
# checkpoints

def _value_bytes(mod, tag, ttype, dims, content):
    cp = mod.Checkpoint()
    v = cp.value.add()
    v.tag = tag
    v.tensor.dims.extend(dims)
    v.tensor.tensor_type = ttype
    v.tensor.tensor_content = content
    return cp.SerializeToString()


class CkptCase:
    def __init__(self, mods, packed=False):
        self.mod = mods.checkpoint_packed if packed else mods.checkpoint
        self.parts = []
        self.entries = []

    def tensor(self, name, ttype, dims, content, pieces=None):
        """pieces: list of content byte strings (default: one piece)."""
        pieces = [content] if pieces is None else pieces
        assert b"".join(pieces) == content
        for p in pieces:
            self.parts.append(_value_bytes(self.mod, name, ttype, dims, p))
        self.entries.append({"name": name, "kind": "tensor", "tensor_type": ttype, "dims": list(dims),
                             "content": content.hex(), "pieces": [len(p) for p in pieces]})

    def map_tensor(self, name, tensors):
        cp = self.mod.Checkpoint()
        v = cp.value.add()
        v.tag = name
        for ttype, dims, content in tensors:
            t = v.maptensor.tensor.add()
            t.dims.extend(dims)
            t.tensor_type = ttype
            t.tensor_content = content
        self.parts.append(cp.SerializeToString())
        self.entries.append({"name": name, "kind": "map", "values": [v.SerializeToString().hex()]})

    def write(self, directory, case, crc=False):
        data = b"".join(self.parts)
        if crc:
            data += b"crc_num" + binascii.crc32(data).to_bytes(10, "big")
        with open(os.path.join(directory, case + ".ckpt"), "wb") as f:
            f.write(data)
        _dump_json({"crc": crc, "entries": self.entries}, os.path.join(directory, case + ".expect.json"))


NUMPY_OF = {"Int8": np.int8, "UInt8": np.uint8, "Int16": np.int16, "UInt16": np.uint16, "Int32": np.int32,
            "UInt32": np.uint32, "Int64": np.int64, "UInt64": np.uint64, "Float16": np.float16,
            "Float32": np.float32, "Float64": np.float64, "Bool": np.bool_,
            "BFloat16": np.uint16,  # raw bf16 bits: numpy has no bfloat16
            "Int4": np.int8}        # qint4x2: one byte holds two 4-bit values


def _random_array(rng, ttype, dims):
    t = NUMPY_OF[ttype]
    if t is np.bool_:
        return rng.integers(0, 2, size=dims).astype(np.bool_)
    if np.issubdtype(t, np.floating):
        return rng.standard_normal(size=dims).astype(t)
    info = np.iinfo(t)
    return rng.integers(info.min, info.max, size=dims, dtype=t, endpoint=True)


def gen_ckpt(directory):
    mods = ms_proto.load()
    rng = np.random.default_rng(20240611)

    c = CkptCase(mods)
    shapes = {"Int8": [3, 4], "UInt8": [5], "Int16": [2, 3], "UInt16": [4], "Int32": [2, 2, 2], "UInt32": [3],
              "Int64": [2, 3], "UInt64": [1], "Float16": [4, 4], "Float32": [3, 5], "Float64": [2], "Bool": [6],
              "BFloat16": [2, 3], "Int4": [4, 2]}
    for ttype, dims in shapes.items():
        c.tensor("param." + ttype, ttype, dims, _random_array(rng, ttype, dims).tobytes())
    c.tensor("global_step", "Int64", [], np.array(5, np.int64).tobytes())
    c.tensor("learning_rate", "Float32", [0], np.array(0.125, np.float32).tobytes())
    c.tensor("name", "str", [0], np.array("hello wörld").tobytes())
    c.tensor("empty", "Float32", [0, 3], b"")
    c.tensor("layer-1.wéight", "Float32", [2, 2], np.array([[1, 2], [3, 4]], np.float32).tobytes())
    c.write(directory, "dtypes")

    c = CkptCase(mods)
    emb = rng.standard_normal((10, 6)).astype(np.float32).tobytes()
    c.tensor("embedding", "Float32", [10, 6], emb, [emb[i:i + 64] for i in range(0, len(emb), 64)])
    mom = rng.standard_normal((7, 3)).astype(np.float16)
    c.tensor("moments", "Float16", [7, 3], mom.tobytes(), [p.tobytes() for p in np.array_split(mom, 3)])
    c.tensor("bias", "Float32", [4], rng.standard_normal(4).astype(np.float32).tobytes())
    c.write(directory, "multipiece")

    c = CkptCase(mods)
    c.tensor("w", "Float32", [2, 2], np.array([[1, 2], [3, 4]], np.float32).tobytes())
    c.tensor("global_step", "Int64", [], np.array(5, np.int64).tobytes())
    c.write(directory, "crc", crc=True)

    c = CkptCase(mods, packed=True)
    c.tensor("a", "Int32", [2, 3, 4], _random_array(rng, "Int32", [2, 3, 4]).tobytes())
    big = _random_array(rng, "Float16", [300]).tobytes()  # dim 300: a two-byte varint inside the packed list
    c.tensor("b", "Float16", [300], big, [big[:256], big[256:]])
    c.tensor("s", "Int64", [], np.array(-7, np.int64).tobytes())
    c.write(directory, "packed")

    c = CkptCase(mods)
    c.tensor("before", "Float32", [2], np.array([1.5, -2], np.float32).tobytes())
    c.map_tensor("emb_table", [("Int64", [3], np.array([7, 9, 11], np.int64).tobytes()),
                               ("Float32", [3, 2], rng.standard_normal((3, 2)).astype(np.float32).tobytes()),
                               ("Int32", [3], np.array([0, 1, 0], np.int32).tobytes())])
    c.tensor("after", "Int32", [1], np.array([42], np.int32).tobytes())
    c.write(directory, "maptensor")
    return 0


def check_ckpt(path, expect_path, chunk=None, exact=False):
    mods = ms_proto.load()
    mm = Mismatch("check-ckpt " + path)
    expect = _load_json(expect_path)
    with open(path, "rb") as f:
        data = f.read()
    has_crc = len(data) >= 17 and data[-17:-10] == b"crc_num"
    mm.eq("crc trailer present", has_crc, expect["crc"])
    body = data
    if has_crc:
        body = data[:-17]
        stored = int.from_bytes(data[-10:], "big")
        mm.eq("crc_num value", stored, binascii.crc32(body))
    cp = mods.checkpoint.Checkpoint()
    try:
        cp.ParseFromString(body)
    except Exception as e:  # protobuf's DecodeError and friends
        mm.add("protobuf cannot parse the file: %s" % e)
        return mm.report()
    if not cp.IsInitialized():
        mm.add("protobuf: required fields missing: %s" % cp.FindInitializationErrors())
    canonical = b"".join(mods.checkpoint.Checkpoint(value=[v]).SerializeToString() for v in cp.value)
    if exact and canonical != body:
        at = next((i for i, (a, b) in enumerate(zip(canonical, body)) if a != b), min(len(canonical), len(body)))
        mm.add("bytes differ from protobuf's own one-Value-per-Checkpoint serialization at offset %d" % at)

    groups = []
    for v in cp.value:
        if groups and groups[-1][0] == v.tag:
            groups[-1][1].append(v)
        else:
            groups.append((v.tag, [v]))
    mm.eq("parameter names in order", [g[0] for g in groups], [e["name"] for e in expect["entries"]])
    for (tag, values), e in zip(groups, expect["entries"]):
        where = "parameter %r" % tag
        if e["kind"] == "map":
            for v in values:
                mm.eq(where + " oneof", v.WhichOneof("value"), "maptensor")
            mm.eq(where + " serialized Values", [v.SerializeToString().hex() for v in values], e["values"])
            continue
        for i, v in enumerate(values):
            mm.eq("%s piece %d oneof" % (where, i), v.WhichOneof("value"), "tensor")
            mm.eq("%s piece %d dims" % (where, i), list(v.tensor.dims), e["dims"])
            mm.eq("%s piece %d tensor_type" % (where, i), v.tensor.tensor_type, e["tensor_type"])
        content = b"".join(v.tensor.tensor_content for v in values)
        mm.eq(where + " content", content.hex(), e["content"])
        sizes = [len(v.tensor.tensor_content) for v in values]
        if chunk is not None:
            n = len(content)
            want = [chunk] * (n // chunk) + ([n % chunk] if n % chunk or n == 0 else [])
            mm.eq(where + " piece sizes for chunk %d" % chunk, sizes, want)
        elif "pieces" in e:
            mm.eq(where + " piece sizes", sizes, e["pieces"])
    return mm.report()


# ------------------------------------------------------------------------------------------------
# strategy files

def _layout(dev, tmap, tuple_form=False, shape=(), split=(), offset=(), field=0, step=0, size=0):
    return {"dev_matrix": list(dev), "tensor_map": [list(a) for a in tmap], "tuple_form": tuple_form,
            "tensor_shape": list(shape), "param_split_shape": list(split), "indices_offset": list(offset),
            "field": field, "opt_weight_shard_step": step, "opt_weight_shard_size": size}


def pb_from_neutral(n, mod):
    """A ParallelStrategyMap as MindSpore's writer builds it."""
    m = mod.ParallelStrategyMap()
    m.current_stage = n["current_stage"]
    for name, stage, strategy in n["nodes"]:
        it = m.parallel_strategy_item.add()
        it.node_name = name
        it.parallel_strategys.stage = stage
        for dims in strategy:
            it.parallel_strategys.parallel_strategy.add().dim.extend(dims)
    for name, lay in n["layouts"]:
        it = m.parallel_layout_item.add()
        it.param_name = name
        p = it.parallel_layouts
        p.dev_matrix.add().dim.extend(lay["dev_matrix"])
        if lay["tuple_form"]:
            for axes in lay["tensor_map"]:
                p.tensor_map.add().dim.extend(axes)
            if len(lay["tensor_map"]) == 1:
                p.tensor_map.add()
        else:
            p.tensor_map.add().dim.extend([axes[0] for axes in lay["tensor_map"]])
        p.param_split_shape.add().dim.extend(lay["param_split_shape"])
        p.indices_offset.add().dim.extend(lay["indices_offset"])
        p.field = lay["field"]
        p.opt_weight_shard_step = lay["opt_weight_shard_step"]
        p.opt_weight_shard_size = lay["opt_weight_shard_size"]
    return m


def neutral_from_pb(m):
    nodes = [[it.node_name, it.parallel_strategys.stage, [list(s.dim) for s in it.parallel_strategys.parallel_strategy]]
             for it in m.parallel_strategy_item]
    layouts = []
    for it in m.parallel_layout_item:
        p = it.parallel_layouts
        maps = [list(t.dim) for t in p.tensor_map]
        if len(maps) == 1:
            tmap, tuple_form = [[a] for a in maps[0]], False
        elif len(maps) > 1:
            tmap, tuple_form = [a for a in maps if a], True
        else:
            tmap, tuple_form = [], False
        layouts.append([it.param_name, _layout(list(p.dev_matrix[0].dim) if p.dev_matrix else [], tmap, tuple_form, (),
                                               [d for s in p.param_split_shape for d in s.dim],
                                               [d for s in p.indices_offset for d in s.dim],
                                               p.field, p.opt_weight_shard_step, p.opt_weight_shard_size)])
    return {"current_stage": m.current_stage, "nodes": nodes, "layouts": layouts}


def json_from_neutral(n):
    """The JSON strategy format of MindSpore (objects keyed by name)."""
    layouts = {}
    for name, lay in n["layouts"]:
        tmap = [list(a) for a in lay["tensor_map"]] if lay["tuple_form"] else [a[0] for a in lay["tensor_map"]]
        j = {"dev_matrix": lay["dev_matrix"], "tensor_map": tmap, "tensor_shape": lay["tensor_shape"],
             "field": lay["field"], "opt_weight_shard_step": lay["opt_weight_shard_step"],
             "opt_weight_shard_size": lay["opt_weight_shard_size"]}
        if lay["param_split_shape"]:
            j["param_split_shape"] = lay["param_split_shape"]
        if lay["indices_offset"]:
            j["indices_offset"] = lay["indices_offset"]
        layouts[name] = j
    return {"current_stage": n["current_stage"],
            "parallel_strategy_item": {name: {"stage": stage, "parallel_strategy": strategy}
                                       for name, stage, strategy in n["nodes"]},
            "parallel_layout_item": layouts}


def neutral_from_json(j):
    nodes = [[name, v["stage"], v.get("parallel_strategy", [])] for name, v in j.get("parallel_strategy_item", {}).items()]
    layouts = []
    for name, v in j["parallel_layout_item"].items():
        tmap = v["tensor_map"]
        tuple_form = any(isinstance(a, list) for a in tmap)
        layouts.append([name, _layout(v["dev_matrix"], [a if isinstance(a, list) else [a] for a in tmap], tuple_form,
                                      v.get("tensor_shape", []), v.get("param_split_shape", []),
                                      v.get("indices_offset", []), v.get("field", 0), v.get("opt_weight_shard_step", 0),
                                      v.get("opt_weight_shard_size", 0))])
    return {"current_stage": j["current_stage"], "nodes": nodes, "layouts": layouts}


def _write_strategy(directory, case, n, mod, json_form=False, expect=True, extra_json=None):
    os.makedirs(directory, exist_ok=True)
    if json_form:
        j = json_from_neutral(n)
        j.update(extra_json or {})
        with open(os.path.join(directory, case + ".json"), "w", encoding="utf-8") as f:
            json.dump(j, f, indent=2, ensure_ascii=False)
    else:
        with open(os.path.join(directory, case + ".ckpt"), "wb") as f:
            f.write(pb_from_neutral(n, mod).SerializeToString())
    if expect:
        _dump_json(n, os.path.join(directory, case + ".expect.json"))


def gen_strategy(directory):
    mods = ms_proto.load()
    pb, packed = mods.strategy, mods.strategy_packed
    plain = {"current_stage": 1,
             "nodes": [["Default/MatMul-op0", 0, [[2, 1], [1, 4]]], ["Default/Add-op1", 0, [[8], []]]],
             "layouts": [["w", _layout([2, 4], [[1], [-1]])],
                         ["layer-1.bias", _layout([8], [[-1]])],
                         ["scalar_p", _layout([8], [])],
                         ["wide", _layout([4294967295], [[0]])]]}
    tuple_ = {"current_stage": 1, "nodes": [["MatMul-op2", 0, [[4, 2], [2, 2]]]],
              "layouts": [["t2", _layout([4, 2, 2], [[2, 1], [0]], True)],
                          ["t1", _layout([2, 2], [[1, 0]], True)],
                          ["t3", _layout([2, 2, 2], [[-1], [2, 0], [1]], True)]]}
    opt = {"current_stage": 1, "nodes": [["Gather-op3", 0, [[1, 1]]]],
           "layouts": [["m", _layout([4, 2], [[-1], [0]], step=2, size=4)],
                       ["n", _layout([8], [[-1], [-1]], step=1, size=-1)]]}
    split = {"current_stage": 1, "nodes": [["EmbeddingLookup-op4", 0, [[2, 1]]]],
             "layouts": [["emb", _layout([2], [[0], [-1]], split=[3, 5], offset=[0, 3], field=1)]]}
    _write_strategy(directory, "plain", plain, pb)
    _write_strategy(directory, "tuple", tuple_, pb)
    _write_strategy(directory, "optshard", opt, pb)
    _write_strategy(directory, "split", split, pb)
    both = {"current_stage": 1, "nodes": plain["nodes"] + tuple_["nodes"], "layouts": plain["layouts"] + tuple_["layouts"]}
    _write_strategy(directory, "packed", both, packed)
    _write_strategy(directory, "unpacked", both, pb)

    shaped = {"current_stage": 1, "nodes": [["MatMul-op0", 0, [[2, 1], [1, 4]]]],
              "layouts": [["w", _layout([2, 4], [[1], [-1]], shape=[64, 32])],
                          ["t", _layout([4, 2, 2], [[2, 1], [0]], True, shape=[8, 8])],
                          ["e", _layout([2], [[0], [-1]], shape=[8, 4], split=[3, 5], offset=[0, 3], step=1, size=2)]]}
    _write_strategy(directory, "shaped", shaped, None, json_form=True,
                    extra_json={"parallel_layout_value_item": {"w": {"ignored": True}}})

    # per-stage files for merging, in both formats
    stage0 = {"current_stage": 0, "nodes": [["MatMul-op0", 0, [[2, 1], [1, 4]]], ["Add-op1", 0, [[2]]]],
              "layouts": [["embedding", _layout([2, 2], [[1], [-1]], shape=[8, 4])],
                          ["layer-0.weight", _layout([2, 2], [[0], [1]], shape=[4, 4])]]}
    stage1 = {"current_stage": 1, "nodes": [["MatMul-op5", 1, [[4, 1], [1, 1]]]],
              "layouts": [["embedding", _layout([4], [[0], [-1]], shape=[8, 4])],
                          ["layer-1.weight", _layout([2, 2], [[1, 0], [-1]], True, shape=[4, 4])]]}
    stage1_again = {"current_stage": 1, "nodes": [["MatMul-op9", 1, [[1, 1], [1, 1]]]],
                    "layouts": [["ignored", _layout([4], [[-1]], shape=[4])]]}
    for fmt_json, sub in ((False, "stages_pb"), (True, "stages_json")):
        d = os.path.join(directory, sub)
        _write_strategy(d, "a_stage1", stage1, pb, json_form=fmt_json, expect=False)
        _write_strategy(d, "b_stage0", stage0, pb, json_form=fmt_json, expect=False)
        _write_strategy(d, "c_stage1_again", stage1_again, pb, json_form=fmt_json, expect=False)
    return 0


def _read_strategy_neutral(path, mods, mm=None, exact=False):
    if path.endswith(".json"):
        return neutral_from_json(_load_json(path))
    with open(path, "rb") as f:
        data = f.read()
    m = mods.strategy.ParallelStrategyMap()
    m.ParseFromString(data)
    if mm is not None:
        if not m.IsInitialized():
            mm.add("protobuf: required fields missing: %s" % m.FindInitializationErrors())
        if exact and m.SerializeToString() != data:
            mm.add("bytes differ from protobuf's own serialization of the parsed message")
    return neutral_from_pb(m)


def check_strategy(path, expect_path, exact=False):
    mods = ms_proto.load()
    mm = Mismatch("check-strategy " + path)
    want = _load_json(expect_path)
    try:
        got = _read_strategy_neutral(path, mods, mm, exact)
    except Exception as e:
        mm.add("cannot parse: %s" % e)
        return mm.report()
    mm.eq("current_stage", got["current_stage"], want["current_stage"])
    mm.eq("node names", [n[0] for n in got["nodes"]], [n[0] for n in want["nodes"]])
    for g, w in zip(got["nodes"], want["nodes"]):
        mm.eq("node %r" % g[0], g[1:], w[1:])
    mm.eq("layout names", [n[0] for n in got["layouts"]], [n[0] for n in want["layouts"]])
    for g, w in zip(got["layouts"], want["layouts"]):
        for key in sorted(set(g[1]) | set(w[1])):
            mm.eq("parameter %r %s" % (g[0], key), g[1].get(key), w[1].get(key))
    return mm.report()


def merge_strategy(src, out):
    """MindSpore's merge_pipeline_strategys, over the sorted non-hidden files of src."""
    mods = ms_proto.load()
    files = sorted(f for f in os.listdir(src) if not f.startswith(".") and os.path.isfile(os.path.join(src, f)))
    is_json = [f.endswith(".json") for f in files]
    if any(is_json) and not all(is_json):
        print("mixed formats")
        return 2
    stages = []
    if all(is_json):
        nodes, layouts = {}, {}
        for f in files:
            j = _load_json(os.path.join(src, f))
            items = j["parallel_strategy_item"]
            stage = next(iter(items.values()))["stage"]
            if stage in stages:
                continue
            for k, v in items.items():
                nodes.setdefault(k, v)
            for k, v in j["parallel_layout_item"].items():
                layouts["%d-%s" % (stage, k)] = v
            stages.append(stage)
        merged = neutral_from_json({"current_stage": 1, "parallel_strategy_item": nodes, "parallel_layout_item": layouts})
    else:
        dst = mods.strategy.ParallelStrategyMap()
        for f in files:
            m = mods.strategy.ParallelStrategyMap()
            with open(os.path.join(src, f), "rb") as fh:
                m.ParseFromString(fh.read())
            stage = m.parallel_strategy_item[0].parallel_strategys.stage
            if stage in stages:
                continue
            for item in m.parallel_layout_item:
                item.param_name = "%d-%s" % (stage, item.param_name)
            dst.parallel_strategy_item.extend(m.parallel_strategy_item)
            dst.parallel_layout_item.extend(m.parallel_layout_item)
            stages.append(stage)
        dst.current_stage = 1
        with open(out + ".pb", "wb") as fh:
            fh.write(dst.SerializeToString())
        merged = neutral_from_pb(dst)
    _dump_json(merged, out + ".expect.json")
    return 0


# ------------------------------------------------------------------------------------------------
# safetensors

ST_TO_MS = {"BOOL": "Bool", "U8": "UInt8", "I8": "Int8", "I16": "Int16", "U16": "UInt16", "F16": "Float16",
            "BF16": "BFloat16", "I32": "Int32", "U32": "UInt32", "F32": "Float32", "I64": "Int64", "U64": "UInt64",
            "F64": "Float64"}
MS_TO_ST = {v: k for k, v in ST_TO_MS.items()}


def gen_safetensors(directory):
    rng = np.random.default_rng(7)
    tensors = []  # (name, ms dtype, shape, bytes)
    for i, ms in enumerate(sorted(MS_TO_ST)):
        shape = [2, 3] if i % 2 else [5]
        tensors.append(("t.%s" % ms, ms, shape, _random_array(rng, ms, shape).tobytes()))
    tensors.append(("q4", "Int4", [3, 2], _random_array(rng, "Int4", [3, 2]).tobytes()))
    tensors.append(("scalar", "Float32", [], np.array(2.5, np.float32).tobytes()))
    tensors.append(("zero", "Float16", [0, 4], b""))
    tensors.append(("layer-1.wéight", "Float32", [2], np.array([1, 2], np.float32).tobytes()))
    metadata = {"format": "ms", "q4": "Int4"}
    header, data = {}, b""
    for name, ms, shape, content in sorted(tensors, reverse=True):  # data deliberately not in name order
        st = "I8" if ms == "Int4" else MS_TO_ST[ms]
        header[name] = {"dtype": st, "shape": shape, "data_offsets": [len(data), len(data) + len(content)]}
        data += content
    header["__metadata__"] = metadata
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(os.path.join(directory, "all.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    _dump_json({"metadata": metadata,
                "entries": [{"name": n, "dtype": ms, "shape": s, "content": c.hex()} for n, ms, s, c in sorted(tensors)]},
               os.path.join(directory, "all.expect.json"))
    return 0


def check_safetensors(path, expect_path, exact=False):
    mm = Mismatch("check-safetensors " + path)
    want = _load_json(expect_path)
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        mm.add("header length %d exceeds the file" % n)
        return mm.report()
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    if exact and n % 8:
        mm.add("header length %d is not a multiple of 8" % n)
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    mm.eq("metadata", metadata, want["metadata"])
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for b, e, k in spans:
        if b != at:
            mm.add("tensor %r starts at %d, expected %d (offsets must be contiguous)" % (k, b, at))
        at = e
    mm.eq("data section size", len(data), at)
    order = [k for _, _, k in spans]
    if exact:
        mm.eq("data order (sorted names)", order, sorted(order))
    got = []
    for name in sorted(header):
        v = header[name]
        ms = "Int4" if v["dtype"] == "I8" and metadata.get(name) == "Int4" else ST_TO_MS.get(v["dtype"], "?" + v["dtype"])
        b, e = v["data_offsets"]
        got.append({"name": name, "dtype": ms, "shape": v["shape"], "content": data[b:e].hex()})
    mm.eq("tensor names", [g["name"] for g in got], [w["name"] for w in want["entries"]])
    for g, w in zip(got, want["entries"]):
        for key in ("dtype", "shape", "content"):
            mm.eq("tensor %r %s" % (g["name"], key), g[key], w[key])
    return mm.report()


# ------------------------------------------------------------------------------------------------

def main(argv):
    args, opts = [], {"exact": False, "chunk": None}
    it = iter(argv[1:])
    for a in it:
        if a == "--exact":
            opts["exact"] = True
        elif a == "--chunk":
            opts["chunk"] = int(next(it))
        else:
            args.append(a)
    def pairs(check):
        return lambda a: max(check(a[i], a[i + 1]) for i in range(0, len(a), 2))

    commands = {  # name: (argument count, or "pairs" for one or more FILE EXPECT pairs; action)
        "gen-ckpt": (1, lambda a: gen_ckpt(a[0])),
        "check-ckpt": ("pairs", pairs(lambda f, e: check_ckpt(f, e, opts["chunk"], opts["exact"]))),
        "gen-strategy": (1, lambda a: gen_strategy(a[0])),
        "check-strategy": ("pairs", pairs(lambda f, e: check_strategy(f, e, opts["exact"]))),
        "merge-strategy": (2, lambda a: merge_strategy(a[0], a[1])),
        "gen-safetensors": (1, lambda a: gen_safetensors(a[0])),
        "check-safetensors": ("pairs", pairs(lambda f, e: check_safetensors(f, e, opts["exact"]))),
    }
    n = len(args) - 1
    if not args or args[0] not in commands or not (
            n == commands[args[0]][0] or (commands[args[0]][0] == "pairs" and n >= 2 and n % 2 == 0)):
        print(__doc__)
        return 2
    try:
        return commands[args[0]][1](args[1:])
    except (OSError, ValueError, KeyError, StopIteration) as e:
        print("%s: %s: %s" % (args[0], type(e).__name__, e))
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
