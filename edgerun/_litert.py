"""Import LiteRT's Python interpreter: ``ai_edge_litert`` first, ``tflite_runtime`` as a fallback.

``tflite-runtime`` 2.14 cannot create an interpreter under numpy 2, so it is only a fallback for
devices (Coral) that ship nothing newer. Imported lazily: the core never needs LiteRT.
"""

from __future__ import annotations

from edgerun.errors import DelegateUnavailableError


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
    return mod.Interpreter(model_content=bytes(model_content), num_threads=num_threads, **kw)
