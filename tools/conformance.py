"""ONNX conformance: the backend test data that ships inside the ``onnx`` wheel, through edgerun convert.

For every case of ``onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple,light}``:

* convert to a float TFLite (``--float``, NCHW inputs so the stored inputs feed as they are);
* run it in LiteRT and compare with the stored expected outputs (``light``: with ONNX Runtime on the
  same model, since its ConstantOfShape weights are replaced by seeded random initializers) within
  ``RTOL`` relative to the output's largest magnitude (``RTOL_LIGHT`` for light);
* a case is ``pass``, ``refuse`` (edgerun raised an EdgerunError: the one-line reason is kept) or
  ``wrong`` (converted, but the values differ: a bug, never acceptable).

``python tools/conformance.py`` prints the table; ``--write`` replaces the table in docs/convert.md
between its markers; ``--int8 N`` also converts N passing cases to int8 with random calibration and
checks LiteRT's reference kernels and edgerun give identical bytes.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SUITES = ("pytorch-converted", "pytorch-operator", "simple", "light")
RTOL = 1e-4
RTOL_LIGHT = 1e-3
DOC = Path(__file__).resolve().parent.parent / "docs" / "convert.md"
BEGIN, END = "<!-- conformance:begin -->", "<!-- conformance:end -->"


def data_root() -> Path:
    import onnx
    return Path(onnx.__file__).parent / "backend" / "test" / "data"


@dataclass
class Case:
    suite: str
    name: str
    model: Path
    inputs: list = field(default_factory=list)   # stored inputs, or None (light: generated)
    outputs: list = field(default_factory=list)  # stored outputs, or None (light: ONNX Runtime)


@dataclass
class Result:
    case: Case
    status: str          # pass | refuse | wrong
    detail: str = ""
    err: float = 0.0     # worst |got - want| / max|want|
    seconds: float = 0.0
    int8: str = ""       # "", "exact", or what went wrong


def _read_pb(path):
    import onnx
    from onnx import numpy_helper
    t = onnx.TensorProto()
    t.ParseFromString(Path(path).read_bytes())
    return numpy_helper.to_array(t)


def cases(suites=SUITES) -> list[Case]:
    root = data_root()
    out = []
    for suite in suites:
        if suite == "light":
            for p in sorted((root / "light").glob("light_*.onnx")):
                out.append(Case(suite, p.stem, p, None, None))
            continue
        for d in sorted((root / suite).iterdir()):
            m = d / "model.onnx"
            if not m.exists():
                continue
            ds = d / "test_data_set_0"
            ins = [_read_pb(p) for p in sorted(glob.glob(str(ds / "input_*.pb")), key=_pb_index)]
            outs = [_read_pb(p) for p in sorted(glob.glob(str(ds / "output_*.pb")), key=_pb_index)]
            out.append(Case(suite, d.name, m, ins, outs))
    return out


def _pb_index(p):
    return int(Path(p).stem.split("_")[-1])


def fill_light(model, seed: int = 0):
    """``light`` graphs: every ConstantOfShape weight becomes a seeded random initializer.

    Weights get He-like scaling (std sqrt(2 / fan_in)) so activations stay O(1) through 20-100 layers;
    1-D tensors (biases, batch-norm parameters) get small values, variances positive ones.
    """
    import copy

    import onnx
    from onnx import numpy_helper
    m = copy.deepcopy(model)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    rng = np.random.default_rng(seed)
    role = {}
    for n in m.graph.node:
        if n.op_type == "BatchNormalization":
            role.update({n.input[1]: "scale", n.input[4]: "var"})
    keep, new = [], []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(d) for d in inits[n.input[0]])
            if len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                a = rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))
            elif role.get(n.output[0]) == "var":
                a = rng.uniform(0.5, 1.5, shape)
            elif role.get(n.output[0]) == "scale":
                a = rng.uniform(0.8, 1.2, shape)
            else:
                a = rng.uniform(-0.1, 0.1, shape)
            new.append(numpy_helper.from_array(a.astype(np.float32), n.output[0]))
            continue
        keep.append(n)
    used = {i for n in keep for i in n.input}
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.graph.initializer.extend(new)
    for coll in (m.graph.initializer, m.graph.input):
        drop = [x for x in coll if x.name not in used and x.name not in {o.name for o in m.graph.output}
                and x.name not in {i.name for i in new}]
        for x in drop:
            coll.remove(x)
    m.ir_version = max(m.ir_version, 4)  # IR 3 wants every initializer listed as a graph input
    onnx.checker.check_model(m)
    return m


def light_inputs(model, seed: int = 1):
    from edgerun.convert.onnx.load import real_inputs
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([d.dim_value or 1 for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in real_inputs(model)]


def convert_float(model, inputs):
    """(tflite bytes, io) for ``model`` pinned to the shapes of ``inputs``, NCHW layout."""
    from edgerun.convert.onnx import load
    from edgerun.convert.onnx.lowering import onnx_to_graph
    model, _notes = load.upgrade(model)
    names = [i.name for i in load.real_inputs(model)]
    shapes = {n: tuple(x.shape) for n, x in zip(names, inputs)}
    g, io = onnx_to_graph(model, shapes, "NCHW")
    return g.to_bytes("edgerun conformance"), io


def _fits_float32(x) -> bool:
    x = np.asarray(x)
    if x.dtype != np.float64:
        return True
    a = np.abs(x[np.isfinite(x) & (x != 0)])
    return not a.size or (a.max() <= np.finfo(np.float32).max and a.min() >= np.finfo(np.float32).tiny)


def worst_rel(got, want) -> float:
    want = np.asarray(want, np.float64)
    got = np.asarray(got, np.float64)
    if got.shape != want.shape:
        return float("inf")
    if want.size == 0:
        return 0.0
    if not np.all(np.isfinite(got) == np.isfinite(want)):
        return float("inf")
    fin = np.isfinite(want)
    if not np.array_equal(got[~fin], want[~fin], equal_nan=True):
        return float("inf")
    scale = max(float(np.abs(want[fin]).max()) if fin.any() else 0.0, 1e-6)
    return float(np.abs(got[fin] - want[fin]).max() / scale) if fin.any() else 0.0


def run_case(case: Case, int8: bool = False) -> Result:
    from edgerun.errors import EdgerunError
    from edgerun.testing import run_litert
    import onnx
    t0 = time.perf_counter()
    try:
        model = onnx.load(str(case.model))
        if case.suite == "light":
            model = fill_light(model)
            inputs = light_inputs(model)
            from edgerun.convert.onnx.load import session
            sess = session(model)
            want = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})
            tol = RTOL_LIGHT
        elif not all(_fits_float32(x) for x in case.inputs):
            # DOUBLE cases whose stored inputs are uninitialized memory (1e-316, 1e198): a float32 model
            # cannot take them, so these run on seeded inputs against ONNX Runtime on the same model
            from edgerun.convert.onnx.load import session, upgrade
            rng = np.random.default_rng(2)
            inputs = [rng.standard_normal(x.shape).astype(x.dtype) for x in case.inputs]
            sess = session(upgrade(model)[0])  # ONNX Runtime has no DOUBLE Add at opset 6
            want = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})
            tol = RTOL
        else:
            inputs, want, tol = case.inputs, case.outputs, RTOL
        data, io = convert_float(model, inputs)
        from edgerun.schema.reader import read_model
        rm = read_model(data)
        feeds = [np.asarray(x).astype(rm.main.tensors[t].np_dtype) for x, t in zip(inputs, rm.main.inputs)]
        # LiteRT's builtin kernels (no XNNPACK): its reference LRN kernel sums one channel short
        got = run_litert(data, feeds, reference=False)
    except EdgerunError as e:
        return Result(case, "refuse", str(e).splitlines()[0], seconds=time.perf_counter() - t0)
    err = 0.0
    if len(got) != len(want):
        return Result(case, "wrong", f"{len(got)} outputs, expected {len(want)}", float("inf"),
                      time.perf_counter() - t0)
    for g, w, (_, perm) in zip(got, want, io["outputs"]):
        g = np.transpose(g, np.argsort(perm))
        err = max(err, worst_rel(g, w))
    status = "pass" if err <= tol else "wrong"
    res = Result(case, status, "" if status == "pass" else f"max error {err:.3g} of the output range", err,
                 time.perf_counter() - t0)
    if int8 and status == "pass":
        res.int8 = int8_check(data, inputs)
    return res


def int8_check(float_bytes: bytes, inputs) -> str:
    """Quantize (random calibration) and compare LiteRT's reference kernels with edgerun: "exact" or why not."""
    import tempfile

    from edgerun.convert import convert
    from edgerun.errors import EdgerunError
    from edgerun.testing import random_inputs, run_edgerun, run_litert
    from edgerun.runtime.interpreter import Interpreter
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d, "f.tflite"), Path(d, "q.tflite")
        src.write_bytes(float_bytes)
        try:
            convert(str(src), str(dst), calib="random", max_float_layers=0)
        except EdgerunError as e:
            return "refused: " + str(e).splitlines()[0]
        q = dst.read_bytes()
    xs = random_inputs(Interpreter(model_content=q).get_input_details(), 3)
    a, b = run_litert(q, xs), run_edgerun(q, xs)
    same = all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))
    return "exact" if same else "DIFFERS"


