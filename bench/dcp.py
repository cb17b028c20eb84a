#!/usr/bin/python3
"""PyTorch DCP resharding: reshard beside PyTorch itself and `cp -r`, in one run.

  dcp.py --reshard PATH [--size 1G] [--cases 8rto4r,8rto4c] [--dir /dev/shm] [--runs 3]
         [--timeout 1800] [--json OUT] [--tiny] [--keep]

The source: a DCP checkpoint written by PyTorch itself (Debian's python3-torch) from 8 gloo CPU
processes, 16 float32 parameters layer<i>.weight of shape [R, C] adding up to about --size, each a
ShardedTensor split by rows across the 8 processes (ChunkShardingSpec dim 0), one `.distcp` file per
process (FileSystemWriter single_file_per_rank=True). Generated once, untimed.

The cases (target: 4 ranks):

  8rto4r   4 row blocks     (ChunkShardingSpec dim 0;  MindSpore dev [4] map [0,-1])
  8rto4c   4 column blocks  (ChunkShardingSpec dim 1;  MindSpore dev [4] map [-1,0])

The tools, interleaved and shuffled (a fixed seed) from run to run, each timed as one process
tree from start to exit (the outputs removed between runs, untimed):

  cp -r SRC COPY          the floor (tmpfs: the page-cache copy)
  torch                   4 gloo processes started together; each builds the target ShardedTensors
                          (sharded_tensor.empty), calls load_state_dict from SRC, then
                          save_state_dict to OUT (single_file_per_rank=True); each reports its
                          load and save seconds, its peak RSS and the bytes it read (/proc/self/io
                          rchar)
  reshard → dcp           `reshard transform --src-dir SRC --dst-dir OUT --dst-strategy S
                          --format dcp` (when `reshard transform --help` lists dcp)
  reshard → MindSpore     `reshard transform --src-dir SRC --dst-dir OUT --dst-strategy S`: the
                          same plan written as MindSpore ranks (what the torch figures of the
                          issue were first measured against)

reshard's summary (`--json`) gives the bytes it read from the source files
(file_bytes_read) beside the bytes it wrote.

Checks (any failure: exit status 1): every command exits 0; the last run's DCP outputs of torch and
reshard hold the same values: each is merged by `reshard merge --format safetensors` into one file,
and the two files are byte-identical (and their tensors equal what torch itself wrote into the
source, merged the same way).

--tiny: size 8M, one run (a smoke test). Prints a markdown table on stdout (progress on stderr);
--json writes the raw results. Run with /usr/bin/python3 (it has torch, numpy and protobuf).
"""

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "verify", "python"))

from _common import MiB, model as _model  # noqa: E402
SRC_WORLD = 8
CASES = {"8rto4r": 0, "8rto4c": 1}  # case: the target's split dim
LABELS = {"8rto4r": "8 rows → 4 rows", "8rto4c": "8 rows → 4 cols"}


def model(size_bytes):
    """[(name, [R, C])]: 16 equal float32 parameters of about size_bytes in all; R a multiple of
    8 (the source split), C a multiple of 4 (the column target)."""
    return _model(size_bytes, 8)


# ------------------------------------------------------------------------------------------------
# the torch processes (this file run as `dcp.py --worker ...`)

def torch_modules():
    """torch, dist, sharded_tensor, ChunkShardingSpec, dcp: torch 1.13's DCP (under
    torch.distributed._shard.checkpoint), with the dataclass fix its import needs on Python 3.11
    applied at import time."""
    import torch_dcp  # verify/python: the import-time fix of pytorch#91795
    torch_dcp.patch_tensor_properties_default()
    import torch
    import torch.distributed as dist
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    import torch.distributed._shard.checkpoint as dcp
    return torch, dist, sharded_tensor, ChunkShardingSpec, dcp


def rchar():
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            if k == "rchar":
                return int(v)
    return 0


