#!/usr/bin/python3
"""Hugging Face sharded safetensors checkpoints, written and read by code independent of reshard's
C++ (numpy and the standard library only), for the tests of reshard's HF input and output.

  hf_reference.py make DIR --seed S --max-shard-size SIZE [--names N]
  hf_reference.py check DIR|FILE
  hf_reference.py shards DIR
  hf_reference.py expect-shards DIR --max-shard-size SIZE --order name|file [--order-file LIST]
  hf_reference.py equal A B [--cast NAME_GLOB=DTYPE ...]

make    writes a deterministic random model (numpy default_rng(S)) into DIR (created if missing; it
        must not already hold model*.safetensors* files): N layers (default 2) of F32, F16, BF16
        matrices and vectors, an F32 embedding of 32,768 bytes first (alone in its shard when SIZE
        is below that), a BF16 norm, an F64 vector, an I64 `model.step` [4] and a 0-d F32
        `model.scale`; `model.layers.0.attn.q_proj.bias` starts with special Float32 values
        (BFloat16 ties, NaN, infinities, -0.0, subnormals, the largest finite value). Prints
        {"files": [...], "tensors": {name: [dtype, shape]}} (tensors in the written order).
check   reads and validates DIR (model.safetensors.index.json, else model.safetensors) or one
        .safetensors FILE; prints {name: [dtype, shape, sha256 of the bytes]} sorted by name.
shards  prints {"files": {file: [names in data order]}, "index": the parsed index or null,
        "index_canonical": the index's bytes are json.dumps(index, indent=2, sort_keys=True) + "\\n",
        "metadata": {file: __metadata__}, "header_lengths": {file: N}, "extra_files": [entries of
        DIR that are not part of the model]}.
expect-shards  checks that DIR's shards follow Hugging Face's rule for the maximum SIZE. name: the
        rule recomputed over the tensors sorted by name gives each tensor's file; --order-file
        LIST (a JSON array of all the names): the same over that order; file (the default): the
        rule over the files in order, where a file's own data order is free (a writer may sort
        it, as this one does) and so is the place of an oversized tensor: the files are named in
        sequence, an oversized tensor is alone, every other file holds at most SIZE bytes and is
        closed only by a tensor that does not fit (its bytes + the largest of the next such
        file's > SIZE), no oversized file follows the last other file. Also: an index iff K > 1.
equal   compares two checkpoints (directories or .safetensors files) tensor by tensor: names,
        dtypes, shapes, bytes. --cast GLOB=DTYPE (repeatable; the first matching rule applies;
        DTYPE F16 BF16 F32 F64 or float16 bfloat16 float32 float64): B's floating-point tensors
        whose names match are A's cast to DTYPE, rounded to nearest even (integer and bool tensors
        are always compared unchanged). NaNs of a Float16/32/64 result compare by NaN-ness and
        sign; BFloat16 from Float32/16 must have the bits (x >> 16) | 0x40.

The format. A .safetensors file is an 8-byte little-endian N, N bytes of JSON header {"__metadata__":
{"format": "pt"}, name: {"dtype", "shape", "data_offsets": [begin, end]}, ...} padded with spaces so
that 8 + N is a multiple of 8, then the data: offsets relative to the data's start, contiguous from
0 without gaps. This writer orders the data as the safetensors library does: larger dtypes first
(8-byte, 4-byte, 2-byte, 1-byte types), then by name. Sharding (Hugging Face's rule): walk the
tensors in state-dict order; a tensor larger than the maximum goes alone into a shard appended to
the list (the current shard continues after it); else if it does not fit in the current shard, the
current shard (if not empty) is closed and a new one started; at the end the current shard, if not
empty, is appended. One shard: model.safetensors, no index. K > 1 shards: model-00001-of-0000K
.safetensors ... and model.safetensors.index.json = json.dumps({"metadata": {"total_size": T},
"weight_map": {name: file}}, indent=2, sort_keys=True) + "\\n", T the sum of the tensors' byte sizes.
BFloat16 is handled as raw uint16 bit patterns (numpy has none).

Sizes: plain bytes, or with KB MB GB TB (powers of 10) or KiB MiB GiB TiB (powers of 2).

Exit status: 0 valid / equal / as expected, 1 invalid input or differences (each on stderr),
2 bad usage.
"""

