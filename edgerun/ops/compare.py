"""LESS, LESS_EQUAL, GREATER, GREATER_EQUAL, EQUAL, NOT_EQUAL: broadcasting comparisons -> bool.

Registered for float32, int32 and int64 (loop counters and shape arithmetic). Quantized inputs
are refused: TFLite rescales both sides before comparing, which these kernels do not implement.
"""

from __future__ import annotations

import numpy as np

from edgerun.ops.registry import Kernel, register

_FUNCS = {"LESS": np.less, "LESS_EQUAL": np.less_equal, "GREATER": np.greater,
          "GREATER_EQUAL": np.greater_equal, "EQUAL": np.equal, "NOT_EQUAL": np.not_equal}


class Compare(Kernel):
    def prepare(self):
        self.fn = _FUNCS[self.ctx.name]
        return [tuple(np.broadcast_shapes(self.ctx.input_shape(0), self.ctx.input_shape(1)))]

    def eval(self, inputs):
        return [self.fn(inputs[0], inputs[1])]


for _op in _FUNCS:
    register(_op, "float32", "int32", "int64")(type(f"Compare_{_op}", (Compare,), {}))
