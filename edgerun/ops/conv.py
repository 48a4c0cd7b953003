"""CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV (float32, int8), bit-exact with LiteRT's reference kernels.

Layouts are TFLite's: activations NHWC, CONV_2D / TRANSPOSE_CONV filters OHWI, DEPTHWISE_CONV_2D
filters 1HWC (C = in_channels * depth_multiplier, output channel ``c * dm + m`` reads input
channel ``c``).

int8 semantics (``reference_integer_ops::ConvPerChannel`` / ``DepthwiseConvPerChannel`` /
``TransposeConv``), per output channel ``c``::

    acc[c] = sum((x - x_zp) * w[c]) + bias[c]        (padding taps contribute nothing)
    y[c]   = clamp(MBQM(acc[c], m[c], shift[c]) + y_zp, act_lo, act_hi)

with ``(m[c], shift[c]) = QuantizeMultiplier(double(s_x) * double(s_w[c]) / double(s_y))``; a
per-tensor filter scale is broadcast to every channel. Filter zero points are not used (the spec
makes them 0). Products are summed on float BLAS: int8 x int8 products summed in float32 are exact
while every partial sum stays below 2^24, and longer reductions are chunked
(:func:`edgerun.ops.common.exact_int_matmul`). The input zero point is folded into the bias:
``sum((x - zp) * w) = sum(x * w) - zp * sum(w)``, padding with ``zp`` so padded taps still
contribute nothing. TRANSPOSE_CONV drops out-of-range contributions instead of padding, so it
subtracts the zero point from the input directly.

float32 semantics: the same sums in float32 (BLAS order, not the reference's loop order; LiteRT
agreement is to float rounding) plus bias, then the fused activation as a clamp (TANH / SIGN_BIT
are not applied by these ops, as in TFLite).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from edgerun import native
from edgerun.ops.common import (
    BoundOutput,
    Requantizer,
    bound_arrays,
    check_weighted_types,
    conv_output_size,
    conv_padding,
    current_workspace,
    exact_chunk,
    exact_int_matmul,
    float_activation_range,
    qparams,
    quantized_activation_range,
    scratch,
)
from edgerun.ops.fixedpoint import F64_MAX_RIGHT, bounded_requantizer, f64_passes, quantize_multipliers  # noqa: F401 (F64_MAX_RIGHT: re-export)
from edgerun.ops.registry import Kernel, register
from edgerun.schema.tflite import Padding


def _window_view(xp: np.ndarray, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int,
                 oh: int, ow: int) -> np.ndarray:
    """Read-only view of the padded NHWC input ``xp`` with the im2col layout (N, OH, OW, KH, KW, C).

    Without column dilation a window row's KW*C values are contiguous in ``xp``, so the view is
    5-D (N, OH, OW, KH, KW*C): the same element order, with a longer inner loop for the copy.
    """
    n, _, _, c = xp.shape
    s0, s1, s2, s3 = xp.strides
    if dw == 1 and s2 == c * s3:
        return as_strided(xp, (n, oh, ow, kh, kw * c), (s0, s1 * sh, s2 * sw, s1 * dh, s3), writeable=False)
    return as_strided(xp, (n, oh, ow, kh, kw, c), (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3), writeable=False)


def _conv_quant(ctx, x, n_channels: int) -> Requantizer:
    """Per-output-channel (multiplier, shift) and the activation clamp, as PopulateConvolutionQuantizationParams."""
    w, y = ctx.input(1), ctx.output(0)
    if w.quant is None or w.quant.empty:
        raise ctx.fail("int8 filter has no quantization parameters")
    s_x, _ = qparams(x)
    s_y, y_zp = qparams(y)
    w_scales = np.asarray(w.quant.scale, dtype=np.float32)
    if w_scales.size not in (1, n_channels):
        raise ctx.fail(f"filter has {w_scales.size} scales for {n_channels} output channels")
    w_scales = np.broadcast_to(w_scales, (n_channels,))
    reals = [float(s_x) * float(s) / float(s_y) for s in w_scales]
    mult, shift = quantize_multipliers(reals)
    lo, hi = quantized_activation_range(ctx.options.get("fused_activation_function", 0), s_y, y_zp)
    # the float32 fast path applies once the kernel sets ``acc_bound`` (CONV_2D, DEPTHWISE_CONV_2D)
    return bounded_requantizer(mult, shift, y_zp, lo, hi)


def _bias(ctx, index: int, n: int, dtype) -> np.ndarray:
    """Constant bias of ``n`` values (zeros when the optional input is omitted)."""
    t = ctx.input(index)
    if t is None:
        return np.zeros(n, dtype)
    b = ctx.const(index)
    if b is None:
        raise ctx.fail("bias must be a constant tensor")
    if b.size != n:
        raise ctx.fail(f"bias has {b.size} values for {n} output channels")
    return np.asarray(b, dtype).reshape(n)


def _same_padding(ctx, opts, h, w, kh, kw, sh, sw, dh, dw):
    pad = opts.get("padding", Padding.SAME)
    oh = conv_output_size(pad, h, kh, sh, dh)
    ow = conv_output_size(pad, w, kw, sw, dw)
    if oh <= 0 or ow <= 0:
        raise ctx.fail(f"input {h}x{w} is smaller than the dilated {kh}x{kw} filter with VALID padding")
    pt, pb = conv_padding(pad, h, kh, sh, dh, oh)
    pl, pr = conv_padding(pad, w, kw, sw, dw, ow)
    return oh, ow, pt, pb, pl, pr


def _strides(ctx, opts, dilation=True):
    sh, sw = int(opts.get("stride_h", 1)), int(opts.get("stride_w", 1))
    dh = int(opts.get("dilation_h_factor", 1)) if dilation else 1
    dw = int(opts.get("dilation_w_factor", 1)) if dilation else 1
    if min(sh, sw, dh, dw) <= 0:
        raise ctx.fail(f"strides ({sh}, {sw}) and dilations ({dh}, {dw}) must be positive")
    return sh, sw, dh, dw


class _PaddedInput:
    """The input, padded: a scratch NHWC buffer whose border is set to a constant (0, or the input zero point)."""

    def __init__(self, shape, pads, dtype, fill: float):
        n, h, w, c = shape
        self.pt, self.pb, self.pl, self.pr = pads
        self.trivial = not any(pads)
        self.shape = (n, h + self.pt + self.pb, w + self.pl + self.pr, c)
        self.hw = (h, w)
        self.dtype = np.dtype(dtype)
        self.fill = fill
        # A small padded input gets its own buffer, its border filled once here: eval then only
        # copies the interior. Large ones share a scratch buffer (memory) and refill the border.
        self.own = None
        if not self.trivial and self.nbytes <= self.OWN_BYTES:
            self.make_own()

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    def make_own(self) -> None:
        h, w = self.hw
        self.own = np.full(self.shape, self.fill, self.dtype)
        self.inner = self.own[:, self.pt:self.pt + h, self.pl:self.pl + w, :]

    #: 4 KiB made in prepare, and up to OWN_BYTES_BOUND for a layer a small plan binds (its
    #: window view needs the same array at every invoke; see _fixed_windows). Refilling the
    #: border of a larger input per eval costs little (palm and pose detection ran at the same
    #: CPU time with 64 KiB as with 256 KiB; face landmark and iris int8 within about 2 % with
    #: 4 KiB as with 64 KiB, for 0.5 MB less on face landmark, 0.65 MB on iris).
    OWN_BYTES = 4 * 1024
    OWN_BYTES_BOUND = 64 * 1024

    def keeps(self, xp: np.ndarray, x: np.ndarray) -> bool:
        """Whether a view of ``xp`` (this call's result for input ``x``) may be cached: the
        kernel's own padded buffer, or the input itself (unpadded), never a shared scratch buffer."""
        return xp is self.own or xp is x

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.own is not None:
            np.copyto(self.inner, x, casting="unsafe")
            return self.own
        if self.trivial:
            if x.dtype == self.dtype:
                return x
            buf = scratch("conv.pad", x.shape, self.dtype)
            np.copyto(buf, x, casting="unsafe")
            return buf
        buf = scratch("conv.pad", self.shape, self.dtype)
        (h, w), pt, pl = self.hw, self.pt, self.pl
        buf[:, :pt] = self.fill
        buf[:, pt + h:] = self.fill
        buf[:, pt:pt + h, :pl] = self.fill
        buf[:, pt:pt + h, pl + w:] = self.fill
        np.copyto(buf[:, pt:pt + h, pl:pl + w, :], x, casting="unsafe")
        return buf


#: output channels per block of ``_abs_row_sums`` (its int16 temporary stays under 128 KB for
#: rows of up to 1,024 weights)
ABS_SUM_ROWS = 64


def _abs_row_sums(w2: np.ndarray) -> np.ndarray:
    """``sum(|w|)`` per row of an int8 (O, K) filter, as int64, a block of rows at a time."""
    res = np.empty(w2.shape[0], np.int64)
    for r0 in range(0, w2.shape[0], ABS_SUM_ROWS):
        np.abs(w2[r0:r0 + ABS_SUM_ROWS], dtype=np.int16).sum(axis=1, dtype=np.int64, out=res[r0:r0 + ABS_SUM_ROWS])
    return res


def _bindable(x, out, shape) -> bool:
    """Whether the invoke plan's arrays can be bound: a fixed int8 input and an int8 output view
    of the kernel's output shape, both C-contiguous."""
    return (isinstance(x, np.ndarray) and isinstance(out, np.ndarray) and x.dtype == np.int8
            and out.dtype == np.int8 and out.shape == tuple(shape) and out.flags.c_contiguous
            and x.flags.c_contiguous)


def _fixed_windows(pad: _PaddedInput, x: np.ndarray, make_view):
    """(window view, (interior, input) to copy per call or None) over a padded input that is the
    same array at every invoke (the input itself, or the kernel's own padded buffer), or
    (None, None) for a shared scratch buffer."""
    if pad.trivial and pad.dtype == x.dtype:
        return make_view(x), None
    if pad.own is None and not pad.trivial and pad.nbytes <= pad.OWN_BYTES_BOUND:
        ws = current_workspace()
        if ws is None or ws.arena_bytes <= SMALL_ARENA_BYTES:  # (large plans: see OWN_BYTES)
            pad.make_own()
    if pad.own is not None:
        return make_view(pad.own), (pad.inner, x)
    return None, None


def _cols_view(cols: np.ndarray, shape) -> np.ndarray | None:
    """``cols`` reshaped to ``shape`` as a view (a copy target), or None when numpy would copy."""
    v = cols.reshape(shape)
    return v if np.shares_memory(v, cols) else None


def _warm(requant, bias, c: int, values: int) -> None:
    """The requantizer's fitted constants made at prepare (``BoundedRequantizer.warm``)."""
    warm = getattr(requant, "warm", None)
    if warm is not None:
        warm(bias, c, values)


def _threshold_table(requant, bias, m: int, c: int):
    """The requantizer's threshold table for ``m`` rows of ``c`` channels, under the conditions
    its own call takes it (at most ``TABLE_MAX`` values, per-tensor or per-channel int8), or None."""
    table = getattr(requant, "_table", None)
    if (table is None or m * c > requant.TABLE_MAX or requant.dtype is not np.int8 or requant.m.ndim > 1
            or requant.m.size not in (1, c) or not isinstance(bias, np.ndarray) or bias.shape != (c,)):
        return None
    return table(bias, c)


def _table_operands(m: int, wmat: np.ndarray, table, src_shape, depthwise: bool = False):
    """float64 GEMM operands that fold a threshold table's channel offsets into the product: the
    columns (``m`` rows of ``k`` taps, then a tap of ones; depthwise: each tap per channel), the
    view of the taps that the window copy fills, and the filter ``wmat`` (``k`` rows) with the
    offsets ``table[0]`` as row ``k``. None where the window cannot be written as one view."""
    k = wmat.shape[0]
    cols = np.zeros((m, k + 1, wmat.shape[1]) if depthwise else (m, k + 1), np.float64)
    cols[:, k] = 1.0
    tgt = _cols_view(cols[:, :k], src_shape)
    if tgt is None:
        return None
    w64 = np.empty((k + 1, *wmat.shape[1:]), np.float64)
    w64[:k] = wmat
    w64[k] = table[0]
    return cols, tgt, w64


def _table_tail(table, acc: np.ndarray, out: np.ndarray, rows: int):
    """The threshold table's lookup as bound pieces: ``acc`` (float64, channel offsets already
    added by the product) -> ``out``: (searchsorted, flat acc, per-value subtrahend, flat out)."""
    _, thresholds, sub = table
    return thresholds.searchsorted, acc.reshape(-1), np.tile(sub, rows), out.reshape(-1)


def _f64_requant(requant, acc: np.ndarray, bias, out: np.ndarray, width: int | None = None, work=None,
                 channel_bounds: bool = True):
    """``requant(acc, bias, out)`` as bound float64 passes with no recomputation, or None:
    :func:`edgerun.ops.fixedpoint.f64_passes` over the requantizer's constants tiled to rows of
    about ``width`` values (``BoundedRequantizer.f64_tiles``, default ``F64_WIDTH``; the proof
    is in ``f64_consts``), then one XOR of the output bytes. ``width`` of the whole array runs
    1-D passes (numpy's fastest loops: a (rows, w) array against a (w,) row of constants takes
    about twice the time per pass, whatever w). ``work``: the (float64, int64) work arrays of
    ``acc``'s size (default: new ones); ``channel_bounds``: see ``f64_consts``."""
    m, c = acc.shape
    tiles_of = getattr(requant, "f64_tiles", None)
    if (tiles_of is None or acc.dtype != np.float32 or not acc.flags.c_contiguous or requant.dtype is not np.int8
            or requant.m.ndim > 1 or requant.m.size not in (1, c) or not isinstance(bias, np.ndarray)
            or bias.shape != (c,)):
        return None
    # results of x < 0 clamp to qmin when qmin >= zero point (a fused RELU / RELU6): the sign
    # term then changes nothing and leaves the passes (f64_passes), its +delta/2 moves into cc
    signed = requant.qmin < requant.zero_point
    tiles = tiles_of(bias, c, m, width, channel_bounds, signed)
    if tiles is None:
        return None
    w, consts = tiles
    shape = (acc.size,) if w == acc.size else (acc.size // w, w)
    a2 = acc.reshape(shape)
    t, sg = work if work is not None else (np.empty(shape, np.float64), np.empty(shape, np.int64))
    t, sg = t.reshape(shape), sg.reshape(shape)
    u = out.reshape(shape).view(np.uint8)
    lo, hi = float(requant.qmin + 128), float(requant.qmax + 128) + 0.5
    x80, bxor = np.uint8(0x80), np.bitwise_xor

    def call():
        f64_passes(a2, t, sg, u, consts, lo, hi, signed)
        bxor(u, x80, out=u)
    return call


#: a bound call's float64 requantization keeps its per-channel constants (four float64 / int64
#: values per accumulator) repeated over the whole output, so that every pass is one 1-D loop,
#: up to this many bytes per layer (256 KB: 8192 accumulators; MLPerf Tiny's DS-CNN layers
#: have 8000): kws's bound 1x1 layers 45 -> 39 us per call. Larger layers take the
#: requantizer's own call. 320 KB (vww's 9216-value layers 14-24 us faster each) put 1.2 MB of
#: constants into palm detection, its peak memory 1.92x -> 2.06x LiteRT's; at 18432 values the
#: float64 passes gain 5-19 us for 576 KB more a layer, at 36864 they lose (41 us: the constants
#: leave the cache); float64 passes over constants tiled to (rows, F64_WIDTH) cost about twice
#: a 1-D pass
F64_FULL_BYTES = 128 * 1024
#: ... and in plans whose activation arena is at most SMALL_ARENA_BYTES (MLPerf Tiny, keyword
#: spotters: LiteRT's own fixed ~9 MB dwarfs their tensors, so the memory is there), up to
#: 640 KB a layer (was 320 KB; 640 since the RELU layers' passes lost the sign term's array:
#: vww's 18432-value layers 52 -> 30 us, ResNet-8's 16384-value layers 48-51 -> 27-38 us;
#: vww's peak memory 1.37x -> 1.6x LiteRT's); larger layers (small plans only) tile their
#: constants to a part of the output within half of this and run the passes over its rows
F64_FULL_BYTES_SMALL = 640 * 1024
#: widest row the float64 passes' per-channel constants are tiled to in small plans (see
#: ``_requant_binding``; vww int8: 9.7 -> 7.6 MB peak growth, 1.33 -> 1.25 ms CPU in-process;
#: ResNet-8 6.5 -> 5.5 MB, 0.79 -> 0.83 ms; 2304 would take vww to 6.4 MB but 1.38 ms)
F64_TILE_VALUES = 4608
#: ... and at most this many for layers of at least F64_TILE_WIDE_C channels (rows of that
#: many values already keep numpy's inner loop long): vww 7.5 -> 5.9 MB peak growth for 1.18-1.29 ->
#: 1.24-1.33 ms CPU in-process (+3-6 %); 2304 gave 6.4 MB and no faster
F64_TILE_VALUES_WIDE_C = 1152
F64_TILE_WIDE_C = 32
#: ... and in larger plans (whose bound layers are the small ones: BIND_BYTES_LARGE_PLAN)
F64_TILE_VALUES_LARGE_PLAN = 128
SMALL_ARENA_BYTES = 128 * 1024  # vww 81 KB, ResNet-8 51 KB, kws 16 KB; iris landmark 204 KB


def _requant_binding(requant, bias, out: np.ndarray, m: int, c: int):
    """(work array needs, make): ``make(acc, *work)`` is the bound requantization of the (m, c)
    float accumulators ``acc`` (+ ``bias``) into ``out``: the float64 passes of
    :func:`_f64_requant` over whole-output constants where they apply and fit
    ``F64_FULL_BYTES``, else the requantizer's own call (the result copied when it returns
    another array). A bound copy of ``BoundedRequantizer``'s float32 passes was measured and
    dropped: in-model no faster (str_ww, kws, vww, thread CPU in-process A/B), since its int64
    recomputation of the values next to a step runs on almost every call of these small layers."""
    n = m * c
    copyto = np.copyto

    def make(acc, *_):
        o2 = out.reshape(acc.shape)

        def call_base():
            res = requant(acc, bias, out=o2)
            if res is not o2:
                copyto(o2, res)
        return call_base
    native_args = getattr(requant, "native_args", None)
    nargs = native_args(bias, c, m) if native_args is not None and n >= requant.NATIVE_MIN else None
    if nargs is not None and out.dtype == np.int8 and out.flags.c_contiguous and out.size == n:
        # edgerun.native's one loop over the accumulators, its arguments made once
        fn, w, _, tail = nargs

        def make_native(acc, *_):
            if acc.dtype != np.float32 or not acc.flags.c_contiguous or acc.size != n:
                return make(acc)
            head = (acc.ctypes.data, out.ctypes.data, n // w, w)

            def call_native():
                fn(*head, *tail)
            return call_native
        return [], make_native
    ws = current_workspace()
    small_plan = ws is not None and ws.arena_bytes <= SMALL_ARENA_BYTES
    cap = F64_FULL_BYTES_SMALL if small_plan else F64_FULL_BYTES
    # per-channel accumulator bounds (more layers provably on the float64 passes, the exact
    # two-stage form among them) in small plans only: larger plans keep their memory (iris
    # landmark's and pose detection's peak grew 1.1 MB, to 2.06x and 2.02x LiteRT's)
    chb = small_plan
    consts = requant.f64_consts(bias, c, chb) if getattr(requant, "f64_consts", None) is not None and isinstance(
        bias, np.ndarray) and bias.shape == (c,) else None
    if consts is not None and len(consts) == 5 and not small_plan:
        consts = None  # the exact two-stage form (vww's late layers) stays to small plans' memory
    # bytes of tiled constants: 8 a value per array, the sign term's array only when it is used
    arrays = len(consts) - (requant.qmin >= requant.zero_point) if consts is not None else 0
    width = n
    cap_w = F64_TILE_VALUES if c < F64_TILE_WIDE_C else F64_TILE_VALUES_WIDE_C
    if not small_plan:
        cap_w = F64_TILE_VALUES_LARGE_PLAN
    if consts is not None and n > cap_w:
        # constants tiled to a half (a quarter, ...) of the output, the passes over 2 (4, ...)
        # rows of that width, at most F64_TILE_VALUES wide: vww's 36864-value layer 77 -> ~59 us
        # (widths 18432, 9216 and 4608 alike; 2304 +30 %); tiled to whole outputs, vww's
        # constants had been 4.9 MB
        while width % 2 == 0 and (width // 2) % c == 0 and width > cap_w:
            width //= 2
    # (larger plans: only layers whose whole-output tiles would fit, as before the narrower
    # tiles; more float64 layers grow the workspace's work arrays: face landmark +45 KB)
    if consts is not None and (width if small_plan else n) * 8 * arrays <= cap:
        def make_f64(acc, t, sg):
            call = _f64_requant(requant, acc, bias, out, width=width, work=(t, sg), channel_bounds=chb)
            if call is not None:
                return call
            return make(acc)
        return [("rq.f64", (n,), np.float64), ("rq.sign", (n,), np.int64)], make_f64
    return [], make


#: bytes of im2col columns (and of accumulators) a bound call of a layer beyond the tiny /
#: small paths may use: they live in the plan's shared workspace (edgerun.ops.common.Workspace:
#: one buffer per role, as large as the largest layer's), not in each layer (704 KB: vww's
#: 24x24x32 depthwise layer's 663 KB of columns, 174 -> 135 us bound; ResNet-8's 32x32x16 3x3
#: convolutions' 576 KB; pose detection's next layer, 735 KB, would take its peak memory to
#: 1.89x LiteRT's). Own per-layer buffers were capped at 256 KB before (512 KB took kws
#: 3.24x -> 2.95x but MediaPipe int8 peak memory / LiteRT's to 1.61-1.96x)
BIND_BYTES = 704 * 1024

#: ... and of accumulators (256 KB: the accumulators eval requantizes at a time; pose
#: detection's workspace was 735 KB of accumulators with BIND_BYTES for both)
BIND_ACC_BYTES = 1 << 18
#: ... and of an int8 filter widened per call (160 KB: ResNet-8's 3x3x64x64, 147 KB, 124 ->
#: 84 us; pose detection's 210 KB and palm's 256 KB filters stay in eval, whose widening
#: scratch they share with the other layers)
BIND_WIDEN_BYTES = 160 * 1024
#: plans with a larger activation arena (SMALL_ARENA_BYTES) bind layers whose columns,
#: accumulators and requantization work arrays add up to at most this (the per-layer budget
#: before the shared workspace) and widen no filter per call: their layers take milliseconds,
#: so a bound call saves nothing measurable, and the workspace would sit beside the eval
#: layers' scratch (pose detection: 1 MB of workspace, peak memory 2.00x -> 2.03x LiteRT's)
BIND_BYTES_LARGE_PLAN = 1 << 18


def _bind_budget() -> tuple[int, int, int]:
    """(columns, accumulators, widened filter) byte limits of bound calls in the plan being
    compiled: BIND_BYTES / BIND_ACC_BYTES / BIND_WIDEN_BYTES in small plans (and outside a
    plan), BIND_BYTES_LARGE_PLAN for all of a layer's work arrays (columns, accumulators at 20
    bytes a value) and no widening in larger ones."""
    ws = current_workspace()
    if ws is None or ws.arena_bytes <= SMALL_ARENA_BYTES:
        return BIND_BYTES, BIND_ACC_BYTES, BIND_WIDEN_BYTES
    return BIND_BYTES_LARGE_PLAN, BIND_BYTES_LARGE_PLAN // 5, 0

#: a bound threshold-table call keeps a float64 copy of its filter (with the offsets row) up to
#: this size; larger filters stay float32 (the requantizer's own call still takes the table)
BOUND_F64_BYTES = 1 << 18


#: bytes of a (o, k) filter widened per bound call at a time (``_bind_gemm``'s ``w8t`` in
#: blocks of output channels): iris landmark's 213x512 GEMV in two halves had grown the
#: shared ``weights.wide`` buffer from 144 to 256 KB
LAZY_BLOCK_BYTES = 1 << 17


def _keep_float() -> bool:
    """Whether the plan being compiled keeps float32 copies of its small int8 filters
    (``Conv2D.lazy_float``): plans whose activation arena is at most SMALL_ARENA_BYTES (MLPerf
    Tiny, keyword spotters: their calls are microseconds long, and LiteRT's own fixed memory
    dwarfs the copies) and calls compiled outside a plan."""
    ws = current_workspace()
    return ws is None or ws.arena_bytes <= SMALL_ARENA_BYTES


def _bind_gemm(src, fill, wmat, table, requant, bias, out, m: int, k: int, o: int, rq_shape=None, w8=None,
               w8t=None):
    """The bound call of an int8 CONV_2D: copy ``src`` (a fixed int8 view of (m, k) values) to
    float32 columns, multiply by ``wmat`` (k, o), requantize into ``out`` (columns, accumulators
    and requantization work arrays from the plan's workspace: ``bound_arrays``); ``rq_shape``:
    the (m, o) accumulators as the requantizer's (rows, channels), when a GEMM row holds several
    output pixels (``DepthwiseConv2D._compile_block_diagonal``); ``w8``: an (o, k) int8 filter
    to widen into the workspace per call instead of ``wmat`` (a filter eval widens too); ``w8t``:
    a (k, o) int8 filter (``Conv2D.lazy_float``: a C-contiguous copy, or the model buffer's (o,
    k) filter transposed) widened per call into the ``weights.wide`` scratch buffer, which the
    eval layers' widening shares, in blocks of output channels of at most ``Conv2D.WIDEN_BYTES``.

    With a threshold table the columns are float64 with a last column of ones and the filter
    gets the table's channel offsets as its last row: the GEMM then yields ``acc + offsets``
    directly (integers below 2^53: exact whatever the summation order), and the requantization
    is one ``searchsorted`` and one subtraction into the output (own buffers: at most
    TABLE_MAX values, the ones column is written once)."""
    copyto, subtract = np.copyto, np.subtract
    if table is not None and (k + 1) * o * 8 <= BOUND_F64_BYTES:
        ops = _table_operands(m, wmat if wmat is not None else w8t, table, src.shape)
        if ops is None:
            return None
        cols, tgt, w64 = ops
        acc = np.empty((m, o), np.float64)
        ss, flat, sub, o1 = _table_tail(table, acc, out, m)
        dot = np.dot
        if fill is None:
            def call():
                copyto(tgt, src, casting="unsafe")
                dot(cols, w64, out=acc)
                subtract(ss(flat, "right"), sub, out=o1, casting="unsafe")
        else:
            inner, x = fill

            def call():
                copyto(inner, x)
                copyto(tgt, src, casting="unsafe")
                dot(cols, w64, out=acc)
                subtract(ss(flat, "right"), sub, out=o1, casting="unsafe")
        return call
    matmul = np.matmul
    inner, x = fill if fill is not None else (None, None)
    rq_shape = rq_shape or (m, o)  # the accumulators as the requantizer's (rows, channels)
    rq_needs, rq_make = _requant_binding(requant, bias, out, *rq_shape)

    if w8 is not None:  # (o, k) int8: widened per call into the workspace, used transposed
        def build_widen(wf, cols, acc, *work):
            tgt = cols.reshape(src.shape)
            rq = rq_make(acc.reshape(rq_shape), *work)
            wt = wf.T

            def call_widen():
                if inner is not None:
                    copyto(inner, x)
                copyto(wf, w8, casting="unsafe")
                copyto(tgt, src, casting="unsafe")
                matmul(cols, wt, out=acc)
                rq()
            return call_widen
        return bound_arrays([("conv.w", (o, k), np.float32), ("conv.cols", (m, k), np.float32),
                             ("conv.acc", (m, o), np.float32)] + rq_needs, build_widen)

    if w8t is not None:
        f32 = np.float32
        if w8t.flags.c_contiguous:  # (k, o) copy: widened whole (Conv2D keeps these within WIDEN_BYTES)
            blocks = None
        else:  # (o, k) rows, transposed: blocks of output channels
            w8r = w8t.T
            step = max(1, LAZY_BLOCK_BYTES // (4 * k))
            blocks = [(w8r[o0:o0 + step], slice(o0, o0 + step)) for o0 in range(0, o, step)]

        def build_lazy(cols, acc, *work):
            tgt = cols.reshape(src.shape)
            rq = rq_make(acc.reshape(rq_shape), *work)
            if blocks is None:
                def call_lazy():
                    if inner is not None:
                        copyto(inner, x)
                    wf = scratch("weights.wide", w8t.shape, f32)
                    copyto(wf, w8t, casting="unsafe")
                    copyto(tgt, src, casting="unsafe")
                    matmul(cols, wf, out=acc)
                    rq()
                return call_lazy
            parts = [(wb, acc[:, sl]) for wb, sl in blocks]

            def call_lazy_blocks():
                if inner is not None:
                    copyto(inner, x)
                copyto(tgt, src, casting="unsafe")
                for wb, ab in parts:
                    wf = scratch("weights.wide", wb.shape, f32)
                    copyto(wf, wb, casting="unsafe")
                    matmul(cols, wf.T, out=ab)
                rq()
            return call_lazy_blocks
        return bound_arrays([("conv.cols", (m, k), np.float32), ("conv.acc", (m, o), np.float32)] + rq_needs,
                            build_lazy)

    def build(cols, acc, *work):
        tgt = cols.reshape(src.shape)  # a view: the workspace arrays are contiguous
        rq = rq_make(acc.reshape(rq_shape), *work)

        def call_requant():
            if inner is not None:
                copyto(inner, x)
            copyto(tgt, src, casting="unsafe")
            matmul(cols, wmat, out=acc)
            rq()
        return call_requant
    return bound_arrays([("conv.cols", (m, k), np.float32), ("conv.acc", (m, o), np.float32)] + rq_needs, build)


@register("CONV_2D", "float32", "int8")
class Conv2D(BoundOutput, Kernel):
    """CONV_2D: im2col (a strided view copied once) times the OHWI filter as a (K, O) matrix.

    Grouped convolution (input channels a multiple of the filter's) runs one GEMM per group, as
    TFLite's reference kernel allows.

    int8 (one group) runs in blocks of output rows: the int8 input is padded in int8, each block's
    im2col columns are copied (and widened to float32) into a scratch buffer of about
    ``COLS_BYTES``, multiplied, and requantized straight into the output; so the scratch stays
    bounded whatever the layer size.
    """

    #: bytes of float32 im2col columns, and of float32 accumulators, per GEMM
    COLS_BYTES = 1 << 18
    #: accumulators requantized per call (several GEMM blocks when they are small)
    ACC_VALUES = 1 << 16

    def prepare(self):
        ctx, opts = self.ctx, self.ctx.options
        x_shape, w_shape = ctx.input_shape(0), ctx.input_shape(1)
        if len(x_shape) != 4 or len(w_shape) != 4:
            raise ctx.fail(f"expects 4-D input and filter, got {list(x_shape)} and {list(w_shape)}")
        n, h, w, c = x_shape
        o, kh, kw, ci = w_shape
        if ci <= 0 or c % ci or o % (c // ci):
            raise ctx.fail(f"input has {c} channels, filter {ci} per group and {o} outputs")
        self.groups = c // ci
        sh, sw, dh, dw = _strides(ctx, opts)
        oh, ow, pt, pb, pl, pr = _same_padding(ctx, opts, h, w, kh, kw, sh, sw, dh, dw)
        self.geom = (kh, kw, sh, sw, dh, dw, oh, ow)
        self.out_shape = (n, oh, ow, o)
        self.quantized = check_weighted_types(ctx, 0, 1, 2)
        wdata = ctx.const(1)
        if wdata is None:
            raise ctx.fail("filter must be a constant tensor")
        # Filter as one (K, O/groups) matrix per group, K ordered (ky, kx, ci) like the im2col view.
        g, og = self.groups, o // self.groups
        self.w8 = self.w8t = None
        self.lazy_float = False
        if self._widen_per_eval(wdata, n * oh * ow, kh * kw * ci, o):
            # int8 weights stay in the model buffer; eval widens them per block of output channels
            self.w8 = np.asarray(wdata).reshape(o, kh * kw * ci)
            self.wmats = [None]
        elif self.quantized and g == 1 and wdata.dtype == np.int8:
            # a filter small plans keep as float32 (made at compile: _keep_float): larger plans
            # widen it per call from int8 instead, into shared scratch
            self.lazy_float = True
            self.wmats = [None]
            k8 = kh * kw * ci
            w2 = np.asarray(wdata).reshape(o, k8)
            if n * oh * ow > self.OK_LAYOUT_MAX_ROWS and k8 < self.OK_LAYOUT_MIN_K and k8 * o * 4 <= self.WIDEN_BYTES:
                self.w8t = np.ascontiguousarray(w2.T)  # (K, O): the GEMM's fast layout
            else:  # few output pixels, a long reduction or a large filter: no copy (see below)
                self.w8 = w2
        else:
            wm = np.asarray(wdata, np.float32).reshape(g, og, kh * kw * ci).transpose(0, 2, 1)
            self.wmats = [np.ascontiguousarray(wm[i]) for i in range(g)]
            if g == 1 and not self.quantized:
                # a folded float filter (fp16 weights dequantized during prepare) stays only as
                # this (K, O) copy: the tensor's value becomes its transposed view
                ctx.relayout_const(1, self.wmats[0].T.reshape(o, kh, kw, ci))
        self.pointwise = kh == kw == 1 and sh == sw == 1 and not (pt or pb or pl or pr)
        self._view = (None, None)  # (padded input, its im2col view)
        if self.quantized:
            _, x_zp = qparams(ctx.input(0))
            self.pad = _PaddedInput(x_shape, (pt, pb, pl, pr), np.int8, x_zp)
            # reductions over the int8 filter, no int64 copy of it (8 MB for a 1024x1024 1x1
            # filter, which used to set the process's peak memory during allocate_tensors)
            w2 = np.asarray(wdata).reshape(o, -1)
            maxw = max(-int(w2.min(initial=0)), int(w2.max(initial=0)))
            self.bias = _bias(ctx, 2, o, np.int64) - x_zp * w2.sum(axis=1, dtype=np.int64)
            self.chunk = exact_chunk(128, max(1, maxw))
            self.requant = _conv_quant(ctx, ctx.input(0), o)
            # raw int8 inputs (|x| <= 128): a true bound however the sum is taken (float32 GEMM
            # when it fits one chunk, float64 chunks otherwise); it lets the requantizer skip
            # the int32 wrap-around of acc + bias when that cannot happen
            self.requant.acc_bound = float(kh * kw * ci * 128 * maxw)
            # ... and per output channel (128 * sum |w|): tighter where a channel's weights are
            # small (BoundedRequantizer.f64_consts: more channels provably constant or exact);
            # computed on first use (BoundedRequantizer._fit at prepare, f64_consts in small
            # plans), over blocks of output channels: no int16 copy of a large filter at once
            self.requant.acc_bounds = lambda w2=w2: _abs_row_sums(w2) * 128
            m, k = n * oh * ow, kh * kw * ci
            self.tiny = None
            if (g == 1 and (self.w8 is None or self.lazy_float) and k <= self.chunk
                    and m * max(k, o) <= min(self.TINY_VALUES, self.COLS_BYTES // 4)):
                # own column and accumulator buffers: eval is one copy, one GEMM, one requantization
                # (their shapes here; the buffers are made on the first eval, so a layer the
                # invoke plan binds, in its shared workspace, holds none)
                self.tiny = ((m, k), (m, o))
            _warm(self.requant, self.bias, o, m * o)
        else:
            self.pad = _PaddedInput(x_shape, (pt, pb, pl, pr), np.float32, 0.0)
            self.bias = _bias(ctx, 2, o, np.float32)
            self.lo, self.hi = float_activation_range(opts.get("fused_activation_function", 0))
        return [self.out_shape]

    #: float32 copies of int8 filters up to this size are kept (fast small layers); larger ones
    #: are widened per eval from the int8 model buffer into bounded scratch, in blocks of
    #: output channels of about ``WIDEN_BYTES`` (256 KB: the scratch of face landmark int8 had
    #: held a 512 KB widened filter; 0.3 MB less resident there, CPU time within noise)
    KEEP_FLOAT_BYTES = 64 * 1024
    WIDEN_BYTES = 1 << 18
    #: ... but only when the layer has this many output pixels: the widening (about 0.4 ns a
    #: weight) then costs at most about half of the GEMM it feeds; with fewer pixels (a GEMV
    #: such as MobileNet's 1x1 classifier) only filters above ``KEEP_FLOAT_BYTES_FEW_ROWS`` are
    #: widened (1024x1001 at one pixel: 0.14 -> 0.32 ms for 4 MB less)
    WIDEN_MIN_ROWS = 32
    KEEP_FLOAT_BYTES_FEW_ROWS = 1 << 20
    #: ... and filters of layers with at least this many output pixels are widened per eval
    #: whatever their size (the widening is then at most 1/256 of the GEMM's multiply-adds;
    #: iris landmark int8: 0.4 MB less resident, CPU time within noise)
    WIDEN_ALWAYS_ROWS = 256

    #: lazy_float filters stay in the model buffer's (O, K) layout (no int8 copy) for layers of
    #: at most this many output pixels or at least OK_LAYOUT_MIN_K products per sum, where
    #: BLAS runs (m, k) @ (o, k).T about as fast as against (k, o): iris landmark's 1x1
    #: layers, isolated, 4x64 -> 128 1.5 -> 2.2 us, 4x512 -> 64 3.2 -> 4.2 us, 16x512 -> 64
    #: 10.0 -> 9.5 us; at 16 and 64 pixels with K <= 128 the (O, K) layout costs 1.5-2.8x
    OK_LAYOUT_MAX_ROWS = 4
    OK_LAYOUT_MIN_K = 512

    def _widen_per_eval(self, wdata, rows: int, k: int, o: int) -> bool:
        if not (self.quantized and self.groups == 1 and wdata.dtype == np.int8):
            return False
        size = k * o * 4
        if rows >= self.WIDEN_ALWAYS_ROWS and o > self.GROUPED_MAX_OUT:  # (grouped GEMMs need the copy)
            return True
        return not (size <= self.KEEP_FLOAT_BYTES
                    or (rows < self.WIDEN_MIN_ROWS and size <= self.KEEP_FLOAT_BYTES_FEW_ROWS))

    def _gemm(self, cols: np.ndarray, acc: np.ndarray) -> np.ndarray:
        """``cols @ filter`` (int8 path) into ``acc`` (M, O), exact in float32."""
        w8 = self.w8
        if w8 is None:
            wm = self.wmats[0]
            if wm is None:  # the int8 (K, O) copy, widened once per eval (lazy_float)
                wm = scratch("weights.wide", self.w8t.shape, np.float32)
                if not self._widened:
                    np.copyto(wm, self.w8t, casting="unsafe")
                    self._widened = True
            return exact_int_matmul(cols, wm, self.chunk, acc)
        o, k = w8.shape
        if k > self.chunk:
            # a reduction too long for one exact float32 GEMM: exact float32 partial products
            # per chunk of K (filter columns widened chunk by chunk), summed in float64
            # (widened in blocks of output channels too, so the scratch stays at WIDEN_BYTES:
            # pose detection's 192x1152 filter had taken 0.8 MB; each value still sums its
            # chunks in order)
            c = self.chunk
            step = max(1, self.WIDEN_BYTES // (4 * min(k, c)))
            if step >= o:
                total = None
                for k0 in range(0, k, c):
                    wb = w8[:, k0:k0 + c]
                    wf = scratch("weights.wide", wb.shape, np.float32)
                    np.copyto(wf, wb, casting="unsafe")
                    part = np.matmul(cols[:, k0:k0 + c], wf.T).astype(np.float64)
                    total = part if total is None else np.add(total, part, out=total)
                return total
            total = np.empty((cols.shape[0], o), np.float64)
            for o0 in range(0, o, step):
                tb = total[:, o0:o0 + step]
                for k0 in range(0, k, c):
                    wb = w8[o0:o0 + step, k0:k0 + c]
                    wf = scratch("weights.wide", wb.shape, np.float32)
                    np.copyto(wf, wb, casting="unsafe")
                    part = np.matmul(cols[:, k0:k0 + c], wf.T)
                    if k0 == 0:
                        np.copyto(tb, part)
                    else:
                        np.add(tb, part, out=tb)
            return total
        step = max(1, self.WIDEN_BYTES // (4 * k))
        if step >= o:
            wf = scratch("weights.wide", (o, k), np.float32)
            if not self._widened:  # once per eval: nothing else writes this scratch key meanwhile
                np.copyto(wf, w8, casting="unsafe")
                self._widened = True
            return np.matmul(cols, wf.T, out=acc)
        for o0 in range(0, o, step):
            wb = w8[o0:o0 + step]
            wf = scratch("weights.wide", wb.shape, np.float32)
            np.copyto(wf, wb, casting="unsafe")
            np.matmul(cols, wf.T, out=acc[:, o0:o0 + step])
        return acc

    def _matmul(self, a, wm, out=None):
        return exact_int_matmul(a, wm, self.chunk, out) if self.quantized else np.matmul(a, wm, out=out)

    #: int8 layers whose im2col columns and accumulators hold at most this many values each run
    #: on their own small buffers, without the block loops (their fixed cost is most of a
    #: 1-pixel convolution's time)
    TINY_VALUES = 4096
    tiny = None
    _tiny_bufs = None

    def _eval_int8_tiny(self, x):
        if self._tiny_bufs is None:
            self._tiny_bufs = tuple(np.empty(shape, np.float32) for shape in self.tiny)
        cols, acc = self._tiny_bufs
        out = self._out
        if out is None or out.shape != self.out_shape:
            out = np.empty(self.out_shape, np.int8)
        if self.pointwise:
            np.copyto(cols, x.reshape(cols.shape), casting="unsafe")
        else:
            xp = self.pad(x)
            if self._view[0] is xp:
                view = self._view[1]
            else:
                kh, kw, sh, sw, dh, dw, oh, ow = self.geom
                view = _window_view(xp, kh, kw, sh, sw, dh, dw, oh, ow)
                if self.pad.keeps(xp, x):
                    self._view = (xp, view)
            np.copyto(cols.reshape(view.shape), view, casting="unsafe")
        if self.wmats[0] is None:  # (lazy_float) widened from int8 now
            self._widened = False
            self._gemm(cols, acc)
        else:
            np.matmul(cols, self.wmats[0], out=acc)
        o2 = out.reshape(acc.shape)
        res = self.requant(acc, self.bias, out=o2)
        if res is not o2:
            np.copyto(o2, res)
        return [out]

    def compile(self, ins, outs):
        """The invoke plan's bound call for a tiny int8 layer (see ``edgerun.runtime.plan``):
        the input's arena view, the output's, the window view and the buffers are fixed here, so
        a call is the window copy, one GEMM and the requantization into the output view."""
        if not (self.quantized and self.groups == 1):
            return None
        if self.lazy_float and _keep_float():
            self._make_float()
        x, out = ins[0], outs[0]
        if not _bindable(x, out, self.out_shape):
            return None
        kh, kw, sh, sw, dh, dw, oh, ow = self.geom
        n, _, _, o = self.out_shape
        m = n * oh * ow
        k = self._k()
        cols_max, acc_max, widen_max = _bind_budget()
        lazy = self.lazy_float  # (still int8 here: widened per call into scratch, any size)
        if self.tiny is None and (k > self.chunk or m * k * 4 + (0 if cols_max == BIND_BYTES else m * o * 20)
                                  > cols_max or m * o * 4 > acc_max
                                  or (self.w8 is not None and not lazy and k * o * 4 > widen_max)):
            # a larger layer binds where one exact float32 GEMM covers the reduction, its
            # columns within BIND_BYTES, its accumulators (and a filter widened per call) within
            # BIND_ACC_BYTES, in the plan's shared workspace
            return None
        if self.pointwise:
            src, fill = x.reshape(m, k), None
        else:
            src, fill = _fixed_windows(self.pad, x, lambda xp: _window_view(xp, kh, kw, sh, sw, dh, dw, oh, ow))
            if src is None:
                return None
        if self.w8 is not None and not lazy:  # int8 filter widened per call (as eval does), into the workspace
            return _bind_gemm(src, fill, None, None, self.requant, self.bias, out, m, k, o, w8=self.w8)
        if not self.pointwise and o <= self.GROUPED_MAX_OUT and m * o > 128:
            grouped = self._compile_grouped(x, out)
            if grouped is not None:
                return grouped
        table = _threshold_table(self.requant, self.bias, m, o)
        if lazy:  # the int8 filter as (K, O): the (K, O) copy, or the model buffer's (O, K) transposed
            return _bind_gemm(src, fill, None, table, self.requant, self.bias, out, m, k, o,
                              w8t=self.w8t if self.w8t is not None else self.w8.T)
        return _bind_gemm(src, fill, self.wmats[0], table, self.requant, self.bias, out, m, k, o)

    def _k(self) -> int:
        """The GEMM's reduction length (one group's KH * KW * CI)."""
        if self.w8 is not None:
            return self.w8.shape[1]
        return (self.w8t if self.w8t is not None else self.wmats[0]).shape[0]

    def _filter_f32(self) -> np.ndarray:
        """The (K, O) float32 filter: the kept copy, or a new one from the int8 filter."""
        if self.wmats[0] is not None:
            return self.wmats[0]
        w = self.w8t if self.w8t is not None else self.w8.T
        return w.astype(np.float32, order="C")

    def _make_float(self) -> None:
        """Keep the float32 (K, O) copy of a lazy_float filter (small plans: see _keep_float)."""
        self.wmats = [self._filter_f32()]
        self.w8 = self.w8t = None
        self.lazy_float = False

    #: layers with at most this many output channels bind with several output pixels per GEMM
    #: row (``_compile_grouped``): an N of 8 leaves BLAS mostly idle
    GROUPED_MAX_OUT = 8

    def _compile_grouped(self, x, out):
        """A bound call for a convolution with few output channels: each GEMM row is a group of
        G (4, 3 or 2, dividing the output width) adjacent output pixels of a row, its columns the
        KH input rows' spans under those G windows (contiguous in the padded input: one strided
        view, longer runs to copy than one window's KW * C), and the filter block Toeplitz (the
        G windows' taps at their offsets, zeros elsewhere: exact under the layer's bound).
        vww's first layer (96x96x3 -> 48x48x8, 3x3 stride 2): one pixel a row, a 2304 x 27
        copy with runs of 9 and a GEMM with N = 8; G = 4: 576 x 81, runs of 27, N = 32."""
        kh, kw, sh, sw, dh, dw, oh, ow = self.geom
        n, _, _, o = self.out_shape
        cin = self._k() // (kh * kw)
        g = next((d for d in (4, 3, 2) if ow % d == 0), 0)
        if not g:
            return None
        span = (g - 1) * sw + (kw - 1) * dw + 1
        m, k, og = n * oh * (ow // g), kh * span * cin, g * o
        if m * k * 4 > _bind_budget()[0] or k > self.chunk:
            return None

        def view(xp):
            s0, s1, s2, s3 = xp.strides
            if s2 != cin * s3:
                return None
            return as_strided(xp, (n, oh, ow // g, kh, span * cin), (s0, s1 * sh, s2 * sw * g, s1 * dh, s3),
                              writeable=False)
        src, fill = _fixed_windows(self.pad, x, view)
        if src is None:
            return None
        wk = self._filter_f32().reshape(kh, kw, cin, o)
        wt = np.zeros((kh, span, cin, g, o), np.float32)
        for kx in range(kw):
            for q in range(g):
                wt[:, q * sw + kx * dw, :, q, :] = wk[:, kx]
        return _bind_gemm(src, fill, wt.reshape(k, og), None, self.requant, self.bias, out, m, k, og,
                          rq_shape=(m * g, o))

    def _eval_int8_blocks(self, x):
        self._widened = False
        if self.tiny is not None:
            return self._eval_int8_tiny(x)
        kh, kw, sh, sw, dh, dw, oh, ow = self.geom
        n, _, _, o = self.out_shape
        out = self._out
        if out is None or out.shape != self.out_shape:
            out = np.empty(self.out_shape, np.int8)
        k = self._k()
        rows = max(1, self.COLS_BYTES // (4 * max(k, o)))  # output pixels per GEMM
        # requantize several GEMM blocks at once (its fixed cost per call is some 20 us) unless a
        # long reduction makes the GEMM return float64 chunk sums instead of filling acc
        together = k <= self.chunk
        if self.pointwise:
            x2, o2 = x.reshape(-1, k), out.reshape(-1, o)
            rq = max(rows, self.ACC_VALUES // o // rows * rows) if together else rows
            for r0 in range(0, x2.shape[0], rq):
                nr = min(rq, x2.shape[0] - r0)
                acc = scratch("conv.acc", (nr, o), np.float32)
                for g0 in range(0, nr, rows):
                    blk = x2[r0 + g0:r0 + min(g0 + rows, nr)]
                    cols = scratch("conv.cols", blk.shape, np.float32)
                    np.copyto(cols, blk, casting="unsafe")
                    res = self._gemm(cols, acc[g0:g0 + blk.shape[0]])
                if not together:
                    acc = res
                self.requant(acc, self.bias, out=o2[r0:r0 + nr])
            return [out]
        xp = self.pad(x)
        if self._view[0] is xp:  # a small input's padded buffer is the same array every time
            view = self._view[1]
        else:
            view = _window_view(xp, kh, kw, sh, sw, dh, dw, oh, ow)
            if self.pad.keeps(xp, x):  # never keep a view of a shared scratch buffer alive
                self._view = (xp, view)
        bh = max(1, rows // ow)  # output rows per GEMM
        rq = max(bh, self.ACC_VALUES // (ow * o) // bh * bh) if together else bh  # ... per requantization
        for b in range(n):
            for y0 in range(0, oh, rq):
                nr = min(rq, oh - y0)
                acc = scratch("conv.acc", (nr * ow, o), np.float32)
                for g0 in range(0, nr, bh):
                    v = view[b, y0 + g0:y0 + min(g0 + bh, nr)]
                    cols = scratch("conv.cols", v.shape, np.float32)
                    np.copyto(cols, v, casting="unsafe")
                    m = v.shape[0] * ow
                    res = self._gemm(cols.reshape(m, k), acc[g0 * ow:g0 * ow + m])
                if not together:
                    acc = res
                self.requant(acc, self.bias, out=out[b, y0:y0 + nr].reshape(nr * ow, o))
        return [out]

    def eval(self, inputs):
        x = inputs[0]
        if self.quantized and self.groups == 1:
            return self._eval_int8_blocks(x)
        kh, kw, sh, sw, dh, dw, oh, ow = self.geom
        n, _, _, o = self.out_shape
        xp = self.pad(x)
        m = n * oh * ow
        if self.pointwise:
            cols = xp.reshape(m, -1).astype(np.float32, copy=False)
        else:
            if self._view[0] is xp:  # a small input's padded buffer is the same array every time
                view = self._view[1]
            else:
                view = _window_view(xp, kh, kw, sh, sw, dh, dw, oh, ow)
                if self.pad.keeps(xp, x):  # never keep a view of a shared scratch buffer alive
                    self._view = (xp, view)
            buf = scratch("conv.cols", view.shape, np.float32)
            np.copyto(buf, view)
            cols = buf.reshape(m, -1)
        if self.groups == 1:
            # int8: the float32 product is a temporary (requantized below); float32: it is the output
            out = scratch("conv.acc", (m, o), np.float32) if self.quantized else None
            acc = self._matmul(cols, self.wmats[0], out)
        else:
            c = xp.shape[3]
            ci = c // self.groups
            cols_g = cols.reshape(m, kh * kw, self.groups, ci)
            acc = np.concatenate([self._matmul(cols_g[:, :, i, :].reshape(m, -1), wm)
                                  for i, wm in enumerate(self.wmats)], axis=1)
        if self.quantized:
            return [self.requant(acc, self.bias).reshape(self.out_shape)]
        acc += self.bias
        np.clip(acc, self.lo, self.hi, out=acc)
        return [acc.reshape(self.out_shape)]


@register("DEPTHWISE_CONV_2D", "float32", "int8")
class DepthwiseConv2D(BoundOutput, Kernel):
    """DEPTHWISE_CONV_2D: a sum over the KH*KW filter taps of shifted input slices times per-channel weights.

    The depth multiplier is taken from the shapes (filter channels / input channels), as TFLite's
    kernel does; the input's channels are repeated ``dm`` times so that every output channel
    reads its own column. With strides the padded input is split once into stride phases, so
    every tap reads whole contiguous rows of ``OW * C`` values (long numpy inner loops) against a
    weight row tiled ``OW`` times. float32 sums the taps in the reference's order (ky, kx), then
    adds the bias. int8 sums and requantizes in blocks of output rows (accumulators of about
    ``ACC_BYTES``), straight into the output.
    """

    #: bytes of the float accumulator (and of its product temporary) per block of output rows
    ACC_BYTES = 1 << 18
    #: float32 tap weights are tiled to at least this many values (a divisor of OW times C)
    FLOAT_TILE_VALUES = 4096
    #: accumulators requantized per call (several einsum blocks when they are small)
    ACC_VALUES = 1 << 16

    def prepare(self):
        ctx, opts = self.ctx, self.ctx.options
        x_shape, w_shape = ctx.input_shape(0), ctx.input_shape(1)
        if len(x_shape) != 4 or len(w_shape) != 4 or w_shape[0] != 1:
            raise ctx.fail(f"expects 4-D input and a 1HWC filter, got {list(x_shape)} and {list(w_shape)}")
        n, h, w, c = x_shape
        _, kh, kw, oc = w_shape
        if c <= 0 or oc % c:
            raise ctx.fail(f"filter has {oc} channels, not a multiple of the input's {c}")
        self.dm = oc // c
        sh, sw, dh, dw = _strides(ctx, opts)
        oh, ow, pt, pb, pl, pr = _same_padding(ctx, opts, h, w, kh, kw, sh, sw, dh, dw)
        self.out_shape = (n, oh, ow, oc)
        self.quantized = check_weighted_types(ctx, 0, 1, 2)
        wdata = ctx.const(1)
        if wdata is None:
            raise ctx.fail("filter must be a constant tensor")
        taps = kh * kw
        pads = (pt, pb, pl, pr)
        if self.quantized:
            _, x_zp = qparams(ctx.input(0))
            wint = np.asarray(wdata, np.int64).reshape(taps, oc)
            maxw = max(1, int(np.abs(wint).max(initial=0)))
            # float32 accumulation stays exact while taps * 128 * max|w| <= 2^24
            dtype = np.float32 if taps <= exact_chunk(128, maxw) else np.float64
            # the padded input stays int8 (a quarter of the memory); the products widen it
            self.pad = _PaddedInput((n, h, w, oc), pads, np.int8, x_zp)
            bias = _bias(ctx, 2, oc, np.int64)
            self.bias = bias - x_zp * wint.sum(axis=0)
            # edgerun.native's loop sums (x - zp) * w over the taps inside the input, as the
            # reference does, on the model's own bias
            self._native_src = (np.ascontiguousarray(np.asarray(wdata, np.int8).reshape(taps, oc)),
                                bias, int(x_zp), taps * 255 * maxw)
            self.requant = _conv_quant(ctx, ctx.input(0), oc)
            # taps of raw int8 inputs (|x| <= 128), summed exactly in float32 or float64
            self.requant.acc_bound = float(taps * 128 * maxw)
            self.requant.acc_bounds = lambda w=wdata, t=taps, c=oc: 128 * np.abs(  # per channel (see Conv2D)
                np.asarray(w).reshape(t, c), dtype=np.int16).sum(axis=0, dtype=np.int64)
        else:
            dtype = np.float32
            self.pad = _PaddedInput((n, h, w, oc), pads, dtype, 0.0)
            self.bias = _bias(ctx, 2, oc, np.float32)
            self.lo, self.hi = float_activation_range(opts.get("fused_activation_function", 0))
        self.strides = (sh, sw)
        hp, wp = h + pt + pb, w + pl + pr
        wf = np.asarray(wdata, dtype).reshape(kh, kw, oc)
        # Tap weights are tiled along OW so that the products run long inner loops: rows viewed
        # as (OW / tw, tw * C), tw the least divisor of OW giving >= 512 values (int8) or
        # FLOAT_TILE_VALUES (float32), which keeps the tiled copies small
        self.tw = next((t for t in range(1, ow + 1) if ow % t == 0
                        and t * oc >= (512 if self.quantized else self.FLOAT_TILE_VALUES)), ow)
        self._taps = None  # built on first use by the tap loop (see _tap_list)
        self.planes = {}  # stride phase -> its shape (the data lives in scratch buffers)
        if (sh, sw) != (1, 1):
            phases = {(ky * dh % sh, kx * dw % sw) for ky in range(kh) for kx in range(kw)}
            for py, px in sorted(phases):
                self.planes[(py, px)] = (n, len(range(py, hp, sh)), len(range(px, wp, sw)), oc)
        self.dtype = dtype
        self.acc_dtype = dtype
        # Small int8 outputs: one einsum over a (N, OH, OW, KH, KW, C) window view beats a
        # multiply-add per tap (fewer numpy calls); every partial sum is exact in self.dtype, so
        # the summation order does not matter. float32 keeps the reference's tap order.
        self.einsum = self.quantized and n * oh * ow * oc <= 12288
        self.wf = np.ascontiguousarray(wf)
        self.geom = (kh, kw, sh, sw, dh, dw, oh, ow)
        self._view = (None, None)
        # tiny einsum layers (microWakeWord's one-pixel depthwise) keep their own small buffers:
        # window columns, accumulators, the (taps, C) weight view and the output's 2-D shape;
        # the buffers are made on the first eval (a layer the plan binds never makes them: 62 KB
        # on iris landmark int8)
        self.small = None
        if self.einsum and n * oh * ow * taps * oc <= 4096:
            m = n * oh * ow
            self.small = ((n, oh, ow, kh, kw, oc), (m, oc), self.wf.reshape(taps, oc), (m, taps, oc))
        if self.quantized and self.native_call() is None:  # (the native loop needs no fit)
            _warm(self.requant, self.bias, oc, n * oh * ow * oc)
        return [self.out_shape]

    def _tap_list(self):
        """(stride phase, first row, first column, weights tiled over OW or tw) per tap: built
        on first use, since the einsum paths never read them (they are 1.4 MB on pose detection)."""
        if self._taps is None:
            kh, kw, sh, sw, dh, dw, _, _ = self.geom
            oc = self.out_shape[3]
            taps = []
            for ky in range(kh):
                for kx in range(kw):
                    y0, x0 = ky * dh, kx * dw
                    if self.quantized:
                        wt = np.tile(self.wf[ky, kx], self.tw).reshape(self.tw, oc)
                    else:  # float32 tiles its tap into one scratch row per call (see eval)
                        wt = self.wf[ky, kx]
                    taps.append(((y0 % sh, x0 % sw), y0 // sh, x0 // sw, wt))
            self._taps = taps
        return self._taps

    #: the einsum path's window columns per block of output rows
    EINSUM_COLS_BYTES = 1 << 18

    #: int8 outputs with at least this many channels copy each row block's windows into float
    #: columns and sum the taps with one einsum (fewer passes than a multiply-add per tap);
    #: fewer channels make einsum's inner loop too short, so the tap loop stays
    COLS_MIN_CHANNELS = 16

    #: int8 layers with at least this many channels (or SLAB_MIN_CHANNELS_5X5 and 25 or more
    #: taps) sum their taps with one einsum over the window view of a float copy of the padded
    #: input rows a block needs, instead of copying the (taps times larger) window columns first:
    #: hand landmark's 28x28x144 5x5 0.90 -> 0.62 ms, 14x14x384 5x5 0.58 -> 0.33 ms, 28x28x128
    #: 3x3 0.33 -> 0.28 ms; with fewer channels einsum's strided reads lose (112x112x24 3x3:
    #: 1.48 -> 2.51 ms, 56x56x96 3x3 even)
    #: False sends stride-1 layers back to the window columns (kept for in-model A/B timing)
    rows_path = True
    SLAB_MIN_CHANNELS = 128
    SLAB_MIN_CHANNELS_5X5 = 96
    #: accumulator bytes, and float input rows' bytes, per block of output rows on that path
    #: (a layer whose one output row needs more input bytes stays on the column path)
    SLAB_ACC_BYTES = 1 << 17
    SLAB_BYTES = 1 << 18

    def _slab_rows(self, wp: int) -> int:
        """Output rows per block of the einsum-over-input-rows path (0: the path is not taken)."""
        kh, kw, sh, _, dh, _, oh, ow = self.geom
        oc = self.out_shape[3]
        if not (oc >= self.SLAB_MIN_CHANNELS or (oc >= self.SLAB_MIN_CHANNELS_5X5 and kh * kw >= 25)):
            return 0
        size = np.dtype(self.dtype).itemsize
        row_in = wp * oc * size
        bh = min(oh, max(1, self.SLAB_ACC_BYTES // (size * ow * oc)),
                 (self.SLAB_BYTES // row_in - (kh - 1) * dh - 1) // sh + 1)
        if bh <= 0:
            return 0
        # enough accumulators for the requantizer's float32 passes (see _eval_int8_rows)
        return max(bh, min(oh, -(-getattr(self.requant, "FAST_MIN", 0) // (ow * oc))))

    #: int8 layers with at least COLS_MIN_CHANNELS channels, stride 1 in columns (or 5x5 and up,
    #: per column phase): one einsum a
    #: block over the (rows, KH, KW, OW / tw, tw * C) view of a float copy of the input rows,
    #: against the tap weights tiled tw times (tw * C >= ROWS_TILE_VALUES): every output row is
    #: a contiguous run of input values per tap, so einsum's inner loop is tw * C long instead of
    #: C. Against the window-column copy: 64x64x24 3x3 0.48 -> 0.18 ms, 112x112x24 1.49 -> 0.57,
    #: 56x56x96 1.00 -> 0.66, 28x28x144 5x5 0.86 -> 0.48 (isolated, thread CPU)
    ROWS_TILE_VALUES = 1024
    ROWS_ACC_BYTES = 1 << 17

    def _eval_int8_rows(self, xp: np.ndarray, out: np.ndarray) -> np.ndarray:
        kh, kw, sh, sw, dh, dw, oh, ow = self.geom
        n, _, _, oc = self.out_shape
        wp = xp.shape[2]
        dt = self.dtype
        size = np.dtype(dt).itemsize
        tw = min(ow, -(-self.ROWS_TILE_VALUES // oc))  # output pixels per tile
        q, rem = divmod(ow, tw)  # whole tiles, and the columns after them
        wt = scratch("dw.rows.w", (kh, kw, tw * oc), dt)  # rebuilt per call: no copy kept per layer
        np.copyto(wt.reshape(kh, kw, tw, oc), self.wf[:, :, None, :])
        # column phases: with stride sw, tap kx reads input columns sw*x + kx*dw, i.e. column
        # x + (kx*dw) // sw of the phase plane (kx*dw) % sw: contiguous runs again. The taps of one
        # phase are kx0, kx0 + step, ... (step = sw / gcd(sw, dw)), their plane offsets step*dw/sw apart
        step = sw // math.gcd(sw, dw)
        phases = sorted({kx * dw % sw: kx for kx in range(kw - 1, -1, -1)}.items())  # phase -> first kx
        bh = max(1, min(oh, self.ROWS_ACC_BYTES // (size * ow * oc),  # output rows per block, the
                        (self.SLAB_BYTES // (wp * oc * size) - (kh - 1) * dh - 1) // sh + 1))  # input rows' bound
        # ... but enough accumulators for the requantizer's float32 passes (FAST_MIN values; fewer
        # take its int64 path, several times slower a value)
        bh = max(bh, min(oh, -(-getattr(self.requant, "FAST_MIN", 0) // (ow * oc))))
        einsum, add = np.einsum, np.add
        for b in range(n):
            for y0 in range(0, oh, bh):
                r = min(bh, oh - y0)
                rows_in = (r - 1) * sh + (kh - 1) * dh + 1
                acc = scratch("dw.acc", (r, ow * oc), dt)
                planes = scratch("dw.slab", (len(phases), rows_in, -(-wp // sw), oc), dt)  # one buffer
                for i, (ph, kx0) in enumerate(phases):
                    cols_p = len(range(ph, wp, sw))
                    plane = planes[i, :, :cols_p]
                    src = xp[b, y0 * sh:y0 * sh + rows_in]
                    np.copyto(plane, src[:, ph::sw] if sw > 1 else src, casting="unsafe")
                    nk = len(range(kx0, kw, step))
                    off0, offs = kx0 * dw // sw, step * dw // sw
                    w = wt[:, kx0::step]
                    dst = acc if i == 0 else scratch("dw.rows.tmp", (r, ow * oc), dt)
                    t0, t1, t2 = plane.strides
                    base = plane[:, off0:]
                    # integer products and sums, exact in dt (see prepare): any summation order
                    view = as_strided(base, (r, kh, nk, q, tw * oc), (t0 * sh, t0 * dh, t1 * offs, t1 * tw, t2),
                                      writeable=False)
                    einsum("yijqc,ijc->yqc", view, w, out=dst[:, :q * tw * oc].reshape(r, q, tw * oc))
                    if rem:
                        tail = as_strided(base[:, q * tw:], (r, kh, nk, rem * oc), (t0 * sh, t0 * dh, t1 * offs, t2),
                                          writeable=False)
                        einsum("yijc,ijc->yc", tail, w[:, :, :rem * oc], out=dst[:, q * tw * oc:])
                    if i:
                        add(acc, dst, out=acc)
                self.requant(acc.reshape(r * ow, oc), self.bias, out=out[b, y0:y0 + r].reshape(r * ow, oc))
        return out

    def _eval_int8_slabs(self, xp: np.ndarray, out: np.ndarray, bh: int) -> np.ndarray:
        kh, kw, sh, sw, dh, dw, oh, ow = self.geom
        n, _, _, oc = self.out_shape
        wp = xp.shape[2]
        dt = self.dtype
        for b in range(n):
            for y0 in range(0, oh, bh):
                r = min(bh, oh - y0)
                rows_in = (r - 1) * sh + (kh - 1) * dh + 1
                slab = scratch("dw.slab", (rows_in, wp, oc), dt)
                np.copyto(slab, xp[b, y0 * sh:y0 * sh + rows_in], casting="unsafe")
                t0, t1, t2 = slab.strides
                view = as_strided(slab, (r, ow, kh, kw, oc), (t0 * sh, t1 * sw, t0 * dh, t1 * dw, t2),
                                  writeable=False)
                acc = scratch("dw.acc", (r, ow, oc), dt)
                # integer products and sums, exact in dt (see prepare): any summation order
                np.einsum("yxijc,ijc->yxc", view, self.wf, out=acc)
                self.requant(acc.reshape(r * ow, oc), self.bias, out=out[b, y0:y0 + r].reshape(r * ow, oc))
        return out

    def _eval_int8_cols(self, xp: np.ndarray, x: np.ndarray) -> np.ndarray:
        kh, kw, _, _, _, _, oh, ow = self.geom
        n, _, _, oc = self.out_shape
        out = self._out
        if out is None or out.shape != self.out_shape:
            out = np.empty(self.out_shape, np.int8)
        taps = kh * kw
        if self.rows_path and (self.geom[3] == 1 or taps >= 25):
            # strided columns: one einsum per column phase; measured faster at 5x5 (28x28x144:
            # 1.50 -> 1.19 ms), slower at 3x3 (56x56x64: 1.24 -> 1.48 ms), which keeps the paths below
            return self._eval_int8_rows(xp, out)
        bh = self._slab_rows(xp.shape[2])
        if bh:
            return self._eval_int8_slabs(xp, out, bh)
        view = self._windows(xp, x)  # (N, OH, OW, KH, KW, C)
        wf = self.wf.reshape(taps, oc)
        bh = max(1, self.ACC_BYTES // (np.dtype(self.dtype).itemsize * ow * taps * oc))  # rows per einsum
        rq = max(bh, self.ACC_VALUES // (ow * oc) // bh * bh)  # rows per requantization
        for b in range(n):
            for y0 in range(0, oh, rq):
                nr = min(rq, oh - y0)
                acc = scratch("dw.acc", (nr * ow, oc), self.dtype)
                for g0 in range(0, nr, bh):
                    v = view[b, y0 + g0:y0 + min(g0 + bh, nr)]
                    m = v.shape[0] * ow
                    cols = scratch("dw.cols", v.shape, self.dtype)
                    np.copyto(cols, v, casting="unsafe")
                    np.einsum("pkc,kc->pc", cols.reshape(m, taps, oc), wf, out=acc[g0 * ow:g0 * ow + m])
                self.requant(acc, self.bias, out=out[b, y0:y0 + nr].reshape(nr * ow, oc))
        return out

    def _windows(self, xp: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The 6-D window view of ``xp`` (padded from input ``x``), cached for the kernel's own
        padded buffer or the unpadded input itself (as_strided costs a few microseconds)."""
        if self._view[0] is xp:
            return self._view[1]
        kh, kw, sh, sw, dh, dw, oh, ow = self.geom
        n, _, _, c = xp.shape
        s0, s1, s2, s3 = xp.strides
        v = as_strided(xp, (n, oh, ow, kh, kw, c), (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3), writeable=False)
        if self.dm == 1 and self.pad.keeps(xp, x):  # never keep a view of a shared scratch buffer alive
            self._view = (xp, v)
        return v

    def compile(self, ins, outs):
        """The invoke plan's bound call for an int8 einsum layer (depth multiplier 1, columns
        within BIND_BYTES; or, beyond the einsum path, at least COLS_MIN_CHANNELS channels, as
        eval's column blocks): window copy, one einsum, requantization into the output view. With a
        threshold table the columns are float64 with one more tap of ones whose weights are the
        table's channel offsets (exact integers, as in ``_bind_gemm``)."""
        run = self.native_call()
        if run is not None:
            x, out = ins[0], outs[0]
            if (x.dtype == np.int8 and x.flags.c_contiguous and x.shape == self.ctx.input_shape(0)
                    and out.dtype == np.int8 and out.flags.c_contiguous and out.shape == self.out_shape):
                return lambda: run(x, out)
        if not (self.quantized and self.dm == 1):
            return None
        x, out = ins[0], outs[0]
        if not _bindable(x, out, self.out_shape):
            return None
        if not (self.einsum or self.out_shape[3] >= self.COLS_MIN_CHANNELS):
            return self._compile_block_diagonal(x, out)
        src, fill = _fixed_windows(self.pad, x, lambda xp: self._windows(xp, xp))
        if src is None:
            return None
        n, oh, ow, kh, kw, oc = src.shape
        m, taps = n * oh * ow, kh * kw
        size = np.dtype(self.dtype).itemsize
        cols_max = _bind_budget()[0]
        if m * taps * oc * size + (0 if cols_max == BIND_BYTES else m * oc * (size + 16)) > cols_max:
            return None  # columns within BIND_BYTES (in the plan's shared workspace)
        wk = self.wf.reshape(taps, oc)
        copyto, einsum, subtract = np.copyto, np.einsum, np.subtract
        inner, xin = fill if fill is not None else (None, None)
        table = _threshold_table(self.requant, self.bias, m, oc)
        if table is not None and (taps + 1) * oc * 8 <= BOUND_F64_BYTES:
            ops = _table_operands(m, wk, table, src.shape, depthwise=True)
            if ops is None:
                return None
            cols, tgt, w64 = ops
            acc64 = np.empty((m, oc), np.float64)
            ss, flat, sub, o1 = _table_tail(table, acc64, out, m)

            def call():
                if inner is not None:
                    copyto(inner, xin)
                copyto(tgt, src, casting="unsafe")
                einsum("pkc,kc->pc", cols, w64, out=acc64)
                subtract(ss(flat, "right"), sub, out=o1, casting="unsafe")
            return call
        rq_needs, rq_make = _requant_binding(self.requant, self.bias, out, m, oc)

        def build(cols6, acc, *work):
            c3 = cols6.reshape(m, taps, oc)
            rq = rq_make(acc, *work)

            def call_requant():
                if inner is not None:
                    copyto(inner, xin)
                copyto(cols6, src, casting="unsafe")
                einsum("pkc,kc->pc", c3, wk, out=acc)
                rq()
            return call_requant
        return bound_arrays([("conv.cols", src.shape, self.dtype), ("conv.acc", (m, oc), self.dtype)] + rq_needs,
                            build)

    def _compile_block_diagonal(self, x, out):
        """A bound call for a layer with few channels beyond the einsum path (the tap loop's
        territory) as one GEMM: each GEMM row is a group of G adjacent output pixels of a row,
        its columns the KH input rows' spans those G windows cover (contiguous in the padded
        input: one strided view, copied once), and the filter is block diagonal (input pixel,
        channel c -> output pixel, channel c). The zeros add nothing, so the float32 sum stays
        exact under the layer's own bound. vww's 48x48x8 3x3 layer: taps 110 us; one pixel a
        row (K = 72, N = 8) 42 us copy + 49 us GEMM; G = 4 (K = 144, N = 32) 15 + 48 us."""
        kh, kw, sh, sw, dh, dw, oh, ow = self.geom
        n, _, _, oc = self.out_shape
        g = next(d for d in (4, 3, 2, 1) if ow % d == 0)
        span = (g - 1) * sw + (kw - 1) * dw + 1  # input pixels under a group's windows
        m, k, o = n * oh * (ow // g), kh * span * oc, g * oc
        if self.dtype is not np.float32 or oc > self.BLOCK_DIAGONAL_MAX or m * max(k, o) * 4 > _bind_budget()[0]:
            return None

        def view(xp):
            s0, s1, s2, s3 = xp.strides
            if s2 != oc * s3:
                return None
            return as_strided(xp, (n, oh, ow // g, kh, span * oc), (s0, s1 * sh, s2 * sw * g, s1 * dh, s3),
                              writeable=False)
        src, fill = _fixed_windows(self.pad, x, view)
        if src is None:
            return None
        wbd = np.zeros((kh, span, oc, g, oc), np.float32)
        ch, wf = np.arange(oc), self.wf  # wf: (KH, KW, C)
        for ky in range(kh):
            for kx in range(kw):
                for q in range(g):
                    wbd[ky, q * sw + kx * dw, ch, q, ch] = wf[ky, kx]
        return _bind_gemm(src, fill, wbd.reshape(k, o), None, self.requant, self.bias, out, m, k, o,
                          rq_shape=(m * g, oc))

    #: channels up to which a layer beyond the einsum path binds as a block-diagonal GEMM
    #: (the GEMM does about G * C times the multiply-adds of the layer)
    BLOCK_DIAGONAL_MAX = 8

    #: int8 layers run edgerun.native's depthwise loop where the machine has one
    NATIVE = True
    #: ... whose taps add to runs of up to this many accumulators (adjacent pixels) at a time
    NATIVE_RUN = 256
    _native = None

    def native_call(self):
        """``run(x, out)``: the whole int8 layer in edgerun.native's loop (the taps, the bias and
        the requantization in one pass over the output), or None where it does not apply."""
        if self._native is None:
            self._native = (None,)
            src = getattr(self, "_native_src", None)
            if self.NATIVE and self.quantized and src is not None and getattr(self.requant, "native_args", None):
                w8, bias, x_zp, bound = src
                n, oh, ow, oc = self.out_shape
                args = self.requant.native_args(bias, oc, ow, bound=float(bound))
                if args is not None:
                    fn = native.library().edgerun_depthwise_i8
                    kh, kw, sh, sw, dh, dw, _, _ = self.geom
                    (_, h, w, c), pads = self.ctx.input_shape(0), self.pad
                    # each tap's weights repeated for up to NATIVE_RUN values of adjacent pixels
                    reps = max(1, min(ow, self.NATIVE_RUN // oc))
                    ft = np.ascontiguousarray(np.tile(w8[:, None, :], (1, reps, 1)).reshape(kh * kw, reps * oc))
                    head = (n, h, w, c, self.dm, ft.ctypes.data, reps, kh, kw, sh, sw, dh, dw, pads.pt, pads.pl,
                            oh, ow, x_zp, args[1])
                    tail = args[3]
                    self._native_keep = (ft, args)  # the addresses above stay valid
                    shape, row = (n, h, w, c), (ow * oc,)

                    def run(x, out):  # callers pass C-contiguous int8 arrays of these shapes
                        assert x.shape == shape and out.size == n * oh * ow * oc
                        # one output row's int32 sums: the eval layers' accumulator scratch (a
                        # buffer per layer had been about 0.5 MB on iris landmark int8)
                        acc = scratch("dw.acc", row, np.int32)
                        fn(x.ctypes.data, *head, *tail, out.ctypes.data, acc.ctypes.data)
                    self._native = (run,)
        return self._native[0]

    def eval(self, inputs):
        x = inputs[0]
        run = self.native_call()
        if run is not None and x.dtype == np.int8 and x.flags.c_contiguous and x.shape == self.ctx.input_shape(0):
            out = self._out
            if out is None or out.shape != self.out_shape or not out.flags.c_contiguous:
                out = np.empty(self.out_shape, np.int8)
            run(x, out)
            return [out]
        if self.dm != 1:
            x = np.repeat(x, self.dm, axis=-1)
        xp = self.pad(x)
        if self.small is not None:
            cols, acc, wk, shape3 = self.small
            if type(cols) is tuple:
                cols, acc = np.empty(cols, self.dtype), np.empty(acc, self.dtype)
                self.small = (cols, acc, wk, shape3)
            np.copyto(cols, self._windows(xp, x))
            np.einsum("pkc,kc->pc", cols.reshape(shape3), wk, out=acc)
            out = self._out
            if out is None or out.shape != self.out_shape:
                out = np.empty(self.out_shape, np.int8)
            o2 = out.reshape(acc.shape)
            res = self.requant(acc, self.bias, out=o2)
            if res is not o2:
                np.copyto(o2, res)
            return [out]
        if self.einsum:
            # einsum runs faster on a contiguous copy of the windows than on the strided view
            # (25x5x64 3x3: 23 instead of 35 us), whatever the channel count
            view = self._windows(xp, x)
            n, oh, ow, kh, kw, oc = view.shape
            out = self._out
            if out is None or out.shape != self.out_shape:
                out = np.empty(self.out_shape, np.int8)
            # window columns of at most EINSUM_COLS_BYTES a block of output rows (palm
            # detection's 6x6x256 5x5 layer had copied 0.9 MB of them at once); the sums are
            # exact, so blocks do not change them
            bh = max(1, self.EINSUM_COLS_BYTES // (np.dtype(self.dtype).itemsize * ow * kh * kw * oc))
            if n == 1 and bh >= oh:
                blocks = [(view.reshape(1, *view.shape[1:]), out.reshape(-1, oc))]
            else:
                blocks = [(view[b:b + 1, r0:r0 + bh], out[b, r0:r0 + bh].reshape(-1, oc))
                          for b in range(n) for r0 in range(0, oh, bh)]
            wk = self.wf.reshape(kh * kw, oc)
            for v, o2 in blocks:
                cols = scratch("dw.cols", v.shape, self.dtype)
                np.copyto(cols, v)
                m = o2.shape[0]
                acc = np.einsum("pkc,kc->pc", cols.reshape(m, kh * kw, oc), wk,
                                out=scratch("dw.acc", (m, oc), self.dtype))
                res = self.requant(acc, self.bias, out=o2)
                if res is not o2:
                    np.copyto(o2, res)
            return [out]
        if self.quantized and self.out_shape[3] >= self.COLS_MIN_CHANNELS:
            return [self._eval_int8_cols(xp, x)]
        sh, sw = self.strides
        planes = {}
        for (py, px), shape in self.planes.items():
            planes[(py, px)] = scratch(f"dw.phase{py}.{px}", shape, xp.dtype)
            np.copyto(planes[(py, px)], xp[:, py::sh, px::sw, :])
        n, oh, ow, oc = self.out_shape
        if self.quantized:
            out = self._out
            if out is None or out.shape != self.out_shape:
                out = np.empty(self.out_shape, np.int8)
            bh = max(1, self.ACC_BYTES // (np.dtype(self.acc_dtype).itemsize * ow * oc))  # rows per block
            for b in range(n):
                for y0 in range(0, oh, bh):
                    rows = min(bh, oh - y0)
                    shape = (rows, ow // self.tw, self.tw, oc)
                    acc = scratch("dw.acc", shape, self.acc_dtype)
                    tmp = scratch("dw.tmp", shape, self.acc_dtype)
                    for i, (phase, ty, tx, wt) in enumerate(self._tap_list()):
                        src = planes[phase] if planes else xp
                        # (rows, OW, C) slice viewed as (rows, OW / tw, tw, C): no copy, and the
                        # (tw, C) weight tile makes the inner loop tw * C values long
                        xs = src[b, y0 + ty:y0 + ty + rows, tx:tx + ow, :].reshape(shape)
                        if i == 0:
                            np.multiply(xs, wt, out=acc)
                        else:
                            np.multiply(xs, wt, out=tmp)
                            acc += tmp
                    self.requant(acc.reshape(rows, ow, oc), self.bias, out=out[b, y0:y0 + rows])
            return [out]
        # float32: the taps are summed straight into the (bound) output, a block of rows at a
        # time, so the product scratch is a block (ACC_BYTES), not a whole output (pose
        # detection's float graph: 1.8 MB), and no output-sized array is made per call. Each
        # value still sums its taps in the reference's order.
        out = self._out
        if out is None or out.shape != self.out_shape or not out.flags.c_contiguous:
            out = np.empty(self.out_shape, self.acc_dtype)
        tw = self.tw
        bh = max(1, self.ACC_BYTES // (np.dtype(self.acc_dtype).itemsize * ow * oc))
        # each tap's weights tiled tw times (long inner loops) into one shared row, per call:
        # kept per tap they had been 4.8 MB on hand landmark's float graph, 7.7 MB on pose's
        tile = scratch("dw.wt", (tw, oc), self.acc_dtype)
        wrow = tile.reshape(-1)
        for b in range(n):
            for r0 in range(0, oh, bh):
                rows = min(bh, oh - r0)
                shape = (rows, ow // tw, tw * oc)
                acc = out[b, r0:r0 + rows].reshape(shape)
                tmp = scratch("dw.tmp", shape, self.acc_dtype)
                for i, (phase, y0, x0, wt) in enumerate(self._tap_list()):
                    src = planes[phase] if planes else xp
                    xs = src[b, y0 + r0:y0 + r0 + rows, x0:x0 + ow, :].reshape(shape)
                    np.copyto(tile, wt)
                    if i == 0:
                        np.multiply(xs, wrow, out=acc)
                    else:
                        np.multiply(xs, wrow, out=tmp)
                        acc += tmp
        out += self.bias
        np.clip(out, self.lo, self.hi, out=out)
        return [out]


def _transpose_conv_key(ctx) -> str:
    t = ctx.input(2)
    return t.dtype if t is not None else ctx.output(0).dtype


@register("TRANSPOSE_CONV", "float32", "int8", key=_transpose_conv_key)
class TransposeConv(Kernel):
    """TRANSPOSE_CONV (inputs: output_shape, OHWI weights, input, optional bias).

    Each input pixel's contribution to every filter tap is one GEMM, ``(N*H*W, Cin) x (Cin,
    KH*KW*Cout)``; the taps are then scatter-added into the output at ``in * stride - pad + k``
    (out-of-range contributions dropped), the bias added, and for int8 the int32 sums
    requantized per channel.
    """

    def prepare(self):
        ctx, opts = self.ctx, self.ctx.options
        shape = ctx.const(0)
        if shape is None:
            raise ctx.fail("output_shape must be a constant (or constant-folded) tensor")
        out_shape = tuple(int(v) for v in np.asarray(shape).reshape(-1))
        x_shape, w_shape = ctx.input_shape(2), ctx.input_shape(1)
        if len(out_shape) != 4 or len(x_shape) != 4 or len(w_shape) != 4:
            raise ctx.fail(f"expects 4-D output_shape, input and weights, got {list(out_shape)}, "
                           f"{list(x_shape)} and {list(w_shape)}")
        n, h, w, ci = x_shape
        co, kh, kw, wci = w_shape
        on, oh, ow, oc = out_shape
        if wci != ci or oc != co or on != n:
            raise ctx.fail(f"shapes disagree: input {list(x_shape)}, weights {list(w_shape)}, "
                           f"output {list(out_shape)}")
        sh, sw, _, _ = _strides(ctx, opts, dilation=False)
        pad = opts.get("padding", Padding.SAME)
        # TFLite derives the padding as if this were a convolution from the output to the input.
        if conv_output_size(pad, oh, kh, sh) != h or conv_output_size(pad, ow, kw, sw) != w:
            raise ctx.fail(f"input {h}x{w} does not match output {oh}x{ow} with this padding and stride")
        self.pt = conv_padding(pad, oh, kh, sh, 1, h)[0]
        self.pl = conv_padding(pad, ow, kw, sw, 1, w)[0]
        self.geom = (kh, kw, sh, sw)
        self.out_shape = out_shape
        # scatter buffer covers every out index in [-pad, (in-1)*stride - pad + k - 1] and the output
        self.buf_h = max((h - 1) * sh + kh, self.pt + oh)
        self.buf_w = max((w - 1) * sw + kw, self.pl + ow)
        self.quantized = check_weighted_types(ctx, 2, 1, 3)
        wdata = ctx.const(1)
        if wdata is None:
            raise ctx.fail("weights must be a constant tensor")
        if self.quantized:
            _, self.x_zp = qparams(ctx.input(2))
            maxa = max(127 - self.x_zp, self.x_zp + 128)
            maxw = max(1, int(np.abs(np.asarray(wdata, np.int64)).max(initial=0)))
            terms = ci * -(-kh // sh) * -(-kw // sw)
            self.dtype = np.float32 if terms <= exact_chunk(maxa, maxw) else np.float64
            self.bias = _bias(ctx, 3, co, np.int64)
            self.requant = _conv_quant(ctx, ctx.input(2), co)
        else:
            self.dtype = np.float32
            self.bias = _bias(ctx, 3, co, np.float32)
            self.lo, self.hi = float_activation_range(opts.get("fused_activation_function", 0))
        # (Cin, KH*KW*Cout): column (ky, kx, co) holds w[co, ky, kx, :]
        self.wmat = np.ascontiguousarray(np.asarray(wdata, self.dtype).transpose(3, 1, 2, 0).reshape(ci, -1))
        return [out_shape]

    def eval(self, inputs):
        x = inputs[2]
        kh, kw, sh, sw = self.geom
        n, h, w, ci = x.shape
        co = self.out_shape[3]
        xf = x.astype(self.dtype)
        if self.quantized:
            xf -= self.x_zp
        cols = np.matmul(xf.reshape(-1, ci), self.wmat).reshape(n, h, w, kh, kw, co)
        buf = scratch("tconv.buf", (n, self.buf_h, self.buf_w, co), self.dtype)
        buf.fill(0)
        for ky in range(kh):
            for kx in range(kw):
                buf[:, ky:ky + (h - 1) * sh + 1:sh, kx:kx + (w - 1) * sw + 1:sw, :] += cols[:, :, :, ky, kx, :]
        _, oh, ow, _ = self.out_shape
        out = buf[:, self.pt:self.pt + oh, self.pl:self.pl + ow, :]
        if self.quantized:
            return [self.requant(out, self.bias)]
        out = out + self.bias
        np.clip(out, self.lo, self.hi, out=out)
        return [out]
