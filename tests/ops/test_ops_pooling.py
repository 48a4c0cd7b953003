"""AVERAGE_POOL_2D and MAX_POOL_2D against LiteRT's reference kernels."""

import numpy as np
import pytest

from edgerun.ir import ModelBuilder
from edgerun.ops.common import conv_output_size
from edgerun.schema.tflite import Activation, Padding
from edgerun.testing import compare_with_litert

GEOMETRIES = [  # (input NHWC, filter (h, w), strides (h, w), padding)
    ((1, 8, 8, 3), (2, 2), (2, 2), Padding.VALID),
    ((2, 7, 9, 4), (3, 3), (1, 1), Padding.SAME),
    ((1, 7, 9, 2), (3, 2), (2, 3), Padding.SAME),
    ((1, 10, 6, 5), (4, 3), (3, 2), Padding.VALID),
    ((1, 5, 5, 8), (5, 5), (1, 1), Padding.VALID),   # global pooling
    ((1, 6, 6, 3), (3, 3), (2, 2), Padding.SAME),    # uneven SAME padding
]


def _model(op, dtype, shape, filt, strides, padding, act=Activation.NONE, qi=None, qo=None):
    b = ModelBuilder()
    x = b.input("x", shape, dtype, qi)
    oh = conv_output_size(padding, shape[1], filt[0], strides[0])
    ow = conv_output_size(padding, shape[2], filt[1], strides[1])
    y = b.tensor("y", (shape[0], oh, ow, shape[3]), dtype, qo)
    b.op(op, [x], [y], padding=padding, stride_h=strides[0], stride_w=strides[1],
         filter_height=filt[0], filter_width=filt[1], fused_activation_function=act)
    b.output(y)
    return b.to_bytes()


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("geom", GEOMETRIES)
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_pool(op, geom, dtype):
    q = (0.05, -7) if dtype == "int8" else None
    compare_with_litert(_model(op, dtype, *geom, qi=q, qo=q), seed=5)


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("act", [Activation.RELU, Activation.RELU6, Activation.RELU_N1_TO_1])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_pool_fused_activation(op, act, dtype):
    q = (0.03, 10) if dtype == "int8" else None
    compare_with_litert(_model(op, dtype, (1, 9, 9, 4), (3, 3), (2, 2), Padding.SAME, act, q, q), seed=6)


def test_average_pool_int8_rounding_ties():
    """Sums that sit exactly halfway between two integers round away from zero."""
    m = _model("AVERAGE_POOL_2D", "int8", (1, 2, 4, 1), (2, 2), (2, 2), Padding.VALID,
               qi=(0.1, 0), qo=(0.1, 0))
    x = np.array([[1, 2, -1, -2], [0, -1, 0, 1]], np.int8).reshape(1, 2, 4, 1)  # sums 2, -2 over 4
    got = compare_with_litert(m, [x])[0]
    assert got.ravel().tolist() == [1, -1]
    x = np.full((1, 2, 4, 1), -128, np.int8)
    compare_with_litert(m, [x])
