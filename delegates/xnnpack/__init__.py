"""xnnpack: partitions (or the whole model) run by LiteRT with its XNNPACK delegate.

The capability table says which builtin ops LiteRT's XNNPACK delegate
(``tensorflow/lite/delegates/xnnpack/xnnpack_delegate.cc``) lowers, for which tensor types
(float32; int8 "QS8" and uint8 "QU8" for the quantized subset) and under which limits (static
shapes, constant weights, at most 6 dimensions, fused activations, scale ratios, matching
quantization on data-movement ops). Each row and limit is measured against LiteRT 2.3 itself,
both ways, by ``tests/delegates/test_xnnpack_conformance.py``; partitions are formed the way
LiteRT forms them (``litert_groups``), so ``edgerun check --target rpi`` counts what LiteRT makes.
"""

from __future__ import annotations

from edgerun_delegates import _rules as r

from edgerun.delegate import Availability, CapabilityTable, Delegate, OpCaps, Partition, Support

F = frozenset({"float32"})
FQ = frozenset({"float32", "int8", "uint8"})
FS8 = frozenset({"float32", "int8"})
#: conv / FC also as "hybrid" (float32 activations, int8 constant weights: dynamic-range models)
FQH = FQ | {"hybrid"}

# Every row below is checked against LiteRT 2.3's XNNPACK delegate itself, one op model per row and
# per limit, in both directions (tests/delegates/test_xnnpack_conformance.py). Where XNNPACK
# claims a node and then fails to prepare it (LiteRT cannot run the model at all) the table keeps
# the node out, so edgerun's partitions always run.


def _scale(t) -> float | None:
    return float(t.quant.scale[0]) if t is not None and t.quantized and t.dtype in ("int8", "uint8") else None


def _qparams(t):
    return (float(t.quant.scale[0]), int(t.quant.zero_point[0])) if t is not None and t.quantized else None


def _fused_activation(ctx):
    """Fused activations NONE, RELU, RELU_N1_TO_1 and RELU6 (TANH and SIGN_BIT stay out)."""
    act = ctx.options.get("fused_activation_function")
    if act is not None and int(act) not in (0, 1, 2, 3):
        return f"fused activation {r._ACT_NAMES.get(int(act), act)} (XNNPACK fuses only RELU, RELU_N1_TO_1, RELU6)"
    return None


def _add_scales(ctx):
    """int8 ADD / SUB: each input scale / output scale within [2^-10, 2^8) (XNNPACK's limit,
    measured on LiteRT 2.3: outside it the node stays out of the partition)."""
    so = _scale(ctx.outputs[0])
    for t in ctx.inputs[:2]:
        si = _scale(t)
        if so and si and not 2.0 ** -10 <= si / so < 2.0 ** 8:
            return f"input '{t.name}' scale / output scale = {si / so:.3g} (XNNPACK takes [2^-10, 2^8))"
    return None


def _mul_scales(ctx):
    """int8 MUL: input scale x input scale / output scale within [2^-16, 2^8) (measured as above)."""
    a, b = (_scale(t) for t in ctx.inputs[:2])
    so = _scale(ctx.outputs[0])
    if a and b and so and not 2.0 ** -16 <= a * b / so < 2.0 ** 8:
        return f"input scales' product / output scale = {a * b / so:.3g} (XNNPACK takes [2^-16, 2^8))"
    return None


def _concat(ctx):
    """At most 5 inputs, and in int8 one (scale, zero point) for every input and the output: with
    6+ inputs LiteRT 2.3's XNNPACK leaves the node out; with mixed quantization it claims the node
    and then fails to prepare it, so LiteRT cannot run the model at all (measured)."""
    if len(ctx.op.inputs) > 5:
        return f"{len(ctx.op.inputs)} inputs (XNNPACK takes at most 5)"
    ts = [t for t in ctx.inputs + ctx.outputs if t is not None and t.quantized]
    if len({(float(t.quant.scale[0]), int(t.quant.zero_point[0])) for t in ts}) > 1:
        return "inputs and output quantized differently (XNNPACK needs one scale and zero point)"
    return None


