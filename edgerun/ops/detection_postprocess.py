"""``TFLite_Detection_PostProcess``: SSD box decoding plus non-max suppression (CUSTOM op).

The op that ends most public TFLite detection models (SSD MobileNet and the TF Object Detection
API exports). It has no builtin code: models carry it as a CUSTOM op whose ``custom_options`` are
a FlexBuffer map. Semantics follow LiteRT's ``tflite/kernels/detection_postprocess.cc``:

* inputs: box encodings ``[1, N, >=4]`` (ycenter, xcenter, h, w encodings; extra columns such as
  keypoints are ignored), class predictions ``[1, N, num_classes (+1 background column 0)]`` and
  anchors ``[N, 4]`` (ycenter, xcenter, h, w). float32, or uint8 (dequantized with each tensor's
  own scale / zero point). LiteRT accepts only these two; edgerun also dequantizes int8 inputs
  the same way.
* decoding runs in double and rounds each of ycenter, xcenter, half_h, half_w to float32 before
  the float32 corner arithmetic, exactly as LiteRT does.
* fast NMS (``use_regular_nms`` false): every anchor keeps its best ``max_classes_per_detection``
  classes, one greedy NMS runs over the anchors' best scores. Regular NMS: a greedy NMS per class
  (at most ``min(detections_per_class, max_detections)`` boxes each), then the best
  ``max_detections`` over all classes.
* greedy NMS keeps scores ``>= nms_score_threshold``, visits them by decreasing score (ties: lower
  anchor first, LiteRT's stable sort) and drops later boxes whose IoU with a kept box is
  ``> nms_iou_threshold``.
* outputs (all float32): boxes ``[1, D, 4]`` (ymin, xmin, ymax, xmax), classes ``[1, D]``
  (0-based, background excluded), scores ``[1, D]``, num_detections ``[1]``, where
  ``D = max_detections * max_classes_per_detection``. Rows past the detections are zero. (LiteRT
  zeroes them too for regular NMS up to row max_detections; fast NMS leaves rows it does not
  write as the buffer held them, so only the written rows are comparable.)

Tie-breaking: where LiteRT uses ``std::partial_sort`` (the per-anchor class ranking when
``max_classes_per_detection > 1``) equal scores come out in the order libstdc++'s heap-based
partial sort leaves them (LiteRT's Linux wheels use libstdc++); edgerun replays that algorithm for
the rows where ties matter. Regular NMS merges the classes' results with a stable merge in class
order, which is LiteRT's single-threaded order (LiteRT's default; with several threads LiteRT's
order among equal scores of different classes depends on thread scheduling).

LiteRT reads a missing key as 0; edgerun refuses a map that lacks a required key instead
(``detections_per_class`` defaults to 100 and ``use_regular_nms`` to false, as in LiteRT).
"""

from __future__ import annotations

import math
import struct

import numpy as np

from edgerun.errors import InputMismatchError, ModelFormatError
from edgerun.ops.common import qparams
from edgerun.ops.registry import Kernel, register_custom

NAME = "TFLite_Detection_PostProcess"

_INT_KEYS = ("max_detections", "max_classes_per_detection", "num_classes")
_FLOAT_KEYS = ("nms_score_threshold", "nms_iou_threshold", "y_scale", "x_scale", "h_scale", "w_scale")


