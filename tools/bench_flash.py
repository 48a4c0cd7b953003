#!/usr/bin/env python3
"""Flashing and MCU inference benchmark (results go to docs/benchmarks.md).

1. Protocol efficiency: payload bytes / bytes on the wire (both directions) for a transfer,
   per frame size.
2. Payload rate through a relay throttled to 115200 and 921600 baud (the posix firmware on a
   pty, the flasher on another), against the raw line rate (baud / 10 bytes per second).
3. Inference time on the emulated board (QEMU mps2-an386, Cortex-M4F): device-side time from
   SysTick, per model. QEMU does not model cycle timing, so these are emulation figures.

    python tools/bench_flash.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import numpy as np

import tests.support.firmware_harness as H
import tests.support.firmware_models as FM
from edgerun.deploy.flash import flash, model_info, run_with_link
from edgerun.deploy.serial_link import SerialLink
from edgerun.ir import ModelBuilder


def fc_stack(kib: int, seed: int = 0) -> bytes:
    """A valid int8 model of about ``kib`` KiB (a chain of 256x256 fully-connected layers)."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    q = (0.05, 0)
    x = b.input("x", (1, 256), "int8", q)
    for i in range(max(1, kib // 64)):
        w = rng.integers(-127, 128, (256, 256)).astype(np.int8)
        y = b.tensor(f"y{i}", (1, 256), "int8", q)
        b.op("FULLY_CONNECTED", [x, b.const(f"w{i}", w, "int8", (0.01, 0)), -1], [y])
        x = y
    b.output(x)
    return b.to_bytes()


def efficiency(model: bytes, payloads=(256, 1024, 4096)) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        fw, url = H.tcp_firmware(Path(tmp))
        try:
            for i, mp in enumerate(payloads):
                m = fc_stack(len(model) // 1024, seed=100 + i)  # a new model each time: a real transfer
                r = flash(m, url, 10_000_000, max_payload=mp)
                rows.append({"max_payload": mp, "model_bytes": r.size, "wire_bytes": r.wire_bytes,
                             "efficiency": r.size / r.wire_bytes})
        finally:
            fw.stop()
    return rows


def raw_rate(baud: int, nbytes: int) -> float:
    """Bytes per second of unframed data pushed through the same throttled relay (the raw rate)."""
    import os
    import threading

    dev_master, dev_path = H.open_pty()
    host_master, host_path = H.open_pty()
    relay = H.Relay(dev_master, host_master, baud=baud)
    dev = os.open(dev_path, os.O_RDWR | os.O_NOCTTY)
    host = os.open(host_path, os.O_RDWR | os.O_NOCTTY)
    data = os.urandom(nbytes)
    got = 0

    def send():
        view = memoryview(data)
        while view:
            view = view[os.write(host, view[:1024]):]

    t0 = time.perf_counter()
    threading.Thread(target=send, daemon=True).start()
    deadline = t0 + 20 * nbytes / (baud / 10.0) + 5
    import select

    while got < nbytes and time.perf_counter() < deadline:
        if select.select([dev], [], [], 0.2)[0]:
            got += len(os.read(dev, 65536))
    dt = time.perf_counter() - t0
    relay.stop()
    for fd in (dev, host, dev_master, host_master):
        os.close(fd)
    return got / dt


def throttled(model_kib: int, bauds=(115200, 921600)) -> list[dict]:
    rows = []
    for baud in bauds:
        with tempfile.TemporaryDirectory() as tmp:
            rig = H.Rig(Path(tmp), baud=baud)
            try:
                m = fc_stack(model_kib, seed=baud)
                r = flash(m, rig.port, baud)
                raw = baud / 10.0
                rate = r.size / r.seconds
                measured = raw_rate(baud, r.size)
                rows.append({"baud": baud, "model_bytes": r.size, "seconds": r.seconds,
                             "payload_Bps": rate, "nominal_Bps": raw, "ratio_nominal": rate / raw,
                             "raw_measured_Bps": measured, "ratio_measured_raw": rate / measured,
                             "wire_efficiency": r.size / r.wire_bytes})
            finally:
                rig.close()
    return rows


def qemu_inference(models: dict[str, bytes], runs: int = 5, icount: bool = False) -> list[dict]:
    """Device-side inference time per model. With ``icount``, QEMU advances its virtual clock by
    1 ns per guest instruction (-icount shift=0), so device microseconds x 1000 = instructions."""
    reason = H.have_arm_toolchain()
    if reason:
        return [{"skipped": reason}]
    H.make("mps2")
    port = H.free_port()
    cmd = ["qemu-system-arm", "-M", "mps2-an386", "-display", "none", "-monitor", "none",
           "-semihosting-config", "enable=on,target=native", "-kernel", str(H.MPS2_ELF),
           "-serial", f"tcp:127.0.0.1:{port},server=on,wait=on,nodelay=on"] + (["-icount", "shift=0"] if icount else [])
    q = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"socket://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    rows = []
    from edgerun.testing import random_inputs, run_litert

    try:
        with SerialLink(url) as link:
            link.hello()
            for name, m in models.items():
                r = flash(m, url, link=link)
                info = model_info(link)
                xs = random_inputs([{"dtype": t.dtype, "shape": t.shape} for t in info.inputs], seed=0)
                times, wall = [], []
                exact = True
                for _ in range(runs):
                    t0 = time.perf_counter()
                    outs, us = run_with_link(link, xs, info)
                    wall.append(time.perf_counter() - t0)
                    times.append(us)
                want = run_litert(m, xs)
                exact = all(o.tobytes() == w.tobytes() for o, w in zip(outs, want))
                if icount:
                    rows.append({"model": name, "instructions_per_inference": int(np.median(times) * 1000),
                                 "bit_exact_vs_litert": all(o.tobytes() == w.tobytes() for o, w in zip(outs, want))})
                    continue
                rows.append({"model": name, "model_bytes": len(m), "arena_bytes": info.arena_bytes,
                             "flash_seconds": r.seconds, "flash_Bps": len(m) / r.seconds,
                             "device_ms_median": float(np.median(times)) / 1000.0,
                             "round_trip_ms_median": float(np.median(wall)) * 1000.0,
                             "bit_exact_vs_litert": exact})
            link.request(0x0D, b"\0")
    finally:
        try:
            q.wait(5)
        except subprocess.TimeoutExpired:
            q.kill()
    return rows


def digits_model() -> bytes | None:
    try:
        from edgerun.convert import convert

        out = Path(tempfile.mkdtemp()) / "digits_int8.tflite"
        convert(ROOT / "models" / "digits_cnn.onnx", out, calib=str(ROOT / "models" / "calib_digits.npz"), target="mcu")
        return out.read_bytes()
    except Exception as e:  # noqa: BLE001 - the converter is optional for this benchmark
        print(f"digits_cnn not converted: {e}", file=sys.stderr)
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller transfers")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    H.make("posix")
    res = {"machine": f"{platform.node()} {platform.machine()} {platform.processor() or ''}".strip(),
           "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    res["efficiency"] = efficiency(fc_stack(64))
    res["throttled"] = throttled(32 if args.quick else 64)
    models = {"mcu_small (shipped)": (ROOT / "models" / "mcu_small.tflite").read_bytes()}
    d = digits_model()
    if d:
        models["digits_cnn (converted int8)"] = d
    ops = FM.op_models(0)
    for n in ("conv_same_s2_relu6", "dw_same_s1", "fc_per_channel", "softmax_beta1.0"):
        models[n] = ops[n]
    res["qemu"] = qemu_inference(models)
    res["qemu_icount"] = qemu_inference(models, runs=3, icount=True)
    print(json.dumps(res, indent=2))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
