/* int8 kernels with TFLite's reference semantics (LiteRT BUILTIN_REF), op by op.
 *
 * prepare: check types and shapes (so eval never indexes outside a tensor), compute the
 * fixed-point multipliers, activation ranges and lookup tables. eval: integer loops only.
 * Requantization is MultiplyByQuantizedMultiplier: SaturatingRoundingDoublingHighMul followed by
 * a rounding (half away from zero) right shift -- TFLite's "double rounding". */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "caps.h"
#include "model.h"

/* ---- persistent memory for prepared data (no heap): taken downward from `top` in er_arena,
 * just below the model's tables; the activations are planned below what it used ------------ */
static uint32_t pool_top;

void er_pool_reset(uint32_t top) { pool_top = top & ~7u; }
uint32_t er_pool_top(void) { return pool_top; }

static void *pool_alloc(uint32_t bytes) {
    bytes = (bytes + 7u) & ~7u;
    if (bytes > pool_top) return NULL;
    pool_top -= bytes;
    return er_arena + pool_top;
}

void *er_kernel_alloc(uint32_t bytes) { return pool_alloc(bytes); }

/* ---- fixed point --------------------------------------------------------------------------- */
static int32_t srdhm(int32_t a, int32_t b) {
    if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
    int64_t ab = (int64_t)a * (int64_t)b;
    int64_t nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
    return (int32_t)((ab + nudge) / ((int64_t)1 << 31)); /* C division truncates toward zero */
}

static int32_t rdbpot(int32_t x, int32_t e) {
    if (e >= 32) return 0; /* any int32 divided by 2^32 or more rounds to 0 (a hostile RSQRT scale gets here) */
    int32_t mask = (int32_t)(((int64_t)1 << e) - 1);
    int32_t rem = x & mask;
    int32_t thr = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + (rem > thr ? 1 : 0);
}

int32_t er_mbqm(int32_t x, int32_t mult, int32_t shift) {
    int32_t left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    return rdbpot(srdhm((int32_t)((uint32_t)x << left), mult), right);
}

void er_quantize_multiplier(double real, int32_t *mult, int32_t *shift) {
    if (!(real > 0.0 && real < 1e300)) { /* zero, negative, NaN or infinite: no multiplier */
        *mult = 0;
        *shift = 0;
        return;
    }
    int e;
    double q = frexp(real, &e);
    int64_t qf = (int64_t)round(q * 2147483648.0);
    if (qf == ((int64_t)1 << 31)) {
        qf /= 2;
        e++;
    }
    if (e < -31) {
        e = 0;
        qf = 0;
    }
    if (e > 30) { /* as edgerun/ops/fixedpoint.py */
        e = 30;
        qf = ((int64_t)1 << 31) - 1;
    }
    *mult = (int32_t)qf;
    *shift = e;
}

static int32_t clampi(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* (int32_t)f without undefined behaviour for NaN or out-of-range values (hostile models and
 * inputs); identical to the plain cast for every value that fits. */
static int32_t f2i(float f) {
    if (!(f == f)) return 0;
    if (f >= 2147483520.0f) return INT32_MAX;
    if (f <= -2147483648.0f) return INT32_MIN;
    return (int32_t)f;
}

/* int32 sums with wrap-around instead of undefined overflow (only hostile shapes get there). */
static int32_t wadd(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }

/* ---- int8 dot product: sum(w[i] * (x[i] + xoff)) added to acc, wrapping like wadd -------------
 * On cores with the DSP extension (Cortex-M4/M7/M33: __ARM_FEATURE_DSP) four products per step
 * with two dual 16-bit multiply-accumulates (ACLE __smlad); the portable loop elsewhere or with
 * -DER_PORTABLE_KERNELS. Both are exact integer sums mod 2^32, so the outputs are identical. */
#if defined(__ARM_FEATURE_DSP) && !defined(ER_PORTABLE_KERNELS)
#include <arm_acle.h>
static int32_t dot_i8(const int8_t *w, const int8_t *x, int32_t n, int32_t xoff, int32_t acc) {
    const int16x2_t off = (int16x2_t)(((uint32_t)(uint16_t)xoff << 16) | (uint16_t)xoff);
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32_t wv, xv;
        memcpy(&wv, w + i, 4);
        memcpy(&xv, x + i, 4);
        const int16x2_t w02 = __sxtb16(wv), w13 = __sxtb16((wv >> 8) | (wv << 24));
        const int16x2_t x02 = __sadd16(__sxtb16(xv), off), x13 = __sadd16(__sxtb16((xv >> 8) | (xv << 24)), off);
        acc = __smlad(w02, x02, acc);
        acc = __smlad(w13, x13, acc);
    }
    for (; i < n; i++) acc = (int32_t)((uint32_t)acc + (uint32_t)((int32_t)w[i] * ((int32_t)x[i] + xoff)));
    return acc;
}
#define ER_KERNELS_DSP 1
#else
static int32_t dot_i8(const int8_t *w, const int8_t *x, int32_t n, int32_t xoff, int32_t acc) {
    for (int32_t i = 0; i < n; i++) acc = (int32_t)((uint32_t)acc + (uint32_t)((int32_t)w[i] * ((int32_t)x[i] + xoff)));
    return acc;
}
#define ER_KERNELS_DSP 0
#endif

/* ---- helpers -------------------------------------------------------------------------------- */
#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return ER_ERR_MODEL_INVALID; } while (0)
#define UNSUP(...) do { snprintf(err, errlen, __VA_ARGS__); return ER_ERR_UNSUPPORTED_OP; } while (0)

static er_tensor *tin(er_model *m, er_node *n, int k) { return k < n->n_in && n->in[k] >= 0 ? &m->tensors[n->in[k]] : NULL; }
static er_tensor *tout(er_model *m, er_node *n) { return &m->tensors[n->out]; }
static const int8_t *i8in(er_model *m, er_node *n, int k) { return (const int8_t *)er_model_tensor_data(m, n->in[k]); }
static int8_t *i8out(er_model *m, er_node *n) { return (int8_t *)er_model_tensor_data(m, n->out); }
static int32_t ld_i32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

static float scale_at(er_model *m, const er_tensor *t, uint32_t c) {
    return t->scales.n > 1 ? fb_vec_f32(&m->fb, &t->scales, c) : t->scale;
}

static int act_range_q(int32_t act, const er_tensor *out, int32_t qmin, int32_t qmax, int32_t *lo, int32_t *hi) {
    float s = out->scale;
    int32_t z = out->zp;
#define Q(f) wadd(z, f2i(roundf((f) / s)))
    switch (act) {
        case 0: *lo = qmin; *hi = qmax; return 1;
        case 1: *lo = qmin > Q(0.0f) ? qmin : Q(0.0f); *hi = qmax; return 1;
        case 2: *lo = qmin > Q(-1.0f) ? qmin : Q(-1.0f); *hi = qmax < Q(1.0f) ? qmax : Q(1.0f); return 1;
        case 3: *lo = qmin > Q(0.0f) ? qmin : Q(0.0f); *hi = qmax < Q(6.0f) ? qmax : Q(6.0f); return 1;
        default: return 0;
    }
#undef Q
}
static int act_range(int32_t act, const er_tensor *out, int32_t *lo, int32_t *hi) { return act_range_q(act, out, -128, 127, lo, hi); }
static int act_range16(int32_t act, const er_tensor *out, int32_t *lo, int32_t *hi) { return act_range_q(act, out, -32768, 32767, lo, hi); }

static int is_i8(const er_tensor *t) { return t && t->type == ER_TYPE_INT8 && t->scales.n >= 1; }
/* 16x8 activations: int16, per tensor, zero point 0 */
static int is_q16(const er_tensor *t) { return t && t->type == ER_TYPE_INT16 && t->scales.n == 1 && t->zp == 0; }

static int32_t out_size(int32_t padding, int32_t in, int32_t filter, int32_t stride, int32_t dil) {
    int32_t eff = (filter - 1) * dil + 1;
    if (padding == 0) return (in + stride - 1) / stride; /* SAME */
    return (in + stride - eff) / stride;                   /* VALID */
}

static int32_t pad_amount(int32_t in, int32_t filter, int32_t stride, int32_t dil, int32_t out) {
    int32_t eff = (filter - 1) * dil + 1;
    int32_t total = (out - 1) * stride + eff - in;
    return total > 0 ? total / 2 : 0;
}

static int per_channel(er_model *m, er_node *n, const er_tensor *in, const er_tensor *f, const er_tensor *out,
                       int32_t channels) {
    n->pc_mult = pool_alloc((uint32_t)channels * 4u);
    n->pc_shift = pool_alloc((uint32_t)channels * 4u);
    if (!n->pc_mult || !n->pc_shift) return 0;
    for (int32_t c = 0; c < channels; c++) {
        double real = (double)in->scale * (double)scale_at(m, f, (uint32_t)c) / (double)out->scale;
        er_quantize_multiplier(real, &n->pc_mult[c], &n->pc_shift[c]);
    }
    return 1;
}

/* ---- prepare ---------------------------------------------------------------------------------- */
static int prep_conv(er_model *m, er_node *n, char *err, size_t errlen, int depthwise) {
    er_tensor *in = tin(m, n, 0), *f = tin(m, n, 1), *b = tin(m, n, 2), *out = tout(m, n);
    const int w16 = in->type == ER_TYPE_INT16; /* 16x8: int16 activations, int8 weights, int64 bias */
    if (w16 ? (!is_q16(in) || !is_q16(out) || !is_i8(f)) : (!is_i8(in) || !is_i8(f) || !is_i8(out)))
        UNSUP("only int8 (or 16x8: int16 zero point 0) input and output with int8 filter are supported");
    if (in->ndim != 4 || f->ndim != 4 || out->ndim != 4) FAIL("tensors must be 4-D");
    if (!f->is_const) UNSUP("the filter must be constant");
    int32_t oc = out->dims[3];
    if (f->scales.n != 1 && f->scales.n != (uint32_t)(depthwise ? f->dims[3] : f->dims[0]))
        FAIL("filter has %u scales", (unsigned)f->scales.n);
    if (b && (!b->is_const || b->type != (w16 ? ER_TYPE_INT64 : ER_TYPE_INT32) || b->count != (uint32_t)oc))
        FAIL("bias must be %s[%d]", w16 ? "int64" : "int32", (int)oc);
    if (n->stride_w < 1 || n->stride_h < 1 || n->dil_w < 1 || n->dil_h < 1 || n->padding > 1 ||
        n->stride_w > 65535 || n->stride_h > 65535 || n->dil_w > 65535 || n->dil_h > 65535)
        FAIL("bad stride/dilation/padding");
    int32_t fh = f->dims[1], fw = f->dims[2];
    if (fh < 1 || fw < 1 || (int64_t)(fh - 1) * n->dil_h >= (1 << 24) || (int64_t)(fw - 1) * n->dil_w >= (1 << 24))
        FAIL("filter too large");
    if (depthwise) {
        if (f->dims[0] != 1 || f->dims[3] != oc) FAIL("filter shape must be [1, h, w, %d]", (int)oc);
        if (in->dims[3] == 0 || oc % in->dims[3]) FAIL("output channels are not a multiple of input channels");
        n->depth_mult = oc / in->dims[3];
    } else {
        if (f->dims[0] != oc || f->dims[3] != in->dims[3]) FAIL("filter shape does not match input/output channels");
    }
    if (out->dims[0] != in->dims[0]) FAIL("batch mismatch");
    int32_t oh = out_size(n->padding, in->dims[1], fh, n->stride_h, n->dil_h);
    int32_t ow = out_size(n->padding, in->dims[2], fw, n->stride_w, n->dil_w);
    if (oh != out->dims[1] || ow != out->dims[2]) FAIL("output is %dx%d, expected %dx%d", (int)out->dims[1], (int)out->dims[2], (int)oh, (int)ow);
    n->pad_h = pad_amount(in->dims[1], fh, n->stride_h, n->dil_h, oh);
    n->pad_w = pad_amount(in->dims[2], fw, n->stride_w, n->dil_w, ow);
    if (!(w16 ? act_range16 : act_range)(n->act, out, &n->act_min, &n->act_max)) UNSUP("fused activation %d", (int)n->act);
    if (!per_channel(m, n, in, f, out, oc)) FAIL("out of prepare memory");
    if (w16) {
        for (int32_t c = 0; c < oc; c++)
            if (n->pc_shift[c] > 14) FAIL("16x8 requantization scale (input x weight / output) is 2^14 or more");
        n->left_shift = f->scales.n > 1 ? 0 : f->zp; /* the weights' zero point (per-tensor only) */
    }
    return ER_OK;
}

static int prep_fc(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *f = tin(m, n, 1), *b = tin(m, n, 2), *out = tout(m, n);
    const int w16 = in->type == ER_TYPE_INT16;
    if (w16 ? (!is_q16(in) || !is_q16(out) || !is_i8(f)) : (!is_i8(in) || !is_i8(f) || !is_i8(out)))
        UNSUP("only int8 (or 16x8: int16 zero point 0) input and output with int8 weights are supported");
    if (f->ndim != 2 || !f->is_const) UNSUP("weights must be a constant 2-D tensor");
    int32_t units = f->dims[0], depth = f->dims[1];
    if (depth <= 0 || in->count % (uint32_t)depth) FAIL("input size %u is not a multiple of %d", (unsigned)in->count, (int)depth);
    uint32_t batches = in->count / (uint32_t)depth;
    uint64_t want = (uint64_t)batches * (uint64_t)(uint32_t)units; /* 2^21 x 2048 wraps in 32 bits */
    if (units <= 0 || (uint64_t)out->count != want)
        FAIL("output has %u elements, expected %llu", (unsigned)out->count, (unsigned long long)want);
    if (b && (!b->is_const || b->type != (w16 ? ER_TYPE_INT64 : ER_TYPE_INT32) || b->count != (uint32_t)units))
        FAIL("bias must be %s[%d]", w16 ? "int64" : "int32", (int)units);
    if (!(w16 ? act_range16 : act_range)(n->act, out, &n->act_min, &n->act_max)) UNSUP("fused activation %d", (int)n->act);
    if (f->scales.n > 1 && f->scales.n != (uint32_t)units) FAIL("weights have %u scales", (unsigned)f->scales.n);
    /* LiteRT's reference FC (since April 2025) requantizes in double precision:
     * y = round(double(acc) * double(s_x) * double(s_w[c]) / double(s_y)), half away from zero;
     * per-tensor weights keep their zero point, per-channel ones are symmetric */
    n->feff = pool_alloc((uint32_t)units * (uint32_t)sizeof(double));
    if (!n->feff) FAIL("out of prepare memory");
    for (int32_t c = 0; c < units; c++)
        n->feff[c] = (double)in->scale * (double)scale_at(m, f, f->scales.n > 1 ? (uint32_t)c : 0u) / (double)out->scale;
    n->left_shift = f->scales.n > 1 ? 0 : f->zp; /* the weights' zero point (per-tensor only) */
    return ER_OK;
}

static int prep_pool(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const int w16 = in->type == ER_TYPE_INT16;
    if (w16 ? (in->scales.n != 1 || out->type != ER_TYPE_INT16 || out->scales.n != 1) : (!is_i8(in) || !is_i8(out)))
        UNSUP("only int8 or per-tensor int16 is supported");
    if (w16 && (in->scale != out->scale || in->zp != out->zp)) FAIL("int16 pooling needs the input's scale and zero point on the output");
    if (in->ndim != 4 || out->ndim != 4) FAIL("tensors must be 4-D");
    if (n->stride_w < 1 || n->stride_h < 1 || n->filter_w < 1 || n->filter_h < 1 || n->padding > 1 ||
        n->stride_w > 65535 || n->stride_h > 65535 || n->filter_w > (1 << 24) || n->filter_h > (1 << 24))
        FAIL("bad pool options");
    int32_t oh = out_size(n->padding, in->dims[1], n->filter_h, n->stride_h, 1);
    int32_t ow = out_size(n->padding, in->dims[2], n->filter_w, n->stride_w, 1);
    if (out->dims[0] != in->dims[0] || out->dims[3] != in->dims[3] || oh != out->dims[1] || ow != out->dims[2])
        FAIL("output shape does not match the pool");
    n->pad_h = pad_amount(in->dims[1], n->filter_h, n->stride_h, 1, oh);
    n->pad_w = pad_amount(in->dims[2], n->filter_w, n->stride_w, 1, ow);
    if (!(w16 ? act_range16 : act_range)(n->act, out, &n->act_min, &n->act_max)) UNSUP("fused activation %d", (int)n->act);
    return ER_OK;
}

static int broadcastable(const er_tensor *a, const er_tensor *out) {
    if (a->ndim > out->ndim) return 0;
    for (int i = 0; i < a->ndim; i++) {
        int32_t d = a->dims[a->ndim - 1 - i], o = out->dims[out->ndim - 1 - i];
        if (d != o && d != 1) return 0;
    }
    return 1;
}

