"""QUANTIZE, DEQUANTIZE and CAST against LiteRT's reference kernels (int outputs bit-exact; float
outputs compared within rtol 1e-5, and exactly where the arithmetic is a single rounding)."""

import numpy as np
import pytest

from edgerun.errors import UnsupportedOpError
from edgerun.ir import ModelBuilder
from edgerun.testing import compare_with_litert, run_edgerun, run_litert
from tests.support.platform_semantics import ARM, quantize_conversion_differs, quantize_float

# NaN, infinities, values past int32, exact halves (round half away from zero), then ordinary values
SPECIAL = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e20, 2.5, -2.5, 0.5, -0.5, 1.5, 0.25,
                    0.75, 63.75, -64.25, 0.0, -0.0], np.float32)


def _float_inputs(seed, n=400, scale=3.0, center=0.0):
    rng = np.random.default_rng(seed)
    return np.concatenate([SPECIAL, (center + rng.normal(scale=scale, size=n)).astype(np.float32)])


def _model(op, src, dst, shape, qi=None, qo=None, const=None, **options):
    b = ModelBuilder()
    if const is None:
        x = b.input("x", shape, src, qi)
    else:
        x = b.const("x", const, src, qi)
    y = b.tensor("y", shape, dst, qo)
    b.op(op, [x], [y], **options)
    b.output(y)
    return b.to_bytes()


def _assert_informative(y, qmin, qmax):
    y = np.asarray(y).astype(np.int64)
    assert np.mean((y == qmin) | (y == qmax)) <= 0.3, "the quantized output is mostly saturated"
    assert len(np.unique(y)) >= 20


# --- QUANTIZE -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dst,q", [("int8", (1.0, 0)), ("int8", (0.02, -10)), ("int8", (0.05, 17)), ("int8", (0.0123, -128)),
                                   ("uint8", (0.03, 128)), ("uint8", (0.02, 3)), ("int16", (0.001, 0))])
def test_quantize_float32_per_tensor(dst, q):
    info = np.iinfo(np.dtype(dst))
    middle = q[0] * ((info.min + info.max) / 2 - q[1])  # the real value at the middle of the range
    x = _float_inputs(1, scale=q[0] * 60, center=middle)
    m = _model("QUANTIZE", "float32", dst, x.shape, qo=q)
    got, want = run_edgerun(m, [x])[0], run_litert(m, [x])[0]
    assert got.dtype == want.dtype == np.dtype(dst)
    # NaN and quotients outside int32 go through the CPU's float->int32 conversion in LiteRT
    # (docs/platforms.md): x86 gives INT32_MIN, ARM saturates and gives 0 for NaN
    odd = quantize_conversion_differs(x, q[0])
    assert odd[:6].all() and not odd[len(SPECIAL):].any()
    np.testing.assert_array_equal(got[~odd], want[~odd])
    np.testing.assert_array_equal(got, quantize_float(x, *q, dst, arm=False))  # every CPU: x86's bytes
    np.testing.assert_array_equal(want[odd], quantize_float(x[odd], *q, dst, arm=ARM))  # LiteRT: its CPU's
    _assert_informative(got[len(SPECIAL):], info.min, info.max)


@pytest.mark.parametrize("dst", ["int8", "uint8"])
@pytest.mark.parametrize("axis", [0, 2])
def test_quantize_float32_per_channel(dst, axis):
    shape = (3, 5, 4)
    rng = np.random.default_rng(axis)
    x = rng.normal(scale=2.0, size=shape).astype(np.float32)
    n = shape[axis]
    scales = np.linspace(0.01, 0.04, n).astype(np.float32)
    zps = (np.arange(n) * 7 - 5) if dst == "int8" else (np.arange(n) * 7 + 100)
    got = compare_with_litert(_model("QUANTIZE", "float32", dst, shape, qo=(scales, zps, axis)), [x])[0]
    assert len(np.unique(got)) >= 20


# (src, qi, dst, qo): real multiplier s_in/s_out above and below 1, int8 <-> uint8 by 128 shifts
REQUANTIZE = [("int8", (0.05, -3), "int8", (0.02, 10)),      # 2.5
              ("int8", (0.05, -3), "int8", (0.2, 10)),       # 0.25
              ("int8", (0.1, 5), "uint8", (0.1, 133)),       # same scale, zero point +128
              ("int8", (0.1, 5), "uint8", (0.07, 120)),
              ("int8", (0.01, -1), "int16", (0.0001, 0)),
              ("uint8", (0.04, 128), "int8", (0.04, 0)),     # same scale, zero point -128
              ("uint8", (0.04, 128), "uint8", (0.1, 100)),
              ("uint8", (0.04, 120), "int16", (0.001, 0)),
              ("int16", (0.0005, 0), "int8", (0.02, -4)),
              ("int16", (0.0005, 0), "int16", (0.0002, 0)),
              ("int16", (0.0005, 0), "int32", (0.00001, 0))]


