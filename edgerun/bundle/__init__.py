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

The code is split along its seams: :mod:`~edgerun.bundle.write` packages,
:mod:`~edgerun.bundle.read` reads, checks, describes and extracts, :mod:`~edgerun.bundle.model`
is the loaded model (``predict`` / ``verify``); the format pieces are :mod:`~edgerun.bundle.archive`,
:mod:`~edgerun.bundle.manifest`, :mod:`~edgerun.bundle.golden`, :mod:`~edgerun.bundle.signing` and
:mod:`~edgerun.bundle.trust`.
"""

from __future__ import annotations

from edgerun.bundle import archive, signing, trust
from edgerun.bundle.model import BundleModel, Prediction, load, verify_bundle
from edgerun.bundle.read import (
    MANIFEST,
    MODEL,
    SIGNATURE,
    Bundle,
    describe,
    describe_path,
    is_bundle,
    read_bundle,
)
from edgerun.bundle.write import MAX_SIDE_FILE, hash_calibration, write_bundle
from edgerun.errors import BundleError, BundleIntegrityError

#: environment variable naming a trusted public key file (see :mod:`edgerun.bundle.trust`)
TRUSTED_KEY_ENV = trust.TRUSTED_KEY_ENV

__all__ = [
    "MANIFEST",
    "MAX_SIDE_FILE",
    "MODEL",
    "SIGNATURE",
    "TRUSTED_KEY_ENV",
    "Bundle",
    "BundleError",
    "BundleIntegrityError",
    "BundleModel",
    "Prediction",
    "archive",
    "describe",
    "describe_path",
    "hash_calibration",
    "is_bundle",
    "load",
    "read_bundle",
    "signing",
    "trust",
    "verify_bundle",
    "write_bundle",
]
