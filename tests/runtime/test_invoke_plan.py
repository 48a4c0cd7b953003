"""The compiled invoke plan (edgerun/runtime/plan.py): bound calls, composed table chains and the
plan-only kernel paths give exactly what LiteRT's reference kernels give, and exactly what the
unfused steps give (``experimental_preserve_all_tensors`` keeps every step on its own)."""

import itertools
from pathlib import Path

import numpy as np
import pytest

from edgerun import EdgerunError, Interpreter
from edgerun.ir import ModelBuilder, Subgraph
from edgerun.litert import make_interpreter

ALL_INT8 = np.arange(-128, 128, dtype=np.int8)


def _run(data: bytes, inputs: list[np.ndarray], **kw) -> list[np.ndarray]:
    it = Interpreter(model_content=data, **kw)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def _litert(data: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    lt = make_interpreter(data, reference=True)
    lt.allocate_tensors()
    for d, x in zip(lt.get_input_details(), inputs):
        lt.set_tensor(d["index"], x)
    lt.invoke()
    return [lt.get_tensor(d["index"]) for d in lt.get_output_details()]


def _names(data: bytes, **kw) -> list[str]:
    it = Interpreter(model_content=data, **kw)
    it.allocate_tensors()
    return it.plan_calls()


def _table_chain(branch: bool = False, shape=(4, 64)) -> bytes:
    """x -> RELU (rescaled) -> LOGISTIC -> QUANTIZE int8 -> int8 (another scale) -> y; with
    ``branch`` the RELU output is also a model output, so it must stay written."""
    b = ModelBuilder()
    x = b.input("x", shape, "int8", (0.07, 3))
    r = b.tensor("r", shape, "int8", (0.05, -128))
    s = b.tensor("s", shape, "int8", (1 / 256, -128))
    y = b.tensor("y", shape, "int8", (0.0061, -7))
    b.op("RELU", [x], [r])
    b.op("LOGISTIC", [r], [s])
    b.op("QUANTIZE", [s], [y])
    b.output(*([y, r] if branch else [y]))
    return b.to_bytes()


@pytest.mark.parametrize("shape", [(4, 64), (3, 40, 50)])  # a take; bytes.translate (>= 4096 values)
def test_table_chain_composes_into_one_lookup_bit_exact(shape):
    data = _table_chain(shape=shape)
    assert _names(data) == ["RELU+LOGISTIC+QUANTIZE"]
    assert _names(data, experimental_preserve_all_tensors=True) == ["RELU", "LOGISTIC", "QUANTIZE"]
    x = np.resize(ALL_INT8, shape)
    got = _run(data, [x])[0]
    np.testing.assert_array_equal(got, _litert(data, [x])[0])
    np.testing.assert_array_equal(got, _run(data, [x], experimental_preserve_all_tensors=True)[0])
    assert np.unique(got).size > 20  # the chain is not trivial over the 256 codes


def test_table_chain_keeps_an_intermediate_someone_reads():
    data = _table_chain(branch=True)
    assert _names(data) == ["RELU", "LOGISTIC+QUANTIZE"]
    x = ALL_INT8[::-1].reshape(4, 64)
    got, want = _run(data, [x]), _litert(data, [x])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_dequantize_float_ops_quantize_chain_is_one_int8_table():
    """DEQUANTIZE -> float LOGISTIC -> float RELU6 -> QUANTIZE (a float island an int8 graph
    keeps) composes into one int8 lookup: the same bytes as the separate steps."""
    b = ModelBuilder()
    x = b.input("x", (3, 128), "int8", (0.06, 7))
    f = b.tensor("f", (3, 128), "float32")
    g = b.tensor("g", (3, 128), "float32")
    h = b.tensor("h", (3, 128), "float32")
    y = b.tensor("y", (3, 128), "int8", (0.004, -100))
    b.op("DEQUANTIZE", [x], [f])
    b.op("LOGISTIC", [f], [g])
    b.op("RELU6", [g], [h])
    b.op("QUANTIZE", [h], [y])
    b.output(y)
    data = b.to_bytes()
    assert _names(data) == ["DEQUANTIZE+LOGISTIC+RELU6+QUANTIZE"]
    xv = np.resize(ALL_INT8, (3, 128))  # every code, then half of them again
    got = _run(data, [xv])[0]
    np.testing.assert_array_equal(got, _run(data, [xv], experimental_preserve_all_tensors=True)[0])
    np.testing.assert_array_equal(got, _litert(data, [xv])[0])
    assert np.unique(got).size > 50


def test_add_of_a_constant_is_a_table_and_composes():
    b = ModelBuilder()
    x = b.input("x", (2, 128), "int8", (0.03, -5))
    c = b.const("c", np.array([17], np.int8), quant=(0.02, 4))
    a = b.tensor("a", (2, 128), "int8", (0.045, 10))
    y = b.tensor("y", (2, 128), "int8", (0.04, -20))
    b.op("ADD", [x, c], [a], fused_activation_function=0)
    b.op("RELU6", [a], [y])
    b.output(y)
    data = b.to_bytes()
    assert _names(data) == ["ADD+RELU6"]
    xv = ALL_INT8.reshape(2, 128)
    np.testing.assert_array_equal(_run(data, [xv])[0], _litert(data, [xv])[0])


@pytest.mark.parametrize("op", ["MUL", "SUB", "ADD"])
@pytest.mark.parametrize("const_first", [False, True])
@pytest.mark.parametrize("hw", [(2, 3), (40, 30)])  # the bound call; the eval path (large)
def test_per_channel_constant_operand_rows_bit_exact(op, const_first, hw):
    """A constant operand with one value per channel: the table rows of its distinct values."""
    b = ModelBuilder()
    x = b.input("x", (1, *hw, 6), "int8", (0.04, -9))
    c = b.const("c", np.array([-128, 5, 5, 127, 0, -77], np.int8), quant=(0.03, 2))
    y = b.tensor("y", (1, *hw, 6), "int8", (0.09, 11))
    b.op(op, [c, x] if const_first else [x, c], [y], fused_activation_function=0)
    b.output(y)
    data = b.to_bytes()
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    assert it.steps()[0].kernel.rows_table.size == 5 * 256
    xv = np.resize(ALL_INT8, (1, *hw, 6))
    np.testing.assert_array_equal(_run(data, [xv])[0], _litert(data, [xv])[0])


def test_int8_binary_and_data_movement_steps_bound_bit_exact():
    """ADD of two run-time tensors, CONCATENATION, STRIDED_SLICE and RESHAPE through their bound
    calls, over several inputs in one interpreter."""
    b = ModelBuilder()
    x1 = b.input("x1", (1, 3, 8), "int8", (0.05, 2))
    x2 = b.input("x2", (1, 3, 8), "int8", (0.1, 0))
    s = b.tensor("s", (1, 3, 8), "int8", (0.1, 0))
    cat = b.tensor("cat", (1, 6, 8), "int8", (0.1, 0))
    sl = b.tensor("sl", (1, 4, 8), "int8", (0.1, 0))
    y = b.tensor("y", (4, 8), "int8", (0.1, 0))
    b.op("ADD", [x1, x2], [s], fused_activation_function=0)
    b.op("CONCATENATION", [s, x2], [cat], axis=1, fused_activation_function=0)
    b.op("STRIDED_SLICE", [cat, b.const("b", np.array([0, 1, 0], np.int32)),
                           b.const("e", np.array([1, 5, 8], np.int32)),
                           b.const("st", np.array([1, 1, 1], np.int32))], [sl])
    b.op("RESHAPE", [sl, b.const("shape", np.array([4, 8], np.int32))], [y])
    b.output(y)
    data = b.to_bytes()
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    rng = np.random.default_rng(3)
    for _ in range(3):
        xs = [rng.integers(-128, 128, (1, 3, 8)).astype(np.int8) for _ in range(2)]
        for d, x in zip(it.get_input_details(), xs):
            it.set_tensor(d["index"], x)
        it.invoke()
        got = it.get_tensor(it.get_output_details()[0]["index"])
        np.testing.assert_array_equal(got, _litert(data, xs)[0])


def test_rescaled_concatenation_bound_call_equals_eval():
    """An int8 input with another scale (LiteRT's int8 kernel refuses it; edgerun applies the
    uint8 rescaling kernel): the bound call writes what the kernel's eval returns."""
    b = ModelBuilder()
    x1 = b.input("x1", (2, 3), "int8", (0.05, 2))
    x2 = b.input("x2", (2, 5), "int8", (0.08, -3))
    y = b.tensor("y", (2, 8), "int8", (0.1, 1))
    b.op("CONCATENATION", [x1, x2], [y], axis=1, fused_activation_function=1)
    b.output(y)
    it = Interpreter(model_content=b.to_bytes())
    it.allocate_tensors()
    rng = np.random.default_rng(0)
    x1v, x2v = (rng.integers(-128, 128, s).astype(np.int8) for s in ((2, 3), (2, 5)))
    it.set_tensor(0, x1v)
    it.set_tensor(1, x2v)
    it.invoke()
    step = it.steps()[0]
    step.kernel._out = None  # eval into a fresh array
    want = step.fn([x1v, x2v])[0]
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), want)
    assert want.min() >= 1  # the fused RELU clamps at the zero point


