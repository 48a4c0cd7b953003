"""Hybrid kernels ("dynamic range quantization"): float32 input and output, int8 weights.

LiteRT quantizes the float input on the fly, computes the integer dot products, and scales the
int32 sums back to float. edgerun follows the same arithmetic, operation for operation, so its
outputs equal LiteRT's (BUILTIN_REF) bit for bit:

* **input quantization** per batch row (FULLY_CONNECTED: each row of the (batch, input_size)
  view; CONV_2D / DEPTHWISE_CONV_2D: each image):

  - symmetric (``SymmetricQuantizeFloats``): ``range = max(|min|, |max|)``, ``s = range / 127``,
    ``q = clamp(round(x * (127 / range)), -127, 127)``, all in float32; a zero range gives
    ``q = 0, s = 1``;
  - asymmetric (``AsymmetricQuantizeFloats``): ``rmin = min(0, min)``, ``rmax = max(0, max)``,
    ``s = (rmax - rmin) / 255`` in float32, the zero point (float64) from whichever end has the
    smaller error, nudged into [-128, 127] and rounded; then in float32
    ``q = clamp(round(zp + x * (1 / s)), -128, 127)``.
  ``round`` is C's (ties away from zero).
* **FULLY_CONNECTED** (``EvalHybrid``): output starts as the bias (or 0); per row and unit,
  ``out += float(dot(w, q) - zp * rowsum(w)) * scale`` with ``scale = s_in * s_w`` (per-tensor
  weights: the product is formed first) or ``s_in * s_w[unit]`` (per-channel); then the fused
  activation. ``asymmetric_quantize_inputs`` picks the input scheme.
* **CONV_2D**: per-channel weights (``EvalHybridPerChannel``, asymmetric input):
  ``acc = sum(w * (q - zp))`` over the window (outside the image contributes nothing), then
  ``float(acc) * s_w[c] * s_in + bias``; per-tensor weights (``EvalHybrid``, symmetric input):
  ``bias + float(acc) * (s_in * s_w)``.
* **DEPTHWISE_CONV_2D** (per-channel, asymmetric input, ``DepthwiseConvHybridPerChannel``):
  ``float(acc) * (s_w[c] * s_in) + bias``.

The integer sums are exact in float64 BLAS (|q| <= 128, |w| <= 127, far fewer than 2^53 / 2^14
terms). BATCH_MATMUL and LSTM hybrids are not implemented (refused with the reason).
"""

from __future__ import annotations

import numpy as np

from edgerun._util import round_half_away
from edgerun.ops.common import apply_float_activation, conv_output_size, conv_padding
from edgerun.ops.registry import Kernel, NodeContext, register

_F32 = np.float32


def hybrid_key(ctx: NodeContext) -> str:
    """Kernel key of CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED: ``hybrid`` for float32 input with
    int8 weights, else the first input's dtype (the usual key)."""
    x, w = ctx.input(0), ctx.input(1)
    if x is not None and w is not None and x.dtype == "float32" and w.dtype == "int8":
        return "hybrid"
    for t in ctx.inputs:
        if t is not None:
            return t.dtype
    return ctx.output(0).dtype


def quantize_symmetric(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q int32 (B, N), scale float32 (B,)) per row, as ``SymmetricQuantizeFloats``."""
    mn, mx = rows.min(axis=1), rows.max(axis=1)
    rng = np.maximum(np.abs(mn), np.abs(mx)).astype(_F32)
    zero = rng == 0
    safe = np.where(zero, _F32(1), rng)
    scale = np.where(zero, _F32(1), (safe / _F32(127)).astype(_F32))
    inv = (_F32(127) / safe).astype(_F32)
    v = (rows * inv[:, None]).astype(_F32)
    q = np.clip(round_half_away(v), -127, 127).astype(np.int32)
    q[zero] = 0
    return q, scale


def quantize_asymmetric(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q int32 (B, N), scale float32 (B,), zero point int32 (B,)) per row, as ``AsymmetricQuantizeFloats``.

    The scale is ``(rmax - rmin) / 255`` in float32 (a float64 quotient rounded afterwards differs by
    one ulp for some rows, and LiteRT's outputs with it); the zero point follows in float64 from it.
    """
    B = rows.shape[0]
    q = np.zeros(rows.shape, np.int32)
    scale = np.ones(B, _F32)
    zp = np.zeros(B, np.int32)
    for b in range(B):
        rmin = min(_F32(0), rows[b].min())
        rmax = max(_F32(0), rows[b].max())
        if rmin == rmax:
            continue
        sf = _F32((rmax - rmin) / _F32(255))
        s, lo, hi = float(sf), float(rmin), float(rmax)
        zp_min, zp_max = -128.0 - lo / s, 127.0 - hi / s
        err_min, err_max = 128.0 + abs(lo / s), 127.0 + abs(hi / s)
        z = zp_min if err_min < err_max else zp_max
        nz = -128 if z <= -128.0 else 127 if z >= 127.0 else int(round_half_away(z))
        scale[b], zp[b] = sf, nz
        inv = _F32(1.0) / sf
        v = (_F32(nz) + (rows[b] * inv).astype(_F32)).astype(_F32)
        q[b] = np.clip(round_half_away(v), -128, 127)
    return q, scale, zp


