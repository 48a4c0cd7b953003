"""Running the installed ``edgerun`` console script the way a user does, and judging its errors.

Shared by the CLI tests: one runner (the real script, a clean ``EDGERUN_*`` environment) and one
check for the project's error contract (one ``error: ...`` line on stderr, no traceback).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

#: the console script ``pip install -e .`` put next to this Python
EDGERUN = shutil.which("edgerun") or str(Path(sys.executable).with_name("edgerun"))


def cli(*args, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``edgerun *args`` with no ``EDGERUN_*`` variables inherited from the test's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGERUN_")}
    return subprocess.run([EDGERUN, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env, check=False)


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    """``p`` failed with exactly one ``error: ...`` line on stderr (holding each needle), no traceback."""
    assert p.returncode != 0, (p.returncode, p.stdout[-500:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr[-2000:]
    for n in needles:
        assert n in lines[0], lines[0]
