"""Flash a model onto edgerun firmware over a serial link, and run it there.

``flash()`` negotiates the frame size (HELLO), asks what the device holds (STATUS), skips the
transfer when the active model already has this hash, resumes an interrupted transfer from the
bytes the device already acknowledged, sends offset-addressed chunks into the inactive slot,
has the device verify the SHA-256 (END) and only then switches the active slot (COMMIT). A
transfer cut anywhere leaves the previous model active and runnable. When the link drops in the
middle, ``flash()`` reopens it (at most ``RECONNECTS`` times) and resumes.

``run_on_device()`` sends inputs, invokes, and reads outputs back; ``verify_on_device()`` runs a
bundle's golden vectors on the device and compares them byte for byte with the host's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgerun.deploy import protocol as P
from edgerun.deploy.serial_link import DEFAULT_BAUD, BadReply, DeviceError, SerialLink, fields
from edgerun.errors import DeployError, EdgerunError, InputMismatchError, LinkError, ModelFormatError

#: times flash() reopens a link that failed mid-transfer before giving up
RECONNECTS = 3
#: seconds to wait before reopening a failed link (a USB CDC port re-enumerating, a relay restarting)
RECONNECT_DELAY_S = 0.2
#: DATA acknowledgements without progress (or offset resyncs) tolerated before giving up
MAX_STALLS = 16
#: a flash may take this long plus FLASH_TIME_FACTOR times the transfer's time on the wire
FLASH_TIME_BASE_S = 120.0
FLASH_TIME_FACTOR = 20.0


@dataclass
class FlashResult:
    port: str
    board: str
    slot: int
    size: int
    sha256: str
    skipped: bool = False
    resumed_from: int = 0
    payload_bytes: int = 0
    wire_bytes: int = 0
    retransmissions: int = 0
    reconnects: int = 0
    seconds: float = 0.0
    arena_bytes: int = 0
    time_limit: float = 0.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    scale: float
    zero_point: int


@dataclass
class DeviceModel:
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    arena_bytes: int = 0
    size: int = 0
    sha256: str = ""


def model_bytes(bundle_or_model, *, allow_unsigned: bool = False) -> tuple[bytes, object | None]:
    """(model bytes, Bundle or None) from bytes, a .tflite path, a bundle path or a Bundle.

    A bundle file gets the same trust policy as ``edgerun.load``: its signature is checked against
    the configured trusted key, and an unsigned bundle is refused unless ``allow_unsigned``.
    A bare .tflite carries no signature claim and is taken as given."""
    if isinstance(bundle_or_model, (bytes, bytearray, memoryview)):
        return bytes(bundle_or_model), None
    if hasattr(bundle_or_model, "model") and hasattr(bundle_or_model, "manifest"):
        return bytes(bundle_or_model.model), bundle_or_model
    path = Path(bundle_or_model)
    from edgerun._fs import read_regular

    # missing, a folder, a FIFO or device: InputFileError (exit 3), never a blocking open
    data = read_regular(path, limit=1 << 31, what="bundle or model", error=ModelFormatError)
    if data[4:8] == b"TFL3":
        return data, None
    try:
        from edgerun.bundle import read_bundle
    except ImportError:  # pragma: no cover - bundles are part of edgerun
        raise ModelFormatError(f"{path} is not a .tflite model and bundles are not available") from None
    bundle = read_bundle(data, allow_unsigned=allow_unsigned)
    return bytes(bundle.model), bundle


def _open(port, baud, link, link_options=None):
    if link is not None:
        return link, False
    return SerialLink(port, baud, **(link_options or {})), True


def _firmware_check(data: bytes, board: str) -> None:
    """Refuse before any transfer what the firmware would refuse at COMMIT (its own capability
    table, edgerun_delegates.mcu.firmware); boards the host does not know are left to COMMIT."""
    try:
        from edgerun_delegates.mcu.firmware import firmware_accepts
    except ImportError:
        return
    from edgerun.targets import BOARDS

    name = "mps2-an386" if board == "posix" else board  # the posix build runs the mps2-an386 profile
    if name not in BOARDS or BOARDS[name].kind != "mcu":
        return
    why = firmware_accepts(data, name)
    if why:
        raise DeployError(f"the firmware on {board} would refuse this model ({'; '.join(why[:3])}); nothing was sent")


def _transfer(link: SerialLink, data: bytes, digest: bytes, result: FlashResult, progress, force: bool,
              max_payload: int | None, deadline: float) -> None:
    port = link.port

    def check_time(phase: str) -> None:
        if time.monotonic() > deadline:
            raise BadReply(f"{port}: flashing took longer than its {result.time_limit:.0f} s limit "
                           f"({phase}); the previous model stays active")

    hello = link.hello()
    if max_payload:
        link.max_payload = max(P.MIN_PAYLOAD, min(link.max_payload, max_payload))
    result.board = hello.board
    if len(data) > hello.slot_bytes:
        raise DeployError(f"model is {len(data)} bytes; a slot on {hello.board} holds {hello.slot_bytes} "
                          "bytes: quantize it, prune it or pick a board with more flash")
    _firmware_check(data, hello.board)
    st = link.status()
    sha = digest.hex()
    active = st.active_slot
    if not force and active is not None and st.slots[active].sha256 == sha and \
            st.slots[active].state == P.SLOT_VERIFIED:
        result.skipped, result.slot = True, active
        if progress:
            progress(len(data), len(data))
        return
    reply = link.request(P.CMD_BEGIN, P.BEGIN.pack(len(data), digest, P.SLOT_NONE))
    slot, resumed, _, received = fields("BEGIN", P.BEGIN_REPLY, reply, port)
    if slot >= P.SLOT_COUNT or slot == active or resumed not in (0, 1) or received > len(data) or \
            (received and not resumed):
        raise BadReply(f"{port}: BEGIN answered slot {slot} (active {active}), resumed={resumed}, {received} of "
                       f"{len(data)} bytes held; not a valid answer")
    result.slot = slot
    if resumed and received:
        result.resumed_from = max(result.resumed_from, received)
    chunk = link.max_payload - P.DATA_HEADER_SIZE
    offset = received
    if progress:
        progress(offset, len(data))
    stalls = resyncs = 0
    while offset < len(data):
        check_time(f"at byte {offset} of {len(data)}")
        piece = data[offset:offset + chunk]
        try:
            reply = link.request(P.CMD_DATA, P.DATA_HEADER.pack(offset) + piece)
        except DeviceError as e:
            if e.code != P.ERR_BAD_OFFSET:
                raise
            resyncs += 1
            if resyncs > MAX_STALLS:
                raise BadReply(f"{port}: the device refused the transfer offset {resyncs} times; "
                               "the previous model stays active") from None
            st = link.status()  # the device holds something else than we thought: resync
            new = st.slots[slot].received
            if new > len(data):
                raise BadReply(f"{port}: STATUS says slot {slot} holds {new} bytes of a {len(data)}-byte "
                               "model") from None
            offset = new
            continue
        (acked,) = fields("DATA", P.DATA_HEADER, reply, port)
        if acked > offset + len(piece) or acked > len(data):
            raise BadReply(f"{port}: the device acknowledged byte {acked} after being sent up to "
                           f"{offset + len(piece)}; not a valid answer")
        if acked <= offset:  # no progress (a device that always acks 0 would loop for ever)
            stalls += 1
            if stalls > MAX_STALLS:
                raise BadReply(f"{port}: the device acknowledged no progress {stalls} times in a row (stuck at "
                               f"byte {acked} of {len(data)}); the previous model stays active")
        else:
            stalls = 0
        offset = acked
        if progress:
            progress(offset, len(data))
    check_time("before the device's hash check")
    reply = link.request(P.CMD_END, digest)
    if len(reply) < P.SHA256_SIZE:
        raise BadReply(f"{port}: short END answer ({len(reply)} bytes, expected {P.SHA256_SIZE})")
    if reply[:32] != digest:
        raise DeployError(f"device hashed the slot as {reply[:32].hex()}, expected {sha}")
    reply = link.request(P.CMD_COMMIT, P.COMMIT.pack(slot, digest))
    active_slot, arena = fields("COMMIT", P.ACTIVE_REPLY, reply, port)
    if active_slot != slot:
        raise BadReply(f"{port}: COMMIT of slot {slot} answered active slot {active_slot}")
    result.slot, result.arena_bytes = active_slot, arena


def flash(bundle_or_model, port: str, baud: int = DEFAULT_BAUD, progress=None, *, force: bool = False,
          link: SerialLink | None = None, max_payload: int | None = None,
          link_options: dict | None = None, time_limit: float | None = None,
          allow_unsigned: bool = False) -> FlashResult:
    """Flash a bundle (or a .tflite) to the firmware on ``port``; returns a :class:`FlashResult`.

    ``progress(done, total)`` is called with the bytes the device has acknowledged.
    ``max_payload`` caps the frame size below what the device offers (noisy links);
    ``link_options`` go to :class:`SerialLink` (``retries``, ``ack_timeout``).
    ``time_limit`` bounds the whole flash in seconds (default: FLASH_TIME_BASE_S plus
    FLASH_TIME_FACTOR times the payload's time on the wire); every reply is length- and
    range-checked, and a device that acknowledges no progress MAX_STALLS times in a row is given
    up on, so a misbehaving device ends in one LinkError line, never a loop or a traceback.
    A bundle file must be signed by a trusted key unless ``allow_unsigned`` (see model_bytes).
    """
    data, _ = model_bytes(bundle_or_model, allow_unsigned=allow_unsigned)
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelFormatError("not a TFLite model (no TFL3 identifier); flash takes a .tflite or a bundle")
    digest = hashlib.sha256(data).digest()
    result = FlashResult(port=port, board="", slot=-1, size=len(data), sha256=digest.hex())
    t0 = time.monotonic()
    if time_limit is None:
        time_limit = FLASH_TIME_BASE_S + FLASH_TIME_FACTOR * len(data) * 10.0 / max(int(baud), 1)
    result.time_limit = float(time_limit)
    deadline = t0 + time_limit
    own_link = link is None
    lk = link
    stats = []  # (LinkStats, snapshot at start) per link used: a shared link has history
    base = dataclasses.replace(link.stats) if link is not None else None
    try:
        while True:
            try:
                if lk is None:
                    lk = SerialLink(port, baud, **(link_options or {}))
                _transfer(lk, data, digest, result, progress, force, max_payload, deadline)
                break
            except (DeviceError, BadReply):
                raise
            except LinkError:
                # the link dropped (or never opened): reopen and resume from what the device holds
                if not own_link or result.reconnects >= RECONNECTS or time.monotonic() > deadline:
                    raise
                if lk is not None:
                    stats.append((lk.stats, base))
                    base = None
                    lk.close()
                    lk = None
                result.reconnects += 1
                time.sleep(RECONNECT_DELAY_S)
    finally:
        if lk is not None:
            stats.append((lk.stats, base))
            if own_link:
                lk.close()

    def total(field_name):
        return sum(getattr(s, field_name) - (getattr(b, field_name) if b else 0) for s, b in stats)

    result.wire_bytes = total("bytes_sent") + total("bytes_received")
    result.payload_bytes = total("payload_sent")
    result.retransmissions = total("retransmissions")
    result.seconds = time.monotonic() - t0
    return result


def _tensor_info(rec) -> TensorInfo:
    typ, ndim, _, nbytes, scale, zp, *dims = P.IO_RECORD.unpack(rec)
    if typ not in P.TYPE_DTYPES or ndim > P.MAX_DIMS or any(d < 0 for d in dims[:ndim]):
        raise BadReply(f"device describes a tensor of type {typ}, rank {ndim}, dims {dims[:ndim]}")
    n = 1
    for d in dims[:ndim]:
        n *= d
    if n * np.dtype(P.TYPE_DTYPES[typ]).itemsize != nbytes:
        raise BadReply(f"device describes a {P.TYPE_DTYPES[typ]} tensor of shape {dims[:ndim]} as {nbytes} bytes")
    return TensorInfo(P.TYPE_DTYPES[typ], tuple(dims[:ndim]), nbytes, scale, zp)


def model_info(link: SerialLink) -> DeviceModel:
    p = link.request(P.CMD_MODEL_INFO)
    n_in, n_out, _, arena, size, sha = fields("MODEL_INFO", P.MODEL_INFO_HEADER, p, link.port)
    recs = [p[P.MODEL_INFO_HEADER_SIZE + i * P.IO_RECORD_SIZE:][:P.IO_RECORD_SIZE] for i in range(n_in + n_out)]
    if any(len(r) != P.IO_RECORD_SIZE for r in recs):
        raise LinkError("short MODEL_INFO answer")
    infos = [_tensor_info(r) for r in recs]
    return DeviceModel(infos[:n_in], infos[n_in:], arena, size, sha.hex())


def run_with_link(link: SerialLink, inputs, info: DeviceModel | None = None) -> tuple[list[np.ndarray], float]:
    """Set inputs, invoke, read outputs. Returns (outputs, device microseconds)."""
    if link.max_payload <= P.MIN_PAYLOAD:
        link.hello()
    info = info or model_info(link)
    inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
    if len(inputs) != len(info.inputs):
        raise InputMismatchError(f"the device model takes {len(info.inputs)} inputs, got {len(inputs)}")
    chunk = link.max_payload - P.IO_HEADER_SIZE
    for i, (x, ti) in enumerate(zip(inputs, info.inputs)):
        x = np.asarray(x)
        if x.dtype != np.dtype(ti.dtype) or tuple(x.shape) != ti.shape:
            raise InputMismatchError(f"input {i}: the device expects {ti.dtype}{list(ti.shape)}, "
                                     f"got {x.dtype}{list(x.shape)}")
        raw = np.ascontiguousarray(x).astype(x.dtype.newbyteorder("<"), copy=False).tobytes()
        for off in range(0, len(raw), chunk):
            link.request(P.CMD_SET_INPUT, P.IO_HEADER.pack(i, off) + raw[off:off + chunk])
    us, _ = fields("INVOKE", P.INVOKE_REPLY, link.request(P.CMD_INVOKE), link.port)
    outs = []
    chunk = link.max_payload
    for i, to in enumerate(info.outputs):
        raw = bytearray()
        while len(raw) < to.nbytes:
            n = min(chunk, to.nbytes - len(raw))
            piece = link.request(P.CMD_GET_OUTPUT, P.GET_OUTPUT.pack(i, len(raw), n))
            if len(piece) != n:
                raise LinkError(f"device sent {len(piece)} bytes of output {i}, asked for {n}")
            raw += piece
        outs.append(np.frombuffer(bytes(raw), dtype=np.dtype(to.dtype).newbyteorder("<")).astype(to.dtype).reshape(to.shape))
    return outs, float(us)


def run_on_device(port: str, inputs, baud: int = DEFAULT_BAUD, *, link: SerialLink | None = None) -> list[np.ndarray]:
    """Run the device's active model on ``inputs`` (a list of arrays in model input order)."""
    lk, own = _open(port, baud, link)
    try:
        lk.hello()
        return run_with_link(lk, inputs)[0]
    finally:
        if own:
            lk.close()


def _host_outputs(model: bytes, inputs) -> tuple[list[np.ndarray], str]:
    """The host's answer: edgerun's interpreter, or LiteRT's reference kernels when edgerun lacks an op."""
    from edgerun.testing import run_edgerun

    try:
        return run_edgerun(model, inputs), "edgerun"
    except EdgerunError:
        from edgerun.testing import run_litert

        return run_litert(model, inputs, reference=True), "litert-reference"


def verify_on_device(bundle_or_model, port: str, baud: int = DEFAULT_BAUD, *, flash_first: bool = True,
                     progress=None, link: SerialLink | None = None, inputs=None,
                     allow_unsigned: bool = False) -> dict:
    """Flash (when needed) and run the golden vectors on the device; compare with the host.

    Golden vectors come from the bundle; for a bare .tflite (or when ``inputs`` is given) the
    host's own outputs on those inputs are the reference. Returns a report dict with ``ok``.
    """
    data, bundle = model_bytes(bundle_or_model, allow_unsigned=allow_unsigned)
    lk, own = _open(port, baud, link)
    try:
        flashed = flash(data, port, baud, progress, link=lk) if flash_first else None
        lk.hello()
        info = model_info(lk)
        if info.sha256 != hashlib.sha256(data).hexdigest():
            raise DeployError(f"the device runs model {info.sha256[:12]}, not this one "
                              f"({hashlib.sha256(data).hexdigest()[:12]}); flash it first")
        if inputs is not None:
            cases = [(list(inputs), None)]
        elif bundle is not None and getattr(bundle, "golden", None):
            cases = [(list(i), list(o)) for i, o in bundle.golden]
        else:
            from edgerun.testing import random_inputs

            details = [{"dtype": t.dtype, "shape": t.shape} for t in info.inputs]
            cases = [(random_inputs(details, seed=s), None) for s in range(3)]
        report_cases, ok, reference = [], True, "golden"
        total_us = 0.0
        for ins, want in cases:
            got, us = run_with_link(lk, ins, info)
            total_us += us
            if want is None:
                want, reference = _host_outputs(data, ins)
            diffs = []
            for g, w in zip(got, want):
                w = np.asarray(w)
                same = g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()
                d = (int(np.max(np.abs(g.astype(np.int64) - w.astype(np.int64)))) if g.dtype.kind in "iu" and g.shape == w.shape
                     else float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) if g.shape == w.shape else None)
                diffs.append({"identical": bool(same), "max_abs_diff": d})
                ok &= same
            report_cases.append({"outputs": diffs, "device_us": us})
        host_arena = (bundle.manifest.get("arena_bytes") if bundle is not None and
                      isinstance(getattr(bundle, "manifest", None), dict) else None)
        return {"ok": bool(ok), "port": port, "model_sha256": info.sha256, "reference": reference,
                "cases": report_cases, "device_us_mean": total_us / max(len(cases), 1),
                "device_arena_bytes": info.arena_bytes, "host_arena_bytes": host_arena,
                "flash": flashed.to_dict() if flashed else None}
    finally:
        if own:
            lk.close()


