"""`edgerun deploy --bench`: run `edgerun bench` on a Linux board over SSH, on the bundle that is
current there, and bring back its JSON so the host prints the same table it prints for itself.

The board measures with its own telemetry (its powercap / hwmon rails / thermal zones), so the
energy and thermal figures are the board's.
"""

from __future__ import annotations

import json
import shlex

from edgerun.errors import EdgerunError, UsageError

#: a board benchmark may take minutes (min duration x engines, idle measurement)
BENCH_TIMEOUT = 1800.0

_FIND_EDGERUN = r'''
if command -v edgerun >/dev/null 2>&1; then echo "edgerun"
elif python3 -c 'import edgerun' >/dev/null 2>&1; then echo "python3 -m edgerun"
fi
'''


def bench_on_board(target, *, remote_dir: str = "edgerun", remote_edgerun: str | None = None,
                   args: str | None = None, timeout: float = BENCH_TIMEOUT) -> dict:
    """Run ``edgerun bench current --json [args]`` in the board's deploy directory; its report.

    ``target`` is an :class:`edgerun.deploy.ssh.SSHTarget`; ``args`` extra bench options as one
    string (split like a shell would, each passed quoted).
    """
    from edgerun.deploy import ssh

    try:
        extra = shlex.split(args or "")
    except ValueError as e:
        raise UsageError(f"--bench-args {args!r}: {e}") from None
    for a in extra:
        if a in ("--report", "--json") or a.startswith("--report="):
            raise UsageError(f"--bench-args: {a} is not for the board's bench (the host prints its table)")
    d = ssh.remote_dir_path(remote_dir)
    cmd = remote_edgerun or target.run(_FIND_EDGERUN, what="looking for edgerun on the board").stdout.strip()
    if not cmd:
        raise EdgerunError(f"edgerun is not installed on {target.host}: `deploy --bench` runs "
                           "`edgerun bench` there (pip install 'edgerun[litert]' on the board)")
    line = " ".join([f"cd -- {shlex.quote(d)} &&", cmd, "bench", "current", "--json",
                     *map(shlex.quote, extra)])
    p = target.run(line, timeout=timeout, what="benchmarking on the board", check=False)
    try:
        rep = json.loads(p.stdout)
    except ValueError:
        rep = None
    if p.returncode != 0 or not isinstance(rep, dict) or "engines" not in rep:
        msg = rep.get("message") if isinstance(rep, dict) else None
        msg = msg or (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        msg = " ".join(msg.split())[:300]
        raise EdgerunError(f"benchmark on {target.host} failed (exit {p.returncode}): {msg}")
    rep["host"] = target.host
    return rep
