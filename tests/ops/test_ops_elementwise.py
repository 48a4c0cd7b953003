"""ADD, SUB, MUL, DIV, SQUARED_DIFFERENCE, MAXIMUM, MINIMUM, ABS, SQRT, RSQRT, EXP against LiteRT's
reference kernels: int8 bit-exact, float32 within rtol 1e-5.

Quantization configurations are chosen per op so that both requantization regimes are exercised
(real multipliers below and above 1, zero points at the edges of the int8 range) while the int8
outputs stay informative: ``_assert_informative`` rejects outputs that are mostly saturated or
nearly constant, where exact equality would prove little.
"""

import zlib

import numpy as np
import pytest

from edgerun.errors import InputMismatchError, ModelFormatError, UnsupportedOpError
from edgerun.ir import ModelBuilder
from edgerun.schema.tflite import Activation
from edgerun.testing import compare_with_litert, run_edgerun, run_litert
from tests.support.binary_models import all_pairs as _all_pairs
from tests.support.binary_models import binary_model as _binary_model
from tests.support.binary_models import every_pair_against_litert
from tests.support.binary_models import first_kernel as _first_kernel


@pytest.fixture(autouse=True)
def _numpy_add_forms(request, monkeypatch):
    """The ADD/SUB forms' own tests (plane, small form, table) run with edgerun.native's loop
    off; the other tests here take whatever the machine has (tests/ops/test_native.py)."""
    if "plane" in request.node.name or "small" in request.node.name:
        from edgerun.ops.elementwise import Int8AddSub

        monkeypatch.setattr(Int8AddSub, "NATIVE", False)

NONE, RELU, RELU6, RELU_N1 = Activation.NONE, Activation.RELU, Activation.RELU6, Activation.RELU_N1_TO_1
FUSED = ("ADD", "SUB", "MUL", "DIV")
BINARY = ("ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM")

# (shape1, shape2): same shape, scalar, mutual 4-D broadcast, rank-mismatched 5-D broadcast
SHAPES = [((3, 4, 5), (3, 4, 5)),
          ((2, 3, 4), (1,)),
          ((2, 1, 4, 1), (1, 3, 1, 5)),
          ((2, 1, 3, 1, 4), (2, 1, 3, 1))]


def _unary_model(op, dtype, shape, qi=None, qo=None):
    b = ModelBuilder()
    x = b.input("x", shape, dtype, qi)
    y = b.tensor("y", shape, dtype, qo)
    b.op(op, [x], [y])
    b.output(y)
    return b.to_bytes()


def _int8_around(rng, shape, zp, spread):
    """int8 values within ``spread`` of the zero point (clipped), or the whole range for spread 128."""
    if spread >= 128:
        return rng.integers(-128, 128, size=shape).astype(np.int8)
    return np.clip(zp + rng.integers(-spread, spread + 1, size=shape), -128, 127).astype(np.int8)


def _nonzero_divisor(b, zp, min_abs=16):
    """Divisors at least ``min_abs`` steps from the zero point: tiny divisors saturate DIV."""
    v = b.astype(np.int64) - zp
    up = np.where(zp + min_abs <= 127, min_abs, -min_abs)
    v = np.where(np.abs(v) < min_abs, np.where((v < 0) & (zp - min_abs >= -128), -min_abs, up), v)
    return np.clip(zp + v, -128, 127).astype(np.int8)


def _assert_informative(y, min_distinct=6):
    y = np.asarray(y).astype(np.int64)
    saturated = np.mean((y == -128) | (y == 127))
    distinct = len(np.unique(y))
    assert saturated <= 0.5, f"{saturated:.0%} of the int8 outputs are saturated"
    assert distinct >= min(min_distinct, y.size), f"only {distinct} distinct int8 outputs"


# --- int8 binary ops -----------------------------------------------------------------------------

