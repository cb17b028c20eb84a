#!/usr/bin/python3
"""Every case of the copy-floor table in one run, each beside its floor, and a chart of the ratios.

  floor.py --reshard PATH [--sizes 1G,4G] [--cases 8rto4r,8cto4r,8rto4c,4to8,8to4] [--dirs /dev/shm,/tmp]
           [--scales 1024,4096,16384] [--runs 5] [--scale-runs 3] [--baseline PATH] [--json OUT] [--svg OUT]
           [--tiny]

It runs the two end-to-end benches in one process, one after the other, and puts their results
side by side:

  disk.py         the large checkpoints (16 float32 parameters adding up to each --sizes) for every
                  --cases on every --dirs, default flags only, --runs times, interleaved with the
                  floor: `cp -r` on tmpfs, `cp -r` + `sync` of every copied file on a disk (reshard
                  fsyncs its outputs, so a durable copy is its floor there)
  scale_ranks.py  the small Megatron-style model saved by M ranks, converted to 3M/4 ranks, for every
                  --scales, beside `cp -r`, with `--jobs 2`, `--jobs 1` and `mpirun -n 2` (Open MPI), --scale-runs
                  times, on tmpfs

Each row gets its target and whether it is met:

  large checkpoints   reshard / floor <= 1.00, by the median on tmpfs and by the slowest run on a
                      disk ("every run": a floor that holds only sometimes is not a floor)
  many ranks          reshard / cp -r <= 1.50 (median)
  mpirun -n 2         faster than one process with one job, and not slower than one with two jobs
                      (medians); once with the transports reshard asks for on one machine, once with
                      Open MPI's own choice (scale_ranks.py --mpi)

--baseline PATH runs another reshard program (the build before a change) with default flags beside
the large cases, interleaved with the others (disk.py --baseline), and adds its ratio to the floor
to each of their rows. The table gives the bytes its reads took from the source files against the tensor bytes its targets needed
(summary file_bytes_read / bytes_read of one untimed run; the aim is 1.00). Both benches check
their outputs (SHA-256 of every file across variants, numpy's slices in sampled targets); any
failed check or command makes the exit status 1. Progress goes to stderr; the combined table, then
each bench's own tables, to stdout. --json writes all results (report.write_json), --svg a bar
chart of each case's ratio to its floor with its target. --tiny: 4M, scales 16 and 64, one run,
/dev/shm only (the ctest smoke test bench.floor). Run with /usr/bin/python3 (numpy, protobuf).
"""

import argparse
import contextlib
import io
import json
import os
import sys
import time

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import charts  # noqa: E402
import disk  # noqa: E402
import report  # noqa: E402
import scale_ranks  # noqa: E402

DISK_TARGET, RANKS_TARGET = 1.00, 1.50
SHORT = {"8rto4r": "8r→4r", "8cto4r": "8c→4r", "8rto4c": "8r→4c", "4to8": "4→2x4", "8to4": "2x4→4",
         "8to3": "2x4→3"}  # the chart's labels of disk.py's cases


def run_bench(module, argv):
    """(exit status, the bench's stdout, its results and meta) of module.main(argv) with --json."""
    out_json = os.path.join(argv.pop(), "%s.json" % module.__name__)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = module.main([module.__name__ + ".py"] + argv + ["--json", out_json])
    data = {"meta": {}, "results": []}
    if os.path.exists(out_json):
        with open(out_json) as f:
            data = json.load(f)
        os.unlink(out_json)
    return rc, buf.getvalue(), data["results"], data["meta"]


def ratio_of(st, ref, key="median_s"):
    if scale_ranks.ok(st) and scale_ranks.ok(ref):
        return st[key] / ref["median_s"]
    return None


def amplification(r):
    io_ = r.get("io") or {}
    return io_.get("read_amplification") if io_.get("status") == "ok" else None