def table(results: list[Result]) -> str:
    lines = []
    for suite in SUITES:
        rs = [r for r in results if r.case.suite == suite]
        if not rs:
            continue
        n = sum(r.status == "pass" for r in rs)
        lines += [f"### {suite}: {n}/{len(rs)} pass", "", "| case | result | detail |", "| --- | --- | --- |"]
        for r in rs:
            detail = r.detail.replace("|", "\\|")
            if r.status == "pass":
                detail = f"max error {r.err:.1e}" + (f"; int8: {r.int8}" if r.int8 else "")
            lines.append(f"| {r.case.name} | {r.status} | {detail} |")
        lines.append("")
    return "\n".join(lines)


def write_doc(text: str) -> None:
    doc = DOC.read_text()
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        doc = head + BEGIN + "\n" + text + "\n" + END + tail
    else:
        doc = doc.rstrip("\n") + "\n\n## ONNX conformance\n\nRegenerate with `python tools/conformance.py --write`.\n\n" \
            + BEGIN + "\n" + text + "\n" + END + "\n"
    DOC.write_text(doc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", action="append", choices=SUITES)
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    ap.add_argument("--write", action="store_true", help="replace the table in docs/convert.md")
    ap.add_argument("--int8", action="store_true", help="also check int8 conversion of every passing case")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args(argv)
    os.environ.setdefault("EDGERUN_CACHE_DIR", str(Path.home() / ".cache" / "edgerun" / "conformance"))
    results = []
    t0 = time.perf_counter()
    for c in cases(a.suite or SUITES):
        if a.k and a.k not in c.name:
            continue
        r = run_case(c, int8=a.int8)
        results.append(r)
        if a.v or r.status != "pass":
            print(f"{r.status:6s} {c.suite}/{c.name} {r.seconds:.2f}s {r.detail} {r.int8}", file=sys.stderr)
    text = table(results)
    print(text)
    print(f"total {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    if a.write:
        write_doc(text)
    return 1 if any(r.status == "wrong" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
