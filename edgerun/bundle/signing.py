"""Ed25519 keys and signatures for bundles.

Signing and key generation use the ``cryptography`` package (``pip install 'edgerun[sign]'``).
Verification uses ``cryptography`` when it is installed and otherwise a small pure-Python
implementation of RFC 8032 verification (below), so a board with only numpy can still check a
signature. Verification handles public data only, so a variable-time implementation is fine
there; signing handles the secret key and is left to ``cryptography``.

Key files are PEM: the private key as unencrypted PKCS#8, the public key as
SubjectPublicKeyInfo, the formats ``openssl genpkey -algorithm ed25519`` writes. For Ed25519 both
are a fixed DER prefix followed by the 32 key bytes, so they can be read without an ASN.1 parser.
A public key may also be given as 32 raw bytes or 64 hex characters.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re

from edgerun.errors import BundleError, BundleIntegrityError

_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
_PKCS8_PREFIX = bytes.fromhex("302e020100300506032b657004220420")
#: domain separation: a bundle signature signs this prefix plus the manifest bytes
SIGNATURE_CONTEXT = b"edgerun-bundle-signature-v1\x00"


def _pem_body(text: str, label: str) -> bytes | None:
    m = re.search(rf"-----BEGIN {label}-----\s*([A-Za-z0-9+/=\s]+?)\s*-----END {label}-----", text)
    if not m:
        return None
    try:
        return base64.b64decode("".join(m.group(1).split()), validate=True)
    except binascii.Error:
        return None


def _read_key_file(path) -> bytes:
    from edgerun._fs import read_regular

    return read_regular(path, limit=64 << 10, what="key file", error=BundleError)  # PEM keys are ~120 bytes


def public_key_bytes(key) -> bytes:
    """A public key from bytes (raw or PEM), a hex string, a path, or a PEM private key: 32 bytes."""
    if isinstance(key, (str, os.PathLike)) and not (isinstance(key, str) and re.fullmatch(r"[0-9a-fA-F]{64}", key)):
        key = _read_key_file(key)
    if isinstance(key, str):
        return bytes.fromhex(key)
    key = bytes(key)
    if len(key) == 32:
        return key
    text = key.decode("ascii", "replace")
    der = _pem_body(text, "PUBLIC KEY")
    if der is not None and len(der) == 44 and der.startswith(_SPKI_PREFIX):
        return der[len(_SPKI_PREFIX):]
    if _pem_body(text, "PRIVATE KEY") is not None:
        return public_from_private(private_key_bytes(key))
    stripped = text.strip()
    if re.fullmatch(r"[0-9a-fA-F]{64}", stripped):
        return bytes.fromhex(stripped)
    raise BundleError("not an Ed25519 public key (expected a PEM 'PUBLIC KEY', 32 raw bytes or 64 hex digits)")


def private_key_bytes(key) -> bytes:
    """The 32-byte Ed25519 seed from a PEM PKCS#8 private key (bytes or path)."""
    if isinstance(key, (str, os.PathLike)):
        key = _read_key_file(key)
    der = _pem_body(bytes(key).decode("ascii", "replace"), "PRIVATE KEY")
    if der is None or len(der) != 48 or not der.startswith(_PKCS8_PREFIX):
        raise BundleError("not an unencrypted Ed25519 private key in PEM PKCS#8 form "
                          "(make one with `edgerun keygen`)")
    return der[len(_PKCS8_PREFIX):]


