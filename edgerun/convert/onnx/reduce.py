"""Reduction lowerings."""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.lowering import lowers, tmp
from edgerun.convert.onnx.shape import _identity


#: ReduceX = post(SUM / MEAN / ... (pre(x))): (TFLite reduction, elementwise op before, op after)
_COMPOSED = {"ReduceL2": ("SUM", "square", "SQRT"), "ReduceSumSquare": ("SUM", "square", None),
             "ReduceL1": ("SUM", "ABS", None), "ReduceLogSum": ("SUM", None, "LOG"),
             "ReduceLogSumExp": ("SUM", "EXP", "LOG"), "ReduceProd": ("REDUCE_PROD", None, None)}


@lowers("ReduceMean", "ReduceMax", "ReduceSum", "ReduceMin", *_COMPOSED)
def _reduce(L, n):
    """MEAN / SUM / REDUCE_MAX / REDUCE_MIN over the axes (renumbered for the layout); ReduceL2,
    SumSquare, L1, LogSum, LogSumExp compose it with elementwise ops (LogSumExp as the plain
    log(sum(exp(x))), which overflows where ONNX Runtime's max-shifted form does not)."""
    v = L.val(n.input[0])
    if L.opset >= 18 or (n.op_type == "ReduceSum"):  # axes became an input (ReduceSum at 13, others at 18)
        axes = L.cval(n.input[1], "axes").tolist() if len(n.input) > 1 and n.input[1] else None
    else:
        axes = L.attr(n, "axes")
    if axes is None or len(axes) == 0:
        if L.attr(n, "noop_with_empty_axes", 0):
            return _identity(L, n)
        axes = list(range(v.rank))
    axes = sorted(a % v.rank for a in axes)
    keep = bool(L.attr(n, "keepdims", 1))
    t_axes = sorted(v.perm.index(a) for a in axes)
    if keep:
        out_perm = v.perm
    else:
        remaining = [p for p in v.perm if p not in axes]
        renum = {a: i for i, a in enumerate(sorted(remaining))}
        out_perm = tuple(renum[p] for p in remaining)
    op, pre, post = _COMPOSED.get(n.op_type, ({"ReduceMean": "MEAN", "ReduceMax": "REDUCE_MAX", "ReduceSum": "SUM",
                                                "ReduceMin": "REDUCE_MIN"}.get(n.op_type), None, None))
    x = L.get(n.input[0])
    if pre == "square":
        x = tmp(L, "MUL", [x, x], x, "sq", fused_activation_function=0)
    elif pre is not None:
        x = tmp(L, pre, [x], x, pre.lower())
    axes_t = L.g.const(n.output[0] + "_axes", np.array(t_axes, np.int32))
    if post is None:
        L.emit(op, [x, axes_t], [L.new_out(n.output[0], out_perm)], keep_dims=keep)
        return
    shape = tuple(d for i, d in enumerate(L.g.tensors[x].shape) if keep or i not in t_axes)
    if keep:
        shape = tuple(1 if i in t_axes else d for i, d in enumerate(L.g.tensors[x].shape))
    r = tmp(L, op, [x, axes_t], x, "reduced", shape=shape, keep_dims=keep)
    L.emit(post, [r], [L.new_out(n.output[0], out_perm)])
