/* exactc_dot.h: the int32 block sums of the integer-form quantized linear (qlinear_i,
 * docs/semantics.md section 15), s = Σ int32(x_j) · int32(value_j) over one block of
 * G = 32 int8 activations x and
 * - q8: 32 int8 weight values w (any int8, -128 included: a GGUF Q8_0 file may hold it);
 * - q4: 16 bytes in ggml's Q4_0 order, value j (j < 16) the low nibble of byte j and
 *   value j + 16 its high nibble, value = nibble - 8.
 *
 * Integer addition is exact and |s| <= 32 · 128 · 128 = 2^19, so every order and every
 * instruction gives the same s: the plain C loops below are the definition, and the
 * vector paths are picked by what the target has (the printer calls exactc_dot_q8_32 and
 * exactc_dot_q4_32 for a whole block of 32, their x8 forms for 8 rows at once where a
 * layout has n in lanes of 8, and the tile kernels at the end, sums and combine of 4
 * activation rows by 8 weight rows, where it has m in lanes of 4 over n in lanes of 8,
 * printer/dots.py):
 * - AVX-512 VNNI with AVX-512 VL, or AVX-VNNI: vpdpbusd (unsigned bytes times signed
 *   bytes, four products a lane summed into int32, no saturation), with the offset
 *   correction: q8 sums (x + 128) · w and takes 128 · Σ w off; q4 sums nibble · x and takes
 *   8 · Σ x off (Σ w and Σ x are vpdpbusd of all-ones bytes);
 * - AVX2: vpmaddubsw (unsigned bytes times signed bytes, pairs summed into int16 WITH
 *   saturation) then vpmaddwd by ones (pairs of int16 into int32, exact). q8 uses ggml's
 *   sign trick: |w| read unsigned (0 … 128; |-128| is the byte 0x80, 128 unsigned) times
 *   x · sign(w) (x negated where w < 0, 0 where w = 0). A pair is at most
 *   2 · 128 · 127 = 32512 <= 32767 in magnitude when x is within [-127, 127], which quantize
 *   guarantees (it clamps there); a block holding x = -128 (possible only in a caller's own
 *   xq: -(-128) wraps in vpsignb and 128 · 128 · 2 would saturate) takes the plain loop.
 *   q4 reads the nibble unsigned (0 … 15) times x and takes 8 · x off pair by pair: the
 *   pairs are at most 2 · 15 · 128 = 3840 and 2 · 8 · 128 = 2048, for any int8 x;
 * - elsewhere (no AVX2, AArch64, -DEXACTC_DOT_PLAIN=1): the plain loops.
 * -DEXACTC_DOT_NO_VNNI=1 takes AVX2's path on a VNNI target (the tests run both there).
 * EXACTC_DOT_PATH names the path this build took. tests/test_dot.py checks each path the
 * CPU runs against numpy on drawn and extreme blocks, and builds the others. */
#ifndef EXACTC_DOT_H
#define EXACTC_DOT_H

#include <stdint.h>
#include <string.h>

#ifndef EXACTC_DOT_PLAIN
#define EXACTC_DOT_PLAIN 0
#endif

#ifndef EXACTC_DOT_NO_VNNI
#define EXACTC_DOT_NO_VNNI 0
#endif

#if !EXACTC_DOT_PLAIN && !EXACTC_DOT_NO_VNNI && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define EXACTC_DOT_PATH "avx512vnni"
#define EXACTC_DOT_VNNI 1
#define EXACTC_DPBUSD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#elif !EXACTC_DOT_PLAIN && !EXACTC_DOT_NO_VNNI && defined(__AVXVNNI__)
#define EXACTC_DOT_PATH "avxvnni"
#define EXACTC_DOT_VNNI 1
#define EXACTC_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#elif !EXACTC_DOT_PLAIN && defined(__AVX2__)
#define EXACTC_DOT_PATH "avx2"
#define EXACTC_DOT_AVX2 1
#else
#define EXACTC_DOT_PATH "plain"
#endif

#if defined(EXACTC_DOT_VNNI) || defined(EXACTC_DOT_AVX2)
#include <immintrin.h>
#endif

/* The definitions: Σ int32(x_j) · int32(value_j) over g values, in index order. */
static inline int32_t exactc_dot_q8_plain(const int8_t *x, const int8_t *w, int64_t g) {
    int32_t s = 0;
    for (int64_t j = 0; j < g; j++) {
        s += (int32_t)x[j] * (int32_t)w[j];
    }
    return s;
}

/* g even; the block's g / 2 bytes: value j the low nibble of byte j, j + g/2 its high. */
static inline int32_t exactc_dot_q4_plain(const int8_t *x, const uint8_t *w, int64_t g) {
    int32_t s = 0;
    for (int64_t j = 0; j < g / 2; j++) {
        s += (int32_t)x[j] * ((int32_t)(w[j] & 0x0F) - 8);
    }
    for (int64_t j = 0; j < g / 2; j++) {
        s += (int32_t)x[j + g / 2] * ((int32_t)(w[j] >> 4) - 8);
    }
    return s;
}

