"""edgerun deploy against a real OpenSSH server started on loopback for these tests.

The server gets a throwaway host key and user key in a temp dir and runs as the current user
(root in CI). The "board" is this machine: its deploy directory is a temp dir, and edgerun on
the board is this checkout run with this Python.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgerun.bundle import write_bundle
from edgerun.deploy import ssh
from edgerun.errors import DeployError, EdgerunError
from tests.support.sshd import (  # noqa: F401 (fixtures)
    deploy_key,
    deploy_sign_key,
    free_port,
    needs_openssh,
    relu_model,
    signed_bundle,
    signed_deploys,
    ssh_cli_args,
    sshd_server,
)

REPO = Path(__file__).resolve().parents[2]
pytestmark = needs_openssh


REMOTE_EDGERUN = f"env PYTHONPATH={REPO} {sys.executable} -m edgerun"
#: this checkout's command line, as the console script runs it
EDGERUN = [sys.executable, "-m", "edgerun"]
ENV = dict(os.environ, PYTHONPATH=str(REPO))


def _links(board: Path) -> tuple[str | None, str | None]:
    return tuple(os.readlink(board / n) if (board / n).is_symlink() else None for n in ("current", "previous"))


@pytest.mark.slow
def test_deploy_switch_and_rollback(sshd, tmp_path):
    board = tmp_path / "board"
    a, b = signed_bundle(tmp_path, 1), signed_bundle(tmp_path, 2)
    steps = []
    r1 = ssh.deploy(a, sshd, remote_dir=str(board), progress=lambda d, t: steps.append((d, t)))
    assert steps[-1] == (5, 5)
    assert r1["current"] == f"bundles/{r1['bundle']}" and r1["previous"] is None
    assert (board / "current").read_bytes() == a.read_bytes()

    r2 = ssh.deploy(b, sshd, remote_dir=str(board))
    assert _links(board) == (f"bundles/{r2['bundle']}", f"bundles/{r1['bundle']}")
    assert (board / "current").read_bytes() == b.read_bytes()
    assert (board / "previous").read_bytes() == a.read_bytes()

    # the board's copy is what edgerun.load reads through the link
    import edgerun

    assert edgerun.load(board / "current").bundle.sha256 == r2["sha256"]

    rb = ssh.rollback(sshd, remote_dir=str(board))
    assert rb["current"] == f"bundles/{r1['bundle']}" and rb["previous"] == f"bundles/{r2['bundle']}"
    assert (board / "current").read_bytes() == a.read_bytes()
    # rolling back again returns to b; a third deploy keeps only current + previous
    ssh.rollback(sshd, remote_dir=str(board))
    assert (board / "current").read_bytes() == b.read_bytes()
    c = signed_bundle(tmp_path, 3)
    r3 = ssh.deploy(c, sshd, remote_dir=str(board))
    assert sorted(os.listdir(board / "bundles")) == sorted([r2["bundle"], r3["bundle"]])
    assert not list((board / "incoming").iterdir())


def test_rollback_without_previous_fails(sshd, tmp_path):
    board = tmp_path / "board"
    import dataclasses

    ssh.deploy(signed_bundle(tmp_path, 4), dataclasses.replace(sshd, multiplex=False), remote_dir=str(board))  # no mux
    before = _links(board)
    with pytest.raises(DeployError, match="no previous bundle"):
        ssh.rollback(sshd, remote_dir=str(board))
    assert _links(board) == before


def test_interrupted_copy_keeps_previous(sshd, tmp_path):
    """scp on a slow link (scp -l) is killed mid-copy: the old bundle stays current."""
    board = tmp_path / "board"
    a = signed_bundle(tmp_path, 5)
    ra = ssh.deploy(a, sshd, remote_dir=str(board))
    big = signed_bundle(tmp_path, 6, pad_bytes=3 * 1024 * 1024)  # 3 MiB at 2 Mbit/s: ~12 s
    t0 = time.time()
    with pytest.raises(DeployError, match="did not finish"):
        ssh.deploy(big, sshd, remote_dir=str(board), transfer_timeout=1.5, bandwidth_kbps=2000)
    assert time.time() - t0 < 30  # sanity bound; the error above shows the timeout, not the copy, ended it
    assert _links(board) == (f"bundles/{ra['bundle']}", None)
    assert (board / "current").read_bytes() == a.read_bytes()
    assert os.listdir(board / "bundles") == [ra["bundle"]]


def test_corrupting_link_is_caught_by_the_far_side_hash(sshd, tmp_path):
    """A copy program that delivers a truncated file and reports success: the board's hash check fails."""
    board = tmp_path / "board"
    a = signed_bundle(tmp_path, 7)
    ra = ssh.deploy(a, sshd, remote_dir=str(board))
    bad_scp = tmp_path / "bad_scp"
    bad_scp.write_text(f"""#!/bin/sh
# deliver only the first half of the source file (the argument before the last), exit 0
eval "dst=\\${{$#}}"; eval "src=\\${{$(($# - 1))}}"
head -c $(( $(wc -c < "$src") / 2 )) "$src" > "{tmp_path}/half"
exec {shutil.which('scp')} -q -o BatchMode=yes -i {sshd.identity} -P {sshd.port} \\
  -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "{tmp_path}/half" "$dst"
""")
    bad_scp.chmod(0o755)
    target = ssh.SSHTarget(sshd.host, port=sshd.port, identity=sshd.identity, options=sshd.options, scp=str(bad_scp))
    with pytest.raises(DeployError, match="hash mismatch"):
        ssh.deploy(signed_bundle(tmp_path, 8), target, remote_dir=str(board))
    assert _links(board) == (f"bundles/{ra['bundle']}", None)
    assert (board / "current").read_bytes() == a.read_bytes()
    assert os.listdir(board / "bundles") == [ra["bundle"]]


