"""Hybrid kernels (float32 input/output, int8 weights) against LiteRT's reference kernels, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgerun.convert.graph import Graph
from edgerun.ir import QuantParams
from edgerun.testing import run_edgerun, run_litert

RNG = np.random.default_rng(42)


def _weights(g, name, shape, axis, per_channel):
    w = RNG.integers(-127, 128, shape).astype(np.int8)
    n = shape[axis]
    scale = RNG.uniform(0.001, 0.02, n if per_channel else 1).astype(np.float32)
    q = QuantParams(scale, np.zeros(scale.size, np.int64), axis if per_channel else 0)
    return g.tensor(name, shape, "int8", w, q)


def _model(op, x_shape, w_shape, axis, out_shape, per_channel, **opts) -> bytes:
    g = Graph()
    x = g.tensor("x", x_shape)
    w = _weights(g, "w", w_shape, axis, per_channel)
    b = g.const("b", RNG.standard_normal(w_shape[axis]).astype(np.float32))
    y = g.tensor("y", out_shape)
    g.inputs.append(x)
    g.outputs.append(y)
    g.emit(op, [x, w, b], [y], **opts)
    return g.to_bytes("hybrid test")


def _inputs(shape, kind):
    x = RNG.standard_normal(shape).astype(np.float32) * 3
    if kind == "positive":
        x = np.abs(x)
    elif kind == "zeros":
        x[:] = 0
    elif kind == "ties":
        x = np.round(x * 2) / 2  # many exact .5 products
    return x


def _same(model, x):
    want = run_litert(model, [x])
    got = run_edgerun(model, [x])
    assert got[0].dtype == np.float32 and got[0].shape == want[0].shape
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("asym", [False, True])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("kind", ["normal", "positive", "zeros", "ties"])
def test_fully_connected(asym, per_channel, kind):
    model = _model("FULLY_CONNECTED", (3, 40), (16, 40), 0, (3, 16), per_channel, fused_activation_function=0,
                   keep_num_dims=False, asymmetric_quantize_inputs=asym)
    _same(model, _inputs((3, 40), kind))


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("padding,stride,dil", [(0, 1, 1), (1, 2, 1), (0, 1, 2), (1, 1, 1)])
@pytest.mark.parametrize("act", [0, 1, 3])
def test_conv_2d(per_channel, padding, stride, dil, act):
    from edgerun.ops.common import conv_output_size
    h, w, c, cout, k = 9, 8, 5, 6, 3
    oh, ow = (conv_output_size(padding, s, k, stride, dil) for s in (h, w))
    model = _model("CONV_2D", (2, h, w, c), (cout, k, k, c), 0, (2, oh, ow, cout), per_channel, padding=padding,
                   stride_h=stride, stride_w=stride, dilation_h_factor=dil, dilation_w_factor=dil,
                   fused_activation_function=act)
    _same(model, _inputs((2, h, w, c), "normal"))


@pytest.mark.parametrize("mult", [1, 2])
@pytest.mark.parametrize("padding,stride", [(0, 1), (1, 2), (1, 1)])
def test_depthwise_conv_2d(mult, padding, stride):
    from edgerun.ops.common import conv_output_size
    h, w, c, k = 7, 9, 4, 3
    oh, ow = (conv_output_size(padding, s, k, stride, 1) for s in (h, w))
    model = _model("DEPTHWISE_CONV_2D", (1, h, w, c), (1, k, k, c * mult), 3, (1, oh, ow, c * mult), True,
                   padding=padding, stride_h=stride, stride_w=stride, depth_multiplier=mult,
                   fused_activation_function=0, dilation_h_factor=1, dilation_w_factor=1)
    _same(model, _inputs((1, h, w, c), "normal"))


def test_hybrid_tflite_converts_to_full_int8(tmp_path, monkeypatch):
    """`edgerun convert` takes a hybrid .tflite: weights dequantized, then quantized to full int8."""
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))
    from edgerun.convert import convert
    from edgerun.schema.reader import read_model
    g = Graph()
    x = g.tensor("x", (1, 8, 8, 3))
    w1 = _weights(g, "w1", (4, 3, 3, 3), 0, True)
    b1 = g.const("b1", np.zeros(4, np.float32))
    h = g.tensor("h", (1, 8, 8, 4))
    flat = g.tensor("flat", (1, 256))
    w2 = _weights(g, "w2", (5, 256), 0, False)
    b2 = g.const("b2", np.zeros(5, np.float32))
    y = g.tensor("y", (1, 5))
    g.inputs.append(x)
    g.outputs.append(y)
    g.emit("CONV_2D", [x, w1, b1], [h], padding=0, stride_h=1, stride_w=1, fused_activation_function=1,
           dilation_h_factor=1, dilation_w_factor=1)
    g.emit("RESHAPE", [h, g.const("s", np.array([1, 256], np.int32))], [flat], new_shape=[1, 256])
    g.emit("FULLY_CONNECTED", [flat, w2, b2], [y], fused_activation_function=0, keep_num_dims=False,
           asymmetric_quantize_inputs=True)
    src = tmp_path / "hybrid.tflite"
    src.write_bytes(g.to_bytes("hybrid"))
    xin = RNG.standard_normal((1, 8, 8, 3)).astype(np.float32)
    np.testing.assert_array_equal(run_edgerun(src.read_bytes(), [xin])[0], run_litert(src.read_bytes(), [xin])[0])
    out = tmp_path / "int8.tflite"
    convert(str(src), str(out), calib="random")
    m = read_model(out.read_bytes())
    assert all(m.main.tensors[i].np_dtype == np.int8 for op in m.main.operators for i in op.inputs[:1]
               if m.main.tensors[i].np_dtype != np.int32)
    xq = np.zeros((1, 8, 8, 3), np.int8)
    assert np.array_equal(run_edgerun(out.read_bytes(), [xq])[0], run_litert(out.read_bytes(), [xq])[0])


KWS = Path.home() / ".cache" / "edgerun" / "kws_ref_model_float32.tflite"


def _kws_float() -> bytes:
    """MLPerf Tiny's float KWS model: cached here, else downloaded by tools/fetch_models.py (pinned
    SHA-256); a skip with the fetcher's reason where neither works."""
    if KWS.exists():
        return KWS.read_bytes()
    from tests.support.firmware_models import fetch_models_module

    fm = fetch_models_module()
    try:
        return fm.fetch([KWS.name])[KWS.name].read_bytes()
    except fm.FetchError as e:
        pytest.skip(f"MLPerf Tiny KWS float model not available: {e}")


