"""Bundle writing and reading: determinism, manifest contents, signatures, tamper detection."""

import hashlib
import json
import os
import struct

import numpy as np
import pytest

from edgerun.bundle import SIGNATURE, archive, describe, hash_calibration, read_bundle, signing, write_bundle
from edgerun.bundle import manifest as mf
from edgerun.errors import BundleError, BundleIntegrityError, EdgerunError, InputFileError
from edgerun.ir import ModelBuilder
from edgerun.runtime.interpreter import Interpreter

PREPROC = {"size": [6, 5], "scale": 1 / 255, "mean": [0.5, 0.4, 0.3], "std": [0.25], "channel_order": "RGB",
           "layout": "NHWC"}


def relu_model(metadata: dict | None = None, zp: int = -3) -> bytes:
    b = ModelBuilder()
    x = b.input("image", (1, 6, 5, 3), "int8", (0.03, zp))
    y = b.tensor("scores", (1, 6, 5, 3), "int8", (0.03, zp))
    b.op("RELU", [x], [y])
    b.output(y)
    for k, v in (metadata or {}).items():
        b.metadata(k, v)
    return b.to_bytes()


def raw_pack(members) -> bytes:
    """The archive layout written out independently of edgerun.bundle.archive (no checks)."""
    out = archive.MAGIC + struct.pack("<II", 1, len(members))
    for name, data in members:
        n = name.encode()
        out += struct.pack("<H", len(n)) + n + struct.pack("<Q", len(data)) + hashlib.sha256(data).digest() + data
    return out


def raw_unpack(blob: bytes) -> list[tuple[str, bytes]]:
    count = struct.unpack_from("<I", blob, 12)[0]
    pos, out = 16, []
    for _ in range(count):
        (nl,) = struct.unpack_from("<H", blob, pos)
        name = blob[pos + 2:pos + 2 + nl].decode()
        pos += 2 + nl
        (size,) = struct.unpack_from("<Q", blob, pos)
        pos += 8 + 32
        out.append((name, blob[pos:pos + size]))
        pos += size
    assert pos == len(blob)
    return out


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    priv, pub = signing.generate_keypair()
    (d / "k.key").write_bytes(priv)
    (d / "k.pub").write_bytes(pub)
    priv2, pub2 = signing.generate_keypair()
    (d / "other.key").write_bytes(priv2)
    (d / "other.pub").write_bytes(pub2)
    return d


def test_same_inputs_same_bytes(tmp_path, keys):
    model = relu_model()
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(f"class {i}" for i in 3 * 6 * 5 * [0]) + "\n\n")
    a = write_bundle(model, tmp_path / "a.bundle", target="coral", labels=labels, sign_key=keys / "k.key",
                     preprocessing=PREPROC, report={"sqnr_db": np.float32(31.5)}, calib_hash="ab" * 32)
    os.utime(labels, (1, 1))  # timestamps of inputs do not matter
    model_file = tmp_path / "m.tflite"
    model_file.write_bytes(model)
    b = write_bundle(model_file, tmp_path / "b.bundle", target="coral", labels=labels, sign_key=keys / "k.key",
                     preprocessing=PREPROC, report={"sqnr_db": 31.5}, calib_hash="ab" * 32)
    assert a.read_bytes() == b.read_bytes()
    c = write_bundle(model, tmp_path / "c.bundle", target="rpi", labels=labels, sign_key=keys / "k.key",
                     preprocessing=PREPROC, report={"sqnr_db": 31.5}, calib_hash="ab" * 32)
    assert c.read_bytes() != a.read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))