def _same_quant_as(index: int = 0):
    """Data-movement ops (pooling max, pad, reshape, transpose, slices, split, depth/space moves,
    bilinear resize) in int8/uint8: the output(s) quantized as the data input. Otherwise LiteRT
    2.3's XNNPACK claims the node and fails to prepare it (RESHAPE: leaves it out)."""
    def rule(ctx):
        q = _qparams(ctx.input(index))
        for t in ctx.outputs:
            if q is not None and _qparams(t) != q:
                return f"output '{t.name}' quantized differently from the input (XNNPACK needs the same)"
        return None
    return rule


_same_quant = _same_quant_as(0)


def _leaky_relu(ctx):
    """int8/uint8 LEAKY_RELU: input/output scale in [2^-8, 2^7] and alpha times it within
    [-127.996, 128] and at least 2^-8 in magnitude (XNNPACK's QS8/QU8 leaky-ReLU limits, measured)."""
    si, so = _scale(ctx.inputs[0]), _scale(ctx.outputs[0])
    if not si or not so:
        return None
    pos = si / so
    if not 2.0 ** -8 <= pos <= 2.0 ** 7:
        return f"input / output scale = {pos:.3g} (XNNPACK takes [2^-8, 2^7])"
    neg = pos * float(ctx.options.get("alpha", 0.2))
    if not -127.99609375 <= neg <= 128.0 or abs(neg) < 2.0 ** -8:
        return f"alpha x input / output scale = {neg:.3g} (XNNPACK takes [-127.996, 128], |.| >= 2^-8)"
    return None


def _weights(index: int):
    """Constant conv / FC weights: int8 with zero points 0 (per tensor or per output channel);
    uint8 per tensor (TFLite's asymmetric uint8 scheme, XNNPACK's QU8)."""
    def rule(ctx):
        t = ctx.input(index)
        if t is None or not t.quantized:
            return None
        if t.dtype == "int8" and (t.quant.zero_point != 0).any():
            return f"weights '{t.name}' have non-zero zero points (must be symmetric)"
        if t.dtype == "uint8" and t.quant.scale.size > 1:
            return f"uint8 weights '{t.name}' are quantized per channel (XNNPACK takes per tensor)"
        return None
    return rule


def _quantize(ctx):
    """QUANTIZE float32 -> int8/uint8, or a requantization int8 -> int8 / uint8 -> uint8."""
    src, dst = ctx.inputs[0].dtype, ctx.outputs[0].dtype
    if (src == "float32" and dst in ("int8", "uint8")) or (src in ("int8", "uint8") and dst == src):
        return None
    return f"{src} -> {dst} (XNNPACK quantizes float32 -> int8/uint8 and requantizes within one type)"


def _dequantize(ctx):
    """DEQUANTIZE int8/uint8 -> float32; float16 -> float32 only of a constant (fp16 weights)."""
    if ctx.inputs[0].dtype == "float16" and ctx.const(0) is None:
        return "float16 input is not a constant (XNNPACK folds only fp16 weights)"
    return None


def _batch_matmul(ctx):
    """float32 BATCH_MATMUL; int8 only with a constant right-hand side."""
    if ctx.inputs[0].dtype != "float32" and ctx.const(1) is None:
        return "int8 with a non-constant right-hand side (XNNPACK needs constant weights)"
    return None


_CONV = (r.const_input(1, "filter"), r.const_input(2, "bias", optional=True), r.rank_in(4), _weights(1))
_MOVE = (_same_quant,)
_REDUCE = (r.const_input(1, "axes"), )

