"""Hostile models through the whole interpreter: only EdgerunError, never a crash or a hang."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgerun import Interpreter
from edgerun.errors import EdgerunError
from edgerun.ir import ModelBuilder
from edgerun.ops.registry import REGISTRY


def _model() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 4), "int8", (0.05, -3))
    y = b.tensor("y", (1, 6, 6, 4), "int8", (0.04, -128))
    b.op("RELU", [x], [y])
    cur = y
    if "CONV_2D" in REGISTRY and "int8" in REGISTRY["CONV_2D"].kernels:
        w = b.const("w", np.arange(-72, 72, dtype=np.int8).reshape(4, 3, 3, 4), quant=([0.01] * 4, 0, 0))
        bias = b.const("b", np.arange(4, dtype=np.int32), quant=([0.0004] * 4, 0, 0))
        z = b.tensor("z", (1, 6, 6, 4), "int8", (0.1, 0))
        b.op("CONV_2D", [cur, w, bias], [z], padding=0, stride_w=1, stride_h=1, fused_activation_function=1)
        cur = z
    if "RESHAPE" in REGISTRY:
        r = b.tensor("r", (1, 144), "int8", (0.1, 0))
        b.op("RESHAPE", [cur, b.const("s", np.array([1, 144], np.int32))], [r], new_shape=(1, 144))
        cur = r
    b.output(cur)
    return b.to_bytes()


MODEL = _model()


def _run(data: bytes) -> None:
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], np.zeros(tuple(d["shape"]), d["dtype"]))
    it.invoke()
    for d in it.get_output_details():
        it.get_tensor(d["index"])


def test_unmutated_model_runs():
    _run(MODEL)


@pytest.mark.timeout(300)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_models_raise_only_edgerun_errors(data):
    raw = bytearray(MODEL)
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    try:
        _run(bytes(raw))
    except EdgerunError:
        pass
