"""Run a model or a bundle on inputs: the library behind ``edgerun run``.

:func:`run` takes a .tflite model or a bundle (recognised by content, so the deploy ``current``
link works under any name) and returns a JSON-able report. Delegates named explicitly must be
usable here: asking for ``edgetpu`` on a machine without ``libedgetpu`` raises
:class:`DelegateUnavailableError` instead of quietly running on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgerun.errors import DelegateUnavailableError, EdgerunError, UsageError

__all__ = ["require_delegates", "run", "run_bundle", "run_model", "top_k"]


def require_delegates(spec) -> list[str]:
    """Delegate names from ``spec`` (``"xnnpack,edgetpu"`` or a list); each must be available here."""
    from edgerun.delegate import get_delegate, parse_delegate_list

    names = parse_delegate_list(spec) if spec else []
    for n in names:
        a = get_delegate(n).is_available()
        if not a.ok:
            raise DelegateUnavailableError(f"--delegate {n} was asked for but is not available here: {a.reason}")
    return names


def top_k(values: np.ndarray, k: int) -> list[tuple[int, float]]:
    flat = values.reshape(-1).astype(np.float64)
    idx = np.argsort(-flat, kind="stable")[:k]
    return [(int(i), float(flat[i])) for i in idx]


def run(path, inputs=(), *, image_options: dict | None = None, delegates=None, compare: str | None = None,
        profile: bool = False, k: int = 5, verify: bool = False, seed: int | None = None,
        allow_unsigned: bool = False) -> dict:
    """Run ``path`` (model or bundle) on ``inputs`` (files; random inputs when empty).

    For a bundle, ``verify`` runs its golden vectors: the report's ``verified`` is the verdict.
    """
    from edgerun.bundle import is_bundle

    names = require_delegates(delegates)
    p = Path(path)
    if is_bundle(p):
        if compare or profile:
            raise UsageError("--compare and --profile apply to .tflite models, not bundles")
        return run_bundle(p, list(inputs), verify=verify, delegates=names if delegates is not None else None,
                          k=k, image_options=image_options, allow_unsigned=allow_unsigned)
    if verify:
        raise UsageError(f"--verify needs a bundle (golden vectors live in bundles); {path} is not one")
    return run_model(p, list(inputs), image_options=image_options, delegates=names, compare=compare,
                     profile=profile, k=k, seed=seed)


def run_model(model: Path, inputs: list[Path], *, image_options: dict | None = None,
              delegates: list[str] | None = None, compare: str | None = None, profile: bool = False,
              k: int = 5, seed: int | None = None) -> dict:
    """A .tflite model on ``inputs`` (random ones when empty); returns a JSON-able report."""
    from edgerun.inputs import dequantize_for, load_inputs
    from edgerun.runtime.interpreter import Interpreter
    from edgerun.testing import random_inputs

    if compare is not None and compare != "litert":
        raise UsageError(f"--compare takes 'litert', not {compare!r}")
    model = Path(model)
    from edgerun._fs import read_regular

    # a regular file only: a FIFO would block, /dev/zero would never end
    data = read_regular(model, limit=1 << 34, what="model or a bundle", error=EdgerunError)
    it = Interpreter(model_content=data, delegates=delegates or None)
    it.allocate_tensors()
    details = it.get_input_details()
    if inputs:  # the preprocessing the converter stored in the model, overridden by options
        from edgerun.preprocess import spec_from_metadata

        stored = spec_from_metadata(it.model.metadata_dict()) or {}
        keys = ("size", "mean", "std", "scale", "layout", "channel_order", "resize")
        image_options = {**{k: v for k, v in stored.items() if k in keys}, **(image_options or {})}
    xs = load_inputs(inputs, details, image_options=image_options) if inputs else \
        random_inputs(details, seed or 0)
    if profile:
        it.set_profiling(True)
    for d, x in zip(details, xs):
        it.set_tensor(d["index"], x)
    it.invoke()
    report: dict = {"model": str(model), "inputs": "random" if not inputs else [str(p) for p in inputs],
                    "outputs": []}
    outs = []
    for d in it.get_output_details():
        y = it.get_tensor(d["index"])
        outs.append(y)
        real = dequantize_for(d, y)
        entry = {"name": d["name"], "shape": list(y.shape), "dtype": y.dtype.name,
                 "values": real.tolist() if real.size <= 32 else None}
        if real.dtype.kind in "iuf" and real.ndim >= 1 and real.shape[-1] > 1 and real.size == real.shape[-1]:
            entry["top_k"] = [{"index": i, "score": s} for i, s in top_k(real, k)]
        report["outputs"].append(entry)
    if compare:
        from edgerun.testing import run_litert

        try:
            want = run_litert(data, xs, reference=True)
        except (ValueError, RuntimeError) as e:  # LiteRT refuses models edgerun runs (op versions, ...)
            raise EdgerunError(f"--compare litert: LiteRT cannot run this model: {str(e).strip().splitlines()[0]}") \
                from None
        report["compare_litert"] = [
            {"name": d["name"], "max_abs_diff": float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
             if g.size else 0.0}
            for d, g, w in zip(it.get_output_details(), outs, want)]
    if profile:
        prof = it.profile
        total = sum(prof.values()) or 1.0
        report["profile"] = [{"op": op, "ms": t * 1e3, "share": t / total}
                             for op, t in sorted(prof.items(), key=lambda kv: -kv[1])]
    if it.partitions:
        from edgerun.delegate import coverage

        report["delegation"] = coverage(it)
    return report


def run_bundle(path: Path, inputs: list[Path], *, verify: bool = False, delegates: list[str] | None = None,
               k: int = 5, image_options: dict | None = None, allow_unsigned: bool = False) -> dict:
    """A bundle on one input file (its first golden input when none), or its golden vectors.

    ``delegates=None`` uses the bundle's target delegates; ``[]`` edgerun's kernels only.
    """
    import edgerun

    if image_options:
        raise UsageError("image options (--size, --mean, ...) do not apply to bundles: a bundle carries its "
                         "own preprocessing")
    bm = edgerun.load(path, delegates=delegates, allow_unsigned=allow_unsigned)
    report: dict = {"bundle": str(path)}
    if verify:
        res = bm.verify()
        report["verify"] = res
        report["verified"] = bool(res.get("ok", False))
    if inputs or not verify:
        if len(inputs) > 1:
            raise UsageError("bundles take one input file here")
        out = bm.predict(str(inputs[0])) if inputs else bm.predict(None)
        report["outputs"] = out
        if getattr(out, "labels", None) is not None:  # edgerun.bundle.Prediction: best labels
            report["top_k"] = [{"label": lab, "score": sc} for lab, sc in out.top_k(k)]
    return report
