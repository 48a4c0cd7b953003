"""SOFTMAX, LOG_SOFTMAX, LOGISTIC, TANH, LEAKY_RELU, PRELU, HARD_SWISH against LiteRT BUILTIN_REF.

int8 must be bit-exact, float32 within rtol 1e-5. int8 inputs run every one of the 256 codes
through each kernel (table and fixed-point paths alike) for narrow and wide input ranges.
"""

import numpy as np
import pytest

from edgerun.errors import UnsupportedOpError
from edgerun.ir import ModelBuilder
from edgerun.testing import compare_with_litert, run_edgerun, run_litert
from tests.support.op_specs import single_op


@pytest.fixture(autouse=True)
def _numpy_prelu_forms(request, monkeypatch):
    """The PRELU table forms' own tests (chunked rows, compact rows) run with edgerun.native's
    loop off; the others take whatever the machine has (tests/ops/test_native.py)."""
    if "compact" in request.node.name or "chunked" in request.node.name:
        from edgerun.ops.nonlinear import Prelu

        monkeypatch.setattr(Prelu, "NATIVE", False)

ALL_CODES = np.arange(-128, 128, dtype=np.int8)

# (scale, zero point): narrow ranges (|x| < 1) through very wide ones (|x| up to ~500)
INPUT_QUANT = [(0.0039, -3), (0.02, 0), (0.0625, 17), (0.15, -128), (0.5, 100), (2.0, -7)]


def all_codes(shape, seed=0, copies=1):
    """Every int8 code ``copies`` times, shuffled into ``shape`` (size must be 256 * copies)."""
    rng = np.random.default_rng(seed)
    return rng.permutation(np.tile(ALL_CODES, copies)).reshape(shape)


# --- LOGISTIC / TANH: 256-entry tables --------------------------------------------------------------

@pytest.mark.parametrize("qi", INPUT_QUANT)
@pytest.mark.parametrize("shape", [(256,), (2, 8, 32)])
def test_logistic_int8(qi, shape):
    x = all_codes(shape, copies=int(np.prod(shape)) // 256)
    compare_with_litert(single_op("LOGISTIC", shape, "int8", qi, (1 / 256, -128)), [x])


@pytest.mark.parametrize("qi", INPUT_QUANT)
@pytest.mark.parametrize("qo", [(1 / 128, 0), (0.01, -5)])
def test_tanh_int8(qi, qo):
    x = all_codes((4, 64))
    compare_with_litert(single_op("TANH", (4, 64), "int8", qi, qo), [x])


@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
def test_logistic_tanh_float(op):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-30, 30, 300), rng.normal(0, 2, 300),
                        [-9.0, -9.0001, -8.9999, 16.619047, 16.62, 0.0, -0.0, 88.0, -88.0, -104.0]])
    x = x.astype(np.float32).reshape(1, -1)
    compare_with_litert(single_op(op, x.shape, "float32"), [x])


@pytest.mark.parametrize("qo", [(1 / 128, -128), (0.5 / 256, -128)])
def test_logistic_int8_rejects_other_output_quantization(qo):
    model = single_op("LOGISTIC", (4,), "int8", (0.1, 0), qo)
    x = np.arange(4, dtype=np.int8)
    with pytest.raises(RuntimeError):
        run_litert(model, [x])
    with pytest.raises(UnsupportedOpError, match="1/256"):
        run_edgerun(model, [x])


# --- SOFTMAX ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("qi", INPUT_QUANT)
@pytest.mark.parametrize("beta", [1.0, 0.25, 3.0])
@pytest.mark.parametrize("shape", [(256,), (4, 64), (8, 2, 16)])
def test_softmax_int8_all_codes(qi, beta, shape):
    compare_with_litert(single_op("SOFTMAX", shape, "int8", qi, (1 / 256, -128), beta=beta),
                        [all_codes(shape, seed=2)])


