"""Float graph + calibrated ranges -> full-integer int8 graph, per TFLite's int8 quantization spec.

The spec (https://ai.google.dev/edge/litert/models/quantization_spec), as applied here:

* real = scale * (q - zero_point);
* weights of CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV and FULLY_CONNECTED: int8 symmetric
  (zero point 0, values in [-127, 127]) with one scale per output channel:
  ``scale_c = max|w_c| / 127`` (axis 0, or 3 for depthwise filters ``1 x H x W x C``);
* their bias: int32, zero point 0, ``scale_c = input_scale * weight_scale_c``;
* activations: int8 asymmetric per tensor from the calibrated range [lo, hi] widened to hold 0:
  ``scale = (hi - lo) / 255``, ``zero_point = round(-128 - lo / scale)``, so 0.0 is exact;
* fixed output parameters: SOFTMAX and LOGISTIC (1/256, -128), TANH (1/128, 0),
  LOG_SOFTMAX (16/256, 127);
* ops that move values without arithmetic (RESHAPE, MAX_POOL_2D, AVERAGE_POOL_2D, CONCATENATION,
  PAD, SLICE, TRANSPOSE, ...) share one (scale, zero_point) between their inputs and outputs; the
  shared range is the union of the members' ranges (a union-find over tensors);
* other constant operands (ADD/MUL operands, PRELU alpha) are int8 asymmetric per tensor.

Each op's rule is data declared with the op (``OpDef.quant_rule``, in ``edgerun/ops/builtins.py``);
:data:`RULES` is the converter's view of that one table.
Ops with no int8 form in TFLite (or that the caller keeps in float to meet an accuracy budget)
run in float between DEQUANTIZE and QUANTIZE.

16x8 mode (``activations="int16"``, TFLite's "int16 activations, int8 weights"): activations are
int16 symmetric (zero point 0, ``scale = max(|lo|, |hi|) / 32767``), weights stay int8 symmetric
per channel, biases are int64 at ``input_scale * weight_scale_c``. Only the ops in
:data:`INT16_OPS` (those edgerun has bit-exact 16x8 kernels for) are quantized; others run in float.
"""

from __future__ import annotations

import numpy as np

import edgerun.ops  # noqa: F401  (fills the registry, quantization rules included)
from edgerun.convert.graph import Graph, Op, T
from edgerun.errors import ConversionError
from edgerun.ir import QuantParams
from edgerun.ops.registry import QuantRule, quant_rules


#: {op: QuantRule}: the rules declared on the op registry (``edgerun/ops/builtins.py``)
RULES: dict[str, QuantRule] = quant_rules()

QMIN, QMAX = -128, 127
#: a calibrated range narrower than this (after widening to include 0) is a constant-zero tensor
NEAR_ZERO_RANGE = 1e-6
#: the scale such a tensor gets: one step of a unit-wide range (its producers' and consumers'
#: requantization multipliers then stay in range for any input scale up to ~2000)
DEGENERATE_SCALE = float(np.float32(1.0 / 255.0))


