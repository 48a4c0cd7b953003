"""edgerun inspect: what is inside a model or a bundle."""

from __future__ import annotations

from pathlib import Path

import typer

from edgerun.cli._util import console, emit_json


def inspect_cli(
    path: Path = typer.Argument(..., help="A .tflite model or a bundle (by content, any name: the deploy "
                                "`current` link works)."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON object instead of tables."),
):
    """Show a model's op histogram, inputs/outputs with quantization, weight and arena bytes.

    Bundles show their manifest, signature state and the model inside.
    """
    from edgerun.bundle import describe_path

    info = describe_path(path)
    if json_out:
        emit_json(info)
        return
    _print(info, path)


def _print(info: dict, path: Path) -> None:
    from rich.table import Table

    c = console()
    model = info.get("model", info)
    c.print(f"[bold]{path}[/bold]  {model.get('operators', '?')} ops, "
            f"{model.get('tensors', '?')} tensors, weights {model.get('weight_bytes', 0):,} B, "
            f"arena {_bytes(model.get('arena_bytes'))}")
    if model.get("xnnpack_partitions") is not None:
        outside = model.get("xnnpack_outside") or []
        c.print(f"XNNPACK partitions: {model['xnnpack_partitions']}"
                + (f" (outside: {', '.join(outside)})" if outside else ""))
    if model.get("arena_error"):
        c.print(f"[yellow]cannot plan the arena: {model['arena_error']}[/yellow]")
    for key in ("inputs", "outputs"):
        t = Table(title=key, show_lines=False)
        for col in ("name", "shape", "dtype", "quantization"):
            t.add_column(col)
        for d in model.get(key, []):
            q = d.get("quantization")
            qs = "" if not q else (f"scale={q['scale']:.6g} zp={q['zero_point']}" if "scale" in q
                                   else f"per-axis ({len(q['scales'])}) axis={q['axis']}")
            t.add_row(d["name"], str(d.get("shape_signature", d["shape"])), d["dtype"], qs)
        c.print(t)
    hist = model.get("op_histogram", {})
    if hist:
        t = Table(title="ops")
        t.add_column("op")
        t.add_column("count", justify="right")
        for k, v in hist.items():
            t.add_row(k, str(v))
        c.print(t)
    for k, v in info.items():
        if k not in ("model",) and k not in model:
            c.print(f"{k}: {v}")


def _bytes(n) -> str:
    return "?" if n is None else f"{n:,} B"


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect_cli)
