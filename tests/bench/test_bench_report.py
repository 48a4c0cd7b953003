"""The HTML reports of `edgerun bench --report` and `edgerun convert --report`, opened in a real
headless browser (Debian's chromium): no console messages, every plot an inline image, the page
self-contained (no network), and plots that are not blank (their colours are on the screenshot)."""

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.sysfs_fakes import FakeRail, make_powercap, make_thermal, memory_dir

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (tools/install.sh installs it)")

MPL_BLUE = (31, 119, 180)    # matplotlib's first colour: edgerun's series
MPL_ORANGE = (255, 127, 14)  # the second: LiteRT's


def chromium(page: Path, tmp: Path, *mode: str) -> subprocess.CompletedProcess:
    """Headless chromium as root in a container: fresh profile, nothing in the background."""
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
         "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp / 'profile'}", *mode, page.as_uri()],
        capture_output=True, text=True, timeout=120)


def colour_pixels(png: bytes, rgb, tol=12) -> int:
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    return int((np.abs(a - np.array(rgb)).max(axis=-1) <= tol).sum())


def inline_images(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def check_self_contained(html: str) -> None:
    assert "<script" not in html and "<link" not in html
    assert not re.search(r'(src|href)="(https?:)?//', html), "the page must not reach the network"


def check_in_browser(page: Path, tmp: Path, min_blue: int, min_orange: int = 0) -> None:
    shot = tmp / "shot.png"
    r = chromium(page, tmp, "--window-size=1200,4200", "--hide-scrollbars", f"--screenshot={shot}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "CONSOLE" not in r.stderr, [line for line in r.stderr.splitlines() if "CONSOLE" in line]
    png = shot.read_bytes()
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    assert a.std() > 10  # not a uniform page
    assert colour_pixels(png, MPL_BLUE) >= min_blue  # the plots' series are drawn
    assert colour_pixels(png, MPL_ORANGE) >= min_orange
    dom = chromium(page, tmp, "--dump-dom")
    assert dom.returncode == 0 and "CONSOLE" not in dom.stderr
    assert dom.stdout.count("<img") == page.read_text().count("<img")


@pytest.fixture(scope="module")
def bench_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    out = tmp / "bench.html"
    with memory_dir() as sysroot, FakeRail(6.0, energy=make_powercap(sysroot, wrap_uj=5_000_000), wrap=5_000_000):
        make_thermal(sysroot, 52.0)
        env = {**os.environ, "EDGERUN_SYSFS_ROOT": str(sysroot)}
        r = subprocess.run([sys.executable, "-m", "edgerun", "bench", str(ROOT / "models" / "mcu_small.tflite"),
                            "-n", "30", "--min-duration", "0.4", "--idle", "0.3", "--profile", "--report", str(out),
                            "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    return out, json.loads(r.stdout)


def test_bench_report_contents(bench_report):
    out, rep = bench_report
    html = out.read_text()
    check_self_contained(html)
    for h in ("Latency histogram", "Latency over time", "Power over time", "Temperature and clock",
              "Per-op time (edgerun)", "Engines side by side", "Run rules"):
        assert f"<h2>{h}</h2>" in html
    imgs = inline_images(html)
    assert len(imgs) == 6
    from PIL import Image

    for png in imgs:
        a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        assert a.shape[0] > 100 and len(np.unique(a.reshape(-1, 3), axis=0)) > 20  # not blank
    assert "powercap:intel-rapl:0" in html and rep["energy"]["source"] == "powercap:intel-rapl:0"
    assert rep["rules"]["model_sha256"] in html
    assert rep["engines"]["edgerun"]["profile"]
    if rep["rules"]["driver"].startswith("mlperf-loadgen"):  # logs kept beside the report, linked
        assert (out.with_suffix(".mlperf") / "edgerun" / "mlperf_log_summary.txt").exists()
        assert 'href="bench.mlperf/edgerun/mlperf_log_summary.txt"' in html


@pytest.mark.slow
@needs_chromium
def test_bench_report_renders_in_chromium(bench_report, tmp_path):
    out, _ = bench_report
    check_in_browser(out, tmp_path, min_blue=2000, min_orange=500)


@pytest.mark.slow
@needs_chromium
def test_convert_report_renders_in_chromium(tmp_path):
    out = tmp_path / "convert.html"
    r = subprocess.run([sys.executable, "-m", "edgerun", "convert", str(ROOT / "models" / "digits_cnn.onnx"),
                        "-o", str(tmp_path / "d.tflite"), "--calib", str(ROOT / "models" / "calib_digits.npz"),
                        "--report", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    check_self_contained(html)
    assert "<h2>Per-layer SQNR</h2>" in html and len(inline_images(html)) == 1
    check_in_browser(out, tmp_path, min_blue=2000)
