"""Tests of hf_reference.py, the independent Hugging Face sharded-safetensors writer and reader that
verify/cli/hf.sh checks reshard against: the shard rule on hand-computed cases, the index and
header bytes written out literally, the data order, the BFloat16 rounding on hand-picked bit
patterns, write -> read round trips of random models, and the reader's refusals. Needs numpy and
hypothesis only (not the reshard module)."""

import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest

import cast_reference
import hf_reference as hf

HF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_reference.py")


def tensor(name, dtype, shape, values=None):
    a = np.arange(int(np.prod(shape)), dtype=hf.NUMPY[dtype]) if values is None else np.asarray(values, hf.NUMPY[dtype])
    return (name, dtype, list(shape), a.reshape(shape).tobytes())


def f32(n, name):  # a Float32 vector of n elements: 4n bytes
    return tensor(name, "F32", [n])


def listing(d):
    return sorted(os.listdir(d))


def layout(d):
    files, index = hf.read_layout(d)
    return {f: [t[0] for t in ts] for f, (_, ts) in files.items()}, index


def cli(*args):
    return subprocess.run([sys.executable, HF] + [str(a) for a in args], capture_output=True, text=True)


# ------------------------------------------------------------------------------------------------
# the shard rule

@pytest.mark.parametrize("sizes,max_size,want", [
    ([("a", 4), ("b", 4), ("c", 4)], 8, [["a", "b"], ["c"]]),
    ([("a", 4), ("b", 4), ("c", 4)], 12, [["a", "b", "c"]]),
    ([("a", 8), ("b", 1)], 8, [["a"], ["b"]]),                 # exactly full, then closed
    ([("a", 4), ("B", 20), ("c", 4)], 8, [["B"], ["a", "c"]]),  # the big one alone, a's shard goes on
    ([("B", 20), ("a", 4)], 8, [["B"], ["a"]]),
    ([("A", 9), ("B", 9)], 8, [["A"], ["B"]]),
    ([("a", 6), ("c", 5), ("B", 20), ("d", 1)], 10, [["a"], ["B"], ["c", "d"]]),
    ([("a", 0), ("b", 8), ("c", 0)], 8, [["a", "b", "c"]]),
    ([], 8, []),
])
def test_plan_shards(sizes, max_size, want):
    assert hf.plan_shards(sizes, max_size) == want


def test_shard_names():
    assert hf.shard_names(1) == ["model.safetensors"]
    assert hf.shard_names(3) == ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                 "model-00003-of-00003.safetensors"]
    assert hf.shard_names(12)[10] == "model-00011-of-00012.safetensors"


def test_one_shard_writes_model_safetensors_and_no_index(tmp_path):
    d = tmp_path / "m"
    files = hf.write_model(d, [f32(2, "b"), f32(3, "a")], 20)
    assert files == ["model.safetensors"] == listing(d)
    assert layout(d) == ({"model.safetensors": ["a", "b"]}, None)


def test_big_tensor_alone(tmp_path):
    d = tmp_path / "m"
    hf.write_model(d, [f32(1, "a"), f32(10, "big"), f32(1, "c"), f32(2, "d"), f32(1, "e")], 12)
    # a (4) -> current; big (40 > 12) alone; c (4): 8; d (8): 16 > 12, close [a, c]; e: 12
    assert layout(d)[0] == {"model-00001-of-00003.safetensors": ["big"],
                            "model-00002-of-00003.safetensors": ["a", "c"],
                            "model-00003-of-00003.safetensors": ["d", "e"]}


def test_index_bytes(tmp_path):
    d = tmp_path / "m"
    files = hf.write_model(d, [tensor("a", "F32", [2]), tensor("b", "F32", [3])], 10)
    assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                     "model.safetensors.index.json"]
    assert (d / "model.safetensors.index.json").read_bytes() == b"""{
  "metadata": {
    "total_size": 20
  },
  "weight_map": {
    "a": "model-00002-of-00002.safetensors",
    "b": "model-00001-of-00002.safetensors"
  }
}
"""


def test_sizes():
    assert hf.parse_size("5GB") == 5 * 10**9
    assert hf.parse_size("100KB") == 100000
    assert hf.parse_size("64KiB") == 65536
    assert hf.parse_size("3MiB") == 3 << 20
    assert hf.parse_size("123") == 123
    for bad in ("", "1.5GB", "5gb", "GB", "-1"):
        with pytest.raises(ValueError):
            hf.parse_size(bad)


