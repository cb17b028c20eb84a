#!/usr/bin/python3
"""dtype casts inside the copy engine, and Hugging Face output under a memory budget, end to end.

  cast_e2e.py --reshard PATH [--size 1G] [--dir /dev/shm] [--runs 5] [--budget 128M] [--json OUT] [--tiny]

The model and layouts are bench/disk.py's (16 float32 parameters adding up to --size; 8 ranks:
dev [2,4] map [1,0]; 4 ranks: dev [4] map [0,-1]). The 8-rank source is generated once in a fresh
directory under --dir. Then, --runs rounds, the commands of each round in a shuffled order (seeded):

  copy          cp -r of the source directory (the floor: every byte read and written once)
  plain         reshard transform 8 -> 4
  bfloat16      the same with --dtype bfloat16 (half the bytes written)
  float16       the same with --dtype float16
  float64       the same with --dtype float64 (twice the bytes written)

all with --no-sync (tmpfs needs none; on a disk the page cache is what is measured). The table
gives the fastest and the median wall time, the ratios of the fastest to `plain`'s and to `copy`'s
(on this VM a first touch of tmpfs pages costs an erratic amount, which the fastest run shows
least), and the bytes written.

Then, once: `reshard merge --format hf --max-shard-size 256MB --max-memory BUDGET` of the same
source into a Hugging Face directory, in Float32 and with --dtype bfloat16: the peak resident set
(the summary's peak_rss_bytes, VmHWM) against the budget, the shards written.

Checks (any failure: exit status 1): every command exits 0; every cast output holds the bytes a
numpy cast of the plain output gives (float16, float64: numpy's astype; bfloat16: round to nearest
even on the top 16 bits) for two target files; the merges' peaks are within the budget; the
checkpoint is larger than twice the budget; the Float32 HF checkpoint holds the merged tensors
(each equal to the concatenation the 8 -> 1 layout gives, checked on two parameters).

--tiny: size 80M, budget 36M, one run, /dev/shm (the ctest smoke test bench.cast_e2e). Prints
markdown on stdout (progress on stderr). Run with /usr/bin/python3.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "verify", "python"))
import disk  # noqa: E402  (model, generate, write_strategy, keep_heap, fs_type, log)
import hf_reference  # noqa: E402  (bf16_from_f32, read)
import ms_files  # noqa: E402  (parse_ckpt)
import ms_proto  # noqa: E402
import transform_e2e  # noqa: E402  (parse_size)

MiB = 1 << 20
log = disk.log
VARIANTS = {"plain": [], "bfloat16": ["--dtype", "bfloat16"], "float16": ["--dtype", "float16"],
            "float64": ["--dtype", "float64"]}


def timed(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit("cast_e2e.py: %s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    return wall, p.stdout


def tensors(path):
    """name -> (dtype name, bytes) of a ckpt file, by protobuf's parser."""
    out = {}
    for v in ms_files.parse_ckpt(path).value:
        t = out.setdefault(v.tag, [v.tensor.tensor_type, b""])
        t[1] += v.tensor.tensor_content
    return out


