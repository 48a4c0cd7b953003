"""MLPerf Tiny's reference int8 models (visual wake words, image classification, keyword
spotting, anomaly detection, streaming wake word) on the posix firmware (ASan/UBSan): the host's
prediction (firmware_accepts, a -1 batch in shape_signature included) says they load, COMMIT
agrees, the arena COMMIT reports is the predicted one, and the outputs are LiteRT's reference
bytes. The Cortex-M4 run under QEMU is in test_firmware_qemu.py. The models are fetched by
tools/fetch_models.py (pinned SHA-256) into ~/.cache/edgerun/mlperf_tiny; the tests skip with the
fetcher's reason where they can be neither found there nor downloaded."""

import pytest
from edgerun_delegates.mcu.firmware import firmware_accepts, firmware_arena_bytes

from edgerun.deploy.flash import flash, model_info, run_with_link, verify_on_device
from edgerun.deploy.serial_link import SerialLink
from edgerun.litert import make_interpreter
from edgerun.schema.reader import read_model
from edgerun.testing import random_inputs, run_litert
from tests.support.firmware_harness import tcp_firmware
from tests.support.firmware_models import MLPERF_TINY, mlperf_tiny_models  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    fw, url = tcp_firmware(tmp_path_factory.mktemp("fw"))
    link = SerialLink(url)
    link.hello()
    yield link, url
    link.close()
    fw.stop()
    assert b"ERROR: AddressSanitizer" not in fw.log and b"runtime error" not in fw.log, fw.log.decode()[-3000:]


@pytest.mark.parametrize("name", sorted(MLPERF_TINY))
def test_mlperf_tiny_bit_exact_on_the_firmware(device, mlperf_tiny_models, name):  # noqa: F811
    model = mlperf_tiny_models[name]
    link, url = device
    sig = [t.shape_signature for t in read_model(model).main.tensors if t.shape_signature]
    assert firmware_accepts(model, "mps2-an386") == []
    r = flash(model, url, link=link)
    assert r.size == len(model)
    info = model_info(link)
    assert info.arena_bytes == firmware_arena_bytes(model)
    details = make_interpreter(model, reference=True).get_input_details()
    for seed in range(2):
        xs = random_inputs(details, seed=seed)
        got, _ = run_with_link(link, xs, info)
        want = run_litert(model, xs, reference=True)
        assert len(got) == len(want) and all(g.tobytes() == w.tobytes() for g, w in zip(got, want)), name
    assert verify_on_device(model, url, link=link, flash_first=False)["ok"]
    if name in ("kws", "vww", "ic"):  # these carry a batch of -1 in shape_signature
        assert any(s[0] == -1 for s in sig)
