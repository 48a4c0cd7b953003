#!/usr/bin/env python3
"""Benchmark edgerun against LiteRT on the shipped and test models; print and record ratios.

    python tools/bench.py                       # all models, 30 runs each, 1 thread
    python tools/bench.py --runs 100 --write docs/benchmarks.md

Every model runs in edgerun, LiteRT with XNNPACK off (its built-in optimized kernels) and LiteRT
with XNNPACK on, in the same process and run, with the same random inputs. The headline is
edgerun p50 / LiteRT p50 (lower is better). Tests never assert speed; this script measures it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def models() -> dict[str, bytes]:
    from edgerun.testing import mobilenet_v1

    out = {
        "mobilenet_v1_0.25_96 int8 (built in code)": mobilenet_v1(0.25, 96, dtype="int8"),
        "mobilenet_v1_0.25_96 float32 (built in code)": mobilenet_v1(0.25, 96, dtype="float32"),
        "mobilenet_v1_1.0_224 int8 (built in code)": mobilenet_v1(1.0, 224, classes=1000, dtype="int8"),
    }
    for p in sorted((ROOT / "models").glob("*.tflite")):
        out[f"models/{p.name}"] = p.read_bytes()
    mp = Path(os.environ.get("EDGERUN_FIXTURES", Path.home() / ".cache" / "edgerun" / "fixtures")) / "mediapipe-0.10.14"
    for name in ("face_detection_short_range.tflite", "palm_detection_lite.tflite"):
        if (mp / name).exists():
            out[f"mediapipe {name} (float16 weights)"] = (mp / name).read_bytes()
    return out


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", default="", help="substring filter on model names")
    ap.add_argument("--write", type=Path, help="append a markdown section to this file")
    args = ap.parse_args()

    from edgerun.bench import benchmark

    rows = []
    for name, data in models().items():
        if args.only and args.only not in name:
            continue
        try:
            rep = benchmark(data, runs=args.runs, warmup=args.warmup, num_threads=1)
        except Exception as e:  # a model edgerun cannot run yet: record why
            rows.append((name, f"error: {e}", "", "", "", "", ""))
            print(f"{name}: error: {e}", flush=True)
            continue
        e = rep["engines"]
        r = rep.get("ratios", {})
        row = (name, f"{e['edgerun']['p50_ms']:.2f}", f"{e['litert']['p50_ms']:.2f}",
               f"{e['litert-xnnpack']['p50_ms']:.2f}", f"{r.get('edgerun/litert', 0):.2f}x",
               f"{r.get('edgerun/litert-xnnpack', 0):.2f}x", f"{e['edgerun']['arena_bytes']:,}")
        rows.append(row)
        print(" | ".join(row), flush=True)

    header = ("model", "edgerun p50 ms", "LiteRT p50 ms (XNNPACK off)", "LiteRT p50 ms (XNNPACK on)",
              "edgerun / LiteRT", "edgerun / LiteRT+XNNPACK", "edgerun arena B")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    table = "\n".join(lines)
    print(table)
    if args.write:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        section = (f"\n## Interpreter latency, {stamp}\n\nMachine: {machine()}. One thread everywhere. "
                   f"Command: `python tools/bench.py --runs {args.runs}`.\n\n{table}\n")
        with open(args.write, "a") as f:
            f.write(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
