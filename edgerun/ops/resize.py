"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (NHWC; float32 and int8), as LiteRT's reference
kernels, with ``align_corners`` and ``half_pixel_centers``.

The new (height, width) comes from the constant size input. Source coordinates are computed per
output row and column (float32, as the reference does), then the whole image is gathered at once.

int8 bilinear is ``reference_ops::ResizeBilinearInteger``: coordinates in Q10 fixed point
(``scale_10 = round(1024 * in / out)`` by integer division), the four neighbours weighted by
Q10 x Q10 products and summed (exactly, in integers), and the Q20 result rounded half away from
zero.
"""

from __future__ import annotations

import numpy as np

from edgerun.ops.registry import Kernel, register


def _cdiv(a, b: int):
    """C integer division (truncates toward zero) of an int64 array by a positive int."""
    a = np.asarray(a, np.int64)
    return np.sign(a) * (np.abs(a) // b)


class _Resize(Kernel):
    def prepare(self):
        ctx = self.ctx
        shape = ctx.input_shape(0)
        if len(shape) != 4:
            raise ctx.fail(f"resize needs a 4-D NHWC input, got shape {list(shape)}")
        size = ctx.const(1)
        if size is not None:
            oh, ow = (int(v) for v in np.asarray(size).reshape(-1)[:2])
        else:
            stored = ctx.output(0).shape
            if len(stored) != 4 or min(stored[1:3]) < 1:
                raise ctx.fail("the size input must be constant or computable before invoke")
            oh, ow = stored[1], stored[2]
        if oh < 1 or ow < 1:
            raise ctx.fail(f"output size {oh}x{ow} must be positive")
        self.align = bool(ctx.options.get("align_corners", False))
        self.half = bool(ctx.options.get("half_pixel_centers", False))
        self.ih, self.iw = shape[1], shape[2]
        self.oh, self.ow = oh, ow
        self.setup()
        return [(shape[0], oh, ow, shape[3])]


@register("RESIZE_NEAREST_NEIGHBOR", "float32", "int8")
class ResizeNearestNeighbor(_Resize):
    def _index(self, n_in: int, n_out: int) -> np.ndarray:
        if self.align and n_out > 1:
            scale = np.float32(n_in - 1) / np.float32(n_out - 1)
        else:
            scale = np.float32(n_in) / np.float32(n_out)
        offset = np.float32(0.5 if self.half else 0.0)
        v = (np.arange(n_out, dtype=np.float32) + offset) * scale
        if self.align:
            idx = np.trunc(v.astype(np.float64) + 0.5).astype(np.int64)  # v >= 0: half away
        else:
            idx = np.floor(v).astype(np.int64)
        idx = np.minimum(idx, n_in - 1)
        if self.half:
            idx = np.maximum(idx, 0)
        return idx

    def setup(self):
        self.ys = self._index(self.ih, self.oh)
        self.xs = self._index(self.iw, self.ow)

    def eval(self, inputs):
        return [inputs[0][:, self.ys][:, :, self.xs]]


@register("RESIZE_BILINEAR", "float32", "int8")
class ResizeBilinear(_Resize):
    def setup(self):
        if self.ctx.input(0).dtype == "int8":
            self.ky = self._int_coords(self.ih, self.oh)
            self.kx = self._int_coords(self.iw, self.ow)
        else:
            self.ky = self._float_coords(self.ih, self.oh)
            self.kx = self._float_coords(self.iw, self.ow)

    def _float_coords(self, n_in: int, n_out: int):
        scale = np.float32(n_in) / np.float32(n_out)
        if self.align and n_out > 1:
            scale = np.float32(n_in - 1) / np.float32(n_out - 1)
        v = np.arange(n_out, dtype=np.float32)
        s = (v + np.float32(0.5)) * scale - np.float32(0.5) if self.half else v * scale
        lo = np.maximum(np.floor(s).astype(np.int64), 0)
        hi = np.minimum(np.ceil(s).astype(np.int64), n_in - 1)
        return lo, hi, (s - lo.astype(np.float32)).astype(np.float32)

    def _int_coords(self, n_in: int, n_out: int):
        scale = ((1 << 10) * n_in + n_out // 2) // n_out
        if self.align and n_out > 1:
            scale = ((1 << 10) * (n_in - 1) + (n_out - 1) // 2) // (n_out - 1)
        v = np.arange(n_out, dtype=np.int64)
        s = v * scale + scale // 2 - (1 << 9) if self.half else v * scale
        lo = np.maximum(_cdiv(s, 1 << 10), 0)
        hi = np.minimum(_cdiv(s + (1 << 10) - 1, 1 << 10), n_in - 1)
        return lo, hi, s - (lo << 10)  # fraction in Q10 (may be negative near the border)

    #: output values per block: the int32 / float32 work arrays of a block stay at about 128 KB
    #: each (pose detection's 14x14x1152 output had taken 4.3 MB of whole-output temporaries)
    BLOCK_VALUES = 1 << 15

    def eval(self, inputs):
        # Separable: interpolate rows, then columns, a block of output rows at a time. For int8
        # this is the reference's Q20 sum regrouped, exact in integers (|sum| < 2^27 fits
        # int32); for float32 it reorders the arithmetic within rounding error (the same order
        # whatever the block).
        x = inputs[0]
        y0, y1, fy = self.ky
        x0, x1, fx = self.kx
        n, _, _, c = x.shape
        out = np.empty((n, self.oh, self.ow, c), x.dtype)
        bh = max(1, self.BLOCK_VALUES // max(1, n * self.ow * c))
        if x.dtype == np.int8:
            one = np.int32(1 << 10)
            fy = fy.astype(np.int32)[None, :, None, None]
            fx = fx.astype(np.int32)[None, None, :, None]
            wx0 = one - fx
            for r0 in range(0, self.oh, bh):
                r1 = min(r0 + bh, self.oh)
                top = x[:, y0[r0:r1]].astype(np.int32)
                top *= one - fy[:, r0:r1]
                bot = x[:, y1[r0:r1]].astype(np.int32)
                bot *= fy[:, r0:r1]
                top += bot  # rows, Q10
                acc = top[:, :, x0]
                acc *= wx0
                right = top[:, :, x1]
                right *= fx
                acc += right  # Q20
                neg = acc < 0
                np.abs(acc, out=acc)
                acc += 1 << 19
                acc >>= 20
                np.negative(acc, out=acc, where=neg)  # rounded half away from zero
                np.copyto(out[:, r0:r1], acc, casting="unsafe")
            return [out]
        one = np.float32(1)
        fy = fy[None, :, None, None]
        fx = fx[None, None, :, None]
        for r0 in range(0, self.oh, bh):
            r1 = min(r0 + bh, self.oh)
            fyb = fy[:, r0:r1]
            rows = x[:, y0[r0:r1]] * (one - fyb) + x[:, y1[r0:r1]] * fyb
            out[:, r0:r1] = rows[:, :, x0] * (one - fx) + rows[:, :, x1] * fx
        return [out]
