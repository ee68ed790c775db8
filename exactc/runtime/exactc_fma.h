/* exactc_fma.h: fma_A of docs/semantics.md section 18, a·b + c rounded once, for the
 * fused kernels (exactc export --contract fma), where the target has no FMA instruction.
 *
 * The fused kernels print each step as exactc_fma (f64) or exactc_fmaf (f32). Where the
 * target has the instruction (x86-64 with FMA3, AArch64: __FMA__, __aarch64__ or
 * __FP_FAST_FMA), these are C's fma and fmaf, which the compiler vectorizes into it.
 * Elsewhere they are exactc's own software fma below, the algorithm of the reference's
 * emulation (exporter/reference/fma.py), step for step in scalar C: every operation is one
 * IEEE operation in double (rounded to nearest, FLT_EVAL_METHOD 0, no contraction) or an
 * exact one (frexp, ldexp within range, floor, rint on an integer or a half, bits moved
 * through memcpy), so it does not depend on the platform's fma. -DEXACTC_SOFT_FMA=0 or 1
 * picks one anyway; tests/test_fma.py checks the software one bit for bit against the
 * hardware fma and fmaf and glibc's on the drawn and adversarial triples.
 *
 * - f32: the product of two floats is exact in double (48 bits); the double sum is
 *   rounded to odd (TwoSum, then the parity fix), then to float: with 53 >= 24 + 2 bits,
 *   the correct rounding of the exact sum (Boldo and Melquiond, IEEE Transactions on
 *   Computers 57(4), 2008). Float subnormals and overflow come with the last conversion.
 * - f64: a and b scaled to mantissas in [0.5, 1) and c with them, so that Dekker's
 *   product is exact and nothing overflows or underflows; Boldo and Melquiond's emulation
 *   (TwoSum(c, uh), the low parts added rounded to odd, one rounding of the high part
 *   plus that); the scale back is exact but for a subnormal result, rounded once on
 *   the subnormal grid from the sum truncated and its sticky bit.
 */
#ifndef EXACTC_FMA_H
#define EXACTC_FMA_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifndef EXACTC_SOFT_FMA
#if defined(__FMA__) || defined(__aarch64__) || defined(__FP_FAST_FMA)
#define EXACTC_SOFT_FMA 0
#else
#define EXACTC_SOFT_FMA 1
#endif
#endif

#if EXACTC_SOFT_FMA
#define exactc_fma exactc_soft_fma
#define exactc_fmaf exactc_soft_fmaf
#else
#define exactc_fma fma
#define exactc_fmaf fmaf
#endif

/* The reference's constants (exporter/reference/fma.py), the same values. */
#define EXACTC_FMA_SPLITTER 0x1.0000002p+27 /* Veltkamp's 2^27 + 1 */
#define EXACTC_FMA_TINY_EXPONENT (-200)     /* c below this (scaled): a sticky proxy */
#define EXACTC_FMA_TINY_PROXY 0x1p-201
#define EXACTC_FMA_DOMINANT_EXPONENT 55     /* c this far above the product: c */
#define EXACTC_FMA_SUBNORMAL_QUANTUM (-1074)
#define EXACTC_FMA_SMALLEST_NORMAL 0x1p-1022

