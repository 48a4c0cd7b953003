"""Graph partitioning: delegates claim subgraphs, edgerun's kernels run the rest.

Delegates are asked in priority order. For each one:

1. every node not yet claimed gets a :class:`~edgerun.delegate.Support` (``supports`` at run time,
   ``check_node`` for ``edgerun check``), then the delegate's graph-level rules (``restrict``);
2. supported nodes are grouped greedily in execution order: a node joins the group of a supported
   producer when the merged group stays *convex*, i.e. no path leaves the group and comes back
   (through an unsupported node or another delegate's partition). Contracting a non-convex group
   into one kernel would create a cycle: A -> X -> C with A, C supported and X not cannot become
   one partition {A, C}, because X needs A's output and C needs X's;
3. groups smaller than ``min_nodes_per_partition`` are dropped, then only the ``max_partitions``
   largest are kept; dropped nodes stay available to lower-priority delegates.

Groups are connected by construction (a node only joins groups of nodes it reads from). The
greedy order makes the result maximal for the common cases but, like LiteRT's own partitioner,
not necessarily the partition with the fewest groups (that problem is NP-hard in general).

The new execution order is a topological sort of the contracted graph that keeps the original
order wherever it can. A partition's kernel may want other dtypes at its edges than the graph has
(float32 for a quantized tensor, uint8 for int8): the partition step converts with the tensor's
quantization parameters on the way in and out.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from edgerun.delegate import Delegate, Partition, Support, coverage_figures, node_context
from edgerun.errors import EdgerunError, UnsupportedOpError
from edgerun.ops.registry import node_dtype, node_macs
from edgerun.runtime.steps import Step


# --------------------------------------------------------------------------------------------
# the grouping algorithm (pure: node ids and edges only)
# --------------------------------------------------------------------------------------------
class _Groups:
    """Disjoint node groups over a DAG with convexity checks on merges."""

    def __init__(self, order: list[int], succs: dict[int, set[int]]):
        self.pos = {n: i for i, n in enumerate(order)}
        self.succs = succs
        self.group_of: dict[int, int] = {n: n for n in order}
        self.members: dict[int, set[int]] = {n: {n} for n in order}

    def find(self, n: int) -> int:
        return self.group_of[n]

    def union(self, a: int, b: int) -> int:
        ga, gb = self.find(a), self.find(b)
        if ga == gb:
            return ga
        if len(self.members[ga]) < len(self.members[gb]):
            ga, gb = gb, ga
        for n in self.members[gb]:
            self.group_of[n] = ga
        self.members[ga] |= self.members.pop(gb)
        return ga

    def would_cycle(self, ga: int, gb: int) -> bool:
        """True when merging groups ``ga`` and ``gb`` makes a path leave the union and re-enter it."""
        s = self.members[ga] | self.members[gb]
        hi = max(self.pos[n] for n in s)
        # Edges only go forward in execution order; a path goes back only by entering a contracted
        # unit at a late member and leaving it at an early one. So units starting after ``hi`` cannot
        # lead back once ``hi`` is past every unit that straddles it (a unit {0, 5} reached from node 3
        # leads back to node 0's successors): interval merging over the multi-node units.
        for lo, up in sorted((min(p), max(p)) for p in
                             ([self.pos[y] for y in m] for m in self.members.values() if len(m) > 1)):
            if lo <= hi < up:
                hi = up
        stack = [m for n in s for m in self.succs.get(n, ()) if m not in s]
        seen: set[int] = set()
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            unit = self.members[self.find(x)]  # other groups are contracted: enter one, leave anywhere
            if min(self.pos[y] for y in unit) > hi:
                seen.update(unit)
                continue
            for y in unit:
                seen.add(y)
                for z in self.succs.get(y, ()):
                    if z in s:
                        return True
                    if z not in seen:
                        stack.append(z)
        return False


def group_nodes(order: list[int], preds: dict[int, set[int]], succs: dict[int, set[int]],
                eligible: set[int], fixed: list[list[int]] = ()) -> list[list[int]]:
    """Connected convex groups of ``eligible`` nodes (see the module docstring).

    order: all nodes in a topological (execution) order; preds/succs: direct data dependencies;
    fixed: groups formed earlier (other delegates' partitions), treated as single nodes.
    Returns the groups, each sorted by execution order, in order of their first node.
    """
    g = _Groups(order, succs)
    for grp in fixed:
        for n in grp[1:]:
            g.union(grp[0], n)
    mine: set[int] = set()  # group ids formed in this call
    for v in order:
        if v not in eligible:
            continue
        mine.add(v)
        for p in sorted(preds.get(v, ()), key=g.pos.__getitem__):
            if p not in eligible:
                continue
            gp, gv = g.find(p), g.find(v)
            if gp == gv or gp not in mine:
                continue
            if not g.would_cycle(gp, gv):
                merged = g.union(gp, gv)
                mine.discard(gp), mine.discard(gv)
                mine.add(merged)
    groups = [sorted(g.members[r], key=g.pos.__getitem__) for r in mine]
    return sorted(groups, key=lambda grp: g.pos[grp[0]])


# --------------------------------------------------------------------------------------------
# planning over a model
# --------------------------------------------------------------------------------------------
@dataclass
class Plan:
    partitions: list[Partition]
    #: node -> {delegate name: Support}
    decisions: dict[int, dict[str, Support]]
    order: list[int]
    claimed: dict[int, tuple[str, int]]  # node -> (delegate, partition index)


def _edges(graph, nodes: list[int]) -> tuple[dict, dict]:
    producer = {}
    for n in nodes:
        for o in graph.operators[n].outputs:
            producer[o] = n
    preds: dict[int, set[int]] = {n: set() for n in nodes}
    succs: dict[int, set[int]] = {n: set() for n in nodes}
    for n in nodes:
        for i in graph.operators[n].inputs:
            p = producer.get(i)
            if p is not None and p != n:
                preds[n].add(p)
                succs[p].add(n)
    return preds, succs


def _boundary(model, graph, nodes: list[int], known: dict, all_nodes: list[int]) -> tuple[list[int], list[int]]:
    inside = set(nodes)
    produced = {o for n in nodes for o in graph.operators[n].outputs}
    inputs: list[int] = []
    for n in nodes:
        for i in graph.operators[n].inputs:
            if i < 0 or i in produced or i in inputs or i in known:
                continue
            t = graph.tensors[i]
            if t.buffer and i not in graph.inputs and len(model.buffer_bytes(t.buffer)):
                continue  # a constant: it goes into the sub-model
            inputs.append(i)
    read_outside = {i for n in all_nodes if n not in inside for i in graph.operators[n].inputs}
    outputs = [o for n in nodes for o in graph.operators[n].outputs
               if o in read_outside or o in graph.outputs]
    return inputs, outputs


def plan(model, graph_index: int, nodes: list[int], delegates: list[Delegate], *,
         shapes: list | None = None, known: dict | None = None, mode: str = "run",
         contexts: dict | None = None) -> Plan:
    """Partition ``nodes`` (execution order) of a subgraph among ``delegates`` (priority order).

    mode "run" asks ``Delegate.supports``; mode "check" asks ``Delegate.check_node``.
    """
    graph = model.subgraphs[graph_index]
    if shapes is None:
        shapes = [tuple(t.shape) for t in graph.tensors]
    if known is None:
        known = {}
    ctxs = dict(contexts or {})
    for n in nodes:
        if n not in ctxs:
            ctxs[n] = node_context(model, graph, n, shapes, known)
    preds, succs = _edges(graph, nodes)
    decisions: dict[int, dict[str, Support]] = {n: {} for n in nodes}
    claimed: dict[int, tuple[str, int]] = {}
    partitions: list[Partition] = []
    fixed: list[list[int]] = []
    for d in delegates:
        dec: dict[int, Support] = {}
        for n in nodes:
            if n in claimed:
                dec[n] = Support.no(f"taken by {claimed[n][0]}")
                continue
            try:
                dec[n] = d.check_node(ctxs[n]) if mode == "check" else d.supports(ctxs[n])
            except EdgerunError as e:
                dec[n] = Support.no(str(e))
        dec = d.restrict(list(nodes), succs, dec, ctxs)
        eligible = {n for n, s in dec.items() if s.ok and n not in claimed}
        groups = getattr(d, "group_nodes", group_nodes)(nodes, preds, succs, eligible, fixed)
        mn = max(1, d.options.min_nodes_per_partition)
        small = [g for g in groups if len(g) < mn]
        groups = [g for g in groups if len(g) >= mn]
        for g in small:
            for n in g:
                dec[n] = Support.no(f"its partition has {len(g)} node(s), fewer than "
                                    f"{d.name}'s min_nodes_per_partition={mn}")
        if d.options.max_partitions and len(groups) > d.options.max_partitions:
            pos = {n: i for i, n in enumerate(nodes)}
            ranked = sorted(groups, key=lambda g: (-len(g), pos[g[0]]))
            keep = ranked[:d.options.max_partitions]
            for g in ranked[d.options.max_partitions:]:
                for n in g:
                    dec[n] = Support.no(f"{d.name} keeps only its {d.options.max_partitions} largest "
                                        "partition(s) (max_partitions)")
            groups = sorted(keep, key=lambda g: pos[g[0]])
        for g in groups:
            idx = len(partitions)
            ins, outs = _boundary(model, graph, g, known, nodes)
            partitions.append(Partition(d.name, idx, list(g), ins, outs, model, graph_index,
                                        shapes, {i: known[i] for n in g for i in graph.operators[n].inputs
                                                 if i in known}))
            for n in g:
                claimed[n] = (d.name, idx)
            fixed.append(list(g))
        for n, s in dec.items():
            decisions[n][d.name] = s
    return Plan(partitions, decisions, list(nodes), claimed)


@dataclass
class DelegationReport:
    """Who runs each node of a prepared subgraph (``Interpreter.delegation_report()``).

    delegates: the delegates asked, in priority order.
    nodes: one JSON-ready row per node run at invoke (nodes folded in ``allocate_tensors`` are not
        counted): ``{"node", "op", "dtype", "delegate", "partition", "reasons", "macs"}``, where
        ``delegate``/``partition`` say who took it (None: edgerun's kernels) and ``reasons`` maps
        each delegate that refused it to why.
    partitions: the partitions formed, in order.
    """

    delegates: list[str]
    nodes: list[dict]
    partitions: list[Partition]

    def figures(self) -> dict:
        """Share of nodes and MACs delegated (``edgerun.delegate.coverage_figures``)."""
        return coverage_figures(self.nodes)

    def row(self, node: int) -> dict:
        for r in self.nodes:
            if r["node"] == node:
                return r
        raise KeyError(node)


def node_rows(model, graph, nodes: list[int], p: Plan | None, ctxs: dict) -> list[dict]:
    """One JSON-ready row per node (see :class:`DelegationReport`)."""
    rows = []
    for n in nodes:
        ctx = ctxs[n]
        who = p.claimed.get(n) if p else None
        rows.append({
            "node": n, "op": ctx.name, "dtype": node_dtype(ctx),
            "delegate": who[0] if who else None, "partition": who[1] if who else None,
            "reasons": {k: s.reason for k, s in (p.decisions[n].items() if p else []) if not s.ok},
            "macs": node_macs(ctx),
        })
    return rows


def node_report(runner, delegates: list[Delegate], p: Plan | None = None) -> list[dict]:
    """The rows of a prepared subgraph runner's nodes (all on edgerun's kernels unless ``p``)."""
    nodes = p.order if p is not None else [n for s in runner.steps for n in s.nodes]
    ctxs = {n: node_context(runner.model, runner.graph, n, runner.shapes, runner.known) for n in nodes}
    return node_rows(runner.model, runner.graph, nodes, p, ctxs)


# --------------------------------------------------------------------------------------------
# dtype conversion at partition edges
# --------------------------------------------------------------------------------------------
def _qparams(t) -> tuple[float, int]:
    if not t.quantized:
        raise EdgerunError(f"tensor '{t.name}' ({t.dtype}) has no quantization parameters, so it cannot "
                           "be converted at a partition edge")
    if t.quant.scale.size != 1:
        raise EdgerunError(f"tensor '{t.name}' is quantized per axis; partition edges need per-tensor")
    return float(t.quant.scale[0]), int(t.quant.zero_point[0])


def converter(tensor, have: str, want: str | None):
    """A function converting arrays of ``tensor`` from dtype ``have`` to ``want`` (None: identity)."""
    if want is None or want == have:
        return None
    if {have, want} == {"int8", "uint8"}:
        if want == "uint8":
            return lambda x: (x.astype(np.int16) + 128).astype(np.uint8)
        return lambda x: (x.astype(np.int16) - 128).astype(np.int8)
    if want == "float32" and have in ("int8", "uint8", "int16"):
        s, zp = _qparams(tensor)
        scale = np.float32(s)
        return lambda x: (x.astype(np.float32) - np.float32(zp)) * scale
    raise EdgerunError(f"no conversion from {have} to {want} at the edge of tensor '{tensor.name}'")


def back_converter(tensor, have: str | None, want: str):
    """Convert a kernel's output (dtype ``have``) to the graph tensor's dtype ``want``."""
    if have is None or have == want:
        return None
    if {have, want} == {"int8", "uint8"}:
        return converter(tensor, have, want)
    if have == "float32" and want in ("int8", "uint8", "int16"):
        s, zp = _qparams(tensor)
        info = np.iinfo(np.dtype(want))
        dt = np.dtype(want)
        return lambda x: np.clip(np.round(np.asarray(x, np.float32) / np.float32(s)) + zp,
                                 info.min, info.max).astype(dt)
    raise EdgerunError(f"no conversion from {have} to {want} at the edge of tensor '{tensor.name}'")


def partition_fn(kernel, part: Partition):
    """The callable a partition step runs: edge conversions around ``kernel.invoke``."""
    g = part.graph
    n_in, n_out = len(part.inputs), len(part.outputs)
    want_in = kernel.input_dtypes or [None] * n_in
    have_out = kernel.output_dtypes or [None] * n_out
    cin = [converter(g.tensors[t], g.tensors[t].dtype, w) for t, w in zip(part.inputs, want_in)]
    cout = [back_converter(g.tensors[t], h, g.tensors[t].dtype) for t, h in zip(part.outputs, have_out)]
    if not any(cin) and not any(cout):
        return kernel.invoke

    def run(inputs):
        xs = [c(x) if c else x for c, x in zip(cin, inputs)]
        ys = kernel.invoke(xs)
        return [c(y) if c else y for c, y in zip(cout, ys)]

    return run


def external_buffers(runner) -> dict[int, np.ndarray]:
    """Tensors at a partition's edge that can live in the delegate runtime's own buffers.

    A kernel offering ``input_buffer(k)`` / ``output_buffer(k)`` (LiteRT's tensor memory) gets
    the tensor bound there instead of in the arena, so the edge costs no copy: ``set_tensor``
    writes a graph input straight into LiteRT's input, and a partition output is read where
    LiteRT left it. Only edges without a dtype conversion qualify, and a graph input only when
    the partition is its sole reader (another step must not see LiteRT's buffer change under
    it); the buffer's shape and dtype must be the tensor's.
    """
    g = runner.graph
    readers: dict[int, int] = {}
    for st in runner.steps:
        for i in set(st.inputs):
            if i >= 0:
                readers[i] = readers.get(i, 0) + 1
    graph_inputs = set(g.inputs)
    out: dict[int, np.ndarray] = {}
    for st in runner.steps:
        kernel = st.kernel
        if st.dtype != "delegate" or kernel is None:
            continue
        want_in = kernel.input_dtypes or [None] * len(st.inputs)
        have_out = kernel.output_dtypes or [None] * len(st.outputs)
        edges = [(i, k, w, kernel.input_buffer) for k, (i, w) in enumerate(zip(st.inputs, want_in))
                 if i in graph_inputs and readers.get(i) == 1]
        edges += [(o, k, h, kernel.output_buffer) for k, (o, h) in enumerate(zip(st.outputs, have_out))
                  if o not in graph_inputs]
        for t, k, dt, get in edges:
            tensor = g.tensors[t]
            if t in out or t in runner.known or tensor.is_variable or (dt is not None and dt != tensor.dtype):
                continue
            buf = get(k)
            if (buf is not None and buf.dtype == tensor.np_dtype and tuple(buf.shape) == tuple(runner.shapes[t])
                    and buf.flags.writeable):
                out[t] = buf
    return out


# --------------------------------------------------------------------------------------------
# the interpreter hook
# --------------------------------------------------------------------------------------------
def _toposort(units: list[tuple[list[int], list[int], list[int], object]], order_pos: dict[int, int]):
    """units: (nodes, inputs, outputs, payload). Kahn's algorithm, earliest original node first."""
    producer = {}
    for ui, (_, _, outs, _) in enumerate(units):
        for o in outs:
            producer[o] = ui
    deps = [set() for _ in units]
    users = [set() for _ in units]
    for ui, (_, ins, _, _) in enumerate(units):
        for i in ins:
            p = producer.get(i)
            if p is not None and p != ui:
                deps[ui].add(p)
                users[p].add(ui)
    key = [min(order_pos[n] for n in u[0]) for u in units]
    heap = [(key[ui], ui) for ui in range(len(units)) if not deps[ui]]
    heapq.heapify(heap)
    out = []
    while heap:
        _, ui = heapq.heappop(heap)
        out.append(units[ui][3])
        for v in users[ui]:
            deps[v].discard(ui)
            if not deps[v]:
                heapq.heappush(heap, (key[v], v))
    if len(out) != len(units):  # cannot happen with convex partitions; guard the invariant
        raise EdgerunError("internal error: delegate partitions form a cycle")
    return out


def apply_delegates(runner, steps: list[Step], delegates: list[Delegate]) -> tuple[list[Step], DelegationReport]:
    """Replace runs of claimed nodes by one step per partition; returns (steps, report).

    ``runner`` is the subgraph being prepared (its model, graph, index, shapes and known values
    are read). Steps whose node has no edgerun kernel (``step.kernel is None``) must be claimed
    by a delegate, else their UnsupportedOpError is raised here.
    """
    model, graph = runner.model, runner.graph
    by_node = {s.node: s for s in steps}
    nodes = [s.node for s in steps]
    ctxs = {s.node: s.kernel.ctx if s.kernel is not None else
            node_context(model, graph, s.node, runner.shapes, runner.known) for s in steps}
    p = plan(model, runner.index, nodes, delegates, shapes=runner.shapes, known=runner.known,
             contexts=ctxs)
    for s in steps:
        if s.kernel is None and s.node not in p.claimed:
            err = s.error
            if err is not None:
                tried = ", ".join(f"{k}: {v.reason}" for k, v in p.decisions[s.node].items())
                if tried:
                    detail = f"{err.detail}; " if err.detail else ""
                    err = UnsupportedOpError(err.op, err.dtype, node_index=err.node_index,
                                             candidates=err.candidates,
                                             detail=f"{detail}delegates refused it: {tried}")
                raise err
            raise EdgerunError(f"node {s.node} ({s.name}) has no kernel and no delegate took it")
    report = DelegationReport([d.name for d in delegates], node_rows(model, graph, nodes, p, ctxs),
                              list(p.partitions))
    if not p.partitions:
        return steps, report
    by_name = {d.name: d for d in delegates}
    pos = {n: i for i, n in enumerate(nodes)}
    units = []
    claimed_nodes = set(p.claimed)
    for part in p.partitions:
        d = by_name[part.delegate]
        avail = d.is_available()
        if not avail:
            raise d.unavailable(avail.reason)
        kernel = d.prepare(part)
        step = Step(f"{d.name}:{part.index}", list(part.inputs), list(part.outputs),
                    partition_fn(kernel, part), list(part.nodes), "delegate", kernel, partition=part)
        units.append((part.nodes, part.inputs, part.outputs, step))
    for n in nodes:
        if n not in claimed_nodes:
            s = by_node[n]
            units.append(([n], [i for i in s.inputs if i >= 0], s.outputs, s))
    return _toposort(units, pos), report
