"""Fixed-point helpers, bit-exact with TFLite's reference kernels (gemmlowp rounding).

A real multiplier ``M`` (for requantization, ``M = s_in * s_w / s_out``) is stored as a Q0.31
integer ``m`` in [2^30, 2^31) and a power-of-two exponent ``shift`` with ``M ~= m * 2^(shift-31)``.
Applying it to an int32 accumulator ``x`` is::

    MultiplyByQuantizedMultiplier(x, m, shift) =
        RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x * 2^max(shift, 0), m), max(-shift, 0))

where SRDHM(a, b) = round_half_away((a * b) / 2^31), saturating the single overflow case
a = b = -2^31, and RoundingDivideByPOT rounds half away from zero. Everything here is vectorized
over numpy int64 arrays; ``m`` and ``shift`` broadcast, so per-channel multipliers are one call.
"""

from __future__ import annotations

import math

import numpy as np

from edgerun import native

try:
    from numpy._core.umath import clip as _clip_ufunc
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.umath import clip as _clip_ufunc

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: real -> (Q0.31 multiplier, shift); real = m * 2^(shift - 31)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)  # real = q * 2^shift, q in [0.5, 1)
    # TFLite uses std::round (half away from zero); Python's round() is half-to-even.
    q_fixed = int(math.floor(abs(q) * (1 << 31) + 0.5)) * (1 if q >= 0 else -1)
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        shift, q_fixed = 0, 0
    if shift > 30:
        shift, q_fixed = 30, (1 << 31) - 1
    return q_fixed, shift


def quantize_multipliers(reals) -> tuple[np.ndarray, np.ndarray]:
    """Vector form of :func:`quantize_multiplier` (per-channel scales)."""
    pairs = [quantize_multiplier(float(r)) for r in np.atleast_1d(reals)]
    return (np.array([p[0] for p in pairs], dtype=np.int64),
            np.array([p[1] for p in pairs], dtype=np.int64))


def saturating_rounding_doubling_high_mul(a, b) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 values (given as int64 arrays)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    s = ab + nudge
    # C integer division truncates toward zero.
    res = np.where(s >= 0, s >> 31, -((-s) >> 31))
    overflow = (a == INT32_MIN) & (b == INT32_MIN)
    return np.where(overflow, INT32_MAX, res)


def rounding_divide_by_pot(x, exponent) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: x / 2^exponent rounded half away from zero."""
    x = np.asarray(x, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def wrap32(x: np.ndarray) -> np.ndarray:
    """int64 values wrapped to int32 two's complement (C's int32 overflow), still int64."""
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier (double rounding), int32 semantics, int64 arrays."""
    x = np.asarray(x, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(wrap32(x << left), multiplier), right)


def requantize(acc, multiplier, shift, zero_point: int, qmin: int, qmax: int, dtype=np.int8) -> np.ndarray:
    """acc (int32 accumulators) -> quantized output: scale, add zero point, clamp, cast."""
    y = multiply_by_quantized_multiplier(acc, multiplier, shift) + int(zero_point)
    return np.clip(y, qmin, qmax).astype(dtype)


# --- gemmlowp fixed-point helpers used by DIV and RSQRT (vectorized, int32 values in int64) ---------


def count_leading_zeros32(x) -> np.ndarray:
    """CountLeadingZeros of uint32 values (32 for zero)."""
    x = np.asarray(x, dtype=np.int64) & 0xFFFFFFFF
    _, bits = np.frexp(x.astype(np.float64))  # exact: x < 2^53, bits = bit length of x
    return np.where(x == 0, 32, 32 - bits).astype(np.int64)


def count_leading_sign_bits32(x) -> np.ndarray:
    """CountLeadingSignBits (``__builtin_clrsb``) of int32 values; 31 for zero."""
    x = np.asarray(x, dtype=np.int64)
    neg = count_leading_zeros32(np.where(x < 0, 2 * (-x) - 1, 0))
    return np.where(x >= 0, count_leading_zeros32(x) - 1, np.where(x == INT32_MIN, 0, neg))


