"""edgerun run: run a model (or a bundle) on inputs and print its outputs. Library: :mod:`edgerun.run`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from edgerun.cli._util import (
    CHANNEL_ORDER_OPT,
    JSON_OPT,
    MEAN_OPT,
    SCALE_OPT,
    SIZE_OPT,
    STD_OPT,
    console,
    emit_json,
    image_options,
)
from edgerun.errors import CHECK_FAILED
from edgerun.run import run_model, top_k  # noqa: F401  (library API, importable from here as before)


# fmt: off
def run_cli(
    model: Path = typer.Argument(..., help="A .tflite model or a bundle (any name, e.g. the deploy `current` link)."),
    input: list[Path] = typer.Option([], "--input", "-i", help=".npy/.npz file or image, one per model input."),
    size: str = SIZE_OPT,
    mean: str = MEAN_OPT,
    std: str = STD_OPT,
    scale: float = SCALE_OPT,
    layout: str = typer.Option(None, help="Image inputs: NHWC or NCHW (default: from the model)."),
    channel_order: str = CHANNEL_ORDER_OPT,
    top: int = typer.Option(5, "--top-k", help="How many classes to show for classifier outputs."),
    compare: str = typer.Option(None, "--compare", help="'litert': print max abs difference vs LiteRT's reference kernels."),
    profile: bool = typer.Option(False, "--profile", help="Print time per op type."),
    delegate: str = typer.Option(None, "--delegate", help="Delegates in priority order, e.g. xnnpack,mcu; each "
                                 "must be available here (no silent CPU fallback)."),
    verify: bool = typer.Option(False, "--verify", help="Bundles: run the golden vectors and compare "
                                "(exit 1 on a mismatch)."),
    allow_unsigned: bool = typer.Option(False, "--allow-unsigned", help="Bundles: accept an unsigned bundle "
                                        "(refused by default; see docs/bundles.md)."),
    device: str = typer.Option(None, "--device",
                               help="Run on edgerun firmware at this serial port or URL (flashes it when needed)."),
    json_out: bool = JSON_OPT,
):
    """Run MODEL on inputs (random ones if none are given) and print its outputs.

    Classifier outputs show the top-k classes. Bundles apply their own preprocessing and labels;
    `--verify` checks the bundle's golden vectors: exit code 0 when they match, 1 when not.
    """
    # fmt: on
    if device:  # on a microcontroller: edgerun.deploy.flash
        from edgerun.deploy.flash import device_run_report

        report = device_run_report(model, device, input, verify=verify, allow_unsigned=allow_unsigned)
        emit_json(report) if json_out else console().print(report)
        if report.get("verified") is False:
            raise typer.Exit(CHECK_FAILED)
        return
    from edgerun.run import run

    opts = image_options(size=size, mean=mean, std=std, scale=scale, layout=layout, channel_order=channel_order)
    report = run(model, input, image_options=opts, delegates=delegate, compare=compare, profile=profile, k=top,
                 verify=verify, allow_unsigned=allow_unsigned)
    if json_out:
        emit_json(report)
    else:
        _print(report)
    if report.get("verified") is False:
        raise typer.Exit(CHECK_FAILED)


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
        from edgerun.cli.verify import golden_lines

        v = report["verify"]
        c.print(f"verify: {'ok' if v.get('ok') else 'FAILED'}", highlight=False, markup=False)
        for line in golden_lines(v):
            c.print(line, highlight=False, markup=False, soft_wrap=True)
    if report.get("delegation"):
        from edgerun.delegate import coverage_lines

        for line in coverage_lines(report["delegation"]):
            c.print(line)


def register(app: typer.Typer) -> None:
    app.command("run")(run_cli)
