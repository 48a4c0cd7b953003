"""Binary-op test models: one ADD / SUB / ... node over two inputs, every 8-bit input pair, and
the kernel an interpreter compiled for a model's first node."""

import numpy as np

from edgerun.ir import ModelBuilder


def binary_model(op, dtype, s1, s2, q1=None, q2=None, qo=None, act=None):
    b = ModelBuilder()
    x = b.input("x", s1, dtype, q1)
    z = b.input("z", s2, dtype, q2)
    y = b.tensor("y", np.broadcast_shapes(s1, s2), dtype, qo)
    opts = {"fused_activation_function": act} if act is not None else {}
    b.op(op, [x, z], [y], **opts)
    b.output(y)
    return b.to_bytes()


def all_pairs(dtype, layout):
    """Every 8-bit input pair: a (256, 1) by (1, 256) broadcast, or two (256, 256) tensors."""
    codes = np.arange(256, dtype=np.uint8).view(np.int8) if dtype == "int8" else np.arange(256, dtype=np.uint8)
    if layout == "broadcast":
        return codes.reshape(256, 1), codes.reshape(1, 256)
    return np.repeat(codes, 256).reshape(256, 256), np.tile(codes, 256).reshape(256, 256)


def first_kernel(model):
    """The kernel of the first node, after allocate_tensors (plan compiled)."""
    from edgerun.runtime.interpreter import Interpreter

    it = Interpreter(model_content=model)
    it.allocate_tensors()
    return it.steps()[0].kernel


def every_pair_against_litert(op, dtype, q1, q2, qo, act, layout):
    """The op on every 8-bit input pair (``all_pairs``' layout) against LiteRT's reference
    kernels; returns the first node's kernel (to ask which form ran). The outputs must span at
    least 20 values (the range was crossed)."""
    from edgerun.testing import compare_with_litert

    a, b = all_pairs(dtype, layout)
    model = binary_model(op, dtype, a.shape, b.shape, q1, q2, qo, act)
    kernel = first_kernel(model)
    got = compare_with_litert(model, [a, b])[0]
    assert len(np.unique(got)) >= 20
    return kernel
