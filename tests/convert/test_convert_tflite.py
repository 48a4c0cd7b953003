"""Float TFLite -> int8: float16 weights (DEQUANTIZE), sparse weights (DENSIFY), the old op-code
field, no signature; real models made by Google's converter when the fixture cache has them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from edgerun.convert import convert
from edgerun.convert.tflite_frontend import densify, tflite_to_graph
from edgerun.errors import ConversionError, UnsupportedOpError
from edgerun.ir import DimensionMetadata, ModelBuilder, Sparsity
from edgerun.schema.reader import read_model
from edgerun.schema.tflite import DimensionType
from edgerun.testing import run_edgerun, run_litert

RNG = np.random.default_rng(7)
FIXTURES = Path(os.environ.get("EDGERUN_FIXTURES", Path.home() / ".cache" / "edgerun" / "fixtures")) \
    / "mediapipe-0.10.14"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))


def csr(dense: np.ndarray) -> tuple[np.ndarray, Sparsity]:
    """Row-major CSR sparsity of a 2-D array: (values, Sparsity)."""
    segs, idx, vals = [0], [], []
    for row in dense:
        nz = np.flatnonzero(row)
        idx.extend(nz.tolist())
        vals.extend(row[nz].tolist())
        segs.append(len(idx))
    sp = Sparsity([0, 1], [], [DimensionMetadata(DimensionType.DENSE, dense.shape[0]),
                               DimensionMetadata(DimensionType.SPARSE_CSR, 0, np.array(segs, np.int32),
                                                 np.array(idx, np.int32))])
    return np.array(vals, dense.dtype), sp


def float_model(old_opcodes=False) -> bytes:
    """conv (float16 weights via DEQUANTIZE) -> relu -> mean -> FC (sparse weights via DENSIFY) -> softmax."""
    b = ModelBuilder("float test model")
    x = b.input("x", (1, 8, 8, 3), "float32")
    w16 = b.const("w16", (RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float16))
    w = b.tensor("w", (8, 3, 3, 3), "float32")
    b.op("DEQUANTIZE", [w16], [w])
    bias = b.const("bias", RNG.standard_normal(8).astype(np.float32) * 0.1)
    c = b.tensor("conv", (1, 8, 8, 8), "float32")
    b.op("CONV_2D", [x, w, bias], [c], padding=0, stride_w=1, stride_h=1, fused_activation_function=1)
    m = b.tensor("mean", (1, 8), "float32")
    b.op("MEAN", [c, b.const("axes", np.array([1, 2], np.int32))], [m], keep_dims=False)
    dense = (RNG.standard_normal((10, 8)) * 0.5).astype(np.float32)
    dense[RNG.uniform(size=dense.shape) < 0.6] = 0
    vals, sp = csr(dense)
    ws = b.tensor("fc_w_sparse", (10, 8), "float32", data=vals, sparsity=sp)
    wd = b.tensor("fc_w", (10, 8), "float32")
    b.op("DENSIFY", [ws], [wd])
    logits = b.tensor("logits", (1, 10), "float32")
    b.op("FULLY_CONNECTED", [m, wd, b.const("fc_b", np.zeros(10, np.float32))], [logits],
         fused_activation_function=0)
    y = b.tensor("y", (1, 10), "float32")
    b.op("SOFTMAX", [logits], [y], beta=1.0)
    b.output(y)
    data = b.to_bytes()  # no signature
    if old_opcodes:
        data = _only_old_opcode_field(data)
    return data


def _only_old_opcode_field(data: bytes) -> bytes:
    """Rewrite with LiteRT's own schema classes, leaving builtin_code unset as pre-2.3 converters did."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    mt = s.ModelT.InitFromPackedBuf(bytearray(data), 0)
    for oc in mt.operatorCodes:
        oc.deprecatedBuiltinCode = min(oc.builtinCode, 127)
        oc.builtinCode = 0
    bld = flatbuffers.Builder(1024)
    bld.Finish(mt.Pack(bld), file_identifier=b"TFL3")
    return bytes(bld.Output())


def test_densify_matches_dense():
    dense = RNG.standard_normal((5, 7)).astype(np.float32)
    dense[RNG.uniform(size=dense.shape) < 0.5] = 0
    vals, sp = csr(dense)
    assert np.array_equal(densify(vals, dense.shape, sp), dense)
    # 2x2 blocks: traversal (0, 1, 2, 3) over (row blocks, col blocks, in-block row, in-block col)
    d4 = RNG.standard_normal((4, 4)).astype(np.float32)
    d4[:2, 2:] = 0
    blocks = d4.reshape(2, 2, 2, 2).transpose(0, 2, 1, 3)  # [br, bc, r, c]
    segs, idx, vals = [0], [], []
    for br in range(2):
        for bc in range(2):
            if np.any(blocks[br, bc]):
                idx.append(bc)
                vals.extend(blocks[br, bc].reshape(-1).tolist())
        segs.append(len(idx))
    sp = Sparsity([0, 1, 2, 3], [0, 1], [DimensionMetadata(DimensionType.DENSE, 2),
                                         DimensionMetadata(DimensionType.SPARSE_CSR, 0, np.array(segs), np.array(idx)),
                                         DimensionMetadata(DimensionType.DENSE, 2),
                                         DimensionMetadata(DimensionType.DENSE, 2)])
    assert np.array_equal(densify(np.array(vals, np.float32), (4, 4), sp), d4)


