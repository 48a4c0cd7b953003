"""Reading a bundle: every hash, the manifest, the golden layout and the signature checked
before anything is used or extracted; a JSON-able description for ``inspect`` and ``verify``."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from edgerun._fs import is_regular
from edgerun.bundle import archive, signing, trust
from edgerun.bundle import golden as _golden
from edgerun.bundle import manifest as _manifest
from edgerun.errors import BundleError, BundleIntegrityError, ModelFormatError

MANIFEST = "manifest.json"
MODEL = "model.tflite"
SIGNATURE = "signature.ed25519"


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


def describe_path(path) -> dict:
    """``edgerun inspect``'s report for a model or a bundle, told apart by content (the bundle
    magic bytes), not by suffix: a bundle under any name, or the deploy ``current`` link."""
    from edgerun.schema import read_model_file
    from edgerun.summary import describe_model

    if is_bundle(path):
        return describe(path)
    return describe_model(read_model_file(path))


def is_bundle(path) -> bool:
    """True when the file starts with the bundle magic bytes (cheap; checks nothing else)."""
    if not is_regular(path):  # a FIFO or device is never a bundle (and opening one may block)
        return False
    try:
        with open(path, "rb") as f:
            return f.read(len(archive.MAGIC)) == archive.MAGIC
    except OSError:
        return False
