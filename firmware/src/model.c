#include "model.h"

#include <stdio.h>
#include <string.h>

/* Activation arena: 16-byte aligned, sized from the board profile. */
_Alignas(16) uint8_t er_arena[ER_ARENA_BYTES];
_Static_assert(sizeof(er_tensor) <= ER_TENSOR_META_BYTES, "er_tensor outgrew ER_TENSOR_META_BYTES");
_Static_assert(sizeof(er_node) <= ER_NODE_META_BYTES, "er_node outgrew ER_NODE_META_BYTES");
_Static_assert(ER_ARENA_BYTES % 16 == 0 && ER_TENSOR_META_BYTES % 16 == 0 && ER_NODE_META_BYTES % 16 == 0,
               "tables must keep 16-byte alignment");

enum { ST_CODES = 1, ST_SUBGRAPHS = 2, ST_BUFFERS = 4 };

static uint32_t type_size(uint8_t type) {
    switch (type) {
        case ER_TYPE_FLOAT32: case ER_TYPE_INT32: return 4;
        case ER_TYPE_INT8: case ER_TYPE_UINT8: return 1;
        case ER_TYPE_INT16: return 2;
        case ER_TYPE_INT64: return 8;
        default: return 0;
    }
}

static int bad(char *err, size_t errlen, int code, const char *msg, fb_buf *b) {
    if (b && b->bad)
        snprintf(err, errlen, "%s (corrupt flatbuffer at byte %u)", msg, (unsigned)b->bad_at);
    else
        snprintf(err, errlen, "%s", msg);
    return code;
}

/* Constant data of buffer `index`: inline vector, or (offset, size) for models over 2 GB style
 * layouts; both checked against the model size. */
static int buffer_data(er_model *m, const fb_vec *buffers, uint32_t index, const uint8_t **data,
                       uint32_t *size) {
    *data = NULL;
    *size = 0;
    if (index == 0) return 1;
    if (index >= buffers->n) return 0;
    fb_table bt;
    if (!fb_vector_table(&m->fb, buffers, index, &bt)) return 0;
    fb_vec v;
    if (fb_vector(&bt, 0, 1, &v) && v.n) {
        *data = m->fb.data + v.start;
        *size = v.n;
        return !m->fb.bad;
    }
    uint64_t off = fb_u64(&bt, 1, 0), sz = fb_u64(&bt, 2, 0);
    if (off > 1 && sz) {
        if (off > m->fb.size || sz > m->fb.size - off) return 0;
        *data = m->fb.data + off;
        *size = (uint32_t)sz;
    }
    return !m->fb.bad;
}

