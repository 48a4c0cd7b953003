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


def _assign(table: dict, key, value: np.ndarray) -> None:
    """ASSIGN_VARIABLE: the variable keeps a copy of ``value``, written in place into the array
    it already holds when shape and dtype match (readers copy out, so nothing aliases it)."""
    cur = table.get(key)
    if cur is not None and cur.shape == value.shape and cur.dtype == value.dtype:
        np.copyto(cur, value)
    else:
        table[key] = np.array(value, copy=True)


@register("VAR_HANDLE", "resource", key=lambda ctx: "resource")
class VarHandle(Kernel):
    def prepare(self):
        o = self.ctx.options
        key = (o.get("container") or "", o.get("shared_name") or "")
        _, keys = _table(self.ctx)
        if key not in keys:
            keys.append(key)
        self.handle = np.array([keys.index(key)], np.int32)
        self.constant_outputs = [self.handle]  # the invoke plan stores it once (runtime.plan)
        return [(1,)]

    def eval(self, inputs):
        return [self.handle]


@register("ASSIGN_VARIABLE", "resource")
class AssignVariable(Kernel):
    def prepare(self):
        return []

    def eval(self, inputs):
        _assign(_table(self.ctx)[0], _key(self.ctx, inputs[0]), inputs[1])
        return []

    def compile(self, ins, outs):
        """The invoke plan's bound call: the handle is fixed, so the key is resolved once."""
        handle, value = ins
        if handle is None or value is None:
            return None
        table, key, copy = _table(self.ctx)[0], _key(self.ctx, handle), np.copyto
        last = [None]  # the variable array this node last wrote (same shape and dtype)

        def call():
            cur = table.get(key)
            if cur is not None and cur is last[0]:
                copy(cur, value)
            else:
                _assign(table, key, value)
                last[0] = table[key]
        return call


@register("READ_VARIABLE", "resource")
class ReadVariable(Kernel):
    def prepare(self):
        self.dtype = self.ctx.output(0).np_dtype
        return [tuple(self.ctx.output(0).shape)]

    def eval(self, inputs):
        table, _ = _table(self.ctx)
        key = _key(self.ctx, inputs[0])
        if key not in table:
            raise self._unassigned(key)
        return [np.array(table[key], copy=True)]  # the stored array is updated in place later

    def _unassigned(self, key) -> EdgerunError:
        return EdgerunError(f"node {self.ctx.index}: READ_VARIABLE of {key[1]!r} before any ASSIGN_VARIABLE")

    def compile(self, ins, outs):
        """The invoke plan's bound call: one copy from the variable into the output view."""
        handle, out = ins[0], outs[0]
        if handle is None or out is None:
            return None
        table, _ = _table(self.ctx)
        key, copy = _key(self.ctx, handle), np.copyto
        checked = [None]  # the variable array whose shape and dtype were last checked

        def call():
            try:
                v = table[key]
            except KeyError:
                raise self._unassigned(key) from None
            if v is not checked[0]:
                if v.shape != out.shape:
                    raise EdgerunError(f"READ_VARIABLE produced tensor {self.ctx.op.outputs[0]} with "
                                       f"shape {list(v.shape)}, but allocate_tensors planned "
                                       f"{list(out.shape)} (data-dependent shapes are not supported)")
                if v.dtype != out.dtype:
                    copy(out, v, casting="unsafe")
                    return
                checked[0] = v
            copy(out, v)
        return call


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

    def compile(self, ins, outs):
        """The invoke plan's bound call: one set membership test once the init subgraph ran."""
        done, index, run = self.ctx.runtime.interp.called_once, self.index, self.eval

        def call():
            if index not in done:
                run([])
        return call
