"""16x8 kernels (int16 activations, int8 weights): TFLite's 16x8 quantization mode.

Activations are int16 symmetric (zero point 0), weights int8 symmetric (per channel or per
tensor), bias int64. An int32 bias is refused: LiteRT 2.3 reads a 16x8 layer's bias as int64 whatever
its type (an int32 buffer is read past its end, outputs tens of thousands of LSB off), so no kernel
can agree with it, and the firmware and ``check --target mcu`` refuse it too. The reference kernels (``reference_integer_ops`` templates
instantiated for int16 input) accumulate in int64 and requantize with the int64 form of
MultiplyByQuantizedMultiplier, which first rounds the Q0.31 multiplier to Q0.15::

    m16   = m < 0x7FFF0000 ? (m + 2^15) >> 16 : 0x7FFF
    y     = (acc * m16 + 2^(14 - shift)) >> (15 - shift)          (arithmetic shift, int64)
    y     = clamp(y, act_lo, act_hi)                                (int16, no output zero point)

Ops covered here: FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D, ADD, SUB, MUL, MAX_POOL_2D, AVERAGE_POOL_2D, SOFTMAX (RESHAPE's int16 form
is registered in :mod:`edgerun.ops.shape`). Other ops with int16 tensors have no kernel yet
and are refused by the registry lookup (``edgerun has kernels for ...``).
"""

from __future__ import annotations

import numpy as np

from edgerun.ops.common import conv_output_size, conv_padding, qparams, quantized_activation_range
from edgerun.ops.conv import _same_padding, _strides
from edgerun.ops.fixedpoint import quantize_multiplier, quantize_multipliers
from edgerun.ops.fully_connected import fc_shapes
from edgerun.ops.registry import Kernel, register


