"""``edgerun convert``: ONNX or float TFLite -> full-integer int8 TFLite (or float32 with ``float_only``).

>>> from edgerun.convert import convert
>>> report = convert("model.onnx", "model_int8.tflite", calib="calib.npz")   # doctest: +SKIP
>>> print(report.format())                                                     # doctest: +SKIP

Pipeline (:mod:`edgerun.convert.pipeline`, one function per stage): frontend (``onnx`` /
``tflite_frontend``) -> float graph (non-finite weights refused) -> calibration (``calibrate``,
cached) -> ``quantize`` -> drift report (``drift``, on edgerun's kernels) against the float model
run by its own runtime (ONNX Runtime for ONNX, LiteRT for TFLite) on held-back calibration
samples -> the result loaded and run in LiteRT in a child process -> written. The report
(:mod:`edgerun.convert.report`) carries the verdict (``ok``). The same inputs give
byte-identical output.
"""

from __future__ import annotations

from edgerun.convert.pipeline import CONVERT_METADATA, FULL_INT8_TARGETS, convert
from edgerun.convert.report import ConversionReport

__all__ = ["CONVERT_METADATA", "FULL_INT8_TARGETS", "ConversionReport", "convert"]