def worker(a):
    """One gloo process: `save` writes its row block of every parameter (the source); `reshard`
    loads the target sharding from --src and saves it to --out. Prints one JSON line."""
    t0 = time.perf_counter()
    torch, dist, sharded_tensor, ChunkShardingSpec, dcp = torch_modules()
    dist.init_process_group("gloo", init_method="file://" + a.init, rank=a.rank, world_size=a.world)
    t_init = time.perf_counter()
    params = json.loads(a.params)
    spec = ChunkShardingSpec(dim=a.dim, placements=["rank:%d/cpu" % r for r in range(a.world)])
    sd = {}
    for pid, (name, shape) in enumerate(params):
        st = sharded_tensor.empty(spec, *shape, dtype=torch.float32)
        if a.worker == "save":
            for shard in st.local_shards():
                md = shard.metadata
                r0, c0 = md.shard_offsets
                nr, nc = md.shard_sizes
                # distinct values per element and parameter, exact in float32 modulo 2^24
                rows = torch.arange(r0, r0 + nr, dtype=torch.int64).unsqueeze(1) * shape[1]
                idx = rows + torch.arange(c0, c0 + nc, dtype=torch.int64).unsqueeze(0)
                shard.tensor.copy_(((idx * 7 + pid * 1000003) % (1 << 24)).to(torch.float32))
        sd[name] = st
    read0 = rchar()
    t1 = time.perf_counter()
    if a.worker == "reshard":
        dcp.load_state_dict(sd, dcp.FileSystemReader(a.src))
    t2 = time.perf_counter()
    read = rchar() - read0
    dcp.save_state_dict(sd, dcp.FileSystemWriter(a.out, single_file_per_rank=True))
    t3 = time.perf_counter()
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"rank": a.rank, "start_s": t_init - t0, "load_s": t2 - t1, "save_s": t3 - t2,
                      "read_bytes": read, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}),
          flush=True)


