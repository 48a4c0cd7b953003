"""Fuzzing the bundle reader: mutated bundles raise only BundleError, never crash, never write
outside the extraction directory.

Two families of mutations: raw byte mutations of a signed bundle (flips, overwrites, inserts,
deletes, truncations, splices), which the hashes catch early; and hash-consistent mutations
(member contents or manifest text changed, then re-packed with correct hashes and no
signature), which get past the hashes and exercise the manifest parser and validator.
"""

import hashlib
import json
import os
import random
import struct

import pytest

import edgerun
from edgerun.bundle import archive, read_bundle, signing, write_bundle
from edgerun.errors import BundleError, EdgerunError
from edgerun.ir import ModelBuilder

N_RAW = 2500
N_CONSISTENT = 1500


def _model() -> bytes:
    b = ModelBuilder()
    x = b.input("x", (1, 3, 3, 2), "int8", (0.1, 2))
    y = b.tensor("y", (1, 3, 3, 2), "int8", (0.1, 2))
    b.op("RELU", [x], [y])
    b.output(y)
    return b.to_bytes()


def _pack(members) -> bytes:
    out = archive.MAGIC + struct.pack("<II", 1, len(members))
    for name, data in members:
        n = name.encode("utf-8", "surrogateescape")
        out += struct.pack("<H", len(n)) + n + struct.pack("<Q", len(data)) + hashlib.sha256(data).digest() + data
    return out


def _unpack(blob):
    return [(n, bytes(d)) for n, d in archive.unpack(blob)]


def _mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
        kind = rng.randrange(7)
        i = rng.randrange(len(b)) if b else 0
        if kind == 0 and b:
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1 and b:
            b[i] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        elif kind == 2:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 8, 100])))
        elif kind == 3 and b:
            del b[i:i + rng.choice([1, 4, 32, 1000])]
        elif kind == 4:
            del b[rng.randrange(len(b) + 1):]
        elif kind == 5 and b:  # overwrite a length field with an extreme integer
            fmt = rng.choice(["<H", "<I", "<Q"])
            val = rng.choice([0, 1, 2 ** 15, 2 ** 31, 2 ** 32 - 1, 2 ** 63, 2 ** 64 - 1])
            val &= (1 << (8 * struct.calcsize(fmt))) - 1
            raw = struct.pack(fmt, val)
            b[i:i + len(raw)] = raw
        elif kind == 6 and b:  # duplicate a chunk elsewhere
            j = rng.randrange(len(b))
            b[j:j] = b[i:i + rng.choice([16, 64, 300])]
    return bytes(b)


_JSON_VALUES = [None, True, 0, -1, 2 ** 63, 1e308, "", "../../x", "/etc/passwd", "model.tflite", [], {}, [[[]]],
                "A" * 5000, [1, 2, 3], {"a": 1}, 0.5, -0.0, "float32", "NCHW", "2.0"]


def _mutate_json(rng: random.Random, obj):
    """Replace, delete or add one value somewhere in the manifest."""
    path = []
    node = obj
    while isinstance(node, (dict, list)) and node and rng.random() < 0.75:
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path.append((node, key))
        node = node[key]
    if not path:
        obj[rng.choice(["x", "format_version", "golden"])] = rng.choice(_JSON_VALUES)
        return obj
    parent, key = path[-1]
    r = rng.random()
    if r < 0.6:
        parent[key] = rng.choice(_JSON_VALUES)
    elif r < 0.8:
        del parent[key]
    elif isinstance(parent, dict):
        parent[rng.choice(["extra", "../x", "name"])] = rng.choice(_JSON_VALUES)
    else:
        parent.append(rng.choice(_JSON_VALUES))
    return obj


