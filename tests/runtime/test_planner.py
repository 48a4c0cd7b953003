"""Arena planner: never overlaps live tensors (property test), and beats or equals TFLM's arena."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgerun.ir import ModelBuilder
from edgerun.runtime import Interpreter, planner  # noqa: F401


@st.composite
def buffers(draw):
    n = draw(st.integers(1, 40))
    out = []
    for k in range(n):
        first = draw(st.integers(-1, 30))
        last = draw(st.integers(first, 31))
        out.append(planner.Buffer(k, draw(st.integers(0, 5000)), first, last))
    return out


@settings(max_examples=300, deadline=None)
@given(buffers())
def test_plan_never_overlaps_live_buffers(bufs):
    offsets, arena = planner.plan(bufs)
    assert planner.overlaps(bufs, offsets) == []
    for b in bufs:
        assert offsets[b.key] % planner.ALIGNMENT == 0
        assert offsets[b.key] + b.size <= arena
    # never worse than giving every buffer its own space
    assert arena <= sum(-(-b.size // 16) * 16 for b in bufs)
    # and at least the largest set of simultaneously live bytes
    steps = range(min(b.first for b in bufs), max(b.last for b in bufs) + 1)
    peak = max(sum(b.size for b in bufs if b.first <= s <= b.last) for s in steps)
    assert arena >= peak


def test_plan_is_deterministic():
    bufs = [planner.Buffer(i, 100 * (i % 5 + 1), i, i + 2) for i in range(20)]
    assert planner.plan(bufs) == planner.plan(list(reversed(bufs)))


def test_chain_reuses_memory():
    """A chain of same-size ops needs two buffers, not one per tensor."""
    b = ModelBuilder()
    x = b.input("x", (1, 1000), "float32")
    prev = x
    for i in range(6):
        y = b.tensor(f"t{i}", (1, 1000), "float32")
        b.op("RELU", [prev], [y])
        prev = y
    b.output(prev)
    it = Interpreter(model_content=b.to_bytes())
    it.allocate_tensors()
    assert it.arena_bytes == 3 * 4000  # the input (kept intact, as LiteRT does) + two ping-pong buffers
    mcu = Interpreter(model_content=b.to_bytes(), preserve_inputs=False)
    mcu.allocate_tensors()
    assert mcu.arena_bytes == 2 * 4000
    x_in = np.linspace(-1, 1, 1000, dtype=np.float32).reshape(1, 1000)
    it.set_tensor(0, x_in)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), np.maximum(x_in, 0))


@pytest.mark.parametrize("alpha, size", [(0.25, 96), (0.5, 128)])
def test_arena_no_larger_than_tflm(alpha, size):
    """edgerun's planner vs TFLM's planned (non-persistent) arena on the same int8 model."""
    pytest.importorskip("tflite_micro", reason="tflite-micro package not installed")
    from edgerun_delegates.mcu import tflm_arena

    from edgerun.testing import mobilenet_v1

    data = mobilenet_v1(alpha, size, dtype="int8")
    it = Interpreter(model_content=data, preserve_inputs=False)  # TFLM reuses input memory too
    it.allocate_tensors()
    tflm = tflm_arena(data, arena_size=4 << 20)
    assert tflm["head"] > 0
    assert it.arena_bytes <= tflm["head"], (it.arena_bytes, tflm)
