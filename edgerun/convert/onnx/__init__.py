"""ONNX -> float TFLite graph.

* :mod:`.load`: read the model, upgrade it to the opset the lowerings are written against, pin
  input shapes, and let ONNX Runtime give every tensor's static shape and the constants it folds.
* :mod:`.lowering`: the lowering framework (values tracked with a layout permutation, fusion
  helpers, :func:`onnx_to_graph`) and the ``LOWERINGS`` table.
* one module per op family registers its lowerings with ``@lowers``; the list below is explicit.
"""

from edgerun.convert.onnx import lowering  # noqa: F401  (first: the families import from it)
from edgerun.convert.onnx import (activation, conv, elementwise, matmul, norm, pool, reduce, rnn,  # noqa: F401
                                  shape)
from edgerun.convert.onnx.load import (fold_constant_dequantize, load_onnx, parse_input_shapes,  # noqa: F401
                                       pin_shapes, probe, session, with_fixed_inputs)
from edgerun.convert.onnx.lowering import LOWERINGS, onnx_to_graph  # noqa: F401

