"""16x8 kernels (int16 activations, int8 weights, int64 bias) against LiteRT's reference kernels.

Models are quantized like TFLite's 16x8 mode: int16 activations symmetric (zero point 0) with the
scale max|x| / 32767, int8 weights symmetric per channel (or per tensor), int64 bias at scale
s_x * s_w, output scale from the float twin's output range so the int16 outputs span their range.
"""

import numpy as np
import pytest

from edgerun.errors import EdgerunError
from edgerun.ir import ModelBuilder
from edgerun.schema.tflite import Activation, Padding
from edgerun.testing import compare_with_litert, run_edgerun, run_litert

NONE, RELU, RELU6 = Activation.NONE, Activation.RELU, Activation.RELU6


def _weights(wf, axis, per_channel):
    red = tuple(i for i in range(wf.ndim) if i != axis)
    scales = (np.abs(wf).max(axis=red) if per_channel else np.array([np.abs(wf).max()])).astype(np.float32) / 127
    shape = [1] * wf.ndim
    shape[axis] = -1
    s = scales.reshape(shape) if per_channel else scales[0]
    return np.clip(np.round(wf / s), -127, 127).astype(np.int8), scales


def _build(op, x_shape, wf, bf, axis, out_shape, *, dtype, x_scale=None, y_scale=None, per_channel=True,
           act=NONE, bias_dtype="int64", **opts):
    b = ModelBuilder()
    if dtype == "float32":
        x = b.input("x", x_shape, "float32")
        w = b.const("w", wf.astype(np.float32))
        bias = b.const("b", bf.astype(np.float32))
        y = b.tensor("y", out_shape, "float32")
    else:
        wq, ws = _weights(wf, axis, per_channel)
        zeros = np.zeros(ws.size, np.int64)
        x = b.input("x", x_shape, "int16", (np.float32(x_scale), 0))
        w = b.const("w", wq, "int8", (ws, zeros, axis if per_channel else 0))
        bs = (np.float32(x_scale) * ws).astype(np.float32)
        bq = np.round(bf / np.broadcast_to(bs, bf.shape)).astype(bias_dtype)
        bias = b.const("b", bq, bias_dtype, (bs, zeros, 0))
        y = b.tensor("y", out_shape, "int16", (np.float32(y_scale), 0))
    b.op(op, [x, w, bias], [y], fused_activation_function=act, **opts)
    b.output(y)
    return b.to_bytes()


def _run_16x8(op, x_shape, wf, bf, axis, out_shape, *, seed=0, per_channel=True, act=NONE, **opts):
    rng = np.random.default_rng(seed)
    x_scale = 3.0 / 32767
    xq = rng.integers(-32767, 32768, x_shape).astype(np.int16)
    xf = (xq.astype(np.float32) * np.float32(x_scale)).astype(np.float32)
    wq, ws = _weights(wf, axis, per_channel)
    shape = [1] * wf.ndim
    shape[axis] = -1
    wd = wq * (ws.reshape(shape) if per_channel else ws[0])
    twin = _build(op, x_shape, wd, bf, axis, out_shape, dtype="float32", **opts)
    pre = run_litert(twin, [xf])[0]
    y_scale = float(np.abs(pre).max()) / 32767
    model = _build(op, x_shape, wf, bf, axis, out_shape, dtype="int16", x_scale=x_scale, y_scale=y_scale,
                   per_channel=per_channel, act=act, **opts)
    got = compare_with_litert(model, [xq])[0]
    assert got.dtype == np.int16
    assert len(np.unique(got)) > min(1000, got.size // 4), "int16 output is nearly constant"
    # 16x8 is close to float: within a few LSB of the dequantized float twin before the activation
    if act == NONE:
        assert np.abs(got.astype(np.float64) * y_scale - pre).max() < 4 * y_scale
    return got


@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("act", [NONE, RELU, RELU6])
def test_fully_connected_16x8(per_channel, act):
    rng = np.random.default_rng(1)
    wf = rng.normal(0, 0.3, (24, 40)).astype(np.float32)
    bf = rng.normal(0, 0.5, 24).astype(np.float32)
    _run_16x8("FULLY_CONNECTED", (3, 40), wf, bf, 0, (3, 24), per_channel=per_channel, act=act)


@pytest.mark.parametrize("padding,stride,dilation", [(Padding.SAME, 1, 1), (Padding.VALID, 2, 1),
                                                     (Padding.SAME, 2, 1), (Padding.VALID, 1, 2)])
@pytest.mark.parametrize("per_channel", [True, False])
def test_conv2d_16x8(padding, stride, dilation, per_channel):
    from edgerun.ops.common import conv_output_size

    rng = np.random.default_rng(2)
    wf = rng.normal(0, 0.3, (8, 3, 3, 5)).astype(np.float32)
    bf = rng.normal(0, 0.5, 8).astype(np.float32)
    oh = conv_output_size(padding, 11, 3, stride, dilation)
    ow = conv_output_size(padding, 9, 3, stride, dilation)
    _run_16x8("CONV_2D", (2, 11, 9, 5), wf, bf, 0, (2, oh, ow, 8), per_channel=per_channel, padding=padding,
              stride_h=stride, stride_w=stride, dilation_h_factor=dilation, dilation_w_factor=dilation)


def test_conv2d_16x8_relu6():
    rng = np.random.default_rng(3)
    wf = rng.normal(0, 0.3, (6, 3, 3, 4)).astype(np.float32)
    bf = rng.normal(0, 0.5, 6).astype(np.float32)
    _run_16x8("CONV_2D", (1, 8, 8, 4), wf, bf, 0, (1, 8, 8, 6), act=RELU6, padding=Padding.SAME,
              stride_h=1, stride_w=1)


def test_int16_op_without_kernel_is_refused_with_a_message():
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2), "int16", (np.float32(0.001), 0))
    y = b.tensor("y", (1, 4, 4, 2), "int16", (np.float32(1 / 32768), 0))
    b.op("LOGISTIC", [x], [y])
    b.output(y)
    with pytest.raises(EdgerunError, match="LOGISTIC/int16"):
        run_edgerun(b.to_bytes(), [np.zeros((1, 4, 4, 2), np.int16)])