def torch_run(mode, world, dim, params, src, out, timeout):
    """Starts `world` worker processes together and waits for all; (wall seconds, [worker reports])."""
    with tempfile.TemporaryDirectory(prefix="reshard_dcp_init_") as tmp:
        init = os.path.join(tmp, "init")
        base = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--world", str(world), "--dim", str(dim),
                "--params", json.dumps(params), "--src", src or "", "--out", out, "--init", init]
        t0 = time.perf_counter()
        procs = [subprocess.Popen(base + ["--rank", str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for r in range(world)]
        reports, errors = [], []
        for p in procs:
            try:
                o, e = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise RuntimeError("torch %s: killed after %g s" % (mode, timeout))
            if p.returncode != 0:
                errors.append("exit %d: %s" % (p.returncode, e.decode(errors="replace").strip()[-1500:]))
            else:
                reports.append(json.loads(o.decode().strip().splitlines()[-1]))
        seconds = time.perf_counter() - t0
        if errors:
            raise RuntimeError("torch %s: %s" % (mode, errors[0]))
        return seconds, reports


# ------------------------------------------------------------------------------------------------
# the bench

def run(cmd, timeout, stdout_path=None):
    """scale_ranks.run of cmd; with stdout_path, its standard output saved there."""
    import scale_ranks
    if stdout_path is None:
        return scale_ranks.run(cmd, timeout)
    return scale_ranks.run(["sh", "-c", 'out="$1"; shift; exec "$@" > "$out"', "sh", stdout_path] + cmd, timeout)


def write_strategy(path, mods, params, dim):
    import ms_scenario
    lay = ms_scenario.L([4], [0, -1] if dim == 0 else [-1, 0])
    ms_scenario._write_strategy(path, [(name, lay, shape) for name, shape in params], mods, False)


def lists_dcp(reshard):
    h = subprocess.run([reshard, "transform", "--help"], capture_output=True, text=True).stdout
    return "dcp" in h


def merged_digest(reshard, d, work, timeout):
    """SHA-256 of `reshard merge --src-dir d --format safetensors` (one file), or an error."""
    import hashlib
    out = os.path.join(work, "merged.safetensors")
    r = run([reshard, "merge", "--src-dir", d, "--out", out, "--format", "safetensors", "--force"], timeout)
    if r["status"] != "ok":
        return None, "merge of %s: %s %s" % (d, r["status"], r["error"])
    h = hashlib.sha256()
    with open(out, "rb") as f:
        for block in iter(lambda: f.read(8 * MiB), b""):
            h.update(block)
    os.unlink(out)
    return h.hexdigest(), ""


def summary_of(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def bench_case(args, work, src, case, params, mods, src_digest):
    import scale_ranks
    dim = CASES[case]
    strategy = os.path.join(work, "strategy_%s.ckpt" % case)
    write_strategy(strategy, mods, params, dim)
    copy, out, summ = os.path.join(work, "copy"), os.path.join(work, "out"), os.path.join(work, "summary.json")
    tools = ["cp -r", "torch"]
    if args.dcp:
        tools.append("reshard → dcp")
    tools.append("reshard → MindSpore")
    samples = {t: [] for t in tools}
    extra = {t: [] for t in tools}
    res = {"case": case, "label": LABELS[case], "tools": {}, "checks": {}, "errors": []}
    digests = {}
    rng = random.Random(20261127)
    for i in range(args.runs):
        order = list(tools)
        rng.shuffle(order)
        for t in order:
            scale_ranks.remove(copy)
            scale_ranks.remove(out)
            if t == "cp -r":
                s = run(["cp", "-r", src, copy], args.timeout)
            elif t == "torch":
                try:
                    secs, reps = torch_run("reshard", 4, dim, params, src, out, args.timeout)
                    s = {"status": "ok", "seconds": secs, "error": "",
                         "peak_rss_bytes": max(r["peak_rss_bytes"] for r in reps)}
                    extra[t].append({"load_s": max(r["load_s"] for r in reps), "save_s": max(r["save_s"] for r in reps),
                                     "start_s": max(r["start_s"] for r in reps),
                                     "read_bytes": sum(r["read_bytes"] for r in reps),
                                     "sum_rss_bytes": sum(r["peak_rss_bytes"] for r in reps)})
                except RuntimeError as e:
                    s = {"status": "failed", "seconds": None, "peak_rss_bytes": None, "error": str(e)}
            else:
                cmd = [args.reshard, "transform", "--src-dir", src, "--dst-dir", out, "--dst-strategy", strategy,
                       "--json"]
                if t == "reshard → dcp":
                    cmd += ["--format", "dcp"]
                s = run(cmd, args.timeout, summ)
                sm = summary_of(summ)
                extra[t].append({"read_bytes": sm.get("file_bytes_read"), "written_bytes": sm.get("bytes_written")})
            samples[t].append(s)
            scale_ranks.log("  %s run %d %-20s %s" % (case, i + 1, t, "%.3f s, %s" % (
                s["seconds"], scale_ranks.fmt_bytes(s["peak_rss_bytes"])) if s["status"] == "ok"
                else s["status"] + " " + s["error"]))
            if s["status"] != "ok":
                res["errors"].append("%s run %d: %s" % (t, i + 1, s["error"]))
            elif i == args.runs - 1 and t in ("torch", "reshard → dcp"):
                digests[t], e = merged_digest(args.reshard, out, work, args.timeout)
                if e:
                    res["errors"].append(e)
    scale_ranks.remove(copy)
    scale_ranks.remove(out)
    for t in tools:
        res["tools"][t] = scale_ranks.stats(samples[t])
        if extra[t]:
            res["tools"][t]["detail"] = extra[t]
    if "torch" in digests:
        res["checks"]["torch's output holds the source's values"] = "ok" if digests["torch"] == src_digest else "differs"
    if "reshard → dcp" in digests:
        res["checks"]["reshard's output = torch's"] = "ok" if digests["reshard → dcp"] == digests.get("torch") else "differs"
    for k, v in res["checks"].items():
        if v != "ok":
            res["errors"].append("check %s: %s" % (k, v))
    return res


def markdown(results, meta):
    import scale_ranks
    out = ["%s, %d run(s), %s on %s (%s)" % (meta["size"], meta["runs"], meta["tensor_bytes_h"], meta["dir"],
                                               meta["fs"]), "",
           "| case | tool | wall (median [min–max]) | ratio to cp -r | ratio to torch | peak RSS (per process) "
           "| read from the source | detail |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in results:
        cp = r["tools"]["cp -r"]
        tt = r["tools"]["torch"]
        for t, st in r["tools"].items():
            det = st.get("detail") or []
            read = ""
            note = ""
            if t == "torch" and det:
                read = scale_ranks.fmt_bytes(median([d["read_bytes"] for d in det]))
                note = "load %.2f s + save %.2f s (slowest process), start-up %.2f s; RSS of the 4: %s" % (
                    median([d["load_s"] for d in det]), median([d["save_s"] for d in det]),
                    median([d["start_s"] for d in det]), scale_ranks.fmt_bytes(median([d["sum_rss_bytes"] for d in det])))
            elif det and det[-1].get("read_bytes") is not None:
                read = scale_ranks.fmt_bytes(det[-1]["read_bytes"])
            ratio_cp = "%.2fx" % (st["median_s"] / cp["median_s"]) if scale_ranks.ok(st) and scale_ranks.ok(cp) else ""
            ratio_t = "%.2fx" % (st["median_s"] / tt["median_s"]) if scale_ranks.ok(st) and scale_ranks.ok(tt) else ""
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["label"], t, scale_ranks.cell(st), ratio_cp, ratio_t,
                scale_ranks.fmt_bytes(st["peak_rss_bytes"]) if st.get("peak_rss_bytes") else "", read, note))
    out.append("")
    for r in results:
        for k, v in r["checks"].items():
            out.append("- %s, %s: %s" % (r["label"], k, v))
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", choices=["save", "reshard"], help=argparse.SUPPRESS)
    for opt, kind in (("--rank", int), ("--world", int), ("--dim", int), ("--params", str), ("--src", str),
                      ("--out", str), ("--init", str)):
        ap.add_argument(opt, type=kind, help=argparse.SUPPRESS)
    ap.add_argument("--reshard", help="the reshard program")
    ap.add_argument("--size", default="1G", help="tensor bytes of the checkpoint (K, M, G suffixes)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--tiny", action="store_true", help="size 8M, one run: a smoke test")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv[1:])
    if args.worker:
        worker(args)
        return 0
    if not args.reshard:
        ap.error("--reshard is required")
    import ms_proto
    import report
    import scale_ranks
    import transform_e2e
    if args.tiny:
        args.size, args.runs = "8M", 1
    cases = args.cases.split(",")
    for c in cases:
        if c not in CASES:
            ap.error("--cases: unknown case %r (valid: %s)" % (c, ", ".join(CASES)))
    args.reshard = os.path.abspath(args.reshard)
    args.dcp = lists_dcp(args.reshard)
    size = transform_e2e.parse_size(args.size)
    params = model(size)
    total = sum(math.prod(s) * 4 for _, s in params)
    mods = ms_proto.load()
    base = tempfile.mkdtemp(prefix="reshard_dcp_", dir=args.dir)
    fs = subprocess.run(["stat", "-f", "-c", "%T", args.dir], capture_output=True, text=True).stdout.strip()
    meta = {"size": args.size, "runs": args.runs, "dir": args.dir, "fs": fs, "tensor_bytes": total,
            "tensor_bytes_h": scale_ranks.fmt_bytes(total), "shape": params[0][1], "git": scale_ranks.git_state(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_avg_start": list(os.getloadavg()),
            "reshard_writes_dcp": args.dcp}
    results, errors = [], []
    try:
        src = os.path.join(base, "src")
        t0 = time.perf_counter()
        torch_run("save", SRC_WORLD, 0, params, None, src, args.timeout)
        meta["generate_s"] = time.perf_counter() - t0
        scale_ranks.log("source: %d x %s float32 (%s) saved by torch from %d processes in %.1f s" % (
            len(params), params[0][1], scale_ranks.fmt_bytes(total), SRC_WORLD, meta["generate_s"]))
        src_digest, e = merged_digest(args.reshard, src, base, args.timeout)
        if e:
            errors.append(e)
        for c in cases:
            r = bench_case(args, base, src, c, params, mods, src_digest)
            results.append(r)
            errors += ["%s: %s" % (c, e) for e in r["errors"]]
    finally:
        if not args.keep:
            scale_ranks.remove(base)
    meta["load_avg_end"] = list(os.getloadavg())
    if args.json:
        report.write_json(args.json, meta, results)
    print(markdown(results, meta))
    for e in errors:
        print("ERROR: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
