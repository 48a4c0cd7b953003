#!/usr/bin/env python3
"""Per-model cost through `edgerun bench --device` (edgerun.bench.device) under QEMU with
`-icount shift=0`: the firmware's own INVOKE timer (instructions / 1000), the per-op PROFILE
figures summed by op type, and the MLPerf Tiny / EEMBC UART mode's `infer N W` median, with the
arena and flash use the board reports. Prints a markdown table for docs/benchmarks.md.

    python3 firmware/tools/bench_device.py [--boards mps2-an386,mps2-an500,mps2-an505] [--runs 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_icount import bench_models, board_links

from edgerun.bench.device import bench_device, bench_mlperf_tiny


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boards", default="mps2-an386,mps2-an500,mps2-an505")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    models = bench_models("MLPerf Tiny")
    print("| model | board | instructions / inference (bench --device) | EEMBC `infer N W` median "
          "| per-op sum | top op types (share) | arena / RAM | model / slot |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |")
    for board, url, link in board_links(a.boards):
        for name, m in models.items():
            r = bench_device(m, url, runs=a.runs, warmup=1, profile=True, link=link)
            eng = next(iter(r["engines"].values()))
            insns = round(eng["p50_ms"] * 1e6)
            t = bench_mlperf_tiny(None, url, runs=a.runs, warmup=1, repeats=3, samples=0, link=link)
            ee = round(t["mlperf_tiny"]["performance"]["median_us_per_inference"] * 1000)
            p = r["profile"]
            top = ", ".join(f"{x['op']} {x['share']:.0%}" for x in p["by_type"][:3])
            d = r["device"]
            print(f"| {name} | {board} | {insns:,} | {ee:,} | {p['total_us'] * 1000:,} | {top} "
                  f"| {d['arena_bytes']:,} / {d['arena_capacity_bytes']:,} "
                  f"| {d['flash_bytes']:,} / {d['slot_bytes']:,} |", flush=True)


if __name__ == "__main__":
    main()
