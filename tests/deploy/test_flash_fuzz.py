"""Fuzz the posix firmware's frame parser and command handlers (ASan/UBSan build): thousands of
random byte blobs, random frames with good CRCs, and mutated copies of real requests (bit flips,
truncations, length and offset changes, CRC fixed up so they reach the handlers). Afterwards
the firmware must be alive and answering, its active model untouched in flash and still
bit-exact. The posix port aborts on any flash access outside the region, and ASan on any
memory access outside an object, so "alive" also means it never wrote outside its slots."""

import hashlib
import random
import socket
import struct
import threading
import time

import numpy as np

from edgerun.deploy import protocol as P
from edgerun.deploy.flash import flash, model_info, run_with_link
from edgerun.deploy.serial_link import SerialLink
from edgerun.testing import run_litert
from tests.support.firmware_harness import raw_flash, tcp_firmware
from tests.support.firmware_models import mcu_small

N_FRAMES = 6000
#: every command except EXIT (which ends the firmware on purpose)
COMMANDS = [c for c in P.COMMAND_NAMES if c != P.CMD_EXIT]


def _requests(model: bytes) -> list[bytes]:
    """Payloads of real requests, to mutate."""
    sha = hashlib.sha256(model).digest()
    return [P.BEGIN.pack(len(model), sha, P.SLOT_NONE), P.BEGIN.pack(len(model), sha, 1),
            P.DATA_HEADER.pack(0) + model[:200], P.DATA_HEADER.pack(4096) + model[4096:4300], sha,
            P.COMMIT.pack(1, sha), P.IO_HEADER.pack(0, 0) + bytes(100), P.GET_OUTPUT.pack(0, 0, 10),
            P.GET_OUTPUT.pack(0, 5, 6), b""]


def _mutate(rng: random.Random, payload: bytes) -> bytes:
    b = bytearray(payload)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        if op == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            del b[rng.randrange(len(b)):]
        elif op == 2:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        elif op == 3 and len(b) >= 4:  # a hostile 32-bit field: offset, size, index
            i = rng.randrange(len(b) - 3)
            struct.pack_into("<I", b, i, rng.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 4095, 4096,
                                                     1 << 20, (1 << 20) + 1, rng.getrandbits(32)]))
        elif op == 4 and b:
            b[0] = rng.choice([0, 1, 2, 7, 8, 0xFF, rng.randrange(256)])
    return bytes(b)