static int read_tensor(er_model *m, const fb_vec *buffers, fb_table *t, er_tensor *out, char *err,
                       size_t errlen, uint32_t idx) {
    memset(out, 0, sizeof *out);
    out->var = -1;
    fb_vec shape;
    fb_vector(t, 0, 4, &shape);
    if (shape.n > ER_MAX_DIMS) {
        snprintf(err, errlen, "tensor %u has rank %u (at most %d)", (unsigned)idx, (unsigned)shape.n,
                 ER_MAX_DIMS);
        return ER_ERR_MODEL_INVALID;
    }
    out->ndim = (uint8_t)shape.n;
    /* Element count in checked 64-bit arithmetic: every partial product stays at or below
     * ER_MAX_ELEMENTS (so a shape like [2^24, 2^24, 2^24, 1] cannot wrap to a small count), and
     * a zero dimension ends the product at 0 without hiding how large the others are. */
    uint64_t count = 1, nonzero = 1;
    for (uint32_t i = 0; i < shape.n; i++) {
        int32_t d = fb_vec_i32(&m->fb, &shape, i);
        if (d == -1) d = 1;
        if (d < 0 || (uint32_t)d > ER_MAX_ELEMENTS) {
            snprintf(err, errlen, "tensor %u has dimension %d", (unsigned)idx, (int)d);
            return ER_ERR_MODEL_INVALID;
        }
        out->dims[i] = d;
        if (d && nonzero > ER_MAX_ELEMENTS / (uint64_t)d) {
            snprintf(err, errlen, "tensor %u has more than %u elements", (unsigned)idx, (unsigned)ER_MAX_ELEMENTS);
            return ER_ERR_MODEL_INVALID;
        }
        if (d) nonzero *= (uint64_t)d;
        count *= (uint64_t)d;
    }
    out->type = (uint8_t)fb_u8(t, 1, 0);
    uint32_t es = type_size(out->type);
    out->count = (uint32_t)count;            /* <= ER_MAX_ELEMENTS = 2^26 */
    out->bytes = (uint32_t)(count * es);     /* <= 2^29 */
    uint32_t buf = fb_u32(t, 2, 0);
    const uint8_t *data;
    uint32_t size;
    if (!buffer_data(m, buffers, buf, &data, &size))
        return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad buffer reference", &m->fb);
    if (data) {
        if (es == 0 || size != out->bytes) {
            snprintf(err, errlen, "tensor %u: constant buffer holds %u bytes, shape needs %u",
                     (unsigned)idx, (unsigned)size, (unsigned)out->bytes);
            return ER_ERR_MODEL_INVALID;
        }
        out->cdata = data;
        out->is_const = 1;
    }
    out->scale = 0.0f;
    out->zp = 0;
    fb_table q;
    if (fb_table_field(t, 4, &q)) {
        fb_vec zps;
        fb_vector(&q, 2, 4, &out->scales);
        fb_vector(&q, 3, 8, &zps);
        out->qdim = fb_i32(&q, 6, 0);
        if (out->scales.n) {
            out->scale = fb_vec_f32(&m->fb, &out->scales, 0);
            int64_t zp = zps.n ? fb_vec_i64(&m->fb, &zps, 0) : 0;
            /* scales must be positive and finite, zero points fit the type (8-bit: [-128, 255]) */
            for (uint32_t k = 0; k < out->scales.n; k++) {
                float sc = fb_vec_f32(&m->fb, &out->scales, k);
                if (!(sc > 0.0f && sc < 1e30f)) {
                    snprintf(err, errlen, "tensor %u: quantization scale %g is not positive and finite",
                             (unsigned)idx, (double)sc);
                    return ER_ERR_MODEL_INVALID;
                }
            }
            if (zp < -32768 || zp > 65535 || (out->type == ER_TYPE_INT8 && (zp < -128 || zp > 127))) {
                snprintf(err, errlen, "tensor %u: zero point %lld out of range", (unsigned)idx, (long long)zp);
                return ER_ERR_MODEL_INVALID;
            }
            out->zp = (int32_t)zp;
            if (out->scales.n > 1 && (out->qdim < 0 || out->qdim >= out->ndim ||
                                      (uint32_t)out->dims[out->qdim] != out->scales.n)) {
                snprintf(err, errlen, "tensor %u: %u scales do not match quantized dimension %d",
                         (unsigned)idx, (unsigned)out->scales.n, (int)out->qdim);
                return ER_ERR_MODEL_INVALID;
            }
        }
    }
    if (m->fb.bad) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad tensor table", &m->fb);
    return ER_OK;
}

