"""PRELU for XNNPACK targets: `edgerun convert --target rpi|cpu` writes each int8 PRELU as
DEQUANTIZE -> float32 PRELU -> QUANTIZE (LiteRT 2.3's XNNPACK delegate takes PRELU only in
float32), so the model stays one XNNPACK partition; full-int8 targets keep the int8 PRELU.
The rewrite keeps the quantization on both sides, so the result moves by at most one step."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgerun.convert import convert
from edgerun.schema.reader import read_model
from tests.support.xnnpack_oracle import litert_xnnpack_partitions

pytest.importorskip("ai_edge_litert")
RNG = np.random.default_rng(11)


def _conv_prelu(path):
    """conv 3x3 (4 -> 8) -> PRelu (one slope per channel) -> conv 1x1 -> PRelu."""
    w1 = numpy_helper.from_array(RNG.normal(0, 0.3, (8, 4, 3, 3)).astype(np.float32), "w1")
    s1 = numpy_helper.from_array(RNG.uniform(0.05, 0.4, (8, 1, 1)).astype(np.float32), "s1")
    w2 = numpy_helper.from_array(RNG.normal(0, 0.3, (8, 8, 1, 1)).astype(np.float32), "w2")
    s2 = numpy_helper.from_array(RNG.uniform(0.05, 0.4, (8, 1, 1)).astype(np.float32), "s2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("PRelu", ["c1", "s1"], ["p1"]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"]),
             helper.make_node("PRelu", ["c2", "s2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 12, 12])], [w1, s1, w2, s2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path.write_bytes(m.SerializeToString())
    return path


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    d = tmp_path_factory.mktemp("prelu")
    src = _conv_prelu(d / "m.onnx")
    calib = RNG.uniform(-1, 1, (24, 1, 4, 12, 12)).astype(np.float32)
    np.save(d / "calib.npy", calib[:, 0])
    out = {}
    for target in (None, "rpi", "cpu", "coral", "mcu"):
        p = d / f"{target}.tflite"
        rep = convert(src, p, calib=d / "calib.npy", calib_method="minmax", target=target, use_cache=False)
        out[target] = (p.read_bytes(), rep)
    return out


def _ops(data):
    m = read_model(data)
    return [(m.op_name(op), m.main.tensors[op.inputs[0]].dtype) for op in m.main.operators]


@pytest.mark.parametrize("target", ["rpi", "cpu"])
def test_xnnpack_targets_get_float_prelu_and_one_partition(converted, target):
    data, rep = converted[target]
    ops = _ops(data)
    assert [o for o in ops if o[0] == "PRELU"] == [("PRELU", "float32")] * 2
    assert ops.count(("DEQUANTIZE", "int8")) >= 2 and ("CONV_2D", "int8") in ops
    assert litert_xnnpack_partitions(data) == (1, 0)
    assert rep.xnnpack_partitions in (None, 1)
    # the int8 PRELU form is cut by XNNPACK into partitions around each PRELU
    plain = converted[None][0]
    assert ("PRELU", "int8") in _ops(plain) and litert_xnnpack_partitions(plain)[0] > 1


@pytest.mark.parametrize("target", ["coral", "mcu"])
def test_full_int8_targets_keep_int8_prelu(converted, target):
    ops = _ops(converted[target][0])
    assert ("PRELU", "int8") in ops and not any(o[1] == "float32" for o in ops)


def test_float_prelu_moves_the_result_by_at_most_one_step(converted):
    """Same calibration and scales either way: the float form rounds the same quantized computation
    once, the int8 kernel through fixed-point multipliers; the last PRELU's output differs by at
    most one step (LiteRT's reference kernels, seeded inputs), and the error against the float
    model stays the same."""
    from edgerun.litert import make_interpreter

    def run(data, x):
        it = make_interpreter(data, reference=True)
        it.allocate_tensors()
        d = it.get_input_details()[0]
        s, z = d["quantization"]
        it.set_tensor(d["index"], np.clip(np.round(x / s) + z, -128, 127).astype(np.int8))
        it.invoke()
        o = it.get_output_details()[0]
        return it.get_tensor(o["index"]).astype(np.int32), o["quantization"]

    x = RNG.uniform(-1, 1, (1, 12, 12, 4)).astype(np.float32)
    a, qa = run(converted[None][0], x)
    b, qb = run(converted["rpi"][0], x)
    assert qa == qb
    assert np.abs(a - b).max() <= 1
    sa = [o.sqnr_db for o in converted[None][1].outputs]
    sb = [o.sqnr_db for o in converted["rpi"][1].outputs]
    assert abs(sa[0] - sb[0]) < 1.0, (sa, sb)
