#include "frame.h"

#include <string.h>

#include "crc32.h"

void er_parser_init(er_parser *p, uint32_t max_payload) {
    memset(p, 0, sizeof *p);
    p->max_payload = max_payload > ER_DEV_MAX_PAYLOAD ? ER_DEV_MAX_PAYLOAD : max_payload;
}

static void drop(er_parser *p, uint32_t k, int count) {
    if (k > p->n) k = p->n;
    memmove(p->buf, p->buf + k, p->n - k);
    p->n -= k;
    if (count) p->skipped += k;
}

static void consume_delivered(er_parser *p) {
    if (p->delivered) {
        drop(p, p->delivered, 0);
        p->delivered = 0;
    }
}

static int scan(er_parser *p, er_frame *out) {
    for (;;) {
        if (p->n == 0) return 0;
        if (p->buf[0] != ER_SOF0) {
            uint32_t k = 1;
            while (k < p->n && p->buf[k] != ER_SOF0) k++;
            drop(p, k, 1);
            continue;
        }
        if (p->n < 2) return 0;
        if (p->buf[1] != ER_SOF1) {
            drop(p, 1, 1);
            continue;
        }
        if (p->n < ER_HEADER_SIZE) return 0;
        uint32_t len = er_rd16(p->buf + 6);
        if (len > p->max_payload) {
            drop(p, 1, 1);
            continue;
        }
        uint32_t total = ER_FRAME_OVERHEAD + len;
        if (p->n < total) return 0;
        uint32_t want = er_rd32(p->buf + ER_HEADER_SIZE + len);
        if (er_crc32(0, p->buf + 2, ER_HEADER_SIZE - 2 + len) != want) {
            p->bad_crc++;
            drop(p, 1, 1);
            continue;
        }
        out->cmd = p->buf[2];
        out->flags = p->buf[3];
        out->seq = er_rd16(p->buf + 4);
        out->len = (uint16_t)len;
        out->payload = p->buf + ER_HEADER_SIZE;
        p->frames++;
        p->delivered = total; /* removed (keeping any bytes after it) on the next call */
        return 1;
    }
}

int er_parser_push(er_parser *p, uint8_t byte, uint32_t now_ms, er_frame *out) {
    consume_delivered(p);
    if (p->n >= sizeof p->buf) drop(p, 1, 1); /* unreachable: lengths are bounded in scan() */
    p->buf[p->n++] = byte;
    p->last_ms = now_ms;
    return scan(p, out);
}

int er_parser_next(er_parser *p, er_frame *out) {
    consume_delivered(p);
    return scan(p, out);
}

void er_parser_tick(er_parser *p, uint32_t now_ms) {
    if (p->n && !p->delivered && (uint32_t)(now_ms - p->last_ms) > ER_INTERBYTE_TIMEOUT_MS) {
        p->skipped += p->n;
        p->n = 0;
    }
}

size_t er_frame_encode(uint8_t *out, size_t cap, uint8_t cmd, uint8_t flags, uint16_t seq,
                       const uint8_t *payload, size_t len) {
    if (len > 0xFFFFu || ER_FRAME_OVERHEAD + len > cap) return 0;
    out[0] = ER_SOF0;
    out[1] = ER_SOF1;
    out[2] = cmd;
    out[3] = flags;
    er_wr16(out + 4, seq);
    er_wr16(out + 6, (uint16_t)len);
    if (len) memcpy(out + ER_HEADER_SIZE, payload, len);
    er_wr32(out + ER_HEADER_SIZE + len, er_crc32(0, out + 2, ER_HEADER_SIZE - 2 + len));
    return ER_FRAME_OVERHEAD + len;
}
