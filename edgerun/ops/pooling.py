"""AVERAGE_POOL_2D and MAX_POOL_2D (NHWC; float32 and int8), as LiteRT's reference pooling.

Windows start at ``out * stride - pad_before`` (padding from ``Padding`` as TFLite's
ComputePaddingHeightWidth) and are clipped to the input: padded positions never take part, so an
average divides by the number of real elements in its window. int8 average pooling rounds the
integer sum to nearest, ties away from zero (``(acc +- count/2) / count`` in C integer division),
exactly as ``reference_integer_ops::AveragePool``; int8 max pooling takes the raw maximum. Both
then clamp to the fused activation (quantized with the output's scale and zero point for int8).

Vectorized: the input is padded once and viewed as sliding windows
(``numpy.lib.stride_tricks.sliding_window_view``); no Python loop runs over pixels.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from edgerun.ops.common import (
    apply_float_activation,
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
        return [(n, self.oh, self.ow, c)]

    def _windows(self, xp: np.ndarray) -> np.ndarray:
        win = sliding_window_view(xp, (self.fh, self.fw), axis=(1, 2))
        return win[:, ::self.sh, ::self.sw][:, :self.oh, :self.ow]  # (n, oh, ow, c, fh, fw)

    def eval(self, inputs):
        x = inputs[0]
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
