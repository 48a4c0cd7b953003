"""Resource variables and CALL_ONCE: the state of streaming models (e.g. microWakeWord).

* ``VAR_HANDLE`` names a variable by (container, shared_name); its output is a handle, an int32
  scalar indexing the interpreter's resource table.
* ``ASSIGN_VARIABLE`` (handle, value) stores a copy of value; ``READ_VARIABLE`` (handle) returns it.
* ``CALL_ONCE`` runs the init subgraph the first time the main subgraph is invoked (it assigns
  the initial states); later invokes skip it. ``Interpreter.reset_all_variables`` starts over.

Variables live in ``Interpreter.resources``, shared by all subgraphs and kept across invokes, as
in TFLite's resource variable implementation.
"""

from __future__ import annotations

import numpy as np

from edgerun.errors import EdgerunError, ModelFormatError
from edgerun.ops.registry import Kernel, register


def _table(ctx) -> tuple[dict, list]:
    if ctx.runtime is None:
        raise EdgerunError(f"{ctx.name} needs an interpreter (resource variables are interpreter state)")
    interp = ctx.runtime.interp
    return interp.resources, interp.resource_keys


def _key(ctx, handle: np.ndarray) -> tuple[str, str]:
    _, keys = _table(ctx)
    idx = int(np.asarray(handle).reshape(-1)[0])
    if not 0 <= idx < len(keys):
        raise ModelFormatError(f"node {ctx.index} ({ctx.name}): unknown resource handle {idx}")
    return keys[idx]


@register("VAR_HANDLE", "resource", key=lambda ctx: "resource")
class VarHandle(Kernel):
    def prepare(self):
        o = self.ctx.options
        key = (o.get("container") or "", o.get("shared_name") or "")
        _, keys = _table(self.ctx)
        if key not in keys:
            keys.append(key)
        self.handle = np.array([keys.index(key)], np.int32)
        return [(1,)]

    def eval(self, inputs):
        return [self.handle]


@register("ASSIGN_VARIABLE", "resource")
class AssignVariable(Kernel):
    def prepare(self):
        return []

    def eval(self, inputs):
        table, _ = _table(self.ctx)
        table[_key(self.ctx, inputs[0])] = np.array(inputs[1], copy=True)
        return []


@register("READ_VARIABLE", "resource")
class ReadVariable(Kernel):
    def prepare(self):
        self.dtype = self.ctx.output(0).np_dtype
        return [tuple(self.ctx.output(0).shape)]

    def eval(self, inputs):
        table, _ = _table(self.ctx)
        key = _key(self.ctx, inputs[0])
        if key not in table:
            raise EdgerunError(f"node {self.ctx.index}: READ_VARIABLE of {key[1]!r} before any ASSIGN_VARIABLE")
        return [table[key]]


@register("CALL_ONCE", "none", key=lambda ctx: "none")
class CallOnce(Kernel):
    def prepare(self):
        self.index = int(self.ctx.options.get("init_subgraph_index", 0))
        n = len(self.ctx.model.subgraphs)
        if not 0 < self.index < n:
            raise ModelFormatError(f"node {self.ctx.index} (CALL_ONCE): init subgraph {self.index} "
                                   f"does not exist ({n} subgraphs)")
        return []

    def eval(self, inputs):
        interp = self.ctx.runtime.interp
        if self.index not in interp.called_once:
            interp.called_once.add(self.index)
            interp.run_subgraph(self.index)
        return []
