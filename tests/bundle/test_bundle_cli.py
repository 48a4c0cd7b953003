"""The bundle commands: keygen, package, verify, inspect and run --verify (exit codes, --json)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgerun.cli import main
from edgerun.ir import ModelBuilder

REPO = Path(__file__).resolve().parents[2]


def _model() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 3), "int8", (0.05, 1))
    y = b.tensor("y", (1, 4, 4, 3), "int8", (0.05, 1))
    b.op("RELU", [x], [y])
    b.output(y)
    return b.to_bytes()


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture()
def workdir(tmp_path):
    (tmp_path / "m.tflite").write_bytes(_model())
    (tmp_path / "labels.txt").write_text("a\nb\n")
    return tmp_path


def test_keygen_package_verify_inspect(capsys, workdir):
    code, out, _ = run(capsys, "keygen", "-o", workdir / "k", "--json")
    assert code == 0
    info = json.loads(out)
    assert oct(os.stat(workdir / "k.key").st_mode & 0o777) == "0o600" and (workdir / "k.pub").exists()
    assert len(info["fingerprint"]) == 16
    code, _, err = run(capsys, "keygen", "-o", workdir / "k")
    assert code == 2 and "exists" in err  # a usage problem (exit 1 means "a check failed")

    code, out, _ = run(capsys, "package", workdir / "m.tflite", "-o", workdir / "m.bundle", "--target", "coral",
                       "--labels", workdir / "labels.txt", "--sign", workdir / "k.key", "--json")
    assert code == 0, out
    pkg = json.loads(out)
    assert pkg["signed"] and pkg["key"] == info["fingerprint"] and pkg["target"]["name"] == "coral"
    first = (workdir / "m.bundle").read_bytes()
    code, _, _ = run(capsys, "package", workdir / "m.tflite", "-o", workdir / "m.bundle", "--target", "coral",
                     "--labels", workdir / "labels.txt", "--sign", workdir / "k.key")
    assert code == 0 and (workdir / "m.bundle").read_bytes() == first

    code, out, _ = run(capsys, "verify", workdir / "m.bundle", "--key", workdir / "k.pub", "--golden", "--json")
    assert code == 0
    rep = json.loads(out)
    assert rep["ok"] and rep["trusted"] and rep["golden"]["max_abs_diff"] == {"y": 0.0}
    code, out, _ = run(capsys, "verify", workdir / "m.bundle")
    assert code == 0 and "hashes ok" in out and "signed by" in out

    code, out, _ = run(capsys, "inspect", workdir / "m.bundle", "--json")
    assert code == 0 and json.loads(out)["labels"]["count"] == 2

    # any change to the file: `verify` fails its check, exit 1, one line on stderr (or a JSON error object with --json)
    bad = workdir / "bad.bundle"
    data = bytearray(first)
    data[len(data) // 2] ^= 0x10
    bad.write_bytes(bytes(data))
    code, out, err = run(capsys, "verify", bad)
    assert code == 1 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    code, out, _ = run(capsys, "verify", bad, "--json")
    assert code == 1 and json.loads(out)["error"] == "BundleIntegrityError"
    bad.write_bytes(first + b"\0")
    code, _, err = run(capsys, "verify", bad)
    assert code == 1 and "trailing" in err
    # a key that did not sign it
    run(capsys, "keygen", "-o", workdir / "other")
    code, _, err = run(capsys, "verify", workdir / "m.bundle", "--key", workdir / "other.pub")
    assert code == 1 and "not by the trusted key" in err


def test_package_options(capsys, workdir):
    (workdir / "report.json").write_text(json.dumps({"sqnr_db": 30.1}))
    calib = workdir / "calib"
    calib.mkdir()
    np.save(calib / "a.npy", np.ones((1, 4, 4, 3), np.float32))
    np.save(workdir / "g.npy", np.full((1, 4, 4, 3), 7, np.int8))
    code, out, err = run(capsys, "package", workdir / "m.tflite", "--report", workdir / "report.json",
                         "--calib", calib, "--golden", workdir / "g.npy", "--json")
    assert code == 0, err
    from edgerun.bundle import read_bundle

    b = read_bundle(workdir / "m.bundle", allow_unsigned=True)  # default output name
    assert b.manifest["conversion_report"] == {"sqnr_db": 30.1}
    assert b.manifest["calibration_sha256"] is not None
    assert len(b.golden) == 1 and int(b.golden[0][0][0].max()) == 7
    code, _, err = run(capsys, "package", workdir / "m.tflite", "--target", "toaster")
    assert code == 2 and "unknown target" in err  # usage error


def test_run_bundle_verify_subprocess(workdir):
    """`edgerun run BUNDLE --verify` from the shell (run.py calls edgerun.load().verify())."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("EDGERUN_TRUSTED_KEY", None)
    cmd = [sys.executable, "-m", "edgerun"]
    p = subprocess.run(cmd + ["package", str(workdir / "m.tflite"), "-o", str(workdir / "u.bundle")],
                       capture_output=True, check=False, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    p = subprocess.run(cmd + ["run", str(workdir / "u.bundle"), "--verify"], capture_output=True, check=False, text=True,
                       env=env, timeout=120)
    assert p.returncode == 5 and "not signed" in p.stderr and "Traceback" not in p.stderr  # unsigned: refused
    # a signing key configured in the environment signs by default
    from edgerun.bundle import signing

    priv, _ = signing.generate_keypair()
    (workdir / "cfg.key").write_bytes(priv)
    env["EDGERUN_SIGNING_KEY"] = str(workdir / "cfg.key")
    p = subprocess.run(cmd + ["package", str(workdir / "m.tflite"), "-o", str(workdir / "m.bundle"), "--json"],
                       capture_output=True, check=False, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["signed"] is True
    p = subprocess.run(cmd + ["run", str(workdir / "m.bundle"), "--verify", "--json"], capture_output=True, check=False,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["verified"] is True and rep["verify"]["max_abs_diff"] == {"y": 0.0}
    p = subprocess.run(cmd + ["verify", str(workdir / "nope.bundle")], capture_output=True, check=False, text=True, env=env,
                       timeout=120)
    assert p.returncode == 3 and p.stderr.startswith("error: ") and "nope.bundle: no such file" in p.stderr
