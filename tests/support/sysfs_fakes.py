"""Fake Linux power telemetry for the bench tests: sysfs powercap (RAPL) and hwmon trees in tmpfs
whose counters a thread advances at a known rate, and the thermal/cpufreq files beside them."""

import contextlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path


def realtime_thread() -> None:
    """Run the calling thread (a fake sensor) with real-time priority where allowed (root, as in CI):
    a real counter is never stale, and a fake one starved by a loaded machine would be."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (AttributeError, OSError):  # not Linux, or not permitted: best effort
        pass


def _write(path, value):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{int(value)}\n")
    os.replace(tmp, path)  # a reader never sees a half-written number


class FakeRail:
    """Advances an energy counter (uJ, wrapping at ``wrap``) and/or writes power (uW) or
    voltage (mV) x current (mA) files every 2 ms, at ``watts`` (changeable while it runs)."""

    def __init__(self, watts, energy=None, wrap=None, power=None, volts=None, curr=None, mv=5000.0):
        self.watts, self.energy, self.wrap, self.power = watts, energy, wrap, power
        self.volts, self.curr, self.mv = volts, curr, mv
        self.joules = 0.0
        self.wraps = 0
        self.stop = threading.Event()
        self._write_all()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _write_all(self):
        if self.energy is not None:
            uj = self.joules * 1e6
            if self.wrap:
                self.wraps = int(uj // self.wrap)
                uj %= self.wrap
            _write(self.energy, uj)
        if self.power is not None:
            _write(self.power, self.watts * 1e6)
        if self.volts is not None:
            _write(self.volts, self.mv)
            _write(self.curr, self.watts * 1e6 / self.mv)  # mA such that mV * mA = uW

    def _run(self):
        realtime_thread()
        last = time.perf_counter()
        while not self.stop.is_set():
            time.sleep(0.002)
            now = time.perf_counter()
            self.joules += self.watts * (now - last)
            last = now
            self._write_all()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def make_powercap(root, wrap_uj=2_000_000):
    z = root / "class" / "powercap" / "intel-rapl:0"
    z.mkdir(parents=True)
    (z / "name").write_text("package-0\n")
    (z / "max_energy_range_uj").write_text(f"{wrap_uj}\n")
    (z / "energy_uj").write_text("0\n")
    sub = root / "class" / "powercap" / "intel-rapl:0:0"  # core, inside package 0: not counted twice
    sub.mkdir()
    (sub / "name").write_text("core\n")
    (sub / "energy_uj").write_text("123\n")
    (sub / "max_energy_range_uj").write_text(f"{wrap_uj}\n")
    return z / "energy_uj"


def make_hwmon(root):
    d = root / "class" / "hwmon" / "hwmon0"
    d.mkdir(parents=True)
    (d / "name").write_text("ina3221\n")
    (d / "in1_label").write_text("VDD_IN\n")
    (d / "energy1_input").write_text("0\n")
    (d / "power1_input").write_text("0\n")
    return d


def make_thermal(root, temp_c=45.0):
    z = root / "class" / "thermal" / "thermal_zone0"
    z.mkdir(parents=True)
    (z / "type").write_text("x86_pkg_temp\n")
    (z / "temp").write_text(f"{int(temp_c * 1000)}\n")
    (z / "trip_point_0_temp").write_text("80000\n")
    (z / "trip_point_0_type").write_text("passive\n")
    f = root / "devices" / "system" / "cpu" / "cpu0" / "cpufreq"
    f.mkdir(parents=True)
    (f / "scaling_cur_freq").write_text("2400000\n")
    return z / "temp", f / "scaling_cur_freq"


@contextlib.contextmanager
def memory_dir():
    """A directory in memory (tmpfs), as sysfs is: on a disk-backed /tmp a loaded machine can stall
    the fake sensor's writes for a few hundred ms, which no real counter does."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    d = tempfile.mkdtemp(prefix="edgerun-sys-", dir=base)
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
