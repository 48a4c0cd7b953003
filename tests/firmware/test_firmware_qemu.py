"""End to end on the emulated board: build the mps2-an386 firmware, start QEMU with the serial
port on a TCP socket, flash the shipped int8 model through socket://, run it, and compare the
outputs with the host byte for byte. Skipped only when arm-none-eabi-gcc or qemu-system-arm is
missing (tools/install.sh installs both)."""

import hashlib
import subprocess

import pytest

from edgerun.deploy import protocol as P
from edgerun.deploy.flash import flash, model_info, run_with_link, verify_on_device
from edgerun.deploy.serial_link import SerialLink
from edgerun.litert import make_interpreter
from edgerun.testing import random_inputs, run_litert
from tests.support.cli import EDGERUN, cli
from tests.support.firmware_harness import ROOT, have_arm_toolchain, qemu_board
from tests.support.firmware_models import mcu_small, mlperf_tiny_models, op_models  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(have_arm_toolchain() is not None, reason=str(have_arm_toolchain()))
SHIPPED = ROOT / "models" / "mcu_small.tflite"


@pytest.fixture(scope="module")
def board():
    q, url = qemu_board()
    yield q, url
    if q.poll() is None:
        q.kill()
        q.wait()


def test_shipped_model_matches_its_generator():
    assert SHIPPED.read_bytes() == mcu_small(7), "models/mcu_small.tflite is stale: run tools/make_mcu_model.py"


def test_flash_and_run_on_emulated_board(board):
    _q, url = board
    model = SHIPPED.read_bytes()
    with SerialLink(url) as link:
        hello = link.hello()
        assert hello.board == "mps2-an386" and hello.max_payload == 4096
        r = flash(SHIPPED, url, link=link)
        assert not r.skipped and r.size == len(model)
        info = model_info(link)
        assert info.sha256 == hashlib.sha256(model).hexdigest()
        details = make_interpreter(model, reference=True).get_input_details()
        total_us = 0
        for seed in range(5):
            x = random_inputs(details, seed=seed)
            got, us = run_with_link(link, x, info)
            want = run_litert(model, x, reference=True)
            assert got[0].dtype == want[0].dtype and got[0].tobytes() == want[0].tobytes()
            total_us += us
        # SysTick timing without -icount follows host time, which can read 0 for one run on a
        # loaded machine; five runs together must show time passing
        assert total_us > 0
        assert flash(SHIPPED, url, link=link).skipped  # same hash: no transfer
    report = verify_on_device(SHIPPED, url)  # a fresh connection: the board kept running
    assert report["ok"], report


def test_op_models_bit_exact_on_cortex_m4(board):
    """newlib's expf/roundf and the M4F's single-precision FPU must give LiteRT's bytes too."""
    _q, url = board
    models = op_models(3)
    names = ["softmax_beta1.0", "logistic", "mean_hw_nokeep", "quantize_requantize_dequantize",
             "add_b1x1x1x4", "mul_b4", "dw_valid_s2_mult2", "fc_per_tensor", "average_pool_2d_same_k3s2",
             "tanh", "tanh_any_q", "hard_swish", "leaky_relu_neg", "prelu_a8", "sub_act1_b4",
             "squared_difference_act0_b4", "ss_negative_stride", "resize_nn_align", "resize_nn_half",
             "split_v", "pack_unpack", "arg_max_int64", "gather_axis1", "mirror_pad_reflect", "exp",
             "abs_rescale", "relu_n1_to_1", "arg_min", "batch_matmul_bcast_adj", "batch_matmul_const_rhs",
             "transpose_conv_same_s2", "transpose_conv_valid_s2_relu", "resize_bl_half", "resize_bl_align"]
    with SerialLink(url) as link:
        link.hello()
        for name in names:
            m = models[name]
            flash(m, url, link=link)
            details = make_interpreter(m, reference=True).get_input_details()
            for seed in range(2):
                x = random_inputs(details, seed=seed)
                got, _ = run_with_link(link, x)
                want = run_litert(m, x, reference=True)
                assert len(got) == len(want) and all(g.tobytes() == w.tobytes() for g, w in zip(got, want)), name


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory):
    d = tmp_path_factory.mktemp("key")
    r = cli("keygen", "-o", d / "k")
    assert r.returncode == 0, r.stderr
    return d / "k"


