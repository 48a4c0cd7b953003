/* edgerun native kernels: the few loops that numpy cannot fuse, compiled on the machine that runs
 * them (edgerun/native/__init__.py). Every function here is a bit-exact twin of a numpy
 * formulation in edgerun/ops and is tested against it and against LiteRT; the numpy kernels
 * stay the definition and the fallback. Callers check shapes, dtypes and bounds: these loops
 * trust their arguments. */
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
