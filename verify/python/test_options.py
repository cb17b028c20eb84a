"""The checkpoint functions' selection, rename, cast and output-format keyword arguments, on
MindSpore-schema files written by ms_scenario.py: each function gives what load_checkpoint_by_rank
gives with the same arguments, values are checked against the unconverted run (and the BFloat16
rounding against cast_reference.py, numpy bit arithmetic independent of the C++), and bad
arguments raise before anything is written."""

import os

import numpy as np
import pytest

import cast_reference
import hf_reference
import ms_files
import reshard
from test_checkpoints import files_under, scenario, source_files


def bits(a):
    """The raw bits of an array as unsigned integers of its item size (BFloat16 may be uint16 or
    ml_dtypes.bfloat16)."""
    return np.ascontiguousarray(a).view({2: np.uint16, 4: np.uint32, 8: np.uint64, 1: np.uint8}[a.dtype.itemsize])


@pytest.fixture
def retrain(tmp_path):
    m = scenario("retrain_8to4", tmp_path)
    m["files"] = source_files(m)
    m["plain"] = [reshard.load_checkpoint_by_rank(t, m["files"], m["src_strategy"], m["dst_strategy"])
                  for t in range(m["N"])]
    return m


def load(m, t, **kw):
    return reshard.load_checkpoint_by_rank(t, m["files"], m["src_strategy"], m["dst_strategy"], **kw)


def test_include_and_exclude_select_by_source_name(retrain):
    m = retrain
    names = sorted(m["plain"][0])
    pick = names[0]
    got = load(m, 0, include=pick)
    assert list(got) == [pick]
    assert np.array_equal(bits(got[pick]), bits(m["plain"][0][pick]))
    got = load(m, 0, include=["*"], exclude=[pick])
    assert sorted(got) == [n for n in names if n != pick]
    # the same selection written by transform_checkpoints: each file holds what load gives
    out = os.path.join(m["dir"], "out")
    s = reshard.transform_checkpoints(m["src_dir"], out, "checkpoint_", m["src_strategy"], m["dst_strategy"],
                                      exclude=pick, progress=False)
    assert s["files"] == m["N"]
    for t in range(m["N"]):
        written = reshard.load_checkpoint_by_rank(0, {0: s["outputs"][t]})
        assert sorted(written) == sorted(n for n in m["plain"][t] if n != pick)


def test_rename_and_rename_map(retrain):
    # without a target strategy (the full tensors on one rank): a target strategy would have to list
    # the new names
    m = retrain
    full = reshard.load_checkpoint_by_rank(0, m["files"], m["src_strategy"], None)
    first = sorted(full)[0]
    got = reshard.load_checkpoint_by_rank(0, m["files"], m["src_strategy"], None,
                                          rename_map={first: "renamed." + first})
    assert "renamed." + first in got and first not in got
    assert np.array_equal(bits(got["renamed." + first]), bits(full[first]))
    # a regex with no group, found in every name: a prefix
    got = reshard.load_checkpoint_by_rank(0, m["files"], m["src_strategy"], None, rename={"^": "model."})
    assert sorted(got) == sorted("model." + n for n in full)
    # by_rank writes the same names
    out = os.path.join(m["dir"], "one.ckpt")
    reshard.transform_checkpoint_by_rank(0, m["files"], out, m["src_strategy"], None, rename={"^": "model."},
                                         progress=False)
    assert sorted(reshard.load_checkpoint_by_rank(0, {0: out})) == sorted(got)
    # a renamed map tensor keeps its MapTensorProto byte for byte, under the new tag, as protobuf's
    # own parser reads it (regression: it was written as an empty UInt8 tensor, refused on reading)
    src_values = {v.tag: v for v in ms_files.parse_ckpt(m["files"][0]).value}
    maps = {v.tag: v for v in ms_files.parse_ckpt(out).value if v.HasField("maptensor")}
    assert maps and all(t.startswith("model.") for t in maps)
    for tag, v in maps.items():
        assert v.maptensor.SerializeToString() == src_values[tag[len("model."):]].maptensor.SerializeToString()
    # with a target strategy, a new name it does not list is an error naming both
    with pytest.raises(reshard.Error, match="renamed 'renamed."):
        load(m, 0, rename_map={first: "renamed." + first})


