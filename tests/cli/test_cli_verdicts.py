"""Every verdict's exit status, success and failure, through the installed `edgerun` console script.

0 = the check held, 1 = the check ran and failed, 2 = usage, other codes per error family
(edgerun.errors.EXIT_CODES). Real models, real bundles, real LiteRT / ONNX Runtime; the failing
golden bundle is one whose recorded reference outputs are off by one step (as a board that
computes differently would see them).
"""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgerun.errors import EXIT_CODES
from edgerun.ir import ModelBuilder
from tests.support.cli import cli, one_line_error

REPO = Path(__file__).resolve().parents[2]
EDGERUN = shutil.which("edgerun") or pytest.fail("the edgerun console script is not installed (pip install -e .)")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """digits int8 model, a signing key, a good and a failing signed bundle, one with no goldens."""
    from edgerun import bundle as B
    from edgerun.bundle import signing
    from edgerun.convert import convert

    d = tmp_path_factory.mktemp("verdicts")
    convert(REPO / "models/digits_cnn.onnx", d / "m.tflite", calib=str(REPO / "models/calib_digits.npz"))
    priv, pub = signing.generate_keypair()
    (d / "k.key").write_bytes(priv)
    (d / "k.pub").write_bytes(pub)
    B.write_bundle(d / "m.tflite", d / "good.bundle", target="rpi", sign_key=priv)
    B.write_bundle(d / "m.tflite", d / "none.bundle", sign_key=priv, golden_inputs=[])
    real_run = B.write.run_case

    def off_by_one(*a):  # the recorded reference outputs differ by one step from what runs
        return [np.where(o < 127, o + 1, o - 1).astype(o.dtype) for o in real_run(*a)]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(B.write, "run_case", off_by_one)  # the packager runs each golden case through it
        B.write_bundle(d / "m.tflite", d / "bad.bundle", sign_key=priv)
    return d


