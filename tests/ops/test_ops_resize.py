"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR against LiteRT's reference kernels."""

import numpy as np
import pytest

from edgerun.ir import ModelBuilder
from edgerun.testing import compare_with_litert

SIZES = [  # (input NHWC, output (h, w))
    ((1, 4, 4, 3), (8, 8)),
    ((2, 5, 7, 2), (3, 4)),      # downscale
    ((1, 3, 5, 4), (7, 11)),     # odd factors
    ((1, 1, 1, 2), (3, 2)),
    ((1, 6, 4, 1), (6, 4)),      # identity size
]
MODES = [(False, False), (True, False), (False, True)]  # (align_corners, half_pixel_centers)


def _model(op, dtype, shape, size, align, half, q=None):
    b = ModelBuilder()
    x = b.input("x", shape, dtype, q)
    s = b.const("size", np.array(size, np.int32))
    y = b.tensor("y", (shape[0], size[0], size[1], shape[3]), dtype, q)
    b.op(op, [x, s], [y], align_corners=align, half_pixel_centers=half)
    b.output(y)
    return b.to_bytes()


@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
@pytest.mark.parametrize("shape,size", SIZES)
@pytest.mark.parametrize("align,half", MODES)
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_resize(op, shape, size, align, half, dtype):
    q = (0.05, -3) if dtype == "int8" else None
    compare_with_litert(_model(op, dtype, shape, size, align, half, q), seed=7)


@pytest.mark.parametrize("align,half", MODES)
def test_resize_bilinear_int8_extremes(align, half):
    """Full-range inputs: the Q20 sums are largest and rounding of negative values matters."""
    m = _model("RESIZE_BILINEAR", "int8", (1, 3, 4, 2), (10, 7), align, half, (0.1, 0))
    rng = np.random.default_rng(8)
    x = rng.choice(np.array([-128, -127, -1, 0, 1, 127], np.int8), size=(1, 3, 4, 2))
    compare_with_litert(m, [x])


@pytest.mark.parametrize("align,half", MODES)
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_resize_bilinear_row_blocks(align, half, dtype, monkeypatch):
    """Bilinear runs a block of output rows at a time: blocks of one row (two images, so a block
    is smaller than a row of the batch) match LiteRT and the whole-output block bit for bit."""
    from edgerun.ops.resize import ResizeBilinear

    q = (0.1, -5) if dtype == "int8" else None
    m = _model("RESIZE_BILINEAR", dtype, (2, 5, 6, 3), (11, 9), align, half, q)
    whole = compare_with_litert(m, seed=4)[0]
    monkeypatch.setattr(ResizeBilinear, "BLOCK_VALUES", 1)
    rows = compare_with_litert(m, seed=4)[0]
    assert rows.tobytes() == whole.tobytes()
