"""The firmware's MLPerf Tiny / EEMBC device-under-test UART mode, on the posix firmware over a
real pty (firmware <-pty-> relay <-pty-> host): the text grammar and its answers, m-results equal
to the host interpreter's dequantized output digit for digit, refusals as e-[...] lines, the way
back to edgerun frames, and `edgerun bench --device PORT --mlperf-tiny`."""

import json
import struct
import termios
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from edgerun.bench.device import EembcLink, parse_results
from edgerun.cli import build_app
from edgerun.deploy import protocol as P
from edgerun.deploy.flash import flash, run_on_device
from edgerun.deploy.serial_link import DeviceError, SerialLink
from edgerun.runtime.interpreter import Interpreter
from edgerun.testing import run_edgerun
from tests.support.firmware_harness import ROOT, Rig, eembc_results_line

SHIPPED = ROOT / "models" / "mcu_small.tflite"


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path)
    yield r
    r.close()
    log = r.fw.log
    assert b"ERROR: AddressSanitizer" not in log and b"runtime error" not in log, log.decode()[-3000:]


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
        expected = eembc_results_line(model, x)
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


def _pulses(rig) -> int:
    return rig.fw.log.count(b"edgerun-fw: timestamp pulse")


def _buffer_lines(data: bytes) -> list[str]:
    """db print's answer as ee_lib writes it: m-buffer- and 8 dash-separated hex bytes a line."""
    return ["m-buffer-" + "-".join(f"{b:02x}" for b in data[i:i + 8]) for i in range(0, len(data), 8)]


def test_reference_command_set_over_pty(rig):
    """The commands of EEMBC's ee_lib (mlcommons/tiny benchmark/api/internally_implemented.cpp)
    that the first version lacked: help, timestamp, db print, infer's defaults (N=1, W=10), and
    the input conversions of the reference submissions' th_load_tensor (uint8 pixels minus 128
    with db format u8; float32 values quantized with the input's scale and zero point)."""
    model = SHIPPED.read_bytes()
    with SerialLink(rig.port) as link:
        link.hello()
        flash(model, rig.port, link=link)
        ee = EembcLink(link, timeout=30)
        ee.enter()
        helptext = "\n".join(ee.command("help"))
        for word in ("name", "profile", "timestamp", "db SUBCMD", "load N", "print", "format", "infer N", "results"):
            assert word in helptext, word
        stamp = ee.command("timestamp")
        assert len(stamp) == 1 and stamp[0].startswith("m-lap-us-") and stamp[0][9:].isdigit()
        with pytest.raises(DeviceError, match="requires a subcommand"):
            ee.command("db")
        rng = np.random.default_rng(5)
        x = rng.integers(-128, 128, size=(1, 16, 16, 3), dtype=np.int8)
        ee.load(x.tobytes(), chunk=31)  # the runner's chunk size
        raw = x.tobytes()
        assert ee.command("db print") == _buffer_lines(raw)
        assert ee.command("db print 5 3") == _buffer_lines(raw[3:8])
        with pytest.raises(DeviceError, match="N \\+ offset at most 768"):
            ee.command("db print 8 761")
        lines = ee.command("infer 2")
        assert lines[:3] == ["m-warmup-start-10", "m-warmup-done", "m-infer-start-2"]
        lines = ee.command("infer")
        assert lines[:3] == ["m-warmup-start-10", "m-warmup-done", "m-infer-start-1"]
        assert lines[-1] == eembc_results_line(model, x)

        # uint8 pixels, as the runner sends the IC/VWW datasets: minus 128 on the board
        pixels = rng.integers(0, 256, size=(1, 16, 16, 3), dtype=np.uint8)
        assert ee.command("db format u8") == ["m-db-format-u8"]
        ee.load(pixels.tobytes(), chunk=31)
        shifted = (pixels.astype(np.int16) - 128).astype(np.int8)
        assert ee.command("db print 16") == _buffer_lines(shifted.tobytes()[:16])
        assert ee.command("infer 1 0")[-1] == eembc_results_line(model, shifted)
        assert ee.command("db format raw") == ["m-db-format-raw"]
        with pytest.raises(DeviceError, match="db format raw\\|u8"):
            ee.command("db format float")

        # float32 values (4 x the elements), as the runner sends the AD dataset
        d = Interpreter(model_content=model).get_input_details()[0]
        scale, zp = d["quantization"]
        vals = (rng.normal(0, 60, size=(1, 16, 16, 3)) * scale).astype(np.float32)
        vals.flat[:4] = [np.nan, 1e30, -1e30, np.float32(2.5 * scale)]
        r = vals.astype(np.float32) / np.float32(scale)  # float division, as QuantizeFloatToInt8
        r64 = np.nan_to_num(r.astype(np.float64), nan=0.0, posinf=1e12, neginf=-1e12)
        q = np.clip(np.sign(r64) * np.floor(np.abs(r64) + 0.5) + zp, -128, 127).astype(np.int8)
        ee.load(vals.astype("<f4").tobytes(), chunk=31)
        assert ee.command("db print") == _buffer_lines(q.tobytes())
        assert ee.command("results")  # still the last inference's
        assert ee.command("infer 1 0")[-1] == eembc_results_line(model, q)
        with pytest.raises(DeviceError, match=r"N from 1 to 768 \(input 0's bytes\), or 3072 \(float32"):
            ee.command("db load 3071")
        ee.leave()
        assert link.hello().board == "posix"


