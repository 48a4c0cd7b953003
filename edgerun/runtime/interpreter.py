"""The edgerun interpreter: LiteRT's Interpreter API over edgerun's own numpy kernels.

A LiteRT user switches with one import::

    from edgerun import Interpreter      # instead of: from ai_edge_litert.interpreter import Interpreter

Execution model (as TFLite's): ``allocate_tensors`` prepares every node in order (kernel lookup,
shape propagation, per-node constants), constant-folds nodes whose inputs are all known (shape
arithmetic), lets delegates claim partitions, and plans one arena for all activations;
``invoke`` then only runs kernels. Weights are never copied out of the model buffer.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from edgerun.errors import EdgerunError, InputMismatchError, ModelFormatError, UnsupportedOpError
from edgerun.ir import Model
from edgerun.ops.registry import REGISTRY, NodeContext, OpDef, lookup, node_scratch
from edgerun.runtime import budget, plan, planner
from edgerun.runtime.steps import Step
from edgerun.schema.reader import read_model, read_model_file


#: Deepest chain of subgraph calls (IF / WHILE / CALL_ONCE) the interpreter follows.
MAX_CALL_DEPTH = 16

#: Largest tensor the interpreter will allocate; a bigger one means a corrupt or hostile model.
MAX_TENSOR_BYTES = 1 << 32


def _checked_shape(t, shape) -> tuple[int, ...]:
    shp = tuple(int(d) for d in shape)
    dt = t.np_dtype
    n = 1
    for d in shp:
        if d < 0:
            raise ModelFormatError(f"tensor '{t.name}': negative dimension in shape {list(shp)}")
        n *= d
    if dt is not None and n * dt.itemsize > MAX_TENSOR_BYTES:
        raise ModelFormatError(f"tensor '{t.name}': shape {list(shp)} needs {n * dt.itemsize} bytes, "
                               f"more than the {MAX_TENSOR_BYTES}-byte limit")
    return shp


class _model_errors:
    """Turn a kernel's value error during preparation into a ModelFormatError.

    prepare() sees only the model (shapes, constants, options), so a ValueError, IndexError,
    KeyError, ZeroDivisionError, OverflowError or MemoryError there means the model is
    inconsistent (or hostile): report the node instead of a traceback. AttributeError,
    AssertionError, TypeError and anything else are bugs in edgerun and propagate as they are.
    """

    def __init__(self, ctx):
        self.ctx = ctx

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is None or issubclass(et, EdgerunError):
            return False
        if issubclass(et, (ValueError, IndexError, KeyError, ZeroDivisionError, OverflowError, MemoryError)):
            raise ModelFormatError(f"node {self.ctx.index} ({self.ctx.name}): inconsistent model: "
                                   f"{et.__name__}: {ev}") from ev
        return False


def _nbytes(t, shape) -> int:
    dt = t.np_dtype
    return int(np.prod(shape, dtype=np.int64)) * dt.itemsize if dt is not None else 0


def _with_candidates(e: UnsupportedOpError) -> UnsupportedOpError:
    """The same error, naming the installed delegates whose capability tables take the op."""
    if e.candidates:
        return e
    from edgerun.delegate import delegates_supporting

    names = delegates_supporting(e.op.removeprefix("CUSTOM:"), e.dtype)
    if not names:
        return e
    return UnsupportedOpError(e.op, e.dtype, node_index=e.node_index, detail=e.detail, candidates=names)


def validate_node(ctx: NodeContext) -> None:
    """The checks every kernel path shares (the op's ``OpDef.validate``: input and output
    counts, option values, shapes), run in ``allocate_tensors`` before any kernel or delegate
    sees the node. Raises ModelFormatError."""
    if ctx.name == "CUSTOM" or ctx.model.op_code(ctx.op).builtin == "CUSTOM":
        return
    d = REGISTRY.get(ctx.name) or OpDef(ctx.name)
    with _model_errors(ctx):
        d.validate(ctx)


class SubgraphRunner:
    """Prepared state and execution of one subgraph."""

    def __init__(self, interp: "Interpreter", index: int):
        self.interp = interp
        self.model: Model = interp._model
        self.index = index
        self.graph = self.model.subgraphs[index]
        n = len(self.graph.tensors)
        self.shapes: list[tuple[int, ...]] = [tuple(t.shape) for t in self.graph.tensors]
        self.values: list[np.ndarray | None] = [None] * n
        self.known: dict[int, np.ndarray] = {}
        self.steps: list[Step] = []
        self.arena = np.zeros(0, np.uint8)
        self.arena_bytes = 0
        self.offsets: dict[int, int] = {}
        self.prepared = False
        self.profile: dict[str, float] = {}
        #: (op, dtype) of the nodes evaluated in allocate_tensors (constant-folded)
        self.folded: list[tuple[str, str]] = []
        #: bytes this subgraph holds: folded constants, arena, variables, largest kernel scratch
        self.memory_bytes = 0
        #: who runs each node (filled when delegates partition the graph; see delegation_report)
        self.report = None

    # -- preparation -----------------------------------------------------------------------
    def prepare(self, input_shapes: dict[int, tuple[int, ...]]) -> None:
        g, m = self.graph, self.model
        for i, shp in input_shapes.items():
            self.shapes[i] = tuple(shp)
        consts = {}
        produced = {o for op in g.operators for o in op.outputs}
        for i, t in enumerate(g.tensors):
            if t.buffer and i not in g.inputs:
                data = m.tensor_data(t)
                if data is not None:
                    consts[i] = data
                elif t.np_dtype is not None and 0 in t.shape and i not in produced:
                    consts[i] = np.zeros(t.shape, t.np_dtype)  # an empty constant (axis = [])
        self.known = dict(consts)
        self._check_topology()
        steps = []
        folded_bytes = scratch_bytes = 0
        mem = self.interp._memory
        for ni, op in enumerate(g.operators):
            ctx = NodeContext(m, g, ni, op, m.op_name(op), self.shapes, self.known, self)
            validate_node(ctx)
            try:
                cls, dtype = lookup(ctx, self.interp._custom_ops)
            except UnsupportedOpError as e:
                if not self.interp._delegates:
                    raise _with_candidates(e) from None
                # no edgerun kernel: a delegate must claim this node (partition.apply_delegates
                # raises this error otherwise); output shapes stay as stored in the model
                steps.append(Step(ctx.name, list(op.inputs), list(op.outputs), None, [ni], "", None,
                                  error=_with_candidates(e)))
                continue
            with _model_errors(ctx):
                need = node_scratch(ctx)
            if need > scratch_bytes:
                mem.check(self, folded_bytes + need, f"node {ni} ({ctx.name}) working memory")
                scratch_bytes = need
            kernel = cls(ctx)
            inputs_known = all(i < 0 or i in self.known for i in op.inputs)
            fold = (kernel.shape_only or (inputs_known and op.inputs)) and not any(
                g.tensors[o].is_variable for o in op.outputs)
            try:
                with _model_errors(ctx):
                    out_shapes = kernel.prepare()
                    if out_shapes is not None:
                        for o, shp in zip(op.outputs, out_shapes):
                            self.shapes[o] = _checked_shape(g.tensors[o], shp)
                    if fold:
                        folded_bytes += sum(_nbytes(g.tensors[o], self.shapes[o]) for o in op.outputs)
                        mem.check(self, folded_bytes + scratch_bytes, f"node {ni} ({ctx.name}) constant output")
                    vals = kernel.eval([self.known.get(i) if i >= 0 else None for i in op.inputs]) if fold else None
            except UnsupportedOpError as e:
                raise _with_candidates(e) from None
            if fold:
                self.folded.append((ctx.name, dtype))
                for o, v in zip(op.outputs, vals):
                    self.known[o] = v
                    self.shapes[o] = tuple(v.shape)
                continue
            steps.append(Step(ctx.name, list(op.inputs), list(op.outputs), kernel.eval, [ni], dtype, kernel))
        self.memory_bytes = folded_bytes + scratch_bytes
        self.steps = self.interp._partition(self, steps)
        self._plan()
        self._compile()
        self.prepared = True

    def _check_topology(self) -> None:
        """Every tensor a node reads must exist before it runs; every tensor is written once."""
        g = self.graph
        ready = set(g.inputs) | set(self.known) | {i for i, t in enumerate(g.tensors) if t.is_variable}
        written: set[int] = set()
        for ni, op in enumerate(g.operators):
            for i in op.inputs:
                if i >= 0 and i not in ready:
                    raise ModelFormatError(f"node {ni} ({self.model.op_name(op)}) reads tensor {i} "
                                           f"('{g.tensors[i].name}') before any node writes it")
            for o in op.outputs:
                if o in written or o in self.known or o in g.inputs:
                    raise ModelFormatError(f"node {ni} ({self.model.op_name(op)}) writes tensor {o} "
                                           f"('{g.tensors[o].name}'), which is already an input, a "
                                           "constant or another node's output")
                written.add(o)
                ready.add(o)
        for o in g.outputs:
            if o not in ready:
                raise ModelFormatError(f"model output tensor {o} ('{g.tensors[o].name}') is never written")

    def _plan(self) -> None:
        g = self.graph
        # Outputs stay readable after invoke(). Inputs too, by default (LiteRT semantics: a second
        # invoke() without set_tensor() sees the same input); TFLM instead lets later tensors
        # reuse input memory, which preserve_inputs=False reproduces for MCU arena figures.
        keep = list(g.outputs) + (list(g.inputs) if self.interp._preserve_inputs else [])
        life = planner.lifetimes(g.inputs, [(st.inputs, st.outputs) for st in self.steps],
                                 skip=self.known, keep=keep)
        if self.interp._preserve_all:
            life = {k: (first, len(self.steps)) for k, (first, _) in life.items()}
        # partition edges a delegate's runtime holds itself (LiteRT's own input/output buffers):
        # the tensor lives there, not in the arena, and no copy is made at the edge
        external = {}
        if any(st.dtype == "delegate" for st in self.steps):
            from edgerun.runtime.partition import external_buffers  # only with delegates (core stays small)
            external = external_buffers(self)
        bufs = []
        for i, (first, last) in life.items():
            t = g.tensors[i]
            dt = t.np_dtype
            if dt is None or t.is_variable or i in external:
                continue
            size = int(np.prod(_checked_shape(t, self.shapes[i]), dtype=np.int64)) * dt.itemsize
            bufs.append(planner.Buffer(i, size, first, last))
        self.buffers = bufs
        self.offsets, self.arena_bytes = planner.plan(bufs)
        variables = sum(_nbytes(t, _checked_shape(t, self.shapes[i]))
                        for i, t in enumerate(g.tensors) if t.is_variable)
        self.memory_bytes += self.arena_bytes + variables
        self.interp._memory.check(self, self.memory_bytes, "the activation arena")
        self.arena = np.zeros(self.arena_bytes + planner.ALIGNMENT, np.uint8)
        base = (-self.arena.ctypes.data) % planner.ALIGNMENT
        for b in bufs:
            t = g.tensors[b.key]
            off = base + self.offsets[b.key]
            self.values[b.key] = self.arena[off:off + b.size].view(t.np_dtype).reshape(self.shapes[b.key])
        for i, t in enumerate(g.tensors):
            if t.is_variable:
                self.values[i] = np.zeros(self.shapes[i], t.np_dtype)
        for i, v in external.items():
            self.values[i] = v
        if not self.interp._preserve_all:
            # a value folded during prepare that no step reads and no output is (fp16 weights
            # densified, then dequantized: the float32 copy is the one kept) is an intermediate
            # like any other: freed, not held beside what was computed from it
            read = {i for st in self.steps for i in st.inputs} | set(g.outputs)
            produced = {o for op in g.operators for o in op.outputs}
            for i in [i for i in self.known if i in produced and i not in read]:
                del self.known[i]
        for i, v in self.known.items():
            self.values[i] = v

    def _compile(self) -> None:
        """Build the invoke plan (``runtime.plan``): one bound zero-argument call per step, or per
        chain of 256-entry table steps composed into one, over the arena views fixed by ``_plan``."""
        self.calls, self.call_names = plan.compile_plan(self)
        # the bound calls' shared work arrays (columns, accumulators): one buffer per role
        self.memory_bytes += self.workspace_bytes
        self.interp._memory.check(self, self.memory_bytes, "the bound calls' work arrays")

    # -- execution -------------------------------------------------------------------------
    def run(self) -> None:
        if self.interp._profiling:
            return self._run_profiled()
        for call in self.calls:
            call()

    def _store(self, st, o: int, dst: np.ndarray, arr) -> None:
        if type(arr) is not np.ndarray:
            arr = np.asarray(arr)
        if arr.shape != dst.shape:
            raise EdgerunError(f"{st.name} produced tensor {o} with shape {list(arr.shape)}, "
                               f"but allocate_tensors planned {list(dst.shape)} (data-dependent "
                               "shapes are not supported)")
        np.copyto(dst, arr, casting="unsafe")

    def _run_profiled(self) -> None:
        prof, clock = self.profile, time.perf_counter
        for call, name in zip(self.calls, self.call_names):
            t0 = clock()
            call()
            prof[name] = prof.get(name, 0.0) + clock() - t0


def _details(model: Model, sg, runner: SubgraphRunner | None, idx: int, name: str | None = None) -> dict:
    t = sg.tensors[idx]
    shape = runner.shapes[idx] if runner is not None else t.shape
    q = t.quant
    if q is not None and not q.empty:
        quant = (float(q.scale[0]), int(q.zero_point[0])) if q.scale.size == 1 else (0.0, 0)
        qp = q.to_dict()
    else:
        quant = (0.0, 0)
        qp = {"scales": np.zeros(0, np.float32), "zero_points": np.zeros(0, np.int32), "quantized_dimension": 0,
              "block_size": 0}
    sig = t.shape_signature if t.shape_signature is not None else t.shape
    return {"name": name if name is not None else t.name, "index": idx,
            "shape": np.array(shape, np.int32), "shape_signature": np.array(sig, np.int32),
            "dtype": t.np_dtype.type if t.np_dtype is not None else object,
            "quantization": quant, "quantization_parameters": qp, "sparsity_parameters": {}}


class Interpreter:
    """Runs a TFLite model with edgerun's kernels; the API of LiteRT's ``Interpreter``.

    Args:
        model_path: path to a ``.tflite`` file.
        model_content: the model's bytes (alternative to ``model_path``).
        num_threads: accepted for API compatibility; numpy's BLAS decides its own threads.
        delegates: delegate names or instances, in priority order (see ``edgerun.delegate``).
        custom_ops: ``{custom_code: Kernel subclass}`` for CUSTOM ops, for this interpreter only.
        experimental_preserve_all_tensors: keep every intermediate readable after ``invoke``.
        preserve_inputs: keep input tensors intact through ``invoke`` (LiteRT's behaviour). False
            lets activations reuse input memory, as TFLM does: the smaller arena MCU targets get.
        memory_budget: most bytes the prepared model may hold (arena, variables, folded constants,
            kernel working memory), checked before allocating; bytes or "512M" / "2G". Default:
            ``EDGERUN_MEMORY_BUDGET``, else half the available memory up to 1 GiB (``runtime.budget``).
        work_budget: most subgraph runs control flow (IF / WHILE, nesting included) may start per
            invoke. Default: ``EDGERUN_WORK_BUDGET``, else 1,000,000.
    """

    def __init__(self, model_path: str | Path | None = None, model_content: bytes | None = None,
                 experimental_delegates=None, num_threads: int | None = None,
                 experimental_op_resolver_type=None, experimental_preserve_all_tensors: bool = False,
                 *, delegates=None, custom_ops: dict | None = None, model: Model | None = None,
                 preserve_inputs: bool = True, memory_budget: int | str | None = None,
                 work_budget: int | str | None = None):
        if model is not None:
            self._model = model
        elif model_content is not None:
            self._model = read_model(model_content)
        elif model_path is not None:
            self._model = read_model_file(model_path)
        else:
            raise ModelFormatError("Interpreter needs model_path or model_content")
        self.num_threads = num_threads
        self._custom_ops = dict(custom_ops or {})
        self._preserve_all = experimental_preserve_all_tensors
        self._preserve_inputs = preserve_inputs
        self._delegates = self._resolve_delegates(list(delegates or []) + list(experimental_delegates or []))
        self._profiling = False
        self._runners: dict[int, SubgraphRunner] = {}
        self._memory = budget.MemoryBudget(memory_budget, self._runners)
        self._work = budget.WorkBudget(work_budget)
        #: resource variables (VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE), shared by all
        #: subgraphs and kept across invokes: (container, shared_name) -> array
        self.resources: dict[tuple[str, str], np.ndarray] = {}
        #: VAR_HANDLE's handles: a handle is an index into this list of (container, shared_name)
        self.resource_keys: list[tuple[str, str]] = []
        #: init subgraphs CALL_ONCE has already run
        self.called_once: set[int] = set()
        self._active_subgraphs: set[int] = {0}
        self._input_shapes: dict[int, dict[int, tuple[int, ...]]] = {}
        self.partitions: list = []

    # -- delegates -------------------------------------------------------------------------
    @staticmethod
    def _resolve_delegates(items: list) -> list:
        if not items:
            return []
        from edgerun.delegate import resolve_delegates
        return resolve_delegates(items)

    def _partition(self, runner: SubgraphRunner, steps: list[Step]) -> list[Step]:
        if not self._delegates:
            return steps
        from edgerun.runtime.partition import apply_delegates
        new_steps, report = apply_delegates(runner, steps, self._delegates)
        runner.report = report
        if runner.index == 0:
            self.partitions = report.partitions
        return new_steps

    # -- LiteRT API ------------------------------------------------------------------------
    @property
    def model(self) -> Model:
        return self._model

    def _runner(self, index: int = 0) -> SubgraphRunner:
        r = self._runners.get(index)
        if r is None or not r.prepared:
            if index == 0:
                raise EdgerunError("call allocate_tensors() first")
            r = self._prepare(index)
        return r

    def _prepare(self, index: int) -> SubgraphRunner:
        self._runners.pop(index, None)  # its memory no longer counts against the budget
        r = SubgraphRunner(self, index)
        r.prepare(self._input_shapes.get(index, {}))
        self._runners[index] = r
        return r

    def allocate_tensors(self) -> None:
        self._prepare(0)

    def get_input_details(self) -> list[dict]:
        g = self._model.main
        r = self._runners.get(0)
        return [_details(self._model, g, r, i) for i in g.inputs]

    def get_output_details(self) -> list[dict]:
        g = self._model.main
        r = self._runners.get(0)
        return [_details(self._model, g, r, i) for i in g.outputs]

    def get_tensor_details(self) -> list[dict]:
        g = self._model.main
        r = self._runners.get(0)
        return [_details(self._model, g, r, i) for i in range(len(g.tensors))]

    def _check_value(self, runner: SubgraphRunner, index: int, value) -> np.ndarray:
        t = runner.graph.tensors[index]
        arr = np.asarray(value)
        if arr.dtype != t.np_dtype:
            raise InputMismatchError(f"input '{t.name}' (tensor {index}) expects {t.dtype}, got {arr.dtype}")
        if tuple(arr.shape) != tuple(runner.shapes[index]):
            raise InputMismatchError(f"input '{t.name}' (tensor {index}) expects shape "
                                     f"{list(runner.shapes[index])}, got {list(arr.shape)}"
                                     " (resize_tensor_input() then allocate_tensors() to change it)")
        return arr

    def set_tensor(self, tensor_index: int, value) -> None:
        r = self._runner(0)
        if not (0 <= tensor_index < len(r.graph.tensors)):
            raise InputMismatchError(f"tensor index {tensor_index} out of range")
        arr = self._check_value(r, tensor_index, value)
        dst = r.values[tensor_index]
        if dst is None or tensor_index in r.known:
            raise InputMismatchError(f"tensor {tensor_index} is a constant and cannot be set")
        np.copyto(dst, arr)

    def invoke(self) -> None:
        self._work.reset()  # the control-flow work budget is per invoke
        self._runner(0).run()

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray:
        r = self._runner(subgraph_index)
        if not (0 <= tensor_index < len(r.graph.tensors)):
            raise InputMismatchError(f"tensor index {tensor_index} out of range")
        v = r.values[tensor_index]
        if v is None:
            raise EdgerunError(f"tensor {tensor_index} has no data (not computed, or freed: use "
                               "experimental_preserve_all_tensors=True to keep intermediates)")
        return np.array(v, copy=True)

    def tensor(self, tensor_index: int):
        """A function returning a view of the tensor's current buffer (as LiteRT's)."""
        r = self._runner(0)
        return lambda: r.values[tensor_index]

    def resize_tensor_input(self, input_index: int, tensor_size, strict: bool = False) -> None:
        g = self._model.main
        if input_index not in g.inputs:
            raise InputMismatchError(f"tensor {input_index} is not an input of the model")
        t = g.tensors[input_index]
        new = tuple(int(d) for d in tensor_size)
        sig = t.shape_signature or t.shape
        if strict:
            for want, got in zip(sig, new):
                if want != -1 and want != got:
                    raise InputMismatchError(f"input '{t.name}': dimension fixed at {want}, got {got}")
        if len(new) != len(t.shape):
            raise InputMismatchError(f"input '{t.name}' has rank {len(t.shape)}, got shape {list(new)}")
        self._input_shapes.setdefault(0, {})[input_index] = new
        self._runners.pop(0, None)

    def run_subgraph(self, index: int, inputs: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Run subgraph ``index`` on ``inputs`` (CALL_ONCE, IF, WHILE).

        A subgraph may not (directly or through others) call itself: each has one prepared
        runner, and a model that nests deeper than MAX_CALL_DEPTH is refused as malformed.
        """
        if not (0 <= index < len(self._model.subgraphs)):
            raise ModelFormatError(f"subgraph {index} does not exist ({len(self._model.subgraphs)} subgraphs)")
        if index in self._active_subgraphs or len(self._active_subgraphs) >= MAX_CALL_DEPTH:
            raise ModelFormatError(f"subgraph {index} is called recursively (call chain "
                                   f"{sorted(self._active_subgraphs)}); TFLite models cannot recurse")
        self._work.spend(index)
        self._active_subgraphs.add(index)
        try:
            r = self._runners.get(index) or self._prepare(index)
            given = list(inputs or [])
            if len(given) != len(r.graph.inputs):
                raise ModelFormatError(f"subgraph {index} takes {len(r.graph.inputs)} inputs, "
                                       f"its caller passes {len(given)}")
            for i, x in zip(r.graph.inputs, given):
                np.copyto(r.values[i], self._check_value(r, i, x))
            r.run()
            return [np.array(r.values[o], copy=True) for o in r.graph.outputs]
        finally:
            self._active_subgraphs.discard(index)

    def reset_all_variables(self) -> None:
        self.resources.clear()
        self.called_once.clear()
        for r in self._runners.values():
            for i, t in enumerate(r.graph.tensors):
                if t.is_variable:
                    r.values[i][...] = 0

    def get_signature_list(self) -> dict:
        return {s.key: {"inputs": [n for n, _ in s.inputs], "outputs": [n for n, _ in s.outputs]}
                for s in self._model.signature_defs}

    def get_signature_runner(self, signature_key: str | None = None) -> "SignatureRunner":
        sigs = self._model.signature_defs
        if not sigs:
            raise EdgerunError("model has no signature defs")
        if signature_key is None:
            if len(sigs) > 1:
                raise EdgerunError(f"model has {len(sigs)} signatures; name one of "
                                   f"{[s.key for s in sigs]}")
            sd = sigs[0]
        else:
            found = [s for s in sigs if s.key == signature_key]
            if not found:
                raise EdgerunError(f"no signature {signature_key!r}; the model has {[s.key for s in sigs]}")
            sd = found[0]
        return SignatureRunner(self, sd)

    # -- edgerun extensions ----------------------------------------------------------------
    @property
    def arena_bytes(self) -> int:
        """Bytes of the activation arena planned by ``allocate_tensors``."""
        return self._runner(0).arena_bytes

    @property
    def workspace_bytes(self) -> int:
        """Bytes of the invoke plan's shared workspace (the bound layers' columns, accumulators and
        requantization work arrays), beside the arena."""
        return self._runner(0).workspace_bytes

    @property
    def memory_bytes(self) -> int:
        """Bytes the prepared subgraphs hold, as counted against ``memory_budget``."""
        return sum(r.memory_bytes for r in self._runners.values())

    @property
    def memory_budget(self) -> int:
        return self._memory.limit

    @property
    def work_budget(self) -> int:
        return self._work.limit

    def steps(self, subgraph_index: int = 0) -> list[Step]:
        """The prepared execution steps of a subgraph, in order (after ``allocate_tensors``): one
        per node edgerun runs, one per delegate partition. A copy of the list; the steps are the
        interpreter's own (read them, do not change them)."""
        return list(self._runner(subgraph_index).steps)

    def plan_calls(self, subgraph_index: int = 0) -> list[str]:
        """The names of the compiled invoke plan's calls, in order (after ``allocate_tensors``):
        composed table chains show as one name (``LOGISTIC+QUANTIZE``), steps that became views
        or constants are absent."""
        return list(self._runner(subgraph_index).call_names)

    def folded_nodes(self, subgraph_index: int = 0) -> list[tuple[str, str]]:
        """(op, dtype) of the nodes ``allocate_tensors`` evaluated once as constants."""
        return list(self._runner(subgraph_index).folded)

    def delegation_report(self):
        """Who runs each node of the main graph: a :class:`edgerun.runtime.partition.DelegationReport`
        (delegates asked, one row per node with the delegate that took it or each one's reason,
        MACs, and the partitions)."""
        from edgerun.runtime.partition import DelegationReport, node_report

        r = self._runner(0)
        if r.report is None:  # no delegates: everything runs on edgerun's kernels
            r.report = DelegationReport([], node_report(r, []), [])
        return r.report

    def predict(self, *inputs, **named) -> list[np.ndarray] | dict[str, np.ndarray]:
        """Convenience: set inputs (positional or by name), invoke, return outputs."""
        if 0 not in self._runners:
            self.allocate_tensors()
        details = self.get_input_details()
        if named:
            by_name = {d["name"]: d for d in details}
            for k, v in named.items():
                if k not in by_name:
                    raise InputMismatchError(f"no input named {k!r}; inputs are {list(by_name)}")
                self.set_tensor(by_name[k]["index"], v)
        else:
            if len(inputs) != len(details):
                raise InputMismatchError(f"model takes {len(details)} inputs, got {len(inputs)}")
            for d, v in zip(details, inputs):
                self.set_tensor(d["index"], v)
        self.invoke()
        return [self.get_tensor(d["index"]) for d in self.get_output_details()]

    def set_profiling(self, enabled: bool = True) -> None:
        self._profiling = enabled
        for r in self._runners.values():
            r.profile.clear()

    @property
    def profile(self) -> dict[str, float]:
        """Seconds spent per op type since profiling was enabled."""
        return dict(self._runner(0).profile)