@pytest.mark.parametrize("hw,act", [((5, 5), 0), ((4, 8), 0), ((3, 7), 3), ((25, 5), 1)])
def test_global_int8_average_pool_table_bit_exact(hw, act):
    h, w = hw
    b = ModelBuilder()
    x = b.input("x", (1, h, w, 16), "int8", (0.04, -6))
    y = b.tensor("y", (1, 1, 1, 16), "int8", (0.03, 9))
    b.op("AVERAGE_POOL_2D", [x], [y], padding=1, stride_w=1, stride_h=1, filter_width=w,
         filter_height=h, fused_activation_function=act)
    b.output(y)
    data = b.to_bytes()
    rng = np.random.default_rng(h * w)
    for lo, hi in [(-128, 128), (-128, -100), (100, 128)]:  # mixed, and sums at either end
        xv = rng.integers(lo, hi, (1, h, w, 16)).astype(np.int8)
        np.testing.assert_array_equal(_run(data, [xv])[0], _litert(data, [xv])[0])


@pytest.mark.parametrize("n", [1, 3, 12, 100])
def test_one_row_int8_softmax_bit_exact(n):
    b = ModelBuilder()
    x = b.input("x", (1, n), "int8", (0.11, 5))
    y = b.tensor("y", (1, n), "int8", (1 / 256, -128))
    b.op("SOFTMAX", [x], [y], beta=1.0)
    b.output(y)
    data = b.to_bytes()
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    rng = np.random.default_rng(n)
    cases = [rng.integers(-128, 128, (1, n)) for _ in range(20)]
    cases += [np.full((1, n), 127), np.full((1, n), -128), rng.integers(-3, 3, (1, n))]  # ties
    for xv in cases:
        xv = xv.astype(np.int8)
        it.set_tensor(0, xv)
        it.invoke()
        np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]),
                                      _litert(data, [xv])[0])


