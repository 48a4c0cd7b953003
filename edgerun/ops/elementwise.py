"""Elementwise ops: binary ADD, SUB, MUL, DIV, SQUARED_DIFFERENCE, MAXIMUM, MINIMUM and unary ABS,
SQRT, RSQRT, EXP, bit-exact with LiteRT's reference kernels.

Binary ops broadcast numpy-style (right-aligned, size-1 dimensions stretch), to any rank; LiteRT's
kernels stop at 6-D. ADD, SUB, MUL and DIV carry a fused activation.

float32 follows the C++ kernels operation for operation, including their clamp of the arithmetic
ops to the finite float range (``ActivationFunctionWithMinMax`` with ``lowest()``/``max()`` when
there is no activation, so an overflow gives +-FLT_MAX, not inf) and their NaN handling in
MAXIMUM/MINIMUM (``a > b ? a : b``).

int8 (and uint8 for ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM) is the affine scheme
``real = s * (q - z)``. Each op's per-element arithmetic is written once,
vectorized over int64 arrays that hold int32 values (``_Int8*._compute``); because an int8 op is a
function of at most two int8 values, ``prepare`` evaluates that definition on all 256 (unary) or
256 x 256 (binary) inputs and ``eval`` is a table lookup. Per op (s1, s2, so = input and output
scales, z = zero points, MBQM = MultiplyByQuantizedMultiplier, double rounding):

* ADD/SUB: both inputs are shifted left 20 bits and rescaled to the common scale 2*max(s1, s2),
  ``x_i = MBQM((q_i - z_i) << 20, s_i / (2 max(s1, s2)))``, then
  ``out = MBQM(x1 +- x2, 2 max(s1, s2) / (2^20 so)) + zo``, clamped to the activation range;
* MUL: ``out = MBQM((q1 - z1)(q2 - z2), s1 s2 / so) + zo`` (the real multiplier in float32);
* DIV: ``(q1 - z1) / (q2 - z2)`` via gemmlowp's Newton-Raphson reciprocal of the divisor
  (``GetReciprocal``) and a headroom shift, scaled by ``s1 / (s2 so)``; a zero divisor raises.
  For small dividends over large divisors the final rounding shift reaches 32 or more; LiteRT's
  x86 build then shifts by that amount mod 32 and saturates instead of giving ~0. That is
  reproduced (``_rounding_divide_by_pot_x86``), since bit-exactness is the contract;
* SQUARED_DIFFERENCE: as SUB with a left shift of 7, squared, output multiplier
  ``(2 max(s1, s2))^2 / (2^14 so)``; no activation;
* MAXIMUM/MINIMUM compare the raw int8 values (the quantization is taken to be shared);
* ABS: ``|q - zi|`` rescaled by ``si / so`` (or copied when the scales are equal);
* SQRT: dequantized in float32, ``sqrt``, ``(int)(y / so) + zo`` (truncation, as LiteRT does);
* RSQRT: gemmlowp's fixed-point inverse square root of ``q - zi`` (20 extra bits), rescaled by
  ``1 / (sqrt(si) so)``;
* EXP: LiteRT's int8 lookup table, ``round(exp(si (q - zi)) / so) + zo``.

SQRT and RSQRT of a value below the input zero point raise, as LiteRT fails the invoke.
"""

from __future__ import annotations

import math

import numpy as np

from edgerun import native
from edgerun.errors import InputMismatchError, ModelFormatError
from edgerun.ops.common import (
    QRANGE,
    TAKE_CHUNK,
    TableEval,
    bound_arrays,
    chunkable,
    chunked_take,
    current_workspace,
    qparams,
    quantized_activation_range,
    round_half_away,
    scratch,
    trailing,
)
from edgerun.ops.fixedpoint import (
    count_leading_sign_bits32,
    get_inv_sqrt_quantized_multiplier_exp,
    get_reciprocal,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
    wrap32,
)
from edgerun.ops.quantize import trunc_to_int32
from edgerun.ops.registry import Kernel, register
from edgerun.schema.tflite import Activation

_F32 = np.float32
_FLT_MAX = float(np.finfo(np.float32).max)

#: every int8 value, ordered by its uint8 bit pattern (the index of a lookup table)
_INT8_BY_BITS = np.arange(256, dtype=np.uint8).view(np.int8).astype(np.int64)
_BY_BITS = {"int8": _INT8_BY_BITS, "uint8": np.arange(256, dtype=np.int64)}

_FUSED = ("ADD", "SUB", "MUL", "DIV")
_FLOAT_ACT = {Activation.NONE: (-_FLT_MAX, _FLT_MAX), Activation.RELU: (0.0, _FLT_MAX),
              Activation.RELU6: (0.0, 6.0), Activation.RELU_N1_TO_1: (-1.0, 1.0)}
_INT32_ACT = {Activation.NONE: None, Activation.RELU: (0, QRANGE["int32"][1]),
              Activation.RELU6: (0, 6), Activation.RELU_N1_TO_1: (-1, 1)}


def _mbqm(x, multiplier, shift):
    return multiply_by_quantized_multiplier(x, multiplier, shift)


def broadcast_shape(ctx) -> tuple[int, ...]:
    """Output shape of a binary op: numpy broadcasting of the two input shapes."""
    s1, s2 = ctx.input_shape(0), ctx.input_shape(1)
    try:
        return tuple(int(d) for d in np.broadcast_shapes(s1, s2))
    except ValueError:
        raise ModelFormatError(f"{ctx.name} (node {ctx.index}): input shapes {list(s1)} and {list(s2)} "
                               "do not broadcast") from None


