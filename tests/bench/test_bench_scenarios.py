"""MLPerf-style scenarios (single-stream, offline with batching and threads, LoadGen where
installed), thermal and clock warnings from a sysfs tree, and bench's usage errors."""

import json
import os
import subprocess
import sys
import time

import pytest

from edgerun.bench import benchmark
from edgerun.bench.sampler import Telemetry
from edgerun.bench.scenarios import loadgen_version, parse_summary
from edgerun.bench.thermal import ThermalProbe, summarize
from edgerun.errors import UsageError
from edgerun.ir import ModelBuilder


def _model(width=64):
    b = ModelBuilder()
    x = b.input("x", (1, width), "int8", (0.1, 0))
    y = b.tensor("y", (1, width), "int8", (0.1, 0))
    b.op("RELU", [x], [y])
    b.output(y)
    return b.to_bytes()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("m") / "relu.tflite"
    p.write_bytes(_model())
    return p


def edgerun(*args):
    return subprocess.run([sys.executable, "-m", "edgerun", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_single_stream_meets_query_count_and_duration_warmup_excluded():
    rep = benchmark(_model(), runs=7, warmup=3, engines=["edgerun"], min_duration=0)
    e = rep["engines"]["edgerun"]
    assert e["queries"] == 7 and e["inferences"] == 7  # warm-up not counted
    assert len(e["samples"]["latency_ms"]) == 7
    rep = benchmark(_model(), runs=5, warmup=1, engines=["edgerun"], min_duration=0.3)
    e = rep["engines"]["edgerun"]
    assert e["duration_s"] >= 0.3 and e["queries"] > 5
    assert e["latency_ms"]["p50"] <= e["latency_ms"]["p90"] <= e["latency_ms"]["p99"] <= e["latency_ms"]["max"]
    assert rep["rules"]["model_sha256"] and rep["rules"]["driver"] == "edgerun"
    assert rep["latency_ms"] == e["latency_ms"]


@pytest.mark.parametrize("engine", ["edgerun", "litert"])
def test_offline_batches_on_worker_threads(engine):
    rep = benchmark(_model(), runs=400, warmup=1, engines=[engine], scenario="offline", num_threads=2, batch=4,
                    min_duration=0.2)
    e = rep["engines"][engine]
    assert e["inferences"] == 4 * e["queries"] and e["inferences"] >= 400
    assert e["duration_s"] >= 0.2
    assert e["throughput_ips"] == pytest.approx(e["inferences"] / e["duration_s"])
    assert rep["rules"]["batch"] == 4 and rep["rules"]["threads"] == 2 and rep["scenario"] == "offline"


def test_offline_batch_on_a_model_without_batch_dim_is_a_usage_error():
    b = ModelBuilder()
    x = b.input("x", (3, 8), "int8", (0.1, 0))
    y = b.tensor("y", (3, 8), "int8", (0.1, 0))
    b.op("RELU", [x], [y])
    b.output(y)
    with pytest.raises(UsageError, match="batch dimension"):
        benchmark(b.to_bytes(), runs=2, engines=["edgerun"], scenario="offline", batch=2)


@pytest.mark.skipif(loadgen_version() is None, reason="mlcommons-loadgen not installed")
@pytest.mark.parametrize("scenario", ["single-stream", "offline"])
def test_loadgen_drives_the_run_and_keeps_its_logs(tmp_path, scenario):
    rep = benchmark(_model(), runs=50, warmup=2, engines=["edgerun", "litert"], scenario=scenario,
                    min_duration=0.2, loadgen=True, loadgen_dir=tmp_path / "lg")
    for eng in ("edgerun", "litert"):
        e = rep["engines"][eng]
        d = tmp_path / "lg" / eng
        assert (d / "mlperf_log_summary.txt").exists() and (d / "mlperf_log_detail.txt").exists()
        summary = parse_summary((d / "mlperf_log_summary.txt").read_text())
        assert summary["Result is"] == "VALID" and e["loadgen"]["result"] == "VALID"
        assert e["driver"].startswith("mlperf-loadgen")
        assert e["inferences"] >= 50
        if scenario == "single-stream":
            assert summary["Scenario"] == "SingleStream"
            # LoadGen's own count of processed queries equals what edgerun timed
            assert summary["90.0th percentile latency (ns)"] > 0
            assert e["queries"] == e["inferences"]
        else:
            assert summary["Scenario"] == "Offline" and summary["Samples per second"] > 0


def _thermal_tree(root, temp_c, trip_c=80.0, mhz=2400):
    z = root / "class" / "thermal" / "thermal_zone0"
    z.mkdir(parents=True, exist_ok=True)
    (z / "type").write_text("cpu-thermal\n")
    (z / "temp").write_text(f"{int(temp_c * 1000)}\n")
    (z / "trip_point_0_temp").write_text(f"{int(trip_c * 1000)}\n")
    (z / "trip_point_0_type").write_text("passive\n")
    (z / "trip_point_1_temp").write_text("50000\n")
    (z / "trip_point_1_type").write_text("active\n")  # a fan trip: not throttling
    for cpu in ("cpu0", "cpu1"):
        f = root / "devices" / "system" / "cpu" / cpu / "cpufreq"
        f.mkdir(parents=True, exist_ok=True)
        (f / "scaling_cur_freq").write_text(f"{mhz * 1000}\n")
    return z / "temp"


def test_thermal_trip_and_clock_drop_are_warned(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_SYSFS_ROOT", str(tmp_path))
    temp = _thermal_tree(tmp_path, 60.0)
    probe = ThermalProbe()
    assert list(probe.zones) == ["thermal_zone0"] and list(probe.cpus) == ["cpu0", "cpu1"]
    tel = Telemetry(None, probe, interval=0.01).start()
    time.sleep(0.15)
    t_mid = time.perf_counter()
    temp.write_text("85500\n")
    for cpu in ("cpu0", "cpu1"):
        (tmp_path / "devices" / "system" / "cpu" / cpu / "cpufreq" / "scaling_cur_freq").write_text("1200000\n")
    time.sleep(0.15)
    tel.stop()
    calm = tel.thermal_window(0, t_mid - 0.02)
    assert calm["max_temp_c"] == pytest.approx(60.0) and calm["throttled"] is False and not calm["warnings"]
    hot = tel.thermal_window(0, time.perf_counter())
    assert hot["max_temp_c"] == pytest.approx(85.5)
    assert hot["throttled"] and hot["trip_crossed"] and hot["clock_dropped"]
    assert any("passive trip point 80.0 C" in w for w in hot["warnings"])
    assert any("2400 MHz to 1200 MHz" in w for w in hot["warnings"])


def test_no_thermal_zones_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_SYSFS_ROOT", str(tmp_path))
    out = summarize(ThermalProbe(), [], [])
    assert out["max_temp_c"] is None and out["throttled"] is None and "no thermal zones" in out["message"]


def test_cli_thermal_warning_in_table_and_json(tmp_path, model_path):
    _thermal_tree(tmp_path, 90.0)  # already above the passive trip point
    env = {**os.environ, "EDGERUN_SYSFS_ROOT": str(tmp_path)}
    args = [sys.executable, "-m", "edgerun", "bench", str(model_path), "--engines", "edgerun", "-n", "5",
            "--min-duration", "0.1", "--no-loadgen"]
    r = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["thermal"]["max_temp_c"] == pytest.approx(90.0) and rep["thermal"]["throttled"] is True
    assert any("trip point" in w for w in rep["warnings"])
    text = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert "THROTTLED" in text.stdout and "WARNING" in text.stdout


@pytest.mark.parametrize("args, message", [
    (["--engines", "foo,bar"], "unknown engine 'foo'"),
    (["-n", "0"], "--runs must be at least 1"),
    (["--scenario", "server"], "--scenario 'server'"),
    (["--batch", "4"], "--batch applies to --scenario offline"),
    (["--min-duration", "-1"], "--min-duration"),
    (["--report", "out.txt"], "give a .html file"),
    (["--power-source", "powercap:nope"], "no source matches"),
    (["--power-w", "-3"], "--power-w must be a positive"),
])
def test_usage_errors_exit_2_in_one_line(model_path, args, message):
    r = edgerun("bench", model_path, *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_bench_takes_a_bundle_by_content(tmp_path, model_path):
    from edgerun.bundle import write_bundle

    b = write_bundle(model_path.read_bytes(), tmp_path / "m.anything", target="cpu")
    r = edgerun("bench", b, "--engines", "edgerun", "-n", "3", "--no-loadgen", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    import hashlib

    assert rep["rules"]["model_sha256"] == hashlib.sha256(model_path.read_bytes()).hexdigest()
    assert "bundle" in rep


def test_report_that_cannot_be_written_is_one_line(tmp_path, model_path):
    (tmp_path / "d.html").mkdir()
    os.mkfifo(tmp_path / "fifo.html")
    for target, message in [(tmp_path / "d.html", "is a directory"), (tmp_path / "no" / "r.html", "does not exist")]:
        r = edgerun("bench", model_path, "--engines", "edgerun", "-n", "2", "--no-loadgen", "--report", target)
        assert r.returncode == 2 and message in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    r = edgerun("bench", model_path, "--engines", "edgerun", "-n", "2", "--no-loadgen", "--report",
                tmp_path / "fifo.html")  # replaced by the page, not written into (which would block)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "fifo.html").is_file() and "<html" in (tmp_path / "fifo.html").read_text()