def test_verify_runs_golden_vectors_on_the_board(sshd, tmp_path):
    board = tmp_path / "board"
    r = ssh.deploy(signed_bundle(tmp_path, 9), sshd, remote_dir=str(board), verify=True, remote_edgerun=REMOTE_EDGERUN)
    assert r["verified"] is True
    assert r["verify"]["verified"] is True
    assert all(v == 0 for v in r["verify"]["verify"]["max_abs_diff"].values())


def test_failed_verify_keeps_previous(sshd, tmp_path):
    board = tmp_path / "board"
    ra = ssh.deploy(signed_bundle(tmp_path, 10), sshd, remote_dir=str(board))
    with pytest.raises(DeployError, match="golden vectors failed"):
        # a board whose edgerun cannot run the bundle (here: a command that fails)
        ssh.deploy(signed_bundle(tmp_path, 11), sshd, remote_dir=str(board), verify=True, remote_edgerun="false")
    assert _links(board) == (f"bundles/{ra['bundle']}", None)
    assert os.listdir(board / "bundles") == [ra["bundle"]]


def test_verify_fails_when_board_lacks_edgerun(sshd, tmp_path):
    """A "bare board": a second key whose forced command clears the environment (PATH=/usr/bin:/bin,
    no PYTHONPATH), so the board's python3 has no edgerun; copies use scp's original protocol."""
    board = tmp_path / "board"
    d = Path(sshd.identity).parent
    bare_key = d / "bare_key"
    if not bare_key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(bare_key)], check=True)
        forced = 'command="env -i PATH=/usr/bin:/bin HOME=$HOME /bin/sh -c \\"$SSH_ORIGINAL_COMMAND\\""'
        with open(d / "authorized_keys", "a") as f:
            f.write(f"{forced} {(d / 'bare_key.pub').read_text()}")
    bare = ssh.SSHTarget(sshd.host, port=sshd.port, identity=str(bare_key), options=sshd.options, legacy_scp=True)
    if subprocess.run(["/usr/bin/python3", "-c", "import edgerun"], capture_output=True, check=False,
                      cwd="/").returncode == 0:
        pytest.skip("the system python3 has edgerun installed")
    assert ssh.status(bare, str(board))["edgerun"] is None
    ra = ssh.deploy(signed_bundle(tmp_path, 10), bare, remote_dir=str(board))
    # --verify asks for a check the board cannot run: that is not a held check, so no switch
    with pytest.raises(ssh.VerifyFailed, match="edgerun is not installed on the board"):
        ssh.deploy(signed_bundle(tmp_path, 12), bare, remote_dir=str(board), verify=True)
    assert _links(board) == (f"bundles/{ra['bundle']}", None)