def test_fuzz_frames_never_crash_or_touch_the_active_model(tmp_path):
    fw, url = tcp_firmware(tmp_path)
    model = mcu_small()
    sha = hashlib.sha256(model).hexdigest()
    try:
        flash(model, url)
        rng = random.Random(2024)
        port = int(url.rsplit(":", 1)[1])
        sock = socket.create_connection(("127.0.0.1", port))
        received = bytearray()
        stop = threading.Event()

        def drain():
            sock.settimeout(0.1)
            while not stop.is_set():
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                received.extend(data)

        t = threading.Thread(target=drain, daemon=True)
        t.start()
        seeds = _requests(model)
        sent = 0
        for i in range(N_FRAMES):
            kind = rng.random()
            if kind < 0.15:  # raw noise, sometimes with SOF bytes sprinkled in
                blob = bytes(rng.choice([0xA5, 0x5A, rng.randrange(256)]) for _ in range(rng.randint(1, 300)))
            elif kind < 0.45:  # a good frame with a random command and payload
                blob = P.encode(rng.choice(COMMANDS + [rng.randrange(256)]) if rng.random() < 0.9 else 0x55,
                                rng.getrandbits(16), bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 80))))
                if blob[2] == P.CMD_EXIT:
                    continue
            else:  # a mutated real request, CRC made good so it reaches the handler
                cmd = rng.choice([P.CMD_BEGIN, P.CMD_DATA, P.CMD_END, P.CMD_COMMIT, P.CMD_SET_INPUT,
                                  P.CMD_GET_OUTPUT, P.CMD_ROLLBACK, P.CMD_INVOKE, P.CMD_MODEL_INFO, P.CMD_STATUS])
                blob = P.encode(cmd, rng.getrandbits(16), _mutate(rng, rng.choice(seeds)),
                                flags=rng.choice([0, 0, 0, P.FLAG_RESPONSE, 0xFF]))
                if rng.random() < 0.1:  # and sometimes a broken header on top
                    b = bytearray(blob)
                    b[rng.randrange(2, 8)] ^= 1 << rng.randrange(8)
                    blob = bytes(b)
            sock.sendall(blob)
            sent += 1
            if i % 500 == 0:
                time.sleep(0.02)
        time.sleep(0.5)
        stop.set()
        sock.close()
        t.join(2)
        assert fw.alive(), fw.log.decode()[-3000:]
        answers = P.FrameParser().feed(bytes(received))
        # most good frames got an answer, and many reached a handler and were refused there
        assert len(answers) >= 2000, len(answers)
        codes = {int.from_bytes(a.payload[:2], "little") for a in answers if a.is_error}
        assert {P.ERR_BAD_LENGTH, P.ERR_UNKNOWN_CMD, P.ERR_BAD_INPUT} <= codes, codes
        # the device still answers, with the same active model, bit-exact
        with SerialLink(url, ack_timeout=1.0) as link:
            link.hello()
            st = link.status()
            assert st.active_slot is not None
            assert st.slots[st.active_slot].sha256 == sha
            info = model_info(link)
            x = np.random.default_rng(5).integers(-128, 128, (1, 16, 16, 3)).astype(np.int8)
            got, _ = run_with_link(link, [x], info)
        assert got[0].tobytes() == run_litert(model, [x])[0].tobytes()
        # the active slot's bytes in flash are the model, unchanged
        from edgerun.targets import BOARDS

        flash_bytes = (tmp_path / "flash.bin").read_bytes()
        slot_off = 2 * 4096 + st.active_slot * BOARDS["mps2-an386"].flash_bytes
        assert flash_bytes[slot_off:slot_off + len(model)] == model
        assert sent >= 5000
    finally:
        fw.stop()
    assert b"AddressSanitizer" not in fw.log and b"runtime error" not in fw.log, fw.log.decode()[-3000:]


def test_mutated_models_are_refused_or_run_never_crash(tmp_path):
    """Hostile models: valid small models with bytes flipped (offsets, lengths, shapes, types,
    op codes, quantization) are flashed and, when the device accepts them, invoked. The device
    must refuse them at COMMIT with an error or run them within bounds; ASan/UBSan watch."""
    from edgerun.deploy.serial_link import DeviceError
    from edgerun.errors import ModelFormatError
    from tests.support.firmware_models import op_models

    fw, url = tcp_firmware(tmp_path)
    rng = random.Random(77)
    bases = list(op_models(5).values())
    accepted = refused = 0
    try:
        with SerialLink(url, ack_timeout=2.0) as link:
            link.hello()
            for i in range(400):
                m = bytearray(rng.choice(bases))
                for _ in range(rng.randint(1, 6)):
                    pos = rng.randrange(len(m))
                    m[pos] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256), m[pos] ^ (1 << rng.randrange(8))])
                try:  # raw frames: the host's own pre-check would stop most of these before the device
                    raw_flash(link, bytes(m))
                except (DeviceError, ModelFormatError):  # refused by the device (or the host)
                    refused += 1
                    continue
                accepted += 1
                info = model_info(link)
                xs = [np.random.default_rng(i).integers(-128, 128, size=t.shape).astype(t.dtype)
                      if t.dtype != "float32" else np.random.default_rng(i).standard_normal(t.shape).astype(np.float32)
                      for t in info.inputs]
                try:
                    run_with_link(link, xs, info)
                except DeviceError:
                    pass
        assert fw.alive(), fw.log.decode()[-3000:]
        assert refused > 50 and accepted > 20, (accepted, refused)
    finally:
        fw.stop()
    assert b"AddressSanitizer" not in fw.log and b"runtime error" not in fw.log, fw.log.decode()[-3000:]
