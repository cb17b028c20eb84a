#!/usr/bin/python3
"""Writes the DCP fixtures of verify/io/dcp.cpp with real PyTorch (Debian's python3-torch, 1.13).

Each fixture is a directory under verify/data/dcp/ written by
torch.distributed._shard.checkpoint.save_state_dict (FileSystemWriter), and beside it
<name>.expected.json: what torch's own load_state_dict read back from that directory, per
tensor its dtype, shape and raw little-endian bytes (hex; bfloat16 as its 16-bit patterns), per
byte item the value torch unpickled (repr). The C++ tests compare reshard's decoding with that,
bit for bit, and need no torch.

  minimal   no_dist=True: one float32 [2] tensor x = [1, 2] (the golden bytes of docs/formats.md)
  plain     no_dist=True: float32 [3,4], bfloat16 [5], int64 [2,3], a 0-d float32, and two byte
            items (an int and a str)
  rows      a ShardedTensor float32 [5,3] split by rows across 2 gloo processes (3 + 2 rows,
            uneven), and a replicated int64 [4] saved by both
  cols      a ShardedTensor float32 [3,4] split by columns across 2 gloo processes, and a
            bfloat16 [2,2] ShardedTensor split by rows
  grid      4 gloo processes: a ShardedTensor float32 [4,6] in an uneven 2x2 grid (rows 3 + 1,
            columns 4 + 2; EnumerableShardingSpec) and an int64 [5,2] split by rows 2 + 2 + 1 + 0
            (ChunkShardingSpec: the last rank holds nothing)

Deterministic values (no randomness); run it again and only nothing but torch's own output
changes. Run with /usr/bin/python3 from anywhere:

  /usr/bin/python3 verify/data/dcp/make_fixtures.py
"""

import json
import os
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))  # verify/python: the shared torch helper
from torch_compat import patch_tensor_properties_default  # noqa: E402


patch_tensor_properties_default()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed._shard import sharded_tensor  # noqa: E402
from torch.distributed._shard.metadata import ShardMetadata  # noqa: E402
from torch.distributed._shard.sharding_spec import ChunkShardingSpec, EnumerableShardingSpec  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402


def values(shape, dtype, start=1.0):
    n = 1
    for d in shape:
        n *= d
    t = torch.arange(n, dtype=torch.float64) * 0.25 + start
    if dtype in (torch.int64, torch.int32):
        t = torch.arange(n, dtype=torch.int64) * 1000003 - 7
    return t.reshape(shape).to(dtype)


def raw_hex(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes().hex()


def expected_of(directory, like):
    """What torch's load_state_dict reads from `directory` into tensors shaped as `like`."""
    state = {}
    for k, v in like.items():
        state[k] = torch.zeros(v.shape, dtype=v.dtype) if isinstance(v, torch.Tensor) else v
    dcp.load_state_dict(state, dcp.FileSystemReader(directory), no_dist=True)
    out = {"torch": torch.__version__, "tensors": {}, "bytes": {}}
    for k, v in sorted(state.items()):
        if isinstance(v, torch.Tensor):
            out["tensors"][k] = {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape),
                                 "hex": raw_hex(v)}
        else:
            out["bytes"][k] = repr(v)
    return out


def fresh(name):
    d = os.path.join(HERE, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def write_expected(name, like):
    exp = expected_of(os.path.join(HERE, name), like)
    with open(os.path.join(HERE, name + ".expected.json"), "w") as f:
        json.dump(exp, f, indent=1, sort_keys=True)
        f.write("\n")


def minimal():
    sd = {"x": torch.tensor([1.0, 2.0], dtype=torch.float32)}
    d = fresh("minimal")
    dcp.save_state_dict(sd, dcp.FileSystemWriter(d), no_dist=True)
    write_expected("minimal", sd)


def plain():
    sd = {
        "w": values([3, 4], torch.float32),
        "b": values([5], torch.bfloat16, start=-1.0),
        "steps": values([2, 3], torch.int64),
        "scale": torch.tensor(0.5, dtype=torch.float32),
        "epoch": 7,
        "tag": "hello",
    }
    d = fresh("plain")
    dcp.save_state_dict(sd, dcp.FileSystemWriter(d), no_dist=True)
    like = dict(sd)
    like["epoch"] = 0
    like["tag"] = ""
    write_expected("plain", like)


GRID = [([0, 0], [3, 4]), ([0, 4], [3, 2]), ([3, 0], [1, 4]), ([3, 4], [1, 2])]  # (offsets, sizes) of rank r
SHARDED = {
    # name: {key: (global shape, dtype, split dim, or "grid")}
    "rows": {"w": ([5, 3], torch.float32, 0)},
    "cols": {"w": ([3, 4], torch.float32, 1), "h": ([2, 2], torch.bfloat16, 0)},
    "grid": {"g": ([4, 6], torch.float32, "grid"), "i": ([5, 2], torch.int64, 0)},
}
WORLD = {"rows": 2, "cols": 2, "grid": 4}


def sharded_worker(rank, world, name, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    sd = {}
    for key, (shape, dtype, dim) in SHARDED[name].items():
        if dim == "grid":
            spec = EnumerableShardingSpec([ShardMetadata(shard_offsets=o, shard_sizes=z, placement=f"rank:{r}/cpu")
                                           for r, (o, z) in enumerate(GRID)])
        else:
            spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
        full = values(shape, dtype)
        st = sharded_tensor.empty(spec, *shape, dtype=dtype)
        for shard in st.local_shards():
            md = shard.metadata
            index = tuple(slice(o, o + s) for o, s in zip(md.shard_offsets, md.shard_sizes))
            shard.tensor.copy_(full[index])
        sd[key] = st
    if name == "rows":
        sd["replicated"] = values([4], torch.int64)
    dcp.save_state_dict(sd, dcp.FileSystemWriter(os.path.join(HERE, name), single_file_per_rank=True))
    dist.barrier()
    dist.destroy_process_group()


def sharded(name):
    fresh(name)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(sharded_worker, args=(WORLD[name], name, os.path.join(tmp, "init")), nprocs=WORLD[name], join=True)
    like = {k: torch.zeros(shape, dtype=dtype) for k, (shape, dtype, _) in SHARDED[name].items()}
    if name == "rows":
        like["replicated"] = torch.zeros([4], dtype=torch.int64)
    write_expected(name, like)


if __name__ == "__main__":
    torch.manual_seed(0)
    minimal()
    plain()
    sharded("rows")
    sharded("cols")
    sharded("grid")
    print("make_fixtures.py: wrote", ", ".join(["minimal", "plain", "rows", "cols", "grid"]), "with torch", torch.__version__)
