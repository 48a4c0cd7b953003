"""Builtin options survive read_model -> write_model in every subgraph (WHILE bodies, CALL_ONCE
init subgraphs), and the re-written model runs the same in LiteRT (BUILTIN_REF) and edgerun.

The bug this guards: the writer picked an op's options table from a map that lacked VAR_HANDLE
(and 40 other ops), so their options were dropped without a word; two variables in an init
subgraph then lost their shared_name and aliased one another.
"""

import os
from pathlib import Path

import numpy as np
import pytest

from edgerun.ir import ModelBuilder
from edgerun.schema import read_model, tflite, write_model
from edgerun.testing import run_edgerun, run_litert
from tests.support.builders import add_subgraph


def _while_conv_model() -> ModelBuilder:
    """i, x = 0, x; while i < 3: x = relu6(conv3x3_dilated(x) + x); i += 1"""
    rng = np.random.default_rng(7)
    b = ModelBuilder()
    i0 = b.input("i", (1,), "int32")
    x0 = b.input("x", (1, 5, 5, 2), "float32")
    i1 = b.tensor("i_out", (1,), "int32")
    x1 = b.tensor("x_out", (1, 5, 5, 2), "float32")
    b.op("WHILE", [i0, x0], [i1, x1], cond_subgraph_index=1, body_subgraph_index=2)
    b.output(i1, x1)

    def cond(b):
        i = b.input("i", (1,), "int32")
        b.input("x", (1, 5, 5, 2), "float32")
        out = b.tensor("keep_going", (1,), "bool")
        b.op("LESS", [i, b.const("three", np.array([3], np.int32))], [out])
        b.output(out)

    def body(b):
        i = b.input("i", (1,), "int32")
        x = b.input("x", (1, 5, 5, 2), "float32")
        w = b.const("w", rng.normal(0, 0.5, (2, 3, 3, 2)).astype(np.float32))
        bias = b.const("bias", np.array([0.25, -0.5], np.float32))
        c = b.tensor("conv", (1, 5, 5, 2), "float32")
        x2 = b.tensor("x_next", (1, 5, 5, 2), "float32")
        i2 = b.tensor("i_next", (1,), "int32")
        b.op("CONV_2D", [x, w, bias], [c], padding=tflite.Padding.SAME, stride_w=1, stride_h=1,
             fused_activation_function=tflite.Activation.NONE, dilation_w_factor=2, dilation_h_factor=2)
        b.op("ADD", [c, x], [x2], fused_activation_function=tflite.Activation.RELU6)
        b.op("ADD", [i, b.const("one", np.array([1], np.int32))], [i2], fused_activation_function=0)
        b.output(i2, x2)

    add_subgraph(b, "cond", cond)
    add_subgraph(b, "body", body)
    return b


def _two_variable_model() -> ModelBuilder:
    """Two resource variables set by a CALL_ONCE init subgraph; y = a * x + b, a += x.

    Only their shared_name tells the variables apart: with the names lost both handles are one
    resource and LiteRT's answer changes.
    """
    b = ModelBuilder()
    x = b.input("x", (3,), "float32")
    ha, hb = b.tensor("ha", (), "resource"), b.tensor("hb", (), "resource")
    a, bv = b.tensor("a", (3,), "float32"), b.tensor("b", (3,), "float32")
    ax, y, a2 = (b.tensor(n, (3,), "float32") for n in ("ax", "y", "a_next"))
    b.op("CALL_ONCE", [], [], init_subgraph_index=1)
    b.op("VAR_HANDLE", [], [ha], container="", shared_name="scale")
    b.op("VAR_HANDLE", [], [hb], container="", shared_name="offset")
    b.op("READ_VARIABLE", [ha], [a])
    b.op("READ_VARIABLE", [hb], [bv])
    b.op("MUL", [a, x], [ax], fused_activation_function=0)
    b.op("ADD", [ax, bv], [y], fused_activation_function=0)
    b.op("ADD", [a, x], [a2], fused_activation_function=0)
    b.op("ASSIGN_VARIABLE", [ha, a2], [])
    b.output(y)

    def init(b):
        h1, h2 = b.tensor("ha", (), "resource"), b.tensor("hb", (), "resource")
        b.op("VAR_HANDLE", [], [h1], container="", shared_name="scale")
        b.op("VAR_HANDLE", [], [h2], container="", shared_name="offset")
        b.op("ASSIGN_VARIABLE", [h1, b.const("a0", np.array([2, 3, 4], np.float32))], [])
        b.op("ASSIGN_VARIABLE", [h2, b.const("b0", np.array([10, 20, 30], np.float32))], [])

    add_subgraph(b, "init", init)
    return b


