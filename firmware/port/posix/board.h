/* posix port: the mps2-an386 board profile (edgerun/targets.py BOARDS["mps2-an386"]), so the
 * host build accepts exactly the models the emulated board accepts. */
#ifndef ER_BOARD_H
#define ER_BOARD_H
#define ER_BOARD_NAME "posix"
#define ER_ARENA_BYTES (4u * 1024u * 1024u - 192u * 1024u) /* ram_bytes - firmware_ram_bytes */
#define ER_SLOT_BYTES (1024u * 1024u)                     /* flash_bytes */
#define ER_DEV_MAX_PAYLOAD 4096
#endif
