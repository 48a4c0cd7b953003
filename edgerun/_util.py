"""Small helpers shared across layers (base layer: stdlib and numpy only). One helper per concept."""

from __future__ import annotations

import math

import numpy as np


def round_half_away(x) -> np.ndarray:
    """C ``round()``: nearest integer, ties away from zero (``np.rint`` ties to even), as float64.

    Exact for every float64 value (``rint``, ``trunc`` and ``x - trunc(x)`` are exact), so it is
    also LiteRT's ``std::round`` on float32 values. Callers that want integers cast the result.
    """
    x = np.asarray(x, dtype=np.float64)
    r = np.rint(x)
    t = np.trunc(x)
    tie = np.abs(x - t) == 0.5
    if tie.any():
        r = np.where(tie, t + np.sign(x), r)
    return r


def to_jsonable(obj, *, nonfinite: str = "null"):
    """``obj`` in plain JSON types: numpy arrays and scalars to lists and numbers, tuples to lists,
    dict keys to strings, classes to their names, other objects to ``str(obj)``.

    JSON has no NaN or infinity: ``nonfinite="null"`` (the CLI's JSON output) writes them as
    ``null``; ``nonfinite="string"`` (bundle manifests, which must keep the value readable)
    writes ``"nan"``, ``"inf"`` or ``"-inf"``.
    """
    if nonfinite not in ("null", "string"):
        raise ValueError(f"nonfinite={nonfinite!r}: use 'null' or 'string'")
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v, nonfinite=nonfinite) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, nonfinite=nonfinite) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist(), nonfinite=nonfinite)
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item(), nonfinite=nonfinite)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if nonfinite == "null" else str(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, type):
        return obj.__name__
    return str(obj)