def _expected_options(model) -> list[list[tuple[str, dict]]]:
    """What each op should read back as: the given options over the table's defaults."""
    out = []
    for g in model.subgraphs:
        ops = []
        for op in g.operators:
            name = model.op_name(op)
            table = tflite.OP_OPTIONS.get(name)
            full = {f[0]: f[2] for f in tflite.OPTION_FIELDS.get(table, ()) if f is not None}
            full.update(op.options)
            ops.append((name, full))
        out.append(ops)
    return out


def _read_options(model) -> list[list[tuple[str, dict]]]:
    return [[(model.op_name(op), dict(op.options)) for op in g.operators] for g in model.subgraphs]


@pytest.mark.parametrize("build", [_while_conv_model, _two_variable_model])
def test_every_subgraph_keeps_its_options_through_a_round_trip(build):
    b = build()
    want = _expected_options(b.model)
    data = b.to_bytes()
    first = read_model(data)
    assert _read_options(first) == want
    again = write_model(first)
    assert again == data  # deterministic, nothing dropped or added
    assert _read_options(read_model(again)) == want
    # the options the bug lost, spelled out
    names = {(si, n): o for si, ops in enumerate(want) for n, o in ops}
    if build is _two_variable_model:
        assert names[(1, "VAR_HANDLE")]["shared_name"] == "offset"
        assert [o["shared_name"] for n, o in _read_options(first)[1] if n == "VAR_HANDLE"] == ["scale", "offset"]
    else:
        conv = names[(2, "CONV_2D")]
        assert (conv["dilation_w_factor"], conv["padding"]) == (2, tflite.Padding.SAME)
        assert _read_options(first)[2][1][1]["fused_activation_function"] == tflite.Activation.RELU6


def test_rewritten_while_model_runs_like_the_original():
    data = _while_conv_model().to_bytes()
    rewritten = write_model(read_model(data))
    x = np.random.default_rng(3).normal(0, 1.5, (1, 5, 5, 2)).astype(np.float32)
    ins = [np.array([0], np.int32), x]
    want = run_litert(data, ins)
    assert want[0][0] == 3 and want[1].max() <= 6.0 and want[1].min() >= 0.0
    for got in (run_litert(rewritten, ins), run_edgerun(rewritten, ins)):
        assert got[0][0] == 3
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


def _run_steps(make, data, steps):
    interp = make(data)
    interp.allocate_tensors()
    outs = []
    for x in steps:
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        outs.append(interp.get_tensor(interp.get_output_details()[0]["index"]).copy())
    return outs


def test_rewritten_variable_model_keeps_its_state_apart():
    from edgerun import Interpreter
    from edgerun.litert import make_interpreter

    data = _two_variable_model().to_bytes()
    rewritten = write_model(read_model(data))
    steps = [np.array([1, 2, 3], np.float32), np.array([0.5, -1, 2], np.float32)]
    want = _run_steps(lambda d: make_interpreter(d, reference=True), data, steps)
    # two separate variables: y0 = a0*x + b0; a1 = a0 + x
    np.testing.assert_array_equal(want[0], [12, 26, 42])
    np.testing.assert_array_equal(want[1], [3 * 0.5 + 10, 5 * -1 + 20, 7 * 2 + 30])
    for make in (lambda d: make_interpreter(d, reference=True), lambda d: Interpreter(model_content=d)):
        got = _run_steps(make, rewritten, steps)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_every_options_table_belongs_to_an_op():
    """No schema options table is unreachable from an op (the writer chooses tables by op)."""
    assert set(tflite.OP_OPTIONS.values()) == set(tflite.BUILTIN_OPTIONS[1:])
    assert set(tflite.OP_OPTIONS) <= set(tflite.BUILTIN_OPERATORS)


