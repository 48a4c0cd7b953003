"""FULLY_CONNECTED and BATCH_MATMUL against LiteRT's reference kernels, plus the requantization helpers.

int8 models use realistic quantization (symmetric int8 weights from max|w|/127, int32 bias at
s_x * s_w, output scale calibrated from the float twin's outputs) and every int8 result is checked
to be informative (many distinct values, mostly unsaturated) before its exact equality counts.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgerun.ir import ModelBuilder
from edgerun.ops.common import (
    Requantizer,
    exact_chunk,
    exact_int_matmul,
    round_half_away,
)
from edgerun.ops.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier
from edgerun.schema.tflite import Activation
from edgerun.testing import compare_with_litert, run_litert
from tests.support.op_specs import assert_informative, fc_model, out_qparams, run_fc_int8

NONE, RELU, RELU6, RELU_N1 = Activation.NONE, Activation.RELU, Activation.RELU6, Activation.RELU_N1_TO_1


# --- FULLY_CONNECTED -------------------------------------------------------------------------

def _fc_out_shape(x_shape, k, units, keep):
    return tuple(x_shape[:-1]) + (units,) if keep else (int(np.prod(x_shape)) // k, units)


FC_CASES = {
    "2d": dict(x_shape=(4, 20), units=9),
    "batch1_k1": dict(x_shape=(1, 1), units=5),
    "3d_keep": dict(x_shape=(2, 3, 16), units=7, keep=True),
    "3d_flatten": dict(x_shape=(2, 3, 16), units=7),
    "4d_flatten_rows": dict(x_shape=(2, 3, 2, 6), units=5, k=12),  # rows cut across dims: (2*3*2*6)/12 = 6
    "4d_keep": dict(x_shape=(1, 2, 3, 10), units=4, keep=True),
    "long_k_chunked": dict(x_shape=(3, 1500), units=6),
}


def _fc_case(case, seed=0):
    c = FC_CASES[case]
    rng = np.random.default_rng(seed)
    k = c.get("k", c["x_shape"][-1])
    wf = rng.normal(0, 1 / np.sqrt(k), (c["units"], k)).astype(np.float32)
    bf = rng.normal(0, 0.3, c["units"]).astype(np.float32)
    return c["x_shape"], wf, bf, _fc_out_shape(c["x_shape"], k, c["units"], c.get("keep", False)), c.get("keep", False)


@pytest.mark.parametrize("case", sorted(FC_CASES))
def test_fully_connected_float(case):
    x_shape, wf, bf, out_shape, keep = _fc_case(case)
    model, _ = fc_model("float32", x_shape, wf, bf, out_shape=out_shape, keep_num_dims=keep)
    y = compare_with_litert(model, seed=2)[0]
    assert y.shape == out_shape


@pytest.mark.parametrize("case", sorted(set(FC_CASES) - {"batch1_k1"}))  # 5 outputs of 1 input: not informative
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
def test_fully_connected_int8(case, per_channel):
    run_fc_int8(*_fc_case(case), per_channel=per_channel)


@pytest.mark.parametrize("bias_mode", ["omitted", "none"])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_fully_connected_without_bias(bias_mode, dtype):
    x_shape, wf, _, out_shape, keep = _fc_case("2d", seed=3)
    if dtype == "float32":
        model, _ = fc_model("float32", x_shape, wf, None, out_shape=out_shape, bias_mode=bias_mode)
        compare_with_litert(model, seed=4)
    else:
        run_fc_int8(x_shape, wf, None, out_shape, bias_mode=bias_mode, x_zp=-128, x_scale=0.01)


@pytest.mark.parametrize("act", [RELU, RELU6, RELU_N1], ids=["relu", "relu6", "relu_n1_to_1"])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_fully_connected_fused_activation(act, dtype):
    x_shape, wf, bf, out_shape, keep = _fc_case("3d_keep", seed=5)
    wf = wf * 4  # pre-activation values well past 6 and outside [-1, 1]
    if dtype == "float32":
        model, _ = fc_model("float32", x_shape, wf, bf, out_shape=out_shape, keep_num_dims=keep, act=act)
        compare_with_litert(model, seed=6)
    else:
        run_fc_int8(x_shape, wf, bf, out_shape, keep, act=act, x_scale=0.02 if act == RELU6 else 0.005)


def test_fully_connected_int8_per_tensor_weight_zero_point():
    # TFLite applies the filter zero point for per-tensor weights (not for per-channel ones)
    x_shape, wf, bf, out_shape, keep = _fc_case("2d", seed=7)
    run_fc_int8(x_shape, wf, bf, out_shape, per_channel=False, w_zp=3)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_fully_connected_runtime_weights(dtype):
    x_shape, wf, bf, out_shape, keep = _fc_case("2d", seed=8)
    if dtype == "float32":
        model, extra = fc_model("float32", x_shape, wf, bf, out_shape=out_shape, const_weights=False)
        x = np.random.default_rng(9).uniform(-3, 3, x_shape).astype(np.float32)
        compare_with_litert(model, [x] + extra)
    else:
        run_fc_int8(x_shape, wf, bf, out_shape, per_channel=False, const_weights=False)


@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
def test_fully_connected_int8_fixed_point_requant_matches_tflm(per_channel, monkeypatch):
    """LiteRT's reference FC requantizes in double; TFLM (and LiteRT's optimized kernels) in fixed point.

    edgerun follows LiteRT's reference by default; the ``fixed_point_requant`` switch gives TFLM's bytes.
    Both rules are checked on a case where they disagree somewhere, so neither check is vacuous.
    """
    from edgerun.ops.fully_connected import FullyConnected

    rng = np.random.default_rng(10)
    x_shape, units, k = (64, 40), 50, 40
    wf = rng.normal(0, 1 / np.sqrt(k), (units, k)).astype(np.float32)
    bf = rng.normal(0, 0.3, units).astype(np.float32)
    out_shape = (64, 50)
    ref = run_fc_int8(x_shape, wf, bf, out_shape, per_channel=per_channel, x_zp=-7, x_scale=0.043)
    monkeypatch.setattr(FullyConnected, "fixed_point_requant", True)
    fixed = run_fc_int8(x_shape, wf, bf, out_shape, per_channel=per_channel, x_zp=-7, x_scale=0.043,
                         oracle="tflm")
    assert (ref != fixed).any(), "the two requantization rules agree everywhere on this case"
    assert np.abs(ref.astype(int) - fixed).max() == 1


# --- BATCH_MATMUL ----------------------------------------------------------------------------

def bmm_model(dtype, xs, ys, out_shape, adj_x, adj_y, *, qx=None, qy=None, qo=None, y_const=None, out_dtype=None):
    b = ModelBuilder()
    x = b.input("x", xs, dtype, qx)
    y = b.const("y", y_const, dtype, qy) if y_const is not None else b.input("y", ys, dtype, qy)
    o = b.tensor("out", out_shape, out_dtype or dtype, qo)
    b.op("BATCH_MATMUL", [x, y], [o], adj_x=adj_x, adj_y=adj_y)
    b.output(o)
    return b.to_bytes()


def _bmm_shapes(xs, ys, adj_x, adj_y):
    rows = xs[-1] if adj_x else xs[-2]
    cols = ys[-2] if adj_y else ys[-1]
    return tuple(np.broadcast_shapes(xs[:-2], ys[:-2])) + (rows, cols)


BMM_CASES = {
    "2d": ((5, 7), (7, 4)),
    "3d_same_batch": ((3, 4, 6), (3, 6, 5)),
    "broadcast_lhs_batch": ((1, 4, 6), (3, 6, 5)),
    "broadcast_both": ((2, 1, 3, 4), (1, 3, 4, 2)),
    "rank_mismatch": ((2, 2, 3, 5), (5, 4)),
    "rank_mismatch_rhs_batched": ((3, 5), (2, 5, 6)),
    "5d": ((2, 1, 2, 3, 4), (1, 2, 1, 4, 3)),
    "long_k_chunked": ((2, 3, 1100), (2, 1100, 4)),
}


def _adj(shape, adj):
    return shape[:-2] + (shape[-1], shape[-2]) if adj else shape


@pytest.mark.parametrize("case", sorted(BMM_CASES))
@pytest.mark.parametrize("adj", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["nn", "tn", "nt", "tt"])
def test_batch_matmul_float(case, adj):
    xs, ys = BMM_CASES[case]
    xs, ys = _adj(xs, adj[0]), _adj(ys, adj[1])
    out_shape = _bmm_shapes(xs, ys, *adj)
    # LiteRT sums K products one by one in float32; over K = 1100 its rounding error reaches ~1e-4
    # absolute on outputs of magnitude ~100, so the long case is compared at 1e-5 of that scale
    atol = 1e-3 if case == "long_k_chunked" else 1e-6
    y = compare_with_litert(bmm_model("float32", xs, ys, out_shape, *adj), seed=11, atol=atol)[0]
    assert y.shape == out_shape


def _run_bmm_int8(xs, ys, adj, *, x_zp=-5, y_zp=9, const_rhs=False, out_dtype="int8", seed=12):
    rng = np.random.default_rng(seed)
    qx, qy = (np.float32(0.02), x_zp), (np.float32(0.03), y_zp)
    xq = rng.integers(-128, 128, xs).astype(np.int8)
    yq = rng.integers(-128, 128, ys).astype(np.int8)
    out_shape = _bmm_shapes(xs, ys, *adj)
    xf = ((xq.astype(np.float32) - x_zp) * qx[0]).astype(np.float32)
    yf = ((yq.astype(np.float32) - y_zp) * qy[0]).astype(np.float32)
    pre = run_litert(bmm_model("float32", xs, ys, out_shape, *adj), [xf, yf])[0]
    qo = out_qparams(pre) if out_dtype == "int8" else None
    model = bmm_model("int8", xs, ys, out_shape, *adj, qx=qx, qy=qy, qo=qo, y_const=yq if const_rhs else None,
                      out_dtype=out_dtype)
    got = compare_with_litert(model, [xq] if const_rhs else [xq, yq])[0]
    if out_dtype == "int8":
        assert_informative(got, NONE, *qo)
    return got


@pytest.mark.parametrize("case", sorted(BMM_CASES))
@pytest.mark.parametrize("adj", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["nn", "tn", "nt", "tt"])
def test_batch_matmul_int8(case, adj):
    xs, ys = BMM_CASES[case]
    _run_bmm_int8(_adj(xs, adj[0]), _adj(ys, adj[1]), adj)


@pytest.mark.parametrize("zps", [(0, 0), (-128, 0), (0, 127), (-128, 127)])
def test_batch_matmul_int8_zero_points(zps):
    _run_bmm_int8((2, 4, 33), (2, 33, 5), (False, False), x_zp=zps[0], y_zp=zps[1])


def test_batch_matmul_int8_constant_rhs():
    _run_bmm_int8((3, 4, 8), (6, 8), (False, True), const_rhs=True)


@pytest.mark.parametrize("zps", [(0, 0), (-5, 9)])
def test_batch_matmul_int8_to_int32(zps):
    # LiteRT's int8 x int8 -> int32 path returns raw sum(x * y): zero points are not subtracted
    acc = _run_bmm_int8((2, 3, 9), (2, 9, 4), (False, False), x_zp=zps[0], y_zp=zps[1], out_dtype="int32")
    assert acc.dtype == np.int32 and np.abs(acc).max() > 1000


# --- helpers: exact GEMM, rounding, requantizer -------------------------------------------

def test_exact_int_matmul_chunks_beyond_float32():
    rng = np.random.default_rng(13)
    a = rng.integers(-128, 128, (7, 3000)).astype(np.int64)
    b = rng.integers(-127, 128, (3000, 5)).astype(np.int64)
    want = a @ b
    chunk = exact_chunk(128, 127)
    got = exact_int_matmul(a.astype(np.float32), b.astype(np.float32), chunk)
    assert np.array_equal(got.astype(np.int64), want)
    # a single float32 GEMM of this length is not exact in general; the chunked one is
    assert chunk < 3000


def test_round_half_away():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, -0.49999999999999994, 2.4, -2.6])
    assert round_half_away(x).tolist() == [1, 2, 3, -1, -2, -3, 0, 0, 2, -3]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(1 << 31), (1 << 31) - 1), min_size=1, max_size=16),
       st.lists(st.floats(1e-9, 50.0, allow_nan=False), min_size=1, max_size=4),
       st.integers(-128, 127))
def test_requantizer_matches_fixedpoint(accs, reals, zp):
    """The fast Requantizer is bit-exact with fixedpoint.multiply_by_quantized_multiplier."""
    pairs = [quantize_multiplier(r) for r in reals]
    m = np.array([p[0] for p in pairs], np.int64)
    s = np.array([p[1] for p in pairs], np.int64)
    x = np.array(accs, np.int64)[:, None] * np.ones(len(reals), np.int64)
    x = np.concatenate([x, np.array([[1 << 20], [-(1 << 20)], [3 << 10], [-(3 << 10)]]) * np.ones(len(reals), np.int64)])
    want = np.clip(multiply_by_quantized_multiplier(x, m, s) + zp, -128, 127)
    got = Requantizer(m, s, zp, -128, 127)(x)
    assert np.array_equal(got.astype(np.int64), want)


def test_requantizer_ties_match_fixedpoint():
    """Power-of-two and 3*2^k multipliers put many products exactly on rounding ties (both rounding steps)."""
    reals = [2.0 ** -k for k in range(0, 14)] + [0.75, 0.375, 1.5, 3.0, 0.1875 / 64]
    pairs = [quantize_multiplier(r) for r in reals]
    m = np.array([p[0] for p in pairs], np.int64)
    s = np.array([p[1] for p in pairs], np.int64)
    x = np.arange(-5000, 5000, dtype=np.int64)[:, None]
    want = np.clip(multiply_by_quantized_multiplier(x, m, s) - 3, -128, 127)
    assert np.array_equal(Requantizer(m, s, -3, -128, 127)(x).astype(np.int64), want)
    for i in range(len(reals)):  # the uniform-shift fast path too
        got = Requantizer(m[i], s[i], -3, -128, 127)(x[:, 0])
        assert np.array_equal(got.astype(np.int64), want[:, i])


def test_scratch_buffers_fit_any_size_sequence():
    from edgerun.ops.common import scratch

    # growing requests just past an earlier size: the reused buffer must still hold the aligned view
    for base in range(1, 120):
        key = f"test.scratch.{base}"
        for n in range(base, base + 70):
            a = scratch(key, (n,), np.int8)
            assert a.shape == (n,) and a.ctypes.data % 64 == 0
            a[...] = 1
    for n in (1000, 3, 999, 1001):
        for dtype in (np.int64, np.float32):
            a = scratch("test.scratch.mixed", (n, 1), dtype)
            assert a.shape == (n, 1) and a.dtype == dtype and a.ctypes.data % 64 == 0
