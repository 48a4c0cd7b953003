"""Benchmark the model on an edgerun microcontroller board over its serial link.

Latency per inference is the firmware's own timer (``port_micros``: SysTick on the Cortex-M ports,
``CLOCK_MONOTONIC`` on posix), not the host's view of the link; under QEMU with ``-icount shift=0``
the same figure reads instructions / 1000, deterministically. ``profile`` pages through the
firmware's PROFILE command (one extra inference per page of ops) for each op's time.
"""

from __future__ import annotations

import time

import numpy as np

from edgerun.bench.scenarios import Run
from edgerun.deploy import protocol as P
from edgerun.errors import UsageError


def _inputs(info, seed: int) -> list[np.ndarray]:
    from edgerun.testing import random_inputs

    return random_inputs([{"dtype": t.dtype, "shape": list(t.shape)} for t in info.inputs], seed=seed)


def _set_inputs(link, info, xs) -> None:
    chunk = link.max_payload - P.IO_HEADER_SIZE
    for i, x in enumerate(xs):
        raw = np.ascontiguousarray(x).astype(x.dtype.newbyteorder("<"), copy=False).tobytes()
        for off in range(0, len(raw), chunk):
            link.request(P.CMD_SET_INPUT, P.IO_HEADER.pack(i, off) + raw[off:off + chunk])


def device_profile(link) -> list[dict]:
    """Per-op microseconds of one inference each page, from the firmware's PROFILE command."""
    from edgerun.deploy.serial_link import BadReply
    from edgerun.schema.tflite import BUILTIN_OPERATOR_NAMES

    ops: list[dict] = []
    first, n_ops = 0, None
    while n_ops is None or first < n_ops:
        p = link.request(P.CMD_PROFILE, P.PROFILE.pack(first))
        if len(p) < P.PROFILE_HEADER_SIZE:
            raise BadReply(f"{link.port}: short PROFILE answer ({len(p)} bytes)")
        _us, n, got_first, count = P.PROFILE_HEADER.unpack_from(p)
        if got_first != first or (n_ops is not None and n != n_ops) or first + count > n \
                or len(p) != P.PROFILE_HEADER_SIZE + count * P.PROFILE_RECORD_SIZE or (count == 0 and first < n):
            raise BadReply(f"{link.port}: PROFILE answer for ops {got_first}+{count} of {n} does not fit "
                           f"the request (op {first})")
        n_ops = n
        for i in range(count):
            op, us = P.PROFILE_RECORD.unpack_from(p, P.PROFILE_HEADER_SIZE + i * P.PROFILE_RECORD_SIZE)
            ops.append({"index": first + i, "op": BUILTIN_OPERATOR_NAMES.get(op, f"OP_{op}"), "us": us})
        first += count
    return ops


def by_op_type(ops: list[dict]) -> list[dict]:
    """Per op type: total microseconds, op count and share, largest first."""
    tot: dict[str, list] = {}
    for o in ops:
        t = tot.setdefault(o["op"], [0, 0])
        t[0] += o["us"]
        t[1] += 1
    s = sum(v[0] for v in tot.values()) or 1
    return [{"op": k, "us": v[0], "count": v[1], "share": v[0] / s}
            for k, v in sorted(tot.items(), key=lambda kv: -kv[1][0])]


