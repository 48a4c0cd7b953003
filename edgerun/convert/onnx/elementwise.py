"""Elementwise lowerings: binary arithmetic, QDQ pairs, Cast."""

from __future__ import annotations

import numpy as np

from edgerun.schema.tflite import Activation
from edgerun.convert.onnx.lowering import Value, _channel_const, _fold_affine_into_producer, _fuse_activation, _layout_for, _operand, _unary, lowers
from edgerun.convert.onnx.shape import _identity

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


@lowers("Cast")
def _cast(L, n):
    import onnx
    to = L.attr(n, "to")
    if to not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16):
        raise L.unsupported(f"Cast to {onnx.TensorProto.DataType.Name(to)} of a run-time value")
    _identity(L, n)


@lowers("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow")
def _binary(L, n):
    a, b = n.input[0], n.input[1]
    out = n.output[0]
    rank = len(L.shapes[out])
    if n.op_type in ("Max", "Min") and len(n.input) != 2:
        raise L.unsupported(f"{n.op_type} with {len(n.input)} inputs")
    # x * HardSigmoid(x) -> HARD_SWISH
    if n.op_type == "Mul":
        for x, hs in ((a, b), (b, a)):
            info = L.hardsigmoid.get(hs)
            if info and info[0] == x and info[1] and L.single_use(hs):
                v = L.val(x)
                L.emit("HARD_SWISH", [L.get(x)], [L.new_out(out, v.perm)])
                return
    if n.op_type == "Pow":
        if not L.is_const(b) or float(np.asarray(L.cval(b)).reshape(-1)[0]) != 2.0 or np.asarray(L.cval(b)).size != 1:
            raise L.unsupported("Pow is supported only with a constant exponent of 2")
        v = L.val(a)
        x = L.get(a)
        L.emit("MUL", [x, x], [L.new_out(out, v.perm)], fused_activation_function=0)
        return
    perm = _layout_for(L, [a, b], rank)
    # fold per-channel affine constants into a preceding conv / gemm
    if n.op_type in ("Add", "Sub", "Mul", "Div") and L.is_const(b) and not L.is_const(a) and L.val(a).rank == rank:
        ch = _channel_const(L, n, L.cval(b), L.val(a).perm, rank)
        if ch is not None:
            mul = add = None
            if n.op_type == "Add":
                add = ch
            elif n.op_type == "Sub":
                add = -ch
            elif n.op_type == "Mul":
                mul = ch
            elif np.all(ch != 0):
                mul = 1.0 / ch
            if (mul is not None or add is not None) and _fold_affine_into_producer(L, a, mul, add, out):
                return
    op = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL", "Div": "DIV", "Max": "MAXIMUM", "Min": "MINIMUM"}[n.op_type]
    if op == "DIV" and L.is_const(b):
        c = np.asarray(L.cval(b), np.float32)
        if np.all(c != 0):
            op = "MUL"
            L.vals[b + "_recip"] = Value(b + "_recip", c.shape, const=(1.0 / c).astype(np.float32))
            b = b + "_recip"
    ta = _operand(L, a, perm, rank)
    tb = _operand(L, b, perm, rank)
    opts = {"fused_activation_function": 0} if op in ("ADD", "SUB", "MUL", "DIV") else {}
    L.emit(op, [ta, tb], [L.new_out(out, perm)], **opts)