import argparse
import fnmatch
import hashlib
import json
import math
import os
import re
import struct
import sys

import numpy as np

sys.dont_write_bytecode = True

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"

# safetensors dtype -> numpy dtype of its bytes (little-endian); BF16 as raw uint16 bits
NUMPY = {"BOOL": np.dtype(np.bool_), "U8": np.dtype("u1"), "I8": np.dtype("i1"), "I16": np.dtype("<i2"),
         "U16": np.dtype("<u2"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "I32": np.dtype("<i4"),
         "U32": np.dtype("<u4"), "F32": np.dtype("<f4"), "I64": np.dtype("<i8"), "U64": np.dtype("<u8"),
         "F64": np.dtype("<f8")}
ITEMSIZE = {k: v.itemsize for k, v in NUMPY.items()}
FLOATS = ("F16", "BF16", "F32", "F64")
DTYPE_ALIASES = {"float16": "F16", "bfloat16": "BF16", "float32": "F32", "float64": "F64"}


class HFError(Exception):
    """An invalid checkpoint: the message says what and where."""


# ------------------------------------------------------------------------------------------------
# sizes and the sharding rule

def parse_size(text):
    """Bytes of '5GB' (10^9), '64KiB' (2^10), '123' ..."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]i?B)?\s*", str(text))
    if not m:
        raise ValueError("not a size: %r" % (text,))
    n, unit = int(m.group(1)), m.group(2)
    if not unit:
        return n
    power = "KMGT".index(unit[0]) + 1
    return n * (1024 ** power if "i" in unit else 1000 ** power)


def nbytes(dtype, shape):
    return math.prod(shape) * ITEMSIZE[dtype]


def plan_shards(sizes, max_shard_size):
    """Hugging Face's rule: sizes is [(name, bytes)] in state-dict order; returns the shards as
    lists of names, in file order."""
    shards, current, current_size = [], [], 0
    for name, size in sizes:
        if size > max_shard_size:
            shards.append([name])
            continue
        if current_size + size > max_shard_size and current:
            shards.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current:
        shards.append(current)
    return shards


def shard_names(k):
    if k == 1:
        return [SINGLE]
    return ["model-%05d-of-%05d.safetensors" % (i + 1, k) for i in range(k)]


def index_bytes(weight_map, total_size):
    return (json.dumps({"metadata": {"total_size": total_size}, "weight_map": weight_map}, indent=2,
                       sort_keys=True) + "\n").encode("utf-8")


# ------------------------------------------------------------------------------------------------
# one .safetensors file

def data_order(tensors):
    """The safetensors library's order of the data: larger dtypes first, then by name."""
    return sorted(tensors, key=lambda t: (-ITEMSIZE[t[1]], t[0]))


def encode_file(tensors, metadata=None):
    """The bytes of a .safetensors file of tensors [(name, dtype, shape, bytes)]."""
    header = {"__metadata__": dict(metadata if metadata is not None else {"format": "pt"})}
    parts, at = [], 0
    for name, dtype, shape, content in data_order(tensors):
        if name == "__metadata__" or name in header:
            raise ValueError("bad or repeated tensor name %r" % name)
        if len(content) != nbytes(dtype, shape):
            raise ValueError("%r: %d bytes for %s %s" % (name, len(content), dtype, list(shape)))
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [at, at + len(content)]}
        parts.append(bytes(content))
        at += len(content)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(parts)


