"""Fuzzing the CLI's file inputs (issue 11 item 7): mutated models, .npy/.npz arrays, images and
bundles go through the library entry points the commands call (in-process, for speed), and each
attempt must end in success or an EdgerunError: never another exception (a crash), never a hang
(a per-attempt alarm), never runaway memory (the interpreter's budgets are set low here).
A small sample also goes through the console script.

Default run: EDGERUN_FUZZ_EXAMPLES (default 150) attempts per target, well under a minute.
Nightly-size run (10,000+ attempts over the five targets):

    EDGERUN_FUZZ_EXAMPLES=2000 python3 -m pytest -q -s tests/cli/test_fuzz_cli_inputs.py

prints one ``fuzz <target>: N attempts, ok A, refused R, crashes 0, hangs 0`` line per target;
docs/robustness.md records the last such run.
"""

import io
import os
import shutil
import signal
import subprocess
import traceback
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgerun.errors import EdgerunError
from edgerun.ir import ModelBuilder

EXAMPLES = int(os.environ.get("EDGERUN_FUZZ_EXAMPLES", "150"))
#: seconds one attempt may take before it counts as a hang
HANG_S = 20
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 150, database=None,
                    suppress_health_check=list(HealthCheck))
INTERESTING = [0, 1, 2, 3, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 24,
               1 << 28]


class Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise Hang()


