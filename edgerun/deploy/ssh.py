"""Deploying bundles to Linux boards (Raspberry Pi, Coral Dev Board, Jetson) over SSH.

Uses the system's OpenSSH client (``ssh`` and ``scp``), so the user's keys, agent,
``~/.ssh/config`` and known hosts apply as they do for any other ssh command. On the board,
in ``DIR`` (default ``edgerun`` in the login user's home)::

    DIR/bundles/NAME-SHA12.bundle   bundles, named by content hash
    DIR/current  -> bundles/...     the active bundle (what an app passes to edgerun.load)
    DIR/previous -> bundles/...     the bundle that was active before; `--rollback` returns to it
    DIR/incoming/*.part             transfers in progress

A deploy runs these steps; each one either completes or leaves ``current`` untouched:

1. check the bundle locally (every hash, the signature) and look at the board;
2. copy it to ``incoming/NAME.NONCE.part`` (a copy cut at any point leaves only a partial
   file there, which the next deploy removes);
3. on the board, recompute the SHA-256 of the copy and compare with the local one, then
   ``mv`` it into ``bundles/`` (a rename within one file system);
4. with ``verify``, run the golden vectors on the board (``edgerun run BUNDLE --verify``) when
   edgerun is installed there;
5. switch: point ``previous`` at the old target, then ``current`` at the new bundle, each by
   creating a temporary symlink and renaming it over the old one (``rename(2)`` is atomic, so
   a reader sees the old link or the new one, never none); then remove bundles that neither
   link names.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from edgerun.errors import DeployError

#: seconds allowed for one short remote command (connect, hash, switch)
COMMAND_TIMEOUT = 60.0
#: seconds allowed for the golden vectors on the board
VERIFY_TIMEOUT = 600.0
_SAFE_DIR = re.compile(r"[A-Za-z0-9._/~+-]+\Z")
_STEPS = 5


@dataclass
class SSHTarget:
    """Where to deploy: ``user@host``, port, key and extra ``-o`` options for ssh and scp."""

    host: str
    port: int | None = None
    identity: str | None = None
    options: list[str] = field(default_factory=list)
    ssh: str = "ssh"
    scp: str = "scp"
    connect_timeout: int = 10
    #: use scp's original protocol (``scp -O``) for boards without an SFTP server (Dropbear)
    legacy_scp: bool = False

    def __post_init__(self):
        if not self.host or self.host.startswith("-") or any(c.isspace() for c in self.host):
            raise DeployError(f"bad host {self.host!r}: give user@board or a host name from ~/.ssh/config")

    def _common(self) -> list[str]:
        out = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(self.connect_timeout)}"]
        if self.identity:
            out += ["-i", str(self.identity), "-o", "IdentitiesOnly=yes"]
        for o in self.options:
            out += ["-o", o]
        return out

    def ssh_argv(self, command: str) -> list[str]:
        argv = [self.ssh, *self._common()]
        if self.port:
            argv += ["-p", str(int(self.port))]
        return argv + ["--", self.host, command]

    def scp_argv(self, local: str, remote: str, bandwidth_kbps: int | None = None) -> list[str]:
        argv = [self.scp, "-q", *(["-O"] if self.legacy_scp else []), *self._common()]
        if self.port:
            argv += ["-P", str(int(self.port))]
        if bandwidth_kbps:
            argv += ["-l", str(int(bandwidth_kbps))]
        return argv + ["--", local, f"{self.host}:{remote}"]

    def run(self, script: str, *, timeout: float = COMMAND_TIMEOUT, what: str = "remote command",
            check: bool = True) -> subprocess.CompletedProcess:
        """Run a POSIX sh script on the board; DeployError on failure (with its stderr)."""
        try:
            p = subprocess.run(self.ssh_argv(f"sh -c {shlex.quote(script)}"), capture_output=True, text=True, check=False,
                               timeout=timeout, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise DeployError(f"{self.ssh!r} not found: install the OpenSSH client (apt install openssh-client)") from None
        except subprocess.TimeoutExpired:
            raise DeployError(f"{what} on {self.host} timed out after {timeout:g} s") from None
        if check and p.returncode != 0:
            msg = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
            if p.returncode == 255:
                raise DeployError(f"cannot reach {self.host} over ssh: {msg}")
            raise DeployError(f"{what} on {self.host} failed (exit {p.returncode}): {msg}")
        return p


def remote_dir_path(d: str) -> str:
    """Validate a remote directory; ``~/x`` and relative paths mean relative to the login home."""
    if not d or not _SAFE_DIR.match(d) or ".." in d.split("/"):
        raise DeployError(f"remote directory {d!r}: use letters, digits and ._/~+- only, without '..'")
    if d == "~":
        return "."
    if d.startswith("~/"):
        d = d[2:] or "."
    elif d.startswith("~"):
        raise DeployError(f"remote directory {d!r}: ~user paths are not supported; give the path")
    return d.rstrip("/") or "/"


# Shell pieces. Everything interpolated is either validated (directory, names) or quoted.
_SHA = r'''
sha() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
  elif command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r "$1" | cut -d' ' -f1
  else python3 -c 'import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
  fi
}
'''

_RELINK = r'''
relink() {  # relink NAME TARGET: atomically point symlink NAME at TARGET
  ln -s "$2" ".$1.tmp.$$" && mv -f ".$1.tmp.$$" "$1"
}
'''


def _kv(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def status(target: SSHTarget, remote_dir: str = "edgerun", *, clean_incoming: bool = False) -> dict:
    """What the board has: current and previous bundle, bundles kept, edgerun command found.

    ``clean_incoming`` also removes partial copies left by interrupted deploys.
    """
    d = remote_dir_path(remote_dir)
    script = f'''set -e
mkdir -p {d}/bundles {d}/incoming
cd {d}
{"rm -f incoming/*.part" if clean_incoming else ""}
echo "dir=$(pwd)"
echo "current=$(readlink current 2>/dev/null || true)"
echo "previous=$(readlink previous 2>/dev/null || true)"
echo "bundles=$(ls bundles 2>/dev/null | tr '\\n' ' ')"
if command -v edgerun >/dev/null 2>&1; then echo "edgerun=edgerun"
elif python3 -c 'import edgerun' >/dev/null 2>&1; then echo "edgerun=python3 -m edgerun"
else echo "edgerun="; fi
'''
    kv = _kv(target.run(script, what="looking at the deploy directory").stdout)
    return {"host": target.host, "dir": kv.get("dir", d), "current": kv.get("current") or None,
            "previous": kv.get("previous") or None, "bundles": kv.get("bundles", "").split(),
            "edgerun": kv.get("edgerun") or None}


def deploy(bundle, target: SSHTarget, *, remote_dir: str = "edgerun", verify: bool = False,
           remote_edgerun: str | None = None, trusted_key=None, transfer_timeout: float | None = None,
           bandwidth_kbps: int | None = None, progress=None) -> dict:
    """Copy a bundle to a board, check it there, optionally verify it, then make it current.

    Args:
        bundle: path of a local ``.bundle``.
        target: the board (:class:`SSHTarget`).
        remote_dir: deploy directory on the board (relative paths start at the login home).
        verify: run the bundle's golden vectors on the board before switching (skipped, and
            reported as such, when edgerun is not installed there).
        remote_edgerun: the command that runs edgerun on the board (default: ``edgerun`` or
            ``python3 -m edgerun``, whichever is found).
        trusted_key: check the bundle's signature against this public key before copying.
        transfer_timeout: seconds the copy may take; a copy still running is killed.
        bandwidth_kbps: limit the copy to this many Kbit/s (``scp -l``).
        progress: ``progress(step, 5)`` callback.

    Returns a report: host, dir, bundle name, sha256, current, previous, verified.
    Raises DeployError; whenever it does, the board's ``current`` link is unchanged.
    """
    from edgerun.bundle import read_bundle

    path = Path(bundle)
    b = read_bundle(path, trusted_key=trusted_key)  # refuse a bad bundle before touching the board
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    if sha != b.sha256:
        raise DeployError(f"{path} changed while it was being read")
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", path.stem).strip("-")[:40] or "model"
    name = f"{stem}-{sha[:12]}.bundle"
    d = remote_dir_path(remote_dir)
    step = _progress(progress)

    before = status(target, d, clean_incoming=True)
    step(1)

    part = f"{d}/incoming/{name}.{secrets.token_hex(4)}.part"
    argv = target.scp_argv(str(path), part, bandwidth_kbps)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=transfer_timeout, check=False,
                           stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise DeployError(f"{target.scp!r} not found: install the OpenSSH client") from None
    except subprocess.TimeoutExpired:
        _cleanup(target, part)
        raise DeployError(f"copy to {target.host} did not finish within {transfer_timeout:g} s and was "
                          f"stopped; {before['current'] or 'no bundle'} stays active") from None
    if p.returncode != 0:
        _cleanup(target, part)
        msg = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise DeployError(f"copy to {target.host} failed (scp exit {p.returncode}): {msg}; "
                          f"{before['current'] or 'no bundle'} stays active")
    step(2)

    pname = shlex.quote(Path(part).name)
    check = f'''{_SHA}
cd {d}
got=$(sha incoming/{pname})
if [ "$got" != "{sha}" ]; then rm -f incoming/{pname}; echo "hash mismatch on the board: $got" >&2; exit 3; fi
mv -f incoming/{pname} bundles/{name}
'''
    if verify:  # check now, switch after the golden vectors; otherwise one round trip does both
        target.run("set -e\n" + check, what="checking the copied bundle's SHA-256")
    step(3)

    verified = None
    verify_report = None
    if verify:
        cmd = remote_edgerun or before["edgerun"]
        if cmd:
            p = target.run(f"cd {d} && {cmd} run bundles/{name} --verify --json", timeout=VERIFY_TIMEOUT,
                           what="running the golden vectors", check=False)
            verify_report = _json_or_none(p.stdout)
            verified = p.returncode == 0
            if not verified:
                _remove_unused(target, d, name)
                detail = (p.stderr.strip().splitlines() or [p.stdout.strip()[-200:]])[-1]
                raise DeployError(f"golden vectors failed on {target.host} (exit {p.returncode}): {detail}; "
                                  f"{before['current'] or 'no bundle'} stays active")
    step(4)

    script = f'''set -e
{_RELINK}
{"cd " + d if verify else check}
old=$(readlink current 2>/dev/null || true)
if [ "$old" != "bundles/{name}" ]; then
  if [ -n "$old" ]; then relink previous "$old"; fi
  relink current bundles/{name}
fi
cur=$(readlink current); prev=$(readlink previous 2>/dev/null || true)
for f in bundles/*; do
  [ -e "$f" ] || continue
  if [ "$f" != "$cur" ] && [ "$f" != "$prev" ]; then rm -f "$f"; fi
done
echo "current=$cur"; echo "previous=$prev"
'''
    kv = _kv(target.run(script, what="checking the copy and switching the current bundle").stdout)
    step(5)
    return {"host": target.host, "dir": before["dir"], "bundle": name, "sha256": sha,
            "current": kv.get("current") or None, "previous": kv.get("previous") or None,
            "verified": verified, "verify": verify_report,
            "verify_skipped": "edgerun is not installed on the board" if verify and verified is None else None}


def rollback(target: SSHTarget, *, remote_dir: str = "edgerun") -> dict:
    """Make ``previous`` current again (and the current one previous). DeployError if none."""
    d = remote_dir_path(remote_dir)
    script = f'''set -e
{_RELINK}
cd {d}
cur=$(readlink current 2>/dev/null || true); prev=$(readlink previous 2>/dev/null || true)
if [ -z "$prev" ] || [ ! -e "$prev" ]; then echo "no previous bundle to roll back to in $(pwd)" >&2; exit 4; fi
relink current "$prev"
if [ -n "$cur" ] && [ -e "$cur" ]; then relink previous "$cur"; fi
echo "current=$prev"; echo "previous=$cur"
'''
    kv = _kv(target.run(script, what="rolling back").stdout)
    return {"host": target.host, "dir": d, "current": kv.get("current") or None,
            "previous": kv.get("previous") or None}


def _progress(cb):
    return (lambda n: cb(n, _STEPS)) if cb else (lambda n: None)


def _cleanup(target: SSHTarget, part: str) -> None:
    try:
        target.run(f"rm -f {part}", what="removing the partial copy", timeout=20)
    except DeployError:
        pass  # the board may be gone; the next deploy removes stale parts


def _remove_unused(target: SSHTarget, d: str, name: str) -> None:
    script = f'''cd {d} && f=bundles/{name}
[ "$(readlink current 2>/dev/null)" = "$f" ] || [ "$(readlink previous 2>/dev/null)" = "$f" ] || rm -f "$f"'''
    try:
        target.run(script, what="removing the unverified bundle", timeout=20, check=False)
    except DeployError:
        pass


def _json_or_none(text: str):
    import json

    try:
        return json.loads(text)
    except ValueError:
        return None