@pytest.mark.parametrize("old", [False, True])
def test_float_tflite_with_fp16_and_sparse_weights(old, tmp_path):
    data = float_model(old_opcodes=old)
    src = tmp_path / "float.tflite"
    src.write_bytes(data)
    g = tflite_to_graph(data)
    assert [op.op for op in g.ops] == ["CONV_2D", "MEAN", "FULLY_CONNECTED", "SOFTMAX"]
    x = RNG.uniform(-1, 1, (32, 8, 8, 3)).astype(np.float32)
    # --float: the folded constants reproduce LiteRT's own DEQUANTIZE / DENSIFY exactly
    convert(src, tmp_path / "f.tflite", float_only=True)
    want = run_litert(data, [x[:1]], reference=False)[0]
    got = run_litert((tmp_path / "f.tflite").read_bytes(), [x[:1]], reference=False)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    rep = convert(src, tmp_path / "q.tflite", calib=x)
    q = read_model((tmp_path / "q.tflite").read_bytes())
    assert [q.op_name(op) for op in q.main.operators] == ["CONV_2D", "MEAN", "FULLY_CONNECTED", "SOFTMAX"]
    assert rep.outputs[0].sqnr_db > 25 and rep.outputs[0].top1_agreement >= 80
    qb = (tmp_path / "q.tflite").read_bytes()
    xi = RNG.integers(-128, 128, (1, 8, 8, 3)).astype(np.int8)
    ref = run_litert(qb, [xi])[0]
    assert np.array_equal(run_edgerun(qb, [xi])[0], ref)
    from tflite_micro.python.tflite_micro import runtime
    it = runtime.Interpreter.from_bytes(qb)
    it.set_input(xi, 0)
    it.invoke()
    assert np.abs(it.get_output(0).astype(int) - ref.astype(int)).max() <= 1


def test_refuses_quantized_and_custom(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (1, 4), "int8", quant=([0.1], [0]))
    y = b.tensor("y", (1, 4), "int8", quant=([0.1], [0]))
    b.op("RELU", [x], [y])
    b.output(y)
    p = tmp_path / "q.tflite"
    p.write_bytes(b.to_bytes())
    with pytest.raises(ConversionError, match="already quantized"):
        convert(p, tmp_path / "o.tflite", float_only=True)
    b = ModelBuilder()
    x = b.input("x", (1, 4), "float32")
    y = b.tensor("y", (1, 4), "float32")
    b.op("CUSTOM", [x], [y], custom_code="MyOp")
    b.output(y)
    p.write_bytes(b.to_bytes())
    with pytest.raises(UnsupportedOpError, match="CUSTOM:MyOp"):
        convert(p, tmp_path / "o.tflite", float_only=True)


@pytest.mark.parametrize("name", ["face_detection_full_range_sparse", "face_detection_short_range"])
def test_google_converted_models(name, tmp_path):
    """MediaPipe's detectors: float16 weights through DEQUANTIZE (and DENSIFY in the sparse one),
    no signature; fetched into the fixture cache by test_external_models.py."""
    path = FIXTURES / f"{name}.tflite"
    if not path.exists():
        pytest.skip(f"{path} not in the fixture cache (tests/runtime/test_external_models.py fetches it)")
    data = path.read_bytes()
    m = read_model(data)
    shape = m.main.tensors[m.main.inputs[0]].shape
    x = RNG.uniform(-1, 1, (6,) + tuple(shape[1:])).astype(np.float32)
    convert(path, tmp_path / "f.tflite", float_only=True)
    want = run_litert(data, [x[:1]], reference=False)
    got = run_litert((tmp_path / "f.tflite").read_bytes(), [x[:1]], reference=False)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))
    if name.endswith("sparse"):
        return  # the int8 path is exercised on the smaller model below
    rep = convert(path, tmp_path / "q.tflite", calib=x)
    qb = (tmp_path / "q.tflite").read_bytes()
    q = read_model(qb)
    ops = {q.op_name(op) for op in q.main.operators}
    assert "DEQUANTIZE" not in ops and "TRANSPOSE" not in ops
    assert all(o.sqnr_db > 10 for o in rep.outputs), rep.format()
    xi = [RNG.integers(-128, 128, tuple(shape)).astype(np.int8)]
    for a, b in zip(run_edgerun(qb, xi), run_litert(qb, xi)):
        assert np.array_equal(a, b)