def test_energy_mode_switches_baud_and_pulses_the_timestamp_line(rig):
    """Energy mode as the runner uses it through the interface board: the UART moves to the
    energy baud rate (9600) after the EEMBC frame's reply, timestamps are pulses on the timestamp
    line instead of m-lap-us lines, and edgerun% returns to the entry rate; refusals first."""
    model = SHIPPED.read_bytes()
    with SerialLink(rig.port) as link:
        link.hello()
        flash(model, rig.port, link=link)
        for payload, why in ((struct.pack("<B3xI", 2, 0), "0 \\(performance\\) or 1 \\(energy\\)"),
                             (struct.pack("<B3xI", 1, 12345), "cannot run at it"),
                             (b"\1\0\0", "length")):
            with pytest.raises(DeviceError, match=why):
                link.request(P.CMD_EEMBC, payload)
        assert link.hello().board == "posix"  # still on frames
        before = _pulses(rig)
        ee = EembcLink(link, timeout=30)
        assert ee.enter(energy=True, baud=9600) == "edgerun-posix"
        assert link.ser.baudrate == 9600
        speed = termios.tcgetattr(rig.dev_master)
        assert speed[4] == speed[5] == termios.B9600  # the firmware's end of the line
        assert ee.command("timestamp") == []  # a pulse, no text
        rng = np.random.default_rng(9)
        x = rng.integers(-128, 128, size=(1, 16, 16, 3), dtype=np.int8)
        ee.load(x.tobytes(), chunk=26)  # the runner's chunk size with a power monitor
        lines = ee.command("infer 3 1")
        assert lines == ["m-warmup-start-1", "m-warmup-done", "m-infer-start-3", "m-infer-done",
                         eembc_results_line(model, x)]
        ee.leave()
        assert link.ser.baudrate == 115200
        speed = termios.tcgetattr(rig.dev_master)
        assert speed[4] == speed[5] == termios.B115200
        assert link.hello().board == "posix"
        # 2 at entry (the line left high), 1 for timestamp%, 2 around the timed inferences
        deadline = time.monotonic() + 5
        while _pulses(rig) - before < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pulses(rig) - before == 5


@pytest.fixture(scope="module")
def runner_dut(tmp_path_factory):
    """The MLPerf Tiny runner's own DUT driver (benchmark/runner/device_under_test.py and the two
    files it imports, pinned by SHA-256 in tools/fetch_models.py), imported unmodified; skipped
    with the fetcher's reason where it cannot be had."""
    import importlib
    import shutil
    import sys

    from tests.support.firmware_models import MLPERF_TINY_DIR, fetch_models_module

    fm = fetch_models_module()
    try:
        paths = fm.fetch(list(fm.RUNNER), cache=MLPERF_TINY_DIR)
    except fm.FetchError as e:
        pytest.skip(f"MLPerf Tiny runner not available: {e}")
    d = tmp_path_factory.mktemp("runner")
    for p in paths.values():
        shutil.copy(p, d / p.name)
    sys.path.insert(0, str(d))
    try:
        mod = importlib.import_module("device_under_test")
    finally:
        sys.path.remove(str(d))
    yield mod.DUT
    for name in ("device_under_test", "serial_device", "interface_device"):
        sys.modules.pop(name, None)


