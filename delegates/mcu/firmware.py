"""What edgerun's firmware accepts, read from the firmware's own capability table.

``firmware_caps.json`` is generated from ``firmware/src/caps.h`` (op table), the limits in the
firmware's headers and each port's ``board.h`` by ``firmware/tools/gen_caps.py``;
``tests/firmware/test_firmware_caps.py`` fails when it is stale. Nothing here restates a limit by hand.

Public functions (used by ``edgerun check``, ``package`` and ``flash`` for ``mcu:BOARD``):

* :func:`board_capabilities` (board name) -> dict: ``ops`` ({name: [[in, out], ...] type pairs}),
  ``limits`` (max tensors/ops/io/dims/op inputs and outputs, elements per tensor, work per
  inference, MEAN outputs, RAM per tensor and per op record), ``arena_bytes`` (RAM for activations), ``slot_bytes`` (one flash slot) and
  ``source`` (where the sizes come from: the firmware port's board.h, or edgerun/targets.py for a
  board with no port yet).
* :func:`firmware_accepts` (model bytes or path, board name) -> list of one-line reasons the
  firmware would refuse the model at COMMIT (empty: it loads). It mirrors the loader: slot size,
  tensor/op/io counts, ranks and element counts, the op and type table, MEAN's output limit, the
  work budget and the firmware's arena (tensor/op tables + prepared data + activation plan) (same greedy algorithm as
  ``firmware/src/model.c: plan_arena``). ``tests/firmware/test_firmware_caps.py`` checks the prediction
  against the posix firmware's COMMIT in both directions.
* :func:`firmware_arena_bytes` (model) -> the arena the firmware will plan.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from edgerun.errors import EdgerunError

CAPS_PATH = Path(__file__).with_name("firmware_caps.json")
_TYPE_SIZES = {"float32": 4, "int32": 4, "uint8": 1, "int8": 1, "int16": 2, "int64": 8}


@functools.lru_cache(maxsize=1)
def load_caps() -> dict:
    """The generated table, as stored."""
    return json.loads(CAPS_PATH.read_text())


def board_capabilities(board: str) -> dict:
    """The firmware's op table and limits for ``board`` (an ``edgerun.targets.BOARDS`` MCU name)."""
    from edgerun.targets import BOARDS

    caps = load_caps()
    b = BOARDS.get(board)
    if b is None or b.kind != "mcu":
        known = ", ".join(sorted(k for k, v in BOARDS.items() if v.kind == "mcu"))
        raise EdgerunError(f"unknown microcontroller board {board!r}; known: {known}")
    fw = caps["boards"].get(board)
    if fw:
        arena, slot, source = fw["arena_bytes"], fw["slot_bytes"], f"firmware/port/{fw['ports'][0]}/board.h"
    else:  # same firmware core, sizes from the board's profile until it has a port of its own
        arena, slot, source = b.ram_bytes - b.firmware_ram_bytes, b.flash_bytes, "edgerun/targets.py"
    return {"board": board, "ops": {k: [list(p) for p in v["types"]] for k, v in caps["ops"].items()},
            "limits": dict(caps["limits"]), "arena_bytes": arena, "slot_bytes": slot, "source": source}


def _model(model):
    from edgerun.schema.reader import read_model

    if isinstance(model, (str, Path)):
        model = Path(model).read_bytes()
    data = bytes(model)
    return data, read_model(data)


def _tensor_facts(model, g):
    """Per tensor: (shape as the firmware reads it, dtype, element count or None if too large,
    is_const)."""
    out = []
    lim = load_caps()["limits"]["max_elements"]
    for t in g.tensors:
        dims = [1 if int(d) == -1 else int(d) for d in t.shape]
        count, big = 1, False
        for d in dims:
            if d < 0 or d > lim:
                big = True
            count *= max(d, 0)
        nz = 1
        for d in dims:
            nz *= d if d > 0 else 1
        if nz > lim:
            big = True
        const = bool(t.buffer) and len(model.buffer_bytes(t.buffer)) > 0
        out.append((dims, t.dtype, None if big else count, const))
    return out


