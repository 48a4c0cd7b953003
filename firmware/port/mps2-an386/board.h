/* mps2-an386 (Cortex-M4F) as QEMU emulates it: edgerun/targets.py BOARDS["mps2-an386"]
 * (tests/firmware/test_firmware_protocol.py checks these numbers against it). */
#ifndef ER_BOARD_H
#define ER_BOARD_H
#define ER_BOARD_NAME "mps2-an386"
#define ER_ARENA_BYTES (4u * 1024u * 1024u - 192u * 1024u) /* ram_bytes - firmware_ram_bytes */
#define ER_SLOT_BYTES (1024u * 1024u)                      /* flash_bytes */
#define ER_DEV_MAX_PAYLOAD 4096
/* The board's "flash": 2 meta sectors + 2 slots in code RAM (4 MB at 0x0), above the image. */
#define MPS2_FLASH_BASE 0x00100000u
#define MPS2_SYSCLK_HZ 25000000u
#define MPS2_UART0_BASE 0x40004000u
#define MPS2_UART0_RX_IRQ 0
#endif
