"""Import LiteRT's Python interpreter: ``ai_edge_litert`` first, ``tflite_runtime`` as a fallback.

``tflite-runtime`` 2.14 cannot create an interpreter under numpy 2, so it is only a fallback for
devices (Coral) that ship nothing newer. Imported lazily: the core never needs LiteRT.
"""

from __future__ import annotations

import contextlib
import os

from edgerun.errors import DelegateUnavailableError

#: The CLI sets this: LiteRT's C++ logger writes "INFO: Created TensorFlow Lite XNNPACK delegate"
#: straight to file descriptor 2 and no environment variable silences it. Libraries leave fd 2
#: alone (it is process-wide), so this stays off unless the process is edgerun's own command.
QUIET_NATIVE_LOGS = False


@contextlib.contextmanager
def _native_stderr_silenced():
    if not QUIET_NATIVE_LOGS:
        yield
        return
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def interpreter_module():
    """The module that has ``Interpreter``, ``OpResolverType`` and ``load_delegate``."""
    try:
        from ai_edge_litert import interpreter as mod
        return mod
    except ImportError:
        pass
    try:
        from tflite_runtime import interpreter as mod  # type: ignore[import-not-found]
        return mod
    except ImportError:
        raise DelegateUnavailableError(
            "LiteRT is not installed: pip install 'edgerun[litert]' (ai-edge-litert), "
            "or tflite-runtime on devices that only have that") from None


def make_interpreter(model_content: bytes, *, reference: bool = False, xnnpack: bool = True,
                     num_threads: int | None = None, delegates=None, preserve_all: bool = False):
    """A LiteRT Interpreter over ``model_content``.

    reference: LiteRT's reference kernels (BUILTIN_REF), the bit-exactness oracle for int8.
    xnnpack: False selects BUILTIN_WITHOUT_DEFAULT_DELEGATES (LiteRT's own optimized kernels).
    """
    mod = interpreter_module()
    kw = {}
    if reference:
        kw["experimental_op_resolver_type"] = mod.OpResolverType.BUILTIN_REF
    elif not xnnpack:
        kw["experimental_op_resolver_type"] = mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    if delegates:
        kw["experimental_delegates"] = delegates
    if preserve_all:
        kw["experimental_preserve_all_tensors"] = True
    with _native_stderr_silenced():  # errors still arrive as exceptions with LiteRT's message
        it = mod.Interpreter(model_content=bytes(model_content), num_threads=num_threads, **kw)
    if QUIET_NATIVE_LOGS:  # XNNPACK announces itself when allocate_tensors applies it
        allocate = it.allocate_tensors

        def allocate_tensors():
            with _native_stderr_silenced():
                return allocate()

        it.allocate_tensors = allocate_tensors
    return it
