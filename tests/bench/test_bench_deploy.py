"""`edgerun deploy --bench` against a real sshd on loopback: the board (this machine, through
ssh) benchmarks its current bundle with its own telemetry and the host prints the same table."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgerun.bundle import read_bundle
from tests.support.sshd import (  # noqa: F401 (fixtures)
    deploy_sign_key,
    needs_openssh,
    signed_bundle,
    signed_deploys,
    ssh_cli_args,
    sshd_server,
)
from tests.support.sysfs_fakes import FakeRail, make_powercap, memory_dir

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))
pytestmark = needs_openssh


def deploy(*args):
    return subprocess.run([sys.executable, "-m", "edgerun", "deploy", *map(str, args)], capture_output=True,
                          text=True, timeout=300, env=ENV)


@pytest.mark.slow
def test_deploy_bench_prints_the_boards_figures(sshd, tmp_path):
    board = tmp_path / "board"
    b = signed_bundle(tmp_path, 31)
    with memory_dir() as sysroot, FakeRail(3.3, energy=make_powercap(sysroot, wrap_uj=4_000_000), wrap=4_000_000):
        remote = f"env EDGERUN_SYSFS_ROOT={sysroot} PYTHONPATH={REPO} {sys.executable} -m edgerun"
        p = deploy(b, *ssh_cli_args(sshd, board), "--remote-edgerun", remote, "--bench", "--bench-args",
                   "--engines edgerun,litert -n 10 --min-duration 1.0 --idle 0.3 --no-loadgen", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["current"] == f"bundles/{rep['bundle']}"
    bench = rep["bench"]
    assert set(bench["engines"]) == {"edgerun", "litert"} and bench["host"] == sshd.host
    model = read_bundle(b, allow_unsigned=True).model
    assert bench["rules"]["model_sha256"] == hashlib.sha256(model).hexdigest()
    assert bench["energy"]["source"] == "powercap:intel-rapl:0"  # the board's own telemetry
    assert bench["energy"]["avg_power_w"] == pytest.approx(3.3, rel=0.05)
    e = bench["engines"]["edgerun"]
    assert e["inferences"] >= 10 and e["duration_s"] >= 0.3
    # the text form is the host's bench table
    p = deploy(b, *ssh_cli_args(sshd, board), "--remote-edgerun", f"env PYTHONPATH={REPO} {sys.executable} -m edgerun",
               "--bench", "--bench-args", "--engines edgerun -n 5 --no-loadgen")
    assert p.returncode == 0, p.stderr
    assert "p50 ms" in p.stdout and "edgerun" in p.stdout and "no power source found" not in p.stderr


def test_deploy_bench_that_fails_on_the_board_is_one_line(sshd, tmp_path):
    board = tmp_path / "board"
    p = deploy(signed_bundle(tmp_path, 32), *ssh_cli_args(sshd, board), "--bench", "--remote-edgerun",
               f"env PYTHONPATH={REPO} {sys.executable} -m edgerun", "--bench-args", "--engines nosuch")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "benchmark on" in p.stderr and "unknown engine 'nosuch'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert (board / "current").is_symlink()  # the deploy itself happened; the message says what failed


def test_deploy_bench_args_refuse_report_and_json(sshd, tmp_path):
    p = deploy(signed_bundle(tmp_path, 33), *ssh_cli_args(sshd, tmp_path / "board"), "--bench", "--bench-args",
               "--report x.html")
    assert p.returncode == 2 and "--bench-args" in p.stderr