static int read_options(er_model *m, fb_table *opt, er_node *n) {
    n->stride_w = n->stride_h = 1;
    n->dil_w = n->dil_h = 1;
    n->beta = 1.0f;
    switch (n->op) {
        case 3: /* CONV_2D */
            n->padding = fb_u8(opt, 0, 0); n->stride_w = fb_i32(opt, 1, 0); n->stride_h = fb_i32(opt, 2, 0);
            n->act = fb_u8(opt, 3, 0); n->dil_w = fb_i32(opt, 4, 1); n->dil_h = fb_i32(opt, 5, 1);
            break;
        case 4: /* DEPTHWISE_CONV_2D */
            n->padding = fb_u8(opt, 0, 0); n->stride_w = fb_i32(opt, 1, 0); n->stride_h = fb_i32(opt, 2, 0);
            n->depth_mult = fb_i32(opt, 3, 0); n->act = fb_u8(opt, 4, 0);
            n->dil_w = fb_i32(opt, 5, 1); n->dil_h = fb_i32(opt, 6, 1);
            break;
        case 1: case 17: /* AVERAGE_POOL_2D, MAX_POOL_2D */
            n->padding = fb_u8(opt, 0, 0); n->stride_w = fb_i32(opt, 1, 0); n->stride_h = fb_i32(opt, 2, 0);
            n->filter_w = fb_i32(opt, 3, 0); n->filter_h = fb_i32(opt, 4, 0); n->act = fb_u8(opt, 5, 0);
            break;
        case 9: /* FULLY_CONNECTED */
            n->act = fb_u8(opt, 0, 0); n->keep_dims = fb_u8(opt, 2, 0);
            if (fb_u8(opt, 1, 0) != 0) return 0; /* shuffled weights format */
            break;
        case 25: n->beta = fb_f32(opt, 0, 1.0f); break;               /* SOFTMAX */
        case 2: n->axis = fb_i32(opt, 0, 0); n->act = fb_u8(opt, 1, 0); break; /* CONCATENATION */
        case 0: case 18: n->act = fb_u8(opt, 0, 0); n->flag1 = n->op == 0 && fb_u8(opt, 1, 1); break; /* ADD, MUL; ADD's pot_scale_int16 */
        case 40: case 74: case 82: n->keep_dims = fb_u8(opt, 0, 0); break; /* MEAN, SUM, REDUCE_MAX */
        case 41: case 42: n->act = fb_u8(opt, 0, 0); n->flag1 = n->op == 41 && fb_u8(opt, 1, 1); break; /* SUB, DIV; SUB's pot_scale_int16 */
        case 98: n->beta = fb_f32(opt, 0, 0.0f); break;                 /* LEAKY_RELU: alpha */
        case 45: /* STRIDED_SLICE */
            for (int k = 0; k < 5; k++) n->mask[k] = fb_i32(opt, k, 0);
            if (fb_u8(opt, 5, 0)) return 0; /* offset=true */
            break;
        case 97: n->flag1 = fb_u8(opt, 0, 0); n->flag2 = fb_u8(opt, 1, 0); break; /* RESIZE_NEAREST_NEIGHBOR */
        case 23: n->flag1 = fb_u8(opt, 2, 0); n->flag2 = fb_u8(opt, 3, 0); break; /* RESIZE_BILINEAR */
        case 5: case 26: n->alpha_i = fb_i32(opt, 0, 0); break;         /* DEPTH_TO_SPACE, SPACE_TO_DEPTH */
        case 36: n->axis = fb_i32(opt, 0, 0); n->alpha_i = fb_i32(opt, 1, 0); break; /* GATHER: axis, batch_dims */
        case 56: case 79: n->alpha_i = fb_u8(opt, 0, 4); break;         /* ARG_MAX, ARG_MIN: output type */
        case 67: /* TRANSPOSE_CONV */
            n->padding = fb_u8(opt, 0, 0); n->stride_w = fb_i32(opt, 1, 0); n->stride_h = fb_i32(opt, 2, 0);
            n->act = fb_u8(opt, 3, 0);
            break;
        case 129: n->alpha_i = fb_i32(opt, 0, -1); break;               /* CALL_ONCE: init subgraph */
        case 142: n->alpha_i = er_model_var(m, opt); break;             /* VAR_HANDLE: variable index */
        case 126: n->flag1 = fb_u8(opt, 0, 0); n->flag2 = fb_u8(opt, 1, 0); break; /* BATCH_MATMUL: adj_x, adj_y */
        case 49: case 102: n->alpha_i = fb_i32(opt, 0, 0); break;       /* SPLIT, SPLIT_V: num_splits */
        case 83: case 88: n->alpha_i = fb_i32(opt, 0, 0); n->axis = fb_i32(opt, 1, 0); break; /* PACK, UNPACK */
        case 100: n->alpha_i = fb_u8(opt, 0, 0); break;                 /* MIRROR_PAD: mode */
        default: break;
    }
    return 1;
}

