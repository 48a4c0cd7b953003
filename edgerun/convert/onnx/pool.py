"""Pooling lowerings."""

from __future__ import annotations

import numpy as np

from edgerun.schema.tflite import Padding
from edgerun.convert.onnx.conv import _explicit_pad, _pads, _spatial_4d, _tflite_padding, _via_2d
from edgerun.convert.onnx.lowering import NHWC, _perm_shape, lowers

@lowers("MaxPool", "AveragePool")
def _pool(L, n):
    if L.val(n.input[0]).rank == 3:
        return _via_2d(L, n, _pool)
    v = _spatial_4d(L, n)
    out = n.output[0]
    if len(n.output) > 1 and n.output[1]:
        raise L.unsupported("MaxPool with an Indices output")
    kernel = list(L.attr(n, "kernel_shape"))
    strides = list(L.attr(n, "strides", [1, 1]))
    dil = list(L.attr(n, "dilations", [1, 1]))
    if dil != [1, 1]:
        raise L.unsupported("dilated pooling")
    in_hw, out_hw = list(v.shape[2:]), list(L.shapes[out][2:])
    pb, pe = _pads(L, n, in_hw, kernel, strides, dil, out_hw)
    # ceil_mode: extend the end padding so that a floor-mode window count gives out_hw
    for i in range(2):
        need = (out_hw[i] - 1) * strides[i] + kernel[i] - (in_hw[i] + pb[i] + pe[i])
        if need > 0:
            pe[i] += need
    is_max = n.op_type == "MaxPool"
    include_pad = bool(L.attr(n, "count_include_pad", 0))
    pad = _tflite_padding(in_hw, kernel, strides, dil, out_hw, pb, pe)
    x = L.get(n.input[0], NHWC[4])
    shape = _perm_shape(v.shape, NHWC[4])
    if pad == Padding.SAME and not is_max and include_pad and any(pb + pe):
        pad = None
    if pad is None:
        if not is_max and not include_pad and any(pb + pe):
            raise L.unsupported("AveragePool with count_include_pad=0 and padding TFLite cannot express")
        x, shape = _explicit_pad(L, x, out, shape, pb, pe, value=-3.0e38 if is_max else 0.0)
        pad = Padding.VALID
    L.emit("MAX_POOL_2D" if is_max else "AVERAGE_POOL_2D", [x], [L.new_out(out, NHWC[4])], padding=pad,
           stride_w=strides[1], stride_h=strides[0], filter_width=kernel[1], filter_height=kernel[0],
           fused_activation_function=0)


@lowers("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(L, n):
    v = L.val(n.input[0])
    perm = v.perm
    axes = [perm.index(a) for a in range(2, v.rank)]
    x = L.get(n.input[0])
    L.emit("MEAN" if n.op_type == "GlobalAveragePool" else "REDUCE_MAX",
           [x, L.g.const(n.output[0] + "_axes", np.array(axes, np.int32))], [L.new_out(n.output[0], perm)],
           keep_dims=True)
