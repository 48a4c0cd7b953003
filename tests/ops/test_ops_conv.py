"""CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV against LiteRT's reference kernels (and TFLM where LiteRT refuses).

int8 models are built like a real quantizer would: weights quantized symmetrically per channel (or
per tensor) from max|w|/127, int32 bias at scale s_x * s_w, and the output scale calibrated from
the float model's pre-activation outputs, so the int8 outputs span their range and exact equality
means something (``_assert_informative`` checks that).
"""

import numpy as np
import pytest

from edgerun.ir import ModelBuilder
from edgerun.ops.common import conv_output_size, quantized_activation_range
from edgerun.schema.tflite import Activation, Padding
from edgerun.testing import assert_close, compare_with_litert, run_edgerun, run_litert
from tests.support.tflm import run_tflm

SAME, VALID = Padding.SAME, Padding.VALID
NONE, RELU, RELU6, RELU_N1 = Activation.NONE, Activation.RELU, Activation.RELU6, Activation.RELU_N1_TO_1


# --- helpers --------------------------------------------------------------------------------

def _quantize_weights(wf, axis, per_channel):
    """Symmetric int8 weights (zero point 0, values in [-127, 127]) per channel on ``axis`` or per tensor."""
    red = tuple(i for i in range(wf.ndim) if i != axis)
    if per_channel:
        scales = np.abs(wf).max(axis=red).astype(np.float32) / 127
    else:
        scales = np.array([np.abs(wf).max() / 127], np.float32)
    scales = np.maximum(scales, 1e-6)
    shape = [1] * wf.ndim
    shape[axis] = -1
    s = scales.reshape(shape) if per_channel else scales[0]
    wq = np.clip(np.round(wf / s), -127, 127).astype(np.int8)
    return wq, scales


def _out_qparams(values):
    """Asymmetric int8 (scale, zero point) covering values (and 0), as a calibrating quantizer would pick."""
    lo, hi = min(float(values.min()), 0.0), max(float(values.max()), 0.0)
    scale = max(hi - lo, 1e-3) / 255.0
    zp = int(np.clip(np.round(-128 - lo / scale), -128, 127))
    return np.float32(scale), zp


