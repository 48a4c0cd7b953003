"""One rule for input paths (docs/verdicts.md): a file or folder named as an input that gives no
bytes (missing, a directory, a FIFO or device) is exit 3 in every command, through the real
console script. ``verify`` included: with nothing read there is no verdict (it was exit 5)."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.cli import cli

REPO = Path(__file__).resolve().parents[2]
EDGERUN = shutil.which("edgerun") or str(Path(sys.executable).with_name("edgerun"))
MODEL = REPO / "models" / "mcu_small.tflite"

COMMANDS = {
    "run": ["run", "{p}"],
    "inspect": ["inspect", "{p}"],
    "check": ["check", "{p}", "--target", "rpi"],
    "verify": ["verify", "{p}"],
    "verify --golden": ["verify", "{p}", "--golden"],
    "package": ["package", "{p}", "-o", "{d}/out.bundle"],
    "flash": ["flash", "{p}", "--port", "{d}/no-such-port"],
    "deploy": ["deploy", "{p}", "--host", "127.0.0.1", "--port", "1"],
    "convert": ["convert", "{p}", "-o", "{d}/out.tflite"],
    "run -i": ["run", "{m}", "-i", "{p}"],
    "package --labels": ["package", "{m}", "-o", "{d}/out.bundle", "--labels", "{p}"],
    "package --sign": ["package", "{m}", "-o", "{d}/out.bundle", "--sign", "{p}"],
    "package --calib": ["package", "{m}", "-o", "{d}/out.bundle", "--calib", "{p}"],
    "verify --key": ["verify", "{b}", "--key", "{p}"],
}

# the readers this rule moved (bundle and flash reads, calibration hashing): a FIFO here too
FIFO_TOO = {"verify", "flash", "deploy", "package --calib", "package --labels"}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("missing")
    shutil.copy(MODEL, d / "m.tflite")
    p = cli("package", str(d / "m.tflite"), "-o", str(d / "m.bundle"))
    assert p.returncode == 0, p.stderr
    os.mkfifo(d / "fifo")
    (d / "folder").mkdir()
    return d


@pytest.mark.parametrize("kind", ["missing", "folder", "fifo"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_unreadable_input_is_exit_3_everywhere(work, command, kind):
    if kind == "folder" and command == "package --calib":
        pytest.skip("a folder is a valid calibration input")
    if kind == "fifo" and command not in FIFO_TOO:
        pytest.skip("FIFOs for the other inputs: tests/cli/test_cli_hostile_inputs.py")
    target = {"missing": work / "nope", "folder": work / "folder", "fifo": work / "fifo"}[kind]
    args = [a.format(p=target, d=work, m=work / "m.tflite", b=work / "m.bundle") for a in COMMANDS[command]]
    before = sorted(os.listdir(work))
    p = cli(*args)
    assert p.returncode == 3, (args, p.returncode, p.stdout[-500:], p.stderr[-1000:])
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(target) in lines[0], p.stderr
    assert sorted(os.listdir(work)) == before  # nothing written


def test_verify_json_reports_the_missing_bundle_as_an_error(work):
    p = cli("verify", str(work / "nope.bundle"), "--json")
    assert p.returncode == 3, p.stderr
    rep = json.loads(p.stdout)
    assert rep["error"] == "InputFileError" and rep["exit_code"] == 3 and "no such file" in rep["message"]


def test_a_bundle_that_was_read_still_gets_a_verdict(work):
    """The rule is about paths with no bytes: an empty file was read, so verify judges it (1),
    and run reports it as a model or input problem (3)."""
    empty = work / "empty.bundle"
    empty.write_bytes(b"")
    try:
        assert cli("verify", str(empty)).returncode == 1
        p = cli("run", str(empty))
        assert p.returncode == 3 and "0 bytes" in p.stderr, p.stderr
        assert cli("verify", str(work / "m.bundle"), "--allow-unsigned").returncode == 0
    finally:
        empty.unlink()
