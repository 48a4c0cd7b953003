"""edgerun: an edge inference runtime and deployment packager for TFLite models.

The core (schema reader/writer, interpreter, kernels) needs only numpy and flatbuffers::

    import edgerun
    interp = edgerun.Interpreter(model_path="model.tflite")   # same API as LiteRT's Interpreter
    interp.allocate_tensors()
"""

from __future__ import annotations

__version__ = "0.1.0"

from edgerun.errors import (  # noqa: E402
    BundleError,
    BundleIntegrityError,
    ConversionError,
    DelegateUnavailableError,
    DeployError,
    EdgerunError,
    InputFileError,
    InputMismatchError,
    LinkError,
    ModelFormatError,
    UnsupportedOpError,
)


def __getattr__(name):
    # Lazy so that `import edgerun` stays cheap (the CLI imports it at every start).
    if name == "Interpreter":
        from edgerun.runtime.interpreter import Interpreter
        return Interpreter
    if name == "load":
        from edgerun.bundle import load
        return load
    raise AttributeError(name)


__all__ = [
    "Interpreter", "load", "__version__", "EdgerunError", "ModelFormatError", "UnsupportedOpError",
    "InputFileError", "InputMismatchError", "ConversionError", "BundleError", "BundleIntegrityError",
    "DelegateUnavailableError", "LinkError", "DeployError",
]