# ------------------------------------------------------------------------------------------------
# one file

def test_header_bytes_and_padding():
    raw = hf.encode_file([tensor("x", "F32", [1], [1.0])])
    text = b'{"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    assert len(text) == 85
    assert raw == struct.pack("<Q", 88) + text + b"   " + b"\x00\x00\x80\x3f"
    raw = hf.encode_file([tensor("w", "F32", [2], [1, 2]), tensor("ab", "I8", [3], [1, 2, 3])])
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0 and raw[8 + n - 5:8 + n] == b"     " and raw[8 + n - 6:8 + n - 5] == b"}"
    assert raw[8 + n:] == np.array([1, 2], "<f4").tobytes() + b"\x01\x02\x03"


def test_data_order_by_dtype_then_name():
    tensors = [tensor(n, d, [2]) for n, d in [("a", "U8"), ("b", "F64"), ("c", "F32"), ("d", "BF16"), ("e", "I64"),
                                              ("f", "F16"), ("g", "BOOL"), ("h", "I32"), ("i", "U16"), ("j", "I8"),
                                              ("A", "U64"), ("k", "U32"), ("l", "I16")]]
    _, got = hf.decode_file(hf.encode_file(tensors), "t")
    assert [t[0] for t in got] == ["A", "b", "e", "c", "h", "k", "d", "f", "i", "l", "a", "g", "j"]
    # the header lists them in that order too, after the metadata
    raw = hf.encode_file(tensors)
    (n,) = struct.unpack("<Q", raw[:8])
    assert list(json.loads(raw[8:8 + n])) == ["__metadata__", "A", "b", "e", "c", "h", "k", "d", "f", "i", "l", "a", "g", "j"]


# ------------------------------------------------------------------------------------------------
# BFloat16

@pytest.mark.parametrize("f32_bits,bf16_bits", [
    (0x3F800000, 0x3F80),  # 1.0
    (0xBF800000, 0xBF80),  # -1.0
    (0x3F808000, 0x3F80),  # tie, the lower neighbour even: down
    (0x3F818000, 0x3F82),  # tie, the lower neighbour odd: up
    (0xBF818000, 0xBF82),
    (0x3F808001, 0x3F81),  # just above the tie
    (0x3F807FFF, 0x3F80),  # just below
    (0x3F80FFFF, 0x3F81),
    (0x00000000, 0x0000),
    (0x80000000, 0x8000),  # -0.0
    (0x7F800000, 0x7F80),  # inf
    (0xFF800000, 0xFF80),  # -inf
    (0x7F7FFFFF, 0x7F80),  # the largest Float32 rounds to inf
    (0x7F7F7FFF, 0x7F7F),
    (0x7FC00000, 0x7FC0),  # quiet NaN
    (0x7F800001, 0x7FC0),  # signalling NaN: quieted
    (0xFF800001, 0xFFC0),  # negative NaN keeps its sign
    (0x7F810000, 0x7FC1),  # NaN payload in the top bits kept
    (0x7FFFFFFF, 0x7FFF),
    (0x00008000, 0x0000),  # subnormal tie to even (0)
    (0x00018000, 0x0002),
    (0x00000001, 0x0000),
])
def test_bf16_from_f32(f32_bits, bf16_bits):
    x = np.array([f32_bits], np.uint32).view(np.float32)
    got = hf.bf16_from_f32(x)
    assert got.dtype == np.uint16 and int(got[0]) == bf16_bits


def test_f32_from_bf16():
    got = hf.f32_from_bf16(np.array([0x3F80, 0xC000, 0x8000, 0x7F80, 0x0001], np.uint16))
    assert got.dtype == np.float32
    assert list(got.view(np.uint32)) == [0x3F800000, 0xC0000000, 0x80000000, 0x7F800000, 0x00010000]
    assert list(got[:2]) == [1.0, -2.0]
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    back = hf.bf16_from_f32(hf.f32_from_bf16(every))
    nan = (every & 0x7FFF) > 0x7F80
    assert np.array_equal(back[~nan], every[~nan]) and np.array_equal(back[nan], every[nan] | 0x40)