def bench_device(model, port: str, *, runs: int = 50, warmup: int = 2, profile: bool = False,
                 baud: int | None = None, seed: int = 0, allow_unsigned: bool = False, link=None,
                 link_options: dict | None = None) -> dict:
    """Flash ``model`` (skipped when the board already holds it; None: bench the active model),
    then time ``runs`` INVOKEs on the board. Returns a report in :func:`edgerun.bench.benchmark`'s
    shape (``engines -> {"mcu:BOARD": engine_result}``) plus ``device`` (arena and flash use) and,
    with ``profile``, per-op and per-op-type microseconds."""
    from edgerun.bench import engine_result
    from edgerun.deploy.flash import _open, flash, model_info
    from edgerun.deploy.serial_link import DEFAULT_BAUD

    if runs < 1 or warmup < 0:
        raise UsageError(f"--runs must be at least 1 and --warmup 0 or more, not {runs} / {warmup}")
    baud = baud or DEFAULT_BAUD
    lk, own = _open(port, baud, link, link_options)
    try:
        hello = lk.hello()
        flashed = None
        if model is not None:
            res = flash(model, port, baud, link=lk, allow_unsigned=allow_unsigned)
            flashed = res.to_dict()
        info = model_info(lk)
        _set_inputs(lk, info, _inputs(info, seed))
        for _ in range(warmup):
            lk.request(P.CMD_INVOKE)
        run = Run(driver="edgerun-firmware")
        run.t0 = time.perf_counter()
        for _ in range(runs):
            start = time.perf_counter()
            us, _ms = P.INVOKE_REPLY.unpack_from(lk.request(P.CMD_INVOKE))
            run.starts.append(start)
            run.latencies.append(us * 1e-6)
        run.t1 = time.perf_counter()
        run.samples = runs
        name = f"mcu:{hello.board}"
        eng = engine_result(run, kernel_path=f"edgerun firmware {hello.fw_version} int8 kernels on {hello.board}",
                            origin=run.t0)
        # throughput on the device's own clock (the link's round trips are not the board's cost)
        dev_s = sum(run.latencies)
        eng["throughput_ips"] = runs / dev_s if dev_s > 0 else None
        eng["host_wall_s"] = eng.pop("duration_s")
        eng["arena_bytes"] = info.arena_bytes
        report = {
            "engines": {name: eng},
            "device": {"port": port, "board": hello.board, "firmware": hello.fw_version,
                       "timer": "firmware port_micros per INVOKE (SysTick on Cortex-M; instructions/1000 "
                                "under QEMU -icount shift=0)",
                       "arena_bytes": info.arena_bytes, "arena_capacity_bytes": hello.arena_bytes,
                       "flash_bytes": info.size, "slot_bytes": hello.slot_bytes,
                       "flash_capacity_bytes": hello.flash_bytes, "model_sha256": info.sha256},
            "warnings": [],
        }
        if flashed is not None:
            report["flash"] = flashed
        if profile:
            ops = device_profile(lk)
            report["profile"] = {"ops": ops, "by_type": by_op_type(ops), "total_us": sum(o["us"] for o in ops)}
        return report
    finally:
        if own:
            lk.close()