static int prep_binary(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *a = tin(m, n, 0), *b = tin(m, n, 1), *out = tout(m, n);
    const int w16 = n->n_in == 2 && a->type == ER_TYPE_INT16 && (n->op == 0 || n->op == 41 || n->op == 18);
    if (w16 ? (!b || b->type != ER_TYPE_INT16 || out->type != ER_TYPE_INT16 || a->scales.n != 1 || b->scales.n != 1 || out->scales.n != 1)
            : (n->n_in != 2 || !is_i8(a) || !is_i8(b) || !is_i8(out)))
        UNSUP("only int8 (ADD, SUB, MUL also per-tensor int16) inputs and output are supported");
    if (!broadcastable(a, out) || !broadcastable(b, out)) FAIL("input shapes do not broadcast to the output");
    for (int i = 0; i < out->ndim; i++) {
        int32_t da = i < out->ndim - a->ndim ? 1 : a->dims[i - (out->ndim - a->ndim)];
        int32_t db = i < out->ndim - b->ndim ? 1 : b->dims[i - (out->ndim - b->ndim)];
        int32_t want = da > db ? da : db;
        if (out->dims[i] != want) FAIL("output shape does not match the broadcast");
    }
    if (!(w16 ? act_range16 : act_range)(n->act, out, &n->act_min, &n->act_max)) UNSUP("fused activation %d", (int)n->act);
    n->flag2 = (uint8_t)w16;
    if (w16) { /* int16 ADD/SUB (general scales: 15-bit left shift onto 2 max(s1, s2)), MUL */
        if (n->op != 18 && n->flag1) UNSUP("int16 ADD/SUB with power-of-two scales (pot_scale_int16) is not supported");
        if (n->op == 18) {
            er_quantize_multiplier((double)(a->scale * b->scale / out->scale), &n->mult, &n->shift);
            return ER_OK;
        }
        n->left_shift = 15;
        const double twice_max = (double)(2.0f * (a->scale > b->scale ? a->scale : b->scale));
        er_quantize_multiplier((double)a->scale / twice_max, &n->mult1, &n->shift1);
        er_quantize_multiplier((double)b->scale / twice_max, &n->mult2, &n->shift2);
        er_quantize_multiplier(twice_max / (double)(32768.0f * out->scale), &n->mult, &n->shift);
        return ER_OK;
    }
    if (n->op == 0 || n->op == 41 || n->op == 99) { /* ADD, SUB, SQUARED_DIFFERENCE */
        n->left_shift = n->op == 99 ? 7 : 20;
        double twice_max = 2.0 * (double)(a->scale > b->scale ? a->scale : b->scale);
        er_quantize_multiplier((double)a->scale / twice_max, &n->mult1, &n->shift1);
        er_quantize_multiplier((double)b->scale / twice_max, &n->mult2, &n->shift2);
        if (n->op == 99)
            er_quantize_multiplier(twice_max * twice_max / (double)(16384.0f * out->scale), &n->mult, &n->shift);
        else
            er_quantize_multiplier(twice_max / ((double)(1 << 20) * (double)out->scale), &n->mult, &n->shift);
    } else if (n->op == 55 || n->op == 57) { /* MAXIMUM, MINIMUM: raw values */
    } else { /* MUL */
        double real = (double)a->scale * (double)b->scale / (double)out->scale;
        er_quantize_multiplier(real, &n->mult, &n->shift);
    }
    return ER_OK;
}

static int same_q(const er_tensor *a, const er_tensor *b) { return a->scale == b->scale && a->zp == b->zp; }

static int prep_mean(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *ax = tin(m, n, 1), *out = tout(m, n);
    if (!is_i8(in) || !is_i8(out)) UNSUP("only int8 is supported");
    if (!ax || !ax->is_const || ax->type != ER_TYPE_INT32 || ax->count == 0 || ax->count > ER_MAX_DIMS) FAIL("axis must be a constant int32 vector");
    uint32_t red = 0; /* bit mask of reduced axes */
    for (uint32_t i = 0; i < ax->count; i++) {
        int32_t a = ld_i32(ax->cdata + 4 * i);
        if (a < 0) a += in->ndim;
        if (a < 0 || a >= in->ndim) FAIL("axis %d out of range", (int)a);
        red |= 1u << a;
    }
    uint64_t expect = 1;
    for (int i = 0; i < in->ndim; i++) if (!(red & (1u << i))) expect *= (uint64_t)in->dims[i];
    if ((uint64_t)out->count != expect) FAIL("output has %u elements, expected %llu", (unsigned)out->count, (unsigned long long)expect);
    n->axis = (int32_t)red;
    if (out->count > ER_MEAN_MAX_OUTPUTS) UNSUP("MEAN with more than %d outputs", ER_MEAN_MAX_OUTPUTS);
    /* LiteRT 2.x reference (QuantizedMeanOrSum in integers): the multiplier of s_in/s_out
     * absorbs 1/n in fixed point: k = min(floor(log2 n), 32, 31 + e), m' = (m << k) / n,
     * e' = e - k; out = MBQM(sum(q) - zp_in * n, m', e') + zp_out. */
    int32_t mult, shift;
    er_quantize_multiplier((double)in->scale / (double)out->scale, &mult, &shift);
    uint32_t num = in->count / (out->count ? out->count : 1);
    int32_t k = 0;
    while (num >> (k + 1)) k++;
    if (k > 32) k = 32;
    if (k > 31 + shift) k = 31 + shift;
    int64_t mm = k >= 0 ? ((int64_t)mult << k) : ((int64_t)mult >> -k);
    n->mult = num ? (int32_t)(mm / (int64_t)num) : mult;
    n->shift = shift - k;
    n->mean_kind = 1;
    return ER_OK;
}

static int prep_softmax16(er_model *m, er_node *n, char *err, size_t errlen);
static int prep_softmax8to16(er_model *m, er_node *n, char *err, size_t errlen);

static int prep_softmax(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (in->type == ER_TYPE_INT16) return prep_softmax16(m, n, err, errlen);
    if (out->type == ER_TYPE_INT16) return prep_softmax8to16(m, n, err, errlen);
    if (!is_i8(in) || !is_i8(out)) UNSUP("only int8 is supported");
    if (in->count != out->count || in->ndim < 1) FAIL("shape mismatch");
    n->ftable = pool_alloc(256 * sizeof(float));
    if (!n->ftable) FAIL("out of prepare memory");
    const float scale = -in->scale * n->beta;
    for (int32_t v = 0; v <= 255; v++) n->ftable[255 - v] = expf(scale * (float)v);
    return ER_OK;
}

static int prep_relu(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (!is_i8(in) || !is_i8(out)) UNSUP("only int8 is supported");
    if (in->count != out->count) FAIL("shape mismatch");
    er_quantize_multiplier((double)(in->scale / out->scale), &n->mult, &n->shift);
    if (n->op == 20) { /* RELU_N1_TO_1: the fused-activation range [-1, 1] */
        act_range(2, out, &n->act_min, &n->act_max);
        return ER_OK;
    }
    n->act_min = clampi(wadd(out->zp, f2i(roundf(0.0f / out->scale))), -128, 127);
    n->act_max = n->op == 21 ? clampi(wadd(out->zp, f2i(roundf(6.0f / out->scale))), -128, 127) : 127;
    return ER_OK;
}

static int prep_quantize(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (in->count != out->count) FAIL("shape mismatch");
    if (n->op == 114) { /* QUANTIZE */
        if (out->type == ER_TYPE_UINT8 && out->scales.n == 1 && is_i8(in)) { /* int8 -> uint8 requantize */
            er_quantize_multiplier((double)in->scale / (double)out->scale, &n->mult, &n->shift);
            return ER_OK;
        }
        if (in->type == ER_TYPE_FLOAT32 && out->type == ER_TYPE_INT16 && out->scales.n == 1) return ER_OK;
        if (in->type == ER_TYPE_UINT8 && in->scales.n == 1 && is_i8(out) && out->scales.n == 1) { /* uint8 -> int8 */
            er_quantize_multiplier((double)in->scale / (double)out->scale, &n->mult, &n->shift);
            return ER_OK;
        }
        if ((in->type == ER_TYPE_INT16 || out->type == ER_TYPE_INT16) && in->scales.n == 1 && out->scales.n == 1) {
            /* int8 <-> int16 requantize (LiteRT: int16 -> int16 only with zero points 0) */
            if (in->type == ER_TYPE_INT16 && out->type == ER_TYPE_INT16 && (in->zp || out->zp))
                FAIL("int16 -> int16 requantization needs zero points 0");
            er_quantize_multiplier((double)in->scale / (double)out->scale, &n->mult, &n->shift);
            return ER_OK;
        }
        if (!is_i8(out) || out->scales.n != 1) UNSUP("output must be per-tensor int8");
        if (in->type == ER_TYPE_FLOAT32) return ER_OK;
        if (is_i8(in)) {
            er_quantize_multiplier((double)in->scale / (double)out->scale, &n->mult, &n->shift);
            return ER_OK;
        }
        UNSUP("input type %u", (unsigned)in->type);
    }
    if (in->type == ER_TYPE_INT16 && in->scales.n == 1 && out->type == ER_TYPE_FLOAT32) {
        if (in->zp != 0) FAIL("int16 dequantization needs zero point 0");
        return ER_OK;
    }
    if (in->type == ER_TYPE_UINT8 && in->scales.n == 1 && out->type == ER_TYPE_FLOAT32) return ER_OK;
    if (!is_i8(in) || in->scales.n != 1 || out->type != ER_TYPE_FLOAT32) UNSUP("only int8 -> float32");
    return ER_OK;
}

static int prep_copy(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (!in || in->bytes != out->bytes || in->type != out->type) FAIL("input and output sizes differ");
    return ER_OK;
}

static int prep_concat(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *out = tout(m, n);
    if (!is_i8(out)) UNSUP("only int8 is supported");
    int32_t axis = n->axis < 0 ? n->axis + out->ndim : n->axis;
    if (axis < 0 || axis >= out->ndim) FAIL("axis %d out of range", (int)n->axis);
    n->axis = axis;
    int32_t sum = 0;
    for (int k = 0; k < n->n_in; k++) {
        er_tensor *t = tin(m, n, k);
        if (!is_i8(t) || t->ndim != out->ndim) FAIL("input %d rank or type differs", k);
        if (!same_q(t, out)) UNSUP("inputs with a scale or zero point other than the output's");
        for (int d = 0; d < out->ndim; d++)
            if (d != axis && t->dims[d] != out->dims[d]) FAIL("input %d shape differs off the axis", k);
        sum += t->dims[axis];
    }
    if (sum != out->dims[axis]) FAIL("inputs do not add up to the output along the axis");
    if (n->act != 0) UNSUP("fused activation on CONCATENATION");
    return ER_OK;
}

static int prep_pad(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *p = tin(m, n, 1), *out = tout(m, n);
    if (!is_i8(in) || !is_i8(out)) UNSUP("only int8 is supported");
    if (!same_q(in, out)) FAIL("input and output quantization differ");
    if (!p || !p->is_const || p->type != ER_TYPE_INT32 || p->count != 2u * in->ndim || out->ndim != in->ndim)
        FAIL("paddings must be a constant int32 [%d, 2]", (int)in->ndim);
    for (int d = 0; d < in->ndim; d++) {
        int32_t lo = ld_i32(p->cdata + 8 * d), hi = ld_i32(p->cdata + 8 * d + 4);
        if (lo < 0 || hi < 0 || (int64_t)in->dims[d] + lo + hi != out->dims[d]) FAIL("paddings do not match the output shape");
    }
    n->act_min = out->zp; /* the pad value (reuses act_min) */
    if (n->op == 60 && tin(m, n, 2)) { /* PADV2 constant */
        er_tensor *c = tin(m, n, 2);
        if (!c->is_const || c->type != ER_TYPE_INT8 || c->count != 1) FAIL("pad value must be a constant int8 scalar");
        n->act_min = (int8_t)c->cdata[0];
    }
    return ER_OK;
}


/* ---- table-driven int8 activations: a 256-entry table from the exact integer (or float32
 * LUTPopulate) arithmetic of the reference kernel, one lookup per element in eval ------------ */
static int16_t srdhm16(int32_t a, int32_t b) {
    if (a == -32768 && b == -32768) return 32767;
    int32_t ab = a * b, s = ab + (ab >= 0 ? (1 << 14) : 1 - (1 << 14));
    return (int16_t)(s >= 0 ? s / (1 << 15) : -((-s) / (1 << 15)));
}
static int16_t sdhm16(int32_t a, int32_t b) {
    if (a == -32768 && b == -32768) return 32767;
    int32_t ab = a * b;
    return (int16_t)(ab >= 0 ? ab / (1 << 15) : -((-ab) / (1 << 15)));
}
static int32_t satl16(int32_t v, int32_t amount) {
    int64_t r = (int64_t)v * ((int64_t)1 << amount);
    return r > 32767 ? 32767 : (r < -32768 ? -32768 : (int32_t)r);
}
static int32_t down16(int32_t m32) { return m32 >= INT32_MAX - (1 << 15) ? 32767 : (m32 + (1 << 15)) >> 16; }

/* QuantizeMultiplier for a real multiplier of either sign (LEAKY_RELU's alpha may be negative) */
static void qm_signed(float real, int32_t *mult, int32_t *shift) {
    er_quantize_multiplier(fabs((double)real), mult, shift);
    if (real < 0) *mult = -*mult;
}

static int prep_lut(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (!is_i8(in) || !is_i8(out)) UNSUP("only int8 is supported");
    if (in->count != out->count) FAIL("shape mismatch");
    n->itable = pool_alloc(256);
    if (!n->itable) FAIL("out of prepare memory");
    const int32_t zi = in->zp, zo = out->zp;
    int32_t m_id = 0, s_id = 0, m_a = 0, s_a = 0, out_m16 = 0, out_exp = 0, rel_m16 = 0, rel_exp = 0;
    if (n->op == 98) { /* LEAKY_RELU (reference_ops::QuantizeLeakyRelu) */
        qm_signed(in->scale * n->beta / out->scale, &m_a, &s_a);
        er_quantize_multiplier((double)(in->scale / out->scale), &m_id, &s_id);
    } else if (n->op == 101) { /* ABS: |q - zi| rescaled by si/so unless the scales are equal */
        er_quantize_multiplier((double)(in->scale / out->scale), &m_id, &s_id);
    } else if (n->op == 117) { /* HARD_SWISH (reference_ops::HardSwish<int8_t>) */
        const float hires = (1.0f / 128.0f) * in->scale;
        int32_t m32;
        er_quantize_multiplier((double)(hires / out->scale), &m32, &out_exp);
        if (out_exp > 0) UNSUP("input/output scale ratio too large for int8 HARD_SWISH");
        out_m16 = down16(m32);
        er_quantize_multiplier((double)(hires / (3.0f / 32768.0f)), &m32, &rel_exp);
        rel_m16 = down16(m32);
    }
    const float inv = 1.0f / out->scale;
    for (int32_t v = -128; v <= 127; v++) {
        int32_t q;
        if (n->op == 14 || n->op == 28) { /* LOGISTIC, TANH: LUTPopulate in float32 */
            const float x = in->scale * (float)(v - zi);
            const float y = n->op == 14 ? 1.0f / (1.0f + expf(-x)) : tanhf(x);
            q = f2i(roundf(y * inv) + (float)zo);
        } else if (n->op == 47) { /* EXP: LiteRT's int8 table, saturating float -> int */
            const float y = expf(in->scale * (float)(v - zi)) * inv;
            float r = roundf(y) + (float)zo;
            r = r > 127.0f ? 127.0f : (r < -128.0f ? -128.0f : r);
            q = r == r ? (int32_t)r : 0;
        } else if (n->op == 101) {
            const int32_t d = v - zi < 0 ? zi - v : v - zi;
            q = in->scale == out->scale ? d + zo : wadd(er_mbqm(d, m_id, s_id), zo);
        } else if (n->op == 98) {
            const int32_t d = v - zi;
            q = wadd(d >= 0 ? er_mbqm(d, m_id, s_id) : er_mbqm(d, m_a, s_a), zo);
        } else { /* HARD_SWISH */
            const int32_t hi = (v - zi) * 128;
            const int32_t pre = srdhm16(hi, out_m16);
            int32_t r = hi;
            if (rel_exp > 0) r = satl16(r, rel_exp - 1);
            r = srdhm16(r, rel_m16);
            if (rel_exp > 0) r = satl16(r, 1);
            else if (rel_exp < 0) r = rdbpot(r, -rel_exp);
            r = (r + (1 << 15)) >> 1;
            int32_t o = rdbpot(sdhm16(r, pre), -out_exp);
            q = ((o + zo + (1 << 15)) & 0xFFFF) - (1 << 15);
        }
        n->itable[(uint8_t)(int8_t)v] = (int8_t)clampi(q, -128, 127);
    }
    return ER_OK;
}

static int prep_prelu(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *al = tin(m, n, 1), *out = tout(m, n);
    if (n->n_in != 2 || !is_i8(in) || !is_i8(al) || !is_i8(out)) UNSUP("only int8 input, alpha and output are supported");
    if (al->scales.n != 1) UNSUP("alpha must be quantized per tensor");
    if (!broadcastable(al, out) || !broadcastable(in, out) || in->ndim != out->ndim || in->count != out->count)
        FAIL("alpha does not broadcast to the input shape");
    for (int i = 0; i < in->ndim; i++) if (in->dims[i] != out->dims[i]) FAIL("output shape differs from the input");
    er_quantize_multiplier((double)(in->scale / out->scale), &n->mult1, &n->shift1);
    er_quantize_multiplier((double)(in->scale * al->scale / out->scale), &n->mult2, &n->shift2);
    return ER_OK;
}

