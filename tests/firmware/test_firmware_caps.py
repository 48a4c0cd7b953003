"""One truth for mcu:BOARD (issue 9 item 4, issue 14 item 2): the host's view of what the firmware
runs is generated from the firmware's sources, and its prediction of COMMIT is checked against
the posix firmware's COMMIT in both directions (models it accepts and models it refuses)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from edgerun_delegates.mcu import OPS, TFLM_OPS
from edgerun_delegates.mcu.firmware import (
    board_capabilities,
    firmware_accepts,
    firmware_arena_bytes,
    load_caps,
)

from edgerun.deploy.serial_link import DeviceError
from edgerun.ir import ModelBuilder
from edgerun.schema.reader import read_model
from edgerun.targets import BOARDS, parse_target
from tests.support.firmware_harness import FIRMWARE, raw_flash, sanitized_device
from tests.support.firmware_models import mcu_small, op_models

REPRO = Path(__file__).resolve().parents[1] / "data" / "repro"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_caps", FIRMWARE / "tools" / "gen_caps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_caps_json_is_generated_from_the_firmware_sources():
    gen = _gen()
    assert gen.OUT.read_text() == gen.render(), "stale: run python3 firmware/tools/gen_caps.py"


def test_every_op_in_the_table_has_a_bit_exact_test_model():
    """The table must not promise an op the kernels tests do not run (tests/firmware/test_firmware_kernels.py
    runs every op_models() model against LiteRT)."""
    used = set()
    for m in list(op_models(0).values()) + [mcu_small()]:
        model = read_model(m)
        used |= {model.op_name(op) for op in model.main.operators}
    # the streaming-state ops are tested on microWakeWord's models (tests/firmware/test_firmware_streaming.py)
    used |= {"CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"}
    used.add("SUM")  # against LiteRT's uint8 SUM twin (tests/firmware/test_firmware_kernels_more.py)
    assert set(load_caps()["ops"]) <= used, set(load_caps()["ops"]) - used


def test_delegate_table_is_the_firmwares_and_tflm_is_its_own_target():
    assert set(OPS) == set(load_caps()["ops"])
    assert "PRELU" in TFLM_OPS
    t = parse_target("mcu:nrf52840")
    assert t.firmware and t.delegates == ("mcu",)
    t = parse_target("tflm")
    assert not t.firmware and t.delegates == ("tflm",) and t.board.name == "mps2-an386"
    assert parse_target("tflm:nrf52840").board.flash_bytes == 384 * 1024


def test_board_sizes_come_from_the_port_or_the_profile():
    c = board_capabilities("mps2-an386")
    b = BOARDS["mps2-an386"]
    assert c["arena_bytes"] == b.ram_bytes - b.firmware_ram_bytes and c["slot_bytes"] == b.flash_bytes
    assert c["source"].endswith("board.h")
    n = board_capabilities("nrf52840")
    assert n["slot_bytes"] == 384 * 1024 and n["source"] == "edgerun/targets.py"


def _big_weights_model(nbytes):
    b = ModelBuilder()
    depth = 1024
    units = nbytes // depth
    x = b.input("x", (1, depth), "int8", (0.1, 0))
    w = b.const("w", (np.arange(units * depth) % 255 - 127).astype(np.int8).reshape(units, depth), "int8", (0.01, 0))
    y = b.tensor("y", (1, units), "int8", (0.5, 0))
    b.op("FULLY_CONNECTED", [x, w], [y])
    b.output(y)
    return b.to_bytes()


def test_a_model_larger_than_the_slot_is_refused_for_the_board():
    m = _big_weights_model(400 * 1024)  # fits mps2's 1 MiB slot, not nrf52840's 384 KiB
    assert firmware_accepts(m, "mps2-an386") == []
    why = firmware_accepts(m, "nrf52840")
    assert why and "flash slot" in why[0]


def _chain(n_relu, dtype="int8"):
    b = ModelBuilder()
    q = (0.1, 0) if dtype == "int8" else None
    x = b.input("x", (1, 8), dtype, q)
    for i in range(n_relu):
        y = b.tensor(f"t{i}", (1, 8), dtype, q)
        b.op("RELU", [x], [y])
        x = y
    b.output(x)
    return b.to_bytes()


def _unary(op, shape, out_shape=None, q=(0.1, 0), oq=(0.1, 0), **opts):
    b = ModelBuilder()
    x = b.input("x", shape, "int8", q)
    y = b.tensor("y", out_shape or shape, "int8", oq)
    b.op(op, [x], [y], **opts)
    b.output(y)
    return b.to_bytes()


def _batch_signature():
    b = ModelBuilder()
    x = b.input("x", (1, 49, 10, 1), "int8", (0.1, 0), shape_signature=(-1, 49, 10, 1))
    y = b.tensor("y", (1, 49, 10, 1), "int8", (0.1, 0), shape_signature=(-1, 49, 10, 1))
    b.op("RELU", [x], [y])
    b.output(y)
    return b.to_bytes()


def _mean(n_out):
    b = ModelBuilder()
    x = b.input("x", (1, 2, n_out), "int8", (0.1, 0))
    y = b.tensor("y", (1, n_out), "int8", (0.1, 0))
    b.op("MEAN", [x, b.const("axes", np.array([1], np.int32))], [y], keep_dims=False)
    b.output(y)
    return b.to_bytes()


CASES = {
    "mcu_small": mcu_small,
    "conv": lambda: op_models(1)["conv_same_s2_relu6"],
    "fc_per_channel": lambda: op_models(1)["fc_per_channel"],
    "quant_chain": lambda: op_models(1)["quantize_requantize_dequantize"],
    "batch_minus_one_signature": _batch_signature,
    "chain_190": lambda: _chain(190),
    "chain_400_no_fixed_tensor_limit": lambda: _chain(400),
    "mean_4096": lambda: _mean(4096),
    "arena_just_fits": lambda: _unary("RELU", (1, 1900 * 1024)),
    # refused
    "float_relu": lambda: _chain(1, "float32"),
    "not_in_table_elu": lambda: _unary("ELU", (1, 8)),
    "mean_4097": lambda: _mean(4097),
    "arena_too_big": lambda: _unary("RELU", (1, 2000 * 1024)),
    "unquantized_int8": lambda: _unary("RELU", (1, 8), q=None, oq=None),
    "fc_units_wrap": lambda: read_repro("fc_wrap"),
    "pool_dims_overflow": lambda: read_repro("overflow_pool"),
}


def read_repro(name):
    return (REPRO / f"{name}.tflite").read_bytes()


device = pytest.fixture(scope="module", name="device")(sanitized_device)


@pytest.mark.parametrize("name", sorted(CASES))
def test_prediction_equals_commit(device, name):
    model = CASES[name]()
    predicted = firmware_accepts(model, "mps2-an386")
    try:
        _slot, arena = raw_flash(device, model)
        accepted, why = True, ""
    except DeviceError as e:
        accepted, why = False, str(e)
    assert (predicted == []) == accepted, f"host predicted {predicted or 'accept'}, firmware: {why or 'accepted'}"
    if accepted:  # and the RAM figure is the firmware's own, to the byte
        assert arena == firmware_arena_bytes(model)


@pytest.mark.parametrize("name", ["hard_swish", "split_v", "pack_unpack", "ss_masks_shrink", "mirror_pad_reflect",
                                  "prelu_a8", "fc_per_channel", "softmax_beta1.0"])
def test_arena_prediction_for_op_models(device, name):
    model = op_models(2)[name]
    assert firmware_accepts(model, "mps2-an386") == []
    assert raw_flash(device, model)[1] == firmware_arena_bytes(model)


def test_mediapipe_style_model_checks_flashes_and_verifies(device, tmp_path):
    """PRELU / STRIDED_SLICE / RESIZE / HARD_SWISH and over 256 tensors: `edgerun check --target
    mcu:mps2-an386` (the console script) says it runs, the firmware accepts it with the predicted
    arena, and the device's outputs are LiteRT's reference bytes."""
    import os
    import subprocess

    from edgerun.deploy.flash import run_with_link, verify_on_device
    from edgerun.litert import make_interpreter
    from edgerun.testing import random_inputs, run_litert
    from tests.support.firmware_models import mediapipe_style

    model = mediapipe_style()
    g = read_model(model).main
    assert len(g.tensors) > 256
    assert firmware_accepts(model, "mps2-an386") == []
    path = tmp_path / "mp.tflite"
    path.write_bytes(model)
    r = subprocess.run(["edgerun", "check", str(path), "--target", "mcu:mps2-an386"], capture_output=True, text=True,
                       env=dict(os.environ, NO_COLOR="1"), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    _slot, arena = raw_flash(device, model)
    assert arena == firmware_arena_bytes(model)
    details = make_interpreter(model, reference=True).get_input_details()
    for seed in range(2):
        xs = random_inputs(details, seed=seed)
        got, _ = run_with_link(device, xs)
        assert got[0].tobytes() == run_litert(model, xs, reference=True)[0].tobytes()
    assert verify_on_device(model, device.port, link=device, flash_first=False)["ok"]
