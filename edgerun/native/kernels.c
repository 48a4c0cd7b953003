/* edgerun native kernels: the few loops that numpy cannot fuse, compiled on the machine that runs
 * them (edgerun/native/__init__.py). Every function here is a bit-exact twin of a numpy
 * formulation in edgerun/ops and is tested against it and against LiteRT; the numpy kernels
 * stay the definition and the fallback. Callers check shapes, dtypes and bounds: these loops
 * trust their arguments. The elementwise loops (ADD, PRELU) may write over an operand: each value
 * is read before its own output is written. */
#include <stdint.h>

/* TFLite's MultiplyByQuantizedMultiplier with gemmlowp's roundings, on int32 lanes where it can:
 * ``x << left`` wraps like the reference's ``x * (1 << left)``; SaturatingRoundingDoublingHighMul
 * is ``floor((x * m + 2^30) / 2^31)`` (edgerun.ops.common.Requantizer: gemmlowp's nudge and
 * truncation give this floor for both signs; saturation needs m = -2^31, never produced), whose
 * low 32 bits a logical shift of the int64 sum gives as well as an arithmetic one; then
 * RoundingDivideByPOT by ``right`` (half away from zero) as the reference spells it. */
static inline int32_t mbqm(int32_t x, int32_t left, int32_t mul, int32_t right)
{
    x = (int32_t)((uint32_t)x << left);
    int64_t s = (int64_t)x * (int64_t)mul + (INT64_C(1) << 30);
    int32_t h = (int32_t)(uint32_t)((uint64_t)s >> 31);
    int32_t mask = (int32_t)((UINT32_C(1) << right) - 1);
    int32_t rem = h & mask, thr = (mask >> 1) + (h < 0);
    return (h >> right) + (rem > thr);
}

/* One int8 result: accumulator ``a`` plus ``bias`` (int32, wrapping like the reference's
 * ``acc += bias``), requantized by column ``j``'s multiplier, plus the zero point, clamped. */
static inline int8_t requant_one(int32_t a, int64_t j, const int32_t *restrict bias,
                                 const int32_t *restrict left, const int32_t *restrict mul,
                                 const int32_t *restrict right, int32_t zp, int32_t lo, int32_t hi)
{
    int32_t y = mbqm((int32_t)((uint32_t)a + (uint32_t)bias[j]), left[j], mul[j], right[j]) + zp;
    y = y < lo ? lo : y;
    y = y > hi ? hi : y;
    return (int8_t)y;
}

/* int8 requantization of float32 accumulators holding exact integers (|acc| < 2^24, checked by
 * the caller): ``acc`` is rows x w, the per-column constants w long (whole pixels). */
void edgerun_requant_i8(const float *restrict acc, int8_t *restrict out, int64_t rows, int64_t w,
                        const int32_t *restrict bias, const int32_t *restrict left,
                        const int32_t *restrict mul, const int32_t *restrict right, int32_t zp,
                        int32_t lo, int32_t hi)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *a = acc + r * w;
        int8_t *o = out + r * w;
        for (int64_t j = 0; j < w; j++)
            o[j] = requant_one((int32_t)a[j], j, bias, left, mul, right, zp, lo, hi);
    }
}

/* int8 DEPTHWISE_CONV_2D as TFLite's reference kernel computes it: for every output pixel and
 * channel ``k = ch * dm + d``, the sum over the taps inside the input of
 * ``(x[ch] - x_zp) * f[tap][k]`` (taps in the padding add nothing), plus the bias, requantized
 * as above. ``x`` is NHWC (n, h, w, c), ``out`` (n, oh, ow, c * dm). One output row at a time:
 * ``acc`` (ow * c * dm int32 of scratch) starts at 0, every tap adds its products, then the row
 * is requantized (bias added) with constants ``wq`` values long (a whole number of pixels).
 * ``f`` is (kh * kw, reps * c * dm): each tap's weights repeated for ``reps`` pixels, so that with
 * stride 1 and dm 1 a tap adds to up to ``reps`` adjacent pixels in one contiguous loop. */