def parse_options(raw: bytes | None, where: str) -> dict:
    """Read the op's FlexBuffer map into plain Python values; raise ModelFormatError naming ``where``."""
    from flatbuffers import flexbuffers

    if not raw:
        raise ModelFormatError(f"{where}: custom options are empty (a FlexBuffer map is required)")
    try:
        m = flexbuffers.Loads(bytes(raw))
    # What flatbuffers' decoder raises on truncated or garbled bytes (found by fuzzing it).
    except (ValueError, KeyError, IndexError, TypeError, OverflowError, AssertionError,
            struct.error, RecursionError) as e:
        raise ModelFormatError(f"{where}: custom options are not a valid FlexBuffer ({type(e).__name__}: {e})") from None
    if not isinstance(m, dict):
        raise ModelFormatError(f"{where}: custom options are not a FlexBuffer map (got {type(m).__name__})")
    missing = [k for k in _INT_KEYS + _FLOAT_KEYS if k not in m]
    if missing:
        raise ModelFormatError(f"{where}: custom options lack {', '.join(missing)}")

    def num(key, value):
        if isinstance(value, (bool, int, float)) and not (key in _INT_KEYS and isinstance(value, float)
                                                          and not math.isfinite(value)):
            return value
        raise ModelFormatError(f"{where}: custom option {key} = {value!r} is not a number")

    opts = {k: int(num(k, m[k])) for k in _INT_KEYS}
    for k in _INT_KEYS:
        if not -2**31 <= opts[k] < 2**31:
            raise ModelFormatError(f"{where}: custom option {k} = {opts[k]} does not fit int32")
    # LiteRT's AsFloat rounds to float32; the decoding later widens them to double.
    with np.errstate(over="ignore"):  # a double beyond float32 becomes inf, as static_cast<float> does
        opts.update({k: np.float32(num(k, m[k])) for k in _FLOAT_KEYS})
    dpc = m.get("detections_per_class")
    opts["detections_per_class"] = 100 if dpc is None else min(int(num("detections_per_class", dpc)), 2**31 - 1)
    reg = m.get("use_regular_nms")
    opts["use_regular_nms"] = False if reg is None else bool(num("use_regular_nms", reg))
    return opts


# --- libstdc++'s std::partial_sort, replayed for exact tie order ------------------------------