def test_manifest_contents(tmp_path):
    model = relu_model({"edgerun.preprocessing": json.dumps(PREPROC).encode()})
    calib = tmp_path / "calib"
    calib.mkdir()
    for i in range(3):
        np.save(calib / f"{i}.npy", np.full((2, 2), i, np.float32))
    p = write_bundle(model, tmp_path / "m.bundle", target="jetson", labels=["cat", "dog"],
                     report={"per_output": {"scores": {"sqnr_db": float("nan")}}}, calib_hash=hash_calibration(calib))
    b = read_bundle(p, allow_unsigned=True)
    m = b.manifest
    assert m["format"] == "edgerun.bundle" and m["format_version"].startswith("1.")
    assert m["model"]["sha256"] == hashlib.sha256(model).hexdigest() and b.model == model
    it = Interpreter(model_content=model)
    it.allocate_tensors()
    assert m["arena_bytes"] == it.arena_bytes > 0
    assert m["target"] == {"spec": "jetson:jetson-orin-nano", "name": "jetson", "board": "jetson-orin-nano"}
    assert m["delegates"] == ["tensorrt", "xnnpack"]
    (inp,) = m["inputs"]
    assert inp["name"] == "image" and inp["shape"] == [1, 6, 5, 3] and inp["dtype"] == "int8"
    assert inp["layout"] == "NHWC"
    assert inp["preprocessing"]["size"] == [6, 5] and inp["preprocessing"]["std"] == [0.25]  # from metadata
    assert inp["quantization"]["zero_point"] == [-3]
    assert abs(inp["quantization"]["scale"][0] - 0.03) < 1e-7
    assert m["labels"] == ["cat", "dog"]
    assert m["conversion_report"] == {"per_output": {"scores": {"sqnr_db": "nan"}}}
    assert m["calibration_sha256"] == hash_calibration(calib)
    np.save(calib / "1.npy", np.full((2, 2), 7, np.float32))
    assert hash_calibration(calib) != m["calibration_sha256"]
    # golden vectors: the interpreter's outputs for the stored inputs, which match LiteRT's reference kernels
    from edgerun.testing import run_litert

    assert len(b.golden) == 3
    for ins, outs in b.golden:
        assert np.array_equal(outs[0], it.predict(*ins)[0])
        assert np.array_equal(outs[0], run_litert(model, list(ins))[0])
    assert describe(p)["golden_cases"] == 3 and describe(p)["signed"] is False


def test_extract_writes_only_members(tmp_path, keys):
    p = write_bundle(relu_model(), tmp_path / "m.bundle", sign_key=keys / "k.key")
    out = tmp_path / "x"
    read_bundle(p, extract_to=out, allow_unsigned=True)
    assert sorted(os.listdir(out)) == ["golden.bin", "manifest.json", "model.tflite", "signature.ed25519"]
    assert (out / "model.tflite").read_bytes() == relu_model()
    with pytest.raises(BundleError, match="cannot extract"):  # never overwrites
        read_bundle(p, extract_to=out, allow_unsigned=True)
    out2 = tmp_path / "y"
    out2.mkdir()
    (out2 / "model.tflite").symlink_to(tmp_path / "victim")
    with pytest.raises(BundleError):
        read_bundle(p, extract_to=out2, allow_unsigned=True)
    assert not (tmp_path / "victim").exists()


def test_signatures(tmp_path, keys, monkeypatch):
    p = write_bundle(relu_model(), tmp_path / "s.bundle", sign_key=keys / "k.key")
    b = read_bundle(p, trusted_key=keys / "k.pub")
    assert b.signed and b.key_fingerprint == signing.fingerprint(signing.public_key_bytes(keys / "k.pub"))
    with pytest.raises(BundleIntegrityError, match="not by the trusted key"):
        read_bundle(p, trusted_key=keys / "other.pub")
    unsigned = write_bundle(relu_model(), tmp_path / "u.bundle")
    with pytest.raises(BundleIntegrityError, match="not signed"):
        read_bundle(unsigned, trusted_key=keys / "k.pub")
    monkeypatch.setenv("EDGERUN_TRUSTED_KEY", str(keys / "k.pub"))
    with pytest.raises(BundleIntegrityError, match="not signed"):
        read_bundle(unsigned, allow_unsigned=True)
    assert read_bundle(p, allow_unsigned=True).signed
    monkeypatch.delenv("EDGERUN_TRUSTED_KEY")
    # the public key in any accepted spelling
    raw = signing.public_key_bytes(keys / "k.pub")
    for form in (raw, raw.hex(), (keys / "k.pub").read_bytes(), str(keys / "k.pub")):
        assert read_bundle(p, trusted_key=form).signed
    # stripping the signature: no longer signed, refused under a trusted key
    members = raw_unpack(p.read_bytes())
    stripped = raw_pack([m for m in members if m[0] != SIGNATURE])
    assert not read_bundle(stripped, allow_unsigned=True).signed
    with pytest.raises(BundleIntegrityError):
        read_bundle(stripped, trusted_key=keys / "k.pub")
    # a signature by another key grafted on: refused even without a trusted key
    other = write_bundle(relu_model(zp=5), tmp_path / "o.bundle", sign_key=keys / "other.key")
    other_sig = dict(raw_unpack(other.read_bytes()))[SIGNATURE]
    grafted = raw_pack([m for m in members if m[0] != SIGNATURE] + [(SIGNATURE, other_sig)])
    with pytest.raises(BundleIntegrityError, match="bad signature"):
        read_bundle(grafted, allow_unsigned=True)
    # a re-signed manifest with the attacker's own key fails the trusted-key check
    man = dict(members)["manifest.json"]
    seed = signing.private_key_bytes(keys / "other.key")
    forged = raw_pack([m for m in members if m[0] != SIGNATURE] +
                      [(SIGNATURE, signing.public_from_private(seed) + signing.sign(seed, signing.SIGNATURE_CONTEXT + man))])
    assert read_bundle(forged, allow_unsigned=True).signed
    with pytest.raises(BundleIntegrityError):
        read_bundle(forged, trusted_key=keys / "k.pub")


