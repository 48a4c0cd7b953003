"""ONNX conformance: the backend test data shipped in the onnx wheel, through the converter.

The runner is tools/conformance.py (which also regenerates the table in docs/convert.md). Here:

* every pytorch-converted / pytorch-operator / simple case either passes ``--float`` against its
  stored outputs (1e-4 of the output range) or is refused with an EdgerunError; a wrong value fails,
  and so does a pass count below the floor (like onnx's MIN_PASSING_TESTS);
* the ``light`` zoo graphs (seeded weights) convert and match ONNX Runtime within 1e-3; the three with
  100-550 MB of float weights (AlexNet, VGG-19, ZFNet-512) are marked slow;
* a sample converted to int8 runs in LiteRT's reference kernels and in edgerun with identical bytes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("edgerun_conformance",
                                               Path(__file__).resolve().parents[2] / "tools" / "conformance.py")
conformance = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = conformance  # dataclasses look their module up there
_spec.loader.exec_module(conformance)

#: passing cases per suite today; raise when more pass, never lower to make a change green
MIN_PASSING = {"pytorch-converted": 82, "pytorch-operator": 35, "simple": 3}
LIGHT_SLOW = {"light_bvlc_alexnet", "light_vgg19", "light_zfnet512"}
#: a sample of small cases whose int8 conversion must be bit-identical in LiteRT and edgerun
INT8_SAMPLE = ["test_Conv2d_groups", "test_Conv3d_dilated_strided", "test_MaxPool3d_stride_padding",
               "test_AvgPool3d_stride", "test_ConvTranspose2d", "test_ELU", "test_SELU", "test_Softmin",
               "test_ReplicationPad2d", "test_operator_convtranspose", "test_operator_repeat",
               "test_operator_symbolic_override", "test_operator_addmm", "test_PReLU_2d_multiparam"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def small_results():
    return {c.name: conformance.run_case(c) for c in conformance.cases(("pytorch-converted", "pytorch-operator",
                                                                         "simple"))}


@pytest.mark.parametrize("suite", sorted(MIN_PASSING))
def test_suite_passes_or_refuses(small_results, suite):
    rs = [r for r in small_results.values() if r.case.suite == suite]
    wrong = [f"{r.case.name}: {r.detail}" for r in rs if r.status == "wrong"]
    assert not wrong, "converted with wrong values:\n" + "\n".join(wrong)
    for r in rs:
        if r.status == "refuse":
            assert r.detail and "\n" not in r.detail and "Traceback" not in r.detail
    passed = sum(r.status == "pass" for r in rs)
    assert passed >= MIN_PASSING[suite], (f"{suite}: {passed} pass, floor {MIN_PASSING[suite]}; refused: "
                                          + "; ".join(f"{r.case.name}: {r.detail}" for r in rs
                                                      if r.status != "pass"))


def test_pytorch_suites_reach_95_percent(small_results):
    rs = [r for r in small_results.values() if r.case.suite.startswith("pytorch")]
    assert len(rs) == 117
    assert sum(r.status == "pass" for r in rs) >= 0.95 * len(rs)


def test_refusal_names_the_op_and_the_way_out(small_results):
    r = small_results["test_expand_shape_model1"]
    assert r.status == "refuse"
    assert "Expand" in r.detail and "'shape'" in r.detail and "make it a constant" in r.detail
    r = small_results["test_sequence_model2"]
    assert r.status == "refuse" and "SequenceConstruct" in r.detail and "sequence" in r.detail


@pytest.mark.parametrize("name", INT8_SAMPLE)
def test_int8_sample_is_bit_identical(small_results, name):
    r = small_results[name]
    assert r.status == "pass", r.detail
    case = r.case
    import onnx
    model = onnx.load(str(case.model))
    inputs = case.inputs
    if not all(conformance._fits_float32(x) for x in inputs):
        pytest.skip("stored inputs outside float32")
    data, _ = conformance.convert_float(model, inputs)
    assert conformance.int8_check(data, inputs) == "exact"


@pytest.mark.parametrize("name", [pytest.param(p.stem, marks=pytest.mark.slow if p.stem in LIGHT_SLOW else ())
                                  for p in sorted((conformance.data_root() / "light").glob("light_*.onnx"))])
def test_light_float_matches_onnxruntime(name):
    case = next(c for c in conformance.cases(("light",)) if c.name == name)
    r = conformance.run_case(case)
    assert r.status == "pass", r.detail
    assert r.err <= conformance.RTOL_LIGHT


def test_light_int8_runs_in_litert_and_edgerun():
    case = next(c for c in conformance.cases(("light",)) if c.name == "light_squeezenet")
    import onnx
    model = conformance.fill_light(onnx.load(str(case.model)))
    inputs = conformance.light_inputs(model)
    data, _ = conformance.convert_float(model, inputs)
    assert conformance.int8_check(data, inputs) == "exact"


def test_old_opset_is_upgraded_and_noted():
    import onnx

    from edgerun.convert.onnx.load import TARGET_OPSET, default_opset, upgrade
    case = next(c for c in conformance.cases(("pytorch-converted",)) if c.name == "test_ReLU")
    model = onnx.load(str(case.model))
    assert default_opset(model) < 7
    up, notes = upgrade(model)
    assert default_opset(up) == TARGET_OPSET
    assert notes and f"upgraded to {TARGET_OPSET}" in notes[0]
