"""CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV against LiteRT's reference kernels (and TFLM where LiteRT refuses).

int8 models are built like a real quantizer would: weights quantized symmetrically per channel (or
per tensor) from max|w|/127, int32 bias at scale s_x * s_w, and the output scale calibrated from
the float model's pre-activation outputs, so the int8 outputs span their range and exact equality
means something (``_assert_informative`` checks that).
"""

import numpy as np
import pytest

from edgerun.ir import ModelBuilder
from edgerun.testing import compare_with_litert, run_edgerun, run_litert
from tests.support.op_specs import (
    RELU,
    RELU6,
    RELU_N1,
    SAME,
    VALID,
    conv_spec,
    dw_spec,
    out_qparams,
    quantize_weights,
    tconv_spec,
)

# --- CONV_2D --------------------------------------------------------------------------------

CONV_CASES = {
    "3x3_s1_same": dict(x_shape=(1, 8, 8, 5), oc=6, kh=3, kw=3),
    "3x3_s2_same_odd": dict(x_shape=(1, 9, 11, 3), oc=7, kh=3, kw=3, stride=(2, 2)),
    "5x3_valid_s21": dict(x_shape=(2, 10, 9, 4), oc=5, kh=5, kw=3, stride=(2, 1), padding=VALID),
    "dilated_2x3": dict(x_shape=(1, 12, 10, 3), oc=4, kh=3, kw=3, dilation=(2, 3)),
    "dilated_valid_s2": dict(x_shape=(1, 13, 13, 2), oc=3, kh=3, kw=2, stride=(2, 2), dilation=(2, 2), padding=VALID),
    "pointwise": dict(x_shape=(1, 7, 6, 16), oc=12, kh=1, kw=1),
    "pointwise_s2": dict(x_shape=(1, 7, 6, 8), oc=5, kh=1, kw=1, stride=(2, 2)),
    "even_kernel_same": dict(x_shape=(1, 6, 7, 3), oc=4, kh=4, kw=2, stride=(3, 2)),
    "grouped": dict(x_shape=(1, 6, 6, 8), oc=6, kh=3, kw=3, groups=2),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv2d_float(case):
    conv_spec(**CONV_CASES[case]).run_float()


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
def test_conv2d_int8(case, per_channel):
    conv_spec(**CONV_CASES[case]).run_int8(per_channel=per_channel)


@pytest.mark.parametrize("act", [RELU, RELU6, RELU_N1], ids=["relu", "relu6", "relu_n1_to_1"])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_conv2d_fused_activation(act, dtype):
    spec = conv_spec((1, 7, 7, 6), 8, 3, 3, stride=(2, 2), seed=3)
    if dtype == "float32":
        y = spec.run_float(act=act)
        lo, hi = {RELU: (0, np.inf), RELU6: (0, 6), RELU_N1: (-1, 1)}[act]
        assert y.min() >= lo and y.max() <= hi
    else:
        # x_scale large enough that pre-activation values pass 6 (RELU6) and leave [-1, 1]
        spec.run_int8(act=act, x_scale=0.08 if act == RELU6 else 0.02)


@pytest.mark.parametrize("x_zp", [-128, 0, 127])
def test_conv2d_int8_input_zero_points(x_zp):
    # |x - zp| reaches 255: the zero-point folding and padding with zp must stay exact
    conv_spec((1, 6, 6, 4), 5, 3, 3, stride=(1, 1), seed=4).run_int8(x_zp=x_zp, x_scale=0.01)


def test_conv2d_int8_long_reduction_is_chunked():
    # K = 3*3*160 = 1440 > 1032 (2^24 / (128*127)): the exact float32 GEMM must split K
    conv_spec((1, 5, 5, 160), 6, 3, 3, seed=5).run_int8(x_zp=-128, x_scale=0.01)


def test_conv2d_int8_relu6_clamp_tie():
    # 6 / s_y rounds to exactly 24.5 in float32: TFLite's std::round gives 25 (np.round would give 24)
    spec = conv_spec((1, 6, 6, 4), 5, 3, 3, seed=6)
    rng = np.random.default_rng(0)
    xq = rng.integers(-128, 128, spec.x_shape).astype(np.int8)
    s_y = np.float32(6 / 24.5)
    assert np.float32(6) / s_y == np.float32(24.5)
    model = spec.build("int8", x_q=(np.float32(0.1), 0), out_q=(s_y, -128), act=RELU6)
    y = compare_with_litert(model, [xq])[0]
    assert (y == -128 + 25).any(), "no output reached the RELU6 clamp"


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("bias_mode", ["none", "omitted"])
def test_conv2d_no_bias_tflm(dtype, bias_mode):
    # LiteRT's CONV_2D insists on a bias tensor; TFLM takes the optional one (2 inputs or -1)
    spec = conv_spec((1, 6, 5, 3), 4, 3, 3, stride=(2, 1), bias=True, bias_mode=bias_mode)
    spec.bf = None
    if dtype == "float32":
        spec.run_float(oracle="tflm")
    else:
        spec.run_int8(oracle="tflm")


# --- DEPTHWISE_CONV_2D ---------------------------------------------------------------------

DW_CASES = {
    "3x3_s1_same": dict(x_shape=(1, 8, 8, 6), dm=1, kh=3, kw=3),
    "3x3_s2_same_odd": dict(x_shape=(2, 9, 7, 5), dm=1, kh=3, kw=3, stride=(2, 2)),
    "dm2_valid": dict(x_shape=(1, 8, 9, 3), dm=2, kh=3, kw=2, padding=VALID),
    "dm3_s2_same": dict(x_shape=(1, 7, 7, 2), dm=3, kh=3, kw=3, stride=(2, 1)),
    "dilated": dict(x_shape=(1, 11, 10, 4), dm=1, kh=3, kw=3, dilation=(2, 3)),
    "dilated_s2_dm2": dict(x_shape=(1, 13, 12, 3), dm=2, kh=3, kw=3, stride=(2, 2), dilation=(2, 2)),
    "even_kernel_s3": dict(x_shape=(2, 10, 11, 3), dm=1, kh=4, kw=2, stride=(3, 2)),
    "5x5_no_bias": dict(x_shape=(1, 9, 9, 4), dm=1, kh=5, kw=5, bias=False),
    "1x1": dict(x_shape=(1, 4, 5, 7), dm=2, kh=1, kw=1),
}


@pytest.mark.parametrize("case", sorted(DW_CASES))
def test_depthwise_float(case):
    dw_spec(**DW_CASES[case]).run_float()


@pytest.mark.parametrize("case", sorted(DW_CASES))
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
def test_depthwise_int8(case, per_channel):
    dw_spec(**DW_CASES[case]).run_int8(per_channel=per_channel, x_zp=-20)


@pytest.mark.parametrize("case", ["3x3_s2_same_odd", "dilated_s2_dm2", "even_kernel_s3", "5x5_no_bias"])
def test_depthwise_float_row_blocks(case, monkeypatch):
    """float32 depthwise sums its taps into the output a block of rows at a time: one-row blocks
    (ACC_BYTES 1) give the same bits as whole-output blocks, and match LiteRT."""
    from edgerun.ops.conv import DepthwiseConv2D

    spec = dw_spec(**DW_CASES[case])
    whole = spec.run_float(seed=3)
    monkeypatch.setattr(DepthwiseConv2D, "ACC_BYTES", 1)
    rows = spec.run_float(seed=3)
    assert rows.tobytes() == whole.tobytes()


@pytest.mark.parametrize("act", [RELU, RELU6, RELU_N1], ids=["relu", "relu6", "relu_n1_to_1"])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_depthwise_fused_activation(act, dtype):
    spec = dw_spec((1, 8, 8, 6), 2, 3, 3, stride=(2, 2), seed=7)
    if dtype == "float32":
        spec.run_float(act=act)
    else:
        spec.run_int8(act=act, x_zp=-128, x_scale=0.04 if act == RELU6 else 0.02)


def test_depthwise_int8_long_filter_uses_float64():
    # 33x33 = 1089 taps > 2^24 / (128*127): the tap sums switch to float64 and must stay exact
    dw_spec((1, 36, 35, 2), 1, 33, 33, padding=VALID, seed=8).run_int8(x_zp=-128, x_scale=0.01)


def test_transpose_conv_int8_long_sums_use_float64():
    # 64 channels x 9 taps with |x - zp| up to 255: 576 terms > 2^24 / (255*127), so float64
    tconv_spec((1, 3, 4, 64), 5, 3, 3, out_hw=(3, 4), seed=10).run_int8(x_zp=-128, x_scale=0.01)


# --- TRANSPOSE_CONV ------------------------------------------------------------------------

TCONV_CASES = {
    "2x2_s2_valid": dict(x_shape=(1, 4, 5, 3), oc=4, kh=2, kw=2, out_hw=(8, 10), stride=(2, 2), padding=VALID),
    "3x3_s2_same": dict(x_shape=(1, 4, 4, 5), oc=3, kh=3, kw=3, out_hw=(8, 8), stride=(2, 2)),
    "3x3_s2_same_odd_out": dict(x_shape=(2, 4, 3, 2), oc=3, kh=3, kw=3, out_hw=(7, 5), stride=(2, 2)),
    "3x3_s1_same": dict(x_shape=(1, 5, 6, 4), oc=5, kh=3, kw=3, out_hw=(5, 6)),
    "4x3_s_21_valid": dict(x_shape=(1, 3, 4, 3), oc=2, kh=4, kw=3, out_hw=(8, 6), stride=(2, 1), padding=VALID),
    "kernel_smaller_than_stride": dict(x_shape=(1, 3, 3, 4), oc=3, kh=2, kw=2, out_hw=(9, 9), stride=(3, 3),
                                       padding=VALID),
}


@pytest.mark.parametrize("case", sorted(TCONV_CASES))
@pytest.mark.parametrize("bias_mode", ["const", "omitted", "none"])
def test_transpose_conv_float(case, bias_mode):
    tconv_spec(**TCONV_CASES[case], bias_mode=bias_mode).run_float()


@pytest.mark.parametrize("case", sorted(TCONV_CASES))
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
def test_transpose_conv_int8(case, per_channel):
    tconv_spec(**TCONV_CASES[case]).run_int8(per_channel=per_channel, x_zp=17)


@pytest.mark.parametrize("bias_mode", ["omitted", "none"])
def test_transpose_conv_int8_no_bias(bias_mode):
    tconv_spec(**TCONV_CASES["3x3_s2_same"], bias_mode=bias_mode).run_int8(x_zp=-128, x_scale=0.01)


@pytest.mark.parametrize("act", [RELU, RELU6, RELU_N1], ids=["relu", "relu6", "relu_n1_to_1"])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_transpose_conv_fused_activation(act, dtype):
    spec = tconv_spec(**TCONV_CASES["3x3_s2_same"], seed=9)
    if dtype == "float32":
        spec.run_float(act=act)
    else:
        spec.run_int8(act=act, x_scale=0.1 if act == RELU6 else 0.03)


# --- a small int8 CNN: conv -> depthwise -> pointwise -> fully connected ----------------------

def _small_cnn(dtype, scales=None):
    """Build the chain; ``scales`` maps tensor name -> (scale, zp) for int8 (from a float run)."""
    rng = np.random.default_rng(11)
    layers = [
        ("CONV_2D", "c1", rng.normal(0, 0.3, (8, 3, 3, 3)), 0, dict(padding=SAME, stride_h=2, stride_w=2), RELU6),
        ("DEPTHWISE_CONV_2D", "d1", rng.normal(0, 0.5, (1, 3, 3, 8)), 3,
         dict(padding=SAME, stride_h=1, stride_w=1, depth_multiplier=1), RELU6),
        ("CONV_2D", "p1", rng.normal(0, 0.3, (12, 1, 1, 8)), 0, dict(padding=VALID, stride_h=1, stride_w=1), RELU),
    ]
    shapes = {"x": (1, 12, 12, 3), "c1": (1, 6, 6, 8), "d1": (1, 6, 6, 8), "p1": (1, 6, 6, 12), "fc": (1, 10)}
    b = ModelBuilder()
    q = (lambda name: scales[name]) if dtype == "int8" else (lambda name: None)
    prev = b.input("x", shapes["x"], dtype, q("x"))
    for op, name, wf, axis, opts, act in layers:
        wf = wf.astype(np.float32)
        oc = wf.shape[axis]
        bf = rng.normal(0, 0.2, oc).astype(np.float32)
        if dtype == "int8":
            wq, ws = quantize_weights(wf, axis, True)
            w = b.const(f"{name}_w", wq, "int8", (ws, np.zeros(oc, np.int64), axis))
            bs = (scales[_name_of(b, prev)][0] * ws).astype(np.float32)
            bias = b.const(f"{name}_b", np.round(bf / bs).astype(np.int32), "int32", (bs, np.zeros(oc, np.int64), 0))
        else:
            w, bias = b.const(f"{name}_w", wf), b.const(f"{name}_b", bf)
        out = b.tensor(name, shapes[name], dtype, q(name))
        b.op(op, [prev, w, bias], [out], fused_activation_function=act, **opts)
        prev = out
    wf = rng.normal(0, 0.1, (10, 6 * 6 * 12)).astype(np.float32)
    if dtype == "int8":
        wq, ws = quantize_weights(wf, 0, True)
        w = b.const("fc_w", wq, "int8", (ws, np.zeros(10, np.int64), 0))
    else:
        w = b.const("fc_w", wf)
    out = b.tensor("fc", shapes["fc"], dtype, q("fc"))
    b.op("FULLY_CONNECTED", [prev, w, -1], [out])
    b.output(out)
    return b.to_bytes()


def _name_of(b, index):
    return b.graph.tensors[index].name


def test_small_cnn_int8_and_float():
    rng = np.random.default_rng(12)
    xf = rng.uniform(-1, 1, (1, 12, 12, 3)).astype(np.float32)
    fmodel = _small_cnn("float32")
    compare_with_litert(fmodel, [xf])
    # calibrate every tensor from the float model's intermediate values
    from edgerun.litert import make_interpreter

    it = make_interpreter(fmodel, reference=True, preserve_all=True)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], xf)
    it.invoke()
    scales = {d["name"]: out_qparams(it.get_tensor(d["index"])) for d in it.get_tensor_details()
              if d["name"] in ("x", "c1", "d1", "p1", "fc")}
    s_x, zp_x = scales["x"]
    xq = np.clip(np.round(xf / s_x) + zp_x, -128, 127).astype(np.int8)
    y = compare_with_litert(_small_cnn("int8", scales), [xq])[0]
    assert len(np.unique(y)) >= 6
    # and the int8 network tracks the float one
    y_real = (y.astype(np.float32) - scales["fc"][1]) * scales["fc"][0]
    y_float = run_litert(fmodel, [xf])[0]
    assert np.abs(y_real - y_float).max() < 0.1 * np.abs(y_float).max()


