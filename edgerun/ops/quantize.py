"""QUANTIZE, DEQUANTIZE and CAST, bit-exact with LiteRT's reference kernels.

Kernels are keyed by the input dtype (the registry's default), which is what decides the
arithmetic:

* QUANTIZE float32 -> int8/uint8/int16, per tensor or per channel (the output's
  ``quantized_dimension``): ``q = clamp((int32)round(x / s) + z)``, the division in float32 and
  ``round`` half away from zero. As on x86, a NaN or a quotient outside int32 converts to
  INT32_MIN before the zero point is added (int32 wrap-around), then clamps.
* QUANTIZE int8/uint8/int16 -> int8/uint8/int16 (int16 also -> int32), a requantization:
  ``q_out = clamp(MBQM(q_in - z_in, s_in / s_out) + z_out)``, the multiplier from the double ratio.
* DEQUANTIZE int8/uint8/int16/float16 -> float32: per tensor ``(float)((double)s * (q - z))``,
  per channel ``s[c] * (float)(q - z[c])`` in float32 (the two C++ paths round differently);
  float16 is widened exactly.
* CAST between bool, int8, uint8, int16, int32, int64 and float32 (plus float16/float64/uint16/
  uint32 outputs): integers wrap like ``static_cast``; floats to integers truncate and saturate
  (NaN -> the maximum, as LiteRT's SafeCast); anything to bool is ``!= 0``.
"""

from __future__ import annotations

import numpy as np

from edgerun.ops.common import QRANGE
from edgerun.ops.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from edgerun.ops.registry import Kernel, register

_F32 = np.float32


def trunc_to_int32(x) -> np.ndarray:
    """C ``static_cast<int32_t>(float)`` as x86 executes it (cvttss2si): truncation toward zero,
    INT32_MIN for NaN and for values outside the int32 range. Returns int64."""
    x = np.asarray(x)
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(x) < 2.0 ** 31)
    return np.where(bad, -(1 << 31), np.trunc(np.where(bad, 0, x))).astype(np.int64)


_BITS = {"int8": np.uint8, "uint8": np.uint8, "int16": np.uint16}


def _values_by_bits(dtype) -> np.ndarray:
    """Every value of an 8- or 16-bit integer type, ordered by its unsigned bit pattern (a LUT index)."""
    dtype = np.dtype(dtype)
    unsigned = np.dtype(f"u{dtype.itemsize}")
    return np.arange(1 << (8 * dtype.itemsize), dtype=np.int64).astype(unsigned).view(dtype).astype(np.int64)


