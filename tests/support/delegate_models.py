"""Small int8 / float models built in code for the delegate and partition tests (no binaries).

Weights are int8 symmetric per output channel, bias int32 with scale = input scale x weight scale,
activations int8 per tensor: TFLite's int8 spec. Output scales are set from the expected spread
of the accumulator so outputs use most of the int8 range instead of saturating.
"""

from __future__ import annotations

import numpy as np

from edgerun.ir import ModelBuilder
from edgerun.schema.tflite import Activation, Padding

RNG_SEED = 7


def _out_scale(s_in, s_w, k):
    # accumulator std ~ sqrt(k) * std(x_q) * std(w_q); map about 3 std to the int8 range
    return float(s_in * float(np.mean(s_w)) * np.sqrt(k) * 74 * 73 * 3 / 127)


class Q:
    """Helpers adding quantized ops to a ModelBuilder, tracking each tensor's scale and zp."""

    def __init__(self, seed: int = RNG_SEED, dtype: str = "int8"):
        self.b = ModelBuilder()
        self.rng = np.random.default_rng(seed)
        self.q = {}  # tensor -> (scale, zp)
        self.shape = {}
        self.n = 0

    def _name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def input(self, shape, scale=0.05, zp=3):
        t = self.b.input(self._name("x"), shape, "int8", (scale, zp))
        self.q[t], self.shape[t] = (scale, zp), tuple(shape)
        return t

    def act(self, shape, scale, zp):
        t = self.b.tensor(self._name("a"), shape, "int8", (scale, zp))
        self.q[t], self.shape[t] = (scale, zp), tuple(shape)
        return t

    def conv(self, x, cout, k=3, stride=1, padding=Padding.SAME, act=Activation.NONE, depthwise=False):
        n, h, w, cin = self.shape[x]
        s_in, _ = self.q[x]
        if depthwise:
            cout = cin
            wq = self.rng.integers(-127, 128, size=(1, k, k, cout)).astype(np.int8)
            s_w = self.rng.uniform(0.002, 0.02, size=cout).astype(np.float32)
            wt = self.b.const(self._name("dw_w"), wq, "int8", (s_w, np.zeros(cout, np.int64), 3))
            kk = k * k
        else:
            wq = self.rng.integers(-127, 128, size=(cout, k, k, cin)).astype(np.int8)
            s_w = self.rng.uniform(0.002, 0.02, size=cout).astype(np.float32)
            wt = self.b.const(self._name("w"), wq, "int8", (s_w, np.zeros(cout, np.int64), 0))
            kk = k * k * cin
        bias = self.rng.integers(-2000, 2000, size=cout).astype(np.int32)
        bt = self.b.const(self._name("b"), bias, "int32", ((s_in * s_w).astype(np.float32),
                                                          np.zeros(cout, np.int64), 0))
        if padding == Padding.SAME:
            oh, ow = -(-h // stride), -(-w // stride)
        else:
            oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
        y = self.act((n, oh, ow, cout), _out_scale(s_in, s_w, kk), int(self.rng.integers(-20, 20)))
        if depthwise:
            self.b.op("DEPTHWISE_CONV_2D", [x, wt, bt], [y], padding=padding, stride_w=stride, stride_h=stride,
                      depth_multiplier=1, fused_activation_function=act, dilation_w_factor=1,
                      dilation_h_factor=1, version=3)
        else:
            self.b.op("CONV_2D", [x, wt, bt], [y], padding=padding, stride_w=stride, stride_h=stride,
                      fused_activation_function=act, dilation_w_factor=1, dilation_h_factor=1, version=3)
        return y

    def fc(self, x, out, act=Activation.NONE, w_scale=(0.002, 0.02)):
        shp = self.shape[x]
        k = int(shp[-1])
        s_in, _ = self.q[x]
        wq = self.rng.integers(-127, 128, size=(out, k)).astype(np.int8)
        s_w = self.rng.uniform(*w_scale, size=out).astype(np.float32)
        wt = self.b.const(self._name("fw"), wq, "int8", (s_w, np.zeros(out, np.int64), 0))
        bias = self.rng.integers(-2000, 2000, size=out).astype(np.int32)
        bt = self.b.const(self._name("fb"), bias, "int32", ((s_in * s_w).astype(np.float32),
                                                           np.zeros(out, np.int64), 0))
        rows = int(np.prod(shp[:-1]))
        y = self.act((rows, out), _out_scale(s_in, s_w, k), int(self.rng.integers(-20, 20)))
        self.b.op("FULLY_CONNECTED", [x, wt, bt], [y], fused_activation_function=act, version=5)
        return y

    def add(self, a, c, act=Activation.NONE, op="ADD"):
        sa, sc = self.q[a][0], self.q[c][0]
        y = self.act(self.shape[a], (sa + sc) * 1.1 if op != "MUL" else sa * sc * 60, -5)
        self.b.op(op, [a, c], [y], fused_activation_function=act, version=2)
        return y

    def pool(self, x, op="MAX_POOL_2D", k=2, stride=2, padding=Padding.VALID):
        n, h, w, c = self.shape[x]
        if padding == Padding.SAME:
            oh, ow = -(-h // stride), -(-w // stride)
        else:
            oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
        s, zp = self.q[x]
        y = self.act((n, oh, ow, c), s, zp)
        self.b.op(op, [x], [y], padding=padding, stride_w=stride, stride_h=stride, filter_width=k,
                  filter_height=k, fused_activation_function=0, version=2)
        return y

    def unary(self, x, op, scale=None, zp=None):
        s, z = self.q[x]
        y = self.act(self.shape[x], scale if scale is not None else s, zp if zp is not None else z)
        self.b.op(op, [x], [y], version=2)
        return y

    def softmax(self, x, beta=1.0):
        y = self.act(self.shape[x], 1.0 / 256, -128)
        self.b.op("SOFTMAX", [x], [y], beta=beta, version=2)
        return y

    def reshape(self, x, shape):
        s, z = self.q[x]
        y = self.act(tuple(shape), s, z)
        st = self.b.const(self._name("shape"), np.array(shape, np.int32), "int32")
        self.b.op("RESHAPE", [x, st], [y], new_shape=list(shape))
        return y

    def done(self, *outs) -> bytes:
        self.b.output(*outs)
        return self.b.to_bytes()


def small_cnn(seed=RNG_SEED) -> bytes:
    """conv -> depthwise -> maxpool -> conv -> avgpool -> reshape -> fc -> softmax (int8)."""
    q = Q(seed)
    x = q.input((1, 16, 16, 3))
    y = q.conv(x, 8, act=Activation.RELU)
    y = q.conv(y, 8, depthwise=True, act=Activation.RELU6)
    y = q.pool(y, "MAX_POOL_2D")
    y2 = q.conv(y, 8, k=1)
    y = q.add(y, y2)
    y = q.pool(y, "AVERAGE_POOL_2D", k=8, stride=8)
    y = q.reshape(y, (1, 8))
    y = q.fc(y, 10, w_scale=(2e-5, 2e-4))  # small logits: the softmax output stays spread
    y = q.softmax(y)
    return q.done(y)


def float_relu_chain(shape=(2, 6, 5)) -> bytes:
    b = ModelBuilder()
    x = b.input("x", shape, "float32")
    a = b.tensor("a", shape, "float32")
    c = b.tensor("c", shape, "float32")
    b.op("RELU6", [x], [a])
    b.op("RELU_N1_TO_1", [a], [c])
    b.output(c)
    return b.to_bytes()
