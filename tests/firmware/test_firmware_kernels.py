"""The C interpreter (posix build, under ASan/UBSan) against LiteRT's reference kernels and
edgerun's own interpreter: byte-identical outputs, op by op, over the serial protocol."""

import hashlib

import numpy as np
import pytest

from edgerun.deploy.flash import flash, model_info, run_with_link
from edgerun.deploy.serial_link import DeviceError
from edgerun.errors import EdgerunError
from edgerun.litert import make_interpreter
from edgerun.testing import random_inputs, run_edgerun, run_litert
from tests.support.firmware_harness import converted_digits, raw_flash, sanitized_device
from tests.support.firmware_models import mcu_small, op_models, unsupported_model

MODELS = {f"{name}_s{seed}": m for seed in (0, 1) for name, m in op_models(seed).items()}
MODELS["mcu_small"] = mcu_small()


device = pytest.fixture(scope="module", name="device")(sanitized_device)


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
        assert len(got) == len(want)
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
    # the host refuses it before sending anything (the firmware's own table says so) ...
    with pytest.raises(EdgerunError, match="nothing was sent"):
        flash(unsupported_model(), device.port, link=device)
    # ... and the firmware refuses it at COMMIT when it is sent anyway
    with pytest.raises(DeviceError, match="ELU") as e:
        raw_flash(device, unsupported_model())
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
    with pytest.raises(EdgerunError, match="arena"):
        flash(b.to_bytes(), device.port, link=device)
    with pytest.raises(DeviceError, match="arena"):
        raw_flash(device, b.to_bytes())


def test_wrong_input_shape_is_refused_on_the_host(device):
    flash(MODELS["mcu_small"], device.port, link=device)
    with pytest.raises(EdgerunError, match="expects int8"):
        run_with_link(device, [np.zeros((1, 16, 16, 4), np.int8)])


def test_rollback_and_reset(device):
    from edgerun.deploy import protocol as P
    from edgerun.deploy.flash import rollback

    a, b = mcu_small(31), mcu_small(32)
    flash(a, device.port, link=device)
    flash(b, device.port, link=device)
    assert model_info(device).sha256 == hashlib.sha256(b).hexdigest()
    r = rollback(device.port, link=device)
    assert model_info(device).sha256 == hashlib.sha256(a).hexdigest() and r["arena_bytes"] > 0
    # RESET: the device re-initialises from flash and comes back with the same active model
    device.request(P.CMD_RESET)
    device.hello()
    assert model_info(device).sha256 == hashlib.sha256(a).hexdigest()
    x = np.ones((1, 16, 16, 3), np.int8)
    assert run_with_link(device, [x])[0][0].tobytes() == run_litert(a, [x])[0].tobytes()
    # the other slot still holds b, so rolling back again returns to it
    rollback(device.port, link=device)
    assert model_info(device).sha256 == hashlib.sha256(b).hexdigest()


def test_converted_model_bit_exact(device, tmp_path):
    """A real network: models/digits_cnn.onnx through edgerun's converter, then on the device."""
    model = converted_digits(tmp_path, "digits.tflite", target="mcu")
    flash(model, device.port, link=device)
    info = model_info(device)
    details = make_interpreter(model, reference=True).get_input_details()
    for seed in range(3):
        inputs = random_inputs(details, seed=seed)
        got, _ = run_with_link(device, inputs, info)
        assert got[0].tobytes() == run_litert(model, inputs)[0].tobytes()


def test_interrupted_flash_resumes_in_the_next_call(device):
    """The host goes away mid-transfer (here: its progress callback raises); the next flash()
    continues from what the device acknowledged instead of starting over."""
    model = mcu_small(41)

    class Unplugged(Exception):
        pass

    def progress(done, total):
        if done >= 8192:
            raise Unplugged

    with pytest.raises(Unplugged):
        flash(model, device.port, link=device, progress=progress, max_payload=1024)
    st = device.status()
    receiving = [s for s in st.slots if s.state == 1]
    assert receiving and receiving[0].received >= 8192
    r = flash(model, device.port, link=device)
    assert r.resumed_from >= 8192 and not r.skipped
    assert model_info(device).sha256 == hashlib.sha256(model).hexdigest()
    assert r.payload_bytes == len(model) - r.resumed_from  # only the rest went over the link
