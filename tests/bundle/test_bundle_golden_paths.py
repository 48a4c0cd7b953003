"""Goldens per kernel path: the reference outputs bit-exact, each delegated path within the
tolerance measured at package time (edgerun.bundle.golden); old bundles still verify."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from edgerun import bundle as B
from edgerun.bundle import archive, golden, signing
from edgerun.bundle import manifest as mf
from edgerun.errors import BundleError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    from edgerun.convert import convert

    d = tmp_path_factory.mktemp("gp")
    convert(REPO / "models/digits_cnn.onnx", d / "m.tflite", calib=str(REPO / "models/calib_digits.npz"))
    priv, _ = signing.generate_keypair()
    return d, priv


def _images(n=4):
    """Real digit images (through the bundle's preprocessing), as a user packages them."""
    return [str(p) for p in sorted((REPO / "models/digits_samples").glob("*.png"))[:n]]


def repack(data: bytes, edit, priv) -> bytes:
    """Re-pack a bundle with its manifest edited (member hashes kept) and signed again."""
    members = [(n, bytes(b)) for n, b in archive.unpack(data) if n != B.SIGNATURE]
    man = json.loads(members[0][1])
    edit(man)
    man_bytes = mf.dumps(man)
    seed = signing.private_key_bytes(priv)
    sig = signing.public_from_private(seed) + signing.sign(seed, signing.SIGNATURE_CONTEXT + man_bytes)
    return archive.pack([(B.MANIFEST, man_bytes)] + members[1:] + [(B.SIGNATURE, sig)])


def test_rpi_bundle_records_the_xnnpack_path_with_a_measured_tolerance(digits):
    d, priv = digits
    p = B.write_bundle(d / "m.tflite", d / "rpi.bundle", target="rpi", sign_key=priv, golden_inputs=_images())
    b = B.read_bundle(p)
    paths = b.manifest["golden"]["paths"]
    assert list(paths) == ["xnnpack"]
    x = paths["xnnpack"]
    assert x["member"] == "golden.xnnpack.bin" and "golden.xnnpack.bin" in b.members
    # the measurement, redone here: XNNPACK against edgerun's (reference-exact) kernels
    from edgerun.runtime.interpreter import Interpreter

    ref = Interpreter(model_content=b.model)
    ref.allocate_tensors()
    xnn = Interpreter(model_content=b.model, delegates=["xnnpack"])
    xnn.allocate_tensors()
    worst = 0
    for ins, want in b.golden:
        for it in (ref, xnn):
            it.set_tensor(it.get_input_details()[0]["index"], ins[0])
            it.invoke()
        r = ref.get_tensor(ref.get_output_details()[0]["index"]).astype(int)
        g = xnn.get_tensor(xnn.get_output_details()[0]["index"]).astype(int)
        assert np.array_equal(r, want[0])  # recorded reference outputs are edgerun's kernels'
        worst = max(worst, int(np.max(np.abs(r - g))))
    assert x["measured"] == {"probabilities": float(worst)}
    assert x["tolerance"] == {"probabilities": golden.tolerance_from(worst, "int8")}
    res = B.load(p).verify()
    assert res["ok"] and set(res["paths"]) == {"reference", "xnnpack"}
    assert res["paths"]["reference"]["max_abs_diff"] == {"probabilities": 0.0}
    assert res["paths"]["xnnpack"]["source"] == "measured at package time"


def test_a_delegated_path_beyond_its_tolerance_fails(digits):
    d, priv = digits
    p = B.write_bundle(d / "m.tflite", d / "rpi2.bundle", target="rpi", sign_key=priv, golden_inputs=_images())
    measured = B.read_bundle(p).manifest["golden"]["paths"]["xnnpack"]["measured"]["probabilities"]

    def tighten(man):
        man["golden"]["paths"]["xnnpack"]["tolerance"]["probabilities"] = max(measured - 1.0, 0.0)

    tight = repack(p.read_bytes(), tighten, priv)
    res = B.load(tight).verify()
    assert res["paths"]["reference"]["ok"]  # edgerun's kernels still match bit for bit
    assert res["paths"]["xnnpack"]["ok"] is (measured == 0.0)
    assert res["ok"] is (measured == 0.0)


def test_mcu_bundle_records_the_tflm_path_bit_exact(digits):
    d, priv = digits
    pytest.importorskip("tflite_micro")
    p = B.write_bundle(d / "m.tflite", d / "mcu.bundle", target="mcu", sign_key=priv)
    paths = B.read_bundle(p).manifest["golden"]["paths"]
    assert paths["mcu"]["measured"] == {"probabilities": 0.0} and paths["mcu"]["tolerance"] == {"probabilities": 0.0}


def test_paths_the_host_cannot_run_are_recorded_as_unmeasured(digits):
    d, priv = digits
    p = B.write_bundle(d / "m.tflite", d / "coral.bundle", target="coral", sign_key=priv)
    paths = B.read_bundle(p).manifest["golden"]["paths"]
    from edgerun.delegate import get_delegate

    if get_delegate("edgetpu").is_available().ok:
        pytest.skip("libedgetpu is installed here")
    assert set(paths) == {"edgetpu+xnnpack", "edgetpu", "xnnpack"}
    for name in ("edgetpu+xnnpack", "edgetpu"):
        assert paths[name]["member"] is None and "edgetpu" in paths[name]["reason"]
    assert paths["xnnpack"]["tolerance"] is not None
    # on this host the bundle runs xnnpack: that path was measured and verifies
    res = B.load(p).verify()
    assert res["ok"] and res["paths"]["xnnpack"]["source"] == "measured at package time"


def test_an_old_bundle_without_paths_still_verifies(digits):
    d, priv = digits
    p = B.write_bundle(d / "m.tflite", d / "old.bundle", target="rpi", sign_key=priv)

    def to_1_0(man):
        path_members = [m for m in man["members"] if m["name"].startswith("golden.") and m["name"] != "golden.bin"]
        assert path_members
        man["members"] = [m for m in man["members"] if m not in path_members]
        del man["golden"]["paths"]
        man["format_version"] = "1.0"

    data = p.read_bytes()
    members = [(n, bytes(b)) for n, b in archive.unpack(data)
               if n == B.MANIFEST or n in ("golden.bin", B.MODEL)]
    stripped = archive.pack(members)
    old = repack(stripped, to_1_0, priv)
    m = B.load(old)
    res = m.verify()
    assert res["ok"]
    if m.delegates:
        assert res["paths"]["xnnpack"]["source"] == "legacy"
        assert res["paths"]["xnnpack"]["tolerance"] == {"probabilities": 8.0}


def test_manifest_refuses_malformed_paths(digits):
    d, priv = digits
    p = B.write_bundle(d / "m.tflite", d / "v.bundle", target="rpi", sign_key=priv)
    data = p.read_bytes()

    def bad_offset(man):
        man["golden"]["paths"]["xnnpack"]["outputs"][1][0]["offset"] += 1

    def negative(man):
        man["golden"]["paths"]["xnnpack"]["tolerance"]["probabilities"] = -1

    def extra(man):
        man["golden"]["paths"]["xnnpack"]["extra"] = 1

    for edit in (bad_offset, negative, extra):
        with pytest.raises(BundleError, match="golden"):
            B.read_bundle(repack(data, edit, priv))


def test_tolerance_from_measurement():
    assert golden.tolerance_from(0.0, "int8") == 0.0
    assert golden.tolerance_from(1.0, "int8") == 2.0
    assert golden.tolerance_from(20.0, "int8") == 25.0
    assert golden.tolerance_from(0.5, "float32") == pytest.approx(0.625)


def test_no_golden_cases_is_not_a_pass(digits):
    d, priv = digits
    p = B.write_bundle(d / "m.tflite", d / "none.bundle", sign_key=priv, golden_inputs=[])
    rep = B.verify_bundle(p)
    assert rep["ok"] is False and rep["golden"]["cases"] == 0
    assert hashlib.sha256(p.read_bytes()).hexdigest() == rep["sha256"]
