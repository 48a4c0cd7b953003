"""The firmware's MLPerf Tiny / EEMBC device-under-test UART mode, on the posix firmware over a
real pty (firmware <-pty-> relay <-pty-> host): the text grammar and its answers, m-results equal
to the host interpreter's dequantized output digit for digit, refusals as e-[...] lines, the way
back to edgerun frames, and `edgerun bench --device PORT --mlperf-tiny`."""

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from edgerun.bench.device import EembcLink, parse_results
from edgerun.cli import build_app
from edgerun.deploy.flash import flash, run_on_device
from edgerun.deploy.serial_link import DeviceError, SerialLink
from edgerun.runtime.interpreter import Interpreter
from edgerun.testing import run_edgerun
from tests.support.firmware_harness import ROOT, Rig

SHIPPED = ROOT / "models" / "mcu_small.tflite"


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path)
    yield r
    r.close()
    log = r.fw.log
    assert b"ERROR: AddressSanitizer" not in log and b"runtime error" not in log, log.decode()[-3000:]


def _expected_line(model: bytes, x: np.ndarray) -> str:
    """m-results as the firmware prints it: (double)scale * (q - zp), 6 decimals, half up."""
    q = run_edgerun(model, [x])[0].ravel()
    d = Interpreter(model_content=model).get_output_details()[0]
    scale, zp = d["quantization"]
    parts = []
    for v in (float(np.float32(scale)) * (int(a) - zp) for a in q):
        u = math.floor(abs(v) * 1e6 + 0.5)
        parts.append(f"{'-' if v < 0 else ''}{u // 1000000}.{u % 1000000:06d}")
    return "m-results-[" + ",".join(parts) + "]"


def test_text_grammar_over_pty(rig):
    model = SHIPPED.read_bytes()
    with SerialLink(rig.port) as link:
        link.hello()
        flash(model, rig.port, link=link)
        ee = EembcLink(link, timeout=30)
        assert ee.enter() == "edgerun-posix"
        prof = ee.command("profile")
        assert prof[0] == "m-profile-[edgerun-fw 0.1]" and prof[1].startswith("m-model-[")
        assert ee.command("") == []  # an empty command is just the prompt
        with pytest.raises(DeviceError, match="Unknown command: bogus"):
            ee.command("bogus")
        with pytest.raises(DeviceError, match="no db load"):
            ee.command("db 00")
        n = 16 * 16 * 3
        with pytest.raises(DeviceError, match="N from 1 to"):
            ee.command(f"db load {n + 1}")
        with pytest.raises(DeviceError, match="N from 1 to"):
            ee.command("db load 0")
        assert ee.command(f"db load {n}") == [f"m-[Expecting {n} bytes]"]
        with pytest.raises(DeviceError, match="not a hex"):
            ee.command("db zz")
        with pytest.raises(DeviceError, match="do not fit"):
            ee.command("db 0")  # odd digit count
        with pytest.raises(DeviceError, match="longer than"):
            ee.command("db " + "00" * 600)
        with pytest.raises(DeviceError, match="infer N W"):
            ee.command("infer 0 0")
        with pytest.raises(DeviceError, match="infer N W"):
            ee.command("infer x")
        rng = np.random.default_rng(3)
        x = rng.integers(-128, 128, size=(1, 16, 16, 3), dtype=np.int8)
        ee.load(x.tobytes(), chunk=100)
        with pytest.raises(DeviceError, match="do not fit"):
            ee.command("db 00")  # all expected bytes already arrived
        lines = ee.command("infer 3 2")
        assert lines[:3] == ["m-warmup-start-2", "m-warmup-done", "m-infer-start-3"]
        assert lines[3].startswith("m-lap-us-") and lines[4].startswith("m-lap-us-")
        assert lines[5] == "m-infer-done"
        expected = _expected_line(model, x)
        assert lines[6] == expected
        assert ee.command("results") == [expected]
        assert len(parse_results(expected)) == 10
        ee.leave()
        # a frame also ends the text mode (a stray EEMBC frame never cuts the host off)
        ee.enter()
        assert link.hello().board == "posix"
        # back on edgerun frames: the same model runs, bit-exactly
        out = run_on_device(rig.port, [x], link=link)[0]
        assert np.array_equal(out, run_edgerun(model, [x])[0])


def test_bench_mlperf_tiny_cli_over_pty(rig):
    res = CliRunner().invoke(build_app(), ["bench", str(SHIPPED), "--device", rig.port, "--mlperf-tiny",
                                           "--runs", "4", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    mt = r["mlperf_tiny"]
    assert mt["performance"]["median_us_per_inference"] > 0 and len(mt["performance"]["us_per_inference"]) == 5
    acc = mt["accuracy"]
    assert acc["samples"] == 5 and acc["top1_agree"] == 5 and acc["max_abs_diff"] <= 5e-7, acc
    assert "mismatched_results" not in acc
    assert r["device"]["dut_name"] == "edgerun-posix" and "mcu:posix" in r["engines"]
    res = CliRunner().invoke(build_app(), ["bench", str(SHIPPED), "--device", rig.port, "--mlperf-tiny",
                                           "--runs", "2"])
    assert res.exit_code == 0 and "MLPerf Tiny performance: median" in res.output, res.output
    assert "top-1 equal to edgerun's host interpreter on 5 of 5" in res.output