def _state_model() -> bytes:
    """A streaming buffer as microWakeWord keeps it: state (1, 3, 4) <- last 3 rows of
    concat(state, x); y = concat(...). The init subgraph assigns zeros."""
    b = ModelBuilder()
    g = b.graph
    x = b.input("x", (1, 1, 4), "int8", (0.1, 0))
    h = b.tensor("handle", (), "resource")
    s = b.tensor("state", (1, 3, 4), "int8", (0.1, 0))
    cat = b.tensor("cat", (1, 4, 4), "int8", (0.1, 0))
    nxt = b.tensor("next", (1, 3, 4), "int8", (0.1, 0))
    b.op("CALL_ONCE", [], [], init_subgraph_index=1)
    b.op("VAR_HANDLE", [], [h], container="", shared_name="buf")
    b.op("READ_VARIABLE", [h], [s])
    b.op("CONCATENATION", [s, x], [cat], axis=1, fused_activation_function=0)
    b.op("STRIDED_SLICE", [cat, b.const("b", np.array([0, 1, 0], np.int32)),
                           b.const("e", np.array([1, 4, 4], np.int32)),
                           b.const("st", np.array([1, 1, 1], np.int32))], [nxt])
    b.op("ASSIGN_VARIABLE", [h, nxt], [])
    b.output(cat)
    init = Subgraph([], [], [], [], "init")
    b.model.subgraphs.append(init)
    b.graph = init
    h2 = b.tensor("handle", (), "resource")
    v0 = b.const("zeros", np.zeros((1, 3, 4), np.int8), quant=(0.1, 0))
    b.op("VAR_HANDLE", [], [h2], container="", shared_name="buf")
    b.op("ASSIGN_VARIABLE", [h2, v0], [])
    b.graph = g
    return b.to_bytes()


def test_streaming_state_steps_bound_and_var_handle_leaves_the_plan():
    data = _state_model()
    # STRIDED_SLICE hands ASSIGN_VARIABLE a view of the concatenation instead of copying
    assert _names(data) == ["CALL_ONCE", "READ_VARIABLE", "CONCATENATION", "ASSIGN_VARIABLE"]
    assert _names(data, experimental_preserve_all_tensors=True) == [
        "CALL_ONCE", "READ_VARIABLE", "CONCATENATION", "STRIDED_SLICE", "ASSIGN_VARIABLE"]
    lt = make_interpreter(data, reference=True)
    lt.allocate_tensors()
    er = Interpreter(model_content=data)
    er.allocate_tensors()
    seen = []
    for step in range(6):
        xv = np.full((1, 1, 4), step + 1, np.int8)
        for it in (lt, er):
            it.set_tensor(it.get_input_details()[0]["index"], xv)
            it.invoke()
        got = er.get_tensor(er.get_output_details()[0]["index"])
        np.testing.assert_array_equal(got, lt.get_tensor(lt.get_output_details()[0]["index"]))
        seen.append(got)
    np.testing.assert_array_equal(seen[-1][0, :, 0], [3, 4, 5, 6])  # the buffer really moves
    er.reset_all_variables()  # CALL_ONCE assigns the zeros again
    er.set_tensor(er.get_input_details()[0]["index"], np.full((1, 1, 4), 9, np.int8))
    er.invoke()
    np.testing.assert_array_equal(er.get_tensor(er.get_output_details()[0]["index"])[0, :, 0], [0, 0, 0, 9])