#if defined(EXACTC_DOT_VNNI) || defined(EXACTC_DOT_AVX2)
/* The sum of the eight int32 lanes (|each| <= 2^19: no wrap). */
static inline int32_t exactc_dot_lanes(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Eight rows' lanes summed, row r's into lane r: vphaddd twice, then the halves added. */
static inline __m256i exactc_dot_rows(const __m256i v[8]) {
    const __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

/* The block's 32 values as nibbles 0 … 15 in bytes: the low nibbles (values 0 … 15) in
 * the lower 128 bits, the high nibbles (values 16 … 31) in the upper. */
static inline __m256i exactc_dot_nibbles(const uint8_t *w) {
    const __m128i bytes = _mm_loadu_si128((const __m128i *)w);
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}
#endif

/* exactc_dot_q8_part and exactc_dot_q4_part: one block's products summed into eight int32
 * lanes (the block's sum is theirs); exactc_dot_q8_fits: whether the q8 part takes the
 * block's activations as they are. */
#if defined(EXACTC_DOT_VNNI)
static inline __m256i exactc_dot_q8_part(__m256i vx, const int8_t *w) {
    const __m256i vw = _mm256_loadu_si256((const __m256i *)w);
    const __m256i biased = _mm256_xor_si256(vx, _mm256_set1_epi8((char)0x80)); /* x + 128, unsigned */
    const __m256i zero = _mm256_setzero_si256();
    const __m256i sums = EXACTC_DPBUSD(zero, biased, vw);                     /* Σ (x + 128) · w */
    const __m256i w_sums = EXACTC_DPBUSD(zero, _mm256_set1_epi8(1), vw);     /* Σ w */
    return _mm256_sub_epi32(sums, _mm256_slli_epi32(w_sums, 7));
}

static inline __m256i exactc_dot_q4_part(__m256i vx, const uint8_t *w) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i sums = EXACTC_DPBUSD(zero, exactc_dot_nibbles(w), vx);     /* Σ nibble · x */
    const __m256i x_sums = EXACTC_DPBUSD(zero, _mm256_set1_epi8(1), vx);     /* Σ x */
    return _mm256_sub_epi32(sums, _mm256_slli_epi32(x_sums, 3));
}

static inline int exactc_dot_q8_fits(__m256i vx) {
    (void)vx; /* the offset correction takes every int8 */
    return 1;
}
#elif defined(EXACTC_DOT_AVX2)
static inline __m256i exactc_dot_q8_part(__m256i vx, const int8_t *w) {
    const __m256i vw = _mm256_loadu_si256((const __m256i *)w);
    const __m256i magnitudes = _mm256_sign_epi8(vw, vw); /* |w|, read unsigned: 0 … 128 */
    const __m256i signed_x = _mm256_sign_epi8(vx, vw);   /* x · sign(w): -127 … 127 */
    const __m256i pairs = _mm256_maddubs_epi16(magnitudes, signed_x); /* |pair| <= 32512 */
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)); /* pairs of pairs, int32 */
}

