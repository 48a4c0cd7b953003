"""edgerun.native: the compiled requantization loop, its build and its fallbacks.

Exhaustive over every accumulator a layer can produce (against the fixed-point reference, itself
tested against exact rational arithmetic), whole layers and plans against LiteRT with the native
loop asserted to have run, and the ways the build can fail: no compiler, a compiler that fails,
``EDGERUN_NATIVE=0``. Where a C compiler is on PATH the library must build: a broken build would
otherwise pass unnoticed on the numpy fallback.
"""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from edgerun import native
from edgerun.ops.fixedpoint import bounded_requantizer, multiply_by_quantized_multiplier, quantize_multipliers
from edgerun.testing import compare_with_litert
from tests.support.op_specs import RELU, RELU6, VALID, conv_spec, dw_spec

HAVE_CC = any(shutil.which(c) for c in (os.environ.get("CC", "cc"), "gcc", "clang"))
BR = type(bounded_requantizer([1 << 30], [0], 0, -128, 127))


@pytest.fixture
def lib():
    native.reset()
    got = native.library()
    if got is None:
        assert not HAVE_CC, f"a C compiler is on PATH but {native.status()}"
        pytest.skip(native.status())
    return got


def _reference(x, m, shift, zp, qmin, qmax):
    return np.clip(multiply_by_quantized_multiplier(x, m, shift) + zp, qmin, qmax).astype(np.int8)


# per-channel real multipliers: right shifts 1-20 (ties on every other value at 1), none, left
REALS = [[1.1e-3, 3.3e-3, 1e-3, 1.7e-3], [0.3, 0.45, 0.26, 0.49], [0.6, 0.99, 0.51, 0.75],
         [1.3, 3.7, 0.7, 2.0], [2e-6, 3.1e-6, 1.7e-6, 9e-7], [0.06, 0.09, 0.07, 0.1]]


@pytest.mark.parametrize("reals", REALS)
@pytest.mark.parametrize("zp,qmin,qmax", [(-128, -128, 127), (-3, -128, 127), (77, 77, 127), (127, -50, 60)])
def test_native_requant_every_accumulator(lib, reals, zp, qmin, qmax):
    """Every accumulator from well below the clamp to well above it, per channel with a bias:
    equal to the reference, from the native loop."""
    m, shift = quantize_multipliers(reals)
    bias = np.array([-1234, 0, 5678, -77], np.int64)
    span = min(int(300 / min(reals)) + 64, (1 << 23) - 6000)
    step = max(1, span // 200_000)  # every value up to 400K; beyond, a stride that crosses every level
    x = np.arange(-span, span, step, dtype=np.int64)[:, None] - bias
    r = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=float(np.abs(x).max()))
    assert r.native_args(bias, 4, x.shape[0]) is not None
    got = r(x.astype(np.float32), bias, out=np.empty(x.shape, np.int8))
    want = _reference(x + bias, m, shift, zp, qmin, qmax)
    assert np.array_equal(got, want)
    # the range was crossed (the 2e-6 multipliers reach +-25 levels within float32's exact sums)
    assert len(np.unique(want)) > (20 if max(reals) < 1e-5 else 100) or qmax - qmin < 120


def test_native_requant_random_layers(lib):
    """Random layers (channel counts that do and do not tile, per-tensor multipliers, no bias,
    left shifts whose products wrap in int32 as TFLite's do): equal to the numpy passes and the
    reference; unbounded or float64 accumulators stay on numpy."""
    rng = np.random.default_rng(5)
    for i in range(80):
        c = int(rng.choice([1, 3, 7, 16, 24, 60, 128, 300]))
        rows = int(rng.integers(1, 400))
        bound = float(int(rng.integers(1, 900)) * 128 * 127)
        reals = rng.uniform(1, 3, c) * float(rng.choice([1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 4.0]))
        if i % 5 == 0:
            reals = reals[:1]
        m, shift = quantize_multipliers(reals)
        zp = int(rng.integers(-128, 128))
        qmin, qmax = (-128, 127) if rng.random() < 0.5 else (zp, 127)
        bias = None if i % 7 == 0 else rng.integers(-int(bound), int(bound) + 1, c).astype(np.int64)
        x = rng.integers(-int(bound), int(bound) + 1, (rows, c))
        want = _reference(x + (0 if bias is None else bias), m, shift, zp, qmin, qmax)
        r = bounded_requantizer(m, shift, zp, qmin, qmax, acc_bound=bound)
        hit = r.native_args(bias, c, rows)
        got = r(x.astype(np.float32), bias)
        assert np.array_equal(got, want), (i, c, rows)
        if float(np.abs(bias).max(initial=0) if bias is not None else 0) + bound < (1 << 24) and max(reals) < 1:
            assert hit is not None, i
    r = bounded_requantizer(*quantize_multipliers([1e-3]), 0, -128, 127)  # no bound: not exact in float32
    assert r.native_args(None, 1, 100) is None
    r = bounded_requantizer(*quantize_multipliers([1e-3]), 0, -128, 127, acc_bound=float(1 << 25))
    assert r.native_args(None, 1, 100) is None