# per op: [(q1, q2, qo, spread1, spread2)], the first with a real multiplier < 1, the second > 1
# (for ADD/SUB/SQUARED_DIFFERENCE: input scale over output scale), the third with inputs whose zero
# points sit at the ends of the int8 range (one-signed real inputs)
INT8_CONFIGS = {
    "ADD": [((0.05, -3), (0.08, 10), (0.1, 5), 128, 128),
            ((0.2, 20), (0.15, -7), (0.05, -2), 20, 20),
            ((0.04, -128), (0.03, 127), (0.06, -20), 128, 128)],
    "SUB": [((0.05, -3), (0.08, 10), (0.1, 5), 128, 128),
            ((0.2, 20), (0.15, -7), (0.05, -2), 20, 20),
            ((0.04, 127), (0.03, -128), (0.08, 100), 128, 128)],
    "MUL": [((0.05, 4), (0.04, -6), (0.2, 3), 128, 128),      # s1 s2 / so = 0.01
            ((0.3, -5), (0.2, 8), (0.04, 1), 9, 9),            # 1.5
            ((0.02, -128), (0.03, 127), (0.2, 100), 128, 128)],
    "DIV": [((0.02, 5), (0.1, -3), (0.05, 0), 128, 128),      # s1 / (s2 so) = 4
            ((0.05, -10), (0.2, 12), (0.5, 2), 128, 6),        # 0.5; small divisors, large quotients
            ((0.03, -128), (0.02, 127), (0.5, 100), 128, 128)],
    "SQUARED_DIFFERENCE": [((0.05, -3), (0.05, 7), (1.0, -128), 128, 128),
                           ((0.1, 4), (0.12, -9), (0.05, -128), 12, 12),
                           ((0.02, 127), (0.03, -128), (0.5, -128), 128, 128)],
    "MAXIMUM": [((0.1, 3), (0.1, 3), (0.1, 3), 128, 128),
                ((0.05, -128), (0.05, -128), (0.05, -128), 128, 128)],
    "MINIMUM": [((0.1, 3), (0.1, 3), (0.1, 3), 128, 128),
                ((0.05, 127), (0.05, 127), (0.05, 127), 128, 128)],
}
INT8_CASES = [(op, i, shapes) for op, cfgs in INT8_CONFIGS.items()
              for i in range(len(cfgs)) for shapes in SHAPES]


@pytest.mark.parametrize("op,cfg,shapes", INT8_CASES,
                         ids=[f"{op}-q{i}-{len(s[0])}d{len(s[1])}d" for op, i, s in INT8_CASES])
def test_binary_int8(op, cfg, shapes):
    q1, q2, qo, sp1, sp2 = INT8_CONFIGS[op][cfg]
    s1, s2 = shapes
    rng = np.random.default_rng(zlib.crc32(repr((op, cfg, s1, s2)).encode()))
    a = _int8_around(rng, s1, q1[1], sp1)
    b = _int8_around(rng, s2, q2[1], sp2)
    if op == "DIV":
        b = _nonzero_divisor(b, q2[1], min_abs=1 if sp2 < 16 else 16)
    act = NONE if op in FUSED else None
    got = compare_with_litert(_binary_model(op, "int8", s1, s2, q1, q2, qo, act), [a, b])
    _assert_informative(got[0], min_distinct=min(6, got[0].size))


@pytest.mark.parametrize("op", FUSED)
@pytest.mark.parametrize("act", [RELU, RELU6, RELU_N1])
def test_binary_int8_fused_activation(op, act):
    q1, q2, qo, sp1, sp2 = INT8_CONFIGS[op][0]
    if op == "DIV":
        q1, q2 = (0.08, 5), (0.05, -3)  # quotients of order 1, so RELU_N1_TO_1 clamps both ways
    qo = (0.02, -20)  # a fine output scale puts the activation bounds inside the int8 range
    rng = np.random.default_rng(7)
    a = _int8_around(rng, (4, 6, 8), q1[1], sp1)
    b = _int8_around(rng, (6, 1), q2[1], sp2)
    if op == "DIV":
        b = _nonzero_divisor(b, q2[1])
    got = compare_with_litert(_binary_model(op, "int8", (4, 6, 8), (6, 1), q1, q2, qo, act), [a, b])[0]
    lo = max(-128, qo[1] + round((-1.0 if act == RELU_N1 else 0.0) / qo[0]))
    assert got.min() >= lo and np.any(got == lo), "the activation's lower bound is not reached"
    assert len(np.unique(got)) >= 6


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE"])
@pytest.mark.parametrize("cfg", [0, 1])
def test_binary_int8_every_input_pair(op, cfg):
    """All 256 x 256 input pairs (255 divisors for DIV): the whole int8 function, not a sample."""
    q1, q2, qo, _, _ = INT8_CONFIGS[op][cfg]
    a = np.arange(-128, 128, dtype=np.int8).reshape(256, 1)
    b = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    if op == "DIV":
        b = b[b != q2[1]].reshape(1, 255)
    got = compare_with_litert(_binary_model(op, "int8", a.shape, b.shape, q1, q2, qo,
                                            NONE if op in FUSED else None), [a, b])
    assert len(np.unique(got[0])) >= 20