static inline __m256i exactc_dot_q4_part(__m256i vx, const uint8_t *w) {
    const __m256i products = _mm256_maddubs_epi16(exactc_dot_nibbles(w), vx); /* |pair| <= 3840 */
    const __m256i offsets = _mm256_maddubs_epi16(_mm256_set1_epi8(8), vx);    /* |pair| <= 2048 */
    const __m256i pairs = _mm256_sub_epi16(products, offsets);               /* Σ (nibble - 8) · x */
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

/* An activation of -128: the sign trick would wrap it (-(-128) is -128 in a byte). */
static inline int exactc_dot_q8_fits(__m256i vx) {
    return !_mm256_movemask_epi8(_mm256_cmpeq_epi8(vx, _mm256_set1_epi8((char)0x80)));
}
#endif

/* exactc_dot_q8_32, exactc_dot_q4_32: one block's sum. exactc_dot_q8_32x8,
 * exactc_dot_q4_32x8: the same block of 8 rows (row r at w + r · stride) against one
 * block of activations, row r's sum into out[r] (a laned body's n in lanes of 8). */
#if defined(EXACTC_DOT_VNNI) || defined(EXACTC_DOT_AVX2)
static inline int32_t exactc_dot_q8_32(const int8_t *x, const int8_t *w) {
    const __m256i vx = _mm256_loadu_si256((const __m256i *)x);
    return exactc_dot_q8_fits(vx) ? exactc_dot_lanes(exactc_dot_q8_part(vx, w)) : exactc_dot_q8_plain(x, w, 32);
}

static inline int32_t exactc_dot_q4_32(const int8_t *x, const uint8_t *w) {
    return exactc_dot_lanes(exactc_dot_q4_part(_mm256_loadu_si256((const __m256i *)x), w));
}

static inline void exactc_dot_q8_32x8(const int8_t *x, const int8_t *w, int64_t stride, int32_t *out) {
    const __m256i vx = _mm256_loadu_si256((const __m256i *)x);
    if (!exactc_dot_q8_fits(vx)) {
        for (int64_t r = 0; r < 8; r++) {
            out[r] = exactc_dot_q8_plain(x, w + r * stride, 32);
        }
        return;
    }
    __m256i rows[8];
    for (int64_t r = 0; r < 8; r++) {
        rows[r] = exactc_dot_q8_part(vx, w + r * stride);
    }
    _mm256_storeu_si256((__m256i *)out, exactc_dot_rows(rows));
}

static inline void exactc_dot_q4_32x8(const int8_t *x, const uint8_t *w, int64_t stride, int32_t *out) {
    const __m256i vx = _mm256_loadu_si256((const __m256i *)x);
    __m256i rows[8];
    for (int64_t r = 0; r < 8; r++) {
        rows[r] = exactc_dot_q4_part(vx, w + r * stride);
    }
    _mm256_storeu_si256((__m256i *)out, exactc_dot_rows(rows));
}
#else
static inline int32_t exactc_dot_q8_32(const int8_t *x, const int8_t *w) {
    return exactc_dot_q8_plain(x, w, 32);
}

static inline int32_t exactc_dot_q4_32(const int8_t *x, const uint8_t *w) {
    return exactc_dot_q4_plain(x, w, 32);
}

static inline void exactc_dot_q8_32x8(const int8_t *x, const int8_t *w, int64_t stride, int32_t *out) {
    for (int64_t r = 0; r < 8; r++) {
        out[r] = exactc_dot_q8_plain(x, w + r * stride, 32);
    }
}

static inline void exactc_dot_q4_32x8(const int8_t *x, const uint8_t *w, int64_t stride, int32_t *out) {
    for (int64_t r = 0; r < 8; r++) {
        out[r] = exactc_dot_q4_plain(x, w + r * stride, 32);
    }
}
#endif

/* ---- ggml's k-quants (docs/semantics.md section 15): one super-block of 256 values ----
 * exactc_dot_q4_k_256, exactc_dot_q5_k_256, exactc_dot_q6_k_256 add to *s the
 * super-block's S = Σ_j sc_j · Σ x·q over its sub-blocks j, and (Q4_K, Q5_K) to *m its
 * M = Σ_j m_j · Σ x, for 256 int8 activations x and the super-block's bytes w in ggml's
 * layout (Q4_K 144 bytes: d, dmin, 12 bytes of 6-bit scales and mins at 4, qs at 16;
 * Q5_K 176: qh at 16, qs at 48; Q6_K 210: ql at 0, qh at 128, int8 scales at 192).
 * Every sum is an int32 sum of products, exact in any order (|S| < 2^28), so the paths
 * give the plain loops' bits. The scales and mins are unpacked once a super-block; the
 * AVX2 path (taken on VNNI targets too: vpmaddubsw's pairs are far from saturating here)
 * unpacks the quants in registers: vpmaddubsw of the unsigned quant (Q4_K 0 … 15, Q5_K
 * 0 … 31, Q6_K 0 … 63) by x, pairs at most 2 · 63 · 128 = 16128, Q6_K's offset 32 · x
 * taken off pair by pair (at most 8192 more), then vpmaddwd by the sub-block's scale
 * (int16 pairs into int32, exact); M is vpmaddubsw of the min by x (exactc_dot_k_mins).
 * The x8 forms (8 weight rows against one super-block of x, for a layout with n in lanes
 * of 8) load x and take its per-sub-block sums and Q6_K's offsets once for the 8 rows,
 * unpack each row's 6-bit scales and mins in registers (vpshufb picks a scale), and sum
 * the 8 rows' lanes together; the unrolled loops let the picks be constants. One thread
 * on an AVX2 Zen 2, qlinear_i at 1x768 by 768x2048 with quantize: Q4_K 72.7 us in the
 * x8 form, 108.9 us one row a call, 403.8 us as the plain loops (bench/quant_speed.py,
 * docs/performance.md). */

/* Q4_K's and Q5_K's eight 6-bit scales and mins from the 12 bytes p: j < 4: p[j] & 63
 * and p[j + 4] & 63; j >= 4: the nibbles of p[j + 4] with the top 2 bits of p[j - 4]
 * (scale) and of p[j] (min) above them. */
static inline void exactc_dot_k_scales(const uint8_t *p, int32_t sc[8], int32_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = p[j] & 63;
        mn[j] = p[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (p[j + 4] & 15) | ((p[j - 4] >> 6) << 4);
        mn[j] = (p[j + 4] >> 4) | ((p[j] >> 6) << 4);
    }
}

/* The definitions: each sub-block's sums in index order, the sub-blocks in order. */
static inline void exactc_dot_q45_k_plain(const int8_t *x, const uint8_t *w, int five, int32_t *s, int32_t *m) {
    int32_t sc[8], mn[8];
    exactc_dot_k_scales(w + 4, sc, mn);
    const uint8_t *qs = w + (five ? 48 : 16), *qh = w + 16;
    for (int j = 0; j < 8; j++) {
        int32_t products = 0, values = 0;
        for (int v = 0; v < 32; v++) {
            int32_t q = (qs[32 * (j / 2) + v] >> (4 * (j % 2))) & 15;
            if (five) {
                q |= ((qh[v] >> j) & 1) << 4;
            }
            products += (int32_t)x[32 * j + v] * q;
            values += x[32 * j + v];
        }
        *s += sc[j] * products;
        *m += mn[j] * values;
    }
}

static inline void exactc_dot_q6_k_plain(const int8_t *x, const uint8_t *w, int32_t *s) {
    const uint8_t *ql = w, *qh = w + 128;
    const int8_t *scales = (const int8_t *)(w + 192);
    for (int j = 0; j < 16; j++) {
        const int half = j / 8, quarter = (j % 8) / 2, part = j % 2;
        int32_t products = 0;
        for (int v = 0; v < 16; v++) {
            const int at = 16 * part + v;
            const int32_t low = (ql[64 * half + 32 * (quarter % 2) + at] >> (4 * (quarter / 2))) & 15;
            const int32_t high = (qh[32 * half + at] >> (2 * quarter)) & 3;
            products += (int32_t)x[128 * half + 32 * quarter + at] * ((low | (high << 4)) - 32);
        }
        *s += (int32_t)scales[j] * products;
    }
}

#if defined(EXACTC_DOT_VNNI) || defined(EXACTC_DOT_AVX2)
/* exactc_dot_k_scales in four 32-bit words (ggml's order of the fields): scales 0 … 7 in
 * bytes 0 … 7 and mins 0 … 7 in bytes 8 … 15 of both 128-bit halves, built in registers
 * (x86 is little-endian). */
static inline __m256i exactc_dot_k_scales_vector(const uint8_t *p) {
    uint32_t a, b, c;
    memcpy(&a, p, 4);
    memcpy(&b, p + 4, 4);
    memcpy(&c, p + 8, 4);
    const uint32_t six = 0x3F3F3F3Fu, four = 0x0F0F0F0Fu, two = 0x03030303u;
    const uint32_t scales_lo = a & six, mins_lo = b & six;
    const uint32_t scales_hi = (c & four) | (((a >> 6) & two) << 4);
    const uint32_t mins_hi = ((c >> 4) & four) | (((b >> 6) & two) << 4);
    return _mm256_broadcastsi128_si256(_mm_set_epi32((int)mins_hi, (int)mins_lo, (int)scales_hi, (int)scales_lo));
}

/* Scale j of a scales vector in every int16 lane (vpshufb's index 0x80 gives 0 above it). */
static inline __m256i exactc_dot_k_scale(__m256i scales, int j) {
    return _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)(0x8000 | j)));
}

