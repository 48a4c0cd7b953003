"""edgerun run: run a model (or a bundle) on inputs and print its outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from edgerun.cli._util import console, emit_json
from edgerun.errors import EdgerunError


def _delegates(spec: str | None) -> list[str]:
    return [s.strip() for s in spec.split(",") if s.strip()] if spec else []


def top_k(values: np.ndarray, k: int) -> list[tuple[int, float]]:
    flat = values.reshape(-1)
    idx = np.argsort(-flat, kind="stable")[:k]
    return [(int(i), float(flat[i])) for i in idx]


def run_model(model: Path, inputs: list[Path], *, image_options: dict | None = None,
              delegates: list[str] | None = None, compare: str | None = None, profile: bool = False,
              k: int = 5, seed: int | None = None) -> dict:
    """Library form of ``edgerun run`` for .tflite models; returns a JSON-able report."""
    from edgerun.inputs import dequantize_for, load_inputs
    from edgerun.runtime.interpreter import Interpreter
    from edgerun.testing import random_inputs

    data = model.read_bytes() if model.exists() else None
    if data is None:
        raise EdgerunError(f"{model}: no such file")
    it = Interpreter(model_content=data, delegates=delegates or None)
    it.allocate_tensors()
    details = it.get_input_details()
    if inputs:  # the preprocessing the converter stored in the model, overridden by options
        from edgerun.preprocess import spec_from_metadata

        stored = spec_from_metadata(it.model.metadata_dict()) or {}
        keys = ("size", "mean", "std", "scale", "layout", "channel_order", "resize")
        image_options = {**{k: v for k, v in stored.items() if k in keys}, **(image_options or {})}
    xs = load_inputs(inputs, details, image_options=image_options) if inputs else \
        random_inputs(details, seed or 0)
    if profile:
        it.set_profiling(True)
    for d, x in zip(details, xs):
        it.set_tensor(d["index"], x)
    it.invoke()
    report: dict = {"model": str(model), "inputs": "random" if not inputs else [str(p) for p in inputs],
                    "outputs": []}
    outs = []
    for d in it.get_output_details():
        y = it.get_tensor(d["index"])
        outs.append(y)
        real = dequantize_for(d, y)
        entry = {"name": d["name"], "shape": list(y.shape), "dtype": y.dtype.name,
                 "values": real.tolist() if real.size <= 32 else None}
        if real.ndim >= 1 and real.shape[-1] > 1 and real.size == real.shape[-1]:
            entry["top_k"] = [{"index": i, "score": s} for i, s in top_k(real, k)]
        report["outputs"].append(entry)
    if compare:
        if compare != "litert":
            raise EdgerunError(f"--compare takes 'litert', not {compare!r}")
        from edgerun.testing import run_litert

        want = run_litert(data, xs, reference=True)
        report["compare_litert"] = [
            {"name": d["name"], "max_abs_diff": float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
             if g.size else 0.0}
            for d, g, w in zip(it.get_output_details(), outs, want)]
    if profile:
        prof = it.profile
        total = sum(prof.values()) or 1.0
        report["profile"] = [{"op": op, "ms": t * 1e3, "share": t / total}
                             for op, t in sorted(prof.items(), key=lambda kv: -kv[1])]
    if it.partitions:
        from edgerun.delegate import coverage

        report["delegation"] = coverage(it)
    return report


def run_cli(
    model: Path = typer.Argument(..., help="A .tflite model or a .bundle."),
    input: list[Path] = typer.Option([], "--input", "-i", help=".npy/.npz file or image, one per model input."),
    size: str = typer.Option(None, help="Image resize HxW, e.g. 224x224 (default: the model's input size)."),
    mean: str = typer.Option(None, help="Per-channel mean, e.g. 127.5 or 123.7,116.3,103.5."),
    std: str = typer.Option(None, help="Per-channel std, e.g. 127.5 or 58.4,57.1,57.4."),
    scale: float = typer.Option(None, help="Multiply pixels by this before mean/std (e.g. 0.00392)."),
    layout: str = typer.Option(None, help="NHWC or NCHW (default: from the model)."),
    channel_order: str = typer.Option(None, "--channel-order", help="RGB, BGR or L (grayscale)."),
    top: int = typer.Option(5, "--top-k", help="How many classes to show for classifier outputs."),
    compare: str = typer.Option(None, "--compare", help="'litert': print max abs difference vs LiteRT's reference kernels."),
    profile: bool = typer.Option(False, "--profile", help="Print time per op type."),
    delegate: str = typer.Option(None, "--delegate", help="Delegates in priority order, e.g. xnnpack,mcu."),
    verify: bool = typer.Option(False, "--verify", help="Bundles: run the golden vectors and compare."),
    device: str = typer.Option(None, "--device",
                               help="Run on edgerun firmware at this serial port or URL (flashes it when needed)."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON object."),
):
    """Run MODEL on inputs (random ones if none are given) and print its outputs.

    Classifier outputs show the top-k classes. Bundles apply their own preprocessing and labels;
    `--verify` checks the bundle's golden vectors.
    """
    if device:  # on a microcontroller: edgerun.deploy.flash
        from edgerun.deploy.flash import device_run_report

        report = device_run_report(model, device, input, verify=verify)
        emit_json(report) if json_out else console().print(report)
        if report.get("verified") is False:
            raise typer.Exit(1)
        return
    image_options = {k: v for k, v in dict(size=size, mean=mean, std=std, scale=scale, layout=layout,
                                           channel_order=channel_order).items() if v is not None}
    if model.suffix == ".bundle":
        report = _run_bundle(model, input, verify, _delegates(delegate), image_options, top)
    else:
        if verify:
            raise EdgerunError("--verify needs a .bundle (golden vectors live in bundles)")
        report = run_model(model, input, image_options=image_options, delegates=_delegates(delegate),
                           compare=compare, profile=profile, k=top)
    if json_out:
        emit_json(report)
    else:
        _print(report)
    if report.get("verified") is False:
        raise typer.Exit(1)


def _run_bundle(path: Path, inputs: list[Path], verify: bool, delegates: list[str], image_options: dict,
                k: int) -> dict:
    import edgerun

    bm = edgerun.load(path, delegates=delegates or None)
    report: dict = {"bundle": str(path)}
    if verify:
        res = bm.verify()
        report["verify"] = res
        report["verified"] = bool(res.get("ok", False)) if isinstance(res, dict) else bool(res)
    if inputs or not verify:
        if len(inputs) > 1:
            raise EdgerunError("bundles take one input file here")
        out = bm.predict(str(inputs[0])) if inputs else bm.predict(None)
        report["outputs"] = out
        if getattr(out, "labels", None) is not None:  # edgerun.bundle.Prediction: best labels
            report["top_k"] = [{"label": lab, "score": sc} for lab, sc in out.top_k(k)]
    return report


def _print(report: dict) -> None:
    c = console()
    for o in report.get("outputs", []) if isinstance(report.get("outputs"), list) else []:
        c.print(f"[bold]{o['name']}[/bold] {o['shape']} {o['dtype']}")
        if o.get("top_k"):
            for r in o["top_k"]:
                c.print(f"  class {r['index']:>5}  {r['score']:.5f}")
        elif o.get("values") is not None:
            c.print(f"  {np.array(o['values'])}")
    if isinstance(report.get("outputs"), dict):
        c.print(report["outputs"])
    for r in report.get("compare_litert", []):
        c.print(f"vs LiteRT ({r['name']}): max abs diff {r['max_abs_diff']:.6g}")
    if report.get("profile"):
        c.print("[bold]profile[/bold]")
        for p in report["profile"]:
            c.print(f"  {p['op']:<24} {p['ms']:9.3f} ms  {100 * p['share']:5.1f}%")
    for r in report.get("top_k", []):
        c.print(f"  {r['label']:<24} {r['score']:.5f}")
    if "verify" in report:
        c.print(f"verify: {report['verify']}")
    if report.get("delegation"):
        from edgerun.delegate import coverage_lines

        for line in coverage_lines(report["delegation"]):
            c.print(line)


def register(app: typer.Typer) -> None:
    app.command("run")(run_cli)