def _strict_json(raw, where):
    def no_duplicates(pairs):
        seen = {}
        for k, v in pairs:
            if k in seen:
                raise HFError("%s: the key %r appears twice" % (where, k))
            seen[k] = v
        return seen

    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        if isinstance(e, HFError):
            raise
        raise HFError("%s: not valid JSON: %s" % (where, e)) from None


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def decode_file(raw, where):
    """(metadata, [(name, dtype, shape, bytes)] in data order) of the bytes of a .safetensors file;
    HFError when they are not a valid one."""
    if len(raw) < 8:
        raise HFError("%s: %d bytes, shorter than the 8-byte header length" % (where, len(raw)))
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise HFError("%s: header length %d exceeds the file (%d bytes)" % (where, n, len(raw)))
    header = _strict_json(raw[8:8 + n], where + ": header")
    if not isinstance(header, dict):
        raise HFError("%s: the header is not a JSON object" % where)
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise HFError("%s: __metadata__ is not an object of strings" % where)
    entries = []  # sorted by offsets, then (empty tensors) by their place in the header
    for position, (name, v) in enumerate(header.items()):
        w = "%s: tensor %r" % (where, name)
        if not isinstance(v, dict) or set(v) != {"dtype", "shape", "data_offsets"}:
            raise HFError("%s: not an object of dtype, shape and data_offsets" % w)
        dtype, shape, offsets = v["dtype"], v["shape"], v["data_offsets"]
        if dtype not in NUMPY:
            raise HFError("%s: unknown dtype %r" % (w, dtype))
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise HFError("%s: bad shape %r" % (w, shape))
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise HFError("%s: bad data_offsets %r" % (w, offsets))
        if offsets[1] - offsets[0] != nbytes(dtype, shape):
            raise HFError("%s: data_offsets %r span %d bytes, %s %s needs %d" % (
                w, offsets, offsets[1] - offsets[0], dtype, shape, nbytes(dtype, shape)))
        entries.append((offsets[0], offsets[1], position, name, dtype, shape))
    entries.sort()
    at = 0
    for begin, end, _, name, _, _ in entries:
        if begin != at:
            raise HFError("%s: tensor %r starts at data offset %d, expected %d (offsets must be contiguous "
                          "from 0)" % (where, name, begin, at))
        at = end
    if at != len(data):
        raise HFError("%s: the tensors cover %d bytes of data, the file holds %d" % (where, at, len(data)))
    return metadata, [(name, dtype, shape, data[b:e]) for b, e, _, name, dtype, shape in entries]


