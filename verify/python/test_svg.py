"""Pictures in Jupyter: Layout._repr_svg_() and Plan._repr_svg_() return well-formed SVG
documents (include/reshard/ext/svg.hpp) that name what they draw."""

import xml.etree.ElementTree as ET

import reshard

SVG = "{http://www.w3.org/2000/svg}"


def _parse(text):
    assert isinstance(text, str)
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == SVG + "svg"
    return root


def _texts(root):
    return [t.text for t in root.iter(SVG + "text")]


def test_layout_repr_svg():
    root = _parse(reshard.Layout([2, 4], [1, -1], [8, 4])._repr_svg_())
    texts = _texts(root)
    assert "layout dev[2,4] map[1,-1] shape[8,4]" in texts
    assert "ranks 0-3" in texts and "ranks 4-7" in texts
    assert float(root.get("width")) > 0 and float(root.get("height")) > 0


def test_layout_repr_svg_nd_and_uneven():
    _parse(reshard.Layout([2, 2, 2], [2, 1, 0], [4, 6, 10])._repr_svg_())
    _parse(reshard.Layout([4], [0], [10], split="chunk")._repr_svg_())
    _parse(reshard.Layout.full([], 3)._repr_svg_())


def test_plan_repr_svg():
    src = reshard.Layout([2, 4], [1, -1], [8, 4])
    dst = reshard.Layout([4], [0, -1], [8, 4])
    root = _parse(reshard.plan(src, dst)._repr_svg_())
    texts = _texts(root)
    assert any(t.startswith("cross-rank 16 B in 2 messages; lower bound 16 B") for t in texts)
    assert "from 4" in texts and "from 5" in texts