def test_mlperf_tiny_kws_hybrid_matches_litert():
    """The MLPerf Tiny keyword-spotting model is hybrid (five CONV_2D with int8 weights): every hybrid
    layer's output is bit-identical to LiteRT's reference kernels; the final softmax agrees to float
    rounding (edgerun's float AVERAGE_POOL_2D sums in another order: 1 ulp)."""
    data = _kws_float()
    from edgerun.schema.reader import read_model
    g = Graph.from_model(read_model(data))
    hybrid_outs = [op.outputs[0] for op in g.ops if op.op == "CONV_2D"]
    assert len(hybrid_outs) == 5 and all(g.tensors[op.inputs[1]].dtype == "int8" for op in g.ops if op.op == "CONV_2D")
    g.outputs = list(g.outputs) + hybrid_outs
    probe = g.to_bytes("kws probe")
    rng = np.random.default_rng(0)
    for k in range(3):
        x = (rng.standard_normal(g.tensors[g.inputs[0]].shape) * (1 + 3 * k)).astype(np.float32)
        want, got = run_litert(probe, [x]), run_edgerun(probe, [x])
        for w, o in zip(want[1:], got[1:]):
            np.testing.assert_array_equal(o, w)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(run_edgerun(data, [x])[0], run_litert(data, [x])[0], rtol=1e-5, atol=1e-7)
