"""Shared kernel helpers: fused activations, quantization parameters, broadcasting, padding."""

from __future__ import annotations

import math
import threading

import numpy as np

from edgerun._util import round_half_away  # noqa: F401  (kernels import it from here)
from edgerun.schema.tflite import Activation, Padding

try:  # the clip ufunc itself: one pass, without np.clip's Python-level argument handling
    from numpy._core.umath import clip as clip_ufunc
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.umath import clip as clip_ufunc

QRANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (-(1 << 31), (1 << 31) - 1)}


def float_activation_range(act: int) -> tuple[float, float]:
    """Clamp range of a fused activation on float outputs."""
    if act == Activation.RELU:
        return 0.0, np.inf
    if act == Activation.RELU6:
        return 0.0, 6.0
    if act == Activation.RELU_N1_TO_1:
        return -1.0, 1.0
    return -np.inf, np.inf


def apply_float_activation(x: np.ndarray, act: int) -> np.ndarray:
    if act == Activation.NONE:
        return x
    if act == Activation.TANH:
        return np.tanh(x)
    if act == Activation.SIGN_BIT:
        return np.signbit(x).astype(x.dtype)
    lo, hi = float_activation_range(act)
    return np.clip(x, lo, hi)


def quantized_activation_range(act: int, scale: float, zero_point: int, dtype: str = "int8") -> tuple[int, int]:
    """TFLite CalculateActivationRangeQuantized: the fused activation as an integer clamp."""
    qmin, qmax = QRANGE[dtype]

    def q(v: float) -> int:
        # float32 division, then std::round (half away from zero; np.round would round half to even)
        r = float(np.float32(v) / np.float32(scale))
        return int(zero_point) + int(np.sign(r) * np.floor(abs(r) + 0.5))

    if act == Activation.RELU:
        return max(qmin, q(0.0)), qmax
    if act == Activation.RELU6:
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    if act == Activation.RELU_N1_TO_1:
        return max(qmin, q(-1.0)), min(qmax, q(1.0))
    return qmin, qmax


def qparams(t) -> tuple[float, int]:
    """Per-tensor (scale, zero_point) of a quantized tensor."""
    if t is None or t.quant is None or t.quant.empty:
        return 1.0, 0
    return float(t.quant.scale[0]), int(t.quant.zero_point[0])


def conv_output_size(padding: int, size: int, filt: int, stride: int, dilation: int = 1) -> int:
    eff = (filt - 1) * dilation + 1
    if padding == Padding.SAME:
        return (size + stride - 1) // stride
    return (size - eff + stride) // stride


