"""tools/fetch_models.py, the pinned fetcher of MLPerf Tiny's reference models, against a real HTTP
server on loopback (http.server) laid out as the repository: files that match their pin are
cached by an atomic rename, a file whose bytes or size differ is refused and nothing is cached,
a damaged cache entry is fetched again, an unreachable or 404 source is one line, and the
command-line tool exits 1 with the reasons. The pinned hashes themselves are checked against the
real files where a copy is at hand (the cache or a git mirror of mlcommons/tiny)."""

import functools
import hashlib
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.firmware_models import MLPERF_TINY_DIR, fetch_models_module

fm = fetch_models_module()
TOOL = Path(fm.__file__)
#: a git directory of mlcommons/tiny, where one is at hand
MIRROR = Path(os.environ.get("EDGERUN_MLPERF_TINY_GIT", "/work/.mirror/mlcommons+tiny/repo"))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    """(document root laid out as the repository, base URL) of a threaded HTTP server on loopback."""
    root = tmp_path / "srv"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    t.join(5)


@pytest.fixture
def pinned(monkeypatch):
    """A synthetic pinned file (the pins are data: the same code judges the real ones)."""
    data = bytes(range(256)) * 40 + b"TFL3"
    name = "synthetic_int8.tflite"
    monkeypatch.setitem(fm.FILES, name, ("benchmark/training/x/trained_models/" + name, len(data),
                                         hashlib.sha256(data).hexdigest()))
    return name, data


def _serve(root: Path, name: str, data: bytes) -> None:
    p = root / fm.FILES[name][0]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_fetch_caches_a_pinned_file_atomically(server, pinned, tmp_path):
    root, url = server
    name, data = pinned
    _serve(root, name, data)
    cache = tmp_path / "cache"
    got = fm.fetch([name], cache=cache, base_url=url)
    assert got[name] == cache / name and got[name].read_bytes() == data
    assert _leftovers(cache) == [name]  # no temporary file left behind
    (root / fm.FILES[name][0]).unlink()  # the server no longer has it: the cache answers
    assert fm.fetch([name], cache=cache, base_url=url)[name].read_bytes() == data


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "longer"])
def test_a_file_that_differs_from_its_pin_is_refused_and_nothing_cached(server, pinned, tmp_path, damage):
    root, url = server
    name, data = pinned
    bad = {"flipped byte": data[:100] + bytes([data[100] ^ 1]) + data[101:], "truncated": data[:-1],
           "longer": data + b"\0"}[damage]
    _serve(root, name, bad)
    cache = tmp_path / "cache"
    with pytest.raises(fm.FetchError, match="refused") as e:
        fm.fetch([name], cache=cache, base_url=url)
    msg = str(e.value)
    assert "\n" not in msg and url in msg and "nothing cached" in msg
    assert ("SHA-256" in msg) if damage == "flipped byte" else ("bytes where" in msg)
    assert _leftovers(cache) == []


def test_a_damaged_cache_entry_is_fetched_again(server, pinned, tmp_path):
    root, url = server
    name, data = pinned
    _serve(root, name, data)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / name).write_bytes(b"not the model")
    assert fm.cached(name, cache) is None
    assert fm.fetch([name], cache=cache, base_url=url)[name].read_bytes() == data


def test_missing_and_unreachable_sources_are_one_line(server, pinned, tmp_path):
    _root, url = server
    name, _data = pinned
    with pytest.raises(fm.FetchError, match="HTTP 404") as e:
        fm.fetch([name], cache=tmp_path / "c", base_url=url)
    assert "\n" not in str(e.value)
    with pytest.raises(fm.FetchError, match="127.0.0.1:1") as e:
        fm.fetch([name], cache=tmp_path / "c", base_url="http://127.0.0.1:1", timeout=5)
    assert "\n" not in str(e.value)
    with pytest.raises(fm.FetchError, match="not a pinned MLPerf Tiny file"):
        fm.fetch(["model.tflite"], cache=tmp_path / "c")
    assert _leftovers(tmp_path / "c") == []


def test_command_line_exit_status(server, tmp_path):
    _root, url = server
    r = subprocess.run([sys.executable, str(TOOL), "--int8", "--cache", str(tmp_path / "c"), "--base-url", url],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 5 and all(ln.startswith("FAIL ") and "HTTP 404" in ln for ln in lines), lines
    r = subprocess.run([sys.executable, str(TOOL), "--bogus"], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 2


def _real_bytes(name: str) -> bytes | None:
    """The real file from the user's cache or a local git mirror, when one is here."""
    p = MLPERF_TINY_DIR / name
    if p.exists():
        return p.read_bytes()
    if (MIRROR / "HEAD").exists():
        r = subprocess.run(["git", "--git-dir", str(MIRROR), "show", f"{fm.COMMIT}:{fm.FILES[name][0]}"],
                           capture_output=True, check=False)
        if r.returncode == 0:
            return r.stdout
    return None


def test_the_real_models_match_their_pins_over_http(server, tmp_path):
    """All pinned files (models and runner), served from a copy at hand, fetch and verify; a copy that is not the
    pinned one would be refused (this is what CI does against raw.githubusercontent.com)."""
    root, url = server
    have = {n: _real_bytes(n) for n in fm.FILES}
    missing = [n for n, b in have.items() if b is None]
    if missing:
        pytest.skip(f"no local copy of {', '.join(missing)} (cache {MLPERF_TINY_DIR} or a mlcommons/tiny mirror)")
    for n, b in have.items():
        _serve(root, n, b)
    cache = tmp_path / "cache"
    got = fm.fetch(cache=cache, base_url=url)
    assert sorted(got) == sorted(fm.FILES)
    for n, p in got.items():
        assert hashlib.sha256(p.read_bytes()).hexdigest() == fm.FILES[n][2]


def test_git_mirror_source(tmp_path):
    if not (MIRROR / "HEAD").exists():
        pytest.skip(f"no mlcommons/tiny mirror at {MIRROR}")
    got = fm.fetch(list(fm.INT8), cache=tmp_path / "c", git=MIRROR)
    assert sorted(p.name for p in got.values()) == sorted(fm.INT8)