def _lifetimes(g, facts):
    n_ops = len(g.operators)
    first = [None] * len(facts)
    last = [-1] * len(facts)
    used = [False] * len(facts)
    for ti in g.inputs:
        used[ti] = True
        first[ti] = -1
    for ti in g.outputs:
        used[ti] = True
        last[ti] = n_ops
    for i, op in enumerate(g.operators):
        for ti in list(op.inputs) + list(op.outputs):
            if ti < 0:
                continue
            used[ti] = True
            first[ti] = i if first[ti] is None else min(first[ti], i)
            last[ti] = max(last[ti], i)
    for ti in range(len(facts)):
        if used[ti] and not facts[ti][3] and first[ti] is None:
            first[ti] = 0
    return used, first, last


def _variables(m, g) -> dict[str, int]:
    """Resource variables: shared_name -> bytes of the initial value CALL_ONCE's subgraph assigns."""
    out = {}
    for op in g.operators:
        if m.op_name(op) != "CALL_ONCE":
            continue
        idx = int((op.options or {}).get("init_subgraph_index", -1))
        if not 0 < idx < len(m.subgraphs):
            continue
        sg = m.subgraphs[idx]
        names = {}
        for iop in sg.operators:
            if m.op_name(iop) == "VAR_HANDLE" and iop.outputs:
                names[iop.outputs[0]] = (iop.options or {}).get("shared_name")
            elif m.op_name(iop) == "ASSIGN_VARIABLE" and len(iop.inputs) == 2:
                t = sg.tensors[iop.inputs[1]]
                n = 1
                for d in t.shape:
                    n *= int(d)
                out[names.get(iop.inputs[0])] = n * _TYPE_SIZES.get(t.dtype, 0)
    return out


def _plan(facts, used, first, last) -> int:
    """firmware/src/model.c plan_arena: largest first (ties by index), lowest offset that does not
    overlap a placed tensor alive at the same time; 16-byte aligned sizes."""
    def size(i):
        dims, dtype, count, _ = facts[i]
        return ((count or 0) * _TYPE_SIZES.get(dtype, 0) + 15) & ~15

    order = sorted((i for i in range(len(facts)) if used[i] and not facts[i][3] and facts[i][1] != "resource"),
                   key=lambda i: (-size(i), i))
    placed, total = [], 0
    for i in order:
        s, off, moved = size(i), 0, True
        while moved:
            moved = False
            for j, joff, js in placed:
                if last[j] < first[i] or last[i] < first[j]:
                    continue
                if off < joff + js and joff < off + s:
                    off, moved = joff + js, True
        placed.append((i, off, s))
        total = max(total, off + s)
    return total


def firmware_arena_bytes(model) -> int:
    """The RAM the firmware's arena gives ``model`` (bytes): its planned activations, its prepared
    data and its tensor/op tables (the figure COMMIT reports as arena_bytes)."""
    data, m = _model(model)
    g = m.main
    facts = _tensor_facts(m, g)
    used, first, last = _lifetimes(g, facts)
    lim = load_caps()["limits"]
    meta = len(g.tensors) * lim["tensor_meta_bytes"] + len(g.operators) * lim["node_meta_bytes"]
    return _plan(facts, used, first, last) + _pool_bytes(m, g, facts) + meta


