#!/usr/bin/python3
"""A model of `mpirun -n K reshard transform` for K up to 64, from one dry run's plan.

  mpi_model.py DRY_RUN.json --source-ranks M [--round-robin DRY_RUN_RR.json] [--parts 1,2,4,8,16,32,64]
               [--svg OUT.svg] [--json OUT.json]

DRY_RUN.json: `reshard transform ... --dry-run --json` (per target: its rank, bytes written and
the source files it reads, with their bytes), run from the directory the script runs in (the
files' paths in it are relative to it); M: the source strategy's ranks. --round-robin: the dry
run of a binary whose transform took replicas round robin (before the nearest-replica policy),
modelled the same way for comparison (columns "round robin"). No process is run: for each K the targets are split
as io::balance_targets splits them (contiguous runs of ranks, each rank to the part that holds the
middle of its bytes), and for comparison as the split before it (largest first, each to the part
with the fewest bytes: a deal, which with equal targets is round robin). Per part: the tensor bytes
it writes, the source files it opens (its targets' reads and base files t % M: the indexes it
reads; every process also reads the files of the first target of each stage to size the split),
and the bytes of those files (an upper bound of what reading their indexes and checking their
CRC trailers reads). The old MPI driver also had process 0 open every source file to plan the
whole transform (every file some target opens), then again those of its dealt part: the column
"process 0 before" counts both (with --round-robin, the dealt split and process 0 are modelled
with the round-robin replicas, as they were).

Prints a Markdown table; --svg draws the source files opened per process and in all against K.
Standard library only.
"""

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import charts  # noqa: E402


