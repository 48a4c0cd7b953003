"""--calib-method auto (the default): ranges chosen per model and tensor by the error at the outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgerun.convert import calibrate as cal
from edgerun.convert import convert
from edgerun.convert import ranges as rs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))


def _mobilenet_block(tmp_path):
    sys.path.insert(0, str(ROOT))
    from tools.bench_quantizers import mobilenet_block
    p = tmp_path / "mb.onnx"
    onnx.save(mobilenet_block(), str(p))
    return p


def test_auto_is_the_default_and_at_least_as_good_as_every_single_method(tmp_path):
    p = _mobilenet_block(tmp_path)
    calib = np.random.default_rng(0).uniform(-1, 1, (100, 3, 32, 32)).astype(np.float32)
    auto = convert(p, tmp_path / "auto.tflite", calib=calib, validate=False)
    assert auto.calib_method == "auto"
    info = auto.calibration["range_search"]
    assert set(info["single_methods_db"]) >= {"mse", "minmax"} and info["samples"] == 80  # every calibration sample (100 - 20 held back)
    # the choice is never worse than the best single method on the samples it was scored on
    assert info["score_db"] >= max(info["single_methods_db"].values())
    singles = {m: convert(p, tmp_path / f"{m}.tflite", calib=calib, calib_method=m, validate=False)
               for m in cal.RANGE_METHODS}
    for r in singles.values():
        assert "range_search" not in r.calibration  # an explicit method is applied as asked
    best = max(r.outputs[0].sqnr_db for r in singles.values())
    # on the held-back samples: within noise of the best single method (0.3 dB)
    assert auto.outputs[0].sqnr_db >= best - 0.3, (auto.outputs[0].sqnr_db, best)


def test_simulation_graph_tracks_the_int8_model(tmp_path):
    """The fake-quantization graph the search scores on computes what the int8 model does, to
    within the int8 kernels' own rounding (a wrong chain, scale or weight axis falls far below)."""
    from edgerun.convert.drift import Int8Runner
    from edgerun.convert.pipeline import head_tensors
    from edgerun.convert.quantize import float_ops, quantize_graph
    from edgerun.convert.tflite_frontend import tflite_to_graph
    from edgerun.litert import make_interpreter

    p = _mobilenet_block(tmp_path)
    convert(p, tmp_path / "f.tflite", float_only=True, validate=False)
    fb = (tmp_path / "f.tflite").read_bytes()
    g = tflite_to_graph(fb)
    x = np.random.default_rng(1).uniform(-1, 1, (12, 32, 32, 3)).astype(np.float32)
    src = cal.ArraySource([x])
    obs, _ = cal.collect(fb, src, range(12), use_cache=False)
    ranges = cal.ranges_from(obs, "minmax", heads=head_tensors(g))
    fops = float_ops(g)
    find, fixed = rs._classes(g, fops)
    acts = [t for t in rs.quantized_activations(g, fops) if g.tensors[t].name in ranges and find(t) not in fixed]
    cls = {t: find(t) for t in acts}
    sg, names = rs.simulation_graph(g, acts, cls)
    sim = make_interpreter(sg.to_bytes(), xnnpack=False)
    sim.allocate_tensors()
    by = {d["name"]: d["index"] for d in sim.get_input_details()}
    members = {}
    for t in acts:
        members.setdefault(cls[t], []).append(t)
    for c, ts in members.items():
        lo = min(ranges[g.tensors[t].name][0] for t in ts)
        hi = max(ranges[g.tensors[t].name][1] for t in ts)
        for n, v in zip(names[c], rs._fq_values(lo, hi)):
            sim.set_tensor(by[n], np.array([v], np.float32))
    # compare on the logits (before the fixed-step softmax the simulation leaves unquantized)
    q = Int8Runner(quantize_graph(g, ranges, io_type="float32").to_bytes())
    fit = make_interpreter(fb, xnnpack=False)
    fit.allocate_tensors()
    s_sim = s_q = 0.0
    sig = err_sim = err_q = 0.0
    for i in range(12):
        sim.set_tensor(by[g.tensors[g.inputs[0]].name], x[i:i + 1])
        sim.invoke()
        fit.set_tensor(fit.get_input_details()[0]["index"], x[i:i + 1])
        fit.invoke()
        f = fit.get_tensor(fit.get_output_details()[0]["index"]).astype(np.float64)
        a = sim.get_tensor(sim.get_output_details()[0]["index"]).astype(np.float64)
        b = q([x[i:i + 1]])[0].astype(np.float64)
        sig += np.sum(b * b)
        err_sim += np.sum((a - b) ** 2)
        err_q += np.sum((f - b) ** 2)
        s_sim, s_q = a, b
    assert s_sim.shape == s_q.shape
    # the simulation is closer to the int8 model than the float model is
    assert err_sim < err_q, (err_sim, err_q)
    assert 10 * np.log10(sig / err_sim) > 20


