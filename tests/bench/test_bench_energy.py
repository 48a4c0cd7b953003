"""Energy per inference from sysfs power telemetry: powercap (RAPL, with wrap-around) and hwmon
(energy, power, voltage x current) trees in a temp dir whose counters a thread advances at a known
rate; EDGERUN_SYSFS_ROOT points discovery at them. Figures must match the rate within 5 %."""

import json
import os
import subprocess
import sys
import time

import pytest

from edgerun.bench.power import PowercapSource, discover, hwmon_sources, powercap_sources, select
from edgerun.bench.sampler import Telemetry, energy_figures
from edgerun.errors import UsageError
from edgerun.ir import ModelBuilder
from tests.support.sysfs_fakes import FakeRail, make_hwmon, make_powercap, make_thermal, memory_dir


@pytest.fixture
def sysroot(monkeypatch):
    with memory_dir() as root:
        monkeypatch.setenv("EDGERUN_SYSFS_ROOT", str(root))
        yield root


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    b = ModelBuilder()
    x = b.input("x", (1, 64), "int8", (0.1, 0))
    y = b.tensor("y", (1, 64), "int8", (0.1, 0))
    b.op("RELU", [x], [y])
    b.output(y)
    p = tmp_path_factory.mktemp("m") / "tiny.tflite"
    p.write_bytes(b.to_bytes())
    return p


def test_powercap_discovery_sums_packages_only(sysroot):
    make_powercap(sysroot)
    found = powercap_sources()
    assert [s.name for s in found] == ["powercap:intel-rapl:0"]
    assert found[0].kind == "energy"


def test_powercap_counter_unrolls_wrap_around(sysroot):
    f = make_powercap(sysroot, wrap_uj=1000)
    src = PowercapSource([f.parent])
    for raw, want in [(100, 100), (900, 900), (50, 1050), (700, 1700), (10, 2010)]:
        f.write_text(f"{raw}\n")
        assert src.read() == pytest.approx(want * 1e-6)


def test_idle_and_run_power_from_a_wrapping_rapl_counter(sysroot):
    """3 W idle, then 10 W: wraps every 0.4 s at 10 W (4 J range), about 5 times in this test."""
    f = make_powercap(sysroot, wrap_uj=4_000_000)
    with FakeRail(3.0, energy=f, wrap=4_000_000) as rail:
        (src,) = discover(include_nvml=False)
        tel = Telemetry(src, interval=0.01).start()
        time.sleep(0.05)
        i0 = time.perf_counter()
        time.sleep(1.5)
        i1 = time.perf_counter()
        rail.watts = 10.0
        time.sleep(0.05)
        r0 = time.perf_counter()
        time.sleep(1.5)
        r1 = time.perf_counter()
        time.sleep(0.05)
        tel.stop()
    assert rail.wraps >= 4
    idle = tel.window_energy(i0, i1) / (i1 - i0)
    assert idle == pytest.approx(3.0, rel=0.05)
    fig = energy_figures(tel, r0, r1, 200, idle, subtract_idle=False)
    assert fig["source"] == "powercap:intel-rapl:0"
    assert fig["avg_power_w"] == pytest.approx(10.0, rel=0.05)
    assert fig["joules_per_inference"] == pytest.approx(10.0 * (r1 - r0) / 200, rel=0.05)
    assert fig["inferences_per_joule"] == pytest.approx(1 / fig["joules_per_inference"])
    net = energy_figures(tel, r0, r1, 200, idle, subtract_idle=True)
    assert net["idle_subtracted"] and net["idle_power_w"] == pytest.approx(3.0, rel=0.05)
    assert net["joules_per_inference"] == pytest.approx(7.0 * (r1 - r0) / 200, rel=0.05)


@pytest.mark.parametrize("what", ["energy", "power", "vi"])
def test_hwmon_channels(sysroot, what):
    d = make_hwmon(sysroot)
    kw = {"energy": {"energy": d / "energy1_input"}, "power": {"power": d / "power1_input"},
          "vi": {"volts": d / "in1_input", "curr": d / "curr1_input"}}[what]
    with FakeRail(4.2, **kw):
        srcs = {s.name: s for s in hwmon_sources()}
        name = {"energy": "hwmon:ina3221:energy1", "power": "hwmon:ina3221:power1",
                "vi": "hwmon:ina3221:VDD_IN"}[what]
        src = srcs[name]
        tel = Telemetry(src, interval=0.01).start()
        time.sleep(0.05)
        t0 = time.perf_counter()
        time.sleep(1.5)
        t1 = time.perf_counter()
        time.sleep(0.05)
        tel.stop()
    fig = energy_figures(tel, t0, t1, 50, None, False)
    assert fig["source"] == name
    assert fig["avg_power_w"] == pytest.approx(4.2, rel=0.05)
    assert fig["joules_per_inference"] == pytest.approx(4.2 * (t1 - t0) / 50, rel=0.05)


def test_no_source_means_no_figures(sysroot):
    src, names = select("auto")
    # NVML may find a real GPU on a GPU machine; the sysfs tree is empty
    if src is None:
        assert names == []
        assert energy_figures(None, 0, 1, 10, None, False)["joules_per_inference"] is None
    with pytest.raises(UsageError, match="no source matches"):
        select("powercap:intel-rapl:9")


