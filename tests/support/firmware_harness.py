"""Test and benchmark harness for the firmware: build it, run the posix build on a pseudo-terminal,
and put a relay between two ptys that can drop, duplicate, corrupt and cut bytes, or throttle
them to a baud rate. Used by tests/firmware/test_firmware_*.py, tests/deploy/test_flash_*.py and
tools/bench_flash.py."""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import subprocess
import threading
import time
import tty
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRMWARE = ROOT / "firmware"
POSIX_FW = FIRMWARE / "build" / "posix" / "edgerun-fw"
MPS2_ELF = FIRMWARE / "build" / "mps2-an386" / "edgerun-fw.elf"
_build_lock = threading.Lock()


def make(target: str) -> subprocess.CompletedProcess:
    """Build a firmware target; a file lock keeps parallel test processes (xdist) from racing."""
    import fcntl

    (FIRMWARE / "build").mkdir(exist_ok=True)
    with _build_lock, open(FIRMWARE / "build" / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(["make", "-s", "-C", str(FIRMWARE), target], capture_output=True, text=True, check=False)
        if r.returncode:
            raise RuntimeError(f"make {target} failed:\n{r.stdout}\n{r.stderr}")
        return r


def have_arm_toolchain() -> str | None:
    """None when the mps2 build and QEMU can run here, else the reason."""
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (tools/install.sh installs it)"
    return None


def open_pty() -> tuple[int, str]:
    """A raw pty: (master fd, slave path). The slave is set raw before anyone opens it."""
    master, slave = os.openpty()
    tty.setraw(slave)
    path = os.ttyname(slave)
    os.close(slave)
    return master, path


class Firmware:
    """The posix firmware on a pty (or TCP port); flash lives in a file that survives restarts."""

    def __init__(self, flash_path: Path, uart: str | None = None, tcp: int | None = None):
        self.flash_path, self.uart, self.tcp = Path(flash_path), uart, tcp
        self.proc: subprocess.Popen | None = None
        self.log = b""

    def start(self) -> Firmware:
        make("posix")
        args = [str(POSIX_FW), "--flash", str(self.flash_path)]
        args += ["--uart", self.uart] if self.uart else ["--tcp", str(self.tcp)]
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1", UBSAN_OPTIONS="halt_on_error=1")
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait for "ready"
            line = self.proc.stderr.readline()
            self.log += line
            if b"ready" in line or b"listening" in line or not line:
                break
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _drain(self):
        proc = self.proc
        for line in proc.stderr:
            self.log += line

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Power cut: SIGKILL, no chance to finish a flash write cleanly."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None


class Relay:
    """Copies bytes between two pty masters (device side, host side) in a thread.

    Faults (when ``fault_rate`` > 0, per chunk read, each direction): drop a byte or a burst,
    duplicate a chunk, flip bits, or cut the line for a while (everything dropped both ways).
    ``baud`` > 0 throttles each direction to baud/10 bytes per second. ``faults`` counts them.
    """

    def __init__(self, dev_master: int, host_master: int, *, fault_rate: float = 0.0, seed: int = 0,
                 baud: int = 0, cut_s: tuple[float, float] = (0.2, 0.6)):
        self.dev, self.host = dev_master, host_master
        self.fault_rate, self.baud, self.cut_s = fault_rate, baud, cut_s
        self.rng = random.Random(seed)
        self.faults = {"drop": 0, "dup": 0, "corrupt": 0, "cut": 0}
        self.bytes = {"to_dev": 0, "to_host": 0}
        self.cut_until = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    @property
    def total_faults(self) -> int:
        return sum(self.faults.values())

    def stop(self):
        self._stop.set()
        self._t.join(2)

    def _mangle(self, data: bytes) -> bytes:
        if not self.fault_rate or self.rng.random() >= self.fault_rate:
            return data
        kind = self.rng.choices(["drop", "dup", "corrupt", "cut"], weights=[4, 2, 4, 1])[0]
        self.faults[kind] += 1
        b = bytearray(data)
        if kind == "drop":
            i = self.rng.randrange(len(b))
            del b[i:i + self.rng.choice([1, 1, 3, 17])]
        elif kind == "dup":
            i = self.rng.randrange(len(b))
            b[i:i] = b[i:i + self.rng.choice([1, 8, 64])]
        elif kind == "corrupt":
            for _ in range(self.rng.choice([1, 1, 2, 5])):
                b[self.rng.randrange(len(b))] ^= 1 << self.rng.randrange(8)
        else:
            self.cut_until = time.monotonic() + self.rng.uniform(*self.cut_s)
            return b""
        return bytes(b)

    def _write(self, fd: int, data: bytes) -> None:
        while data:
            try:
                n = os.write(fd, data)
            except BlockingIOError:
                time.sleep(0.001)
                continue
            except OSError:
                return
            data = data[n:]

    def _run(self):
        # token bucket per direction: baud/10 bytes per second, at most 2 ms of burst
        rate = self.baud / 10.0
        cap = max(16.0, rate * 0.002)
        budget = {self.dev: 0.0, self.host: 0.0}
        last = time.monotonic()
        while not self._stop.is_set():
            try:
                r, _, _ = select.select([self.dev, self.host], [], [], 0.05)
            except (OSError, ValueError):
                return
            if self.baud:
                now = time.monotonic()
                for fd, have in budget.items():
                    budget[fd] = min(have + (now - last) * rate, cap)
                last = now
            for fd in r:
                want = 4096
                if self.baud:
                    if budget[fd] < 1:
                        time.sleep((1 - budget[fd]) / rate)
                        continue
                    want = int(budget[fd])
                try:
                    data = os.read(fd, want)
                except OSError:
                    time.sleep(0.01)  # the other end is not open right now
                    continue
                if not data:
                    continue
                if self.baud:
                    budget[fd] -= len(data)
                dst = self.host if fd == self.dev else self.dev
                self.bytes["to_host" if fd == self.dev else "to_dev"] += len(data)
                if time.monotonic() < self.cut_until:
                    continue
                data = self._mangle(data)
                if data:
                    self._write(dst, data)


class Rig:
    """firmware <-pty A-> relay <-pty B-> host (the flasher opens ``self.port``)."""

    def __init__(self, tmp: Path, **relay_kw):
        self.dev_master, dev_path = open_pty()
        self.host_master, self.port = open_pty()
        self.fw = Firmware(Path(tmp) / "flash.bin", uart=dev_path)
        self.dev_path = dev_path
        self.relay = Relay(self.dev_master, self.host_master, **relay_kw)
        self.fw.start()

    def restart_firmware(self):
        self.fw.kill()
        self.fw = Firmware(self.fw.flash_path, uart=self.dev_path).start()

    def close(self):
        self.relay.stop()
        self.fw.stop()
        for fd in (self.dev_master, self.host_master):
            try:
                os.close(fd)
            except OSError:
                pass


def free_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_listening(proc: subprocess.Popen, port: int, seconds: float = 20.0) -> None:
    """Wait until something accepts on 127.0.0.1:``port`` (QEMU listens before the guest starts,
    ``wait=on``); fails with the process's stderr if it exits first."""
    import socket

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.05)