def test_the_mlperf_tiny_runner_drives_the_board(rig, runner_dut):
    """The benchmark's own runner code (its DUT class over pyserial, '%' terminators, m-ready
    prompts, 31-byte db chunks, infer N W) against the firmware over a real pty: name, profile,
    load, infer and results parse with the runner's own regular expressions and equal the host."""
    import re

    model = SHIPPED.read_bytes()
    with SerialLink(rig.port) as link:
        link.hello()
        flash(model, rig.port, link=link)
        EembcLink(link, timeout=30).enter()  # the link closes with the board left in the text mode
    rng = np.random.default_rng(21)
    x = rng.integers(-128, 128, size=(1, 16, 16, 3), dtype=np.int8)
    with runner_dut(rig.port, 115200) as dut:
        assert dut.get_name() == "edgerun-posix"
        assert dut.get_profile() == "edgerun-fw 0.1"
        assert re.fullmatch(r"[0-9a-f]{16}", dut.get_model())
        res = dut.load(x.tobytes())
        assert "m-load-done" in res
        lines = dut.infer(4, 2)
    laps = [int(m.group(1)) for m in (re.match(r"^m-lap-us-([0-9]+)$", ln) for ln in lines) if m]
    results = [m.group(1) for m in (re.match(r"^m-results-\[([^]]+)\]$", ln) for ln in lines) if m]
    assert len(laps) == 2 and laps[1] >= laps[0]
    assert len(results) == 1 and "m-results-[" + results[0] + "]" == eembc_results_line(model, x)
    assert lines[-1] == "m-ready"
    with SerialLink(rig.port) as link:  # a frame still ends the text mode
        assert link.hello().board == "posix"


def test_hostile_text_commands_over_pty(rig):
    """Seeded random commands built from the grammar's words with hostile arguments (huge,
    negative, non-decimal, odd hex, overlong, binary junk) against the ASan/UBSan firmware with a
    model loaded: every command is answered up to its m-ready (or refused in an e-[...] line), the
    firmware never dies, and the rig's teardown finds no sanitizer report."""
    model = SHIPPED.read_bytes()
    rng = np.random.default_rng(1234)
    nums = ["0", "1", "7", "8", "768", "769", "3071", "3072", "3073", "4294967295", "4294967296",
            "99999999999999999999", "-1", "+5", "0x10", "1e3", "", "07"]
    words = ["name", "profile", "help", "timestamp", "results", "infer", "db", "db load", "db print",
             "db format", "bogus", "edgerunx"]
    with SerialLink(rig.port) as link:
        link.hello()
        flash(model, rig.port, link=link)
        ee = EembcLink(link, timeout=30)
        ee.enter()
        for i in range(300):
            w = words[rng.integers(len(words))]
            args = [nums[rng.integers(len(nums))] for _ in range(rng.integers(0, 4))]
            if w == "db" and rng.random() < 0.5:
                args = ["".join(rng.choice(list("0123456789abcdefABCDEFxz"), size=rng.integers(0, 80)))]
            elif w == "db format" and rng.random() < 0.5:
                args = [["raw", "u8", "RAW", "u16"][rng.integers(4)]]
            cmd = " ".join([w] + args)
            if rng.random() < 0.05:
                cmd += bytes(rng.integers(1, 256, size=8, dtype=np.uint8)).decode("latin-1").replace("%", "")
            if w == "infer" and any(a in ("768", "769", "3071", "3072", "3073", "4294967295") for a in args):
                cmd = "infer 1 0"  # keep the run short: those counts are valid and would just take long
            try:
                ee.command(cmd.replace("%", ""))
            except DeviceError:
                pass
            assert rig.fw.alive(), (i, cmd)
        ee.leave()
        assert link.hello().board == "posix"
