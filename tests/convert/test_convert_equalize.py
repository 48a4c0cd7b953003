"""Cross-layer equalization: float outputs unchanged, per-channel ranges balanced, and the int8
model closer to float on held-back data when the channel ranges were unbalanced."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from edgerun.convert import equalize as eq
from edgerun.convert.pipeline import convert
from edgerun.convert.tflite_frontend import tflite_to_graph
from edgerun.litert import make_interpreter


def _chain(tmp_path, act="Relu", spread=3.0):
    """conv 3->8, act, depthwise 8, act, conv 1x1 8->12; the depthwise output channels are scaled by
    10^u (u in [-spread/2, spread/2]) and the next layer's input channels by the inverse, so the
    function is that of a balanced network but its middle tensor is badly unbalanced."""
    rng = np.random.default_rng(7)
    c = 8
    w1 = rng.standard_normal((c, 3, 3, 3)).astype(np.float32) * 0.3
    wd = rng.standard_normal((c, 1, 3, 3)).astype(np.float32) * 0.3
    bd = rng.standard_normal(c).astype(np.float32) * 0.1
    w2 = rng.standard_normal((12, c, 1, 1)).astype(np.float32) * 0.3
    a = 10.0 ** rng.uniform(-spread / 2, spread / 2, c).astype(np.float32)
    wd, bd = wd * a.reshape(-1, 1, 1, 1), bd * a
    w2 = w2 / a.reshape(1, -1, 1, 1)
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             h.make_node(act, ["c1"], ["r1"]),
             h.make_node("Conv", ["r1", "wd", "bd"], ["c2"], group=c, pads=[1, 1, 1, 1]),
             h.make_node(act, ["c2"], ["r2"]),
             h.make_node("Conv", ["r2", "w2", "b2"], ["y"])]
    inits = [nh.from_array(w1, "w1"), nh.from_array(np.zeros(c, np.float32) + 0.05, "b1"),
             nh.from_array(wd, "wd"), nh.from_array(bd, "bd"),
             nh.from_array(w2, "w2"), nh.from_array(np.zeros(12, np.float32), "b2")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 16, 16])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 12, 16, 16])], inits)
    p = tmp_path / f"chain_{act}.onnx"
    p.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8).SerializeToString())
    return p


def _run(model: bytes, x):
    it = make_interpreter(model, xnnpack=False)
    it.allocate_tensors()
    out = []
    for s in x:
        it.set_tensor(it.get_input_details()[0]["index"], s[None])
        it.invoke()
        out.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
    return np.concatenate(out)


def test_equalization_keeps_float_outputs_and_balances_ranges(tmp_path):
    p = _chain(tmp_path)
    convert(p, tmp_path / "f.tflite", float_only=True, validate=False)
    fb = (tmp_path / "f.tflite").read_bytes()
    g = tflite_to_graph(fb)
    found = eq.pairs(g)
    assert len(found) == 2  # conv -> dw and dw -> pw
    g2, n = eq.equalized_copy(g)
    assert n == 2
    i, j = found[1]
    c = eq._out_channels(g, g.ops[i])
    before = eq._out_ranges(g, g.ops[i])
    after1, after2 = eq._out_ranges(g2, g2.ops[i]), eq._in_ranges(g2, g2.ops[j], c)
    assert before.max() / before.min() > 50
    # the dw -> pw pair ends balanced (the earlier pair moves on each sweep, so within a few %)
    assert np.allclose(after1, after2, rtol=0.05), (after1, after2)
    assert after1.max() / after1.min() < before.max() / before.min() / 5
    x = np.random.default_rng(1).uniform(-1, 1, (6, 16, 16, 3)).astype(np.float32)
    y1, y2 = _run(fb, x), _run(g2.to_bytes(), x)
    assert np.max(np.abs(y1 - y2)) <= 1e-5 * max(1.0, np.max(np.abs(y1))), np.max(np.abs(y1 - y2))
    # the original graph is untouched
    assert np.array_equal(eq._out_ranges(g, g.ops[i]), before)


def test_relu6_pairs_are_skipped(tmp_path):
    p = _chain(tmp_path, act="Relu")
    convert(p, tmp_path / "f.tflite", float_only=True, validate=False)
    g = tflite_to_graph((tmp_path / "f.tflite").read_bytes())
    for op in g.ops:
        if op.op in ("CONV_2D", "DEPTHWISE_CONV_2D") and op.options.get("fused_activation_function") == 1:
            op.options["fused_activation_function"] = 3  # RELU6: min(x, 6) is not scale-equivariant
    assert eq.pairs(g) == []
    assert eq.equalized_copy(g) == (None, 0)


@pytest.mark.parametrize("method", ["minmax", "auto"])  # auto: its bias correction must not apply twice
def test_equalization_improves_int8_on_heldback_data(tmp_path, method):
    p = _chain(tmp_path)
    x = np.random.default_rng(2).uniform(-1, 1, (60, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "c.npy", x)
    kw = {"calib": str(tmp_path / "c.npy"), "calib_method": method, "validate": False, "use_cache": False}
    off = convert(p, tmp_path / "off.tflite", equalize=False, **kw)
    on = convert(p, tmp_path / "on.tflite", equalize=True, **kw)
    info = on.calibration["equalization"]
    assert info["pairs"] == 2 and info["kept"], info
    # the report's outputs are measured on held-back samples (not the calibration ones)
    assert on.outputs[0].sqnr_db > off.outputs[0].sqnr_db + 3, (on.outputs[0].sqnr_db, off.outputs[0].sqnr_db)

def test_dead_channels_are_left_alone(tmp_path):
    p = _chain(tmp_path, spread=0.0)
    convert(p, tmp_path / "f.tflite", float_only=True, validate=False)
    g = tflite_to_graph((tmp_path / "f.tflite").read_bytes())
    i, _ = eq.pairs(g)[1]
    w = g.tensors[g.ops[i].inputs[1]]
    w.data = w.data.copy()
    w.data[..., 0] *= 1e-20  # a dead depthwise channel
    dead = w.data[..., 0].copy()
    eq.equalize(g)
    assert np.array_equal(g.tensors[g.ops[i].inputs[1]].data[..., 0], dead)
    assert all(np.isfinite(g.tensors[t].data).all() for op in g.ops for t in op.inputs[1:] if t >= 0
               and g.tensors[t].data is not None)


def test_cli_no_equalize_skips_equalization(tmp_path):
    """`edgerun convert --no-equalize` does not try CLE; the default tries it and keeps it here."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    def cli(*args):  # the CLI's entry point in this interpreter, run from the repository root
        return subprocess.run([sys.executable, "-c", "import sys; from edgerun.cli import main; sys.exit(main())",
                               *map(str, args)], capture_output=True, text=True, timeout=300, check=False,
                              cwd=Path(__file__).resolve().parents[2])

    p = _chain(tmp_path)
    np.save(tmp_path / "c.npy", np.random.default_rng(2).uniform(-1, 1, (40, 3, 16, 16)).astype(np.float32))
    reps = {}
    for flag in ("--equalize", "--no-equalize"):
        r = cli("convert", p, "-o", tmp_path / f"{flag}.tflite", "--calib", tmp_path / "c.npy",
                "--calib-method", "minmax", "--no-cache", "--json", flag)
        assert r.returncode == 0, r.stderr[-2000:]
        reps[flag] = json.loads(r.stdout)["calibration"]
    assert reps["--equalize"]["equalization"]["kept"]
    assert "equalization" not in reps["--no-equalize"]
