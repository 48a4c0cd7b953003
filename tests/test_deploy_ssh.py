"""edgerun deploy against a real OpenSSH server started on loopback for these tests.

The server gets a throwaway host key and user key in a temp dir and runs as the current user
(root in CI). The "board" is this machine: its deploy directory is a temp dir, and edgerun on
the board is this checkout run with this Python.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgerun.bundle import write_bundle
from edgerun.deploy import ssh
from edgerun.errors import DeployError
from edgerun.ir import ModelBuilder

REPO = Path(__file__).resolve().parents[1]
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
pytestmark = pytest.mark.skipif(not (os.path.exists(SSHD) and shutil.which("ssh") and shutil.which("scp")),
                                reason="OpenSSH server/client not installed (tools/install.sh installs them)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    shutil.copy(d / "user_key.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {d}/host_key
AuthorizedKeysFile {d}/authorized_keys
PidFile {d}/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
Subsystem sftp internal-sftp
SetEnv PATH=/usr/local/bin:/usr/bin:/bin
""")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation directory
    log = open(d / "sshd.log", "w")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log, stderr=log)
    user = os.environ.get("USER") or __import__("pwd").getpwuid(os.getuid()).pw_name
    target = ssh.SSHTarget(f"{user}@127.0.0.1", port=port, identity=str(d / "user_key"),
                           options=["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "LogLevel=ERROR"])
    deadline = time.time() + 10
    while True:
        try:
            target.run("true", timeout=5)
            break
        except DeployError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("sshd did not start: " + (d / "sshd.log").read_text()[-500:])
            time.sleep(0.2)
    yield target
    proc.terminate()
    proc.wait(5)
    log.close()


REMOTE_EDGERUN = f"env PYTHONPATH={REPO} {sys.executable} -m edgerun"


def _model(seed: int, pad_bytes: int = 0) -> bytes:
    """A small int8 RELU model; ``pad_bytes`` of unused constant data make the file bigger."""
    b = ModelBuilder(description=f"deploy test {seed}")
    x = b.input("x", (1, 4, 4, 3), "int8", (0.05, seed % 7))
    y = b.tensor("y", (1, 4, 4, 3), "int8", (0.05, seed % 7))
    b.op("RELU", [x], [y])
    b.output(y)
    if pad_bytes:
        b.const("padding", np.random.default_rng(seed).integers(-128, 128, pad_bytes, dtype=np.int8))
    return b.to_bytes()


def _bundle(tmp_path, seed: int, pad_bytes: int = 0) -> Path:
    return write_bundle(_model(seed, pad_bytes), tmp_path / f"m{seed}.bundle", target="rpi")


def _links(board: Path) -> tuple[str | None, str | None]:
    return tuple(os.readlink(board / n) if (board / n).is_symlink() else None for n in ("current", "previous"))


def test_deploy_switch_and_rollback(sshd, tmp_path):
    board = tmp_path / "board"
    a, b = _bundle(tmp_path, 1), _bundle(tmp_path, 2)
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
    c = _bundle(tmp_path, 3)
    r3 = ssh.deploy(c, sshd, remote_dir=str(board))
    assert sorted(os.listdir(board / "bundles")) == sorted([r2["bundle"], r3["bundle"]])
    assert not list((board / "incoming").iterdir())


def test_rollback_without_previous_fails(sshd, tmp_path):
    board = tmp_path / "board"
    ssh.deploy(_bundle(tmp_path, 4), sshd, remote_dir=str(board))
    before = _links(board)
    with pytest.raises(DeployError, match="no previous bundle"):
        ssh.rollback(sshd, remote_dir=str(board))
    assert _links(board) == before


def test_interrupted_copy_keeps_previous(sshd, tmp_path):
    """scp on a slow link (scp -l) is killed mid-copy: the old bundle stays current."""
    board = tmp_path / "board"
    a = _bundle(tmp_path, 5)
    ra = ssh.deploy(a, sshd, remote_dir=str(board))
    big = _bundle(tmp_path, 6, pad_bytes=3 * 1024 * 1024)  # 3 MiB at 2 Mbit/s: ~12 s
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
    a = _bundle(tmp_path, 7)
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
        ssh.deploy(_bundle(tmp_path, 8), target, remote_dir=str(board))
    assert _links(board) == (f"bundles/{ra['bundle']}", None)
    assert (board / "current").read_bytes() == a.read_bytes()
    assert os.listdir(board / "bundles") == [ra["bundle"]]


def test_verify_runs_golden_vectors_on_the_board(sshd, tmp_path):
    board = tmp_path / "board"
    r = ssh.deploy(_bundle(tmp_path, 9), sshd, remote_dir=str(board), verify=True, remote_edgerun=REMOTE_EDGERUN)
    assert r["verified"] is True
    assert r["verify"]["verified"] is True
    assert all(v == 0 for v in r["verify"]["verify"]["max_abs_diff"].values())


def test_failed_verify_keeps_previous(sshd, tmp_path):
    board = tmp_path / "board"
    ra = ssh.deploy(_bundle(tmp_path, 10), sshd, remote_dir=str(board))
    with pytest.raises(DeployError, match="golden vectors failed"):
        # a board whose edgerun cannot run the bundle (here: a command that fails)
        ssh.deploy(_bundle(tmp_path, 11), sshd, remote_dir=str(board), verify=True, remote_edgerun="false")
    assert _links(board) == (f"bundles/{ra['bundle']}", None)
    assert os.listdir(board / "bundles") == [ra["bundle"]]


def test_verify_skipped_when_board_lacks_edgerun(sshd, tmp_path):
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
    r = ssh.deploy(_bundle(tmp_path, 12), bare, remote_dir=str(board), verify=True)
    assert r["verified"] is None and "not installed" in r["verify_skipped"]
    assert (board / "current").is_symlink()


def test_unreachable_host_is_a_deploy_error(tmp_path):
    t = ssh.SSHTarget("nobody@127.0.0.1", port=_free_port(), connect_timeout=3,
                      options=["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"])
    with pytest.raises(DeployError, match="cannot reach"):
        ssh.deploy(_bundle(tmp_path, 13), t, remote_dir=str(tmp_path / "board"))


def test_bad_remote_dir_refused():
    with pytest.raises(DeployError):
        ssh.remote_dir_path("x; rm -rf /")
    with pytest.raises(DeployError):
        ssh.remote_dir_path("../etc")
    assert ssh.remote_dir_path("~/models/") == "models"


def test_cli_deploy_json_and_rollback(sshd, tmp_path):
    board = tmp_path / "board"
    a, b = _bundle(tmp_path, 14), _bundle(tmp_path, 15)
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
    assert p.returncode == 1 and p.stderr.startswith("error:") and len(p.stderr.strip().splitlines()) == 1
    assert (board / "current").read_bytes() == a.read_bytes()