def edgerun(*args, env=None):
    return subprocess.run([sys.executable, "-m", "edgerun", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_cli_energy_per_inference_from_powercap(sysroot, tiny_model):
    f = make_powercap(sysroot, wrap_uj=7_500_000)  # a wrap a second
    make_thermal(sysroot, 45.0)
    env = {**os.environ, "EDGERUN_SYSFS_ROOT": str(sysroot)}
    with FakeRail(7.5, energy=f, wrap=7_500_000) as rail:
        r = edgerun("bench", tiny_model, "--engines", "edgerun,litert", "-n", "20", "--min-duration", "1.5",
                    "--idle", "0.5", "--no-loadgen", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert rail.wraps >= 2
    rep = json.loads(r.stdout)
    en = rep["energy"]
    assert en["source"] == "powercap:intel-rapl:0" and not en["user_supplied"]
    assert en["avg_power_w"] == pytest.approx(7.5, rel=0.05)
    assert en["idle_power_w"] == pytest.approx(7.5, rel=0.05)
    for eng in ("edgerun", "litert"):
        e = rep["engines"][eng]
        assert e["duration_s"] >= 1.5 and e["inferences"] >= 20
        assert e["energy"]["joules_per_inference"] == pytest.approx(7.5 * e["duration_s"] / e["inferences"],
                                                                    rel=0.05)
        assert e["energy"]["inferences_per_joule"] == pytest.approx(1 / e["energy"]["joules_per_inference"])
    assert rep["scenario"] == "single-stream"
    assert set(rep["latency_ms"]) >= {"p50", "p90", "p99"}
    assert rep["throughput_ips"] > 0
    assert rep["thermal"]["max_temp_c"] == pytest.approx(45.0)
    assert rep["thermal"]["throttled"] is False
    assert rep["energy"]["available_sources"] == ["powercap:intel-rapl:0"]
    assert len(rep["telemetry"]["power"]["w"]) > 20
    assert rep["telemetry"]["power"]["summary"]["mean_w"] == pytest.approx(7.5, rel=0.1)


def test_cli_says_when_there_is_no_power_source(sysroot, tiny_model):
    env = {**os.environ, "EDGERUN_SYSFS_ROOT": str(sysroot)}
    r = edgerun("bench", tiny_model, "--engines", "edgerun", "-n", "5", "--min-duration", "0",
                "--no-loadgen", "--power-source", "none", env=env)
    assert r.returncode == 0, r.stderr
    assert "no power source found" in r.stdout
    rj = edgerun("bench", tiny_model, "--engines", "edgerun", "-n", "5", "--min-duration", "0",
                 "--no-loadgen", "--power-source", "none", "--json", env=env)
    en = json.loads(rj.stdout)["energy"]
    assert en["source"] is None and en["joules_per_inference"] is None and en["avg_power_w"] is None


def test_cli_user_supplied_power_is_labelled(sysroot, tiny_model):
    env = {**os.environ, "EDGERUN_SYSFS_ROOT": str(sysroot)}
    r = edgerun("bench", tiny_model, "--engines", "edgerun", "-n", "10", "--min-duration", "0.3",
                "--no-loadgen", "--power-w", "2.5", "--json", env=env)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    en = rep["energy"]
    assert en["source"] == "user-supplied:2.5W" and en["user_supplied"]
    e = rep["engines"]["edgerun"]
    assert en["joules_per_inference"] == pytest.approx(2.5 * e["duration_s"] / e["inferences"], rel=0.05)
    text = edgerun("bench", tiny_model, "--engines", "edgerun", "-n", "10", "--min-duration", "0.1",
                   "--no-loadgen", "--power-w", "2.5", env=env)
    assert "USER-SUPPLIED" in text.stdout


def test_rapl_msr_interface_before_mmio(sysroot):
    make_powercap(sysroot)
    z = sysroot / "class" / "powercap" / "intel-rapl-mmio:0"
    z.mkdir()
    (z / "energy_uj").write_text("5\n")
    (z / "max_energy_range_uj").write_text("1000\n")
    assert [s.name for s in powercap_sources()] == ["powercap:intel-rapl:0", "powercap:intel-rapl-mmio:0"]


def test_subtract_idle_needs_a_measured_idle(sysroot, tiny_model):
    r = edgerun("bench", tiny_model, "--power-w", "3", "--subtract-idle")
    assert r.returncode == 2 and "--subtract-idle" in r.stderr


def test_window_energy_while_the_sampler_appends():
    """Readers take one consistent snapshot of (time, value) while the thread appends: a window
    read mid-run once saw one more time than values (np.interp: 'fp and xp are not of the same
    length', an internal error in `edgerun bench` on a board)."""
    import time as _time

    from edgerun.bench.sampler import Telemetry

    class Counter:
        kind, name, label = "energy", "test:counter", ""

        def __init__(self):
            self.j = 0.0

        def read(self):
            self.j += 0.001
            return self.j

    tel = Telemetry(Counter(), interval=0.0).start()
    try:
        end = _time.perf_counter() + 1.0
        while _time.perf_counter() < end:
            t, e = tel.energy_curve()
            assert len(t) == len(e)
            if len(t) > 2:
                tel.window_energy(t[0], t[-1])
            tel.power_curve()
    finally:
        tel.stop()


def test_wait_past_covers_a_window_whose_last_reading_was_in_flight():
    """A slow meter's reading is stamped between request and answer: one requested before ``t1``
    may be appended after it with a stamp before ``t1``. Counting samples (the old wait) then
    returned with the window uncovered and the idle figure was None; wait_past waits for a stamp
    after ``t1``."""
    import time as _time

    class SlowMeter:
        kind, name, label = "power", "test:slow", ""

        def read(self):
            _time.sleep(0.06)
            return 2.0

    tel = Telemetry(SlowMeter(), interval=0.0).start()
    try:
        tel.wait_samples(2)
        for _ in range(5):
            t0 = _time.perf_counter()
            _time.sleep(0.1)
            t1 = _time.perf_counter()
            tel.wait_past(t1, timeout=5)
            assert tel.t[-1] > t1
            assert tel.window_energy(t0, t1) == pytest.approx(2.0 * (t1 - t0), rel=1e-6)
    finally:
        tel.stop()
