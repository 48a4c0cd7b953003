"""tools/armlane.sh's own verdicts that need no emulator: usage errors exit 2, a machine that cannot
host the lane gets one SKIP line and exit 0 (the lane itself runs from .ci/run; docs/platforms.md)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

LANE = Path(__file__).resolve().parents[1] / "tools" / "armlane.sh"


def _run(*args, as_nobody=False):
    argv = ["sh", str(LANE), *args]
    if as_nobody and os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("setpriv (util-linux) is needed to drop root for this check")
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", "WORK": "/nonexistent/armlane"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def test_unknown_architecture_is_a_usage_error():
    r = _run("arm64", "sparc")
    assert r.returncode == 2, r
    assert "sparc" in r.stderr and r.stdout == ""


def test_without_root_it_skips_with_the_reason():
    r = _run("arm64", as_nobody=True)
    assert r.returncode == 0, r
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("SKIP armlane: ") and "root" in lines[0], r.stdout
