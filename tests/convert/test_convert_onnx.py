"""ONNX -> TFLite conversion, op by op and in small nets.

For every model built here with onnx.helper:

* the ``--float`` TFLite (run by LiteRT) matches ONNX Runtime within 1e-4 relative;
* the int8 TFLite reaches a minimum output SQNR against ONNX Runtime. Thresholds: an ideal 8-bit
  uniform quantizer gives ~50 dB on a full-scale uniform signal; Gaussian-like activations use
  a fraction of the range (mse/percentile ranges of about +-4 sigma), costing ~10 dB, and each
  quantized tensor on the path adds noise. So single ops must reach 30 dB, small nets 25 dB,
  and ops whose output is a fixed 1/256 grid (softmax, sigmoid) are measured on that grid;
* LiteRT's reference kernels and the edgerun interpreter give identical int8 outputs;
* TFLM's host interpreter runs it and agrees with LiteRT's reference kernels.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from edgerun.convert import convert
from edgerun.convert.onnx.load import session
from edgerun.errors import ConversionError, UnsupportedOpError
from edgerun.schema.reader import read_model
from edgerun.testing import run_edgerun, run_litert

RNG = np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))


def W(name, *shape, scale=0.3, positive=False):
    a = RNG.standard_normal(shape).astype(np.float32) * scale
    if positive:
        a = np.abs(a) + 0.5
    return nh.from_array(a, name)


def C(name, value, dtype=np.float32):
    return nh.from_array(np.asarray(value, dtype), name)


def make(nodes, inputs, outputs, inits=(), opset=13):
    """inputs/outputs: [(name, shape)]."""
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, TP.FLOAT, s) for n, s in inputs],
                     [h.make_tensor_value_info(n, TP.FLOAT, s) for n, s in outputs], list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)
    if all(s is not None for _, s in outputs):
        onnx.checker.check_model(m)
    return m


def data_for(m, n=40):
    out = []
    for inp in m.graph.input:
        dims = [d.dim_value if d.dim_value > 0 else 1 for d in inp.type.tensor_type.shape.dim]
        out.append(RNG.uniform(-1, 1, [n] + dims[1:]).astype(np.float32))
    return out


def int8_inputs(model_bytes, sample_onnx_layout, perms):
    from edgerun.convert.drift import _quant_input
    m = read_model(model_bytes)
    xs = []
    for x, p, ti in zip(sample_onnx_layout, perms, m.main.inputs):
        t = m.main.tensors[ti]
        xt = np.transpose(x, p)
        d = {"dtype": np.dtype(t.np_dtype), "quantization": (float(t.quant.scale[0]), int(t.quant.zero_point[0]))
             if t.quantized else (0.0, 0)}
        xs.append(_quant_input(d, xt))
    return xs


def has_int8_kernels(model_bytes) -> list[str]:
    """(op/dtype) pairs of the model that edgerun has no kernel for (dtype chosen as the registry does)."""
    import edgerun.ops  # noqa: F401  (registers kernels)
    from edgerun.ops.registry import REGISTRY, NodeContext
    m = read_model(model_bytes)
    g = m.main
    missing = []
    for i, op in enumerate(g.operators):
        name = m.op_name(op)
        d = REGISTRY.get(name)
        ctx = NodeContext(m, g, i, op, name, [t.shape for t in g.tensors])
        dt = d.key(ctx) if d is not None else "?"
        if d is None or dt not in d.kernels:
            missing.append(f"{name}/{dt}")
    return missing


def check(m, tmp_path, *, sqnr=30.0, calib=None, tflm=True, io_type="int8", exact=True, **kw):
    """Float vs ORT, int8 SQNR, LiteRT-ref vs edgerun bit-exactness, TFLM runs it."""
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    calib = calib if calib is not None else data_for(m)
    rep_f = convert(path, tmp_path / "f.tflite", float_only=True, **kw)
    fbytes = (tmp_path / "f.tflite").read_bytes()
    perms = [tuple(rep_f_perm) for rep_f_perm in _perms(rep_f)]
    sess = session(m)
    names = [i.name for i in sess.get_inputs()]
    sample = [c[:1] for c in calib]
    refs = sess.run(None, dict(zip(names, sample)))
    got = run_litert(fbytes, [np.transpose(x, p) for x, p in zip(sample, perms)], reference=False)
    out_perms = _out_perms(rep_f, refs)
    for r, g, p in zip(refs, got, out_perms):
        r = np.transpose(r, p)
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4 * max(1e-3, float(np.abs(r).max())))
    rep = convert(path, tmp_path / "q.tflite", calib=calib, io_type=io_type, **kw)
    qbytes = (tmp_path / "q.tflite").read_bytes()
    for o in rep.outputs:
        assert o.sqnr_db >= sqnr, f"output {o.name}: SQNR {o.sqnr_db:.1f} dB < {sqnr} dB\n{rep.format()}"
    xq = int8_inputs(qbytes, sample, perms)
    want = run_litert(qbytes, xq, reference=True)
    if exact:
        assert not has_int8_kernels(qbytes), f"edgerun lacks kernels for {has_int8_kernels(qbytes)}"
        got = run_edgerun(qbytes, xq)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w), f"edgerun vs LiteRT ref: max diff " \
                f"{np.abs(g.astype(np.int64) - w.astype(np.int64)).max()}"
    if tflm:
        from tflite_micro.python.tflite_micro import runtime
        it = runtime.Interpreter.from_bytes(qbytes)
        for i, x in enumerate(xq):
            it.set_input(x, i)
        it.invoke()
        for i, w in enumerate(want):
            t = it.get_output(i)
            assert np.abs(t.astype(np.int64) - w.astype(np.int64)).max() <= 1, "TFLM vs LiteRT ref"
    return rep, read_model(qbytes)


def _perms(rep):
    lay = rep.io.get("layouts", {}).get("inputs", {})
    out = []
    for d in rep.io["inputs"]:
        r = len(d["shape"])
        out.append((0, 2, 3, 1) if lay.get(d["name"]) == "NHWC" else tuple(range(r)))
    return out


def _out_perms(rep, refs):
    lay = rep.io.get("layouts", {}).get("outputs", {})
    return [(0, 2, 3, 1) if lay.get(n) == "NHWC" else tuple(range(r.ndim)) for n, r in zip(rep.io["outputs"], refs)]


def op_names(model):
    return [model.op_name(op) for op in model.main.operators]


# ---------------------------------------------------------------------------------------------
# single ops
# ---------------------------------------------------------------------------------------------

X4 = [("x", ["N", 4, 8, 8])]


def conv_model(**attrs):
    w = W("w", 6, 4 // attrs.get("group", 1), 3, 3)
    return make([h.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], X4, [("y", None)], [w, W("b", 6)])


CONV_CASES = {
    "valid": {}, "pads1": {"pads": [1, 1, 1, 1]}, "stride2_pads1": {"strides": [2, 2], "pads": [1, 1, 1, 1]},
    "same_upper_s2": {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, "dilated": {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
    "grouped": {"group": 2, "pads": [1, 1, 1, 1]},
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv(case, tmp_path):
    attrs = CONV_CASES[case]
    m = conv_model(**attrs)
    rep, q = check(m, tmp_path)
    assert "TRANSPOSE" not in op_names(q)


def test_depthwise_with_multiplier_and_no_bias(tmp_path):
    m = make([h.make_node("Conv", ["x", "w"], ["y"], group=4, pads=[1, 1, 1, 1])], X4, [("y", None)],
             [W("w", 8, 1, 3, 3)])
    rep, q = check(m, tmp_path)
    assert op_names(q) == ["DEPTHWISE_CONV_2D"]


def test_conv_transpose(tmp_path):
    m = make([h.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1],
                          output_padding=[1, 1])], X4, [("y", None)], [W("w", 4, 5, 3, 3), W("b", 5)])
    rep, q = check(m, tmp_path)
    assert "TRANSPOSE_CONV" in op_names(q)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm(trans_b, tmp_path):
    wshape = (7, 12) if trans_b else (12, 7)
    m = make([h.make_node("Gemm", ["x", "w", "c"], ["y"], transB=trans_b, alpha=0.7, beta=1.3)],
             [("x", ["N", 12])], [("y", ["N", 7])], [W("w", *wshape), W("c", 7)])
    rep, q = check(m, tmp_path)
    assert op_names(q) == ["FULLY_CONNECTED"]


def test_matmul_const_rank3(tmp_path):
    m = make([h.make_node("MatMul", ["x", "w"], ["y"])], [("x", ["N", 5, 12])], [("y", None)], [W("w", 12, 6)])
    check(m, tmp_path)


def test_matmul_two_activations(tmp_path):
    m = make([h.make_node("MatMul", ["a", "b"], ["y"])], [("a", ["N", 4, 6]), ("b", ["N", 6, 5])], [("y", None)])
    rep, q = check(m, tmp_path, sqnr=28)
    assert op_names(q) == ["BATCH_MATMUL"]


def test_batchnorm_folds_into_conv_and_standalone(tmp_path):
    nodes = [h.make_node("BatchNormalization", ["x", "g0", "b0", "m0", "v0"], ["xb"]),
             h.make_node("Conv", ["xb", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c", "g", "bb", "mm", "vv"], ["y"], epsilon=1e-3)]
    inits = [W("g0", 4), W("b0", 4), W("m0", 4), W("v0", 4, positive=True), W("w", 6, 4, 3, 3), W("b", 6),
             W("g", 6), W("bb", 6), W("mm", 6), W("vv", 6, positive=True)]
    m = make(nodes, X4, [("y", None)], inits)
    rep, q = check(m, tmp_path)
    assert op_names(q) == ["MUL", "ADD", "CONV_2D"]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_broadcast_and_channel_const(op, tmp_path):
    # activation (+) per-channel const after a conv folds into it; activation (+) activation broadcasts
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node(op, ["c", "k"], ["d"]),
             h.make_node(op, ["d", "x2"], ["y"])]
    k = RNG.uniform(0.5, 1.5, (6, 1, 1)).astype(np.float32)
    m = make(nodes, X4 + [("x2", ["N", 1, 8, 8])], [("y", None)], [W("w", 6, 4, 3, 3), W("b", 6), C("k", k)])
    calib = data_for(m)
    if op == "Div":
        calib[1] = np.abs(calib[1]) + 1.0  # keep the divisor away from 0
    rep, q = check(m, tmp_path, calib=calib, sqnr=25)
    ops = op_names(q)
    if op == "Div":  # LiteRT's int8 DIV is wrong for some inputs, so DIV runs in float
        assert ops == ["CONV_2D", "DEQUANTIZE", "DEQUANTIZE", "DIV", "QUANTIZE"], ops
        assert rep.float_ops == ["DIV"]
    else:
        assert ops == ["CONV_2D", op.upper()], ops  # the const op folded into the conv


def test_scalar_and_rank_broadcast(tmp_path):
    nodes = [h.make_node("Mul", ["x", "s"], ["a"]), h.make_node("Add", ["a", "v"], ["y"])]
    m = make(nodes, X4, [("y", None)], [C("s", 1.7), W("v", 8)])
    check(m, tmp_path)


ACT_CASES = {
    "Relu": ([], {}), "Sigmoid": ([], {}), "Tanh": ([], {}), "LeakyRelu": ([], {"alpha": 0.1}),
    "HardSwish": ([], {}), "HardSigmoid": ([], {"alpha": 0.25, "beta": 0.4}),
    "Clip6": (["lo0", "hi6"], {}), "Clip1": (["lom1", "hi1"], {}), "ClipAny": (["lo_", "hi_"], {}),
}


@pytest.mark.parametrize("case", sorted(ACT_CASES))
def test_activation_standalone_and_fused(case, tmp_path):
    extra, attrs = ACT_CASES[case]
    op = "Clip" if case.startswith("Clip") else case
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node(op, ["c"] + extra, ["y"], **attrs)]
    inits = [W("w", 6, 4, 3, 3), W("b", 6), C("lo0", 0.0), C("hi6", 6.0), C("lom1", -1.0), C("hi1", 1.0),
             C("lo_", -0.5), C("hi_", 2.0)]
    opset = 14 if case == "HardSwish" else 13
    m = make(nodes, X4, [("y", None)], inits, opset=opset)
    fixed_grid = case in ("Sigmoid",)
    rep, q = check(m, tmp_path, sqnr=25 if fixed_grid else 30)
    ops = op_names(q)
    if case in ("Relu", "Clip6", "Clip1"):
        assert ops == ["CONV_2D"], ops  # fused
    # standalone on the input as well
    m2 = make([h.make_node(op, ["x"] + extra, ["y"], **attrs)], X4, [("y", None)], inits[2:], opset=opset)
    sub = tmp_path / "standalone"
    sub.mkdir()
    check(m2, sub, sqnr=25)


def test_prelu(tmp_path):
    m = make([h.make_node("PRelu", ["x", "s"], ["y"])], X4, [("y", None)], [W("s", 4, 1, 1)])
    rep, q = check(m, tmp_path)
    assert op_names(q) == ["PRELU"]


def test_hardswish_pattern_from_hardsigmoid_mul(tmp_path):
    nodes = [h.make_node("HardSigmoid", ["x"], ["hs"], alpha=1 / 6, beta=0.5), h.make_node("Mul", ["x", "hs"], ["y"])]
    m = make(nodes, X4, [("y", None)])
    rep, q = check(m, tmp_path)
    assert op_names(q) == ["HARD_SWISH"]


@pytest.mark.parametrize("opset,shape,axis", [(13, ["N", 10], -1), (11, ["N", 10], 1), (13, ["N", 4, 8, 8], 1)])
def test_softmax(opset, shape, axis, tmp_path):
    m = make([h.make_node("Softmax", ["x"], ["y"], axis=axis)], [("x", shape)], [("y", None)], opset=opset)
    check(m, tmp_path, sqnr=25)


POOL_CASES = {
    "max2": ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "max3_s2_p1": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "max3_ceil": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "avg2": ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "avg3_same": ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "avg3_incl": ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
}


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_pool(case, tmp_path):
    op, attrs = POOL_CASES[case]
    m = make([h.make_node(op, ["x"], ["y"], **attrs)], X4, [("y", None)])
    # average pooling keeps its input's scale (TFLite spec) while averaging k*k values shrinks the
    # signal by about sqrt(k*k): up to 10*log10(9) = 9.5 dB less SQNR than its input
    check(m, tmp_path, sqnr=30 if op == "MaxPool" else 25)


@pytest.mark.parametrize("opset", [13, 18])
def test_global_pool_and_reduce_mean(opset, tmp_path):
    if opset >= 18:
        red = h.make_node("ReduceMean", ["x", "axes"], ["r"], keepdims=0)
    else:
        red = h.make_node("ReduceMean", ["x"], ["r"], axes=[2, 3], keepdims=0)
    nodes = [h.make_node("GlobalAveragePool", ["x"], ["g"]), h.make_node("Flatten", ["g"], ["gf"]), red,
             h.make_node("Add", ["gf", "r"], ["y"])]
    m = make(nodes, X4, [("y", None)], [C("axes", [2, 3], np.int64)], opset=opset)
    check(m, tmp_path)


def test_concat_slice_split_pad(tmp_path):
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Concat", ["x", "c"], ["cat"], axis=1),
             h.make_node("Slice", ["cat", "st", "en", "ax", "sp"], ["sl"]),
             h.make_node("Split", ["sl", "splits"], ["s1", "s2"], axis=1),
             h.make_node("Pad", ["s1", "pads"], ["p1"], mode="constant"),
             h.make_node("Pad", ["s2", "pads"], ["p2"], mode="reflect"),
             h.make_node("Concat", ["p1", "p2"], ["y"], axis=1)]
    inits = [W("w", 4, 4, 3, 3), W("b", 4), C("st", [0, 1], np.int64), C("en", [7, 8], np.int64),
             C("ax", [1, 2], np.int64), C("sp", [1, 1], np.int64), C("splits", [3, 4], np.int64),
             C("pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64)]
    m = make(nodes, X4, [("y", None)], inits)
    rep, q = check(m, tmp_path)
    assert "TRANSPOSE" not in op_names(q)


def test_shape_arithmetic_reshape_transpose_squeeze(tmp_path):
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as PyTorch exports x.view(x.size(0), -1)
    nodes = [h.make_node("Shape", ["x"], ["shp"]),
             h.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
             h.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             h.make_node("Concat", ["n1", "minus1"], ["newshape"], axis=0),
             h.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 3, 1]),
             h.make_node("Reshape", ["xt", "newshape"], ["flat"]),
             h.make_node("Unsqueeze", ["flat", "ax2"], ["u"]),
             h.make_node("Squeeze", ["u", "ax2"], ["y"])]
    inits = [C("zero", 0, np.int64), C("ax0", [0], np.int64), C("minus1", [-1], np.int64), C("ax2", [2], np.int64)]
    m = make(nodes, X4, [("y", None)], inits)
    rep, q = check(m, tmp_path)
    # NHWC input and a Transpose to NHWC cancel: the flatten needs no TRANSPOSE
    assert op_names(q).count("TRANSPOSE") == 0, op_names(q)


@pytest.mark.parametrize("mode,ctm", [("nearest", "asymmetric"), ("nearest", "half_pixel"), ("linear", "half_pixel"),
                                      ("linear", "align_corners"), ("upsample", None)])
def test_resize(mode, ctm, tmp_path):
    if mode == "upsample":
        node = h.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")
        m = make([node], X4, [("y", None)], [C("scales", [1, 1, 2, 2])], opset=9)
    else:
        attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
        if mode == "nearest" and ctm == "asymmetric":
            attrs["nearest_mode"] = "floor"  # PyTorch's export; half_pixel keeps ONNX's default round_prefer_floor
        node = h.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)
        m = make([node], X4, [("y", None)], [C("scales", [1, 1, 2, 2])])
    check(m, tmp_path)


def test_identity_constant_and_transpose_layouts(tmp_path):
    nodes = [h.make_node("Constant", [], ["k"], value=nh.from_array(np.full((1, 4, 1, 1), 0.5, np.float32))),
             h.make_node("Identity", ["x"], ["xi"]),
             h.make_node("Mul", ["xi", "k"], ["m"]),
             h.make_node("Transpose", ["m"], ["t"], perm=[0, 3, 2, 1]),
             h.make_node("Relu", ["t"], ["y"])]
    m = make(nodes, X4, [("y", None)])
    check(m, tmp_path)


# ---------------------------------------------------------------------------------------------
# small nets
# ---------------------------------------------------------------------------------------------

def mobilenet_block(opset=13):
    """conv-bn-relu6, depthwise-bn-relu6, pointwise-bn, residual add, global pool, gemm, softmax."""
    def bn(prefix, c):
        return [W(f"{prefix}_g", c), W(f"{prefix}_b", c), W(f"{prefix}_m", c, scale=0.1),
                W(f"{prefix}_v", c, positive=True)]
    nodes = [
        h.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("BatchNormalization", ["c1", "bn1_g", "bn1_b", "bn1_m", "bn1_v"], ["b1"]),
        h.make_node("Clip", ["b1", "zero", "six"], ["r1"]),
        h.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=16),
        h.make_node("BatchNormalization", ["c2", "bn2_g", "bn2_b", "bn2_m", "bn2_v"], ["b2"]),
        h.make_node("Clip", ["b2", "zero", "six"], ["r2"]),
        h.make_node("Conv", ["r2", "w3"], ["c3"]),
        h.make_node("BatchNormalization", ["c3", "bn3_g", "bn3_b", "bn3_m", "bn3_v"], ["b3"]),
        h.make_node("Add", ["b3", "r1"], ["res"]),
        h.make_node("GlobalAveragePool", ["res"], ["gp"]),
        h.make_node("Flatten", ["gp"], ["f"]),
        h.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        h.make_node("Softmax", ["logits"], ["y"], axis=1 if opset < 13 else -1),
    ]
    inits = [W("w1", 16, 3, 3, 3), W("w2", 16, 1, 3, 3), W("w3", 16, 16, 1, 1, scale=0.2), W("wf", 10, 16),
             W("bf", 10), C("zero", 0.0), C("six", 6.0)] + bn("bn1", 16) + bn("bn2", 16) + bn("bn3", 16)
    return make(nodes, [("x", ["N", 3, 16, 16])], [("y", ["N", 10])], inits, opset=opset)


@pytest.mark.parametrize("opset", [11, 13, 17, 21])
def test_mobilenet_block(opset, tmp_path):
    m = mobilenet_block(opset)
    rep, q = check(m, tmp_path, sqnr=25, per_layer=True)
    ops = op_names(q)
    assert "TRANSPOSE" not in ops and "RELU6" not in ops and "BATCH_NORM" not in ops, ops
    # the PAD is ONNX's symmetric padding of a stride-2 conv, which TFLite's SAME cannot express
    assert ops == ["PAD", "CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D", "ADD", "MEAN", "RESHAPE", "FULLY_CONNECTED",
                   "SOFTMAX"], ops
    assert rep.outputs[0].top1_agreement is not None and rep.outputs[0].top1_agreement >= 80
    assert len(rep.layers) == len(ops) and all(ld.sqnr_db > 20 for ld in rep.layers)
    # weights: int8 per output channel, bias int32 with scale in_scale * w_scale
    conv = q.main.operators[1]
    w = q.main.tensors[conv.inputs[1]]
    b = q.main.tensors[conv.inputs[2]]
    x = q.main.tensors[conv.inputs[0]]
    assert w.dtype == "int8" and w.quant.scale.size == 16 and np.all(w.quant.zero_point == 0)
    assert np.abs(q.tensor_data(w)).max() <= 127
    assert b.dtype == "int32" and np.allclose(b.quant.scale, x.quant.scale[0] * w.quant.scale, rtol=1e-6)
    dw = q.main.operators[2]
    assert q.main.tensors[dw.inputs[1]].quant.quantized_dimension == 3
    sm = q.main.tensors[q.main.operators[-1].outputs[0]]
    assert np.isclose(sm.quant.scale[0], 1 / 256) and sm.quant.zero_point[0] == -128


@pytest.mark.parametrize("io_type", ["uint8", "float32"])
def test_io_types(io_type, tmp_path):
    m = mobilenet_block()
    rep, q = check(m, tmp_path, sqnr=25, io_type=io_type)
    ins = [q.main.tensors[i].dtype for i in q.main.inputs]
    outs = [q.main.tensors[i].dtype for i in q.main.outputs]
    assert ins == [io_type] and outs == [io_type]


def test_conversion_is_reproducible(tmp_path):
    m = mobilenet_block()
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    calib = data_for(m)
    a = convert(p, tmp_path / "a.tflite", calib=calib, use_cache=False)
    b = convert(p, tmp_path / "b.tflite", calib=calib)
    c = convert(p, tmp_path / "c.tflite", calib=calib)  # from the cache
    assert c.calibration["cached"] and not b.calibration["cached"]
    assert (tmp_path / "a.tflite").read_bytes() == (tmp_path / "b.tflite").read_bytes() == \
        (tmp_path / "c.tflite").read_bytes()
    assert a.sha256 == c.sha256


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------

def test_unsupported_op_is_named_with_node_and_opset(tmp_path):
    m = make([h.make_node("Conv", ["x", "w"], ["c"]), h.make_node("Erf", ["c"], ["y"], name="Erf@7")], X4,
             [("y", None)], [W("w", 4, 4, 1, 1)])
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(UnsupportedOpError, match=r"Erf.*Erf@7.*opset 13"):
        convert(p, tmp_path / "o.tflite", float_only=True)


def test_dynamic_dims_need_input_shape(tmp_path):
    m = make([h.make_node("Relu", ["x"], ["y"])], [("x", ["N", 3, "H", "W"])], [("y", None)])
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(ConversionError, match=r"input 'x'.*dimension 2.*--input-shape x:1,3,N,N"):
        convert(p, tmp_path / "o.tflite", float_only=True)
    rep = convert(p, tmp_path / "o.tflite", float_only=True, input_shape="x:1,3,8,8")
    assert rep.io["inputs"][0]["shape"] == [1, 8, 8, 3]


def test_calibration_data_checks(tmp_path):
    m = mobilenet_block()
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(ConversionError, match=r"shape \[4, 3, 8, 8\]; expected \[N, 3, 16, 16\]"):
        convert(p, tmp_path / "o.tflite", calib=np.zeros((4, 3, 8, 8), np.float32))
    with pytest.raises(ConversionError, match="dtype uint8"):
        convert(p, tmp_path / "o.tflite", calib=np.zeros((4, 3, 16, 16), np.uint8))
    with pytest.raises(ConversionError, match="empty"):
        convert(p, tmp_path / "o.tflite", calib=np.zeros((0, 3, 16, 16), np.float32))
    with pytest.raises(ConversionError, match="calibration data is required"):
        convert(p, tmp_path / "o.tflite")
    # NHWC arrays are accepted too
    rep = convert(p, tmp_path / "o.tflite", calib=RNG.standard_normal((6, 16, 16, 3)).astype(np.float32))
    assert rep.outputs


def test_random_calibration_warns(tmp_path):
    m = mobilenet_block()
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    rep = convert(p, tmp_path / "o.tflite", calib="random")
    assert rep.calibration["random"] and any("RANDOM" in w for w in rep.warnings)


def test_tf2onnx_style_nhwc_input(tmp_path):
    """tf2onnx keeps TensorFlow's NHWC input and transposes to NCHW: the input stays NHWC, no TRANSPOSE."""
    nodes = [h.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
             h.make_node("Conv", ["xt", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 3, 1])]
    m = make(nodes, [("x", ["N", 8, 8, 4])], [("y", ["N", 8, 8, 6])], [W("w", 6, 4, 3, 3), W("b", 6)])
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    calib = data_for(m)
    rep = convert(p, tmp_path / "q.tflite", calib=calib)
    q = read_model((tmp_path / "q.tflite").read_bytes())
    assert [q.op_name(op) for op in q.main.operators] == ["CONV_2D"]
    assert q.main.tensors[q.main.inputs[0]].shape == (1, 8, 8, 4)
    assert q.main.tensors[q.main.outputs[0]].shape == (1, 8, 8, 6)
    assert rep.outputs[0].sqnr_db > 30
    assert rep.xnnpack_partitions in (None, 1)


