"""edgerun convert: ONNX or float TFLite -> full-integer int8 TFLite, with an accuracy report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from edgerun.cli._util import (
    CHANNEL_ORDER_OPT,
    MEAN_OPT,
    SCALE_OPT,
    SIZE_OPT,
    STD_OPT,
    console,
    emit_json,
    progress,
    to_jsonable,
)
from edgerun.errors import CHECK_FAILED


def _is_html(path: Path | None) -> bool:
    return path is not None and path.suffix.lower() in (".html", ".htm")


# fmt: off
def convert_cli(
    model: Path = typer.Argument(..., help="An .onnx model or a float .tflite model."),
    output: Path = typer.Option(..., "--output", "-o", help="Where to write the converted .tflite."),
    calib: str = typer.Option(None, "--calib", help="Calibration data: .npz / .npy file, a folder of images, "
                              "or 'random' (testing only; warns loudly)."),
    calib_method: str = typer.Option("auto", "--calib-method", help="Range per tensor: auto (chosen per "
                                     "model and tensor by the error at the outputs), or one of minmax, "
                                     "percentile, entropy, mse for every tensor."),
    io_type: str = typer.Option("int8", "--io-type", help="Model input/output type: int8, uint8 or float32."),
    activations: str = typer.Option("int8", "--activations", help="Activation precision: int8, or int16 "
                                    "(TFLite's 16x8 mode: int16 activations, int8 weights, int64 bias; "
                                    "int16 or float32 model inputs/outputs)."),
    float_only: bool = typer.Option(False, "--float", help="Write an unquantized float32 TFLite (the "
                                    "converter's correctness baseline)."),
    input_shape: str = typer.Option(None, "--input-shape", help="Pin dynamic dims: NAME:1,3,224,224 "
                                    "(';' between inputs; the name may be left out for one input)."),
    input_layout: str = typer.Option("NHWC", "--input-layout", help="Layout of 4-D image inputs in the "
                                     "result: NHWC (TFLite's) or NCHW (ONNX's)."),
    max_drop: str = typer.Option(None, "--max-drop", help="Accuracy budget: '1%' (top-1 agreement lost; "
                                 "relative RMS error for non-classifiers) or '40dB' (minimum output SQNR). Layers "
                                 "that hurt most are kept in float until it is met."),
    target: str = typer.Option(None, "--target", help="Deployment target (coral, mcu, rpi, ...): targets that "
                               "need full int8 make float fallback an error."),
    per_layer: bool = typer.Option(False, "--per-layer", help="Add each layer's SQNR to the report."),
    report: Path = typer.Option(None, "--report", help="Also write the report to this file: JSON, or for a "
                                ".html name a self-contained page with the per-layer SQNR plot."),
    size: str = SIZE_OPT,
    mean: str = MEAN_OPT,
    std: str = STD_OPT,
    scale: float = SCALE_OPT,
    channel_order: str = CHANNEL_ORDER_OPT,
    no_cache: bool = typer.Option(False, "--no-cache", help="Recalibrate even if cached ranges exist."),
    optimize: bool | None = typer.Option(None, "--optimize/--no-optimize", help="Learn each layer's weight rounding (up or down "
                                  "per weight, AdaRound) on the calibration data; kept only if the int8 "
                                  "error falls. Default: on for small models (MLPerf Tiny size) with "
                                  "--calib-method auto, bounded by steps, not time."),
    optimize_seconds: float = typer.Option(60.0, "--optimize-seconds", min=0.0, help="Time budget of "
                                           "--optimize in seconds."),
    equalize: bool = typer.Option(True, "--equalize/--no-equalize", help="Try cross-layer equalization "
                                  "(kept only if the int8 error falls); --no-equalize skips it and its "
                                  "second calibration."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
):
    """Convert MODEL to a full-integer int8 TFLite (or float32 with --float) and report accuracy.

    The report gives, per output, SQNR, max abs error and top-1 agreement between the float model
    (ONNX Runtime / LiteRT) and the int8 model on held-back calibration samples; --per-layer shows
    where accuracy is lost. Calibration ranges are cached, so re-running with another method or io
    type is quick. Exit code 1 when the --max-drop budget is not met or a --float model's outputs
    differ from the source model's by more than the tolerance.
    """
    # fmt: on
    from edgerun._fs import atomic_write, check_output
    from edgerun.convert import convert
    from edgerun.preprocess import spec_from_options

    check_output(output, model, what="output")  # never overwrite the model being converted
    if report is not None:
        check_output(report, model, output, what="report")

    pre = None
    if any(v is not None for v in (size, mean, std, scale, channel_order)):
        pre = spec_from_options(size=size, mean=mean, std=std, scale=scale, channel_order=channel_order,
                                layout="NHWC")
    bars = not json_out and sys.stderr.isatty()
    with progress("calibrating", enabled=bars) as cb, progress("evaluating", enabled=bars) as ecb, \
            progress("optimizing", enabled=bars and optimize) as ocb:
        rep = convert(model, output, calib=calib, calib_method=calib_method, io_type=io_type,
                      float_only=float_only, input_shape=input_shape, input_layout=input_layout,
                      per_layer=per_layer or _is_html(report), max_drop=max_drop, target=target, preprocessing=pre,
                      progress=cb, eval_progress=ecb, use_cache=not no_cache, activations=activations,
                      optimize=optimize, optimize_seconds=optimize_seconds, optimize_progress=ocb,
                      equalize=equalize)
    d = rep.to_dict()
    if report is not None and _is_html(report):
        from edgerun.bench.report import write_convert_report

        write_convert_report(to_jsonable(d), report)
    elif report is not None:
        atomic_write(report, (json.dumps(to_jsonable(d), indent=2) + "\n").encode())
    if json_out:
        emit_json(to_jsonable(d))
    else:
        c = console()
        for w in rep.warnings:
            c.print(f"[bold red]WARNING:[/bold red] {w}", highlight=False, soft_wrap=True)
        text = rep.format().split("\n")
        c.print("\n".join(line for line in text if not line.startswith("WARNING:")), highlight=False, markup=False,
                soft_wrap=True)
    if not rep.ok:  # budget not met, float output off the source model: the check failed
        raise typer.Exit(CHECK_FAILED)


def register(app: typer.Typer) -> None:
    app.command("convert")(convert_cli)
