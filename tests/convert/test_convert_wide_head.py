"""16-bit stages of a float32-io int8 conversion (issue 15): the wide classifier head and the
int16 input stage.

* Wide head: with float32 outputs on a target that takes the int16 SOFTMAX (cpu, rpi, none), the
  last FULLY_CONNECTED before the output SOFTMAX, or before float32 logits, runs in 16x8 (int16
  activations, int8 weights, int64 bias), with the AVERAGE_POOL_2D / RESHAPE ops that feed it;
  int8 logits' step otherwise decides near-ties. edgerun's firmware (mcu) runs it too; jetson's
  TensorRT export and coral keep the int8 head.
* Input stage: an input whose range is set by one wide feature is quantized to int16 and read by
  its first layer in 16x8, then requantized to int8, when that removes WIDE_INPUT_GAIN of the
  error on calibration samples.

Every form must run bit-exact with LiteRT's reference kernels, be closer to float than the int8
form, and the report must say which ops ran at 16 bits.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgerun.convert.pipeline import convert
from edgerun.schema.reader import read_model
from edgerun.testing import compare_with_litert


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))


def classifier(path, softmax: bool, seed: int = 0, wide_feature: float = 1.0) -> None:
    """Conv 3x3 (4 -> 8) -> Relu -> Conv 1x1 -> Relu -> AveragePool 6x6 -> Flatten -> Gemm (8 -> 10) [-> Softmax]
    on a [1, 4, 6, 6] input. With ``wide_feature`` > 1 the conv reads input channel 0 (which
    spans ``wide_feature`` times the others' range) with weights of one or two int8 steps; all
    first-conv weights sit on their int8 grid, so the input's own quantization leads the error."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.5, (8, 4, 3, 3)).astype(np.float32)
    if wide_feature != 1.0:
        step = np.abs(w).reshape(8, -1).max(axis=1) / 127
        w[:, 0] = step[:, None, None] * rng.choice([-2, -1, 1, 2], (8, 3, 3))
        w = (np.round(w / step[:, None, None, None]) * step[:, None, None, None]).astype(np.float32)
    b = rng.normal(0, 0.1, 8).astype(np.float32)
    w2 = rng.normal(0, 0.4, (8, 8, 1, 1)).astype(np.float32)
    fc = rng.normal(0, 0.6, (10, 8)).astype(np.float32)
    fb = rng.normal(0, 0.2, 10).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[6, 6]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fb"], ["logits"], transB=1)]
    out = "logits"
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["prob"], axis=1))
        out = "prob"
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (w2, "w2"), (fc, "fc"), (fb, "fb"))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def op_dtypes(model: bytes) -> list[tuple[str, str, str]]:
    """(op, first input dtype, output dtype) in graph order."""
    m = read_model(model)
    g = m.main
    return [(m.op_name(op), g.tensors[op.inputs[0]].dtype, g.tensors[op.outputs[0]].dtype) for op in g.operators]


def samples(n: int = 120, seed: int = 1, wide_feature: float = 1.0) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(0, 1, (n, 4, 6, 6)).astype(np.float32)
    x[:, 0] *= wide_feature
    return x


@pytest.mark.parametrize("softmax", [True, False])
def test_classifier_head_runs_in_16x8_bit_exact(tmp_path, softmax):
    src = tmp_path / "m.onnx"
    classifier(src, softmax)
    x = samples()
    kw = {"calib": x, "io_type": "float32", "use_cache": False}
    wide = convert(src, tmp_path / "w.tflite", **kw)
    narrow = convert(src, tmp_path / "n.tflite", target="jetson", **kw)  # TensorRT export: int8 head
    assert wide.ok and narrow.ok
    ops = op_dtypes((tmp_path / "w.tflite").read_bytes())
    fc = next(o for o in ops if o[0] == "FULLY_CONNECTED")
    assert fc[1:] == ("int16", "int16")
    assert next(o for o in ops if o[0] == "AVERAGE_POOL_2D")[1:] == ("int16", "int16")
    m = read_model((tmp_path / "w.tflite").read_bytes())
    fc_op = next(op for op in m.main.operators if m.op_name(op) == "FULLY_CONNECTED")
    assert m.main.tensors[fc_op.inputs[2]].dtype == "int64"
    assert ops[-1][0] == "DEQUANTIZE" and ops[-1][1] == "int16"
    assert ("SOFTMAX", "int16", "int16") in ops if softmax else all(o[0] != "SOFTMAX" for o in ops)
    assert wide.int16_ops.get("FULLY_CONNECTED") == 1 and "16 bits" in wide.format()
    assert "int16" not in {d for o in op_dtypes((tmp_path / "n.tflite").read_bytes()) for d in o[1:]}
    assert not narrow.int16_ops
    # closer to float than the int8 head on the same ranges (the pool's int16 range holds its input's)
    assert wide.outputs[0].sqnr_db > narrow.outputs[0].sqnr_db + 3, (wide.outputs[0].sqnr_db,
                                                                      narrow.outputs[0].sqnr_db)
    model = (tmp_path / "w.tflite").read_bytes()
    for s in x[:10]:
        compare_with_litert(model, [s[None].transpose(0, 2, 3, 1).copy()], rtol=0, atol=0)


