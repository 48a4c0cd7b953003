"""The firmware's C unit tests (make -C firmware test: host build under ASan/UBSan)."""

import shutil

import pytest

from tests.support.firmware_harness import make


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="no C toolchain")
@pytest.mark.slow
def test_c_unit_tests():
    r = make("test")  # builds and runs firmware/build/test/test_core; raises with the output on failure
    assert "0 failures" in r.stderr, r.stderr


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="no C toolchain")
@pytest.mark.slow
def test_posix_build_has_no_warnings():
    make("posix")  # -Werror: any warning fails the build
