"""SOFTMAX, LOG_SOFTMAX, LOGISTIC, TANH, LEAKY_RELU, PRELU, HARD_SWISH (float32, int8).

The int8 kernels follow the kernels LiteRT's reference resolver (BUILTIN_REF) registers, bit for bit:

* LOGISTIC, TANH: a 256-entry table built in prepare from float32 math (TFLite ``LUTPopulate``):
  ``q_out = clamp(round_half_away(f(s_in * (q - zp_in)) / s_out) + zp_out)``.
* SOFTMAX: gemmlowp fixed point. Differences to the row maximum are scaled by beta * s_in into
  Q5.26, exponentiated by ``exp_on_negative_values``, summed in Q12.19 and divided through a
  fixed-point reciprocal; the output is fixed at scale 1/256, zero point -128.
* LOG_SOFTMAX: the same exponentials, then ``log_x_for_x_greater_than_or_equal_to_1`` of the sum;
  output fixed at scale 16/256, zero point 127.
* LEAKY_RELU, PRELU: two requantization multipliers, one for x >= 0 and one for the alpha branch.
* HARD_SWISH: TFLite's int16 fixed-point pipeline (``reference_ops::HardSwish``).

Multipliers are derived from the float32 scales exactly as the C++ Prepare functions do: where
C++ combines ``float`` scales (``input->params.scale / output->params.scale``) the arithmetic is
float32, where it casts to ``double`` first (softmax) it is float64.
"""

from __future__ import annotations

import math

import numpy as np

from edgerun import native
from edgerun._util import round_half_away
from edgerun.ops.common import (
    INT8_BY_BITS,
    TAKE_CHUNK,
    TableEval,
    bound_arrays,
    chunkable,
    chunked_take,
    int8_table,
    qparams,
    scratch,
    trailing,
)
from edgerun.ops.fixedpoint import (
    INT32_MIN,
    exp_on_negative_values,
    get_reciprocal,
    get_reciprocal_scalar,
    log_x_for_x_greater_than_or_equal_to_1,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rescale,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)
from edgerun.ops.registry import Kernel, register

_F32 = np.float32


def _f32_ratio(*factors_then_divisor: float) -> float:
    """a * b * ... / d evaluated left to right in float32, as C++ does on ``float`` scales."""
    *factors, divisor = factors_then_divisor
    acc = _F32(factors[0])
    for f in factors[1:]:
        acc = _F32(acc * _F32(f))
    return float(_F32(acc / _F32(divisor)))


def _int8_lut(s_in: float, zp_in: int, s_out: float, zp_out: int, fn) -> np.ndarray:
    """TFLite LUTPopulate<int8_t>: a table indexed by the input's uint8 bit pattern."""
    q = np.arange(-128, 128, dtype=np.int64)
    x = _F32(s_in) * (q - zp_in).astype(_F32)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        y = fn(x)
    scaled = round_half_away(y * (_F32(1.0) / _F32(s_out)))
    out = np.clip(scaled + zp_out, -128, 127).astype(np.int8)
    lut = np.empty(256, dtype=np.int8)
    lut[q.astype(np.uint8)] = out
    return lut


# The float32 transforms inside LUTPopulate. libm's tanhf/expf are evaluated here in float64 and
# rounded to float32, i.e. correctly rounded; glibc's are within 1-2 ulp of that, which moves a
# table entry only when f(x) / s_out lies within ~1e-7 of a .5 boundary.
def _tanh_f32(x: np.ndarray) -> np.ndarray:
    return np.tanh(x.astype(np.float64)).astype(_F32)


def _logistic_f32(x: np.ndarray) -> np.ndarray:
    e = np.exp(-x.astype(np.float64)).astype(_F32)
    return (_F32(1.0) / (_F32(1.0) + e)).astype(_F32)


class _LutKernel(TableEval, Kernel):
    """int8 via a 256-entry table from prepare; float32 via ``float_fn``."""

    def prepare(self):
        ctx = self.ctx
        x, y = ctx.input(0), ctx.output(0)
        if x.dtype != y.dtype:
            raise ctx.fail(f"input is {x.dtype} but output is {y.dtype}")
        self.float_elementwise = x.dtype == "float32"  # runtime.plan composes it
        if x.dtype == "int8":
            s_in, zp_in = qparams(x)
            s_out, zp_out = qparams(y)
            self.check_output(s_out, zp_out)
            self.lut = self.unary_table = _int8_lut(s_in, zp_in, s_out, zp_out, self.lut_fn)
        return [ctx.input_shape(0)]

    def check_output(self, scale: float, zero_point: int) -> None:
        pass

    def eval(self, inputs):
        x = inputs[0]
        if x.dtype == np.int8:
            return [self.lookup(self.lut, x)]
        return [self.float_fn(x)]


