"""What edgerun knows about each TFLite builtin besides its kernels, as one table.

Per op: the converter's quantization rule (TFLite's int8 spec, applied by
``edgerun.convert.quantize``), its multiply-accumulate count, whether an activation may be fused
into it, how many inputs/outputs a node may have, and the node checks that every kernel path
shares. The interpreter runs ``OpDef.validate`` on each node in ``allocate_tensors`` before any
kernel (edgerun's or a delegate's, e.g. LiteRT through XNNPACK) sees it, so a node LiteRT's own
Prepare would refuse ends in one ModelFormatError instead of reaching native code.

Kernels are registered in their own modules (``edgerun/ops/<family>.py``); this table only adds
facts to the same :class:`~edgerun.ops.registry.OpDef`. Quantization rules, as applied:

* weights of CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV and FULLY_CONNECTED: int8 symmetric per
  output channel (axis 0, or 3 for depthwise ``1 x H x W x C`` filters); bias int32;
* fixed output parameters: SOFTMAX and LOGISTIC (1/256, -128), TANH (1/128, 0), LOG_SOFTMAX
  (16/256, 127);
* value-moving ops ("same") share one (scale, zero point) between their inputs and outputs;
* "own": the output gets its calibrated range; "float": no int8 form, the op stays float.
"""

from __future__ import annotations

import numpy as np

from edgerun.ops.common import conv_output_size
from edgerun.ops.registry import NodeContext, QuantRule, define
from edgerun.schema.tflite import Padding


# --------------------------------------------------------------------------------------------
# multiply-accumulate counts
# --------------------------------------------------------------------------------------------
def _shape(ctx: NodeContext, tensor_index: int) -> tuple[int, ...]:
    return tuple(int(d) for d in ctx.shapes[tensor_index])


def _out_elems(ctx: NodeContext) -> int:
    return int(np.prod(_shape(ctx, ctx.op.outputs[0]), dtype=np.int64))


def _conv_macs(ctx):  # OHWI filter: every output element sums KH*KW*Cin products
    w = _shape(ctx, ctx.op.inputs[1])
    return _out_elems(ctx) * w[1] * w[2] * w[3]


def _depthwise_macs(ctx):  # 1 H W C*m filter
    w = _shape(ctx, ctx.op.inputs[1])
    return _out_elems(ctx) * w[1] * w[2]


def _transpose_conv_macs(ctx):  # inputs: (output_shape, OHWI weights, input)
    w = _shape(ctx, ctx.op.inputs[1])
    x = _shape(ctx, ctx.op.inputs[2])
    return int(np.prod(x, dtype=np.int64)) * w[0] * w[1] * w[2]


def _fully_connected_macs(ctx):
    w = _shape(ctx, ctx.op.inputs[1])
    return _out_elems(ctx) * w[-1]


def _batch_matmul_macs(ctx):
    a = _shape(ctx, ctx.op.inputs[0])
    k = a[-2] if ctx.options.get("adj_x") else a[-1]
    return _out_elems(ctx) * k


# --------------------------------------------------------------------------------------------
# node checks (option values and tensor counts LiteRT's Prepare enforces)
# --------------------------------------------------------------------------------------------
def _elems(ctx: NodeContext, input_index: int) -> int:
    return int(np.prod(ctx.input_shape(input_index), dtype=np.int64))


def _split_count(ctx: NodeContext) -> None:
    n = int(ctx.options.get("num_splits", 0) or 0)
    if n != len(ctx.op.outputs):
        raise ctx.invalid(f"num_splits={n} but the node has {len(ctx.op.outputs)} outputs "
                          "(LiteRT requires them equal)")


def _positive_options(*names: str):
    def check(ctx: NodeContext) -> None:
        for name in names:
            v = ctx.options.get(name)
            if v is not None and int(v) <= 0:
                raise ctx.invalid(f"{name}={v} (must be positive)")
    return check


def _reduce_axis_nonempty(axis_input: int, *, data_input: int = 0):
    """Arg-max/min and max/min reductions have no value over an empty axis."""
    def check(ctx: NodeContext) -> None:
        if axis_input >= len(ctx.op.inputs) or ctx.op.inputs[data_input] < 0:
            return
        shape = ctx.input_shape(data_input)
        axes = ctx.const(axis_input)
        if axes is None:  # run-time axes: every axis may be reduced
            axes_l = list(range(len(shape)))
        else:
            axes_l = [int(a) for a in np.asarray(axes).reshape(-1)]
            if not axes_l and ctx.name.startswith("ARG_"):
                raise ctx.invalid("has no axis")
        for a in axes_l:
            if not -len(shape) <= a < max(len(shape), 1):
                raise ctx.invalid(f"axis {a} is out of range for an input of rank {len(shape)}")
            if shape and shape[a % len(shape)] == 0:
                raise ctx.invalid(f"reduces over axis {a}, which is empty in input shape {list(shape)} "
                                  "(no maximum/minimum of no values)")
    return check