class SignatureRunner:
    """LiteRT's SignatureRunner: ``runner(**inputs) -> {output_name: array}``."""

    def __init__(self, interp: Interpreter, sd):
        self._interp, self._sd = interp, sd
        self._runner = interp._runners.get(sd.subgraph_index)

    def _ensure(self) -> SubgraphRunner:
        if self._runner is None or not self._runner.prepared:
            self._runner = self._interp._prepare(self._sd.subgraph_index)
        return self._runner

    def get_input_details(self) -> dict:
        r = self._ensure()
        return {n: _details(self._interp._model, r.graph, r, i, n) for n, i in self._sd.inputs}

    def get_output_details(self) -> dict:
        r = self._ensure()
        return {n: _details(self._interp._model, r.graph, r, i, n) for n, i in self._sd.outputs}

    def __call__(self, **inputs) -> dict[str, np.ndarray]:
        r = self._ensure()
        names = dict(self._sd.inputs)
        for k in inputs:
            if k not in names:
                raise InputMismatchError(f"signature {self._sd.key!r} has no input {k!r}; "
                                         f"inputs are {list(names)}")
        missing = [k for k in names if k not in inputs]
        if missing:
            raise InputMismatchError(f"signature {self._sd.key!r} is missing inputs {missing}")
        for k, v in inputs.items():
            arr = self._interp._check_value(r, names[k], v)
            np.copyto(r.values[names[k]], arr)
        self._interp._work.reset()
        r.run()
        return {n: np.array(r.values[i], copy=True) for n, i in self._sd.outputs}