@pytest.mark.parametrize("op", ["MAX_POOL_2D", "AVERAGE_POOL_2D"])
@pytest.mark.parametrize("padding,stride,size", [(Padding.VALID, 2, 2), (Padding.SAME, 2, 3), (Padding.SAME, 1, 3)])
@pytest.mark.parametrize("act", [NONE, RELU])
def test_pool_16x8(op, padding, stride, size, act):
    from edgerun.ops.common import conv_output_size

    scale = np.float32(0.002)
    oh, ow = conv_output_size(padding, 9, size, stride), conv_output_size(padding, 7, size, stride)
    b = ModelBuilder()
    x = b.input("x", (2, 9, 7, 3), "int16", (scale, 0))
    y = b.tensor("y", (2, oh, ow, 3), "int16", (scale, 0))
    b.op(op, [x], [y], padding=padding, stride_h=stride, stride_w=stride, filter_height=size, filter_width=size,
         fused_activation_function=act)
    b.output(y)
    xq = np.random.default_rng(4).integers(-32768, 32768, (2, 9, 7, 3)).astype(np.int16)
    got = compare_with_litert(b.to_bytes(), [xq])[0]
    assert len(np.unique(got)) > got.size // 4


def test_reshape_16x8():
    b = ModelBuilder()
    x = b.input("x", (2, 3, 4), "int16", (np.float32(0.01), 0))
    y = b.tensor("y", (2, 12), "int16", (np.float32(0.01), 0))
    b.op("RESHAPE", [x, b.const("shape", np.array([2, 12], np.int32))], [y], new_shape=[2, 12])
    b.output(y)
    xq = np.random.default_rng(5).integers(-32768, 32768, (2, 3, 4)).astype(np.int16)
    compare_with_litert(b.to_bytes(), [xq])


@pytest.mark.parametrize("shape", [(64, 10), (3, 1000)])
@pytest.mark.parametrize("x_scale,beta", [(3.0 / 32767, 1.0), (10.0 / 32767, 1.0), (0.5 / 32767, 2.0),
                                          (20.0 / 32767, 0.7)])
def test_softmax_16x8(shape, x_scale, beta):
    b = ModelBuilder()
    x = b.input("x", shape, "int16", (np.float32(x_scale), 0))
    y = b.tensor("y", shape, "int16", (np.float32(1 / 32768), 0))
    b.op("SOFTMAX", [x], [y], beta=beta)
    b.output(y)
    xq = np.random.default_rng(6).integers(-32768, 32768, shape).astype(np.int16)
    got = compare_with_litert(b.to_bytes(), [xq])[0]
    assert len(np.unique(got)) > 10


@pytest.mark.parametrize("padding,stride,dilation,mult", [(Padding.SAME, 1, 1, 1), (Padding.VALID, 2, 1, 1),
                                                          (Padding.SAME, 2, 1, 2), (Padding.VALID, 1, 2, 1)])
