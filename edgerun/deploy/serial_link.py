"""Host side of the serial link: framing, sequence numbers, acknowledgements, retries.

Stop-and-wait: every request is one frame and waits for the device's answer carrying the same
``seq``. A missing, late or corrupted answer makes the request go out again with the same
``seq`` (the device answers a repeated ``seq`` from its cache instead of executing it twice), at
most ``retries`` times; then :class:`~edgerun.errors.LinkError` says what failed. Error answers
from the device raise :class:`DeviceError` with the device's code and message.

Works with anything pyserial opens: ``/dev/ttyACM0``, a pty, ``socket://127.0.0.1:PORT``
(QEMU's ``-serial tcp:...``), ``rfc2217://...``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from edgerun.deploy import protocol as P
from edgerun.errors import LinkError

#: seconds to wait for an answer, on top of the time the frames take on the wire
ACK_TIMEOUT_S = 0.5
#: seconds to wait for commands that erase flash, hash a slot or load a model (slow boards, QEMU)
LONG_TIMEOUT_S = 30.0
#: seconds to wait for INVOKE (inference on an emulated Cortex-M can take a while)
INVOKE_TIMEOUT_S = 120.0
#: attempts per request before giving up with LinkError
RETRIES = 8
#: pyserial read timeout: how long one read() may block while waiting for an answer
READ_POLL_S = 0.02
#: default line rate (a nominal figure on sockets and ptys, where it only sizes timeouts)
DEFAULT_BAUD = 115200

SLOW_COMMANDS = {P.CMD_BEGIN: LONG_TIMEOUT_S, P.CMD_END: LONG_TIMEOUT_S, P.CMD_COMMIT: LONG_TIMEOUT_S,
                 P.CMD_ROLLBACK: LONG_TIMEOUT_S, P.CMD_INVOKE: INVOKE_TIMEOUT_S, P.CMD_RESET: LONG_TIMEOUT_S,
                 P.CMD_PROFILE: INVOKE_TIMEOUT_S}


def printable(text: str, limit: int = 200) -> str:
    """Device-supplied text made safe for a one-line message (no control characters, bounded)."""
    return "".join(c if c.isprintable() else "?" for c in text)[:limit]


class BadReply(LinkError):
    """The device answered with a frame that breaks the protocol (too short, a field out of range,
    no progress). Not retried by reconnecting: the device, not the link, misbehaves."""


def fields(name: str, layout, payload: bytes, port: str = "the device") -> tuple:
    """Unpack a reply record, refusing one shorter than its layout (one-line BadReply)."""
    if len(payload) < layout.size:
        raise BadReply(f"{port}: short {name} answer ({len(payload)} bytes, expected {layout.size}); "
                       "not edgerun firmware, or a broken one?")
    return layout.unpack_from(payload)


class DeviceError(LinkError):
    """The device answered a request with an error frame (code and message from the firmware)."""

    def __init__(self, command: str, code: int, message: str):
        message = printable(message)
        self.command, self.code, self.device_message = command, code, message
        name = P.ERROR_NAMES.get(code, f"error {code}")
        super().__init__(f"device refused {command}: {message or name} ({name})")


@dataclass
class Hello:
    proto_version: int
    fw_version: str
    max_payload: int
    arena_bytes: int
    slot_bytes: int
    flash_bytes: int
    active_slot: int | None
    slot_count: int
    board: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SlotStatus:
    state: int
    size: int
    received: int
    sha256: str

    @property
    def state_name(self) -> str:
        return {P.SLOT_EMPTY: "empty", P.SLOT_RECEIVING: "receiving", P.SLOT_VERIFIED: "verified"}.get(
            self.state, str(self.state))


@dataclass
class Status:
    active_slot: int | None
    slots: list[SlotStatus] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"active_slot": self.active_slot,
                "slots": [dict(s.__dict__, state=s.state_name) for s in self.slots]}


@dataclass
class LinkStats:
    frames_sent: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    retransmissions: int = 0
    payload_sent: int = 0


def open_port(port: str, baud: int = DEFAULT_BAUD):
    """Open a device path or pyserial URL (raises LinkError with the reason)."""
    try:
        import serial
    except ImportError as e:  # pragma: no cover - pyserial is a declared dependency of the extra
        raise LinkError("talking to a device needs pyserial: pip install pyserial") from e
    try:
        return serial.serial_for_url(port, baudrate=baud, timeout=READ_POLL_S, write_timeout=10)
    except (serial.SerialException, OSError, ValueError) as e:
        raise LinkError(f"cannot open {port}: {e}") from None


class SerialLink:
    """A framed, acknowledged request/response link to edgerun firmware."""

    def __init__(self, port: str, baud: int = DEFAULT_BAUD, *, retries: int = RETRIES,
                 ack_timeout: float = ACK_TIMEOUT_S, slow_timeout: float | None = None, serial_obj=None):
        """``slow_timeout`` replaces LONG_TIMEOUT_S / INVOKE_TIMEOUT_S (a fast local device)."""
        self.port, self.baud, self.retries, self.ack_timeout = port, baud, retries, ack_timeout
        self.slow_timeout = slow_timeout
        self.ser = serial_obj if serial_obj is not None else open_port(port, baud)
        self.parser = P.FrameParser()
        self.seq = int(time.monotonic_ns()) & 0xFFFF  # a fresh link never reuses the last seq
        self.stats = LinkStats()
        self.max_payload = P.MIN_PAYLOAD

    # -- plumbing --------------------------------------------------------------------------------
    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a dead link must not mask the real error
            self.ser.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _wire_time(self, nbytes: int) -> float:
        return nbytes * 10.0 / max(self.baud, 1)

    def _write(self, data: bytes) -> None:
        try:
            self.ser.write(data)
            self.ser.flush()
        except Exception as e:  # noqa: BLE001 - pyserial raises several types for a lost link
            raise LinkError(f"write to {self.port} failed: {e}") from None
        self.stats.bytes_sent += len(data)

    def _read_some(self) -> bytes:
        try:
            n = max(1, min(getattr(self.ser, "in_waiting", 0) or 1, 65536))
            data = self.ser.read(n)
        except Exception as e:  # noqa: BLE001
            raise LinkError(f"read from {self.port} failed: {e}") from None
        self.stats.bytes_received += len(data)
        return data

    def request(self, cmd: int, payload: bytes = b"", *, timeout: float | None = None,
                retries: int | None = None) -> bytes:
        """Send one request, return the answer's payload (raises DeviceError / LinkError)."""
        self.seq = (self.seq + 1) & 0xFFFF
        frame = P.encode(cmd, self.seq, payload)
        name = P.COMMAND_NAMES.get(cmd, hex(cmd))
        if timeout is not None:
            wait = timeout
        elif cmd in SLOW_COMMANDS:
            wait = self.slow_timeout if self.slow_timeout is not None else SLOW_COMMANDS[cmd]
        else:
            wait = self.ack_timeout
        wait += 2 * self._wire_time(len(frame) + P.FRAME_OVERHEAD + self.max_payload)
        attempts = self.retries if retries is None else retries
        for attempt in range(attempts):
            if attempt:
                self.stats.retransmissions += 1
            self._write(frame)
            self.stats.frames_sent += 1
            if cmd == P.CMD_DATA:
                self.stats.payload_sent += max(0, len(payload) - P.DATA_HEADER_SIZE)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                for f in self.parser.feed(self._read_some()):
                    if not f.is_response or f.seq != self.seq or f.cmd != cmd:
                        continue  # a stale answer to an earlier attempt, or noise
                    if f.is_error:
                        code = int.from_bytes(f.payload[:2], "little") if len(f.payload) >= 2 else -1
                        raise DeviceError(name, code, f.payload[2:].decode("utf-8", "replace"))
                    return f.payload
        raise LinkError(f"no answer from {self.port} to {name} after {attempts} attempts "
                        f"({wait:.1f} s each); check the port, the baud rate and that edgerun "
                        "firmware is running")

    # -- commands -------------------------------------------------------------------------------
    def hello(self) -> Hello:
        p = self.request(P.CMD_HELLO)
        (proto, fw, maxp, _, arena, slot, flash, active, nslots, _, board) = fields("HELLO", P.HELLO, p, self.port)
        if proto != P.PROTO_VERSION:
            raise LinkError(f"{self.port}: firmware speaks protocol {proto}, this host {P.PROTO_VERSION}; "
                            "update the firmware or edgerun")
        if nslots != P.SLOT_COUNT or (active != P.SLOT_NONE and active >= P.SLOT_COUNT) or maxp < P.MIN_PAYLOAD:
            raise BadReply(f"{self.port}: HELLO describes {nslots} slots, active slot {active}, frames of {maxp} "
                           f"bytes; this host expects {P.SLOT_COUNT} slots and frames of at least {P.MIN_PAYLOAD}")
        self.max_payload = max(P.MIN_PAYLOAD, min(maxp, P.MAX_PAYLOAD))
        return Hello(proto, f"{fw >> 8}.{fw & 0xFF}", maxp, arena, slot, flash,
                     None if active == P.SLOT_NONE else active, nslots,
                     printable(board.rstrip(b"\0").decode("utf-8", "replace"), 64))

    def status(self) -> Status:
        p = self.request(P.CMD_STATUS)
        need = P.STATUS_HEADER_SIZE + P.SLOT_COUNT * P.STATUS_SLOT_SIZE
        if len(p) < need:
            raise BadReply(f"{self.port}: short STATUS answer ({len(p)} bytes, expected {need})")
        (active,) = P.STATUS_HEADER.unpack_from(p)
        if active != P.SLOT_NONE and active >= P.SLOT_COUNT:
            raise BadReply(f"{self.port}: STATUS names active slot {active}; the device has {P.SLOT_COUNT}")
        slots = []
        for i in range(P.SLOT_COUNT):
            st, size, received, sha = P.STATUS_SLOT.unpack_from(p, P.STATUS_HEADER_SIZE + i * P.STATUS_SLOT_SIZE)
            if st not in (P.SLOT_EMPTY, P.SLOT_RECEIVING, P.SLOT_VERIFIED) or received > size:
                raise BadReply(f"{self.port}: STATUS slot {i} is in state {st} with {received} of {size} bytes")
            slots.append(SlotStatus(st, size, received, sha.hex()))
        return Status(None if active == P.SLOT_NONE else active, slots)
