"""Golden vectors: inputs and the outputs edgerun's interpreter computes for them on the host.

A device that runs the same inputs through whatever delegates it has and gets the same outputs
(bit-exact on the interpreter, within a stated tolerance on a delegate) proves it computes what
the host computed. The arrays are stored raw, little-endian, C order, one after another in one
member (``golden.bin``); the manifest lists dtype, shape, offset and size of each, and the
manifest validator requires the slices to tile the member exactly.
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
