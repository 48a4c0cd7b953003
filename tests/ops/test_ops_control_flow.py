"""IF and WHILE against LiteRT, and the refusals that keep hostile models from recursing."""

import numpy as np
import pytest

from edgerun import Interpreter
from edgerun.errors import ModelFormatError
from edgerun.ir import ModelBuilder
from edgerun.testing import run_edgerun, run_litert
from tests.support.builders import add_subgraph


def _if_model(then_index=None) -> bytes:
    b = ModelBuilder()
    c = b.input("cond", (1,), "bool")
    x = b.input("x", (2, 3), "float32")
    y = b.tensor("y", (2, 3), "float32")
    op = b.op("IF", [c, x], [y], then_subgraph_index=1, else_subgraph_index=2)
    b.output(y)

    def then_branch(b):
        xi = b.input("x", (2, 3), "float32")
        o = b.tensor("doubled", (2, 3), "float32")
        b.op("MUL", [xi, b.const("two", np.full((1,), 2, np.float32))], [o], fused_activation_function=0)
        b.output(o)

    def else_branch(b):
        xi = b.input("x", (2, 3), "float32")
        o = b.tensor("plus_one", (2, 3), "float32")
        b.op("ADD", [xi, b.const("one", np.ones((1,), np.float32))], [o], fused_activation_function=0)
        b.output(o)

    add_subgraph(b, "then", then_branch)
    add_subgraph(b, "else", else_branch)
    if then_index is not None:
        op.options["then_subgraph_index"] = then_index
    return b.to_bytes()


@pytest.mark.parametrize("cond", [True, False])
def test_if_matches_litert(cond):
    data = _if_model()
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    ins = [np.array([cond]), x]
    np.testing.assert_array_equal(run_edgerun(data, ins)[0], run_litert(data, ins)[0])
    np.testing.assert_array_equal(run_edgerun(data, ins)[0], x * 2 if cond else x + 1)


def test_while_matches_litert():
    """i, x = 0, x; while i < 5: i += 1; x = x * 1.5"""
    b = ModelBuilder()
    i0 = b.input("i", (1,), "int32")
    x0 = b.input("x", (4,), "float32")
    i1 = b.tensor("i_out", (1,), "int32")
    x1 = b.tensor("x_out", (4,), "float32")
    b.op("WHILE", [i0, x0], [i1, x1], cond_subgraph_index=1, body_subgraph_index=2)
    b.output(i1, x1)

    def cond(b):
        i = b.input("i", (1,), "int32")
        b.input("x", (4,), "float32")
        out = b.tensor("keep_going", (1,), "bool")
        b.op("LESS", [i, b.const("five", np.array([5], np.int32))], [out])
        b.output(out)

    def body(b):
        i = b.input("i", (1,), "int32")
        x = b.input("x", (4,), "float32")
        i2 = b.tensor("i_next", (1,), "int32")
        x2 = b.tensor("x_next", (4,), "float32")
        b.op("ADD", [i, b.const("one", np.array([1], np.int32))], [i2], fused_activation_function=0)
        b.op("MUL", [x, b.const("k", np.array([1.5], np.float32))], [x2], fused_activation_function=0)
        b.output(i2, x2)

    add_subgraph(b, "cond", cond)
    add_subgraph(b, "body", body)
    data = b.to_bytes()
    ins = [np.array([0], np.int32), np.array([1, -2, 3, 0.5], np.float32)]
    want = run_litert(data, ins)
    got = run_edgerun(data, ins)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert got[0][0] == 5


def test_self_calling_if_is_refused():
    with pytest.raises(ModelFormatError, match="not another subgraph"):
        Interpreter(model_content=_if_model(then_index=0)).allocate_tensors()


@pytest.mark.parametrize("op", ["LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_comparisons_match_litert(op, dtype):
    b = ModelBuilder()
    a = b.input("a", (2, 1, 4), dtype)
    c = b.input("c", (3, 1), dtype)
    y = b.tensor("y", (2, 3, 4), "bool")
    b.op(op, [a, c], [y])
    b.output(y)
    rng = np.random.default_rng(0)
    ins = [rng.integers(-3, 4, size=(2, 1, 4)).astype(dtype), rng.integers(-3, 4, size=(3, 1)).astype(dtype)]
    want = run_litert(b.to_bytes(), ins)
    got = run_edgerun(b.to_bytes(), ins)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].dtype == np.bool_ and 0 < got[0].sum() < got[0].size
