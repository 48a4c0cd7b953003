"""The Edge TPU compiler's rules as data.

Source: Coral's "TensorFlow models on the Edge TPU" (coral.ai/docs/edgetpu/models-intro,
"Supported operations" and "Model requirements"), restated here:

* every tensor is 8-bit quantized (int8/uint8; int32 only for biases and shape/axis operands);
* tensor sizes are constant at compile time (no dynamic shapes) and model parameters such as
  weights and biases are constants;
* tensors have at most 3 dimensions that are larger than 1 (only the innermost 3 may exceed 1);
* only the listed ops map, each with its known limits;
* the compiler partitions the graph once: at the first op it cannot map, that op and every op
  after it run on the CPU, even ops it could otherwise map.
"""

from __future__ import annotations

from edgerun_delegates import _rules as r

from edgerun.delegate import CapabilityTable, OpCaps, Support

Q8 = frozenset({"int8", "uint8"})


def all_quantized_8bit(ctx):
    for j, i in enumerate(ctx.op.inputs):
        if i < 0:
            continue
        t = ctx.graph.tensors[i]
        if t.dtype in ("int8", "uint8"):
            if not t.quantized:
                return f"tensor '{t.name}' is {t.dtype} without quantization parameters"
            continue
        if t.dtype == "int32" and ctx.const(j) is not None:
            continue  # biases, shapes, axes, paddings
        return f"tensor '{t.name}' is {t.dtype}: the Edge TPU needs every tensor 8-bit quantized"
    for t in ctx.outputs:
        if t.dtype not in ("int8", "uint8"):
            return f"output '{t.name}' is {t.dtype}: the Edge TPU needs every tensor 8-bit quantized"
    return None


def at_most_3_large_dims(ctx):
    """Activations only: weights (4-D filters) are laid out by the compiler."""
    consts = {i for j, i in enumerate(ctx.op.inputs) if i >= 0 and ctx.const(j) is not None}
    for i in list(ctx.op.inputs) + list(ctx.op.outputs):
        if i < 0 or i in consts:
            continue
        shape = ctx.shapes[i]
        if len(shape) > 3 and any(int(d) > 1 for d in shape[:-3]):
            return (f"tensor '{ctx.graph.tensors[i].name}' has shape {list(shape)}: only the 3 "
                    "innermost dimensions may be larger than 1")
    return None


def same_dilation(ctx):
    if ctx.options.get("dilation_w_factor", 1) != ctx.options.get("dilation_h_factor", 1):
        return "dilation must be the same in x and y"
    return None


def fc_default_format(ctx):
    if int(ctx.options.get("weights_format", 0) or 0) != 0:
        return "only the default weights format is supported"
    return None


def _axes(ctx, index=1):
    a = ctx.const(index)
    if a is None:
        return None
    rank = len(ctx.shapes[ctx.op.inputs[0]])
    return sorted(int(x) % rank for x in a.reshape(-1))


def no_batch_axis(ctx):
    axes = _axes(ctx)
    if axes is None:
        return "axes must be a constant"
    if 0 in axes and len(ctx.shapes[ctx.op.inputs[0]]) == 4:
        return "cannot reduce over the batch dimension"
    return None


def pad_no_batch(ctx):
    p = ctx.const(1)
    if p is None:
        return "paddings must be a constant"
    if len(p) == 4 and (p[0] != 0).any():
        return "cannot pad the batch dimension"
    return None


def concat_const_rule(ctx):
    consts = [j for j in range(len(ctx.op.inputs)) if ctx.const(j) is not None]
    if not consts:
        return None
    if len(ctx.op.inputs) != 2:
        return "with a constant input there must be exactly 2 inputs"
    t = ctx.input(consts[0])
    zp = int(t.quant.zero_point[0]) if t.quantized else 0
    if (ctx.const(consts[0]).astype(int) != zp).any():
        return "a constant input must be all zeros (a zero padding)"
    return None


def softmax_1d(ctx):
    shape = ctx.shapes[ctx.op.inputs[0]]
    n = 1
    for d in shape:
        n *= int(d)
    if any(int(d) > 1 for d in shape[:-1]):
        return f"input shape {list(shape)}: only a 1-D input (all outer dimensions 1) is supported"
    if n > 16000:
        return f"input has {n} elements (at most 16000)"
    return None


def resize_3d(ctx):
    shape = ctx.shapes[ctx.op.inputs[0]]
    if len(shape) == 4 and int(shape[0]) != 1:
        return "input/output must be 3-dimensional (batch 1)"
    return None


def squeeze_leading_ones(ctx):
    shape = list(ctx.shapes[ctx.op.inputs[0]])
    dims = sorted(int(d) % len(shape) for d in (ctx.options.get("squeeze_dims") or
                                                 [i for i, d in enumerate(shape) if d == 1]))
    if dims != list(range(len(dims))):
        return "only leading size-1 dimensions can be squeezed (no relayout)"
    return None


def strided_slice_rule(ctx):
    s = ctx.const(3)
    if s is None:
        return "strides must be constant"
    return None