def _weight_scales(ctx, w, nout: int) -> tuple[np.ndarray, bool]:
    qp = w.quant
    if qp is None or qp.empty:
        raise ctx.fail("hybrid kernel: the int8 weights carry no quantization scale")
    s = np.asarray(qp.scale, _F32)
    if np.any(np.asarray(qp.zero_point) != 0):
        raise ctx.fail("hybrid kernel: int8 weights must be symmetric (zero point 0)")
    if s.size == 1:
        return s, False
    if s.size != nout:
        raise ctx.fail(f"hybrid kernel: {s.size} weight scales for {nout} output channels")
    return s, True


@register("FULLY_CONNECTED", "hybrid", key=hybrid_key)
class HybridFullyConnected(Kernel):
    def prepare(self):
        ctx = self.ctx
        w = ctx.input(1)
        wd = ctx.const(1)
        if wd is None:
            raise ctx.fail("hybrid FULLY_CONNECTED needs constant int8 weights")
        self.w = np.asarray(wd, np.int64).reshape(wd.shape[0], -1)
        self.units, self.depth = self.w.shape
        self.scales, self.per_channel = _weight_scales(ctx, w, self.units)
        self.rowsum = self.w.sum(axis=1)
        self.wt = self.w.T.astype(np.float64)
        b = ctx.input(2)
        self.bias = np.asarray(ctx.const(2), _F32) if b is not None else None
        if b is not None and self.bias is None:
            raise ctx.fail("hybrid FULLY_CONNECTED needs a constant float32 bias")
        self.asym = bool(ctx.options.get("asymmetric_quantize_inputs", False))
        self.act = int(ctx.options.get("fused_activation_function", 0))
        return None

    def eval(self, inputs):
        x = np.asarray(inputs[0], _F32)
        rows = x.reshape(-1, self.depth)
        if self.asym:
            q, s_in, zp = quantize_asymmetric(rows)
        else:
            (q, s_in), zp = quantize_symmetric(rows), None
        acc = q.astype(np.float64) @ self.wt  # exact integer sums
        if zp is not None:
            acc = acc - zp[:, None].astype(np.float64) * self.rowsum[None, :]
        if self.per_channel:
            scale = (s_in[:, None] * self.scales[None, :]).astype(_F32)
        else:
            scale = (s_in * self.scales[0]).astype(_F32)[:, None]
        out = np.zeros(acc.shape, _F32) if self.bias is None else np.broadcast_to(self.bias, acc.shape).astype(_F32)
        out = (out + (acc.astype(_F32) * scale).astype(_F32)).astype(_F32)
        out = apply_float_activation(out, self.act).astype(_F32)
        shp = tuple(int(d) for d in self.ctx.output(0).shape)
        return [out.reshape(shp) if int(np.prod(shp)) == out.size else out]


