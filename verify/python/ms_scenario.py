#!/usr/bin/python3
"""Whole checkpoint-transformation scenarios for reshard's cross-checks, made and checked by
code independent of reshard's C++.

A scenario starts from full numpy tensors. `gen` writes what a MindSpore job would have saved:
strategy files (protobuf via protoc-generated modules from ms_proto/, or JSON) for the source and
the target, and per-rank source checkpoints holding each rank's slice, cut here the MindSpore
way (tensor_map counted from the right of the device matrix, tuple entries with the leftmost
axis outermost, param_split_shape, optimizer sharding by position in the replica group, pipeline
stages). `check` reads the checkpoints reshard wrote with protobuf's own parser (or the
safetensors header) and compares every value with numpy slicing of the full tensors by the
target strategy, and every parameter that no strategy lists with the serialized Values of
source rank t % M, byte for byte.

  ms_scenario.py list                         the scenario names
  ms_scenario.py gen NAME DIR                 DIR/scenario.json, DIR/src/rank_<r>/..., strategies
  ms_scenario.py check DIR OUT                OUT: the directory (or file) reshard wrote

DIR/scenario.json says what to run: "src_dir", "src_strategy", "dst_strategy", "stage_dir" (per-stage
strategy files to merge first), "checkpoint" (a single full checkpoint, for split), "prefix",
"format", "merged" (one output file instead of rank directories).

Exit status: 0 all matched, 1 mismatch (each difference printed), 2 bad usage or unreadable input.
Run with /usr/bin/python3 (it has python3-protobuf and python3-numpy).
"""

import binascii
import json
import os
import struct
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ms_files  # noqa: E402  (strategy messages as MindSpore builds them, Mismatch)
import ms_proto  # noqa: E402

NUMPY = {"Float32": np.float32, "Float16": np.float16, "Float64": np.float64, "BFloat16": np.uint16,
         "Int8": np.int8, "UInt8": np.uint8, "Int16": np.int16, "Int32": np.int32, "Int64": np.int64,
         "UInt16": np.uint16, "UInt32": np.uint32, "UInt64": np.uint64, "Bool": np.bool_}
ST_NAME = {"Float32": "F32", "Float16": "F16", "Float64": "F64", "BFloat16": "BF16", "Int8": "I8", "UInt8": "U8",
           "Int16": "I16", "Int32": "I32", "Int64": "I64", "UInt16": "U16", "UInt32": "U32", "UInt64": "U64",
           "Bool": "BOOL"}


# ------------------------------------------------------------------------------------------------
# MindSpore's slicing, from docs/formats.md#1-layouts

def L(dev, tmap, opt=(0, 0), split=(), stage=0):
    """A layout: device matrix, tensor map (ints or lists, counted from the right), optimizer
    sharding (step, size), param_split_shape of dim 0, pipeline stage."""
    return {"dev": list(dev), "map": [list(e) if isinstance(e, (list, tuple)) else e for e in tmap],
            "opt": list(opt), "split": list(split), "stage": stage}


def _coords(dev, local):
    c = [0] * len(dev)
    for a in range(len(dev) - 1, -1, -1):
        c[a] = local % dev[a]
        local //= dev[a]
    return c


def _axes(entry):
    axes = entry if isinstance(entry, list) else [entry]
    return [] if axes == [-1] else axes


def rank_box(lay, shape, rank):
    """[(start, stop)] per dim of the slice global rank `rank` holds, or None if the rank is not
    one of the layout's (another pipeline stage)."""
    dev, n = lay["dev"], int(np.prod(lay["dev"]))
    local = rank - lay["stage"] * n
    if not 0 <= local < n:
        return None
    nd = len(dev)
    c = _coords(dev, local)
    used = set()
    box = []
    for i, entry in enumerate(lay["map"]):
        axes = _axes(entry)
        slices, idx = 1, 0
        for a in axes:  # leftmost listed axis outermost
            d = nd - 1 - a
            used.add(d)
            slices *= dev[d]
            idx = idx * dev[d] + c[d]
        if i == 0 and lay["split"]:
            start, length = sum(lay["split"][:idx]), lay["split"][idx]
        else:
            assert shape[i] % slices == 0, "shape %s not divisible" % (shape,)
            length = shape[i] // slices
            start = idx * length
        box.append([start, start + length])
    step, size = lay["opt"]
    if size not in (0, 1):
        group = [r for r in range(n) if all(_coords(dev, r)[d] == c[d] for d in used)]  # ascending
        parts = len(group) if size == -1 else size
        pos = group.index(local) % parts
        start, stop = box[0]
        sub = (stop - start) // parts
        box[0] = [start + pos * sub, start + (pos + 1) * sub]
    return box


