"""Elementwise lowerings: binary arithmetic, QDQ pairs, Cast."""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.lowering import (Value, _channel_const, _fold_affine_into_producer, _fuse_activation,
                                           _layout_for, _operand, _perm_shape, _unary, lowers, scalar)
from edgerun.convert.onnx.shape import _identity
from edgerun.schema.tflite import Activation


@lowers("QuantizeLinear", "DequantizeLinear")
def _fake_quant(L, n):
    """QDQ models (ONNX Runtime's quantize_static, QAT exports).

    Constant weights behind DequantizeLinear fold to float constants by themselves. A
    QuantizeLinear -> DequantizeLinear pair on an activation is dropped (every activation is
    recalibrated), except for what it means as a clamp: quantizers remove a Relu / Clip(0, 6)
    before a QuantizeLinear whose zero point is the lowest integer, because saturation does the
    clamping. Such a QuantizeLinear becomes that Relu (or Relu6 when the range ends at 6) again.
    """
    v = L.val(n.input[0])
    if v.const is not None:
        raise L.unsupported("a constant input that could not be folded")
    if n.op_type == "QuantizeLinear" and len(n.input) > 2 and n.input[2] and L.is_const(n.input[1]):
        zp = np.asarray(L.cval(n.input[2]))
        scale = np.asarray(L.cval(n.input[1]), np.float64)
        if zp.size == 1 and scale.size == 1 and zp.dtype in (np.int8, np.uint8, np.int16, np.uint16):
            info = np.iinfo(zp.dtype)
            prod = L.producer(v.tensor)
            already = prod is not None and (prod.op in ("SOFTMAX", "LOGISTIC", "RELU", "RELU6")
                                            or prod.options.get("fused_activation_function", 0) in
                                            (Activation.RELU, Activation.RELU6))
            if int(zp.reshape(-1)[0]) == info.min and not already:
                hi = float(scale.reshape(-1)[0]) * (info.max - info.min)
                act = Activation.RELU6 if abs(hi - 6.0) <= 0.02 * 6.0 else Activation.RELU
                if not _fuse_activation(L, n, act):
                    _unary(L, n, "RELU6" if act == Activation.RELU6 else "RELU")
                return
    _identity(L, n)


@lowers("Cast", "CastLike")
def _cast(L, n):
    """Cast between the TFLite dtypes that carry ONNX values (float32, int32, bool): a relabelling when
    both sides map to the same one, else TFLite's CAST."""
    src, dst = L.dtype(n.input[0]), L.dtype(n.output[0])
    if src == dst:
        return _identity(L, n)
    v = L.val(n.input[0])
    L.emit("CAST", [L.get(n.input[0])], [L.new_out(n.output[0], v.perm)])


_VARIADIC = {"Sum": "ADD", "Mean": "ADD", "Max": "MAXIMUM", "Min": "MINIMUM"}


@lowers("Sum", "Mean")
def _variadic(L, n):
    """Sum / Mean / Max / Min of any number of inputs: a chain of the binary op (Mean: then * 1/k)."""
    ins = [i for i in n.input if i]
    out = n.output[0]
    if len(ins) == 1:
        return _identity(L, n)
    if len(ins) == 2 and n.op_type != "Mean":
        return _binary(L, n)
    rank = len(L.shapes[out])
    perm = _layout_for(L, ins, rank)
    op = _VARIADIC[n.op_type]
    opts = {"fused_activation_function": 0} if op == "ADD" else {}
    acc = _operand(L, ins[0], perm, rank)
    shape = _perm_shape(L.shapes[out], perm)
    for k, nm in enumerate(ins[1:]):
        last = k == len(ins) - 2 and n.op_type != "Mean"
        t = L.new_out(out, perm) if last else L.g.tensor(f"{out}_acc{k}", shape, L.dtype(out))
        L.emit(op, [acc, _operand(L, nm, perm, rank)], [t], **opts)
        acc = t
    if n.op_type == "Mean":
        L.emit("MUL", [acc, scalar(L, 1.0 / len(ins), "inv_count")], [L.new_out(out, perm)],
               fused_activation_function=0)


