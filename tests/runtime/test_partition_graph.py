"""The partitioner: convex connected groups, limits, edge conversions, interpreter integration."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from edgerun.delegate import CapabilityTable, Delegate, DelegateKernel, OpCaps, Support
from edgerun.errors import EdgerunError, UnsupportedOpError
from edgerun.ir import ModelBuilder
from edgerun.runtime.interpreter import Interpreter
from edgerun.runtime.partition import back_converter, converter, group_nodes
from edgerun.schema.tflite import Activation
from edgerun.testing import assert_close, random_inputs, run_edgerun, run_litert
from tests.support.delegate_models import Q


def _edges(n, pairs):
    preds = {i: set() for i in range(n)}
    succs = {i: set() for i in range(n)}
    for a, b in pairs:
        preds[b].add(a)
        succs[a].add(b)
    return preds, succs


def _reaches(succs, groups_of, src: set, dst: set, n) -> bool:
    """Is there a path from src leaving src and entering dst (through contracted groups)?"""
    stack = [m for s in src for m in succs[s] if m not in src]
    seen = set()
    while stack:
        x = stack.pop()
        if x in dst:
            return True
        if x in seen:
            continue
        for y in groups_of(x):
            seen.add(y)
            stack.extend(z for z in succs[y] if z not in seen)
    return False


def test_naive_partition_would_cycle():
    # 0 -> 1 -> 2 and 0 -> 2; 0 and 2 supported, 1 not: {0, 2} would be a cycle through 1
    preds, succs = _edges(3, [(0, 1), (1, 2), (0, 2)])
    assert group_nodes([0, 1, 2], preds, succs, {0, 2}) == [[0], [2]]
    # with 1 supported too, everything is one partition
    assert group_nodes([0, 1, 2], preds, succs, {0, 1, 2}) == [[0, 1, 2]]


def test_cycle_through_another_delegates_partition():
    # 0 -> 1, 2 -> 3, 0 -> 3; {1, 2} is an earlier delegate's partition (one contracted node),
    # so 0 -> {1,2} -> 3 is a path and {0, 3} must not merge although 1 and 2 are not connected
    preds, succs = _edges(4, [(0, 1), (2, 3), (0, 3)])
    assert group_nodes([0, 1, 2, 3], preds, succs, {0, 3}, fixed=[[1, 2]]) == [[0], [3]]
    assert group_nodes([0, 1, 2, 3], preds, succs, {0, 3}) == [[0, 3]]


def test_groups_are_connected():
    # two independent supported branches stay two partitions
    preds, succs = _edges(4, [(0, 1), (2, 3)])
    assert group_nodes([0, 2, 1, 3], preds, succs, {0, 1, 2, 3}) == [[0, 1], [2, 3]]


def test_diamond_with_unsupported_middle_branch():
    # 0 -> 1 -> 3, 0 -> 2 -> 3; 2 unsupported: {0,1,3} would cycle through 2 -> {0,1} and {3}
    preds, succs = _edges(4, [(0, 1), (1, 3), (0, 2), (2, 3)])
    groups = group_nodes([0, 1, 2, 3], preds, succs, {0, 1, 3})
    assert groups == [[0, 1], [3]]


@st.composite
def dags(draw):
    n = draw(st.integers(2, 14))
    pairs = [(a, b) for b in range(n) for a in range(b) if draw(st.booleans()) and draw(st.booleans())]
    eligible = {i for i in range(n) if draw(st.booleans())}
    k = draw(st.integers(0, 3))
    rest = [i for i in range(n) if i not in eligible]
    fixed = []
    if k and len(rest) >= 2:
        fixed = [sorted(draw(st.lists(st.sampled_from(rest), min_size=2, max_size=3, unique=True)))]
    return n, pairs, eligible, fixed


@settings(max_examples=150, deadline=None)
@given(dags())
# found at 20000 examples: 1 -> 3 -> {0, 5} -> 2 runs back through the contracted earlier partition
# {0, 5}, which starts before 2 although it is entered after it; {1, 2} must not merge
@example(case=(7, [(0, 2), (1, 2), (1, 3), (3, 5)], {1, 2, 4}, [[0, 5]]))
def test_property_groups_convex_connected_acyclic(case):
    n, pairs, eligible, fixed = case
    preds, succs = _edges(n, pairs)
    # a fixed group must itself be convex to be a valid earlier partition
    if fixed:
        f = set(fixed[0])
        if _reaches(succs, lambda x: [x], f, f, n):
            return
    groups = group_nodes(list(range(n)), preds, succs, eligible, fixed)
    covered = [v for g in groups for v in g]
    assert sorted(covered) == sorted(eligible)
    unit = {v: frozenset([v]) for v in range(n)}
    for g in groups + fixed:
        for v in g:
            unit[v] = frozenset(g)
    for g in groups:
        s = set(g)
        # convex: no path leaves the group and comes back (through contracted units)
        assert not _reaches(succs, lambda x: unit[x], s, s, n)
        # connected (undirected) through edges inside the group
        seen, stack = {g[0]}, [g[0]]
        while stack:
            x = stack.pop()
            for y in (preds[x] | succs[x]) & s:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        assert seen == s


# ---------------------------------------------------------------------------------------------
# a delegate defined here (LiteRT reference kernels run its partitions): limits and conversions
# ---------------------------------------------------------------------------------------------
class RefKernel(DelegateKernel):
    def __init__(self, part, want=None):
        from edgerun.litert import make_interpreter

        self.it = make_interpreter(part.to_bytes(), reference=True)
        self.it.allocate_tensors()
        self.calls = 0
        self.want = want
        if want:
            self.input_dtypes = [want] * len(part.inputs)
            self.output_dtypes = [want] * len(part.outputs)

    def invoke(self, inputs):
        self.calls += 1
        it = self.it
        conv = (lambda x: (x.astype(np.int16) - 128).astype(np.int8)) if self.want == "uint8" else (lambda x: x)
        back = (lambda y: (y.astype(np.int16) + 128).astype(np.uint8)) if self.want == "uint8" else (lambda y: y)
        for d, x in zip(it.get_input_details(), inputs):
            if self.want == "uint8":
                assert x.dtype == np.uint8
            it.set_tensor(d["index"], conv(x))
        it.invoke()
        return [back(it.get_tensor(d["index"])) for d in it.get_output_details()]


class PickDelegate(Delegate):
    """Takes the node indices in ``take``; runs them with LiteRT's reference kernels."""

    name = "pick"
    capabilities = CapabilityTable("pick", {op: OpCaps(frozenset({"*"})) for op in
                                            ("CONV_2D", "ADD", "RELU", "RELU6", "MAX_POOL_2D", "DEPTHWISE_CONV_2D")})

    def supports(self, node, graph=None, op_index=None):
        s = super().supports(node, graph, op_index)
        if s.ok and node.index not in self.config["take"]:
            return Support.no("not picked")
        return s

    def prepare(self, partition):
        k = RefKernel(partition, self.config.get("want"))
        self.kernels = getattr(self, "kernels", []) + [k]
        return k


