/* edgerun native kernels: the few loops that numpy cannot fuse, compiled on the machine that runs
 * them (edgerun/native/__init__.py). Every function here is a bit-exact twin of a numpy
 * formulation in edgerun/ops and is tested against it and against LiteRT; the numpy kernels
 * stay the definition and the fallback. Callers check shapes, dtypes and bounds: these loops
 * trust their arguments. The elementwise loops (ADD, PRELU) may write over an operand: each value
 * is read before its own output is written. */
#include <stdint.h>

/* int8 requantization of float32 accumulators that hold exact integers (|acc + bias| < 2^24,
 * checked by the caller), TFLite's MultiplyByQuantizedMultiplier with gemmlowp rounding in the
 * one-shift form of edgerun.ops.common.Requantizer:
 *
 *   x = (acc + bias) << left;  q = x * m;
 *   y = (q + add - (q + 2^30 < 0 ? neg : 0)) >> total,  clamped to [lo, hi]
 *
 * ``add`` carries 2^30, the right shift's rounding half, the zero point and 2^62; the shift is a
 * logical one of that positive sum, less 2^62 >> total (``off``): an arithmetic shift without
 * AVX-512's variable one. ``requant_one`` is one value (``x`` the accumulator plus bias, ``j``
 * its column in the constants); in ``edgerun_requant_i8`` ``acc`` is rows x w and the
 * per-column constants are w long. */
static inline int8_t requant_one(int32_t x, int64_t j, const int32_t *restrict left,
                                 const int32_t *restrict mul, const int64_t *restrict add,
                                 const int64_t *restrict neg, const uint64_t *restrict total,
                                 const int64_t *restrict off, int32_t lo, int32_t hi)
{
    x = (int32_t)((uint32_t)x << left[j]);
    int64_t q = (int64_t)x * (int64_t)mul[j];
    int64_t t = q + add[j] - (q < -(INT64_C(1) << 30) ? neg[j] : 0);
    int64_t y = (int64_t)((uint64_t)t >> total[j]) - off[j];
    y = y < lo ? lo : y;
    y = y > hi ? hi : y;
    return (int8_t)y;
}

void edgerun_requant_i8(const float *restrict acc, int8_t *restrict out, int64_t rows, int64_t w,
                        const int32_t *restrict bias, const int32_t *restrict left,
                        const int32_t *restrict mul, const int64_t *restrict add,
                        const int64_t *restrict neg, const uint64_t *restrict total,
                        const int64_t *restrict off, int32_t lo, int32_t hi)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *a = acc + r * w;
        int8_t *o = out + r * w;
        for (int64_t j = 0; j < w; j++)
            o[j] = requant_one((int32_t)a[j] + bias[j], j, left, mul, add, neg, total, off, lo, hi);
    }
}

/* int8 DEPTHWISE_CONV_2D as TFLite's reference kernel computes it: for every output pixel and
 * channel ``k = ch * dm + d``, the sum over the taps inside the input of
 * ``(x[ch] - x_zp) * f[tap][k]`` (taps in the padding add nothing), plus the bias, requantized
 * as above. ``x`` is NHWC (n, h, w, c), ``out`` (n, oh, ow, c * dm). One output row at a time:
 * ``acc`` (ow * c * dm int32 of scratch) starts at the bias, every tap adds its products, then
 * the row is requantized with constants ``wq`` values long (a whole number of pixels).
 * ``f`` is (kh * kw, reps * c * dm): each tap's weights repeated for ``reps`` pixels, so that with
 * stride 1 and dm 1 a tap adds to up to ``reps`` adjacent pixels in one contiguous loop. */
