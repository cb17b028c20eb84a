#!/usr/bin/python3
"""`reshard transform --max-memory`: the peak resident memory against the budget.

  memory.py --reshard PATH [--size 4G] [--budgets 24M,32M,64M,128M,256M,1G] [--dir /tmp] [--json OUT] [--tiny]

The model and the layouts are bench/disk.py's (16 float32 parameters adding up to --size), case
8to4: dev [2,4] map [1,0] -> dev [4] map [0,-1]. The source checkpoint is generated once in a
fresh directory under --dir; then `reshard transform --json` runs once without a budget and once per
budget of --budgets with --read-mode pread (the default), and once without a budget with --read-mode
mmap (which --max-memory refuses: the kernel maps whole page-cache folios around each read from a
mapping, beyond the engine's control; the row shows what mmap holds). For each run: the wall time,
the jobs and chunk buffer the engine fitted to the budget, and the peak resident set (the summary's
peak_rss_bytes: getrusage's ru_maxrss of the process, every page it held, file pages of its mappings
included).

Checks (any failure: exit status 1): every run exits 0; its peak resident set is at most its
budget; the outputs of every run are byte-identical (SHA-256 of every file); the checkpoint is
larger than twice the smallest budget (the budget binds, the data do not fit).

--tiny: size 160M, budgets 64M,128M, --dir /dev/shm (the ctest smoke test bench.memory). Prints a
markdown table on stdout (progress on stderr). Run with /usr/bin/python3.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import disk  # noqa: E402  (model, generate, write_strategy, keep_heap, fs_type, log)
import ms_proto  # noqa: E402
import transform_e2e  # noqa: E402  (parse_size, digests)

MiB = 1 << 20


def run(args, src, strategies, out, budget, mode):
    cmd = [args.reshard, "transform", "--src-dir", src, "--dst-dir", out, "--src-strategy", strategies[0],
           "--dst-strategy", strategies[1], "--read-mode", mode, "--json"]
    if budget:
        cmd += ["--max-memory", str(budget)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit("memory.py: %s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    j = json.loads(p.stdout)
    return {"budget": budget, "mode": mode, "wall": wall, "peak": j["peak_rss_bytes"], "jobs": j["jobs"],
            "buffer": j["buffer_bytes"], "bytes": j["bytes_written"]}


def mib(b):
    return "%.1f MiB" % (b / MiB)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reshard", required=True)
    ap.add_argument("--size", default="4G")
    ap.add_argument("--budgets", default="24M,32M,64M,128M,256M,1G")
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--json")
    ap.add_argument("--tiny", action="store_true")
    a = ap.parse_args(argv)
    if a.tiny:
        a.size, a.budgets, a.dir = "160M", "64M,128M", "/dev/shm"
    size = transform_e2e.parse_size(a.size)
    budgets = [transform_e2e.parse_size(b) for b in a.budgets.split(",")]
    disk.keep_heap()
    mods = ms_proto.load()
    work = tempfile.mkdtemp(prefix="reshard-memory-", dir=a.dir)
    failures = []
    try:
        params = disk.model(size)
        src = os.path.join(work, "src")
        strategies = (os.path.join(work, "src_strategy.ckpt"), os.path.join(work, "dst_strategy.ckpt"))
        disk.write_strategy(strategies[0], mods, params, "8")
        disk.write_strategy(strategies[1], mods, params, "4")
        disk.log("memory.py: generating %s in %s" % (mib(size), work))
        disk.generate(src, mods, params, "8", on_disk=not a.dir.startswith("/dev/shm"))
        src_bytes = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(src) for f in fs)
        if src_bytes <= 2 * min(budgets):
            failures.append("the checkpoint (%s) is not larger than twice the smallest budget" % mib(src_bytes))
        results, reference = [], None
        for mode, runs in (("pread", [0] + budgets), ("mmap", [0])):
            for budget in runs:
                out = os.path.join(work, "out")
                r = run(a, src, strategies, out, budget, mode)
                digest = transform_e2e.digests(out)
                if reference is None:
                    reference = digest
                elif digest != reference:
                    failures.append("%s, budget %s: the outputs differ from the first run's" % (mode, budget))
                shutil.rmtree(out)
                if budget and r["peak"] > budget:
                    failures.append("%s, budget %s: peak %s is over the budget" % (mode, mib(budget), mib(r["peak"])))
                disk.log("  %s %s: peak %s, %d jobs, buffer %s, %.2f s" %
                         (mode, mib(budget) if budget else "none", mib(r["peak"]), r["jobs"], mib(r["buffer"]), r["wall"]))
                results.append(r)
        fs = disk.fs_type(a.dir)
        print("8 -> 4, a %s checkpoint (%d files) on %s (%s); `reshard transform --max-memory B`\n" %
              (mib(src_bytes), 8, a.dir, fs))
        print("| read mode | --max-memory | peak resident set | peak / budget | jobs | chunk buffer | time |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in results:
            ratio = "%.2f" % (r["peak"] / r["budget"]) if r["budget"] else "-"
            print("| %s | %s | %s | %s | %d | %s | %.2f s |" % (r["mode"], mib(r["budget"]) if r["budget"] else "none",
                                                            mib(r["peak"]), ratio, r["jobs"], mib(r["buffer"]), r["wall"]))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"size": src_bytes, "dir": a.dir, "fs": fs, "results": results}, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("memory.py: FAIL: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
