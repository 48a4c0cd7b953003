"""The C interpreter (posix build, under ASan/UBSan) against LiteRT's reference kernels and
edgerun's own interpreter: byte-identical outputs, op by op, over the serial protocol."""

import hashlib

import numpy as np
import pytest
from firmware_harness import tcp_firmware
from firmware_models import mcu_small, op_models, unsupported_model

from edgerun._litert import make_interpreter
from edgerun.deploy.flash import flash, model_info, run_with_link
from edgerun.deploy.serial_link import DeviceError, SerialLink
from edgerun.errors import EdgerunError
from edgerun.testing import random_inputs, run_edgerun, run_litert

MODELS = {f"{name}_s{seed}": m for seed in (0, 1) for name, m in op_models(seed).items()}
MODELS["mcu_small"] = mcu_small()


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    fw, url = tcp_firmware(tmp_path_factory.mktemp("fw"))
    link = SerialLink(url)
    link.hello()
    yield link
    link.close()
    fw.stop()
    assert b"ERROR: AddressSanitizer" not in fw.log and b"runtime error" not in fw.log, fw.log.decode()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_op_bit_exact_with_litert(device, name):
    model = MODELS[name]
    flash(model, device.port, link=device)
    info = model_info(device)
    assert info.sha256 == hashlib.sha256(model).hexdigest()
    details = make_interpreter(model, reference=True).get_input_details()
    for seed in range(4):
        inputs = random_inputs(details, seed=seed)
        got, _ = run_with_link(device, inputs, info)
        want = run_litert(model, inputs, reference=True)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert g.tobytes() == w.tobytes(), f"{name} seed {seed}: max diff " \
                f"{np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))}"
        try:
            host = run_edgerun(model, inputs)
        except EdgerunError:
            continue  # edgerun's Python kernel for this op is not there (yet)
        for g, h in zip(got, host):
            assert g.tobytes() == h.tobytes(), f"{name}: device differs from edgerun's interpreter"


def test_unsupported_op_refused_at_load_and_old_model_kept(device):
    good = MODELS["mcu_small"]
    flash(good, device.port, link=device)
    with pytest.raises(DeviceError, match="TANH") as e:
        flash(unsupported_model(), device.port, link=device)
    assert e.value.code == 12  # ER_ERR_UNSUPPORTED_OP
    info = model_info(device)
    assert info.sha256 == hashlib.sha256(good).hexdigest()
    x = np.zeros((1, 16, 16, 3), np.int8)
    got, _ = run_with_link(device, [x], info)
    assert got[0].tobytes() == run_litert(good, [x])[0].tobytes()


def test_arena_is_checked_against_ram(device):
    from edgerun.ir import ModelBuilder

    b = ModelBuilder()
    x = b.input("x", (1, 1024, 1024, 4), "int8", (0.1, 0))
    y = b.tensor("y", (1, 1024, 1024, 4), "int8", (0.1, 0))
    b.op("RELU", [x], [y])
    b.output(y)
    with pytest.raises(DeviceError, match="arena"):
        flash(b.to_bytes(), device.port, link=device)


def test_wrong_input_shape_is_refused_on_the_host(device):
    flash(MODELS["mcu_small"], device.port, link=device)
    with pytest.raises(EdgerunError, match="expects int8"):
        run_with_link(device, [np.zeros((1, 16, 16, 4), np.int8)])
