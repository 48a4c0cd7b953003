"""mcu delegate: TFLM on the host gives bit-identical int8 outputs to edgerun, and reports its
arena next to edgerun's planner."""

import numpy as np
import pytest

from edgerun.delegate import get_delegate
from edgerun.errors import DelegateUnavailableError, EdgerunError
from edgerun.runtime.interpreter import Interpreter
from edgerun.schema.tflite import Activation, Padding
from edgerun.testing import random_inputs, run_edgerun
from tests.support.delegate_models import Q, small_cnn

pytest.importorskip("tflite_micro")

from edgerun_delegates.mcu import tflm_arena


def _kws():
    # a keyword-spotting-shaped model: 49x10 MFCC-like input, conv stride 2, depthwise, avg, fc
    q = Q(50)
    x = q.input((1, 49, 10, 1), 0.1, -20)
    y = q.conv(x, 16, k=3, stride=2, act=Activation.RELU)
    y = q.conv(y, 16, depthwise=True, act=Activation.RELU)
    y = q.conv(y, 16, k=1)
    y = q.pool(y, "AVERAGE_POOL_2D", k=5, stride=5, padding=Padding.VALID)
    y = q.reshape(y, (1, 80))
    y = q.fc(y, 4, w_scale=(2e-5, 2e-4))
    return q.done(q.softmax(y))


@pytest.mark.parametrize("name,make", [("small_cnn", small_cnn), ("kws", _kws)])
def test_tflm_bit_identical_and_arena(name, make):
    m = make()
    it = Interpreter(model_content=m, delegates=["mcu"])
    it.allocate_tensors()
    assert len(it.partitions) == 1 and len(it.partitions[0].nodes) == len(it.model.main.operators)
    kernel = it.steps()[0].kernel
    for seed in range(4):
        xs = random_inputs(it.get_input_details(), seed)
        got = it.predict(*xs)
        want = run_edgerun(m, xs)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w)
    plain = Interpreter(model_content=m)
    plain.allocate_tensors()
    # TFLM's arena: total = persistent (tail) + non-persistent (head); the head holds the
    # activations, the part edgerun's planner plans
    assert kernel.arena_bytes == kernel.arena_head_bytes + kernel.arena_tail_bytes
    assert kernel.arena_head_bytes > 0 and plain.arena_bytes > 0
    assert plain.arena_bytes <= kernel.arena_head_bytes * 1.5
    t = tflm_arena(m)
    assert t["total"] == kernel.arena_bytes


def test_arena_too_small_fails_clearly():
    m = _kws()
    with pytest.raises(EdgerunError, match="1024-byte arena"):
        tflm_arena(m, arena_size=1024)


def test_serial_back_end_is_lazy():
    d = get_delegate("mcu", port="/dev/ttyUSB-nonexistent")
    try:
        import edgerun_delegates.mcu.serial_backend  # noqa: F401
    except ImportError:
        assert not d.is_available().ok
        it = Interpreter(model_content=small_cnn(), delegates=[d])
        with pytest.raises(DelegateUnavailableError, match="serial back end"):
            it.allocate_tensors()
    else:  # the firmware back end exists: loading the delegate must not open the port yet
        assert d.is_available().ok


def test_float_nodes_stay_on_edgerun():
    from tests.support.delegate_models import float_relu_chain

    it = Interpreter(model_content=float_relu_chain(), delegates=["mcu"])
    it.allocate_tensors()
    assert it.partitions == []
    reasons = it.delegation_report().row(0)["reasons"]["mcu"]
    assert "float32" in reasons and "int8" in reasons


def test_serial_back_end_matches_tflm_bit_for_bit(tmp_path):
    """Both back ends of one delegate: edgerun firmware (posix build over a socket link) and TFLM."""
    try:
        import serial  # noqa: F401
        from edgerun_delegates.mcu import serial_backend  # noqa: F401

        from tests.support.firmware_harness import tcp_firmware
        from tests.support.firmware_models import mcu_small
    except ImportError as e:
        pytest.skip(f"serial back end or firmware harness not available: {e}")
    try:
        fw, url = tcp_firmware(tmp_path)
    except RuntimeError as e:  # the firmware does not build here
        pytest.skip(str(e).splitlines()[0])
    try:
        m = mcu_small()
        dev = Interpreter(model_content=m, delegates=[get_delegate("mcu", port=url)])
        dev.allocate_tensors()
        host = Interpreter(model_content=m, delegates=["mcu"])
        host.allocate_tensors()
        assert [p.nodes for p in dev.partitions] == [p.nodes for p in host.partitions]
        for seed in range(2):
            xs = random_inputs(dev.get_input_details(), seed)
            a, b, c = dev.predict(*xs), host.predict(*xs), run_edgerun(m, xs)
            assert np.array_equal(a[0], b[0]) and np.array_equal(b[0], c[0])
    finally:
        fw.stop()
