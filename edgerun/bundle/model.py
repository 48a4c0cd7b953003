"""The loaded model a device app holds: a checked bundle with its delegates picked, ready to
``predict()`` (inputs prepared as the manifest says) and ``verify()`` (golden vectors)."""

from __future__ import annotations

import os

import numpy as np

from edgerun.bundle import golden as _golden
from edgerun.bundle.read import Bundle, describe, read_bundle
from edgerun.errors import (
    BundleError,
    DelegateUnavailableError,
    EdgerunError,
    InputMismatchError,
    ModelFormatError,
)


def _prepare_one(io: dict, value) -> np.ndarray:
    """One user value (array, PIL image, image path) to the input described by manifest ``io``.

    An array of the input's dtype and shape (with or without the batch dimension of 1) is taken
    as is; for an input with preprocessing, any other array (uint8 or float ``H x W [x C]``), a
    PIL image or a path is an image and goes through :func:`edgerun.preprocess.preprocess_image`
    (a uint8 array is always an image there). Float arrays for quantized inputs are quantized.
    """
    from edgerun.preprocess import preprocess_image, quantize

    dt = np.dtype(io["dtype"])
    shape = tuple(io["shape"])
    q = io["quantization"]
    scale, zp = (q["scale"][0], q["zero_point"][0]) if q and len(q["scale"]) == 1 else (None, 0)
    is_image = isinstance(value, (str, os.PathLike)) or (hasattr(value, "mode") and hasattr(value, "convert"))
    if not is_image:
        arr = np.asarray(value)
        if arr.dtype == dt and (arr.shape == shape or (
                arr.shape == shape[1:] and shape[:1] == (1,) and (dt != np.uint8 or io["preprocessing"] is None))):
            return arr.reshape(shape)  # already the model input (perhaps without its batch dimension)
        if io["preprocessing"] is not None and arr.ndim in (2, 3) or (
                io["preprocessing"] is not None and arr.ndim == 4 and arr.shape != shape):
            is_image = True
        else:
            if arr.shape != shape and arr.size == int(np.prod(shape)) and arr.ndim == len(shape) - 1:
                arr = arr.reshape(shape)
            if arr.shape != shape:
                raise InputMismatchError(f"input {io['name']!r} takes shape {list(shape)}, got {list(arr.shape)}")
            if arr.dtype.kind == "f" and dt.kind in "iu":
                if scale is None:
                    raise InputMismatchError(f"input {io['name']!r} is {dt.name} without quantization; "
                                             f"give {dt.name} data")
                return quantize(arr, dt, scale, zp)
            if arr.dtype != dt:
                if not np.can_cast(arr.dtype, dt, "same_kind") or (arr.dtype.kind in "iu" and dt.kind in "iu"
                                                                    and not np.can_cast(arr.dtype, dt)):
                    raise InputMismatchError(f"input {io['name']!r} takes {dt.name}, got {arr.dtype.name}")
                return arr.astype(dt)
            return arr
    if len(shape) != 4:
        raise InputMismatchError(f"input {io['name']!r} (shape {list(shape)}) is not an image input")
    spec = dict(io["preprocessing"] or {})
    spec.setdefault("layout", io["layout"] or "NHWC")
    return preprocess_image(value, spec, shape=shape, dtype=dt, scale=scale, zero_point=zp)


def prepare_inputs(inputs: list[dict], value) -> list[np.ndarray]:
    """A user's case (one value, a list in input order, or a dict by name) to one array per manifest
    input; ``predict`` and the packager's golden inputs both go through here."""
    if isinstance(value, dict):
        names = [io["name"] for io in inputs]
        unknown = set(value) - set(names)
        if unknown:
            raise InputMismatchError(f"no inputs named {sorted(unknown)}; inputs are {names}")
        missing = [n for n in names if n not in value]
        if missing:
            raise InputMismatchError(f"missing inputs {missing}")
        return [_prepare_one(io, value[io["name"]]) for io in inputs]
    if isinstance(value, (list, tuple)) and len(inputs) > 1:
        if len(value) != len(inputs):
            raise InputMismatchError(f"model takes {len(inputs)} inputs, got {len(value)}")
        return [_prepare_one(io, v) for io, v in zip(inputs, value)]
    if len(inputs) != 1:
        raise InputMismatchError(f"model takes {len(inputs)} inputs; pass a dict by name or a list")
    return [_prepare_one(inputs[0], value)]


