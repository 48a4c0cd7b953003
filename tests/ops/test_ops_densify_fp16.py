"""Sparse float16 weights (DENSIFY -> DEQUANTIZE), as Google's converter writes them."""

import numpy as np
import pytest

from edgerun import Interpreter
from edgerun.ir import DimensionMetadata, ModelBuilder, Sparsity
from edgerun.schema.tflite import DimensionType
from edgerun.testing import compare_with_litert


def test_sparse_float16_weights_densify_then_dequantize():
    dense = np.array([[0, 1.5, 0, 0], [2.25, 0, 0, -3.0], [0, 0, 0, 0.5]], np.float16)
    rows, cols = np.nonzero(dense)
    segments = np.searchsorted(rows, np.arange(dense.shape[0] + 1)).astype(np.int32)
    sp = Sparsity([0, 1], [], [DimensionMetadata(DimensionType.DENSE, dense.shape[0]),
                               DimensionMetadata(DimensionType.SPARSE_CSR, 0, segments, cols.astype(np.int32))])
    b = ModelBuilder()
    x = b.input("x", (2, 4), "float32")
    w16 = b.tensor("w16", dense.shape, "float16", data=dense[rows, cols], sparsity=sp)
    wd16 = b.tensor("w_dense16", dense.shape, "float16")
    w32 = b.tensor("w32", dense.shape, "float32")
    b.op("DENSIFY", [w16], [wd16])
    b.op("DEQUANTIZE", [wd16], [w32])
    y = b.tensor("y", (2, 3), "float32")
    b.op("FULLY_CONNECTED", [x, w32, -1], [y], fused_activation_function=0)
    b.output(y)
    data = b.to_bytes()
    got = compare_with_litert(data, [np.arange(8, dtype=np.float32).reshape(2, 4)])
    np.testing.assert_allclose(got[0], np.arange(8, dtype=np.float32).reshape(2, 4) @ dense.astype(np.float32).T)
    it = Interpreter(model_content=data)
    it.allocate_tensors()  # the weights are expanded once, here, not at every invoke
    assert len(it.steps()) == 1


def test_inputs_survive_invoke():
    """A second invoke() without set_tensor() sees the same input (LiteRT semantics)."""
    b = ModelBuilder()
    x = b.input("x", (1, 64), "float32")
    prev = x
    for i in range(4):
        t = b.tensor(f"t{i}", (1, 64), "float32")
        b.op("RELU" if i % 2 else "TANH", [prev], [t])
        prev = t
    b.output(prev)
    it = Interpreter(model_content=b.to_bytes())
    it.allocate_tensors()
    xin = np.linspace(-2, 2, 64, dtype=np.float32).reshape(1, 64)
    it.set_tensor(0, xin)
    it.invoke()
    first = it.get_tensor(it.get_output_details()[0]["index"])
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(0), xin)
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), first)


def _sparse_fp16_conv(dense: np.ndarray) -> bytes:
    """x -> CONV_2D whose (O, 1, 1, I) filter is sparse float16 (DENSIFY -> DEQUANTIZE)."""
    o, i = dense.shape
    rows, cols = np.nonzero(dense)
    segments = np.searchsorted(rows, np.arange(o + 1)).astype(np.int32)
    sp = Sparsity([0, 1], [], [DimensionMetadata(DimensionType.DENSE, o),
                               DimensionMetadata(DimensionType.SPARSE_CSR, 0, segments, cols.astype(np.int32))])
    b = ModelBuilder()
    x = b.input("x", (1, 5, 5, i), "float32")
    w16 = b.tensor("w16", (o, i), "float16", data=dense[rows, cols], sparsity=sp)
    wd16 = b.tensor("w_dense16", (o, i), "float16")
    w32 = b.tensor("w32", (o, i), "float32")
    w4 = b.tensor("w4", (o, 1, 1, i), "float32")
    shape = b.tensor("shape", (4,), "int32", data=np.array([o, 1, 1, i], np.int32))
    b.op("DENSIFY", [w16], [wd16])
    b.op("DEQUANTIZE", [wd16], [w32])
    b.op("RESHAPE", [w32, shape], [w4])
    bias = b.tensor("bias", (o,), "float32", data=np.linspace(-1, 1, o, dtype=np.float32))
    y = b.tensor("y", (1, 5, 5, o), "float32")
    b.op("CONV_2D", [x, w4, bias], [y], padding=0, stride_w=1, stride_h=1, fused_activation_function=0)
    b.output(y)
    return b.to_bytes()


def test_fp16_filter_held_once():
    """The float32 filter a DEQUANTIZE computes in allocate_tensors is held once: the tensor's
    value is a view of the convolution's (K, O) copy, and the dense float16 intermediate (read by
    no step) is freed unless every tensor is preserved. Outputs as LiteRT's."""
    from edgerun.errors import EdgerunError

    rng = np.random.default_rng(3)
    dense = (rng.standard_normal((6, 8)) * (rng.random((6, 8)) < 0.4)).astype(np.float16)
    data = _sparse_fp16_conv(dense)
    x = rng.standard_normal((1, 5, 5, 8)).astype(np.float32)
    compare_with_litert(data, [x])
    for preserve in (False, True):
        it = Interpreter(model_content=data, experimental_preserve_all_tensors=preserve)
        it.allocate_tensors()
        names = {d["name"]: d["index"] for d in it.get_tensor_details()}
        np.testing.assert_array_equal(it.get_tensor(names["w4"]), dense.astype(np.float32).reshape(6, 1, 1, 8))
        conv = next(st.kernel for st in it.steps() if st.name == "CONV_2D")
        assert np.shares_memory(it.tensor(names["w4"])(), conv.wmats[0])
        if preserve:
            np.testing.assert_array_equal(it.get_tensor(names["w_dense16"]), dense)
        else:
            with pytest.raises(EdgerunError, match="freed"):
                it.get_tensor(names["w_dense16"])
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        want = np.einsum("hwi,oi->hwo", x[0], dense.astype(np.float32)) + np.linspace(-1, 1, 6)
        np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"])[0], want, rtol=1e-5, atol=1e-5)


def test_fp16_filter_shared_by_two_convolutions():
    """A dequantized filter read by two CONV_2D nodes keeps its computed value (C-contiguous);
    both outputs as LiteRT's."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 1, 1, 6)).astype(np.float16)
    b = ModelBuilder()
    x = b.input("x", (1, 3, 3, 6), "float32")
    w16 = b.tensor("w16", w.shape, "float16", data=w)
    w32 = b.tensor("w32", w.shape, "float32")
    b.op("DEQUANTIZE", [w16], [w32])
    bias = b.tensor("bias", (4,), "float32", data=np.zeros(4, np.float32))
    outs = []
    for k in range(2):
        y = b.tensor(f"y{k}", (1, 3, 3, 4), "float32")
        b.op("CONV_2D", [x, w32, bias], [y], padding=0, stride_w=1, stride_h=1,
             fused_activation_function=k)  # none, then RELU
        b.output(y)
        outs.append(y)
    data = b.to_bytes()
    compare_with_litert(data, [rng.standard_normal((1, 3, 3, 6)).astype(np.float32)])
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    names = {d["name"]: d["index"] for d in it.get_tensor_details()}
    v = it.tensor(names["w32"])()
    assert v.flags.c_contiguous
    np.testing.assert_array_equal(v, w.astype(np.float32))
