"""tensorrt: a partition exported as ONNX with explicit Q/DQ, run by ONNX Runtime.

Providers, best first: TensorRT (INT8 engines built from the Q/DQ graph, cached on disk under a
key of TensorRT version, GPU name and model hash, since an engine is only valid for that
triple), CUDA, then CPU. The CPU provider runs the same ONNX file everywhere, which is how the
export is tested without a GPU; ``is_available`` says which provider will run.

Config: ``providers`` (override the list), ``cache_dir`` (engine cache root, default
``~/.cache/edgerun/tensorrt``), ``fp16`` (also allow FP16 layers in TensorRT).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
from edgerun_delegates import _rules as r
from edgerun_delegates.tensorrt.export import LOWERINGS, export_onnx

from edgerun.delegate import Availability, CapabilityTable, Delegate, DelegateKernel, OpCaps, Partition

Q = frozenset({"int8", "uint8", "float32"})
_CONV = (r.const_input(1, "filter"), r.const_input(2, "bias", optional=True), r.rank_in(4))
_CONSTRAINTS = {
    "CONV_2D": _CONV, "DEPTHWISE_CONV_2D": _CONV,
    "FULLY_CONNECTED": (r.const_input(1, "weights"), r.const_input(2, "bias", optional=True),
                        lambda c: None if int(c.options.get("weights_format", 0) or 0) == 0
                        else "only the default weights format"),
    "AVERAGE_POOL_2D": (r.rank_in(4),), "MAX_POOL_2D": (r.rank_in(4),),
    "MEAN": (r.const_input(1, "axes"),), "PAD": (r.const_input(1, "paddings"),),
}
#: one row per op the exporter lowers, so the table cannot name an op the exporter lacks
OPS = {op: OpCaps(Q, _CONSTRAINTS.get(op, ())) for op in LOWERINGS}

#: TFLite builtins whose ONNX form TensorRT's ONNX parser builds (TensorRT 8.6/10 operator
#: support list), so a fallback of one of these is edgerun's exporter's gap, not TensorRT's
TENSORRT_RUNS = frozenset({
    "ABS", "ADD", "ARG_MAX", "ARG_MIN", "AVERAGE_POOL_2D", "BATCH_MATMUL", "CAST", "CONCATENATION", "CONV_2D",
    "DEPTH_TO_SPACE", "DEPTHWISE_CONV_2D", "DEQUANTIZE", "DIV", "EQUAL", "EXP", "EXPAND_DIMS", "FULLY_CONNECTED",
    "GATHER", "GREATER", "HARD_SWISH", "LEAKY_RELU", "LESS", "LOG", "LOG_SOFTMAX", "LOGISTIC", "MAX_POOL_2D",
    "MAXIMUM", "MEAN", "MINIMUM", "MIRROR_PAD", "MUL", "NEG", "PACK", "PAD", "PADV2", "POW", "PRELU", "QUANTIZE",
    "REDUCE_MAX", "RELU", "RELU6", "RELU_N1_TO_1", "RESHAPE", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR",
    "RSQRT", "SLICE", "SOFTMAX", "SPACE_TO_DEPTH", "SPLIT", "SPLIT_V", "SQRT", "SQUARED_DIFFERENCE", "SQUEEZE",
    "STRIDED_SLICE", "SUB", "SUM", "TANH", "TRANSPOSE", "TRANSPOSE_CONV", "UNPACK",
})


def _missing(op: str) -> str:
    """Why an op is not delegated: name the real cause (edgerun's exporter, or TensorRT)."""
    if op in TENSORRT_RUNS:
        return (f"edgerun's TensorRT exporter has no {op} lowering (TensorRT itself runs {op}: an exporter "
                "gap, see delegates/tensorrt/export.py)")
    if op.startswith("custom op"):
        return f"{op}: TensorRT runs no TFLite custom op, and edgerun's exporter has no lowering for it"
    return f"edgerun's TensorRT exporter has no {op} lowering"


def _fused_act_ok(ctx):
    act = int(ctx.options.get("fused_activation_function", 0) or 0)
    return None if act in (0, 1, 2, 3, 4) else f"fused activation {act} has no ONNX lowering"


def tensorrt_version() -> str | None:
    try:
        import tensorrt  # type: ignore[import-not-found]
        return str(tensorrt.__version__)
    except Exception:  # noqa: BLE001  (no usable tensorrt package: version unknown)
        return None


def gpu_name() -> str:
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=10, check=False)
        name = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        name = ""
    return name or "unknown-gpu"


