"""edgerun package: turn a model into one signed, deterministic bundle file."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from edgerun.cli._util import JSON_OPT, emit_json, progress


def package_cli(
    model: Path = typer.Argument(..., help="The .tflite model to package (or a bundle, by content: repackage "
                                 "its model, e.g. for another target)."),
    output: Path = typer.Option(None, "--output", "-o", help="Bundle file to write (default: MODEL.bundle)."),
    target: str = typer.Option("cpu", "--target", "-t", help="rpi | coral | jetson | mcu[:BOARD] | cpu."),
    labels: Path = typer.Option(None, "--labels", help="Labels file, one label per line."),
    sign: Path = typer.Option(None, "--sign", help="Ed25519 private key (from `edgerun keygen`) to sign with "
                              "(default: EDGERUN_SIGNING_KEY or signing_key in ~/.config/edgerun/config.toml)."),
    report: Path = typer.Option(None, "--report", help="Conversion report (JSON) to include."),
    calib: Path = typer.Option(None, "--calib", help="Calibration data (file or directory) to record the hash of."),
    preprocessing: str = typer.Option(None, "--preprocessing",
                                      help="Preprocessing spec as JSON or a .json file (default: from the model)."),
    golden: list[Path] = typer.Option([], "--golden", help="Golden input (.npy or image), repeatable "
                                                          "(default: 3 seeded random inputs)."),
    json_out: bool = JSON_OPT,
):
    """Package MODEL with a manifest and golden vectors into one bundle file.

    The same inputs always give the same bytes. With --sign the manifest is signed (Ed25519);
    `edgerun verify` and `edgerun.load()` check every hash and the signature.
    """
    from edgerun._fs import check_output
    from edgerun.bundle import describe, hash_calibration, trust, write_bundle
    from edgerun.inputs import load_npy
    from edgerun.preprocess import spec_from_option

    out = check_output(output or model.with_suffix(".bundle"), model, what="bundle")  # never the model itself
    spec = spec_from_option(preprocessing) if preprocessing else None
    sign = sign if sign is not None else trust.signing_key()  # EDGERUN_SIGNING_KEY / config signing_key
    from edgerun.check import model_bytes

    data, _, manifest = model_bytes(model)  # a bundle (by content, e.g. the deploy `current` link): its model
    source = data if manifest is not None else model
    if manifest is not None and labels is None:
        labels = manifest["labels"]
    golden_inputs = None
    if golden:
        golden_inputs = [load_npy(p) if p.suffix == ".npy" else str(p) for p in golden]
        from edgerun.bundle.golden import check_input_arrays

        check_input_arrays(data, golden_inputs, [str(p) for p in golden])
    with progress("packaging", enabled=not json_out and sys.stderr.isatty()) as cb:
        path = write_bundle(source, out, target=target, labels=labels, sign_key=sign, preprocessing=spec,
                            report=report, calib_hash=hash_calibration(calib) if calib else None,
                            golden_inputs=golden_inputs, progress=cb)
    info = describe(path)
    if json_out:
        emit_json(info)
        return
    typer.echo(f"wrote {path} ({info['size']} bytes, sha256 {info['sha256'][:16]}…, target "
                    f"{info['target']['spec']}, {info['golden_cases']} golden cases, "
                    f"{'signed by ' + info['key'] if info['signed'] else 'unsigned'})")


def register(app: typer.Typer) -> None:
    app.command("package")(package_cli)
