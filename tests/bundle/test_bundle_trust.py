"""Trust policy and strict Ed25519: unsigned bundles refused by default, configured keys, degenerate
keys and signatures refused by both verification backends, no lost data when writing or extracting."""

import os

import pytest

import edgerun
from edgerun.bundle import SIGNATURE, archive, read_bundle, signing, trust, verify_bundle, write_bundle
from edgerun.errors import BundleError, BundleIntegrityError, EdgerunError
from edgerun.ir import ModelBuilder

# The eight points of small order on edwards25519 in their canonical encodings, and their
# non-canonical twins (sign bit set on x = 0, or y >= p), as listed in libsodium's
# ge25519_has_small_order blocklist and in "Taming the many EdDSAs" (Chalkias et al., 2020).
SMALL_ORDER = [
    "0100000000000000000000000000000000000000000000000000000000000000",  # identity, order 1
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # (0, -1), order 2
    "0000000000000000000000000000000000000000000000000000000000000000",  # order 4
    "0000000000000000000000000000000000000000000000000000000000000080",  # order 4, other sign
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  # order 8
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",  # order 8
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",  # order 8
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",  # order 8
]
NON_CANONICAL = [
    "0100000000000000000000000000000000000000000000000000000000000080",  # x = 0 with the sign bit
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",  # (0, -1) with the sign bit
    "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # y = p (is 0)
    "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # y = p + 1 (is 1)
    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",  # y = 2^255 - 1
]
L = 2 ** 252 + 27742317777372353535851937790883648493
BACKENDS = ["python", "cryptography"]


def model(zp: int = 0) -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 4), "int8", (0.1, zp))
    y = b.tensor("y", (1, 4), "int8", (0.1, zp))
    b.op("RELU", [x], [y])
    b.output(y)
    return b.to_bytes()


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("trustkeys")
    for name in ("k", "other"):
        priv, pub = signing.generate_keypair()
        (d / f"{name}.key").write_bytes(priv)
        (d / f"{name}.pub").write_bytes(pub)
    return d


