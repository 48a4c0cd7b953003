"""TFLite_Detection_PostProcess (CUSTOM) against LiteRT, which registers the op itself.

Every case runs the same model in edgerun and in LiteRT's reference resolver and requires the four
outputs to be equal (float32 equality: edgerun replays LiteRT's float and double arithmetic).
"""

from __future__ import annotations

import numpy as np
import pytest
from flatbuffers import flexbuffers

from edgerun.errors import InputMismatchError, ModelFormatError
from edgerun.ir import ModelBuilder
from edgerun.ops.detection_postprocess import _partial_sort_desc
from edgerun.testing import run_edgerun, run_litert
from tests.support.platform_semantics import ARM

CODE = "TFLite_Detection_PostProcess"


def options(**kw) -> dict:
    o = {"max_detections": 10, "max_classes_per_detection": 1, "detections_per_class": 100,
         "use_regular_nms": False, "nms_score_threshold": 0.3, "nms_iou_threshold": 0.5,
         "num_classes": 5, "y_scale": 10.0, "x_scale": 10.0, "h_scale": 5.0, "w_scale": 5.0}
    o.update(kw)
    return o


def build(n, nc, opts, *, dtypes=("float32",) * 3, quants=(None,) * 3, bg=1, enc_len=4, raw=None):
    b = ModelBuilder()
    bx = b.input("box_encodings", (1, n, enc_len), dtypes[0], quant=quants[0])
    sc = b.input("class_predictions", (1, n, nc + bg), dtypes[1], quant=quants[1])
    an = b.input("anchors", (n, 4), dtypes[2], quant=quants[2])
    d = opts["max_detections"] * opts["max_classes_per_detection"] if opts else 1
    outs = [b.tensor("detection_boxes", (1, d, 4), "float32"),
            b.tensor("detection_classes", (1, d), "float32"),
            b.tensor("detection_scores", (1, d), "float32"),
            b.tensor("num_detections", (1,), "float32")]
    b.op("CUSTOM", [bx, sc, an], outs, custom_code=CODE,
         custom_options=raw if raw is not None else bytes(flexbuffers.Dumps(opts)))
    b.output(*outs)
    return b.to_bytes()


def float_inputs(rng, n, nc, bg=1, enc_len=4, spread=1.0):
    enc = rng.normal(0, spread, (1, n, enc_len)).astype(np.float32)
    scores = rng.random((1, n, nc + bg)).astype(np.float32)
    anchors = np.concatenate([rng.random((n, 2)), rng.uniform(0.05, 0.4, (n, 2))], 1).astype(np.float32)
    return [enc, scores, anchors]


def written_rows(opts, count):
    """The output rows LiteRT writes. Regular NMS writes max_detections rows (zeros past the
    detections); fast NMS writes only min(max_classes_per_detection, num_classes) rows per
    detection and leaves the rest of the buffer as it was (edgerun zeroes them)."""
    mcpd = opts["max_classes_per_detection"]
    if opts.get("use_regular_nms"):
        return np.arange(opts["max_detections"])
    k = min(mcpd, opts["num_classes"])
    return (np.arange(int(count))[:, None] * mcpd + np.arange(k)[None, :]).ravel()


def check(model, inputs, opts):
    want = run_litert(model, inputs, reference=True)
    got = run_edgerun(model, inputs)
    np.testing.assert_array_equal(got[3], want[3], err_msg="num_detections")
    rows = written_rows(opts, want[3][0])
    # uint8 scores: LiteRT on ARM dequantizes them with a fused multiply-add, x86 (and edgerun on
    # every CPU) with a multiply and an add, so ARM's scores may be 1 ulp off (docs/platforms.md)
    fused = ARM and inputs[1].dtype == np.uint8
    for name, g, w in zip(("boxes", "classes", "scores"), got, want):
        assert g.dtype == w.dtype == np.float32 and g.shape == w.shape, name
        if name == "scores" and fused:
            np.testing.assert_array_max_ulp(g[0, rows], w[0, rows], maxulp=1)
            continue
        np.testing.assert_array_equal(g[0, rows], w[0, rows], err_msg=name)
        unwritten = np.setdiff1d(np.arange(g.shape[1]), rows)
        assert not g[0, unwritten].any(), f"{name}: rows past the detections must be zero"
    return got