/* ---- gemmlowp fixed point for DIV, RSQRT and LOG_SOFTMAX (TFLite's reference arithmetic; int32
 * values, wrapping where C++'s FixedPoint operators wrap) ------------------------------------ */
static int32_t clz32(uint32_t x) {
    if (!x) return 32;
#if defined(__GNUC__)
    return (int32_t)__builtin_clz(x); /* one CLZ instruction on Cortex-M3 and up */
#else
    int32_t n = 0;
    while (!(x & 0x80000000u)) { x <<= 1; n++; }
    return n;
#endif
}
static int32_t clrsb32(int32_t x) { return x >= 0 ? clz32((uint32_t)x) - 1 : clz32(~(uint32_t)x) - 1; }
static int32_t wsub(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
static int32_t rdbpot64(int64_t x, int32_t e) { /* RoundingDivideByPOT on a 64-bit value, result narrowed */
    const int64_t mask = ((int64_t)1 << e) - 1, rem = x & mask, thr = (mask >> 1) + (x < 0 ? 1 : 0);
    return (int32_t)((x >> e) + (rem > thr ? 1 : 0));
}
/* SaturatingRoundingMultiplyByPOT(Param): left shift saturating, right shift rounding */
static int32_t srmbpot(int32_t x, int32_t e) {
    if (e <= 0) return e == 0 ? x : rdbpot(x, -e);
    const int64_t thr = ((int64_t)1 << (31 - e)) - 1;
    if (x > thr) return INT32_MAX;
    if (x < -thr) return INT32_MIN;
    return (int32_t)((uint32_t)x << e);
}
static int32_t rounding_half_sum(int32_t a, int32_t b) {
    const int64_t s = (int64_t)a + b, t = s + (s >= 0 ? 1 : -1);
    return (int32_t)(t / 2);
}
/* one_over_one_plus_x_for_x_in_0_1: Q0.31 in, Q0.31 out (Newton-Raphson, three steps in Q2.29) */
static int32_t one_over_one_plus_x(int32_t a) {
    const int32_t half_den = rounding_half_sum(a, INT32_MAX);
    int32_t x = wadd(1515870810, srdhm(half_den, -1010580540));
    for (int i = 0; i < 3; i++) {
        const int32_t one_minus = wsub(1 << 29, srdhm(half_den, x));
        x = wadd(x, srmbpot(srdhm(x, one_minus), 2));
    }
    return srmbpot(x, 1);
}
/* GetInvSqrtQuantizedMultiplierExp (reverse_shift -1) of a value >= 0 */
static void inv_sqrt_multiplier(int32_t v, int32_t *mult, int32_t *shift) {
    if (v <= 1) { *mult = INT32_MAX; *shift = 0; return; }
    int32_t sh = 11;
    while (v >= (1 << 29)) { v /= 4; sh++; }
    const int32_t pairs = (clz32((uint32_t)v) - 1) / 2 - 1;
    sh -= pairs;
    v = (int32_t)((uint32_t)v << (2 * pairs));
    const int32_t half = rdbpot(v >> 1, 1), half_three = (1 << 28) + (1 << 27);
    int32_t r = 1 << 28;
    for (int i = 0; i < 5; i++) {
        const int32_t x3 = srmbpot(srdhm(srdhm(r, r), r), 6);
        r = srmbpot(wsub(srdhm(half_three, r), srdhm(half, x3)), 3);
    }
    r = srdhm(r, 1518500250); /* sqrt(2) / 2 */
    if (sh < 0) { r = (int32_t)((uint32_t)r << -sh); sh = 0; }
    *mult = r;
    *shift = -sh;
}
/* exp(a) for a in [-1/4, 0), Q0.31 */
static int32_t exp_quarter(int32_t a) {
    const int32_t c = 1895147668, third = 715827883;
    const int32_t x = wadd(a, 1 << 28), x2 = srdhm(x, x), x3 = srdhm(x2, x), x4 = srdhm(x2, x2);
    const int32_t poly = rdbpot(wadd(srdhm(wadd(rdbpot(x4, 2), x3), third), x2), 1);
    return wadd(c, srdhm(c, wadd(x, poly)));
}
/* exp_on_negative_values for Q5.26 input (kScaledDiffIntegerBits = 5), Q0.31 result */
static int32_t exp_neg_q5(int32_t a) {
    static const int32_t barrel[7] = {1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242};
    const int32_t quarter = 1 << 24;
    const int32_t amq = wsub(a & (quarter - 1), quarter);
    int32_t r = exp_quarter(srmbpot(amq, 5));
    const int32_t rem = wsub(amq, a);
    for (int k = 0; k < 7; k++)
        if (rem & (1 << (24 + k))) r = srdhm(r, barrel[k]);
    return a == 0 ? INT32_MAX : r;
}
/* log_x_for_x_greater_than_or_equal_to_1_impl: Q12.19 in, Q5.26 out */
static int32_t log_q12_to_q5(int32_t za) {
    const int32_t log_2 = 1488522236, sqrt_sqrt_half = 1805811301, sqrt_half = 1518500250;
    const int32_t alpha_n = 117049297, alpha_d = 127690142, alpha_i = 1057819769, alpha_f = 638450708;
    const int32_t quarter6 = 1 << 23; /* 1/4 in Q6.25 */
    const int32_t ha1 = clz32((uint32_t)za);
    const int32_t ra = srmbpot(srdhm(srmbpot(za, ha1 - 1), sqrt_half), 1);
    int64_t t = (int64_t)srmbpot(12 - ha1, 25) + quarter6;
    const int32_t za_adj = (int32_t)(t > INT32_MAX ? INT32_MAX : (t < INT32_MIN ? INT32_MIN : t));
    const int32_t zb = srdhm(za, sqrt_half), hb = clz32((uint32_t)zb) - 1;
    const int32_t rb = srmbpot(za, hb);
    t = (int64_t)srmbpot(12 - hb, 25) - quarter6;
    const int32_t zb_adj = (int32_t)(t > INT32_MAX ? INT32_MAX : (t < INT32_MIN ? INT32_MIN : t));
    const int32_t r = ra < rb ? ra : rb, adj = za_adj > zb_adj ? za_adj : zb_adj;
    const int32_t p = rounding_half_sum(r, sqrt_sqrt_half);
    int32_t q = wsub(r, sqrt_sqrt_half);
    q = wadd(q, q);
    const int32_t sq = srdhm(q, q);
    const int32_t num = wadd(srdhm(q, r), srdhm(srdhm(q, sq), alpha_n));
    const int32_t den = wadd(srdhm(p, wadd(wadd(alpha_i, q), srdhm(alpha_d, sq))), srdhm(alpha_f, q));
    const int32_t total = wadd(srdhm(adj, log_2), srdhm(rdbpot(num, 6), one_over_one_plus_x(den)));
    return srmbpot(total, 1);
}

/* (int32_t)f as LiteRT's x86 build executes it (cvttss2si): INT32_MIN for NaN and out of range */
static int32_t f2i_x86(float f) {
    if (!(f > -2147483648.0f && f < 2147483648.0f)) return INT32_MIN;
    return (int32_t)f;
}

/* SQRT, RSQRT (int8): 256-entry tables; inputs below the zero point fail the invoke, as in LiteRT */
static int prep_sqrt(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (!is_i8(in) || !is_i8(out) || in->scales.n != 1 || out->scales.n != 1) UNSUP("only per-tensor int8 is supported");
    if (in->count != out->count) FAIL("shape mismatch");
    n->itable = pool_alloc(256);
    if (!n->itable) FAIL("out of prepare memory");
    const int32_t zi = in->zp, zo = out->zp;
    int32_t mo = 0, so = 0;
    if (n->op == 76) /* RSQRT: 1 / (sqrt(s_in) * s_out), the product in float32 */
        er_quantize_multiplier(1.0 / (double)(sqrtf(in->scale) * out->scale), &mo, &so);
    for (int32_t v = -128; v <= 127; v++) {
        int32_t q;
        if (n->op == 75) { /* SQRT: float32, truncated */
            const float y = sqrtf(in->scale * (float)(v - zi)) / out->scale;
            q = wadd(f2i_x86(y), zo);
        } else if (v <= zi) {
            q = 127; /* 1/sqrt(0); below zero the invoke fails before the table is read */
        } else { /* RSQRT: 1/sqrt(q - zi) in fixed point with 20 extra bits, then rescaled */
            int32_t im, is;
            inv_sqrt_multiplier(v - zi, &im, &is);
            q = wadd(er_mbqm(er_mbqm(1, im, is + 20), mo, so - 20), zo);
        }
        n->itable[(uint8_t)(int8_t)v] = (int8_t)clampi(q, -128, 127);
    }
    return ER_OK;
}

/* DIV (int8, broadcasting): gemmlowp reciprocal of the divisor; a zero divisor fails the invoke */
static int prep_div(er_model *m, er_node *n, char *err, size_t errlen) {
    int rc = prep_binary(m, n, err, errlen);
    if (rc != ER_OK) return rc;
    er_tensor *a = tin(m, n, 0), *b = tin(m, n, 1), *out = tout(m, n);
    if (a->scales.n != 1 || b->scales.n != 1 || out->scales.n != 1) UNSUP("only per-tensor int8 is supported");
    er_quantize_multiplier((double)(a->scale / (b->scale * out->scale)), &n->mult, &n->shift);
    /* GetReciprocal(|q - zb|, 31) depends on the divisor's byte only: tabulated (Q0.31, shift) */
    n->pc_mult = pool_alloc(256 * 4);
    n->pc_shift = pool_alloc(256 * 4);
    if (!n->pc_mult || !n->pc_shift) FAIL("out of prepare memory");
    for (int32_t q = -128; q <= 127; q++) {
        const int32_t v = q - b->zp < 0 ? b->zp - q : q - b->zp, k = (uint8_t)(int8_t)q;
        if (v == 0) { n->pc_mult[k] = n->pc_shift[k] = 0; continue; } /* a zero divisor fails the invoke */
        const int32_t hp1 = clz32((uint32_t)v);
        n->pc_mult[k] = one_over_one_plus_x((int32_t)(((uint32_t)v << hp1) - 0x80000000u));
        n->pc_shift[k] = 31 - hp1;
    }
    return ER_OK;
}

/* (q1 - z1) / (q2 - z2) with the divisor's reciprocal `inv` / `recip_shift` from the table */
static int32_t div_i8(int32_t v1, int32_t v2, int32_t inv, int32_t recip_shift, int32_t mult, int32_t shift) {
    if (v2 < 0) v1 = -v1;
    const int32_t head = clrsb32(v1);
    const int32_t unscaled = srdhm((int32_t)((uint32_t)v1 << head), inv);
    const int32_t total = shift - recip_shift - head;
    const int32_t x = srdhm(unscaled, mult), e = total < 0 ? -total : 0;
    /* RoundingDivideByPOT as LiteRT's x86 build executes it for exponents of 32 and more (the
     * int32 shift count is taken mod 32; edgerun/ops/elementwise.py) */
    if (e >= 32) return (x >> (e & 31)) + (x >= 0 ? 1 : 0);
    return rdbpot(x, e);
}

/* SUM (int8): MEAN's integer path without the 1/n (reference_ops::QuantizedMeanOrSum) */
static int prep_sum(er_model *m, er_node *n, char *err, size_t errlen) {
    int rc = prep_mean(m, n, err, errlen);
    if (rc != ER_OK) return rc;
    er_quantize_multiplier((double)tin(m, n, 0)->scale / (double)tout(m, n)->scale, &n->mult, &n->shift);
    return ER_OK;
}

/* LOG_SOFTMAX (int8): TFLite's fixed-point kernel. Everything up to the row sum depends on the
 * difference to the row maximum (0..255): two tables of it (Q5.26 scaled difference, Q12.19
 * exponential); per row one fixed-point log. Output scale 16/256, zero point 127. */
static int prep_log_softmax(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (!is_i8(in) || !is_i8(out) || in->scales.n != 1 || out->scales.n != 1) UNSUP("only per-tensor int8 is supported");
    if (in->count != out->count || in->ndim < 1) FAIL("shape mismatch");
    if (out->scale != 16.0f / 256.0f || out->zp != 127) FAIL("int8 LOG_SOFTMAX needs output scale 16/256 and zero point 127");
    double real = (double)in->scale * (double)(1 << 26);
    if (real > 2147483647.0) real = 2147483647.0;
    if (!(real > 1.0)) UNSUP("input scale too small for the int8 LOG_SOFTMAX kernel");
    int32_t mult, shift;
    er_quantize_multiplier(real, &mult, &shift);
    const int32_t diff_min = -(int32_t)floor(31.0 * (double)(1 << 26) / (double)((int64_t)1 << shift));
    const double reverse = (double)((int64_t)1 << (31 - shift)) / (double)mult;
    er_quantize_multiplier(reverse, &n->mult1, &n->shift1);
    if (!(reverse > 0.0 && reverse < 1.0) || n->shift1 > 0) UNSUP("input scale out of range for the int8 LOG_SOFTMAX kernel");
    n->act_min = diff_min;
    n->pc_mult = pool_alloc(256 * 4); /* scaled difference, by max - x */
    n->pc_shift = pool_alloc(256 * 4); /* its exponential in Q12.19 (0 where TFLite skips it) */
    if (!n->pc_mult || !n->pc_shift) FAIL("out of prepare memory");
    for (int32_t d = 0; d < 256; d++) {
        const int valid = -d >= diff_min;
        const int32_t s = srdhm(valid ? (int32_t)((int64_t)-d * ((int64_t)1 << shift)) : 0, mult);
        n->pc_mult[d] = s;
        n->pc_shift[d] = valid ? srmbpot(exp_neg_q5(s), -12) : 0;
    }
    return ER_OK;
}

/* CAST: C conversion of each value (no quantization); SHAPE: the input's dimensions */
static int prep_cast_shape(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (n->op == 77) {
        if (out->ndim != 1 || out->count != (uint32_t)in->ndim) FAIL("SHAPE output must be [%d]", (int)in->ndim);
        return ER_OK;
    }
    if (in->count != out->count) FAIL("shape mismatch");
    return ER_OK;
}

/* ---- SOFTMAX int8 -> int16 (reference_ops::Softmax, gemmlowp fixed point): exp of the Q5.26
 * scaled difference to the row maximum (a 256-entry Q0.31 table and its Q12.19 summand), the
 * row sum's reciprocal (GetReciprocal), output value * 2^16 - 32768 ------------------------- */
static int prep_softmax8to16(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (!is_i8(in) || in->scales.n != 1 || out->type != ER_TYPE_INT16) UNSUP("SOFTMAX takes int8 -> int8 or int16");
    if (in->count != out->count || in->ndim < 1) FAIL("shape mismatch");
    double real = (double)n->beta * (double)in->scale * (double)(1 << 26);
    if (real > 2147483647.0) real = 2147483647.0;
    if (!(real > 1.0)) UNSUP("beta * input scale too small for the int8 SOFTMAX kernel");
    int32_t mult, shift;
    er_quantize_multiplier(real, &mult, &shift);
    const int32_t diff_min = -(int32_t)floor(31.0 * (double)(1 << 26) / (double)((int64_t)1 << shift));
    n->pc_mult = pool_alloc(256 * 4);  /* exp, Q0.31, by max - x (0 where TFLite skips the entry) */
    n->pc_shift = pool_alloc(256 * 4); /* the same in Q12.19, the row sum's summand */
    if (!n->pc_mult || !n->pc_shift) FAIL("out of prepare memory");
    for (int32_t d = 0; d < 256; d++) {
        const int valid = -d >= diff_min;
        const int32_t e = valid ? exp_neg_q5(srdhm((int32_t)((int64_t)-d * ((int64_t)1 << shift)), mult)) : 0;
        n->pc_mult[d] = e;
        n->pc_shift[d] = valid ? srmbpot(e, -12) : 0;
    }
    return ER_OK;
}

static void eval_softmax8to16(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0);
    const int8_t *x = i8in(m, n, 0);
    uint8_t *y = er_model_tensor_data(m, n->out);
    const int32_t depth = in->dims[in->ndim - 1];
    if (depth <= 0) return;
    const uint32_t rows = in->count / (uint32_t)depth;
    for (uint32_t r = 0; r < rows; r++, x += depth, y += 2 * (size_t)depth) {
        int32_t mx = -128, total = 0;
        for (int32_t j = 0; j < depth; j++) if (x[j] > mx) mx = x[j];
        for (int32_t j = 0; j < depth; j++) total = wadd(total, n->pc_shift[mx - x[j]]);
        const int32_t hp1 = clz32((uint32_t)total); /* GetReciprocal(total, 12) */
        const int32_t recip = one_over_one_plus_x((int32_t)(((uint64_t)(uint32_t)total << hp1) - 0x80000000u));
        const int32_t exponent = 12 - hp1 + 15; /* + 31 - 16 output bits */
        const int64_t half = exponent > 0 ? ((int64_t)1 << exponent) >> 1 : 0;
        for (int32_t j = 0; j < depth; j++) {
            int64_t o = ((int64_t)n->pc_mult[mx - x[j]] * recip + ((int64_t)1 << 30)) >> 31;
            o = exponent > 0 ? (o + half) >> exponent : o;
            o -= 32768;
            const int16_t q = (int16_t)(o > 32767 ? 32767 : (o < -32768 ? -32768 : o));
            memcpy(y + 2 * (size_t)j, &q, 2);
        }
    }
}

