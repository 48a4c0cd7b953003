"""The firmware's SQRT, RSQRT, DIV, SUM, LOG_SOFTMAX, CAST and SHAPE beyond the per-op models of
test_firmware_kernels.py: SUM against LiteRT's reference uint8 twin (LiteRT 2.3's reference int8
SUM reads int8 as uint8, docs/convert.md), inputs where LiteRT fails the invoke (zero divisor,
square roots below the zero point), CAST's wrap-around, and `check --target mcu:BOARD`'s
prediction against COMMIT for each new op (accepted with the arena to the byte, and refused)."""

import numpy as np
import pytest
from edgerun_delegates.mcu.firmware import firmware_accepts, firmware_arena_bytes

from edgerun.deploy.flash import flash, model_info, run_with_link
from edgerun.deploy.serial_link import DeviceError
from edgerun.ir import ModelBuilder
from edgerun.litert import make_interpreter
from edgerun.testing import random_inputs, run_edgerun, run_litert
from tests.support.firmware_harness import converted_digits, flash_as_predicted, raw_flash, sanitized_device
from tests.support.firmware_models import op_models, sum_models

device = pytest.fixture(scope="module", name="device")(sanitized_device)

NEW_OPS = ("sqrt", "rsqrt", "div", "log_softmax", "cast", "shape", "softmax16", "softmax_int8_to_int16",
           "quantize_uint8", "dequantize_uint8", "quantize_float32_int16")
INT16_OPS = ("conv16", "dw16", "fc16", "max_pool_2d16", "average_pool_2d16", "add16", "sub16", "mul16")
OP_MODELS = {k: v for k, v in op_models(5).items() if k.startswith(NEW_OPS + INT16_OPS)}
SUM_INT8, SUM_UINT8 = sum_models("int8"), sum_models("uint8")
INVOKE_FAILED = 15  # ER_ERR_INVOKE_FAILED


def _shape(model):
    return tuple(int(s) for s in make_interpreter(model, reference=True).get_input_details()[0]["shape"])


@pytest.mark.parametrize("name", sorted(SUM_INT8))
def test_sum_bit_exact_with_litert_uint8_twin(device, name):
    model = SUM_INT8[name]
    flash(model, device.port, link=device)
    info = model_info(device)
    shape = _shape(model)
    rng = np.random.default_rng(3)
    inputs = [rng.integers(-128, 128, size=shape).astype(np.int8) for _ in range(4)]
    inputs += [np.full(shape, v, np.int8) for v in (-128, 127, 3)]
    for x in inputs:
        got, _ = run_with_link(device, [x], info)
        want = run_litert(SUM_UINT8[name], [(x.astype(np.int16) + 128).astype(np.uint8)], reference=True)[0]
        assert got[0].tobytes() == (want.astype(np.int16) - 128).astype(np.int8).tobytes(), name
        assert got[0].tobytes() == run_edgerun(model, [x])[0].tobytes()


def _div_runtime(zb=-10):
    b = ModelBuilder()
    x = b.input("a", (1, 8), "int8", (0.05, 2))
    d = b.input("b", (1, 8), "int8", (0.03, zb))
    z = b.tensor("z", (1, 8), "int8", (0.2, 5))
    b.op("DIV", [x, d], [z])
    b.output(z)
    return b.to_bytes()


def _unary(op, q, oq, itype="int8", otype="int8", shape=(1, 8)):
    b = ModelBuilder()
    x = b.input("x", shape, itype, q)
    y = b.tensor("y", shape, otype, oq)
    b.op(op, [x], [y])
    b.output(y)
    return b.to_bytes()


@pytest.mark.parametrize("case", ["div_zero_divisor", "sqrt_below_zero_point", "rsqrt_below_zero_point"])
def test_invoke_fails_where_litert_fails_and_the_model_keeps_running(device, case):
    if case == "div_zero_divisor":
        model = _div_runtime()
        good = [np.arange(8, dtype=np.int8).reshape(1, 8), np.full((1, 8), 20, np.int8)]
        bad = [np.arange(8, dtype=np.int8).reshape(1, 8), np.array([[20, 20, -10, 20, 20, 20, 20, 20]], np.int8)]
    else:
        model = _unary("SQRT" if case.startswith("sqrt") else "RSQRT", (0.05, -20), (0.05, -128))
        good = [np.array([[-20, -19, 0, 40, 127, 100, -5, 7]], np.int8)]  # the zero point itself is valid
        bad = [np.array([[40, 40, 40, -21, 40, 40, 40, 40]], np.int8)]
    flash(model, device.port, link=device)
    info = model_info(device)
    with pytest.raises(RuntimeError, match="failed to invoke"):
        run_litert(model, bad, reference=True)
    with pytest.raises(DeviceError) as e:
        run_with_link(device, bad, info)
    assert e.value.code == INVOKE_FAILED
    got, _ = run_with_link(device, good, info)
    assert got[0].tobytes() == run_litert(model, good, reference=True)[0].tobytes()


