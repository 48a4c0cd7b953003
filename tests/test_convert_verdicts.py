"""The convert report says which kernel path its figures come from: edgerun's own kernels
(bit-exact with LiteRT's reference kernels) by default, the target's XNNPACK path beside them."""

from pathlib import Path

import numpy as np

from edgerun.convert import convert

REPO = Path(__file__).resolve().parents[1]


def test_report_figures_come_from_edgerun_kernels(tmp_path):
    rep = convert(REPO / "models/digits_cnn.onnx", tmp_path / "m.tflite", calib=str(REPO / "models/calib_digits.npz"),
                  target="rpi")
    assert rep.ok and rep.kernel_path == "edgerun" and "edgerun's kernels" in rep.format()
    assert "loads and runs" in rep.litert_check
    d = rep.to_dict()
    assert d["kernel_path"] == "edgerun" and d["ok"] is True and d["failures"] == []
    # the path the figures describe is the reference path: edgerun's kernels == LiteRT BUILTIN_REF
    from edgerun.litert import make_interpreter
    from edgerun.runtime.interpreter import Interpreter

    model = (tmp_path / "m.tflite").read_bytes()
    runners = [Interpreter(model_content=model), make_interpreter(model, reference=True)]
    for it in runners:
        it.allocate_tensors()
    d_in = runners[1].get_input_details()[0]
    s, zp = d_in["quantization"]
    with np.load(REPO / "models/calib_digits.npz") as z:
        xs = z[z.files[0]][:10]
    for x in xs:
        q = np.clip(np.round(np.transpose(x[None], (0, 2, 3, 1)) / s) + zp, -128, 127).astype(np.int8)
        outs = []
        for it in runners:
            it.set_tensor(it.get_input_details()[0]["index"], q)
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]).copy())
        assert np.array_equal(outs[0], outs[1])
    if rep.delegated is not None:  # XNNPACK rounds differently here: its figures sit beside
        assert rep.delegated["path"] == "xnnpack" and "xnnpack path" in rep.format()
        assert [o.name for o in rep.delegated["outputs"]] == [o.name for o in rep.outputs]


def test_no_target_reports_no_delegated_path(tmp_path):
    rep = convert(REPO / "models/digits_cnn.onnx", tmp_path / "m.tflite", calib=str(REPO / "models/calib_digits.npz"))
    assert rep.delegated is None and rep.to_dict()["delegated"] is None