@pytest.fixture(autouse=True)
def no_user_config(monkeypatch, tmp_path):
    """Each test starts with no configured keys (the developer's own config must not leak in)."""
    for var in (trust.SIGNING_KEY_ENV, trust.TRUSTED_KEY_ENV, trust.CONFIG_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def test_small_order_public_keys_never_verify():
    """The classic forgery: A of small order, R = identity, S = 0 satisfies [8][S]B = [8]R + [8][h]A
    for every message; a permissive verifier accepts it. Both backends must refuse it."""
    for hex_key in SMALL_ORDER:
        pub = bytes.fromhex(hex_key)
        assert signing.point_problem(pub) == "has small order", hex_key
        for r in (SMALL_ORDER[0], hex_key):
            sig = bytes.fromhex(r) + bytes(32)
            for backend in BACKENDS:
                for msg in (b"", b"any manifest at all"):
                    assert signing.verify(pub, msg, sig, backend=backend) is False, (hex_key, backend)
            with pytest.raises(BundleIntegrityError, match="small order"):
                signing.check_signature(pub, b"{}", sig)
        with pytest.raises(BundleError, match="small order"):
            signing.check_public_key(pub)


def test_non_canonical_public_keys_and_R_refused(keys):
    seed = signing.private_key_bytes(keys / "k.key")
    good_pub = signing.public_from_private(seed)
    msg = b"message"
    good_sig = signing.sign(seed, msg)
    for backend in BACKENDS:
        assert signing.verify(good_pub, msg, good_sig, backend=backend)
    for hex_key in NON_CANONICAL:
        enc = bytes.fromhex(hex_key)
        assert signing.point_problem(enc) is not None and "small order" not in signing.point_problem(enc)
        for backend in BACKENDS:
            assert not signing.verify(enc, msg, bytes.fromhex(SMALL_ORDER[0]) + bytes(32), backend=backend)
            # the same bytes as R of an otherwise well-formed signature
            assert not signing.verify(good_pub, msg, enc + good_sig[32:], backend=backend)
        with pytest.raises(BundleError):
            signing.check_public_key(enc)


def test_non_canonical_S_refused(keys):
    seed = signing.private_key_bytes(keys / "k.key")
    pub = signing.public_from_private(seed)
    msg = b"manifest bytes"
    sig = signing.sign(seed, msg)
    s = int.from_bytes(sig[32:], "little")
    for bad_s in (s + L, s + 2 * L, L, 2 ** 256 - 1):
        if bad_s >= 2 ** 256:
            continue
        forged = sig[:32] + bad_s.to_bytes(32, "little")
        # s + L is the same scalar mod L: a verifier that reduces S would accept it (malleability)
        for backend in BACKENDS:
            assert signing.verify(pub, msg, forged, backend=backend) is False, (hex(bad_s), backend)
        assert "S >= L" in signing.strict_problem(pub, forged)


def test_small_order_key_cannot_sign_a_bundle(tmp_path):
    """A bundle 'signed' by the identity key with R = identity, S = 0 is refused even with no trusted key."""
    p = write_bundle(model(), tmp_path / "m.bundle")
    members = [(n, bytes(b)) for n, b in archive.unpack(p.read_bytes())]
    forged = archive.pack(members + [(SIGNATURE, bytes.fromhex(SMALL_ORDER[0]) * 2 + bytes(32))])
    with pytest.raises(BundleIntegrityError, match="small order"):
        read_bundle(forged, allow_unsigned=True)
    with pytest.raises(BundleError, match="small order"):
        read_bundle(p, trusted_key=bytes.fromhex(SMALL_ORDER[4]))


def test_unsigned_refused_by_default(tmp_path, keys):
    p = write_bundle(model(), tmp_path / "u.bundle")
    for call in (lambda **k: read_bundle(p, **k), lambda **k: edgerun.load(p, **k),
                 lambda **k: verify_bundle(p, golden=False, **k)):
        with pytest.raises(BundleIntegrityError, match="not signed.*allow-unsigned"):
            call()
        call(allow_unsigned=True)
    assert verify_bundle(p, allow_unsigned=True)["ok"] is True
    s = write_bundle(model(), tmp_path / "s.bundle", sign_key=keys / "k.key")
    m = edgerun.load(s)  # signed, no trusted key configured: the signature is checked, not trusted
    assert m.bundle.signed and not m.bundle.trusted
    assert edgerun.load(s, trusted_key=keys / "k.pub").bundle.trusted


def test_empty_trusted_key_is_an_error(tmp_path, keys, monkeypatch):
    s = write_bundle(model(), tmp_path / "s.bundle", sign_key=keys / "k.key")
    monkeypatch.setenv(trust.TRUSTED_KEY_ENV, "")
    with pytest.raises(BundleError, match="EDGERUN_TRUSTED_KEY is set but empty"):
        read_bundle(s)
    with pytest.raises(BundleError, match="set but empty"):
        edgerun.load(s, allow_unsigned=True)
    with pytest.raises(BundleError, match="empty"):
        read_bundle(s, trusted_key="")


def test_configured_trusted_key_is_binding(tmp_path, keys, monkeypatch):
    u = write_bundle(model(), tmp_path / "u.bundle")
    o = write_bundle(model(), tmp_path / "o.bundle", sign_key=keys / "other.key")
    s = write_bundle(model(), tmp_path / "s.bundle", sign_key=keys / "k.key")
    cfg = tmp_path / "xdg" / "edgerun" / "config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text('trusted_key = "../../k.pub"\n')  # relative to the config file's folder
    (tmp_path / "k.pub").write_bytes((keys / "k.pub").read_bytes())
    assert read_bundle(s).trusted
    with pytest.raises(BundleIntegrityError, match="not by the trusted key"):
        read_bundle(o)
    with pytest.raises(BundleIntegrityError, match="trusted key"):
        read_bundle(u, allow_unsigned=True)  # a configured key is not overridden by allow_unsigned
    monkeypatch.setenv(trust.TRUSTED_KEY_ENV, str(keys / "other.pub"))  # the environment wins
    assert read_bundle(o).trusted
    with pytest.raises(BundleIntegrityError):
        read_bundle(s)
    monkeypatch.delenv(trust.TRUSTED_KEY_ENV)
    cfg.write_text("trusted_key = [1, 2\n")
    with pytest.raises(BundleError, match="not valid TOML"):
        read_bundle(s)
    monkeypatch.setenv(trust.CONFIG_ENV, str(tmp_path / "missing.toml"))
    with pytest.raises(BundleError, match="does not exist"):
        read_bundle(s)


def test_configured_signing_key(tmp_path, keys, monkeypatch):
    assert trust.signing_key() is None
    monkeypatch.setenv(trust.SIGNING_KEY_ENV, str(keys / "k.key"))
    assert trust.signing_key() == str(keys / "k.key")
    monkeypatch.setenv(trust.SIGNING_KEY_ENV, " ")
    with pytest.raises(BundleError, match="set but empty"):
        trust.signing_key()


def test_bundle_never_overwrites_its_model(tmp_path):
    m = tmp_path / "m.tflite"
    m.write_bytes(model())
    for out in (m, tmp_path / "." / "m.tflite"):
        with pytest.raises(EdgerunError, match="same file as"):
            write_bundle(m, out)
    link = tmp_path / "link.bundle"
    link.symlink_to(m)
    with pytest.raises(EdgerunError, match="same file as"):
        write_bundle(m, link)
    hard = tmp_path / "hard.bundle"
    os.link(m, hard)
    with pytest.raises(EdgerunError, match="same file as"):
        write_bundle(m, hard)
    # a .tflite misnamed .bundle, packaged to its default output name (itself)
    mis = tmp_path / "mis.bundle"
    mis.write_bytes(model())
    with pytest.raises(EdgerunError, match="same file as"):
        write_bundle(mis, mis)
    assert m.read_bytes() == model() and mis.read_bytes() == model()
    with pytest.raises(EdgerunError, match="directory"):
        write_bundle(m, tmp_path)
    with pytest.raises(EdgerunError, match="does not exist"):
        write_bundle(m, tmp_path / "nope" / "x.bundle")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_failed_extract_removes_what_it_wrote(tmp_path, keys):
    p = write_bundle(model(), tmp_path / "m.bundle", sign_key=keys / "k.key")
    out = tmp_path / "x"
    out.mkdir()
    (out / "signature.ed25519").symlink_to(tmp_path / "victim")  # the last member fails
    with pytest.raises(BundleError, match="cannot extract"):
        read_bundle(p, extract_to=out)
    assert sorted(os.listdir(out)) == ["signature.ed25519"]  # only what was there before
    assert not (tmp_path / "victim").exists()
    fresh = tmp_path / "fresh" / "dir"
    read_bundle(p, extract_to=fresh)
    assert len(os.listdir(fresh)) == 4


def test_nan_input_to_a_quantized_bundle_is_refused(tmp_path):
    """predict() with float data for an int8 input quantizes it; NaN is refused, not turned into a number."""
    import numpy as np

    p = write_bundle(model(), tmp_path / "m.bundle")
    m = edgerun.load(p, allow_unsigned=True, delegates=[])
    ok = m.predict(np.array([[0.1, -0.2, 0.3, 0.0]], np.float32))
    assert ok["y"].dtype == np.int8
    for bad in (np.nan, np.inf):
        with pytest.raises(EdgerunError, match="NaN or infinite"):
            m.predict(np.array([[0.1, bad, 0.3, 0.0]], np.float32))
