"""Gemm / MatMul lowerings."""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.lowering import Value, _ident, _operand, lowers, scalar, tmp


def _fully_connected(L, n, a_name, w_oi, bias, out):
    v = L.val(a_name)
    if a_name in L.colperm:
        w_oi = w_oi[:, L.colperm[a_name]]
    if v.perm[-1] != v.rank - 1:
        perm = _ident(v.rank)
    else:
        perm = v.perm
    x = L.get(a_name, perm)
    keep = v.rank > 2
    if bias is None:
        bias = np.zeros(w_oi.shape[0], np.float32)
    L.emit("FULLY_CONNECTED", [x, L.g.const(out + "_weights", w_oi.astype(np.float32)),
                               L.g.const(out + "_bias", bias.astype(np.float32))],
           [L.new_out(out, perm)], fused_activation_function=0, keep_num_dims=keep)


@lowers("Gemm")
def _gemm(L, n):
    alpha, beta = float(L.attr(n, "alpha", 1.0)), float(L.attr(n, "beta", 1.0))
    ta, tb = int(L.attr(n, "transA", 0)), int(L.attr(n, "transB", 0))
    out = n.output[0]
    if ta or L.is_const(n.input[0]) or not L.is_const(n.input[1]):
        return _matmul_general(L, n, ta, tb, alpha, beta)
    B = np.asarray(L.cval(n.input[1]), np.float32)
    w = (B if tb else B.T) * alpha if alpha != 1.0 else (B if tb else B.T)
    bias = None
    if len(n.input) > 2 and n.input[2]:
        c = np.asarray(L.cval(n.input[2], "C"), np.float32) * beta
        if c.size == 1:
            bias = np.full(w.shape[0], float(c.reshape(-1)[0]), np.float32)
        elif c.shape in ((w.shape[0],), (1, w.shape[0])):
            bias = c.reshape(-1)
        else:
            raise L.unsupported(f"Gemm with C of shape {list(c.shape)}")
    _fully_connected(L, n, n.input[0], w, bias, out)


def _matmul_general(L, n, ta=0, tb=0, alpha=1.0, beta=1.0):
    """BATCH_MATMUL of any two operands (run-time or constant), transposes as adj_x / adj_y, then
    alpha as a MUL and C (times beta) as an ADD. A 1-D operand is made 2-D as ONNX MatMul does."""
    out = n.output[0]
    a, b = L.val(n.input[0]), L.val(n.input[1])
    if a.rank < 2 or b.rank < 2:
        raise L.unsupported("MatMul of a 1-D run-time operand (reshape it to 2-D in the model)")
    rank = max(a.rank, b.rank)
    ident = _ident(rank)
    ta_ = _operand(L, n.input[0], ident, rank, "_mm")
    tb_ = _operand(L, n.input[1], ident, rank, "_mm")
    has_c = len(n.input) > 2 and bool(n.input[2])
    shape = L.shapes[out]
    y = L.new_out(out, ident) if alpha == 1.0 and not has_c else L.g.tensor(out + "_ab", shape)
    L.emit("BATCH_MATMUL", [ta_, tb_], [y], adj_x=bool(ta), adj_y=bool(tb))
    if alpha != 1.0:
        y2 = L.new_out(out, ident) if not has_c else L.g.tensor(out + "_alpha_ab", shape)
        L.emit("MUL", [y, scalar(L, alpha, "alpha")], [y2], fused_activation_function=0)
        y = y2
    if has_c:
        c = n.input[2]
        if L.is_const(c):
            cv = np.asarray(L.cval(c), np.float32) * beta
            key = c + "_beta"
            L.vals[key] = Value(key, cv.shape, const=cv)
            tc = _operand(L, key, ident, rank)
        else:
            tc = _operand(L, c, ident, rank)
            if beta != 1.0:
                tc = tmp(L, "MUL", [tc, scalar(L, beta, "beta")], tc, "beta_c", fused_activation_function=0)
        L.emit("ADD", [y, tc], [L.new_out(out, ident)], fused_activation_function=0)


@lowers("MatMul")
def _matmul(L, n):
    if L.is_const(n.input[1]) and not L.is_const(n.input[0]) and np.ndim(L.cval(n.input[1])) == 2:
        B = np.asarray(L.cval(n.input[1]), np.float32)
        _fully_connected(L, n, n.input[0], B.T, None, n.output[0])
        return
    _matmul_general(L, n)


@lowers("Einsum")
def _einsum(L, n):
    """Matrix-product einsums: ``...ij,...jk->...ik`` with either operand transposed
    (``...ji`` / ``...kj``) and the same batch letters on both sides, as BATCH_MATMUL."""
    eq = L.attr(n, "equation")
    eq = (eq.decode() if isinstance(eq, bytes) else eq).replace(" ", "")
    lhs, _, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != 2 or "." in eq or not out:
        raise L.unsupported(f"Einsum '{eq}' (only two-operand matrix products with an explicit output)")
    a, b = terms
    if len(a) < 2 or len(b) < 2 or a[:-2] != b[:-2] or out[:-2] != a[:-2]:
        raise L.unsupported(f"Einsum '{eq}' is not a batched matrix product")
    i, k = out[-2], out[-1]
    shared = set(a[-2:]) & set(b[-2:])
    if len(shared) != 1:
        raise L.unsupported(f"Einsum '{eq}' is not a batched matrix product")
    j = shared.pop()
    if {a[-2], a[-1]} != {i, j} or {b[-2], b[-1]} != {j, k}:
        raise L.unsupported(f"Einsum '{eq}' is not a batched matrix product")
    _matmul_general(L, n, ta=int(a[-2] == j), tb=int(b[-1] == j))
