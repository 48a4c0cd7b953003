"""Static memory planner: every activation tensor gets an offset in one arena.

Greedy best-fit over tensor lifetimes (the approach of TFLM's GreedyMemoryPlanner, with best-fit
gap choice instead of first-fit):

* a buffer lives from the step that writes it to the last step that reads it (graph inputs from
  step -1, graph outputs to the end);
* buffers are placed largest first (ties: longer-lived first, then index, so the plan is
  deterministic);
* each goes into the smallest gap, among the buffers already placed whose lifetimes overlap it,
  that fits; otherwise above the highest of them.

Like every greedy heuristic this is not guaranteed optimal (optimal placement is NP-complete),
but it never places two simultaneously live buffers in overlapping bytes, which
:func:`overlaps` checks and the tests property-test.
"""

from __future__ import annotations

from dataclasses import dataclass

ALIGNMENT = 16


@dataclass(frozen=True)
class Buffer:
    key: int  # tensor index
    size: int  # bytes
    first: int  # first step it is live (written)
    last: int  # last step it is live (read)


def lifetimes(graph_inputs, steps, *, skip=frozenset(), keep=()) -> dict[int, tuple[int, int]]:
    """{tensor: (first, last)} steps each tensor needing memory is live.

    ``steps`` is the execution order as (input indices, output indices) pairs; graph inputs are
    live from step -1; ``skip`` holds tensors that need no arena memory (constants, folded
    values); tensors in ``keep`` stay live past the last step (``len(steps)``).
    """
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i in graph_inputs:
        if i not in skip:
            first[i] = last[i] = -1
    for si, (ins, outs) in enumerate(steps):
        for i in ins:
            if i >= 0 and i not in skip:
                first.setdefault(i, si)
                last[i] = max(last.get(i, si), si)
        for o in outs:
            first.setdefault(o, si)
            last[o] = max(last.get(o, si), si)
    end = len(steps)
    for o in keep:
        if o in first:
            last[o] = end
    return {k: (first[k], last[k]) for k in first}


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def plan(buffers: list[Buffer]) -> tuple[dict[int, int], int]:
    """Return ({key: offset}, arena_bytes)."""
    order = sorted(buffers, key=lambda b: (-_align(b.size), -(b.last - b.first), b.key))
    placed: list[tuple[int, int, Buffer]] = []  # (offset, aligned size, buffer)
    offsets: dict[int, int] = {}
    for b in order:
        size = _align(b.size)
        live = sorted((off, sz) for off, sz, o in placed if o.first <= b.last and b.first <= o.last)
        best, best_gap, cursor = None, None, 0
        for off, sz in live:
            gap = off - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, off + sz)
        if best is None:
            best = cursor
        offsets[b.key] = best
        placed.append((best, size, b))
    arena = max((off + sz for off, sz, _ in placed), default=0)
    return offsets, arena


def overlaps(buffers: list[Buffer], offsets: dict[int, int]) -> list[tuple[int, int]]:
    """Pairs of buffers that are live at the same time and share bytes (for tests; must be empty)."""
    bad = []
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if a.size == 0 or b.size == 0:
                continue
            if a.first <= b.last and b.first <= a.last:
                oa, ob = offsets[a.key], offsets[b.key]
                if oa < ob + b.size and ob < oa + a.size:
                    bad.append((a.key, b.key))
    return bad
