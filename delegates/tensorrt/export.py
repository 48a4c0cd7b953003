"""Export a TFLite int8 graph (or a partition of it) as ONNX with explicit Q/DQ.

The form TensorRT 8.x/10 builds INT8 engines from ("explicit quantization"): every quantized
activation is a QuantizeLinear -> DequantizeLinear pair carrying the TFLite scale and zero
point; constant int8 weights are initializers behind a DequantizeLinear with per-output-channel
scales (``axis`` = the output-channel axis after layout conversion); int32 biases likewise with
scale = input scale x weight scale. Ops compute on the dequantized real values, so the graph
means exactly what the TFLite int8 spec says: ``real = scale * (q - zero_point)``.

Layout: TFLite is NHWC, ONNX Conv/Pool are NCHW. Each spatial op is wrapped in
Transpose(0,3,1,2) ... Transpose(0,2,3,1); TensorRT folds these transposes into its layout
choice. Inputs and outputs are float32 real values (a QuantizeLinear right after each input);
the caller dequantizes/quantizes at the edge, which round-trips int8 values exactly.

Rounding: TFLite requantizes with a fixed-point multiplier, rounding half away from zero;
QuantizeLinear rounds half to even on a float product. Results therefore agree within 1 LSB.
"""

from __future__ import annotations

import numpy as np

from edgerun.ir import Model
from edgerun.schema.tflite import Activation, Padding

OPSET = 17


