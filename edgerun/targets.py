"""Deployment targets and board profiles: data, in one place.

``edgerun check``, ``edgerun package``, the MCU firmware build and the flasher all read these.
A target string is ``rpi``, ``coral``, ``jetson``, ``mcu[:BOARD]`` (edgerun's firmware on the
board: what it accepts comes from the firmware's capability table,
``edgerun_delegates.mcu.firmware``) or ``tflm[:BOARD]`` (TFLM on the host, sized like BOARD);
each target names the delegates to try in priority order (edgerun's own kernels always take what
is left).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edgerun.errors import UsageError


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    kind: str  # "linux" or "mcu"
    arch: str
    ram_bytes: int  # RAM available to the model arena (MCU) or total RAM (Linux)
    flash_bytes: int  # bytes available for one model slot (MCU) or storage (Linux)
    delegates: tuple[str, ...] = ()
    #: MCU only: bytes of the firmware's own RAM use, to subtract from ram_bytes
    firmware_ram_bytes: int = 0
    extra: dict = field(default_factory=dict)


KiB, MiB, GiB = 1024, 1024 ** 2, 1024 ** 3

BOARDS: dict[str, Board] = {b.name: b for b in [
    # Linux boards
    Board("rpi4", "Raspberry Pi 4 (Cortex-A72, NEON)", "linux", "aarch64", 4 * GiB, 32 * GiB, ("xnnpack",)),
    Board("rpi5", "Raspberry Pi 5 (Cortex-A76, NEON)", "linux", "aarch64", 8 * GiB, 32 * GiB, ("xnnpack",)),
    Board("coral-devboard", "Coral Dev Board (i.MX 8M + Edge TPU)", "linux", "aarch64", 1 * GiB, 8 * GiB,
          ("edgetpu", "xnnpack")),
    Board("coral-usb", "Coral USB Accelerator on a Linux host", "linux", "aarch64", 1 * GiB, 8 * GiB,
          ("edgetpu", "xnnpack")),
    Board("jetson-orin-nano", "Jetson Orin Nano (TensorRT 10)", "linux", "aarch64", 8 * GiB, 64 * GiB,
          ("tensorrt", "xnnpack")),
    Board("jetson-nano", "Jetson Nano (TensorRT 8)", "linux", "aarch64", 4 * GiB, 16 * GiB,
          ("tensorrt", "xnnpack")),
    # Microcontrollers. RAM/flash are what a model slot and its arena may use.
    Board("mps2-an386", "Arm MPS2+ AN386 (Cortex-M4F), emulated by QEMU", "mcu", "cortex-m4",
          4 * MiB, 1 * MiB, ("mcu",), firmware_ram_bytes=192 * KiB,  # firmware/port/mps2-an386/board.h
          extra={"uart_base": 0x40004000, "code_ram": (0x0, 4 * MiB), "sram": (0x20000000, 4 * MiB),
                 "qemu_machine": "mps2-an386"}),
    Board("mps2-an500", "Arm MPS2+ AN500 (Cortex-M7, FPv5), emulated by QEMU", "mcu", "cortex-m7",
          4 * MiB, 1 * MiB, ("mcu",), firmware_ram_bytes=192 * KiB,  # firmware/port/mps2-an500/board.h
          extra={"uart_base": 0x40004000, "code_ram": (0x0, 4 * MiB), "sram": (0x20000000, 4 * MiB),
                 "qemu_machine": "mps2-an500"}),
    Board("mps2-an505", "Arm MPS2+ AN505 (Cortex-M33, FPv5-SP, DSP, TrustZone), emulated by QEMU", "mcu",
          "cortex-m33", 4 * MiB, 1 * MiB, ("mcu",), firmware_ram_bytes=192 * KiB,  # firmware/port/mps2-an505/board.h
          extra={"uart_base": 0x50200000, "code_ram": (0x10000000, 4 * MiB), "sram": (0x38000000, 4 * MiB),
                 "qemu_machine": "mps2-an505"}),
    Board("stm32f746g-disco", "STM32F746G-DISCO (Cortex-M7, 320 KB SRAM, 1 MB flash)", "mcu", "cortex-m7",
          320 * KiB, 512 * KiB, ("mcu",), firmware_ram_bytes=48 * KiB),
    Board("nrf52840", "nRF52840 / Arduino Nano 33 BLE (Cortex-M4F, 256 KB RAM, 1 MB flash)", "mcu",
          "cortex-m4", 256 * KiB, 384 * KiB, ("mcu",), firmware_ram_bytes=40 * KiB),
    Board("rp2040", "Raspberry Pi Pico (Cortex-M0+, 264 KB RAM, 2 MB flash)", "mcu", "cortex-m0plus",
          264 * KiB, 1 * MiB, ("mcu",), firmware_ram_bytes=40 * KiB),
    Board("esp32-s3", "ESP32-S3 (Xtensa LX7, 512 KB SRAM, 8 MB flash)", "mcu", "xtensa",
          512 * KiB, 2 * MiB, ("mcu",), firmware_ram_bytes=96 * KiB),
]}

#: target name -> default board
TARGETS: dict[str, str] = {"rpi": "rpi4", "coral": "coral-devboard", "jetson": "jetson-orin-nano",
                           "mcu": "mps2-an386", "tflm": "mps2-an386", "cpu": ""}


@dataclass(frozen=True)
class Target:
    name: str  # rpi | coral | jetson | mcu | tflm | cpu
    board: Board | None

    @property
    def delegates(self) -> tuple[str, ...]:
        if self.name == "tflm":
            return ("tflm",)
        return self.board.delegates if self.board else ()

    @property
    def firmware(self) -> bool:
        """True for ``mcu:BOARD``: edgerun's firmware runs the model, and
        ``edgerun_delegates.mcu.firmware_accepts(model, board)`` says whether it will load."""
        return self.name == "mcu" and self.board is not None

    @property
    def requires_full_int8(self) -> bool:
        return self.name in ("coral", "mcu", "tflm")

    def __str__(self) -> str:
        return f"{self.name}:{self.board.name}" if self.board else self.name


#: other names a user may give for a target
ALIASES: dict[str, str] = {"edgetpu": "coral"}


def _target_of_board(b: Board) -> str:
    if b.kind == "mcu":
        return "mcu"
    if b.delegates[:1] == ("edgetpu",):
        return "coral"
    if b.delegates[:1] == ("tensorrt",):
        return "jetson"
    return "rpi"


def parse_target(spec: str) -> Target:
    """``rpi`` | ``coral`` | ``jetson`` | ``mcu[:BOARD]`` | any ``target:BOARD`` | a board name -> Target.

    An unknown target or board is a usage error (exit code 2), the same in every command.
    """
    name, _, board = (spec or "").partition(":")
    name = name.strip().lower()
    name = ALIASES.get(name, name)
    if name not in TARGETS and not board and name in BOARDS:  # a bare board name: nrf52840, rpi5
        name, board = _target_of_board(BOARDS[name]), name
    if name not in TARGETS:
        raise UsageError(f"unknown target {spec!r}; choose one of {', '.join(sorted(TARGETS))} "
                         "(optionally target:BOARD, or a board name)")
    board = board.strip() or TARGETS[name]
    if not board:
        return Target(name, None)
    b = BOARDS.get(board)
    if b is None:
        kind = "mcu" if name == "mcu" else "linux"
        choices = sorted(k for k, v in BOARDS.items() if v.kind == kind)
        raise UsageError(f"unknown board {board!r} for target {name}; known: {', '.join(choices)}")
    if (name in ("mcu", "tflm")) != (b.kind == "mcu"):
        raise UsageError(f"board {board!r} is a {b.kind} board, not a {name} target")
    return Target(name, b)