def fingerprint(public_key: bytes) -> str:
    """Short identifier of a public key: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(public_key).hexdigest()[:16]


def _crypto():
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise BundleError("signing needs the 'cryptography' package: pip install 'edgerun[sign]'") from None
    return ed25519


def generate_keypair() -> tuple[bytes, bytes]:
    """(private PEM, public PEM) for a fresh Ed25519 key."""
    ed25519 = _crypto()
    seed = ed25519.Ed25519PrivateKey.generate().private_bytes_raw()
    return private_pem(seed), public_pem(public_from_private(seed))


def private_pem(seed: bytes) -> bytes:
    b = base64.b64encode(_PKCS8_PREFIX + seed).decode()
    return f"-----BEGIN PRIVATE KEY-----\n{b}\n-----END PRIVATE KEY-----\n".encode()


def public_pem(pub: bytes) -> bytes:
    b = base64.b64encode(_SPKI_PREFIX + pub).decode()
    return f"-----BEGIN PUBLIC KEY-----\n{b}\n-----END PUBLIC KEY-----\n".encode()


def public_from_private(seed: bytes) -> bytes:
    ed25519 = _crypto()
    return ed25519.Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()


def sign(seed: bytes, message: bytes) -> bytes:
    """64-byte Ed25519 signature of ``message`` (needs ``cryptography``)."""
    return _crypto().Ed25519PrivateKey.from_private_bytes(seed).sign(message)


def verify(public_key: bytes, message: bytes, signature: bytes, *, backend: str = "auto") -> bool:
    """True when ``signature`` is a valid Ed25519 signature of ``message`` under ``public_key``.

    ``backend`` is ``"auto"`` (cryptography if installed, else pure Python), ``"cryptography"``
    or ``"python"``. Both backends first apply the same strict rules (:func:`strict_problem`):
    a public key or signature point R that is not canonically encoded or has small order, and
    a scalar S >= L, are refused, so a degenerate key cannot "verify" arbitrary manifests.
    """
    if strict_problem(public_key, signature) is not None:
        return False
    if backend in ("auto", "cryptography"):
        try:
            from cryptography.exceptions import InvalidSignature
            from cryptography.hazmat.primitives.asymmetric import ed25519
        except ImportError:
            if backend == "cryptography":
                raise BundleError("the 'cryptography' package is not installed") from None
        else:
            try:
                ed25519.Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
                return True
            except (InvalidSignature, ValueError):
                return False
    elif backend != "python":
        raise BundleError(f"unknown signature backend {backend!r}: use auto, cryptography or python")
    return _py_verify(public_key, message, signature)


def point_problem(encoded: bytes) -> str | None:
    """Why a 32-byte Ed25519 point encoding is unacceptable (None when it is fine).

    Refused: y >= p (non-canonical), x = 0 with the sign bit set (non-canonical), no point on
    the curve, and the 8 points of small order (their multiples by 8 are the identity).
    """
    if len(encoded) != 32:
        return f"is {len(encoded)} bytes, not 32"
    y = int.from_bytes(encoded, "little") & ((1 << 255) - 1)
    if y >= _P:
        return "is not canonically encoded (y >= p)"
    pt = _decode(encoded)
    if pt is None:
        return "is not a canonical point on the curve"
    if _is_identity(_mul(8, pt)):
        return "has small order"
    return None


def strict_problem(public_key: bytes, signature: bytes) -> str | None:
    """Why a (public key, signature) pair is refused before any curve equation is checked."""
    if len(public_key) != 32:
        return f"the public key is {len(public_key)} bytes, not 32"
    if len(signature) != 64:
        return f"the signature is {len(signature)} bytes, not 64"
    p = point_problem(public_key)
    if p:
        return f"the public key {p}"
    p = point_problem(signature[:32])
    if p:
        return f"the signature's R {p}"
    if int.from_bytes(signature[32:], "little") >= _L:
        return "the signature's S is not reduced (S >= L)"
    return None


def check_public_key(public_key: bytes) -> None:
    """BundleError for a public key that no honest signer has (non-canonical or small order)."""
    p = point_problem(bytes(public_key))
    if p:
        raise BundleError(f"the public key {fingerprint(bytes(public_key))} {p}: refused")


def check_signature(public_key: bytes, manifest_bytes: bytes, signature: bytes) -> None:
    why = strict_problem(public_key, signature)
    if why is not None:
        raise BundleIntegrityError(f"bad signature (key {fingerprint(public_key)}): {why}")
    if not verify(public_key, SIGNATURE_CONTEXT + manifest_bytes, signature):
        raise BundleIntegrityError(f"bad signature (key {fingerprint(public_key)}): the manifest was "
                                   "modified after signing, or the signature is corrupt")


# --- pure-Python Ed25519 verification (RFC 8032, section 5.1.7) ------------------------------
# Twisted Edwards curve -x^2 + y^2 = 1 + d x^2 y^2 over GF(p), points in extended coordinates
# (X, Y, Z, T) with x = X/Z, y = Y/Z, x*y = T/Z.

_P = 2 ** 255 - 19
_L = 2 ** 252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _add(a, b):
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    aa = (y1 - x1) * (y2 - x2) % _P
    bb = (y1 + x1) * (y2 + x2) % _P
    cc = 2 * _D * t1 * t2 % _P
    dd = 2 * z1 * z2 % _P
    e, f, g, h = bb - aa, dd - cc, dd + cc, bb + aa
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _mul(k: int, pt):
    acc = (0, 1, 1, 0)
    while k:
        if k & 1:
            acc = _add(acc, pt)
        pt = _add(pt, pt)
        k >>= 1
    return acc


def _decode(s: bytes):
    y = int.from_bytes(s, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    if y >= _P:
        return None
    u = (y * y - 1) % _P
    v = (_D * y * y + 1) % _P
    x = u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P) % _P
    vx2 = v * x * x % _P
    if vx2 == (-u) % _P:
        x = x * _SQRT_M1 % _P
    elif vx2 != u:
        return None
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = _P - x
    return (x, y, 1, x * y % _P)


def _is_identity(pt) -> bool:
    x, y, z, _ = pt
    return x % _P == 0 and (y - z) % _P == 0


def _encode(pt) -> bytes:
    x, y, z, _ = pt
    zi = pow(z, _P - 2, _P)
    x, y = x * zi % _P, y * zi % _P
    return (y | (x & 1) << 255).to_bytes(32, "little")


_BASE = _decode((4 * pow(5, _P - 2, _P) % _P).to_bytes(32, "little"))


def _py_verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    a = _decode(public_key)
    if a is None:
        return False
    r_bytes, s = signature[:32], int.from_bytes(signature[32:], "little")
    if s >= _L:
        return False
    h = int.from_bytes(hashlib.sha512(r_bytes + public_key + message).digest(), "little") % _L
    # [S]B - [h]A must encode to R; -A is (-x, y, z, -t)
    neg_a = ((-a[0]) % _P, a[1], a[2], (-a[3]) % _P)
    return _encode(_add(_mul(s, _BASE), _mul(h, neg_a))) == r_bytes
