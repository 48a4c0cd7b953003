"""Latency benchmark: edgerun next to LiteRT (XNNPACK off and on), same model, same run.

Each engine gets the same random inputs, ``warmup`` untimed invokes, then ``runs`` timed ones;
the report gives p50/p90/p99 and mean in milliseconds and, as the headline, edgerun's p50 divided
by each LiteRT engine's p50 (lower is better; 1.0 = as fast as LiteRT). Memory: each engine's
peak growth of the process's resident memory while it is built and run (``PeakRss``; engines run
one after another, and memory a previous engine freed to the allocator can be reused, so treat it
as an upper bound of what the engine itself needs), plus edgerun's planned arena.
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np

from edgerun.errors import EdgerunError

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


def _time(invoke, runs: int, warmup: int, progress, label: str, offset: int, total: int) -> list[float]:
    for _ in range(warmup):
        invoke()
    out = []
    for i in range(runs):
        t0 = time.perf_counter()
        invoke()
        out.append(time.perf_counter() - t0)
        if progress:
            progress(offset + i + 1, total)
    return out


def benchmark(model: bytes, *, runs: int = 50, warmup: int = 5, num_threads: int = 1,
              engines=ENGINES, delegates=None, progress=None, seed: int = 0) -> dict:
    """Benchmark ``model`` on each engine; returns a JSON-able report."""
    from edgerun.runtime.interpreter import Interpreter
    from edgerun.testing import random_inputs

    probe = Interpreter(model_content=model, num_threads=num_threads, delegates=delegates or None)
    details = probe.get_input_details()
    xs = random_inputs(details, seed)
    del probe
    report: dict = {"runs": runs, "warmup": warmup, "threads": num_threads, "engines": {}}
    total = runs * len(engines)
    done = 0
    for eng in engines:
        if eng == "edgerun":
            with PeakRss() as mem:
                it = Interpreter(model_content=model, num_threads=num_threads, delegates=delegates or None)
                it.allocate_tensors()
                for d, x in zip(details, xs):
                    it.set_tensor(d["index"], x)
                tracemalloc.start()
                it.invoke()
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                samples = _time(it.invoke, runs, warmup, progress, eng, done, total)
            r = _stats(samples)
            r["arena_bytes"] = it.arena_bytes
            r["peak_transient_bytes"] = int(peak)
            if it.partitions:
                from edgerun.delegate import coverage

                r["delegation"] = coverage(it)
        else:
            from edgerun._litert import make_interpreter

            try:
                with PeakRss() as mem:
                    lt = make_interpreter(model, xnnpack=(eng == "litert-xnnpack"), num_threads=num_threads)
                    lt.allocate_tensors()
                    for d, x in zip(lt.get_input_details(), xs):
                        lt.set_tensor(d["index"], x)
                    samples = _time(lt.invoke, runs, warmup, progress, eng, done, total)
            except EdgerunError as e:
                report["engines"][eng] = {"error": str(e)}
                done += runs
                continue
            r = _stats(samples)
        r["peak_rss_growth_bytes"] = mem.bytes
        report["engines"][eng] = r
        done += runs
    base = report["engines"].get("edgerun", {}).get("p50_ms")
    if base:
        report["ratios"] = {f"edgerun/{e}": base / v["p50_ms"] for e, v in report["engines"].items()
                            if e != "edgerun" and "p50_ms" in v}
    return report
