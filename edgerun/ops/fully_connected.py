"""FULLY_CONNECTED and BATCH_MATMUL (float32, int8), bit-exact with LiteRT's reference kernels.

FULLY_CONNECTED: ``y = x @ W.T + bias`` with W of shape (units, K). The input is flattened to
(batches, K) with ``batches = size(x) / K``; the output is (batches, units), or keeps the input's
leading dimensions with ``keep_num_dims``. int8 (``reference_integer_ops::FullyConnected`` /
``FullyConnectedPerChannel``)::

    acc[c] = sum((x - x_zp) * (W[c] - w_zp)) + bias[c]       (w_zp only for per-tensor weights)
    y[c]   = clamp(int32(round(double(acc[c]) * s_eff[c])) + y_zp, act_lo, act_hi)
    s_eff[c] = double(s_x) * double(s_w[c]) / double(s_y)

LiteRT's *reference* FC requantizes in double precision with ``round`` (half away from zero) since
April 2025 ("Make the fully_connected ref kernel do requant in float"); its optimized kernels and
TFLM still use the fixed-point MultiplyByQuantizedMultiplier, which can differ by one LSB. edgerun
follows the reference kernel (its exactness oracle); :attr:`FullyConnected.fixed_point_requant`
switches to the fixed-point rule.

BATCH_MATMUL: ``matmul(adj_x ? x^T : x, adj_y ? y^T : y)`` over the last two axes, leading (batch)
axes broadcast, ranks 2..5. int8 (``reference_ops::BatchMatMul``)::

    acc = sum((x - x_zp) * (y - y_zp))
    out = clamp(MBQM(acc, m, shift) + out_zp, -128, 127)   (no fused activation)

with ``(m, shift) = QuantizeMultiplier(double(float(s_x * s_y)) / double(s_out))`` (the scale
product is a float32 product, as GetQuantizedConvolutionMultipler computes it). An int32 output
tensor receives ``sum(x * y)``: LiteRT's int8 -> int32 kernel ignores the zero points. Integer sums run on float BLAS, exact as described in
:mod:`edgerun.ops.conv`.
"""

from __future__ import annotations

import numpy as np

from edgerun.ops.common import (
    Requantizer,
    check_weighted_types,
    clip_ufunc,
    exact_chunk,
    exact_int_matmul,
    float_activation_range,
    qparams,
    quantized_activation_range,
    round_half_away,
    scratch,
)
from edgerun.ops.fixedpoint import quantize_multiplier, quantize_multipliers
from edgerun.ops.registry import Kernel, register

_INT32_MIN = -(1 << 31)


