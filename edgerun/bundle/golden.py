"""Golden vectors: inputs and the outputs each kernel path computes for them on the host.

Per case the bundle records the outputs of the **reference path** (edgerun's kernels, bit-exact
with LiteRT's reference kernels) in ``golden.bin``, and, under ``golden.paths``, the outputs of
each **delegated path** the target runs (``xnnpack`` for ``rpi``, ``mcu`` for ``mcu:BOARD``, the
combination ``edgetpu+xnnpack`` ...) that is available on the packaging host, one member each
(``golden.<path>.bin``), with the largest difference from the reference MEASURED there and the
tolerance derived from it (:func:`tolerance_from`). Verifying on a device (:func:`verify`) then
compares like with like: edgerun's kernels must reproduce the reference outputs bit for bit (float
outputs: within float rounding across CPUs, FLOAT_RTOL of their largest magnitude); a
delegated path must stay within its recorded tolerance of them. A path the device runs that was
not measured at package time is reported as such, never passed silently. Bundles written before
``golden.paths`` existed keep the old rule (tolerance 0 on edgerun's kernels, 1/32 of the
integer range on a delegate), marked ``legacy`` in the report.

Arrays are stored raw, little-endian, C order, one after another in their member; the manifest
lists dtype, shape, offset and size of each, and the validator requires the slices to tile each
member exactly.
"""

from __future__ import annotations

import hashlib

import numpy as np

from edgerun.errors import BundleError

MEMBER = "golden.bin"
DEFAULT_CASES = 3


def default_inputs(inputs: list[dict], model_sha256: str, n: int = DEFAULT_CASES) -> list[list[np.ndarray]]:
    """``n`` deterministic pseudo-random input sets (seeded by the model hash) for the inputs."""
    seed = int(model_sha256[:16], 16)
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        arrs = []
        for io in inputs:
            dt = np.dtype(io["dtype"])
            shape = tuple(max(int(s), 1) for s in io["shape"])
            if dt.kind == "f":
                arrs.append(rng.uniform(-1.0, 1.0, size=shape).astype(dt))
            elif dt.kind in "iu":
                info = np.iinfo(dt)
                arrs.append(rng.integers(max(info.min, -128), min(info.max, 127) + 1, size=shape).astype(dt))
            elif dt.kind == "b":
                arrs.append(rng.integers(0, 2, size=shape).astype(bool))
            else:
                raise BundleError(f"cannot make golden inputs of dtype {dt} for input {io['name']!r}; "
                                  "pass golden_inputs=")
        cases.append(arrs)
    return cases


