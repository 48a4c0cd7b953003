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


# --- empirical bias correction -------------------------------------------------------------------

#: calibration samples the int8 and float models are compared on
EMPIRICAL_SAMPLES = 32
#: fused activations whose output equals the pre-activation where it is not clamped:
#: NONE, RELU, RELU_N1_TO_1, RELU6 -> the clamp (lo, hi)
_CLAMPS = {0: (-np.inf, np.inf), 1: (0.0, np.inf), 2: (-1.0, 1.0), 3: (0.0, 6.0)}
#: a value counts as unclamped when its float value is this many int8 steps inside the clamp
MARGIN = 3.0
#: a channel needs this many unclamped values (over samples and positions) to be corrected
MIN_COUNT = 16


def _input_shift(op, W: np.ndarray, axis: int, e_in: np.ndarray) -> np.ndarray | None:
    """The mean output shift a per-channel mean input error ``e_in`` causes through weights ``W``
    (the layer's linear part; padding ignored as in :func:`bias_correction`)."""
    if op.op == "FULLY_CONNECTED":
        return W @ e_in if W.shape[1] == e_in.size else None
    if op.op == "CONV_2D":
        return W.sum(axis=(1, 2)) @ e_in if W.shape[-1] == e_in.size else None
    c = W.shape[-1]
    mult = c // e_in.size if e_in.size and c % e_in.size == 0 else 0
    return W.sum(axis=(0, 1, 2)) * np.repeat(e_in, mult) if mult else None


def empirical_correction(g, ranges: dict, float_bytes: bytes, source, indices,
                         samples: int = EMPIRICAL_SAMPLES) -> dict:
    """Bias correction measured on the int8 model itself (copy-on-write, as :func:`bias_correction`).

    The analytic correction removes the mean shift of weight rounding only. The int8 model's
    layers are also shifted by activation rounding and clipping, by requantization and by the
    fixed-point kernels. Here the int8 model built from ``g`` and ``ranges`` and the float model
    ``float_bytes`` run the same calibration samples. For each CONV_2D / DEPTHWISE_CONV_2D /
    FULLY_CONNECTED with a constant bias, the per-channel mean of (int8 - float) is taken at its
    output, over the values the fused activation does not clamp (float value at least ``MARGIN``
    int8 steps inside the clamp: there the output equals the pre-activation). The part its input's own mean error explains (``W . E[e_in]``) is
    removed, since the layers upstream are corrected too. What is left, the error this layer adds,
    is subtracted from its bias. One call is one pass; the caller scores it and may call again.
    """
    from edgerun.convert.drift import Int8Runner, _dequant
    from edgerun.convert.quantize import quantize_graph
    from edgerun.litert import make_interpreter

    layers = [(op, rule, w, b, x) for op, rule, w, b, x in _layers(g)
              if op.options.get("fused_activation_function", 0) in _CLAMPS]
    if not layers:
        return {}
    q = quantize_graph(g, ranges, io_type="float32", wide_softmax=True).to_bytes("edgerun bias correction")
    fit = make_interpreter(float_bytes, xnnpack=False, preserve_all=True)
    fit.allocate_tensors()
    qrun = Int8Runner(q, preserve_all=True)
    f_idx = {d["name"]: d["index"] for d in fit.get_tensor_details()}
    q_det = {d["name"]: d for d in qrun.it.get_tensor_details()}
    wanted = []
    for op, rule, w, b, x in layers:
        y = g.tensors[op.outputs[0]].name
        if y in f_idx and y in q_det and x.name in f_idx and x.name in q_det:
            wanted.append((op, rule, w, b, x.name, y))
    if not wanted:
        return {}
    names = {n for *_, xn, yn in wanted for n in (xn, yn)}
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, np.ndarray] = {}
    all_sums: dict[str, np.ndarray] = {}  # every value: what a layer's input error passes on
    all_counts: dict[str, int] = {}
    idx = list(indices)
    if len(idx) > samples:
        idx = [idx[int(k)] for k in np.linspace(0, len(idx) - 1, samples).round()]
    clamp_of = {yn: _CLAMPS[op.options.get("fused_activation_function", 0)] for op, *_, yn in wanted}
    for i in idx:
        smp = source.sample(i)
        for d, v in zip(fit.get_input_details(), smp):
            fit.set_tensor(d["index"], np.ascontiguousarray(v, np.float32))
        fit.invoke()
        qrun(smp)
        for n in names:
            f = fit.get_tensor(f_idx[n]).astype(np.float64)
            d = q_det[n]
            qv = _dequant(d, qrun.it.get_tensor(d["index"])).astype(np.float64).reshape(f.shape)
            f, qv = f.reshape(-1, f.shape[-1]), qv.reshape(-1, f.shape[-1])
            lo, hi = clamp_of.get(n, (-np.inf, np.inf))
            if np.isfinite([lo, hi]).any():  # the float value well inside the clamp, by MARGIN steps
                # (selecting on the int8 value too would bias the mean: near the clamp only the
                # errors pointing away from it would pass)
                step = MARGIN * float(d["quantization"][0] or 0.0)
                m = (f > lo + step) & (f < hi - step)
            else:
                m = np.ones(f.shape, bool)
            sums[n] = sums.get(n, 0.0) + np.where(m, qv - f, 0.0).sum(0)
            counts[n] = counts.get(n, 0) + m.sum(0)
            all_sums[n] = all_sums.get(n, 0.0) + (qv - f).sum(0)
            all_counts[n] = all_counts.get(n, 0) + f.shape[0]
    out = {}
    for op, rule, w, b, xn, yn in wanted:
        cnt = counts[yn]
        e_out = np.where(cnt >= MIN_COUNT, sums[yn] / np.maximum(cnt, 1), 0.0)
        e_in = all_sums[xn] / max(all_counts[xn], 1)
        s, qw = weight_params_of(w.data, rule.weight_axis)
        shp = [1] * qw.ndim
        shp[rule.weight_axis] = -1
        Wq = qw.astype(np.float64) * s.astype(np.float64).reshape(shp)
        through = _input_shift(op, Wq, rule.weight_axis, e_in)
        if through is None or through.shape != e_out.shape or e_out.shape != b.data.shape:
            continue
        local = np.where(cnt >= MIN_COUNT, e_out - through, 0.0)
        if not np.any(local):
            continue
        out[op.inputs[rule.bias_input]] = (b.data.astype(np.float64) - local).astype(b.data.dtype)
    return out


def weight_params_of(w: np.ndarray, axis: int):
    from edgerun.convert.quantize import weight_params

    return weight_params(w, axis)