def test_view_steps_hand_views_only_when_contiguous_and_disjoint():
    """STRIDED_SLICE with a stride (not a contiguous view) stays a copy; the RESHAPE after it
    hands its view to RELU (the slice is a model output, so RELU's output cannot take its
    buffer); without the second output RELU's output may reuse it and RESHAPE stays a copy.
    Results equal LiteRT's and the unfused steps'."""
    b = ModelBuilder()
    x = b.input("x", (1, 4, 6), "int8", (0.05, 1))
    s = b.tensor("s", (1, 2, 6), "int8", (0.05, 1))
    r = b.tensor("r", (2, 6), "int8", (0.05, 1))
    y = b.tensor("y", (2, 6), "int8", (0.04, -3))
    b.op("STRIDED_SLICE", [x, b.const("b", np.array([0, 0, 0], np.int32)),
                           b.const("e", np.array([1, 4, 6], np.int32)),
                           b.const("st", np.array([1, 2, 1], np.int32))], [s])
    b.op("RESHAPE", [s, b.const("shape", np.array([2, 6], np.int32))], [r])
    b.op("RELU", [r], [y])
    b.output(y, s)
    data = b.to_bytes()
    assert _names(data) == ["STRIDED_SLICE", "RELU"]
    xv = np.resize(ALL_INT8[::5], (1, 4, 6))
    got = _run(data, [xv])
    for g, w, u in zip(got, _litert(data, [xv]), _run(data, [xv], experimental_preserve_all_tensors=True)):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(g, u)
    b.model.subgraphs[0].outputs = [y]
    data = b.to_bytes()
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    if np.may_share_memory(it.tensor(y)(), it.tensor(s)()):
        assert it.plan_calls() == ["STRIDED_SLICE", "RESHAPE", "RELU"]
    np.testing.assert_array_equal(_run(data, [xv])[0], _litert(data, [xv])[0])


def test_read_variable_before_any_assign_is_one_edgerun_error():
    b = ModelBuilder()
    x = b.input("x", (2,), "float32")
    h = b.tensor("handle", (), "resource")
    s = b.tensor("state", (2,), "float32")
    y = b.tensor("y", (2,), "float32")
    b.op("VAR_HANDLE", [], [h], container="", shared_name="never")
    b.op("READ_VARIABLE", [h], [s])
    b.op("ADD", [s, x], [y], fused_activation_function=0)
    b.output(y)
    it = Interpreter(model_content=b.to_bytes())
    it.allocate_tensors()
    with pytest.raises(EdgerunError, match="READ_VARIABLE of 'never' before any ASSIGN_VARIABLE"):
        it.invoke()


def test_profiling_names_the_composed_chain():
    it = Interpreter(model_content=_table_chain())
    it.allocate_tensors()
    it.set_profiling(True)
    it.invoke()
    assert set(it.profile) == {"RELU+LOGISTIC+QUANTIZE"}


WAKEWORD = Path.home() / ".cache" / "edgerun" / "fixtures" / "pymicro-wakeword-2.5.0"


@pytest.mark.parametrize("name", ["hey_jarvis", "okay_nabu"])
def test_streaming_wakeword_outputs_through_the_compiled_plan(name):
    """microWakeWord without preserve_all (composed LOGISTIC+QUANTIZE, bound state steps): the
    output equals LiteRT's reference kernels at every frame (tests/runtime/test_external_models.py
    fetches the models; every tensor is compared there with preserve_all)."""
    path = WAKEWORD / f"{name}.tflite"
    if not path.exists():
        pytest.skip(f"{path} not cached (tests/runtime/test_external_models.py fetches the pymicro-wakeword wheel)")
    data = path.read_bytes()
    lt = make_interpreter(data, reference=True)
    lt.allocate_tensors()
    er = Interpreter(model_content=data)
    er.allocate_tensors()
    assert "LOGISTIC+QUANTIZE" in er.plan_calls()
    inp, out = lt.get_input_details()[0], lt.get_output_details()[0]
    rng = np.random.default_rng(5)
    states = []
    for _ in range(30):
        xv = rng.integers(-128, -40, size=tuple(inp["shape"])).astype(np.int8)
        for it in (lt, er):
            it.set_tensor(inp["index"], xv)
            it.invoke()
        want = lt.get_tensor(out["index"])
        np.testing.assert_array_equal(er.get_tensor(out["index"]), want)
        states.append(np.concatenate([v.reshape(-1) for v in er.resources.values()]))
    assert all(not np.array_equal(a, b) for a, b in itertools.pairwise(states))  # the state moves


