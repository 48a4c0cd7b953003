"""The converter's report: what was written, how accurate it is against the float model, and
the verdict of every check the converter ran (``ok``; ``edgerun convert`` exits 1 when not).

Figures name the kernel path they come from (``kernel_path``): by default edgerun's own int8
kernels, which are bit-exact with LiteRT's reference kernels, so the figures describe what
``edgerun.load(...).predict`` and the MCU firmware compute. For a target whose delegate rounds
differently (XNNPACK on ``rpi``), ``delegated`` holds the same figures on that path, beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: kernel path -> words for the report
KERNEL_PATHS = {"edgerun": "edgerun's kernels (bit-exact with LiteRT's reference kernels)",
                "xnnpack": "LiteRT with XNNPACK", "litert": "LiteRT's optimized kernels"}

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
    #: the kernel path the accuracy figures come from
    kernel_path: str = "edgerun"
    #: {"path": delegate, "outputs": [OutputDrift]} on the target's delegated path, when it differs
    delegated: dict | None = None
    #: --float: {"tolerance": {output: limit}, "max_abs_err": {output: err}, "samples", "inputs"}
    float_check: dict | None = None
    #: the written model loaded and ran in LiteRT (in a child process) before the report said so
    litert_check: str | None = None
    #: op type -> count of the result's ops that run with int16 activations (16x8: the wide
    #: classifier head, the int16 input stage, --activations int16, promoted layers); QUANTIZE /
    #: DEQUANTIZE not counted
    int16_ops: dict = field(default_factory=dict)

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
                "xnnpack_outside": self.xnnpack_outside, "ok": self.ok, "failures": self.failures,
                "kernel_path": self.kernel_path,
                "delegated": None if self.delegated is None else
                {"path": self.delegated["path"], "outputs": [o.to_dict() for o in self.delegated["outputs"]]},
                "float_check": self.float_check, "litert_check": self.litert_check, "int16_ops": self.int16_ops}

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
                         + (f" (drawn at random, seed {c['holdout_seed']})" if c.get("holdout_seed") is not None
                            and c.get("heldout") else "")
                         + f" for evaluation; method {self.calib_method}"
                         + (" (cached ranges)" if c.get("cached") else ""))
        if self.outputs:
            ref = "ONNX Runtime" if self.source.endswith(".onnx") else "LiteRT"
            what = ("float32 model in LiteRT" if self.mode == "float32" else
                    "int8 model on " + KERNEL_PATHS.get(self.kernel_path, self.kernel_path))
            samples = f"{self.outputs[0].samples} {'random' if (self.float_check or {}).get('inputs') == 'random' else 'held-back'} samples"
            lines.append(f"accuracy of the {what} vs the float model ({ref}, {samples}):")
            lines.append(f"  {'output':<28} {'SQNR dB':>8} {'max abs err':>12} {'top-1 agree':>12}")
            for o in self.outputs:
                t1 = f"{o.top1_agreement:.1f}%" if o.top1_agreement is not None else "-"
                lines.append(f"  {o.name[:28]:<28} {o.sqnr_db:8.2f} {o.max_abs_err:12.5g} {t1:>12}")
            if self.delegated:
                lines.append(f"  on the target's {self.delegated['path']} path (rounds differently):")
                for o in self.delegated["outputs"]:
                    t1 = f"{o.top1_agreement:.1f}%" if o.top1_agreement is not None else "-"
                    lines.append(f"  {o.name[:28]:<28} {o.sqnr_db:8.2f} {o.max_abs_err:12.5g} {t1:>12}")
        if self.float_check:
            fc = self.float_check
            state = "held" if fc["ok"] else "FAILED"
            lines.append("float32 vs source model: " + state + "; " + ", ".join(
                f"{n}: max abs err {fc['max_abs_err'][n]:.3g} (tolerance {fc['tolerance'][n]:.3g})"
                for n in fc["max_abs_err"]))
        if self.layers:
            lines.append("per-layer SQNR (dB), int8 (LiteRT's optimized kernels, all tensors kept) vs float, in graph order:")
            worst = sorted(self.layers, key=lambda x: x.sqnr_db)[:3]
            for ld in self.layers:
                mark = "  <- lowest" if ld in worst else ""
                if getattr(ld, "entry", False):
                    mark += (f"  <- error enters here ({ld.loss_db:.1f} dB lost)" if ld.loss_db is not None
                             else "  <- error enters here")
                fl = " (float)" if ld.float_kept else ""
                lines.append(f"  {ld.index:4d} {ld.op:<24} {ld.tensor[:36]:<36} {ld.sqnr_db:8.2f}{fl}{mark}")
        if self.budget:
            state = "met" if self.budget_met else "NOT met"
            kept = ", ".join(self.kept_float) if self.kept_float else "none"
            lines.append(f"accuracy budget --max-drop {self.budget}: {state}; layers kept in float: {kept}")
        if self.float_ops:
            lines.append(f"ops running in float: {', '.join(sorted(set(self.float_ops)))}")
        if self.int16_ops:
            lines.append("ops running at 16 bits (int16 activations, int8 weights): "
                         + ", ".join(f"{k} x{v}" for k, v in sorted(self.int16_ops.items())))
        if self.xnnpack_partitions is not None:
            lines.append(f"XNNPACK partitions: {self.xnnpack_partitions}"
                         + (f" (outside: {', '.join(sorted(set(self.xnnpack_outside)))})" if self.xnnpack_outside
                            else ""))
        if self.mode == "int8" and self.transposes:
            lines.append(f"note: {self.transposes} TRANSPOSE op(s) remain (layout changes the graph needs)")
        if self.litert_check:
            lines.append(f"LiteRT: {self.litert_check}")
        for f in self.failures:
            lines.append(f"FAILED: {f}")
        t = self.timings
        lines.append("time: " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
        return "\n".join(lines)
