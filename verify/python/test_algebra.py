"""The layout algebra from Python: layouts in three notations, plans as numpy, rank lists, and
convert / split / merge on numpy arrays of any dtype, checked against numpy slicing."""

import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

import reshard
from reshard import Layout, Replicate, Shard


# ------------------------------------------------------------------------------------------------
# layouts

def test_mindspore_layout_boxes():
    l = Layout([2, 4], [1, -1], [8, 4])
    assert l.ranks == 8
    assert l.dev_matrix == (2, 4)
    assert l.tensor_map == [1, -1]
    assert l.shape == (8, 4)
    assert str(l) == "dev[2,4] map[1,-1] shape[8,4]"
    assert [l.box(r) for r in (0, 3, 4, 7)] == [((0, 0), (4, 4)), ((0, 0), (4, 4)), ((4, 0), (4, 4)), ((4, 0), (4, 4))]
    assert l.slices(5) == (slice(4, 8, 1), slice(0, 4, 1))


def test_optimizer_sharding_and_tuple_maps():
    l = Layout([4, 2], [-1, 0], [8, 4], opt_shard_step=2, opt_shard_size=4)
    assert l.opt_shard == (2, 4)
    for r in range(8):  # rank r holds rows 2*((r/2)%4) ..+2 and cols 2*(r%2) ..+2 (docs/concepts.md)
        assert l.box(r) == ((2 * ((r // 2) % 4), 2 * (r % 2)), (2, 2))
    t = Layout([4, 2, 2], [(2, 1), 0], [8, 8])
    assert t.tensor_map == [(2, 1), 0]
    assert t.box(2) == ((1, 0), (1, 4))


def test_three_notations_agree():
    a = Layout([2, 4], [1, -1], [8, 4])
    b = Layout.dtensor([2, 4], [Shard(0), Replicate()], [8, 4], split="divisible")
    c = Layout.jax({"dp": 2, "tp": 4}, ["dp"], [8, 4])
    d = Layout.dtensor([2, 4], ["S(0)", "R"], [8, 4], split="divisible")
    assert a == b == c == d
    assert Layout.mindspore([2, 4], [1, -1], [8, 4]) == a
    assert Layout.jax([("dp", 2), ("tp", 4)], [None, ("dp", "tp")], [3, 8]) == Layout([2, 4], [-1, (1, 0)], [3, 8])


def test_uneven_and_stages():
    l = Layout.dtensor([4], [Shard(0)], [10])
    assert [l.box(r)[1][0] for r in range(4)] == [3, 3, 3, 1]
    b = Layout([4], [0], [10], split="balanced")
    assert [b.box(r)[1][0] for r in range(4)] == [3, 3, 2, 2]
    s = Layout([4], [0], [10], param_split_shape=[4, 2, 2, 2])
    assert [s.box(r) for r in range(4)] == [((0,), (4,)), ((4,), (2,)), ((6,), (2,)), ((8,), (2,))]
    p = Layout([2, 2], [1, 0], [4, 4], stage=1)
    assert p.first_rank == 4
    assert p.box(5) == ((0, 2), (2, 2))
    f = Layout.full([3, 5], rank=2)
    assert (f.ranks, f.first_rank, f.box(2)) == (1, 2, ((0, 0), (3, 5)))


# ------------------------------------------------------------------------------------------------
# plans

A = Layout([2, 1, 2, 2], [2, 1], [8, 8])                                      # the tutorial's 8 ranks
B = Layout([2, 2, 1], [1, 0], [8, 8], opt_shard_step=2, opt_shard_size=2)     # and 4, optimizer sharded


def test_plan_8to4_transfers_and_cost():
    p = reshard.plan(A, B)
    assert len(p) == 8
    t = p.transfers
    assert t.dtype.names == ("src", "dst", "offset", "extent")
    got = sorted((int(x["src"]), int(x["dst"]), tuple(x["offset"]), tuple(x["extent"])) for x in t)
    want = sorted([(0, 0, (0, 0), (2, 4)), (2, 0, (0, 4), (2, 4)), (1, 1, (4, 0), (2, 4)), (3, 1, (4, 4), (2, 4)),
                   (0, 2, (2, 0), (2, 4)), (2, 2, (2, 4), (2, 4)), (1, 3, (6, 0), (2, 4)), (3, 3, (6, 4), (2, 4))])
    assert got == want
    assert sorted(p.transfer_list()) == want
    c = p.cost(4)
    assert c == {"cross_bytes": 128, "local_bytes": 128, "lower_bound_bytes": 128, "messages": 4,
                 "max_sent_bytes": 32, "mean_sent_bytes": 16.0}
    assert p.src == A and p.dst == B


def test_rank_list_is_the_round_robin_senders():
    p = reshard.plan(A, B, policy="round_robin")
    for t in range(4):
        senders = sorted(int(x["src"]) for x in p.transfers if x["dst"] == t)
        assert reshard.rank_list(A, B, t) == senders
        assert len(senders) == 2


def test_convert_8to4_all_dtypes():
    p = reshard.plan(A, B)
    for dtype in (np.float32, np.float16, np.float64, np.int8, np.uint16, np.int64, np.bool_, np.complex64):
        full = (np.arange(64) % 7).astype(dtype).reshape(8, 8)
        shards = reshard.split(full, A)
        assert [s.shape for s in shards] == [(8, 4)] * 8
        out = reshard.convert(p, shards)
        assert len(out) == 4
        for t in range(4):
            assert out[t].dtype == np.dtype(dtype)
            np.testing.assert_array_equal(out[t], full[B.slices(t)])
        np.testing.assert_array_equal(reshard.merge(out, B), full)


def test_convert_reads_only_what_the_plan_needs_and_does_not_copy():
    p = reshard.plan(A, B, policy="round_robin")
    full = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    shards = reshard.split(full, A)
    needed = set(int(s) for s in p.transfers["src"])
    sparse = [s if r in needed else None for r, s in enumerate(shards)]
    out = reshard.convert(p, sparse, threads=2)
    for t in range(4):
        np.testing.assert_array_equal(out[t], full[B.slices(t)])
    # inputs through the buffer protocol: a memoryview and a 1-D view of the same memory work alike
    views = [memoryview(s) if r % 2 else s.reshape(-1) for r, s in enumerate(shards)]
    for t, o in enumerate(reshard.convert(p, views)):
        np.testing.assert_array_equal(o, full[B.slices(t)])


def test_bfloat16_as_uint16_bits():
    full = np.arange(64, dtype=np.uint16).reshape(8, 8) * 257  # bf16 bit patterns
    out = reshard.convert(reshard.plan(A, B), reshard.split(full, A))
    for t in range(4):
        assert out[t].dtype == np.uint16
        np.testing.assert_array_equal(out[t], full[B.slices(t)])


def test_convert_releases_the_gil():
    # a Python thread runs in the middle of a large conversion, which it could not while the
    # conversion held the GIL
    src = Layout([8], [0, -1], [4096, 4096])
    dst = Layout([8], [-1, 0], [4096, 4096])
    p = reshard.plan(src, dst)
    shards = reshard.split(np.ones((4096, 4096), np.float32), src)
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    th = threading.Thread(target=tick)
    th.start()
    try:
        # Whether the ticker is scheduled inside one conversion depends on the machine's load, not
        # on the GIL alone, so the test tries up to 100 conversions and stops at the first that
        # saw a tick; a conversion that held the GIL would never see one.
        inside = []
        while len(inside) < 100 and not any(inside):
            t0 = time.perf_counter()
            reshard.convert(p, shards)
            t1 = time.perf_counter()
            lo, hi = t0 + 0.25 * (t1 - t0), t0 + 0.75 * (t1 - t0)
            inside.append(sum(1 for t in ticks if lo < t < hi))
    finally:
        stop.set()
        th.join()
        sys.setswitchinterval(old)
    assert any(inside), inside


# ------------------------------------------------------------------------------------------------
# bad input: exceptions, never a crash

def test_bad_layouts_raise_value_errors():
    with pytest.raises(reshard.Error, match="does not divide"):
        Layout([2, 4], [1, -1], [7, 4])
    with pytest.raises(ValueError, match="out of range"):
        Layout([2, 4], [2, -1], [8, 4])
    with pytest.raises(ValueError, match="split must be"):
        Layout([2], [0], [4], split="uneven")
    with pytest.raises(ValueError, match="placement 'S\\(x\\)'"):
        Layout.dtensor([2], ["S(x)"], [4])
    with pytest.raises(ValueError, match="mesh axis 'mp'"):
        Layout.jax({"dp": 2}, ["mp"], [4])
    with pytest.raises(TypeError):
        Layout([2], ["a"], [4])
    assert issubclass(reshard.Error, ValueError)


def test_bad_plans_and_shards():
    with pytest.raises(ValueError, match="shape"):
        reshard.plan(Layout([2], [0], [4]), Layout([2], [0], [6]))
    with pytest.raises(ValueError, match="policy"):
        reshard.plan(A, B, policy="fastest")
    with pytest.raises(ValueError):
        reshard.rank_list(A, B, 4)
    p = reshard.plan(A, B)
    shards = reshard.split(np.zeros((8, 8), np.float32), A)
    with pytest.raises(ValueError, match="7 source shards"):
        reshard.convert(p, shards[:7])
    with pytest.raises(ValueError, match="source rank 3 has shape \\(8, 3\\)"):
        reshard.convert(p, shards[:3] + [np.zeros((8, 3), np.float32)] + shards[4:])
    with pytest.raises(ValueError, match="dtype"):
        reshard.convert(p, shards[:3] + [np.zeros((8, 4), np.float64)] + shards[4:])
    with pytest.raises(ValueError, match="C-contiguous"):
        reshard.convert(p, shards[:3] + [np.zeros((8, 8), np.float32)[:, ::2]] + shards[4:])
    with pytest.raises(ValueError, match="whose shard is null"):
        reshard.convert(p, [None] + shards[1:])
    with pytest.raises(ValueError, match="every source shard is None"):
        reshard.convert(p, [None] * 8)
    with pytest.raises(TypeError, match="not an array"):
        reshard.convert(p, [object()] * 8)
    with pytest.raises(TypeError, match="dtype object"):
        reshard.convert(p, [np.empty((8, 4), object)] * 8)
    with pytest.raises(ValueError, match="no shard given for region"):
        reshard.merge([s if r in (0, 1, 4, 5) else None for r, s in enumerate(shards)], A)
    with pytest.raises(ValueError, match="full tensor has shape"):
        reshard.split(np.zeros((8, 7), np.float32), A)


# ------------------------------------------------------------------------------------------------
# properties over random layouts

@st.composite
def layouts(draw, shape=None, dev=None):
    """A random valid layout (chunk or balanced splits, so any shape works), and its shape."""
    if dev is None:
        dev = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    if shape is None:
        shape = draw(st.lists(st.integers(0, 9), min_size=0, max_size=3))
    nd = len(dev)
    # each device axis (counted from the right) splits at most one dim
    owner = [draw(st.integers(-1, len(shape) - 1)) if shape else -1 for _ in range(nd)]
    tmap = []
    for i in range(len(shape)):
        axes = [nd - 1 - a for a in range(nd) if owner[a] == i]
        axes = draw(st.permutations(axes)) if axes else axes
        tmap.append(-1 if not axes else axes[0] if len(axes) == 1 else tuple(axes))
    mode = draw(st.sampled_from(["chunk", "balanced"]))
    repeat = 1
    for a in range(nd):
        if owner[a] == -1:
            repeat *= dev[a]
    size = draw(st.sampled_from([0] + [d for d in range(2, repeat + 1) if repeat % d == 0])) if shape else 0
    stage = draw(st.integers(0, 2))  # placed on ranks stage * n ..: source and target meshes may differ
    return Layout(dev, tmap, shape, split=mode, opt_shard_size=size, stage=stage), shape


def _full(shape, seed):
    return np.random.default_rng(seed).integers(-1000, 1000, size=shape).astype(np.int32)


@given(layouts(), st.integers(0, 2**16))
def test_split_then_merge_is_identity(ls, seed):
    l, shape = ls
    full = _full(shape, seed)
    shards = reshard.split(full, l)
    assert len(shards) == l.ranks
    for r, s in enumerate(shards):
        np.testing.assert_array_equal(s, full[l.slices(l.first_rank + r)])
    np.testing.assert_array_equal(reshard.merge(shards, l), full)


@given(st.data(), st.sampled_from(["least_loaded", "round_robin", "nearest"]), st.sampled_from([np.int8, np.float32, np.float64]))
def test_convert_matches_numpy_slicing(data, policy, dtype):
    src, shape = data.draw(layouts())
    dst, _ = data.draw(layouts(shape=shape))
    full = _full(shape, 7).astype(dtype)
    p = reshard.plan(src, dst, policy=policy)
    out = reshard.convert(p, reshard.split(full, src))
    assert len(out) == dst.ranks
    for t, o in enumerate(out):
        assert o.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(o, full[dst.slices(dst.first_rank + t)])
    c = p.cost(np.dtype(dtype).itemsize)
    assert c["cross_bytes"] == c["lower_bound_bytes"]  # minimal
    # every target box covered exactly once
    assert sum(int(np.prod(x["extent"])) for x in p.transfers) == sum(
        int(np.prod(dst.box(dst.first_rank + t)[1])) for t in range(dst.ranks))


@given(st.data())
def test_rank_list_covers_the_target(data):
    src, shape = data.draw(layouts())
    dst, _ = data.draw(layouts(shape=shape))
    assume(dst.ranks > 0)
    t = dst.first_rank + data.draw(st.integers(0, dst.ranks - 1))
    ranks = reshard.rank_list(src, dst, t)
    assert ranks == sorted(set(ranks))
    p = reshard.plan(src, dst, policy="round_robin")
    assert ranks == sorted(int(x["src"]) for x in p.transfers if x["dst"] == t)
    # the listed ranks' pieces cover target t's piece exactly
    mine = [x for x in p.transfers if x["dst"] == t]
    assert sum(int(np.prod(x["extent"])) for x in mine) == int(np.prod(dst.box(t)[1]))
    for x in mine:
        off, ext = src.box(int(x["src"]))
        assert all(o <= a and a + e <= o + n for o, n, a, e in zip(off, ext, x["offset"], x["extent"]))