def _per_axis(values: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """Shape per-channel parameters to broadcast along ``axis`` of a rank-``rank`` tensor."""
    shape = [1] * rank
    shape[axis] = values.size
    return values.reshape(shape)


_QUANTIZE_OUTPUTS = {"float32": ("int8", "uint8", "int16"),
                     "int8": ("int8", "uint8", "int16"),
                     "uint8": ("int8", "uint8", "int16"),
                     "int16": ("int8", "int16", "int32")}


@register("QUANTIZE", "float32", "int8", "uint8", "int16")
class Quantize(Kernel):
    def prepare(self):
        ctx = self.ctx
        src, dst = ctx.input(0), ctx.output(0)
        if dst.dtype not in _QUANTIZE_OUTPUTS[src.dtype]:
            raise ctx.fail(f"{src.dtype} -> {dst.dtype} is not a quantization LiteRT supports "
                           f"(outputs: {', '.join(_QUANTIZE_OUTPUTS[src.dtype])})")
        if not dst.quantized:
            raise ctx.fail("the output tensor has no quantization parameters")
        self.out_dtype = dst.np_dtype
        self.qmin, self.qmax = QRANGE[dst.dtype]
        shape = ctx.input_shape(0)
        q = dst.quant
        if src.dtype == "float32":
            if q.per_axis:
                axis = int(q.quantized_dimension)
                if not 0 <= axis < len(shape) or shape[axis] != q.scale.size:
                    raise ctx.fail(f"{q.scale.size} per-channel scales do not match dimension {axis} "
                                   f"of shape {list(shape)}")
                self.scale = _per_axis(q.scale.astype(np.float32), axis, len(shape))
                self.zero_point = _per_axis(q.zero_point.astype(np.int64), axis, len(shape))
            else:
                self.scale = _F32(q.scale[0])
                self.zero_point = int(q.zero_point[0])
                self.float_elementwise = True  # runtime.plan composes it into a DEQUANTIZE table
            # what (int32)NaN = INT32_MIN plus the zero point clamps to
            self.overflow_value = np.where(np.asarray(self.zero_point) >= 0, self.qmin, self.qmax)
        else:
            if not src.quantized:
                raise ctx.fail("the input tensor has no quantization parameters")
            if src.dtype == "int16" and dst.dtype == "int16" and (
                    int(src.quant.zero_point[0]) != 0 or int(q.zero_point[0]) != 0):
                raise ctx.fail("int16 -> int16 requantization needs zero points 0")
            zp_in, zp_out = int(src.quant.zero_point[0]), int(q.zero_point[0])
            mult, shift = quantize_multiplier(float(src.quant.scale[0]) / float(q.scale[0]))
            values = _values_by_bits(src.np_dtype)
            y = multiply_by_quantized_multiplier(values - zp_in, mult, shift) + zp_out
            self.lut = np.clip(y, self.qmin, self.qmax).astype(self.out_dtype)
            self.bits = _BITS[src.dtype]
            if self.bits is np.uint8:  # the invoke plan's bound lookup (runtime.plan)
                self.unary_table = self.lut
        self.from_float = src.dtype == "float32"
        self._scratch = None
        return [shape]

    def eval(self, inputs):
        x = inputs[0]
        if not self.from_float:  # a function of the input bits: one lookup
            return [np.take(self.lut, x.view(self.bits))]
        # In place on scratch buffers: fresh temporaries cost page faults that dominate here.
        if self._scratch is None or self._scratch[0].shape != x.shape:
            self._scratch = (np.empty(x.shape, np.float32), np.empty(x.shape, np.float32))
        q, r = self._scratch
        with np.errstate(all="ignore"):
            np.divide(x, self.scale, out=q)
            np.rint(q, out=r)  # ties to even; std::round takes them away from zero:
            d = np.subtract(q, r, out=q)
            up = (d == 0.5) & (r >= 0)
            if up.any():
                r[up] += 1
            down = (d == -0.5) & (r <= 0)
            if down.any():
                r[down] -= 1
            # NaN and |r| >= 2^31 convert to INT32_MIN, then adding the zero point wraps (zp < 0)
            hi, lo = r.max(initial=0.0), r.min(initial=0.0)
            overflow = not (hi < 2.0 ** 31 and lo >= -2.0 ** 31)
            if overflow:
                bad = ~(np.abs(r) < 2.0 ** 31)
            np.add(r, self.zero_point, out=r)
            np.clip(r, self.qmin, self.qmax, out=r)
        if overflow:
            np.copyto(r, self.overflow_value, where=bad)
        return [r.astype(self.out_dtype)]


@register("DEQUANTIZE", "int8", "uint8", "int16", "float16")
class Dequantize(Kernel):
    def prepare(self):
        ctx = self.ctx
        src = ctx.input(0)
        if ctx.output(0).dtype != "float32":
            raise ctx.fail(f"DEQUANTIZE produces float32, the model says {ctx.output(0).dtype}")
        shape = ctx.input_shape(0)
        self.kind = "widen"
        if src.dtype != "float16":
            if not src.quantized:
                raise ctx.fail("the input tensor has no quantization parameters")
            q = src.quant
            if src.dtype == "int16" and int(q.zero_point[0]) != 0:
                raise ctx.fail("int16 dequantization needs zero point 0")
            if q.per_axis:
                if src.dtype == "int16":
                    raise ctx.fail("per-channel int16 dequantization is not supported by LiteRT")
                axis = int(q.quantized_dimension)
                if not 0 <= axis < len(shape) or shape[axis] != q.scale.size:
                    raise ctx.fail(f"{q.scale.size} per-channel scales do not match dimension {axis} "
                                   f"of shape {list(shape)}")
                self.kind = "per_channel"
                self.scale = _per_axis(q.scale.astype(np.float32), axis, len(shape))
                self.zero_point = _per_axis(q.zero_point.astype(np.int64), axis, len(shape))
            else:
                self.kind = "per_tensor"
                v = _values_by_bits(src.np_dtype) - int(q.zero_point[0])
                self.lut = (float(q.scale[0]) * v).astype(np.float32)  # the C++ kernel multiplies in double
                self.bits = _BITS[src.dtype]
                if self.bits is np.uint8:
                    self.unary_table = self.lut
        return [shape]

    def eval(self, inputs):
        x = inputs[0]
        if self.kind == "widen":
            return [x.astype(np.float32)]
        if self.kind == "per_tensor":
            return [np.take(self.lut, x.view(self.bits))]
        return [self.scale * (x.astype(np.int64) - self.zero_point).astype(np.float32)]


def _saturating_float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """LiteRT SafeCast: NaN -> max, below min -> min, at or above max+1 -> max, else truncate."""
    info = np.iinfo(dtype)
    lo = float(info.min)
    hi_exclusive = float(info.max // 2 + 1) * 2.0  # a power of two, exact in any float type
    with np.errstate(invalid="ignore"):
        nan = np.isnan(x)
        below = x < lo
        above = x >= hi_exclusive
        ok = ~(nan | below | above)
        y = np.trunc(np.where(ok, x, 0)).astype(dtype)
    y = np.where(below, info.min, y)
    return np.where(nan | above, info.max, y).astype(dtype)


_CAST_OUTPUTS = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                 "float16", "float32", "float64")


@register("CAST", "float32", "int32", "int64", "int8", "uint8", "int16", "bool")
class Cast(Kernel):
    def prepare(self):
        ctx = self.ctx
        dst = ctx.output(0).dtype
        if dst not in _CAST_OUTPUTS:
            raise ctx.fail(f"CAST to {dst} is not supported (outputs: {', '.join(_CAST_OUTPUTS)})")
        self.out_dtype = np.dtype(ctx.output(0).np_dtype)
        self.float_to_int = ctx.input(0).dtype == "float32" and self.out_dtype.kind in "iu"
        return [ctx.input_shape(0)]

    def eval(self, inputs):
        x = inputs[0]
        if self.out_dtype == np.bool_:
            return [x != 0]
        if self.float_to_int:
            return [_saturating_float_to_int(x, self.out_dtype)]
        with np.errstate(all="ignore"):
            return [x.astype(self.out_dtype)]
