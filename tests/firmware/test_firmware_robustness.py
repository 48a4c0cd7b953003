"""Firmware memory safety at COMMIT (issue 11): hostile shapes whose sizes wrap in 32 or 64 bits,
empty tensors and runaway work are refused by the loader, never run, and never become (or stay,
across a reset) the active model. Run against the posix build under ASan/UBSan, sent with
raw BEGIN/DATA/END/COMMIT frames so only the firmware's own validation stands in the way."""

import hashlib
from pathlib import Path

import numpy as np
import pytest

from edgerun.deploy import protocol as P
from edgerun.deploy.flash import model_info, run_with_link
from edgerun.deploy.serial_link import DeviceError
from edgerun.ir import ModelBuilder
from edgerun.testing import run_litert
from tests.support.firmware_harness import raw_flash, sanitized_device
from tests.support.firmware_models import mcu_small, unary_int8

REPRO = Path(__file__).resolve().parents[1] / "data" / "repro"
GOOD = mcu_small(5)


device = pytest.fixture(scope="module", name="device")(sanitized_device)


def _fc(batches, depth, units, out_shape) -> bytes:
    b = ModelBuilder()
    x = b.input("x", (batches, depth), "int8", (0.1, 0))
    w = b.const("w", np.ones((units, depth), np.int8), "int8", (0.01, 0))
    y = b.tensor("y", out_shape, "int8", (0.1, 0))
    b.op("FULLY_CONNECTED", [x, w], [y])
    b.output(y)
    return b.to_bytes()


def _mean_over_zero_dim() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (0, 1 << 24, 1 << 24, 1), "int8", (0.1, 0))
    y = b.tensor("y", (1, 1, 1, 1), "int8", (0.1, 0))
    b.op("MEAN", [x, b.const("axes", np.array([0], np.int32))], [y], keep_dims=True)
    b.output(y)
    return b.to_bytes()


HOSTILE = {
    # batches x units = 2^21 x 2048 = 2^32 wraps to 0 in 32 bits (output shape [0])
    "fc_batches_units_wrap_32": lambda: _fc(1 << 21, 1, 2048, (0,)),
    "fc_batches_units_wrap_32_to_1": lambda: _fc(1 << 21, 1, 2048 + 1, (1 << 21,)),
    # 2^24 x 2^24 x 2^24 x 1 = 2^72: wraps to 0 in 64 bits
    "pool_dims_2e72": lambda: unary_int8("MAX_POOL_2D", (1 << 24, 1 << 24, 1 << 24, 1), padding=1,
                                     stride_w=1, stride_h=1, filter_width=1, filter_height=1),
    # 2^16 x 2^16 x 2^16 x 2^16 = 2^64 wraps to exactly 0 in 64 bits
    "relu_dims_2e64": lambda: unary_int8("RELU", (1 << 16, 1 << 16, 1 << 16, 1 << 16)),
    "relu_2e26_plus_1": lambda: unary_int8("RELU", ((1 << 26) + 1,)),
    "relu_dim_2e31": lambda: unary_int8("RELU", (1, (1 << 31) - 1)),
    "mean_over_zero_dim": _mean_over_zero_dim,
    "relu_empty": lambda: unary_int8("RELU", (4, 0)),
    # valid shapes, but a pooling window of 2^24 x 2^24 over a 2048 x 2048 image: refused by the work budget
    "pool_runaway_work": lambda: unary_int8("AVERAGE_POOL_2D", (1, 2048, 2048, 1), (1, 2048, 2048, 1), padding=0,
                                        stride_w=1, stride_h=1, filter_width=1 << 24, filter_height=1 << 24),
}
for name in ("fc_wrap", "overflow_pool"):
    HOSTILE[f"repro_{name}"] = (REPRO / f"{name}.tflite").read_bytes


def _assert_good_active(link):
    info = model_info(link)
    assert info.sha256 == hashlib.sha256(GOOD).hexdigest()
    x = np.arange(16 * 16 * 3, dtype=np.int64).reshape(1, 16, 16, 3).astype(np.int8)
    got, _ = run_with_link(link, [x], info)
    assert got[0].tobytes() == run_litert(GOOD, [x], reference=True)[0].tobytes()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_model_refused_at_commit_and_never_active(device, name):
    model = HOSTILE[name]()
    raw_flash(device, GOOD)
    with pytest.raises(DeviceError) as e:
        raw_flash(device, model)
    assert e.value.code in (P.ERR_MODEL_INVALID, P.ERR_UNSUPPORTED_OP, P.ERR_ARENA_TOO_SMALL), str(e.value)
    _assert_good_active(device)
    device.request(P.CMD_INVOKE)  # INVOKE runs the good model, not the refused one
    # after a reset the device boots into the good model again
    device.request(P.CMD_RESET)
    device.hello()
    _assert_good_active(device)


@pytest.mark.slow
def test_boundary_shapes_still_load(device):
    """The checks are not too tight: 2^20 elements in one dimension (within the arena) loads and runs."""
    model = unary_int8("RELU", (1 << 20,))
    raw_flash(device, model)
    x = (np.arange(1 << 20) % 256 - 128).astype(np.int8)
    got, _ = run_with_link(device, [x])
    assert got[0].tobytes() == run_litert(model, [x], reference=True)[0].tobytes()
