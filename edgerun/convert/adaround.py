"""``--optimize``: learned weight rounding (AdaRound, Nagel et al. 2020, "Up or Down? Adaptive
Rounding for Post-Training Quantization"), layer by layer, in numpy.

Rounding every weight to its nearest int8 step minimises each weight's own error, not the
layer's output error: two weights that both round up may add their errors where one up and one
down would cancel. For each CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED layer with constant
float weights, with ``s`` the per-channel scale :func:`edgerun.convert.quantize.weight_params`
gives and ``W / s = floor + r``, the learned weights are ``s * (floor + h(V))`` with
``h(V) = clip(sigmoid(V) * 1.2 - 0.1, 0, 1)`` (the rectified sigmoid), ``V`` initialised so that
``h = r``, and ``V`` is trained with Adam to minimise

    ||X (W_soft - W)^T||^2 / ||X W^T||^2  +  lam * mean(1 - |2 h - 1|^beta)

over the layer's float inputs ``X`` on calibration samples (im2col patches; only ``X^T X`` is
kept, so the cost per step is independent of the sample count). The regulariser, off for the
first WARMUP of the steps, pushes each ``h`` to 0 or 1 while ``beta`` anneals from 20 to 2; the
weights are then rounded hard (``h >= 0.5`` up). A layer keeps the learned rounding only when
its output error is below nearest rounding's, and the pipeline keeps the whole result only when
the int8 model's error on calibration samples falls.

The learned int8 values are written back as float weights ``s * q``; since the largest weight of
each channel stays at +-127, ``weight_params`` re-derives the same scale and the same ``q``. When
the range search applied bias correction, the bias is adjusted for the new rounding's mean shift.
Layers whose ``X^T X`` would exceed MAX_K inputs per output are skipped.
"""

from __future__ import annotations

import time

import numpy as np

ZETA, GAMMA = 1.1, -0.1
#: the regulariser's weight, its annealing range, and the share of steps without it
LAMBDA = 0.01
BETA = (20.0, 2.0)
WARMUP = 0.2
#: Adam step size on V (logit space) and the most steps per layer
LR = 0.05
MAX_STEPS = 500
#: calibration samples whose layer inputs make up X (streamed: only X^T X is kept per layer)
SAMPLES = 64
#: patch length (KH * KW * I) above which a layer is skipped (X^T X is K x K float64)
MAX_K = 4608
#: the default time budget in seconds (the CLI's --optimize-seconds)
SECONDS = 60.0
#: ``auto`` conversions run AdaRound without being asked (``optimize=None``) when the model is
#: small enough for it to be cheap and deterministic (a step count, no clock): float work
#: (:func:`edgerun.convert.ranges.float_work`) up to DEFAULT_FLOAT_WORK and learning work
#: (:func:`work`) up to DEFAULT_WORK. MLPerf Tiny (ic 12.5 M / 15 G, vww 7.5 M / 16 G, kws 2.7 M /
#: 0.6 G, ad 0.3 M / 38 G), the digits CNN and PaddleOCR's text-direction classifier (18 M / 5 G)
#: qualify; MediaPipe face detection (31.6 M), palm / pose detection and PP-OCR's detector do not
DEFAULT_FLOAT_WORK = 20e6
DEFAULT_WORK = 40e9


def work(g) -> float:
    """Multiply-accumulates of learning every layer's rounding for MAX_STEPS steps: each step
    multiplies the weight error (O x K) by X^T X (K x K; depthwise: per channel)."""
    total = 0.0
    for _, op, _ in _layers(g):
        w = g.tensors[op.inputs[1]].data
        if op.op == "DEPTHWISE_CONV_2D":
            k = w.shape[1] * w.shape[2]
            total += float(k * k * w.shape[3])
        else:
            k = int(np.prod(w.shape[1:]))
            total += float(k * k * w.shape[0])
    return total * MAX_STEPS


def default_on(g) -> bool:
    """Whether ``auto`` runs AdaRound unasked on ``g`` (DEFAULT_FLOAT_WORK, DEFAULT_WORK)."""
    from edgerun.convert.ranges import float_work

    return float_work(g) <= DEFAULT_FLOAT_WORK and 0 < work(g) <= DEFAULT_WORK