OPS = {
    "ABS": OpCaps(F), "ADD": OpCaps(FQ, (_add_scales,)), "AVERAGE_POOL_2D": OpCaps(F, (r.rank_in(4),), "float32 only"),
    "BATCH_MATMUL": OpCaps(FS8, (_batch_matmul,), "int8 with constant right-hand side"), "CEIL": OpCaps(F),
    "CONCATENATION": OpCaps(FQ, (_concat,), "at most 5 inputs, one quantization"), "CONV_2D": OpCaps(FQH, _CONV, "filter and bias constant, 4-D input"),
    "COS": OpCaps(F),
    "DEPTH_TO_SPACE": OpCaps(FQ, _MOVE), "DEPTHWISE_CONV_2D": OpCaps(FQ, _CONV, "filter and bias constant, 4-D input"),
    "DEQUANTIZE": OpCaps(frozenset({"int8", "uint8", "float16"}), (_dequantize,), "float16 only of constants"),
    "DIV": OpCaps(F), "ELU": OpCaps(FS8), "EXP": OpCaps(F),
    "FLOOR": OpCaps(F),
    "FULLY_CONNECTED": OpCaps(FQH, (r.const_input(1, "weights"), r.const_input(2, "bias", optional=True),
                                   _weights(1)), "weights and bias constant"),
    "GELU": OpCaps(F), "HARD_SWISH": OpCaps(F, (), "float32 only"),
    "LEAKY_RELU": OpCaps(FQ, (_leaky_relu,), "quantized: scale ratio and alpha limits"),
    "LOG": OpCaps(F), "LOGISTIC": OpCaps(FQ),
    "MAX_POOL_2D": OpCaps(FQ, (r.rank_in(4), _same_quant)), "MAXIMUM": OpCaps(F),
    "MEAN": OpCaps(FQ, _REDUCE, "constant axes"), "MINIMUM": OpCaps(F),
    "MUL": OpCaps(FQ, (_mul_scales,)), "NEG": OpCaps(F), "PAD": OpCaps(FQ, (r.const_input(1, "paddings"), _same_quant), "constant paddings"),
    "PRELU": OpCaps(F, (r.const_input(1, "alpha"),), "float32 only"),
    "QUANTIZE": OpCaps(FQ, (_quantize,), "float32 -> int8/uint8, or within one type"),
    "REDUCE_MAX": OpCaps(FQ, _REDUCE, "constant axes"), "REDUCE_MIN": OpCaps(FQ, _REDUCE, "constant axes"),
    "RELU": OpCaps(F), "RELU6": OpCaps(F), "RELU_N1_TO_1": OpCaps(F),
    "RESHAPE": OpCaps(FQ, (r.const_input(1, "shape", optional=True), _same_quant), "constant shape"),
    "RESIZE_BILINEAR": OpCaps(FQ, (r.const_input(1, "size"), r.rank_in(4), _same_quant), "constant size"), "ROUND": OpCaps(F),
    "RSQRT": OpCaps(F), "SIN": OpCaps(F),
    "SLICE": OpCaps(FQ, (r.const_input(1, "begin"), r.const_input(2, "size"), _same_quant)),
    "SOFTMAX": OpCaps(F, (lambda c: None if float(c.options.get("beta", 1.0)) == 1.0
                          else f"beta={c.options.get('beta')} (only 1.0)",), "beta 1.0"),
    "SPACE_TO_DEPTH": OpCaps(FQ, _MOVE), "SPLIT": OpCaps(FQ, (_same_quant_as(1),)), "SQRT": OpCaps(F), "SQUARE": OpCaps(F),
    "SQUARED_DIFFERENCE": OpCaps(F), "STRIDED_SLICE": OpCaps(FQ, _MOVE), "SUB": OpCaps(FQ, (_add_scales,)),
    "SUM": OpCaps(FQ, _REDUCE, "constant axes"),
    "TANH": OpCaps(FQ), "TRANSPOSE": OpCaps(FQ, (r.const_input(1, "permutation"), _same_quant)),
    "TRANSPOSE_CONV": OpCaps(FQ, (r.const_input(0, "output shape"), r.const_input(1, "filter"), _weights(1))),
}


