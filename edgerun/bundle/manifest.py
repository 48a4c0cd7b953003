"""The bundle manifest: what a device needs to know about the model, as canonical JSON.

Canonical form: UTF-8 JSON with sorted keys, no whitespace, ASCII escapes, no NaN/Infinity and
no duplicate keys. The reader re-encodes what it parsed and requires the same bytes, so the
manifest has exactly one valid spelling and no byte of it can change unnoticed.

Schema (format_version 1.x; a reader refuses any other major version)::

    format            "edgerun.bundle"
    format_version    "1.0"
    edgerun_version   version that wrote the bundle
    model             {member, sha256, size}
    members           [{name, sha256, size}]  every payload member, in archive order
    inputs, outputs   [{name, index, shape, dtype, quantization, layout, preprocessing}]
                      quantization: {scale: [..], zero_point: [..], quantized_dimension} or null
    labels            [str] or null
    target            {spec, name, board}
    delegates         delegate names to try, in priority order (the interpreter takes the rest)
    arena_bytes       activation arena planned by edgerun's interpreter
    conversion_report any JSON value or null
    calibration_sha256  hex digest of the calibration data, or null
    golden            {member, cases: [{inputs: [array], outputs: [array]}], paths} or null
                      array: {dtype, shape, offset, size}, slices of the golden member that
                      tile it exactly, in order; paths (1.1): per delegated kernel path
                      {member, outputs, measured, tolerance, reason} (edgerun.bundle.golden)
"""

from __future__ import annotations

import json
import re

import numpy as np

from edgerun._util import to_jsonable
from edgerun.bundle.archive import check_name
from edgerun.errors import BundleError

FORMAT = "edgerun.bundle"
FORMAT_VERSION = "1.1"
MAJOR = 1
MAX_MANIFEST_BYTES = 8 * 1024 * 1024
#: dtypes golden arrays may have (little-endian raw data)
ARRAY_DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                "int64", "uint64", "bool")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")


