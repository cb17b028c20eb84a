#!/usr/bin/python3
"""`reshard transform` beside `cp -r` as the rank count grows: many small per-rank files.

  scale_ranks.py --reshard PATH [--scales 128,1024,4096,16384] [--runs 3] [--hidden 48]
                 [--timeout 600] [--dir /dev/shm] [--json OUT] [--svg OUT] [--mpi] [--tiny] [--keep]

The model: a small Megatron-style network of 24 float32 parameters (2 layers of layer norms,
qkv / attention projection / fc1 / fc2 weights and their biases). Column-parallel weights (qkv,
fc1; stored [out, in]) split dim 0 by the tensor-parallel axis (MindSpore tensor_map [0,-1] on
dev_matrix [dp, tp]: axis 0 is the rightmost device axis), row-parallel weights (projection,
fc2) split dim 1 ([-1,0]), biases and layer norms are replicated ([-1]). Source: dev [M/8, 8];
target: N = 3M/4 ranks, dev [N/12, 12]. With --hidden 48, about 32 KiB per source rank and
23 KiB per target rank.

For each scale M (a multiple of 16), the source checkpoint (SRC/rank_<r>/checkpoint_<r>.ckpt,
the Values serialized by protobuf's own Python library, as MindSpore writes them) and the two
protobuf strategy files are generated; then, --runs times, interleaved (untimed removal of the
outputs between runs): `cp -r SRC COPY`, `reshard transform` with default flags and with
`--jobs 2`. Wall time is measured around the process (median of the runs reported), peak RSS
with /usr/bin/time (its ru_maxrss from wait4; without it, os.wait4 on the direct child, which can
include this Python's own resident set). Then, untimed, each of cp -r and reshard (default flags)
runs once under `strace -f -c` to count the system calls. With --mpi, timed like the others:
one process with `--jobs 1` (what `mpirun -n 2` must beat: two processes of one job each), `mpirun
-n 2 --oversubscribe reshard transform` (on one machine reshard asks Open MPI for its shared
memory: reshard/mpi/launch.hpp), the same with `--mca pml ^monitoring` (a messaging layer named,
which leaves Open MPI its own choice of transports: its default start), and `mpirun -n 2 reshard
--version` (MPI started and ended, nothing done: the launcher's share of the run).

Checks (any failure: exit status 1): every output file of the default run equals byte for byte
the file the generator makes for that target rank (its own slicing of the full tensors, framed by
protobuf); the outputs of --jobs 2 (and of --jobs 1 and mpirun) equal those of the default run byte for byte;
a few target files, parsed with protobuf, hold the values of the full tensors sliced by numpy by
the target layout. A command that fails (non-zero exit) is an error too. A command that exceeds
--timeout is killed (its whole process group) and reported as "timeout"; that variant is then not
run again at this or larger scales. Timeouts fail the run only with --tiny.

--tiny: scales 16,64 and one run (a ctest smoke test). Prints markdown tables on stdout;
--json writes the raw results; --svg a chart of the time per output file over the ranks
(bench/charts.py draws it). Run with /usr/bin/python3 (it has numpy and python3-protobuf).
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
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
import charts  # noqa: E402  (the SVG chart class)
import ms_files  # noqa: E402  (protobuf serialization of one Value)
import ms_proto  # noqa: E402
import ms_scenario  # noqa: E402  (MindSpore's slicing, strategy files)
import report  # noqa: E402  (write_json)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SRC_TP, DST_TP = 8, 12
PREFIX = "checkpoint_"
SYSCALLS = ["newfstatat", "openat", "madvise", "mmap"]
MPI_OUTPUTS = ("jobs1", "mpi", "mpi_ompi")  # --mpi: the variants that write outputs (checked against the default run)


# ------------------------------------------------------------------------------------------------
# the model and its files

def model(h):
    """[(name, shape, tensor map)]: 24 parameters; tensor maps over dev [dp, tp] (axis 0 = tp)."""
    col, row, rep = [0, -1], [-1, 0], [-1]
    p = []
    for i in range(2):
        b = "layers.%d." % i
        p += [(b + "layernorm1.gamma", [h], rep), (b + "layernorm1.beta", [h], rep),
              (b + "attention.qkv.weight", [3 * h, h], col), (b + "attention.qkv.bias", [3 * h], rep),
              (b + "attention.projection.weight", [h, h], row), (b + "attention.projection.bias", [h], rep),
              (b + "layernorm2.gamma", [h], rep), (b + "layernorm2.beta", [h], rep),
              (b + "mlp.fc1.weight", [4 * h, h], col), (b + "mlp.fc1.bias", [4 * h], rep),
              (b + "mlp.fc2.weight", [h, 4 * h], row), (b + "mlp.fc2.bias", [h], rep)]
    return p


def full_tensors(params):
    rng = np.random.default_rng(20240611)
    return {name: rng.standard_normal(size=shape).astype(np.float32) for name, shape, _ in params}


def layout_of(ranks, tp, tmap):
    return ms_scenario.L([ranks // tp, tp], tmap)


def rank_file(mods, params, fulls, ranks, tp, rank):
    """The bytes of `rank`'s checkpoint on `ranks` ranks (dev [ranks/tp, tp]): one Checkpoint
    message per Value, serialized by protobuf."""
    parts = []
    for name, shape, tmap in params:
        box = ms_scenario.rank_box(layout_of(ranks, tp, tmap), shape, rank)
        arr = np.ascontiguousarray(ms_scenario.cut(fulls[name], box))
        parts.append(ms_files._value_bytes(mods.checkpoint, name, "Float32", list(arr.shape), arr.tobytes()))
    return b"".join(parts)


def class_files(mods, params, fulls, ranks, tp):
    """The distinct files on `ranks` ranks: rank r holds the same data as rank r % tp (the ranks
    of a replica group, along dp, hold identical slices). Checked here on a sample of ranks."""
    files = [rank_file(mods, params, fulls, ranks, tp, c) for c in range(tp)]
    sample = sorted({r for r in list(range(min(ranks, 3 * tp))) + list(range(max(0, ranks - tp), ranks))})
    for r in sample:
        for name, shape, tmap in params:
            lay = layout_of(ranks, tp, tmap)
            if ms_scenario.rank_box(lay, shape, r) != ms_scenario.rank_box(lay, shape, r % tp):
                raise AssertionError("rank %d does not hold rank %d's slice of %s" % (r, r % tp, name))
    return files


def write_strategy(path, mods, params, ranks, tp):
    ms_scenario._write_strategy(path, [(name, layout_of(ranks, tp, tmap), shape) for name, shape, tmap in params],
                                mods, False)


def generate(src, files, ranks, tp):
    """SRC/rank_<r>/checkpoint_<r>.ckpt for every rank: each distinct content written many times."""
    os.makedirs(src)
    for r in range(ranks):
        d = os.path.join(src, "rank_%d" % r)
        os.mkdir(d)
        fd = os.open(os.path.join(d, "%s%d.ckpt" % (PREFIX, r)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, files[r % tp])
        finally:
            os.close(fd)


# ------------------------------------------------------------------------------------------------
# running

TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


def run(cmd, timeout, env=None):
    """{"status": "ok" | "timeout" | "failed", "seconds", "peak_rss_bytes", "error"} of one run.
    The command runs in a session of its own, so that a timeout kills all of it (mpirun's
    children, the program under /usr/bin/time)."""
    rss_file = None
    full = cmd
    if TIME:
        fd, rss_file = tempfile.mkstemp(prefix="scale_ranks_rss_")
        os.close(fd)
        full = [TIME, "-q", "-f", "%M", "-o", rss_file] + cmd
    res = {"status": "ok", "seconds": None, "peak_rss_bytes": None, "error": ""}
    t0 = time.perf_counter()
    p = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                         env=env)
    try:
        _, err = p.communicate(timeout=timeout)
        res["seconds"] = time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        # SIGTERM first (mpirun passes it on to the processes it started), then SIGKILL
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, None)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.communicate(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        res.update(status="timeout", seconds=None, error="killed after %g s" % timeout)
        if rss_file:
            os.unlink(rss_file)
        return res
    if p.returncode != 0:
        res.update(status="failed", error="exit %d: %s" % (p.returncode, err.decode(errors="replace").strip()[-2000:]))
    if rss_file:
        try:
            with open(rss_file) as f:
                text = f.read().split()
            res["peak_rss_bytes"] = int(text[-1]) * 1024 if text and text[-1].isdigit() else None
        finally:
            os.unlink(rss_file)
    return res


def summary_io(cmd, timeout, env=None):
    """The bytes one untimed run of a `reshard transform` command read and wrote, from its summary
    (`--json`): {"status", "bytes_read" (tensor bytes the targets needed), "file_bytes_read" (what
    the reads took from the files), "bytes_written", "read_amplification" (file_bytes_read /
    bytes_read; 1.00 when every byte read was needed)}."""
    try:
        p = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": "killed after %g s" % timeout}
    if p.returncode != 0:
        return {"status": "failed", "error": "exit %d: %s" % (p.returncode, p.stderr.strip()[-2000:])}
    try:
        j = json.loads(p.stdout)
    except ValueError as e:
        return {"status": "failed", "error": "summary is not JSON: %s" % e}
    res = {"status": "ok"}
    for k in ("bytes_read", "file_bytes_read", "bytes_written"):
        res[k] = j.get(k)
    res["read_amplification"] = res["file_bytes_read"] / res["bytes_read"] if res["bytes_read"] else None
    return res


def strace_counts(cmd, timeout, env=None):
    """{"status", "calls": {syscall: count}, "total"} of cmd under `strace -f -c`."""
    fd, out = tempfile.mkstemp(prefix="scale_ranks_strace_")
    os.close(fd)
    try:
        r = run(["strace", "-f", "-c", "-o", out] + cmd, timeout, env)
        calls = {}
        total = None
        with open(out) as f:
            for line in f:
                tok = line.split()
                if len(tok) < 5 or not re.match(r"^[0-9.]+$", tok[0]):
                    continue
                if tok[-1] == "total":
                    total = int(tok[3])
                else:
                    calls[tok[-1]] = int(tok[3])
        return {"status": r["status"], "error": r["error"], "calls": calls,
                "total": total if total is not None else sum(calls.values())}
    finally:
        os.unlink(out)


def remove(path):
    shutil.rmtree(path, ignore_errors=True)


def file_list(d):
    out = []
    for root, _, names in os.walk(d):
        out += [os.path.relpath(os.path.join(root, n), d) for n in names]
    return sorted(out)


def digests(d):
    out = {}
    for rel in file_list(d):
        with open(os.path.join(d, rel), "rb") as f:
            out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def out_name(t):
    return "rank_%d/%s%d.ckpt" % (t, PREFIX, t)


def check_expected(got, expected_files, n):
    """'' when the digests `got` are exactly those of the generator's target files."""
    want = [hashlib.sha256(b).hexdigest() for b in expected_files]
    names = sorted(out_name(t) for t in range(n))
    if sorted(got) != names:
        extra, missing = sorted(set(got) - set(names)), sorted(set(names) - set(got))
        return "files: %d missing (%s), %d unexpected (%s)" % (len(missing), missing[:3], len(extra), extra[:3])
    bad = [t for t in range(n) if got[out_name(t)] != want[t % DST_TP]]
    if bad:
        return "%d of %d files differ from the generator's, first %s" % (len(bad), n, out_name(bad[0]))
    return ""