def _same_dtype(*inputs: int):
    """The data inputs (``()``: all present inputs) and every output share one dtype."""
    def check(ctx: NodeContext) -> None:
        idx = inputs or range(len(ctx.op.inputs))
        ts = [ctx.input(i) for i in idx] + ctx.outputs
        kinds = {t.dtype for t in ts if t is not None}
        if len(kinds) > 1:
            names = ", ".join(f"'{t.name}' {t.dtype}" for t in ts if t is not None)
            raise ctx.invalid(f"mixes tensor types ({names}); {ctx.name} keeps one type")
    return check


def _condition_nonempty(ctx: NodeContext) -> None:
    if ctx.op.inputs and ctx.op.inputs[0] >= 0 and _elems(ctx, 0) == 0:
        raise ctx.invalid(f"its condition has shape {list(ctx.input_shape(0))}, no value to test")


def _while_condition_nonempty(ctx: NodeContext) -> None:
    idx = int(ctx.options.get("cond_subgraph_index", -1))
    if not 0 <= idx < len(ctx.model.subgraphs):
        return  # the kernel reports the bad index
    g = ctx.model.subgraphs[idx]
    if len(g.outputs) == 1 and 0 <= g.outputs[0] < len(g.tensors):
        shape = g.tensors[g.outputs[0]].shape
        if int(np.prod(shape, dtype=np.int64)) == 0:
            raise ctx.invalid(f"its condition subgraph {idx} gives a value of shape {list(shape)}, "
                              "no value to test")


# --------------------------------------------------------------------------------------------
# working memory (bytes) beyond the node's tensors, an upper bound for the memory budget
# --------------------------------------------------------------------------------------------
def _padded_extent(size: int, filt: int, stride: int, dilation: int, padding: int) -> int:
    eff = (filt - 1) * dilation + 1
    out = conv_output_size(padding, size, filt, stride, dilation)
    return size + max((out - 1) * stride + eff - size, 0)


def _window_scratch(filter_input: int | None):
    """Windowed ops (conv, depthwise, pooling) may copy the input padded to every window, in
    float32 or int64 per element, plus a per-position count for average pooling."""
    def scratch(ctx: NodeContext) -> int:
        shape = ctx.input_shape(0)
        if len(shape) != 4:
            return 0
        n, h, w, c = shape
        o = ctx.options
        if filter_input is None:
            fh, fw = int(o.get("filter_height", 1)), int(o.get("filter_width", 1))
        else:
            ws = ctx.input_shape(filter_input)
            if len(ws) != 4:
                return 0
            fh, fw = ws[1], ws[2]
        sh, sw = max(1, int(o.get("stride_h", 1))), max(1, int(o.get("stride_w", 1)))
        dh, dw = max(1, int(o.get("dilation_h_factor", 1))), max(1, int(o.get("dilation_w_factor", 1)))
        pad = int(o.get("padding", Padding.SAME))
        hp = _padded_extent(h, max(fh, 1), sh, dh, pad)
        wp = _padded_extent(w, max(fw, 1), sw, dw, pad)
        return 8 * n * hp * wp * c + 8 * hp * wp
    return scratch


# --------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------
def _w(axis=0, wi=1, bi=2, v=3):
    return QuantRule("weights", wi, axis, bi, int8_version=v)


_SAME, _OWN, _FLOAT = QuantRule("same"), QuantRule("own"), QuantRule("float")
_STRIDES = _positive_options("stride_w", "stride_h")
_DILATIONS = _positive_options("dilation_w_factor", "dilation_h_factor")

define("CONV_2D", quant=_w(0, v=3), macs=_conv_macs, fused_activation=True, inputs=(2, 3), outputs=(1, 1),
       validators=(_STRIDES, _DILATIONS), scratch=_window_scratch(1))
define("DEPTHWISE_CONV_2D", quant=_w(3, v=3), macs=_depthwise_macs, fused_activation=True, inputs=(2, 3),
       outputs=(1, 1), validators=(_STRIDES, _DILATIONS), scratch=_window_scratch(1))
define("TRANSPOSE_CONV", quant=_w(0, wi=1, bi=3, v=3), macs=_transpose_conv_macs, fused_activation=True,
       inputs=(3, 4), outputs=(1, 1), validators=(_STRIDES,))
define("FULLY_CONNECTED", quant=_w(0, v=4), macs=_fully_connected_macs, fused_activation=True,
       inputs=(2, 3), outputs=(1, 2))
define("BATCH_MATMUL", quant=_OWN, macs=_batch_matmul_macs, inputs=(2, 2), outputs=(1, 1))

