"""Pooling lowerings."""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.conv import _explicit_pad, _pads, _spatial_4d, _tflite_padding, _via_2d
from edgerun.convert.onnx.lowering import NHWC, Value, _perm_shape, lowers
from edgerun.schema.tflite import Padding


def _window_counts(size, k, s, d, pb, pe_user, out, include_pad):
    """Per output position along one axis: how many window taps ONNX averages over."""
    lo, hi = (-pb, size + pe_user) if include_pad else (0, size)
    start = np.arange(out) * s - pb
    taps = start[:, None] + np.arange(k)[None, :] * d
    return ((taps >= lo) & (taps < hi)).sum(axis=1)


@lowers("MaxPool", "AveragePool")
def _pool(L, n):
    """MAX_POOL_2D / AVERAGE_POOL_2D; 1-D pools as 2-D, 3-D pools as two 2-D pools (both separable).

    Padding TFLite cannot express is an explicit PAD (-3e38 for max, 0 for average); an average whose
    divisor is not the kernel size everywhere (count_include_pad=0 with explicit pads, ceil_mode
    windows) is then corrected by a constant per-position factor k / count. Dilated max pooling is the
    maximum of one strided slice per kernel tap.
    """
    if L.val(n.input[0]).rank == 3:
        return _via_2d(L, n, _pool)
    if L.val(n.input[0]).rank == 5:
        return _pool_3d(L, n)
    v = _spatial_4d(L, n)
    out = n.output[0]
    if len(n.output) > 1 and n.output[1]:
        raise L.unsupported("MaxPool with an Indices output (TFLite pools return values only)")
    kernel = list(L.attr(n, "kernel_shape"))
    strides = list(L.attr(n, "strides", [1, 1]))
    dil = list(L.attr(n, "dilations", [1, 1]))
    is_max = n.op_type == "MaxPool"
    if not is_max and dil != [1, 1]:
        raise L.unsupported(f"AveragePool with dilations {dil}")
    in_hw, out_hw = list(v.shape[2:]), list(L.shapes[out][2:])
    pb, pe = _pads(L, n, in_hw, kernel, strides, dil, out_hw)
    pe_user = list(pe)
    # ceil_mode: extend the end padding so that a floor-mode window count gives out_hw
    for i in range(2):
        need = (out_hw[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - (in_hw[i] + pb[i] + pe[i])
        if need > 0:
            pe[i] += need
    include_pad = bool(L.attr(n, "count_include_pad", 0))
    x = L.get(n.input[0], NHWC[4])
    shape = _perm_shape(v.shape, NHWC[4])
    if is_max and dil != [1, 1]:
        return _dilated_max(L, n, x, shape, kernel, strides, dil, pb, pe, out_hw)
    pad = _tflite_padding(in_hw, kernel, strides, dil, out_hw, pb, pe)
    if not is_max and include_pad and any(pb + pe):
        pad = None  # TFLite's SAME average excludes the padding
    if pad is not None:
        L.emit("MAX_POOL_2D" if is_max else "AVERAGE_POOL_2D", [x], [L.new_out(out, NHWC[4])], padding=pad,
               stride_w=strides[1], stride_h=strides[0], filter_width=kernel[1], filter_height=kernel[0],
               fused_activation_function=0)
        return
    x, shape = _explicit_pad(L, x, out, shape, pb, pe, value=-3.0e38 if is_max else 0.0)
    factor = None
    if not is_max:
        ch = _window_counts(in_hw[0], kernel[0], strides[0], 1, pb[0], pe_user[0], out_hw[0], include_pad)
        cw = _window_counts(in_hw[1], kernel[1], strides[1], 1, pb[1], pe_user[1], out_hw[1], include_pad)
        counts = ch[:, None] * cw[None, :]
        if np.any(counts != kernel[0] * kernel[1]):
            factor = (kernel[0] * kernel[1] / np.maximum(counts, 1)).astype(np.float32)
    oshape = _perm_shape(L.shapes[out], NHWC[4])
    t = L.g.tensor(out + "_avg", oshape) if factor is not None else L.new_out(out, NHWC[4])
    L.emit("MAX_POOL_2D" if is_max else "AVERAGE_POOL_2D", [x], [t], padding=Padding.VALID,
           stride_w=strides[1], stride_h=strides[0], filter_width=kernel[1], filter_height=kernel[0],
           fused_activation_function=0)
    if factor is not None:
        L.emit("MUL", [t, L.g.const(out + "_count_fix", factor.reshape(1, out_hw[0], out_hw[1], 1))],
               [L.new_out(out, NHWC[4])], fused_activation_function=0)


def _dilated_max(L, n, x, shape, kernel, strides, dil, pb, pe, out_hw):
    """Max over a dilated window, separably: the maximum of ``kw`` strided column slices, then of ``kh``
    strided row slices of that (kh + kw slices, not kh * kw)."""
    out = n.output[0]
    x, shape = _explicit_pad(L, x, out, shape, pb, pe, value=-3.0e38)
    N, Hp, _, C = shape
    for axis in (2, 1):
        k, d, s_, o = kernel[axis - 1], dil[axis - 1], strides[axis - 1], out_hw[axis - 1]
        src_shape = L.g.tensors[x].shape
        tshape = list(src_shape)
        tshape[axis] = o
        acc = None
        for j in range(k):
            b = [0, 0, 0, 0]
            b[axis] = j * d
            e = list(src_shape)
            e[axis] = j * d + (o - 1) * s_ + 1
            st = [1, 1, 1, 1]
            st[axis] = s_
            t = L.g.tensor(f"{out}_ax{axis}_tap{j}", tshape)
            L.emit("STRIDED_SLICE", [x, L.g.const(f"{out}_b{axis}_{j}", np.array(b, np.int32)),
                                     L.g.const(f"{out}_e{axis}_{j}", np.array(e, np.int32)),
                                     L.g.const(f"{out}_s{axis}_{j}", np.array(st, np.int32))],
                   [t], begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0)
            if acc is not None:
                m = L.g.tensor(f"{out}_ax{axis}_max{j}", tshape)
                L.emit("MAXIMUM", [acc, t], [m])
                t = m
            acc = t
        x = acc
    oshape = _perm_shape(L.shapes[out], NHWC[4])
    L.emit("RESHAPE", [x, L.g.const(out + "_shape", np.array(oshape, np.int32))], [L.new_out(out, NHWC[4])],
           new_shape=list(oshape))


def _pool_3d(L, n):
    """A 3-D pool as a 2-D pool over (H, W) on (N*D, H, W, C), then one over D on (N, D, H'*W', C)."""
    import onnx
    v = L.val(n.input[0])
    if v.const is not None:
        raise L.unsupported("a constant data input")
    if len(n.output) > 1 and n.output[1]:
        raise L.unsupported("MaxPool with an Indices output (TFLite pools return values only)")
    N, C, D, H, W = v.shape
    out = n.output[0]
    _, _, Do, Ho, Wo = L.shapes[out]
    k = list(L.attr(n, "kernel_shape"))
    s = list(L.attr(n, "strides", [1, 1, 1]))
    d = list(L.attr(n, "dilations", [1, 1, 1]))
    pb, pe = _pads(L, n, [D, H, W], k, s, d, [Do, Ho, Wo])
    common = {"ceil_mode": int(L.attr(n, "ceil_mode", 0))}
    if n.op_type == "AveragePool":
        common["count_include_pad"] = int(L.attr(n, "count_include_pad", 0))
    x = L.get(n.input[0], NHWC[5])
    a, b, c, e = out + "_hw_in", out + "_hw", out + "_d_in", out + "_d"
    L.shapes[a], L.shapes[b] = (N * D, C, H, W), (N * D, C, Ho, Wo)
    L.shapes[c], L.shapes[e] = (N, C, D, Ho * Wo), (N, C, Do, Ho * Wo)
    steps = [(a, b, dict(kernel_shape=k[1:], strides=s[1:], dilations=d[1:], pads=[pb[1], pb[2], pe[1], pe[2]])),
             (c, e, dict(kernel_shape=[k[0], 1], strides=[s[0], 1], dilations=[d[0], 1], pads=[pb[0], 0, pe[0], 0]))]
    node = L.node
    for src, dst, attrs in steps:
        shp = _perm_shape(L.shapes[src], NHWC[4])
        t = L.g.tensor(src, shp)
        L.emit("RESHAPE", [x, L.g.const(src + "_shape", np.array(shp, np.int32))], [t], new_shape=list(shp))
        L.vals[src] = Value(src, L.shapes[src], tensor=t, perm=NHWC[4])
        sub = onnx.helper.make_node(n.op_type, [src], [dst], name=dst, **attrs, **common)
        L.node = sub
        _pool(L, sub)
        L.node = node
        x = L.get(dst, NHWC[4])
    oshape = _perm_shape(L.shapes[out], NHWC[5])
    L.emit("RESHAPE", [x, L.g.const(out + "_shape", np.array(oshape, np.int32))], [L.new_out(out, NHWC[5])],
           new_shape=list(oshape))


@lowers("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(L, n):
    v = L.val(n.input[0])
    perm = v.perm
    axes = [perm.index(a) for a in range(2, v.rank)]
    x = L.get(n.input[0])
    L.emit("MEAN" if n.op_type == "GlobalAveragePool" else "REDUCE_MAX",
           [x, L.g.const(n.output[0] + "_axes", np.array(axes, np.int32))], [L.new_out(n.output[0], perm)],
           keep_dims=True)
