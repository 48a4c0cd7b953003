"""Reading .npy and .npz files safely: the header (dtype, shape, declared size) is checked before
any array data is read, objects are refused, and special files (FIFOs, devices) are not opened.
Used by ``inputs`` (``run``/``bench`` input files), ``preprocess`` (an image given as .npy),
``package --golden`` and ``flash``."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from edgerun._fs import is_regular
from edgerun.errors import InputMismatchError

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
