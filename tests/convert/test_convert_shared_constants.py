"""Per-layer constants that the source model shares, and the range search's sample count.

TensorFlow's converter stores one buffer for equal constants: MediaPipe palm detection has one
all-zero bias read by six depthwise layers. Bias correction writes a corrected bias per layer;
on a shared tensor one layer's correction reached every reader, and cross-layer equalization
skipped the pair. The frontend gives each layer its own copy
(:func:`edgerun.convert.graph.unshare_layer_constants`).
"""

import numpy as np

from edgerun.convert import calibrate as cal
from edgerun.convert import corrections, equalize
from edgerun.convert import ranges as rs
from edgerun.convert.graph import Graph, Op, unshare_layer_constants
from edgerun.convert.pipeline import convert, head_tensors
from edgerun.convert.tflite_frontend import tflite_to_graph
from edgerun.litert import make_interpreter
from edgerun.schema.tflite import Padding

C = 8


def _shared_bias_model(stem: bool = False) -> bytes:
    """x -> depthwise 3x3 -> conv 1x1 -> depthwise 3x3 -> conv 1x1, the two depthwise layers
    reading one zero bias tensor (as TensorFlow's converter writes it); ``stem``: a conv 1x1 with
    RELU6 first (not an equalization pair: RELU6 is not scale-equivariant)."""
    rng = np.random.default_rng(3)
    g = Graph()
    x = g.tensor("x", (1, 10, 10, C))
    g.inputs = [x]
    zero = g.const("shared_zero_bias", np.zeros(C, np.float32))
    dw = {"padding": Padding.SAME, "stride_w": 1, "stride_h": 1, "dilation_w_factor": 1, "dilation_h_factor": 1,
          "fused_activation_function": 0, "depth_multiplier": 1}
    pw = {"padding": Padding.VALID, "stride_w": 1, "stride_h": 1, "dilation_w_factor": 1, "dilation_h_factor": 1,
          "fused_activation_function": 1}
    cur = x
    if stem:
        cur = g.tensor("stem", (1, 10, 10, C))
        w = (rng.standard_normal((C, 1, 1, C)) * 0.5).astype(np.float32)
        g.ops.append(Op("CONV_2D", [x, g.const("ws", w), g.const("bs", np.full(C, 0.5, np.float32))], [cur],
                        dict(pw, fused_activation_function=3), version=3))
    for k in range(2):
        wd = (rng.standard_normal((1, 3, 3, C)) * 0.05).astype(np.float32)
        wd[..., 0, 0, :] = 0.3  # one dominant tap: the others round with a systematic error
        d = g.tensor(f"dw{k}", (1, 10, 10, C))
        g.ops.append(Op("DEPTHWISE_CONV_2D", [cur, g.const(f"wd{k}", wd), zero], [d], dict(dw), version=3))
        y = g.tensor(f"pw{k}", (1, 10, 10, C))
        w = (rng.standard_normal((C, 1, 1, C)) * 0.4).astype(np.float32)
        g.ops.append(Op("CONV_2D", [d, g.const(f"w{k}", w), g.const(f"b{k}", np.full(C, 0.1, np.float32))],
                        [y], dict(pw), version=3))
        cur = y
    g.outputs = [cur]
    return g.to_bytes("shared bias")


def test_frontend_gives_each_layer_its_own_copy_of_a_shared_bias():
    fb = _shared_bias_model()
    g = tflite_to_graph(fb)
    dws = [op for op in g.ops if op.op == "DEPTHWISE_CONV_2D"]
    assert len(dws) == 2
    b0, b1 = (op.inputs[2] for op in dws)
    assert b0 != b1  # one tensor each ...
    assert np.array_equal(g.tensors[b0].data, g.tensors[b1].data)  # ... with the same values
    assert unshare_layer_constants(g) == 0  # nothing left to unshare
    # the float model computes the same as the source
    a, b = (make_interpreter(m, xnnpack=False) for m in (fb, g.to_bytes("unshared")))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 10, 10, C)).astype(np.float32)
    outs = []
    for it in (a, b):
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_bias_correction_corrects_each_layer_of_a_shared_bias_separately():
    fb = _shared_bias_model()
    g = tflite_to_graph(fb)
    x = (np.random.default_rng(1).uniform(-1, 1, (16, 10, 10, C)) + 1.5).astype(np.float32)
    fixes = corrections.bias_correction(g, corrections.input_means(g, fb, cal.ArraySource([x]), range(16)))
    dw_bias = [op.inputs[2] for op in g.ops if op.op == "DEPTHWISE_CONV_2D"]
    assert all(b in fixes for b in dw_bias)  # both layers corrected, each on its own tensor
    assert not np.allclose(fixes[dw_bias[0]], fixes[dw_bias[1]])  # with its own correction
    # and the equalization pairs (depthwise -> conv) are no longer skipped for the shared bias
    assert len(equalize.pairs(g)) >= 2


