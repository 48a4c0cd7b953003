"""ONNX lowerings beyond the conformance suites, one small model each, ``--float`` against ONNX Runtime.

Each model is built with onnx.helper, converted (NCHW inputs), run by LiteRT's builtin kernels and,
where edgerun has float kernels for every op of the result, by edgerun too; outputs must agree with
ONNX Runtime within 1e-4 of the output's largest magnitude. Refusals are checked to name the op and
the way out.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from edgerun.convert.onnx import onnx_to_graph, session
from edgerun.errors import EdgerunError
from edgerun.ops.registry import registered_pairs
from edgerun.schema.reader import read_model
from edgerun.testing import run_edgerun, run_litert

RNG = np.random.default_rng(5)
F = TP.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=18):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, None) for n, t in outputs], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


def _check(model, feeds):
    sess = session(model)
    want = sess.run(None, feeds)
    shapes = {k: v.shape for k, v in feeds.items()}
    g, io = onnx_to_graph(model, shapes, "NCHW")
    data = g.to_bytes("test")
    rm = read_model(data)
    xs = [feeds[n].astype(rm.main.tensors[t].np_dtype) for (n, _), t in zip(io["inputs"], rm.main.inputs)]
    runs = [run_litert(data, xs, reference=False)]
    ops = {rm.operator_codes[o.opcode_index].builtin for o in rm.main.operators}
    pairs = set(registered_pairs())
    if all((op, "float32") in pairs or (op, "int32") in pairs or (op, "bool") in pairs for op in ops):
        runs.append(run_edgerun(data, xs))
    for got in runs:
        for gv, wv, (_, perm) in zip(got, want, io["outputs"]):
            gv = np.transpose(gv, np.argsort(perm)).astype(np.float64)
            wv = np.asarray(wv, np.float64)
            assert gv.shape == wv.shape
            scale = max(float(np.abs(wv).max()), 1e-6)
            assert float(np.abs(gv - wv).max()) <= 1e-4 * scale
    return ops


def _x(*shape, positive=False):
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.1 if positive else a


UNARY = ["Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish", "Log", "Reciprocal", "Floor", "Ceil", "Neg",
         "Sign", "Shrink"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    attrs = {"alpha": 0.7} if op in ("Elu", "Celu") else {}
    positive = op in ("Log",)
    m = _model([h.make_node(op, ["x"], ["y"], **attrs)], [("x", F, [2, 3, 4, 5])], [("y", F)])
    _check(m, {"x": _x(2, 3, 4, 5, positive=positive) * (1 if op != "Reciprocal" else 1) + (0.5 if op == "Reciprocal" else 0)})


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_variadic(op):
    m = _model([h.make_node(op, ["a", "b", "c"], ["y"])], [("a", F, [2, 3, 4]), ("b", F, [3, 4]), ("c", F, [1, 4])],
               [("y", F)])
    _check(m, {"a": _x(2, 3, 4), "b": _x(3, 4), "c": _x(1, 4)})


def test_where_and_comparisons():
    nodes = [h.make_node("Greater", ["a", "b"], ["gt"]), h.make_node("Less", ["a", "c"], ["lt"]),
             h.make_node("Or", ["gt", "lt"], ["either"]), h.make_node("Not", ["either"], ["neither"]),
             h.make_node("Where", ["neither", "a", "b"], ["y"])]
    m = _model(nodes, [("a", F, [2, 6]), ("b", F, [2, 6]), ("c", F, [2, 6])], [("y", F)])
    _check(m, {"a": _x(2, 6), "b": _x(2, 6), "c": _x(2, 6)})


def test_pow_runtime_exponent_and_cast():
    nodes = [h.make_node("Pow", ["a", "b"], ["p"]), h.make_node("Cast", ["p"], ["i"], to=TP.INT32),
             h.make_node("Cast", ["i"], ["y"], to=TP.FLOAT)]
    m = _model(nodes, [("a", F, [3, 4]), ("b", F, [3, 4])], [("y", F)])
    _check(m, {"a": _x(3, 4, positive=True) * 3, "b": _x(3, 4)})


@pytest.mark.parametrize("eq", ["bij,bjk->bik", "bji,bjk->bik", "ij,kj->ik"])
def test_einsum_matmul(eq):
    a_shape = {"bij,bjk->bik": [2, 3, 4], "bji,bjk->bik": [2, 4, 3], "ij,kj->ik": [3, 4]}[eq]
    b_shape = {"bij,bjk->bik": [2, 4, 5], "bji,bjk->bik": [2, 4, 5], "ij,kj->ik": [5, 4]}[eq]
    m = _model([h.make_node("Einsum", ["a", "b"], ["y"], equation=eq)], [("a", F, a_shape), ("b", F, b_shape)],
               [("y", F)])
    _check(m, {"a": _x(*a_shape), "b": _x(*b_shape)})


def test_einsum_refuses_a_trace():
    m = _model([h.make_node("Einsum", ["a"], ["y"], equation="ii->i")], [("a", F, [3, 3])], [("y", F)])
    with pytest.raises(EdgerunError, match="Einsum 'ii->i'"):
        onnx_to_graph(m, {"a": (3, 3)}, "NCHW")


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceSumSquare", "ReduceL1", "ReduceLogSumExp", "ReduceProd"])
@pytest.mark.parametrize("keep", [0, 1])
def test_composed_reductions(op, keep):
    axes = nh.from_array(np.array([1, 3], np.int64), "axes")
    m = _model([h.make_node(op, ["x", "axes"], ["y"], keepdims=keep)], [("x", F, [2, 3, 4, 5])], [("y", F)], [axes])
    _check(m, {"x": _x(2, 3, 4, 5) * 0.5})


def test_topk_both_outputs():
    k = nh.from_array(np.array([3], np.int64), "k")
    nodes = [h.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
             h.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT)]
    m = _model(nodes, [("x", F, [2, 7, 3])], [("v", F), ("fi", F)], [k])
    _check(m, {"x": _x(2, 7, 3)})


def test_topk_smallest_is_refused_with_the_alternative():
    k = nh.from_array(np.array([2], np.int64), "k")
    m = _model([h.make_node("TopK", ["x", "k"], ["v", "i"], largest=0)], [("x", F, [2, 5])], [("v", F), ("i", TP.INT64)],
               [k])
    with pytest.raises(EdgerunError, match="largest=0.*negate"):
        onnx_to_graph(m, {"x": (2, 5)}, "NCHW")


def test_layer_and_group_norm():
    C = 6
    s, b = nh.from_array(_x(5) + 1, "s"), nh.from_array(_x(5), "b")
    gs, gb = nh.from_array(_x(C) + 1, "gs"), nh.from_array(_x(C), "gb")
    nodes = [h.make_node("LayerNormalization", ["x", "s", "b"], ["ln"], axis=-1, epsilon=1e-5),
             h.make_node("GroupNormalization", ["ln", "gs", "gb"], ["y"], num_groups=3, epsilon=1e-5)]
    m = _model(nodes, [("x", F, [2, C, 4, 5])], [("y", F)], [s, b, gs, gb], opset=21)
    _check(m, {"x": _x(2, C, 4, 5) * 2 + 1})


def test_instance_norm_lrn_and_tile_expand():
    C = 5
    nodes = [h.make_node("InstanceNormalization", ["x", "s", "b"], ["n"], epsilon=1e-5),
             h.make_node("LRN", ["n"], ["l"], size=3, alpha=1e-2, beta=0.75, bias=1.0),
             h.make_node("Tile", ["l", "reps"], ["t"]), h.make_node("Expand", ["t", "shape"], ["y"])]
    inits = [nh.from_array(_x(C) + 1, "s"), nh.from_array(_x(C), "b"),
             nh.from_array(np.array([1, 1, 2, 3], np.int64), "reps"), nh.from_array(np.array([2, 1, 1, 1], np.int64),
                                                                                    "shape")]
    m = _model(nodes, [("x", F, [1, C, 4, 3])], [("y", F)], inits)
    _check(m, {"x": _x(1, C, 4, 3)})


@pytest.mark.parametrize("mode", ["edge", "wrap", "reflect"])
def test_pad_modes(mode):
    pads = nh.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "pads")
    m = _model([h.make_node("Pad", ["x", "pads"], ["y"], mode=mode)], [("x", F, [1, 2, 4, 5])], [("y", F)], [pads])
    _check(m, {"x": _x(1, 2, 4, 5)})


def test_gemm_runtime_operands_with_transposes():
    m = _model([h.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
               [("a", F, [4, 3]), ("b", F, [5, 4]), ("c", F, [3, 5])], [("y", F)])
    _check(m, {"a": _x(4, 3), "b": _x(5, 4), "c": _x(3, 5)})


def test_avgpool_exclude_pad_and_ceil_mode():
    m = _model([h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1],
                            count_include_pad=0, ceil_mode=1)], [("x", F, [1, 3, 8, 7])], [("y", F)])
    _check(m, {"x": _x(1, 3, 8, 7)})


def test_conv3d_and_pool3d():
    w = nh.from_array(_x(4, 2, 2, 3, 3) * 0.3, "w")
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 0, 0, 1, 1], strides=[2, 1, 1], dilations=[1, 1, 2]),
             h.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2, 2], strides=[1, 2, 2], pads=[0, 1, 1, 1, 0, 0])]
    m = _model(nodes, [("x", F, [1, 2, 5, 6, 7])], [("y", F)], [w])
    ops = _check(m, {"x": _x(1, 2, 5, 6, 7)})
    assert "CONV_3D" not in ops


def test_int64_input_embedding_and_double_input():
    table = nh.from_array(_x(10, 4), "table")
    nodes = [h.make_node("Gather", ["table", "ids"], ["e"]), h.make_node("Cast", ["d"], ["df"], to=TP.FLOAT),
             h.make_node("Add", ["e", "df"], ["y"])]
    m = _model(nodes, [("ids", TP.INT64, [2, 3]), ("d", TP.DOUBLE, [2, 3, 4])], [("y", F)], [table])
    _check(m, {"ids": RNG.integers(0, 10, (2, 3)).astype(np.int64), "d": _x(2, 3, 4).astype(np.float64)})


def test_dropout_mask_output_folds():
    nodes = [h.make_node("Dropout", ["x"], ["d", "mask"]), h.make_node("Cast", ["mask"], ["mf"], to=TP.FLOAT),
             h.make_node("Mul", ["d", "mf"], ["y"])]
    m = _model(nodes, [("x", F, [2, 5])], [("y", F)])
    _check(m, {"x": _x(2, 5)})


def test_opset_1_style_model_is_upgraded():
    """An opset-6 graph (PRelu per-channel slopes, the pre-7 broadcast rule) converts as ONNX Runtime
    runs it after the version converter, the slope fix-up included."""
    slope = nh.from_array(np.array([0.1, 0.2, 0.3], np.float32), "slope")
    m = _model([h.make_node("PRelu", ["x", "slope"], ["y"])], [("x", F, [2, 3, 4, 5]), ("slope", F, [3])],
               [("y", F)], [slope], opset=6)
    m.ir_version = 3
    from edgerun.convert.onnx.load import upgrade
    up, notes = upgrade(m)
    assert "opset 6 upgraded to 13" in notes[0]
    x = _x(2, 3, 4, 5)
    g, io = onnx_to_graph(m, {"x": x.shape}, "NCHW")
    got = run_litert(g.to_bytes("t"), [x], reference=False)[0]
    want = np.where(x >= 0, x, x * np.array([0.1, 0.2, 0.3], np.float32).reshape(1, 3, 1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert onnx.checker.check_model(up) is None


def _rnn_model(op, direction, seq=4, batch=2, inp=3, H=5, with_init=False, lbr=0):
    gates = 4 if op == "LSTM" else 3
    dirs = 2 if direction == "bidirectional" else 1
    inits = [nh.from_array(_x(dirs, gates * H, inp) * 0.5, "W"), nh.from_array(_x(dirs, gates * H, H) * 0.5, "R"),
             nh.from_array(_x(dirs, 2 * gates * H) * 0.3, "B")]
    ins = ["x", "W", "R", "B", ""]
    inputs = [("x", F, [seq, batch, inp])]
    if with_init:
        ins.append("h0")
        inputs.append(("h0", F, [dirs, batch, H]))
        if op == "LSTM":
            ins.append("c0")
            inits.append(nh.from_array(_x(dirs, batch, H), "c0"))
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    attrs = {"hidden_size": H, "direction": direction}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    m = _model([h.make_node(op, ins, outs, **attrs)], inputs, [(o, F) for o in outs], inits)
    feeds = {"x": _x(seq, batch, inp)}
    if with_init:
        feeds["h0"] = _x(dirs, batch, H)
    return m, feeds


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("with_init", [False, True])
def test_lstm_unrolled(direction, with_init):
    m, feeds = _rnn_model("LSTM", direction, with_init=with_init)
    ops = _check(m, feeds)
    assert "FULLY_CONNECTED" in ops and "LSTM" not in ops


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_unrolled(direction, lbr):
    m, feeds = _rnn_model("GRU", direction, lbr=lbr, with_init=True)
    _check(m, feeds)


def test_lstm_peepholes_refused():
    m, _ = _rnn_model("LSTM", "forward")
    node = m.graph.node[0]
    while len(node.input) < 8:
        node.input.append("")
    node.input[7] = "P"
    m.graph.initializer.append(nh.from_array(_x(1, 15), "P"))
    with pytest.raises(EdgerunError, match="peephole"):
        onnx_to_graph(m, {"x": (4, 2, 3)}, "NCHW")


@pytest.mark.slow
def test_unrolled_lstm_quantizes_bit_identically(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))
    from edgerun.convert import convert
    from edgerun.runtime.interpreter import Interpreter
    from edgerun.testing import random_inputs
    m, _ = _rnn_model("LSTM", "bidirectional", seq=3)
    src = tmp_path / "lstm.onnx"
    onnx.save(m, str(src))
    out = tmp_path / "lstm_int8.tflite"
    convert(str(src), str(out), calib="random", input_layout="NCHW")
    q = out.read_bytes()
    xs = random_inputs(Interpreter(model_content=q).get_input_details(), 4)
    for a, b in zip(run_litert(q, xs), run_edgerun(q, xs)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
