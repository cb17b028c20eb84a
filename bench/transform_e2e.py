#!/usr/bin/python3
"""End-to-end checkpoint transform: `reshard transform` (the program) beside MindSpore's algorithm
in numpy (bench/mindspore_baseline.py) and the I/O floor (`bench_transform --io-floor`: every
source byte read once, as many bytes as the targets hold written once; from read-only mappings
of the sources (--mmap, one copy: the floor reshard is compared with) and through a pread buffer).

  transform_e2e.py --reshard PATH --floor PATH [--sizes 256M,1G,4G] [--cases 8to4,8to3,4to8]
                   [--runs 3] [--numpy-runs-large 1] [--dir DIR] [--json OUT] [--tiny] [--keep]

For each size a GPT-like checkpoint is generated (4 layers of qkv / proj / fc1 / fc2 weights and
biases, layer norms, a vocabulary-parallel embedding; float32; hidden size chosen so that the
tensors add up to about the size) on 8 ranks (dev [2,4] = dp 2 x tp 4, the weights with optimizer
sharding over dp), and for 4to8 on 4 ranks. The conversions:

  8to4  dev [2,4] opt 2  ->  dev [2,2] opt 2
  8to3  dev [2,4] opt 2  ->  dev [3] (tp 3: no divisor relation, so MindSpore's way goes through
                              the full tensors)
  4to8  dev [2,2] opt 2  ->  dev [2,4] opt 2

Each tool runs --runs times (the numpy baseline --numpy-runs-large times at sizes of 4 GiB and up),
outputs removed between runs (untimed); wall time and the peak resident set of the process
(wait4's ru_maxrss, through `bench_transform --measure`) are recorded, and the median, min and max
reported. Neither converter writes the crc_num trailer unless --crc (as MindSpore's
transform_checkpoints, whose save_checkpoint does not by default). The outputs of reshard and of the baseline are compared: byte for byte
(SHA-256 of every file), and if the bytes differ, tensor by tensor.

The files live in DIR (default: a fresh directory under /dev/shm, removed at the end; every size's
data is deleted before the next). The page cache cannot be dropped in a container: the source
files are read once before the timed runs (on tmpfs they are in memory anyway), so every run sees
warm sources. --tiny: a small model and one run, a smoke test for ctest. Prints markdown tables;
--json writes the raw results. Run with /usr/bin/python3.
"""

import argparse
import hashlib
import json
import math
import os
import re
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
import mindspore_baseline as msb  # noqa: E402
import ms_proto  # noqa: E402
import ms_scenario  # noqa: E402
import report  # noqa: E402  (write_json)

MiB = 1 << 20
GiB = 1 << 30

# ------------------------------------------------------------------------------------------------
# the model and its layouts

MESH = {8: ([2, 4], 2), 4: ([2, 2], 2), 3: ([3], 0)}  # ranks: (dev matrix [dp, tp] or [tp], opt size)
CASES = {"8to4": (8, 4), "8to3": (8, 3), "4to8": (4, 8)}
NUMPY_MEMORY = {"8to4": 2.6, "8to3": 4.0, "4to8": 2.8}  # x tensor bytes: the baseline's peak RSS + outputs


def model(hidden, layers):
    """[(name, shape, tensor map over [dp, tp] (axis 0 = tp), optimizer-sharded)] of a GPT-like
    model: column-parallel weights split dim 1, row-parallel dim 0, norms and row biases replicated."""
    h, p = hidden, []
    p.append(("embedding.word_embedding.embedding_table", [8 * h, h], [0, -1], True))
    for i in range(layers):
        b = "layers.%d." % i
        p += [(b + "layernorm1.gamma", [h], [-1], False), (b + "layernorm1.beta", [h], [-1], False),
              (b + "attention.qkv.weight", [h, 3 * h], [-1, 0], True), (b + "attention.qkv.bias", [3 * h], [0], False),
              (b + "attention.projection.weight", [h, h], [0, -1], True),
              (b + "attention.projection.bias", [h], [-1], False),
              (b + "layernorm2.gamma", [h], [-1], False), (b + "layernorm2.beta", [h], [-1], False),
              (b + "output.mapping.weight", [h, 4 * h], [-1, 0], True), (b + "output.mapping.bias", [4 * h], [0], False),
              (b + "output.projection.weight", [4 * h, h], [0, -1], True),
              (b + "output.projection.bias", [h], [-1], False)]
    p += [("layernorm.gamma", [h], [-1], False), ("layernorm.beta", [h], [-1], False)]
    return p