def run_case(interp, inputs: list[dict], outputs: list[dict], xs: list[np.ndarray]) -> list[np.ndarray]:
    """Set the inputs, invoke, return the outputs in manifest order."""
    for io, x in zip(inputs, xs):
        interp.set_tensor(io["index"], x)
    interp.invoke()
    return [interp.get_tensor(io["index"]) for io in outputs]


def _dequantize(io: dict, y: np.ndarray) -> np.ndarray:
    q = io["quantization"]
    if y.dtype.kind not in "iu" or not q or len(q["scale"]) != 1:
        return y.astype(np.float32) if y.dtype.kind in "fiu" else y
    return (y.astype(np.float32) - np.float32(q["zero_point"][0])) * np.float32(q["scale"][0])


class Prediction(dict):
    """Outputs by name (raw arrays, as the model produces them), plus label helpers.

    ``scores(name=None)`` gives an output dequantized to float; ``top_k(k)`` the ``k`` best
    (label, score) pairs of the first output (or ``name``); ``label`` the best label.
    """

    def __init__(self, outputs: dict, ios: list[dict], labels: list[str] | None):
        super().__init__(outputs)
        self._ios = {io["name"]: io for io in ios}
        self.labels = labels

    def scores(self, name: str | None = None) -> np.ndarray:
        name = name or next(iter(self))
        return _dequantize(self._ios[name], self[name])

    def top_k(self, k: int = 5, name: str | None = None) -> list[tuple[str, float]]:
        s = self.scores(name).reshape(-1)
        idx = np.argsort(-s, kind="stable")[:k]
        labs = self.labels
        return [(labs[i] if labs is not None and i < len(labs) else str(int(i)), float(s[i])) for i in idx]

    @property
    def label(self) -> str:
        return self.top_k(1)[0][0]

    def to_dict(self, k: int = 5) -> dict:
        out = {"outputs": {n: v for n, v in self.items()}}
        if self.labels is not None:
            out["top_k"] = [{"label": lab, "score": s} for lab, s in self.top_k(k)]
        return out


def _pick_delegates(model_bytes: bytes, names: list) -> tuple[object, list[str], dict]:
    """An allocated Interpreter with the first usable delegates; falls back to edgerun's kernels."""
    from edgerun.runtime.interpreter import Interpreter

    usable, skipped = [], {}
    if names:
        try:
            from edgerun.delegate import get_delegate
        except ImportError as e:  # delegate framework missing in a minimal install
            get_delegate, skipped["*"] = None, f"delegate support unavailable: {e}"
        for n in names:
            if get_delegate is None:
                break
            if not isinstance(n, str):
                usable.append(n)
                continue
            try:
                d = get_delegate(n)
                av = d.is_available()
                if av:
                    usable.append(d)
                else:
                    skipped[n] = getattr(av, "reason", "") or "not available"
            except (EdgerunError, ImportError, OSError) as e:
                skipped[n] = str(e)
    if usable:
        try:
            it = Interpreter(model_content=model_bytes, delegates=usable)
            it.allocate_tensors()
            return it, [getattr(d, "name", str(d)) for d in usable], skipped
        except (DelegateUnavailableError, OSError) as e:
            for d in usable:
                skipped[getattr(d, "name", str(d))] = str(e)
    it = Interpreter(model_content=model_bytes)
    it.allocate_tensors()
    return it, [], skipped