def test_native_requant_wraps_saturated_biases(lib):
    """Biases near the int32 limits (dead channels of real models carry 2^30): ``acc + bias``
    wraps in int32 as in the reference kernels, and the numpy passes agree."""
    from edgerun.ops.fixedpoint import wrap32

    rng = np.random.default_rng(11)
    c, bound = 12, 40000.0
    m, shift = quantize_multipliers(rng.uniform(1e-9, 1e-3, c))
    bias = np.array([(1 << 31) - 1, -(1 << 31), 1 << 30, -(1 << 30)] * 3, np.int64)
    x = rng.integers(-int(bound), int(bound) + 1, (500, c))
    x[:3] = [[bound], [-bound], [0]]
    want = _reference(wrap32(x + bias), m, shift, 5, -128, 127)
    r = bounded_requantizer(m, shift, 5, -128, 127, acc_bound=bound)
    assert r.native_args(bias, c, 500) is not None
    assert np.array_equal(r(x.astype(np.float32), bias), want)
    r.NATIVE = False
    assert np.array_equal(r(x.astype(np.float32), bias), want)


def _spy_native(monkeypatch):
    calls = []
    orig = BR.native_args

    def spy(self, bias, c, rows, **kw):
        res = orig(self, bias, c, rows, **kw)
        calls.append(res is not None)
        return res
    monkeypatch.setattr(BR, "native_args", spy)
    return calls


@pytest.mark.parametrize("act", [0, RELU, RELU6])
@pytest.mark.parametrize("spec_args", [
    ((1, 40, 36, 24), 48, 1, 1, (1, 1)),   # pointwise
    ((1, 66, 62, 8), 24, 3, 3, (2, 2)),    # strided 3x3 with padding
])
def test_native_conv_matches_litert(lib, monkeypatch, act, spec_args):
    """Whole CONV_2D layers, eval and bound, are bit-exact with LiteRT with the native loop."""
    calls = _spy_native(monkeypatch)
    shape, oc, kh, kw, stride = spec_args
    conv_spec(shape, oc, kh, kw, stride=stride, seed=oc + act).run_int8(act=act, seed=act)
    assert calls and any(calls)


@pytest.mark.parametrize("act", [0, RELU6])
@pytest.mark.parametrize("shape,kernel,stride", [((1, 40, 44, 32), 3, (1, 1)), ((1, 61, 59, 24), 5, (2, 2))])
def test_native_depthwise_matches_litert(lib, monkeypatch, act, shape, kernel, stride):
    calls = _spy_native(monkeypatch)
    dw_spec(shape, 1, kernel, kernel, stride=stride, seed=kernel).run_int8(act=act, seed=act)
    assert calls and any(calls)


@pytest.mark.parametrize("bound", [True, False])
@pytest.mark.parametrize("shape,dm,k,stride,padding,dilation", [
    ((2, 9, 11, 5), 1, 3, (1, 1), VALID, (1, 1)),     # batch 2, few channels, no padding
    ((1, 12, 10, 6), 3, 3, (2, 1), None, (1, 1)),      # depth multiplier 3, mixed strides
    ((1, 14, 13, 16), 1, 3, (1, 1), None, (2, 2)),    # dilation
    ((1, 7, 7, 8), 2, 5, (2, 2), None, (1, 1)),       # 5x5 over a 7x7 input: most taps in the padding
    ((1, 1, 1, 40), 1, 3, (1, 1), None, (1, 1)),      # one pixel: only the centre tap
])
def test_native_depthwise_geometry(lib, monkeypatch, bound, shape, dm, k, stride, padding, dilation):
    """The native depthwise loop over batches, depth multipliers, strides, dilation and padding,
    as the invoke plan's bound call and as eval: equal to LiteRT's reference kernels."""
    from edgerun.ops.conv import DepthwiseConv2D

    runs = []
    orig = DepthwiseConv2D.native_call
    monkeypatch.setattr(DepthwiseConv2D, "native_call", lambda self: runs.append(orig(self)) or runs[-1])
    if not bound:
        monkeypatch.setattr(DepthwiseConv2D, "compile", lambda self, ins, outs: None)
    kw = {} if padding is None else {"padding": padding}
    dw_spec(shape, dm, k, k, stride=stride, dilation=dilation, seed=k + dm, **kw).run_int8(act=RELU6, seed=dm)
    assert runs and all(r is not None for r in runs)