def activation_params(lo: float, hi: float) -> tuple[float, int]:
    """int8 asymmetric (scale, zero_point) for [lo, hi] widened to include 0 (0.0 exact)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not np.isfinite(lo) or not np.isfinite(hi):
        raise ConversionError(f"calibrated range [{lo}, {hi}] is not finite (NaN or inf in the float model)")
    if hi - lo < NEAR_ZERO_RANGE:
        # An (all but) zero tensor: any scale represents it, but a tiny one makes the requantization
        # multipliers of its producer and consumers huge (LiteRT aborts on an ADD output scale of
        # 1e-8). Use the step of a [-0.5, 0.5] range, with zero point 0, as a floor.
        return DEGENERATE_SCALE, 0
    scale = float(np.float32((hi - lo) / 255.0))
    zp = int(np.clip(np.round(QMIN - lo / scale), QMIN, QMAX))
    return scale, zp


def quantize_array(x: np.ndarray, scale, zp, dtype=np.int8, axis: int | None = None) -> np.ndarray:
    info = np.iinfo(dtype)
    s = np.asarray(scale, np.float64)
    z = np.asarray(zp, np.int64)
    if axis is not None and s.size > 1:
        shp = [1] * x.ndim
        shp[axis] = -1
        s, z = s.reshape(shp), z.reshape(shp)
    q = np.round(np.asarray(x, np.float64) / s) + z
    return np.clip(q, info.min, info.max).astype(dtype)


#: Largest int32 bias magnitude the converter writes (a little below 2^31 - 1).
BIAS_LIMIT = 2 ** 31 - 2 ** 16


def weight_params(w: np.ndarray, axis: int, min_scale: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel int8: (scales, q) with q in [-127, 127].

    ``min_scale`` (per channel) raises a channel's scale where its bias would not fit int32 at
    ``input_scale * weight_scale``: see :func:`bias_min_weight_scale`."""
    red = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.max(np.abs(w), axis=red) if w.size else np.zeros(w.shape[axis])
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    if min_scale is not None:
        scale = np.maximum(scale, min_scale)
    scale = scale.astype(np.float32)
    q = quantize_array(w, scale, np.zeros_like(scale, dtype=np.int64), np.int8, axis)
    return scale, np.clip(q, -127, 127).astype(np.int8)


def bias_min_weight_scale(bias: np.ndarray, input_scale: float, n_channels: int) -> np.ndarray | None:
    """Per-channel weight scale below which ``round(bias / (input_scale * weight_scale))`` leaves
    int32 (a channel of tiny weights with a large bias). Clipping such a bias, as a plain cast
    would, silently changes the channel's output; a larger weight scale keeps it exact, as
    TensorFlow's converter does. None when no channel needs it."""
    b = np.abs(np.asarray(bias, np.float64)).reshape(-1)
    if b.size not in (1, n_channels) or not np.isfinite(b).all() or input_scale <= 0:
        return None
    need = b / (float(input_scale) * BIAS_LIMIT)
    return np.broadcast_to(need, (n_channels,)) if need.max(initial=0.0) > 0 else None


def _bias_floor(g, op, rule, params) -> np.ndarray | None:
    """The weight-scale floor a weights op's constant float bias asks for (bias_min_weight_scale)."""
    bi = rule.bias_input
    if bi is None or bi >= len(op.inputs) or op.inputs[bi] < 0:
        return None
    bias = g.tensors[op.inputs[bi]].data
    w = g.tensors[op.inputs[rule.weight_input]].data
    if bias is None or w is None or bias.dtype.kind != "f":
        return None
    in_s = params[op.inputs[2 if op.op == "TRANSPOSE_CONV" else 0]][0]
    return bias_min_weight_scale(bias, in_s, w.shape[rule.weight_axis])


class _UF:
    def __init__(self):
        self.parent = {}

    def find(self, a):
        self.parent.setdefault(a, a)
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


#: ops the 16x8 mode quantizes, with the op version LiteRT gives their int16 form
INT16_OPS = {"CONV_2D": 4, "DEPTHWISE_CONV_2D": 5, "FULLY_CONNECTED": 7, "MAX_POOL_2D": 3,
             "AVERAGE_POOL_2D": 3, "RESHAPE": 1, "SOFTMAX": 3, "ADD": 3, "SUB": 3, "MUL": 4}
#: fixed int16 output parameters (LiteRT's int16 SOFTMAX requires 1/32768, zero point 0)
FIXED16 = {"SOFTMAX": (1.0 / 32768, 0)}


def activation_params16(lo: float, hi: float) -> tuple[float, int]:
    """int16 symmetric (scale, 0) for [lo, hi]: ``scale = max(|lo|, |hi|) / 32767``."""
    m = max(abs(float(lo)), abs(float(hi)))
    if not np.isfinite(m):
        raise ConversionError(f"non-finite calibrated range [{lo}, {hi}]")
    if m < NEAR_ZERO_RANGE:
        return DEGENERATE_SCALE, 0
    return float(np.float32(m / 32767.0)), 0


