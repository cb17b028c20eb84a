"""Checkpoint workflows from Python on MindSpore-schema files written by ms_scenario.py (independent
of reshard's C++), every output value checked against numpy slicing of the full tensors."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ms_scenario
import reshard


def scenario(name, tmp_path):
    d = str(tmp_path / name)
    assert ms_scenario.gen(name, d) == 0
    with open(os.path.join(d, "scenario.json"), encoding="utf-8") as f:
        meta = json.load(f)
    meta["dir"] = d
    for key in ("src_dir", "src_strategy", "dst_strategy", "stage_dir", "checkpoint"):
        if meta[key]:
            meta[key] = os.path.join(d, meta[key])
    return meta


def source_files(meta):
    return {r: ms_scenario._source_file(meta["dir"], meta, r) for r in range(meta["M"])}


def files_under(d):
    return sorted(os.path.join(root, f) for root, _, fs in os.walk(d) for f in fs) if os.path.exists(d) else []


# ------------------------------------------------------------------------------------------------
# whole directories, checked value by value

@pytest.mark.parametrize("name,jobs", [("retrain_8to4", 1), ("retrain_8to4", 2), ("uneven_8to3", 1),
                                       ("infer_8to4_safetensors", 2), ("six_to_4", 1)])
def test_transform_checkpoints(name, jobs, tmp_path):
    m = scenario(name, tmp_path)
    out = os.path.join(m["dir"], "out")
    calls = []
    s = reshard.transform_checkpoints(m["src_dir"], out, "checkpoint_", m["src_strategy"], m["dst_strategy"],
                                      process_num=jobs, output_format=m["format"], progress=calls.append)
    assert s["files"] == m["N"]
    assert s["jobs"] == min(jobs, m["N"])
    assert len(s["outputs"]) == m["N"]
    assert ms_scenario.check(m["dir"], out) == 0
    assert calls and calls[-1].files_done == m["N"] == calls[-1].files_total
    assert calls[-1].bytes_done == calls[-1].bytes_total > 0
    assert all(a.bytes_done <= b.bytes_done for a, b in zip(calls, calls[1:]))


def test_pipeline_merge_then_transform(tmp_path):
    m = scenario("pipeline_to4", tmp_path)
    merged = os.path.join(m["dir"], "merged_strategy.ckpt")
    assert reshard.merge_pipeline_strategys(m["stage_dir"], merged) is None
    assert os.path.isfile(merged)
    reshard.merge_pipeline_strategys(m["stage_dir"], merged)  # replaces the file, as MindSpore's does
    out = os.path.join(m["dir"], "out")
    reshard.transform_checkpoints(m["src_dir"], out, "checkpoint_", merged, m["dst_strategy"], progress=False)
    assert ms_scenario.check(m["dir"], out) == 0


def test_by_rank_with_minimal_rank_lists(tmp_path):
    m = scenario("retrain_8to4", tmp_path)
    out = os.path.join(m["dir"], "out")
    files = source_files(m)
    sizes = []
    for t in range(m["N"]):
        ranks = reshard.rank_list_for_transform(t, m["src_strategy"], m["dst_strategy"])
        assert ranks == sorted(set(ranks)) and t % m["M"] in ranks
        sizes.append(len(ranks))
        s = reshard.transform_checkpoint_by_rank(t, {r: files[r] for r in ranks},
                                                 os.path.join(out, "rank_%d" % t, "checkpoint_%d.ckpt" % t),
                                                 m["src_strategy"], m["dst_strategy"])
        assert s["files"] == 1
    assert ms_scenario.check(m["dir"], out) == 0
    assert max(sizes) < m["M"]  # fewer than all source ranks
    # a needed rank missing from the map
    ranks = reshard.rank_list_for_transform(1, m["src_strategy"], m["dst_strategy"])
    partial = {r: files[r] for r in ranks[1:]}
    with pytest.raises(reshard.Error, match="rank"):
        reshard.transform_checkpoint_by_rank(1, partial, os.path.join(m["dir"], "x.ckpt"), m["src_strategy"],
                                             m["dst_strategy"])
    assert not os.path.exists(os.path.join(m["dir"], "x.ckpt"))


def test_merge_split_convert(tmp_path):
    m = scenario("merge_8", tmp_path)
    merged = os.path.join(m["dir"], "merged.ckpt")
    reshard.merge_checkpoints(m["src_dir"], merged, m["src_strategy"])
    assert ms_scenario.check(m["dir"], merged) == 0
    # ckpt -> safetensors -> ckpt: the same tensors (read back with no strategy: the file as is)
    u = scenario("uneven_8to3", tmp_path)
    first = source_files(u)[0]
    st = os.path.join(u["dir"], "r0.safetensors")
    back = os.path.join(u["dir"], "r0.ckpt")
    reshard.convert_checkpoint(first, st)
    reshard.convert_checkpoint(st, back)
    a, b, c = (reshard.load_checkpoint_by_rank(0, {0: f}) for f in (first, st, back))
    assert sorted(a) == sorted(b) == sorted(c) and len(a) >= 5
    for name in a:
        for x in (b, c):
            assert x[name].dtype == a[name].dtype and x[name].shape == a[name].shape
            np.testing.assert_array_equal(x[name], a[name])
    s = scenario("split_4", tmp_path)
    out = os.path.join(s["dir"], "out")
    reshard.split_checkpoint(s["checkpoint"], out, s["dst_strategy"], "checkpoint_")
    assert ms_scenario.check(s["dir"], out) == 0


# ------------------------------------------------------------------------------------------------
# in memory

@pytest.mark.parametrize("name", ["retrain_8to4", "uneven_8to3", "pipeline_to4"])
def test_load_checkpoint_by_rank(name, tmp_path):
    m = scenario(name, tmp_path)
    src_strategy = m["src_strategy"]
    if m["stage_dir"]:
        reshard.merge_pipeline_strategys(m["stage_dir"], src_strategy)
    files = source_files(m)
    fulls = {p["name"]: np.load(os.path.join(m["dir"], "full", "%d.npy" % i)) for i, p in enumerate(m["params"])}
    written = os.path.join(m["dir"], "written")
    for t in range(m["N"]):
        before = files_under(m["dir"])
        params = reshard.load_checkpoint_by_rank(t, files, src_strategy, m["dst_strategy"])
        assert files_under(m["dir"]) == before  # nothing written
        checked = 0
        for p in m["params"]:
            lay = p["dst"]
            if isinstance(lay, list):
                lay = next((l for l in lay if t in ms_scenario.ranks_of(l)), None)
            want = fulls[p["name"]] if lay is None else ms_scenario.cut(
                fulls[p["name"]], ms_scenario.rank_box(lay, p["shape"], t))
            got = params[p["name"]]
            assert got.shape == want.shape, p["name"]
            assert got.dtype == want.dtype, p["name"]  # BFloat16: uint16 bits (no ml_dtypes here)
            np.testing.assert_array_equal(got, want, err_msg=p["name"])
            checked += 1
        assert checked == len(m["params"])
        # the same as the file transform_checkpoint_by_rank writes
        out = os.path.join(written, "rank_%d.ckpt" % t)
        reshard.transform_checkpoint_by_rank(t, files, out, src_strategy, m["dst_strategy"])
        assert list(params) == [n for n, _ in ms_scenario._read_ckpt(out, ms_scenario.ms_proto.load(),
                                                                      ms_scenario.ms_files.Mismatch("x"))]
    # parameters no strategy lists come from source rank t % M
    if name == "retrain_8to4":
        assert params["learning_rate"] == np.float32(0.01 * (3 % m["M"] + 1))
        assert params["global_step"].tolist() == [1000 + 3]


# ------------------------------------------------------------------------------------------------
# errors

def test_errors(tmp_path):
    m = scenario("retrain_8to4", tmp_path)
    d, src, sst, dst = m["dir"], m["src_dir"], m["src_strategy"], m["dst_strategy"]
    out = os.path.join(d, "out")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        reshard.transform_checkpoints(os.path.join(d, "nowhere"), out, "checkpoint_", sst, dst)
    with pytest.raises(FileNotFoundError, match="missing.ckpt"):
        reshard.transform_checkpoints(src, out, "checkpoint_", os.path.join(d, "missing.ckpt"), dst)
    with pytest.raises(FileNotFoundError, match="rank_9"):
        reshard.transform_checkpoint_by_rank(0, {9: os.path.join(d, "rank_9.ckpt")}, os.path.join(d, "o.ckpt"), sst, dst)
    bad = os.path.join(d, "garbage_strategy.ckpt")
    with open(bad, "wb") as f:
        f.write(b"\xff\xff\xff\xff not a strategy")
    with pytest.raises(reshard.Error, match="garbage_strategy.ckpt"):
        reshard.transform_checkpoints(src, out, "checkpoint_", bad, dst)
    with pytest.raises(ValueError, match="output_format"):
        reshard.transform_checkpoints(src, out, "checkpoint_", sst, dst, output_format="npz")
    with pytest.raises(ValueError, match="process_num"):
        reshard.transform_checkpoints(src, out, "checkpoint_", sst, dst, process_num=-1)
    with pytest.raises(TypeError, match="process_num"):
        reshard.transform_checkpoints(src, out, "checkpoint_", sst, dst, process_num="2")
    with pytest.raises(ValueError, match="target rank 4 is not a rank"):
        reshard.rank_list_for_transform(4, sst, dst)
    with pytest.raises(TypeError, match="checkpoint_files_map"):
        reshard.load_checkpoint_by_rank(0, [src], sst, dst)
    with pytest.raises(TypeError, match="progress"):
        reshard.transform_checkpoints(src, out, "checkpoint_", sst, dst, progress=3)
    # a file in the way of the output directory: an OSError from the file system
    blocker = os.path.join(d, "blocker")
    with open(blocker, "w", encoding="utf-8") as f:
        f.write("x")
    with pytest.raises(OSError):
        reshard.transform_checkpoints(src, os.path.join(blocker, "out"), "checkpoint_", sst, dst)
    assert not os.path.exists(out)
    # existing outputs: refused unless force
    reshard.transform_checkpoints(src, out, "checkpoint_", sst, dst)
    with pytest.raises(FileExistsError, match="checkpoint_0.ckpt exists"):
        reshard.transform_checkpoints(src, out, "checkpoint_", sst, dst)
    reshard.transform_checkpoints(src, out, "checkpoint_", sst, dst, force=True)
    assert ms_scenario.check(d, out) == 0


# ------------------------------------------------------------------------------------------------
# interruption: all or nothing

@pytest.mark.parametrize("exc,jobs", [(KeyboardInterrupt, 1), (KeyboardInterrupt, 2), (RuntimeError, 2)])
def test_interrupted_transform_leaves_no_output(exc, jobs, tmp_path):
    m = scenario("retrain_8to4", tmp_path)
    out = os.path.join(m["dir"], "out")
    calls = []

    def stop(p):
        calls.append(p)
        raise exc("stop after %s" % p.parameter)

    with pytest.raises(exc, match="stop after"):
        reshard.transform_checkpoints(m["src_dir"], out, "checkpoint_", m["src_strategy"], m["dst_strategy"],
                                      process_num=jobs, progress=stop)
    assert len(calls) >= 1
    assert files_under(out) == []
    with pytest.raises(exc):
        reshard.transform_checkpoint_by_rank(0, source_files(m), os.path.join(out, "one.ckpt"), m["src_strategy"],
                                             m["dst_strategy"], progress=stop)
    assert files_under(out) == []
    with pytest.raises(exc):
        reshard.load_checkpoint_by_rank(0, source_files(m), m["src_strategy"], m["dst_strategy"], progress=stop)


def test_sigint_stops_a_transform(tmp_path):
    # a real Ctrl-C while the Python progress callback runs. The callback waits until the signal
    # has been handled (its handler sets an event, then raises KeyboardInterrupt as Python's own
    # does), so the run is interrupted in its middle whatever the machine's speed: no timer decides.
    m = scenario("retrain_8to4", tmp_path)
    out = os.path.join(m["dir"], "out")
    code = textwrap.dedent("""
        import signal, sys, threading, reshard
        handled = threading.Event()
        def on_sigint(signum, frame):
            handled.set()
            raise KeyboardInterrupt
        signal.signal(signal.SIGINT, on_sigint)
        def held(p):
            print("progress", flush=True)
            if not handled.wait(60):
                print("no signal", flush=True)
        try:
            reshard.transform_checkpoints(sys.argv[1], sys.argv[2], "checkpoint_", sys.argv[3], sys.argv[4],
                                          process_num=2, progress=held)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
        print("finished", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", code, m["src_dir"], out, m["src_strategy"], m["dst_strategy"]],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "progress"
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 3, rest
    assert "interrupted" in rest and "finished" not in rest and "no signal" not in rest
    assert files_under(out) == []


def test_tqdm_bar(tmp_path, capsys):
    m = scenario("retrain_8to4", tmp_path)
    reshard.transform_checkpoints(m["src_dir"], os.path.join(m["dir"], "out"), "checkpoint_", m["src_strategy"],
                                  m["dst_strategy"], progress=True)
    err = capsys.readouterr().err
    assert "transform_checkpoints" in err and "files 4/4" in err
    # the default: a bar only on a terminal (standard error is captured here)
    reshard.transform_checkpoints(m["src_dir"], os.path.join(m["dir"], "out2"), "checkpoint_", m["src_strategy"],
                                  m["dst_strategy"])
    assert capsys.readouterr().err == ""


def test_sigint_without_a_callback(tmp_path):
    # Ctrl-C with no Python callback at all (progress=False): the caller's thread sees the signal
    # while the engine runs on its own thread. The module's test hook holds the engine at its first
    # progress report (after the first parameter is staged) until the run is cancelled, and says
    # so on standard output; the signal is sent then, so it always comes in the middle of the run.
    mods = ms_scenario.ms_proto.load()
    src = tmp_path / "src" / "rank_0"
    src.mkdir(parents=True)
    names = ["w%02d" % i for i in range(8)]
    content = np.arange(1 << 16, dtype=np.float32).tobytes()
    with open(src / "full.ckpt", "wb") as f:
        for n in names:
            f.write(ms_scenario.ms_files._value_bytes(mods.checkpoint, n, "Float32", [256, 256], content))
    strategy = str(tmp_path / "dst_strategy.ckpt")
    ms_scenario._write_strategy(strategy, [(n, ms_scenario.L([4], [0, -1]), [256, 256]) for n in names], mods,
                                False)
    out = str(tmp_path / "out")
    code = textwrap.dedent("""
        import sys, reshard
        reshard._core._hold_at_first_progress(sys.stdout.fileno())
        try:
            reshard.transform_checkpoints(sys.argv[1], sys.argv[2], "checkpoint_", None, sys.argv[3], progress=False)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
        print("finished", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "src"), out, strategy],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "held"
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 3, rest
    assert "interrupted" in rest and "finished" not in rest
    # all or nothing: the first parameter was staged, and nothing is left
    assert files_under(out) == []
    # the same run without the hook writes every output (the hook is used once, then forgotten)
    reshard.transform_checkpoints(str(tmp_path / "src"), out, "checkpoint_", None, strategy, progress=False)
    assert len(files_under(out)) == 4


def test_two_threads_writing_one_destination(tmp_path):
    # Two threads of one process transform into the same directory at once: their staged files
    # have names unique per call, so one run wins and the other gets FileExistsError (regression:
    # both staged under <file>.reshard-<pid>.part, and the loser failed with FileNotFoundError,
    # "cannot open to fsync", after the winner had renamed the shared file away).
    import threading
    m = scenario("retrain_8to4", tmp_path)
    ref = os.path.join(m["dir"], "ref")
    reshard.transform_checkpoints(m["src_dir"], ref, "checkpoint_", m["src_strategy"], m["dst_strategy"],
                                  progress=False)
    for attempt in range(5):
        out = os.path.join(m["dir"], "out%d" % attempt)
        start = threading.Barrier(2)
        results = [None, None]

        def run(k):
            start.wait()
            try:
                results[k] = reshard.transform_checkpoints(m["src_dir"], out, "checkpoint_", m["src_strategy"],
                                                           m["dst_strategy"], process_num=1, progress=False)
            except Exception as e:  # noqa: BLE001 - the test looks at what it is
                results[k] = e

        threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wins = [r for r in results if isinstance(r, dict)]
        losses = [r for r in results if not isinstance(r, dict)]
        assert len(wins) == 1 and len(losses) == 1, results
        assert isinstance(losses[0], FileExistsError), repr(losses[0])
        # the winner's outputs, complete, and nothing else left
        assert [os.path.relpath(f, out) for f in files_under(out)] == [os.path.relpath(f, ref) for f in files_under(ref)]
        for f in files_under(ref):
            with open(f, "rb") as a, open(os.path.join(out, os.path.relpath(f, ref)), "rb") as b:
                assert a.read() == b.read()
