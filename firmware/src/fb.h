/* Bounds-checked FlatBuffers reading (the subset the TFLite schema needs).
 * Every table, vtable, field, vector and element position is checked against the buffer
 * before it is read; a failed check sets b->bad and reads as absent/zero. */
#ifndef ER_FB_H
#define ER_FB_H
#include <stdint.h>

typedef struct {
    const uint8_t *data;
    uint32_t size;
    int bad;          /* sticky: some check failed */
    uint32_t bad_at;  /* byte offset of the first failure */
} fb_buf;

typedef struct {
    fb_buf *b;
    uint32_t pos, vt;
    uint16_t vt_size, t_size;
    int present;
} fb_table;

typedef struct {
    uint32_t start; /* byte offset of element 0 */
    uint32_t n;
} fb_vec;

int fb_root(fb_buf *b, fb_table *t);
int fb_has(const fb_table *t, int slot);
uint8_t fb_u8(const fb_table *t, int slot, uint8_t def);
int32_t fb_i32(const fb_table *t, int slot, int32_t def);
uint32_t fb_u32(const fb_table *t, int slot, uint32_t def);
uint64_t fb_u64(const fb_table *t, int slot, uint64_t def);
float fb_f32(const fb_table *t, int slot, float def);
/* A sub-table field; returns 0 (t->present = 0) when absent or bad. */
int fb_table_field(const fb_table *t, int slot, fb_table *out);
/* A vector field with elements of elem bytes; returns 0 when absent or bad. */
int fb_vector(const fb_table *t, int slot, uint32_t elem, fb_vec *out);
/* Element i of a vector of tables. */
int fb_vector_table(fb_buf *b, const fb_vec *v, uint32_t i, fb_table *out);
int32_t fb_vec_i32(const fb_buf *b, const fb_vec *v, uint32_t i);
float fb_vec_f32(const fb_buf *b, const fb_vec *v, uint32_t i);
int64_t fb_vec_i64(const fb_buf *b, const fb_vec *v, uint32_t i);

static inline uint32_t fb_ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
#endif