def test_cli_default_is_auto(tmp_path, capsys):
    from edgerun.cli import main
    p = _mobilenet_block(tmp_path)
    np.save(tmp_path / "c.npy", np.random.default_rng(2).uniform(-1, 1, (20, 3, 32, 32)).astype(np.float32))
    rc = main(["convert", str(p), "-o", str(tmp_path / "o.tflite"), "--calib", str(tmp_path / "c.npy")])
    out = capsys.readouterr().out
    assert rc == 0 and "method auto" in out


def test_bias_correction_removes_the_mean_shift_of_rounded_depthwise_weights(tmp_path):
    from onnx import TensorProto as TP
    from onnx import helper as h
    from onnx import numpy_helper as nh

    from edgerun.convert import corrections
    from edgerun.convert.drift import Int8Runner
    from edgerun.convert.quantize import quantize_graph
    from edgerun.convert.tflite_frontend import tflite_to_graph
    from edgerun.litert import make_interpreter

    rng = np.random.default_rng(3)
    c = 24
    w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    w[:, 0, 0, 0] = 1.0  # the largest tap sets the scale; the others round with a systematic error
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["y"], group=c)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [1, c, 6, 6])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, c, 4, 4])],
                     [nh.from_array(w * 0.05, "w"), nh.from_array(np.zeros(c, np.float32), "b")])
    p = tmp_path / "dw.onnx"
    p.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8).SerializeToString())
    convert(p, tmp_path / "f.tflite", float_only=True, validate=False)
    fb = (tmp_path / "f.tflite").read_bytes()
    fg = tflite_to_graph(fb)
    x = (rng.uniform(-1, 1, (40, 6, 6, c)) + 8.0).astype(np.float32)  # a large input mean
    src = cal.ArraySource([x])
    means = corrections.input_means(fg, fb, src, range(corrections.MEAN_SAMPLES))
    [m] = means.values()
    assert np.allclose(m, x[:corrections.MEAN_SAMPLES].reshape(-1, c).mean(0), atol=1e-4)
    fixes = corrections.bias_correction(fg, means)
    assert len(fixes) == 1
    obs, _ = cal.collect(fb, src, range(40), use_cache=False)
    ranges = cal.ranges_from(obs, "minmax")
    fit = make_interpreter(fb, xnnpack=False)
    fit.allocate_tensors()

    def mean_err(graph):
        run = Int8Runner(quantize_graph(graph, ranges, io_type="float32").to_bytes())
        d = []
        for i in range(40):
            fit.set_tensor(fit.get_input_details()[0]["index"], x[i:i + 1])
            fit.invoke()
            d.append(run([x[i:i + 1]])[0] - fit.get_tensor(fit.get_output_details()[0]["index"]))
        return np.abs(np.mean(np.concatenate(d).reshape(-1, c), axis=0))
    before = mean_err(fg)
    corrections.apply(fg, fixes)
    after = mean_err(fg)
    # the per-channel mean error falls to what activation rounding leaves
    assert after.mean() < 0.5 * before.mean(), (before.mean(), after.mean())
