"""LOCAL_RESPONSE_NORMALIZATION (float32) against LiteRT.

LiteRT's two CPU kernels disagree: the optimized builtin kernel sums x^2 over [c - radius, c + radius]
(TensorFlow's and ONNX's definition), while ``reference_ops::LocalResponseNormalization``
(BUILTIN_REF) stops at ``c + radius`` exclusive, one channel short. edgerun follows the definition,
so it is compared with the builtin kernel (no XNNPACK), and with the formula written out.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgerun.convert.graph import Graph
from edgerun.testing import run_edgerun, run_litert


def _lrn_model(shape, radius, bias, alpha, beta) -> bytes:
    g = Graph()
    x = g.tensor("x", shape)
    y = g.tensor("y", shape)
    g.inputs.append(x)
    g.outputs.append(y)
    g.emit("LOCAL_RESPONSE_NORMALIZATION", [x], [y], radius=radius, bias=bias, alpha=alpha, beta=beta)
    return g.to_bytes("test")


@pytest.mark.parametrize("shape,radius,bias,alpha,beta", [
    ((1, 5, 7, 16), 2, 1.0, 1e-4 / 5, 0.75),    # AlexNet / ZFNet (size 5)
    ((2, 3, 3, 64), 0, 2.0, 0.5, 0.5),          # radius 0: a per-element map
    ((1, 4, 4, 3), 4, 0.5, 0.1, 1.0),           # radius larger than the depth
])
def test_lrn_matches_litert(shape, radius, bias, alpha, beta):
    model = _lrn_model(shape, radius, bias, alpha, beta)
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32) * 4
    want = run_litert(model, [x], reference=False, xnnpack=False)
    got = run_edgerun(model, [x])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=0)
    assert got[0].dtype == np.float32
    xd = x.astype(np.float64)
    sq = np.pad(xd * xd, [(0, 0)] * 3 + [(radius, radius)])
    acc = sum(sq[..., k:k + shape[-1]] for k in range(2 * radius + 1))
    np.testing.assert_allclose(got[0], xd * (bias + alpha * acc) ** -beta, rtol=1e-5)


def test_lrn_refuses_a_3d_input():
    from edgerun.errors import EdgerunError
    model = _lrn_model((1, 4, 8), 1, 1.0, 1e-4, 0.75)
    with pytest.raises(EdgerunError, match="4-D"):
        run_edgerun(model, [np.zeros((1, 4, 8), np.float32)])
