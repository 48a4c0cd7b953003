"""MLPerf Inference scenarios for one engine: single-stream and offline.

- **single-stream**: one sample per query, the next query issued when the previous one is done;
  the headline is the 90th-percentile latency. A run lasts until both the minimum query count
  and the minimum duration are met; warm-up queries come first and are not counted.
- **offline**: all samples available at once; the system processes them as it likes (here:
  ``batch`` samples per invoke, on ``threads`` worker threads, each with its own interpreter);
  the headline is throughput in samples per second. A run lasts until at least the minimum
  number of samples is processed and the minimum duration has passed.

Where MLPerf's LoadGen (``mlcommons-loadgen``, the ``edgerun[loadgen]`` extra) is installed,
:func:`run_loadgen` lets LoadGen issue the queries and time the run; its
``mlperf_log_summary.txt`` / ``mlperf_log_detail.txt`` land in the directory given. Otherwise
:func:`run_own` follows the same rules. Both return a :class:`Run` holding every invoke's start
time and latency, measured by edgerun with ``time.perf_counter`` around the invoke.
"""

from __future__ import annotations

import queue
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgerun.errors import UsageError

SCENARIOS = ("single-stream", "offline")

KERNEL_PATHS = {
    "edgerun": "edgerun kernels (numpy, and edgerun.native's C loops where built; bit-exact with LiteRT's reference kernels)",
    "litert": "LiteRT built-in optimized kernels (XNNPACK off)",
    "litert-xnnpack": "LiteRT with the XNNPACK delegate",
}


@dataclass
class Run:
    """What one timed run measured: per-invoke start times and latencies (seconds)."""

    starts: list = field(default_factory=list)
    latencies: list = field(default_factory=list)
    t0: float = 0.0
    t1: float = 0.0
    samples: int = 0            # inferences (queries x samples per query)
    driver: str = "edgerun"
    loadgen: dict | None = None

    @property
    def duration(self) -> float:
        return self.t1 - self.t0


