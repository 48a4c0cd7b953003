"""Property tests: edgerun.ops.fixedpoint against exact Python-integer re-implementations of the
gemmlowp / TFLite definitions, over the full int32 range (hypothesis)."""

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from edgerun.ops import fixedpoint as fp

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
int32s = st.integers(I32_MIN, I32_MAX)
int32_lists = st.lists(int32s, min_size=1, max_size=64)
multipliers = st.integers(1 << 30, I32_MAX)  # what QuantizeMultiplier produces for non-zero reals
SETTINGS = settings(max_examples=200, deadline=None)


# --- exact references (plain Python integers / fractions) ------------------------------------------

def wrap32(x: int) -> int:
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def round_half_away(f: Fraction) -> int:
    n = math.floor(abs(f) + Fraction(1, 2))
    return n if f >= 0 else -n


def ref_srdhm(a: int, b: int) -> int:
    """round((a * b) / 2^31), ties away from zero: gemmlowp's nudge then C truncation; saturates
    the single overflow a = b = INT32_MIN."""
    if a == b == I32_MIN:
        return I32_MAX
    p = a * b
    n = p + ((1 << 30) if p >= 0 else 1 - (1 << 30))
    q = abs(n) >> 31
    return q if n >= 0 else -q


def ref_rdbpot(x: int, e: int) -> int:
    return round_half_away(Fraction(x, 1 << e))


def ref_mbqm(x: int, m: int, shift: int) -> int:
    left, right = max(shift, 0), max(-shift, 0)
    return ref_rdbpot(ref_srdhm(wrap32(x << left), m), right)


def ref_quantize_multiplier(real: float) -> tuple[int, int]:
    if real == 0:
        return 0, 0
    r = Fraction(real)
    shift = 0
    while r / (Fraction(2) ** shift) >= 1:
        shift += 1
    while r / (Fraction(2) ** shift) < Fraction(1, 2):
        shift -= 1
    q = round_half_away(r / (Fraction(2) ** shift) * (1 << 31))
    if q == 1 << 31:
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return I32_MAX, 30
    return q, shift


def ref_srmbpot(x: int, e: int) -> int:
    if e >= 0:
        return max(I32_MIN, min(I32_MAX, x * (1 << e)))
    return ref_rdbpot(x, -e)


def ref_one_over_one_plus_x(a: int) -> int:
    """gemmlowp one_over_one_plus_x_for_x_in_0_1, transliterated with scalar integers."""
    half_denominator = round_half_away(Fraction(a + I32_MAX, 2))
    x = wrap32(1515870810 + ref_srdhm(half_denominator, -1010580540))
    for _ in range(3):
        one_minus = wrap32((1 << 29) - ref_srdhm(half_denominator, x))
        x = wrap32(x + ref_srmbpot(ref_srdhm(x, one_minus), 2))
    return ref_srmbpot(x, 1)


def arr(values):
    return np.array(values, dtype=np.int64)


# --- the core helpers ------------------------------------------------------------------------------

@SETTINGS
@given(int32_lists, int32_lists)
def test_saturating_rounding_doubling_high_mul(a, b):
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    got = fp.saturating_rounding_doubling_high_mul(arr(a), arr(b))
    assert got.tolist() == [ref_srdhm(x, y) for x, y in zip(a, b)]


def test_saturating_rounding_doubling_high_mul_corners():
    cases = [(I32_MIN, I32_MIN), (I32_MIN, I32_MAX), (I32_MAX, I32_MAX), (I32_MIN, 1), (-1, 1 << 30),
             (1, 1 << 30), (-3, 1 << 30), (3, 1 << 30), (0, I32_MIN)]
    for a, b in cases:
        assert int(fp.saturating_rounding_doubling_high_mul(a, b)) == ref_srdhm(a, b), (a, b)


@SETTINGS
@given(int32_lists, st.integers(0, 31))
def test_rounding_divide_by_pot(xs, e):
    got = fp.rounding_divide_by_pot(arr(xs), e)
    assert got.tolist() == [ref_rdbpot(x, e) for x in xs]


@SETTINGS
@given(int32_lists, multipliers, st.integers(-31, 30))
def test_multiply_by_quantized_multiplier(xs, m, shift):
    got = fp.multiply_by_quantized_multiplier(arr(xs), m, shift)
    assert got.tolist() == [ref_mbqm(x, m, shift) for x in xs]