def wide_softmax_outputs(g: Graph, fops: set[int], io_type: str) -> set[int]:
    """Output tensors of quantized SOFTMAX ops that are float32 graph outputs and feed nothing else."""
    if io_type != "float32":
        return set()
    cons = g.consumers()
    outs = set(g.outputs)
    return {op.outputs[0] for i, op in enumerate(g.ops) if op.op == "SOFTMAX" and i not in fops
            and op.outputs[0] in outs and not cons.get(op.outputs[0])}


#: ops a wide head walks back through from its FULLY_CONNECTED (value-moving or averaging ops
#: with 16x8 kernels: their int16 outputs keep what int8 would round away)
WIDE_HEAD_THROUGH = ("RESHAPE", "AVERAGE_POOL_2D")


def wide_head_ops(g: Graph, fops: set[int], wide: set[int], io_type: str) -> set[int]:
    """Ops of a float32-output model's classifier head that run in 16x8 (int16 activations, int8
    weights, int64 bias): the last FULLY_CONNECTED before each wide SOFTMAX (``wide``: their
    outputs), or whose result is itself a float32 graph output (logits out, through RESHAPEs), and
    the RESHAPE / AVERAGE_POOL_2D ops that feed it. Only ops whose output has one consumer are
    taken, so no other layer's input changes precision. The int8 logits' step (MLPerf Tiny
    ResNet-8: 0.116 on crops of photographs) otherwise decides near-ties of the top-2 classes."""
    if io_type != "float32":
        return set()
    prod, cons = g.producers(), g.consumers()
    outs = set(g.outputs)

    def single(t):
        return len(cons.get(t, [])) + (t in outs) == 1

    def back(t, through) -> int | None:
        """The op producing ``t``, walking back over single-consumer ``through`` ops."""
        while t in prod and prod[t] not in fops:
            i = prod[t]
            if g.ops[i].op not in through:
                return i
            if not single(g.ops[i].inputs[0]):
                return None
            t = g.ops[i].inputs[0]
        return None

    starts = []
    for i, op in enumerate(g.ops):
        if op.op == "SOFTMAX" and op.outputs[0] in wide and single(op.inputs[0]):
            starts.append(op.inputs[0])
    starts += [t for t in g.outputs if t in prod and prod[t] not in fops and not cons.get(t)]
    head: set[int] = set()
    for t in starts:
        i = back(t, ("RESHAPE",))
        if i is None or g.ops[i].op != "FULLY_CONNECTED" or g.tensors[g.ops[i].inputs[1]].data is None:
            continue
        if not (single(g.ops[i].outputs[0]) or g.ops[i].outputs[0] in outs):
            continue
        head.add(i)
        x = g.ops[i].inputs[0]
        while x in prod and prod[x] not in fops and g.ops[prod[x]].op in WIDE_HEAD_THROUGH and single(x):
            head.add(prod[x])
            x = g.ops[prod[x]].inputs[0]
        k = t
        while k in prod and prod[k] != i:
            head.add(prod[k])
            k = g.ops[prod[k]].inputs[0]
    return head


#: first layers a wide input stage runs in 16x8 (:func:`wide_input_ops`)
WIDE_INPUT_LAYERS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def wide_input_ops(g: Graph, fops: set[int], io_type: str) -> tuple[set[int], set[int]]:
    """(ops, graph inputs) of a float32-input model's int16 input stage: each float32 graph input
    whose every reader is a weight layer (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED with
    constant weights) is quantized to int16 (QUANTIZE float32 -> int16) and those layers run in
    16x8; their int16 outputs are requantized to int8 for the rest of the model. An input whose
    range is set by one wide feature (MLPerf Tiny kws: MFCC coefficient 0 spans ~150, the others
    a few units) loses the small features to int8's step; int16's is 256 times finer."""
    if io_type != "float32":
        return set(), set()
    cons = g.consumers()
    ops: set[int] = set()
    ins: set[int] = set()
    for t in g.inputs:
        readers = cons.get(t, [])
        if not readers or t in g.outputs or g.tensors[t].dtype != "float32":
            continue
        if all(i not in fops and g.ops[i].op in WIDE_INPUT_LAYERS and g.ops[i].inputs[0] == t
               and t not in g.ops[i].inputs[1:] and g.tensors[g.ops[i].inputs[1]].data is not None for i in readers):
            ops.update(readers)
            ins.add(t)
    return ops, ins


