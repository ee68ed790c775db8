/* exactc_libm.c: exactc's own transcendental functions (exp, log, tanh, erf, sin, cos).
 *
 * Why not libm: glibc, musl and numpy's SIMD paths return different bits for the same
 * input (docs/design.md, principle 3). These functions are the definition instead, and
 * runtime/libm_twin.py executes the same algorithms, with the same IEEE double
 * operations in the same order, in numpy. Every helper and branch below has a twin
 * there with the same name and shape: change both together, or tests/test_libm.py
 * fails (it compares outputs, the bits below the final rounding, and the constants).
 *
 * Rules that bit identity rests on:
 *   - plain double arithmetic only: + - * /, comparisons, bit manipulation through
 *     memcpy. No math.h, no long double, no FMA contraction (built with
 *     -ffp-contract=off). A product that must be exact is made exact by two_prod, with
 *     Dekker's split, or with one fused multiply-add where the target has it
 *     (EXACTC_FMA): for the operands it meets here both give the exact error, the same
 *     bits.
 *   - integers become doubles only when exact (|i| < 2^53); rounding a double to an
 *     integer uses the add-then-subtract trick with 0x1.8p52.
 *   - where more than 53 bits are needed, values travel as double-double pairs
 *     (hi, lo) with |lo| <= ulp(hi)/2, built from two_sum / two_prod below.
 *
 * Accuracy (docs/accuracy.md measures it): under 1 ulp everywhere, about 0.5 ulp plus
 * a few hundredths in practice: every function ends with one rounding of a
 * double-double whose own error is near 2^-57 relative.
 *
 * The laned forms (exactc_exp_array, exactc_tanh_array, exactc_erf_array and their f32
 * forms, at the end of the file) evaluate many elements at once with, per element, the
 * very operations of the scalar function: each branch of the scalar function is a
 * helper both call, so the two cannot drift apart. (One exception, with the same bits:
 * tanh's f32 lanes skip the series branch, see tanhf_lane.) The lanes compute every branch of
 * their range and blend the results bit by bit (no branch: compilers vectorize the
 * loop); an element outside that range is computed again by the scalar function.
 */
#include "exactc_rt.h"

#include <stdint.h>
#include <string.h>

/* two_prod's form (see there): the fused multiply-add where the target has one (x86-64
 * with FMA or AVX-512, AArch64: one instruction, no library call), else Dekker's split;
 * -DEXACTC_FMA=0 or 1 picks one anyway. The fused form took 19 to 25 % off tanh's laned
 * f32 form on a Zen 4 (gcc 12, clang 14, -O2 -march=native). */
#ifndef EXACTC_FMA
#if defined(__FMA__) || defined(__aarch64__)
#define EXACTC_FMA 1
#else
#define EXACTC_FMA 0
#endif
#endif

/* ------------------------------------------------------------------------------------
 * Constants. Polynomials, tables and splits are derived by tools/gen_libm_coeffs.py
 * (mpmath, 300 bits) and pasted here; libm_twin.py holds its own copy of each.
 * ---------------------------------------------------------------------------------- */