def rows_of(disk_results, scale_results):
    """One row per case: {label, short (the chart's label lines), floor, tool, reshard and floor_st (their
    stats), ratio, lo, hi, goal (the target ratio), target (its wording), met, amp, rss}."""
    rows = []
    for r in disk_results:
        on_disk = r["fs"] != "tmpfs"
        st, fl = r["tools"].get("reshard"), r["tools"].get(r["floor"])
        ratio, lo, hi = ratio_of(st, fl), ratio_of(st, fl, "min_s"), ratio_of(st, fl, "max_s")
        judged = hi if on_disk else ratio  # on a disk every run must be at the floor
        case = disk.CASE_LABELS.get(r["case"], "%d→%d" % (r["src_ranks"], r["dst_ranks"]))
        base = r["tools"].get("baseline")
        rows.append({"label": "%s, %s, %s" % (case, r["size"], r["fs"]), "short": [SHORT.get(r["case"], r["case"]), r["size"], r["fs"]],
                     "floor": r["floor"], "tool": "reshard transform", "reshard": st, "floor_st": fl,
                     "base": ratio_of(base, fl), "base_lo": ratio_of(base, fl, "min_s"),
                     "base_hi": ratio_of(base, fl, "max_s"),
                     "ratio": ratio, "lo": lo, "hi": hi,
                     "goal": DISK_TARGET, "target": "≤ %.2fx%s" % (DISK_TARGET, ", every run" if on_disk else ""),
                     "met": judged is not None and judged <= DISK_TARGET, "amp": amplification(r),
                     "rss": st.get("peak_rss_bytes") if st else None})
    for r in scale_results:
        ranks = "%d→%d ranks" % (r["src_ranks"], r["dst_ranks"])
        d, cp = r.get("default"), r.get("cp")
        rows.append({"label": "%s, tmpfs" % ranks, "short": ["%d→%d" % (r["src_ranks"], r["dst_ranks"]), "ranks", "tmpfs"], "floor": "cp -r",
                     "tool": "reshard transform", "reshard": d, "floor_st": cp, "ratio": ratio_of(d, cp),
                     "lo": ratio_of(d, cp, "min_s"), "hi": ratio_of(d, cp, "max_s"),
                     "goal": RANKS_TARGET, "target": "≤ %.2fx" % RANKS_TARGET,
                     "met": ratio_of(d, cp) is not None and ratio_of(d, cp) <= RANKS_TARGET,
                     "amp": amplification(r), "rss": d.get("peak_rss_bytes") if d else None})
        one, j = r.get("jobs1", d), r.get("jobs2")  # the floor: one process with one job
        for key, label, short in (("mpi", "mpirun -n 2", "-n 2"),
                                  ("mpi_ompi", "mpirun -n 2, Open MPI's transports", "-n 2 ompi")):
            m = r.get(key)
            if not scale_ranks.ok(m):
                continue
            vs_one, vs_two = ratio_of(m, one), ratio_of(m, j)
            rows.append({"label": "%s, %s" % (ranks, label), "short": ["%d→%d" % (r["src_ranks"], r["dst_ranks"]), "mpirun", short],
                         "floor": "one process, --jobs 1", "tool": "mpirun -n 2 reshard transform", "reshard": m,
                         "floor_st": one, "ratio": vs_one, "lo": ratio_of(m, one, "min_s"), "hi": ratio_of(m, one, "max_s"),
                         "goal": 1.0, "target": "< 1.00x, and ≤ 1.00x of --jobs 2 (%s)" % (
                             "%.2fx" % vs_two if vs_two is not None else "not run"),
                         "met": vs_one is not None and vs_one < 1.0 and vs_two is not None and vs_two <= 1.0,
                         "amp": None, "rss": m.get("peak_rss_bytes")})
    return rows


def markdown(rows, meta):
    baseline = any(w.get("base") is not None for w in rows)
    out = ["### Every case beside its floor", "",
           "| case | floor | floor time | reshard | ratio, median [min–max] | target | met | bytes read / needed | peak RSS |"
           + (" baseline, median [min–max] |" if baseline else ""),
           "|---|---|---:|---:|---:|---|---|---:|---:|" + ("---:|" if baseline else "")]
    for w in rows:
        cells = [w["label"], w["floor"], scale_ranks.cell(w["floor_st"]), scale_ranks.cell(w["reshard"]),
                 "**%.2fx** [%.2f–%.2f]" % (w["ratio"], w["lo"], w["hi"]) if w["ratio"] is not None else "",
                 w["target"], "yes" if w["met"] else "**no**",
                 "%.2f" % w["amp"] if w["amp"] is not None else "", scale_ranks.fmt_bytes(w["rss"])]
        if baseline:
            cells.append("%.2fx [%.2f–%.2f]" % (w["base"], w["base_lo"], w["base_hi"]) if w.get("base") is not None else "")
        out.append("| " + " | ".join(cells) + " |")
    met = sum(w["met"] for w in rows)
    out += ["", "%d of %d rows meet their target. Ratio: median of reshard's runs over the floor's median, in "
            "brackets its fastest and slowest run over the same median. Runs: %d per large case, %d per rank "
            "count; load average %.1f at the start, %.1f at the end; whole run %.0f s; reshard %s (git %s)." % (
                met, len(rows), meta["runs"], meta["scale_runs"], meta["load_avg_start"][0],
                meta["load_avg_end"][0], meta["total_s"], meta["reshard"], meta["git"])
            + (" Baseline: %s, default flags, run interleaved with the others, its outputs byte-identical to "
               "reshard's (checked); its ratio is to the same floor." % meta["baseline"] if baseline else "")]
    return "\n".join(out)


