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

Op families live in sibling modules (``conv``, ``pool``, ``shape`` ...), each registering with
``@lowers``; the loading steps (1, 2) live in :mod:`edgerun.convert.onnx.load`.
"""

from __future__ import annotations

import numpy as np

from edgerun.convert.graph import FUSABLE, Graph, expand_nearest_upsampling
from edgerun.convert.onnx.load import default_opset, pin_shapes, probe, upgrade
from edgerun.errors import ConversionError, UnsupportedOpError


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


def tflite_dtype(np_dtype) -> str:
    k = np.dtype(np_dtype)
    if k == np.bool_:
        return "bool"
    if k.kind in "iu":
        return "int32"
    return "float32"


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

    def dtype(self, name) -> str:
        """The TFLite dtype that carries ONNX value ``name``: float32 for every float type, int32 for
        every integer type (TFLite kernels compute indices and integer arithmetic in int32), bool."""
        return tflite_dtype(self.dtypes.get(name, np.float32))

    def new_out(self, name, perm, dtype=None):
        """A fresh TFLite tensor for ONNX output ``name`` in layout ``perm``."""
        t = self.g.tensor(name, _perm_shape(self.shapes[name], perm), dtype or self.dtype(name))
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
        out = self.g.tensor(f"{name}_{'_'.join(map(str, perm))}", shape, self.g.tensors[v.tensor].dtype)
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
    # LiteRT's CONCATENATION refuses a fused activation at prepare ("params->activation != kTfLiteActNone")
    if (op is None or op.op not in FUSABLE or op.op == "CONCATENATION"
            or op.options.get("fused_activation_function", 0) != 0):
        return False
    op.options["fused_activation_function"] = act
    L.g.rename(v.tensor, n.output[0])
    L.set_act(n.output[0], v.tensor, v.perm)
    return True


def tmp(L, op, inputs, like, suffix, shape=None, dtype=None, **opts) -> int:
    """Emit ``op`` into a fresh intermediate tensor shaped like tensor ``like`` (or ``shape``)."""
    t = L.g.tensor(f"{L.node.output[0]}_{suffix}", L.g.tensors[like].shape if shape is None else shape,
                   dtype or L.g.tensors[like].dtype)
    L.emit(op, inputs, [t], **opts)
    return t


def scalar(L, value, suffix, dtype="float32") -> int:
    """A one-element constant (broadcast by every elementwise TFLite op)."""
    return L.g.const(f"{L.node.output[0]}_{suffix}", np.array([value], dtype))


def _unary(L, n, op, **opts):
    v = L.val(n.input[0])
    x = L.get(n.input[0])
    L.emit(op, [x], [L.new_out(n.output[0], v.perm)], **opts)

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
        dt = tflite_dtype(c.dtype)
        if c.size == 1:
            return L.g.const(name + suffix, c.reshape(1).astype(dt))
        return L.g.const(name + suffix, np.ascontiguousarray(np.transpose(c, perm)).astype(dt))
    if v.rank == rank:
        return L.get(name, perm)
    # lower-rank run-time operand: reshape to rank in ONNX order, then lay out
    shape = (1,) * (rank - v.rank) + v.shape
    x = L.get(name, _ident(v.rank))
    t = L.g.tensor(name + "_bcast", shape, L.g.tensors[x].dtype)
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

# ---------------------------------------------------------------------------------------------

#: ONNX input element types taken (cast at the boundary to float32 / int32 / bool)
_INPUT_TYPES = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16}  # FLOAT..INT64, BOOL, FLOAT16, DOUBLE, UINT32/64, BF16

#: ops whose outputs are constant when their inputs' *shapes* are known
_SHAPE_ONLY = {"Shape", "Size"}
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}

def onnx_to_graph(model, input_shapes=None, input_layout: str = "NHWC") -> tuple[Graph, dict]:
    """Lower an ONNX ModelProto to a float :class:`Graph`.

    Returns the graph and an ``io`` dict: ``{"inputs": [(onnx_name, perm)], "outputs": [...],
    "input_shapes": {...}, "dtypes": {input: ONNX numpy dtype}, "notes": [...], "model": the model at
    the opset it was lowered from (upgraded)}``, where a TFLite tensor equals ``onnx_value.transpose(perm)``.
    """
    import onnx
    from onnx import numpy_helper

    model, notes = upgrade(model)
    opset = default_opset(model)
    _refuse_shape_inputs(model, opset)
    pinned = pin_shapes(model, input_shapes)
    values = probe(model, pinned)
    for node in model.graph.node:
        for o in node.output:
            if o in values and not isinstance(values[o], np.ndarray):
                raise UnsupportedOpError(f"ONNX {node.op_type}", None,
                                         detail=f"node '{node.name or o}' (opset {opset}): its output '{o}' is a "
                                                "sequence or map; TFLite has tensors only (unroll the sequence "
                                                "in the exporting code)")
    shapes = {k: tuple(v.shape) for k, v in values.items()}
    consts: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for name, shp in pinned.items():
        shapes[name] = shp

    L = _Lowering(model, shapes, consts, opset, input_layout)
    L.dtypes = {k: v.dtype for k, v in values.items()}
    L.dtypes.update({k: v.dtype for k, v in consts.items()})
    L.hardsigmoid = {}
    L.colperm = {}
    for name, arr in consts.items():
        L.vals[name] = Value(name, arr.shape, const=arr)
        shapes.setdefault(name, arr.shape)
    io = {"inputs": [], "outputs": [], "input_shapes": pinned, "opset": opset, "notes": notes, "model": model,
          "dtypes": {}}
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
        ename = onnx.TensorProto.DataType.Name(elem)
        if elem not in _INPUT_TYPES:
            raise ConversionError(f"input '{inp.name}' is {ename}; the converter takes float, integer or bool "
                                  "model inputs")
        L.dtypes[inp.name] = io["dtypes"][inp.name] = onnx.helper.tensor_dtype_to_np_dtype(elem)
        dt = L.dtype(inp.name)
        if elem not in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT32, onnx.TensorProto.BOOL):
            notes.append(f"input '{inp.name}' is {ename} in the ONNX model; the TFLite model takes {dt} "
                         "(cast at the boundary)")
        t = L.g.tensor(inp.name, _perm_shape(shp, perm), dt)
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
    expand_nearest_upsampling(L.g)  # XNNPACK has no RESIZE_NEAREST_NEIGHBOR; concat + reshape it is
    _check_float(L.g)
    return L.g, io


#: (op, input position) pairs whose value is a shape, size or index bound: static in TFLite
_SHAPE_OPERANDS = {("Reshape", 1), ("Expand", 1), ("Tile", 1), ("ConstantOfShape", 0), ("Range", 0), ("Range", 1),
                   ("Range", 2), ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4), ("Resize", 1),
                   ("Resize", 2), ("Resize", 3), ("Upsample", 1), ("TopK", 1), ("Pad", 1), ("Split", 1),
                   ("Squeeze", 1), ("Unsqueeze", 1), ("OneHot", 1), ("SplitToSequence", 1)}


def _refuse_shape_inputs(model, opset) -> None:
    """A model input that is used as a shape (Reshape's shape, Expand's shape ...) would make the TFLite
    model's shapes depend on run-time data; say so instead of failing somewhere later."""
    from edgerun.convert.onnx.load import real_inputs
    names = {i.name for i in real_inputs(model)}
    for node in model.graph.node:
        for pos, name in enumerate(node.input):
            if name in names and (node.op_type, pos) in _SHAPE_OPERANDS:
                raise UnsupportedOpError(f"ONNX {node.op_type}", None,
                                         detail=f"node '{node.name or node.output[0]}' (opset {opset}): its input "
                                                f"{pos} is the model input '{name}', a shape given at run time; "
                                                "TFLite shapes are static: make it a constant in the model")


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
