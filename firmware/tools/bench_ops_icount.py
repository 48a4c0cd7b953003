"""Instructions per inference of single-op models on the emulated boards (QEMU `-icount shift=0`,
as firmware/tools/bench_icount.py: the firmware's INVOKE timer then reads instructions / 1000),
for the op-coverage kernels: SQRT, RSQRT, DIV, SUM, LOG_SOFTMAX, CAST, SHAPE and the int16
SOFTMAX head. Each output is also checked byte for byte against LiteRT's reference kernels
(SUM against its uint8 twin, see tests/firmware/test_firmware_kernels_more.py).

    python3 firmware/tools/bench_ops_icount.py [--boards mps2-an386,mps2-an500] [--portable]

The first rows are one op on 4,096 elements (the timer's resolution is 1,000 instructions, so the
test-suite models below them, tens of elements, mostly show the per-inference overhead). SQRT and
RSQRT inputs have zero point -128, so every int8 input is valid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "firmware" / "tools"))

import numpy as np  # noqa: E402
from bench_icount import board_links, flash_with_inputs  # noqa: E402
from tests.support.firmware_models import op_models, sum_models  # noqa: E402

from edgerun.deploy.flash import run_with_link  # noqa: E402
from edgerun.ir import ModelBuilder  # noqa: E402
from edgerun.testing import run_litert  # noqa: E402

N = 4096  # elements per op in the sized models below


def sized_models() -> dict[str, bytes]:
    """One op on a [4, 1024] int8 tensor (8 rows of 512 for the row-wise ops)."""
    out = {}

    def one(name, op, q, oq, otype="int8", extra=None, **opts):
        b = ModelBuilder()
        x = b.input("x", (8, 512), "int8", q)
        y = b.tensor("y", (8, 512), otype, oq)
        ins = [x] if extra is None else [x, extra(b)]
        b.op(op, ins, [y], **opts)
        b.output(y)
        out[name] = b.to_bytes()

    one("SQRT 8x512 (table)", "SQRT", (0.05, -128), (0.03, -128))
    one("RSQRT 8x512 (table)", "RSQRT", (0.05, -128), (0.04, -128))
    one("DIV 8x512 / const[512]", "DIV", (0.05, 3), (0.2, 5),
        extra=lambda b: b.const("d", np.where(np.arange(512) % 256 - 128 == -7, 1, np.arange(512) % 256 - 128)
                                .astype(np.int8), "int8", (0.03, -7)))
    one("LOG_SOFTMAX 8 rows x 512", "LOG_SOFTMAX", (0.1, 4), (16.0 / 256, 127))
    one("SOFTMAX int8 8 rows x 512 (for comparison)", "SOFTMAX", (0.1, 4), (1.0 / 256, -128), beta=1.0)
    one("CAST int8->float32 8x512", "CAST", None, None, otype="float32")
    b = ModelBuilder()
    x = b.input("x", (8, 512), "int8", (0.1, 3))
    h = b.tensor("h", (8, 512), "int16", (0.004, 0))
    b.op("QUANTIZE", [x], [h])
    p = b.tensor("p", (8, 512), "int16", (1.0 / 32768, 0))
    b.op("SOFTMAX", [h], [p])
    f = b.tensor("f", (8, 512), "float32")
    b.op("DEQUANTIZE", [p], [f])
    b.output(f)
    out["QUANTIZE int16 + SOFTMAX int16 + DEQUANTIZE, 8 rows x 512"] = b.to_bytes()
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, size=(16, 3, 3, 16)).astype(np.int8)
    for dtype, q, bias_type in (("int8", (0.05, 3), "int32"), ("int16", (0.0005, 0), "int64")):
        b = ModelBuilder()  # 3x3 conv, 16 -> 16 channels on 16x16 (36,864 MACs): the DSP path vs 16x8's plain loop
        x = b.input("x", (1, 16, 16, 16), dtype, q)
        y = b.tensor("y", (1, 16, 16, 16), dtype, (q[0] * 20, 0))
        bias = b.const("b", np.zeros(16, bias_type), bias_type, (np.full(16, q[0] * 0.01, np.float32), np.zeros(16, np.int64), 0))
        b.op("CONV_2D", [x, b.const("w", w, "int8", (np.full(16, 0.01, np.float32), np.zeros(16, np.int64), 0)), bias],
             [y], padding=0, stride_w=1, stride_h=1)
        b.output(y)
        out[f"CONV_2D 3x3 16->16 on 16x16, {'int8' if dtype == 'int8' else '16x8'}"] = b.to_bytes()
    b = ModelBuilder()
    x = b.input("x", (8, 512), "int8", (0.05, 3))
    y = b.tensor("y", (8,), "int8", (2.0, 0))
    b.op("SUM", [x, b.const("axes", np.array([1], np.int32))], [y], keep_dims=False)
    b.output(y)
    out["SUM 8x512 over the last axis"] = b.to_bytes()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boards", default="mps2-an386,mps2-an500")
    ap.add_argument("--portable", action="store_true", help="plain C inner loops (-DER_PORTABLE_KERNELS)")
    a = ap.parse_args()
    small = {k: v for k, v in op_models(0).items()
             if k.startswith(("sqrt", "rsqrt", "div", "log_softmax", "softmax16", "cast_int8_float32", "shape_int8_int32"))}
    small.update({k: v for k, v in sum_models().items() if k == "sum_hw"})
    models = dict(sized_models(), **small)
    sum_twins = sum_models("uint8")
    print("| model | board | instructions / inference | per element | arena bytes |")
    print("| --- | --- | ---: | ---: | ---: |")
    for board, url, link in board_links(a.boards, a.portable):
        for name, m in models.items():
            info, xs = flash_with_inputs(m, url, link)
            got, us = run_with_link(link, xs, info)
            if name.startswith("SUM") or name in sum_twins:
                twin = sum_twins.get(name)
                if twin is None:  # the sized SUM: its uint8 twin built the same way
                    b = ModelBuilder()
                    x = b.input("x", (8, 512), "uint8", (0.05, 131))
                    y = b.tensor("y", (8,), "uint8", (2.0, 128))
                    b.op("SUM", [x, b.const("axes", np.array([1], np.int32))], [y], keep_dims=False)
                    b.output(y)
                    twin = b.to_bytes()
                w = run_litert(twin, [(xs[0].astype(np.int16) + 128).astype(np.uint8)], reference=True)[0]
                ok = got[0].tobytes() == (w.astype(np.int16) - 128).astype(np.int8).tobytes()
            else:
                want = run_litert(m, xs, reference=True)
                ok = all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
            if not ok:
                raise SystemExit(f"{name} on {board}: output differs from LiteRT's reference")
            elems = sum(t.nbytes // np.dtype(t.dtype).itemsize for t in info.inputs)
            kind = " (portable C)" if a.portable else ""
            insns = int(round(us * 1000))
            print(f"| {name} | {board}{kind} | {insns:,} | {insns / elems:.1f} | {info.arena_bytes:,} |",
                  flush=True)


if __name__ == "__main__":
    main()
