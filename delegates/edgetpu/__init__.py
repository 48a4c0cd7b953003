"""edgetpu: the Coral Edge TPU, through ``libedgetpu`` loaded with LiteRT's external-delegate API.

Two halves:

* **compiler rules** (``rules.py``), used by ``edgerun check --target coral``: what the Edge TPU
  compiler would map (full 8-bit quantization, static shapes, its op list and limits, and that
  compilation stops at the first op it cannot map, leaving the rest on the CPU);
* **run time**: a model compiled by ``edgetpu_compiler`` carries its TPU part as one CUSTOM op,
  ``edgetpu-custom-op``. This delegate claims those nodes, loads ``libedgetpu.so.1`` (or the
  library given as ``library=``) through LiteRT's ``load_delegate`` and runs them; everything
  else stays on edgerun's kernels. With no library present, one DelegateUnavailableError says
  what to install.
"""

from __future__ import annotations

import platform

from edgerun_delegates.edgetpu import rules

from edgerun.delegate import Availability, CapabilityTable, Delegate, OpCaps, Partition, Support

CUSTOM_OP = "edgetpu-custom-op"

#: Run-time table: the only node libedgetpu executes is the compiled custom op.
RUNTIME_OPS = {CUSTOM_OP: OpCaps(frozenset({"*"}), note="compiled by edgetpu_compiler")}


def default_library() -> str:
    return {"Linux": "libedgetpu.so.1", "Darwin": "libedgetpu.1.dylib",
            "Windows": "edgetpu.dll"}.get(platform.system(), "libedgetpu.so.1")


class EdgeTpuDelegate(Delegate):
    """Config: ``library`` (path or soname of libedgetpu), ``device`` (``usb``, ``usb:0``, ``pci:0``)."""

    name = "edgetpu"
    capabilities = CapabilityTable("edgetpu", RUNTIME_OPS, custom=(CUSTOM_OP,))
    compiler = rules.COMPILER_TABLE
    install_hint = ("install the Edge TPU runtime: on Debian/Ubuntu add Coral's apt repository "
                    "(https://coral.ai/software/#debian-packages) and apt-get install libedgetpu1-std, "
                    "or pass library=/path/to/libedgetpu.so.1")

    # -- run time ------------------------------------------------------------------------------
    @property
    def library(self) -> str:
        return str(self.config.get("library") or default_library())

    def is_available(self) -> Availability:
        import ctypes

        try:
            from edgerun.litert import interpreter_module
            interpreter_module()
        except Exception as e:  # noqa: BLE001  (any LiteRT import failure means: not available)
            return Availability(False, str(e))
        try:
            ctypes.CDLL(self.library)
        except OSError as e:
            return Availability(False, f"{self.library} not found ({e})")
        return Availability(True, f"{self.library} loads")

    def supports(self, node, graph=None, op_index=None) -> Support:
        s = super().supports(node, graph, op_index)
        if not s.ok and "not in edgetpu's op table" in s.reason:
            return Support.no(f"{s.reason.split(' is not')[0]} is not compiled for the Edge TPU (only "
                              f"{CUSTOM_OP} nodes run on it; compile with edgetpu_compiler, and see "
                              "`edgerun check --target coral` for what it would map)")
        return s

    def load(self):
        """LiteRT's delegate object for libedgetpu (``load_delegate``); raises DelegateUnavailableError."""
        from edgerun.litert import interpreter_module

        mod = interpreter_module()
        opts = {"device": self.config["device"]} if self.config.get("device") else {}
        try:
            return mod.load_delegate(self.library, opts)
        except (ValueError, OSError, RuntimeError, AttributeError) as e:  # AttributeError: no plugin symbol
            first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise self.unavailable(f"LiteRT could not load {self.library}: {first}") from e

    def prepare(self, partition: Partition):
        from edgerun_delegates._tflite_kernel import LiteRtKernel

        dlg = self.load()
        try:
            return LiteRtKernel(partition.to_bytes(), xnnpack=False, delegates=[dlg])
        except (ValueError, RuntimeError) as e:
            last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise self.unavailable(
                f"{self.library} loaded, but LiteRT could not run {CUSTOM_OP} with it ({last}); check "
                "that an Edge TPU is connected and that the runtime is as new as the compiler that "
                "built the model") from e

    # -- compiler rules (edgerun check) --------------------------------------------------------
    def check_node(self, ctx) -> Support:
        code = ctx.model.op_code(ctx.op)
        if code.builtin == "CUSTOM" and code.custom_code == CUSTOM_OP:
            return Support.yes("already compiled for the Edge TPU")
        return self.compiler.check(ctx)

    def restrict(self, order, succs, decisions, ctxs):
        return rules.stop_at_first_unsupported(order, decisions, ctxs)