UINT8_CASES = [("ADD", (0.05, 120), (0.08, 135), (0.1, 128), NONE),
               ("ADD", (0.2, 10), (0.15, 250), (0.05, 128), RELU),
               ("SUB", (0.05, 128), (0.08, 100), (0.1, 140), NONE),
               ("SUB", (0.2, 128), (0.15, 128), (0.05, 128), RELU6),
               ("MUL", (0.05, 128), (0.04, 120), (0.2, 131), NONE),
               ("MUL", (0.3, 128), (0.2, 128), (0.04, 128), RELU_N1),
               ("DIV", (0.02, 133), (0.1, 125), (0.05, 128), NONE),
               ("DIV", (0.05, 118), (0.2, 140), (0.5, 130), RELU),
               ("MAXIMUM", (0.1, 128), (0.1, 128), (0.1, 128), None),
               ("MINIMUM", (0.1, 0), (0.1, 0), (0.1, 0), None)]


@pytest.mark.parametrize("op,q1,q2,qo,act", UINT8_CASES)
def test_binary_uint8_every_input_pair(op, q1, q2, qo, act):
    """uint8 (the older quantization scheme, still in many published models): every input pair."""
    a = np.arange(256, dtype=np.uint8).reshape(256, 1)
    b = np.arange(256, dtype=np.uint8).reshape(1, 256)
    if op == "DIV":
        b = b[b != q2[1]].reshape(1, 255)
    got = compare_with_litert(_binary_model(op, "uint8", a.shape, b.shape, q1, q2, qo, act), [a, b])[0]
    assert len(np.unique(got)) >= 20


def test_div_int8_by_zero_point_raises():
    a = np.array([1, 2, 3, 4], np.int8)
    b = np.array([1, -3, 2, 5], np.int8)  # -3 is the divisor's zero point, i.e. a real 0
    model = _binary_model("DIV", "int8", (4,), (4,), (0.1, 0), (0.1, -3), (0.1, 0), NONE)
    with pytest.raises(RuntimeError):  # LiteRT fails the allocation or the invoke
        run_litert(model, [a, b])
    with pytest.raises(InputMismatchError, match="division by zero"):
        run_edgerun(model, [a, b])


# --- float32 and int32 binary ops ---------------------------------------------------------------

@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("shapes", SHAPES, ids=[f"{len(a)}d{len(b)}d" for a, b in SHAPES])
def test_binary_float32(op, shapes):
    s1, s2 = shapes
    rng = np.random.default_rng(11)
    a = rng.normal(scale=2.0, size=s1).astype(np.float32)
    b = rng.normal(scale=2.0, size=s2).astype(np.float32)
    if op == "DIV":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    compare_with_litert(_binary_model(op, "float32", s1, s2, act=NONE if op in FUSED else None), [a, b])


@pytest.mark.parametrize("op", FUSED)
@pytest.mark.parametrize("act", [RELU, RELU6, RELU_N1])
def test_binary_float32_fused_activation(op, act):
    rng = np.random.default_rng(5)
    a = rng.uniform(-8, 8, size=(3, 1, 4)).astype(np.float32)
    b = rng.uniform(0.5, 3, size=(5, 4)).astype(np.float32) * rng.choice([-1, 1], size=(5, 4)).astype(np.float32)
    got = compare_with_litert(_binary_model(op, "float32", a.shape, b.shape, act=act), [a, b])[0]
    lo, hi = {RELU: (0, np.inf), RELU6: (0, 6), RELU_N1: (-1, 1)}[act]
    assert got.min() == lo and got.max() <= hi


