"""One protocol definition: firmware/include/edgerun/protocol.h is canonical and
edgerun/deploy/protocol.py must mirror every #define; board headers follow edgerun/targets.py."""

import re
import struct

import pytest

from edgerun.deploy import protocol as P
from edgerun.schema.tflite import BUILTIN_OPERATOR_NAMES
from edgerun.targets import BOARDS
from tests.support.firmware_harness import FIRMWARE

DEFINE = re.compile(r"^\s*#define\s+(ER_[A-Z0-9_]+)\s+(.+?)\s*(?:/\*.*)?$")


def _defines(path):
    out = {}
    for line in path.read_text().splitlines():
        m = DEFINE.match(line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def _eval(expr, env):
    expr = re.sub(r"(\d+)u\b", r"\1", expr)
    for k, v in env.items():
        expr = re.sub(rf"\b{k}\b", str(v), expr)
    return eval(expr, {"__builtins__": {}})


def test_protocol_h_matches_protocol_py():
    defs = _defines(FIRMWARE / "include" / "edgerun" / "protocol.h")
    assert len(defs) > 60
    missing, wrong = [], []
    for name, expr in defs.items():
        if name == "EDGERUN_PROTOCOL_H":
            continue
        py = name[3:]
        if not hasattr(P, py):
            missing.append(py)
            continue
        if _eval(expr, {}) != getattr(P, py):
            wrong.append((name, expr, getattr(P, py)))
    assert not missing, f"protocol.py lacks {missing}"
    assert not wrong, f"protocol.py disagrees with protocol.h: {wrong}"
    # and nothing extra in Python that the header does not define
    py_consts = {k for k, v in vars(P).items() if k.isupper() and isinstance(v, int) and not k.startswith("_")}
    assert py_consts <= {n[3:] for n in defs}, py_consts - {n[3:] for n in defs}


def test_record_layouts_match_sizes():
    assert P.HELLO.size == P.HELLO_SIZE and P.IO_RECORD.size == P.IO_RECORD_SIZE
    assert P.STATUS_SLOT.size == P.STATUS_SLOT_SIZE and P.BEGIN.size == P.BEGIN_SIZE


def test_frame_encoding_and_resync():
    f = P.encode(P.CMD_DATA, 0x1234, b"hello")
    assert f[:2] == bytes((P.SOF0, P.SOF1)) and len(f) == P.FRAME_OVERHEAD + 5
    assert struct.unpack_from("<I", f, len(f) - 4)[0] == P.crc32(f[2:-4])
    p = P.FrameParser()
    bad = bytearray(f)
    bad[9] ^= 1
    frames = p.feed(b"\x00\xa5\x11" + bytes(bad) + f + b"\xa5\x5a\x01\x00")
    assert [(x.cmd, x.seq, x.payload) for x in frames] == [(P.CMD_DATA, 0x1234, b"hello")]
    assert p.bad_crc == 1


def test_op_names_table_matches_schema():
    text = (FIRMWARE / "src" / "op_names.c").read_text()
    names = re.findall(r'^\s*"([A-Z0-9_]*)",$', text, re.MULTILINE)
    assert len(names) == max(BUILTIN_OPERATOR_NAMES) + 1
    for code, name in enumerate(names):
        assert name == BUILTIN_OPERATOR_NAMES.get(code, ""), code


@pytest.mark.parametrize("port", ["posix", "mps2-an386", "mps2-an500", "mps2-an505"])
def test_board_headers_follow_targets(port):
    board = BOARDS["mps2-an386" if port == "posix" else port]  # the posix port simulates mps2-an386
    env = {}
    defs = _defines(FIRMWARE / "port" / port / "board.h")
    arena = _eval(defs["ER_ARENA_BYTES"], env)
    slot = _eval(defs["ER_SLOT_BYTES"], env)
    assert arena == board.ram_bytes - board.firmware_ram_bytes
    assert slot == board.flash_bytes
    if port.startswith("mps2"):
        text = (FIRMWARE / "port" / port / "board.h").read_text()
        base = re.search(r"#define MPS2_UART0_BASE (0x[0-9A-Fa-f]+)u", text).group(1)
        assert int(base, 16) == board.extra["uart_base"]