@register("LOGISTIC", "float32", "int8")
class Logistic(_LutKernel):
    """y = 1 / (1 + exp(-x)). int8 output must be scale 1/256, zero point -128 (LiteRT checks it)."""

    lut_fn = staticmethod(_logistic_f32)

    def check_output(self, scale, zero_point):
        if _F32(scale) != _F32(1.0 / 256) or zero_point != -128:
            raise self.ctx.fail(f"int8 LOGISTIC needs output scale 1/256 and zero point -128, "
                                f"got {scale!r} and {zero_point}")

    @staticmethod
    def float_fn(x):
        # reference_ops::Logistic: exp(x) below -9, 1 above 16.619047, else 1 / (1 + exp(-x))
        with np.errstate(over="ignore"):  # exp overflows only where np.where discards it
            mid = _F32(1.0) / (_F32(1.0) + np.exp(-x))
            y = np.where(x > _F32(16.619047164916992188), _F32(1.0), np.where(x < _F32(-9.0), np.exp(x), mid))
        return y.astype(_F32)


@register("TANH", "float32", "int8")
class Tanh(_LutKernel):
    """y = tanh(x). The spec's int8 output is scale 1/128, zero point 0; like LiteRT, the table
    accepts any output quantization."""

    lut_fn = staticmethod(_tanh_f32)

    @staticmethod
    def float_fn(x):
        return np.tanh(x).astype(_F32)


# Softmax input differences are scaled into Q5.26 before exp (kScaledDiffIntegerBits in TFLite)
# and the sum of exps is kept in Q12.19 (kAccumulationIntegerBits).
_DIFF_BITS = 5
_ACCUM_BITS = 12


def _softmax_scaling(beta: float, s_in: float, ctx) -> tuple[int, int, int]:
    """TFLite PreprocessSoftmaxScaling + CalculateInputRadius: (multiplier, left_shift, diff_min)."""
    real = min(float(beta) * float(s_in) * (1 << (31 - _DIFF_BITS)), (1 << 31) - 1.0)
    if not real > 1.0:
        raise ctx.fail(f"beta * input scale = {beta * s_in!r} is too small for the int8 kernel "
                       f"(TFLite needs beta * scale * 2^26 > 1)")
    mult, shift = quantize_multiplier(real)
    radius = math.floor(((1 << _DIFF_BITS) - 1) * float(1 << (31 - _DIFF_BITS)) / float(1 << shift))
    return mult, shift, -radius


def _scaled_diffs(x: np.ndarray, mult: int, shift: int, diff_min: int):
    """Row-wise (x - max) scaled into Q5.26; ``valid`` marks the entries TFLite does not skip."""
    x = x.astype(np.int64)
    diff = x - x.max(axis=-1, keepdims=True)
    valid = diff >= diff_min
    # MultiplyByQuantizedMultiplierGreaterThanOne; diff_min keeps diff * 2^shift inside int32
    scaled = saturating_rounding_doubling_high_mul(np.where(valid, diff, 0) << shift, mult)
    return diff, valid, scaled


