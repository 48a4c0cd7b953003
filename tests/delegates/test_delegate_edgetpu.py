"""edgetpu delegate: the compiler's rules on models built here, and the run-time loading path
through LiteRT's real load_delegate API (no Edge TPU or libedgetpu on CI)."""

import ctypes.util

import numpy as np
import pytest

from edgerun.delegate import delegates_supporting, get_delegate
from edgerun.errors import DelegateUnavailableError, UnsupportedOpError
from edgerun.ir import ModelBuilder
from edgerun.runtime.interpreter import Interpreter
from edgerun.runtime.partition import plan
from edgerun.schema import read_model
from edgerun.schema.tflite import Activation, Padding
from tests.support.delegate_models import Q, small_cnn


def _plan(m, *names):
    model = read_model(m)
    p = plan(model, 0, list(range(len(model.main.operators))), [get_delegate(n) for n in names], mode="check")
    return p, {n: {k: v.reason for k, v in d.items() if not v.ok} for n, d in p.decisions.items()}


def test_fully_int8_cnn_maps_entirely():
    p, why = _plan(small_cnn(), "edgetpu")
    assert [pt.nodes for pt in p.partitions] == [list(range(9))]
    assert not any(why.values())


def test_float_model_is_refused_for_quantization():
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 3), "float32")
    y = b.tensor("y", (1, 4, 4, 3), "float32")
    b.op("RELU", [x], [y])
    b.output(y)
    p, why = _plan(b.to_bytes(), "edgetpu")
    assert p.partitions == [] and "RELU only as int8, uint8" in why[0]["edgetpu"]


def test_compilation_stops_at_first_unsupported_op():
    # conv -> softmax over a 2-D [4, 6] tensor (only 1-D softmax maps) -> relu -> fc
    q = Q(60)
    x = q.input((1, 4, 4, 6))
    a = q.conv(x, 6)
    r = q.reshape(a, (16, 6))  # outer dimension 16 > 1 on a 2-D tensor is fine, softmax refuses it
    s = q.softmax(r)
    t = q.unary(s, "RELU")
    m = q.done(t)
    p, why = _plan(m, "edgetpu")
    assert [pt.ops for pt in p.partitions] == [["CONV_2D", "RESHAPE"]]
    assert "only a 1-D input" in why[2]["edgetpu"]
    assert "compilation stops at the first unsupported op" in why[3]["edgetpu"]
    # with xnnpack second, what the TPU leaves goes to it where XNNPACK takes it
    p, why = _plan(m, "edgetpu", "xnnpack")
    assert [(pt.delegate, pt.ops) for pt in p.partitions] == [("edgetpu", ["CONV_2D", "RESHAPE"])]
    assert "SOFTMAX/int8" in why[2]["xnnpack"]


@pytest.mark.parametrize("case", ["pool_with_activation", "dynamic_shape", "batch_4", "concat_const",
                                  "dilation"])
def test_op_limits(case):
    q = Q(61)
    if case == "dynamic_shape":
        x = q.b.input("x", (1, 8, 8, 3), "int8", (0.05, 0), shape_signature=(-1, 8, 8, 3))
        q.q[x], q.shape[x] = (0.05, 0), (1, 8, 8, 3)
    else:
        x = q.input((4 if case == "batch_4" else 1, 8, 8, 3))
    expect = {"pool_with_activation": "fused activation RELU", "dynamic_shape": "dynamic shape",
              "batch_4": "only the 3 innermost", "concat_const": "must be all zeros",
              "dilation": "same in x and y"}[case]
    if case == "pool_with_activation":
        y = q.act((1, 4, 4, 3), *q.q[x])
        q.b.op("MAX_POOL_2D", [x], [y], padding=Padding.VALID, stride_w=2, stride_h=2, filter_width=2,
               filter_height=2, fused_activation_function=Activation.RELU)
    elif case == "concat_const":
        c = q.b.const("c", np.full((1, 8, 8, 3), 5, np.int8), "int8", (0.05, 0))
        y = q.act((1, 8, 8, 6), *q.q[x])
        q.b.op("CONCATENATION", [x, c], [y], axis=3)
    elif case == "dilation":
        y = q.conv(x, 4)
        q.b.graph.operators[-1].options["dilation_w_factor"] = 2
    else:
        y = q.conv(x, 4)
    m = q.done(y)
    p, why = _plan(m, "edgetpu")
    assert p.partitions == []
    assert expect in why[0]["edgetpu"]


def _compiled_model():
    """What edgetpu_compiler emits: quantize -> edgetpu-custom-op -> dequantize."""
    b = ModelBuilder()
    x = b.input("x", (1, 8), "float32")
    xq = b.tensor("xq", (1, 8), "uint8", (0.02, 128))
    yq = b.tensor("yq", (1, 4), "uint8", (0.05, 128))
    y = b.tensor("y", (1, 4), "float32")
    b.op("QUANTIZE", [x], [xq])
    b.op("CUSTOM", [xq], [yq], custom_code="edgetpu-custom-op", custom_options=b"\x00" * 16)
    b.op("DEQUANTIZE", [yq], [y])
    b.output(y)
    return b.to_bytes()