def _wake_word_chain(pad: bool, wide: bool) -> bytes:
    """A microWakeWord-shaped int8 chain built in code: DEPTHWISE_CONV_2D over a time window ->
    1x1 CONV_2D (RELU) -> RESHAPE -> FULLY_CONNECTED. ``pad``: SAME padding (the kernels' own
    padded buffers); ``wide``: more outputs than the requantizer's threshold table takes, so the
    bound conv and depthwise calls (with ``pad``) requantize with ``BoundedRequantizer`` instead."""
    rng = np.random.default_rng(7)
    t, c, o, u = (12, 32, 40, 6) if wide else (9, 16, 24, 3)
    b = ModelBuilder()
    x = b.input("x", (1, t, 1, c), "int8", (0.05, -3))
    wd = rng.integers(-127, 128, (1, 3 if pad else t, 1, c)).astype(np.int8)
    sd = rng.uniform(0.004, 0.02, c).astype(np.float32)
    bd = rng.integers(-3000, 3000, c).astype(np.int32)
    dw_out = (1, t if pad else 1, 1, c)
    d = b.tensor("d", dw_out, "int8", (0.3, 5))
    b.op("DEPTHWISE_CONV_2D", [x, b.const("wd", wd, "int8", (sd, np.zeros(c, np.int64), 3)),
                               b.const("bd", bd, "int32", (0.05 * sd, np.zeros(c, np.int64), 0))], [d],
         padding=0 if pad else 1, stride_w=1, stride_h=1, depth_multiplier=1, fused_activation_function=0)
    wc = rng.integers(-127, 128, (o, 1, 1, c)).astype(np.int8)
    sc = rng.uniform(0.002, 0.01, o).astype(np.float32)
    y1 = b.tensor("y1", dw_out[:3] + (o,), "int8", (0.25, -128))
    b.op("CONV_2D", [d, b.const("wc", wc, "int8", (sc, np.zeros(o, np.int64), 0)),
                     b.const("bc", rng.integers(-500, 500, o).astype(np.int32), "int32",
                             (0.3 * sc, np.zeros(o, np.int64), 0))], [y1],
         padding=1, stride_w=1, stride_h=1, fused_activation_function=1)
    n = int(np.prod(dw_out[:3])) * o
    r = b.tensor("r", (1, n), "int8", (0.25, -128))
    b.op("RESHAPE", [y1, b.const("shape", np.array([1, n], np.int32))], [r])
    wf = rng.integers(-127, 128, (u, n)).astype(np.int8)
    y = b.tensor("y", (1, u), "int8", (0.6, 2))
    b.op("FULLY_CONNECTED", [r, b.const("wf", wf, "int8", (0.003, 0)),
                             b.const("bf", rng.integers(-900, 900, u).astype(np.int32), "int32",
                                     (0.25 * 0.003, 0))], [y], fused_activation_function=0)
    b.output(y, y1, d)
    return b.to_bytes()


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("preserve", [False, True])
def test_conv_depthwise_fc_bound_calls_bit_exact(monkeypatch, pad, wide, preserve):
    """CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED ``compile`` hooks: the bound calls (input and
    output arena views fixed, the threshold table's offsets folded into a float64 GEMM/einsum)
    give LiteRT's reference outputs, invoke after invoke, with and without
    ``experimental_preserve_all_tensors``; and they equal the kernels' own ``eval``."""
    from edgerun.ops.conv import Conv2D, DepthwiseConv2D
    from edgerun.ops.fully_connected import FullyConnected

    data = _wake_word_chain(pad, wide)
    bound = {}
    for cls in (Conv2D, DepthwiseConv2D, FullyConnected):
        orig = cls.compile

        def hook(self, ins, outs, orig=orig, name=cls.__name__):
            call = orig(self, ins, outs)
            bound[name] = call is not None
            return call
        monkeypatch.setattr(cls, "compile", hook)
    it = Interpreter(model_content=data, experimental_preserve_all_tensors=preserve)
    it.allocate_tensors()
    assert bound == {"Conv2D": True, "DepthwiseConv2D": True, "FullyConnected": True}
    rng = np.random.default_rng(3)
    outs = it.get_output_details()
    seen = set()
    for _ in range(4):  # the same bound buffers, new values each invoke
        x = rng.integers(-128, 128, (1, 12 if wide else 9, 1, 32 if wide else 16)).astype(np.int8)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        got = [it.get_tensor(d["index"]) for d in outs]
        for g, w in zip(got, _litert(data, [x])):
            assert np.array_equal(g, w)
        seen.update(np.unique(got[1]).tolist())
    assert len(seen) > 8  # the conv's outputs span many levels: equality means something
    for cls in (Conv2D, DepthwiseConv2D, FullyConnected):
        monkeypatch.setattr(cls, "compile", lambda self, ins, outs: None)
    assert all(np.array_equal(a, b) for a, b in zip(_run(data, [x]), got))