/* ---- int16 SOFTMAX (reference_ops::SoftmaxInt16): exp(x - max) and 1 / (1 + x) from TFLite's
 * 513-entry int16 interpolation tables (gen_lut, built in double), output scale 1/32768 -------- */
static double rnd_away(double v) { return v < 0 ? -floor(-v + 0.5) : floor(v + 0.5); }
static double lut_fn(int recip, double x) { return recip ? 1.0 / (1.0 + x) : exp(x); }
static void int16_lut(int recip, double lo, double hi, int16_t *lut) {
    const double step = (hi - lo) / 512.0, half = step / 2.0, k = 32768.0;
    for (int i = 0; i < 512; i++) {
        const double x = lo + (double)i * step;
        const double val = lut_fn(recip, x), mid_v = lut_fn(recip, x + half), next = lut_fn(recip, lo + (double)(i + 1) * step);
        const double sample = rnd_away(val * k);
        const double interp = rnd_away((next * k + rnd_away(val * k)) / 2.0);
        const double bias = rnd_away((interp - rnd_away(mid_v * k)) / 2.0);
        const double v = sample - bias;
        lut[i] = (int16_t)(v > 32767.0 ? 32767 : (v < -32768.0 ? -32768 : (int32_t)v));
    }
    const double last = rnd_away(lut_fn(recip, hi) * k);
    lut[512] = (int16_t)(last > 32767.0 ? 32767 : (last < -32768.0 ? -32768 : (int32_t)last));
}
static int32_t lut16(int32_t v, const int16_t *lut) {
    const int32_t idx = 256 + (v >> 7), off = v & 0x7f, base = lut[idx], slope = lut[idx + 1] - base;
    return base + ((slope * off + 64) >> 7);
}

static int prep_softmax16(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (out->type != ER_TYPE_INT16 || in->scales.n != 1 || out->scales.n != 1) UNSUP("int16 SOFTMAX writes per-tensor int16");
    if (in->count != out->count || in->ndim < 1) FAIL("shape mismatch");
    if (in->dims[in->ndim - 1] > 65536) UNSUP("int16 SOFTMAX rows longer than 65536 (the int32 sum of exponentials)");
    if (in->zp != 0 || out->zp != 0) FAIL("int16 SOFTMAX needs zero points 0");
    if (fabs((double)out->scale - 1.0 / 32768.0) > 1e-12) FAIL("int16 SOFTMAX output scale must be 1/32768");
    er_quantize_multiplier((double)in->scale * (double)n->beta / (10.0 / 65535.0), &n->mult, &n->shift);
    int16_t *t = pool_alloc(2 * 513 * sizeof(int16_t));
    if (!t) FAIL("out of prepare memory");
    int16_lut(0, -10.0, 0.0, t);
    int16_lut(1, 0.0, 1.0, t + 513);
    n->view = t; /* (view is otherwise used by the data-movement ops only) */
    return ER_OK;
}

static int32_t exp16_at(const uint8_t *x, int32_t j, int32_t mx, const er_node *n, const int16_t *exp_lut) {
    int16_t v;
    memcpy(&v, x + 2 * (size_t)j, 2);
    return lut16(clampi(wadd(er_mbqm((int32_t)v - mx, n->mult, n->shift), 32767), -32768, 32767), exp_lut);
}

static void eval_softmax16(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0);
    const int16_t *exp_lut = (const int16_t *)n->view, *recip_lut = exp_lut + 513;
    const uint8_t *x = er_model_tensor_data(m, n->in[0]);
    uint8_t *y = er_model_tensor_data(m, n->out);
    const int32_t depth = in->dims[in->ndim - 1];
    if (depth <= 0) return;
    const uint32_t rows = in->count / (uint32_t)depth;
    for (uint32_t r = 0; r < rows; r++, x += 2 * (size_t)depth, y += 2 * (size_t)depth) {
        int32_t mx = -32768;
        int64_t total = 0;
        for (int32_t j = 0; j < depth; j++) { int16_t v; memcpy(&v, x + 2 * j, 2); if (v > mx) mx = v; }
        for (int32_t j = 0; j < depth; j++) total += exp16_at(x, j, mx, n, exp_lut);
        int32_t log2t = 0; /* headroom = CountLeadingZeros of the (uint32) sum */
        while (total >> (log2t + 1)) log2t++;
        const int32_t headroom = 31 - log2t, right = 31 - headroom;
        const int64_t shifted = ((total << (headroom - 1)) + (1 << 13)) >> 14;
        const int64_t ss = shifted - ((1 << 15) + (1 << 16));
        const int32_t recip = lut16((int32_t)(ss > 32767 ? 32767 : (ss < -32768 ? -32768 : ss)), recip_lut);
        for (int32_t j = 0; j < depth; j++) {
            const int64_t o = ((int64_t)exp16_at(x, j, mx, n, exp_lut) * recip + ((int64_t)1 << (right - 1))) >> right;
            const int16_t q = (int16_t)(o < 0 ? 0 : (o > 32767 ? 32767 : o));
            memcpy(y + 2 * j, &q, 2);
        }
    }
}

/* ---- data movement as a strided view: out[i0..ik] = in[off + sum(i_d * stride_d)] --------- */
typedef struct {
    int32_t nd, off;
    int32_t dims[ER_MAX_DIMS], stride[ER_MAX_DIMS];
} er_view;

static uint32_t esize(const er_tensor *t) { return t->count ? t->bytes / t->count : 0; }

static void strides_of(const er_tensor *t, int32_t *st) {
    int32_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) { st[d] = s; s *= t->dims[d]; }
}

/* check a view stays inside `in` and covers `out` exactly; store it in the node */
static int set_view(er_node *n, const er_view *v, const er_tensor *in, const er_tensor *out, char *err, size_t errlen) {
    int64_t lo = v->off, hi = v->off, count = 1;
    for (int d = 0; d < v->nd; d++) {
        if (v->dims[d] < 1) FAIL("empty slice");
        int64_t span = (int64_t)(v->dims[d] - 1) * v->stride[d];
        if (span < 0) lo += span; else hi += span;
        count *= v->dims[d];
    }
    if (lo < 0 || hi >= (int64_t)in->count) FAIL("slice reaches outside the input");
    if (count != (int64_t)out->count) FAIL("output has %u elements, the slice %lld", (unsigned)out->count, (long long)count);
    if (esize(in) != esize(out) || in->type != out->type) FAIL("input and output types differ");
    er_view *p = pool_alloc(sizeof *p);
    if (!p) FAIL("out of prepare memory");
    *p = *v;
    n->view = p;
    return ER_OK;
}

static int const_ints(const er_tensor *t, int32_t *out, uint32_t max, uint32_t *n) {
    if (!t || !t->is_const || (t->type != ER_TYPE_INT32 && t->type != ER_TYPE_INT64) || t->count > max) return 0;
    for (uint32_t i = 0; i < t->count; i++) {
        if (t->type == ER_TYPE_INT32) out[i] = ld_i32(t->cdata + 4 * i);
        else {
            int64_t v;
            memcpy(&v, t->cdata + 8 * i, 8);
            if (v < INT32_MIN || v > INT32_MAX) return 0;
            out[i] = (int32_t)v;
        }
    }
    *n = t->count;
    return 1;
}

static int prep_transpose(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    int32_t perm[ER_MAX_DIMS], st[ER_MAX_DIMS];
    uint32_t np;
    if (!const_ints(tin(m, n, 1), perm, ER_MAX_DIMS, &np) || np != in->ndim || out->ndim != in->ndim)
        FAIL("perm must be a constant int32 vector of the input's rank");
    strides_of(in, st);
    er_view v = {.nd = in->ndim, .off = 0};
    uint32_t seen = 0;
    for (int i = 0; i < in->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= in->ndim || (seen & (1u << perm[i]))) FAIL("perm is not a permutation");
        seen |= 1u << perm[i];
        v.dims[i] = in->dims[perm[i]];
        v.stride[i] = st[perm[i]];
        if (out->dims[i] != v.dims[i]) FAIL("output shape does not follow perm");
    }
    return set_view(n, &v, in, out, err, errlen);
}

static int prep_slice(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    int32_t b[ER_MAX_DIMS], e[ER_MAX_DIMS], s[ER_MAX_DIMS], st[ER_MAX_DIMS];
    uint32_t nb, ne, ns = 0;
    const int strided = n->op == 45;
    if (!const_ints(tin(m, n, 1), b, ER_MAX_DIMS, &nb) || !const_ints(tin(m, n, 2), e, ER_MAX_DIMS, &ne) ||
        (strided && !const_ints(tin(m, n, 3), s, ER_MAX_DIMS, &ns)) || nb != in->ndim || ne != in->ndim ||
        (strided && ns != in->ndim))
        FAIL("begin/%s%s must be constant int32 vectors of the input's rank", strided ? "end" : "size", strided ? "/strides" : "");
    if (strided && (n->mask[2] || n->mask[3])) UNSUP("ellipsis and new-axis masks");
    strides_of(in, st);
    er_view v = {.nd = in->ndim, .off = 0};
    int od = 0;
    for (int d = 0; d < in->ndim; d++) {
        const int64_t dim = in->dims[d];
        int64_t start, stop, stride = strided ? s[d] : 1, cnt;
        if (stride == 0) FAIL("stride 0");
        if (strided) { /* strided_slice_logic.h StartForAxis / StopForAxis */
            start = b[d];
            if (n->mask[0] & (1 << d)) start = stride > 0 ? INT32_MIN : INT32_MAX;
            if (start < 0) start += dim;
            start = stride > 0 ? (start < 0 ? 0 : (start > dim ? dim : start)) : (start < -1 ? -1 : (start > dim - 1 ? dim - 1 : start));
            if (n->mask[4] & (1 << d)) stop = start + 1;
            else {
                stop = e[d];
                if (n->mask[1] & (1 << d)) stop = stride > 0 ? INT32_MAX : INT32_MIN;
                if (stop < 0) stop += dim;
                stop = stride > 0 ? (stop < 0 ? 0 : (stop > dim ? dim : stop)) : (stop < -1 ? -1 : (stop > dim - 1 ? dim - 1 : stop));
            }
            cnt = stride > 0 ? (stop - start + stride - 1) / stride : (start - stop - stride - 1) / -stride;
        } else {
            start = b[d];
            cnt = e[d] == -1 ? dim - start : e[d];
            if (start < 0 || cnt < 0 || start + cnt > dim) FAIL("slice outside the input");
        }
        if (cnt < 1) FAIL("empty slice");
        v.dims[d] = (int32_t)cnt;
        v.stride[d] = (int32_t)(stride * st[d]);
        v.off += (int32_t)(start * st[d]);
        if (strided && (n->mask[4] & (1 << d))) {
            if (cnt != 1) FAIL("shrunk axis of size %lld", (long long)cnt);
            continue;
        }
        if (od >= out->ndim || out->dims[od] != cnt) FAIL("output shape does not match the slice");
        od++;
    }
    if (od != out->ndim) FAIL("output rank does not match the slice");
    return set_view(n, &v, in, out, err, errlen);
}

static int prep_space_depth(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const int32_t b = n->alpha_i;
    if (in->ndim != 4 || out->ndim != 4) FAIL("tensors must be 4-D");
    if (b < 1 || b > 4096) FAIL("block size %d", (int)b);
    const int32_t N = in->dims[0], H = in->dims[1], W = in->dims[2], C = in->dims[3];
    er_view v = {.nd = 6, .off = 0};
    if (n->op == 5) { /* DEPTH_TO_SPACE: out[N, H*b, W*b, C/(b*b)] */
        if (C % (b * b)) FAIL("channels not divisible by block^2");
        const int32_t co = C / (b * b);
        if (out->dims[0] != N || out->dims[1] != H * b || out->dims[2] != W * b || out->dims[3] != co) FAIL("output shape");
        const int32_t d[6] = {N, H, b, W, b, co}, s[6] = {H * W * C, W * C, b * co, C, co, 1};
        memcpy(v.dims, d, sizeof d);
        memcpy(v.stride, s, sizeof s);
    } else { /* SPACE_TO_DEPTH: out[N, H/b, W/b, C*b*b] */
        if (H % b || W % b) FAIL("height/width not divisible by block");
        if (out->dims[0] != N || out->dims[1] != H / b || out->dims[2] != W / b || (int64_t)out->dims[3] != (int64_t)C * b * b) FAIL("output shape");
        const int32_t d[6] = {N, H / b, W / b, b, b, C}, s[6] = {H * W * C, b * W * C, b * C, W * C, C, 1};
        memcpy(v.dims, d, sizeof d);
        memcpy(v.stride, s, sizeof s);
    }
    return set_view(n, &v, in, out, err, errlen);
}

static int prep_resize_nn(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    int32_t sz[2];
    uint32_t ns;
    if (in->ndim != 4 || out->ndim != 4 || !const_ints(tin(m, n, 1), sz, 2, &ns) || ns != 2) FAIL("size must be a constant int32[2] for 4-D tensors");
    if (sz[0] != out->dims[1] || sz[1] != out->dims[2] || out->dims[0] != in->dims[0] || out->dims[3] != in->dims[3]) FAIL("output shape");
    if (in->type != out->type) FAIL("types differ");
    return ER_OK;
}

static int32_t nn_index(int32_t o, int32_t in_size, int32_t out_size, int align, int half) {
    const float scale = (align && out_size > 1) ? (float)(in_size - 1) / (float)(out_size - 1) : (float)in_size / (float)out_size;
    const float offset = half ? 0.5f : 0.0f;
    int32_t v = align ? f2i(roundf(((float)o + offset) * scale)) : f2i(floorf(((float)o + offset) * scale));
    if (v > in_size - 1) v = in_size - 1;
    if (half && v < 0) v = 0;
    return v;
}

static int axes_mask(er_model *m, er_node *n, const er_tensor *in, uint32_t *red, char *err, size_t errlen) {
    int32_t ax[ER_MAX_DIMS];
    uint32_t na;
    if (!const_ints(tin(m, n, 1), ax, ER_MAX_DIMS, &na) || na == 0) FAIL("axis must be a constant int32 vector");
    *red = 0;
    for (uint32_t i = 0; i < na; i++) {
        int32_t a = ax[i] < 0 ? ax[i] + in->ndim : ax[i];
        if (a < 0 || a >= in->ndim) FAIL("axis %d out of range", (int)ax[i]);
        *red |= 1u << a;
    }
    return ER_OK;
}

static int prep_reduce_max(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    if (!is_i8(in) || !is_i8(out)) UNSUP("only int8 is supported");
    if (!same_q(in, out)) UNSUP("input and output quantization differ");
    uint32_t red;
    int rc = axes_mask(m, n, in, &red, err, errlen);
    if (rc != ER_OK) return rc;
    uint64_t expect = 1;
    for (int i = 0; i < in->ndim; i++) if (!(red & (1u << i))) expect *= (uint64_t)in->dims[i];
    if ((uint64_t)out->count != expect) FAIL("output has %u elements, expected %llu", (unsigned)out->count, (unsigned long long)expect);
    n->axis = (int32_t)red;
    return ER_OK;
}

static int prep_arg_max(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    int32_t ax;
    uint32_t na;
    if (!is_i8(in)) UNSUP("only int8 input");
    if (!const_ints(tin(m, n, 1), &ax, 1, &na) || na != 1) FAIL("axis must be a constant int32 scalar");
    if (ax < 0) ax += in->ndim;
    if (ax < 0 || ax >= in->ndim) FAIL("axis out of range");
    if (out->ndim != in->ndim - 1) FAIL("output rank");
    for (int d = 0, o = 0; d < in->ndim; d++) {
        if (d == ax) continue;
        if (out->dims[o++] != in->dims[d]) FAIL("output shape");
    }
    n->axis = ax;
    return ER_OK;
}

static int prep_gather(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *p = tin(m, n, 0), *ix = tin(m, n, 1), *out = tout(m, n);
    if (!ix || (ix->type != ER_TYPE_INT32 && ix->type != ER_TYPE_INT64)) FAIL("indices must be int32 or int64");
    if (n->alpha_i != 0) UNSUP("batch_dims");
    int32_t ax = n->axis < 0 ? n->axis + p->ndim : n->axis;
    if (ax < 0 || ax >= p->ndim) FAIL("axis out of range");
    if (p->ndim - 1 + ix->ndim != out->ndim) FAIL("output rank");
    int o = 0;
    for (int d = 0; d < ax; d++) if (out->dims[o++] != p->dims[d]) FAIL("output shape");
    for (int d = 0; d < ix->ndim; d++) if (out->dims[o++] != ix->dims[d]) FAIL("output shape");
    for (int d = ax + 1; d < p->ndim; d++) if (out->dims[o++] != p->dims[d]) FAIL("output shape");
    if (p->type != out->type) FAIL("types differ");
    if (p->type == ER_TYPE_INT8 && !same_q(p, out)) UNSUP("input and output quantization differ");
    n->axis = ax;
    return ER_OK;
}

