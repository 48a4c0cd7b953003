"""Deploying bundles to Linux boards (Raspberry Pi, Coral Dev Board, Jetson) over SSH.

Uses the system's OpenSSH client (``ssh`` and ``scp``), so the user's keys, agent,
``~/.ssh/config`` and known hosts apply as they do for any other ssh command. On the board,
in ``DIR`` (default ``edgerun`` in the login user's home)::

    DIR/bundles/NAME-SHA12.bundle   bundles, named by content hash
    DIR/current  -> bundles/...     the active bundle (what an app passes to edgerun.load)
    DIR/previous -> bundles/...     the bundle that was active before; `--rollback` returns to it
    DIR/incoming/*.part             transfers in progress
    DIR/pending/NONCE               "bundles/NAME": the bundle a running deploy will switch to
    DIR/.lock                       flock(2) target: one deploy (or rollback) at a time

A deploy holds an exclusive lock on ``DIR/.lock`` for its whole run, through one ssh session
that runs ``flock`` (or Python's ``fcntl.flock``) and waits on its stdin: concurrent deploys
serialize, and a deploy whose client dies releases the lock with its connection. It runs these
steps; each one either completes or leaves ``current`` untouched:

1. check the bundle locally (every hash, the signature and the trust policy), take the lock,
   record a pending marker and look at the board;
2. copy it to ``incoming/NAME.NONCE.part`` (a copy cut at any point leaves only a partial
   file there, removed by the failing deploy or, once stale, by a later one);
3. on the board, recompute the SHA-256 of the copy and compare with the local one, then
   ``mv`` it into ``bundles/`` (a rename within one file system);
4. with ``verify``, run the golden vectors on the board (``edgerun run BUNDLE --verify --json``)
   when edgerun is installed there; anything but exit 0 with ``"verified": true`` stops here
   (:class:`VerifyFailed`);
5. switch: point ``previous`` at the old target, then ``current`` at the new bundle, each by
   creating a temporary symlink and renaming it over the old one (``rename(2)`` is atomic, so
   a reader sees the old link or the new one, never none); then remove bundles that neither
   link names and no pending marker or ``.part`` refers to.

Every path in a remote command is shell-quoted and follows ``--``; ``status`` is read-only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import secrets
import selectors
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgerun.errors import DeployError

#: seconds allowed for one short remote command (connect, hash, switch)
COMMAND_TIMEOUT = 60.0
#: seconds allowed for the golden vectors on the board
VERIFY_TIMEOUT = 600.0
_SAFE_DIR = re.compile(r"[A-Za-z0-9._/~+-]+\Z")
_STEPS = 5
#: minutes after which a partial copy or pending marker left by a killed deploy is removed
STALE_MINUTES = 24 * 60


class VerifyFailed(DeployError):
    """The board's check of the bundle's golden vectors failed or could not run; nothing was switched."""


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
    #: during a deploy, run every command over the lock session's connection (OpenSSH
    #: ControlMaster): one handshake per deploy instead of one per step
    multiplex: bool = True

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
            msg = _last_line(p.stderr)
            if p.returncode == 255:
                raise DeployError(f"cannot reach {self.host} over ssh: {msg}")
            raise DeployError(f"{what} on {self.host} failed (exit {p.returncode}): {msg}")
        return p


def remote_dir_path(d: str) -> str:
    """Validate a remote directory; ``~/x`` and relative paths mean relative to the login home.

    The result is safe to pass (shell-quoted) to ``cd --``; a relative path starting with ``-``
    gets a ``./`` prefix so that no remote program (``scp -t`` included) can take it as an option.
    """
    if not d or not _SAFE_DIR.match(d) or ".." in d.split("/"):
        raise DeployError(f"remote directory {d!r}: use letters, digits and ._/~+- only, without '..'")
    if d == "~":
        return "."
    if d.startswith("~/"):
        d = d[2:] or "."
    elif d.startswith("~"):
        raise DeployError(f"remote directory {d!r}: ~user paths are not supported; give the path")
    d = d.rstrip("/") or "/"
    return "./" + d if d.startswith("-") else d


def local_path_arg(path) -> str:
    """A local path for scp's command line: absolute, so that a ``:`` in it never names a host."""
    return os.path.abspath(os.fspath(path))