def test_cast_wraps_and_rounds_like_litert(device):
    """int32 -> int8 wraps (static_cast), int32 -> float32 rounds to nearest even, int8 -> uint8 wraps;
    float32 -> integers saturate (NaN -> max) and truncate."""
    x32 = np.array([[300, -129, 2**31 - 1, -2**31, 16777217, -16777219, 255, 128]], np.int32)
    x8 = np.array([[-128, -1, 0, 1, 127, -2, 64, -64]], np.int8)
    x16 = np.array([[-32768, 32767, 300, -129, 255, 128, -1, 0]], np.int16)
    xf = np.array([[np.nan, np.inf, -np.inf, -2.9, 2.9, 255.5, -128.5, 3e9]], np.float32)
    xf2 = np.array([[2147483520.0, 2147483648.0, -2147483648.0, -2.2e9, 32767.9, -32768.9, 1e20, -0.5]], np.float32)
    for itype, otype, x in (("int32", "int8", x32), ("int32", "float32", x32), ("int32", "int64", x32),
                            ("int8", "uint8", x8), ("int8", "float32", x8), ("int8", "int16", x8),
                            ("int16", "int8", x16), ("int16", "int32", x16), ("int16", "float32", x16),
                            *[("float32", o, x) for o in ("int8", "uint8", "int16", "int32", "int64")
                              for x in (xf, xf2)]):
        model = _unary("CAST", None, None, itype, otype)
        flash(model, device.port, link=device)
        got, _ = run_with_link(device, [x])
        want = run_litert(model, [x], reference=True)[0]
        assert got[0].dtype == want.dtype and got[0].tobytes() == want.tobytes(), (itype, otype)


def test_int16_softmax_over_the_whole_int16_range(device):
    """int16 SOFTMAX on inputs across [-32768, 32767] (random_inputs stays within int8's range)."""
    model = op_models(5)["softmax16_int16_input"]
    flash(model, device.port, link=device)
    info = model_info(device)
    rng = np.random.default_rng(11)
    for k in range(6):
        x = rng.integers(-32768, 32768, size=(2, 37)).astype(np.int16)
        if k == 5:
            x[:] = 32767  # all tied at the maximum
        got, _ = run_with_link(device, [x], info)
        want = run_litert(model, [x], reference=True)[0]
        assert got[0].tobytes() == want.tobytes() == run_edgerun(model, [x])[0].tobytes(), k


def test_converted_float_output_classifier_with_int16_softmax(device, tmp_path):
    """models/digits_cnn.onnx through `edgerun convert --io-type float32` (no target): its head is
    QUANTIZE int8->int16, SOFTMAX int16, DEQUANTIZE; predicted, flashed and byte-identical."""
    from edgerun.schema.reader import read_model

    model = converted_digits(tmp_path, "digits16.tflite", io_type="float32", calib_method="minmax",
                             use_cache=False)
    m = read_model(model)
    assert "int16" in {t.dtype for t in m.subgraphs[0].tensors}
    info, details = flash_as_predicted(device, model)
    for seed in range(3):
        x = random_inputs(details, seed=seed)
        got, _ = run_with_link(device, x, info)
        assert got[0].tobytes() == run_litert(model, x, reference=True)[0].tobytes()


