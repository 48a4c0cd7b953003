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
            raise TypeError(f"cannot make random data of dtype {dt}")
    return out


def run_litert(model: bytes, inputs: list[np.ndarray], *, reference: bool = True,
               xnnpack: bool = False) -> list[np.ndarray]:
    from edgerun._litert import make_interpreter

    it = make_interpreter(model, reference=reference, xnnpack=xnnpack)
    details = it.get_input_details()
    for d, x in zip(details, inputs):
        if tuple(d["shape"]) != tuple(x.shape):
            it.resize_tensor_input(d["index"], x.shape)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def run_edgerun(model: bytes, inputs: list[np.ndarray], **kw) -> list[np.ndarray]:
    from edgerun.runtime.interpreter import Interpreter

    it = Interpreter(model_content=model, **kw)
    for d, x in zip(it.get_input_details(), inputs):
        if tuple(d["shape"]) != tuple(x.shape):
            it.resize_tensor_input(d["index"], x.shape)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


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