# Shell pieces. Everything interpolated is either validated (names, numbers) or shell-quoted.
_SHA = r'''
sha() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum -- "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then shasum -a 256 -- "$1" | cut -d' ' -f1
  elif command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r -- "$1" | cut -d' ' -f1
  else python3 -c 'import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
  fi
}
'''

_RELINK = r'''
relink() {  # relink NAME TARGET: atomically point symlink NAME at TARGET
  ln -s -- "$2" ".$1.tmp.$$" && mv -f -- ".$1.tmp.$$" "$1"
}
'''

# Remove bundles that neither link names, keeping any that a pending deploy (a marker in
# pending/, or a copy still arriving in incoming/) is about to switch to.
_GC = r'''
gc() {
  cur=$(readlink current 2>/dev/null || true); prev=$(readlink previous 2>/dev/null || true)
  for f in bundles/*; do
    [ -e "$f" ] || continue
    if [ "$f" = "$cur" ] || [ "$f" = "$prev" ]; then continue; fi
    keep=0
    for m in pending/*; do
      if [ -f "$m" ] && [ "$(cat -- "$m")" = "$f" ]; then keep=1; fi
    done
    for x in "incoming/${f#bundles/}".*.part; do
      if [ -e "$x" ]; then keep=1; fi
    done
    if [ "$keep" = 0 ]; then rm -f -- "$f"; fi
  done
}
'''

_EDGERUN_FOUND = r'''
if command -v edgerun >/dev/null 2>&1; then echo "edgerun=edgerun"
elif python3 -c 'import edgerun' >/dev/null 2>&1; then echo "edgerun=python3 -m edgerun"
else echo "edgerun="; fi
'''

_LINKS = r'''
echo "dir=$(pwd)"
echo "current=$(readlink current 2>/dev/null || true)"
echo "previous=$(readlink previous 2>/dev/null || true)"
echo "bundles=$(ls bundles 2>/dev/null | tr '\n' ' ')"
'''


def _last_line(text: str) -> str:
    """The last line a remote command printed, without control characters (one-line errors)."""
    lines = (text or "").strip().splitlines()
    return "".join(c if c.isprintable() else "?" for c in (lines[-1] if lines else "(no message)"))[:300]