@pytest.mark.parametrize("dtype,op,q1,q2,qo,act", [
    ("int8", "ADD", (0.0517, 2), (0.0931, 0), (0.1043, -3), 0),
    ("int8", "SUB", (0.004, -1), (0.2, 50), (0.03, -100), RELU6),
    ("int8", "ADD", (0.1, 3), (0.1, 3), (0.05, -120), RELU),       # equal scales: exact ties
    ("int8", "ADD", (0.5, 0), (0.001, 7), (0.0005, 0), 0),          # scales 1000x apart
    ("uint8", "ADD", (0.05, 120), (0.04, 110), (0.07, 100), 0),
    ("uint8", "SUB", (0.2, 128), (0.15, 128), (0.05, 128), RELU6),
])
@pytest.mark.parametrize("bound", [True, False])
def test_native_add_sub_every_pair(lib, monkeypatch, dtype, op, q1, q2, qo, act, bound):
    """ADD / SUB of two run-time tensors in the native loop: all 65,536 input pairs equal LiteRT's
    reference kernels, bound and eval."""
    from edgerun.ops.elementwise import Int8AddSub
    from tests.support.binary_models import every_pair_against_litert

    if not bound:
        monkeypatch.setattr(Int8AddSub, "compile", lambda self, ins, outs: None)
    kernel = every_pair_against_litert(op, dtype, q1, q2, qo, act, "same-shape")
    assert kernel.native is not None and kernel.table is None and kernel.line is None


def test_native_add_checks_its_operands(lib):
    """A broadcast ADD keeps the numpy forms; inputs of another shape than the model's are one
    clear error, not a read past the end."""
    from edgerun.errors import InputMismatchError
    from tests.support.binary_models import binary_model as _binary_model
    from tests.support.binary_models import first_kernel as _first_kernel

    assert _first_kernel(_binary_model("ADD", "int8", (1, 4, 8), (1, 1, 8), (0.05, 0), (0.04, 1),
                                       (0.06, 2), 0)).native is None
    model = _binary_model("ADD", "int8", (1, 4, 8), (1, 4, 8), (0.05, 0), (0.04, 1), (0.06, 2), 0)
    kernel = _first_kernel(model)
    assert kernel.native is not None
    with pytest.raises(InputMismatchError):
        kernel.eval([np.zeros((1, 4, 8), np.int8), np.zeros((1, 2, 8), np.int8)])
    with pytest.raises(InputMismatchError):
        kernel.eval([np.zeros((1, 4, 8), np.int8), np.zeros((1, 4, 8), np.uint8)])


@pytest.mark.parametrize("alpha_shape", [(16,), (1, 1, 16), (1,)])
@pytest.mark.parametrize("qi,qa,qo", [((0.05, 2), (0.02, -5), (0.04, -1)),
                                      ((0.5, -90), (0.004, 0), (0.3, 50)),
                                      ((0.01, 0), (0.1, 100), (0.02, -128)),
                                      ((0.2, 127), (0.5, -128), (0.002, 0))])   # saturating, left shifts
@pytest.mark.parametrize("bound", [True, False])
def test_native_prelu_every_value(lib, monkeypatch, alpha_shape, qi, qa, qo, bound):
    """int8 PRELU with a constant alpha per channel in the native loop: every input value in
    every channel equals LiteRT's reference kernels, bound and eval."""
    from edgerun.ops.nonlinear import Prelu
    from tests.support.op_specs import single_op

    runs = []
    orig = Prelu._prepare_native
    monkeypatch.setattr(Prelu, "_prepare_native", lambda self, a, shape: runs.append(orig(self, a, shape)) or runs[-1])
    if not bound:
        monkeypatch.setattr(Prelu, "compile", lambda self, ins, outs: None)
    rng = np.random.default_rng(len(alpha_shape))
    alpha = rng.integers(-128, 128, alpha_shape).astype(np.int8)
    x = np.repeat(np.arange(-128, 128, dtype=np.int8), 16 * 3).reshape(2, 8, 48, 16)
    compare_with_litert(single_op("PRELU", x.shape, "int8", qi, qo, alpha=alpha, alpha_quant=qa), [x])
    assert runs and all(r is not None for r in runs)


