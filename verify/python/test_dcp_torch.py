"""PyTorch DCP end to end with real torch (Debian's python3-torch, 1.13): 4 gloo CPU processes
write a checkpoint with torch.distributed._shard.checkpoint.save_state_dict at test time, and every
value reshard makes of it (the program `reshard` and the Python module) is compared bit for bit
(bfloat16 by its 16-bit patterns, NaN payloads included) with what torch's own load_state_dict
(no_dist=True) reads into full tensors. The chain back: the checkpoint transformed to 8 MindSpore
ranks, merged from them into a DCP checkpoint (--dcp-torch 1.13), which 2 gloo processes load into
ShardedTensors split by columns, every shard equal to torch's first load.

The checkpoint (EXAMPLE) holds a ShardedTensor in an uneven 2-D grid, a ShardedTensor split by
rows unevenly (3 + 3 + 3 + 1), a plain tensor every rank saves (replicated), a bfloat16
ShardedTensor of random bit patterns, a plain int64 tensor and a byte item (an int). It is written
once per module; the test functions share it.

Needs the program: $RESHARD (ctest sets it), else build/examples/reshard of the source tree. By
hand:
    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q -p no:cacheprovider verify/python/test_dcp_torch.py"""

import json
import os
import subprocess

import numpy as np
import pytest

import hf_reference
import ms_files
import reshard
import torch_dcp

torch_dcp.patch_tensor_properties_default()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed._shard.metadata import ShardMetadata  # noqa: E402
from torch.distributed._shard.sharding_spec import ChunkShardingSpec, EnumerableShardingSpec  # noqa: E402

WORLD = 4
# name: (global shape, dtype, how: "grid" (GRID below), a dim (ChunkShardingSpec over the 4 ranks)
# or None (a plain tensor each rank saves))
EXAMPLE = {
    "grid": ([8, 10], torch.float32, "grid"),
    "rows": ([10, 3], torch.float32, 0),
    "replicated": ([3, 5], torch.float32, None),
    "half": ([4, 8], torch.bfloat16, 1),
    "steps": ([6], torch.int64, None),
}
GRID = [([0, 0], [5, 6]), ([0, 6], [5, 4]), ([5, 0], [3, 6]), ([5, 6], [3, 4])]  # (offsets, sizes) of rank r
EPOCH = 7  # the byte item "epoch"

# The 8-rank MindSpore strategy of (b): dev_matrix [2, 4] (axis 1 has 2 devices, axis 0 has 4);
# "replicated" is in no strategy (copied whole to every rank).
MS_LAYOUTS = {"grid": [0, 1], "rows": [1, -1], "half": [-1, 0], "steps": [1]}
MS_DEV = [2, 4]


def full_values(name):
    """The full tensor `name` of EXAMPLE, deterministic (every process makes the same)."""
    shape, dtype, _ = EXAMPLE[name]
    g = torch.Generator().manual_seed(sorted(EXAMPLE).index(name) + 1)
    n = int(np.prod(shape))
    if dtype == torch.bfloat16:  # random 16-bit patterns, the first ones special
        bits = torch.randint(-32768, 32768, (n,), generator=g, dtype=torch.int32)
        special = [0x7FC1, 0xFF81, 0x7F80, 0xFF80, 0x8000, 0x0001, 0x807F, 0x7F7F]  # NaNs with payloads,
        bits[:len(special)] = torch.tensor(special, dtype=torch.int32)  # infinities, -0, subnormals, max
        return bits.to(torch.int16).view(torch.bfloat16).reshape(shape)
    if dtype == torch.int64:
        return torch.randint(-2 ** 62, 2 ** 62, (n,), generator=g, dtype=torch.int64).reshape(shape)
    return torch.randn(shape, generator=g, dtype=dtype)


def save_worker(rank, out, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=WORLD)
    sd = {"epoch": EPOCH}
    for name, (shape, dtype, how) in EXAMPLE.items():
        full = full_values(name)
        if how is None:
            sd[name] = full.clone()
            continue
        if how == "grid":
            spec = EnumerableShardingSpec([ShardMetadata(shard_offsets=o, shard_sizes=z, placement=f"rank:{r}/cpu")
                                           for r, (o, z) in enumerate(GRID)])
        else:
            spec = ChunkShardingSpec(dim=how, placements=[f"rank:{r}/cpu" for r in range(WORLD)])
        sd[name] = torch_dcp.sharded_from_full(full, spec)
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out, single_file_per_rank=True))
    dist.barrier()
    dist.destroy_process_group()


