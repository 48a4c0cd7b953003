"""Float vs int8 accuracy of the shipped digits model on its 360-image test split.

    edgerun convert models/digits_cnn.onnx -o digits_int8.tflite --calib models/calib_digits.npz
    python tools/eval_digits.py digits_int8.tflite [--json]

The float model runs in ONNX Runtime; the int8 model in LiteRT's reference kernels and in the
edgerun interpreter (their predictions must be identical). Needs no scikit-learn: the test split
ships as ``models/digits_test.npz`` (written by tools/train_digits.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def upsample(x8):
    x = np.repeat(np.repeat(np.asarray(x8, np.float32), 2, axis=1), 2, axis=2) / 16.0
    return x[:, None]


def evaluate(int8_model: Path, onnx_model: Path = ROOT / "models" / "digits_cnn.onnx",
             test: Path = ROOT / "models" / "digits_test.npz") -> dict:
    import onnxruntime as ort

    from edgerun.litert import make_interpreter
    from edgerun.runtime.interpreter import Interpreter

    with np.load(test) as z:
        x = upsample(z["x"])
        y = z["y"]
    sess = ort.InferenceSession(str(onnx_model), providers=["CPUExecutionProvider"])
    float_pred = np.argmax(sess.run(None, {sess.get_inputs()[0].name: x})[0], axis=1)
    data = Path(int8_model).read_bytes()
    ref = make_interpreter(data, reference=True)
    ref.allocate_tensors()
    er = Interpreter(model_content=data)
    er.allocate_tensors()
    d = ref.get_input_details()[0]
    s, zp = d["quantization"]
    preds_ref, preds_er, same = [], [], True
    for xi in x:
        nhwc = xi.transpose(1, 2, 0)[None]
        if np.dtype(d["dtype"]) == np.float32:
            q = nhwc
        else:
            v = nhwc / s
            q = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5) + zp, -128, 127).astype(d["dtype"])
        ref.set_tensor(d["index"], q)
        ref.invoke()
        o_ref = ref.get_tensor(ref.get_output_details()[0]["index"])
        er.set_tensor(er.get_input_details()[0]["index"], q)
        er.invoke()
        o_er = er.get_tensor(er.get_output_details()[0]["index"])
        same = same and np.array_equal(o_ref, o_er)
        preds_ref.append(int(np.argmax(o_ref)))
        preds_er.append(int(np.argmax(o_er)))
    preds_ref = np.array(preds_ref)
    return {"test_images": int(len(y)), "float_accuracy": float(np.mean(float_pred == y) * 100),
            "int8_accuracy": float(np.mean(preds_ref == y) * 100),
            "int8_edgerun_accuracy": float(np.mean(np.array(preds_er) == y) * 100),
            "top1_agreement": float(np.mean(float_pred == preds_ref) * 100),
            "edgerun_bit_exact_with_litert_ref": bool(same)}


def main(argv=None):
    ap = argparse.ArgumentParser(description="float vs int8 accuracy of the digits model")
    ap.add_argument("int8_model", type=Path)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = evaluate(a.int8_model)
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"test images: {r['test_images']}")
        print(f"float (ONNX Runtime):       {r['float_accuracy']:.2f}%")
        print(f"int8 (LiteRT reference):    {r['int8_accuracy']:.2f}%")
        print(f"int8 (edgerun interpreter): {r['int8_edgerun_accuracy']:.2f}%  "
              f"(bit-exact with LiteRT: {r['edgerun_bit_exact_with_litert_ref']})")
        print(f"top-1 agreement float/int8: {r['top1_agreement']:.2f}%")


if __name__ == "__main__":
    main()
