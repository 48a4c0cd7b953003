"""tools/bench_quantizers.py ``--error-sides``: which side of an int8 model (weights or activations)
its error is on, and the confidence interval of a top-1 agreement.

The digits CNN is converted to int8 by edgerun; the two one-sided float models are run in LiteRT.
The weights model must hold exactly the int8 model's rounded weights (integers times its scales)
and the activations model the int8 model's activation grid (every output of a QUANTIZE ->
DEQUANTIZE pair with the int8 model's scale for that tensor). Each side alone must be worse than
float and no worse than the int8 model, and the two together not worse than the int8 model
(independent rounding errors add in energy; a side quantized twice would break it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgerun.convert import convert
from edgerun.convert.drift import Int8Runner
from edgerun.convert.graph import Graph
from edgerun.schema.reader import read_model
from tools import bench_quantizers as bq

ROOT = Path(__file__).resolve().parents[2]


def _models(tmp_path):
    convert(ROOT / "models" / "digits_cnn.onnx", tmp_path / "f.tflite", float_only=True)
    calib = np.transpose(np.load(ROOT / "models" / "calib_digits.npz")["x"], (0, 2, 3, 1)).astype(np.float32)
    convert(tmp_path / "f.tflite", tmp_path / "q.tflite", calib=calib[:64], io_type="float32", use_cache=False,
            optimize=False, validate=False)
    return (tmp_path / "f.tflite").read_bytes(), (tmp_path / "q.tflite").read_bytes(), calib[64:96]


def _err(ref, got) -> float:
    return sum(float(np.sum((g[0].reshape(r[0].shape) - r[0]) ** 2)) for r, g in zip(ref, got)) / sum(
        float(np.sum(r[0] ** 2)) for r in ref)


def test_error_sides_split_the_int8_error_into_weights_and_activations(tmp_path):
    fb, qb, held = _models(tmp_path)
    sides = bq.side_models(fb, qb)
    assert sides is not None and set(sides) == {"weights", "activations"}
    q = {t.name: t for t in Graph.from_model(read_model(qb)).tensors}

    wg = Graph.from_model(read_model(sides["weights"]))
    n = 0
    for op in wg.ops:
        if op.op in bq.WEIGHT_OPS:
            w = wg.tensors[op.inputs[1]]
            qt = q[w.name]
            assert w.dtype == "float32"
            np.testing.assert_allclose(w.data, bq._dequantized(qt), rtol=0, atol=0)
            s = qt.quant.scale.reshape([-1] + [1] * (w.data.ndim - 1)) if qt.quant.scale.size > 1 else qt.quant.scale[0]
            np.testing.assert_allclose(w.data / s, np.round(w.data / s), atol=1e-3)
            n += 1
    assert n >= 3

    ag = Graph.from_model(read_model(sides["activations"]))
    pairs = [op for op in ag.ops if op.op == "QUANTIZE"]
    assert len(pairs) >= 4 and all(ag.tensors[op.outputs[0]].dtype in ("int8", "int16") for op in pairs)
    # every quantized activation's scale is the int8 model's scale for that tensor
    for op in pairs:
        name = ag.tensors[op.inputs[0]].name
        assert float(ag.tensors[op.outputs[0]].quant.scale[0]) == float(q[name].quant.scale[0])

    ref = bq._runner_outputs(Int8Runner(fb), held)
    e_full = _err(ref, bq._runner_outputs(Int8Runner(qb), held))
    e_w = _err(ref, bq._runner_outputs(Int8Runner(sides["weights"]), held))
    e_a = _err(ref, bq._runner_outputs(Int8Runner(sides["activations"]), held))
    assert e_w > 0 and e_a > 0 and e_full > 0
    assert e_w < e_full * 1.05 and e_a < e_full * 1.05  # each side alone is (about) no worse than both
    # independent errors add in energy: the two sides together are not more than the whole (the
    # rest of the whole is the kernels' fixed-point arithmetic and the int32 biases, on neither side)
    assert e_w + e_a < 1.2 * e_full, (e_w, e_a, e_full)

    out = bq.error_sides(fb, qb, held, ref, breakdown=True)
    assert set(out) == {"weights", "activations", "per_weight", "per_activation"}
    assert len(out["per_weight"]) == n and len(out["per_activation"]) == len(pairs)
    # one layer's (one tensor's) rounding alone: a finite error (something was rounded), above
    # the whole side's figure or near it (errors may partly cancel), and the worst of them within
    # 10 dB of the side (the side's error is made of them)
    for part, side in (("per_weight", "weights"), ("per_activation", "activations")):
        figs = [v["sqnr_db"] for v in out[part].values()]
        assert all(np.isfinite(f) for f in figs), (part, figs)
        assert out[side]["sqnr_db"] - 3.0 <= min(figs) <= out[side]["sqnr_db"] + 10.0, (part, figs, out[side])
    assert abs(out["weights"]["sqnr_db"] - bq.worst_output(ref, bq._runner_outputs(Int8Runner(sides["weights"]), held))[0]) < 0.01


def test_error_sides_refuse_weights_that_are_not_the_float_ones_rounded(tmp_path):
    """An int8 model whose layer was rescaled (cross-layer equalization does that) has no one-sided
    split against the float model: substituting its weights would score a different model."""
    fb, qb, _ = _models(tmp_path)
    assert bq.side_models(fb, qb) is not None
    g = Graph.from_model(read_model(qb))
    op = next(op for op in g.ops if op.op == "CONV_2D")
    g.tensors[op.inputs[1]].quant.scale = g.tensors[op.inputs[1]].quant.scale * 2  # the layer's weights x2
    assert bq.side_models(fb, g.to_bytes("rescaled")) is None


def test_agreement_interval():
    lo, hi = bq.agreement_interval(98.5, 200)  # 3 flips of 200
    assert 95.0 < lo < 96.5 and 99.3 < hi < 99.7
    lo2, hi2 = bq.agreement_interval(98.5, 2000)
    assert lo2 > lo and hi2 < hi and hi2 - lo2 < 1.5  # ten times the samples: a narrower interval
    lo, hi = bq.agreement_interval(100.0, 200)
    assert hi == 100.0 and 97.5 < lo < 98.5
