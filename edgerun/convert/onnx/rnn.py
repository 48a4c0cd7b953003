"""LSTM and GRU, unrolled over the (static) sequence into FULLY_CONNECTED and elementwise ops.

Per time step (ONNX gate order: LSTM i, o, f, c; GRU z, r, h):

* LSTM: ``g = x_t W^T + h R^T + (Wb + Rb)``; ``i, o, f = sigmoid``, ``c~ = tanh``;
  ``C = f * C + i * c~``; ``H = o * tanh(C)``;
* GRU: ``z, r = sigmoid(x_t Wzr^T + h Rzr^T + Wb + Rb)``;
  ``h~ = tanh(x_t Wh^T + r * (h Rh^T + Rbh) + Wbh)`` (linear_before_reset=1) or
  ``tanh(x_t Wh^T + (r * h) Rh^T + Rbh + Wbh)`` (0); ``H = h~ + z * (h - h~)``.

Every op has float and int8 kernels, so the unrolled cell quantizes like any other graph. Refused:
non-default activations, clip, input_forget, peepholes, per-example sequence_lens and layout=1.
"""

from __future__ import annotations

import numpy as np

from edgerun.convert.onnx.lowering import _ident, lowers


class _Cell:
    """Emit helpers bound to one node: fresh (batch, n) tensors, constants, ops."""

    def __init__(self, L, n, batch):
        self.L, self.n, self.batch = L, n, batch
        self.k = 0

    def t(self, width, tag):
        self.k += 1
        return self.L.g.tensor(f"{self.n.output[0] or self.n.name}_{tag}{self.k}", (self.batch, width))

    def op(self, op, inputs, width, tag, **opts):
        out = self.t(width, tag)
        self.L.emit(op, inputs, [out], **opts)
        return out

    def fc(self, x, w, b, tag):
        L = self.L
        wt = L.g.const(f"{self.n.output[0] or self.n.name}_{tag}_w", np.ascontiguousarray(w, np.float32))
        bt = L.g.const(f"{self.n.output[0] or self.n.name}_{tag}_b", np.asarray(b, np.float32)) if b is not None else -1
        return self.op("FULLY_CONNECTED", [x, wt, bt], w.shape[0], tag, fused_activation_function=0,
                       keep_num_dims=False)

    def add(self, a, b, width, tag="add"):
        return self.op("ADD", [a, b], width, tag, fused_activation_function=0)

    def mul(self, a, b, width, tag="mul"):
        return self.op("MUL", [a, b], width, tag, fused_activation_function=0)

    def split(self, x, parts, width):
        L = self.L
        outs = [self.t(width, "gate") for _ in range(parts)]
        L.emit("SPLIT", [L.g.const("split_axis", np.array(1, np.int32)), x], outs, num_splits=parts)
        return outs


