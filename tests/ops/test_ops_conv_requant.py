"""The float32 requantization path of int8 CONV_2D / DEPTHWISE_CONV_2D (``BoundedRequantizer``).

Exhaustive over every accumulator value that does not saturate, against the fixed-point reference
(:func:`edgerun.ops.fixedpoint.multiply_by_quantized_multiplier`, itself tested against exact
rational arithmetic in test_fixedpoint.py), for multipliers that take either mode (``plain`` and
``signed``), left-shifted channels, clamps of fused activations and extreme zero points; then whole
convolutions against LiteRT with the fast path asserted to have run.
"""

import numpy as np
import pytest

from edgerun.ops.fixedpoint import bounded_requantizer, multiply_by_quantized_multiplier, quantize_multipliers
from tests.support.op_specs import RELU, RELU6, conv_spec, dw_spec, run_fc_int8


@pytest.fixture(autouse=True)
def _numpy_passes(monkeypatch):
    """These tests are about the numpy passes: the native loop (edgerun.native, tested in
    tests/ops/test_native.py) is kept out of them."""
    monkeypatch.setattr(type(bounded_requantizer([1 << 30], [0], 0, -128, 127)), "NATIVE", False)


def _reference(x, m, shift, zp, qmin, qmax):
    return np.clip(multiply_by_quantized_multiplier(x, m, shift) + zp, qmin, qmax).astype(np.int8)


def _mode(r, bias, c):
    return r._prepare_fast(bias, c)[1]


# (real multiplier per channel, expected mode): right shifts 1..13, 0 and a left shift
MULTIPLIERS = [
    ([1.1e-3, 3.3e-3, 1e-3, 1.7e-3], "plain"),   # right 9-10: an exact tie every 512 values or fewer
    ([0.0123, 0.009, 0.02, 0.011], "plain"),     # right 6-7
    ([0.06, 0.09, 0.07, 0.1], "signed"),         # right 3-4: too many exact ties for plain
    ([0.3, 0.45, 0.26, 0.49], "signed"),         # right 1-2: every other value a tie
    ([0.6, 0.99, 0.51, 0.75], "plain"),          # right 0: no rounding division at all
    ([1.3, 3.7, 0.7, 2.0], "plain"),             # left shifts folded into the multiplier
]


@pytest.mark.parametrize("reals,mode", MULTIPLIERS)
@pytest.mark.parametrize("zp,qmin,qmax", [(-128, -128, 127), (-3, -128, 127), (77, 77, 127), (127, -50, 60)])
def test_bounded_requantizer_every_unsaturated_accumulator(monkeypatch, reals, mode, zp, qmin, qmax):
    """Every integer accumulator whose result is not clamped (and a margin on both sides), with a
    per-channel bias, through several sub-blocks: equal to the reference, and the float32 path
    (not the int64 fallback) produced it."""
    monkeypatch.setattr(type(bounded_requantizer([1 << 30], [0], 0, -128, 127)), "SUB", 4096)
    c = len(reals)
    m, shift = quantize_multipliers(reals)
    bias = np.array([-1234, 0, 5678, -77], np.int64)
    span = int(300 / min(reals)) + 64
    x = np.arange(-span, span, dtype=np.int64)[:, None] - bias  # x + bias covers [-span, span) per channel
    bound = float(np.abs(x).max())
    r = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=bound)
    got = r(x.astype(np.float32), bias, out=np.empty(x.shape, np.int8))
    assert _mode(r, bias, c) == mode
    want = _reference(x + bias, m, shift, zp, qmin, qmax)
    assert np.array_equal(got, want)
    assert len(np.unique(want)) > 100 or qmax - qmin < 120  # the range was actually crossed