@pytest.mark.parametrize("src,qi,dst,qo", REQUANTIZE)
def test_quantize_requantize(src, qi, dst, qo):
    info = np.iinfo(np.dtype(src))
    if src == "int16":
        x = np.arange(-20000, 20000, 37).astype(np.int16)
    else:
        x = np.arange(info.min, info.max + 1).astype(src)
    got = compare_with_litert(_model("QUANTIZE", src, dst, x.shape, qi, qo), [x])[0]
    assert len(np.unique(got)) >= 30


@pytest.mark.parametrize("src,dst", [("int8", "int32"), ("uint8", "int32"), ("int16", "uint8"),
                                     ("float32", "int32")])
def test_quantize_unsupported_pairs_refused_like_litert(src, dst):
    model = _model("QUANTIZE", src, dst, (4,), None if src == "float32" else (0.1, 0), (0.1, 0))
    x = np.zeros(4, np.dtype(src))
    with pytest.raises(RuntimeError):  # LiteRT fails the allocation or the invoke
        run_litert(model, [x])
    with pytest.raises(UnsupportedOpError):
        run_edgerun(model, [x])


# --- DEQUANTIZE -----------------------------------------------------------------------------------

@pytest.mark.parametrize("src,q", [("int8", (0.05, -3)), ("int8", (0.3217, 127)), ("uint8", (0.02, 128)),
                                   ("int16", (0.00031, 0))])
def test_dequantize_per_tensor(src, q):
    info = np.iinfo(np.dtype(src))
    x = np.arange(max(info.min, -3000), min(info.max, 3000) + 1).astype(src)
    compare_with_litert(_model("DEQUANTIZE", src, "float32", x.shape, q), [x], rtol=0, atol=0)


def _weights_plus_input(w_tensor, shape, b: ModelBuilder):
    """x + DEQUANTIZE(w): the float weights are folded once, then used at run time."""
    w = b.tensor("w_float", shape, "float32")
    b.op("DEQUANTIZE", [w_tensor], [w])
    x = b.input("x", shape, "float32")
    y = b.tensor("y", shape, "float32")
    b.op("ADD", [x, w], [y])
    b.output(y, w)
    return b.to_bytes()


@pytest.mark.parametrize("axis", [0, 3])
def test_dequantize_per_channel_int8_weights(axis):
    shape = (4, 3, 3, 6)
    rng = np.random.default_rng(axis)
    wq = rng.integers(-127, 128, size=shape).astype(np.int8)
    scales = rng.uniform(0.001, 0.05, size=shape[axis]).astype(np.float32)
    b = ModelBuilder()
    wt = b.const("w", wq, "int8", quant=(scales, np.zeros(shape[axis], np.int64), axis))
    model = _weights_plus_input(wt, shape, b)
    x = rng.normal(size=shape).astype(np.float32)
    _, w = compare_with_litert(model, [x], rtol=0, atol=0)
    bshape = [1] * 4
    bshape[axis] = -1
    np.testing.assert_array_equal(w, scales.reshape(bshape) * wq.astype(np.float32))


def test_dequantize_float16_weights():
    shape = (2, 5, 7)
    rng = np.random.default_rng(4)
    wh = rng.normal(size=shape).astype(np.float16)
    b = ModelBuilder()
    wt = b.const("w", wh, "float16")
    model = _weights_plus_input(wt, shape, b)
    _, w = compare_with_litert(model, [rng.normal(size=shape).astype(np.float32)], rtol=0, atol=0)
    np.testing.assert_array_equal(w, wh.astype(np.float32))


def test_dequantize_float16_runtime_input():
    x = np.array([0, -0.0, 1e-7, 65504, -65504, np.inf, -np.inf, 0.333], np.float16)
    compare_with_litert(_model("DEQUANTIZE", "float16", "float32", x.shape), [x], rtol=0, atol=0)


# --- CAST -----------------------------------------------------------------------------------------

CAST_INPUTS = {
    "float32": _float_inputs(9, n=100, scale=200.0),
    "int32": np.array([0, 1, -1, 2**31 - 1, -2**31, 255, 256, -129, 70000, 16777217, -40000], np.int32),
    "int64": np.array([0, 1, -1, 2**40 + 3, -2**40, 255, 256, -129, 2**63 - 1, 16777217, 2**31], np.int64),
    "int8": np.arange(-128, 128).astype(np.int8),
    "uint8": np.arange(256).astype(np.uint8),
    "int16": np.arange(-32768, 32768, 97).astype(np.int16),
    "bool": np.array([True, False, True, True, False]),
}
CAST_OUTPUTS = ["bool", "int8", "uint8", "int16", "int32", "int64", "float32", "uint16", "uint32",
                "float16", "float64"]


@pytest.mark.parametrize("src", list(CAST_INPUTS))
@pytest.mark.parametrize("dst", CAST_OUTPUTS)
def test_cast(src, dst):
    x = CAST_INPUTS[src]
    got = compare_with_litert(_model("CAST", src, dst, x.shape), [x], rtol=0, atol=0)[0]
    assert got.dtype == np.dtype(dst)


def test_cast_float_to_int_saturates():
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 300.7, -300.7, -0.9], np.float32)
    got = compare_with_litert(_model("CAST", "float32", "int8", x.shape), [x])[0]
    np.testing.assert_array_equal(got, [127, 127, -128, 127, -128, 127, -128, 0])
