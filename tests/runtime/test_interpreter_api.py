"""The Interpreter speaks LiteRT's API: same detail dictionaries, signatures, resize, errors."""

import numpy as np
import pytest

from edgerun import Interpreter
from edgerun.errors import EdgerunError, InputMismatchError, ModelFormatError, UnsupportedOpError
from edgerun.ir import ModelBuilder
from edgerun.litert import make_interpreter
from edgerun.ops import Kernel, register_custom


def _model(dtype="int8", dynamic=False) -> bytes:
    b = ModelBuilder()
    q = (0.05, -3) if dtype == "int8" else None
    sig = (-1, 3, 4) if dynamic else None
    x = b.input("x", (1, 3, 4), dtype, q, shape_signature=sig)
    y = b.tensor("y", (1, 3, 4), dtype, q, shape_signature=sig)
    z = b.tensor("z", (1, 3, 4), dtype, (0.05, -3) if q else None, shape_signature=sig)
    b.op("RELU", [x], [y])
    b.op("RELU6", [y], [z])
    b.output(z)
    b.signature("serving_default", [("image", x)], [("scores", z)])
    return b.to_bytes()


def _norm(d):
    out = dict(d)
    for k in ("shape", "shape_signature"):
        out[k] = list(out[k])
    qp = out["quantization_parameters"]
    out["quantization_parameters"] = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in qp.items()}
    out["quantization"] = (pytest.approx(out["quantization"][0]), out["quantization"][1])
    return out


@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_details_match_litert(dtype):
    data = _model(dtype)
    ours, theirs = Interpreter(model_content=data), make_interpreter(data, reference=True)
    ours.allocate_tensors()
    theirs.allocate_tensors()
    for a, b in zip(ours.get_input_details() + ours.get_output_details(),
                    theirs.get_input_details() + theirs.get_output_details()):
        na, nb = _norm(a), _norm(b)
        for key in ("name", "index", "shape", "shape_signature", "dtype", "quantization",
                    "quantization_parameters"):
            assert na[key] == nb[key], key
    assert ours.get_signature_list() == theirs.get_signature_list()


def test_signature_runner_matches_litert():
    data = _model("float32")
    x = np.linspace(-8, 8, 12, dtype=np.float32).reshape(1, 3, 4)
    ours = Interpreter(model_content=data).get_signature_runner("serving_default")
    theirs = make_interpreter(data, reference=True).get_signature_runner("serving_default")
    got, want = ours(image=x), theirs(image=x)
    assert list(got) == list(want) == ["scores"]
    np.testing.assert_array_equal(got["scores"], want["scores"])
    with pytest.raises(InputMismatchError, match="no input 'img'"):
        ours(img=x)
    with pytest.raises(EdgerunError, match="no signature"):
        Interpreter(model_content=data).get_signature_runner("nope")


def test_resize_tensor_input_dynamic_batch():
    data = _model("float32", dynamic=True)
    it = Interpreter(model_content=data)
    it.resize_tensor_input(0, [5, 3, 4], strict=True)
    it.allocate_tensors()
    x = np.random.default_rng(0).normal(size=(5, 3, 4)).astype(np.float32)
    it.set_tensor(0, x)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), np.clip(x, 0, 6))
    with pytest.raises(InputMismatchError, match="fixed at 3"):
        it.resize_tensor_input(0, [5, 4, 4], strict=True)


def test_wrong_inputs_are_named():
    it = Interpreter(model_content=_model("int8"))
    with pytest.raises(EdgerunError, match="allocate_tensors"):
        it.set_tensor(0, np.zeros((1, 3, 4), np.int8))
    it.allocate_tensors()
    with pytest.raises(InputMismatchError, match=r"expects int8, got float32"):
        it.set_tensor(0, np.zeros((1, 3, 4), np.float32))
    with pytest.raises(InputMismatchError, match=r"expects shape \[1, 3, 4\], got \[1, 4, 3\]"):
        it.set_tensor(0, np.zeros((1, 4, 3), np.int8))
    assert isinstance(InputMismatchError("x"), ValueError)  # LiteRT callers catch ValueError


