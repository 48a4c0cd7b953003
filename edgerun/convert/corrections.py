"""Weight-side corrections applied to the float graph before quantization.

**Bias correction.** Rounding a layer's weights to int8 shifts the *mean* of its outputs:
``E[Wq x] - E[W x] = (Wq - W) E[x]``. Per-channel symmetric weights keep the shift small for
wide layers, but a depthwise filter has only 9 taps per channel and its rounding errors do not
average out, so every later layer sees a systematic offset. The correction subtracts the expected
shift from the bias: ``b' = b - (deq(Wq) - W) . E[x]``, with ``E[x]`` the per-channel mean of the
layer's input over calibration samples (spatial positions averaged; padding, which reads zeros,
is ignored: its share is small for 3x3 kernels on feature maps larger than a few pixels).

Applied to CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED that have a constant float bias; the
weights are quantized exactly as :func:`edgerun.convert.quantize.weight_params` will.
"""

from __future__ import annotations

import numpy as np

#: calibration samples the input means are taken over
MEAN_SAMPLES = 32


def _layers(g):
    from edgerun.convert.quantize import RULES, float_ops

    fops = float_ops(g)
    for i, op in enumerate(g.ops):
        if i in fops or op.op not in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            continue
        rule = RULES[op.op]
        if rule.bias_input is None or len(op.inputs) <= rule.bias_input or op.inputs[rule.bias_input] < 0:
            continue
        w, b, x = (g.tensors[op.inputs[k]] for k in (rule.weight_input, rule.bias_input, 0))
        if w.data is None or b.data is None or x.data is not None or w.data.dtype.kind != "f" \
                or b.data.dtype.kind != "f" or op.options.get("keep_num_dims"):
            continue
        yield op, rule, w, b, x


def input_means(g, float_bytes: bytes, source, indices) -> dict[str, np.ndarray]:
    """Per-channel (last axis) mean of every corrected layer's input over ``source[indices]``."""
    from edgerun.litert import make_interpreter

    names = {x.name for _, _, _, _, x in _layers(g)}
    if not names:
        return {}
    it = make_interpreter(float_bytes, xnnpack=False, preserve_all=True)
    it.allocate_tensors()
    det = {d["name"]: d["index"] for d in it.get_tensor_details() if d["name"] in names}
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    idx = list(indices)
    if len(idx) > MEAN_SAMPLES:
        idx = [idx[int(k)] for k in np.linspace(0, len(idx) - 1, MEAN_SAMPLES).round()]
    for i in idx:
        for d, x in zip(it.get_input_details(), source.sample(i)):
            it.set_tensor(d["index"], np.ascontiguousarray(x, np.float32))
        it.invoke()
        for n, k in det.items():
            a = it.get_tensor(k).astype(np.float64)
            a = a.reshape(-1, a.shape[-1])
            sums[n] = sums.get(n, 0.0) + a.sum(0)
            counts[n] = counts.get(n, 0) + a.shape[0]
    return {n: sums[n] / counts[n] for n in sums}


def bias_correction(g, means: dict[str, np.ndarray]) -> dict:
    """A copy-on-write correction: returns {bias tensor index: corrected bias} for ``g`` (apply
    with :func:`apply`), so the caller can score the model with and without it."""
    from edgerun.convert.quantize import weight_params

    out = {}
    for op, rule, w, b, x in _layers(g):
        m = means.get(x.name)
        if m is None:
            continue
        W = w.data.astype(np.float64)
        s, q = weight_params(w.data, rule.weight_axis)
        shp = [1] * W.ndim
        shp[rule.weight_axis] = -1
        dW = q.astype(np.float64) * s.astype(np.float64).reshape(shp) - W
        if op.op == "FULLY_CONNECTED":  # [O, I]
            if dW.shape[1] != m.size:
                continue
            shift = dW @ m
        elif op.op == "CONV_2D":  # [O, KH, KW, I]
            if dW.shape[-1] != m.size:
                continue
            shift = dW.sum(axis=(1, 2)) @ m
        else:  # DEPTHWISE_CONV_2D [1, KH, KW, C*mult]
            c = dW.shape[-1]
            mult = c // m.size if m.size and c % m.size == 0 else 0
            if not mult:
                continue
            shift = dW.sum(axis=(0, 1, 2)) * np.repeat(m, mult)
        if shift.shape != b.data.shape:
            continue
        out[op.inputs[rule.bias_input]] = (b.data.astype(np.float64) - shift).astype(b.data.dtype)
    return out


def apply(g, corrected: dict) -> dict:
    """Set the corrected biases in ``g``; returns the old ones (to undo)."""
    old = {}
    for t, data in corrected.items():
        old[t] = g.tensors[t].data
        g.tensors[t].data = data
    return old