@pytest.mark.parametrize("opset", [11, 13])
def test_qdq_model_from_onnxruntime_quantize_static(opset, tmp_path):
    """A QDQ model (per-channel weights, as ONNX Runtime writes it) converts: the weights' DequantizeLinear
    folds, the activations' Q/DQ pairs drop out, and the result is the same plain int8 graph. At opset 11
    the per-channel DequantizeLinear carries an ``axis`` that only opset 13 defines (ONNX Runtime itself
    refuses to load that model); the converter dequantizes those weights itself."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    m = mobilenet_block(opset)
    src = tmp_path / "f.onnx"
    src.write_bytes(m.SerializeToString())
    calib = data_for(m)[0]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": c[None]} for c in calib[:16]])

        def get_next(self):
            return next(self.it, None)
    qdq = tmp_path / "qdq.onnx"
    quantize_static(str(src), str(qdq), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    ops = {n.op_type for n in onnx.load(str(qdq)).graph.node}
    assert "DequantizeLinear" in ops and "QuantizeLinear" in ops
    convert(qdq, tmp_path / "q.tflite", calib=calib)
    qb = (tmp_path / "q.tflite").read_bytes()
    q = read_model(qb)
    assert [q.op_name(op) for op in q.main.operators] == ["PAD", "CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D", "ADD",
                                                          "MEAN", "RESHAPE", "FULLY_CONNECTED", "SOFTMAX"]
    # against the *float* model (the QDQ model's weights carry ONNX Runtime's rounding)
    from edgerun.convert.drift import Int8Runner
    run = Int8Runner(qb)
    sess = session(m)
    ref = np.concatenate([sess.run(None, {"x": c[None]})[0] for c in calib[-8:]])
    got = np.concatenate([run([np.transpose(c[None], (0, 2, 3, 1))])[0] for c in calib[-8:]])
    assert 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2)) > 25


def test_shipped_digits_model_accuracy(tmp_path):
    """The README's main job: int8 within 1 point of float on the 360-image test split, and the edgerun
    interpreter's int8 outputs identical to LiteRT's reference kernels."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "digits_int8.tflite"
    rep = convert(root / "models" / "digits_cnn.onnx", out, calib=str(root / "models" / "calib_digits.npz"))
    q = read_model(out.read_bytes())
    assert [q.op_name(op) for op in q.main.operators] == ["CONV_2D", "MAX_POOL_2D", "CONV_2D", "MAX_POOL_2D",
                                                          "RESHAPE", "FULLY_CONNECTED", "FULLY_CONNECTED", "SOFTMAX"]
    assert rep.outputs[0].top1_agreement == 100.0 and rep.outputs[0].sqnr_db > 40
    assert "edgerun.preprocessing" in q.metadata_dict()
    import sys
    sys.path.insert(0, str(root))
    from tools.eval_digits import evaluate
    r = evaluate(out)
    assert r["float_accuracy"] > 97 and abs(r["float_accuracy"] - r["int8_accuracy"]) <= 1.0, r
    assert r["edgerun_bit_exact_with_litert_ref"]