def test_bounded_requantizer_random_layers_and_fallbacks():
    """Random per-channel layers (shapes, biases, bounds): always equal to the base int64 path; an
    unset or too large bound, or float64 accumulators, take that path."""
    rng = np.random.default_rng(3)
    fast_layers = 0
    for _ in range(60):
        c = int(rng.choice([1, 3, 16, 24, 60, 128, 300]))
        rows = int(rng.integers(16500 // c + 1, 16500 // c + 2000))  # past FAST_MIN values
        k = int(rng.integers(1, 900))
        bound = float(k * 128 * 127)
        reals = rng.uniform(1, 3, c) * float(rng.choice([1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5]))
        m, shift = quantize_multipliers(reals)
        zp = int(rng.integers(-128, 128))
        qmin, qmax = (-128, 127) if rng.random() < 0.5 else (zp, 127)
        bias = rng.integers(-int(bound), int(bound) + 1, c).astype(np.int64)
        x = rng.integers(-int(bound), int(bound) + 1, (rows, c))
        want = _reference(x + bias, m, shift, zp, qmin, qmax)
        fast = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=bound)
        assert np.array_equal(fast(x.astype(np.float32), bias), want)
        assert np.array_equal(fast(x.astype(np.float64), bias), want)  # float64: the int64 path
        assert np.array_equal(bounded_requantizer(m, shift, zp, qmin, qmax)(x.astype(np.float32), bias), want)
        fast_layers += _mode(fast, bias, c) is not None
    assert fast_layers >= 30
    r = bounded_requantizer(*quantize_multipliers([1e-3]), 0, -128, 127, acc_bound=float(1 << 25))
    assert _mode(r, None, 1) is None  # sums past 2^24 are not exact in float32


def _spy_fast_calls(monkeypatch):
    cls = type(bounded_requantizer([1 << 30], [0], 0, -128, 127))
    calls = []
    orig = cls._prepare_fast

    def spy(self, bias, c):
        entry = orig(self, bias, c)
        calls.append(entry[1])
        return entry

    orig_fitted = cls._fitted

    def spy_fitted(self, acc, fit, out):  # the fitted passes (a fused RELU / RELU6)
        calls.append("fitted")
        return orig_fitted(self, acc, fit, out)

    monkeypatch.setattr(cls, "_prepare_fast", spy)
    monkeypatch.setattr(cls, "_fitted", spy_fitted)
    monkeypatch.setattr(cls, "SUB", 1000)  # several sub-blocks per call
    return calls


@pytest.mark.parametrize("act", [0, RELU, RELU6])
@pytest.mark.parametrize("spec_args", [
    ((1, 40, 36, 24), 48, 1, 1, (1, 1)),   # pointwise
    ((1, 66, 62, 8), 24, 3, 3, (2, 2)),    # strided 3x3 with padding
])
def test_conv_int8_float32_requantization_matches_litert(monkeypatch, act, spec_args):
    """Whole CONV_2D layers with the float32 requantization (several GEMM blocks per call) are
    bit-exact with LiteRT's reference kernels."""
    from edgerun.ops.conv import Conv2D

    calls = _spy_fast_calls(monkeypatch)
    monkeypatch.setattr(Conv2D, "COLS_BYTES", 4 * 48 * 40)  # 40 pixels per GEMM, several per requantization
    monkeypatch.setattr(Conv2D, "compile", lambda self, ins, outs: None)  # eval's blocks (the plan binds these)
    shape, oc, kh, kw, stride = spec_args
    conv_spec(shape, oc, kh, kw, stride=stride, seed=oc + act).run_int8(act=act, seed=act)
    assert calls and all(mode is not None for mode in calls)


@pytest.mark.parametrize("act", [0, RELU6])
@pytest.mark.parametrize("shape,kernel,stride", [((1, 40, 44, 32), 3, (1, 1)), ((1, 61, 59, 24), 5, (2, 2))])
def test_depthwise_int8_float32_requantization_matches_litert(monkeypatch, act, shape, kernel, stride):
    from edgerun.ops.conv import DepthwiseConv2D

    calls = _spy_fast_calls(monkeypatch)
    monkeypatch.setattr(DepthwiseConv2D, "rows_path", False)  # the window-column path
    monkeypatch.setattr(DepthwiseConv2D, "ACC_BYTES", 4 * 44 * 25 * 32 * 2)  # two rows per einsum
    monkeypatch.setattr(DepthwiseConv2D, "compile", lambda self, ins, outs: None)  # eval's blocks
    dw_spec(shape, 1, kernel, kernel, stride=stride, seed=kernel).run_int8(act=act, seed=act)
    assert calls and all(mode is not None for mode in calls)


@pytest.mark.parametrize("keep_float_bytes", [0, 1 << 30])  # filters widened per eval, or kept as float32
def test_conv_int8_long_reduction_matches_litert(monkeypatch, keep_float_bytes):
    """A 3x3x130 filter (K = 1170: past the 1032 products a float32 sum holds exactly at full
    int8 range) runs as float32 GEMMs per chunk of K summed in float64, with the filter kept as
    float32 or widened from int8 chunk by chunk; bit-exact either way."""
    from edgerun.ops.conv import Conv2D

    monkeypatch.setattr(Conv2D, "KEEP_FLOAT_BYTES", keep_float_bytes)
    monkeypatch.setattr(Conv2D, "KEEP_FLOAT_BYTES_FEW_ROWS", keep_float_bytes)
    kept = []
    orig = Conv2D.prepare

    def spy(self):
        shapes = orig(self)
        kept.append((self.w8 is None or self.lazy_float, self.chunk))  # (lazy_float: float32 in small plans)
        return shapes

    monkeypatch.setattr(Conv2D, "prepare", spy)
    conv_spec((1, 7, 6, 130), 20, 3, 3, seed=130).run_int8(seed=130)
    assert kept[-1][1] < 3 * 3 * 130 and kept[-1][0] == (keep_float_bytes > 0)


def test_mobilenet_int8_bit_exact_with_float32_requantization(monkeypatch):
    """A whole MobileNet-v1 0.5/128 int8 graph (built in code) equals LiteRT's reference kernels,
    with most of its convolutions requantized on the float32 path."""
    from edgerun.testing import compare_with_litert, mobilenet_v1

    calls = _spy_fast_calls(monkeypatch)
    compare_with_litert(mobilenet_v1(0.5, 128, classes=100, dtype="int8"), seed=1)
    assert sum(mode is not None for mode in calls) >= 10


@pytest.mark.parametrize("reals", [[1e-3, 2e-3, 5e-4], [0.3, 0.45, 0.26], [0.06, 0.09, 0.1], [0.6, 0.99, 0.51],
                                   [1.3, 3.7, 2.0], [1e-5, 3e-6, 2e-4], [0.0, 0.01, 0.02]])
@pytest.mark.parametrize("zp,qmin,qmax", [(-128, -128, 127), (-3, -128, 127), (77, 77, 127), (127, -50, 60)])
def test_threshold_table_every_accumulator(reals, zp, qmin, qmax):
    """The closed-form threshold table of tiny requantizations (one searchsorted over every
    channel's least accumulator per output level): every accumulator in range, including right
    shifts of 1, none, left shifts and a zero multiplier, equals the reference; and a call of at
    most TABLE_MAX values goes through it."""
    c = len(reals)
    m, shift = quantize_multipliers(reals)
    bias = np.array([-2345, 17, 2999], np.int64)
    span = min(int(400 / max(min(r for r in reals if r > 0), 1e-4)), 300000) + 50
    r = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=float(span))
    table = r._table(bias, c)
    assert table is not None
    acc = np.repeat(np.arange(-span, span + 1, dtype=np.int64)[:, None], c, axis=1)
    want = _reference(acc + bias, m, shift, zp, qmin, qmax)
    assert np.array_equal(r._table_call(acc.astype(np.float32), table, None), want)
    calls = []
    r._table_call = lambda a, t, o, orig=r._table_call: calls.append(1) or orig(a, t, o)
    small = acc[::max(1, len(acc) // 40)][:40]
    assert np.array_equal(r(small.astype(np.float32), bias), _reference(small + bias, m, shift, zp, qmin, qmax))
    assert calls


@pytest.mark.parametrize("spec_args", [
    ((1, 1, 1, 60), 60, 1, 1, (1, 1)),   # one pixel, pointwise (microWakeWord)
    ((1, 5, 1, 40), 30, 5, 1, (3, 1)),   # one-column strided 5x1
    ((1, 6, 7, 8), 12, 3, 3, (1, 1)),    # padded 3x3
])
@pytest.mark.parametrize("bound", [False, True])
def test_conv_int8_tiny_layers_match_litert(monkeypatch, spec_args, bound):
    """Small layers run on their own buffers (one copy, one GEMM, one requantization), bit-exact:
    through ``eval`` (the compile hook turned off), and through the invoke plan's bound call
    (``Conv2D.compile``: float64 columns with the threshold table's offsets in the GEMM)."""
    from edgerun.ops.conv import Conv2D

    tiny, compiled = [], []
    orig = Conv2D._eval_int8_tiny
    monkeypatch.setattr(Conv2D, "_eval_int8_tiny", lambda self, x: tiny.append(1) or orig(self, x))
    orig_compile = Conv2D.compile
    monkeypatch.setattr(Conv2D, "compile", (lambda self, ins, outs: compiled.append(orig_compile(self, ins, outs))
                                            or compiled[-1]) if bound else (lambda self, ins, outs: None))
    shape, oc, kh, kw, stride = spec_args
    spec = conv_spec(shape, oc, kh, kw, stride=stride, seed=oc)
    for seed in range(3):  # the cached window view of the input is reused across invokes
        spec.run_int8(seed=seed, act=RELU if seed == 2 else 0)
    if bound:
        assert compiled and all(c is not None for c in compiled) and not tiny
    else:
        assert tiny


@pytest.mark.parametrize("per_channel,act,w_zp", [(True, 0, 0), (True, RELU, 0), (False, 0, 7), (False, RELU6, 0)])
def test_fully_connected_threshold_table_every_accumulator(monkeypatch, per_channel, act, w_zp):
    """int8 FULLY_CONNECTED's threshold table (batch-1 layers of up to 128 units) against the
    kernel's own double-precision requantization for every accumulator the layer can produce,
    and the layer against LiteRT's reference kernel through the table."""
    from edgerun.ops.common import round_half_away
    from edgerun.ops.fully_connected import FullyConnected

    kernels = []
    orig = FullyConnected.prepare
    monkeypatch.setattr(FullyConnected, "prepare", lambda self: kernels.append(self) or orig(self))
    rng = np.random.default_rng(4)
    wf = rng.normal(0, 0.5, (24, 3)).astype(np.float32)  # 24 units x 255 levels: under TABLE_THRESHOLDS
    bf = rng.normal(0, 0.3, 24).astype(np.float32)
    run_fc_int8((1, 3), wf, bf, (1, 24), act=act, per_channel=per_channel, w_zp=w_zp)
    k = [kn for kn in kernels if kn.quantized][-1]
    assert k.fast and k._table  # built by the LiteRT comparison's invoke
    offsets, thresholds, sub = k._table
    xs = np.arange(-k.acc_limit - 2, k.acc_limit + 3, dtype=np.float64)[:, None]  # acc + bias
    acc = xs - k.bias_f
    got = np.searchsorted(thresholds, (acc + offsets).reshape(-1), side="right").reshape(acc.shape) - sub
    want = np.clip(round_half_away(xs * np.broadcast_to(k.eff, (24,))) + k.y_zp, k.lo, k.hi)
    assert np.array_equal(got, want)
    assert len(np.unique(want)) > 100


@pytest.mark.parametrize("reals", [[1.1e-3, 3.3e-3, 1e-3, 1.7e-3],   # right 9-10 (the bound)
                                   [0.0123, 0.009, 0.02, 0.011],     # right 6-7
                                   [0.06, 0.09, 0.07, 0.1],          # right 3-4
                                   [0.3, 0.45, 0.26, 0.49],          # right 1-2: ties everywhere
                                   [0.6, 0.99, 0.51, 0.75],          # right 0
                                   [1.3, 3.7, 0.7, 2.0]])            # left shifts folded
@pytest.mark.parametrize("zp,qmin,qmax", [(-128, -128, 127), (-3, -128, 127), (77, 77, 127), (127, -50, 60)])
@pytest.mark.parametrize("full", [False, True])
def test_bound_float64_requantization_every_unsaturated_accumulator(reals, zp, qmin, qmax, full):
    """The conv bound calls' float64 requantization (``_f64_requant``: no recomputation, an
    error bound instead) equals the reference for every integer accumulator whose result is not
    clamped, and a margin on both sides, with a per-channel bias: on (rows, F64_WIDTH) tiles of
    the constants, and 1-D over constants repeated for the whole array (``full``, the bound
    calls' form); it declines right shifts above ``F64_MAX_RIGHT``."""
    from edgerun.ops.conv import F64_MAX_RIGHT, _f64_requant

    c = len(reals)
    m, shift = quantize_multipliers(reals)
    bias = np.array([-2345, 17, 2999, -1], np.int64)
    span = min(int(300 / min(reals)), 1 << (17 if full else 21))  # full: the constants take 32 B a value
    r = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=float(span + 3000))
    acc = np.repeat(np.arange(-span, span + 1, dtype=np.int64)[:, None], c, axis=1)
    acc32 = acc.astype(np.float32)
    out = np.empty(acc.shape, np.int8)
    call = _f64_requant(r, acc32, bias, out, width=acc.size if full else None)
    assert call is not None
    call()
    assert np.array_equal(out, _reference(acc + bias, m, shift, zp, qmin, qmax))
    # a multiplier needing a right shift of F64_MAX_RIGHT + 1 is declined (its results vary)
    m2, s2 = quantize_multipliers([0.75 * 2.0 ** -(F64_MAX_RIGHT + 1)] * c)
    r2 = bounded_requantizer(m2, s2, zp, qmin, qmax, acc_bound=float(1 << 23))
    assert _f64_requant(r2, np.zeros((2, c), np.float32), bias, np.empty((2, c), np.int8)) is None


@pytest.mark.parametrize("zp,qmin,qmax", [(-128, -128, 127), (5, -128, 127), (-20, -20, 127)])
def test_bound_float64_constant_channels_any_shift_or_bias(zp, qmin, qmax):
    """Channels whose result is one value over their whole accumulator range (multipliers of
    2^-26 .. 2^-31 and biases up to 2^30, as visual wake words' dead channels; or clamped
    throughout) take the float64 passes beside ordinary channels, whatever their shift: every
    accumulator in range equals the reference. A channel with a right shift above
    F64_MAX_RIGHT whose result does vary still declines the layer."""
    from edgerun.ops.conv import _f64_requant

    reals = [3e-9, 2e-3, 7e-10, 1.1e-2, 2.5e-3 * 2.0 ** -14]
    m, shift = quantize_multipliers(reals)
    bound = 40000
    bias = np.array([1 << 30, -700, -(1 << 29) - 3, 1234, 0], np.int64)
    r = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=float(bound))
    consts = r.f64_consts(bias, len(reals))
    assert consts is not None
    assert list(consts[1] == 0) == [True, False, True, False, True]  # mu = 0: constant channels
    acc = np.repeat(np.arange(-bound, bound + 1, dtype=np.int64)[:, None], len(reals), axis=1)
    out = np.empty(acc.shape, np.int8)
    call = _f64_requant(r, acc.astype(np.float32), bias, out)
    call()
    want = _reference(acc + bias, m, shift, zp, qmin, qmax)
    assert np.array_equal(out, want)
    assert len(np.unique(want[:, 3])) > 100 and len(np.unique(want[:, 0])) == 1
    # the last channel (right shift 21) varies once the range is wide enough: declined
    r2 = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=float(1 << 23))
    assert r2.f64_consts(bias, len(reals)) is None


