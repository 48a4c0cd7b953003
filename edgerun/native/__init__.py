"""edgerun's native kernels: ``kernels.c``, compiled on first use by the machine's C compiler.

numpy cannot fuse a requantization into one pass: the float32 forms in :mod:`edgerun.ops` cost
5-9 passes over every accumulator (about 2 ns a value), where one C loop costs a fraction of a
nanosecond. The loops here are bit-exact twins of numpy formulations in :mod:`edgerun.ops`; the
numpy kernels stay the definition and the fallback, so the device core still installs with numpy
and flatbuffers alone and runs wherever no compiler exists.

The library is built the first time a kernel asks for it (``cc -O3 -march=native
-ffp-contract=off``, without ``-march=native`` where the compiler rejects it), cached in ``$EDGERUN_NATIVE_DIR`` (default
``~/.cache/edgerun/native``) by a hash of the source, the flags, the compiler and the machine, and
loaded with :mod:`ctypes`. ``EDGERUN_NATIVE=0`` turns it off; ``CC`` names the compiler. A
compiler that is missing or fails leaves edgerun on its numpy kernels (``status()`` says why).
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import sys
import tempfile
import threading
import zlib
from pathlib import Path

_SOURCE = Path(__file__).with_name("kernels.c")
_LOCK = threading.Lock()
_STATE: dict = {}

#: flag sets tried in order; the first the compiler accepts is kept
FLAG_SETS = (["-O3", "-march=native", "-ffp-contract=off"], ["-O3", "-ffp-contract=off"])


def enabled() -> bool:
    """Whether native kernels may be used at all (``EDGERUN_NATIVE`` is not 0 / off / no)."""
    return os.environ.get("EDGERUN_NATIVE", "1").strip().lower() not in ("0", "off", "no", "false")


def _folders() -> list[Path]:
    """Where the library may live: ``$EDGERUN_NATIVE_DIR`` or the user's cache, then a per-user
    folder in the temporary directory (a read-only home)."""
    root = os.environ.get("EDGERUN_NATIVE_DIR")
    first = Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgerun" / "native"
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return [first, Path(tempfile.gettempdir()) / f"edgerun-native-{uid}"]


def _cpu() -> bytes:
    """The CPU's feature line: a library built with -march=native must not be loaded on another
    CPU that shares the cache (a home folder on NFS)."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            for line in f:
                if line.startswith((b"flags", b"Features")):
                    return line.strip()
    except OSError:
        pass
    return platform.processor().encode()


def _compile(cc: str, src: bytes) -> tuple[Path | None, str]:
    """(path of the built library, or None; what happened). A library cached for any flag set is
    taken before anything is compiled: where the compiler rejects the first set, a process would
    otherwise run that failing compile again on every start."""
    named = []
    for flags in FLAG_SETS:
        # zlib's checksums, not hashlib: importing hashlib loads OpenSSL (about 3.6 MB resident,
        # which every process running a model would carry); a key only has to tell versions apart
        blob = b"\0".join([src, " ".join(flags).encode(), cc.encode(), platform.machine().encode(),
                           sys.platform.encode(), _cpu()])
        named.append((flags, f"kernels-{zlib.crc32(blob):08x}{zlib.adler32(blob):08x}{len(blob):x}.so"))
    why = ""
    for flags, name in named:
        full = []
        for folder in _folders():  # the first folder that holds the library or takes a new file
            hit = next((folder / n for _, n in named if (folder / n).is_file()), None)
            if hit is not None:
                return hit, f"cached {hit}"
            try:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
            except OSError as exc:
                full.append(f"{folder}: {exc.strerror}")
                continue
            os.close(fd)
            break
        else:
            return None, "no writable folder for the library (" + "; ".join(full) + ")"
        import subprocess  # only to build (about 0.6 MB resident)

        cmd = [cc, *flags, "-std=c99", "-shared", "-fPIC", "-o", tmp, str(_SOURCE)]
        try:
            res = subprocess.run(cmd, capture_output=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            os.unlink(tmp)
            return None, f"{cc} did not run: {exc}"
        if res.returncode == 0:
            os.replace(tmp, folder / name)  # atomic: concurrent builders leave one whole file
            return folder / name, f"built {folder / name} ({' '.join(flags)})"
        os.unlink(tmp)
        why = f"{cc} {' '.join(flags)} failed: {res.stderr.decode(errors='replace').strip()[-300:]}"
    return None, why


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    f = lib.edgerun_requant_i8
    f.argtypes = [p, p, i64, i64, p, p, p, p, i32, i32, i32]
    f.restype = None
    f = lib.edgerun_add_i8
    f.argtypes = [p, p, p, i64, p, p, i32, i32, i32, i32, i32, i32]
    f.restype = None
    f = lib.edgerun_add_line_i8
    f.argtypes = [p, p, p, i64, i32, *[ctypes.c_float] * 5, i32]
    f.restype = None
    f = lib.edgerun_prelu_i8
    f.argtypes = [p, p, i64, i64, p, i32, i32, p]
    f.restype = None
    f = lib.edgerun_depthwise_i8
    f.argtypes = [p, *[i64] * 5, p, *[i64] * 11, i32, i64, p, p, p, p, i32, i32, i32, p, p]
    f.restype = None
    return lib


def library() -> ctypes.CDLL | None:
    """The loaded native library, or None (disabled, no compiler, or the build failed)."""
    lib = _STATE.get("lib", False)
    if lib is not False:
        return lib
    with _LOCK:
        if "lib" in _STATE:
            return _STATE["lib"]
        lib, why = None, "disabled by EDGERUN_NATIVE"
        if enabled():
            cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
            if cc is None:
                why = "no C compiler (cc, gcc, clang) on PATH"
            else:
                for attempt in range(2):
                    path, why = _compile(cc, _SOURCE.read_bytes())
                    if path is None:
                        break
                    try:
                        lib = _bind(ctypes.CDLL(str(path)))
                        break
                    except (OSError, AttributeError) as exc:  # a damaged cached file: built once more
                        lib, why = None, f"cannot load {path}: {exc}"
                        if attempt == 0:
                            try:
                                path.unlink()
                            except OSError:
                                break
        _STATE["lib"], _STATE["why"] = lib, why
        return lib


def status() -> str:
    """One line: whether native kernels are in use, and why not."""
    lib = library()
    return ("native kernels: on (" if lib is not None else "native kernels: off (") + _STATE.get("why", "") + ")"


def reset() -> None:
    """Forget the loaded library (tests: after changing EDGERUN_NATIVE or the cache)."""
    with _LOCK:
        _STATE.clear()
