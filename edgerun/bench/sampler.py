"""One background thread that samples power and thermal state while a benchmark runs.

Power sources of both kinds end up as one cumulative-energy curve ``E(t)`` (joules against
``time.perf_counter()`` seconds): energy counters directly (wrap-arounds already unrolled by the
source), instantaneous power by trapezoid integration between samples. The energy of a window
``[t0, t1]`` is ``E(t1) - E(t0)``, with ``E`` interpolated linearly between samples, so a window
does not have to start or end on a sample.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from edgerun.bench import thermal as _thermal

#: default seconds between samples (RAPL updates about every 1 ms, hwmon rail monitors every
#: few ms, a Bluetooth USB meter answers a few times a second: it sets its own pace)
DEFAULT_INTERVAL = 0.02


class Telemetry:
    """Samples ``source`` (a PowerSource or None) and the thermal probe every ``interval`` s."""

    def __init__(self, source=None, probe: _thermal.ThermalProbe | None = None,
                 interval: float = DEFAULT_INTERVAL):
        self.source, self.probe, self.interval = source, probe, interval
        self.t: list[float] = []       # power sample times
        self.raw: list[float] = []     # joules (energy sources) or watts (power sources)
        self.tt: list[float] = []      # thermal sample times
        self.temps: list[dict] = []
        self.freqs: list[dict] = []
        self.missed = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # a sample's time and value are appended together

    def _sample(self) -> None:
        if self.source is not None:
            try:
                before = time.perf_counter()
                v = self.source.read()
                # the reading belongs between the two clocks (a serial meter takes ~0.1 s to answer)
                stamp = (before + time.perf_counter()) / 2
                with self._lock:
                    self.t.append(stamp)
                    self.raw.append(float(v))
            except Exception as e:  # a sampler must not die: a missed sample is counted, not fatal
                self.missed += 1
                self.last_error = f"{type(e).__name__}: {e}"
        if self.probe is not None and self.probe.found:
            temps, freqs = self.probe.read()
            with self._lock:
                self.tt.append(time.perf_counter())
                self.temps.append(temps)
                self.freqs.append(freqs)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def start(self) -> "Telemetry":
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="edgerun-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()  # one last sample so a window ending now is covered

    def wait_samples(self, n: int = 2, timeout: float = 5.0) -> None:
        """Block until at least ``n`` power samples exist (a slow meter needs a moment)."""
        end = time.perf_counter() + timeout
        while len(self.t) < n and time.perf_counter() < end:
            time.sleep(self.interval / 2)

    def wait_past(self, t: float, timeout: float = 5.0) -> None:
        """Block until a power sample stamped after ``t`` exists, so that the samples cover a window
        ending at ``t`` (counting samples is not enough: a reading requested before ``t`` may be
        appended after it, when the meter answers)."""
        end = time.perf_counter() + timeout
        while time.perf_counter() < end:
            with self._lock:
                if self.t and self.t[-1] > t:
                    return
            time.sleep(self.interval / 2)

    # ---- analysis ----------------------------------------------------------------------------

    def _power_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """A consistent snapshot of (times, values) while the sampling thread may still append."""
        with self._lock:
            return np.asarray(self.t, dtype=np.float64), np.asarray(self.raw, dtype=np.float64)

    def energy_curve(self) -> tuple[np.ndarray, np.ndarray]:
        t, v = self._power_samples()
        if self.source is None or len(t) == 0:
            return t, v
        if self.source.kind == "energy":
            return t, v - v[0]
        e = np.concatenate([[0.0], np.cumsum(np.diff(t) * (v[1:] + v[:-1]) / 2)])
        return t, e

    def power_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """Watts against time (for plots): measured values, or the counter's slope between samples."""
        t, v = self._power_samples()
        if self.source is None or len(t) < 2 or self.source.kind == "power":
            return t, v
        dt = np.diff(t)
        ok = dt > 0
        return ((t[1:] + t[:-1]) / 2)[ok], (np.diff(v)[ok] / dt[ok])

    def window_energy(self, t0: float, t1: float) -> float | None:
        """Joules spent in ``[t0, t1]``, or None where the samples do not cover the window."""
        t, e = self.energy_curve()
        if len(t) < 2 or t0 < t[0] or t1 > t[-1] or t1 <= t0:
            return None
        return float(np.interp(t1, t, e) - np.interp(t0, t, e))

    def window_samples(self, t0: float, t1: float) -> int:
        t, _ = self._power_samples()
        return int(((t >= t0) & (t <= t1)).sum())

    def thermal_window(self, t0: float, t1: float) -> dict:
        with self._lock:
            tt, temps, freqs = list(self.tt), list(self.temps), list(self.freqs)
        idx = [i for i, s in enumerate(tt) if t0 <= s <= t1]
        return _thermal.summarize(self.probe, [temps[i] for i in idx], [freqs[i] for i in idx])


def energy_figures(tel: Telemetry | None, t0: float, t1: float, inferences: int,
                   idle_w: float | None, subtract_idle: bool) -> dict:
    """The ``energy`` block of a benchmark result for one measured window."""
    if tel is None or tel.source is None:
        return {"source": None, "joules_per_inference": None, "avg_power_w": None, "idle_power_w": None,
                "inferences_per_joule": None}
    src = tel.source
    out = {"source": src.name, "source_label": getattr(src, "label", ""), "source_kind": src.kind,
           "user_supplied": src.name.startswith("user-supplied:"), "idle_power_w": idle_w,
           "idle_subtracted": bool(subtract_idle and idle_w is not None)}
    joules = tel.window_energy(t0, t1)
    dur = t1 - t0
    if joules is None or dur <= 0 or inferences <= 0:
        out.update({"joules_per_inference": None, "avg_power_w": None, "inferences_per_joule": None,
                    "message": "too few power samples inside the measured window"})
        return out
    avg = joules / dur
    spent = (avg - idle_w) * dur if out["idle_subtracted"] else joules
    jpi = spent / inferences
    out.update({"avg_power_w": avg, "energy_j": joules, "attributed_energy_j": spent,
                "duration_s": dur, "inferences": inferences, "samples": tel.window_samples(t0, t1),
                "joules_per_inference": jpi, "inferences_per_joule": (1.0 / jpi) if jpi > 0 else None})
    if out["idle_subtracted"] and spent <= 0:
        out["message"] = "average power during the run was not above idle power"
    return out
