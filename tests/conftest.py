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