define("SOFTMAX", quant=QuantRule("fixed", fixed=(1 / 256, -128)), inputs=(1, 1), outputs=(1, 1))
define("LOGISTIC", quant=QuantRule("fixed", fixed=(1 / 256, -128)), inputs=(1, 1), outputs=(1, 1))
define("TANH", quant=QuantRule("fixed", fixed=(1 / 128, 0)), inputs=(1, 1), outputs=(1, 1))
define("LOG_SOFTMAX", quant=QuantRule("fixed", fixed=(16 / 256, 127)), inputs=(1, 1), outputs=(1, 1))

for _op in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
    define(_op, quant=QuantRule("same", int8_version=1), outputs=(1, 1), validators=(_same_dtype(0),))
for _op in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
    define(_op, quant=_SAME, fused_activation=True, inputs=(1, 1), outputs=(1, 1),
           validators=(_STRIDES, _positive_options("filter_width", "filter_height"), _same_dtype()),
           scratch=_window_scratch(None))
for _op in ("REDUCE_MAX", "REDUCE_MIN"):
    define(_op, quant=_SAME, inputs=(2, 2), outputs=(1, 1), validators=(_reduce_axis_nonempty(1),))
for _op in ("ARG_MAX", "ARG_MIN"):
    define(_op, inputs=(2, 2), outputs=(1, 1), validators=(_reduce_axis_nonempty(1),))
for _op in ("TRANSPOSE", "PAD", "MIRROR_PAD", "SLICE", "STRIDED_SLICE", "GATHER", "RESIZE_BILINEAR",
            "RESIZE_NEAREST_NEIGHBOR", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH"):
    define(_op, quant=_SAME, validators=(_same_dtype(0),))
define("PADV2", quant=QuantRule("same", shared=(0, 2)), validators=(_same_dtype(0),))
define("SPLIT", quant=QuantRule("same", shared=(1,)), inputs=(2, 2), validators=(_split_count, _same_dtype(1)))
define("SPLIT_V", quant=_SAME, inputs=(3, 3), validators=(_split_count, _same_dtype(0)))
# fused_activation False: LiteRT's CONCATENATION kernel (builtin and BUILTIN_REF, float32 and int8) fails
# prepare on any fused activation; its XNNPACK delegate ignores it (the kernel still applies one it reads)
define("CONCATENATION", quant=QuantRule("same", shared=(-1,)), outputs=(1, 1),
       validators=(_same_dtype(),))
define("MAXIMUM", quant=QuantRule("same", shared=(0, 1)), inputs=(2, 2), outputs=(1, 1), validators=(_same_dtype(),))
define("MINIMUM", quant=QuantRule("same", shared=(0, 1)), inputs=(2, 2), outputs=(1, 1), validators=(_same_dtype(),))
for _op in ("ADD", "SUB"):
    define(_op, quant=_OWN, fused_activation=True, inputs=(2, 2), outputs=(1, 1), validators=(_same_dtype(),))
define("MUL", quant=_OWN, fused_activation=True, inputs=(2, 2), outputs=(1, 1))
for _op in ("MEAN", "SUM"):
    define(_op, quant=_OWN, inputs=(2, 2), outputs=(1, 1))
define("RELU", quant=_OWN)
# TFLM's int8 RELU6 clamps raw values without requantizing: input and output share params
define("RELU6", quant=_SAME)
define("RELU_N1_TO_1", quant=QuantRule("same", int8_version=1))
define("LEAKY_RELU", quant=_OWN)
for _op in ("PRELU", "HARD_SWISH", "ELU", "SQRT", "RSQRT"):
    define(_op, quant=QuantRule("own", int8_version=1))
for _op in ("EXP", "ABS"):
    define(_op, quant=_OWN)
# LiteRT's int8 DIV overflows when the numerator is -1 after the zero point (CountLeadingSignBits
# gives 31): DIV stays float. (The converter lowers a DIV by a constant to MUL by the reciprocal.)
define("DIV", quant=_FLOAT, fused_activation=True, inputs=(2, 2), outputs=(1, 1))
# NEG's int8 kernel negates raw values (no requantization): not expressible with one output scale
define("NEG", quant=_FLOAT)
define("DEQUANTIZE", quant=_FLOAT, inputs=(1, 1), outputs=(1, 1))
define("CAST", quant=_FLOAT, inputs=(1, 1), outputs=(1, 1))
define("QUANTIZE", inputs=(1, 1), outputs=(1, 1))

# control flow and state: nodes with no inputs or no outputs are legal here
define("IF", inputs=(1, None), outputs=(0, None), validators=(_condition_nonempty,))
define("WHILE", inputs=(0, None), outputs=(0, None), validators=(_while_condition_nonempty,))
define("CALL_ONCE", inputs=(0, 0), outputs=(0, 0))
define("VAR_HANDLE", inputs=(0, 0), outputs=(1, 1))
define("READ_VARIABLE", inputs=(1, 1), outputs=(1, 1))
define("ASSIGN_VARIABLE", inputs=(2, 2), outputs=(0, 0))