def cut(full, box):
    return full[tuple(slice(a, b) for a, b in box)] if box else full


def ranks_of(lay):
    n = int(np.prod(lay["dev"]))
    return range(lay["stage"] * n, (lay["stage"] + 1) * n)


# ------------------------------------------------------------------------------------------------
# scenarios

class Param:
    def __init__(self, name, dtype, shape, src, dst, pieces=None, src_stages=None):
        self.name, self.dtype, self.shape = name, dtype, list(shape)
        self.src, self.dst = src, dst     # layouts (None: not in that strategy)
        self.pieces = pieces              # bytes per Value in the source files (None: one Value)
        self.src_stages = src_stages      # pipeline: {stage: layout}; data from the lowest


def _full(rng, dtype, shape):
    t = NUMPY[dtype]
    if t is np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype == "BFloat16":
        return rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
    if np.issubdtype(t, np.floating):
        return rng.standard_normal(size=shape).astype(t)
    info = np.iinfo(t)
    return rng.integers(info.min, info.max, size=shape, dtype=t, endpoint=True)


def scenario(name):
    """(params, M, N, options) of scenario `name`."""
    tr = L([2, 1, 2, 2], [2, 1])          # the tutorial's training layout of a [in, out] weight
    if name in ("retrain_8to4", "merge_8", "retrain_safetensors_error"):
        dst = (lambda l: None) if name == "merge_8" else (lambda l: l)
        params = [
            Param("layer1.weight", "Float32", [16, 8], tr, dst(L([2, 2, 1], [1, 0], opt=(2, 2)))),
            Param("layer1.bias", "Float16", [8], L([2, 1, 2, 2], [0]), dst(L([2, 2, 1], [-1], opt=(1, -1)))),
            Param("moments.layer1.weight", "Float32", [16, 8], tr, dst(L([2, 2, 1], [1, 0], opt=(2, 2))), pieces=20),
            Param("embedding", "BFloat16", [12, 4], L([2, 1, 2, 2], [[3, 1], 0]), dst(L([2, 2, 1], [[2, 1], -1]))),
            Param("layer-2.mask", "Bool", [4, 6], L([2, 1, 2, 2], [-1, -1], opt=(1, 4)), dst(L([2, 2, 1], [0, -1]))),
            Param("scale", "Float32", [], L([2, 1, 2, 2], []), dst(L([2, 2, 1], []))),
            Param("step_count", "Int64", [3], None, dst(L([2, 2, 1], [-1]))),
        ]
        return params, 8, (1 if name == "merge_8" else 4), {"absent": "all", "crc": True, "merged": name == "merge_8"}
    if name in ("infer_8to4", "infer_8to4_safetensors"):
        params = [
            Param("layer1.weight", "Float32", [16, 8], tr, L([4], [0, -1])),
            Param("layer1.bias", "Float16", [8], L([2, 1, 2, 2], [0]), L([4], [0])),
            Param("layer2.weight", "Float32", [8, 12], L([2, 4], [1, 0]), L([4], [-1, 0])),
            Param("pos", "Int32", [4, 2, 8], L([2, 4], [-1, 1, -1]), L([4], [-1, -1, 0])),
        ]
        fmt = "safetensors" if name.endswith("safetensors") else "ckpt"
        return params, 8, 4, {"absent": "tensors", "dst_json": True, "format": fmt}
    if name == "pipeline_to4":
        s0, s1 = 0, 1
        params = [
            # shared by both stages: the data come from stage 0's layout
            Param("embedding", "Float32", [8, 4], None, L([4], [-1, 0]),
                  src_stages={s0: L([2, 2], [1, -1], stage=s0), s1: L([4], [0, -1], stage=s1)}),
            Param("layer0.weight", "Float32", [4, 4], None, L([4], [0, -1]), src_stages={s0: L([2, 2], [0, 1], stage=s0)}),
            Param("layer1.weight", "Float16", [8, 4], None, L([4], [-1, -1], opt=(1, 4)),
                  src_stages={s1: L([2, 2], [[1, 0], -1], stage=s1)}),
        ]
        return params, 8, 4, {"absent": "tensors", "pipeline": True}
    if name == "uneven_8to3":
        d = L([2, 4], [1, 0])
        params = [
            Param("w", "Float32", [12, 8], d, L([3], [0, -1])),
            Param("v", "Float32", [16, 4], L([2, 4], [1, -1]), L([3], [0, -1], split=[6, 5, 5])),
            Param("u", "Int16", [3, 8], L([2, 4], [-1, 0]), L([3], [0, -1])),
            Param("m", "Float32", [16, 2], L([2, 4], [-1, -1], opt=(1, 8)), L([3], [-1, -1])),
            Param("p", "Float64", [10, 3], L([2, 4], [1, -1], split=[7, 3]), L([3], [-1, 0])),
        ]
        return params, 8, 3, {"absent": "tensors"}
    if name == "six_to_4":
        params = [
            Param("a", "Float32", [12, 6], L([3, 2], [1, 0]), L([2, 2], [1, 0])),
            Param("b", "Float32", [6], L([3, 2], [0]), L([2, 2], [-1])),
            Param("c", "Int8", [12, 4], L([3, 2], [-1, -1], opt=(1, 3)), L([2, 2], [0, -1], opt=(2, 2))),
            Param("d", "UInt8", [6, 4], L([3, 2], [[1, 0], -1]), L([2, 2], [-1, [1, 0]])),
        ]
        return params, 6, 4, {"absent": "tensors", "src_json": True, "src_format": "safetensors"}
    if name == "to_pipeline":
        # 4 ranks -> a 2-stage pipeline of 2 ranks a stage: a target rank gets its stage's
        # parameters only; "embedding" is in both stages, each with its own layout
        params = [
            Param("embedding", "Float32", [8, 4], L([4], [0, -1]), [L([2], [0, -1], stage=0), L([2], [-1, 0], stage=1)]),
            Param("layer0.weight", "Float16", [4, 6], L([2, 2], [1, 0]), [L([2], [-1, -1], opt=(1, 2), stage=0)]),
            Param("layer1.weight", "Int32", [6, 4], L([2, 2], [-1, 0]), [L([2], [0, -1], stage=1)]),
            Param("head", "Float32", [4], L([4], [0]), None),  # in no target strategy: whole, everywhere
        ]
        return params, 4, 4, {"absent": "tensors"}
    if name == "split_4":
        params = [
            Param("layer1.weight", "Float32", [16, 8], None, L([2, 2, 1], [1, 0], opt=(2, 2))),
            Param("layer1.bias", "Float16", [8], None, L([2, 2, 1], [0])),
            Param("embedding", "Int32", [12, 4], None, L([2, 2, 1], [[2, 1], -1])),
            Param("rest", "Float32", [5], None, None),
        ]
        return params, 1, 4, {"absent": "all", "single": True}
    raise KeyError("no scenario %r" % name)


