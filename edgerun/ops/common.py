"""Shared kernel helpers: fused activations, quantization parameters, broadcasting, padding."""

from __future__ import annotations

import numpy as np

from edgerun.schema.tflite import Activation, Padding

QRANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (-(1 << 31), (1 << 31) - 1)}


def float_activation_range(act: int) -> tuple[float, float]:
    """Clamp range of a fused activation on float outputs."""
    if act == Activation.RELU:
        return 0.0, np.inf
    if act == Activation.RELU6:
        return 0.0, 6.0
    if act == Activation.RELU_N1_TO_1:
        return -1.0, 1.0
    return -np.inf, np.inf


def apply_float_activation(x: np.ndarray, act: int) -> np.ndarray:
    if act == Activation.NONE:
        return x
    if act == Activation.TANH:
        return np.tanh(x)
    if act == Activation.SIGN_BIT:
        return np.signbit(x).astype(x.dtype)
    lo, hi = float_activation_range(act)
    return np.clip(x, lo, hi)


def quantized_activation_range(act: int, scale: float, zero_point: int, dtype: str = "int8") -> tuple[int, int]:
    """TFLite CalculateActivationRangeQuantized: the fused activation as an integer clamp."""
    qmin, qmax = QRANGE[dtype]

    def q(v: float) -> int:
        return int(zero_point) + int(np.round(np.float32(v) / np.float32(scale)))

    if act == Activation.RELU:
        return max(qmin, q(0.0)), qmax
    if act == Activation.RELU6:
        return max(qmin, q(0.0)), min(qmax, q(6.0))
    if act == Activation.RELU_N1_TO_1:
        return max(qmin, q(-1.0)), min(qmax, q(1.0))
    return qmin, qmax


def qparams(t) -> tuple[float, int]:
    """Per-tensor (scale, zero_point) of a quantized tensor."""
    if t is None or t.quant is None or t.quant.empty:
        return 1.0, 0
    return float(t.quant.scale[0]), int(t.quant.zero_point[0])


def conv_output_size(padding: int, size: int, filt: int, stride: int, dilation: int = 1) -> int:
    eff = (filt - 1) * dilation + 1
    if padding == Padding.SAME:
        return (size + stride - 1) // stride
    return (size - eff + stride) // stride


def conv_padding(padding: int, size: int, filt: int, stride: int, dilation: int, out: int) -> tuple[int, int]:
    """TFLite ComputePaddingWithOffset: (pad_before, pad_after) along one axis."""
    eff = (filt - 1) * dilation + 1
    total = max((out - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2
