#!/usr/bin/env python3
"""Benchmark corpus: edgerun against LiteRT (XNNPACK off and on) on public real models.

    python tools/bench.py                          # the whole corpus, 30 timed rounds
    python tools/bench.py --only mlperf --rounds 50
    python tools/bench.py --write docs/benchmarks.md --profile 2   # into the latency section

Each engine runs in its own worker process (so peak memory does not depend on which engine ran
first), all on one thread (OPENBLAS_NUM_THREADS=1, LiteRT num_threads=1). The coordinator
interleaves them: every round asks each worker, in rotating order, for a few invokes and keeps
the per-invoke times; the figure per engine is the median over all rounds. Each invoke's thread
CPU time is kept too (LiteRT runs on the calling thread with num_threads=1): on a loaded machine
the CPU-time ratio is less sensitive to waiting for a core than the wall-clock one. Every worker feeds
the same seeded random inputs. Peak memory is the growth of the worker's resident set from just
after it has read the model bytes (imports done, freed heap handed back to the kernel and the
high-water mark reset: ``settle``) to its high-water mark (VmHWM) after the last invoke.

The corpus (models missing on this machine are left out of the tables):

* MediaPipe vision graphs from the ``mediapipe`` 0.10.14 wheel (``tests/runtime/test_external_models.py``
  caches it in ~/.cache/edgerun/fixtures), converted to int8 by ``edgerun convert`` (minmax
  calibration on random inputs: a speed corpus, not an accuracy one) into
  ~/.cache/edgerun/bench_int8/; their float originals run too (int8 vs float). The XNNPACK
  columns (LiteRT+XNNPACK, ``--xnnpack-delegate``) run the same graphs converted with
  ``--target rpi`` instead (~/.cache/edgerun/bench_int8_rpi/: what a user deploying to XNNPACK
  gets; e.g. int8 PRELU written for XNNPACK, see ``edgerun.convert.graph.float_prelus``);
* the MLPerf Tiny reference int8 models (github.com/mlcommons/tiny,
  benchmark/training/*/trained_models/), copied into ~/.cache/edgerun/mlperf_tiny/;
* microWakeWord streaming models from the ``pymicro-wakeword`` wheel;
* MobileNet-v1 1.0/224 int8 built in code (``edgerun.testing.mobilenet_v1``);
* PaddleOCR's PP-OCRv4 text detector (DBNet-style, from the ``rapidocr-onnxruntime`` wheel,
  ``tools/text_detector.py``) converted by ``edgerun convert`` at 320 x 320: int8 (minmax on
  synthetic document pages) and --float; for the XNNPACK columns int8 with ``--target rpi`` too.

Ratio = edgerun median / LiteRT median (lower is better); the geometric means are per group.
A second table puts each int8 model beside its float original on every engine (CPU-time medians
with their interquartile range, int8 / float: below 1 means int8 is faster).
``--xnnpack-delegate`` adds a fourth worker, ``edgerun.Interpreter(delegates=["xnnpack"])``, and a
table of its overhead against LiteRT+XNNPACK alone.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache" / "edgerun"
FIXTURES = Path(os.environ.get("EDGERUN_FIXTURES", CACHE / "fixtures"))
MEDIAPIPE = FIXTURES / "mediapipe-0.10.14"
WAKEWORD = FIXTURES / "pymicro-wakeword-2.5.0"
INT8_DIR = CACHE / "bench_int8"
#: the same graphs converted with ``--target rpi``, for the XNNPACK columns
RPI_DIR = CACHE / "bench_int8_rpi"
#: the target the XNNPACK columns' conversions are made for
XNNPACK_TARGET = "rpi"
MLPERF = CACHE / "mlperf_tiny"

MEDIAPIPE_MODELS = ("face_detection_short_range", "palm_detection_lite", "face_landmark", "iris_landmark",
                    "hand_landmark_lite", "pose_detection")
MLPERF_MODELS = {"vww_96_int8": "visual wake words (MobileNet-v1 0.25/96)",
                 "pretrainedResnet_quant": "image classification (ResNet-8)",
                 "kws_ref_model": "keyword spotting (DS-CNN)",
                 "ad01_int8": "anomaly detection (FC autoencoder)",
                 "str_ww_ref_model": "streaming wake word"}
ENGINES = ("edgerun", "litert", "litert-xnnpack")
#: with --xnnpack-delegate: edgerun.Interpreter(delegates=["xnnpack"]), compared with LiteRT+XNNPACK alone
DELEGATED = "edgerun-xnnpack"


# -- corpus ------------------------------------------------------------------------------------

def _converted(name: str, target: str | None = None) -> Path | None:
    """The int8 conversion of a MediaPipe graph (for ``target`` when given), made with
    ``edgerun convert`` when missing."""
    src = MEDIAPIPE / f"{name}.tflite"
    out_dir = RPI_DIR if target else INT8_DIR
    dst = out_dir / f"{name}.int8.tflite"
    if dst.exists():
        return dst
    if not src.exists():
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "edgerun", "convert", str(src), "-o", str(dst), "--calib", "random",
                        "--calib-method", "minmax"] + (["--target", target] if target else []),
                       cwd=ROOT, capture_output=True, text=True, check=False)
    if r.returncode != 0 or not dst.exists():
        print(f"convert {name}: failed: {(r.stdout + r.stderr).strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return dst


#: PaddleOCR's PP-OCRv4 text detector (tools/text_detector.py), converted at this input size
TEXT_DET_SIZE = 320


def _text_detector(float_only: bool = False, target: str | None = None) -> Path | None:
    """The PP-OCRv4 det model (rapidocr-onnxruntime wheel) converted by ``edgerun convert`` at
    320 x 320: int8 (minmax on 24 synthetic document pages, as the MediaPipe graphs; for
    ``target`` when given) or --float."""
    dst = (RPI_DIR if target else INT8_DIR) / ("ppocr_det.float.tflite" if float_only else "ppocr_det.int8.tflite")
    if dst.exists():
        return dst
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from tools.text_detector import detector_path, document_images
    try:
        src = detector_path()
    except RuntimeError as e:
        print(f"text detector: {e}", file=sys.stderr)
        return None
    INT8_DIR.mkdir(parents=True, exist_ok=True)
    dst.parent.mkdir(parents=True, exist_ok=True)
    calib = INT8_DIR / "ppocr_det_calib.npz"
    if not calib.exists():
        np.savez(calib, x=document_images(24, TEXT_DET_SIZE, TEXT_DET_SIZE))
    cmd = [sys.executable, "-m", "edgerun", "convert", str(src), "-o", str(dst),
           "--input-shape", f"1,3,{TEXT_DET_SIZE},{TEXT_DET_SIZE}"]
    cmd += ["--float"] if float_only else ["--calib", str(calib), "--calib-method", "minmax"]
    cmd += ["--target", target] if target else []
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if r.returncode != 0 or not dst.exists():
        print(f"convert text detector: failed: {(r.stdout + r.stderr).strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return dst


class Entry(NamedTuple):
    group: str
    name: str
    #: model path or builder spec (``mobilenet:ALPHA:SIZE`` is built in code)
    spec: str
    #: what the XNNPACK engines run: the ``--target rpi`` conversion where there is one, else ``spec``
    xspec: str
    #: (model, "int8" | "float") for the int8 vs float table, or None
    pair: tuple[str, str] | None = None


def corpus(with_float: bool = True) -> list[Entry]:
    """The models found or made on this machine (missing ones are left out)."""
    out = []
    for name in MEDIAPIPE_MODELS:
        p = _converted(name)
        if p is not None:
            x = _converted(name, XNNPACK_TARGET) or p
            out.append(Entry("mediapipe int8", f"{name} int8", str(p), str(x), (name, "int8")))
        f = MEDIAPIPE / f"{name}.tflite"
        if with_float and f.exists():
            out.append(Entry("mediapipe float", f"{name} float (fp16 weights)", str(f), str(f), (name, "float")))
    for name, what in MLPERF_MODELS.items():
        if (MLPERF / f"{name}.tflite").exists():
            p = str(MLPERF / f"{name}.tflite")
            out.append(Entry("mlperf tiny", f"{name} ({what})", p, p))
    for p in sorted(WAKEWORD.glob("*.tflite"))[:2]:
        out.append(Entry("microwakeword", f"microWakeWord {p.stem}", str(p), str(p)))
    p = _built_model("mobilenet:1.0:224")
    out.append(Entry("mobilenet", "mobilenet_v1 1.0/224 int8 (built in code)", p, p))
    p = _text_detector()
    if p is not None:
        x = _text_detector(target=XNNPACK_TARGET) or p
        out.append(Entry("text detector", f"ppocr_det {TEXT_DET_SIZE}x{TEXT_DET_SIZE} int8 (PP-OCRv4 det)", str(p), str(x),
                         ("ppocr_det", "int8")))
    p = _text_detector(float_only=True) if with_float else None
    if p is not None:
        out.append(Entry("text detector float", f"ppocr_det {TEXT_DET_SIZE}x{TEXT_DET_SIZE} float", str(p), str(p),
                         ("ppocr_det", "float")))
    return out


def _built_model(spec: str) -> str:
    """A model built in code, written once to a file in the cache: the workers then read a file like
    every other corpus model (building it inside a worker raised its resident-set high-water mark
    with the builder's temporaries, which the peak-memory column then counted: 13.8 MB for LiteRT
    on MobileNet-v1 against 2.9 MB from the file)."""
    path = INT8_DIR / (spec.replace(":", "_") + ".tflite")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(_model_bytes(spec))
        tmp.replace(path)
    return str(path)


def _model_bytes(spec: str) -> bytes:
    if spec.startswith("mobilenet:"):
        from edgerun.testing import mobilenet_v1

        _, alpha, size = spec.split(":")
        return mobilenet_v1(float(alpha), int(size), classes=1000, dtype="int8")
    return Path(spec).read_bytes()


# -- worker (one engine, one model, its own process) ---------------------------------------------

def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def worker(engine: str, spec: str) -> int:
    if engine in ("edgerun", DELEGATED):
        from edgerun import Interpreter
    else:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    from edgerun.testing import random_inputs
    from tools.peak_rss import settle

    data = _model_bytes(spec)
    settle()
    base = _status_kib("VmRSS")
    if engine == "edgerun":
        it = Interpreter(model_content=data)
    elif engine == DELEGATED:
        it = Interpreter(model_content=data, delegates=["xnnpack"])
    elif engine == "litert":
        it = Interpreter(model_content=data, num_threads=1,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    else:
        it = Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    details = it.get_input_details()
    for d, x in zip(details, random_inputs(details, seed=0)):
        it.set_tensor(d["index"], x)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        times, cpu = [], []
        for _ in range(int(cmd[1])):
            c0, t0 = time.thread_time(), time.perf_counter()
            it.invoke()
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        print(json.dumps({"times": times, "cpu": cpu}), flush=True)
    print(json.dumps({"peak_kib": _status_kib("VmHWM") - base}), flush=True)
    return 0


class _Worker:
    def __init__(self, engine: str, spec: str):
        self.engine = engine
        self.p = subprocess.Popen([sys.executable, __file__, "--worker", engine, spec], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.error = None
        msg = self._read()
        if msg is None or not msg.get("ready"):
            self.error = self._why()

    def _read(self):
        line = self.p.stdout.readline()
        return json.loads(line) if line else None

    def _why(self) -> str:
        self.p.kill()
        err = self.p.stderr.read().strip().splitlines()
        return err[-1] if err else "worker died"

    def run(self, n: int) -> None:
        if self.error:
            return
        self.p.stdin.write(f"run {n}\n")
        self.p.stdin.flush()
        msg = self._read()
        if msg is None:
            self.error = self._why()
            return
        self.times += msg["times"]
        self.cpu += msg["cpu"]

    def finish(self) -> int | None:
        if self.error:
            return None
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        msg = self._read()
        self.p.wait()
        return msg["peak_kib"] if msg else None


#: engines that run an entry's ``xspec`` (the XNNPACK-target conversion)
XNNPACK_ENGINES = ("litert-xnnpack", DELEGATED)


def measure(spec: str, rounds: int, warmup: int, budget_s: float, engines=ENGINES, xspec: str | None = None) -> dict:
    """Median ms and peak memory growth (KiB) per engine, the engines interleaved round by round;
    the XNNPACK engines run ``xspec`` when given."""
    workers = [_Worker(e, xspec if xspec and e in XNNPACK_ENGINES else spec) for e in engines]
    for w in workers:
        w.run(warmup)
        w.times.clear()
        w.cpu.clear()
    # invokes per round: about 10 ms of each engine, at least 1
    t_start = time.perf_counter()
    for r in range(rounds):
        order = workers[r % len(workers):] + workers[:r % len(workers)]
        for w in order:
            w.run(1 if not w.times or w.times[-1] > 0.01 else max(1, int(0.01 / max(w.times[-1], 1e-6))))
        if time.perf_counter() - t_start > budget_s:
            break
    out = {}
    for w in workers:
        peak = w.finish()
        ts, cs = sorted(w.times), sorted(w.cpu)
        out[w.engine] = {"error": w.error} if w.error else {
            "ms": 1e3 * ts[len(ts) // 2], "cpu_ms": 1e3 * cs[len(cs) // 2], "n": len(ts), "peak_kib": peak,
            "cpu_q1": 1e3 * cs[len(cs) // 4], "cpu_q3": 1e3 * cs[(3 * len(cs)) // 4]}
    return out


def profile(spec: str, seconds: float = 3.0, max_runs: int = 300) -> list[tuple[str, float]]:
    """edgerun's per-op-type milliseconds per invoke (in this process), averaged over as many
    invokes as fit in ``seconds`` (at least 3, at most ``max_runs``) after 3 warm-up invokes."""
    from edgerun import Interpreter
    from edgerun.testing import random_inputs

    it = Interpreter(model_content=_model_bytes(spec))
    it.allocate_tensors()
    details = it.get_input_details()
    for d, x in zip(details, random_inputs(details, seed=0)):
        it.set_tensor(d["index"], x)
    for _ in range(3):
        it.invoke()
    it.set_profiling(True)
    runs, t0 = 0, time.perf_counter()
    while runs < 3 or (runs < max_runs and time.perf_counter() - t0 < seconds):
        it.invoke()
        runs += 1
    return sorted(((op, 1e3 * s / runs) for op, s in it.profile.items()), key=lambda kv: -kv[1])


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy

    try:
        from importlib.metadata import version

        litert = version("ai-edge-litert")
    except ImportError:  # importlib.metadata.PackageNotFoundError is an ImportError
        litert = "?"
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {numpy.__version__}, "
            f"ai-edge-litert {litert}, {platform.system()} {platform.release()}")


def _int8_vs_float(pairs: dict) -> list[str]:
    """Markdown lines: each int8 model beside its float original, per engine (CPU-time medians with
    their interquartile range; int8 / float below 1 means int8 is faster)."""
    both = {k: v for k, v in pairs.items() if "int8" in v and "float" in v}
    if not both:
        return []

    def cell(r):
        return f"{r['cpu_ms']:.3f} ({r['cpu_q1']:.3f}-{r['cpu_q3']:.3f})" if "cpu_ms" in r else "-"

    lines = ["", (f"int8 vs float, CPU-time ms per invoke, median (interquartile range); the XNNPACK column runs the "
                  f"int8 graphs converted with --target {XNNPACK_TARGET}:"), "",
             ("| model | edgerun int8 | edgerun float | int8 / float | LiteRT int8 | LiteRT float | int8 / float | "
              "LiteRT+XNNPACK int8 | LiteRT+XNNPACK float | int8 / float |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for model, v in both.items():
        cells = [model]
        for eng in ENGINES:
            a, b = v["int8"][eng], v["float"][eng]
            cells += [cell(a), cell(b), f"{a['cpu_ms'] / b['cpu_ms']:.2f}" if "cpu_ms" in a and "cpu_ms" in b else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30, help="interleaved rounds per model")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=60.0, help="seconds of rounds per model at most")
    ap.add_argument("--only", default="", help="substring filter on group or model names")
    ap.add_argument("--no-float", action="store_true", help="skip the float MediaPipe originals")
    ap.add_argument("--profile", type=int, default=0, help="per-op profiles of the N slowest models (by ratio)")
    ap.add_argument("--write", type=Path, help="append the tables as a markdown section to this file")
    ap.add_argument("--xnnpack-delegate", action="store_true",
                    help="also run edgerun with delegates=['xnnpack'] and compare it with LiteRT+XNNPACK alone")
    ap.add_argument("--worker", nargs=2, metavar=("ENGINE", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.worker:
        return worker(*args.worker)
    from tools.peak_rss import compile_package

    compile_package()  # the workers import edgerun from .pyc (see tools/peak_rss.py)

    load0 = os.getloadavg()[0]
    rows, ratios, cpu_ratios, delegated, pairs = [], {}, {}, [], {}
    engines = ENGINES + ((DELEGATED,) if args.xnnpack_delegate else ())
    entries = [c for c in corpus(not args.no_float) if args.only in c.group or args.only in c.name]
    for group, name, spec, xspec, pair in entries:
        res = measure(spec, args.rounds, args.warmup, args.budget, engines, xspec)
        if pair is not None:
            pairs.setdefault(pair[0], {})[pair[1]] = res
        e, lr, lx = (res[k] for k in ENGINES)
        if args.xnnpack_delegate:
            d = res[DELEGATED]
            delegated.append([name] + ([f"{lx['ms']:.3f}", f"{d['ms']:.3f}", f"{(d['ms'] / lx['ms'] - 1) * 100:+.1f}%",
                                        f"{(d['cpu_ms'] / lx['cpu_ms'] - 1) * 100:+.1f}%"]
                                       if "ms" in d and "ms" in lx else ["-", d.get("error", "-"), "-", "-"]))
        cells = [name]
        for r in (e, lr, lx):
            cells.append(f"{r['ms']:.3f}" if "ms" in r else f"error: {r['error']}")
        if "ms" in e and "ms" in lr:
            ratio = e["ms"] / lr["ms"]
            ratios.setdefault(group, []).append((ratio, name, spec))
            cpu_ratios.setdefault(group, []).append(e["cpu_ms"] / lr["cpu_ms"])
            cells.append(f"{ratio:.2f}x")
            cells.append(f"{e['cpu_ms'] / lr['cpu_ms']:.2f}x")
        else:
            cells += ["-", "-"]
        cells.append(f"{e['ms'] / lx['ms']:.2f}x" if "ms" in e and "ms" in lx else "-")
        for r in (e, lr, lx):
            cells.append(f"{r['peak_kib']:,}" if r.get("peak_kib") is not None else "-")
        cells.append(f"{e['peak_kib'] / max(lr['peak_kib'], 1):.2f}x"
                     if e.get("peak_kib") is not None and lr.get("peak_kib") is not None else "-")
        rows.append(cells)
        print(" | ".join(cells), flush=True)
    load1 = os.getloadavg()[0]

    header = ("model", "edgerun ms", "LiteRT ms (XNNPACK off)", f"LiteRT ms (XNNPACK on; --target {XNNPACK_TARGET} conversions)",
              "edgerun / LiteRT",
              "same, CPU time", "edgerun / LiteRT+XNNPACK", "edgerun peak KiB", "LiteRT peak KiB", "LiteRT+XNNPACK peak KiB",
              "memory edgerun / LiteRT")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines.append("")
    lines.append("| group | models | geometric mean edgerun / LiteRT | same, CPU time | worst |")
    lines.append("|---|---|---|---|---|")
    for group, rs in ratios.items():
        worst = max(rs)
        lines.append(f"| {group} | {len(rs)} | {_geomean([r for r, _, _ in rs]):.2f}x | "
                     f"{_geomean(cpu_ratios[group]):.2f}x | {worst[0]:.2f}x ({worst[1]}) |")
    lines += _int8_vs_float(pairs)
    if delegated:
        lines += ["", ("edgerun with delegates=['xnnpack'] against LiteRT+XNNPACK alone (overhead = edgerun's "
                       "median / LiteRT's - 1; the 5 % target applies to models above 0.3 ms):"), "",
                  "| model | LiteRT+XNNPACK ms | edgerun delegates=['xnnpack'] ms | overhead | same, CPU time |",
                  "|---|---|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in delegated]
    slowest = sorted((r for rs in ratios.values() for r in rs), reverse=True)[:args.profile]
    for ratio, name, spec in slowest:
        lines.append("")
        lines.append(f"Per-op profile, {name} ({ratio:.2f}x), edgerun ms per invoke by op type:")
        lines.append("")
        lines.append("| op | ms |")
        lines.append("|---|---|")
        lines += [f"| {op} | {ms:.3f} |" for op, ms in profile(spec)[:8]]
    table = "\n".join(lines)
    print(table)
    if args.write:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        cmd = " ".join(["python", "tools/bench.py"] + sys.argv[1:])
        section = (f"\n### Corpus run, {stamp}\n\nMachine: {machine()}. Load average {load0:.1f} at the start, "
                   f"{load1:.1f} at the end. Command: `{cmd}`.\n\n{table}\n")
        _insert_section(args.write, section)
    return 0


def _insert_section(path: Path, section: str, heading: str = "## Interpreter latency vs LiteRT") -> None:
    """Insert ``section`` at the end of the ``heading`` section of a markdown file (appended to
    the file when the heading is missing)."""
    text = path.read_text() if path.exists() else ""
    start = text.find(heading)
    if start < 0:
        path.write_text(text + section)
        return
    nxt = text.find("\n## ", start + len(heading))
    at = len(text) if nxt < 0 else nxt + 1
    path.write_text(text[:at].rstrip("\n") + "\n" + section + "\n" + text[at:])


if __name__ == "__main__":
    sys.exit(main())