def _partial_sort_desc(values: list, k: int) -> list[int]:
    """Indices of ``values`` as ``std::partial_sort(idx, idx + k, idx + n, values[i] > values[j])``
    leaves the first ``k`` with libstdc++ (make_heap, heap_select, sort_heap)."""
    n = len(values)
    a = list(range(n))

    def adjust(hole, length, v):
        top = hole
        child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if values[a[child]] > values[a[child - 1]]:
                child -= 1
            a[hole] = a[child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            a[hole] = a[child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and values[a[parent]] > values[v]:
            a[hole] = a[parent]
            hole = parent
            parent = (hole - 1) // 2
        a[hole] = v

    if k >= 2:
        parent = (k - 2) // 2
        while True:
            adjust(parent, k, a[parent])
            if parent == 0:
                break
            parent -= 1
    for i in range(k, n):
        if values[a[i]] > values[a[0]]:
            v = a[i]
            a[i] = a[0]
            adjust(0, k, v)
    last = k
    while last > 1:
        last -= 1
        v = a[last]
        a[last] = a[0]
        adjust(0, last, v)
    return a[:k]


def _adjust_rows(A, S, r, hole, length, v, vs):
    """``_partial_sort_desc``'s ``adjust`` on many rows at once: rows ``r`` of the index heap ``A``
    (with their scores ``S``) move ``v`` (scores ``vs``) down from ``hole`` and back up, each row
    following its own comparisons."""
    top = hole.copy()
    child = hole.copy()
    lim = (length - 1) // 2
    act = child < lim
    while act.any():
        rr, h = r[act], hole[act]
        c = 2 * (child[act] + 1)
        c -= S[rr, c] > S[rr, c - 1]
        A[rr, h] = A[rr, c]
        S[rr, h] = S[rr, c]
        hole[act] = c
        child[act] = c
        act = child < lim
    if length % 2 == 0:
        m = child == (length - 2) // 2
        if m.any():
            rr, h = r[m], hole[m]
            c = 2 * (child[m] + 1) - 1
            A[rr, h] = A[rr, c]
            S[rr, h] = S[rr, c]
            hole[m] = c
    parent = (hole - 1) // 2
    act = (hole > top) & (S[r, parent] > vs)
    while act.any():
        rr, h, p = r[act], hole[act], parent[act]
        A[rr, h] = A[rr, p]
        S[rr, h] = S[rr, p]
        hole[act] = p
        parent = (hole - 1) // 2
        act = (hole > top) & (S[r, parent] > vs)
    A[r, hole] = v
    S[r, hole] = vs


def _partial_sort_desc_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """:func:`_partial_sort_desc` for every row of ``scores`` ``[R, n]``: ``[R, k]`` indices."""
    R, n = scores.shape
    S = np.array(scores, copy=True)
    A = np.broadcast_to(np.arange(n), (R, n)).copy()
    every = np.arange(R)
    for parent in range((k - 2) // 2, -1, -1) if k >= 2 else ():
        _adjust_rows(A, S, every, np.full(R, parent), k, A[:, parent].copy(), S[:, parent].copy())
    for i in range(k, n):
        rr = np.flatnonzero(S[:, i] > S[:, 0])
        if rr.size:
            v, vs = A[rr, i].copy(), S[rr, i].copy()
            A[rr, i] = A[rr, 0]
            S[rr, i] = S[rr, 0]
            _adjust_rows(A, S, rr, np.zeros(rr.size, np.int64), k, v, vs)
    for last in range(k - 1, 0, -1):
        v, vs = A[:, last].copy(), S[:, last].copy()
        A[:, last] = A[:, 0]
        S[:, last] = S[:, 0]
        _adjust_rows(A, S, every, np.zeros(R, np.int64), last, v, vs)
    return A[:, :k]


def _top_classes(scores: np.ndarray, k: int) -> np.ndarray:
    """Per row, LiteRT's DecreasingPartialArgSort: the first ``k`` class indices ``[N, k]``."""
    if k == 1:
        return np.argmax(scores, axis=1)[:, None]  # ArgMaxVector: the first maximum
    order = np.argsort(-scores, axis=1, kind="stable")
    srt = np.take_along_axis(scores, order, axis=1)
    # Rows where equal scores meet inside the first k (or at its edge): the heap's order decides.
    lim = min(k, scores.shape[1] - 1)
    tied = np.flatnonzero(np.any(srt[:, :lim] == srt[:, 1:lim + 1], axis=1))
    out = order[:, :k].copy()
    if tied.size:
        out[tied] = _partial_sort_desc_rows(scores[tied], k)
    return out


class DetectionPostProcess(Kernel):
    def prepare(self):
        ctx = self.ctx
        self.where = where = f"node {ctx.index} ({NAME})"
        o = self.opts = parse_options(ctx.op.custom_options, where)
        if len(ctx.op.inputs) != 3 or len(ctx.op.outputs) != 4:
            raise ModelFormatError(f"{where}: takes 3 inputs and 4 outputs, has "
                                   f"{len(ctx.op.inputs)} and {len(ctx.op.outputs)}")
        if any(t is None for t in ctx.inputs):
            raise ModelFormatError(f"{where}: an input is omitted")
        bshape, cshape, ashape = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
        if len(bshape) != 3 or len(cshape) != 3 or len(ashape) != 2:
            raise ModelFormatError(f"{where}: expects box encodings [1, N, 4+], class predictions "
                                   f"[1, N, C] and anchors [N, 4]; got {list(bshape)}, {list(cshape)}, {list(ashape)}")
        n = bshape[1]
        if bshape[0] != 1 or cshape[0] != 1 or bshape[2] < 4 or cshape[1] != n or ashape != (n, 4):
            raise ModelFormatError(f"{where}: shapes disagree: box encodings {list(bshape)}, class "
                                   f"predictions {list(cshape)}, anchors {list(ashape)} (batch 1, N anchors)")
        self.label_offset = cshape[2] - o["num_classes"]
        if self.label_offset not in (0, 1):
            raise ModelFormatError(f"{where}: num_classes={o['num_classes']} but class predictions "
                                   f"have {cshape[2]} columns (num_classes or num_classes + 1)")
        if o["max_detections"] < 0 or o["max_classes_per_detection"] <= 0:
            raise ModelFormatError(f"{where}: max_detections={o['max_detections']}, "
                                   f"max_classes_per_detection={o['max_classes_per_detection']}")
        if not (0.0 < o["nms_iou_threshold"] <= 1.0):
            raise ModelFormatError(f"{where}: nms_iou_threshold={float(o['nms_iou_threshold'])} "
                                   "is outside (0, 1]")
        if o["max_detections"] * o["max_classes_per_detection"] >= 2**31:
            raise ModelFormatError(f"{where}: max_detections * max_classes_per_detection = "
                                   f"{o['max_detections'] * o['max_classes_per_detection']} overflows int32")
        self.per_class = min(o["detections_per_class"], o["max_detections"])
        if o["use_regular_nms"] and self.per_class <= 0:
            raise ModelFormatError(f"{where}: detections_per_class must be positive")
        dts = [t.dtype for t in ctx.inputs]
        ok = {"float32", "uint8", "int8"}
        if dts[0] not in ok or dts[1] not in ok:
            raise ModelFormatError(f"{where}: inputs of type {dts[0]} / {dts[1]} (float32, uint8 or int8)")
        if (dts[0] == "float32") != (dts[2] == "float32"):
            raise ModelFormatError(f"{where}: box encodings are {dts[0]} but anchors are {dts[2]} "
                                   "(both float32, or both quantized)")
        self.qp = [qparams(t) if t.dtype != "float32" else None for t in ctx.inputs]
        d = o["max_detections"] * o["max_classes_per_detection"]
        return [(1, d, 4), (1, d), (1, d), (1,)]

    def _dequant(self, x: np.ndarray, i: int) -> np.ndarray:
        if self.qp[i] is None:
            return np.asarray(x, dtype=np.float32)
        scale, zp = self.qp[i]
        return (x.astype(np.float32) - np.float32(zp)) * np.float32(scale)

    def _dequant_scores(self, x: np.ndarray) -> np.ndarray:
        """Class predictions as LiteRT's optimized_ops::Dequantize (uint8) computes them: in blocks of
        8, ``float(q) * scale + float(-zero_point * scale)`` in float32 (its NEON path, which x86
        builds run through NEON_2_SSE); the tail, ``float(scale * (q - zero_point))`` in double."""
        if x.dtype != np.uint8:  # float32, or int8 (which LiteRT refuses): the plain formula
            return self._dequant(x, 1)
        scale, zp = self.qp[1]
        flat = x.reshape(-1)
        out = np.empty(flat.size, np.float32)
        head = flat.size - flat.size % 8
        offset = np.float32(-zp * float(np.float32(scale)))
        out[:head] = flat[:head].astype(np.float32) * np.float32(scale) + offset
        out[head:] = (float(np.float32(scale)) * (flat[head:].astype(np.float64) - zp)).astype(np.float32)
        return out.reshape(x.shape)

    def _decode(self, enc: np.ndarray, anchors: np.ndarray) -> np.ndarray:
        o = self.opts
        e = enc.astype(np.float64)
        a = anchors.astype(np.float64)
        ycenter = (e[:, 0] / float(o["y_scale"]) * a[:, 2] + a[:, 0]).astype(np.float32)
        xcenter = (e[:, 1] / float(o["x_scale"]) * a[:, 3] + a[:, 1]).astype(np.float32)
        # numpy's float64 exp matches the C library's (LiteRT's std::exp) here; should a SIMD build
        # differ in the last double bit, the float32 rounding below hides it but for ~2^-29 of values.
        half_h = (0.5 * np.exp(e[:, 2] / float(o["h_scale"])) * a[:, 2]).astype(np.float32)
        half_w = (0.5 * np.exp(e[:, 3] / float(o["w_scale"])) * a[:, 3]).astype(np.float32)
        return np.stack([ycenter - half_h, xcenter - half_w, ycenter + half_h, xcenter + half_w], axis=1)

    def _nms(self, scores: np.ndarray, boxes: np.ndarray, areas: np.ndarray, limit: int) -> np.ndarray:
        """Greedy NMS for each row of ``scores`` ``[C, N]`` (one class per row), all rows in lockstep.

        Returns ``[C, limit]`` anchor indices, best first, -1 past each row's selections. Step t
        takes every row's best remaining box as its t-th pick (LiteRT's visiting order: decreasing
        score, lower anchor first on ties) and drops that row's remaining boxes overlapping it by
        IoU > nms_iou_threshold, in LiteRT's float32 arithmetic.
        """
        C = scores.shape[0]
        sel = np.full((C, max(limit, 0)), -1, np.int64)
        keep = scores >= self.opts["nms_score_threshold"]
        m = int(keep.sum(axis=1).max()) if C else 0
        if m == 0 or limit <= 0:
            return sel
        # NaN sorts last: the kept scores, decreasing (stable), then the rest.
        order = np.argsort(np.where(keep, -scores, np.nan), axis=1, kind="stable")[:, :m]
        active = np.take_along_axis(keep, order, axis=1)
        cand, cand_area = boxes[order], areas[order]  # [C, m, 4], [C, m]
        thr = self.opts["nms_iou_threshold"]
        rows = np.arange(C)
        zero = np.float32(0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            for step in range(limit):
                has = active.any(axis=1)
                if not has.any():
                    break
                first = active.argmax(axis=1)
                sel[has, step] = order[has, first[has]]
                active[rows, first] = False
                b = cand[rows, first]  # [C, 4]
                ab = cand_area[rows, first]
                lo = np.maximum(cand[:, :, :2], b[:, None, :2])
                hi = np.minimum(cand[:, :, 2:], b[:, None, 2:])
                wh = np.maximum(hi - lo, zero)
                inter = wh[:, :, 0] * wh[:, :, 1]
                iou = inter / ((ab[:, None] + cand_area) - inter)
                active &= ~((iou > thr) & (cand_area > 0) & (ab > 0)[:, None])
                left = active.sum(axis=1)
                width = int(left.max())
                if width * 2 <= active.shape[1]:  # compact: keep each row's active boxes, in order
                    pos = np.argsort(~active, axis=1, kind="stable")[:, :width]
                    order = np.take_along_axis(order, pos, axis=1)
                    active = np.take_along_axis(active, pos, axis=1)
                    cand = np.take_along_axis(cand, pos[:, :, None], axis=1)
                    cand_area = np.take_along_axis(cand_area, pos, axis=1)
        return sel

    def eval(self, inputs):
        o = self.opts
        n = inputs[0].shape[1]
        enc = self._dequant(inputs[0][0, :, :4], 0)
        scores = self._dequant_scores(inputs[1][0])
        anchors = self._dequant(inputs[2], 2)
        with np.errstate(over="ignore", invalid="ignore"):  # huge encodings: inf boxes, as in LiteRT
            boxes = self._decode(enc, anchors)
            areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        if np.any((boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])):
            raise InputMismatchError(f"{self.where}: decoded boxes have ymin > ymax or xmin > xmax "
                                     "(negative anchor heights or widths?)")
        nc, off = o["num_classes"], self.label_offset
        cls_scores = scores[:, off:off + nc]
        max_det, mcpd = o["max_detections"], o["max_classes_per_detection"]
        d = max_det * mcpd
        out_boxes = np.zeros((d, 4), np.float32)
        out_classes = np.zeros(d, np.float32)
        out_scores = np.zeros(d, np.float32)
        if n == 0 or nc == 0:
            count = 0
        elif o["use_regular_nms"]:
            sel = self._nms(np.ascontiguousarray(cls_scores.T), boxes, areas, self.per_class)
            cls_idx, _ = np.nonzero(sel >= 0)  # row-major: class by class, each best first
            anchor = sel[sel >= 0]
            s = cls_scores[anchor, cls_idx]
            # LiteRT merges each class's list into the running one with a stable merge (earlier
            # classes first on ties) and truncates to max_detections: a stable global sort.
            top = np.argsort(-s, kind="stable")[:max_det]
            count = top.size
            out_boxes[:count] = boxes[anchor[top]]
            out_classes[:count] = cls_idx[top]
            out_scores[:count] = s[top]
        else:
            k = min(mcpd, nc)
            top_cls = _top_classes(cls_scores, k)
            best = cls_scores[np.arange(n), top_cls[:, 0]]
            sel = self._nms(best[None], boxes, areas, max_det)[0]
            sel = sel[sel >= 0]
            count = sel.size
            if count:
                rows = (np.arange(count)[:, None] * mcpd + np.arange(k)[None, :]).ravel()
                cls = top_cls[sel]  # [count, k]
                out_boxes[rows] = np.repeat(boxes[sel], k, axis=0)
                out_classes[rows] = cls.ravel()
                out_scores[rows] = np.take_along_axis(cls_scores[sel], cls, axis=1).ravel()
        return [out_boxes[None], out_classes[None], out_scores[None], np.array([count], np.float32)]


register_custom(NAME, DetectionPostProcess)
