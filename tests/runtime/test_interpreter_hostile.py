"""Hostile models end in one clean ModelFormatError from allocate_tensors (or a bounded invoke):
the repro files in tests/data/repro (each case is also built here in code) and the validation, memory-budget and work-budget cases of issue 11."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from edgerun import Interpreter
from edgerun.errors import EdgerunError, ModelFormatError
from edgerun.ir import ModelBuilder, Subgraph
from edgerun.ops.registry import Kernel
from edgerun.runtime.budget import parse_size
from edgerun.testing import run_edgerun, run_litert

ROOT = Path(__file__).resolve().parents[2]
REPRO = Path(__file__).resolve().parents[1] / "data" / "repro"


def _repro(name: str) -> bytes:
    return (REPRO / name).read_bytes()


def _prepare(data: bytes, **kw) -> Interpreter:
    it = Interpreter(model_content=data, **kw)
    it.allocate_tensors()
    return it


def _subgraph(b: ModelBuilder, build) -> int:
    main = b.graph
    b.model.subgraphs.append(Subgraph([], [], [], [], f"sub{len(b.model.subgraphs)}"))
    b.graph = b.model.subgraphs[-1]
    build(b)
    b.graph = main
    return len(b.model.subgraphs) - 1


# --------------------------------------------------------------------------------------------
# SPLIT with num_splits != outputs: refused before LiteRT (XNNPACK path) could segfault
# --------------------------------------------------------------------------------------------
def _split_uneven() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (4,), "float32")
    y = b.tensor("y", (4,), "float32")
    b.op("SPLIT", [b.const("axis", np.array(0, np.int32)), x], [y], num_splits=3)
    b.output(y)
    return b.to_bytes()


@pytest.mark.parametrize("source", ["repro", "built"])
def test_split_num_splits_must_match_outputs(source):
    data = _repro("split_uneven.tflite") if source == "repro" else _split_uneven()
    with pytest.raises(ModelFormatError, match=r"num_splits=3 but the node has 1 outputs"):
        _prepare(data)


def test_split_uneven_never_reaches_litert_through_xnnpack():
    """In a child process: a regression would be a segfault there, not a crashed test run."""
    pytest.importorskip("ai_edge_litert")
    code = textwrap.dedent("""
        import sys
        from edgerun import Interpreter
        from edgerun.errors import ModelFormatError
        it = Interpreter(model_content=open(sys.argv[1], "rb").read(), delegates=["xnnpack"])
        try:
            it.allocate_tensors()
        except ModelFormatError as e:
            print("refused:", e)
    """)
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".tflite") as f:
        f.write(_split_uneven())
        f.flush()
        out = subprocess.run([sys.executable, "-c", code, f.name], capture_output=True, text=True,
                             timeout=120, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused: node 0 (SPLIT): num_splits=3" in out.stdout


def test_split_v_num_splits_checked_too():
    b = ModelBuilder()
    x = b.input("x", (4,), "float32")
    y1, y2 = b.tensor("y1", (2,), "float32"), b.tensor("y2", (2,), "float32")
    b.op("SPLIT_V", [x, b.const("sizes", np.array([2, 2], np.int32)), b.const("axis", np.array(0, np.int32))],
         [y1, y2], num_splits=3)
    b.output(y1, y2)
    with pytest.raises(ModelFormatError, match="num_splits=3 but the node has 2 outputs"):
        _prepare(b.to_bytes())


# --------------------------------------------------------------------------------------------
# memory budget: checked before allocating
# --------------------------------------------------------------------------------------------
def _huge_relu(n: int = 1 << 28) -> bytes:
    b = ModelBuilder()
    x = b.input("x", (n,), "float32")
    y = b.tensor("y", (n,), "float32")
    b.op("RELU", [x], [y])
    b.output(y)
    return b.to_bytes()


_RSS_CHILD = textwrap.dedent("""
    import resource, sys, time
    from edgerun import Interpreter
    from edgerun.errors import ModelFormatError
    data = open(sys.argv[1], "rb").read() if sys.argv[1] != "-" else None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    try:
        Interpreter(model_content=data, **eval(sys.argv[2])).allocate_tensors()
        print("allocated")
    except ModelFormatError as e:
        print("refused:", e)
    grow = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(f"grew_kib={grow} seconds={time.perf_counter() - t0:.3f}")
