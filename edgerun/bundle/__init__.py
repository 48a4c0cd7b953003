"""Bundles: the one file a device receives, and the one call a device app makes.

A bundle is a canonical archive (:mod:`edgerun.bundle.archive`) holding, in this order:

* ``manifest.json`` - canonical JSON (:mod:`edgerun.bundle.manifest`) naming and hashing every
  other member and describing the model's inputs, outputs, preprocessing, labels and target;
* ``golden.bin`` - golden vectors (:mod:`edgerun.bundle.golden`), when there are any;
* ``model.tflite`` - the model, byte for byte as given;
* ``signature.ed25519`` - optional: the signer's 32-byte public key and a 64-byte Ed25519
  signature of the manifest (:mod:`edgerun.bundle.signing`).

The same inputs always give the same bytes. Every member carries its SHA-256 in the archive,
the manifest lists them again, and the signature covers the manifest, so any change to any byte
of the file is noticed, and a signed bundle cannot be changed without the key.

On a device::

    import edgerun
    m = edgerun.load("model.bundle")           # checks everything before running anything
    scores = m.predict("cat.jpg")              # preprocessing and labels from the manifest
    print(scores.top_k(3), m.verify())         # verify(): golden vectors, max diff per output

Reading needs only numpy (and Pillow to decode image files); signing needs ``cryptography``.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgerun._fs import atomic_write, check_output, is_regular, read_regular
from edgerun.bundle import archive, signing, trust
from edgerun.bundle import golden as _golden
from edgerun.bundle import manifest as _manifest
from edgerun.errors import (
    BundleError,
    BundleIntegrityError,
    DelegateUnavailableError,
    EdgerunError,
    InputMismatchError,
    ModelFormatError,
)

#: largest labels file or conversion report read into a bundle
MAX_SIDE_FILE = 64 << 20
MANIFEST = "manifest.json"
MODEL = "model.tflite"
SIGNATURE = "signature.ed25519"
#: environment variable naming a trusted public key file (see :mod:`edgerun.bundle.trust`)
TRUSTED_KEY_ENV = trust.TRUSTED_KEY_ENV

__all__ = [
    "Bundle",
    "BundleError",
    "BundleIntegrityError",
    "BundleModel",
    "Prediction",
    "describe",
    "hash_calibration",
    "load",
    "read_bundle",
    "verify_bundle",
    "write_bundle",
]


# --------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------
def _read_labels(labels) -> list[str] | None:
    if labels is None:
        return None
    if isinstance(labels, (str, os.PathLike)):
        try:
            text = read_regular(labels, limit=MAX_SIDE_FILE, what="labels file", error=BundleError).decode("utf-8")
        except UnicodeDecodeError:
            raise BundleError(f"labels file {str(labels)!r} is not UTF-8") from None
        lines = [ln.rstrip("\r\n").rstrip() for ln in text.splitlines()]
        while lines and not lines[-1]:
            lines.pop()
        return lines
    return [str(x) for x in labels]


def _read_report(report):
    if report is None:
        return None
    if isinstance(report, (str, os.PathLike)):
        try:
            text = read_regular(report, limit=MAX_SIDE_FILE, what="conversion report", error=BundleError)
            return _manifest.jsonable(json.loads(text.decode("utf-8")))
        except BundleError:
            raise
        except (ValueError, RecursionError) as e:
            raise BundleError(f"cannot read conversion report {str(report)!r}: {type(e).__name__}: "
                              f"{str(e)[:100]}") from None
    if hasattr(report, "to_dict"):
        report = report.to_dict()
    return _manifest.jsonable(report)


def hash_calibration(path) -> str:
    """SHA-256 over calibration data: a file, or every file under a directory (sorted paths)."""
    p = Path(path)
    h = hashlib.sha256()
    try:
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    except OSError as e:
        raise BundleError(f"cannot list calibration data at {str(p)!r}: {e.strerror}") from None
    if not files or not all(f.exists() for f in files):
        raise BundleError(f"no calibration data at {str(p)!r}")
    for f in files:
        rel = f.relative_to(p).as_posix() if p.is_dir() else f.name
        h.update(rel.encode() + b"\0")
        fh = hashlib.sha256()
        try:
            # O_NONBLOCK: a FIFO planted as calibration data must not block the open
            fd = os.open(f, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as stream:
                if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                    raise BundleError(f"calibration data {str(f)!r} is not a regular file")
                for chunk in iter(lambda: stream.read(1 << 20), b""):
                    fh.update(chunk)
        except OSError as e:
            raise BundleError(f"cannot read calibration data {str(f)!r}: {e.strerror}") from None
        h.update(fh.digest())
    return h.hexdigest()


def _quant(t) -> dict | None:
    if not t.quantized:
        return None
    q = t.quant
    return {"scale": [float(s) for s in q.scale], "zero_point": [int(z) for z in q.zero_point],
            "quantized_dimension": int(q.quantized_dimension)}


def _io_entries(model, graph_indices, names_taken: set) -> list[dict]:
    g = model.main
    out = []
    for i in graph_indices:
        t = g.tensors[i]
        name = t.name or f"tensor_{i}"
        if name in names_taken:
            name = f"{name}:{i}"
        names_taken.add(name)
        out.append({"name": name, "index": int(i), "shape": [int(s) for s in t.shape], "dtype": t.dtype,
                    "quantization": _quant(t), "layout": None, "preprocessing": None})
    return out


def _preprocessing_for(entries: list[dict], preprocessing, model) -> None:
    from edgerun.preprocess import spec_from_metadata, validate_spec

    if preprocessing is None:
        try:
            spec = spec_from_metadata(model.metadata_dict())
        except EdgerunError as e:
            raise BundleError(f"the model's preprocessing metadata is invalid: {e}") from None
        per_input = {entries[0]["name"]: spec} if spec and entries else {}
    elif isinstance(preprocessing, dict) and preprocessing and all(
            isinstance(v, dict) for v in preprocessing.values()) and set(preprocessing) <= {
            e["name"] for e in entries}:
        per_input = dict(preprocessing)
    else:
        if not entries:
            raise BundleError("preprocessing given, but the model has no inputs")
        per_input = {entries[0]["name"]: preprocessing}
    for e in entries:
        spec = per_input.get(e["name"])
        if spec is not None:
            try:
                spec = validate_spec(spec)
            except (ValueError, TypeError) as err:
                raise BundleError(f"preprocessing for input {e['name']!r}: {err}") from None
            if len(e["shape"]) != 4:
                raise BundleError(f"preprocessing applies to 4-D image inputs; input {e['name']!r} has "
                                  f"shape {e['shape']}")
            e["preprocessing"] = spec
        if len(e["shape"]) == 4:
            e["layout"] = (spec or {}).get("layout", "NHWC")


def write_bundle(model, out_path, *, target: str = "cpu", labels=None, sign_key=None, preprocessing=None,
                 report=None, calib_hash: str | None = None, golden_inputs=None, progress=None) -> Path:
    """Package a .tflite model into one deterministic bundle file; returns its path.

    Args:
        model: path to a ``.tflite`` file, or its bytes.
        out_path: where to write the bundle (written to a temporary name, then renamed).
        target: ``rpi``, ``coral``, ``jetson``, ``mcu[:BOARD]`` or ``cpu`` (see ``edgerun.targets``).
        labels: a labels file (one per line) or a list of strings.
        sign_key: an Ed25519 private key (PEM path or bytes) to sign the manifest with.
        preprocessing: a preprocessing spec (``edgerun.preprocess``) for the first input, or
            ``{input_name: spec}``; by default the model's ``edgerun.preprocessing`` metadata.
        report: the converter's report (dict, object with ``to_dict()``, or a JSON file).
        calib_hash: SHA-256 hex of the calibration data (see :func:`hash_calibration`); by
            default the report's ``calibration.sha256`` when it has one.
        golden_inputs: a list of cases, each an input array, a list of arrays, a dict by input
            name, or an image (path / PIL) for image inputs; default: 3 pseudo-random cases
            seeded by the model hash. ``[]`` stores no golden vectors.
        progress: ``progress(done, total)`` callback.
    """
    from edgerun import __version__
    from edgerun.runtime.interpreter import Interpreter
    from edgerun.schema.reader import read_model
    from edgerun.targets import parse_target

    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    else:
        data = read_regular(model, limit=archive.MAX_BYTES, what="model", error=BundleError)
    check_output(out_path, model, what="bundle")  # refuse before any work, again before writing
    tgt = parse_target(target)
    ir = read_model(data)
    if tgt.name == "mcu":  # the firmware's own table decides: refuse what COMMIT would refuse
        from edgerun_delegates.mcu.firmware import firmware_accepts

        from edgerun.errors import CheckFailedError

        refusals = firmware_accepts(data, tgt.board.name)
        if refusals:
            raise CheckFailedError(f"edgerun's firmware on {tgt.board.name} would refuse this model: "
                                   + "; ".join(refusals))
    model_sha = hashlib.sha256(data).hexdigest()
    # MCU firmware plans like TFLM (activations may reuse input memory); Linux targets keep
    # inputs intact as LiteRT does. The manifest records the arena the target will need.
    interp = Interpreter(model_content=data, preserve_inputs=tgt.name != "mcu")
    interp.allocate_tensors()
    taken: set = set()
    inputs = _io_entries(ir, ir.main.inputs, taken)
    outputs = _io_entries(ir, ir.main.outputs, set())
    _preprocessing_for(inputs, preprocessing, ir)
    report = _read_report(report)
    labels = _read_labels(labels)
    if labels is not None and len(outputs) == 1 and len(outputs[0]["shape"]) >= 1 \
            and int(np.prod(outputs[0]["shape"])) == outputs[0]["shape"][-1] > 1 \
            and len(labels) != outputs[0]["shape"][-1]:
        from edgerun.errors import UsageError
        raise UsageError(f"{len(labels)} labels for a classifier with {outputs[0]['shape'][-1]} classes "
                         f"(output {outputs[0]['name']!r}); give one label per class")
    if calib_hash is None and isinstance(report, dict) and isinstance(report.get("calibration"), dict):
        calib_hash = report["calibration"].get("sha256")  # the converter's fingerprint of its data, if any
    if calib_hash is not None and not (isinstance(calib_hash, str) and len(calib_hash) == 64
                                       and all(c in "0123456789abcdef" for c in calib_hash)):
        raise BundleError(f"calib_hash must be a lower-case SHA-256 hex digest, got {calib_hash!r}")

    if golden_inputs is None:
        cases_in = _golden.default_inputs(inputs, model_sha)
    else:
        cases_in = [_prepare_inputs(inputs, case) for case in golden_inputs]
    total = len(cases_in) + 1
    cases = []
    for n, xs in enumerate(cases_in):
        outs = _run(interp, inputs, outputs, xs)
        cases.append((xs, outs))
        if progress:
            progress(n + 1, total)

    members: dict[str, bytes] = {MODEL: data}
    golden_entry = None
    if cases:
        blob, entries = _golden.pack(cases)
        members[_golden.MEMBER] = blob
        # the target's delegated paths, measured against the reference outputs (edgerun.bundle.golden)
        paths, path_members = _golden.record_paths(
            _golden.path_runner(data, [io["index"] for io in inputs], [io["index"] for io in outputs],
                                preserve_inputs=tgt.name != "mcu"),
            _golden.delegate_paths(tgt.delegates), cases, outputs)
        members.update(path_members)
        golden_entry = {"member": _golden.MEMBER, "cases": entries, "paths": paths}
    member_list = [{"name": n, "sha256": hashlib.sha256(members[n]).hexdigest(), "size": len(members[n])}
                   for n in sorted(members)]
    man = {
        "format": _manifest.FORMAT,
        "format_version": _manifest.FORMAT_VERSION,
        "edgerun_version": __version__,
        "model": {"member": MODEL, "sha256": model_sha, "size": len(data)},
        "members": member_list,
        "inputs": inputs,
        "outputs": outputs,
        "labels": labels,
        "target": {"spec": str(tgt), "name": tgt.name, "board": tgt.board.name if tgt.board else None},
        "delegates": list(tgt.delegates),
        "arena_bytes": int(interp.arena_bytes),
        "conversion_report": report,
        "calibration_sha256": calib_hash,
        "golden": golden_entry,
    }
    man_bytes = _manifest.dumps(man)
    _manifest.validate(_manifest.loads(man_bytes))  # what we write, we can read
    parts = [(MANIFEST, man_bytes)] + [(n, members[n]) for n in sorted(members)]
    if sign_key is not None:
        seed = signing.private_key_bytes(sign_key)
        pub = signing.public_from_private(seed)
        parts.append((SIGNATURE, pub + signing.sign(seed, signing.SIGNATURE_CONTEXT + man_bytes)))
    blob = archive.pack(parts)
    out = check_output(out_path, model, what="bundle")  # never the model file itself
    atomic_write(out, blob)
    if progress:
        progress(total, total)
    return out


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------
@dataclass
class Bundle:
    """A bundle whose every hash (and signature, when present) has been checked."""

    manifest: dict
    manifest_bytes: bytes
    model: bytes
    golden: list  # [(inputs, outputs)] of numpy arrays, in manifest order
    signed: bool
    public_key: bytes | None
    sha256: str  # of the whole file
    size: int
    members: dict = field(default_factory=dict)  # name -> bytes
    trusted: bool = False  # signed by the trusted key given or configured

    @property
    def key_fingerprint(self) -> str | None:
        return signing.fingerprint(self.public_key) if self.public_key else None

    @property
    def labels(self) -> list[str] | None:
        return self.manifest["labels"]


def read_bundle(path, *, trusted_key=None, allow_unsigned: bool = False, extract_to=None,
                max_bytes: int = archive.MAX_BYTES) -> Bundle:
    """Read and check a bundle (path or bytes); raises BundleError before anything is written.

    Checks: the archive structure (no trailing bytes, duplicates, odd names or oversize members),
    every member's SHA-256, the canonical manifest and its major version, that the members are
    exactly those the manifest lists, the golden vector layout, and the signature (strict
    Ed25519: small-order and non-canonical keys and signatures are refused). Trust policy
    (:mod:`edgerun.bundle.trust`): an unsigned bundle is refused unless ``allow_unsigned``;
    with ``trusted_key`` (or a configured one: ``EDGERUN_TRUSTED_KEY``, the config file) a signed
    bundle must be signed by that key. ``extract_to`` then writes the members into that
    directory (which must not already hold them); a failed extraction removes what it wrote.
    """
    if isinstance(path, (bytes, bytearray, memoryview)):
        data = bytes(path)
    else:
        data = archive.read_file(path, max_bytes=max_bytes)
    members = archive.unpack(data, max_bytes=max_bytes)
    names = [n for n, _ in members]
    if names[0] != MANIFEST:
        raise BundleError(f"the first bundle member must be {MANIFEST}, not {names[0]!r}")
    man_bytes = bytes(members[0][1])
    man = _manifest.loads(man_bytes)
    _manifest.check_version(man)
    _manifest.validate(man)
    payload = members[1:]
    sig = None
    if payload and payload[-1][0] == SIGNATURE:
        sig = bytes(payload.pop()[1])
        if len(sig) != 96:
            raise BundleError(f"{SIGNATURE} holds {len(sig)} bytes, not 96 (public key + signature)")
    listed = [e["name"] for e in man["members"]]
    if [n for n, _ in payload] != listed:
        raise BundleError(f"bundle members {[n for n, _ in payload]} differ from the manifest's {listed}")
    blobs = {}
    for (name, body), entry in zip(payload, man["members"]):
        if len(body) != entry["size"] or hashlib.sha256(body).hexdigest() != entry["sha256"]:
            raise BundleIntegrityError(f"member {name!r} does not match the manifest's size and SHA-256")
        blobs[name] = bytes(body)
    pub = None
    if sig is not None:
        pub = sig[:32]
        signing.check_signature(pub, man_bytes, sig[32:])
    trusted = trust.check_trust(pub, trusted_key=trusted_key, allow_unsigned=allow_unsigned)
    golden = []
    if man["golden"] is not None:
        golden = _golden.unpack(blobs[man["golden"]["member"]], man["golden"]["cases"])
        for ci, (ins, outs) in enumerate(golden):
            for key, arrs, ios in (("input", ins, man["inputs"]), ("output", outs, man["outputs"])):
                for a, io in zip(arrs, ios):
                    if np.dtype(a.dtype).name != io["dtype"] or list(a.shape) != io["shape"]:
                        raise BundleError(f"golden case {ci}: {key} {io['name']!r} is {a.dtype.name} "
                                          f"{list(a.shape)}, the manifest says {io['dtype']} {io['shape']}")
    model_entry = man["model"]
    bundle = Bundle(man, man_bytes, blobs[model_entry["member"]], golden, sig is not None, pub,
                    hashlib.sha256(data).hexdigest(), len(data), blobs, trusted is not None and pub == trusted)
    if extract_to is not None:
        archive.extract([(n, bytes(b)) for n, b in members], extract_to)
    return bundle


def describe(path, *, trusted_key=None, allow_unsigned: bool = True) -> dict:
    """A JSON-able summary of a bundle (for ``edgerun inspect`` and ``edgerun verify``).

    Describing is informational, so unsigned bundles are described unless ``allow_unsigned``
    is False; a signature that is present is always checked.
    """
    b = read_bundle(path, trusted_key=trusted_key, allow_unsigned=allow_unsigned)
    m = b.manifest
    labels = m["labels"]
    model_info = dict(m["model"])
    try:  # the model's own summary (ops, tensors, weights), as `edgerun inspect MODEL` shows it
        from edgerun.schema.reader import read_model
        from edgerun.summary import describe_model

        model_info.update(describe_model(read_model(b.model), with_arena=False))
        model_info["arena_bytes"] = m["arena_bytes"]
    except ImportError:
        pass
    except ModelFormatError as e:
        model_info["error"] = str(e)
    return {
        "bundle": str(path) if not isinstance(path, (bytes, bytearray, memoryview)) else None,
        "size": b.size, "sha256": b.sha256,
        "format_version": m["format_version"], "edgerun_version": m["edgerun_version"],
        "signed": b.signed, "key": b.key_fingerprint, "trusted": b.trusted,
        "model": model_info,
        "members": [dict(e) for e in m["members"]],
        "inputs": m["inputs"], "outputs": m["outputs"],
        "labels": {"count": len(labels), "first": labels[:5]} if labels is not None else None,
        "target": m["target"], "delegates": m["delegates"], "arena_bytes": m["arena_bytes"],
        "golden_cases": len(b.golden), "calibration_sha256": m["calibration_sha256"],
        "conversion_report": m["conversion_report"] is not None,
    }


def is_bundle(path) -> bool:
    """True when the file starts with the bundle magic bytes (cheap; checks nothing else)."""
    if not is_regular(path):  # a FIFO or device is never a bundle (and opening one may block)
        return False
    try:
        with open(path, "rb") as f:
            return f.read(len(archive.MAGIC)) == archive.MAGIC
    except OSError:
        return False


# --------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------
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


def _prepare_inputs(inputs: list[dict], value) -> list[np.ndarray]:
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


def _run(interp, inputs: list[dict], outputs: list[dict], xs: list[np.ndarray]) -> list[np.ndarray]:
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
            xs = _prepare_inputs(self.inputs, x)
        outs = _run(self.interpreter, self.inputs, self.outputs, xs)
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