@pytest.mark.parametrize("op,spec_args", [
    ("CONV_2D", ((1, 25, 5, 64), 64, 1, 1, (1, 1))),     # DS-CNN 1x1: beyond the tiny path
    ("DEPTHWISE_CONV_2D", ((1, 28, 1, 128), None, 5, 1, (1, 1))),  # str_ww: beyond the small path
    ("DEPTHWISE_CONV_2D", ((1, 25, 5, 64), None, 3, 3, (1, 1))),   # DS-CNN 3x3: 8000 outputs
    ("CONV_2D", ((1, 48, 48, 8), 16, 1, 1, (1, 1))),     # vww 1x1: float64 passes over 4 rows of 9216
    ("DEPTHWISE_CONV_2D", ((1, 24, 24, 32), None, 3, 3, (1, 1))),  # vww: beyond the einsum path
    ("CONV_2D", ((1, 12, 12, 64), 64, 1, 1, (1, 1))),    # 9216 values: float64 over whole-output constants
    ("CONV_2D", ((1, 32, 32, 16), 16, 3, 3, (1, 1))),    # ResNet-8: columns beyond one eval block
    ("CONV_2D", ((1, 8, 8, 64), 64, 3, 3, (1, 1))),      # ResNet-8: int8 filter widened per call
])
def test_larger_layers_bound_with_own_buffers_match_litert(monkeypatch, op, spec_args):
    """Layers beyond the tiny / small eval paths whose columns fit ``BIND_BYTES`` get bound
    calls on the plan's shared workspace (float64 requantization where it applies and fits
    ``F64_FULL_BYTES``, else the requantizer's own call): bit-exact with LiteRT."""
    from edgerun.ops.conv import Conv2D, DepthwiseConv2D

    cls = Conv2D if op == "CONV_2D" else DepthwiseConv2D
    compiled = []
    orig = cls.compile
    monkeypatch.setattr(cls, "compile", lambda self, ins, outs: compiled.append(orig(self, ins, outs)) or compiled[-1])
    shape, oc, kh, kw, stride = spec_args
    spec = (conv_spec(shape, oc, kh, kw, stride=stride, seed=5) if op == "CONV_2D"
            else dw_spec(shape, 1, kh, kw, stride=stride, seed=5))
    for seed in range(2):
        spec.run_int8(seed=seed, act=RELU if seed else 0)
    assert compiled and all(c is not None for c in compiled)