static inline int64_t exactc_fma_bits(double x) {
    int64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double exactc_fma_from_bits(int64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Knuth's TwoSum: *s = x + y rounded, *err with *s + *err = x + y exactly. */
static inline void exactc_fma_two_sum(double x, double y, double *s, double *err) {
    double sum = x + y;
    double yy = sum - x;
    *s = sum;
    *err = (x - (sum - yy)) + (y - yy);
}

/* x + y rounded to odd: the nearest sum, moved one ulp towards the exact sum when it is
 * inexact and its last bit even (the sign-magnitude bits: +1 away from zero). */
static inline double exactc_fma_add_odd(double x, double y) {
    double s, err;
    exactc_fma_two_sum(x, y, &s, &err);
    int64_t bits = exactc_fma_bits(s);
    if (err != 0 && (bits & 1) == 0)
        bits += ((err > 0) == (s > 0)) ? 1 : -1;
    return exactc_fma_from_bits(bits);
}

/* Veltkamp's split: x = *hi + *lo, each of at most 26 significant bits. */
static inline void exactc_fma_split(double x, double *hi, double *lo) {
    double t = EXACTC_FMA_SPLITTER * x;
    *hi = t - (t - x);
    *lo = x - *hi;
}

/* Dekker's product: *p = x * y rounded, *err with *p + *err = x·y exactly (here |x|,
 * |y| in [0.5, 1): no overflow, no partial product underflows). */
static inline void exactc_fma_two_prod(double x, double y, double *p, double *err) {
    double xh, xl, yh, yl;
    *p = x * y;
    exactc_fma_split(x, &xh, &xl);
    exactc_fma_split(y, &yh, &yl);
    *err = (((xh * yh - *p) + xh * yl) + xl * yh) + xl * yl;
}

/* z + err (exact, z its nearest) rounded toward zero: z, or one ulp nearer zero. */
static inline double exactc_fma_toward_zero(double z, double err) {
    int inward = err != 0 && ((err > 0) != (z > 0));
    return exactc_fma_from_bits(exactc_fma_bits(z) - inward);
}

/* A result below 2^-1022: the exact sum is `truncated` (at scale 2^-exponent, toward
 * zero) plus something below its last bit when `sticky`, rounded to the multiples of
 * 2^-1074, nearest even. Its midpoints lie on the 53-bit grid, so only a midpoint with a
 * sticky bit rounds otherwise than `truncated` does: away from zero. */
static inline double exactc_fma_round_subnormal(double truncated, int sticky, int exponent) {
    double units = ldexp(fabs(truncated), exponent - EXACTC_FMA_SUBNORMAL_QUANTUM);
    double whole = floor(units);
    double count = (sticky && units - whole == 0.5) ? whole + 1 : rint(units);
    return copysign(ldexp(count, EXACTC_FMA_SUBNORMAL_QUANTUM), truncated);
}

/* RN(ma·mb·2^exponent + c) for mantissas ma, mb in [0.5, 1) and c at most 2^55 times
 * the product (gap: c's exponent minus the product's), at scale 2^-exponent. */
static inline double exactc_fma_scaled(double ma, double mb, double c, int exponent, int gap) {
    double cs = gap < EXACTC_FMA_TINY_EXPONENT ? copysign(EXACTC_FMA_TINY_PROXY, c) : ldexp(c, -exponent);
    double uh, ul, th, tl, z, err;
    exactc_fma_two_prod(ma, mb, &uh, &ul);
    exactc_fma_two_sum(cs, uh, &th, &tl);
    double v = exactc_fma_add_odd(tl, ul);
    exactc_fma_two_sum(th, v, &z, &err); /* z: Boldo and Melquiond's result, scaled */
    double truncated = exactc_fma_toward_zero(z, err);
    /* 2^(-1022-exponent) overflows only where the result is far below 2^-1022. */
    if (fabs(truncated) < ldexp(EXACTC_FMA_SMALLEST_NORMAL, -exponent))
        return exactc_fma_round_subnormal(truncated, err != 0, exponent);
    return ldexp(z, exponent);
}

/* fma_A at f64, by cases: special operands, a product that cannot matter, the scaled
 * emulation. */
static inline double exactc_soft_fma(double a, double b, double c) {
    if (!isfinite(a) || !isfinite(b) || !isfinite(c) || a == 0 || b == 0) {
        /* IEEE's rules for ±∞ and NaN, and an exact ±0 product: a*b itself (∞·0 is
         * NaN), and a finite product next to an infinite c gives c. */
        double product = (isfinite(a) && isfinite(b) && !isfinite(c)) ? 0.0 : a * b;
        return product + c;
    }
    if (c == 0)
        return a * b; /* the product alone, rounded once (its sign kept on underflow) */
    int ea, eb, ec;
    double ma = frexp(a, &ea);
    double mb = frexp(b, &eb);
    (void)frexp(c, &ec);
    int exponent = ea + eb; /* |a·b| in [2^(exponent-2), 2^exponent) */
    if (ec - exponent > EXACTC_FMA_DOMINANT_EXPONENT)
        return c;
    return exactc_fma_scaled(ma, mb, c, exponent, ec - exponent);
}

/* fma_A at f32: the exact product in double, the sum rounded to odd, then to float. */
static inline float exactc_soft_fmaf(float a, float b, float c) {
    double p = (double)a * (double)b; /* exact: 48 bits, |p| <= 2^256 */
    double c64 = (double)c;
    /* Infinities and NaN: the double sum of an exact product follows IEEE's rules. */
    double s = isfinite(p) && isfinite(c64) ? exactc_fma_add_odd(p, c64) : p + c64;
    return (float)s;
}

#endif