static const double EXP_INV_LN2_32 = 0x1.71547652b82fep+5;
static const double EXP_LN2_32_HI = 0x1.62e42fefa0000p-6;
static const double EXP_LN2_32_LO = 0x1.cf79abc9e3b3ap-45;
static const double EXP_Q[5] = {
    0x1.0000000000000p-1,
    0x1.555555554dc4ep-3,
    0x1.55555555518d2p-5,
    0x1.11114fca82e8ep-7,
    0x1.6c1700258740fp-10
};
static const double EXP_T_HI[32] = {
    0x1.0000000000000p+0,
    0x1.059b0d3158574p+0,
    0x1.0b5586cf9890fp+0,
    0x1.11301d0125b51p+0,
    0x1.172b83c7d517bp+0,
    0x1.1d4873168b9aap+0,
    0x1.2387a6e756238p+0,
    0x1.29e9df51fdee1p+0,
    0x1.306fe0a31b715p+0,
    0x1.371a7373aa9cbp+0,
    0x1.3dea64c123422p+0,
    0x1.44e086061892dp+0,
    0x1.4bfdad5362a27p+0,
    0x1.5342b569d4f82p+0,
    0x1.5ab07dd485429p+0,
    0x1.6247eb03a5585p+0,
    0x1.6a09e667f3bcdp+0,
    0x1.71f75e8ec5f74p+0,
    0x1.7a11473eb0187p+0,
    0x1.82589994cce13p+0,
    0x1.8ace5422aa0dbp+0,
    0x1.93737b0cdc5e5p+0,
    0x1.9c49182a3f090p+0,
    0x1.a5503b23e255dp+0,
    0x1.ae89f995ad3adp+0,
    0x1.b7f76f2fb5e47p+0,
    0x1.c199bdd85529cp+0,
    0x1.cb720dcef9069p+0,
    0x1.d5818dcfba487p+0,
    0x1.dfc97337b9b5fp+0,
    0x1.ea4afa2a490dap+0,
    0x1.f50765b6e4540p+0
};
static const double EXP_T_LO[32] = {
    0x0p+0,
    0x1.d73e2a475b465p-55,
    0x1.8a62e4adc610bp-54,
    -0x1.6c51039449b3ap-54,
    -0x1.19041b9d78a76p-55,
    0x1.e016e00a2643cp-54,
    0x1.9b07eb6c70573p-54,
    0x1.612e8afad1255p-55,
    0x1.6f46ad23182e4p-55,
    -0x1.63aeabf42eae2p-54,
    0x1.ada0911f09ebcp-55,
    0x1.89b7a04ef80d0p-59,
    0x1.d4397afec42e2p-56,
    -0x1.07abe1db13cadp-55,
    0x1.6324c054647adp-54,
    -0x1.383c17e40b497p-54,
    -0x1.bdd3413b26456p-54,
    -0x1.16e4786887a99p-55,
    -0x1.41577ee04992fp-55,
    -0x1.d4c1dd41532d8p-54,
    0x1.6e9f156864b27p-54,
    -0x1.75fc781b57ebcp-57,
    0x1.c7c46b071f2bep-56,
    -0x1.d2f6edb8d41e1p-54,
    0x1.7a1cd345dcc81p-54,
    -0x1.5584f7e54ac3bp-56,
    0x1.11065895048ddp-55,
    0x1.503cbd1e949dbp-56,
    0x1.2ed02d75b3707p-55,
    -0x1.1a5cd4f184b5cp-54,
    -0x1.e9c23179c2893p-54,
    0x1.9d3e12dd8a18bp-54
};
static const double LOG_SQRT2 = 0x1.6a09e667f3bcdp+0;
static const double LOG_LN2_HI = 0x1.62e42fefa3800p-1;
static const double LOG_LN2_LO = 0x1.ef35793c76730p-45;
static const double LOG_P[9] = {
    0x1.5555555555555p-1,
    0x1.9999999999998p-2,
    0x1.249249249295bp-2,
    0x1.c71c71c64c4b9p-3,
    0x1.745d17d378427p-3,
    0x1.3b137b291cc0dp-3,
    0x1.111d29291fef6p-3,
    0x1.debe85c9b376dp-4,
    0x1.e6b2d29e10cebp-4
};
static const double TANH_SMALL = 0x1.0000000000000p-2;
static const double TANH_U[9] = {
    -0x1.5555555555555p-2,
    0x1.1111111111110p-3,
    -0x1.ba1ba1ba1b41ep-5,
    0x1.664f488245e56p-6,
    -0x1.226e350f0cce6p-7,
    0x1.d6d39755b2859p-9,
    -0x1.7d971c140d5d9p-10,
    0x1.33cf3deecb286p-11,
    -0x1.bff153c36cb39p-13
};
static const double ERF_SERIES_END = 0x1.0000000000000p+0;
static const double ERF_S_HI[4] = {
    0x1.20dd750429b6dp+0,
    -0x1.812746b0379e7p-2,
    0x1.ce2f21a042be2p-4,
    -0x1.b82ce31288b51p-6
};
static const double ERF_S_LO[4] = {
    0x1.1ae3a87d54725p-56,
    0x1.ee15435779d7ap-57,
    -0x1.2a04dddcbdcbcp-58,
    0x1.5be6f247b1650p-60
};
static const double ERF_S[12] = {
    0x1.565bcd0e6a530p-8,
    -0x1.c02db400406a3p-11,
    0x1.f9a326f9a7769p-14,
    -0x1.f4d25c3b729a6p-17,
    0x1.b9e6c9944bd7ep-20,
    -0x1.5f74291398641p-23,
    0x1.fcc4c8ec29638p-27,
    -0x1.51cfe00be885fp-30,
    0x1.9df7fd0b39a12p-34,
    -0x1.d332e777f7344p-38,
    0x1.cf915d8f3c685p-42,
    -0x1.3aa422cc5d833p-46
};
static const double ERFC_BOUNDS[10] = {
    0x1.0000000000000p+0,
    0x1.4000000000000p+0,
    0x1.8000000000000p+0,
    0x1.c000000000000p+0,
    0x1.0000000000000p+1,
    0x1.4000000000000p+1,
    0x1.8000000000000p+1,
    0x1.e000000000000p+1,
    0x1.3000000000000p+2,
    0x1.8000000000000p+2
};
static const double ERFC_CENTER[9] = {
    0x1.2000000000000p+0,
    0x1.6000000000000p+0,
    0x1.a000000000000p+0,
    0x1.e000000000000p+0,
    0x1.2000000000000p+1,
    0x1.6000000000000p+1,
    0x1.b000000000000p+1,
    0x1.1000000000000p+2,
    0x1.5800000000000p+2
};
static const double ERFC_G_HI[9] = {
    0x1.9531e09b149b5p-2,
    0x1.5f88f52f3c76bp-2,
    0x1.3583f6644327bp-2,
    0x1.13e5743b60480p-2,
    0x1.d94446d627932p-3,
    0x1.8c9eb68ff27d7p-3,
    0x1.48f8f10299b71p-3,
    0x1.08e62ce8c89adp-3,
    0x1.a6dab49575b6dp-4
};
static const double ERFC_G_LO[9] = {
    -0x1.aa513235e9c37p-58,
    -0x1.b7eb97a02d0e7p-57,
    -0x1.88eb8ebfdccaep-56,
    0x1.ca1dfca5d5331p-56,
    -0x1.a8198a8216449p-58,
    -0x1.bb4e763c64a35p-57,
    0x1.635e7b3452b79p-59,
    -0x1.dc926b221fa47p-57,
    0x1.c84c90cc5b214p-62
};
static const double ERFC_P[9][14] = {
    {-0x1.e78b356770fbbp-3, 0x1.05e72521ca1b8p-3, -0x1.01343a2c92265p-4, 0x1.d4e711a2df97dp-6, -0x1.910a5d7c0a738p-7, 0x1.446c5166ccf5ep-8, -0x1.f38c6d04fd9c1p-10, 0x1.6fd9a57ab5fedp-11, -0x1.041e390ae41dbp-12, 0x1.62743c419b8c7p-14, -0x1.d2b1c5eecc903p-16, 0x1.299727480f7f1p-17, -0x1.7227a0a17361fp-19, 0x1.bd7061e2d39a9p-21},
    {-0x1.797a639d8129dp-3, 0x1.701342cbcea7bp-4, -0x1.4bcdb9d9083c2p-5, 0x1.17eba60d31fcap-6, -0x1.bdf24bccac627p-8, 0x1.51ab9ffce7490p-9, -0x1.e8ae68b412543p-11, 0x1.535f57fdf2d8fp-12, -0x1.c5fa6b4fb53e2p-14, 0x1.254ed210db8e7p-15, -0x1.6f0559eb0d308p-17, 0x1.bdb65652f6e54p-19, -0x1.08502d157ac4cp-20, 0x1.2fe72d6652099p-22},
    {-0x1.2b11e6959934cp-3, 0x1.0a15ac2adab35p-4, -0x1.ba018e6428103p-6, 0x1.5a142948a9b2fp-7, -0x1.014eae28304b3p-8, 0x1.6d609f6ab13b6p-10, -0x1.f1b43d3aafd28p-12, 0x1.465ecd15a8687p-13, -0x1.9d62285c75992p-15, 0x1.fafc8f70bd6a2p-17, -0x1.2db32b0b8bb08p-18, 0x1.5d22cff17fc82p-20, -0x1.8b1ac6469601ep-22, 0x1.b24bf09ff6a5ap-24},
    {-0x1.e36580c7f734ap-4, 0x1.8a6efeed233adp-5, -0x1.2ef92f6f10797p-6, 0x1.b99589d40f23dp-8, -0x1.33237c3eeacf2p-9, 0x1.99b60e42dd5a7p-11, -0x1.070e0cb5df67cp-12, 0x1.4631c4b0af31ap-14, -0x1.87a61e65f49dfp-16, 0x1.c859482569eb8p-18, -0x1.0285d0db0a6fcp-19, 0x1.1d4ee35c6f90bp-21, -0x1.344d550832a6dp-23, 0x1.442da9d9b786bp-25},
    {-0x1.6a70d2bb37411p-4, 0x1.0615670e25a7bp-5, -0x1.6883f9919a179p-7, 0x1.da595561f7d32p-9, -0x1.2bd251bb2f79bp-10, 0x1.6d7743d3b2f19p-12, -0x1.aed7ebc6d3e2fp-14, 0x1.ec773cc6821b5p-16, -0x1.117a6a5ff7b8ap-17, 0x1.27af465210754p-19, -0x1.37b3d05220cc2p-21, 0x1.40e208dcb9c9cp-23, -0x1.4739ce058989dp-25, 0x1.42391d5425db1p-27},
    {-0x1.0305781330099p-4, 0x1.43b98bac83823p-6, -0x1.84e9ab30e6ab3p-8, 0x1.c2c72fd72763ep-10, -0x1.f99e41ecb0dd6p-12, 0x1.131bb1612578fp-13, -0x1.2312b25880247p-15, 0x1.2bfb5b0def1a1p-17, -0x1.2da32c58b0d08p-19, 0x1.2856fcf2adc6dp-21, -0x1.1ccbd45409db3p-23, 0x1.0c12b2a5954cbp-25, -0x1.f442cbd29fb17p-28, 0x1.c4d139629292fp-30},
    {-0x1.696d353f008b5p-5, 0x1.804cc15714188p-7, -0x1.8c84c13afb9bap-9, 0x1.8de5f26a7e649p-11, -0x1.8511846da4241p-13, 0x1.7350e3a00140cp-15, -0x1.5a61388064d99p-17, 0x1.3c3b6f9e22145p-19, -0x1.1ae04ff68c436p-21, 0x1.f05b1b7ee0911p-24, -0x1.ab6bf8393e73bp-26, 0x1.69b00139cf3bcp-28, -0x1.3329162228fa6p-30, 0x1.f6984419ac00cp-33},
    {-0x1.da39533524970p-6, 0x1.9ef71691a5520p-8, -0x1.6373226edf513p-10, 0x1.2a660fdec0435p-12, -0x1.eb88e0e90abcep-15, 0x1.8d8e597558924p-17, -0x1.3c077615e96b9p-19, 0x1.ee335e9a97c96p-22, -0x1.7c56be7073e85p-24, 0x1.204b0b1c58208p-26, -0x1.ae902779b0666p-29, 0x1.3d22a4404ce3cp-31, -0x1.da0661002a033p-34, 0x1.53b5beb44e6eap-36},
    {-0x1.30a0ebefa7ff4p-6, 0x1.b04ef16d7ef9bp-9, -0x1.2e52cf81e3f0ap-11, 0x1.a0faa96f4a7f0p-14, -0x1.1bb8488e62a34p-16, 0x1.7d2054aba8a36p-19, -0x1.f99c8bde633ddp-22, 0x1.4b59337c7fbd9p-24, -0x1.ad3e0f8bc1d95p-27, 0x1.12e4c9d314959p-29, -0x1.5c176cbef58f9p-32, 0x1.b44aaeade33b4p-35, -0x1.17806f895d601p-37, 0x1.570089956d572p-40}
};
static const double TRIG_S1_HI = -0x1.5555555555555p-3;
static const double TRIG_S1_LO = -0x1.555555541f853p-57;
static const double TRIG_S[8] = {
    0x1.1111111111111p-7,
    -0x1.a01a01a01a01ap-13,
    0x1.71de3a556c733p-19,
    -0x1.ae64567f54148p-26,
    0x1.61246139ffdd7p-33,
    -0x1.ae7f3d009d07dp-41,
    0x1.952a25ab8e46ap-49,
    -0x1.2d492e3bf88d9p-57
};
static const double TRIG_C2_HI = 0x1.5555555555555p-5;
static const double TRIG_C2_LO = 0x1.555552c359d65p-59;
static const double TRIG_C[7] = {
    -0x1.6c16c16c16c17p-10,
    0x1.a01a01a01a019p-16,
    -0x1.27e4fb7789d93p-22,
    0x1.1eed8eff32b32p-29,
    -0x1.9397495269c33p-37,
    0x1.ae7ce67d816f8p-45,
    -0x1.65d18fe933621p-53
};
static const double TRIG_INV_PIO2 = 0x1.45f306dc9c883p-1;
static const double TRIG_PIO2_1 = 0x1.921fb54400000p+0;
static const double TRIG_PIO2_2 = 0x1.0b4611a600000p-34;
static const double TRIG_PIO2_3 = 0x1.3198a2e000000p-69;
static const double TRIG_PIO2_4 = 0x1.b839a252049c1p-104;
static const double TRIG_PIO2_HI = 0x1.921fb54442d18p+0;
static const double TRIG_PIO2_LO = 0x1.1a62633145c07p-54;
static const uint32_t TRIG_TWO_OVER_PI[40] = {
    0xA2F9836Eu, 0x4E441529u, 0xFC2757D1u, 0xF534DDC0u, 0xDB629599u, 0x3C439041u,
    0xFE5163ABu, 0xDEBBC561u, 0xB7246E3Au, 0x424DD2E0u, 0x06492EEAu, 0x09D1921Cu,
    0xFE1DEB1Cu, 0xB129A73Eu, 0xE88235F5u, 0x2EBB4484u, 0xE99C7026u, 0xB45F7E41u,
    0x3991D639u, 0x835339F4u, 0x9C845F8Bu, 0xBDF9283Bu, 0x1FF897FFu, 0xDE05980Fu,
    0xEF2F118Bu, 0x5A0A6D1Fu, 0x6D367ECFu, 0x27CB09B7u, 0x4F463F66u, 0x9E5FEA2Du,
    0x7527BAC7u, 0xEBE5F17Bu, 0x3D0739F7u, 0x8A5292EAu, 0x6BFB5FB1u, 0x1F8D5D08u,
    0x56033046u, 0xFC7B6BABu, 0xF0CFBC20u, 0x9AF4361Du
};