def dumps(obj) -> bytes:
    """Canonical JSON bytes."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False).encode("ascii")
    except (TypeError, ValueError) as e:
        raise BundleError(f"manifest value is not plain JSON: {e}") from None


def _no_dupes(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise BundleError(f"manifest repeats the key {k!r}")
        d[k] = v
    return d


def _no_constants(name):
    raise BundleError(f"manifest contains {name}, which is not JSON")


def loads(data: bytes) -> dict:
    """Parse canonical manifest bytes; anything but the canonical spelling is refused."""
    data = bytes(data)
    if len(data) > MAX_MANIFEST_BYTES:
        raise BundleError(f"manifest is {len(data)} bytes, over the {MAX_MANIFEST_BYTES}-byte limit")
    try:
        obj = json.loads(data.decode("ascii"), object_pairs_hook=_no_dupes, parse_constant=_no_constants)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BundleError(f"manifest is not valid JSON: {type(e).__name__}: {str(e)[:100]}") from None
    if not isinstance(obj, dict):
        raise BundleError("manifest is not a JSON object")
    try:
        again = dumps(obj)
    except RecursionError:
        raise BundleError("manifest is nested too deeply") from None
    if again != data:
        raise BundleError("manifest is not in canonical form (sorted keys, no whitespace); "
                          "it was edited by hand or by another tool")
    return obj


def jsonable(obj):
    """numpy values and tuples to plain JSON types; non-finite floats to strings (``"nan"``)."""
    return to_jsonable(obj, nonfinite="string")


# --- validation -------------------------------------------------------------------------------
def _fail(path: str, want: str, got) -> BundleError:
    return BundleError(f"manifest field {path}: expected {want}, got {str(got)[:60]!r}")


def _int(v, path, lo=0, hi=2 ** 62) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _fail(path, f"an integer in [{lo}, {hi}]", v)
    return v


def _str(v, path, max_len=4096) -> str:
    if not isinstance(v, str) or len(v) > max_len:
        raise _fail(path, f"a string of at most {max_len} characters", v)
    return v


def _list(v, path, max_len=1 << 20) -> list:
    if not isinstance(v, list) or len(v) > max_len:
        raise _fail(path, f"a list of at most {max_len} items", v)
    return v


def _dict(v, path, keys: set[str]) -> dict:
    if not isinstance(v, dict):
        raise _fail(path, "an object", v)
    if set(v) != keys:
        raise BundleError(f"manifest field {path}: keys {sorted(v)} differ from {sorted(keys)}")
    return v


def _hex(v, path) -> str:
    if not isinstance(v, str) or not _HEX64.match(v):
        raise _fail(path, "a SHA-256 hex digest", v)
    return v


def _shape(v, path) -> list[int]:
    return [_int(d, f"{path}[{i}]", -1, 1 << 31) for i, d in enumerate(_list(v, path, 16))]


def _io(v, path):
    d = _dict(v, path, {"name", "index", "shape", "dtype", "quantization", "layout", "preprocessing"})
    _str(d["name"], f"{path}.name")
    _int(d["index"], f"{path}.index", 0, 1 << 31)
    _shape(d["shape"], f"{path}.shape")
    if d["dtype"] not in ARRAY_DTYPES:
        raise _fail(f"{path}.dtype", f"one of {ARRAY_DTYPES}", d["dtype"])
    q = d["quantization"]
    if q is not None:
        _dict(q, f"{path}.quantization", {"scale", "zero_point", "quantized_dimension"})
        sc = _list(q["scale"], f"{path}.quantization.scale")
        zp = _list(q["zero_point"], f"{path}.quantization.zero_point")
        if len(sc) != len(zp) or not all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in sc):
            raise _fail(f"{path}.quantization", "scale and zero_point lists of equal length", q)
        for i, z in enumerate(zp):
            _int(z, f"{path}.quantization.zero_point[{i}]", -(1 << 31), 1 << 31)
        _int(q["quantized_dimension"], f"{path}.quantization.quantized_dimension", 0, 16)
    if d["layout"] is not None and d["layout"] not in ("NHWC", "NCHW"):
        raise _fail(f"{path}.layout", "NHWC, NCHW or null", d["layout"])
    if d["preprocessing"] is not None:
        from edgerun.preprocess import validate_spec

        try:
            if validate_spec(d["preprocessing"]) != d["preprocessing"]:
                raise _fail(f"{path}.preprocessing", "a normalised preprocessing spec", d["preprocessing"])
        except (ValueError, TypeError) as e:
            raise BundleError(f"manifest field {path}.preprocessing: {e}") from None


def _array(v, path) -> dict:
    d = _dict(v, path, {"dtype", "shape", "offset", "size"})
    if d["dtype"] not in ARRAY_DTYPES:
        raise _fail(f"{path}.dtype", f"one of {ARRAY_DTYPES}", d["dtype"])
    shape = _shape(d["shape"], f"{path}.shape")
    if any(s < 0 for s in shape):
        raise _fail(f"{path}.shape", "non-negative dimensions", shape)
    _int(d["offset"], f"{path}.offset")
    n = 1
    for s in shape:
        n *= s
    if n * np.dtype(d["dtype"]).itemsize != _int(d["size"], f"{path}.size"):
        raise _fail(f"{path}.size", f"{n} x {np.dtype(d['dtype']).itemsize} bytes for shape {shape}", d["size"])
    return d


TOP_KEYS = {"format", "format_version", "edgerun_version", "model", "members", "inputs", "outputs", "labels",
            "target", "delegates", "arena_bytes", "conversion_report", "calibration_sha256", "golden"}


def check_version(m: dict) -> None:
    if m.get("format") != FORMAT:
        raise BundleError(f"not an edgerun bundle manifest (format {str(m.get('format'))[:40]!r})")
    ver = m.get("format_version")
    if not isinstance(ver, str) or not re.fullmatch(r"\d{1,4}\.\d{1,4}", ver):
        raise _fail("format_version", "'MAJOR.MINOR'", ver)
    if int(ver.split(".")[0]) != MAJOR:
        raise BundleError(f"bundle format version {ver} is not supported: this edgerun reads "
                          f"{MAJOR}.x; upgrade edgerun (or repackage the model)")


def validate(m: dict) -> dict:
    """Check a parsed manifest's structure and types; raise BundleError on anything unexpected."""
    check_version(m)
    _dict(m, "manifest", TOP_KEYS)
    _str(m["edgerun_version"], "edgerun_version", 64)
    members = _list(m["members"], "members", 14)
    names = []
    for i, mem in enumerate(members):
        _dict(mem, f"members[{i}]", {"name", "sha256", "size"})
        names.append(check_name(_str(mem["name"], f"members[{i}].name", 64)))
        _hex(mem["sha256"], f"members[{i}].sha256")
        _int(mem["size"], f"members[{i}].size")
    if len(set(names)) != len(names) or names != sorted(names):
        raise _fail("members", "sorted, distinct member names", names)
    if {"manifest.json", "signature.ed25519"} & set(names):
        raise _fail("members", "payload members only", names)
    model = _dict(m["model"], "model", {"member", "sha256", "size"})
    by_name = {mem["name"]: mem for mem in members}
    _str(model["member"], "model.member", 64)
    if model["member"] not in by_name or by_name[model["member"]] != {"name": model["member"],
                                                                     "sha256": model["sha256"],
                                                                     "size": model["size"]}:
        raise _fail("model", "an entry matching one of members", model)
    for key in ("inputs", "outputs"):
        for i, io in enumerate(_list(m[key], key, 1024)):
            _io(io, f"{key}[{i}]")
    if m["labels"] is not None:
        for i, lab in enumerate(_list(m["labels"], "labels", 1 << 20)):
            _str(lab, f"labels[{i}]", 1024)
    t = _dict(m["target"], "target", {"spec", "name", "board"})
    _str(t["spec"], "target.spec", 128)
    _str(t["name"], "target.name", 64)
    if t["board"] is not None:
        _str(t["board"], "target.board", 64)
    for i, dname in enumerate(_list(m["delegates"], "delegates", 16)):
        _str(dname, f"delegates[{i}]", 64)
    _int(m["arena_bytes"], "arena_bytes")
    if m["calibration_sha256"] is not None:
        _hex(m["calibration_sha256"], "calibration_sha256")
    g = m["golden"]
    if g is not None:
        _dict(g, "golden", {"member", "cases", "paths"} if isinstance(g, dict) and "paths" in g
              else {"member", "cases"})
        if not isinstance(g["member"], str) or g["member"] not in by_name:
            raise _fail("golden.member", "one of members", g["member"])
        expect = 0
        for ci, case in enumerate(_list(g["cases"], "golden.cases", 64)):
            _dict(case, f"golden.cases[{ci}]", {"inputs", "outputs"})
            for key in ("inputs", "outputs"):
                arrs = _list(case[key], f"golden.cases[{ci}].{key}", 1024)
                if len(arrs) != len(m[key]):
                    raise _fail(f"golden.cases[{ci}].{key}", f"{len(m[key])} arrays", len(arrs))
                for ai, a in enumerate(arrs):
                    a = _array(a, f"golden.cases[{ci}].{key}[{ai}]")
                    if a["offset"] != expect:
                        raise _fail(f"golden.cases[{ci}].{key}[{ai}].offset", f"{expect} (arrays tile the member)",
                                    a["offset"])
                    expect += a["size"]
        if expect != by_name[g["member"]]["size"]:
            raise BundleError(f"golden arrays cover {expect} bytes of the {by_name[g['member']]['size']}-byte "
                              f"member {g['member']!r}")
        if "paths" in g:  # format 1.1: outputs per delegated kernel path (edgerun.bundle.golden)
            from edgerun.bundle.golden import validate_paths
            validate_paths(g["paths"], len(g["cases"]), m["outputs"], {n: e["size"] for n, e in by_name.items()})
    return m
