"""A float32-output int8 conversion computes its output SOFTMAX in int16 (issue 15).

int8's SOFTMAX output step is fixed at 1/256, which alone caps a confident classifier near
49 dB. With float32 outputs (``--io-type float32``) and a target whose runtime has TFLite's int16
SOFTMAX and edgerun leaves to the converter (cpu, rpi, mcu, or no target), the converter requantizes the logits to int16
(the classifier head before it runs in 16x8: tests/convert/test_convert_wide_head.py), runs
SOFTMAX in int16 (output step 1/32768) and dequantizes that. The
result must run bit-exact with LiteRT's reference kernels and be measurably closer to float;
int8 outputs and other targets (coral, jetson; tflm promotes layers to int16 only
under --max-drop) keep the int8 SOFTMAX.
"""

from pathlib import Path

import numpy as np
import pytest

from edgerun.convert.pipeline import convert
from edgerun.schema.reader import read_model
from edgerun.testing import compare_with_litert

REPO = Path(__file__).resolve().parents[2]
while not (REPO / "models/digits_cnn.onnx").exists() and REPO != REPO.parent:
    REPO = REPO.parent
MODEL, CALIB = REPO / "models/digits_cnn.onnx", str(REPO / "models/calib_digits.npz")


def softmax_io(model: bytes) -> tuple[str, str, str]:
    """(input dtype, output dtype, what reads the output) of the model's SOFTMAX."""
    m = read_model(model)
    g = m.subgraphs[0]
    sm = next(op for op in g.operators if m.op_code(op).builtin == "SOFTMAX")
    reader = next((m.op_code(op).builtin for op in g.operators if sm.outputs[0] in op.inputs), None)
    return g.tensors[sm.inputs[0]].dtype, g.tensors[sm.outputs[0]].dtype, reader


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    d = tmp_path_factory.mktemp("softmax16")
    kw = {"calib": CALIB, "calib_method": "mse", "use_cache": False}
    return d, {
        "wide": convert(MODEL, d / "wide.tflite", io_type="float32", **kw),
        "int8io": convert(MODEL, d / "int8io.tflite", **kw),
        "jetson": convert(MODEL, d / "jetson.tflite", io_type="float32", target="jetson", **kw),
    }


def test_float_output_softmax_runs_in_int16(converted):
    d, reps = converted
    assert reps["wide"].ok and not reps["wide"].float_ops
    assert softmax_io((d / "wide.tflite").read_bytes()) == ("int16", "int16", "DEQUANTIZE")
    # int8 outputs, and a target whose runtime is int8-only, keep TFLite's int8 SOFTMAX
    assert softmax_io((d / "int8io.tflite").read_bytes())[:2] == ("int8", "int8")
    m = read_model((d / "jetson.tflite").read_bytes())
    assert {t.dtype for t in m.subgraphs[0].tensors} & {"int16"} == set()


def test_int16_softmax_output_is_closer_to_float(converted):
    _, reps = converted
    wide = reps["wide"].outputs[0].sqnr_db
    narrow = reps["jetson"].outputs[0].sqnr_db  # same model, same ranges, int8 SOFTMAX
    assert narrow < 52 and wide > narrow + 6, (wide, narrow)


def test_int16_softmax_bit_exact_with_litert_reference(converted):
    d, _ = converted
    model = (d / "wide.tflite").read_bytes()
    with np.load(CALIB) as z:
        x = z[next(iter(z.keys()))].astype(np.float32)
    for sample in x[:12]:
        y = compare_with_litert(model, [sample.transpose(1, 2, 0)[None].copy()], rtol=0, atol=0)[0]
        assert y.max() > 0.5  # a confident digit, not a flat output
