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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from edgerun.errors import UnsupportedOpError
from edgerun.ir import Model, Operator, Subgraph, Tensor


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

    def fail(self, detail: str) -> UnsupportedOpError:
        t = self.input(0) or self.output(0)
        return UnsupportedOpError(self.name, t.dtype, node_index=self.index, detail=detail,
                                  candidates=delegates_for(self.name, t.dtype))


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


@dataclass
class OpDef:
    name: str
    kernels: dict[str, type[Kernel]] = field(default_factory=dict)
    key: Callable[[NodeContext], str] = _first_input_dtype
    #: filled by the converter: how this op is quantized (see edgerun.convert.quantize)
    quant_rule: object = None

    @property
    def dtypes(self) -> list[str]:
        return sorted(self.kernels)


REGISTRY: dict[str, OpDef] = {}
CUSTOM: dict[str, type[Kernel]] = {}
#: (op, dtype) pairs executed by any interpreter in this process; the op-coverage test reads it.
EXECUTED: set[tuple[str, str]] = set()


def register(op: str, *dtypes: str, key: Callable[[NodeContext], str] | None = None):
    """Class decorator: register a kernel for ``op`` and each of ``dtypes``."""

    def deco(cls: type[Kernel]) -> type[Kernel]:
        d = REGISTRY.setdefault(op, OpDef(op))
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


def delegates_for(op: str, dtype: str | None) -> list[str]:
    """Names of installed delegates whose capability tables accept (op, dtype). Never raises."""
    try:
        from edgerun.delegate import delegates_supporting
    except Exception:  # delegate framework absent or broken: the message just omits candidates
        return []
    try:
        return delegates_supporting(op, dtype)
    except Exception:
        return []


def lookup(ctx: NodeContext, custom: dict[str, type[Kernel]] | None = None) -> tuple[type[Kernel], str]:
    """Find the kernel class for a node, or raise UnsupportedOpError naming it."""
    code = ctx.model.op_code(ctx.op)
    if code.builtin == "CUSTOM":
        name = code.custom_code or ""
        k = (custom or {}).get(name) or CUSTOM.get(name)
        if k is None:
            raise UnsupportedOpError(f"CUSTOM:{name}", None, node_index=ctx.index,
                                     detail="no kernel registered for this custom op "
                                            "(edgerun.ops.register_custom or Interpreter(custom_ops=...))",
                                     candidates=delegates_for(name, None))
        return k, "custom"
    d = REGISTRY.get(code.builtin)
    if d is None:
        raise UnsupportedOpError(code.builtin, None, node_index=ctx.index,
                                 candidates=delegates_for(code.builtin, None))
    dtype = d.key(ctx)
    k = d.kernels.get(dtype)
    if k is None:
        raise UnsupportedOpError(code.builtin, dtype, node_index=ctx.index,
                                 detail=f"edgerun has kernels for {', '.join(d.dtypes) or 'no dtype'}",
                                 candidates=delegates_for(code.builtin, dtype))
    return k, dtype


def registered_pairs() -> list[tuple[str, str]]:
    return sorted((op, dt) for op, d in REGISTRY.items() for dt in d.kernels)