@pytest.mark.parametrize("name", sorted(k for k in OP_MODELS if k.startswith(INT16_OPS)))
def test_16x8_over_the_whole_int16_range(device, name):
    """16x8 kernels on int16 inputs across [-32768, 32767] (saturating outputs included)."""
    model = OP_MODELS[name]
    flash(model, device.port, link=device)
    info = model_info(device)
    details = make_interpreter(model, reference=True).get_input_details()
    rng = np.random.default_rng(12)
    for k in range(4):
        x = [rng.integers(-32768, 32768, size=tuple(d["shape"])).astype(np.int16) for d in details]
        if k == 3:
            x = [np.full(tuple(d["shape"]), v, np.int16) for d, v in zip(details, (32767, -32768))]
        got, _ = run_with_link(device, x, info)
        want = run_litert(model, x, reference=True)
        host = run_edgerun(model, x)
        assert all(g.tobytes() == w.tobytes() == h.tobytes() for g, w, h in zip(got, want, host)), (name, k)


def _conv16_int32_bias():
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2), "int16", (0.001, 0))
    w = b.const("w", np.ones((3, 1, 1, 2), np.int8), "int8", (0.01, 0))
    bias = b.const("b", np.zeros(3, np.int32), "int32", (0.00001, 0))
    y = b.tensor("y", (1, 4, 4, 3), "int16", (0.002, 0))
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=1, stride_h=1)
    b.output(y)
    return b.to_bytes()


def _add16_pot():
    b = ModelBuilder()
    x = b.input("a", (1, 8), "int16", (0.001, 0))
    v = b.input("b", (1, 8), "int16", (0.001, 0))
    z = b.tensor("z", (1, 8), "int16", (0.002, 0))
    b.op("ADD", [x, v], [z])  # pot_scale_int16 defaults to true
    b.output(z)
    return b.to_bytes()


def test_converted_16x8_model(device, tmp_path):
    """models/digits_cnn.onnx through `edgerun convert` in 16x8 mode (activations int16: CONV_2D,
    MAX_POOL_2D, FULLY_CONNECTED, SOFTMAX in int16): predicted, flashed and byte-identical."""
    from edgerun.schema.reader import read_model

    model = converted_digits(tmp_path, "digits16x8.tflite", activations="int16", calib_method="minmax",
                             use_cache=False)
    m = read_model(model)
    g = m.subgraphs[0]
    assert {m.op_code(op).builtin for op in g.operators if g.tensors[op.inputs[0]].dtype == "int16"} >= \
        {"CONV_2D", "FULLY_CONNECTED"}
    info, details = flash_as_predicted(device, model)
    rng = np.random.default_rng(2)
    for seed in range(3):
        x = random_inputs(details, seed=seed)
        if np.dtype(details[0]["dtype"]) == np.int16:
            x = [rng.integers(-32768, 32768, size=tuple(details[0]["shape"])).astype(np.int16)]
        got, _ = run_with_link(device, x, info)
        want = run_litert(model, x, reference=True)
        assert all(g_.tobytes() == w.tobytes() for g_, w in zip(got, want)), seed


def test_quantize_float32_to_int16_edges(device):
    """NaN, infinities, values beyond int32 and exact halves, as LiteRT's x86 build quantizes them."""
    xf = np.array([[np.nan, np.inf, -np.inf, 1e30, -1e30, 0.5e-4, -0.5e-4, 1.5e-4, 6.0, -7.0, 3.2767, 0.0]], np.float32)
    for zp in (0, 5, -7):
        model = _unary("QUANTIZE", None, (0.0001, zp), "float32", "int16", shape=(1, 12))
        flash(model, device.port, link=device)
        got, _ = run_with_link(device, [xf])
        want = run_litert(model, [xf], reference=True)[0]
        assert got[0].tobytes() == want.tobytes() == run_edgerun(model, [xf])[0].tobytes(), zp


def _sum(n_out):
    b = ModelBuilder()
    x = b.input("x", (1, 2, n_out), "int8", (0.1, 0))
    y = b.tensor("y", (1, n_out), "int8", (0.2, 0))
    b.op("SUM", [x, b.const("axes", np.array([1], np.int32))], [y], keep_dims=False)
    b.output(y)
    return b.to_bytes()