def test_writer_refuses_options_it_would_drop():
    b = ModelBuilder()
    x = b.input("x", (2,), "float32")
    y = b.tensor("y", (2,), "float32")
    b.op("ADD", [x, x], [y], fused_activation_function=0, shared_name="oops")
    b.output(y)
    with pytest.raises(ValueError, match="AddOptions has no field"):
        b.to_bytes()
    b.graph.operators[0].options = {"fused_activation_function": 0}
    b.op("RELU", [y], [b.tensor("z", (2,), "float32")], alpha=0.1)
    with pytest.raises(ValueError, match="RELU carries no builtin options"):
        b.to_bytes()


@pytest.mark.parametrize("build, op", [(_while_conv_model, "WHILE"), (_two_variable_model, "CALL_ONCE")])
def test_converter_refuses_multi_subgraph_float_models_instead_of_rewriting_them(tmp_path, build, op):
    """The float-TFLite converter rewrites the main subgraph only, so a model whose main graph
    calls other subgraphs is refused (exit 3, nothing written) rather than written without them."""
    import shutil
    import subprocess

    src, out = tmp_path / "m.tflite", tmp_path / "o.tflite"
    src.write_bytes(build().to_bytes())
    p = subprocess.run([shutil.which("edgerun") or "edgerun", "convert", str(src), "-o", str(out), "--float"],
                       capture_output=True, text=True, check=False, timeout=300)
    assert p.returncode == 3 and f"unsupported op {op}" in p.stderr, p.stderr
    assert not out.exists()


WAKEWORD = Path(os.environ.get("EDGERUN_FIXTURES", Path.home() / ".cache" / "edgerun" / "fixtures")) \
    / "pymicro-wakeword-2.5.0"


@pytest.mark.parametrize("name", ["hey_mycroft", "okay_nabu"])
def test_microwakeword_round_trip_keeps_init_subgraph_variables(name):
    """The model the bug was found on: 2 subgraphs, a CALL_ONCE init subgraph of VAR_HANDLEs named
    stream_N/states. Re-written, it reads back op for op and streams identically in LiteRT and
    edgerun (frame by frame, so the variables must stay apart)."""
    path = WAKEWORD / f"{name}.tflite"
    if not path.exists():
        pytest.skip(f"{path} not cached (tests/runtime/test_external_models.py fetches the pymicro-wakeword wheel)")
    from edgerun.litert import make_interpreter

    data = path.read_bytes()
    m = read_model(data)
    rewritten = write_model(m)
    assert _read_options(read_model(rewritten)) == _read_options(m)
    names = [o.options["shared_name"] for o in m.subgraphs[1].operators if m.op_name(o) == "VAR_HANDLE"]
    assert len(names) > 1 and len(set(names)) == len(names) and all(n.endswith("/states") for n in names)
    from edgerun import Interpreter

    lt = [make_interpreter(d, reference=True) for d in (data, rewritten)] + [Interpreter(model_content=rewritten)]
    for it in lt:
        it.allocate_tensors()
    det = lt[0].get_input_details()[0]
    rng = np.random.default_rng(5)
    for _ in range(6):
        x = rng.integers(-128, 128, det["shape"], dtype=np.int8).astype(det["dtype"])
        outs = []
        for it in lt:
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
        np.testing.assert_array_equal(outs[1], outs[0])
        np.testing.assert_array_equal(outs[2], outs[0])
