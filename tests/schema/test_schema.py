"""Schema reader/writer: round trips, LiteRT agreement, hostile bytes."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgerun.errors import ModelFormatError
from edgerun.ir import DimensionMetadata, ModelBuilder, QuantParams, Sparsity
from edgerun.schema import read_model, write_model
from edgerun.schema.tflite import DimensionType
from edgerun.testing import run_litert


def _tiny_model() -> bytes:
    b = ModelBuilder("tiny")
    x = b.input("x", (1, 4, 4, 3), "int8", (0.05, -3))
    y = b.tensor("y", (1, 4, 4, 3), "int8", (0.04, -128))
    z = b.tensor("z", (1, 4, 4, 3), "int8", (0.04, -128))
    b.const("w", np.arange(12, dtype=np.int8).reshape(4, 3), quant=QuantParams([0.1, 0.2, 0.3, 0.4], 0, 0))
    b.op("RELU", [x], [y])
    b.op("RELU6", [y], [z])
    b.output(z)
    b.signature()
    b.metadata("edgerun.test", b"\x00\x01hello")
    return b.to_bytes()


def test_round_trip_is_byte_identical_and_preserves_everything():
    data = _tiny_model()
    m = read_model(data)
    assert write_model(m) == data
    t = m.main.tensors[3]
    assert t.quant.per_axis and t.quant.quantized_dimension == 0
    np.testing.assert_allclose(t.quant.scale, [0.1, 0.2, 0.3, 0.4])
    w = m.tensor_data(t)
    assert w.shape == (4, 3) and not w.flags.writeable  # zero-copy view into the bytes
    assert m.metadata_dict()["edgerun.test"] == b"\x00\x01hello"
    assert m.signature_defs[0].inputs == [("x", 0)]
    assert [m.op_name(o) for o in m.main.operators] == ["RELU", "RELU6"]


def test_writer_is_deterministic():
    assert _tiny_model() == _tiny_model()


def test_buffers_are_16_byte_aligned():
    data = _tiny_model()
    m = read_model(data)
    for buf in m.buffers[1:]:
        if len(buf):
            addr = np.frombuffer(buf, np.uint8).ctypes.data - np.frombuffer(data, np.uint8).ctypes.data
            assert addr % 16 == 0


def test_sine_model_round_trip_runs_identically_in_litert(sine_model):
    m = read_model(sine_model)
    out = write_model(m)
    x = [np.array([[0.7]], np.float32)]
    np.testing.assert_array_equal(run_litert(out, x), run_litert(sine_model, x))
    assert write_model(read_model(out)) == out


def test_sparsity_round_trip():
    b = ModelBuilder()
    sp = Sparsity([0, 1], [], [DimensionMetadata(DimensionType.DENSE, 2),
                               DimensionMetadata(DimensionType.SPARSE_CSR, 0, np.array([0, 1, 2], np.int32),
                                                 np.array([1, 0], np.int32))])
    b.tensor("s", (2, 2), "float32", data=np.array([1.0, 2.0], np.float32), sparsity=sp)
    m = read_model(b.to_bytes())
    got = m.main.tensors[0].sparsity
    assert got.traversal_order == [0, 1]
    assert got.dim_metadata[1].format == DimensionType.SPARSE_CSR
    np.testing.assert_array_equal(got.dim_metadata[1].array_segments, [0, 1, 2])
    np.testing.assert_array_equal(got.dim_metadata[1].array_indices, [1, 0])


@pytest.mark.parametrize("cut", [0, 3, 7, 8, 20, 100, -1])
def test_truncated_models_raise_model_format_error(cut):
    data = _tiny_model()
    with pytest.raises(ModelFormatError):
        read_model(data[:cut] if cut >= 0 else data[: len(data) // 2])


def test_wrong_identifier():
    data = bytearray(_tiny_model())
    data[4:8] = b"ONNX"
    with pytest.raises(ModelFormatError, match="identifier"):
        read_model(bytes(data))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_models_raise_only_model_format_error(data):
    """Random byte flips anywhere: parse succeeds or raises ModelFormatError, nothing else."""
    raw = bytearray(_tiny_model())
    n = data.draw(st.integers(1, 8))
    for _ in range(n):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    try:
        m = read_model(bytes(raw))
        for t in m.main.tensors:  # touching constant data must be safe too
            try:
                m.tensor_data(t)
            except ModelFormatError:
                pass
    except ModelFormatError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=300))
def test_random_bytes_raise_only_model_format_error(blob):
    try:
        read_model(b"\x10\x00\x00\x00TFL3" + blob)
    except ModelFormatError:
        pass
