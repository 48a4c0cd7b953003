/* mps2-an505 (Cortex-M33 with FPv5-SP and the DSP extension, ARMv8-M TrustZone) as QEMU
 * emulates it: edgerun/targets.py BOARDS["mps2-an505"] (tests/firmware/test_firmware_protocol.py
 * checks these numbers against it). The firmware runs in the Secure state, where the core boots
 * (no SAU set up), and so uses the Secure aliases the IoT Kit maps: code in SSRAM1 at 0x10000000
 * (the initial Secure VTOR), data in SSRAM2+3 at 0x38000000, peripherals at 0x5xxxxxxx. */
#ifndef ER_BOARD_H
#define ER_BOARD_H
#define ER_BOARD_NAME "mps2-an505"
#define ER_ARENA_BYTES (4u * 1024u * 1024u - 192u * 1024u) /* ram_bytes - firmware_ram_bytes */
#define ER_SLOT_BYTES (1024u * 1024u)                      /* flash_bytes */
#define ER_DEV_MAX_PAYLOAD 4096
/* The board's "flash": 2 meta sectors + 2 slots in SSRAM1 (4 MB at 0x10000000), above the image. */
#define MPS2_FLASH_BASE 0x10100000u
#define MPS2_SYSCLK_HZ 20000000u
#define MPS2_UART0_BASE 0x50200000u
/* the FPGA's expansion interrupts start at the IoT Kit's IRQ 32; UART0 RX is the first */
#define MPS2_UART0_RX_IRQ 32
#define MPS2_NUM_IRQ 64
#define MPS2_FPGAIO_BASE 0x50302000u
#endif
