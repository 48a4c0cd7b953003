import pytest

from edgerun.ir import ModelBuilder
from edgerun.testing import compare_with_litert


@pytest.mark.parametrize("op", ["RELU", "RELU6", "RELU_N1_TO_1"])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_relu_family(op, dtype):
    b = ModelBuilder()
    qi = (0.05, -10) if dtype == "int8" else None
    qo = (0.03, -30) if dtype == "int8" else None
    x = b.input("x", (2, 5, 7), dtype, qi)
    y = b.tensor("y", (2, 5, 7), dtype, qo)
    b.op(op, [x], [y])
    b.output(y)
    compare_with_litert(b.to_bytes(), seed=3)