def test_pure_python_ed25519_agrees_with_cryptography():
    # RFC 8032 section 7.1, test 1
    pub = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    sig = bytes.fromhex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555f"
                        "b8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
    assert signing.verify(pub, b"", sig, backend="python")
    rng = np.random.default_rng(0)
    for i in range(12):
        priv, pubpem = signing.generate_keypair()
        seed, pk = signing.private_key_bytes(priv), signing.public_key_bytes(pubpem)
        msg = rng.bytes(int(rng.integers(0, 200)))
        s = signing.sign(seed, msg)
        bad_sig = bytearray(s)
        bad_sig[int(rng.integers(0, 64))] ^= 1 << int(rng.integers(0, 8))
        bad_msg = msg + b"x"
        bad_pk = bytearray(pk)
        bad_pk[int(rng.integers(0, 32))] ^= 1 << int(rng.integers(0, 8))
        for args in ((pk, msg, s), (pk, msg, bytes(bad_sig)), (pk, bad_msg, s), (bytes(bad_pk), msg, s)):
            assert signing.verify(*args, backend="python") == signing.verify(*args, backend="cryptography")
        assert signing.verify(pk, msg, s, backend="python")
        assert not signing.verify(pk, msg, bytes(bad_sig), backend="python")
    # S >= L (a malleated signature) is refused
    L = 2 ** 252 + 27742317777372353535851937790883648493
    s_int = int.from_bytes(sig[32:], "little")
    assert not signing.verify(pub, b"", sig[:32] + (s_int + L).to_bytes(32, "little"), backend="python")


def test_tamper_every_byte(tmp_path, keys):
    """Flipping any single bit of any byte of a signed bundle is refused."""
    p = write_bundle(relu_model(), tmp_path / "t.bundle", sign_key=keys / "k.key", labels=["a"])
    data = p.read_bytes()
    assert read_bundle(data, allow_unsigned=True).signed
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 1 << (i % 8)
        with pytest.raises(BundleError):
            read_bundle(bytes(bad), allow_unsigned=True)


def test_tamper_unsigned_every_byte(tmp_path):
    data = write_bundle(relu_model(), tmp_path / "t.bundle").read_bytes()
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x80 >> (i % 8)
        with pytest.raises(BundleError):
            read_bundle(bytes(bad), allow_unsigned=True)


