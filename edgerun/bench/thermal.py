"""Thermal and clock state: is the machine throttling while it is being measured?

Reads ``class/thermal/thermal_zone*/temp`` (millidegrees C) with each zone's trip points
(``trip_point_N_temp`` / ``trip_point_N_type``) and
``devices/system/cpu/cpu*/cpufreq/scaling_cur_freq`` (kHz), all under ``EDGERUN_SYSFS_ROOT``.
:func:`summarize` turns a window of samples into the figures a benchmark reports and the
warnings that make a result suspect: a temperature at or above a passive/hot/critical trip point
(the kernel throttles there), or the highest CPU clock falling more than ``CLOCK_DROP`` below its
level at the start of the window for two samples in a row.
"""

from __future__ import annotations

import re
from pathlib import Path

from edgerun.bench.power import _natural, _read_int, _read_text, sysfs_root

#: a clock this much below its starting level (fraction) counts as a drop
CLOCK_DROP = 0.15
#: trip types at which the kernel slows the CPU down (``active`` trips start fans only)
THROTTLE_TRIPS = ("passive", "hot", "critical")


class ThermalProbe:
    """The zones and CPUs found under one sysfs root; ``read()`` returns one sample."""

    def __init__(self, root: Path | None = None):
        root = root or sysfs_root()
        self.zones: dict[str, Path] = {}
        self.zone_types: dict[str, str] = {}
        self.trips: dict[str, list[dict]] = {}
        tbase = root / "class" / "thermal"
        if tbase.is_dir():
            for z in sorted(tbase.glob("thermal_zone*"), key=_natural):
                try:
                    _read_int(z / "temp")
                except (OSError, ValueError):
                    continue
                self.zones[z.name] = z / "temp"
                self.zone_types[z.name] = _read_text(z / "type", z.name)
                trips = []
                for tp in sorted(z.glob("trip_point_*_temp"), key=_natural):
                    n = re.match(r"trip_point_(\d+)_temp", tp.name).group(1)
                    try:
                        trips.append({"temp_c": _read_int(tp) / 1000.0,
                                      "type": _read_text(z / f"trip_point_{n}_type", "unknown")})
                    except (OSError, ValueError):
                        continue
                self.trips[z.name] = trips
        self.cpus: dict[str, Path] = {}
        cbase = root / "devices" / "system" / "cpu"
        if cbase.is_dir():
            for c in sorted(cbase.glob("cpu[0-9]*"), key=_natural):
                f = c / "cpufreq" / "scaling_cur_freq"
                try:
                    _read_int(f)
                except (OSError, ValueError):
                    continue
                self.cpus[c.name] = f

    @property
    def found(self) -> bool:
        return bool(self.zones or self.cpus)

    def read(self) -> tuple[dict[str, float], dict[str, float]]:
        temps, freqs = {}, {}
        for name, p in self.zones.items():
            try:
                temps[name] = _read_int(p) / 1000.0
            except (OSError, ValueError):
                pass
        for name, p in self.cpus.items():
            try:
                freqs[name] = _read_int(p) / 1000.0  # kHz -> MHz
            except (OSError, ValueError):
                pass
        return temps, freqs

    def describe(self) -> dict:
        return {"zones": {z: {"type": self.zone_types[z], "trips": self.trips[z]} for z in self.zones},
                "cpus": list(self.cpus)}


def summarize(probe: ThermalProbe | None, temps: list[dict], freqs: list[dict]) -> dict:
    """Figures and warnings for one window of samples (lists of per-sample dicts)."""
    if probe is None or not probe.found:
        return {"source": None, "max_temp_c": None, "throttled": None,
                "message": f"no thermal zones or cpufreq under {sysfs_root()}"}
    out: dict = {"source": f"sysfs:{sysfs_root()}", "zones": {}, "warnings": []}
    crossed = []
    for z in probe.zones:
        series = [s[z] for s in temps if z in s]
        if not series:
            continue
        zmax = max(series)
        out["zones"][z] = {"type": probe.zone_types[z], "start_c": series[0], "max_c": zmax}
        for t in probe.trips.get(z, []):
            if t["type"] in THROTTLE_TRIPS and zmax >= t["temp_c"]:
                crossed.append(f"{z} ({probe.zone_types[z]}) reached {zmax:.1f} C, at or above its "
                               f"{t['type']} trip point {t['temp_c']:.1f} C")
                break
    maxes = [v["max_c"] for v in out["zones"].values()]
    out["max_temp_c"] = max(maxes) if maxes else None
    top = [max(s.values()) for s in freqs if s]
    drop = False
    if top:
        ref = top[0]
        low = [f < ref * (1 - CLOCK_DROP) for f in top]
        drop = any(a and b for a, b in zip(low, low[1:]))
        out["cpu_mhz"] = {"start": ref, "min": min(top), "max": max(top)}
        if drop:
            out["warnings"].append(f"CPU clock dropped from {ref:.0f} MHz to {min(top):.0f} MHz "
                                   "during the run")
    out["warnings"] += crossed
    out["trip_crossed"] = bool(crossed)
    out["clock_dropped"] = drop
    out["throttled"] = bool(crossed) or drop
    return out
