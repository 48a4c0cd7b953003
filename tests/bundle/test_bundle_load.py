"""edgerun.load() on a bundle: preprocessing, predict() in every input form, labels, verify(), delegates."""

import hashlib
import json
import struct

import numpy as np
import pytest

import edgerun
from edgerun.bundle import archive, load, read_bundle, write_bundle
from edgerun.bundle import manifest as mf
from edgerun.errors import BundleError, InputFileError, InputMismatchError
from edgerun.ir import ModelBuilder
from edgerun.preprocess import preprocess_image, resize, validate_spec
from edgerun.runtime.interpreter import Interpreter
from edgerun.testing import run_litert

H, W = 12, 10
IN_Q = (0.0157, 3)
SPEC = {"scale": 1 / 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "channel_order": "BGR"}
LABELS = ["cat", "dog", "fox", "owl", "elk"]


def classifier(seed: int = 0, metadata: dict | None = None) -> bytes:
    """int8 [1,H,W,3] -> CONV_2D(relu) -> AVERAGE_POOL_2D -> RESHAPE -> FULLY_CONNECTED -> SOFTMAX [1,5]."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder("bundle test classifier")
    x = b.input("image", (1, H, W, 3), "int8", IN_Q)
    wt = rng.integers(-127, 128, (6, 3, 3, 3)).astype(np.int8)
    ws = rng.uniform(0.002, 0.02, 6).astype(np.float32)
    w = b.const("conv_w", wt, "int8", (ws, np.zeros(6, np.int64), 0))
    bs = (np.float32(IN_Q[0]) * ws).astype(np.float32)
    bias = b.const("conv_b", rng.integers(-500, 500, 6).astype(np.int32), "int32", (bs, np.zeros(6, np.int64), 0))
    cq = (0.05, -128)
    c = b.tensor("conv", (1, H // 2, W // 2, 6), "int8", cq)
    b.op("CONV_2D", [x, w, bias], [c], padding=0, stride_w=2, stride_h=2, fused_activation_function=1)
    p = b.tensor("pool", (1, 1, 1, 6), "int8", cq)
    b.op("AVERAGE_POOL_2D", [c], [p], padding=1, stride_w=1, stride_h=1, filter_width=W // 2, filter_height=H // 2)
    f = b.tensor("flat", (1, 6), "int8", cq)
    b.op("RESHAPE", [p, b.const("shape", np.array([1, 6], np.int32))], [f], new_shape=(1, 6))
    fw = rng.integers(-127, 128, (5, 6)).astype(np.int8)
    fws = np.float32(0.01)
    fcw = b.const("fc_w", fw, "int8", (np.array([fws]), np.zeros(1, np.int64), 0))
    fcb = b.const("fc_b", rng.integers(-300, 300, 5).astype(np.int32), "int32",
                  (np.array([np.float32(cq[0]) * fws], np.float32), np.zeros(1, np.int64), 0))
    lg = b.tensor("logits", (1, 5), "int8", (0.1, 0))
    b.op("FULLY_CONNECTED", [f, fcw, fcb], [lg], fused_activation_function=0)
    out = b.tensor("probs", (1, 5), "int8", (1 / 256, -128))
    b.op("SOFTMAX", [lg], [out], beta=1.0)
    b.output(out)
    for k, v in (metadata or {}).items():
        b.metadata(k, v)
    return b.to_bytes()


def manual_preprocess(img_hw3: np.ndarray) -> np.ndarray:
    """SPEC written out by hand for an image already H x W: BGR, scale, mean/std, quantize (half away)."""
    x = img_hw3[:, :, ::-1].astype(np.float32) * np.float32(1 / 255)
    x = (x - np.array(SPEC["mean"], np.float32)) / np.array(SPEC["std"], np.float32)
    q = np.float64(x) / np.float32(IN_Q[0])
    q = np.sign(q) * np.floor(np.abs(q) + 0.5) + IN_Q[1]
    return np.clip(q, -128, 127).astype(np.int8)[None]


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("load")
    model = classifier(metadata={"edgerun.preprocessing": json.dumps(SPEC).encode()})
    (d / "labels.txt").write_text("\n".join(LABELS) + "\n")
    return write_bundle(model, d / "cls.bundle", target="rpi", labels=d / "labels.txt")


def test_predict_forms_agree_and_match_manual_preprocessing(bundle_path, tmp_path):
    from PIL import Image

    m = edgerun.load(bundle_path, delegates=[], allow_unsigned=True)
    rng = np.random.default_rng(5)
    img = rng.integers(0, 256, (H, W, 3)).astype(np.uint8)
    x = manual_preprocess(img)
    want = run_litert(m.bundle.model, [x])[0]
    it = Interpreter(model_content=m.bundle.model)
    it.allocate_tensors()
    assert np.array_equal(it.predict(x)[0], want)

    png = tmp_path / "img.png"
    Image.fromarray(img).save(png)
    forms = [img, Image.fromarray(img), png, str(png), {"image": img}, x, x[0]]
    for form in forms:
        pred = m.predict(form)
        assert list(pred) == ["probs"]
        assert np.array_equal(pred["probs"], want), type(form)
    pred = m.predict(image=img)
    assert np.array_equal(pred["probs"], want)
    # labels: top-k over the dequantized softmax
    scores = (want.astype(np.float32) + 128) / 256
    order = np.argsort(-scores[0], kind="stable")
    assert [lab for lab, _ in pred.top_k(3)] == [LABELS[i] for i in order[:3]]
    assert pred.label == LABELS[order[0]]
    assert np.allclose(pred.scores(), scores)


def test_predict_resizes_like_litert_resize_bilinear(bundle_path):
    """The numpy resize equals LiteRT's RESIZE_BILINEAR (half-pixel centres), up and down."""
    rng = np.random.default_rng(1)
    for src, dst in (((5, 7), (12, 10)), ((31, 17), (12, 10)), ((12, 10), (12, 10)), ((1, 1), (3, 2))):
        img = rng.uniform(0, 255, (*src, 3)).astype(np.float32)
        b = ModelBuilder()
        xi = b.input("x", (1, *src, 3), "float32")
        s = b.const("size", np.array(dst, np.int32))
        y = b.tensor("y", (1, *dst, 3), "float32")
        b.op("RESIZE_BILINEAR", [xi, s], [y], align_corners=False, half_pixel_centers=True)
        b.output(y)
        want = run_litert(b.to_bytes(), [img[None]])[0][0]
        np.testing.assert_allclose(resize(img, *dst), want, rtol=1e-5, atol=1e-4)
    m = load(bundle_path, delegates=[], allow_unsigned=True)
    big = rng.integers(0, 256, (40, 33, 3)).astype(np.uint8)
    x = preprocess_image(big, SPEC, shape=(1, H, W, 3), dtype="int8", scale=IN_Q[0], zero_point=IN_Q[1])
    assert np.array_equal(m.predict(big)["probs"], run_litert(m.bundle.model, [x])[0])


