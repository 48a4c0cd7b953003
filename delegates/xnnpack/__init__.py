"""xnnpack: partitions (or the whole model) run by LiteRT with its XNNPACK delegate.

The capability table follows the op visitors of LiteRT's XNNPACK delegate
(``tensorflow/lite/delegates/xnnpack/xnnpack_delegate.cc``): which builtin ops it lowers, for which
tensor types (float32, and int8 "QS8" for the quantized subset) and under which limits (static
shapes, constant weights, at most 6 dimensions). A node XNNPACK itself would refuse still runs
correctly inside the partition (LiteRT's own kernel takes it), but the table keeps edgerun's
partitions to what XNNPACK accelerates.
"""

from __future__ import annotations

from edgerun_delegates import _rules as r

from edgerun.delegate import Availability, CapabilityTable, Delegate, OpCaps, Partition, Support

F = frozenset({"float32"})
FQ = frozenset({"float32", "int8", "uint8"})

def _scale(t) -> float | None:
    return float(t.quant.scale[0]) if t is not None and t.quantized and t.dtype in ("int8", "uint8") else None


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


_CONV = (r.const_input(1, "filter"), r.const_input(2, "bias", optional=True), r.rank_in(4),
         r.per_channel_symmetric_weights(1))

OPS = {
    "ABS": OpCaps(F), "ADD": OpCaps(FQ, (_add_scales,)), "AVERAGE_POOL_2D": OpCaps(FQ, (r.rank_in(4),)),
    "BATCH_MATMUL": OpCaps(F), "CEIL": OpCaps(F),
    "CONCATENATION": OpCaps(FQ, (_concat,), "at most 5 inputs, one quantization"), "CONV_2D": OpCaps(FQ, _CONV, "filter and bias constant, 4-D input"),
    "DEPTH_TO_SPACE": OpCaps(FQ), "DEPTHWISE_CONV_2D": OpCaps(FQ, _CONV, "filter and bias constant, 4-D input"),
    "DEQUANTIZE": OpCaps(frozenset({"float32", "float16"})), "DIV": OpCaps(F), "ELU": OpCaps(FQ),
    "FLOOR": OpCaps(F),
    "FULLY_CONNECTED": OpCaps(FQ, (r.const_input(1, "weights"), r.const_input(2, "bias", optional=True),
                                   r.per_channel_symmetric_weights(1)), "weights and bias constant"),
    "GELU": OpCaps(F), "HARD_SWISH": OpCaps(FQ), "LEAKY_RELU": OpCaps(FQ), "LOGISTIC": OpCaps(FQ),
    "MAX_POOL_2D": OpCaps(FQ, (r.rank_in(4),)), "MAXIMUM": OpCaps(F),
    "MEAN": OpCaps(FQ, (r.const_input(1, "axes"),), "constant axes"), "MINIMUM": OpCaps(F),
    "MUL": OpCaps(FQ, (_mul_scales,)), "NEG": OpCaps(F), "PAD": OpCaps(FQ, (r.const_input(1, "paddings"),), "constant paddings"),
    "PRELU": OpCaps(FQ, (r.const_input(1, "alpha"),)), "QUANTIZE": OpCaps(frozenset({"int8", "uint8"})),
    "RELU": OpCaps(F), "RELU6": OpCaps(F), "RELU_N1_TO_1": OpCaps(F),
    "RESHAPE": OpCaps(FQ), "RESIZE_BILINEAR": OpCaps(FQ, (r.rank_in(4),)), "ROUND": OpCaps(F),
    "RSQRT": OpCaps(F), "SLICE": OpCaps(FQ, (r.const_input(1, "begin"), r.const_input(2, "size"))),
    "SOFTMAX": OpCaps(F, (lambda c: None if float(c.options.get("beta", 1.0)) == 1.0
                          else f"beta={c.options.get('beta')} (only 1.0)",), "beta 1.0"),
    "SPACE_TO_DEPTH": OpCaps(FQ), "SPLIT": OpCaps(FQ), "SQRT": OpCaps(F), "SQUARE": OpCaps(F),
    "SQUARED_DIFFERENCE": OpCaps(FQ), "STRIDED_SLICE": OpCaps(FQ), "SUB": OpCaps(FQ, (_add_scales,)),
    "TANH": OpCaps(FQ), "TRANSPOSE": OpCaps(FQ, (r.const_input(1, "permutation"),)),
    "TRANSPOSE_CONV": OpCaps(FQ, (r.const_input(0, "output shape"), r.const_input(1, "filter"))),
}


class XnnpackDelegate(Delegate):
    """Runs each partition as a sub-model in LiteRT with XNNPACK.

    Config: ``num_threads`` (LiteRT's thread count); ``litert_ops=True`` also takes builtin ops
    outside XNNPACK's table (LiteRT's own kernels run them inside the same partition), so a
    model LiteRT can run whole becomes one partition with no edgerun step between.
    """

    name = "xnnpack"
    capabilities = CapabilityTable("xnnpack", OPS,
                                   node_constraints=(r.static_shapes, r.max_rank(6), r.per_tensor_activations))
    install_hint = "install LiteRT: pip install 'edgerun[litert]' (ai-edge-litert)"

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