def _status_in_child(env_extra: dict, tmp_path) -> str:
    env = dict(os.environ, EDGERUN_NATIVE_DIR=str(tmp_path / "native"))
    env.update(env_extra)
    code = "from edgerun import native; print(native.status())"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_native_build_cache_and_fallbacks(tmp_path):
    """Built once into the cache and then loaded from it; EDGERUN_NATIVE=0, a missing compiler
    and a failing one each leave edgerun on numpy with a one-line reason, and the kernels run."""
    if HAVE_CC:
        first = _status_in_child({}, tmp_path)
        assert first.startswith("native kernels: on (built "), first
        assert _status_in_child({}, tmp_path).startswith("native kernels: on (cached "), first
    off = _status_in_child({"EDGERUN_NATIVE": "0"}, tmp_path)
    assert off == "native kernels: off (disabled by EDGERUN_NATIVE)"
    none = _status_in_child({"CC": "no-such-cc", "PATH": str(tmp_path / "empty")}, tmp_path / "b")
    assert none == "native kernels: off (no C compiler (cc, gcc, clang) on PATH)"
    bad = tmp_path / "badcc"
    bad.write_text("#!/bin/sh\necho 'cc: error: something broke' >&2\nexit 1\n")
    bad.chmod(0o755)
    failed = _status_in_child({"CC": str(bad)}, tmp_path / "c")
    assert failed.startswith("native kernels: off (") and "something broke" in failed


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler on PATH")
def test_native_damaged_cache_and_unwritable_folder(tmp_path):
    """A cached library that does not load (a damaged file) is built again; a cache folder that
    cannot be created falls back to a per-user folder in the temporary directory."""
    first = _status_in_child({}, tmp_path)
    built = next((tmp_path / "native").glob("kernels-*.so"))
    built.write_bytes(b"\x7fELF not really")
    again = _status_in_child({}, tmp_path)
    assert again.startswith("native kernels: on (built "), (first, again)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {"EDGERUN_NATIVE_DIR": str(blocker / "native")}
    moved = _status_in_child(env, tmp_path)
    assert moved.startswith("native kernels: on (") and "edgerun-native-" in moved, moved


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler on PATH")
def test_native_compiler_without_march_native_builds_once(tmp_path):
    """A compiler that rejects -march=native: the library is built with the next flag set, and a
    later process loads it from the cache without running the compiler again."""
    real = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    log = tmp_path / "calls"
    cc = tmp_path / "picky-cc"
    cc.write_text(f'#!/bin/sh\necho "$*" >> {log}\ncase "$*" in *-march=native*) '
                  f'echo "unknown flag" >&2; exit 1;; esac\nexec {real} "$@"\n')
    cc.chmod(0o755)
    first = _status_in_child({"CC": str(cc)}, tmp_path)
    assert first.startswith("native kernels: on (built ") and "-march=native" not in first, first
    calls = log.read_text().count("\n")
    assert calls == 2  # the rejected flag set, then the build
    again = _status_in_child({"CC": str(cc)}, tmp_path)
    assert again.startswith("native kernels: on (cached "), again
    assert log.read_text().count("\n") == calls


def test_numpy_fallback_matches_native_on_a_layer(lib, monkeypatch):
    """The same layer with the library forgotten and disabled: identical bytes."""
    shape, oc = (1, 30, 30, 16), 40
    spec = conv_spec(shape, oc, 1, 1, seed=9)
    spec.run_int8(act=0, seed=1)
    monkeypatch.setenv("EDGERUN_NATIVE", "0")
    native.reset()
    assert native.library() is None
    calls = _spy_native(monkeypatch)
    spec.run_int8(act=0, seed=1)
    assert not any(calls)
    native.reset()


def test_bench_names_whether_the_native_loops_ran(lib):
    """``edgerun bench`` figures name the kernel path: with or without edgerun.native's loops
    (their speed differs by 1.5-2x)."""
    from edgerun.bench.scenarios import Runner
    from edgerun.testing import mobilenet_v1

    r = Runner("edgerun", mobilenet_v1(0.25, 32), num_threads=1, delegates=None, batch=1, seed=0)
    assert "native kernels: on (" in r.kernel_path
