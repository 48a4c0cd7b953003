"""edgerun flash / devices / run --device against the posix firmware over socket:// (pyserial URL)."""

import json

import pytest
from typer.testing import CliRunner

from edgerun.cli import build_app, main
from tests.support.firmware_harness import tcp_firmware
from tests.support.firmware_models import mcu_small


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    fw, url = tcp_firmware(tmp_path_factory.mktemp("fw"))
    yield url
    fw.stop()


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("m") / "small.tflite"
    p.write_bytes(mcu_small(11))
    return p


def _json(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_flash_then_skip(device, model_file):
    runner = CliRunner()
    app = build_app()
    first = _json(runner.invoke(app, ["flash", str(model_file), "--port", device, "--json"]))
    assert first["skipped"] is False and first["size"] == model_file.stat().st_size
    assert first["board"] == "posix" and first["payload_bytes"] == first["size"]
    again = _json(runner.invoke(app, ["flash", str(model_file), "--port", device, "--json"]))
    assert again["skipped"] is True and again["sha256"] == first["sha256"]
    text = runner.invoke(app, ["flash", str(model_file), "--port", device])
    assert text.exit_code == 0 and "already runs" in text.stdout


def test_devices_probe(device, model_file):
    runner = CliRunner()
    out = _json(runner.invoke(build_app(), ["devices", "--probe", "--port", device, "--json"]))
    mine = [d for d in out if d["port"] == device]
    assert len(mine) == 1 and mine[0]["firmware"]["board"] == "posix"
    assert mine[0]["firmware"]["slot_bytes"] == 1024 * 1024


def test_bundle_run_device_verify(device, tmp_path, capsys):
    from edgerun.bundle import write_bundle

    bundle = write_bundle(mcu_small(12), tmp_path / "small.bundle", target="mcu")
    runner = CliRunner()
    # the trust policy of edgerun.load holds for serial links too: an unsigned bundle is refused
    for cmd in (["run", str(bundle), "--device", device, "--verify"], ["flash", str(bundle), "--port", device]):
        rc = main(cmd + ["--json"])  # main() is the error boundary that maps errors to exit codes
        out = json.loads(capsys.readouterr().out)
        assert rc == 5 and out["error"] == "BundleIntegrityError" and "not signed" in out["message"]
    rep = _json(runner.invoke(build_app(), ["run", str(bundle), "--device", device, "--verify", "--json",
                                            "--allow-unsigned"]))
    assert rep["ok"] is True and rep["reference"] == "golden" and len(rep["cases"]) >= 1
    assert all(o["identical"] for c in rep["cases"] for o in c["outputs"])
    # the device plans its own arena; the bundle records the host planner's figure
    assert rep["device_arena_bytes"] > 0 and rep["host_arena_bytes"] > 0
    # and flashing the bundle itself: the device already holds that model
    rep = _json(runner.invoke(build_app(), ["flash", str(bundle), "--port", device, "--json", "--allow-unsigned"]))
    assert rep["skipped"] is True


def test_unreachable_port_is_one_clean_error(capsys, model_file):
    rc = main(["flash", str(model_file), "--port", "socket://127.0.0.1:1", "--json"])
    assert rc != 0
    out = json.loads(capsys.readouterr().out)
    assert out["error"] == "LinkError" and "127.0.0.1:1" in out["message"]


def test_mcu_delegate_serial_backend(device):
    import numpy as np
    from edgerun_delegates.mcu.serial_backend import run_serial

    from edgerun.testing import run_litert

    model = mcu_small(13)
    x = np.random.default_rng(3).integers(-128, 128, (1, 16, 16, 3)).astype(np.int8)
    got = run_serial(device, model, [x])  # flashes, then runs
    assert got[0].tobytes() == run_litert(model, [x])[0].tobytes()
    from edgerun.deploy.serial_link import SerialLink

    with SerialLink(device) as link:
        link.hello()
        before = link.status()
    got = run_serial(device, model, [x])  # same model: no new transfer
    with SerialLink(device) as link:
        link.hello()
        assert link.status().to_dict() == before.to_dict()
    assert got[0].tobytes() == run_litert(model, [x])[0].tobytes()