def test_bf16_from_f64_rounds_once():
    rng = np.random.default_rng(5)
    b = rng.integers(0, 0x7F80, size=3000, dtype=np.uint32)
    lo = (b << 16).view(np.float32).astype(np.float64)
    hi = ((b + 1) << 16).view(np.float32).astype(np.float64)
    mid = (lo + hi) / 2  # exact in float64; a double rounding through Float32 errs next to these
    xs = np.concatenate([mid, mid * (1 + 2.0**-40), mid * (1 - 2.0**-40), lo, rng.standard_normal(2000) * 1e3,
                         [3.4e38, 3.3961e38, 3.3960e38, 1e300, 1e-300, 2.0**-133, 0.0, -0.0, np.inf, -np.inf]])
    xs = np.concatenate([xs, -xs])
    want = np.array([cast_reference.round_fraction(float(x), 7, 127) for x in xs], np.uint16)
    assert np.array_equal(hf.bf16_from_f64(xs), want)
    assert int(hf.bf16_from_f64(np.array([-np.nan]))[0]) == 0xFFC0


def test_cast_bytes():
    x = np.array([1.0, 1.00390625, -0.5], np.float32)  # 1 + 2^-8: a BFloat16 tie, to even 1.0
    assert hf.cast_bytes("F32", x.tobytes(), "BF16") == np.array([0x3F80, 0x3F80, 0xBF00], np.uint16).tobytes()
    assert hf.cast_bytes("F32", x.tobytes(), "F16") == x.astype(np.float16).tobytes()
    assert hf.cast_bytes("BF16", np.array([0x3F80], np.uint16).tobytes(), "F64") == np.float64(1).tobytes()
    assert hf.cast_bytes("F16", np.float16(2049).tobytes(), "BF16") == np.uint16(0x4500).tobytes()  # 2048
    with pytest.raises(ValueError):
        hf.cast_bytes("I64", b"\0" * 8, "F32")


# ------------------------------------------------------------------------------------------------
# round trips

DTYPES = sorted(hf.NUMPY)


@st.composite
def models(draw):
    # (not st.text: it caches Unicode tables in ./.hypothesis)
    name = st.lists(st.sampled_from("ab.0_1"), min_size=1, max_size=6).map("".join)
    names = draw(st.lists(name, min_size=0, max_size=12, unique=True))
    out = []
    for n in names:
        dtype = draw(st.sampled_from(DTYPES))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        out.append((n, dtype, shape, draw(st.binary(min_size=hf.nbytes(dtype, shape), max_size=hf.nbytes(dtype, shape)))))
    return out, draw(st.integers(1, 120))