def read_file(path):
    """(metadata, [(name, dtype, shape, bytes)] in data order) of a .safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    return decode_file(raw, path)


# ------------------------------------------------------------------------------------------------
# a sharded checkpoint directory

def write_model(directory, tensors, max_shard_size, metadata=None):
    """Writes [(name, dtype, shape, bytes)] (state-dict order) into directory by Hugging Face's
    rule; returns the file names written (the index last)."""
    os.makedirs(directory, exist_ok=True)
    stale = sorted(f for f in os.listdir(directory) if f.startswith("model") and ".safetensors" in f)
    if stale:
        raise HFError("%s already holds %s" % (directory, ", ".join(stale)))
    by_name = {}
    for t in tensors:
        if t[0] in by_name:
            raise ValueError("tensor %r given twice" % t[0])
        by_name[t[0]] = t
    shards = plan_shards([(t[0], len(t[3])) for t in tensors], max_shard_size)
    files = shard_names(len(shards)) if shards else [SINGLE]
    for f, names in zip(files, shards or [[]]):
        with open(os.path.join(directory, f), "wb") as out:
            out.write(encode_file([by_name[n] for n in names], metadata))
    if len(files) > 1:
        weight_map = {n: f for f, names in zip(files, shards) for n in names}
        with open(os.path.join(directory, INDEX), "wb") as out:
            out.write(index_bytes(weight_map, sum(len(t[3]) for t in tensors)))
        files = files + [INDEX]
    return files


def read_index(directory):
    """The parsed index of directory, validated in itself (not against the files)."""
    path = os.path.join(directory, INDEX)
    with open(path, "rb") as f:
        index = _strict_json(f.read(), path)
    if not isinstance(index, dict):
        raise HFError("%s: not a JSON object" % path)
    wm = index.get("weight_map")
    if not isinstance(wm, dict) or not wm:
        raise HFError("%s: no weight_map object naming the tensors" % path)
    for name, f in wm.items():
        if not isinstance(f, str) or not f or os.path.basename(f) != f or f in (".", ".."):
            raise HFError("%s: tensor %r maps to %r, not a file name in the directory" % (path, name, f))
    md = index.get("metadata")
    if not isinstance(md, dict) or not _is_int(md.get("total_size")):
        raise HFError("%s: no metadata.total_size" % path)
    return index


def model_files(directory):
    """(files in order, the parsed index or None) of the checkpoint in directory."""
    if os.path.isfile(os.path.join(directory, INDEX)):
        index = read_index(directory)
        return sorted(set(index["weight_map"].values())), index
    if os.path.isfile(os.path.join(directory, SINGLE)):
        return [SINGLE], None
    if not os.path.isdir(directory):
        raise HFError("%s: not a directory" % directory)
    raise HFError("%s holds neither %s nor %s" % (directory, INDEX, SINGLE))


def read_layout(directory):
    """(files {file: (metadata, [(name, dtype, shape, bytes)] in data order)}, index or None), every
    file checked against the index."""
    names, index = model_files(directory)
    files = {}
    for f in names:
        path = os.path.join(directory, f)
        if not os.path.isfile(path):
            users = sorted(n for n, g in index["weight_map"].items() if g == f)
            raise HFError("%s: the index maps %s to %s, which does not exist" % (
                directory, ", ".join(repr(u) for u in users[:3]) + (" ..." if len(users) > 3 else ""), f))
        files[f] = read_file(path)
    if index is not None:
        wm = index["weight_map"]
        seen = {}
        for f, (_, tensors) in files.items():
            for name, _, _, _ in tensors:
                if name in seen:
                    raise HFError("%s: tensor %r is in both %s and %s" % (directory, name, seen[name], f))
                seen[name] = f
        for name, f in seen.items():
            if name not in wm:
                raise HFError("%s: %s holds tensor %r, which the index does not list" % (directory, f, name))
            if wm[name] != f:
                raise HFError("%s: tensor %r is in %s, the index maps it to %s" % (directory, name, f, wm[name]))
        for name, f in wm.items():
            if name not in seen:
                raise HFError("%s: the index maps tensor %r to %s, which does not hold it" % (directory, name, f))
        total = sum(len(t[3]) for _, ts in files.values() for t in ts)
        if index["metadata"]["total_size"] != total:
            raise HFError("%s: the index says total_size %d, the tensors hold %d bytes" % (
                directory, index["metadata"]["total_size"], total))
    return files, index


def read_model(path):
    """{name: (dtype, shape, bytes)} of a checkpoint directory or one .safetensors file, in file
    order then data order."""
    if os.path.isfile(path):
        files = {os.path.basename(path): read_file(path)}
    else:
        files, _ = read_layout(path)
    out = {}
    for f, (_, tensors) in files.items():
        for name, dtype, shape, content in tensors:
            if name in out:
                raise HFError("%s: tensor %r appears twice" % (path, name))
            out[name] = (dtype, shape, content)
    return out


# ------------------------------------------------------------------------------------------------
# casts (round to nearest even)

def bf16_from_f32(x):
    """BFloat16 bits (uint16) of a float32 array: the top 16 bits rounded to nearest even; a NaN
    keeps its sign and top bits with the quiet bit set."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    nan = (b >> 16) | 0x0040
    return np.where((b & 0x7FFFFFFF) > 0x7F800000, nan, rounded).astype(np.uint16)


