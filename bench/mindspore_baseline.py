#!/usr/bin/python3
"""MindSpore's checkpoint transform, re-implemented in Python with numpy and protobuf: the baseline
that bench/transform_e2e.py runs beside `reshard transform`.

  mindspore_baseline.py SRC_DIR DST_DIR PREFIX SRC_STRATEGY DST_STRATEGY [--crc]

It follows MindSpore's transform_checkpoints (mindspore/parallel/checkpoint_transform.py and
_parallel_serialization.py) step by step:

1. Rank lists. For every target rank, the source ranks it needs: for each parameter, the source
   slices that are concatenated ("AllConcat") along each dim before the target slice is cut out.
   Target ranks with the same rank list form a group.
2. For each group, every needed source checkpoint is loaded fully (protobuf parse of the whole
   file, tensor contents as numpy arrays).
3. For each target rank of the group, the loaded dict is deep-copied (MindSpore does
   `copy.deepcopy(param_total_dict)`), and each parameter is transformed: the needed source
   slices are concatenated along every gathered dim into one larger array (`np.block`), and the
   target slice is cut out of it (MindSpore's StridedSlice).
4. The target checkpoint is written with protobuf, one Checkpoint message per Value, tensors over
   512 MiB in 512 MiB Values, optionally with the `crc_num` trailer, to a temporary file that is
   fsynced and renamed (MindSpore saves to a temporary and renames).

The gather rule is MindSpore's redistribution for divisible layouts: along a dim where the target
slice is a union of whole source slices those slices are concatenated; where it lies inside one
source slice that slice is cut; otherwise (device counts where neither divides the other, e.g. 8
ranks to 3, which MindSpore itself refuses) the whole dim is concatenated first, i.e. the transform
goes through the full tensor. Where several source ranks hold a slice, the one in the target
rank's own group of the source device arrangement is read (the target rank itself if it holds it).

Two things favour this baseline over MindSpore: tensor contents become numpy arrays without a
copy (`np.frombuffer`; MindSpore builds Tensor and Parameter objects, then `asnumpy()`), and the
parse uses protobuf's C++ implementation. Pipeline stages, param_split_shape and parameters that
no strategy lists are handled only as far as the benchmark needs (none of them).

Run with /usr/bin/python3 (python3-numpy, python3-protobuf). Exit status 0 on success, 2 on error.
"""

import copy
import glob
import math
import os
import sys
import zlib

import numpy as np

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "verify", "python"))
import ms_files  # noqa: E402  (strategy messages <-> neutral dicts)
import ms_proto  # noqa: E402  (protobuf classes compiled from verify/python/ms_proto/*.proto)
import ms_scenario  # noqa: E402  (MindSpore's slicing: rank_box)

CHUNK = 536870912  # MindSpore's Value size for large tensors
NUMPY = dict(ms_scenario.NUMPY)


# ------------------------------------------------------------------------------------------------
# layouts

def read_strategy(path):
    """{name: layout} (ms_scenario.L dicts) of a protobuf strategy file, in file order."""
    mods = ms_proto.load()
    m = mods.strategy.ParallelStrategyMap()
    with open(path, "rb") as f:
        m.ParseFromString(f.read())
    out = {}
    for name, lay in ms_files.neutral_from_pb(m)["layouts"]:
        tmap = [a[0] if len(a) == 1 else list(a) for a in lay["tensor_map"]]
        out[name] = ms_scenario.L(lay["dev_matrix"], tmap, opt=(lay["opt_weight_shard_step"],
                                                                 lay["opt_weight_shard_size"]),
                                  split=lay["param_split_shape"])
    return out


def parts(lay):
    """Number of distinct slices along each dim (optimizer sharding included in dim 0)."""
    dev, nd = lay["dev"], len(lay["dev"])
    out, used = [], set()
    for entry in lay["map"]:
        p = 1
        for a in ms_scenario._axes(entry):
            p *= dev[nd - 1 - a]
            used.add(nd - 1 - a)
        out.append(p)
    step, size = lay["opt"]
    if out and size not in (0, 1):
        group = math.prod(dev) // math.prod(dev[d] for d in used) if used else math.prod(dev)
        out[0] *= group if size == -1 else size
    return out