class EembcLink:
    """The board's MLPerf Tiny / EEMBC text mode over an open :class:`SerialLink` (entered with
    the EEMBC frame, left with ``edgerun%``)."""

    def __init__(self, link, timeout: float = 120.0):
        self.link, self.timeout, self.buf = link, timeout, b""

    def _lines_until(self, done) -> list[str]:
        from edgerun.deploy.serial_link import printable
        from edgerun.errors import LinkError

        lines: list[str] = []
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = printable(line.decode("utf-8", "replace").strip(), 100_000)
                if text:
                    lines.append(text)
                    if done(lines):
                        return lines
            if time.monotonic() > deadline:
                raise LinkError(f"{self.link.port}: no m-ready from the board in MLPerf Tiny mode "
                                f"(last lines: {lines[-3:]})")
            self.buf += self.link._read_some()
            if len(self.buf) > 1 << 22:
                raise LinkError(f"{self.link.port}: the board sent 4 MiB without a line end")

    def command(self, cmd: str) -> list[str]:
        """Send ``cmd%``; the lines up to ``m-ready``. An ``e-[...]`` line raises DeviceError."""
        from edgerun.deploy.serial_link import DeviceError

        self.link._write(cmd.encode() + b"%")
        lines = self._lines_until(lambda ls: ls[-1] == "m-ready")[:-1]
        errs = [x for x in lines if x.startswith("e-[")]
        if errs:
            raise DeviceError(f"MLPerf Tiny '{cmd[:40]}'", -1, errs[0][3:-1])
        return lines

    def enter(self, energy: bool = False, baud: int | None = None) -> str:
        """Switch the board to the text mode: performance (m-lap-us stamps) or ``energy`` (stamps
        are pulses on its timestamp line, for an energy monitor), at ``baud`` when given (the
        runner's energy mode talks at the DUT's energy rate, 9600 for the reference boards; the
        link follows once the board has acknowledged). Returns the DUT name."""
        import struct

        if energy or baud:
            self.link.request(P.CMD_EEMBC, struct.pack("<B3xI", P.EEMBC_ENERGY if energy else P.EEMBC_PERFORMANCE,
                                                       baud or 0))
        else:
            self.link.request(P.CMD_EEMBC)
        self.entry_baud = getattr(self.link.ser, "baudrate", None)
        if baud and self.entry_baud is not None:
            self.link.ser.baudrate = baud
        # the greeting may have been read (and dropped) with the frame: synchronise on name%
        self.link._write(b"name%")
        lines = self._lines_until(lambda ls: ls[-1] == "m-ready" and any(x.startswith("m-name-dut-[") for x in ls))
        return next(x for x in lines if x.startswith("m-name-dut-["))[len("m-name-dut-["):-1]

    def leave(self) -> None:
        """``edgerun%``: the board answers m-mode-edgerun and returns to the rate the mode was
        entered at; so does the link."""
        self.link._write(b"edgerun%")
        self._lines_until(lambda ls: ls[-1] == "m-mode-edgerun")
        entry = getattr(self, "entry_baud", None)
        if entry is not None and getattr(self.link.ser, "baudrate", entry) != entry:
            self.link.ser.baudrate = entry

    def load(self, raw: bytes, chunk: int = 256) -> None:
        self.command(f"db load {len(raw)}")
        lines: list[str] = []
        for off in range(0, len(raw), chunk):
            lines = self.command("db " + raw[off:off + chunk].hex())
        if "m-load-done" not in lines:
            from edgerun.deploy.serial_link import BadReply

            raise BadReply(f"{self.link.port}: no m-load-done after {len(raw)} bytes")

    def infer(self, n: int, warmup: int) -> tuple[float, list[float]]:
        """(microseconds per inference from the two m-lap-us stamps, output 0 from m-results)."""
        from edgerun.deploy.serial_link import BadReply

        lines = self.command(f"infer {n} {warmup}")
        laps = [x[len("m-lap-us-"):] for x in lines if x.startswith("m-lap-us-")]
        res = [x for x in lines if x.startswith("m-results-[")]
        if len(laps) != 2 or len(res) != 1 or not all(x.isascii() and x.isdigit() and len(x) <= 20 for x in laps):
            raise BadReply(f"{self.link.port}: infer answered {lines[:6]}")
        return ((int(laps[1]) - int(laps[0])) & 0xFFFFFFFF) / n, parse_results(res[0])


def parse_results(line: str) -> list[float]:
    from edgerun.deploy.serial_link import BadReply

    if not (line.startswith("m-results-[") and line.endswith("]")):
        raise BadReply(f"not an m-results line: {line[:60]}")
    try:
        vals = [float(x) for x in line[len("m-results-["):-1].split(",") if x.strip()]
    except ValueError:
        raise BadReply(f"m-results holds something other than numbers: {line[:60]}") from None
    return vals


def _dequantized(model: bytes, x: np.ndarray) -> np.ndarray:
    from edgerun.deploy.flash import _host_outputs
    from edgerun.runtime.interpreter import Interpreter

    out = _host_outputs(model, [x])[0][0]
    d = Interpreter(model_content=model).get_output_details()[0]
    scale, zp = d["quantization"]
    if out.dtype in (np.int8, np.uint8, np.int16) and scale:
        return (out.astype(np.float64) - zp) * scale
    return out.astype(np.float64)


