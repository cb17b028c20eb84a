#!/usr/bin/python3
"""reshard.plan called from Python beside the same call in C++ (the module's _time_plan helper runs
reshard::plan in a loop without Python in between), on the 4096-rank layout pairs of
bench/planner.cpp:

  megatron/4096->3072  weight [12288, 49152], dev [512, 8] -> [256, 12], map [-1, 0]
  grid2d/4096->3072    embedding [50257, 12288], dev [64, 64] -> [96, 32], map [1, 0], balanced

Per pair: the C++ call, the Python call (reshard.plan: the plan wrapped in a Python object), the
Python call plus .transfers (the transfers as a numpy structured array), all best of --repeats,
and the ratios to the C++ call. Exits 1 when a Python plan differs in size from the C++ one.

  PYTHONPATH=build/python /usr/bin/python3 bench/python_plan.py [--tiny] [--repeats N]

--tiny: the 64- and 128-rank pairs instead (ctest bench.python_plan: the script keeps working).
"""

import argparse
import sys
import time

sys.dont_write_bytecode = True

import reshard  # noqa: E402


def pairs(tiny):
    def ms(dev, tmap, shape):
        return reshard.Layout(dev, tmap, shape, split="balanced")
    if tiny:
        grids = [("megatron", [8, 8], [4, 12], [-1, 0], [12288, 49152]),
                 ("grid2d", [16, 8], [12, 8], [1, 0], [50257, 12288])]
    else:
        grids = [("megatron", [512, 8], [256, 12], [-1, 0], [12288, 49152]),
                 ("grid2d", [64, 64], [96, 32], [1, 0], [50257, 12288])]
    for name, a, b, tmap, shape in grids:
        src, dst = ms(a, tmap, shape), ms(b, tmap, shape)
        yield "%s/%d->%d" % (name, src.ranks, dst.ranks), src, dst


def best(f, repeats):
    out = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        out = min(out, time.perf_counter() - t0)
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.tiny else 10)
    print("%-22s %10s %12s %12s %12s %8s %8s" % ("pair", "transfers", "C++", "Python", "+transfers",
                                                 "ratio", "ratio+t"))
    bad = 0
    for name, src, dst in pairs(args.tiny):
        cpp, n = reshard._reshard._time_plan(src, dst, 1, repeats)
        p = reshard.plan(src, dst)
        t = p.transfers
        if len(p) != n or len(t) != n or int(t["dst"].min()) != 0 or int(t["dst"].max()) != dst.ranks - 1:
            print("%s: the Python plan has %d transfers, the C++ one %d" % (name, len(p), n))
            bad += 1
        py = best(lambda: reshard.plan(src, dst), repeats)
        pyt = best(lambda: reshard.plan(src, dst).transfers, repeats)
        print("%-22s %10d %10.3f ms %10.3f ms %10.3f ms %8.3f %8.3f" % (name, n, cpp * 1e3, py * 1e3, pyt * 1e3,
                                                                       py / cpp, pyt / cpp))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