static int prep_mirror_pad(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    int32_t pd[2 * ER_MAX_DIMS];
    uint32_t np;
    if (!const_ints(tin(m, n, 1), pd, 2 * ER_MAX_DIMS, &np) || np != 2u * in->ndim || out->ndim != in->ndim)
        FAIL("paddings must be a constant int32 [rank, 2]");
    if (n->alpha_i != 0 && n->alpha_i != 1) FAIL("mode %d", (int)n->alpha_i);
    if (in->type != out->type || (in->type == ER_TYPE_INT8 && !same_q(in, out))) UNSUP("input and output quantization differ");
    for (int d = 0; d < in->ndim; d++) {
        const int32_t lim = in->dims[d] - (n->alpha_i == 0 ? 1 : 0);
        if (pd[2 * d] < 0 || pd[2 * d + 1] < 0 || pd[2 * d] > lim || pd[2 * d + 1] > lim) FAIL("padding larger than the input");
        if ((int64_t)in->dims[d] + pd[2 * d] + pd[2 * d + 1] != out->dims[d]) FAIL("paddings do not match the output shape");
    }
    n->pc_shift = pool_alloc(sizeof(int32_t) * in->ndim);
    if (!n->pc_shift) FAIL("out of prepare memory");
    for (int d = 0; d < in->ndim; d++) n->pc_shift[d] = pd[2 * d];
    return ER_OK;
}

/* PACK / UNPACK / SPLIT / SPLIT_V: one tensor split along an axis into (or joined from) pieces;
 * sizes per piece in pc_mult (from the pool). */
static int prep_pieces(er_model *m, er_node *n, char *err, size_t errlen) {
    const int join = n->op == 83;
    er_tensor *whole = join ? tout(m, n) : tin(m, n, n->op == 49 ? 1 : 0);
    const int npieces = join ? n->n_in : n->n_out;
    int32_t ax;
    if (n->op == 83 || n->op == 88) {
        ax = n->axis < 0 ? n->axis + whole->ndim : n->axis;
        if (n->alpha_i != npieces) FAIL("%d pieces but the option says %d", npieces, (int)n->alpha_i);
    } else {
        uint32_t na;
        if (!const_ints(tin(m, n, n->op == 49 ? 0 : 2), &ax, 1, &na) || na != 1) FAIL("axis must be a constant int32 scalar");
        if (ax < 0) ax += whole->ndim;
        if (n->alpha_i != npieces) FAIL("num_splits is %d but the op has %d outputs", (int)n->alpha_i, npieces);
    }
    if (ax < 0 || ax >= whole->ndim) FAIL("axis out of range");
    n->pc_mult = pool_alloc(sizeof(int32_t) * (uint32_t)npieces);
    if (!n->pc_mult) FAIL("out of prepare memory");
    int64_t sum = 0;
    for (int k = 0; k < npieces; k++) {
        er_tensor *t = join ? tin(m, n, k) : &m->tensors[n->outs[k]];
        if (!t || t->type != whole->type || (whole->type == ER_TYPE_INT8 && !same_q(t, whole)))
            UNSUP("pieces with another type or quantization than the whole");
        int32_t size;
        if (n->op == 83 || n->op == 88) { /* the piece lacks the axis */
            if (t->ndim != whole->ndim - 1) FAIL("piece %d rank", k);
            for (int d = 0, e = 0; d < whole->ndim; d++)
                if (d != ax && t->dims[e++] != whole->dims[d]) FAIL("piece %d shape", k);
            size = 1;
        } else {
            if (t->ndim != whole->ndim) FAIL("piece %d rank", k);
            for (int d = 0; d < whole->ndim; d++)
                if (d != ax && t->dims[d] != whole->dims[d]) FAIL("piece %d shape", k);
            size = t->dims[ax];
        }
        n->pc_mult[k] = size;
        sum += size;
    }
    if (sum != whole->dims[ax]) FAIL("pieces add up to %lld along the axis, not %d", (long long)sum, (int)whole->dims[ax]);
    if (n->op == 49) { /* SPLIT: equal pieces */
        for (int k = 1; k < npieces; k++) if (n->pc_mult[k] != n->pc_mult[0]) FAIL("unequal split");
    } else if (n->op == 102) { /* SPLIT_V: size_splits must agree (-1 = the rest) */
        int32_t sz[ER_MAX_OP_OUTPUTS];
        uint32_t ns;
        if (!const_ints(tin(m, n, 1), sz, ER_MAX_OP_OUTPUTS, &ns) || ns != (uint32_t)npieces) FAIL("size_splits must be a constant int32 vector");
        for (int k = 0; k < npieces; k++) if (sz[k] != -1 && sz[k] != n->pc_mult[k]) FAIL("size_splits do not match the outputs");
    }
    n->axis = ax;
    return ER_OK;
}


/* BATCH_MATMUL (reference_ops::BatchMatMul, int8): out[b, i, j] = MBQM(sum_k (x[b,i,k] - zx) *
 * (y[b,k,j] - zy)) + zo, adj_x/adj_y transpose the last two axes, batch axes broadcast (rank <= 5). */
static int prep_batch_matmul(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *a = tin(m, n, 0), *b = tin(m, n, 1), *out = tout(m, n);
    if (n->n_in != 2 || !is_i8(a) || !is_i8(b) || !is_i8(out)) UNSUP("only int8 inputs and output are supported");
    if (a->scales.n != 1 || b->scales.n != 1) UNSUP("per-channel quantization");
    if (a->ndim < 2 || b->ndim < 2 || a->ndim > 5 || b->ndim > 5) FAIL("ranks must be 2..5");
    const int nd = out->ndim;
    if (nd != (a->ndim > b->ndim ? a->ndim : b->ndim)) FAIL("output rank");
    const int32_t M = n->flag1 ? a->dims[a->ndim - 1] : a->dims[a->ndim - 2];
    const int32_t K = n->flag1 ? a->dims[a->ndim - 2] : a->dims[a->ndim - 1];
    const int32_t K2 = n->flag2 ? b->dims[b->ndim - 1] : b->dims[b->ndim - 2];
    const int32_t N = n->flag2 ? b->dims[b->ndim - 2] : b->dims[b->ndim - 1];
    if (K != K2 || out->dims[nd - 2] != M || out->dims[nd - 1] != N) FAIL("matrix shapes do not match");
    for (int i = 0; i < nd - 2; i++) {
        const int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        const int32_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if ((da != db && da != 1 && db != 1) || out->dims[i] != (da > db ? da : db)) FAIL("batch axes do not broadcast");
    }
    er_quantize_multiplier((double)(a->scale * b->scale) / (double)out->scale, &n->mult, &n->shift);
    return ER_OK;
}

static void eval_batch_matmul(er_model *m, er_node *n) {
    er_tensor *a = tin(m, n, 0), *b = tin(m, n, 1), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0), *yv = i8in(m, n, 1);
    int8_t *o = i8out(m, n);
    const int nd = out->ndim;
    const int32_t M = out->dims[nd - 2], N = out->dims[nd - 1];
    const int32_t K = n->flag1 ? a->dims[a->ndim - 2] : a->dims[a->ndim - 1];
    int32_t sa[ER_MAX_DIMS], sb[ER_MAX_DIMS], idx[ER_MAX_DIMS] = {0};
    uint32_t batches = 1;
    int32_t stra = M * K, strb = K * N;
    for (int i = nd - 3; i >= 0; i--) {
        const int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        const int32_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        sa[i] = da == 1 ? 0 : stra;
        sb[i] = db == 1 ? 0 : strb;
        stra *= da;
        strb *= db;
        batches *= (uint32_t)out->dims[i];
    }
    const int32_t zx = a->zp, zy = b->zp, zo = out->zp;
    for (uint32_t bt = 0; bt < batches; bt++) {
        int32_t oa = 0, ob = 0;
        for (int i = 0; i < nd - 2; i++) { oa += idx[i] * sa[i]; ob += idx[i] * sb[i]; }
        for (int32_t i = 0; i < M; i++)
            for (int32_t j = 0; j < N; j++) {
                int32_t acc = 0;
                for (int32_t k = 0; k < K; k++) {
                    const int32_t xv = x[oa + (n->flag1 ? k * M + i : i * K + k)];
                    const int32_t yk = yv[ob + (n->flag2 ? j * K + k : k * N + j)];
                    acc = wadd(acc, (xv - zx) * (yk - zy));
                }
                o[((size_t)bt * M + i) * N + j] = (int8_t)clampi(wadd(er_mbqm(acc, n->mult, n->shift), zo), -128, 127);
            }
        for (int i = nd - 3; i >= 0; i--) {
            if (++idx[i] < out->dims[i]) break;
            idx[i] = 0;
        }
    }
}


/* TRANSPOSE_CONV (reference_ops::TransposeConv, int8 per-channel): inputs output_shape, OHWI
 * weights, input, optional bias. out[oy, ox, oc] gathers every (iy, ix, ky, kx) with
 * oy = iy * sh - pad_h + ky (and likewise x); the padding is the one of a convolution from the
 * output to the input. Requantized per channel as CONV_2D. */
static int prep_transpose_conv(er_model *m, er_node *n, char *err, size_t errlen) {
    er_tensor *os = tin(m, n, 0), *f = tin(m, n, 1), *in = tin(m, n, 2), *b = tin(m, n, 3), *out = tout(m, n);
    int32_t shp[4];
    uint32_t ns;
    if (!is_i8(in) || !is_i8(f) || !is_i8(out)) UNSUP("only int8 input, filter and output are supported");
    if (!const_ints(os, shp, 4, &ns) || ns != 4) FAIL("output_shape must be a constant int32[4]");
    if (in->ndim != 4 || f->ndim != 4 || out->ndim != 4 || !f->is_const) FAIL("4-D tensors and a constant filter");
    for (int d = 0; d < 4; d++) if (shp[d] != out->dims[d]) FAIL("output_shape differs from the output tensor");
    const int32_t oc = out->dims[3];
    if (f->dims[0] != oc || f->dims[3] != in->dims[3] || out->dims[0] != in->dims[0]) FAIL("filter shape does not match");
    if (f->scales.n != 1 && f->scales.n != (uint32_t)oc) FAIL("filter has %u scales", (unsigned)f->scales.n);
    if (b && (!b->is_const || b->type != ER_TYPE_INT32 || b->count != (uint32_t)oc)) FAIL("bias must be int32[%d]", (int)oc);
    if (n->stride_w < 1 || n->stride_h < 1 || n->stride_w > 65535 || n->stride_h > 65535 || n->padding > 1) FAIL("bad stride/padding");
    const int32_t fh = f->dims[1], fw = f->dims[2];
    if (out_size(n->padding, out->dims[1], fh, n->stride_h, 1) != in->dims[1] ||
        out_size(n->padding, out->dims[2], fw, n->stride_w, 1) != in->dims[2])
        FAIL("input does not match the output with this padding and stride");
    n->pad_h = pad_amount(out->dims[1], fh, n->stride_h, 1, in->dims[1]);
    n->pad_w = pad_amount(out->dims[2], fw, n->stride_w, 1, in->dims[2]);
    if (!act_range(n->act, out, &n->act_min, &n->act_max)) UNSUP("fused activation %d", (int)n->act);
    if (!per_channel(m, n, in, f, out, oc)) FAIL("out of prepare memory");
    return ER_OK;
}

static void eval_transpose_conv(er_model *m, er_node *n) {
    er_tensor *f = tin(m, n, 1), *in = tin(m, n, 2), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 2), *w = (const int8_t *)f->cdata;
    const uint8_t *bias = tin(m, n, 3) ? tin(m, n, 3)->cdata : NULL;
    int8_t *y = i8out(m, n);
    const int32_t B = in->dims[0], H = in->dims[1], W = in->dims[2], C = in->dims[3];
    const int32_t OH = out->dims[1], OW = out->dims[2], OC = out->dims[3], FH = f->dims[1], FW = f->dims[2];
    const int32_t sh = n->stride_h, sw = n->stride_w, in_off = -in->zp;
    for (int32_t bt = 0; bt < B; bt++)
        for (int32_t oy = 0; oy < OH; oy++)
            for (int32_t ox = 0; ox < OW; ox++)
                for (int32_t oc = 0; oc < OC; oc++) {
                    int32_t acc = 0;
                    for (int32_t ky = 0; ky < FH; ky++) {
                        const int32_t ty = oy + n->pad_h - ky;
                        if (ty < 0 || ty % sh) continue;
                        const int32_t iy = ty / sh;
                        if (iy >= H) continue;
                        for (int32_t kx = 0; kx < FW; kx++) {
                            const int32_t tx = ox + n->pad_w - kx;
                            if (tx < 0 || tx % sw) continue;
                            const int32_t ix = tx / sw;
                            if (ix >= W) continue;
                            acc = dot_i8(w + ((oc * FH + ky) * FW + kx) * C, x + ((bt * H + iy) * W + ix) * C, C, in_off, acc);
                        }
                    }
                    if (bias) acc = wadd(acc, ld_i32(bias + 4 * oc));
                    acc = wadd(er_mbqm(acc, n->pc_mult[oc], n->pc_shift[oc]), out->zp);
                    y[((bt * OH + oy) * OW + ox) * OC + oc] = (int8_t)clampi(acc, n->act_min, n->act_max);
                }
}


/* RESIZE_BILINEAR, int8 (reference_ops::ResizeBilinearInteger): Q10 source coordinates, the four
 * neighbours weighted in Q20, rounded half away from zero. */
static void bl_coord(int32_t v, int32_t in_size, int32_t out_size, int align, int half, int32_t *lo, int32_t *hi,
                     int32_t *frac) {
    int32_t scale = ((1 << 10) * in_size + out_size / 2) / out_size;
    if (align && out_size > 1) scale = ((1 << 10) * (in_size - 1) + (out_size - 1) / 2) / (out_size - 1);
    const int32_t sv = half ? v * scale + scale / 2 - (1 << 9) : v * scale;
    *lo = sv / (1 << 10) > 0 ? sv / (1 << 10) : 0;
    const int32_t up = (sv + (1 << 10) - 1) / (1 << 10);
    *hi = up < in_size - 1 ? up : in_size - 1;
    *frac = sv - (*lo << 10);
}

static void eval_resize_bilinear(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0);
    int8_t *y = i8out(m, n);
    const int32_t B = in->dims[0], H = in->dims[1], W = in->dims[2], C = in->dims[3], OH = out->dims[1], OW = out->dims[2];
    for (int32_t b = 0; b < B; b++)
        for (int32_t oy = 0; oy < OH; oy++) {
            int32_t y0, y1, fy;
            bl_coord(oy, H, OH, n->flag1, n->flag2, &y0, &y1, &fy);
            for (int32_t ox = 0; ox < OW; ox++) {
                int32_t x0, x1, fx;
                bl_coord(ox, W, OW, n->flag1, n->flag2, &x0, &x1, &fx);
                const int8_t *p00 = x + (((size_t)b * H + y0) * W + x0) * C, *p10 = x + (((size_t)b * H + y1) * W + x0) * C;
                const int8_t *p01 = x + (((size_t)b * H + y0) * W + x1) * C, *p11 = x + (((size_t)b * H + y1) * W + x1) * C;
                int8_t *q = y + (((size_t)b * OH + oy) * OW + ox) * C;
                for (int32_t c = 0; c < C; c++) {
                    const int64_t acc = (int64_t)p00[c] * ((1 << 10) - fy) * ((1 << 10) - fx) + (int64_t)p10[c] * fy * ((1 << 10) - fx) +
                                        (int64_t)p01[c] * ((1 << 10) - fy) * fx + (int64_t)p11[c] * fy * fx;
                    const int64_t r = acc > 0 ? (acc + (1 << 19)) / (1 << 20) : (acc - (1 << 19)) / (1 << 20);
                    q[c] = (int8_t)(r > 127 ? 127 : (r < -128 ? -128 : r));
                }
            }
        }
}


/* ---- resource variables (streaming state): CALL_ONCE, VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE */
static int prep_var(er_model *m, er_node *n, char *err, size_t errlen) {
    if (n->op == 129) { /* CALL_ONCE */
        if (n->n_in || n->n_out) FAIL("CALL_ONCE takes no tensors");
        if (m->init_subgraph >= 0) UNSUP("more than one CALL_ONCE");
        int rc = er_model_read_init(m, n->alpha_i, err, errlen);
        if (rc != ER_OK) return rc;
        m->init_subgraph = n->alpha_i;
        return ER_OK;
    }
    if (n->op == 142) { /* VAR_HANDLE */
        if (n->n_in || n->n_out != 1 || tout(m, n)->type != ER_TYPE_RESOURCE) FAIL("VAR_HANDLE writes one resource tensor");
        if (n->alpha_i < 0) UNSUP("VAR_HANDLE without a shared_name, or more than %d variables", ER_MAX_VARS);
        tout(m, n)->var = (int16_t)n->alpha_i;
        return ER_OK;
    }
    er_tensor *r = tin(m, n, 0);
    er_tensor *v = n->op == 143 ? (n->n_out == 1 ? tout(m, n) : NULL) : tin(m, n, 1);
    if (!r || r->type != ER_TYPE_RESOURCE || r->var < 0 || !v || v->type == ER_TYPE_RESOURCE ||
        (n->op == 143 ? n->n_in != 1 : (n->n_in != 2 || n->n_out != 0)))
        FAIL("%s needs a variable handle and a value", n->op == 143 ? "READ_VARIABLE" : "ASSIGN_VARIABLE");
    er_var *var = &m->vars[r->var];
    if (var->bytes && var->bytes != v->bytes) FAIL("variable of %u bytes used with %u", (unsigned)var->bytes, (unsigned)v->bytes);
    var->bytes = v->bytes;
    return ER_OK;
}