def test_unreachable_host_is_a_deploy_error(tmp_path):
    t = ssh.SSHTarget("nobody@127.0.0.1", port=free_port(), connect_timeout=3,
                      options=["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"])
    with pytest.raises(DeployError, match="cannot reach"):
        ssh.deploy(signed_bundle(tmp_path, 13), t, remote_dir=str(tmp_path / "board"))


def test_bad_remote_dir_refused():
    with pytest.raises(DeployError):
        ssh.remote_dir_path("x; rm -rf /")
    with pytest.raises(DeployError):
        ssh.remote_dir_path("../etc")
    assert ssh.remote_dir_path("~/models/") == "models"


@pytest.mark.slow
def test_cli_deploy_json_and_rollback(sshd, tmp_path):
    board = tmp_path / "board"
    a, b = signed_bundle(tmp_path, 14), signed_bundle(tmp_path, 15)
    common = ["--host", sshd.host, "--port", str(sshd.port), "--identity", sshd.identity, "--dir", str(board)]
    for o in sshd.options:
        common += ["-o", o]
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "edgerun", "deploy", *args], capture_output=True, text=True, check=False,
                              env=env, timeout=120)

    p = cli(str(a), *common, "--json")
    assert p.returncode == 0, p.stderr
    ra = json.loads(p.stdout)
    p = cli(str(b), *common, "--verify", "--remote-edgerun", REMOTE_EDGERUN, "--json")
    assert p.returncode == 0, p.stderr
    rb = json.loads(p.stdout)
    assert rb["verified"] is True and rb["previous"] == f"bundles/{ra['bundle']}"
    p = cli(*common, "--rollback", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["current"] == f"bundles/{ra['bundle']}"
    p = cli(*common, "--status", "--json")
    assert json.loads(p.stdout)["current"] == f"bundles/{ra['bundle']}"
    # a tampered bundle is refused before anything is copied
    bad = tmp_path / "bad.bundle"
    data = bytearray(b.read_bytes())
    data[-1] ^= 1
    bad.write_bytes(bytes(data))
    p = cli(str(bad), *common)
    assert p.returncode != 0 and p.stderr.startswith("error:") and len(p.stderr.strip().splitlines()) == 1
    assert (board / "current").read_bytes() == a.read_bytes()


# --- hostile and concurrent use (issue 11 item 3, issue 9 item 2) -----------------------------
def _failing_goldens(tmp_path, seed: int) -> Path:
    """A well-formed, signed bundle whose recorded golden outputs are wrong by one step: every hash
    and the signature check out, but the board's `run --verify` must fail."""
    from edgerun.bundle import archive, read_bundle, signing
    from edgerun.bundle import manifest as mf

    good = signed_bundle(tmp_path, seed)
    members = {n: bytes(b) for n, b in archive.unpack(good.read_bytes())}
    man = mf.loads(members["manifest.json"])
    out = man["golden"]["cases"][-1]["outputs"][0]
    blob = bytearray(members[man["golden"]["member"]])
    blob[out["offset"] + out["size"] - 1] ^= 0x80  # 128 steps: beyond any delegate tolerance
    members[man["golden"]["member"]] = bytes(blob)
    for e in man["members"]:
        e["sha256"] = __import__("hashlib").sha256(members[e["name"]]).hexdigest()
    man_bytes = mf.dumps(man)
    seed_bytes = signing.private_key_bytes(deploy_key())
    sig = signing.public_from_private(seed_bytes) + signing.sign(seed_bytes, signing.SIGNATURE_CONTEXT + man_bytes)
    parts = [("manifest.json", man_bytes)] + [(n, members[n]) for n in sorted(members)
                                             if n not in ("manifest.json", "signature.ed25519")]
    bad = tmp_path / f"bad{seed}.bundle"
    bad.write_bytes(archive.pack(parts + [("signature.ed25519", sig)]))
    read_bundle(bad)  # a valid bundle in every respect but its goldens
    return bad


@pytest.mark.slow
def test_failed_on_board_goldens_never_switch(sshd, tmp_path):
    """The real edgerun on the board runs the goldens, they fail: previous stays current, exit 1."""
    board = tmp_path / "board"
    ra = ssh.deploy(signed_bundle(tmp_path, 20), sshd, remote_dir=str(board))
    bad = _failing_goldens(tmp_path, 21)
    with pytest.raises(ssh.VerifyFailed, match="golden vectors failed"):
        ssh.deploy(bad, sshd, remote_dir=str(board), verify=True, remote_edgerun=REMOTE_EDGERUN)
    assert _links(board) == (f"bundles/{ra['bundle']}", None)
    assert os.listdir(board / "bundles") == [ra["bundle"]]
    assert not list((board / "incoming").iterdir()) and not list((board / "pending").iterdir())
    # a board edgerun that exits 0 but reports verified=false (an old CLI that dropped exit codes)
    liar = f"{REMOTE_EDGERUN} run bundles/x --json >/dev/null 2>&1; echo '{{\"verified\": false}}'; true #"
    with pytest.raises(ssh.VerifyFailed, match="verified=false"):
        ssh.deploy(signed_bundle(tmp_path, 22), sshd, remote_dir=str(board), verify=True, remote_edgerun=liar)
    assert _links(board) == (f"bundles/{ra['bundle']}", None)
    # through the console script: one line on stderr, exit 1, nothing switched
    p = subprocess.run([*EDGERUN, "deploy", str(bad), *ssh_cli_args(sshd, board), "--verify",
                        "--remote-edgerun", REMOTE_EDGERUN], capture_output=True, check=False, text=True, timeout=120,
                       env=ENV)
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("error: golden vectors failed") and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr
    assert _links(board) == (f"bundles/{ra['bundle']}", None)


@pytest.mark.slow
def test_concurrent_deploys_serialize(sshd, tmp_path):
    """Four deploys with --verify at once: all succeed one after another, and current, previous and
    the bundles kept are consistent (the old GC deleted a bundle another deploy was switching to)."""
    import threading

    board = tmp_path / "board"
    bundles = [signed_bundle(tmp_path, 30 + i) for i in range(4)]
    results, errors = [], []

    def one(b):
        try:
            results.append(ssh.deploy(b, sshd, remote_dir=str(board), verify=True, remote_edgerun=REMOTE_EDGERUN))
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(b,)) for b in bundles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert len(results) == 4 and all(r["verified"] for r in results)
    cur, prev = _links(board)
    assert (board / cur).is_file() and (board / prev).is_file()
    assert sorted(os.listdir(board / "bundles")) == sorted({cur[len("bundles/"):], prev[len("bundles/"):]})
    # the switches happened one at a time: each report's previous is another deploy's bundle
    names = {r["bundle"] for r in results}
    assert sum(r["previous"] is None for r in results) == 1
    assert all(r["previous"] is None or r["previous"][len("bundles/"):] in names for r in results)
    assert not list((board / "incoming").iterdir()) and not list((board / "pending").iterdir())


