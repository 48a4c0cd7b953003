"""xnnpack delegate: partitions run by LiteRT + XNNPACK agree with edgerun's interpreter
(float within 1e-5 relative, int8 within 1 LSB)."""

import numpy as np
import pytest

from edgerun.delegate import coverage, get_delegate
from edgerun.ir import ModelBuilder
from edgerun.runtime.interpreter import Interpreter
from edgerun.schema.tflite import Activation, Padding
from edgerun.testing import assert_close, random_inputs, run_edgerun
from tests.support.delegate_models import Q, float_relu_chain, small_cnn


def _both(m, seed, **kw):
    it = Interpreter(model_content=m, delegates=["xnnpack"], **kw)
    it.allocate_tensors()
    x = random_inputs(it.get_input_details(), seed)
    return it, it.predict(*x), run_edgerun(m, x)


def test_available_here():
    a = get_delegate("xnnpack").is_available()
    assert a.ok and "XNNPACK" in a.reason


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_int8_cnn_within_one_lsb(seed):
    m = small_cnn(seed=seed + 20)
    it, got, want = _both(m, seed)
    # int8 AVERAGE_POOL_2D splits it as in LiteRT's XNNPACK (which takes no int8 average pooling)
    assert [len(p.nodes) for p in it.partitions] == [5, 2]
    assert_close(got, want, max_lsb=1)


def _int8_branches():
    q = Q(3)
    x = q.input((1, 12, 12, 4))
    a = q.conv(x, 6, stride=2, act=Activation.RELU6)
    b = q.conv(x, 6, k=1, stride=2, padding=Padding.VALID)
    c = q.add(a, b, act=Activation.RELU)
    d = q.conv(c, 6, depthwise=True)
    e = q.pool(d, "AVERAGE_POOL_2D", k=3, stride=1, padding=Padding.SAME)
    f = q.reshape(e, (1, 6 * 6 * 6))
    g = q.fc(f, 12)
    return q.done(g)


@pytest.mark.parametrize("seed", [0, 1])
def test_int8_branches_within_one_lsb(seed):
    m = _int8_branches()
    it, got, want = _both(m, seed)
    assert [f["op"] for f in coverage(it)["fallback"]] == ["AVERAGE_POOL_2D"]  # int8: not XNNPACK's
    assert_close(got, want, max_lsb=1)