def litert_groups(order: list[int], preds: dict[int, set[int]], succs: dict[int, set[int]],
                  eligible: set[int], fixed=()) -> list[list[int]]:
    """The node subsets LiteRT's own partitioner hands the XNNPACK delegate (greedy epochs).

    LiteRT (``PartitionGraphIntoIndependentNodeSubsets``, greedy) builds subsets one epoch at a
    time: sweeping the execution order again and again, a node whose inputs are all computed
    joins the current subset when its type (taken / not taken) is the subset's; the first ready
    node of an epoch sets that type. A subset need not be connected (two independent branches
    between the same refused nodes are one partition), and it is always convex, so contracting it
    cannot make a cycle. Partitions formed by an earlier delegate (``fixed``) are single units
    of the other type, as LiteRT sees a DELEGATE node. Counting partitions this way is what makes
    ``edgerun check`` agree with LiteRT (MediaPipe face landmark int8: 21, where grouping only
    connected nodes gives 25). Returns the taken subsets, each in execution order.
    """
    pos = {n: i for i, n in enumerate(order)}
    unit_of = {n: n for n in order}
    members = {n: [n] for n in order}
    for grp in fixed:
        head = min(grp, key=pos.__getitem__)
        for n in grp:
            if n != head:
                unit_of[n] = head
                members.pop(n, None)
        members[head] = sorted(grp, key=pos.__getitem__)
    units = [n for n in order if n in members]
    upreds = {u: {unit_of[p] for m in members[u] for p in preds.get(m, ()) if unit_of[p] != u} for u in units}
    taken = {u: len(members[u]) == 1 and u in eligible for u in units}
    done: set[int] = set()
    subsets = []
    while True:
        kind, cur = None, []
        moved = True
        while moved:
            moved = False
            for u in units:
                if u in done or not upreds[u] <= done:
                    continue
                if kind is None:
                    kind = taken[u]
                if taken[u] != kind:
                    continue
                done.add(u)
                cur.append(u)
                moved = True
        if not cur:
            break
        if kind:
            subsets.append(sorted(cur, key=pos.__getitem__))
    return subsets


class XnnpackDelegate(Delegate):
    """Runs each partition as a sub-model in LiteRT with XNNPACK.

    Config: ``num_threads`` (LiteRT's thread count); ``litert_ops=True`` also takes builtin ops
    outside XNNPACK's table (LiteRT's own kernels run them inside the same partition), so a
    model LiteRT can run whole becomes one partition with no edgerun step between.
    """

    name = "xnnpack"
    capabilities = CapabilityTable("xnnpack", OPS,
                                   node_constraints=(r.static_shapes, r.max_rank(6), r.per_tensor_activations,
                                                     _fused_activation))
    install_hint = "install LiteRT: pip install 'edgerun[litert]' (ai-edge-litert)"

    #: partitions as LiteRT forms them (see ``litert_groups``), not only connected groups
    group_nodes = staticmethod(litert_groups)

    def is_available(self) -> Availability:
        try:
            from edgerun.litert import interpreter_module
            mod = interpreter_module()
        except Exception as e:  # noqa: BLE001  (DelegateUnavailableError or a broken install)
            return Availability(False, str(e))
        return Availability(True, f"LiteRT ({mod.__name__}) with its built-in XNNPACK delegate")

    def supports(self, node, graph=None, op_index=None) -> Support:
        s = super().supports(node, graph, op_index)
        if s.ok or not self.config.get("litert_ops"):
            return s
        ctx = node if graph is None else None
        if ctx is None:
            from edgerun.delegate import node_context
            ctx = node_context(node, graph, op_index)
        code = ctx.model.op_code(ctx.op)
        if code.builtin in ("CUSTOM", "WHILE", "IF", "CALL_ONCE", "DELEGATE"):
            return s
        why = r.static_shapes(ctx)
        return Support.no(why) if why else Support.yes(f"LiteRT builtin kernel ({s.reason})")

    def prepare(self, partition: Partition):
        from edgerun_delegates._tflite_kernel import LiteRtKernel

        try:
            return LiteRtKernel(partition.to_bytes(), xnnpack=True,
                                num_threads=self.config.get("num_threads"))
        except ImportError as e:
            raise self.unavailable(str(e)) from e
