"""Streaming state on the firmware (issue 14): microWakeWord's int8 models (VAR_HANDLE,
READ_VARIABLE, ASSIGN_VARIABLE, CALL_ONCE with an init subgraph, int8 -> uint8 QUANTIZE) keep
their state across INVOKEs exactly as one LiteRT interpreter (reference kernels) does across
invoke() calls: a sequence of frames must give LiteRT's bytes at every step. Models come from the
pymicro-wakeword wheel cached by tests/runtime/test_external_models.py; skipped when absent."""

import numpy as np
import pytest
from edgerun_delegates.mcu.firmware import firmware_accepts, firmware_arena_bytes

from edgerun.deploy.flash import model_info, run_with_link
from edgerun.litert import make_interpreter
from tests.support.firmware_harness import raw_flash, sanitized_device
from tests.support.firmware_models import WAKEWORD

NAMES = ["hey_mycroft", "okay_nabu"]


device = pytest.fixture(scope="module", name="device")(sanitized_device)


@pytest.mark.parametrize("name", NAMES)
def test_streaming_state_matches_litert_frame_by_frame(device, name):
    path = WAKEWORD / f"{name}.tflite"
    if not path.exists():
        pytest.skip(f"{path} not cached (tests/runtime/test_external_models.py fetches the pymicro-wakeword wheel)")
    model = path.read_bytes()
    assert firmware_accepts(model, "mps2-an386") == []
    _slot, arena = raw_flash(device, model)
    assert arena == firmware_arena_bytes(model)
    info = model_info(device)
    it = make_interpreter(model, reference=True)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    rng = np.random.default_rng(1)
    seen = set()
    for step in range(30):  # the state carries over: every frame's answer depends on the earlier ones
        x = np.clip(rng.normal(0, 40, size=inp["shape"]) + 30 * np.sin(step / 3), -128, 127).astype(np.int8)
        it.set_tensor(inp["index"], x)
        it.invoke()
        want = it.get_tensor(out["index"])
        got, _ = run_with_link(device, [x], info)
        assert got[0].dtype == want.dtype and got[0].tobytes() == want.tobytes(), f"{name} step {step}"
        seen.add(want.tobytes())
    if name == "hey_mycroft":  # these frames move its output (0..3), so the state is exercised
        assert len(seen) > 2
