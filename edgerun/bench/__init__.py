"""Benchmarks as the field runs them: latency, throughput, energy and thermal state, per engine.

Each engine (edgerun, LiteRT with XNNPACK off, LiteRT with XNNPACK on) gets the same random
inputs and runs under an MLPerf Inference scenario (:mod:`edgerun.bench.scenarios`):
single-stream (latency percentiles, p90 the headline) or offline (throughput with batching and
threads), warm-up excluded, until a minimum query count and a minimum duration are both met;
driven by MLPerf's LoadGen where it is installed and asked for, by edgerun's own loop otherwise.
While it runs, a background thread samples power (:mod:`edgerun.bench.power`) and thermal state
(:mod:`edgerun.bench.thermal`); energy per inference comes from that telemetry only, with idle
power measured before the first engine and subtracted on request.

The ratio headline stays: edgerun's p50 divided by each LiteRT engine's p50 (lower is better).
Memory: each engine's peak growth of the process's resident memory while it is built and run
(``PeakRss``; engines run one after another, and memory a previous engine freed to the allocator
can be reused, so treat it as an upper bound), plus edgerun's planned arena.
"""

from __future__ import annotations

import hashlib
import time
import tracemalloc
from pathlib import Path

import numpy as np

from edgerun.bench.power import sysfs_root
from edgerun.bench.sampler import Telemetry, energy_figures
from edgerun.bench.scenarios import (
    SCENARIOS,
    Run,
    Runner,
    _check_rules,
    loadgen_version,
    run_loadgen,
    run_own,
)
from edgerun.errors import EdgerunError, UsageError

__all__ = ["ENGINES", "SCENARIOS", "PeakRss", "Run", "Telemetry", "benchmark", "check_engines",
           "engine_result"]

ENGINES = ("edgerun", "litert", "litert-xnnpack")


def _stats(samples: list[float]) -> dict:
    a = np.array(samples) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "mean_ms": float(a.mean()), "runs": len(samples)}


