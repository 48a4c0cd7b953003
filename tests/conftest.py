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


# --------------------------------------------------------------------------------------------
# op coverage: which registered (op, dtype) kernels the tests in this session ran
# --------------------------------------------------------------------------------------------
OP_COVERAGE = pytest.StashKey[dict]()


def pytest_configure(config):
    """Record, for this test session only, every (op, dtype) an interpreter runs or folds.

    The interpreter itself keeps no such record: the hooks wrap its runner's ``prepare`` and
    ``run`` here, in the test process, and store the pairs in the session's stash.
    """
    state = {"executed": set(), "full_run": False}
    config.stash[OP_COVERAGE] = state
    from edgerun.runtime.interpreter import SubgraphRunner

    prepare, run = SubgraphRunner.prepare, SubgraphRunner.run

    def recording_prepare(self, *args, **kwargs):
        try:
            return prepare(self, *args, **kwargs)
        finally:
            state["executed"].update(self.folded)

    def recording_run(self, *args, **kwargs):
        out = run(self, *args, **kwargs)
        state["executed"].update((st.name, st.dtype) for st in self.steps if st.dtype not in ("", "delegate"))
        return out

    SubgraphRunner.prepare, SubgraphRunner.run = recording_prepare, recording_run
    config.add_cleanup(lambda: (setattr(SubgraphRunner, "prepare", prepare), setattr(SubgraphRunner, "run", run)))


@pytest.fixture
def op_coverage(request) -> dict:
    """``{"executed": {(op, dtype), ...}, "full_run": bool}`` for the op-coverage floor."""
    return request.config.stash[OP_COVERAGE]


def pytest_collection_finish(session):
    """Run the op-coverage floor last, whatever the file order, and say whether the session
    collected every test file (only then is the floor meaningful)."""
    from pathlib import Path

    last = [it for it in session.items if it.get_closest_marker("op_coverage_floor")]
    session.items[:] = [it for it in session.items if it not in last] + last
    here = Path(__file__).parent
    wanted = {p.name for p in here.rglob("test_*.py")}
    collected = {Path(str(item.fspath)).name for item in session.items}
    deselected = session.config.getoption("-k") or session.config.getoption("-m")
    session.config.stash[OP_COVERAGE]["full_run"] = wanted <= collected and not deselected
