"""Peak memory growth of edgerun and LiteRT on one model, each in a fresh process reading the model from a file.

    python tools/peak_rss.py ~/.cache/edgerun/bench_int8/pose_detection.int8.tflite
    python tools/peak_rss.py mobilenet:1.0:224          # built here, written to a temporary file

Each child imports its engine, reads the model bytes, notes its resident set (VmRSS), then
creates the interpreter, allocates tensors and invokes five times on seeded random inputs; the
figure is its high-water mark (VmHWM) minus that resident set. A model built in code is built in
this parent process, so its construction does not set the children's high-water mark (in
``tools/bench.py`` the worker builds it itself, and the builder's transient arrays can hide the
engine's own peak). LiteRT runs its builtin kernels (XNNPACK off), one thread.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def settle() -> None:
    """Hand freed heap back to the kernel and reset the high-water mark to the resident set, so
    that the growth measured next is what the engine allocates. Without this the figure
    depended on how the imports ran: compiling modules from source (no .pyc yet) leaves about
    3 MB of freed heap that the interpreter's allocations then reuse without growing the
    resident set (iris landmark: edgerun 18.0 MB of growth from source, 20.9 MB from .pyc).

    ``numpy.random`` is imported here too (about 6 MB resident): the harness makes its random
    inputs after the baseline, and that import belongs to neither engine. Charged to both, it
    had pulled every ratio toward 1 (iris int8: 1.98x with it, 3.7x without)."""
    import ctypes
    import gc

    import numpy.random  # noqa: F401  (the harness's own inputs; see above)

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux 4.0+)
    except OSError:
        pass


def compile_package() -> None:
    """Byte-compile the edgerun package before the children import it. A module imported from
    source (no up-to-date .pyc, e.g. just edited with PYTHONDONTWRITEBYTECODE set) leaves freed
    compiler heap that the engine's allocations reuse without growing the resident set: face
    landmark int8 read 9.05 MB from source against 9.40 MB from .pyc. Installed packages run
    from .pyc, so that is the figure."""
    import compileall

    compileall.compile_dir(str(ROOT / "edgerun"), quiet=1)


def child(engine: str, path: str) -> int:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.path.insert(0, str(ROOT))
    if engine == "edgerun":
        from edgerun import Interpreter
    else:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    from edgerun.testing import random_inputs

    data = Path(path).read_bytes()
    settle()
    base = _kib("VmRSS")
    if engine == "edgerun":
        it = Interpreter(model_content=data)
    else:
        it = Interpreter(model_content=data, num_threads=1,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    details = it.get_input_details()
    for d, x in zip(details, random_inputs(details, seed=0)):
        it.set_tensor(d["index"], x)
    for _ in range(5):
        it.invoke()
    print(_kib("VmHWM") - base)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", help="a .tflite path or mobilenet:ALPHA:SIZE")
    ap.add_argument("--child", nargs=2, metavar=("ENGINE", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    if not args.model:
        ap.error("a model is needed")
    compile_package()
    tmp = None
    path = os.path.expanduser(args.model)
    if args.model.startswith("mobilenet:"):
        sys.path.insert(0, str(ROOT))
        from edgerun.testing import mobilenet_v1

        _, alpha, size = args.model.split(":")
        with tempfile.NamedTemporaryFile(suffix=".tflite", delete=False) as tmp:
            tmp.write(mobilenet_v1(float(alpha), int(size), classes=1000, dtype="int8"))
        path = tmp.name
    try:
        peaks = {}
        for engine in ("edgerun", "litert"):
            r = subprocess.run([sys.executable, __file__, "--child", engine, path],
                               capture_output=True, text=True, check=False)
            if r.returncode:
                print(f"{engine}: failed: {r.stderr.strip().splitlines()[-1:]}")
                return 1
            peaks[engine] = int(r.stdout.split()[-1])
    finally:
        if tmp is not None:
            os.unlink(tmp.name)
    print(f"{args.model}: edgerun {peaks['edgerun']:,} KiB, LiteRT {peaks['litert']:,} KiB, "
          f"ratio {peaks['edgerun'] / max(peaks['litert'], 1):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