@register("SOFTMAX", "float32", "int8")
class Softmax(Kernel):
    """y = exp(beta * (x - max)) / sum(exp(beta * (x - max))) over the last axis.

    int8 input gives int8 output (scale 1/256, zero point -128) or int16 output (the kernel
    writes value * 2^16 - 32768); the output quantization stored in the model is not used.

    LiteRT's reference kernel aborts the process (TFLITE_CHECK on the output shift) on an int8
    row whose sum of exponentials reaches 512, e.g. 512 or more entries tied at the maximum;
    here the same fixed-point formula simply continues with the larger shift.
    """

    def prepare(self):
        ctx = self.ctx
        x, y = ctx.input(0), ctx.output(0)
        if len(ctx.input_shape(0)) < 1:
            raise ctx.fail("SOFTMAX needs an input of rank >= 1")
        self.beta = float(ctx.options.get("beta", 0.0))
        if x.dtype == "int8":
            if y.dtype not in ("int8", "int16"):
                raise ctx.fail(f"int8 SOFTMAX writes int8 or int16, not {y.dtype}")
            s_out, zp_out = qparams(y)
            if y.dtype == "int8" and (zp_out != -128 or abs(s_out - 1 / 256) > 0.001 / 256):
                raise ctx.fail(f"int8 SOFTMAX needs output scale 1/256 and zero point -128, "
                               f"got {s_out!r} and {zp_out}")
            s_in, _ = qparams(x)
            self.mult, self.shift, self.diff_min = _softmax_scaling(self.beta, s_in, ctx)
            self.out_dtype = np.dtype(y.dtype)
            # Everything up to the row sum depends only on the int8 difference max - x (0..255):
            # tables indexed by it hold the Q0.31 exponential (0 where TFLite skips the entry,
            # which makes the final product 0, i.e. the output minimum) and its Q12.19 summand.
            d = -np.arange(256, dtype=np.int64)
            _, valid, scaled = _scaled_diffs(d, self.mult, self.shift, self.diff_min)
            exps = exp_on_negative_values(scaled, _DIFF_BITS)
            self.exp_table = np.where(valid, exps, 0)
            self.sum_table = np.where(valid, rescale(exps, 0, _ACCUM_BITS), 0)
            info = np.iinfo(self.out_dtype)
            self.qmin, self.qmax = int(info.min), int(info.max)
            self.exp_offset = 31 - 8 * self.out_dtype.itemsize
            shape = ctx.input_shape(0)
            self.rows = int(np.prod(shape[:-1], dtype=np.int64))
        elif x.dtype != y.dtype:
            raise ctx.fail(f"input is {x.dtype} but output is {y.dtype}")
        return [ctx.input_shape(0)]

    def eval(self, inputs):
        x = inputs[0]
        if x.dtype == np.float32:
            e = np.exp((x - x.max(axis=-1, keepdims=True)) * _F32(self.beta))
            return [(e / e.sum(axis=-1, keepdims=True, dtype=_F32)).astype(_F32)]
        # max - x wraps in int8 but its bit pattern, read as uint8, is the true 0..255 difference
        idx = np.subtract(x.max(axis=-1, keepdims=True), x).view(np.uint8)
        exps = self.exp_table[idx]  # Q0.31, >= 0
        # sum in Q12.19 with int32 wrap-around, as the C++ accumulator
        if self.rows == 1:  # one row: the per-row arithmetic on Python ints
            total = int(self.sum_table[idx].sum())
            recip, bits_over_unit = get_reciprocal_scalar(((total + (1 << 31)) & 0xFFFFFFFF) - (1 << 31),
                                                          _ACCUM_BITS)
            exponent = bits_over_unit + self.exp_offset
            if exponent <= 31:  # both roundings in one shift (see below); no int64 overflow
                out = exps * recip
                out += (1 << 30) + (((1 << exponent) >> 1) << 31)
                out >>= 31 + exponent
                out += self.qmin
                np.minimum(out, self.qmax, out=out)
                return [out.astype(self.out_dtype)]
            half = (1 << exponent) >> 1
        else:
            total = self.sum_table[idx].sum(axis=-1, keepdims=True)
            total = ((total + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
            if self.rows <= 16:
                pairs = [get_reciprocal_scalar(int(t), _ACCUM_BITS) for t in total.reshape(-1)]
                recip = np.array([p[0] for p in pairs], np.int64).reshape(total.shape)
                exponent = np.array([p[1] for p in pairs], np.int64).reshape(total.shape) + self.exp_offset
            else:
                recip, bits_over_unit = get_reciprocal(total, _ACCUM_BITS)
                exponent = bits_over_unit + self.exp_offset
            half = (np.int64(1) << exponent) >> 1
        # recip (in (0.5, 1] as Q0.31) and exps are non-negative, so SRDHM is (a*b + 2^30) >> 31
        # and RoundingDivideByPOT is (v + 2^(e-1)) >> e; exponent >= 15 since the sum is >= 1.
        # As floor(floor(a / 2^31) + h) / 2^e) == floor((a + h*2^31) / 2^(31+e)), the two shifts
        # merge into one when h*2^31 leaves room in int64 (e <= 31: a row sum below 512).
        out = exps * recip
        out += 1 << 30
        out >>= 31
        out += half
        out >>= exponent
        out += self.qmin
        np.minimum(out, self.qmax, out=out)
        return [out.astype(self.out_dtype)]


    #: rows up to this many values run on Python ints in the invoke plan (numpy's per-call cost
    #: is larger than the arithmetic there)
    PLAN_MAX_ROW = 128

    def compile(self, ins, outs):
        """The invoke plan's bound call for one short int8 row: the same fixed-point steps as
        ``eval`` on Python ints (tables as lists, the reciprocal cached per row sum)."""
        x, out = ins[0], outs[0]
        if (x is None or out is None or x.dtype != np.int8 or self.rows != 1
                or x.size > self.PLAN_MAX_ROW or out.shape != x.shape):
            return None
        exp_list, sum_list = self.exp_table.tolist(), self.sum_table.tolist()
        qmin, qmax, exp_offset = self.qmin, self.qmax, self.exp_offset
        flat, dst = x.reshape(-1), out.reshape(-1)
        recips: dict[int, tuple[int, int]] = {}

        def call():
            xs = flat.tolist()
            m = max(xs)
            total = 0
            for v in xs:
                total += sum_list[m - v]
            total = ((total + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)  # the int32 accumulator
            r = recips.get(total)
            if r is None:
                if len(recips) > 4096:
                    recips.clear()
                r = recips[total] = get_reciprocal_scalar(total, _ACCUM_BITS)
            recip, bits_over_unit = r
            e = bits_over_unit + exp_offset
            # SRDHM then RoundingDivideByPOT on non-negative values, merged into one shift (exact
            # on Python ints whatever the exponent; see eval)
            add, sh = (1 << 30) + (((1 << e) >> 1) << 31), 31 + e
            dst[:] = [min(((exp_list[m - v] * recip + add) >> sh) + qmin, qmax) for v in xs]
        return call


@register("LOG_SOFTMAX", "float32", "int8")
class LogSoftmax(Kernel):
    """y = x - max - log(sum(exp(x - max))) over the last axis; int8 output scale 16/256, zero point 127."""

    _OUT_BITS = 4  # output Q4.27 before the final downscale

    def prepare(self):
        ctx = self.ctx
        x, y = ctx.input(0), ctx.output(0)
        if x.dtype != y.dtype:
            raise ctx.fail(f"input is {x.dtype} but output is {y.dtype}")
        if x.dtype == "int8":
            s_out, zp_out = qparams(y)
            if _F32(s_out) != _F32(16.0 / 256) or zp_out != 127:
                raise ctx.fail(f"int8 LOG_SOFTMAX needs output scale 16/256 and zero point 127, "
                               f"got {s_out!r} and {zp_out}")
            s_in, _ = qparams(x)
            self.mult, self.shift, self.diff_min = _softmax_scaling(1.0, s_in, ctx)
            # PreprocessLogSoftmaxScalingExp: the inverse of the input scaling, as a right shift
            reverse = float(1 << (31 - self.shift)) / float(self.mult)
            self.rev_mult, rev_shift = quantize_multiplier(reverse)
            if not 0.0 < reverse < 1.0 or rev_shift > 0:
                raise ctx.fail(f"input scale {s_in!r} is out of range for the int8 kernel")
            self.rev_shift = rev_shift  # <= 0
        return [ctx.input_shape(0)]

    def eval(self, inputs):
        x = inputs[0]
        if x.dtype == np.float32:
            d = x - x.max(axis=-1, keepdims=True)
            return [(d - np.log(np.exp(d).sum(axis=-1, keepdims=True, dtype=_F32))).astype(_F32)]
        diff, valid, scaled = _scaled_diffs(x, self.mult, self.shift, self.diff_min)
        exps = exp_on_negative_values(scaled, _DIFF_BITS)
        total = np.where(valid, rescale(exps, 0, _ACCUM_BITS), 0).sum(axis=-1, keepdims=True)
        total = ((total + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
        log_sum = log_x_for_x_greater_than_or_equal_to_1(total, _ACCUM_BITS, _DIFF_BITS)  # Q5.26
        adjusted_diff_min = np.maximum(
            self.diff_min - 1,
            multiply_by_quantized_multiplier(log_sum + INT32_MIN, self.rev_mult, self.rev_shift))
        keep = diff > adjusted_diff_min
        out = rounding_divide_by_pot(scaled - log_sum, 31 - _DIFF_BITS - self._OUT_BITS) + 127
        return [np.where(keep, np.clip(out, -128, 127), -128).astype(np.int8)]


def _same_dtype(ctx) -> str:
    x, y = ctx.input(0), ctx.output(0)
    if x.dtype != y.dtype:
        raise ctx.fail(f"input is {x.dtype} but output is {y.dtype}")
    return x.dtype


@register("LEAKY_RELU", "float32", "int8")
class LeakyRelu(TableEval, Kernel):
    """y = x if x > 0 else alpha * x. int8: (x - zp_in) times s_in/s_out or alpha*s_in/s_out,
    tabulated over the 256 input values in prepare (one lookup per invoke)."""

    def prepare(self):
        ctx = self.ctx
        self.alpha = float(ctx.options.get("alpha", 0.0))
        self.float_elementwise = ctx.input(0).dtype == "float32"  # runtime.plan composes it
        if _same_dtype(ctx) == "int8":
            s_in, self.zp_in = qparams(ctx.input(0))
            s_out, self.zp_out = qparams(ctx.output(0))
            m_alpha, self.shift_alpha = quantize_multiplier(_f32_ratio(s_in, self.alpha, s_out))
            self.sign_alpha = -1 if m_alpha < 0 else 1
            self.mult_alpha = abs(m_alpha)
            self.mult_id, self.shift_id = quantize_multiplier(_f32_ratio(s_in, s_out))
            self.lut = self.unary_table = int8_table(self.exact(INT8_BY_BITS))
        return [ctx.input_shape(0)]

    def exact(self, x: np.ndarray) -> np.ndarray:
        """reference_ops::QuantizeLeakyRelu on int8 values."""
        v = x.astype(np.int64) - self.zp_in
        pos = multiply_by_quantized_multiplier(v, self.mult_id, self.shift_id)
        neg = self.sign_alpha * multiply_by_quantized_multiplier(v, self.mult_alpha, self.shift_alpha)
        return np.clip(np.where(v >= 0, pos, neg) + self.zp_out, -128, 127).astype(np.int8)

    def eval(self, inputs):
        x = inputs[0]
        if x.dtype == np.float32:
            return [np.where(x > 0, x, x * _F32(self.alpha)).astype(_F32)]
        return [self.lookup(self.lut, x)]


@register("PRELU", "float32", "int8")
class Prelu(TableEval, Kernel):
    """y = x if x >= 0 else alpha * x, alpha (input 1) broadcast against x (e.g. one per channel).

    int8: x >= 0 uses s_in/s_out; otherwise (x - zp_in) * (alpha - zp_alpha) times
    s_in*s_alpha/s_out. alpha must be int8 with per-tensor quantization.

    With a constant alpha the int8 output depends only on the pair (alpha, x): prepare tabulates
    the exact arithmetic for every distinct alpha value over the 256 x values (one 256-entry row
    per value) and eval looks up ``table[row(alpha) << 8 | x_bits]``.
    """

    def prepare(self):
        ctx = self.ctx
        dt = _same_dtype(ctx)
        alpha = ctx.input(1)
        if alpha is None or alpha.dtype != dt:
            raise ctx.fail(f"PRELU needs a {dt} alpha tensor")
        shape, ashape = ctx.input_shape(0), ctx.input_shape(1)
        try:
            out = np.broadcast_shapes(shape, ashape)
        except ValueError:
            out = None
        if out != tuple(shape):
            raise ctx.fail(f"alpha shape {list(ashape)} does not broadcast to input shape {list(shape)}")
        if dt == "int8":
            if alpha.quant is not None and alpha.quant.per_axis:
                raise ctx.fail("PRELU alpha must be quantized per tensor")
            s_in, self.zp_in = qparams(ctx.input(0))
            s_alpha, self.zp_alpha = qparams(alpha)
            s_out, self.zp_out = qparams(ctx.output(0))
            self.m1, self.s1 = quantize_multiplier(_f32_ratio(s_in, s_out))
            self.m2, self.s2 = quantize_multiplier(_f32_ratio(s_in, s_alpha, s_out))
            self.lut = self.row_offsets = None
            a = ctx.const(1)
            if a is not None:
                a = np.asarray(a, np.int8)
                # edgerun.native's loop where it applies: then no lookup tables (the plan still
                # composes a single alpha's 256-entry table with neighbouring table ops)
                self.native = self._prepare_native(a, tuple(shape))
                if a.size and (a == a.flat[0]).all():  # one alpha value: a 256-entry table
                    self.unary_table = int8_table(self.exact(INT8_BY_BITS, a.flat[0]))
                    if self.native is None:
                        self.lut = self.unary_table
                elif self.native is None:  # one 256-entry row per distinct alpha value
                    values, rows = np.unique(a, return_inverse=True)
                    self.lut = int8_table(self.exact(INT8_BY_BITS[None, :], values[:, None])).reshape(-1)
                    self.row_offsets = rows.reshape(a.shape).astype(np.uint16) << 8
                    self._compact(rows.reshape(a.shape), int(np.prod(shape)))
        return [tuple(shape)]

    #: a constant alpha per channel (the last axis) runs edgerun.native's loop where there is one
    NATIVE = True
    native = None

    def _prepare_native(self, a: np.ndarray, shape: tuple):
        """``run(x, out)`` of edgerun.native's PRELU loop, kept only when it equals ``exact`` on
        every input value in every channel; None where it does not apply."""
        c = shape[-1] if shape else 0
        if (not self.NATIVE or not c or a.size not in (1, c) or (a.size == c and a.shape[-1:] != (c,))
                or math.prod(shape) == 0):
            return None
        lib = native.library()
        if lib is None:
            return None
        q = []
        for m, sh in ((self.m1, self.s1), (self.m2, self.s2)):
            m, sh = int(m), int(sh)
            if not (0 <= m < (1 << 31) and -31 <= sh <= 30):
                return None
            q += [max(sh, 0), m, max(-sh, 0)]
        q = np.array(q, np.int32)
        alpha = np.ascontiguousarray(np.broadcast_to(a.reshape(-1), (c,)).astype(np.int32) - self.zp_alpha)
        fn = lib.edgerun_prelu_i8
        tail = (alpha.ctypes.data, self.zp_in, self.zp_out, q.ctypes.data)
        self._native_keep = (alpha, q)

        def run(x, out):  # C-contiguous int8 arrays of the input's size (the last axis c)
            fn(x.ctypes.data, out.ctypes.data, x.size // c, c, *tail)

        # every input value in every channel, 16 values at a time (small transient arrays)
        got = np.empty((16, c), np.int8)
        for v0 in range(0, 256, 16):
            x = np.repeat(INT8_BY_BITS[v0:v0 + 16], c).reshape(16, c)
            run(x, got)
            if not np.array_equal(got, self.exact(x, alpha[None, :] + self.zp_alpha)):
                return None
        return run

    #: inputs of at most this many values take the compact table (see ``_compact``) when it
    #: holds at most COMPACT_RATIO of the rows' bytes: its lookup is three numpy calls more
    #: (two more gathers), which larger tensors pay per value. On iris landmark int8 34 of 53
    #: layers, 0.37 MB less; with the rows layers bound (BIND_ROWS) CPU +0.5 %
    COMPACT_MAX_VALUES = 8192
    COMPACT_RATIO = 0.75
    compact = None
    #: layers on the 256-entry rows (up to TAKE_CHUNK values) bind their index add and take
    BIND_ROWS = True

    def _compact(self, rows: np.ndarray, size: int) -> None:
        """Replace the 256-entry rows by their negative parts. Only ``x < zp_in`` depends on
        alpha; ``x >= zp_in`` gives the same value in every row. So the table keeps, per row,
        the ``L = zp_in + 128`` values of ``x < zp_in`` and a 0 (one row of L + 1 values), and
        one shared 256-entry table ``pos`` holds the positive results (0 where ``x < zp_in``):
        ``y = neg[row * (L + 1) + min(x + 128, L)] + pos[x]``, one of the two terms 0 (int8
        sums without overflow). Iris landmark int8: 892 -> ~520 KB of tables."""
        nrows = int(rows.max(initial=0)) + 1
        span = self.zp_in + 129  # L + 1
        if (size > self.COMPACT_MAX_VALUES or nrows * span >= 1 << 16
                or nrows * span + 256 > self.COMPACT_RATIO * nrows * 256):
            return
        full = self.lut.reshape(nrows, 256)  # bits order: column b holds x = int8(b)
        value_order = full[:, (np.arange(256) + 128) % 256]  # column x + 128
        neg = np.zeros((nrows, span), np.int8)
        neg[:, :span - 1] = value_order[:, :span - 1]
        pos = full[0].copy()
        pos[INT8_BY_BITS < self.zp_in] = 0
        # bits of x -> min(x + 128, L): the column in a row (L: the 0 past its negative part)
        col = np.minimum(INT8_BY_BITS.astype(np.int64) + 128, span - 1).astype(np.uint16)
        self.compact = (neg.reshape(-1), pos, rows.astype(np.uint16) * span, col)
        self.lut = self.row_offsets = None

    def _compact_call(self, x, out, idx, yp):
        """The compact table's lookup of ``x`` into ``out`` on work arrays ``idx`` (uint16)
        and ``yp`` (int8) of ``x``'s shape (``out`` may be ``x``'s memory: ``x`` is read before
        ``out`` is written)."""
        neg, pos, offs, col = self.compact
        xb = x.view(np.uint8)
        pos.take(xb, None, yp, "clip")
        col.take(xb, None, idx, "clip")
        np.add(idx, offs, out=idx)
        neg.take(idx, None, out, "clip")
        np.add(out, yp, out=out)
        return out

    def compile(self, ins, outs):
        """A bound call for the compact table (its work arrays in the plan's workspace), or
        None (eval)."""
        if ins is None or not ins or ins[0] is None or outs[0] is None:
            return None
        x, out = ins[0], outs[0]
        if (not isinstance(x, np.ndarray) or x.dtype != np.int8 or out.shape != x.shape or out.dtype != np.int8
                or not out.flags.c_contiguous or not x.flags.c_contiguous):
            return None
        shape = x.shape
        if self.native is not None:
            run = self.native
            return lambda: run(x, out)
        if self.compact is None:
            if (not self.BIND_ROWS or self.row_offsets is None or x.size > TAKE_CHUNK
                    or not trailing(self.row_offsets.shape, shape)):
                return None
            # the 256-entry rows: eval's index add and take, without its Python around them (the
            # index in eval's scratch buffer, shared with the binary ops': as a workspace array
            # it had added 64 KB beside it on iris landmark)
            lut, offs, xb = self.lut, self.row_offsets, x.view(np.uint8)
            take, add, u16 = lut.take, np.add, np.uint16

            def call_rows():
                idx = scratch("prelu.idx", shape, u16)
                add(xb, offs, out=idx)
                take(idx, None, out, "clip")
            return call_rows
        neg, pos, offs, col = self.compact
        ntake, ptake, ctake, add = neg.take, pos.take, col.take, np.add
        xb = x.view(np.uint8)

        def build(idx, yp):
            def call():
                ptake(xb, None, yp, "clip")
                ctake(xb, None, idx, "clip")
                add(idx, offs, out=idx)
                ntake(idx, None, out, "clip")
                add(out, yp, out=out)
            return call
        return bound_arrays([("prelu.idx", shape, np.uint16), ("prelu.pos", shape, np.int8)], build)

    def exact(self, x: np.ndarray, alpha) -> np.ndarray:
        """reference_ops::BroadcastPrelu4DSlow on int8 values (x and alpha broadcast)."""
        v = np.asarray(x).astype(np.int64) - self.zp_in
        a = np.asarray(alpha).astype(np.int64) - self.zp_alpha
        pos = multiply_by_quantized_multiplier(v, self.m1, self.s1)
        neg = multiply_by_quantized_multiplier(v * a, self.m2, self.s2)
        return np.clip(np.where(v >= 0, pos, neg) + self.zp_out, -128, 127).astype(np.int8)

    def eval(self, inputs):
        x, alpha = inputs[0], inputs[1]
        if x.dtype == np.float32:
            return [np.where(x >= 0, x, x * alpha).astype(_F32)]
        if self.native is not None and x.dtype == np.int8:
            x = np.ascontiguousarray(x)
            out = self._out
            if out is None or out.shape != x.shape or not out.flags.c_contiguous:
                out = np.empty(x.shape, np.int8)
            self.native(x, out)
            return [out]
        if self.compact is not None:
            out = self._out
            if out is None or out.shape != x.shape or not out.flags.c_contiguous:
                out = np.empty(x.shape, np.int8)
            return [self._compact_call(x, out, scratch("prelu.idx", x.shape, np.uint16),
                                       scratch("prelu.pos", x.shape, np.int8))]
        if self.lut is None:  # alpha computed at run time
            return [self.exact(x, alpha)]
        if self.row_offsets is None:
            return [self.lookup(self.lut, x)]
        out = self._out
        if (out is not None and out.shape == x.shape and out.size > TAKE_CHUNK
                and trailing(self.row_offsets.shape, x.shape) and chunkable(out, x)):
            chunked_take(self.lut, out, x, self.row_offsets)
            return [out]
        idx = np.add(x.view(np.uint8), self.row_offsets, out=scratch("prelu.idx", x.shape, np.uint16))
        out = self._out
        if out is None or out.shape != x.shape:
            out = None
        return [np.take(self.lut, idx, mode="clip", out=out)]


def _srdhm16(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul on int16."""
    ab = a * b
    s = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    r = np.where(s >= 0, s >> 15, -((-s) >> 15))
    return np.where((a == -32768) & (b == -32768), 32767, r)


def _sdhm16(a, b):
    """TFLite SaturatingDoublingHighMul on int16 (truncates toward zero)."""
    ab = a * b
    r = np.where(ab >= 0, ab >> 15, -((-ab) >> 15))
    return np.where((a == -32768) & (b == -32768), 32767, r)


def _sat_left_shift16(v, amount: int):
    return np.clip(v * (1 << amount), -32768, 32767)


def _int16_multiplier(m32: int) -> int:
    """TFLite DownScaleInt32ToInt16Multiplier."""
    if m32 >= (1 << 31) - 1 - (1 << 15):
        return 32767
    return (m32 + (1 << 15)) >> 16


@register("HARD_SWISH", "float32", "int8")
class HardSwish(TableEval, Kernel):
    """y = x * relu6(x + 3) / 6. int8 runs TFLite's int16 fixed-point pipeline: the input on a
    2^7 finer scale, a "reluish" factor in [0, 1] and the output multiplier, tabulated over the
    256 input values in prepare (one lookup per invoke)."""

    def prepare(self):
        ctx = self.ctx
        self.float_elementwise = ctx.input(0).dtype == "float32"  # runtime.plan composes it
        if _same_dtype(ctx) == "int8":
            s_in, self.zp_in = qparams(ctx.input(0))
            s_out, self.zp_out = qparams(ctx.output(0))
            hires = _F32(_F32(1.0 / 128.0) * _F32(s_in))
            m, self.out_exp = quantize_multiplier(float(_F32(hires / _F32(s_out))))
            if self.out_exp > 0:
                raise ctx.fail(f"input/output scale ratio {s_in / s_out!r} is too large for int8 HARD_SWISH")
            self.out_m16 = _int16_multiplier(m)
            m, self.reluish_exp = quantize_multiplier(float(_F32(hires / _F32(3.0 / 32768.0))))
            self.reluish_m16 = _int16_multiplier(m)
            self.lut = self.unary_table = int8_table(self.exact(INT8_BY_BITS))
        return [ctx.input_shape(0)]

    def eval(self, inputs):
        x = inputs[0]
        if x.dtype == np.float32:
            return [(x * np.minimum(_F32(6), np.maximum(_F32(0), x + _F32(3))) / _F32(6)).astype(_F32)]
        return [self.lookup(self.lut, x)]

    def exact(self, x: np.ndarray) -> np.ndarray:
        """reference_ops::HardSwish<int8_t> on int8 values."""
        hires = (x.astype(np.int64) - self.zp_in) * (1 << 7)
        preshift_out = _srdhm16(hires, self.out_m16)
        r = hires
        if self.reluish_exp > 0:
            r = _sat_left_shift16(r, self.reluish_exp - 1)
        r = _srdhm16(r, self.reluish_m16)
        if self.reluish_exp > 0:
            r = _sat_left_shift16(r, 1)
        elif self.reluish_exp < 0:
            r = rounding_divide_by_pot(r, -self.reluish_exp)
        r = (r + (1 << 15)) >> 1  # [-1, 1] -> [0, 1]
        out = rounding_divide_by_pot(_sdhm16(r, preshift_out), -self.out_exp)
        out = ((out + self.zp_out + (1 << 15)) & 0xFFFF) - (1 << 15)  # int16 addition
        return np.clip(out, -128, 127).astype(np.int8)
