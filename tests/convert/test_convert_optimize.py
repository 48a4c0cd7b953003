"""--optimize (learned weight rounding): better int8 outputs on held-back data than nearest rounding,
the learned integers are the ones the int8 model carries, and the time budget holds."""

import time

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from edgerun.convert import adaround
from edgerun.convert import calibrate as cal
from edgerun.convert.pipeline import convert
from edgerun.convert.tflite_frontend import tflite_to_graph


def _mlp(tmp_path, width=96, layers=2):
    """FC chain on correlated inputs with a common offset: rounding errors of neighbouring weights
    add up unless they are chosen together, which is what learned rounding does."""
    rng = np.random.default_rng(11)
    nodes, inits, x = [], [], "x"
    for k in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits += [nh.from_array(w, f"w{k}"), nh.from_array(np.zeros(width, np.float32), f"b{k}")]
        nodes.append(h.make_node("Gemm", [x, f"w{k}", f"b{k}"], [f"g{k}"], transB=1))
        if k < layers - 1:
            nodes.append(h.make_node("Relu", [f"g{k}"], [f"r{k}"]))
        x = f"r{k}"
    g = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", TP.FLOAT, [1, width])],
                     [h.make_tensor_value_info(f"g{layers - 1}", TP.FLOAT, [1, width])], inits)
    p = tmp_path / "mlp.onnx"
    p.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8).SerializeToString())
    mix = rng.standard_normal((8, width))
    data = (rng.standard_normal((120, 8)) @ mix * 0.4 + 1.0).astype(np.float32)
    np.save(tmp_path / "c.npy", data)
    return p, data


@pytest.mark.parametrize("method", ["minmax", "auto"])
def test_optimize_beats_nearest_rounding_on_heldback_data(tmp_path, method):
    p, _ = _mlp(tmp_path)
    kw = {"calib": str(tmp_path / "c.npy"), "calib_method": method, "validate": False, "use_cache": False}
    base = convert(p, tmp_path / "a.tflite", optimize=False, **kw)
    seen = []
    opt = convert(p, tmp_path / "b.tflite", optimize=True, optimize_seconds=20,
                  optimize_progress=lambda d, n: seen.append((d, n)), **kw)
    info = opt.calibration["optimize"]
    assert info["kept"] and info["changed"] == 2, info
    assert seen and seen[-1] == (2, 2)
    # the report's outputs are measured on held-back samples, not the calibration ones
    a, b = base.outputs[0].sqnr_db, opt.outputs[0].sqnr_db
    assert b >= a + 0.3, (a, b)


def test_learned_integers_are_the_ones_the_int8_model_carries(tmp_path):
    from edgerun.convert.quantize import RULES, weight_params

    p, data = _mlp(tmp_path)
    convert(p, tmp_path / "f.tflite", float_only=True, validate=False)
    fb = (tmp_path / "f.tflite").read_bytes()
    g = tflite_to_graph(fb)
    before = {i: g.tensors[op.inputs[1]].data.copy() for i, op in enumerate(g.ops) if op.op == "FULLY_CONNECTED"}
    info = adaround.optimize(g, fb, cal.ArraySource([data]), range(96), seconds=20)
    assert info["changed"] == 2
    for i, w0 in before.items():
        op = g.ops[i]
        w = g.tensors[op.inputs[1]].data
        s0, _ = weight_params(w0, RULES[op.op].weight_axis)
        s1, q1 = weight_params(w, RULES[op.op].weight_axis)
        # the scale weight_params re-derives is min/max or a clipped one chosen by output error
        lo = 1 - adaround.CLIP_STEPS * adaround.CLIP_STEP
        assert np.all(s1 <= s0 * (1 + 1e-6)) and np.all(s1 >= s0 * (lo - 1e-6))
        # the written weights are the learned integers times that scale (a clipped scale
        # re-derives within float32 rounding)
        assert np.allclose(w, q1.astype(np.float64) * s1.reshape(-1, 1), rtol=1e-6, atol=0)
        near = np.clip(np.round(w0.astype(np.float64) / s1.reshape(-1, 1)), -127, 127)
        moved = np.abs(q1.astype(int) - near.astype(int))
        assert moved.max() == 1 and 0 < moved.mean() < 0.5  # up or down by one step, not everywhere


def test_time_budget_is_respected(tmp_path):
    p, data = _mlp(tmp_path, width=64, layers=12)
    convert(p, tmp_path / "f.tflite", float_only=True, validate=False)
    fb = (tmp_path / "f.tflite").read_bytes()
    g = tflite_to_graph(fb)
    old = adaround.MAX_STEPS
    adaround.MAX_STEPS = 10**9  # only the clock ends each layer
    try:
        t0 = time.perf_counter()
        info = adaround.optimize(g, fb, cal.ArraySource([data]), range(96), seconds=1.0)
        took = time.perf_counter() - t0
    finally:
        adaround.MAX_STEPS = old
    assert info["layers"] == 12
    assert took < 1.0 + 0.5, took


def test_auto_runs_adaround_unasked_on_small_models_deterministically(tmp_path, monkeypatch):
    """``auto`` with ``optimize`` left unset runs AdaRound on a model within the default work
    budget, bounded by steps, not a clock: two conversions give the same bytes even when the
    clock jumps. Other methods, and models above the budget, do not run it unasked."""
    p, _ = _mlp(tmp_path)
    kw = {"calib": str(tmp_path / "c.npy"), "validate": False, "use_cache": False}
    a = convert(p, tmp_path / "a.tflite", **kw)
    info = a.calibration["optimize"]
    assert info["budget"] == "steps" and info["changed"] == 2 and info["skipped_time"] == 0, info

    class Clock:
        now = 0.0

        def perf_counter(self):
            self.now += 3600.0
            return self.now
    monkeypatch.setattr(adaround, "time", Clock())
    b = convert(p, tmp_path / "b.tflite", **kw)
    assert a.sha256 == b.sha256
    monkeypatch.undo()
    assert "optimize" not in convert(p, tmp_path / "c.tflite", calib_method="minmax", **kw).calibration
    monkeypatch.setattr(adaround, "DEFAULT_WORK", 1.0)  # the MLP's learning work is far above
    assert "optimize" not in convert(p, tmp_path / "d.tflite", **kw).calibration
