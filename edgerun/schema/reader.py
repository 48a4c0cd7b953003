"""TFLite flatbuffer bytes -> :class:`edgerun.ir.Model`, checking every offset before use.

The ``flatbuffers`` runtime follows whatever offsets the bytes contain, so this reader does its
own decoding with explicit bounds checks: every table position, vtable, field offset, vector
length and string is verified to lie inside the buffer before it is read, and numpy views are
made only over verified ranges. Hostile or truncated input raises :class:`ModelFormatError`
(with the byte offset), never crashes, hangs or allocates more than the file's size. The walk
follows the fixed shape of the schema, so no input can make it recurse or loop without bound.
"""

from __future__ import annotations

import struct

import numpy as np

from edgerun.errors import ModelFormatError
from edgerun.ir import (DimensionMetadata, Model, Operator, OperatorCode, QuantParams,
                        SignatureDef, Sparsity, Subgraph, Tensor)
from edgerun.schema import tflite

_SCALARS = {"b": ("<b", 1), "B": ("<B", 1), "?": ("<?", 1), "h": ("<h", 2), "H": ("<H", 2),
            "i": ("<i", 4), "I": ("<I", 4), "q": ("<q", 8), "Q": ("<Q", 8), "f": ("<f", 4)}
_VEC_DTYPES = {"i": np.int32, "I": np.uint32, "f": np.float32, "B": np.uint8, "b": np.int8,
               "q": np.int64, "H": np.uint16}


class _Buf:
    __slots__ = ("mv", "n")

    def __init__(self, data):
        self.mv = memoryview(data).cast("B")
        self.n = len(self.mv)

    def need(self, pos: int, size: int, what: str) -> None:
        if pos < 0 or size < 0 or pos + size > self.n:
            raise ModelFormatError(f"truncated or corrupt model: {what} at byte {pos} "
                                   f"(+{size}) lies outside the {self.n}-byte file")

    def get(self, fmt: str, pos: int, what: str):
        code, size = _SCALARS[fmt]
        self.need(pos, size, what)
        return struct.unpack_from(code, self.mv, pos)[0]