def rollback(port: str, baud: int = DEFAULT_BAUD, *, link: SerialLink | None = None) -> dict:
    """Switch the device back to the model in its other slot (it must still be verified there)."""
    lk, own = _open(port, baud, link)
    try:
        lk.hello()
        slot, arena = fields("ROLLBACK", P.ACTIVE_REPLY, lk.request(P.CMD_ROLLBACK), lk.port)
        return {"port": port, "slot": slot, "arena_bytes": arena}
    finally:
        if own:
            lk.close()


def probe_device(port: str, baud: int = DEFAULT_BAUD, timeout: float = 0.5) -> dict:
    """HELLO + STATUS (+ MODEL_INFO) on one port; raises LinkError when nothing answers."""
    with SerialLink(port, baud, retries=2, ack_timeout=timeout) as lk:
        info = lk.hello().to_dict()
        st = lk.status()
        info["status"] = st.to_dict()
        info["active_model"] = st.slots[st.active_slot].sha256 if st.active_slot is not None else None
        if st.active_slot is not None:
            try:
                m = model_info(lk)
                info["model"] = {"inputs": [t.__dict__ for t in m.inputs], "outputs": [t.__dict__ for t in m.outputs],
                                 "arena_bytes": m.arena_bytes}
            except DeviceError as e:
                info["model_error"] = e.device_message
        return info


