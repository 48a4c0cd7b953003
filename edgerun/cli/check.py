"""``edgerun check MODEL --target rpi|coral|jetson|mcu[:BOARD]``: what each target's delegates
would take, with no hardware present. The library is :mod:`edgerun.check`; this module parses,
calls and prints. Exit 0 when the target can run the model, 1 when it cannot (DOES NOT FIT, ops
the target cannot run), see ``edgerun.errors.EXIT_CODES``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from edgerun.check import check_model, format_report
from edgerun.errors import CHECK_FAILED


def register(app) -> None:
    @app.command("check")
    def check_cli(
        model: Path = typer.Argument(..., help="a .tflite model or a bundle (any name, e.g. the deploy `current` link)"),
        target: str = typer.Option(None, "--target", "-t", help="rpi | coral | jetson | mcu[:BOARD] (or "
                                   "target:BOARD); a bundle's own target by default"),
        json_out: bool = typer.Option(False, "--json", help="print the report as JSON"),
        no_tflm: bool = typer.Option(False, "--no-tflm", help="MCU: skip measuring TFLM's arena"),
    ):
        """Show which ops each target's delegates take, the partitions, what falls back and why,
        and for MCU boards the arena and model size against the board. Needs no hardware.

        Exit code 0 when the target can run the model, 1 when it cannot (a node no delegate or
        kernel runs, a node an MCU board cannot run, DOES NOT FIT).
        """
        rep = check_model(model, target, tflm=not no_tflm)
        if json_out:
            from edgerun.cli._util import emit_json
            emit_json(rep)
        else:
            for line in format_report(rep):
                typer.echo(line)
        if not rep["verdict"]["ok"]:
            raise typer.Exit(CHECK_FAILED)
