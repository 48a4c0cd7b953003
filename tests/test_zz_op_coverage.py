"""Coverage floor (cf. onnx's MIN_PASSING_TESTS): every registered (op, dtype) kernel must have
run in some test of this session. conftest.py records the pairs and runs this test after all
others (whatever the file order); it is skipped when only part of the suite was collected."""

import pytest

import edgerun.ops  # noqa: F401  (registers every kernel)
from edgerun.ops.registry import registered_pairs


@pytest.mark.op_coverage_floor
def test_every_registered_kernel_was_tested(op_coverage):
    if not op_coverage["full_run"]:
        pytest.skip("only part of the suite was collected; run the whole suite for the coverage check")
    missing = [f"{op}/{dt}" for op, dt in registered_pairs() if (op, dt) not in op_coverage["executed"]]
    assert not missing, f"registered kernels that no test executed: {', '.join(missing)}"