def contiguous(sizes, k):
    """io::balance_targets: rank t to part floor(k * (before_t + sizes[t] / 2) / total)."""
    total = sum(sizes)
    count = total == 0
    if count:
        total = len(sizes)
    parts, before = [[] for _ in range(k)], 0
    for t, b in enumerate(sizes):
        b = 1 if count else b
        parts[min((2 * before + b) * k // (2 * total), k - 1)].append(t)
        before += b
    return parts


def dealt(sizes, k):
    """The split before: largest first (ties: lower rank), each to the least loaded part."""
    order = sorted(range(len(sizes)), key=lambda t: (-sizes[t], t))
    parts, load = [[] for _ in range(k)], [0] * k
    for t in order:
        w = min(range(k), key=lambda i: (load[i], i))
        parts[w].append(t)
        load[w] += sizes[t]
    return parts


def reads_of(plan, M):
    """Per target: the source ranks whose files it opens (its reads and its base file t % M)."""
    return [set(r["rank"] for r in t["reads"]) | {t["rank"] % M} for t in plan["targets"]]


def opened_by_parts(reads, parts):
    """Per part: the source files it opens (its targets' and the sizing target's)."""
    sizing = reads[0]  # the first target of the (one) stage: what every process sizes the split by
    return [set().union(*(reads[t] for t in p)) | sizing if p else set(sizing) for p in parts]


def model(plan, ks, M, rr_plan=None):
    targets = plan["targets"]
    sizes = [t["bytes_written"] for t in targets]
    reads = reads_of(plan, M)
    rr_reads = reads_of(rr_plan, M) if rr_plan else None
    file_size = {}
    for t in targets:
        for r in t["reads"]:
            if r["rank"] not in file_size:
                file_size[r["rank"]] = os.path.getsize(r["file"])
    base = os.path.dirname(targets[0]["reads"][0]["file"]).rsplit("/rank_", 1)[0]  # SRC/rank_<r>/<file>
    for r in range(M):  # the base files t % M no target reads from
        if r not in file_size:
            d = os.path.join(base, "rank_%d" % r)
            file_size[r] = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) if os.path.isdir(d) else 0
    if rr_plan:
        for r in set().union(*rr_reads):
            if r not in file_size:
                file_size[r] = sum(os.path.getsize(os.path.join(base, "rank_%d" % r, f))
                                   for f in os.listdir(os.path.join(base, "rank_%d" % r)))
    everything = set().union(*(rr_reads or reads))  # what process 0 opened to plan, before
    rows = []
    for k in ks:
        row = {"parts": k}
        splits = [("contiguous", contiguous, reads), ("dealt", dealt, rr_reads or reads)]
        if rr_reads:
            splits.append(("round_robin", contiguous, rr_reads))
        for name, split, rd in splits:
            parts = split(sizes, k)
            opened = opened_by_parts(rd, parts)
            load = [sum(sizes[t] for t in p) for p in parts]
            row[name] = {
                "bytes_max": max(load), "bytes_min": min(load), "bytes_ideal": sum(sizes) / k,
                "files_max": max(len(o) for o in opened), "files_mean": sum(len(o) for o in opened) / k,
                "files_total": sum(len(o) for o in opened),
                "file_bytes_total": sum(file_size.get(r, 0) for o in opened for r in o),
            }
        rd0 = rr_reads or reads
        row["process0_before"] = len(everything) + len(set().union(*(rd0[t] for t in dealt(sizes, k)[0])))
        rows.append(row)
    return {"source_files": M, "targets": len(targets), "bytes_written": sum(sizes),
            "source_bytes": sum(file_size.values()), "rows": rows}


def table(m):
    M = m["source_files"]
    rr = "round_robin" in m["rows"][0]
    head = "| K | bytes a part writes (max / min, ideal) | source files opened per process, max (mean) | in all (/ M) | bytes of the files opened, in all |"
    rule = "|---:|---:|---:|---:|---:|"
    if rr:
        head += " round robin replicas: per process max | in all (/ M) |"
        rule += "---:|---:|"
    out = [head + " dealt, before: per process max | dealt: in all (/ M) | process 0 before (plan all + part) |",
           rule + "---:|---:|---:|"]
    for r in m["rows"]:
        c, d = r["contiguous"], r["dealt"]
        line = "| %d | %.2f / %.2f MiB (%.2f) | %d (%.0f) | %d (%.2f) | %.1f MiB |" % (
            r["parts"], c["bytes_max"] / 2**20, c["bytes_min"] / 2**20, c["bytes_ideal"] / 2**20,
            c["files_max"], c["files_mean"], c["files_total"], c["files_total"] / M, c["file_bytes_total"] / 2**20)
        if rr:
            q = r["round_robin"]
            line += " %d | %d (%.2f) |" % (q["files_max"], q["files_total"], q["files_total"] / M)
        out.append(line + " %d | %d (%.2f) | %d |" % (d["files_max"], d["files_total"], d["files_total"] / M,
                                                     r["process0_before"]))
    return "\n".join(out)


def svg(m, path):
    rows, M = m["rows"], m["source_files"]
    ks = [r["parts"] for r in rows]
    ys = [v for r in rows for v in (r["contiguous"]["files_max"], r["contiguous"]["files_total"],
                                    r["dealt"]["files_max"], r["dealt"]["files_total"], r["process0_before"])]
    ys += [v for r in rows if "round_robin" in r for v in (r["round_robin"]["files_max"], r["round_robin"]["files_total"])]
    yr = charts.log_range(ys, 1.3)
    c = charts.Chart("Source files opened, %d -> %d ranks, K processes (model)" % (M, m["targets"]),
                     "processes K", "source files (indexes read)", (min(ks) / 1.2, max(ks) * 1.2), yr,
                     xlog=True, ylog=True)
    c.axes([(k, str(k)) for k in ks], charts.log_ticks(yr[0], yr[1], lambda v: "%g" % v))
    c.line([(r["parts"], r["contiguous"]["files_max"]) for r in rows], charts.COLORS[0], "per process, nearest (now)")
    c.line([(r["parts"], r["contiguous"]["files_total"]) for r in rows], charts.COLORS[0], "all, nearest (now)", "6,4")
    if "round_robin" in rows[0]:
        c.line([(r["parts"], r["round_robin"]["files_max"]) for r in rows], charts.COLORS[2], "per process, round robin")
        c.line([(r["parts"], r["round_robin"]["files_total"]) for r in rows], charts.COLORS[2], "all, round robin", "6,4")
    c.line([(r["parts"], r["dealt"]["files_max"]) for r in rows], charts.COLORS[1], "per process, dealt (older)")
    c.line([(r["parts"], r["dealt"]["files_total"]) for r in rows], charts.COLORS[1], "all, dealt (older)", "6,4")
    c.line([(r["parts"], r["process0_before"]) for r in rows], charts.COLORS[3], "process 0, older (planned all)", "2,3")
    c.line([(k, M / k) for k in ks], "#888", "M / K", "1,3")
    charts.write(path, c.svg())


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("dry_run")
    ap.add_argument("--source-ranks", type=int, required=True)
    ap.add_argument("--round-robin", help="the dry run of the same transform with round-robin replicas")
    ap.add_argument("--parts", default="1,2,4,8,16,32,64")
    ap.add_argument("--svg")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    with open(a.dry_run) as f:
        plan = json.load(f)
    rr_plan = None
    if a.round_robin:
        with open(a.round_robin) as f:
            rr_plan = json.load(f)
    m = model(plan, [int(k) for k in a.parts.split(",")], a.source_ranks, rr_plan)
    print(table(m))
    if a.svg:
        svg(m, a.svg)
    if a.json:
        charts.write(a.json, json.dumps(m, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
