#!/usr/bin/env python3
"""Regenerate models/mcu_small.tflite: the small int8 model the firmware tests flash onto the
emulated Cortex-M4 board (conv / depthwise / pooling / add / fully-connected / softmax, ~22 KB,
random weights from a fixed seed; built by tests/support/firmware_models.py:mcu_small with edgerun's
ModelBuilder). Same seed, same bytes.

    python tools/make_mcu_model.py [--out models/mcu_small.tflite] [--seed 7]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "models" / "mcu_small.tflite")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    sys.path[:0] = [str(ROOT)]
    from tests.support.firmware_models import mcu_small

    data = mcu_small(args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"{args.out}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