def _common(L, n, gates):
    acts = L.attr(n, "activations")
    default = {3: [b"Sigmoid", b"Tanh", b"Tanh"], 2: [b"Sigmoid", b"Tanh"]}[gates if gates == 3 else 2]
    if acts and [a if isinstance(a, bytes) else a.encode() for a in acts][:len(default)] != default:
        raise L.unsupported(f"activations {acts} (only the default Sigmoid/Tanh cell is unrolled)")
    for attr in ("clip", "input_forget"):
        if L.attr(n, attr):
            raise L.unsupported(f"{attr}={L.attr(n, attr)} (not unrolled; export without it)")
    if int(L.attr(n, "layout", 0)) != 0:
        raise L.unsupported("layout=1 (batch-major); export with layout=0")
    x = L.val(n.input[0])
    if x.rank != 3:
        raise L.unsupported(f"a {x.rank}-D input (expected seq x batch x input)")
    seq, batch, _ = x.shape
    if len(n.input) > 4 and n.input[4]:
        lens = L.vals.get(n.input[4])
        if lens is None or lens.const is None or np.any(np.asarray(lens.const) != seq):
            raise L.unsupported("sequence_lens that differ from the sequence length (pad the batch instead)")
    direction = L.attr(n, "direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    W = np.asarray(L.cval(n.input[1], "W"), np.float32)
    R = np.asarray(L.cval(n.input[2], "R"), np.float32)
    H = R.shape[-1]
    B = (np.asarray(L.cval(n.input[3], "B"), np.float32) if len(n.input) > 3 and n.input[3]
         else np.zeros((len(dirs), 2 * gates * H), np.float32))
    return x, seq, batch, H, dirs, W, R, B


def _initial(L, n, idx, d, batch, H, tag):
    """The initial state of direction ``d`` as a (batch, H) tensor (zeros when not given)."""
    if len(n.input) > idx and n.input[idx]:
        v = L.val(n.input[idx])
        if v.const is not None:
            return L.g.const(f"{n.output[0]}_{tag}{d}", np.asarray(v.const, np.float32)[d])
        src = L.get(n.input[idx], _ident(3))
        out = L.g.tensor(f"{n.output[0]}_{tag}{d}", (batch, H))
        L.emit("STRIDED_SLICE", [src, L.g.const(f"{tag}{d}_b", np.array([d, 0, 0], np.int32)),
                                 L.g.const(f"{tag}{d}_e", np.array([d + 1, batch, H], np.int32)),
                                 L.g.const(f"{tag}_s", np.array([1, 1, 1], np.int32))], [out],
               begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=1)
        return out
    return L.g.const(f"{n.output[0]}_{tag}{d}_zero", np.zeros((batch, H), np.float32))


def _steps(L, n, x, seq, batch):
    """x_t tensors (batch, input) for t in 0..seq-1 (one UNPACK of the sequence)."""
    xt = L.get(n.input[0], _ident(3))
    outs = [L.g.tensor(f"{n.output[0] or n.name}_x{t}", (batch, x.shape[2])) for t in range(seq)]
    L.emit("UNPACK", [xt], outs, num=seq, axis=0)
    return outs


def _outputs(L, n, hs_per_dir, finals, seq, batch, H):
    """Y (seq, dirs, batch, H) and the final states (dirs, batch, H) as ONNX outputs."""
    dirs = len(hs_per_dir)
    if len(n.output) > 0 and n.output[0]:
        steps = []
        for t in range(seq):
            per = [hs_per_dir[d][t] for d in range(dirs)]
            st = L.g.tensor(f"{n.output[0]}_y{t}", (1, dirs, batch, H))
            L.emit("PACK", per, [L.g.tensor(f"{n.output[0]}_yp{t}", (dirs, batch, H))], values_count=dirs, axis=0)
            L.emit("RESHAPE", [L.g.ops[-1].outputs[0], L.g.const("y_shape", np.array([1, dirs, batch, H], np.int32))],
                   [st], new_shape=[1, dirs, batch, H])
            steps.append(st)
        out = L.new_out(n.output[0], _ident(4))
        if seq == 1:
            L.emit("RESHAPE", [steps[0], L.g.const("y1_shape", np.array([1, dirs, batch, H], np.int32))], [out],
                   new_shape=[1, dirs, batch, H])
        else:
            L.emit("CONCATENATION", steps, [out], axis=0, fused_activation_function=0)
    for k, states in enumerate(finals):
        name = n.output[k + 1] if len(n.output) > k + 1 else ""
        if not name:
            continue
        L.emit("PACK", states, [L.new_out(name, _ident(3))], values_count=dirs, axis=0)


@lowers("LSTM")
def _lstm(L, n):
    if len(n.input) > 7 and n.input[7]:
        raise L.unsupported("peephole weights P (not unrolled)")
    x, seq, batch, H, dirs, W, R, B = _common(L, n, 4)
    xs = _steps(L, n, x, seq, batch)
    hs_per_dir, last_h, last_c = [], [], []
    for d, direction in enumerate(dirs):
        c = _Cell(L, n, batch)
        h = _initial(L, n, 5, d, batch, H, "h0_")
        cs = _initial(L, n, 6, d, batch, H, "c0_")
        order = range(seq) if direction == "forward" else range(seq - 1, -1, -1)
        hs = [None] * seq
        bias = B[d][:4 * H] + B[d][4 * H:]
        for t in order:
            g = c.add(c.fc(xs[t], W[d], bias, f"d{d}t{t}_x"), c.fc(h, R[d], None, f"d{d}t{t}_h"), 4 * H)
            gi, go, gf, gc = c.split(g, 4, H)
            i, o, f = (c.op("LOGISTIC", [v], H, "sig") for v in (gi, go, gf))
            cc = c.op("TANH", [gc], H, "tanh")
            cs = c.add(c.mul(f, cs, H), c.mul(i, cc, H), H, "c")
            h = c.mul(o, c.op("TANH", [cs], H, "tanh"), H, "h")
            hs[t] = h
        hs_per_dir.append(hs)
        last_h.append(h)
        last_c.append(cs)
    _outputs(L, n, hs_per_dir, [last_h, last_c], seq, batch, H)


@lowers("GRU")
def _gru(L, n):
    x, seq, batch, H, dirs, W, R, B = _common(L, n, 3)
    lbr = int(L.attr(n, "linear_before_reset", 0))
    xs = _steps(L, n, x, seq, batch)
    hs_per_dir, last_h = [], []
    for d, direction in enumerate(dirs):
        c = _Cell(L, n, batch)
        h = _initial(L, n, 5, d, batch, H, "h0_")
        order = range(seq) if direction == "forward" else range(seq - 1, -1, -1)
        hs = [None] * seq
        Wb, Rb = B[d][:3 * H], B[d][3 * H:]
        for t in order:
            zr = c.add(c.fc(xs[t], W[d][:2 * H], Wb[:2 * H] + Rb[:2 * H], f"d{d}t{t}_xzr"),
                       c.fc(h, R[d][:2 * H], None, f"d{d}t{t}_hzr"), 2 * H)
            gz, gr = c.split(zr, 2, H)
            z, r = c.op("LOGISTIC", [gz], H, "sig"), c.op("LOGISTIC", [gr], H, "sig")
            xh = c.fc(xs[t], W[d][2 * H:], Wb[2 * H:], f"d{d}t{t}_xh")
            if lbr:
                hh = c.mul(r, c.fc(h, R[d][2 * H:], Rb[2 * H:], f"d{d}t{t}_hh"), H)
            else:
                hh = c.fc(c.mul(r, h, H), R[d][2 * H:], Rb[2 * H:], f"d{d}t{t}_rh")
            cand = c.op("TANH", [c.add(xh, hh, H)], H, "tanh")
            diff = c.op("SUB", [h, cand], H, "sub", fused_activation_function=0)
            h = c.add(cand, c.mul(z, diff, H), H, "h")
            hs[t] = h
        hs_per_dir.append(hs)
        last_h.append(h)
    _outputs(L, n, hs_per_dir, [last_h], seq, batch, H)
