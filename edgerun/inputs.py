"""Turning user files (.npy, .npz, images) into model inputs, shared by ``run`` and ``bench``."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from edgerun._fs import is_regular
from edgerun.errors import InputMismatchError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".tif", ".tiff"}
#: largest array read from a .npy/.npz member (bytes); the header is checked before any data is read
MAX_ARRAY_BYTES = 4 << 30
#: dtype kinds an input file may hold: bool, signed and unsigned integers, floats
ARRAY_KINDS = "biuf"


def _check_header(f, what: str, available: int | None) -> tuple[tuple, np.dtype]:
    """Read and check a .npy header from ``f``; returns (shape, dtype). Reads no array data."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):
            shape, _, dtype = fmt.read_array_header_2_0(f)
        else:
            raise ValueError(f"unknown .npy version {version}")
    except Exception as e:  # noqa: BLE001 - numpy raises ValueError, SyntaxError, EOFError, ... on broken headers
        raise InputMismatchError(f"{what} is not a valid .npy array: {str(e).splitlines()[0] if str(e) else e!r}") \
            from None
    if dtype.hasobject or dtype.kind not in ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise InputMismatchError(f"{what} holds {dtype!s} data; input arrays must be bool, integer or float")
    if any((not isinstance(d, int)) or d < 0 or d > MAX_ARRAY_BYTES for d in shape) or len(shape) > 32:
        raise InputMismatchError(f"{what} declares a bad shape {shape}")
    n = 1
    for d in shape:
        n *= d
    nbytes = n * dtype.itemsize
    if nbytes > MAX_ARRAY_BYTES:
        raise InputMismatchError(f"{what} declares {nbytes} bytes of data (shape {list(shape)}), over the "
                                 f"{MAX_ARRAY_BYTES}-byte limit")
    if available is not None and nbytes != available:
        raise InputMismatchError(f"{what} declares {nbytes} bytes of data (shape {list(shape)}, {dtype}) but "
                                 f"holds {available}")
    return shape, dtype


def _read_array(f, what: str, available_after_header) -> np.ndarray:
    """Check the header at ``f``'s position, then the declared size against what is there, then load."""
    start = f.tell()
    shape, dtype = _check_header(f, what, None)
    avail = available_after_header(f.tell() - start)
    n = 1
    for d in shape:
        n *= d
    if avail is not None and n * dtype.itemsize != avail:
        raise InputMismatchError(f"{what} declares {n * dtype.itemsize} bytes of data (shape {list(shape)}, "
                                 f"{dtype}) but holds {avail}")
    f.seek(start)
    try:
        return np.load(f, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - any failure to parse checked bytes is "not a valid array"
        raise InputMismatchError(f"{what} is not a valid .npy array: {e}") from None


def load_npy(path) -> np.ndarray:
    """A .npy file as an array, checked before loading: header, dtype (no objects), declared size."""
    p = Path(path)
    if p.exists() and not p.is_dir() and not is_regular(p):
        raise InputMismatchError(f"{p} is not a regular file (a device, FIFO or socket)")
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not os.path.isfile(p):
                raise InputMismatchError(f"{str(p)!r} is not a regular file")
            return _read_array(f, str(p), lambda header: size - header)
    except OSError as e:
        raise InputMismatchError(f"cannot read {str(p)!r}: {e.strerror}") from None


def load_npz(path) -> dict[str, np.ndarray]:
    """A .npz archive as {name: array}; every member is checked like :func:`load_npy`."""
    p = Path(path)
    if p.exists() and not p.is_dir() and not is_regular(p):
        raise InputMismatchError(f"{p} is not a regular file (a device, FIFO or socket)")
    out: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(p) as z:
            infos = z.infolist()
            if len(infos) > 4096:
                raise InputMismatchError(f"{str(p)!r} holds {len(infos)} arrays; too many")
            for info in infos:
                name = info.filename.removesuffix(".npy")
                what = f"{p}[{name}]"
                with z.open(info) as m:  # the header first: a tiny member may declare gigabytes
                    _check_header(m, what, None)
                    header = m.tell()
                    m.seek(0)
                    out[name] = _read_array(m, what, lambda h, n=info.file_size: n - h)
                    if header and m.read(1):
                        raise InputMismatchError(f"{what} holds bytes after its array")
    except InputMismatchError:
        raise
    except FileNotFoundError:
        raise InputMismatchError(f"{str(p)!r}: no such file") from None
    except IsADirectoryError:
        raise InputMismatchError(f"{str(p)!r} is a directory, not a .npz file") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError, EOFError, ValueError,
            RuntimeError) as e:  # RuntimeError: encrypted members; NotImplementedError: compression
        raise InputMismatchError(f"{str(p)!r} is not a readable .npz archive: {e}") from None
    return out


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