def float_ops(g: Graph, keep_float: set[str] | frozenset = frozenset(), activations: str = "int8") -> set[int]:
    """Indices of ops that stay float: no int8 form, or named (by output tensor) in keep_float."""
    out = set()
    for i, op in enumerate(g.ops):
        rule = RULES.get(op.op)
        if rule is None or rule.kind == "float" or (activations == "int16" and op.op not in INT16_OPS):
            out.add(i)
        elif any(g.tensors[o].name in keep_float for o in op.outputs):
            out.add(i)
        elif rule.kind == "weights" and g.tensors[op.inputs[rule.weight_input]].data is None:
            out.add(i)  # run-time weights: not in the int8 spec
    return out


def _xnnpack_const_range(g: Graph, op: Op, k: int, lo: float, hi: float, out_p, params) -> tuple[float, float]:
    """Widen an int8 ADD/SUB/MUL constant operand's range so LiteRT's XNNPACK delegate takes the op.
    XNNPACK (LiteRT 2.3, measured) refuses an int8 ADD/SUB whose input scale / output scale is
    below 2^-10, and a MUL whose input scale x input scale / output scale is below 2^-16: a tiny
    learned bias (PP-LCNet's affine blocks add 1e-6) gets a tiny scale from its own range and the
    op falls out of the partition. The coarser step moves the result by at most 1/1024 of an
    output step (1/2048 for ADD / SUB)."""
    s = (max(hi, 0.0) - min(lo, 0.0)) / 255.0
    if op.op in ("ADD", "SUB"):
        floor = out_p[0] * 2.0 ** -10
    elif op.op == "MUL" and len(op.inputs) == 2 and op.inputs[1 - k] in params:
        floor = out_p[0] * 2.0 ** -16 / params[op.inputs[1 - k]][0]
    else:
        return lo, hi
    floor *= 1.01  # clear of the bound after float32 rounding of the scales
    if s >= floor:
        return lo, hi
    pad = (255.0 * floor - (max(hi, 0.0) - min(lo, 0.0))) / 2.0
    return min(lo, 0.0) - pad, max(hi, 0.0) + pad


def _shared_operands(g: Graph, fops: set[int]):
    """(op index, op, operand position) of each operand that shares its op's quantization
    parameters (ops of kind "same": CONCATENATION, MAXIMUM, PADV2's value, ...), over quantized
    ops only."""
    for i, op in enumerate(g.ops):
        if i in fops or RULES[op.op].kind != "same":
            continue
        shared = range(len(op.inputs)) if RULES[op.op].shared == (-1,) else RULES[op.op].shared
        for k in shared:
            if k < len(op.inputs):
                yield i, op, k


def wide_head_runs_here() -> bool:
    """Whether this machine's LiteRT runs the int16 output forms (QUANTIZE int8 -> int16, 16x8
    FULLY_CONNECTED, int16 SOFTMAX): tflite-runtime 2.14, armhf's only LiteRT, has no int8 ->
    int16 QUANTIZE. The converter scores and verifies every model it writes in LiteRT, so where
    these do not run ``wide_softmax`` is off: the head and SOFTMAX stay int8. Probed once per
    process on a 3-op model."""
    global _WIDE_HEAD_HERE
    if _WIDE_HEAD_HERE is None:
        _WIDE_HEAD_HERE = _probe_wide_head()
    return _WIDE_HEAD_HERE


_WIDE_HEAD_HERE: bool | None = None


def _probe_wide_head() -> bool:
    from edgerun.ir import ModelBuilder
    from edgerun.litert import make_interpreter

    b = ModelBuilder("edgerun wide-form probe")
    x = b.input("x", (1, 4), "int8", quant=([0.05], [3]))
    x16 = b.tensor("x16", (1, 4), "int16", quant=([0.05], [0]))
    w = b.const("w", np.array([[1, -2, 3, -4], [5, 6, -7, 8], [0, 1, 0, -1]], np.int8),
                quant=([0.02, 0.03, 0.04], [0, 0, 0], 0))
    bias = b.const("b", np.array([100, -50, 0], np.int64), quant=([0.001, 0.0015, 0.002], [0, 0, 0], 0))
    y = b.tensor("y", (1, 3), "int16", quant=([0.002], [0]))
    p = b.tensor("p", (1, 3), "int16", quant=([1 / 32768], [0]))
    b.op("QUANTIZE", [x], [x16])
    b.op("FULLY_CONNECTED", [x16, w, bias], [y], version=7)
    b.op("SOFTMAX", [y], [p], version=3, beta=1.0)
    b.output(p)
    try:
        it = make_interpreter(b.to_bytes(), xnnpack=False)
        it.allocate_tensors()
        it.invoke()
    except Exception:  # noqa: BLE001  (the runtime's refusal, whatever its type)
        return False
    return True