def qemu_command(elf, port: int, machine: str = "mps2-an386", icount: bool = False) -> list[str]:
    """QEMU running ``elf`` on ``machine`` with its UART on 127.0.0.1:``port`` (the guest waits for
    the connection); ``icount``: -icount shift=0, one guest instruction per virtual nanosecond."""
    return ["qemu-system-arm", "-M", machine, "-display", "none", "-monitor", "none",
            *(["-icount", "shift=0"] if icount else []), "-semihosting-config", "enable=on,target=native",
            "-kernel", str(elf), "-serial", f"tcp:127.0.0.1:{port},server=on,wait=on,nodelay=on"]


def qemu_board(machine: str = "mps2-an386", *, icount: bool = False,
               stdout=subprocess.PIPE) -> tuple[subprocess.Popen, str]:
    """The firmware built for QEMU's ``machine`` and started there; returns (QEMU process, pyserial
    URL of its UART) once QEMU listens. The caller kills the process."""
    make("mps2" if machine == "mps2-an386" else machine)
    port = free_port()
    q = subprocess.Popen(qemu_command(FIRMWARE / "build" / machine / "edgerun-fw.elf", port, machine, icount),
                         stdout=stdout, stderr=subprocess.PIPE)
    try:
        wait_listening(q, port)
    except BaseException:
        q.kill()
        q.wait()
        raise
    return q, f"socket://127.0.0.1:{port}"