def _activation(ctx) -> int:
    act = int(ctx.options.get("fused_activation_function", Activation.NONE)) if ctx.name in _FUSED else 0
    if act not in _FLOAT_ACT:
        raise ctx.fail(f"fused activation {act} is not supported (LiteRT supports NONE, RELU, RELU6, "
                       "RELU_N1_TO_1 here)")
    return act


def _check_binary_types(ctx) -> None:
    a, b, o = ctx.input(0), ctx.input(1), ctx.output(0)
    if not (a.dtype == b.dtype == o.dtype):
        raise ctx.fail(f"input and output types differ ({a.dtype}, {b.dtype} -> {o.dtype})")


# --- binary ops: float32 and int32 ------------------------------------------------------------

def _maximum(a, b):
    return np.where(a > b, a, b)


def _minimum(a, b):
    return np.where(a < b, a, b)


def _squared_difference(a, b):
    d = np.subtract(a, b)
    return np.multiply(d, d)


_PLAIN = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide,
          "SQUARED_DIFFERENCE": _squared_difference, "MAXIMUM": _maximum, "MINIMUM": _minimum}


@register("ADD", "float32", "int32")
@register("SUB", "float32", "int32")
@register("MUL", "float32", "int32")
@register("DIV", "float32")
@register("SQUARED_DIFFERENCE", "float32")
@register("MAXIMUM", "float32", "int32")
@register("MINIMUM", "float32", "int32")
class PlainBinary(Kernel):
    """float32 / int32 arithmetic in the input dtype, then the fused activation as a clamp.

    float32 ADD/SUB/MUL/DIV always clamp to [lowest, max] of float32 (LiteRT does the same);
    int32 arithmetic wraps on overflow like the C++ kernels.
    """

    def prepare(self):
        ctx = self.ctx
        _check_binary_types(ctx)
        self.fn = _PLAIN[ctx.name]
        act = _activation(ctx)
        self.is_float = ctx.input(0).dtype == "float32"
        if self.is_float:
            self.clamp = _FLOAT_ACT[act] if ctx.name in _FUSED else None
        else:
            self.clamp = _INT32_ACT[act]
        return [broadcast_shape(ctx)]

    def eval(self, inputs):
        a, b = inputs
        with np.errstate(all="ignore"):
            y = np.asarray(self.fn(a, b))  # rank-0 inputs give a numpy scalar
        if self.clamp is not None:
            y = np.clip(y, *self.clamp, out=y)  # NaN passes through, as std::min/std::max let it
        return [y]


# --- binary ops: int8 ---------------------------------------------------------------------------

