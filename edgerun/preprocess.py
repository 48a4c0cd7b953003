"""Image preprocessing shared by bundles, the converter's calibration loader and ``edgerun run``.

A preprocessing spec is a small JSON object stored with the model (TFLite metadata
``edgerun.preprocessing``) and in a bundle's manifest::

    {"size": [224, 224], "scale": 0.00392156862745098, "mean": [0.485, 0.456, 0.406],
     "std": [0.229, 0.224, 0.225], "channel_order": "RGB", "layout": "NHWC", "resize": "bilinear"}

Every key is optional. An image (a file path, a PIL image or an ``HxW[xC]`` array) becomes the
model input by these steps, in order:

1. decode to an ``H x W x C`` array (Pillow for image files, ``.npy`` files without it); C is
   made to match the model input: 3 (RGB; an alpha channel is dropped) or 1 (luma);
2. resize to ``size`` (default: the model input's height and width) with numpy, ``bilinear``
   (half-pixel centres, no antialiasing, as OpenCV's INTER_LINEAR) or ``nearest``: the same
   numbers on every machine, with or without Pillow;
3. reorder channels: ``RGB`` (default), ``BGR``, or ``L`` for one channel;
4. ``x = (x * scale - mean) / std`` in float32 (scale defaults to 1, mean to 0, std to 1;
   mean and std are one value or one per channel);
5. ``layout`` ``NHWC`` (default) or ``NCHW``, plus a batch dimension of 1;
6. cast to the input dtype: float inputs take ``x``; quantized integer inputs take
   ``clamp(round_half_away(x / s) + z)`` with the input's scale ``s`` and zero point ``z`` (the
   rounding of TFLite's QUANTIZE op); other integer inputs take ``clamp(round_half_away(x))``.

Needs numpy only; Pillow is imported to decode image files.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np

from edgerun._util import round_half_away
from edgerun.errors import InputMismatchError

METADATA_NAME = "edgerun.preprocessing"
#: largest image (width x height) decoded; Pillow's own bomb check allows up to 2 x 89 M pixels
MAX_IMAGE_PIXELS = 64 * 1024 * 1024
KEYS = {"size", "scale", "mean", "std", "channel_order", "layout", "resize"}
LAYOUTS = ("NHWC", "NCHW")
CHANNEL_ORDERS = ("RGB", "BGR", "L")


def validate_spec(spec) -> dict:
    """Check a preprocessing spec and return it normalised (plain JSON types). Raises ValueError."""
    if isinstance(spec, (str, bytes)):
        try:
            spec = json.loads(spec)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise InputMismatchError(f"preprocessing spec is not valid JSON: {type(e).__name__}: {str(e)[:100]}") \
                from None
    if not isinstance(spec, dict):
        raise InputMismatchError(f"a preprocessing spec is a JSON object, not {type(spec).__name__}")
    unknown = set(spec) - KEYS
    if unknown:
        raise InputMismatchError(f"unknown preprocessing keys {sorted(unknown)}; known: {sorted(KEYS)}")
    out: dict = {}
    if spec.get("size") is not None:
        size = spec["size"]
        if (not isinstance(size, (list, tuple)) or len(size) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1 << 16 for v in size)):
            raise InputMismatchError(f"preprocessing 'size' must be [height, width], got {size!r}")
        out["size"] = [int(size[0]), int(size[1])]
    for k in ("scale",):
        if spec.get(k) is not None:
            out[k] = _finite(spec[k], k)
    for k in ("mean", "std"):
        if spec.get(k) is not None:
            v = spec[k]
            vals = [_finite(x, k) for x in (v if isinstance(v, (list, tuple)) else [v])]
            if not 1 <= len(vals) <= 4:
                raise InputMismatchError(f"preprocessing {k!r} has {len(vals)} values; give 1 or one per channel")
            if k == "std" and any(x == 0 for x in vals):
                raise InputMismatchError("preprocessing 'std' may not be 0")
            out[k] = vals
    if spec.get("channel_order") is not None:
        co = str(spec["channel_order"]).upper()
        co = "L" if co in ("GRAY", "GREY", "GRAYSCALE") else co
        if co not in CHANNEL_ORDERS:
            raise InputMismatchError(f"preprocessing channel_order {spec['channel_order']!r}: use RGB, BGR or L")
        out["channel_order"] = co
    if spec.get("layout") is not None:
        lay = str(spec["layout"]).upper()
        if lay not in LAYOUTS:
            raise InputMismatchError(f"preprocessing layout {spec['layout']!r}: use NHWC or NCHW")
        out["layout"] = lay
    if spec.get("resize") is not None:
        if spec["resize"] not in ("bilinear", "nearest"):
            raise InputMismatchError(f"preprocessing resize {spec['resize']!r}: use bilinear or nearest")
        out["resize"] = spec["resize"]
    return out


def _finite(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InputMismatchError(f"preprocessing {what!r} must be a finite number, got {v!r}")
    return float(v)


def spec_from_option(text: str) -> dict:
    """A spec from a command-line option: inline JSON, or the path of a ``.json`` file."""
    if text.strip().endswith(".json") and not text.lstrip().startswith("{"):
        from edgerun._fs import read_regular

        try:
            text = read_regular(text, limit=1 << 20, what="preprocessing file", error=InputMismatchError).decode("utf-8")
        except UnicodeDecodeError:
            raise InputMismatchError(f"preprocessing file {text!r} is not UTF-8") from None
    return validate_spec(text)


def spec_from_metadata(metadata: dict[str, bytes]) -> dict | None:
    """The spec stored under ``edgerun.preprocessing`` in a model's metadata, or None."""
    raw = metadata.get(METADATA_NAME)
    if raw is None:
        return None
    try:
        return validate_spec(json.loads(bytes(raw).rstrip(b"\x00").decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise InputMismatchError(f"model metadata {METADATA_NAME!r} is not valid JSON: {type(e).__name__}: "
                                 f"{str(e)[:100]}") from None


def image_geometry(shape, layout: str = "NHWC") -> tuple[int, int, int]:
    """(height, width, channels) of a 4-D image input shape in ``layout``."""
    if len(shape) != 4:
        raise InputMismatchError(f"an image input is 4-D (batch, height, width, channels), got shape {list(shape)}")
    if layout == "NCHW":
        return int(shape[2]), int(shape[3]), int(shape[1])
    return int(shape[1]), int(shape[2]), int(shape[3])


def decode_image(src, channels: int = 3) -> np.ndarray:
    """A path, PIL image or array to an ``H x W x channels`` array (uint8 for image files)."""
    if isinstance(src, (str, Path)):
        p = Path(src)
        if p.suffix.lower() == ".npy":
            from edgerun.npyio import load_npy

            arr = load_npy(p)
        else:
            from edgerun._fs import is_regular

            if p.exists() and not is_regular(p):
                raise InputMismatchError(f"{p} is not a regular file; give an image file")
            try:
                from PIL import Image
            except ImportError:
                raise InputMismatchError(f"reading {p.name} needs Pillow: pip install pillow "
                                         "(or pass a numpy array)") from None
            try:
                with warnings.catch_warnings():
                    # Pillow warns above ~89 Mpixel; MAX_IMAGE_PIXELS refuses those anyway, in one line
                    warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                    with Image.open(p) as im:
                        if im.width * im.height > MAX_IMAGE_PIXELS:
                            raise InputMismatchError(
                                f"image {str(p)!r} is {im.width}x{im.height} pixels, over the {MAX_IMAGE_PIXELS}-pixel "
                                "limit (edgerun.preprocess.MAX_IMAGE_PIXELS)")
                        im.load()
                        return decode_image(im, channels)
            except InputMismatchError:
                raise
            except MemoryError:
                raise InputMismatchError(f"image {str(p)!r} is too large to decode") from None
            except Exception as e:  # noqa: BLE001 - Pillow raises many types on hostile files (OSError, ValueError,
                # SyntaxError, DecompressionBombError, struct.error, ...): all mean "not a readable image"
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise InputMismatchError(f"cannot read image {str(p)!r}: {why}") from None
    elif hasattr(src, "mode") and hasattr(src, "convert") and hasattr(src, "size"):  # PIL image
        arr = np.asarray(src.convert("L" if channels == 1 else "RGB"))
    else:
        arr = np.asarray(src)
    if arr.dtype.kind not in "biuf":
        raise InputMismatchError(f"image data must be numbers (bool, int, uint, float), not {arr.dtype}")
    if arr.ndim == 4 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3:
        raise InputMismatchError(f"an image is H x W or H x W x C, got shape {list(arr.shape)}")
    c = arr.shape[2]
    if c == channels:
        return arr
    if c == 4 and channels == 3:
        return arr[:, :, :3]
    if c == 1 and channels == 3:
        return np.repeat(arr, 3, axis=2)
    if c in (3, 4) and channels == 1:
        rgb = arr[:, :, :3].astype(np.float32)
        # ITU-R 601-2 luma, as PIL's convert("L")
        luma = rgb @ np.array([0.299, 0.587, 0.114], np.float32)
        return luma[:, :, None]
    raise InputMismatchError(f"image has {c} channels; the model input takes {channels}")


def resize(img: np.ndarray, height: int, width: int, method: str = "bilinear") -> np.ndarray:
    """Resize ``H x W x C`` to ``height x width x C`` (float32), half-pixel centres."""
    h, w = img.shape[:2]
    x = img.astype(np.float32)
    if (h, w) == (height, width):
        return x
    if method == "nearest":
        ys = np.minimum(np.floor((np.arange(height) + 0.5) * h / height), h - 1).astype(np.intp)
        xs = np.minimum(np.floor((np.arange(width) + 0.5) * w / width), w - 1).astype(np.intp)
        return x[ys][:, xs]

    def axis(n_out, n_in):
        pos = np.clip((np.arange(n_out, dtype=np.float64) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
        lo = np.floor(pos).astype(np.intp)
        hi = np.minimum(lo + 1, n_in - 1)
        return lo, hi, (pos - lo).astype(np.float32)

    y0, y1, fy = axis(height, h)
    x0, x1, fx = axis(width, w)
    fy, fx = fy[:, None, None], fx[None, :, None]
    top = x[y0][:, x0] * (1 - fx) + x[y0][:, x1] * fx
    bot = x[y1][:, x0] * (1 - fx) + x[y1][:, x1] * fx
    return (top * (1 - fy) + bot * fy).astype(np.float32)


def quantize(x: np.ndarray, dtype, scale: float | None = None, zero_point: int = 0) -> np.ndarray:
    """Float array to ``dtype``: affine quantization when ``scale`` is given, else rounding."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.asarray(x, dtype=dt)
    info = np.iinfo(dt)
    x = np.asarray(x, np.float64)
    if not np.isfinite(x).all():
        raise InputMismatchError(f"data holds NaN or infinite values; refusing to quantize them to {dt.name}")
    with np.errstate(over="ignore"):
        q = round_half_away(x / scale) + zero_point if scale else round_half_away(x)
    return np.clip(q, info.min, info.max).astype(dt)


def preprocess_image(image, spec: dict | None, *, shape, dtype="float32", scale: float | None = None,
                     zero_point: int = 0) -> np.ndarray:
    """An image to one model input of ``shape`` and ``dtype`` (see the module doc for the steps).

    ``scale`` and ``zero_point`` are the input's quantization (None when it is not quantized).
    """
    spec = validate_spec(spec or {})
    layout = spec.get("layout", "NHWC")
    h, w, c = image_geometry(shape, layout)
    if spec.get("size") and tuple(spec["size"]) != (h, w):
        raise InputMismatchError(f"preprocessing size {spec['size']} differs from the model input's "
                                 f"{h}x{w}")
    order = spec.get("channel_order", "L" if c == 1 else "RGB")
    if (order == "L") != (c == 1):
        raise InputMismatchError(f"channel order {order} does not fit a {c}-channel input")
    img = decode_image(image, c)
    x = resize(img, h, w, spec.get("resize", "bilinear"))
    if order == "BGR":
        x = x[:, :, ::-1]
    x = x * np.float32(spec.get("scale", 1.0))
    if "mean" in spec:
        x = x - _per_channel(spec["mean"], c, "mean")
    if "std" in spec:
        x = x / _per_channel(spec["std"], c, "std")
    x = x.astype(np.float32)[None]
    if not np.isfinite(x).all():
        raise InputMismatchError("image data holds NaN or infinite values after preprocessing; refusing to "
                                 "quantize them")
    if layout == "NCHW":
        x = x.transpose(0, 3, 1, 2)
    return quantize(np.ascontiguousarray(x), dtype, scale, zero_point)


def _per_channel(vals, c: int, what: str) -> np.ndarray:
    if len(vals) not in (1, c):
        raise InputMismatchError(f"preprocessing {what!r} has {len(vals)} values for {c} channels")
    return np.asarray(vals, np.float32)


def _parse_list(v, what: str = "value") -> list[float] | None:
    if v is None:
        return None
    try:
        if isinstance(v, str):
            vals = [float(x) for x in v.replace(" ", "").split(",") if x]
        elif isinstance(v, (int, float)):
            vals = [float(v)]
        else:
            vals = [float(x) for x in v]
    except (TypeError, ValueError):
        raise InputMismatchError(f"{what} {v!r}: give numbers separated by commas, e.g. 127.5 or "
                                 "123.7,116.3,103.5") from None
    if not vals or not all(math.isfinite(x) for x in vals):
        raise InputMismatchError(f"{what} {v!r}: give finite numbers separated by commas")
    return vals


def spec_from_options(size=None, mean=None, std=None, scale=None, layout=None, channel_order=None,
                      resize=None) -> dict:
    """A spec from command-line style options (``size="224x224"``, ``mean="123.7,116.3,103.5"``)."""
    spec: dict = {}
    if size is not None:
        if isinstance(size, str):
            parts = size.lower().replace(",", "x").split("x")
            if len(parts) != 2 or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
                raise InputMismatchError(f"image size {size!r}: write HxW, e.g. 224x224")
            size = [int(p) for p in parts]
        spec["size"] = [int(size[0]), int(size[1])]
    if mean is not None:
        spec["mean"] = _parse_list(mean, "mean")
    if std is not None:
        spec["std"] = _parse_list(std, "std")
    if scale is not None:
        spec["scale"] = _parse_list(scale, "scale")[0]
    if layout is not None:
        spec["layout"] = layout
    if channel_order is not None:
        spec["channel_order"] = channel_order
    if resize is not None:
        spec["resize"] = resize
    return validate_spec(spec)


def load_image(src, detail: dict, **options) -> np.ndarray:
    """An image file / PIL image / array to the input described by a LiteRT-style ``detail``.

    ``options`` are :func:`spec_from_options` keywords. The model input's own size is used when
    ``size`` is not given; an image of another size is resized to it.
    """
    spec = spec_from_options(**options)
    shape = tuple(int(s) for s in detail["shape"])
    layout = spec.get("layout", "NHWC")
    if "size" in spec and len(shape) == 4:
        h, w, _ = image_geometry(shape, layout)
        if tuple(spec["size"]) != (h, w):  # the model input decides; resize to it
            spec = {k: v for k, v in spec.items() if k != "size"}
    scale, zp = detail.get("quantization", (0.0, 0))
    return preprocess_image(src, spec, shape=shape, dtype=np.dtype(detail["dtype"]),
                            scale=scale or None, zero_point=int(zp))