NAMES = ["retrain_8to4", "infer_8to4", "infer_8to4_safetensors", "pipeline_to4", "to_pipeline", "uneven_8to3",
         "six_to_4", "merge_8", "split_4", "retrain_safetensors_error"]


# ------------------------------------------------------------------------------------------------
# writing

def _stored(lay, shape, json_shape):
    tmap = lay["map"]
    tuple_form = any(isinstance(e, list) and len(e) > 1 for e in tmap)
    offsets = [sum(lay["split"][:k]) for k in range(len(lay["split"]))]  # MindSpore writes these beside
    return ms_files._layout(lay["dev"], [e if isinstance(e, list) else [e] for e in tmap], tuple_form,
                            shape if json_shape else (), lay["split"], offsets, 0, lay["opt"][0], lay["opt"][1])


def _write_strategy(path, layouts, mods, json_form, stage=0):
    n = {"current_stage": 1, "nodes": [["Default/network/MatMul-op%d" % stage, stage, [[2, 1], [1, 2]]]],
         "layouts": [[name, _stored(lay, shape, json_form)] for name, lay, shape in layouts]}
    if json_form:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(ms_files.json_from_neutral(n), f, indent=1)
    else:
        with open(path, "wb") as f:
            f.write(ms_files.pb_from_neutral(n, mods.strategy).SerializeToString())


def _value(mods, name, ttype, dims, content):
    return ms_files._value_bytes(mods.checkpoint, name, ttype, dims, content)


