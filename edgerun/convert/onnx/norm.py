"""Normalization lowerings."""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.lowering import (NHWC, Value, _fold_affine_into_producer, _ident, _operand, _perm_shape,
                                           lowers, scalar, tmp)


@lowers("BatchNormalization")
def _batchnorm(L, n):
    v = L.val(n.input[0])
    if len(n.output) > 1 and any(n.output[1:]):
        raise L.unsupported("training-mode BatchNormalization (extra outputs)")
    scale, b, mean, var = (np.asarray(L.cval(i), np.float64) for i in n.input[1:5])
    eps = float(L.attr(n, "epsilon", 1e-5))
    mul = scale / np.sqrt(var + eps)
    add = b - mean * mul
    out = n.output[0]
    if v.const is None and v.rank >= 2 and v.perm[-1] == 1:
        if _fold_affine_into_producer(L, n.input[0], mul.astype(np.float32), add.astype(np.float32), out):
            return
    # standalone: y = x * mul + add along the channel axis (1)
    shape = (1, -1) + (1,) * (v.rank - 2)
    L.vals[out + "_bn_mul"] = Value(out + "_bn_mul", (1, mul.size) + (1,) * (v.rank - 2),
                                    const=mul.astype(np.float32).reshape(shape))
    L.vals[out + "_bn_add"] = Value(out + "_bn_add", (1, mul.size) + (1,) * (v.rank - 2),
                                    const=add.astype(np.float32).reshape(shape))
    perm = v.perm
    x = L.get(n.input[0])
    t = L.g.tensor(out + "_scaled", _perm_shape(v.shape, perm))
    L.emit("MUL", [x, _operand(L, out + "_bn_mul", perm, v.rank)], [t], fused_activation_function=0)
    L.emit("ADD", [t, _operand(L, out + "_bn_add", perm, v.rank)], [L.new_out(out, perm)],
           fused_activation_function=0)


def _normalize(L, x, axes, eps):
    """(x - mean) * rsqrt(mean((x - mean)^2) + eps) over TFLite ``axes`` of tensor ``x``."""
    shape = L.g.tensors[x].shape
    red = tuple(1 if i in axes else d for i, d in enumerate(shape))
    ax = L.g.const(f"{L.node.output[0]}_norm_axes", np.array(axes, np.int32))
    mean = tmp(L, "MEAN", [x, ax], x, "mean", shape=red, keep_dims=True)
    d = tmp(L, "SUB", [x, mean], x, "centered", fused_activation_function=0)
    sq = tmp(L, "MUL", [d, d], x, "sq", fused_activation_function=0)
    var = tmp(L, "MEAN", [sq, ax], x, "var", shape=red, keep_dims=True)
    ve = tmp(L, "ADD", [var, scalar(L, eps, "eps")], var, "var_eps", fused_activation_function=0)
    inv = tmp(L, "RSQRT", [ve], var, "inv_std")
    return tmp(L, "MUL", [d, inv], x, "normalized", fused_activation_function=0)


def _affine(L, n, y, perm, rank, scale, bias, bshape):
    """y * scale + bias with constants broadcast as ``bshape`` (ONNX order), into n.output[0]."""
    out = n.output[0]
    for k, (c, op) in enumerate(((scale, "MUL"), (bias, "ADD"))):
        if c is None:
            continue
        key = f"{out}_{op.lower()}_c"
        L.vals[key] = Value(key, bshape, const=np.asarray(c, np.float32).reshape(bshape))
        last = k == 1 or bias is None
        t = L.new_out(out, perm) if last else L.g.tensor(out + "_scaled", L.g.tensors[y].shape)
        L.emit(op, [y, _operand(L, key, perm, rank)], [t], fused_activation_function=0)
        y = t
    if scale is None and bias is None:
        L.emit("RESHAPE", [y, L.g.const(out + "_shape", np.array(L.g.tensors[y].shape, np.int32))],
               [L.new_out(out, perm)], new_shape=list(L.g.tensors[y].shape))


