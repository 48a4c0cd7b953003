"""mcu: the model as a microcontroller runs it.

Two back ends behind one delegate, which must give the same int8 bytes:

* host (default): TensorFlow Lite Micro's interpreter from the ``tflite-micro`` package, with the
  arena TFLM reports (``arena_bytes``: total; ``arena_head_bytes``: the non-persistent part,
  comparable to edgerun's planner figure ``Interpreter.arena_bytes``);
* serial (``port=...``): edgerun's firmware on a board, or an emulated board, through
  ``edgerun_delegates.mcu.serial_backend.run_serial(port, model, inputs)``.

Two op tables, two delegate names (two targets, see edgerun/targets.py):

* ``mcu`` (target ``mcu:BOARD``): edgerun's firmware. Its table is the firmware's own capability
  table (``firmware/src/caps.h`` -> ``firmware_caps.json``, see :mod:`edgerun_delegates.mcu.firmware`,
  which also has :func:`firmware_accepts` / :func:`board_capabilities` for whole-model limits).
* ``tflm`` (target ``tflm[:BOARD]``): TFLM's builtin resolver restricted to what an int8 MCU
  deployment uses (int8, and int16/int32 where TFLM's kernels take them); a batch of -1 in
  ``shape_signature`` with a static shape is accepted, as TFLM does.
"""

from __future__ import annotations

import os
import re
import tempfile

import numpy as np
from edgerun_delegates.mcu.firmware import board_capabilities, firmware_accepts, firmware_arena_bytes  # noqa: F401

from edgerun.delegate import Availability, CapabilityTable, Delegate, DelegateKernel, OpCaps, Partition
from edgerun.errors import EdgerunError

I8 = frozenset({"int8"})
I8_16 = frozenset({"int8", "int16"})
I8_32 = frozenset({"int8", "int16", "int32"})

# TFLM's builtin kernels (tflite-micro micro_mutable_op_resolver.h) used by int8 models.
_TFLM_OPS = {
    "ABS": I8_16, "ADD": I8_32, "ADD_N": I8_32, "ARG_MAX": I8_32, "ARG_MIN": I8_32,
    "AVERAGE_POOL_2D": I8_16, "BATCH_MATMUL": I8_16, "BATCH_TO_SPACE_ND": I8_32, "CAST": I8_32,
    "CONCATENATION": I8_32, "CONV_2D": I8_16, "CUMSUM": I8_32, "DEPTH_TO_SPACE": I8,
    "DEPTHWISE_CONV_2D": I8_16, "DEQUANTIZE": I8_16, "DIV": I8, "ELU": I8, "EQUAL": I8_32,
    "EXP": I8_16, "EXPAND_DIMS": I8_32, "FILL": I8_32, "FLOOR": I8, "FLOOR_DIV": I8_32,
    "FLOOR_MOD": I8_32, "FULLY_CONNECTED": I8_16, "GATHER": I8_32, "GATHER_ND": I8_32,
    "GREATER": I8_32, "GREATER_EQUAL": I8_32, "HARD_SWISH": I8, "L2_NORMALIZATION": I8,
    "L2_POOL_2D": I8, "LEAKY_RELU": I8_16, "LESS": I8_32, "LESS_EQUAL": I8_32, "LOG_SOFTMAX": I8,
    "LOGISTIC": I8_16, "MAX_POOL_2D": I8_16, "MAXIMUM": I8_32, "MEAN": I8_16, "MINIMUM": I8_32,
    "MIRROR_PAD": I8_16, "MUL": I8_32, "NEG": I8, "NOT_EQUAL": I8_32, "PACK": I8_32, "PAD": I8_16,
    "PADV2": I8_16, "PRELU": I8, "QUANTIZE": I8_16, "REDUCE_MAX": I8, "REDUCE_MIN": I8,
    "RELU": I8_16, "RELU6": I8_16, "RESHAPE": I8_32, "RESIZE_BILINEAR": I8,
    "RESIZE_NEAREST_NEIGHBOR": I8_16, "RSQRT": I8, "SELECT_V2": I8_32, "SHAPE": I8_32,
    "SLICE": I8_32, "SOFTMAX": I8_16, "SPACE_TO_BATCH_ND": I8_32, "SPACE_TO_DEPTH": I8,
    "SPLIT": I8_32, "SPLIT_V": I8_32, "SQUARED_DIFFERENCE": I8, "SQUEEZE": I8_32,
    "STRIDED_SLICE": I8_32, "SUB": I8_32, "SUM": I8_16, "SVDF": I8_16, "TANH": I8_16,
    "TRANSPOSE": I8_32, "TRANSPOSE_CONV": I8_16, "UNIDIRECTIONAL_SEQUENCE_LSTM": I8_16, "UNPACK": I8_32,
    "ZEROS_LIKE": I8_32,
}