def test_verify_reports_zero_on_the_interpreter(bundle_path):
    m = load(bundle_path, delegates=[], allow_unsigned=True)
    res = m.verify()
    assert res == {"ok": True, "cases": 3, "max_abs_diff": {"probs": 0.0}, "tolerance": {"probs": 0.0},
                   "delegates": ["edgerun"],
                   "paths": {"reference": {"ok": True, "max_abs_diff": {"probs": 0.0}, "tolerance": {"probs": 0.0},
                                           "source": "bit-exact"}}}
    assert m.delegates == [] and repr(m).startswith("BundleModel(")


def _repack(data: bytes, edit_golden) -> bytes:
    """Re-pack a bundle with its golden member changed (manifest hashes fixed, signature dropped)."""
    members = [(n, bytes(b)) for n, b in archive.unpack(data) if n != "signature.ed25519"]
    d = dict(members)
    gold = bytearray(d["golden.bin"])
    edit_golden(gold)
    man = json.loads(d["manifest.json"])
    for e in man["members"]:
        if e["name"] == "golden.bin":
            e["sha256"] = hashlib.sha256(gold).hexdigest()
    out = [("manifest.json", mf.dumps(man))] + [(n, bytes(gold) if n == "golden.bin" else b) for n, b in members[1:]]
    blob = archive.MAGIC + struct.pack("<II", 1, len(out))
    for n, b in out:
        blob += struct.pack("<H", len(n)) + n.encode() + struct.pack("<Q", len(b)) + hashlib.sha256(b).digest() + b
    return blob


