"""tensorrt delegate: the ONNX Q/DQ export, run by ONNX Runtime's CPU provider here, reproduces
edgerun's int8 outputs within 1 LSB. (No GPU on CI: the TensorRT provider path is marked gpu.)"""

import numpy as np
import pytest

from edgerun.delegate import get_delegate
from edgerun.runtime.interpreter import Interpreter
from edgerun.schema import read_model
from edgerun.schema.tflite import Activation, Padding
from edgerun.testing import assert_close, random_inputs, run_edgerun
from tests.support.delegate_models import Q, small_cnn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from edgerun_delegates.tensorrt import TensorRtDelegate, engine_cache_dir
from edgerun_delegates.tensorrt.export import export_onnx


def _conv(padding, stride, act, depthwise=False):
    q = Q(31)
    x = q.input((1, 9, 9, 4))
    return q.done(q.conv(x, 6, k=3, stride=stride, padding=padding, act=act, depthwise=depthwise))


def _fc():
    q = Q(32)
    x = q.input((3, 20))
    return q.done(q.fc(x, 9, act=Activation.RELU))


def _add():
    q = Q(33)
    a = q.input((1, 5, 5, 3), 0.04, -7)
    b = q.input((1, 5, 5, 3), 0.09, 12)
    return q.done(q.add(a, b, act=Activation.RELU6))


def _pool(op, padding):
    q = Q(34)
    x = q.input((1, 9, 9, 5))
    return q.done(q.pool(x, op, k=3, stride=2, padding=padding))


def _softmax():
    q = Q(35)
    x = q.input((2, 10), 0.04, 0)
    return q.done(q.softmax(x))


MODELS = {
    "conv_same_s1_relu": lambda: _conv(Padding.SAME, 1, Activation.RELU),
    "conv_valid_s2_relu6": lambda: _conv(Padding.VALID, 2, Activation.RELU6),
    "conv_same_s2": lambda: _conv(Padding.SAME, 2, Activation.NONE),
    "depthwise_same": lambda: _conv(Padding.SAME, 1, Activation.NONE, depthwise=True),
    "depthwise_valid_s2_relu": lambda: _conv(Padding.VALID, 2, Activation.RELU, depthwise=True),
    "fully_connected": _fc,
    "add": _add,
    "max_pool_same": lambda: _pool("MAX_POOL_2D", Padding.SAME),
    "avg_pool_valid": lambda: _pool("AVERAGE_POOL_2D", Padding.VALID),
    "avg_pool_same": lambda: _pool("AVERAGE_POOL_2D", Padding.SAME),
    "softmax": _softmax,
    "small_cnn": small_cnn,
}


def _run_onnx(m: bytes, xs):
    """Export the whole model and run it with ORT CPU: float in (dequantized), int8 out."""
    model = read_model(m)
    g = model.main
    proto = export_onnx(model)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"],
                                sess_options=_basic())
    feed = {}
    for inp, i, x in zip(sess.get_inputs(), g.inputs, xs):
        t = g.tensors[i]
        feed[inp.name] = ((x.astype(np.float32) - t.quant.zero_point[0]) * t.quant.scale[0]).astype(np.float32)
    outs = sess.run(None, feed)
    res = []
    for o, y in zip(g.outputs, outs):
        t = g.tensors[o]
        res.append(np.clip(np.round(y / t.quant.scale[0]) + t.quant.zero_point[0], -128, 127).astype(np.int8))
    return res, proto


def _basic():
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return so


@pytest.mark.parametrize("name", sorted(MODELS))
def test_export_reproduces_edgerun_int8(name):
    m = MODELS[name]()
    it = Interpreter(model_content=m)
    for seed in range(3):
        xs = random_inputs(it.get_input_details(), seed)
        want = run_edgerun(m, xs)
        got, _ = _run_onnx(m, xs)
        assert_close(got, want, max_lsb=1)
        # outputs must not be a constant (a saturated model would compare trivially)
        assert len(np.unique(want[0])) > 3


