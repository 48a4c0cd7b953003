"""Calibration observers and methods, the accuracy budget (--max-drop), full-int8 targets, the CLI."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from edgerun.convert import convert
from edgerun.convert.calibrate import HistogramObserver, ranges_from
from edgerun.convert.drift import Budget
from edgerun.convert.quantize import activation_params
from edgerun.errors import ConversionError
from edgerun.schema.reader import read_model

RNG = np.random.default_rng(99)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))


def test_streaming_histogram_matches_one_shot():
    data = [RNG.standard_normal(5000).astype(np.float32) * s for s in (0.5, 1.0, 3.0, 2.0)]
    streamed = HistogramObserver()
    for d in data:
        streamed.update(d)
    whole = np.concatenate(data)
    assert streamed.min == whole.min() and streamed.max == whole.max()
    assert streamed.hist.sum() == whole.size
    # percentiles from the re-binned histogram stay within a couple of bins of the exact ones
    lo, hi = streamed.range("percentile", 99.0)
    width = (streamed.hi - streamed.lo) / streamed.bins
    assert abs(hi - np.percentile(whole, 99.5)) < 4 * width + 0.02 * whole.max()
    assert abs(lo - np.percentile(whole, 0.5)) < 4 * width + 0.02 * abs(whole.min())
    # state round trip (the cache format)
    again = HistogramObserver.from_state(streamed.state())
    assert again.range("mse") == streamed.range("mse")


def test_methods_clip_outliers_but_minmax_does_not():
    o = HistogramObserver()
    x = RNG.standard_normal(20000).astype(np.float32)
    x[0] = 60.0  # one extreme value
    o.update(x)
    assert o.range("minmax") == (float(x.min()), 60.0)
    for m in ("percentile", "entropy"):
        lo, hi = o.range(m)
        assert 2.0 < hi < 20.0, (m, hi)
    # mse weighs that one value's squared clipping error (56^2 / 20000) above the finer step: keeps it
    assert o.range("mse")[1] == 60.0
    # and its choice really has the lowest int8 fake-quantization error among the methods, on the data
    y = RNG.laplace(size=20000).astype(np.float32) ** 3
    o2 = HistogramObserver()
    o2.update(y)

    def fq_err(r):
        s, z = activation_params(*r)
        q = np.clip(np.round(y / s) + z, -128, 127)
        return float(np.mean((y - (q - z) * s) ** 2))
    errs = {m: fq_err(o2.range(m)) for m in ("minmax", "percentile", "entropy", "mse")}
    assert errs["mse"] <= 1.02 * min(errs.values()), errs
    # a graph output ("head") never clips more than the percentile range
    r = ranges_from({"y": o}, "mse", heads={"y"})["y"]
    assert r[1] >= o.range("percentile")[1]


def test_activation_params_make_zero_exact():
    for lo, hi in [(-1.0, 3.0), (0.0, 6.0), (0.5, 2.0), (-4.0, -1.0)]:
        s, z = activation_params(lo, hi)
        assert -128 <= z <= 127
        assert abs(s * (round(0.0 / s) + z - z)) == 0.0  # 0.0 maps to the integer z exactly
        assert s * (127 - z) >= max(hi, 0) - s and s * (-128 - z) <= min(lo, 0) + s


def test_budget_parse():
    assert Budget.parse("1%").kind == "pct" and Budget.parse("1%").value == 1.0
    assert Budget.parse("40dB").kind == "db" and Budget.parse("40 db").value == 40.0
    with pytest.raises(ConversionError, match="--max-drop"):
        Budget.parse("lots")


def outlier_model():
    """conv1 has one channel ~200x larger than the rest; conv2 ignores that channel. One per-tensor
    scale for conv1's output wipes out the channels conv2 reads: int8 loses badly there."""
    w1 = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    w1[0] *= 200
    w2 = RNG.standard_normal((6, 8, 1, 1)).astype(np.float32) * 0.3
    w2[:, 0] = 0
    nodes = [h.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             h.make_node("Conv", ["c1", "w2"], ["c2"]),
             h.make_node("Relu", ["c2"], ["c3"]),
             h.make_node("Conv", ["c3", "w3"], ["y"])]
    inits = [nh.from_array(w1, "w1"), nh.from_array(w2, "w2"),
             nh.from_array(RNG.standard_normal((4, 6, 1, 1)).astype(np.float32) * 0.3, "w3")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["N", 3, 8, 8])],
                     [h.make_tensor_value_info("y", TP.FLOAT, ["N", 4, 8, 8])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


def test_max_drop_keeps_the_harmful_layers_in_float(tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(outlier_model().SerializeToString())
    calib = RNG.uniform(-1, 1, (30, 3, 8, 8)).astype(np.float32)
    plain = convert(p, tmp_path / "a.tflite", calib=calib)
    assert plain.outputs[0].sqnr_db < 30
    # with c1 and c3 in float the int8 input and output alone leave ~33-35 dB on the held-back draw
    rep = convert(p, tmp_path / "b.tflite", calib=calib, max_drop="31dB")
    assert rep.budget_met and rep.outputs[0].sqnr_db >= 31, rep.format()
    # conv2 (its output is named c3: the Relu is fused into it) and conv1, so c1 stays float between them
    assert set(rep.kept_float) == {"c1", "c3"}, rep.kept_float
    q = read_model((tmp_path / "b.tflite").read_bytes())
    ops = [q.op_name(op) for op in q.main.operators]
    assert "DEQUANTIZE" in ops and "QUANTIZE" in ops
    assert "accuracy budget --max-drop 31dB: met" in rep.format()
    # a budget already met keeps everything int8
    easy = convert(p, tmp_path / "c.tflite", calib=calib, max_drop=f"{plain.outputs[0].sqnr_db - 1:.2f}dB")
    assert easy.budget_met and easy.kept_float == []


@pytest.mark.parametrize("target", ["mcu", "coral"])
def test_full_int8_targets_refuse_float_fallback(target, tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(outlier_model().SerializeToString())
    calib = RNG.uniform(-1, 1, (30, 3, 8, 8)).astype(np.float32)
    with pytest.raises(ConversionError, match=f"target '{target}' needs full int8"):
        convert(p, tmp_path / "b.tflite", calib=calib, max_drop="35dB", target=target)
    # without a budget the full-int8 model is fine for the target
    rep = convert(p, tmp_path / "b.tflite", calib=calib, target=target)
    assert rep.float_ops == []


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------

def run_cli(args):
    from edgerun.cli import main
    return main(args)


def test_cli_convert_report_and_json(tmp_path, capsys):
    p = tmp_path / "m.onnx"
    p.write_bytes(outlier_model().SerializeToString())
    np.savez(tmp_path / "calib.npz", x=RNG.uniform(-1, 1, (20, 3, 8, 8)).astype(np.float32))
    out = tmp_path / "o.tflite"
    rc = run_cli(["convert", str(p), "-o", str(out), "--calib", str(tmp_path / "calib.npz"), "--per-layer",
                  "--report", str(tmp_path / "r.json")])
    text = capsys.readouterr().out
    assert rc == 0 and out.exists()
    assert "SQNR dB" in text and "per-layer SQNR" in text
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["outputs"][0]["name"] == "y" and len(rep["layers"]) == 3
    rc = run_cli(["convert", str(p), "-o", str(out), "--calib", str(tmp_path / "calib.npz"), "--json",
                  "--io-type", "float32", "--calib-method", "percentile"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["io_type"] == "float32" and d["calibration"]["cached"] is True


def test_cli_errors_are_one_line(tmp_path, capsys):
    p = tmp_path / "m.onnx"
    p.write_bytes(outlier_model().SerializeToString())
    rc = run_cli(["convert", str(p), "-o", str(tmp_path / "o.tflite")])
    err = capsys.readouterr().err
    assert rc != 0 and err.startswith("error: calibration data is required") and err.count("\n") == 1
    rc = run_cli(["convert", str(p), "-o", str(tmp_path / "o.tflite"), "--calib", "random", "--calib-method", "x"])
    assert rc != 0 and "calibration method 'x'" in capsys.readouterr().err


def test_cli_random_calibration_warns_loudly(tmp_path, capsys):
    p = tmp_path / "m.onnx"
    p.write_bytes(outlier_model().SerializeToString())
    rc = run_cli(["convert", str(p), "-o", str(tmp_path / "o.tflite"), "--calib", "random"])
    assert rc == 0 and "WARNING" in capsys.readouterr().out


def test_image_folder_calibration_with_preprocessing(tmp_path):
    from PIL import Image
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 12, 12])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 4, 12, 12])],
                     [nh.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    for i in range(6):
        Image.fromarray(RNG.integers(0, 256, (20, 16, 3)).astype(np.uint8)).save(imgs / f"{i}.png")
    spec = {"size": [12, 12], "mean": [127.5], "std": [127.5]}
    rep = convert(p, tmp_path / "o.tflite", calib=str(imgs), preprocessing=spec)
    assert rep.calibration["samples"] == 6 and rep.outputs[0].sqnr_db > 25
    md = read_model((tmp_path / "o.tflite").read_bytes()).metadata_dict()
    stored = json.loads(md["edgerun.preprocessing"])
    assert stored["size"] == [12, 12] and stored["layout"] == "NHWC" and stored["mean"] == [127.5]
    onnx.checker.check_model(m)
