#!/usr/bin/env python3
"""Per-invoke latency of edgerun on a model, split by op type (Interpreter.set_profiling).

    python tools/profile_ops.py models/mcu_small.tflite
    python tools/profile_ops.py mobilenet:0.25:96 --runs 200
    python tools/profile_ops.py chain:RELU:200       # 200 int8 RELUs on 16 values: one composed table
    python tools/profile_ops.py chain:RELU:200 --unfused   # the per-node floor: 200 bound lookups

``mobilenet:ALPHA:SIZE`` builds edgerun.testing.mobilenet_v1(ALPHA, SIZE) in int8; ``chain:OP:N``
builds N int8 nodes of a unary OP (or ADD of the running value with itself) on a 1x16 tensor and
also prints microseconds per node, the interpreter's fixed cost per step (a chain of table ops
composes into one lookup in the invoke plan; ``--unfused`` keeps every step, as
``experimental_preserve_all_tensors`` does). Inputs are random; BLAS runs on one thread (as tools/bench.py). Prints the p50 of plain invokes, then the
mean milliseconds per invoke of each op type over a second, profiled series.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _chain(op: str, n: int) -> bytes:
    from edgerun.ir import ModelBuilder

    b = ModelBuilder()
    x = b.input("x", (1, 16), "int8", (0.05, 0))
    for i in range(n):
        y = b.tensor(f"t{i}", (1, 16), "int8", (0.05, 0))
        b.op(op, [x, x] if op == "ADD" else [x], [y])
        x = y
    b.output(x)
    return b.to_bytes()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a .tflite path or mobilenet:ALPHA:SIZE")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--unfused", action="store_true",
                    help="keep every step (experimental_preserve_all_tensors): no composed table chains")
    ap.add_argument("--requant", action="store_true",
                    help="also time the int8 requantization of the convolution / fully-connected layers "
                         "that run their eval path (bound calls keep their own requantization: not counted)")
    args = ap.parse_args()

    import numpy as np

    from edgerun import Interpreter
    from edgerun.testing import mobilenet_v1, random_inputs

    nodes = 0
    if args.model.startswith("chain:"):
        _, op, n = args.model.split(":")
        nodes = int(n)
        data = _chain(op, nodes)
    elif args.model.startswith("mobilenet:"):
        _, alpha, size = args.model.split(":")
        data = mobilenet_v1(float(alpha), int(size), dtype="int8")
    else:
        data = Path(args.model).read_bytes()
    it = Interpreter(model_content=data, experimental_preserve_all_tensors=args.unfused)
    it.allocate_tensors()
    details = it.get_input_details()
    for d, x in zip(details, random_inputs(details)):
        it.set_tensor(d["index"], x)
    for _ in range(5):
        it.invoke()
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        it.invoke()
        times.append(time.perf_counter() - t0)
    print(f"{args.model}: p50 {np.median(times) * 1e3:.3f} ms per invoke ({args.runs} runs)")
    if nodes:
        print(f"  {np.median(times) / nodes * 1e6:.2f} us per node")
    it.set_profiling(True)
    for _ in range(args.runs):
        it.invoke()
    for op, total in sorted(it.profile.items(), key=lambda kv: -kv[1]):
        print(f"  {op:24s} {total / args.runs * 1e3:8.3f} ms")
    if args.requant:
        _requant_share(it, args.runs)
    return 0


class _TimedRequant:
    """A kernel's requantizer with the time of its calls added up."""

    def __init__(self, inner):
        self.inner, self.seconds, self.values = inner, 0.0, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, acc, *args, **kwargs):
        t0 = time.perf_counter()
        res = self.inner(acc, *args, **kwargs)
        self.seconds += time.perf_counter() - t0
        self.values += acc.size
        return res


def _requant_share(it, runs: int) -> None:
    """Milliseconds per invoke spent requantizing the accumulators of the CONV_2D,
    DEPTHWISE_CONV_2D and FULLY_CONNECTED layers that run eval (int8 -> float32 columns, float
    GEMM / einsum, then this), against those layers' whole time."""
    timed = {}
    for st in it.steps():
        k = st.kernel
        rq = getattr(k, "requant", None) if st.name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED") else None
        if rq is not None and st.dtype == "int8":
            k.requant = _TimedRequant(rq)
            timed.setdefault(st.name, []).append(k.requant)
    it.set_profiling(False)
    it.set_profiling(True)
    for _ in range(runs):
        it.invoke()
    for op, items in sorted(timed.items()):
        sec = sum(t.seconds for t in items)
        vals = sum(t.values for t in items)
        total = it.profile.get(op, 0.0)
        per = sec / runs * 1e3
        print(f"  {op:24s} requantization {per:8.3f} ms of {total / runs * 1e3:.3f} ms "
              f"({vals // max(runs, 1):,} values per invoke, {sec / max(vals, 1) * 1e9:.2f} ns a value)")


if __name__ == "__main__":
    sys.exit(main())
