#!/usr/bin/python3
"""`reshard transform` beside the copy floors on a disk and on tmpfs: large checkpoints, few ranks.

  disk.py --reshard PATH [--sizes 1G,4G] [--cases 8to4,8to3,4to8,8rto4c,8cto4r,8rto4r] [--dirs /tmp,/dev/shm]
          [--runs 3] [--variants LABEL,...] [--baseline PATH] [--timeout 1800] [--json OUT] [--tiny] [--keep]

The model: 16 float32 2-D parameters layer<i>.weight of equal shape [R, C] adding up to about the
size (R a multiple of 24, so that every layout below divides it). The layouts (MindSpore's
conventions: dev_matrix left to right, tensor_map entries index device axes from the right):

  8to4  dev [2,4] map [1,0] (dim 0 by the 2-axis, dim 1 by the 4-axis)  ->  dev [4] map [0,-1]
  8to3  dev [2,4] map [1,0]                                           ->  dev [3] map [0,-1]
  4to8  dev [4] map [0,-1]                                            ->  dev [2,4] map [1,0]
  8rto4c  dev [8] map [0,-1] (8 row blocks)                             ->  dev [4] map [-1,0] (4 column blocks)
  8cto4r  dev [8] map [-1,0] (8 column blocks)                          ->  dev [4] map [0,-1]
  8rto4r  dev [8] map [0,-1] (8 row blocks)                             ->  dev [4] map [0,-1]

For every directory of --dirs a fresh temporary directory is made in it (removed at the end unless
--keep); for every size the source checkpoints (SRC/rank_<r>/checkpoint_<r>.ckpt: per source rank
its slice of every parameter made by numpy, one Value per parameter serialized by protobuf's own
Python library as MindSpore writes them, written and dropped; then `sync` on a disk) and the two
protobuf strategy files are generated. Then, --runs times, interleaved:

  cp -r SRC COPY                      the page-cache floor (not durable; the floor on tmpfs)
  cp -r SRC COPY && sync FILES...     the durable floor (not on tmpfs): coreutils' sync fsyncs every
                                      copied file and directory; timed as one unit
  reshard transform                   default flags, --jobs 1, --jobs 2, and, when `reshard
                                      transform --help` lists them, --no-sync, --read-mode pread,
                                      --read-mode mmap, --write-mode buffered, --write-mode direct
                                      (--variants: only those whose labels it lists,
                                      e.g. --variants "reshard" for the default flags alone)
  baseline                            --baseline PATH: another reshard program (the build before a
                                      change) with default flags, in the same shuffled order, its
                                      outputs checked byte-identical to the variants'

The outputs are removed between runs, untimed, followed on a disk by `sync` and a second's pause so
that no write-back of an earlier run falls into the next; the order of the tools is shuffled
(a fixed seed) from run to run. The sources are warm (the page cache cannot be
dropped in a container). Wall time around the process (median [min–max] of the runs), the ratio to
the floor of the filesystem (cp -r on tmpfs, cp -r + sync elsewhere: reshard fsyncs its outputs;
on a disk the ratio to plain cp -r as well), peak RSS by /usr/bin/time (its wait4 ru_maxrss; else
os.wait4 on the direct child). "best --jobs": the fastest of default, --jobs 1 and --jobs 2.

After the timed runs, one untimed run of the first variant with --json records the bytes its reads
took from the files against the tensor bytes the targets needed (the summary's file_bytes_read and
bytes_read; "io" in the JSON).

Checks (any failure: exit status 1): every command exits 0; the outputs of all reshard variants are
byte-identical (SHA-256 of every file), and equal those of the same case on the other filesystems;
on every filesystem, for one case (4to8 if run) at the smallest size, two target files parsed with
protobuf hold numpy's slices of the full tensors by the target layout.

--tiny: size 4M, one run, --dirs /dev/shm unless given (the ctest smoke test bench.disk). Prints a
markdown table per filesystem on stdout (progress on stderr); --json writes the raw results
(report.write_json). Run with /usr/bin/python3 (it has numpy and python3-protobuf).
"""

import argparse
import ctypes
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.join(_HERE, "..", "verify", "python"))
import ms_files  # noqa: E402  (protobuf serialization of one Value)
import ms_proto  # noqa: E402
import ms_scenario  # noqa: E402  (MindSpore's slicing, strategy files)
import report  # noqa: E402  (write_json)
import scale_ranks  # noqa: E402  (run, stats, remove, cell, fmt_bytes, log, git_state)
import transform_e2e  # noqa: E402  (values, digests, parse_size)

