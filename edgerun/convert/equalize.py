"""Cross-layer equalization (Nagel et al. 2019, "Data-Free Quantization through Weight Equalization
and Bias Correction") on the float graph, before calibration.

For two layers in a chain ``y = W2 . act(W1 x + b1)`` where ``act`` is positively homogeneous
(no activation, or ReLU: ``act(x / s) = act(x) / s`` for ``s > 0``), dividing output channel ``i``
of layer 1 (weights and bias) by ``s_i`` and multiplying input channel ``i`` of layer 2's weights by
``s_i`` leaves the float outputs unchanged. With ``r1_i`` the range (max |w|) of layer 1's output
channel ``i`` and ``r2_i`` that of layer 2's input channel ``i``, ``s_i = sqrt(r1_i * r2_i) / r2_i``
gives both the same range ``sqrt(r1_i * r2_i)``: a depthwise filter whose channels span
several orders of magnitude no longer sets a coarse per-channel scale next to a fine one in the
following layer. A few sweeps over the chain let longer chains (pw -> dw -> pw) settle.

**ReLU6 is skipped**: ``min(x, 6)`` is not scale-equivariant, and rescaling would need the clamp
moved to ``6 / s_i`` per channel, which a fused RELU6 cannot express. So pairs whose first layer
carries a fused RELU6 (or RELU_N1_TO_1) are left alone; MobileNet-style graphs with ReLU6 gain
nothing here.

Pairs: first layer CONV_2D or DEPTHWISE_CONV_2D, second CONV_2D, DEPTHWISE_CONV_2D or
FULLY_CONNECTED (when its input size is the channel count), the tensor between them read by the
second layer only and not a graph output, weights constant float and not shared with another op.
The pipeline keeps the result only when the int8 model's error on calibration samples falls.
"""

from __future__ import annotations

import copy

import numpy as np

#: sweeps over all pairs
SWEEPS = 8
#: a scale never moves a channel by more than this factor (per sweep)
MAX_SCALE = 1e3
#: fused activations through which a positive channel scale passes unchanged: NONE, RELU
EQUIVARIANT = (0, 1)


def _weight(g, op):
    return g.tensors[op.inputs[1]]


def pairs(g) -> list[tuple[int, int]]:
    """(first op index, second op index) of the chains that can be equalized."""
    consumers = g.consumers()
    producers = g.producers()
    users: dict[int, int] = {}
    for op in g.ops:
        for t in op.inputs:
            if t >= 0:
                users[t] = users.get(t, 0) + 1
    out = []
    for i, op in enumerate(g.ops):
        if op.op not in ("CONV_2D", "DEPTHWISE_CONV_2D") or len(op.outputs) != 1:
            continue
        if op.options.get("fused_activation_function", 0) not in EQUIVARIANT:
            continue
        mid = op.outputs[0]
        if mid in g.outputs or len(consumers.get(mid, [])) != 1:
            continue
        j = consumers[mid][0]
        nxt = g.ops[j]
        if nxt.op not in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED") or nxt.inputs[0] != mid:
            continue
        if nxt.op == "FULLY_CONNECTED" and nxt.options.get("keep_num_dims"):
            continue
        ok = True
        for o in (op, nxt):
            w = g.tensors[o.inputs[1]]
            if w.data is None or w.data.dtype.kind != "f" or users.get(o.inputs[1]) != 1 or o.inputs[1] in producers:
                ok = False
            if len(o.inputs) > 2 and o.inputs[2] >= 0:
                b = g.tensors[o.inputs[2]]
                if b.data is None or b.data.dtype.kind != "f" or users.get(o.inputs[2]) != 1:
                    ok = False
        if not ok:
            continue
        c = _out_channels(g, op)
        if c is None or _in_ranges(g, nxt, c) is None:
            continue
        out.append((i, j))
    return out


def _out_channels(g, op):
    w = _weight(g, op).data
    c = w.shape[0] if op.op == "CONV_2D" else w.shape[-1]
    shp = g.tensors[op.outputs[0]].shape
    return c if shp and shp[-1] == c else None


def _out_ranges(g, op) -> np.ndarray:
    w = np.abs(_weight(g, op).data.astype(np.float64))
    return w.reshape(w.shape[0], -1).max(1) if op.op == "CONV_2D" else w.reshape(-1, w.shape[-1]).max(0)


