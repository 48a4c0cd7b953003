"""Shape and layout lowerings: Identity, Transpose, Reshape, Concat, Slice, Split, Pad, Resize, Gather ..."""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.conv import _spatial_4d
from edgerun.convert.onnx.lowering import (NHWC, Value, _ident, _layout_for, _operand, _perm_shape, _same_memory,
                                           lowers)
from edgerun.schema.tflite import MirrorPadMode


@lowers("Identity", "Dropout")
def _identity(L, n):
    """A relabelling. Dropout at inference passes its input through; its optional mask output is
    all true, a constant (so whatever reads it folds)."""
    v = L.val(n.input[0])
    if n.op_type == "Dropout" and len(n.output) > 1 and n.output[1]:
        L.vals[n.output[1]] = Value(n.output[1], v.shape, const=np.ones(v.shape, np.bool_))
    if v.const is not None:
        L.vals[n.output[0]] = Value(n.output[0], v.shape, const=v.const)
    else:
        L.vals[n.output[0]] = Value(n.output[0], v.shape, tensor=v.tensor, perm=v.perm)
        L.vals[n.output[0]].views = v.views


@lowers("Transpose")
def _transpose(L, n):
    v = L.val(n.input[0])
    q = L.attr(n, "perm") or list(range(v.rank))[::-1]
    qinv = [q.index(i) for i in range(len(q))]
    L.set_act(n.output[0], v.tensor, [qinv[p] for p in v.perm])


# -- shape ops -------------------------------------------------------------------------------

def _fc_consumers_only(L, name) -> bool:
    """True when every consumer of ``name`` is a Gemm / MatMul with constant weights taking it as A."""
    users = [nd for nd in L.model.graph.node if name in nd.input]
    if not users or name in L.graph_outputs:
        return False
    for nd in users:
        if nd.op_type not in ("Gemm", "MatMul") or list(nd.input).index(name) != 0:
            return False
        if len(nd.input) < 2 or not L.is_const(nd.input[1]) or np.ndim(L.cval(nd.input[1])) != 2:
            return False
        if nd.op_type == "Gemm" and L.attr(nd, "transA", 0):
            return False
    return True


def _reshape_to(L, n, src, out):
    """RESHAPE ``src`` to ONNX shape of ``out`` (row-major, so ONNX layout, unless only 1s move).

    A flatten of an NHWC activation that feeds only fully-connected layers skips the TRANSPOSE:
    it flattens in NHWC order and the FC weight columns are permuted to match (``L.colperm``).
    """
    v = L.val(src)
    shape = L.shapes[out]
    if (len(shape) == 2 and not _same_memory(v.shape, v.perm, _ident(v.rank)) and v.const is None
            and shape[0] == v.shape[0] and v.perm[0] == 0 and _fc_consumers_only(L, out)):
        idx = np.arange(int(np.prod(v.shape[1:]))).reshape(v.shape[1:])
        onnx_idx = np.transpose(idx, [p - 1 for p in v.perm[1:]]).reshape(-1)
        L.emit("RESHAPE", [v.tensor, L.g.const(out + "_shape", np.array(shape, np.int32))],
               [L.new_out(out, _ident(2))], new_shape=list(shape))
        L.colperm[out] = onnx_idx
        return
    # a layout whose non-1 axes are in ONNX order reshapes as if it were the ONNX layout
    x = L.get(src, v.perm if _same_memory(v.shape, v.perm, _ident(v.rank)) else _ident(v.rank))
    L.emit("RESHAPE", [x, L.g.const(out + "_shape", np.array(shape, np.int32))],
           [L.new_out(out, _ident(len(shape)))], new_shape=list(shape))


