"""A real DBNet-style text detector for benchmarks and tests: PaddleOCR's ch_PP-OCRv4 det model.

The ``rapidocr-onnxruntime`` wheel on PyPI ships it as ONNX (PP-LCNetV3 backbone with learnable
affine blocks and hard-swish, an FPN neck with nearest-neighbour upsampling by 2, 4 and 8, a
ConvTranspose head, a sigmoid probability map ``[N, 1, H, W]``). :func:`detector_path` downloads
the wheel once with pip into ``$EDGERUN_FIXTURES`` (default ``~/.cache/edgerun/fixtures``) and
unpacks the model beside it.

There is no labelled document set here: :func:`document_images` draws synthetic pages (light
paper, dark lines of random Latin words in Pillow's default font at several sizes, sensor noise)
and normalizes them as the model expects (``(x / 255 - 0.5) / 0.5``, NCHW). The float detector
marks the text lines on them. The task metric is DBNet's: the probability map thresholded at
:data:`THRESHOLD` (0.3, rapidocr's ``Det.thresh``), int8 compared with float by IoU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

WHEEL = "rapidocr-onnxruntime==1.4.4"
WHEEL_GLOB = "rapidocr_onnxruntime-1.4.4-*.whl"
MEMBER = "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
#: DBNet's binarization threshold on the probability map (rapidocr's config, Det.thresh)
THRESHOLD = 0.3
CACHE = Path(os.environ.get("EDGERUN_FIXTURES", Path.home() / ".cache" / "edgerun" / "fixtures"))


def detector_path(cache: Path | None = None) -> Path:
    """The ONNX model's path, fetched on first use. Raises RuntimeError (one line, the reason) when
    the wheel cannot be fetched."""
    cache = Path(cache or CACHE)
    dest = cache / "rapidocr-onnxruntime-1.4.4" / Path(MEMBER).name
    if dest.exists():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob(WHEEL_GLOB))
    if not wheels:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL, "-d", str(cache)],
                           capture_output=True, text=True, timeout=600)
        wheels = sorted(cache.glob(WHEEL_GLOB))
        if r.returncode or not wheels:
            raise RuntimeError(f"cannot fetch {WHEEL} from the package index: "
                               + (r.stderr.strip().splitlines() or ["no wheel"])[-1][-200:])
    with zipfile.ZipFile(wheels[0]) as z:
        data = z.read(MEMBER)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(dest)
    return dest


def _font(size: int):
    from PIL import ImageFont
    try:
        return ImageFont.load_default(size=size)  # Pillow >= 10.1 (FreeType)
    except TypeError:
        return ImageFont.load_default()


def document_image(seed: int, height: int = 320, width: int = 320) -> np.ndarray:
    """One synthetic page, ``[3, H, W]`` float32 normalized to [-1, 1] (before noise)."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    paper = tuple(int(v) for v in rng.integers(200, 256, 3))
    img = Image.new("RGB", (width, height), paper)
    draw = ImageDraw.Draw(img)
    y = int(rng.integers(4, 30))
    while y < height - 12:
        size = int(rng.integers(10, 28))
        words = []
        for _ in range(int(rng.integers(2, 8))):
            n = int(rng.integers(2, 9))
            codes = rng.integers(65, 91, n) + rng.integers(0, 2, n) * 32  # A-Z or a-z
            words.append("".join(chr(int(c)) for c in codes))
        ink = tuple(int(v) for v in rng.integers(0, 90, 3))
        draw.text((int(rng.integers(4, 60)), y), " ".join(words), fill=ink, font=_font(size))
        y += size + int(rng.integers(4, 30))
    a = np.asarray(img, np.float32) / 255.0
    a = a + rng.normal(0.0, 0.02, a.shape).astype(np.float32)
    return ((a - 0.5) / 0.5).transpose(2, 0, 1).astype(np.float32)


def document_images(n: int, height: int = 320, width: int = 320, seed: int = 0) -> np.ndarray:
    """``n`` pages, ``[n, 3, H, W]``; page ``i`` is :func:`document_image` of ``seed + i``."""
    return np.stack([document_image(seed + i, height, width) for i in range(n)])


def map_iou(ref: np.ndarray, got: np.ndarray, threshold: float = THRESHOLD) -> float:
    """IoU of the two probability maps thresholded at ``threshold`` (1.0 when neither marks anything)."""
    a, b = np.asarray(ref).reshape(-1) > threshold, np.asarray(got).reshape(-1) > threshold
    union = int(np.sum(a | b))
    return float(np.sum(a & b)) / union if union else 1.0


def static_model(size: int = 320):
    """The detector as an ONNX ModelProto with its input pinned to ``[1, 3, size, size]`` (the
    wheel's has dynamic batch, height and width)."""
    import onnx

    m = onnx.load(str(detector_path()))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(dims, (1, 3, size, size)):
        d.ClearField("dim_param")
        d.dim_value = v
    return m


def quantizer_rows(bq, work: Path, samples: int = 40, size: int = 320) -> list[dict]:
    """tools/bench_quantizers.py's onnx-suite rows for the detector (edgerun vs ONNX Runtime
    quantize_static, same calibration pages, scored on the held-back pages), each with DBNet's
    task metric added: ``map_iou`` (%, the thresholded maps pooled over the held-back pages) and
    ``map_marked`` (elements above :data:`THRESHOLD` in the float maps). ``bq`` is the
    bench_quantizers module; a skipped row (with the reason) when the wheel cannot be fetched."""
    try:
        model = static_model(size)
    except RuntimeError as e:
        return [{"model": "ppocr_det", "tool": "-", "skipped": str(e)}]
    name = "ppocr_det"
    pages = document_images(samples, size, size)
    rows = bq.bench_onnx(name, model, pages, work)
    _, held_idx, _ = bq.split_samples(len(pages), 0.2, 200)
    held = pages[held_idx]
    ref = bq.run_ort(work / f"{name}.onnx", held)
    for r in rows:
        if r["tool"].startswith("edgerun"):
            got = bq.run_tflite((work / f"{name}_edgerun_{r['calibration']}.tflite").read_bytes(), held)
        else:
            got = bq.run_ort(work / f"{name}_ort_{r['calibration']}.onnx", held)
        got = [np.asarray(g, np.float64).reshape(a.shape) for g, a in zip(got, ref)]
        a = np.concatenate([x.reshape(-1) for x in ref]) > THRESHOLD
        b = np.concatenate([x.reshape(-1) for x in got]) > THRESHOLD
        r["map_iou"] = round(100.0 * float(np.sum(a & b)) / max(int(np.sum(a | b)), 1), 2)
        r["map_marked"] = int(np.sum(a))
    return rows