class Runner:
    """One interpreter of one engine with its inputs set; ``invoke()`` runs one batch."""

    def __init__(self, engine: str, model: bytes, *, num_threads: int, delegates, batch: int, seed: int):
        from edgerun.testing import random_inputs

        self.engine, self.batch = engine, batch
        if engine == "edgerun":
            from edgerun.runtime.interpreter import Interpreter

            from edgerun import native

            it = Interpreter(model_content=model, num_threads=num_threads, delegates=delegates or None)
            self.kernel_path = KERNEL_PATHS[engine] + (f", delegates {','.join(delegates)}"
                                                       if delegates else "")
            # whether the C loops ran (edgerun.native): the figures differ by 1.5-2x without them
            self.kernel_path += "; " + native.status()
        else:
            from edgerun.litert import make_interpreter

            it = make_interpreter(model, xnnpack=(engine == "litert-xnnpack"), num_threads=num_threads)
            self.kernel_path = KERNEL_PATHS[engine]
        if batch > 1:
            for d in it.get_input_details():
                shape = [int(s) for s in d["shape"]]
                if not shape or shape[0] != 1:
                    raise UsageError(f"--batch {batch}: input {d['name']!r} has shape {shape}, "
                                     "no batch dimension of 1 to grow")
                try:
                    it.resize_tensor_input(d["index"], [batch] + shape[1:])
                except Exception as e:  # LiteRT raises ValueError/RuntimeError with its own text
                    raise UsageError(f"--batch {batch}: {engine} cannot resize input {d['name']!r}: "
                                     f"{e}") from e
        try:
            it.allocate_tensors()
            details = it.get_input_details()
            for d, x in zip(details, random_inputs(details, seed)):
                it.set_tensor(d["index"], x)
            if batch > 1:
                it.invoke()  # a reshape to a fixed batch of 1 inside the model fails here
        except Exception as e:
            if batch > 1:  # LiteRT raises ValueError/RuntimeError, edgerun its own errors
                raise UsageError(f"--batch {batch}: {engine} cannot run this model batched "
                                 f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from e
            raise
        self.interp = it
        self.invoke = it.invoke


def _check_rules(scenario: str, runs: int, warmup: int, min_duration: float, threads: int,
                 batch: int) -> None:
    if scenario not in SCENARIOS:
        raise UsageError(f"--scenario {scenario!r}: choose from {', '.join(SCENARIOS)}")
    if runs < 1:
        raise UsageError(f"--runs must be at least 1, not {runs}")
    if warmup < 0:
        raise UsageError(f"--warmup must be 0 or more, not {warmup}")
    if not min_duration >= 0:
        raise UsageError(f"--min-duration must be 0 or more seconds, not {min_duration}")
    if threads < 1:
        raise UsageError(f"--threads must be at least 1, not {threads}")
    if batch < 1:
        raise UsageError(f"--batch must be at least 1, not {batch}")
    if batch > 1 and scenario != "offline":
        raise UsageError("--batch applies to --scenario offline (single-stream queries are one sample)")


def run_own(scenario: str, runners: list[Runner], *, min_queries: int, min_duration: float, warmup: int,
            progress=None) -> Run:
    """edgerun's own loop, following the scenario's rules."""
    for r in runners:
        for _ in range(warmup):
            r.invoke()
    run = Run()
    clock = time.perf_counter
    if scenario == "single-stream":
        inv = runners[0].invoke
        run.t0 = clock()
        i = 0
        while i < min_queries or clock() - run.t0 < min_duration:
            t = clock()
            inv()
            run.latencies.append(clock() - t)
            run.starts.append(t)
            i += 1
            if progress:
                progress(i, max(min_queries, i))
        run.t1 = clock()
        run.samples = i
        return run
    # offline: workers pull batches until the sample count and the duration are both met
    spi = runners[0].batch
    lock = threading.Lock()
    state = {"issued": 0, "done": 0}
    records: list[tuple[float, float]] = []
    barrier = threading.Barrier(len(runners) + 1)
    errors: list[BaseException] = []

    def worker(r: Runner):
        barrier.wait()
        try:
            while True:
                with lock:
                    if state["issued"] >= min_queries and clock() - run.t0 >= min_duration:
                        return
                    state["issued"] += spi
                t = clock()
                r.invoke()
                lat = clock() - t
                with lock:
                    records.append((t, lat))
                    state["done"] += spi
        except BaseException as e:  # surfaced in the caller's thread below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(r,), daemon=True) for r in runners]
    for th in threads:
        th.start()
    run.t0 = clock()
    barrier.wait()
    while any(th.is_alive() for th in threads):
        threads[0].join(0.1) if threads[0].is_alive() else time.sleep(0.05)
        if progress:
            progress(state["done"], max(min_queries, state["done"]))
    for th in threads:
        th.join()
    run.t1 = clock()
    if errors:
        raise errors[0]
    records.sort()
    run.starts = [s for s, _ in records]
    run.latencies = [lat for _, lat in records]
    run.samples = state["done"]
    return run


def loadgen_version() -> str | None:
    """LoadGen's version where ``mlperf_loadgen`` imports, else None."""
    try:
        import mlperf_loadgen  # noqa: F401
    except ImportError:
        return None
    try:
        from importlib.metadata import version

        return version("mlcommons-loadgen")
    except Exception:  # an unusual install without metadata still works
        return "unknown"


def parse_summary(text: str) -> dict:
    """``key : value`` lines of mlperf_log_summary.txt (the figures LoadGen publishes)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z0-9][^:]*?)\s*:\s*(\S.*)$", line)
        if m:
            k, v = m.group(1), m.group(2).strip()
            if k not in out:
                try:
                    out[k] = int(v) if v.lstrip("-").isdigit() else float(v)
                except ValueError:
                    out[k] = v
    return out


def run_loadgen(scenario: str, runners: list[Runner], *, min_queries: int, min_duration: float, warmup: int,
                outdir: Path | None, progress=None) -> Run:
    """Let MLPerf LoadGen drive the run; logs go to ``outdir`` (a temp dir, removed, if None)."""
    import mlperf_loadgen as lg

    spi = runners[0].batch
    # LoadGen sizes the run from the expected rate: measure it after the warm-up (a short pass of
    # the same loop, not counted), so a busy machine does not turn 1 s into 10
    probe = run_own(scenario, runners, min_queries=max(1, len(runners)), min_duration=0.2,
                    warmup=max(warmup, 1))
    expected = float(np.median(probe.latencies))
    rate = probe.samples / probe.duration if probe.duration > 0 else spi / expected
    run = Run(driver=f"mlperf-loadgen {loadgen_version()}")
    clock = time.perf_counter
    records: list[tuple[float, float]] = []
    lock = threading.Lock()
    counted = {"n": 0}

    def complete(ids):
        lg.QuerySamplesComplete([lg.QuerySampleResponse(i, 0, 0) for i in ids])

    if scenario == "single-stream":
        inv = runners[0].invoke

        def issue(qs):
            for q in qs:
                t = clock()
                inv()
                records.append((t, clock() - t))
                complete([q.id])
                counted["n"] += 1
                if progress:
                    progress(counted["n"], max(min_queries, counted["n"]))
    else:
        def issue(qs):
            work: queue.Queue = queue.Queue()
            ids = [q.id for q in qs]
            for i in range(0, len(ids), spi):
                work.put(ids[i:i + spi])
            errors: list[BaseException] = []

            def worker(r: Runner):
                try:
                    while True:
                        try:
                            chunk = work.get_nowait()
                        except queue.Empty:
                            return
                        t = clock()
                        r.invoke()
                        lat = clock() - t
                        with lock:
                            records.append((t, lat))
                            counted["n"] += len(chunk)
                        complete(chunk)
                except BaseException as e:
                    errors.append(e)
                    while True:  # LoadGen waits for every sample: answer the rest
                        try:
                            complete(work.get_nowait())
                        except queue.Empty:
                            return

            ths = [threading.Thread(target=worker, args=(r,), daemon=True) for r in runners]
            for th in ths:
                th.start()
            for th in ths:
                th.join()
            if errors:
                run.loadgen_error = errors[0]

    tmp = None
    if outdir is None:
        tmp = outdir = Path(tempfile.mkdtemp(prefix="edgerun-loadgen-"))
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--loadgen-dir {outdir}: {e.strerror}") from None
    for attempt in range(3):
        settings = lg.TestSettings()
        settings.scenario = (lg.TestScenario.SingleStream if scenario == "single-stream"
                             else lg.TestScenario.Offline)
        settings.mode = lg.TestMode.PerformanceOnly
        settings.min_duration_ms = int(min_duration * 1000)
        settings.min_query_count = int(min_queries)
        if scenario == "single-stream":
            settings.single_stream_expected_latency_ns = max(1, int(expected * 1e9))
        else:
            settings.offline_expected_qps = max(1.0, rate)
        log = lg.LogSettings()
        log.log_output.outdir = str(outdir)
        log.log_output.copy_summary_to_stdout = False
        log.enable_trace = False
        records.clear()
        counted["n"] = 0
        sut = lg.ConstructSUT(issue, lambda: None)
        qsl = lg.ConstructQSL(1024, 1024, lambda s: None, lambda s: None)  # one input, reused
        try:
            run.t0 = clock()
            lg.StartTestWithLogSettings(sut, qsl, settings, log)
            run.t1 = clock()
        finally:
            lg.DestroyQSL(qsl)
            lg.DestroySUT(sut)
        err = getattr(run, "loadgen_error", None)
        if err is not None:
            raise err
        # offline: LoadGen issues expected_qps x min_duration samples at once; when the machine ran
        # faster than the estimate the run is too short (INVALID): size it again from this run
        done_in = max(s + lat for s, lat in records) - min(s for s, _ in records) if records else 0.0
        if scenario != "offline" or done_in >= min_duration or done_in <= 0:
            break
        rate = 1.25 * counted["n"] / done_in
    summary_path = outdir / "mlperf_log_summary.txt"
    summary = parse_summary(summary_path.read_text()) if summary_path.exists() else {}
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    records.sort()
    run.starts = [s for s, _ in records]
    run.latencies = [lat for _, lat in records]
    run.samples = counted["n"]
    if records:  # the measured window: first issue to last completion, not LoadGen's setup
        run.t0 = records[0][0]
        run.t1 = max(s + lat for s, lat in records)
    run.loadgen = {"version": loadgen_version(), "log_dir": None if tmp is not None else str(outdir),
                   "result": summary.get("Result is"), "summary": summary}
    return run