def fc_shapes(ctx) -> tuple[int, int, tuple]:
    """FULLY_CONNECTED's shape rule, shared by every dtype: (K, units, output shape).

    Weights are [units, K]; the input flattens into rows of K (``keep_num_dims`` keeps its
    leading dimensions, which needs its last one to be K)."""
    opts = ctx.options
    if opts.get("weights_format", 0):
        raise ctx.fail("shuffled weights formats are not supported")
    if ctx.input(1).sparsity is not None:
        raise ctx.fail("sparse weights are not supported (DENSIFY them first)")
    x_shape, w_shape = ctx.input_shape(0), ctx.input_shape(1)
    if len(w_shape) != 2:
        raise ctx.fail(f"weights must be 2-D, got {list(w_shape)}")
    units, k = w_shape
    size = int(np.prod(x_shape, dtype=np.int64))
    if k <= 0 or size % k:
        raise ctx.fail(f"input {list(x_shape)} cannot be flattened into rows of {k}")
    if opts.get("keep_num_dims", False):
        if x_shape[-1] != k:
            raise ctx.fail(f"keep_num_dims needs the input's last dimension ({x_shape[-1]}) to be {k}")
        return k, units, tuple(x_shape[:-1]) + (units,)
    return k, units, (size // k, units)


@register("FULLY_CONNECTED", "float32", "int8")
class FullyConnected(Kernel):
    """FULLY_CONNECTED with constant or run-time weights, optional bias, fused clamp activations."""

    #: False: LiteRT's reference requantization (double, round half away); True: fixed-point MBQM (TFLM, LiteRT optimized)
    fixed_point_requant = False

    def prepare(self):
        ctx, opts = self.ctx, self.ctx.options
        k, units, out_shape = fc_shapes(ctx)
        self.k, self.units, self.out_shape = k, units, out_shape
        w_t = ctx.input(1)
        self.quantized = check_weighted_types(ctx, 0, 1, 2)
        act = opts.get("fused_activation_function", 0)
        w = ctx.const(1)
        if self.quantized:
            s_x, self.x_zp = qparams(ctx.input(0))
            s_y, self.y_zp = qparams(ctx.output(0))
            q = w_t.quant
            if q is None or q.empty:
                raise ctx.fail("int8 weights have no quantization parameters")
            self.per_channel = q.scale.size > 1
            if self.per_channel and (q.scale.size != units or q.quantized_dimension != 0):
                raise ctx.fail(f"per-channel weights need {units} scales on axis 0, got {q.scale.size} "
                               f"on axis {q.quantized_dimension}")
            # per-channel weights are symmetric by spec: TFLite ignores their zero point
            self.w_zp = 0 if self.per_channel else int(q.zero_point[0])
            w_scales = np.asarray(q.scale, np.float32)
            self.lo, self.hi = quantized_activation_range(act, s_y, self.y_zp)
            self.eff = np.array([float(s_x) * float(s) / float(s_y) for s in w_scales])
            if self.per_channel:
                mult, shift = quantize_multipliers(self.eff)
            else:
                mult, shift = quantize_multiplier(float(np.float32(s_x) * w_scales[0]) / float(s_y))
            self.requant = Requantizer(mult, shift, self.y_zp, self.lo, self.hi)
            self.bias = self._int_bias()
            # the float32 matrix is made below, once it is known to be kept
            self.wmat = None if w is None else self._int_weights(w, matrix=False)
            # Fast path when |acc * eff| provably stays far inside int32 for every input: no
            # out-of-range handling or int32 wrap, and the rounding and clamp run on float64.
            self.fast = False
            if w is not None and not self.fixed_point_requant:
                max_xd = max(abs(-128 - self.x_zp), abs(127 - self.x_zp))
                acc_bound = max_xd * self._abs_row_sums(w) + np.abs(self.bias)
                # ... and the reference kernel's int32 acc + bias cannot wrap
                self.fast = (float((acc_bound * self.eff).max(initial=0)) < 2.0 ** 31 - 1024
                             and int(acc_bound.max(initial=0)) < 2 ** 31)
                self.acc_limit = int(acc_bound.max(initial=0))  # |acc + bias| never exceeds it
                self.bias_f = self.wmat[2].astype(np.float64)
            self.w8 = None
            if (self.fast and self.w_zp == 0 and w.dtype == np.int8 and k <= self.wmat[1]
                    and units * k * 4 > self.KEEP_FLOAT_BYTES):
                # large weights stay int8 in the model buffer and are widened per eval in blocks
                self.w8 = np.asarray(w).reshape(units, k)
            elif w is not None:
                self.wmat = self._int_weights(w)
        else:
            self.lo, self.hi = float_activation_range(act)
            b = ctx.const(2)
            if ctx.input(2) is not None and b is None:
                raise ctx.fail("bias must be a constant tensor")
            self.bias = None if b is None else np.asarray(b, np.float32).reshape(units)
            self.wmat = None if w is None else np.ascontiguousarray(np.asarray(w, np.float32).T)
        return [out_shape]

    #: float32 copies of int8 weights up to this size are kept; larger ones (a classifier's
    #: weights) are widened per eval into bounded scratch, ``WIDEN_BYTES`` at a time: a GEMV then
    #: takes about 2.3x as long (MobileNet-v1's 1024x1001 classifier: 0.14 -> 0.32 ms) for 4 MB less
    KEEP_FLOAT_BYTES = 1 << 20
    WIDEN_BYTES = 1 << 20
    #: the bound threshold-table call keeps a float64 copy of the weights (with the offsets
    #: row) up to this size; larger layers' bound calls stay on the float32 weights
    BOUND_F64_BYTES = 1 << 18

    def _widened_matmul(self, a: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``a @ (w - 0).T`` from the int8 weights, widened in blocks of units, into ``out``."""
        w8 = self.w8
        units, k = w8.shape
        step = max(1, self.WIDEN_BYTES // (4 * k))
        for u0 in range(0, units, step):
            wb = w8[u0:u0 + step]
            wf = scratch("weights.wide", wb.shape, np.float32)
            np.copyto(wf, wb, casting="unsafe")
            np.matmul(a, wf.T, out=out[:, u0:u0 + step])
        return out

    #: at most this many outputs (a batch-1 layer of up to 128 units) take a threshold table:
    #: the output is a nondecreasing step function of each unit's accumulator, so one
    #: ``searchsorted`` over every unit's least accumulator per output level replaces the double
    #: rounding's nine numpy calls (MLPerf Tiny's FC autoencoder has ten such layers)
    TABLE_MAX = 128
    #: ... and at most this many thresholds (64 KB): a model's tables must stay in the core's
    #: cache, or each lookup misses (MLPerf Tiny's autoencoder, ten 128-unit tables of 256 KB:
    #: 143 -> 223 us per invoke)
    TABLE_THRESHOLDS = 8192
    _table = None

    def _requant_double(self, x: np.ndarray) -> np.ndarray:
        """The fast path's requantization of ``x = acc + bias`` (float64, exact integers):
        round_half_away(x * eff) + zp, clamped; the same operations as eval."""
        v = x * self.eff_col
        v = round_half_away(v)
        v += self.y_zp
        return clip_ufunc(v, self.lo, self.hi, out=v)

    def _build_table(self):
        """(offsets, thresholds, subtrahend) or False. Level ``l``'s least ``x = acc + bias``
        is near ``(l - zp - 0.5) / eff``: the double product is within 2^-53 relative of the
        real one, so the kernel's own arithmetic is evaluated at six integers around that
        estimate and the first that reaches the level is kept; a window that does not bracket
        the step (never seen) disables the table."""
        self._table = False
        units = self.units
        if units * (self.hi - self.lo) > self.TABLE_THRESHOLDS or self.lo >= self.hi:
            return False
        eff = np.asarray(self.eff, np.float64).reshape(-1)
        eff = np.broadcast_to(eff, (units,))
        if not (eff > 0).all():
            return False
        self.eff_col = eff[:, None, None]
        levels = np.arange(self.lo + 1, self.hi + 1, dtype=np.float64)[None, :, None]
        est = np.floor((levels - self.y_zp - 0.5) / self.eff_col)
        cand = est + np.arange(-2, 4, dtype=np.float64)[None, None, :]  # (units, levels, 6)
        cand = np.clip(cand, -2.0 ** 52, 2.0 ** 52)
        reach = self._requant_double(cand) >= levels
        if not (reach[:, :, -1].all() and not reach[:, :, 0].any()):
            return False
        first = np.argmax(reach, axis=2)
        thr = np.take_along_axis(cand, first[:, :, None], axis=2)[:, :, 0]  # least x per level
        bound = float(np.abs(self.bias_f).max(initial=0)) + float(self.acc_limit) + 2.0
        thr = np.clip(thr, -bound, bound) - self.bias_f[:, None]  # in terms of acc
        stride = 2.0 ** (int(np.ceil(np.log2(4 * bound))) + 1)
        offsets = np.arange(units, dtype=np.float64) * stride
        n_levels = thr.shape[1]
        self._table = (offsets, (thr + offsets[:, None]).reshape(-1),
                       np.arange(units, dtype=np.int64) * n_levels - self.lo)
        return self._table

    def _int_bias(self) -> np.ndarray:
        b = self.ctx.const(2)
        if self.ctx.input(2) is not None and b is None:
            raise self.ctx.fail("bias must be a constant tensor")
        return np.zeros(self.units, np.int64) if b is None else np.asarray(b, np.int64).reshape(self.units)

    def _int_weights(self, w: np.ndarray, matrix: bool = True):
        """(K, units) float32 matrix of ``w - w_zp`` (None unless ``matrix``), its exact-sum
        chunk and the zero-point-folded bias. int8 weights with zero point 0 are reduced as they
        are: no int64 copy (8 bytes a weight: 8 MB on a 1024x1001 classifier)."""
        w = np.asarray(w)
        w = w.reshape(w.shape[0], -1)
        if self.w_zp == 0 and w.dtype == np.int8:
            maxw = max(-int(w.min(initial=0)), int(w.max(initial=0)))
            sums = w.sum(axis=1, dtype=np.int64)
            mat = np.ascontiguousarray(w.T, dtype=np.float32) if matrix else None
        else:
            wc = w.astype(np.int64) - self.w_zp
            maxw = int(np.abs(wc).max(initial=0))
            sums = wc.sum(axis=1)
            mat = np.ascontiguousarray(wc.T.astype(np.float32)) if matrix else None
        return mat, exact_chunk(128, max(1, maxw)), self.bias - self.x_zp * sums

    def _abs_row_sums(self, w: np.ndarray) -> np.ndarray:
        """Per unit, sum of ``|w - w_zp|`` (in blocks of rows: int16 work arrays of at most ~1 MB)."""
        w = np.asarray(w)
        w = w.reshape(w.shape[0], -1)
        step = max(1, (1 << 19) // max(1, w.shape[1]))
        return np.concatenate([np.abs(w[r:r + step].astype(np.int16) - self.w_zp).sum(axis=1, dtype=np.int64)
                               for r in range(0, w.shape[0], step)])

    def compile(self, ins, outs):
        """The invoke plan's bound call for an int8 layer with constant weights on the fast
        (double) requantization (see ``edgerun.runtime.plan``): the rows are copied into
        float64 columns with a last column of ones. When the outputs take the threshold table
        the weights carry the table's unit offsets as their last row, so one GEMM gives
        ``acc + offsets`` (exact integers below 2^53) and one ``searchsorted`` and one
        subtraction write the output view; otherwise the last row is the bias."""
        if not (self.quantized and self.fast and not self.fixed_point_requant and self.w8 is None
                and self.wmat is not None and self.wmat[0] is not None):
            return None
        x, out = ins[0], outs[0]
        if not (isinstance(x, np.ndarray) and isinstance(out, np.ndarray) and x.dtype == np.int8
                and out.dtype == np.int8 and x.flags.c_contiguous and out.flags.c_contiguous
                and out.shape == tuple(self.out_shape)):
            return None
        m, k, units = x.size // self.k, self.k, self.units
        table = False
        if m * units <= self.TABLE_MAX and (k + 1) * units * 8 <= self.BOUND_F64_BYTES:
            table = self._table if self._table is not None else self._build_table()
        src = x.reshape(m, k)
        copyto, dot, subtract = np.copyto, np.dot, np.subtract
        if table is not False:
            offsets, thresholds, sub = table
            cols = np.zeros((m, k + 1), np.float64)
            cols[:, k] = 1.0
            tgt = cols[:, :k]
            w64 = np.empty((k + 1, units), np.float64)
            w64[:k] = self.wmat[0]
            w64[k] = offsets
            acc = np.empty((m, units), np.float64)
            ss, flat, sub_t, o1 = thresholds.searchsorted, acc.reshape(-1), np.tile(sub, m), out.reshape(-1)

            def call():
                copyto(tgt, src, casting="unsafe")
                dot(cols, w64, out=acc)
                subtract(ss(flat, "right"), sub_t, out=o1, casting="unsafe")
            return call
        # eval's double requantization on fixed buffers: the float32 GEMM (exact: one chunk),
        # acc + bias in float64 (exact integers below 2^31), the same product by eff; rint is
        # C's round except at exact ties, which are found from the exact remainder v - rint(v)
        # and redone by round_half_away
        wmat, chunk, _ = self.wmat
        if k > chunk:
            return None
        a32 = np.empty((m, k), np.float32)
        acc32 = np.empty((m, units), np.float32)
        acc = np.empty((m, units), np.float64)
        r, d = np.empty_like(acc), np.empty_like(acc)
        o2 = out.reshape(m, units)
        bias_f, eff, zp, lo, hi = self.bias_f, self.eff, float(self.y_zp), self.lo, self.hi
        multiply, rint, add, matmul = np.multiply, np.rint, np.add, np.matmul

        def call_double():
            copyto(a32, src, casting="unsafe")
            matmul(a32, wmat, out=acc32)
            add(acc32, bias_f, out=acc)
            multiply(acc, eff, out=acc)
            rint(acc, out=r)
            subtract(acc, r, out=d)
            if d.max() == 0.5 or d.min() == -0.5:
                copyto(r, round_half_away(acc))
            add(r, zp, out=r)
            clip_ufunc(r, lo, hi, out=r)
            copyto(o2, r, casting="unsafe")
        return call_double

    def eval(self, inputs):
        x, w = inputs[0], inputs[1]
        rows = x.reshape(-1, self.k)
        if not self.quantized:
            wmat = self.wmat if self.wmat is not None else np.asarray(w, np.float32).T
            y = np.matmul(rows, wmat)
            if self.bias is not None:
                y += self.bias
            np.clip(y, self.lo, self.hi, out=y)
            return [y.reshape(self.out_shape)]
        if self.fast and not self.fixed_point_requant:
            wmat, chunk, _ = self.wmat
            a = scratch("fc.x", rows.shape, np.float32)
            np.copyto(a, rows, casting="unsafe")
            out = scratch("fc.acc", (rows.shape[0], self.units), np.float32) if self.k <= chunk else None
            acc = self._widened_matmul(a, out) if self.w8 is not None else exact_int_matmul(a, wmat, chunk, out)
            if acc.size <= self.TABLE_MAX:
                table = self._table if self._table is not None else self._build_table()
                if table is not False:
                    offsets, thresholds, sub = table
                    idx = np.searchsorted(thresholds, np.add(acc, offsets).reshape(-1), side="right")
                    return [np.subtract(idx.reshape(acc.shape), sub, out=np.empty(acc.shape, np.int8),
                                        casting="unsafe").reshape(self.out_shape)]
            v = np.add(acc, self.bias_f)  # exact integers in float64
            v *= self.eff
            v = round_half_away(v)
            v += self.y_zp
            clip_ufunc(v, self.lo, self.hi, out=v)
            return [v.astype(np.int8).reshape(self.out_shape)]
        wmat, chunk, bias = self.wmat if self.wmat is not None and self.wmat[0] is not None else self._int_weights(w)
        acc = exact_int_matmul(rows.astype(np.float32), wmat, chunk).astype(np.int64)
        acc += bias
        # the reference kernel's int32 ``acc += bias`` wraps (a saturated bias on a large sum)
        acc -= _INT32_MIN
        acc &= 0xFFFFFFFF
        acc += _INT32_MIN
        if self.fixed_point_requant:
            return [self.requant(acc).reshape(self.out_shape)]
        v = round_half_away(acc * self.eff)
        if np.abs(v).max(initial=0) >= 2.0 ** 31:  # C's out-of-range double -> int32 gives INT32_MIN on x86
            v = np.where(np.abs(v) >= 2.0 ** 31, float(_INT32_MIN), v)
        y = v.astype(np.int64) + self.y_zp
        y = ((y - _INT32_MIN) & 0xFFFFFFFF) + _INT32_MIN  # int32 wrap of the zero-point add
        np.clip(y, self.lo, self.hi, out=y)
        return [y.astype(np.int8).reshape(self.out_shape)]


@register("BATCH_MATMUL", "float32", "int8")
class BatchMatMul(Kernel):
    """BATCH_MATMUL with adj_x / adj_y and broadcast batch dimensions (numpy matmul broadcasting)."""

    def prepare(self):
        ctx, opts = self.ctx, self.ctx.options
        xs, ys = ctx.input_shape(0), ctx.input_shape(1)
        if not (2 <= len(xs) <= 5 and 2 <= len(ys) <= 5):
            raise ctx.fail(f"inputs must have rank 2 to 5, got {list(xs)} and {list(ys)}")
        self.adj_x, self.adj_y = bool(opts.get("adj_x", False)), bool(opts.get("adj_y", False))
        rows = xs[-1] if self.adj_x else xs[-2]
        kx = xs[-2] if self.adj_x else xs[-1]
        ky = ys[-1] if self.adj_y else ys[-2]
        cols = ys[-2] if self.adj_y else ys[-1]
        if kx != ky:
            raise ctx.fail(f"inner dimensions differ: {list(xs)} (adj_x={self.adj_x}) and {list(ys)} "
                           f"(adj_y={self.adj_y})")
        try:
            batch = np.broadcast_shapes(tuple(xs[:-2]), tuple(ys[:-2]))
        except ValueError:
            raise ctx.fail(f"batch dimensions {list(xs[:-2])} and {list(ys[:-2])} do not broadcast") from None
        self.k = kx
        self.out_shape = tuple(batch) + (rows, cols)
        self.quantized = ctx.input(0).dtype == "int8"
        if ctx.input(1).dtype != ctx.input(0).dtype:
            raise ctx.fail(f"{ctx.input(0).dtype} x {ctx.input(1).dtype} batch matmul (hybrid) is not supported")
        if self.quantized:
            for t in (ctx.input(0), ctx.input(1), ctx.output(0)):
                if t.quant is not None and t.quant.per_axis:
                    raise ctx.fail(f"tensor '{t.name}' has per-axis quantization; BATCH_MATMUL takes per-tensor")
            if ctx.output(0).dtype not in ("int8", "int32"):
                raise ctx.fail(f"int8 batch matmul with a {ctx.output(0).dtype} output is not supported")
            s_x, self.x_zp = qparams(ctx.input(0))
            s_y, self.y_zp = qparams(ctx.input(1))
            out = ctx.output(0)
            self.int32_out = out.dtype == "int32"
            if not self.int32_out:
                s_o, o_zp = qparams(out)
                mult, shift = quantize_multiplier(float(np.float32(s_x) * np.float32(s_y)) / float(s_o))
                self.requant = Requantizer(mult, shift, o_zp, -128, 127)
                # |x - zx|, |y - zy| <= 255: no int32 wrap of the accumulator to emulate below 2^31
                self.requant.acc_bound = float(self.k * 255 * 255)
            self.chunk = exact_chunk(128, 128)
        return [self.out_shape]

    def eval(self, inputs):
        x, y = inputs[0], inputs[1]
        if self.adj_x:
            x = np.swapaxes(x, -1, -2)
        if self.adj_y:
            y = np.swapaxes(y, -1, -2)
        if not self.quantized:
            return [np.matmul(x, y).reshape(self.out_shape)]
        # sum((x - zx)(y - zy)) = sum(xy) - zy*rowsum(x) - zx*colsum(y) + K*zx*zy, with |x|, |y| <= 128
        acc = exact_int_matmul(x.astype(np.float32), y.astype(np.float32), self.chunk).astype(np.int64)
        if self.int32_out:
            # LiteRT's int8 x int8 -> int32 kernel sums raw products: zero points are not applied
            return [np.broadcast_to(acc, self.out_shape).astype(np.int32)]
        if self.y_zp:
            acc -= self.y_zp * x.sum(axis=-1, dtype=np.int64)[..., :, None]
        if self.x_zp:
            acc -= self.x_zp * y.sum(axis=-2, dtype=np.int64)[..., None, :]
            acc += self.k * self.x_zp * self.y_zp
        return [self.requant(np.broadcast_to(acc, self.out_shape))]