def saturating_rounding_multiply_by_pot(x, exponent: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT<exponent>: saturating left shift or rounding right shift."""
    x = np.asarray(x, dtype=np.int64)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, wrap32(x << exponent)))


def rounding_half_sum(a, b) -> np.ndarray:
    """gemmlowp RoundingHalfSum: (a + b) / 2 rounded half away from zero (C division truncates)."""
    s = np.asarray(a, dtype=np.int64) + np.asarray(b, dtype=np.int64)
    t = s + np.where(s >= 0, 1, -1)
    return np.where(t >= 0, t // 2, -((-t) // 2))


def one_over_one_plus_x_for_x_in_0_1(a) -> np.ndarray:
    """gemmlowp one_over_one_plus_x_for_x_in_0_1 on Q0.31 raw values: Newton-Raphson, 3 steps, Q0.31 out."""
    srdhm = saturating_rounding_doubling_high_mul
    half_denominator = rounding_half_sum(a, INT32_MAX)  # F0::One() is INT32_MAX
    one_f2 = 1 << 29
    x = wrap32(1515870810 + srdhm(half_denominator, -1010580540))  # 48/17 - 32/17 * d, in Q2.29
    for _ in range(3):
        one_minus = wrap32(one_f2 - srdhm(half_denominator, x))
        x = wrap32(x + saturating_rounding_multiply_by_pot(srdhm(x, one_minus), 2))
    # ExactMulByPot<-1> keeps the raw value (Q2.29 -> Q1.30), Rescale<0> shifts left by 1, saturating.
    return saturating_rounding_multiply_by_pot(x, 1)


def get_reciprocal(x, x_integer_digits: int):
    """TFLite GetReciprocal: (Q0.31 reciprocal of x normalised to [1, 2), num_bits_over_unit)."""
    x = np.asarray(x, dtype=np.int64)
    headroom_plus_one = count_leading_zeros32(x)
    num_bits_over_unit = x_integer_digits - headroom_plus_one
    shifted = ((x & 0xFFFFFFFF) << headroom_plus_one) & 0xFFFFFFFF
    shifted_sum_minus_one = wrap32(shifted - (1 << 31))
    return one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one), num_bits_over_unit


def _wrap_s(v: int) -> int:
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _srdhm_s(a: int, b: int) -> int:
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    s = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
    return s >> 31 if s >= 0 else -((-s) >> 31)


def _mul_pot_s(v: int, e: int) -> int:
    """saturating_rounding_multiply_by_pot for a positive exponent, on a Python int."""
    threshold = (1 << (31 - e)) - 1
    return INT32_MAX if v > threshold else INT32_MIN if v < -threshold else _wrap_s(v << e)


def get_reciprocal_scalar(x: int, x_integer_digits: int) -> tuple[int, int]:
    """:func:`get_reciprocal` on one Python int (a row's sum): the same gemmlowp steps in plain
    integer arithmetic, which beats a chain of numpy calls on one-element arrays."""
    u = int(x) & 0xFFFFFFFF
    headroom_plus_one = 32 - u.bit_length()
    a = _wrap_s(((u << headroom_plus_one) & 0xFFFFFFFF) - (1 << 31))
    t = a + INT32_MAX
    t += 1 if t >= 0 else -1
    half_denominator = t // 2 if t >= 0 else -((-t) // 2)  # rounding_half_sum(a, 1.0)
    r = _wrap_s(1515870810 + _srdhm_s(half_denominator, -1010580540))
    for _ in range(3):
        one_minus = _wrap_s((1 << 29) - _srdhm_s(half_denominator, r))
        r = _wrap_s(r + _mul_pot_s(_srdhm_s(r, one_minus), 2))
    return _mul_pot_s(r, 1), x_integer_digits - headroom_plus_one


def get_inv_sqrt_quantized_multiplier_exp(x, reverse_shift: int):
    """TFLite GetInvSqrtQuantizedMultiplierExp: 1/sqrt(x) as (multiplier, shift), Newton-Raphson in Q3.28."""
    srdhm = saturating_rounding_doubling_high_mul
    x = np.asarray(x, dtype=np.int64)
    small = x <= 1
    inp = np.where(small, 2, x)
    shift = np.full(inp.shape, 11, dtype=np.int64)
    big = inp >= (1 << 29)  # int32 inputs need at most one division by 4
    inp = np.where(big, inp // 4, inp)
    shift = shift + big
    left_shift_bit_pairs = (count_leading_zeros32(inp) - 1) // 2 - 1
    shift = shift - left_shift_bit_pairs
    inp = inp << (2 * left_shift_bit_pairs)
    fp_input = inp >> 1
    fp_half_input = rounding_divide_by_pot(fp_input, 1)
    half_three = (1 << 28) + (1 << 27)
    r = np.full(inp.shape, 1 << 28, dtype=np.int64)  # F3::One()
    for _ in range(5):
        x3 = saturating_rounding_multiply_by_pot(srdhm(srdhm(r, r), r), 6)
        r = saturating_rounding_multiply_by_pot(wrap32(srdhm(half_three, r) - srdhm(fp_half_input, x3)), 3)
    r = srdhm(r, 1518500250)  # * sqrt(2)/2
    neg = shift < 0
    r = np.where(neg, wrap32(r << np.where(neg, -shift, 0)), r)
    shift = np.where(neg, 0, shift) * reverse_shift
    return np.where(small, INT32_MAX, r), np.where(small, 0, shift)


# --- gemmlowp exp / log on FixedPoint<int32, IntegerBits> raw values (SOFTMAX, LOG_SOFTMAX) -------
# A value with b integer bits is stored as raw / 2^(31 - b); products are SRDHM (integer bits add
# up), sums wrap as C int32 addition does, and rescale() moves a value between formats.


def saturating_rounding_multiply_by_pot_param(x, exponent) -> np.ndarray:
    """TFLite SaturatingRoundingMultiplyByPOTParam: like saturating_rounding_multiply_by_pot, but the
    exponent is a run-time value or array (it broadcasts against x)."""
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    left = np.maximum(e, 0)
    threshold = (np.int64(1) << (31 - left)) - 1
    up = np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, x << left))
    return np.where(e < 0, rounding_divide_by_pot(x, np.maximum(-e, 0)), up)


def rescale(x, src_integer_bits: int, dst_integer_bits: int) -> np.ndarray:
    """gemmlowp Rescale<dst>(FixedPoint<int32, src>)."""
    return saturating_rounding_multiply_by_pot(x, src_integer_bits - dst_integer_bits)


def exp_on_interval_between_negative_one_quarter_and_0_excl(a) -> np.ndarray:
    """gemmlowp: exp(a) for a in [-1/4, 0), Q0.31 in and out (Taylor series around -1/8)."""
    srdhm = saturating_rounding_doubling_high_mul
    constant_term = 1895147668  # exp(-1/8)
    constant_1_over_3 = 715827883
    x = wrap32(np.asarray(a, dtype=np.int64) + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(wrap32(srdhm(wrap32(x4_over_4 + x3), constant_1_over_3) + x2), 1)
    return wrap32(constant_term + srdhm(constant_term, wrap32(x + poly)))


# exp(-2^k) in Q0.31, k = -2 .. 4: the barrel shifter of exp_on_negative_values
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
               (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a, integer_bits: int) -> np.ndarray:
    """gemmlowp exp_on_negative_values: exp(a) for a <= 0 with ``integer_bits``; result in Q0.31."""
    srdhm = saturating_rounding_doubling_high_mul
    a = np.asarray(a, dtype=np.int64)
    frac = 31 - integer_bits
    one_quarter = 1 << (frac - 2)
    a_mod_quarter_minus_one_quarter = (a & (one_quarter - 1)) - one_quarter
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        rescale(a_mod_quarter_minus_one_quarter, integer_bits, 0))
    remainder = a_mod_quarter_minus_one_quarter - a
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = (remainder & (1 << (frac + exponent))) != 0
            result = np.where(bit, srdhm(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, INT32_MAX, result)


def log_x_for_x_greater_than_or_equal_to_1(a, input_integer_bits: int, output_integer_bits: int) -> np.ndarray:
    """TFLite log_x_for_x_greater_than_or_equal_to_1_impl: log(a) from Q(in) raw to Q(out) raw."""
    srdhm = saturating_rounding_doubling_high_mul
    log_2, sqrt_sqrt_half, sqrt_half, one_quarter = 1488522236, 1805811301, 1518500250, 536870912
    alpha_n, alpha_d, alpha_i, alpha_f = 117049297, 127690142, 1057819769, 638450708
    accum_bits = output_integer_bits + 1  # one bit of headroom for the sum below
    shifted_quarter = rescale(one_quarter, 0, accum_bits)

    z_a = np.asarray(a, dtype=np.int64)
    z_a_headroom_plus_1 = count_leading_zeros32(z_a)
    r_a_tmp = saturating_rounding_multiply_by_pot_param(z_a, z_a_headroom_plus_1 - 1)
    r_a_raw = saturating_rounding_multiply_by_pot(srdhm(r_a_tmp, sqrt_half), 1)
    z_a_pow_2_adj = np.clip(saturating_rounding_multiply_by_pot(
        input_integer_bits - z_a_headroom_plus_1, 31 - accum_bits) + shifted_quarter, INT32_MIN, INT32_MAX)

    z_b = srdhm(z_a, sqrt_half)
    z_b_headroom = count_leading_zeros32(z_b) - 1
    r_b_raw = saturating_rounding_multiply_by_pot_param(z_a, z_b_headroom)
    z_b_pow_2_adj = np.clip(saturating_rounding_multiply_by_pot(
        input_integer_bits - z_b_headroom, 31 - accum_bits) - shifted_quarter, INT32_MIN, INT32_MAX)

    r = np.minimum(r_a_raw, r_b_raw)
    z_pow_2_adj = np.maximum(z_a_pow_2_adj, z_b_pow_2_adj)

    p = rounding_half_sum(r, sqrt_sqrt_half)
    q = wrap32(r - sqrt_sqrt_half)
    q = wrap32(q + q)
    common_sq = srdhm(q, q)
    num = wrap32(srdhm(q, r) + srdhm(srdhm(q, common_sq), alpha_n))
    denom_minus_one_0 = wrap32(srdhm(p, wrap32(alpha_i + q + srdhm(alpha_d, common_sq))) + srdhm(alpha_f, q))
    recip_denom = one_over_one_plus_x_for_x_in_0_1(denom_minus_one_0)
    num_scaled = rescale(num, 0, accum_bits)
    total = wrap32(srdhm(z_pow_2_adj, log_2) + srdhm(num_scaled, recip_denom))
    return rescale(total, accum_bits, output_integer_bits)


# --- requantization of bounded float32 accumulators in float32 passes (CONV_2D, DEPTHWISE) --------


def _requant_bounded_class():
    """:class:`BoundedRequantizer`, built on first use (its base class lives in
    ``edgerun.ops.common``; importing that here at module level would tie the two modules'
    import order together)."""
    from edgerun.ops.common import FLOAT32_EXACT, Requantizer, clip_ufunc, scratch

    class BoundedRequantizer(Requantizer):
        """:class:`~edgerun.ops.common.Requantizer` with a float32 path for the accumulators of an
        int8 convolution (float32 values, ``|acc| <= acc_bound < 2^24``): bit-exact, in about
        half of the int64 path's time.

        With ``m' = m << left``, ``T = 31 + right``, ``h = 2^(right-1)`` (0 when right is 0),
        ``delta = 2^-right`` (0 when right is 0) and ``x = acc + bias`` (no int32 wrap-around
        possible under the bound), the reference result plus 128 is (see
        :class:`~edgerun.ops.common.Requantizer` for the derivation)::

            floor(t) when x*m' + 2^30 >= 0, else floor(t - delta),
            t = (x*m' + 2^30 + 2^31*h) / 2^T + zp + 128 = x*mu + c0,  mu = m'/2^T exactly in float64

        In float32, with the constant raised by ``E = 4u(L + |C| + 2)`` (u = 2^-24, C the
        constant term), the computed ``a`` lies in ``[t, t + 2E]`` for every ``|t| <= L = 512``
        (three roundings of at most u relative each); larger ``|t|`` saturate either way.
        Clipped to ``[lo + 7/8, hi + 7/8]`` (lo, hi the clamp range plus 128), ``floor(a)`` is
        the result whenever ``floor(a) == floor(a - D)`` (every candidate lies in
        ``[a - D, a]``); the values failing that test are recomputed exactly in int64. Two modes
        (per layer, by the expected share of values to recompute):

        * ``plain``: ``a = acc*mu + (bias*mu + c0 + E)``, ``D = 2E + delta`` (the sign is not
          looked at; a value within ``delta`` of a step, about a share ``delta`` of them, is
          recomputed). Passes: multiply, add, clip, cast to uint8 (the output, offset by 128),
          subtract, cast, compare, and one XOR of the output bytes.
        * ``signed`` (channels with right shifts of 1-4, where ``delta`` is a large share):
          ``x = acc + bias`` in float32 (exact), ``a = x*mu + copysign(delta/2, x) + (c0 -
          delta/2 + E)``, which subtracts ``delta`` exactly where ``x < 0``; ``x*m' + 2^30 < 0``
          is ``x < 0`` when ``m' >= 2^30`` except ``x*m' == -2^30``, where both give the same floor.
          Then ``D = 2E``: three passes more, almost nothing recomputed.

        Anything else (int or float64 accumulators, unbounded sums, a multiplier of 2^-1 or
        more with no left shift to spare) takes the base class's int64 path.
        """

        #: values per float32 pass: the work arrays stay in the core's L2 cache (32K: the
        #: float32, sign, byte and mask work arrays had held 0.6 MB at 64K; face landmark, pose
        #: and iris int8 0.4-0.6 MB less resident, CPU -1 to +2 % in-process, pose once +5 %)
        SUB = 1 << 15
        #: work-row width the per-channel constants are tiled to (Requantizer: 256): each layer
        #: keeps its tiled constants, so narrower rows hold less (iris, pose, palm int8 about
        #: 0.16 MB less peak growth by tools/peak_rss.py) at CPU time within noise in-process
        TILE = 128
        #: fewer values take the base class's path: its fixed cost per call is lower (isolated
        #: break-even at 6-8K values: 20.7 against 28.4 us at 4096, 38.0 against 30.4 us at 8192;
        #: inside whole models, kws and vww ran 3-7 % faster with the limit at 16K than at 6K)
        FAST_MIN = 16384
        #: the clipped values sit this far above their integer: must exceed every channel's D
        C_OFF = 0.875
        L = 512.0
        #: ``plain`` mode while the mean of D over the channels (about the share of values
        #: recomputed in int64, which costs about 20x a float32 pass per value) stays below this
        PLAIN_MAX_SHARE = 0.02
        #: the fitted passes (``_fit``) where they apply
        FIT = True
        #: ... from this many values (their fixed cost per call is about that of a few
        #: hundred values through the int64 path)
        FIT_MIN = 1024
        #: row width of the gathered channels' float64 constants (see ``_fitted``)
        FIT_SUB_WIDTH = 128

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._fast: dict = {}
            self._native: dict = {}

        #: the native loop (``edgerun.native``, ``edgerun_requant_i8``) where the machine has one:
        #: one pass over the accumulators instead of the float32 passes below
        NATIVE = True
        #: ... for at least this many values (a ctypes call costs about 1-2 us)
        NATIVE_MIN = 64

        def native_args(self, bias, c: int, rows: int, bound: float | None = None):
            """(function, width, constants, the call's constant arguments) of the native
            requantization of ``rows`` x ``c`` accumulators (+ ``bias``), constants tiled to rows
            of ``width`` values; or None where it does not apply (no library, unbounded
            accumulators, a multiplier outside int32). ``bound`` (default ``acc_bound``): a bound
            on ``|acc|`` of the caller's accumulators (float32 ones are exact below 2^24)."""
            bound = self.acc_bound if bound is None else bound
            if not self.NATIVE or not c or rows <= 0:
                return None
            reps = self._row_reps(rows, c)
            key = (id(bias), c, reps, bound)
            hit = self._native.get(key)
            if hit is not None and hit[0] is bias:
                return hit[1]
            entry = None
            lib = native.library()
            if (lib is not None and self.dtype is np.int8 and self.m.ndim <= 1 and self.m.size in (1, c)
                    and bound is not None and bound < FLOAT32_EXACT
                    and (bias is None or (isinstance(bias, np.ndarray) and bias.shape == (c,)))):
                b = np.zeros(c, np.int64) if bias is None else np.asarray(bias, np.int64)
                m = np.broadcast_to(self.m, (c,)).astype(np.int64)
                left = np.broadcast_to(self.left if self.left is not None else 0, (c,)).astype(np.int64)
                right = np.broadcast_to(np.asarray(self.total, np.int64) - 31, (c,))
                if (int(m.min(initial=0)) >= 0 and int(m.max(initial=0)) < (1 << 31) and int(left.max()) <= 30
                        and 0 <= int(right.min()) and int(right.max()) <= 31
                        and int(b.min(initial=0)) >= -(1 << 31) and int(b.max(initial=0)) < (1 << 31)):
                    def t(v):
                        return np.ascontiguousarray(np.tile(np.asarray(v, np.int32), reps))
                    consts = (t(b), t(left), t(m), t(right))
                    args = (*(a.ctypes.data for a in consts), self.zero_point, self.qmin, self.qmax)
                    entry = (lib.edgerun_requant_i8, reps * c, consts, args)
            if len(self._native) > 16:
                self._native.clear()
            self._native[key] = (bias, entry)
            return entry

        def _native_call(self, acc, bias, out):
            """``out`` requantized by the native loop, or None where it does not apply."""
            if (acc.dtype != np.float32 or acc.size < self.NATIVE_MIN or not acc.ndim
                    or not acc.flags.c_contiguous):
                return None
            c = acc.shape[-1]
            rows = acc.size // c if c else 0
            args = self.native_args(bias, c, rows)
            if args is None:
                return None
            fn, w, _, tail = args
            if out is None or out.shape != acc.shape or out.dtype != np.int8 or not out.flags.c_contiguous:
                out = np.empty(acc.shape, np.int8)
            fn(acc.ctypes.data, out.ctypes.data, acc.size // w, w, *tail)
            return out

        def _prepare_fast(self, bias, c: int):
            """(bias, mode, per-channel constants, their tiles by repetition count); mode None
            when the fast path does not apply."""
            key = id(bias)
            hit = self._fast.get(key)
            if hit is not None and hit[0] is bias:
                return hit
            mode, consts = None, None
            p = self._channel_params(bias, c)
            if p is not None:
                m2, right, b, mu, c0, delta, bmax = p
                cc = b.astype(np.float64) * mu + c0
                err = 4.0 * 2.0 ** -24 * (self.L + np.abs(cc) + 2.0)
                tiny = 2.0 ** -14  # beyond one float32 ulp at 256
                d_plain = 2.0 * err + delta + tiny
                signed_ok = bmax < FLOAT32_EXACT and bool(np.all((m2 >= (1 << 30)) | (right == 0)))

                def f32_up(v):  # rounded up to float32
                    return np.nextafter(np.asarray(v, np.float32), np.float32(1))

                if float(d_plain.max(initial=0)) < self.C_OFF and (
                        float(d_plain.mean()) <= self.PLAIN_MAX_SHARE or not signed_ok):
                    mode = "plain"
                    consts = (mu.astype(np.float32), (cc + err).astype(np.float32),
                              f32_up(d_plain), m2, right, b)
                elif signed_ok:
                    err = 4.0 * 2.0 ** -24 * (self.L + np.abs(c0) + 2.0)
                    d = 2.0 * err + tiny
                    if float(d.max(initial=0)) < self.C_OFF:
                        mode = "signed"
                        consts = (mu.astype(np.float32), (c0 - delta / 2 + err).astype(np.float32),
                                  f32_up(d), m2, right, b, b.astype(np.float32),
                                  (delta / 2).astype(np.float32).view(np.int32), (c0 + err).astype(np.float32))
            if len(self._fast) > 16:
                self._fast.clear()
            entry = self._fast[key] = (bias, mode, consts, {})
            return entry

        def _exact_u8(self, x, m2, right):
            """The reference result plus 128 for int64 ``x = acc + bias`` (modified in place) with
            per-value ``m2``, ``right``: the int64 arithmetic of the base class."""
            x *= m2
            x += 1 << 30
            x >>= 31
            v = x + ((np.int64(1) << right) >> 1)
            v -= (x < 0) & (right > 0)
            v >>= right
            v += self.zero_point + 128
            return clip_ufunc(v, self.qmin + 128, self.qmax + 128, out=v)

        def _channel_params(self, bias, c: int):
            """(m2, right, bias, mu, c0, delta, bound of |acc + bias|) per channel, or None when
            the float32 paths do not apply (see the class docstring)."""
            bound = self.acc_bound
            m = np.broadcast_to(self.m, (c,)).astype(np.int64)
            left = np.broadcast_to(self.left if self.left is not None else 0, (c,)).astype(np.int64)
            right = np.broadcast_to(np.asarray(self.total, np.int64), (c,)) - 31
            b = np.zeros(c, np.int64) if bias is None else np.broadcast_to(np.asarray(bias, np.int64), (c,))
            if not (bound is not None and bound < FLOAT32_EXACT and (m >= 0).all()
                    and (right >= 0).all() and int(right.max(initial=0)) <= 40):
                return None
            bmax = bound + float(np.abs(b).max(initial=0))
            if bmax * float(1 << int(left.max(initial=0))) >= 2.0 ** 31:
                return None
            m2 = m << left
            h = ((np.int64(1) << right) >> 1).astype(np.float64)
            scale = np.exp2(-(31 + right).astype(np.float64))
            mu = m2.astype(np.float64) * scale  # exact: m2 has 31 significant bits
            c0 = (2.0 ** 30 + 2.0 ** 31 * h) * scale + (self.zero_point + 128)
            delta = np.where(right > 0, np.exp2(-right.astype(np.float64)), 0.0)
            return m2, right, b, mu, c0, delta, bmax

        #: float64 passes (:meth:`f64_consts`): channels with right shifts up to this many
        F64_MAX_RIGHT = F64_MAX_RIGHT
        #: ... run on rows of about this many values: the per-channel constants are tiled to the
        #: row width (a (rows, c) array against a (c,) row runs numpy's inner loop c values long:
        #: 2x the time per pass at c = 8 than a full row)
        F64_WIDTH = 1024

        def f64_consts(self, bias, c: int, channel_bounds: bool = True):
            """(bias, mu, cc, delta/2 as int64 bits) per channel for the float64 passes
            (:func:`f64_passes`), or None where they do not apply.

            With ``x = acc + bias`` (exact integers, ``|x| < 2^24``), ``t = x*mu + c0`` and ``delta`` as
            in the class docstring, the reference result plus 128 is ``floor(t')``, ``t' = t`` for
            ``x >= 0`` and ``t - delta`` for ``x < 0`` (every ``m' >= 2^30`` or ``right == 0``, as the
            ``signed`` mode). ``t'`` is a multiple of ``2^-T``, ``T = 31 + right``, so with
            ``right <= 10`` its fraction is at most ``1 - 2^-41``. Computed in float64,
            ``a = x*mu + copysign(delta/2, x) + (c0 - delta/2 + 2^-42)`` (the constant is exact: its
            bits span 2^8 .. 2^-42) has three roundings; for every ``t'`` in ``[-2, 512)`` (all others
            saturate either way) each intermediate is below 1024 in magnitude, so each rounding is at
            most 2^-44 and ``a`` lies in ``[t', t' + 2^-42 + 3 * 2^-44] within [t', t' + 2^-41)``:
            ``floor(a) == floor(t')`` for every input, nothing to recompute.

            A channel whose result is the same at both ends of its accumulator range
            ``[bias - bound, bias + bound]`` (the result is monotonic in ``x``) is that
            constant everywhere, whatever its shift or bias: it gets ``mu = 0``, ``delta = 0`` and
            ``cc = constant + 1/2`` (``a = cc`` exactly; ``acc + bias`` stays an exact float64
            integer). Such channels (weights all but zero, biases up to 2^30: right shifts of
            26-31 on visual wake words' later layers) no longer keep a layer off these passes.
            ``bound`` is the channel's own bound where the kernel sets ``acc_bounds`` (128 times
            the sum of the channel's absolute weights) and ``channel_bounds`` is true, else the
            layer's ``acc_bound``.

            A layer with a varying channel beyond that proof (right shift above ``F64_MAX_RIGHT``:
            vww's 6x6x128 and 3x3x256 layers have a few channels with shifts of 11-16) takes the
            exact two-stage form instead, a 5-tuple ``(k, bk, pr, cc, delta/2 as int64 bits)``,
            when every varying channel has ``(bound + |bias|) * m' < 2^51``. With ``k = m'/2^31``
            and ``bk = bias*k + 1/2``, ``acc*k + bk = x*m'/2^31 + 1/2`` is exact (every operand and
            the sum lie on the 2^-31 grid below 2^21), so ``s = floor(acc*k + bk)`` is the
            reference's SaturatingRoundingDoublingHighMul, exactly; then
            ``floor(s*pr + copysign(delta/2, s) + cc)`` with ``pr = 2^-right`` and
            ``cc = zp + 128 + 1/2 - delta/2`` is RoundingDivideByPOT plus the zero point (every
            term lies on the 2^-(right+1) grid within 53 bits: exact for ``right <= 40``).
            Constant channels get ``k = 0``, ``bk = 1/2`` (``s = 0``), ``delta = 0`` and
            ``cc = constant + 1/2``."""
            key = ("f64", id(bias), channel_bounds)
            hit = self._fast.get(key)
            if hit is not None and hit[0] is bias:
                return hit[1]
            res = None
            p = self._channel_params(bias, c)
            if p is not None and self.acc_bound < FLOAT32_EXACT:
                m2, right, b, mu, c0, delta, _ = p
                bounds = getattr(self, "acc_bounds", None) if channel_bounds else None
                if callable(bounds):  # the kernel's bounds, computed on first use
                    bounds = self.acc_bounds = bounds()
                if bounds is not None and np.shape(bounds) == (c,):
                    bound = np.minimum(np.asarray(bounds, np.int64), int(self.acc_bound))
                else:
                    bound = np.full(c, int(self.acc_bound), np.int64)
                ends = np.stack([b - bound, b + bound])  # x = acc + bias at both ends, per channel
                u = self._exact_u8(ends.copy(), np.broadcast_to(m2, ends.shape), np.broadcast_to(right, ends.shape))
                const = u[0] == u[1]
                ok = const | ((right <= self.F64_MAX_RIGHT) & ((m2 >= (1 << 30)) | (right == 0))
                              & (bound + np.abs(b) < FLOAT32_EXACT))
                if bool(ok.all()):
                    cc = np.where(const, u[0] + 0.5, c0 - delta / 2 + 2.0 ** -42)
                    res = (b.astype(np.float64), np.where(const, 0.0, mu),
                           cc, np.where(const, 0.0, delta / 2).view(np.int64))
                elif bool((const | ((bound + np.abs(b)).astype(np.float64) * m2.astype(np.float64)
                                    < 2.0 ** 51)).all()):
                    k = np.where(const, 0.0, m2.astype(np.float64) * 2.0 ** -31)
                    bk = np.where(const, 0.5, b.astype(np.float64) * k + 0.5)
                    pr = np.where(const, 0.0, np.exp2(-right.astype(np.float64)))
                    cc = np.where(const, u[0] + 0.5, self.zero_point + 128 + 0.5 - delta / 2)
                    res = (k, bk, pr, cc, np.where(const, 0.0, delta / 2).view(np.int64))
            self._fast[key] = (bias, res)
            return res

        def f64_tiles(self, bias, c: int, rows: int, width: int | None = None, channel_bounds: bool = True,
                      signed: bool = True):
            """(row width, the constants of :meth:`f64_consts` tiled to it) for ``rows`` rows of
            ``c`` channels: the width is ``c`` times the largest divisor of ``rows`` that keeps
            it within ``width`` (default ``F64_WIDTH``); or None. ``signed=False``: the constants
            for :func:`f64_passes` without the sign term (``cc + delta/2``, exact: see
            ``f64_consts``; the last, ``delta/2``, is None)."""
            consts = self.f64_consts(bias, c, channel_bounds)
            if consts is not None and not signed:
                consts = (*consts[:-2], consts[-2] + consts[-1].view(np.float64), None)
            if consts is None:
                return None
            reps = 1
            for r in range(min(rows, max(1, (width or self.F64_WIDTH) // c)), 0, -1):
                if rows % r == 0:
                    reps = r
                    break
            key = ("f64tiles", id(bias), c, reps, channel_bounds, signed)
            hit = self._fast.get(key)
            if hit is not None and hit[0] is bias:
                return hit[1]
            res = (reps * c, tuple(None if a is None else np.tile(a, reps) for a in consts) if reps > 1 else consts)
            self._fast[key] = (bias, res)
            return res

        #: at most this many accumulators (and channels) take the threshold table: one
        #: searchsorted costs 50-100 ns a value, against the int64 path's ~10 us per call
        TABLE_MAX = 128
        #: ... and at most this many thresholds (128 KB): a model's tables must stay in the
        #: core's cache (see FullyConnected.TABLE_THRESHOLDS)
        TABLE_THRESHOLDS = 16384
        #: channel c's thresholds and accumulators are shifted by c * 2^26 (|acc + bias| < 2^24)
        TABLE_STRIDE = float(1 << 26)

        def _table(self, bias, c: int):
            """(offsets, thresholds, per-channel subtrahend) of the threshold table for ``bias``,
            or None. The result is a nondecreasing step function of ``x = acc + bias``: with
            ``v = level - zp``, RoundingDivideByPOT(s, e) >= v exactly when
            ``s >= a = v*2^e - 2^(e-1)`` (``a + 1`` when a < 0: negative s round their ties
            down), and ``floor((x*m' + 2^30) / 2^31) >= s`` exactly when
            ``x >= ceil((s*2^31 - 2^30) / m')``. So every level's least ``x`` is a closed form in
            int64; channel c's thresholds (less its bias) go to ``c * 2^26 + t``, all sorted, and
            ``searchsorted(acc + c * 2^26) - c * L + qmin`` is the clamped result."""
            key = ("table", id(bias))
            hit = self._fast.get(key)
            if hit is not None and hit[0] is bias:
                return hit[1]
            table = None
            fits = c * (self.qmax - self.qmin) <= self.TABLE_THRESHOLDS
            p = self._channel_params(bias, c) if c <= self.TABLE_MAX and fits else None
            if p is not None and p[6] < FLOAT32_EXACT and int(p[1].max(initial=0)) <= 20:
                m2, right, b, bmax = p[0], p[1][:, None], p[2], p[6]
                levels = np.arange(self.qmin + 1, self.qmax + 1, dtype=np.int64)[None, :]  # L levels
                v = levels - self.zero_point
                a = (v << right) - ((np.int64(1) << right) >> 1)
                s_min = np.where((right > 0) & (a < 0), a + 1, a)
                num = (s_min << 31) - (1 << 30)
                big = int(bmax) + 2
                mm = m2[:, None]
                x_min = np.where(mm > 0, -((-num) // np.maximum(mm, 1)), np.where(s_min <= 0, -big, big))
                x_min = np.clip(x_min, -big, big) - b[:, None]  # in terms of acc
                n_levels = x_min.shape[1]
                stride = self.TABLE_STRIDE
                offsets = np.arange(c, dtype=np.float64) * stride
                thresholds = (x_min.astype(np.float64) + offsets[:, None]).reshape(-1)
                sub = np.arange(c, dtype=np.int64) * n_levels - self.qmin
                table = (offsets, thresholds, sub)
            self._fast[key] = (bias, table)
            return table

        def _table_call(self, acc, table, out):
            offsets, thresholds, sub = table
            x = np.add(acc, offsets)  # exact: integers below 2^53
            idx = np.searchsorted(thresholds, x.reshape(-1), side="right").reshape(acc.shape)
            if out is None or out.shape != acc.shape or out.dtype != np.int8:
                out = np.empty(acc.shape, np.int8)
            return np.subtract(idx, sub, out=out, casting="unsafe")

        #: mu searched this many float32 steps either side of its rounding (``_fit``)
        FIT_STEPS = 4
        #: the fitted passes only while at most this share of the channels is left to the
        #: ``plain`` / ``signed`` passes (gathered, requantized apart, scattered back: about
        #: 5 ns a value against the old passes' 3; face detection's one RELU layer gathered 12
        #: of 24 channels at 0.5 and ran 2 % slower)
        FIT_MAX_RISKY = 0.25
        #: channels fitted at a time: their dozen (channels, levels) work arrays take about 0.25 MB
        #: (64 channels: about 2 MB more peak memory on hand landmark int8's first invoke)
        FIT_CHUNK = 8
        #: channels whose fix-up values are enumerated at a time (``_fix_values``)
        FIX_CHUNK = 2

        def _fit(self, bias, c: int):
            """(mu, cc, risky channel indices, their requantizer, their bias) for the fitted
            float32 passes, or None. Under a fused RELU / RELU6 (``qmin >= zero point``) one line;
            without one (``qmin < zero point < qmax``) two lines sharing ``mu`` (``_two_lines``), the
            same checks on each line's own levels, fix-ups by value on the sum, nothing gathered.

            The reference result is a nondecreasing step function of the integer accumulator:
            ``qmin + #{l : acc >= T_l}``, ``T_l`` each level's least accumulator (the closed form
            of ``_table``). ``a(acc) = fl(fl(acc*mu) + cc)`` in float32 is nondecreasing in
            ``acc`` too (each rounding is), so ``floor(clip(a, qmin + 128, qmax + 128))`` equals
            the reference plus 128 on every ``|acc| <= bound`` (the channel's, ``_fit_bounds``) exactly when, for every level,
            ``floor(a(T_l)) >= l + 128`` and ``floor(a(T_l - 1)) < l + 128`` (each point clamped to
            the accumulator range; a level beyond it checks only the end). Those two points per
            level are computed here with the same float32 operations the passes run, for ``mu``
            the channel's multiplier rounded to float32 and ``FIT_STEPS`` steps either side, and
            ``cc`` the middle of the interval the levels leave. Channels with no (mu, cc) that
            passes (float32's rounding of ``acc*mu`` is about as large as the smallest gap
            between a level's threshold and the step below: about one channel in ten) are
            gathered and go through this requantizer's other paths."""
            key = ("fit", id(bias))
            hit = self._fast.get(key)
            if hit is not None and hit[0] is bias:
                return hit[1]
            res = None
            two = self.qmin < self.zero_point  # no fused activation: two lines (see ``_fitted``)
            p = (self._channel_params(bias, c)
                 if self.qmin >= self.zero_point or (self.TWO_LINES and self.zero_point < self.qmax) else None)
            if p is not None and p[6] < FLOAT32_EXACT and int(p[1].max(initial=0)) <= 20:
                m2_all, right_all, b_all, mu_all, c0_all, bmax = p[0], p[1], p[2], p[3], p[4], p[6]
                right = right_all[:, None]
                levels = np.arange(self.qmin + 1, self.qmax + 1, dtype=np.int64)[None, :]
                lv = (levels + 128).astype(np.float64)  # the result plus 128: floor(a) >= lv
                if two:  # U's levels above the zero point, V's at or below it (see ``_fitted``)
                    q0, lo8, hi8 = self.zero_point + 128, self.qmin + 128, self.qmax + 128
                    vo = self.TWO_VO
                    s_off = q0 if vo == 0 else int(np.clip(64, max(hi8 - 255, q0 - lo8 - 128, 0), min(q0, 127)))
                    pos = levels > self.zero_point
                    lv = np.where(pos, lv - s_off, lv + vo + s_off - q0)
                    sides = (pos, ~pos)
                else:
                    sides = (np.ones(levels.shape, bool),)
                cc_two = np.zeros(c, np.float32)
                big = int(bmax) + 2
                bounds = self._fit_bounds(c)
                ok = np.zeros(c, bool)
                mu_f = np.zeros(c, np.float32)
                cc_f = np.zeros(c, np.float32)
                idx, fixes = [], []
                for j0 in range(0, c, self.FIT_CHUNK):  # (channels, levels) work arrays stay small
                    sl = slice(j0, j0 + self.FIT_CHUNK)
                    m2, rr, b, mu, c0 = m2_all[sl], right_all[sl][:, None], b_all[sl], mu_all[sl], c0_all[sl]
                    v = levels - self.zero_point
                    a = (v << rr) - ((np.int64(1) << rr) >> 1)
                    s_min = np.where((rr > 0) & (a < 0), a + 1, a)
                    num = (s_min << 31) - (1 << 30)
                    mm = m2[:, None]
                    t = np.where(mm > 0, -((-num) // np.maximum(mm, 1)), np.where(s_min <= 0, -big, big))
                    t = np.clip(t, -big, big) - b[:, None]  # each level's least accumulator
                    bd = bounds[sl][:, None]  # each channel's own accumulator bound
                    hi_use = t <= bd
                    lo_use = t - 1 >= -bd
                    hi_pt = np.clip(t, -bd, bd).astype(np.float32)
                    lo_pt = np.clip(t - 1, -bd, bd).astype(np.float32)
                    okc = ok[sl]
                    base = mu.astype(np.float32)
                    cands = [base]
                    up = down = base
                    for _ in range(self.FIT_STEPS):
                        up = np.nextafter(up, np.float32(np.inf))
                        down = np.nextafter(down, np.float32(0))
                        cands += [up, down]
                    c_mid = (b * mu + c0).astype(np.float64)  # the exact line's constant
                    for m in cands:
                        if okc.all():
                            break
                        ph = hi_pt * m[:, None]  # float32, as the passes
                        pl = lo_pt * m[:, None]
                        ccs = []
                        for side in sides:  # a constant per line
                            shift_c = 0.0 if not two else (-s_off if side is sides[0] else vo + s_off - q0)
                            clo = np.max(np.where(hi_use & side, lv - ph, -np.inf), axis=1, initial=-np.inf)
                            chi = np.min(np.where(lo_use & side, lv - pl, np.inf), axis=1, initial=np.inf)
                            fin_lo, fin_hi = np.isfinite(clo), np.isfinite(chi)
                            cm = c_mid + shift_c
                            mid = np.where(fin_lo & fin_hi, (clo + chi) / 2,
                                           np.where(fin_lo, np.maximum(clo + 0.5, cm),
                                                    np.where(fin_hi, np.minimum(chi - 0.5, cm), cm)))
                            ccs.append(mid.astype(np.float32))
                        cc = ccs[0]
                        if m is base:
                            cc_base, cv_base = cc, ccs[-1]
                        ccl = ccs[0][:, None] if not two else np.where(sides[0], ccs[0][:, None], ccs[1][:, None])
                        ah = np.floor(ph + ccl)  # float32 sums, as the passes
                        al = np.floor(pl + ccl)
                        good = (np.all(~hi_use | (ah >= lv), axis=1) & np.all(~lo_use | (al < lv), axis=1)
                                & (m > 0) & ~okc)
                        mu_f[sl][good] = m[good]
                        cc_f[sl][good] = cc[good]
                        if two:
                            cc_two[sl][good] = ccs[1][good]
                        okc |= good
                    if not okc.all():
                        fixable, fx = self._fix_values(t[~okc], base[~okc], cc_base[~okc], bd[~okc],
                                                       (cv_base[~okc], s_off, vo) if two else None)
                        ix = np.flatnonzero(~okc)[fixable]
                        mu_f[sl][ix] = base[ix]
                        cc_f[sl][ix] = cc_base[ix]
                        if two:
                            cc_two[sl][ix] = cv_base[ix]
                        okc[ix] = True
                        idx.extend((ix + j0).tolist())
                        fixes.extend(fx)
                if fixes:
                    # the k-th value of each channel in the k-th array, NaN (never equal) where a
                    # channel has fewer, with its step (1 or 255: minus one in uint8)
                    n_fix = max((len(v) for v in fixes), default=0)
                    arrays = [(np.full(c, np.nan, np.float32), np.zeros(c, np.uint8)) for _ in range(n_fix)]
                    for j, vals in zip(idx, fixes):
                        for k, (v, d) in enumerate(vals):
                            arrays[k][0][j] = v
                            arrays[k][1][j] = 1 if d > 0 else 255
                    fixes = [(v, d) for v, d in arrays]
                risky = np.flatnonzero(~ok)
                if risky.size <= (self.TWO_MAX_RISKY if two else self.FIT_MAX_RISKY) * c and len(fixes) <= (
                        self.TWO_MAX_FIXES if two else self.FIT_MAX_FIXES):
                    sub = sub_bias = None
                    if risky.size:
                        shift = (np.broadcast_to(self.left if self.left is not None else 0, (c,))
                                 - np.broadcast_to(right[:, 0], (c,)))
                        sub = bounded_requantizer(np.broadcast_to(self.m, (c,))[risky], shift[risky],
                                                  self.zero_point, self.qmin, self.qmax, self.acc_bound)
                        sub.FIT = False
                        sub_bias = np.ascontiguousarray(np.asarray(bias)[risky]) if bias is not None else None
                    res = (mu_f, cc_f, risky, sub, sub_bias, fixes, {},
                           (cc_two, s_off, vo) if two else None)
            self._fast[key] = (bias, res)
            return res

        #: at most this many accumulators per channel fixed by value (each a compare and an add,
        #: and a multiply where both directions occur, over the layer); channels needing more
        #: are gathered instead
        FIT_MAX_FIXES = 1
        #: accumulators either side of each level's threshold enumerated by ``_fix_values``
        FIT_WINDOW = 4

        #: ``_fit`` checks each channel over its own accumulator range (False: the layer's, as
        #: before; kept for in-model A/B timing)
        FIT_CHANNEL_BOUNDS = True

        def _fit_bounds(self, c: int) -> np.ndarray:
            """Each channel's accumulator bound for ``_fit`` (int64, ``(c,)``): the kernel's own
            per-channel bounds (``acc_bounds``: 128 times the sum of the channel's absolute
            weights, computed on first use) where it sets them, capped by the layer's
            ``acc_bound``. A tighter range has fewer levels to check, so more channels fit."""
            whole = int(self.acc_bound)
            bounds = getattr(self, "acc_bounds", None) if self.FIT_CHANNEL_BOUNDS else None
            if callable(bounds):  # not kept: the fit is made once per bias (f64_consts keeps its own)
                bounds = bounds()
            if bounds is not None and np.shape(bounds) == (c,):
                return np.minimum(np.asarray(bounds, np.int64), whole)
            return np.full(c, whole, np.int64)

        def _fix_values(self, t, mu, cc, bound, two=None):
            """For channels (rows of ``t``, each level's least accumulator) whose float32 line
            ``(mu, cc)`` misses some levels: (fixable mask, per fixable channel the list of
            (accumulator, +1/-1) whose floor is one off). Every accumulator within
            ``FIT_WINDOW`` of a threshold is computed with the passes' float32 operations and
            compared with the reference count of thresholds at or below it; the window's ends
            must be right, so by monotonicity every accumulator outside the windows is right."""
            wdw = self.FIT_WINDOW
            k = np.arange(-wdw, wdw, dtype=np.int64)
            bound = np.broadcast_to(bound, (t.shape[0], 1))[:, :, None]  # per channel: (channels, 1, 1)
            fixable = np.zeros(t.shape[0], bool)
            fixes = []
            n = self.FIX_CHUNK
            for j0 in range(0, t.shape[0], n):  # (n, levels, 2W) work arrays
                tj = t[j0:j0 + n]
                bj = bound[j0:j0 + n]
                accs = np.clip(tj[:, :, None] + k, -bj, bj)  # (channels, levels, 2W)
                p = accs.astype(np.float32) * mu[j0:j0 + n, None, None]
                a = p + cc[j0:j0 + n, None, None]
                if two is None:
                    a = np.floor(np.clip(a, np.float32(self.qmin + 128), np.float32(self.qmax + 128)))
                else:  # U + V - vo (``_two_lines``), with the passes' float32 operations
                    cv, s_off, vo = two
                    q0 = self.zero_point + 128
                    a = np.floor(np.clip(a, np.float32(q0 - s_off), np.float32(self.qmax + 128 - s_off)))
                    b = p + cv[j0:j0 + n, None, None]
                    a += np.floor(np.clip(b, np.float32(self.qmin + 128 + vo + s_off - q0), np.float32(vo + s_off)))
                    a -= vo
                diff = np.empty(accs.shape, np.float64)
                for j in range(tj.shape[0]):
                    diff[j] = np.searchsorted(tj[j], accs[j], side="right")
                diff += self.qmin + 128
                diff -= a  # reference minus the line's floor
                ends_ok = (diff[:, :, 0] == 0) | (accs[:, :, 0] == -bj[:, :, 0])
                ends_ok &= (diff[:, :, -1] == 0) | (accs[:, :, -1] == bj[:, :, 0])
                fx = ends_ok.all(axis=1) & (np.abs(diff) <= 1).all(axis=(1, 2))
                lim = self.FIT_MAX_FIXES if two is None else self.TWO_MAX_FIXES
                fx &= (diff != 0).sum(axis=(1, 2)) <= lim * 3  # duplicates counted
                for j in np.flatnonzero(fx):
                    sel = diff[j] != 0
                    pairs = sorted(set(zip(accs[j][sel].tolist(), diff[j][sel].astype(int).tolist())))
                    if len({x for x, _ in pairs}) != len(pairs) or len(pairs) > lim:
                        fx[j] = False  # one accumulator, two answers; or too many
                        continue
                    fixes.append(pairs)
                fixable[j0:j0 + n] = fx
            return fixable, fixes

        def _row_reps(self, rows: int, c: int) -> int:
            """How many accumulator rows of ``c`` channels make one work row: the most that divide
            ``rows`` and fit in ``TILE`` values (1 where ``c`` alone reaches it)."""
            if c < self.TILE:
                for r in range(min(rows, self.TILE // c), 0, -1):
                    if rows % r == 0:
                        return r
            return 1

        def _fit_tiles(self, fit, reps: int):
            """(mu, cc, fix-ups, cv) of a fit repeated ``reps`` times along the work rows, made once
            per repetition count."""
            mu, cc, _, _, _, fixes, tiles, two = fit
            c = mu.size
            tiled = tiles.get(reps)
            if tiled is None:
                arrays = [(np.tile(v, reps), np.tile(d, reps),
                           0 if (d == 1).any() and (d == 255).any() else (1 if (d == 1).any() else -1))
                          for v, d in fixes]
                # the same fix-ups as (channel, accumulator, +1 / -1), for blocks where a pass over
                # each fixed channel's own columns costs less (``_fix_up``)
                # (compact arrays: hand landmark int8 has 723 such pairs)
                sel = [(np.flatnonzero(np.isfinite(v)), v, d) for v, d in fixes] or [
                    (np.zeros(0, np.intp), np.zeros(0, np.float32), np.zeros(0, np.uint8))]
                pairs = (np.concatenate([j for j, _, _ in sel]).astype(np.int32),
                         np.concatenate([v[j] for j, v, _ in sel]).astype(np.float32),
                         np.concatenate([d[j] == 1 for j, _, d in sel]))
                tiled = tiles[reps] = (np.tile(mu, reps), np.tile(cc, reps), (arrays, pairs, c),
                                       None if two is None else np.tile(two[0], reps))
            return tiled

        def _line_limits(self, two):
            """The clip limits of the fitted passes as float32: (lo, hi) for one line, (U's lo,
            U's hi, V's lo, V's hi) for two (see ``_two_lines``)."""
            if two is None:
                return np.float32(self.qmin + 128), np.float32(self.qmax + 128)
            s_off, vo = two[1], two[2]
            q0, lo8, hi8 = self.zero_point + 128, self.qmin + 128, self.qmax + 128
            return (np.float32(q0 - s_off), np.float32(hi8 - s_off),
                    np.float32(lo8 + vo + s_off - q0), np.float32(vo + s_off))

        def _one_line(self, a2, o2, mu_t, cc_t, lims, step, fix_t):
            """The fitted passes under a fused RELU / RELU6: multiply, add, clip, cast to uint8
            (the result plus 128; the caller's XOR makes it the int8 byte)."""
            lo, hi = lims
            for r0 in range(0, a2.shape[0], step):
                xa = a2[r0:r0 + step]
                t = scratch("requant.f32", xa.shape, np.float32)
                np.multiply(xa, mu_t, out=t)
                np.add(t, cc_t, out=t)
                clip_ufunc(t, lo, hi, out=t)
                u = o2[r0:r0 + step]
                np.copyto(u, t, casting="unsafe")  # t >= 0: truncation = floor
                self._fix_up(xa, u, fix_t)

        def _line_passes(self, a2, o2, tiled, lims, step, xor) -> None:
            """One or two fitted lines (``_one_line`` / ``_two_lines``) over the work rows ``a2``
            into ``o2`` (uint8), then the XOR that makes the bytes int8 where ``xor``."""
            mu_t, cc_t, fix_t, cv_t = tiled
            if cv_t is None:
                self._one_line(a2, o2, mu_t, cc_t, lims, step, fix_t)
            else:
                self._two_lines(a2, o2, mu_t, cc_t, cv_t, lims, step, fix_t)
            if xor:
                np.bitwise_xor(o2, np.uint8(0x80), out=o2)

        def _fitted(self, acc, fit, out):
            """The fitted passes (``_fit``): multiply, add, clip, cast to uint8, XOR; the risky
            channels gathered and requantized apart."""
            mu, _, risky, sub, sub_bias, _, _, two = fit
            c = mu.size
            rows = acc.size // c
            reps = self._row_reps(rows, c)
            w = reps * c
            self._line_passes(acc.reshape(-1, w), out.reshape(-1, w).view(np.uint8), self._fit_tiles(fit, reps),
                              self._line_limits(two), max(1, self.SUB // w), two is None or two[2] == 0)
            if risky.size:
                lo, hi = self.qmin + 128, self.qmax + 128
                o2 = out.reshape(rows, c)
                part = np.take(acc.reshape(rows, c), risky, axis=1)
                # constants tiled to 128-value rows (F64_WIDTH's 1024 had kept 0.5 MB more on hand
                # landmark int8: four float64 rows per layer and row count)
                tiles = (sub.f64_tiles(sub_bias, risky.size, rows, self.FIT_SUB_WIDTH, False, two is not None)
                         if sub_bias is not None else None)
                if tiles is None:
                    o2[:, risky] = sub(part, sub_bias)
                elif two is None:  # the exact float64 passes (no recomputation; fixed cost below the int64 path's)
                    w, consts = tiles
                    a2 = part.reshape(-1, w)
                    t = np.empty(a2.shape, np.float64)
                    u = np.empty(a2.shape, np.uint8)
                    f64_passes(a2, t, None, u, consts, float(lo), float(hi) + 0.5, False)
                    np.bitwise_xor(u, np.uint8(0x80), out=u)
                    o2[:, risky] = u.reshape(rows, risky.size).view(np.int8)
                else:  # with the sign term, in blocks of at most FIT_F64_BLOCK values (int64 work rows)
                    w, consts = tiles
                    a2 = part.reshape(-1, w)
                    u = np.empty(a2.shape, np.uint8)
                    bstep = max(1, self.FIT_F64_BLOCK // w)
                    for r0 in range(0, a2.shape[0], bstep):
                        xa = a2[r0:r0 + bstep]
                        t = scratch("requant.f64", xa.shape, np.float64)
                        sg = scratch("requant.sg64", xa.shape, np.int64)
                        f64_passes(xa, t, sg, u[r0:r0 + bstep], consts, float(lo), float(hi) + 0.5, True)
                    np.bitwise_xor(u, np.uint8(0x80), out=u)
                    o2[:, risky] = u.reshape(rows, risky.size).view(np.int8)
            return out

        #: no fused activation (``qmin < zero point < qmax``): two fitted lines (``_two_lines``)
        TWO_LINES = True
        #: V's offset: 128 (U + V is the int8 byte) or 0 (smaller values: a finer float32 grid;
        #: then an XOR of the output bytes)
        TWO_VO = 0
        #: ... only while at most this share of the channels is gathered
        TWO_MAX_RISKY = 0.0
        #: ... and at most this many accumulators per channel fixed by value
        TWO_MAX_FIXES = 2
        #: the gathered channels' float64 passes with the sign term, this many values at a time
        FIT_F64_BLOCK = 4096

        def _two_lines(self, a2, o2, mu, cu, cv, lims, step, fix_t):
            """The fitted passes without a fused activation. The reference is a nondecreasing step
            function of the accumulator whose levels above the zero point ``q0`` (plus 128) follow
            one float32 line ``P`` (``x >= 0``) and those at or below it another, ``N`` (``x < 0``:
            RoundingDivideByPOT rounds negative ties down, a jump of 1-2 accumulators at zero).
            With ``s`` (``s_off``) in ``[max(0, q0 - 128, hi - 255), min(q0, 127)]``, the uint8 casts
            ``U = floor(clip(acc*mu + cu, q0 - s, hi - s))`` and
            ``V = floor(clip(acc*mu + cv, lo + 128 + s - q0, 128 + s))`` are ``max(r, q0) - s`` and
            ``min(r, q0) + 128 + s - q0`` (``r`` the reference plus 128), so ``U + V`` (mod 256) is
            ``r + 128``: the int8 result's byte. ``_fit`` checks each line at both sides of every one
            of its levels' least accumulators (U and V are nondecreasing in acc). Passes: multiply,
            two adds, two clips, two casts, a uint8 add (the check path: 9-10)."""
            ulo, uhi, vlo, vhi = lims  # (``_line_limits``)
            for r0 in range(0, a2.shape[0], step):
                xa = a2[r0:r0 + step]
                # U's and V's float32 rows, both in the conv columns' buffer (dead once the
                # accumulators exist; its 256 KB hold both at SUB's blocks): a separate V buffer
                # had grown the binary ops' index buffer 64 -> 128 KB on iris landmark int8
                tb = scratch("requant.f32", (2,) + xa.shape, np.float32)
                t, b = tb[0], tb[1]
                np.multiply(xa, mu, out=t)
                np.add(t, cv, out=b)
                np.add(t, cu, out=t)
                clip_ufunc(t, ulo, uhi, out=t)
                clip_ufunc(b, vlo, vhi, out=b)
                u = o2[r0:r0 + step]
                np.copyto(u, t, casting="unsafe")  # >= 0: truncation = floor
                v = scratch("requant.u8", xa.shape, np.uint8)
                np.copyto(v, b, casting="unsafe")
                np.add(u, v, out=u)  # mod 256
                self._fix_up(xa, u, fix_t)

        #: ``_fix_up`` works channel by channel while its estimated cost (nanoseconds: about
        #: FIX_COL_CALL_NS a numpy call, FIX_COL_VALUE_NS a value of a strided column) stays below
        #: that of the whole-block passes (FIX_ARRAY_CALL_NS a call, FIX_ARRAY_VALUE_NS a value)
        FIX_COLUMNS = True
        FIX_COL_CALL_NS = 1000.0
        FIX_COL_VALUE_NS = 2.0
        FIX_ARRAY_CALL_NS = 500.0
        FIX_ARRAY_VALUE_NS = 0.35
        #: ... by this factor (the estimates come from isolated timings)
        FIX_COL_MARGIN = 2.0

        def _fix_up(self, xa, u, fix_t) -> None:
            """Add the fix-ups by value (``_fit``) to the uint8 block ``u`` of the accumulators
            ``xa`` (rows of whole channel groups): where an accumulator equals a fixed value of its
            channel, the floor is one off. Either one pass per fix array over the whole block (an
            equality against a tiled row, NaN where a channel has no such fix, then a uint8 add;
            255 is minus one), or, where fewer values are touched that way, per fixed channel
            over its own strided columns (its ``reps`` columns of every row): the same additions."""
            arrays, pairs, c = fix_t
            if not arrays:
                return
            n = xa.size
            if self.FIX_COLUMNS and self.FIX_COL_MARGIN * pairs[0].size * (
                    2 * self.FIX_COL_CALL_NS + n / c * self.FIX_COL_VALUE_NS) < len(arrays) * (
                    2 * self.FIX_ARRAY_CALL_NS + n * self.FIX_ARRAY_VALUE_NS):
                reps = xa.shape[-1] // c
                mask = scratch("requant.mask", (xa.shape[0], reps), np.bool_)
                m8 = mask.view(np.uint8)
                js, vs, ups = pairs
                for k, j in enumerate(js.tolist()):
                    np.equal(xa[:, j::c], vs[k], out=mask)
                    col = u[:, j::c]
                    (np.add if ups[k] else np.subtract)(col, m8, out=col)  # uint8: minus one wraps
                return
            for v, d, way in arrays:
                mask = np.equal(xa, v, out=scratch("requant.mask", xa.shape, np.bool_)).view(np.uint8)
                if way:  # every step the same way
                    (np.add if way > 0 else np.subtract)(u, mask, out=u)
                else:
                    np.multiply(mask, d, out=mask)
                    np.add(u, mask, out=u)  # uint8 wraps: 255 is minus one

        def warm(self, bias, c: int, values: int) -> None:
            """Make the fitted passes' constants (``_fit``) now, for a layer of ``values``
            accumulators in ``c`` channels, where its calls will take them: at prepare the process
            is below its later peak, while on the first invoke the fit's transient work arrays
            (about 0.3 MB a layer) sit on top of the arena and the scratch pool. Not where the
            native loop takes the layer (``native_args``): the fit would go unused (a call that
            still needs it makes it then)."""
            if self.native_args(bias, c, max(1, values // c) if c else 0) is not None:
                return
            if (self.FIT and values >= self.FIT_MIN and c and self.dtype is np.int8 and self.m.ndim <= 1
                    and self.m.size in (1, c) and isinstance(bias, np.ndarray) and bias.shape == (c,)
                    and (self.qmin >= self.zero_point or (self.TWO_LINES and self.zero_point < self.qmax))):
                self._fit(bias, c)

        _last_table = (None, None, None)  # (bias, channels, table) of the last table call

        #: calls that the fitted passes cover in one block with no channel gathered run a closure
        #: made on their first call per accumulator shape (the checks, lookups and constants of
        #: ``__call__`` / ``_fitted`` done once: about 5 us of a 20-30 us call at 1-6K values)
        FIT_RUNS = True
        _runs = None

        def _fitted_run(self, shape, fit):
            """``run(acc, out)``: the fitted passes for accumulators of ``shape`` in one block, or
            None (several blocks, or gathered channels)."""
            mu, _, risky, _, _, _, _, two = fit
            c = mu.size
            rows = math.prod(shape) // c
            reps = self._row_reps(rows, c)
            w = reps * c
            shape2 = (rows // reps, w)
            if risky.size or shape2[0] > max(1, self.SUB // w):
                return None
            tiled, lims, xor = self._fit_tiles(fit, reps), self._line_limits(two), two is None or two[2] == 0
            passes, step = self._line_passes, shape2[0]

            def run(acc, out):
                passes(acc.reshape(shape2), out.reshape(shape2).view(np.uint8), tiled, lims, step, xor)
            return run

        def __call__(self, acc, bias=None, out=None):
            acc = np.asarray(acc)
            if self.NATIVE:
                res = self._native_call(acc, bias, out)
                if res is not None:
                    return res
            runs = self._runs
            if runs is not None:
                hit = runs.get(acc.shape)
                if hit is not None and hit[0] is bias and acc.dtype == np.float32 and acc.flags.c_contiguous:
                    if out is None or out.shape != acc.shape or out.dtype != np.int8 or not out.flags.c_contiguous:
                        out = np.empty(acc.shape, np.int8)
                    hit[1](acc, out)
                    return out
            if acc.size <= self.TABLE_MAX and acc.dtype == np.float32 and acc.ndim:
                c = acc.shape[-1]
                last = self._last_table
                if last[0] is bias and last[1] == c and last[2] is not None:
                    return self._table_call(acc, last[2], out)
                if (c and self.dtype is np.int8 and self.m.ndim <= 1 and self.m.size in (1, c)
                        and (bias is None or (isinstance(bias, np.ndarray) and bias.shape == (c,)))):
                    table = self._table(bias, c)
                    if table is not None:
                        self._last_table = (bias, c, table)
                        return self._table_call(acc, table, out)
            c = acc.shape[-1] if acc.ndim else 0
            if (acc.dtype != np.float32 or acc.size < min(self.FAST_MIN, self.FIT_MIN) or not c
                    or not acc.flags.c_contiguous
                    or self.dtype is not np.int8 or self.m.ndim > 1 or self.m.size not in (1, c)
                    or not (bias is None or (isinstance(bias, np.ndarray) and bias.shape == (c,)))):
                return super().__call__(acc, bias, out)
            if self.FIT and acc.size >= self.FIT_MIN and (
                    self.qmin >= self.zero_point or (self.TWO_LINES and self.zero_point < self.qmax)):
                fit = self._fit(bias, c)
                if fit is not None:
                    if out is None or out.shape != acc.shape or out.dtype != np.int8 or not out.flags.c_contiguous:
                        out = np.empty(acc.shape, np.int8)
                    run = self._fitted_run(acc.shape, fit) if self.FIT_RUNS else None
                    if run is None:
                        return self._fitted(acc, fit, out)
                    if self._runs is None or len(self._runs) > 8:
                        self._runs = {}
                    self._runs[acc.shape] = (bias, run)
                    run(acc, out)
                    return out
            if acc.size < self.FAST_MIN:
                return super().__call__(acc, bias, out)
            _, mode, consts, tiles = self._prepare_fast(bias, c)
            if mode is None:
                return super().__call__(acc, bias, out)
            if out is None or out.shape != acc.shape or out.dtype != np.int8 or not out.flags.c_contiguous:
                out = np.empty(acc.shape, np.int8)
            rows = acc.size // c
            reps = self._row_reps(rows, c)
            w = reps * c
            tiled = tiles.get(reps)
            if tiled is None:  # the float32 constants, repeated along the work rows
                f32 = consts[:3] + consts[6:]
                tiled = tiles[reps] = tuple(np.tile(a, reps) for a in f32) if reps > 1 else f32
            mu, cc, d = tiled[:3]
            m2, right, b = consts[3:6]  # int64, per channel: only the fix-up reads them
            signed = mode == "signed"
            if signed:
                b32, half, cc_pos = tiled[3:]
                # qmin >= zero point (a fused RELU / RELU6): results of x < 0 clamp to qmin
                # either way (x*mu + c0 < zp + 129 for x <= -1), so the sign term, which only
                # lowers them, is left out: a = x*mu + (c0 + E) for every x; a value whose
                # floor the rounding could move (within D = 2E of a step) is recomputed in int64
                # as before. Three passes fewer.
                unsigned = self.qmin >= self.zero_point
            a2 = acc.reshape(-1, w)
            u2 = out.reshape(-1, w).view(np.uint8)
            lo = np.float32(self.qmin + 128 + self.C_OFF)
            hi = np.float32(self.qmax + 128 + self.C_OFF)
            step = max(1, self.SUB // w)
            flagged = []
            for r0 in range(0, a2.shape[0], step):
                xa = a2[r0:r0 + step]
                u = u2[r0:r0 + step]
                t = scratch("requant.f32", xa.shape, np.float32)
                if signed and unsigned:
                    np.add(xa, b32, out=t)  # exact (|x| < 2^24)
                    np.multiply(t, mu, out=t)
                    np.add(t, cc_pos, out=t)
                elif signed:
                    np.add(xa, b32, out=t)  # exact (|x| < 2^24); +0.0 for x == 0
                    # copysign(delta/2, x) by bits (numpy's copysign is a slow scalar loop)
                    sg = scratch("requant.sign", xa.shape, np.int32)
                    np.bitwise_and(t.view(np.int32), np.int32(-(1 << 31)), out=sg)
                    np.bitwise_or(sg, half, out=sg)
                    sg = sg.view(np.float32)
                    np.multiply(t, mu, out=t)
                    np.add(t, sg, out=t)
                    np.add(t, cc, out=t)
                else:
                    np.multiply(xa, mu, out=t)
                    np.add(t, cc, out=t)
                clip_ufunc(t, lo, hi, out=t)
                np.copyto(u, t, casting="unsafe")  # t >= 0: the cast truncates = floor
                np.subtract(t, d, out=t)
                ub = scratch("requant.u8", xa.shape, np.uint8)
                np.copyto(ub, t, casting="unsafe")
                idx = np.flatnonzero(np.not_equal(u, ub, out=scratch("requant.mask", xa.shape, np.bool_)))
                if idx.size:
                    flagged.append(idx + r0 * w if r0 else idx)
            if flagged:
                # the few values next to a rounding step, exactly (int64, as the base class)
                idx = flagged[0] if len(flagged) == 1 else np.concatenate(flagged)
                j = idx % c
                x = a2.reshape(-1)[idx].astype(np.int64)
                x += b[j]
                u2.reshape(-1)[idx] = self._exact_u8(x, m2[j], right[j])
            np.bitwise_xor(u2, np.uint8(0x80), out=u2)
            return out

    return BoundedRequantizer


_SIGN_BIT = np.int64(-(1 << 63))
#: see ``BoundedRequantizer.f64_consts``: the float64 passes' proof holds for right shifts up to 10
F64_MAX_RIGHT = 10


def f64_passes(a, t, sg, u, consts, lo: float, hi: float, signed: bool = True) -> None:
    """``BoundedRequantizer``'s float64 requantization (see ``f64_consts``) of the float32
    accumulators ``a`` (rows of the constants' width) into ``u`` (uint8: the result plus 128),
    on the work arrays ``t`` (float64) and ``sg`` (int64) of ``a``'s shape; ``lo``, ``hi`` the
    clamp range plus 128 (``hi`` plus 1/2). Passes: widen, add the bias, two bit operations
    (``copysign(delta/2, x)``), multiply, two adds, clip, cast to uint8 (floor of a value >= 0);
    the exact two-stage form (5 constants) multiplies, adds and floors first.

    ``signed=False`` (allowed when ``lo >= zero point + 128``, as under a fused RELU / RELU6)
    leaves out the sign term: it only lowers results of ``x < 0`` (``s < 0``), which are at most
    ``zero point + 128`` either way (``x*mu + c0 < zp + 129`` for ``x <= -1``) and so clamp to
    ``lo``: three passes fewer, the same bytes."""
    if len(consts) == 5:
        k, bk, pr, cc, half = consts
        np.copyto(t, a)
        np.multiply(t, k, out=t)
        np.add(t, bk, out=t)
        np.floor(t, out=t)  # s, exactly
        if signed:
            np.bitwise_and(t.view(np.int64), _SIGN_BIT, out=sg)
            np.bitwise_or(sg, half, out=sg)
        np.multiply(t, pr, out=t)
    else:
        b, mu, cc, half = consts
        np.copyto(t, a)  # exact: float32 integers; widening first beats a mixed-type add
        np.add(t, b, out=t)  # exact integers
        if signed:
            np.bitwise_and(t.view(np.int64), _SIGN_BIT, out=sg)
            np.bitwise_or(sg, half, out=sg)  # copysign(delta/2, x) by bits
        np.multiply(t, mu, out=t)
    if signed:
        np.add(t, sg.view(np.float64), out=t)
    np.add(t, cc, out=t)
    _clip_ufunc(t, lo, hi, out=t)
    np.copyto(u, t, casting="unsafe")


_BOUNDED = None


def bounded_requantizer(multiplier, shift, zero_point: int, qmin: int, qmax: int, acc_bound: float | None = None):
    """A :class:`~edgerun.ops.common.Requantizer` with the float32 path of ``BoundedRequantizer``
    (used once ``acc_bound`` is set: a true bound on ``|acc|`` for float32 accumulators)."""
    global _BOUNDED
    if _BOUNDED is None:
        _BOUNDED = _requant_bounded_class()
    r = _BOUNDED(multiplier, shift, zero_point, qmin, qmax)
    r.acc_bound = acc_bound
    return r