static int plan_arena(er_model *m, char *err, size_t errlen) {
    /* Greedy by size (largest first), each tensor at the lowest offset that does not overlap
     * a placed tensor whose lifetime intersects its own. O(n^2) in the tensor count. Not
     * optimal, but the same strategy as the host planner, so the sizes are comparable. */
    /* scratch: two int16 lists just below the prepared data (activations may reuse it later) */
    const uint32_t limit = er_pool_top();
    const uint32_t scratch = 4u * m->n_tensors;
    if (scratch > limit) {
        snprintf(err, errlen, "model needs more than %u bytes of RAM for its tables; this board has %u bytes",
                 (unsigned)(ER_ARENA_BYTES - limit + scratch), (unsigned)ER_ARENA_BYTES);
        return ER_ERR_ARENA_TOO_SMALL;
    }
    int16_t *order = (int16_t *)(void *)(er_arena + ((limit - scratch) & ~1u));
    int16_t *placed = order + m->n_tensors;
    uint32_t n = 0, np = 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].used && !m->tensors[i].is_const && m->tensors[i].type != ER_TYPE_RESOURCE) order[n++] = (int16_t)i;
    for (uint32_t i = 1; i < n; i++) { /* insertion sort: size desc, index asc */
        int16_t k = order[i];
        uint32_t j = i;
        while (j > 0 && m->tensors[order[j - 1]].bytes < m->tensors[k].bytes) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = k;
    }
    for (uint32_t i = 0; i < n; i++) {
        er_tensor *t = &m->tensors[order[i]];
        uint64_t size = ((uint64_t)t->bytes + 15u) & ~(uint64_t)15u;
        uint64_t off = 0;
        for (int moved = 1; moved;) {
            moved = 0;
            for (uint32_t j = 0; j < np; j++) {
                er_tensor *o = &m->tensors[placed[j]];
                uint64_t osize = ((uint64_t)o->bytes + 15u) & ~(uint64_t)15u;
                if (o->last < t->first || t->last < o->first) continue;
                if (off < o->off + osize && o->off < off + size) {
                    off = o->off + osize;
                    moved = 1;
                }
            }
        }
        if (off + size > limit) { /* stop before offsets could overflow */
            total = off + size;
            break;
        }
        t->off = (uint32_t)off;
        placed[np++] = order[i];
        if (off + size > total) total = off + size;
    }
    const uint64_t need = total + (ER_ARENA_BYTES - limit);
    m->meta_bytes = ER_ARENA_BYTES - limit;
    m->arena_bytes = need > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)need;
    if (total > limit) {
        snprintf(err, errlen, "model needs an arena of at least %llu bytes (%llu activations + %u tables); this board "
                 "has %u bytes of RAM for it", (unsigned long long)need, (unsigned long long)total,
                 (unsigned)(ER_ARENA_BYTES - limit), (unsigned)ER_ARENA_BYTES);
        return ER_ERR_ARENA_TOO_SMALL;
    }
    return ER_OK;
}

