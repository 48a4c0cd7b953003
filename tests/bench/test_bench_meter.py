"""The RDTech UM24C/UM25C/UM34C USB power meter, over a real pseudo-terminal with a fake meter on
the other end speaking the binary protocol (0xF0 request, 130-byte big-endian snapshot); and
NVML where an NVIDIA GPU is present."""

import json
import os
import select
import subprocess
import sys
import threading
import time
import tty

import pytest

from edgerun.bench.power import UM_FRAME, UmMeter, build_um_frame, parse_um_frame
from edgerun.bench.sampler import Telemetry, energy_figures
from edgerun.errors import LinkError
from tests.support.sysfs_fakes import realtime_thread


class FakeMeter:
    """Answers every 0xF0 byte on the pty's master side with one snapshot of ``model``."""

    def __init__(self, model="UM25C", volts=5.12, amps=0.5, garbage=False):
        self.model, self.volts, self.amps, self.garbage = model, volts, amps, garbage
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        self.port = os.ttyname(self.slave)
        self.requests = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        realtime_thread()
        while not self.stop.is_set():
            r, _, _ = select.select([self.master], [], [], 0.05)
            if not r:
                continue
            try:
                data = os.read(self.master, 64)
            except OSError:
                return
            for b in data:
                if b == 0xF0:
                    self.requests += 1
                    frame = build_um_frame(self.model, self.volts, self.amps)
                    if self.garbage:
                        frame = b"\x12\x34" + frame[2:]
                    time.sleep(0.005)  # the meter takes a moment, as a Bluetooth link does
                    os.write(self.master, frame)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        os.close(self.master)
        os.close(self.slave)


@pytest.mark.parametrize("model, volts, amps", [("UM25C", 5.123, 0.4567), ("UM24C", 5.12, 0.456),
                                                ("UM34C", 12.01, 1.234)])
def test_frame_round_trip(model, volts, amps):
    f = build_um_frame(model, volts, amps)
    assert len(f) == UM_FRAME and f[-2:] == b"\xff\xf1"
    d = parse_um_frame(f)
    assert d["model"] == model
    assert d["volts"] == pytest.approx(volts, abs=0.01)
    assert d["amps"] == pytest.approx(amps, abs=0.001)
    assert d["watts"] == pytest.approx(volts * amps, abs=0.001)


def test_bad_frames_are_link_errors():
    with pytest.raises(LinkError, match="130"):
        parse_um_frame(b"\x09\x63" + bytes(10))
    with pytest.raises(LinkError, match="unknown model"):
        parse_um_frame(b"\xab\xcd" + bytes(128))


def test_meter_over_a_pty_gives_power_and_energy():
    with FakeMeter("UM25C", 5.12, 0.5) as m:
        src = UmMeter(m.port, timeout=1.0)
        assert src.name == f"meter:UM25C@{m.port}" and src.kind == "power"
        tel = Telemetry(src, interval=0.02).start()
        tel.wait_samples(3)
        t0 = time.perf_counter()
        time.sleep(1.0)
        t1 = time.perf_counter()
        tel.wait_samples(len(tel.t) + 2)
        tel.stop()
        src.close()
        assert m.requests >= 10
    fig = energy_figures(tel, t0, t1, 30, None, False)
    assert fig["avg_power_w"] == pytest.approx(2.56, rel=0.05)
    assert fig["joules_per_inference"] == pytest.approx(2.56 * (t1 - t0) / 30, rel=0.05)


def test_meter_that_answers_garbage_is_one_line():
    with FakeMeter(garbage=True) as m:
        with pytest.raises(LinkError, match="unknown model id 0x1234"):
            UmMeter(m.port, timeout=1.0)


def test_cli_with_power_meter(tmp_path):
    from edgerun.ir import ModelBuilder

    b = ModelBuilder()
    x = b.input("x", (1, 16), "int8", (0.1, 0))
    y = b.tensor("y", (1, 16), "int8", (0.1, 0))
    b.op("RELU", [x], [y])
    b.output(y)
    model = tmp_path / "m.tflite"
    model.write_bytes(b.to_bytes())
    env = {**os.environ, "EDGERUN_SYSFS_ROOT": str(tmp_path)}
    with FakeMeter("UM34C", 12.0, 0.75) as m:
        r = subprocess.run([sys.executable, "-m", "edgerun", "bench", str(model), "--engines", "edgerun",
                            "-n", "10", "--min-duration", "1.0", "--idle", "0.5", "--no-loadgen",
                            "--power-meter", m.port, "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    en, tel = rep["energy"], rep["telemetry"]
    why = (en, tel["missed_samples"], tel["last_error"], rep["engines"]["edgerun"]["window_s"],
           tel["power"]["t_s"][-3:])
    assert en["source"] == f"meter:UM34C@{m.port}"
    assert en["avg_power_w"] == pytest.approx(9.0, rel=0.05), why
    assert en["idle_power_w"] == pytest.approx(9.0, rel=0.05), (why, rep.get("idle_window_s"), tel["power"]["t_s"][:5])


def test_cli_power_meter_on_a_missing_port_is_one_line(tmp_path):
    model = tmp_path / "m.tflite"
    model.write_bytes(open(os.path.join(os.path.dirname(__file__), "..", "..", "models", "mcu_small.tflite"), "rb").read())
    r = subprocess.run([sys.executable, "-m", "edgerun", "bench", str(model),
                        "--power-meter", str(tmp_path / "no-such-tty")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 7, r.stderr  # LinkError
    assert "Traceback" not in r.stderr and "USB meter" in r.stderr and "no-such-tty" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_nvml_power_where_a_gpu_is_present():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
    except Exception as e:  # pynvml raises NVMLError subclasses per cause
        pytest.skip(f"no NVIDIA GPU here (NVML: {e})")
    if n == 0:
        pytest.skip("NVML reports no GPU")
    from edgerun.bench.power import NvmlSource

    src = NvmlSource(0)
    tel = Telemetry(src, interval=0.02).start()
    time.sleep(0.3)
    t0 = time.perf_counter()
    time.sleep(1.0)
    t1 = time.perf_counter()
    time.sleep(0.2)
    tel.stop()
    fig = energy_figures(tel, t0, t1, 10, None, False)
    assert fig["source"] == "nvml:gpu0"
    assert 1.0 < fig["avg_power_w"] < 2000.0  # an idle datacenter GPU draws tens of watts
