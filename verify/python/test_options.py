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
    with pytest.warns(UserWarning, match=r"load_checkpoint_by_rank: 5 parameters that are not floating point"):
        got = load(m, 2, dtype="bfloat16")  # the summary's warnings, which load does not return
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
    # force onto it, in other shards: the new checkpoint is swapped in whole; the user's files are
    # the same files (inodes) and nothing is left beside the directory (issue 20, row 7)
    with open(os.path.join(hf2, "config.json"), "w") as f:
        f.write("{}")
    os.mkdir(os.path.join(hf2, "tokenizer"))
    with open(os.path.join(hf2, "tokenizer", "vocab.txt"), "w") as f:
        f.write("a b")
    inodes = {p: os.stat(os.path.join(hf2, p)).st_ino for p in ("config.json", "tokenizer/vocab.txt")}
    s = reshard.convert_checkpoint(merged, hf2, output_format="hf", max_shard_size=1 << 10, force=True,
                                   exclude=sorted(set(full) - set(numeric)), progress=False)
    assert s["warnings"] == []
    assert set(hf_reference.read_model(hf2)) == set(numeric)
    assert inodes == {p: os.stat(os.path.join(hf2, p)).st_ino for p in inodes}
    assert not [f for f in os.listdir(m["dir"]) if ".reshard-" in f]


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


# ------------------------------------------------------------------------------------------------
# output_format="hf" per target rank, and the verify functions given the run's arguments (issue 20)

NOT_IN_SAFETENSORS = ["optimizer_name", "emb_table"]  # a str and a map tensor


def test_transform_and_split_write_one_hugging_face_checkpoint_per_rank(retrain):
    m = retrain
    out = os.path.join(m["dir"], "hf")
    s = reshard.transform_checkpoints(m["src_dir"], out, "checkpoint_", m["src_strategy"], m["dst_strategy"],
                                      output_format="hf", max_shard_size=256, exclude=NOT_IN_SAFETENSORS,
                                      progress=False)
    assert len({os.path.dirname(p) for p in s["outputs"]}) == m["N"]
    for t in range(m["N"]):
        d = os.path.join(out, "rank_%d" % t, "checkpoint_%d" % t)
        assert os.path.isfile(os.path.join(d, "model.safetensors.index.json")), d  # 256-byte shards: several
        model = hf_reference.read_model(d)  # the independent reader
        want = {n: a for n, a in m["plain"][t].items() if n not in NOT_IN_SAFETENSORS}
        assert set(model) == set(want)
        for name, a in want.items():
            assert model[name][2] == bits(a).tobytes(), (t, name)  # the values of the ckpt run (load)
    # split: the merged checkpoint to HF ranks, the same tensors as the ckpt split
    merged = os.path.join(m["dir"], "merged.ckpt")
    reshard.merge_checkpoints(m["src_dir"], merged, m["src_strategy"], exclude=NOT_IN_SAFETENSORS, progress=False)
    reshard.split_checkpoint(merged, os.path.join(m["dir"], "split_ckpt"), m["dst_strategy"], progress=False)
    reshard.split_checkpoint(merged, os.path.join(m["dir"], "split_hf"), m["dst_strategy"], "part_",
                             output_format="hf", progress=False)
    for t in range(m["N"]):
        d = os.path.join(m["dir"], "split_hf", "rank_%d" % t, "part_%d" % t)
        assert sorted(os.listdir(d)) == ["model.safetensors"]  # the default 5GB: one file
        got = reshard.load_checkpoint_by_rank(0, {0: d})
        want = reshard.load_checkpoint_by_rank(
            0, {0: os.path.join(m["dir"], "split_ckpt", "rank_%d" % t, "checkpoint_%d.ckpt" % t)})
        assert sorted(got) == sorted(want)
        assert all(np.array_equal(bits(got[n]), bits(want[n])) for n in want), t
    # transform_checkpoint_by_rank too
    one = os.path.join(m["dir"], "by_rank_hf")
    reshard.transform_checkpoint_by_rank(1, m["files"], one, m["src_strategy"], m["dst_strategy"],
                                         output_format="hf", exclude=NOT_IN_SAFETENSORS, progress=False)
    assert set(hf_reference.read_model(one)) == set(m["plain"][1]) - set(NOT_IN_SAFETENSORS)
    with pytest.raises(ValueError, match="output_format must be 'ckpt', 'safetensors', 'hf' or 'dcp', not 'zip'"):
        reshard.transform_checkpoints(m["src_dir"], out, "checkpoint_", m["src_strategy"], m["dst_strategy"],
                                      output_format="zip", progress=False)
    with pytest.raises(ValueError, match="max_shard_size applies to output_format='hf' only"):
        reshard.split_checkpoint(merged, os.path.join(m["dir"], "never"), m["dst_strategy"], max_shard_size=10)
    assert not os.path.exists(os.path.join(m["dir"], "never"))