def num_ranks(lay):
    return math.prod(lay["dev"])


def gather_plan(src, dst, shape, t):
    """For target rank t: (gathered box G, target box B, [(cell box, owner rank)]) of one
    parameter with the full shape `shape`; boxes are [[start, stop]] per dim."""
    cells = {}
    for r in range(num_ranks(src)):
        cells.setdefault(tuple(map(tuple, ms_scenario.rank_box(src, shape, r))), []).append(r)
    B = ms_scenario.rank_box(dst, shape, t)
    G = []
    for d, (a, b) in enumerate(B):
        bounds = sorted({c[d][0] for c in cells} | {c[d][1] for c in cells})
        inside = [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if lo <= a and b <= hi]
        if a in bounds and b in bounds:
            G.append([a, b])  # whole source slices: concatenate them
        elif inside:
            G.append(list(inside[0]))  # inside one source slice: cut it
        else:
            G.append([0, shape[d]])  # not aligned: gather the whole dim
    chosen = []
    for c, owners in sorted(cells.items()):
        if all(c[d][0] >= G[d][0] and c[d][1] <= G[d][1] for d in range(len(G))):
            chosen.append((c, owners))
    # The replica MindSpore reads: the one in target rank t's own group of the source device
    # arrangement (t itself when it holds the slice), i.e. the owner whose device coordinates
    # are closest to those of rank t % M; then the lowest.
    me = ms_scenario._coords(src["dev"], t % num_ranks(src))

    def distance(r):
        return sum(a != b for a, b in zip(ms_scenario._coords(src["dev"], r), me))

    return G, B, [(c, min(owners, key=lambda r: (distance(r), r))) for c, owners in chosen]


def virtual_shape(src, dst):
    """A shape on which both layouts divide evenly: rank lists depend on the layouts only."""
    return [a * b for a, b in zip(parts(src), parts(dst))]


def rank_lists(src_layouts, dst_layouts, N):
    """{target rank: sorted tuple of source ranks it needs} (MindSpore's rank_list_for_transform)."""
    out = {}
    for t in range(N):
        need = set()
        for name, dst in dst_layouts.items():
            src = src_layouts.get(name)
            if src is None:
                continue
            _, _, cells = gather_plan(src, dst, virtual_shape(src, dst), t)
            need.update(r for _, r in cells)
        out[t] = tuple(sorted(need))
    return out


# ------------------------------------------------------------------------------------------------
# files

def last_ckpt(rank_dir):
    files = sorted(glob.glob(os.path.join(rank_dir, "*.ckpt")))
    if not files:
        raise ValueError("%s: no *.ckpt file" % rank_dir)
    return files[-1]


def load_checkpoint(path):
    """{name: (tensor_type, ndarray)} in file order: the whole file parsed at once."""
    mods = ms_proto.load()
    with open(path, "rb") as f:
        data = f.read()
    if len(data) >= 17 and data[-17:-10] == b"crc_num":
        data = data[:-17]
    cp = mods.checkpoint.Checkpoint()
    cp.ParseFromString(data)
    del data
    out, pieces, last = {}, [], None

    def flush():
        if last is not None:
            ttype, dims = last[1], last[2]
            content = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            out[last[0]] = (ttype, np.frombuffer(content, dtype=NUMPY[ttype]).reshape(dims))

    for v in cp.value:
        if last is not None and v.tag == last[0]:
            pieces.append(v.tensor.tensor_content)
            continue
        flush()
        last = (v.tag, v.tensor.tensor_type, list(v.tensor.dims))
        pieces = [v.tensor.tensor_content]
    flush()
    return out


