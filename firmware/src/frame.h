#ifndef ER_FRAME_H
#define ER_FRAME_H
#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef struct {
    uint8_t cmd, flags;
    uint16_t seq, len;
    const uint8_t *payload;
} er_frame;

/* Byte-at-a-time frame parser with resynchronisation: bytes that cannot start a frame are
 * skipped; a frame whose length is out of range or whose CRC fails costs only its first byte,
 * and scanning resumes right after it, so a frame that follows garbage is still found. */
typedef struct {
    uint8_t buf[ER_FRAME_OVERHEAD + ER_DEV_MAX_PAYLOAD];
    uint32_t n;
    uint32_t max_payload;
    uint32_t last_ms;
    uint32_t delivered;   /* size of the frame handed out at the front of buf, or 0 */
    uint32_t skipped;     /* bytes discarded while resynchronising */
    uint32_t bad_crc;
    uint32_t frames;
} er_parser;

void er_parser_init(er_parser *p, uint32_t max_payload);
/* Push one byte; returns 1 and fills *out when it completes a good frame. */
int er_parser_push(er_parser *p, uint8_t byte, uint32_t now_ms, er_frame *out);
/* After handling a frame: drop it and look for another one already in the buffer. */
int er_parser_next(er_parser *p, er_frame *out);
/* Drop a partial frame after ER_INTERBYTE_TIMEOUT_MS without bytes. */
void er_parser_tick(er_parser *p, uint32_t now_ms);

/* Encode a frame into out (capacity cap); returns its size or 0 when it does not fit. */
size_t er_frame_encode(uint8_t *out, size_t cap, uint8_t cmd, uint8_t flags, uint16_t seq,
                       const uint8_t *payload, size_t len);

static inline uint16_t er_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t er_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void er_wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void er_wr32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
#endif
