"""ONNX -> float TFLite graph (:class:`edgerun.convert.graph.Graph`).

How it works:

1. **Pin shapes.** Dynamic input dimensions take the values of ``input_shapes``; a dynamic
   batch dimension (axis 0) defaults to 1; any other dynamic dimension is refused with the
   input's name and a ``--input-shape`` suggestion.
2. **Shape inference and constant folding by ONNX Runtime.** The model (with pinned shapes) runs
   once on seeded random data with every node output exposed. That gives the static shape of
   every tensor and the value of every tensor that depends only on constants or on shapes
   (``Shape -> Gather -> Concat -> Reshape`` arithmetic folds to a constant, as do ``Constant``,
   ``ConstantOfShape``, ``Range`` ...). Nothing is downloaded and no op semantics are guessed.
3. **Lowering.** Each remaining node goes through ``LOWERINGS[op_type]``. Every ONNX value is
   tracked with a *layout permutation* ``perm``: its TFLite tensor is ``onnx_value.transpose(perm)``.
   Convolutions want NHWC, so a 4-D activation lives in ``(0, 2, 3, 1)``; elementwise ops,
   pooling and concat work in whatever layout their input has, ONNX ``Transpose`` only relabels
   the permutation, and a layout change is materialized only where an op needs a specific
   layout (then as a RESHAPE when only size-1 axes move, else a TRANSPOSE). A plain CNN thus
   has no TRANSPOSE inside.
4. **Fusion while lowering.** BatchNormalization (and Add/Mul by a per-channel constant) after
   a convolution or Gemm is folded into its weights and bias; Relu / Clip(0, 6) / Clip(-1, 1)
   after an op with a ``fused_activation_function`` is fused into it.
"""

from __future__ import annotations

import numpy as np

from edgerun.convert.graph import FUSABLE, Graph
from edgerun.errors import ConversionError, UnsupportedOpError
from edgerun.schema.tflite import Activation, MirrorPadMode, Padding

NHWC = {3: (0, 2, 1), 4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}


def _ident(r):
    return tuple(range(r))


class Value:
    """An ONNX value during lowering: a constant (ONNX layout) or a TFLite tensor in ``perm``."""

    __slots__ = ("name", "shape", "const", "tensor", "perm", "views")

    def __init__(self, name, shape, const=None, tensor=None, perm=None):
        self.name, self.shape, self.const, self.tensor = name, tuple(int(d) for d in shape), const, tensor
        self.perm = tuple(perm) if perm is not None else _ident(len(self.shape))
        self.views: dict[tuple, int] = {}

    @property
    def rank(self):
        return len(self.shape)


def _perm_shape(shape, perm):
    return tuple(shape[p] for p in perm)


def _same_memory(shape, p_from, p_to) -> bool:
    """True when moving from layout p_from to p_to only moves size-1 axes (a RESHAPE suffices)."""
    a = [p for p in p_from if shape[p] != 1]
    b = [p for p in p_to if shape[p] != 1]
    return a == b


class _Lowering:
    def __init__(self, model, shapes: dict, consts: dict, opset: int, input_layout: str):
        self.model, self.shapes, self.consts, self.opset = model, shapes, consts, opset
        self.g = Graph()
        self.vals: dict[str, Value] = {}
        self.input_layout = input_layout
        self.uses: dict[str, int] = {}
        for n in model.graph.node:
            for i in n.input:
                if i:
                    self.uses[i] = self.uses.get(i, 0) + 1
        self.graph_outputs = {o.name for o in model.graph.output}
        for o in model.graph.output:
            self.uses[o.name] = self.uses.get(o.name, 0) + 1
        self.node = None

    # -- values -----------------------------------------------------------------------------
    def val(self, name) -> Value:
        if name not in self.vals:
            raise ConversionError(f"ONNX value '{name}' is used before it is defined")
        return self.vals[name]

    def is_const(self, name) -> bool:
        return bool(name) and self.vals.get(name) is not None and self.vals[name].const is not None

    def cval(self, name, what="input") -> np.ndarray:
        v = self.vals.get(name)
        if v is None or v.const is None:
            raise self.unsupported(f"its {what} '{name}' must be a constant (or computable from shapes)")
        return v.const

    def out_shape(self, name):
        return self.shapes[name]

    def set_act(self, name, tensor, perm):
        self.vals[name] = Value(name, self.shapes[name], tensor=tensor, perm=perm)
        return self.vals[name]

    def new_out(self, name, perm, dtype="float32"):
        """A fresh TFLite tensor for ONNX output ``name`` in layout ``perm``."""
        t = self.g.tensor(name, _perm_shape(self.shapes[name], perm), dtype)
        self.set_act(name, t, perm)
        return t

    def get(self, name, perm=None) -> int:
        """TFLite tensor holding ``name`` in layout ``perm`` (default: its current layout)."""
        v = self.val(name)
        if perm is None:
            perm = v.perm
        perm = tuple(perm)
        if v.const is not None:
            key = ("c",) + perm
            if key not in v.views:
                v.views[key] = self.g.const(name, np.ascontiguousarray(np.transpose(v.const, perm)))
            return v.views[key]
        if perm == v.perm:
            return v.tensor
        if perm in v.views:
            return v.views[perm]
        shape = _perm_shape(v.shape, perm)
        out = self.g.tensor(f"{name}_{'_'.join(map(str, perm))}", shape)
        if _same_memory(v.shape, v.perm, perm):
            self.g.emit("RESHAPE", [v.tensor, self.g.const(f"{name}_shape", np.array(shape, np.int32))], [out],
                        new_shape=list(shape), origin="layout")
        else:
            rel = [v.perm.index(p) for p in perm]
            self.g.emit("TRANSPOSE", [v.tensor, self.g.const(f"{name}_perm", np.array(rel, np.int32))], [out],
                        origin="layout")
        v.views[perm] = out
        return out

    def unsupported(self, detail):
        n = self.node
        return UnsupportedOpError(f"ONNX {n.op_type}", None,
                                  detail=f"node '{n.name or n.output[0]}' (opset {self.opset}): {detail}")

    def attr(self, node, name, default=None):
        import onnx
        for a in node.attribute:
            if a.name == name:
                return onnx.helper.get_attribute_value(a)
        return default

    def emit(self, op, inputs, outputs, **opts):
        n = self.node
        return self.g.emit(op, inputs, outputs, origin=f"{n.op_type}:{n.name or n.output[0]}", **opts)

    def single_use(self, name) -> bool:
        return self.uses.get(name, 0) == 1 and name not in self.graph_outputs

    def producer(self, tensor):
        for op in reversed(self.g.ops):
            if tensor in op.outputs:
                return op
        return None


