"""Activation lowerings: Relu, Clip, Sigmoid, Tanh, HardSwish, Elu, Softmax ..."""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.lowering import _fuse_activation, _perm_shape, _unary, lowers, scalar, tmp
from edgerun.convert.onnx.shape import _identity
from edgerun.schema.tflite import Activation


@lowers("Relu")
def _relu(L, n):
    if not _fuse_activation(L, n, Activation.RELU):
        _unary(L, n, "RELU")


@lowers("Clip")
def _clip(L, n):
    lo = float(L.cval(n.input[1], "min")) if len(n.input) > 1 and n.input[1] else -np.inf
    hi = float(L.cval(n.input[2], "max")) if len(n.input) > 2 and n.input[2] else np.inf
    table = {(0.0, 6.0): ("RELU6", Activation.RELU6), (-1.0, 1.0): (None, Activation.RELU_N1_TO_1),
             (0.0, np.inf): ("RELU", Activation.RELU)}
    if (lo, hi) in table:
        op, act = table[(lo, hi)]
        if _fuse_activation(L, n, act):
            return
        if op is not None:  # standalone RELU_N1_TO_1 is missing from TFLM: MAXIMUM / MINIMUM below
            _unary(L, n, op)
            return
    v = L.val(n.input[0])
    x = L.get(n.input[0])
    out_shape = _perm_shape(v.shape, v.perm)
    if np.isfinite(lo):
        t = L.g.tensor(n.output[0] + "_lo", out_shape) if np.isfinite(hi) else L.new_out(n.output[0], v.perm)
        L.emit("MAXIMUM", [x, L.g.const(n.output[0] + "_min", np.array([lo], np.float32))], [t])
        x = t
    if np.isfinite(hi):
        L.emit("MINIMUM", [x, L.g.const(n.output[0] + "_max", np.array([hi], np.float32))],
               [L.new_out(n.output[0], v.perm)])
    if not np.isfinite(lo) and not np.isfinite(hi):
        _identity(L, n)


@lowers("LeakyRelu")
def _leaky(L, n):
    _unary(L, n, "LEAKY_RELU", alpha=float(L.attr(n, "alpha", 0.01)))


@lowers("Neg")
def _neg(L, n):
    """MUL by -1: the same float values, and an op every int8 runtime (edgerun included) has."""
    v = L.val(n.input[0])
    dt = L.dtype(n.output[0])
    L.emit("MUL", [L.get(n.input[0]), scalar(L, -1, "minus1", dt)], [L.new_out(n.output[0], v.perm)],
           fused_activation_function=0)


@lowers("Elu", "Selu", "Celu")
def _elu(L, n):
    """Elu(alpha) = relu(x) + alpha * (exp(min(x, 0)) - 1); Selu = gamma * Elu(alpha);
    Celu(alpha) = relu(x) + alpha * (exp(min(x, 0) / alpha) - 1). Elu with alpha 1 is TFLite's ELU."""
    if n.op_type == "Selu":
        alpha = float(L.attr(n, "alpha", 1.67326319217681884765625))
        gamma = float(L.attr(n, "gamma", 1.05070102214813232421875))
    else:
        alpha, gamma = float(L.attr(n, "alpha", 1.0)), 1.0
    if n.op_type == "Elu" and alpha == 1.0:
        return _unary(L, n, "ELU")
    v = L.val(n.input[0])
    x = L.get(n.input[0])
    m = tmp(L, "MINIMUM", [x, scalar(L, 0.0, "zero")], x, "neg")
    if n.op_type == "Celu":
        m = tmp(L, "MUL", [m, scalar(L, 1.0 / alpha, "inv_alpha")], x, "neg_scaled", fused_activation_function=0)
    e = tmp(L, "EXP", [m], x, "exp")
    ae = tmp(L, "MUL", [e, scalar(L, alpha * gamma, "alpha")], x, "alpha_exp", fused_activation_function=0)
    r = tmp(L, "RELU", [x], x, "pos")
    if gamma != 1.0:
        r = tmp(L, "MUL", [r, scalar(L, gamma, "gamma")], x, "pos_scaled", fused_activation_function=0)
    s = tmp(L, "ADD", [r, ae], x, "sum", fused_activation_function=0)
    L.emit("ADD", [s, scalar(L, -alpha * gamma, "offset")], [L.new_out(n.output[0], v.perm)],
           fused_activation_function=0)


def _softplus_t(L, x):
    """softplus(x) = relu(x) + log(1 + exp(-|x|)), which never overflows."""
    a = tmp(L, "ABS", [x], x, "abs")
    na = tmp(L, "MUL", [a, scalar(L, -1.0, "minus1")], x, "negabs", fused_activation_function=0)
    e = tmp(L, "EXP", [na], x, "exp")
    e1 = tmp(L, "ADD", [e, scalar(L, 1.0, "one")], x, "exp1", fused_activation_function=0)
    lg = tmp(L, "LOG", [e1], x, "log")
    r = tmp(L, "RELU", [x], x, "pos")
    return r, lg


@lowers("Softplus")
def _softplus(L, n):
    v = L.val(n.input[0])
    r, lg = _softplus_t(L, L.get(n.input[0]))
    L.emit("ADD", [r, lg], [L.new_out(n.output[0], v.perm)], fused_activation_function=0)


@lowers("Mish")
def _mish(L, n):
    """x * tanh(softplus(x))."""
    v = L.val(n.input[0])
    x = L.get(n.input[0])
    r, lg = _softplus_t(L, x)
    sp = tmp(L, "ADD", [r, lg], x, "softplus", fused_activation_function=0)
    th = tmp(L, "TANH", [sp], x, "tanh")
    L.emit("MUL", [x, th], [L.new_out(n.output[0], v.perm)], fused_activation_function=0)