def test_mcu_gets_the_wide_head_and_its_firmware_accepts_it(tmp_path):
    """edgerun's firmware has the int16 SOFTMAX and the 16x8 kernels (bit-exact with LiteRT on the
    posix firmware: tests/firmware/test_firmware_kernels_more.py), so `--target mcu` writes the
    16x8 head and `check --target mcu`'s prediction (the firmware's own rules) accepts it."""
    from edgerun_delegates.mcu.firmware import firmware_accepts

    src = tmp_path / "m.onnx"
    classifier(src, True)
    rep = convert(src, tmp_path / "m.tflite", calib=samples(), io_type="float32", target="mcu", use_cache=False)
    assert rep.ok and rep.int16_ops.get("FULLY_CONNECTED") == 1 and rep.int16_ops.get("SOFTMAX") == 1
    model = (tmp_path / "m.tflite").read_bytes()
    assert firmware_accepts(model, "mps2-an386") == []
    compare_with_litert(model, [samples(1)[0][None].transpose(0, 2, 3, 1).copy()], rtol=0, atol=0)


def test_int16_input_stage_when_one_feature_sets_the_input_range(tmp_path):
    """Channel 0 spans 0-200, the others 0-1: int8's input step (0.8) swamps channels 1-3; the
    int16 input stage is kept, bit-exact with LiteRT."""
    src = tmp_path / "m.onnx"
    classifier(src, False, wide_feature=200.0)
    x = samples(wide_feature=200.0)
    rep = convert(src, tmp_path / "w.tflite", calib=x, io_type="float32", use_cache=False)
    assert rep.ok and rep.calibration["wide_input"]["kept"], rep.calibration.get("wide_input")
    wi = rep.calibration["wide_input"]
    assert wi["after_db"] > wi["before_db"] + 1.2
    ops = op_dtypes((tmp_path / "w.tflite").read_bytes())
    assert ops[0] == ("QUANTIZE", "float32", "int16")
    assert ops[1] == ("CONV_2D", "int16", "int16") and ops[2] == ("QUANTIZE", "int16", "int8")
    assert rep.int16_ops.get("CONV_2D") == 1
    model = (tmp_path / "w.tflite").read_bytes()
    for s in x[:10]:
        compare_with_litert(model, [s[None].transpose(0, 2, 3, 1).copy()], rtol=0, atol=0)
    # an input of even features keeps the int8 input stage; jetson (TensorRT export) never tries it
    classifier(src, True)
    even = convert(src, tmp_path / "e.tflite", calib=samples(), io_type="float32", use_cache=False)
    assert not even.calibration["wide_input"]["kept"]
    assert op_dtypes((tmp_path / "e.tflite").read_bytes())[0] == ("QUANTIZE", "float32", "int8")
    trt = convert(src, tmp_path / "t.tflite", calib=x, io_type="float32", target="jetson", use_cache=False)
    assert "wide_input" not in trt.calibration and not trt.int16_ops


