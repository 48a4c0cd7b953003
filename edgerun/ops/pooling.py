"""AVERAGE_POOL_2D and MAX_POOL_2D (NHWC; float32 and int8), as LiteRT's reference pooling.

Windows start at ``out * stride - pad_before`` (padding from ``Padding`` as TFLite's
ComputePaddingHeightWidth) and are clipped to the input: padded positions never take part, so an
average divides by the number of real elements in its window. int8 average pooling rounds the
integer sum to nearest, ties away from zero (``(acc +- count/2) / count`` in C integer division),
exactly as ``reference_integer_ops::AveragePool``; int8 max pooling takes the raw maximum. Both
then clamp to the fused activation (quantized with the output's scale and zero point for int8).

Vectorized, with no Python loop over pixels. A window that covers the whole input (global
pooling) is one reduction over H and W. Small windows (up to 16 taps) loop over the taps: each
tap is one strided slice of the input, combined with ``np.maximum`` or added into an int32 /
float64 accumulator, and padding goes through a buffer allocated in prepare whose border keeps
the fill value. Larger windows use a sliding-window view of the padded input
(``numpy.lib.stride_tricks.sliding_window_view``).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from edgerun.ops.common import (
    apply_float_activation,
    clip_ufunc,
    conv_output_size,
    conv_padding,
    qparams,
    quantized_activation_range,
)
from edgerun.ops.registry import Kernel, register
from edgerun.schema.tflite import Activation, Padding


@register("AVERAGE_POOL_2D", "float32", "int8")
@register("MAX_POOL_2D", "float32", "int8")
class Pool2D(Kernel):
    #: largest padded input a node keeps as its own buffer (border filled once in prepare)
    OWN_BYTES = 1 << 20

    def prepare(self):
        ctx = self.ctx
        o = ctx.options
        shape = ctx.input_shape(0)
        if len(shape) != 4:
            raise ctx.fail(f"pooling needs a 4-D NHWC input, got shape {list(shape)}")
        n, h, w, c = shape
        self.fh, self.fw = int(o.get("filter_height", 1)), int(o.get("filter_width", 1))
        self.sh, self.sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
        if min(self.fh, self.fw, self.sh, self.sw) < 1:
            raise ctx.fail("filter size and strides must be positive")
        padding = int(o.get("padding", Padding.SAME))
        self.act = int(o.get("fused_activation_function", Activation.NONE))
        self.oh = conv_output_size(padding, h, self.fh, self.sh)
        self.ow = conv_output_size(padding, w, self.fw, self.sw)
        if self.oh < 1 or self.ow < 1:
            raise ctx.fail(f"a {self.fh}x{self.fw} window does not fit a {h}x{w} input")
        pt, _ = conv_padding(padding, h, self.fh, self.sh, 1, self.oh)
        pl, _ = conv_padding(padding, w, self.fw, self.sw, 1, self.ow)
        # Pad after so that every window lies inside the padded array.
        pb = max(0, (self.oh - 1) * self.sh + self.fh - h - pt)
        pr = max(0, (self.ow - 1) * self.sw + self.fw - w - pl)
        self.pads = ((0, 0), (pt, pb), (pl, pr), (0, 0))
        self.is_max = ctx.name == "MAX_POOL_2D"
        self.int8 = ctx.input(0).dtype == "int8"
        if self.int8:
            s_out, zp_out = qparams(ctx.output(0))
            self.qlo, self.qhi = quantized_activation_range(self.act, s_out, zp_out)
            self.fill = -128 if self.is_max else 0
        else:
            self.fill = -np.inf if self.is_max else 0.0
        if not self.is_max:
            ones = np.pad(np.ones((h, w), np.int64), self.pads[1:3])
            count = self._windows(ones[None, :, :, None]).sum(axis=(-2, -1))
            self.count = count[0, :, :, 0][None, :, :, None]  # (1, oh, ow, 1)
            if (self.count == self.count.flat[0]).all():
                self.count = int(self.count.flat[0])  # every window full: a scalar divisor
        # fast paths: a window covering the whole input, or a loop over a few taps
        self.is_global = (self.oh == 1 and self.ow == 1 and pt == 0 and pl == 0
                          and self.fh >= h and self.fw >= w)
        self.tap_loop = not self.is_global and self.fh * self.fw <= 16
        self.clamp = (not self.int8) or (self.qlo, self.qhi) != (-128, 127)
        self.xp = None
        self.needs_pad = self.tap_loop and (any(self.pads[1]) or any(self.pads[2]))
        hp, wp = h + pt + self.pads[1][1], w + pl + self.pads[2][1]
        dt = np.dtype(np.int8 if self.int8 else np.float32)
        if self.needs_pad and n * hp * wp * c * dt.itemsize <= self.OWN_BYTES:
            self.xp = np.full((n, hp, wp, c), self.fill, dt)
            self.xp_inner = self.xp[:, pt:pt + h, pl:pl + w, :]
        return [(n, self.oh, self.ow, c)]

    def _tap_slices(self, xp: np.ndarray) -> list[np.ndarray]:
        sh, sw, oh, ow = self.sh, self.sw, self.oh, self.ow
        return [xp[:, ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw, :]
                for ky in range(self.fh) for kx in range(self.fw)]

    def _finish_int8_average(self, acc: np.ndarray) -> np.ndarray:
        """acc / count rounded half away from zero (C: (acc +- count/2) / count), then the clamp."""
        count = self.count
        if isinstance(count, int):
            # C's (acc +- count/2) / count as a floor division: for acc < 0 it is
            # floor((acc + h - 1) / count) when count = 2h is even and floor((acc + h) / count)
            # when count = 2h + 1 is odd (then there are no ties); acc >> 31 is -1 for acc < 0.
            if count % 2 == 0:
                acc += acc >> 31
            acc += count // 2
            if count & (count - 1) == 0:
                acc >>= count.bit_length() - 1
            else:
                acc //= count
            clip_ufunc(acc, self.qlo, self.qhi, out=acc)
            return acc.astype(np.int8)
        neg = acc < 0
        t = np.abs(acc)
        t += count // 2
        t //= count
        np.negative(t, out=t, where=neg)
        clip_ufunc(t, self.qlo, self.qhi, out=t)
        return t.astype(np.int8)

    def _fast(self, x: np.ndarray) -> np.ndarray:
        if self.is_global:
            if self.is_max:
                y = x.max(axis=(1, 2), keepdims=True)
            elif self.int8:
                return self._finish_int8_average(x.sum(axis=(1, 2), keepdims=True, dtype=np.int32))
            else:
                y = (x.sum(axis=(1, 2), keepdims=True, dtype=np.float64) / self.count).astype(np.float32)
        else:
            if self.xp is not None:
                np.copyto(self.xp_inner, x)
                x = self.xp
            elif self.needs_pad:  # too large to keep a padded copy per node
                x = np.pad(x, self.pads, constant_values=self.fill)
            taps = self._tap_slices(x)
            if self.is_max:
                y = taps[0].copy() if len(taps) == 1 else np.maximum(taps[0], taps[1])
                for t in taps[2:]:
                    np.maximum(y, t, out=y)
            else:
                acc_dtype = np.int32 if self.int8 else np.float64
                if len(taps) == 1:
                    acc = taps[0].astype(acc_dtype)
                else:
                    acc = np.add(taps[0], taps[1], dtype=acc_dtype)
                for t in taps[2:]:
                    acc += t
                if self.int8:
                    return self._finish_int8_average(acc)
                y = (acc / self.count).astype(np.float32)
        if self.int8:
            if self.clamp:
                clip_ufunc(y, self.qlo, self.qhi, out=y)
            return y
        return apply_float_activation(y, self.act).astype(np.float32, copy=False)

    #: global int8 averages over at most this many values per window take the table path
    PLAN_MAX_COUNT = 1 << 10

    def compile(self, ins, outs):
        """The invoke plan's bound call for a global int8 AVERAGE_POOL_2D: one int32 sum per
        channel, then the rounding division and clamp as one lookup in a table over every
        possible sum (built in compile from ``_finish_int8_average`` itself)."""
        x, out = ins[0], outs[0]
        count = getattr(self, "count", None)
        if (x is None or out is None or not self.is_global or self.is_max or not self.int8
                or not isinstance(count, int) or count > self.PLAN_MAX_COUNT
                or not x.flags.c_contiguous or not out.flags.c_contiguous):
            return None
        n, h, w, c = x.shape
        if count != h * w:
            return None
        sums = np.arange(-128 * count, 127 * count + 1, dtype=np.int32)
        table = self._finish_int8_average(sums.copy())
        if n != 1:
            return None
        x2 = x.reshape(h * w, c)  # numpy reduces the leading axis of a 2-D array fastest
        acc = np.empty(c, np.int32)
        out2 = out.reshape(c)
        reduce, add, take, offset = np.add.reduce, np.add, table.take, np.int32(128 * count)

        def call():
            reduce(x2, 0, np.int32, acc)
            add(acc, offset, out=acc)
            take(acc, None, out2, "clip")
        return call

    def _windows(self, xp: np.ndarray) -> np.ndarray:
        win = sliding_window_view(xp, (self.fh, self.fw), axis=(1, 2))
        return win[:, ::self.sh, ::self.sw][:, :self.oh, :self.ow]  # (n, oh, ow, c, fh, fw)

    def eval(self, inputs):
        x = inputs[0]
        if self.is_global or self.tap_loop:
            return [self._fast(x)]
        xp = np.pad(x, self.pads, constant_values=self.fill)
        win = self._windows(xp)
        if self.is_max:
            y = win.max(axis=(-2, -1))
            if self.int8:
                return [np.clip(y, self.qlo, self.qhi).astype(np.int8)]
            return [apply_float_activation(y, self.act).astype(np.float32)]
        if self.int8:
            acc = win.sum(axis=(-2, -1), dtype=np.int64)
            half = self.count // 2
            q = np.sign(acc) * ((np.abs(acc) + half) // self.count)
            return [np.clip(q, self.qlo, self.qhi).astype(np.int8)]
        total = win.sum(axis=(-2, -1), dtype=np.float64)
        y = (total / self.count).astype(np.float32)
        return [apply_float_activation(y, self.act).astype(np.float32)]