def prelu_alpha(ctx):
    a = ctx.const(1)
    if a is None:
        return "alpha must be a constant"
    if sum(1 for d in a.shape if d > 1) > 1:
        return "alpha may vary only along its innermost dimension"
    return None


_NOACT = (r.no_fused_activation,)
_CONV = (same_dilation, r.const_input(1, "filter"), r.const_input(2, "bias", optional=True))

OPS = {
    "ADD": OpCaps(Q8), "SUB": OpCaps(Q8), "MUL": OpCaps(Q8),
    "MAXIMUM": OpCaps(Q8), "MINIMUM": OpCaps(Q8), "SQUARED_DIFFERENCE": OpCaps(Q8),
    "AVERAGE_POOL_2D": OpCaps(Q8, _NOACT, "no fused activation"),
    "MAX_POOL_2D": OpCaps(Q8, _NOACT, "no fused activation"),
    "CONCATENATION": OpCaps(Q8, _NOACT + (concat_const_rule,),
                            "no fused activation; a constant input only as one of 2 inputs and all zeros"),
    "CONV_2D": OpCaps(Q8, _CONV, "same dilation in x and y"),
    "DEPTHWISE_CONV_2D": OpCaps(Q8, _CONV, "same dilation in x and y"),
    "TRANSPOSE_CONV": OpCaps(Q8, (r.const_input(1, "filter"),)),
    "EXPAND_DIMS": OpCaps(Q8),
    "FULLY_CONNECTED": OpCaps(Q8, (fc_default_format, r.const_input(1, "weights")),
                              "default weights format only"),
    "L2_NORMALIZATION": OpCaps(Q8), "LOGISTIC": OpCaps(Q8), "TANH": OpCaps(Q8),
    "RELU": OpCaps(Q8), "RELU6": OpCaps(Q8), "RELU_N1_TO_1": OpCaps(Q8), "HARD_SWISH": OpCaps(Q8),
    "LEAKY_RELU": OpCaps(Q8), "PRELU": OpCaps(Q8, (prelu_alpha,), "alpha 1-D (innermost dimension only)"),
    "MEAN": OpCaps(Q8, (no_batch_axis,), "no reduction over the batch dimension"),
    "SUM": OpCaps(Q8, (no_batch_axis,), "no reduction over the batch dimension"),
    "REDUCE_MAX": OpCaps(Q8, (no_batch_axis,), "no reduction over the batch dimension"),
    "REDUCE_MIN": OpCaps(Q8, (no_batch_axis,), "no reduction over the batch dimension"),
    "PAD": OpCaps(Q8, (pad_no_batch,), "no padding of the batch dimension"),
    "PACK": OpCaps(Q8, (lambda c: "cannot pack along the batch dimension"
                        if int(c.options.get("axis", 0)) == 0 and len(c.shapes[c.op.outputs[0]]) == 4 else None,),
                   "not along the batch dimension"),
    "UNPACK": OpCaps(Q8),
    "QUANTIZE": OpCaps(Q8),
    "RESHAPE": OpCaps(Q8, note="large reshapes may stay on the CPU"),
    "RESIZE_BILINEAR": OpCaps(Q8, (resize_3d,), "3-D input/output"),
    "RESIZE_NEAREST_NEIGHBOR": OpCaps(Q8, (resize_3d,), "3-D input/output"),
    "RSQRT": OpCaps(Q8),
    "SLICE": OpCaps(Q8), "SPLIT": OpCaps(Q8), "SPACE_TO_DEPTH": OpCaps(Q8),
    "SOFTMAX": OpCaps(Q8, (softmax_1d,), "1-D input, at most 16000 elements"),
    "SQUEEZE": OpCaps(Q8, (squeeze_leading_ones,), "leading 1s only (no relayout)"),
    "STRIDED_SLICE": OpCaps(Q8, (strided_slice_rule,)),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": OpCaps(Q8, note="unidirectional only"),
}

COMPILER_TABLE = CapabilityTable(
    "the Edge TPU compiler", OPS,
    node_constraints=(all_quantized_8bit, r.fully_static_shapes, at_most_3_large_dims))


def _input_quantize(ctx) -> bool:
    """A QUANTIZE of a model input: the compiler leaves it on the CPU and maps what follows."""
    return ctx.name == "QUANTIZE" and all(i in ctx.graph.inputs for i in ctx.op.inputs if i >= 0)


def stop_at_first_unsupported(order: list[int], decisions: dict, ctxs: dict) -> dict:
    """The compiler maps ops in order and stops at the first one it cannot map.

    Exempt: a QUANTIZE of a model input (float-input models keep it on the CPU) and nodes already
    compiled (``edgetpu-custom-op``).
    """
    out = dict(decisions)
    first = next((n for n in order if not decisions[n].ok and not _input_quantize(ctxs[n])
                  and not decisions[n].reason.startswith("taken by")), None)
    if first is None:
        return out
    seen = False
    for n in order:
        if n == first:
            seen = True
            continue
        if seen and out[n].ok and out[n].reason != "already compiled for the Edge TPU":
            out[n] = Support.no(f"after node {first} ({ctxs[first].name}), which the Edge TPU compiler "
                                "cannot map: compilation stops at the first unsupported op and the rest "
                                "runs on the CPU")
    return out
