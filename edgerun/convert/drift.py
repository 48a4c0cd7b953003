"""How far the int8 model drifts from the float model: per output and, on request, per layer.

* SQNR (dB) = 10 log10(sum ref^2 / sum (ref - q)^2) over all held-back samples (capped at
  ``SQNR_CAP`` when the outputs are identical);
* max abs error, in the output's real units;
* top-1 agreement (%) for classifier-shaped outputs (``[1, C]`` or ``[N, C]`` with C > 1);
* per layer: every int8 activation, dequantized, against the same tensor (same name) of the
  float TFLite graph on the same inputs, so the layer where SQNR falls is the one to look at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SQNR_CAP = 150.0


@dataclass
class _Acc:
    sig: float = 0.0
    err: float = 0.0
    maxabs: float = 0.0
    agree: int = 0
    rows: int = 0
    classifier: bool = False

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        ref = np.asarray(ref, np.float64)
        got = np.asarray(got, np.float64)
        d = ref - got
        self.sig += float(np.sum(ref * ref))
        self.err += float(np.sum(d * d))
        if d.size:
            self.maxabs = max(self.maxabs, float(np.max(np.abs(d))))
        if self.classifier:
            r2 = ref.reshape(-1, ref.shape[-1])
            g2 = got.reshape(-1, got.shape[-1])
            self.agree += int(np.sum(np.argmax(r2, -1) == np.argmax(g2, -1)))
            self.rows += r2.shape[0]

    @property
    def sqnr(self) -> float:
        if self.err <= 0:
            return SQNR_CAP
        if self.sig <= 0:
            return -SQNR_CAP
        return float(min(SQNR_CAP, 10 * np.log10(self.sig / self.err)))


def is_classifier(shape) -> bool:
    shape = tuple(shape)
    return len(shape) >= 2 and shape[-1] > 1 and int(np.prod(shape[:-1])) == shape[0] and len(shape) <= 2


@dataclass
class OutputDrift:
    name: str
    shape: list
    sqnr_db: float
    max_abs_err: float
    top1_agreement: float | None = None
    samples: int = 0

    def to_dict(self):
        return {"name": self.name, "shape": self.shape, "sqnr_db": round(self.sqnr_db, 2),
                "max_abs_err": float(f"{self.max_abs_err:.6g}"),
                "top1_agreement": None if self.top1_agreement is None else round(self.top1_agreement, 2),
                "samples": self.samples}


@dataclass
class LayerDrift:
    index: int
    op: str
    tensor: str
    sqnr_db: float
    origin: str = ""
    float_kept: bool = False
    #: dB this layer loses against its own inputs (their lowest SQNR minus its SQNR); None when no
    #: input was measured (it reads the model input)
    loss_db: float | None = None
    #: the first layer, in graph order, where the error enters (see :func:`mark_entry`)
    entry: bool = False

    def to_dict(self):
        return {"index": self.index, "op": self.op, "tensor": self.tensor, "sqnr_db": round(self.sqnr_db, 2),
                "origin": self.origin, "float": self.float_kept,
                "loss_db": None if self.loss_db is None else round(self.loss_db, 2), "error_enters": self.entry}


#: a layer "lets the error in" when it loses at least this much against its inputs...
ENTRY_LOSS_DB = 6.0
#: ... and ends below this SQNR (a drop from 150 dB to 60 dB is not where an accuracy problem starts)
ENTRY_BELOW_DB = 40.0


def _dequant(detail: dict, y: np.ndarray) -> np.ndarray:
    if y.dtype.kind == "f":
        return y.astype(np.float32)
    qp = detail.get("quantization_parameters") or {}
    scales = np.asarray(qp.get("scales", []), np.float32)
    zps = np.asarray(qp.get("zero_points", []), np.float32)
    if scales.size == 0:
        s, z = detail["quantization"]
        return (y.astype(np.float32) - z) * np.float32(s)
    if scales.size == 1:
        return (y.astype(np.float32) - zps[0]) * scales[0]
    ax = int(qp.get("quantized_dimension", 0))
    shp = [1] * y.ndim
    shp[ax] = -1
    return (y.astype(np.float32) - zps.reshape(shp)) * scales.reshape(shp)


def _quant_input(detail: dict, x: np.ndarray) -> np.ndarray:
    dt = np.dtype(detail["dtype"])
    if dt.kind == "f":
        return x.astype(dt)
    s, z = detail["quantization"]
    info = np.iinfo(dt)
    v = np.asarray(x, np.float64) / s
    q = np.sign(v) * np.floor(np.abs(v) + 0.5) + z  # round half away from zero, as QUANTIZE does
    return np.clip(q, info.min, info.max).astype(dt)


class Int8Runner:
    """The int8 model on a kernel path; float inputs in, dequantized float outputs out.

    kernels: ``"litert"`` (LiteRT's optimized kernels), ``"edgerun"`` (edgerun's own kernels,
    bit-exact with LiteRT's reference kernels: what edgerun and the firmware compute) or
    ``"xnnpack"`` (LiteRT with its XNNPACK delegate, as a Raspberry Pi runs it).
    """

    def __init__(self, model: bytes, preserve_all: bool = False, kernels: str = "litert"):
        from edgerun.litert import make_interpreter
        if kernels == "edgerun" and not preserve_all:
            from edgerun.runtime.interpreter import Interpreter
            self.it = Interpreter(model_content=model)
        else:
            self.it = make_interpreter(model, xnnpack=kernels == "xnnpack", preserve_all=preserve_all)
        self.it.allocate_tensors()
        self.ins = self.it.get_input_details()
        self.outs = self.it.get_output_details()

    def __call__(self, sample: list[np.ndarray]) -> list[np.ndarray]:
        for d, x in zip(self.ins, sample):
            self.it.set_tensor(d["index"], _quant_input(d, x))
        self.it.invoke()
        return [_dequant(d, self.it.get_tensor(d["index"])) for d in self.outs]


def output_drift(reference, int8_model: bytes, source, indices, out_names, progress=None,
                 kernels: str = "litert") -> list[OutputDrift]:
    """Compare ``reference(sample) -> float outputs`` with the int8 model on ``source[indices]``
    (run on ``kernels``, see :class:`Int8Runner`)."""
    run = Int8Runner(int8_model, kernels=kernels)
    accs: list[_Acc] | None = None
    shapes = None
    indices = list(indices)
    for k, i in enumerate(indices):
        sample = source.sample(i)
        ref = reference(sample)
        got = run(sample)
        if accs is None:
            shapes = [list(r.shape) for r in ref]
            accs = [_Acc(classifier=is_classifier(r.shape)) for r in ref]
        for a, r, g in zip(accs, ref, got):
            a.add(r, g.reshape(r.shape))
        if progress:
            progress(k + 1, len(indices))
    accs = accs or []
    return [OutputDrift(n, s, a.sqnr, a.maxabs, 100.0 * a.agree / a.rows if a.classifier and a.rows else None,
                        len(indices)) for n, s, a in zip(out_names, shapes or [], accs)]


def layer_drift(float_model: bytes, int8_model: bytes, source, indices, progress=None,
                kept_float: set[str] | frozenset = frozenset()) -> list[LayerDrift]:
    """Per-layer SQNR: each int8 op output against the float graph's tensor of the same name."""
    from edgerun.litert import make_interpreter
    from edgerun.schema.reader import read_model

    fit = make_interpreter(float_model, xnnpack=False, preserve_all=True)
    fit.allocate_tensors()
    qrun = Int8Runner(int8_model, preserve_all=True)
    f_by_name = {d["name"]: d for d in fit.get_tensor_details()}
    q_details = {d["index"]: d for d in qrun.it.get_tensor_details()}
    qm = read_model(int8_model)
    layers = []
    for oi, op in enumerate(qm.main.operators):
        name = qm.op_name(op)
        if name in ("QUANTIZE", "DEQUANTIZE"):
            continue
        t = op.outputs[0]
        tn = qm.main.tensors[t].name
        if tn in f_by_name:
            layers.append((oi, name, t, tn))
    accs = {t: _Acc() for _, _, t, _ in layers}
    indices = list(indices)
    for k, i in enumerate(indices):
        sample = source.sample(i)
        for d, x in zip(fit.get_input_details(), sample):
            fit.set_tensor(d["index"], x.astype(np.float32))
        fit.invoke()
        qrun(sample)
        for _, _, t, tn in layers:
            ref = fit.get_tensor(f_by_name[tn]["index"])
            got = _dequant(q_details[t], qrun.it.get_tensor(t))
            accs[t].add(ref, got.reshape(ref.shape))
        if progress:
            progress(k + 1, len(indices))
    out = [LayerDrift(oi, name, tn, accs[t].sqnr, float_kept=tn in kept_float) for oi, name, t, tn in layers]
    # each layer's loss against the measured layers that feed it (through QUANTIZE / DEQUANTIZE too)
    names = [t.name for t in qm.main.tensors]
    feeds: dict[str, list[str]] = {}
    producer_of = {}
    for op in qm.main.operators:
        for o in op.outputs:
            producer_of[names[o]] = op
    by_tensor = {ld.tensor: ld for ld in out}

    def measured_inputs(op, depth=0):
        res = []
        for i in op.inputs:
            if i < 0:
                continue
            n = names[i]
            if n in by_tensor:
                res.append(n)
            elif n in producer_of and depth < 4 and qm.op_name(producer_of[n]) in ("QUANTIZE", "DEQUANTIZE"):
                res += measured_inputs(producer_of[n], depth + 1)
        return res
    for oi, _, _, tn in layers:
        feeds[tn] = measured_inputs(qm.main.operators[oi])
    for ld in out:
        ins = [by_tensor[n].sqnr_db for n in feeds.get(ld.tensor, [])]
        ld.loss_db = (min(ins) - ld.sqnr_db) if ins else None
    mark_entry(out)
    return out


def mark_entry(layers: list[LayerDrift]) -> LayerDrift | None:
    """Mark the layer where the error enters: the first, in graph order, that loses at least
    ``ENTRY_LOSS_DB`` against its inputs and ends below ``ENTRY_BELOW_DB`` (a layer reading the
    model input counts its whole drop from the cap); failing that, the first layer below
    ``ENTRY_BELOW_DB``. Layers kept in float are skipped."""
    for ld in layers:
        ld.entry = False
    cands = [ld for ld in layers if not ld.float_kept and ld.sqnr_db < ENTRY_BELOW_DB]
    for ld in cands:
        loss = ld.loss_db if ld.loss_db is not None else SQNR_CAP - ld.sqnr_db
        if loss >= ENTRY_LOSS_DB:
            ld.entry = True
            return ld
    if cands:
        cands[0].entry = True
        return cands[0]
    return None


def tensor_sqnr(float_model: bytes, int8_model: bytes, source, indices, names) -> dict[str, float]:
    """SQNR of the named tensors of the int8 model (dequantized, LiteRT's kernels, all tensors
    kept) against the float model's tensors of the same name; names missing in either are left out."""
    from edgerun.litert import make_interpreter

    fit = make_interpreter(float_model, xnnpack=False, preserve_all=True)
    fit.allocate_tensors()
    qrun = Int8Runner(int8_model, preserve_all=True)
    f_by = {d["name"]: d for d in fit.get_tensor_details()}
    q_by = {d["name"]: d for d in qrun.it.get_tensor_details()}
    names = [n for n in names if n in f_by and n in q_by]
    accs = {n: _Acc() for n in names}
    for i in indices:
        sample = source.sample(i)
        for d, x in zip(fit.get_input_details(), sample):
            fit.set_tensor(d["index"], np.asarray(x, np.float32))
        fit.invoke()
        qrun(sample)
        for n in names:
            ref = fit.get_tensor(f_by[n]["index"])
            got = _dequant(q_by[n], qrun.it.get_tensor(q_by[n]["index"]))
            accs[n].add(ref, got.reshape(ref.shape))
    return {n: a.sqnr for n, a in accs.items()}


def float_candidates(layers: list[LayerDrift], g, exclude: set[str], k: int = 3) -> list[list[str]]:
    """Up to ``k`` sets of op outputs (tensor names) to try keeping in float, most promising first.

    A layer's loss is its inputs' SQNR minus its output's SQNR (dB): error it adds, not error it
    inherits. For each of the ``k`` worst layers two candidates are tried: the layer alone, and
    the layer with the producers of its activation inputs, because much of the error is often
    made when its *input* is quantized (an outlier channel coarsens one per-tensor scale for all
    channels) and then the tensor between them must stay float.
    """
    by_name = {ld.tensor: ld for ld in layers}
    prod = {g.tensors[o].name: op for op in g.ops for o in op.outputs}
    scored = []
    for ld in layers:
        if ld.tensor not in prod:
            continue
        op = prod[ld.tensor]
        in_names = [g.tensors[i].name for i in op.inputs if i >= 0 and g.tensors[i].data is None]
        in_sqnr = [by_name[n].sqnr_db for n in in_names if n in by_name]
        base = min(in_sqnr) if in_sqnr else SQNR_CAP
        loss = min(base, SQNR_CAP) - ld.sqnr_db
        group = [ld.tensor] + [n for n in in_names if n in prod]
        group = [n for n in group if n not in exclude]
        if group:
            scored.append((-loss, ld.index, group))
    scored.sort(key=lambda s: (s[0], s[1]))
    out = []
    for _, _, group in scored[:k]:
        for cand in ([group[0]], group):
            if cand not in out:
                out.append(cand)
    return out


@dataclass
class Budget:
    """``--max-drop``: ``N%`` (top-1 agreement lost, or relative RMS error for other outputs) or ``NdB``
    (every output's SQNR at least N dB)."""

    text: str
    kind: str = field(default="pct")
    value: float = 1.0

    @classmethod
    def parse(cls, text) -> "Budget":
        from edgerun.errors import ConversionError
        s = str(text).strip().lower().replace(" ", "")
        try:
            if s.endswith("db"):
                return cls(str(text), "db", float(s[:-2]))
            if s.endswith("%"):
                return cls(str(text), "pct", float(s[:-1]))
            if s.endswith("pct"):
                return cls(str(text), "pct", float(s[:-3]))
        except ValueError:
            pass
        raise ConversionError(f"--max-drop {text!r}: give a percentage (1%: top-1 agreement lost) or decibels "
                              "(40dB: the minimum output SQNR)")

    def met(self, outputs: list[OutputDrift]) -> bool:
        return all(self.shortfall(o) <= 0 for o in outputs)

    def total_shortfall(self, outputs: list[OutputDrift]) -> float:
        return sum(max(self.shortfall(o), 0.0) for o in outputs)

    def shortfall(self, o: OutputDrift) -> float:
        if self.kind == "db":
            return self.value - o.sqnr_db
        if o.top1_agreement is not None:
            return (100.0 - o.top1_agreement) - self.value
        return 100.0 * 10 ** (-o.sqnr_db / 20) - self.value
