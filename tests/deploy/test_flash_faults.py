"""Flashing through a hostile line: the posix firmware on one pty, the real flasher on another,
and a relay between them that drops, duplicates, corrupts and cuts bytes (at least a hundred
faults per run), plus power cuts (SIGKILL) in the middle of transfers. After every attempt the
device must answer, hold an active model that is one of the flashed ones, and run it
bit-exactly: zero bricked states. Every attempt either completes (resumed or not) or raises a
clean LinkError/DeviceError."""

import hashlib
import random
import threading
import time

import numpy as np
import pytest

from edgerun.deploy.flash import flash, model_info, run_with_link
from edgerun.deploy.serial_link import SerialLink
from edgerun.errors import LinkError
from edgerun.testing import run_litert
from tests.support.firmware_harness import Rig
from tests.support.firmware_models import mcu_small

FAST = {"ack_timeout": 0.08, "retries": 8, "slow_timeout": 0.6}
#: how many times the test, like a user, re-runs a flash the line defeated
USER_TRIES = 4
#: ptys have no line rate; a high nominal baud keeps the flasher's wire-time allowance small
BAUD = 2_000_000


def _quiet(rig):
    rig.relay.fault_rate = 0.0
    time.sleep(max(0.0, rig.relay.cut_until - time.monotonic()) + 0.05)


def _check_not_bricked(rig, models: dict[str, bytes]) -> str:
    _quiet(rig)
    x = np.random.default_rng(1).integers(-128, 128, (1, 16, 16, 3)).astype(np.int8)
    with SerialLink(rig.port, BAUD, ack_timeout=0.3, retries=10) as link:
        link.hello()
        st = link.status()
        assert st.active_slot is not None, "no active model: bricked"
        sha = st.slots[st.active_slot].sha256
        assert sha in models, f"active model {sha[:12]} is none of the flashed ones"
        info = model_info(link)
        assert info.sha256 == sha
        got, _ = run_with_link(link, [x], info)
    assert got[0].tobytes() == run_litert(models[sha], [x])[0].tobytes()
    return sha


@pytest.mark.slow
def test_flash_survives_injected_faults_and_power_cuts(tmp_path, monkeypatch):
    import edgerun.deploy.flash as flash_mod

    # a noisy line: let the flasher reopen and resume more often than its default allows
    monkeypatch.setattr(flash_mod, "RECONNECTS", 8)
    monkeypatch.setattr(flash_mod, "RECONNECT_DELAY_S", 0.05)
    # a new model for every attempt, so every attempt is a real transfer (not a re-commit of the
    # model the inactive slot still holds)
    candidates = [mcu_small(seed) for seed in range(20, 26)]
    a = candidates[0]
    models = {hashlib.sha256(m).hexdigest(): m for m in candidates}
    rig = Rig(tmp_path, seed=1234, cut_s=(0.1, 0.9))
    rng = random.Random(99)
    outcomes = []
    completed = []
    try:
        flash(a, rig.port, BAUD, max_payload=256, link_options=FAST)
        assert _check_not_bricked(rig, models) == hashlib.sha256(a).hexdigest()
        for attempt in range(4):
            target = candidates[1 + attempt]
            power_cut = attempt == 2
            timer = None
            if power_cut:
                timer = threading.Timer(rng.uniform(0.05, 0.4), rig.fw.kill)
                timer.start()
            # As a user would: a refused flash is simply run again (it resumes from what the
            # device holds). Each try either completes or is refused cleanly; after every try
            # the device must hold a runnable, known model.
            for _try in range(USER_TRIES):
                rig.relay.fault_rate = 0.2
                try:
                    r = flash(target, rig.port, BAUD, max_payload=256, link_options=FAST)
                    outcomes.append(("done", r.resumed_from, r.reconnects, r.retransmissions))
                except LinkError as e:  # DeviceError is a LinkError too: a clean refusal
                    outcomes.append(("refused", str(e)[:80]))
                if timer:
                    timer.join()
                    timer = None
                if not rig.fw.alive():
                    rc = rig.fw.proc.returncode
                    assert rc == -9, f"firmware died by itself (rc {rc}):\n{rig.fw.log.decode()[-3000:]}"
                    rig.restart_firmware()  # power back on: it boots from flash
                active = _check_not_bricked(rig, models)
                if outcomes[-1][0] == "done":
                    assert active == hashlib.sha256(target).hexdigest()
                    break
            completed.append(outcomes[-1][0] == "done")
        faults = rig.relay.total_faults
        assert faults >= 100, (faults, rig.relay.faults, outcomes)
        # every target got onto the device within a few user retries
        assert all(completed), outcomes
        assert any(o[0] == "done" and (o[1] > 0 or o[2] > 0) for o in outcomes) or \
            any(o[0] == "refused" for o in outcomes), outcomes
        # finally, a clean line: the flasher finishes whatever is pending and the device runs it
        _quiet(rig)
        final = candidates[5]
        r = flash(final, rig.port, BAUD, max_payload=256, link_options=FAST)
        assert not r.skipped
        assert _check_not_bricked(rig, models) == hashlib.sha256(final).hexdigest()
        assert flash(final, rig.port, BAUD, link_options=FAST).skipped  # same hash: nothing sent
    finally:
        rig.close()
    log = rig.fw.log
    assert b"AddressSanitizer" not in log and b"runtime error" not in log, log.decode()[-3000:]
    print(f"faults {rig.relay.faults}, outcomes {outcomes}")