def _absent(mods, rank, kind):
    """The parameters no strategy lists, different on every source rank so that the check sees
    which rank a target copied them from: [(name, serialized Checkpoint bytes, (dtype, dims, content))]."""
    out = []
    lr = np.array(0.01 * (rank + 1), np.float32).tobytes()
    out.append(("learning_rate", _value(mods, "learning_rate", "Float32", [], lr), ("Float32", [], lr)))
    gs = np.array([1000 + rank], np.int32).tobytes()
    out.append(("global_step", _value(mods, "global_step", "Int32", [1], gs), ("Int32", [1], gs)))
    if kind == "all":
        text = np.array("adam rank %d" % rank).tobytes()
        out.append(("optimizer_name", _value(mods, "optimizer_name", "str", [0], text), None))
        cp = mods.checkpoint.Checkpoint()
        v = cp.value.add()
        v.tag = "emb_table"
        for ttype, arr in (("Int64", np.array([7, 9, rank], np.int64)), ("Float32", np.arange(6, dtype=np.float32)),
                           ("Int32", np.array([0, 1, 0], np.int32))):
            t = v.maptensor.tensor.add()
            t.dims.extend(arr.shape)
            t.tensor_type = ttype
            t.tensor_content = arr.tobytes()
        out.append(("emb_table", cp.SerializeToString(), None))
    return out


def _write_ckpt(path, parts, crc):
    data = b"".join(parts)
    if crc:
        data += b"crc_num" + binascii.crc32(data).to_bytes(10, "big")
    with open(path, "wb") as f:
        f.write(data)


def _write_safetensors(path, tensors):
    header, data = {}, b""
    for name, ttype, shape, content in sorted(tensors):
        header[name] = {"dtype": ST_NAME[ttype], "shape": shape, "data_offsets": [len(data), len(data) + len(content)]}
        data += content
    header["__metadata__"] = {"format": "ms"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def gen(name, d):
    mods = ms_proto.load()
    params, M, N, opt = scenario(name)
    rng = np.random.default_rng(sum(map(ord, name)))
    os.makedirs(os.path.join(d, "full"), exist_ok=True)
    fulls = {}
    for i, p in enumerate(params):
        fulls[p.name] = _full(rng, p.dtype, p.shape)
        np.save(os.path.join(d, "full", "%d.npy" % i), fulls[p.name])
    meta = {"name": name, "M": M, "N": N, "prefix": "checkpoint_", "format": opt.get("format", "ckpt"),
            "merged": opt.get("merged", False), "absent_kind": opt["absent"],
            "params": [{"name": p.name, "dtype": p.dtype, "shape": p.shape, "dst": p.dst} for p in params],
            "src_dir": None, "src_strategy": None, "dst_strategy": None, "stage_dir": None, "checkpoint": None}
    src_json = opt.get("src_json", False)
    src_fmt = opt.get("src_format", "ckpt")

    # strategies
    if opt.get("pipeline"):
        stage_dir = os.path.join(d, "stages")
        os.makedirs(stage_dir, exist_ok=True)
        stages = sorted({s for p in params for s in p.src_stages})
        for s in stages:
            _write_strategy(os.path.join(stage_dir, "stage%d_strategy.ckpt" % s),
                            [(p.name, p.src_stages[s], p.shape) for p in params if s in p.src_stages], mods, False, s)
        meta["stage_dir"] = "stages"
        meta["src_strategy"] = "merged_strategy.ckpt"  # written by `reshard merge-strategies`
    elif any(p.src for p in params):
        meta["src_strategy"] = "src_strategy" + (".json" if src_json else ".ckpt")
        _write_strategy(os.path.join(d, meta["src_strategy"]), [(p.name, p.src, p.shape) for p in params if p.src],
                        mods, src_json)
    if any(p.dst for p in params):
        meta["dst_strategy"] = "dst_strategy" + (".json" if opt.get("dst_json") else ".ckpt")
        if any(isinstance(p.dst, list) for p in params):  # a pipeline: as merge_pipeline_strategys writes it
            layouts = [("%d-%s" % (l["stage"], p.name), l, p.shape) for p in params if p.dst for l in p.dst]
        else:
            layouts = [(p.name, p.dst, p.shape) for p in params if p.dst]
        _write_strategy(os.path.join(d, meta["dst_strategy"]), layouts, mods, opt.get("dst_json", False))

    # source checkpoints: what each rank holds
    def rank_content(r):
        parts, tensors = [], []
        for p in params:
            lay = None
            if p.src_stages:
                lay = next((l for s, l in sorted(p.src_stages.items()) if r in ranks_of(l)), None)
                if lay is None:
                    continue
            elif p.src:
                lay = p.src
            box = rank_box(lay, p.shape, r) if lay else [[0, n] for n in p.shape]
            arr = np.array(cut(fulls[p.name], box), order="C")
            content = arr.tobytes()
            dims = list(arr.shape)
            tensors.append((p.name, p.dtype, dims, content))
            chunk = p.pieces or max(len(content), 1)
            pieces = [content[k:k + chunk] for k in range(0, len(content), chunk)] or [b""]
            parts += [_value(mods, p.name, p.dtype, dims, piece) for piece in pieces]
        for aname, blob, tensor in _absent(mods, r, opt["absent"]):
            parts.append(blob)
            if tensor:
                tensors.append((aname, tensor[0], tensor[1], tensor[2]))
        return parts, tensors

    if opt.get("single"):
        parts, _ = rank_content(0)
        _write_ckpt(os.path.join(d, "full.ckpt"), parts, False)
        meta["checkpoint"] = "full.ckpt"
    else:
        meta["src_dir"] = "src"
        for r in range(M):
            rd = os.path.join(d, "src", "rank_%d" % r)
            os.makedirs(rd, exist_ok=True)
            parts, tensors = rank_content(r)
            if src_fmt == "safetensors":
                _write_safetensors(os.path.join(rd, "net.safetensors"), tensors)
            else:
                # an older file that must not be read: the last name in order is used
                _write_ckpt(os.path.join(rd, "a_old.ckpt"), parts[:1], False)
                _write_ckpt(os.path.join(rd, "net.ckpt"), parts, opt.get("crc", False))
    ms_files._dump_json(meta, os.path.join(d, "scenario.json"))
    return 0


# ------------------------------------------------------------------------------------------------
# checking

def _read_ckpt(path, mods, mm):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) >= 17 and data[-17:-10] == b"crc_num":
        if int.from_bytes(data[-10:], "big") != binascii.crc32(data[:-17]):
            mm.add("%s: crc_num trailer does not match" % path)
        data = data[:-17]
    cp = mods.checkpoint.Checkpoint()
    cp.ParseFromString(data)
    if not cp.IsInitialized():
        mm.add("%s: required fields missing: %s" % (path, cp.FindInitializationErrors()))
    groups = []
    for v in cp.value:
        if groups and groups[-1][0] == v.tag:
            groups[-1][1].append(v)
        else:
            groups.append((v.tag, [v]))
    return groups