/* Σ sc · (quant · x) over 32 values whose quants (unsigned bytes) are q: the lower 16
 * values' pairs times sc_lo, the upper 16's times sc_hi, into eight int32 lanes. */
static inline __m256i exactc_dot_k_scaled(__m256i q, __m256i vx, int32_t sc_lo, int32_t sc_hi) {
    const __m256i pairs = _mm256_maddubs_epi16(q, vx);
    return _mm256_madd_epi16(pairs, _mm256_set_m128i(_mm_set1_epi16((short)sc_hi), _mm_set1_epi16((short)sc_lo)));
}

/* mn_lo · Σ x_lo + mn_hi · Σ x_hi over two sub-blocks of 32 values, into eight int32
 * lanes: the min (0 … 63) as vpmaddubsw's unsigned bytes, pairs at most 63 · 256 = 16128,
 * the two sub-blocks' pairs added in int16 (at most 32256), then pairs of them in int32. */
static inline __m256i exactc_dot_k_mins(__m256i x_lo, __m256i x_hi, int32_t mn_lo, int32_t mn_hi) {
    const __m256i lo = _mm256_maddubs_epi16(_mm256_set1_epi8((char)mn_lo), x_lo);
    const __m256i hi = _mm256_maddubs_epi16(_mm256_set1_epi8((char)mn_hi), x_hi);
    return _mm256_madd_epi16(_mm256_add_epi16(lo, hi), _mm256_set1_epi16(1));
}

static inline void exactc_dot_q45_k_256(const int8_t *x, const uint8_t *w, int five, int32_t *s, int32_t *m) {
    int32_t sc[8], mn[8];
    exactc_dot_k_scales(w + 4, sc, mn);
    const uint8_t *qs = w + (five ? 48 : 16);
    const __m256i nibble = _mm256_set1_epi8(0x0F), fifth = _mm256_set1_epi8(0x10);
    const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(w + 16)) : _mm256_setzero_si256();
    __m256i sums = _mm256_setzero_si256(), mins = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int pair = 0; pair < 4; pair++) {
        const int j = 2 * pair;
        const __m256i bytes = _mm256_loadu_si256((const __m256i *)(qs + 32 * pair));
        __m256i low = _mm256_and_si256(bytes, nibble);
        __m256i high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
        if (five) { /* bit j of qh[v] is value v's fifth bit in sub-block j */
            const __m256i bit_lo = _mm256_set1_epi8((char)(1 << j)), bit_hi = _mm256_set1_epi8((char)(1 << (j + 1)));
            low = _mm256_or_si256(low, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_lo), bit_lo), fifth));
            high = _mm256_or_si256(high, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_hi), bit_hi), fifth));
        }
        const __m256i x_lo = _mm256_loadu_si256((const __m256i *)(x + 32 * j));
        const __m256i x_hi = _mm256_loadu_si256((const __m256i *)(x + 32 * j + 32));
        sums = _mm256_add_epi32(sums, exactc_dot_k_scaled(low, x_lo, sc[j], sc[j]));
        sums = _mm256_add_epi32(sums, exactc_dot_k_scaled(high, x_hi, sc[j + 1], sc[j + 1]));
        mins = _mm256_add_epi32(mins, exactc_dot_k_mins(x_lo, x_hi, mn[j], mn[j + 1]));
    }
    *s += exactc_dot_lanes(sums);
    *m += exactc_dot_lanes(mins);
}

