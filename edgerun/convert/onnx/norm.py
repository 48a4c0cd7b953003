"""Normalization lowerings."""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.lowering import Value, _fold_affine_into_producer, _operand, _perm_shape, lowers

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