def _work(op_name, ins, out, facts, opts):
    w = facts[out][2] or 0  # (the other outputs of a multi-output op are added by the caller)
    for i in ins:
        if i >= 0:
            w += facts[i][2] or 0
    oc = facts[out][2] or 0
    f = facts[ins[1]][0] if len(ins) > 1 and ins[1] >= 0 else None
    if op_name == "CONV_2D" and f and len(f) == 4:
        return w + oc * f[1] * f[2] * facts[ins[0]][0][3]
    if op_name == "DEPTHWISE_CONV_2D" and f and len(f) == 4:
        return w + oc * f[1] * f[2]
    if op_name == "FULLY_CONNECTED" and f and len(f) == 2:
        return w + oc * f[1]
    if op_name == "TRANSPOSE_CONV" and f and len(f) == 4:
        return w + oc * f[1] * f[2] * f[3]
    if op_name == "BATCH_MATMUL" and len(facts[ins[0]][0]) >= 2:
        x = facts[ins[0]][0]
        return w + oc * (x[-2] if opts.get("adj_x") else x[-1])
    if op_name in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        x = facts[ins[0]][0]
        if len(x) == 4:
            fh = min(int(opts.get("filter_height", 1)), x[1])
            fw = min(int(opts.get("filter_width", 1)), x[2])
            return w + oc * fh * fw
    return w


def firmware_accepts(model, board: str) -> list[str]:
    """Reasons the firmware on ``board`` would refuse ``model`` at COMMIT; ``[]`` when it loads.

    ``model``: .tflite bytes or a path. Mirrors firmware/src/model.c and kernels.c's table-level
    checks (see the module docstring); an op's own shape checks (a conv whose output shape does
    not follow from its input) are not repeated here: a converter never writes those.
    """
    caps = board_capabilities(board)
    lim = caps["limits"]
    try:
        data, m = _model(model)
    except EdgerunError as e:
        return [f"not a model the firmware can read: {e}"]
    reasons = []
    if len(data) > caps["slot_bytes"]:
        reasons.append(f"model is {len(data)} B; a flash slot on {board} holds {caps['slot_bytes']} B")
    g = m.main
    nt, no, ni, nout = len(g.tensors), len(g.operators), len(g.inputs), len(g.outputs)
    if nt > lim["max_tensors"] or no > lim["max_ops"] or not 0 < ni <= lim["max_io"] or not 0 < nout <= lim["max_io"]:
        reasons.append(f"model has {nt} tensors, {no} ops, {ni} inputs, {nout} outputs; the firmware takes at most "
                       f"{lim['max_tensors']} tensors, {lim['max_ops']} ops, {lim['max_io']} inputs/outputs")
        return reasons  # the firmware stops here too
    facts = _tensor_facts(m, g)
    for i, (dims, dtype, count, _c) in enumerate(facts):
        if len(dims) > lim["max_dims"]:
            reasons.append(f"tensor {i} '{g.tensors[i].name}' has rank {len(dims)} (at most {lim['max_dims']})")
        elif count is None:
            reasons.append(f"tensor {i} '{g.tensors[i].name}' {dims} has more than {lim['max_elements']} elements")
    if reasons:
        return reasons
    used, first, last = _lifetimes(g, facts)
    for i, (_d, dtype, count, _c) in enumerate(facts):
        if used[i] and dtype != "resource" and (count == 0 or dtype not in _TYPE_SIZES):
            reasons.append(f"tensor {i} '{g.tensors[i].name}' is empty or of a type the firmware lacks ({dtype})")
    work, pool = 0, _pool_bytes(m, g, facts)
    for k, op in enumerate(g.operators):
        name = m.op_name(op)
        if name not in caps["ops"]:
            reasons.append(f"op {k} ({name}) is not in the firmware's op table")
            continue
        ins, outs = list(op.inputs), list(op.outputs)
        if caps["ops"][name] == [["*"]]:  # CALL_ONCE / VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE
            continue
        if len(ins) > lim["max_op_inputs"] or not 1 <= len(outs) <= lim["max_op_outputs"]:
            reasons.append(f"op {k} ({name}) has {len(ins)} inputs and {len(outs)} outputs")
            continue
        data = {"SPLIT": 1, "TRANSPOSE_CONV": 2}.get(name, 0)  # SPLIT: input 0 is the axis; TRANSPOSE_CONV: the shape
        if not ins or ins[0] < 0 or len(ins) <= data or ins[data] < 0:
            reasons.append(f"op {k} ({name}) has no input")
            continue
        tin, tout = facts[ins[data]][1], facts[outs[0]][1]
        pairs = caps["ops"][name]
        if not any((a == "same" and tin == tout) or (a, b) == (tin, tout) for a, b in pairs):
            reasons.append(f"op {k} ({name}) takes {' | '.join('>'.join(p) for p in pairs)} (input>output types), "
                           f"not {tin}>{tout}")
            continue
        if pairs != [["same", "same"]] and name not in ("CAST", "SHAPE"):  # those two ignore quantization
            unq = [t for t in (ins[data], outs[0]) if facts[t][1] == "int8" and not g.tensors[t].quantized]
            if unq:
                reasons.append(f"op {k} ({name}): int8 tensor '{g.tensors[unq[0]].name}' has no quantization")
                continue
        opts = op.options or {}
        if name in ("MEAN", "SUM") and (facts[outs[0]][2] or 0) > lim["mean_max_outputs"]:
            reasons.append(f"op {k} ({name}) has more than {lim['mean_max_outputs']} outputs")
        if name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED") and tin == "int16" and len(ins) > 2 \
                and ins[2] >= 0 and facts[ins[2]][1] != "int64":
            reasons.append(f"op {k} ({name}): a 16x8 bias must be int64 (LiteRT 2.3 misreads int32 ones)")
        if name in ("ADD", "SUB") and tin == "int16" and opts.get("pot_scale_int16", True):
            reasons.append(f"op {k} ({name}): int16 with power-of-two scales (pot_scale_int16) is not supported")
        work += _work(name, ins, outs[0], facts, opts) + sum(facts[o][2] or 0 for o in outs[1:])
    if work > lim["max_work"]:
        reasons.append(f"model needs {work} operations per inference (limit {lim['max_work']})")
    meta = nt * lim["tensor_meta_bytes"] + no * lim["node_meta_bytes"]
    acts = _plan(facts, used, first, last)
    if acts + pool + meta > caps["arena_bytes"]:
        reasons.append(f"model needs an arena of {acts + pool + meta} B ({acts} activations, {pool + meta} tables); "
                       f"{board} has {caps['arena_bytes']} B of RAM for it (DOES NOT FIT)")
    return reasons