# --- what the kernels refuse, by name --------------------------------------------------------

def test_hybrid_runs_and_dynamic_shapes_are_refused():
    from edgerun.errors import UnsupportedOpError
    from edgerun.runtime.interpreter import Interpreter

    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2), "float32")
    w = b.const("w", np.ones((3, 1, 1, 2), np.int8), "int8", (np.float32(0.1), 0))
    bias = b.const("b", np.zeros(3, np.float32))
    y = b.tensor("y", (1, 4, 4, 3), "float32")
    b.op("CONV_2D", [x, w, bias], [y], padding=SAME, stride_h=1, stride_w=1)
    b.output(y)
    # hybrid (float input, int8 weights) runs since edgerun/ops/hybrid.py (tests/ops/test_ops_hybrid.py)
    xin = np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 4, 4, 2)
    assert np.array_equal(run_edgerun(b.to_bytes(), [xin])[0], run_litert(b.to_bytes(), [xin])[0])

    b = ModelBuilder()
    shape = b.input("shape", (4,), "int32")
    w = b.const("w", np.ones((3, 2, 2, 2), np.float32))
    x = b.input("x", (1, 2, 2, 2), "float32")
    y = b.tensor("y", (1, 4, 4, 3), "float32")
    b.op("TRANSPOSE_CONV", [shape, w, x], [y], padding=VALID, stride_h=2, stride_w=2)
    b.output(y)
    with pytest.raises(UnsupportedOpError, match="output_shape must be a constant"):
        Interpreter(model_content=b.to_bytes()).allocate_tensors()


