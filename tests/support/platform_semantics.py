"""Where LiteRT's own results depend on the CPU it runs on, and what each CPU gives.

edgerun's kernels give the same bytes on every CPU (numpy arithmetic that never leans on the
hardware's float->int conversion or on fused multiply-add), defined as LiteRT's reference kernels
compute on x86, where the converter validates and golden vectors are recorded. LiteRT compiled
for ARM differs in a few documented places (docs/platforms.md); the comparison tests state the
expectation for the CPU they run on through these helpers instead of skipping there.
"""

from __future__ import annotations

import platform

import numpy as np

MACHINE = platform.machine().lower()
#: 64-bit ARM (Raspberry Pi 4/5 64-bit OS, Jetson, Coral Dev Board)
ARM64 = MACHINE in ("aarch64", "arm64")
#: 32-bit ARM userland (Raspberry Pi OS 32-bit; armv7l, or armv8l for a 32-bit userland on a 64-bit core)
ARM32 = MACHINE.startswith("armv") or MACHINE == "arm"
ARM = ARM64 or ARM32
#: pointers (and numpy's intp) are 32 bits wide
BITS32 = np.dtype(np.intp).itemsize == 4

_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def _round_half_away(q: np.ndarray) -> np.ndarray:
    return np.where(q < 0, -np.floor(-q + 0.5), np.floor(q + 0.5))


def _wrap32(v: np.ndarray) -> np.ndarray:
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def float_to_int32_x86(r: np.ndarray) -> np.ndarray:
    """``static_cast<int32_t>(float)`` on x86 (cvttss2si): NaN and out-of-range give INT32_MIN."""
    r = np.asarray(r, np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~((r >= -2.0 ** 31) & (r < 2.0 ** 31))
    return np.where(bad, _I32_MIN, np.trunc(np.where(bad, 0, r))).astype(np.int64)


def float_to_int32_arm(r: np.ndarray) -> np.ndarray:
    """The same cast on ARM (fcvtzs / vcvt.s32.f32): saturates, NaN gives 0."""
    r = np.asarray(r, np.float64)
    nan = np.isnan(r)
    return np.where(nan, 0, np.clip(np.trunc(np.where(nan, 0, r)), _I32_MIN, _I32_MAX)).astype(np.int64)


def quantize_float(x: np.ndarray, scale: float, zero_point: int, dtype: str, *, arm: bool) -> np.ndarray:
    """LiteRT's reference QUANTIZE float32 -> dtype, element by element:
    ``clamp((int32)round(x / scale) + zero_point)``, the int32 sum wrapping, with the float->int32
    conversion of x86 (``arm=False``) or of ARM (``arm=True``)."""
    info = np.iinfo(np.dtype(dtype))
    with np.errstate(all="ignore"):
        q = (np.asarray(x, np.float32) / np.float32(scale)).astype(np.float32)
        r = _round_half_away(q.astype(np.float64))
    i = (float_to_int32_arm if arm else float_to_int32_x86)(r)
    return np.clip(_wrap32(i + int(zero_point)), info.min, info.max).astype(dtype)


def quantize_conversion_differs(x: np.ndarray, scale: float) -> np.ndarray:
    """Elements whose QUANTIZE result depends on the CPU's float->int32 conversion: NaN and
    quotients that round outside int32."""
    with np.errstate(all="ignore"):
        r = _round_half_away((np.asarray(x, np.float32) / np.float32(scale)).astype(np.float64))
        return ~((r >= -2.0 ** 31) & (r < 2.0 ** 31))


def dequantize_uint8_blocks_fused(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """LiteRT's optimized uint8 Dequantize as compiled for ARM: blocks of 8 through NEON's
    multiply-accumulate, ``fma(float(q), scale, float(-zp * scale))`` rounded once, the tail in
    double. x86 builds (NEON_2_SSE) multiply and add separately, rounding twice; edgerun computes
    that on every CPU."""
    flat = np.asarray(x).reshape(-1)
    s = float(np.float32(scale))
    offset = float(np.float32(-zero_point * s))
    head = flat.size - flat.size % 8
    out = np.empty(flat.size, np.float32)
    # q * s is exact in double (8 x 24 significant bits); the sum rounds once to double, then to
    # float32: a double rounding that differs from a true fma only on exact float32 half-way sums
    out[:head] = (flat[:head].astype(np.float64) * s + offset).astype(np.float32)
    out[head:] = (s * (flat[head:].astype(np.float64) - zero_point)).astype(np.float32)
    return out.reshape(np.shape(x))