def save_checkpoint(path, params, crc):
    """params: [(name, tensor_type, ndarray)]. Written as MindSpore writes: one Checkpoint per
    Value, 512 MiB Values, crc_num trailer when asked; temporary file, fsync, rename."""
    mods = ms_proto.load()
    tmp = path + ".tmp"
    value_crc = 0
    with open(tmp, "wb") as f:
        for name, ttype, arr in params:
            content = arr.tobytes()
            for at in range(0, max(len(content), 1), CHUNK):
                cp = mods.checkpoint.Checkpoint()
                v = cp.value.add()
                v.tag = name
                v.tensor.dims.extend(arr.shape)
                v.tensor.tensor_type = ttype
                v.tensor.tensor_content = content[at:at + CHUNK]
                blob = cp.SerializeToString()
                if crc:
                    value_crc = zlib.crc32(blob, value_crc)
                f.write(blob)
        if crc:
            f.write(b"crc_num" + value_crc.to_bytes(10, "big"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------
# the transform

def block(cells, G, arrays):
    """np.block of the cells (a grid tiling G), nested per dim."""
    nd = len(G)
    if nd == 0:
        return arrays[cells[0][0]]

    def nest(prefix, d):
        starts = sorted({c[d][0] for c, _ in cells if all(c[k] == prefix[k] for k in range(d))})
        if d == nd - 1:
            return [arrays[next(c for c, _ in cells if all(c[k] == prefix[k] for k in range(d)) and c[d][0] == s)]
                    for s in starts]
        out = []
        for s in starts:
            box = next(c[d] for c, _ in cells if all(c[k] == prefix[k] for k in range(d)) and c[d][0] == s)
            out.append(nest(prefix + [box], d + 1))
        return out

    if len(cells) == 1:
        return arrays[cells[0][0]]
    return np.block(nest([], 0))


def full_shape(src, dims):
    return [n * p for n, p in zip(dims, parts(src))]


def transform_rank(t, loaded, src_layouts, dst_layouts, M):
    """[(name, tensor_type, ndarray)] of target rank t from the loaded {name: {rank: (type, arr)}}."""
    out = []
    for name, by_rank in loaded.items():
        src, dst = src_layouts.get(name), dst_layouts.get(name)
        any_rank = next(iter(by_rank))
        ttype, some = by_rank[any_rank]
        if src is None or dst is None:  # in no strategy: copied whole (from rank t % M if loaded)
            out.append((name, ttype, by_rank.get(t % M, by_rank[any_rank])[1]))
            continue
        shape = full_shape(src, list(some.shape))
        G, B, cells = gather_plan(src, dst, shape, t)
        arrays = {c: by_rank[r][1] for c, r in cells}
        gathered = block(cells, G, arrays)
        local = tuple(slice(b[0] - g[0], b[1] - g[0]) for b, g in zip(B, G))
        out.append((name, ttype, np.ascontiguousarray(gathered[local])))
    return out


def transform_checkpoints(src_dir, dst_dir, prefix, src_strategy, dst_strategy, crc=False):
    src_layouts = read_strategy(src_strategy)
    dst_layouts = read_strategy(dst_strategy)
    M = num_ranks(next(iter(src_layouts.values())))
    N = num_ranks(next(iter(dst_layouts.values())))
    groups = {}
    for t, need in rank_lists(src_layouts, dst_layouts, N).items():
        groups.setdefault(need, []).append(t)
    for need, targets in groups.items():
        loaded = {}
        for r in need:  # every needed source checkpoint, loaded fully
            for name, (ttype, arr) in load_checkpoint(last_ckpt(os.path.join(src_dir, "rank_%d" % r))).items():
                loaded.setdefault(name, {})[r] = (ttype, arr)
        for t in targets:
            params = transform_rank(t, copy.deepcopy(loaded), src_layouts, dst_layouts, M)
            rank_dir = os.path.join(dst_dir, "rank_%d" % t)
            os.makedirs(rank_dir, exist_ok=True)
            save_checkpoint(os.path.join(rank_dir, "%s%d.ckpt" % (prefix, t)), params, crc)
            del params
        del loaded
    return 0


def main(argv):
    args = [a for a in argv[1:] if a != "--crc"]
    if len(args) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return transform_checkpoints(*args, crc="--crc" in argv)
    except (OSError, ValueError, KeyError, AssertionError) as e:
        print("mindspore_baseline.py: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
