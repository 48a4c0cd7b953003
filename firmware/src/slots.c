#include "slots.h"

#include <string.h>

#include "crc32.h"
#include "edgerun/port.h"
#include "frame.h"
#include "sha256.h"

#define META_MAGIC 0x544D5245u /* "ERMT" */
/* u32 magic, u32 generation, u8 active, u8 valid[2], u8 0, u32 size[2], u8 sha[2][32], u32 crc */
#define META_SIZE (4 + 4 + 4 + 8 + 64 + 4)

static int meta_read(uint32_t i, uint32_t *gen, uint8_t *active, uint8_t valid[2], uint32_t size[2],
                     uint8_t sha[2][32]) {
    const uint8_t *p = port_flash_map() + ER_META_OFFSET(i);
    if (er_rd32(p) != META_MAGIC) return 0;
    if (er_crc32(0, p, META_SIZE - 4) != er_rd32(p + META_SIZE - 4)) return 0;
    *gen = er_rd32(p + 4);
    *active = p[8];
    valid[0] = p[9];
    valid[1] = p[10];
    size[0] = er_rd32(p + 12);
    size[1] = er_rd32(p + 16);
    memcpy(sha[0], p + 20, 32);
    memcpy(sha[1], p + 52, 32);
    return 1;
}

static int meta_write(er_slots *s) {
    uint8_t rec[META_SIZE];
    memset(rec, 0, sizeof rec);
    uint32_t gen = s->generation + 1;
    er_wr32(rec, META_MAGIC);
    er_wr32(rec + 4, gen);
    rec[8] = s->active;
    for (int i = 0; i < ER_SLOT_COUNT; i++) {
        int valid = s->slot[i].state == ER_SLOT_VERIFIED;
        rec[9 + i] = (uint8_t)valid;
        er_wr32(rec + 12 + 4 * i, valid ? s->slot[i].size : 0);
        if (valid) memcpy(rec + 20 + 32 * i, s->slot[i].sha, 32);
    }
    er_wr32(rec + META_SIZE - 4, er_crc32(0, rec, META_SIZE - 4));
    uint32_t target = gen & 1u; /* alternate: the newest record is always in the other sector */
    if (port_flash_erase(ER_META_OFFSET(target), ER_FLASH_SECTOR) != 0) return ER_ERR_FLASH;
    if (port_flash_write(ER_META_OFFSET(target), rec, sizeof rec) != 0) return ER_ERR_FLASH;
    s->generation = gen;
    return ER_OK;
}

const uint8_t *er_slot_data(uint8_t slot) { return port_flash_map() + ER_SLOT_OFFSET(slot); }

static int slot_hash_ok(uint8_t slot, uint32_t size, const uint8_t sha[32]) {
    uint8_t h[32];
    if (size == 0 || size > ER_SLOT_BYTES) return 0;
    er_sha256(er_slot_data(slot), size, h);
    return memcmp(h, sha, 32) == 0;
}

void er_slots_init(er_slots *s) {
    memset(s, 0, sizeof *s);
    s->active = ER_SLOT_NONE;
    uint32_t best_gen = 0;
    int found = 0;
    for (uint32_t i = 0; i < 2; i++) {
        uint32_t gen, size[2];
        uint8_t active, valid[2], sha[2][32];
        if (!meta_read(i, &gen, &active, valid, size, sha)) continue;
        if (found && gen <= best_gen) continue;
        found = 1;
        best_gen = gen;
        s->active = active;
        for (int k = 0; k < ER_SLOT_COUNT; k++) {
            s->slot[k].state = valid[k] ? ER_SLOT_VERIFIED : ER_SLOT_EMPTY;
            s->slot[k].size = valid[k] ? size[k] : 0;
            s->slot[k].received = s->slot[k].size;
            memcpy(s->slot[k].sha, sha[k], 32);
        }
    }
    s->generation = best_gen;
    for (int k = 0; k < ER_SLOT_COUNT; k++) {
        er_slot *sl = &s->slot[k];
        if (sl->state == ER_SLOT_VERIFIED && !slot_hash_ok((uint8_t)k, sl->size, sl->sha)) {
            memset(sl, 0, sizeof *sl);
        }
    }
    if (s->active >= ER_SLOT_COUNT || s->slot[s->active].state != ER_SLOT_VERIFIED) {
        s->active = ER_SLOT_NONE;
        for (uint8_t k = 0; k < ER_SLOT_COUNT; k++)
            if (s->slot[k].state == ER_SLOT_VERIFIED) s->active = k;
    }
}