def _in_ranges(g, op, c):
    w = np.abs(_weight(g, op).data.astype(np.float64))
    if op.op == "CONV_2D":  # [O, KH, KW, I]
        return w.reshape(-1, w.shape[-1]).max(0) if w.shape[-1] == c else None
    if op.op == "FULLY_CONNECTED":  # [O, I]
        return w.max(0) if w.ndim == 2 and w.shape[1] == c else None
    # DEPTHWISE_CONV_2D [1, KH, KW, C*mult]: input channel i feeds outputs i*mult .. i*mult+mult-1
    if w.shape[-1] % c:
        return None
    return w.reshape(-1, c, w.shape[-1] // c).max(axis=(0, 2))


def _scale_out(g, op, s):
    t = _weight(g, op)
    w = t.data.astype(np.float64)
    if op.op == "CONV_2D":
        w = w / s.reshape(-1, 1, 1, 1)
    else:
        w = w / s.reshape(1, 1, 1, -1)
    t.data = w.astype(t.data.dtype)
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        b = g.tensors[op.inputs[2]]
        b.data = (b.data.astype(np.float64) / s).astype(b.data.dtype)


def _scale_in(g, op, s):
    t = _weight(g, op)
    w = t.data.astype(np.float64)
    if op.op == "CONV_2D":
        w = w * s.reshape(1, 1, 1, -1)
    elif op.op == "FULLY_CONNECTED":
        w = w * s.reshape(1, -1)
    else:
        mult = w.shape[-1] // s.size
        w = w * np.repeat(s, mult).reshape(1, 1, 1, -1)
    t.data = w.astype(t.data.dtype)


def equalize(g, sweeps: int = SWEEPS) -> int:
    """Equalize ``g`` in place; returns the number of pairs rescaled (0: nothing to do)."""
    found = pairs(g)
    for _ in range(sweeps):
        moved = 0.0
        for i, j in found:
            a, b = g.ops[i], g.ops[j]
            c = _out_channels(g, a)
            r1, r2 = _out_ranges(g, a), _in_ranges(g, b, c)
            s = np.ones(c)
            # dead channels (a range below 1e-6 of the layer's largest) stay as they are: balancing
            # them would scale by up to MAX_SCALE per sweep for nothing (MLPerf Tiny vww has some)
            ok = (r1 > 1e-6 * r1.max(initial=0.0)) & (r2 > 1e-6 * r2.max(initial=0.0))
            s[ok] = np.sqrt(r1[ok] * r2[ok]) / r2[ok]
            s = np.clip(s, 1 / MAX_SCALE, MAX_SCALE)
            _scale_out(g, a, s)
            _scale_in(g, b, s)
            moved = max(moved, float(np.max(np.abs(np.log(s)))) if s.size else 0.0)
        if moved < 1e-3:
            break
    return len(found)


def rescaled_tensors(g) -> set[str]:
    """Names of the activation tensors whose values equalization rescales: the output of each
    pair's first layer (every other tensor is the same up to float rounding)."""
    return {g.tensors[g.ops[i].outputs[0]].name for i, _ in pairs(g)}


def equalized_copy(g):
    """(a deep copy of ``g`` equalized, pairs) or (None, 0) when ``g`` has no pair to equalize."""
    if not pairs(g):
        return None, 0
    g2 = copy.deepcopy(g)
    return g2, equalize(g2)


def int8_error(g, ranges, float_bytes: bytes, source, indices, samples: int = 32, activations: str = "int8",
               flips: list | None = None, **quantize_kw) -> float:
    """The int8 model's error on up to ``samples`` of ``source[indices]``: the worst output's
    squared error relative to its float energy (lower is better). ``quantize_kw`` go to
    :func:`edgerun.convert.quantize.quantize_graph` (``wide_input``, ``wide_head``). ``flips``: a
    list that gets, per sample, whether a top-1 (argmax of an output of 2+ values) differs from
    the float model's."""
    from edgerun.convert.drift import Int8Runner
    from edgerun.convert.quantize import quantize_graph
    from edgerun.litert import make_interpreter

    idx = list(indices)
    if len(idx) > samples:
        idx = [idx[int(k)] for k in np.linspace(0, len(idx) - 1, samples).round()]
    ref = make_interpreter(float_bytes, xnnpack=False)
    ref.allocate_tensors()
    run = Int8Runner(quantize_graph(g, ranges, io_type="float32", activations=activations,
                                    wide_softmax=True, **quantize_kw).to_bytes("edgerun equalize"))
    err, sig = None, None
    for i in idx:
        smp = source.sample(i)
        for d, x in zip(ref.get_input_details(), smp):
            ref.set_tensor(d["index"], np.ascontiguousarray(x, np.float32))
        ref.invoke()
        refs = [ref.get_tensor(d["index"]).astype(np.float64) for d in ref.get_output_details()]
        outs = run(smp)
        if err is None:
            err, sig = [0.0] * len(refs), [0.0] * len(refs)
        if flips is not None:
            flips.append(sum(r.size > 1 and int(np.argmax(o)) != int(np.argmax(r)) for o, r in zip(outs, refs)) > 0)
        for k, (o, r) in enumerate(zip(outs, refs)):
            d = o.astype(np.float64).reshape(r.shape) - r
            err[k] += float(np.sum(d * d))
            sig[k] += float(np.sum(r * r))
    if err is None:
        return float("inf")
    return max(e / (s or 1.0) for e, s in zip(err, sig))
