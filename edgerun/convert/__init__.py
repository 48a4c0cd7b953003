"""``edgerun convert``: ONNX or float TFLite -> full-integer int8 TFLite (or float32 with ``float_only``).

>>> from edgerun.convert import convert
>>> report = convert("model.onnx", "model_int8.tflite", calib="calib.npz")   # doctest: +SKIP
>>> print(report.format())                                                     # doctest: +SKIP

Pipeline: frontend (``onnx_frontend`` / ``tflite_frontend``) -> float graph -> calibration
(``calibrate``, cached) -> ``quantize`` -> drift report (``drift``) against the float model run
by its own runtime (ONNX Runtime for ONNX, LiteRT for TFLite) on held-back calibration samples.
The same inputs give byte-identical output.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgerun.errors import ConversionError

__all__ = ["convert", "ConversionReport", "FULL_INT8_TARGETS"]

#: targets whose runtime needs every op in int8 (no float fallback): EdgeTPU and microcontrollers
FULL_INT8_TARGETS = ("coral", "edgetpu", "mcu")

CONVERT_METADATA = "edgerun.convert"


@dataclass
class ConversionReport:
    source: str
    output: str | None
    mode: str  # "int8" or "float32"
    io_type: str = "int8"
    calib_method: str | None = None
    calibration: dict = field(default_factory=dict)
    outputs: list = field(default_factory=list)  # OutputDrift
    layers: list = field(default_factory=list)  # LayerDrift (per_layer)
    kept_float: list = field(default_factory=list)  # tensor names kept in float for --max-drop
    float_ops: list = field(default_factory=list)  # op types that run in float in the result
    budget: str | None = None
    budget_met: bool | None = None
    ops: dict = field(default_factory=dict)  # op type -> count in the result
    transposes: int = 0
    size_bytes: int = 0
    sha256: str = ""
    timings: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    io: dict = field(default_factory=dict)
    #: XNNPACK partitions edgerun's partitioner forms on the result (as `edgerun inspect` shows);
    #: None when the xnnpack delegate is not installed
    xnnpack_partitions: int | None = None
    xnnpack_outside: list = field(default_factory=list)  # op types left outside XNNPACK
    model_bytes: bytes = field(default=b"", repr=False)
    #: checks that ran and failed (one line each): budget not met, float output off the source model
    failures: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The conversion's verdict: every check it ran held (``edgerun convert`` exits 1 otherwise)."""
        return not self.failures and self.budget_met is not False

    def to_dict(self) -> dict:
        return {"source": self.source, "output": self.output, "mode": self.mode, "io_type": self.io_type,
                "calib_method": self.calib_method, "calibration": self.calibration,
                "outputs": [o.to_dict() for o in self.outputs], "layers": [x.to_dict() for x in self.layers],
                "kept_float": self.kept_float, "float_ops": self.float_ops, "budget": self.budget,
                "budget_met": self.budget_met, "ops": self.ops, "transposes": self.transposes,
                "size_bytes": self.size_bytes, "sha256": self.sha256,
                "timings": {k: round(v, 3) for k, v in self.timings.items()}, "warnings": self.warnings,
                "io": self.io, "xnnpack_partitions": self.xnnpack_partitions,
                "xnnpack_outside": self.xnnpack_outside, "ok": self.ok, "failures": self.failures}

    def format(self) -> str:
        lines = []
        for w in self.warnings:
            lines.append(f"WARNING: {w}")
        lines.append(f"{self.source} -> {self.output or '(not written)'}: {self.mode}"
                     + (f", io {self.io_type}" if self.mode == "int8" else "")
                     + f", {self.size_bytes} bytes, {sum(self.ops.values())} ops "
                     + "(" + ", ".join(f"{k} x{v}" for k, v in sorted(self.ops.items())) + ")")
        if self.calibration:
            c = self.calibration
            lines.append(f"calibration: {c.get('description')}; {c.get('used')} used, {c.get('heldout')} held back"
                         f" for evaluation; method {self.calib_method}"
                         + (" (cached ranges)" if c.get("cached") else ""))
        if self.outputs:
            ref = "ONNX Runtime" if self.source.endswith(".onnx") else "LiteRT"
            lines.append(f"accuracy vs the float model ({ref}, {self.outputs[0].samples} held-back samples):")
            lines.append(f"  {'output':<28} {'SQNR dB':>8} {'max abs err':>12} {'top-1 agree':>12}")
            for o in self.outputs:
                t1 = f"{o.top1_agreement:.1f}%" if o.top1_agreement is not None else "-"
                lines.append(f"  {o.name[:28]:<28} {o.sqnr_db:8.2f} {o.max_abs_err:12.5g} {t1:>12}")
        if self.layers:
            lines.append("per-layer SQNR (dB), int8 vs float, in graph order:")
            worst = sorted(self.layers, key=lambda x: x.sqnr_db)[:3]
            for ld in self.layers:
                mark = "  <- lowest" if ld in worst else ""
                fl = " (float)" if ld.float_kept else ""
                lines.append(f"  {ld.index:4d} {ld.op:<24} {ld.tensor[:36]:<36} {ld.sqnr_db:8.2f}{fl}{mark}")
        if self.budget:
            state = "met" if self.budget_met else "NOT met"
            kept = ", ".join(self.kept_float) if self.kept_float else "none"
            lines.append(f"accuracy budget --max-drop {self.budget}: {state}; layers kept in float: {kept}")
        if self.float_ops:
            lines.append(f"ops running in float: {', '.join(sorted(set(self.float_ops)))}")
        if self.xnnpack_partitions is not None:
            lines.append(f"XNNPACK partitions: {self.xnnpack_partitions}"
                         + (f" (outside: {', '.join(sorted(set(self.xnnpack_outside)))})" if self.xnnpack_outside
                            else ""))
        if self.mode == "int8" and self.transposes:
            lines.append(f"note: {self.transposes} TRANSPOSE op(s) remain (layout changes the graph needs)")
        t = self.timings
        lines.append("time: " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
        return "\n".join(lines)


def _is_onnx(path: Path, data: bytes) -> bool:
    if path.suffix.lower() == ".onnx":
        return True
    if path.suffix.lower() == ".tflite" or data[4:8] == b"TFL3":
        return False
    return True


def _requires_full_int8(target: str | None) -> bool:
    if not target:
        return False
    t = target.lower()
    if t.startswith("mcu") or t in FULL_INT8_TARGETS:
        return True
    try:
        from edgerun.targets import BOARDS
        b = BOARDS.get(t)
        return b is not None and (b.kind == "mcu" or "edgetpu" in b.delegates[:1])
    except Exception:
        return False


def convert(model_path, out_path=None, *, calib=None, calib_method: str = "mse", io_type: str = "int8",
            float_only: bool = False, input_shape=None, input_layout: str = "NHWC", per_layer: bool = False,
            max_drop=None, target: str | None = None, preprocessing: dict | None = None,
            holdout: float = 0.2, max_eval: int = 200, batch_size: int = 16, progress=None,
            eval_progress=None, use_cache: bool = True, max_float_layers: int = 8,
            percentile: float = 99.99) -> ConversionReport:
    """Convert ``model_path`` (.onnx or float .tflite) and write ``out_path``; returns the report.

    calib: .npy / .npz path, image folder, ``"random"``, arrays, or a CalibrationSource.
    calib_method: minmax | percentile | entropy | mse. io_type: int8 | uint8 | float32.
    float_only: write the float32 TFLite (no calibration needed). input_shape: pins dynamic
    dimensions (``"name:1,3,224,224"`` or a dict). max_drop: ``"1%"`` or ``"40dB"`` (see
    :class:`edgerun.convert.drift.Budget`). target: refuse a float fallback when the target
    needs full int8 (coral / edgetpu / mcu). progress / eval_progress: ``cb(done, total)``.
    """
    from edgerun.convert import calibrate as cal
    from edgerun.convert import drift
    from edgerun.convert.quantize import RULES, float_ops, quantize_graph

    t0 = time.perf_counter()
    path = Path(model_path)
    if not path.exists():
        raise ConversionError(f"model '{path}' does not exist")
    data = path.read_bytes()
    if calib_method not in cal.METHODS:
        raise ConversionError(f"calibration method {calib_method!r}: use one of {', '.join(cal.METHODS)}")
    if io_type not in ("int8", "uint8", "float32"):
        raise ConversionError(f"io type {io_type!r}: use int8, uint8 or float32")
    budget = drift.Budget.parse(max_drop) if max_drop is not None else None
    warnings: list[str] = []

    # -- frontend ------------------------------------------------------------------------------
    if _is_onnx(path, data):
        from edgerun.convert import onnx_frontend as ox
        model = ox.fold_constant_dequantize(ox.load_onnx(str(path)))  # path: external weight files load too
        g, io = ox.onnx_to_graph(model, ox.parse_input_shapes(input_shape), input_layout)
        pinned_model = ox.with_fixed_inputs(model, io["input_shapes"])
        sess = ox.session(pinned_model)
        in_perms = [p for _, p in io["inputs"]]
        out_perms = [p for _, p in io["outputs"]]
        in_names = [n for n, _ in io["inputs"]]

        def reference(sample):
            feeds = {n: np.transpose(x, np.argsort(p)) for n, x, p in zip(in_names, sample, in_perms)}
            outs = sess.run([n for n, _ in io["outputs"]], feeds)
            return [np.transpose(o, p).astype(np.float32) for o, p in zip(outs, out_perms)]
        layout_info = {"inputs": {n: "NHWC (as in the ONNX model)" if n in io.get("nhwc_inputs", ()) else _layout_name(p)
                                  for n, p in io["inputs"]},
                       "outputs": {n: _layout_name(p) for n, p in io["outputs"]}}
        source_kind = "onnx"
        props = {p.key: p.value for p in model.metadata_props}
        if preprocessing is None and "edgerun.preprocessing" in props:
            preprocessing = json.loads(props["edgerun.preprocessing"])
    else:
        from edgerun.convert.tflite_frontend import tflite_to_graph
        if input_shape:
            raise ConversionError("--input-shape applies to ONNX models; a TFLite model's shapes are fixed")
        g = tflite_to_graph(data)
        in_perms = [tuple(range(len(g.tensors[i].shape))) for i in g.inputs]
        from edgerun._litert import make_interpreter
        ref_it = make_interpreter(data, xnnpack=False)
        ref_it.allocate_tensors()

        def reference(sample):
            for d, x in zip(ref_it.get_input_details(), sample):
                ref_it.set_tensor(d["index"], x.astype(np.float32))
            ref_it.invoke()
            return [ref_it.get_tensor(d["index"]).astype(np.float32) for d in ref_it.get_output_details()]
        layout_info = {}
        source_kind = "tflite"
        if preprocessing is None and "edgerun.preprocessing" in g.metadata:
            preprocessing = json.loads(bytes(g.metadata["edgerun.preprocessing"]).rstrip(b"\x00").decode())

    if preprocessing:
        from edgerun.preprocess import METADATA_NAME, validate_spec
        spec = validate_spec(preprocessing)
        spec.setdefault("layout", "NHWC")
        g.metadata[METADATA_NAME] = json.dumps(spec, sort_keys=True).encode()
    g.metadata[CONVERT_METADATA] = json.dumps(
        {"source": path.name, "source_format": source_kind, "layouts": layout_info}, sort_keys=True).encode()
    float_bytes = g.to_bytes("edgerun convert (float32)")
    inputs = [(g.tensors[i].name, g.tensors[i].shape, p) for i, p in zip(g.inputs, in_perms)]
    out_names = [g.tensors[i].name for i in g.outputs]
    timings = {"frontend": time.perf_counter() - t0}
    rep = ConversionReport(source=str(model_path), output=str(out_path) if out_path else None,
                           mode="float32" if float_only else "int8", io_type=io_type if not float_only else "float32",
                           calib_method=None if float_only else calib_method, warnings=warnings, budget=None,
                           io={"inputs": [{"name": n, "shape": list(s)} for n, s, _ in inputs],
                               "outputs": out_names, "layouts": layout_info})

    source = None
    if calib is not None or not float_only:
        source = cal.open_source(calib, inputs, preprocessing=preprocessing)
        if source.random:
            warnings.append("calibrating with RANDOM data (--calib random): ranges, and so int8 accuracy, say "
                            "nothing about real inputs; use representative samples for a model you ship")
    n = len(source) if source is not None else 0
    n_hold = 0 if n < 2 else max(1, min(int(round(n * holdout)), max_eval))
    calib_idx = list(range(n - n_hold)) if n else []
    eval_idx = list(range(n - n_hold, n)) if n_hold else calib_idx[:max_eval]
    if source is not None:
        rep.calibration = {"description": source.description, "samples": n, "used": len(calib_idx),
                           "heldout": n_hold, "random": source.random}
        if n_hold == 0:
            warnings.append("only one calibration sample: the report evaluates on the sample used for calibration")

    if float_only:
        out_bytes = float_bytes
        if source is not None:
            t1 = time.perf_counter()
            rep.outputs = _float_drift(reference, float_bytes, source, eval_idx, out_names, eval_progress)
            timings["evaluate"] = time.perf_counter() - t1
        return _finish(rep, out_bytes, out_path, timings, t0)

    # -- calibration ---------------------------------------------------------------------------
    t1 = time.perf_counter()
    observers, cached = cal.collect(float_bytes, source, calib_idx, batch_size=batch_size, progress=progress,
                                    use_cache=use_cache)
    ranges = cal.ranges_from(observers, calib_method, percentile, heads=_head_tensors(g))
    rep.calibration["cached"] = cached
    timings["calibrate"] = time.perf_counter() - t1

    def build(keep):
        qg = quantize_graph(g, ranges, io_type=io_type, keep_float=keep)
        return qg, qg.to_bytes("edgerun convert (int8)")

    t1 = time.perf_counter()
    kept: list[str] = []
    qg, q_bytes = build(set())
    timings["quantize"] = time.perf_counter() - t1
    inherent = [g.ops[i].op for i in sorted(float_ops(g))]
    if inherent and _requires_full_int8(target):
        raise ConversionError(f"target '{target}' needs every op in int8, but {', '.join(sorted(set(inherent)))} "
                              "has no int8 form in TFLite; change the model or pick another target")

    t1 = time.perf_counter()
    rep.outputs = drift.output_drift(reference, q_bytes, source, eval_idx, out_names, eval_progress)
    if budget is not None:
        rep.budget = budget.text
        rep.budget_met = budget.met(rep.outputs)
        if not rep.budget_met and _requires_full_int8(target):
            worst = min(rep.outputs, key=lambda o: -budget.shortfall(o))
            raise ConversionError(
                f"the int8 model misses --max-drop {budget.text} (output '{worst.name}': SQNR {worst.sqnr_db:.1f} dB"
                + (f", top-1 agreement {worst.top1_agreement:.1f}%" if worst.top1_agreement is not None else "")
                + f") and target '{target}' needs full int8, so no layer can stay in float; try another "
                  "--calib-method or more representative calibration data")
        while not rep.budget_met and len(kept) < max_float_layers:
            layers = drift.layer_drift(float_bytes, q_bytes, source, eval_idx, kept_float=set(kept))
            best = None
            for group in drift.float_candidates(layers, g, set(kept)):
                trial = kept + group
                tg, tb = build(set(trial))
                outs = drift.output_drift(reference, tb, source, eval_idx, out_names)
                score = budget.total_shortfall(outs)
                if best is None or (score, len(trial)) < (best[0] - 1e-9, len(best[1])):
                    best = (score, trial, tg, tb, outs)
            if best is None:
                break
            _, kept, qg, q_bytes, rep.outputs = best
            rep.budget_met = budget.met(rep.outputs)
        rep.kept_float = list(kept)
        if not rep.budget_met:
            warnings.append(f"the accuracy budget --max-drop {budget.text} is not met even with "
                            f"{len(kept)} layer(s) in float")
    prod = g.producers()
    for o, t in zip(rep.outputs, g.outputs):
        op = g.ops[prod[t]] if t in prod else None
        rule = RULES.get(op.op) if op is not None else None
        if rule is not None and rule.kind == "fixed" and o.sqnr_db < 20 and o.name not in kept:
            s, z = rule.fixed
            warnings.append(f"output '{o.name}' comes from {op.op}, whose int8 output has the spec's fixed step "
                            f"{s:g}: values below {s / 2:g} read as 0 (SQNR {o.sqnr_db:.1f} dB). Compare on its input "
                            f"instead, or keep it in float with --max-drop (e.g. --max-drop 30dB)")
    if per_layer:
        rep.layers = drift.layer_drift(float_bytes, q_bytes, source, eval_idx, kept_float=set(kept))
    timings["evaluate"] = time.perf_counter() - t1
    rep.float_ops = [op.op for op in qg.ops if op.op not in ("QUANTIZE", "DEQUANTIZE")
                     and not any(qg.tensors[i].dtype == "int8" for i in op.outputs)
                     and any(qg.tensors[i].dtype == "float32" and qg.tensors[i].data is None for i in op.inputs)]
    return _finish(rep, q_bytes, out_path, timings, t0)


def _head_tensors(g) -> set[str]:
    """Names of tensors whose top values decide the answer: graph outputs, softmax inputs, and the
    inputs of value-moving ops (RESHAPE, ...) that lead to them."""
    from edgerun.convert.quantize import RULES
    heads = {g.tensors[i].name for i in g.outputs}
    prod = g.producers()
    frontier = list(g.outputs)
    for op in g.ops:
        if op.op in ("SOFTMAX", "LOG_SOFTMAX", "ARG_MAX") and op.inputs[0] >= 0:
            frontier.append(op.inputs[0])
    seen = set()
    while frontier:
        t = frontier.pop()
        if t in seen:
            continue
        seen.add(t)
        heads.add(g.tensors[t].name)
        if t in prod:
            op = g.ops[prod[t]]
            rule = RULES.get(op.op)
            if rule is not None and rule.kind == "same":
                frontier.extend(i for i in op.inputs if i >= 0 and g.tensors[i].data is None)
    return heads


def _layout_name(perm) -> str:
    perm = tuple(perm)
    if perm == tuple(range(len(perm))):
        return "NCHW" if len(perm) == 4 else "as in the ONNX model"
    return {(0, 2, 3, 1): "NHWC"}.get(perm, "permuted " + ",".join(map(str, perm)))


def _float_drift(reference, float_bytes, source, idx, out_names, progress):
    from edgerun.convert import drift
    from edgerun._litert import make_interpreter

    it = make_interpreter(float_bytes, xnnpack=False)
    it.allocate_tensors()
    accs = None
    shapes = None
    for k, i in enumerate(idx):
        s = source.sample(i)
        for d, x in zip(it.get_input_details(), s):
            it.set_tensor(d["index"], x.astype(np.float32))
        it.invoke()
        got = [it.get_tensor(d["index"]) for d in it.get_output_details()]
        ref = reference(s)
        if accs is None:
            shapes = [list(r.shape) for r in ref]
            accs = [drift._Acc(classifier=drift.is_classifier(r.shape)) for r in ref]
        for a, r, q in zip(accs, ref, got):
            a.add(r, q.reshape(r.shape))
        if progress:
            progress(k + 1, len(idx))
    return [drift.OutputDrift(nm, sh, a.sqnr, a.maxabs, 100.0 * a.agree / a.rows if a.classifier and a.rows
                              else None, len(idx)) for nm, sh, a in zip(out_names, shapes or [], accs or [])]


def _finish(rep: ConversionReport, out_bytes: bytes, out_path, timings, t0) -> ConversionReport:
    import hashlib

    from edgerun.schema.reader import read_model
    from edgerun.summary import xnnpack_partitions
    m = read_model(out_bytes)
    ops: dict[str, int] = {}
    for op in m.main.operators:
        ops[m.op_name(op)] = ops.get(m.op_name(op), 0) + 1
    rep.ops = ops
    rep.transposes = ops.get("TRANSPOSE", 0)
    rep.xnnpack_partitions, rep.xnnpack_outside = xnnpack_partitions(m)
    rep.size_bytes = len(out_bytes)
    rep.sha256 = hashlib.sha256(out_bytes).hexdigest()
    if out_path is not None:
        p = Path(out_path)
        if p.parent and not p.parent.exists():
            raise ConversionError(f"output folder '{p.parent}' does not exist")
        p.write_bytes(out_bytes)
    timings["total"] = time.perf_counter() - t0
    rep.timings = timings
    rep.model_bytes = out_bytes
    return rep