static inline void exactc_dot_q6_k_256(const int8_t *x, const uint8_t *w, int32_t *s) {
    const int8_t *scales = (const int8_t *)(w + 192);
    const __m256i nibble = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x03);
    __m256i sums = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int half = 0; half < 2; half++) {
        const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w + 64 * half));
        const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w + 64 * half + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(w + 128 + 32 * half));
        const __m256i lows[4] = {_mm256_and_si256(ql0, nibble), _mm256_and_si256(ql1, nibble),
                                 _mm256_and_si256(_mm256_srli_epi16(ql0, 4), nibble),
                                 _mm256_and_si256(_mm256_srli_epi16(ql1, 4), nibble)};
        const __m256i highs[4] = {_mm256_and_si256(qh, two), _mm256_and_si256(_mm256_srli_epi16(qh, 2), two),
                                  _mm256_and_si256(_mm256_srli_epi16(qh, 4), two),
                                  _mm256_and_si256(_mm256_srli_epi16(qh, 6), two)};
#pragma GCC unroll 4
        for (int quarter = 0; quarter < 4; quarter++) {
            const int j = 8 * half + 2 * quarter;
            const __m256i q = _mm256_or_si256(lows[quarter], _mm256_slli_epi16(highs[quarter], 4)); /* 0 … 63 */
            const __m256i vx = _mm256_loadu_si256((const __m256i *)(x + 128 * half + 32 * quarter));
            const __m256i products = _mm256_maddubs_epi16(q, vx);                               /* |pair| <= 16128 */
            const __m256i offsets = _mm256_maddubs_epi16(_mm256_set1_epi8(32), vx);            /* |pair| <= 8192 */
            const __m256i pairs = _mm256_sub_epi16(products, offsets);                          /* Σ (q - 32) · x */
            const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(scales[j + 1]), _mm_set1_epi16(scales[j]));
            sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, scale));
        }
    }
    *s += exactc_dot_lanes(sums);
}

/* 8 rows (row r at w + r · stride) against one super-block of activations, row r's S and
 * M into s[r] and m[r]: x loaded once, Σ x of each sub-block once (vpmaddubsw of ones,
 * the 8 sub-blocks' lanes summed together, |Σ x| <= 4096 then in int16), each row's
 * scales and mins unpacked in registers, its M one vpmaddwd of the mins by those sums,
 * the rows' S lanes summed together. */
static inline void exactc_dot_q45_k_256x8(const int8_t *x, const uint8_t *w, int64_t stride, int five, int32_t *s,
                                          int32_t *m) {
    __m256i vx[8], parts[8];
    for (int j = 0; j < 8; j++) {
        vx[j] = _mm256_loadu_si256((const __m256i *)(x + 32 * j));
        parts[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), vx[j]), _mm256_set1_epi16(1));
    }
    const __m256i x_sums32 = exactc_dot_rows(parts);
    const __m128i x_sums = _mm_packs_epi32(_mm256_castsi256_si128(x_sums32), _mm256_extracti128_si256(x_sums32, 1));
    const __m256i nibble = _mm256_set1_epi8(0x0F), fifth = _mm256_set1_epi8(0x10);
    __m256i rows[8];
    __m128i mins[8];
    for (int64_t r = 0; r < 8; r++) {
        const uint8_t *row = w + r * stride;
        const __m256i scales = exactc_dot_k_scales_vector(row + 4);
        const uint8_t *qs = row + (five ? 48 : 16);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(row + 16)) : _mm256_setzero_si256();
        __m256i sums = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int pair = 0; pair < 4; pair++) {
            const int j = 2 * pair;
            const __m256i bytes = _mm256_loadu_si256((const __m256i *)(qs + 32 * pair));
            __m256i low = _mm256_and_si256(bytes, nibble);
            __m256i high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
            if (five) {
                const __m256i bit_lo = _mm256_set1_epi8((char)(1 << j)), bit_hi = _mm256_set1_epi8((char)(1 << (j + 1)));
                low = _mm256_or_si256(low, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_lo), bit_lo), fifth));
                high = _mm256_or_si256(high, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_hi), bit_hi), fifth));
            }
            const __m256i lo = _mm256_madd_epi16(_mm256_maddubs_epi16(low, vx[j]), exactc_dot_k_scale(scales, j));
            const __m256i hi = _mm256_madd_epi16(_mm256_maddubs_epi16(high, vx[j + 1]), exactc_dot_k_scale(scales, j + 1));
            sums = _mm256_add_epi32(sums, _mm256_add_epi32(lo, hi));
        }
        rows[r] = sums;
        /* the mins (bytes 8 … 15) as int16 times Σ x of each sub-block: four int32 lanes */
        mins[r] = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(_mm256_castsi256_si128(scales), 8)), x_sums);
    }
    _mm256_storeu_si256((__m256i *)s, exactc_dot_rows(rows));
    __m256i min_rows[8];
    for (int r = 0; r < 8; r++) {
        min_rows[r] = _mm256_set_m128i(_mm_setzero_si128(), mins[r]);
    }
    _mm256_storeu_si256((__m256i *)m, exactc_dot_rows(min_rows));
}