def layout(ranks, tmap, opt):
    dev, size = MESH[ranks]
    step = dev[-1]
    return ms_scenario.L(dev, tmap, opt=(step, size) if opt and size > 1 else (0, 0))


def hidden_for(size_bytes, layers):
    per = 4 * (8 + 12 * layers)  # bytes per h^2 (the vectors are negligible)
    return max(24, round(math.sqrt(size_bytes / per) / 24) * 24)


def write_strategy(path, ranks, params):
    mods = ms_proto.load()
    ms_scenario._write_strategy(path, [(n, layout(ranks, m, o), s) for n, s, m, o in params], mods, False)


# ------------------------------------------------------------------------------------------------
# fast generation: protobuf framing by hand, contents written from numpy in blocks

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def value_header(name, dims, nbytes):
    """Bytes of `Checkpoint{value: Value{tag, tensor{dims, tensor_type Float32, content}}}` up to
    the content, whose nbytes follow."""
    tensor = b"".join(b"\x08" + varint(d) for d in dims) + b"\x12\x07Float32" + b"\x1a" + varint(nbytes)
    tlen = len(tensor) + nbytes
    tag = name.encode()
    value = b"\x0a" + varint(len(tag)) + tag + b"\x12" + varint(tlen) + tensor
    vlen = len(value) + nbytes
    return b"\x0a" + varint(vlen) + value


def values(pid, shape, box, r0, r1):
    """float32 contents of rows r0..r1 of box (a distinct, finite value for every element of every
    parameter: 1.x with 23 hashed mantissa bits)."""
    if not shape:
        lin = np.zeros(1, np.uint64)
    else:
        cols = shape[1] if len(shape) > 1 else 1
        rows = np.arange(r0, r1, dtype=np.uint64)
        if len(shape) > 1:
            c = np.arange(box[1][0], box[1][1], dtype=np.uint64)
            lin = rows[:, None] * np.uint64(cols) + c[None, :]
        else:
            lin = rows
    x = lin * np.uint64(2654435761) + np.uint64(pid * 40503 + 1)
    x ^= x >> np.uint64(29)
    bits = (x & np.uint64(0x7FFFFF)).astype(np.uint32) | np.uint32(0x3F800000)
    return bits.view(np.float32)


class _Hasher:
    """A write-only file whose contents are only hashed."""

    def __init__(self):
        self.h = hashlib.sha256()

    def write(self, data):
        self.h.update(data)


def expected_digests(ranks, params, prefix="checkpoint_"):
    """SHA-256 of the files a converter to `ranks` must write: the generator's own slicing of the
    same values for the target layout, framed the same way (no file is written)."""
    out = {}
    for t in range(ranks):
        h = _Hasher()
        write_rank(h, ranks, t, params)
        out["rank_%d/%s%d.ckpt" % (t, prefix, t)] = h.h.hexdigest()
    return out


