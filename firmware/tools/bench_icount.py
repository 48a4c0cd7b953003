"""Deterministic cost per inference on the emulated boards: QEMU runs the firmware with
`-icount shift=0` (every guest instruction advances virtual time by exactly 1 ns) and the
firmware's INVOKE timing (SysTick, in virtual microseconds) then reads instructions / 1000.
Prints a markdown table: model, board, instructions per inference, arena bytes (COMMIT's figure).

    python3 firmware/tools/bench_icount.py [--boards mps2-an386,mps2-an500,mps2-an505] [--runs 3] [--portable]

Models: models/mcu_small.tflite and MLPerf Tiny's five int8 models (cached in
~/.cache/edgerun/mlperf_tiny, or downloaded there by tools/fetch_models.py where GitHub is reachable).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from tests.support.firmware_harness import free_port, make, qemu_command  # noqa: E402
from tests.support.firmware_models import MLPERF_TINY, mlperf_tiny  # noqa: E402

from edgerun.deploy.flash import flash, model_info, run_with_link  # noqa: E402
from edgerun.deploy.serial_link import SerialLink  # noqa: E402
from edgerun.testing import random_inputs  # noqa: E402


def start(board: str, portable: bool):
    target = "mps2" if board == "mps2-an386" else board
    if portable:  # the plain C inner loops, in a build directory of their own
        subprocess.run(["make", "-s", "-C", str(ROOT / "firmware"), target, "BUILD=build/portable",
                        "EXTRA=-DER_PORTABLE_KERNELS"], check=True)
        elf = ROOT / "firmware" / "build" / "portable" / board / "edgerun-fw.elf"
    else:
        make(target)
        elf = ROOT / "firmware" / "build" / board / "edgerun-fw.elf"
    port = free_port()
    q = subprocess.Popen(qemu_command(elf, port, board, icount=True), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return q, f"socket://127.0.0.1:{port}"


def board_links(boards: str, portable: bool = False):
    """Yields (board, url, link) for each board of the comma-separated list: the firmware built,
    QEMU started with -icount, the serial link open and greeted; QEMU is stopped after each board."""
    for board in boards.split(","):
        q, url = start(board, portable)
        try:
            with SerialLink(url, ack_timeout=30.0) as link:
                link.hello()
                yield board, url, link
        finally:
            q.kill()
            q.wait()


def flash_with_inputs(m: bytes, url: str, link: SerialLink):
    """Flashes the model over the open link; returns its MODEL_INFO and seed-0 random inputs."""
    flash(m, url, link=link)
    info = model_info(link)
    return info, random_inputs([{"dtype": t.dtype, "shape": t.shape} for t in info.inputs], seed=0)


def bench_models(prefix: str) -> dict[str, bytes]:
    """models/mcu_small.tflite and the MLPerf Tiny models that are cached, named `<prefix> <name>`."""
    models = {"mcu_small": (ROOT / "models" / "mcu_small.tflite").read_bytes()}
    for name in MLPERF_TINY:
        m = mlperf_tiny(name)
        if m is not None:
            models[f"{prefix} {name}"] = m
    return models


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boards", default="mps2-an386,mps2-an500,mps2-an505")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--portable", action="store_true", help="plain C inner loops (-DER_PORTABLE_KERNELS)")
    a = ap.parse_args()
    models = bench_models("mlperf-tiny")
    print("| model | board | instructions / inference | arena bytes | model bytes |")
    print("| --- | --- | ---: | ---: | ---: |")
    for board, url, link in board_links(a.boards, a.portable):
        for name, m in models.items():
            info, xs = flash_with_inputs(m, url, link)
            us = [run_with_link(link, xs, info)[1] for _ in range(a.runs)]
            insns = int(np.median(us) * 1000)
            kind = " (portable C)" if a.portable else ""
            print(f"| {name} | {board}{kind} | {insns:,} | {info.arena_bytes:,} | {len(m):,} |", flush=True)


if __name__ == "__main__":
    main()