def f32_from_bf16(b):
    """float32 array of BFloat16 bits (exact)."""
    return (np.ascontiguousarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_from_f64(x):
    """BFloat16 bits of a float64 array, rounded once: through Float32 rounded to odd (16 spare
    bits at every exponent, so the final rounding to nearest even is exact); NaN -> sign | 0x7FC0."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        y = x.astype(np.float32)
        back = y.astype(np.float64)
    b32 = y.view(np.uint32).copy()
    inexact = (back != x) & ~np.isnan(x)
    b32 = np.where(inexact & (np.abs(back) > np.abs(x)), b32 - 1, b32)  # toward zero
    b32 = np.where(inexact, b32 | 1, b32).astype(np.uint32)
    out = bf16_from_f32(b32.view(np.float32))
    sign = np.where(np.signbit(x), 0x8000, 0).astype(np.uint16)
    return np.where(np.isnan(x), sign | 0x7FC0, out).astype(np.uint16)


def _as_f32(dtype, content):
    a = np.frombuffer(content, NUMPY[dtype])
    if dtype == "BF16":
        return f32_from_bf16(a)
    return a.astype(np.float32)


def cast_bytes(dtype, content, to):
    """content (dtype) cast to the floating-point dtype `to`, as bytes."""
    if dtype == to:
        return bytes(content)
    if dtype not in FLOATS or to not in FLOATS:
        raise ValueError("no cast from %s to %s" % (dtype, to))
    with np.errstate(all="ignore"):
        if dtype == "F64":
            x = np.frombuffer(content, NUMPY["F64"])
            out = bf16_from_f64(x) if to == "BF16" else x.astype(NUMPY[to])
        else:
            x = _as_f32(dtype, content)  # exact
            out = bf16_from_f32(x) if to == "BF16" else x.astype(NUMPY[to])
    return out.tobytes()


def bits(a):
    """The array's elements as unsigned integers of the same size."""
    return a.view("u%d" % a.itemsize)


def same_values(dtype, got, want, from_dtype=None):
    """got == want, except that the NaNs of a Float16/32/64 result (and of a BFloat16 from
    Float64) compare by NaN-ness and sign."""
    if got == want:
        return True
    if len(got) != len(want) or dtype not in FLOATS or (dtype == "BF16" and from_dtype != "F64"):
        return False
    a, b = np.frombuffer(got, NUMPY[dtype]), np.frombuffer(want, NUMPY[dtype])
    if dtype == "BF16":
        a, b = f32_from_bf16(a), f32_from_bf16(b)
    nans = np.isnan(a) & np.isnan(b) & (np.signbit(a) == np.signbit(b))
    return bool(np.all(nans | (bits(a) == bits(b))))


# ------------------------------------------------------------------------------------------------
# the random model

SPECIAL_F32 = np.array([0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x80000000, 0x7F800000,
                        0xFF800000, 0x7FC00000, 0xFF800001, 0x7F7FFFFF, 0x00008000, 0x00018000, 0x00000001,
                        0xBF7FFFFF, 0x477FF000], dtype=np.uint32)


def random_model(seed, layers=2):
    """[(name, dtype, shape, bytes)] in state-dict order."""
    rng = np.random.default_rng(seed)
    out = []

    def add(name, dtype, shape):
        if dtype == "BF16":
            a = bf16_from_f32(rng.standard_normal(shape).astype(np.float32))
        elif dtype == "I64":
            a = rng.integers(-2**40, 2**40, size=shape, dtype=np.int64)
        else:
            a = rng.standard_normal(shape).astype(NUMPY[dtype])
        a = np.ascontiguousarray(a, dtype=NUMPY[dtype])
        out.append([name, dtype, list(shape), a])

    add("model.embed_tokens.weight", "F32", [256, 32])
    for i in range(layers):
        p = "model.layers.%d." % i
        add(p + "attn.q_proj.weight", "F32", [64, 32])
        add(p + "attn.q_proj.bias", "F32", [64])
        add(p + "attn.k_proj.weight", "F16", [64, 32])
        add(p + "mlp.up.weight", "F32", [128, 32])
        add(p + "mlp.down.weight", "BF16", [32, 128])
        add(p + "input_layernorm.weight", "F16", [32])
    add("model.norm.weight", "BF16", [32])
    add("model.rope.inv_freq", "F64", [16])
    add("model.step", "I64", [4])
    add("model.scale", "F32", [])
    for t in out:
        if t[0] == "model.layers.0.attn.q_proj.bias":
            t[3].view(np.uint32)[:SPECIAL_F32.size] = SPECIAL_F32
    return [(n, d, s, a.tobytes()) for n, d, s, a in out]


# ------------------------------------------------------------------------------------------------
# commands

def cmd_make(a):
    tensors = random_model(a.seed, a.names)
    files = write_model(a.dir, tensors, parse_size(a.max_shard_size))
    print(json.dumps({"files": files, "tensors": {n: [d, s] for n, d, s, _ in tensors}}))
    return 0


def cmd_check(a):
    model = read_model(a.path)
    print(json.dumps({n: [d, s, hashlib.sha256(c).hexdigest()] for n, (d, s, c) in sorted(model.items())}))
    return 0


def cmd_shards(a):
    files, index = read_layout(a.dir)
    canonical = None
    if index is not None:
        with open(os.path.join(a.dir, INDEX), "rb") as f:
            canonical = f.read() == (json.dumps(index, indent=2, sort_keys=True) + "\n").encode("utf-8")
    header_lengths = {}
    for f in files:
        with open(os.path.join(a.dir, f), "rb") as fh:
            header_lengths[f] = struct.unpack("<Q", fh.read(8))[0]
    known = set(files) | ({INDEX} if index is not None else set())
    print(json.dumps({"files": {f: [t[0] for t in ts] for f, (_, ts) in files.items()}, "index": index,
                      "index_canonical": canonical, "metadata": {f: md for f, (md, _) in files.items()},
                      "header_lengths": header_lengths,
                      "extra_files": sorted(e for e in os.listdir(a.dir) if e not in known)}))
    return 0


def layout_problems(files, sizes, max_shard_size):
    """Why the shards `files` ([(file, [names])] in file order, sizes {name: bytes}) are not what
    Hugging Face's rule makes for any state-dict order that lists the shards' tensors shard by
    shard, with any order inside a shard and the oversized tensors anywhere: [] when they are."""
    out = []
    names = shard_names(len(files))
    if [f for f, _ in files] != names:
        out.append("files %s, expected %s" % ([f for f, _ in files], names))
    normal = []  # (file, total, largest) of the shards of tensors within the maximum
    for f, ts in files:
        big = [n for n in ts if sizes[n] > max_shard_size]
        if not ts:
            out.append("%s holds no tensor" % f)
        elif big and len(ts) > 1:
            out.append("tensor %r (%d bytes, above the maximum %d) shares %s with %d other tensor(s)"
                       % (big[0], sizes[big[0]], max_shard_size, f, len(ts) - 1))
        elif not big:
            total = sum(sizes[n] for n in ts)
            if total > max_shard_size:
                out.append("%s holds %d bytes, above the maximum %d" % (f, total, max_shard_size))
            normal.append((f, total, max(sizes[n] for n in ts)))
    for (f, total, _), (g, _, largest) in zip(normal, normal[1:]):
        if total + largest <= max_shard_size:
            out.append("%s (%d bytes) would have taken the first tensor of %s (none above %d bytes): a shard is "
                       "closed only when the next tensor does not fit" % (f, total, g, largest))
    if normal:
        last = [f for f, _ in files].index(normal[-1][0])
        for f, ts in files[last + 1:]:
            out.append("%s (tensor %r alone) follows the last shard of tensors within the maximum, %s, which "
                       "is closed only at the end" % (f, ts[0], normal[-1][0]))
    return out


def cmd_expect_shards(a):
    files, index = read_layout(a.dir)
    max_size = parse_size(a.max_shard_size)
    where = {t[0]: f for f, (_, ts) in files.items() for t in ts}
    size = {t[0]: len(t[3]) for _, (_, ts) in files.items() for t in ts}
    diffs = []
    if (index is not None) != (len(files) > 1):
        diffs.append("an index is %s with %d file(s)" % ("present" if index is not None else "absent", len(files)))
    if a.order == "file" and not a.order_file:
        diffs += layout_problems([(f, [t[0] for t in ts]) for f, (_, ts) in sorted(files.items())], size, max_size)
    else:
        if a.order_file:
            with open(a.order_file, "rb") as f:
                order = _strict_json(f.read(), a.order_file)
            if not isinstance(order, list) or sorted(order) != sorted(where):
                raise HFError("%s: not a JSON array of exactly the tensors of %s" % (a.order_file, a.dir))
        else:
            order = sorted(where)
        shards = plan_shards([(n, size[n]) for n in order], max_size)
        names = shard_names(len(shards))
        if sorted(files) != names:
            diffs.append("files %s, expected %s" % (sorted(files), names))
        for f, shard in zip(names, shards):
            for n in shard:
                if where[n] != f:
                    diffs.append("tensor %r (%d bytes) is in %s, expected in %s" % (n, size[n], where[n], f))
    for d in diffs:
        print(d, file=sys.stderr)
    return 1 if diffs else 0


def cmd_equal(a):
    rules = []
    for r in a.cast:
        glob, sep, dtype = r.rpartition("=")
        dtype = DTYPE_ALIASES.get(dtype, dtype)
        if not sep or not glob or dtype not in FLOATS:
            print("hf_reference.py equal: --cast %r is not GLOB=DTYPE (a floating-point dtype)" % r, file=sys.stderr)
            return 2
        rules.append((glob, dtype))
    ma, mb = read_model(a.a), read_model(a.b)
    diffs = []
    for n in sorted(set(ma) - set(mb)):
        diffs.append("tensor %r is in %s only" % (n, a.a))
    for n in sorted(set(mb) - set(ma)):
        diffs.append("tensor %r is in %s only" % (n, a.b))
    for n in sorted(set(ma) & set(mb)):
        (da, sa, ca), (db, sb, cb) = ma[n], mb[n]
        want_dtype, want = da, ca
        if da in FLOATS:
            rule = next((d for g, d in rules if fnmatch.fnmatchcase(n, g)), None)
            if rule is not None:
                want_dtype, want = rule, cast_bytes(da, ca, rule)
        if db != want_dtype:
            diffs.append("tensor %r: dtype %s, expected %s" % (n, db, want_dtype))
        elif sb != sa:
            diffs.append("tensor %r: shape %s, expected %s" % (n, sb, sa))
        elif not same_values(db, cb, want, da):
            x, y = bits(np.frombuffer(cb, NUMPY[db])), bits(np.frombuffer(want, NUMPY[db]))
            bad = np.flatnonzero(x != y)
            diffs.append("tensor %r: %d of %d elements differ, the first at %d: bits %#x, expected %#x" % (
                n, bad.size, x.size, bad[0], x[bad[0]], y[bad[0]]))
    for d in diffs:
        print(d, file=sys.stderr)
    return 1 if diffs else 0


def main(argv):
    p = argparse.ArgumentParser(prog="hf_reference.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("make")
    s.add_argument("dir")
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--max-shard-size", required=True)
    s.add_argument("--names", type=int, default=2, help="the number of layers (6 tensors each)")
    s.set_defaults(run=cmd_make)
    s = sub.add_parser("check")
    s.add_argument("path")
    s.set_defaults(run=cmd_check)
    s = sub.add_parser("shards")
    s.add_argument("dir")
    s.set_defaults(run=cmd_shards)
    s = sub.add_parser("expect-shards")
    s.add_argument("dir")
    s.add_argument("--max-shard-size", required=True)
    s.add_argument("--order", choices=("name", "file"), default="file")
    s.add_argument("--order-file")
    s.set_defaults(run=cmd_expect_shards)
    s = sub.add_parser("equal")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--cast", action="append", default=[])
    s.set_defaults(run=cmd_equal)
    a = p.parse_args(argv[1:])
    try:
        if getattr(a, "max_shard_size", None) is not None:
            parse_size(a.max_shard_size)
    except ValueError as e:
        print("hf_reference.py %s: %s" % (a.command, e), file=sys.stderr)
        return 2
    try:
        return a.run(a)
    except (HFError, OSError) as e:
        print("hf_reference.py %s: %s" % (a.command, e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
