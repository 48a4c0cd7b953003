"""The op registry: one :class:`OpDef` per TFLite builtin, shared by interpreter, converter and delegates.

A kernel is a class with one instance per node, split the way TFLM splits kernels:

* ``prepare()`` runs once in ``allocate_tensors``: it reads shapes, constants and quantization
  parameters from ``self.ctx``, computes everything that depends only on them (multipliers,
  shifts, activation ranges, im2col indices) and returns the output shapes;
* ``eval(inputs)`` runs at every ``invoke``: numpy only, no per-element Python loops; it gets the
  input arrays (``None`` for omitted optional inputs) and returns the output arrays.

Kernels register per dtype with :func:`register`. The dtype key of a node is its first input's
dtype unless the OpDef says otherwise (``register(..., key=output_dtype)``); QUANTIZE, DEQUANTIZE
and CAST keep the default, since their input dtype is what selects the arithmetic.
Registering the same (op, dtype) twice raises, as TFLM's resolver does. Custom ops register by
their ``custom_code`` with :func:`register_custom`.

Everything else edgerun knows about a builtin lives on its :class:`OpDef` too, declared with
:func:`define` (the table is ``edgerun/ops/builtins.py``): how the converter quantizes it
(:class:`QuantRule`), how many multiply-accumulates a node does (:func:`node_macs`, the one count
``check``, ``bench`` and the delegates use), whether a fused activation may be folded into it,
and the node checks every kernel path shares (``validate``). The op code and options table come
from the schema. Delegates key their capability tables by the same names; this module imports
no delegate, converter or runtime code (the device core stays numpy + flatbuffers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from edgerun.errors import ModelFormatError, UnsupportedOpError
from edgerun.ir import Model, Operator, Subgraph, Tensor
from edgerun.schema import tflite


@dataclass
class NodeContext:
    """What a kernel may look at: the node, its tensors, options and constant inputs."""

    model: Model
    graph: Subgraph
    index: int
    op: Operator
    name: str
    shapes: list  # runtime shapes of the subgraph's tensors (index -> tuple), filled as prepared
    known: dict = field(default_factory=dict)  # tensor index -> value known before invoke
    #: the SubgraphRunner preparing this node (None outside an interpreter): stateful kernels
    #: (resource variables, CALL_ONCE) reach interpreter-wide state through ``runtime.interp``
    runtime: object = None

    @property
    def options(self) -> dict:
        return self.op.options

    @property
    def inputs(self) -> list[Tensor | None]:
        return [self.graph.tensors[i] if i >= 0 else None for i in self.op.inputs]

    @property
    def outputs(self) -> list[Tensor]:
        return [self.graph.tensors[i] for i in self.op.outputs]

    def input(self, i: int) -> Tensor | None:
        if i >= len(self.op.inputs) or self.op.inputs[i] < 0:
            return None
        return self.graph.tensors[self.op.inputs[i]]

    def output(self, i: int = 0) -> Tensor:
        return self.graph.tensors[self.op.outputs[i]]

    def input_shape(self, i: int) -> tuple[int, ...]:
        return tuple(self.shapes[self.op.inputs[i]])

    def const(self, i: int) -> np.ndarray | None:
        """The constant data of input ``i`` (a zero-copy view), or None if it is computed at run time."""
        if i >= len(self.op.inputs) or self.op.inputs[i] < 0:
            return None
        idx = self.op.inputs[i]
        if idx in self.known:
            return self.known[idx]
        return self.model.tensor_data(self.graph.tensors[idx])

    def relayout_const(self, i: int, value: np.ndarray) -> None:
        """Let input ``i``'s folded value (an array computed during prepare, e.g. a DEQUANTIZE
        of fp16 weights) be ``value`` instead: the same numbers in the layout the kernel keeps
        (a view of its own copy), so the interpreter does not hold the weights twice. Nothing
        changes for a tensor that another node also reads or that is a graph output (it keeps
        the array as computed, C-contiguous)."""
        idx = self.op.inputs[i]
        old = self.known.get(idx)
        if old is None or old.shape != value.shape or old.dtype != value.dtype or idx in self.graph.outputs:
            return
        if sum(op.inputs.count(idx) for op in self.graph.operators) == 1:
            self.known[idx] = value

    def fail(self, detail: str) -> UnsupportedOpError:
        """The error for a node edgerun's kernels cannot run (the interpreter adds the delegates
        that could)."""
        t = self.input(0) or (self.output(0) if self.op.outputs else None)
        return UnsupportedOpError(self.name, t.dtype if t is not None else None, node_index=self.index,
                                  detail=detail)

    def invalid(self, detail: str) -> ModelFormatError:
        """The error for a node no runtime would accept (LiteRT's Prepare would fail too)."""
        return ModelFormatError(f"node {self.index} ({self.name}): {detail}")


class Kernel:
    """Base kernel: subclasses override ``prepare`` and ``eval``.

    A kernel whose output depends only on input shapes (SHAPE) sets ``shape_only = True``; the
    interpreter then evaluates it in ``allocate_tensors`` and treats the result as a constant,
    which constant-folds shape arithmetic (SHAPE -> GATHER -> CONCATENATION -> RESHAPE).
    """

    shape_only = False

    def __init__(self, ctx: NodeContext):
        self.ctx = ctx

    def prepare(self) -> list[tuple[int, ...]] | None:
        """Return the output shapes (None keeps the shapes stored in the model)."""
        return None

    def eval(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        raise NotImplementedError


def _first_input_dtype(ctx: NodeContext) -> str:
    for t in ctx.inputs:
        if t is not None:
            return t.dtype
    return ctx.output(0).dtype


@dataclass(frozen=True)
class QuantRule:
    """How the converter quantizes one op (TFLite's int8 spec; see ``edgerun.convert.quantize``).

    kind: "weights" (int8 per-channel weights at ``weight_input`` along ``weight_axis``, int32
    bias at ``bias_input``), "fixed" (output params ``fixed``), "same" (inputs ``shared`` and
    outputs share params), "own" (output from its calibrated range), "float" (no int8 form).
    int8_version: the op version LiteRT needs for the int8 form.
    """

    kind: str
    weight_input: int = 1
    weight_axis: int = 0
    bias_input: int | None = 2
    fixed: tuple[float, int] | None = None
    shared: tuple[int, ...] = (0,)  # data inputs that share the output's params ("same")
    int8_version: int = 2


#: A node check: gets the NodeContext (shapes of the node's inputs known), raises
#: ModelFormatError (``ctx.invalid``) for a node no runtime would accept.
Validator = Callable[[NodeContext], None]


@dataclass
class OpDef:
    """Everything edgerun knows about one TFLite builtin op.

    Its code and options table come from the schema (``code``, ``options_table``); its shape rule
    is its kernels' ``prepare`` (output shapes from input shapes and options), chosen per dtype by
    ``key``. Custom ops have kernels only (:func:`register_custom`).
    """

    name: str
    kernels: dict[str, type[Kernel]] = field(default_factory=dict)
    key: Callable[[NodeContext], str] = _first_input_dtype
    #: how the converter quantizes this op (None: the converter has no int8 rule for it)
    quant_rule: QuantRule | None = None
    #: multiply-accumulates of one node (None: the op does no MACs worth counting)
    macs: Callable[[NodeContext], int] | None = None
    #: whether the converter may fold a following activation into ``fused_activation_function``
    fused_activation: bool = False
    #: node checks shared by every kernel path (edgerun's kernels and delegates alike)
    validators: tuple[Validator, ...] = ()
    #: upper bound of the working memory (bytes) a node's kernel needs beyond its tensors
    #: (padded copies of the input); the interpreter counts it in its memory budget
    scratch: Callable[[NodeContext], int] | None = None
    #: (min, max) number of inputs and of outputs a node of this op may have (max None: any)
    inputs: tuple[int, int | None] = (1, None)
    outputs: tuple[int, int | None] = (1, None)

    @property
    def code(self) -> int:
        """The schema's builtin operator code."""
        return tflite.BUILTIN_OPERATORS[self.name]

    @property
    def options_table(self) -> str | None:
        """The name of the schema's options table this op carries (None: it has none)."""
        return tflite.OP_OPTIONS.get(self.name)

    @property
    def option_fields(self) -> tuple[str, ...]:
        table = tflite.OP_OPTIONS.get(self.name)
        return tuple(f[0] for f in tflite.OPTION_FIELDS.get(table, ()) if f is not None) if table else ()

    @property
    def dtypes(self) -> list[str]:
        return sorted(self.kernels)

    def validate(self, ctx: NodeContext) -> None:
        """Raise ModelFormatError for a node of this op that no runtime would accept."""
        for what, (lo, hi), have in (("inputs", self.inputs, ctx.op.inputs),
                                     ("outputs", self.outputs, ctx.op.outputs)):
            n = len(have)
            if n < lo or (hi is not None and n > hi):
                want = f"{lo}" if lo == hi else f"{lo} to {hi}" if hi is not None else f"at least {lo}"
                raise ctx.invalid(f"has {n} {what}, {self.name} takes {want}")
        for check in self.validators:
            check(ctx)


REGISTRY: dict[str, OpDef] = {}
CUSTOM: dict[str, type[Kernel]] = {}


def op_def(op: str) -> OpDef:
    """The OpDef of builtin ``op``, created on first use (the name must be in the schema)."""
    d = REGISTRY.get(op)
    if d is None:
        if op not in tflite.BUILTIN_OPERATORS or op == "CUSTOM":
            raise ValueError(f"{op!r} is not a TFLite builtin operator")
        d = REGISTRY[op] = OpDef(op)
    return d


def define(op: str, *, quant: QuantRule | None = None, macs: Callable[[NodeContext], int] | None = None,
           fused_activation: bool = False, validators: tuple[Validator, ...] = (),
           inputs: tuple[int, int | None] | None = None,
           outputs: tuple[int, int | None] | None = None,
           scratch: Callable[[NodeContext], int] | None = None) -> OpDef:
    """Declare the facts of builtin ``op`` beyond its kernels (see ``edgerun/ops/builtins.py``)."""
    d = op_def(op)
    if quant is not None:
        d.quant_rule = quant
    if macs is not None:
        d.macs = macs
    if scratch is not None:
        d.scratch = scratch
    d.fused_activation = d.fused_activation or fused_activation
    d.validators = d.validators + tuple(validators)
    if inputs is not None:
        d.inputs = inputs
    if outputs is not None:
        d.outputs = outputs
    return d


def register(op: str, *dtypes: str, key: Callable[[NodeContext], str] | None = None):
    """Class decorator: register a kernel for ``op`` and each of ``dtypes``."""

    def deco(cls: type[Kernel]) -> type[Kernel]:
        d = op_def(op)
        if key is not None:
            d.key = key
        for dt in dtypes:
            if dt in d.kernels:
                raise ValueError(f"{op}/{dt} is registered twice ({d.kernels[dt].__name__}, {cls.__name__})")
            d.kernels[dt] = cls
        return cls

    return deco


def register_custom(name: str, kernel: type[Kernel], *, replace: bool = False) -> None:
    """Register a kernel for CUSTOM ops whose ``custom_code`` is ``name``."""
    if name in CUSTOM and not replace:
        raise ValueError(f"custom op {name!r} is already registered")
    CUSTOM[name] = kernel


def output_dtype(ctx: NodeContext) -> str:
    """Key function for ops whose kernel is chosen by the output dtype."""
    return ctx.output(0).dtype


def lookup(ctx: NodeContext, custom: dict[str, type[Kernel]] | None = None) -> tuple[type[Kernel], str]:
    """Find the kernel class for a node, or raise UnsupportedOpError naming it."""
    code = ctx.model.op_code(ctx.op)
    if code.builtin == "CUSTOM":
        name = code.custom_code or ""
        k = (custom or {}).get(name) or CUSTOM.get(name)
        if k is None:
            raise UnsupportedOpError(f"CUSTOM:{name}", None, node_index=ctx.index,
                                     detail="no kernel registered for this custom op "
                                            "(edgerun.ops.register_custom or Interpreter(custom_ops=...))")
        return k, "custom"
    d = REGISTRY.get(code.builtin)
    if d is None or not d.kernels:
        raise UnsupportedOpError(code.builtin, None, node_index=ctx.index)
    dtype = d.key(ctx)
    k = d.kernels.get(dtype)
    if k is None:
        raise UnsupportedOpError(code.builtin, dtype, node_index=ctx.index,
                                 detail=f"edgerun has kernels for {', '.join(d.dtypes) or 'no dtype'}")
    return k, dtype


def node_dtype(ctx: NodeContext) -> str:
    """The dtype a node's kernels are keyed by (its OpDef's rule), e.g. ``int8``; never raises
    for a model the reader accepted (a key function that needs missing tensors falls back to the
    first input's dtype)."""
    code = ctx.model.op_code(ctx.op)
    d = REGISTRY.get(code.builtin) if code.builtin != "CUSTOM" else None
    if d is not None:
        try:
            return d.key(ctx)
        except (IndexError, KeyError, TypeError, ValueError):  # a broken model lacks the tensor the key reads
            pass
    for t in ctx.inputs:
        if t is not None:
            return t.dtype
    return ctx.output(0).dtype if ctx.op.outputs else ""


def node_macs(ctx: NodeContext) -> int:
    """Multiply-accumulates of one node (its OpDef's ``macs``; 0 for ops without one, or for a
    node whose tensors a broken model leaves out)."""
    d = REGISTRY.get(ctx.name)
    if d is None or d.macs is None:
        return 0
    try:
        return int(d.macs(ctx))
    except (IndexError, TypeError, ValueError):
        return 0


def node_scratch(ctx: NodeContext) -> int:
    """Working memory (bytes) a node's kernel may allocate beyond its tensors (0 if declared none)."""
    d = REGISTRY.get(ctx.name)
    if d is None or d.scratch is None:
        return 0
    return int(d.scratch(ctx))


def registered_pairs() -> list[tuple[str, str]]:
    """Every (op, dtype) edgerun has a kernel for, sorted."""
    return sorted((op, dt) for op, d in REGISTRY.items() for dt in d.kernels)


def quant_rules() -> dict[str, QuantRule]:
    """{op: QuantRule} for every op the converter knows how to quantize."""
    return {op: d.quant_rule for op, d in sorted(REGISTRY.items()) if d.quant_rule is not None}


def fused_activation_ops() -> frozenset[str]:
    """Ops into which the converter may fold a following activation."""
    return frozenset(op for op, d in REGISTRY.items() if d.fused_activation)
