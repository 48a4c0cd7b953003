"""edgerun bench: latency of edgerun next to LiteRT, with the ratio as the headline."""

from __future__ import annotations

from pathlib import Path

import typer

from edgerun.cli._util import console, emit_json, progress


def bench_cli(
    model: Path = typer.Argument(..., help="A .tflite model."),
    runs: int = typer.Option(50, "--runs", "-n", help="Timed invokes per engine."),
    warmup: int = typer.Option(5, help="Untimed invokes first."),
    threads: int = typer.Option(1, "--threads", help="Threads for every engine (BLAS included)."),
    engines: str = typer.Option("edgerun,litert,litert-xnnpack", help="Engines to compare, comma-separated."),
    delegate: str = typer.Option(None, "--delegate", help="edgerun delegates in priority order, e.g. xnnpack."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON object."),
):
    """Measure p50/p90/p99 latency of MODEL in edgerun and LiteRT (XNNPACK off and on) in one run.

    The ratio column (edgerun p50 / engine p50) is the headline: lower is better.
    """
    from edgerun.bench import benchmark
    from edgerun.errors import EdgerunError

    if not model.exists():
        raise EdgerunError(f"{model}: no such file")
    names = tuple(e.strip() for e in engines.split(",") if e.strip())
    dl = [d.strip() for d in delegate.split(",")] if delegate else None
    with progress("benchmarking", enabled=not json_out) as cb:
        report = benchmark(model.read_bytes(), runs=runs, warmup=warmup, num_threads=threads,
                           engines=names, delegates=dl, progress=cb)
    report["model"] = str(model)
    if json_out:
        emit_json(report)
        return
    from rich.table import Table

    t = Table(title=f"{model.name}: {runs} runs, {threads} thread(s)")
    for col in ("engine", "p50 ms", "p90 ms", "p99 ms", "peak RSS growth", "edgerun / engine"):
        t.add_column(col, justify="right" if col != "engine" else "left")
    for eng, r in report["engines"].items():
        if "error" in r:
            t.add_row(eng, "-", "-", "-", "-", r["error"])
            continue
        ratio = report.get("ratios", {}).get(f"edgerun/{eng}")
        mem = r.get("peak_rss_growth_bytes")
        t.add_row(eng, f"{r['p50_ms']:.3f}", f"{r['p90_ms']:.3f}", f"{r['p99_ms']:.3f}",
                  "?" if mem is None else f"{mem / 1024:,.0f} KiB",
                  "1.00" if eng == "edgerun" else (f"{ratio:.2f}x" if ratio else "-"))
    c = console()
    c.print(t)
    e = report["engines"].get("edgerun", {})
    if "arena_bytes" in e:
        c.print(f"edgerun arena {e['arena_bytes']:,} B, peak transient {e['peak_transient_bytes']:,} B")
    if "delegation" in e:
        from edgerun.delegate import coverage_lines

        for line in coverage_lines(e["delegation"]):
            c.print(line)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_cli)
