"""Compatibility name for :mod:`edgerun.convert.onnx` (the ONNX frontend, split by concern)."""

from edgerun.convert.onnx import (LOWERINGS, fold_constant_dequantize, load_onnx, onnx_to_graph,  # noqa: F401
                                  parse_input_shapes, pin_shapes, probe, session, with_fixed_inputs)