def cast_check(plain, cast, dtype):
    """'' when every tensor of `cast` is the numpy cast of `plain`'s."""
    a, b = tensors(plain), tensors(cast)
    for name, (t, data) in a.items():
        got = b.get(name)
        if got is None:
            return "%s: %s missing" % (cast, name)
        if t != "Float32":
            want = data
        else:
            f = np.frombuffer(data, np.float32)
            if dtype == "bfloat16":
                want = hf_reference.bf16_from_f32(f).tobytes()
            else:
                want = f.astype(np.float16 if dtype == "float16" else np.float64).tobytes()
        if got[1] != want:
            return "%s: %s differs from numpy's cast to %s" % (cast, name, dtype)
    return ""


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reshard", required=True)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--budget", default="128M")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args(argv[1:])
    if args.tiny:
        args.size, args.runs, args.budget, args.dir = "80M", 1, "36M", "/dev/shm"
    size = transform_e2e.parse_size(args.size)
    budget = transform_e2e.parse_size(args.budget)
    reshard = os.path.abspath(args.reshard)
    mods = ms_proto.load()
    disk.keep_heap()
    params = disk.model(size)
    total = sum(r * c * 4 for _, (r, c) in params)
    errors = []
    if total <= 2 * budget:
        errors.append("the checkpoint (%d bytes) is not larger than twice the budget (%d)" % (total, budget))
    base = tempfile.mkdtemp(prefix="reshard_cast_", dir=args.dir)
    fs = disk.fs_type(args.dir)
    try:
        src = os.path.join(base, "src")
        s8, s4 = os.path.join(base, "s8.ckpt"), os.path.join(base, "s4.ckpt")
        disk.write_strategy(s8, mods, params, "8")
        disk.write_strategy(s4, mods, params, "4")
        log("generating %d bytes on %s (%s)" % (total, args.dir, fs))
        disk.generate(src, mods, params, "8", fs != "tmpfs")
        rng = random.Random(args.seed)
        times = {k: [] for k in ["copy"] + list(VARIANTS)}
        for run in range(args.runs):
            order = list(times)
            rng.shuffle(order)
            for k in order:
                out = os.path.join(base, "out_" + k)
                shutil.rmtree(out, ignore_errors=True)
                if k == "copy":
                    cmd = ["cp", "-r", src, out]
                else:
                    cmd = [reshard, "transform", "--src-dir", src, "--dst-dir", out, "--src-strategy", s8,
                           "--dst-strategy", s4, "--no-sync", "--json"] + VARIANTS[k]
                wall, _ = timed(cmd)
                times[k].append(wall)
                log("run %d %-9s %.3f s" % (run, k, wall))
        for k in ("bfloat16", "float16", "float64"):
            for t in (0, 3):
                f = "rank_%d/checkpoint_%d.ckpt" % (t, t)
                e = cast_check(os.path.join(base, "out_plain", f), os.path.join(base, "out_" + k, f), k)
                if e:
                    errors.append(e)
        med = {k: statistics.median(v) for k, v in times.items()}
        written = {k: sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs_ in os.walk(os.path.join(base, "out_" + k))
                          for f in fs_) for k in times}
        for k in times:
            shutil.rmtree(os.path.join(base, "out_" + k), ignore_errors=True)
        # Hugging Face output under a budget
        merges = []
        for extra in ([], ["--dtype", "bfloat16"]):
            out = os.path.join(base, "hf" + ("_bf16" if extra else ""))
            wall, text = timed([reshard, "merge", "--src-dir", src, "--src-strategy", s8, "--out", out, "--format", "hf",
                                "--max-shard-size", "256MB", "--max-memory", str(budget), "--no-sync", "--json"] + extra)
            j = json.loads(text)
            shards = sorted(os.listdir(out))
            merges.append({"dtype": "bfloat16" if extra else "float32", "wall": wall, "peak": j["peak_rss_bytes"],
                           "jobs": j["jobs"], "buffer": j["buffer_bytes"], "files": len(shards),
                           "bytes": j["bytes_written"]})
            if j["peak_rss_bytes"] > budget:
                errors.append("merge --format hf %s: peak %d bytes over the budget %d" % (extra, j["peak_rss_bytes"], budget))
            if not extra:  # two parameters against the 8-rank slices, concatenated
                got = hf_reference.read_model(out)
                for name, shape in (params[0], params[-1]):
                    full = np.zeros(shape, np.float32)
                    for r in range(8):
                        rows, cols = disk.ms_scenario.rank_box(disk.lay("8"), shape, r)
                        full[rows[0]:rows[1], cols[0]:cols[1]] = disk.block(disk_pid(params, name), shape,
                                                                            [rows, cols])
                    if got[name][2] != full.tobytes():
                        errors.append("merge --format hf: %s differs from the full tensor" % name)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print("Casts in the copy engine: `reshard transform` 8 -> 4 of %s (%d float32 parameters) on %s (%s), "
"--no-sync, %d runs\n" % (args.size, len(params), args.dir, fs, args.runs))
    best = {k: min(v) for k, v in times.items()}
    print("| command | fastest s | median s | vs plain | vs cp -r | bytes written |")
    print("|---|---:|---:|---:|---:|---:|")
    for k in times:
        print("| %s | %.3f | %.3f | %.2fx | %.2fx | %d |" % (
            "cp -r" if k == "copy" else ("--dtype " + k if k != "plain" else "plain transform"), best[k], med[k],
            best[k] / best["plain"], best[k] / best["copy"], written[k]))
    print("\nHugging Face output under a budget: `reshard merge --format hf --max-shard-size 256MB --max-memory %s` "
          "of the same checkpoint (%d bytes, %.1fx the budget)\n" % (args.budget, total, total / budget))
    print("| dtype | s | peak resident | budget | jobs | chunk buffer | files | bytes written |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for m in merges:
        print("| %s | %.3f | %.1f MiB | %.1f MiB | %d | %d KiB | %d | %d |" % (
            m["dtype"], m["wall"], m["peak"] / MiB, budget / MiB, m["jobs"], m["buffer"] >> 10, m["files"], m["bytes"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"times": times, "median": med, "written": written, "merges": merges, "errors": errors}, f,
                      indent=1)
    for e in errors:
        print("cast_e2e.py: FAILED: " + e, file=sys.stderr)
    return 1 if errors else 0


def disk_pid(params, name):
    return [n for n, _ in params].index(name)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
