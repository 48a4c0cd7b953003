"""The interpreter's budgets: total memory and total control-flow work, checked before the work.

A hostile or broken model is small: a 316-byte file can declare a 1 GiB tensor, a 1.7 KB file two
nested loops of a million iterations each. Per-tensor and per-loop caps do not bound that, so the
interpreter keeps two totals per instance:

* **memory**: the bytes every prepared subgraph holds (activation arena, variables, constants
  folded in ``allocate_tensors``, the largest working memory a kernel declares), checked before
  each allocation. Default: half the memory available when the interpreter is made (Linux
  ``MemAvailable``, else the physical memory), at most 1 GiB: an edge model's activations take
  megabytes, so a model asking for more is refused unless the caller says it is meant to be that
  large with ``Interpreter(memory_budget=...)`` or the environment variable
  ``EDGERUN_MEMORY_BUDGET`` (bytes, or with a K/M/G suffix).
* **work**: subgraph runs started by control flow (IF, WHILE: each WHILE iteration runs its
  condition and its body) during one ``invoke``, counted across nesting.
  Default 1,000,000 (about 10 s of the smallest loop body; a streaming model's loop over its
  frames runs thousands at most); ``Interpreter(work_budget=...)`` or ``EDGERUN_WORK_BUDGET`` set it.

Exceeding either raises one ModelFormatError naming the figure, the limit and how to raise it.
"""

from __future__ import annotations

import os

from edgerun.errors import EdgerunError, ModelFormatError

MEMORY_ENV = "EDGERUN_MEMORY_BUDGET"
WORK_ENV = "EDGERUN_WORK_BUDGET"
DEFAULT_WORK = 1_000_000
#: the default memory budget never exceeds this (set a budget to run a larger model)
DEFAULT_MEMORY_CAP = 1 << 30
_FALLBACK_MEMORY = 4 << 30
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | int, what: str) -> int:
    """``"1048576"``, ``"512M"``, ``"2G"``, ``"1.5GiB"`` -> bytes (a positive int)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
        unit = t[-1:] if t[-1:] in _SUFFIX and t[-1:] else ""
        try:
            value = int(float(t[:-1] if unit else t) * _SUFFIX[unit])
        except (ValueError, OverflowError):
            raise EdgerunError(f"{what} {text!r} is not a size (bytes, or a number with K, M or G)") from None
    if value <= 0:
        raise EdgerunError(f"{what} must be positive, got {text!r}")
    return value


def available_memory() -> int:
    """Bytes of memory available now (Linux MemAvailable; else physical memory; else 4 GiB x 2)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 2 * _FALLBACK_MEMORY


def default_memory_budget() -> int:
    env = os.environ.get(MEMORY_ENV)
    if env:
        return parse_size(env, MEMORY_ENV)
    return max(min(available_memory() // 2, DEFAULT_MEMORY_CAP), 64 << 20)


def default_work_budget() -> int:
    env = os.environ.get(WORK_ENV)
    if env:
        return parse_size(env, WORK_ENV)
    return DEFAULT_WORK


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


class MemoryBudget:
    """Total bytes the prepared subgraphs of one interpreter may hold."""

    def __init__(self, limit: int | str | None = None, runners: dict | None = None):
        self.limit = default_memory_budget() if limit is None else parse_size(limit, "memory_budget")
        #: subgraph index -> prepared runner (the interpreter's own dict; each has memory_bytes)
        self.runners = runners if runners is not None else {}

    def check(self, runner, runner_bytes: int, what: str) -> None:
        """Raise unless ``runner`` holding ``runner_bytes`` keeps the total within the limit."""
        others = sum(r.memory_bytes for i, r in self.runners.items() if r is not runner)
        total = others + int(runner_bytes)
        if total > self.limit:
            raise ModelFormatError(
                f"subgraph {runner.index}: {what} brings the model to {_fmt(total)} ({total} bytes), over "
                f"the interpreter's memory budget of {_fmt(self.limit)} ({self.limit} bytes); raise it with "
                f"Interpreter(memory_budget=...) or {MEMORY_ENV} if the model is meant to be this large")


class WorkBudget:
    """Subgraph runs control flow may start during one invoke (all nesting included)."""

    def __init__(self, limit: int | str | None = None):
        self.limit = default_work_budget() if limit is None else parse_size(limit, "work_budget")
        self.used = 0

    def reset(self) -> None:
        self.used = 0

    def spend(self, index: int) -> None:
        self.used += 1
        if self.used > self.limit:
            raise ModelFormatError(
                f"control flow ran {self.limit} subgraphs (IF / WHILE iterations, nested ones included) "
                f"without finishing, at subgraph {index}: over the interpreter's work budget; raise it "
                f"with Interpreter(work_budget=...) or {WORK_ENV} if the model is meant to loop this long")
