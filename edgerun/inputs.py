"""Turning user files (.npy, .npz, images) into model inputs, shared by ``run`` and ``bench``."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from edgerun.errors import InputMismatchError
from edgerun.npyio import ARRAY_KINDS, load_npy, load_npz

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".tif", ".tiff"}


def quantize_for(detail: dict, x: np.ndarray) -> np.ndarray:
    """Float data -> the input's dtype, using its quantization (real = scale * (q - zp))."""
    dt = np.dtype(detail["dtype"])
    if dt.kind not in ARRAY_KINDS:
        raise InputMismatchError(f"input '{detail['name']}' takes {dt} data, which edgerun run cannot feed "
                                 "from files")
    if x.dtype.kind not in ARRAY_KINDS:
        raise InputMismatchError(f"input '{detail['name']}' takes {dt.name}, got {x.dtype} data")
    if x.dtype == dt:
        return x
    if dt.kind == "f":
        return x.astype(dt)
    if x.dtype.kind != "f":
        raise InputMismatchError(f"input '{detail['name']}' expects {dt.name}, got {x.dtype.name}")
    scale, zp = detail["quantization"]
    if scale == 0:
        raise InputMismatchError(f"input '{detail['name']}' is {dt.name} without quantization; "
                                 f"give {dt.name} data, not {x.dtype.name}")
    if not np.isfinite(x).all():
        raise InputMismatchError(f"input '{detail['name']}': data holds NaN or infinite values; refusing to "
                                 f"quantize them to {dt.name}")
    info = np.iinfo(dt)
    with np.errstate(over="ignore"):  # |x / scale| beyond float range saturates like any large value
        return np.clip(np.round(x / scale) + zp, info.min, info.max).astype(dt)


def dequantize_for(detail: dict, y: np.ndarray) -> np.ndarray:
    scale, zp = detail["quantization"]
    if y.dtype.kind == "f" or scale == 0:
        return y.astype(np.float32) if y.dtype.kind == "f" else y
    return (y.astype(np.float32) - zp) * np.float32(scale)


def load_inputs(paths: list[Path], details: list[dict], *, image_options: dict | None = None) -> list[np.ndarray]:
    """Load one array per model input from ``paths``.

    A single ``.npz`` may hold all inputs (by input name, or ``arr_0``...). Images are decoded with
    Pillow and preprocessed by ``edgerun.preprocess`` using ``image_options`` (size, mean, std,
    scale, channel_order, layout); float data is quantized to integer inputs automatically.
    """
    arrays: list[np.ndarray] = []
    for p in paths:
        if os.path.isdir(p):
            raise InputMismatchError(f"{p} is a directory; give a .npy/.npz file or an image")
    if len(paths) == 1 and paths[0].suffix == ".npz":
        z = load_npz(paths[0])
        keys = list(z)
        for i, d in enumerate(details):
            key = d["name"] if d["name"] in z else (keys[i] if i < len(keys) else None)
            if key is None:
                raise InputMismatchError(f"{paths[0]} has no array for input '{d['name']}' (has {keys})")
            arrays.append(z[key])
    else:
        if len(paths) != len(details):
            raise InputMismatchError(f"model has {len(details)} inputs, got {len(paths)} files")
        for p, d in zip(paths, details):
            if not p.exists():
                raise InputMismatchError(f"{p}: no such file")
            if p.suffix == ".npy":
                arrays.append(load_npy(p))
            elif p.suffix.lower() in IMAGE_SUFFIXES:
                from edgerun.preprocess import load_image

                arrays.append(load_image(p, d, **(image_options or {})))
            else:
                raise InputMismatchError(f"{p}: unsupported input file type (use .npy, .npz or an image)")
    out = []
    for d, a in zip(details, arrays):
        a = np.asarray(a)
        shape = tuple(int(s) for s in d["shape"])
        if a.shape != shape and a.size == int(np.prod(shape)) and a.ndim == len(shape) - 1:
            a = a.reshape(shape)  # a single sample without its batch dimension
        out.append(quantize_for(d, a))
    return out