@pytest.mark.parametrize("shape,kernel,stride,dilation", [
    ((1, 48, 48, 8), 3, (1, 1), (1, 1)),    # vww's first depthwise layer: 4 pixels a GEMM row
    ((1, 90, 94, 6), 3, (2, 2), (1, 1)),    # strided, 47 output columns: one pixel a row
    ((1, 60, 63, 4), 3, (1, 1), (2, 2)),    # dilated: 3 pixels a row
    ((2, 40, 40, 8), 3, (1, 2), (1, 1)),    # batch 2, stride in columns only
])
@pytest.mark.parametrize("act", [0, RELU6])
def test_depthwise_few_channels_block_diagonal_gemm_matches_litert(monkeypatch, shape, kernel, stride, dilation,
                                                                  act):
    """Depthwise layers with few channels beyond the einsum path bind as one GEMM over groups of
    output pixels with a block-diagonal filter (``_compile_block_diagonal``): bit-exact with
    LiteRT over several invokes."""
    from edgerun.ops.conv import DepthwiseConv2D

    built = []
    orig = DepthwiseConv2D._compile_block_diagonal
    monkeypatch.setattr(DepthwiseConv2D, "_compile_block_diagonal",
                        lambda self, x, out: built.append(orig(self, x, out)) or built[-1])
    spec = dw_spec(shape, 1, kernel, kernel, stride=stride, dilation=dilation, seed=kernel)
    for seed in range(2):
        spec.run_int8(seed=seed, act=act)
    assert built and all(b is not None for b in built)


@pytest.mark.parametrize("shape,oc,kernel,stride,dilation", [
    ((1, 96, 96, 3), 8, 3, (2, 2), (1, 1)),   # vww's first layer: 4 pixels a GEMM row
    ((1, 30, 33, 5), 6, 3, (1, 1), (2, 2)),   # dilated, 33 output columns: 3 pixels a row
    ((2, 17, 20, 4), 3, (5, 3), (1, 2), (1, 1)),  # batch 2, 5x3, stride in columns only: 2 pixels a row
])
@pytest.mark.parametrize("act", [0, RELU])
def test_conv_few_outputs_grouped_gemm_matches_litert(monkeypatch, shape, oc, kernel, stride, dilation, act):
    """CONV_2D layers with at most GROUPED_MAX_OUT output channels bind with several output
    pixels per GEMM row and a block-Toeplitz filter (``Conv2D._compile_grouped``): bit-exact
    with LiteRT over several invokes."""
    from edgerun.ops.conv import Conv2D

    built = []
    orig = Conv2D._compile_grouped
    monkeypatch.setattr(Conv2D, "_compile_grouped", lambda self, x, out: built.append(orig(self, x, out)) or built[-1])
    kh, kw = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    spec = conv_spec(shape, oc, kh, kw, stride=stride, dilation=dilation, seed=oc)
    for seed in range(2):
        spec.run_int8(seed=seed, act=act)
    assert built and all(b is not None for b in built)