# ---------------------------------------------------------------------------------------------
# lowering functions: fn(L, node) -> None; they define node outputs in L.vals
# ---------------------------------------------------------------------------------------------

LOWERINGS: dict = {}


def lowers(*op_types):
    def deco(fn):
        for t in op_types:
            LOWERINGS[t] = fn
        return fn
    return deco


@lowers("Identity", "Dropout")
def _identity(L, n):
    v = L.val(n.input[0])
    if v.const is not None:
        L.vals[n.output[0]] = Value(n.output[0], v.shape, const=v.const)
    else:
        L.vals[n.output[0]] = Value(n.output[0], v.shape, tensor=v.tensor, perm=v.perm)
        L.vals[n.output[0]].views = v.views


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


@lowers("Transpose")
def _transpose(L, n):
    v = L.val(n.input[0])
    q = L.attr(n, "perm") or list(range(v.rank))[::-1]
    qinv = [q.index(i) for i in range(len(q))]
    L.set_act(n.output[0], v.tensor, [qinv[p] for p in v.perm])


def _through_reshape(L, tensor):
    """The op that really computes ``tensor``: its producer, or, when that is a RESHAPE which keeps the
    last (channel) axis and whose input feeds nothing else, the RESHAPE's producer (elementwise
    activations and per-channel affine maps commute with such a reshape)."""
    op = L.producer(tensor)
    if op is None or op.op != "RESHAPE":
        return op
    src = op.inputs[0]
    if L.g.tensors[src].shape[-1:] != L.g.tensors[tensor].shape[-1:] or src in L.g.inputs:
        return op
    if sum(src in o.inputs for o in L.g.ops) != 1 or any(v.tensor == src and v.name in L.graph_outputs
                                                         for v in L.vals.values()):
        return op
    inner = L.producer(src)
    return inner if inner is not None else op


def _fuse_activation(L, n, act) -> bool:
    """Fuse ``act`` into the producer of n.input[0] when that is safe."""
    src = n.input[0]
    v = L.val(src)
    if v.const is not None or not L.single_use(src) or v.views:
        return False
    op = _through_reshape(L, v.tensor)
    if op is None or op.op not in FUSABLE or op.options.get("fused_activation_function", 0) != 0:
        return False
    op.options["fused_activation_function"] = act
    L.g.rename(v.tensor, n.output[0])
    L.set_act(n.output[0], v.tensor, v.perm)
    return True


def _unary(L, n, op, **opts):
    v = L.val(n.input[0])
    x = L.get(n.input[0])
    L.emit(op, [x], [L.new_out(n.output[0], v.perm)], **opts)


@lowers("Relu")
def _relu(L, n):
    if not _fuse_activation(L, n, Activation.RELU):
        _unary(L, n, "RELU")


@lowers("Clip")
def _clip(L, n):
    if L.opset < 11:
        lo, hi = L.attr(n, "min", -np.inf), L.attr(n, "max", np.inf)
    else:
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


@lowers("Sigmoid")
def _sigmoid(L, n):
    _unary(L, n, "LOGISTIC")


@lowers("Tanh")
def _tanh(L, n):
    _unary(L, n, "TANH")


@lowers("HardSwish")
def _hardswish(L, n):
    _unary(L, n, "HARD_SWISH")


@lowers("LeakyRelu")
def _leaky(L, n):
    _unary(L, n, "LEAKY_RELU", alpha=float(L.attr(n, "alpha", 0.01)))


@lowers("Neg")
def _neg(L, n):
    _unary(L, n, "NEG")


@lowers("Abs")
def _abs(L, n):
    _unary(L, n, "ABS")


@lowers("Exp")
def _exp(L, n):
    _unary(L, n, "EXP")


@lowers("Sqrt")
def _sqrt(L, n):
    _unary(L, n, "SQRT")