def list_devices(probe: bool = False, extra_ports: list[str] | None = None, baud: int = DEFAULT_BAUD,
                 timeout: float = 0.5) -> list[dict]:
    """Serial ports on this machine (pyserial's list_ports), optionally probed for edgerun firmware."""
    try:
        from serial.tools import list_ports
    except ImportError as e:  # pragma: no cover
        raise LinkError("listing devices needs pyserial: pip install pyserial") from e
    found = [{"port": p.device, "description": p.description if p.description != "n/a" else "",
              "hwid": p.hwid if p.hwid != "n/a" else ""} for p in sorted(list_ports.comports(), key=lambda p: p.device)]
    known = {d["port"] for d in found}
    found += [{"port": p, "description": "", "hwid": ""} for p in (extra_ports or []) if p not in known]
    if probe:
        for d in found:
            try:
                d["firmware"] = probe_device(d["port"], baud, timeout)
            except LinkError as e:
                d["firmware"] = None
                d["error"] = str(e)
    return found


def device_run_report(model_path, port: str, inputs=(), *, verify: bool = False, baud: int = DEFAULT_BAUD,
                      progress=None, allow_unsigned: bool = False) -> dict:
    """``edgerun run MODEL --device PORT [--verify]``: flash when the device runs something else,
    then run the golden vectors (``verify``) or the given .npy inputs (random ones if none) there."""
    if verify:
        report = verify_on_device(model_path, port, baud, progress=progress, allow_unsigned=allow_unsigned)
        report["verified"] = report["ok"]
        return report
    data, _ = model_bytes(model_path, allow_unsigned=allow_unsigned)
    with SerialLink(port, baud) as link:
        link.hello()
        info = None
        try:
            info = model_info(link)
        except DeviceError:
            pass
        flashed = None
        if info is None or info.sha256 != hashlib.sha256(data).hexdigest():
            flashed = flash(data, port, baud, progress, link=link).to_dict()
            info = model_info(link)
        if inputs:
            from edgerun.inputs import load_npy

            xs = [load_npy(p) for p in inputs]
        else:
            from edgerun.testing import random_inputs

            xs = random_inputs([{"dtype": t.dtype, "shape": t.shape} for t in info.inputs], seed=0)
        outs, us = run_with_link(link, xs, info)
    return {"port": port, "model_sha256": info.sha256, "device_us": us, "flash": flashed,
            "inputs": "random" if not inputs else [str(p) for p in inputs],
            "outputs": [{"shape": list(o.shape), "dtype": o.dtype.name, "values": o.tolist() if o.size <= 64 else None}
                        for o in outs]}