def _le(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<"), copy=False) if a.dtype.byteorder == ">" else a


def pack(cases: list[tuple[list[np.ndarray], list[np.ndarray]]]) -> tuple[bytes, list[dict]]:
    """[(inputs, outputs)] to (member bytes, manifest case entries)."""
    chunks, entries, off = [], [], 0
    for ins, outs in cases:
        entry = {}
        for key, arrs in (("inputs", ins), ("outputs", outs)):
            lst = []
            for a in arrs:
                a = _le(np.asarray(a))
                raw = a.tobytes()
                lst.append({"dtype": str(a.dtype.newbyteorder("=")), "shape": [int(s) for s in a.shape],
                            "offset": off, "size": len(raw)})
                chunks.append(raw)
                off += len(raw)
            entry[key] = lst
        entries.append(entry)
    return b"".join(chunks), entries


def unpack(data, entries: list[dict]) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """Member bytes and validated manifest entries to [(inputs, outputs)] (read-only arrays)."""
    mv = memoryview(data).cast("B")
    out = []
    for case in entries:
        pair = []
        for key in ("inputs", "outputs"):
            arrs = []
            for a in case[key]:
                dt = np.dtype(a["dtype"]).newbyteorder("<")
                start, size = a["offset"], a["size"]
                if start + size > len(mv):
                    raise BundleError(f"golden array at {start}+{size} lies outside the {len(mv)}-byte member")
                arrs.append(np.frombuffer(mv[start:start + size], dtype=dt).reshape(a["shape"]))
            pair.append(arrs)
        out.append((pair[0], pair[1]))
    return out


def max_abs_diff(expected: np.ndarray, got: np.ndarray) -> float:
    """Largest absolute difference, in the arrays' own units (quantized steps for integers)."""
    e, g = np.asarray(expected), np.asarray(got)
    if e.shape != g.shape:
        return float("inf")
    if e.size == 0:
        return 0.0
    if e.dtype.kind == "b":
        return float(np.any(e != g))
    if e.dtype.kind in "iu" and g.dtype.kind in "iu":
        return float(np.max(np.abs(e.astype(np.int64) - g.astype(np.int64))))
    d = np.abs(e.astype(np.float64) - g.astype(np.float64))
    same_nan = np.isnan(e.astype(np.float64)) & np.isnan(g.astype(np.float64))
    d = np.where(same_nan, 0.0, d)
    return float(np.nanmax(np.where(np.isnan(d), np.inf, d)))


def hash_inputs(cases) -> str:
    h = hashlib.sha256()
    for arrs in cases:
        for a in arrs:
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# kernel paths (golden.paths)
# --------------------------------------------------------------------------------------------
REFERENCE = "reference"


def path_member(path: str) -> str:
    return f"golden.{path.replace('+', '_')}.bin"


def tolerance_from(measured: float, dtype) -> float:
    """The tolerance a delegated path gets from its measured largest difference to the reference.

    0 stays 0 (a bit-exact path must stay bit-exact). Otherwise the measurement plus a margin for
    the device's CPU rounding differently from the packaging host: a quarter of the measurement,
    at least one step for integer outputs.
    """
    if measured == 0.0:
        return 0.0
    dt = np.dtype(dtype)
    if dt.kind in "iub":
        return float(measured + max(1.0, np.ceil(measured / 4)))
    return float(measured * 1.25)


def record_paths(run_path, paths: list[tuple[str, list]], ref_cases, outputs: list[dict]) -> tuple[dict, dict]:
    """Run the golden inputs on each delegated path; ``(manifest entry, members)``.

    run_path(delegates, inputs) -> outputs; ``paths``: [(path name, delegate names)];
    ``ref_cases``: [(inputs, reference outputs)]. A path that cannot run here is recorded as
    ``{"measured": null, "reason": ...}``.
    """
    from edgerun.errors import EdgerunError

    entry, members = {}, {}
    for name, delegates in paths:
        try:
            got = [run_path(delegates, ins) for ins, _ in ref_cases]
        except (EdgerunError, OSError, RuntimeError) as e:
            entry[name] = {"member": None, "outputs": None, "measured": None, "tolerance": None,
                           "reason": str(e).splitlines()[0][:200] if str(e) else type(e).__name__}
            continue
        measured = {io["name"]: 0.0 for io in outputs}
        for (_, want), outs in zip(ref_cases, got):
            for io, w, g in zip(outputs, want, outs):
                d = max_abs_diff(w, g)
                if not np.isfinite(d):
                    raise BundleError(f"golden path {name}: output {io['name']!r} has another shape or non-finite "
                                      "values on this delegate")
                measured[io["name"]] = max(measured[io["name"]], d)
        blob, lst = pack([([], outs) for outs in got])
        members[path_member(name)] = blob
        entry[name] = {"member": path_member(name), "outputs": [c["outputs"] for c in lst],
                       "measured": measured,
                       "tolerance": {io["name"]: tolerance_from(measured[io["name"]], io["dtype"]) for io in outputs},
                       "reason": None}
    return entry, members


def validate_paths(paths, n_cases: int, outputs: list[dict], member_sizes: dict) -> None:
    """Manifest check of ``golden.paths`` (structure, tiling of each path's member)."""
    if not isinstance(paths, dict) or len(paths) > 16:
        raise BundleError("manifest field golden.paths: expected an object of at most 16 paths")
    for name, e in paths.items():
        where = f"golden.paths.{str(name)[:40]}"
        if not isinstance(name, str) or not name or len(name) > 64 or not all(
                c.isalnum() or c in "+-_" for c in name):
            raise BundleError(f"manifest field golden.paths: bad path name {str(name)[:40]!r}")
        if not isinstance(e, dict) or set(e) != {"member", "outputs", "measured", "tolerance", "reason"}:
            raise BundleError(f"manifest field {where}: expected member, outputs, measured, tolerance, reason")
        if e["member"] is None:
            if e["outputs"] is not None or e["measured"] is not None or e["tolerance"] is not None \
                    or not isinstance(e["reason"], str):
                raise BundleError(f"manifest field {where}: an unmeasured path has only a reason")
            continue
        if e["member"] != path_member(name) or e["member"] not in member_sizes:
            raise BundleError(f"manifest field {where}.member: expected {path_member(name)!r}, one of the members")
        names = [io["name"] for io in outputs]
        for key in ("measured", "tolerance"):
            v = e[key]
            if not isinstance(v, dict) or sorted(v) != sorted(names) or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in v.values()):
                raise BundleError(f"manifest field {where}.{key}: expected a non-negative number per output")
        if not isinstance(e["outputs"], list) or len(e["outputs"]) != n_cases:
            raise BundleError(f"manifest field {where}.outputs: expected {n_cases} cases")
        expect = 0
        for ci, arrs in enumerate(e["outputs"]):
            if not isinstance(arrs, list) or len(arrs) != len(outputs):
                raise BundleError(f"manifest field {where}.outputs[{ci}]: expected {len(outputs)} arrays")
            for a in arrs:
                if not isinstance(a, dict) or set(a) != {"dtype", "shape", "offset", "size"} \
                        or a["offset"] != expect or not isinstance(a["size"], int) or a["size"] < 0:
                    raise BundleError(f"manifest field {where}.outputs[{ci}]: arrays must tile the member")
                n = 1
                for d in a["shape"] if isinstance(a["shape"], list) else [None]:
                    if isinstance(d, bool) or not isinstance(d, int) or d < 0:
                        raise BundleError(f"manifest field {where}.outputs[{ci}]: bad shape")
                    n *= d
                try:
                    item = np.dtype(a["dtype"]).itemsize
                except TypeError:
                    raise BundleError(f"manifest field {where}.outputs[{ci}]: bad dtype") from None
                if n * item != a["size"]:
                    raise BundleError(f"manifest field {where}.outputs[{ci}]: size does not match shape")
                expect += a["size"]
        if expect != member_sizes[e["member"]]:
            raise BundleError(f"golden path {name}: arrays cover {expect} of {member_sizes[e['member']]} bytes")


