"""A real DBNet-style text detector (PaddleOCR ch_PP-OCRv4 det, from the rapidocr-onnxruntime
wheel) converted to int8: it converts and passes the converter's own checks, edgerun's kernels
match LiteRT's reference kernels bit for bit, the thresholded probability map stays close to the
float model's, and the whole model is ONE XNNPACK partition, by edgerun's partitioner and by
LiteRT's XNNPACK delegate itself. Smaller ONNX graphs pin the rewrites that get it there: nearest
upsampling becomes CONCATENATION + RESHAPE (XNNPACK has no RESIZE_NEAREST_NEIGHBOR), and a tiny
constant ADD operand gets a scale XNNPACK accepts.

The wheel is fetched once with pip into ``$EDGERUN_FIXTURES`` (``~/.cache/edgerun/fixtures``);
the tests that need it skip with the reason when it cannot be fetched. Calibration and evaluation
use synthetic document pages (``tools/text_detector.py``): there is no labelled set here.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgerun.convert import convert
from edgerun.errors import UnsupportedOpError
from edgerun.schema.reader import read_model
from edgerun.testing import run_edgerun, run_litert
from tools.text_detector import THRESHOLD, detector_path, document_images, map_iou

SIZE = 192  # a multiple of 32 (the detector's deepest stride); small enough for a quick conversion


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))


def litert_xnnpack_partitions(model: bytes) -> tuple[int, int]:
    """(DELEGATE nodes LiteRT's XNNPACK delegate forms, nodes it leaves to LiteRT's own kernels).

    LiteRT lists the original nodes and then one DELEGATE node per partition; a node runs outside
    XNNPACK when its output tensor is not inside any partition (not produced by, nor internal to,
    a DELEGATE node), i.e. when some DELEGATE node reads it or it is a graph output no DELEGATE
    node writes."""
    from edgerun.litert import make_interpreter

    it = make_interpreter(model, xnnpack=True, num_threads=1)
    it.allocate_tensors()
    ops = it._get_ops_details()
    dels = [o for o in ops if o["op_name"] == "DELEGATE"]
    orig = [o for o in ops if o["op_name"] != "DELEGATE"]
    delegate_out = {int(t) for d in dels for t in d["outputs"]}
    delegate_in = {int(t) for d in dels for t in d["inputs"]}
    graph_out = {int(d["index"]) for d in it.get_output_details()}
    outside = 0
    for o in orig:
        outs = {int(t) for t in o["outputs"]}
        if outs & delegate_in or (outs & graph_out and not outs & delegate_out):
            outside += 1
    return len(dels), outside


def _onnx_float(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _quantized(t, x):
    s, z = float(t.quant.scale[0]), int(t.quant.zero_point[0])
    return np.clip(np.round(x / s) + z, -128, 127).astype(np.int8)


def _dequantized(t, q):
    return (q.astype(np.float32) - int(t.quant.zero_point[0])) * float(t.quant.scale[0])


# ---------------------------------------------------------------------------------------------
# the real detector
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def detector():
    try:
        return detector_path()
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def converted(detector, tmp_path_factory):
    """The detector converted once (int8 in and out, minmax ranges to keep the test quick; the
    default per-tensor search is measured by tools/bench_quantizers.py)."""
    out = tmp_path_factory.mktemp("textdet") / "det_int8.tflite"
    rep = convert(detector, out, calib=document_images(10, SIZE, SIZE), calib_method="minmax",
                  input_shape=f"1,3,{SIZE},{SIZE}", use_cache=False)
    return rep, out.read_bytes()


def test_detector_converts_and_passes_its_own_checks(converted):
    rep, data = converted
    assert rep.ok, rep.failures
    assert rep.litert_check and "loads and runs" in rep.litert_check
    assert not rep.float_ops  # full integer
    m = read_model(data)
    ops = {m.op_name(o) for o in m.main.operators}
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "CONCATENATION", "LOGISTIC"} <= ops
    assert "RESIZE_NEAREST_NEIGHBOR" not in ops  # the FPN's x2 / x4 / x8 upsampling was rewritten
    assert m.main.tensors[m.main.inputs[0]].dtype == "int8"


def test_detector_one_xnnpack_partition(converted):
    rep, data = converted
    assert rep.xnnpack_partitions == 1 and not rep.xnnpack_outside  # edgerun's partitioner
    assert litert_xnnpack_partitions(data) == (1, 0)  # LiteRT's XNNPACK delegate itself


def test_detector_bit_exact_with_litert_reference(converted):
    _, data = converted
    m = read_model(data)
    x = document_images(1, SIZE, SIZE, seed=500)[0].transpose(1, 2, 0)[None]
    q = _quantized(m.main.tensors[m.main.inputs[0]], x)
    got, want = run_edgerun(data, [q])[0], run_litert(data, [q], reference=True)[0]
    np.testing.assert_array_equal(got, want)
    # a real map, not a constant (the head's logits span about +-100 in int8 steps of ~0.8, so the
    # sigmoid's output takes a dozen values: text is 127, background -128)
    assert np.unique(got).size > 8 and got.min() == -128 and got.max() == 127


def test_detector_thresholded_map_close_to_float(detector, converted):
    _, data = converted
    m = read_model(data)
    src = onnx.load(str(detector))
    pages = document_images(3, SIZE, SIZE, seed=1000)  # not among the calibration pages
    ious = []
    for page in pages:
        ref = _onnx_float(src, page[None])[0, 0]
        assert 0.02 < np.mean(ref > THRESHOLD) < 0.6  # the float model does find the text lines
        q = _quantized(m.main.tensors[m.main.inputs[0]], page.transpose(1, 2, 0)[None])
        got = _dequantized(m.main.tensors[m.main.outputs[0]], run_edgerun(data, [q])[0])[0, :, :, 0]
        ious.append(map_iou(ref, got))
    # measured 0.95-0.97 at 320 x 320 (tools/bench_quantizers.py records the figures)
    assert min(ious) > 0.9, ious


# ---------------------------------------------------------------------------------------------
# the rewrites, on small graphs
# ---------------------------------------------------------------------------------------------

def _resize_model(factors, ctm="asymmetric", nearest="floor", c=6, h=5, w=4):
    """conv -> Resize(nearest, scales) -> conv: the resize between two XNNPACK ops."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c1", "", "scales"], ["up"], mode="nearest",
                              coordinate_transformation_mode=ctm, nearest_mode=nearest),
             helper.make_node("Conv", ["up", "w2", "b2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((4, c, 3, 3)) * 0.3).astype(np.float32), "w2"),
             numpy_helper.from_array((rng.standard_normal(4) * 0.1).astype(np.float32), "b2"),
             numpy_helper.from_array(np.array([1, 1, *factors], np.float32), "scales")]
    g = helper.make_graph(nodes, "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("factors, rewritten", [((2, 2), True), ((4, 4), True), ((8, 8), True), ((3, 2), True),
                                                ((1, 6), True), ((7, 7), False)])
