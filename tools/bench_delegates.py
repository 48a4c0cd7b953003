"""Delegate overhead benchmark: whole-model latency through edgerun + xnnpack vs LiteRT alone.

Both run the same model in the same process, interleaved in rounds so that frequency scaling and
other load hit both alike; LiteRT uses its default resolver (XNNPACK applied). Reports medians
and the overhead ratio. Usage::

    python tools/bench_delegates.py [--runs 200] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT))

from edgerun.schema.tflite import Activation, Padding
from tests.support.delegate_models import Q


def mobilenet_like(size=96, width=16, blocks=5, seed=1, softmax=True) -> bytes:
    """int8 depthwise-separable CNN (MobileNet v1 shaped, scaled down)."""
    q = Q(seed)
    x = q.input((1, size, size, 3))
    y = q.conv(x, width, stride=2, act=Activation.RELU6)
    c = width
    for i in range(blocks):
        stride = 2 if i % 2 else 1
        y = q.conv(y, c, stride=stride, depthwise=True, act=Activation.RELU6)
        c = c * 2 if stride == 2 else c
        y = q.conv(y, c, k=1, act=Activation.RELU6)
    _, h, _, ch = q.shape[y]
    y = q.pool(y, "AVERAGE_POOL_2D", k=h, stride=h, padding=Padding.VALID)
    y = q.reshape(y, (1, ch))
    y = q.fc(y, 10, w_scale=(2e-5, 2e-4))
    return q.done(q.softmax(y) if softmax else y)


def bench(model: bytes, runs: int, threads: int | None, **config) -> dict:
    from edgerun.delegate import coverage, get_delegate
    from edgerun.litert import make_interpreter
    from edgerun.runtime.interpreter import Interpreter
    from edgerun.testing import random_inputs

    lit = make_interpreter(model, num_threads=threads)
    lit.allocate_tensors()
    er = Interpreter(model_content=model, delegates=[get_delegate("xnnpack", num_threads=threads, **config)])
    er.allocate_tensors()
    xs = random_inputs(er.get_input_details(), 0)
    lin = [d["index"] for d in lit.get_input_details()]
    lout = [d["index"] for d in lit.get_output_details()]
    ein = [d["index"] for d in er.get_input_details()]
    eout = [d["index"] for d in er.get_output_details()]

    def run_litert():
        for i, x in zip(lin, xs):
            lit.set_tensor(i, x)
        lit.invoke()
        return [lit.get_tensor(i) for i in lout]

    def run_edgerun():
        for i, x in zip(ein, xs):
            er.set_tensor(i, x)
        er.invoke()
        return [er.get_tensor(i) for i in eout]

    a, b = run_litert(), run_edgerun()
    worst = max(int(np.abs(p.astype(int) - q.astype(int)).max()) for p, q in zip(a, b))
    for _ in range(10):
        run_litert(), run_edgerun()
    tl, te = [], []
    for r in range(runs):
        order = (run_litert, run_edgerun) if r % 2 == 0 else (run_edgerun, run_litert)
        for f in order:
            t0 = time.perf_counter()
            f()
            dt = time.perf_counter() - t0
            (tl if f is run_litert else te).append(dt)
    ml, me = statistics.median(tl), statistics.median(te)
    cov = coverage(er)
    return {"litert_ms": ml * 1e3, "edgerun_xnnpack_ms": me * 1e3, "overhead_pct": 100 * (me / ml - 1),
            "ops_pct": cov["ops_pct"], "macs_pct": cov["macs_pct"], "partitions": len(er.partitions),
            "fallback": [f["op"] for f in cov["fallback"]], "max_lsb_diff": worst, "macs": cov["macs"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cases = {
        # every op in XNNPACK's table: the whole model is one partition
        "mnet96_nosoftmax": (mobilenet_like(96, 16, 5, softmax=False), {}),
        "mnet160_nosoftmax": (mobilenet_like(160, 32, 7, softmax=False), {}),
        # int8 SOFTMAX is not an XNNPACK op: strict table -> it runs on edgerun's kernel
        "mnet160_softmax_strict": (mobilenet_like(160, 32, 7), {}),
        # litert_ops=True: the partition also takes ops LiteRT runs with its own kernels
        "mnet160_softmax_litert_ops": (mobilenet_like(160, 32, 7), {"litert_ops": True}),
    }
    rows = {name: bench(m, args.runs, args.threads, **cfg) for name, (m, cfg) in cases.items()}
    info = {"python": platform.python_version(), "machine": platform.machine(),
            "processor": platform.processor(), "runs": args.runs, "threads": args.threads}
    if args.json:
        print(json.dumps({"info": info, "results": rows}, indent=2))
        return 0
    print(f"{'model':28} {'LiteRT ms':>10} {'edgerun+xnnpack ms':>19} {'overhead':>9} {'ops%':>6} "
          f"{'MACs%':>6} fallback")
    for name, r in rows.items():
        print(f"{name:28} {r['litert_ms']:10.3f} {r['edgerun_xnnpack_ms']:19.3f} {r['overhead_pct']:8.1f}% "
              f"{r['ops_pct']:6.1f} {r['macs_pct']:6.1f} {','.join(r['fallback']) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