@pytest.mark.parametrize("per_channel", [False, True])
def test_fully_connected_bound_double_requantization_with_ties(monkeypatch, per_channel):
    """int8 FULLY_CONNECTED with more outputs than the threshold table takes: the bound call's
    double requantization (rint, exact ties redone as round half away) equals LiteRT's reference
    kernel and eval. Per tensor the scales make eff exactly 0.5, so every odd acc + bias is a tie."""
    from edgerun.ops.fully_connected import FullyConnected

    rng = np.random.default_rng(11)
    k, u = 96, 200
    b = ModelBuilder()
    x = b.input("x", (2, k), "int8", (0.5, 3))
    w = rng.integers(-127, 128, (u, k)).astype(np.int8)
    if per_channel:
        sw = rng.uniform(0.001, 0.004, u).astype(np.float32)
        wq = (sw, np.zeros(u, np.int64), 0)
        bq = (0.5 * sw, np.zeros(u, np.int64), 0)
    else:
        wq, bq = (0.25, 0), (0.125, 0)
    y = b.tensor("y", (2, u), "int8", (0.25 if not per_channel else 1.5, -4))
    b.op("FULLY_CONNECTED", [x, b.const("w", w, "int8", wq),
                             b.const("b", rng.integers(-200, 200, u).astype(np.int32), "int32", bq)], [y],
         fused_activation_function=0)
    b.output(y)
    data = b.to_bytes()
    bound = []
    orig = FullyConnected.compile
    monkeypatch.setattr(FullyConnected, "compile",
                        lambda self, ins, outs: bound.append(orig(self, ins, outs)) or bound[-1])
    xs = [rng.integers(-6, 7, (2, k)).astype(np.int8) for _ in range(2)]
    if per_channel:
        xs.append(rng.integers(-128, 128, (2, k)).astype(np.int8))
    for xv in xs:
        got = _run(data, [xv])[0]
        assert np.array_equal(got, _litert(data, [xv])[0])
        assert len(np.unique(got)) > 8
    assert bound and all(c is not None for c in bound)
    monkeypatch.setattr(FullyConnected, "compile", lambda self, ins, outs: None)
    assert np.array_equal(_run(data, [xs[-1]])[0], got)


def _ds_cnn_chain() -> bytes:
    """DS-CNN-shaped int8 layers built in code: DEPTHWISE_CONV_2D 3x3 (SAME) -> 1x1 CONV_2D (RELU)
    -> DEPTHWISE_CONV_2D 3x3 -> 1x1 CONV_2D to more channels; sizes differ from layer to layer,
    and every layer is beyond the tiny / small eval paths."""
    rng = np.random.default_rng(17)
    b = ModelBuilder()
    h, w = 13, 5
    x = b.input("x", (1, h, w, 48), "int8", (0.05, -3))
    cur, c = x, 48
    for i, (o, act) in enumerate([(40, 1), (56, 0)]):
        sd = rng.uniform(0.004, 0.02, c).astype(np.float32)
        d = b.tensor(f"d{i}", (1, h, w, c), "int8", (0.3, 5))
        b.op("DEPTHWISE_CONV_2D", [cur, b.const(f"wd{i}", rng.integers(-127, 128, (1, 3, 3, c)).astype(np.int8),
                                                 "int8", (sd, np.zeros(c, np.int64), 3)),
                                   b.const(f"bd{i}", rng.integers(-3000, 3000, c).astype(np.int32), "int32",
                                           (0.05 * sd, np.zeros(c, np.int64), 0))], [d],
             padding=0, stride_w=1, stride_h=1, depth_multiplier=1, fused_activation_function=0)
        sc = rng.uniform(0.002, 0.01, o).astype(np.float32)
        y = b.tensor(f"y{i}", (1, h, w, o), "int8", (0.25, -128 if act else 4))
        b.op("CONV_2D", [d, b.const(f"wc{i}", rng.integers(-127, 128, (o, 1, 1, c)).astype(np.int8), "int8",
                                    (sc, np.zeros(o, np.int64), 0)),
                         b.const(f"bc{i}", rng.integers(-500, 500, o).astype(np.int32), "int32",
                                 (0.3 * sc, np.zeros(o, np.int64), 0))], [y],
             padding=1, stride_w=1, stride_h=1, fused_activation_function=act)
        cur, c = y, o
    b.output(cur)
    return b.to_bytes()