@hypothesis.given(models())
def test_round_trip(case):
    tensors, max_size = case
    with tempfile.TemporaryDirectory() as d:
        files = hf.write_model(d, tensors, max_size)
        shards = hf.plan_shards([(t[0], len(t[3])) for t in tensors], max_size)
        assert listing(d) == sorted(files)
        if len(shards) <= 1:
            assert files == ["model.safetensors"]
        else:
            assert files == hf.shard_names(len(shards)) + ["model.safetensors.index.json"]
        got = hf.read_model(d)
        assert {n: (dt, s, c) for n, dt, s, c in tensors} == got
        by_name = {t[0]: t for t in tensors}
        files_got, index = hf.read_layout(d)
        for f, shard in zip(hf.shard_names(len(shards)), shards):
            md, ts = files_got[f]
            assert md == {"format": "pt"}
            assert [t[0] for t in ts] == [t[0] for t in hf.data_order([by_name[n] for n in shard])]
            with open(os.path.join(d, f), "rb") as fh:
                assert struct.unpack("<Q", fh.read(8))[0] % 8 == 0
        if index is not None:
            assert index["metadata"]["total_size"] == sum(len(t[3]) for t in tensors)
            with open(os.path.join(d, hf.INDEX), "rb") as fh:
                assert fh.read() == (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()
        sizes = {t[0]: len(t[3]) for t in tensors}
        assert hf.layout_problems([(f, [t[0] for t in files_got[f][1]]) for f in sorted(files_got)], sizes,
                                  max_size) == ([] if tensors else ["model.safetensors holds no tensor"])


@hypothesis.given(st.lists(st.integers(0, 30), max_size=12), st.integers(1, 25), st.randoms())
def test_layout_problems_accepts_the_rule_in_any_file_order(sizes, max_size, rnd):
    names = ["t%d" % i for i in range(len(sizes))]
    shards = hf.plan_shards(list(zip(names, sizes)), max_size)
    for s in shards:
        rnd.shuffle(s)  # a writer may order a shard's data its own way
    files = list(zip(hf.shard_names(len(shards)), shards))
    assert hf.layout_problems(files, dict(zip(names, sizes)), max_size) == []


def test_layout_problems_finds():
    sizes = {"a": 4, "b": 4, "c": 4, "B": 20}
    names = hf.shard_names
    assert hf.layout_problems(list(zip(names(2), [["a"], ["b", "c"]])), sizes, 8)  # a's shard closed too early
    assert hf.layout_problems(list(zip(names(2), [["a", "b", "c"], ["B"]])), sizes, 12)  # big one after the last
    assert hf.layout_problems(list(zip(names(1), [["a", "B"]])), sizes, 8)  # big one not alone
    assert hf.layout_problems(list(zip(names(1), [["a", "b", "c"]])), sizes, 8)  # above the maximum
    assert hf.layout_problems([("model-1.safetensors", ["a"])], sizes, 8)  # file names
    assert not hf.layout_problems(list(zip(names(3), [["B"], ["a", "b"], ["c"]])), sizes, 8)


# ------------------------------------------------------------------------------------------------
# the reader's refusals

def model_dir(tmp_path):
    d = tmp_path / "m"
    hf.write_model(d, [f32(2, "a"), f32(2, "b"), f32(2, "c")], 8)  # [a] [b] [c]
    return d


def write_index(d, weight_map, total):
    (d / hf.INDEX).write_bytes(hf.index_bytes(weight_map, total))


def refused(d, *texts):
    with pytest.raises(hf.HFError) as e:
        hf.read_model(str(d))
    for t in texts:
        assert t in str(e.value)
    return str(e.value)


def test_reader_accepts_the_valid_directory(tmp_path):
    d = model_dir(tmp_path)
    assert sorted(hf.read_model(str(d))) == ["a", "b", "c"]


def test_reader_refuses_a_missing_file(tmp_path):
    d = model_dir(tmp_path)
    os.remove(d / "model-00002-of-00003.safetensors")
    refused(d, "model-00002-of-00003.safetensors", "does not exist", "'b'")


def test_reader_refuses_a_tensor_in_two_files(tmp_path):
    d = model_dir(tmp_path)
    (d / "model-00001-of-00003.safetensors").write_bytes(hf.encode_file([f32(2, "a"), f32(2, "b")]))
    refused(d, "'b'", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors")


def test_reader_refuses_a_tensor_the_index_misplaces_or_lacks(tmp_path):
    d = model_dir(tmp_path)
    f1, f2, f3 = hf.shard_names(3)
    write_index(d, {"a": f1, "b": f3, "c": f2}, 24)
    refused(d, "tensor 'b' is in %s, the index maps it to %s" % (f2, f3))
    write_index(d, {"a": f1, "b": f1, "c": f3}, 24)  # f2 not read
    refused(d, "the index maps tensor 'b' to %s, which does not hold it" % f1)
    (d / f1).write_bytes(hf.encode_file([f32(2, "a"), f32(2, "b")]))
    write_index(d, {"a": f1, "c": f3}, 16)
    refused(d, "%s holds tensor 'b', which the index does not list" % f1)


def test_reader_refuses_a_wrong_total_size(tmp_path):
    d = model_dir(tmp_path)
    wm = json.loads((d / hf.INDEX).read_bytes())["weight_map"]
    write_index(d, wm, 25)
    refused(d, "total_size 25", "24")


@pytest.mark.parametrize("what", ["no weight_map", "no total_size", "not a file name", "not json", "duplicate key"])
def test_reader_refuses_a_bad_index(tmp_path, what):
    d = model_dir(tmp_path)
    wm = json.loads((d / hf.INDEX).read_bytes())["weight_map"]
    text = {"no weight_map": json.dumps({"metadata": {"total_size": 24}}),
            "no total_size": json.dumps({"metadata": {}, "weight_map": wm}),
            "not a file name": json.dumps({"metadata": {"total_size": 24}, "weight_map": dict(wm, a="../x.safetensors")}),
            "not json": '{"metadata": ',
            "duplicate key": '{"metadata": {"total_size": 24}, "weight_map": {"a": "x", "a": "y"}}'}[what]
    (d / hf.INDEX).write_text(text)
    refused(d, hf.INDEX)


def raw_file(header, data, pad=True):
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("header,data,text", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}}, b"\0" * 16, "starts at data offset 12, expected 8"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, "starts at data offset 4, expected 8"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, "starts at data offset 4, expected 0"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 12, "cover 8 bytes of data, the file holds 12"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "cover 8 bytes of data, the file holds 4"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, "F32 [3] needs 12"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8, "bad data_offsets"),
    ({"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "unknown dtype 'F33'"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8, "bad shape"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}}, b"\0" * 8, "not an object of dtype"),
    ({"__metadata__": {"format": 1}}, b"", "__metadata__ is not an object of strings"),
])
def test_reader_refuses_a_bad_file(tmp_path, header, data, text):
    p = tmp_path / "model.safetensors"
    p.write_bytes(raw_file(header, data))
    refused(tmp_path, text, str(p))