def raw(t):
    """The little-endian bytes of a tensor (bfloat16 as its 16-bit patterns)."""
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


ST_DTYPE = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(the DCP directory, {name: (safetensors dtype, shape, bytes)} that torch loads from it)."""
    tmp = tmp_path_factory.mktemp("dcp_torch")
    out = str(tmp / "dcp")
    os.makedirs(out)
    # FileStore rendezvous (no fixed port); start_method fork: the children need not import torch again
    mp.start_processes(save_worker, args=(out, str(tmp / "init")), nprocs=WORLD, join=True, start_method="fork")
    state = {name: torch.zeros(shape, dtype=dtype) for name, (shape, dtype, _) in EXAMPLE.items()}
    state["epoch"] = 0
    dcp.load_state_dict(state, dcp.FileSystemReader(out), no_dist=True)
    assert state["epoch"] == EPOCH
    expected = {}
    for name, (shape, dtype, _) in EXAMPLE.items():
        assert raw(state[name]) == raw(full_values(name)), name  # torch read back what it saved
        expected[name] = (ST_DTYPE[dtype], shape, raw(state[name]))
    return out, expected


def program():
    """$RESHARD, else the program of $RESHARD_BINARY_DIR or of build/ in the source tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("RESHARD_BINARY_DIR", os.path.join(here, "..", "..", "build"))
    exe = os.environ.get("RESHARD") or os.path.join(build, "examples", "reshard")
    assert os.access(exe, os.X_OK), "%s is not a program: set RESHARD to the path of the reshard program" % exe
    return exe


def cli(*args):
    return subprocess.run([program()] + [str(a) for a in args], capture_output=True, text=True)


def assert_same(got, want):
    """{name: (dtype, shape, bytes)} equal, name for name, with a readable difference."""
    assert sorted(got) == sorted(want)
    for name in want:
        assert tuple(got[name][:2]) == tuple(want[name][:2]), name
        assert got[name][2] == want[name][2], name


def test_the_checkpoint_is_sharded_as_meant(saved):
    d, _ = saved
    assert sorted(f for f in os.listdir(d) if f.endswith(".distcp")) == ["__%d_0.distcp" % r for r in range(WORLD)]
    j = json.loads(cli("inspect", "--json", d).stdout)
    chunks = {t["name"]: [(c["offsets"], c["sizes"]) for c in t["chunks"]] for t in j["tensors"]}
    assert sorted(chunks["grid"]) == sorted((o, z) for o, z in GRID)
    assert sorted(z[0] for _, z in chunks["rows"]) == [1, 3, 3, 3]
    assert [b["name"] for b in j["byte_items"]] == ["epoch"]


def test_cli_merge_hf_is_torchs(saved, tmp_path):
    d, expected = saved
    out = tmp_path / "hf"
    r = cli("merge", "--src-dir", d, "--out", out, "--format", "hf", "--no-sync")
    assert r.returncode == 0, r.stderr
    assert "'epoch'" in r.stderr and "left out" in r.stderr  # the byte item, named
    assert_same(hf_reference.read_model(str(out)), expected)


def test_python_merge_hf_is_torchs(saved, tmp_path):
    d, expected = saved
    out = tmp_path / "hf"
    s = reshard.merge_checkpoints(d, out, output_format="hf", progress=False)
    assert any("'epoch'" in w and "left out" in w for w in s["warnings"]), s["warnings"]
    assert_same(hf_reference.read_model(str(out)), expected)
    v = reshard.verify_merged_checkpoint(d, out, output_format="hf", progress=False)
    assert v["ok"] and v["tensors"] == len(EXAMPLE), v