""")


def _child(data: bytes, kwargs: str, env: dict | None = None) -> str:
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".tflite") as f:
        f.write(data)
        f.flush()
        out = subprocess.run([sys.executable, "-c", _RSS_CHILD, f.name, kwargs], capture_output=True,
                             text=True, timeout=120, cwd=ROOT, check=False,
                             env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_huge_tensor_refused_before_allocation(how):
    data = _repro("huge_1g_float.tflite")
    if how == "argument":
        out = _child(data, "{'memory_budget': '256M'}")
    else:
        out = _child(data, "{}", {"EDGERUN_MEMORY_BUDGET": "256M"})
    assert "refused: subgraph 0: the activation arena brings the model to 2.0 GiB" in out, out
    assert "memory budget of 256.0 MiB" in out
    grew = int(out.split("grew_kib=")[1].split()[0])
    assert grew < 64 * 1024, f"RSS grew by {grew} KiB before the refusal"


def test_memory_budget_counts_the_arena_exactly():
    data = _huge_relu(1 << 10)  # input and output kept: 8 KiB of arena
    it = _prepare(data, memory_budget=8192)
    assert it.memory_bytes == it.arena_bytes == 8192 and it.memory_budget == 8192
    with pytest.raises(ModelFormatError, match=r"memory budget of 8.0 KiB \(8191 bytes\)"):
        _prepare(data, memory_budget=8191)


def test_default_memory_budget_is_half_the_available_memory_up_to_1_gib(monkeypatch):
    from edgerun.runtime import budget

    monkeypatch.delenv(budget.MEMORY_ENV, raising=False)
    monkeypatch.setattr(budget, "available_memory", lambda: 1 << 30)
    assert Interpreter(model_content=_huge_relu(4)).memory_budget == 512 << 20
    monkeypatch.setattr(budget, "available_memory", lambda: 24 << 30)
    assert Interpreter(model_content=_huge_relu(4)).memory_budget == 1 << 30


def test_huge_tensor_refused_by_default():
    data = _repro("huge_1g_float.tflite")
    out = _child(data, "{}", {"EDGERUN_MEMORY_BUDGET": ""})  # empty: the default applies
    assert "refused: subgraph 0: the activation arena brings the model to 2.0 GiB" in out, out
    assert float(out.split("seconds=")[1]) < 5


def test_folded_constants_count_against_the_budget():
    """A node with constant inputs is evaluated in allocate_tensors: its output is checked first
    (here 4096 copies of one 256 KiB constant: a 1 GiB result from a 256 KiB model)."""
    b = ModelBuilder()
    c = b.const("c", np.ones(1 << 16, np.float32))
    y = b.tensor("y", (1 << 28,), "float32")
    b.op("CONCATENATION", [c] * 4096, [y], axis=0, fused_activation_function=0)
    b.output(y)
    t0 = time.perf_counter()
    with pytest.raises(ModelFormatError, match="constant output brings the model to 1.0 GiB"):
        _prepare(b.to_bytes(), memory_budget="64M")
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("padding", [0, 1])  # SAME, VALID
def test_pool_filter_of_a_billion_is_a_clean_error(padding):
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 1), "float32")
    y = b.tensor("y", (1, 8, 8, 1) if padding == 0 else (1, 1, 1, 1), "float32")
    b.op("MAX_POOL_2D", [x], [y], padding=padding, stride_w=1, stride_h=1, filter_width=1_073_741_827,
         filter_height=1_073_741_827, fused_activation_function=0)
    b.output(y)
    t0 = time.perf_counter()
    with pytest.raises(EdgerunError) as e:
        _prepare(b.to_bytes())
    assert "\n" not in str(e.value)
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("op", ["CONV_2D", "DEPTHWISE_CONV_2D"])
def test_conv_dilation_of_fifteen_million_is_a_clean_error(op):
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 2), "float32")
    w = b.const("w", np.ones((2, 3, 3, 2) if op == "CONV_2D" else (1, 3, 3, 2), np.float32))
    bias = b.const("b", np.zeros(2, np.float32))
    y = b.tensor("y", (1, 8, 8, 2), "float32")
    opts = dict(padding=0, stride_w=1, stride_h=1, dilation_w_factor=15_269_889, dilation_h_factor=15_269_889,
                fused_activation_function=0)
    if op == "DEPTHWISE_CONV_2D":
        opts["depth_multiplier"] = 1
    b.op(op, [x, w, bias], [y], **opts)
    b.output(y)
    t0 = time.perf_counter()
    with pytest.raises(ModelFormatError, match="working memory brings the model to"):
        _prepare(b.to_bytes())
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("name,value", [("stride_w", 0), ("dilation_h_factor", -1)])
def test_non_positive_conv_options_are_refused(name, value):
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 1), "float32")
    y = b.tensor("y", (1, 4, 4, 1), "float32")
    opts = dict(padding=0, stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1, fused_activation_function=0)
    opts[name] = value
    b.op("CONV_2D", [x, b.const("w", np.ones((1, 1, 1, 1), np.float32))], [y], **opts)
    b.output(y)
    with pytest.raises(ModelFormatError, match=f"{name}={value} \\(must be positive\\)"):
        _prepare(b.to_bytes())


def test_host_refuses_the_firmware_overflow_repros():
    with pytest.raises(ModelFormatError, match="bytes"):
        _prepare(_repro("overflow_pool.tflite"))


def test_fc_wrap_repro_needs_its_real_4_gib_output():
    """The host computes the output shape (2^21 x 2048 int8, 4 GiB) instead of trusting [0]."""
    with pytest.raises(ModelFormatError, match=r"brings the model to 4\.0 GiB"):
        _prepare(_repro("fc_wrap.tflite"), memory_budget="1G")


# --------------------------------------------------------------------------------------------
# work budget: control flow across nesting
# --------------------------------------------------------------------------------------------
def _nested_while(n: int) -> bytes:
    """i = 0; while i < n: (j = 0; while j < n: j += 1); i += 1 -- n*n inner iterations."""
    b = ModelBuilder()
    i0 = b.input("i", (1,), "int32")
    out = b.tensor("o", (1,), "int32")
    b.op("WHILE", [i0], [out], cond_subgraph_index=1, body_subgraph_index=2)
    b.output(out)

    def cond(b):
        i = b.input("i", (1,), "int32")
        k = b.tensor("k", (1,), "bool")
        b.op("LESS", [i, b.const("n", np.array([n], np.int32))], [k])
        b.output(k)

    def outer_body(b):
        i = b.input("i", (1,), "int32")
        z = b.tensor("z", (1,), "int32")
        b.op("MUL", [i, b.const("zero", np.array([0], np.int32))], [z], fused_activation_function=0)
        j = b.tensor("j", (1,), "int32")
        b.op("WHILE", [z], [j], cond_subgraph_index=1, body_subgraph_index=3)
        t = b.tensor("t", (1,), "int32")
        b.op("MUL", [j, b.const("zero2", np.array([0], np.int32))], [t], fused_activation_function=0)
        s = b.tensor("s", (1,), "int32")
        b.op("ADD", [i, t], [s], fused_activation_function=0)
        o = b.tensor("o", (1,), "int32")
        b.op("ADD", [s, b.const("one", np.array([1], np.int32))], [o], fused_activation_function=0)
        b.output(o)

    def inner_body(b):
        j = b.input("j", (1,), "int32")
        o = b.tensor("o", (1,), "int32")
        b.op("ADD", [j, b.const("one", np.array([1], np.int32))], [o], fused_activation_function=0)
        b.output(o)

    assert _subgraph(b, cond) == 1
    assert _subgraph(b, outer_body) == 2
    assert _subgraph(b, inner_body) == 3
    return b.to_bytes()


def test_nested_while_small_enough_runs():
    assert run_edgerun(_nested_while(5), [np.array([0], np.int32)])[0].tolist() == [5]


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_nested_while_stops_at_the_work_budget(how, monkeypatch):
    data = _repro("while_nested_1e12.tflite") if how == "argument" else _nested_while(999_999)
    if how == "environment":
        monkeypatch.setenv("EDGERUN_WORK_BUDGET", "20000")
        it = _prepare(data)
    else:
        it = _prepare(data, work_budget=20000)
    assert it.work_budget == 20000
    it.set_tensor(it.get_input_details()[0]["index"], np.array([0], np.int32))
    t0 = time.perf_counter()
    with pytest.raises(ModelFormatError, match="control flow ran 20000 subgraphs"):
        it.invoke()
    assert time.perf_counter() - t0 < 30
    # the budget is per invoke: a loop that fits runs after a refused one
    small = _prepare(_nested_while(20), work_budget=20000)
    assert small.predict(np.array([0], np.int32))[0].tolist() == [20]


def test_work_budget_counts_nested_runs():
    """n = 20: 21 outer conditions + 20 outer bodies + 20 * (21 + 20) inner runs = 861."""
    data = _nested_while(20)
    _prepare(data, work_budget=861).predict(np.array([0], np.int32))
    with pytest.raises(ModelFormatError, match="control flow ran 860 subgraphs"):
        _prepare(data, work_budget=860).predict(np.array([0], np.int32))


def test_budget_values_are_checked():
    assert parse_size("2G", "x") == 2 << 30 and parse_size("512MiB", "x") == 512 << 20 and parse_size(7, "x") == 7
    for bad in ("lots", "-1", "0"):
        with pytest.raises(EdgerunError):
            parse_size(bad, "EDGERUN_MEMORY_BUDGET")


# --------------------------------------------------------------------------------------------
# empty axes, empty conditions, nodes without inputs
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN", "REDUCE_MAX", "REDUCE_MIN"])
def test_reduction_over_an_empty_axis_is_refused(op):
    b = ModelBuilder()
    x = b.input("x", (2, 0, 3), "float32")
    arg = op.startswith("ARG")
    y = b.tensor("y", (2, 3), "int32" if arg else "float32")
    opts = {"output_type": 2} if arg else {"keep_dims": False}
    b.op(op, [x, b.const("axis", np.array([1], np.int32))], [y], **opts)
    b.output(y)
    with pytest.raises(ModelFormatError, match="reduces over axis 1, which is empty"):
        _prepare(b.to_bytes())


def test_reduce_max_over_a_non_empty_axis_of_an_empty_tensor_is_fine():
    b = ModelBuilder()
    x = b.input("x", (0, 3), "float32")
    y = b.tensor("y", (0,), "float32")
    b.op("REDUCE_MAX", [x, b.const("axis", np.array([1], np.int32))], [y], keep_dims=False)
    b.output(y)
    assert _prepare(b.to_bytes()).predict(np.zeros((0, 3), np.float32))[0].shape == (0,)


def test_if_with_an_empty_condition_is_refused():
    b = ModelBuilder()
    c = b.input("cond", (0,), "bool")
    x = b.input("x", (2,), "float32")
    y = b.tensor("y", (2,), "float32")
    b.op("IF", [c, x], [y], then_subgraph_index=1, else_subgraph_index=1)
    b.output(y)

    def branch(b):
        xi = b.input("x", (2,), "float32")
        o = b.tensor("o", (2,), "float32")
        b.op("RELU", [xi], [o])
        b.output(o)

    _subgraph(b, branch)
    with pytest.raises(ModelFormatError, match=r"node 0 \(IF\): its condition has shape \[0\]"):
        _prepare(b.to_bytes())


def test_while_with_an_empty_condition_is_refused():
    b = ModelBuilder()
    i0 = b.input("i", (1,), "int32")
    out = b.tensor("o", (1,), "int32")
    b.op("WHILE", [i0], [out], cond_subgraph_index=1, body_subgraph_index=2)
    b.output(out)

    def cond(b):
        i = b.input("i", (1,), "int32")
        k = b.tensor("k", (0,), "bool")
        b.op("LESS", [i, b.const("n", np.zeros((0,), np.int32))], [k])
        b.output(k)

    def body(b):
        i = b.input("i", (1,), "int32")
        o = b.tensor("o", (1,), "int32")
        b.op("ADD", [i, b.const("one", np.array([1], np.int32))], [o], fused_activation_function=0)
        b.output(o)

    _subgraph(b, cond)
    _subgraph(b, body)
    with pytest.raises(ModelFormatError, match="condition subgraph 1 gives a value of shape"):
        _prepare(b.to_bytes())


@pytest.mark.parametrize("op", ["ADD", "RELU", "CONV_2D", "RESHAPE", "SOFTMAX"])
def test_an_op_without_inputs_is_refused(op):
    b = ModelBuilder()
    x = b.input("x", (1,), "float32")
    y = b.tensor("y", (1,), "float32")
    b.op(op, [], [y])
    z = b.tensor("z", (1,), "float32")
    b.op("ADD", [x, y], [z], fused_activation_function=0)
    b.output(z)
    with pytest.raises(ModelFormatError, match=f"node 0 \\({op}\\): has 0 inputs"):
        _prepare(b.to_bytes())


def test_too_many_outputs_are_refused():
    b = ModelBuilder()
    x = b.input("x", (2,), "float32")
    y1, y2 = b.tensor("y1", (2,), "float32"), b.tensor("y2", (2,), "float32")
    b.op("SOFTMAX", [x], [y1, y2], beta=1.0)
    b.output(y1, y2)
    with pytest.raises(ModelFormatError, match="has 2 outputs, SOFTMAX takes 1"):
        _prepare(b.to_bytes())


# --------------------------------------------------------------------------------------------
# a valid model with a bool output runs as in LiteRT
# --------------------------------------------------------------------------------------------
def test_greater_bool_output_matches_litert():
    b = ModelBuilder()
    a, c = b.input("a", (4,), "float32"), b.input("b", (4,), "float32")
    y = b.tensor("gt", (4,), "bool")
    b.op("GREATER", [a, c], [y])
    b.output(y)
    xs = [np.array([1, 2, 3, 4], np.float32), np.array([4, 2, 1, 5], np.float32)]
    for data in (b.to_bytes(),) + (_repro("greater_bool.tflite"),):
        got = run_edgerun(data, xs)[0]
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, run_litert(data, xs)[0])


# --------------------------------------------------------------------------------------------
# kernel bugs stay bugs
# --------------------------------------------------------------------------------------------
class _Broken(Kernel):
    error: type = TypeError

    def prepare(self):
        raise self.error("kernel bug")

    def eval(self, inputs):
        return inputs


def _custom_model() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (2,), "float32")
    y = b.tensor("y", (2,), "float32")
    b.op("CUSTOM", [x], [y], custom_code="Broken")
    b.output(y)
    return b.to_bytes()


@pytest.mark.parametrize("error", [TypeError, AttributeError, AssertionError])
def test_kernel_bugs_are_not_reported_as_inconsistent_models(error):
    kernel = type("K", (_Broken,), {"error": error})
    with pytest.raises(error, match="kernel bug"):
        _prepare(_custom_model(), custom_ops={"Broken": kernel})


@pytest.mark.parametrize("error", [ValueError, IndexError, ZeroDivisionError])
def test_value_errors_in_prepare_are_model_errors(error):
    kernel = type("K", (_Broken,), {"error": error})
    with pytest.raises(ModelFormatError, match=f"node 0 \\(Broken\\): inconsistent model: {error.__name__}"):
        _prepare(_custom_model(), custom_ops={"Broken": kernel})


@pytest.mark.parametrize("op", ["ADD", "CONCATENATION", "RESHAPE"])
def test_mixed_tensor_types_are_refused(op):
    b = ModelBuilder()
    x = b.input("x", (2,), "float32")
    other = b.input("o", (2,), "int32") if op != "RESHAPE" else b.const("shape", np.array([2], np.int32))
    y = b.tensor("y", (4,) if op == "CONCATENATION" else (2,), "int32" if op == "RESHAPE" else "float32")
    opts = {"axis": 0} if op == "CONCATENATION" else {}
    b.op(op, [x, other], [y], **opts)
    b.output(y)
    with pytest.raises(ModelFormatError, match=f"node 0 \\({op}\\): mixes tensor types"):
        _prepare(b.to_bytes())
