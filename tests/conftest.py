import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_addoption(parser):
    parser.addoption("--port", default=None, help="serial port of a real board (hardware tests)")


def pytest_collection_modifyitems(config, items):
    markexpr = config.getoption("-m") or ""
    for item in items:
        for mark in ("hardware", "gpu"):
            if mark in item.keywords and mark not in markexpr:
                item.add_marker(pytest.mark.skip(reason=f"needs {mark}: run with -m {mark}"))


@pytest.fixture(scope="session")
def sine_model() -> bytes:
    """The float sine model that the tflite-micro wheel ships (made by Google's converter)."""
    tm = pytest.importorskip("tflite_micro", reason="tflite-micro package not installed")
    from pathlib import Path

    p = Path(tm.__file__).parent / "python" / "tflite_micro" / "sine_float.tflite"
    if not p.exists():
        pytest.skip(f"tflite-micro no longer ships {p.name}")
    return p.read_bytes()


def pytest_collection_finish(session):
    """Tell the op-coverage test whether every kernel test file was collected."""
    from pathlib import Path

    import test_zz_op_coverage as cov

    here = Path(__file__).parent
    wanted = {p.name for p in here.glob("test_*.py")}
    collected = {Path(str(item.fspath)).name for item in session.items}
    deselected = session.config.getoption("-k") or session.config.getoption("-m")
    session.config.stash[cov.FULL_RUN_KEY] = wanted <= collected and not deselected
