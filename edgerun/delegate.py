"""The delegate contract, capability tables, discovery, and coverage figures.

A delegate takes over parts of a graph the way LiteRT's ``SimpleDelegateInterface`` does:

1. ``is_available()`` says whether its runtime (library, package, device) is present, and why not;
2. ``supports(node)`` says, per node, whether it can run it and why not (op, dtype, shape rule);
3. the partitioner (:mod:`edgerun.runtime.partition`) groups supported nodes into partitions,
   honouring ``options.min_nodes_per_partition`` and ``options.max_partitions``;
4. ``prepare(partition)`` returns a :class:`DelegateKernel` whose ``invoke(inputs)`` runs the
   partition; edgerun's own kernels run everything else.

Delegates are found only through the entry-point group ``edgerun.delegates`` (declared in
``pyproject.toml`` for the built-in ones in ``delegates/``); a third-party package plugs in the same
way. Loading a delegate class must stay cheap: heavy runtimes are imported inside
``is_available()`` / ``prepare()``, so a missing runtime becomes one
:class:`~edgerun.errors.DelegateUnavailableError` naming what to install.

What a delegate can take is data: a :class:`CapabilityTable` maps a TFLite builtin name (the
schema's spelling, checked against :mod:`edgerun.schema.tflite`) to the dtypes it accepts and an
optional constraint function. The dtype of a node is the one the op registry keys its kernels by,
so the interpreter, ``edgerun check`` and the delegates agree on what "CONV_2D/int8" means.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from edgerun.errors import DelegateUnavailableError, EdgerunError
from edgerun.ir import Model, Subgraph, Tensor
from edgerun.ops.registry import NodeContext, node_dtype, node_macs  # noqa: F401  (public here too)
from edgerun.schema import tflite

ENTRY_POINT_GROUP = "edgerun.delegates"

__all__ = [
    "ENTRY_POINT_GROUP",
    "Availability",
    "CapabilityTable",
    "Delegate",
    "DelegateKernel",
    "DelegateOptions",
    "OpCaps",
    "Partition",
    "Support",
    "coverage",
    "delegate_class",
    "delegate_names",
    "delegates_supporting",
    "extract_submodel",
    "get_delegate",
    "node_context",
    "node_dtype",
    "node_macs",
    "parse_delegate_list",
    "resolve_delegates",
]


# --------------------------------------------------------------------------------------------
# small result types
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Availability:
    """Whether a delegate's runtime is present; ``reason`` says which one, or what is missing."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Support:
    """Whether a delegate takes a node; ``reason`` says why not (op, dtype or shape rule)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @classmethod
    def yes(cls, reason: str = "") -> Support:
        return cls(True, reason)

    @classmethod
    def no(cls, reason: str) -> Support:
        return cls(False, reason)


@dataclass
class DelegateOptions:
    """Partition limits, as LiteRT's ``SimpleDelegateInterface::Options``.

    max_partitions: keep at most this many partitions, the largest (by node count) first;
        0 means no limit.
    min_nodes_per_partition: partitions with fewer nodes are left to edgerun's kernels.
    """

    max_partitions: int = 0
    min_nodes_per_partition: int = 1


# --------------------------------------------------------------------------------------------
# node helpers shared by delegates, the partitioner and `edgerun check`
# --------------------------------------------------------------------------------------------
def node_context(model: Model, graph: Subgraph | int, index: int, shapes: list | None = None,
                 known: dict | None = None):
    """A :class:`edgerun.ops.registry.NodeContext` for node ``index`` without an interpreter.

    shapes default to the shapes stored in the model, known values to the model's constants.
    """
    g = model.subgraphs[graph] if isinstance(graph, int) else graph
    op = g.operators[index]
    if shapes is None:
        shapes = [tuple(t.shape) for t in g.tensors]
    if known is None:
        known = {}
    return NodeContext(model, g, index, op, model.op_name(op), shapes, known)


# --------------------------------------------------------------------------------------------
# capability tables
# --------------------------------------------------------------------------------------------
#: A constraint: gets the NodeContext, returns None when the node is fine, else the reason.
Constraint = Callable[[object], "str | None"]


@dataclass
class OpCaps:
    """One row of a capability table: the dtypes a delegate takes for an op and its limits."""

    dtypes: frozenset[str]
    constraints: tuple[Constraint, ...] = ()
    note: str = ""  # the limit in words, for `edgerun check` and docs


class CapabilityTable:
    """Ops a delegate can run, as data: ``{op: OpCaps}`` plus constraints for every node.

    Keys are TFLite builtin names as the schema spells them (``CONV_2D``) or, for CUSTOM ops,
    their ``custom_code``; a misspelt builtin raises at import, so a table cannot drift from the
    schema the reader, writer and op registry use.
    """

    def __init__(self, delegate: str, ops: dict[str, OpCaps], *,
                 node_constraints: Iterable[Constraint] = (), custom: Iterable[str] = (),
                 missing: Callable[[str], str] | None = None):
        self.delegate = delegate
        #: op -> why it is not in the table, when the delegate knows better than "not in the op
        #: table" (tensorrt: edgerun's exporter lacks a lowering, TensorRT itself runs the op)
        self.missing = missing
        self.custom = frozenset(custom)
        for op in ops:
            if op not in tflite.BUILTIN_OPERATORS and op not in self.custom:
                raise ValueError(f"{delegate}: capability table names unknown op {op!r}")
        self.ops = dict(ops)
        self.node_constraints = tuple(node_constraints)

    def accepts(self, op: str, dtype: str | None) -> bool:
        """Cheap test on (op, dtype) only, for error messages; shape rules are not checked."""
        caps = self.ops.get(op)
        if caps is None:
            return False
        return dtype is None or dtype in caps.dtypes or "*" in caps.dtypes

    def check(self, ctx) -> Support:
        code = ctx.model.op_code(ctx.op)
        op = code.custom_code if code.builtin == "CUSTOM" else code.builtin
        caps = self.ops.get(op or "")
        if caps is None:
            what = f"custom op {op!r}" if code.builtin == "CUSTOM" else op
            if self.missing is not None:
                return Support.no(self.missing(what))
            return Support.no(f"{what} is not in {self.delegate}'s op table")
        dtype = node_dtype(ctx)
        if "*" not in caps.dtypes and dtype not in caps.dtypes:
            return Support.no(f"{op}/{dtype}: {self.delegate} takes {op} only as "
                              f"{', '.join(sorted(caps.dtypes))}")
        for rule in self.node_constraints + caps.constraints:
            why = rule(ctx)
            if why:
                return Support.no(f"{op}/{dtype}: {why}")
        return Support.yes()

    def rows(self) -> list[dict]:
        return [{"op": op, "dtypes": sorted(c.dtypes), "limits": c.note} for op, c in sorted(self.ops.items())]


# --------------------------------------------------------------------------------------------
# partitions and sub-models
# --------------------------------------------------------------------------------------------
@dataclass
class Partition:
    """A connected, cycle-free group of nodes claimed by one delegate.

    inputs: tensors the partition reads that are computed outside it (graph inputs or other
        nodes' outputs), in first-use order; constants are not inputs.
    outputs: tensors it computes that are read outside it or are graph outputs.
    """

    delegate: str
    index: int
    nodes: list[int]
    inputs: list[int]
    outputs: list[int]
    model: Model
    graph_index: int = 0
    shapes: list | None = None
    known: dict = field(default_factory=dict)

    @property
    def graph(self) -> Subgraph:
        return self.model.subgraphs[self.graph_index]

    @property
    def ops(self) -> list[str]:
        return [self.model.op_name(self.graph.operators[n]) for n in self.nodes]

    def tensor(self, index: int) -> Tensor:
        return self.graph.tensors[index]

    def shape(self, index: int) -> tuple[int, ...]:
        src = self.shapes if self.shapes is not None else [t.shape for t in self.graph.tensors]
        return tuple(int(d) for d in src[index])

    def submodel(self) -> Model:
        """The partition as a standalone Model (its nodes, constants, inputs and outputs)."""
        return extract_submodel(self.model, self.graph, self.nodes, self.inputs, self.outputs,
                                shapes=self.shapes, known=self.known)

    def to_bytes(self) -> bytes:
        from edgerun.schema.writer import write_model
        return write_model(self.submodel())

    def to_dict(self) -> dict:
        return {"delegate": self.delegate, "index": self.index, "nodes": list(self.nodes),
                "ops": self.ops, "inputs": list(self.inputs), "outputs": list(self.outputs)}


def extract_submodel(model: Model, graph: Subgraph, nodes: list[int], inputs: list[int],
                     outputs: list[int], *, shapes: list | None = None, known: dict | None = None) -> Model:
    """Copy ``nodes`` of ``graph`` into a new one-subgraph Model.

    Tensors keep their names, dtypes and quantization; constant inputs carry their data (model
    buffers, or values the interpreter folded at ``allocate_tensors``, given in ``known``);
    ``inputs``/``outputs`` become the sub-model's inputs and outputs. ``shapes`` overrides the
    stored shapes (after ``resize_tensor_input``).
    """
    from edgerun.ir import ModelBuilder

    b = ModelBuilder(description=f"edgerun partition of {len(nodes)} nodes")
    remap: dict[int, int] = {}
    is_input = set(inputs)
    known = known or {}

    def tensor(i: int) -> int:
        if i < 0:
            return -1
        if i in remap:
            return remap[i]
        t = graph.tensors[i]
        shape = tuple(int(d) for d in (shapes[i] if shapes is not None else t.shape))
        data = None
        if i not in is_input:
            if i in known:
                data = np.asarray(known[i])
                shape = tuple(data.shape)
            elif t.buffer:
                raw = model.tensor_data(t)
                data = raw if raw is not None else None
        sig = t.shape_signature if (t.shape_signature and shapes is None) else None
        if data is not None and t.sparsity is not None:  # keep the compressed form as it is
            b.model.buffers.append(bytes(model.buffer_bytes(t.buffer)))
            b.graph.tensors.append(Tensor(t.name, shape, t.dtype, len(b.model.buffers) - 1, t.quant,
                                          sig, t.is_variable, t.sparsity, t.has_rank))
            idx = len(b.graph.tensors) - 1
        else:
            idx = b.tensor(t.name, shape, t.dtype, t.quant, data=data, shape_signature=sig)
            b.graph.tensors[idx].is_variable = t.is_variable
        remap[i] = idx
        return idx

    for i in inputs:
        b.graph.inputs.append(tensor(i))
    for n in nodes:
        op = graph.operators[n]
        code = model.op_code(op)
        node = b.op(code.builtin, [tensor(i) for i in op.inputs], [tensor(o) for o in op.outputs],
                    custom_code=code.custom_code, custom_options=op.custom_options, version=code.version)
        node.options = dict(op.options)
    b.output(*[tensor(o) for o in outputs])
    return b.model


class DelegateKernel:
    """Runs one partition. ``invoke`` gets the partition's input arrays (in ``Partition.inputs``
    order) and returns its output arrays (in ``Partition.outputs`` order).

    input_dtypes / output_dtypes: per boundary tensor, the dtype the kernel wants when it differs
    from the graph's (e.g. ``float32`` for an int8 tensor, ``uint8`` for int8); ``None`` keeps the
    graph dtype. The partitioner converts at the partition edge with the tensor's quantization:
    dequantize ``s * (q - zp)``, quantize ``clamp(round(x / s) + zp)``, int8 <-> uint8 by 128.
    """

    input_dtypes: list[str | None] | None = None
    output_dtypes: list[str | None] | None = None

    def invoke(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def input_buffer(self, k: int) -> np.ndarray | None:
        """A writable array ``invoke`` reads input ``k`` from when it is passed that very array
        (the runtime's own input memory), or None. The interpreter may then keep the tensor there,
        so the partition edge costs no copy (``edgerun.runtime.partition.external_buffers``)."""
        return None

    def output_buffer(self, k: int) -> np.ndarray | None:
        """The array ``invoke`` returns as output ``k`` on every call (the runtime's own output
        memory, valid until the next invoke), or None when outputs are fresh arrays."""
        return None

    def close(self) -> None:
        """Release the runtime (optional)."""


class Delegate:
    """Base class of every delegate; subclasses set ``name``, ``capabilities`` and ``install_hint``
    and override ``is_available`` and ``prepare``.

    Constructor keywords set ``options`` fields (``max_partitions``, ``min_nodes_per_partition``);
    any other keyword is kept in ``self.config`` for the delegate (a library path, a port).
    """

    name: str = ""
    capabilities: CapabilityTable | None = None
    #: what to install when the runtime is missing, shown in DelegateUnavailableError
    install_hint: str = ""
    default_options = DelegateOptions()

    def __init__(self, **config):
        base = self.default_options
        self.options = DelegateOptions(
            max_partitions=int(config.pop("max_partitions", base.max_partitions)),
            min_nodes_per_partition=int(config.pop("min_nodes_per_partition", base.min_nodes_per_partition)))
        self.config = config

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # -- availability ------------------------------------------------------------------------
    def is_available(self) -> Availability:
        return Availability(True)

    def unavailable(self, reason: str) -> DelegateUnavailableError:
        hint = f"; {self.install_hint}" if self.install_hint else ""
        return DelegateUnavailableError(f"delegate {self.name!r} cannot run: {reason}{hint}")

    # -- support -----------------------------------------------------------------------------
    def supports(self, node, graph=None, op_index: int | None = None) -> Support:
        """Whether this delegate runs the node at run time.

        ``node`` is a NodeContext, or call ``supports(model, graph, op_index)``.
        """
        ctx = _as_ctx(node, graph, op_index)
        if self.capabilities is None:
            return Support.no(f"{self.name} declares no capability table")
        return self.capabilities.check(ctx)

    def check_node(self, ctx) -> Support:
        """Support as ``edgerun check`` reports it for the target (default: ``supports``).

        A delegate whose runtime only takes pre-compiled graphs (edgetpu) answers here what its
        compiler would map instead.
        """
        return self.supports(ctx)

    def restrict(self, order: list[int], succs: dict[int, set[int]], decisions: dict[int, Support],
                 ctxs: dict) -> dict[int, Support]:
        """Graph-level rules applied after per-node support (default: none).

        order: node indices in execution order; succs: node -> nodes reading its outputs;
        decisions: node -> Support from ``supports``/``check_node``. Return the adjusted map.
        """
        return decisions

    # -- execution ---------------------------------------------------------------------------
    def prepare(self, partition: Partition) -> DelegateKernel:
        raise NotImplementedError


def _as_ctx(node, graph=None, op_index=None):
    if isinstance(node, Model):
        g = graph if graph is not None else 0
        if op_index is None:
            raise TypeError("supports(model, graph, op_index) needs op_index")
        return node_context(node, g, op_index)
    return node


# --------------------------------------------------------------------------------------------
# discovery
# --------------------------------------------------------------------------------------------
def _entry_points() -> dict:
    from importlib.metadata import entry_points

    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)  # first on sys.path wins, as for imports
    return found


def delegate_names() -> list[str]:
    """Names of the installed delegates (entry-point group ``edgerun.delegates``)."""
    return sorted(_entry_points())


_CLASSES: dict[tuple[str, str], type] = {}


def delegate_class(name: str) -> type[Delegate]:
    """The Delegate subclass registered under ``name``; DelegateUnavailableError if none is."""
    eps = _entry_points()
    ep = eps.get(name)
    if ep is None:
        known = ", ".join(sorted(eps)) or "none (pip install edgerun to register the built-in ones)"
        raise DelegateUnavailableError(f"no delegate named {name!r} is installed; installed: {known}")
    key = (name, ep.value)
    cls = _CLASSES.get(key)
    if cls is None:
        try:
            cls = ep.load()
        except Exception as e:
            raise DelegateUnavailableError(f"delegate {name!r} ({ep.value}) failed to import: {e}") from e
        if not (isinstance(cls, type) and issubclass(cls, Delegate)):
            raise DelegateUnavailableError(f"entry point {name!r} = {ep.value} is not an "
                                           "edgerun.delegate.Delegate subclass")
        _CLASSES[key] = cls
    return cls


def get_delegate(name: str, **config) -> Delegate:
    """An instance of the delegate ``name`` (its runtime is not loaded yet)."""
    return delegate_class(name)(**config)


def parse_delegate_list(spec) -> list[str]:
    """``"xnnpack,edgetpu"`` (or a list of such strings) -> ``["xnnpack", "edgetpu"]``.

    Order is priority; duplicates are dropped; ``""``/``"none"``/``"cpu"`` mean no delegate.
    Unknown names raise DelegateUnavailableError listing the installed ones.
    """
    if spec is None:
        return []
    parts = [spec] if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for p in parts:
        for n in str(p).split(","):
            n = n.strip().lower()
            if n and n not in ("none", "cpu") and n not in names:
                names.append(n)
    installed = _entry_points()
    for n in names:
        if n not in installed:
            raise DelegateUnavailableError(f"no delegate named {n!r} is installed; installed: "
                                           f"{', '.join(sorted(installed)) or 'none'}")
    return names


def resolve_delegates(items) -> list[Delegate]:
    """Names (``"xnnpack"``), comma lists, Delegate instances or classes -> instances, in order."""
    out: list[Delegate] = []
    for item in items or []:
        if isinstance(item, Delegate):
            out.append(item)
        elif isinstance(item, type) and issubclass(item, Delegate):
            out.append(item())
        elif isinstance(item, str):
            out.extend(get_delegate(n) for n in parse_delegate_list(item))
        else:
            raise EdgerunError(f"delegates= takes names or edgerun.delegate.Delegate instances, got "
                               f"{type(item).__name__} (LiteRT load_delegate() objects belong to LiteRT's "
                               "Interpreter; use delegates=['edgetpu'] here)")
    names = [d.name for d in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise EdgerunError(f"delegate(s) {', '.join(sorted(dup))} given twice")
    return out


def delegates_supporting(op: str, dtype: str | None) -> list[str]:
    """Installed delegates whose capability tables take (op, dtype). Imports no runtime."""
    names = []
    for name in delegate_names():
        try:
            caps = delegate_class(name).capabilities
        except Exception:  # noqa: BLE001, S112  (a broken third-party delegate must not hide the error being reported)
            continue
        if caps is not None and caps.accepts(op, dtype):
            names.append(name)
    return names


# --------------------------------------------------------------------------------------------
# coverage (for `edgerun bench --delegate` and `edgerun run --delegate`)
# --------------------------------------------------------------------------------------------
def coverage_figures(nodes: list[dict]) -> dict:
    """Share of nodes and MACs delegated, from per-node rows (``{"delegate", "macs", ...}``).

    The one computation behind ``run --delegate``, ``bench`` and ``edgerun check``. A graph
    with no MACs is 100 % delegated by MACs exactly when every node is delegated.
    """
    total_macs = sum(n["macs"] for n in nodes)
    dmacs = sum(n["macs"] for n in nodes if n["delegate"])
    dn = sum(1 for n in nodes if n["delegate"])
    return {"nodes": len(nodes), "delegated_nodes": dn,
            "ops_pct": 100.0 * dn / len(nodes) if nodes else 0.0,
            "macs": total_macs, "delegated_macs": dmacs,
            "macs_pct": 100.0 * dmacs / total_macs if total_macs else (100.0 if nodes and dn == len(nodes) else 0.0)}


def coverage(interp) -> dict:
    """How much of a prepared interpreter's main graph its delegates run.

    Returns ``{"delegates", "nodes", "delegated_nodes", "ops_pct", "macs", "delegated_macs",
    "macs_pct", "partitions": [...], "fallback": [{"node", "op", "dtype", "reasons"}]}``.
    Nodes folded at ``allocate_tensors`` (shape arithmetic) are not counted.
    """
    report = interp.delegation_report()
    nodes = report.nodes
    return {
        "delegates": report.delegates,
        **coverage_figures(nodes),
        "partitions": [p.to_dict() for p in report.partitions],
        "fallback": [{"node": n["node"], "op": n["op"], "dtype": n["dtype"], "reasons": n["reasons"]}
                     for n in nodes if not n["delegate"]],
    }


def coverage_lines(cov: dict) -> list[str]:
    """Human-readable summary of :func:`coverage` (for ``run`` and ``bench``)."""
    lines = [f"delegated: {cov['delegated_nodes']}/{cov['nodes']} ops ({cov['ops_pct']:.1f}%), "
             f"{cov['macs_pct']:.1f}% of {cov['macs']:,} MACs"]
    for p in cov["partitions"]:
        lines.append(f"  partition {p['delegate']}#{p['index']}: nodes {p['nodes'][0]}..{p['nodes'][-1]} "
                     f"({len(p['nodes'])} ops)")
    for f in cov["fallback"]:
        why = "; ".join(f"{d}: {r}" for d, r in f["reasons"].items()) or "no delegate takes it"
        lines.append(f"  on edgerun's kernels: node {f['node']} {f['op']}/{f['dtype']} ({why})")
    return lines


def _refresh() -> None:
    """Forget loaded classes (tests that install a delegate at run time)."""
    _CLASSES.clear()
    import importlib

    importlib.invalidate_caches()
    sys.modules.pop("importlib.metadata._cache", None)
