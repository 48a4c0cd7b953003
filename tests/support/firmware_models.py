"""Small int8 TFLite models for the firmware tests, built in code with edgerun's ModelBuilder.

``mcu_small()`` is the model shipped as ``models/mcu_small.tflite`` (``tools/make_mcu_model.py``
writes it): conv / depthwise / pooling / pad / add / mean / fully-connected / softmax, about
20 KB. ``op_models()`` gives one small model per op and option the C interpreter supports, with
scales drawn from a seeded generator, for byte-exact comparison with LiteRT's reference kernels.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from edgerun.ir import ModelBuilder

RELU, RELU6 = 1, 3


def _q(rng, lo=0.01, hi=0.1):
    return (float(rng.uniform(lo, hi)), int(rng.integers(-20, 20)))


def _weights(rng, shape, axis=0):
    w = rng.integers(-127, 128, size=shape).astype(np.int8)
    scales = rng.uniform(0.002, 0.02, size=shape[axis]).astype(np.float32)
    return w, (scales, np.zeros(shape[axis], np.int64), axis)


def _bias(rng, n, in_scale, w_scales):
    scales = (np.float32(in_scale) * np.asarray(w_scales, np.float32)).astype(np.float32)
    return rng.integers(-2000, 2000, size=n).astype(np.int32), (scales, np.zeros(n, np.int64), 0)


def conv(b, rng, x, xq, shape, oc, k, stride, act, padding=0, dil=1, name="conv"):
    n, h, w, c = shape
    wt, wq = _weights(rng, (oc, k, k, c))
    bias, bq = _bias(rng, oc, xq[0], wq[0])
    eff = (k - 1) * dil + 1
    oh = (h + stride - 1) // stride if padding == 0 else (h - eff + stride) // stride
    ow = (w + stride - 1) // stride if padding == 0 else (w - eff + stride) // stride
    yq = _q(rng)
    y = b.tensor(f"{name}_out", (n, oh, ow, oc), "int8", yq)
    b.op("CONV_2D", [x, b.const(f"{name}_w", wt, "int8", wq), b.const(f"{name}_b", bias, "int32", bq)], [y],
         padding=padding, stride_w=stride, stride_h=stride, fused_activation_function=act,
         dilation_w_factor=dil, dilation_h_factor=dil)
    return y, yq, (n, oh, ow, oc)


def dwconv(b, rng, x, xq, shape, k, stride, act, mult=1, padding=0, name="dw"):
    n, h, w, c = shape
    oc = c * mult
    wt, wq = _weights(rng, (1, k, k, oc), axis=3)
    bias, bq = _bias(rng, oc, xq[0], wq[0])
    eff = k
    oh = (h + stride - 1) // stride if padding == 0 else (h - eff + stride) // stride
    ow = (w + stride - 1) // stride if padding == 0 else (w - eff + stride) // stride
    yq = _q(rng)
    y = b.tensor(f"{name}_out", (n, oh, ow, oc), "int8", yq)
    b.op("DEPTHWISE_CONV_2D", [x, b.const(f"{name}_w", wt, "int8", wq), b.const(f"{name}_b", bias, "int32", bq)],
         [y], padding=padding, stride_w=stride, stride_h=stride, depth_multiplier=mult,
         fused_activation_function=act)
    return y, yq, (n, oh, ow, oc)


def fc(b, rng, x, xq, depth, units, act, name="fc", per_channel=False, batches=1):
    wt = rng.integers(-127, 128, size=(units, depth)).astype(np.int8)
    if per_channel:
        ws = rng.uniform(0.002, 0.02, size=units).astype(np.float32)
        wq = (ws, np.zeros(units, np.int64), 0)
    else:
        ws = np.float32(rng.uniform(0.002, 0.02))
        wq = (np.array([ws], np.float32), np.zeros(1, np.int64), 0)
    bias_scales = np.float32(xq[0]) * np.atleast_1d(np.asarray(ws, np.float32))
    bias = rng.integers(-2000, 2000, size=units).astype(np.int32)
    bq = (bias_scales.astype(np.float32), np.zeros(bias_scales.size, np.int64), 0)
    yq = _q(rng, 0.05, 0.3)
    y = b.tensor(f"{name}_out", (batches, units), "int8", yq)
    b.op("FULLY_CONNECTED", [x, b.const(f"{name}_w", wt, "int8", wq), b.const(f"{name}_b", bias, "int32", bq)],
         [y], fused_activation_function=act)
    return y, yq


def mcu_small(seed: int = 7) -> bytes:
    """The shipped test model: [1,16,16,3] int8 -> 10 class probabilities (int8, softmax)."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder("edgerun mcu_small")
    xq = (0.02, -3)
    x = b.input("image", (1, 16, 16, 3), "int8", xq)
    y, yq, s = conv(b, rng, x, xq, (1, 16, 16, 3), 8, 3, 2, RELU6, name="c1")          # 8x8x8
    y, yq, s = dwconv(b, rng, y, yq, s, 3, 1, RELU, name="dw1")                           # 8x8x8
    y, yq, s = conv(b, rng, y, yq, s, 16, 1, 1, 0, padding=1, name="c2")                  # 8x8x16
    p = b.tensor("pool_out", (1, 4, 4, 16), "int8", yq)
    b.op("AVERAGE_POOL_2D", [y], [p], padding=1, stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    m = b.tensor("max_out", (1, 4, 4, 16), "int8", yq)
    b.op("MAX_POOL_2D", [p], [m], padding=0, stride_w=1, stride_h=1, filter_width=3, filter_height=3)
    aq = _q(rng, 0.05, 0.1)
    a = b.tensor("add_out", (1, 4, 4, 16), "int8", aq)
    b.op("ADD", [p, m], [a], fused_activation_function=RELU)
    r = b.tensor("flat", (1, 256), "int8", aq)
    b.op("RESHAPE", [a, b.const("shape", np.array([1, 256], np.int32))], [r], new_shape=(1, 256))
    h, hq = fc(b, rng, r, aq, 256, 64, RELU, name="fc1")
    lg, _lq = fc(b, rng, h, hq, 64, 10, 0, name="fc2")
    out = b.tensor("probs", (1, 10), "int8", (1.0 / 256, -128))
    b.op("SOFTMAX", [lg], [out], beta=1.0)
    b.output(out)
    return b.to_bytes()


def op_models(seed: int = 0) -> dict[str, bytes]:
    """One model per supported op/option, named for test ids."""
    rng = np.random.default_rng(seed)
    models: dict[str, bytes] = {}

    def new(shape=(1, 9, 9, 4), q=None):
        b = ModelBuilder()
        q = q or _q(rng)
        return b, b.input("x", shape, "int8", q), q

    for name, kw in {"conv_same_s2_relu6": {"k": 3, "stride": 2, "act": RELU6, "padding": 0},
                     "conv_valid_s1": {"k": 3, "stride": 1, "act": 0, "padding": 1},
                     "conv_dilated": {"k": 3, "stride": 1, "act": RELU, "padding": 0, "dil": 2},
                     "conv_5x5": {"k": 5, "stride": 2, "act": 0, "padding": 0}}.items():
        b, x, q = new()
        y, _, _ = conv(b, rng, x, q, (1, 9, 9, 4), 6, kw.pop("k"), kw.pop("stride"), kw.pop("act"), **kw)
        b.output(y)
        models[name] = b.to_bytes()
    for name, kw in {"dw_same_s1": {"k": 3, "stride": 1, "act": RELU}, "dw_valid_s2_mult2": {"k": 3, "stride": 2, "act": RELU6, "mult": 2, "padding": 1}}.items():
        b, x, q = new()
        y, _, _ = dwconv(b, rng, x, q, (1, 9, 9, 4), kw.pop("k"), kw.pop("stride"), kw.pop("act"), **kw)
        b.output(y)
        models[name] = b.to_bytes()
    for name, pc in (("fc_per_tensor", False), ("fc_per_channel", True)):
        b, x, q = new((3, 40))
        y, _ = fc(b, rng, x, q, 40, 12, RELU, per_channel=pc, batches=3)
        b.output(y)
        models[name] = b.to_bytes()
    for op, pad, k, s in (("AVERAGE_POOL_2D", 0, 3, 2), ("AVERAGE_POOL_2D", 1, 2, 2), ("MAX_POOL_2D", 0, 3, 2), ("MAX_POOL_2D", 1, 2, 1)):
        b, x, q = new()
        o = (9 + s - 1) // s if pad == 0 else (9 - k + s) // s
        y = b.tensor("y", (1, o, o, 4), "int8", q)
        b.op(op, [x], [y], padding=pad, stride_w=s, stride_h=s, filter_width=k, filter_height=k, fused_activation_function=RELU6)
        b.output(y)
        models[f"{op.lower()}_{'same' if pad == 0 else 'valid'}_k{k}s{s}"] = b.to_bytes()
    for op in ("ADD", "MUL"):
        for bshape in ((1, 5, 5, 4), (1, 1, 1, 4), (4,)):
            b = ModelBuilder()
            qa, qb, qo = _q(rng), _q(rng), _q(rng, 0.02, 0.2)
            x = b.input("a", (1, 5, 5, 4), "int8", qa)
            y = b.input("b", bshape, "int8", qb)
            z = b.tensor("z", (1, 5, 5, 4), "int8", qo)
            b.op(op, [x, y], [z], fused_activation_function=RELU if op == "ADD" else 0)
            b.output(z)
            models[f"{op.lower()}_b{'x'.join(map(str, bshape))}"] = b.to_bytes()
    for name, axes, keep, same in (("mean_hw_keep", [1, 2], True, False), ("mean_hw_nokeep", [1, 2], False, False),
                                   ("mean_hw_same_q", [1, 2], False, True), ("mean_c", [3], True, False)):
        b, x, q = new()
        oq = q if same else _q(rng)
        oshape = [1, 9, 9, 4]
        for a in axes:
            oshape[a] = 1
        if not keep:
            oshape = [d for i, d in enumerate(oshape) if i not in axes]
        y = b.tensor("y", tuple(oshape), "int8", oq)
        b.op("MEAN", [x, b.const("axes", np.array(axes, np.int32))], [y], keep_dims=keep)
        b.output(y)
        models[name] = b.to_bytes()
    for beta in (1.0, 0.5):
        b, x, q = new((2, 17), (float(rng.uniform(0.05, 0.2)), 3))
        y = b.tensor("y", (2, 17), "int8", (1.0 / 256, -128))
        b.op("SOFTMAX", [x], [y], beta=beta)
        b.output(y)
        models[f"softmax_beta{beta}"] = b.to_bytes()
    b, x, q = new((1, 50), (0.07, 10))
    y = b.tensor("y", (1, 50), "int8", (1.0 / 256, -128))
    b.op("LOGISTIC", [x], [y])
    b.output(y)
    models["logistic"] = b.to_bytes()
    for op in ("RELU", "RELU6"):
        b, x, q = new((1, 60), (0.05, -7))
        y = b.tensor("y", (1, 60), "int8", (0.03, -100))
        b.op(op, [x], [y])
        b.output(y)
        models[op.lower()] = b.to_bytes()
    b = ModelBuilder()
    x = b.input("x", (2, 3, 5), "float32")
    q = b.tensor("q", (2, 3, 5), "int8", (0.05, 4))
    b.op("QUANTIZE", [x], [q])
    r = b.tensor("r", (2, 3, 5), "int8", (0.11, -9))
    b.op("QUANTIZE", [q], [r])
    d = b.tensor("d", (2, 3, 5), "float32")
    b.op("DEQUANTIZE", [r], [d])
    b.output(d)
    models["quantize_requantize_dequantize"] = b.to_bytes()
    b = ModelBuilder()
    q = (0.04, 2)
    x1 = b.input("a", (1, 3, 3, 2), "int8", q)
    x2 = b.input("b", (1, 3, 3, 5), "int8", q)
    y = b.tensor("y", (1, 3, 3, 7), "int8", q)
    b.op("CONCATENATION", [x1, x2], [y], axis=-1)
    r = b.tensor("r", (9, 7), "int8", q)
    b.op("RESHAPE", [y, b.const("shape", np.array([9, 7], np.int32))], [r], new_shape=(9, 7))
    b.output(r)
    models["concat_reshape"] = b.to_bytes()
    b, x, q = new((2, 3, 4))
    e = b.tensor("e", (2, 1, 3, 4), "int8", q)
    b.op("EXPAND_DIMS", [x, b.const("axis", np.array([1], np.int32))], [e])
    s = b.tensor("s", (2, 3, 4), "int8", q)
    b.op("SQUEEZE", [e], [s], squeeze_dims=[1])
    b.output(s)
    models["expand_dims_squeeze"] = b.to_bytes()
    b, x, q = new((1, 4, 4, 3))
    y = b.tensor("y", (1, 7, 5, 3), "int8", q)
    b.op("PAD", [x, b.const("pads", np.array([[0, 0], [1, 2], [0, 1], [0, 0]], np.int32))], [y])
    b.output(y)
    models["pad"] = b.to_bytes()
    b, x, q = new((1, 4, 4, 3))
    y = b.tensor("y", (1, 5, 6, 3), "int8", q)
    b.op("PADV2", [x, b.const("pads", np.array([[0, 0], [0, 1], [2, 0], [0, 0]], np.int32)),
                   b.const("value", np.array([-77], np.int8), "int8", q)], [y])
    b.output(y)
    models["padv2"] = b.to_bytes()
    models.update(_more_op_models(rng))
    models.update(_coverage_models(rng))
    models.update(_int16_models(rng))
    return models


def _i32(b, name, values):
    return b.const(name, np.array(values, np.int32))


def _more_op_models(rng) -> dict[str, bytes]:
    """Issue 14's ops: activations, binary ops, data movement, reductions, multi-output."""
    models: dict[str, bytes] = {}

    def unary(name, op, shape, q, oq, extra=(), **opts):
        b = ModelBuilder()
        x = b.input("x", shape, "int8", q)
        y = b.tensor("y", opts.pop("out_shape", shape), "int8", oq)
        b.op(op, [x, *[f(b) for f in extra]], [y], **opts)
        b.output(y)
        models[name] = b.to_bytes()

    unary("tanh", "TANH", (1, 64), (0.05, 3), (1.0 / 128, 0))
    unary("tanh_any_q", "TANH", (1, 64), (0.02, -10), (0.01, 5))
    unary("leaky_relu_0.2", "LEAKY_RELU", (1, 64), (0.05, -5), (0.04, -20), alpha=0.2)
    unary("leaky_relu_neg", "LEAKY_RELU", (1, 64), (0.05, 7), (0.06, 10), alpha=-0.7)
    unary("hard_swish", "HARD_SWISH", (1, 4, 4, 8), (0.06, -10), (0.035, -60))
    unary("hard_swish_wide", "HARD_SWISH", (1, 64), (0.2, 20), (0.1, -100))
    # PRELU: per-channel alpha [C] and [1, 1, C]
    for ashape in ((8,), (1, 1, 8)):
        b = ModelBuilder()
        x = b.input("x", (1, 3, 3, 8), "int8", (0.05, -3))
        al = b.const("alpha", rng.integers(-128, 128, size=ashape).astype(np.int8), "int8", (0.004, -10))
        y = b.tensor("y", (1, 3, 3, 8), "int8", (0.04, 2))
        b.op("PRELU", [x, al], [y])
        b.output(y)
        models[f"prelu_a{'x'.join(map(str, ashape))}"] = b.to_bytes()
    for op, act in (("SUB", 0), ("SUB", 1), ("SQUARED_DIFFERENCE", 0), ("MAXIMUM", 0), ("MINIMUM", 0)):
        for bshape in ((1, 5, 5, 4), (4,)):
            b = ModelBuilder()
            same = op in ("MAXIMUM", "MINIMUM")
            qa = _q(rng)
            qb = qa if same else _q(rng)
            qo = qa if same else _q(rng, 0.02, 0.2)
            x = b.input("a", (1, 5, 5, 4), "int8", qa)
            y = b.input("b", bshape, "int8", qb)
            z = b.tensor("z", (1, 5, 5, 4), "int8", qo)
            b.op(op, [x, y], [z], **({"fused_activation_function": act} if op == "SUB" else {}))
            b.output(z)
            models[f"{op.lower()}_act{act}_b{'x'.join(map(str, bshape))}"] = b.to_bytes()
    q = (0.05, 1)
    unary("transpose_0312", "TRANSPOSE", (2, 3, 4, 5), q, q, extra=(lambda b: _i32(b, "perm", [0, 3, 1, 2]),),
          out_shape=(2, 5, 3, 4))
    unary("transpose_2d", "TRANSPOSE", (7, 9), q, q, extra=(lambda b: _i32(b, "perm", [1, 0]),), out_shape=(9, 7))
    unary("slice", "SLICE", (2, 6, 5, 4), q, q, extra=(lambda b: _i32(b, "begin", [1, 2, 0, 1]),
                                                        lambda b: _i32(b, "size", [1, 3, -1, 2])),
          out_shape=(1, 3, 5, 2))
    for name, (begin, end, strides, masks, out_shape) in {
        "ss_basic": ([0, 1, 0, 0], [1, 5, 4, 3], [1, 2, 1, 1], {}, (1, 2, 4, 3)),
        "ss_negative_stride": ([0, -1, 0, 0], [1, 0, 4, 3], [1, -1, 1, 1], {"begin_mask": 1, "end_mask": 1 | 4 | 8},
                               (1, 5, 4, 3)),
        "ss_masks_shrink": ([0, 2, 0, 1], [1, 4, 0, 2], [1, 1, 1, 1], {"end_mask": 4, "shrink_axis_mask": 1 | 8},
                            (2, 4)),
        "ss_step3_neg_begin": ([0, -5, 1, 0], [1, 6, 4, 3], [1, 3, 2, 1], {}, (1, 2, 2, 3)),
    }.items():
        unary(name, "STRIDED_SLICE", (1, 6, 4, 3), q, q,
              extra=(lambda b, v=begin: _i32(b, "begin", v), lambda b, v=end: _i32(b, "end", v),
                     lambda b, v=strides: _i32(b, "strides", v)), out_shape=out_shape, **masks)
    unary("depth_to_space", "DEPTH_TO_SPACE", (1, 3, 2, 8), q, q, out_shape=(1, 6, 4, 2), block_size=2)
    unary("space_to_depth", "SPACE_TO_DEPTH", (1, 6, 4, 3), q, q, out_shape=(1, 3, 2, 12), block_size=2)
    for name, size, opts in (("resize_nn_up", (7, 10), {}), ("resize_nn_align", (7, 10), {"align_corners": True}),
                             ("resize_nn_half", (7, 3), {"half_pixel_centers": True}),
                             ("resize_nn_down", (2, 3), {})):
        unary(name, "RESIZE_NEAREST_NEIGHBOR", (1, 4, 5, 3), q, q,
              extra=(lambda b, v=size: _i32(b, "size", list(v)),), out_shape=(1, *size, 3), **opts)
    for name, size, opts in (("resize_bl_up", (7, 10), {}), ("resize_bl_align", (7, 10), {"align_corners": True}),
                             ("resize_bl_half", (9, 3), {"half_pixel_centers": True}),
                             ("resize_bl_down", (2, 3), {})):
        unary(name, "RESIZE_BILINEAR", (1, 4, 5, 3), q, q,
              extra=(lambda b, v=size: _i32(b, "size", list(v)),), out_shape=(1, *size, 3), **opts)
    unary("reduce_max_hw", "REDUCE_MAX", (1, 5, 6, 4), q, q, extra=(lambda b: _i32(b, "axes", [1, 2]),),
          out_shape=(1, 1, 1, 4), keep_dims=True)
    unary("reduce_max_c", "REDUCE_MAX", (2, 5, 6), q, q, extra=(lambda b: _i32(b, "axes", [-1]),),
          out_shape=(2, 5), keep_dims=False)
    unary("mirror_pad_reflect", "MIRROR_PAD", (1, 4, 5, 2), q, q,
          extra=(lambda b: _i32(b, "pads", [[0, 0], [2, 3], [1, 0], [0, 0]]),), out_shape=(1, 9, 6, 2), mode=0)
    unary("mirror_pad_symmetric", "MIRROR_PAD", (1, 4, 5, 2), q, q,
          extra=(lambda b: _i32(b, "pads", [[0, 0], [4, 1], [0, 5], [0, 0]]),), out_shape=(1, 9, 10, 2), mode=1)
    for otype in ("int32", "int64"):
        b = ModelBuilder()
        x = b.input("x", (2, 7, 5), "int8", q)
        y = b.tensor("y", (2, 5), otype)
        b.op("ARG_MAX", [x, _i32(b, "axis", [1])], [y], output_type=2 if otype == "int32" else 4)
        b.output(y)
        models[f"arg_max_{otype}"] = b.to_bytes()
    unary("relu_n1_to_1", "RELU_N1_TO_1", (1, 64), (0.03, 5), (0.01, -3))
    unary("abs_rescale", "ABS", (1, 64), (0.05, 10), (0.03, -100))
    unary("abs_same_scale", "ABS", (1, 64), (0.05, 10), (0.05, -128))
    unary("exp", "EXP", (1, 64), (0.02, 0), (0.02, -128))
    b = ModelBuilder()
    x = b.input("x", (2, 7, 5), "int8", q)
    y = b.tensor("y", (2, 5), "int32")
    b.op("ARG_MIN", [x, _i32(b, "axis", [-2])], [y], output_type=2)
    b.output(y)
    models["arg_min"] = b.to_bytes()
    for name, (ashape, bshape, oshape, adj) in {
            "batch_matmul": ((2, 3, 4), (2, 4, 5), (2, 3, 5), {}),
            "batch_matmul_bcast_adj": ((2, 1, 4, 3), (3, 5, 4), (2, 3, 3, 5), {"adj_x": True, "adj_y": True}),
            "batch_matmul_const_rhs": ((1, 6, 8), None, (1, 6, 7), {})}.items():
        b = ModelBuilder()
        x = b.input("x", ashape, "int8", (0.05, -4))
        if bshape is None:
            yv = b.const("w", rng.integers(-127, 128, size=(8, 7)).astype(np.int8), "int8", (0.02, 0))
        else:
            yv = b.input("y", bshape, "int8", (0.04, 6))
        z = b.tensor("z", oshape, "int8", (0.3, 3))
        b.op("BATCH_MATMUL", [x, yv], [z], **adj)
        b.output(z)
        models[name] = b.to_bytes()
    for name, (ishape, k, stride, pad, oshape, act) in {
            "transpose_conv_same_s2": ((1, 4, 5, 3), 3, 2, 0, (1, 8, 10, 6), 0),
            "transpose_conv_valid_s2_relu": ((1, 4, 4, 3), 3, 2, 1, (1, 9, 9, 5), 1),
            "transpose_conv_same_s1": ((1, 5, 5, 4), 3, 1, 0, (1, 5, 5, 4), 0)}.items():
        b = ModelBuilder()
        xq = (0.05, -7)
        x = b.input("x", ishape, "int8", xq)
        oc = oshape[3]
        wt, wq = _weights(rng, (oc, k, k, ishape[3]))
        bias, bq = _bias(rng, oc, xq[0], wq[0])
        y = b.tensor("y", oshape, "int8", _q(rng, 0.05, 0.2))
        b.op("TRANSPOSE_CONV", [_i32(b, "oshape", list(oshape)), b.const("w", wt, "int8", wq), x,
                                b.const("b", bias, "int32", bq)], [y],
             padding=pad, stride_w=stride, stride_h=stride, **({"fused_activation_function": act} if act else {}))
        b.output(y)
        models[name] = b.to_bytes()
    b = ModelBuilder()
    x = b.input("x", (5, 3, 4), "int8", q)
    y = b.tensor("y", (5, 2, 2, 4), "int8", q)
    b.op("GATHER", [x, b.const("idx", np.array([[2, 0], [1, 2]], np.int32))], [y], axis=1)
    b.output(y)
    models["gather_axis1"] = b.to_bytes()
    b = ModelBuilder()
    x = b.input("x", (2, 6, 4), "int8", q)
    outs = [b.tensor(f"s{k}", (2, 2, 4), "int8", q) for k in range(3)]
    b.op("SPLIT", [_i32(b, "axis", [1]), x], outs, num_splits=3)
    b.output(*outs)
    models["split3"] = b.to_bytes()
    b = ModelBuilder()
    x = b.input("x", (2, 7, 4), "int8", q)
    outs = [b.tensor(f"s{k}", (2, n, 4), "int8", q) for k, n in enumerate((1, 4, 2))]
    b.op("SPLIT_V", [x, _i32(b, "sizes", [1, -1, 2]), _i32(b, "axis", [-2])], outs, num_splits=3)
    b.output(*outs)
    models["split_v"] = b.to_bytes()
    b = ModelBuilder()
    xs = [b.input(f"x{k}", (3, 4), "int8", q) for k in range(3)]
    y = b.tensor("y", (3, 3, 4), "int8", q)
    b.op("PACK", xs, [y], values_count=3, axis=1)
    u = [b.tensor(f"u{k}", (3, 3), "int8", q) for k in range(4)]
    b.op("UNPACK", [y], u, num=4, axis=2)
    b.output(y, *u)
    models["pack_unpack"] = b.to_bytes()
    return models


def _coverage_models(rng) -> dict[str, bytes]:
    """The rest of the host's int8 ops: SQRT, RSQRT, DIV, SUM, LOG_SOFTMAX, CAST, SHAPE. Inputs
    stay where LiteRT's invoke succeeds for any int8 value (SQRT/RSQRT inputs have zero point
    -128; DIV's divisors never equal their zero point)."""
    models: dict[str, bytes] = {}

    def unary(name, op, shape, q, oq, itype="int8", otype="int8", extra=(), out_shape=None, **opts):
        b = ModelBuilder()
        x = b.input("x", shape, itype, q)
        y = b.tensor("y", out_shape or shape, otype, oq)
        b.op(op, [x, *[f(b) for f in extra]], [y], **opts)
        b.output(y)
        models[name] = b.to_bytes()

    unary("sqrt", "SQRT", (1, 64), (0.05, -128), (0.02, -128))
    unary("sqrt_wide", "SQRT", (2, 32), (float(rng.uniform(0.5, 2.0)), -128), (0.1, -30))
    unary("rsqrt", "RSQRT", (1, 64), (0.05, -128), (0.04, -128))
    unary("rsqrt_small_scale", "RSQRT", (2, 32), (float(rng.uniform(0.001, 0.01)), -128), (0.5, -100))
    unary("rsqrt_large_scale", "RSQRT", (1, 64), (float(rng.uniform(2.0, 8.0)), -128), (0.003, -128))
    for name, bshape, act in (("div_const_c", (4,), 0), ("div_const_full_relu", (1, 5, 5, 4), 1)):
        b = ModelBuilder()
        x = b.input("a", (1, 5, 5, 4), "int8", _q(rng))
        zb = int(rng.integers(-20, 20))
        vals = rng.integers(-128, 128, size=bshape)
        vals = np.where(vals == zb, zb + 1, vals).astype(np.int8)
        d = b.const("d", vals, "int8", (float(rng.uniform(0.01, 0.1)), zb))
        z = b.tensor("z", (1, 5, 5, 4), "int8", _q(rng, 0.05, 0.5))
        b.op("DIV", [x, d], [z], fused_activation_function=act)
        b.output(z)
        models[name] = b.to_bytes()
    # a divisor computed at run time: MAXIMUM with a constant above its zero point keeps it nonzero
    b = ModelBuilder()
    qa, qb = _q(rng), (0.03, -10)
    x = b.input("a", (1, 4, 4, 3), "int8", qa)
    v = b.input("b", (1, 4, 4, 3), "int8", qb)
    pos = b.tensor("b_pos", (1, 4, 4, 3), "int8", qb)
    b.op("MAXIMUM", [v, b.const("floor", np.array([-9], np.int8), "int8", qb)], [pos])
    z = b.tensor("z", (1, 4, 4, 3), "int8", (0.2, 5))
    b.op("DIV", [x, pos], [z])
    b.output(z)
    models["div_runtime"] = b.to_bytes()
    unary("log_softmax", "LOG_SOFTMAX", (2, 10), (0.1, 4), (16.0 / 256, 127))
    unary("log_softmax_wide", "LOG_SOFTMAX", (1, 3, 40), (float(rng.uniform(0.01, 0.5)), -7), (16.0 / 256, 127))
    for it, ot in (("int8", "uint8"), ("int8", "int16"), ("int8", "int32"), ("int8", "int64"), ("int8", "float32"),
                   ("uint8", "int8"), ("uint8", "int32"), ("uint8", "float32"), ("int32", "int8"),
                   ("int32", "int64"), ("int32", "float32"), ("int16", "int8"), ("float32", "int8"),
                   ("float32", "int32"), ("float32", "int64")):
        unary(f"cast_{it}_{ot}", "CAST", (3, 7), None, None, itype=it, otype=ot)
    # int16 activations as edgerun convert writes a float-output classifier's head (no target, cpu,
    # rpi): int8 logits -> int16, SOFTMAX in int16 (step 1/32768), DEQUANTIZE
    for name, (shape, qx, q16, beta) in {"softmax16_head": ((1, 10), (0.1, 3), (0.004, 0), 1.0),
                                         "softmax16_rows_beta": ((3, 40), (0.05, -7), (0.0015, 0), 0.7)}.items():
        b = ModelBuilder()
        x = b.input("x", shape, "int8", qx)
        h = b.tensor("h", shape, "int16", q16)
        b.op("QUANTIZE", [x], [h])
        p = b.tensor("p", shape, "int16", (1.0 / 32768, 0))
        b.op("SOFTMAX", [h], [p], beta=beta)
        f = b.tensor("f", shape, "float32")
        b.op("DEQUANTIZE", [p], [f])
        back = b.tensor("back", shape, "int8", (0.004, -128))
        b.op("QUANTIZE", [p], [back])
        b.output(f, p, back)
        models[name] = b.to_bytes()
    for name, (shape, qx, beta) in {"softmax_int8_to_int16": ((2, 17), (0.08, -3), 1.0),
                                    "softmax_int8_to_int16_wide": ((1, 300), (0.02, 10), 0.5)}.items():
        b = ModelBuilder()
        x = b.input("x", shape, "int8", qx)
        p = b.tensor("p", shape, "int16", (1.0 / 65536, -32768))
        b.op("SOFTMAX", [x], [p], beta=beta)
        b.output(p)
        models[name] = b.to_bytes()
    for name, (itype, otype, q, oq) in {"quantize_uint8_int8": ("uint8", "int8", (0.05, 131), (0.04, -3)),
                                         "dequantize_uint8": ("uint8", "float32", (0.03, 120), None),
                                         "quantize_float32_int16": ("float32", "int16", None, (0.0002, 0))}.items():
        unary(name, "QUANTIZE" if name.startswith("quantize") else "DEQUANTIZE", (3, 20), q, oq, itype, otype)
    b = ModelBuilder()
    x = b.input("x", (2, 37), "int16", (0.002, 0))
    p = b.tensor("p", (2, 37), "int16", (1.0 / 32768, 0))
    b.op("SOFTMAX", [x], [p])
    b.output(p)
    models["softmax16_int16_input"] = b.to_bytes()
    for it in ("int8", "float32"):
        for ot in ("int32", "int64"):
            b = ModelBuilder()
            x = b.input("x", (2, 3, 5), it, (0.05, 1) if it == "int8" else None)
            y = b.tensor("y", (3,), ot)
            b.op("SHAPE", [x], [y], out_type=2 if ot == "int32" else 4)
            z = b.tensor("z", (2, 3, 5), it, (0.05, 1) if it == "int8" else None)
            b.op("RESHAPE", [x, y if ot == "int32" else _i32(b, "new_shape", [2, 3, 5])], [z])  # (LiteRT: int32 only)
            b.output(y, z)
            models[f"shape_{it}_{ot}"] = b.to_bytes()
    return models


def _int16_models(rng) -> dict[str, bytes]:
    """16x8 (int16 activations with zero point 0, int8 weights, int64 bias), as TFLite's 16x8
    quantization mode and edgerun's tflm promotion write them."""
    models: dict[str, bytes] = {}
    sx = 0.0005
    for name, (ishape, oc, k, stride, pad, act, dw, per_channel) in {
            "conv16_same_relu": ((1, 6, 6, 3), 4, 3, 1, 0, 1, False, True),
            "conv16_valid_s2_per_tensor": ((1, 7, 7, 2), 3, 3, 2, 1, 0, False, False),
            "dw16_valid_s2_mult2": ((1, 7, 7, 4), 8, 3, 2, 1, 0, True, True),
            "dw16_same_relu6": ((1, 5, 5, 3), 3, 3, 1, 0, 3, True, True)}.items():
        b = ModelBuilder()
        x = b.input("x", ishape, "int16", (sx, 0))
        fshape = (1, k, k, oc) if dw else (oc, k, k, ishape[3])
        axis = 3 if dw else 0
        wt, wq = _weights(rng, fshape, axis)
        if not per_channel:
            wq = (wq[0][:1], wq[1][:1], 0)
        bias = rng.integers(-40000, 40000, size=oc).astype(np.int64)
        bq = ((np.float32(sx) * np.broadcast_to(wq[0], (oc,))).astype(np.float32), np.zeros(oc, np.int64), 0)
        osz = [(ishape[1] + stride - 1) // stride if pad == 0 else (ishape[1] - k) // stride + 1,
               (ishape[2] + stride - 1) // stride if pad == 0 else (ishape[2] - k) // stride + 1]
        y = b.tensor("y", (1, *osz, oc), "int16", (float(rng.uniform(0.002, 0.01)), 0))
        opts = dict(padding=pad, stride_w=stride, stride_h=stride, fused_activation_function=act)
        if dw:
            opts["depth_multiplier"] = oc // ishape[3]
        b.op("DEPTHWISE_CONV_2D" if dw else "CONV_2D", [x, b.const("w", wt, "int8", wq), b.const("b", bias, "int64", bq)],
             [y], **opts)
        b.output(y)
        models[name] = b.to_bytes()
    for name, (per_channel, bias_type) in {"fc16_per_channel": (True, "int64"), "fc16_per_tensor": (False, "int64")}.items():
        b = ModelBuilder()
        x = b.input("x", (3, 20), "int16", (sx, 0))
        wt, wq = _weights(rng, (6, 20), 0)
        if not per_channel:
            wq = (wq[0][:1], wq[1][:1], 0)
        bias = rng.integers(-30000, 30000, size=6).astype(bias_type)
        bq = ((np.float32(sx) * np.broadcast_to(wq[0], (6,))).astype(np.float32), np.zeros(6, np.int64), 0)
        y = b.tensor("y", (3, 6), "int16", (0.004, 0))
        b.op("FULLY_CONNECTED", [x, b.const("w", wt, "int8", wq), b.const("b", bias, bias_type, bq)], [y])
        b.output(y)
        models[name] = b.to_bytes()
    for op in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
        b = ModelBuilder()
        x = b.input("x", (1, 7, 6, 3), "int16", (sx, 0))
        y = b.tensor("y", (1, 4, 3, 3), "int16", (sx, 0))
        b.op(op, [x], [y], padding=0, stride_w=2, stride_h=2, filter_width=3, filter_height=3)
        b.output(y)
        models[f"{op.lower()}16_same_k3s2"] = b.to_bytes()
    for op, bshape in (("ADD", (1, 5, 5, 4)), ("ADD", (4,)), ("SUB", (4,)), ("MUL", (1, 5, 5, 4)), ("MUL", (4,))):
        b = ModelBuilder()
        x = b.input("a", (1, 5, 5, 4), "int16", (0.0004, 0))
        v = b.input("b", bshape, "int16", (0.0007, 0))
        z = b.tensor("z", (1, 5, 5, 4), "int16", (0.001 if op != "MUL" else 0.0000005, 0))
        b.op(op, [x, v], [z], **({} if op == "MUL" else {"pot_scale_int16": False}))
        b.output(z)
        models[f"{op.lower()}16_b{'x'.join(map(str, bshape))}"] = b.to_bytes()
    return models


#: SUM cases (shape, axes, keep_dims, input and output quantization) for :func:`sum_models`
SUM_CASES = {"sum_hw": ((1, 5, 6, 4), [1, 2], True, (0.05, 3), (0.4, -2)),
             "sum_c_same_q": ((2, 5, 6), [-1], False, (0.05, 3), (0.05, 3)),
             "sum_all_wide": ((3, 40), [0, 1], False, (0.02, -20), (1.5, 10))}


def sum_models(dtype: str = "int8") -> dict[str, bytes]:
    """int8 SUM models, or (``dtype="uint8"``) their uint8 twins (zero points + 128): LiteRT 2.3's
    reference int8 SUM reads its int8 input as uint8 (docs/convert.md), so the oracle for an int8
    SUM is LiteRT's reference uint8 SUM on the same values shifted by +128, as for edgerun's own
    kernel (tests/ops/test_ops_reduce.py)."""
    shift = 128 if dtype == "uint8" else 0
    models = {}
    for name, (shape, axes, keep, qi, qo) in SUM_CASES.items():
        ax = [a % len(shape) for a in axes]
        oshape = tuple(1 if i in ax else d for i, d in enumerate(shape)) if keep else \
            tuple(d for i, d in enumerate(shape) if i not in ax)
        b = ModelBuilder()
        x = b.input("x", shape, dtype, (qi[0], qi[1] + shift))
        y = b.tensor("y", oshape, dtype, (qo[0], qo[1] + shift))
        b.op("SUM", [x, _i32(b, "axes", axes)], [y], keep_dims=keep)
        b.output(y)
        models[name] = b.to_bytes()
    return models


def unary_int8(op, shape, out_shape=None, **opts) -> bytes:
    """One int8 op x -> y (both scale 0.1, zero point 0), ``opts`` its options: the fuzz corpus's
    and the robustness tests' small and hostile-shape models."""
    b = ModelBuilder()
    x = b.input("x", shape, "int8", (0.1, 0))
    y = b.tensor("y", out_shape or shape, "int8", (0.1, 0))
    b.op(op, [x], [y], **opts)
    b.output(y)
    return b.to_bytes()


def unsupported_model() -> bytes:
    """A model with an op the firmware does not run (ELU), to check the load-time error."""
    b = ModelBuilder()
    x = b.input("x", (1, 8), "int8", (0.05, 0))
    y = b.tensor("y", (1, 8), "int8", (0.05, 0))
    b.op("ELU", [x], [y])
    b.output(y)
    return b.to_bytes()


#: microWakeWord's int8 streaming models, from the pymicro-wakeword wheel that
#: tests/runtime/test_external_models.py caches (under $EDGERUN_FIXTURES when set); tests skip when absent.
FIXTURES = Path(os.environ.get("EDGERUN_FIXTURES", Path.home() / ".cache" / "edgerun" / "fixtures"))
WAKEWORD = FIXTURES / "pymicro-wakeword-2.5.0"

#: MLPerf Tiny's five reference int8 models (github.com/mlcommons/tiny, benchmark/training/*/
#: trained_models/), fetched once per process by tools/fetch_models.py (pinned commit, size and
#: SHA-256) into ~/.cache/edgerun/mlperf_tiny; tests skip with the fetcher's reason where the
#: models can be neither found in the cache nor downloaded.
MLPERF_TINY_DIR = __import__("pathlib").Path.home() / ".cache" / "edgerun" / "mlperf_tiny"
MLPERF_TINY = {"vww": "vww_96_int8.tflite", "ic": "pretrainedResnet_quant.tflite", "kws": "kws_ref_model.tflite",
               "ad": "ad01_int8.tflite", "sww": "str_ww_ref_model.tflite"}
_MLPERF_FETCHED: dict = {}


def fetch_models_module():
    """tools/fetch_models.py, imported by path (tools/ is not a package)."""
    import importlib.util
    import sys
    from pathlib import Path

    mod = sys.modules.get("edgerun_tools_fetch_models")
    if mod is None:
        spec = importlib.util.spec_from_file_location(
            "edgerun_tools_fetch_models", Path(__file__).resolve().parents[2] / "tools" / "fetch_models.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return mod


def mlperf_tiny_status() -> tuple[dict, str | None]:
    """({short name: model bytes}, None), or ({}, one-line reason), for all five; tried once per process."""
    if "result" not in _MLPERF_FETCHED:
        fm = fetch_models_module()
        try:
            paths = fm.fetch([MLPERF_TINY[k] for k in MLPERF_TINY], cache=MLPERF_TINY_DIR)
            _MLPERF_FETCHED["result"] = ({k: paths[v].read_bytes() for k, v in MLPERF_TINY.items()}, None)
        except fm.FetchError as e:
            why = f"MLPerf Tiny models neither cached in {MLPERF_TINY_DIR} nor fetchable ({e}); see tools/fetch_models.py"
            _MLPERF_FETCHED["result"] = ({}, why)
    return _MLPERF_FETCHED["result"]


def mlperf_tiny(name: str) -> bytes | None:
    """One of the five int8 models (vww, ic, kws, ad, sww), fetched when needed; None when unavailable."""
    return mlperf_tiny_status()[0].get(name)


@pytest.fixture(scope="session")
def mlperf_tiny_models() -> dict:
    """Session fixture: {short name: bytes} for the five models, or a skip with the fetcher's reason.
    Test modules import it (``from tests.support.firmware_models import mlperf_tiny_models``)."""
    models, why = mlperf_tiny_status()
    if why:
        pytest.skip(why)
    return models


def mediapipe_style(blocks: int = 40, seed: int = 11) -> bytes:
    """A MediaPipe-style int8 graph: conv stem, then `blocks` residual blocks (1x1 conv -> PRELU
    -> depthwise 3x3 -> ADD), a STRIDED_SLICE, RESIZE_NEAREST_NEIGHBOR, HARD_SWISH and a
    fully-connected head; 40 blocks give over 300 tensors (above the old fixed limit of 256)."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder("edgerun mediapipe-style")
    xq = (0.02, -3)
    x = b.input("image", (1, 16, 16, 3), "int8", xq)
    y, yq, s = conv(b, rng, x, xq, (1, 16, 16, 3), 8, 3, 2, 0, name="stem")  # 8x8x8
    for i in range(blocks):
        h, hq, hs = conv(b, rng, y, yq, s, 8, 1, 1, 0, name=f"b{i}_pw")
        pq = _q(rng)
        p = b.tensor(f"b{i}_prelu", hs, "int8", pq)
        alpha = b.const(f"b{i}_alpha", rng.integers(-128, 128, size=(1, 1, 8)).astype(np.int8), "int8",
                        (float(rng.uniform(0.002, 0.01)), 0))
        b.op("PRELU", [h, alpha], [p])
        d, dq, ds = dwconv(b, rng, p, pq, hs, 3, 1, 0, name=f"b{i}_dw")
        aq = _q(rng)
        a = b.tensor(f"b{i}_add", ds, "int8", aq)
        b.op("ADD", [y, d], [a])
        y, yq, s = a, aq, ds
    sl = b.tensor("slice", (1, 4, 8, 8), "int8", yq)
    b.op("STRIDED_SLICE", [y, b.const("begin", np.array([0, 0, 0, 0], np.int32)),
                           b.const("end", np.array([1, 8, 8, 8], np.int32)),
                           b.const("strides", np.array([1, 2, 1, 1], np.int32))], [sl], begin_mask=15, end_mask=15)
    up = b.tensor("up", (1, 8, 8, 8), "int8", yq)
    b.op("RESIZE_NEAREST_NEIGHBOR", [sl, b.const("size", np.array([8, 8], np.int32))], [up], half_pixel_centers=True)
    hq = _q(rng)
    hs_t = b.tensor("hswish", (1, 8, 8, 8), "int8", hq)
    b.op("HARD_SWISH", [up], [hs_t])
    r = b.tensor("flat", (1, 512), "int8", hq)
    b.op("RESHAPE", [hs_t, b.const("shape", np.array([1, 512], np.int32))], [r], new_shape=(1, 512))
    out, _ = fc(b, rng, r, hq, 512, 10, 0, name="head", per_channel=True)
    b.output(out)
    return b.to_bytes()
