"""The batched mse / entropy range search picks the same (lo, hi) as scoring one candidate at a
time, and `auto`'s early-stopped scores never change what is chosen."""

from __future__ import annotations

import numpy as np
import pytest

from edgerun.convert import calibrate as cal


def _one_at_a_time(o: cal.HistogramObserver, method: str):
    los, his = o._candidates()
    edges = o._edges()
    c = (edges[:-1] + edges[1:]) / 2
    width = edges[1] - edges[0]
    p = o.hist / max(o.hist.sum(), 1)
    nz = p > 0
    c, pc = c[nz], p[nz]
    best, best_r = np.inf, (o.min, o.max)
    for lo in los:
        for hi in his:
            if hi - lo <= 0:
                continue
            s = (hi - lo) / 255.0
            z = np.round(-128 - lo / s)
            qv = np.clip(np.round(c / s) + z, -128, 127)
            if method == "mse":
                err = float(np.sum(pc * (c - (qv - z) * s) ** 2)) + width ** 2 / 12
            else:
                err = cal._kl(c, pc, lo, hi, qv)
            if err < best * (1 - 1e-12) or not np.isfinite(best):
                best, best_r = err, (float(lo), float(hi))
    return best_r


@pytest.mark.parametrize("method", ["mse", "entropy"])
def test_batched_search_matches_the_loop(method):
    rng = np.random.default_rng(3)
    for kind in range(8):
        o = cal.HistogramObserver()
        for _ in range(3):
            if kind % 4 == 0:  # a ReLU output
                x = np.maximum(rng.standard_normal(4000) * rng.uniform(0.1, 5) + rng.uniform(-1, 1), 0)
            elif kind % 4 == 1:  # heavy tails
                x = rng.standard_t(3, 4000) * rng.uniform(0.1, 5)
            elif kind % 4 == 2:
                x = rng.uniform(-1, 3, 2000)
            else:  # one outlier far out
                x = np.concatenate([rng.standard_normal(4000), [60.0]])
            o.update(x.astype(np.float32))
        assert o.range(method) == _one_at_a_time(o, method), (kind, method)


def test_histogram_filters_non_finite_values_only_when_present():
    o = cal.HistogramObserver()
    o.update(np.array([1.0, -2.0, np.nan, np.inf, -3e38, 0.0], np.float32))
    assert (o.min, o.max) == (-2.0, 1.0) and o.zeros == 1 and o.hist.sum() == 2