@lowers("Softsign")
def _softsign(L, n):
    """x / (1 + |x|)."""
    v = L.val(n.input[0])
    x = L.get(n.input[0])
    a = tmp(L, "ABS", [x], x, "abs")
    d = tmp(L, "ADD", [a, scalar(L, 1.0, "one")], x, "den", fused_activation_function=0)
    L.emit("DIV", [x, d], [L.new_out(n.output[0], v.perm)], fused_activation_function=0)


@lowers("Gelu")
def _gelu(L, n):
    approx = L.attr(n, "approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    _unary(L, n, "GELU", approximate=approx == "tanh")


@lowers("Reciprocal")
def _reciprocal(L, n):
    v = L.val(n.input[0])
    x = L.get(n.input[0])
    L.emit("DIV", [scalar(L, 1.0, "one"), x], [L.new_out(n.output[0], v.perm)], fused_activation_function=0)


#: ONNX ops that are one TFLite op of the same input and output
_ONE_OP = {"Sigmoid": "LOGISTIC", "Tanh": "TANH", "HardSwish": "HARD_SWISH", "Abs": "ABS", "Exp": "EXP",
           "Sqrt": "SQRT", "Log": "LOG", "Floor": "FLOOR", "Ceil": "CEIL", "Round": "ROUND", "Sin": "SIN",
           "Cos": "COS", "Sign": "SIGN"}


@lowers(*_ONE_OP)
def _one_op(L, n):
    _unary(L, n, _ONE_OP[n.op_type])


@lowers("HardSigmoid")
def _hardsigmoid(L, n):
    """clip(alpha*x + beta, 0, 1) = relu6(6*alpha*x + 6*beta) / 6, with x * HardSigmoid(x) -> HARD_SWISH."""
    alpha, beta = float(L.attr(n, "alpha", 0.2)), float(L.attr(n, "beta", 0.5))
    v = L.val(n.input[0])
    x = L.get(n.input[0])
    shape = _perm_shape(v.shape, v.perm)
    name = n.output[0]
    t1 = L.g.tensor(name + "_scaled", shape)
    L.emit("MUL", [x, L.g.const(name + "_a", np.array([6 * alpha], np.float32))], [t1], fused_activation_function=0)
    t2 = L.g.tensor(name + "_relu6", shape)
    L.emit("ADD", [t1, L.g.const(name + "_b", np.array([6 * beta], np.float32))], [t2],
           fused_activation_function=Activation.RELU6)
    L.emit("MUL", [t2, L.g.const(name + "_sixth", np.array([1 / 6], np.float32))], [L.new_out(name, v.perm)],
           fused_activation_function=0)
    L.hardsigmoid[name] = (n.input[0], abs(alpha - 1 / 6) < 1e-6 and abs(beta - 0.5) < 1e-6)


@lowers("PRelu")
def _prelu(L, n):
    v = L.val(n.input[0])
    slope = np.asarray(L.cval(n.input[1], "slope"), np.float32)
    slope = slope.reshape((1,) * (v.rank - slope.ndim) + slope.shape)
    x = L.get(n.input[0])
    alpha = np.transpose(slope, v.perm)
    # TFLite PRELU broadcasts alpha against the input without the batch axis
    alpha = alpha.reshape(alpha.shape[1:]) if alpha.ndim == v.rank and alpha.shape[0] == 1 else alpha
    L.emit("PRELU", [x, L.g.const(n.output[0] + "_alpha", alpha)], [L.new_out(n.output[0], v.perm)])


@lowers("Softmax", "LogSoftmax")
def _softmax(L, n):
    v = L.val(n.input[0])
    r = v.rank
    axis = L.attr(n, "axis", -1) % r  # opset 13: one axis (older 2-D coercion is rewritten by the upgrade)
    op = "SOFTMAX" if n.op_type == "Softmax" else "LOG_SOFTMAX"
    opts = {"beta": 1.0} if op == "SOFTMAX" else {}
    perm = v.perm if v.perm[-1] == axis else tuple(p for p in v.perm if p != axis) + (axis,)
    x = L.get(n.input[0], perm)
    L.emit(op, [x], [L.new_out(n.output[0], perm)], **opts)


@lowers("Shrink")
def _shrink(L, n):
    """y = x - bias where x > lambd, x + bias where x < -lambd, else 0."""
    lambd, bias = float(L.attr(n, "lambd", 0.5)), float(L.attr(n, "bias", 0.0))
    v = L.val(n.input[0])
    if L.dtype(n.output[0]) != "float32":
        raise L.unsupported("Shrink of an integer tensor")
    x = L.get(n.input[0])
    hi = tmp(L, "CAST", [tmp(L, "GREATER", [x, scalar(L, lambd, "lambd")], x, "gt", dtype="bool")], x, "gt_f")
    lo = tmp(L, "CAST", [tmp(L, "LESS", [x, scalar(L, -lambd, "neg_lambd")], x, "lt", dtype="bool")], x, "lt_f")
    a = tmp(L, "MUL", [tmp(L, "SUB", [x, scalar(L, bias, "bias")], x, "xmb", fused_activation_function=0), hi], x,
            "upper", fused_activation_function=0)
    b = tmp(L, "MUL", [tmp(L, "ADD", [x, scalar(L, bias, "bias2")], x, "xpb", fused_activation_function=0), lo], x,
            "lower", fused_activation_function=0)
    L.emit("ADD", [a, b], [L.new_out(n.output[0], v.perm)], fused_activation_function=0)