@pytest.mark.parametrize("regular", [False, True])
@pytest.mark.parametrize("seed,n,nc,max_det,score_thr,iou_thr", [
    (0, 50, 5, 10, 0.3, 0.5),
    (1, 200, 3, 20, 0.5, 0.3),
    (2, 120, 10, 5, 0.0, 0.6),
    (3, 30, 4, 25, 0.9, 0.5),    # few scores pass: fewer detections than max_detections
    (4, 80, 1, 8, 0.2, 1.0),
    (5, 300, 6, 50, 0.6, 0.1),   # aggressive suppression
    (6, 40, 3, 10, 1.5, 0.5),    # nothing passes the threshold
])
def test_float_matches_litert(regular, seed, n, nc, max_det, score_thr, iou_thr):
    rng = np.random.default_rng(seed)
    opts = options(max_detections=max_det, nms_score_threshold=score_thr, nms_iou_threshold=iou_thr,
                   num_classes=nc, use_regular_nms=regular, detections_per_class=max(1, max_det // 3))
    got = check(build(n, nc, opts), float_inputs(rng, n, nc), opts)
    if score_thr > 1:
        assert got[3][0] == 0 and not got[2].any()


@pytest.mark.parametrize("regular", [False, True])
@pytest.mark.parametrize("mcpd", [2, 3, 8])
def test_several_classes_per_detection(regular, mcpd):
    rng = np.random.default_rng(10 + mcpd)
    n, nc = 60, 5
    opts = options(max_detections=7, max_classes_per_detection=mcpd, num_classes=nc,
                   use_regular_nms=regular, nms_score_threshold=0.2)
    inputs = float_inputs(rng, n, nc)
    # Coarse scores: many equal values, so the tie order of LiteRT's partial sort matters.
    inputs[1] = (np.round(inputs[1] * 4) / 4).astype(np.float32)
    check(build(n, nc, opts), inputs, opts)


@pytest.mark.parametrize("regular", [False, True])
@pytest.mark.parametrize("seed,max_det,score_thr,iou_thr,mcpd", [
    (0, 10, 0.3, 0.5, 1), (1, 20, 0.6, 0.4, 1), (2, 6, 0.1, 0.7, 3), (3, 40, 0.5, 0.5, 2)])
def test_uint8_matches_litert(regular, seed, max_det, score_thr, iou_thr, mcpd):
    rng = np.random.default_rng(100 + seed)
    n, nc = 151, 6  # 151 * 7 scores: LiteRT dequantizes blocks of 8 and the tail differently
    opts = options(max_detections=max_det, nms_score_threshold=score_thr, nms_iou_threshold=iou_thr,
                   num_classes=nc, use_regular_nms=regular, max_classes_per_detection=mcpd,
                   detections_per_class=10)
    quants = ((0.05, 128), (1 / 255, 17), (0.004, 3))
    enc = rng.integers(0, 256, (1, n, 4), dtype=np.uint8)
    scores = rng.integers(0, 256, (1, n, nc + 1), dtype=np.uint8)  # ties everywhere
    anchors = np.concatenate([rng.integers(3, 250, (n, 2)), rng.integers(15, 100, (n, 2))], 1).astype(np.uint8)
    check(build(n, nc, opts, dtypes=("uint8",) * 3, quants=quants), [enc, scores, anchors], opts)


def test_mixed_float_boxes_uint8_scores():
    rng = np.random.default_rng(7)
    n, nc = 90, 4
    opts = options(num_classes=nc, use_regular_nms=True)
    inputs = float_inputs(rng, n, nc)
    inputs[1] = rng.integers(0, 256, (1, n, nc + 1), dtype=np.uint8)
    check(build(n, nc, opts, dtypes=("float32", "uint8", "float32"), quants=(None, (1 / 256, 0), None)), inputs, opts)


@pytest.mark.parametrize("regular", [False, True])
def test_no_background_column_and_keypoint_encodings(regular):
    rng = np.random.default_rng(8)
    n, nc = 70, 3
    opts = options(num_classes=nc, use_regular_nms=regular)
    check(build(n, nc, opts, bg=0, enc_len=10), float_inputs(rng, n, nc, bg=0, enc_len=10), opts)


def test_defaults_for_optional_keys():
    rng = np.random.default_rng(9)
    n, nc = 60, 4
    opts = options(num_classes=nc)
    del opts["detections_per_class"], opts["use_regular_nms"]
    check(build(n, nc, opts), float_inputs(rng, n, nc), opts)


def test_int8_inputs_dequantize_like_float():
    """LiteRT refuses int8 inputs; edgerun dequantizes them, which must equal LiteRT on the floats."""
    rng = np.random.default_rng(11)
    n, nc = 80, 5
    opts = options(num_classes=nc, use_regular_nms=True, nms_score_threshold=0.1)
    quants = ((0.04, -3), (1 / 256, -128), (0.004, -128))
    q = [rng.integers(-128, 128, (1, n, 4), dtype=np.int8),
         rng.integers(-128, 128, (1, n, nc + 1), dtype=np.int8),
         np.concatenate([rng.integers(-125, 122, (n, 2)), rng.integers(-110, -30, (n, 2))], 1).astype(np.int8)]
    got = run_edgerun(build(n, nc, opts, dtypes=("int8",) * 3, quants=quants), q)
    deq = [((x.astype(np.float32) - np.float32(zp)) * np.float32(s)) for x, (s, zp) in zip(q, quants)]
    want = run_litert(build(n, nc, opts), deq, reference=True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert got[3][0] > 0


def test_libstdcxx_partial_sort_ties():
    vals = [1.0, 3.0, 3.0, 2.0, 3.0, 1.0, 2.0]
    out = _partial_sort_desc(vals, 4)
    assert [vals[i] for i in out] == [3.0, 3.0, 3.0, 2.0]
    assert sorted(out[:3]) == [1, 2, 4]
    assert _partial_sort_desc([5.0, 4.0], 2) == [0, 1]


@pytest.mark.parametrize("raw,msg", [
    (b"", "empty"),
    (b"\x01\x02", "FlexBuffer"),
])
def test_garbage_options_raise(raw, msg):
    with pytest.raises(ModelFormatError, match=rf"node 0 \({CODE}\).*{msg}"):
        run_edgerun(build(10, 2, options(num_classes=2), raw=raw), float_inputs(np.random.default_rng(0), 10, 2))


def test_fuzzed_options_raise_model_format_error_only():
    """Truncations, byte flips and random bytes: the model is refused cleanly, or (when the bytes
    still decode to a usable map) it runs; nothing else escapes."""
    full = bytes(flexbuffers.Dumps(options(num_classes=2)))
    inputs = float_inputs(np.random.default_rng(0), 10, 2)
    rng = np.random.default_rng(5)
    for i in range(150):
        raw = bytearray(full)
        if i % 3 == 0:
            raw = raw[:rng.integers(0, len(raw))]
        elif i % 3 == 1:
            for _ in range(rng.integers(1, 4)):
                raw[rng.integers(0, len(raw))] = rng.integers(0, 256)
        else:
            raw = bytearray(rng.integers(0, 256, rng.integers(1, 60)).astype(np.uint8).tobytes())
        try:
            run_edgerun(build(10, 2, options(num_classes=2), raw=bytes(raw) or b"\0"), inputs)
        except ModelFormatError as e:  # ours name the node; the planner refuses absurd output sizes
            assert f"node 0 ({CODE})" in str(e) or "byte limit" in str(e), e


def test_truncated_options_raise():
    full = bytes(flexbuffers.Dumps(options(num_classes=2)))
    inputs = float_inputs(np.random.default_rng(0), 10, 2)
    for cut in (3, len(full) // 2, len(full) - 3):
        with pytest.raises(ModelFormatError, match=rf"node 0 \({CODE}\)"):
            run_edgerun(build(10, 2, options(num_classes=2), raw=full[:cut]), inputs)


@pytest.mark.parametrize("key", ["max_detections", "num_classes", "nms_iou_threshold", "h_scale"])
def test_missing_key_raises(key):
    opts = options(num_classes=2)
    raw = bytes(flexbuffers.Dumps({k: v for k, v in opts.items() if k != key}))
    with pytest.raises(ModelFormatError, match=rf"node 0 \({CODE}\).*{key}"):
        run_edgerun(build(10, 2, opts, raw=raw), float_inputs(np.random.default_rng(0), 10, 2))


def test_not_a_map_and_bad_values_raise():
    inputs = float_inputs(np.random.default_rng(0), 10, 2)
    with pytest.raises(ModelFormatError, match="not a FlexBuffer map"):
        run_edgerun(build(10, 2, options(num_classes=2), raw=bytes(flexbuffers.Dumps([1, 2, 3]))), inputs)
    with pytest.raises(ModelFormatError, match="num_classes"):
        run_edgerun(build(10, 2, options(num_classes=4)), inputs)  # 3 score columns
    with pytest.raises(ModelFormatError, match="nms_iou_threshold"):
        run_edgerun(build(10, 2, options(num_classes=2, nms_iou_threshold=0.0)), inputs)


def test_negative_anchor_size_is_refused_like_litert():
    rng = np.random.default_rng(1)
    n, nc = 20, 2
    inputs = float_inputs(rng, n, nc)
    inputs[2][3, 2] = -0.2
    model = build(n, nc, options(num_classes=nc))
    with pytest.raises(RuntimeError, match="ValidateBoxes"):
        run_litert(model, inputs, reference=True)
    with pytest.raises(InputMismatchError, match="ymin > ymax"):
        run_edgerun(model, inputs)


@pytest.mark.parametrize("regular", [False, True])
def test_ssd_mobilenet_sized(regular):
    """SSD MobileNet v1's shape: 1917 anchors, 90 classes + background, uint8 scores."""
    rng = np.random.default_rng(21)
    n, nc = 1917, 90
    opts = options(max_detections=10, num_classes=nc, use_regular_nms=regular,
                   nms_score_threshold=0.6, nms_iou_threshold=0.6, h_scale=5.0, w_scale=5.0)
    inputs = float_inputs(rng, n, nc, spread=0.5)
    inputs[1] = rng.integers(0, 200, (1, n, nc + 1), dtype=np.uint8)
    got = check(build(n, nc, opts, dtypes=("float32", "uint8", "float32"),
                      quants=(None, (1 / 256, 0), None)), inputs, opts)
    assert got[3][0] == 10


@pytest.mark.parametrize("regular", [False, True])
@pytest.mark.parametrize("iou_thr", [0.3, 0.55, 0.8])
def test_clustered_boxes_heavy_suppression(regular, iou_thr):
    """Anchors stacked on a few objects, as a real detector's output: most boxes get suppressed."""
    rng = np.random.default_rng(int(iou_thr * 100))
    n, nc, objects = 400, 4, 6
    centres = rng.random((objects, 2))
    which = rng.integers(0, objects, n)
    anchors = np.concatenate([centres[which] + rng.normal(0, 0.02, (n, 2)),
                              rng.uniform(0.1, 0.2, (n, 2))], 1).astype(np.float32)
    enc = rng.normal(0, 0.3, (1, n, 4)).astype(np.float32)
    scores = rng.random((1, n, nc + 1)).astype(np.float32)
    opts = options(max_detections=30, num_classes=nc, use_regular_nms=regular, nms_score_threshold=0.1,
                   nms_iou_threshold=iou_thr, detections_per_class=20)
    got = check(build(n, nc, opts), [enc, scores, anchors], opts)
    assert 0 < got[3][0] <= 30


def test_zero_max_detections():
    """Fast NMS returns nothing; regular NMS fails in LiteRT (no detections per class) and edgerun."""
    rng = np.random.default_rng(3)
    opts = options(max_detections=0, num_classes=3)
    inputs = float_inputs(rng, 20, 3)
    got = check(build(20, 3, opts), inputs, opts)
    assert got[0].shape == (1, 0, 4) and got[3][0] == 0
    opts["use_regular_nms"] = True
    with pytest.raises(RuntimeError, match="num_detections_per_class"):
        run_litert(build(20, 3, opts), inputs, reference=True)
    with pytest.raises(ModelFormatError, match="detections_per_class"):
        run_edgerun(build(20, 3, opts), inputs)