void edgerun_depthwise_i8(const int8_t *restrict x, int64_t n, int64_t h, int64_t w, int64_t c,
                          int64_t dm, const int8_t *restrict f, int64_t reps, int64_t kh, int64_t kw,
                          int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl,
                          int64_t oh, int64_t ow, int32_t x_zp, int64_t wq,
                          const int32_t *restrict bias, const int32_t *restrict left,
                          const int32_t *restrict mul, const int32_t *restrict right, int32_t zp,
                          int32_t lo, int32_t hi, int8_t *restrict out, int32_t *restrict acc)
{
    const int64_t oc = c * dm, fl = reps * oc;
    for (int64_t b = 0; b < n; b++) {
        for (int64_t oy = 0; oy < oh; oy++) {
            for (int64_t i = 0; i < ow * oc; i++)
                acc[i] = 0;
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
                    o[r + j] = requant_one(acc[r + j], j, bias, left, mul, right, zp, lo, hi);
        }
    }
}

/* int8 / uint8 ADD and SUB of two tensors of one shape, as TFLite's reference kernel computes
 * them: ``t1`` and ``t2`` (256 int32 each, indexed by the operands' bytes) hold each operand
 * rescaled onto the common scale (``SUB``: the second negated), exact per value; their sum is
 * requantized by the output multiplier (``left``, ``mul``, ``right``), plus ``zo``, clamped,
 * stored as the output's byte. */
void edgerun_add_i8(const uint8_t *a, const uint8_t *b, uint8_t *out, int64_t n,
                    const int32_t *restrict t1, const int32_t *restrict t2, int32_t left, int32_t mul,
                    int32_t right, int32_t zo, int32_t lo, int32_t hi)
{
    for (int64_t i = 0; i < n; i++) {
        int32_t y = mbqm(t1[a[i]] + t2[b[i]], left, mul, right) + zo;
        y = y < lo ? lo : y;
        y = y > hi ? hi : y;
        out[i] = (uint8_t)y;
    }
}

/* The same ops as a fitted float32 plane (edgerun.ops.elementwise.Int8AddSub._prepare_line):
 * ``floor(clamp((a * fa + b * fb) + fc, lo, hi))``, the float32 operations in that order (built
 * with -ffp-contract=off: no fused multiply-add), cast to the byte, XORed with ``flip`` (0x80
 * for int8, whose plane runs on values plus 128). ``is_int8`` says how to read the bytes. */
static inline uint8_t plane_one(float a, float b, float fa, float fb, float fc, float lo, float hi,
                                int32_t flip)
{
    float y = a * fa;
    float t = b * fb;
    y = y + t;
    y = y + fc;
    y = y < lo ? lo : y;
    y = y > hi ? hi : y;
    return (uint8_t)((int32_t)y ^ flip);
}

void edgerun_add_line_i8(const uint8_t *a, const uint8_t *b, uint8_t *out,
                         int64_t n, int32_t is_int8, float fa, float fb, float fc, float lo, float hi,
                         int32_t flip)
{
    if (is_int8) {
        const int8_t *sa = (const int8_t *)a, *sb = (const int8_t *)b;
        for (int64_t i = 0; i < n; i++)
            out[i] = plane_one((float)sa[i], (float)sb[i], fa, fb, fc, lo, hi, flip);
    } else {
        for (int64_t i = 0; i < n; i++)
            out[i] = plane_one((float)a[i], (float)b[i], fa, fb, fc, lo, hi, flip);
    }
}

/* int8 PRELU with one alpha per channel (the last axis), as the reference computes it:
 * ``v = x - zp_in``; ``v >= 0``: v times the first multiplier, else ``v * alpha[j]`` (alpha
 * less its zero point) times the second; plus ``zp_out``, clamped to int8. ``q``: (left, mul,
 * right) of the first multiplier, then of the second. */
void edgerun_prelu_i8(const int8_t *x, int8_t *out, int64_t rows, int64_t c,
                      const int32_t *restrict alpha, int32_t zp_in, int32_t zp_out,
                      const int32_t *restrict q)
{
    const int32_t l1 = q[0], m1 = q[1], r1 = q[2], l2 = q[3], m2 = q[4], r2 = q[5];
    for (int64_t r = 0; r < rows; r++) {
        const int8_t *xr = x + r * c;
        int8_t *o = out + r * c;
        for (int64_t j = 0; j < c; j++) {
            int32_t v = (int32_t)xr[j] - zp_in;
            int32_t yp = mbqm(v, l1, m1, r1), yn = mbqm(v * alpha[j], l2, m2, r2);
            int32_t y = (v >= 0 ? yp : yn) + zp_out;
            y = y < -128 ? -128 : y;
            y = y > 127 ? 127 : y;
            o[j] = (int8_t)y;
        }
    }
}
