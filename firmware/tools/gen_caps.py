"""Generate delegates/mcu/firmware_caps.json from the firmware's sources: the op table in
src/caps.h, the limits in src/config.h, src/model.h, src/caps.h and include/edgerun/protocol.h,
and every port's board.h (arena and slot sizes). The host reads only that JSON, so what
`edgerun check/package/flash --target mcu:BOARD` predict is what COMMIT enforces;
tests/firmware/test_firmware_caps.py fails when the JSON is stale.

    python3 firmware/tools/gen_caps.py            # rewrite the JSON
    python3 firmware/tools/gen_caps.py --check    # exit 1 if it is stale
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

FW = Path(__file__).resolve().parents[1]
OUT = FW.parent / "delegates" / "mcu" / "firmware_caps.json"
DEFINE = re.compile(r"^\s*#define\s+(ER_[A-Z0-9_]+)\s+([^/]+?)\s*(?:/\*.*)?$")
OP = re.compile(r'X\((\d+),\s*([A-Z0-9_]+),\s*"([^"]*)"\)')
#: limits the host needs, and the file each comes from
LIMITS = {"ER_MAX_TENSORS": "src/config.h", "ER_MAX_OPS": "src/config.h", "ER_TENSOR_META_BYTES": "src/config.h", "ER_NODE_META_BYTES": "src/config.h",
          "ER_MAX_ELEMENTS": "src/config.h", "ER_MAX_WORK": "src/config.h", "ER_MAX_OP_INPUTS": "src/model.h",
          "ER_MAX_OP_OUTPUTS": "src/model.h",
          "ER_MEAN_MAX_OUTPUTS": "src/caps.h", "ER_MAX_DIMS": "include/edgerun/protocol.h",
          "ER_MAX_IO": "include/edgerun/protocol.h"}
#: firmware port directory -> the board profile (edgerun/targets.py name) it builds for
PORT_BOARDS = {"mps2-an386": "mps2-an386", "posix": "mps2-an386", "mps2-an500": "mps2-an500",
               "mps2-an505": "mps2-an505"}


def defines(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        m = DEFINE.match(line)
        if m and "(" not in m.group(1):
            out[m.group(1)] = m.group(2).strip()
    return out


def c_eval(expr: str) -> int:
    e = re.sub(r"\(\s*u?int64_t\s*\)", "", expr)
    e = re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)[uU]?[lL]*\b", r"\1", e)
    if not re.fullmatch(r"[0-9xA-Fa-f\s()+\-*/<>]+", e):
        raise ValueError(f"cannot evaluate C expression {expr!r}")
    return int(eval(e.replace("/", "//"), {"__builtins__": {}}))  # digits and operators only


def generate() -> dict:
    ops = {}
    for code, name, types in OP.findall((FW / "src" / "caps.h").read_text()):
        ops[name] = {"code": int(code), "types": [p.split(">") for p in types.split("|")]}
    limits = {}
    for name, rel in LIMITS.items():
        d = defines(FW / rel)
        limits[name[3:].lower()] = c_eval(d[name])
    boards = {}
    for port, board in PORT_BOARDS.items():
        d = defines(FW / "port" / port / "board.h")
        entry = {"arena_bytes": c_eval(d["ER_ARENA_BYTES"]), "slot_bytes": c_eval(d["ER_SLOT_BYTES"]),
                 "max_payload": c_eval(d.get("ER_DEV_MAX_PAYLOAD", "4096"))}
        if board in boards and boards[board]["arena_bytes"] != entry["arena_bytes"]:
            raise ValueError(f"ports disagree on {board}'s arena")
        boards.setdefault(board, dict(entry, ports=[]))["ports"].append(port)
    return {"generated_by": "firmware/tools/gen_caps.py", "ops": ops, "limits": limits, "boards": boards}


def render() -> str:
    return json.dumps(generate(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        ok = OUT.exists() and OUT.read_text() == text
        print(f"{OUT}: {'up to date' if ok else 'STALE (run python3 firmware/tools/gen_caps.py)'}")
        sys.exit(0 if ok else 1)
    OUT.write_text(text)
    print(f"wrote {OUT}")
