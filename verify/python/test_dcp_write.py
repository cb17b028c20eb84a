"""Real torch reads the PyTorch DCP checkpoints reshard writes (`--format dcp --dcp-torch 1.13`).

reshard (the CLI) writes from the DCP fixtures torch 1.13 wrote (verify/data/dcp/): `convert` of
`plain` (float32, bfloat16, int64 and a 0-d tensor, whole, and two byte items) and `transform` of `cols` onto a
2-rank column strategy (w split by columns: two chunks; h not in the strategy, replicated, so
stored once). Then torch 1.13's own load_state_dict reads each back:
  (a) no_dist=True into whole tensors,
  (b) under 2 gloo processes into ShardedTensors, column-sharded (the chunks as written) and
      row-sharded (torch reshards at load), and h into a plain tensor on both ranks.
The Python module's convert_checkpoint(output_format="dcp", dcp_torch="1.13") writes the same bytes,
loaded the same way. Every value is compared bit for bit with what torch loaded from the fixture
(<name>.expected.json). torch runs in subprocesses of this file (`python test_dcp_write.py
whole DIR EXPECTED [DIR EXPECTED ...]` and `sharded DIR EXPECTED`), so that pytest itself never
imports it.
"""

import json
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("RESHARD_SOURCE_DIR", os.path.join(HERE, "..", ".."))
DCP = os.path.join(SOURCE, "verify", "data", "dcp")
PY = os.environ.get("RESHARD_TEST_PY", "/usr/bin/python3")

