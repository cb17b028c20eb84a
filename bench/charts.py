#!/usr/bin/python3
"""SVG charts of the benchmark results, drawn by this file (standard library only).

  charts.py OUT_DIR [--planner planner.json] [--convert convert.json] [--e2e transform_e2e.json]

Writes, for each input given:
  planner_scaling.svg    reshard::plan vs the naive all-pairs planner over source ranks, log-log
                         (Google Benchmark JSON of bench_planner, medians with min-max bars)
  convert_bandwidth.svg  reshard::convert, the raw memcpy loop and one whole-buffer memcpy, GB/s
                         over the contiguous run length (bench_convert JSON)
  transform_e2e.svg      end-to-end transform: reshard, MindSpore's algorithm in numpy, the I/O
                         floor, seconds on a log scale (bench/transform_e2e.py --json)
Each file is written atomically (temporary + rename).
"""

import json
import math
import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402  (Google Benchmark JSON loading)

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
FONT = 'font-family="DejaVu Sans, Arial, sans-serif"'


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Chart:
    """A plot area with linear or log axes; series drawn in data coordinates."""

    def __init__(self, title, xlabel, ylabel, xr, yr, xlog=False, ylog=False, width=810, height=440):
        self.w, self.h = width, height
        self.left, self.right, self.top, self.bottom = 78, 240, 40, 56
        self.xr, self.yr, self.xlog, self.ylog = xr, yr, xlog, ylog
        self.parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">'
                      % (width, height, width, height),
                      '<rect width="100%" height="100%" fill="white"/>',
                      '<text x="%d" y="22" font-size="15" %s font-weight="bold">%s</text>'
                      % (self.left, FONT, esc(title)),
                      '<text x="%d" y="%d" font-size="12" %s text-anchor="middle">%s</text>'
                      % (self.left + self.pw() / 2, height - 12, FONT, esc(xlabel)),
                      '<text x="16" y="%d" font-size="12" %s text-anchor="middle" transform="rotate(-90 16 %d)">%s</text>'
                      % (self.top + self.ph() / 2, FONT, self.top + self.ph() / 2, esc(ylabel))]
        self.legend = []

    def pw(self):
        return self.w - self.left - self.right

    def ph(self):
        return self.h - self.top - self.bottom

    def _t(self, v, r, log):
        lo, hi = (math.log10(r[0]), math.log10(r[1])) if log else r
        v = math.log10(v) if log else v
        return (v - lo) / (hi - lo)

    def X(self, v):
        return self.left + self._t(v, self.xr, self.xlog) * self.pw()

    def Y(self, v):
        return self.top + (1 - self._t(v, self.yr, self.ylog)) * self.ph()

    def axes(self, xticks, yticks):
        p = self.parts
        for v, label in yticks:
            y = self.Y(v)
            p.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>' % (self.left, y, self.left + self.pw(), y))
            p.append('<text x="%.1f" y="%.1f" font-size="11" %s text-anchor="end">%s</text>' % (self.left - 6, y + 4, FONT, esc(label)))
        for v, label in xticks:
            x = self.X(v)
            p.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>' % (x, self.top, x, self.top + self.ph()))
            p.append('<text x="%.1f" y="%.1f" font-size="11" %s text-anchor="middle">%s</text>'
                     % (x, self.top + self.ph() + 16, FONT, esc(label)))
        p.append('<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#333"/>'
                 % (self.left, self.top, self.pw(), self.ph()))

    def line(self, pts, color, label, dash=None, bars=None):
        """pts: [(x, y)]; bars: [(x, lo, hi)] drawn as vertical whiskers."""
        d = " ".join("%s%.1f,%.1f" % ("M" if i == 0 else "L", self.X(x), self.Y(y)) for i, (x, y) in enumerate(pts))
        self.parts.append('<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>'
                          % (d, color, ' stroke-dasharray="%s"' % dash if dash else ""))
        for x, y in pts:
            self.parts.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (self.X(x), self.Y(y), color))
        for x, lo, hi in bars or []:
            self.parts.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>'
                              % (self.X(x), self.Y(lo), self.X(x), self.Y(hi), color))
        self.legend.append((label, color, dash))

    def rect(self, x0, x1, y, color, label=None, whisker=None):
        base = self.Y(self.yr[0])
        self.parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>'
                          % (x0, self.Y(y), x1 - x0, base - self.Y(y), color))
        if whisker:
            xm = (x0 + x1) / 2
            self.parts.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222"/>'
                              % (xm, self.Y(whisker[0]), xm, self.Y(whisker[1])))
        if label and all(label != l for l, _, _ in self.legend):
            self.legend.append((label, color, None))

    def text(self, x, y, s, size=11, anchor="middle"):
        self.parts.append('<text x="%.1f" y="%.1f" font-size="%d" %s text-anchor="%s">%s</text>'
                          % (x, y, size, FONT, anchor, esc(s)))

    def svg(self):
        x, y = self.left + self.pw() + 14, self.top + 8
        for label, color, dash in self.legend:
            self.parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%d"%s/>'
                              % (x, y, x + 22, y, color, 2 if dash is not None or True else 8,
                                 ' stroke-dasharray="%s"' % dash if dash else ""))
            self.parts.append('<text x="%d" y="%d" font-size="11" %s>%s</text>' % (x + 28, y + 4, FONT, esc(label)))
            y += 18
        return "\n".join(self.parts + ["</svg>", ""])