def test_int8_head_where_this_machines_litert_lacks_the_int16_forms(tmp_path, monkeypatch):
    """The converter scores and verifies in LiteRT; tflite-runtime 2.14 (armhf's only LiteRT) has
    no int8 -> int16 QUANTIZE, so where the probe fails the head and SOFTMAX stay int8. The
    armlane runs the real case: tests/ops/test_ops_hybrid.py under tflite-runtime 2.14."""
    from edgerun.convert import quantize

    assert quantize.wide_head_runs_here()  # LiteRT 2.3 (ai-edge-litert) runs them
    monkeypatch.setattr(quantize, "_WIDE_HEAD_HERE", False)
    src = tmp_path / "m.onnx"
    classifier(src, True)
    rep = convert(src, tmp_path / "n.tflite", calib=samples(), io_type="float32", use_cache=False)
    ops = op_dtypes((tmp_path / "n.tflite").read_bytes())
    assert rep.ok and not rep.int16_ops
    assert "int16" not in {d for o in ops for d in o[1:]}


def test_rpi_weighs_the_16_bit_stages_that_run_outside_xnnpack(tmp_path):
    """On `--target rpi` XNNPACK runs no int16 op, so the 16-bit stages run on LiteRT's own kernels
    after its partition (MLPerf Tiny kws, LiteRT + XNNPACK, 1 thread: int8 55 us, 16x8 head 92 us,
    int16 input stage 765 us). There the input stage is not tried, and the head stays 16x8 only
    when it gains WIDE_HEAD_GAIN_DB or a top-1 on calibration samples. Even input features: the
    head gains > 10 dB and is kept, as with no target. Input channel 0 spanning 0-200 (the int8
    input step leads the error): the head gains ~0.1 dB and stays int8, inside the XNNPACK partition."""
    from edgerun.check import check_model
    from edgerun.convert.pipeline import WIDE_HEAD_GAIN_DB

    src = tmp_path / "m.onnx"
    classifier(src, True)
    rep = convert(src, tmp_path / "k.tflite", calib=samples(), io_type="float32", target="rpi", use_cache=False)
    wh = rep.calibration["wide_head"]
    assert rep.ok and wh["kept"] and wh["int16_db"] > wh["int8_db"] + WIDE_HEAD_GAIN_DB, wh
    assert ("FULLY_CONNECTED", "int16", "int16") in op_dtypes((tmp_path / "k.tflite").read_bytes())

    classifier(src, True, wide_feature=200.0)
    x = samples(wide_feature=200.0)
    rpi = convert(src, tmp_path / "r.tflite", calib=x, io_type="float32", target="rpi", use_cache=False)
    wh, wi = rpi.calibration["wide_head"], rpi.calibration["wide_input"]
    assert rpi.ok and not wh["kept"] and wh["int16_db"] < wh["int8_db"] + WIDE_HEAD_GAIN_DB, wh
    assert wh["int16_flips"] >= wh["int8_flips"] and not wi["kept"] and "rpi" in wi["why"], wi
    assert rpi.int16_ops == {"SOFTMAX": 1}  # the int8-in / int16-out SOFTMAX stays (no int8 form in XNNPACK either)
    ops = op_dtypes((tmp_path / "r.tflite").read_bytes())
    assert ops[0] == ("QUANTIZE", "float32", "int8")
    assert ("FULLY_CONNECTED", "int8", "int8") in ops and ("AVERAGE_POOL_2D", "int8", "int8") in ops
    model = (tmp_path / "r.tflite").read_bytes()
    for s in x[:5]:
        compare_with_litert(model, [s[None].transpose(0, 2, 3, 1).copy()], rtol=0, atol=0)
    # the same model with no target keeps both 16-bit stages; on rpi the FULLY_CONNECTED is delegated
    none = convert(src, tmp_path / "n.tflite", calib=x, io_type="float32", use_cache=False)
    assert none.int16_ops.get("FULLY_CONNECTED") == 1 and none.int16_ops.get("CONV_2D") == 1
    assert "wide_head" not in none.calibration and none.calibration["wide_input"]["kept"]

    def delegated_fc(path):
        chk = check_model(path, "rpi")
        return sum(p["ops"].count("FULLY_CONNECTED") for p in chk["partitions"])

    assert delegated_fc(tmp_path / "r.tflite") == 1 and delegated_fc(tmp_path / "n.tflite") == 0