def test_search_sample_count_comes_from_the_models_work_not_a_clock(monkeypatch, tmp_path):
    fb = _shared_bias_model()
    g = tflite_to_graph(fb)
    work = rs.float_work(g)
    # 2 x (depthwise 100 px x 8 ch x 9 taps + conv 100 px x 8 ch x 8 inputs)
    assert work == 2 * (100 * C * 9 + 100 * C * C)
    x = np.random.default_rng(2).uniform(-1, 1, (40, 10, 10, C)).astype(np.float32)
    src = cal.ArraySource([x])
    obs, _ = cal.collect(fb, src, range(40), use_cache=False)
    monkeypatch.setattr(rs, "SCORE_WORK", 30.5 * work)  # 30 samples fit
    monkeypatch.setattr(rs, "MIN_SEARCH_SAMPLES", 4)
    _, info = rs.search(g, fb, obs, src, list(range(40)), heads=head_tensors(g), refine=False)
    assert info["samples"] == 30
    # a convert of the same data twice chooses the same bytes
    (tmp_path / "m.tflite").write_bytes(fb)
    reps = [convert(tmp_path / "m.tflite", tmp_path / f"q{k}.tflite", calib=x, use_cache=False, validate=False)
            for k in range(2)]
    assert reps[0].sha256 == reps[1].sha256


def test_equalized_copy_observes_only_the_tensors_equalization_rescales(monkeypatch):
    """``auto`` with equalization, on a model whose second calibration pass would cost more than
    SHARED_OBSERVERS_WORK, observes the equalized copy again on each pair's first-layer output
    only; every other tensor keeps the original's observer (the same ranges exactly). A cheaper
    model observes every tensor again."""
    from edgerun.convert import pipeline as pl

    fb = _shared_bias_model(stem=True)
    g = tflite_to_graph(fb)
    g_eq = pl.equalized_copy(g)
    assert g_eq is not None
    rescaled = equalize.rescaled_tensors(g_eq[0])
    # stem (RELU6, no pair) -> dw0 -> pw0 -> dw1 -> pw1: pairs (dw0, pw0), (pw0, dw1), (dw1, pw1)
    assert rescaled == {"dw0", "pw0", "dw1"}
    calls = []
    real_collect = cal.collect

    def collect(*a, **kw):
        calls.append(kw.get("only"))
        return real_collect(*a, **kw)
    monkeypatch.setattr(cal, "collect", collect)
    seen = {}
    real_search = rs.search

    def search(*a, **kw):
        seen["rival_obs"], seen["obs"] = kw["rival"][2], a[2]
        return real_search(*a, **kw)
    monkeypatch.setattr(rs, "search", search)
    x = np.random.default_rng(4).uniform(-1, 1, (24, 10, 10, C)).astype(np.float32)
    src = cal.ArraySource([x])
    assert rs.float_work(g) * 24 < pl.SHARED_OBSERVERS_WORK
    pl.calibrate_auto_equalized(fb, g, g_eq, src, list(range(24)), 99.99, 16, None, False)
    assert calls == [None, None]
    assert not any(seen["rival_obs"][n] is o for n, o in seen["obs"].items())
    calls.clear()
    monkeypatch.setattr(pl, "SHARED_OBSERVERS_WORK", rs.float_work(g) * 24 - 1)
    pl.calibrate_auto_equalized(fb, g, pl.equalized_copy(g), src, list(range(24)), 99.99, 16, None, False)
    assert calls == [None, rescaled]
    for name, o in seen["obs"].items():
        assert (seen["rival_obs"][name] is o) == (name not in rescaled)


def test_histogram_of_a_batch_in_parts_is_that_of_the_batch():
    """collect() hands a batch's arrays to the observer as parts (no concatenated copy): the state
    must be the one the concatenated batch gives."""
    rng = np.random.default_rng(6)
    for trial in range(20):
        a, b = cal.HistogramObserver(), cal.HistogramObserver()
        for _ in range(3):
            parts = []
            for _ in range(3):
                x = (rng.standard_normal(500) * rng.uniform(0.1, 5) + rng.uniform(-2, 2)).astype(np.float32)
                x[rng.random(500) < 0.5] = 0
                if trial % 4 == 0:
                    x[0] = -3.4e38  # max pooling's padding value, dropped
                parts.append(x)
            a.update(np.concatenate(parts))
            b.update_parts(parts)
        np.testing.assert_array_equal(a.state(), b.state())