@pytest.mark.slow
def test_deploy_waits_for_the_board_lock(sshd, tmp_path):
    """Another deploy holds the directory's flock: this one waits, then gives up with one line."""
    board = tmp_path / "board"
    ra = ssh.deploy(signed_bundle(tmp_path, 40), sshd, remote_dir=str(board))
    holder = subprocess.Popen(["flock", str(board / ".lock"), "sleep", "30"], start_new_session=True)
    try:
        time.sleep(0.5)
        t0 = time.time()
        with pytest.raises(DeployError, match="locked by another deploy"):
            ssh.deploy(signed_bundle(tmp_path, 41), sshd, remote_dir=str(board), lock_timeout=2)
        assert 1.5 < time.time() - t0 < 20
    finally:
        os.killpg(holder.pid, 9)  # flock and its sleep (which inherited the locked descriptor)
        holder.wait()
    assert _links(board) == (f"bundles/{ra['bundle']}", None)
    rb = ssh.deploy(signed_bundle(tmp_path, 41), sshd, remote_dir=str(board), lock_timeout=2)  # lock free again
    assert rb["previous"] == f"bundles/{ra['bundle']}"


@pytest.mark.slow
def test_gc_keeps_bundles_of_pending_deploys(sshd, tmp_path):
    """A bundle another deploy is about to switch to (its pending marker) or still copying (its
    incoming/*.part) survives this deploy's clean-up; that deploy's .part is not removed either."""
    board = tmp_path / "board"
    ssh.deploy(signed_bundle(tmp_path, 50), sshd, remote_dir=str(board))
    ssh.deploy(signed_bundle(tmp_path, 51), sshd, remote_dir=str(board))
    (board / "bundles" / "other-aaaaaaaaaaaa.bundle").write_bytes(b"x")
    (board / "pending" / "0123abcd").write_text("bundles/other-aaaaaaaaaaaa.bundle\n")
    (board / "bundles" / "copying-bbbbbbbbbbbb.bundle").write_bytes(b"y")
    part = board / "incoming" / "copying-bbbbbbbbbbbb.bundle.89abcdef.part"
    part.write_bytes(b"partial")
    r = ssh.deploy(signed_bundle(tmp_path, 52), sshd, remote_dir=str(board))
    kept = set(os.listdir(board / "bundles"))
    assert {"other-aaaaaaaaaaaa.bundle", "copying-bbbbbbbbbbbb.bundle", r["bundle"]} <= kept
    assert len(kept) == 4 and part.exists()
    assert (board / "pending" / "0123abcd").exists()
    # once the marker and part are gone, the next deploy collects them
    (board / "pending" / "0123abcd").unlink()
    part.unlink()
    ssh.deploy(signed_bundle(tmp_path, 53), sshd, remote_dir=str(board))
    assert len(os.listdir(board / "bundles")) == 2