def path_outputs(entry: dict, blob) -> list[list[np.ndarray]]:
    """A recorded path's outputs per case."""
    return [outs for _, outs in unpack(blob, [{"inputs": [], "outputs": o} for o in entry["outputs"]])]


#: Float outputs on the reference path: numpy's exp/log and BLAS sum orders round differently per
#: CPU (x86 vs ARM NEON, docs/platforms.md), so float goldens made on one CPU hold on another to
#: this fraction of the output's largest recorded magnitude; integer outputs stay bit for bit.
FLOAT_RTOL = 1e-5


def reference_tolerance(dtype, peak: float) -> float:
    """What the reference path (edgerun's kernels) may differ by: 0 for integer and bool outputs,
    float rounding across CPUs for float outputs (FLOAT_RTOL of the largest recorded magnitude)."""
    if np.dtype(dtype).kind in "iub":
        return 0.0
    return FLOAT_RTOL * max(peak, 1e-6)


def _peaks(cases, outputs: list[dict]) -> dict:
    """Largest finite magnitude of each float output over the recorded reference outputs."""
    peak = {}
    for k, io in enumerate(outputs):
        vals = [float(np.max(np.abs(w[k][np.isfinite(w[k])].astype(np.float64)), initial=0.0))
                for _, w in cases if w[k].dtype.kind == "f" and w[k].size]
        peak[io["name"]] = max(vals or [0.0])
    return peak