def test_nearest_upsampling_becomes_concat_reshape(factors, rewritten, tmp_path):
    m = _resize_model(factors)
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    x = np.random.default_rng(0).uniform(-1, 1, (24, 3, 5, 4)).astype(np.float32)
    # --float: the rewritten graph computes what ONNX Runtime does (the converter checks it too)
    rep = convert(src, tmp_path / "f.tflite", float_only=True, calib=x)
    assert rep.ok, rep.failures
    fdata = (tmp_path / "f.tflite").read_bytes()
    ops = [read_model(fdata).op_name(o) for o in read_model(fdata).main.operators]
    assert ("RESIZE_NEAREST_NEIGHBOR" in ops) != rewritten, ops
    want = _onnx_float(m, x[:1])
    got = run_edgerun(fdata, [x[:1].transpose(0, 2, 3, 1)])[0].transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # int8: one shared scale through the copies, bit-exact with LiteRT, one XNNPACK partition
    rep = convert(src, tmp_path / "q.tflite", calib=x, calib_method="minmax", use_cache=False)
    assert rep.ok, rep.failures
    data = (tmp_path / "q.tflite").read_bytes()
    qm = read_model(data)
    copies = [o for o in qm.main.operators if qm.op_name(o) in ("CONCATENATION", "RESHAPE")]
    params = {(float(qm.main.tensors[t].quant.scale[0]), int(qm.main.tensors[t].quant.zero_point[0]))
              for o in copies for t in list(o.inputs[:1]) + list(o.outputs) if qm.main.tensors[t].quantized}
    assert len(params) <= 1
    assert all(len(o.inputs) <= 5 for o in copies if qm.op_name(o) == "CONCATENATION")
    q = _quantized(qm.main.tensors[qm.main.inputs[0]], x[:1].transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(run_edgerun(data, [q])[0], run_litert(data, [q], reference=True)[0])
    assert litert_xnnpack_partitions(data) == ((1, 0) if rewritten else (2, 1))
    assert rep.xnnpack_partitions == (1 if rewritten else 2)


@pytest.mark.parametrize("nearest, factor, ok", [("round_prefer_floor", 2, True), ("round_prefer_floor", 3, False),
                                                 ("round_prefer_ceil", 2, False), ("ceil", 2, False)])
def test_asymmetric_rounding_modes(nearest, factor, ok, tmp_path):
    """At integer factors asymmetric + round_prefer_floor is floor only up to x2 (x / 2 is k or
    k + 0.5); x3 rounds 3k + 2 up to k + 1, as ONNX Runtime does. Those are refused in one line
    instead of being lowered to a floor resize that computes something else."""
    m = _resize_model((factor, factor), nearest=nearest)
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    if ok:
        assert convert(src, tmp_path / "f.tflite", float_only=True).ok
    else:
        with pytest.raises(UnsupportedOpError, match="nearest_mode"):
            convert(src, tmp_path / "f.tflite", float_only=True)


def test_tiny_constant_add_stays_in_xnnpack(tmp_path):
    """PP-LCNet's learnable affine blocks add biases of 1e-6: quantized by their own range, the
    constant's scale is below XNNPACK's 2^-10 of the ADD's output scale, and XNNPACK refuses the
    ADD (measured: LiteRT 2.3 splits the model there). The converter widens such a constant's
    range: one partition, and the int8 result still matches the float model."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["c1"]),  # so the affine step cannot fold into the conv
             helper.make_node("Mul", ["c1", "k"], ["m"]),
             helper.make_node("Add", ["m", "tiny"], ["a"]),
             helper.make_node("Conv", ["a", "w2", "b2"], ["y"])]
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array(np.zeros(8, np.float32), "b1"),
             numpy_helper.from_array(np.array([0.9], np.float32), "k"),
             numpy_helper.from_array(np.array([1.3e-6], np.float32), "tiny"),
             numpy_helper.from_array((rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32), "w2"),
             numpy_helper.from_array(np.zeros(4, np.float32), "b2")]
    g = helper.make_graph(nodes, "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(src))
    x = rng.uniform(-1, 1, (20, 3, 8, 8)).astype(np.float32)
    rep = convert(src, tmp_path / "q.tflite", calib=x, calib_method="minmax", use_cache=False)
    assert rep.ok, rep.failures
    data = (tmp_path / "q.tflite").read_bytes()
    qm = read_model(data)
    adds = [o for o in qm.main.operators if qm.op_name(o) == "ADD"]
    assert adds, "the Add was folded away: the test no longer covers a constant ADD operand"
    for o in adds:
        const = [t for t in o.inputs if qm.main.tensors[t].buffer]
        out_scale = float(qm.main.tensors[o.outputs[0]].quant.scale[0])
        assert all(float(qm.main.tensors[t].quant.scale[0]) >= out_scale * 2 ** -10 for t in const)
    assert litert_xnnpack_partitions(data) == (1, 0)
    assert rep.outputs[0].sqnr_db > 30


def _binary_model(op, const_scale, n_concat=0, concat_out_scale=0.05):
    """x (int8, scale 0.05) OP constant -> y (scale 0.05); or CONCATENATION of n_concat copies of x."""
    from edgerun.ir import ModelBuilder
    b = ModelBuilder()
    x = b.input("x", (1, 5, 6, 8), "int8", (0.05, -3))
    if n_concat:
        y = b.tensor("y", (1, 5, 6, 8 * n_concat), "int8", (concat_out_scale, -3))
        b.op("CONCATENATION", [x] * n_concat, [y], axis=3, fused_activation_function=0)
    else:
        c = b.const("c", np.array([100], np.int8), quant=(const_scale, 0))
        y = b.tensor("y", (1, 5, 6, 8), "int8", (0.05, -3))
        b.op(op, [x, c], [y], fused_activation_function=0)
    b.output(y)
    return b.to_bytes()


@pytest.mark.parametrize("data, taken", [
    (_binary_model("ADD", 0.05 * 2 ** -9.9), True), (_binary_model("ADD", 0.05 * 2 ** -10.1), False),
    (_binary_model("SUB", 0.05 * 2 ** -12), False), (_binary_model("ADD", 0.05 * 2 ** 8.1), False),
    (_binary_model("MUL", 2 ** -15.9), True), (_binary_model("MUL", 2 ** -16.1), False),
    (_binary_model("MUL", 2 ** 8.1), False),
    (_binary_model(None, 0, n_concat=5), True), (_binary_model(None, 0, n_concat=6), False),
])
def test_edgerun_xnnpack_table_agrees_with_litert(data, taken):
    """edgerun's XNNPACK capability table (what `edgerun check` and the converter's report count)
    holds the limits LiteRT's XNNPACK delegate applies: scale ratios of int8 ADD / SUB / MUL and
    at most 5 CONCATENATION inputs."""
    from edgerun.summary import xnnpack_partitions
    n, outside = xnnpack_partitions(read_model(data))
    assert (n == 1 and not outside) == taken, (n, outside)
    assert litert_xnnpack_partitions(data) == ((1, 0) if taken else (0, 1))


def test_edgerun_refuses_concat_with_mixed_quantization():
    """LiteRT's XNNPACK claims such a CONCATENATION and then fails to prepare it (the interpreter
    cannot run the model at all): edgerun's partitioner keeps it outside."""
    from edgerun.summary import xnnpack_partitions
    data = _binary_model(None, 0, n_concat=2, concat_out_scale=0.06)
    n, outside = xnnpack_partitions(read_model(data))
    assert n == 0 and outside
    with pytest.raises(RuntimeError, match="CONCATENATION"):
        litert_xnnpack_partitions(data)