@pytest.mark.parametrize("small_arena", [1 << 30, 0])
def test_bound_call_budget_depends_on_the_plan_size(monkeypatch, small_arena):
    """A layer whose columns exceed the large-plan budget (ResNet-8's 32x32x16 3x3: 576 KB) binds
    in a small plan (activation arena within SMALL_ARENA_BYTES) and runs eval in a large one;
    bit-exact with LiteRT either way."""
    import edgerun.ops.conv as conv

    monkeypatch.setattr(conv, "SMALL_ARENA_BYTES", small_arena)
    compiled = []
    orig = conv.Conv2D.compile
    monkeypatch.setattr(conv.Conv2D, "compile", lambda self, ins, outs: compiled.append(orig(self, ins, outs))
                        or compiled[-1])
    conv_spec((1, 32, 32, 16), 16, 3, 3, seed=9).run_int8(seed=1, act=RELU)
    assert compiled and all((c is not None) == bool(small_arena) for c in compiled)


@pytest.mark.parametrize("reals", [[3e-4, 7e-6, 2.4e-5, 1.1e-3],    # right 12, 17, 15, 10
                                   [1.3, 2e-5, 0.5, 3e-6]])          # a left shift, right 0, 16, 18
@pytest.mark.parametrize("zp,qmin,qmax", [(-128, -128, 127), (-3, -128, 127), (77, 77, 127), (10, -60, 90)])
@pytest.mark.parametrize("full", [False, True])
def test_bound_float64_exact_two_stage_every_unsaturated_accumulator(reals, zp, qmin, qmax, full):
    """Layers with varying channels whose right shift is beyond F64_MAX_RIGHT take the exact
    two-stage float64 form (``f64_consts`` returns 5 constants): every integer accumulator over a
    range that crosses many rounding steps and ties, with per-channel biases, equals the reference;
    with qmin >= zp (a fused RELU: ``zp = qmin``) and without (the sign term in the passes)."""
    from edgerun.ops.conv import _f64_requant

    c = len(reals)
    m, shift = quantize_multipliers(reals)
    bias = np.array([-23451, 1 << 17, 299, -(1 << 16) - 7], np.int64)
    span = 1 << (16 if full else 18)
    r = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=float(span))
    consts = r.f64_consts(bias, c)
    assert consts is not None and len(consts) == 5
    acc = np.repeat(np.arange(-span, span + 1, dtype=np.int64)[:, None], c, axis=1)
    out = np.empty(acc.shape, np.int8)
    call = _f64_requant(r, acc.astype(np.float32), bias, out, width=acc.size if full else None)
    assert call is not None
    call()
    want = _reference(acc + bias, m, shift, zp, qmin, qmax)
    assert np.array_equal(out, want)
    assert (np.ptp(want.astype(np.int64), axis=0) > 0).sum() >= 2  # results vary, not all clamped


def test_bound_float64_per_channel_bounds_admit_small_channels():
    """``acc_bounds`` (128 * sum |w| per channel, set by the conv kernels) makes a small-weight
    channel with a large shift constant over its own range, where the layer's bound declines the
    layer; with the per-channel bounds every accumulator in each channel's range is exact."""
    from edgerun.ops.conv import _f64_requant

    reals = [2e-3, 2.5e-3 * 2.0 ** -14, 1.1e-2]
    m, shift = quantize_multipliers(reals)
    bias = np.array([-700, 1 << 29, 1234], np.int64)
    wide = float(1 << 23)
    r = bounded_requantizer(m, shift, 5, -128, 127, acc_bound=wide)
    assert r.f64_consts(bias, 3) is None  # the layer's bound: channel 1 varies, 2^53 products
    r2 = bounded_requantizer(m, shift, 5, -128, 127, acc_bound=wide)
    bounds = np.array([1 << 16, 3000, 1 << 16], np.int64)
    r2.acc_bounds = bounds
    consts = r2.f64_consts(bias, 3)
    assert consts is not None
    acc = np.repeat(np.arange(-(1 << 16), (1 << 16) + 1, dtype=np.int64)[:, None], 3, axis=1)
    acc = np.clip(acc, -bounds, bounds)  # each channel within its own bound
    out = np.empty(acc.shape, np.int8)
    _f64_requant(r2, acc.astype(np.float32), bias, out)()
    assert np.array_equal(out, _reference(acc + bias, m, shift, 5, -128, 127))


@pytest.mark.parametrize("op", ["CONV_2D", "DEPTHWISE_CONV_2D"])
@pytest.mark.parametrize("act", [0, RELU6])
def test_vww_like_layers_with_tiny_channels_match_litert(monkeypatch, op, act):
    """vww's 6x6x128 layers: a few channels whose float weights are 1/50 of the others get
    right shifts of 13-15 under per-channel quantization (the others at most 10); the bound call takes the exact two-stage
    float64 form and stays bit-exact with LiteRT's reference kernels."""
    from edgerun.ops.conv import Conv2D, DepthwiseConv2D

    cls = Conv2D if op == "CONV_2D" else DepthwiseConv2D
    kernels = []
    orig = cls.compile
    monkeypatch.setattr(cls, "compile", lambda self, ins, outs: kernels.append(self) or orig(self, ins, outs))
    spec = (conv_spec((1, 6, 6, 64), 128, 1, 1, seed=11) if op == "CONV_2D"
            else dw_spec((1, 6, 6, 128), 1, 3, 3, seed=11))
    tiny = [3, 40, 77, 100]
    if op == "CONV_2D":
        spec.wf[tiny] *= np.float32(0.02)
    else:
        spec.wf[..., tiny] *= np.float32(0.02)
    spec.bf[tiny] *= np.float32(0.02)
    for seed in range(2):
        spec.run_int8(seed=seed, act=act)
    k = kernels[-1]
    consts = k.requant.f64_consts(k.bias, 128)
    assert consts is not None and len(consts) == 5


