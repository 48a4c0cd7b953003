"""Train the shipped example CNN on scikit-learn's handwritten digits and export it to ONNX.

    python tools/train_digits.py            # writes models/digits_cnn.onnx and its data files

Data: ``sklearn.datasets.load_digits`` (1797 8x8 images, values 0..16, 10 classes; a copy of the
UCI "Optical Recognition of Handwritten Digits" test set, shipped inside scikit-learn, so nothing
is downloaded). Images are upsampled 2x (nearest) to 16x16 and scaled to [0, 1]; an 80/20
stratified split with a fixed seed gives 1437 training and 360 test images.

Model (NCHW, as PyTorch would export it): Conv 3x3 (1->8) + BatchNorm + Relu, MaxPool 2,
Conv 3x3 (8->16) + Relu, MaxPool 2, Flatten, Gemm (256->32) + Relu, Gemm (32->10), Softmax.
Plain numpy: im2col convolutions, Adam, 12 epochs, fixed seeds, well under a minute on one core.
The BatchNorm is exported as a real BatchNormalization node (with its running statistics), so the
shipped model exercises the converter's BatchNorm folding as exported models do.

Writes (all deterministic for a given numpy version):
  models/digits_cnn.onnx        the float model (opset 13, dynamic batch)
  models/calib_digits.npz       x: 100 training images (float32, N x 1 x 16 x 16) for calibration
  models/digits_test.npz        x: the 360 test images (uint8 8x8, 0..16), y: labels
  models/digits_samples/        digit_<label>.npy (1 x 16 x 16 x 1 float, NHWC) and .png (16x16 grey)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PREPROCESSING = {"size": [16, 16], "scale": 1 / 255, "channel_order": "L", "layout": "NHWC"}


def upsample(x8: np.ndarray) -> np.ndarray:
    """(N, 8, 8) values 0..16 -> (N, 1, 16, 16) float32 in [0, 1]."""
    x = np.repeat(np.repeat(np.asarray(x8, np.float32), 2, axis=1), 2, axis=2) / 16.0
    return x[:, None]


def load_split(seed: int = 0):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x8 = d.images.astype(np.uint8)
    xtr, xte, ytr, yte = train_test_split(x8, d.target, test_size=0.2, random_state=seed, stratify=d.target)
    return xtr, xte, ytr.astype(np.int64), yte.astype(np.int64)


# -- numpy layers ---------------------------------------------------------------------------------

def im2col(x, k=3, pad=1):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((n, h, w, c, k, k), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, :, :, i, j] = xp[:, :, i:i + h, j:j + w].transpose(0, 2, 3, 1)
    return cols.reshape(n * h * w, c * k * k)


def col2im(dcols, shape, k=3, pad=1):
    n, c, h, w = shape
    d = dcols.reshape(n, h, w, c, k, k)
    dx = np.zeros((n, c, h + 2 * pad, w + 2 * pad), dcols.dtype)
    for i in range(k):
        for j in range(k):
            dx[:, :, i:i + h, j:j + w] += d[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return dx[:, :, pad:pad + h, pad:pad + w]


def conv_fwd(x, w, b):
    n, c, h, wd = x.shape
    cols = im2col(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), cols


def conv_bwd(dout, cols, x_shape, w):
    o = w.shape[0]
    d2 = dout.transpose(0, 2, 3, 1).reshape(-1, o)
    dw = (d2.T @ cols).reshape(w.shape)
    db = d2.sum(0)
    dx = col2im(d2 @ w.reshape(o, -1), x_shape)
    return dx, dw, db


def pool_fwd(x):
    n, c, h, w = x.shape
    r = x.reshape(n, c, h // 2, 2, w // 2, 2)
    out = r.max(axis=(3, 5))
    mask = r == out[:, :, :, None, :, None]
    return out, mask


def pool_bwd(dout, mask):
    n, c, h2, _, w2, _ = mask.shape
    d = mask * dout[:, :, :, None, :, None]
    d = d / np.maximum(mask.sum(axis=(3, 5), keepdims=True), 1)
    return d.reshape(n, c, h2 * 2, w2 * 2)


def init_params(rng):
    def he(*s, fan):
        return (rng.standard_normal(s) * np.sqrt(2.0 / fan)).astype(np.float32)
    return {"w1": he(8, 1, 3, 3, fan=9), "b1": np.zeros(8, np.float32),
            "g1": np.ones(8, np.float32), "be1": np.zeros(8, np.float32),
            "w2": he(16, 8, 3, 3, fan=72), "b2": np.zeros(16, np.float32),
            "w3": he(32, 256, fan=256), "b3": np.zeros(32, np.float32),
            "w4": he(10, 32, fan=32), "b4": np.zeros(10, np.float32)}


def forward(p, x, bn_stats=None, train=True):
    cache = {}
    c1, cache["cols1"] = conv_fwd(x, p["w1"], p["b1"])
    if train:
        mu = c1.mean(axis=(0, 2, 3))
        var = c1.var(axis=(0, 2, 3))
    else:
        mu, var = bn_stats
    xhat = (c1 - mu[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5)
    bn = xhat * p["g1"][None, :, None, None] + p["be1"][None, :, None, None]
    cache.update(c1=c1, mu=mu, var=var, xhat=xhat)
    r1 = np.maximum(bn, 0)
    m1, cache["mask1"] = pool_fwd(r1)
    c2, cache["cols2"] = conv_fwd(m1, p["w2"], p["b2"])
    r2 = np.maximum(c2, 0)
    m2, cache["mask2"] = pool_fwd(r2)
    f = m2.reshape(len(x), -1)
    h = f @ p["w3"].T + p["b3"]
    hr = np.maximum(h, 0)
    logits = hr @ p["w4"].T + p["b4"]
    cache.update(x=x, bn=bn, r1=r1, m1=m1, c2=c2, m2=m2, f=f, h=h, hr=hr)
    return logits, cache


def backward(p, cache, dlogits):
    g = {}
    n = len(dlogits)
    g["w4"] = dlogits.T @ cache["hr"]
    g["b4"] = dlogits.sum(0)
    dh = (dlogits @ p["w4"]) * (cache["h"] > 0)
    g["w3"] = dh.T @ cache["f"]
    g["b3"] = dh.sum(0)
    dm2 = (dh @ p["w3"]).reshape(cache["m2"].shape)
    dr2 = pool_bwd(dm2, cache["mask2"])
    dc2 = dr2 * (cache["c2"] > 0)
    dm1, g["w2"], g["b2"] = conv_bwd(dc2, cache["cols2"], cache["m1"].shape, p["w2"])
    dr1 = pool_bwd(dm1, cache["mask1"])
    dbn = dr1 * (cache["bn"] > 0)
    g["g1"] = (dbn * cache["xhat"]).sum(axis=(0, 2, 3))
    g["be1"] = dbn.sum(axis=(0, 2, 3))
    dxhat = dbn * p["g1"][None, :, None, None]
    m = n * cache["c1"].shape[2] * cache["c1"].shape[3]
    inv = 1.0 / np.sqrt(cache["var"] + 1e-5)[None, :, None, None]
    dc1 = inv / m * (m * dxhat - dxhat.sum(axis=(0, 2, 3), keepdims=True)
                     - cache["xhat"] * (dxhat * cache["xhat"]).sum(axis=(0, 2, 3), keepdims=True))
    _, g["w1"], g["b1"] = conv_bwd(dc1, cache["cols1"], cache["x"].shape, p["w1"])
    return g


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def train(xtr, ytr, epochs=12, batch=32, lr=3e-3, seed=0, log=print):
    rng = np.random.default_rng(seed)
    p = init_params(rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    run_mu, run_var = np.zeros(8, np.float32), np.ones(8, np.float32)
    t = 0
    for ep in range(epochs):
        order = rng.permutation(len(xtr))
        loss_sum = 0.0
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            x, y = xtr[idx], ytr[idx]
            logits, cache = forward(p, x)
            run_mu = 0.9 * run_mu + 0.1 * cache["mu"]
            run_var = 0.9 * run_var + 0.1 * cache["var"] * len(x) * 256 / max(len(x) * 256 - 1, 1)
            prob = softmax(logits)
            loss_sum += float(-np.log(prob[np.arange(len(y)), y] + 1e-12).sum())
            d = prob
            d[np.arange(len(y)), y] -= 1
            g = backward(p, cache, d / len(y))
            t += 1
            for k in p:
                m[k] = 0.9 * m[k] + 0.1 * g[k]
                v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
                mh = m[k] / (1 - 0.9 ** t)
                vh = v[k] / (1 - 0.999 ** t)
                p[k] = (p[k] - lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
        log(f"epoch {ep + 1:2d}: loss {loss_sum / len(xtr):.4f}")
    return p, (run_mu.astype(np.float32), run_var.astype(np.float32))


def export_onnx(p, bn_stats, path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def init(name, arr):
        return numpy_helper.from_array(np.asarray(arr, np.float32), name)

    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["conv1"], name="Conv@0",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv1", "bn1.weight", "bn1.bias", "bn1.running_mean",
                                                "bn1.running_var"], ["bn1"], name="BatchNormalization@1",
                         epsilon=1e-5),
        helper.make_node("Relu", ["bn1"], ["relu1"], name="Relu@2"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], name="MaxPool@3", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "conv2.weight", "conv2.bias"], ["conv2"], name="Conv@4",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="Relu@5"),
        helper.make_node("MaxPool", ["relu2"], ["pool2"], name="MaxPool@6", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool2"], ["flat"], name="Flatten@7", axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["fc1"], name="Gemm@8", transB=1),
        helper.make_node("Relu", ["fc1"], ["relu3"], name="Relu@9"),
        helper.make_node("Gemm", ["relu3", "fc2.weight", "fc2.bias"], ["logits"], name="Gemm@10", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="Softmax@11", axis=1),
    ]
    inits = [init("conv1.weight", p["w1"]), init("conv1.bias", p["b1"]), init("bn1.weight", p["g1"]),
             init("bn1.bias", p["be1"]), init("bn1.running_mean", bn_stats[0]), init("bn1.running_var", bn_stats[1]),
             init("conv2.weight", p["w2"]), init("conv2.bias", p["b2"]), init("fc1.weight", p["w3"]),
             init("fc1.bias", p["b3"]), init("fc2.weight", p["w4"]), init("fc2.bias", p["b4"])]
    graph = helper.make_graph(nodes, "digits_cnn",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 16, 16])],
                              [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8,
                              producer_name="edgerun tools/train_digits.py", producer_version="1")
    helper.set_model_props(model, {"edgerun.preprocessing": json.dumps(PREPROCESSING, sort_keys=True),
                                   "labels": json.dumps([str(i) for i in range(10)])})
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())


def float_accuracy(p, bn_stats, x, y) -> float:
    logits, _ = forward(p, x, bn_stats, train=False)
    return float(np.mean(np.argmax(logits, 1) == y))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "models")
    ap.add_argument("--epochs", type=int, default=12)
    args = ap.parse_args(argv)
    t0 = time.time()
    xtr8, xte8, ytr, yte = load_split()
    xtr, xte = upsample(xtr8), upsample(xte8)
    p, bn = train(xtr, ytr, epochs=args.epochs)
    acc = float_accuracy(p, bn, xte, yte)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    export_onnx(p, bn, out / "digits_cnn.onnx")
    rng = np.random.default_rng(1)
    calib_idx = np.sort(rng.choice(len(xtr), 100, replace=False))
    np.savez_compressed(out / "calib_digits.npz", x=xtr[calib_idx])
    np.savez_compressed(out / "digits_test.npz", x=xte8, y=yte)
    sd = out / "digits_samples"
    sd.mkdir(exist_ok=True)
    for label in range(10):
        i = int(np.flatnonzero(yte == label)[0])
        np.save(sd / f"digit_{label}.npy", xte[i].transpose(1, 2, 0)[None].astype(np.float32))
        try:
            from PIL import Image
            Image.fromarray(np.round(xte[i, 0] * 255).astype(np.uint8), "L").save(sd / f"digit_{label}.png")
        except ImportError:
            pass
    print(f"float test accuracy (numpy): {acc * 100:.2f}% on {len(yte)} images; {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
