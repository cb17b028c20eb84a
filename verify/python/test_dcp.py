"""PyTorch DCP checkpoints as sources of the module's checkpoint functions, on the checkpoints torch
1.13 wrote (verify/data/dcp/, by make_fixtures.py) and what torch's own load_state_dict read from
them (<name>.expected.json): merge_checkpoints, convert_checkpoint, split_checkpoint,
transform_checkpoints, transform_checkpoint_by_rank and load_checkpoint_by_rank (a DCP directory
in place of the {source rank: file} map) give torch's values bit for bit, the verify functions
agree, and bad input (a source strategy given, a data file missing, a directory that is not DCP)
is a clear error with nothing written. Needs no torch (test_dcp_torch.py runs real torch)."""

import json
import os
import shutil
import warnings

import numpy as np
import pytest

import hf_reference
import reshard

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "dcp")
FIXTURES = ["minimal", "plain", "rows", "cols", "grid"]
ST = {"float32": "F32", "bfloat16": "BF16", "int64": "I64"}
NP = {"float32": np.float32, "bfloat16": np.uint16, "int64": np.int64}


def fixture(name):
    return os.path.join(DATA, name)


def expected(name):
    """{name: (safetensors dtype, shape, bytes)} torch loaded from the fixture."""
    with open(os.path.join(DATA, name + ".expected.json")) as f:
        e = json.load(f)
    return {k: (ST[v["dtype"]], v["shape"], bytes.fromhex(v["hex"])) for k, v in e["tensors"].items()}


def arrays(name):
    return {k: np.frombuffer(b, NP[{v: k for k, v in ST.items()}[dt]]).reshape(shape)
            for k, (dt, shape, b) in expected(name).items()}


def same(path, name):
    got = {k: (dt, shape, b) for k, (dt, shape, b) in hf_reference.read_model(str(path)).items()}
    assert got == expected(name)


def files_under(d):
    return sorted(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs) if os.path.exists(d) else []


@pytest.mark.parametrize("name", FIXTURES)
def test_merge_checkpoints(name, tmp_path):
    s = reshard.merge_checkpoints(fixture(name), tmp_path / "m.safetensors", progress=False)
    same(tmp_path / "m.safetensors", name)
    assert reshard.verify_merged_checkpoint(fixture(name), tmp_path / "m.safetensors", progress=False)["ok"]
    hf = tmp_path / "hf"
    reshard.merge_checkpoints(fixture(name), hf, output_format="hf", max_shard_size=100, progress=False)
    same(hf, name)
    assert reshard.verify_merged_checkpoint(fixture(name), hf, output_format="hf", progress=False)["ok"]
    if name == "plain":  # the byte items, named
        assert any("'epoch', 'tag'" in w and "left out" in w for w in s["warnings"]), s["warnings"]
    else:
        assert not s["warnings"]


def test_merge_options_apply(tmp_path):
    out = tmp_path / "m.safetensors"
    reshard.merge_checkpoints(fixture("cols"), out, include="w", rename_map={"w": "weight"}, dtype="bfloat16",
                              progress=False)
    got = hf_reference.read_model(str(out))
    assert list(got) == ["weight"] and got["weight"][:2] == ("BF16", [3, 4])
    assert got["weight"][2] == hf_reference.cast_bytes("F32", expected("cols")["w"][2], "BF16")
    assert reshard.verify_merged_checkpoint(fixture("cols"), out, include="w", rename_map={"w": "weight"},
                                            dtype="bfloat16", progress=False)["ok"]


def test_convert_checkpoint(tmp_path):
    out = tmp_path / "c.safetensors"
    reshard.convert_checkpoint(fixture("grid"), out, progress=False)
    same(out, "grid")
    assert reshard.verify_converted_checkpoint(fixture("grid"), out, progress=False)["ok"]


