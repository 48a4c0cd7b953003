"""edgerun's int8 converter vs other int8 quantizers, same model, same calibration samples.

    python tools/bench_quantizers.py            # prints a Markdown table (and --json for a dict)

* ONNX models: ONNX Runtime ``quantize_static`` (QDQ format, per-channel int8 weights, int8
  activations; MinMax and Entropy calibration), run by ONNX Runtime, vs ``edgerun convert``
  (int8 TFLite, run by LiteRT).
* Float TFLite: ``ai-edge-quantizer`` (``static_wi8_ai8`` recipe: int8 per-channel weights, int8
  activations, min/max calibration), run by LiteRT, vs ``edgerun convert`` from the same float
  .tflite. Skipped, with the reason, if ai-edge-quantizer is not installed
  (``pip install ai-edge-quantizer``).

Both quantizers see the same calibration samples (the first 80 % of the set); SQNR is measured
on the remaining 20 % against the float model in its own runtime (ONNX Runtime / LiteRT), and
for the digits model also as top-1 accuracy on its 360-image test split. Conversion time is the
wall time of the quantizer call (edgerun's includes its own accuracy report).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sqnr(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    r = np.concatenate([a.reshape(-1) for a in ref]).astype(np.float64)
    g = np.concatenate([a.reshape(-1) for a in got]).astype(np.float64)
    err = np.sum((r - g) ** 2)
    return float(10 * np.log10(np.sum(r * r) / err)) if err > 0 else float("inf")


def mobilenet_block(seed: int = 0):
    """conv-bn-relu6, depthwise-bn-relu6, pointwise-bn, residual add, global pool, gemm, softmax."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def w(name, *s, scale=0.3, positive=False):
        a = rng.standard_normal(s).astype(np.float32) * scale
        return numpy_helper.from_array(np.abs(a) + 0.5 if positive else a, name)

    def bn(p, c):
        return [w(f"{p}_g", c, scale=0.2, positive=True), w(f"{p}_b", c, scale=0.1), w(f"{p}_m", c, scale=0.1),
                w(f"{p}_v", c, positive=True)]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "bn1_g", "bn1_b", "bn1_m", "bn1_v"], ["b1"]),
        helper.make_node("Clip", ["b1", "zero", "six"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=32),
        helper.make_node("BatchNormalization", ["c2", "bn2_g", "bn2_b", "bn2_m", "bn2_v"], ["b2"]),
        helper.make_node("Clip", ["b2", "zero", "six"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"]),
        helper.make_node("BatchNormalization", ["c3", "bn3_g", "bn3_b", "bn3_m", "bn3_v"], ["b3"]),
        helper.make_node("Add", ["b3", "r1"], ["res"]),
        helper.make_node("GlobalAveragePool", ["res"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    inits = [w("w1", 32, 3, 3, 3), w("w2", 32, 1, 3, 3), w("w3", 32, 32, 1, 1, scale=0.2), w("wf", 10, 32),
             w("bf", 10, scale=0.1), numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(6, np.float32), "six")] + bn("bn1", 32) + bn("bn2", 32) + bn("bn3", 32)
    g = helper.make_graph(nodes, "mobilenet_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def digits_test():
    from tools.eval_digits import upsample
    with np.load(ROOT / "models" / "digits_test.npz") as z:
        return upsample(z["x"]), z["y"]


class _Reader:
    """onnxruntime.quantization CalibrationDataReader over an array."""

    def __init__(self, name, arr):
        self.it = iter([{name: a[None]} for a in arr])

    def get_next(self):
        return next(self.it, None)


def run_ort(path, xs):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return [s.run(None, {name: x[None]})[0] for x in xs]


def run_tflite(data: bytes, xs, nchw_to_nhwc=True):
    from edgerun.convert.drift import Int8Runner
    r = Int8Runner(data)
    return [r([np.transpose(x[None], (0, 2, 3, 1)) if nchw_to_nhwc and x.ndim == 3 else x[None]])[0] for x in xs]


def bench_onnx(name, model, calib, work: Path, test=None) -> list[dict]:
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from edgerun.convert import convert

    path = work / f"{name}.onnx"
    onnx.save(model, str(path))
    n_cal = int(round(len(calib) * 0.8))
    cal, held = calib[:n_cal], calib[n_cal:]
    inp = model.graph.input[0].name
    ref = run_ort(path, held)
    ref_test = run_ort(path, test[0]) if test is not None else None
    rows = []

    def row(tool, method, seconds, got, got_test, size):
        r = {"model": name, "tool": tool, "calibration": method, "seconds": round(seconds, 3),
             "sqnr_db": round(sqnr(ref, got), 2), "size_bytes": size, "calib_samples": n_cal, "eval_samples": len(held)}
        if test is not None:
            r["test_accuracy"] = round(float(np.mean(np.array([np.argmax(o) for o in got_test]) == test[1])) * 100, 2)
            r["float_test_accuracy"] = round(float(np.mean(np.array([np.argmax(o) for o in ref_test]) == test[1])) * 100, 2)
        rows.append(r)

    for method in ("mse", "entropy", "minmax"):
        out = work / f"{name}_edgerun_{method}.tflite"
        t0 = time.perf_counter()
        convert(path, out, calib=np.concatenate([cal, held]), calib_method=method, use_cache=False)
        dt = time.perf_counter() - t0
        data = out.read_bytes()
        row("edgerun convert", method, dt, run_tflite(data, held), run_tflite(data, test[0]) if test is not None else None,
            len(data))
    for method, cm in (("minmax", CalibrationMethod.MinMax), ("entropy", CalibrationMethod.Entropy)):
        out = work / f"{name}_ort_{method}.onnx"
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # ORT prints its calibration progress
            quantize_static(str(path), str(out), _Reader(inp, cal), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, calibrate_method=cm)
        dt = time.perf_counter() - t0
        row("onnxruntime quantize_static (QDQ, per-channel)", method, dt, run_ort(out, held),
            run_ort(out, test[0]) if test is not None else None, out.stat().st_size)
    return rows


def bench_tflite(name, float_tflite: bytes, calib_nhwc, work: Path, test=None) -> list[dict]:
    from edgerun.convert import convert
    from edgerun.schema.reader import read_model

    src = work / f"{name}_float.tflite"
    src.write_bytes(float_tflite)
    n_cal = int(round(len(calib_nhwc) * 0.8))
    cal, held = calib_nhwc[:n_cal], calib_nhwc[n_cal:]
    from edgerun.litert import make_interpreter
    fit = make_interpreter(float_tflite, xnnpack=False)
    fit.allocate_tensors()

    def run_float(xs):
        outs = []
        for x in xs:
            fit.set_tensor(fit.get_input_details()[0]["index"], x[None])
            fit.invoke()
            outs.append(fit.get_tensor(fit.get_output_details()[0]["index"]).copy())
        return outs
    test_nhwc = np.transpose(test[0], (0, 2, 3, 1)) if test is not None else None
    ref = run_float(held)
    rows = []

    def row(tool, method, seconds, data, status=""):
        got = run_tflite(data, held, nchw_to_nhwc=False)
        r = {"model": name + " (float .tflite)", "tool": tool, "calibration": method, "seconds": round(seconds, 3),
             "sqnr_db": round(sqnr(ref, got), 2), "size_bytes": len(data), "calib_samples": n_cal,
             "eval_samples": len(held)}
        if test is not None:
            gt = run_tflite(data, test_nhwc, nchw_to_nhwc=False)
            r["test_accuracy"] = round(float(np.mean(np.array([np.argmax(o) for o in gt]) == test[1])) * 100, 2)
            r["float_test_accuracy"] = round(float(np.mean(np.array([np.argmax(o) for o in run_float(test_nhwc)])
                                                           == test[1])) * 100, 2)
        rows.append(r)

    for method in ("mse", "minmax"):
        out = work / f"{name}_edgerun_tfl_{method}.tflite"
        t0 = time.perf_counter()
        convert(src, out, calib=np.concatenate([cal, held]), calib_method=method, io_type="float32", use_cache=False)
        row("edgerun convert", method, time.perf_counter() - t0, out.read_bytes())
    try:
        from ai_edge_quantizer import quantizer, recipe
    except ImportError as e:
        rows.append({"model": name + " (float .tflite)", "tool": "ai-edge-quantizer", "skipped": f"not installed ({e})"})
        return rows
    sig_in = read_model(float_tflite).signature_defs[0].inputs[0][0]
    t0 = time.perf_counter()
    qt = quantizer.Quantizer(str(src))
    qt.load_quantization_recipe(recipe.static_wi8_ai8())
    res = qt.calibrate({"serving_default": [{sig_in: x[None]} for x in cal]})
    q = qt.quantize(res, enable_progress_report=False)
    dt = time.perf_counter() - t0
    row("ai-edge-quantizer (static_wi8_ai8)", "minmax", dt, bytes(q.quantized_model))
    return rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import onnxruntime
    from importlib.metadata import version
    vers = [f"onnxruntime {onnxruntime.__version__}", f"ai-edge-litert {version('ai-edge-litert')}"]
    try:
        vers.append(f"ai-edge-quantizer {version('ai-edge-quantizer')}")
    except Exception:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, " + ", ".join(vers)


def markdown(rows) -> str:
    lines = ["| model | quantizer | calibration | output SQNR (dB) | test top-1 (int8 / float) | time (s) | size (bytes) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['model']} | {r['tool']} | - | skipped: {r['skipped']} | | | |")
            continue
        acc = f"{r['test_accuracy']:.2f} / {r['float_test_accuracy']:.2f} %" if "test_accuracy" in r else "-"
        lines.append(f"| {r['model']} | {r['tool']} | {r['calibration']} | {r['sqnr_db']:.2f} | {acc} | "
                     f"{r['seconds']:.2f} | {r['size_bytes']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="edgerun convert vs other int8 quantizers")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    import onnx

    from edgerun.convert import convert
    rows = []
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        calib = np.load(ROOT / "models" / "calib_digits.npz")["x"]
        test = digits_test()
        rows += bench_onnx("digits_cnn", onnx.load(str(ROOT / "models" / "digits_cnn.onnx")), calib, work, test)
        rng = np.random.default_rng(0)
        mb_calib = rng.uniform(-1, 1, (100, 3, 32, 32)).astype(np.float32)
        rows += bench_onnx("mobilenet_block", mobilenet_block(), mb_calib, work)
        convert(ROOT / "models" / "digits_cnn.onnx", work / "digits_float.tflite", float_only=True)
        rows += bench_tflite("digits_cnn", (work / "digits_float.tflite").read_bytes(),
                             np.transpose(calib, (0, 2, 3, 1)).copy(), work, test)
    if a.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
    else:
        print(f"machine: {machine()}\n")
        print(markdown(rows))


if __name__ == "__main__":
    main()