@pytest.mark.parametrize("per_channel", [True, False])
def test_depthwise_conv2d_16x8(padding, stride, dilation, mult, per_channel):
    from edgerun.ops.common import conv_output_size

    rng = np.random.default_rng(7)
    c = 6
    wf = rng.normal(0, 0.4, (1, 3, 3, c * mult)).astype(np.float32)
    bf = rng.normal(0, 0.5, c * mult).astype(np.float32)
    oh = conv_output_size(padding, 10, 3, stride, dilation)
    ow = conv_output_size(padding, 9, 3, stride, dilation)
    _run_16x8("DEPTHWISE_CONV_2D", (2, 10, 9, c), wf, bf, 3, (2, oh, ow, c * mult), per_channel=per_channel,
              padding=padding, stride_h=stride, stride_w=stride, dilation_h_factor=dilation,
              dilation_w_factor=dilation, depth_multiplier=mult)


def test_16x8_absurd_requant_scale_is_refused_in_one_line():
    rng = np.random.default_rng(8)
    wf = rng.normal(0, 0.3, (4, 8)).astype(np.float32)
    model = _build("FULLY_CONNECTED", (1, 8), wf, np.zeros(4, np.float32), 0, (1, 4), dtype="int16",
                   x_scale=1.0, y_scale=1e-9)
    with pytest.raises(EdgerunError, match="2\\^14"):
        run_edgerun(model, [np.zeros((1, 8), np.int16)])


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
@pytest.mark.parametrize("shapes", [((2, 5, 7), (2, 5, 7)), ((2, 5, 7), (1, 1, 7))])
@pytest.mark.parametrize("act", [NONE, RELU])
def test_binary_16x8(op, shapes, act):
    s1, s2 = np.float32(2.0 / 32767), np.float32(0.7 / 32767)
    so = np.float32((1.4 if op == "MUL" else 2.7) / 32767)
    b = ModelBuilder()
    x = b.input("x", shapes[0], "int16", (s1, 0))
    y2 = b.input("y", shapes[1], "int16", (s2, 0))
    out = b.tensor("out", np.broadcast_shapes(*shapes), "int16", (so, 0))
    opts = {} if op == "MUL" else {"pot_scale_int16": False}
    b.op(op, [x, y2], [out], fused_activation_function=act, **opts)
    b.output(out)
    rng = np.random.default_rng(9)
    xs = [rng.integers(-32768, 32768, s).astype(np.int16) for s in shapes]
    got = compare_with_litert(b.to_bytes(), xs)[0]
    assert len(np.unique(got)) > got.size // 4


def test_int16_add_with_pot_scales_is_refused():
    b = ModelBuilder()
    x = b.input("x", (4,), "int16", (np.float32(1 / 1024), 0))
    y = b.input("y", (4,), "int16", (np.float32(1 / 1024), 0))
    out = b.tensor("out", (4,), "int16", (np.float32(1 / 512), 0))
    b.op("ADD", [x, y], [out], pot_scale_int16=True)
    b.output(out)
    with pytest.raises(EdgerunError, match="pot_scale_int16"):
        run_edgerun(b.to_bytes(), [np.zeros(4, np.int16)] * 2)


@pytest.mark.parametrize("op", ["FULLY_CONNECTED", "CONV_2D"])
def test_16x8_int32_bias_refused_because_litert_reads_it_as_int64(op):
    """An int32 bias on a 16x8 layer has no agreed meaning: LiteRT reads it as int64 (its output is
    thousands of LSB from both readings of the int32 values), so edgerun refuses the model."""
    rng = np.random.default_rng(5)
    if op == "FULLY_CONNECTED":
        wf, xs, ys, opts = rng.normal(0, 0.3, (24, 40)).astype(np.float32), (3, 40), (3, 24), {}
    else:
        wf, xs, ys = rng.normal(0, 0.3, (8, 3, 3, 4)).astype(np.float32), (1, 6, 6, 4), (1, 4, 4, 8)
        opts = {"padding": Padding.VALID, "stride_w": 1, "stride_h": 1}
    bf = rng.normal(0, 0.5, wf.shape[0]).astype(np.float32)
    xq = rng.integers(-32767, 32768, xs).astype(np.int16)
    kw = dict(dtype="int16", x_scale=3 / 32767, y_scale=0.0005, **opts)
    m32 = _build(op, xs, wf, bf, 0, ys, bias_dtype="int32", **kw)
    from edgerun.litert import interpreter_module
    if interpreter_module().__name__.startswith("ai_edge_litert"):  # the armhf lane's tflite-runtime 2.14 differs
        litert = run_litert(m32, [xq])[0].astype(np.int64)
        as_int64 = run_edgerun(_build(op, xs, wf, bf, 0, ys, bias_dtype="int64", **kw), [xq])[0].astype(np.int64)
        no_bias = run_edgerun(_build(op, xs, wf, bf * 0, 0, ys, bias_dtype="int64", **kw), [xq])[0].astype(np.int64)
        assert np.abs(litert - as_int64).max() > 100 and np.abs(litert - no_bias).max() > 100
    with pytest.raises(EdgerunError, match="int64 bias"):
        run_edgerun(m32, [xq])