def mbqm64(acc: np.ndarray, mult, shift) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier(int64 x, int32 m, int shift), elementwise (int64 out)."""
    mult = np.asarray(mult, np.int64)
    shift = np.asarray(shift, np.int64)
    reduced = np.where(mult < 0x7FFF0000, (mult + (1 << 15)) >> 16, 0x7FFF)
    total = 15 - shift
    v = acc.astype(np.int64) * reduced + (np.int64(1) << (total - 1))
    return v >> total


def _check_16x8(ctx, x_i: int, w_i: int, b_i: int) -> None:
    x, w, y = ctx.input(x_i), ctx.input(w_i), ctx.output(0)
    b = ctx.input(b_i)
    if w.dtype != "int8":
        raise ctx.fail(f"int16 input needs int8 weights (16x8), got {w.dtype}")
    if y.dtype != "int16":
        raise ctx.fail(f"int16 input with a {y.dtype} output is not supported")
    if b is not None and b.dtype != "int64":
        raise ctx.fail(f"16x8 op needs an int64 bias, got {b.dtype} (LiteRT reads a 16x8 bias as int64 whatever its type)")
    for t in (x, y):
        _, zp = qparams(t)
        if zp != 0:
            raise ctx.fail(f"int16 tensor {t.name!r} needs zero point 0 (16x8 activations are symmetric)")


class _Weighted16(Kernel):
    """Shared requantization setup for the 16x8 weighted ops."""

    def _setup(self, units: int, axis: int, x_i: int = 0, w_i: int = 1, b_i: int = 2) -> None:
        ctx = self.ctx
        _check_16x8(ctx, x_i, w_i, b_i)
        s_x, _ = qparams(ctx.input(x_i))
        s_y, _ = qparams(ctx.output(0))
        q = ctx.input(w_i).quant
        if q is None or q.empty:
            raise ctx.fail("int8 weights have no quantization parameters")
        w_scales = np.asarray(q.scale, np.float32)
        per_channel = w_scales.size > 1
        if per_channel and (w_scales.size != units or q.quantized_dimension != axis):
            raise ctx.fail(f"per-channel weights need {units} scales on axis {axis}, got {w_scales.size}")
        self.w_zp = 0 if per_channel else int(q.zero_point[0])
        if per_channel or self.per_channel_rule:
            scales = np.broadcast_to(w_scales, (units,))
            mult, shift = quantize_multipliers([float(s_x) * float(s) / float(s_y) for s in scales])
        else:
            m, s = quantize_multiplier(float(np.float32(s_x) * w_scales[0]) / float(s_y))
            mult, shift = np.full(units, m, np.int64), np.full(units, s, np.int64)
        self.mult, self.shift = np.asarray(mult, np.int64), np.asarray(shift, np.int64)
        if self.shift.size and int(self.shift.max()) > 14:  # the int64 rule needs 15 - shift >= 1
            raise ctx.invalid("16x8 requantization scale (input x weight / output) is 2^14 or more")
        self.eff = np.array([float(s_x) * float(s) / float(s_y) for s in np.broadcast_to(w_scales, (units,))])
        act = ctx.options.get("fused_activation_function", 0)
        self.lo, self.hi = quantized_activation_range(act, s_y, 0, "int16")
        b = ctx.const(b_i)
        if ctx.input(b_i) is not None and b is None:
            raise ctx.fail("bias must be a constant tensor")
        self.bias = np.zeros(units, np.int64) if b is None else np.asarray(b, np.int64).reshape(units)

    def _taps(self, h: int, w: int, fh: int, fw: int) -> tuple[int, int]:
        """The convolution window of CONV_2D / DEPTHWISE_CONV_2D (strides, dilations and padding
        read and checked as the int8 kernels do): sets the row / column index of every tap of every
        output pixel into the zero-padded input and that padding; returns the output size."""
        ctx = self.ctx
        sh, sw, dh, dw = _strides(ctx, ctx.options)
        oh, ow, ph, _, pw, _ = _same_padding(ctx, ctx.options, h, w, fh, fw, sh, sw, dh, dw)
        self.rows = (np.arange(oh) * sh)[:, None] + np.arange(fh) * dh  # (oh, fh)
        self.cols = (np.arange(ow) * sw)[:, None] + np.arange(fw) * dw  # (ow, fw)
        self.pad = (ph, max(0, int(self.rows.max()) + 1 - ph - h), pw, max(0, int(self.cols.max()) + 1 - pw - w))
        return oh, ow

    #: CONV_2D computes per-tensor multipliers in double like per-channel ones; FC uses a float32 product
    per_channel_rule = False

    #: FULLY_CONNECTED's reference kernel requantizes in double (round half away from zero), like its int8 form
    double_requant = False

    def _finish(self, acc: np.ndarray) -> np.ndarray:
        acc = acc + self.bias
        if self.double_requant:
            v = acc * self.eff
            y = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int64)
        else:
            y = mbqm64(acc, self.mult, self.shift)
        np.clip(y, self.lo, self.hi, out=y)
        return y.astype(np.int16)


@register("FULLY_CONNECTED", "int16")
class FullyConnected16x8(_Weighted16):
    """FULLY_CONNECTED, int16 input x int8 weights -> int16 (``reference_integer_ops::FullyConnected``)."""

    double_requant = True

    def prepare(self):
        ctx = self.ctx
        self.k, self.units, self.out_shape = fc_shapes(ctx)
        out_shape = self.out_shape
        self._setup(self.units, 0)
        w = ctx.const(1)
        self.wmat = None if w is None else (np.asarray(w, np.int64) - self.w_zp).T.copy()
        return [out_shape]

    def eval(self, inputs):
        x, w = inputs[0], inputs[1]
        wmat = self.wmat if self.wmat is not None else (np.asarray(w, np.int64) - self.w_zp).T
        acc = x.reshape(-1, self.k).astype(np.int64) @ wmat
        return [self._finish(acc).reshape(self.out_shape)]


@register("CONV_2D", "int16")
class Conv2D16x8(_Weighted16):
    """CONV_2D, int16 NHWC input x int8 OHWI filter -> int16 (``reference_integer_ops::ConvPerChannel``)."""

    per_channel_rule = True

    def prepare(self):
        ctx = self.ctx
        n, h, w_, c = ctx.input_shape(0)
        oc, fh, fw, ic = ctx.input_shape(1)
        if ic <= 0 or c % ic:
            raise ctx.fail(f"input channels {c} are not a multiple of the filter's {ic}")
        if c != ic:
            raise ctx.fail("grouped int16 convolution is not supported")
        oh, ow = self._taps(h, w_, fh, fw)
        self._setup(oc, 0)
        wt = ctx.const(1)
        if wt is None:
            raise ctx.fail("int16 CONV_2D needs constant weights")
        self.wmat = (np.asarray(wt, np.int64) - self.w_zp).reshape(oc, -1).T.copy()  # (fh*fw*ic, oc)
        self.out_shape = (n, oh, ow, oc)
        return [self.out_shape]

    def eval(self, inputs):
        x = inputs[0]
        t, b_, l_, r_ = self.pad
        xp = np.pad(x.astype(np.int64), ((0, 0), (t, b_), (l_, r_), (0, 0)))
        # (n, oh, fh, ow, fw, c) -> (n, oh, ow, fh, fw, c)
        patches = xp[:, self.rows[:, :, None, None], self.cols[None, None, :, :], :]
        patches = patches.transpose(0, 1, 3, 2, 4, 5).reshape(self.out_shape[:3] + (-1,))
        acc = patches @ self.wmat
        return [self._finish(acc)]


@register("DEPTHWISE_CONV_2D", "int16")
class DepthwiseConv2D16x8(_Weighted16):
    """DEPTHWISE_CONV_2D, int16 NHWC input x int8 1HWC filter -> int16
    (``reference_integer_ops::DepthwiseConvPerChannel`` for int16: int64 acc, fixed-point requant)."""

    per_channel_rule = True

    def prepare(self):
        ctx, opts = self.ctx, self.ctx.options
        n, h, w_, c = ctx.input_shape(0)
        one, fh, fw, oc = ctx.input_shape(1)
        mult = opts.get("depth_multiplier", 1) or 1
        if one != 1 or c == 0 or oc % c:
            raise ctx.fail(f"filter {[one, fh, fw, oc]} does not fit {c} input channels")
        self.dm = oc // c
        if mult not in (self.dm, 0) and c != 1:
            raise ctx.invalid(f"depth_multiplier {mult} but the filter has {self.dm} outputs per input channel")
        oh, ow = self._taps(h, w_, fh, fw)
        self._setup(oc, 3)
        wt = ctx.const(1)
        if wt is None:
            raise ctx.fail("int16 DEPTHWISE_CONV_2D needs constant weights")
        self.wmat = (np.asarray(wt, np.int64) - self.w_zp).reshape(fh * fw, oc)
        self.out_shape = (n, oh, ow, oc)
        return [self.out_shape]

    def eval(self, inputs):
        x = inputs[0]
        t, b_, l_, r_ = self.pad
        xp = np.pad(x.astype(np.int64), ((0, 0), (t, b_), (l_, r_), (0, 0)))
        patches = xp[:, self.rows[:, :, None, None], self.cols[None, None, :, :], :]  # (n, oh, fh, ow, fw, c)
        patches = patches.transpose(0, 1, 3, 2, 4, 5).reshape(self.out_shape[:3] + (-1, x.shape[-1]))
        if self.dm > 1:
            patches = np.repeat(patches, self.dm, axis=-1)  # output channel oc reads input oc // mult
        acc = np.einsum("nhwtc,tc->nhwc", patches, self.wmat)
        return [self._finish(acc)]


@register("MAX_POOL_2D", "int16")
@register("AVERAGE_POOL_2D", "int16")
class Pool16(Kernel):
    """int16 MAX_POOL_2D / AVERAGE_POOL_2D (``reference_integer_ops::MaxPool`` / ``AveragePool`` for int16).

    Windows are clipped to the input (padding never takes part). Average pooling sums in int32 and
    divides rounding to nearest, ties away from zero: ``(sum +- count/2) / count`` in C division.
    """

    def prepare(self):
        ctx, opts = self.ctx, self.ctx.options
        x, y = ctx.input(0), ctx.output(0)
        if y.dtype != "int16":
            raise ctx.fail(f"int16 pooling with a {y.dtype} output is not supported")
        s_x, zp_x = qparams(x)
        s_y, zp_y = qparams(y)
        if (float(s_x), zp_x) != (float(s_y), zp_y):
            raise ctx.invalid("int16 pooling needs the same scale and zero point on input and output")
        self.is_max = ctx.model.op_code(ctx.op).builtin == "MAX_POOL_2D"
        n, h, w, c = ctx.input_shape(0)
        fh, fw = opts.get("filter_height", 1), opts.get("filter_width", 1)
        sh, sw = opts.get("stride_h", 1), opts.get("stride_w", 1)
        pad = opts.get("padding", 0)
        oh, ow = conv_output_size(pad, h, fh, sh), conv_output_size(pad, w, fw, sw)
        ph, _ = conv_padding(pad, h, fh, sh, 1, oh)
        pw, _ = conv_padding(pad, w, fw, sw, 1, ow)
        rows = (np.arange(oh) * sh - ph)[:, None] + np.arange(fh)  # (oh, fh), may fall outside [0, h)
        cols = (np.arange(ow) * sw - pw)[:, None] + np.arange(fw)
        self.rows, self.cols = np.clip(rows, 0, h - 1), np.clip(cols, 0, w - 1)
        valid = ((rows >= 0) & (rows < h))[:, None, :, None] & ((cols >= 0) & (cols < w))[None, :, None, :]
        self.valid = valid.reshape(oh, ow, fh * fw)  # (oh, ow, taps)
        self.count = self.valid.sum(axis=2).astype(np.int64)[None, :, :, None]
        self.lo, self.hi = quantized_activation_range(opts.get("fused_activation_function", 0), s_y, zp_y, "int16")
        self.out_shape = (n, oh, ow, c)
        return [self.out_shape]

    def eval(self, inputs):
        x = inputs[0]
        n, oh, ow, c = self.out_shape
        taps = x[:, self.rows[:, None, :, None], self.cols[None, :, None, :], :]  # (n, oh, ow, fh, fw, c)
        taps = taps.reshape(n, oh, ow, -1, c).astype(np.int64)
        mask = self.valid[None, :, :, :, None]
        if self.is_max:
            y = np.where(mask, taps, -(1 << 40)).max(axis=3)
        else:
            acc = np.where(mask, taps, 0).sum(axis=3)
            half = self.count // 2
            num = np.where(acc > 0, acc + half, acc - half)
            y = np.sign(num) * (np.abs(num) // self.count)  # C integer division truncates toward zero
        np.clip(y, self.lo, self.hi, out=y)
        return [y.astype(np.int16)]


def int16_lut(func, lo: float, hi: float, ftype=np.float32) -> np.ndarray:
    """TFLite's 513-entry int16 interpolation table of ``func`` on [lo, hi] (outputs in [-1, 1) as Q0.15),
    with each entry biased by half the midpoint interpolation error (``LUTPopulate`` / ``gen_lut``)."""
    ft = ftype
    step = (ft(hi) - ft(lo)) / ft(512)
    half = step / ft(2)
    k = ft(32768.0)

    def rnd(v):  # TfLiteRound: half away from zero
        return np.sign(v) * np.floor(np.abs(v) + ft(0.5))

    lut = np.zeros(513, np.int64)
    for i in range(512):
        x = ft(lo) + ft(i) * step
        val = ft(func(x))
        val_mid = ft(func(ft(x + half)))
        val_next = ft(func(ft(ft(lo) + ft(i + 1) * step)))
        sample = rnd(ft(val * k))
        interp = rnd(ft((ft(val_next * k) + rnd(ft(val * k))) / ft(2)))
        mid = rnd(ft(val_mid * k))
        bias = rnd(ft((interp - mid) / ft(2)))
        lut[i] = int(min(max(sample - bias, -32768.0), 32767.0))
    lut[512] = int(min(max(rnd(ft(ft(func(ft(hi))) * k)), -32768.0), 32767.0))
    return lut


def lut_lookup(v: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """TFLite's int16 LUT lookup: base ``lut[256 + (v >> 7)]`` plus the slope times ``v & 0x7f`` (Q0.7), rounded."""
    v = v.astype(np.int64)
    idx = 256 + (v >> 7)
    off = v & 0x7F
    base = lut[idx]
    slope = lut[idx + 1] - base
    return base + ((slope * off + 64) >> 7)


