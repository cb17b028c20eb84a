#!/usr/bin/python3
"""Writes the DCP read-item examples of verify/cli/check_plan_dcp.sh with real PyTorch (Debian's
python3-torch, 1.13): target processes (gloo) each build the state dict they would load, in a
sharding other than the saved one, ask DCP's own load planner (create_default_local_load_plan)
for their read items against a checkpoint of verify/data/dcp/ (make_fixtures.py), and rank 0
writes them all as the JSON of docs/formats.md#dcp-read-items.

  rows.read_items.json  rows (w float32 [5,3] saved as rows 3 + 2 by 2 ranks, replicated int64
                        [4]) loaded by 3 ranks: w split by columns (1 + 1 + 1), replicated whole
  grid.read_items.json  grid (g float32 [4,6] saved in an uneven 2x2 grid by 4 ranks, i int64
                        [5,2] in rows 2 + 2 + 1 + 0) loaded by 2 ranks: g split by columns
                        (3 + 3, across the grid's 4 | 2 boundary), i by rows (3 + 2)

The function dcp_read_items below is the one docs/formats.md shows (the test checks they are the
same text). Run with /usr/bin/python3 from anywhere:

  /usr/bin/python3 verify/data/dcp/make_read_items.py
"""

import json
import os
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_fixtures  # noqa: E402,F401  (applies pytorch#91795 at import time, then imports torch's DCP)

import torch.multiprocessing as mp  # noqa: E402
from torch.distributed._shard import sharded_tensor  # noqa: E402
from torch.distributed._shard.sharding_spec import ChunkShardingSpec  # noqa: E402

# --- dcp_read_items: as in docs/formats.md ---
import torch, torch.distributed as dist
import torch.distributed._shard.checkpoint as dcp  # torch >= 2.0: torch.distributed.checkpoint
from torch.distributed._shard.checkpoint.default_planner import create_default_local_load_plan
from torch.distributed._shard.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
from torch.distributed._shard.checkpoint.planner import LoadItemType
from torch.distributed._shard.sharded_tensor import ShardedTensor


def dcp_read_items(state_dict, checkpoint_dir):
    """DCP's read items for loading `state_dict` (this rank's) from `checkpoint_dir`, every rank's, as JSON."""
    md = dcp.FileSystemReader(checkpoint_dir).read_metadata()
    plan = create_default_local_load_plan(state_dict, md)
    ints = lambda s: [int(v) for v in s]
    chunks = {k: [{"offsets": ints(s.metadata.shard_offsets), "sizes": ints(s.metadata.shard_sizes)} for s in v.local_shards()]
              if isinstance(v, ShardedTensor) else [{"offsets": [0] * v.dim(), "sizes": ints(v.shape)}]
              for k, v in state_dict.items() if isinstance(v, torch.Tensor)}
    items = [{"fqn": r.dest_index.fqn, "dest_index": ints(r.dest_index.offset), "dest_offsets": ints(r.dest_offsets),
              "storage_index": ints(r.storage_index.offset), "storage_offsets": ints(r.storage_offsets),
              "lengths": ints(r.lengths)} for r in plan.items if r.type == LoadItemType.TENSOR]
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, {"rank": dist.get_rank(), "chunks": chunks, "read_items": items})
    writer = lambda k, c: int(md.storage_data[MetadataIndex(k, c.offsets)].relative_path.split("_")[2])  # "__R_0.distcp"
    tensors = {k: {"size": ints(t.size), "dtype": str(t.properties.dtype).replace("torch.", ""),
                   "chunks": [{"rank": writer(k, c), "offsets": ints(c.offsets), "sizes": ints(c.sizes)} for c in t.chunks]}
               for k, t in md.state_dict_metadata.items() if isinstance(t, TensorStorageMetadata)}
    return {"dcp_read_items": 1, "torch": torch.__version__, "tensors": tensors, "ranks": ranks}
# --- end of dcp_read_items ---


# name: (saved checkpoint, target world, {key: (global shape, dtype, split dim, or None: a plain tensor)})
EXAMPLES = {
    "rows": ("rows", 3, {"w": ([5, 3], torch.float32, 1), "replicated": ([4], torch.int64, None)}),
    "grid": ("grid", 2, {"g": ([4, 6], torch.float32, 1), "i": ([5, 2], torch.int64, 0)}),
}


def dump(v, indent=""):
    """JSON text of `v` with each object or list that holds no object on one line."""
    flat = lambda x: not isinstance(x, (dict, list)) or (isinstance(x, list) and all(not isinstance(e, (dict, list)) for e in x))  # noqa: E731
    if isinstance(v, dict) and not all(flat(x) for x in v.values()):
        inner = indent + " "
        return "{\n" + ",\n".join(inner + json.dumps(k) + ": " + dump(v[k], inner) for k in sorted(v)) + "\n" + indent + "}"
    if isinstance(v, list) and not all(flat(x) for x in v):
        inner = indent + " "
        return "[\n" + ",\n".join(inner + dump(x, inner) for x in v) + "\n" + indent + "]"
    return json.dumps(v, sort_keys=True)


def worker(rank, world, name, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    saved, _, keys = EXAMPLES[name]
    sd = {}
    for key, (shape, dtype, dim) in keys.items():
        if dim is None:
            sd[key] = torch.zeros(shape, dtype=dtype)
        else:
            spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
            sd[key] = sharded_tensor.empty(spec, *shape, dtype=dtype)
    out = dcp_read_items(sd, os.path.join(HERE, saved))
    if rank == 0:
        with open(os.path.join(HERE, name + ".read_items.json"), "w") as f:
            f.write(dump(out) + "\n")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    for name, (_, world, _) in EXAMPLES.items():
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(worker, args=(world, name, os.path.join(tmp, "init")), nprocs=world, join=True)
    print("make_read_items.py: wrote", ", ".join(n + ".read_items.json" for n in EXAMPLES), "with torch", torch.__version__)