static void eval_var(er_model *m, er_node *n) {
    if (n->op == 129) {
        if (!m->init_done)
            for (uint32_t v = 0; v < m->n_vars; v++) memcpy(m->vars[v].data, m->vars[v].init, m->vars[v].bytes);
        m->init_done = 1;
    } else if (n->op == 143) {
        er_var *var = &m->vars[tin(m, n, 0)->var];
        memcpy(er_model_tensor_data(m, n->out), var->data, var->bytes);
    } else if (n->op == 144) {
        er_var *var = &m->vars[tin(m, n, 0)->var];
        memcpy(var->data, er_model_tensor_data(m, n->in[1]), var->bytes);
    }
}

static const char *type_name(uint8_t t) {
    switch (t) {
        case ER_TYPE_FLOAT32: return "float32";
        case ER_TYPE_INT32: return "int32";
        case ER_TYPE_UINT8: return "uint8";
        case ER_TYPE_INT64: return "int64";
        case ER_TYPE_INT16: return "int16";
        case ER_TYPE_INT8: return "int8";
        default: return "?";
    }
}

/* caps.h's table: the op's accepted "in>out" type pairs, or NULL when the op is not listed */
static const char *op_types(uint32_t code) {
#define ER_OP_ENTRY(c, name, types) case c: return types;
    switch (code) { ER_OP_TABLE(ER_OP_ENTRY) default: return NULL; }
#undef ER_OP_ENTRY
}

static int types_allowed(const char *table, const er_tensor *in, const er_tensor *out) {
    char pair[24];
    snprintf(pair, sizeof pair, "%s>%s", type_name(in->type), type_name(out->type));
    size_t len = strlen(pair);
    for (const char *p = table; *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if ((n == len && memcmp(p, pair, n) == 0) || (n == 9 && memcmp(p, "same>same", 9) == 0 && in->type == out->type))
            return 1;
        p += n + (bar ? 1 : 0);
    }
    return 0;
}

#define ER_OP_NAME_LIST(c, name, types) " " #name
int er_kernel_prepare(er_model *m, er_node *n, char *err, size_t errlen) {
    const char *types = op_types(n->op);
    if (!types)
        UNSUP("unsupported op %s (builtin code %u); this firmware runs:" ER_OP_TABLE(ER_OP_NAME_LIST),
              er_op_name(n->op), (unsigned)n->op);
    if (types[0] == '*') return prep_var(m, n, err, errlen); /* ops on variables: no tensor-type pair */
    if (n->n_in == 0 || n->in[0] < 0) FAIL("missing input");
    const int data = n->op == 49 ? 1 : (n->op == 67 ? 2 : 0); /* SPLIT: input 0 is the axis; TRANSPOSE_CONV: the shape */
    if (!tin(m, n, data)) FAIL("missing input");
    if (!types_allowed(types, tin(m, n, data), tout(m, n)))
        UNSUP("%s takes %s (input>output types), not %s>%s", er_op_name(n->op), types,
              type_name(tin(m, n, data)->type), type_name(tout(m, n)->type));
    switch (n->op) {
        case 3: return prep_conv(m, n, err, errlen, 0);
        case 4: return prep_conv(m, n, err, errlen, 1);
        case 9: return prep_fc(m, n, err, errlen);
        case 1: case 17: return prep_pool(m, n, err, errlen);
        case 0: case 18: case 41: case 55: case 57: case 99: return prep_binary(m, n, err, errlen);
        case 28: case 47: case 98: case 101: case 117: return prep_lut(m, n, err, errlen);
        case 20: return prep_relu(m, n, err, errlen);
        case 126: return prep_batch_matmul(m, n, err, errlen);
        case 67: return prep_transpose_conv(m, n, err, errlen);
        case 54: return prep_prelu(m, n, err, errlen);
        case 39: return prep_transpose(m, n, err, errlen);
        case 45: case 65: return prep_slice(m, n, err, errlen);
        case 5: case 26: return prep_space_depth(m, n, err, errlen);
        case 97: case 23: return prep_resize_nn(m, n, err, errlen);
        case 82: return prep_reduce_max(m, n, err, errlen);
        case 56: case 79: return prep_arg_max(m, n, err, errlen);
        case 36: return prep_gather(m, n, err, errlen);
        case 100: return prep_mirror_pad(m, n, err, errlen);
        case 49: case 83: case 88: case 102: return prep_pieces(m, n, err, errlen);
        case 40: return prep_mean(m, n, err, errlen);
        case 25: return prep_softmax(m, n, err, errlen);
        case 14: return prep_lut(m, n, err, errlen);
        case 19: case 21: return prep_relu(m, n, err, errlen);
        case 114: case 6: return prep_quantize(m, n, err, errlen);
        case 22: case 43: case 70: return prep_copy(m, n, err, errlen);
        case 2: return prep_concat(m, n, err, errlen);
        case 34: case 60: return prep_pad(m, n, err, errlen);
        case 75: case 76: return prep_sqrt(m, n, err, errlen);
        case 42: return prep_div(m, n, err, errlen);
        case 74: return prep_sum(m, n, err, errlen);
        case 50: return prep_log_softmax(m, n, err, errlen);
        case 53: case 77: return prep_cast_shape(m, n, err, errlen);
        default: /* listed in caps.h but no kernel: a build error in spirit (tests/firmware/test_firmware_caps.py) */
            UNSUP("op %s is in the capability table but has no kernel", er_op_name(n->op));
    }
}

/* Work of one prepared node per inference (multiply-accumulates or element visits), for the
 * model's work budget (ER_MAX_WORK). 64-bit: each factor is at most 2^26. */
uint64_t er_kernel_work(er_model *m, er_node *n) {
    if (n->op == 129 || n->op == 142 || n->op == 144) return 1;
    uint64_t w = 0;
    for (int k = 0; k < n->n_out; k++) w += m->tensors[n->outs[k]].count;
    for (int k = 0; k < n->n_in; k++)
        if (tin(m, n, k)) w += tin(m, n, k)->count;
    er_tensor *in = tin(m, n, 0), *f = tin(m, n, 1), *out = tout(m, n);
    switch (n->op) {
        case 3: return w + (uint64_t)out->count * (uint64_t)f->dims[1] * (uint64_t)f->dims[2] * (uint64_t)in->dims[3];
        case 4: return w + (uint64_t)out->count * (uint64_t)f->dims[1] * (uint64_t)f->dims[2];
        case 9: return w + (uint64_t)out->count * (uint64_t)f->dims[1];
        case 126: return w + (uint64_t)out->count * (uint64_t)(n->flag1 ? in->dims[in->ndim - 2] : in->dims[in->ndim - 1]);
        case 67: return w + (uint64_t)out->count * (uint64_t)f->dims[1] * (uint64_t)f->dims[2] * (uint64_t)f->dims[3];
        case 1: case 17: {
            uint64_t fh = (uint64_t)(n->filter_h < in->dims[1] ? n->filter_h : in->dims[1]);
            uint64_t fw = (uint64_t)(n->filter_w < in->dims[2] ? n->filter_w : in->dims[2]);
            return w + (uint64_t)out->count * fh * fw;
        }
        default: return w;
    }
}

/* ---- eval ---------------------------------------------------------------------------------- */
static void eval_conv(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *f = tin(m, n, 1), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0), *w = (const int8_t *)f->cdata;
    const uint8_t *bias = tin(m, n, 2) ? tin(m, n, 2)->cdata : NULL;
    int8_t *y = i8out(m, n);
    const int32_t B = in->dims[0], H = in->dims[1], W = in->dims[2], C = in->dims[3];
    const int32_t OH = out->dims[1], OW = out->dims[2], OC = out->dims[3], FH = f->dims[1], FW = f->dims[2];
    const int32_t in_off = -in->zp, out_off = out->zp;
    for (int32_t b = 0; b < B; b++)
        for (int32_t oy = 0; oy < OH; oy++)
            for (int32_t ox = 0; ox < OW; ox++) {
                const int32_t iy0 = oy * n->stride_h - n->pad_h, ix0 = ox * n->stride_w - n->pad_w;
                for (int32_t oc = 0; oc < OC; oc++) {
                    int32_t acc = 0;
                    for (int32_t fy = 0; fy < FH; fy++) {
                        const int32_t iy = iy0 + n->dil_h * fy;
                        if (iy < 0 || iy >= H) continue;
                        for (int32_t fx = 0; fx < FW; fx++) {
                            const int32_t ix = ix0 + n->dil_w * fx;
                            if (ix < 0 || ix >= W) continue;
                            const int8_t *xp = x + ((b * H + iy) * W + ix) * C;
                            const int8_t *wp = w + ((oc * FH + fy) * FW + fx) * C;
                            acc = dot_i8(wp, xp, C, in_off, acc);
                        }
                    }
                    if (bias) acc = wadd(acc, ld_i32(bias + 4 * oc));
                    acc = wadd(er_mbqm(acc, n->pc_mult[oc], n->pc_shift[oc]), out_off);
                    y[((b * OH + oy) * OW + ox) * OC + oc] = (int8_t)clampi(acc, n->act_min, n->act_max);
                }
            }
}

/* depth multiplier 1: per output pixel, accumulate all channels at once (the channel loop is
 * innermost and contiguous in input and filter); integer sums, so the order does not change them */
#define ER_DW_MAX_CH 1024
static int32_t dw_acc[ER_DW_MAX_CH];

static void eval_dwconv_m1(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *f = tin(m, n, 1), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0), *w = (const int8_t *)f->cdata;
    const uint8_t *bias = tin(m, n, 2) ? tin(m, n, 2)->cdata : NULL;
    int8_t *y = i8out(m, n);
    const int32_t B = in->dims[0], H = in->dims[1], W = in->dims[2], C = in->dims[3];
    const int32_t OH = out->dims[1], OW = out->dims[2], FH = f->dims[1], FW = f->dims[2];
    const int32_t in_off = -in->zp, out_off = out->zp;
    for (int32_t b = 0; b < B; b++)
        for (int32_t oy = 0; oy < OH; oy++)
            for (int32_t ox = 0; ox < OW; ox++) {
                const int32_t iy0 = oy * n->stride_h - n->pad_h, ix0 = ox * n->stride_w - n->pad_w;
                for (int32_t c = 0; c < C; c++) dw_acc[c] = bias ? ld_i32(bias + 4 * c) : 0;
                for (int32_t fy = 0; fy < FH; fy++) {
                    const int32_t iy = iy0 + n->dil_h * fy;
                    if (iy < 0 || iy >= H) continue;
                    for (int32_t fx = 0; fx < FW; fx++) {
                        const int32_t ix = ix0 + n->dil_w * fx;
                        if (ix < 0 || ix >= W) continue;
                        const int8_t *xp = x + ((b * H + iy) * W + ix) * C, *wp = w + (fy * FW + fx) * C;
                        for (int32_t c = 0; c < C; c++)
                            dw_acc[c] = (int32_t)((uint32_t)dw_acc[c] + (uint32_t)((int32_t)wp[c] * ((int32_t)xp[c] + in_off)));
                    }
                }
                int8_t *yp = y + ((b * OH + oy) * OW + ox) * C;
                for (int32_t c = 0; c < C; c++)
                    yp[c] = (int8_t)clampi(wadd(er_mbqm(dw_acc[c], n->pc_mult[c], n->pc_shift[c]), out_off), n->act_min, n->act_max);
            }
}

static void eval_dwconv(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *f = tin(m, n, 1), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0), *w = (const int8_t *)f->cdata;
    const uint8_t *bias = tin(m, n, 2) ? tin(m, n, 2)->cdata : NULL;
    int8_t *y = i8out(m, n);
    const int32_t B = in->dims[0], H = in->dims[1], W = in->dims[2], C = in->dims[3];
    const int32_t OH = out->dims[1], OW = out->dims[2], OC = out->dims[3], FH = f->dims[1], FW = f->dims[2];
    const int32_t DM = n->depth_mult, in_off = -in->zp, out_off = out->zp;
    if (DM == 1 && C <= ER_DW_MAX_CH) {
        eval_dwconv_m1(m, n);
        return;
    }
    for (int32_t b = 0; b < B; b++)
        for (int32_t oy = 0; oy < OH; oy++)
            for (int32_t ox = 0; ox < OW; ox++)
                for (int32_t ic = 0; ic < C; ic++)
                    for (int32_t mm = 0; mm < DM; mm++) {
                        const int32_t oc = ic * DM + mm;
                        const int32_t iy0 = oy * n->stride_h - n->pad_h, ix0 = ox * n->stride_w - n->pad_w;
                        int32_t acc = 0;
                        for (int32_t fy = 0; fy < FH; fy++) {
                            const int32_t iy = iy0 + n->dil_h * fy;
                            if (iy < 0 || iy >= H) continue;
                            for (int32_t fx = 0; fx < FW; fx++) {
                                const int32_t ix = ix0 + n->dil_w * fx;
                                if (ix < 0 || ix >= W) continue;
                                acc = wadd(acc, (int32_t)w[(fy * FW + fx) * OC + oc] *
                                                    ((int32_t)x[((b * H + iy) * W + ix) * C + ic] + in_off));
                            }
                        }
                        if (bias) acc = wadd(acc, ld_i32(bias + 4 * oc));
                        acc = wadd(er_mbqm(acc, n->pc_mult[oc], n->pc_shift[oc]), out_off);
                        y[((b * OH + oy) * OW + ox) * OC + oc] = (int8_t)clampi(acc, n->act_min, n->act_max);
                    }
}

static void eval_fc(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *f = tin(m, n, 1);
    const int8_t *x = i8in(m, n, 0), *w = (const int8_t *)f->cdata;
    const uint8_t *bias = tin(m, n, 2) ? tin(m, n, 2)->cdata : NULL;
    int8_t *y = i8out(m, n);
    const int32_t units = f->dims[0], depth = f->dims[1], batches = (int32_t)(in->count / (uint32_t)depth);
    const int32_t in_off = -in->zp, out_off = tout(m, n)->zp, w_off = -n->left_shift;
    for (int32_t b = 0; b < batches; b++)
        for (int32_t u = 0; u < units; u++) {
            int32_t acc = 0;
            if (w_off == 0)
                acc = dot_i8(w + u * depth, x + b * depth, depth, in_off, 0);
            else
                for (int32_t d = 0; d < depth; d++)
                    acc = wadd(acc, ((int32_t)w[u * depth + d] + w_off) * ((int32_t)x[b * depth + d] + in_off));
            if (bias) acc = wadd(acc, ld_i32(bias + 4 * u));
            const double v = round((double)acc * n->feff[u]);
            /* an out-of-range double -> int32 conversion gives INT32_MIN on LiteRT's x86 build */
            const int32_t r = (v >= 2147483648.0 || v < -2147483648.0 || v != v) ? INT32_MIN : (int32_t)v;
            y[b * units + u] = (int8_t)clampi(wadd(r, out_off), n->act_min, n->act_max);
        }
}

/* The part of the pooling window of output (oy, ox) that lies inside the H x W input: filter
 * rows [fy0, fy1) and columns [fx0, fx1); (iy0, ix0) is the window's top-left input position. */
typedef struct { int32_t iy0, ix0, fy0, fx0, fy1, fx1; } pool_win;

static inline pool_win pool_window(const er_node *n, int32_t oy, int32_t ox, int32_t H, int32_t W) {
    pool_win w;
    w.iy0 = oy * n->stride_h - n->pad_h;
    w.ix0 = ox * n->stride_w - n->pad_w;
    w.fy0 = w.iy0 < 0 ? -w.iy0 : 0;
    w.fx0 = w.ix0 < 0 ? -w.ix0 : 0;
    w.fy1 = n->filter_h < H - w.iy0 ? n->filter_h : H - w.iy0;
    w.fx1 = n->filter_w < W - w.ix0 ? n->filter_w : W - w.ix0;
    return w;
}

/* AVERAGE_POOL's mean of count values summing to acc, rounded half away from zero; an empty
 * window (not produced by valid shapes) counts as one value. */
static inline int64_t pool_average(int64_t acc, int32_t count) {
    if (count == 0) count = 1;
    return acc > 0 ? (acc + count / 2) / count : (acc - count / 2) / count;
}

/* NumPy broadcasting of a and b to out: the output dims od, a's and b's element strides sa / sb
 * (0 along an axis they are broadcast on) and the output index idx, zeroed. */
static void broadcast_setup(const er_tensor *a, const er_tensor *b, const er_tensor *out, int32_t *od,
                            int32_t *sa, int32_t *sb, int32_t *idx) {
    const int nd = out->ndim;
    int32_t stra = 1, strb = 1;
    for (int i = nd - 1; i >= 0; i--) {
        od[i] = out->dims[i];
        const int32_t da = i < nd - a->ndim ? 1 : a->dims[i - (nd - a->ndim)];
        const int32_t db = i < nd - b->ndim ? 1 : b->dims[i - (nd - b->ndim)];
        sa[i] = da == 1 ? 0 : stra;
        sb[i] = db == 1 ? 0 : strb;
        stra *= da;
        strb *= db;
        idx[i] = 0;
    }
}