_COMPARE = {"Equal": "EQUAL", "Less": "LESS", "Greater": "GREATER", "LessOrEqual": "LESS_EQUAL",
            "GreaterOrEqual": "GREATER_EQUAL", "And": "LOGICAL_AND", "Or": "LOGICAL_OR"}


@lowers(*_COMPARE)
def _compare(L, n):
    out = n.output[0]
    rank = len(L.shapes[out])
    perm = _layout_for(L, n.input[:2], rank)
    L.emit(_COMPARE[n.op_type], [_operand(L, n.input[0], perm, rank), _operand(L, n.input[1], perm, rank)],
           [L.new_out(out, perm)])


@lowers("Not")
def _not(L, n):
    _unary(L, n, "LOGICAL_NOT")


@lowers("Where")
def _where(L, n):
    out = n.output[0]
    rank = len(L.shapes[out])
    perm = _layout_for(L, n.input[1:3] + n.input[:1], rank)
    L.emit("SELECT_V2", [_operand(L, i, perm, rank) for i in n.input[:3]], [L.new_out(out, perm)])


@lowers("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow")
def _binary(L, n):
    if n.op_type in ("Max", "Min") and len([i for i in n.input if i]) != 2:
        return _variadic(L, n)
    a, b = n.input[0], n.input[1]
    out = n.output[0]
    rank = len(L.shapes[out])
    # x * HardSigmoid(x) -> HARD_SWISH
    if n.op_type == "Mul":
        for x, hs in ((a, b), (b, a)):
            info = L.hardsigmoid.get(hs)
            if info and info[0] == x and info[1] and L.single_use(hs):
                v = L.val(x)
                L.emit("HARD_SWISH", [L.get(x)], [L.new_out(out, v.perm)])
                return
    if n.op_type == "Pow":
        if L.is_const(b) and np.asarray(L.cval(b)).size == 1 and float(np.asarray(L.cval(b)).reshape(-1)[0]) in (
                1.0, 2.0, 0.5) and L.val(a).rank == rank:
            e = float(np.asarray(L.cval(b)).reshape(-1)[0])
            v = L.val(a)
            x = L.get(a)
            if e == 1.0:
                return _identity(L, n)
            L.emit("MUL" if e == 2.0 else "SQRT", [x, x] if e == 2.0 else [x], [L.new_out(out, v.perm)],
                   **({"fused_activation_function": 0} if e == 2.0 else {}))
            return
        perm = _layout_for(L, [a, b], rank)
        L.emit("POW", [_operand(L, a, perm, rank), _operand(L, b, perm, rank)], [L.new_out(out, perm)])
        return
    perm = _layout_for(L, [a, b], rank)
    # fold per-channel affine constants into a preceding conv / gemm
    if n.op_type in ("Add", "Sum", "Sub", "Mul", "Div") and L.is_const(b) and not L.is_const(a) and L.val(a).rank == rank:
        ch = _channel_const(L, n, L.cval(b), L.val(a).perm, rank)
        if ch is not None:
            mul = add = None
            if n.op_type in ("Add", "Sum"):
                add = ch
            elif n.op_type == "Sub":
                add = -ch
            elif n.op_type == "Mul":
                mul = ch
            elif np.all(ch != 0):
                mul = 1.0 / ch
            if (mul is not None or add is not None) and _fold_affine_into_producer(L, a, mul, add, out):
                return
    op = {"Add": "ADD", "Sum": "ADD", "Sub": "SUB", "Mul": "MUL", "Div": "DIV", "Max": "MAXIMUM",
          "Min": "MINIMUM"}[n.op_type]
    if op == "DIV" and L.is_const(b) and L.dtype(out) == "float32":
        c = np.asarray(L.cval(b), np.float32)
        if np.all(c != 0):
            op = "MUL"
            L.vals[b + "_recip"] = Value(b + "_recip", c.shape, const=(1.0 / c).astype(np.float32))
            b = b + "_recip"
    ta = _operand(L, a, perm, rank)
    tb = _operand(L, b, perm, rank)
    opts = {"fused_activation_function": 0} if op in ("ADD", "SUB", "MUL", "DIV") else {}
    L.emit(op, [ta, tb], [L.new_out(out, perm)], **opts)
