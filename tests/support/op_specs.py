"""Single-op model builders shared by the op tests (tests/ops/): CONV_2D / DEPTHWISE_CONV_2D /
TRANSPOSE_CONV specs, FULLY_CONNECTED models, and the one-input, CONCATENATION models.

int8 models are built like a real quantizer would: weights quantized symmetrically per channel (or
per tensor) from max|w|/127, int32 bias at scale s_x * s_w, and the output scale calibrated from
the float model's pre-activation outputs, so the int8 outputs span their range and exact equality
means something (``assert_informative`` checks that).
"""
from __future__ import annotations

import numpy as np

from edgerun.ir import ModelBuilder
from edgerun.ops.common import conv_output_size, quantized_activation_range
from edgerun.schema.tflite import Activation, Padding
from edgerun.testing import assert_close, compare_with_litert, run_edgerun, run_litert
from tests.support.tflm import run_tflm

SAME, VALID = Padding.SAME, Padding.VALID
NONE, RELU, RELU6, RELU_N1 = Activation.NONE, Activation.RELU, Activation.RELU6, Activation.RELU_N1_TO_1
#: the int8 quantization of the shape ops' tests
Q = (0.05, -3)


def q_for(dtype):
    return Q if dtype == "int8" else None


def quantize_weights(wf, axis, per_channel):
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


def out_qparams(values):
    """Asymmetric int8 (scale, zero point) covering values (and 0), as a calibrating quantizer would pick."""
    lo, hi = min(float(values.min()), 0.0), max(float(values.max()), 0.0)
    scale = max(hi - lo, 1e-3) / 255.0
    zp = int(np.clip(np.round(-128 - lo / scale), -128, 127))
    return np.float32(scale), zp


def assert_informative(y, act=NONE, scale=1.0, zp=0):
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
            wq, ws = quantize_weights(self.wf, self.w_axis, per_channel)
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
        wq, ws = quantize_weights(self.wf, self.w_axis, per_channel)
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
        out_q = out_qparams(pre)
        model = self.build("int8", x_q=x_q, out_q=out_q, act=act, per_channel=per_channel)
        if oracle == "litert":
            got = compare_with_litert(model, [xq])[0]
        else:
            got = run_edgerun(model, [xq])[0]
            assert_close([got], [run_tflm(model, [xq])[0]])
        assert_informative(got, act, *out_q)
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


# --- FULLY_CONNECTED ---

def quantize_fc_weights(wf, per_channel):
    scales = (np.abs(wf).max(axis=1) if per_channel else np.array([np.abs(wf).max()])).astype(np.float32) / 127
    s = scales[:, None] if per_channel else scales[0]
    return np.clip(np.round(wf / s), -127, 127).astype(np.int8), scales


def fc_model(dtype, x_shape, wf, bf, *, out_shape, keep_num_dims=False, act=NONE, bias_mode="const",
             x_q=None, out_q=None, per_channel=True, w_zp=0, const_weights=True):
    b = ModelBuilder()
    units = wf.shape[0]
    x = b.input("x", x_shape, dtype, x_q)
    extra_inputs = []
    if dtype == "float32":
        w = b.const("w", wf.astype(np.float32)) if const_weights else b.input("w", wf.shape, "float32")
        bias = None if bf is None else b.const("b", bf.astype(np.float32))
    else:
        wq, ws = quantize_fc_weights(wf, per_channel)
        if w_zp:
            wq = np.clip(wq.astype(np.int32) + w_zp, -128, 127).astype(np.int8)
        wquant = (ws, np.full(ws.size, w_zp, np.int64), 0)
        w = b.const("w", wq, "int8", wquant) if const_weights else b.input("w", wq.shape, "int8", wquant)
        extra_inputs = [] if const_weights else [wq]
        bias = None
        if bf is not None:
            bs = (x_q[0] * ws).astype(np.float32)
            bias = b.const("b", np.round(bf / np.broadcast_to(bs, bf.shape)).astype(np.int32), "int32",
                           (bs, np.zeros(bs.size, np.int64), 0))
    if not const_weights and dtype == "float32":
        extra_inputs = [wf.astype(np.float32)]
    y = b.tensor("y", out_shape, dtype, out_q)
    ins = [x, w] + ([bias] if bias_mode == "const" and bias is not None else [-1] if bias_mode == "omitted" else [])
    b.op("FULLY_CONNECTED", ins, [y], fused_activation_function=act, keep_num_dims=keep_num_dims)
    b.output(y)
    return b.to_bytes(), extra_inputs


def run_fc_int8(x_shape, wf, bf, out_shape, keep=False, *, act=NONE, per_channel=True, bias_mode="const",
                 x_zp=5, x_scale=0.02, w_zp=0, const_weights=True, oracle="litert", seed=1):
    rng = np.random.default_rng(seed)
    x_q = (np.float32(x_scale), x_zp)
    xq = rng.integers(-128, 128, x_shape).astype(np.int8)
    xf = ((xq.astype(np.float32) - x_zp) * x_q[0]).astype(np.float32)
    wq, ws = quantize_fc_weights(wf, per_channel)
    wdq = wq.astype(np.float32) * (ws[:, None] if per_channel else ws[0])
    twin, extra = fc_model("float32", x_shape, wdq, bf, out_shape=out_shape, keep_num_dims=keep, bias_mode=bias_mode)
    pre = (run_litert if oracle == "litert" else run_tflm)(twin, [xf])[0]
    out_q = out_qparams(pre)
    model, extra = fc_model("int8", x_shape, wf, bf, out_shape=out_shape, keep_num_dims=keep, act=act,
                            bias_mode=bias_mode, x_q=x_q, out_q=out_q, per_channel=per_channel, w_zp=w_zp,
                            const_weights=const_weights)
    inputs = [xq] + extra
    if oracle == "litert":
        got = compare_with_litert(model, inputs)[0]
    else:
        got = run_edgerun(model, inputs)[0]
        assert_close([got], run_tflm(model, inputs))
    assert_informative(got, act, *out_q)
    return got


# --- one-input and CONCATENATION models ---

def single_op(op, x_shape, dtype, qi=None, qo=None, *, out_dtype=None, alpha=None, alpha_quant=None,
              alpha_const=True, **options):
    b = ModelBuilder()
    inputs = [b.input("x", x_shape, dtype, qi)]
    if alpha is not None:
        if alpha_const:
            inputs.append(b.const("alpha", alpha, dtype, alpha_quant))
        else:
            inputs.append(b.input("alpha", alpha.shape, dtype, alpha_quant))
    y = b.tensor("y", x_shape, out_dtype or dtype, qo)
    b.op(op, inputs, [y], **options)
    b.output(y)
    return b.to_bytes()


def concat_model(dtype, shapes, axis, out_shape, qs=None, qo=None, act=Activation.NONE):
    b = ModelBuilder()
    xs = [b.input(f"x{i}", s, dtype, (qs[i] if qs else q_for(dtype))) for i, s in enumerate(shapes)]
    y = b.tensor("y", out_shape, dtype, qo or q_for(dtype))
    b.op("CONCATENATION", xs, [y], axis=axis, fused_activation_function=act)
    b.output(y)
    return b.to_bytes()
