"""Sparse float16 weights (DENSIFY -> DEQUANTIZE), as Google's converter writes them."""

import numpy as np

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