@pytest.mark.parametrize("qi", INPUT_QUANT)
@pytest.mark.parametrize("depth", [1, 2, 10, 400])
def test_softmax_int8_rows(qi, depth):
    rng = np.random.default_rng(depth)
    x = rng.integers(-128, 128, (6, depth)).astype(np.int8)
    x[0] = 5  # a row of ties
    x[1, : depth // 2 + 1] = 127  # many maxima
    x[2] = np.clip(rng.integers(-3, 3, depth) + 40, -128, 127)  # a narrow row
    compare_with_litert(single_op("SOFTMAX", x.shape, "int8", qi, (1 / 256, -128), beta=1.0), [x])


@pytest.mark.parametrize("beta,qi", [(40.0, (0.5, 0)), (0.05, (0.02, 3)), (1.0, (8.0, -20))])
def test_softmax_int8_extreme_beta_times_scale(beta, qi):
    x = all_codes((2, 128), seed=4)
    compare_with_litert(single_op("SOFTMAX", x.shape, "int8", qi, (1 / 256, -128), beta=beta), [x])


@pytest.mark.parametrize("qi", [(0.05, 0), (0.5, -40)])
def test_softmax_int8_to_int16(qi):
    x = all_codes((4, 64), seed=5)
    model = single_op("SOFTMAX", x.shape, "int8", qi, (1 / 32768, 0), out_dtype="int16", beta=1.0)
    compare_with_litert(model, [x])


def test_softmax_int8_rejects_other_output_quantization():
    model = single_op("SOFTMAX", (1, 8), "int8", (0.1, 0), (1 / 256, 0), beta=1.0)
    x = np.arange(8, dtype=np.int8).reshape(1, 8)
    with pytest.raises(RuntimeError):
        run_litert(model, [x])
    with pytest.raises(UnsupportedOpError, match="zero point -128"):
        run_edgerun(model, [x])


@pytest.mark.parametrize("beta", [1.0, 0.3, 2.0])
@pytest.mark.parametrize("shape", [(7,), (3, 50), (2, 3, 4, 9)])
def test_softmax_float(beta, shape):
    rng = np.random.default_rng(len(shape))
    x = rng.uniform(-20, 20, shape).astype(np.float32)
    compare_with_litert(single_op("SOFTMAX", shape, "float32", beta=beta), [x])


# --- LOG_SOFTMAX ------------------------------------------------------------------------------------

@pytest.mark.parametrize("qi", INPUT_QUANT)
@pytest.mark.parametrize("shape", [(256,), (4, 64), (2, 8, 16)])
def test_log_softmax_int8_all_codes(qi, shape):
    compare_with_litert(single_op("LOG_SOFTMAX", shape, "int8", qi, (16 / 256, 127)),
                        [all_codes(shape, seed=6)])


@pytest.mark.parametrize("qi", INPUT_QUANT + [(20.0, 0)])
@pytest.mark.parametrize("depth", [1, 3, 40, 3000])
def test_log_softmax_int8_rows(qi, depth):
    rng = np.random.default_rng(depth + 7)
    x = rng.integers(-128, 128, (5, depth)).astype(np.int8)
    x[0] = -9
    x[1, ::2] = 127
    compare_with_litert(single_op("LOG_SOFTMAX", x.shape, "int8", qi, (16 / 256, 127)), [x])


def test_log_softmax_int8_rejects_other_output_quantization():
    model = single_op("LOG_SOFTMAX", (1, 8), "int8", (0.1, 0), (16 / 256, 0))
    x = np.arange(8, dtype=np.int8).reshape(1, 8)
    with pytest.raises(RuntimeError):
        run_litert(model, [x])
    with pytest.raises(UnsupportedOpError, match="zero point 127"):
        run_edgerun(model, [x])


@pytest.mark.parametrize("shape", [(9,), (4, 33), (2, 2, 3, 17)])
def test_log_softmax_float(shape):
    rng = np.random.default_rng(11)
    x = rng.uniform(-15, 15, shape).astype(np.float32)
    compare_with_litert(single_op("LOG_SOFTMAX", shape, "float32"), [x])


# --- LEAKY_RELU -------------------------------------------------------------------------------------

def _leaky(qi, qo, alpha, dtype="int8", shape=(2, 128)):
    b = ModelBuilder()
    x = b.input("x", shape, dtype, qi)
    y = b.tensor("y", shape, dtype, qo)
    b.op("LEAKY_RELU", [x], [y], alpha=alpha)
    b.output(y)
    return b.to_bytes()


@pytest.mark.parametrize("qi", INPUT_QUANT)
@pytest.mark.parametrize("alpha", [0.01, 0.2, 1.0, -0.5, 2.5, 0.0])
@pytest.mark.parametrize("out_ratio,zp_out", [(1.0, 0), (0.37, -60), (3.1, 25)])
def test_leaky_relu_int8(qi, alpha, out_ratio, zp_out):
    qo = (qi[0] * out_ratio, zp_out)
    compare_with_litert(_leaky(qi, qo, alpha), [all_codes((2, 128), seed=8)])


@pytest.mark.parametrize("alpha", [0.2, -1.5, 3.0])
def test_leaky_relu_float(alpha):
    x = np.random.default_rng(12).uniform(-10, 10, (3, 41)).astype(np.float32)
    compare_with_litert(_leaky(None, None, alpha, "float32", x.shape), [x])


# --- PRELU ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha_shape", [(16,), (1, 1, 16), (8, 16), (2, 4, 8, 16), (1,), (4, 1, 1)])
@pytest.mark.parametrize("qi,qa,qo", [((0.05, 2), (0.02, -5), (0.04, -1)),
                                      ((0.5, -90), (0.004, 0), (0.3, 50)),
                                      ((0.01, 0), (0.1, 100), (0.02, -128))])
def test_prelu_int8(alpha_shape, qi, qa, qo):
    rng = np.random.default_rng(len(alpha_shape))
    alpha = rng.integers(-128, 128, alpha_shape).astype(np.int8)
    shape = (2, 4, 8, 16)
    x = all_codes(shape, seed=9, copies=4)
    compare_with_litert(single_op("PRELU", shape, "int8", qi, qo, alpha=alpha, alpha_quant=qa), [x])


def test_prelu_int8_runtime_alpha():
    rng = np.random.default_rng(13)
    x = all_codes((4, 64), seed=10)
    alpha = rng.integers(-128, 128, (64,)).astype(np.int8)
    model = single_op("PRELU", x.shape, "int8", (0.03, 4), (0.02, -9), alpha=alpha,
                      alpha_quant=(0.01, 3), alpha_const=False)
    compare_with_litert(model, [x, alpha])


@pytest.mark.parametrize("alpha_shape", [(7,), (1, 1, 7), (3, 5, 7)])
def test_prelu_float(alpha_shape):
    rng = np.random.default_rng(14)
    x = rng.uniform(-5, 5, (2, 3, 5, 7)).astype(np.float32)
    alpha = rng.uniform(-2, 2, alpha_shape).astype(np.float32)
    compare_with_litert(single_op("PRELU", x.shape, "float32", alpha=alpha), [x])


def test_prelu_rejects_alpha_that_does_not_broadcast():
    alpha = np.ones((3,), np.float32)
    with pytest.raises(UnsupportedOpError, match="broadcast"):
        run_edgerun(single_op("PRELU", (2, 4), "float32", alpha=alpha), [np.zeros((2, 4), np.float32)])


# --- HARD_SWISH -------------------------------------------------------------------------------------

@pytest.mark.parametrize("qi", INPUT_QUANT)
@pytest.mark.parametrize("out_ratio,zp_out", [(1.0, 0), (0.2, -128), (0.02, 60), (0.01, 0), (5.0, -3)])
def test_hard_swish_int8(qi, out_ratio, zp_out):
    qo = (qi[0] * out_ratio, zp_out)
    compare_with_litert(single_op("HARD_SWISH", (4, 64), "int8", qi, qo), [all_codes((4, 64), seed=11)])


def test_hard_swish_float():
    x = np.random.default_rng(15).uniform(-8, 8, (5, 60)).astype(np.float32)
    x[0, :6] = [-3.0, 3.0, 0.0, -3.0001, 3.0001, 6.0]
    compare_with_litert(single_op("HARD_SWISH", x.shape, "float32"), [x])


# --- random sweep over quantization parameters -------------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_int8_random_quantization_sweep(seed):
    """Log-uniform scales and random zero points, every code, for every int8 kernel here."""
    rng = np.random.default_rng(1000 + seed)
    s = float(10 ** rng.uniform(-3.5, 0.5))
    zp = int(rng.integers(-128, 128))
    s_out = s * float(10 ** rng.uniform(-1, 1))
    zp_out = int(rng.integers(-40, 40))
    x = all_codes((2, 256), seed=seed, copies=2)
    compare_with_litert(single_op("LOGISTIC", x.shape, "int8", (s, zp), (1 / 256, -128)), [x])
    compare_with_litert(single_op("TANH", x.shape, "int8", (s, zp), (1 / 128, 0)), [x])
    compare_with_litert(single_op("SOFTMAX", x.shape, "int8", (s, zp), (1 / 256, -128),
                                  beta=float(10 ** rng.uniform(-0.5, 0.5))), [x])
    compare_with_litert(single_op("LOG_SOFTMAX", x.shape, "int8", (s, zp), (16 / 256, 127)), [x])
    compare_with_litert(_leaky((s, zp), (s_out, zp_out), float(rng.uniform(-2, 2)), shape=x.shape), [x])
    compare_with_litert(single_op("HARD_SWISH", x.shape, "int8", (s, zp), (s_out, zp_out)), [x])
    alpha = rng.integers(-128, 128, (256,)).astype(np.int8)
    qa = (float(10 ** rng.uniform(-3, -1)), int(rng.integers(-128, 128)))
    compare_with_litert(single_op("PRELU", x.shape, "int8", (s, zp), (s_out, zp_out), alpha=alpha,
                                  alpha_quant=qa), [x])


def test_hard_swish_int8_rejects_output_scale_64x_finer():
    model = single_op("HARD_SWISH", (1, 8), "int8", (1.0, 0), (1.0 / 300, 0))
    x = np.arange(8, dtype=np.int8).reshape(1, 8)
    with pytest.raises(RuntimeError):
        run_litert(model, [x])
    with pytest.raises(UnsupportedOpError, match="too large"):
        run_edgerun(model, [x])


def test_softmax_int8_rows_beyond_litert_reference_limit():
    """Rows whose exp-sum reaches 512 abort LiteRT's reference kernel, so check against float math:
    edgerun keeps the fixed-point formula and stays within 1 LSB of round(256 * softmax) - 128."""
    rng = np.random.default_rng(21)
    x = np.full((3, 1500), 90, np.int8)
    x[1, ::2] = rng.integers(-128, 90, 750)
    x[2, :3] = 127
    s, beta = 0.05, 1.0
    got = run_edgerun(single_op("SOFTMAX", x.shape, "int8", (s, 0), (1 / 256, -128), beta=beta), [x])[0]
    z = (x.astype(np.float64) - x.max(axis=1, keepdims=True)) * s * beta
    want = np.clip(np.round(256 * np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)) - 128, -128, 127)
    assert np.abs(got.astype(np.int64) - want).max() <= 1