def _kv(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def _report(target: SSHTarget, d: str, kv: dict) -> dict:
    return {"host": target.host, "dir": kv.get("dir") or d, "current": kv.get("current") or None,
            "previous": kv.get("previous") or None, "bundles": kv.get("bundles", "").split(),
            "edgerun": kv.get("edgerun") or None}


def status(target: SSHTarget, remote_dir: str = "edgerun") -> dict:
    """What the board has: current and previous bundle, bundles kept, edgerun command found.

    Strictly read-only: nothing is created, removed or locked on the board. A missing deploy
    directory is reported with ``exists: False``.
    """
    d = remote_dir_path(remote_dir)
    script = f'''d={shlex.quote(d)}
if cd -- "$d" 2>/dev/null; then
echo "exists=1"
{_LINKS}
else echo "exists=0"; fi
{_EDGERUN_FOUND}
'''
    kv = _kv(target.run(script, what="looking at the deploy directory").stdout)
    out = _report(target, d, kv)
    out["exists"] = kv.get("exists") == "1"
    return out


# The lock holder: one ssh session per deploy that takes an exclusive flock(2) on DIR/.lock,
# prints "locked" and keeps it until the deploying process closes the session's stdin (or dies:
# ssh then closes the channel, the remote shell exits and the kernel drops the lock).
_LOCK_PY = ("import fcntl,sys,time\n"
            "end=time.time()+float(sys.argv[1])\n"
            "while True:\n"
            " try:\n"
            "  fcntl.flock(9,fcntl.LOCK_EX|fcntl.LOCK_NB);break\n"
            " except OSError:\n"
            "  if time.time()>end: sys.exit(1)\n"
            "  time.sleep(0.2)\n")


class BoardLock:
    """Exclusive lock on a board's deploy directory, held over ssh for as long as the context."""

    def __init__(self, target: SSHTarget, d: str, *, timeout: float = 300.0, create: bool = True):
        self.target, self.d, self.timeout, self.create = target, d, float(timeout), create
        self.proc: subprocess.Popen | None = None
        self.ctl_dir: str | None = None
        #: the target to use while the lock is held (shares the lock session's connection)
        self.shared = target

    def __enter__(self) -> BoardLock:
        w = max(0, int(self.timeout + 0.999))
        mk = ('mkdir -p -- "$d/bundles" "$d/incoming" "$d/pending"\n' if self.create else "")
        script = f'''set -e
d={shlex.quote(self.d)}
{mk}cd -- "$d" 2>/dev/null || {{ echo "no deploy directory $d on the board" >&2; exit 4; }}
exec 9>>.lock
busy="the deploy directory $(pwd) is locked by another deploy (waited {w} s)"
if command -v flock >/dev/null 2>&1; then
  flock -w {w} 9 || {{ echo "$busy" >&2; exit 5; }}
elif command -v python3 >/dev/null 2>&1; then
  python3 -c {shlex.quote(_LOCK_PY)} {w} || {{ echo "$busy" >&2; exit 5; }}
else echo "the board has neither flock nor python3 to lock the deploy directory" >&2; exit 6; fi
echo locked
cat >/dev/null
'''
        master = self.target
        if self.target.multiplex:  # a private socket dir: only this process may use the connection
            self.ctl_dir = tempfile.mkdtemp(prefix="edgerun-ssh-")
            ctl = os.path.join(self.ctl_dir, "s")
            opts = self.target.options
            master = dataclasses.replace(self.target, options=[*opts, "ControlMaster=yes", f"ControlPath={ctl}",
                                                               "ControlPersist=no"])
            self.shared = dataclasses.replace(self.target, options=[*opts, "ControlMaster=no", f"ControlPath={ctl}"])
        try:
            self.proc = subprocess.Popen(master.ssh_argv(f"sh -c {shlex.quote(script)}"), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError:
            self._cleanup_dir()
            raise DeployError(f"{self.target.ssh!r} not found: install the OpenSSH client") from None
        deadline = time.monotonic() + self.timeout + COMMAND_TIMEOUT
        got = b""
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while b"\n" not in got:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self._stop()
                    self._cleanup_dir()
                    raise DeployError(f"could not lock the deploy directory on {self.target.host} "
                                      f"within {self.timeout + COMMAND_TIMEOUT:g} s")
                chunk = os.read(self.proc.stdout.fileno(), 256)
                if not chunk:
                    break
                got += chunk
        finally:
            sel.close()
        if got.split(b"\n")[0].strip() != b"locked":
            rc = self._stop()
            self._cleanup_dir()
            msg = _last_line(self.proc.stderr.read().decode("utf-8", "replace"))
            if rc == 255:
                raise DeployError(f"cannot reach {self.target.host} over ssh: {msg}")
            raise DeployError(f"locking the deploy directory on {self.target.host} failed: {msg}")
        return self

    def held(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _stop(self) -> int | None:
        p = self.proc
        if p is None:
            return None
        try:
            if p.stdin and not p.stdin.closed:
                p.stdin.close()
        except OSError:
            pass
        try:
            return p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()

    def _cleanup_dir(self) -> None:
        if self.ctl_dir:
            shutil.rmtree(self.ctl_dir, ignore_errors=True)
            self.ctl_dir = None

    def __exit__(self, *exc) -> None:
        self._stop()
        self._cleanup_dir()
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()


def deploy(bundle, target: SSHTarget, *, remote_dir: str = "edgerun", verify: bool = False,
           remote_edgerun: str | None = None, trusted_key=None, allow_unsigned: bool = False,
           transfer_timeout: float | None = None, bandwidth_kbps: int | None = None,
           lock_timeout: float = 300.0, progress=None) -> dict:
    """Copy a bundle to a board, check it there, optionally verify it, then make it current.

    Args:
        bundle: path of a local ``.bundle``.
        target: the board (:class:`SSHTarget`).
        remote_dir: deploy directory on the board (relative paths start at the login home).
        verify: run the bundle's golden vectors on the board before switching. The switch
            happens only when the board's ``edgerun run --verify --json`` exits 0 *and* reports
            ``"verified": true``; a board without edgerun cannot verify, so that is a failed
            check too (VerifyFailed), never a silent switch.
        remote_edgerun: the command that runs edgerun on the board (default: ``edgerun`` or
            ``python3 -m edgerun``, whichever is found).
        trusted_key: check the bundle's signature against this public key before copying
            (default: the configured trusted key, see :mod:`edgerun.bundle.trust`).
        allow_unsigned: accept an unsigned bundle when no trusted key is configured.
        transfer_timeout: seconds the copy may take; a copy still running is killed.
        bandwidth_kbps: limit the copy to this many Kbit/s (``scp -l``).
        lock_timeout: seconds to wait for another deploy to the same directory to finish.
        progress: ``progress(step, 5)`` callback.

    The whole deploy holds an exclusive lock on the board's deploy directory (``flock`` over a
    dedicated ssh session), so concurrent deploys to one board run one after the other.
    Returns a report: host, dir, bundle name, sha256, current, previous, verified.
    Raises DeployError; whenever it does, the board's ``current`` link is unchanged.
    """
    from edgerun.bundle import read_bundle

    path = Path(bundle)
    b = read_bundle(path, trusted_key=trusted_key, allow_unsigned=allow_unsigned)  # before touching the board
    try:
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as e:
        raise DeployError(f"cannot read {str(path)!r}: {e.strerror}") from None
    if sha != b.sha256:
        raise DeployError(f"{path} changed while it was being read")
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", path.stem).strip("-")[:40] or "model"
    name = f"{stem}-{sha[:12]}.bundle"
    d = remote_dir_path(remote_dir)
    qd = shlex.quote(d)
    step = _progress(progress)
    nonce = secrets.token_hex(4)
    part = f"incoming/{name}.{nonce}.part"
    marker = f"pending/{nonce}"

    with BoardLock(target, d, timeout=lock_timeout) as lock:
        target = lock.shared  # every step over the lock session's connection
        prep = f'''set -e
cd -- {qd}
find incoming pending -type f -mmin +{STALE_MINUTES} -exec rm -f -- {{}} + 2>/dev/null || true
printf '%s\\n' bundles/{name} > {marker}
{_LINKS}
{_EDGERUN_FOUND}
'''
        before = _report(target, d, _kv(target.run(prep, what="preparing the deploy directory").stdout))
        keep = before["current"] or "no bundle"
        step(1)
        try:
            remote = part if d == "." else f"{d}/{part}"
            argv = target.scp_argv(local_path_arg(path), remote, bandwidth_kbps)
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=transfer_timeout, check=False,
                                   stdin=subprocess.DEVNULL)
            except FileNotFoundError:
                raise DeployError(f"{target.scp!r} not found: install the OpenSSH client") from None
            except subprocess.TimeoutExpired:
                raise DeployError(f"copy to {target.host} did not finish within {transfer_timeout:g} s and was "
                                  f"stopped; {keep} stays active") from None
            if p.returncode != 0:
                msg = _last_line(p.stderr)
                raise DeployError(f"copy to {target.host} failed (scp exit {p.returncode}): {msg}; "
                                  f"{keep} stays active")
            step(2)

            check = f'''set -e
cd -- {qd}
got=$(sha {part})
if [ "$got" != "{sha}" ]; then rm -f -- {part}; echo "hash mismatch on the board: $got" >&2; exit 3; fi
mv -f -- {part} bundles/{name}
'''
            if verify:  # check now, switch after the golden vectors; otherwise one round trip does both
                target.run(_SHA + check, what="checking the copied bundle's SHA-256")
            step(3)

            verified = None
            verify_report = None
            if verify:
                cmd = remote_edgerun or before["edgerun"]
                if not cmd:
                    raise VerifyFailed(f"cannot verify on {target.host}: edgerun is not installed on the board "
                                       f"(pip install edgerun there, or deploy without --verify); "
                                       f"{keep} stays active")
                if cmd:
                    unsigned = " --allow-unsigned" if not b.signed else ""  # only reached with allow_unsigned
                    p = target.run(f"cd -- {qd} && {cmd} run bundles/{name} --verify --json{unsigned}",
                                   timeout=VERIFY_TIMEOUT, what="running the golden vectors", check=False)
                    verify_report = _json_or_none(p.stdout)
                    said = verify_report.get("verified") if isinstance(verify_report, dict) else None
                    verified = p.returncode == 0 and said is True
                    if not verified:
                        res = verify_report.get("verify") if isinstance(verify_report, dict) else None
                        if isinstance(res, dict) and "max_abs_diff" in res:
                            detail = (f"the board reported verified={str(said).lower()}, max abs diff "
                                      f"{res.get('max_abs_diff')} (tolerance {res.get('tolerance')}) over "
                                      f"{res.get('cases')} cases")
                        elif said is False:
                            detail = "the board reported verified=false"
                        elif p.returncode == 0:
                            detail = "the board's output is not an edgerun verify report"
                        else:
                            detail = _last_line(p.stderr)
                        detail = _last_line(" ".join(detail.split()))
                        raise VerifyFailed(f"golden vectors failed on {target.host} (exit {p.returncode}): "
                                           f"{detail}; {keep} stays active")
            step(4)

            if not lock.held():
                raise DeployError(f"lost the lock on {target.host}'s deploy directory before switching; "
                                  f"{keep} stays active")
            script = f'''set -e
{_RELINK}
{_GC}
{"cd -- " + qd if verify else _SHA + check}
test -f bundles/{name}
old=$(readlink current 2>/dev/null || true)
if [ "$old" != "bundles/{name}" ]; then
  if [ -n "$old" ]; then relink previous "$old"; fi
  relink current bundles/{name}
fi
rm -f -- {marker}
gc
echo "current=$(readlink current)"; echo "previous=$(readlink previous 2>/dev/null || true)"
'''
            kv = _kv(target.run(script, what="checking the copy and switching the current bundle").stdout)
        except BaseException:
            _abandon(target, qd, name, part, marker)
            raise
        step(5)
    return {"host": target.host, "dir": before["dir"], "bundle": name, "sha256": sha,
            "current": kv.get("current") or None, "previous": kv.get("previous") or None,
            "verified": verified, "verify": verify_report, "signed": b.signed, "key": b.key_fingerprint}


def rollback(target: SSHTarget, *, remote_dir: str = "edgerun", lock_timeout: float = 300.0) -> dict:
    """Make ``previous`` current again (and the current one previous). DeployError if none."""
    d = remote_dir_path(remote_dir)
    script = f'''set -e
{_RELINK}
cd -- {shlex.quote(d)}
cur=$(readlink current 2>/dev/null || true); prev=$(readlink previous 2>/dev/null || true)
if [ -z "$prev" ] || [ ! -e "$prev" ]; then echo "no previous bundle to roll back to in $(pwd)" >&2; exit 4; fi
relink current "$prev"
if [ -n "$cur" ] && [ -e "$cur" ]; then relink previous "$cur"; fi
echo "current=$prev"; echo "previous=$cur"
'''
    with BoardLock(target, d, timeout=lock_timeout, create=False) as lock:
        kv = _kv(lock.shared.run(script, what="rolling back").stdout)
    return {"host": target.host, "dir": d, "current": kv.get("current") or None,
            "previous": kv.get("previous") or None}


def _progress(cb):
    return (lambda n: cb(n, _STEPS)) if cb else (lambda n: None)


def _abandon(target: SSHTarget, qd: str, name: str, part: str, marker: str) -> None:
    """After a failed deploy: remove our partial copy and marker, and the new bundle unless in use."""
    script = f'''cd -- {qd} || exit 0
rm -f -- {part} {marker}
f=bundles/{name}
[ "$(readlink current 2>/dev/null)" = "$f" ] && exit 0
[ "$(readlink previous 2>/dev/null)" = "$f" ] && exit 0
for m in pending/*; do if [ -f "$m" ] && [ "$(cat -- "$m")" = "$f" ]; then exit 0; fi; done
rm -f -- "$f"
'''
    try:
        target.run(script, what="removing the abandoned copy", timeout=20, check=False)
    except DeployError:
        pass  # the board may be gone; the next deploy removes stale parts


def _json_or_none(text: str):
    import json

    try:
        return json.loads(text)
    except ValueError:
        return None