def legacy_tolerance(dtype, peak: float) -> float:
    """Bundles without golden.paths: the old constant rule for a delegate (1/32 of the integer
    range, 1e-4 of the largest magnitude for floats)."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return float((int(np.iinfo(dt).max) - int(np.iinfo(dt).min) + 1) // 32)
    return 1e-4 * max(peak, 1.0)


def compare(cases, got: list[list[np.ndarray]], outputs: list[dict], tolerance: dict) -> dict:
    """Largest difference per output between the recorded reference outputs and ``got``."""
    diffs = {io["name"]: 0.0 for io in outputs}
    for (_, want), outs in zip(cases, got):
        for io, w, g in zip(outputs, want, outs):
            diffs[io["name"]] = max(diffs[io["name"]], max_abs_diff(w, g))
    ok = bool(cases) and all(diffs[n] <= tolerance[n] for n in diffs)
    return {"ok": ok, "max_abs_diff": diffs, "tolerance": tolerance}


def check_array(io: dict, arr: np.ndarray, what: str) -> None:
    """A golden input given as an array must be the model input itself (with or without the
    batch dimension of 1): a wrong-shaped array is refused, not resized as if it were an image."""
    from edgerun.errors import UsageError

    shape = tuple(io["shape"])
    a = np.asarray(arr)
    if a.shape != shape and not (shape[:1] == (1,) and a.shape == shape[1:]):
        raise UsageError(f"{what}: input {io['name']!r} takes shape {list(shape)}, the array has "
                         f"{list(a.shape)}")


def delegate_paths(names) -> list[tuple[str, list[str]]]:
    """The delegated paths a target's delegates (priority order) make: all of them together, as a
    device with every runtime runs them, and each alone (a device that has only that one)."""
    names = list(names)
    if not names:
        return []
    paths = [("+".join(names), names)]
    if len(names) > 1:
        paths += [(n, [n]) for n in names]
    return paths


def path_runner(model: bytes, in_idx: list[int], out_idx: list[int], preserve_inputs: bool = True):
    """``run(delegates, inputs) -> outputs`` for :func:`record_paths`: one interpreter per path,
    every delegate of the path required (DelegateUnavailableError names a missing runtime)."""
    from edgerun.delegate import get_delegate
    from edgerun.errors import DelegateUnavailableError
    from edgerun.runtime.interpreter import Interpreter

    cache: dict = {}

    def run(delegates, xs):
        key = tuple(delegates)
        if key not in cache:
            for n in delegates:
                a = get_delegate(n).is_available()
                if not a.ok:
                    raise DelegateUnavailableError(f"{n} not available on the packaging host: {a.reason}")
            it = Interpreter(model_content=model, delegates=list(delegates), preserve_inputs=preserve_inputs)
            it.allocate_tensors()
            used = {p.delegate for p in (it.partitions or [])}
            if not used:
                raise DelegateUnavailableError(f"{'+'.join(delegates)} takes no node of this model")
            cache[key] = it
        it = cache[key]
        for i, x in zip(in_idx, xs):
            it.set_tensor(i, x)
        it.invoke()
        return [np.array(it.get_tensor(i)) for i in out_idx]

    return run


def verify(bundle_model, tolerance: float | None = None) -> dict:
    """Run a loaded bundle's golden vectors on every path it runs here and judge them.

    The reference path (edgerun's kernels, no delegate) must match bit for bit on integer outputs
    and within float rounding across CPUs (:data:`FLOAT_RTOL`) on float ones. When delegates
    run, their path must stay within its recorded tolerance of the reference outputs
    (``tolerance`` overrides it). Returns ``{"ok", "cases", "max_abs_diff", "tolerance",
    "delegates", "paths": {path: {"ok", "max_abs_diff", "tolerance", "source"}}}``, where the
    top-level figures are the path the bundle runs on here.
    """
    from edgerun.runtime.interpreter import Interpreter

    b = bundle_model.bundle
    cases = b.golden
    outputs, ins = bundle_model.outputs, bundle_model.inputs
    in_idx, out_idx = [io["index"] for io in ins], [io["index"] for io in outputs]
    recorded = (b.manifest["golden"] or {}).get("paths")

    def run_all(it):
        got = []
        for xs, _ in cases:
            for i, x in zip(in_idx, xs):
                it.set_tensor(i, x)
            it.invoke()
            got.append([np.array(it.get_tensor(i)) for i in out_idx])
        return got

    paths = {}
    # a delegate that took no node leaves edgerun's kernels running everything: the reference path
    delegated = bool(bundle_model.delegates) and bool(getattr(bundle_model.interpreter, "partitions", None))
    ref_it = bundle_model.interpreter if not delegated else None
    if ref_it is None:
        ref_it = Interpreter(model_content=b.model)
        ref_it.allocate_tensors()
    peak = _peaks(cases, outputs)
    if tolerance is not None:
        ref_tol, source = {io["name"]: float(tolerance) for io in outputs}, "given"
    else:
        ref_tol = {io["name"]: reference_tolerance(io["dtype"], peak[io["name"]]) for io in outputs}
        source = "bit-exact" if not any(ref_tol.values()) else "bit-exact integers, float rounding for floats"
    paths[REFERENCE] = {**compare(cases, run_all(ref_it), outputs, ref_tol), "source": source}
    top = paths[REFERENCE]
    if delegated:
        name = "+".join(bundle_model.delegates)
        got = run_all(bundle_model.interpreter)
        if tolerance is not None:
            tol, source = {io["name"]: float(tolerance) for io in outputs}, "given"
        elif recorded is None:  # a bundle from before golden.paths: the old constant rule
            tol, source = {io["name"]: legacy_tolerance(io["dtype"], peak[io["name"]]) for io in outputs}, "legacy"
        elif recorded.get(name) and recorded[name]["tolerance"] is not None:
            tol, source = dict(recorded[name]["tolerance"]), "measured at package time"
        else:
            why = (recorded.get(name) or {}).get("reason") or "the packaging host could not run it"
            tol, source = None, f"not measured at package time ({why})"
        if tol is None:
            res = compare(cases, got, outputs, {io["name"]: float("inf") for io in outputs})
            res = {**res, "ok": None, "tolerance": None}
        else:
            res = compare(cases, got, outputs, tol)
        paths[name] = {**res, "source": source}
        top = paths[name]
    ok = bool(cases) and paths[REFERENCE]["ok"] and all(p["ok"] is not False for p in paths.values())
    return {"ok": ok, "cases": len(cases), "max_abs_diff": top["max_abs_diff"],
            "tolerance": top["tolerance"] if top["tolerance"] is not None else {},
            "delegates": bundle_model.delegates or ["edgerun"], "paths": paths}


def check_input_arrays(model: bytes, values: list, names: list[str]) -> None:
    """``package --golden X.npy``: each array must be the (single) model input itself, with or
    without its batch dimension of 1; images are given as image files instead."""
    from edgerun.schema.reader import read_model

    m = read_model(model)
    g = m.main
    if len(g.inputs) != 1:
        return  # one array cannot be a multi-input case; the packager says so
    t = g.tensors[g.inputs[0]]
    io = {"name": t.name, "shape": list(t.shape)}
    for v, name in zip(values, names):
        if isinstance(v, np.ndarray):
            check_array(io, v, f"--golden {name}")