def engine_cache_dir(onnx_bytes: bytes, root: str | os.PathLike | None = None, *,
                     trt_version: str | None = None, gpu: str | None = None) -> Path:
    """Where an engine for this model lives: ``root/<TensorRT version>/<GPU>/<model sha256[:16]>``."""
    root = Path(root or Path.home() / ".cache" / "edgerun" / "tensorrt")
    ver = trt_version or tensorrt_version() or "trt-unknown"
    g = "".join(c if c.isalnum() or c in "-_." else "_" for c in (gpu or gpu_name()))
    return root / f"trt-{ver}" / g / hashlib.sha256(onnx_bytes).hexdigest()[:16]


class OrtKernel(DelegateKernel):
    """Runs an exported partition with ONNX Runtime (float32 real values in and out)."""

    def __init__(self, onnx_bytes: bytes, providers: list, n_in: int, n_out: int):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 3
        first = providers[0][0] if isinstance(providers[0], tuple) else providers[0]
        if first == "CPUExecutionProvider":
            # ORT's CPU QDQ fusions (QLinear* kernels) are skipped: the float ops on dequantized
            # values are the reference meaning of the graph, and some fusions reject valid models
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        self.session = ort.InferenceSession(onnx_bytes, sess_options=so, providers=providers)
        self.provider = self.session.get_providers()[0]
        self._in = [i.name for i in self.session.get_inputs()]
        self._out = [o.name for o in self.session.get_outputs()]
        self.input_dtypes = ["float32"] * n_in
        self.output_dtypes = ["float32"] * n_out

    def invoke(self, inputs):
        feed = {n: np.ascontiguousarray(x, np.float32) for n, x in zip(self._in, inputs)}
        return self.session.run(self._out, feed)


class TensorRtDelegate(Delegate):
    name = "tensorrt"
    capabilities = CapabilityTable("tensorrt", OPS, node_constraints=(
        r.static_shapes, r.max_rank(8), r.per_tensor_activations, _fused_act_ok), missing=_missing)
    install_hint = ("install ONNX Runtime: pip install 'edgerun[tensorrt]' (onnx, onnxruntime); on a "
                    "GPU machine onnxruntime-gpu with TensorRT 10 for the TensorRT provider")

    def providers(self, onnx_bytes: bytes | None = None) -> list:
        import onnxruntime as ort

        if self.config.get("providers"):
            return list(self.config["providers"])
        have = ort.get_available_providers()
        out: list = []
        if "TensorrtExecutionProvider" in have:
            opts = {"trt_int8_enable": True, "trt_fp16_enable": bool(self.config.get("fp16", False)),
                    "trt_engine_cache_enable": True, "trt_timing_cache_enable": True}
            if onnx_bytes is not None:
                d = engine_cache_dir(onnx_bytes, self.config.get("cache_dir"))
                d.mkdir(parents=True, exist_ok=True)
                opts["trt_engine_cache_path"] = str(d)
                opts["trt_timing_cache_path"] = str(d.parent)
            out.append(("TensorrtExecutionProvider", opts))
        if "CUDAExecutionProvider" in have:
            out.append("CUDAExecutionProvider")
        out.append("CPUExecutionProvider")
        return out

    def is_available(self) -> Availability:
        try:
            import onnx  # noqa: F401
            import onnxruntime as ort
        except ImportError as e:
            return Availability(False, f"{e.name} is not installed")
        have = ort.get_available_providers()
        best = next((p for p in ("TensorrtExecutionProvider", "CUDAExecutionProvider") if p in have),
                    "CPUExecutionProvider")
        return Availability(True, f"ONNX Runtime {ort.__version__}, {best}")

    def export(self, partition: Partition):
        return export_onnx(partition.model, nodes=partition.nodes, inputs=partition.inputs,
                           outputs=partition.outputs, shapes=partition.shapes, known=partition.known,
                           graph_index=partition.graph_index)

    def prepare(self, partition: Partition) -> OrtKernel:
        try:
            m = self.export(partition)
        except ImportError as e:
            raise self.unavailable(f"{e.name} is not installed") from e
        data = m.SerializeToString()
        return OrtKernel(data, self.providers(data), len(partition.inputs), len(partition.outputs))