/* Chosen by hand (not fitted): switch points and exact helpers. */
static const double ROUND_SHIFT = 0x1.8p+52;       /* x + 0x1.8p52 - 0x1.8p52 = rint(x) */
#if !EXACTC_FMA
static const double SPLITTER = 0x1.0000002p+27;    /* 2^27 + 1: Dekker's split */
#endif
static const double EXP_OVERFLOW_ARG = 0x1.63p+9;  /* 710: exp(710) > DBL_MAX */
static const double EXP_UNDERFLOW_ARG = -0x1.75p+9; /* -746: exp(-746) < 2^-1075 */
static const double TANH_TINY = 0x1p-30;           /* tanh(a) = a - a^3/3 rounds to a */
static const double TANH_ONE = 0x1.6p+4;           /* 22: 1 - tanh(22) < 2^-62 */
static const double ERF_TINY = 0x1p-32;            /* erf(a) = a S(0) to 2^-65 */
static const double ERF_ONE = 0x1.8p+2;            /* 6: erfc(6) < 2^-55 */
static const double TRIG_TINY = 0x1p-27;           /* sin a = a, cos a = 1 once rounded */
static const double TRIG_PIO4 = 0x1.921fb54442d18p-1;
static const double TRIG_CODY_WAITE_END = 0x1p+20; /* above: Payne-Hanek */