COLS_STRATEGY = {"current_stage": 1, "parallel_layout_item": {
    "w": {"dev_matrix": [2], "tensor_map": [-1, 0], "tensor_shape": [3, 4], "field": 0,
          "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}


def reshard_cli():
    path = os.environ.get("RESHARD") or os.path.join(os.environ.get("RESHARD_BINARY_DIR", "build"), "examples", "reshard")
    assert os.access(path, os.X_OK), f"the reshard program is not built at {path} (RESHARD_BUILD_CLI=ON)"
    return path


def run_reshard(*args):
    r = subprocess.run([reshard_cli(), *args], capture_output=True, text=True)
    assert r.returncode == 0, (args, r.returncode, r.stderr)
    return r


def run_torch(mode, *args):
    r = subprocess.run([PY, os.path.abspath(__file__), mode, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (mode, r.stdout, r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """reshard's DCP outputs: `plain` converted whole, `cols` transformed onto 2 column ranks."""
    tmp = str(tmp_path_factory.mktemp("dcp_write"))
    plain = os.path.join(tmp, "plain")
    run_reshard("convert", "--in", os.path.join(DCP, "plain"), "--out", plain, "--format", "dcp",
                "--dcp-torch", "1.13", "--no-sync")
    strategy = os.path.join(tmp, "dst.json")
    with open(strategy, "w") as f:
        json.dump(COLS_STRATEGY, f)
    cols = os.path.join(tmp, "cols")
    run_reshard("transform", "--src-dir", os.path.join(DCP, "cols"), "--dst-dir", cols, "--dst-strategy", strategy,
                "--format", "dcp", "--dcp-torch", "1.13", "--no-sync")
    return {"plain": plain, "cols": cols}


def test_the_layout_written(written):
    assert sorted(os.listdir(written["plain"])) == [".metadata", "__0_0.distcp"]
    assert sorted(os.listdir(written["cols"])) == [".metadata", "__0_0.distcp", "__1_0.distcp"]


def test_torch_loads_them_whole(written):
    got = run_torch("whole", written["plain"], os.path.join(DCP, "plain.expected.json"),
                    written["cols"], os.path.join(DCP, "cols.expected.json"))
    # plain's byte items (an int and a str) copied too
    assert got == {"compared": [["b", "scale", "steps", "w", "epoch", "tag"], ["h", "w"]]}


def test_torch_loads_the_transform_into_sharded_tensors(written):
    got = run_torch("sharded", written["cols"], os.path.join(DCP, "cols.expected.json"))
    # each rank compared its column shard, its row shard and the replicated h
    assert got == {"ranks": [[0, ["h", "w by cols", "w by rows"]], [1, ["h", "w by cols", "w by rows"]]]}


def test_torch_loads_what_the_python_module_wrote(written, tmp_path):
    """convert_checkpoint(output_format="dcp", dcp_torch="1.13"): the program's bytes, and torch 1.13
    loads them."""
    import reshard
    out = str(tmp_path / "plain_py")
    reshard.convert_checkpoint(os.path.join(DCP, "plain"), out, output_format="dcp", dcp_torch="1.13", progress=False)
    assert sorted(os.listdir(out)) == sorted(os.listdir(written["plain"]))
    for f in os.listdir(out):
        with open(os.path.join(out, f), "rb") as a, open(os.path.join(written["plain"], f), "rb") as b:
            assert a.read() == b.read(), f
    got = run_torch("whole", out, os.path.join(DCP, "plain.expected.json"))
    assert got == {"compared": [["b", "scale", "steps", "w", "epoch", "tag"]]}


# ---- the torch side (run as a script) -----------------------------------------------------------

def _torch():
    sys.path.insert(0, HERE)
    from torch_dcp import patch_tensor_properties_default
    patch_tensor_properties_default()
    import torch
    import torch.distributed._shard.checkpoint as dcp
    return torch, dcp


def _hex(torch, t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes().hex()


def _full(torch, e):
    """The tensor torch loaded from the fixture, from its expected JSON entry."""
    dtype = getattr(torch, e["dtype"])
    raw = bytes.fromhex(e["hex"])
    view = torch.int16 if dtype == torch.bfloat16 else dtype
    t = torch.frombuffer(bytearray(raw), dtype=view) if raw else torch.zeros(0, dtype=view)
    return t.view(dtype).reshape(e["shape"])


def _whole(*pairs):
    """Each DIR EXPECTED pair: DIR loaded whole (no_dist) equals EXPECTED."""
    torch, dcp = _torch()
    compared = []
    for directory, expected in zip(pairs[::2], pairs[1::2]):
        exp = json.load(open(expected))
        state = {k: torch.full(e["shape"], 7, dtype=getattr(torch, e["dtype"])) for k, e in exp["tensors"].items()}
        state.update({k: None for k in exp["bytes"]})  # the byte items: what torch.load makes of them
        dcp.load_state_dict(state, dcp.FileSystemReader(directory), no_dist=True)
        for k, e in exp["tensors"].items():
            assert list(state[k].shape) == e["shape"], k
            assert _hex(torch, state[k]) == e["hex"], (directory, k, _hex(torch, state[k]), e["hex"])
        for k, r in exp["bytes"].items():
            assert repr(state[k]) == r, (directory, k, state[k], r)
        compared.append(sorted(exp["tensors"]) + sorted(exp["bytes"]))
    print(json.dumps({"compared": compared}))


def _sharded_worker(rank, world, directory, expected, init_file, results):
    torch, dcp = _torch()
    import torch.distributed as dist
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    exp = json.load(open(expected))["tensors"]
    w, h = _full(torch, exp["w"]), _full(torch, exp["h"])
    done = []
    for dim, what in ((1, "w by cols"), (0, "w by rows")):
        spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
        st = sharded_tensor.full(spec, list(w.shape), 7, dtype=w.dtype)
        state = {"w": st, "h": torch.full(list(h.shape), 7, dtype=h.dtype)}
        dcp.load_state_dict(state, dcp.FileSystemReader(directory))
        for shard in st.local_shards():
            md = shard.metadata
            index = tuple(slice(o, o + s) for o, s in zip(md.shard_offsets, md.shard_sizes))
            assert _hex(torch, shard.tensor) == _hex(torch, w[index]), (rank, what, md)
        assert _hex(torch, state["h"]) == _hex(torch, h), (rank, "h")
        done.append(what)
    results.put((rank, ["h"] + done))
    dist.barrier()
    dist.destroy_process_group()


def _sharded(directory, expected):
    """2 gloo processes (this one imports no torch) load `directory`, each checking its shards."""
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    results = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_sharded_worker, args=(r, 2, directory, expected, os.path.join(tmp, "init"), results))
                 for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(100)
        codes = [p.exitcode for p in procs]
        assert codes == [0, 0], f"the gloo processes exited with {codes}"
    got = sorted(results.get() for _ in range(2))
    print(json.dumps({"ranks": [[r, sorted(w)] for r, w in got]}))


if __name__ == "__main__":
    {"whole": _whole, "sharded": _sharded}[sys.argv[1]](*sys.argv[2:])