@st.composite
def mutations(draw, seed: bytes):
    """Byte flips, overwrites with boundary values (sizes, offsets, counts), truncation, insertion."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        if not data:
            break
        kind = draw(st.sampled_from(["flip", "byte", "u32", "u16", "trunc", "insert", "digit"]))
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[pos] = draw(st.integers(0, 255))
        elif kind in ("u32", "u16"):
            n = 4 if kind == "u32" else 2
            v = draw(st.sampled_from(INTERESTING)) & ((1 << (8 * n)) - 1)
            data[pos:pos + n] = v.to_bytes(n, "little")
        elif kind == "trunc":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        else:  # text headers (.npy): a digit becomes a longer number
            if chr(data[pos]).isdigit():
                data[pos:pos + 1] = str(draw(st.sampled_from([0, 9, 65535, 2 ** 31, 2 ** 63, 10 ** 30]))).encode()
    return bytes(data)


class Tally:
    def __init__(self, name: str):
        self.name, self.n, self.ok, self.refused, self.crashes, self.hangs = name, 0, 0, 0, [], 0

    def attempt(self, fn) -> None:
        self.n += 1
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(HANG_S)
        try:
            fn()
            self.ok += 1
        except EdgerunError as e:
            assert "\n" not in str(e).strip(), f"multi-line error: {e!r}"
            self.refused += 1
        except Hang:
            self.hangs += 1
        except Exception:  # noqa: BLE001 - this is what the fuzzer looks for
            self.crashes.append(traceback.format_exc(limit=6))
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)

    def check(self) -> None:
        print(f"\nfuzz {self.name}: {self.n} attempts, ok {self.ok}, refused {self.refused}, "
              f"crashes {len(self.crashes)}, hangs {self.hangs}")
        assert not self.crashes, f"{len(self.crashes)} crashes; first:\n{self.crashes[0]}"
        assert self.hangs == 0


def _model(dtype="int8", shape=(1, 6, 6, 3)) -> bytes:
    b = ModelBuilder()
    q = (0.02, -3) if dtype == "int8" else None
    x = b.input("image", shape, dtype, q)
    y = b.tensor("y", shape, dtype, q)
    b.op("RELU", [x], [y])
    z = b.tensor("z", (1, int(np.prod(shape[1:]))), dtype, q)
    b.op("RESHAPE", [y, b.const("s", np.array([1, -1], np.int32))], [z], new_shape=(1, -1))
    b.output(z)
    return b.to_bytes()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzzseeds")
    (d / "m.tflite").write_bytes(_model())
    x = np.random.default_rng(0).integers(-128, 128, (1, 6, 6, 3)).astype(np.int8)
    np.save(d / "x.npy", x)
    np.save(d / "f.npy", x.astype(np.float32) * 0.02)
    np.savez(d / "x.npz", image=x)
    np.savez_compressed(d / "c.npz", image=x.astype(np.float32))
    from PIL import Image

    img = Image.fromarray(np.random.default_rng(1).integers(0, 256, (7, 9, 3)).astype(np.uint8))
    images = {}
    for fmt, suffix in (("PNG", ".png"), ("BMP", ".bmp"), ("JPEG", ".jpg"), ("GIF", ".gif"), ("PPM", ".ppm")):
        buf = io.BytesIO()
        img.save(buf, fmt)
        images[suffix] = buf.getvalue()
    from edgerun.bundle import write_bundle

    write_bundle(_model(), d / "m.bundle", target="cpu", labels=[f"l{i}" for i in range(108)],
                 preprocessing={"scale": 1 / 255})
    return d, images


@pytest.fixture(autouse=True)
def small_budgets(monkeypatch):
    """Runaway memory shows up as a refusal, not as a machine in swap."""
    monkeypatch.setenv("EDGERUN_MEMORY_BUDGET", "256M")
    monkeypatch.setenv("EDGERUN_WORK_BUDGET", "20000")
    import edgerun.preprocess as pre

    monkeypatch.setattr(pre, "MAX_IMAGE_PIXELS", 1 << 20)
    for var in ("EDGERUN_TRUSTED_KEY", "EDGERUN_SIGNING_KEY"):
        monkeypatch.delenv(var, raising=False)


def _run(model: Path, inputs: list[Path]) -> None:
    from edgerun.run import run

    run(model, inputs)


def _fuzz_whole_file(label: str, seed: bytes, path: Path, go) -> None:
    """Mutations of ``seed`` written to ``path``; each is one attempt of ``go()``, which reads it."""
    tally = Tally(label)

    @SETTINGS
    @given(mutations(seed))
    def one(blob):
        path.write_bytes(blob)
        tally.attempt(go)

    one()
    tally.check()


def _fuzz_inputs(label: str, files: dict[str, bytes], tmp_path: Path, model: Path) -> None:
    """One of ``files`` (name -> bytes) mutated, written under its name and given to ``model`` as input."""
    tally = Tally(label)

    @SETTINGS
    @given(st.sampled_from(sorted(files)), st.data())
    def one(name, data):
        p = tmp_path / name
        p.write_bytes(data.draw(mutations(files[name])))
        tally.attempt(lambda: _run(model, [p]))

    one()
    tally.check()


def test_fuzz_models(seeds, tmp_path):
    d, _ = seeds
    p = tmp_path / "m.tflite"

    def go():
        _run(p, [])
        from edgerun.bundle import write_bundle

        write_bundle(p, tmp_path / "out.bundle", golden_inputs=[])

    _fuzz_whole_file("models (run, package)", (d / "m.tflite").read_bytes(), p, go)


def test_fuzz_arrays(seeds, tmp_path):
    d, _ = seeds
    files = {n: (d / n).read_bytes() for n in ("x.npy", "f.npy", "x.npz", "c.npz")}
    _fuzz_inputs("arrays (.npy, .npz)", files, tmp_path, d / "m.tflite")


def test_fuzz_images(seeds, tmp_path):
    d, images = seeds
    files = {f"img{suffix}": blob for suffix, blob in images.items()}
    _fuzz_inputs("images (png, bmp, jpeg, gif, ppm)", files, tmp_path, d / "m.tflite")


def test_fuzz_bundles(seeds, tmp_path):
    """Raw mutations of a whole bundle: load (unsigned allowed), predict, verify, describe."""
    d, _ = seeds
    p = tmp_path / "m.bundle"

    def go():
        import edgerun
        from edgerun.bundle import describe

        describe(p)
        m = edgerun.load(p, allow_unsigned=True, delegates=[])
        m.predict(None)
        m.verify()

    _fuzz_whole_file("bundles (load, predict, verify)", (d / "m.bundle").read_bytes(), p, go)


def test_fuzz_npy_headers(seeds, tmp_path):
    """Targeted: .npy headers with other shapes, dtypes and orders (the text part of the file)."""
    d, _ = seeds
    tally = Tally("npy headers")
    raw = (d / "x.npy").read_bytes()
    body = raw[128:]

    @SETTINGS
    @given(st.lists(st.integers(-5, 2 ** 64), min_size=0, max_size=5),
           st.sampled_from(["|i1", "<f4", "<f8", "|b1", "<c8", "<U3", "|O", "<i8", ">f4", "<V4", "|S2", "<M8[s]"]),
           st.booleans(), st.integers(-64, 64))
    def one(shape, descr, fortran, cut):
        hdr = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {tuple(shape)}, }}"
        hdr = hdr.ljust(117) + "\n" if len(hdr) < 117 else hdr + "\n"
        blob = b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + body
        blob = blob[:len(blob) + cut] if cut < 0 else blob + bytes(cut)
        p = tmp_path / "h.npy"
        p.write_bytes(blob)
        tally.attempt(lambda: _run(d / "m.tflite", [p]))

    one()
    tally.check()


def test_console_script_sample(seeds, tmp_path):
    """A few mutated files through the real console script: exit 0, or one 'error:' line."""
    exe = shutil.which("edgerun")
    if exe is None:
        pytest.skip("the edgerun console script is not installed")
    d, images = seeds
    rng = np.random.default_rng(7)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGERUN_")}
    env.update(EDGERUN_MEMORY_BUDGET="256M", EDGERUN_WORK_BUDGET="20000")
    samples = [("m.tflite", (d / "m.tflite").read_bytes(), []), ("x.npy", (d / "x.npy").read_bytes(), "input"),
               ("x.npz", (d / "x.npz").read_bytes(), "input"), ("i.png", images[".png"], "input"),
               ("m.bundle", (d / "m.bundle").read_bytes(), [])]
    for name, seed, role in samples:
        blob = bytearray(seed)
        for _ in range(3):
            blob[int(rng.integers(len(blob)))] = int(rng.integers(256))
        p = tmp_path / name
        p.write_bytes(bytes(blob))
        args = ["run", str(d / "m.tflite"), "-i", str(p)] if role == "input" else ["run", str(p)]
        if name.endswith(".bundle"):
            args.append("--allow-unsigned")
        r = subprocess.run([exe, *args], capture_output=True, check=False, text=True, timeout=120, env=env)
        assert "Traceback" not in r.stderr, r.stderr[-2000:]
        if r.returncode != 0:
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr[-2000:]
