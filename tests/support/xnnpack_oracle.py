"""What LiteRT's own XNNPACK delegate takes, asked of LiteRT itself, and one-op models to ask with.

``litert_xnnpack_partitions`` counts the DELEGATE nodes LiteRT's XNNPACK delegate forms in a model
and the nodes it leaves to LiteRT's kernels; ``one_op`` builds a model of a single builtin op in a
given dtype (float32, int8 or uint8, quantized per tensor as TFLite's spec says) with variants for
the limits a capability table has to get right (fused activations, broadcasting, ranks,
per-tensor weights). The conformance test in ``tests/delegates/test_xnnpack_conformance.py``
compares the two sides over every row of edgerun's XNNPACK table.
"""

from __future__ import annotations

import numpy as np

from edgerun.ir import ModelBuilder
from edgerun.schema.tflite import Padding

#: (scale, zero point) of a plain activation tensor per dtype
ACT_Q = {"int8": (0.05, 3), "uint8": (0.05, 131), "float32": None, "float16": None}
#: fixed output quantization of LOGISTIC / SOFTMAX and TANH per dtype (TFLite's spec)
SIGMOID_Q = {"int8": (1 / 256, -128), "uint8": (1 / 256, 0), "float32": None}
TANH_Q = {"int8": (1 / 128, 0), "uint8": (1 / 128, 128), "float32": None}


def litert_xnnpack_partitions(model: bytes) -> tuple[int, int]:
    """(DELEGATE nodes LiteRT's XNNPACK delegate forms, original nodes it leaves outside them).

    After ``allocate_tensors`` LiteRT lists the original nodes and then one DELEGATE node per
    partition. A node ran outside XNNPACK when some DELEGATE node reads its output, or when it
    writes a graph output no DELEGATE node writes. Raises RuntimeError when XNNPACK claims a node
    and then fails to prepare it (LiteRT cannot run the model at all)."""
    from edgerun.litert import make_interpreter

    it = make_interpreter(model, xnnpack=True, num_threads=1)
    it.allocate_tensors()
    ops = it._get_ops_details()
    dels = [o for o in ops if o["op_name"] == "DELEGATE"]
    d_out = {int(t) for d in dels for t in d["outputs"]}
    d_in = {int(t) for d in dels for t in d["inputs"]}
    g_out = {int(d["index"]) for d in it.get_output_details()}
    outside = 0
    for o in ops:
        if o["op_name"] == "DELEGATE":
            continue
        outs = {int(t) for t in o["outputs"]}
        if outs & d_in or (outs & g_out and not outs & d_out):
            outside += 1
    return len(dels), outside


def edgerun_xnnpack_claims(model: bytes) -> list:
    """edgerun's xnnpack delegate's ``supports`` answer for every node of the main graph."""
    from edgerun.delegate import get_delegate, node_context
    from edgerun.schema.reader import read_model

    m = read_model(model)
    d = get_delegate("xnnpack")
    return [d.supports(node_context(m, 0, i)) for i in range(len(m.main.operators))]


class _B:
    """A ModelBuilder with one dtype's quantization defaults."""

    def __init__(self, dtype: str, out_q=None):
        self.b, self.dtype, self.n, self.out_q = ModelBuilder(), dtype, 0, out_q

    def _q(self, q):
        return None if self.dtype == "float32" else (q or ACT_Q[self.dtype])

    def input(self, shape, q=None):
        self.n += 1
        return self.b.input(f"x{self.n}", shape, self.dtype, self._q(q))

    def out(self, shape, q=None, dtype=None):
        self.n += 1
        dt = dtype or self.dtype
        quant = None if dt == "float32" else (self.out_q or q or ACT_Q[dt])
        return self.b.tensor(f"y{self.n}", shape, dt, quant)

    def ints(self, name, values):
        return self.b.const(name, np.asarray(values, np.int32))

    def weights(self, name, shape, per_channel=True, axis=0, seed=0):
        rng = np.random.default_rng(seed)
        if self.dtype == "float32":
            return self.b.const(name, rng.normal(0, 0.2, shape).astype(np.float32))
        n = shape[axis]
        if self.dtype == "uint8":  # TFLite's uint8 scheme: asymmetric per tensor
            return self.b.const(name, rng.integers(0, 256, shape).astype(np.uint8), "uint8", (0.01, 128))
        scale = rng.uniform(0.005, 0.02, n).astype(np.float32) if per_channel else np.float32([0.01])
        zp = np.zeros(scale.size, np.int64)
        return self.b.const(name, rng.integers(-127, 128, shape).astype(np.int8), "int8", (scale, zp, axis))

    def bias(self, name, n, in_scale, w):
        if self.dtype == "float32":
            return self.b.const(name, np.linspace(-0.1, 0.1, n).astype(np.float32))
        ws = np.asarray(self.b.graph.tensors[w].quant.scale, np.float64)
        s = (in_scale * ws).astype(np.float32)
        if s.size == 1:
            s = np.full(1, s[0], np.float32)
        return self.b.const(name, np.arange(n, dtype=np.int32) * 7 - 20, "int32",
                            (s, np.zeros(s.size, np.int64)))

    def done(self, outs):
        for op in self.b.graph.operators:
            op.options.update(self.options)
        self.b.output(*outs)
        return self.b.to_bytes()


