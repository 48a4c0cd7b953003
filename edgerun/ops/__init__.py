"""Op kernels and the op registry.

Importing this package imports the kernel modules listed below (:data:`KERNEL_MODULES`), in that
order; each registers its kernels explicitly with ``@register`` / ``register_custom`` (cf. onnx's
``_op_list.py`` and TFLM's op resolver). ``builtins`` then adds every op's other facts
(quantization rule, MAC count, fused activations, node checks). A new kernel module is added to
this list by hand: nothing is discovered by file name. Numpy-only: no converter, CLI or delegate
module is imported from here.
"""

from edgerun.ops.registry import (CUSTOM, REGISTRY, Kernel, NodeContext, OpDef, QuantRule,  # noqa: F401
                                  define, node_dtype, node_macs, register, register_custom,
                                  registered_pairs)

# The kernel modules, in this order (helpers without kernels: registry, common, fixedpoint).
from edgerun.ops import (activations, compare, control_flow, conv, custom,  # noqa: F401, E402, I001
                         detection_postprocess, elementwise, fully_connected, hybrid, int16, nonlinear,
                         normalization, pooling, quantize, reduce, resize, resource, shape)
# Op facts beyond kernels, for every builtin (imported last: it adds to the OpDefs above).
from edgerun.ops import builtins  # noqa: F401, E402

KERNEL_MODULES = ("activations", "compare", "control_flow", "conv", "custom", "detection_postprocess",
                  "elementwise", "fully_connected", "hybrid", "int16", "nonlinear", "normalization", "pooling",
                  "quantize", "reduce", "resize", "resource", "shape")
