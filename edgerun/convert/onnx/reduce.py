"""Reduction lowerings."""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.lowering import lowers
from edgerun.convert.onnx.shape import _identity


@lowers("ReduceMean", "ReduceMax", "ReduceSum", "ReduceMin")
def _reduce(L, n):
    v = L.val(n.input[0])
    if L.opset >= 18 or (n.op_type == "ReduceSum" and L.opset >= 13):
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
    op = {"ReduceMean": "MEAN", "ReduceMax": "REDUCE_MAX", "ReduceSum": "SUM", "ReduceMin": "REDUCE_MIN"}[n.op_type]
    x = L.get(n.input[0])
    L.emit(op, [x, L.g.const(n.output[0] + "_axes", np.array(t_axes, np.int32))], [L.new_out(n.output[0], out_perm)],
           keep_dims=keep)
