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