void edgerun_depthwise_i8(const int8_t *restrict x, int64_t n, int64_t h, int64_t w, int64_t c,
                          int64_t dm, const int8_t *restrict f, int64_t reps, int64_t kh, int64_t kw,
                          int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl,
                          int64_t oh, int64_t ow, int32_t x_zp, int64_t wq,
                          const int32_t *restrict bias, const int32_t *restrict left,
                          const int32_t *restrict mul, const int64_t *restrict add,
                          const int64_t *restrict neg, const uint64_t *restrict total,
                          const int64_t *restrict off, int32_t lo, int32_t hi,
                          int8_t *restrict out, int32_t *restrict acc)
{
    const int64_t oc = c * dm, fl = reps * oc;
    for (int64_t b = 0; b < n; b++) {
        for (int64_t oy = 0; oy < oh; oy++) {
            for (int64_t ox = 0; ox < ow; ox++)
                for (int64_t k = 0; k < oc; k++)
                    acc[ox * oc + k] = bias[k];
            for (int64_t ky = 0; ky < kh; ky++) {
                int64_t iy = oy * sh - pt + ky * dh;
                if (iy < 0 || iy >= h)
                    continue;
                const int8_t *xrow = x + (b * h + iy) * w * c;
                for (int64_t kx = 0; kx < kw; kx++) {
                    const int8_t *fv = f + (ky * kw + kx) * fl;
                    /* the output columns whose input column ox * sw - pl + kx * dw is inside */
                    int64_t d = kx * dw - pl, lo_x = 0, hi_x = ow;
                    while (lo_x < ow && lo_x * sw + d < 0)
                        lo_x++;
                    while (hi_x > lo_x && (hi_x - 1) * sw + d >= w)
                        hi_x--;
                    if (sw == 1 && dm == 1) {
                        for (int64_t ox = lo_x; ox < hi_x; ox += reps) {
                            int64_t len = (hi_x - ox < reps ? hi_x - ox : reps) * oc;
                            const int8_t *xs = xrow + (ox + d) * c;
                            int32_t *a = acc + ox * oc;
                            for (int64_t i = 0; i < len; i++)
                                a[i] += (int32_t)(int16_t)(((int16_t)xs[i] - x_zp) * (int16_t)fv[i]);
                        }
                    } else {
                        for (int64_t ox = lo_x; ox < hi_x; ox++) {
                            const int8_t *xs = xrow + (ox * sw + d) * c;
                            int32_t *a = acc + ox * oc;
                            if (dm == 1) {
                                for (int64_t k = 0; k < oc; k++)
                                    a[k] += (int32_t)(int16_t)(((int16_t)xs[k] - x_zp) * (int16_t)fv[k]);
                            } else {
                                for (int64_t ch = 0; ch < c; ch++) {
                                    int32_t v = (int32_t)xs[ch] - x_zp;
                                    for (int64_t e = 0; e < dm; e++)
                                        a[ch * dm + e] += v * (int32_t)fv[ch * dm + e];
                                }
                            }
                        }
                    }
                }
            }
            int8_t *o = out + (b * oh + oy) * ow * oc;
            for (int64_t r = 0; r < ow * oc; r += wq)
                for (int64_t j = 0; j < wq; j++)
                    o[r + j] = requant_one(acc[r + j], j, left, mul, add, neg, total, off, lo, hi);
        }
    }
}

/* int8 / uint8 ADD and SUB of two tensors of one shape, as TFLite's reference kernel computes
 * them: ``t1`` and ``t2`` (256 int32 each, indexed by the operands' bytes) hold each operand
 * rescaled onto the common scale (``SUB``: the second negated), exact per value; their sum is
 * requantized by the output multiplier (one-shift form as above, without the zero point:
 * ``add`` = 2^30 + the rounding half, ``neg`` the sign term, arithmetic shift by ``total``),
 * plus ``zo``, clamped, stored as the output's byte. */
void edgerun_add_i8(const uint8_t *a, const uint8_t *b, uint8_t *out,
                    int64_t n, const int32_t *restrict t1, const int32_t *restrict t2, int32_t left,
                    int32_t mul, int64_t add, int64_t neg, int32_t total, int32_t zo, int32_t lo,
                    int32_t hi)
{
    for (int64_t i = 0; i < n; i++) {
        int32_t s = (int32_t)((uint32_t)(t1[a[i]] + t2[b[i]]) << left);
        int64_t q = (int64_t)s * (int64_t)mul;
        int64_t t = q + add - (q < -(INT64_C(1) << 30) ? neg : 0);
        int64_t y = (t >> total) + zo;
        y = y < lo ? lo : y;
        y = y > hi ? hi : y;
        out[i] = (uint8_t)(int32_t)y;
    }
}

