"""Packaging: a .tflite model, its labels, preprocessing, report and golden vectors into one
deterministic bundle file (the layout is described in :mod:`edgerun.bundle`)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np

from edgerun._fs import atomic_write, check_output, read_regular
from edgerun.bundle import archive, signing
from edgerun.bundle import golden as _golden
from edgerun.bundle import manifest as _manifest
from edgerun.bundle.model import prepare_inputs, run_case
from edgerun.bundle.read import MANIFEST, MODEL, SIGNATURE
from edgerun.errors import BundleError, EdgerunError

#: largest labels file or conversion report read into a bundle
MAX_SIDE_FILE = 64 << 20


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
    from edgerun.errors import InputFileError  # a path that gives no bytes: exit 3 (docs/verdicts.md)

    if not os.path.exists(p):
        raise InputFileError(f"{p}: no such file or folder (calibration data)")
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
                    raise InputFileError(f"calibration data {str(f)!r} is not a regular file")
                for chunk in iter(lambda: stream.read(1 << 20), b""):
                    fh.update(chunk)
        except OSError as e:
            raise InputFileError(f"cannot read calibration data {str(f)!r}: {e.strerror}") from None
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
        cases_in = [prepare_inputs(inputs, case) for case in golden_inputs]
    total = len(cases_in) + 1
    cases = []
    for n, xs in enumerate(cases_in):
        outs = run_case(interp, inputs, outputs, xs)
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