def _chain_model():
    """0 CONV -> 1 RELU -> 2 CONV -> 3 RELU6 -> 4 CONV -> 5 ADD(4, 2), int8."""
    q = Q(11)
    x = q.input((1, 8, 8, 4))
    a = q.conv(x, 4)
    b = q.unary(a, "RELU")
    c = q.conv(b, 4)
    d = q.unary(c, "RELU6")
    e = q.conv(d, 4)
    f = q.add(e, c)
    return q.done(f)


def _run(m, delegates, seed=0):
    it = Interpreter(model_content=m, delegates=delegates)
    it.allocate_tensors()
    x = random_inputs(it.get_input_details(), seed)
    return it, it.predict(*x), x


def test_partitions_run_and_agree():
    m = _chain_model()
    d = PickDelegate(take={0, 1, 2, 4, 5})
    it, got, x = _run(m, [d])
    # 2 -> 3 (not taken) -> 4 -> 5 and 2 -> 5: {0,1,2,4,5} would cycle through 3
    assert [p.nodes for p in it.partitions] == [[0, 1, 2], [4, 5]]
    assert all(k.calls == 1 for k in d.kernels)
    assert_close(got, run_edgerun(m, x))
    assert_close(got, run_litert(m, x))


def test_min_nodes_and_max_partitions():
    m = _chain_model()
    it, got, x = _run(m, [PickDelegate(take={0, 2, 4, 5}, min_nodes_per_partition=2)])
    assert [p.nodes for p in it.partitions] == [[4, 5]]
    assert "min_nodes_per_partition=2" in it.delegation_report().row(0)["reasons"]["pick"]
    assert_close(got, run_edgerun(m, x))
    it, got, _ = _run(m, [PickDelegate(take={0, 1, 3, 4, 5}, max_partitions=1)])
    assert [p.nodes for p in it.partitions] == [[3, 4, 5]]
    assert "max_partitions" in it.delegation_report().row(0)["reasons"]["pick"]