@pytest.mark.parametrize("shape,dm,kernel,stride,dilation", [
    ((1, 20, 22, 128), 1, 3, (1, 1), (1, 1)),   # 3x3 with many channels
    ((1, 31, 29, 96), 1, 5, (2, 2), (1, 1)),    # 5x5 strided, 96 channels: input-row slabs
    ((1, 16, 18, 144), 1, 3, (1, 1), (2, 2)),   # dilated
    ((2, 12, 12, 128), 1, 5, (1, 2), (1, 1)),   # batch 2, stride in columns only: slabs
    ((1, 20, 20, 64), 2, 3, (1, 1), (1, 1)),    # depth multiplier 2: 128 output channels
    ((1, 24, 22, 24), 1, 3, (1, 1), (1, 1)),    # few channels: tiles of 5 pixels, 2 columns left over
    ((1, 41, 19, 32), 1, 5, (2, 1), (1, 2)),    # strided rows, dilated columns
    ((1, 12, 50, 24), 1, 3, (1, 1), (1, 1)),    # 10 tiles of 5 pixels
    ((1, 48, 45, 24), 1, 5, (2, 2), (1, 2)),    # stride 2, dilation 2: one column phase
    ((1, 60, 40, 16), 1, 5, (1, 3), (1, 2)),    # column stride 3, dilation 2: three phases
])
@pytest.mark.parametrize("act", [0, RELU6])
def test_depthwise_einsum_over_input_rows_matches_litert(monkeypatch, shape, dm, kernel, stride, dilation, act):
    """int8 depthwise layers beyond the einsum path sum their taps with one einsum per block of
    output rows and column phase (strided columns) over a (rows, KH, taps, tiles, tile * C) view
    of float input rows against tiled weights (``_eval_int8_rows``, remainder columns included).
    Blocks and tiles forced small here: bit-exact with LiteRT over several invokes."""
    from edgerun.ops.conv import DepthwiseConv2D

    ran = []
    rows, slabs = DepthwiseConv2D._eval_int8_rows, DepthwiseConv2D._eval_int8_slabs
    monkeypatch.setattr(DepthwiseConv2D, "_eval_int8_rows",
                        lambda self, xp, out: ran.append("rows") or rows(self, xp, out))
    monkeypatch.setattr(DepthwiseConv2D, "_eval_int8_slabs",
                        lambda self, xp, out, bh: ran.append(bh) or slabs(self, xp, out, bh))
    monkeypatch.setattr(DepthwiseConv2D, "compile", lambda self, ins, outs: None)  # eval's path
    monkeypatch.setattr(DepthwiseConv2D, "SLAB_ACC_BYTES", 4 * 2 * 6 * 128)  # 1-2 output rows a block
    monkeypatch.setattr(DepthwiseConv2D, "ROWS_ACC_BYTES", 4 * 3 * 22 * 24)  # several row blocks
    monkeypatch.setattr(DepthwiseConv2D, "ROWS_TILE_VALUES", 100)  # tiles of a few pixels
    # blocks stay small: the float32 requantization from 1024 accumulators on
    monkeypatch.setattr(type(bounded_requantizer([1 << 30], [0], 0, -128, 127)), "FAST_MIN", 1024)
    spec = dw_spec(shape, dm, kernel, kernel, stride=stride, dilation=dilation, seed=kernel + dm)
    for seed in range(2):
        spec.run_int8(seed=seed, act=act)
    want = "rows" if stride[1] == 1 or kernel >= 5 else "slabs"
    assert ran and all((r == "rows") == (want == "rows") for r in ran)
    assert all(r == "rows" or 0 < r < shape[1] for r in ran)


def test_conv_int8_many_pixels_small_filter_widened_per_eval_bit_exact(monkeypatch):
    """A layer of at least ``WIDEN_ALWAYS_ROWS`` output pixels keeps no float32 copy of its
    filter, however small (3x3x8 -> 16 here, 4.6 KB as float32): the int8 filter is widened
    per call; the output still equals LiteRT's reference kernels."""
    from edgerun.ops.conv import Conv2D

    kept = []
    orig = Conv2D.prepare

    def spy(self):
        shapes = orig(self)
        kept.append(self.w8 is not None)
        return shapes

    monkeypatch.setattr(Conv2D, "prepare", spy)
    conv_spec((1, 20, 20, 8), 16, 3, 3, seed=11).run_int8(seed=3, act=RELU)
    assert kept and kept[-1]


def _fix_mode(monkeypatch, cls, mode: str) -> None:
    """Fix-ups by value (``_fix_up``) over whole blocks, or always channel by channel."""
    monkeypatch.setattr(cls, "FIX_COLUMNS", mode == "columns")
    if mode == "columns":
        monkeypatch.setattr(cls, "FIX_COL_CALL_NS", 0.0)
        monkeypatch.setattr(cls, "FIX_COL_VALUE_NS", 0.0)


