"""Standalone RELU / RELU6 after a conv (float TFLite input) fold into the conv's fused activation,
as TensorFlow's converter does; where folding would change the graph's meaning they stay."""

from __future__ import annotations

import numpy as np
import pytest

from edgerun.convert import convert
from edgerun.convert.tflite_frontend import tflite_to_graph
from edgerun.ir import ModelBuilder
from edgerun.schema.reader import read_model
from edgerun.testing import run_edgerun, run_litert

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))


def _model() -> bytes:
    """conv -> RELU (folds), depthwise -> RELU6 (folds), conv -> RELU with the conv output read
    twice (stays), CONCATENATION -> RELU (stays: LiteRT refuses a fused activation there)."""
    b = ModelBuilder("fold test")
    x = b.input("x", (1, 8, 8, 4), "float32")

    def w(shape):
        return b.const(f"w{RNG.integers(1 << 30)}", (RNG.standard_normal(shape) * 0.4).astype(np.float32))

    def t(name, shape=(1, 8, 8, 4)):
        return b.tensor(name, shape, "float32")

    c1, r1, d1, r2, c2, r3, s = (t(n) for n in ("c1", "r1", "d1", "r2", "c2", "r3", "s"))
    cat, y = t("cat", (1, 8, 8, 8)), t("y", (1, 8, 8, 8))
    conv = {"padding": 0, "stride_w": 1, "stride_h": 1, "fused_activation_function": 0}
    b.op("CONV_2D", [x, w((4, 3, 3, 4)), w((4,))], [c1], **conv)
    b.op("RELU", [c1], [r1])
    b.op("DEPTHWISE_CONV_2D", [r1, w((1, 3, 3, 4)), w((4,))], [d1], depth_multiplier=1, **conv)
    b.op("RELU6", [d1], [r2])
    b.op("CONV_2D", [r2, w((4, 1, 1, 4)), w((4,))], [c2], **conv)
    b.op("RELU", [c2], [r3])
    b.op("ADD", [c2, r3], [s], fused_activation_function=0)
    b.op("CONCATENATION", [s, r2], [cat], axis=3, fused_activation_function=0)
    b.op("RELU", [cat], [y])
    b.output(y)
    return b.to_bytes()


def test_relu_folds_into_single_reader_producers(tmp_path):
    data = _model()
    g = tflite_to_graph(data)
    assert [op.op for op in g.ops] == ["CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D", "RELU", "ADD",
                                       "CONCATENATION", "RELU"]
    assert [op.options.get("fused_activation_function", 0) for op in g.ops[:3]] == [1, 3, 0]
    src = tmp_path / "float.tflite"
    src.write_bytes(data)
    x = RNG.uniform(-2, 2, (32, 8, 8, 4)).astype(np.float32)
    # the float graph computes the same function
    convert(src, tmp_path / "f.tflite", float_only=True)
    want = run_litert(data, [x[:1]], reference=False)[0]
    got = run_litert((tmp_path / "f.tflite").read_bytes(), [x[:1]], reference=False)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # int8: the folded convs clamp in their requantization, bit-exact with LiteRT's reference
    convert(src, tmp_path / "q.tflite", calib=x)
    qb = (tmp_path / "q.tflite").read_bytes()
    q = read_model(qb)
    names = [q.op_name(op) for op in q.main.operators]
    assert names.count("RELU") == 2 and "RELU6" not in names
    xi = RNG.integers(-128, 128, (1, 8, 8, 4)).astype(np.int8)
    qi = q.main.tensors[q.main.inputs[0]]
    if qi.dtype == "float32":
        xi = x[:1]
    assert np.array_equal(run_edgerun(qb, [xi])[0], run_litert(qb, [xi])[0])


def test_graph_outputs_and_fused_producers_keep_their_relu():
    b = ModelBuilder("keep")
    x = b.input("x", (1, 6), "float32")
    a = b.tensor("a", (1, 6), "float32")
    r = b.tensor("r", (1, 6), "float32")
    s = b.tensor("s", (1, 6), "float32")
    r2 = b.tensor("r2", (1, 6), "float32")
    b.op("ADD", [x, x], [a], fused_activation_function=0)
    b.op("RELU", [a], [r])                                  # a is also a graph output: stays
    b.op("MUL", [r, x], [s], fused_activation_function=3)   # already fused (RELU6): its RELU stays
    b.op("RELU", [s], [r2])
    b.output(a)
    b.output(r2)
    g = tflite_to_graph(b.to_bytes())
    assert [op.op for op in g.ops] == ["ADD", "RELU", "MUL", "RELU"]