static inline void exactc_dot_q6_k_256x8(const int8_t *x, const uint8_t *w, int64_t stride, int32_t *s) {
    __m256i vx[8], offsets[8], rows[8];
    for (int j = 0; j < 8; j++) { /* 32 · x, pair by pair: the quants' offset, once for the 8 rows */
        vx[j] = _mm256_loadu_si256((const __m256i *)(x + 32 * j));
        offsets[j] = _mm256_maddubs_epi16(_mm256_set1_epi8(32), vx[j]);
    }
    const __m256i nibble = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x03);
    for (int64_t r = 0; r < 8; r++) {
        const uint8_t *row = w + r * stride;
        const int8_t *scales = (const int8_t *)(row + 192);
        __m256i sums = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(row + 64 * half));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(row + 64 * half + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(row + 128 + 32 * half));
            const __m256i lows[4] = {_mm256_and_si256(ql0, nibble), _mm256_and_si256(ql1, nibble),
                                     _mm256_and_si256(_mm256_srli_epi16(ql0, 4), nibble),
                                     _mm256_and_si256(_mm256_srli_epi16(ql1, 4), nibble)};
#pragma GCC unroll 4
            for (int quarter = 0; quarter < 4; quarter++) {
                const int j = 8 * half + 2 * quarter;
                const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * quarter), two);
                const __m256i q = _mm256_or_si256(lows[quarter], _mm256_slli_epi16(high, 4));
                const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(q, vx[4 * half + quarter]),
                                                       offsets[4 * half + quarter]);
                const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(scales[j + 1]), _mm_set1_epi16(scales[j]));
                sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, scale));
            }
        }
        rows[r] = sums;
    }
    _mm256_storeu_si256((__m256i *)s, exactc_dot_rows(rows));
}
#else
static inline void exactc_dot_q45_k_256(const int8_t *x, const uint8_t *w, int five, int32_t *s, int32_t *m) {
    exactc_dot_q45_k_plain(x, w, five, s, m);
}

static inline void exactc_dot_q45_k_256x8(const int8_t *x, const uint8_t *w, int64_t stride, int five, int32_t *s,
                                          int32_t *m) {
    for (int64_t r = 0; r < 8; r++) {
        s[r] = m[r] = 0;
        exactc_dot_q45_k_plain(x, w + r * stride, five, s + r, m + r);
    }
}

static inline void exactc_dot_q6_k_256x8(const int8_t *x, const uint8_t *w, int64_t stride, int32_t *s) {
    for (int64_t r = 0; r < 8; r++) {
        s[r] = 0;
        exactc_dot_q6_k_plain(x, w + r * stride, s + r);
    }
}

static inline void exactc_dot_q6_k_256(const int8_t *x, const uint8_t *w, int32_t *s) {
    exactc_dot_q6_k_plain(x, w, s);
}
#endif

/* The calls the printer makes for a whole super-block (printer/dots.py). */
static inline void exactc_dot_q4_k_256(const int8_t *x, const uint8_t *w, int32_t *s, int32_t *m) {
    exactc_dot_q45_k_256(x, w, 0, s, m);
}

static inline void exactc_dot_q5_k_256(const int8_t *x, const uint8_t *w, int32_t *s, int32_t *m) {
    exactc_dot_q45_k_256(x, w, 1, s, m);
}

/* The same for 8 rows at once (row r at w + r · stride), row r's sums into s[r] (and
 * m[r]): where a layout has n in lanes of 8 (printer/planned.py). */
static inline void exactc_dot_q4_k_256x8(const int8_t *x, const uint8_t *w, int64_t stride, int32_t *s, int32_t *m) {
    exactc_dot_q45_k_256x8(x, w, stride, 0, s, m);
}

static inline void exactc_dot_q5_k_256x8(const int8_t *x, const uint8_t *w, int64_t stride, int32_t *s, int32_t *m) {
    exactc_dot_q45_k_256x8(x, w, stride, 1, s, m);
}

/* ---- The tile kernels: qlinear_i's block b for TILE_M activation rows by 8 weight rows ----
 * exactc_qtile_q8 and exactc_qtile_q4: for rows <= EXACTC_QTILE_M activation rows i (row i's
 * block at x + i · x_stride, its scale xd[i · xd_stride]) and 8 weight rows r (row r's block
 * at w + r · w_stride, its scale wd[r · wd_stride]), the block's step of the spec's
 * sequential sum (docs/semantics.md section 15) in acc[i · 8 + r]:
 *     acc = acc ⊕ (A(s) ⊗ (W(xd) ⊗ W(wd))),  s = the block's exact int32 sum,
 * a multiply and an add, each rounded (never fused: the reference's bits). A layout with m
 * in lanes of 4 and n in lanes of 8 calls it once per block of a full tile (printer/dots.py,
 * printer/planned.py). Each weight block's |w| (q8) or nibbles (q4) are made once and each
 * activation block loaded once per tile, where the x8 kernel re-reads and re-signs the
 * activations for every 8 weight rows; the combine runs in 8 float lanes over n.
 * Registers (AVX2 q8): the 8 weight rows' |w|, the 4 activation rows, a row's 8 partial
 * sums (reduced by vphaddd as they come), the ones of vpmaddwd and the 8 scales: about 22
 * ymm against AVX2's 16, so gcc 12 -O2 keeps some |w| on the stack and reads them as
 * memory operands (L1 hits; perf shows them beside vpmaddubsw). q4 holds 8 nibble rows
 * and one activation row at a time. The 4 x 8 accumulators stay in the caller's array. */
#define EXACTC_QTILE_M 4
/* The loops over the 8 weight rows unrolled, so that their operands and partial sums are
 * registers (gcc -O2 otherwise keeps them in arrays on the stack); clang reads the pragma too. */
