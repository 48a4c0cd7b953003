"""libFuzzer over the firmware (issue 11): the model loader/validator plus one inference of every
model it accepts (fuzz_model), and the frame parser plus every command handler (fuzz_frames),
built with clang under ASan/UBSan (`make -C firmware fuzz`). Each CI run starts from the
checked-in seed corpus (firmware/fuzz/make_corpus.py writes it) and executes 100,000 inputs per
target under a time cap; any sanitizer report, abort, timeout or leak of a refused model into
`loaded` fails the test. Skipped when clang (with libFuzzer) is not installed (tools/install.sh
installs it)."""

import os
import re
import shutil
import subprocess
import time

import pytest

from tests.support.firmware_harness import FIRMWARE, make

RUNS = 100_000


def _clang_reason():
    if shutil.which("clang") is None:
        return "clang not installed (tools/install.sh installs it)"
    return None


pytestmark = pytest.mark.skipif(_clang_reason() is not None, reason=str(_clang_reason()))


@pytest.fixture(scope="module")
def built():
    try:
        make("fuzz")
    except RuntimeError as e:
        if "fuzzer" in str(e) and ("cannot find" in str(e) or "not found" in str(e)):
            pytest.skip(f"clang has no libFuzzer runtime (libclang-rt-dev): {str(e)[-200:]}")
        raise
    return FIRMWARE / "build" / "fuzz"


@pytest.mark.parametrize("target,extra", [("fuzz_model", ["-max_len=65536"]), ("fuzz_frames", [])])
@pytest.mark.slow
def test_fuzzer_runs_clean(built, tmp_path, target, extra):
    seeds = FIRMWARE / "fuzz" / "corpus" / ("model" if target == "fuzz_model" else "frames")
    assert len(list(seeds.iterdir())) >= 10, "seed corpus missing: python3 firmware/fuzz/make_corpus.py"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0", UBSAN_OPTIONS="halt_on_error=1")
    # new inputs go to tmp_path (first corpus dir); the checked-in seeds are only read
    # inputs that once crashed it (firmware/fuzz/regressions/) run first, with the seeds
    regressions = [str(FIRMWARE / "fuzz" / "regressions")] if target == "fuzz_model" else []
    cmd = [str(built / target), f"-runs={RUNS}", "-max_total_time=150", "-timeout=10", "-rss_limit_mb=2048",
           "-seed=1", "-print_final_stats=1", *extra, str(tmp_path), str(seeds), *regressions]
    t0 = time.monotonic()
    # a child inherits its parent's peak RSS (ru_maxrss survives fork and exec), which libFuzzer's
    # -rss_limit_mb reads: started from pytest after a memory-hungry test it would report the test
    # process's peak. sh forks the fuzzer (no exec), so it starts from sh's small peak.
    r = subprocess.run(["sh", "-c", '"$@"; exit $?', "sh", *cmd], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    elapsed = time.monotonic() - t0
    log = r.stderr[-4000:]
    assert r.returncode == 0, log
    assert "runtime error" not in r.stderr and "ERROR: AddressSanitizer" not in r.stderr, log
    runs = int(re.search(r"stat::number_of_executed_units: (\d+)", r.stderr).group(1))
    # all RUNS, unless the time cap stopped it first (a loaded machine; normally 5-10 s)
    assert runs >= RUNS if elapsed < 145 else runs >= 20_000, (runs, elapsed, log)