def _equal_to_litert_over_three_invokes(it, data: bytes, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Three random int8 inputs through the prepared ``it``: outputs equal LiteRT's reference
    kernels and are spread (more than 50 distinct values: not saturated). Returns the last
    (input, output)."""
    rng = np.random.default_rng(seed)
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    for _ in range(3):
        x = rng.integers(-128, 128, tuple(inp["shape"])).astype(np.int8)
        it.set_tensor(inp["index"], x)
        it.invoke()
        got = it.get_tensor(out["index"])
        assert np.array_equal(got, _litert(data, [x])[0])
        assert len(np.unique(got)) > 50
    return x, got


def test_bound_layers_share_one_workspace_bit_exact(monkeypatch):
    """Bound conv / depthwise calls take their columns, accumulators and requantization work
    arrays from the plan's shared workspace (one buffer per role, the largest layer's size):
    the plan holds less than the layers' requests added up, and every invoke (new values in the
    same shared buffers) equals LiteRT's reference kernels and the kernels' own eval."""
    from edgerun.ops import common
    from edgerun.ops.fixedpoint import bounded_requantizer

    # the float64 passes' work arrays (edgerun.native's loop needs none)
    monkeypatch.setattr(type(bounded_requantizer([1 << 30], [0], 0, -128, 127)), "NATIVE", False)
    requests = []
    orig = common.Workspace.request
    monkeypatch.setattr(common.Workspace, "request", lambda self, key, shape, dtype: requests.append(
        int(np.prod(shape)) * np.dtype(dtype).itemsize) or orig(self, key, shape, dtype))
    data = _ds_cnn_chain()
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    # four layers, each bound over the workspace: columns, accumulators and two work arrays each
    assert len(requests) >= 16
    assert 0 < it.workspace_bytes < sum(requests)
    # the interpreter's memory figure counts the workspace, and a budget below it refuses to allocate
    assert it.memory_bytes >= it.arena_bytes + it.workspace_bytes
    tight = Interpreter(model_content=data, memory_budget=it.memory_bytes - 1)
    with pytest.raises(EdgerunError, match="work arrays"):
        tight.allocate_tensors()
    x, got = _equal_to_litert_over_three_invokes(it, data, seed=2)
    from edgerun.ops.conv import Conv2D, DepthwiseConv2D

    for cls in (Conv2D, DepthwiseConv2D):
        monkeypatch.setattr(cls, "compile", lambda self, ins, outs: None)
    assert np.array_equal(_run(data, [x])[0], got)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("name", ["vww_96_int8.tflite", "pretrainedResnet_quant.tflite"])
def test_mlperf_tiny_every_int8_tensor_with_small_plan_requantization(monkeypatch, name, native):
    """MLPerf Tiny vww / ResNet-8 (fetched by tools/fetch_models.py at its pinned commit, else
    skipped with its reason), every int8 tensor after each invoke equal to LiteRT's reference
    kernels, with preserve_all and the small-plan binding forced on (the preserved arena is
    larger than SMALL_ARENA_BYTES): per-channel accumulator bounds, vww's exact two-stage float64
    layers (right shifts 11-16), the sign-free passes of RELU layers, constants tiled to at most
    F64_TILE_VALUES (an eighth of a 36864-value output)."""
    from edgerun.ops import conv
    from tests.support.firmware_models import fetch_models_module

    fm = fetch_models_module()
    try:
        data = fm.fetch([name])[name].read_bytes()
    except fm.FetchError as e:
        pytest.skip(f"MLPerf Tiny model not available: {e}")
    monkeypatch.setattr(conv, "SMALL_ARENA_BYTES", 1 << 30)
    from edgerun import native as native_lib
    from edgerun.ops.fixedpoint import bounded_requantizer

    if native and native_lib.library() is None:
        pytest.skip(native_lib.status())
    # native: edgerun.native's loop; else the float64 passes that these plans bind
    br = type(bounded_requantizer([1 << 30], [0], 0, -128, 127))
    monkeypatch.setattr(br, "NATIVE", native)
    native_hits = []
    orig_native = br.native_args
    monkeypatch.setattr(br, "native_args", lambda self, *a, **kw: native_hits.append(
        orig_native(self, *a, **kw) is not None) or orig_native(self, *a, **kw))
    forms = []
    orig = conv._f64_requant

    def spy(requant, acc, bias, out, width=None, work=None, channel_bounds=True):
        call = orig(requant, acc, bias, out, width, work, channel_bounds)
        if call is not None:
            forms.append((len(requant.f64_consts(bias, acc.shape[1], channel_bounds)),
                          requant.qmin >= requant.zero_point, width == acc.size))
        return call
    monkeypatch.setattr(conv, "_f64_requant", spy)
    er = Interpreter(model_content=data, experimental_preserve_all_tensors=True)
    er.allocate_tensors()
    lt = make_interpreter(data, reference=True, preserve_all=True)
    lt.allocate_tensors()
    if name.startswith("vww") and not native:
        assert (5, True, True) in forms and (4, True, False) in forms  # exact form; a tiled output
    # the sign-free passes of RELU layers (ResNet-8's outputs are all wider than their tile cap
    # since F64_TILE_VALUES_WIDE_C: tiled rows there; vww's exact form above covers a whole one)
    assert any(f[:2] == (4, True) for f in forms) or native
    if native:  # the layers within its bounds take the native loop (vww's saturated biases do not)
        assert sum(native_hits) >= 5
    rng = np.random.default_rng(3)
    compared = 0
    for _ in range(3):
        for d in lt.get_input_details():
            x = rng.integers(-128, 128, size=tuple(d["shape"])).astype(np.int8)
            lt.set_tensor(d["index"], x)
            er.set_tensor(d["index"], x)
        lt.invoke()
        er.invoke()
        for td in lt.get_tensor_details():
            if td["dtype"] != np.int8 or td["index"] in {d["index"] for d in lt.get_input_details()}:
                continue
            try:
                want = lt.get_tensor(td["index"])
            except ValueError:
                continue
            np.testing.assert_array_equal(er.get_tensor(td["index"]), want, err_msg=td["name"])
            compared += 1
    assert compared > 30


@pytest.mark.parametrize("form", ["64k-table", "small-form", "plane"])
def test_binary_adds_share_their_work_buffers_bit_exact(form, monkeypatch):
    """Two chained ADD/SUB nodes of run-time tensors (one with a residual of the input), every
    invoke equal to LiteRT's reference kernels, in each of the three forms. As 64K tables their
    bound calls take the uint16 index array from the plan's shared workspace (one
    ``binary.index`` buffer, not one per node); in the small form they share its four work
    arrays (3 int32 and a bool per value, in the conv calls' keys); as fitted float32 planes
    (the default) they keep no table and nothing in the workspace: their two float32 work arrays
    are the eval calls' ``conv.cols`` / ``conv.acc`` scratch. (A small plan takes the table
    back, so the other two run with the plan taken for a large one.)"""
    from edgerun.ops import conv
    from edgerun.ops.elementwise import Int8AddSub

    monkeypatch.setattr(Int8AddSub, "NATIVE", False)  # the numpy forms (edgerun.native's loop keeps no buffers)
    monkeypatch.setattr(Int8AddSub, "LINE", form == "plane")
    if form == "64k-table":
        monkeypatch.setattr(Int8AddSub, "SMALL_MAX_VALUES", 0)
    else:
        monkeypatch.setattr(conv, "SMALL_ARENA_BYTES", 0)
    b = ModelBuilder()
    x1 = b.input("x1", (1, 6, 8), "int8", (0.0517, 2))
    x2 = b.input("x2", (1, 6, 8), "int8", (0.0931, 0))
    s = b.tensor("s", (1, 6, 8), "int8", (0.1043, -3))
    y = b.tensor("y", (1, 6, 8), "int8", (0.1219, 5))
    b.op("ADD", [x1, x2], [s], fused_activation_function=0)
    b.op("SUB", [s, x1], [y], fused_activation_function=1)
    b.output(y)
    data = b.to_bytes()
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    assert len(it.plan_calls()) == 2  # two bound calls, no fused chain
    forms = [("plane" if st.kernel.line is not None else "small-form" if st.kernel.small is not None
              else "64k-table") for st in it.steps()]
    assert forms == [form, form]
    if form == "plane":
        assert it.workspace_bytes == 0
    else:  # one 96-byte index buffer (plus its alignment room), or the small form's four arrays
        small = form == "small-form"
        per_value = 3 * 4 + 1 if small else 2
        assert 0 < it.workspace_bytes <= (6 * 8 * per_value) + (4 if small else 1) * 64
    rng = np.random.default_rng(4)
    for _ in range(3):
        xs = [rng.integers(-128, 128, (1, 6, 8)).astype(np.int8) for _ in range(2)]
        for d, x in zip(it.get_input_details(), xs):
            it.set_tensor(d["index"], x)
        it.invoke()
        got = it.get_tensor(it.get_output_details()[0]["index"])
        np.testing.assert_array_equal(got, _litert(data, xs)[0])


def test_eval_paths_share_scratch_keys_bit_exact(monkeypatch):
    """With the bound calls off, the conv / depthwise layers of a DS-CNN chain run their evals,
    the depthwise columns and accumulators in the conv layers' scratch buffers
    (``common._SHARED_KEYS``): no ``dw.cols`` / ``dw.acc`` buffer of its own, and every invoke
    (layers alternating on the same buffers) equals LiteRT's reference kernels."""
    from edgerun.ops import common
    from edgerun.ops.conv import Conv2D, DepthwiseConv2D

    for cls in (Conv2D, DepthwiseConv2D):
        monkeypatch.setattr(cls, "compile", lambda self, ins, outs: None)
    data = _ds_cnn_chain()
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    _equal_to_litert_over_three_invokes(it, data, seed=5)
    pool = common._SCRATCH.pool
    assert "conv.acc" in pool and not {"dw.cols", "dw.acc", "dw.slab"} & set(pool)