@lowers("Elu")
def _elu(L, n):
    if float(L.attr(n, "alpha", 1.0)) != 1.0:
        raise L.unsupported("Elu with alpha != 1")
    _unary(L, n, "ELU")


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
    axis = L.attr(n, "axis", 1 if L.opset < 13 else -1) % r
    op = "SOFTMAX" if n.op_type == "Softmax" else "LOG_SOFTMAX"
    opts = {"beta": 1.0} if op == "SOFTMAX" else {}
    if L.opset < 13 and axis != r - 1 and int(np.prod(v.shape[axis + 1:])) != 1:
        # opset < 13 coerces to 2-D at ``axis``
        flat = (int(np.prod(v.shape[:axis])), int(np.prod(v.shape[axis:])))
        x = L.get(n.input[0], _ident(r))
        t = L.g.tensor(n.output[0] + "_2d", flat)
        L.emit("RESHAPE", [x, L.g.const(n.output[0] + "_s2", np.array(flat, np.int32))], [t], new_shape=list(flat))
        t2 = L.g.tensor(n.output[0] + "_sm", flat)
        L.emit(op, [t], [t2], **opts)
        out = L.new_out(n.output[0], _ident(r))
        shp = L.g.tensors[out].shape
        L.emit("RESHAPE", [t2, L.g.const(n.output[0] + "_s", np.array(shp, np.int32))], [out], new_shape=list(shp))
        return
    perm = v.perm if v.perm[-1] == axis else tuple(p for p in v.perm if p != axis) + (axis,)
    x = L.get(n.input[0], perm)
    L.emit(op, [x], [L.new_out(n.output[0], perm)], **opts)


# -- elementwise binary ----------------------------------------------------------------------

def _layout_for(L, names, rank):
    for nm in names:
        v = L.val(nm)
        if v.const is None and v.rank == rank:
            return v.perm
    return _ident(rank)


def _operand(L, name, perm, rank, suffix=""):
    """Tensor for ``name`` broadcast-aligned to ``rank`` and laid out in ``perm``."""
    v = L.val(name)
    if v.const is not None:
        c = np.asarray(v.const)
        c = c.reshape((1,) * (rank - c.ndim) + c.shape)
        if c.size == 1:
            return L.g.const(name + suffix, c.reshape(1).astype(np.float32))
        return L.g.const(name + suffix, np.ascontiguousarray(np.transpose(c, perm)).astype(np.float32))
    if v.rank == rank:
        return L.get(name, perm)
    # lower-rank run-time operand: reshape to rank in ONNX order, then lay out
    shape = (1,) * (rank - v.rank) + v.shape
    x = L.get(name, _ident(v.rank))
    t = L.g.tensor(name + "_bcast", shape)
    L.g.emit("RESHAPE", [x, L.g.const(name + "_bshape", np.array(shape, np.int32))], [t], new_shape=list(shape))
    key = name + "_bcast_v"
    L.vals[key] = Value(key, shape, tensor=t)
    return L.get(key, perm)


def _channel_const(L, n, const, out_perm, rank):
    """A per-channel (axis 1 in ONNX, i.e. last in NHWC) vector if ``const`` broadcasts only along it."""
    c = np.asarray(const, np.float32)
    c = c.reshape((1,) * (rank - c.ndim) + c.shape)
    ch_axis = out_perm[-1]
    if any(c.shape[i] != 1 for i in range(rank) if i != ch_axis):
        return None
    return c.reshape(-1)


