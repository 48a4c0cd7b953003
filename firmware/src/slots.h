/* A/B model slots in the board's flash, and the record that names the active one.
 *
 * Two meta sectors hold copies of a small record {generation, active slot, per-slot valid flag,
 * size, sha256} with a CRC. A new record goes to the sector not holding the newest one (erase,
 * then write), so a write torn at any byte leaves the previous record newest-with-a-good-CRC:
 * the switch of the active slot is atomic. Data is only ever written to a slot that is neither
 * active nor in the newest record as valid, and only through er_slot_* with checked ranges. */
#ifndef ER_SLOTS_H
#define ER_SLOTS_H
#include <stdint.h>

#include "config.h"

typedef struct {
    uint8_t state;      /* ER_SLOT_EMPTY / RECEIVING / VERIFIED */
    uint32_t size;      /* bytes of the model (RECEIVING: announced by BEGIN) */
    uint32_t received;  /* contiguous bytes written from offset 0 */
    uint8_t sha[ER_SHA256_SIZE];
} er_slot;

typedef struct {
    er_slot slot[ER_SLOT_COUNT];
    uint8_t active;      /* ER_SLOT_NONE when no model is active */
    uint32_t generation; /* of the newest meta record */
} er_slots;

/* Read the newest good meta record, re-hash the slots it names valid, pick the active model
 * (falling back to the other valid slot when the active one no longer matches its hash). */
void er_slots_init(er_slots *s);
const uint8_t *er_slot_data(uint8_t slot);
/* Start or resume a transfer into `slot` (must not be active). Returns ER_OK or an error. */
int er_slot_begin(er_slots *s, uint8_t slot, uint32_t size, const uint8_t sha[32], int *resumed);
int er_slot_write(er_slots *s, uint8_t slot, uint32_t offset, const uint8_t *data, uint32_t len);
/* Hash the received bytes; on a match the slot becomes VERIFIED and is recorded (not active). */
int er_slot_finish(er_slots *s, uint8_t slot, const uint8_t sha[32], uint8_t out[32]);
/* Record `slot` as active (it must be VERIFIED). */
int er_slot_activate(er_slots *s, uint8_t slot);
#endif
