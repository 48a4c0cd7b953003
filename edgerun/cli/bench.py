"""edgerun bench: latency, throughput, energy and thermal state of edgerun next to LiteRT."""

from __future__ import annotations

from pathlib import Path

import typer

from edgerun.cli._util import console, emit_json, progress


def _num(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(report: dict, title: str, c=None) -> None:
    """The terminal table for a results dict from :func:`edgerun.bench.benchmark` (host, board or
    MCU runs fill the same fields: ``engines -> {latency_ms, throughput_ips, energy, ...}``)."""
    from rich.table import Table

    c = c or console()
    t = Table(title=title)
    cols = ("engine", "p50 ms", "p90 ms", "p99 ms", "inf/s", "RSS growth", "edgerun/x")
    for col in cols:
        t.add_column(col, justify="right" if col != "engine" else "left")
    ok = {e: r for e, r in report["engines"].items() if "error" not in r}
    for eng, r in report["engines"].items():
        if eng not in ok:
            t.add_row(eng, *["-"] * (len(cols) - 2), r["error"])
            continue
        ratio = report.get("ratios", {}).get(f"edgerun/{eng}")
        mem = r.get("peak_rss_growth_bytes")
        t.add_row(eng, f"{r['p50_ms']:.3f}", f"{r['p90_ms']:.3f}", f"{r['p99_ms']:.3f}",
                  _num(r.get("throughput_ips"), ",.1f"), "?" if mem is None else f"{mem / 1024:,.0f} KiB",
                  "1.00" if eng == "edgerun" else (f"{ratio:.2f}x" if ratio else "-"))
    c.print(t)
    if any((r.get("energy") or {}).get("source") for r in ok.values()):
        et = Table(title="energy")
        for col in ("engine", "J/inf", "inf/J", "avg W", "idle W", "energy J", "inferences"):
            et.add_column(col, justify="right" if col != "engine" else "left")
        for eng, r in ok.items():
            en = r.get("energy") or {}
            et.add_row(eng, _num(en.get("joules_per_inference"), ".4g"),
                       _num(en.get("inferences_per_joule"), ",.1f"),
                       _num(en.get("avg_power_w"), ".3f"), _num(en.get("idle_power_w"), ".3f"),
                       _num(en.get("energy_j"), ".3f"), str(r.get("inferences")))
        c.print(et)
    en = report.get("energy") or {}
    if en.get("source"):
        how = "USER-SUPPLIED constant, not measured" if en.get("user_supplied") else "measured"
        idle = "idle subtracted" if en.get("idle_subtracted") else "idle not subtracted"
        c.print(f"energy: {en['source']} ({how}; {idle})", highlight=False)
    elif en.get("message"):
        c.print(f"energy: {en['message']}", highlight=False)
    th = report.get("thermal") or {}
    if th.get("max_temp_c") is not None or th.get("cpu_mhz"):
        mhz = th.get("cpu_mhz") or {}
        c.print("thermal: max " + (f"{th['max_temp_c']:.1f} C" if th.get("max_temp_c") is not None else "? C")
                + (f", CPU clock {mhz['min']:.0f}-{mhz['max']:.0f} MHz" if mhz else "")
                + (", THROTTLED" if th.get("throttled") else ", no throttling seen"), highlight=False)
    elif th.get("message"):
        c.print(f"thermal: {th['message']}", highlight=False)
    for w in report.get("warnings", []):
        c.print(f"[bold red]WARNING:[/bold red] {w}", highlight=False, soft_wrap=True)


def bench_cli(
    # fmt: off
    model: Path = typer.Argument(..., help="A .tflite model or a bundle (the deploy 'current' link too)."),
    runs: int = typer.Option(50, "--runs", "-n", help="Minimum timed queries (single-stream) or samples "
                             "(offline) per engine."),
    warmup: int = typer.Option(5, help="Untimed invokes first."),
    threads: int = typer.Option(1, "--threads", help="Threads for every engine (BLAS included); offline: "
                                "worker threads, one interpreter each."),
    engines: str = typer.Option("edgerun,litert,litert-xnnpack", help="Engines to compare, comma-separated."),
    delegate: str = typer.Option(None, "--delegate", help="edgerun delegates in priority order, e.g. "
                                 "xnnpack."),
    scenario: str = typer.Option("single-stream", "--scenario", help="MLPerf scenario: single-stream "
                                 "(latency, p90 headline) or offline (throughput)."),
    min_duration: float = typer.Option(None, "--min-duration", help="Minimum seconds per engine "
                                       "(default: 1 with a power source, for enough power samples; else 0; "
                                       "MLPerf's rules use 600)."),
    batch: int = typer.Option(1, "--batch", help="Offline: samples per invoke (grows the input's batch "
                              "dim)."),
    power_source: str = typer.Option("auto", "--power-source", help="auto (best found), none, or a source "
                                     "name such as powercap:intel-rapl:0 or hwmon:ina3221:VDD_IN."),
    power_meter: str = typer.Option(None, "--power-meter", help="Serial port of an RDTech UM24C/UM25C/UM34C "
                                    "USB power meter (e.g. /dev/rfcomm0)."),
    power_w: float = typer.Option(None, "--power-w", help="A constant power you measured (wall meter), in W; "
                                  "reported as user-supplied."),
    idle: float = typer.Option(1.0, "--idle", help="Seconds of idle power to measure first (0: none)."),
    subtract_idle: bool = typer.Option(False, "--subtract-idle", help="Energy per inference above idle "
                                       "power."),
    interval: float = typer.Option(0.02, "--sample-interval", help="Seconds between telemetry samples."),
    profile: bool = typer.Option(False, "--profile", help="Add edgerun's time per op type (separate pass)."),
    report_path: Path = typer.Option(None, "--report", help="Write a self-contained HTML report (.html)."),
    use_loadgen: bool = typer.Option(None, "--loadgen/--no-loadgen", help="Drive the runs through MLPerf "
                                     "LoadGen (default: when mlcommons-loadgen is installed)."),
    loadgen_dir: Path = typer.Option(None, "--loadgen-dir", help="Keep LoadGen's logs here (default: "
                                     "REPORT.mlperf/ beside --report)."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON object with every raw figure."),
    device: str = typer.Option(None, "--device", help="Serial port of an edgerun microcontroller board "
                               "(or socket://HOST:PORT): flash MODEL there and time INVOKE on the board's "
                               "own timer; --profile gives per-op time."),
    mlperf_tiny: bool = typer.Option(False, "--mlperf-tiny", help="With --device: drive the board's MLPerf "
                                     "Tiny / EEMBC device-under-test UART mode (performance: infer N W, "
                                     "median latency)."),
    allow_unsigned: bool = typer.Option(False, "--allow-unsigned", help="With --device: flash an unsigned "
                                        "bundle."),
    # fmt: on
):
    """Benchmark MODEL in edgerun and LiteRT (XNNPACK off and on): latency percentiles, throughput,
    energy per inference from real power telemetry, and thermal state, under an MLPerf scenario.

    Energy comes from Linux powercap (RAPL), hwmon power/energy/voltage x current sensors, NVML or
    a USB power meter, sampled while the benchmark runs; none found means no energy figures.
    The ratio column (edgerun p50 / engine p50) compares engines: lower is better.
    """
    from edgerun.bench import Telemetry, benchmark, check_engines
    from edgerun.bench.power import select
    from edgerun.bench.scenarios import loadgen_version
    from edgerun.bench.thermal import ThermalProbe
    from edgerun.errors import UsageError

    if mlperf_tiny and device is None:
        raise UsageError("--mlperf-tiny needs --device PORT")
    if device is not None:
        return _bench_device(model, device, runs=runs, warmup=warmup, profile=profile, mlperf_tiny=mlperf_tiny,
                             allow_unsigned=allow_unsigned, json_out=json_out)
    names = check_engines(e.strip() for e in engines.split(",") if e.strip())
    if runs < 1:
        raise UsageError(f"--runs must be at least 1, not {runs}")
    if not idle >= 0 or not interval > 0:
        raise UsageError("--idle must be 0 or more and --sample-interval more than 0 seconds")
    if subtract_idle and (idle == 0 or power_w is not None):
        raise UsageError("--subtract-idle needs an idle measurement (--idle > 0) from a measured source, "
                         "not --power-w")
    if report_path is not None and report_path.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"--report {report_path}: give a .html file")
    if report_path is not None:
        from edgerun._fs import check_output

        check_output(report_path, model, what="--report")  # a folder, a missing folder, the model itself
    from edgerun.check import model_bytes

    data, _, manifest = model_bytes(model)  # a .tflite, or a bundle / deploy `current` link by content
    if use_loadgen is None:
        use_loadgen = loadgen_version() is not None
    if use_loadgen and loadgen_dir is None and report_path is not None:
        loadgen_dir = report_path.with_suffix(".mlperf")
    dl = [d.strip() for d in delegate.split(",")] if delegate else None
    source, found = select(power_source, meter=power_meter, power_w=power_w)
    if min_duration is None:
        min_duration = 1.0 if source is not None else 0.0
    tel = Telemetry(source, ThermalProbe(), interval=interval)
    with progress("benchmarking", enabled=not json_out) as cb:
        report = benchmark(data, runs=runs, warmup=warmup, num_threads=threads, engines=names,
                           delegates=dl, progress=cb, scenario=scenario, min_duration=min_duration,
                           batch=batch, telemetry=tel,
                           idle_s=idle if source is not None and power_w is None else 0.0,
                           subtract_idle=subtract_idle, profile=profile, loadgen=use_loadgen,
                           loadgen_dir=loadgen_dir)
    report["model"] = str(model)
    if manifest is not None:
        report["bundle"] = {k: manifest.get(k) for k in ("name", "version", "target", "model_sha256")
                            if k in manifest}
    report["energy"]["available_sources"] = found
    if report_path is not None:
        from edgerun.bench.report import write_bench_report

        write_bench_report(report, report_path)
        report["report"] = str(report_path)
    if json_out:
        emit_json(report)
        return
    c = console()
    rules = report["rules"]
    head = "p90 latency" if scenario == "single-stream" else "inferences/s"
    print_table(report, f"{model.name}: {scenario} (headline: {head}), {threads} thread(s), "
                f"driver {rules['driver']}", c)
    e = report["engines"].get("edgerun", {})
    if "arena_bytes" in e:
        c.print(f"edgerun arena {e['arena_bytes']:,} B, peak transient {e['peak_transient_bytes']:,} B")
    if e.get("profile"):
        c.print("edgerun per op type (ms per invoke): "
                + ", ".join(f"{p['op']} {p['ms']:.3f}" for p in e["profile"]), highlight=False)
    if "delegation" in e:
        from edgerun.delegate import coverage_lines

        for line in coverage_lines(e["delegation"]):
            c.print(line)
    if report_path is not None:
        c.print(f"report: {report_path}", highlight=False)
    if use_loadgen and loadgen_dir is not None:
        c.print(f"LoadGen logs: {loadgen_dir}/<engine>/mlperf_log_summary.txt", highlight=False)


def _bench_device(model: Path, port: str, *, runs: int, warmup: int, profile: bool, mlperf_tiny: bool,
                  allow_unsigned: bool, json_out: bool) -> None:
    """`bench --device`: the board's own latency figures, arena and flash use (edgerun.bench.device)."""
    if mlperf_tiny:
        from edgerun.bench.device import bench_mlperf_tiny

        report = bench_mlperf_tiny(model, port, runs=runs, warmup=min(warmup, runs),
                                   allow_unsigned=allow_unsigned)
    else:
        from edgerun.bench.device import bench_device

        report = bench_device(model, port, runs=runs, warmup=warmup, profile=profile,
                              allow_unsigned=allow_unsigned)
    report["model"] = str(model)
    if json_out:
        emit_json(report)
        return
    c = console()
    d = report["device"]
    print_table(report, f"{model.name} on {d['board']} ({d['port']}): latency from the firmware's timer", c)
    if "arena_bytes" in d:
        c.print(f"arena {d['arena_bytes']:,} of {d['arena_capacity_bytes']:,} B RAM, model {d['flash_bytes']:,} B "
                f"in a {d['slot_bytes']:,} B flash slot", highlight=False)
    c.print(f"timer: {d['timer']}", highlight=False)
    prof = report.get("profile")
    if prof:
        c.print(f"per op type (us per inference, {len(prof['ops'])} ops, {prof['total_us']:,} us): "
                + ", ".join(f"{p['op']} x{p['count']} {p['us']:,} ({p['share']:.0%})" for p in prof["by_type"]),
                highlight=False)
        for o in sorted(prof["ops"], key=lambda o: -o["us"])[:10]:
            c.print(f"  op {o['index']:4d} {o['op']:<24} {o['us']:>10,} us", highlight=False)
    mt = report.get("mlperf_tiny")
    if mt:
        pf, ac = mt["performance"], mt["accuracy"]
        c.print(f"MLPerf Tiny performance: median {pf['median_us_per_inference']:,.1f} us per inference "
                f"({pf['repeats']} x infer {pf['inferences_per_repeat']} {pf['warmup']}; DUT {d['dut_name']})",
                highlight=False)
        if ac["samples"]:
            c.print(f"MLPerf Tiny accuracy mode: top-1 equal to edgerun's host interpreter on {ac['top1_agree']} of "
                    f"{ac['samples']} samples, largest difference {ac['max_abs_diff']:.6f}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_cli)