@pytest.mark.parametrize("name", ["vww", "ic", "kws", "ad", "sww"])
def test_mlperf_tiny_run_device_verify_on_cortex_m4(board, mlperf_tiny_models, signing_key, tmp_path, name):  # noqa: F811
    """MLPerf Tiny's reference int8 models (fetched by tools/fetch_models.py, pinned by SHA-256; the
    test skips with the fetcher's reason where they cannot be had) as a user deploys them, through
    the console script: `package --target mcu:mps2-an386 --sign`, then `run BUNDLE --device URL
    --verify` flashes the emulated board and checks the golden vectors byte for byte (exit 0), with
    the arena COMMIT reports equal to the host's prediction; then one more input against LiteRT's
    reference kernels directly."""
    import json
    import os

    from edgerun_delegates.mcu.firmware import firmware_arena_bytes

    model = mlperf_tiny_models[name]
    _q, url = board
    src = tmp_path / f"{name}.tflite"
    src.write_bytes(model)
    bundle = tmp_path / f"{name}.bundle"
    r = cli("package", src, "-o", bundle, "--target", "mcu:mps2-an386", "--sign", signing_key.with_suffix(".key"),
            "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGERUN_")}
    env["EDGERUN_TRUSTED_KEY"] = str(signing_key.with_suffix(".pub"))
    r = subprocess.run([EDGERUN, "run", str(bundle), "--device", url, "--verify", "--json"], capture_output=True,
                       text=True, timeout=600, env=env, check=False)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    rep = json.loads(r.stdout)
    assert rep["ok"] and rep["verified"] and rep["reference"] == "golden" and len(rep["cases"]) >= 3
    assert all(o["identical"] for c in rep["cases"] for o in c["outputs"]), rep["cases"]
    assert rep["flash"]["board"] == "mps2-an386" and rep["flash"]["size"] == len(model)
    assert rep["model_sha256"] == hashlib.sha256(model).hexdigest()
    assert rep["device_arena_bytes"] == firmware_arena_bytes(model)
    with SerialLink(url) as link:
        link.hello()
        assert flash(model, url, link=link).skipped  # the console script left it on the board
        details = make_interpreter(model, reference=True).get_input_details()
        x = random_inputs(details, seed=101)
        got, _ = run_with_link(link, x)
        want = run_litert(model, x, reference=True)
        assert len(got) == len(want) and all(g.tobytes() == w.tobytes() for g, w in zip(got, want)), name


def test_mediapipe_style_model_on_cortex_m4(board):
    """PRELU / STRIDED_SLICE / RESIZE / HARD_SWISH, over 256 tensors, verified on the emulated board."""
    from tests.support.firmware_models import mediapipe_style

    _q, url = board
    model = mediapipe_style()
    with SerialLink(url) as link:
        link.hello()
        flash(model, url, link=link)
        report = verify_on_device(model, url, link=link, flash_first=False)
    assert report["ok"], report


def test_streaming_wakeword_state_on_cortex_m4(board):
    """microWakeWord's hey_mycroft (resource variables, CALL_ONCE) frame by frame against one
    LiteRT interpreter (skipped when the pymicro-wakeword wheel is not cached)."""
    import numpy as np

    from tests.support.firmware_models import WAKEWORD

    path = WAKEWORD / "hey_mycroft.tflite"
    if not path.exists():
        pytest.skip(f"{path} not cached")
    model = path.read_bytes()
    _q, url = board
    it = make_interpreter(model, reference=True)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    rng = np.random.default_rng(1)
    with SerialLink(url) as link:
        link.hello()
        flash(model, url, link=link)
        for step in range(12):
            x = np.clip(rng.normal(0, 40, size=inp["shape"]) + 30 * np.sin(step / 3), -128, 127).astype(np.int8)
            it.set_tensor(inp["index"], x)
            it.invoke()
            got, _ = run_with_link(link, [x])
            assert got[0].tobytes() == it.get_tensor(out["index"]).tobytes(), step


