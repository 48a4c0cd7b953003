"""The firmware's C unit tests (make -C firmware test: host build under ASan/UBSan)."""

import shutil
import subprocess

import pytest
from firmware_harness import FIRMWARE


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="no C toolchain")
def test_c_unit_tests():
    r = subprocess.run(["make", "-s", "-C", str(FIRMWARE), "test"], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 failures" in r.stderr


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="no C toolchain")
def test_posix_build_has_no_warnings():
    subprocess.run(["make", "-s", "-C", str(FIRMWARE), "posix"], check=True, capture_output=True, timeout=300)
