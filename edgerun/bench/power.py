"""Power telemetry: where a benchmark's watts and joules come from.

Every source reads either a cumulative energy counter (``kind = "energy"``, joules) or an
instantaneous power (``kind = "power"``, watts); :class:`edgerun.bench.sampler.Telemetry` samples
it in a background thread and turns both kinds into one cumulative-energy curve.

Sources, in the order :func:`discover` tries them:

- Linux powercap (``class/powercap/intel-rapl:N`` and ``amd-rapl``-style zones): ``energy_uj``
  counters in microjoules that wrap at ``max_energy_range_uj``. Only top-level zones (the
  packages) are summed, so sub-zones (core, uncore, dram inside a package) are not counted twice.
- hwmon (``class/hwmon/hwmon*``): ``energy*_input`` (microjoules), ``power*_input`` /
  ``power*_average`` (microwatts), or ``in*_input`` (millivolts) times ``curr*_input``
  (milliamps) of the same channel number, which is how INA219/INA226/INA3221 rail monitors on
  Jetson and Raspberry Pi boards report.
- NVML (``nvidia-ml-py``, the ``edgerun[nvml]`` extra): total GPU energy in millijoules where the
  GPU keeps it (Volta and later), else instantaneous board power in milliwatts.
- An RDTech UM24C / UM25C / UM34C USB power meter over its serial link (:class:`UmMeter`).

All sysfs paths are read under ``EDGERUN_SYSFS_ROOT`` (default ``/sys``), so tests and containers
can point discovery elsewhere. Nothing is ever invented: no source means no energy figures.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from edgerun.errors import EdgerunError, LinkError, UsageError


def sysfs_root() -> Path:
    return Path(os.environ.get("EDGERUN_SYSFS_ROOT") or "/sys")


def _read_int(path: Path) -> int:
    with open(path) as f:
        return int(f.read(64).strip())  # sysfs numbers are short; never read a huge file whole


def _readable_int(path: Path) -> bool:
    try:
        _read_int(path)
        return True
    except (OSError, ValueError):
        return False


def _read_text(path: Path, default: str = "") -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read(256).strip()
    except OSError:
        return default


def _natural(p: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


class PowerSource:
    """One place power or energy can be read. ``read()`` may raise OSError/ValueError for a missed
    sample (the sampler skips it)."""

    name = "?"
    kind = "power"  # "energy": read() returns cumulative joules; "power": read() returns watts

    def read(self) -> float:
        raise NotImplementedError

    def close(self) -> None:
        pass


class EnergyCounter:
    """A raw counter that may wrap: keeps the running total across wrap-arounds.

    ``max_range`` is the counter's range (powercap's ``max_energy_range_uj``); a reading below the
    previous one means the counter wrapped once (the sampler reads far more often than any real
    counter wraps: RAPL's 2^32 uJ range lasts about 70 minutes at 1 kW). With no known range a
    drop is taken as a reset to 0.
    """

    def __init__(self, path: Path, scale: float, max_range: int | None = None):
        self.path, self.scale, self.max_range = path, scale, max_range
        self.last: int | None = None
        self.offset = 0

    def read(self) -> float:
        raw = _read_int(self.path)
        if self.last is not None and raw < self.last:
            self.offset += self.max_range if self.max_range else self.last
        self.last = raw
        return (self.offset + raw) * self.scale


class PowercapSource(PowerSource):
    kind = "energy"

    def __init__(self, zones: list[Path]):
        self.zones = zones
        self.counters = []
        for z in zones:
            rng = _read_int(z / "max_energy_range_uj") if _readable_int(z / "max_energy_range_uj") else None
            self.counters.append(EnergyCounter(z / "energy_uj", 1e-6, rng))
        self.name = "powercap:" + "+".join(z.name for z in zones)
        self.label = ", ".join(_read_text(z / "name", z.name) for z in zones)

    def read(self) -> float:
        return sum(c.read() for c in self.counters)


class HwmonSource(PowerSource):
    """One hwmon channel: an energy counter, a power reading, or a voltage x current pair."""

    def __init__(self, dev: Path, chip: str, what: str, files: list[Path], label: str = ""):
        self.dev, self.files = dev, files
        self.kind = "energy" if what == "energy" else "power"
        chan = "*".join(f.name.replace("_input", "").replace("_average", "") for f in files)
        self.name = f"hwmon:{chip or dev.name}:{label or chan}"
        self.counter = EnergyCounter(files[0], 1e-6) if self.kind == "energy" else None
        self.what = what

    def read(self) -> float:
        if self.counter is not None:
            return self.counter.read()
        if self.what == "power":
            return _read_int(self.files[0]) * 1e-6  # microwatts
        return _read_int(self.files[0]) * _read_int(self.files[1]) * 1e-6  # mV * mA = uW


class NvmlSource(PowerSource):
    def __init__(self, index: int = 0):
        try:
            import pynvml
        except ImportError as e:
            raise EdgerunError("NVML power needs nvidia-ml-py: pip install 'edgerun[nvml]'") from e
        self.nv = pynvml
        try:
            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu = pynvml.nvmlDeviceGetName(self.handle)
        except pynvml.NVMLError as e:
            raise EdgerunError(f"NVML: {e}") from e
        gpu = gpu.decode() if isinstance(gpu, bytes) else gpu
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.kind = "energy"
        except pynvml.NVMLError:
            pynvml.nvmlDeviceGetPowerUsage(self.handle)  # raises where the board has no sensor
            self.kind = "power"
        self.name = f"nvml:gpu{index}"
        self.label = gpu

    def read(self) -> float:
        try:
            if self.kind == "energy":
                return self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle) * 1e-3  # mJ
            return self.nv.nvmlDeviceGetPowerUsage(self.handle) * 1e-3  # mW
        except self.nv.NVMLError as e:
            raise OSError(str(e)) from e

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:  # shutdown errors change nothing for the figures already read
            pass


# ---- RDTech UM24C / UM25C / UM34C ------------------------------------------------------------
#
# The meters speak over a Bluetooth serial port (SPP, 9600 8N1; /dev/rfcomm0 once bound). The host
# sends one byte, 0xF0, and the meter answers with a 130-byte big-endian snapshot:
#   0  u16 model id (0x0963 UM24C, 0x09C9 UM25C, 0x0D4C UM34C)
#   2  u16 voltage  (UM25C: 1 mV; UM24C/UM34C: 10 mV)
#   4  u16 current  (UM25C: 0.1 mA; UM24C/UM34C: 1 mA)
#   6  u32 power    (1 mW)
#   10 u16 temperature (deg C)          12 u16 temperature (deg F)
#   14 u16 selected data group          16 10 x (u32 mAh, u32 mWh) per group
#   96 u16 D+ (10 mV)  98 u16 D- (10 mV)  100 u16 charging mode
#   102 u32 threshold mAh  106 u32 threshold mWh  110 u16 threshold current (10 mA)
#   112 u32 threshold recording time (s)  116 u16 recording active
#   118 u16 screen timeout  120 u16 brightness  122 u32 load resistance (0.1 ohm)
#   126 u16 screen  128 u16 end marker 0xFFF1
# edgerun reads the power field (same scale on all three) and cross-checks V x I.

UM_REQUEST = b"\xf0"
UM_FRAME = 130
UM_MODELS = {0x0963: ("UM24C", 0.01, 0.001), 0x09C9: ("UM25C", 0.001, 0.0001), 0x0D4C: ("UM34C", 0.01, 0.001)}


def parse_um_frame(frame: bytes) -> dict:
    """Decode one UM24C/UM25C/UM34C snapshot; raises LinkError on a frame that is not one."""
    if len(frame) != UM_FRAME:
        raise LinkError(f"USB meter: {len(frame)}-byte reply, expected {UM_FRAME}")
    model_id, v_raw, i_raw, p_raw = struct.unpack_from(">HHHI", frame, 0)
    if model_id not in UM_MODELS:
        raise LinkError(f"USB meter: unknown model id 0x{model_id:04x} (UM24C/UM25C/UM34C expected)")
    model, v_scale, i_scale = UM_MODELS[model_id]
    temp_c = struct.unpack_from(">H", frame, 10)[0]
    return {"model": model, "volts": v_raw * v_scale, "amps": i_raw * i_scale, "watts": p_raw * 1e-3,
            "temp_c": temp_c}


def build_um_frame(model: str, volts: float, amps: float, temp_c: int = 25) -> bytes:
    """A snapshot as the meter would send it (used by tests and the protocol docs)."""
    mid = next(k for k, v in UM_MODELS.items() if v[0] == model)
    _, v_scale, i_scale = UM_MODELS[mid]
    frame = bytearray(UM_FRAME)
    struct.pack_into(">HHHIHH", frame, 0, mid, round(volts / v_scale), round(amps / i_scale),
                     round(volts * amps * 1e3), temp_c, round(temp_c * 9 / 5 + 32))
    struct.pack_into(">H", frame, 128, 0xFFF1)
    return bytes(frame)


class UmMeter(PowerSource):
    """An RDTech UM24C/UM25C/UM34C meter on a serial port (or any pyserial URL)."""

    kind = "power"

    def __init__(self, port: str, baudrate: int = 9600, timeout: float = 2.0):
        try:
            import serial
        except ImportError as e:
            raise EdgerunError("the USB power meter needs pyserial: pip install 'edgerun[flash]'") from e
        try:
            self.ser = serial.serial_for_url(port, baudrate=baudrate, timeout=timeout)
        except (serial.SerialException, OSError, ValueError) as e:
            raise LinkError(f"USB meter {port}: {e}") from e
        self.port = port
        try:
            first = self.snapshot()  # identifies the model; fails fast on a wrong port
        except LinkError:
            self.ser.close()
            raise
        self.model = first["model"]
        self.name = f"meter:{self.model}@{port}"
        self.label = f"RDTech {self.model} USB power meter"

    def snapshot(self) -> dict:
        try:
            self.ser.reset_input_buffer()  # a late answer to an earlier request is not this one
            self.ser.write(UM_REQUEST)
            frame = self.ser.read(UM_FRAME)
        except Exception as e:  # serial.SerialException, OSError, termios.error from the tty layer
            raise LinkError(f"USB meter {self.port}: {e}") from e
        if len(frame) < UM_FRAME:
            raise LinkError(f"USB meter {self.port}: no full reply within {self.ser.timeout} s "
                            f"({len(frame)} of {UM_FRAME} bytes)")
        return parse_um_frame(frame)

    def read(self) -> float:
        try:
            return self.snapshot()["watts"]
        except LinkError as e:
            raise OSError(str(e)) from e

    def close(self) -> None:
        self.ser.close()


# ---- discovery --------------------------------------------------------------------------------

def powercap_sources(root: Path | None = None) -> list[PowerSource]:
    base = (root or sysfs_root()) / "class" / "powercap"
    if not base.is_dir():
        return []
    by_vendor: dict[str, list[Path]] = {}
    for z in sorted(base.iterdir(), key=_natural):
        # top-level zones only: "intel-rapl:0", not "intel-rapl:0:1" (inside package 0)
        if z.name.count(":") == 1 and _readable_int(z / "energy_uj"):
            by_vendor.setdefault(z.name.split(":")[0], []).append(z)
    # the MSR interface ("intel-rapl", also on AMD) first; "intel-rapl-mmio" reports the same package
    order = sorted(by_vendor, key=lambda v: (v != "intel-rapl", v))
    return [PowercapSource(by_vendor[v]) for v in order]


def hwmon_sources(root: Path | None = None) -> list[PowerSource]:
    base = (root or sysfs_root()) / "class" / "hwmon"
    if not base.is_dir():
        return []
    energy, power, vi = [], [], []
    for dev in sorted(base.iterdir(), key=_natural):
        d = dev / "device" if not (dev / "name").exists() and (dev / "device" / "name").exists() else dev
        chip = _read_text(d / "name", dev.name)
        for f in sorted(d.glob("energy*_input"), key=_natural):
            if _readable_int(f):
                label = _read_text(d / f.name.replace("_input", "_label"))
                energy.append(HwmonSource(dev, chip, "energy", [f], label))
        for f in sorted(list(d.glob("power*_input")) + list(d.glob("power*_average")), key=_natural):
            n = re.match(r"power(\d+)_", f.name).group(1)
            if f.name.endswith("_average") and (d / f"power{n}_input").exists():
                continue
            if _readable_int(f):
                power.append(HwmonSource(dev, chip, "power", [f], _read_text(d / f"power{n}_label")))
        for f in sorted(d.glob("curr*_input"), key=_natural):
            n = re.match(r"curr(\d+)_", f.name).group(1)
            v = d / f"in{n}_input"
            if _readable_int(f) and _readable_int(v):
                label = _read_text(d / f"in{n}_label") or _read_text(d / f"curr{n}_label")
                vi.append(HwmonSource(dev, chip, "vi", [v, f], label))
    return energy + power + vi


def nvml_sources() -> list[PowerSource]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:  # no driver / no GPU: NVML raises its own error types
        return []
    out = []
    for i in range(count):
        try:
            out.append(NvmlSource(i))
        except Exception:  # a GPU without a power sensor
            continue
    return out


def discover(include_nvml: bool = True) -> list[PowerSource]:
    """Every power source this machine exposes, best first (energy counters before power)."""
    found = powercap_sources() + hwmon_sources()
    if include_nvml:
        found += nvml_sources()
    return found


class ConstantPower(PowerSource):
    """A power figure the user measured (e.g. on a wall meter) and passed with ``--power-w``."""

    kind = "power"

    def __init__(self, watts: float):
        if not watts > 0:
            raise UsageError(f"--power-w must be a positive number of watts, not {watts}")
        self.watts = float(watts)
        self.name = f"user-supplied:{self.watts:g}W"
        self.label = "constant given with --power-w (not measured by edgerun)"

    def read(self) -> float:
        return self.watts


def select(spec: str | None = "auto", *, meter: str | None = None, power_w: float | None = None):
    """The source a benchmark uses, and the names of all that were found.

    ``spec``: ``auto`` (best found), ``none``, or a name (or unique prefix) from the found list.
    ``meter``: a serial port with a UM-series meter (takes precedence). ``power_w``: a constant.
    Returns ``(source or None, [names found])``.
    """
    if sum(x is not None for x in (meter, power_w)) > 1:
        raise UsageError("give one of --power-meter and --power-w, not both")
    if power_w is not None:
        return ConstantPower(power_w), []
    if meter:
        m = UmMeter(meter)
        return m, [m.name]
    spec = spec or "auto"
    if spec == "none":
        return None, []
    found = discover()
    names = [s.name for s in found]
    if spec == "auto":
        chosen = found[0] if found else None
    else:
        hits = [s for s in found if s.name == spec] or [s for s in found if s.name.startswith(spec)]
        if len(hits) != 1:
            what = "no" if not hits else "more than one"
            raise UsageError(f"--power-source {spec!r}: {what} source matches "
                             f"(found: {', '.join(names) or 'none'})")
        chosen = hits[0]
    for s in found:
        if s is not chosen:
            s.close()
    return chosen, names