def _layers(g):
    from edgerun.convert.quantize import RULES, float_ops

    fops = float_ops(g)
    for i, op in enumerate(g.ops):
        if i in fops or op.op not in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            continue
        if op.op == "FULLY_CONNECTED" and op.options.get("keep_num_dims"):
            continue
        w, x = g.tensors[op.inputs[1]], g.tensors[op.inputs[0]]
        if w.data is None or w.data.dtype.kind != "f" or x.data is not None or w.data.ndim not in (2, 4):
            continue
        k = int(np.prod(w.data.shape[1:])) if op.op != "DEPTHWISE_CONV_2D" else int(np.prod(w.data.shape[1:3]))
        if k > MAX_K:
            continue
        yield i, op, RULES[op.op]


def _patches(x: np.ndarray, op, kh: int, kw: int) -> np.ndarray:
    """im2col of one NHWC sample [1, H, W, C] -> [positions, KH, KW, C] as the op reads it."""
    from edgerun.schema.tflite import Padding

    o = op.options
    sh, sw = int(o.get("stride_h", 1)), int(o.get("stride_w", 1))
    dh, dw = int(o.get("dilation_h_factor", 1)), int(o.get("dilation_w_factor", 1))
    _, h, w, c = x.shape
    eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if o.get("padding", Padding.SAME) == Padding.SAME:
        oh, ow = -(-h // sh), -(-w // sw)
        ph, pw = max((oh - 1) * sh + eh - h, 0), max((ow - 1) * sw + ew - w, 0)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        oh, ow = (h - eh) // sh + 1, (w - ew) // sw + 1
    cols = np.empty((oh, ow, kh, kw, c), np.float64)
    for a in range(kh):
        for b in range(kw):
            cols[:, :, a, b, :] = x[0, a * dh: a * dh + (oh - 1) * sh + 1: sh, b * dw: b * dw + (ow - 1) * sw + 1: sw, :]
    return cols.reshape(oh * ow, kh, kw, c)


class _Stats:
    """Running X^T X (CONV_2D / FC [K, K]; DEPTHWISE [C, KH*KW, KH*KW]), row count and patch sum."""

    def __init__(self):
        self.xtx, self.n, self.tot, self.in_ch = 0.0, 0, 0.0, None

    def add(self, g, op, x):
        self.in_ch = x.shape[-1]
        xtx, n, tot = _stats(g, op, [x])
        self.xtx, self.n, self.tot = self.xtx + xtx, self.n + n, self.tot + tot * n

    def result(self):
        return self.xtx, self.n, self.tot / max(self.n, 1)


def _stats(g, op, xs):
    """(X^T X, row count, mean patch) for the layer: CONV_2D / FC [K, K]; DEPTHWISE [C, KH*KW, KH*KW]."""
    w = g.tensors[op.inputs[1]].data
    xtx, n, tot = 0.0, 0, 0.0
    for x in xs:
        if op.op == "FULLY_CONNECTED":
            p = x.astype(np.float64).reshape(-1, w.shape[1])
            xtx = xtx + p.T @ p
        elif op.op == "CONV_2D":
            p = _patches(x.astype(np.float64), op, w.shape[1], w.shape[2]).reshape(-1, int(np.prod(w.shape[1:])))
            xtx = xtx + p.T @ p
        else:
            cp = _patches(x.astype(np.float64), op, w.shape[1], w.shape[2])
            p = cp.reshape(cp.shape[0], -1, cp.shape[-1]).transpose(2, 0, 1)  # [C, positions, KH*KW]
            xtx = xtx + np.einsum("cpk,cpl->ckl", p, p)
            p = cp.reshape(cp.shape[0], -1)
        n += p.shape[0] if op.op != "DEPTHWISE_CONV_2D" else cp.shape[0]
        tot = tot + (p.reshape(-1, p.shape[-1]).sum(0) if op.op != "DEPTHWISE_CONV_2D" else cp.sum(0))
    return xtx, n, tot / max(n, 1)


def _flat(w, op):
    """Weights as rows per output channel: [O, K] (DEPTHWISE: [C*mult, KH*KW])."""
    if op.op == "DEPTHWISE_CONV_2D":
        return w.reshape(-1, w.shape[-1]).T
    return w.reshape(w.shape[0], -1)


def _unflat(f, w, op):
    if op.op == "DEPTHWISE_CONV_2D":
        return f.T.reshape(w.shape)
    return f.reshape(w.shape)


class _Layer:
    """The quadratic reconstruction loss of one layer in flat form."""

    def __init__(self, op, w, xtx, in_ch):
        self.dw = op.op == "DEPTHWISE_CONV_2D"
        self.xtx = xtx
        if self.dw:
            mult = w.shape[-1] // in_ch
            self.ch = np.arange(w.shape[-1]) // mult  # input channel of each output channel
        self.W = _flat(w.astype(np.float64), op)

    def grad(self, D):
        """(sum of squared output error, its gradient) for a weight error D (rows as W)."""
        if self.dw:
            G = np.einsum("okl,ol->ok", self.xtx[self.ch], D)
        else:
            G = D @ self.xtx
        return float(np.sum(G * D)), 2.0 * G


def _h(V):
    return np.clip(1.0 / (1.0 + np.exp(-V)) * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)


#: per-channel clipping tried before learning the rounding: scales ``alpha * max|w_c| / 127`` for
#: alpha in 1, 1 - CLIP_STEP, ... (CLIP_STEPS + 1 values), each channel taking the one whose
#: nearest rounding gives the least output error ``d X^T X d^T`` (min/max unless another is lower)
CLIP_STEPS = 20
CLIP_STEP = 0.01


def _row_error(layer: _Layer, D: np.ndarray) -> np.ndarray:
    """Per output channel, the squared output error ``d X^T X d^T`` of weight error rows D."""
    G = np.einsum("okl,ol->ok", layer.xtx[layer.ch], D) if layer.dw else D @ layer.xtx
    return np.sum(G * D, axis=1)


def output_scales(layer: _Layer, scale: np.ndarray) -> np.ndarray:
    """Per-channel weight scales chosen by the layer's output error on the calibration inputs
    (CLIP_STEPS), starting from the min/max ``scale``. A channel's largest weights then clip to
    +-127, so ``weight_params`` re-derives the chosen scale from the weights written back."""
    W = layer.W
    s0 = scale.astype(np.float64)
    best_s = s0.copy()
    best = _row_error(layer, np.clip(np.round(W / s0[:, None]), -127, 127) * s0[:, None] - W)
    for k in range(1, CLIP_STEPS + 1):
        s = s0 * (1.0 - k * CLIP_STEP)
        e = _row_error(layer, np.clip(np.round(W / s[:, None]), -127, 127) * s[:, None] - W)
        better = e < best * (1.0 - 1e-9)
        best = np.where(better, e, best)
        best_s = np.where(better, s, best_s)
    return best_s.astype(np.float32)


def learn_rounding(layer: _Layer, scale: np.ndarray, deadline: float, steps: int | None = None) -> tuple[np.ndarray, dict]:
    """Learned integer weights (rows as layer.W) and what happened; nearest rounding when not better.
    Stops at ``steps`` (MAX_STEPS) or at ``deadline`` (perf_counter), the annealing following whichever is nearer."""
    steps = MAX_STEPS if steps is None else steps
    s = scale.astype(np.float64).reshape(-1, 1)
    W = layer.W
    near = np.clip(np.round(W / s), -127, 127)
    energy = max(layer.grad(W)[0], 1e-30)
    e_near = layer.grad(near * s - W)[0] / energy
    fl = np.floor(W / s)
    r = W / s - fl
    # weights already at the int8 limits keep their nearest value (no room to move)
    # and so does each channel's largest weight (+-127): it sets the scale weight_params re-derives
    free = (fl >= -127) & (fl + 1 <= 127) & (np.abs(near) < 127)
    rr = np.clip(r, 1e-4, 1 - 1e-4)
    V = -np.log((ZETA - GAMMA) / (rr - GAMMA) - 1.0)
    m, v = np.zeros_like(V), np.zeros_like(V)
    b1, b2 = 0.9, 0.999
    t0 = time.perf_counter()
    done = 0
    for k in range(1, steps + 1):
        frac = max(k / steps, (time.perf_counter() - t0) / max(deadline - t0, 1e-6))
        if frac >= 1.0 and k > 1:
            break
        sig = 1.0 / (1.0 + np.exp(-V))
        hv = np.clip(sig * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)
        q = np.where(free, fl + hv, near)
        _, g = layer.grad(q * s - W)
        g_h = g * s / energy
        if frac > WARMUP:
            beta = BETA[0] + (BETA[1] - BETA[0]) * (frac - WARMUP) / (1 - WARMUP)
            u = 2 * hv - 1
            g_h = g_h + LAMBDA / hv.size * (-beta * np.abs(u) ** (beta - 1) * np.sign(u) * 2)
        inside = (hv > 0) & (hv < 1) & free
        g_v = np.where(inside, g_h * sig * (1 - sig) * (ZETA - GAMMA), 0.0)
        m = b1 * m + (1 - b1) * g_v
        v = b2 * v + (1 - b2) * g_v * g_v
        V = V - LR * (m / (1 - b1 ** k)) / (np.sqrt(v / (1 - b2 ** k)) + 1e-12)
        done = k
    q = np.where(free, fl + (_h(V) >= 0.5), near)
    q = np.clip(q, -127, 127)
    e = layer.grad(q * s - W)[0] / energy
    info = {"steps": done, "nearest": e_near, "learned": e}
    return (q if e < e_near else near), info


def optimize(g, float_bytes: bytes, source, indices, *, seconds: float | None = SECONDS, samples: int = SAMPLES,
             bias_corrected: bool = False, progress=None) -> dict:
    """Learn the rounding of ``g``'s layers in place, within ``seconds`` (None: MAX_STEPS a layer,
    no clock, so the same inputs give the same weights); returns a summary.
    ``progress(done, total)`` after each layer."""
    from edgerun.convert.quantize import weight_params
    from edgerun.litert import make_interpreter

    t0 = time.perf_counter()
    layers = list(_layers(g))
    info = {"layers": len(layers), "changed": 0, "skipped_time": 0, "seconds": 0.0}
    if not layers:
        return info
    it = make_interpreter(float_bytes, xnnpack=False, preserve_all=True)
    it.allocate_tensors()
    det = {d["name"]: d["index"] for d in it.get_tensor_details()}
    idx = list(indices)
    if len(idx) > samples:
        idx = [idx[int(k)] for k in np.linspace(0, len(idx) - 1, samples).round()]
    stats = {k: _Stats() for k, (_, op, _) in enumerate(layers) if g.tensors[op.inputs[0]].name in det}
    for i in idx:  # streamed: the statistics take the time of the budget they need, no more memory
        for d, x in zip(it.get_input_details(), source.sample(i)):
            it.set_tensor(d["index"], np.ascontiguousarray(x, np.float32))
        it.invoke()
        for k, st in stats.items():
            op = layers[k][1]
            x = it.get_tensor(det[g.tensors[op.inputs[0]].name])
            w = g.tensors[op.inputs[1]].data
            if op.op == "DEPTHWISE_CONV_2D" and w.shape[-1] % x.shape[-1]:
                continue
            if op.op == "FULLY_CONNECTED" and x.size % w.shape[1]:
                continue
            st.add(g, op, x)
    del it
    gains = []
    for n_done, (_, op, rule) in enumerate(layers):
        now = time.perf_counter()
        left = np.inf if seconds is None else seconds - (now - t0)
        if left <= 0:
            info["skipped_time"] += len(layers) - n_done
            break
        st = stats.get(n_done)
        if st is None or not st.n:
            continue
        wt = g.tensors[op.inputs[1]]
        w = wt.data
        in_ch = st.in_ch
        xtx, _, mean = st.result()
        scale0, q0 = weight_params(w, rule.weight_axis)
        layer = _Layer(op, w, xtx, in_ch)
        scale = output_scales(layer, scale0) if CLIP_STEPS else scale0
        q, li = learn_rounding(layer, scale, now + left / (len(layers) - n_done))
        if np.array_equal(q, _flat(q0.astype(np.float64), op)):
            continue
        s = scale.astype(np.float64).reshape(-1, 1)
        s0 = scale0.astype(np.float64).reshape(-1, 1)
        new = _unflat(q * s, w, op).astype(w.dtype)
        if bias_corrected and len(op.inputs) > 2 and op.inputs[2] >= 0 and g.tensors[op.inputs[2]].data is not None:
            # the bias holds b - (deq(nearest) - W) . E[x]; move it to the learned rounding's shift
            bt = g.tensors[op.inputs[2]]
            old_d = _flat(q0.astype(np.float64), op) * s0 - layer.W
            new_d = q * s - layer.W
            if op.op == "DEPTHWISE_CONV_2D":
                mvec = mean.reshape(-1, in_ch)[:, layer.ch].T  # [C*mult, KH*KW]
                shift = np.sum((old_d - new_d) * mvec, axis=1)
            else:
                shift = (old_d - new_d) @ mean.reshape(-1)
            if shift.shape == bt.data.shape:
                bt.data = (bt.data.astype(np.float64) + shift).astype(bt.data.dtype)
        wt.data = new
        info["changed"] += 1
        gains.append(10 * np.log10(max(li["nearest"], 1e-30) / max(li["learned"], 1e-30)))
        if progress:
            progress(n_done + 1, len(layers))
    if progress:
        progress(len(layers), len(layers))
    info["mean_layer_gain_db"] = round(float(np.mean(gains)), 2) if gains else 0.0
    info["seconds"] = round(time.perf_counter() - t0, 3)
    return info
