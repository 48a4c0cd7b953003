"""MEAN, SUM, REDUCE_MAX over the axes in input 1 (float32 and int8), as LiteRT's reduce.cc with
the reference resolver.

Axes: negative values count from the end, duplicates are ignored; ``keep_dims`` keeps reduced
dimensions as size 1.

int8 requantization (``reference_ops::QuantizedMeanOrSum``), with ``(m, e) =
QuantizeMultiplier(s_in / s_out)`` and n the number of reduced elements:

* MEAN: the multiplier absorbs 1/n in fixed point: ``k = min(floor(log2 n), 32, 31 + e)``,
  ``m' = (m << k) // n``, ``e' = e - k``; then
  ``out = clamp(MultiplyByQuantizedMultiplier(sum(q) - zp_in * n, m', e') + zp_out)``.
* SUM: the same with ``(m, e)``, also when input and output quantization are equal (TensorFlow's
  reduce.cc then sums the raw int8 values and lets them wrap; LiteRT 2.3's reference kernel
  requantizes, and so does edgerun).
* REDUCE_MAX: the raw maximum (LiteRT requires equal input and output quantization).
"""

from __future__ import annotations

import numpy as np

from edgerun.ops.common import qparams
from edgerun.ops.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from edgerun.ops.registry import Kernel, register


@register("MEAN", "float32", "int8")
@register("SUM", "float32", "int8")
@register("REDUCE_MAX", "float32", "int8")
class Reduce(Kernel):
    def prepare(self):
        ctx = self.ctx
        shape = ctx.input_shape(0)
        rank = len(shape)
        axes_v = ctx.const(1)
        if axes_v is None and 0 in ctx.input_shape(1):
            axes_v = np.zeros(0, np.int32)  # an empty constant has no buffer
        if axes_v is None:
            raise ctx.fail("the axis input must be constant or computable before invoke")
        axes = []
        for a in np.asarray(axes_v).reshape(-1):
            a = int(a)
            r = a + rank if a < 0 else a
            if rank and not 0 <= r < rank:
                raise ctx.fail(f"axis {a} is out of range for rank {rank}")
            if rank and r not in axes:
                axes.append(r)
        self.axes = tuple(sorted(axes))
        keep = bool(ctx.options.get("keep_dims", False))
        if keep:
            self.out_shape = tuple(1 if i in self.axes else d for i, d in enumerate(shape))
        else:
            self.out_shape = tuple(d for i, d in enumerate(shape) if i not in self.axes)
        self.n = int(np.prod([shape[a] for a in self.axes], dtype=np.int64))
        self.int8 = ctx.input(0).dtype == "int8"
        self.mode = ctx.name
        if self.int8:
            s_in, self.zp_in = qparams(ctx.input(0))
            s_out, self.zp_out = qparams(ctx.output(0))
            m, e = quantize_multiplier(float(np.float32(s_in)) / float(np.float32(s_out)))
            if self.mode == "MEAN" and self.n > 0:
                k = min(self.n.bit_length() - 1, 32, 31 + e)
                m = int((m << k) // self.n) if k >= 0 else int((m >> -k) // self.n)
                e = e - k
            self.mult, self.shift = m, e
        return [self.out_shape]

    def eval(self, inputs):
        x = inputs[0]
        if x.size == 0 and self.mode == "MEAN":
            return [np.full(self.out_shape, np.nan if x.dtype == np.float32 else 0, x.dtype)]
        if self.mode == "REDUCE_MAX":
            return [np.max(x, axis=self.axes).reshape(self.out_shape)]
        if not self.int8:
            s = np.sum(x, axis=self.axes, dtype=np.float64)
            if self.mode == "MEAN":
                s = s / max(self.n, 1)
            return [s.astype(np.float32).reshape(self.out_shape)]
        acc = np.sum(x, axis=self.axes, dtype=np.int64).reshape(self.out_shape)
        y = multiply_by_quantized_multiplier(acc - self.zp_in * self.n, self.mult, self.shift) + self.zp_out
        return [np.clip(y, -128, 127).astype(np.int8)]