def _pool_bytes(m, g, facts) -> int:
    """Prepared data the firmware keeps per op (multipliers, tables, views), 8-byte rounded."""
    pool = 0
    for op in g.operators:
        name, ins, outs = m.op_name(op), list(op.inputs), list(op.outputs)
        channels = facts[outs[0]][0][-1] if outs and facts[outs[0]][0] else 1
        if name in ("CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV"):
            pool += 2 * ((4 * channels + 7) & ~7)
        elif name == "FULLY_CONNECTED" and len(ins) > 1 and ins[1] >= 0 and facts[ins[1]][0]:
            pool += 8 * facts[ins[1]][0][0]  # one double per unit (requantization in double)
        elif name == "SOFTMAX":
            # int16 in: two 513-entry int16 tables; int8 -> int16: two 256-entry int32 tables
            pool += 2056 if facts[ins[0]][1] == "int16" else 2048 if facts[outs[0]][1] == "int16" else 1024
        elif name in ("LOGISTIC", "TANH", "LEAKY_RELU", "HARD_SWISH", "EXP", "ABS", "SQRT", "RSQRT"):
            pool += 256
        elif name in ("LOG_SOFTMAX", "DIV"):
            pool += 2048  # two int32 tables (by the difference to the row maximum; by the divisor byte)
        elif name in ("TRANSPOSE", "SLICE", "STRIDED_SLICE", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH"):
            pool += 56
        elif name == "MIRROR_PAD":
            pool += (4 * len(facts[ins[0]][0]) + 7) & ~7
        elif name in ("PACK", "UNPACK", "SPLIT", "SPLIT_V"):
            pool += (4 * (len(ins) if name == "PACK" else len(outs)) + 7) & ~7
    for nbytes in _variables(m, g).values():  # variable storage
        pool += (nbytes + 7) & ~7
    return pool
