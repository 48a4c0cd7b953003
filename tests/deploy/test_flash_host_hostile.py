"""The flash host against a hostile device: a small Python process on the far end of a real pty
that speaks the frame format correctly but answers with short records, impossible fields, or
acknowledgements that never make progress. Every case must end in one LinkError line, quickly,
never a loop, a struct.error or an IndexError (issue 11: "the flash host trusts the device")."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from edgerun.deploy.flash import flash, model_info, rollback
from edgerun.deploy.serial_link import SerialLink
from edgerun.errors import LinkError
from tests.support.firmware_models import mcu_small

REPO = Path(__file__).resolve().parents[2]
FAST = {"ack_timeout": 0.2, "retries": 3, "slow_timeout": 0.5}
BAUD = 2_000_000

# The fake device: answers every request from a table of hostile behaviours chosen by argv[1].
DEVICE = textwrap.dedent(r'''
    import os, struct, sys, time
    from edgerun.deploy import protocol as P

    mode, fd = sys.argv[1], int(sys.argv[2])
    parser = P.FrameParser()
    received = 0

    def hello(active=P.SLOT_NONE, nslots=P.SLOT_COUNT, maxp=1024):
        return P.HELLO.pack(P.PROTO_VERSION, 1, maxp, 0, 65536, 1 << 20, 1 << 21, active, nslots, 0, b"evil")

    def status(active=P.SLOT_NONE):
        out = P.STATUS_HEADER.pack(active)
        for _ in range(P.SLOT_COUNT):
            out += P.STATUS_SLOT.pack(P.SLOT_EMPTY, 0, 0, bytes(32))
        return out

    def answer(f):
        global received
        c = f.cmd
        if c == P.CMD_HELLO:
            if mode == "short_hello":
                return hello()[:10]
            if mode == "hello_slots":
                return hello(nslots=7)
            if mode == "hello_active":
                return hello(active=7)
            return hello()
        if c == P.CMD_STATUS:
            if mode == "status_slot7":
                return status(active=7)
            if mode == "short_status":
                return status()[:6]
            return status()
        if c == P.CMD_BEGIN:
            if mode == "error_newlines":
                return None
            if mode == "short_begin":
                return b"\x00\x00"
            if mode == "begin_slot7":
                return P.BEGIN_REPLY.pack(7, 0, 0, 0)
            if mode == "begin_received":
                return P.BEGIN_REPLY.pack(1, 1, 0, 1 << 30)
            return P.BEGIN_REPLY.pack(0, 0, 0, 0)
        if c == P.CMD_DATA:
            off, = struct.unpack_from("<I", f.payload)
            n = len(f.payload) - 4
            if mode == "ack_zero":
                return struct.pack("<I", 0)
            if mode == "ack_beyond":
                return struct.pack("<I", off + n + 1000)
            if mode == "short_data":
                return b"\x01"
            if mode == "slow_ack":
                time.sleep(0.05)
                return struct.pack("<I", off + 1)  # one byte per frame: progress, but crawling
            received = off + n
            return struct.pack("<I", received)
        if c == P.CMD_END:
            if mode == "short_end":
                return b"\x00" * 5
            return bytes.fromhex(sys.argv[3])
        if c == P.CMD_COMMIT:
            if mode == "short_commit":
                return b"\x00"
            if mode == "commit_other":
                return P.ACTIVE_REPLY.pack(1, 0)
            return P.ACTIVE_REPLY.pack(0, 4096)
        if c == P.CMD_ROLLBACK:
            return b"\x01"
        if c == P.CMD_MODEL_INFO:
            hdr = P.MODEL_INFO_HEADER.pack(1, 1, 0, 4096, 100, bytes(32))
            if mode == "info_short":
                return hdr[:20]
            rec = P.IO_RECORD.pack(P.TYPE_INT8, 4, 0, 7, 0.1, 0, 1, 1 << 20, 1 << 20, 1 << 20, 0, 0)
            return hdr + rec + rec
        return b""

    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        for f in parser.feed(data):
            a = answer(f)
            if a is None:  # an error frame whose message spans lines and holds escape codes
                msg = b"\x06\x00flash broke\nTraceback (most recent call last):\n\x1b[31mred"
                os.write(fd, P.encode(f.cmd, f.seq, msg, P.FLAG_RESPONSE | P.FLAG_ERROR))
            else:
                os.write(fd, P.encode(f.cmd, f.seq, a, P.FLAG_RESPONSE))
''')


@pytest.fixture()
def device(tmp_path):
    """Start the fake device in one mode; yields (port, model) with a port path host code opens."""
    script = tmp_path / "evil_device.py"
    script.write_text(DEVICE)
    procs = []
    model = mcu_small(3)

    def start(mode: str) -> str:
        import hashlib
        import tty

        master, slave = os.openpty()
        tty.setraw(slave)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        p = subprocess.Popen([sys.executable, str(script), mode, str(master), hashlib.sha256(model).hexdigest()],
                             pass_fds=(master,), env=env)
        os.close(master)
        procs.append((p, slave))
        return os.ttyname(slave)

    yield start, model
    for p, slave in procs:
        p.kill()
        p.wait()
        os.close(slave)


CASES = {
    "short_hello": "short HELLO answer",
    "hello_slots": "7 slots",
    "hello_active": "active slot 7",
    "status_slot7": "active slot 7",
    "short_status": "short STATUS answer",
    "short_begin": "short BEGIN answer",
    "begin_slot7": "BEGIN answered slot 7",
    "begin_received": "BEGIN answered",
    "ack_zero": "acknowledged no progress",
    "ack_beyond": "acknowledged byte",
    "short_data": "short DATA answer",
    "short_end": "short END answer",
    "short_commit": "short COMMIT answer",
    "commit_other": "answered active slot 1",
    "error_newlines": r"device refused BEGIN: flash broke\?Traceback",
}


@pytest.mark.parametrize("mode", sorted(CASES))
def test_hostile_device_ends_in_one_link_error(device, mode):
    start, model = device
    port = start(mode)
    t0 = time.monotonic()
    with pytest.raises(LinkError, match=CASES[mode]) as e:
        flash(model, port, BAUD, link_options=FAST)
    assert time.monotonic() - t0 < 20
    assert "\n" not in str(e.value)


def test_crawling_device_hits_the_time_limit(device):
    start, model = device
    port = start("slow_ack")
    t0 = time.monotonic()
    with pytest.raises(LinkError, match="longer than its 2 s limit"):
        flash(model, port, BAUD, link_options=FAST, time_limit=2.0)
    assert time.monotonic() - t0 < 10


def test_short_model_info_and_rollback_replies(device):
    start, _ = device
    port = start("info_short")
    with SerialLink(port, BAUD, **FAST) as link:
        link.hello()
        with pytest.raises(LinkError, match="short MODEL_INFO answer"):
            model_info(link)
    port = start("normal")
    with SerialLink(port, BAUD, **FAST) as link:
        link.hello()
        with pytest.raises(LinkError, match="describes"):  # 1 x 2^20 x 2^20 x 2^20 int8 in 7 bytes
            model_info(link)
    with pytest.raises(LinkError, match="short ROLLBACK answer"):
        rollback(port, BAUD)


def test_well_behaved_fake_device_flashes(device):
    """The same fake device in its honest mode: the checks do not refuse a valid exchange."""
    start, model = device
    r = flash(model, start("normal"), BAUD, link_options=FAST)
    assert r.slot == 0 and r.payload_bytes == len(model) and not r.skipped


def test_cli_flash_hostile_device_one_line(device, tmp_path):
    start, model = device
    port = start("ack_zero")
    m = tmp_path / "m.tflite"
    m.write_bytes(model)
    p = subprocess.run([sys.executable, "-m", "edgerun", "flash", str(m), "--port", port],
                       capture_output=True, check=False, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "no progress" in p.stderr
