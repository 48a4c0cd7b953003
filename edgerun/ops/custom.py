"""Kernels for CUSTOM ops that common public models use, where their semantics are documented.

* ``Convolution2DTransposeBias`` (MediaPipe: selfie segmentation, hair segmentation): a
  TRANSPOSE_CONV whose bias is fused, with its options stored in ``custom_options`` as the raw C
  struct ``TfLiteTransposeConvParams {TfLitePadding padding; int stride_width; int stride_height;}``
  (little-endian int32s; TfLitePadding: 1 = SAME, 2 = VALID). Inputs: input (NHWC), weights
  (OHWI), bias (O). The output shape is the one stored in the model.
"""

from __future__ import annotations

import struct

import numpy as np

from edgerun.errors import ModelFormatError
from edgerun.ops.registry import Kernel, register_custom


class Convolution2DTransposeBias(Kernel):
    def prepare(self):
        ctx = self.ctx
        raw = ctx.op.custom_options or b""
        if len(raw) < 12:
            raise ModelFormatError(f"node {ctx.index} (Convolution2DTransposeBias): custom options hold "
                                   f"{len(raw)} bytes, expected 12 (padding, stride_w, stride_h)")
        padding, self.sw, self.sh = struct.unpack_from("<iii", raw)
        if padding not in (1, 2) or self.sw < 1 or self.sh < 1:
            raise ModelFormatError(f"node {ctx.index} (Convolution2DTransposeBias): bad options "
                                   f"padding={padding} stride=({self.sw}, {self.sh})")
        n, h, w, c = ctx.input_shape(0)
        o, kh, kw, ci = ctx.input_shape(1)
        if ci != c:
            raise ModelFormatError(f"node {ctx.index}: weights take {ci} channels, input has {c}")
        out = tuple(ctx.output(0).shape)
        if padding == 1:  # SAME
            oh, ow = h * self.sh, w * self.sw
        else:
            oh, ow = (h - 1) * self.sh + kh, (w - 1) * self.sw + kw
        if out[1:3] != (oh, ow):
            out = (n, oh, ow, o)
        # TFLite ComputePaddingHeightWidth for transpose conv: the padding the forward conv would use.
        self.pad_h = max(((h - 1) * self.sh + kh - oh) // 2, 0) if padding == 1 else 0
        self.pad_w = max(((w - 1) * self.sw + kw - ow) // 2, 0) if padding == 1 else 0
        self.kh, self.kw, self.out_shape = kh, kw, out
        return [out]

    def eval(self, inputs):
        x, wts, bias = inputs[0], inputs[1], inputs[2]
        n, oh, ow, o = self.out_shape
        h, w = x.shape[1:3]
        # Accumulate every tap into an uncropped canvas, then crop the padding away.
        full_h, full_w = (h - 1) * self.sh + self.kh, (w - 1) * self.sw + self.kw
        canvas = np.zeros((n, max(full_h, oh + self.pad_h), max(full_w, ow + self.pad_w), o), np.float32)
        for ky in range(self.kh):
            for kx in range(self.kw):
                tap = x @ wts[:, ky, kx, :].T  # (n, h, w, o)
                canvas[:, ky:ky + (h - 1) * self.sh + 1:self.sh, kx:kx + (w - 1) * self.sw + 1:self.sw, :] += tap
        out = canvas[:, self.pad_h:self.pad_h + oh, self.pad_w:self.pad_w + ow, :]
        if bias is not None:
            out = out + bias.reshape(1, 1, 1, -1)
        return [np.ascontiguousarray(out, dtype=np.float32)]


register_custom("Convolution2DTransposeBias", Convolution2DTransposeBias)