def conv_padding(padding: int, size: int, filt: int, stride: int, dilation: int, out: int) -> tuple[int, int]:
    """TFLite ComputePaddingWithOffset: (pad_before, pad_after) along one axis."""
    eff = (filt - 1) * dilation + 1
    total = max((out - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2


# --- integer GEMM on float BLAS and fast requantization (conv / fully-connected kernels) -------

#: float32 represents every integer of magnitude <= 2^24 exactly.
FLOAT32_EXACT = 1 << 24


def exact_chunk(bound_a: float, bound_b: float) -> int:
    """Longest reduction length K whose integer dot products stay exact in float32.

    Any partial sum of K products |a*b| <= bound_a*bound_b is at most K*bound_a*bound_b in
    magnitude, so BLAS may add the terms in any order and still be exact while that is <= 2^24.
    """
    return max(1, int(FLOAT32_EXACT // max(1.0, float(bound_a) * float(bound_b))))


def exact_int_matmul(a: np.ndarray, b: np.ndarray, chunk: int, out: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` for integer-valued float32 matrices, exactly.

    ``chunk`` comes from :func:`exact_chunk`. When the reduction length K fits in one chunk the
    float32 product is returned as is (every value an exact integer); longer reductions are split
    into chunks whose exact float32 partial products are summed in float64 (exact below 2^53).
    ``a`` is (..., K) and ``b`` is (K, N) or broadcastable (..., K, N); ``out`` (float32, the
    product's shape) is used when one chunk suffices.
    """
    k = a.shape[-1]
    if k <= chunk:
        return np.matmul(a, b, out=out)
    acc = None
    for k0 in range(0, k, chunk):
        part = np.matmul(a[..., k0:k0 + chunk], b[..., k0:k0 + chunk, :]).astype(np.float64)
        acc = part if acc is None else np.add(acc, part, out=acc)
    return acc


_SMALL_WORK = threading.local()


def _small_work() -> dict:
    """This thread's int64 work arrays of the requantizers' small path, one pair per shape,
    shared by every requantizer (per layer they had been 0.19 MB on iris landmark int8)."""
    try:
        return _SMALL_WORK.d
    except AttributeError:
        d = _SMALL_WORK.d = {}
        return d


class Requantizer:
    """int32 accumulators -> quantized output: ``clamp(MBQM(acc, m, shift) + zero_point, lo, hi)``.

    Bit-exact with :func:`edgerun.ops.fixedpoint.multiply_by_quantized_multiplier` (TFLite's
    MultiplyByQuantizedMultiplier with gemmlowp rounding) in a few in-place numpy passes; ``m``
    and ``shift`` broadcast along the last axis (per-channel). For int32 ``x``, ``0 < m < 2^31``
    and right shift ``e = max(-shift, 0)``:

    * SaturatingRoundingDoublingHighMul(x, m) == floor((x*m + 2^30) / 2^31): gemmlowp's nudge
      then truncation toward zero is this floor for both signs (saturation needs m == -2^31,
      which QuantizeMultiplier never produces);
    * RoundingDivideByPOT(y, e) == floor((y + 2^(e-1) - [y < 0]) / 2^e) for e > 0 (half away
      from zero), and y < 0 exactly when x*m + 2^30 < 0;
    * floor(floor(a / 2^31) + c) / 2^e) == floor((a + c*2^31) / 2^(31+e)) for integer c, so both
      roundings and the zero point collapse into one add and one arithmetic shift::

        Q = x*m + 2^30;  out = (Q + 2^31*(2^(e-1) - [Q < 0 and e > 0]) + zp*2^(31+e)) >> (31+e)

    Every intermediate stays below 2^63 for |x| < 2^31. ``acc + bias`` wraps to int32 like the
    reference kernels' int32 accumulator (``acc += bias`` overflows modulo 2^32 when a saturated
    int32 bias meets a large sum), unless ``acc_bound`` proves it fits; with a left shift they
    wrap like TFLite's ``x * (1 << left)``.
    """

    def __init__(self, multiplier, shift, zero_point: int, qmin: int, qmax: int, dtype=np.int8):
        m = np.asarray(multiplier, dtype=np.int64)
        sh = np.asarray(shift, dtype=np.int64)
        m, sh = np.broadcast_arrays(m, sh)
        self.m = np.ascontiguousarray(m)
        left = np.maximum(sh, 0)
        right = np.maximum(-sh, 0)  # QuantizeMultiplier keeps shift >= -31
        self.left = left if left.any() else None
        self.zero_point = int(zero_point)
        self.qmin, self.qmax = int(qmin), int(qmax)
        self.dtype = dtype
        half = (np.int64(1) << right) >> 1
        # fold the zero point into the shift while |zp| * 2^(31+e) <= 2^61 (no int64 overflow)
        self.fold_zp = abs(self.zero_point) <= 256 and int(right.max(initial=0)) <= 22
        zp_term = (np.int64(self.zero_point) << (31 + right)) if self.fold_zp else np.zeros_like(right)

        def shrink(a):  # one value for every channel: a Python scalar is faster to broadcast
            a = np.ascontiguousarray(a)
            return int(a.flat[0]) if a.size and (a == a.flat[0]).all() else a

        self.neg = shrink((right > 0).astype(np.int64) << 31)
        self.total = shrink(31 + right)
        self.any_neg = bool(np.any(self.neg))
        # x*m + 2^30 < 0 exactly when x < 0 if m >= 2^30, except x*m == -2^30 (x = -1,
        # m = 2^30), where Q = 0 and both corrections give the same floor (the 2^31 taken off is
        # below the 2^(31+e) step once the 2^(30+e) rounding half is added). So the sign may be
        # read before the multiply, and 2^30 merges into the rounding constant: one pass fewer.
        self.sign_first = bool(np.all((self.m >= (1 << 30)) | (np.broadcast_to(self.neg, self.m.shape) == 0)))
        # the rounding constant without the zero point: only the unfolded form and scale() use
        # it (made on first use otherwise: a per-channel int64 array per layer)
        self._add_plain_30 = None if self.fold_zp else shrink((half << 31) + (1 << 30))
        self.add_zp_30 = shrink((half << 31) + zp_term + (1 << 30))
        self._tiles: dict = {}
        self._layouts: dict = {}
        self._small: dict = {}
        self._wraps: dict = {}
        #: set by a kernel that knows its float accumulators satisfy |acc| <= acc_bound: when
        #: acc_bound + max|bias| < 2^24, acc + bias is exact in float32 and converts straight to
        #: int32 (a cheaper pass than float -> int64)
        self.acc_bound: float | None = None

    @property
    def add_plain_30(self):
        """2^(e-1) * 2^31 + 2^30 per channel (the rounding half of the right shift e, and
        SRDHM's nudge), without the zero point."""
        if self._add_plain_30 is None:
            right = np.asarray(self.total, np.int64) - 31
            a = (((np.int64(1) << right) >> 1) << 31) + (1 << 30)
            self._add_plain_30 = int(a) if a.ndim == 0 else a
        return self._add_plain_30

    #: per-channel constants are tiled along the last axis up to this many values, so that the
    #: ufuncs run long inner loops instead of one short loop per pixel (256 runs as fast as
    #: 2048 on the MediaPipe graphs and keeps the cached tiles 8x smaller: 0.5 instead of 4 MB
    #: on palm detection)
    TILE = 256

    def _must_wrap(self, bias) -> bool:
        """Whether acc + bias may leave int32 (then it wraps as in the reference kernels)."""
        key = (id(bias), self.acc_bound)
        hit = self._wraps.get(key)
        if hit is not None and hit[0] is bias:
            return hit[1]
        bound = None
        if self.acc_bound is not None:
            bound = self.acc_bound + (float(np.abs(bias).max(initial=0)) if bias is not None else 0.0)
        wrap = bound is None or bound >= 2.0 ** 31
        if len(self._wraps) > 64:
            self._wraps.clear()
        self._wraps[key] = (bias, wrap)
        return wrap

    @staticmethod
    def _wrap32(x: np.ndarray) -> None:
        x += 1 << 31
        x &= 0xFFFFFFFF
        x -= 1 << 31

    def _tiled(self, reps: int, bias):
        """The constants (m, left, add_plain, add_zp, neg, total, bias) repeated ``reps`` times."""
        key = (reps, id(bias))
        hit = self._tiles.get(key)
        if hit is not None and hit[0] is bias:
            return hit[1]

        def t(a):
            return np.tile(a, reps) if isinstance(a, np.ndarray) and a.size > 1 else a

        bias32 = None
        bound = None
        if self.acc_bound is not None:
            bound = self.acc_bound + (float(np.abs(bias).max(initial=0)) if bias is not None else 0.0)
        m, left = self.m, self.left
        if left is not None and bound is not None and bound * float(1 << int(left.max())) < 2.0 ** 31:
            # x << left never leaves int32 (no wrap-around): fold the left shift into the multiplier,
            # x * (m << left) < 2^31 * 2^31 stays inside int64
            m, left = m << left, None
        if (bias is not None and bound is not None and self.sign_first and left is None
                and bound < FLOAT32_EXACT):
            bias32 = t(bias).astype(np.float32)
        consts = (t(m), t(left) if left is not None else None, None if self.fold_zp else t(self.add_plain_30),
                  t(self.add_zp_30), t(self.neg), t(self.total), t(bias) if bias is not None else None, bias32)
        if len(self._tiles) > 64:
            self._tiles.clear()
        self._tiles[key] = (bias, consts)
        return consts

    def _layout(self, acc: np.ndarray, bias) -> tuple[tuple[int, ...], int]:
        """(2-D work shape, repetitions) for ``acc`` with per-channel constants on its last axis,
        or ((), 0) when the generic broadcasting path is needed."""
        shape = acc.shape
        if not shape:
            return (), 0
        c = shape[-1]
        if not (self.m.ndim <= 1 and self.m.size in (1, c)
                and (bias is None or (isinstance(bias, np.ndarray) and bias.ndim == 1 and bias.size == c))):
            return (), 0
        key = (shape, c)
        hit = self._layouts.get(key)
        if hit is None:
            rows = acc.size // c if c else 0
            reps = 1
            if c and c < self.TILE:
                for r in range(min(rows, self.TILE // c), 0, -1):
                    if rows % r == 0:
                        reps = r
                        break
            hit = self._layouts[key] = ((rows // reps if reps else 0, reps * c), reps)
        return hit

    def _scaled(self, acc: np.ndarray, with_zp: bool, bias=None) -> tuple[np.ndarray, tuple[int, ...]]:
        """The scaled accumulators in a scratch int64 array (valid until the next requantization),
        and the shape of the result (the array may hold it in a 2-D work layout)."""
        acc = np.asarray(acc)
        work, reps = self._layout(acc, bias)
        if reps:
            out_shape = acc.shape
            acc = acc.reshape(work)
            m, left, add_plain, add_zp, neg, total, bias, bias32 = self._tiled(reps, bias)
            if add_plain is None and not with_zp:  # (not tiled when the zero point folds: scale())
                add_plain = self.add_plain_30
                add_plain = np.tile(add_plain, reps) if isinstance(add_plain, np.ndarray) else add_plain
            shape = work
        else:
            m, left, add_zp, neg, total = self.m, self.left, self.add_zp_30, self.neg, self.total
            add_plain = None if (with_zp and self.fold_zp) else self.add_plain_30
            bias32 = None
            shape = out_shape = np.broadcast_shapes(np.shape(acc), np.shape(self.m),
                                                    np.shape(bias) if bias is not None else ())
        x = scratch("requant.x", shape, np.int64)
        if (acc.dtype == np.float32 and acc.size >= 4096 and self.acc_bound is not None
                and self.acc_bound < FLOAT32_EXACT and self.sign_first and left is None
                and (bias is None or bias32 is not None)):
            # bounded float32 accumulators: add the bias in float32 (exact below 2^24), convert
            # to int32, and multiply into int64 (mixed-type ufuncs: worth it on larger arrays)
            x32 = scratch("requant.x32", shape, np.int32)
            if bias is not None:
                np.add(acc, bias32, out=x32, casting="unsafe")
            else:
                np.copyto(x32, acc, casting="unsafe")
            n = None
            if self.any_neg:
                n = np.right_shift(x32, 31, out=scratch("requant.n", shape, np.int64))  # -1 where x < 0
                n &= neg
            np.multiply(x32, m, out=x)
            x += add_zp if (with_zp and self.fold_zp) else add_plain
            if n is not None:
                x -= n
            x >>= total
            if with_zp and not self.fold_zp:
                x += self.zero_point
            return x, out_shape
        # integer-valued float accumulators convert exactly (float32 + int64 bias adds in float64,
        # exact below 2^53)
        if bias is not None:
            np.add(acc, bias, out=x, casting="unsafe")
        else:
            np.copyto(x, acc, casting="unsafe")
        if left is not None:
            # (x mod 2^32) << left == x << left (mod 2^32): one wrap covers acc + bias and the shift
            x <<= left
            self._wrap32(x)
        elif self._must_wrap(bias):
            self._wrap32(x)
        n = None
        if self.any_neg and self.sign_first:
            n = np.right_shift(x, 63, out=scratch("requant.n", shape, np.int64))  # -1 where x < 0
            n &= neg
        x *= m
        if self.any_neg and not self.sign_first:
            x += 1 << 30
            n = np.right_shift(x, 63, out=scratch("requant.n", shape, np.int64))  # -1 where x*m + 2^30 < 0
            n &= neg
            x -= 1 << 30
        # the rounding constants include the 2^30 of SRDHM's nudge
        x += add_zp if (with_zp and self.fold_zp) else add_plain
        if n is not None:
            x -= n
        x >>= total
        if with_zp and not self.fold_zp:
            x += self.zero_point
        return x, out_shape

    def scale(self, acc: np.ndarray) -> np.ndarray:
        """MultiplyByQuantizedMultiplier(acc, m, shift) as int64 (no zero point, no clamp)."""
        x, shape = self._scaled(acc, with_zp=False)
        return x.reshape(shape).copy()

    #: accumulators requantized per block of at most this many values: the int64 work arrays
    #: (scratch) stay near 1 MB whatever the layer size
    BLOCK = 1 << 16

    #: at most this many accumulators take the small path: the same arithmetic as the int64 path
    #: of ``_scaled`` on per-kernel buffers with per-channel vectors, with the least Python around
    #: the ufunc calls (a 1-pixel convolution's requantization is nearly all call overhead)
    SMALL = 1024

    def _small_call(self, acc: np.ndarray, bias, out):
        key = (acc.shape, bias is None)
        hit = self._small.get(key)
        work = _small_work()
        if hit is None or hit[0] is not work:
            c = acc.shape[-1]

            def vec(a):
                return np.ascontiguousarray(np.broadcast_to(np.asarray(a, np.int64), (c,)))

            add = self.add_zp_30 if self.fold_zp else self.add_plain_30
            pair = work.get(acc.shape)
            if pair is None:
                pair = work[acc.shape] = (np.empty(acc.shape, np.int64), np.empty(acc.shape, np.int64))
            hit = self._small[key] = (work, *pair, vec(self.m), vec(add), vec(self.neg), vec(self.total))
        _, x, n, m, add, neg, total = hit
        if bias is None:
            np.copyto(x, acc, casting="unsafe")
        else:
            np.add(acc, bias, out=x, casting="unsafe")
        if self._must_wrap(bias):
            self._wrap32(x)
        if self.any_neg:  # sign_first: x < 0 exactly when x*m + 2^30 < 0 (see _scaled)
            np.right_shift(x, 63, out=n)
            np.bitwise_and(n, neg, out=n)
        np.multiply(x, m, out=x)
        np.add(x, add, out=x)
        if self.any_neg:
            np.subtract(x, n, out=x)
        np.right_shift(x, total, out=x)
        if not self.fold_zp:
            np.add(x, self.zero_point, out=x)
        clip_ufunc(x, self.qmin, self.qmax, out=x)
        if out is not None and out.shape == x.shape and out.dtype == self.dtype:
            np.copyto(out, x, casting="unsafe")
            return out
        return x.astype(self.dtype)

    def __call__(self, acc: np.ndarray, bias=None, out: np.ndarray | None = None) -> np.ndarray:
        """Requantize ``acc`` (+ ``bias`` when given: an integer-valued float or int accumulator plus int64 bias).

        ``out``: an array of the result's shape and dtype to write into (e.g. the output tensor's
        arena view); otherwise a new array is returned.
        """
        acc = np.asarray(acc)
        c = acc.shape[-1] if acc.ndim else 0
        if (acc.size <= self.SMALL and c and self.left is None and self.sign_first and self.m.ndim <= 1
                and self.m.size in (1, c)
                and (bias is None or (isinstance(bias, np.ndarray) and bias.ndim == 1 and bias.size == c))):
            if len(self._small) > 16:
                self._small.clear()
            return self._small_call(acc, bias, out)
        if (acc.size > self.BLOCK and c and acc.flags.c_contiguous and self.m.ndim <= 1
                and self.m.size in (1, c)
                and (bias is None or (isinstance(bias, np.ndarray) and bias.ndim == 1 and bias.size == c))):
            if (out is None or out.shape != acc.shape or out.dtype != self.dtype
                    or not out.flags.c_contiguous):
                out = np.empty(acc.shape, self.dtype)
            a2, o2 = acc.reshape(-1, c), out.reshape(-1, c)
            rows = max(1, self.BLOCK // c)
            for r0 in range(0, a2.shape[0], rows):
                y, shape = self._scaled(a2[r0:r0 + rows], with_zp=True, bias=bias)
                clip_ufunc(y, self.qmin, self.qmax, out=y)
                np.copyto(o2[r0:r0 + rows], y.reshape(shape), casting="unsafe")
            return out
        y, shape = self._scaled(acc, with_zp=True, bias=bias)
        clip_ufunc(y, self.qmin, self.qmax, out=y)
        if out is not None and out.shape == tuple(shape) and out.dtype == self.dtype:
            np.copyto(out, y.reshape(shape), casting="unsafe")
            return out
        return y.astype(self.dtype).reshape(shape)


#: every int8 value in the order of its uint8 bit pattern: the index order of a 256-entry table
INT8_BY_BITS = np.arange(256, dtype=np.uint8).view(np.int8)


def int8_table(values) -> np.ndarray:
    """A 256-entry int8 table from the exact results of an elementwise kernel over INT8_BY_BITS
    (already clamped to int8)."""
    v = np.asarray(values)
    if v.shape[-1:] != (256,) or v.min(initial=0) < -128 or v.max(initial=0) > 127:
        raise ValueError("a table needs 256 results inside the int8 range")
    return np.ascontiguousarray(v.astype(np.int8))


class BoundOutput:
    """Mixin for kernels that can write their first output in place: the interpreter's invoke
    plan binds the output tensor's arena view (``bind_outputs``); the kernel writes into
    ``self._out`` when it is bound and of the right shape, and returns it (no copy)."""

    _out: np.ndarray | None = None

    def bind_outputs(self, outputs: list) -> None:
        self._out = outputs[0] if outputs and isinstance(outputs[0], np.ndarray) else None


class TableEval(BoundOutput):
    """Mixin for kernels whose int8 output is ``table[x]``: one ``np.take``, written straight into
    the bound output buffer when there is one of that shape."""

    def lookup(self, table: np.ndarray, x: np.ndarray) -> np.ndarray:
        out = self._out
        if out is not None and out.shape == x.shape and out.dtype == table.dtype:
            return np.take(table, x.view(np.uint8), mode="clip", out=out)
        # indices of a uint8 view are always in range: "clip" skips the bounds-checked buffered path
        return np.take(table, x.view(np.uint8), mode="clip")


#: values per ``take`` of the chunked int8 lookups: ``take`` widens its uint16 index to a new
#: intp array (8 bytes a value), so a whole 96x96x32 tensor had cost 2.4 MB of transient memory
#: on palm detection; a chunk keeps that at 256 KB
TAKE_CHUNK = 1 << 15


def chunkable(out: np.ndarray, *ins: np.ndarray) -> bool:
    """C-contiguous arrays where ``out`` either is an input's very memory or shares none of it
    (a chunk then reads its indices before it writes its values)."""
    if not out.flags.c_contiguous:
        return False
    for x in ins:
        if not x.flags.c_contiguous:
            return False
        if np.may_share_memory(out, x) and out.ctypes.data != x.ctypes.data:
            return False
    return True


def trailing(shape, full) -> bool:
    """``shape`` without its leading 1s is the trailing part of ``full`` (so an array of that
    shape broadcasts over ``full``'s leading dimensions only)."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return len(shape) <= len(full) and tuple(full[len(full) - len(shape):]) == shape


def chunked_take(table: np.ndarray, out: np.ndarray, x: np.ndarray, other: np.ndarray) -> None:
    """``out = table[index]`` over C-contiguous arrays, about ``TAKE_CHUNK`` values at a time.

    ``other`` uint16: row offsets (one 256-entry row of the table per distinct constant value),
    ``index = x_bits + other``; ``other`` has ``out``'s shape or broadcasts over its leading
    dimensions (``trailing``; e.g. one offset per channel). Otherwise ``other`` is an int8 /
    uint8 operand of ``out``'s shape and ``index = x_bits << 8 | other_bits`` (a 64K table)."""
    n, k = out.size, other.size
    rows = other.dtype == np.uint16
    xf = x.reshape(-1, k).view(np.uint8)
    of = out.reshape(-1, k)
    yf = other.reshape(-1, k) if rows else other.reshape(-1, k).view(np.uint8)
    if k == n:  # same shapes: the flat arrays in chunks
        step = min(n, TAKE_CHUNK)
        idx = scratch("binary.index", (step,), np.uint16)
        x1, o1, y1 = xf[0], of[0], yf[0]
        for s in range(0, n, step):
            e = min(n, s + step)
            ix = idx[:e - s]
            if rows:
                np.add(x1[s:e], y1[s:e], out=ix, dtype=np.uint16)
            else:
                np.left_shift(x1[s:e], 8, out=ix, dtype=np.uint16)
                np.bitwise_or(ix, y1[s:e], out=ix)
            table.take(ix, None, o1[s:e], "clip")
        return
    m = of.shape[0]  # rows of k values, several a chunk
    per = max(1, TAKE_CHUNK // k)
    idx = scratch("binary.index", (per * k,), np.uint16)
    for r in range(0, m, per):
        e = min(m, r + per)
        ix = idx[:(e - r) * k].reshape(e - r, k)
        np.add(xf[r:e], yf, out=ix, dtype=np.uint16)
        table.take(ix, None, of[r:e], "clip")


class Workspace:
    """Work arrays shared by the bound calls of one invoke plan (``edgerun.runtime.plan``).

    A plan runs its calls one after another, so the temporaries of one bound call (im2col
    columns, accumulators, requantization work arrays) can live in the same memory as another's:
    one buffer per key, as large as its largest request, instead of one per layer. A kernel's
    ``compile`` asks through :func:`bound_arrays`; the plan calls :meth:`finish` once every step
    is compiled, which allocates the buffers and builds the deferred calls."""

    def __init__(self, arena_bytes: int = 0):
        self._need: dict[str, int] = {}
        self._bufs: dict[str, np.ndarray] = {}
        #: the plan's activation arena: a hint of the model's size for per-layer memory trade-offs
        self.arena_bytes = arena_bytes

    def request(self, key: str, shape, dtype) -> None:
        nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
        self._need[key] = max(self._need.get(key, 0), nbytes)

    def array(self, key: str, shape, dtype) -> np.ndarray:
        """A view of ``key``'s buffer (after :meth:`finish`) as ``shape`` / ``dtype``."""
        nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
        buf = self._bufs[key]
        off = (-buf.ctypes.data) % 64  # cache-line aligned
        return buf[off:off + nbytes].view(dtype).reshape(shape)

    def finish(self) -> None:
        self._bufs = {k: np.empty(n + 64, np.uint8) for k, n in self._need.items()}

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._bufs.values())


class Deferred:
    """A bound call to be built once the plan's :class:`Workspace` has its buffers."""

    __slots__ = ("build",)

    def __init__(self, build):
        self.build = build


_PLAN = threading.local()


def set_workspace(ws: Workspace | None) -> Workspace | None:
    """Set the workspace that :func:`bound_arrays` hands out during a plan's compilation (None:
    none); returns the one it replaces (a subgraph's plan compiled inside another's restores it)."""
    old = getattr(_PLAN, "ws", None)
    _PLAN.ws = ws
    return old


def current_workspace() -> Workspace | None:
    """The workspace of the plan being compiled (None outside a plan's compilation)."""
    return getattr(_PLAN, "ws", None)


def bound_arrays(needs, build):
    """``build(*arrays)`` over work arrays ``needs`` = [(key, shape, dtype), ...]: views of the
    compiling plan's shared :class:`Workspace` buffers (returned as a :class:`Deferred`, built
    by the plan once all its calls have asked), or new arrays of the call's own outside a plan.
    Keys of one call must differ; the arrays are temporaries, overwritten by other calls."""
    ws = getattr(_PLAN, "ws", None)
    if ws is None:
        return build(*[np.empty(shape, dtype) for _, shape, dtype in needs])
    for key, shape, dtype in needs:
        ws.request(key, shape, dtype)
    return Deferred(lambda: build(*[ws.array(key, shape, dtype) for key, shape, dtype in needs]))


_SCRATCH = threading.local()

#: scratch keys of the DEPTHWISE_CONV_2D, FULLY_CONNECTED and PRELU evals that share the buffer
#: of a CONV_2D / binary key: no eval of one kernel asks for both keys of a pair (depthwise and
#: FC never ask for conv.cols / conv.acc, depthwise never for weights.wide, conv and the binary
#: ops never for the others' keys), so one buffer, as large as the larger request, serves both
#: (pose detection int8: the pool 4.2 -> 3.1 MB)
_SHARED_KEYS = {"dw.cols": "conv.cols", "dw.acc": "conv.acc", "dw.slab": "weights.wide",
                "fc.x": "conv.cols", "fc.acc": "conv.acc", "prelu.idx": "binary.index",
                # the requantizer's float32 work rows: its callers' columns (conv.cols) are dead
                # once the accumulators it reads are made, and no binary op requantizes
                "requant.f32": "conv.cols", "requant.sign": "binary.index"}


def scratch(key: str, shape, dtype) -> np.ndarray:
    """A reusable, uninitialized work array for kernels (one buffer per key and thread, grown as needed).

    Kernels run one at a time per interpreter thread, so a buffer may be reused by the next
    kernel: use it only for temporaries inside one ``eval``, never for returned outputs. Reusing
    the memory avoids a fresh multi-megabyte allocation (and its page faults) per node.
    """
    try:
        views = _SCRATCH.views
    except AttributeError:
        views = _SCRATCH.views = {}
        _SCRATCH.pool = {}
    pool = _SCRATCH.pool
    key = _SHARED_KEYS.get(key, key)
    # the view made for this (key, shape, dtype) stays valid while the key's buffer is not regrown
    vkey = (key, shape if type(shape) is tuple else tuple(shape), dtype)
    hit = views.get(vkey)
    if hit is not None and hit[0] is pool.get(key):
        return hit[1]
    dt = np.dtype(dtype)
    nbytes = math.prod(int(d) for d in vkey[1]) * dt.itemsize
    buf = pool.get(key)
    if buf is None or buf.nbytes < nbytes + 64:  # room for the alignment offset too
        for stale in [k for k in views if k[0] == key]:  # views of the old buffer would keep it alive
            del views[stale]
        buf = pool[key] = np.empty(nbytes + 128, np.uint8)
    off = (-buf.ctypes.data) % 64  # cache-line aligned view
    view = buf[off:off + nbytes].view(dt).reshape(vkey[1])
    if len(views) > 4096:  # many distinct shapes (e.g. resized inputs): start over
        views.clear()
    views[vkey] = (buf, view)
    return view


def check_weighted_types(ctx, x_index: int, w_index: int, bias_index: int | None) -> bool:
    """Check the dtypes of a conv / fully-connected node; return True when it is int8.

    float32 needs float32 weights and bias (hybrid float-input / int8-weight kernels are not
    implemented); int8 needs int8 weights, an int32 bias and an int8 output.
    """
    x, w, y = ctx.input(x_index), ctx.input(w_index), ctx.output(0)
    b = ctx.input(bias_index) if bias_index is not None else None
    if x.dtype == "float32":
        if w.dtype != "float32":
            raise ctx.fail(f"hybrid float32 input with {w.dtype} weights is not supported")
        if b is not None and b.dtype != "float32":
            raise ctx.fail(f"float32 op with a {b.dtype} bias")
        if y.dtype != "float32":
            raise ctx.fail(f"float32 input with a {y.dtype} output")
        return False
    if w.dtype != "int8":
        raise ctx.fail(f"int8 input with {w.dtype} weights is not supported")
    if b is not None and b.dtype != "int32":
        raise ctx.fail(f"int8 op needs an int32 bias, got {b.dtype}")
    if y.dtype != "int8":
        raise ctx.fail(f"int8 input with a {y.dtype} output is not supported")
    return True