def svg(path, rows):
    bars = [w for w in rows if w["ratio"] is not None]
    if not bars:
        return
    vals = [v for w in bars for v in (w["ratio"], w["lo"], w["hi"])] + [DISK_TARGET, RANKS_TARGET]
    width = max(810, 90 + 240 + 64 * len(bars))
    c = charts.Chart("reshard beside its floor, every case (ratio of wall times; lower is better)", "",
                     "reshard / floor (log scale)", (0, len(bars)), charts.log_range(vals, 1.2), ylog=True,
                     width=width, height=480)
    c.bottom = 96
    c.axes([], charts.log_ticks(c.yr[0], c.yr[1], lambda v: "%gx" % v))
    colors = {True: charts.COLORS[2], False: charts.COLORS[1]}
    for i, w in enumerate(bars):
        x0, x1 = c.X(i + 0.15), c.X(i + 0.85)
        c.rect(x0, x1, w["ratio"], colors[w["met"]], "meets its target" if w["met"] else "misses its target",
               (w["lo"], w["hi"]))
        for k, line in enumerate(w["short"]):
            c.text((x0 + x1) / 2, c.top + c.ph() + 14 + 12 * k, line, size=9)
        target = w["goal"]
        c.parts.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222" stroke-width="2" '
                       'stroke-dasharray="4,2"/>' % (c.X(i + 0.05), c.Y(target), c.X(i + 0.95), c.Y(target)))
    c.legend.append(("target (dashed)", "#222", "4,2"))
    charts.write(path, c.svg())


def main(argv):
    t0 = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reshard", required=True, help="the reshard program")
    ap.add_argument("--sizes", default="1G,4G", help="sizes of the large cases ('none': no large cases)")
    ap.add_argument("--cases", default="8rto4r,8cto4r,8rto4c,4to8,8to4")
    ap.add_argument("--dirs", default="/dev/shm,/tmp", help="filesystems of the large cases")
    ap.add_argument("--scales", default="1024,4096,16384", help="source rank counts of the many-rank cases ('none': none)")
    ap.add_argument("--runs", type=int, default=5, help="runs of each large case")
    ap.add_argument("--scale-runs", type=int, default=3, help="runs of each rank count")
    ap.add_argument("--no-mpi", dest="mpi", action="store_false", help="skip mpirun -n 2")
    ap.add_argument("--baseline", help="another reshard program (the build before a change) beside the large cases")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--svg", help="write the chart of ratios here")
    ap.add_argument("--tiny", action="store_true", help="4M, scales 16,64, one run, /dev/shm: a smoke test")
    args = ap.parse_args(argv[1:])
    if args.tiny:
        args.sizes, args.scales, args.runs, args.scale_runs, args.dirs = "4M", "16,64", 1, 1, "/dev/shm"
    if args.runs < 1 or args.scale_runs < 1:
        ap.error("--runs and --scale-runs must be at least 1")
    reshard = os.path.abspath(args.reshard)
    if not os.access(reshard, os.X_OK):
        ap.error("--reshard: %s is not an executable program" % reshard)
    scratch = os.path.dirname(os.path.abspath(args.json)) if args.json else os.getcwd()
    meta = {"load_avg_start": list(os.getloadavg()), "runs": args.runs, "scale_runs": args.scale_runs,
            "reshard": reshard, "baseline": args.baseline and os.path.abspath(args.baseline), "git": scale_ranks.git_state(), "sizes": args.sizes, "cases": args.cases,
            "dirs": args.dirs, "scales": args.scales, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    rc_d, text_d, res_d, meta_d = 0, "", [], {}
    if args.sizes != "none":
        rc_d, text_d, res_d, meta_d = run_bench(disk, [
            "--reshard", reshard, "--sizes", args.sizes, "--cases", args.cases, "--dirs", args.dirs,
            "--runs", str(args.runs), "--variants", "reshard"]
            + (["--baseline", args.baseline] if args.baseline else []) + [scratch])
    rc_s, text_s, res_s, meta_s = 0, "", [], {}
    if args.scales != "none":
        scale_argv = ["--reshard", reshard, "--scales", args.scales, "--runs", str(args.scale_runs), "--no-strace"]
        if args.mpi:
            scale_argv.append("--mpi")
        if args.tiny:
            scale_argv.append("--tiny")
        rc_s, text_s, res_s, meta_s = run_bench(scale_ranks, scale_argv + [scratch])
    meta.update(load_avg_end=list(os.getloadavg()), total_s=time.perf_counter() - t0, disk=meta_d, scale_ranks=meta_s)
    rows = rows_of(res_d, res_s)
    if args.json:
        report.write_json(args.json, meta, {"rows": [{k: v for k, v in w.items() if k not in ("reshard", "floor_st")}
                                                     for w in rows], "disk": res_d, "scale_ranks": res_s})
    if args.svg:
        svg(args.svg, rows)
    print(markdown(rows, meta))
    print()
    print(text_d)
    print()
    print(text_s)
    errors = []
    if rc_d or rc_s:
        errors.append("a bench failed (disk.py exit %d, scale_ranks.py exit %d): see its messages above" % (rc_d, rc_s))
    if not rows or any(w["ratio"] is None for w in rows):
        errors.append("a case has no ratio (a command failed or was skipped)")
    for e in errors:
        scale_ranks.log("FAILED: " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