class BundleModel:
    """A checked bundle, ready to run: ``predict()`` and ``verify()``.

    Attributes:
        bundle: the :class:`Bundle` (manifest, model bytes, golden vectors, signature state).
        delegates: names of the delegates in use ([] when edgerun's kernels run everything).
        skipped: ``{delegate: reason}`` for delegates of the target that could not be used.
        interpreter: the underlying :class:`edgerun.Interpreter`.
    """

    def __init__(self, bundle: Bundle, delegates=None):
        self.bundle = bundle
        self.manifest = bundle.manifest
        names = self.manifest["delegates"] if delegates is None else list(delegates)
        try:
            self.interpreter, self.delegates, self.skipped = _pick_delegates(bundle.model, names)
        except ModelFormatError as e:
            raise BundleError(f"the bundle's model is malformed: {e}") from None
        self.inputs = self.manifest["inputs"]
        self.outputs = self.manifest["outputs"]
        self.labels = self.manifest["labels"]
        self._check_against_model()

    def _check_against_model(self) -> None:
        """The manifest's inputs/outputs must be the model's (index, dtype, shape)."""
        it = self.interpreter
        for key, details in (("inputs", it.get_input_details()), ("outputs", it.get_output_details())):
            ios = self.manifest[key]
            have = [(int(d["index"]), np.dtype(d["dtype"]).name, [int(s) for s in d["shape"]]) for d in details]
            want = [(io["index"], io["dtype"], io["shape"]) for io in ios]
            if have != want:
                raise BundleError(f"the manifest's {key} {want} do not match the model's {have}")

    def __repr__(self) -> str:
        return (f"BundleModel(target={self.manifest['target']['spec']!r}, inputs={[i['name'] for i in self.inputs]}, "
                f"delegates={self.delegates or ['edgerun']}, signed={self.bundle.signed})")

    def predict(self, x=None, **named) -> Prediction:
        """Run the model on an array, a PIL image, an image path, or a dict / keywords by input name.

        Images get the manifest's preprocessing (resize, scale/mean/std, channel order, layout,
        quantization to the input dtype). ``None`` runs the first golden input. Returns a
        :class:`Prediction`: outputs by name, with labels where the bundle has them.
        """
        if named:
            if x is not None:
                raise InputMismatchError("pass inputs positionally or by name, not both")
            x = named
        if x is None:
            if not self.bundle.golden:
                raise InputMismatchError("predict() needs an input (this bundle has no golden vectors)")
            xs = list(self.bundle.golden[0][0])
        else:
            xs = prepare_inputs(self.inputs, x)
        outs = run_case(self.interpreter, self.inputs, self.outputs, xs)
        return Prediction({io["name"]: y for io, y in zip(self.outputs, outs)}, self.outputs, self.labels)

    def verify(self, tolerance: float | None = None) -> dict:
        """Run the golden vectors on every kernel path in use and judge them (see
        :func:`edgerun.bundle.golden.verify`): edgerun's kernels must match the reference outputs
        bit for bit, a delegated path must stay within the tolerance measured at package time.

        Returns ``{"ok", "cases", "max_abs_diff": {output: diff}, "tolerance", "delegates",
        "paths"}``; ``ok`` is False for a bundle with no golden cases (nothing was verified).
        """
        return _golden.verify(self, tolerance)


def load(path, *, delegates=None, trusted_key=None, allow_unsigned: bool = False) -> BundleModel:
    """Open a bundle on the device: check it, pick delegates from its target, ready to predict.

    Unsigned bundles are refused unless ``allow_unsigned=True``; with ``trusted_key`` (or a
    configured one, see :mod:`edgerun.bundle.trust`) the bundle must be signed by that key.

    ``delegates`` overrides the manifest's delegate order (``[]``: edgerun's kernels only).
    Delegates whose runtime is missing are skipped (see ``BundleModel.skipped``); edgerun's
    own kernels run whatever no delegate takes.
    """
    return BundleModel(read_bundle(path, trusted_key=trusted_key, allow_unsigned=allow_unsigned), delegates=delegates)


def verify_bundle(path, *, trusted_key=None, allow_unsigned: bool = False, golden: bool = True, delegates=None,
                  tolerance: float | None = None) -> dict:
    """Check a bundle's hashes and signature and, with ``golden``, run its golden vectors.

    Unsigned bundles are refused (BundleIntegrityError) unless ``allow_unsigned=True``.

    Returns a JSON-able report with ``ok``; raises BundleError when the file itself is bad.
    """
    info = describe(path, trusted_key=trusted_key, allow_unsigned=allow_unsigned)
    report = {"bundle": info["bundle"], "sha256": info["sha256"], "signed": info["signed"], "key": info["key"],
              "trusted": info["trusted"], "integrity": "ok", "ok": True}
    if golden:
        res = load(path, trusted_key=trusted_key, allow_unsigned=allow_unsigned, delegates=delegates).verify(tolerance)
        report["golden"] = res
        report["ok"] = res["ok"]  # no golden cases: nothing verified, the check fails
    return report