def _static_but_batch(ctx):
    """Static shapes; a -1 batch (dimension 0) in shape_signature over a stored shape is fine
    (MLPerf Tiny's int8 models: signature [-1, 49, 10, 1], shape [1, 49, 10, 1])."""
    for i in list(ctx.op.inputs) + list(ctx.op.outputs):
        if i < 0:
            continue
        t = ctx.graph.tensors[i]
        sig = t.shape_signature
        if sig is not None and any(int(d) < 0 and (k > 0 or int(t.shape[k]) < 1) for k, d in enumerate(sig)):
            return f"tensor '{t.name}' has a dynamic shape {list(sig)}"
    return None


TFLM_OPS = {op: OpCaps(d) for op, d in _TFLM_OPS.items()}


def _firmware_op_table() -> dict[str, OpCaps]:
    from edgerun_delegates.mcu.firmware import load_caps

    def pair_rule(pairs):
        if pairs == [["*"]]:  # ops on resource variables: no tensor-type pair
            return lambda ctx: None

        def rule(ctx):
            g = ctx.graph
            ins, outs = [i for i in ctx.op.inputs], list(ctx.op.outputs)
            if not ins or ins[0] < 0 or len(outs) != 1:
                return "the firmware takes one output and a first input"
            a, b = g.tensors[ins[0]], g.tensors[outs[0]]
            if not any((p == "same" and a.dtype == b.dtype) or (p, q) == (a.dtype, b.dtype) for p, q in pairs):
                return f"the firmware takes {' | '.join('>'.join(x) for x in pairs)}, not {a.dtype}>{b.dtype}"
            if pairs != [["same", "same"]]:
                for t in (a, b):
                    if t.dtype == "int8" and not t.quantized:
                        return f"int8 tensor '{t.name}' has no quantization"
            return None
        return rule

    out = {}
    for name, row in load_caps()["ops"].items():
        pairs = [list(p) for p in row["types"]]
        dtypes = frozenset("*" if p[0] in ("same", "*") else p[0] for p in pairs)
        out[name] = OpCaps(dtypes, (pair_rule(pairs),), note="firmware/src/caps.h")
    return out


OPS = _firmware_op_table()


def _arena_report(it) -> dict[str, int]:
    """TFLM's RecordingMicroAllocator figures, read from its stderr report."""
    import sys

    sys.stderr.flush()
    fd = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            it.print_allocations()
        finally:
            os.dup2(fd, 2)
            os.close(fd)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    out = {}
    for key, pat in (("total", r"allocation total (\d+) bytes"), ("head", r"allocation head (\d+) bytes"),
                     ("tail", r"allocation tail (\d+) bytes")):
        m = re.search(pat, text)
        if m:
            out[key] = int(m.group(1))
    return out