/* The same ops as a fitted float32 plane (edgerun.ops.elementwise.Int8AddSub._prepare_line):
 * ``floor(clamp((a * fa + b * fb) + fc, lo, hi))``, the float32 operations in that order (built
 * with -ffp-contract=off: no fused multiply-add), cast to the byte, XORed with ``flip`` (0x80
 * for int8, whose plane runs on values plus 128). ``is_int8`` says how to read the bytes. */
void edgerun_add_line_i8(const uint8_t *a, const uint8_t *b, uint8_t *out,
                         int64_t n, int32_t is_int8, float fa, float fb, float fc, float lo, float hi,
                         int32_t flip)
{
    if (is_int8) {
        const int8_t *sa = (const int8_t *)a, *sb = (const int8_t *)b;
        for (int64_t i = 0; i < n; i++) {
            float y = (float)sa[i] * fa;
            float t = (float)sb[i] * fb;
            y = y + t;
            y = y + fc;
            y = y < lo ? lo : y;
            y = y > hi ? hi : y;
            out[i] = (uint8_t)((int32_t)y ^ flip);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float y = (float)a[i] * fa;
            float t = (float)b[i] * fb;
            y = y + t;
            y = y + fc;
            y = y < lo ? lo : y;
            y = y > hi ? hi : y;
            out[i] = (uint8_t)((int32_t)y ^ flip);
        }
    }
}

/* MultiplyByQuantizedMultiplier of a small int32 (|v| < 2^24 after the left shift, so no
 * saturation and no int64 overflow), in the one-shift form: ``add`` = 2^30 + the rounding half
 * + 2^62, ``neg`` the sign term, ``off`` = 2^62 >> total. */
static inline int64_t mbqm_small(int32_t v, int32_t left, int32_t mul, int64_t add, int64_t neg,
                                 uint64_t total, int64_t off)
{
    int64_t q = (int64_t)(int32_t)((uint32_t)v << left) * (int64_t)mul;
    int64_t t = q + add - (q < -(INT64_C(1) << 30) ? neg : 0);
    return (int64_t)((uint64_t)t >> total) - off;
}

/* int8 PRELU with one alpha per channel (the last axis), as the reference computes it:
 * ``v = x - zp_in``; ``v >= 0``: v times the first multiplier, else ``v * alpha[j]`` (alpha
 * less its zero point) times the second; plus ``zp_out``, clamped to int8. ``p1`` / ``p2``:
 * (left, mul) of each multiplier, ``a1`` / ``a2`` (add, neg, total, off). */
void edgerun_prelu_i8(const int8_t *x, int8_t *out, int64_t rows, int64_t c,
                      const int32_t *restrict alpha, int32_t zp_in, int32_t zp_out,
                      const int32_t *restrict p1, const int64_t *restrict a1,
                      const int32_t *restrict p2, const int64_t *restrict a2)
{
    const int32_t l1 = p1[0], m1 = p1[1], l2 = p2[0], m2 = p2[1];
    const int64_t ad1 = a1[0], ng1 = a1[1], of1 = a1[3], ad2 = a2[0], ng2 = a2[1], of2 = a2[3];
    const uint64_t t1 = (uint64_t)a1[2], t2 = (uint64_t)a2[2];
    for (int64_t r = 0; r < rows; r++) {
        const int8_t *xr = x + r * c;
        int8_t *o = out + r * c;
        for (int64_t j = 0; j < c; j++) {
            int32_t v = (int32_t)xr[j] - zp_in;
            int64_t yp = mbqm_small(v, l1, m1, ad1, ng1, t1, of1);
            int64_t yn = mbqm_small(v * alpha[j], l2, m2, ad2, ng2, t2, of2);
            int64_t y = (v >= 0 ? yp : yn) + zp_out;
            y = y < -128 ? -128 : y;
            y = y > 127 ? 127 : y;
            o[j] = (int8_t)y;
        }
    }
}