/* ------------------------------------------------------------------------------------
 * Bits and double-double arithmetic
 * ---------------------------------------------------------------------------------- */
#define SIGN_BIT UINT64_C(0x8000000000000000)
#define ABS_MASK UINT64_C(0x7fffffffffffffff)
#define MANT_MASK UINT64_C(0x000fffffffffffff)
#define ONE_BITS UINT64_C(0x3ff0000000000000)
#define INF_BITS UINT64_C(0x7ff0000000000000)
#define QNAN_BITS UINT64_C(0x7ff8000000000000)
#define MASK32 UINT64_C(0xffffffff)

static inline uint64_t bits_of(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double from_bits(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* 2^k for -1022 <= k <= 1023, built from its exponent field. In unsigned arithmetic,
 * so that any k is defined behaviour (a lane whose result is discarded may pass any). */
static inline double pow2(int k) {
    return from_bits((uint64_t)((uint32_t)k + 1023u) << 52);
}

/* An integer 0 <= c < 2^52 as a double: c is the mantissa field of 2^52 + c. */
static inline double u52_to_double(uint64_t c) {
    return from_bits(UINT64_C(0x4330000000000000) | c) - 0x1p+52;
}

/* A double-double: the value hi + lo, with |lo| <= ulp(hi)/2 after normalization. */
typedef struct {
    double hi, lo;
} dd;

static inline dd dd_make(double hi, double lo) {
    dd r;
    r.hi = hi;
    r.lo = lo;
    return r;
}

/* a + b exactly, as s + e (Knuth). */
static inline dd two_sum(double a, double b) {
    double s = a + b;
    double bb = s - a;
    return dd_make(s, (a - (s - bb)) + (b - bb));
}

/* a + b exactly when |a| >= |b| (Dekker). */
static inline dd fast_two_sum(double a, double b) {
    double s = a + b;
    return dd_make(s, b - (s - a));
}

/* a * b exactly, as p + e: e = a b - p, the error of the rounded product.
 *
 * Dekker's form splits each factor in two 26-bit halves and rebuilds e from products
 * that are exact; it is exact when the split cannot overflow (|a|, |b| < 2^995) and the
 * product is far enough from underflow (|a b| >= 2^-969). The fused form computes
 * fma(a, b, -p), one rounding of a b - p: exact whenever e is representable, which it
 * is above 2^-969 too. e is one number, so where both are exact they return the same
 * pair. Every caller here meets such operands only (the smallest products are sin and
 * cos's r^2 and r v, with |r| >= 2^-62 after reduction, tanh and erf's series with
 * a >= 2^-32, and erf's tiny branch, scaled by 2^512; the largest factors, e^44 in
 * tanh): the choice is speed only. The twin computes Dekker's form; the tests compare
 * both forms with it, below the rounding too (tests/test_libm.py). EXACTC_FMA (at the
 * top of this file) picks the form. */
static inline dd two_prod(double a, double b) {
    double p = a * b;
#if EXACTC_FMA
    return dd_make(p, __builtin_fma(a, b, -p));
#else
    double ca = SPLITTER * a;
    double ah = ca - (ca - a);
    double al = a - ah;
    double cb = SPLITTER * b;
    double bh = cb - (cb - b);
    double bl = b - bh;
    return dd_make(p, (((ah * bh - p) + ah * bl) + al * bh) + al * bl);
#endif
}

static inline dd dd_add(dd a, dd b) {
    dd s = two_sum(a.hi, b.hi);
    return fast_two_sum(s.hi, s.lo + (a.lo + b.lo));
}

static inline dd dd_mul(dd a, dd b) {
    dd p = two_prod(a.hi, b.hi);
    return fast_two_sum(p.hi, p.lo + (a.hi * b.lo + a.lo * b.hi));
}

static inline dd dd_mul_d(dd a, double b) {
    dd p = two_prod(a.hi, b);
    return fast_two_sum(p.hi, p.lo + a.lo * b);
}

static inline dd dd_div(dd a, dd b) {
    double q1 = a.hi / b.hi;
    dd p = two_prod(q1, b.hi);
    double r = (((a.hi - p.hi) - p.lo) + a.lo) - q1 * b.lo;
    return fast_two_sum(q1, r / b.hi);
}

/* Every function ends by rounding a double-double hi + lo to a double. Built with
 * -DEXACTC_LIBM_PROBE_LO it returns lo instead: lo's bits move with any change in the
 * computation long before the rounded result does, so tests/test_libm.py compares C
 * and twin in that mode too (libm_twin.probe_lo() is the twin's switch). */
#ifdef EXACTC_LIBM_PROBE_LO
#define ROUND_DD(hi, lo) ((void)(hi), (lo))
#else
#define ROUND_DD(hi, lo) ((hi) + (lo))
#endif

/* (hi + lo) 2^-1022, rounded once, for 0 <= hi + lo < 2: a result below 2^-1021, where
 * doubles are spaced 2^-1074. Scaling hi alone into the subnormal range would round a
 * second time. Below 1, adding 1 rounds hi + lo at the spacing 2^-52 (= 2^-1074 2^1022)
 * in one step; subtracting 1 and scaling back are then exact. */
static inline double scale_below_2m1021(double hi, double lo) {
    if (hi < 1.0) {
        double h = 1.0 + hi;
        double e = ((1.0 - h) + hi) + lo;
        return (ROUND_DD(h, e) - 1.0) * 0x1p-1022;
    }
    return ROUND_DD(hi, lo) * 0x1p-1022;
}

/* A loop of constant length unrolled whole, so that the laned forms' loops hold no
 * inner loop (gcc and clang vectorize none that does). Speed only: the same operations
 * in the same order. */
#if defined(__clang__)
#define UNROLL_WHOLE _Pragma("clang loop unroll(full)")
#elif defined(__GNUC__)
#define UNROLL_WHOLE _Pragma("GCC unroll 16")
#else
#define UNROLL_WHOLE
#endif

/* c[0] + z (c[1] + z (... + z c[n-1])), in double. */
static inline double horner(const double *c, int n, double z) {
    double p = c[n - 1];
    UNROLL_WHOLE
    for (int i = n - 2; i >= 0; i--) p = c[i] + z * p;
    return p;
}

/* The laned forms' helpers are inlined whole, also where they are large (clang would
 * otherwise call them, and a loop with a call is not vectorized). */
#if defined(__GNUC__)
#define LANE_INLINE static inline __attribute__((always_inline))
#else
#define LANE_INLINE static inline
#endif

/* The bits of `yes` where `cond`, else those of `no`: how the laned forms choose a
 * branch's result, both computed (a select compilers may not turn into a branch). */
static inline double blend(int cond, double yes, double no) {
    uint64_t m = (uint64_t)0 - (uint64_t)(cond != 0);
    return from_bits((bits_of(yes) & m) | (bits_of(no) & ~m));
}

/* ------------------------------------------------------------------------------------
 * exp
 *
 * x = (32 k + j) ln2/32 + r with |r| <= ln2/64, so exp(x) = 2^k 2^(j/32) exp(r).
 * ln2/32 is split Cody-Waite style (a 36-bit head, so n * head is exact for |n| < 2^16);
 * 2^(j/32) comes from a double-double table; exp(r) = 1 + r + r^2 Q(r). The core takes
 * a double-double argument (erf needs exp(-a*a) with a*a split exactly) and returns
 * 2^(j/32) exp(r) as a double-double in [0.989, 1.978) with a relative error near
 * 2^-57, plus k.
 * ---------------------------------------------------------------------------------- */
LANE_INLINE dd exp_core(double xh, double xl, int *k) {
    double t = xh * EXP_INV_LN2_32 + ROUND_SHIFT;
    double nd = t - ROUND_SHIFT; /* n = round(x 32/ln2), as a double */
    /* n sits in the low mantissa bits of t; adding 2^20 makes it non-negative so that
     * k = floor(n/32) and j = n mod 32 come from unsigned shifts and masks. */
    uint64_t u = bits_of(t) - bits_of(ROUND_SHIFT) + (UINT64_C(1) << 20);
    uint64_t j = u & 31; /* 64 bits: a gather's index in the laned forms */
    *k = (int)((uint32_t)(u >> 5) - (UINT32_C(1) << 15)); /* unsigned: defined for any t */
    double rh = xh - nd * EXP_LN2_32_HI; /* exact: Cody-Waite */
    double rl = xl - nd * EXP_LN2_32_LO;
    double r = rh + rl;
    double rr = (rh - r) + rl; /* what r lost of rh + rl */
    double q = r * r * horner(EXP_Q, 5, r);
    double p = r + (rr + q);                     /* exp(r) - 1, |p| < 0.011 */
    double tail = EXP_T_LO[j] + EXP_T_HI[j] * p; /* T (1 + p) - T_hi */
    return fast_two_sum(EXP_T_HI[j], tail);
}

/* 2^k (y.hi + y.lo), rounded once, for a normal result (-1021 <= k <= 1023). */
static inline double exp_scaled(dd y, int k) {
    return ROUND_DD(y.hi, y.lo) * pow2(k);
}

double exactc_exp(double x) {
    if (x != x) return x + x;
    if (x > EXP_OVERFLOW_ARG) return from_bits(INF_BITS);
    if (x < EXP_UNDERFLOW_ARG) return 0.0;
    int k;
    dd y = exp_core(x, 0.0, &k);
    /* y is normalized, so ROUND_DD(y.hi, y.lo) is y.hi: the rounding happened in
     * exp_core, and scaling a normal result by 2^k is exact. */
    if (k > 1023) return (ROUND_DD(y.hi, y.lo) * pow2(k - 1)) * 2.0; /* 2^1024: no double */
    if (k >= -1021) return exp_scaled(y, k);
    double s = pow2(k + 1022); /* the result is below 2^-1021 */
    return scale_below_2m1021(y.hi * s, y.lo * s);
}

/* ------------------------------------------------------------------------------------
 * log
 *
 * x = 2^k m with m in (sqrt2/2, sqrt2], f = m - 1 (exact), s = f/(2+f) as a
 * double-double (|s| <= 0.1716), log m = 2 atanh s = 2s + s^3 P(s^2). The sum
 * k ln2 + 2s is formed exactly (two_sum) and everything smaller is added below it.
 * ---------------------------------------------------------------------------------- */
double exactc_log(double x) {
    if (x != x) return x + x;
    if (x < 0.0) return from_bits(QNAN_BITS);
    if (x == 0.0) return -from_bits(INF_BITS);
    if (x > 0x1.fffffffffffffp+1023) return x; /* +inf */
    uint64_t ux = bits_of(x);
    int k = 0;
    if (ux < (UINT64_C(1) << 52)) { /* subnormal: scale into the normal range */
        ux = bits_of(x * 0x1p+54);
        k = -54;
    }
    k += (int)(ux >> 52) - 1023;
    double m = from_bits((ux & MANT_MASK) | ONE_BITS); /* in [1, 2) */
    if (m > LOG_SQRT2) {
        m = m * 0.5;
        k += 1;
    }
    double f = m - 1.0;
    dd d = two_sum(m, 1.0); /* 2 + f, exactly */
    double sh = f / d.hi;
    dd p = two_prod(sh, d.hi);
    double sl = (((f - p.hi) - p.lo) - sh * d.lo) / d.hi; /* f/(2+f) - sh */
    double z = sh * sh;
    double tail = sh * (z * horner(LOG_P, 9, z));
    double kd = (double)k; /* exact */
    dd h = two_sum(kd * LOG_LN2_HI, 2.0 * sh); /* both exact */
    double lo = h.lo + (kd * LOG_LN2_LO + (2.0 * sl + tail));
    return ROUND_DD(h.hi, lo);
}

/* ------------------------------------------------------------------------------------
 * tanh (odd: computed for a = |x|, the sign put back from x's bits)
 *
 *   a < 2^-30:        a
 *   a < 0.25:         a (1 + z U(z)), z = a^2, the last two steps in double-double
 *   a < 22:           (E - 1)/(E + 1) with E = exp(2a) a double-double from exp_core
 *   otherwise:        1
 * ---------------------------------------------------------------------------------- */
LANE_INLINE double tanh_small(double a) { /* 2^-30 <= a < 0.25 */
    dd z = two_prod(a, a);
    double u = horner(TANH_U, 9, z.hi);
    dd v = dd_add(dd_make(1.0, 0.0), dd_mul_d(z, u));
    dd y = dd_mul_d(v, a);
    return ROUND_DD(y.hi, y.lo);
}

LANE_INLINE double tanh_mid(double a) { /* 0.25 <= a < 22 */
    int k;
    dd e = exp_core(2.0 * a, 0.0, &k);
    double s = pow2(k); /* k <= 64: exact */
    dd big = dd_make(e.hi * s, e.lo * s);
    dd q = dd_div(dd_add(big, dd_make(-1.0, 0.0)), dd_add(big, dd_make(1.0, 0.0)));
    return ROUND_DD(q.hi, q.lo);
}

double exactc_tanh(double x) {
    if (x != x) return x + x;
    uint64_t sign = bits_of(x) & SIGN_BIT;
    double a = from_bits(bits_of(x) & ABS_MASK);
    double t;
    if (a < TANH_TINY) {
        return x;
    } else if (a < TANH_SMALL) {
        t = tanh_small(a);
    } else if (a < TANH_ONE) {
        t = tanh_mid(a);
    } else {
        t = 1.0;
    }
    return from_bits(bits_of(t) | sign);
}

/* ------------------------------------------------------------------------------------
 * erf (odd)
 *
 *   a < 2^-32:   a S(0), S(0) = 2/sqrt(pi) as a double-double
 *   a < 1:       a S(a^2), S a degree-15 polynomial whose top four steps run in
 *                double-double (its terms z^n s_n are too large a share of the result
 *                for double rounding errors)
 *   a < 6:       1 - erfc(a), erfc(a) = exp(-a^2) G(a), G = erfc * exp(a^2) smooth;
 *                per piece [b_i, b_i+1), G = G(c_i) + d P_i(d), d = a - c_i exact.
 *                a^2 is split exactly so that exp's argument carries no rounding.
 *   otherwise:   1
 * ---------------------------------------------------------------------------------- */
LANE_INLINE double erf_series(double a) { /* 2^-32 <= a < 1 */
    dd z = two_prod(a, a);
    double t = horner(ERF_S, 12, z.hi);
    dd s = dd_add(dd_make(ERF_S_HI[3], ERF_S_LO[3]), dd_mul_d(z, t));
    UNROLL_WHOLE
    for (int i = 2; i >= 0; i--) s = dd_add(dd_make(ERF_S_HI[i], ERF_S_LO[i]), dd_mul(z, s));
    dd e = dd_mul_d(s, a);
    return ROUND_DD(e.hi, e.lo);
}

/* The piece [b_i, b_i+1) of [1, 6) that holds a: the count of bounds b_1 ... b_8 at or
 * below it (0 below b_1, whatever a is: a lane outside [1, 6) reads a real piece). */
static inline uint64_t erfc_piece(double a) {
    uint64_t i = 0; /* 64 bits, as the tables' indices in the laned forms (gathers) */
    UNROLL_WHOLE
    for (int b = 1; b <= 8; b++) i += (uint64_t)(a >= ERFC_BOUNDS[b]);
    return i;
}

/* horner(ERFC_P[i], 14, d), each coefficient read as ERFC_P[i][j]: in the laned forms
 * a table and an index (a gather), where a pointer to the row would defeat gcc. */
static inline double erfc_poly(uint64_t i, double d) {
    double p = ERFC_P[i][13];
    UNROLL_WHOLE
    for (int j = 12; j >= 0; j--) p = ERFC_P[i][j] + d * p;
    return p;
}

LANE_INLINE double erf_tail(double a) { /* 1 <= a < 6: 1 - erfc(a) */
    uint64_t i = erfc_piece(a);
    double d = a - ERFC_CENTER[i];
    dd g = fast_two_sum(ERFC_G_HI[i], ERFC_G_LO[i] + d * erfc_poly(i, d));
    dd z = two_prod(a, a);
    int k;
    dd e = exp_core(-z.hi, -z.lo, &k);
    dd c = dd_mul(e, g);
    double s = pow2(k); /* k >= -53: exact */
    dd r = dd_add(dd_make(1.0, 0.0), dd_make(-(c.hi * s), -(c.lo * s)));
    return ROUND_DD(r.hi, r.lo);
}

double exactc_erf(double x) {
    if (x != x) return x + x;
    uint64_t sign = bits_of(x) & SIGN_BIT;
    double a = from_bits(bits_of(x) & ABS_MASK);
    double y;
    if (a < ERF_TINY) {
        /* a S(0), the product made exact; scaled by 2^512 first so that Dekker's split
         * never meets subnormals, and rounded once even when the result is subnormal. */
        double b = a * 0x1p+512;
        dd p = two_prod(b, ERF_S_HI[0]);
        dd e = fast_two_sum(p.hi, p.lo + b * ERF_S_LO[0]);
        if (a >= 0x1p-1022) y = ROUND_DD(e.hi, e.lo) * 0x1p-512;
        else y = scale_below_2m1021(e.hi * 0x1p+510, e.lo * 0x1p+510);
    } else if (a < ERF_SERIES_END) {
        y = erf_series(a);
    } else if (a < ERF_ONE) {
        y = erf_tail(a);
    } else {
        y = 1.0;
    }
    return from_bits(bits_of(y) | sign);
}

/* ------------------------------------------------------------------------------------
 * sin and cos
 *
 * a = |x| = n pi/2 + r, |r| <= pi/4, r a double-double:
 *   a <= pi/4:   r = a
 *   a < 2^20:    Cody-Waite with pi/2 in four parts (three of 33 bits, so n * part is
 *                exact for n < 2^20), subtracted with exact two_sums
 *   otherwise:   Payne-Hanek: the product of a's 53-bit mantissa with a 224-bit window
 *                of 2/pi, in 32-bit limbs, gives n mod 4 and 156 bits of the fraction
 * Kernels: sin r = r (1 + z S(z)), cos r = 1 - z/2 + z^2 C(z), z = r^2, with their top
 * steps in double-double. The closest a double comes to a multiple of pi/2 is about
 * 2^-61, so a reduction exact to ~2^-130 keeps r's relative error far below 2^-60.
 * ---------------------------------------------------------------------------------- */
LANE_INLINE int reduce_cody_waite(double a, dd *r) {
    double t = a * TRIG_INV_PIO2 + ROUND_SHIFT;
    double nd = t - ROUND_SHIFT;
    int n = (int)((bits_of(t) - bits_of(ROUND_SHIFT)) & 3);
    double u = a - nd * TRIG_PIO2_1; /* exact (Sterbenz) */
    dd s1 = two_sum(u, -(nd * TRIG_PIO2_2));
    dd s2 = two_sum(s1.hi, -(nd * TRIG_PIO2_3));
    double lo = (s1.lo + s2.lo) - nd * TRIG_PIO2_4;
    *r = fast_two_sum(s2.hi, lo);
    return n;
}

/* Word i of 2/pi with two zero words in front, so that small exponents need no
 * special case: 2/pi = sum_{i >= 2} word(i) 2^(-32 (i - 1)). */
static inline uint64_t two_over_pi_word(int i) {
    return i < 2 ? 0 : (uint64_t)TRIG_TWO_OVER_PI[i - 2];
}

/* Bits [pos, pos + count) of the 288-bit number held in 32-bit limbs (count <= 52). */
static inline uint64_t limb_bits(const uint64_t *limb, int pos, int count) {
    int l = pos >> 5, off = pos & 31;
    uint64_t v = (limb[l] | (limb[l + 1] << 32)) >> off;
    v |= (limb[l + 2] << 31) << (33 - off); /* << (64 - off), also for off = 0 */
    return v & ((UINT64_C(1) << count) - 1);
}

static int reduce_payne_hanek(double a, dd *r) {
    uint64_t ua = bits_of(a);
    int p = (int)(ua >> 52) - 1075; /* a = m 2^p, p in [-32, 971] */
    uint64_t m = (ua & MANT_MASK) | (UINT64_C(1) << 52);
    uint64_t mh = m >> 32, ml = m & MASK32;
    /* The window starts at the first word whose products with m are not all multiples
     * of 4 (those add nothing mod 4): a 2/pi = m sum_t word(i0+t) 2^(w - 32 t). */
    int i0 = (p + 62) >> 5; /* p + 62 >= 30 */
    int w = p - 32 * i0 + 32; /* in [-30, 1] */
    uint64_t acc[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < 7; j++) { /* limb j of m * window, least significant first */
        uint64_t v = two_over_pi_word(i0 + 6 - j);
        uint64_t lo = ml * v, hi = mh * v;
        acc[j] += lo & MASK32;
        acc[j + 1] += (lo >> 32) + (hi & MASK32);
        acc[j + 2] += hi >> 32;
    }
    for (int j = 0; j < 8; j++) {
        acc[j + 1] += acc[j] >> 32;
        acc[j] &= MASK32;
    }
    int b = 192 - w; /* a 2/pi = acc 2^-b: the binary point sits above bit b - 1 */
    uint64_t n = limb_bits(acc, b, 2);
    double fa = u52_to_double(limb_bits(acc, b - 52, 52)) * 0x1p-52;
    double fb = u52_to_double(limb_bits(acc, b - 104, 52)) * 0x1p-104;
    double fc = u52_to_double(limb_bits(acc, b - 156, 52)) * 0x1p-156;
    if (fa >= 0.5) { /* round to the nearest quadrant: f in [-1/2, 1/2) */
        fa = fa - 1.0;
        n += 1;
    }
    dd f = two_sum(fa, fb);
    f = fast_two_sum(f.hi, f.lo + fc);
    *r = dd_mul(f, dd_make(TRIG_PIO2_HI, TRIG_PIO2_LO));
    return (int)(n & 3);
}

/* Reduce a >= 0 (finite) to r in [-pi/4, pi/4]; returns n mod 4. */
static int reduce_pio2(double a, dd *r) {
    if (a <= TRIG_PIO4) {
        *r = dd_make(a, 0.0);
        return 0;
    }
    if (a < TRIG_CODY_WAITE_END) return reduce_cody_waite(a, r);
    return reduce_payne_hanek(a, r);
}

LANE_INLINE double sin_kernel(dd r) {
    dd z = dd_mul(r, r);
    double t = horner(TRIG_S, 8, z.hi);
    dd u = dd_add(dd_make(TRIG_S1_HI, TRIG_S1_LO), dd_mul_d(z, t));
    dd v = dd_add(dd_make(1.0, 0.0), dd_mul(z, u));
    dd y = dd_mul(r, v);
    return ROUND_DD(y.hi, y.lo);
}

LANE_INLINE double cos_kernel(dd r) {
    dd z = dd_mul(r, r);
    double t = horner(TRIG_C, 7, z.hi);
    dd u = dd_add(dd_make(TRIG_C2_HI, TRIG_C2_LO), dd_mul_d(z, t));
    dd v = dd_add(dd_make(-0.5, 0.0), dd_mul(z, u));
    dd y = dd_add(dd_make(1.0, 0.0), dd_mul(z, v));
    return ROUND_DD(y.hi, y.lo);
}

double exactc_sin(double x) {
    uint64_t sign = bits_of(x) & SIGN_BIT;
    double a = from_bits(bits_of(x) & ABS_MASK);
    if (a < TRIG_TINY) return x;                   /* also +-0 and subnormals */
    if (!(a <= 0x1.fffffffffffffp+1023)) return x - x; /* inf, NaN */
    dd r;
    double y;
    switch (reduce_pio2(a, &r)) {
    case 0: y = sin_kernel(r); break;
    case 1: y = cos_kernel(r); break;
    case 2: y = -sin_kernel(r); break;
    default: y = -cos_kernel(r); break;
    }
    return from_bits(bits_of(y) ^ sign);
}

double exactc_cos(double x) {
    double a = from_bits(bits_of(x) & ABS_MASK);
    if (a < TRIG_TINY) return 1.0;
    if (!(a <= 0x1.fffffffffffffp+1023)) return x - x; /* inf, NaN */
    dd r;
    switch (reduce_pio2(a, &r)) {
    case 0: return cos_kernel(r);
    case 1: return -sin_kernel(r);
    case 2: return -cos_kernel(r);
    default: return sin_kernel(r);
    }
}

/* ------------------------------------------------------------------------------------
 * The laned forms: y[i] = exactc_f(x[i]) for i < n (f32: exactc_ff), the same bits.
 *
 * Each f has a lane function: the scalar function's branches that hold for the elements
 * of its lane range, every one computed with the scalar function's own helpers and the
 * results blended (no branch), so that gcc and clang vectorize the loop over the
 * elements at -O2 (the constant tables become gathers). The blocks of 16 whole elements
 * run through it (16: a multiple of every vector width, which gcc's -O2 cost model
 * wants); an element outside the lane range (NaN, infinities, tiny or saturated
 * arguments, subnormal or overflowing results), and the last n mod 16, are computed by
 * the scalar function. x and y must not overlap.
 *
 * Computing every branch pays where a vector holds 4 doubles or more (AVX): tanh and
 * erf ran 1.4 to 2.7 times faster than the scalar loop with AVX2, at 0.4 to 1.1 times
 * its speed with SSE2's 2 (gcc 12 and clang 14, -O2; docs/performance.md). exp, which
 * has one branch, paid in both. -DEXACTC_LANES=1 lanes every form whatever the target
 * (the tests build it so), -DEXACTC_LANES=0 none.
 * ---------------------------------------------------------------------------------- */
#ifndef EXACTC_LANES
#if defined(__AVX__)
#define EXACTC_LANES 1
#else
#define EXACTC_LANES 0
#endif
#endif
#define LANE_BLOCK 16
/* exp's lane range: k in [-1020, 1022], so exp_scaled's result is normal. */
#define EXP_LANES_LO (-0x1.618p+9) /* -707 */
#define EXP_LANES_HI 0x1.628p+9    /* 709 */

static inline int exp_in_lanes(double x) {
    return (x >= EXP_LANES_LO) & (x <= EXP_LANES_HI);
}

LANE_INLINE double exp_lane(double x) {
    int k;
    dd y = exp_core(x, 0.0, &k);
    return exp_scaled(y, k);
}

static inline int tanh_in_lanes(double x) {
    double a = from_bits(bits_of(x) & ABS_MASK);
    return (a >= TANH_TINY) & (a < TANH_ONE);
}

LANE_INLINE double tanh_lane(double x) {
    uint64_t sign = bits_of(x) & SIGN_BIT;
    double a = from_bits(bits_of(x) & ABS_MASK);
    double t = blend(a < TANH_SMALL, tanh_small(a), tanh_mid(a));
    return from_bits(bits_of(t) | sign);
}

/* The f32 form's lanes compute the exp branch alone. Its bits are the scalar
 * function's: for every float a in [2^-30, 0.25), the series branch's range,
 * (float)tanh_mid(a) == (float)tanh_small(a), all 234,881,024 of them (checked whole by
 * tests/test_libm.py, test_f32_tanh_lanes_need_no_series): both are far under an ulp of
 * a double from tanh(a), and no float's tanh there lies so near a midpoint between
 * floats that they round apart. Skipping the series took 21 to 27 % off the f32 lanes
 * (Zen 4, gcc 12 and clang 14). */
LANE_INLINE double tanhf_lane(double x) {
    uint64_t sign = bits_of(x) & SIGN_BIT;
    double a = from_bits(bits_of(x) & ABS_MASK);
    return from_bits(bits_of(tanh_mid(a)) | sign);
}

static inline int erf_in_lanes(double x) {
    double a = from_bits(bits_of(x) & ABS_MASK);
    return (a >= ERF_TINY) & (a < ERF_ONE);
}

LANE_INLINE double erf_lane(double x) {
    uint64_t sign = bits_of(x) & SIGN_BIT;
    double a = from_bits(bits_of(x) & ABS_MASK);
    double y = blend(a < ERF_SERIES_END, erf_series(a), erf_tail(a));
    return from_bits(bits_of(y) | sign);
}

/* sin's and cos's lane range: a = |x| in [2^-27, 2^20), where the scalar functions
 * reduce with r = a (a <= pi/4) or Cody-Waite's; Payne-Hanek's limbs stay scalar. */
static inline int trig_in_lanes(double x) {
    double a = from_bits(bits_of(x) & ABS_MASK);
    return (a >= TRIG_TINY) & (a < TRIG_CODY_WAITE_END);
}
#define sin_in_lanes trig_in_lanes
#define cos_in_lanes trig_in_lanes

/* The scalar reduction of a (both of its branches, blended), both kernels of its r, and
 * its quadrant n: sin and cos of a are the kernels' results chosen and negated by n. */
typedef struct {
    double sin_r, cos_r;
    uint64_t n;
} trig_parts;

LANE_INLINE trig_parts trig_lane(double a) {
    dd w;
    uint64_t n = (uint64_t)reduce_cody_waite(a, &w);
    int small = a <= TRIG_PIO4;
    dd r = dd_make(blend(small, a, w.hi), blend(small, 0.0, w.lo));
    trig_parts p = {sin_kernel(r), cos_kernel(r), n & ((uint64_t)0 - (uint64_t)!small)};
    return p;
}

/* A double's sign flipped where `flip` is 1, as the scalar code's unary minus. */
static inline double negated_if(uint64_t flip, double y) {
    return from_bits(bits_of(y) ^ (flip << 63));
}

LANE_INLINE double sin_lane(double x) { /* n = 0, 1, 2, 3: s, c, -s, -c */
    uint64_t sign = bits_of(x) & SIGN_BIT;
    trig_parts p = trig_lane(from_bits(bits_of(x) & ABS_MASK));
    double y = negated_if((p.n >> 1) & 1, blend((int)(p.n & 1), p.cos_r, p.sin_r));
    return from_bits(bits_of(y) ^ sign);
}

LANE_INLINE double cos_lane(double x) { /* n = 0, 1, 2, 3: c, -s, -c, s */
    trig_parts p = trig_lane(from_bits(bits_of(x) & ABS_MASK));
    return negated_if((p.n ^ (p.n >> 1)) & 1, blend((int)(p.n & 1), p.sin_r, p.cos_r));
}

/* The forms of fn; `pays` is 0 where the scalar loop is the faster (lanes never run);
 * the f32 form's lanes run `f32_lane`. A second loop over the lanes' elements notes
 * whether any is outside the lane range (a vector reduction; in the lanes' own loop gcc
 * 12 vectorized neither): only then does the scalar loop pass over them to compute those
 * again (it took 31 % of exp's f32 form when it always did, a compare and a branch per
 * element). */
#define LANED_FORMS(fn, pays, f32_lane)                                                         \
    void exactc_##fn##_array(const double *restrict x, double *restrict y, int64_t n) {         \
        int64_t whole = (pays) ? n & ~(int64_t)(LANE_BLOCK - 1) : 0;                            \
        for (int64_t i = 0; i < whole; i++) y[i] = fn##_lane(x[i]);                             \
        int outside = 0;                                                                        \
        for (int64_t i = 0; i < whole; i++) outside |= !fn##_in_lanes(x[i]);                    \
        for (int64_t i = outside ? 0 : whole; i < n; i++) {                                     \
            if (i >= whole || !fn##_in_lanes(x[i])) y[i] = exactc_##fn(x[i]);                   \
        }                                                                                       \
    }                                                                                           \
    void exactc_##fn##f_array(const float *restrict x, float *restrict y, int64_t n) {          \
        int64_t whole = (pays) ? n & ~(int64_t)(LANE_BLOCK - 1) : 0;                            \
        for (int64_t i = 0; i < whole; i++) y[i] = (float)f32_lane((double)x[i]);               \
        int outside = 0;                                                                        \
        for (int64_t i = 0; i < whole; i++) outside |= !fn##_in_lanes((double)x[i]);            \
        for (int64_t i = outside ? 0 : whole; i < n; i++) {                                     \
            if (i >= whole || !fn##_in_lanes((double)x[i])) y[i] = exactc_##fn##f(x[i]);        \
        }                                                                                       \
    }

LANED_FORMS(exp, 1, exp_lane)
LANED_FORMS(tanh, EXACTC_LANES, tanhf_lane)
LANED_FORMS(erf, EXACTC_LANES, erf_lane)
LANED_FORMS(sin, EXACTC_LANES, sin_lane)
LANED_FORMS(cos, EXACTC_LANES, cos_lane)