@lowers("InstanceNormalization")
def _instancenorm(L, n):
    v = L.val(n.input[0])
    r = v.rank
    perm = v.perm
    x = L.get(n.input[0])
    axes = sorted(perm.index(a) for a in range(2, r))
    y = _normalize(L, x, axes, float(L.attr(n, "epsilon", 1e-5)))
    bshape = (1, v.shape[1]) + (1,) * (r - 2)
    _affine(L, n, y, perm, r, L.cval(n.input[1], "scale"), L.cval(n.input[2], "B"), bshape)


@lowers("LayerNormalization")
def _layernorm(L, n):
    if len(n.output) > 1 and any(n.output[1:]):
        raise L.unsupported("LayerNormalization with Mean / InvStdDev outputs (training only)")
    v = L.val(n.input[0])
    r = v.rank
    axis = int(L.attr(n, "axis", -1)) % r
    perm = v.perm
    x = L.get(n.input[0])
    axes = sorted(perm.index(a) for a in range(axis, r))
    y = _normalize(L, x, axes, float(L.attr(n, "epsilon", 1e-5)))
    bshape = (1,) * axis + tuple(v.shape[axis:])
    scale = np.broadcast_to(np.asarray(L.cval(n.input[1], "Scale"), np.float32), v.shape[axis:])
    bias = (np.broadcast_to(np.asarray(L.cval(n.input[2], "B"), np.float32), v.shape[axis:])
            if len(n.input) > 2 and n.input[2] else None)
    _affine(L, n, y, perm, r, scale, bias, bshape)


@lowers("GroupNormalization")
def _groupnorm(L, n):
    """Normalize over (channels of a group, spatial) after a RESHAPE to (N, G, C/G * spatial)."""
    v = L.val(n.input[0])
    r = v.rank
    G = int(L.attr(n, "num_groups"))
    N, C = v.shape[:2]
    out = n.output[0]
    x = L.get(n.input[0], _ident(r))
    gshape = (N, G, int(np.prod(v.shape[1:])) // G)
    xg = tmp(L, "RESHAPE", [x, L.g.const(out + "_gshape", np.array(gshape, np.int32))], x, "grouped", shape=gshape,
             new_shape=list(gshape))
    y = _normalize(L, xg, [2], float(L.attr(n, "epsilon", 1e-5)))
    yb = tmp(L, "RESHAPE", [y, L.g.const(out + "_bshape", np.array(v.shape, np.int32))], x, "ungrouped",
             shape=v.shape, new_shape=list(v.shape))
    scale = np.asarray(L.cval(n.input[1], "scale"), np.float32).reshape(-1)
    bias = np.asarray(L.cval(n.input[2], "bias"), np.float32).reshape(-1)
    if scale.size == G and G != C:  # opset 18: one scale / bias per group
        scale, bias = np.repeat(scale, C // G), np.repeat(bias, C // G)
    _affine(L, n, yb, _ident(r), r, scale, bias, (1, C) + (1,) * (r - 2))


@lowers("LRN")
def _lrn(L, n):
    """TFLite LOCAL_RESPONSE_NORMALIZATION over the channel (last NHWC) axis.

    ONNX: y = x / (bias + alpha / size * sum(x^2 over a window of ``size`` channels))^beta with the
    window floor((size-1)/2) before and ceil((size-1)/2) after; TFLite sums over [c - radius, c + radius]
    and multiplies alpha by the sum, so radius = (size-1)/2 and alpha = alpha / size.
    """
    v = L.val(n.input[0])
    if v.rank != 4:
        raise L.unsupported(f"LRN of a {v.rank}-D input (TFLite's LOCAL_RESPONSE_NORMALIZATION is 4-D)")
    size = int(L.attr(n, "size"))
    if size % 2 == 0:
        raise L.unsupported(f"LRN with an even size {size} (an asymmetric window; TFLite's is symmetric)")
    x = L.get(n.input[0], NHWC[4])
    L.emit("LOCAL_RESPONSE_NORMALIZATION", [x], [L.new_out(n.output[0], NHWC[4])], radius=(size - 1) // 2,
           bias=float(L.attr(n, "bias", 1.0)), alpha=float(L.attr(n, "alpha", 1e-4)) / size,
           beta=float(L.attr(n, "beta", 0.75)))