def test_binary_float32_special_values():
    """inf, NaN, overflow and division by zero: the arithmetic ops clamp to +-FLT_MAX, as LiteRT's
    ActivationFunctionWithMinMax does, and MAXIMUM/MINIMUM keep LiteRT's NaN rule."""
    a = np.array([3e38, np.inf, np.nan, 1, -3e38, 0, 2, -1, -np.inf, 5], np.float32)
    b = np.array([3e38, 1, 1, np.nan, -3e38, 0, 0, 0, 2, -np.inf], np.float32)
    for op in BINARY:
        got = compare_with_litert(_binary_model(op, "float32", (10,), (10,),
                                                act=NONE if op in FUSED else None), [a, b])[0]
        if op == "ADD":
            assert got[0] == np.finfo(np.float32).max
        if op == "MAXIMUM":
            assert got[2] == 1 and np.isnan(got[3])


INT32_CASES = [("ADD", NONE), ("ADD", RELU), ("SUB", RELU6), ("MUL", NONE), ("MUL", RELU_N1),
               ("MAXIMUM", None), ("MINIMUM", None)]


@pytest.mark.parametrize("op,act", INT32_CASES)
def test_binary_int32(op, act):
    rng = np.random.default_rng(3)
    a = rng.integers(-1000, 1000, size=(2, 3, 4)).astype(np.int32)
    b = rng.integers(-1000, 1000, size=(3, 1)).astype(np.int32)
    a[0, 0, 0], b[0, 0] = 2**31 - 1, 7  # ADD and MUL wrap around like the C++ kernels
    compare_with_litert(_binary_model(op, "int32", a.shape, b.shape, act=act), [a, b])


@pytest.mark.parametrize("dtype", ["float32", "int8", "int32"])
@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL", "MAXIMUM"])
@pytest.mark.parametrize("s2", [(), (4,)])
def test_binary_rank0(dtype, op, s2):
    q = (0.1, 2) if dtype == "int8" else None
    a = np.array(5, dtype=dtype)
    b = np.arange(7, 7 + int(np.prod(s2)), dtype=dtype).reshape(s2)
    compare_with_litert(_binary_model(op, dtype, (), s2, q, q, q, NONE if op in FUSED else None), [a, b])


def test_incompatible_broadcast_raises():
    model = _binary_model("ADD", "float32", (2, 3), (2, 3), act=NONE)
    from edgerun.runtime.interpreter import Interpreter
    it = Interpreter(model_content=model)
    it.resize_tensor_input(it.get_input_details()[1]["index"], (4, 3))
    with pytest.raises(ModelFormatError, match="do not broadcast"):
        it.allocate_tensors()


def test_unsupported_activation_raises():
    model = _binary_model("ADD", "float32", (2, 3), (2, 3), act=Activation.TANH)
    with pytest.raises(UnsupportedOpError):
        run_edgerun(model, [np.zeros((2, 3), np.float32)] * 2)


# --- unary ops ------------------------------------------------------------------------------------

UNARY_INT8 = {
    # (qi, qo): multiplier si/so > 1 and < 1, zero points at the edges
    "ABS": [((0.05, -3), (0.03, -100)), ((0.02, 10), (0.05, -128)), ((0.1, 127), (0.1, -128))],
    "SQRT": [((0.05, -3), (0.03, -100)), ((0.1, -128), (0.02, -128)), ((0.003, 20), (0.005, -128))],
    "RSQRT": [((0.05, -3), (0.03, -128)), ((0.1, -128), (0.004, -128)), ((0.01, 50), (0.05, -120))],
    "EXP": [((0.02, 0), (0.05, -128)), ((0.03, -30), (0.5, -128)), ((0.01, -128), (0.1, -128))],
}
UNARY_CASES = [(op, i) for op, cfgs in UNARY_INT8.items() for i in range(len(cfgs))]


@pytest.mark.parametrize("op,cfg", UNARY_CASES, ids=[f"{op}-q{i}" for op, i in UNARY_CASES])
def test_unary_int8_every_input(op, cfg):
    qi, qo = UNARY_INT8[op][cfg]
    lo = qi[1] if op in ("SQRT", "RSQRT") else -128  # both are defined on non-negative reals only
    x = np.arange(lo, 128, dtype=np.int64).astype(np.int8)
    x = np.concatenate([x, x[::-1]]).reshape(2, -1)
    got = compare_with_litert(_unary_model(op, "int8", x.shape, qi, qo), [x])[0]
    _assert_informative(got, min_distinct=6)