@lowers("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(L, n):
    _reshape_to(L, n, n.input[0], n.output[0])


@lowers("Concat")
def _concat(L, n):
    out = n.output[0]
    rank = len(L.shapes[out])
    axis = int(L.attr(n, "axis")) % rank
    names = [i for i in n.input if i and int(np.prod(L.val(i).shape)) > 0]
    perm = _layout_for(L, names, rank)
    ins = [_operand(L, i, perm, rank) if L.is_const(i) else L.get(i, perm) for i in names]
    for i, name in zip(range(len(ins)), names):  # constants keep their full shape here
        if L.is_const(name):
            ins[i] = L.g.const(name + "_cat", np.ascontiguousarray(np.transpose(np.asarray(L.cval(name), np.float32),
                                                                                 perm)))
    L.emit("CONCATENATION", ins, [L.new_out(out, perm)], axis=perm.index(axis), fused_activation_function=0)


@lowers("Slice")
def _slice(L, n):
    v = L.val(n.input[0])
    r = v.rank
    starts = L.cval(n.input[1], "starts").tolist()
    ends = L.cval(n.input[2], "ends").tolist()
    axes = L.cval(n.input[3], "axes").tolist() if len(n.input) > 3 and n.input[3] else list(range(len(starts)))
    steps = L.cval(n.input[4], "steps").tolist() if len(n.input) > 4 and n.input[4] else [1] * len(starts)
    begin, end, stride = [0] * r, list(v.shape), [1] * r
    end_mask = 0
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= r
        dim = v.shape[a]
        b0, e0, st0 = slice(int(max(min(s, 2 ** 62), -2 ** 62)), int(max(min(e, 2 ** 62), -2 ** 62)), int(st)).indices(dim)
        begin[a], end[a], stride[a] = b0, e0, st0
        if e0 < 0:
            end_mask |= 1 << v.perm.index(a)
    perm = v.perm
    x = L.get(n.input[0])
    out = n.output[0]
    L.emit("STRIDED_SLICE", [x, L.g.const(out + "_begin", np.array([begin[p] for p in perm], np.int32)),
                             L.g.const(out + "_end", np.array([end[p] for p in perm], np.int32)),
                             L.g.const(out + "_strides", np.array([stride[p] for p in perm], np.int32))],
           [L.new_out(out, perm)], begin_mask=0, end_mask=end_mask, ellipsis_mask=0, new_axis_mask=0,
           shrink_axis_mask=0)


@lowers("Split")
def _split(L, n):
    v = L.val(n.input[0])
    axis = int(L.attr(n, "axis", 0)) % v.rank
    sizes = [L.shapes[o][axis] for o in n.output]
    perm = v.perm
    x = L.get(n.input[0])
    outs = [L.new_out(o, perm) for o in n.output]
    ta = perm.index(axis)
    if len(set(sizes)) == 1:
        L.emit("SPLIT", [L.g.const(n.output[0] + "_axis", np.array(ta, np.int32)), x], outs, num_splits=len(outs))
    else:
        L.emit("SPLIT_V", [x, L.g.const(n.output[0] + "_sizes", np.array(sizes, np.int32)),
                           L.g.const(n.output[0] + "_axis", np.array(ta, np.int32))], outs, num_splits=len(outs))


@lowers("Pad")
def _pad(L, n):
    v = L.val(n.input[0])
    r = v.rank
    mode = L.attr(n, "mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    pads = L.cval(n.input[1], "pads").tolist()
    value = float(np.asarray(L.cval(n.input[2], "constant_value")).reshape(-1)[0]) \
        if len(n.input) > 2 and n.input[2] else 0.0
    axes = L.cval(n.input[3], "axes").tolist() if len(n.input) > 3 and n.input[3] else list(range(r))
    k = len(axes)
    full = [[0, 0] for _ in range(r)]
    for i, a in enumerate(axes):
        full[a % r] = [int(pads[i]), int(pads[i + k])]
    if any(p < 0 for pr in full for p in pr):
        raise L.unsupported("negative pads")
    perm = v.perm
    tp = np.array([full[p] for p in perm], np.int32)
    x = L.get(n.input[0])
    out = n.output[0]
    if mode == "constant":
        if value == 0.0:
            L.emit("PAD", [x, L.g.const(out + "_pads", tp)], [L.new_out(out, perm)])
        else:
            L.emit("PADV2", [x, L.g.const(out + "_pads", tp), L.g.const(out + "_value", np.array([value], np.float32))],
                   [L.new_out(out, perm)])
    elif mode == "reflect":
        L.emit("MIRROR_PAD", [x, L.g.const(out + "_pads", tp)], [L.new_out(out, perm)], mode=MirrorPadMode.REFLECT)
    elif mode in ("edge", "wrap"):
        # one GATHER per padded axis with clamped (edge) or modular (wrap) source indices
        shape = list(L.g.tensors[x].shape)
        todo = [ax for ax in range(r) if any(tp[ax])]
        for k, ax in enumerate(todo):
            b, e = (int(p) for p in tp[ax])
            src = np.arange(-b, shape[ax] + e)
            src = np.clip(src, 0, shape[ax] - 1) if mode == "edge" else np.mod(src, shape[ax])
            shape[ax] += b + e
            last = k == len(todo) - 1
            t = L.new_out(out, perm) if last else L.g.tensor(f"{out}_pad{ax}", shape, L.g.tensors[x].dtype)
            L.emit("GATHER", [x, L.g.const(f"{out}_idx{ax}", src.astype(np.int32))], [t], axis=ax, batch_dims=0)
            x = t
        if not todo:
            _identity(L, n)
    else:
        raise L.unsupported(f"Pad mode '{mode}' (constant, reflect, edge and wrap are supported)")


@lowers("Resize", "Upsample")
def _resize(L, n):
    v = _spatial_4d(L, n)
    out = n.output[0]
    oshape = L.shapes[out]
    if oshape[:2] != v.shape[:2]:
        raise L.unsupported("Resize of the batch or channel axis")
    mode = L.attr(n, "mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if n.op_type == "Upsample":
        ctm, nearest = "asymmetric", "floor"
    else:
        ctm = L.attr(n, "coordinate_transformation_mode", b"half_pixel")
        ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
        nearest = L.attr(n, "nearest_mode", b"round_prefer_floor")
        nearest = nearest.decode() if isinstance(nearest, bytes) else nearest
    if ctm == "pytorch_half_pixel" and min(oshape[2:]) > 1:
        ctm = "half_pixel"
    x = L.get(n.input[0], NHWC[4])
    size = L.g.const(out + "_size", np.array(oshape[2:], np.int32))
    if mode in ("linear", "bilinear"):
        if ctm not in ("half_pixel", "align_corners", "asymmetric"):
            raise L.unsupported(f"linear Resize with coordinate_transformation_mode '{ctm}'")
        L.emit("RESIZE_BILINEAR", [x, size], [L.new_out(out, NHWC[4])], align_corners=ctm == "align_corners",
               half_pixel_centers=ctm == "half_pixel")
    elif mode == "nearest":
        ok = {("asymmetric", "floor"): (False, False), ("align_corners", "round_prefer_ceil"): (True, False),
              ("half_pixel", "round_prefer_ceil"): (False, True),
              ("tf_half_pixel_for_nn", "round_prefer_ceil"): (False, True)}
        integer_up = all(o % i == 0 for o, i in zip(oshape[2:], v.shape[2:]))
        if integer_up and ctm in ("half_pixel", "pytorch_half_pixel") and nearest.startswith("round"):
            # x_in = (x + 0.5) / s - 0.5 stays within 0.5 of floor(x / s): the same as asymmetric floor
            ctm, nearest = "asymmetric", "floor"
        if integer_up and ctm == "asymmetric" and nearest == "round_prefer_floor" and all(
                o <= 2 * i for o, i in zip(oshape[2:], v.shape[2:])):
            nearest = "floor"  # x / s is k or k + 0.5 at factors 1 and 2: round_prefer_floor is floor
        # (asymmetric with other rounding at integer factors is not floor: x = 3k + 2 rounds to k + 1)
        if (ctm, nearest) not in ok:
            raise L.unsupported(f"nearest Resize with coordinate_transformation_mode '{ctm}' and "
                                f"nearest_mode '{nearest}'")
        ac, hp = ok.get((ctm, nearest), (False, False))
        L.emit("RESIZE_NEAREST_NEIGHBOR", [x, size], [L.new_out(out, NHWC[4])], align_corners=ac,
               half_pixel_centers=hp)
    else:
        raise L.unsupported(f"Resize mode '{mode}'")


@lowers("DepthToSpace", "SpaceToDepth")
def _d2s(L, n):
    _spatial_4d(L, n)
    bs = int(L.attr(n, "blocksize"))
    if n.op_type == "DepthToSpace" and (L.attr(n, "mode", b"DCR") in (b"CRD", "CRD")):
        raise L.unsupported("DepthToSpace mode CRD")
    x = L.get(n.input[0], NHWC[4])
    L.emit("DEPTH_TO_SPACE" if n.op_type == "DepthToSpace" else "SPACE_TO_DEPTH", [x],
           [L.new_out(n.output[0], NHWC[4])], block_size=bs)


@lowers("Gather")
def _gather(L, n):
    v = L.val(n.input[0])
    axis = int(L.attr(n, "axis", 0)) % v.rank
    out = n.output[0]
    if not L.is_const(n.input[1]):
        # run-time indices (an embedding lookup): TFLite GATHER takes them as int32; negative
        # indices are not wrapped at run time
        x = L.get(n.input[0], _ident(v.rank))
        L.emit("GATHER", [x, L.get(n.input[1], _ident(L.val(n.input[1]).rank))],
               [L.new_out(out, _ident(len(L.shapes[out])))], axis=axis, batch_dims=0)
        return
    idx = np.asarray(L.cval(n.input[1], "indices")).astype(np.int64)
    idx = np.where(idx < 0, idx + v.shape[axis], idx)
    x = L.get(n.input[0], _ident(v.rank))
    out = n.output[0]
    L.emit("GATHER", [x, L.g.const(out + "_indices", idx.astype(np.int32))],
           [L.new_out(out, _ident(len(L.shapes[out])))], axis=axis, batch_dims=0)


@lowers("Tile")
def _tile(L, n):
    """Constant repeats: CONCATENATION of copies along each repeated axis."""
    v = L.val(n.input[0])
    reps = [int(r) for r in np.asarray(L.cval(n.input[1], "repeats")).reshape(-1)]
    perm = v.perm
    x = L.get(n.input[0])
    out = n.output[0]
    shape = list(L.g.tensors[x].shape)
    todo = [a for a in range(v.rank) if reps[a] != 1]
    if any(r < 1 for r in reps):
        raise L.unsupported(f"Tile with repeats {reps} (a repeat below 1 gives an empty tensor)")
    if not todo:
        return _identity(L, n)
    for k, a in enumerate(todo):
        ax = perm.index(a)
        shape[ax] *= reps[a]
        t = L.new_out(out, perm) if k == len(todo) - 1 else L.g.tensor(f"{out}_tile{a}", shape, L.g.tensors[x].dtype)
        L.emit("CONCATENATION", [x] * reps[a], [t], axis=ax, fused_activation_function=0)
        x = t


@lowers("Expand")
def _expand(L, n):
    """Broadcast to the output shape: an ADD of zeros of that shape (same values, any runtime)."""
    out = n.output[0]
    v = L.val(n.input[0])
    rank = len(L.shapes[out])
    if tuple(L.shapes[out]) == v.shape:
        return _identity(L, n)
    perm = v.perm if v.rank == rank else _ident(rank)
    x = _operand(L, n.input[0], perm, rank)
    dt = L.dtype(out)
    if dt == "bool":
        raise L.unsupported("Expand of a bool tensor")
    zeros = L.g.const(out + "_zeros", np.zeros(_perm_shape(L.shapes[out], perm), dt))
    L.emit("ADD", [x, zeros], [L.new_out(out, perm)], fused_activation_function=0)


@lowers("TopK")
def _topk(L, n):
    """TOPK_V2 along the last TFLite axis (the layout moves ``axis`` last); largest and sorted only."""
    v = L.val(n.input[0])
    axis = int(L.attr(n, "axis", -1)) % v.rank
    if not int(L.attr(n, "largest", 1)):
        raise L.unsupported("TopK with largest=0 (TFLite TOPK_V2 returns the largest values; negate the input)")
    k = int(np.asarray(L.cval(n.input[1], "K")).reshape(-1)[0])
    perm = v.perm if v.perm[-1] == axis else tuple(p for p in v.perm if p != axis) + (axis,)
    x = L.get(n.input[0], perm)
    L.emit("TOPK_V2", [x, L.g.const(n.output[0] + "_k", np.array(k, np.int32))],
           [L.new_out(n.output[0], perm), L.new_out(n.output[1], perm, "int32")])
