"""The convert report says which kernel path its figures come from: edgerun's own kernels
(bit-exact with LiteRT's reference kernels) by default, the target's XNNPACK path beside them."""

from pathlib import Path

import numpy as np

from edgerun.convert import convert

REPO = Path(__file__).resolve().parents[2]


def test_report_figures_come_from_edgerun_kernels(tmp_path):
    rep = convert(REPO / "models/digits_cnn.onnx", tmp_path / "m.tflite", calib=str(REPO / "models/calib_digits.npz"),
                  target="rpi")
    assert rep.ok and rep.kernel_path == "edgerun" and "edgerun's kernels" in rep.format()
    assert "loads and runs" in rep.litert_check
    d = rep.to_dict()
    assert d["kernel_path"] == "edgerun" and d["ok"] is True and d["failures"] == []
    # the path the figures describe is the reference path: edgerun's kernels == LiteRT BUILTIN_REF
    from edgerun.litert import make_interpreter
    from edgerun.runtime.interpreter import Interpreter

    model = (tmp_path / "m.tflite").read_bytes()
    runners = [Interpreter(model_content=model), make_interpreter(model, reference=True)]
    for it in runners:
        it.allocate_tensors()
    d_in = runners[1].get_input_details()[0]
    s, zp = d_in["quantization"]
    with np.load(REPO / "models/calib_digits.npz") as z:
        xs = z[z.files[0]][:10]
    for x in xs:
        q = np.clip(np.round(np.transpose(x[None], (0, 2, 3, 1)) / s) + zp, -128, 127).astype(np.int8)
        outs = []
        for it in runners:
            it.set_tensor(it.get_input_details()[0]["index"], q)
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
        assert np.array_equal(outs[0], outs[1])
    if rep.delegated is not None:  # XNNPACK rounds differently here: its figures sit beside
        assert rep.delegated["path"] == "xnnpack" and "xnnpack path" in rep.format()
        assert [o.name for o in rep.delegated["outputs"]] == [o.name for o in rep.outputs]


def test_no_target_reports_no_delegated_path(tmp_path):
    rep = convert(REPO / "models/digits_cnn.onnx", tmp_path / "m.tflite", calib=str(REPO / "models/calib_digits.npz"))
    assert rep.delegated is None and rep.to_dict()["delegated"] is None


def test_negative_batchnorm_variance_is_refused(tmp_path):
    import warnings

    import onnx
    import pytest
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    from edgerun.errors import ConversionError

    inits = [nh.from_array(np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype(np.float32), "w"),
             nh.from_array(np.ones(4, np.float32), "g"), nh.from_array(np.zeros(4, np.float32), "b"),
             nh.from_array(np.zeros(4, np.float32), "m"), nh.from_array(np.array([1, -2, 1, 1], np.float32), "v")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "bn.onnx"))
    for kw in ({"calib": "random"}, {"float_only": True}):
        with warnings.catch_warnings(), pytest.raises(ConversionError, match="non-finite"):
            warnings.simplefilter("ignore", RuntimeWarning)  # sqrt of a negative variance while folding
            convert(tmp_path / "bn.onnx", tmp_path / "bn.tflite", **kw)
        assert not (tmp_path / "bn.tflite").exists()


def test_int8_depth_to_space_converts(tmp_path):
    """LiteRT's builtin kernels run int8 DEPTH_TO_SPACE (op version 2); its BUILTIN_REF resolver does
    not register that version. The converter's LiteRT check uses the runtimes users run, so a
    pixel-shuffle model (MediaPipe pose detection has one) converts."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgerun.litert import make_interpreter
    from edgerun.runtime.interpreter import Interpreter

    w = numpy_helper.from_array(np.random.default_rng(0).normal(size=(8, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("DepthToSpace", ["c"], ["y"], blocksize=2, mode="DCR")],
        "d2s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 16, 16])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "d2s.onnx"))
    rep = convert(tmp_path / "d2s.onnx", tmp_path / "d2s.tflite", calib="random")
    assert rep.ok and "loads and runs" in rep.litert_check
    model = (tmp_path / "d2s.tflite").read_bytes()
    assert rep.ops.get("DEPTH_TO_SPACE") == 1
    x = np.random.default_rng(1).integers(-128, 128, (1, 8, 8, 3), dtype=np.int8)
    outs = []
    for it in (Interpreter(model_content=model), make_interpreter(model)):
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
    # edgerun follows LiteRT's reference kernels; the optimized CONV_2D LiteRT runs here (its
    # reference resolver has no DEPTH_TO_SPACE version 2) may round an output 1 LSB off them
    d = np.abs(outs[0].astype(np.int16) - outs[1])
    assert d.max() <= 1 and np.count_nonzero(d) <= d.size // 100, (d.max(), np.count_nonzero(d))


def test_tiny_weight_channel_with_large_bias_keeps_its_bias(tmp_path):
    """A channel whose weights are ~1e-9 but whose bias is large: at input_scale * weight_scale the
    bias leaves int32. The converter raises that channel's weight scale (as TF's converter does)
    instead of clipping the bias, which made the channel's int8 output meaningless (DenseNet-121)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgerun.litert import make_interpreter

    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    w[2] = rng.normal(0, 1e-9, (3, 3, 3))  # channel 2: tiny filter ...
    b = np.array([0.1, -0.2, 3.0, 0.05], np.float32)  # ... with a bias 3.0 that must survive
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "tiny.onnx"))
    xs = rng.uniform(-1, 1, (16, 1, 3, 6, 6)).astype(np.float32)
    np.savez(tmp_path / "c.npz", x=xs[:, 0])
    rep = convert(tmp_path / "tiny.onnx", tmp_path / "tiny.tflite", calib=str(tmp_path / "c.npz"),
                  calib_method="minmax")
    assert rep.ok
    it = make_interpreter((tmp_path / "tiny.tflite").read_bytes(), reference=True)
    it.allocate_tensors()
    di, do = it.get_input_details()[0], it.get_output_details()[0]
    (si, zi), (so, zo) = di["quantization"], do["quantization"]
    x = np.transpose(xs[0], (0, 2, 3, 1))
    it.set_tensor(di["index"], np.clip(np.round(x / si) + zi, -128, 127).astype(np.int8))
    it.invoke()
    y = (it.get_tensor(do["index"]).astype(np.float32) - zo) * so
    # channel 2 is its bias everywhere, within one output step
    assert np.abs(y[..., 2] - 3.0).max() <= so * 1.01