@pytest.mark.parametrize("op", ["SQRT", "RSQRT"])
def test_unary_int8_negative_input_raises(op):
    model = _unary_model(op, "int8", (3,), (0.1, 0), (0.1, 0))
    x = np.array([4, -1, 9], np.int8)
    with pytest.raises(RuntimeError):  # LiteRT fails the allocation or the invoke
        run_litert(model, [x])
    with pytest.raises(InputMismatchError, match="non-negative"):
        run_edgerun(model, [x])


@pytest.mark.parametrize("op", ["ABS", "SQRT", "RSQRT", "EXP"])
def test_unary_float32(op):
    rng = np.random.default_rng(2)
    if op in ("SQRT", "RSQRT"):
        x = rng.uniform(1e-3, 50, size=(4, 5, 6))
    else:
        x = rng.uniform(-10, 10, size=(4, 5, 6))
    x = x.astype(np.float32)
    compare_with_litert(_unary_model(op, "float32", x.shape), [x])


def test_unary_float32_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1e-30, 88.8, -104.0], np.float32)
    for op in ("ABS", "SQRT", "RSQRT", "EXP"):
        compare_with_litert(_unary_model(op, "float32", x.shape), [x])


@pytest.mark.parametrize("op", ["ADD", "SUB"])
@pytest.mark.parametrize("const_shape", [None, (16,), (1, 6, 16), (2, 5, 6, 16)],
                         ids=["two-inputs", "per-channel", "rows", "full"])
def test_binary_int8_chunked_lookup(op, const_shape, monkeypatch):
    """Large int8 ADD/SUB outputs look their table up a chunk at a time (TAKE_CHUNK; here 50
    values, so chunks end mid-row and the last is short): saturating output scale, negative
    zero points, a second operand that is an input or a constant broadcast over leading
    dimensions; equal to LiteRT and to the unchunked lookup."""
    from edgerun.ops import common, elementwise

    shape = (2, 5, 6, 16)
    q1, q2, qo = (0.05, -100), (0.03, 90 if op == "ADD" else -90), (0.02, -7)  # both ends saturate
    rng = np.random.default_rng(21)
    a = rng.integers(-128, 128, shape).astype(np.int8)
    b = ModelBuilder()
    x = b.input("x", shape, "int8", q1)
    if const_shape is None:
        z = b.input("z", shape, "int8", q2)
        inputs = [a, rng.integers(-128, 128, shape).astype(np.int8)]
    else:
        z = b.const("z", rng.integers(-128, 128, const_shape).astype(np.int8), "int8", q2)
        inputs = [a]
    y = b.tensor("y", shape, "int8", qo)
    b.op(op, [x, z], [y], fused_activation_function=NONE)
    b.output(y)
    model = b.to_bytes()
    monkeypatch.setattr(elementwise._Int8Binary, "PLAN_MAX_VALUES", 0)  # the eval path, not a bound call
    whole = run_edgerun(model, inputs)[0]
    monkeypatch.setattr(common, "TAKE_CHUNK", 50)
    monkeypatch.setattr(elementwise, "TAKE_CHUNK", 50)
    chunked = compare_with_litert(model, inputs)[0]
    assert chunked.tobytes() == whole.tobytes()
    assert (chunked == 127).any() and (chunked == -128).any()


SMALL_CASES = [("int8", "ADD", (0.05, -100), (0.03, 90), (0.02, -7), NONE),  # both ends saturate
               ("int8", "SUB", (0.05, -100), (0.03, -90), (0.02, -7), NONE),
               ("int8", "ADD", (0.1, 3), (0.02, -128), (0.05, -120), RELU),
               ("int8", "SUB", (0.004, -1), (0.2, 50), (0.03, -100), RELU6),
               ("int8", "ADD", (0.02, 0), (0.03, 5), (0.01, -28), RELU_N1),  # mostly saturated
               ("uint8", "ADD", (0.05, 120), (0.08, 135), (0.1, 128), NONE),
               ("uint8", "SUB", (0.2, 128), (0.15, 128), (0.05, 128), RELU6)]