def test_conv1d_pool1d_keyword_spotting_style(tmp_path):
    """1-D convolutions (audio): lowered as height-1 CONV_2D between free RESHAPEs."""
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[2, 2], strides=[2]),
             h.make_node("BatchNormalization", ["c1", "g", "bb", "m", "v"], ["bn"]),
             h.make_node("Relu", ["bn"], ["r1"]),
             h.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2], strides=[2]),
             h.make_node("Conv", ["p1", "w2"], ["c2"], group=8, pads=[1, 1], kernel_shape=[3]),
             h.make_node("GlobalAveragePool", ["c2"], ["gp"]),
             h.make_node("Flatten", ["gp"], ["f"]),
             h.make_node("Gemm", ["f", "wf"], ["y"], transB=1)]
    inits = [W("w1", 8, 1, 5), W("b1", 8), W("g", 8), W("bb", 8), W("m", 8), W("v", 8, positive=True),
             W("w2", 8, 1, 3), W("wf", 4, 8)]
    m = make(nodes, [("x", ["N", 1, 64])], [("y", ["N", 4])], inits)
    rep, q = check(m, tmp_path, sqnr=25)
    ops = op_names(q)
    assert "TRANSPOSE" not in ops and ops.count("CONV_2D") == 1 and ops.count("DEPTHWISE_CONV_2D") == 1, ops