@SETTINGS
@given(st.lists(st.tuples(int32s, multipliers, st.integers(-31, 30)), min_size=1, max_size=32))
def test_multiply_by_quantized_multiplier_per_element_params(rows):
    """Per-channel form: multipliers and shifts broadcast elementwise."""
    xs, ms, shifts = (list(c) for c in zip(*rows))
    got = fp.multiply_by_quantized_multiplier(arr(xs), arr(ms), arr(shifts))
    assert got.tolist() == [ref_mbqm(x, m, s) for x, m, s in rows]


@SETTINGS
@given(st.one_of(st.floats(min_value=1e-12, max_value=1e12, allow_nan=False, allow_infinity=False),
                 st.floats(min_value=1e-45, max_value=1e-9), st.just(0.0), st.just(1.0), st.just(0.5),
                 st.floats(min_value=1.9e9, max_value=1e30)))
def test_quantize_multiplier(real):
    m, shift = fp.quantize_multiplier(real)
    assert (m, shift) == ref_quantize_multiplier(real)
    if m not in (0, I32_MAX):
        assert (1 << 30) <= m < (1 << 31)
        # m * 2^(shift - 31) is the nearest Q0.31 value to real
        assert abs(Fraction(m) * Fraction(2) ** (shift - 31) - Fraction(real)) <= Fraction(2) ** (shift - 32)


def test_quantize_multipliers_vector_form():
    reals = [0.0, 1e-3, 0.75, 1.0, 3.5, 1e-20]
    m, s = fp.quantize_multipliers(reals)
    assert list(zip(m.tolist(), s.tolist())) == [ref_quantize_multiplier(r) for r in reals]


# --- helpers for DIV, RSQRT, SOFTMAX ---------------------------------------------------------------

@SETTINGS
@given(st.lists(st.integers(0, (1 << 32) - 1), min_size=1, max_size=64))
def test_count_leading_zeros32(xs):
    assert fp.count_leading_zeros32(arr(xs)).tolist() == [32 - x.bit_length() for x in xs]


@SETTINGS
@given(int32_lists)
def test_count_leading_sign_bits32(xs):
    want = [31 - (x if x >= 0 else ~x).bit_length() for x in xs]
    assert fp.count_leading_sign_bits32(arr(xs)).tolist() == want


@SETTINGS
@given(int32_lists, st.integers(-31, 31))
def test_saturating_rounding_multiply_by_pot(xs, e):
    got = fp.saturating_rounding_multiply_by_pot(arr(xs), e)
    assert got.tolist() == [ref_srmbpot(x, e) for x in xs]


@SETTINGS
@given(int32_lists, int32_lists)
def test_rounding_half_sum(a, b):
    n = min(len(a), len(b))
    got = fp.rounding_half_sum(arr(a[:n]), arr(b[:n]))
    assert got.tolist() == [round_half_away(Fraction(x + y, 2)) for x, y in zip(a[:n], b[:n])]


@SETTINGS
@given(st.lists(st.integers(0, I32_MAX), min_size=1, max_size=32))
def test_one_over_one_plus_x_for_x_in_0_1(xs):
    got = fp.one_over_one_plus_x_for_x_in_0_1(arr(xs))
    assert got.tolist() == [ref_one_over_one_plus_x(x) for x in xs]
    for x, g in zip(xs, got.tolist()):  # and it is 1 / (1 + x) to within ~10 Q0.31 units
        assert abs(g / 2**31 - 1 / (1 + x / 2**31)) < 5e-9


@SETTINGS
@given(st.lists(st.integers(1, I32_MAX), min_size=1, max_size=32))
def test_get_reciprocal(xs):
    inv, bits = fp.get_reciprocal(arr(xs), 31)
    for x, r, b in zip(xs, inv.tolist(), bits.tolist()):
        assert b == x.bit_length() - 1
        assert abs(r / 2**31 / 2**b - 1 / x) <= 1e-8 / x


@SETTINGS
@given(st.lists(st.integers(0, I32_MAX), min_size=1, max_size=32))
def test_get_inv_sqrt_quantized_multiplier_exp(xs):
    inv, shift = fp.get_inv_sqrt_quantized_multiplier_exp(arr(xs), -1)
    for x, r, s in zip(xs, inv.tolist(), shift.tolist()):
        if x <= 1:
            assert (r, s) == (I32_MAX, 0)
            continue
        assert 0 < r <= I32_MAX
        assert abs(r * 2.0 ** (s - 31) * math.sqrt(x) - 1) < 5e-6