def compare(a, b):
    if a == b:
        return ""
    if sorted(a) != sorted(b):
        return "different file sets (%d vs %d files)" % (len(a), len(b))
    bad = sorted(k for k in a if a[k] != b[k])
    return "%d files differ, first %s" % (len(bad), bad[0])


def spot_check(mods, out, params, fulls, n):
    """Parses a few target files with protobuf and compares every tensor with numpy's slice of the
    full tensor by the target layout; '' when all match."""
    errors = []
    for t in sorted({0, 1, DST_TP - 1, n // 2 + 5, n - 1} & set(range(n))):
        path = os.path.join(out, out_name(t))
        cp = mods.checkpoint.Checkpoint()
        with open(path, "rb") as f:
            cp.ParseFromString(f.read())
        got = {}
        for v in cp.value:
            if v.tensor.tensor_type != "Float32":
                errors.append("%s: %s is %s" % (out_name(t), v.tag, v.tensor.tensor_type))
            got.setdefault(v.tag, [list(v.tensor.dims), b""])[1] += v.tensor.tensor_content
        if sorted(got) != sorted(name for name, _, _ in params):
            errors.append("%s: parameters %s" % (out_name(t), sorted(got)))
            continue
        for name, shape, tmap in params:
            box = ms_scenario.rank_box(layout_of(n, DST_TP, tmap), shape, t)
            want = ms_scenario.cut(fulls[name], box)
            dims, content = got[name]
            arr = np.frombuffer(content, np.float32)
            if dims != list(want.shape) or arr.size != want.size or not np.array_equal(arr.reshape(want.shape), want):
                errors.append("%s: %s differs from the full tensor sliced by the target layout" % (out_name(t), name))
    return "; ".join(errors[:3])


# ------------------------------------------------------------------------------------------------
# one scale

def stats(samples):
    ok = [s for s in samples if s["status"] == "ok"]
    walls = [s["seconds"] for s in ok]
    rss = [s["peak_rss_bytes"] for s in ok if s["peak_rss_bytes"] is not None]
    st = {"runs": samples, "status": "ok" if len(ok) == len(samples) and ok else
          ("timeout" if any(s["status"] == "timeout" for s in samples) else "failed")}
    if walls:
        st.update(median_s=statistics.median(walls), min_s=min(walls), max_s=max(walls))
    st["peak_rss_bytes"] = max(rss) if rss else None
    return st


def bench_scale(args, mods, params, fulls, M, skip):
    N = M * 3 // 4
    work = os.path.join(args.base, "m%d" % M)
    remove(work)
    os.makedirs(work)
    src, copy = os.path.join(work, "src"), os.path.join(work, "copy")
    outs = {"default": os.path.join(work, "out_default"), "jobs2": os.path.join(work, "out_jobs2")}
    outs.update({k: os.path.join(work, "out_" + k) for k in MPI_OUTPUTS})
    s_src, s_dst = os.path.join(work, "src_strategy.ckpt"), os.path.join(work, "dst_strategy.ckpt")
    res = {"src_ranks": M, "dst_ranks": N, "src_dev": [M // SRC_TP, SRC_TP], "dst_dev": [N // DST_TP, DST_TP],
           "errors": [], "checks": {}}

    t0 = time.perf_counter()
    src_files = class_files(mods, params, fulls, M, SRC_TP)
    dst_files = class_files(mods, params, fulls, N, DST_TP)
    write_strategy(s_src, mods, params, M, SRC_TP)
    write_strategy(s_dst, mods, params, N, DST_TP)
    generate(src, src_files, M, SRC_TP)
    res["generate_s"] = time.perf_counter() - t0
    res["source_bytes"] = sum(len(src_files[r % SRC_TP]) for r in range(M))
    res["target_bytes"] = sum(len(dst_files[t % DST_TP]) for t in range(N))
    log("%d -> %d ranks: %d source files (%s) generated in %.2f s" % (
        M, N, M, fmt_bytes(res["source_bytes"]), res["generate_s"]))

    def transform(dst, extra=()):
        return [args.reshard, "transform", "--src-dir", src, "--dst-dir", dst, "--src-strategy", s_src,
                "--dst-strategy", s_dst] + list(extra)

    mpi_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    variants = [("cp", lambda: ["cp", "-r", src, copy], copy, None),
                ("default", lambda: transform(outs["default"]), outs["default"], None),
                ("jobs2", lambda: transform(outs["jobs2"], ["--jobs", "2"]), outs["jobs2"], None)]
    if args.mpi:
        mpirun = ["mpirun", "-n", "2", "--oversubscribe"]
        variants += [("jobs1", lambda: transform(outs["jobs1"], ["--jobs", "1"]), outs["jobs1"], None),
                     ("mpi", lambda: mpirun + transform(outs["mpi"]), outs["mpi"], mpi_env),
                     ("mpi_ompi", lambda: mpirun + ["--mca", "pml", "^monitoring"] + transform(outs["mpi_ompi"]),
                      outs["mpi_ompi"], mpi_env),
                     ("mpi_start", lambda: mpirun + [args.reshard, "--version"], None, mpi_env)]
    samples = {k: [] for k, _, _, _ in variants}
    for i in range(args.runs):  # interleaved, so that a change of the machine's load hits every tool alike
        for key, cmd, out, env in variants:
            if key in skip or (samples[key] and samples[key][-1]["status"] != "ok"):
                continue
            if out:
                remove(out)
            s = run(cmd(), args.timeout, env)
            samples[key].append(s)
            log("  run %d %-7s %s" % (i + 1, key, "%.3f s, %s" % (s["seconds"], fmt_bytes(s["peak_rss_bytes"]))
                                       if s["status"] == "ok" else s["status"] + " " + s["error"]))
            if s["status"] == "timeout":
                skip[key] = "timed out at %d ranks" % M
            elif s["status"] == "failed":
                res["errors"].append("%s failed: %s" % (key, s["error"]))
    for key, _, _, _ in variants:
        res[key] = stats(samples[key]) if samples[key] else {"status": "skipped", "reason": skip.get(key, "")}
    remove(copy)

    # checks, on the outputs of the last runs
    got = {}
    for key in ("default", "jobs2") + MPI_OUTPUTS:
        if key in res and res[key]["status"] == "ok":
            got[key] = digests(outs[key])
    if "default" in got:
        e = check_expected(got["default"], dst_files, N)
        res["checks"]["default = generator"] = e or "ok"
        e2 = spot_check(mods, outs["default"], params, fulls, N)
        res["checks"]["values (protobuf + numpy)"] = e2 or "ok"
        for key in ("jobs2",) + MPI_OUTPUTS:
            if key in got:
                res["checks"]["%s = default" % key] = compare(got[key], got["default"]) or "ok"
    elif "jobs2" in got:
        res["checks"]["jobs2 = generator"] = check_expected(got["jobs2"], dst_files, N) or "ok"
    for k, v in res["checks"].items():
        if v != "ok":
            res["errors"].append("check %s: %s" % (k, v))
    for out in outs.values():
        remove(out)

    # system calls, untimed
    res["strace"] = {}
    if args.strace:
        for key, cmd, out in (("cp", ["cp", "-r", src, copy], copy), ("default", transform(outs["default"]), outs["default"])):
            if key in skip:
                res["strace"][key] = {"status": "skipped"}
                continue
            remove(out)
            res["strace"][key] = strace_counts(cmd, args.timeout)
            remove(out)
            st = res["strace"][key]
            log("  strace  %-7s %s" % (key, "%d calls" % st["total"] if st["status"] == "ok" else st["status"]))
            if st["status"] == "failed":
                res["errors"].append("strace %s failed: %s" % (key, st["error"]))
    # the bytes read against the bytes needed, untimed (the summary's file_bytes_read / bytes_read)
    if "default" not in skip:
        remove(outs["default"])
        res["io"] = summary_io(transform(outs["default"]), args.timeout)
        remove(outs["default"])
        if res["io"]["status"] != "ok":
            res["errors"].append("summary run failed: %s" % res["io"]["error"])
    if not args.keep:
        remove(work)
    return res


# ------------------------------------------------------------------------------------------------
# reporting

def log(s):
    print(s, file=sys.stderr, flush=True)


def fmt_bytes(b):
    if b is None:
        return "-"
    return "%.0f KiB" % (b / KiB) if b < 10 * MiB else "%.1f MiB" % (b / MiB) if b < 10 * GiB else "%.1f GiB" % (b / GiB)


def fmt_s(s):
    return "%.3f s" % s if s < 10 else "%.1f s" % s


def fmt_us(s):
    return "%.0f µs" % (s * 1e6) if s < 1e-3 else "%.2f ms" % (s * 1e3)


def cell(st):
    if st.get("status") != "ok":
        return "skipped (%s)" % st["reason"] if st.get("reason") else st.get("status", "-")
    if st["min_s"] == st["max_s"]:
        return fmt_s(st["median_s"])
    return "%s [%s–%s]" % (fmt_s(st["median_s"]), fmt_s(st["min_s"]), fmt_s(st["max_s"]))


def ok(st):
    return st and st.get("status") == "ok"


def markdown(results, meta):
    has_mpi = any("mpi" in r for r in results)
    out = ["### reshard transform vs cp -r over the rank count (M → 3M/4 ranks, %d parameters, hidden %d)" % (
        meta["parameters"], meta["hidden"]), "",
        "<!-- %s -->" % json.dumps(meta, sort_keys=True), ""]
    head = ["ranks M→N", "source files", "cp -r", "reshard", "reshard / cp -r", "per output file",
            "reshard --jobs 2", "jobs 2 / cp -r", "per output file, jobs 2"]
    head += ["peak RSS", "peak RSS, jobs 2", "outputs"]
    out += ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(head) - 3) + "---|"]
    for r in results:
        cp, d, j = r["cp"], r["default"], r["jobs2"]
        row = ["%d→%d" % (r["src_ranks"], r["dst_ranks"]), "%d (%s)" % (r["src_ranks"], fmt_bytes(r["source_bytes"])),
               cell(cp), cell(d),
               "**%.1fx**" % (d["median_s"] / cp["median_s"]) if ok(d) and ok(cp) else "",
               fmt_us(d["median_s"] / r["dst_ranks"]) if ok(d) else "",
               cell(j), "%.1fx" % (j["median_s"] / cp["median_s"]) if ok(j) and ok(cp) else "",
               fmt_us(j["median_s"] / r["dst_ranks"]) if ok(j) else ""]
        checks = r["checks"]
        verdict = "all checks ok" if checks and all(v == "ok" for v in checks.values()) and not r["errors"] else \
            ("**" + "; ".join(r["errors"]) + "**" if r["errors"] else "not checked")
        row += [fmt_bytes(d.get("peak_rss_bytes")), fmt_bytes(j.get("peak_rss_bytes")), verdict]
        out.append("| " + " | ".join(row) + " |")
    out += ["", "Wall time of the whole process, median of %d run%s [min–max], runs interleaved, outputs removed "
            "between runs. Per output file: the median divided by the N target files (%s). Peak RSS: the "
            "largest ru_maxrss over the runs (/usr/bin/time). outputs: every file of the default run equals the "
            "generator's (SHA-256), --jobs 2%s wrote the same bytes, and a few files parsed by protobuf hold "
            "numpy's slices of the full tensors." % (
                meta["runs"], "s" * (meta["runs"] > 1), "the chart divides cp -r's by the M files it copies",
                ", --jobs 1 and mpirun" if has_mpi else "")]
    if has_mpi:
        out += ["", "`mpirun -n 2` (one job each) beside one process; the target: faster than `--jobs 1`, and not "
                "slower than `--jobs 2`:", "",
                "| ranks M→N | one process, --jobs 1 | --jobs 2 | mpirun -n 2 | / --jobs 1 | / --jobs 2 | "
                "mpirun -n 2, Open MPI's transports (--mca pml ^monitoring) | mpirun -n 2 reshard --version | "
                "peak RSS, mpirun (largest process) |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in results:
            one, two, m = r.get("jobs1", {}), r.get("jobs2", {}), r.get("mpi", {})
            ratio = lambda a, b: "**%.2fx**" % (a["median_s"] / b["median_s"]) if ok(a) and ok(b) else ""
            out.append("| " + " | ".join([
                "%d→%d" % (r["src_ranks"], r["dst_ranks"]), cell(one) if one else "", cell(two), cell(m) if m else "",
                ratio(m, one), ratio(m, two), cell(r["mpi_ompi"]) if r.get("mpi_ompi") else "",
                cell(r["mpi_start"]) if r.get("mpi_start") else "", fmt_bytes(m.get("peak_rss_bytes"))]) + " |")
        out += ["", "reshard --version under mpirun starts and ends MPI and does nothing else: the launcher's "
                "and MPI's share of the run, which two processes cannot divide."]
    if any(r["strace"] for r in results):
        out += ["", "System calls (`strace -f -c`, one untimed run, default flags), per source file (M) / per "
                "output file (N); cp -r per copied file:", "",
                "| ranks M→N | cp -r calls / file | reshard calls | per source file | per output file | "
                + " | ".join("%s / out file" % s for s in SYSCALLS) + " |",
                "|---|---:|---:|---:|---:|" + "---:|" * len(SYSCALLS)]
        for r in results:
            c, s = r["strace"].get("cp", {}), r["strace"].get("default", {})
            row = ["%d→%d" % (r["src_ranks"], r["dst_ranks"]),
                   "%.1f" % (c["total"] / r["src_ranks"]) if c.get("status") == "ok" else c.get("status", "")]
            if s.get("status") == "ok":
                row += ["%d" % s["total"], "%.1f" % (s["total"] / r["src_ranks"]), "%.1f" % (s["total"] / r["dst_ranks"])]
                row += ["%.2f" % (s["calls"].get(k, 0) / r["dst_ranks"]) for k in SYSCALLS]
            else:
                row += [s.get("status", "")] + [""] * (3 + len(SYSCALLS) - 1)
            out.append("| " + " | ".join(row) + " |")
    out += ["", "Load average %.1f at the start, %.1f at the end; %d CPUs." % (
        meta["load_avg_start"][0], meta["load_avg_end"][0], meta["cpus"])]
    return "\n".join(out)


def svg(path, results):
    series = [("default", "reshard transform", charts.COLORS[0], None, "dst_ranks"),
              ("jobs2", "reshard transform --jobs 2", charts.COLORS[0], "6,4", "dst_ranks"),
              ("mpi", "mpirun -n 2 reshard transform", charts.COLORS[2], "2,3", "dst_ranks"),
              ("cp", "cp -r (per copied file)", charts.COLORS[1], None, "src_ranks")]
    lines = []
    for key, label, color, dash, per in series:
        pts = [(r["src_ranks"], r[key]["median_s"] / r[per], r[key]["min_s"] / r[per], r[key]["max_s"] / r[per])
               for r in results if ok(r.get(key))]
        if pts:
            lines.append((pts, label, color, dash))
    if not lines:
        return
    xs = sorted({p[0] for pts, _, _, _ in lines for p in pts})
    ys = [v for pts, _, _, _ in lines for p in pts for v in p[1:]]
    c = charts.Chart("reshard transform vs cp -r: time per output file (M -> 3M/4 ranks)", "source ranks M (log scale)",
                     "time per output file, median (log scale)", (xs[0] / 1.5, xs[-1] * 1.5), charts.log_range(ys),
                     xlog=True, ylog=True)
    c.axes([(x, str(x)) for x in xs], charts.log_ticks(c.yr[0], c.yr[1], charts.fmt_seconds))
    for pts, label, color, dash in lines:
        c.line([(x, y) for x, y, _, _ in pts], color, label, dash, [(x, lo, hi) for x, _, lo, hi in pts])
    charts.write(path, c.svg())


def git_state():
    root = os.path.join(_HERE, "..")
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "include"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+uncommitted include/" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reshard", required=True, help="the reshard program")
    ap.add_argument("--scales", default="128,1024,4096,16384", help="source rank counts (multiples of 16)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=48, help="hidden size (a multiple of 24)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per command")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir(),
                    help="where the files go (a fresh directory is made in it; default /dev/shm)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--svg", help="write a chart of the time per output file here")
    ap.add_argument("--mpi", action="store_true", help="also run --jobs 1, mpirun -n 2 --oversubscribe reshard transform "
                    "(reshard's transports and Open MPI's own) and mpirun -n 2 reshard --version")
    ap.add_argument("--no-strace", dest="strace", action="store_false", help="skip the strace counts")
    ap.add_argument("--tiny", action="store_true", help="scales 16,64 and one run: a smoke test")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args(argv[1:])
    if args.tiny:
        args.scales, args.runs = "16,64", 1
    scales = [int(s) for s in args.scales.split(",")]
    for M in scales:
        if M <= 0 or M % 16:
            ap.error("--scales: %d is not a positive multiple of 16 (dev [M/8, 8] -> [3M/48, 12])" % M)
    if args.hidden <= 0 or args.hidden % 24:
        ap.error("--hidden must be a positive multiple of 24")
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.strace and not shutil.which("strace"):
        log("strace not found: no system call counts")
        args.strace = False
    args.reshard = os.path.abspath(args.reshard)
    os.makedirs(args.dir, exist_ok=True)
    args.base = tempfile.mkdtemp(prefix="reshard_scale_", dir=args.dir)

    mods = ms_proto.load()
    params = model(args.hidden)
    fulls = full_tensors(params)
    try:
        st = os.stat(args.reshard)
        binary = {"path": args.reshard, "mtime": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(st.st_mtime))}
    except OSError as e:
        ap.error("--reshard: %s" % e)
    meta = {"load_avg_start": list(os.getloadavg()), "runs": args.runs, "hidden": args.hidden,
            "parameters": len(params), "dir": args.base, "cpus": os.cpu_count(), "timeout_s": args.timeout,
            "reshard": binary, "git": git_state(), "rss_by": "/usr/bin/time" if TIME else "none",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    results, skip = [], {}
    try:
        for M in scales:
            results.append(bench_scale(args, mods, params, fulls, M, skip))
    finally:
        if not args.keep:
            remove(args.base)
    meta["load_avg_end"] = list(os.getloadavg())
    if args.json:
        report.write_json(args.json, meta, results)
    if args.svg:
        svg(args.svg, results)
    print(markdown(results, meta))
    bad = [e for r in results for e in r["errors"]]
    if args.tiny:
        bad += ["%d ranks: %s %s" % (r["src_ranks"], k, r[k]["status"]) for r in results
                for k in ("cp", "default", "jobs2", "mpi_start") + MPI_OUTPUTS if k in r and r[k]["status"] != "ok"]
        bad += ["%d ranks: no checks ran" % r["src_ranks"] for r in results if not r["checks"]]
    for e in bad:
        log("FAILED: " + e)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