def tcp_firmware(tmp: Path) -> tuple[Firmware, str]:
    """The posix firmware serving one TCP connection at a time; returns (firmware, pyserial URL)."""
    port = free_port()
    fw = Firmware(Path(tmp) / "flash.bin", tcp=port).start()
    return fw, f"socket://127.0.0.1:{port}"


def sanitized_device(tmp_path_factory):
    """Fixture body: the posix firmware (ASan/UBSan build) on TCP and a SerialLink that said hello;
    at teardown the firmware's log must hold no sanitizer report. Use as
    ``device = pytest.fixture(scope="module", name="device")(sanitized_device)``."""
    from edgerun.deploy.serial_link import SerialLink

    fw, url = tcp_firmware(tmp_path_factory.mktemp("fw"))
    link = SerialLink(url)
    link.hello()
    yield link
    link.close()
    fw.stop()
    assert b"ERROR: AddressSanitizer" not in fw.log and b"runtime error" not in fw.log, fw.log.decode()[-3000:]


def raw_flash(link, model: bytes) -> tuple[int, int]:
    """BEGIN / DATA / END / COMMIT straight over ``link``, with no host-side check in between, so
    a test reaches the firmware's own COMMIT-time validation. Returns (active slot, arena bytes);
    a refusal raises the firmware's DeviceError."""
    import hashlib

    from edgerun.deploy import protocol as P

    digest = hashlib.sha256(model).digest()
    reply = link.request(P.CMD_BEGIN, P.BEGIN.pack(len(model), digest, P.SLOT_NONE))
    slot, _resumed, _, received = P.BEGIN_REPLY.unpack_from(reply)
    step = max(64, link.max_payload - P.DATA_HEADER_SIZE)
    for off in range(received, len(model), step):
        link.request(P.CMD_DATA, P.DATA_HEADER.pack(off) + model[off:off + step])
    link.request(P.CMD_END, digest)
    reply = link.request(P.CMD_COMMIT, P.COMMIT.pack(slot, digest))
    return P.ACTIVE_REPLY.unpack_from(reply)


def eembc_results_line(model: bytes, x) -> str:
    """The EEMBC mode's m-results line for ``model`` on input ``x`` as the firmware prints it:
    (double)scale * (q - zp) of the host interpreter's output, 6 decimals, half up."""
    import math

    import numpy as np

    from edgerun.runtime.interpreter import Interpreter
    from edgerun.testing import run_edgerun

    q = run_edgerun(model, [x])[0].ravel()
    d = Interpreter(model_content=model).get_output_details()[0]
    scale, zp = d["quantization"]
    parts = []
    for v in (float(np.float32(scale)) * (int(a) - zp) for a in q):
        u = math.floor(abs(v) * 1e6 + 0.5)
        parts.append(f"{'-' if v < 0 else ''}{u // 1000000}.{u % 1000000:06d}")
    return "m-results-[" + ",".join(parts) + "]"


def converted_digits(tmp_path: Path, name: str, **options) -> bytes:
    """models/digits_cnn.onnx through edgerun's converter (calibrated on models/calib_digits.npz)
    with ``options``; the test is skipped where the converter cannot produce it here."""
    import pytest

    from edgerun.errors import EdgerunError

    convert = pytest.importorskip("edgerun.convert").convert
    out = tmp_path / name
    try:
        convert(ROOT / "models" / "digits_cnn.onnx", out, calib=str(ROOT / "models" / "calib_digits.npz"),
                **options)
    except EdgerunError as e:
        pytest.skip(f"converter cannot produce the model here: {e}")
    return out.read_bytes()


def flash_as_predicted(link, model: bytes, board: str = "mps2-an386"):
    """Flash ``model`` over the open ``link`` after `check --target mcu:BOARD`'s prediction accepted
    it; the arena COMMIT reports must equal the predicted one. Returns (MODEL_INFO, LiteRT's input
    details)."""
    from edgerun_delegates.mcu.firmware import firmware_accepts, firmware_arena_bytes

    from edgerun.deploy.flash import flash, model_info
    from edgerun.litert import make_interpreter

    assert firmware_accepts(model, board) == []
    flash(model, link.port, link=link)
    info = model_info(link)
    assert info.arena_bytes == firmware_arena_bytes(model)
    return info, make_interpreter(model, reference=True).get_input_details()
