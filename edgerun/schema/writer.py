""":class:`edgerun.ir.Model` -> TFLite flatbuffer bytes; the inverse of ``reader.py``.

Deterministic: the same Model always gives the same bytes (fields are written in slot order,
buffers in index order, no timestamps). Buffer data is 16-byte aligned, as TFLite's converter
does, so kernels and TFLM can read weights in place. Buffer 0 stays the empty sentinel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import flatbuffers
import numpy as np

from edgerun.schema import tflite

if TYPE_CHECKING:  # annotations only: edgerun.ir imports this module to serialize itself
    from edgerun.ir import Model, QuantParams, Sparsity, Tensor

_PREPEND = {"b": "PrependInt8Slot", "B": "PrependUint8Slot", "?": "PrependBoolSlot",
            "i": "PrependInt32Slot", "I": "PrependUint32Slot", "q": "PrependInt64Slot",
            "Q": "PrependUint64Slot", "f": "PrependFloat32Slot"}
_VEC = {"i": np.int32, "I": np.uint32, "f": np.float32, "B": np.uint8, "q": np.int64,
        "H": np.uint16}


class _Writer:
    def __init__(self):
        self.b = flatbuffers.Builder(1024)
        self.b.ForceDefaults(True)  # write every scalar we pass: explicit is portable

    def vec(self, values, fmt: str) -> int:
        return self.b.CreateNumpyVector(np.ascontiguousarray(values, dtype=np.dtype(_VEC[fmt]).newbyteorder("<")))

    def bytes_aligned(self, data, align: int = 16) -> int:
        data = bytes(data)
        b = self.b
        b.StartVector(1, len(data), align)
        b.head = b.head - len(data)
        b.Bytes[b.head:b.head + len(data)] = data
        return b.EndVector()

    def offsets(self, offs: list[int]) -> int:
        b = self.b
        b.StartVector(4, len(offs), 4)
        for o in reversed(offs):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    def string(self, s: str | None) -> int:
        return self.b.CreateString(s) if s is not None else 0

    def table(self, nslots: int, fields: list[tuple[int, str, object]]) -> int:
        """fields: (slot, kind, value); kind "o" is an offset already built, else a scalar kind."""
        b = self.b
        b.StartObject(nslots)
        for slot, kind, value in fields:
            if value is None:
                continue
            if kind == "o":
                if value:
                    b.PrependUOffsetTRelativeSlot(slot, value, 0)
            else:
                getattr(b, _PREPEND[kind])(slot, value, 0)
        return b.EndObject()



def _options(w: _Writer, table_name: str, values: dict) -> int:
    fields = tflite.OPTION_FIELDS.get(table_name, ())
    unknown = set(values) - {f[0] for f in fields if f is not None}
    if unknown:  # never drop an option silently (VAR_HANDLE's shared_name once was)
        raise ValueError(f"{table_name} has no field(s) {', '.join(sorted(unknown))}")
    built = []
    for slot, spec in enumerate(fields):
        if spec is None:
            continue
        name, kind, default = spec
        v = values.get(name, default)
        if kind.startswith("["):
            built.append((slot, "o", w.vec(list(v), kind[1]) if len(v) else None))
        elif kind == "s":
            built.append((slot, "o", w.string(v) if v is not None else None))
        else:
            built.append((slot, kind, type(default)(v) if default is not None else v))
    return w.table(len(fields), built)


def _quant(w: _Writer, q: QuantParams) -> int:
    fields = []
    if q.min is not None:
        fields.append((0, "o", w.vec(q.min, "f")))
    if q.max is not None:
        fields.append((1, "o", w.vec(q.max, "f")))
    if not q.empty:
        fields.append((2, "o", w.vec(q.scale, "f")))
        fields.append((3, "o", w.vec(q.zero_point, "q")))
        fields.append((6, "i", int(q.quantized_dimension)))
    return w.table(7, fields)


def _sparsity(w: _Writer, s: Sparsity) -> int:
    dims = []
    for d in s.dim_metadata:
        f = [(0, "b", int(d.format)), (1, "i", int(d.dense_size))]
        for slot_type, arr in ((2, d.array_segments), (4, d.array_indices)):
            if arr is not None:
                inner = w.vec(arr, "i")
                f += [(slot_type, "B", 1), (slot_type + 1, "o", w.table(1, [(0, "o", inner)]))]
        dims.append(w.table(6, f))
    return w.table(3, [(0, "o", w.vec(s.traversal_order, "i")), (1, "o", w.vec(s.block_map, "i")),
                       (2, "o", w.offsets(dims))])


def _tensor(w: _Writer, t: Tensor) -> int:
    name = w.string(t.name)
    shape = w.vec(t.shape, "i")
    quant = _quant(w, t.quant) if t.quant is not None else 0
    sparsity = _sparsity(w, t.sparsity) if t.sparsity is not None else 0
    sig = w.vec(t.shape_signature, "i") if t.shape_signature is not None else 0
    fields = [(0, "o", shape), (1, "b", tflite.TENSOR_TYPE_CODES[t.dtype]), (2, "I", int(t.buffer)),
              (3, "o", name), (4, "o", quant), (6, "o", sparsity), (7, "o", sig)]
    if t.is_variable:
        fields.append((5, "?", True))
    if t.has_rank:
        fields.append((8, "?", True))
    return w.table(9, fields)


def write_model(model: Model) -> bytes:
    """Serialize a Model to TFLite flatbuffer bytes (file identifier ``TFL3``)."""
    w = _Writer()
    # Large constant data first: it ends up at the end of the file, out of the way of tables.
    buffers = []
    for data in reversed(model.buffers):
        if len(data):
            buffers.append(w.table(3, [(0, "o", w.bytes_aligned(data))]))
        else:
            buffers.append(w.table(3, []))
    buffers.reverse()

    subgraphs = []
    for g in model.subgraphs:
        tensors = [_tensor(w, t) for t in g.tensors]
        ops = []
        for op in g.operators:
            code = model.operator_codes[op.opcode_index]
            table_name = tflite.OP_OPTIONS.get(code.builtin)
            if op.options and not table_name:
                raise ValueError(f"{code.builtin} carries no builtin options, got {sorted(op.options)}")
            opt = _options(w, table_name, op.options) if table_name else 0
            custom = w.vec(np.frombuffer(op.custom_options, np.uint8), "B") if op.custom_options else 0
            inter = w.vec(op.intermediates, "i") if op.intermediates else 0
            fields = [(0, "I", op.opcode_index), (1, "o", w.vec(op.inputs, "i")),
                      (2, "o", w.vec(op.outputs, "i")), (5, "o", custom), (8, "o", inter)]
            if table_name:
                fields += [(3, "B", tflite.BUILTIN_OPTIONS_INDEX[table_name]), (4, "o", opt)]
            ops.append(w.table(9, fields))
        subgraphs.append(w.table(5, [(0, "o", w.offsets(tensors)), (1, "o", w.vec(g.inputs, "i")),
                                     (2, "o", w.vec(g.outputs, "i")), (3, "o", w.offsets(ops)),
                                     (4, "o", w.string(g.name))]))

    codes = []
    for c in model.operator_codes:
        code = tflite.BUILTIN_OPERATORS[c.builtin]
        custom = w.string(c.custom_code) if c.custom_code is not None else 0
        codes.append(w.table(4, [(0, "b", min(code, 127)), (1, "o", custom),
                                 (2, "i", int(c.version)), (3, "i", code)]))

    metadata = [w.table(2, [(0, "o", w.string(name)), (1, "I", int(bi))]) for name, bi in model.metadata]

    sigs = []
    for sd in model.signature_defs:
        maps = []
        for entries in (sd.inputs, sd.outputs):
            maps.append(w.offsets([w.table(2, [(0, "o", w.string(n)), (1, "I", int(ti))])
                                   for n, ti in entries]))
        sigs.append(w.table(5, [(0, "o", maps[0]), (1, "o", maps[1]), (2, "o", w.string(sd.key)),
                                (4, "I", int(sd.subgraph_index))]))

    root = [(0, "I", int(model.version)), (1, "o", w.offsets(codes)), (2, "o", w.offsets(subgraphs)),
            (3, "o", w.string(model.description)), (4, "o", w.offsets(buffers))]
    if model.metadata_buffer:
        root.append((5, "o", w.vec(model.metadata_buffer, "i")))
    if metadata:
        root.append((6, "o", w.offsets(metadata)))
    if sigs:
        root.append((7, "o", w.offsets(sigs)))
    w.b.Finish(w.table(8, root), file_identifier=tflite.FILE_IDENTIFIER)
    return bytes(w.b.Output())
