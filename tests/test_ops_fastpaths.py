"""The small-tensor fast paths of the int8 kernels against LiteRT BUILTIN_REF (bit-exact).

Kernels pick a path from the shapes seen in prepare (one-row softmax, few-row softmax, global
pooling, tap-loop pooling, sliding-window pooling, 1x1 / batch-1 GEMMs ...); these cases make
sure every path, not only the one the other op tests happen to reach, is exercised.
"""

import numpy as np
import pytest

from edgerun.ir import ModelBuilder
from edgerun.ops.common import conv_output_size
from edgerun.ops.fixedpoint import get_reciprocal, get_reciprocal_scalar
from edgerun.schema.tflite import Activation, Padding
from edgerun.testing import compare_with_litert


def test_reciprocal_scalar_matches_vectorized():
    rng = np.random.default_rng(3)
    xs = np.concatenate([rng.integers(-(1 << 31), 1 << 31, 3000), np.arange(-300, 300),
                         [(1 << 31) - 1, -(1 << 31), 1 << 19, (1 << 19) + 1, 1 << 30, (1 << 31) - (1 << 19)]])
    want_r, want_b = get_reciprocal(xs, 12)
    got = [get_reciprocal_scalar(int(x), 12) for x in xs]
    assert [g[0] for g in got] == want_r.tolist()
    assert [g[1] for g in got] == want_b.tolist()


def _softmax(shape, qi, beta, out_dtype="int8"):
    b = ModelBuilder()
    x = b.input("x", shape, "int8", qi)
    qo = (1 / 256, -128) if out_dtype == "int8" else (1 / 32768, 0)
    y = b.tensor("y", shape, out_dtype, qo)
    b.op("SOFTMAX", [x], [y], beta=beta)
    b.output(y)
    return b.to_bytes()


@pytest.mark.parametrize("shape", [(1, 1), (1, 10), (1, 300), (3, 7), (40, 12), (2, 20, 9)])
@pytest.mark.parametrize("qi,beta", [((0.1, 3), 1.0), ((0.0039, -128), 2.0), ((0.5, 0), 0.3)])
@pytest.mark.parametrize("out_dtype", ["int8", "int16"])
def test_softmax_int8_row_counts(shape, qi, beta, out_dtype):
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-128, 128, shape).astype(np.int8)
    x.reshape(-1, shape[-1])[0, :] = x.reshape(-1)[0]  # a row of ties
    compare_with_litert(_softmax(shape, qi, beta, out_dtype), [x])


def _pool(op, shape, filt, strides, padding, act=Activation.NONE, qi=(0.05, -3), qo=(0.05, -3)):
    b = ModelBuilder()
    x = b.input("x", shape, "int8", qi)
    oh = conv_output_size(padding, shape[1], filt[0], strides[0])
    ow = conv_output_size(padding, shape[2], filt[1], strides[1])
    y = b.tensor("y", (shape[0], oh, ow, shape[3]), "int8", qo)
    b.op(op, [x], [y], padding=padding, stride_h=strides[0], stride_w=strides[1],
         filter_height=filt[0], filter_width=filt[1], fused_activation_function=act)
    b.output(y)
    return b.to_bytes()


POOLS = [  # (input, filter, strides, padding)
    ((1, 8, 8, 16), (2, 2), (2, 2), Padding.VALID),   # tap loop, no padding
    ((1, 4, 4, 16), (3, 3), (1, 1), Padding.SAME),    # tap loop through the padded buffer
    ((2, 5, 7, 3), (1, 4), (1, 2), Padding.SAME),     # padding along W only
    ((1, 9, 9, 4), (5, 5), (1, 1), Padding.SAME),     # 25 taps: sliding-window path
    ((1, 7, 6, 8), (7, 6), (1, 1), Padding.VALID),    # global
    ((2, 3, 3, 5), (3, 3), (3, 3), Padding.SAME),     # global via SAME with a large stride
    ((1, 3, 3, 256), (3, 3), (1, 1), Padding.VALID),  # MobileNet's head
]


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("geom", POOLS)
@pytest.mark.parametrize("act", [Activation.NONE, Activation.RELU6])
def test_pool_int8_paths(op, geom, act):
    rng = np.random.default_rng(len(geom[0]) + geom[1][0])
    x = rng.integers(-128, 128, geom[0]).astype(np.int8)
    compare_with_litert(_pool(op, *geom, act=act), [x])
    compare_with_litert(_pool(op, *geom, act=act, qi=(0.1, 20), qo=(0.2, -100)), [x])


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("geom", POOLS[:6])
def test_pool_float_paths(op, geom):
    b = ModelBuilder()
    shape, filt, strides, padding = geom
    x = b.input("x", shape, "float32")
    oh = conv_output_size(padding, shape[1], filt[0], strides[0])
    ow = conv_output_size(padding, shape[2], filt[1], strides[1])
    y = b.tensor("y", (shape[0], oh, ow, shape[3]), "float32")
    b.op(op, [x], [y], padding=padding, stride_h=strides[0], stride_w=strides[1],
         filter_height=filt[0], filter_width=filt[1], fused_activation_function=Activation.RELU)
    b.output(y)
    xv = np.random.default_rng(2).normal(size=shape).astype(np.float32)
    compare_with_litert(b.to_bytes(), [xv])