@pytest.mark.parametrize("dtype,op,q1,q2,qo,act", SMALL_CASES)
@pytest.mark.parametrize("layout", ["broadcast", "same-shape"])
def test_add_sub_small_outputs_without_64k_table(dtype, op, q1, q2, qo, act, layout, monkeypatch):
    """ADD/SUB of two variable operands with small outputs run from two 256-entry tables and a
    bucketed output map instead of the 64K table: every input pair (as a broadcast, the eval
    path; as two same-shape tensors, the invoke plan's bound call, here with the plan taken for
    a large one) equals LiteRT."""
    from edgerun.ops import conv
    from edgerun.ops.elementwise import Int8AddSub

    monkeypatch.setattr(Int8AddSub, "SMALL_MAX_VALUES", 1 << 16)
    monkeypatch.setattr(Int8AddSub, "LINE", False)  # the plane (test_add_sub_plane_*) comes first
    monkeypatch.setattr(conv, "SMALL_ARENA_BYTES", 0)
    a, b = _all_pairs(dtype, layout)
    model = _binary_model(op, dtype, a.shape, b.shape, q1, q2, qo, act)
    kernel = _first_kernel(model)
    assert kernel.small is not None and kernel.table is None
    got = compare_with_litert(model, [a, b])[0]
    assert len(np.unique(got)) >= 20


@pytest.mark.parametrize("op,q1,q2,qo,form", [("ADD", (0.05, -100), (0.03, -90), (0.02, -7), "small"),
                                             ("SUB", (0.05, -100), (0.03, -90), (0.02, -7), "small"),
                                             ("ADD", (0.0949, -57), (0.1322, 9), (0.1615, -15), "line"),
                                             ("SUB", (0.06, 10), (0.05, -20), (0.09, 3), "line")])
def test_add_sub_small_plan_takes_the_table_back(op, q1, q2, qo, form, monkeypatch):
    """In a small plan (MLPerf Tiny-class) a bound ADD/SUB rebuilds its 64K table from the small
    form or the plane (their extra passes cost more there than the table's memory): every input
    pair equals LiteRT (the 192 KB arena of this all-pairs model taken for a small one)."""
    from edgerun.ops import conv
    from edgerun.ops.elementwise import Int8AddSub
    from edgerun.runtime.interpreter import Interpreter

    monkeypatch.setattr(Int8AddSub, "SMALL_MAX_VALUES", 1 << 16)
    monkeypatch.setattr(Int8AddSub, "LINE", form == "line")
    codes = np.arange(256, dtype=np.uint8).view(np.int8)
    a, b = np.repeat(codes, 256).reshape(256, 256), np.tile(codes, 256).reshape(256, 256)
    model = _binary_model(op, "int8", a.shape, b.shape, q1, q2, qo, NONE)
    monkeypatch.setattr(conv, "SMALL_ARENA_BYTES", 0)  # first: the form this model takes
    it = Interpreter(model_content=model)
    it.allocate_tensors()
    kernel = it.steps()[0].kernel
    assert (kernel.line if form == "line" else kernel.small) is not None and kernel.table is None
    monkeypatch.setattr(conv, "SMALL_ARENA_BYTES", 1 << 20)
    it = Interpreter(model_content=model)
    it.allocate_tensors()
    kernel = it.steps()[0].kernel
    assert kernel.small is None and kernel.line is None and kernel.table is not None
    assert kernel.table.size == 1 << 16
    got = compare_with_litert(model, [a, b])[0]
    assert (got == 127).any() and (got == -128).any()


#: two variable operands the fitted float32 plane takes (scales of the kind a converter writes;
#: the first two are iris landmark's, the third saturates low only)
LINE_CASES = [("int8", "ADD", (0.0949, -57), (0.1322, 9), (0.1615, -15), NONE),
              ("int8", "ADD", (0.0730, -92), (0.0429, 7), (0.0805, -53), NONE),
              ("int8", "ADD", (0.03, -128), (0.05, -128), (0.06, -128), RELU),
              ("int8", "SUB", (0.06, 10), (0.05, -20), (0.09, 3), NONE),
              ("int8", "ADD", (0.1, 3), (0.02, -128), (0.05, -120), RELU),
              ("int8", "SUB", (0.004, -1), (0.2, 50), (0.03, -100), RELU6),
              ("int8", "ADD", (0.02, 0), (0.03, 5), (0.01, -28), RELU_N1),
              ("uint8", "ADD", (0.05, 120), (0.04, 110), (0.07, 100), NONE),
              ("uint8", "SUB", (0.2, 128), (0.15, 128), (0.05, 128), RELU6)]


