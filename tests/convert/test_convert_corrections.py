"""Empirical bias correction (``corrections.empirical_correction``): the int8 model's own mean
error per layer, measured against the float model on calibration samples, removed from the
biases; the per-channel mean error at the model output must fall, for a chain whose error comes
from weight rounding *and* from activation rounding through a ReLU."""

import numpy as np
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from edgerun.convert import calibrate as cal
from edgerun.convert import corrections
from edgerun.convert.drift import Int8Runner
from edgerun.convert.pipeline import convert
from edgerun.convert.quantize import quantize_graph
from edgerun.convert.tflite_frontend import tflite_to_graph
from edgerun.litert import make_interpreter


def _chain(tmp_path):
    """depthwise 3x3 (one dominant tap per channel, so the others round with a systematic error)
    -> ReLU -> conv 1x1 16 -> 8, on inputs with a large mean."""
    rng = np.random.default_rng(5)
    c = 16
    wd = rng.standard_normal((c, 1, 3, 3)).astype(np.float32) * 0.05
    wd[:, 0, 0, 0] = 0.2
    w2 = rng.standard_normal((8, c, 1, 1)).astype(np.float32) * 0.3
    nodes = [h.make_node("Conv", ["x", "wd", "bd"], ["c1"], group=c),
             h.make_node("Relu", ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2", "b2"], ["y"])]
    inits = [nh.from_array(wd, "wd"), nh.from_array(np.full(c, -0.2, np.float32), "bd"),
             nh.from_array(w2, "w2"), nh.from_array(np.zeros(8, np.float32), "b2")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [1, c, 8, 8])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 8, 6, 6])], inits)
    p = tmp_path / "chain.onnx"
    p.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8).SerializeToString())
    convert(p, tmp_path / "f.tflite", float_only=True, validate=False)
    fb = (tmp_path / "f.tflite").read_bytes()
    x = (rng.uniform(-1, 1, (48, 8, 8, c)) + 2.0).astype(np.float32)
    return fb, x


def test_empirical_correction_removes_the_int8_models_mean_error(tmp_path):
    fb, x = _chain(tmp_path)
    g = tflite_to_graph(fb)
    src = cal.ArraySource([x])
    obs, _ = cal.collect(fb, src, range(len(x)), use_cache=False)
    ranges = cal.ranges_from(obs, "minmax")
    fit = make_interpreter(fb, xnnpack=False)
    fit.allocate_tensors()
    held = range(32, 48)  # corrected on samples 0-31, judged on the others

    def errors(graph):
        run = Int8Runner(quantize_graph(graph, ranges, io_type="float32").to_bytes())
        d = []
        for i in held:
            fit.set_tensor(fit.get_input_details()[0]["index"], x[i:i + 1])
            fit.invoke()
            d.append(run([x[i:i + 1]])[0] - fit.get_tensor(fit.get_output_details()[0]["index"]))
        d = np.concatenate(d).reshape(-1, 8)
        return np.abs(d.mean(0)), float(np.mean(d * d))
    before, mse_before = errors(g)
    fixes = corrections.empirical_correction(g, ranges, fb, src, range(32))
    assert len(fixes) == 2  # both layers: the depthwise (through its ReLU) and the 1x1
    assert errors(g)[0].tolist() == before.tolist()  # copy-on-write: nothing applied yet
    corrections.apply(g, fixes)
    after, mse_after = errors(g)
    assert after.mean() < 0.5 * before.mean(), (before.mean(), after.mean())
    assert mse_after < mse_before, (mse_before, mse_after)


def test_auto_keeps_a_pass_only_when_it_lowers_the_error(tmp_path):
    fb, x = _chain(tmp_path)
    (tmp_path / "f2.tflite").write_bytes(fb)
    rep = convert(tmp_path / "f2.tflite", tmp_path / "q.tflite", calib=x, use_cache=False, validate=False)
    info = rep.calibration["range_search"]
    tried, kept = info["empirical_tried_db"], info["empirical_passes"]
    assert 1 <= kept <= len(tried)
    before = info.get("bias_corrected_db") if info.get("bias_correction") else None
    scores = ([before] if before is not None else []) + tried[:kept]
    assert scores == sorted(scores) and info["score_db"] == tried[kept - 1]
    if kept < len(tried):  # the pass that stopped it did not improve
        assert tried[kept] <= tried[kept - 1]