def test_unsupported_op_is_named_with_index():
    b = ModelBuilder()
    x = b.input("x", (4,), "float32")
    y = b.tensor("y", (4,), "float32")
    b.op("RELU", [x], [y])
    z = b.tensor("z", (4,), "float32")
    b.op("LSH_PROJECTION", [y], [z])
    b.output(z)
    it = Interpreter(model_content=b.to_bytes())
    with pytest.raises(UnsupportedOpError, match=r"LSH_PROJECTION.*\(node 1\)") as e:
        it.allocate_tensors()
    assert e.value.node_index == 1 and e.value.op == "LSH_PROJECTION"


def test_custom_op_registration():
    class Double(Kernel):
        def prepare(self):
            return [self.ctx.input_shape(0)]

        def eval(self, inputs):
            return [inputs[0] * 2]

    b = ModelBuilder()
    x = b.input("x", (3,), "float32")
    y = b.tensor("y", (3,), "float32")
    b.op("CUSTOM", [x], [y], custom_code="MyDouble", custom_options=b"\x01")
    b.output(y)
    data = b.to_bytes()
    with pytest.raises(UnsupportedOpError, match="CUSTOM:MyDouble"):
        Interpreter(model_content=data).allocate_tensors()
    it = Interpreter(model_content=data, custom_ops={"MyDouble": Double})
    out = it.predict(np.array([1, 2, 3], np.float32))
    np.testing.assert_array_equal(out[0], [2, 4, 6])
    register_custom("MyDouble", Double)
    assert Interpreter(model_content=data).predict(np.ones(3, np.float32))[0].tolist() == [2, 2, 2]


def test_model_loading_errors(tmp_path):
    with pytest.raises(ModelFormatError, match="no such file"):
        Interpreter(model_path=tmp_path / "missing.tflite")
    (tmp_path / "empty.tflite").write_bytes(b"")
    with pytest.raises(ModelFormatError, match="empty"):
        Interpreter(model_path=tmp_path / "empty.tflite")
    with pytest.raises(ModelFormatError):
        Interpreter(model_content=b"\x00" * 64)


def test_hostile_shape_is_refused_before_allocation():
    b = ModelBuilder()
    x = b.input("x", (1 << 20, 1 << 20), "float32")
    y = b.tensor("y", (1 << 20, 1 << 20), "float32")
    b.op("RELU", [x], [y])
    b.output(y)
    with pytest.raises(ModelFormatError, match="limit"):
        Interpreter(model_content=b.to_bytes()).allocate_tensors()


def test_prepared_steps_and_delegation_report_are_public_and_typed():
    from edgerun.runtime.partition import DelegationReport
    from edgerun.runtime.steps import Step

    it = Interpreter(model_content=_model("float32"))
    it.allocate_tensors()
    steps = it.steps()
    assert all(isinstance(s, Step) for s in steps)
    assert [(s.name, s.dtype, s.nodes, s.error, s.partition) for s in steps] == [
        ("RELU", "float32", [0], None, None), ("RELU6", "float32", [1], None, None)]
    steps.clear()  # a copy: the interpreter's own list is untouched
    assert len(it.steps()) == 2 and it.folded_nodes() == []
    rep = it.delegation_report()
    assert isinstance(rep, DelegationReport) and rep.delegates == [] and rep.partitions == []
    assert [(r["node"], r["op"], r["delegate"]) for r in rep.nodes] == [(0, "RELU", None), (1, "RELU6", None)]
    assert rep.figures()["ops_pct"] == 0.0
    assert it.memory_bytes == it.arena_bytes > 0


def test_partition_steps_carry_their_partition():
    pytest.importorskip("ai_edge_litert")
    it = Interpreter(model_content=_model("float32"), delegates=["xnnpack"])
    it.allocate_tensors()
    (step,) = it.steps()
    assert step.name == "xnnpack:0" and step.dtype == "delegate" and step.nodes == [0, 1]
    assert step.partition is it.partitions[0] and step.partition.ops == ["RELU", "RELU6"]
    rep = it.delegation_report()
    assert rep.partitions == it.partitions and rep.figures()["ops_pct"] == 100.0
    assert rep.row(1)["delegate"] == "xnnpack" and rep.row(1)["partition"] == 0