def _proc_status(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class PeakRss:
    """Peak growth of this process's resident memory over a block, in bytes.

    Linux only: resets the high-water mark (``/proc/self/clear_refs``), then reads ``VmHWM``
    against the resident size at entry. ``bytes`` stays None where that is not possible. It sees
    native allocations too (LiteRT's arena, BLAS buffers), which tracemalloc cannot.
    """

    def __enter__(self):
        self.bytes = None
        self.base = _proc_status("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.reset = True
        except OSError:
            self.reset = False
        return self

    def __exit__(self, *exc):
        hwm = _proc_status("VmHWM")
        if self.reset and self.base is not None and hwm is not None:
            self.bytes = max(0, hwm - self.base)
        return False


def engine_result(run: Run, *, kernel_path: str, origin: float = 0.0) -> dict:
    """One engine's entry of a report from a timed :class:`Run` (host, board or MCU runs alike:
    the MCU path fills a Run with the device's per-invoke latencies and gets the same fields)."""
    if not run.latencies:
        raise EdgerunError("no timed invokes to report")
    r = _stats(run.latencies)
    r["latency_ms"] = {k[:-3]: r[k] for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms")}
    r["latency_ms"].update(min=min(run.latencies) * 1e3, max=max(run.latencies) * 1e3)
    r.update(queries=len(run.latencies), inferences=run.samples, duration_s=run.duration,
             throughput_ips=run.samples / run.duration if run.duration > 0 else None,
             kernel_path=kernel_path, driver=run.driver, window_s=[run.t0 - origin, run.t1 - origin],
             samples={"start_s": [s - origin for s in run.starts],
                      "latency_ms": [x * 1e3 for x in run.latencies]})
    return r


def check_engines(engines) -> tuple[str, ...]:
    """The engine names, validated: unknown or repeated names are a usage error."""
    names = tuple(engines)
    if not names:
        raise UsageError(f"--engines: give at least one of {', '.join(ENGINES)}")
    bad = [e for e in names if e not in ENGINES]
    if bad:
        raise UsageError(f"--engines: unknown engine {bad[0]!r} (choose from {', '.join(ENGINES)})")
    if len(set(names)) != len(names):
        raise UsageError("--engines: each engine once")
    return names


def _profile(runner, invokes: int) -> list[dict]:
    """ms per invoke and share per op type, from a separate profiled pass (not the timed run)."""
    it = runner.interp
    it.set_profiling(True)
    for _ in range(invokes):
        it.invoke()
    prof = it.profile
    it.set_profiling(False)
    total = sum(prof.values()) or 1.0
    return [{"op": op, "ms": t * 1e3 / invokes, "share": t / total}
            for op, t in sorted(prof.items(), key=lambda kv: -kv[1])]


def benchmark(model: bytes, *, runs: int = 50, warmup: int = 5, num_threads: int = 1,
              engines=ENGINES, delegates=None, progress=None, seed: int = 0,
              scenario: str = "single-stream", min_duration: float = 0.0, batch: int = 1,
              telemetry: Telemetry | None = None, idle_s: float = 0.0, subtract_idle: bool = False,
              profile: bool = False, loadgen: bool = False, loadgen_dir: Path | None = None) -> dict:
    """Benchmark ``model`` on each engine; returns a JSON-able report.

    ``runs`` is the minimum query count (single-stream) or sample count (offline),
    ``min_duration`` the minimum seconds of a run. ``telemetry`` (a :class:`Telemetry`, not yet
    started) is sampled for the whole benchmark; ``idle_s`` seconds of idle power come first.
    ``loadgen``: drive each run through MLPerf LoadGen (logs in ``loadgen_dir/<engine>``).
    """
    from edgerun.runtime.interpreter import Interpreter

    engines = check_engines(engines)
    _check_rules(scenario, runs, warmup, min_duration, num_threads, batch)
    if loadgen and loadgen_version() is None:
        raise UsageError("--loadgen: MLPerf LoadGen is not installed (pip install 'edgerun[loadgen]')")
    # the model must load in edgerun before anything is measured (a one-line error otherwise)
    Interpreter(model_content=model, num_threads=num_threads, delegates=delegates or None)
    offline = scenario == "offline"
    workers = num_threads if offline else 1
    interp_threads = 1 if offline else num_threads
    rules = {"scenario": scenario, "min_queries": runs, "min_duration_s": min_duration, "warmup": warmup,
             "threads": num_threads, "batch": batch, "delegates": list(delegates or []),
             "model_sha256": hashlib.sha256(model).hexdigest(),
             "driver": f"mlperf-loadgen {loadgen_version()}" if loadgen else "edgerun",
             "threads_mean": ("worker threads, one single-threaded interpreter each" if offline
                              else "threads inside the one interpreter")}
    report: dict = {"scenario": scenario, "runs": runs, "warmup": warmup, "threads": num_threads,
                    "rules": rules, "engines": {}, "warnings": []}
    origin = time.perf_counter()
    idle_w = None
    if telemetry is not None:
        telemetry.start()
        if telemetry.source is not None:
            telemetry.wait_samples(2)
            if idle_s > 0:
                t0 = time.perf_counter()
                time.sleep(idle_s)
                t1 = time.perf_counter()
                telemetry.wait_past(t1, timeout=idle_s + 5)
                if telemetry.t:  # a slow source's first reading may come after the idle period began
                    t0 = max(t0, telemetry.t[0])
                e = telemetry.window_energy(t0, t1) if t1 - t0 >= idle_s / 2 else None
                idle_w = e / (t1 - t0) if e is not None else None
                if idle_w is None:
                    report["warnings"].append("idle power: too few power samples during the idle period")
                report["idle_window_s"] = [t0 - origin, t1 - origin]
    total = runs * len(engines)
    done = 0
    try:
        for eng in engines:
            cb = (lambda i, n, _d=done: progress(_d + min(i, runs), total)) if progress else None
            try:
                with PeakRss() as mem:
                    own = delegates if eng == "edgerun" else None
                    runners = [Runner(eng, model, num_threads=interp_threads, delegates=own, batch=batch,
                                      seed=seed) for _ in range(workers)]
                    peak = None
                    if eng == "edgerun":
                        tracemalloc.start()
                        runners[0].invoke()
                        _, peak = tracemalloc.get_traced_memory()
                        tracemalloc.stop()
                    kw = dict(min_queries=runs, min_duration=min_duration, warmup=warmup, progress=cb)
                    if loadgen:
                        out = Path(loadgen_dir) / eng if loadgen_dir else None
                        run = run_loadgen(scenario, runners, outdir=out, **kw)
                    else:
                        run = run_own(scenario, runners, **kw)
            except UsageError:
                raise
            except EdgerunError as e:
                if eng == "edgerun":
                    raise
                report["engines"][eng] = {"error": str(e)}
                done += runs
                continue
            if telemetry is not None and telemetry.source is not None:
                telemetry.wait_past(run.t1, timeout=5)
            r = engine_result(run, kernel_path=runners[0].kernel_path, origin=origin)
            if run.loadgen:
                r["loadgen"] = run.loadgen
            r["energy"] = energy_figures(telemetry, run.t0, run.t1, run.samples, idle_w, subtract_idle)
            if telemetry is not None:
                r["thermal"] = telemetry.thermal_window(run.t0, run.t1)
                for w in r["thermal"].get("warnings", []):
                    report["warnings"].append(f"{eng}: {w}")
            if eng == "edgerun":
                r["arena_bytes"] = runners[0].interp.arena_bytes
                r["peak_transient_bytes"] = int(peak)
                if runners[0].interp.partitions:
                    from edgerun.delegate import coverage

                    r["delegation"] = coverage(runners[0].interp)
                if profile:
                    r["profile"] = _profile(runners[0], max(1, min(runs, 20)))
            r["peak_rss_growth_bytes"] = mem.bytes
            report["engines"][eng] = r
            done += runs
    finally:
        if telemetry is not None:
            telemetry.stop()
            if telemetry.source is not None:
                telemetry.source.close()
    base = report["engines"].get("edgerun", {}).get("p50_ms")
    if base:
        report["ratios"] = {f"edgerun/{e}": base / v["p50_ms"] for e, v in report["engines"].items()
                            if e != "edgerun" and "p50_ms" in v}
    head = next((v for v in report["engines"].values() if "latency_ms" in v), None)
    if head is not None:
        report["latency_ms"] = head["latency_ms"]
        report["throughput_ips"] = head["throughput_ips"]
        report["energy"] = dict(head["energy"])
        report["energy"]["engine"] = next(e for e, v in report["engines"].items() if v is head)
    if telemetry is not None:
        report["energy"] = report.get("energy") or energy_figures(None, 0, 0, 0, None, False)
        if telemetry.source is None:
            report["energy"]["message"] = ("no power source found (powercap, hwmon, NVML) under "
                                           f"{sysfs_root()}; no energy figures")
        report["energy"]["idle_power_w"] = idle_w
        windows = [v["window_s"] for v in report["engines"].values() if "window_s" in v]
        th = telemetry.thermal_window(origin + windows[0][0], origin + windows[-1][1]) if windows else {}
        report["thermal"] = th
        tp, wp = telemetry.power_curve()
        report["telemetry"] = {
            "interval_s": telemetry.interval, "missed_samples": telemetry.missed,
            "last_error": telemetry.last_error,
            "power": {"t_s": [t - origin for t in tp], "w": list(map(float, wp)),
                      "summary": {"samples": len(telemetry.t),
                                  "min_w": float(np.min(wp)) if len(wp) else None,
                                  "max_w": float(np.max(wp)) if len(wp) else None,
                                  "mean_w": float(np.mean(wp)) if len(wp) else None}},
            "thermal": {"samples": len(telemetry.tt), "t_s": [t - origin for t in telemetry.tt],
                        "temp_c": telemetry.temps,
                        "cpu_mhz": telemetry.freqs},
            "thermal_probe": telemetry.probe.describe() if telemetry.probe is not None else None}
    return report