def test_status_is_read_only(sshd, tmp_path):
    missing = tmp_path / "never" / "made"
    st = ssh.status(sshd, str(missing))
    assert st["exists"] is False and st["current"] is None
    assert not (tmp_path / "never").exists()
    board = tmp_path / "board"
    ssh.deploy(signed_bundle(tmp_path, 60), sshd, remote_dir=str(board))
    before = sorted(str(p.relative_to(board)) for p in board.rglob("*"))
    st = ssh.status(sshd, str(board))
    assert st["exists"] and st["current"].startswith("bundles/")
    assert sorted(str(p.relative_to(board)) for p in board.rglob("*")) == before
    p = subprocess.run([*EDGERUN, "deploy", *ssh_cli_args(sshd, missing), "--status", "--json"],
                       capture_output=True, check=False, text=True, timeout=60, env=ENV)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["exists"] is False and not (tmp_path / "never").exists()


def test_dash_dir_and_colon_path(sshd, tmp_path):
    """A --dir starting with '-' is a directory, not an option; a local path with ':' is not a host."""
    assert ssh.remote_dir_path("-rf") == "./-rf"
    name = f"-edgerun-test-{os.getpid()}"
    home = Path(sshd.run("pwd").stdout.strip())
    try:
        a = signed_bundle(tmp_path, 70, name="host:a.bundle")  # scp would take 'host' as a host name
        r = ssh.deploy(a, sshd, remote_dir=name)
        assert (home / name / "current").read_bytes() == a.read_bytes()
        assert ssh.status(sshd, name)["current"] == r["current"]
        assert ssh.rollback is not None
    finally:
        shutil.rmtree(home / name, ignore_errors=True)
    # relative local path with ':' from the CLI
    p = subprocess.run([*EDGERUN, "deploy", "host:a.bundle", *ssh_cli_args(sshd, tmp_path / "b2")],
                       capture_output=True, check=False, text=True, timeout=60, cwd=tmp_path, env=ENV)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "b2" / "current").read_bytes() == (tmp_path / "host:a.bundle").read_bytes()


def test_unsigned_bundle_refused_unless_allowed(sshd, tmp_path):
    board = tmp_path / "board"
    u = write_bundle(relu_model(80), tmp_path / "u.bundle", target="rpi")
    with pytest.raises(EdgerunError, match="not signed"):
        ssh.deploy(u, sshd, remote_dir=str(board))
    assert not board.exists()  # refused before touching the board
    r = ssh.deploy(u, sshd, remote_dir=str(board), allow_unsigned=True, verify=True, remote_edgerun=REMOTE_EDGERUN)
    assert r["verified"] is True and r["signed"] is False
    p = subprocess.run([*EDGERUN, "deploy", str(u), *ssh_cli_args(sshd, board)], capture_output=True, check=False, text=True,
                       timeout=60, env=ENV)
    assert p.returncode != 0 and "not signed" in p.stderr and len(p.stderr.strip().splitlines()) == 1
