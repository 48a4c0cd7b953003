"""Hostile and careless inputs through the installed console script (issue 11, traceback root causes
in the CLI input path): each ends in one `error:` line on stderr and a non-zero exit, never a Python
traceback; a valid model (GREATER with a bool output) gives the right answer."""

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from edgerun.ir import ModelBuilder
from tests.support.cli import cli
from tests.support.cli import one_line_error as _one_line_error

REPO = Path(__file__).resolve().parents[2]
REPRO = Path(__file__).resolve().parents[1] / "data" / "repro"
EDGERUN = shutil.which("edgerun")
pytestmark = pytest.mark.skipif(EDGERUN is None, reason="the edgerun console script is not installed")


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    assert p.returncode != 1, (p.returncode, p.stderr[-2000:])  # 1 means "a check ran and failed"
    _one_line_error(p, *needles)


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height (its pixel data is a few bytes)."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b""))


def _npy_header(shape, descr="<f4") -> bytes:
    hdr = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)}, }}".ljust(117) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    b = ModelBuilder()
    x = b.input("image", (1, 8, 8, 3), "int8", (0.02, 0))
    y = b.tensor("y", (1, 8, 8, 3), "int8", (0.02, 0))
    b.op("RELU", [x], [y])
    b.output(y)
    (d / "img.tflite").write_bytes(b.to_bytes())
    for dt in ("string", "int4", "complex64"):  # an input edgerun cannot make or read data for
        b = ModelBuilder()
        b.input("s", (1, 4), dt)
        x = b.input("x", (1, 4), "float32")
        y = b.tensor("y", (1, 4), "float32")
        b.op("RELU", [x], [y])
        b.output(y)
        (d / f"in_{dt}.tflite").write_bytes(b.to_bytes())
    b = ModelBuilder()
    x = b.input("x", (1, 4), "float32")
    y = b.tensor("y", (1, 4), "float32")
    b.op("RELU", [x], [y], version=99)  # edgerun runs it; LiteRT has no RELU version 99
    b.output(y)
    (d / "relu_v99.tflite").write_bytes(b.to_bytes())
    (d / "huge.png").write_bytes(_png_header(20000, 20000))
    (d / "100m.png").write_bytes(_png_header(10000, 10000))  # under Pillow's bomb limit: a warning there
    (d / "corrupt.png").write_bytes(_png_header(8, 8)[:40])
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(d / "ok.png")
    (d / "corrupt.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    os.mkfifo(d / "fifo")  # nobody ever writes to it: opening it for reading must not block
    (d / "deep.json").write_text("[" * 100000 + "]" * 100000)  # RecursionError in json.loads
    np.save(d / "obj.npy", np.array([1, None], dtype=object), allow_pickle=True)
    np.savez(d / "obj.npz", image=np.array([1, None], dtype=object))
    np.save(d / "complex.npy", np.zeros((1, 8, 8, 3), np.complex64))
    np.save(d / "str.npy", np.array(["a", "b"]))
    (d / "corrupt.npz").write_bytes(b"PK\x03\x04" + bytes(50))
    bomb = _npy_header((9699328, 1024))  # 37 GiB of float32 declared ...
    (d / "bomb.npy").write_bytes(bomb + bytes(200 - len(bomb)))  # ... in a 200-byte file
    assert (d / "bomb.npy").stat().st_size == 200
    (d / "zero_huge.npy").write_bytes(_npy_header((0, 2 ** 64)))  # 0 elements; a dim beyond int64 (fuzzer find)
    short = _npy_header((1, 8, 8, 3))
    (d / "short.npy").write_bytes(short + bytes(10))  # declares 192 float32, holds 10 bytes
    nan = np.zeros((1, 8, 8, 3), np.float32)
    nan[0, 1, 2, 0] = np.nan
    np.save(d / "nan.npy", nan)
    np.save(d / "nan_img.npy", nan[0] + 100)  # as an image for preprocessing
    return d


CASES = {
    # run: inputs edgerun cannot feed
    "string input": (["run", "{d}/in_string.tflite"], "string"),
    "int4 input": (["run", "{d}/in_int4.tflite"], "int4"),
    "complex input": (["run", "{d}/in_complex64.tflite"], "complex64"),
    "complex data": (["run", "{d}/img.tflite", "-i", "{d}/complex.npy"], "complex64"),
    "string data": (["run", "{d}/img.tflite", "-i", "{d}/str.npy"], "<U1"),
    # LiteRT cannot load what edgerun runs
    "compare litert": (["run", "{d}/relu_v99.tflite", "--compare", "litert"], "LiteRT cannot run"),
    # images
    "20000x20000 png": (["run", "{d}/img.tflite", "-i", "{d}/huge.png"], "huge.png"),
    "100 Mpixel png": (["run", "{d}/img.tflite", "-i", "{d}/100m.png"], "pixel limit"),
    "corrupt png": (["run", "{d}/img.tflite", "-i", "{d}/corrupt.png"], "cannot read image"),
    "nan image": (["run", "{d}/img.tflite", "-i", "{d}/ok.png", "--scale", "nan"], "finite"),
    # arrays
    "corrupt npy": (["run", "{d}/img.tflite", "-i", "{d}/corrupt.npy"], "not a valid .npy"),
    "object npy": (["run", "{d}/img.tflite", "-i", "{d}/obj.npy"], "object"),
    "object npz": (["run", "{d}/img.tflite", "-i", "{d}/obj.npz"], "object"),
    "corrupt npz": (["run", "{d}/img.tflite", "-i", "{d}/corrupt.npz"], "not a readable .npz"),
    "37 GiB npy": (["run", "{d}/img.tflite", "-i", "{d}/bomb.npy"], "declares"),
    "npy dim beyond int64": (["run", "{d}/img.tflite", "-i", "{d}/zero_huge.npy"], "bad shape"),
    "short npy": (["run", "{d}/img.tflite", "-i", "{d}/short.npy"], "holds 10"),
    "nan npy": (["run", "{d}/img.tflite", "-i", "{d}/nan.npy"], "NaN"),
    # options
    "mean x": (["run", "{d}/img.tflite", "-i", "{d}/ok.png", "--mean", "x"], "mean"),
    "std 0": (["run", "{d}/img.tflite", "-i", "{d}/ok.png", "--std", "0"], "std"),
    "huge size": (["run", "{d}/img.tflite", "-i", "{d}/ok.png", "--size", "99999999999999999999x1"], "size"),
    "preprocessing bad json": (["package", "{d}/img.tflite", "-o", "{d}/p.bundle", "--preprocessing", "{{bad"],
                               "not valid JSON"),
    "deep report json": (["package", "{d}/img.tflite", "-o", "{d}/r.bundle", "--report", "{d}/deep.json"],
                         "RecursionError"),
    "deep preprocessing json": (["package", "{d}/img.tflite", "-o", "{d}/r.bundle", "--preprocessing",
                                 "{d}/deep.json"], "not valid JSON"),
    "calib /dev/zero": (["package", "{d}/img.tflite", "-o", "{d}/c.bundle", "--calib", "/dev/zero"],
                        "not a regular file"),
    "calib fifo": (["package", "{d}/img.tflite", "-o", "{d}/c.bundle", "--calib", "{d}/fifo"], "not a regular file"),
    "labels /dev/zero": (["package", "{d}/img.tflite", "-o", "{d}/c.bundle", "--labels", "/dev/zero"],
                         "not a regular file"),
    "sign key fifo": (["package", "{d}/img.tflite", "-o", "{d}/c.bundle", "--sign", "{d}/fifo"], "not a regular file"),
    "report fifo": (["package", "{d}/img.tflite", "-o", "{d}/c.bundle", "--report", "{d}/fifo"], "not a regular file"),
    "model fifo": (["package", "{d}/fifo", "-o", "{d}/c.bundle"], "not a regular file"),
    "npy fifo": (["run", "{d}/img.tflite", "-i", "{d}/fifo"], "fifo"),
    "run fifo": (["run", "{d}/fifo"], "not a regular file"),
    "run /dev/zero": (["run", "/dev/zero"], "not a regular file"),
    "inspect fifo": (["inspect", "{d}/fifo"], "not a regular file"),
    "check /dev/zero": (["check", "/dev/zero", "--target", "rpi"], "not a regular file"),
    "golden bomb": (["package", "{d}/img.tflite", "-o", "{d}/g.bundle", "--golden", "{d}/bomb.npy"], "declares"),
    # directories and missing folders
    "dir as model": (["run", "{d}"], "directory"),
    "dir as input": (["run", "{d}/img.tflite", "-i", "{d}"], "directory"),
    "dir as package -o": (["package", "{d}/img.tflite", "-o", "{d}"], "directory"),
    "dir as convert -o": (["convert", "{d}/img.tflite", "-o", "{d}"], "directory"),
    "inspect dir": (["inspect", "{d}"], "directory"),
    "keygen missing dir": (["keygen", "-o", "/nonexistent-edgerun-dir/k"], "does not exist"),
    # outputs that are the input
    "convert -o input": (["convert", "{d}/img.tflite", "-o", "{d}/img.tflite"], "same file as"),
    "convert --report input": (["convert", "{d}/img.tflite", "-o", "{d}/x.tflite", "--report", "{d}/img.tflite"],
                               "same file as"),
    "package -o input": (["package", "{d}/img.tflite", "-o", "{d}/img.tflite"], "same file as"),
    "bench -n 0": (["bench", "{d}/img.tflite", "-n", "0"], ""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_line_error(files, case):
    args, needle = CASES[case]
    before = {p.name: p.stat().st_mtime_ns for p in files.iterdir()}
    p = cli(*[a.format(d=files) for a in args])
    one_line_error(p, needle)
    after = {p.name: p.stat().st_mtime_ns for p in files.iterdir()}
    assert after == before  # nothing written, nothing overwritten


def test_input_shape_out_of_range(tmp_path):
    onnx_model = REPO / "models" / "digits_cnn.onnx"
    if not onnx_model.exists():
        pytest.skip("models/digits_cnn.onnx is missing")
    for shape in ("input:-1,1,28,28", "input:99999999999999999999999,1,28,28"):
        p = cli("convert", onnx_model, "-o", tmp_path / "o.tflite", "--float", "--input-shape", shape)
        one_line_error(p, "--input-shape")
    assert not (tmp_path / "o.tflite").exists()


def test_misnamed_tflite_bundle_not_overwritten(files, tmp_path):
    """`package m.bundle` where m.bundle is really a .tflite: the default output is the input itself."""
    m = tmp_path / "m.bundle"
    m.write_bytes((files / "img.tflite").read_bytes())
    one_line_error(cli("package", m), "same file as")
    assert m.read_bytes() == (files / "img.tflite").read_bytes()


def test_keygen_refuses_planted_symlink(tmp_path):
    (tmp_path / "k.pub").symlink_to(tmp_path / "elsewhere")
    one_line_error(cli("keygen", "-o", tmp_path / "k"), "symlink")
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "k.key").exists()
    one_line_error(cli("keygen", "-o", tmp_path / "k", "--force"), "symlink")
    assert not (tmp_path / "elsewhere").exists()


def test_greater_bool_runs_correctly(tmp_path):
    """repro/greater_bool.tflite: a valid model with a bool output gives LiteRT's answer."""
    model = REPRO / "greater_bool.tflite"
    a = np.array([1.0, -2.0, 3.5, 0.0], np.float32)
    b = np.array([0.5, -1.0, 3.5, -0.25], np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    p = cli("run", model, "-i", tmp_path / "a.npy", "-i", tmp_path / "b.npy", "--json")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    (out,) = json.loads(p.stdout)["outputs"]
    from edgerun.testing import run_litert

    (want,) = run_litert(model.read_bytes(), [a, b])
    assert out["dtype"] == "bool" and out["values"] == want.tolist() == [True, False, False, True]
    p = cli("run", model)  # random inputs, text output (top-k must not choke on bool)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr


def test_python_module_entry_matches(files):
    """`python -m edgerun` takes the same path as the console script."""
    p = subprocess.run([sys.executable, "-m", "edgerun", "run", files / "img.tflite", "-i", files / "bomb.npy"],
                       capture_output=True, check=False, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    one_line_error(p, "declares")