def test_priority_order_and_leftovers_to_next_delegate():
    m = _chain_model()
    first = PickDelegate(take={2, 3})
    second = type("Second", (PickDelegate,), {"name": "second"})(take={0, 1, 2, 3, 4, 5})
    it, got, x = _run(m, [first, second])
    assert [(p.delegate, p.nodes) for p in it.partitions] == [("pick", [2, 3]), ("second", [0, 1]),
                                                             ("second", [4, 5])]
    assert_close(got, run_edgerun(m, x))


def test_dtype_conversion_at_partition_edges():
    m = _chain_model()
    d = PickDelegate(take={2, 3, 4}, want="uint8")
    it, got, x = _run(m, [d])
    assert [p.nodes for p in it.partitions] == [[2, 3, 4]]
    assert_close(got, run_edgerun(m, x))


def test_converters_round_trip():
    b = ModelBuilder()
    t = b.input("x", (4,), "int8", (0.1, -3))
    tensor = b.graph.tensors[t]
    q = np.array([-128, -3, 0, 127], np.int8)
    f = converter(tensor, "int8", "float32")(q)
    np.testing.assert_allclose(f, 0.1 * (q.astype(np.float32) + 3), rtol=1e-6)
    assert np.array_equal(back_converter(tensor, "float32", "int8")(f), q)
    u = converter(tensor, "int8", "uint8")(q)
    assert u.dtype == np.uint8 and np.array_equal(u.astype(int) - 128, q.astype(int))
    assert np.array_equal(back_converter(tensor, "uint8", "int8")(u), q)
    assert converter(tensor, "int8", None) is None
    with pytest.raises(EdgerunError, match="no quantization"):
        converter(b.graph.tensors[b.input("f", (2,), "int8")], "int8", "float32")


def _missing_unary():
    """A float unary op XNNPACK runs that edgerun has no kernel for (yet)."""
    from edgerun.ops import REGISTRY

    for op in ("FLOOR", "CEIL", "NEG", "ROUND", "SQUARE"):
        if "float32" not in getattr(REGISTRY.get(op), "kernels", {}):
            return op
    pytest.skip("edgerun has kernels for every candidate op; this test needs one it lacks")


def _unary_model(op):
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2), "float32")
    y = b.tensor("y", (1, 4, 4, 2), "float32")
    z = b.tensor("z", (1, 4, 4, 2), "float32")
    b.op("RELU6", [x], [y])
    b.op(op, [y], [z])
    b.output(z)
    return b.to_bytes()


def test_node_without_edgerun_kernel_needs_a_delegate():
    op = _missing_unary()
    m = _unary_model(op)
    with pytest.raises(UnsupportedOpError, match="xnnpack"):  # the message names who could run it
        Interpreter(model_content=m).allocate_tensors()
    it, got, x = _run(m, ["xnnpack"])
    assert [p.ops for p in it.partitions] == [["RELU6", op]]
    assert_close(got, run_litert(m, x), rtol=1e-5)
    with pytest.raises(UnsupportedOpError, match=f"delegates refused it: tensorrt: .*no {op} lowering"):
        Interpreter(model_content=m, delegates=["tensorrt"]).allocate_tensors()


def test_cycle_case_end_to_end_with_xnnpack():
    # CONV(xnnpack) -> RELU int8 (XNNPACK takes RELU only as float) -> ADD(conv, relu)(xnnpack)
    q = Q(5)
    x = q.input((1, 6, 6, 3))
    a = q.conv(x, 4, act=Activation.NONE)
    r = q.unary(a, "RELU")
    y = q.add(a, r)
    m = q.done(y)
    it, got, xs = _run(m, ["xnnpack"])
    assert [p.ops for p in it.partitions] == [["CONV_2D"], ["ADD"]]
    assert "RELU/int8" in it.delegation_report().row(1)["reasons"]["xnnpack"]
    assert_close(got, run_edgerun(m, xs), max_lsb=1)
    assert_close(got, run_litert(m, xs), max_lsb=1)