def write_rank(f, ranks, rank, params):
    """The checkpoint of `rank` under the layouts on `ranks` ranks, written to the file object f."""
    for pid, (name, shape, tmap, opt) in enumerate(params):
        box = ms_scenario.rank_box(layout(ranks, tmap, opt), shape, rank)
        dims = [b - a for a, b in box]
        n = math.prod(dims) * 4
        f.write(value_header(name, dims, n))
        if not shape:
            f.write(values(pid, shape, box, 0, 1).tobytes())
            continue
        row_elems = math.prod(dims[1:]) if len(dims) > 1 else 1
        step = max(1, (8 << 20) // max(row_elems, 1))
        for r0 in range(box[0][0], box[0][1], step):
            f.write(values(pid, shape, box, r0, min(r0 + step, box[0][1])).tobytes())


def generate(d, ranks, params):
    os.makedirs(d, exist_ok=True)
    for r in range(ranks):
        rd = os.path.join(d, "rank_%d" % r)
        os.makedirs(rd, exist_ok=True)
        with open(os.path.join(rd, "net.ckpt"), "wb") as f:
            write_rank(f, ranks, r, params)


def largest_slice(ranks, params):
    return max(math.prod(b - a for a, b in ms_scenario.rank_box(layout(ranks, m, o), s, r)) * 4
               for n, s, m, o in params for r in range(ranks))


# ------------------------------------------------------------------------------------------------
# running and checking

def run(launcher, cmd):
    """(wall seconds, peak RSS bytes) of one run of cmd, measured by `bench_transform --measure`
    (a small launcher: a child of this Python process would inherit its resident set into
    ru_maxrss). Raises on failure."""
    p = subprocess.run([launcher, "--measure"] + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.decode(errors="replace").rstrip()
    last = err.rsplit("\n", 1)[-1]
    if p.returncode != 0 or not last.startswith("bench_transform --measure: "):
        raise RuntimeError("%s failed (exit %d): %s" % (" ".join(cmd), p.returncode, err))
    fields = dict(kv.split("=") for kv in last.split(": ", 1)[1].split())
    return float(fields["seconds"]), int(fields["peak_rss_bytes"])


def files_of(d):
    out = []
    for root, _, names in os.walk(d):
        out += [os.path.join(root, n) for n in names]
    return sorted(out)


def digests(d):
    out = {}
    for path in files_of(d):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while True:
                block = f.read(16 << 20)
                if not block:
                    break
                h.update(block)
        out[os.path.relpath(path, d)] = h.hexdigest()
    return out


def compare_values(a, b):
    """'' when every file of a and b holds the same tensors, else the first difference."""
    fa, fb = [os.path.relpath(p, a) for p in files_of(a)], [os.path.relpath(p, b) for p in files_of(b)]
    if fa != fb:
        return "different files: %s vs %s" % (fa, fb)
    for rel in fa:
        x, y = msb.load_checkpoint(os.path.join(a, rel)), msb.load_checkpoint(os.path.join(b, rel))
        if list(x) != list(y):
            return "%s: parameters %s vs %s" % (rel, list(x), list(y))
        for name in x:
            if x[name][0] != y[name][0] or x[name][1].shape != y[name][1].shape or \
                    x[name][1].tobytes() != y[name][1].tobytes():
                return "%s: parameter %s differs" % (rel, name)
    return ""


def stats(samples):
    walls = [w for w, _ in samples]
    return {"runs": [{"seconds": w, "peak_rss_bytes": m} for w, m in samples],
            "median_s": statistics.median(walls), "min_s": min(walls), "max_s": max(walls),
            "peak_rss_bytes": max(m for _, m in samples)}


def dir_bytes(d):
    return sum(os.path.getsize(p) for p in files_of(d))


def bench_case(args, work, case, params, size_label, total_bytes):
    M, N = CASES[case]
    src = os.path.join(work, "src%d" % M)
    src_s, dst_s = os.path.join(work, "strategy%d.ckpt" % M), os.path.join(work, "strategy%d.ckpt" % N)
    out_r, out_n, out_f = (os.path.join(work, "out_" + k) for k in ("reshard", "numpy", "floor"))
    for path in files_of(src):  # warm-up: the sources are read once before the timed runs
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass
    runs = args.runs
    crc = ["--crc"] if args.crc else []
    numpy_runs = args.numpy_runs_large if total_bytes >= 3 * GiB else runs
    res = {"case": case, "size": size_label, "tensor_bytes": total_bytes, "src_ranks": M, "dst_ranks": N,
           "source_file_bytes": dir_bytes(src), "largest_target_slice_bytes": largest_slice(N, params),
           "check": "numpy not run"}

    samples = []
    for _ in range(runs):
        shutil.rmtree(out_r, ignore_errors=True)
        samples.append(run(args.floor, [args.reshard, "transform", "--src-dir", src, "--dst-dir", out_r, "--src-strategy", src_s,
                            "--dst-strategy", dst_s] + crc))
    res["reshard"] = stats(samples)
    res["target_file_bytes"] = dir_bytes(out_r)
    want = digests(out_r)
    shutil.rmtree(out_r)
    # The generator, slicing the same values for the target layout, must give the same bytes
    # (no crc_num trailer: the generator writes none).
    res["expected"] = None if args.crc else ("identical" if want == expected_digests(N, params) else "DIFFERENT")  # not kept: at 4 GiB the sources, both outputs and the baseline do not fit in memory

    # The numpy baseline holds every loaded source file, a deep copy of it and the targets: a peak
    # RSS of 1.6x (8to4), 3.0x (8to3), 1.8x (4to8) the tensor bytes at 1 GiB, plus its outputs on
    # tmpfs. Skipped rather than run into the OOM killer when MemAvailable (which excludes the files
    # on tmpfs) is short.
    need = (args.numpy_memory_factor or NUMPY_MEMORY[case]) * total_bytes + 2 * GiB
    avail = mem_available()
    if avail is not None and need > avail:
        res["numpy"] = None
        res["check"] = "numpy skipped: needs about %s, %s available" % (fmt_bytes(need), fmt_bytes(avail))
        numpy_runs = 0
    samples = []
    for _ in range(numpy_runs):
        shutil.rmtree(out_n, ignore_errors=True)
        # first in line for the OOM killer if memory runs out after all (other jobs share the machine)
        cmd = ["/bin/sh", "-c", 'echo 1000 > /proc/self/oom_score_adj 2>/dev/null; exec "$@"', "sh", sys.executable,
               args.baseline, src, out_n, "checkpoint_", src_s, dst_s] + crc
        try:
            samples.append(run(args.floor, cmd))
        except RuntimeError as e:
            print("numpy baseline failed: %s" % e, file=sys.stderr)
            res["numpy"] = None
            code = re.search(r"\(exit (-?[0-9]+)\)", str(e))
            res["check"] = "numpy baseline failed (exit %s%s)" % (
                code.group(1) if code else "?", ": killed, out of memory?" if code and code.group(1) == "137" else "")
            numpy_runs = 0
            shutil.rmtree(out_n, ignore_errors=True)
            break
    if numpy_runs:
        res["numpy"] = stats(samples)
        got = digests(out_n)
        if got == want:
            res["check"] = "bytes identical"
        else:
            run(args.floor, [args.reshard, "transform", "--src-dir", src, "--dst-dir", out_r, "--src-strategy", src_s,
                             "--dst-strategy", dst_s] + crc)
            diff = compare_values(out_r, out_n)
            res["check"] = "values identical" if not diff else "MISMATCH: " + diff
            shutil.rmtree(out_r)
        shutil.rmtree(out_n)

    per_target = res["target_file_bytes"] // N
    writes = [str(per_target + (1 if t < res["target_file_bytes"] % N else 0)) for t in range(N)]
    for key, mode in (("floor", ["--mmap"]), ("floor_pread", [])):
        samples = []
        for _ in range(runs):
            shutil.rmtree(out_f, ignore_errors=True)
            cmd = [args.floor, "--io-floor", out_f] + mode
            for w in writes:
                cmd += ["--write", w]
            samples.append(run(args.floor, cmd + files_of(src)))
        res[key] = stats(samples)
        shutil.rmtree(out_f)
    return res


def mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": MiB, "G": GiB}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def fmt_bytes(b):
    return "%.0f MiB" % (b / MiB) if b < 10 * GiB else "%.1f GiB" % (b / GiB)


def fmt_s(s):
    return "%.2f s" % s if s < 100 else "%.0f s" % s


def cell(st):
    if st["min_s"] == st["max_s"]:
        return "%s (1 run)" % fmt_s(st["median_s"])
    return "%s [%s–%s]" % (fmt_s(st["median_s"]), fmt_s(st["min_s"]), fmt_s(st["max_s"]))


def outputs(r):
    """The outputs column: reshard vs the baseline, and vs the generator's expected files."""
    exp = {"identical": "reshard = expected", "DIFFERENT": "reshard **differs from expected**"}.get(r.get("expected"))
    return "%s%s" % (r["check"].replace("bytes identical", "reshard = numpy").replace(
        "values identical", "reshard = numpy (tensors)"), "; " + exp if exp else "")


def markdown(results, meta):
    out = ["### End-to-end transform: reshard vs MindSpore's algorithm in numpy vs the I/O floor",
           "",
           "<!-- %s -->" % json.dumps(meta, sort_keys=True),
           "",
           "| size | case | reshard | numpy (MindSpore's way) | I/O floor, mmap | I/O floor, pread "
           "| numpy / reshard | reshard / floor | peak RSS reshard | numpy | floor, pread "
           "| largest target slice | RSS target (2x slice + 64 MiB) | outputs |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        limit = 2 * r["largest_target_slice_bytes"] + 64 * MiB
        rss = r["reshard"]["peak_rss_bytes"]
        npy = r["numpy"]
        out.append("| %s | %s | %s | %s | %s | %s | %s | **%.2fx** | %s %s | %s | %s | %s | %s | %s |" % (
            r["size"], r["case"].replace("to", "→"), cell(r["reshard"]), cell(npy) if npy else "(skipped)",
            cell(r["floor"]), cell(r["floor_pread"]), "**%.1fx**" % (npy["median_s"] / r["reshard"]["median_s"]) if npy else "",
            r["reshard"]["median_s"] / r["floor"]["median_s"],
            fmt_bytes(rss), "(met)" if rss < limit else "(**missed**)", fmt_bytes(npy["peak_rss_bytes"]) if npy else "",
            fmt_bytes(r["floor_pread"]["peak_rss_bytes"]), fmt_bytes(r["largest_target_slice_bytes"]), fmt_bytes(limit),
            outputs(r)))
    out.append("")
    out.append("Wall time of the whole process, median of the runs [min–max]. I/O floor: every source byte read "
               "once and every target byte written once, from read-only mappings (mmap: the tighter floor, which "
               "reshard / floor compares with) or through a 1 MiB pread buffer. Peak RSS: the largest ru_maxrss "
               "over the runs. size: the tensor bytes of the checkpoint (float32). outputs: the files of reshard, of "
               "the baseline and of the generator (slicing the same values for the target layout) compared by "
               "SHA-256; = means identical byte for byte. Load average %.1f at the start, %.1f at the end%s." % (
                   meta["load_avg_start"][0], meta["load_avg_end"][0],
                   "; both converters wrote crc_num trailers" if meta.get("crc") else ""))
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reshard", required=True, help="the reshard program")
    ap.add_argument("--floor", required=True, help="bench_transform (its --io-floor and --measure modes)")
    ap.add_argument("--sizes", default="256M,1G,4G")
    ap.add_argument("--cases", default="8to4,8to3,4to8")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--numpy-runs-large", type=int, default=1, help="runs of the numpy baseline at 4 GiB and up")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--numpy-memory-factor", type=float,
                    help="skip the numpy baseline unless MemAvailable exceeds this many times the tensor bytes "
                         "+ 2 GiB (default: 2.6 for 8to4, 4.0 for 8to3, 2.8 for 4to8)")
    ap.add_argument("--dir", help="where the files go (default: a fresh directory under /dev/shm)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--crc", action="store_true",
                    help="both converters end their outputs with the crc_num trailer (MindSpore's "
                         "transform_checkpoints does not: save_checkpoint's crc_check defaults to False)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model, one run: a smoke test")
    ap.add_argument("--baseline", default=os.path.join(_HERE, "mindspore_baseline.py"),
                    help="the baseline script (default bench/mindspore_baseline.py; the tests give a broken one)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args(argv[1:])
    if args.tiny:
        args.sizes, args.runs, args.numpy_runs_large, args.layers = "1M", 1, 1, 2
    cases = args.cases.split(",")
    for c in cases:
        if c not in CASES:
            ap.error("--cases: unknown case %r (valid: %s)" % (c, ", ".join(CASES)))
    base = args.dir or tempfile.mkdtemp(prefix="reshard_e2e_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    results = []
    meta = {"load_avg_start": list(os.getloadavg()), "runs": args.runs, "numpy_runs_large": args.numpy_runs_large,
            "dir": base, "crc": args.crc}
    try:
        for label in args.sizes.split(","):
            target = parse_size(label)
            hidden = 48 if args.tiny else hidden_for(target, args.layers)
            params = model(hidden, args.layers)
            total = sum(math.prod(s) * 4 for _, s, _, _ in params)
            work = os.path.join(base, label)
            os.makedirs(work, exist_ok=True)
            for ranks in sorted({r for c in cases for r in CASES[c]}):
                write_strategy(os.path.join(work, "strategy%d.ckpt" % ranks), ranks, params)
            print("%s: hidden %d, %d parameters, %s of tensors" % (label, hidden, len(params), fmt_bytes(total)),
                  file=sys.stderr)
            for i, c in enumerate(cases):
                src = os.path.join(work, "src%d" % CASES[c][0])
                if not os.path.isdir(src):  # generated when first needed, deleted after its last case
                    t0 = time.perf_counter()
                    generate(src, CASES[c][0], params)
                    print("  source on %d ranks generated in %.1f s" % (CASES[c][0], time.perf_counter() - t0),
                          file=sys.stderr)
                r = bench_case(args, work, c, params, label, total)
                if not args.keep and all(CASES[later][0] != CASES[c][0] for later in cases[i + 1:]):
                    shutil.rmtree(src)
                r["hidden"] = hidden
                print("  %s: reshard %.2f s, numpy %s, floor %.2f s, %s" % (
                    c, r["reshard"]["median_s"], "%.2f s" % r["numpy"]["median_s"] if r["numpy"] else "-",
                    r["floor"]["median_s"], outputs(r)), file=sys.stderr)
                results.append(r)
            if not args.keep:
                shutil.rmtree(work)
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    meta["load_avg_end"] = list(os.getloadavg())
    if args.json:
        report.write_json(args.json, meta, results)
    print(markdown(results, meta))
    # A baseline that crashed fails the run (only an OOM kill, exit 137, is tolerated): a broken
    # mindspore_baseline.py must not pass as "no baseline" in the ctest smoke run.
    bad = [r for r in results if r["check"].startswith("MISMATCH") or r.get("expected") == "DIFFERENT"
           or (r["check"].startswith("numpy baseline failed") and "exit 137" not in r["check"])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