class _Table:
    """A flatbuffer table whose vtable has been validated."""

    __slots__ = ("buf", "pos", "vt", "vt_size", "t_size", "what")

    def __init__(self, buf: _Buf, pos: int, what: str):
        self.buf, self.pos, self.what = buf, pos, what
        buf.need(pos, 4, f"{what} table")
        vt = pos - buf.get("i", pos, what)
        buf.need(vt, 4, f"{what} vtable")
        self.vt_size = buf.get("H", vt, what)
        self.t_size = buf.get("H", vt + 2, what)
        if self.vt_size < 4 or self.vt_size % 2:
            raise ModelFormatError(f"corrupt model: {what} vtable at byte {vt} has size {self.vt_size}")
        buf.need(vt, self.vt_size, f"{what} vtable")
        buf.need(pos, self.t_size, f"{what} table body")
        self.vt = vt

    def _off(self, slot: int) -> int:
        voff = 4 + 2 * slot
        if voff >= self.vt_size:
            return 0
        o = self.buf.get("H", self.vt + voff, self.what)
        if o and o >= self.t_size:
            raise ModelFormatError(f"corrupt model: {self.what} field {slot} at offset {o} lies "
                                   f"outside its {self.t_size}-byte table (byte {self.pos})")
        return o

    def has(self, slot: int) -> bool:
        return self._off(slot) != 0

    def scalar(self, slot: int, fmt: str, default=0):
        o = self._off(slot)
        return self.buf.get(fmt, self.pos + o, self.what) if o else default

    def _indirect(self, slot: int) -> int:
        o = self._off(slot)
        if not o:
            return 0
        p = self.pos + o
        return p + self.buf.get("I", p, self.what)

    def table(self, slot: int, what: str) -> _Table | None:
        p = self._indirect(slot)
        return _Table(self.buf, p, what) if p else None

    def _vector(self, slot: int, elem: int, what: str) -> tuple[int, int] | None:
        p = self._indirect(slot)
        if not p:
            return None
        n = self.buf.get("I", p, what)
        self.buf.need(p + 4, n * elem, f"{what} vector of {n} elements")
        return p + 4, n

    def string(self, slot: int, what: str, default: str | None = None) -> str | None:
        v = self._vector(slot, 1, what)
        if v is None:
            return default
        start, n = v
        try:
            return bytes(self.buf.mv[start:start + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModelFormatError(f"corrupt model: {what} at byte {start} is not UTF-8") from e

    def array(self, slot: int, fmt: str, what: str) -> np.ndarray | None:
        dt = np.dtype(_VEC_DTYPES[fmt]).newbyteorder("<")
        v = self._vector(slot, dt.itemsize, what)
        if v is None:
            return None
        start, n = v
        return np.frombuffer(self.buf.mv, dtype=dt, count=n, offset=start)

    def raw(self, slot: int, what: str) -> memoryview | None:
        v = self._vector(slot, 1, what)
        if v is None:
            return None
        start, n = v
        return self.buf.mv[start:start + n]

    def tables(self, slot: int, what: str) -> list[_Table]:
        v = self._vector(slot, 4, what)
        if v is None:
            return []
        start, n = v
        out = []
        for i in range(n):
            p = start + 4 * i
            out.append(_Table(self.buf, p + self.buf.get("I", p, what), f"{what}[{i}]"))
        return out


def _ints(arr: np.ndarray | None) -> list[int]:
    return [] if arr is None else [int(x) for x in arr]


def _read_options(t: _Table | None, table_name: str) -> dict:
    fields = tflite.OPTION_FIELDS.get(table_name, ())
    out: dict = {}
    for slot, spec in enumerate(fields):
        if spec is None:
            continue
        name, kind, default = spec
        if t is None:
            out[name] = default
        elif kind.startswith("["):
            arr = t.array(slot, kind[1], f"{table_name}.{name}")
            out[name] = () if arr is None else tuple(arr.tolist())
        elif kind == "s":
            out[name] = t.string(slot, f"{table_name}.{name}", default)
        else:
            out[name] = t.scalar(slot, kind, default)
    return out


_ZERO_I64 = np.zeros(1, np.int64)


def _read_quant(t: _Table | None, ndim: int, name: str) -> QuantParams | None:
    if t is None:
        return None
    scale = t.array(2, "f", f"tensor '{name}' scales")
    zp = t.array(3, "q", f"tensor '{name}' zero points")
    mn, mx = t.array(0, "f", "quant min"), t.array(1, "f", "quant max")
    if scale is None or scale.size == 0:
        if mn is None and mx is None:
            return None
        return QuantParams(np.zeros(0, np.float32), np.zeros(0, np.int64), 0,
                           None if mn is None else mn.copy(), None if mx is None else mx.copy())
    axis = t.scalar(6, "i", 0)
    zp_arr = np.zeros(scale.size, np.int64) if zp is None or zp.size == 0 else zp.astype(np.int64)
    if zp_arr.size > 1 and not zp_arr.any():
        # per-axis zero points are 0 by spec (symmetric weights, their biases): one read-only
        # zero broadcast, not 8 bytes a channel (103 KB on iris landmark int8)
        zp_arr = np.broadcast_to(_ZERO_I64, zp_arr.shape)
    if zp_arr.size not in (1, scale.size):
        raise ModelFormatError(f"tensor '{name}': {scale.size} scales but {zp_arr.size} zero points")
    if scale.size > 1 and not (0 <= axis < max(ndim, 1)):
        raise ModelFormatError(f"tensor '{name}': quantized_dimension {axis} out of range for rank {ndim}")
    return QuantParams(scale.astype(np.float32), zp_arr, axis,
                       None if mn is None else mn.copy(), None if mx is None else mx.copy())


def _read_sparsity(t: _Table | None, name: str) -> Sparsity | None:
    if t is None:
        return None
    dims = []
    for d in t.tables(2, f"tensor '{name}' dim_metadata"):
        seg = idx = None
        for slot_type, slot_val, label in ((2, 3, "array_segments"), (4, 5, "array_indices")):
            kind = d.scalar(slot_type, "B", 0)
            if kind == 0:
                continue
            if kind not in tflite.SPARSE_INDEX_VECTORS:
                raise ModelFormatError(f"tensor '{name}': unknown sparse index vector type {kind}")
            vt = d.table(slot_val, f"tensor '{name}' {label}")
            fmt = {np.int32: "i", np.uint16: "H", np.uint8: "B"}[tflite.SPARSE_INDEX_VECTORS[kind]]
            arr = vt.array(0, fmt, label) if vt is not None else None
            # a view of the model buffer in its stored type (uint8 / uint16 / int32): readers widen
            # it as they need (densify); an int32 copy had been 2.8 MB on pose detection's float graph
            arr = np.zeros(0, np.int32) if arr is None else arr
            if label == "array_segments":
                seg = arr
            else:
                idx = arr
        dims.append(DimensionMetadata(d.scalar(0, "b", 0), d.scalar(1, "i", 0), seg, idx))
    return Sparsity(_ints(t.array(0, "i", "traversal_order")), _ints(t.array(1, "i", "block_map")), dims)


def _read_tensor(t: _Table, nbuf: int, idx: int) -> Tensor:
    name = t.string(3, f"tensor {idx} name", "") or ""
    shape = tuple(_ints(t.array(0, "i", f"tensor '{name}' shape")))
    if any(d < -1 for d in shape):
        raise ModelFormatError(f"tensor '{name}': negative dimension in shape {list(shape)}")
    type_code = t.scalar(1, "b", 0)
    if type_code not in tflite.TENSOR_TYPES:
        raise ModelFormatError(f"tensor '{name}': unknown tensor type {type_code}")
    buf = t.scalar(2, "I", 0)
    if buf >= max(nbuf, 1):
        raise ModelFormatError(f"tensor '{name}': buffer index {buf} out of range ({nbuf} buffers)")
    sig = t.array(7, "i", f"tensor '{name}' shape_signature")
    return Tensor(name=name, shape=tuple(max(d, 1) if d == -1 else d for d in shape),
                  dtype=tflite.TENSOR_TYPES[type_code][0], buffer=buf,
                  quant=_read_quant(t.table(4, f"tensor '{name}' quantization"), len(shape), name),
                  shape_signature=None if sig is None else tuple(int(d) for d in sig),
                  is_variable=bool(t.scalar(5, "?", False)),
                  sparsity=_read_sparsity(t.table(6, f"tensor '{name}' sparsity"), name),
                  has_rank=bool(t.scalar(8, "?", False)))


def _check_indices(indices: list[int], ntensors: int, what: str, optional_ok: bool) -> None:
    for i in indices:
        if i >= ntensors or i < (-1 if optional_ok else 0):
            raise ModelFormatError(f"corrupt model: {what} refers to tensor {i} "
                                   f"(subgraph has {ntensors})")


def _read_operator(t: _Table, codes: list[OperatorCode], ntensors: int, i: int, mv) -> Operator:
    what = f"operator {i}"
    opcode_index = t.scalar(0, "I", 0)
    if opcode_index >= len(codes):
        raise ModelFormatError(f"corrupt model: {what} uses opcode {opcode_index} "
                               f"(model has {len(codes)})")
    inputs, outputs = _ints(t.array(1, "i", f"{what} inputs")), _ints(t.array(2, "i", f"{what} outputs"))
    intermediates = _ints(t.array(8, "i", f"{what} intermediates"))
    _check_indices(inputs, ntensors, f"{what} input", True)
    _check_indices(outputs, ntensors, f"{what} output", False)
    _check_indices(intermediates, ntensors, f"{what} intermediate", False)
    code = codes[opcode_index]
    opt_type = t.scalar(3, "B", 0)
    options: dict = {}
    if opt_type:
        if opt_type >= len(tflite.BUILTIN_OPTIONS):
            raise ModelFormatError(f"corrupt model: {what} has unknown options type {opt_type}")
        table_name = tflite.BUILTIN_OPTIONS[opt_type]
        options = _read_options(t.table(4, f"{what} {table_name}"), table_name)
    elif code.builtin in tflite.OP_OPTIONS:
        options = _read_options(None, tflite.OP_OPTIONS[code.builtin])
    custom = t.raw(5, f"{what} custom_options")
    big_off, big_size = t.scalar(9, "Q", 0), t.scalar(10, "Q", 0)
    if custom is None and big_size:
        if big_off + big_size > len(mv):
            raise ModelFormatError(f"corrupt model: {what} custom options at byte {big_off} "
                                   f"(+{big_size}) lie outside the file")
        custom = mv[big_off:big_off + big_size]
    return Operator(opcode_index, inputs, outputs, options,
                    None if custom is None else bytes(custom), intermediates)


def read_model(data: bytes | bytearray | memoryview) -> Model:
    """Parse TFLite flatbuffer bytes into a :class:`Model` (buffers are zero-copy views)."""
    buf = _Buf(data)
    if buf.n < 8:
        raise ModelFormatError(f"not a TFLite model: {buf.n} bytes is too short")
    if bytes(buf.mv[4:8]) != tflite.FILE_IDENTIFIER:
        raise ModelFormatError(f"not a TFLite model: file identifier is {bytes(buf.mv[4:8])!r}, "
                               f"expected {tflite.FILE_IDENTIFIER!r}")
    root = _Table(buf, buf.get("I", 0, "root offset"), "model")
    version = root.scalar(0, "I", 0)
    if version != tflite.SCHEMA_VERSION:
        raise ModelFormatError(f"unsupported TFLite schema version {version} "
                               f"(edgerun reads version {tflite.SCHEMA_VERSION})")

    codes = []
    for i, c in enumerate(root.tables(1, "operator_codes")):
        code = tflite.builtin_code(c.scalar(0, "b", 0), c.scalar(3, "i", 0))
        if code not in tflite.BUILTIN_OPERATOR_NAMES:
            raise ModelFormatError(f"operator code {i}: unknown builtin operator {code}")
        codes.append(OperatorCode(tflite.BUILTIN_OPERATOR_NAMES[code], c.scalar(2, "i", 1),
                                  c.string(1, "custom_code")))

    buffers: list = []
    for i, b in enumerate(root.tables(4, "buffers")):
        raw = b.raw(0, f"buffer {i}")
        off, size = b.scalar(1, "Q", 0), b.scalar(2, "Q", 0)
        if (raw is None or len(raw) == 0) and off > 1:
            buf.need(off, size, f"buffer {i} data")
            raw = buf.mv[off:off + size]
        buffers.append(raw if raw is not None else memoryview(b""))

    subgraphs = []
    for si, s in enumerate(root.tables(2, "subgraphs")):
        tensors = [_read_tensor(t, len(buffers), ti)
                   for ti, t in enumerate(s.tables(0, f"subgraph {si} tensors"))]
        inputs, outputs = _ints(s.array(1, "i", "subgraph inputs")), _ints(s.array(2, "i", "subgraph outputs"))
        _check_indices(inputs, len(tensors), f"subgraph {si} input", False)
        _check_indices(outputs, len(tensors), f"subgraph {si} output", False)
        ops = [_read_operator(o, codes, len(tensors), oi, buf.mv)
               for oi, o in enumerate(s.tables(3, f"subgraph {si} operators"))]
        subgraphs.append(Subgraph(tensors, ops, inputs, outputs, s.string(4, "subgraph name", "") or ""))
    if not subgraphs:
        raise ModelFormatError("model has no subgraphs")

    metadata = []
    for m in root.tables(6, "metadata"):
        bi = m.scalar(1, "I", 0)
        if bi >= len(buffers):
            raise ModelFormatError(f"metadata refers to buffer {bi} ({len(buffers)} buffers)")
        metadata.append((m.string(0, "metadata name", "") or "", bi))

    sigs = []
    for i, sd in enumerate(root.tables(7, "signature_defs")):
        sub = sd.scalar(4, "I", 0)
        if sub >= len(subgraphs):
            raise ModelFormatError(f"signature {i} refers to subgraph {sub}")
        maps = []
        for slot in (0, 1):
            entries = []
            for tm in sd.tables(slot, f"signature {i} tensor map"):
                ti = tm.scalar(1, "I", 0)
                _check_indices([ti], len(subgraphs[sub].tensors), f"signature {i}", False)
                entries.append((tm.string(0, "signature tensor name", "") or "", ti))
            maps.append(entries)
        sigs.append(SignatureDef(sd.string(2, "signature key", "") or "", sub, maps[0], maps[1]))

    return Model(subgraphs=subgraphs, operator_codes=codes, buffers=buffers, version=version,
                 description=root.string(3, "description", "") or "", metadata=metadata,
                 signature_defs=sigs, metadata_buffer=_ints(root.array(5, "i", "metadata_buffer")))


def read_model_file(path) -> Model:
    """Read a .tflite file. The file is memory-mapped, so weights are not copied."""
    import mmap
    from pathlib import Path

    p = Path(path)
    import stat as _stat

    if p.exists() and not p.is_dir() and not _stat.S_ISREG(p.stat().st_mode):  # a FIFO would block the open
        raise ModelFormatError(f"{p}: not a regular file (a device, FIFO or socket)")
    try:
        with open(p, "rb") as f:
            size = p.stat().st_size
            if size == 0:
                raise ModelFormatError(f"{p}: file is empty")
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError as e:
        raise ModelFormatError(f"{p}: no such file") from e
    except IsADirectoryError as e:
        raise ModelFormatError(f"{p}: is a directory, not a model file") from e
    return read_model(data)
