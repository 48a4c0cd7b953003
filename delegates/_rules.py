"""Constraint functions shared by the built-in delegates' capability tables.

Each returns a function ``rule(ctx) -> None | reason`` (``ctx`` is an
``edgerun.ops.registry.NodeContext``); a capability table lists them per op, so limits are data.
"""

from __future__ import annotations

from edgerun.schema.tflite import Activation

_ACT_NAMES = {v: k for k, v in vars(Activation).items() if not k.startswith("_")}


def _tensors(ctx):
    for i in list(ctx.op.inputs) + list(ctx.op.outputs):
        if i >= 0:
            yield i, ctx.graph.tensors[i]


def static_shapes(ctx):
    """Static shapes. A -1 batch (dimension 0) in shape_signature over a stored shape is static as
    LiteRT and TFLM run it (Keras-converted and MLPerf Tiny models: [-1, 49, 10, 1] over [1, ...])."""
    for i, t in _tensors(ctx):
        sig = t.shape_signature
        if sig is not None and any(int(d) < 0 and (k > 0 or int(t.shape[k]) < 1) for k, d in enumerate(sig)):
            return f"tensor '{t.name}' has a dynamic shape {list(sig)}"
    return None


def fully_static_shapes(ctx):
    """No -1 anywhere in shape_signature, batch included: the Edge TPU compiler's rule (it
    compiles sizes fixed at compile time; a model meant for it is converted with batch 1)."""
    for i, t in _tensors(ctx):
        sig = t.shape_signature
        if sig is not None and any(int(d) < 0 for d in sig):
            return f"tensor '{t.name}' has a dynamic shape {list(sig)}"
    return None


def max_rank(n: int):
    def rule(ctx):
        for i, t in _tensors(ctx):
            if len(ctx.shapes[i]) > n:
                return f"tensor '{t.name}' has rank {len(ctx.shapes[i])} (at most {n})"
        return None
    return rule


def rank_in(*ranks: int, input_index: int = 0):
    def rule(ctx):
        r = len(ctx.shapes[ctx.op.inputs[input_index]])
        if r not in ranks:
            return f"input {input_index} has rank {r}, needs {' or '.join(map(str, ranks))}"
        return None
    return rule


def const_input(index: int, what: str, optional: bool = False):
    def rule(ctx):
        if index >= len(ctx.op.inputs) or ctx.op.inputs[index] < 0:
            return None if optional else f"{what} (input {index}) is missing"
        if ctx.const(index) is None:
            return f"{what} (input {index}) must be a constant"
        return None
    return rule


def no_fused_activation(ctx):
    act = int(ctx.options.get("fused_activation_function", 0) or 0)
    if act:
        return f"fused activation {_ACT_NAMES.get(act, act)} is not supported (none allowed)"
    return None


def fused_activation_in(*allowed: int):
    def rule(ctx):
        act = int(ctx.options.get("fused_activation_function", 0) or 0)
        if act not in allowed:
            return f"fused activation {_ACT_NAMES.get(act, act)} is not supported"
        return None
    return rule


def per_tensor_activations(ctx):
    """Non-constant quantized tensors must use one scale (per-axis is for weights only)."""
    for j, i in enumerate(ctx.op.inputs):
        t = ctx.graph.tensors[i] if i >= 0 else None
        if t is not None and t.quantized and t.quant.scale.size > 1 and ctx.const(j) is None:
            return f"input '{t.name}' is quantized per axis (activations must be per tensor)"
    for t in ctx.outputs:
        if t.quantized and t.quant.scale.size > 1:
            return f"output '{t.name}' is quantized per axis (activations must be per tensor)"
    return None


def per_channel_symmetric_weights(index: int = 1):
    def rule(ctx):
        t = ctx.input(index)
        if t is None or not t.quantized:
            return None
        if (t.quant.zero_point != 0).any():
            return f"weights '{t.name}' have non-zero zero points (must be symmetric)"
        return None
    return rule


def option_max(name: str, limit: float):
    def rule(ctx):
        v = ctx.options.get(name)
        if v is not None and v > limit:
            return f"{name}={v} exceeds {limit}"
        return None
    return rule
