"""Op kernels. Importing this package imports every kernel module in it, and each module
registers its kernels explicitly with ``@register`` (cf. onnx's ``_op_list.py``)."""

import importlib as _importlib
import pkgutil as _pkgutil

from edgerun.ops.registry import (CUSTOM, REGISTRY, Kernel, NodeContext, OpDef, register,  # noqa: F401
                                  register_custom, registered_pairs)

_NOT_KERNELS = {"registry", "fixedpoint", "common"}

for _info in sorted(_pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name not in _NOT_KERNELS and not _info.name.startswith("_"):
        _importlib.import_module(f"edgerun.ops.{_info.name}")

# Each OpDef's quantization rule (TFLite's int8 spec) comes from the converter's table, so the
# interpreter, delegates and the converter read one source (numpy-only import).
from edgerun.convert.quantize import install_rules as _install_rules  # noqa: E402

_install_rules()