def test_help_lists_the_exit_codes():
    r = cli("--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "Exit codes:" in text and "1 the check ran and failed" in text and "2 usage error" in text


def test_verify_golden_success_and_failure(work):
    r = cli("verify", work / "good.bundle", "--golden", "--key", work / "k.pub")
    assert r.returncode == 0, r.stderr
    assert "on reference: max abs diff 0 (tolerance 0, bit-exact)" in r.stdout
    for args in ([], ["--json"]):
        r = cli("verify", work / "bad.bundle", "--golden", *args)
        assert r.returncode == 1, r.stdout + r.stderr
        if args:
            rep = json.loads(r.stdout)
            assert rep["ok"] is False and rep["golden"]["paths"]["reference"]["max_abs_diff"] == {"probabilities": 1.0}
        else:
            assert "FAILED" in r.stdout
    r = cli("verify", work / "none.bundle", "--golden")  # nothing to verify is not a pass
    assert r.returncode == 1 and "no golden cases" in r.stdout
    assert cli("verify", work / "none.bundle").returncode == 0  # hashes and signature only: they hold


def test_run_verify_success_and_failure(work):
    assert cli("run", work / "good.bundle", "--verify").returncode == 0
    r = cli("run", work / "bad.bundle", "--verify", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["verified"] is False
    assert cli("run", work / "bad.bundle", "--verify").returncode == 1


def test_a_tampered_bundle_fails_verify_but_is_an_error_elsewhere(work, tmp_path):
    data = bytearray((work / "good.bundle").read_bytes())
    data[len(data) // 2] ^= 0x10
    (tmp_path / "t.bundle").write_bytes(bytes(data))
    r = cli("verify", tmp_path / "t.bundle")
    assert r.returncode == 1
    one_line_error(r)
    r = cli("run", tmp_path / "t.bundle")
    assert r.returncode == 5  # a bundle error: run cannot start
    one_line_error(r)


def test_check_fits_and_does_not_fit(work, tmp_path):
    r = cli("check", work / "m.tflite", "--target", "mcu:stm32f746g-disco", "--no-tflm")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: the target can run this model" in r.stdout
    # 600 KiB of weights: DOES NOT FIT the nrf52840's 384 KiB model slot
    b = ModelBuilder()
    x = b.input("x", (1, 1200), "int8", (0.05, 0))
    w = b.const("w", np.ones((500, 1200), np.int8), "int8", (np.full(500, 0.01, np.float32), np.zeros(500), 0))
    y = b.tensor("y", (1, 500), "int8", (0.5, 0))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    (tmp_path / "fc.tflite").write_bytes(b.to_bytes())
    r = cli("check", tmp_path / "fc.tflite", "--target", "mcu:nrf52840", "--no-tflm")
    assert r.returncode == 1 and "DOES NOT FIT" in r.stdout and "verdict: FAILED" in r.stdout
    r = cli("check", tmp_path / "fc.tflite", "--target", "mcu:nrf52840", "--no-tflm", "--json")
    rep = json.loads(r.stdout)
    assert r.returncode == 1 and rep["verdict"]["ok"] is False and not rep["memory"]["model_fits"]
    assert cli("check", tmp_path / "fc.tflite", "--target", "rpi").returncode == 0  # a Pi runs it


def test_check_ops_a_board_cannot_run(tmp_path):
    # a float32 model: the MCU firmware runs int8 only, and a board has no CPU to fall back to
    b = ModelBuilder()
    x = b.input("x", (1, 8), "float32")
    y = b.tensor("y", (1, 8), "float32")
    b.op("RELU", [x], [y])
    b.output(y)
    (tmp_path / "f.tflite").write_bytes(b.to_bytes())
    r = cli("check", tmp_path / "f.tflite", "--target", "mcu", "--json")
    rep = json.loads(r.stdout)
    assert r.returncode == 1 and "cannot run on the board" in rep["verdict"]["failures"][0]
    assert cli("check", tmp_path / "f.tflite", "--target", "rpi").returncode == 0


def test_convert_budget_met_and_not_met(work, tmp_path):
    src = REPO / "models/digits_cnn.onnx"
    calib = REPO / "models/calib_digits.npz"
    r = cli("convert", src, "-o", tmp_path / "a.tflite", "--calib", calib, "--max-drop", "20dB", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ok"] is True
    r = cli("convert", src, "-o", tmp_path / "b.tflite", "--calib", calib, "--max-drop", "200dB", "--json")
    rep = json.loads(r.stdout)
    assert r.returncode == 1 and rep["ok"] is False and rep["budget_met"] is False
    assert "not met" in rep["failures"][0]


def test_convert_float_is_compared_with_onnx_runtime(tmp_path):
    r = cli("convert", REPO / "models/digits_cnn.onnx", "-o", tmp_path / "f.tflite", "--float", "--json")
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["float_check"]["ok"] and rep["float_check"]["inputs"] == "random"
    assert (tmp_path / "f.tflite").exists()


def test_convert_float_verdict_agrees_with_its_figures(tmp_path):
    """ConvTranspose with output_padding (the onnx wheel's pytorch-operator test): whatever the
    lowering does, the exit status must follow the comparison, and a failure writes nothing."""
    import onnx

    src = Path(onnx.__file__).parent / "backend/test/data/pytorch-operator/test_operator_convtranspose/model.onnx"
    if not src.exists():
        pytest.skip("the onnx wheel ships no backend test data here")
    r = cli("convert", src, "-o", tmp_path / "ct.tflite", "--float", "--json")
    rep = json.loads(r.stdout)
    fc = rep["float_check"]
    bad = [n for n in fc["max_abs_err"] if not fc["max_abs_err"][n] <= fc["tolerance"][n]]
    assert r.returncode == (1 if bad else 0)
    assert (tmp_path / "ct.tflite").exists() == (not bad)


def test_float_check_fails_on_a_wrong_result():
    """pipeline.float_check against a reference that is off by 1 % of the output's peak."""
    from edgerun.convert.calibrate import RandomSource
    from edgerun.convert.pipeline import float_check
    from edgerun.runtime.interpreter import Interpreter

    b = ModelBuilder()
    x = b.input("x", (1, 16), "float32")
    y = b.tensor("y", (1, 16), "float32")
    b.op("RELU", [x], [y])
    b.output(y)
    model = b.to_bytes()

    def reference(sample, bias=0.0):
        it = Interpreter(model_content=model)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], sample[0])
        it.invoke()
        out = it.get_tensor(it.get_output_details()[0]["index"])
        return [out + bias * float(np.max(np.abs(out)))]

    src = RandomSource([(1, 16)], 3)
    _, ok = float_check(reference, model, src, [0, 1, 2], ["y"], None)
    assert ok["ok"] and ok["max_abs_err"]["y"] == 0.0
    _, bad = float_check(lambda s: reference(s, 0.01), model, src, [0, 1, 2], ["y"], None)
    assert not bad["ok"] and bad["max_abs_err"]["y"] > bad["tolerance"]["y"]


def test_convert_refuses_a_nan_weight(tmp_path):
    r = cli("convert", REPO / "tests/data/repro/nan_weight.onnx", "-o", tmp_path / "n.tflite",
           "--calib", REPO / "models/calib_digits.npz")
    assert r.returncode == 4 and "non-finite" in r.stderr and "conv1_weights" in r.stderr
    one_line_error(r)
    assert not (tmp_path / "n.tflite").exists()


def test_convert_refuses_nan_calibration_data(tmp_path):
    with np.load(REPO / "models/calib_digits.npz") as z:
        arrays = {k: z[k].astype(np.float32) for k in z.files}
    k = next(iter(arrays))
    arrays[k][3] = np.nan
    np.savez(tmp_path / "c.npz", **arrays)
    r = cli("convert", REPO / "models/digits_cnn.onnx", "-o", tmp_path / "x.tflite", "--calib", tmp_path / "c.npz")
    assert r.returncode == 4 and "sample 3" in r.stderr and "NaN" in r.stderr
    one_line_error(r)


def _zero_add_onnx(path: Path) -> None:
    """x@I + x@(-I): an ADD whose output is exactly zero (its calibrated range is degenerate)."""
    import onnx
    from onnx import TensorProto, helper

    eye = np.eye(8, dtype=np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("MatMul", ["x", "w2"], ["h2"]),
         helper.make_node("Add", ["h", "h2"], ["d"]), helper.make_node("Add", ["d", "x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, [8, 8], eye.ravel()),
         helper.make_tensor("w2", TensorProto.FLOAT, [8, 8], (-eye).ravel())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))


def test_degenerate_range_gets_a_minimum_scale(tmp_path):
    """An all-zero ADD output used to get scale 1e-8, and LiteRT aborted in allocate_tensors."""
    _zero_add_onnx(tmp_path / "z.onnx")
    np.save(tmp_path / "c.npy", np.random.default_rng(0).uniform(-100, 100, (20, 8)).astype(np.float32))
    r = cli("convert", tmp_path / "z.onnx", "-o", tmp_path / "z.tflite", "--calib", tmp_path / "c.npy", "--json")
    assert r.returncode == 0, r.stderr
    assert "loads and runs" in json.loads(r.stdout)["litert_check"]
    from edgerun.schema.reader import read_model

    m = read_model((tmp_path / "z.tflite").read_bytes())
    scales = [float(t.quant.scale[0]) for t in m.main.tensors if t.quant is not None and t.dtype == "int8"]
    assert min(scales) >= 1e-3


def test_a_model_litert_aborts_on_is_one_line_and_not_written(tmp_path):
    """The child-process check turns LiteRT's SIGABRT into a ConversionError."""
    from edgerun.convert.pipeline import validate_in_litert
    from edgerun.errors import ConversionError

    b = ModelBuilder()
    x = b.input("x", (1, 8), "int8", (1.0, 0))
    y = b.tensor("y", (1, 8), "int8", (1e-8, 0))  # ADD output multiplier far above 1: LiteRT aborts
    b.op("ADD", [x, x], [y])
    b.output(y)
    with pytest.raises(ConversionError, match="LiteRT aborts on the converted model"):
        validate_in_litert(b.to_bytes())
    good = ModelBuilder()
    x = good.input("x", (1, 8), "int8", (1.0, 0))
    y = good.tensor("y", (1, 8), "int8", (2.0, 0))
    good.op("ADD", [x, x], [y])
    good.output(y)
    assert "loads and runs" in validate_in_litert(good.to_bytes())


@pytest.mark.parametrize("args, code, message", [
    (["convert", "M", "-o", "o.tflite", "--float", "--input-layout", "HWNC"], 2, "--input-layout 'HWNC'"),
    (["convert", "M", "-o", "o.tflite", "--float", "--target", "toaster"], 2, "unknown target 'toaster'"),
    (["check", "T", "--target", "toaster"], 2, "unknown target 'toaster'"),
    (["check", "T"], 2, "--target is required"),
    (["run", "T", "--verify"], 2, "--verify needs a bundle"),
    (["run", "T", "--compare", "tflite"], 2, "--compare takes 'litert'"),
])
def test_wrong_options_are_refused_with_one_line(work, tmp_path, args, code, message):
    args = [REPO / "models/digits_cnn.onnx" if a == "M" else work / "m.tflite" if a == "T" else a for a in args]
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == code and message in r.stderr, r.stderr
    one_line_error(r)
    assert not (tmp_path / "o.tflite").exists()
    if args[0] == "check":  # the same code with --json, and the code in the JSON error object
        rj = cli(*args, "--json", cwd=tmp_path)
        assert rj.returncode == code and json.loads(rj.stdout)["exit_code"] == code


def test_delegate_asked_for_but_missing_is_refused(work):
    from edgerun.delegate import get_delegate

    if get_delegate("edgetpu").is_available().ok:
        pytest.skip("libedgetpu is installed here")
    r = cli("run", work / "m.tflite", "--delegate", "edgetpu")
    assert r.returncode == 6 and "edgetpu was asked for but is not available" in r.stderr
    one_line_error(r)
    r = cli("run", work / "good.bundle", "--delegate", "edgetpu")
    assert r.returncode == 6


def test_package_refuses_wrong_labels_and_golden_arrays(work, tmp_path):
    (tmp_path / "l.txt").write_text("a\nb\nc\n")
    r = cli("package", work / "m.tflite", "-o", tmp_path / "x.bundle", "--sign", work / "k.key",
           "--labels", tmp_path / "l.txt")
    assert r.returncode == 2 and "3 labels for a classifier with 10 classes" in r.stderr
    one_line_error(r)
    np.save(tmp_path / "g.npy", np.zeros((8, 8), np.float32))
    r = cli("package", work / "m.tflite", "-o", tmp_path / "x.bundle", "--sign", work / "k.key",
           "--golden", tmp_path / "g.npy")
    assert r.returncode == 2 and "takes shape [1, 16, 16, 1]" in r.stderr
    assert not (tmp_path / "x.bundle").exists()
    (tmp_path / "l10.txt").write_text("\n".join(str(i) for i in range(10)) + "\n")
    np.save(tmp_path / "g1.npy", np.zeros((16, 16, 1), np.float32))
    r = cli("package", work / "m.tflite", "-o", tmp_path / "x.bundle", "--sign", work / "k.key",
           "--labels", tmp_path / "l10.txt", "--golden", tmp_path / "g1.npy")
    assert r.returncode == 0, r.stderr


def test_the_current_link_is_a_bundle_to_every_command(work, tmp_path):
    os.symlink(work / "good.bundle", tmp_path / "current")  # as `edgerun deploy` leaves it
    cur = tmp_path / "current"
    r = cli("run", cur, "--verify")
    assert r.returncode == 0, r.stderr
    r = cli("inspect", cur, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["golden_cases"] == 3
    r = cli("check", cur, "--json")  # the bundle's own target
    assert r.returncode == 0 and json.loads(r.stdout)["target"] == "rpi:rpi4"
    assert cli("verify", cur, "--golden").returncode == 0
    r = cli("package", cur, "-o", tmp_path / "re.bundle", "--target", "mcu", "--sign", work / "k.key", "--json")
    assert r.returncode == 0, r.stderr  # repackaged for another target: the bundle's model
    assert json.loads(r.stdout)["target"]["name"] == "mcu"


def test_exit_code_table_is_one_table():
    from edgerun import errors

    assert EXIT_CODES[1].startswith("the check ran and failed") and EXIT_CODES[2].startswith("usage")
    fams = [errors.UsageError, errors.ModelFormatError, errors.ConversionError, errors.BundleError,
            errors.DelegateUnavailableError, errors.LinkError, errors.DeployError, errors.EdgerunError]
    for cls in fams:
        assert cls.exit_code in EXIT_CODES and cls.exit_code != errors.CHECK_FAILED
    assert errors.INTERNAL_ERROR in EXIT_CODES


# -- typer's CliRunner: the same verdicts without a subprocess -------------------------------------
def test_cli_runner_verdicts(work, tmp_path):
    from edgerun.cli import build_app

    app = build_app()
    runner = CliRunner()
    res = runner.invoke(app, ["check", str(work / "m.tflite"), "--target", "mcu:stm32f746g-disco", "--no-tflm"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["check", str(work / "m.tflite"), "--target", "mcu:nrf52840", "--no-tflm"])
    assert res.exit_code == 0
    res = runner.invoke(app, ["verify", str(work / "bad.bundle"), "--golden"])
    assert res.exit_code == 1 and "FAILED" in res.output
    res = runner.invoke(app, ["run", str(work / "good.bundle"), "--verify", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["verified"] is True
    res = runner.invoke(app, ["convert", str(REPO / "models/digits_cnn.onnx"), "-o", str(tmp_path / "b.tflite"),
                              "--calib", str(REPO / "models/calib_digits.npz"), "--max-drop", "200dB", "--json"])
    assert res.exit_code == 1 and json.loads(res.output)["budget_met"] is False


def test_main_returns_the_exit_code(work):
    """edgerun.cli.main used to drop typer.Exit codes: main(argv) must return them."""
    from edgerun.cli import main

    assert main(["verify", str(work / "bad.bundle"), "--golden"]) == 1
    assert main(["verify", str(work / "good.bundle"), "--golden"]) == 0
    assert main(["check", str(work / "m.tflite"), "--target", "toaster"]) == 2



def test_package_for_a_board_refuses_what_its_firmware_refuses(work, tmp_path):
    """One truth for mcu:BOARD: the firmware's capability table (edgerun_delegates.mcu)."""
    b = ModelBuilder()
    x = b.input("x", (1, 1200), "int8", (0.05, 0))
    w = b.const("w", np.ones((500, 1200), np.int8), "int8", (np.full(500, 0.01, np.float32), np.zeros(500), 0))
    y = b.tensor("y", (1, 500), "int8", (0.5, 0))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    (tmp_path / "fc.tflite").write_bytes(b.to_bytes())
    r = cli("package", tmp_path / "fc.tflite", "-o", tmp_path / "fc.bundle", "--target", "mcu:nrf52840",
           "--sign", work / "k.key")
    assert r.returncode == 1 and "firmware on nrf52840 would refuse" in r.stderr and "flash slot" in r.stderr
    one_line_error(r)
    assert not (tmp_path / "fc.bundle").exists()
    r = cli("check", tmp_path / "fc.tflite", "--target", "mcu:nrf52840", "--json", "--no-tflm")
    rep = json.loads(r.stdout)
    assert r.returncode == 1 and rep["firmware"]["refusals"]
    assert any("refuses it at COMMIT" in f for f in rep["verdict"]["failures"])
    r = cli("package", work / "m.tflite", "-o", tmp_path / "ok.bundle", "--target", "mcu:nrf52840",
           "--sign", work / "k.key")
    assert r.returncode == 0, r.stderr
