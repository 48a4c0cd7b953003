"""``TFLite_Detection_PostProcess``: SSD box decoding plus non-max suppression (CUSTOM op).

The op that ends most public TFLite detection models (SSD MobileNet and the TF Object Detection
API exports). It has no builtin code: models carry it as a CUSTOM op whose ``custom_options`` are
a FlexBuffer map. Semantics follow LiteRT's ``tflite/kernels/detection_postprocess.cc``:

* inputs: box encodings ``[1, N, >=4]`` (ycenter, xcenter, h, w encodings; extra columns such as
  keypoints are ignored), class predictions ``[1, N, num_classes (+1 background column 0)]`` and
  anchors ``[N, 4]`` (ycenter, xcenter, h, w). float32, or uint8 (dequantized with each tensor's
  own scale / zero point). LiteRT also accepts nothing else; edgerun additionally dequantizes
  int8 the same way.
* decoding runs in double and rounds each of ycenter, xcenter, half_h, half_w to float32 before
  the float32 corner arithmetic, exactly as LiteRT does (``exp`` is the C library's, through
  :func:`math.exp`).
* fast NMS (``use_regular_nms`` false): every anchor keeps its best ``max_classes_per_detection``
  classes, one greedy NMS runs over the anchors' best scores. Regular NMS: a greedy NMS per class
  (at most ``min(detections_per_class, max_detections)`` boxes each), then the best
  ``max_detections`` over all classes.
* greedy NMS keeps scores ``>= nms_score_threshold``, visits them by decreasing score (ties: lower
  anchor first, LiteRT's stable sort) and drops later boxes whose IoU with a kept box is
  ``> nms_iou_threshold``.
* outputs (all float32): boxes ``[1, D, 4]`` (ymin, xmin, ymax, xmax), classes ``[1, D]``
  (0-based, background excluded), scores ``[1, D]``, num_detections ``[1]``, where
  ``D = max_detections * max_classes_per_detection``. Rows past the detections are zero.

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
    except Exception as e:  # truncated or garbled buffers fail anywhere inside the decoder
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
    # LiteRT's AsFloat rounds to float32; the decoding later widens them to double.
    opts.update({k: np.float32(num(k, m[k])) for k in _FLOAT_KEYS})
    dpc = m.get("detections_per_class")
    opts["detections_per_class"] = 100 if dpc is None else int(num("detections_per_class", dpc))
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


def _top_classes(scores: np.ndarray, k: int) -> np.ndarray:
    """Per row, LiteRT's DecreasingPartialArgSort: the first ``k`` class indices ``[N, k]``."""
    if k == 1:
        return np.argmax(scores, axis=1)[:, None]  # ArgMaxVector: the first maximum
    order = np.argsort(-scores, axis=1, kind="stable")
    srt = np.take_along_axis(scores, order, axis=1)
    # Rows where equal scores meet inside the first k (or at its edge): the heap's order decides.
    lim = min(k, scores.shape[1] - 1)
    tied = np.any(srt[:, :lim] == srt[:, 1:lim + 1], axis=1)
    out = order[:, :k].copy()
    for r in np.flatnonzero(tied):
        out[r] = _partial_sort_desc(scores[r].tolist(), k)
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

    def _decode(self, enc: np.ndarray, anchors: np.ndarray) -> np.ndarray:
        o = self.opts
        e = enc.astype(np.float64)
        a = anchors.astype(np.float64)
        ycenter = (e[:, 0] / float(o["y_scale"]) * a[:, 2] + a[:, 0]).astype(np.float32)
        xcenter = (e[:, 1] / float(o["x_scale"]) * a[:, 3] + a[:, 1]).astype(np.float32)
        # The C library's exp, as LiteRT's std::exp(double); numpy's SIMD exp may differ in the last bit.
        eh = np.array([math.exp(v) for v in (e[:, 2] / float(o["h_scale"])).tolist()], np.float64)
        ew = np.array([math.exp(v) for v in (e[:, 3] / float(o["w_scale"])).tolist()], np.float64)
        half_h = (0.5 * eh * a[:, 2]).astype(np.float32)
        half_w = (0.5 * ew * a[:, 3]).astype(np.float32)
        return np.stack([ycenter - half_h, xcenter - half_w, ycenter + half_h, xcenter + half_w], axis=1)

    def _nms(self, scores: np.ndarray, boxes: np.ndarray, areas: np.ndarray, limit: int) -> list[int]:
        """Greedy single-class NMS: the selected anchor indices, best first."""
        keep = np.flatnonzero(scores >= self.opts["nms_score_threshold"])
        if keep.size == 0 or limit <= 0:
            return []
        alive = keep[np.argsort(-scores[keep], kind="stable")]
        out_size = min(alive.size, limit)
        thr = self.opts["nms_iou_threshold"]
        ymin, xmin, ymax, xmax = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
        zero = np.float32(0.0)
        selected = []
        while alive.size and len(selected) < out_size:
            i = int(alive[0])
            selected.append(i)
            rest = alive[1:]
            if rest.size == 0 or areas[i] <= 0:
                alive = rest
                continue
            inter = (np.maximum(np.minimum(ymax[i], ymax[rest]) - np.maximum(ymin[i], ymin[rest]), zero)
                     * np.maximum(np.minimum(xmax[i], xmax[rest]) - np.maximum(xmin[i], xmin[rest]), zero))
            aj = areas[rest]
            with np.errstate(divide="ignore", invalid="ignore"):
                iou = inter / (areas[i] + aj - inter)
            drop = (iou > thr) & (aj > 0)
            alive = rest[~drop]
        return selected

    def eval(self, inputs):
        o = self.opts
        n = inputs[0].shape[1]
        enc = self._dequant(inputs[0][0, :, :4], 0)
        scores = self._dequant(inputs[1][0], 1)
        anchors = self._dequant(inputs[2], 2)
        boxes = self._decode(enc, anchors)
        if np.any((boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])):
            raise InputMismatchError(f"{self.where}: decoded boxes have ymin > ymax or xmin > xmax "
                                     "(negative anchor heights or widths?)")
        areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
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
            picks_s, picks_a, picks_c = [], [], []
            for c in range(nc):
                col = np.ascontiguousarray(cls_scores[:, c])
                sel = self._nms(col, boxes, areas, self.per_class)
                if sel:
                    picks_a.append(np.asarray(sel, np.int64))
                    picks_s.append(col[sel])
                    picks_c.append(np.full(len(sel), c, np.int64))
            if picks_a:
                s = np.concatenate(picks_s)
                # LiteRT merges each class's list into the running one with a stable merge (earlier
                # classes first on ties) and truncates to max_detections: a stable global sort.
                top = np.argsort(-s, kind="stable")[:max_det]
                count = top.size
                out_boxes[:count] = boxes[np.concatenate(picks_a)[top]]
                out_classes[:count] = np.concatenate(picks_c)[top]
                out_scores[:count] = s[top]
            else:
                count = 0
        else:
            k = min(mcpd, nc)
            top_cls = _top_classes(cls_scores, k)
            best = cls_scores[np.arange(n), top_cls[:, 0]]
            sel = np.asarray(self._nms(best, boxes, areas, max_det), np.int64)
            count = sel.size
            if count:
                rows = (np.arange(count)[:, None] * mcpd + np.arange(k)[None, :]).ravel()
                cls = top_cls[sel]  # [count, k]
                out_boxes[rows] = np.repeat(boxes[sel], k, axis=0)
                out_classes[rows] = cls.ravel()
                out_scores[rows] = np.take_along_axis(cls_scores[sel], cls, axis=1).ravel()
        return [out_boxes[None], out_classes[None], out_scores[None], np.array([count], np.float32)]


register_custom(NAME, DetectionPostProcess)
