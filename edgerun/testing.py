"""Differential-testing helpers: run a model in edgerun and in LiteRT and compare.

Used by edgerun's own tests and usable by delegate authors. int8 outputs must be bit-exact with
LiteRT's reference kernels (BUILTIN_REF); float32 outputs agree within ``rtol`` (default 1e-5).
"""

from __future__ import annotations

import numpy as np


def random_inputs(details: list[dict], seed: int = 0, float_range=(-3.0, 3.0)) -> list[np.ndarray]:
    """Random arrays matching input details (dtype and shape)."""
    rng = np.random.default_rng(seed)
    out = []
    for d in details:
        dt = np.dtype(d["dtype"])
        shape = tuple(int(s) for s in d["shape"])
        if dt.kind == "f":
            out.append(rng.uniform(*float_range, size=shape).astype(dt))
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            lo, hi = max(info.min, -128), min(info.max, 127)
            out.append(rng.integers(lo, hi + 1, size=shape).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(bool))
        else:
            from edgerun.errors import InputMismatchError

            what = "string or int4" if dt == object else str(dt)
            raise InputMismatchError(f"input {d.get('name', '?')!r} takes {what} data, which edgerun cannot make "
                                     "random values for; give an input file")
    return out


def _invoke_once(it, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Resize inputs where needed, allocate, set, invoke, read outputs: LiteRT's API, either runtime."""
    for d, x in zip(it.get_input_details(), inputs):
        if tuple(d["shape"]) != tuple(x.shape):
            it.resize_tensor_input(d["index"], x.shape)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def run_litert(model: bytes, inputs: list[np.ndarray], *, reference: bool = True,
               xnnpack: bool = False) -> list[np.ndarray]:
    from edgerun.litert import make_interpreter

    return _invoke_once(make_interpreter(model, reference=reference, xnnpack=xnnpack), inputs)


def run_edgerun(model: bytes, inputs: list[np.ndarray], **kw) -> list[np.ndarray]:
    from edgerun.runtime.interpreter import Interpreter

    return _invoke_once(Interpreter(model_content=model, **kw), inputs)


def assert_close(got: list[np.ndarray], want: list[np.ndarray], *, rtol: float = 1e-5,
                 atol: float = 1e-6, max_lsb: int = 0) -> None:
    """int outputs: |diff| <= max_lsb (0 = bit-exact); float outputs: allclose(rtol, atol)."""
    assert len(got) == len(want), f"{len(got)} outputs vs {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {i}: shape {g.shape} vs {w.shape}"
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype} vs {w.dtype}"
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i}")
        else:
            diff = np.abs(g.astype(np.int64) - w.astype(np.int64))
            worst = int(diff.max()) if diff.size else 0
            assert worst <= max_lsb, (f"output {i}: max difference {worst} LSB "
                                      f"(allowed {max_lsb}) at {np.unravel_index(diff.argmax(), diff.shape)}")


def compare_with_litert(model: bytes, inputs: list[np.ndarray] | None = None, *, seed: int = 0,
                        rtol: float = 1e-5, atol: float = 1e-6, max_lsb: int = 0) -> list[np.ndarray]:
    """Run ``model`` in edgerun and in LiteRT's reference kernels; assert they agree."""
    if inputs is None:
        from edgerun.runtime.interpreter import Interpreter
        inputs = random_inputs(Interpreter(model_content=model).get_input_details(), seed)
    want = run_litert(model, inputs)
    got = run_edgerun(model, inputs)
    assert_close(got, want, rtol=rtol, atol=atol, max_lsb=max_lsb)
    return got


