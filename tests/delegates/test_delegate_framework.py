"""Delegate discovery (entry points only), a third-party delegate installed from a temp dir,
the public-surface import rule, --delegate list parsing and coverage figures."""

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from edgerun import delegate as dg
from edgerun.errors import DelegateUnavailableError, EdgerunError
from edgerun.runtime.interpreter import Interpreter
from edgerun.testing import assert_close, random_inputs, run_litert
from tests.support.delegate_models import float_relu_chain, small_cnn

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = {"xnnpack", "edgetpu", "tensorrt", "mcu"}


def test_builtin_delegates_found_through_entry_points():
    assert BUILTIN <= set(dg.delegate_names())
    for name in BUILTIN:
        cls = dg.delegate_class(name)
        assert issubclass(cls, dg.Delegate) and cls.name == name
        assert cls.__module__.startswith("edgerun_delegates.")
        assert cls.capabilities is not None and cls.install_hint


def test_loading_delegate_classes_imports_no_runtime():
    code = ("import sys; from edgerun import delegate as d\n"
            "[d.delegate_class(n) for n in ('xnnpack','edgetpu','tensorrt','mcu')]\n"
            "d.delegates_supporting('CONV_2D', 'int8')\n"
            "heavy = [m for m in ('ai_edge_litert', 'tflite_runtime', 'onnxruntime', 'onnx', 'tflite_micro', "
            "'tensorrt', 'serial') if m in sys.modules]\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


ALLOWED = {"edgerun.delegate", "edgerun.ir", "edgerun.ops.registry", "edgerun.errors", "edgerun.targets",
           "edgerun.litert", "edgerun.schema", "edgerun.schema.tflite", "edgerun.schema.reader",
           "edgerun.schema.writer",
           # the flasher's serial link is public library API; the mcu serial back end speaks through it
           "edgerun.deploy.flash", "edgerun.deploy.serial_link", "edgerun.deploy.protocol"}


def test_delegates_import_only_the_public_surface():
    assert not [m for m in ALLOWED if any(p.startswith("_") for p in m.split("."))], "the allow-list names a private module"
    files = sorted((ROOT / "delegates").rglob("*.py"))
    assert files
    bad = []
    for f in files:
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods = [node.module]
            for m in mods:
                if (m == "edgerun" or m.startswith("edgerun.")) and m not in ALLOWED:
                    bad.append(f"{f.relative_to(ROOT)}:{node.lineno} imports {m}")
    assert not bad, "\n".join(bad)


TINY = '''
import numpy as np
from edgerun.delegate import CapabilityTable, Delegate, DelegateKernel, OpCaps

CALLS = []


class TinyKernel(DelegateKernel):
    def __init__(self, partition):
        self.n = len(partition.nodes)

    def invoke(self, inputs):
        CALLS.append(self.n)
        return [np.clip(inputs[0], -1.0, 1.0)]  # RELU_N1_TO_1


class TinyDelegate(Delegate):
    name = "tiny"
    capabilities = CapabilityTable("tiny", {"RELU_N1_TO_1": OpCaps(frozenset({"float32"}))})

    def prepare(self, partition):
        return TinyKernel(partition)
'''


@pytest.fixture
def tiny_installed(tmp_path, monkeypatch):
    pkg = tmp_path / "tinydeleg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(TINY))
    dist = tmp_path / "tinydeleg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinydeleg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[edgerun.delegates]\ntiny = tinydeleg:TinyDelegate\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    dg._refresh()
    yield
    sys.modules.pop("tinydeleg", None)
    dg._refresh()


def test_third_party_delegate_from_a_temp_dir(tiny_installed):
    assert "tiny" in dg.delegate_names()
    assert "tiny" in dg.delegates_supporting("RELU_N1_TO_1", "float32")
    m = float_relu_chain()
    it = Interpreter(model_content=m, delegates=["tiny"])
    it.allocate_tensors()
    assert [(p.delegate, p.ops) for p in it.partitions] == [("tiny", ["RELU_N1_TO_1"])]
    x = random_inputs(it.get_input_details(), 2)
    got = it.predict(*x)
    import tinydeleg
    assert tinydeleg.CALLS == [1]
    assert_close(got, run_litert(m, x))
    cov = dg.coverage(it)
    assert cov["delegated_nodes"] == 1 and cov["nodes"] == 2
    assert cov["fallback"][0]["op"] == "RELU6"
    assert "not in tiny's op table" in cov["fallback"][0]["reasons"]["tiny"]


def test_parse_delegate_list():
    assert dg.parse_delegate_list("xnnpack, EDGETPU,xnnpack") == ["xnnpack", "edgetpu"]
    assert dg.parse_delegate_list(["tensorrt", "mcu,xnnpack"]) == ["tensorrt", "mcu", "xnnpack"]
    assert dg.parse_delegate_list("none") == [] and dg.parse_delegate_list(None) == []
    with pytest.raises(DelegateUnavailableError, match="no delegate named 'gpu'.*installed: .*xnnpack"):
        dg.parse_delegate_list("xnnpack,gpu")


def test_resolve_delegates_rejects_foreign_objects():
    with pytest.raises(EdgerunError, match="takes names or"):
        dg.resolve_delegates([object()])
    with pytest.raises(EdgerunError, match="given twice"):
        dg.resolve_delegates(["xnnpack", "xnnpack"])
    d = dg.get_delegate("xnnpack", min_nodes_per_partition=3, num_threads=2)
    assert d.options.min_nodes_per_partition == 3 and d.config == {"num_threads": 2}
    assert dg.resolve_delegates([d, "mcu"])[0] is d


def test_capability_table_rejects_unknown_op_names():
    with pytest.raises(ValueError, match="unknown op 'CONV2D'"):
        dg.CapabilityTable("x", {"CONV2D": dg.OpCaps(frozenset({"int8"}))})


def test_support_with_model_graph_index_form():
    from edgerun.schema import read_model

    model = read_model(small_cnn())
    d = dg.get_delegate("xnnpack")
    assert d.supports(model, 0, 0).ok  # CONV_2D int8
    s = d.supports(model, 0, len(model.main.operators) - 1)  # SOFTMAX int8
    assert not s.ok and "SOFTMAX/int8" in s.reason


def test_coverage_counts_ops_and_macs():
    m = small_cnn()
    it = Interpreter(model_content=m, delegates=["xnnpack"])
    it.allocate_tensors()
    cov = dg.coverage(it)
    assert cov["nodes"] == 9 and cov["delegated_nodes"] == 7
    # every MAC is in conv / depthwise / fully connected, all delegated; int8 AVERAGE_POOL_2D and
    # SOFTMAX fall back (LiteRT's XNNPACK takes neither in int8: tests/delegates/test_xnnpack_conformance.py)
    assert cov["macs"] == cov["delegated_macs"] > 0 and cov["macs_pct"] == 100.0
    assert [f["op"] for f in cov["fallback"]] == ["AVERAGE_POOL_2D", "SOFTMAX"]
    json.dumps(cov)
    plain = Interpreter(model_content=m)
    plain.allocate_tensors()
    c0 = dg.coverage(plain)
    assert c0["delegated_nodes"] == 0 and c0["macs"] == cov["macs"] and c0["ops_pct"] == 0.0
    # MACs: conv 3x3x3->8 on 16x16, depthwise 3x3 x8, 1x1 conv 8->8 on 8x8, fc 8->10
    assert cov["macs"] == 16 * 16 * 8 * 27 + 16 * 16 * 8 * 9 + 8 * 8 * 8 * 8 + 10 * 8