def test_verify_detects_a_different_result(bundle_path):
    data = bundle_path.read_bytes()
    man = read_bundle(data, allow_unsigned=True).manifest
    out_entry = man["golden"]["cases"][1]["outputs"][0]

    def bump(gold):
        v = np.frombuffer(bytes(gold[out_entry["offset"]:out_entry["offset"] + 1]), np.int8)[0]
        gold[out_entry["offset"]] = np.int8(v - 3 if v > -100 else v + 3).view(np.uint8)

    m = load(_repack(data, bump), delegates=[], allow_unsigned=True)
    res = m.verify()
    assert res["ok"] is False and res["max_abs_diff"] == {"probs": 3.0}
    assert m.verify(tolerance=3)["ok"] is True


def test_delegates_from_target_with_fallback(bundle_path):
    m = load(bundle_path, allow_unsigned=True)  # target rpi: xnnpack first, edgerun's kernels for the rest
    assert read_bundle(bundle_path, allow_unsigned=True).manifest["delegates"] == ["xnnpack"]
    assert m.delegates in ([], ["xnnpack"])
    if not m.delegates:
        assert "xnnpack" in m.skipped
    res = m.verify()
    assert res["ok"], res
    m2 = load(bundle_path, delegates=["no-such-delegate"], allow_unsigned=True)
    assert m2.delegates == [] and "no-such-delegate" in m2.skipped
    assert m2.verify()["ok"]