def test_float_tflite_nearest_resize_rewritten(tmp_path):
    """The same rewrite on a float .tflite input (the TFLite frontend): the int8 result has no
    RESIZE_NEAREST_NEIGHBOR, is one XNNPACK partition, and the float graph still computes what
    LiteRT computes on the original."""
    from edgerun.convert.tflite_frontend import tflite_to_graph
    from edgerun.ir import ModelBuilder

    rng = np.random.default_rng(9)
    b = ModelBuilder()
    x = b.input("x", (1, 6, 5, 4), "float32")
    c1, up, y = (b.tensor(n, s, "float32") for n, s in (("c1", (1, 6, 5, 8)), ("up", (1, 12, 20, 8)),
                                                           ("y", (1, 12, 20, 4))))
    conv = {"padding": 0, "stride_w": 1, "stride_h": 1, "fused_activation_function": 0}
    b.op("CONV_2D", [x, b.const("w1", (rng.standard_normal((8, 3, 3, 4)) * 0.3).astype(np.float32)),
                     b.const("b1", np.zeros(8, np.float32))], [c1], **conv)
    b.op("RESIZE_NEAREST_NEIGHBOR", [c1, b.const("size", np.array([12, 20], np.int32))], [up],
         align_corners=False, half_pixel_centers=False)
    b.op("CONV_2D", [up, b.const("w2", (rng.standard_normal((4, 3, 3, 8)) * 0.3).astype(np.float32)),
                     b.const("b2", np.zeros(4, np.float32))], [y], **conv)
    b.output(y)
    data = b.to_bytes()
    g = tflite_to_graph(data)
    assert "RESIZE_NEAREST_NEIGHBOR" not in [op.op for op in g.ops]
    xs = rng.uniform(-1, 1, (16, 1, 6, 5, 4)).astype(np.float32)
    np.testing.assert_allclose(run_edgerun(g.to_bytes(), [xs[0]])[0], run_litert(data, [xs[0]], reference=False)[0],
                               rtol=1e-5, atol=1e-5)
    src = tmp_path / "m.tflite"
    src.write_bytes(data)
    rep = convert(src, tmp_path / "q.tflite", calib=xs[:, 0], calib_method="minmax", use_cache=False)
    assert rep.ok, rep.failures
    q = (tmp_path / "q.tflite").read_bytes()
    assert "RESIZE_NEAREST_NEIGHBOR" not in rep.ops
    assert litert_xnnpack_partitions(q) == (1, 0) and rep.xnnpack_partitions == 1
