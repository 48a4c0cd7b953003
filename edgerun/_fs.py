"""Safe output files: never overwrite an input, never leave a half-written file.

Every command that writes a file (``convert -o``, ``package -o``, ``keygen``) calls
:func:`check_output` with its inputs first, and writes through :func:`atomic_write` (a temporary
name in the same folder, then ``os.replace``), so an interrupted or failed write leaves the old
file, or no file, never a truncated one.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from edgerun.errors import InputFileError, UsageError


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output(output, *inputs, what: str = "output") -> Path:
    """Refuse an output path that is a folder, lies in a missing folder, or is one of ``inputs``.

    "Is one of the inputs" covers the same path, another name for the same file (a symlink or
    hard link: same device and inode), and a dangling symlink (writing through it would create a
    file elsewhere). Returns the output as a Path. Raises UsageError (one line).
    """
    out = Path(output)
    if os.path.isdir(out):
        raise UsageError(f"{what} {str(out)!r} is a directory; give a file name")
    if os.path.islink(out) and not os.path.exists(out):
        raise UsageError(f"{what} {str(out)!r} is a dangling symlink; refusing to write through it")
    parent = out.parent if str(out.parent) else Path(".")
    if not os.path.isdir(parent):
        raise UsageError(f"cannot write {what} {str(out)!r}: folder {str(parent)!r} does not exist")
    for i in inputs:
        if i is None or isinstance(i, (bytes, bytearray, memoryview)):
            continue
        ip = Path(i)
        if (os.path.lexists(out) and os.path.exists(ip) and _same(out, ip)) or \
                os.path.abspath(out) == os.path.abspath(ip):
            raise UsageError(f"{what} {str(out)!r} is the same file as the input {str(ip)!r}; refusing to "
                             "overwrite it (choose another output path)")
    return out


def atomic_write(path, data: bytes, *, mode: int = 0o644, exclusive: bool = False) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    ``exclusive`` instead creates ``path`` itself with ``O_CREAT | O_EXCL | O_NOFOLLOW``: an
    existing file or any symlink there (a planted dangling one included) makes it fail, and a
    failed write removes the file it created.
    Raises UsageError for a path that cannot be written (one line, with the reason).
    """
    out = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    if exclusive:
        try:
            fd = os.open(out, flags, mode)
        except FileExistsError:
            raise UsageError(f"{str(out)!r} exists (or is a symlink); refusing to overwrite it") from None
        except OSError as e:
            raise UsageError(f"cannot write {str(out)!r}: {e.strerror}") from None
        target = out
    else:
        parent = out.parent if str(out.parent) else Path(".")
        target = parent / f".{out.name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(target, flags, mode)
        except OSError as e:
            raise UsageError(f"cannot write {str(out)!r}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if not exclusive:
            os.replace(target, out)
    except OSError as e:
        try:
            os.unlink(target)
        except OSError:
            pass
        raise UsageError(f"cannot write {str(out)!r}: {e.strerror}") from None
    return out


def read_regular(path, *, limit: int, what: str = "file", error=None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or one-line ``error`` (an EdgerunError
    class; default UsageError). A FIFO, device or socket is refused without blocking or reading
    (``/dev/zero`` would never end, an unwritten FIFO never opens), as is a directory."""
    err = error or UsageError
    p = os.fspath(path)
    # A path that gives no bytes (missing, a folder, a special file, unreadable) is InputFileError,
    # exit 3, whatever ``error`` is: one rule for every command (docs/verdicts.md).
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputFileError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise InputFileError(f"{p} is a directory, not a {what}") from None
    except OSError as e:
        raise InputFileError(f"cannot read {what} {p!r}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputFileError(f"{p} is a directory, not a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(f"{p} is not a regular file (a device, FIFO or socket); expected a {what}")
        if st.st_size > limit:
            raise err(f"{what} {p!r} is {st.st_size} bytes, over the {limit}-byte limit")
        chunks, left = [], st.st_size + 1  # one byte more notices a file that grows meanwhile
        while left > 0:
            b = os.read(fd, min(left, 1 << 24))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        if len(data) > limit:
            raise err(f"{what} {p!r} grew over the {limit}-byte limit while being read")
        return data
    except OSError as e:
        raise InputFileError(f"cannot read {what} {p!r}: {e.strerror}") from None
    finally:
        os.close(fd)


def is_regular(path) -> bool:
    """True for a regular file (following symlinks), without opening it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False
