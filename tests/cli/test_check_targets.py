"""`edgerun check` names the real cause of a fallback, and accepts a -1 batch in shape_signature
over a static shape wherever LiteRT and TFLM run it."""

import json

import numpy as np
import pytest

from edgerun.check import check_model
from edgerun.cli import main
from edgerun.ir import ModelBuilder
from edgerun.runtime.interpreter import Interpreter
from edgerun.testing import assert_close, random_inputs, run_edgerun
from tests.support.delegate_models import Q

pytest.importorskip("onnxruntime")


def _prelu_model() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 4), "int8", (0.05, 3))
    alpha = b.const("alpha", np.array([[[20, -40, 90, 127]]], np.int8), "int8", (0.004, 0))
    y = b.tensor("y", (1, 6, 6, 4), "int8", (0.04, -10))
    b.op("PRELU", [x, alpha], [y])
    b.output(y)
    return b.to_bytes()


def test_jetson_runs_prelu_through_the_exporter(tmp_path):
    m = _prelu_model()
    rep = check_model(m, "jetson")
    assert [p["ops"] for p in rep["partitions"] if p["delegate"] == "tensorrt"] == [["PRELU"]]
    assert rep["fallback"] == [] and rep["verdict"]["ok"]
    # and the export computes what edgerun's kernels compute (within 1 LSB, the exporter's promise)
    it = Interpreter(model_content=m, delegates=["tensorrt"])
    it.allocate_tensors()
    assert [p.delegate for p in it.partitions] == ["tensorrt"]
    for seed in range(3):
        xs = random_inputs(it.get_input_details(), seed)
        it.set_tensor(it.get_input_details()[0]["index"], xs[0])
        it.invoke()
        got = it.get_tensor(it.get_output_details()[0]["index"])
        want = run_edgerun(m, xs)
        assert_close([got], want, max_lsb=1)
        assert len(np.unique(want[0])) > 3


def test_jetson_fallback_blames_the_exporter_not_tensorrt(tmp_path, capsys):
    q = Q(70)
    x = q.input((1, 10), 0.05, 0)
    y = q.act((1, 10), 16.0 / 256, 127)
    q.b.op("LOG_SOFTMAX", [x], [y])
    p = tmp_path / "m.tflite"
    p.write_bytes(q.done(q.unary(y, "RELU")))
    rc = main(["check", str(p), "--target", "jetson", "--json"])
    rep = json.loads(capsys.readouterr().out)
    why = {f["op"]: f["reasons"]["tensorrt"] for f in rep["fallback"]}["LOG_SOFTMAX"]
    assert why.startswith("edgerun's TensorRT exporter has no LOG_SOFTMAX lowering (TensorRT itself runs")
    assert "op table" not in why
    assert rc == 0  # the Jetson's CPU runs it with edgerun's kernels: the target can run the model


@pytest.mark.parametrize("target", ["rpi", "jetson", "mcu"])  # not coral: the Edge TPU compiler wants batch 1
def test_minus_one_batch_over_a_static_shape_is_accepted(tmp_path, target):
    b = ModelBuilder()
    x = b.input("x", (1, 49, 10, 1), "int8", (0.05, 0), shape_signature=(-1, 49, 10, 1))
    y = b.tensor("y", (1, 49, 10, 1), "int8", (0.05, 0), shape_signature=(-1, 49, 10, 1))
    b.op("RELU", [x], [y])
    b.output(y)
    rep = check_model(b.to_bytes(), target, tflm=False)
    assert rep["verdict"]["ok"], rep["verdict"]
    assert not any("dynamic shape" in r for f in rep["fallback"] for r in f["reasons"].values())


def test_a_truly_dynamic_dim_is_still_refused():
    b = ModelBuilder()
    x = b.input("x", (1, 49, 10, 1), "int8", (0.05, 0), shape_signature=(1, -1, 10, 1))
    y = b.tensor("y", (1, 49, 10, 1), "int8", (0.05, 0), shape_signature=(1, -1, 10, 1))
    b.op("RELU", [x], [y])
    b.output(y)
    rep = check_model(b.to_bytes(), "coral")
    assert any("dynamic shape" in r for f in rep["fallback"] for r in f["reasons"].values())


def test_zero_mac_coverage_is_one_computation():
    """A graph with no MACs: `check` and `run --delegate` (edgerun.delegate.coverage) agree."""
    from edgerun.delegate import coverage

    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 8), "int8", (0.05, 0))
    y = b.tensor("y", (1, 4, 4, 8), "int8", (0.05, 0))
    b.op("ADD", [x, x], [y])
    b.output(y)
    m = b.to_bytes()
    rep = check_model(m, "rpi")
    it = Interpreter(model_content=m, delegates=["xnnpack"])
    it.allocate_tensors()
    cov = coverage(it)
    assert rep["coverage"]["macs"] == cov["macs"] == 0
    assert rep["coverage"]["macs_pct"] == cov["macs_pct"]
    assert rep["coverage"]["ops_pct"] == cov["ops_pct"]
    if cov["delegated_nodes"] == cov["nodes"]:
        assert rep["coverage"]["macs_pct"] == 100.0