def _fold_affine_into_producer(L, src, mul, add, out_name) -> bool:
    """y = producer(x) * mul + add per output channel, folded into the producer's weights/bias."""
    v = L.val(src)
    if v.const is not None or not L.single_use(src) or v.views:
        return False
    op = _through_reshape(L, v.tensor)
    if op is None or op.op not in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"):
        return False
    if op.options.get("fused_activation_function", 0) != 0:
        return False
    if op.op == "FULLY_CONNECTED" and v.perm[-1] != v.rank - 1:
        return False
    if op.op == "CONV_2D" and v.perm[-1] != 1:
        return False
    g = L.g
    w = g.tensors[op.inputs[1]]  # filter / weights: input 1 for all four ops
    nout = w.data.shape[3] if op.op == "DEPTHWISE_CONV_2D" else w.data.shape[0]
    mul = np.broadcast_to(np.asarray(mul, np.float32), (nout,)) if mul is not None else np.ones(nout, np.float32)
    add = np.broadcast_to(np.asarray(add, np.float32), (nout,)) if add is not None else np.zeros(nout, np.float32)
    if op.op == "DEPTHWISE_CONV_2D":
        w.data = (w.data * mul.reshape(1, 1, 1, -1)).astype(np.float32)
    else:
        w.data = (w.data * mul.reshape((-1,) + (1,) * (w.data.ndim - 1))).astype(np.float32)
    bias_pos = 3 if op.op == "TRANSPOSE_CONV" else 2
    while len(op.inputs) <= bias_pos:
        op.inputs.append(-1)
    if op.inputs[bias_pos] >= 0:
        b = g.tensors[op.inputs[bias_pos]]
        b.data = (b.data * mul + add).astype(np.float32)
    else:
        op.inputs[bias_pos] = g.const(out_name + "_bias", add.astype(np.float32))
    g.rename(v.tensor, out_name)
    L.set_act(out_name, v.tensor, v.perm)
    return True


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
    # VALID transpose conv to the full size, then crop what ONNX pads away
    full_shape = (N, full[0], full[1], cout)
    need_crop = (full[0], full[1]) != (oh, ow)
    t = L.g.tensor(out + "_full", full_shape) if need_crop else L.new_out(out, NHWC[4])
    inputs = [L.g.const(out + "_oshape", np.array(full_shape, np.int32)),
              L.g.const(out + "_weights", w.transpose(1, 2, 3, 0)), x]
    inputs.append(L.g.const(out + "_bias", bias if bias is not None else np.zeros(cout, np.float32)))
    L.emit("TRANSPOSE_CONV", inputs, [t], padding=Padding.VALID, stride_w=strides[1], stride_h=strides[0],
           fused_activation_function=0)
    if need_crop:
        auto = L.attr(n, "auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        pads = list(L.attr(n, "pads", [0, 0, 0, 0]))
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            tot = [full[0] - oh, full[1] - ow]
            pads = ([tot[0] - tot[0] // 2, tot[1] - tot[1] // 2] if auto == "SAME_LOWER" else [tot[0] // 2, tot[1] // 2])
        top, left = pads[0], pads[1]
        if top + oh > full[0] or left + ow > full[1]:
            raise L.unsupported("output_padding that extends past the full transposed-convolution output")
        L.emit("SLICE", [t, L.g.const(out + "_begin", np.array([0, top, left, 0], np.int32)),
                         L.g.const(out + "_size", np.array([N, oh, ow, cout], np.int32))],
               [L.new_out(out, NHWC[4])])


@lowers("MaxPool", "AveragePool")
def _pool(L, n):
    if L.val(n.input[0]).rank == 3:
        return _via_2d(L, n, _pool)
    v = _spatial_4d(L, n)
    out = n.output[0]
    if len(n.output) > 1 and n.output[1]:
        raise L.unsupported("MaxPool with an Indices output")
    kernel = list(L.attr(n, "kernel_shape"))
    strides = list(L.attr(n, "strides", [1, 1]))
    dil = list(L.attr(n, "dilations", [1, 1]))
    if dil != [1, 1]:
        raise L.unsupported("dilated pooling")
    in_hw, out_hw = list(v.shape[2:]), list(L.shapes[out][2:])
    pb, pe = _pads(L, n, in_hw, kernel, strides, dil, out_hw)
    # ceil_mode: extend the end padding so that a floor-mode window count gives out_hw
    for i in range(2):
        need = (out_hw[i] - 1) * strides[i] + kernel[i] - (in_hw[i] + pb[i] + pe[i])
        if need > 0:
            pe[i] += need
    is_max = n.op_type == "MaxPool"
    include_pad = bool(L.attr(n, "count_include_pad", 0))
    pad = _tflite_padding(in_hw, kernel, strides, dil, out_hw, pb, pe)
    x = L.get(n.input[0], NHWC[4])
    shape = _perm_shape(v.shape, NHWC[4])
    if pad == Padding.SAME and not is_max and include_pad and any(pb + pe):
        pad = None
    if pad is None:
        if not is_max and not include_pad and any(pb + pe):
            raise L.unsupported("AveragePool with count_include_pad=0 and padding TFLite cannot express")
        x, shape = _explicit_pad(L, x, out, shape, pb, pe, value=-3.0e38 if is_max else 0.0)
        pad = Padding.VALID
    L.emit("MAX_POOL_2D" if is_max else "AVERAGE_POOL_2D", [x], [L.new_out(out, NHWC[4])], padding=pad,
           stride_w=strides[1], stride_h=strides[0], filter_width=kernel[1], filter_height=kernel[0],
           fused_activation_function=0)


@lowers("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(L, n):
    v = L.val(n.input[0])
    perm = v.perm
    axes = [perm.index(a) for a in range(2, v.rank)]
    x = L.get(n.input[0])
    L.emit("MEAN" if n.op_type == "GlobalAveragePool" else "REDUCE_MAX",
           [x, L.g.const(n.output[0] + "_axes", np.array(axes, np.int32))], [L.new_out(n.output[0], perm)],
           keep_dims=True)


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
    w = (B if tb else B.T) * alpha
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
    if ta or tb or alpha != 1.0 or (len(n.input) > 2 and n.input[2]):
        raise L.unsupported("Gemm/MatMul of two run-time values with transposes, alpha or C")
    a, b = L.val(n.input[0]), L.val(n.input[1])
    ra, rb = a.rank, b.rank
    if ra != rb or ra < 2:
        raise L.unsupported("MatMul of run-time values with different ranks")
    ta_ = L.get(n.input[0], _ident(ra))
    tb_ = _operand(L, n.input[1], _ident(rb), rb)
    L.emit("BATCH_MATMUL", [ta_, tb_], [L.new_out(n.output[0], _ident(ra))], adj_x=False, adj_y=False)


@lowers("MatMul")
def _matmul(L, n):
    if L.is_const(n.input[1]) and not L.is_const(n.input[0]) and np.ndim(L.cval(n.input[1])) == 2:
        B = np.asarray(L.cval(n.input[1]), np.float32)
        _fully_connected(L, n, n.input[0], B.T, None, n.output[0])
        return
    _matmul_general(L, n)


# -- shape ops -------------------------------------------------------------------------------

def _fc_consumers_only(L, name) -> bool:
    """True when every consumer of ``name`` is a Gemm / MatMul with constant weights taking it as A."""
    users = [nd for nd in L.model.graph.node if name in nd.input]
    if not users or name in L.graph_outputs:
        return False
    for nd in users:
        if nd.op_type not in ("Gemm", "MatMul") or list(nd.input).index(name) != 0:
            return False
        if len(nd.input) < 2 or not L.is_const(nd.input[1]) or np.ndim(L.cval(nd.input[1])) != 2:
            return False
        if nd.op_type == "Gemm" and L.attr(nd, "transA", 0):
            return False
    return True


def _reshape_to(L, n, src, out):
    """RESHAPE ``src`` to ONNX shape of ``out`` (row-major, so ONNX layout, unless only 1s move).

    A flatten of an NHWC activation that feeds only fully-connected layers skips the TRANSPOSE:
    it flattens in NHWC order and the FC weight columns are permuted to match (``L.colperm``).
    """
    v = L.val(src)
    shape = L.shapes[out]
    if (len(shape) == 2 and not _same_memory(v.shape, v.perm, _ident(v.rank)) and v.const is None
            and shape[0] == v.shape[0] and v.perm[0] == 0 and _fc_consumers_only(L, out)):
        idx = np.arange(int(np.prod(v.shape[1:]))).reshape(v.shape[1:])
        onnx_idx = np.transpose(idx, [p - 1 for p in v.perm[1:]]).reshape(-1)
        L.emit("RESHAPE", [v.tensor, L.g.const(out + "_shape", np.array(shape, np.int32))],
               [L.new_out(out, _ident(2))], new_shape=list(shape))
        L.colperm[out] = onnx_idx
        return
    # a layout whose non-1 axes are in ONNX order reshapes as if it were the ONNX layout
    x = L.get(src, v.perm if _same_memory(v.shape, v.perm, _ident(v.rank)) else _ident(v.rank))
    L.emit("RESHAPE", [x, L.g.const(out + "_shape", np.array(shape, np.int32))],
           [L.new_out(out, _ident(len(shape)))], new_shape=list(shape))


@lowers("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(L, n):
    _reshape_to(L, n, n.input[0], n.output[0])


@lowers("Concat")
def _concat(L, n):
    out = n.output[0]
    rank = len(L.shapes[out])
    axis = int(L.attr(n, "axis")) % rank
    names = [i for i in n.input if i and int(np.prod(L.val(i).shape)) > 0]
    perm = _layout_for(L, names, rank)
    ins = [_operand(L, i, perm, rank) if L.is_const(i) else L.get(i, perm) for i in names]
    for i, name in zip(range(len(ins)), names):  # constants keep their full shape here
        if L.is_const(name):
            ins[i] = L.g.const(name + "_cat", np.ascontiguousarray(np.transpose(np.asarray(L.cval(name), np.float32),
                                                                                 perm)))
    L.emit("CONCATENATION", ins, [L.new_out(out, perm)], axis=perm.index(axis), fused_activation_function=0)


@lowers("Slice")
def _slice(L, n):
    v = L.val(n.input[0])
    r = v.rank
    if L.opset < 10:
        starts, ends = L.attr(n, "starts"), L.attr(n, "ends")
        axes = L.attr(n, "axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = L.cval(n.input[1], "starts").tolist()
        ends = L.cval(n.input[2], "ends").tolist()
        axes = L.cval(n.input[3], "axes").tolist() if len(n.input) > 3 and n.input[3] else list(range(len(starts)))
        steps = L.cval(n.input[4], "steps").tolist() if len(n.input) > 4 and n.input[4] else [1] * len(starts)
    begin, end, stride = [0] * r, list(v.shape), [1] * r
    end_mask = 0
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= r
        dim = v.shape[a]
        b0, e0, st0 = slice(int(max(min(s, 2 ** 62), -2 ** 62)), int(max(min(e, 2 ** 62), -2 ** 62)), int(st)).indices(dim)
        begin[a], end[a], stride[a] = b0, e0, st0
        if e0 < 0:
            end_mask |= 1 << v.perm.index(a)
    perm = v.perm
    x = L.get(n.input[0])
    out = n.output[0]
    L.emit("STRIDED_SLICE", [x, L.g.const(out + "_begin", np.array([begin[p] for p in perm], np.int32)),
                             L.g.const(out + "_end", np.array([end[p] for p in perm], np.int32)),
                             L.g.const(out + "_strides", np.array([stride[p] for p in perm], np.int32))],
           [L.new_out(out, perm)], begin_mask=0, end_mask=end_mask, ellipsis_mask=0, new_axis_mask=0,
           shrink_axis_mask=0)


@lowers("Split")
def _split(L, n):
    v = L.val(n.input[0])
    axis = int(L.attr(n, "axis", 0)) % v.rank
    sizes = [L.shapes[o][axis] for o in n.output]
    perm = v.perm
    x = L.get(n.input[0])
    outs = [L.new_out(o, perm) for o in n.output]
    ta = perm.index(axis)
    if len(set(sizes)) == 1:
        L.emit("SPLIT", [L.g.const(n.output[0] + "_axis", np.array(ta, np.int32)), x], outs, num_splits=len(outs))
    else:
        L.emit("SPLIT_V", [x, L.g.const(n.output[0] + "_sizes", np.array(sizes, np.int32)),
                           L.g.const(n.output[0] + "_axis", np.array(ta, np.int32))], outs, num_splits=len(outs))


@lowers("Pad")
def _pad(L, n):
    v = L.val(n.input[0])
    r = v.rank
    mode = L.attr(n, "mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if L.opset < 11:
        pads, value = list(L.attr(n, "pads")), float(L.attr(n, "value", 0.0))
        axes = list(range(r))
    else:
        pads = L.cval(n.input[1], "pads").tolist()
        value = float(np.asarray(L.cval(n.input[2], "constant_value")).reshape(-1)[0]) \
            if len(n.input) > 2 and n.input[2] else 0.0
        axes = L.cval(n.input[3], "axes").tolist() if len(n.input) > 3 and n.input[3] else list(range(r))
    k = len(axes)
    full = [[0, 0] for _ in range(r)]
    for i, a in enumerate(axes):
        full[a % r] = [int(pads[i]), int(pads[i + k])]
    if any(p < 0 for pr in full for p in pr):
        raise L.unsupported("negative pads")
    perm = v.perm
    tp = np.array([full[p] for p in perm], np.int32)
    x = L.get(n.input[0])
    out = n.output[0]
    if mode == "constant":
        if value == 0.0:
            L.emit("PAD", [x, L.g.const(out + "_pads", tp)], [L.new_out(out, perm)])
        else:
            L.emit("PADV2", [x, L.g.const(out + "_pads", tp), L.g.const(out + "_value", np.array([value], np.float32))],
                   [L.new_out(out, perm)])
    elif mode == "reflect":
        L.emit("MIRROR_PAD", [x, L.g.const(out + "_pads", tp)], [L.new_out(out, perm)], mode=MirrorPadMode.REFLECT)
    else:
        raise L.unsupported(f"Pad mode '{mode}'")


@lowers("Resize", "Upsample")
def _resize(L, n):
    v = _spatial_4d(L, n)
    out = n.output[0]
    oshape = L.shapes[out]
    if oshape[:2] != v.shape[:2]:
        raise L.unsupported("Resize of the batch or channel axis")
    mode = L.attr(n, "mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if n.op_type == "Upsample" or L.opset < 11:
        ctm, nearest = "asymmetric", "floor"
    else:
        ctm = L.attr(n, "coordinate_transformation_mode", b"half_pixel")
        ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
        nearest = L.attr(n, "nearest_mode", b"round_prefer_floor")
        nearest = nearest.decode() if isinstance(nearest, bytes) else nearest
    if ctm == "pytorch_half_pixel" and min(oshape[2:]) > 1:
        ctm = "half_pixel"
    x = L.get(n.input[0], NHWC[4])
    size = L.g.const(out + "_size", np.array(oshape[2:], np.int32))
    if mode in ("linear", "bilinear"):
        if ctm not in ("half_pixel", "align_corners", "asymmetric"):
            raise L.unsupported(f"linear Resize with coordinate_transformation_mode '{ctm}'")
        L.emit("RESIZE_BILINEAR", [x, size], [L.new_out(out, NHWC[4])], align_corners=ctm == "align_corners",
               half_pixel_centers=ctm == "half_pixel")
    elif mode == "nearest":
        ok = {("asymmetric", "floor"): (False, False), ("align_corners", "round_prefer_ceil"): (True, False),
              ("half_pixel", "round_prefer_ceil"): (False, True),
              ("tf_half_pixel_for_nn", "round_prefer_ceil"): (False, True)}
        integer_up = all(o % i == 0 for o, i in zip(oshape[2:], v.shape[2:]))
        if integer_up and ctm in ("half_pixel", "pytorch_half_pixel") and nearest.startswith("round"):
            # x_in = (x + 0.5) / s - 0.5 stays within 0.5 of floor(x / s): the same as asymmetric floor
            ctm, nearest = "asymmetric", "floor"
        if (ctm, nearest) not in ok and not (integer_up and ctm == "asymmetric"):
            raise L.unsupported(f"nearest Resize with coordinate_transformation_mode '{ctm}' and "
                                f"nearest_mode '{nearest}'")
        ac, hp = ok.get((ctm, nearest), (False, False))
        L.emit("RESIZE_NEAREST_NEIGHBOR", [x, size], [L.new_out(out, NHWC[4])], align_corners=ac,
               half_pixel_centers=hp)
    else:
        raise L.unsupported(f"Resize mode '{mode}'")


@lowers("DepthToSpace", "SpaceToDepth")
def _d2s(L, n):
    _spatial_4d(L, n)
    bs = int(L.attr(n, "blocksize"))
    if n.op_type == "DepthToSpace" and (L.attr(n, "mode", b"DCR") in (b"CRD", "CRD")):
        raise L.unsupported("DepthToSpace mode CRD")
    x = L.get(n.input[0], NHWC[4])
    L.emit("DEPTH_TO_SPACE" if n.op_type == "DepthToSpace" else "SPACE_TO_DEPTH", [x],
           [L.new_out(n.output[0], NHWC[4])], block_size=bs)


@lowers("Gather")
def _gather(L, n):
    v = L.val(n.input[0])
    idx = np.asarray(L.cval(n.input[1], "indices")).astype(np.int64)
    axis = int(L.attr(n, "axis", 0)) % v.rank
    idx = np.where(idx < 0, idx + v.shape[axis], idx)
    x = L.get(n.input[0], _ident(v.rank))
    out = n.output[0]
    L.emit("GATHER", [x, L.g.const(out + "_indices", idx.astype(np.int32))],
           [L.new_out(out, _ident(len(L.shapes[out])))], axis=axis, batch_dims=0)


# ---------------------------------------------------------------------------------------------

#: ops whose outputs are constant when their inputs' *shapes* are known
_SHAPE_ONLY = {"Shape", "Size"}
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}


def parse_input_shapes(spec) -> dict:
    """``"x:1,3,224,224;y:1,10"`` or ``"1,3,224,224"`` or a dict -> {name or "": shape}."""
    if not spec:
        return {}
    if isinstance(spec, dict):
        return {k: tuple(int(d) for d in v) for k, v in spec.items()}
    out = {}
    for part in str(spec).split(";"):
        part = part.strip()
        if not part:
            continue
        name, _, dims = part.rpartition(":")
        try:
            out[name] = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            raise ConversionError(f"--input-shape '{part}': expected NAME:D0,D1,... (integers)") from None
    return out


def load_onnx(path_or_bytes):
    import onnx
    try:
        if isinstance(path_or_bytes, (bytes, bytearray)):
            return onnx.load_from_string(bytes(path_or_bytes))
        return onnx.load(str(path_or_bytes))
    except Exception as e:  # protobuf decode errors have no common base class
        from edgerun.errors import ModelFormatError
        raise ModelFormatError(f"cannot read ONNX model {path_or_bytes if isinstance(path_or_bytes, str) else ''}: {e}") \
            from None


def pin_shapes(model, input_shapes: dict | None = None) -> dict[str, tuple]:
    """Concrete shapes of the model's real inputs (not initializers); raises on what cannot be pinned."""
    input_shapes = dict(input_shapes or {})
    inits = {i.name for i in model.graph.initializer}
    real = [i for i in model.graph.input if i.name not in inits]
    if "" in input_shapes:
        if len(real) != 1:
            raise ConversionError("--input-shape without a name needs a model with one input; this one has "
                                  f"{len(real)}: {', '.join(i.name for i in real)} (use NAME:D0,D1,...)")
        input_shapes[real[0].name] = input_shapes.pop("")
    unknown = set(input_shapes) - {i.name for i in real}
    if unknown:
        raise ConversionError(f"--input-shape names {', '.join(sorted(unknown))}, but the model's inputs are "
                              f"{', '.join(i.name for i in real)}")
    out = {}
    for inp in real:
        tt = inp.type.tensor_type
        if inp.name in input_shapes:
            shape = input_shapes[inp.name]
            if tt.HasField("shape") and len(tt.shape.dim) != len(shape):
                raise ConversionError(f"--input-shape gives {len(shape)} dims for input '{inp.name}', "
                                      f"which has {len(tt.shape.dim)}")
            out[inp.name] = tuple(shape)
            continue
        if not tt.HasField("shape"):
            raise ConversionError(f"input '{inp.name}' has no shape (rank unknown); pin it with "
                                  f"--input-shape {inp.name}:D0,D1,...")
        dims = []
        for ax, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif ax == 0:
                dims.append(1)  # dynamic batch: convert for batch 1, as TFLite models are
            else:
                sym = d.dim_param or "?"
                raise ConversionError(
                    f"input '{inp.name}' has a dynamic dimension {ax} ('{sym}') that the converter cannot pin; "
                    f"give it with --input-shape {inp.name}:"
                    + ",".join(str(x.dim_value) if x.dim_value > 0 else ("1" if i == 0 else "N")
                               for i, x in enumerate(tt.shape.dim)))
        out[inp.name] = tuple(dims)
    return out


def _onnx_dtype(elem_type):
    import onnx
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def session(model, providers=("CPUExecutionProvider",), optimize=True):
    """An ONNX Runtime session over ``model`` (a ModelProto)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    m = model
    if m.ir_version > 10:
        import copy
        m = copy.deepcopy(model)
        m.ir_version = 10
    try:
        return ort.InferenceSession(m.SerializeToString(), so, providers=list(providers))
    except Exception as e:
        raise ConversionError(f"ONNX Runtime cannot load the model: {str(e).splitlines()[0][:300]}") from None


def with_fixed_inputs(model, shapes: dict):
    """A copy of ``model`` with the given concrete input shapes."""
    import copy
    m = copy.deepcopy(model)
    for inp in m.graph.input:
        if inp.name in shapes:
            tt = inp.type.tensor_type
            del tt.shape.dim[:]
            for d in shapes[inp.name]:
                tt.shape.dim.add().dim_value = int(d)
    return m


def probe(model, shapes: dict, seed: int = 0):
    """Run ``model`` once with every node output exposed: {name: array}."""
    import onnx
    m = with_fixed_inputs(model, shapes)
    known = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for o in node.output:
            if o and o not in known:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
                known.add(o)
    sess = session(m, optimize=False)
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in sess.get_inputs():
        dt = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}.get(inp.type)
        if dt is None:
            raise ConversionError(f"input '{inp.name}' has type {inp.type}; the converter takes float inputs")
        if inp.name not in shapes:
            continue
        feeds[inp.name] = rng.standard_normal(shapes[inp.name]).astype(dt) if dt != np.bool_ else \
            np.zeros(shapes[inp.name], bool)
    try:
        outs = sess.run(None, feeds)
    except Exception as e:
        raise ConversionError(f"ONNX Runtime cannot run the model with input shapes "
                              f"{ {k: list(v) for k, v in shapes.items()} }: {str(e).splitlines()[0][:300]}") from None
    return {o.name: a for o, a in zip(sess.get_outputs(), outs)}


def fold_constant_dequantize(model):
    """A copy of ``model`` whose DequantizeLinear nodes on constants are replaced by float initializers.

    QDQ models written for opset 11 / 12 often carry per-channel weights as DequantizeLinear with an
    ``axis`` attribute, which only opset 13 defines (ONNX Runtime refuses them); the arithmetic,
    ``(x - zero_point) * scale`` along ``axis``, is done here instead. Returns ``model`` itself when
    there is nothing to fold.
    """
    import copy

    from onnx import numpy_helper
    inits = {i.name: i for i in model.graph.initializer}
    todo = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input
            and all((not i) or i in inits for i in n.input)]
    if not todo:
        return model
    m = copy.deepcopy(model)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    keep = []
    new_inits = []
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.input and all((not i) or i in inits for i in n.input):
            x = inits[n.input[0]].astype(np.float64)
            scale = inits[n.input[1]].astype(np.float64)
            zp = inits[n.input[2]].astype(np.float64) if len(n.input) > 2 and n.input[2] else np.zeros_like(scale)
            axis = 1
            for a in n.attribute:
                if a.name == "axis":
                    axis = a.i
            if scale.size > 1:
                shp = [1] * x.ndim
                shp[axis % x.ndim] = -1
                scale, zp = scale.reshape(shp), zp.reshape(shp)
            y = ((x - zp) * scale).astype(np.float32)
            new_inits.append(numpy_helper.from_array(y, n.output[0]))
            continue
        keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.graph.initializer.extend(new_inits)
    return m


def onnx_to_graph(model, input_shapes=None, input_layout: str = "NHWC") -> tuple[Graph, dict]:
    """Lower an ONNX ModelProto to a float :class:`Graph`.

    Returns the graph and an ``io`` dict: ``{"inputs": [(onnx_name, perm)], "outputs": [...],
    "input_shapes": {...}}``, where a TFLite tensor equals ``onnx_value.transpose(perm)``.
    """
    import onnx
    from onnx import numpy_helper

    opset = 13
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            opset = int(imp.version)
    if opset < 7 or opset > 23:
        raise ConversionError(f"ONNX opset {opset} is outside the supported range 7-23 (opsets 11 to 21 are tested)")
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise UnsupportedOpError(f"ONNX {node.domain}.{node.op_type}", None,
                                     detail=f"node '{node.name or node.output[0]}' (opset {opset}): custom-domain "
                                            "ops are not supported")
        if node.op_type not in LOWERINGS and node.op_type not in ("Constant", "ConstantOfShape", "Shape", "Size"):
            # it may still fold to a constant; checked below
            pass
    pinned = pin_shapes(model, input_shapes)
    values = probe(model, pinned)
    shapes = {k: tuple(v.shape) for k, v in values.items()}
    consts: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for name, shp in pinned.items():
        shapes[name] = shp

    L = _Lowering(model, shapes, consts, opset, input_layout)
    L.hardsigmoid = {}
    L.colperm = {}
    for name, arr in consts.items():
        L.vals[name] = Value(name, arr.shape, const=arr)
        shapes.setdefault(name, arr.shape)
    io = {"inputs": [], "outputs": [], "input_shapes": pinned, "opset": opset}
    for inp in model.graph.input:
        if inp.name not in pinned:
            continue
        shp = pinned[inp.name]
        perm = NHWC[4] if (len(shp) == 4 and input_layout.upper() == "NHWC") else _ident(len(shp))
        users = [nd for nd in model.graph.node if inp.name in nd.input]
        if len(shp) == 4 and users and all(nd.op_type == "Transpose" and list(L.attr(nd, "perm") or []) == [0, 3, 1, 2]
                                           for nd in users):
            perm = _ident(4)  # already NHWC (tf2onnx): its Transpose to NCHW becomes a relabelling
            io.setdefault("nhwc_inputs", []).append(inp.name)
        elem = inp.type.tensor_type.elem_type
        if elem != onnx.TensorProto.FLOAT:
            raise ConversionError(f"input '{inp.name}' is {onnx.TensorProto.DataType.Name(elem)}; the converter "
                                  "takes float32 model inputs")
        t = L.g.tensor(inp.name, _perm_shape(shp, perm))
        L.g.inputs.append(t)
        L.vals[inp.name] = Value(inp.name, shp, tensor=t, perm=perm)
        io["inputs"].append((inp.name, perm))

    for node in model.graph.node:
        L.node = node
        ins = [i for i in node.input if i]
        foldable = node.op_type not in _NEVER_FOLD and (
            node.op_type in _SHAPE_ONLY or node.op_type in ("Constant",)
            or (ins and all(L.is_const(i) for i in ins)))
        if foldable and all(o in values for o in node.output if o):
            for o in node.output:
                if o:
                    L.vals[o] = Value(o, values[o].shape, const=values[o])
            continue
        fn = LOWERINGS.get(node.op_type)
        if fn is None:
            raise L.unsupported("no lowering for this op; supported: " + ", ".join(sorted(LOWERINGS)))
        fn(L, node)
        for o in node.output:
            if o and o not in L.vals:
                raise L.unsupported(f"output '{o}' was not produced")

    for out in model.graph.output:
        v = L.vals.get(out.name)
        if v is None:
            raise ConversionError(f"graph output '{out.name}' is never produced")
        if v.const is not None:
            raise ConversionError(f"graph output '{out.name}' is a constant; nothing to convert")
        keep = v.rank == 4 and v.perm == NHWC[4] and input_layout.upper() == "NHWC"
        perm = v.perm if keep else _ident(v.rank)
        t = L.get(out.name, perm)
        if t in L.g.outputs or t in L.g.inputs:
            t2 = L.g.tensor(out.name + "_out", L.g.tensors[t].shape)
            L.g.emit("RESHAPE", [t, L.g.const(out.name + "_oshape", np.array(L.g.tensors[t].shape, np.int32))], [t2],
                     new_shape=list(L.g.tensors[t].shape))
            t = t2
        L.g.rename(t, out.name)
        L.g.outputs.append(t)
        io["outputs"].append((out.name, perm))
    L.g.prune()
    _collapse_reshapes(L.g)
    _check_float(L.g)
    return L.g, io


def _collapse_reshapes(g: Graph) -> None:
    """RESHAPE(RESHAPE(x)) -> RESHAPE(x) when the middle tensor feeds nothing else; drop RESHAPEs to
    the shape they already have (unless they produce a graph output)."""
    changed = True
    while changed:
        changed = False
        prod = g.producers()
        cons = g.consumers()
        for op in g.ops:
            if op.op != "RESHAPE":
                continue
            src = op.inputs[0]
            p = prod.get(src)
            if p is not None and g.ops[p].op == "RESHAPE" and len(cons.get(src, [])) == 1 and src not in g.outputs:
                op.inputs[0] = g.ops[p].inputs[0]
                changed = True
                break
            out = op.outputs[0]
            if g.tensors[src].shape == g.tensors[out].shape and out not in g.outputs and src not in g.inputs:
                g.replace_uses(out, src)
                g.ops.remove(op)
                changed = True
                break
        g.prune()


def _check_float(g: Graph) -> None:
    for op in g.ops:
        for i in op.inputs:
            if i >= 0 and g.tensors[i].data is not None and g.tensors[i].data.dtype == np.float64:
                g.tensors[i].data = g.tensors[i].data.astype(np.float32)
