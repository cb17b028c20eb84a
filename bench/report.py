#!/usr/bin/python3
"""Markdown tables from Google Benchmark JSON files written by bench_planner, bench_convert and
bench_transform.

usage: bench/report.py RESULT.json... (run with --benchmark_repetitions=N
       --benchmark_report_aggregates_only=true; bench/common.hpp adds the min and max aggregates)
       bench/report.py --splice DOC NAME FILE [NAME FILE]...  (replace DOC's generated block NAME,
       between <!-- begin generated: NAME --> and <!-- end generated: NAME -->, with FILE)

Prints medians of the repetitions with their spread (min-max) and the ratios against the raw
baselines: naive/reshard time for the planner, reshard/memcpy throughput for the converter.
Standard library only.
"""
import json
import os
import re
import sys


def write_json(path, meta, results):
    """Writes {"meta": meta, "results": results} to `path` atomically (a temporary, then rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    os.replace(tmp, path)


def load(paths):
    """{run name without /real_time: {aggregate: entry}} and the contexts."""
    runs, contexts = {}, []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        contexts.append(data.get("context", {}))
        for b in data["benchmarks"]:
            if b.get("run_type") != "aggregate":
                continue
            name = re.sub(r"/real_time$", "", b["run_name"])
            runs.setdefault(name, {})[b["aggregate_name"]] = b
    return runs, contexts


TO_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def seconds(entry, clock="real_time"):
    return entry[clock] * TO_SECONDS[entry["time_unit"]]


def fmt_time(s):
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_ratio(r):
    return f"{r:.0f}x" if r >= 100 else f"{r:.1f}x" if r >= 10 else f"{r:.2f}x"


def has_all(run):
    return all(k in run for k in ("median", "min", "max"))


def planner_table(runs):
    cases = []
    for name in runs:
        m = re.match(r"plan/(.+)/(reshard|naive)$", name)
        if m and m.group(2) == "reshard":
            cases.append(m.group(1))
    if not cases:
        return []
    out = [
        "### Planner: reshard::plan vs naive all-pairs (median of repetitions, [min–max])",
        "",
        "| case | transfers | reshard | ns/transfer | naive | ns/transfer | naive / reshard "
        "| same, CPU time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        fast = runs.get(f"plan/{case}/reshard", {})
        slow = runs.get(f"plan/{case}/naive", {})
        if not has_all(fast) or not has_all(slow):
            out.append(f"| {case} | (missing: skipped or failed) | | | | | | |")
            continue
        n = fast["median"]["transfers"]

        def cell(r):
            return (f"{fmt_time(seconds(r['median']))} "
                    f"[{fmt_time(seconds(r['min']))}–{fmt_time(seconds(r['max']))}]")

        ratio = seconds(slow["median"]) / seconds(fast["median"])
        lo = seconds(slow["min"]) / seconds(fast["max"])
        hi = seconds(slow["max"]) / seconds(fast["min"])
        cpu = seconds(slow["median"], "cpu_time") / seconds(fast["median"], "cpu_time")
        out.append(
            f"| {case} | {n:,.0f} | {cell(fast)} | {fast['median']['per_transfer'] * 1e9:,.0f} "
            f"| {cell(slow)} | {slow['median']['per_transfer'] * 1e9:,.0f} "
            f"| **{fmt_ratio(ratio)}** [{fmt_ratio(lo)}–{fmt_ratio(hi)}] | {fmt_ratio(cpu)} |")
    out.append("")
    out.append("Times are wall clock. ns/transfer = median wall time / transfers. Ratio range: "
               "worst and best pairing of the repetitions (naive min / reshard max .. naive max / "
               "reshard min). The CPU-time ratio (medians of the thread's CPU time) is less "
               "sensitive to other load on the machine.")
    return out


def gbps(entry):
    return entry["bytes_per_second"] / 1e9


def convert_table(runs):
    rows = []
    for name in runs:
        m = re.match(r"convert/run:([0-9]+)(B|KiB|MiB)/reshard/threads:([0-9]+)$", name)
        if m:
            size = int(m.group(1)) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[m.group(2)]
            rows.append((int(m.group(3)), size, m.group(1) + " " + m.group(2)))
    if not rows:
        return []
    rows.sort()
    out = [
        "### Converter: reshard::convert vs memcpy (GB/s = 1e9 bytes copied per second; "
        "median of repetitions, [min–max])",
        "",
        "| threads | run | reshard | memcpy, whole buffer | raw memcpy loop, same runs "
        "| reshard / raw loop | reshard / memcpy |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for threads, _, label in rows:
        base = f"convert/run:{label.replace(' ', '')}"
        fast = runs.get(f"{base}/reshard/threads:{threads}", {})
        raw = runs.get(f"{base}/memcpy_runs/threads:{threads}", {})
        ceiling = runs.get(f"{base}/memcpy/threads:{threads}", {})
        if not (has_all(fast) and has_all(raw) and has_all(ceiling)):
            out.append(f"| {threads} | {label} | (missing: skipped or failed) | | | | |")
            continue

        def cell(r):
            return f"{gbps(r['median']):.2f} [{gbps(r['min']):.2f}–{gbps(r['max']):.2f}]"

        out.append(
            f"| {threads} | {label} | {cell(fast)} | {cell(ceiling)} | {cell(raw)} "
            f"| {gbps(fast['median']) / gbps(raw['median']):.2f}x "
            f"| **{gbps(fast['median']) / gbps(ceiling['median']):.2f}x** |")
    out.append("")
    out.append("memcpy, whole buffer: one memcpy of all the bytes (2 threads: two halves), "
               "measured beside each row. Raw loop: the same runs and strides as reshard's "
               "copies, as a hand-written loop of memcpy calls.")
    return out


def transform_table(runs):
    floor = runs.get("copy_bytes_baseline", {})
    rows = []
    for name in runs:
        m = re.match(r"transform_8to4/jobs:([0-9]+)/buffer_MiB:([0-9]+)$", name)
        if m:
            rows.append((int(m.group(1)), int(m.group(2)), name))
    if not rows or not has_all(floor):
        return []
    rows.sort(key=lambda r: (r[1] != 4, r[1], r[0]))
    out = [
        "### Checkpoint transform (library): transform_checkpoints vs the I/O floor "
        "(median of repetitions, [min–max])",
        "",
        "| run | time | vs floor | peak RSS so far |",
        "|---|---:|---:|---:|",
    ]

    def cell(r):
        return (f"{fmt_time(seconds(r['median']))} "
                f"[{fmt_time(seconds(r['min']))}–{fmt_time(seconds(r['max']))}]")

    out.append(f"| I/O floor (read once, write once) | {cell(floor)} | 1.00x "
               f"| {floor['median'].get('peak_rss_MiB', 0):.0f} MiB |")
    for jobs, buf, name in rows:
        r = runs[name]
        if not has_all(r):
            out.append(f"| transform, {jobs} job{'s' * (jobs > 1)}, {buf} MiB pieces | (missing) | | |")
            continue
        out.append(f"| transform, {jobs} job{'s' * (jobs > 1)}, {buf} MiB pieces | {cell(r)} "
                   f"| **{seconds(r['median']) / seconds(floor['median']):.2f}x** "
                   f"| {r['median'].get('peak_rss_MiB', 0):.0f} MiB |")
    out.append("")
    out.append("Peak RSS is the process's peak so far (rows run in order, so a row cannot show less than "
               "the rows before it).")
    return out


def splice(doc, name, text_path):
    """Replaces the lines between `<!-- begin generated: NAME -->` and `<!-- end generated: NAME -->`
    in doc with the contents of text_path (atomically). Returns False if the markers are absent."""
    with open(doc, encoding="utf-8") as f:
        content = f.read()
    begin, end = f"<!-- begin generated: {name} -->", f"<!-- end generated: {name} -->"
    a, b = content.find(begin), content.find(end)
    if a < 0 or b < a:
        return False
    with open(text_path, encoding="utf-8") as f:
        body = f.read().strip("\n")
    content = content[:a + len(begin)] + "\n" + body + "\n" + content[b:]
    with open(doc + ".tmp", "w", encoding="utf-8") as f:
        f.write(content)
    os.replace(doc + ".tmp", doc)
    return True


def main(argv):
    if len(argv) >= 2 and argv[1] == "--splice":
        if len(argv) < 5 or (len(argv) - 3) % 2:
            print("usage: report.py --splice DOC NAME FILE [NAME FILE]...", file=sys.stderr)
            return 2
        missing = [argv[i] for i in range(3, len(argv), 2) if not splice(argv[2], argv[i], argv[i + 1])]
        for m in missing:
            print(f"report.py --splice: {argv[2]} has no '<!-- begin generated: {m} -->' block", file=sys.stderr)
        return 1 if missing else 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs, contexts = load(argv[1:])
    lines = []
    for ctx in contexts:
        load_avg = ctx.get("load_avg", [])
        lines.append(
            f"<!-- {ctx.get('executable', '?')}: {ctx.get('num_cpus', '?')} cpus at "
            f"{ctx.get('mhz_per_cpu', '?')} MHz, load average at start "
            f"{', '.join(f'{x:.2f}' for x in load_avg)} -->")
        if load_avg and load_avg[0] > 0.5:
            lines.append(f"> warning: load average {load_avg[0]:.2f} when "
                         f"{ctx.get('executable', '?')} started; other work was running")
    lines.append("")
    for table in (planner_table(runs), convert_table(runs), transform_table(runs)):
        if table:
            lines.extend(table)
            lines.append("")
    print("\n".join(lines).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