/* The next output index in row-major order. */
static inline void broadcast_next(int32_t *idx, const int32_t *od, int nd) {
    for (int i = nd - 1; i >= 0; i--) {
        if (++idx[i] < od[i]) break;
        idx[i] = 0;
    }
}

static void eval_pool(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0);
    int8_t *y = i8out(m, n);
    const int32_t B = in->dims[0], H = in->dims[1], W = in->dims[2], C = in->dims[3], OH = out->dims[1], OW = out->dims[2];
    for (int32_t b = 0; b < B; b++)
        for (int32_t oy = 0; oy < OH; oy++)
            for (int32_t ox = 0; ox < OW; ox++)
                for (int32_t c = 0; c < C; c++) {
                    const pool_win w = pool_window(n, oy, ox, H, W);
                    const int32_t iy0 = w.iy0, ix0 = w.ix0;
                    int64_t acc = n->op == 1 ? 0 : -128;
                    int32_t count = 0;
                    for (int32_t fy = w.fy0; fy < w.fy1; fy++)
                        for (int32_t fx = w.fx0; fx < w.fx1; fx++) {
                            int64_t v = x[((b * H + iy0 + fy) * W + ix0 + fx) * C + c];
                            if (n->op == 1) acc += v;
                            else if (v > acc) acc = v;
                            count++;
                        }
                    if (n->op == 1) acc = pool_average(acc, count);
                    acc = acc < n->act_min ? n->act_min : (acc > n->act_max ? n->act_max : acc);
                    y[((b * OH + oy) * OW + ox) * C + c] = (int8_t)acc;
                }
}

static int eval_binary(er_model *m, er_node *n) {
    er_tensor *a = tin(m, n, 0), *b = tin(m, n, 1), *out = tout(m, n);
    const int8_t *xa = i8in(m, n, 0), *xb = i8in(m, n, 1);
    int8_t *y = i8out(m, n);
    int32_t od[ER_MAX_DIMS], sa[ER_MAX_DIMS], sb[ER_MAX_DIMS], idx[ER_MAX_DIMS];
    const int nd = out->ndim;
    broadcast_setup(a, b, out, od, sa, sb, idx);
    const int32_t za = a->zp, zb = b->zp, zo = out->zp;
    for (uint32_t o = 0; o < out->count; o++) {
        int32_t ia = 0, ib = 0;
        for (int i = 0; i < nd; i++) {
            ia += idx[i] * sa[i];
            ib += idx[i] * sb[i];
        }
        const int32_t va = (int32_t)xa[ia] - za, vb = (int32_t)xb[ib] - zb;
        int32_t r;
        if (n->op == 0 || n->op == 41 || n->op == 99) {
            const int32_t s1 = er_mbqm(va * (1 << n->left_shift), n->mult1, n->shift1);
            const int32_t s2 = er_mbqm(vb * (1 << n->left_shift), n->mult2, n->shift2);
            if (n->op == 99) {
                const int32_t d = s1 - s2;
                r = wadd(er_mbqm(d * d, n->mult, n->shift), zo);
            } else {
                r = wadd(er_mbqm(n->op == 0 ? wadd(s1, s2) : wadd(s1, -s2), n->mult, n->shift), zo);
            }
        } else if (n->op == 55 || n->op == 57) {
            r = n->op == 55 ? (xa[ia] > xb[ib] ? xa[ia] : xb[ib]) : (xa[ia] < xb[ib] ? xa[ia] : xb[ib]);
        } else if (n->op == 42) { /* DIV */
            if (vb == 0) return -1; /* LiteRT fails the invoke on a zero divisor */
            const uint8_t kb = (uint8_t)xb[ib];
            r = wadd(div_i8(va, vb, n->pc_mult[kb], n->pc_shift[kb], n->mult, n->shift), zo);
        } else {
            r = wadd(er_mbqm(va * vb, n->mult, n->shift), zo);
        }
        y[o] = (int8_t)clampi(r, n->act_min, n->act_max);
        broadcast_next(idx, od, nd);
    }
    return 0;
}

static int32_t mean_scratch[ER_MEAN_MAX_OUTPUTS];

static int eval_mean(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0);
    int8_t *y = i8out(m, n);
    if (out->count > sizeof mean_scratch / sizeof mean_scratch[0]) return -1;
    memset(mean_scratch, 0, out->count * sizeof mean_scratch[0]);
    const uint32_t red = (uint32_t)n->axis;
    int32_t idx[ER_MAX_DIMS] = {0};
    uint32_t num = 1;
    for (int i = 0; i < in->ndim; i++) if (red & (1u << i)) num *= (uint32_t)in->dims[i];
    for (uint32_t i = 0; i < in->count; i++) {
        uint32_t o = 0;
        for (int d = 0; d < in->ndim; d++)
            if (!(red & (1u << d))) o = o * (uint32_t)in->dims[d] + (uint32_t)idx[d];
        mean_scratch[o] = wadd(mean_scratch[o], x[i]);
        for (int d = in->ndim - 1; d >= 0; d--) {
            if (++idx[d] < in->dims[d]) break;
            idx[d] = 0;
        }
    }
    for (uint32_t o = 0; o < out->count; o++) {
        int32_t acc = wadd(er_mbqm(wadd(mean_scratch[o], (int32_t)((uint32_t)(-in->zp) * num)), n->mult, n->shift), out->zp);
        y[o] = (int8_t)clampi(acc, -128, 127);
    }
    return 0;
}

static void eval_softmax(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0);
    int8_t *y = i8out(m, n);
    const int32_t depth = in->dims[in->ndim - 1];
    if (depth <= 0) return;
    const uint32_t rows = in->count / (uint32_t)depth;
    for (uint32_t r = 0; r < rows; r++, x += depth, y += depth) {
        int32_t mx = -128;
        for (int32_t j = 0; j < depth; j++) if (x[j] > mx) mx = x[j];
        const float *t = &n->ftable[255 - mx];
        float sum = 0.0f;
        for (int32_t j = 0; j < depth; j++) sum += t[x[j]];
        const float inv = 1.0f / (sum * out->scale);
        for (int32_t j = 0; j < depth; j++) {
            const float p = t[x[j]] * inv;
            const int32_t q = wadd(f2i(roundf(p)), out->zp);
            y[j] = (int8_t)clampi(q, -128, 127);
        }
    }
}

static void eval_quantize(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    uint8_t *src = er_model_tensor_data(m, n->in[0]);
    uint8_t *dst = er_model_tensor_data(m, n->out);
    for (uint32_t i = 0; i < in->count; i++) {
        int16_t w16 = 0;
        if (in->type == ER_TYPE_INT16) memcpy(&w16, src + 2 * (size_t)i, 2);
        const int32_t qin = in->type == ER_TYPE_INT16 ? w16 : (in->type == ER_TYPE_UINT8 ? (int32_t)src[i] : (int32_t)(int8_t)src[i]);
        if (n->op == 6) { /* DEQUANTIZE: (float)(double scale * (q - zp)) */
            const float v = (float)((double)in->scale * (double)(qin - in->zp));
            memcpy(dst + 4 * i, &v, 4);
        } else if (in->type == ER_TYPE_FLOAT32 && out->type == ER_TYPE_INT16) {
            /* round(v / s) + zp; NaN and values beyond int32 give INT32_MIN + zp (x86's conversion) */
            float v;
            memcpy(&v, src + 4 * (size_t)i, 4);
            const float r = roundf(v / out->scale);
            const int32_t q = wadd(r > -2147483648.0f && r < 2147483648.0f ? (int32_t)r : INT32_MIN, out->zp);
            const int16_t o = (int16_t)clampi(q, -32768, 32767);
            memcpy(dst + 2 * (size_t)i, &o, 2);
        } else if (in->type == ER_TYPE_INT16 || out->type == ER_TYPE_INT16) { /* int8 <-> int16 */
            const int32_t q = wadd(er_mbqm(qin - in->zp, n->mult, n->shift), out->zp);
            if (out->type == ER_TYPE_INT16) {
                const int16_t o = (int16_t)clampi(q, -32768, 32767);
                memcpy(dst + 2 * (size_t)i, &o, 2);
            } else {
                dst[i] = (uint8_t)(int8_t)clampi(q, -128, 127);
            }
        } else if (in->type == ER_TYPE_FLOAT32) {
            float v;
            memcpy(&v, src + 4 * i, 4);
            const int32_t q = wadd(f2i(roundf(v / out->scale)), out->zp);
            dst[i] = (uint8_t)(int8_t)clampi(q, -128, 127);
        } else if (out->type == ER_TYPE_UINT8) {
            const int32_t q = wadd(er_mbqm(qin - in->zp, n->mult, n->shift), out->zp);
            dst[i] = (uint8_t)clampi(q, 0, 255);
        } else { /* int8 or uint8 -> int8 */
            const int32_t q = wadd(er_mbqm(qin - in->zp, n->mult, n->shift), out->zp);
            dst[i] = (uint8_t)(int8_t)clampi(q, -128, 127);
        }
    }
}

static void eval_concat(er_model *m, er_node *n) {
    er_tensor *out = tout(m, n);
    int8_t *y = i8out(m, n);
    uint32_t outer = 1, inner = 1;
    for (int d = 0; d < n->axis; d++) outer *= (uint32_t)out->dims[d];
    for (int d = n->axis + 1; d < out->ndim; d++) inner *= (uint32_t)out->dims[d];
    for (uint32_t o = 0; o < outer; o++)
        for (int k = 0; k < n->n_in; k++) {
            const uint32_t len = (uint32_t)tin(m, n, k)->dims[n->axis] * inner;
            memcpy(y, i8in(m, n, k) + o * len, len);
            y += len;
        }
}

static void eval_pad(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *p = tin(m, n, 1), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0);
    int8_t *y = i8out(m, n);
    int32_t lo[ER_MAX_DIMS], idx[ER_MAX_DIMS] = {0};
    for (int d = 0; d < in->ndim; d++) lo[d] = ld_i32(p->cdata + 8 * d);
    memset(y, (int8_t)n->act_min, out->count);
    for (uint32_t i = 0; i < in->count; i++) {
        uint32_t o = 0;
        for (int d = 0; d < in->ndim; d++) o = o * (uint32_t)out->dims[d] + (uint32_t)(idx[d] + lo[d]);
        y[o] = x[i];
        for (int d = in->ndim - 1; d >= 0; d--) {
            if (++idx[d] < in->dims[d]) break;
            idx[d] = 0;
        }
    }
}

static void eval_relu(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0);
    int8_t *y = i8out(m, n);
    for (uint32_t i = 0; i < in->count; i++) {
        int32_t v = wadd(out->zp, er_mbqm((int32_t)x[i] - in->zp, n->mult, n->shift));
        y[i] = (int8_t)clampi(v, n->act_min, n->act_max);
    }
}


static void eval_prelu(er_model *m, er_node *n) {
    er_tensor *a = tin(m, n, 0), *b = tin(m, n, 1), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0), *al = i8in(m, n, 1);
    int8_t *y = i8out(m, n);
    int32_t sb[ER_MAX_DIMS], idx[ER_MAX_DIMS];
    const int nd = out->ndim;
    int32_t strb = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int32_t db = i < nd - b->ndim ? 1 : b->dims[i - (nd - b->ndim)];
        sb[i] = db == 1 ? 0 : strb;
        strb *= db;
        idx[i] = 0;
    }
    for (uint32_t o = 0; o < a->count; o++) {
        int32_t ib = 0;
        for (int i = 0; i < nd; i++) ib += idx[i] * sb[i];
        const int32_t v = (int32_t)x[o] - a->zp;
        const int32_t r = v >= 0 ? er_mbqm(v, n->mult1, n->shift1) : er_mbqm(v * ((int32_t)al[ib] - b->zp), n->mult2, n->shift2);
        y[o] = (int8_t)clampi(wadd(r, out->zp), -128, 127);
        for (int i = nd - 1; i >= 0; i--) {
            if (++idx[i] < out->dims[i]) break;
            idx[i] = 0;
        }
    }
}

static void eval_view(er_model *m, er_node *n) {
    const er_view *v = n->view;
    const uint32_t es = esize(tin(m, n, 0));
    const uint8_t *x = er_model_tensor_data(m, n->in[0]);
    uint8_t *y = er_model_tensor_data(m, n->out);
    int32_t idx[ER_MAX_DIMS] = {0};
    int32_t off = v->off;
    const uint32_t count = tout(m, n)->count;
    const int last = v->nd - 1;
    for (uint32_t o = 0; o < count; o++) {
        if (es == 1) y[o] = x[off];
        else memcpy(y + (size_t)o * es, x + (size_t)off * es, es);
        for (int d = last; d >= 0; d--) { /* odometer, keeping the offset incrementally */
            off += v->stride[d];
            if (++idx[d] < v->dims[d]) break;
            off -= v->stride[d] * v->dims[d];
            idx[d] = 0;
        }
    }
}

static void eval_resize_nn(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const uint32_t es = esize(in);
    const uint8_t *x = er_model_tensor_data(m, n->in[0]);
    uint8_t *y = er_model_tensor_data(m, n->out);
    const int32_t B = in->dims[0], H = in->dims[1], W = in->dims[2], C = in->dims[3], OH = out->dims[1], OW = out->dims[2];
    for (int32_t b = 0; b < B; b++)
        for (int32_t oy = 0; oy < OH; oy++) {
            const int32_t iy = nn_index(oy, H, OH, n->flag1, n->flag2);
            for (int32_t ox = 0; ox < OW; ox++) {
                const int32_t ix = nn_index(ox, W, OW, n->flag1, n->flag2);
                memcpy(y + (((size_t)b * OH + oy) * OW + ox) * C * es, x + (((size_t)b * H + iy) * W + ix) * C * es, (size_t)C * es);
            }
        }
}

static void eval_reduce_max(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0);
    int8_t *y = i8out(m, n);
    const uint32_t red = (uint32_t)n->axis;
    int32_t idx[ER_MAX_DIMS] = {0};
    memset(y, 0x80, out->count); /* -128 */
    for (uint32_t i = 0; i < in->count; i++) {
        uint32_t o = 0;
        for (int d = 0; d < in->ndim; d++)
            if (!(red & (1u << d))) o = o * (uint32_t)in->dims[d] + (uint32_t)idx[d];
        if (x[i] > y[o]) y[o] = x[i];
        for (int d = in->ndim - 1; d >= 0; d--) {
            if (++idx[d] < in->dims[d]) break;
            idx[d] = 0;
        }
    }
}

static void eval_arg_max(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const int8_t *x = i8in(m, n, 0);
    uint8_t *y = er_model_tensor_data(m, n->out);
    uint32_t outer = 1, inner = 1;
    for (int d = 0; d < n->axis; d++) outer *= (uint32_t)in->dims[d];
    for (int d = n->axis + 1; d < in->ndim; d++) inner *= (uint32_t)in->dims[d];
    const uint32_t N = (uint32_t)in->dims[n->axis];
    for (uint32_t o = 0; o < outer; o++)
        for (uint32_t i = 0; i < inner; i++) {
            const int8_t *p = x + (size_t)o * N * inner + i;
            uint32_t best = 0;
            for (uint32_t k = 1; k < N; k++)
                if (n->op == 56 ? p[(size_t)k * inner] > p[(size_t)best * inner] : p[(size_t)k * inner] < p[(size_t)best * inner])
                    best = k;
            const uint32_t at = o * inner + i;
            if (out->type == ER_TYPE_INT64) {
                int64_t v = best;
                memcpy(y + 8 * (size_t)at, &v, 8);
            } else {
                int32_t v = (int32_t)best;
                memcpy(y + 4 * (size_t)at, &v, 4);
            }
        }
}

static int eval_gather(er_model *m, er_node *n) {
    er_tensor *p = tin(m, n, 0), *ix = tin(m, n, 1);
    const uint32_t es = esize(p);
    const uint8_t *x = er_model_tensor_data(m, n->in[0]), *ip = er_model_tensor_data(m, n->in[1]);
    uint8_t *y = er_model_tensor_data(m, n->out);
    uint32_t outer = 1, inner = 1;
    for (int d = 0; d < n->axis; d++) outer *= (uint32_t)p->dims[d];
    for (int d = n->axis + 1; d < p->ndim; d++) inner *= (uint32_t)p->dims[d];
    const int64_t N = p->dims[n->axis];
    const size_t row = (size_t)inner * es;
    for (uint32_t o = 0; o < outer; o++)
        for (uint32_t i = 0; i < ix->count; i++) {
            int64_t k;
            if (ix->type == ER_TYPE_INT64) memcpy(&k, ip + 8 * (size_t)i, 8);
            else k = ld_i32(ip + 4 * (size_t)i);
            if (k < 0 || k >= N) return -1; /* LiteRT fails the invoke too */
            memcpy(y, x + ((size_t)o * (size_t)N + (size_t)k) * row, row);
            y += row;
        }
    return 0;
}