def mobilenet_v1(alpha: float = 0.25, size: int = 96, classes: int = 100, dtype: str = "int8",
                 seed: int = 0) -> bytes:
    """A MobileNet-v1-shaped model with random weights, built in code (benchmarks, planner tests).

    int8: per-channel symmetric weights, int32 biases, activation scales picked from the expected
    accumulator magnitude so outputs use the int8 range without saturating everywhere.
    """
    from edgerun.ir import ModelBuilder, QuantParams

    rng = np.random.default_rng(seed)
    b = ModelBuilder(f"mobilenet_v1_{alpha}_{size}")
    q8 = dtype == "int8"
    act_scale, act_zp = 6.0 / 255, -128  # RELU6 output range [0, 6]

    def qp(scale, zp):
        return (scale, zp) if q8 else None

    x = b.input("input", (1, size, size, 3), dtype, qp(1 / 128, 0))
    in_scale = 1 / 128
    cur, c, hw = x, 3, size

    def conv(name, cur, cin, cout, k, stride, depthwise, in_scale, hw):
        shape = (1, k, k, cin) if depthwise else (cout, k, k, cin)
        w = rng.normal(0, np.sqrt(2.0 / (k * k * (1 if depthwise else cin))), size=shape).astype(np.float32)
        bias = rng.normal(0, 0.05, size=(cout,)).astype(np.float32)
        out_hw = -(-hw // stride)
        if q8:
            axis = 3 if depthwise else 0
            red = tuple(i for i in range(4) if i != axis)
            w_scale = np.maximum(np.abs(w).max(axis=red), 1e-8) / 127
            wq = np.clip(np.round(w / w_scale.reshape([-1 if i == axis else 1 for i in range(4)])),
                         -127, 127).astype(np.int8)
            wt = b.const(f"{name}/weights", wq, "int8", quant=QuantParams(w_scale, 0, axis))
            bq = np.round(bias / (in_scale * w_scale)).astype(np.int32)
            bt = b.const(f"{name}/bias", bq, "int32", quant=QuantParams(in_scale * w_scale, 0, 0))
        else:
            wt = b.const(f"{name}/weights", w)
            bt = b.const(f"{name}/bias", bias)
        y = b.tensor(f"{name}/relu6", (1, out_hw, out_hw, cout), dtype, qp(act_scale, act_zp))
        opts = dict(padding=0, stride_w=stride, stride_h=stride, fused_activation_function=3)
        if depthwise:
            b.op("DEPTHWISE_CONV_2D", [cur, wt, bt], [y], depth_multiplier=1, **opts)
        else:
            b.op("CONV_2D", [cur, wt, bt], [y], **opts)
        return y, out_hw

    def ch(n):
        return max(8, int(n * alpha))

    cur, hw = conv("conv0", cur, 3, ch(32), 3, 2, False, in_scale, hw)
    c = ch(32)
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    for i, (cout, s) in enumerate(plan):
        cur, hw = conv(f"dw{i}", cur, c, c, 3, s, True, act_scale, hw)
        cur, hw = conv(f"pw{i}", cur, c, ch(cout), 1, 1, False, act_scale, hw)
        c = ch(cout)
    pooled = b.tensor("pool", (1, 1, 1, c), dtype, qp(act_scale, act_zp))
    b.op("AVERAGE_POOL_2D", [cur], [pooled], padding=1, stride_w=1, stride_h=1, filter_width=hw,
         filter_height=hw, fused_activation_function=0)
    flat = b.tensor("flat", (1, c), dtype, qp(act_scale, act_zp))
    b.op("RESHAPE", [pooled, b.const("shape", np.array([1, c], np.int32))], [flat], new_shape=(1, c))
    w = rng.normal(0, np.sqrt(1.0 / c), size=(classes, c)).astype(np.float32)
    if q8:
        w_scale = np.abs(w).max() / 127
        wt = b.const("fc/weights", np.round(w / w_scale).astype(np.int8), "int8", quant=(w_scale, 0))
        bt = b.const("fc/bias", np.zeros(classes, np.int32), "int32", quant=(act_scale * w_scale, 0))
    else:
        wt, bt = b.const("fc/weights", w), b.const("fc/bias", np.zeros(classes, np.float32))
    logits = b.tensor("logits", (1, classes), dtype, qp(0.1, 0))
    b.op("FULLY_CONNECTED", [flat, wt, bt], [logits], fused_activation_function=0)
    probs = b.tensor("probs", (1, classes), dtype, qp(1 / 256, -128))
    b.op("SOFTMAX", [logits], [probs], beta=1.0)
    b.output(probs)
    b.signature()
    return b.to_bytes()