def bench_mlperf_tiny(model, port: str, *, runs: int = 10, warmup: int = 1, repeats: int = 5, samples: int = 5,
                      baud: int | None = None, seed: int = 0, allow_unsigned: bool = False, link=None,
                      link_options: dict | None = None) -> dict:
    """Drive the board as the MLPerf Tiny runner does, in its EEMBC device-under-test mode:
    performance (``repeats`` x ``infer runs warmup``, median latency from the m-lap-us stamps) and
    accuracy (``samples`` seeded inputs loaded with db load / db, each m-results against edgerun's
    host interpreter: top-1 agreement and the largest difference)."""
    from edgerun.bench import engine_result
    from edgerun.deploy.flash import _open, flash, model_bytes, model_info
    from edgerun.deploy.serial_link import DEFAULT_BAUD

    if runs < 1 or repeats < 1 or samples < 0 or warmup < 0:
        raise UsageError("--runs and repeats must be at least 1")
    baud = baud or DEFAULT_BAUD
    data = None
    if model is not None:
        data, _ = model_bytes(model, allow_unsigned=allow_unsigned)
    lk, own = _open(port, baud, link, link_options)
    try:
        hello = lk.hello()
        if data is not None:
            flash(data, port, baud, link=lk)
        info = model_info(lk)
        ee = EembcLink(lk)
        dut = ee.enter()
        try:
            prof = ee.command("profile")
            x = _inputs(info, seed)[0]
            ee.load(np.ascontiguousarray(x).tobytes())
            run = Run(driver="mlperf-tiny-eembc")
            run.t0 = time.perf_counter()
            for _ in range(repeats):
                run.starts.append(time.perf_counter())
                us, _res = ee.infer(runs, warmup)
                run.latencies.append(us * 1e-6)
            run.t1 = time.perf_counter()
            run.samples = runs * repeats
            acc = {"samples": samples, "top1_agree": 0, "max_abs_diff": 0.0}
            if samples and data is not None:
                for k in range(samples):
                    xs = _inputs(info, seed + 1 + k)[0]
                    ee.load(np.ascontiguousarray(xs).tobytes())
                    _us, res = ee.infer(1, 0)
                    again = parse_results(next(x for x in ee.command("results") if x.startswith("m-results-[")))
                    host = _dequantized(data, xs).ravel()
                    dev = np.array(res)
                    if again != res or dev.shape != host.shape:
                        acc.setdefault("mismatched_results", 0)
                        acc["mismatched_results"] += 1
                        continue
                    acc["top1_agree"] += int(np.argmax(dev) == np.argmax(host))
                    acc["max_abs_diff"] = max(acc["max_abs_diff"], float(np.max(np.abs(dev - host))))
        finally:
            ee.leave()
        name = f"mcu:{hello.board}"
        eng = engine_result(run, kernel_path=f"edgerun firmware {hello.fw_version} via the EEMBC DUT UART mode",
                            origin=run.t0)
        med = float(np.median(run.latencies))
        eng["throughput_ips"] = 1.0 / med if med > 0 else None
        eng["host_wall_s"] = eng.pop("duration_s")
        eng["arena_bytes"] = info.arena_bytes
        return {
            "engines": {name: eng},
            "device": {"port": port, "board": hello.board, "firmware": hello.fw_version, "dut_name": dut,
                       "profile": prof, "timer": "m-lap-us stamps around infer N W (firmware port_micros)",
                       "arena_bytes": info.arena_bytes, "arena_capacity_bytes": hello.arena_bytes,
                       "flash_bytes": info.size, "slot_bytes": hello.slot_bytes,
                       "flash_capacity_bytes": hello.flash_bytes, "model_sha256": info.sha256},
            "mlperf_tiny": {"performance": {"median_us_per_inference": med * 1e6, "repeats": repeats,
                                            "inferences_per_repeat": runs, "warmup": warmup,
                                            "us_per_inference": [x * 1e6 for x in run.latencies]},
                            "accuracy": acc},
            "warnings": [],
        }
    finally:
        if own:
            lk.close()
