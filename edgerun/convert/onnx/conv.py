"""Convolution lowerings (Conv, ConvTranspose) and the padding helpers pooling shares."""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.lowering import NHWC, Value, _perm_shape, lowers
from edgerun.schema.tflite import Padding


# -- convolution and friends -----------------------------------------------------------------

def _pads(L, n, in_hw, kernel, strides, dilations, out_hw):
    """ONNX pads (begin..., end...) for the spatial axes, resolving auto_pad."""
    auto = L.attr(n, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    k = len(kernel)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_b, pads_e = [], []
        for i in range(k):
            eff = (kernel[i] - 1) * dilations[i] + 1
            total = max((out_hw[i] - 1) * strides[i] + eff - in_hw[i], 0)
            small = total // 2
            if auto == "SAME_UPPER":
                pads_b.append(small)
                pads_e.append(total - small)
            else:
                pads_b.append(total - small)
                pads_e.append(small)
        return pads_b, pads_e
    if auto == "VALID":
        return [0] * k, [0] * k
    p = list(L.attr(n, "pads", [0] * (2 * k)))
    return p[:k], p[k:]


def _tflite_padding(in_hw, kernel, strides, dilations, out_hw, pb, pe):
    """Padding.SAME / VALID if TFLite computes exactly these pads and output size, else None."""
    if all(p == 0 for p in pb + pe):
        valid = all(out_hw[i] == (in_hw[i] - ((kernel[i] - 1) * dilations[i] + 1)) // strides[i] + 1
                    for i in range(len(kernel)))
        if valid:
            return Padding.VALID
    same = True
    for i in range(len(kernel)):
        out = (in_hw[i] + strides[i] - 1) // strides[i]
        eff = (kernel[i] - 1) * dilations[i] + 1
        total = max((out - 1) * strides[i] + eff - in_hw[i], 0)
        if out != out_hw[i] or pb[i] != total // 2 or pe[i] != total - total // 2:
            same = False
    return Padding.SAME if same else None


def _explicit_pad(L, x, name, in_shape_nhwc, pb, pe, value=0.0):
    """PAD (or PADV2 with ``value``) the spatial axes of an NHWC tensor; returns the new tensor."""
    pads = np.array([[0, 0], [pb[0], pe[0]], [pb[1], pe[1]], [0, 0]], np.int32)
    shape = (in_shape_nhwc[0], in_shape_nhwc[1] + pb[0] + pe[0], in_shape_nhwc[2] + pb[1] + pe[1], in_shape_nhwc[3])
    t = L.g.tensor(name + "_padded", shape)
    if value == 0.0:
        L.emit("PAD", [x, L.g.const(name + "_pads", pads)], [t])
    else:
        L.emit("PADV2", [x, L.g.const(name + "_pads", pads), L.g.const(name + "_padval", np.array([value], np.float32))],
               [t])
    return t, shape


def _spatial_4d(L, n):
    v = L.val(n.input[0])
    if v.const is not None:
        raise L.unsupported("a constant data input")
    if v.rank != 4:
        raise L.unsupported(f"{v.rank - 2}-D spatial input (only 2-D is supported)")
    return v


def _via_2d(L, n, fn):
    """Lower a 1-D Conv / ConvTranspose / pooling node as its 2-D form with height 1.

    The (N, C, L) activation lives as (N, L, C) in TFLite; a RESHAPE to (N, 1, L, C) and back around
    the 2-D op costs no data movement.
    """
    import onnx
    v = L.val(n.input[0])
    x4 = n.input[0] + "_as2d"
    L.shapes[x4] = (v.shape[0], v.shape[1], 1, v.shape[2])
    t = L.get(n.input[0], NHWC[3])
    t4 = L.g.tensor(x4, _perm_shape(L.shapes[x4], NHWC[4]))
    L.emit("RESHAPE", [t, L.g.const(x4 + "_shape", np.array(L.g.tensors[t4].shape, np.int32))], [t4],
           new_shape=list(L.g.tensors[t4].shape))
    L.vals[x4] = Value(x4, L.shapes[x4], tensor=t4, perm=NHWC[4])
    inputs = [x4] + list(n.input[1:])
    if len(n.input) > 1 and n.input[1] and L.is_const(n.input[1]):
        w = np.asarray(L.cval(n.input[1]))
        L.vals[n.input[1] + "_as2d"] = Value(n.input[1] + "_as2d", w.shape[:2] + (1,) + w.shape[2:],
                                             const=w[:, :, None, :])
        inputs[1] = n.input[1] + "_as2d"
    out = n.output[0]
    o4 = out + "_as2d"
    so = L.shapes[out]
    L.shapes[o4] = (so[0], so[1], 1, so[2])
    attrs = {}
    for a in n.attribute:
        val = onnx.helper.get_attribute_value(a)
        if a.name in ("kernel_shape", "strides", "dilations", "output_padding"):
            val = [1] + list(val)
        elif a.name == "pads":
            val = [0, val[0], 0, val[1]]
        elif isinstance(val, bytes):
            val = val.decode()
        attrs[a.name] = val
    n4 = onnx.helper.make_node(n.op_type, inputs, [o4], name=(n.name or out) + "_as2d", **attrs)
    node = L.node
    L.node = n4
    fn(L, n4)
    L.node = node
    v4 = L.vals[o4]
    t_out = L.get(o4, NHWC[4])
    res = L.new_out(out, NHWC[3])
    L.emit("RESHAPE", [t_out, L.g.const(out + "_shape", np.array(L.g.tensors[res].shape, np.int32))], [res],
           new_shape=list(L.g.tensors[res].shape))
    del v4


@lowers("Conv")
def _conv(L, n):
    if L.val(n.input[0]).rank == 3:
        return _via_2d(L, n, _conv)
    if L.val(n.input[0]).rank == 5:
        return _conv_3d(L, n)
    v = _spatial_4d(L, n)
    w = np.asarray(L.cval(n.input[1], "weight"), np.float32)
    bias = np.asarray(L.cval(n.input[2], "bias"), np.float32) if len(n.input) > 2 and n.input[2] else None
    group = int(L.attr(n, "group", 1))
    kernel = list(w.shape[2:])
    strides = list(L.attr(n, "strides", [1, 1]))
    dil = list(L.attr(n, "dilations", [1, 1]))
    out = n.output[0]
    in_hw, out_hw = v.shape[2:], L.shapes[out][2:]
    pb, pe = _pads(L, n, in_hw, kernel, strides, dil, out_hw)
    pad = _tflite_padding(in_hw, kernel, strides, dil, out_hw, pb, pe)
    x = L.get(n.input[0], NHWC[4])
    shape = _perm_shape(v.shape, NHWC[4])
    if pad is None:
        x, shape = _explicit_pad(L, x, out, shape, pb, pe)
        pad = Padding.VALID
    cin, cout = v.shape[1], w.shape[0]
    opts = dict(padding=pad, stride_w=strides[1], stride_h=strides[0], dilation_w_factor=dil[1],
                dilation_h_factor=dil[0], fused_activation_function=0)
    if bias is None:
        bias = np.zeros(cout, np.float32)
    if group == 1:
        L.emit("CONV_2D", [x, L.g.const(out + "_weights", w.transpose(0, 2, 3, 1)), L.g.const(out + "_bias", bias)],
               [L.new_out(out, NHWC[4])], **opts)
    elif group == cin and w.shape[1] == 1:
        L.emit("DEPTHWISE_CONV_2D", [x, L.g.const(out + "_weights", w.transpose(1, 2, 3, 0)),
                                     L.g.const(out + "_bias", bias)],
               [L.new_out(out, NHWC[4])], depth_multiplier=cout // cin, **opts)
    else:
        # grouped convolution: SPLIT the channels, one CONV_2D per group, CONCATENATION
        parts = [L.g.tensor(f"{out}_g{i}_in", shape[:3] + (cin // group,)) for i in range(group)]
        L.emit("SPLIT", [L.g.const(out + "_split_axis", np.array(3, np.int32)), x], parts, num_splits=group)
        og = cout // group
        outs = []
        oshape = _perm_shape(L.shapes[out], NHWC[4])
        for i in range(group):
            t = L.g.tensor(f"{out}_g{i}", oshape[:3] + (og,))
            L.emit("CONV_2D", [parts[i], L.g.const(f"{out}_g{i}_weights", w[i * og:(i + 1) * og].transpose(0, 2, 3, 1)),
                               L.g.const(f"{out}_g{i}_bias", bias[i * og:(i + 1) * og])], [t], **opts)
            outs.append(t)
        L.emit("CONCATENATION", outs, [L.new_out(out, NHWC[4])], axis=3, fused_activation_function=0)


def _conv_3d(L, n):
    """A 3-D convolution as one 2-D convolution over depth-stacked channels.

    For output depth ``o`` the kernel sees input depths ``o*sd + k*dd`` (k < kd) of the depth-padded
    input. One GATHER along depth collects them, giving (N, Do*kd, H, W, C); a RESHAPE and TRANSPOSE
    make (N*Do, H, W, C*kd) with channel ``c*kd + k``, so the weights (Cout, Cin/g, kd, kh, kw) reshape
    to (Cout, Cin/g*kd, kh, kw) and groups stay contiguous. A 2-D Conv over (H, W) then gives
    (N*Do, Ho, Wo, Cout), which is the NDHWC output. Every op used has float and int8 kernels.
    """
    import onnx
    v = L.val(n.input[0])
    if v.const is not None:
        raise L.unsupported("a constant data input")
    w = np.asarray(L.cval(n.input[1], "weight"), np.float32)  # (Cout, Cin/g, kd, kh, kw)
    N, C, D, H, W = v.shape
    out = n.output[0]
    _, cout, Do, Ho, Wo = L.shapes[out]
    k = list(w.shape[2:])
    s = list(L.attr(n, "strides", [1, 1, 1]))
    d = list(L.attr(n, "dilations", [1, 1, 1]))
    pb, pe = _pads(L, n, [D, H, W], k, s, d, [Do, Ho, Wo])
    x = L.get(n.input[0], NHWC[5])  # (N, D, H, W, C)
    Dp = D + pb[0] + pe[0]
    if pb[0] or pe[0]:
        t = L.g.tensor(out + "_dpad", (N, Dp, H, W, C))
        L.emit("PAD", [x, L.g.const(out + "_dpads", np.array([[0, 0], [pb[0], pe[0]], [0, 0], [0, 0], [0, 0]],
                                                             np.int32))], [t])
        x = t
    idx = np.array([o * s[0] + j * d[0] for o in range(Do) for j in range(k[0])], np.int32)
    g1 = L.g.tensor(out + "_taps", (N, Do * k[0], H, W, C))
    L.emit("GATHER", [x, L.g.const(out + "_tap_idx", idx)], [g1], axis=1, batch_dims=0)
    r1 = L.g.tensor(out + "_taps5", (N * Do, k[0], H, W, C))
    L.emit("RESHAPE", [g1, L.g.const(out + "_taps5_shape", np.array((N * Do, k[0], H, W, C), np.int32))], [r1],
           new_shape=[N * Do, k[0], H, W, C])
    t1 = L.g.tensor(out + "_tapsT", (N * Do, H, W, C, k[0]))
    L.emit("TRANSPOSE", [r1, L.g.const(out + "_tapsT_perm", np.array([0, 2, 3, 4, 1], np.int32))], [t1])
    a = out + "_as2d_in"
    L.shapes[a] = (N * Do, C * k[0], H, W)
    t2 = L.g.tensor(a, (N * Do, H, W, C * k[0]))
    L.emit("RESHAPE", [t1, L.g.const(a + "_shape", np.array((N * Do, H, W, C * k[0]), np.int32))], [t2],
           new_shape=[N * Do, H, W, C * k[0]])
    L.vals[a] = Value(a, L.shapes[a], tensor=t2, perm=NHWC[4])
    wn = out + "_as2d_w"
    w2 = w.reshape(w.shape[0], w.shape[1] * k[0], k[1], k[2])
    L.vals[wn] = Value(wn, w2.shape, const=w2)
    ins = [a, wn] + ([n.input[2]] if len(n.input) > 2 and n.input[2] else [])
    b = out + "_as2d"
    L.shapes[b] = (N * Do, cout, Ho, Wo)
    sub = onnx.helper.make_node("Conv", ins, [b], name=b, strides=s[1:], dilations=d[1:],
                                pads=[pb[1], pb[2], pe[1], pe[2]], group=int(L.attr(n, "group", 1)),
                                kernel_shape=k[1:])
    node = L.node
    L.node = sub
    _conv(L, sub)
    L.node = node
    y = L.get(b, NHWC[4])
    oshape = _perm_shape(L.shapes[out], NHWC[5])
    L.emit("RESHAPE", [y, L.g.const(out + "_shape", np.array(oshape, np.int32))], [L.new_out(out, NHWC[5])],
           new_shape=list(oshape))


@lowers("ConvTranspose")
def _conv_transpose(L, n):
    if L.val(n.input[0]).rank == 3:
        return _via_2d(L, n, _conv_transpose)
    v = _spatial_4d(L, n)
    w = np.asarray(L.cval(n.input[1], "weight"), np.float32)  # (Cin, Cout/group, kh, kw)
    bias = np.asarray(L.cval(n.input[2], "bias"), np.float32) if len(n.input) > 2 and n.input[2] else None
    if int(L.attr(n, "group", 1)) != 1:
        raise L.unsupported("grouped ConvTranspose")
    if list(L.attr(n, "dilations", [1, 1])) != [1, 1]:
        raise L.unsupported("dilated ConvTranspose")
    strides = list(L.attr(n, "strides", [1, 1]))
    kernel = list(w.shape[2:])
    out = n.output[0]
    N, cin, H, W = v.shape
    cout = w.shape[1]
    full = [(H - 1) * strides[0] + kernel[0], (W - 1) * strides[1] + kernel[1]]
    oh, ow = L.shapes[out][2:]
    x = L.get(n.input[0], NHWC[4])
    # VALID transpose conv to the full size, then crop what ONNX pads away. ONNX output pixel i is
    # full-size pixel i + pads_begin; pixels past the full size (output_padding) get the bias alone.
    auto = L.attr(n, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    pads = list(L.attr(n, "pads", [0, 0, 0, 0]))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        tot = [full[0] - oh, full[1] - ow]
        pads = ([tot[0] - tot[0] // 2, tot[1] - tot[1] // 2] if auto == "SAME_LOWER" else [tot[0] // 2, tot[1] // 2])
    top, left = int(pads[0]), int(pads[1])
    extra = [max(0, top + oh - full[0]), max(0, left + ow - full[1])]
    need_crop = (top, left) != (0, 0) or (full[0], full[1]) != (oh, ow)
    bias = bias if bias is not None else np.zeros(cout, np.float32)
    full_shape = (N, full[0], full[1], cout)
    t = L.g.tensor(out + "_full", full_shape) if need_crop else L.new_out(out, NHWC[4])
    inputs = [L.g.const(out + "_oshape", np.array(full_shape, np.int32)),
              L.g.const(out + "_weights", w.transpose(1, 2, 3, 0)), x,
              L.g.const(out + "_bias", np.zeros(cout, np.float32) if any(extra) else bias)]
    L.emit("TRANSPOSE_CONV", inputs, [t], padding=Padding.VALID, stride_w=strides[1], stride_h=strides[0],
           fused_activation_function=0)
    if not need_crop:
        return
    if any(extra):
        ext_shape = (N, full[0] + extra[0], full[1] + extra[1], cout)
        t2 = L.g.tensor(out + "_extended", ext_shape)
        L.emit("PAD", [t, L.g.const(out + "_extend", np.array([[0, 0], [0, extra[0]], [0, extra[1]], [0, 0]],
                                                              np.int32))], [t2])
        t = t2
    crop = L.g.tensor(out + "_crop", (N, oh, ow, cout)) if any(extra) else L.new_out(out, NHWC[4])
    L.emit("SLICE", [t, L.g.const(out + "_begin", np.array([0, top, left, 0], np.int32)),
                     L.g.const(out + "_size", np.array([N, oh, ow, cout], np.int32))], [crop])
    if any(extra):
        L.emit("ADD", [crop, L.g.const(out + "_bias_add", bias.astype(np.float32))], [L.new_out(out, NHWC[4])],
               fused_activation_function=0)