def log_ticks(lo, hi, fmt):
    """Ticks at 1, 10, 100...; also at 2 and 5 when the range spans at most 3 decades."""
    steps = (1, 2, 5) if math.log10(hi / lo) <= 3.01 else (1,)
    out, e = [], math.floor(math.log10(lo))
    while 10 ** e <= hi * 1.0001:
        for m in steps:
            v = m * 10 ** e
            if lo * 0.9999 <= v <= hi * 1.0001:
                out.append((v, fmt(v)))
        e += 1
    return out


def fmt_seconds(s):
    for unit, f in (("s", 1), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= f:
            v = s / f
            return ("%g" % round(v, 6)) + " " + unit
    return "%g s" % s


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def log_range(values, pad=1.5):
    lo, hi = min(values), max(values)
    return 10 ** math.floor(math.log10(lo / pad)), 10 ** math.ceil(math.log10(hi * pad))


# ------------------------------------------------------------------------------------------------

def planner_chart(path, out):
    runs, _ = report.load([path])
    series = {}
    for name, r in runs.items():
        m = re.match(r"plan/(megatron|grid2d)/([0-9]+)->([0-9]+)/(reshard|naive)$", name)
        if m and report.has_all(r):
            series.setdefault((m.group(1), m.group(4)), []).append(
                (int(m.group(2)), report.seconds(r["median"]), report.seconds(r["min"]), report.seconds(r["max"])))
    if not series:
        return None
    xs = [p[0] for s in series.values() for p in s]
    ys = [v for s in series.values() for p in s for v in p[1:]]
    c = Chart("Planning one tensor: reshard::plan vs naive all-pairs", "source ranks (log scale)",
              "time per plan, median (log scale)", (min(xs) / 1.5, max(xs) * 1.5), log_range(ys), xlog=True, ylog=True)
    c.axes([(x, str(x)) for x in sorted(set(xs))], log_ticks(c.yr[0], c.yr[1], fmt_seconds))
    style = {("megatron", "reshard"): (COLORS[0], None), ("megatron", "naive"): (COLORS[0], "6,4"),
             ("grid2d", "reshard"): (COLORS[1], None), ("grid2d", "naive"): (COLORS[1], "6,4")}
    for key in sorted(series):
        pts = sorted(series[key])
        color, dash = style.get(key, (COLORS[2], None))
        c.line([(x, y) for x, y, _, _ in pts], color, "%s, %s" % key, dash, [(x, lo, hi) for x, _, lo, hi in pts])
    write(os.path.join(out, "planner_scaling.svg"), c.svg())
    return "planner_scaling.svg"


def convert_chart(path, out):
    runs, _ = report.load([path])
    series = {}
    for name, r in runs.items():
        m = re.match(r"convert/run:([0-9]+)(B|KiB|MiB)/(reshard|memcpy|memcpy_runs)/threads:([0-9]+)$", name)
        if m and report.has_all(r):
            size = int(m.group(1)) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[m.group(2)]
            series.setdefault((m.group(3), int(m.group(4))), []).append(
                (size, report.gbps(r["median"]), report.gbps(r["min"]), report.gbps(r["max"])))
    if not series:
        return None
    xs = sorted({p[0] for s in series.values() for p in s})
    ymax = max(p[3] for s in series.values() for p in s)
    c = Chart("reshard::convert vs memcpy (tensor parallel 2 -> 4)", "contiguous run length (log scale)",
              "GB/s, median", (xs[0] / 1.6, xs[-1] * 1.6), (0, math.ceil(ymax / 2 + 0.5) * 2), xlog=True)

    def size_label(b):
        return "%d B" % b if b < 1024 else "%d KiB" % (b >> 10) if b < 1 << 20 else "%d MiB" % (b >> 20)

    step = 2 if c.yr[1] <= 16 else 5
    c.axes([(x, size_label(x)) for x in xs], [(v, str(v)) for v in range(0, int(c.yr[1]) + 1, step)])
    names = {"reshard": "reshard::convert", "memcpy_runs": "raw memcpy loop", "memcpy": "memcpy, whole buffer"}
    colors = {"reshard": COLORS[0], "memcpy_runs": COLORS[2], "memcpy": COLORS[3]}
    for (kind, threads) in sorted(series, key=lambda k: (k[1], ["reshard", "memcpy_runs", "memcpy"].index(k[0]))):
        pts = sorted(series[(kind, threads)])
        c.line([(x, y) for x, y, _, _ in pts], colors[kind], "%s, %d thread%s" % (names[kind], threads, "s" * (threads > 1)),
               None if threads == 1 else "6,4", [(x, lo, hi) for x, _, lo, hi in pts])
    write(os.path.join(out, "convert_bandwidth.svg"), c.svg())
    return "convert_bandwidth.svg"


def e2e_chart(path, out):
    with open(path) as f:
        results = json.load(f)["results"]
    if not results:
        return None
    tools = [("reshard", "reshard transform", COLORS[0]), ("numpy", "MindSpore's way, numpy", COLORS[1]),
             ("floor", "I/O floor, mmap", COLORS[2]), ("floor_pread", "I/O floor, pread", COLORS[3])]
    vals = [r[k][a] for r in results for k, _, _ in tools if r.get(k) for a in ("min_s", "max_s")]
    width = max(810, 120 + 110 * len(results) + 240)
    c = Chart("Checkpoint transform, end to end (wall time, median of runs; bars: min-max)", "",
              "seconds (log scale)", (0, 1), log_range(vals), ylog=True, width=width)
    c.axes([], log_ticks(c.yr[0], c.yr[1], fmt_seconds))
    group = c.pw() / len(results)
    bar = group * 0.8 / len(tools)
    for i, r in enumerate(results):
        x0 = c.left + i * group + group * 0.1
        for j, (key, label, color) in enumerate(tools):
            st = r.get(key)
            if not st:
                c.text(x0 + (j + 0.5) * bar, c.Y(c.yr[0]) - 4, "n/a", 9)  # skipped (see the table)
                continue
            c.rect(x0 + j * bar, x0 + (j + 1) * bar - 1, st["median_s"], color, label, (st["min_s"], st["max_s"]))
            v = st["median_s"]
            c.text(x0 + (j + 0.5) * bar, min(c.Y(v), c.Y(st["max_s"])) - 3,
                   "%.2g" % v if v < 10 else "%.0f" % v, 9)
        c.text(x0 + group * 0.4, c.top + c.ph() + 16, "%s %s" % (r["size"], r["case"].replace("to", "→")))
    write(os.path.join(out, "transform_e2e.svg"), c.svg())
    return "transform_e2e.svg"


def main(argv):
    args = argv[1:]
    if not args or args[0].startswith("--"):
        print(__doc__, file=sys.stderr)
        return 2
    out, inputs = args[0], {}
    it = iter(args[1:])
    for a in it:
        if a not in ("--planner", "--convert", "--e2e"):
            print("charts.py: unknown option %s" % a, file=sys.stderr)
            return 2
        inputs[a] = next(it, None)
    os.makedirs(out, exist_ok=True)
    made = []
    for opt, fn in (("--planner", planner_chart), ("--convert", convert_chart), ("--e2e", e2e_chart)):
        if inputs.get(opt):
            name = fn(inputs[opt], out)
            if name:
                made.append(os.path.join(out, name))
    for m in made:
        print("wrote %s" % m, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
