"""The bundle container: a small, fully specified, canonical archive.

Layout (all integers little-endian)::

    magic        8 bytes   89 45 52 42 0D 0A 1A 0A   ("\\x89ERB\\r\\n\\x1a\\n": catches text-mode copies)
    layout       u32       archive layout version, 1
    count        u32       number of members, 1..MAX_MEMBERS
    count times:
      name_len   u16       1..MAX_NAME
      name       name_len bytes, matching NAME_RE (flat: no '/', no '..', no leading dot)
      size       u64       bytes of data
      sha256     32 bytes  SHA-256 of data
      data       size bytes
    end of file             (nothing may follow the last member)

There are no timestamps, permissions, comments, padding, alignment or compression: every byte
of a valid archive is determined by the member names and contents, so the same members give
the same bytes and nothing in the file is unauthenticated slack. The reader checks every length
against the bytes actually present before slicing, refuses duplicate names, names outside
NAME_RE, oversize members and trailing bytes, and verifies each member's SHA-256. Members are
flat names, so no member can denote a path outside the directory it is extracted to; links and
absolute paths cannot be expressed at all, and :func:`extract` still opens every file with
``O_EXCL | O_NOFOLLOW`` inside the target directory.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from pathlib import Path

from edgerun._fs import read_regular
from edgerun.errors import BundleError, BundleIntegrityError

MAGIC = b"\x89ERB\r\n\x1a\n"
LAYOUT_VERSION = 1
MAX_MEMBERS = 16
MAX_NAME = 64
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*(\.[a-z0-9_-]+)*\Z")
#: default cap on the whole file and on any member; override with ``max_bytes``
MAX_BYTES = 2 * 1024 ** 3

_HEAD = struct.Struct("<8sII")
_NAME_LEN = struct.Struct("<H")
_SIZE = struct.Struct("<Q")


def check_name(name: str) -> str:
    """Raise BundleError unless ``name`` is an allowed flat member name."""
    if not isinstance(name, str) or not (1 <= len(name) <= MAX_NAME) or not NAME_RE.match(name):
        raise BundleError(f"bundle member name {name!r} is not allowed (flat lower-case names "
                          f"[a-z0-9._-], at most {MAX_NAME} characters, no '/' or '..')")
    return name


def pack(members: list[tuple[str, bytes]]) -> bytes:
    """Members (name, data), in the given order, to archive bytes. Deterministic."""
    if not 1 <= len(members) <= MAX_MEMBERS:
        raise BundleError(f"a bundle holds 1 to {MAX_MEMBERS} members, not {len(members)}")
    names = [check_name(n) for n, _ in members]
    if len(set(names)) != len(names):
        raise BundleError(f"duplicate member names in {names}")
    out = [_HEAD.pack(MAGIC, LAYOUT_VERSION, len(members))]
    for name, data in members:
        data = bytes(data)
        raw = name.encode("ascii")
        out += [_NAME_LEN.pack(len(raw)), raw, _SIZE.pack(len(data)), hashlib.sha256(data).digest(), data]
    return b"".join(out)


def unpack(data: bytes | bytearray | memoryview, *, max_bytes: int = MAX_BYTES) -> list[tuple[str, memoryview]]:
    """Archive bytes to a list of (name, data view), checking everything listed in the module doc.

    Raises BundleError for structure problems and BundleIntegrityError for a hash mismatch.
    """
    mv = memoryview(data).cast("B")
    n = len(mv)
    if n > max_bytes:
        raise BundleError(f"bundle is {n} bytes, over the {max_bytes}-byte limit")
    if n < _HEAD.size:
        raise BundleError(f"not a bundle: {n} bytes is shorter than the {_HEAD.size}-byte header")
    magic, layout, count = _HEAD.unpack_from(mv, 0)
    if magic != MAGIC:
        raise BundleError("not an edgerun bundle (bad magic bytes at offset 0)")
    if layout != LAYOUT_VERSION:
        raise BundleError(f"bundle archive layout {layout} is not supported (this edgerun reads "
                          f"layout {LAYOUT_VERSION}); upgrade edgerun")
    if not 1 <= count <= MAX_MEMBERS:
        raise BundleError(f"bundle declares {count} members; 1 to {MAX_MEMBERS} are allowed")
    pos = _HEAD.size
    members: list[tuple[str, memoryview]] = []
    seen: set[str] = set()
    for i in range(count):
        if pos + _NAME_LEN.size > n:
            raise BundleError(f"truncated bundle: member {i} header at byte {pos} is missing")
        (name_len,) = _NAME_LEN.unpack_from(mv, pos)
        pos += _NAME_LEN.size
        if not 1 <= name_len <= MAX_NAME:
            raise BundleError(f"member {i} at byte {pos - 2}: name length {name_len} is out of range")
        if pos + name_len + _SIZE.size + 32 > n:
            raise BundleError(f"truncated bundle: member {i} header at byte {pos} runs past the end")
        try:
            name = bytes(mv[pos:pos + name_len]).decode("ascii")
        except UnicodeDecodeError:
            raise BundleError(f"member {i} at byte {pos}: name is not ASCII") from None
        check_name(name)
        if name in seen:
            raise BundleError(f"duplicate bundle member {name!r} at byte {pos}")
        seen.add(name)
        pos += name_len
        (size,) = _SIZE.unpack_from(mv, pos)
        pos += _SIZE.size
        digest = bytes(mv[pos:pos + 32])
        pos += 32
        if size > max_bytes:
            raise BundleError(f"member {name!r} declares {size} bytes, over the {max_bytes}-byte limit")
        if size > n - pos:
            raise BundleError(f"truncated bundle: member {name!r} declares {size} bytes at byte {pos}, "
                              f"only {n - pos} remain")
        body = mv[pos:pos + size]
        if hashlib.sha256(body).digest() != digest:
            raise BundleIntegrityError(f"member {name!r} (bytes {pos}..{pos + size}) does not match "
                                       "its SHA-256: the bundle is corrupt or was modified")
        members.append((name, body))
        pos += size
    if pos != n:
        raise BundleError(f"{n - pos} unexpected bytes after the last member (at byte {pos}); "
                          "a bundle may not carry trailing data")
    return members


def read_file(path, *, max_bytes: int = MAX_BYTES) -> bytes:
    """Read a bundle file, refusing non-regular files (without blocking on a FIFO) and files
    over ``max_bytes``; symlinks are followed (a board's ``current`` link is one)."""
    return read_regular(path, limit=max_bytes, what="bundle", error=BundleError)


def extract(members: list[tuple[str, bytes | memoryview]], directory) -> list[Path]:
    """Write already-verified members into ``directory`` (created if missing).

    Each name is re-checked, and each file is created with ``O_EXCL | O_NOFOLLOW`` relative to
    the directory, so an existing file or a planted symlink makes this fail instead of writing
    elsewhere. All or nothing: when any member cannot be written, the files written so far (and
    the directory, when this call created it) are removed before the error is raised.
    """
    d = Path(directory)
    created = not os.path.lexists(d)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BundleError(f"cannot create {str(d)!r}: {e.strerror}") from None
    if d.is_symlink() or not d.is_dir():
        raise BundleError(f"extraction target {str(d)!r} is not a plain directory")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    dfd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    written: list[str] = []
    try:
        for name, data in members:
            check_name(name)
            try:
                fd = os.open(name, flags, 0o644, dir_fd=dfd)
            except OSError as e:
                raise BundleError(f"cannot extract {name!r} into {str(d)!r}: {e.strerror}") from None
            written.append(name)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            except OSError as e:
                raise BundleError(f"cannot extract {name!r} into {str(d)!r}: {e.strerror}") from None
    except BaseException:
        for name in written:
            try:
                os.unlink(name, dir_fd=dfd)
            except OSError:
                pass
        if created:
            try:
                os.rmdir(d)
            except OSError:
                pass
        raise
    finally:
        os.close(dfd)
    return [d / n for n in written]
