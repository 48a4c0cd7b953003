/* Build-time sizes. A port's board.h sets them from the board profile (edgerun/targets.py). */
#ifndef ER_CONFIG_H
#define ER_CONFIG_H
#include "board.h"
#include "edgerun/protocol.h"

#ifndef ER_DEV_MAX_PAYLOAD
#define ER_DEV_MAX_PAYLOAD ER_MAX_PAYLOAD
#endif
#ifndef ER_FLASH_SECTOR
#define ER_FLASH_SECTOR 4096u
#endif
#ifndef ER_POOL_BYTES
#define ER_POOL_BYTES (32u * 1024u)
#endif
#ifndef ER_MAX_TENSORS
#define ER_MAX_TENSORS 256
#endif
#ifndef ER_MAX_OPS
#define ER_MAX_OPS 192
#endif
/* the most elements one tensor may have (each dimension too): all index arithmetic in the
 * kernels then fits in 32 bits */
#define ER_MAX_ELEMENTS (1u << 26)
/* the most multiply-accumulates (or element visits) a whole model may take per inference; a
 * model above it is refused at COMMIT (no hostile model can hang the board in INVOKE) */
#ifndef ER_MAX_WORK
#define ER_MAX_WORK ((uint64_t)1 << 36)
#endif
/* flash layout: two meta sectors, then slot 0 and slot 1 */
#define ER_META_OFFSET(i) ((uint32_t)(i) * ER_FLASH_SECTOR)
#define ER_SLOT_OFFSET(i) (2u * ER_FLASH_SECTOR + (uint32_t)(i) * ER_SLOT_BYTES)
#define ER_FLASH_TOTAL (2u * ER_FLASH_SECTOR + ER_SLOT_COUNT * ER_SLOT_BYTES)

#if ER_DEV_MAX_PAYLOAD > ER_MAX_PAYLOAD || ER_DEV_MAX_PAYLOAD < ER_MIN_PAYLOAD
#error "ER_DEV_MAX_PAYLOAD out of range"
#endif
#if ER_SLOT_BYTES % ER_FLASH_SECTOR
#error "slot size must be a whole number of flash sectors"
#endif
#endif