def test_cli_merge_in_a_budget_verify_and_cast(saved, tmp_path):
    d, expected = saved
    out = tmp_path / "hf"
    r = cli("merge", "--src-dir", d, "--out", out, "--format", "hf", "--max-memory", "64MiB", "--no-sync")
    assert r.returncode == 0, r.stderr
    assert_same(hf_reference.read_model(str(out)), expected)
    r = cli("verify", "--src-dir", d, "--out", out, "--format", "hf")
    assert r.returncode == 0 and "5 tensors" in r.stdout and "identical" in r.stdout, r.stdout + r.stderr
    bf16 = tmp_path / "bf16"
    r = cli("merge", "--src-dir", d, "--out", bf16, "--format", "hf", "--dtype", "bfloat16", "--no-sync")
    assert r.returncode == 0, r.stderr
    got = hf_reference.read_model(str(bf16))
    for name, (dt, shape, b) in expected.items():  # float32 rounded to nearest even; the others unchanged
        want = hf_reference.cast_bytes(dt, b, "BF16") if dt == "F32" else b
        assert got[name] == ("BF16" if dt in ("F32", "BF16") else dt, shape, want), name


def ms_strategy(path):
    items = {}
    for name, tmap in MS_LAYOUTS.items():
        items[name] = {"dev_matrix": MS_DEV, "tensor_map": tmap, "tensor_shape": EXAMPLE[name][0], "field": 0,
                       "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}
    with open(path, "w") as f:
        json.dump({"current_stage": 1, "parallel_layout_item": items}, f)
    return path


def ms_piece(name, full, rank):
    """Target rank `rank`'s piece of the full numpy array `full` in MS_LAYOUTS (MindSpore's
    convention: tensor_map entries count device axes from the right; rank = sum coord * stride)."""
    tmap = MS_LAYOUTS.get(name)
    if tmap is None:
        return full
    coord, r = [], rank
    for size in reversed(MS_DEV):  # coord[k] of axis k counted from the right
        coord.append(r % size)
        r //= size
    index = []
    for dim, axis in enumerate(tmap):
        if axis == -1:
            index.append(slice(None))
            continue
        n = MS_DEV[len(MS_DEV) - 1 - axis]
        step = full.shape[dim] // n
        index.append(slice(coord[axis] * step, (coord[axis] + 1) * step))
    return full[tuple(index)]


NP_DTYPE = {"F32": np.float32, "BF16": np.uint16, "I64": np.int64}


def expected_arrays(expected):
    return {name: np.frombuffer(b, NP_DTYPE[dt]).reshape(shape) for name, (dt, shape, b) in expected.items()}


def test_cli_transform_to_8_mindspore_ranks_and_back(saved, tmp_path):
    d, expected = saved
    strategy = ms_strategy(tmp_path / "dst.json")
    ms = tmp_path / "ms"
    r = cli("transform", "--src-dir", d, "--dst-dir", ms, "--dst-strategy", strategy, "--no-sync")
    assert r.returncode == 0, r.stderr
    assert "'epoch'" in r.stderr
    full = expected_arrays(expected)
    for t in range(8):  # each rank's file, read by protobuf's own parser, holds its pieces
        cp = ms_files.parse_ckpt(str(ms / ("rank_%d" % t) / ("checkpoint_%d.ckpt" % t)))
        content = {}
        for v in cp.value:
            content[v.tag] = content.get(v.tag, b"") + v.tensor.tensor_content
        assert sorted(content) == sorted(EXAMPLE), t
        for name in EXAMPLE:
            assert content[name] == np.ascontiguousarray(ms_piece(name, full[name], t)).tobytes(), (t, name)
    back = tmp_path / "back.safetensors"
    r = cli("merge", "--src-dir", ms, "--src-strategy", strategy, "--out", back, "--no-sync")
    assert r.returncode == 0, r.stderr
    assert_same(hf_reference.read_model(str(back)), expected)


def load_columns_worker(rank, directory, init_file, expected):
    """One of 2 gloo processes: load_state_dict of `directory` into ShardedTensors split by columns
    (dim 1; the 1-D steps by rows) and the replicated tensor, each local shard compared with the
    slice of torch's own first load, bit for bit."""
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=2)
    spec_of = {1: ChunkShardingSpec(dim=1, placements=["rank:0/cpu", "rank:1/cpu"]),
               0: ChunkShardingSpec(dim=0, placements=["rank:0/cpu", "rank:1/cpu"])}
    state = {}
    for name, (shape, dtype, how) in EXAMPLE.items():
        if how is None and name == "replicated":
            state[name] = torch.full(shape, 7, dtype=dtype)
        else:
            state[name] = sharded_tensor_full(spec_of[1 if len(shape) == 2 else 0], shape, dtype)
    dcp.load_state_dict(state, dcp.FileSystemReader(directory))
    for name, (shape, dtype, _) in EXAMPLE.items():
        full = torch.frombuffer(bytearray(expected[name][2]), dtype=torch.int16 if dtype == torch.bfloat16 else dtype)
        full = full.view(dtype).reshape(shape)
        if not hasattr(state[name], "local_shards"):  # the plain tensor (a ShardedTensor is a Tensor too)
            assert raw(state[name]) == raw(full), (rank, name)
            continue
        for shard in state[name].local_shards():
            md = shard.metadata
            index = tuple(slice(o, o + z) for o, z in zip(md.shard_offsets, md.shard_sizes))
            assert raw(shard.tensor) == raw(full[index]), (rank, name, md)
    dist.barrier()
    dist.destroy_process_group()


