"""The edgerun serial protocol, mirrored from ``firmware/include/edgerun/protocol.h``.

The C header is canonical; every ``ER_<NAME>`` define there is ``<NAME>`` here, and
``tests/firmware/test_firmware_protocol.py`` checks that they agree. Frame layout (little-endian)::

    A5 5A | cmd u8 | flags u8 | seq u16 | len u16 | payload[len] | crc32 u32

The CRC (zlib's CRC-32) covers cmd..payload. Records below are ``struct`` formats whose sizes
equal the header's ``*_SIZE`` defines.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

PROTO_VERSION = 1
FW_VERSION_MAJOR = 0
FW_VERSION_MINOR = 1

SOF0 = 0xA5
SOF1 = 0x5A
HEADER_SIZE = 8
CRC_SIZE = 4
FRAME_OVERHEAD = 12
MAX_PAYLOAD = 4096
MIN_PAYLOAD = 256
INTERBYTE_TIMEOUT_MS = 250

FLAG_RESPONSE = 0x01
FLAG_ERROR = 0x02

CMD_HELLO = 0x01
CMD_STATUS = 0x02
CMD_BEGIN = 0x03
CMD_DATA = 0x04
CMD_END = 0x05
CMD_COMMIT = 0x06
CMD_ROLLBACK = 0x07
CMD_MODEL_INFO = 0x08
CMD_SET_INPUT = 0x09
CMD_INVOKE = 0x0A
CMD_GET_OUTPUT = 0x0B
CMD_RESET = 0x0C
CMD_EXIT = 0x0D
CMD_PROFILE = 0x0E
CMD_EEMBC = 0x0F
EEMBC_REQUEST_SIZE = 8
EEMBC_PERFORMANCE = 0
EEMBC_ENERGY = 1

OK = 0
ERR_BAD_FRAME = 1
ERR_UNKNOWN_CMD = 2
ERR_BAD_LENGTH = 3
ERR_NO_TRANSFER = 4
ERR_BAD_OFFSET = 5
ERR_TOO_LARGE = 6
ERR_HASH_MISMATCH = 7
ERR_NOT_VERIFIED = 8
ERR_SLOT_ACTIVE = 9
ERR_NO_MODEL = 10
ERR_MODEL_INVALID = 11
ERR_UNSUPPORTED_OP = 12
ERR_ARENA_TOO_SMALL = 13
ERR_BAD_INPUT = 14
ERR_INVOKE_FAILED = 15
ERR_FLASH = 16
ERR_NO_ROLLBACK = 17
ERR_BAD_SLOT = 18

SLOT_COUNT = 2
SLOT_NONE = 0xFF
SLOT_EMPTY = 0
SLOT_RECEIVING = 1
SLOT_VERIFIED = 2
SHA256_SIZE = 32

HELLO_SIZE = 48
BOARD_NAME_SIZE = 24
STATUS_HEADER_SIZE = 4
STATUS_SLOT_SIZE = 44
BEGIN_SIZE = 37
BEGIN_REPLY_SIZE = 8
DATA_HEADER_SIZE = 4
COMMIT_SIZE = 33
ACTIVE_REPLY_SIZE = 8
MODEL_INFO_HEADER_SIZE = 44
IO_RECORD_SIZE = 40
MAX_DIMS = 6
MAX_IO = 8
IO_HEADER_SIZE = 8
GET_OUTPUT_SIZE = 10
INVOKE_REPLY_SIZE = 8
PROFILE_SIZE = 4
PROFILE_HEADER_SIZE = 16
PROFILE_RECORD_SIZE = 8

TYPE_FLOAT32 = 0
TYPE_INT32 = 2
TYPE_UINT8 = 3
TYPE_INT64 = 4
TYPE_INT16 = 7
TYPE_INT8 = 9

# record layouts (struct formats); sizes are checked against the *_SIZE values at import
HELLO = struct.Struct("<HHHHIIIBBH24s")
STATUS_HEADER = struct.Struct("<B3x")
STATUS_SLOT = struct.Struct("<B3xII32s")
BEGIN = struct.Struct("<I32sB")
BEGIN_REPLY = struct.Struct("<BBHI")
DATA_HEADER = struct.Struct("<I")
COMMIT = struct.Struct("<B32s")
ACTIVE_REPLY = struct.Struct("<B3xI")
MODEL_INFO_HEADER = struct.Struct("<BBHII32s")
IO_RECORD = struct.Struct("<BBHIfi6i")
IO_HEADER = struct.Struct("<B3xI")
GET_OUTPUT = struct.Struct("<B3xIH")
INVOKE_REPLY = struct.Struct("<II")
PROFILE = struct.Struct("<I")
PROFILE_HEADER = struct.Struct("<IIIH2x")
PROFILE_RECORD = struct.Struct("<H2xI")
_HEADER = struct.Struct("<BBBBHH")

for _s, _n in ((HELLO, HELLO_SIZE), (STATUS_HEADER, STATUS_HEADER_SIZE), (STATUS_SLOT, STATUS_SLOT_SIZE),
               (BEGIN, BEGIN_SIZE), (BEGIN_REPLY, BEGIN_REPLY_SIZE), (COMMIT, COMMIT_SIZE),
               (ACTIVE_REPLY, ACTIVE_REPLY_SIZE), (MODEL_INFO_HEADER, MODEL_INFO_HEADER_SIZE),
               (IO_RECORD, IO_RECORD_SIZE), (IO_HEADER, IO_HEADER_SIZE), (GET_OUTPUT, GET_OUTPUT_SIZE),
               (INVOKE_REPLY, INVOKE_REPLY_SIZE), (PROFILE, PROFILE_SIZE), (PROFILE_HEADER, PROFILE_HEADER_SIZE),
               (PROFILE_RECORD, PROFILE_RECORD_SIZE), (_HEADER, HEADER_SIZE)):
    assert _s.size == _n, (_s.format, _n)

COMMAND_NAMES = {v: k[4:] for k, v in list(globals().items()) if k.startswith("CMD_")}
ERROR_NAMES = {v: k for k, v in list(globals().items()) if k.startswith("ERR_")}
TYPE_DTYPES = {TYPE_FLOAT32: "float32", TYPE_INT32: "int32", TYPE_UINT8: "uint8", TYPE_INT64: "int64",
               TYPE_INT16: "int16", TYPE_INT8: "int8"}


@dataclass(frozen=True)
class Frame:
    cmd: int
    flags: int
    seq: int
    payload: bytes

    @property
    def is_response(self) -> bool:
        return bool(self.flags & FLAG_RESPONSE)

    @property
    def is_error(self) -> bool:
        return bool(self.flags & FLAG_ERROR)


def crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def encode(cmd: int, seq: int, payload: bytes = b"", flags: int = 0) -> bytes:
    """One frame on the wire."""
    if len(payload) > 0xFFFF:
        raise ValueError(f"payload of {len(payload)} bytes does not fit a frame")
    body = _HEADER.pack(SOF0, SOF1, cmd, flags, seq & 0xFFFF, len(payload))[2:] + bytes(payload)
    return bytes((SOF0, SOF1)) + body + struct.pack("<I", crc32(body))


class FrameParser:
    """Incremental parser with the firmware's resynchronisation rules (see protocol.h)."""

    def __init__(self, max_payload: int = MAX_PAYLOAD):
        self.buf = bytearray()
        self.max_payload = max_payload
        self.skipped = 0
        self.bad_crc = 0

    def feed(self, data: bytes) -> list[Frame]:
        self.buf += data
        out: list[Frame] = []
        buf = self.buf
        while buf:
            if buf[0] != SOF0:
                k = buf.find(bytes((SOF0,)), 1)
                k = len(buf) if k < 0 else k
                del buf[:k]
                self.skipped += k
                continue
            if len(buf) < 2:
                break
            if buf[1] != SOF1:
                del buf[:1]
                self.skipped += 1
                continue
            if len(buf) < HEADER_SIZE:
                break
            _, _, cmd, flags, seq, n = _HEADER.unpack_from(buf)
            if n > self.max_payload:
                del buf[:1]
                self.skipped += 1
                continue
            total = FRAME_OVERHEAD + n
            if len(buf) < total:
                break
            (want,) = struct.unpack_from("<I", buf, HEADER_SIZE + n)
            if crc32(bytes(buf[2:HEADER_SIZE + n])) != want:
                self.bad_crc += 1
                del buf[:1]
                self.skipped += 1
                continue
            out.append(Frame(cmd, flags, seq, bytes(buf[HEADER_SIZE:HEADER_SIZE + n])))
            del buf[:total]
        return out