class _Int8Binary(TableEval, Kernel):
    """8-bit binary op: the per-element definition ``_compute`` tabulated over all input pairs.

    int8 always; uint8 (the older quantization scheme of many published models) for the ops where
    LiteRT runs the same arithmetic on it.
    """

    def prepare(self):
        ctx = self.ctx
        _check_binary_types(ctx)
        dtype = ctx.input(0).dtype
        qmin, qmax = QRANGE[dtype]
        self.s1, self.z1 = qparams(ctx.input(0))
        self.s2, self.z2 = qparams(ctx.input(1))
        self.so, self.zo = qparams(ctx.output(0))
        for z in (self.z1, self.z2, self.zo):
            if not qmin <= z <= qmax:
                raise ctx.fail(f"zero point {z} is outside the {dtype} range")
        act = _activation(ctx)
        self.lo, self.hi = quantized_activation_range(act, self.so, self.zo, dtype)
        self._prepare_params()
        values = _BY_BITS[dtype]
        self.out_shape = broadcast_shape(ctx)
        self.native = self._prepare_native()
        if self.native is not None:  # edgerun.native's loop: no table, plane or small form
            self.line = self.small = self.table = self.row_offsets = None
            return [self.out_shape]
        self.line = self._prepare_line() if self._line_eligible() else None
        self.small = self._prepare_small() if self.line is None and self._small_eligible() else None
        if self.line is not None or self.small is not None:  # no 64K table (see Int8AddSub)
            self.table = self.row_offsets = None
            return [self.out_shape]
        table = np.clip(self._compute(values[:, None], values[None, :]), self.lo, self.hi)
        self.table = table.astype(ctx.output(0).np_dtype).ravel()  # index: (bits of a) << 8 | bits of b
        b = ctx.const(1)
        if (type(self).eval is _Int8Binary.eval and b is not None and b.size
                and tuple(ctx.input_shape(0)) == self.out_shape and (b == b.flat[0]).all()):
            # a constant second operand: the op is a 256-entry table of the first (runtime.plan)
            self.unary_table = self.table.reshape(256, 256)[:, int(b.flat[0].view(np.uint8))].copy()
        self._prepare_rows()
        return [self.out_shape]

    def _prepare_rows(self) -> None:
        """One constant operand (e.g. per-channel affine weights): the table rows of its distinct
        values only, indexed ``row(constant) << 8 | bits of the other operand`` (one add and one
        take per invoke instead of two index passes and a take in the 64K table)."""
        ctx = self.ctx
        self.row_offsets = None
        if type(self).eval is not _Int8Binary.eval:
            return
        for ci, vi in ((1, 0), (0, 1)):
            c = ctx.const(ci)
            if c is None or not c.size or ctx.const(vi) is not None:
                continue
            if tuple(ctx.input_shape(vi)) != self.out_shape:
                continue
            values, rows = np.unique(np.asarray(c).view(np.uint8), return_inverse=True)
            full = self.table.reshape(256, 256)
            sub = full[values, :] if ci == 0 else full[:, values].T  # (constant value, other operand)
            self.rows_table = np.ascontiguousarray(sub).reshape(-1)
            self.row_offsets = rows.reshape(np.shape(c)).astype(np.uint16) << 8
            self.var_input = vi
            return

    #: outputs up to this many values get a per-node index buffer in the invoke plan
    PLAN_MAX_VALUES = 1 << 14

    def compile(self, ins, outs):
        """The invoke plan's bound call: index = a << 8 | b into the node's own buffer, then one
        ``take``; None (the ``eval`` path) for run-time checks (DIV) or large outputs."""
        if self.native is not None:
            a, b = ins
            out = outs[0]
            if a is None or b is None or not self._native_ok(a, b, out):
                return None
            run = self.native[0]
            return lambda: run(a, b, out)
        if self.line is not None:
            return self._compile_line(ins, outs)
        if self.small is not None:
            return self._compile_small(ins, outs)
        a, b = ins
        out = outs[0]
        if (type(self).eval is not _Int8Binary.eval or a is None or b is None or out is None
                or out.shape != self.out_shape or not out.flags.c_contiguous
                or out.size > self.PLAN_MAX_VALUES):
            return None
        # the index array is a temporary of the call: one buffer of the plan's shared workspace
        # for every binary node (it had been a buffer per node, up to 32 KB each)
        if self.row_offsets is not None:
            xv, rows, add, take = ins[self.var_input].view(np.uint8), self.row_offsets, np.add, self.rows_table.take

            def build_rows(index):
                def call_rows():
                    add(xv, rows, out=index, dtype=np.uint16)
                    take(index, None, out, "clip")
                return call_rows
            return bound_arrays([("binary.index", out.shape, np.uint16)], build_rows)
        av, bv, take = a.view(np.uint8), b.view(np.uint8), self.table.take
        shl, bor = np.left_shift, np.bitwise_or

        def build(index):
            def call():
                shl(av, 8, out=index, dtype=np.uint16)
                bor(index, bv, out=index)
                take(index, None, out, "clip")
            return call
        return bound_arrays([("binary.index", out.shape, np.uint16)], build)

    def _small_eligible(self) -> bool:
        return False

    def _line_eligible(self) -> bool:
        return False

    native = None

    def _prepare_native(self):
        """(call(a, b, out), kept arrays) of edgerun.native's loop for this op, or None (here:
        ops without one)."""

    def _native_ok(self, a, b, out) -> bool:
        return (out is not None and a.shape == b.shape == out.shape == self.out_shape and a.flags.c_contiguous
                and b.flags.c_contiguous and out.flags.c_contiguous and out.dtype == a.dtype == b.dtype)

    def _compile_small(self, ins, outs):
        """The bound call of the small-output form (same-shape operands only). In a small plan
        (MLPerf Tiny-class models, where a few ADDs' tables are little memory and the form's
        extra passes are a large share of the time: ResNet-8 0.80 -> 0.91 ms) the node takes
        the 64K table again, rebuilt from the form (equal to it on every input pair)."""
        from edgerun.ops.conv import SMALL_ARENA_BYTES

        ws = current_workspace()
        if ws is not None and ws.arena_bytes <= SMALL_ARENA_BYTES:
            bits = np.arange(256, dtype=np.uint8)
            self.table = np.ascontiguousarray(self._eval_small(self.small, bits[:, None], bits[None, :])).ravel()
            self.small = None
            return self.compile(ins, outs)
        a, b = ins
        out = outs[0]
        if (a is None or b is None or out is None or not (a.shape == b.shape == out.shape == self.out_shape)
                or not out.flags.c_contiguous):
            return None
        t1, t2, k, tb, yb = self.small
        av, bv, shape = a.view(np.uint8), b.view(np.uint8), out.shape
        add, shr, ge = np.add, np.right_shift, np.greater_equal

        def build(s, j, u, m):
            def call():
                t1.take(av, None, s, "clip")
                t2.take(bv, None, j, "clip")
                add(s, j, out=s)
                shr(s, k, out=j)
                tb.take(j, None, u, "clip")
                ge(s, u, out=m)
                yb.take(j, None, out, "clip")
                add(out, m, out=out, casting="unsafe")
            return call
        # temporaries of this call only: the buffers of the conv calls' keys (no call holds two
        # calls' keys at once), not four more of the plan's own
        return bound_arrays([("conv.cols", shape, np.int32), ("conv.acc", shape, np.int32),
                             ("rq.f64", shape, np.int32), ("rq.sign", shape, np.bool_)], build)

    def _eval_small_op(self, inputs):
        a, b = inputs
        out = self._out
        if out is None or out.shape != self.out_shape or a.shape != b.shape:
            out = None
        return [self._eval_small(self.small, a, b, out)]

    def _prepare_small(self):
        raise NotImplementedError

    def _prepare_params(self) -> None:
        raise NotImplementedError

    def _compute(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The op on int8 values ``a``, ``b`` (int64 arrays), before the activation clamp."""
        raise NotImplementedError

    def eval(self, inputs):
        if self.native is not None:
            a, b = inputs
            out = self._out
            if out is None or out.shape != self.out_shape or not out.flags.c_contiguous:
                out = np.empty(self.out_shape, a.dtype)
            if a.dtype == b.dtype == out.dtype:
                a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
                if self._native_ok(a, b, out):
                    self.native[0](a, b, out)
                    return [out]
            raise InputMismatchError(f"{self.ctx.name} (node {self.ctx.index}): inputs {a.dtype}{list(a.shape)} "
                                     f"and {b.dtype}{list(b.shape)} do not match the model's {list(self.out_shape)}")
        if self.line is not None:
            return self._eval_line_op(inputs)
        if self.small is not None:
            return self._eval_small_op(inputs)
        a, b = inputs
        shape = np.broadcast_shapes(a.shape, b.shape) if a.shape != b.shape else a.shape
        out = self._out
        if out is None or out.shape != shape:
            out = None
        if out is not None and out.size > TAKE_CHUNK:
            if self.row_offsets is not None:
                xv = inputs[self.var_input]
                if xv.shape == shape and trailing(self.row_offsets.shape, shape) and chunkable(out, xv):
                    chunked_take(self.rows_table, out, xv, self.row_offsets)
                    return [out]
            elif a.shape == b.shape == shape and chunkable(out, a, b):
                chunked_take(self.table, out, a, b)
                return [out]
        index = scratch("binary.index", shape, np.uint16)
        if self.row_offsets is not None:
            np.add(inputs[self.var_input].view(np.uint8), self.row_offsets, out=index, dtype=np.uint16)
            return [np.take(self.rows_table, index, mode="clip", out=out)]
        np.left_shift(a.view(np.uint8), 8, out=index, dtype=np.uint16)  # broadcasts to the output
        np.bitwise_or(index, b.view(np.uint8), out=index)
        return [np.take(self.table, index, mode="clip", out=out)]


def _real_multiplier(multiplier: int, shift: int) -> float:
    """The real value of a fixed-point multiplier ``(multiplier, shift)``."""
    return math.ldexp(multiplier, shift - 31)


def _f32_around(x: float):
    """float32 values at and around ``x``: the nearest first, then one and two steps either way."""
    f = _F32(x)
    up1, dn1 = np.nextafter(f, _F32(np.inf)), np.nextafter(f, _F32(-np.inf))
    return [f, up1, dn1, np.nextafter(up1, _F32(np.inf)), np.nextafter(dn1, _F32(-np.inf))]


def _rescale_to_common(s1: float, s2: float, left_shift: int):
    """ADD/SUB/SQUARED_DIFFERENCE: input multipliers onto the common scale 2*max(s1, s2).

    Mirrors the C++ types: the scales are float32, twice their maximum is a double.
    """
    twice_max = float(_F32(2) * max(_F32(s1), _F32(s2)))
    m1 = quantize_multiplier(float(_F32(s1)) / twice_max)
    m2 = quantize_multiplier(float(_F32(s2)) / twice_max)
    return twice_max, m1, m2


@register("ADD", "int8", "uint8")
@register("SUB", "int8", "uint8")
class Int8AddSub(_Int8Binary):
    LEFT_SHIFT = 20
    #: two run-time operands of the output's shape run edgerun.native's loop where the machine has one
    NATIVE = True

    def _prepare_native(self):
        """edgerun.native's ADD / SUB loop: the two operands' 256-entry rescaled tables (``T1``,
        ``T2`` of ``_prepare_small``), their int32 sum requantized per value. Kept only when its
        output equals ``_compute`` on all 65,536 input pairs."""
        ctx = self.ctx
        if (not self.NATIVE or ctx.const(0) is not None or ctx.const(1) is not None
                or not tuple(ctx.input_shape(0)) == tuple(ctx.input_shape(1)) == self.out_shape):
            return None
        lib = native.library()
        if lib is None:
            return None
        values = _BY_BITS[ctx.input(0).dtype]
        t1 = _mbqm((values - self.z1) << self.LEFT_SHIFT, *self.m1)
        t2 = self.sign * _mbqm((values - self.z2) << self.LEFT_SHIFT, *self.m2)
        m, shift = (int(v) for v in self.mo)
        if not (0 <= m < (1 << 31) and -31 <= shift <= 30
                and int(np.abs(t1).max()) + int(np.abs(t2).max()) < (1 << 31)):
            return None
        t1, t2 = t1.astype(np.int32), t2.astype(np.int32)
        forms = []
        # the fitted plane where one exists (a few float32 operations a value, vectorized), else
        # the operands' tables and the output requantization (two lookups a value)
        line = self._prepare_line() if self.LINE else None
        if line is not None:
            fa, fb, fc, clamp_lo, clamp_hi, flip = line
            fn_line = lib.edgerun_add_line_i8
            tail_line = (int(ctx.input(0).dtype == "int8"), float(fa), float(fb), float(fc),
                         -np.inf if clamp_lo is None else float(clamp_lo),
                         np.inf if clamp_hi is None else float(clamp_hi), int(flip or 0))

            def run_line(a, b, out):  # C-contiguous operands of one shape and dtype (_native_ok)
                fn_line(a.ctypes.data, b.ctypes.data, out.ctypes.data, out.size, *tail_line)
            forms.append(run_line)
        fn = lib.edgerun_add_i8
        tail = (t1.ctypes.data, t2.ctypes.data, max(shift, 0), m, max(-shift, 0), self.zo, self.lo, self.hi)

        def run(a, b, out):
            fn(a.ctypes.data, b.ctypes.data, out.ctypes.data, out.size, *tail)
        forms.append(run)
        # each form checked on every input pair, 16 rows of 256 at a time (the whole 256 x 256
        # reference in int64 had been 2.5 MB of transient memory: iris landmark's peak)
        bits, np_out = np.arange(256, dtype=np.uint8), ctx.output(0).np_dtype
        b_rows, got = np.tile(bits, (16, 1)), np.empty((16, 256), np.uint8)
        for form in forms:
            for r0 in range(0, 256, 16):
                form(np.repeat(bits[r0:r0 + 16], 256).reshape(16, 256), b_rows, got)
                want = np.clip(self._compute(values[r0:r0 + 16, None], values[None, :]), self.lo, self.hi)
                if not np.array_equal(got, want.astype(np_out).view(np.uint8)):
                    break
            else:
                return form, (t1, t2)
        return None

    def _prepare_params(self):
        twice_max, self.m1, self.m2 = _rescale_to_common(self.s1, self.s2, self.LEFT_SHIFT)
        self.mo = quantize_multiplier(twice_max / float(_F32(1 << self.LEFT_SHIFT) * _F32(self.so)))
        self.sign = 1 if self.ctx.name == "ADD" else -1

    def _compute(self, a, b):
        x1 = _mbqm((a - self.z1) << self.LEFT_SHIFT, *self.m1)
        x2 = _mbqm((b - self.z2) << self.LEFT_SHIFT, *self.m2)
        return _mbqm(x1 + self.sign * x2, *self.mo) + self.zo

    #: two variable operands and outputs up to this many values: no 64K table (64 KB a node;
    #: iris landmark has 26 ADDs) but two 256-entry int32 tables and a bucketed output map
    #: (``_prepare_small``), about 3x the lookup's time a value, which small outputs can afford
    SMALL_MAX_VALUES = 10000

    def _small_eligible(self) -> bool:
        ctx = self.ctx
        return (ctx.const(0) is None and ctx.const(1) is None
                and math.prod(self.out_shape) <= self.SMALL_MAX_VALUES)

    def _prepare_small(self):
        """The op as ``out = yb[j] + (s >= thr[j])``, ``j = s >> k``, over the exact int32 sum
        ``s = T1[a] + T2[b]`` of the two rescaled operands (each a function of one int8 value).
        The output requantization is monotone in ``s``, so each output value starts at one
        threshold; buckets of 2^k sums, 2^k no wider than the closest two thresholds, hold at
        most one. Checked against the 64K table on all input pairs; None (keep the table) when
        two thresholds coincide, the buckets would be many, or the check against ``_compute``
        (on every input pair, 16 rows of 256 at a time) fails."""
        values = _BY_BITS[self.ctx.input(0).dtype]
        t1 = _mbqm((values - self.z1) << self.LEFT_SHIFT, *self.m1)
        t2 = self.sign * _mbqm((values - self.z2) << self.LEFT_SHIFT, *self.m2)
        smin, smax = int(t1.min() + t2.min()), int(t1.max() + t2.max())

        def f(x):
            return np.clip(_mbqm(np.asarray(x, np.int64), *self.mo) + self.zo, self.lo, self.hi)

        # thresholds: the least sum reaching each output value (vectorized bisection)
        want = np.arange(self.lo + 1, self.hi + 1, dtype=np.int64)
        lo = np.full(want.shape, smin, np.int64)
        hi = np.full(want.shape, smax + 1, np.int64)
        while (lo < hi).any():
            mid = (lo + hi) // 2
            up = f(mid) >= want
            hi = np.where(up, mid, hi)
            lo = np.where(up, lo, mid + 1)
        thr = lo[(lo > smin) & (lo <= smax)] - smin  # inside the reachable sums, from 0
        if thr.size > 1 and (np.diff(thr) == 0).any():  # (np.unique would import numpy.ma: 0.5 MB)
            return None  # the output steps by 2 or more somewhere
        gap = int(np.diff(thr).min()) if thr.size > 1 else smax - smin + 1
        k = min(30, gap.bit_length() - 1)  # 2^k <= gap
        # buckets from the one holding thr[0] - 1 to the one holding thr[-1]: sums outside are
        # clipped onto the end buckets by take's "clip" mode, where the output is constant
        j0 = int(thr[0] - 1) >> k if thr.size else 0
        nb = (int(thr[-1]) >> k) - j0 + 1 if thr.size else 1
        if nb > 4096:
            return None
        base = smin + (j0 << k)
        yb = f(base + (np.arange(nb, dtype=np.int64) << k)).astype(self.ctx.output(0).np_dtype)
        tb = np.full(nb, np.iinfo(np.int32).max, np.int64)
        inner = thr[(thr & ((1 << k) - 1)) != 0] - (j0 << k)  # a threshold on a bucket's start is in yb
        tb[inner >> k] = inner
        small = ((t1 - base).astype(np.int32), t2.astype(np.int32), k, tb.astype(np.int32), yb)
        bits = np.arange(256, dtype=np.uint8)
        for a0 in range(0, 256, 16):  # 16 rows at a time: small temporaries at prepare
            want = np.clip(self._compute(values[a0:a0 + 16, None], values[None, :]), self.lo, self.hi)
            if not np.array_equal(self._eval_small(small, bits[a0:a0 + 16, None], bits[None, :]), want):
                return None
        return small

    @staticmethod
    def _eval_small(small, a, b, out=None):
        t1, t2, k, tb, yb = small
        s = t1.take(a.view(np.uint8), mode="clip") + t2.take(b.view(np.uint8), mode="clip")
        j = s >> k
        y = yb.take(j, mode="clip", out=out)
        y += s >= tb.take(j, mode="clip")
        return y

    # --- the fitted float32 plane -----------------------------------------------------------

    #: two variable operands: try the fitted float32 plane (``_prepare_line``) before the
    #: small form and the 64K table
    LINE = True
    #: values per pass of the plane's passes: two float32 work arrays of this many values (128 KB
    #: each, in the conv calls' scratch buffers, which are at least that large in plans that
    #: have 32K-value ADDs)
    LINE_CHUNK = 1 << 15

    def _line_eligible(self) -> bool:
        ctx = self.ctx
        return self.LINE and ctx.const(0) is None and ctx.const(1) is None

    def _prepare_line(self):
        """The op as one float32 plane: ``out = floor(fa*a + fb*b + fc)``, clamped to the
        output range, computed with the passes of :meth:`_line_pass` (two multiplies, two adds,
        the clamps the model can reach, a cast to uint8 and, for int8, an XOR of the sign bit).

        The reference output is a nondecreasing step function of ``t1[a] + t2[b]``, and the
        plane with the reference's own slopes (the two input multipliers times the output one)
        runs within about 1e-5 of each step's edge. ``fa`` and ``fb`` are the slopes rounded to
        float32 (or up to two float32 steps either way), and ``fc`` is a point of the interval
        that every input pair allows. Every candidate is run through the kernel's own float32
        passes on all 65,536 input pairs and kept only when each equals ``_compute``: the form
        is exact by enumeration, with no bound on rounding to trust. None (no plane found; about
        one ADD in twenty on the MediaPipe graphs) keeps the other forms."""
        dtype = self.ctx.input(0).dtype
        values = _BY_BITS[dtype]
        np_in = np.int8 if dtype == "int8" else np.uint8
        off = 128 if dtype == "int8" else 0  # the passes work on [0, 256) and cast to uint8
        multiplier = _real_multiplier(*self.mo) * float(1 << self.LEFT_SHIFT)
        al = _real_multiplier(*self.m1) * multiplier
        ga = self.sign * _real_multiplier(*self.m2) * multiplier
        # every input pair, 16 rows of 256 at a time (small temporaries at prepare): a, b and the
        # reference output plus ``off`` (a byte each: the 64K table, for the fit's duration)
        a = np.repeat(values.astype(np_in), 256).reshape(16, -1)
        b = np.tile(values.astype(np_in), 256).reshape(16, -1)
        want = np.empty((16, 4096), np.uint8)
        for r in range(16):
            rows = values[r * 16:(r + 1) * 16, None]
            want[r] = (np.clip(self._compute(rows, values[None, :]), self.lo, self.hi) + off).ravel()
        top, bottom = self.hi + off, self.lo + off
        y, t = np.empty(4096, _F32), np.empty(4096, _F32)
        for fa in _f32_around(al):
            for fb in _f32_around(ga):
                lo_c, hi_c = -np.inf, np.inf
                for r in range(16):
                    np.multiply(a[r], fa, out=y, dtype=_F32)
                    np.multiply(b[r], fb, out=t, dtype=_F32)
                    np.add(y, t, out=y)
                    w, yy = want[r].astype(np.float64), y.astype(np.float64)
                    m = w > bottom  # a lower edge binds the pairs whose output is not the lowest
                    if m.any():
                        lo_c = max(lo_c, float(np.max(w[m] - yy[m])))
                    m = w < top  # an upper edge, those not the highest
                    if m.any():
                        hi_c = min(hi_c, float(np.min(w[m] + 1 - yy[m])))
                if not hi_c > lo_c:
                    continue
                for frac in (0.5, 0.3, 0.7, 0.1, 0.9):
                    line = self._line_check(fa, fb, _F32(lo_c + (hi_c - lo_c) * frac), a, b, want, off)
                    if line is not None:
                        return line
        return None

    def _line_check(self, fa, fb, fc, a, b, want, off):
        """The plane (fa, fb, fc, clamp low or None, clamp high or None, uint8 XOR or None) when
        its passes give ``want`` on every input pair, else None. A clamp only where some pair
        (every pair is a possible input) reaches past it."""
        y, t = np.empty(4096, _F32), np.empty(4096, _F32)
        low, high = _F32(self.lo + off), _F32(self.hi + off)
        ymin, ymax = np.inf, -np.inf
        for r in range(16):
            np.multiply(a[r], fa, out=y, dtype=_F32)
            np.multiply(b[r], fb, out=t, dtype=_F32)
            np.add(y, t, out=y)
            np.add(y, fc, out=y)
            ymin, ymax = min(ymin, float(y.min())), max(ymax, float(y.max()))
        line = (fa, fb, fc, low if ymin < low else None, high if ymax >= high + 1 else None,
                0x80 if off else None)
        got = np.empty(4096, np.uint8)
        for r in range(16):
            self._line_pass(line, a[r], b[r], y, t, got)
            if off:
                np.bitwise_xor(got, 0x80, out=got)  # back to the offset byte of ``want``
            if not np.array_equal(got, want[r]):
                return None
        return line

    @staticmethod
    def _line_pass(line, a, b, y, t, out_u8):
        """The plane on same-shape ``a``, ``b`` into ``out_u8`` (uint8 view of the output), with
        float32 work arrays ``y``, ``t`` of that shape."""
        fa, fb, fc, clamp_lo, clamp_hi, flip = line
        np.multiply(a, fa, out=y, dtype=_F32)
        np.multiply(b, fb, out=t, dtype=_F32)
        np.add(y, t, out=y)
        np.add(y, fc, out=y)
        if clamp_lo is not None:
            np.maximum(y, clamp_lo, out=y)
        if clamp_hi is not None:
            np.minimum(y, clamp_hi, out=y)
        np.copyto(out_u8, y, casting="unsafe")  # y in [0, 256): the cast is floor
        if flip is not None:
            np.bitwise_xor(out_u8, flip, out=out_u8)

    def _line_table(self) -> np.ndarray:
        """The 64K table (index ``a_bits << 8 | b_bits``) computed by the plane's passes."""
        np_in = np.int8 if self.ctx.input(0).dtype == "int8" else np.uint8
        codes = np.arange(256, dtype=np.uint8).view(np_in)
        table = np.empty(65536, np_in)
        y, t = np.empty(4096, _F32), np.empty(4096, _F32)
        a, b = np.repeat(codes, 256), np.tile(codes, 256)
        for s in range(0, 65536, 4096):
            self._line_pass(self.line, a[s:s + 4096], b[s:s + 4096], y, t, table[s:s + 4096].view(np.uint8))
        return table

    def _eval_line_op(self, inputs):
        a, b = inputs
        out = self._out
        shape = np.broadcast_shapes(a.shape, b.shape) if a.shape != b.shape else a.shape
        if out is None or out.shape != shape:
            out = np.empty(shape, a.dtype)
        if a.shape == b.shape == shape and chunkable(out, a, b):
            self._line_call(a, b, out)()
            return [out]
        a2, b2 = np.broadcast_arrays(a, b)  # broadcast operands (the eval path's general case)
        y = np.empty(shape, _F32)
        t = np.empty(shape, _F32)
        self._line_pass(self.line, a2, b2, y, t, out.view(np.uint8))
        return [out]

    def _line_call(self, a, b, out):
        """The plane over same-shape C-contiguous ``a``, ``b`` into ``out`` as one call, in blocks
        of ``LINE_CHUNK`` values. Its two float32 work arrays are the eval calls' scratch
        (``conv.cols`` / ``conv.acc``), asked for on each call: a view bound once would keep an
        outgrown buffer alive."""
        n = out.size
        step = max(1, min(n, self.LINE_CHUNK))  # (an empty tensor: no pass)
        parts = [(a.reshape(-1)[s:s + step], b.reshape(-1)[s:s + step], out.reshape(-1)[s:s + step].view(np.uint8))
                 for s in range(0, n, step)]
        line, run = self.line, self._line_pass

        def call():
            y = scratch("conv.cols", (step,), _F32)
            t = scratch("conv.acc", (step,), _F32)
            for pa, pb, po in parts:
                m = po.size
                run(line, pa, pb, y[:m], t[:m], po)
        return call

    def _compile_line(self, ins, outs):
        """The bound call of the plane (same-shape operands). In a small plan the node takes the
        64K table again, rebuilt from the plane (as ``_compile_small`` does)."""
        from edgerun.ops.conv import SMALL_ARENA_BYTES

        ws = current_workspace()
        if ws is not None and ws.arena_bytes <= SMALL_ARENA_BYTES:
            self.table = self._line_table()
            self.line = None
            return self.compile(ins, outs)
        a, b = ins
        out = outs[0]
        if (a is None or b is None or out is None or not (a.shape == b.shape == out.shape == self.out_shape)
                or not chunkable(out, a, b)):
            return None
        return self._line_call(a, b, out)


@register("SQUARED_DIFFERENCE", "int8")
class Int8SquaredDifference(_Int8Binary):
    LEFT_SHIFT = 7

    def _prepare_params(self):
        twice_max, self.m1, self.m2 = _rescale_to_common(self.s1, self.s2, self.LEFT_SHIFT)
        self.mo = quantize_multiplier((twice_max * twice_max)
                                      / float(_F32(1 << (2 * self.LEFT_SHIFT)) * _F32(self.so)))

    def _compute(self, a, b):
        x1 = _mbqm((a - self.z1) << self.LEFT_SHIFT, *self.m1)
        x2 = _mbqm((b - self.z2) << self.LEFT_SHIFT, *self.m2)
        d = x1 - x2
        return _mbqm(d * d, *self.mo) + self.zo


@register("MUL", "int8", "uint8")
class Int8Mul(_Int8Binary):
    def _prepare_params(self):
        self.m = quantize_multiplier(float(_F32(self.s1) * _F32(self.s2) / _F32(self.so)))

    def _compute(self, a, b):
        return _mbqm((a - self.z1) * (b - self.z2), *self.m) + self.zo


def _rounding_divide_by_pot_x86(x, exponent):
    """gemmlowp RoundingDivideByPOT as LiteRT's x86 build executes it, exponents of 32 and more
    included (DIV reaches them for small dividends and large divisors): the mask
    ``(int32)((1ll << e) - 1)`` is then -1 and the int32 shift count is taken mod 32, so the
    result is ``(x >> (e - 32)) + (x >= 0)``."""
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    wide = e >= 32
    normal = rounding_divide_by_pot(x, np.where(wide, 0, e))
    return np.where(wide, (x >> (e & 31)) + (x >= 0), normal)


@register("DIV", "int8", "uint8")
class Int8Div(_Int8Binary):
    def _prepare_params(self):
        self.m, self.shift = quantize_multiplier(float(_F32(self.s1) / (_F32(self.s2) * _F32(self.so))))

    def _compute(self, a, b):
        v1 = a - self.z1
        v2 = b - self.z2
        v2 = np.where(v2 == 0, 1, v2)  # a zero divisor is rejected in eval; keep the table finite
        v1 = np.where(v2 < 0, -v1, v1)
        v2 = np.abs(v2)
        inv, recip_shift = get_reciprocal(v2, 31)
        headroom = count_leading_sign_bits32(v1)
        unscaled = saturating_rounding_doubling_high_mul(v1 << headroom, inv)
        total_shift = self.shift - recip_shift - headroom
        # MultiplyByQuantizedMultiplierSmallerThanOneExp; total_shift <= 0 for any int8 scales
        scaled = _rounding_divide_by_pot_x86(saturating_rounding_doubling_high_mul(unscaled, self.m),
                                             np.maximum(-total_shift, 0))
        return scaled + self.zo

    def eval(self, inputs):
        if np.any(inputs[1] == self.z2):
            raise InputMismatchError(f"DIV (node {self.ctx.index}): division by zero (divisor equals "
                                     f"its zero point {self.z2})")
        return super().eval(inputs)


@register("MAXIMUM", "int8", "uint8")
@register("MINIMUM", "int8", "uint8")
class Int8MaxMin(Kernel):
    """Compares the raw 8-bit values, as LiteRT does (inputs and output share one quantization)."""

    def prepare(self):
        _check_binary_types(self.ctx)
        self.fn = _maximum if self.ctx.name == "MAXIMUM" else _minimum
        return [broadcast_shape(self.ctx)]

    def eval(self, inputs):
        return [self.fn(inputs[0], inputs[1])]


# --- unary ops ----------------------------------------------------------------------------------

def _rsqrt_f32(x):
    return _F32(1) / np.sqrt(x)


def _exp_f32(x):
    # glibc's expf is correctly rounded in practice; float64 exp rounded once to float32 matches it
    return np.exp(x.astype(np.float64)).astype(np.float32)


_UNARY_FLOAT = {"ABS": np.abs, "SQRT": np.sqrt, "RSQRT": _rsqrt_f32, "EXP": np.exp}  # float32 exp: <= 1 ulp off


@register("ABS", "float32")
@register("SQRT", "float32")
@register("RSQRT", "float32")
@register("EXP", "float32")
class FloatUnary(Kernel):
    def prepare(self):
        if self.ctx.output(0).dtype != "float32":
            raise self.ctx.fail(f"output type {self.ctx.output(0).dtype} differs from the input's")
        self.fn = _UNARY_FLOAT[self.ctx.name]
        self.float_elementwise = True  # runtime.plan composes it into a DEQUANTIZE table
        return [self.ctx.input_shape(0)]

    def eval(self, inputs):
        with np.errstate(all="ignore"):
            return [self.fn(inputs[0])]


class _Int8Unary(TableEval, Kernel):
    """int8 unary op: the per-element definition ``_compute`` tabulated over the 256 inputs."""

    #: inputs below the input zero point are rejected (SQRT, RSQRT)
    NON_NEGATIVE = False

    def prepare(self):
        ctx = self.ctx
        if ctx.output(0).dtype != "int8":
            raise ctx.fail(f"output type {ctx.output(0).dtype} differs from the input's")
        self.si, self.zi = qparams(ctx.input(0))
        self.so, self.zo = qparams(ctx.output(0))
        self.lut = np.clip(self._compute(_INT8_BY_BITS), -128, 127).astype(np.int8)
        if not self.NON_NEGATIVE:  # SQRT / RSQRT check their inputs first
            self.unary_table = self.lut  # the invoke plan's bound lookup (runtime.plan)
        return [ctx.input_shape(0)]

    def _compute(self, q: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def eval(self, inputs):
        x = inputs[0]
        if self.NON_NEGATIVE and np.any(x < self.zi):
            raise InputMismatchError(f"{self.ctx.name} (node {self.ctx.index}) is only defined for "
                                     f"non-negative values (an input is below its zero point {self.zi})")
        return [self.lookup(self.lut, x)]


@register("ABS", "int8")
class Int8Abs(_Int8Unary):
    def _compute(self, q):
        v = np.abs(q - self.zi)
        if _F32(self.si) == _F32(self.so):
            return v + self.zo
        m = quantize_multiplier(float(_F32(self.si) / _F32(self.so)))
        return _mbqm(v, *m) + self.zo


@register("SQRT", "int8")
class Int8Sqrt(_Int8Unary):
    NON_NEGATIVE = True

    def _compute(self, q):
        real = _F32(self.si) * (q - self.zi).astype(np.float32)
        with np.errstate(invalid="ignore"):
            y = np.sqrt(real) / _F32(self.so)
        return wrap32(trunc_to_int32(y) + self.zo)


@register("RSQRT", "int8")
class Int8Rsqrt(_Int8Unary):
    NON_NEGATIVE = True
    SHIFT = 20  # keeps 1/sqrt(v) an integer

    def _compute(self, q):
        m, shift = quantize_multiplier(1.0 / float(np.sqrt(_F32(self.si)) * _F32(self.so)))
        v = np.maximum(q - self.zi, 0)
        inv, inv_shift = get_inv_sqrt_quantized_multiplier_exp(v, -1)
        data = _mbqm(np.ones_like(v), inv, inv_shift + self.SHIFT)
        out = _mbqm(data, m, shift - self.SHIFT) + self.zo
        return np.where(v == 0, 127, out)


@register("EXP", "int8")
class Int8Exp(_Int8Unary):
    def _compute(self, q):
        real = _F32(self.si) * (q - self.zi).astype(np.float32)
        with np.errstate(over="ignore"):
            y = _exp_f32(real) * (_F32(1) / _F32(self.so))
        # LiteRT's build saturates this float -> int conversion (an overflow gives 127, not INT_MIN)
        return np.trunc(np.clip(round_half_away(y) + _F32(self.zo), -128, 127)).astype(np.int64)
