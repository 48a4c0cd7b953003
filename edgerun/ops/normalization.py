"""LOCAL_RESPONSE_NORMALIZATION (float32), as LiteRT's reference kernel computes it.

Along the last (channel) axis of a 4-D input, for channel ``c``::

    accum = sum of x[j]^2 for j in [max(0, c - radius), min(depth, c + radius + 1))
    y[c]  = x[c] * pow(bias + alpha * accum, -beta)

``accum`` is summed in float32 from the lowest channel up, as ``reference_ops`` does, so the
shifted-slice sum below adds the same terms in the same order (an out-of-range term adds 0.0).
TFLite has no int8 form: the converter keeps the op in float between DEQUANTIZE / QUANTIZE.
"""

from __future__ import annotations

import numpy as np

from edgerun.ops.registry import Kernel, QuantRule, define, register

_F32 = np.float32


@register("LOCAL_RESPONSE_NORMALIZATION", "float32")
class LocalResponseNormalization(Kernel):
    def prepare(self):
        ctx = self.ctx
        shape = ctx.input_shape(0)
        if len(shape) != 4:
            raise ctx.fail(f"LOCAL_RESPONSE_NORMALIZATION needs a 4-D input, got shape {list(shape)}")
        o = ctx.options
        self.radius = int(o.get("radius", 0))
        if self.radius < 0:
            raise ctx.fail(f"radius {self.radius} is negative")
        self.bias, self.alpha, self.beta = (_F32(o.get(k, 0.0)) for k in ("bias", "alpha", "beta"))
        return None

    def eval(self, inputs):
        x = inputs[0]
        depth = x.shape[-1]
        sq = x * x
        r = self.radius
        padded = np.zeros(x.shape[:-1] + (depth + 2 * r,), _F32)
        padded[..., r:r + depth] = sq
        # reference order: j runs from max(0, c - r) upwards; leading out-of-range terms are 0.0 and
        # adding 0.0 first leaves the float32 sum unchanged
        accum = np.zeros_like(sq)
        for k in range(2 * r + 1):
            accum += padded[..., k:k + depth]
        mult = np.power(self.bias + self.alpha * accum, -self.beta, dtype=_F32)
        return [(x * mult).astype(_F32)]


define("LOCAL_RESPONSE_NORMALIZATION", quant=QuantRule("float"), inputs=(1, 1), outputs=(1, 1))