def test_reader_refuses_bad_header_bytes(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(struct.pack("<Q", 100) + b"{}")
    refused(tmp_path, "header length 100 exceeds the file")
    p.write_bytes(struct.pack("<Q", 8) + b'{"a": 1 ')
    refused(tmp_path, "not valid JSON")
    p.write_bytes(struct.pack("<Q", 8) + b'[1, 2]  ')
    refused(tmp_path, "not a JSON object")
    p.write_bytes(b"\x01\x02")
    refused(tmp_path, "shorter than the 8-byte header length")
    text = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    p.write_bytes(struct.pack("<Q", len(text)) + text + b"\x01")
    refused(tmp_path, "the key 'a' appears twice")
    os.remove(p)
    refused(tmp_path, "holds neither")


def test_reader_takes_an_unpadded_file_in_any_data_order(tmp_path):
    header = {"b": {"dtype": "I8", "shape": [1], "data_offsets": [2, 3]},
              "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}
    (tmp_path / "model.safetensors").write_bytes(raw_file(header, b"\x05\x06\x07", pad=False))
    assert hf.read_model(str(tmp_path)) == {"a": ("U8", [2], b"\x05\x06"), "b": ("I8", [1], b"\x07")}


# ------------------------------------------------------------------------------------------------
# the command line

def test_cli_make_check_shards(tmp_path):
    r = cli("make", tmp_path / "a", "--seed", 3, "--max-shard-size", 20000)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["files"] == listing(tmp_path / "a")
    assert len(summary["files"]) > 3 and summary["files"][-1] == "model.safetensors.index.json"
    t = summary["tensors"]
    assert t["model.scale"] == ["F32", []] and t["model.step"][0] == "I64"
    assert {d for d, _ in t.values()} == {"F32", "F16", "BF16", "F64", "I64"}
    assert any(hf.nbytes(d, s) > 20000 for d, s in t.values())
    # deterministic: the same bytes again
    assert cli("make", tmp_path / "b", "--seed", 3, "--max-shard-size", 20000).returncode == 0
    for f in summary["files"]:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    r = cli("check", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    check = json.loads(r.stdout)
    model = hf.read_model(str(tmp_path / "a"))
    assert list(check) == sorted(model)
    assert check["model.step"] == ["I64", [4], hashlib.sha256(model["model.step"][2]).hexdigest()]
    r = cli("shards", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    files = [f for f in summary["files"] if f != hf.INDEX]
    assert list(s["files"]) == files and s["index"]["metadata"]["total_size"] == sum(len(c) for _, _, c in model.values())
    assert s["files"][files[0]] == ["model.embed_tokens.weight"]  # the big one, first, alone
    assert s["index_canonical"] is True and s["extra_files"] == []
    assert all(v == {"format": "pt"} for v in s["metadata"].values())
    assert all(n % 8 == 0 for n in s["header_lengths"].values())
    # the whole model in one file
    r = cli("make", tmp_path / "one", "--seed", 3, "--max-shard-size", "5GB", "--names", 1)
    assert json.loads(r.stdout)["files"] == ["model.safetensors"] == listing(tmp_path / "one")
    assert cli("make", tmp_path / "one", "--seed", 3, "--max-shard-size", "5GB").returncode == 1  # not over old files


def test_cli_expect_shards(tmp_path):
    tensors = [f32(1, "c"), f32(10, "a"), f32(2, "b"), f32(1, "d")]
    hf.write_model(tmp_path / "by_name", sorted(tensors), 12)
    assert cli("expect-shards", tmp_path / "by_name", "--max-shard-size", 12, "--order", "name").returncode == 0
    assert cli("expect-shards", tmp_path / "by_name", "--max-shard-size", 12).returncode == 0
    r = cli("expect-shards", tmp_path / "by_name", "--max-shard-size", 16, "--order", "name")
    assert r.returncode == 1 and "expected" in r.stderr
    tensors = [f32(1, "d"), f32(2, "c"), f32(2, "b"), f32(10, "a")]
    hf.write_model(tmp_path / "given", tensors, 12)  # d c b a: [d c] [a] [b]; by name: [a] [b] [c d]
    assert layout(tmp_path / "given")[0] == dict(zip(hf.shard_names(3), [["c", "d"], ["a"], ["b"]]))
    (tmp_path / "order.json").write_text(json.dumps(["d", "c", "b", "a"]))
    assert cli("expect-shards", tmp_path / "given", "--max-shard-size", 12, "--order-file", tmp_path / "order.json").returncode == 0
    assert cli("expect-shards", tmp_path / "given", "--max-shard-size", 12, "--order", "file").returncode == 0
    r = cli("expect-shards", tmp_path / "given", "--max-shard-size", 12, "--order", "name")
    assert r.returncode == 1 and "tensor 'a' (40 bytes) is in model-00002-of-00003.safetensors, expected in " \
        "model-00001-of-00003.safetensors" in r.stderr
    r = cli("expect-shards", tmp_path / "given", "--max-shard-size", "5GB")
    assert r.returncode == 1 and "model-00001-of-00003.safetensors (12 bytes) would have taken the first tensor of " \
        "model-00002-of-00003.safetensors" in r.stderr
    r = cli("expect-shards", tmp_path / "given", "--max-shard-size", "5GB", "--order", "name")
    assert r.returncode == 1 and "expected ['model.safetensors']" in r.stderr


def test_cli_equal(tmp_path):
    tensors = hf.random_model(9, 1)
    hf.write_model(tmp_path / "a", tensors, 20000)
    hf.write_model(tmp_path / "same", list(reversed(tensors)), 10**9)
    assert cli("equal", tmp_path / "a", tmp_path / "same").returncode == 0
    assert cli("equal", tmp_path / "a", tmp_path / "same" / "model.safetensors").returncode == 0
    cast = [(n, "BF16" if d in hf.FLOATS else d, s, hf.cast_bytes(d, c, "BF16") if d in hf.FLOATS else c)
            for n, d, s, c in tensors]
    hf.write_model(tmp_path / "bf", cast, 20000)
    assert cli("equal", tmp_path / "a", tmp_path / "bf", "--cast", "*=bfloat16").returncode == 0
    r = cli("equal", tmp_path / "a", tmp_path / "bf")
    assert r.returncode == 1 and "dtype BF16, expected F32" in r.stderr and "model.step" not in r.stderr
    r = cli("equal", tmp_path / "a", tmp_path / "bf", "--cast", "model.layers.*=BF16")
    assert r.returncode == 1 and "model.embed_tokens.weight" in r.stderr and "model.layers" not in r.stderr
    # one bit off in the cast
    bad = [(n, d, s, (bytes([c[0] ^ 1]) + c[1:]) if n == "model.layers.0.attn.q_proj.bias" else c) for n, d, s, c in cast]
    hf.write_model(tmp_path / "bad", bad, 20000)
    r = cli("equal", tmp_path / "a", tmp_path / "bad", "--cast", "*=BF16")
    assert r.returncode == 1 and "'model.layers.0.attn.q_proj.bias': 1 of 64 elements differ, the first at 0" in r.stderr
    # a missing tensor, a different shape
    hf.write_model(tmp_path / "fewer", [t for t in tensors if t[0] != "model.step"], 20000)
    r = cli("equal", tmp_path / "a", tmp_path / "fewer")
    assert r.returncode == 1 and "'model.step' is in %s only" % (tmp_path / "a") in r.stderr
    hf.write_model(tmp_path / "shape", [(n, d, [4, 1] if n == "model.step" else s, c) for n, d, s, c in tensors], 20000)
    r = cli("equal", tmp_path / "a", tmp_path / "shape")
    assert r.returncode == 1 and "shape [4, 1], expected [4]" in r.stderr
    assert cli("equal", tmp_path / "a", tmp_path / "bf", "--cast", "*=I64").returncode == 2


def test_cli_check_refuses(tmp_path):
    d = model_dir(tmp_path)
    os.remove(d / "model-00003-of-00003.safetensors")
    r = cli("check", d)
    assert r.returncode == 1 and r.stdout == "" and "model-00003-of-00003.safetensors" in r.stderr
    assert cli("check", tmp_path / "nowhere").returncode == 1