def _assert_informative(y, act=NONE, scale=1.0, zp=0):
    """The int8 output must not be (nearly) constant or saturated, else exact equality proves little."""
    lo, hi = quantized_activation_range(act, scale, zp)
    inside = np.mean((y > lo) & (y < hi))
    distinct = len(np.unique(y))
    assert distinct >= min(12, y.size // 3), f"only {distinct} distinct output values"
    assert inside >= 0.2, f"only {inside:.0%} of outputs are strictly inside the clamp range [{lo}, {hi}]"


class Spec:
    """One single-op model, buildable in float32 or int8 from the same real-valued weights."""

    def __init__(self, op, x_shape, wf, w_axis, out_shape, bias=None, options=None, extra_first=None,
                 x_index=0, bias_mode="const"):
        self.op, self.x_shape, self.wf, self.w_axis = op, tuple(x_shape), wf, w_axis
        self.out_shape, self.bf, self.options = tuple(out_shape), bias, dict(options or {})
        self.extra_first = extra_first  # TRANSPOSE_CONV's output_shape tensor
        self.x_index, self.bias_mode = x_index, bias_mode

    def build(self, dtype, *, x_q=None, w_q=None, out_q=None, act=NONE, per_channel=True):
        b = ModelBuilder()
        opts = dict(self.options, fused_activation_function=act)
        if dtype == "float32":
            x = b.input("x", self.x_shape, "float32")
            w = b.const("w", self.wf.astype(np.float32))
            bias = None if self.bf is None else b.const("b", self.bf.astype(np.float32))
            y = b.tensor("y", self.out_shape, "float32")
        else:
            wq, ws = _quantize_weights(self.wf, self.w_axis, per_channel)
            x = b.input("x", self.x_shape, "int8", x_q)
            w = b.const("w", wq, "int8", (ws, np.zeros(ws.size, np.int64), self.w_axis if per_channel else 0))
            bias = None
            if self.bf is not None:
                bs = (x_q[0] * ws).astype(np.float32)
                bq = np.round(self.bf / np.broadcast_to(bs, self.bf.shape)).astype(np.int32)
                bias = b.const("b", bq, "int32", (bs, np.zeros(bs.size, np.int64), 0))
            y = b.tensor("y", self.out_shape, "int8", out_q)
        ins = [x, w]
        if self.bias_mode == "const" and bias is not None:
            ins.append(bias)
        elif self.bias_mode == "omitted":
            ins.append(-1)
        if self.extra_first is not None:
            shape_t = b.const("output_shape", np.array(self.extra_first, np.int32))
            ins = [shape_t, w, x] + ins[2:]
        b.op(self.op, ins, [y], **opts)
        b.output(y)
        return b.to_bytes()

    def dequantized_float(self, x_q, per_channel):
        """The float twin of the int8 model (dequantized weights and bias), for calibrating the output."""
        wq, ws = _quantize_weights(self.wf, self.w_axis, per_channel)
        shape = [1] * self.wf.ndim
        shape[self.w_axis] = -1
        twin = Spec(self.op, self.x_shape, wq * (ws.reshape(shape) if per_channel else ws[0]), self.w_axis,
                    self.out_shape, self.bf, self.options, self.extra_first, self.x_index, self.bias_mode)
        return twin.build("float32")

    def run_int8(self, *, act=NONE, per_channel=True, x_zp=-3, x_scale=0.03, seed=0, oracle="litert"):
        rng = np.random.default_rng(seed)
        x_q = (np.float32(x_scale), int(x_zp))
        xq = rng.integers(-128, 128, self.x_shape).astype(np.int8)
        xf = ((xq.astype(np.float32) - x_zp) * x_q[0]).astype(np.float32)
        twin = self.dequantized_float(x_q, per_channel)
        pre = (run_litert(twin, [xf]) if oracle == "litert" else run_tflm(twin, [xf]))[0]
        out_q = _out_qparams(pre)
        model = self.build("int8", x_q=x_q, out_q=out_q, act=act, per_channel=per_channel)
        if oracle == "litert":
            got = compare_with_litert(model, [xq])[0]
        else:
            got = run_edgerun(model, [xq])[0]
            assert_close([got], [run_tflm(model, [xq])[0]])
        _assert_informative(got, act, *out_q)
        return got

    def run_float(self, *, act=NONE, seed=0, oracle="litert"):
        model = self.build("float32", act=act)
        x = np.random.default_rng(seed).uniform(-3, 3, self.x_shape).astype(np.float32)
        if oracle == "litert":
            return compare_with_litert(model, [x])[0]
        got = run_edgerun(model, [x])[0]
        assert_close([got], [run_tflm(model, [x])[0]], rtol=1e-5, atol=1e-5)
        return got


def conv_spec(x_shape, oc, kh, kw, stride=(1, 1), padding=SAME, dilation=(1, 1), groups=1, bias=True,
              seed=0, bias_mode="const"):
    rng = np.random.default_rng(seed)
    n, h, w, c = x_shape
    ci = c // groups
    k = kh * kw * ci
    wf = rng.normal(0, 1.0 / np.sqrt(k), (oc, kh, kw, ci)).astype(np.float32)
    bf = rng.normal(0, 0.5, oc).astype(np.float32) if bias else None
    oh = conv_output_size(padding, h, kh, stride[0], dilation[0])
    ow = conv_output_size(padding, w, kw, stride[1], dilation[1])
    opts = dict(padding=padding, stride_h=stride[0], stride_w=stride[1],
                dilation_h_factor=dilation[0], dilation_w_factor=dilation[1])
    return Spec("CONV_2D", x_shape, wf, 0, (n, oh, ow, oc), bf, opts, bias_mode=bias_mode if bias else "none")


def dw_spec(x_shape, dm, kh, kw, stride=(1, 1), padding=SAME, dilation=(1, 1), bias=True, seed=0):
    rng = np.random.default_rng(seed)
    n, h, w, c = x_shape
    wf = rng.normal(0, 1.0 / np.sqrt(kh * kw), (1, kh, kw, c * dm)).astype(np.float32)
    bf = rng.normal(0, 0.5, c * dm).astype(np.float32) if bias else None
    oh = conv_output_size(padding, h, kh, stride[0], dilation[0])
    ow = conv_output_size(padding, w, kw, stride[1], dilation[1])
    opts = dict(padding=padding, stride_h=stride[0], stride_w=stride[1], depth_multiplier=dm,
                dilation_h_factor=dilation[0], dilation_w_factor=dilation[1])
    return Spec("DEPTHWISE_CONV_2D", x_shape, wf, 3, (n, oh, ow, c * dm), bf, opts,
                bias_mode="const" if bias else "none")


def tconv_spec(x_shape, oc, kh, kw, out_hw, stride=(1, 1), padding=SAME, bias=True, seed=0, bias_mode="const"):
    rng = np.random.default_rng(seed)
    n, h, w, c = x_shape
    wf = rng.normal(0, 1.0 / np.sqrt(c * kh * kw / (stride[0] * stride[1])), (oc, kh, kw, c)).astype(np.float32)
    bf = rng.normal(0, 0.5, oc).astype(np.float32) if bias else None
    out_shape = (n, out_hw[0], out_hw[1], oc)
    opts = dict(padding=padding, stride_h=stride[0], stride_w=stride[1])
    return Spec("TRANSPOSE_CONV", x_shape, wf, 0, out_shape, bf, opts, extra_first=out_shape,
                bias_mode=bias_mode if bias else "none")


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
            wq, ws = _quantize_weights(wf, axis, True)
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
        wq, ws = _quantize_weights(wf, 0, True)
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
    scales = {d["name"]: _out_qparams(it.get_tensor(d["index"])) for d in it.get_tensor_details()
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