def test_per_tensor_search_is_bounded_by_work_not_a_clock(monkeypatch):
    """The per-tensor search runs over every class when its work count (classes x other
    candidates x samples x float work) fits REFINE_WORK, else not at all: partial searches fitted
    the calibration samples (face detection: 9 of 52 classes, held-out 20.57 -> 20.29 dB), and a
    clock made the choice depend on the machine's load. A fake clock that jumps an hour at every
    reading changes nothing."""
    from edgerun.convert.quantize import float_ops

    fb = _shared_bias_model(stem=True)
    g = tflite_to_graph(fb)
    x = np.random.default_rng(5).uniform(-1, 1, (8, 10, 10, C)).astype(np.float32)
    src = cal.ArraySource([x])
    obs, _ = cal.collect(fb, src, range(8), use_cache=False)
    pm = rs._per_method(g, obs, head_tensors(g), 99.99)
    it = make_interpreter(fb, xnnpack=False)
    it.allocate_tensors()
    refs = []
    for s in x:
        it.set_tensor(it.get_input_details()[0]["index"], s[None])
        it.invoke()
        refs.append([it.get_tensor(it.get_output_details()[0]["index"]).astype(np.float64)])
    data = [[s[None]] for s in x]

    def combine(err):
        return err[0]

    find, fixed = rs._classes(g, float_ops(g))
    classes = len({find(t) for t in rs.quantized_activations(g, float_ops(g))
                   if g.tensors[t].name in pm["mse"] and find(t) not in fixed})
    assert classes >= 4
    need = classes * (len(rs.CANDIDATES) - 1) * len(data) * rs.float_work(g)

    def refine():
        return rs._refine(g, pm, "mse", obs, data, refs, combine, float_ops(g), True, None,
                          make_interpreter)
    monkeypatch.setattr(rs, "REFINE_WORK", need - 1)
    monkeypatch.setattr(rs, "GROUP_WORK", 0)
    _, info = refine()
    assert info["stopped"].startswith("skipped") and info["searched"] == 0 and "by_kind" not in info
    # over the bound, the classes are searched by the kind of op that writes them, on the samples
    # GROUP_WORK pays for (here 4 of 8, evenly spread), and not at all below GROUP_MIN_SAMPLES
    producer = {o: op.op for op in g.ops for o in op.outputs}
    kinds = {producer.get(t, "INPUT") for t in rs.quantized_activations(g, float_ops(g))
             if g.tensors[t].name in pm["mse"] and find(t) not in fixed and find(t) == t}
    per_sample = len(kinds) * (len(rs.CANDIDATES) - 1) * rs.float_work(g)
    monkeypatch.setattr(rs, "GROUP_MIN_SAMPLES", 2)
    monkeypatch.setattr(rs, "GROUP_WORK", per_sample * 4)
    outk, infok = refine()
    assert infok["by_kind"] and infok["searched"] >= 1 and "4 samples" in infok["stopped"], infok
    assert all(k.split(" (")[0] in kinds for k in infok["chosen"]), infok["chosen"]
    # a chosen kind's classes all take that method's range (a class: the span of its tensors')
    members = {}
    for t in rs.quantized_activations(g, float_ops(g)):
        if g.tensors[t].name in pm["mse"] and find(t) not in fixed:
            members.setdefault(find(t), []).append(g.tensors[t].name)
    for key, label in infok["chosen"].items():
        for c, names in members.items():
            if producer.get(c, "INPUT") == key.split(" (")[0]:
                span = (min(pm[label][n][0] for n in names), max(pm[label][n][1] for n in names))
                assert all(outk[n] == span for n in names) or not span[1] > span[0]
    monkeypatch.setattr(rs, "GROUP_WORK", per_sample * 4 - 1)
    _, info3 = refine()
    assert "3 samples" in info3["stopped"]
    monkeypatch.setattr(rs, "GROUP_WORK", per_sample * 2 - 1)  # 1 sample, under GROUP_MIN_SAMPLES
    _, info1s = refine()
    assert info1s["searched"] == 0 and "by_kind" not in info1s
    monkeypatch.setattr(rs, "GROUP_WORK", per_sample * 4)
    monkeypatch.setattr(rs, "REFINE_WORK", need)
    out1, info1 = refine()
    assert "stopped" not in info1 and info1["searched"] > 0

    class Clock:
        now = 0.0

        def perf_counter(self):
            self.now += 3600.0
            return self.now
    monkeypatch.setattr(rs, "time", Clock())
    out2, info2 = refine()
    monkeypatch.setattr(rs, "REFINE_WORK", need - 1)
    assert refine() == (outk, infok)  # the by-kind search, too
    assert out2 == out1 and info2 == info1