def test_compiled_model_custom_op_is_recognised():
    m = _compiled_model()
    p, _ = _plan(m, "edgetpu")
    assert [pt.ops for pt in p.partitions] == [["edgetpu-custom-op"]]
    assert delegates_supporting("edgetpu-custom-op", None) == ["edgetpu"]
    with pytest.raises(UnsupportedOpError, match="CUSTOM:edgetpu-custom-op.*delegates that can run it: edgetpu"):
        Interpreter(model_content=m).allocate_tensors()


@pytest.mark.skipif(ctypes.util.find_library("edgetpu") is not None, reason="libedgetpu is installed here")
def test_run_without_libedgetpu_is_one_clear_error():
    m = _compiled_model()
    d = get_delegate("edgetpu")
    a = d.is_available()
    assert not a.ok and "libedgetpu.so.1" in a.reason
    it = Interpreter(model_content=m, delegates=["edgetpu"])
    with pytest.raises(DelegateUnavailableError) as e:
        it.allocate_tensors()
    msg = str(e.value)
    assert "libedgetpu.so.1" in msg and "apt-get install libedgetpu1-std" in msg
    assert "\n" not in msg


def test_runtime_refuses_uncompiled_ops_with_a_reason():
    model = read_model(small_cnn())
    s = get_delegate("edgetpu").supports(model, 0, 0)
    assert not s.ok and "edgetpu_compiler" in s.reason


def test_load_path_through_litert_api(tmp_path):
    # a library path that does not exist: LiteRT's load_delegate raises, we name the library
    d = get_delegate("edgetpu", library=str(tmp_path / "libedgetpu.so.1"))
    with pytest.raises(DelegateUnavailableError, match="LiteRT could not load .*libedgetpu.so.1"):
        d.load()
    # a real shared library that is not a TFLite delegate plugin (no tflite_plugin_create_delegate)
    libm = ctypes.util.find_library("m")
    if libm:
        d = get_delegate("edgetpu", library=libm)
        with pytest.raises(DelegateUnavailableError, match="LiteRT could not load"):
            d.load()


FAKE_PLUGIN = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* TfLiteDelegate's layout (tensorflow/lite/core/c/common.h); Prepare claims no node. */
typedef struct D { void* data_; int (*Prepare)(void*, struct D*); void* a; void* b; void* c;
                   int64_t flags; void* o; } D;
static int prepare(void* ctx, D* d) { (void)ctx; (void)d; return 0; }
static char last_device[64];
static int created;
D* tflite_plugin_create_delegate(char** keys, char** values, size_t n, void (*err)(const char*)) {
  (void)err; D* d = calloc(1, sizeof(D)); d->Prepare = prepare;
  for (size_t i = 0; i < n; i++) if (!strcmp(keys[i], "device")) strncpy(last_device, values[i], 63);
  created++; return d;
}
void tflite_plugin_destroy_delegate(D* d) { free(d); }
const char* fake_last_device(void) { return last_device; }
int fake_created(void) { return created; }
"""


def test_external_delegate_plugin_loads_and_compiled_op_needs_the_tpu(tmp_path):
    """A real external-delegate plugin (built here, claiming no node) goes through LiteRT's
    load_delegate; the compiled op then cannot run without an Edge TPU: one clear error."""
    import shutil
    import subprocess

    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "fake.c"
    src.write_text(FAKE_PLUGIN)
    lib = tmp_path / "libfake_edgetpu.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True)
    handle = ctypes.CDLL(str(lib))
    handle.fake_last_device.restype = ctypes.c_char_p
    d = get_delegate("edgetpu", library=str(lib), device="usb:0")
    assert d.is_available().ok
    assert d.load() is not None
    assert handle.fake_created() == 1 and handle.fake_last_device() == b"usb:0"
    it = Interpreter(model_content=_compiled_model(), delegates=[d])
    with pytest.raises(DelegateUnavailableError, match="could not run edgetpu-custom-op"):
        it.allocate_tensors()
    assert handle.fake_created() == 2  # prepare() loaded it through LiteRT again
    # the same plugin on a partition LiteRT can run itself: the run-time path end to end
    from edgerun_delegates.edgetpu import CUSTOM_OP, RUNTIME_OPS, EdgeTpuDelegate

    from edgerun.delegate import CapabilityTable, OpCaps

    class ReluToo(EdgeTpuDelegate):
        capabilities = CapabilityTable("edgetpu", {**RUNTIME_OPS, "RELU": OpCaps(frozenset({"int8"}))},
                                       custom=(CUSTOM_OP,))

    q = Q(80)
    m = q.done(q.unary(q.input((1, 5, 5, 3)), "RELU", 0.03, -128))
    it = Interpreter(model_content=m, delegates=[ReluToo(library=str(lib))])
    it.allocate_tensors()
    assert [p.ops for p in it.partitions] == [["RELU"]] and handle.fake_created() == 3
    from edgerun.testing import random_inputs, run_edgerun
    xs = random_inputs(it.get_input_details(), 0)
    assert np.array_equal(it.predict(*xs)[0], run_edgerun(m, xs)[0])