int er_model_load(er_model *m, const uint8_t *data, uint32_t size, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    err[0] = 0;
    m->fb.data = data;
    m->fb.size = size;
    m->init_subgraph = -1;
    fb_table root;
    if (size < 8 || memcmp(data + 4, "TFL3", 4) != 0)
        return bad(err, errlen, ER_ERR_MODEL_INVALID, "not a TFLite model (no TFL3 identifier)", NULL);
    if (!fb_root(&m->fb, &root)) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad root table", &m->fb);
    if (fb_u32(&root, 0, 0) != 3) return bad(err, errlen, ER_ERR_MODEL_INVALID, "TFLite schema version is not 3", NULL);
    fb_vec codes, subgraphs, buffers;
    fb_vector(&root, ST_CODES, 4, &codes);
    fb_vector(&root, ST_SUBGRAPHS, 4, &subgraphs);
    fb_vector(&root, ST_BUFFERS, 4, &buffers);
    if (m->fb.bad || subgraphs.n == 0) return bad(err, errlen, ER_ERR_MODEL_INVALID, "model has no subgraph", &m->fb);
    fb_table sg, t;
    if (!fb_vector_table(&m->fb, &subgraphs, 0, &sg)) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad subgraph", &m->fb);
    fb_vec tensors, ins, outs, ops;
    fb_vector(&sg, 0, 4, &tensors);
    fb_vector(&sg, 1, 4, &ins);
    fb_vector(&sg, 2, 4, &outs);
    fb_vector(&sg, 3, 4, &ops);
    if (m->fb.bad) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad subgraph vectors", &m->fb);
    if (tensors.n > ER_MAX_TENSORS || ops.n > ER_MAX_OPS || ins.n > ER_MAX_IO || outs.n > ER_MAX_IO ||
        ins.n == 0 || outs.n == 0) {
        snprintf(err, errlen, "model has %u tensors, %u ops, %u inputs, %u outputs (limits %d, %d, %d)",
                 (unsigned)tensors.n, (unsigned)ops.n, (unsigned)ins.n, (unsigned)outs.n, ER_MAX_TENSORS,
                 ER_MAX_OPS, ER_MAX_IO);
        return ER_ERR_MODEL_INVALID;
    }
    {
        const uint64_t meta = (uint64_t)tensors.n * ER_TENSOR_META_BYTES + (uint64_t)ops.n * ER_NODE_META_BYTES;
        if (meta > ER_ARENA_BYTES) {
            snprintf(err, errlen, "model needs an arena of at least %llu bytes for its %u tensors and %u ops; this "
                     "board has %u bytes of RAM for it", (unsigned long long)meta, (unsigned)tensors.n,
                     (unsigned)ops.n, (unsigned)ER_ARENA_BYTES);
            return ER_ERR_ARENA_TOO_SMALL;
        }
        m->tensors = (er_tensor *)(void *)(er_arena + ER_ARENA_BYTES - (uint32_t)tensors.n * ER_TENSOR_META_BYTES);
        m->nodes = (er_node *)(void *)((uint8_t *)m->tensors - (uint32_t)ops.n * ER_NODE_META_BYTES);
        memset(m->nodes, 0, (uint32_t)meta);
        m->meta_bytes = (uint32_t)meta;
    }
    m->n_tensors = tensors.n;
    m->n_ops = ops.n;
    for (uint32_t i = 0; i < tensors.n; i++) {
        if (!fb_vector_table(&m->fb, &tensors, i, &t)) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad tensor", &m->fb);
        int rc = read_tensor(m, &buffers, &t, &m->tensors[i], err, errlen, i);
        if (rc != ER_OK) return rc;
        m->tensors[i].first = 0x7FFFFFFF;
        m->tensors[i].last = -1;
    }
    m->n_inputs = ins.n;
    m->n_outputs = outs.n;
    for (uint32_t i = 0; i < ins.n + outs.n; i++) {
        int32_t ti = i < ins.n ? fb_vec_i32(&m->fb, &ins, i) : fb_vec_i32(&m->fb, &outs, i - ins.n);
        if (ti < 0 || (uint32_t)ti >= tensors.n || m->tensors[ti].is_const)
            return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad graph input/output index", NULL);
        er_tensor *tt = &m->tensors[ti];
        tt->used = 1;
        if (i < ins.n) {
            m->inputs[i] = (int16_t)ti;
            tt->first = -1;
            if (tt->last < 0) tt->last = -1;
        } else {
            m->outputs[i - ins.n] = (int16_t)ti;
            tt->last = (int32_t)ops.n;
        }
    }
    /* operators: decode, check the op is supported (before anything runs), record lifetimes */
    for (uint32_t i = 0; i < ops.n; i++) {
        er_node *n = &m->nodes[i];
        fb_table ot, ct, opt;
        if (!fb_vector_table(&m->fb, &ops, i, &ot)) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad operator", &m->fb);
        uint32_t ci = fb_u32(&ot, 0, 0);
        if (ci >= codes.n || !fb_vector_table(&m->fb, &codes, ci, &ct))
            return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad operator code index", &m->fb);
        int32_t dep = (int8_t)fb_u8(&ct, 0, 0), code = fb_i32(&ct, 3, 0);
        n->op = (uint32_t)(code > dep ? code : dep);
        fb_vec oin, oout;
        fb_vector(&ot, 1, 4, &oin);
        fb_vector(&ot, 2, 4, &oout);
        if (m->fb.bad) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad operator vectors", &m->fb);
        const int no_out = n->op == 144 || n->op == 129; /* ASSIGN_VARIABLE, CALL_ONCE write no tensor */
        if (oin.n > ER_MAX_OP_INPUTS || oout.n > ER_MAX_OP_OUTPUTS || (oout.n < 1 && !no_out) || (no_out && oout.n)) {
            snprintf(err, errlen, "op %u (%s) has %u inputs and %u outputs", (unsigned)i, er_op_name(n->op),
                     (unsigned)oin.n, (unsigned)oout.n);
            return ER_ERR_MODEL_INVALID;
        }
        n->n_in = (uint8_t)oin.n;
        n->n_out = (uint8_t)oout.n;
        for (uint32_t k = 0; k < oin.n + oout.n; k++) {
            int32_t ti = k < oin.n ? fb_vec_i32(&m->fb, &oin, k) : fb_vec_i32(&m->fb, &oout, k - oin.n);
            if (ti < -1 || ti >= (int32_t)tensors.n || (k >= oin.n && ti < 0)) {
                snprintf(err, errlen, "op %u (%s) refers to tensor %d", (unsigned)i, er_op_name(n->op), (int)ti);
                return ER_ERR_MODEL_INVALID;
            }
            if (k < oin.n) n->in[k] = (int16_t)ti;
            else n->outs[k - oin.n] = (int16_t)ti;
            if (ti < 0) continue;
            er_tensor *tt = &m->tensors[ti];
            tt->used = 1;
            if ((int32_t)i < tt->first) tt->first = (int32_t)i;
            if ((int32_t)i > tt->last) tt->last = (int32_t)i;
            if (k >= oin.n && tt->is_const)
                return bad(err, errlen, ER_ERR_MODEL_INVALID, "an op writes a constant tensor", NULL);
        }
        n->out = n->n_out ? n->outs[0] : -1;
        fb_table_field(&ot, 4, &opt);
        if (!read_options(m, &opt, n)) {
            snprintf(err, errlen, "op %u (%s): unsupported options", (unsigned)i, er_op_name(n->op));
            return ER_ERR_UNSUPPORTED_OP;
        }
        if (m->fb.bad) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad operator options", &m->fb);
    }
    /* every non-constant tensor an op reads must be written earlier or be a graph input; a
     * tensor an op or the graph uses must have a known element size and no zero dimension (the
     * kernels then index within [0, count) with every partial product <= count <= 2^26) */
    for (uint32_t i = 0; i < m->n_tensors; i++) {
        er_tensor *tt = &m->tensors[i];
        if (tt->used && !tt->is_const && tt->first == 0x7FFFFFFF) tt->first = 0;
        if (tt->used && tt->type != ER_TYPE_RESOURCE && (tt->count == 0 || type_size(tt->type) == 0)) {
            snprintf(err, errlen, "tensor %u is empty or of an unsupported type (%u)", (unsigned)i, (unsigned)tt->type);
            return ER_ERR_MODEL_INVALID;
        }
    }
    er_pool_reset(ER_ARENA_BYTES - m->meta_bytes);
    uint64_t work = 0;
    for (uint32_t i = 0; i < ops.n; i++) {
        int rc = er_kernel_prepare(m, &m->nodes[i], err, errlen);
        if (rc != ER_OK) {
            char tmp[160];
            snprintf(tmp, sizeof tmp, "%s", err);
            snprintf(err, errlen, "op %u (%s): %s", (unsigned)i, er_op_name(m->nodes[i].op), tmp);
            return rc;
        }
        work += er_kernel_work(m, &m->nodes[i]); /* each node <= 2^47 (filters live in a slot <= 2^24): no wrap */
    }
    for (uint32_t v = 0; v < m->n_vars; v++) { /* variable storage, from the prepared-data pool */
        er_var *var = &m->vars[v];
        if (!var->init || !var->bytes) {
            snprintf(err, errlen, "variable %.*s has no initial value (CALL_ONCE init subgraph)", (int)(var->name_len > 60 ? 60 : var->name_len),
                     (const char *)var->name);
            return ER_ERR_UNSUPPORTED_OP;
        }
        var->data = er_kernel_alloc(var->bytes);
        if (!var->data) return bad(err, errlen, ER_ERR_ARENA_TOO_SMALL, "no RAM left for the model's variables", NULL);
    }
    if (work > ER_MAX_WORK) {
        snprintf(err, errlen, "model needs %llu operations per inference (limit %llu)", (unsigned long long)work,
                 (unsigned long long)ER_MAX_WORK);
        return ER_ERR_MODEL_INVALID;
    }
    int rc = plan_arena(m, err, errlen);
    if (rc != ER_OK) return rc;
    m->init_done = 0;
    m->loaded = 1;
    return ER_OK;
}

