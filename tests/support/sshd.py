"""A real OpenSSH server on loopback for the deploy tests, and the signed bundles they deploy.

Shared by tests/deploy/test_deploy_ssh.py and tests/bench/test_bench_deploy.py: import the
fixtures (``sshd_server``, ``deploy_sign_key`` and the autouse ``signed_deploys``, requested as
``sshd`` and ``sign_key``) into the test module and set ``pytestmark = needs_openssh``. The
server gets a throwaway host key and user key in a temp dir and runs as the current user (root in CI).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from edgerun.bundle import write_bundle
from edgerun.deploy import ssh
from edgerun.errors import DeployError
from edgerun.ir import ModelBuilder

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
needs_openssh = pytest.mark.skipif(not (os.path.exists(SSHD) and shutil.which("ssh") and shutil.which("scp")),
                                   reason="OpenSSH server/client not installed (tools/install.sh installs them)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", name="sshd")
def sshd_server(tmp_path_factory):
    """An SSHTarget for a fresh sshd on a free loopback port, logged in with a key of its own."""
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    shutil.copy(d / "user_key.pub", d / "authorized_keys")
    port = free_port()
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


def relu_model(seed: int, pad_bytes: int = 0) -> bytes:
    """A small int8 RELU model; ``pad_bytes`` of unused constant data make the file bigger."""
    b = ModelBuilder(description=f"deploy test {seed}")
    x = b.input("x", (1, 4, 4, 3), "int8", (0.05, seed % 7))
    y = b.tensor("y", (1, 4, 4, 3), "int8", (0.05, seed % 7))
    b.op("RELU", [x], [y])
    b.output(y)
    if pad_bytes:
        b.const("padding", np.random.default_rng(seed).integers(-128, 128, pad_bytes, dtype=np.int8))
    return b.to_bytes()


@pytest.fixture(scope="module", name="sign_key")
def deploy_sign_key(tmp_path_factory) -> Path:
    from edgerun.bundle import signing

    d = tmp_path_factory.mktemp("deploykey")
    priv, pub = signing.generate_keypair()
    (d / "k.key").write_bytes(priv)
    (d / "k.pub").write_bytes(pub)
    return d / "k.key"


_KEY: list = []


@pytest.fixture(autouse=True)
def signed_deploys(sign_key, monkeypatch):
    """Deployed bundles are signed (unsigned ones are refused by default); no trusted key is configured."""
    monkeypatch.delenv("EDGERUN_TRUSTED_KEY", raising=False)
    _KEY[:] = [sign_key]


def deploy_key() -> Path:
    """The private key the current test's bundles are signed with (``signed_deploys`` sets it)."""
    return _KEY[0]


def signed_bundle(tmp_path, seed: int, pad_bytes: int = 0, name: str | None = None) -> Path:
    return write_bundle(relu_model(seed, pad_bytes), tmp_path / (name or f"m{seed}.bundle"), target="rpi",
                        sign_key=deploy_key())


def ssh_cli_args(target, board) -> list[str]:
    """`edgerun deploy`'s options that reach ``target`` (an SSHTarget) with ``board`` as the deploy dir."""
    out = ["--host", target.host, "--port", str(target.port), "--identity", target.identity, "--dir", str(board)]
    for o in target.options:
        out += ["-o", o]
    return out
