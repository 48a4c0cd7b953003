"""Calibration data handled as users expect (issue 9 item 6): image folders are read recursively
(class subfolders), and the evaluation hold-out is a seeded random draw, not the last files."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

from edgerun.convert import convert
from edgerun.convert.calibrate import image_files, open_source
from edgerun.convert.pipeline import HOLDOUT_SEED, split_samples
from edgerun.errors import ConversionError

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGERUN_CACHE_DIR", str(tmp_path / "cache"))


def _model(tmp_path):
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 4, 8, 8])],
                     [nh.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")])
    p = tmp_path / "m.onnx"
    p.write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8).SerializeToString())
    return p


def _class_folders(root, classes=("cat", "dog", "zebra"), per=4):
    from PIL import Image
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(per):
            Image.fromarray(RNG.integers(0, 256, (10, 10, 3)).astype(np.uint8)).save(root / c / f"{i}.png")


def test_image_folder_with_class_subfolders_is_read_recursively(tmp_path):
    imgs = tmp_path / "imgs"
    _class_folders(imgs)
    (imgs / "dog" / "deeper").mkdir()
    from PIL import Image
    Image.fromarray(np.zeros((10, 10, 3), np.uint8)).save(imgs / "dog" / "deeper" / "x.jpg")
    (imgs / ".hidden").mkdir()
    Image.fromarray(np.zeros((10, 10, 3), np.uint8)).save(imgs / ".hidden" / "skip.png")
    (imgs / "notes.txt").write_text("not an image")
    os.mkfifo(imgs / "pipe.png")  # a special file named like an image must not block
    files = image_files(imgs)
    assert len(files) == 13
    assert [f.relative_to(imgs).parts[0] for f in files] == ["cat"] * 4 + ["dog"] * 5 + ["zebra"] * 4
    src = open_source(str(imgs), [("x", (1, 8, 8, 3), (0, 2, 3, 1))], preprocessing={"size": [8, 8]})
    assert len(src) == 13 and "3 subfolders" in src.description
    rep = convert(_model(tmp_path), tmp_path / "o.tflite", calib=str(imgs),
                  preprocessing={"size": [8, 8], "mean": [127.5], "std": [127.5]})
    assert rep.calibration["samples"] == 13 and rep.calibration["heldout"] == 3


def test_empty_folder_tree_is_one_line_error(tmp_path):
    (tmp_path / "imgs" / "cat").mkdir(parents=True)
    (tmp_path / "imgs" / "cat" / "readme.txt").write_text("x")
    with pytest.raises(ConversionError, match="holds no images, in it or in its subfolders"):
        open_source(str(tmp_path / "imgs"), [("x", (1, 8, 8, 3), (0, 2, 3, 1))])


def test_holdout_is_a_seeded_random_draw_not_the_last_files():
    calib, held, n_hold = split_samples(100, 0.2, 200)
    assert n_hold == 20 and len(held) == 20 and len(calib) == 80
    assert set(calib).isdisjoint(held) and set(calib) | set(held) == set(range(100))
    assert held != list(range(80, 100))  # not the tail of a sorted folder
    # every quarter of the sorted order (a class folder each) is represented in the hold-out
    assert all(any(q * 25 <= i < (q + 1) * 25 for i in held) for q in range(4))
    assert split_samples(100, 0.2, 200) == (calib, held, n_hold)  # fixed seed: reproducible
    assert split_samples(100, 0.2, 200, seed=HOLDOUT_SEED + 1)[1] != held
    assert split_samples(100, 0.2, 5)[2] == 5  # max_eval caps it
    assert split_samples(1, 0.2, 200) == ([0], [0], 0)


def test_report_names_the_holdout_seed(tmp_path):
    calib = RNG.uniform(-1, 1, (10, 3, 8, 8)).astype(np.float32)
    rep = convert(_model(tmp_path), tmp_path / "o.tflite", calib=calib)
    assert rep.calibration["holdout_seed"] == HOLDOUT_SEED
    assert f"drawn at random, seed {HOLDOUT_SEED}" in rep.format()
    assert rep.to_dict()["calibration"]["holdout_seed"] == HOLDOUT_SEED