UNARY_SAME_Q = ("ABS", "CEIL", "ELU", "FLOOR", "GELU", "HARD_SWISH", "LEAKY_RELU", "NEG", "RELU",
                "RELU6", "RELU_N1_TO_1", "ROUND", "RSQRT", "SQRT", "SQUARE", "EXP", "LOG", "SIN",
                "COS", "SIGN", "CUMSUM")
BINARY = ("ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW",
          "FLOOR_DIV", "PRELU")
FUSED = ("ADD", "SUB", "MUL", "DIV", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED",
         "AVERAGE_POOL_2D", "MAX_POOL_2D", "CONCATENATION", "TRANSPOSE_CONV")


def one_op(op: str, dtype: str, *, act: int = 0, broadcast: str = "none", rank: int = 4,
           per_channel: bool = True, version: int = 1, out_q=None, **options) -> bytes:
    """A model of one ``op`` node in ``dtype``.

    act: fused activation (for ops with one); broadcast (binary ops): "none", "scalar" (a constant
    of one element), "channel" (a constant [C] vector), "const" (a same-shape constant), "rank"
    (a [1,1,W,C] runtime input); rank: the rank of the main input where the op allows any;
    per_channel: int8 conv/FC weights per output channel (else per tensor); out_q: the quantized
    output's (scale, zero point) instead of the default; options: override the op's options.
    """
    B = _B(dtype, out_q)
    B.options = options
    b = B.b
    shp = {1: (24,), 2: (6, 24), 3: (5, 6, 8), 4: (1, 5, 6, 8), 5: (1, 2, 5, 3, 8),
           6: (1, 2, 2, 5, 3, 4), 7: (1, 1, 2, 2, 5, 3, 4)}[rank]
    fa = {"fused_activation_function": act}
    if op in UNARY_SAME_Q:
        x = B.input(shp)
        y = B.out(shp)
        kw = {"alpha": 0.2} if op == "LEAKY_RELU" else {}
        if op == "GELU":
            kw = {"approximate": False}
        if op == "CUMSUM":
            b.op(op, [x, B.ints("axis", 0 if rank == 1 else 1)], [y], version=version, exclusive=False, reverse=False)
        else:
            b.op(op, [x], [y], version=version, **kw)
        return B.done([y])
    if op in ("LOGISTIC", "TANH", "SOFTMAX", "LOG_SOFTMAX"):
        x = B.input(shp)
        q = TANH_Q[dtype] if op == "TANH" else SIGMOID_Q[dtype]
        if op == "LOG_SOFTMAX" and dtype != "float32":
            q = (16 / 256, 127) if dtype == "int8" else (16 / 256, 255)
        y = B.out(shp, q)
        b.op(op, [x], [y], version=version, **({"beta": 1.0} if op == "SOFTMAX" else {}))
        return B.done([y])
    if op in BINARY:
        x = B.input(shp)
        C = shp[-1]
        if op == "PRELU":
            ashape = {"none": shp, "channel": (C,), "scalar": (1,), "rank": (1,) * (len(shp) - 1) + (C,),
                      "const": shp}[broadcast if broadcast != "none" else "channel"]
            if dtype == "float32":
                a = b.const("alpha", np.full(ashape, 0.25, np.float32))
            else:
                npd = np.int8 if dtype == "int8" else np.uint8
                zp = 0 if dtype == "int8" else 128
                a = b.const("alpha", np.full(ashape, 64 + zp, npd), dtype, (0.004, zp))
            y = B.out(shp)
            b.op(op, [x, a], [y], version=version)
            return B.done([y])
        if broadcast == "none":
            z = B.input(shp)
        elif broadcast == "rank":
            z = B.input((1,) * (len(shp) - 2) + shp[-2:]) if len(shp) >= 2 else B.input((1,))
        else:
            cshape = {"scalar": (1,), "channel": (C,), "const": shp}[broadcast]
            if dtype == "float32":
                z = b.const("c", np.full(cshape, 0.75, np.float32))
            else:
                zp = ACT_Q[dtype][1]
                npd = np.int8 if dtype == "int8" else np.uint8
                z = b.const("c", np.full(cshape, zp + 15, npd), dtype, ACT_Q[dtype])
        y = B.out(shp)
        kw = fa if op in FUSED else {}
        b.op(op, [x, z], [y], version=version, **kw)
        return B.done([y])
    if op in ("CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV"):
        cin = 8
        x = B.input((1, 5, 6, cin))
        s_in = ACT_Q.get(dtype, (1, 0))[0] if dtype != "float32" else 1.0
        if op == "CONV_2D":
            w = B.weights("w", (4, 3, 3, cin), per_channel)
            y = B.out((1, 5, 6, 4), (0.1, -2) if dtype == "int8" else (0.1, 126) if dtype == "uint8" else None)
            b.op(op, [x, w, B.bias("b", 4, s_in, w)], [y], version=version, padding=Padding.SAME,
                 stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1, **fa)
        elif op == "DEPTHWISE_CONV_2D":
            w = B.weights("w", (1, 3, 3, cin), per_channel, axis=3)
            y = B.out((1, 5, 6, cin), (0.1, -2) if dtype == "int8" else (0.1, 126) if dtype == "uint8" else None)
            b.op(op, [x, w, B.bias("b", cin, s_in, w)], [y], version=version, padding=Padding.SAME,
                 stride_w=1, stride_h=1, depth_multiplier=1, dilation_w_factor=1, dilation_h_factor=1, **fa)
        else:
            w = B.weights("w", (4, 3, 3, cin), per_channel)
            y = B.out((1, 10, 12, 4), (0.1, -2) if dtype == "int8" else (0.1, 126) if dtype == "uint8" else None)
            b.op(op, [B.ints("oshape", [1, 10, 12, 4]), w, x], [y], version=version, padding=Padding.SAME,
                 stride_w=2, stride_h=2, **fa)
        return B.done([y])
    if op == "FULLY_CONNECTED":
        x = B.input((2, 16) if rank == 2 else shp)
        k = 16 if rank == 2 else shp[-1]
        s_in = ACT_Q[dtype][0] if dtype != "float32" else 1.0
        w = B.weights("w", (10, k), per_channel)
        rows = 2 if rank == 2 else int(np.prod(shp[:-1]))
        y = B.out((rows, 10), (0.1, -2) if dtype == "int8" else (0.1, 126) if dtype == "uint8" else None)
        b.op(op, [x, w, B.bias("b", 10, s_in, w)], [y], version=version, keep_num_dims=False,
             weights_format=0, **fa)
        return B.done([y])
    if op in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        x = B.input((1, 6, 6, 8))
        y = B.out((1, 3, 3, 8))
        b.op(op, [x], [y], version=version, padding=Padding.VALID, stride_w=2, stride_h=2,
             filter_width=2, filter_height=2, **fa)
        return B.done([y])
    if op == "CONCATENATION":
        x, z = B.input(shp), B.input(shp)
        y = B.out(shp[:-1] + (2 * shp[-1],))
        b.op(op, [x, z], [y], version=version, axis=len(shp) - 1, **fa)
        return B.done([y])
    if op in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
        x = B.input(shp)
        if op == "RESHAPE":
            ns = (int(np.prod(shp)) // shp[-1], shp[-1])
            y = B.out(ns)
            b.op(op, [x, B.ints("s", ns)], [y], version=version, new_shape=list(ns))
        elif op == "SQUEEZE":
            y = B.out(tuple(d for d in shp if d != 1))
            b.op(op, [x], [y], version=version, squeeze_dims=[i for i, d in enumerate(shp) if d == 1])
        else:
            y = B.out((1,) + shp)
            b.op(op, [x, B.ints("a", [0])], [y], version=version)
        return B.done([y])
    if op in ("DEPTH_TO_SPACE", "SPACE_TO_DEPTH"):
        x = B.input((1, 4, 6, 8))
        y = B.out((1, 8, 12, 2) if op == "DEPTH_TO_SPACE" else (1, 2, 3, 32))
        b.op(op, [x], [y], version=version, block_size=2)
        return B.done([y])
    if op in ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"):
        x = B.input((1, 5, 6, 8))
        y = B.out((1, 1, 1, 8))
        b.op(op, [x, B.ints("axes", [1, 2])], [y], version=version, keep_dims=True)
        return B.done([y])
    if op in ("PAD", "PADV2", "MIRROR_PAD"):
        x = B.input(shp)
        pads = np.zeros((len(shp), 2), np.int32)
        pads[-2] = (1, 1)
        pads[-1] = (0, 2)
        y = B.out(tuple(int(d + p.sum()) for d, p in zip(shp, pads)))
        ins = [x, b.const("p", pads)]
        if op == "PADV2":
            ins.append(b.const("v", np.zeros(1, np.float32)) if dtype == "float32"
                       else b.const("v", np.array([ACT_Q[dtype][1]], np.int8 if dtype == "int8" else np.uint8),
                                    dtype, ACT_Q[dtype]))
        b.op(op, ins, [y], version=version, **({"mode": 0} if op == "MIRROR_PAD" else {}))
        return B.done([y])
    if op == "DEQUANTIZE":  # dtype = the input's (int8, uint8, float16); a runtime input
        x = b.input("x", (1, 5, 6, 8), dtype, ACT_Q.get(dtype))
        y = b.tensor("y", (1, 5, 6, 8), "float32")
        b.op(op, [x], [y], version=version)
        return B.done([y])
    if op == "QUANTIZE":  # dtype = the input's; the output is out_dtype (default int8 / the same type)
        dst = options.pop("out_dtype", "int8" if dtype == "float32" else dtype)
        x = b.input("x", (1, 5, 6, 8), dtype, ACT_Q.get(dtype) if dtype != "int16" else (0.001, 0))
        y = b.tensor("y", (1, 5, 6, 8), dst, {"int8": (0.07, -5), "uint8": (0.07, 120),
                                              "int16": (0.001, 0)}[dst])
        b.op(op, [x], [y], version=version)
        return B.done([y])
    if op in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"):
        x = B.input((1, 5, 6, 8))
        y = B.out((1, 10, 12, 8))
        b.op(op, [x, B.ints("size", [10, 12])], [y], version=version, align_corners=False,
             half_pixel_centers=True)
        return B.done([y])
    if op in ("SLICE", "STRIDED_SLICE"):
        x = B.input(shp)
        begin = [0] * (len(shp) - 1) + [2]
        size = list(shp[:-1]) + [4]
        y = B.out(tuple(size))
        if op == "SLICE":
            b.op(op, [x, B.ints("b", begin), B.ints("s", size)], [y], version=version)
        else:
            end = list(shp[:-1]) + [6]
            b.op(op, [x, B.ints("b", begin), B.ints("e", end), B.ints("st", [1] * len(shp))], [y],
                 version=version, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0,
                 shrink_axis_mask=0, offset=False)
        return B.done([y])
    if op in ("SPLIT", "SPLIT_V", "UNPACK"):
        x = B.input(shp)
        half = shp[:-1] + (shp[-1] // 2,)
        y1, y2 = B.out(half), B.out(half)
        if op == "SPLIT":
            b.op(op, [B.ints("axis", [len(shp) - 1]), x], [y1, y2], version=version, num_splits=2)
        else:
            b.op(op, [x, B.ints("sz", [shp[-1] // 2] * 2), B.ints("axis", [len(shp) - 1])], [y1, y2],
                 version=version, num_splits=2)
        return B.done([y1, y2])
    if op == "TRANSPOSE":
        x = B.input(shp)
        perm = list(range(len(shp)))[::-1]
        y = B.out(tuple(shp[p] for p in perm))
        b.op(op, [x, B.ints("perm", perm)], [y], version=version)
        return B.done([y])
    if op == "BATCH_MATMUL":
        x, z = B.input((1, 4, 6)), B.input((1, 6, 5))
        y = B.out((1, 4, 5), (0.1, -2) if dtype == "int8" else None)
        b.op(op, [x, z], [y], version=version, adj_x=False, adj_y=False, asymmetric_quantize_inputs=False)
        return B.done([y])
    if op in ("GATHER", "TILE", "PACK", "ARG_MAX", "CAST", "BROADCAST_TO"):
        x = B.input(shp)
        if op == "GATHER":
            y = B.out(shp[:-1] + (3,))
            b.op(op, [x, B.ints("i", [0, 2, 4])], [y], version=version, axis=len(shp) - 1, batch_dims=0)
        elif op == "TILE":
            y = B.out(shp[:-1] + (2 * shp[-1],))
            b.op(op, [x, B.ints("m", [1] * (len(shp) - 1) + [2])], [y], version=version)
        elif op == "PACK":
            z = B.input(shp)
            y = B.out((2,) + shp)
            b.op(op, [x, z], [y], version=version, values_count=2, axis=0)
        elif op == "ARG_MAX":
            y = b.tensor("y", shp[:-1], "int32")
            b.op(op, [x, B.ints("a", [len(shp) - 1])], [y], version=version, output_type=2)
        elif op == "BROADCAST_TO":
            y = B.out((2,) + shp[1:])
            b.op(op, [x, B.ints("s", (2,) + shp[1:])], [y], version=version)
        else:
            y = b.tensor("y", shp, "int32")
            b.op(op, [x], [y], version=version)
        return B.done([y])
    raise ValueError(f"no one-op builder for {op}")
