#include "fb.h"

#include <string.h>

static int fail(fb_buf *b, uint32_t at) {
    if (!b->bad) {
        b->bad = 1;
        b->bad_at = at;
    }
    return 0;
}

static int need(fb_buf *b, uint64_t pos, uint64_t n) {
    if (pos + n > b->size) return fail(b, (uint32_t)(pos > b->size ? b->size : pos));
    return 1;
}

static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static int table_at(fb_buf *b, uint64_t pos, fb_table *t) {
    memset(t, 0, sizeof *t);
    t->b = b;
    if (!need(b, pos, 4)) return fail(b, (uint32_t)pos);
    int64_t vt = (int64_t)pos - (int32_t)fb_ld32(b->data + pos);
    if (vt < 0 || !need(b, (uint64_t)vt, 4)) return fail(b, (uint32_t)pos);
    uint16_t vs = ld16(b->data + vt), ts = ld16(b->data + vt + 2);
    if (vs < 4 || (vs & 1u) || !need(b, (uint64_t)vt, vs) || ts < 4 || !need(b, pos, ts))
        return fail(b, (uint32_t)vt);
    t->pos = (uint32_t)pos;
    t->vt = (uint32_t)vt;
    t->vt_size = vs;
    t->t_size = ts;
    t->present = 1;
    return 1;
}

int fb_root(fb_buf *b, fb_table *t) {
    b->bad = 0;
    if (!need(b, 0, 8)) return 0;
    return table_at(b, fb_ld32(b->data), t);
}

/* Field offset inside the table (0 = absent); checks the field's bytes lie inside the table. */
static uint32_t field(const fb_table *t, int slot, uint32_t width) {
    if (!t->present) return 0;
    uint32_t vo = 4u + 2u * (uint32_t)slot;
    if (vo + 2 > t->vt_size) return 0;
    uint32_t o = ld16(t->b->data + t->vt + vo);
    if (!o) return 0;
    if (o + width > t->t_size) return (uint32_t)fail(t->b, t->pos + o);
    return o;
}

int fb_has(const fb_table *t, int slot) { return field(t, slot, 1) != 0; }

uint8_t fb_u8(const fb_table *t, int slot, uint8_t def) {
    uint32_t o = field(t, slot, 1);
    return o ? t->b->data[t->pos + o] : def;
}

uint32_t fb_u32(const fb_table *t, int slot, uint32_t def) {
    uint32_t o = field(t, slot, 4);
    return o ? fb_ld32(t->b->data + t->pos + o) : def;
}

int32_t fb_i32(const fb_table *t, int slot, int32_t def) { return (int32_t)fb_u32(t, slot, (uint32_t)def); }

uint64_t fb_u64(const fb_table *t, int slot, uint64_t def) {
    uint32_t o = field(t, slot, 8);
    if (!o) return def;
    const uint8_t *p = t->b->data + t->pos + o;
    return (uint64_t)fb_ld32(p) | ((uint64_t)fb_ld32(p + 4) << 32);
}

float fb_f32(const fb_table *t, int slot, float def) {
    uint32_t o = field(t, slot, 4);
    if (!o) return def;
    uint32_t u = fb_ld32(t->b->data + t->pos + o);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int indirect(const fb_table *t, int slot, uint64_t *target) {
    uint32_t o = field(t, slot, 4);
    if (!o) return 0;
    uint64_t p = (uint64_t)t->pos + o;
    *target = p + fb_ld32(t->b->data + p);
    return 1;
}

int fb_table_field(const fb_table *t, int slot, fb_table *out) {
    uint64_t p;
    memset(out, 0, sizeof *out);
    out->b = t->b;
    if (!indirect(t, slot, &p)) return 0;
    return table_at(t->b, p, out);
}

int fb_vector(const fb_table *t, int slot, uint32_t elem, fb_vec *out) {
    uint64_t p;
    out->start = 0;
    out->n = 0;
    if (!indirect(t, slot, &p)) return 0;
    if (!need(t->b, p, 4)) return 0;
    uint32_t n = fb_ld32(t->b->data + p);
    if (!need(t->b, p + 4, (uint64_t)n * elem)) return 0;
    out->start = (uint32_t)(p + 4);
    out->n = n;
    return 1;
}

int fb_vector_table(fb_buf *b, const fb_vec *v, uint32_t i, fb_table *out) {
    memset(out, 0, sizeof *out);
    out->b = b;
    if (i >= v->n) return fail(b, v->start);
    uint64_t p = (uint64_t)v->start + 4u * i;
    return table_at(b, p + fb_ld32(b->data + p), out);
}

int32_t fb_vec_i32(const fb_buf *b, const fb_vec *v, uint32_t i) {
    return i < v->n ? (int32_t)fb_ld32(b->data + v->start + 4u * i) : 0;
}

float fb_vec_f32(const fb_buf *b, const fb_vec *v, uint32_t i) {
    uint32_t u = i < v->n ? fb_ld32(b->data + v->start + 4u * i) : 0;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int64_t fb_vec_i64(const fb_buf *b, const fb_vec *v, uint32_t i) {
    if (i >= v->n) return 0;
    const uint8_t *p = b->data + v->start + 8u * i;
    return (int64_t)((uint64_t)fb_ld32(p) | ((uint64_t)fb_ld32(p + 4) << 32));
}
