"""MEAN, SUM, REDUCE_MAX against LiteRT's reference kernels (int8 bit-exact, float rtol 1e-5).

LiteRT 2.3's reference int8 SUM reads its int8 data as uint8 (a value -8 counts as
248; see test_sum_int8_litert_reads_uint8). edgerun implements the int8 kernel that reduce.cc
describes, and checks it bit for bit against LiteRT's uint8 SUM on the same tensor shifted by 128:
that kernel's fixed-point arithmetic depends only on ``q - zero_point``, so the two agree exactly.
"""

import numpy as np
import pytest

from edgerun.ir import ModelBuilder
from edgerun.testing import assert_close, compare_with_litert, run_edgerun, run_litert

CASES = [  # (input shape, axes, keep_dims)
    ((1, 5, 7, 6), [1, 2], True),   # global average pooling form
    ((1, 5, 7, 6), [1, 2], False),
    ((2, 3, 4), [-1], False),
    ((2, 3, 4), [0, 2], True),
    ((2, 3, 4), [1, 1, -2], False),  # duplicates
    ((3, 65), [1], False),
    ((4, 3, 2), [0, 1, 2], False),   # everything
    ((2, 3), [], False),             # nothing: an empty axis tensor
]
QUANT = [((0.05, -10), (0.02, 7)), ((0.1, 3), (0.1, 3)), ((0.04, -128), (0.5, 100))]


def _model(op, dtype, shape, axes, keep, qi=None, qo=None):
    b = ModelBuilder()
    x = b.input("x", shape, dtype, qi)
    a = b.const("axes", np.array(axes, np.int32))
    rank = len(shape)
    red = {ax % rank for ax in axes}
    out = tuple(1 if i in red else d for i, d in enumerate(shape)) if keep else \
        tuple(d for i, d in enumerate(shape) if i not in red)
    y = b.tensor("y", out, dtype, qo)
    b.op(op, [x, a], [y], keep_dims=keep)
    b.output(y)
    return b.to_bytes()


@pytest.mark.parametrize("op", ["MEAN", "SUM", "REDUCE_MAX"])
@pytest.mark.parametrize("shape,axes,keep", CASES)
def test_reduce_float(op, shape, axes, keep):
    compare_with_litert(_model(op, "float32", shape, axes, keep), seed=1)


@pytest.mark.parametrize("shape,axes,keep", CASES)
@pytest.mark.parametrize("qi,qo", QUANT)
def test_mean_int8(shape, axes, keep, qi, qo):
    compare_with_litert(_model("MEAN", "int8", shape, axes, keep, qi, qo), seed=2)


def _shifted(q):
    return (q[0], q[1] + 128)


@pytest.mark.parametrize("shape,axes,keep", CASES)
@pytest.mark.parametrize("qi,qo", QUANT)
def test_sum_int8(shape, axes, keep, qi, qo):
    """int8 SUM == LiteRT's reference uint8 SUM on the same values shifted by +128."""
    m8 = _model("SUM", "int8", shape, axes, keep, qi, qo)
    mu8 = _model("SUM", "uint8", shape, axes, keep, _shifted(qi), _shifted(qo))
    rng = np.random.default_rng(4)
    for _ in range(3):
        x = rng.integers(-128, 128, size=shape).astype(np.int8)
        want = run_litert(mu8, [(x.astype(np.int16) + 128).astype(np.uint8)])[0]
        got = run_edgerun(m8, [x])[0]
        assert_close([got.astype(np.int16) + 128], [want.astype(np.int16)])


def test_sum_int8_litert_reads_uint8():
    """Where int8 and uint8 readings of the bytes agree (inputs and outputs in [0, 127]),
    edgerun's int8 SUM equals LiteRT's int8 SUM directly; outside that range LiteRT 2.3 is off."""
    m = _model("SUM", "int8", (2, 5, 3), [1], False, (0.05, -10), (0.25, 0))
    x = np.random.default_rng(1).integers(0, 20, size=(2, 5, 3)).astype(np.int8)
    got = compare_with_litert(m, [x])[0]
    assert got.min() >= 0 and got.max() <= 127 and got.max() > 10
    neg = np.full((2, 5, 3), -8, np.int8)
    assert not np.array_equal(run_edgerun(m, [neg])[0], run_litert(m, [neg])[0])


@pytest.mark.parametrize("shape,axes,keep", CASES)
def test_reduce_max_int8(shape, axes, keep):
    q = (0.05, -10)
    compare_with_litert(_model("REDUCE_MAX", "int8", shape, axes, keep, q, q), seed=3)


def test_mean_int8_extreme_inputs():
    """All-min and all-max inputs exercise the clamps and the rounding of large sums."""
    m = _model("MEAN", "int8", (1, 9, 9, 3), [1, 2], True, (0.3, 5), (0.01, -3))
    for v in (-128, 127):
        compare_with_litert(m, [np.full((1, 9, 9, 3), v, np.int8)])
    m = _model("MEAN", "int8", (2, 300), [1], False, (0.02, 0), (0.02, 0))  # n > 256, same scale
    compare_with_litert(m, seed=9)


def test_sum_int8_matches_litert_optimized_within_one_lsb():
    """LiteRT's optimized int8 SUM reads int8 correctly but rounds in float: within 1 LSB."""
    from edgerun.litert import make_interpreter

    rng = np.random.default_rng(3)
    for shape, axes, keep in CASES[:4]:
        m = _model("SUM", "int8", shape, axes, keep, (0.05, -10), (0.02, 7))
        x = rng.integers(-128, 128, size=shape).astype(np.int8)
        it = make_interpreter(m, reference=False, xnnpack=False)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        want = it.get_tensor(it.get_output_details()[0]["index"])
        assert_close(run_edgerun(m, [x]), [want], max_lsb=1)