class _HybridConvBase(Kernel):
    depthwise = False

    def prepare(self):
        ctx = self.ctx
        o = ctx.options
        shape = ctx.input_shape(0)
        wd = ctx.const(1)
        if len(shape) != 4 or wd is None or wd.ndim != 4:
            raise ctx.fail("hybrid convolution needs a 4-D NHWC input and constant 4-D int8 weights")
        self.w = np.asarray(wd, np.int64)
        n, h, w_, c = shape
        kh, kw = self.w.shape[1:3]
        self.sh, self.sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
        self.dh, self.dw = int(o.get("dilation_h_factor", 1)), int(o.get("dilation_w_factor", 1))
        padding = int(o.get("padding", 0))
        self.oh = conv_output_size(padding, h, kh, self.sh, self.dh)
        self.ow = conv_output_size(padding, w_, kw, self.sw, self.dw)
        self.pt, _ = conv_padding(padding, h, kh, self.sh, self.dh, self.oh)
        self.pl, _ = conv_padding(padding, w_, kw, self.sw, self.dw, self.ow)
        nout = self.w.shape[3] if self.depthwise else self.w.shape[0]
        if self.depthwise:
            self.mult = int(o.get("depth_multiplier", 1)) or 1
            if nout != c * self.mult:
                raise ctx.fail(f"depthwise filter has {nout} channels for {c} inputs x {self.mult}")
        elif self.w.shape[3] != c:
            raise ctx.fail(f"filter depth {self.w.shape[3]} does not match {c} input channels")
        self.scales, self.per_channel = _weight_scales(ctx, ctx.input(1), nout)
        if self.depthwise and not self.per_channel:
            self.scales = np.full(nout, self.scales[0], _F32)
        b = ctx.input(2)
        self.bias = np.asarray(ctx.const(2), _F32) if b is not None else None
        self.act = int(o.get("fused_activation_function", 0))
        self.nout, self.kh, self.kw = nout, kh, kw
        return [(n, self.oh, self.ow, nout)]

    def _windows(self, qc: np.ndarray) -> np.ndarray:
        """(N, OH, OW, KH, KW, C) windows of the zero-point-centred int input (padding contributes 0)."""
        n, h, w_, c = qc.shape
        ph = max(0, (self.oh - 1) * self.sh + (self.kh - 1) * self.dh + 1 - h - self.pt)
        pw = max(0, (self.ow - 1) * self.sw + (self.kw - 1) * self.dw + 1 - w_ - self.pl)
        p = np.pad(qc, ((0, 0), (self.pt, ph), (self.pl, pw), (0, 0)))
        iy = (np.arange(self.oh) * self.sh)[:, None] + np.arange(self.kh)[None, :] * self.dh
        ix = (np.arange(self.ow) * self.sw)[:, None] + np.arange(self.kw)[None, :] * self.dw
        return p[:, iy[:, None, :, None], ix[None, :, None, :], :]  # (N, OH, OW, KH, KW, C)

    def eval(self, inputs):
        x = np.asarray(inputs[0], _F32)
        n = x.shape[0]
        rows = x.reshape(n, -1)
        if self.per_channel or self.depthwise:
            q, s_in, zp = quantize_asymmetric(rows)
        else:
            (q, s_in), zp = quantize_symmetric(rows), np.zeros(n, np.int32)
        qc = (q - zp[:, None]).reshape(x.shape).astype(np.float64)
        win = self._windows(qc)
        acc = self._accumulate(win)  # (N, OH, OW, Cout) exact integers in float64
        acc32 = acc.astype(_F32)
        s_b = s_in[:, None, None, None]
        if self.depthwise:
            y = (acc32 * (self.scales * s_b).astype(_F32)).astype(_F32)
        elif self.per_channel:
            y = ((acc32 * self.scales).astype(_F32) * s_b).astype(_F32)
        else:
            y = (acc32 * (s_in * self.scales[0]).astype(_F32)[:, None, None, None]).astype(_F32)
        if self.bias is not None:
            y = (y + self.bias).astype(_F32)
        return [apply_float_activation(y, self.act).astype(_F32)]


@register("CONV_2D", "hybrid", key=hybrid_key)
class HybridConv2D(_HybridConvBase):
    def _accumulate(self, win):
        n, oh, ow = win.shape[:3]
        cols = win.reshape(n * oh * ow, -1)
        wm = self.w.reshape(self.w.shape[0], -1).T.astype(np.float64)  # (KH*KW*C, Cout)
        return (cols @ wm).reshape(n, oh, ow, -1)


@register("DEPTHWISE_CONV_2D", "hybrid", key=hybrid_key)
class HybridDepthwiseConv2D(_HybridConvBase):
    depthwise = True

    def _accumulate(self, win):
        # output channel oc reads input channel oc // multiplier
        src = np.repeat(win, self.mult, axis=5) if self.mult > 1 else win
        return np.einsum("nyxhwc,hwc->nyxc", src, self.w[0].astype(np.float64))