class _Export:
    def __init__(self, model: Model, graph, shapes, known):
        from onnx import helper, numpy_helper

        self.h, self.nh = helper, numpy_helper
        self.model, self.g = model, graph
        self.shapes = shapes if shapes is not None else [tuple(t.shape) for t in graph.tensors]
        self.known = known or {}
        self.nodes, self.inits = [], []
        self.names: dict[int, str] = {}  # tensor index -> ONNX name of its real (float) value
        self.n = 0

    # -- plumbing -------------------------------------------------------------------------
    def uniq(self, base: str) -> str:
        self.n += 1
        return f"{base}__{self.n}"

    def init(self, arr: np.ndarray, base: str) -> str:
        name = self.uniq(base)
        self.inits.append(self.nh.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(self, op: str, inputs: list[str], base: str, **attrs) -> str:
        out = self.uniq(base)
        self.nodes.append(self.h.make_node(op, inputs, [out], name=self.uniq(op), **attrs))
        return out

    def tensor(self, i: int):
        return self.g.tensors[i]

    def const(self, i: int):
        if i in self.known:
            return np.asarray(self.known[i])
        t = self.tensor(i)
        return self.model.tensor_data(t) if t.buffer else None

    def qdq(self, value: str, i: int) -> str:
        """Q -> DQ of a float value with tensor i's parameters (identity for float tensors)."""
        t = self.tensor(i)
        if not t.quantized or t.dtype not in ("int8", "uint8", "int16"):
            return value
        s = np.float32(t.quant.scale[0])
        zp = np.array(int(t.quant.zero_point[0]), dtype=t.np_dtype)
        sn, zn = self.init(np.array(s), f"s{i}"), self.init(zp, f"zp{i}")
        q = self.node("QuantizeLinear", [value, sn, zn], f"t{i}_q")
        return self.node("DequantizeLinear", [q, sn, zn], f"t{i}")

    def real(self, i: int, perm=None) -> str:
        """The real-valued ONNX name of tensor i (constants become initializers [+ DQ])."""
        if perm is None and i in self.names:
            return self.names[i]
        data = self.const(i)
        if data is None:
            if perm is not None:
                return self.node("Transpose", [self.names[i]], f"t{i}_T", perm=list(perm))
            raise KeyError(f"tensor {i} ('{self.tensor(i).name}') has no value yet")
        t = self.tensor(i)
        axis = int(t.quant.quantized_dimension) if t.quantized else 0
        if perm is not None:
            data = np.transpose(data, perm)
            axis = list(perm).index(axis)
        if t.quantized and t.dtype in ("int8", "uint8", "int32", "int16"):
            scale = t.quant.scale.astype(np.float32)
            zp = t.quant.zero_point.astype(t.np_dtype)
            per_axis = scale.size > 1
            qn = self.init(np.asarray(data, t.np_dtype), f"w{i}")
            sn = self.init(scale if per_axis else np.float32(scale[0]), f"ws{i}")
            zn = self.init(zp if per_axis else np.array(zp[0], t.np_dtype), f"wz{i}")
            kw = {"axis": axis} if per_axis else {}
            out = self.node("DequantizeLinear", [qn, sn, zn], f"t{i}", **kw)
        else:
            out = self.init(np.asarray(data), f"c{i}")
        if perm is None:
            self.names[i] = out
        return out

    def finish(self, op, value: str) -> None:
        """Fused activation, then Q/DQ with the output's parameters."""
        act = int(op.options.get("fused_activation_function", 0) or 0)
        value = self.activation(value, act)
        o = op.outputs[0]
        self.names[o] = self.qdq(value, o)

    def activation(self, v: str, act: int) -> str:
        if act == Activation.NONE:
            return v
        if act == Activation.RELU:
            return self.node("Relu", [v], "relu")
        if act in (Activation.RELU6, Activation.RELU_N1_TO_1):
            lo, hi = (0.0, 6.0) if act == Activation.RELU6 else (-1.0, 1.0)
            return self.node("Clip", [v, self.init(np.float32(lo), "lo"), self.init(np.float32(hi), "hi")], "clip")
        if act == Activation.TANH:
            return self.node("Tanh", [v], "tanh")
        raise NotImplementedError(f"fused activation {act}")

    def pads(self, op, k_h, k_w):
        o = op.options
        if o.get("padding", Padding.SAME) == Padding.VALID:
            return [0, 0, 0, 0]
        _, h, w, _ = self.shapes[op.inputs[0]]
        sh, sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
        dh, dw = int(o.get("dilation_h_factor", 1) or 1), int(o.get("dilation_w_factor", 1) or 1)

        def one(n, k, s, d):
            out = -(-n // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
            return total // 2, total - total // 2

        (pt, pb), (pl, pr) = one(h, k_h, sh, dh), one(w, k_w, sw, dw)
        return [pt, pl, pb, pr]


# --------------------------------------------------------------------------------------------
# lowerings: TFLite builtin -> ONNX nodes, keyed by the schema's op names
# --------------------------------------------------------------------------------------------
def _conv(e: _Export, op, depthwise=False):
    x, w = op.inputs[0], op.inputs[1]
    wshape = e.shapes[w]
    if depthwise:  # [1, kh, kw, C*m] -> [C*m, 1, kh, kw]
        wn = e.real(w, perm=(3, 0, 1, 2))
        kh, kw = wshape[1], wshape[2]
        group = int(e.shapes[x][3])
    else:  # OHWI -> OIHW
        wn = e.real(w, perm=(0, 3, 1, 2))
        kh, kw = wshape[1], wshape[2]
        group = 1
    ins = [e.node("Transpose", [e.real(x)], "nchw", perm=[0, 3, 1, 2]), wn]
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        ins.append(e.real(op.inputs[2]))
    o = op.options
    y = e.node("Conv", ins, "conv", kernel_shape=[int(kh), int(kw)],
               strides=[int(o.get("stride_h", 1)), int(o.get("stride_w", 1))],
               dilations=[int(o.get("dilation_h_factor", 1) or 1), int(o.get("dilation_w_factor", 1) or 1)],
               pads=e.pads(op, kh, kw), group=group)
    e.finish(op, e.node("Transpose", [y], "nhwc", perm=[0, 2, 3, 1]))


def _fc(e: _Export, op):
    x, w = op.inputs[0], op.inputs[1]
    k = int(e.shapes[w][-1])
    flat = e.node("Reshape", [e.real(x), e.init(np.array([-1, k], np.int64), "fcshape")], "flat")
    ins = [flat, e.real(w)]
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        ins.append(e.real(op.inputs[2]))
    y = e.node("Gemm", ins, "gemm", transB=1)
    out_shape = e.shapes[op.outputs[0]]
    if len(out_shape) != 2:
        y = e.node("Reshape", [y, e.init(np.array(out_shape, np.int64), "fcout")], "fcr")
    e.finish(op, y)


def _pool(e: _Export, op, kind):
    o = op.options
    kh, kw = int(o["filter_height"]), int(o["filter_width"])
    xt = e.node("Transpose", [e.real(op.inputs[0])], "nchw", perm=[0, 3, 1, 2])
    attrs = {"kernel_shape": [kh, kw], "strides": [int(o.get("stride_h", 1)), int(o.get("stride_w", 1))],
             "pads": e.pads(op, kh, kw)}
    if kind == "AveragePool":
        attrs["count_include_pad"] = 0  # TFLite averages over the valid window only
    y = e.node(kind, [xt], kind.lower(), **attrs)
    e.finish(op, e.node("Transpose", [y], "nhwc", perm=[0, 2, 3, 1]))


def _binary(onnx_op):
    def lower(e: _Export, op):
        e.finish(op, e.node(onnx_op, [e.real(op.inputs[0]), e.real(op.inputs[1])], onnx_op.lower()))
    return lower


def _unary(onnx_op, **attrs):
    def lower(e: _Export, op):
        e.finish(op, e.node(onnx_op, [e.real(op.inputs[0])], onnx_op.lower(), **attrs))
    return lower


def _clip(lo, hi):
    def lower(e: _Export, op):
        e.finish(op, e.node("Clip", [e.real(op.inputs[0]), e.init(np.float32(lo), "lo"),
                                     e.init(np.float32(hi), "hi")], "clip"))
    return lower


def _softmax(e: _Export, op):
    v = e.real(op.inputs[0])
    beta = float(op.options.get("beta", 1.0) or 1.0)
    if beta != 1.0:
        v = e.node("Mul", [v, e.init(np.float32(beta), "beta")], "scaled")
    e.finish(op, e.node("Softmax", [v], "softmax", axis=-1))


def _reshape(e: _Export, op):
    shape = np.array(e.shapes[op.outputs[0]], np.int64)
    e.finish(op, e.node("Reshape", [e.real(op.inputs[0]), e.init(shape, "shape")], "reshape"))


def _concat(e: _Export, op):
    rank = len(e.shapes[op.outputs[0]])
    axis = int(op.options.get("axis", 0)) % rank
    e.finish(op, e.node("Concat", [e.real(i) for i in op.inputs], "concat", axis=axis))


def _mean(e: _Export, op):
    rank = len(e.shapes[op.inputs[0]])
    axes = sorted({int(a) % rank for a in np.asarray(e.const(op.inputs[1])).reshape(-1)})
    keep = 1 if op.options.get("keep_dims") else 0
    e.finish(op, e.node("ReduceMean", [e.real(op.inputs[0])], "mean", axes=axes, keepdims=keep))


def _pad(e: _Export, op):
    p = np.asarray(e.const(op.inputs[1]), np.int64)
    pads = np.concatenate([p[:, 0], p[:, 1]])
    e.finish(op, e.node("Pad", [e.real(op.inputs[0]), e.init(pads, "pads"),
                                e.init(np.float32(0.0), "zero")], "pad", mode="constant"))


def _identity(e: _Export, op):
    e.finish(op, e.node("Identity", [e.real(op.inputs[0])], "id"))


def _leaky(e: _Export, op):
    e.finish(op, e.node("LeakyRelu", [e.real(op.inputs[0])], "leaky", alpha=float(op.options.get("alpha", 0.2))))


def _prelu(e: _Export, op):
    # ONNX PRelu broadcasts the slope to the input (numpy-style), as TFLite's PRELU does
    e.finish(op, e.node("PRelu", [e.real(op.inputs[0]), e.real(op.inputs[1])], "prelu"))


LOWERINGS = {
    "CONV_2D": _conv,
    "DEPTHWISE_CONV_2D": lambda e, op: _conv(e, op, depthwise=True),
    "FULLY_CONNECTED": _fc,
    "AVERAGE_POOL_2D": lambda e, op: _pool(e, op, "AveragePool"),
    "MAX_POOL_2D": lambda e, op: _pool(e, op, "MaxPool"),
    "ADD": _binary("Add"), "SUB": _binary("Sub"), "MUL": _binary("Mul"),
    "MAXIMUM": _binary("Max"), "MINIMUM": _binary("Min"),
    "SOFTMAX": _softmax,
    "RELU": _unary("Relu"), "RELU6": _clip(0.0, 6.0), "RELU_N1_TO_1": _clip(-1.0, 1.0),
    "LOGISTIC": _unary("Sigmoid"), "TANH": _unary("Tanh"), "HARD_SWISH": _unary("HardSwish"),
    "LEAKY_RELU": _leaky, "PRELU": _prelu,
    "RESHAPE": _reshape, "CONCATENATION": _concat, "MEAN": _mean, "PAD": _pad,
    "QUANTIZE": _identity, "DEQUANTIZE": _identity,
}


def export_onnx(model: Model | bytes, *, nodes: list[int] | None = None, inputs: list[int] | None = None,
                outputs: list[int] | None = None, shapes=None, known=None, graph_index: int = 0,
                opset: int = OPSET):
    """ONNX ``ModelProto`` of ``nodes`` (default: the whole main graph) with explicit Q/DQ.

    ONNX inputs/outputs are float32 real values named after the TFLite tensors, in the order of
    ``inputs``/``outputs`` (default: the graph's).
    """
    import onnx
    from onnx import TensorProto, helper

    if isinstance(model, (bytes, bytearray, memoryview)):
        from edgerun.schema.reader import read_model
        model = read_model(bytes(model))
    g = model.subgraphs[graph_index]
    nodes = list(range(len(g.operators))) if nodes is None else list(nodes)
    inputs = list(g.inputs) if inputs is None else list(inputs)
    outputs = list(g.outputs) if outputs is None else list(outputs)
    e = _Export(model, g, shapes, known)
    in_vi = []
    for i in inputs:
        name = f"in{len(in_vi)}_{_clean(g.tensors[i].name)}"
        in_vi.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(e.shapes[i])))
        e.names[i] = e.qdq(name, i)
    for n in nodes:
        op = g.operators[n]
        name = model.op_name(op)
        lower = LOWERINGS.get(name)
        if lower is None:
            from edgerun.errors import UnsupportedOpError
            raise UnsupportedOpError(name, None, node_index=n, detail="no ONNX lowering in the tensorrt exporter")
        lower(e, op)
    out_vi = []
    for o in outputs:
        name = f"out{len(out_vi)}_{_clean(g.tensors[o].name)}"
        e.nodes.append(helper.make_node("Identity", [e.names[o]], [name], name=e.uniq("out")))
        out_vi.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(e.shapes[o])))
    graph = helper.make_graph(e.nodes, "edgerun_partition", in_vi, out_vi, e.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="edgerun")
    m.ir_version = min(m.ir_version, 9)
    onnx.checker.check_model(m)
    return m


def _clean(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_" else "_" for c in name)[:60] or "t"