def quantize_graph(g: Graph, ranges: dict[str, tuple[float, float]], *, io_type: str = "int8",
                   keep_float: set[str] | frozenset = frozenset(), activations: str = "int8",
                   int16_layers: set[str] | frozenset = frozenset(), wide_softmax: bool = False,
                   wide_head: bool = True, wide_input: bool = False) -> Graph:
    """A new int8 (or 16x8 with ``activations="int16"``) Graph from float graph ``g`` and
    calibrated ranges keyed by tensor name. ``int16_layers`` (int8 mode): ops, named by output
    tensor, promoted to 16x8 when they have a 16x8 kernel (mixed precision; QUANTIZE converts
    between int8 and int16 tensors at the boundaries). ``wide_softmax`` (int8 mode, float32
    outputs): a SOFTMAX whose output is only a graph output runs in int16 (its int8 logits
    requantized to int16 by a QUANTIZE; output scale 1/32768) and its output is dequantized from
    int16, so the probabilities are not rounded to int8's fixed 1/256 step. ``wide_head`` (with
    ``wide_softmax``): the classifier head before it, or before float32 logits, runs in 16x8 as
    well (:func:`wide_head_ops`). ``wide_input`` (int8 mode, float32 inputs): the input stage
    runs in 16x8 (:func:`wide_input_ops`)."""
    if activations not in ("int8", "int16"):
        raise ConversionError(f"activations {activations!r}: use int8 or int16")
    adt = activations  # the dtype of quantized activation tensors
    if adt == "int16" and io_type not in ("int16", "float32"):
        raise ConversionError(f"io type {io_type!r} with int16 activations: use int16 or float32")
    if adt == "int8" and io_type not in ("int8", "uint8", "float32"):
        raise ConversionError(f"io type {io_type!r}: use int8, uint8 or float32")
    fops = float_ops(g, keep_float, activations)
    wide_softmax = wide_softmax and adt == "int8" and wide_head_runs_here()
    wide = wide_softmax_outputs(g, fops, io_type) if wide_softmax else set()
    head = wide_head_ops(g, fops, wide, io_type) if wide_softmax and wide_head else set()
    # per-op and per-tensor precision: int16 for every quantized op in 16x8 mode, else for promoted ops
    first, wide_ins = wide_input_ops(g, fops, io_type) if wide_input and adt == "int8" else (set(), set())
    op_dt = {i: ("int16" if adt == "int16" or op.outputs[0] in wide or i in head or i in first or (op.op in INT16_OPS and any(
        g.tensors[o].name in int16_layers for o in op.outputs)) else "int8")
        for i, op in enumerate(g.ops) if i not in fops}
    tdt: dict[int, str] = {}
    for i, dt in op_dt.items():
        for o in g.ops[i].outputs:
            tdt[o] = dt
    for t in wide_ins:
        tdt[t] = "int16"

    def params_fn(dt):
        return activation_params16 if dt == "int16" else activation_params
    is_act = [t.data is None for t in g.tensors]
    # which activation tensors are int8: produced by an int8 op, or a graph input read by one
    q_act = set()
    for i, op in enumerate(g.ops):
        if i not in fops:
            q_act.update(op.outputs)
    cons = g.consumers()
    for t in g.inputs:
        if io_type != "float32" or any(c not in fops for c in cons.get(t, [])) or t in g.outputs:
            q_act.add(t)

    # parameter classes: tensors that must share (scale, zero_point)
    uf = _UF()
    fixed: dict[int, tuple[float, int]] = {}
    for i, op in enumerate(g.ops):
        if i not in fops and RULES[op.op].kind == "fixed":
            fixed[op.outputs[0]] = FIXED16[op.op] if op_dt[i] == "int16" else RULES[op.op].fixed
    class_fixed: dict[int, tuple[float, int]] = {t: f for t, f in fixed.items()}

    def join(a, b):
        if tdt.get(a, adt) != tdt.get(b, adt):
            return  # an int8 and an int16 tensor: a QUANTIZE converts between them
        ra, rb = uf.find(a), uf.find(b)
        if ra == rb:
            return
        fa, fb = class_fixed.get(ra), class_fixed.get(rb)
        if fa is not None and fb is not None and fa != fb:
            return  # two different fixed params: keep apart, a QUANTIZE requantizes between them
        uf.union(ra, rb)
        r = uf.find(ra)
        if fa is not None or fb is not None:
            class_fixed[r] = fa if fa is not None else fb

    for i, op in enumerate(g.ops):
        if i in fops or RULES[op.op].kind != "same":
            continue
        rule = RULES[op.op]
        shared = range(len(op.inputs)) if rule.shared == (-1,) else rule.shared
        for o in op.outputs[1:]:
            join(op.outputs[0], o)
        for k in shared:
            if k < len(op.inputs) and op.inputs[k] >= 0 and is_act[op.inputs[k]]:
                join(op.inputs[k], op.outputs[0])
    class_range: dict[int, list[float]] = {}
    acts = [t for t in range(len(g.tensors)) if is_act[t] and g.tensors[t].dtype == "float32"]
    for t in acts:
        name = g.tensors[t].name
        if name in ranges:
            lo, hi = ranges[name]
            cr = class_range.setdefault(uf.find(t), [np.inf, -np.inf])
            cr[0], cr[1] = min(cr[0], lo), max(cr[1], hi)
    # constants that share a class (concat / maximum operands, PADV2 value) widen it
    for i, op, k in _shared_operands(g, fops):
        if op.inputs[k] >= 0 and not is_act[op.inputs[k]]:
            d = g.tensors[op.inputs[k]].data
            if d.dtype.kind == "f" and d.size:
                d = np.clip(d, -3e38, 3e38)
                cr = class_range.setdefault(uf.find(op.outputs[0]), [np.inf, -np.inf])
                if op.op == "PADV2" and k == 2 and float(d.min()) < -1e30:
                    continue  # -inf padding for max pooling: the lowest int8 value
                cr[0], cr[1] = min(cr[0], float(d.min())), max(cr[1], float(d.max()))
    # a value-moving op run at the other precision than its input (a promoted AVERAGE_POOL_2D
    # reading int8): the QUANTIZE before it converts to the op's shared parameters, so they must
    # hold the input's range too (an average's range is narrower than its input's)
    for i, op, k in _shared_operands(g, fops):
        t = op.inputs[k]
        if t < 0 or not is_act[t] or tdt.get(t, adt) == op_dt[i] or uf.find(t) not in class_range:
            continue
        lo, hi = class_range[uf.find(t)]
        cr = class_range.setdefault(uf.find(op.outputs[0]), [np.inf, -np.inf])
        cr[0], cr[1] = min(cr[0], lo), max(cr[1], hi)
    params: dict[int, tuple[float, int]] = {}
    for t in acts:
        r = uf.find(t)
        if r in class_fixed:
            params[t] = class_fixed[r]
        elif r in class_range and np.isfinite(class_range[r][0]):
            params[t] = params_fn(tdt.get(t, adt))(*class_range[r])
    for t in q_act:
        if t not in params:
            raise ConversionError(f"no calibrated range for tensor '{g.tensors[t].name}' "
                                  "(it was never computed during calibration)")

    # build the new graph
    q = Graph()
    q.metadata = dict(g.metadata)
    new_idx: dict[int, int] = {}  # float tensor -> its main tensor in q (int8 if quantized)
    conv_cache: dict[tuple[int, str], int] = {}

    def main_tensor(t: int) -> int:
        if t in new_idx:
            return new_idx[t]
        src = g.tensors[t]
        if t in q_act:
            s, z = params[t]
            idx = q.tensor(src.name, src.shape, tdt.get(t, adt), quant=QuantParams([s], [z]))
        else:
            idx = q.tensor(src.name, src.shape, src.dtype, data=src.data)
        new_idx[t] = idx
        return idx

    def as_float(t: int) -> int:
        m = main_tensor(t)
        if q.tensors[m].dtype not in ("int8", "int16") or t not in q_act:
            return m
        key = (t, "float")
        if key not in conv_cache:
            f = q.tensor(g.tensors[t].name + "_dequant", g.tensors[t].shape, "float32")
            q.ops.append(Op("DEQUANTIZE", [m], [f], version=2))
            conv_cache[key] = f
        return conv_cache[key]

    def as_int8(t: int, want: tuple[float, int] | None = None, dt: str | None = None) -> int:
        m = main_tensor(t)
        dt = dt or tdt.get(t, adt)
        if t in q_act:
            have = tdt.get(t, adt)
            if dt == have and (want is None or params[t] == want):
                return m
            if want is None:  # the other precision's parameters for the same range
                r0 = class_range.get(uf.find(t))
                if r0 is None or not np.isfinite(r0[0]):
                    raise ConversionError(f"no calibrated range for tensor '{g.tensors[t].name}'")
                want = params_fn(dt)(*r0)
            key = (t, f"requant{want}{dt}")
            if key not in conv_cache:
                r = q.tensor(g.tensors[t].name + "_requant", g.tensors[t].shape, dt, quant=QuantParams([want[0]], [want[1]]))
                q.ops.append(Op("QUANTIZE", [m], [r], version=2))
                conv_cache[key] = r
            return conv_cache[key]
        key = (t, "int8")
        if key not in conv_cache:
            if want is None and t not in params:
                raise ConversionError(f"no calibrated range for tensor '{g.tensors[t].name}'")
            s, z = want if want is not None else params[t]
            r = q.tensor(g.tensors[t].name + "_quant", g.tensors[t].shape, dt, quant=QuantParams([s], [z]))
            q.ops.append(Op("QUANTIZE", [m], [r], version=1))
            conv_cache[key] = r
        return conv_cache[key]

    # graph inputs
    for t in g.inputs:
        src = g.tensors[t]
        if t not in q_act:
            q.inputs.append(main_tensor(t))
            continue
        s, z = params[t]
        if io_type in ("int8", "int16"):
            q.inputs.append(main_tensor(t))
            continue
        if io_type == "uint8":
            ext = q.tensor(src.name, src.shape, "uint8", quant=QuantParams([s], [z + 128]))
        else:
            ext = q.tensor(src.name, src.shape, "float32")
        idt = tdt.get(t, adt)
        inner = q.tensor(src.name + "_" + idt, src.shape, idt, quant=QuantParams([s], [z]))
        new_idx[t] = inner
        q.ops.append(Op("QUANTIZE", [ext], [inner], version=2 if io_type == "uint8" else 1))
        q.inputs.append(ext)

    for i, op in enumerate(g.ops):
        if i in fops:
            ins = [as_float(t) if t >= 0 and is_act[t] else (main_tensor(t) if t >= 0 else -1) for t in op.inputs]
            outs = [main_tensor(o) for o in op.outputs]
            q.ops.append(Op(op.op, ins, outs, dict(op.options), op.version, op.origin))
            continue
        rule = RULES[op.op]
        ins: list[int] = []
        out_p = params[op.outputs[0]]
        dt = op_dt[i]
        for k, t in enumerate(op.inputs):
            if t < 0:
                ins.append(-1)
                continue
            src = g.tensors[t]
            if is_act[t]:
                if rule.kind == "same" and (k in rule.shared or rule.shared == (-1,)):
                    ins.append(as_int8(t, out_p, dt))
                else:
                    ins.append(as_int8(t, None, dt))
                continue
            data = src.data
            if data.dtype.kind != "f":
                ins.append(q.tensor(src.name, src.shape, src.dtype, data=data))
                continue
            if rule.kind == "weights" and k == rule.weight_input:
                ws, wq = weight_params(data.astype(np.float32), rule.weight_axis, _bias_floor(g, op, rule, params))
                ins.append(q.tensor(src.name, src.shape, "int8", data=wq,
                                    quant=QuantParams(ws, np.zeros(ws.size, np.int64), rule.weight_axis)))
            elif rule.kind == "weights" and k == rule.bias_input:
                in_s = float(q.tensors[ins[2 if op.op == "TRANSPOSE_CONV" else 0]].quant.scale[0])
                wdata = g.tensors[op.inputs[rule.weight_input]].data.astype(np.float32)
                ws, _ = weight_params(wdata, rule.weight_axis, _bias_floor(g, op, rule, params))
                bs = (np.float64(in_s) * ws.astype(np.float64)).astype(np.float32)
                bq = np.round(data.astype(np.float64) / bs.astype(np.float64))
                bdt = "int64" if dt == "int16" else "int32"
                lim = 2.0 ** 63 - 1024 if dt == "int16" else 2 ** 31 - 1
                ins.append(q.tensor(src.name, src.shape, bdt, data=np.clip(bq, -lim, lim).astype(bdt),
                                    quant=QuantParams(bs, np.zeros(bs.size, np.int64), 0)))
            elif rule.kind == "same" and (k in rule.shared or rule.shared == (-1,)):
                s, z = out_p
                ins.append(q.tensor(src.name, src.shape, dt, data=quantize_array(data, s, z, np.dtype(dt)),
                                    quant=QuantParams([s], [z])))
            else:
                lo, hi = (float(data.min()), float(data.max())) if data.size else (0.0, 0.0)
                if dt == "int8":
                    lo, hi = _xnnpack_const_range(g, op, k, lo, hi, out_p, params)
                s, z = params_fn(dt)(lo, hi)
                ins.append(q.tensor(src.name, src.shape, dt, data=quantize_array(data, s, z, np.dtype(dt)),
                                    quant=QuantParams([s], [z])))
        outs = [main_tensor(o) for o in op.outputs]
        version = INT16_OPS[op.op] if dt == "int16" else rule.int8_version
        opts = dict(op.options)
        if dt == "int16" and op.op in ("ADD", "SUB"):
            opts["pot_scale_int16"] = False  # general int16 scales (edgerun's and LiteRT's rescaling kernel)
        q.ops.append(Op(op.op, ins, outs, opts, max(op.version, version), op.origin))

    # graph outputs
    for t in g.outputs:
        src = g.tensors[t]
        if t in q_act:
            inner = (main_tensor(t) if tdt.get(t, adt) == adt or t in wide or (t in tdt and io_type == "float32")
                     else as_int8(t, None, adt))
            if inner != main_tensor(t):
                q.rename(main_tensor(t), src.name + "_" + tdt[t])
        elif t in params and io_type != "float32":
            q.rename(main_tensor(t), src.name + "_float")
            inner = as_int8(t)
        else:
            q.outputs.append(main_tensor(t))
            continue
        s, z = float(q.tensors[inner].quant.scale[0]), int(q.tensors[inner].quant.zero_point[0])
        if io_type in ("int8", "int16"):
            q.rename(inner, src.name)
            q.outputs.append(inner)
            continue
        q.rename(inner, src.name + "_" + q.tensors[inner].dtype)
        if io_type == "uint8":
            ext = q.tensor(src.name, src.shape, "uint8", quant=QuantParams([s], [z + 128]))
            q.ops.append(Op("QUANTIZE", [inner], [ext], version=2))
        else:
            ext = q.tensor(src.name, src.shape, "float32")
            q.ops.append(Op("DEQUANTIZE", [inner], [ext], version=2))
        q.outputs.append(ext)
    return q


def tensor_params(g: Graph) -> dict[str, tuple[float, int]]:
    """name -> (scale, zero_point) of every per-tensor quantized activation in ``g``."""
    return {t.name: (float(t.quant.scale[0]), int(t.quant.zero_point[0])) for t in g.tensors
            if t.quant is not None and t.data is None and t.quant.scale.size == 1}


__all__ = ["QuantRule", "RULES", "quantize_graph", "activation_params", "weight_params", "quantize_array", "T"]