@pytest.mark.parametrize("fix_mode", ["arrays", "columns"])
def test_fitted_passes_fixups_and_gathered_channels(monkeypatch, fix_mode):
    """Under a fused RELU / RELU6 the fitted float32 line (``_fit``) runs; channels it cannot fit
    take the fix-up by value (over whole blocks, or channel by channel) or are gathered (then
    float64 passes, or the int64 path past their right-shift bound): every branch equal to the
    reference on random layers, large and small, and on every accumulator near each level's
    threshold."""
    cls = type(bounded_requantizer([1 << 30], [0], 0, -128, 127))
    monkeypatch.setattr(cls, "SUB", 4096)
    _fix_mode(monkeypatch, cls, fix_mode)
    rng = np.random.default_rng(11)
    seen = {"fitted": 0, "fixes": 0, "gathered": 0}
    for trial in range(24):
        c = int(rng.choice([8, 24, 64, 144]))
        bound = int(rng.choice([146304, 406400, 1820672]))
        reals = rng.uniform(0.3, 3, c) * (256.0 / bound) * rng.uniform(1, 8)
        m, shift = quantize_multipliers(reals)
        zp = int(rng.integers(-128, -100))
        qmin, qmax = (zp, 127) if trial % 3 else (zp, zp + 110)
        bias = rng.integers(-bound // 4, bound // 4, c).astype(np.int32)
        r = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=float(bound))
        if trial % 2:  # one fix-up value per channel at most: more channels gathered
            r.FIT_MAX_FIXES = 0
        fit = r._fit(bias, c)
        if fit is None:
            continue
        # every accumulator within 3 of a threshold of every channel, and random ones
        p = r._channel_params(bias, c)
        mu = p[3]
        n = 20000 if trial % 4 < 2 else 1100  # past FAST_MIN, or just past FIT_MIN
        x = rng.integers(-bound // 8, bound // 8, (n // c + 1, c))
        near = []
        for lvl in range(qmin + 1, qmax + 1, 3):  # near thresholds, from the exact line
            t = np.round((lvl + 128 - p[4] - p[2] * mu) / mu).astype(np.int64)
            near.append(np.clip(t[None, :] + np.arange(-3, 4)[:, None], -bound, bound))
        x = np.concatenate([x] + near).astype(np.int64)
        got = r(x.astype(np.float32), bias)
        assert np.array_equal(got, _reference(x + bias, m, shift, zp, qmin, qmax))
        seen["fitted"] += 1
        seen["fixes"] += len(fit[5]) > 0
        seen["gathered"] += fit[2].size > 0
    assert seen["fitted"] >= 10 and seen["fixes"] >= 2 and seen["gathered"] >= 2, seen


@pytest.mark.parametrize("spec_args,bound", [
    (((1, 4, 4, 24), 40, 1, 1, (1, 1)), True),    # pointwise, tiny: bound, (K, O) int8 copy
    (((1, 6, 5, 16), 24, 3, 3, (1, 1)), True),    # 3x3 with padding, bound
    (((1, 2, 2, 64), 70, 2, 2, (2, 2)), True),    # one output pixel: the (O, K) filter in blocks
    (((1, 9, 8, 40), 30, 3, 3, (1, 1)), False),   # eval's blocks
    (((1, 5, 4, 130), 20, 3, 3, (1, 1)), False),  # K = 1170: float32 chunks summed in float64
])
@pytest.mark.parametrize("small_arena", [0, 1 << 30])
def test_conv_int8_lazy_float_filters_match_litert(monkeypatch, spec_args, bound, small_arena):
    """A filter small plans keep as float32 (``Conv2D.lazy_float``) stays int8 in a larger plan
    (SMALL_ARENA_BYTES 0 here): widened per call into the shared scratch, by the bound call
    (in blocks of output channels for a one-pixel layer, LAZY_BLOCK_BYTES made small) or by
    eval; in a small plan the float32 copy is made at compile. Bit-exact with LiteRT either way."""
    import edgerun.ops.conv as conv

    monkeypatch.setattr(conv, "SMALL_ARENA_BYTES", small_arena)
    monkeypatch.setattr(conv, "LAZY_BLOCK_BYTES", 4 * 256 * 24)  # 24-channel blocks of the 2x2x64 filter
    if not bound:
        monkeypatch.setattr(conv, "BIND_BYTES_LARGE_PLAN", 1024)
        monkeypatch.setattr(conv, "BIND_BYTES", 1024)
        monkeypatch.setattr(conv.Conv2D, "COLS_BYTES", 4 * 130 * 9 * 8)  # several row blocks
    seen = []
    orig = conv.Conv2D.compile

    def spy(self, ins, outs):
        call = orig(self, ins, outs)
        seen.append((self.lazy_float, self.wmats[0] is None, call is not None))
        return call

    monkeypatch.setattr(conv.Conv2D, "compile", spy)
    shape, oc, kh, kw, stride = spec_args
    for seed in range(2):
        conv_spec(shape, oc, kh, kw, stride=stride, seed=oc + seed).run_int8(seed=seed, act=RELU if seed else 0)
    large = not small_arena
    assert seen and all(s == (large, large, bound) for s in seen)


def test_requantizer_small_path_shares_work_arrays_bit_exact():
    """Requantizers of the same accumulator shape share their small path's int64 work arrays
    (one pair per shape and thread); calls interleaved between two of them still give each its
    own exact results."""
    from edgerun.ops.common import Requantizer

    rng = np.random.default_rng(5)
    shape = (4, 16)
    layers = []
    for seed in range(2):
        reals = rng.uniform(1e-5, 3e-3, shape[1])
        m, shift = quantize_multipliers(reals)
        zp = int(rng.integers(-20, 20))
        bias = rng.integers(-1 << 16, 1 << 16, shape[1]).astype(np.int64)
        layers.append((Requantizer(m, shift, zp, -128, 127), m, shift, zp, bias))
    for _ in range(3):
        for r, m, shift, zp, bias in layers:
            acc = rng.integers(-1 << 20, 1 << 20, shape).astype(np.float32)
            out = np.empty(shape, np.int8)
            assert r(acc, bias, out=out) is out
            assert np.array_equal(out, _reference(acc.astype(np.int64) + bias, m, shift, zp, -128, 127))
    (a,), (b,) = (list(r._small.values()) for r, *_ in layers)
    assert a[1] is b[1] and a[2] is b[2]


@pytest.mark.parametrize("shape", [(64, 5), (8, 40, 5), (1, 5)])  # tiled rows, 3-D, one row
def test_requantizer_scale_and_call_without_kept_plain_constant(shape):
    """The rounding constant without the zero point is made on first use when the zero point
    folds into the shift (its only users are then ``scale()`` and the unfolded form):
    ``scale()`` still equals MultiplyByQuantizedMultiplier, and the calls before and after it
    equal the reference."""
    from edgerun.ops.common import Requantizer

    rng = np.random.default_rng(17)
    c = shape[-1]
    m, shift = quantize_multipliers([0.9, 0.6, 0.3, 0.07, 3e-3][:c])  # right shifts 0, 0, 1, 3, 8
    r = Requantizer(m, shift, -5, -128, 127)
    assert r.fold_zp and r._add_plain_30 is None
    acc = rng.integers(-1 << 20, 1 << 20, shape).astype(np.int64)
    bias = rng.integers(-1000, 1000, c).astype(np.int64)
    want = _reference(acc + bias, m, shift, -5, -128, 127)
    assert np.array_equal(r(acc.astype(np.float32), bias), want)
    assert np.array_equal(r.scale(acc), multiply_by_quantized_multiplier(acc, m, shift))
    assert np.array_equal(r(acc.astype(np.float32), bias), want)


@pytest.mark.parametrize("risky,vo,fix_mode", [(0.0, 0, "arrays"), (0.5, 0, "arrays"), (0.0, 128, "arrays"),
                                              (0.0, 0, "columns")])
def test_two_fitted_lines_without_activation_every_accumulator(monkeypatch, risky, vo, fix_mode):
    """Without a fused activation (``qmin < zero point < qmax``) the fitted passes take two float32
    lines (``_two_lines``): the levels above the zero point and those at or below it, whose
    thresholds RoundingDivideByPOT's negative ties move by 1-2 accumulators. Every accumulator of
    the whole range ``[-bound, bound]`` of every channel, in large and small calls, equals the
    fixed-point reference; the two-line passes (with fix-ups by value on some layers) produced it.
    Also with the options off by default: channels gathered into the float64 passes with the sign
    term (TWO_MAX_RISKY), and V offset by 128 (TWO_VO, no final XOR)."""
    cls = type(bounded_requantizer([1 << 30], [0], 0, -128, 127))
    monkeypatch.setattr(cls, "SUB", 4096)
    monkeypatch.setattr(cls, "TWO_MAX_RISKY", risky)
    monkeypatch.setattr(cls, "TWO_VO", vo)
    _fix_mode(monkeypatch, cls, fix_mode)  # fix-ups over whole blocks, or channel by channel
    rng = np.random.default_rng(5)
    seen = {"two": 0, "fixes": 0, "gathered": 0}
    for trial in range(16):
        zp, qmin, qmax = [(-5, -128, 127), (-120, -128, 127), (90, -128, 127), (3, -100, 60)][trial % 4]
        c = 16
        bound = int(rng.choice([60000, 150000]))
        reals = rng.uniform(0.5, 2, c) * (200.0 / bound) * float(rng.choice([0.5, 1, 2]))
        m, shift = quantize_multipliers(reals)
        bias = rng.integers(-bound // 4, bound // 4, c).astype(np.int32)
        r = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=float(bound))
        fit = r._fit(bias, c)
        if fit is None:
            continue
        assert fit[7] is not None and (risky or fit[2].size == 0)  # two lines; gathered only if allowed
        x = np.broadcast_to(np.arange(-bound, bound + 1, dtype=np.int64)[:, None], (2 * bound + 1, c))
        want = _reference(x + bias, m, shift, zp, qmin, qmax)
        rows = (2 * bound + 1) // 2 * 2  # whole-range call, then a call below FAST_MIN
        got = r(np.ascontiguousarray(x[:rows], np.float32), bias)
        assert np.array_equal(got, want[:rows])
        small = slice(bound - 400, bound - 400 + 12000 // c)
        assert np.array_equal(r(np.ascontiguousarray(x[small], np.float32), bias), want[small])
        assert np.array_equal(r(x[-8:].astype(np.float32), bias), want[-8:])  # the threshold table
        seen["two"] += 1
        seen["fixes"] += len(fit[5]) > 0
        seen["gathered"] += fit[2].size > 0
    assert seen["two"] >= 8 and (seen["fixes"] >= 2 or risky), seen
    if risky:
        assert seen["gathered"] >= 1, seen


@pytest.mark.parametrize("two", [False, True])
def test_fitted_passes_per_channel_bounds_every_accumulator(monkeypatch, two):
    """``_fit`` checks each channel over its own accumulator range (``acc_bounds``, capped by
    the layer's ``acc_bound``): every accumulator of every channel's range, clamped per column,
    equals the fixed-point reference, with one line (a fused RELU) and with two; and with two
    lines the tighter ranges let channels fit that the layer's whole range leaves over."""
    cls = type(bounded_requantizer([1 << 30], [0], 0, -128, 127))
    monkeypatch.setattr(cls, "SUB", 4096)
    rng = np.random.default_rng(23)
    fitted = more = 0
    for trial in range(12):
        zp, qmin = ((-5, -128) if trial % 2 else (40, -128)) if two else (-128, -128)
        c, layer = 16, 60000
        bounds = rng.integers(layer // 10, layer, c)
        reals = rng.uniform(0.5, 2, c) * (200.0 / layer)  # the layer's range spans most levels
        m, shift = quantize_multipliers(reals)
        bias = rng.integers(-1000, 1000, c).astype(np.int32)
        r = bounded_requantizer(m, shift, zp, qmin, 127, acc_bound=float(layer))
        whole = r._fit(bias, c)
        r = bounded_requantizer(m, shift, zp, qmin, 127, acc_bound=float(layer))
        r.acc_bounds = lambda b=bounds: b.astype(np.int64)  # made on first use, as the kernels do
        fit = r._fit(bias, c)
        if fit is None:
            continue
        fitted += 1
        more += whole is None or whole[2].size > fit[2].size
        x = np.arange(-layer, layer + 1, dtype=np.int64)[:, None]
        x = np.clip(x, -bounds, bounds)[: 2 * layer // 2 * 2]  # each column within its bound
        want = _reference(x + bias, m, shift, zp, qmin, 127)
        assert np.array_equal(r(np.ascontiguousarray(x, np.float32), bias), want)
    assert fitted >= 6 and (more >= 1 or not two), (fitted, more)


@pytest.mark.parametrize("zp,qmin", [(-128, -128), (-5, -128)])  # one fitted line, and two
def test_fitted_run_reused_per_shape_and_bias(zp, qmin):
    """A call the fitted passes cover in one block runs a closure made on the first call of its
    accumulator shape (``_fitted_run``): later calls of that shape, with other accumulators or
    another bias of the same shape (its own fit), still equal the fixed-point reference."""
    rng = np.random.default_rng(29)
    c, bound = 24, 60000
    m, shift = quantize_multipliers(rng.uniform(0.5, 2, c) * (200.0 / bound))
    r = bounded_requantizer(m, shift, zp, qmin, 127, acc_bound=float(bound))
    biases = [b for b in (rng.integers(-2000, 2000, c).astype(np.int32) for _ in range(20))
              if r._fit(b, c) is not None and not r._fit(b, c)[2].size][:2]
    assert len(biases) == 2
    for call in range(6):
        bias = biases[call // 3]  # three calls a bias: the later two reuse the closure
        acc = rng.integers(-bound, bound + 1, (96, c))
        got = r(acc.astype(np.float32), bias)
        assert np.array_equal(got, _reference(acc + bias, m, shift, zp, qmin, 127)), call
    assert r._runs and (96, c) in r._runs
