"""Writes the fuzzers' seed corpus (checked in): firmware/fuzz/corpus/model/ holds small valid
models for every supported op plus hostile shapes, firmware/fuzz/corpus/frames/ holds scripts for
fuzz_frames.c (a whole flash-and-run session, single commands, raw noise).

    python3 firmware/fuzz/make_corpus.py
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from tests.support.firmware_models import mcu_small, op_models, sum_models, unary_int8  # noqa: E402

from edgerun.deploy import protocol as P  # noqa: E402
from edgerun.ir import ModelBuilder  # noqa: E402


def models() -> dict[str, bytes]:
    out = {f"op_{k}": v for k, v in op_models(0).items()}
    out.update({f"op_{k}": v for k, v in sum_models().items()})
    out["mcu_small"] = mcu_small(7)
    out["relu_small"] = unary_int8("RELU", (1, 8))
    out["hostile_pool_2e72"] = unary_int8("MAX_POOL_2D", (1 << 24, 1 << 24, 1 << 24, 1), padding=1, stride_w=1,
                                      stride_h=1, filter_width=1, filter_height=1)
    out["hostile_relu_2e64"] = unary_int8("RELU", (1 << 16,) * 4)
    b = ModelBuilder()
    x = b.input("x", (1 << 21, 1), "int8", (0.1, 0))
    w = b.const("w", np.ones((2048, 1), np.int8), "int8", (0.01, 0))
    y = b.tensor("y", (0,), "int8", (0.1, 0))
    b.op("FULLY_CONNECTED", [x, w], [y])
    b.output(y)
    out["hostile_fc_wrap"] = b.to_bytes()
    return out


def _rec(cmd: int, payload: bytes = b"", flags: int = 0) -> bytes:
    return struct.pack("<BBH", cmd, flags, len(payload)) + payload


def frame_scripts() -> dict[str, bytes]:
    model = unary_int8("RELU", (1, 8))
    sha = hashlib.sha256(model).digest()
    session = [_rec(P.CMD_HELLO), _rec(P.CMD_STATUS), _rec(P.CMD_BEGIN, P.BEGIN.pack(len(model), sha, P.SLOT_NONE))]
    session += [_rec(P.CMD_DATA, P.DATA_HEADER.pack(off) + model[off:off + 256]) for off in range(0, len(model), 256)]
    session += [_rec(P.CMD_END, sha), _rec(P.CMD_COMMIT, P.COMMIT.pack(0, sha)), _rec(P.CMD_MODEL_INFO),
                _rec(P.CMD_SET_INPUT, P.IO_HEADER.pack(0, 0) + bytes(range(8))), _rec(P.CMD_INVOKE),
                _rec(P.CMD_GET_OUTPUT, P.GET_OUTPUT.pack(0, 0, 8)), _rec(P.CMD_PROFILE, P.PROFILE.pack(0)),
                _rec(P.CMD_ROLLBACK), _rec(P.CMD_RESET),
                _rec(P.CMD_STATUS)]
    out = {"session": b"\x00" + b"".join(session)}
    for cmd, name in P.COMMAND_NAMES.items():
        if cmd != P.CMD_EXIT:
            out[f"cmd_{name.lower()}"] = b"\x00" + _rec(cmd, bytes(8))
    out["raw_session"] = b"\x01" + b"".join(P.encode(c, i, b"") for i, c in enumerate((P.CMD_HELLO, P.CMD_STATUS)))
    out["raw_noise"] = b"\x01" + bytes([0xA5, 0x5A, 0xA5, 0x00, 0xFF, 0x5A]) * 8
    # flash over frames, switch to the MLPerf Tiny / EEMBC text mode, drive it, come back
    flash_frames = [P.encode(r[0], i + 1, r[4:]) for i, r in enumerate(session[:session.index(_rec(P.CMD_MODEL_INFO))])]
    text = (b"name%profile%db load 8%db 0001020304%db 05060708%infer 2 1%results%bogus%db zz%infer 0%"
            b"db load 99%%edgerun%")
    out["raw_eembc"] = b"\x01" + b"".join(flash_frames) + P.encode(P.CMD_EEMBC, 200) + text + P.encode(P.CMD_HELLO, 201)
    return out


def main() -> None:
    for sub, items in (("model", models()), ("frames", frame_scripts())):
        d = HERE / "corpus" / sub
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        for name, data in sorted(items.items()):
            (d / name).write_bytes(data)
        print(f"{d.relative_to(ROOT)}: {len(items)} files, {sum(map(len, items.values()))} bytes")


if __name__ == "__main__":
    main()
