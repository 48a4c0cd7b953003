"""`edgerun bench MODEL --device PORT`: latency from the firmware's own timer, arena and flash use,
per-op time from the PROFILE command; on the posix firmware (TCP) and the Cortex-M4 under QEMU
with -icount shift=0 (deterministic: SysTick microseconds read instructions / 1000)."""

import json
import statistics
import subprocess

import pytest
from edgerun_delegates.mcu import firmware_arena_bytes
from typer.testing import CliRunner

from edgerun.cli import build_app
from edgerun.deploy import protocol as P
from edgerun.deploy.flash import flash
from edgerun.deploy.serial_link import SerialLink
from edgerun.schema.reader import read_model
from tests.support.firmware_harness import ROOT, have_arm_toolchain, qemu_board, tcp_firmware

SHIPPED = ROOT / "models" / "mcu_small.tflite"


def _op_names(model: bytes) -> list[str]:
    m = read_model(model)
    g = m.subgraphs[0]
    return [m.op_name(op) for op in g.operators]


def _bench(args):
    res = CliRunner().invoke(build_app(), ["bench", *args])
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def posix_fw(tmp_path_factory):
    fw, url = tcp_firmware(tmp_path_factory.mktemp("fw"))
    yield url
    fw.stop()
    assert b"ERROR: AddressSanitizer" not in fw.log and b"runtime error" not in fw.log, fw.log.decode()[-3000:]


def test_bench_device_json_profile_posix(posix_fw):
    model = SHIPPED.read_bytes()
    code, out = _bench([str(SHIPPED), "--device", posix_fw, "--runs", "7", "--profile", "--json"])
    assert code == 0, out
    r = json.loads(out)
    (name, eng), = r["engines"].items()
    assert name == "mcu:posix"
    assert eng["runs"] == 7 and len(eng["samples"]["latency_ms"]) == 7
    assert all(x > 0 for x in eng["samples"]["latency_ms"])
    d = r["device"]
    assert d["arena_bytes"] == firmware_arena_bytes(model) and d["flash_bytes"] == len(model)
    assert d["arena_bytes"] <= d["arena_capacity_bytes"] and d["flash_bytes"] <= d["slot_bytes"]
    ops = r["profile"]["ops"]
    assert [o["op"] for o in ops] == _op_names(model)
    assert [o["index"] for o in ops] == list(range(len(ops)))
    assert sum(t["count"] for t in r["profile"]["by_type"]) == len(ops)


def test_bench_device_table_posix(posix_fw):
    code, out = _bench([str(SHIPPED), "--device", posix_fw, "--runs", "3", "--profile"])
    assert code == 0, out
    assert "mcu:posix" in out and "arena" in out and "CONV_2D" in out


def test_profile_pages_and_refusals(posix_fw):
    n = len(_op_names(SHIPPED.read_bytes()))
    with SerialLink(posix_fw) as link:
        link.hello()
        flash(SHIPPED.read_bytes(), posix_fw, link=link)
        # a page that starts at the last op carries one record; past the end, none
        p = link.request(P.CMD_PROFILE, P.PROFILE.pack(n - 1))
        _us, n_ops, first, count = P.PROFILE_HEADER.unpack_from(p)
        assert (n_ops, first, count) == (n, n - 1, 1) and len(p) == P.PROFILE_HEADER_SIZE + P.PROFILE_RECORD_SIZE
        p = link.request(P.CMD_PROFILE, P.PROFILE.pack(n + 5))
        assert P.PROFILE_HEADER.unpack_from(p)[3] == 0 and len(p) == P.PROFILE_HEADER_SIZE
        from edgerun.deploy.serial_link import DeviceError

        with pytest.raises(DeviceError):
            link.request(P.CMD_PROFILE, b"\x00")  # wrong length


def test_mlperf_tiny_needs_device():
    r = subprocess.run(["edgerun", "bench", str(SHIPPED), "--mlperf-tiny"], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 2 and "--device" in r.stderr + r.stdout and "Traceback" not in r.stderr, r.stderr


@pytest.mark.skipif(have_arm_toolchain() is not None, reason=str(have_arm_toolchain()))
def test_bench_device_icount_cortex_m4():
    """Under -icount shift=0 every inference reads the same instruction count, the per-op figures
    add up to it (plus the timer reads between ops), and the EEMBC mode's infer N W agrees."""
    q, url = qemu_board(icount=True, stdout=subprocess.DEVNULL)
    try:
        code, out = _bench([str(SHIPPED), "--device", url, "--runs", "4",
                            "--warmup", "1", "--profile", "--json"])
        assert code == 0, out
        r = json.loads(out)
        eng = r["engines"]["mcu:mps2-an386"]
        lat = eng["samples"]["latency_ms"]
        # deterministic instruction count; where INVOKE starts against the 1,000-instruction tick
        # moves a reading by at most one tick (1 us)
        assert min(lat) > 0 and max(lat) - min(lat) <= 0.0011, lat
        total_us = statistics.median(lat) * 1000
        ops = r["profile"]["ops"]
        assert [o["op"] for o in ops] == _op_names(SHIPPED.read_bytes())
        assert 0.8 * total_us <= r["profile"]["total_us"] <= total_us + 2 * len(ops), (total_us, ops)
        # the MLPerf Tiny / EEMBC UART mode on the same board: its infer N W stamps give the same cost
        code, out = _bench([str(SHIPPED), "--device", url, "--mlperf-tiny", "--runs", "2",
                            "--json"])
        assert code == 0, out
        t = json.loads(out)["mlperf_tiny"]
        assert abs(t["performance"]["median_us_per_inference"] - total_us) <= 1.5, (t, total_us)
        assert t["accuracy"]["top1_agree"] == 5 and t["accuracy"]["max_abs_diff"] <= 5e-7, t
    finally:
        q.kill()
        q.wait()


def test_profile_pages_past_one_frame(posix_fw):
    """566 ops do not fit one PROFILE answer (510 records): the host pages and gets every op once."""
    from tests.support.firmware_models import mediapipe_style

    model = mediapipe_style(blocks=140)
    from edgerun.bench.device import bench_device

    r = bench_device(model, posix_fw, runs=1, warmup=0, profile=True)
    ops = r["profile"]["ops"]
    assert len(ops) == 566 and [o["op"] for o in ops] == _op_names(model)
    assert [o["index"] for o in ops] == list(range(566))
