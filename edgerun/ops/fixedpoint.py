"""Fixed-point helpers, bit-exact with TFLite's reference kernels (gemmlowp rounding).

A real multiplier ``M`` (for requantization, ``M = s_in * s_w / s_out``) is stored as a Q0.31
integer ``m`` in [2^30, 2^31) and a power-of-two exponent ``shift`` with ``M ~= m * 2^(shift-31)``.
Applying it to an int32 accumulator ``x`` is::

    MultiplyByQuantizedMultiplier(x, m, shift) =
        RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x * 2^max(shift, 0), m), max(-shift, 0))

where SRDHM(a, b) = round_half_away((a * b) / 2^31), saturating the single overflow case
a = b = -2^31, and RoundingDivideByPOT rounds half away from zero. Everything here is vectorized
over numpy int64 arrays; ``m`` and ``shift`` broadcast, so per-channel multipliers are one call.
"""

from __future__ import annotations

import math

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: real -> (Q0.31 multiplier, shift); real = m * 2^(shift - 31)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)  # real = q * 2^shift, q in [0.5, 1)
    # TFLite uses std::round (half away from zero); Python's round() is half-to-even.
    q_fixed = int(math.floor(abs(q) * (1 << 31) + 0.5)) * (1 if q >= 0 else -1)
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        shift, q_fixed = 0, 0
    if shift > 30:
        shift, q_fixed = 30, (1 << 31) - 1
    return q_fixed, shift


def quantize_multipliers(reals) -> tuple[np.ndarray, np.ndarray]:
    """Vector form of :func:`quantize_multiplier` (per-channel scales)."""
    pairs = [quantize_multiplier(float(r)) for r in np.atleast_1d(reals)]
    return (np.array([p[0] for p in pairs], dtype=np.int64),
            np.array([p[1] for p in pairs], dtype=np.int64))


def saturating_rounding_doubling_high_mul(a, b) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 values (given as int64 arrays)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    s = ab + nudge
    # C integer division truncates toward zero.
    res = np.where(s >= 0, s >> 31, -((-s) >> 31))
    overflow = (a == INT32_MIN) & (b == INT32_MIN)
    return np.where(overflow, INT32_MAX, res)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: x / 2^exponent rounded half away from zero."""
    x = np.asarray(x, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def _wrap32(x: np.ndarray) -> np.ndarray:
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier (double rounding), int32 semantics, int64 arrays."""
    x = np.asarray(x, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(_wrap32(x << left), multiplier), right)


def requantize(acc, multiplier, shift, zero_point: int, qmin: int, qmax: int, dtype=np.int8) -> np.ndarray:
    """acc (int32 accumulators) -> quantized output: scale, add zero point, clamp, cast."""
    y = multiply_by_quantized_multiplier(acc, multiplier, shift) + int(zero_point)
    return np.clip(y, qmin, qmax).astype(dtype)