int er_model_var(er_model *m, const fb_table *opt) {
    fb_vec name;
    if (!fb_vector(opt, 1, 1, &name) || name.n == 0 || m->fb.bad) return -1;
    const uint8_t *p = m->fb.data + name.start;
    for (uint32_t v = 0; v < m->n_vars; v++)
        if (m->vars[v].name_len == name.n && memcmp(m->vars[v].name, p, name.n) == 0) return (int)v;
    if (m->n_vars >= ER_MAX_VARS) return -1;
    er_var *var = &m->vars[m->n_vars];
    memset(var, 0, sizeof *var);
    var->name = p;
    var->name_len = name.n;
    return (int)m->n_vars++;
}

int er_model_read_init(er_model *m, int32_t index, char *err, size_t errlen) {
    fb_table root, sg, ot, ct, opt, tt;
    fb_vec subgraphs, codes, buffers, tensors, ops;
    if (!fb_root(&m->fb, &root)) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad root table", &m->fb);
    fb_vector(&root, ST_CODES, 4, &codes);
    fb_vector(&root, ST_SUBGRAPHS, 4, &subgraphs);
    fb_vector(&root, ST_BUFFERS, 4, &buffers);
    if (index <= 0 || (uint32_t)index >= subgraphs.n || !fb_vector_table(&m->fb, &subgraphs, (uint32_t)index, &sg))
        return bad(err, errlen, ER_ERR_MODEL_INVALID, "CALL_ONCE names no subgraph", &m->fb);
    fb_vector(&sg, 0, 4, &tensors);
    fb_vector(&sg, 3, 4, &ops);
    if (m->fb.bad || ops.n > 4u * ER_MAX_VARS) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad init subgraph", &m->fb);
    int16_t handle_var[4 * ER_MAX_VARS];
    uint32_t handle_tensor[4 * ER_MAX_VARS], nh = 0;
    for (uint32_t i = 0; i < ops.n; i++) {
        if (!fb_vector_table(&m->fb, &ops, i, &ot)) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad init operator", &m->fb);
        uint32_t ci = fb_u32(&ot, 0, 0);
        if (ci >= codes.n || !fb_vector_table(&m->fb, &codes, ci, &ct)) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad operator code", &m->fb);
        int32_t dep = (int8_t)fb_u8(&ct, 0, 0), code = fb_i32(&ct, 3, 0);
        uint32_t op = (uint32_t)(code > dep ? code : dep);
        fb_vec oin, oout;
        fb_vector(&ot, 1, 4, &oin);
        fb_vector(&ot, 2, 4, &oout);
        if (m->fb.bad) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad init operator", &m->fb);
        if (op == 142 && oout.n == 1) { /* VAR_HANDLE */
            fb_table_field(&ot, 4, &opt);
            int v = er_model_var(m, &opt);
            int32_t t = fb_vec_i32(&m->fb, &oout, 0);
            if (v < 0 || t < 0 || (uint32_t)t >= tensors.n) return bad(err, errlen, ER_ERR_MODEL_INVALID, "bad VAR_HANDLE in the init subgraph", &m->fb);
            handle_var[nh] = (int16_t)v;
            handle_tensor[nh++] = (uint32_t)t;
        } else if (op == 144 && oin.n == 2) { /* ASSIGN_VARIABLE of a constant */
            int32_t rt = fb_vec_i32(&m->fb, &oin, 0), vt = fb_vec_i32(&m->fb, &oin, 1);
            int v = -1;
            for (uint32_t h = 0; h < nh; h++) if ((int32_t)handle_tensor[h] == rt) v = handle_var[h];
            if (v < 0 || vt < 0 || (uint32_t)vt >= tensors.n || !fb_vector_table(&m->fb, &tensors, (uint32_t)vt, &tt))
                return bad(err, errlen, ER_ERR_MODEL_INVALID, "ASSIGN_VARIABLE in the init subgraph without its handle", &m->fb);
            er_tensor value;
            int rc = read_tensor(m, &buffers, &tt, &value, err, errlen, (uint32_t)vt);
            if (rc != ER_OK) return rc;
            if (!value.is_const) {
                snprintf(err, errlen, "the init subgraph may only assign constants");
                return ER_ERR_UNSUPPORTED_OP;
            }
            m->vars[v].init = value.cdata;
            if (m->vars[v].bytes && m->vars[v].bytes != value.bytes) {
                snprintf(err, errlen, "variable assigned %u and %u bytes", (unsigned)m->vars[v].bytes, (unsigned)value.bytes);
                return ER_ERR_MODEL_INVALID;
            }
            m->vars[v].bytes = value.bytes;
        } else {
            snprintf(err, errlen, "the init subgraph may only hold VAR_HANDLE and ASSIGN_VARIABLE (op %u is %s)", (unsigned)i, er_op_name(op));
            return ER_ERR_UNSUPPORTED_OP;
        }
    }
    return ER_OK;
}

uint8_t *er_model_tensor_data(er_model *m, int16_t ti) {
    er_tensor *t = &m->tensors[ti];
    return t->cdata ? (uint8_t *)(uintptr_t)t->cdata : er_arena + t->off;
}

int er_model_invoke(er_model *m, char *err, size_t errlen) {
    return er_model_invoke_profile(m, err, errlen, NULL, 0, 0, NULL);
}

int er_model_invoke_profile(er_model *m, char *err, size_t errlen, uint32_t (*clock)(void), uint32_t first,
                            uint32_t count, uint32_t *elapsed) {
    if (!m->loaded) {
        snprintf(err, errlen, "no model loaded");
        return ER_ERR_NO_MODEL;
    }
    for (uint32_t i = 0; i < m->n_ops; i++) {
        int timed = clock && i >= first && i - first < count;
        uint32_t t0 = timed ? clock() : 0;
        if (er_kernel_eval(m, &m->nodes[i]) != 0) {
            snprintf(err, errlen, "op %u (%s) failed", (unsigned)i, er_op_name(m->nodes[i].op));
            return ER_ERR_INVOKE_FAILED;
        }
        if (timed) elapsed[i - first] = clock() - t0;
    }
    return ER_OK;
}