def test_qdq_structure_per_channel_weights():
    m = small_cnn()
    proto = export_onnx(read_model(m))
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("QuantizeLinear") >= 9 and ops.count("DequantizeLinear") >= 9 + 4
    inits = {i.name: i for i in proto.graph.initializer}
    convs = [n for n in proto.graph.node if n.op_type == "Conv"]
    assert len(convs) == 3
    producers = {o: n for n in proto.graph.node for o in n.output}
    w_dq = producers[convs[0].input[1]]
    assert w_dq.op_type == "DequantizeLinear"
    axis = [a.i for a in w_dq.attribute if a.name == "axis"]
    assert axis == [0]
    scale = onnx.numpy_helper.to_array(inits[w_dq.input[1]])
    assert scale.shape == (8,)  # one scale per output channel
    w = onnx.numpy_helper.to_array(inits[w_dq.input[0]])
    assert w.dtype == np.int8 and w.shape == (8, 3, 3, 3)
    dw = producers[convs[1].input[1]]
    assert onnx.numpy_helper.to_array(inits[dw.input[0]]).shape == (8, 1, 3, 3)
    assert [a.i for a in convs[1].attribute if a.name == "group"] == [8]


def test_interpreter_with_tensorrt_delegate_cpu_provider():
    m = small_cnn(seed=9)
    d = get_delegate("tensorrt")
    a = d.is_available()
    assert a.ok and "ExecutionProvider" in a.reason
    it = Interpreter(model_content=m, delegates=[d])
    it.allocate_tensors()
    k = it.steps()[0].kernel
    assert k.input_dtypes == ["float32"] and k.provider in ("CPUExecutionProvider", "CUDAExecutionProvider",
                                                             "TensorrtExecutionProvider")
    for seed in range(2):
        xs = random_inputs(it.get_input_details(), seed)
        assert_close(it.predict(*xs), run_edgerun(m, xs), max_lsb=1)


def test_partition_in_the_middle_converts_at_edges():
    # RELU int8 (edgerun) -> CONV (tensorrt, float I/O) -> SOFTMAX... all int8 at the graph level
    q = Q(40)
    x = q.input((1, 6, 6, 3))
    a = q.unary(x, "RELU")
    b = q.conv(a, 4)
    c = q.unary(b, "RELU6")
    m = q.done(c)
    d = TensorRtDelegate()
    d.capabilities = type(d.capabilities)("tensorrt-conv-only", {
        "CONV_2D": d.capabilities.ops["CONV_2D"]})
    it = Interpreter(model_content=m, delegates=[d])
    it.allocate_tensors()
    assert [p.ops for p in it.partitions] == [["CONV_2D"]]
    xs = random_inputs(it.get_input_details(), 3)
    assert_close(it.predict(*xs), run_edgerun(m, xs), max_lsb=1)


def test_engine_cache_key():
    a = engine_cache_dir(b"model-a", "/c", trt_version="10.3.0", gpu="NVIDIA Orin (nvgpu)")
    assert str(a).startswith("/c/trt-10.3.0/NVIDIA_Orin__nvgpu_/")
    assert a != engine_cache_dir(b"model-b", "/c", trt_version="10.3.0", gpu="NVIDIA Orin (nvgpu)")
    assert a != engine_cache_dir(b"model-a", "/c", trt_version="10.4.0", gpu="NVIDIA Orin (nvgpu)")
    assert a != engine_cache_dir(b"model-a", "/c", trt_version="10.3.0", gpu="NVIDIA H100")


def test_provider_order_here():
    d = TensorRtDelegate(cache_dir="/tmp/edgerun-trt-test")
    provs = d.providers(b"x")
    names = [p[0] if isinstance(p, tuple) else p for p in provs]
    assert names[-1] == "CPUExecutionProvider"
    have = ort.get_available_providers()
    assert ("TensorrtExecutionProvider" in names) == ("TensorrtExecutionProvider" in have)
    if "TensorrtExecutionProvider" in names:
        opts = dict(provs[0][1])
        assert opts["trt_engine_cache_enable"] and opts["trt_int8_enable"]


@pytest.mark.gpu
def test_tensorrt_provider_on_gpu(tmp_path):
    if "TensorrtExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no TensorRT provider here")
    m = small_cnn(seed=9)
    d = TensorRtDelegate(cache_dir=str(tmp_path))
    it = Interpreter(model_content=m, delegates=[d])
    it.allocate_tensors()
    assert it.steps()[0].kernel.provider == "TensorrtExecutionProvider"
    xs = random_inputs(it.get_input_details(), 0)
    assert_close(it.predict(*xs), run_edgerun(m, xs), max_lsb=1)
    assert any(tmp_path.rglob("*.engine"))
