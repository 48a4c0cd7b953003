"""Resource variables and CALL_ONCE (streaming state) against LiteRT, step by step."""

import numpy as np

from edgerun import Interpreter
from edgerun.ir import ModelBuilder, Subgraph
from edgerun.litert import make_interpreter


def _accumulator_model() -> bytes:
    """state <- state + x; y = state. Initial state (from the init subgraph) is [1, 2, 3]."""
    b = ModelBuilder()
    g = b.graph
    x = b.input("x", (3,), "float32")
    h = b.tensor("handle", (), "resource")
    s = b.tensor("state", (3,), "float32")
    y = b.tensor("y", (3,), "float32")
    b.op("CALL_ONCE", [], [], init_subgraph_index=1)
    b.op("VAR_HANDLE", [], [h], container="", shared_name="acc")
    b.op("READ_VARIABLE", [h], [s])
    b.op("ADD", [s, x], [y], fused_activation_function=0)
    b.op("ASSIGN_VARIABLE", [h, y], [])
    b.output(y)
    init = Subgraph([], [], [], [], "init")
    b.model.subgraphs.append(init)
    b.graph = init
    h2 = b.tensor("handle", (), "resource")
    v0 = b.const("initial", np.array([1, 2, 3], np.float32))
    b.op("VAR_HANDLE", [], [h2], container="", shared_name="acc")
    b.op("ASSIGN_VARIABLE", [h2, v0], [])
    b.graph = g
    return b.to_bytes()


def test_accumulator_state_matches_litert_across_invokes():
    data = _accumulator_model()
    lt = make_interpreter(data, reference=True)
    lt.allocate_tensors()
    er = Interpreter(model_content=data)
    er.allocate_tensors()
    for step in range(4):
        x = np.array([step, -step, 0.5], np.float32)
        lt.set_tensor(0, x)
        lt.invoke()
        er.set_tensor(0, x)
        er.invoke()
        want = lt.get_tensor(lt.get_output_details()[0]["index"])
        np.testing.assert_array_equal(er.get_tensor(er.get_output_details()[0]["index"]), want)
    np.testing.assert_array_equal(want, [1 + 0 + 1 + 2 + 3, 2 - 6, 3 + 2.0])
    er.reset_all_variables()  # back to the initial state: CALL_ONCE runs again
    er.set_tensor(0, np.zeros(3, np.float32))
    er.invoke()
    np.testing.assert_array_equal(er.get_tensor(er.get_output_details()[0]["index"]), [1, 2, 3])
