"""`edgerun check MODEL --target ...`: partitions, fallbacks with reasons, MCU memory vs board."""

import json

import numpy as np
import pytest

from edgerun.cli import main
from edgerun.cli.check import check_model
from edgerun.ir import ModelBuilder
from edgerun.schema.tflite import Activation
from tests.support.delegate_models import Q, small_cnn


@pytest.fixture
def cnn(tmp_path):
    p = tmp_path / "cnn.tflite"
    p.write_bytes(small_cnn())
    return p


def _json(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr().out
    return rc, json.loads(out)


def test_rpi_json(cnn, capsys):
    rc, rep = _json(capsys, ["check", str(cnn), "--target", "rpi", "--json"])
    assert rc == 0
    assert rep["target"] == "rpi:rpi4" and [d["name"] for d in rep["delegates"]] == ["xnnpack"]
    # int8 AVERAGE_POOL_2D and SOFTMAX are not LiteRT XNNPACK's (tests/delegates/test_xnnpack_conformance.py)
    assert [p["delegate"] for p in rep["partitions"]] == ["xnnpack", "xnnpack"]
    assert rep["fallback"] == [
        {"node": 5, "op": "AVERAGE_POOL_2D", "dtype": "int8", "edgerun_kernel": True,
         "reasons": {"xnnpack": "AVERAGE_POOL_2D/int8: xnnpack takes AVERAGE_POOL_2D only as float32"}},
        {"node": 8, "op": "SOFTMAX", "dtype": "int8", "edgerun_kernel": True,
         "reasons": {"xnnpack": "SOFTMAX/int8: xnnpack takes SOFTMAX only as float32"}}]
    assert rep["coverage"]["macs_pct"] == 100.0 and "memory" not in rep


def test_coral_text(cnn, capsys):
    rc = main(["check", str(cnn), "--target", "coral"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "#0 edgetpu: 9 nodes" in out and "falls back to the CPU: 0 node(s)" in out
    assert "delegate edgetpu: " in out


def test_jetson_partition_and_fallback_reason(tmp_path, capsys):
    # LOG_SOFTMAX has no ONNX lowering in the tensorrt exporter: it falls back with that reason
    q = Q(70)
    x = q.input((1, 10), 0.05, 0)
    y = q.act((1, 10), 16.0 / 256, 127)
    q.b.op("LOG_SOFTMAX", [x], [y])
    z = q.unary(y, "RELU")
    p = tmp_path / "m.tflite"
    p.write_bytes(q.done(z))
    rc, rep = _json(capsys, ["check", str(p), "--target", "jetson", "--json"])
    assert rc == 0
    fb = {f["op"]: f for f in rep["fallback"]}
    # the real cause: TensorRT runs LogSoftmax, edgerun's exporter has no lowering for it
    assert "edgerun's TensorRT exporter has no LOG_SOFTMAX lowering" in fb["LOG_SOFTMAX"]["reasons"]["tensorrt"]
    assert [(p["delegate"], p["ops"]) for p in rep["partitions"]] == [("tensorrt", ["RELU"])]


def test_mcu_memory_fits_and_does_not_fit(tmp_path, cnn, capsys):
    rc, rep = _json(capsys, ["check", str(cnn), "--target", "mcu:stm32f746g-disco", "--json"])
    mem = rep["memory"]
    assert rc == 0 and mem["arena_fits"] and mem["model_fits"]
    assert mem["ram_free_for_arena"] == 320 * 1024 - 48 * 1024
    assert mem["tflm_arena_bytes"] >= mem["tflm_arena_head_bytes"] > 0
    # 1x96x96x3 -> conv 32 channels: the 96x96x32 int8 activation (288 KiB) alone exceeds the RAM
    q = Q(71)
    x = q.input((1, 96, 96, 3))
    big = tmp_path / "big.tflite"
    big.write_bytes(q.done(q.conv(x, 32, act=Activation.RELU)))
    rep = check_model(big, "mcu:stm32f746g-disco", tflm=False)
    assert not rep["memory"]["arena_fits"] and rep["memory"]["arena_bytes"] >= 96 * 96 * 35
    rc = main(["check", str(big), "--target", "mcu:stm32f746g-disco", "--no-tflm"])
    assert "DOES NOT FIT" in capsys.readouterr().out


def test_flash_limit(tmp_path):
    # 600 KiB of weights do not fit the nrf52840's 384 KiB model slot
    b = ModelBuilder()
    x = b.input("x", (1, 1200), "int8", (0.05, 0))
    w = b.const("w", np.ones((500, 1200), np.int8), "int8", (np.full(500, 0.01, np.float32), np.zeros(500), 0))
    y = b.tensor("y", (1, 500), "int8", (0.5, 0))
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    b.output(y)
    p = tmp_path / "fc.tflite"
    p.write_bytes(b.to_bytes())
    mem = check_model(p, "mcu:nrf52840", tflm=False)["memory"]
    assert not mem["model_fits"] and mem["model_bytes"] > 384 * 1024


def test_unknown_target_is_one_line_error(cnn, capsys):
    rc = main(["check", str(cnn), "--target", "tpu"])
    err = capsys.readouterr().err
    assert rc != 0 and err.startswith("error: unknown target 'tpu'") and err.count("\n") == 1