def test_dtype_casts_every_float_parameter_to_bfloat16(retrain):
    m = retrain
    got = load(m, 2, dtype="bfloat16")
    plain = m["plain"][2]
    assert sorted(got) == sorted(plain)
    cast = 0
    for name, a in plain.items():
        if a.dtype == np.float32:
            want = cast_reference.bf16_bits_reference(bits(a).ravel())
            assert got[name].dtype.itemsize == 2, name
            assert np.array_equal(bits(got[name]).ravel(), np.asarray(want, dtype=np.uint16)), name
            cast += 1
        elif a.dtype.kind in "iub":
            assert got[name].dtype == a.dtype and np.array_equal(got[name], a), name
    assert cast > 0
    # by glob: only the first float parameter
    first = sorted(n for n, a in plain.items() if a.dtype == np.float32)[0]
    got = load(m, 2, dtype={first: "BFloat16"})
    assert got[first].dtype.itemsize == 2
    assert all(got[n].dtype == plain[n].dtype for n in plain if n != first)
    # the summary lists the casts, as the program's --json does
    s = reshard.transform_checkpoints(m["src_dir"], os.path.join(m["dir"], "bf"), "checkpoint_", m["src_strategy"],
                                      m["dst_strategy"], dtype=["bfloat16"], progress=False)
    names = {c["name"] for c in s["casts"]}
    assert {n for t in range(m["N"]) for n, a in m["plain"][t].items() if a.dtype == np.float32} <= names
    assert all(c["from"] in ("Float16", "Float32", "Float64") and c["to"] == "BFloat16" for c in s["casts"])


def test_merge_and_convert_write_hugging_face_checkpoints(tmp_path):
    m = scenario("merge_8", tmp_path)
    merged = os.path.join(m["dir"], "merged.ckpt")
    reshard.merge_checkpoints(m["src_dir"], merged, m["src_strategy"], progress=False)
    full = reshard.load_checkpoint_by_rank(0, {0: merged})
    kept_out = {v.tag for v in ms_files.parse_ckpt(merged).value
                if v.HasField("maptensor") or v.tensor.tensor_type == "str"}
    numeric = {n: a for n, a in full.items() if n not in kept_out}
    assert kept_out and numeric  # a map and a str tensor, which safetensors cannot hold: left out by include
    hf = os.path.join(m["dir"], "hf")
    s = reshard.merge_checkpoints(m["src_dir"], hf, m["src_strategy"], output_format="hf", max_shard_size=1 << 10,
                                  include=sorted(numeric), progress=False)
    assert s["files"] >= 1
    model = hf_reference.read_model(hf)  # the independent reader
    assert set(numeric) == set(model)
    for name, a in numeric.items():
        assert model[name][2] == bits(a).tobytes(), name
    # convert: the merged file to HF, under new names
    hf2 = os.path.join(m["dir"], "hf2")
    reshard.convert_checkpoint(merged, hf2, output_format="hf", rename={"^": "model."}, exclude=sorted(set(full) - set(numeric)),
                               progress=False)
    assert set(hf_reference.read_model(hf2)) == {"model." + n for n in numeric}


def test_bad_arguments_raise_before_anything_is_written(retrain, tmp_path):
    m = retrain
    out = os.path.join(m["dir"], "bad")
    args = (m["src_dir"], out, "checkpoint_", m["src_strategy"], m["dst_strategy"])
    with pytest.raises(reshard.Error, match="nothing_like_this"):
        reshard.transform_checkpoints(*args, include="nothing_like_this*", progress=False)
    with pytest.raises(ValueError, match="unknown dtype 'float7'"):
        reshard.transform_checkpoints(*args, dtype="float7", progress=False)
    with pytest.raises(ValueError, match="two dtypes"):
        reshard.transform_checkpoints(*args, dtype=["bfloat16", "float16"], progress=False)
    with pytest.raises(TypeError, match="include"):
        reshard.transform_checkpoints(*args, include=3, progress=False)
    with pytest.raises(TypeError, match="rename"):
        reshard.transform_checkpoints(*args, rename=["^"], progress=False)
    with pytest.raises(ValueError, match="max_shard_size"):
        reshard.merge_checkpoints(m["src_dir"], os.path.join(out, "m.ckpt"), m["src_strategy"], max_shard_size=10)
    with pytest.raises(ValueError, match="output_format"):
        reshard.convert_checkpoint(m["files"][0], os.path.join(out, "c.ckpt"), output_format="safetensors")
    # the prefix: a str, and the start of a file name (regression: 123 was accepted, and
    # "../../evil_" wrote outside the output directory)
    with pytest.raises(TypeError, match="ckpt_prefix must be a str"):
        reshard.transform_checkpoints(m["src_dir"], out, 123, m["src_strategy"], m["dst_strategy"], progress=False)
    with pytest.raises(reshard.Error, match="prefix '../../evil_'"):
        reshard.transform_checkpoints(m["src_dir"], out, "../../evil_", m["src_strategy"], m["dst_strategy"],
                                      progress=False)
    assert files_under(out) == [] and not os.path.exists(out)
    assert not [f for f in files_under(str(tmp_path)) if "evil_" in f]