@register("SOFTMAX", "int16")
class Softmax16(Kernel):
    """int16 SOFTMAX (``reference_ops::SoftmaxInt16``): exp(x - max) and 1 / (1 + x) from int16 tables,
    output scale 1/32768, zero point 0."""

    #: the table arithmetic's float type: double matches LiteRT's reference bit for bit (float32 is 1 LSB off)
    lut_float = np.float64

    def prepare(self):
        ctx = self.ctx
        x, y = ctx.input(0), ctx.output(0)
        if y.dtype != "int16":
            raise ctx.fail(f"int16 SOFTMAX writes int16, not {y.dtype}")
        s_x, zp_x = qparams(x)
        s_y, zp_y = qparams(y)
        if zp_x != 0 or zp_y != 0:
            raise ctx.fail("int16 SOFTMAX needs zero points 0")
        if abs(float(s_y) - 1.0 / 32768) > 1e-12:
            raise ctx.invalid(f"int16 SOFTMAX output scale must be 1/32768, got {float(s_y)}")
        beta = float(ctx.options.get("beta", 1.0))
        self.mult, self.shift = quantize_multiplier(float(s_x) * beta / (10.0 / 65535.0))
        ft = self.lut_float
        self.exp_lut = int16_lut(lambda v: np.exp(v), -10.0, 0.0, ft)
        self.recip_lut = int16_lut(lambda v: ft(1.0) / (ft(1.0) + v), 0.0, 1.0, ft)
        return [ctx.input_shape(0)]

    def eval(self, inputs):
        from edgerun.ops.fixedpoint import multiply_by_quantized_multiplier

        x = inputs[0].astype(np.int64)
        diff = x - x.max(axis=-1, keepdims=True)
        scaled = np.asarray(multiply_by_quantized_multiplier(diff, self.mult, self.shift), np.int64)
        sym = np.clip(scaled + 32767, -32768, 32767)
        e = lut_lookup(sym, self.exp_lut)
        total = e.sum(axis=-1, keepdims=True)
        # CountLeadingZeros of the uint32 sum
        headroom = 32 - np.floor(np.log2(np.maximum(total, 1))).astype(np.int64) - 1
        shifted = ((total << (headroom - 1)) + (1 << 13)) >> 14
        sym_sum = np.clip(shifted - ((1 << 15) + (1 << 16)), -32768, 32767)
        recip = lut_lookup(sym_sum, self.recip_lut)
        right = 31 - headroom
        y = (e * recip + (np.int64(1) << (right - 1))) >> right
        return [np.clip(y, 0, 32767).astype(np.int16)]


