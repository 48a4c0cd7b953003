"""RELU, RELU6, RELU_N1_TO_1 (float32, int8)."""

from __future__ import annotations

import numpy as np

from edgerun.ops.common import INT8_BY_BITS, TableEval, int8_table, qparams, quantized_activation_range
from edgerun.ops.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from edgerun.ops.registry import Kernel, register
from edgerun.schema.tflite import Activation

_RANGES = {"RELU": (0.0, np.inf), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}
_ACTS = {"RELU": Activation.RELU, "RELU6": Activation.RELU6, "RELU_N1_TO_1": Activation.RELU_N1_TO_1}


@register("RELU", "float32", "int8")
@register("RELU6", "float32", "int8")
@register("RELU_N1_TO_1", "float32", "int8")
class ReluX(TableEval, Kernel):
    """float: clamp. int8: requantize (x - zp_in) * s_in/s_out + zp_out, then clamp to the range;
    tabulated over the 256 input values in prepare and evaluated as one lookup."""

    def prepare(self):
        ctx = self.ctx
        self.lo, self.hi = _RANGES[ctx.name]
        self.float_elementwise = ctx.input(0).dtype == "float32"  # runtime.plan composes it
        if ctx.input(0).dtype == "int8":
            s_in, self.zp_in = qparams(ctx.input(0))
            s_out, self.zp_out = qparams(ctx.output(0))
            # as ReluPrepare: the ratio of the float32 scales, in float32 (a float64 ratio differs
            # in the last bits and moves ties, e.g. 0.05 / 0.04)
            self.mult, self.shift = quantize_multiplier(float(np.float32(s_in) / np.float32(s_out)))
            self.qlo, self.qhi = quantized_activation_range(_ACTS[ctx.name], s_out, self.zp_out)
            self.lut = self.unary_table = int8_table(self.exact(INT8_BY_BITS))
        return [ctx.input_shape(0)]

    def exact(self, x: np.ndarray) -> np.ndarray:
        """The reference arithmetic (TFLite's ReluX / QuantizedReluX) on int8 values."""
        y = multiply_by_quantized_multiplier(x.astype(np.int64) - self.zp_in, self.mult, self.shift) + self.zp_out
        return np.clip(y, self.qlo, self.qhi).astype(np.int8)

    def eval(self, inputs):
        x = inputs[0]
        if x.dtype == np.float32:
            return [np.clip(x, self.lo, self.hi)]
        return [self.lookup(self.lut, x)]