#define EXACTC_QTILE_UNROLL _Pragma("GCC unroll 8")

/* The definition: the plain loops, the sums by the single-row kernels' plain form. */
static inline void exactc_qtile_combine_plain(int64_t rows, const int32_t *s, const float *xd, int64_t xd_stride,
                                              const float *wd, int64_t wd_stride, float *acc) {
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t r = 0; r < 8; r++) {
            const float scale = xd[i * xd_stride] * wd[r * wd_stride];
            acc[i * 8 + r] = acc[i * 8 + r] + (float)s[i * 8 + r] * scale;
        }
    }
}

static inline void exactc_qtile_q8_plain(int64_t rows, const int8_t *x, int64_t x_stride, const float *xd,
                                         int64_t xd_stride, const int8_t *w, int64_t w_stride, const float *wd,
                                         int64_t wd_stride, float *acc) {
    int32_t s[EXACTC_QTILE_M * 8];
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t r = 0; r < 8; r++) {
            s[i * 8 + r] = exactc_dot_q8_plain(x + i * x_stride, w + r * w_stride, 32);
        }
    }
    exactc_qtile_combine_plain(rows, s, xd, xd_stride, wd, wd_stride, acc);
}

static inline void exactc_qtile_q4_plain(int64_t rows, const int8_t *x, int64_t x_stride, const float *xd,
                                         int64_t xd_stride, const uint8_t *w, int64_t w_stride, const float *wd,
                                         int64_t wd_stride, float *acc) {
    int32_t s[EXACTC_QTILE_M * 8];
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t r = 0; r < 8; r++) {
            s[i * 8 + r] = exactc_dot_q4_plain(x + i * x_stride, w + r * w_stride, 32);
        }
    }
    exactc_qtile_combine_plain(rows, s, xd, xd_stride, wd, wd_stride, acc);
}

#if defined(EXACTC_DOT_VNNI) || defined(EXACTC_DOT_AVX2)
/* Row i's step: acc[i][0..8] ⊕ (A(s) ⊗ (W(xd_i) ⊗ W(wd[0..8]))), in 8 float lanes; the
 * multiplies and the add are separate instructions (no vfmadd), as the spec has them. */
static inline void exactc_qtile_combine(__m256i s, float xd, __m256 wd, float *acc) {
    const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(xd), wd);
    const __m256 term = _mm256_mul_ps(_mm256_cvtepi32_ps(s), scale); /* |s| <= 2^19: exact in f32 */
    _mm256_storeu_ps(acc, _mm256_add_ps(_mm256_loadu_ps(acc), term));
}

/* The 8 weight rows' scales, row r's in lane r. */
static inline __m256 exactc_qtile_scales(const float *wd, int64_t wd_stride) {
    return _mm256_setr_ps(wd[0], wd[wd_stride], wd[2 * wd_stride], wd[3 * wd_stride], wd[4 * wd_stride],
                          wd[5 * wd_stride], wd[6 * wd_stride], wd[7 * wd_stride]);
}

/* 8 times the sum of one activation block's 32 values (q4's offset: Σ (nibble - 8) · x =
 * Σ nibble · x - 8 · Σ x), in every lane; pairs <= 256, sums <= 2^12. */
static inline __m256i exactc_qtile_x_offset(__m256i vx) {
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), vx);
    return _mm256_set1_epi32(8 * exactc_dot_lanes(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1))));
}

/* One activation row against the 8 weight rows' unsigned operands: row r's block sum in
 * lane r. AVX2 q8: |w_r| times x · sign(w_r) (w_r read again from memory for its sign);
 * AVX2 q4: nibbles times x; VNNI q8: (x + 128) times w_r; VNNI q4: nibbles times x. */
#if defined(EXACTC_DOT_VNNI)
static inline __m256i exactc_qtile_q8_row(__m256i vx, const __m256i u[8], const int8_t *w, int64_t w_stride) {
    const __m256i biased = _mm256_xor_si256(vx, _mm256_set1_epi8((char)0x80)); /* x + 128, unsigned */
    __m256i parts[8];
    (void)w, (void)w_stride;
    EXACTC_QTILE_UNROLL
    for (int64_t r = 0; r < 8; r++) {
        parts[r] = EXACTC_DPBUSD(_mm256_setzero_si256(), biased, u[r]);
    }
    return exactc_dot_rows(parts); /* Σ (x + 128) · w: the caller takes 128 · Σ w off */
}

static inline __m256i exactc_qtile_q4_row(__m256i vx, const __m256i u[8]) {
    __m256i parts[8];
    EXACTC_QTILE_UNROLL
    for (int64_t r = 0; r < 8; r++) {
        parts[r] = EXACTC_DPBUSD(_mm256_setzero_si256(), u[r], vx);
    }
    return exactc_dot_rows(parts);
}
#else
static inline __m256i exactc_qtile_q8_row(__m256i vx, const __m256i u[8], const int8_t *w, int64_t w_stride) {
    __m256i parts[8];
    EXACTC_QTILE_UNROLL
    for (int64_t r = 0; r < 8; r++) {
        const __m256i signed_x = _mm256_sign_epi8(vx, _mm256_loadu_si256((const __m256i *)(w + r * w_stride)));
        parts[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], signed_x), _mm256_set1_epi16(1));
    }
    return exactc_dot_rows(parts);
}

