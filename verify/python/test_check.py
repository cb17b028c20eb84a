"""check_plan, check_rank_list and check_rank_list_for_transform from Python: reshard's own plans
and rank lists pass, a dropped transfer or a missing rank is reported; the dicts hold the keys of
the program's --json."""

import os

import numpy as np
from hypothesis import assume, given, strategies as st

import ms_scenario
import reshard
from reshard import Layout
from test_algebra import layouts


def test_own_plan_passes_both_forms():
    a, b = Layout([2], [0, -1], [8, 4]), Layout([2], [-1, 0], [8, 4])
    p = reshard.plan(a, b)
    r = reshard.check_plan(a, b, p.transfers, element_bytes=4)
    assert r["ok"] and r["complete"] and r["sound"] and r["problems"] == []
    assert r["cost"]["cross_bytes"] == r["lower_bound_bytes"] == p.cost(4)["cross_bytes"]
    as_dicts = [{"src": int(x["src"]), "dst": int(x["dst"]), "offset": x["offset"].tolist(),
                 "shape": x["extent"].tolist()} for x in p.transfers]
    assert reshard.check_plan(a, b, as_dicts, element_bytes=4) == r


def test_a_dropped_transfer_is_reported():
    a, b = Layout([2], [0, -1], [8, 4]), Layout([2], [-1, 0], [8, 4])
    xs = reshard.plan(a, b).transfers
    keep = ~((xs["dst"] == 1) & (xs["src"] == 1))
    r = reshard.check_plan(a, b, xs[keep])
    assert not r["ok"] and not r["complete"] and r["sound"]
    assert r["problem_count"] == 1
    (p,) = r["problems"]
    assert (p["kind"], p["dst"], p["offset"], p["shape"]) == ("uncovered", 1, [4, 2], [4, 2])


def test_bad_transfers_are_errors_or_problems():
    a = Layout([2], [0], [8])
    r = reshard.check_plan(a, a, [{"src": 5, "dst": 0, "offset": [0], "shape": [4]}])
    assert not r["sound"] and r["problems"][0]["kind"] == "bad transfer"
    for bad in ([{"src": 0}], "nonsense", [{"src": 0, "dst": 0, "offset": [0], "shape": [-1]}]):
        try:
            reshard.check_plan(a, a, bad)
        except reshard.Error:
            pass
        else:
            raise AssertionError("accepted %r" % (bad,))
    no_fields = np.zeros(2, dtype=[("src", "<i8"), ("dst", "<i8")])
    try:
        reshard.check_plan(a, a, no_fields)
    except ValueError as e:
        assert "offset" in str(e)
    else:
        raise AssertionError("accepted a structured array without offset")


@given(st.data())
def test_own_plans_pass_and_a_drop_is_caught(data):
    src, shape = data.draw(layouts())
    dst, _ = data.draw(layouts(shape=shape))
    xs = reshard.plan(src, dst, policy=data.draw(st.sampled_from(["least_loaded", "round_robin", "nearest"]))).transfers
    assert reshard.check_plan(src, dst, xs)["ok"]
    nonempty = [i for i, x in enumerate(xs) if int(np.prod(x["extent"])) > 0]
    assume(nonempty)
    i = data.draw(st.sampled_from(nonempty))
    r = reshard.check_plan(src, dst, np.delete(xs, i))
    assert not r["complete"] and r["problems"][0]["kind"] == "uncovered"


def test_check_rank_list():
    # two row blocks, each on 2 of 4 ranks, to 2 ranks: target 0 needs rows 0..3 only
    a, b = Layout([2, 2], [1, -1], [8, 4]), Layout([2], [0, -1], [8, 4])
    r = reshard.check_rank_list(a, b, 0, [0, 1, 2, 3])
    assert r["sufficient"] and not r["minimal_list"]
    assert r["minimal"] == r["kept"] == reshard.rank_list(a, b, 0)
    assert len(r["superfluous"]) == 3
    top = [s for s in range(4) if a.box(s)[0][0] == 0]
    r = reshard.check_rank_list(a, b, 0, [s for s in range(4) if s not in top])
    assert not r["sufficient"] and r["uncovered"] == [{"offset": [0, 0], "shape": [4, 4]}]
    assert reshard.check_rank_list(a, b, 0, reshard.rank_list(a, b, 0))["minimal_list"]


@given(st.data())
def test_own_rank_list_is_sufficient_and_minimal(data):
    src, shape = data.draw(layouts())
    dst, _ = data.draw(layouts(shape=shape))
    assume(dst.ranks > 0)
    t = dst.first_rank + data.draw(st.integers(0, dst.ranks - 1))
    r = reshard.check_rank_list(src, dst, t, reshard.rank_list(src, dst, t))
    assert r["sufficient"] and r["minimal_list"] and r["superfluous"] == []


def _scenario(tmp_path):
    d = str(tmp_path / "retrain_8to4")
    assert ms_scenario.gen("retrain_8to4", d) == 0
    return os.path.join(d, "src_strategy.ckpt"), os.path.join(d, "dst_strategy.ckpt")


def test_check_rank_list_for_transform_is_the_programs_json(tmp_path):
    s, d = _scenario(tmp_path)
    r = reshard.check_rank_list_for_transform(1, list(range(8)), s, d)
    assert r["sufficient"] and not r["minimal_list"]
    assert r["rank_list"] == reshard.rank_list_for_transform(1, s, d)
    assert r["kept"] == [0, 1, 2, 3] and r["superfluous"] == [4, 5, 6, 7]
    less = reshard.check_rank_list_for_transform(1, [0, 1, 2], s, d)
    assert not less["sufficient"] and less["missing"]
    assert set(r) == {"sufficient", "minimal_list", "parameters", "base_rank", "base_listed", "missing",
                      "superfluous", "kept", "rank_list"}
    try:
        reshard.check_rank_list_for_transform(1, [0, 8], s, d)
    except reshard.Error as e:
        assert "rank 8 is not a rank of the source strategy" in str(e)
    else:
        raise AssertionError("accepted rank 8 of 8")


DCP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "dcp")


def test_dcp_read_items_from_torch_pass_as_a_file_and_as_a_dict():
    import json
    path = os.path.join(DCP, "rows.read_items.json")
    r = reshard.check_dcp_read_items(path)
    assert r["ok"] and r["problem_count"] == 0
    w = next(t for t in r["tensors"] if t["fqn"] == "w")
    assert (w["items"], w["read_bytes"], w["target_bytes"], w["other_rank_bytes"]) == (6, 60, 60, 40)
    with open(path) as f:
        items = json.load(f)
    assert reshard.check_dcp_read_items(items) == r


def test_dcp_read_items_mutated_are_wrong_and_malformed_ones_errors():
    import json
    with open(os.path.join(DCP, "grid.read_items.json")) as f:
        items = json.load(f)
    items["ranks"][1]["read_items"][0]["lengths"][0] += 1
    r = reshard.check_dcp_read_items(items)
    assert not r["ok"]
    g = next(t for t in r["tensors"] if t["fqn"] == "g")
    assert not g["ok"] and g["problem_count"] >= 1 and "tensor 'g'" in g["problems"][0]
    del items["ranks"][1]["read_items"][0]["lengths"]
    try:
        reshard.check_dcp_read_items(items)
        assert False, "no error"
    except reshard.Error as e:
        assert "ranks[1].read_items[0]: no key 'lengths'" in str(e)