def test_no_unauthenticated_slack(tmp_path, keys):
    p = write_bundle(relu_model(), tmp_path / "t.bundle", sign_key=keys / "k.key")
    data = p.read_bytes()
    members = raw_unpack(data)
    for extra in (b"\0", b"\0" * 7, b"PK\x05\x06" + b"\0" * 18, data[-16:]):
        with pytest.raises(BundleError, match="trailing|unexpected bytes"):
            read_bundle(data + extra, allow_unsigned=True)
    for cut in (1, 50, len(data) // 2, len(data) - 16):
        with pytest.raises(BundleError):
            read_bundle(data[:cut], allow_unsigned=True)
    # an extra member, anywhere
    for pos in range(len(members) + 1):
        ms = list(members)
        ms.insert(pos, ("notes.txt", b"hello"))
        with pytest.raises(BundleError):
            read_bundle(raw_pack(ms), allow_unsigned=True)
    # duplicate members, reordered members, a missing member
    with pytest.raises(BundleError, match="duplicate"):
        read_bundle(raw_pack(members + [members[1]]), allow_unsigned=True)
    with pytest.raises(BundleError):
        read_bundle(raw_pack([members[0], members[2], members[1], members[3]]), allow_unsigned=True)
    with pytest.raises(BundleError):
        read_bundle(raw_pack([m for m in members if m[0] != "golden.bin"]), allow_unsigned=True)
    # a re-encoded (whitespace) manifest with consistent hashes
    man = json.loads(dict(members)["manifest.json"])
    spaced = json.dumps(man, sort_keys=True, indent=1).encode()
    with pytest.raises(BundleError, match="canonical"):
        read_bundle(raw_pack([("manifest.json", spaced)] + members[1:3]), allow_unsigned=True)


def test_hostile_names_and_sizes(tmp_path):
    data = write_bundle(relu_model(), tmp_path / "t.bundle").read_bytes()
    members = raw_unpack(data)
    for name in ("../evil", "/etc/passwd", "a/b", ".hidden", "UPPER", "x" * 65, "nul\0", "café"):
        with pytest.raises(BundleError):
            read_bundle(raw_pack(members[:1] + [(name, b"x")] + members[1:]), allow_unsigned=True)
    # a member that declares more bytes than exist, and one over the size cap
    head = archive.MAGIC + struct.pack("<II", 1, 1)
    entry = struct.pack("<H", 13) + b"manifest.json" + struct.pack("<Q", 2 ** 63) + b"\0" * 32
    with pytest.raises(BundleError, match="over the|declares"):
        read_bundle(head + entry, allow_unsigned=True)
    with pytest.raises(BundleError, match="over the"):
        read_bundle(data, max_bytes=1000, allow_unsigned=True)
    with pytest.raises(BundleError, match="members"):
        read_bundle(archive.MAGIC + struct.pack("<II", 1, 10 ** 6), allow_unsigned=True)
    with pytest.raises(BundleError, match="magic"):
        read_bundle(b"PK\x03\x04" + data[4:], allow_unsigned=True)
    with pytest.raises(BundleError, match="layout"):
        read_bundle(data[:8] + struct.pack("<I", 2) + data[12:], allow_unsigned=True)
    # a symlink or a directory given as the bundle
    with pytest.raises(InputFileError, match="is a directory, not a bundle"):  # no bytes: exit 3
        read_bundle(tmp_path, allow_unsigned=True)


def _repack_manifest(data: bytes, edit) -> bytes:
    members = raw_unpack(data)
    man = json.loads(dict(members)["manifest.json"])
    edit(man)
    return raw_pack([("manifest.json", mf.dumps(man))] + [m for m in members[1:] if m[0] != SIGNATURE])


def test_manifest_versions_and_fields(tmp_path):
    data = write_bundle(relu_model(), tmp_path / "t.bundle").read_bytes()
    assert read_bundle(_repack_manifest(data, lambda m: m.update(format_version="1.7")), allow_unsigned=True).manifest
    with pytest.raises(BundleError, match="format version 2.0 is not supported"):
        read_bundle(_repack_manifest(data, lambda m: m.update(format_version="2.0")), allow_unsigned=True)
    with pytest.raises(BundleError, match="not an edgerun bundle manifest"):
        read_bundle(_repack_manifest(data, lambda m: m.update(format="other")), allow_unsigned=True)
    bad_edits = [
        lambda m: m.update(extra=1),
        lambda m: m.pop("labels"),
        lambda m: m.update(arena_bytes=-1),
        lambda m: m["inputs"][0].update(shape="1x6"),
        lambda m: m["golden"]["cases"][0]["inputs"][0].update(offset=1),
        lambda m: m["golden"]["cases"][0]["outputs"][0].update(dtype="object"),
        lambda m: m["golden"]["cases"].pop(),
        lambda m: m["members"][0].update(sha256="0" * 64),
        lambda m: m["members"][0].update(name="../golden.bin"),
        lambda m: m["model"].update(size=1),
        lambda m: m["inputs"][0].update(preprocessing={"size": [1], "evil": True}),
        lambda m: m.update(labels=[1, 2]),
    ]
    for edit in bad_edits:
        with pytest.raises(BundleError):
            read_bundle(_repack_manifest(data, edit), allow_unsigned=True)


def test_write_errors(tmp_path):
    with pytest.raises(EdgerunError, match="unknown target"):
        write_bundle(relu_model(), tmp_path / "x.bundle", target="toaster")
    with pytest.raises(EdgerunError):
        write_bundle(b"not a model", tmp_path / "x.bundle")
    with pytest.raises(BundleError, match="preprocessing"):
        write_bundle(relu_model(), tmp_path / "x.bundle", preprocessing={"sizes": [1, 2]})
    with pytest.raises(BundleError, match="calib_hash"):
        write_bundle(relu_model(), tmp_path / "x.bundle", calib_hash="xyz")
    with pytest.raises(BundleError, match="cryptography|Ed25519 private key"):
        write_bundle(relu_model(), tmp_path / "x.bundle", sign_key=b"nope")
    assert not list(tmp_path.iterdir())