/* q4's products are small enough to be summed in int16: a pair is at most 2 · 15 · 128 =
 * 3840, a row's half block (16 values, one 128-bit half) 16 · 15 · 128 = 30720 <= 32767,
 * so vphaddw (which wraps, but nothing here reaches the bound) reduces the 8 rows without
 * vpmaddwd: lane r of each half holds row r's half block, widened to int32 and added. */
static inline __m256i exactc_qtile_q4_row(__m256i vx, const __m256i u[8]) {
    __m256i parts[8];
    EXACTC_QTILE_UNROLL
    for (int64_t r = 0; r < 8; r++) {
        parts[r] = _mm256_maddubs_epi16(u[r], vx); /* |pair| <= 3840 */
    }
    const __m256i a = _mm256_hadd_epi16(parts[0], parts[1]), b = _mm256_hadd_epi16(parts[2], parts[3]);
    const __m256i c = _mm256_hadd_epi16(parts[4], parts[5]), d = _mm256_hadd_epi16(parts[6], parts[7]);
    const __m256i halves = _mm256_hadd_epi16(_mm256_hadd_epi16(a, b), _mm256_hadd_epi16(c, d));
    return _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(halves)),
                            _mm256_cvtepi16_epi32(_mm256_extracti128_si256(halves, 1)));
}
#endif

static inline void exactc_qtile_q8(int64_t rows, const int8_t *x, int64_t x_stride, const float *xd,
                                   int64_t xd_stride, const int8_t *w, int64_t w_stride, const float *wd,
                                   int64_t wd_stride, float *acc) {
    __m256i vx[EXACTC_QTILE_M];
    int fits = 1;
    EXACTC_QTILE_UNROLL
    for (int64_t i = 0; i < rows; i++) {
        vx[i] = _mm256_loadu_si256((const __m256i *)(x + i * x_stride));
        fits &= exactc_dot_q8_fits(vx[i]);
    }
    if (!fits) { /* an activation of -128 (a caller's own xq): the sign trick would wrap it */
        exactc_qtile_q8_plain(rows, x, x_stride, xd, xd_stride, w, w_stride, wd, wd_stride, acc);
        return;
    }
    __m256i u[8];
#if defined(EXACTC_DOT_VNNI)
    __m256i w_sums[8];
    EXACTC_QTILE_UNROLL
    for (int64_t r = 0; r < 8; r++) {
        const __m256i vw = _mm256_loadu_si256((const __m256i *)(w + r * w_stride));
        u[r] = vw;
        w_sums[r] = EXACTC_DPBUSD(_mm256_setzero_si256(), _mm256_set1_epi8(1), vw); /* Σ w */
    }
    const __m256i offset = _mm256_slli_epi32(exactc_dot_rows(w_sums), 7);
#else
    EXACTC_QTILE_UNROLL
    for (int64_t r = 0; r < 8; r++) {
        const __m256i vw = _mm256_loadu_si256((const __m256i *)(w + r * w_stride));
        u[r] = _mm256_sign_epi8(vw, vw); /* |w|, read unsigned: 0 … 128, made once a tile */
    }
    const __m256i offset = _mm256_setzero_si256();
#endif
    const __m256 scales = exactc_qtile_scales(wd, wd_stride);
    EXACTC_QTILE_UNROLL
    for (int64_t i = 0; i < rows; i++) {
        const __m256i s = _mm256_sub_epi32(exactc_qtile_q8_row(vx[i], u, w, w_stride), offset);
        exactc_qtile_combine(s, xd[i * xd_stride], scales, acc + i * 8);
    }
}

static inline void exactc_qtile_q4(int64_t rows, const int8_t *x, int64_t x_stride, const float *xd,
                                   int64_t xd_stride, const uint8_t *w, int64_t w_stride, const float *wd,
                                   int64_t wd_stride, float *acc) {
    __m256i u[8];
    EXACTC_QTILE_UNROLL
    for (int64_t r = 0; r < 8; r++) {
        u[r] = exactc_dot_nibbles(w + r * w_stride); /* 0 … 15, made once a tile */
    }
    const __m256 scales = exactc_qtile_scales(wd, wd_stride);
    EXACTC_QTILE_UNROLL
    for (int64_t i = 0; i < rows; i++) {
        const __m256i vx = _mm256_loadu_si256((const __m256i *)(x + i * x_stride));
        const __m256i s = _mm256_sub_epi32(exactc_qtile_q4_row(vx, u), exactc_qtile_x_offset(vx));
        exactc_qtile_combine(s, xd[i * xd_stride], scales, acc + i * 8);
    }
}
#else
static inline void exactc_qtile_q8(int64_t rows, const int8_t *x, int64_t x_stride, const float *xd,
                                   int64_t xd_stride, const int8_t *w, int64_t w_stride, const float *wd,
                                   int64_t wd_stride, float *acc) {
    exactc_qtile_q8_plain(rows, x, x_stride, xd, xd_stride, w, w_stride, wd, wd_stride, acc);
}

static inline void exactc_qtile_q4(int64_t rows, const int8_t *x, int64_t x_stride, const float *xd,
                                   int64_t xd_stride, const uint8_t *w, int64_t w_stride, const float *wd,
                                   int64_t wd_stride, float *acc) {
    exactc_qtile_q4_plain(rows, x, x_stride, xd, xd_stride, w, w_stride, wd, wd_stride, acc);
}
#endif

#endif