@register("ADD", "int16")
@register("SUB", "int16")
@register("MUL", "int16")
class Binary16(Kernel):
    """int16 ADD / SUB (general scales, ``pot_scale_int16`` false: inputs shifted left 15 bits onto the
    common scale 2*max(s1, s2), as the int8 rule with 20 bits) and MUL (``(q1 - z1)(q2 - z2)`` requantized),
    same-shape or broadcast operands."""

    def prepare(self):
        from edgerun.ops.elementwise import _rescale_to_common

        ctx = self.ctx
        a, b, y = ctx.input(0), ctx.input(1), ctx.output(0)
        if b.dtype != "int16" or y.dtype != "int16":
            raise ctx.fail(f"int16 binary op with {b.dtype} / {y.dtype} operands")
        self.op = ctx.model.op_code(ctx.op).builtin
        self.s1, self.z1 = qparams(a)
        self.s2, self.z2 = qparams(b)
        self.so, self.zo = qparams(y)
        if self.op != "MUL" and ctx.options.get("pot_scale_int16", True):
            raise ctx.fail("int16 ADD/SUB with power-of-two scales (pot_scale_int16) is not supported")
        f32 = np.float32
        if self.op == "MUL":
            self.mo = quantize_multiplier(float(f32(self.s1) * f32(self.s2) / f32(self.so)))
        else:
            twice_max, self.m1, self.m2 = _rescale_to_common(self.s1, self.s2, 15)
            self.mo = quantize_multiplier(twice_max / float(f32(1 << 15) * f32(self.so)))
        act = ctx.options.get("fused_activation_function", 0)
        self.lo, self.hi = quantized_activation_range(act, self.so, self.zo, "int16")
        return [tuple(np.broadcast_shapes(ctx.input_shape(0), ctx.input_shape(1)))]

    def eval(self, inputs):
        from edgerun.ops.fixedpoint import multiply_by_quantized_multiplier as mbqm

        a = inputs[0].astype(np.int64) - self.z1
        b = inputs[1].astype(np.int64) - self.z2
        if self.op == "MUL":
            v = np.asarray(mbqm(a * b, *self.mo), np.int64)
        else:
            x1 = np.asarray(mbqm(a << 15, *self.m1), np.int64)
            x2 = np.asarray(mbqm(b << 15, *self.m2), np.int64)
            v = np.asarray(mbqm(x1 + x2 if self.op == "ADD" else x1 - x2, *self.mo), np.int64)
        y = np.clip(v + self.zo, self.lo, self.hi)
        return [y.astype(np.int16)]
