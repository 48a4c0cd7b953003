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
/* No fixed tensor or op count: the model's tables (ER_TENSOR_META_BYTES per tensor,
 * ER_NODE_META_BYTES per op) and its prepared data (multipliers, lookup tables, views) live at
 * the top of the board's arena, its activations below them, so what fits is decided by the
 * board's RAM. Indexes are int16 in the op records, hence the ceiling. */
#define ER_MAX_TENSORS 32767
#define ER_MAX_OPS 32767
#define ER_TENSOR_META_BYTES 96u
#define ER_NODE_META_BYTES 256u
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