int er_slot_begin(er_slots *s, uint8_t slot, uint32_t size, const uint8_t sha[32], int *resumed) {
    *resumed = 0;
    if (slot >= ER_SLOT_COUNT) return ER_ERR_BAD_SLOT;
    if (slot == s->active) return ER_ERR_SLOT_ACTIVE;
    if (size == 0 || size > ER_SLOT_BYTES) return ER_ERR_TOO_LARGE;
    er_slot *sl = &s->slot[slot];
    if ((sl->state == ER_SLOT_RECEIVING || sl->state == ER_SLOT_VERIFIED) && sl->size == size &&
        memcmp(sl->sha, sha, 32) == 0) {
        *resumed = 1;
        return ER_OK;
    }
    if (sl->state == ER_SLOT_VERIFIED) {
        /* it was a rollback target: forget it in flash before its bytes change */
        sl->state = ER_SLOT_EMPTY;
        int rc = meta_write(s);
        if (rc != ER_OK) return rc;
    }
    for (int k = 0; k < ER_SLOT_COUNT; k++) /* one transfer at a time: DATA has no slot field */
        if (k != slot && s->slot[k].state == ER_SLOT_RECEIVING) memset(&s->slot[k], 0, sizeof s->slot[k]);
    uint32_t span = (size + ER_FLASH_SECTOR - 1) / ER_FLASH_SECTOR * ER_FLASH_SECTOR;
    if (port_flash_erase(ER_SLOT_OFFSET(slot), span) != 0) return ER_ERR_FLASH;
    sl->state = ER_SLOT_RECEIVING;
    sl->size = size;
    sl->received = 0;
    memcpy(sl->sha, sha, 32);
    return ER_OK;
}

int er_slot_write(er_slots *s, uint8_t slot, uint32_t offset, const uint8_t *data, uint32_t len) {
    if (slot >= ER_SLOT_COUNT) return ER_ERR_BAD_SLOT;
    er_slot *sl = &s->slot[slot];
    if (sl->state != ER_SLOT_RECEIVING) return ER_ERR_NO_TRANSFER;
    if (offset > sl->size || len > sl->size - offset) return ER_ERR_BAD_OFFSET;
    if (offset > sl->received) return ER_ERR_BAD_OFFSET; /* a gap: the host must resync */
    uint32_t end = offset + len;
    if (end <= sl->received) return ER_OK; /* a duplicate: already written */
    uint32_t skip = sl->received - offset;
    if (port_flash_write(ER_SLOT_OFFSET(slot) + sl->received, data + skip, len - skip) != 0)
        return ER_ERR_FLASH;
    sl->received = end;
    return ER_OK;
}

int er_slot_finish(er_slots *s, uint8_t slot, const uint8_t sha[32], uint8_t out[32]) {
    if (slot >= ER_SLOT_COUNT) return ER_ERR_BAD_SLOT;
    er_slot *sl = &s->slot[slot];
    if (sl->state == ER_SLOT_VERIFIED) {
        memcpy(out, sl->sha, 32);
        return memcmp(sl->sha, sha, 32) == 0 ? ER_OK : ER_ERR_HASH_MISMATCH;
    }
    if (sl->state != ER_SLOT_RECEIVING) return ER_ERR_NO_TRANSFER;
    if (sl->received != sl->size) return ER_ERR_BAD_OFFSET;
    er_sha256(er_slot_data(slot), sl->size, out);
    if (memcmp(out, sl->sha, 32) != 0 || memcmp(out, sha, 32) != 0) {
        memset(sl, 0, sizeof *sl); /* start over: the next BEGIN erases */
        return ER_ERR_HASH_MISMATCH;
    }
    sl->state = ER_SLOT_VERIFIED;
    return meta_write(s);
}

int er_slot_activate(er_slots *s, uint8_t slot) {
    if (slot >= ER_SLOT_COUNT) return ER_ERR_BAD_SLOT;
    if (s->slot[slot].state != ER_SLOT_VERIFIED) return ER_ERR_NOT_VERIFIED;
    uint8_t prev = s->active;
    s->active = slot;
    int rc = meta_write(s);
    if (rc != ER_OK) s->active = prev;
    return rc;
}