@pytest.mark.parametrize("machine", ["mps2-an500", "mps2-an505"])
def test_more_boards_cortex_m7_and_m33(machine):
    """More board profiles: the same firmware built for the Cortex-M7 of QEMU's mps2-an500 (FPv5
    FPU, its own board.h) and the Cortex-M33 of mps2-an505 (ARMv8-M, Secure state, FPv5-SP, DSP;
    its own memory map and link.ld) runs the op models, mcu_small and MLPerf Tiny's KWS model
    bit-exactly."""
    from tests.support.firmware_models import mlperf_tiny

    q, url = qemu_board(machine)
    try:
        models = op_models(4)
        chosen = {k: models[k] for k in ("softmax_beta1.0", "tanh", "hard_swish", "prelu_a8", "fc_per_channel",
                                         "conv_dilated", "ss_negative_stride", "split_v")}
        chosen["mcu_small"] = mcu_small()
        if mlperf_tiny("kws") is not None:
            chosen["kws"] = mlperf_tiny("kws")
        with SerialLink(url) as link:
            assert link.hello().board == machine
            for name, m in chosen.items():
                flash(m, url, link=link)
                details = make_interpreter(m, reference=True).get_input_details()
                x = random_inputs(details, seed=3)
                got, _ = run_with_link(link, x)
                want = run_litert(m, x, reference=True)
                assert len(got) == len(want) and all(g.tobytes() == w.tobytes() for g, w in zip(got, want)), name
            # the EEMBC mode's energy timestamps drive this board's own FPGA I/O LED (another
            # address on the AN505) and its UART divider moves to 9600 baud and back
            from edgerun.bench.device import EembcLink
            from tests.support.firmware_harness import eembc_results_line

            flash(chosen["mcu_small"], url, link=link)
            x = random_inputs(make_interpreter(chosen["mcu_small"], reference=True).get_input_details(), seed=4)[0]
            ee = EembcLink(link, timeout=60)
            assert ee.enter(energy=True, baud=9600) == f"edgerun-{machine}"
            assert ee.command("timestamp") == []
            ee.load(x.tobytes(), chunk=26)
            assert ee.command("infer 2 1")[-1] == eembc_results_line(chosen["mcu_small"], x)
            ee.leave()
            assert link.hello().board == machine
    finally:
        q.kill()
        q.wait()


def test_eembc_energy_mode_on_cortex_m4(board):
    """The MLPerf Tiny / EEMBC text mode on the emulated board, in energy mode at the reference
    DUTs' 9600 baud (the CMSDK UART's BAUDDIV is reprogrammed; QEMU's TCP serial carries bytes at
    any rate): timestamps become pulses on the FPGA LED line (no text), results still equal the
    host's, and edgerun% brings back the framed protocol at the entry rate."""
    import numpy as np

    from edgerun.bench.device import EembcLink
    from tests.support.firmware_harness import eembc_results_line

    _q, url = board
    model = SHIPPED.read_bytes()
    x = np.random.default_rng(17).integers(-128, 128, size=(1, 16, 16, 3), dtype=np.int8)
    with SerialLink(url) as link:
        link.hello()
        flash(model, url, link=link)
        ee = EembcLink(link, timeout=60)
        assert ee.enter(energy=True, baud=9600) == "edgerun-mps2-an386"
        assert ee.command("timestamp") == []
        ee.load(x.tobytes(), chunk=26)
        assert ee.command("infer 3 1") == ["m-warmup-start-1", "m-warmup-done", "m-infer-start-3", "m-infer-done",
                                           eembc_results_line(model, x)]
        ee.leave()
        assert link.hello().board == "mps2-an386"
        ee.enter()  # performance mode: m-lap-us stamps around the timed inferences
        ee.load(x.tobytes(), chunk=31)
        lines = ee.command("infer 2 0")
        assert [ln[:9] for ln in lines[3:5]] == ["m-lap-us-"] * 2 and lines[-1] == eembc_results_line(model, x)
        ee.leave()
        assert link.hello().board == "mps2-an386"


def test_exit_through_semihosting(board):
    q, url = board
    with SerialLink(url) as link:
        link.hello()
        link.request(P.CMD_EXIT, b"\0")
    assert q.wait(10) == 0  # last: it ends QEMU
