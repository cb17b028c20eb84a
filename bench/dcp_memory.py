#!/usr/bin/python3
"""`reshard merge --format hf --max-memory` of a PyTorch DCP checkpoint: the peak resident set.

  dcp_memory.py --reshard PATH [--size 1G] [--budget 64M] [--dir /dev/shm] [--world 4] [--keep] [--tiny]

Writes a DCP checkpoint of --size bytes with real torch (Debian's python3-torch):
torch.distributed._shard.checkpoint.save_state_dict from --world gloo CPU processes (a file://
rendezvous, no port), 16 float32 ShardedTensors [rows, 4096] split by rows (the last rank's share
uneven) and a byte item, in a fresh directory under --dir. Then, each under `/usr/bin/time -v`
(whose "Maximum resident set size" is the program's own peak: time forks it from a small process):

  reshard merge --src-dir DCP --out HF --format hf --max-memory BUDGET --no-sync
  reshard merge --src-dir DCP --out HF2 --format hf --no-sync          (no budget, for comparison)
  reshard verify --src-dir DCP --out HF --format hf                     (every tensor vs the chunks)

Checks (any failure: exit status 1): every run exits 0, the verify finds the output identical, the
budgeted peak is at most the budget, and the checkpoint is larger than twice the budget. Prints a
markdown table on stdout. --keep: leave the directory (DIR/dcp, DIR/hf; its path on standard
error), to run the program on it by hand. --tiny: 80 MiB, a 32 MiB budget (the ctest smoke test bench.dcp_memory).
Run with /usr/bin/python3.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "verify", "python"))
import torch_dcp  # noqa: E402  (pytorch#91795 for torch 1.13 on Python 3.11; sharded_from_full)
from transform_e2e import parse_size  # noqa: E402

MiB = 1 << 20
TENSORS = 16
COLS = 4096


def save_worker(rank, world, rows, out, init_file):
    import torch
    import torch.distributed as dist
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    spec = ChunkShardingSpec(dim=0, placements=["rank:%d/cpu" % r for r in range(world)])
    sd = {"step": 1000}
    for i in range(TENSORS):
        full = torch.arange(rows * COLS, dtype=torch.float32).reshape(rows, COLS) + i
        sd["layers.%d.weight" % i] = torch_dcp.sharded_from_full(full, spec)
        del full
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out, single_file_per_rank=True))
    dist.barrier()
    dist.destroy_process_group()


def timed(cmd):
    """(exit status, seconds, peak resident set in bytes, stdout + stderr) of cmd under time -v."""
    t = time.monotonic()
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    seconds = time.monotonic() - t
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    return r.returncode, seconds, int(m.group(1)) * 1024 if m else -1, r.stdout + r.stderr


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reshard", required=True)
    ap.add_argument("--size", type=parse_size, default=parse_size("1G"))
    ap.add_argument("--budget", type=parse_size, default=parse_size("64M"))
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    a = ap.parse_args(argv)
    if a.tiny:
        a.size, a.budget = 80 * MiB, 32 * MiB
    rows = max(a.world, a.size // (TENSORS * COLS * 4))
    size = TENSORS * rows * COLS * 4
    failures = []
    if size <= 2 * a.budget:
        failures.append("the checkpoint (%d B) is not larger than twice the budget (%d B)" % (size, a.budget))
    torch_dcp.patch_tensor_properties_default()
    import torch.multiprocessing as mp

    work = tempfile.mkdtemp(prefix="reshard_dcp_memory_", dir=a.dir)
    try:
        src = os.path.join(work, "dcp")
        os.makedirs(src)
        t = time.monotonic()
        mp.start_processes(save_worker, args=(a.world, rows, src, os.path.join(work, "init")), nprocs=a.world,
                           join=True, start_method="fork")
        print("saved %d tensors [%d,%d] float32 (%.1f MiB) from %d processes in %.1f s" % (
            TENSORS, rows, COLS, size / MiB, a.world, time.monotonic() - t), file=sys.stderr)
        runs = [("merge --format hf --max-memory %.0fMiB" % (a.budget / MiB), a.budget,
                 [a.reshard, "merge", "--src-dir", src, "--out", os.path.join(work, "hf"), "--format", "hf",
                  "--max-memory", str(a.budget), "--no-sync"]),
                ("merge --format hf", None,
                 [a.reshard, "merge", "--src-dir", src, "--out", os.path.join(work, "hf2"), "--format", "hf",
                  "--no-sync"]),
                ("verify --format hf", None,
                 [a.reshard, "verify", "--src-dir", src, "--out", os.path.join(work, "hf"), "--format", "hf"])]
        print("| run | checkpoint | budget | peak resident set | s |")
        print("|---|---:|---:|---:|---:|")
        for name, budget, cmd in runs:
            rc, seconds, peak, out = timed(cmd)
            if rc != 0:
                failures.append("%s: exit status %d: %s" % (name, rc, out.strip()[-2000:]))
            if budget is not None and peak > budget:
                failures.append("%s: peak %d B > budget %d B" % (name, peak, budget))
            if name.startswith("verify") and "identical" not in out:
                failures.append("%s: not identical: %s" % (name, out.strip()[-2000:]))
            print("| `reshard %s` | %.1f MiB | %s | %.1f MiB | %.2f |" % (
                name, size / MiB, "%.0f MiB" % (budget / MiB) if budget else "-", peak / MiB, seconds))
    finally:
        if a.keep:
            print("dcp_memory: kept " + work, file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("dcp_memory: FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