def _float_cnn():
    rng = np.random.default_rng(4)
    b = ModelBuilder()
    x = b.input("x", (1, 10, 10, 3), "float32")
    w = b.const("w", rng.normal(0, 0.3, (5, 3, 3, 3)).astype(np.float32))
    bias = b.const("b", rng.normal(0, 0.1, 5).astype(np.float32))
    y = b.tensor("y", (1, 10, 10, 5), "float32")
    b.op("CONV_2D", [x, w, bias], [y], padding=Padding.SAME, stride_w=1, stride_h=1,
         fused_activation_function=Activation.RELU, dilation_w_factor=1, dilation_h_factor=1)
    z = b.tensor("z", (1, 5, 5, 5), "float32")
    b.op("MAX_POOL_2D", [y], [z], padding=Padding.VALID, stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    r = b.tensor("r", (1, 125), "float32")
    b.op("RESHAPE", [z, b.const("s", np.array([1, 125], np.int32))], [r], new_shape=[1, 125])
    fw = b.const("fw", rng.normal(0, 0.1, (7, 125)).astype(np.float32))
    o = b.tensor("o", (1, 7), "float32")
    b.op("FULLY_CONNECTED", [r, fw, -1], [o], fused_activation_function=0)
    s = b.tensor("p", (1, 7), "float32")
    b.op("SOFTMAX", [o], [s], beta=1.0)
    b.output(s)
    return b.to_bytes()


@pytest.mark.parametrize("model", ["relu_chain", "cnn"])
def test_float_within_1e5_relative(model):
    m = float_relu_chain() if model == "relu_chain" else _float_cnn()
    it, got, want = _both(m, 5)
    assert coverage(it)["ops_pct"] == 100.0
    assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_resized_input_reaches_the_partition():
    m = float_relu_chain(shape=(1, 4, 3))
    it = Interpreter(model_content=m, delegates=["xnnpack"])
    it.resize_tensor_input(it.get_input_details()[0]["index"], (3, 4, 3))
    it.allocate_tensors()
    x = random_inputs(it.get_input_details(), 1)
    got = it.predict(*x)
    assert got[0].shape == (3, 4, 3)
    np.testing.assert_allclose(got[0], np.clip(x[0], 0, 1), rtol=1e-6)


def test_num_threads_and_profile_key():
    m = small_cnn()
    it = Interpreter(model_content=m, delegates=[get_delegate("xnnpack", num_threads=1)])
    it.allocate_tensors()
    it.set_profiling(True)
    it.predict(*random_inputs(it.get_input_details(), 0))
    assert "xnnpack:0" in it.profile and "SOFTMAX" in it.profile


def test_litert_ops_takes_the_whole_model():
    m = small_cnn(seed=3)
    it = Interpreter(model_content=m, delegates=[get_delegate("xnnpack", litert_ops=True)])
    it.allocate_tensors()
    assert [len(p.nodes) for p in it.partitions] == [9]
    xs = random_inputs(it.get_input_details(), 0)
    assert_close(it.predict(*xs), run_edgerun(m, xs), max_lsb=1)


def _recording_xnnpack():
    """The xnnpack delegate, keeping the kernels it prepares (to look at their buffers)."""
    from edgerun_delegates.xnnpack import XnnpackDelegate

    class Recording(XnnpackDelegate):
        kernels: list = []

        def prepare(self, partition):
            k = super().prepare(partition)
            self.kernels.append(k)
            return k

    return Recording()


def test_partition_edges_live_in_litert_memory():
    """A graph input only a partition reads, and every partition output, are LiteRT's own
    buffers: no copy at the edge; results stay right over invokes with new inputs, and arrays
    returned earlier are copies that later invokes leave alone."""
    m = small_cnn(seed=21)
    d = _recording_xnnpack()
    it = Interpreter(model_content=m, delegates=[d])
    it.allocate_tensors()
    inp = it.get_input_details()[0]["index"]
    assert np.shares_memory(it.tensor(inp)(), d.kernels[0].input_buffer(0))
    for p, kernel in zip(it.partitions, d.kernels):
        for k, t in enumerate(p.outputs):
            assert np.shares_memory(it.tensor(t)(), kernel.output_buffer(k))
    first = None
    for seed in range(3):
        xs = random_inputs(it.get_input_details(), seed)
        got = it.predict(*xs)
        assert_close(got, run_edgerun(m, xs), max_lsb=1)
        if first is None:
            first = (got[0].copy(), got[0])
    np.testing.assert_array_equal(first[0], first[1])


def _input_read_twice():
    q = Q(7)
    x = q.input((1, 10, 10, 4))
    a = q.conv(x, 4, act=Activation.RELU)
    b = q.pool(x, "AVERAGE_POOL_2D", k=3, stride=1, padding=Padding.SAME)  # int8: edgerun's kernel
    return q.done(q.add(a, b))


@pytest.mark.parametrize("seed", [0, 1])
def test_input_read_outside_the_partition_keeps_its_own_buffer(seed):
    m = _input_read_twice()
    d = _recording_xnnpack()
    it = Interpreter(model_content=m, delegates=[d])
    it.allocate_tensors()
    inp = it.get_input_details()[0]["index"]
    assert not any(np.shares_memory(it.tensor(inp)(), k.input_buffer(j))
                   for p, k in zip(it.partitions, d.kernels) for j in range(len(p.inputs)))
    xs = random_inputs(it.get_input_details(), seed)
    assert_close(it.predict(*xs), run_edgerun(m, xs), max_lsb=1)