@pytest.mark.parametrize("dtype,op,q1,q2,qo,act", LINE_CASES)
@pytest.mark.parametrize("layout", ["broadcast", "same-shape", "chunks"])
def test_add_sub_plane_without_64k_table(dtype, op, q1, q2, qo, act, layout, monkeypatch):
    """ADD/SUB of two variable operands as one fitted float32 plane (``Int8AddSub._prepare_line``:
    two multiplies, two adds, the reachable clamps, a cast), no table: every input pair equals
    LiteRT, as a broadcast (the eval path), as two same-shape tensors (the invoke plan's bound
    call) and in passes of 1000 values."""
    from edgerun.ops import conv
    from edgerun.ops.elementwise import Int8AddSub

    monkeypatch.setattr(conv, "SMALL_ARENA_BYTES", 0)
    if layout == "chunks":
        monkeypatch.setattr(Int8AddSub, "LINE_CHUNK", 1000)
    kernel = every_pair_against_litert(op, dtype, q1, q2, qo, act, layout)
    assert kernel.line is not None and kernel.table is None and kernel.small is None


def test_add_sub_plane_is_checked_on_every_pair(monkeypatch):
    """A plane is kept only when its own float32 passes equal the reference on all 65,536 input
    pairs: with slopes 0.1 % off (no plane fits) the node keeps the 64K table, still exact; a
    model whose scales put pairs exactly on the reference's rounding ties (halves rounded away
    from zero, which no floor of a plane gives) keeps it too."""
    from edgerun.ops import conv, elementwise
    from edgerun.runtime.interpreter import Interpreter

    monkeypatch.setattr(conv, "SMALL_ARENA_BYTES", 0)
    codes = np.arange(256, dtype=np.uint8).view(np.int8)
    a, b = np.repeat(codes, 256).reshape(256, 256), np.tile(codes, 256).reshape(256, 256)
    fitting = _binary_model("ADD", "int8", a.shape, b.shape, (0.0949, -57), (0.1322, 9), (0.1615, -15), NONE)
    ties = _binary_model("ADD", "int8", a.shape, b.shape, (0.1, 0), (0.1, 0), (0.2, 0), NONE)
    around = elementwise._f32_around
    monkeypatch.setattr(elementwise, "_f32_around", lambda x: around(x * 1.001))
    for model in (fitting, ties):
        it = Interpreter(model_content=model)
        it.allocate_tensors()
        kernel = it.steps()[0].kernel
        assert kernel.line is None and kernel.table is not None
        compare_with_litert(model, [a, b])
        monkeypatch.setattr(elementwise, "_f32_around", around)


@pytest.mark.parametrize("bound", [True, False], ids=["bound-call", "eval"])
def test_add_sub_plane_on_an_empty_tensor(bound, monkeypatch):
    """A plane ADD of two empty (0 x 4) tensors runs no pass and gives an empty output, in the
    invoke plan's bound call and on the eval path (the block size had been 0: a ValueError)."""
    from edgerun.ops import conv
    from edgerun.ops.elementwise import Int8AddSub
    from edgerun.runtime.interpreter import Interpreter

    monkeypatch.setattr(conv, "SMALL_ARENA_BYTES", -1)  # not taken for a small plan
    if not bound:
        monkeypatch.setattr(Int8AddSub, "compile", lambda self, ins, outs: None)
    model = _binary_model("ADD", "int8", (0, 4), (0, 4), (0.0949, -57), (0.1322, 9), (0.1615, -15), NONE)
    it = Interpreter(model_content=model)
    it.allocate_tensors()
    assert it.steps()[0].kernel.line is not None
    for d in it.get_input_details():
        it.set_tensor(d["index"], np.zeros((0, 4), np.int8))
    it.invoke()
    assert it.get_tensor(it.get_output_details()[0]["index"]).shape == (0, 4)