def mismatches(report):
    return sorted((os.path.basename(x["file"]), x["parameter"], x["what"]) for x in report["mismatches"])


def test_verify_checkpoints_takes_the_runs_arguments(retrain):
    m = retrain
    out = os.path.join(m["dir"], "sel")
    run = dict(include=["layer1.*", "embedding"], exclude="*.bias", dtype="bfloat16")
    args = (m["src_dir"], out, "checkpoint_", m["src_strategy"], m["dst_strategy"])
    reshard.transform_checkpoints(*args, progress=False, **run)
    r = reshard.verify_checkpoints(*args, progress=False, **run)
    assert r["ok"] and r["mismatches"] == [] and r["files"] == m["N"] and r["tensors"] == 2 * m["N"]
    # without them: the false "missing" of before, and the cast parameters of another dtype
    plain = mismatches(reshard.verify_checkpoints(*args, progress=False))
    assert ("checkpoint_0.ckpt", "layer1.bias", "missing") in plain
    assert ("checkpoint_0.ckpt", "layer1.weight", "dtype BFloat16, expected Float32") in plain
    # a real difference is still found: a flipped byte of rank 3's embedding
    path = os.path.join(out, "rank_3", "checkpoint_3.ckpt")
    cp = ms_files.parse_ckpt(path)
    v = next(v for v in cp.value if v.tag == "embedding")
    c = bytearray(v.tensor.tensor_content)
    c[1] ^= 0x01
    v.tensor.tensor_content = bytes(c)
    with open(path, "wb") as f:
        f.write(cp.SerializeToString())
    r = reshard.verify_checkpoints(*args, progress=False, **run)
    assert not r["ok"] and mismatches(r) == [("checkpoint_3.ckpt", "embedding", "differs from element 0 (byte 1)")]


def test_verify_merged_split_and_converted(retrain):
    m = retrain
    hf = os.path.join(m["dir"], "merged_hf")
    run = dict(rename={"^layer1\\.": "L1."}, rename_map={"embedding": "tok_embeddings"}, exclude=NOT_IN_SAFETENSORS)
    reshard.merge_checkpoints(m["src_dir"], hf, m["src_strategy"], output_format="hf", max_shard_size=300,
                              progress=False, **run)
    r = reshard.verify_merged_checkpoint(m["src_dir"], hf, m["src_strategy"], output_format="hf", progress=False, **run)
    assert r["ok"] and r["files"] == 1, r
    r = reshard.verify_merged_checkpoint(m["src_dir"], hf, m["src_strategy"], output_format="hf", progress=False,
                                         exclude=NOT_IN_SAFETENSORS)
    assert ("merged_hf", "tok_embeddings", "not expected (no source makes it)") in mismatches(r)
    assert ("merged_hf", "embedding", "missing") in mismatches(r)
    # convert the HF directory to one .safetensors, cast by glob
    st = os.path.join(m["dir"], "conv.safetensors")
    reshard.convert_checkpoint(hf, st, dtype={"L1.*": "float64"}, progress=False)
    assert reshard.verify_converted_checkpoint(hf, st, dtype={"L1.*": "float64"}, progress=False)["ok"]
    assert len(reshard.verify_converted_checkpoint(hf, st, progress=False)["mismatches"]) == 2  # L1.weight, L1.bias
    # split the merged checkpoint to HF ranks, selected
    full = os.path.join(m["dir"], "full.ckpt")
    reshard.merge_checkpoints(m["src_dir"], full, m["src_strategy"], exclude=NOT_IN_SAFETENSORS, progress=False)
    split = os.path.join(m["dir"], "split")
    args = (full, split, m["dst_strategy"], "x_")
    reshard.split_checkpoint(*args, output_format="hf", include="layer1.*", progress=False)
    r = reshard.verify_split_checkpoint(*args, output_format="hf", include="layer1.*", progress=False)
    assert r["ok"] and r["files"] == m["N"] and r["tensors"] == 2 * m["N"], r
    r = reshard.verify_split_checkpoint(*args, output_format="hf", progress=False)
    others = {n for n in m["plain"][0] if n not in NOT_IN_SAFETENSORS and not n.startswith("layer1.")}
    assert others and {p for _, p, w in mismatches(r) if w == "missing"} == others
    assert all(w == "missing" for _, _, w in mismatches(r))
    # bad arguments raise before anything is read
    with pytest.raises(TypeError, match="max_shard_size"):
        reshard.verify_converted_checkpoint(hf, st, max_shard_size=10)
    with pytest.raises(FileNotFoundError, match="dst_file"):
        reshard.verify_converted_checkpoint(hf, os.path.join(m["dir"], "nowhere.ckpt"))