static void eval_mirror_pad(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const uint32_t es = esize(in);
    const uint8_t *x = er_model_tensor_data(m, n->in[0]);
    uint8_t *y = er_model_tensor_data(m, n->out);
    int32_t idx[ER_MAX_DIMS] = {0};
    for (uint32_t o = 0; o < out->count; o++) {
        uint32_t src = 0;
        for (int d = 0; d < in->ndim; d++) {
            const int32_t dim = in->dims[d];
            int32_t i = idx[d] - n->pc_shift[d];
            if (i < 0) i = n->alpha_i == 0 ? -i : -i - 1;
            else if (i >= dim) i = n->alpha_i == 0 ? 2 * dim - 2 - i : 2 * dim - 1 - i;
            src = src * (uint32_t)dim + (uint32_t)i;
        }
        memcpy(y + (size_t)o * es, x + (size_t)src * es, es);
        for (int d = in->ndim - 1; d >= 0; d--) {
            if (++idx[d] < out->dims[d]) break;
            idx[d] = 0;
        }
    }
}

static void eval_pieces(er_model *m, er_node *n) {
    const int join = n->op == 83;
    const int16_t wi = join ? n->out : n->in[n->op == 49 ? 1 : 0];
    er_tensor *whole = &m->tensors[wi];
    uint8_t *w = er_model_tensor_data(m, wi);
    const uint32_t es = esize(whole);
    uint32_t outer = 1, inner = 1;
    for (int d = 0; d < n->axis; d++) outer *= (uint32_t)whole->dims[d];
    for (int d = n->axis + 1; d < whole->ndim; d++) inner *= (uint32_t)whole->dims[d];
    const int npieces = join ? n->n_in : n->n_out;
    size_t pos = 0;
    for (uint32_t o = 0; o < outer; o++)
        for (int k = 0; k < npieces; k++) {
            const size_t len = (size_t)n->pc_mult[k] * inner * es;
            uint8_t *piece = er_model_tensor_data(m, join ? n->in[k] : n->outs[k]);
            if (join) memcpy(w + pos, piece + o * len, len);
            else memcpy(piece + o * len, w + pos, len);
            pos += len;
        }
}

static void eval_log_softmax(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0);
    const int8_t *x = i8in(m, n, 0);
    int8_t *y = i8out(m, n);
    const int32_t depth = in->dims[in->ndim - 1];
    if (depth <= 0) return;
    const uint32_t rows = in->count / (uint32_t)depth;
    for (uint32_t r = 0; r < rows; r++, x += depth, y += depth) {
        int32_t mx = -128, total = 0;
        for (int32_t j = 0; j < depth; j++) if (x[j] > mx) mx = x[j];
        for (int32_t j = 0; j < depth; j++) total = wadd(total, n->pc_shift[mx - x[j]]);
        const int32_t log_sum = log_q12_to_q5(total);
        int32_t adj = er_mbqm(wadd(log_sum, INT32_MIN), n->mult1, n->shift1);
        if (adj < n->act_min - 1) adj = n->act_min - 1;
        for (int32_t j = 0; j < depth; j++) {
            if (x[j] - mx > adj) {
                const int32_t o = rdbpot64((int64_t)n->pc_mult[mx - x[j]] - log_sum, 22) + 127;
                y[j] = (int8_t)clampi(o, -128, 127);
            } else {
                y[j] = -128;
            }
        }
    }
}

static int64_t cast_load(const uint8_t *p, uint8_t type, uint32_t i) {
    switch (type) {
        case ER_TYPE_INT8: return (int8_t)p[i];
        case ER_TYPE_UINT8: return p[i];
        case ER_TYPE_INT16: { int16_t v; memcpy(&v, p + 2 * (size_t)i, 2); return v; }
        case ER_TYPE_INT32: return ld_i32(p + 4 * (size_t)i);
        default: { int64_t v; memcpy(&v, p + 8 * (size_t)i, 8); return v; }
    }
}

/* float -> integer as LiteRT's SafeCast: NaN -> max, below min -> min, at or above max + 1 -> max,
 * else truncation toward zero */
static int64_t safe_cast(float f, uint8_t type) {
    int64_t lo, hi;
    switch (type) {
        case ER_TYPE_INT8: lo = -128; hi = 127; break;
        case ER_TYPE_UINT8: lo = 0; hi = 255; break;
        case ER_TYPE_INT16: lo = -32768; hi = 32767; break;
        case ER_TYPE_INT32: lo = INT32_MIN; hi = INT32_MAX; break;
        default: lo = INT64_MIN; hi = INT64_MAX; break;
    }
    if (!(f == f)) return hi;
    if ((double)f < (double)lo) return lo;
    if ((double)f >= (double)(hi / 2 + 1) * 2.0) return hi;
    return (int64_t)f;
}

static void eval_cast(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const uint8_t *x = er_model_tensor_data(m, n->in[0]);
    uint8_t *y = er_model_tensor_data(m, n->out);
    for (uint32_t i = 0; i < out->count; i++) {
        int64_t v;
        if (in->type == ER_TYPE_FLOAT32) {
            float f;
            memcpy(&f, x + 4 * (size_t)i, 4);
            v = safe_cast(f, out->type);
        } else {
            v = cast_load(x, in->type, i); /* static_cast: integers wrap, to float rounds */
        }
        switch (out->type) {
            case ER_TYPE_INT8: case ER_TYPE_UINT8: y[i] = (uint8_t)v; break;
            case ER_TYPE_INT16: { const uint16_t w = (uint16_t)v; memcpy(y + 2 * (size_t)i, &w, 2); break; }
            case ER_TYPE_INT32: { const uint32_t w = (uint32_t)v; memcpy(y + 4 * (size_t)i, &w, 4); break; }
            case ER_TYPE_INT64: memcpy(y + 8 * (size_t)i, &v, 8); break;
            default: { const float f = (float)v; memcpy(y + 4 * (size_t)i, &f, 4); break; }
        }
    }
}

static void eval_shape(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    uint8_t *y = er_model_tensor_data(m, n->out);
    for (int d = 0; d < in->ndim; d++) {
        if (out->type == ER_TYPE_INT64) {
            const int64_t v = in->dims[d];
            memcpy(y + 8 * d, &v, 8);
        } else {
            memcpy(y + 4 * d, &in->dims[d], 4);
        }
    }
}

/* ---- 16x8 kernels (reference_integer_ops instantiated for int16 input): int64 accumulators,
 * the int64 MultiplyByQuantizedMultiplier (multiplier rounded to Q0.15), int16 outputs --------- */
static int16_t ld16(const uint8_t *p, size_t i) { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
static void st16(uint8_t *p, size_t i, int64_t v, int32_t lo, int32_t hi) {
    const int16_t q = (int16_t)(v < lo ? lo : (v > hi ? hi : v));
    memcpy(p + 2 * i, &q, 2);
}
static int64_t bias64(const er_tensor *b, int32_t c) { /* 16x8 bias: int64 (LiteRT 2.3 misreads int32 ones) */
    int64_t v = 0;
    if (b) memcpy(&v, b->cdata + 8 * (size_t)c, 8);
    return v;
}
static int64_t mbqm64(int64_t acc, int32_t mult, int32_t shift) {
    const int64_t reduced = mult < 0x7FFF0000 ? ((int64_t)mult + (1 << 15)) >> 16 : 0x7FFF;
    const int32_t total = 15 - shift; /* >= 1: prepare refuses shifts above 14 */
    const uint64_t v = (uint64_t)acc * (uint64_t)reduced + ((uint64_t)1 << (total - 1)); /* wraps as int64 */
    return (int64_t)v >> (total > 63 ? 63 : total);
}

static void eval_conv16(er_model *m, er_node *n, int depthwise) {
    er_tensor *in = tin(m, n, 0), *f = tin(m, n, 1), *out = tout(m, n), *bt = tin(m, n, 2);
    const uint8_t *x = er_model_tensor_data(m, n->in[0]);
    const int8_t *w = (const int8_t *)f->cdata;
    uint8_t *y = er_model_tensor_data(m, n->out);
    const int32_t B = in->dims[0], H = in->dims[1], W = in->dims[2], C = in->dims[3];
    const int32_t OH = out->dims[1], OW = out->dims[2], OC = out->dims[3], FH = f->dims[1], FW = f->dims[2];
    const int32_t wz = n->left_shift, dm = depthwise ? n->depth_mult : 1;
    for (int32_t b = 0; b < B; b++)
        for (int32_t oy = 0; oy < OH; oy++)
            for (int32_t ox = 0; ox < OW; ox++) {
                const int32_t iy0 = oy * n->stride_h - n->pad_h, ix0 = ox * n->stride_w - n->pad_w;
                for (int32_t oc = 0; oc < OC; oc++) {
                    int64_t acc = 0;
                    for (int32_t fy = 0; fy < FH; fy++) {
                        const int32_t iy = iy0 + n->dil_h * fy;
                        if (iy < 0 || iy >= H) continue;
                        for (int32_t fx = 0; fx < FW; fx++) {
                            const int32_t ix = ix0 + n->dil_w * fx;
                            if (ix < 0 || ix >= W) continue;
                            const size_t px = ((size_t)(b * H + iy) * W + ix) * C;
                            if (depthwise) {
                                acc += (int64_t)ld16(x, px + (size_t)(oc / dm)) * ((int32_t)w[(fy * FW + fx) * OC + oc] - wz);
                            } else {
                                const int8_t *wp = w + ((size_t)(oc * FH + fy) * FW + fx) * C;
                                for (int32_t c = 0; c < C; c++) acc += (int64_t)ld16(x, px + (size_t)c) * ((int32_t)wp[c] - wz);
                            }
                        }
                    }
                    acc = (int64_t)((uint64_t)acc + (uint64_t)bias64(bt, oc)); /* wraps like LiteRT's int64 sum */
                    st16(y, ((size_t)(b * OH + oy) * OW + ox) * OC + oc, mbqm64(acc, n->pc_mult[oc], n->pc_shift[oc]),
                         n->act_min, n->act_max);
                }
            }
}

static void eval_fc16(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *f = tin(m, n, 1), *bt = tin(m, n, 2);
    const uint8_t *x = er_model_tensor_data(m, n->in[0]);
    const int8_t *w = (const int8_t *)f->cdata;
    uint8_t *y = er_model_tensor_data(m, n->out);
    const int32_t units = f->dims[0], depth = f->dims[1], batches = (int32_t)(in->count / (uint32_t)depth);
    for (int32_t b = 0; b < batches; b++)
        for (int32_t u = 0; u < units; u++) {
            int64_t acc = 0;
            for (int32_t d = 0; d < depth; d++)
                acc += (int64_t)ld16(x, (size_t)b * depth + d) * ((int32_t)w[(size_t)u * depth + d] - n->left_shift);
            acc = (int64_t)((uint64_t)acc + (uint64_t)bias64(bt, u)); /* a hostile bias wraps, no UB */
            /* LiteRT's reference FC requantizes 16x8 in double too, half away from zero */
            const double v = round((double)acc * n->feff[u]);
            st16(y, (size_t)b * units + u, v > 32767.0 ? 32767 : (v < -32768.0 ? -32768 : (int64_t)v), n->act_min, n->act_max);
        }
}

static void eval_pool16(er_model *m, er_node *n) {
    er_tensor *in = tin(m, n, 0), *out = tout(m, n);
    const uint8_t *x = er_model_tensor_data(m, n->in[0]);
    uint8_t *y = er_model_tensor_data(m, n->out);
    const int32_t B = in->dims[0], H = in->dims[1], W = in->dims[2], C = in->dims[3], OH = out->dims[1], OW = out->dims[2];
    for (int32_t b = 0; b < B; b++)
        for (int32_t oy = 0; oy < OH; oy++)
            for (int32_t ox = 0; ox < OW; ox++)
                for (int32_t c = 0; c < C; c++) {
                    const pool_win w = pool_window(n, oy, ox, H, W);
                    const int32_t iy0 = w.iy0, ix0 = w.ix0;
                    int64_t acc = n->op == 1 ? 0 : -32768;
                    int32_t count = 0;
                    for (int32_t fy = w.fy0; fy < w.fy1; fy++)
                        for (int32_t fx = w.fx0; fx < w.fx1; fx++) {
                            const int64_t v = ld16(x, ((size_t)(b * H + iy0 + fy) * W + ix0 + fx) * C + c);
                            if (n->op == 1) acc += v;
                            else if (v > acc) acc = v;
                            count++;
                        }
                    if (n->op == 1) acc = pool_average(acc, count);
                    st16(y, ((size_t)(b * OH + oy) * OW + ox) * C + c, acc, n->act_min, n->act_max);
                }
}

static void eval_binary16(er_model *m, er_node *n) {
    er_tensor *a = tin(m, n, 0), *b = tin(m, n, 1), *out = tout(m, n);
    const uint8_t *xa = er_model_tensor_data(m, n->in[0]), *xb = er_model_tensor_data(m, n->in[1]);
    uint8_t *y = er_model_tensor_data(m, n->out);
    int32_t od[ER_MAX_DIMS], sa[ER_MAX_DIMS], sb[ER_MAX_DIMS], idx[ER_MAX_DIMS];
    const int nd = out->ndim;
    broadcast_setup(a, b, out, od, sa, sb, idx);
    for (uint32_t o = 0; o < out->count; o++) {
        int32_t ia = 0, ib = 0;
        for (int i = 0; i < nd; i++) {
            ia += idx[i] * sa[i];
            ib += idx[i] * sb[i];
        }
        const int32_t va = (int32_t)ld16(xa, (size_t)ia) - a->zp, vb = (int32_t)ld16(xb, (size_t)ib) - b->zp;
        int32_t r;
        if (n->op == 18) {
            r = er_mbqm((int32_t)((uint32_t)va * (uint32_t)vb), n->mult, n->shift); /* int32 product, wrapping */
        } else {
            const int32_t s1 = er_mbqm((int32_t)((uint32_t)va << 15), n->mult1, n->shift1);
            const int32_t s2 = er_mbqm((int32_t)((uint32_t)vb << 15), n->mult2, n->shift2);
            r = er_mbqm(n->op == 0 ? wadd(s1, s2) : wsub(s1, s2), n->mult, n->shift);
        }
        st16(y, o, (int64_t)r + out->zp, n->act_min, n->act_max);
        broadcast_next(idx, od, nd);
    }
}

int er_kernel_eval(er_model *m, er_node *n) {
    switch (n->op) {
        case 3: case 4: case 9: case 1: case 17: case 0: case 18: case 41:
            if (tin(m, n, 0)->type == ER_TYPE_INT16) { /* 16x8 */
                if (n->op == 3 || n->op == 4) eval_conv16(m, n, n->op == 4);
                else if (n->op == 9) eval_fc16(m, n);
                else if (n->op == 1 || n->op == 17) eval_pool16(m, n);
                else eval_binary16(m, n);
                return 0;
            }
            if (n->op == 3) eval_conv(m, n);
            else if (n->op == 4) eval_dwconv(m, n);
            else if (n->op == 9) eval_fc(m, n);
            else if (n->op == 1 || n->op == 17) eval_pool(m, n);
            else return eval_binary(m, n);
            return 0;
        case 55: case 57: case 99: return eval_binary(m, n);
        case 28: case 47: case 98: case 101: case 117:
        case 14: {
            const int8_t *x = i8in(m, n, 0);
            int8_t *y = i8out(m, n);
            for (uint32_t i = 0; i < tin(m, n, 0)->count; i++) y[i] = n->itable[(uint8_t)x[i]];
            return 0;
        }
        case 54: eval_prelu(m, n); return 0;
        case 39: case 45: case 65: case 5: case 26: eval_view(m, n); return 0;
        case 97: eval_resize_nn(m, n); return 0;
        case 23: eval_resize_bilinear(m, n); return 0;
        case 82: eval_reduce_max(m, n); return 0;
        case 56: case 79: eval_arg_max(m, n); return 0;
        case 126: eval_batch_matmul(m, n); return 0;
        case 67: eval_transpose_conv(m, n); return 0;
        case 129: case 142: case 143: case 144: eval_var(m, n); return 0;
        case 36: return eval_gather(m, n);
        case 100: eval_mirror_pad(m, n); return 0;
        case 49: case 83: case 88: case 102: eval_pieces(m, n); return 0;
        case 40: return eval_mean(m, n);
        case 25:
            if (tin(m, n, 0)->type == ER_TYPE_INT16) eval_softmax16(m, n);
            else if (tout(m, n)->type == ER_TYPE_INT16) eval_softmax8to16(m, n);
            else eval_softmax(m, n);
            return 0;
        case 19: case 20: case 21: eval_relu(m, n); return 0;
        case 114: case 6: eval_quantize(m, n); return 0;
        case 22: case 43: case 70:
            memmove(er_model_tensor_data(m, n->out), er_model_tensor_data(m, n->in[0]), tout(m, n)->bytes);
            return 0;
        case 2: eval_concat(m, n); return 0;
        case 34: case 60: eval_pad(m, n); return 0;
        case 75: case 76: { /* SQRT, RSQRT: LiteRT fails the invoke below the input zero point */
            const int8_t *x = i8in(m, n, 0);
            int8_t *y = i8out(m, n);
            const int32_t zi = tin(m, n, 0)->zp;
            for (uint32_t i = 0; i < tin(m, n, 0)->count; i++) {
                if (x[i] < zi) return -1;
                y[i] = n->itable[(uint8_t)x[i]];
            }
            return 0;
        }
        case 42: return eval_binary(m, n);
        case 74: return eval_mean(m, n);
        case 50: eval_log_softmax(m, n); return 0;
        case 53: eval_cast(m, n); return 0;
        case 77: eval_shape(m, n); return 0;
        default: return -1;
    }
}