class TflmKernel(DelegateKernel):
    """Runs a (sub-)model in TFLM on the host."""

    def __init__(self, model_content: bytes, arena_size: int | None = None):
        from tflite_micro.python.tflite_micro import runtime

        from edgerun.schema.reader import read_model

        self.model_content = bytes(model_content)
        self.n_outputs = len(read_model(self.model_content).main.outputs)
        size = arena_size or max(64 * 1024, 16 * len(self.model_content))
        try:
            self.interp = runtime.Interpreter.from_bytes(self.model_content, arena_size=size)
        except RuntimeError as e:
            raise EdgerunError(f"TFLM could not prepare the model in a {size}-byte arena: {e} "
                               "(a larger arena_size=, or an op TFLM lacks)") from e
        report = _arena_report(self.interp)
        #: bytes of the tensor arena TFLM used (persistent + non-persistent)
        self.arena_bytes = report.get("total")
        #: the non-persistent (activation and scratch) part, comparable to edgerun's planner
        self.arena_head_bytes = report.get("head")
        self.arena_tail_bytes = report.get("tail")

    def invoke(self, inputs):
        it = self.interp
        for i, x in enumerate(inputs):
            it.set_input(np.ascontiguousarray(x), i)
        it.invoke()
        return [np.array(it.get_output(i), copy=True) for i in range(self.n_outputs)]


class SerialKernel(DelegateKernel):
    """Runs a (sub-)model on edgerun's firmware over a serial link."""

    def __init__(self, model_content: bytes, port: str, run_serial, baud: int | None = None):
        self.model_content, self.port, self._run = bytes(model_content), port, run_serial
        self._kw = {"baud": int(baud)} if baud else {}

    def invoke(self, inputs):
        return [np.asarray(y) for y in self._run(self.port, self.model_content, list(inputs), **self._kw)]


class McuDelegate(Delegate):
    """edgerun's firmware. Config: ``port`` (serial back end; a device path or a pyserial URL),
    ``baud``, ``arena_size`` (without a port the partition is simulated in TFLM on the host,
    with this arena). The op table is the firmware's (firmware/src/caps.h)."""

    name = "mcu"
    capabilities = CapabilityTable("mcu", OPS)
    install_hint = "install TFLM's Python package: pip install 'edgerun[micro]' (tflite-micro)"

    def is_available(self) -> Availability:
        if self.config.get("port"):
            try:
                from edgerun_delegates.mcu import serial_backend  # noqa: F401
            except ImportError as e:
                return Availability(False, f"the serial back end is not installed ({e})")
            return Availability(True, f"edgerun firmware on {self.config['port']}")
        try:
            from tflite_micro.python.tflite_micro import runtime  # noqa: F401
        except ImportError as e:
            return Availability(False, f"tflite-micro is not installed ({e.name})")
        return Availability(True, "TFLM on the host (tflite-micro)")

    def prepare(self, partition: Partition) -> DelegateKernel:
        data = partition.to_bytes()
        port = self.config.get("port")
        if port:
            try:
                from edgerun_delegates.mcu.serial_backend import run_serial
            except ImportError as e:
                raise self.unavailable(f"the serial back end is missing ({e})") from e
            return SerialKernel(data, port, run_serial, self.config.get("baud"))
        try:
            k = TflmKernel(data, self.config.get("arena_size"))
        except ImportError as e:
            raise self.unavailable(f"tflite-micro is not installed ({e.name})") from e
        return k


class TflmDelegate(McuDelegate):
    """TFLM (tflite-micro) on the host, with TFLM's own op table; ``arena_size`` as for mcu."""

    name = "tflm"
    capabilities = CapabilityTable("tflm", TFLM_OPS, node_constraints=(_static_but_batch,))

    def is_available(self) -> Availability:
        try:
            from tflite_micro.python.tflite_micro import runtime  # noqa: F401
        except ImportError as e:
            return Availability(False, f"tflite-micro is not installed ({e.name})")
        return Availability(True, "TFLM on the host (tflite-micro)")

    def prepare(self, partition: Partition) -> DelegateKernel:
        try:
            return TflmKernel(partition.to_bytes(), self.config.get("arena_size"))
        except ImportError as e:
            raise self.unavailable(f"tflite-micro is not installed ({e.name})") from e


def tflm_arena(model_content: bytes, arena_size: int | None = None) -> dict[str, int]:
    """TFLM's arena figures for a whole model: ``{"total", "head", "tail"}`` bytes."""
    k = TflmKernel(model_content, arena_size)
    return {"total": k.arena_bytes, "head": k.arena_head_bytes, "tail": k.arena_tail_bytes}