def _read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def _source_file(d, meta, r):
    if meta["checkpoint"]:
        return os.path.join(d, meta["checkpoint"])
    rd = os.path.join(d, meta["src_dir"], "rank_%d" % r)
    return os.path.join(rd, sorted(f for f in os.listdir(rd) if f.endswith((".ckpt", ".safetensors")))[-1])


def check(d, out):
    mods = ms_proto.load()
    meta = ms_files._load_json(os.path.join(d, "scenario.json"))
    mm = ms_files.Mismatch("scenario %s: %s" % (meta["name"], out))
    fulls = {p["name"]: np.load(os.path.join(d, "full", "%d.npy" % i)) for i, p in enumerate(meta["params"])}
    M, N, fmt = meta["M"], meta["N"], meta["format"]
    ext = ".safetensors" if fmt == "safetensors" else ".ckpt"

    if meta["merged"]:
        files = {0: out}
    else:
        files = {}
        got_dirs = sorted(os.listdir(out))
        mm.eq("rank directories", got_dirs, sorted("rank_%d" % t for t in range(N)))
        for t in range(N):
            want = "%s%d%s" % (meta["prefix"], t, ext)
            rd = os.path.join(out, "rank_%d" % t)
            if os.path.isdir(rd):
                mm.eq("files of rank_%d" % t, sorted(os.listdir(rd)), [want])
            files[t] = os.path.join(rd, want)

    for t, path in files.items():
        if not os.path.isfile(path):
            mm.add("%s is missing" % path)
            continue
        where = os.path.relpath(path, os.path.dirname(out))
        src_path = _source_file(d, meta, t % M)
        # expected: the sliced parameters for t, then whatever no strategy lists, from rank t % M
        expect = {}
        for p in meta["params"]:
            lay = p["dst"]
            full = fulls[p["name"]]
            if lay is None:
                expect[p["name"]] = ("slice", p["dtype"], full)
                continue
            if isinstance(lay, list):  # pipeline: the layout of t's stage, if it has one
                lay = next((l for l in lay if t in ranks_of(l)), None)
                if lay is None:
                    continue
            box = rank_box(lay, p["shape"], t)
            if box is not None:
                expect[p["name"]] = ("slice", p["dtype"], np.array(cut(full, box), order="C"))
        if src_path.endswith(".safetensors"):
            for name, (st, shape, content) in _read_safetensors(src_path).items():
                if name not in expect and name not in fulls:
                    expect[name] = ("content", st, shape, content)
        else:
            for name, values in _read_ckpt(src_path, mods, mm):
                if name not in expect and name not in fulls:
                    expect[name] = ("values", [v.SerializeToString() for v in values], values)

        if fmt == "safetensors":
            got = _read_safetensors(path)
            mm.eq("%s: names" % where, sorted(got), sorted(expect))
            for name, e in expect.items():
                if name not in got:
                    continue
                st, shape, content = got[name]
                if e[0] == "slice":
                    arr = e[2]
                    mm.eq("%s: %r dtype" % (where, name), st, ST_NAME[e[1]])
                    mm.eq("%s: %r shape" % (where, name), shape, list(arr.shape))
                    if content != arr.tobytes():
                        mm.add("%s: %r values differ from the full tensor sliced by the target strategy" % (where, name))
                elif e[0] == "content":
                    mm.eq("%s: %r copied from source rank %d" % (where, name, t % M), (st, shape, content), e[1:])
                else:
                    v = e[2][0]
                    mm.eq("%s: %r dtype" % (where, name), st, ST_NAME.get(v.tensor.tensor_type))
                    dims = list(v.tensor.dims)
                    mm.eq("%s: %r shape" % (where, name), shape, [] if dims == [0] else dims)
                    if content != b"".join(x.tensor.tensor_content for x in e[2]):
                        mm.add("%s: %r differs from source rank %d" % (where, name, t % M))
            continue

        groups = dict(_read_ckpt(path, mods, mm))
        mm.eq("%s: names" % where, sorted(groups), sorted(expect))
        for name, e in expect.items():
            if name not in groups:
                continue
            values = groups[name]
            if e[0] == "slice":
                arr = e[2]
                for i, v in enumerate(values):
                    mm.eq("%s: %r piece %d oneof" % (where, name, i), v.WhichOneof("value"), "tensor")
                    mm.eq("%s: %r piece %d tensor_type" % (where, name, i), v.tensor.tensor_type, e[1])
                    dims = list(v.tensor.dims)
                    if arr.ndim == 0:
                        if dims not in ([], [0]):
                            mm.add("%s: %r dims %s for a scalar" % (where, name, dims))
                    else:
                        mm.eq("%s: %r piece %d dims" % (where, name, i), dims, list(arr.shape))
                content = b"".join(v.tensor.tensor_content for v in values)
                if content != arr.tobytes():
                    mm.add("%s: %r values differ from the full tensor sliced by the target strategy (%d vs %d bytes)"
                           % (where, name, len(content), len(arr.tobytes())))
            elif e[0] == "values":
                if [v.SerializeToString() for v in values] != e[1]:
                    mm.add("%s: %r is not a byte-exact copy of source rank %d's" % (where, name, t % M))
            else:
                st, shape, content = e[1:]
                v = values[0]
                mm.eq("%s: %r copied from source rank %d" % (where, name, t % M),
                      (ST_NAME.get(v.tensor.tensor_type), list(v.tensor.dims), b"".join(x.tensor.tensor_content for x in values)),
                      (st, shape, content))
    return mm.report()


def main(argv):
    try:
        if len(argv) == 2 and argv[1] == "list":
            print("\n".join(NAMES))
            return 0
        if len(argv) == 4 and argv[1] == "gen":
            return gen(argv[2], argv[3])
        if len(argv) == 4 and argv[1] == "check":
            return check(argv[2], argv[3])
    except (OSError, ValueError, KeyError) as e:
        print("%s: %s: %s" % (argv[1], type(e).__name__, e))
        return 2
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
