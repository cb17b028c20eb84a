#!/usr/bin/python3
"""Plan quality: reshard's redistribution plans beside MindSpore's all-gather-then-slice, for the
whole GPT-like model of bench/transform_e2e.py under several conversions.

  plan_quality.py --reshard PATH [--json OUT] [--tiny]

reshard: `reshard plan --json` for every parameter (one call per distinct shape and layout pair);
the transfers are summed over the model: bytes that cross ranks, the lower bound (bytes the
targets do not already hold), messages (one per source, target and parameter), and the bytes each
source rank sends (max and mean over the source ranks).

MindSpore's way (bench/mindspore_baseline.py's gather rule): each target rank concatenates the
source slices along every gathered dim, then cuts its slice out. Every gathered slice held by
another rank is moved, even the parts the target then discards; the same counts are made.

Prints a markdown table. Run with /usr/bin/python3.
"""

import argparse
import json
import math
import os
import subprocess
import sys

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "verify", "python"))
import mindspore_baseline as msb  # noqa: E402
import ms_scenario  # noqa: E402
import transform_e2e as e2e  # noqa: E402

# (name, source mesh, target mesh); a mesh is (dev matrix [dp, tp] or [tp], optimizer shard size)
SCENARIOS = [
    ("8→4", ([2, 4], 2), ([2, 2], 2)),
    ("8→3", ([2, 4], 2), ([3], 0)),
    ("4→8", ([2, 2], 2), ([2, 4], 2)),
    ("64→32", ([8, 8], 8), ([8, 4], 8)),
    ("64→32, no optimizer sharding", ([8, 8], 0), ([8, 4], 0)),
    ("128→64", ([16, 8], 16), ([8, 8], 8)),
]


def lay(mesh, tmap, opt):
    dev, size = mesh
    return ms_scenario.L(dev, tmap, opt=(dev[-1], size) if opt and size > 1 else (0, 0))


def as_json(l, shape):
    j = {"dev_matrix": l["dev"], "tensor_map": l["map"], "shape": shape}
    if l["opt"][1] not in (0, 1):
        j["opt_shard"] = {"step": l["opt"][0], "size": l["opt"][1]}
    return json.dumps(j)


def reshard_plan(exe, src, dst, shape, cache):
    key = (as_json(src, shape), as_json(dst, shape))
    if key not in cache:
        p = subprocess.run([exe, "plan", "--src", key[0], "--dst", key[1], "--dtype", "float32", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        if p.returncode != 0:
            raise RuntimeError("reshard plan %s -> %s: %s" % (key[0], key[1], p.stderr.decode().strip()))
        cache[key] = json.loads(p.stdout)
    return cache[key]


def mindspore_plan(src, dst, shape):
    """(cross bytes, messages, {source rank: bytes sent}) of all-gather-then-slice."""
    cross, messages, sent = 0, 0, {}
    for t in range(msb.num_ranks(dst)):
        _, _, cells = msb.gather_plan(src, dst, shape, t)
        pairs = set()
        for c, r in cells:
            if r == t:
                continue
            b = math.prod(hi - lo for lo, hi in c) * 4
            cross += b
            sent[r] = sent.get(r, 0) + b
            pairs.add(r)
        messages += len(pairs)
    return cross, messages, sent


def scenario(exe, name, smesh, dmesh, hidden, layers, cache):
    M, N = math.prod(smesh[0]), math.prod(dmesh[0])
    r = {"scenario": name, "src_ranks": M, "dst_ranks": N, "hidden": hidden,
         "reshard": {"cross": 0, "lower_bound": 0, "messages": 0, "sent": [0] * M},
         "mindspore": {"cross": 0, "messages": 0, "sent": [0] * M}}
    for _, shape, tmap, opt in e2e.model(hidden, layers):
        src, dst = lay(smesh, tmap, opt), lay(dmesh, tmap, opt)
        p = reshard_plan(exe, src, dst, shape, cache)
        r["reshard"]["cross"] += p["cross_bytes"]
        r["reshard"]["lower_bound"] += p["lower_bound_bytes"]
        r["reshard"]["messages"] += p["messages"]
        for t in p["transfers"]:
            if t["src"] != t["dst"]:
                r["reshard"]["sent"][t["src"]] += t["bytes"]
        key = ("ms",) + tuple(json.dumps(x) for x in (src, dst, shape))
        if key not in cache:
            cache[key] = mindspore_plan(src, dst, shape)
        cross, messages, sent = cache[key]
        r["mindspore"]["cross"] += cross
        r["mindspore"]["messages"] += messages
        for k, v in sent.items():
            r["mindspore"]["sent"][k] += v
    r["tensor_bytes"] = sum(math.prod(s) * 4 for _, s, _, _ in e2e.model(hidden, layers))
    return r


def fmt(b):
    return "%.1f MiB" % (b / (1 << 20)) if b < (1 << 30) else "%.2f GiB" % (b / (1 << 30))


def markdown(results):
    out = ["### Plan quality: reshard vs MindSpore's all-gather-then-slice (whole model, float32)", "",
           "| conversion | tensor bytes | lower bound | reshard: cross bytes | / lower bound | messages "
           "| sent per source rank, max / mean | MindSpore's way: cross bytes | / lower bound | messages "
           "| sent per source rank, max / mean |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lb = r["reshard"]["lower_bound"]
        rs, ms = r["reshard"], r["mindspore"]

        def ratio(x):
            return "%.2f" % (x / lb) if lb else "-"

        def sent(s):
            return "%s / %s" % (fmt(max(s)), fmt(sum(s) / len(s)))

        out.append("| %s | %s | %s | %s | **%s** | %d | %s | %s | **%s** | %d | %s |" % (
            r["scenario"], fmt(r["tensor_bytes"]), fmt(lb), fmt(rs["cross"]), ratio(rs["cross"]), rs["messages"],
            sent(rs["sent"]), fmt(ms["cross"]), ratio(ms["cross"]), ms["messages"], sent(ms["sent"])))
    out.append("")
    out.append("cross bytes: bytes a target rank takes from another rank's slice (in a file-based transform, "
               "bytes read from another rank's file). Lower bound: the bytes the target ranks do not already "
               "hold. messages: (source, target) pairs summed over the parameters. MindSpore's way moves every "
               "source slice it concatenates, including the parts it then cuts away.")
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reshard", required=True, help="the reshard program")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--hidden", type=int, default=2304,
                    help="hidden size (default 2304: 1.1 GiB of tensors; must divide by 3 and 128)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tiny", action="store_true", help="a tiny model and the 8-rank scenarios only")
    args = ap.parse_args(argv[1:])
    scenarios = SCENARIOS[:3] if args.tiny else SCENARIOS
    hidden = 48 if args.tiny else args.hidden
    cache, results = {}, []
    for name, s, d in scenarios:
        results.append(scenario(args.reshard, name, s, d, hidden, 2 if args.tiny else args.layers, cache))
    bad = [r["scenario"] for r in results if r["reshard"]["cross"] != r["reshard"]["lower_bound"]]
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(results, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    print(markdown(results))
    if bad:
        print("reshard's cross bytes differ from the lower bound: %s" % ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
