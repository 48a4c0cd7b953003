"""The edgerun command: real subprocesses, exit codes, one-line errors, --json."""

import json
import subprocess
import sys

import numpy as np
import pytest

from edgerun.ir import ModelBuilder


def edgerun(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "edgerun", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


@pytest.fixture
def model(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (1, 10), "int8", (0.1, 0))
    y = b.tensor("scores", (1, 10), "int8", (0.1, 0))
    b.op("RELU", [x], [y])
    b.output(y)
    p = tmp_path / "m.tflite"
    p.write_bytes(b.to_bytes())
    return p


def test_inspect_json(model):
    r = edgerun("inspect", model, "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["op_histogram"] == {"RELU": 1}
    assert info["inputs"][0]["quantization"] == {"scale": pytest.approx(0.1), "zero_point": 0}
    assert info["arena_bytes"] == 32  # two 10-byte tensors, 16-byte aligned


def test_run_prints_top_k_and_compares_with_litert(model, tmp_path):
    x = np.linspace(-0.5, 0.4, 10, dtype=np.float32).reshape(1, 10)  # float in, quantized for the model
    np.save(tmp_path / "x.npy", x)
    r = edgerun("run", model, "-i", tmp_path / "x.npy", "--compare", "litert", "--profile", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["outputs"][0]["top_k"][0]["index"] == 9
    assert rep["compare_litert"][0]["max_abs_diff"] == 0
    assert rep["profile"][0]["op"] == "RELU"
    text = edgerun("run", model, "-i", tmp_path / "x.npy")
    assert "class" in text.stdout and text.returncode == 0


def test_bench_reports_ratios(model):
    r = edgerun("bench", model, "-n", "5", "--warmup", "1", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert set(rep["engines"]) == {"edgerun", "litert", "litert-xnnpack"}
    assert rep["ratios"]["edgerun/litert"] > 0


@pytest.mark.parametrize("args, message", [
    (["inspect", "missing.tflite"], "no such file"),
    (["run", "bad.tflite"], "not a TFLite model"),
    (["run", "model", "-i", "x.txt"], "unsupported input file type"),
])
def test_user_errors_are_one_line_without_traceback(tmp_path, model, args, message):
    (tmp_path / "bad.tflite").write_bytes(b"garbage" * 10)
    (tmp_path / "x.txt").write_text("1 2 3")
    args = [str(model) if a == "model" else a for a in args]
    r = edgerun(*args, cwd=tmp_path)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    rj = edgerun(*args, "--json", cwd=tmp_path)
    assert rj.returncode != 0 and json.loads(rj.stdout)["message"]


@pytest.mark.parametrize("args", [["inspect"], ["inspect", "--bogus", "x"], ["nosuchcommand"]])
def test_usage_errors_exit_2_without_traceback(args):
    r = edgerun(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "Error" in r.stderr


def test_version():
    from edgerun import __version__

    r = edgerun("--version")
    assert r.returncode == 0 and r.stdout.strip() == __version__