def sharded_tensor_full(spec, shape, dtype):
    from torch.distributed._shard import sharded_tensor
    return sharded_tensor.full(spec, list(shape), 7, dtype=dtype)


def test_cli_to_8_mindspore_ranks_then_dcp_torch_loads_by_columns(saved, tmp_path):
    """The chain of the issue: torch's 4-process DCP -> 8 MindSpore ranks -> a DCP checkpoint
    (--dcp-torch 1.13, whole tensors) that torch loads into a 2-process column sharding."""
    d, expected = saved
    strategy = ms_strategy(tmp_path / "dst.json")
    ms, back = tmp_path / "ms", tmp_path / "back"
    r = cli("transform", "--src-dir", d, "--dst-dir", ms, "--dst-strategy", strategy, "--no-sync")
    assert r.returncode == 0, r.stderr
    r = cli("merge", "--src-dir", ms, "--src-strategy", strategy, "--out", back, "--format", "dcp",
            "--dcp-torch", "1.13", "--no-sync")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(back)) == [".metadata", "__0_0.distcp"]
    mp.start_processes(load_columns_worker, args=(str(back), str(tmp_path / "init"), expected), nprocs=2, join=True,
                       start_method="fork")


def test_python_transform_to_8_mindspore_ranks_and_back(saved, tmp_path):
    d, expected = saved
    strategy = ms_strategy(tmp_path / "dst.json")
    ms = tmp_path / "ms"
    s = reshard.transform_checkpoints(d, ms, "checkpoint_", None, strategy, process_num=2, progress=False)
    assert s["files"] == 8 and any("'epoch'" in w for w in s["warnings"])
    assert reshard.verify_checkpoints(d, ms, "checkpoint_", None, strategy, progress=False)["ok"]
    back = tmp_path / "back.safetensors"
    reshard.merge_checkpoints(ms, back, strategy, progress=False)
    assert_same(hf_reference.read_model(str(back)), expected)


def test_python_load_checkpoint_by_rank(saved, tmp_path):
    d, expected = saved
    strategy = ms_strategy(tmp_path / "dst.json")
    full = expected_arrays(expected)
    for t in (0, 5, 7):
        with pytest.warns(UserWarning, match="'epoch'"):
            got = reshard.load_checkpoint_by_rank(t, d, dst_strategy_file=strategy, progress=False)
        assert sorted(got) == sorted(EXAMPLE)
        for name, a in got.items():
            want = ms_piece(name, full[name], t)
            assert a.shape == want.shape, (t, name)
            assert a.tobytes() == np.ascontiguousarray(want).tobytes(), (t, name)
    with pytest.warns(UserWarning, match="'epoch'"):
        whole = reshard.load_checkpoint_by_rank(0, d, progress=False)  # no strategy: the full tensors
    try:
        import ml_dtypes
        bf16 = np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        bf16 = np.dtype(np.uint16)  # the same bits
    assert sorted(whole) == sorted(EXAMPLE)
    for name, a in whole.items():
        assert a.dtype == (bf16 if name == "half" else full[name].dtype), name
        assert a.shape == full[name].shape and a.tobytes() == full[name].tobytes(), name