def test_golden_inputs_from_images(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(3)
    imgs = [rng.integers(0, 256, (20, 16, 3)).astype(np.uint8) for _ in range(2)]
    paths = []
    for i, img in enumerate(imgs):
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(img).save(paths[-1])
    p = write_bundle(classifier(1), tmp_path / "g.bundle", preprocessing=SPEC, golden_inputs=paths)
    m = load(p, delegates=[], allow_unsigned=True)
    assert len(m.bundle.golden) == 2
    for (ins, outs), path in zip(m.bundle.golden, paths):
        assert np.array_equal(m.predict(path)["probs"], outs[0])
        assert np.array_equal(ins[0], preprocess_image(path, SPEC, shape=(1, H, W, 3), dtype="int8",
                                                       scale=IN_Q[0], zero_point=IN_Q[1]))
    assert m.verify()["ok"]
    none = write_bundle(classifier(1), tmp_path / "n.bundle", golden_inputs=[])
    assert read_bundle(none, allow_unsigned=True).manifest["golden"] is None
    assert load(none, allow_unsigned=True).verify()["ok"] is False


def test_float_model_nchw_and_errors(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (1, 3, 4, 4), "float32")
    y = b.tensor("y", (1, 3, 4, 4), "float32")
    b.op("RELU", [x], [y])
    b.output(y)
    spec = {"layout": "NCHW", "mean": [127.5], "std": [127.5]}
    p = write_bundle(b.to_bytes(), tmp_path / "f.bundle", preprocessing=spec)
    m = load(p, allow_unsigned=True)
    assert m.inputs[0]["layout"] == "NCHW"
    img = np.arange(48, dtype=np.uint8).reshape(4, 4, 3) * 5
    want = np.maximum((img.transpose(2, 0, 1)[None].astype(np.float32) - 127.5) / 127.5, 0)
    np.testing.assert_allclose(m.predict(img)["y"], want, rtol=1e-6)
    with pytest.raises(InputMismatchError):
        m.predict({"nope": img})
    with pytest.raises(InputMismatchError):
        m.predict(np.zeros((2, 2, 2, 2, 2)))
    with pytest.raises(InputMismatchError):
        validate_spec({"channel_order": "CMYK"})
    with pytest.raises(InputFileError):  # no bytes read: an input problem (exit 3), not a bundle error
        load(tmp_path / "missing.bundle", allow_unsigned=True)


def test_device_side_needs_no_heavy_packages(tmp_path):
    """load + predict + verify of a signed bundle with cryptography, Pillow, typer, LiteRT and ONNX
    unimportable: the pure-Python Ed25519 verifier checks the signature."""
    import subprocess
    import sys
    from pathlib import Path

    from edgerun.bundle import signing

    priv, pub = signing.generate_keypair()
    (tmp_path / "k.key").write_bytes(priv)
    (tmp_path / "k.pub").write_bytes(pub)
    p = write_bundle(classifier(2), tmp_path / "s.bundle", target="rpi", labels=LABELS, sign_key=tmp_path / "k.key",
                     preprocessing=SPEC)
    np.save(tmp_path / "img.npy", np.random.default_rng(0).integers(0, 256, (H, W, 3)).astype(np.uint8))
    bad = bytearray(p.read_bytes())
    bad[-5] ^= 1
    (tmp_path / "bad.bundle").write_bytes(bytes(bad))
    script = f"""
import sys
BLOCK = ("cryptography", "PIL", "typer", "rich", "ai_edge_litert", "tflite_runtime", "onnx", "onnxruntime")
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Blocker())
import edgerun
from edgerun.errors import BundleError
m = edgerun.load({str(p)!r}, trusted_key={str(tmp_path / 'k.pub')!r})
assert m.bundle.signed and m.delegates == [], (m.delegates, m.skipped)
pred = m.predict({str(tmp_path / 'img.npy')!r})
assert len(pred.top_k(2)) == 2
assert m.verify()["ok"]
try:
    edgerun.load({str(tmp_path / 'bad.bundle')!r}, allow_unsigned=True)
except BundleError as e:
    print("refused:", e)
else:
    raise SystemExit("tampered bundle accepted")
loaded = sorted(k for k in sys.modules if k.split(".")[0] in BLOCK)
assert not loaded, loaded
print("ok")
"""
    repo = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=repo, timeout=120,
                       check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "refused:" in r.stdout and r.stdout.strip().endswith("ok")


def test_signing_without_cryptography_says_what_to_install(tmp_path, monkeypatch):
    import sys

    from edgerun.bundle import signing

    priv, _ = signing.generate_keypair()
    (tmp_path / "k.key").write_bytes(priv)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.asymmetric", None)
    with pytest.raises(BundleError, match=r"pip install 'edgerun\[sign\]'"):
        write_bundle(classifier(), tmp_path / "x.bundle", sign_key=tmp_path / "k.key")


def test_float_goldens_hold_across_cpu_rounding(tmp_path):
    """Float outputs of the reference path may differ by the last bits between CPUs (numpy's exp
    and BLAS on ARM vs x86): they verify within golden.FLOAT_RTOL of their peak, not more."""
    from edgerun.bundle import golden

    b = ModelBuilder()
    x = b.input("x", (1, 16), "float32")
    y = b.tensor("y", (1, 16), "float32")
    b.op("SOFTMAX", [x], [y], beta=1.0)
    b.output(y)
    data = write_bundle(b.to_bytes(), tmp_path / "s.bundle").read_bytes()
    man = read_bundle(data, allow_unsigned=True).manifest
    entry = man["golden"]["cases"][0]["outputs"][0]

    def nudge(rel):
        def edit(gold):
            v = np.frombuffer(bytes(gold[entry["offset"]:entry["offset"] + entry["size"]]), "<f4").copy()
            v[np.argmax(v)] *= np.float32(1 + rel)
            gold[entry["offset"]:entry["offset"] + entry["size"]] = v.astype("<f4").tobytes()
        return edit

    res = load(data, delegates=[], allow_unsigned=True).verify()
    assert res["ok"] and res["max_abs_diff"] == {"y": 0.0} and 0 < res["tolerance"]["y"] < 1e-5
    near = load(_repack(data, nudge(3e-7)), delegates=[], allow_unsigned=True).verify()  # a few ulp
    assert near["ok"] and 0 < near["max_abs_diff"]["y"] <= near["tolerance"]["y"]
    far = load(_repack(data, nudge(golden.FLOAT_RTOL * 4)), delegates=[], allow_unsigned=True).verify()
    assert far["ok"] is False and far["max_abs_diff"]["y"] > far["tolerance"]["y"]
