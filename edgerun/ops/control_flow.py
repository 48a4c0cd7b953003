"""IF and WHILE: run other subgraphs of the model.

* ``IF`` (cond, *args): ``then_subgraph_index`` when cond (a bool scalar) is true, else
  ``else_subgraph_index``; both branches take ``args`` and give the node's outputs.
* ``WHILE`` (*vars): repeat ``vars = body(vars)`` while ``cond(vars)[0]``; outputs are the final
  vars. Loop variables keep their shapes (as in models with static shapes); a body that changes a
  shape is refused with a clear error.
"""

from __future__ import annotations

import numpy as np

from edgerun.errors import ModelFormatError
from edgerun.ops.registry import Kernel, register

#: WHILE iterations after which a loop is reported as runaway rather than run forever
MAX_WHILE_ITERATIONS = 1_000_000


def _subgraph(ctx, key: str) -> int:
    idx = int(ctx.options.get(key, -1))
    n = len(ctx.model.subgraphs)
    here = ctx.runtime.index if ctx.runtime is not None else 0
    if not 0 <= idx < n or idx == here:
        raise ModelFormatError(f"node {ctx.index} ({ctx.name}): {key} {idx} is not another subgraph "
                               f"of this model ({n} subgraphs)")
    return idx


def _io_check(ctx, sub: int, n_in: int, n_out: int | None) -> None:
    g = ctx.model.subgraphs[sub]
    if len(g.inputs) != n_in or (n_out is not None and len(g.outputs) != n_out):
        raise ModelFormatError(f"node {ctx.index} ({ctx.name}): subgraph {sub} takes {len(g.inputs)} "
                               f"inputs and gives {len(g.outputs)} outputs; the node passes {n_in}"
                               + (f" and expects {n_out}" if n_out is not None else ""))


@register("IF", "bool")
class If(Kernel):
    def prepare(self):
        ctx = self.ctx
        self.then_ = _subgraph(ctx, "then_subgraph_index")
        self.else_ = _subgraph(ctx, "else_subgraph_index")
        n_args, n_out = len(ctx.op.inputs) - 1, len(ctx.op.outputs)
        for sub in (self.then_, self.else_):
            _io_check(ctx, sub, n_args, n_out)
        g = ctx.model.subgraphs[self.then_]
        return [tuple(g.tensors[o].shape) for o in g.outputs]

    def eval(self, inputs):
        cond = bool(np.asarray(inputs[0]).reshape(-1)[0])
        return self.ctx.runtime.interp.run_subgraph(self.then_ if cond else self.else_, inputs[1:])


@register("WHILE", "any", key=lambda ctx: "any")
class While(Kernel):
    def prepare(self):
        ctx = self.ctx
        self.cond = _subgraph(ctx, "cond_subgraph_index")
        self.body = _subgraph(ctx, "body_subgraph_index")
        n = len(ctx.op.inputs)
        if len(ctx.op.outputs) != n:
            raise ModelFormatError(f"node {ctx.index} (WHILE): {n} loop inputs but {len(ctx.op.outputs)} outputs")
        _io_check(ctx, self.cond, n, 1)
        _io_check(ctx, self.body, n, n)
        return [ctx.input_shape(i) for i in range(n)]

    def eval(self, inputs):
        run = self.ctx.runtime.interp.run_subgraph
        values = [np.array(v, copy=True) for v in inputs]
        for _ in range(MAX_WHILE_ITERATIONS):
            if not bool(np.asarray(run(self.cond, values)[0]).reshape(-1)[0]):
                return values
            values = run(self.body, values)
        raise ModelFormatError(f"node {self.ctx.index} (WHILE): still looping after "
                               f"{MAX_WHILE_ITERATIONS} iterations")