from _common import MiB, model as _model  # noqa: E402
PREFIX = "checkpoint_"
# layout name: (dev matrix, tensor map); its rank count is the dev matrix's product
LAYOUTS = {"8": ([2, 4], [1, 0]), "4": ([4], [0, -1]), "3": ([3], [0, -1]),
           "8r": ([8], [0, -1]), "8c": ([8], [-1, 0]), "4c": ([4], [-1, 0])}
CASES = {"8to4": ("8", "4"), "8to3": ("8", "3"), "4to8": ("4", "8"),
         "8rto4c": ("8r", "4c"), "8cto4r": ("8c", "4"), "8rto4r": ("8r", "4")}  # case: (source layout, target layout)
CASE_LABELS = {"8rto4c": "8 rows→4 cols", "8cto4r": "8 cols→4 rows", "8rto4r": "8 rows→4 rows"}  # the others: M→N
CHECK_CASE = "4to8"  # the smallest target files: the one case whose values are checked
log = scale_ranks.log


# ------------------------------------------------------------------------------------------------
# the model and its files

def model(size_bytes):
    """[(name, [R, C])]: 16 equal parameters of about size_bytes in all; R a multiple of 24 (the
    row splits 2, 4, 3), C a multiple of 4."""
    return _model(size_bytes, 24)


def lay(key):
    dev, tmap = LAYOUTS[key]
    return ms_scenario.L(dev, tmap)


def ranks_of(key):
    return math.prod(LAYOUTS[key][0])