def strategy(path):
    """4 ranks: cols' w [3,4] by columns (MindSpore JSON); h is in no strategy (whole on every rank)."""
    with open(path, "w") as f:
        json.dump({"current_stage": 1, "parallel_layout_item": {"w": {
            "dev_matrix": [4], "tensor_map": [-1, 0], "tensor_shape": [3, 4], "field": 0,
            "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}, f)
    return str(path)


def test_transform_split_and_by_rank(tmp_path):
    s = strategy(tmp_path / "dst.json")
    w, h = arrays("cols")["w"], arrays("cols")["h"]
    out = tmp_path / "t"
    summary = reshard.transform_checkpoints(fixture("cols"), out, "checkpoint_", None, s,
                                            output_format="safetensors", progress=False)
    assert summary["files"] == 4
    assert reshard.verify_checkpoints(fixture("cols"), out, "checkpoint_", None, s, output_format="safetensors",
                                      progress=False)["ok"]
    reshard.split_checkpoint(fixture("cols"), tmp_path / "s", s, output_format="safetensors", progress=False)
    assert reshard.verify_split_checkpoint(fixture("cols"), tmp_path / "s", s, output_format="safetensors",
                                           progress=False)["ok"]
    for t in range(4):
        f = out / ("rank_%d" % t) / ("checkpoint_%d.safetensors" % t)
        got = hf_reference.read_model(str(f))
        assert got["w"] == ("F32", [3, 1], np.ascontiguousarray(w[:, t:t + 1]).tobytes())
        assert got["h"] == ("BF16", [2, 2], h.tobytes())
        with open(f, "rb") as a, open(tmp_path / "s" / ("rank_%d" % t) / ("checkpoint_%d.safetensors" % t), "rb") as b:
            assert a.read() == b.read()
        one = tmp_path / ("one_%d.safetensors" % t)
        reshard.transform_checkpoint_by_rank(t, fixture("cols"), one, dst_strategy_file=s, progress=False)
        assert hf_reference.read_model(str(one)) == got
        loaded = reshard.load_checkpoint_by_rank(t, fixture("cols"), dst_strategy_file=s, progress=False)
        assert sorted(loaded) == sorted(got)
        assert loaded["w"].dtype == np.float32 and loaded["w"].tobytes() == got["w"][2]
        assert loaded["h"].shape == (2, 2) and loaded["h"].tobytes() == h.tobytes()


def test_transform_to_a_hugging_face_checkpoint_per_rank(tmp_path):
    s = strategy(tmp_path / "dst.json")
    out = tmp_path / "hf"
    reshard.transform_checkpoints(fixture("cols"), out, "m", None, s, output_format="hf", progress=False)
    w = arrays("cols")["w"]
    for t in range(4):
        got = hf_reference.read_model(str(out / ("rank_%d" % t) / ("m%d" % t)))
        assert got["w"] == ("F32", [3, 1], np.ascontiguousarray(w[:, t:t + 1]).tobytes())
    assert reshard.verify_checkpoints(fixture("cols"), out, "m", None, s, output_format="hf", progress=False)["ok"]


def test_load_checkpoint_by_rank_whole_and_byte_items():
    with pytest.warns(UserWarning, match=r"byte items 'epoch', 'tag' .* cannot be written to tensors in memory"):
        got = reshard.load_checkpoint_by_rank(0, fixture("plain"), progress=False)
    want = arrays("plain")
    assert sorted(got) == sorted(want)
    for k, a in got.items():
        assert a.shape == want[k].shape and a.tobytes() == want[k].tobytes(), k
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no byte item: no warning
        got = reshard.load_checkpoint_by_rank(0, os.path.join(DATA, "grid"), include="g", progress=False)
    assert list(got) == ["g"] and got["g"].tobytes() == arrays("grid")["g"].tobytes()


# ---- bad input --------------------------------------------------------------------------------

def test_a_source_strategy_is_refused(tmp_path):
    s = strategy(tmp_path / "s.json")
    for call in (lambda: reshard.merge_checkpoints(fixture("rows"), tmp_path / "o.safetensors", s, progress=False),
                 lambda: reshard.transform_checkpoints(fixture("rows"), tmp_path / "o", "c_", s, s, progress=False),
                 lambda: reshard.verify_merged_checkpoint(fixture("rows"), tmp_path / "s.json", s, progress=False),
                 lambda: reshard.transform_checkpoint_by_rank(0, fixture("rows"), tmp_path / "o.ckpt", s, s,
                                                              progress=False),
                 lambda: reshard.load_checkpoint_by_rank(0, fixture("rows"), s, s, progress=False)):
        with pytest.raises(reshard.Error) as e:
            call()
        msg = str(e.value)
        assert "is a PyTorch DCP checkpoint" in msg and fixture("rows") in msg, msg
        assert "give no source strategy (%s was given)" % s in msg, msg
    assert files_under(tmp_path) == [s]


def test_a_missing_data_file_is_named(tmp_path):
    d = tmp_path / "grid"
    shutil.copytree(fixture("grid"), d)
    os.remove(d / "__2_0.distcp")
    for call in (lambda: reshard.merge_checkpoints(d, tmp_path / "o" / "m.safetensors", progress=False),
                 lambda: reshard.load_checkpoint_by_rank(0, d, progress=False)):
        with pytest.raises(OSError) as e:
            call()
        assert str(d / "__2_0.distcp") in str(e.value), str(e.value)
    assert not os.path.exists(tmp_path / "o")


def test_a_path_that_is_not_dcp(tmp_path):
    with pytest.raises(reshard.Error, match=r"load_checkpoint_by_rank: checkpoint_files_map .* is not a PyTorch DCP"):
        reshard.load_checkpoint_by_rank(0, tmp_path, progress=False)
    with pytest.raises(FileNotFoundError):
        reshard.transform_checkpoint_by_rank(0, tmp_path / "nowhere", tmp_path / "o.ckpt", progress=False)
    with pytest.raises(TypeError, match="or the path of a PyTorch DCP checkpoint directory"):
        reshard.load_checkpoint_by_rank(0, [fixture("rows")], progress=False)


def test_inputs_are_not_modified(tmp_path):
    d = tmp_path / "rows"
    shutil.copytree(fixture("rows"), d)
    before = {f: open(f, "rb").read() for f in files_under(d)}
    reshard.merge_checkpoints(d, tmp_path / "m.ckpt", progress=False)
    reshard.load_checkpoint_by_rank(0, d, progress=False)
    assert {f: open(f, "rb").read() for f in files_under(d)} == before


def test_a_metadata_naming_a_global_outside_the_allow_list_is_refused(tmp_path):
    d = tmp_path / "plain"
    shutil.copytree(fixture("plain"), d)
    raw = (d / ".metadata").read_bytes()
    assert raw.count(b"TensorStorageMetadata") >= 1
    (d / ".metadata").write_bytes(raw.replace(b"TensorStorageMetadata", b"XensorStorageMetadata", 1))
    with pytest.raises(reshard.Error, match=r"\.metadata: pickle: global torch\.distributed\._shard\.checkpoint\."
                                            r"metadata\.XensorStorageMetadata is not allowed"):
        reshard.load_checkpoint_by_rank(0, d, progress=False)
    with pytest.raises(reshard.Error, match="XensorStorageMetadata is not allowed"):
        reshard.merge_checkpoints(d, tmp_path / "o.safetensors", progress=False)
    assert not os.path.exists(tmp_path / "o.safetensors")


def test_progress_and_an_interrupting_callback(tmp_path):
    calls = []
    reshard.merge_checkpoints(fixture("grid"), tmp_path / "m.ckpt", progress=calls.append)
    assert calls and calls[-1].bytes_done == calls[-1].bytes_total == 96 + 80  # g [4,6] f32, i [5,2] i64
    assert {"g", "i"} <= {c.parameter for c in calls} <= {"", "g", "i"}  # "": a file finished

    def stop(p):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        reshard.transform_checkpoints(fixture("cols"), tmp_path / "t", "checkpoint_", None,
                                      strategy(tmp_path / "dst.json"), progress=stop)
    assert not os.path.exists(tmp_path / "t")
    with pytest.raises(KeyboardInterrupt):
        reshard.load_checkpoint_by_rank(0, fixture("cols"), progress=stop)


# ---- DCP as the output (output_format="dcp", dcp_torch=) ----------------------------------------

@pytest.mark.parametrize("torch_version", [None, "2", "1.13"])
def test_merge_and_convert_write_dcp_read_back_bit_for_bit(torch_version, tmp_path):
    for name in FIXTURES:
        out = tmp_path / ("merged_" + name)
        reshard.merge_checkpoints(fixture(name), out, output_format="dcp", dcp_torch=torch_version, progress=False)
        assert os.path.exists(out / ".metadata")
        assert reshard.verify_merged_checkpoint(fixture(name), out, output_format="dcp", dcp_torch=torch_version,
                                                progress=False)["ok"]
        back = tmp_path / ("back_%s.safetensors" % name)
        reshard.merge_checkpoints(out, back, progress=False)  # reshard reads what it wrote
        same(back, name)
    with open(tmp_path / "merged_plain" / ".metadata", "rb") as f:
        meta = f.read()
    old = b"torch.distributed._shard.checkpoint" in meta
    assert old == (torch_version == "1.13")
    conv = tmp_path / "conv"
    reshard.convert_checkpoint(fixture("grid"), conv, output_format="dcp", dcp_torch=torch_version, progress=False)
    reshard.convert_checkpoint(conv, tmp_path / "conv.safetensors", progress=False)
    same(tmp_path / "conv.safetensors", "grid")
    assert reshard.verify_converted_checkpoint(fixture("grid"), conv, output_format="dcp", dcp_torch=torch_version,
                                               progress=False)["ok"]


def test_transform_and_split_write_one_dcp_of_every_rank(tmp_path):
    s = strategy(tmp_path / "dst.json")
    out, spl = tmp_path / "t", tmp_path / "s"
    reshard.transform_checkpoints(fixture("cols"), out, "checkpoint_", None, s, output_format="dcp",
                                  dcp_torch="1.13", progress=False)
    assert sorted(os.listdir(out)) == [".metadata"] + ["__%d_0.distcp" % t for t in range(4)]
    assert reshard.verify_checkpoints(fixture("cols"), out, "checkpoint_", None, s, output_format="dcp",
                                      dcp_torch="1.13", progress=False)["ok"]
    reshard.split_checkpoint(fixture("cols"), spl, s, output_format="dcp", dcp_torch="1.13", progress=False)
    assert files_under(spl) and [os.path.relpath(f, spl) for f in files_under(spl)] == \
        [os.path.relpath(f, out) for f in files_under(out)]
    for a, b in zip(files_under(out), files_under(spl)):
        with open(a, "rb") as x, open(b, "rb") as y:
            assert x.read() == y.read(), a
    w, h = arrays("cols")["w"], arrays("cols")["h"]
    for t in range(4):  # each rank read back from the DCP written: its column of w, h whole
        got = reshard.load_checkpoint_by_rank(t, out, dst_strategy_file=s, progress=False)
        assert got["w"].tobytes() == np.ascontiguousarray(w[:, t:t + 1]).tobytes()
        assert got["h"].tobytes() == h.tobytes()
    back = tmp_path / "back.safetensors"
    reshard.merge_checkpoints(out, back, progress=False)
    same(back, "cols")


def test_dcp_output_bad_arguments_are_value_errors_and_write_nothing(tmp_path):
    out = tmp_path / "o"
    with pytest.raises(ValueError, match=r"dcp_torch applies to output_format='dcp' only"):
        reshard.merge_checkpoints(fixture("plain"), out, output_format="hf", dcp_torch="2", progress=False)
    with pytest.raises(ValueError, match=r"dcp_torch applies to output_format='dcp' only"):
        reshard.convert_checkpoint(fixture("plain"), tmp_path / "o.ckpt", dcp_torch="1.13", progress=False)
    with pytest.raises(ValueError, match=r"dcp_torch must be '1.13' or '2', not '3'"):
        reshard.merge_checkpoints(fixture("plain"), out, output_format="dcp", dcp_torch="3", progress=False)
    with pytest.raises(ValueError, match=r"dcp_torch must be '1.13' or '2', not 2"):
        reshard.split_checkpoint(fixture("plain"), out, strategy(tmp_path / "s.json"), output_format="dcp",
                                 dcp_torch=2, progress=False)
    with pytest.raises(ValueError, match=r"output_format must be .*'hf' or 'dcp', not 'DCP'"):
        reshard.transform_checkpoints(fixture("cols"), out, "c", output_format="DCP", progress=False)
    with pytest.raises(ValueError, match=r"output_format must be None .* or 'hf' .*transform_checkpoints"):
        reshard.transform_checkpoint_by_rank(0, fixture("cols"), out, output_format="dcp", progress=False)
    assert files_under(tmp_path) == [str(tmp_path / "s.json")]
