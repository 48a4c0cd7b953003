#ifndef ER_SHA256_H
#define ER_SHA256_H
#include <stddef.h>
#include <stdint.h>
typedef struct {
    uint32_t h[8];
    uint64_t len;
    uint8_t block[64];
    uint32_t fill;
} er_sha256_ctx;
void er_sha256_init(er_sha256_ctx *s);
void er_sha256_update(er_sha256_ctx *s, const uint8_t *data, size_t n);
void er_sha256_final(er_sha256_ctx *s, uint8_t out[32]);
void er_sha256(const uint8_t *data, size_t n, uint8_t out[32]);
#endif