@pytest.mark.parametrize("alpha_shape", [(16,), (1, 1, 16), (8, 16), (4, 8, 16), (2, 4, 8, 16)])
def test_prelu_int8_chunked_lookup(alpha_shape, monkeypatch):
    """Large PRELU outputs look their rows up a chunk at a time (TAKE_CHUNK; here 50 values):
    per-channel, per-row and full-shape alphas, negative zero points, a saturating output
    scale; equal to LiteRT and to the unchunked lookup."""
    from edgerun.ops import common, nonlinear

    shape = (2, 4, 8, 16)
    rng = np.random.default_rng(22)
    alpha = rng.integers(-128, 128, alpha_shape).astype(np.int8)
    x = all_codes(shape, seed=11, copies=int(np.prod(shape)) // 256)
    model = single_op("PRELU", shape, "int8", (0.05, -20), (0.03, -60), alpha=alpha, alpha_quant=(0.02, -3))
    whole = run_edgerun(model, [x])[0]
    monkeypatch.setattr(common, "TAKE_CHUNK", 50)
    monkeypatch.setattr(nonlinear, "TAKE_CHUNK", 50)
    chunked = compare_with_litert(model, [x])[0]
    assert chunked.tobytes() == whole.tobytes()
    assert (chunked == 127).any() and (chunked == -128).any()


@pytest.mark.parametrize("zp_in", [-128, -70, 0, 40])
@pytest.mark.parametrize("bound", [True, False])
def test_prelu_int8_compact_rows_match_litert(zp_in, bound, monkeypatch):
    """Small PRELU inputs keep only each alpha row's values for x < zp_in, plus one shared table
    of the results for x >= zp_in (``Prelu._compact``); from the plan's bound call or from eval
    (compile disabled): equal to LiteRT for every code, per-channel alphas of both signs, input
    zero points from -128 (no negative part) to 40 (168 of 256 codes negative)."""
    from edgerun.ops import nonlinear

    used = []
    orig = nonlinear.Prelu._compact

    def spy(self, rows, size):
        orig(self, rows, size)
        used.append(self.compact is not None and self.lut is None)

    monkeypatch.setattr(nonlinear.Prelu, "_compact", spy)
    if not bound:
        monkeypatch.setattr(nonlinear.Prelu, "compile", lambda self, ins, outs: None)
    shape = (1, 4, 8, 32)
    rng = np.random.default_rng(200 + zp_in)
    alpha = rng.integers(-128, 128, (1, 1, 32)).astype(np.int8)
    x = all_codes(shape, seed=12, copies=4)
    model = single_op("PRELU", shape, "int8", (0.04, zp_in), (0.03, -7), alpha=alpha, alpha_quant=(0.01, -2))
    got = compare_with_litert(model, [x])[0]
    assert used and all(used)
    assert len(np.unique(got)) > 64