@pytest.mark.parametrize("x_shape,kh,stride", [((2, 9, 7, 32), 3, (1, 1)), ((1, 12, 11, 24), 5, (2, 2))])
def test_depthwise_int8_einsum_path_row_blocks(x_shape, kh, stride, monkeypatch):
    """The int8 einsum path copies its window columns a block of output rows at a time
    (EINSUM_COLS_BYTES; 1 here: one row a block, batch 2 and a strided 5x5 included): the
    same bits as one whole-output block, and LiteRT's."""
    from edgerun.ops.conv import DepthwiseConv2D

    monkeypatch.setattr(DepthwiseConv2D, "compile", lambda self, ins, outs: None)  # the eval path
    spec = dw_spec(x_shape, 1, kh, kh, stride=stride, seed=6)
    whole = spec.run_int8(seed=2, x_zp=-7)
    monkeypatch.setattr(DepthwiseConv2D, "EINSUM_COLS_BYTES", 1)
    rows = spec.run_int8(seed=2, x_zp=-7)
    assert rows.tobytes() == whole.tobytes()


def test_conv_int8_long_filter_widened_in_channel_blocks(monkeypatch):
    """A filter too long for one exact float32 GEMM (3x3x160 > the exact chunk) whose widened
    chunks exceed WIDEN_BYTES is widened a block of output channels at a time, each value
    summing its chunks in order: the same bits as whole-chunk widening, and LiteRT's."""
    from edgerun.ops.conv import Conv2D

    monkeypatch.setattr(Conv2D, "compile", lambda self, ins, outs: None)  # the eval path
    spec = conv_spec((1, 8, 8, 160), 40, 3, 3, seed=8)
    whole = spec.run_int8(seed=1, x_zp=5)
    monkeypatch.setattr(Conv2D, "WIDEN_BYTES", 4 * 1200 * 7)  # 7 output channels a block
    blocks = spec.run_int8(seed=1, x_zp=5)
    assert blocks.tobytes() == whole.tobytes()