def _consistent_mutation(rng: random.Random, members) -> bytes:
    ms = [list(m) for m in members if m[0] != "signature.ed25519"]
    r = rng.random()
    if r < 0.6:  # edit the manifest's JSON structure, re-encode canonically
        from edgerun.bundle import manifest as mf

        man = json.loads(ms[0][1])
        for _ in range(rng.choice([1, 1, 2, 3])):
            man = _mutate_json(rng, man)
        try:
            ms[0][1] = mf.dumps(man)
        except BundleError:
            ms[0][1] = json.dumps(man).encode()
    elif r < 0.75:  # edit the manifest text itself
        ms[0][1] = _mutate_bytes(rng, ms[0][1])
    elif r < 0.9:  # edit a payload member (manifest hashes no longer match)
        k = rng.randrange(1, len(ms))
        ms[k][1] = _mutate_bytes(rng, ms[k][1])
    else:  # rename, drop or add members
        choice = rng.randrange(3)
        if choice == 0:
            k = rng.randrange(len(ms))
            ms[k][0] = rng.choice(["../model.tflite", "model.tflite", "/abs", "a/b", "golden.bin", "x" * 70,
                                   "manifest.json", "ok-name.bin"])
        elif choice == 1 and len(ms) > 1:
            del ms[rng.randrange(len(ms))]
        else:
            ms.insert(rng.randrange(len(ms) + 1), ["extra.bin", rng.randbytes(rng.randrange(64))])
    return _pack([tuple(m) for m in ms])


@pytest.fixture(scope="module")
def seed_bundle(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzzseed")
    priv, _ = signing.generate_keypair()
    (d / "k.key").write_bytes(priv)
    p = write_bundle(_model(), d / "seed.bundle", target="rpi", labels=["a", "b"], sign_key=d / "k.key",
                     preprocessing={"scale": 0.5})
    return p.read_bytes()


def _snapshot(root):
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            out.add(os.path.join(dirpath, n))
    return out


def _check(blob: bytes, root, i: int, counts: dict) -> None:
    target = root / "t" / str(i)
    try:
        b = read_bundle(blob, extract_to=target, allow_unsigned=True)
    except BundleError:
        counts["refused"] += 1
        assert not target.exists() or not os.listdir(target), "files written for a refused bundle"
        return
    except Exception as e:  # anything else is a crash of the reader
        counts["crashed"] += 1
        raise AssertionError(f"mutation {i}: {type(e).__name__}: {e}") from e
    counts["accepted"] += 1
    assert sorted(os.listdir(target)) == sorted(n for n, _ in archive.unpack(blob))
    # an accepted bundle must also load or fail with an edgerun error, never crash
    try:
        m = edgerun.load(blob, allow_unsigned=True)
        res = m.verify()
        assert set(res["max_abs_diff"]) == {o["name"] for o in m.outputs}
        m.predict(None) if m.bundle.golden else None
    except EdgerunError:
        counts["load_refused"] = counts.get("load_refused", 0) + 1
    assert b.manifest["format"] == "edgerun.bundle"


def test_fuzz_raw_mutations(seed_bundle, tmp_path):
    rng = random.Random(1234)
    sandbox = tmp_path / "sandbox"
    (sandbox / "t").mkdir(parents=True)
    before = _snapshot(tmp_path)
    counts = {"refused": 0, "accepted": 0, "crashed": 0}
    for i in range(N_RAW):
        blob = _mutate_bytes(rng, seed_bundle)
        if blob == seed_bundle:
            continue
        _check(blob, sandbox, i, counts)
    assert counts["crashed"] == 0
    assert counts["accepted"] == 0, "a byte-level change to a signed bundle was accepted"
    outside = {p for p in _snapshot(tmp_path) - before if not p.startswith(str(sandbox / "t"))}
    assert not outside


def test_fuzz_hash_consistent_mutations(seed_bundle, tmp_path):
    rng = random.Random(99)
    members = _unpack(seed_bundle)
    sandbox = tmp_path / "sandbox"
    (sandbox / "t").mkdir(parents=True)
    before = _snapshot(tmp_path)
    counts = {"refused": 0, "accepted": 0, "crashed": 0}
    for i in range(N_CONSISTENT):
        _check(_consistent_mutation(rng, members), sandbox, i, counts)
    assert counts["crashed"] == 0
    assert counts["refused"] > 0.9 * N_CONSISTENT
    outside = {p for p in _snapshot(tmp_path) - before if not p.startswith(str(sandbox / "t"))}
    assert not outside
    print(f"hash-consistent mutations: {counts}")