def block(pid, shape, box):
    """The float32 values of box (rows x columns) of parameter pid (transform_e2e.values: distinct
    per element and parameter), filled in row blocks of about 8 MiB of values."""
    dims = [b - a for a, b in box]
    out = np.empty(dims, np.float32)
    step = max(1, (2 * MiB) // max(dims[1], 1))
    for r0 in range(box[0][0], box[0][1], step):
        r1 = min(r0 + step, box[0][1])
        out[r0 - box[0][0]:r1 - box[0][0]] = transform_e2e.values(pid, shape, box, r0, r1)
    return out


def keep_heap():
    """Makes glibc's malloc serve large blocks from its heap and keep freed memory, instead of a
    fresh mmap (and munmap) per numpy array, bytes object and serialized message: on a VM where a
    page fault is expensive (here, first touches ran at about 250 MB/s), this makes generating a
    checkpoint several times faster. Only this process: the benchmarked commands are not affected."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD (an int)
    except (OSError, AttributeError):
        pass


def write_strategy(path, mods, params, key):
    ms_scenario._write_strategy(path, [(name, lay(key), shape) for name, shape in params], mods, False)


def generate(src, mods, params, key, on_disk):
    """SRC/rank_<r>/checkpoint_<r>.ckpt for every rank of layout `key`: one parameter slice in
    memory at a time."""
    os.makedirs(src)
    for r in range(ranks_of(key)):
        d = os.path.join(src, "rank_%d" % r)
        os.mkdir(d)
        with open(os.path.join(d, "%s%d.ckpt" % (PREFIX, r)), "wb") as f:
            for pid, (name, shape) in enumerate(params):
                arr = block(pid, shape, ms_scenario.rank_box(lay(key), shape, r))
                data = ms_files._value_bytes(mods.checkpoint, name, "Float32", list(arr.shape), arr.tobytes())
                del arr
                f.write(data)
                del data
    if on_disk:
        os.sync()


def out_name(t):
    return "rank_%d/%s%d.ckpt" % (t, PREFIX, t)


def value_check(mods, out, params, key):
    """Parses two target files with protobuf and compares every tensor with numpy's slice of the
    full tensor by the target layout `key`; '' when all match."""
    errors, got = [], {}
    n = ranks_of(key)
    ranks = [0, n - 1]
    for t in ranks:
        cp = mods.checkpoint.Checkpoint()
        with open(os.path.join(out, out_name(t)), "rb") as f:
            cp.ParseFromString(f.read())
        got[t] = {}
        for v in cp.value:
            if v.tensor.tensor_type != "Float32":
                errors.append("%s: %s is %s" % (out_name(t), v.tag, v.tensor.tensor_type))
            got[t].setdefault(v.tag, [list(v.tensor.dims), []])[1].append(v.tensor.tensor_content)
        del cp
        if sorted(got[t]) != sorted(name for name, _ in params):
            errors.append("%s: parameters %s" % (out_name(t), sorted(got[t])))
    if errors:
        return "; ".join(errors[:3])
    for pid, (name, shape) in enumerate(params):
        full = block(pid, shape, [[0, shape[0]], [0, shape[1]]])
        for t in ranks:
            want = ms_scenario.cut(full, ms_scenario.rank_box(lay(key), shape, t))
            dims, pieces = got[t].pop(name)
            arr = np.frombuffer(b"".join(pieces), np.float32)
            if dims != list(want.shape) or arr.size != want.size or not np.array_equal(arr.reshape(want.shape), want):
                errors.append("%s: %s differs from the full tensor sliced by the target layout" % (out_name(t), name))
        del full
    return "; ".join(errors[:3])


def file_set(d):
    return sorted(os.path.relpath(p, d) for p in transform_e2e.files_of(d))


# ------------------------------------------------------------------------------------------------
# one case

def bench_case(args, fs, work, src, strategies, case, size_label, params, mods, check_values, reference):
    S, D = CASES[case]
    M, N = ranks_of(S), ranks_of(D)
    on_disk = fs["type"] != "tmpfs"
    copy, out = os.path.join(work, "copy"), os.path.join(work, "out")
    floor = "cp -r + sync" if on_disk else "cp -r"
    src_files = file_set(src)
    synced = [os.path.join(copy, f) for f in src_files] + \
        sorted({os.path.join(copy, os.path.dirname(f)) for f in src_files}) + [copy]

    def transform(extra=(), program=None):
        return [program or args.reshard, "transform", "--src-dir", src, "--dst-dir", out, "--src-strategy", strategies[S],
                "--dst-strategy", strategies[D]] + list(extra)

    tools = [("cp -r", ["cp", "-r", src, copy], copy)]
    if on_disk:
        tools.append(("cp -r + sync", ["sh", "-c", 'cp -r "$1" "$2" && shift 2 && exec sync "$@"', "sh", src, copy]
                      + synced, copy))
    for label, extra in args.variants:
        tools.append((label, transform(extra), out))
    if args.baseline:
        tools.append(("baseline", transform(program=args.baseline), out))
    res = {"fs": fs["type"], "dir": fs["path"], "case": case, "size": size_label, "src_ranks": M, "dst_ranks": N,
           "shape": params[0][1], "tensor_bytes": sum(math.prod(s) * 4 for _, s in params), "floor": floor,
           "tools": {}, "checks": {}, "errors": []}
    samples = {k: [] for k, _, _ in tools}
    digests = {}

    def clean(path):
        scale_ranks.remove(path)
        if on_disk:  # the removal written back and the disk let settle: no earlier run's work in the next
            os.sync()
            time.sleep(1)

    clean(copy)
    clean(out)
    rng = random.Random(20261124)
    for i in range(args.runs):  # interleaved: a change of the machine's load hits every tool alike
        # and shuffled: no tool always follows the same one (a rotation keeps the cyclic order, and
        # the tool after `cp -r + sync` then always ran while the disk freed that copy's blocks)
        order = list(tools)
        rng.shuffle(order)
        for key, cmd, dst in order:
            s = scale_ranks.run(cmd, args.timeout)
            samples[key].append(s)
            log("  %s %s run %d %-22s %s" % (size_label, case, i + 1, key, "%.3f s, %s" % (
                s["seconds"], scale_ranks.fmt_bytes(s["peak_rss_bytes"])) if s["status"] == "ok"
                else s["status"] + " " + s["error"]))
            if s["status"] != "ok":
                res["errors"].append("%s run %d: %s %s" % (key, i + 1, s["status"], s["error"]))
            elif i == args.runs - 1 and dst == out:  # the last run's outputs: checked, untimed
                digests[key] = transform_e2e.digests(out)
                if check_values and key == args.variants[0][0]:
                    names = sorted(out_name(t) for t in range(N))
                    e = "" if sorted(digests[key]) == names else "files %s, expected %s" % (
                        sorted(digests[key])[:4], names[:4])
                    e = e or value_check(mods, out, params, D)
                    res["checks"]["values of %s and %s (protobuf + numpy)" % (out_name(0), out_name(N - 1))] = e or "ok"
            clean(dst)
    for key, _, _ in tools:
        res["tools"][key] = scale_ranks.stats(samples[key])
    # the bytes read against the bytes needed: one untimed run with --json
    res["io"] = scale_ranks.summary_io(transform(args.variants[0][1]), args.timeout)
    clean(out)
    if res["io"]["status"] != "ok":
        res["errors"].append("summary run: %s" % res["io"]["error"])

    keys = [k for k, _ in args.variants if k in digests]
    if keys:
        first = keys[0]
        for k in keys[1:] + (["baseline"] if "baseline" in digests else []):
            res["checks"]["%s = %s" % (k, first)] = scale_ranks.compare(digests[k], digests[first]) or "ok"
        ref = reference.setdefault((size_label, case), (fs["path"], digests[first]))
        if ref[0] != fs["path"]:
            res["checks"]["%s = on %s" % (first, ref[0])] = scale_ranks.compare(digests[first], ref[1]) or "ok"
        res["output_files"] = len(digests[first])
    if len(keys) < len(args.variants):
        res["errors"].append("no outputs to compare for %s" % ", ".join(k for k, _ in args.variants if k not in keys))
    for k, v in res["checks"].items():
        if v != "ok":
            res["errors"].append("check %s: %s" % (k, v))
    return res


# ------------------------------------------------------------------------------------------------
# reporting

def best_jobs(r):
    """(label, stats) of the fastest of default, --jobs 1, --jobs 2."""
    cands = [(k, r["tools"][k]) for k in ("reshard", "reshard --jobs 1", "reshard --jobs 2")
             if scale_ranks.ok(r["tools"].get(k))]
    return min(cands, key=lambda kv: kv[1]["median_s"]) if cands else (None, None)


def ratio(st, ref):
    if scale_ranks.ok(st) and scale_ranks.ok(ref):
        return "%.2fx" % (st["median_s"] / ref["median_s"])
    return ""


def args_label(meta):
    return meta["variants"][0][0] if meta["variants"] else "reshard"


def markdown(results, fss, meta):
    out = []
    for fs in fss:
        rows = [r for r in results if r["dir"] == fs["path"]]
        if not rows:
            continue
        on_disk = fs["type"] != "tmpfs"
        floor = "cp -r + sync" if on_disk else "cp -r"
        out += ["### reshard transform vs %s on %s (`%s`, %s)" % (floor, fs["type"], fs["path"], fs["base"]), ""]
        head = ["case", "size", "tool / variant", "median [min–max]", "ratio to floor (%s)" % floor]
        if on_disk:
            head.append("ratio to cp -r")
        head += ["peak RSS"]
        out += ["| " + " | ".join(head) + " |", "|---|---|---|" + "---:|" * (len(head) - 3)]
        for r in rows:
            fl, cp = r["tools"].get(r["floor"]), r["tools"].get("cp -r")
            entries = list(r["tools"].items())
            label, best = best_jobs(r)
            if best:
                entries.append(("best --jobs (%s)" % (label.replace("reshard", "").strip() or "default"), best))
            for key, st in entries:
                bold = key.startswith("best")
                row = [CASE_LABELS.get(r["case"], "%s→%s" % (r["src_ranks"], r["dst_ranks"])), "%s (%s)" % (r["size"], scale_ranks.fmt_bytes(
                    r["tensor_bytes"])), key, scale_ranks.cell(st),
                    ("**%s**" if bold else "%s") % ratio(st, fl) if key != r["floor"] else "1.00x (floor)"]
                if on_disk:
                    row.append(ratio(st, cp))
                row.append(scale_ranks.fmt_bytes(st.get("peak_rss_bytes")))
                out.append("| " + " | ".join(row) + " |")
        gens = ["%s %d ranks %.1f s" % (g["size"], g["ranks"], g["seconds"]) for g in meta["generate"]
                if g["dir"] == fs["path"]]
        checks = [(r["case"], r["size"], k, v) for r in rows for k, v in r["checks"].items()]
        bad = [e for r in rows for e in r["errors"]]
        io = ["%s %s %s" % (CASE_LABELS.get(r["case"], "%s→%s" % (r["src_ranks"], r["dst_ranks"])), r["size"],
                            "%.2f" % r["io"]["read_amplification"]) for r in rows
              if r.get("io", {}).get("status") == "ok" and r["io"]["read_amplification"] is not None]
        out += ["", "Bytes read from the files / tensor bytes needed (%s, one untimed run): %s." % (
            args_label(meta), ", ".join(io) or "not measured")]
        out += ["", "Wall time of the process, median of %d run%s [min–max], interleaved, outputs removed (then "
                "`sync`%s) between runs. Peak RSS: the largest ru_maxrss of the runs (%s). Sources generated in: %s. "
                "Checks: %s." % (meta["runs"], "s" * (meta["runs"] > 1), "" if on_disk else ", on a disk only",
                                 meta["rss_by"], ", ".join(gens),
                                 "**" + "; ".join(bad) + "**" if bad else
                                 "%d ok (variants byte-identical%s)" % (len(checks), ", values" if any(
                                     k.startswith("values") for _, _, k, _ in checks) else "")), ""]
    out.append("Load average %.1f at the start, %.1f at the end; %d CPUs; reshard %s (%s)%s; whole run %.0f s." % (
        meta["load_avg_start"][0], meta["load_avg_end"][0], meta["cpus"], meta["reshard"]["path"],
        meta["reshard"]["mtime"], "; baseline %s" % meta["baseline"] if meta.get("baseline") else "",
        meta["total_s"]) + (
        " **The reshard program changed during the run: the numbers mix two builds.**"
        if meta["reshard"].get("changed_during_run") else ""))
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------

def variants(reshard):
    """[(label, extra arguments)] of the reshard runs, by what `reshard transform --help` lists."""
    try:
        text = subprocess.run([reshard, "transform", "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        sys.exit("disk.py: %s transform --help: %s" % (reshard, e))
    v = [("reshard", []), ("reshard --jobs 1", ["--jobs", "1"]), ("reshard --jobs 2", ["--jobs", "2"])]
    if "--no-sync" in text:
        v.append(("reshard --no-sync", ["--no-sync"]))
    if "--read-mode" in text:
        v += [("reshard --read-mode pread", ["--read-mode", "pread"]), ("reshard --read-mode mmap", ["--read-mode", "mmap"])]
    if "--write-mode" in text:
        v += [("reshard --write-mode buffered", ["--write-mode", "buffered"]),
              ("reshard --write-mode direct", ["--write-mode", "direct"])]
    return v


def fs_type(d):
    p = subprocess.run(["stat", "-f", "-c", "%T", d], capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def main(argv):
    t_start = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reshard", required=True, help="the reshard program")
    ap.add_argument("--sizes", default="1G,4G", help="tensor bytes per checkpoint (K, M, G suffixes)")
    ap.add_argument("--cases", default="8to4,8to3,4to8")
    ap.add_argument("--dirs", help="filesystems to run on (default /tmp,/dev/shm; --tiny: /dev/shm)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--variants", dest="variants_only", help="run only the reshard variants of these labels (comma-separated, e.g. "
                    "'reshard,reshard --jobs 2'; default: all)")
    ap.add_argument("--baseline", help="another reshard program (the build before a change), default flags, run "
                    "interleaved with the others and its outputs compared with theirs")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per command")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--tiny", action="store_true", help="size 4M, one run, /dev/shm: a smoke test")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args(argv[1:])
    if args.tiny:
        args.sizes, args.runs = "4M", 1
    if args.dirs is None:
        args.dirs = "/dev/shm" if args.tiny else "/tmp,/dev/shm"
    cases = args.cases.split(",")
    for c in cases:
        if c not in CASES:
            ap.error("--cases: unknown case %r (valid: %s)" % (c, ", ".join(CASES)))
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    sizes = [(label, transform_e2e.parse_size(label)) for label in args.sizes.split(",")]
    args.reshard = os.path.abspath(args.reshard)
    try:
        st = os.stat(args.reshard)
    except OSError as e:
        ap.error("--reshard: %s" % e)
    args.variants = variants(args.reshard)
    if args.baseline:
        args.baseline = os.path.abspath(args.baseline)
        if not os.access(args.baseline, os.X_OK):
            ap.error("--baseline: %s is not an executable program" % args.baseline)
    if args.variants_only:
        wanted = args.variants_only.split(",")
        unknown = [w for w in wanted if w not in dict(args.variants)]
        if unknown:
            ap.error("--variants: unknown %s (valid: %s)" % (", ".join(unknown), ", ".join(k for k, _ in args.variants)))
        args.variants = [v for v in args.variants if v[0] in wanted]
    mods = ms_proto.load()
    keep_heap()

    fss = []
    for d in args.dirs.split(","):
        if not os.path.isdir(d):
            ap.error("--dirs: %s is not a directory" % d)
        fss.append({"path": d, "type": fs_type(d)})
    meta = {"load_avg_start": list(os.getloadavg()), "runs": args.runs, "cpus": os.cpu_count(),
            "timeout_s": args.timeout, "cases": cases, "sizes": args.sizes, "variants": args.variants,
            "reshard": {"path": args.reshard, "mtime": time.strftime("%Y-%m-%dT%H:%M:%S",
                                                                      time.localtime(st.st_mtime))},
            "baseline": args.baseline,
            "git": scale_ranks.git_state(), "rss_by": "/usr/bin/time" if scale_ranks.TIME else "os.wait4",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "filesystems": fss, "generate": []}
    results, errors, reference = [], [], {}
    log("reshard variants: %s" % ", ".join(k for k, _ in args.variants))
    for fs in fss:
        fs["base"] = tempfile.mkdtemp(prefix="reshard_disk_", dir=fs["path"])
        on_disk = fs["type"] != "tmpfs"
        log("%s (%s): %s" % (fs["path"], fs["type"], fs["base"]))
        try:
            for si, (label, size) in enumerate(sizes):
                params = model(size)
                total = sum(math.prod(s) * 4 for _, s in params)
                free = shutil.disk_usage(fs["base"]).free
                if free < 3.2 * total:
                    errors.append("%s: %s free, %s needs about %s (source, copy, output)" % (
                        fs["path"], scale_ranks.fmt_bytes(free), label, scale_ranks.fmt_bytes(3.2 * total)))
                    log("SKIPPED: " + errors[-1])
                    continue
                work = os.path.join(fs["base"], label)
                os.makedirs(work)
                strategies = {}
                for key in sorted({k for c in cases for k in CASES[c]}):
                    strategies[key] = os.path.join(work, "strategy_%s.ckpt" % key)
                    write_strategy(strategies[key], mods, params, key)
                log("%s: %d x %s float32, %s" % (label, len(params), params[0][1], scale_ranks.fmt_bytes(total)))
                checked = False
                for i, c in enumerate(cases):
                    S = CASES[c][0]
                    M = ranks_of(S)
                    src = os.path.join(work, "src_%s" % S)
                    if not os.path.isdir(src):  # generated when first needed, deleted after its last case
                        t0 = time.perf_counter()
                        generate(src, mods, params, S, on_disk)
                        g = time.perf_counter() - t0
                        meta["generate"].append({"dir": fs["path"], "size": label, "ranks": M, "seconds": g})
                        log("  source on %d ranks generated in %.1f s" % (M, g))
                    check = si == 0 and not checked and (c == CHECK_CASE or CHECK_CASE not in cases)
                    checked = checked or check
                    r = bench_case(args, fs, work, src, strategies, c, label, params, mods, check, reference)
                    results.append(r)
                    errors += ["%s %s %s: %s" % (fs["path"], label, c, e) for e in r["errors"]]
                    if not args.keep and all(CASES[later][0] != S for later in cases[i + 1:]):
                        scale_ranks.remove(src)
                if not args.keep:
                    scale_ranks.remove(work)
        finally:
            if not args.keep:
                scale_ranks.remove(fs["base"])
    meta["load_avg_end"] = list(os.getloadavg())
    meta["total_s"] = time.perf_counter() - t_start
    try:
        end_mtime = os.stat(args.reshard).st_mtime
    except OSError:
        end_mtime = None
    if end_mtime != st.st_mtime:  # rebuilt during the run: the numbers mix two programs
        meta["reshard"]["changed_during_run"] = True
        log("WARNING: %s changed during the run" % args.reshard)
    if args.json:
        report.write_json(args.json, meta, results)
    print(markdown(results, fss, meta))
    if not any(r["checks"] for r in results):
        errors.append("no checks ran")
    for e in errors:
        log("FAILED: " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