ACCEPTED = dict(OP_MODELS, **{"sum_" + k: v for k, v in SUM_INT8.items()}, sum_4096=_sum(4096))
REFUSED = {
    "sum_4097": _sum(4097),
    "cast_from_int64": _unary("CAST", None, None, "int64", "int32"),
    "cast_int16_to_uint8": _unary("CAST", None, None, "int16", "uint8"),
    "sqrt_float32": _unary("SQRT", None, None, "float32", "float32"),
    "quantize_float32_uint8": _unary("QUANTIZE", None, (0.01, 0), "float32", "uint8"),
    "conv16_int32_bias": _conv16_int32_bias(),
    "add16_pot_scale": _add16_pot(),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_check_predicts_commit_accepts_with_the_arena(device, name):
    model = ACCEPTED[name]
    assert firmware_accepts(model, "mps2-an386") == []
    assert raw_flash(device, model)[1] == firmware_arena_bytes(model)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_check_predicts_commit_refuses(device, name):
    model = REFUSED[name]
    assert firmware_accepts(model, "mps2-an386") != []
    with pytest.raises(DeviceError):
        raw_flash(device, model)


def test_new_op_models_bit_exact_over_more_seeds(device):
    """A third set of scales (seed 5) and eight inputs each, against LiteRT and edgerun's interpreter."""
    for name, model in OP_MODELS.items():
        flash(model, device.port, link=device)
        info = model_info(device)
        details = make_interpreter(model, reference=True).get_input_details()
        for seed in range(8):
            x = random_inputs(details, seed=seed)
            got, _ = run_with_link(device, x, info)
            want = run_litert(model, x, reference=True)
            host = run_edgerun(model, x)
            for g, w, h in zip(got, want, host):
                assert g.tobytes() == w.tobytes() == h.tobytes(), f"{name} seed {seed}"


# ---- the same kernels on the emulated Cortex-M4 / Cortex-M7 (newlib's libm, the boards' FPUs) ----

def run_new_ops_on_board(url: str, seeds: int = 2) -> int:
    """Every new-op model (SUM against its uint8 twin) and the invoke failures on the board at
    ``url``; returns how many models ran. Shared with a private-build check (see firmware/README)."""
    from edgerun.deploy.serial_link import SerialLink

    count = 0
    rng16 = np.random.default_rng(13)
    with SerialLink(url) as link:
        link.hello()
        for name, model in OP_MODELS.items():
            flash(model, url, link=link)
            details = make_interpreter(model, reference=True).get_input_details()
            wide = [rng16.integers(-32768, 32768, size=tuple(d["shape"])).astype(np.int16) for d in details] \
                if all(np.dtype(d["dtype"]) == np.int16 for d in details) else None  # the whole int16 range
            for seed in range(seeds + (wide is not None)):
                x = random_inputs(details, seed=seed) if seed < seeds else wide
                got, _ = run_with_link(link, x)
                want = run_litert(model, x, reference=True)
                assert len(got) == len(want) and all(g.tobytes() == w.tobytes() for g, w in zip(got, want)), name
            count += 1
        for name, model in SUM_INT8.items():
            flash(model, url, link=link)
            x = np.random.default_rng(7).integers(-128, 128, size=_shape(model)).astype(np.int8)
            got, _ = run_with_link(link, [x])
            want = run_litert(SUM_UINT8[name], [(x.astype(np.int16) + 128).astype(np.uint8)], reference=True)[0]
            assert got[0].tobytes() == (want.astype(np.int16) - 128).astype(np.int8).tobytes(), name
            count += 1
        xf = np.array([[np.nan, np.inf, -np.inf, -2.9, 2.9, 255.5, -128.5, 3e9]], np.float32)
        for otype in ("int8", "uint8", "int32", "int64"):  # newlib's float -> integer conversions
            model = _unary("CAST", None, None, "float32", otype)
            flash(model, url, link=link)
            got, _ = run_with_link(link, [xf])
            assert got[0].tobytes() == run_litert(model, [xf], reference=True)[0].tobytes(), otype
        flash(_div_runtime(), url, link=link)
        with pytest.raises(DeviceError) as e:
            run_with_link(link, [np.zeros((1, 8), np.int8), np.full((1, 8), -10, np.int8)])
        assert e.value.code == INVOKE_FAILED
    return count


@pytest.mark.parametrize("target,machine", [("mps2", "mps2-an386"), ("mps2-an500", "mps2-an500")])
def test_new_ops_bit_exact_under_qemu(target, machine):
    from tests.support.firmware_harness import have_arm_toolchain, qemu_board

    if have_arm_toolchain():
        pytest.skip(have_arm_toolchain())
    q, url = qemu_board(machine)
    try:
        assert run_new_ops_on_board(url) == len(OP_MODELS) + len(SUM_INT8)
    finally:
        q.kill()
        q.wait()
