"""Numpy twins of exactc's transcendental functions (runtime/exactc_libm.c).

The twin contract: for every float64 input, `exp`, `log`, `tanh`, `erf`, `sin` and `cos`
here return the same 64 bits as `exactc_exp` ... `exactc_cos` in C (NaN results: some
NaN). They get there by executing the same algorithm with the same sequence of IEEE
double operations: the same branches per element (boolean masks select the elements of
each branch, which is then computed on those elements only), the same operation order
and parenthesization, the same constants (each file holds its own copy; the tests
compare the copies), and the same bit manipulations (through .view(np.uint64)).

What is allowed here, and why it is safe: + - * / on float64 arrays (IEEE, correctly
rounded, whatever SIMD path numpy takes; numpy never contracts to FMA), comparisons,
np.where, integer and bit operations on uint64/int64 arrays, and exact conversions
(a small integer to float64). Never numpy's exp/log/sin/..., np.power, np.sum, np.dot:
their results depend on the CPU and on numpy's build (docs/design.md, principle 3).

The f32-site forms `expf`, `logf`, ... compute float32(f(float64(x))), as the inline
exactc_expf ... in exactc_rt.h do.
"""

from __future__ import annotations

import contextlib

import numpy as np

_H = float.fromhex


def _hex_table(rows):
    """A list (or list of lists) of C99 hex-float strings as a float64 array."""
    return np.array([[_H(v) for v in r] if isinstance(r, list) else _H(r) for r in rows],
                    dtype=np.float64)


# --------------------------------------------------------------------------------------
# Constants. Derived by tools/gen_libm_coeffs.py and pasted here; exactc_libm.c holds its
# own copy of each.
# --------------------------------------------------------------------------------------
EXP_INV_LN2_32 = _H("0x1.71547652b82fep+5")
EXP_LN2_32_HI = _H("0x1.62e42fefa0000p-6")
EXP_LN2_32_LO = _H("0x1.cf79abc9e3b3ap-45")
EXP_Q = _hex_table([
    "0x1.0000000000000p-1",
    "0x1.555555554dc4ep-3",
    "0x1.55555555518d2p-5",
    "0x1.11114fca82e8ep-7",
    "0x1.6c1700258740fp-10",
])
EXP_T_HI = _hex_table([
    "0x1.0000000000000p+0",
    "0x1.059b0d3158574p+0",
    "0x1.0b5586cf9890fp+0",
    "0x1.11301d0125b51p+0",
    "0x1.172b83c7d517bp+0",
    "0x1.1d4873168b9aap+0",
    "0x1.2387a6e756238p+0",
    "0x1.29e9df51fdee1p+0",
    "0x1.306fe0a31b715p+0",
    "0x1.371a7373aa9cbp+0",
    "0x1.3dea64c123422p+0",
    "0x1.44e086061892dp+0",
    "0x1.4bfdad5362a27p+0",
    "0x1.5342b569d4f82p+0",
    "0x1.5ab07dd485429p+0",
    "0x1.6247eb03a5585p+0",
    "0x1.6a09e667f3bcdp+0",
    "0x1.71f75e8ec5f74p+0",
    "0x1.7a11473eb0187p+0",
    "0x1.82589994cce13p+0",
    "0x1.8ace5422aa0dbp+0",
    "0x1.93737b0cdc5e5p+0",
    "0x1.9c49182a3f090p+0",
    "0x1.a5503b23e255dp+0",
    "0x1.ae89f995ad3adp+0",
    "0x1.b7f76f2fb5e47p+0",
    "0x1.c199bdd85529cp+0",
    "0x1.cb720dcef9069p+0",
    "0x1.d5818dcfba487p+0",
    "0x1.dfc97337b9b5fp+0",
    "0x1.ea4afa2a490dap+0",
    "0x1.f50765b6e4540p+0",
])
EXP_T_LO = _hex_table([
    "0x0p+0",
    "0x1.d73e2a475b465p-55",
    "0x1.8a62e4adc610bp-54",
    "-0x1.6c51039449b3ap-54",
    "-0x1.19041b9d78a76p-55",
    "0x1.e016e00a2643cp-54",
    "0x1.9b07eb6c70573p-54",
    "0x1.612e8afad1255p-55",
    "0x1.6f46ad23182e4p-55",
    "-0x1.63aeabf42eae2p-54",
    "0x1.ada0911f09ebcp-55",
    "0x1.89b7a04ef80d0p-59",
    "0x1.d4397afec42e2p-56",
    "-0x1.07abe1db13cadp-55",
    "0x1.6324c054647adp-54",
    "-0x1.383c17e40b497p-54",
    "-0x1.bdd3413b26456p-54",
    "-0x1.16e4786887a99p-55",
    "-0x1.41577ee04992fp-55",
    "-0x1.d4c1dd41532d8p-54",
    "0x1.6e9f156864b27p-54",
    "-0x1.75fc781b57ebcp-57",
    "0x1.c7c46b071f2bep-56",
    "-0x1.d2f6edb8d41e1p-54",
    "0x1.7a1cd345dcc81p-54",
    "-0x1.5584f7e54ac3bp-56",
    "0x1.11065895048ddp-55",
    "0x1.503cbd1e949dbp-56",
    "0x1.2ed02d75b3707p-55",
    "-0x1.1a5cd4f184b5cp-54",
    "-0x1.e9c23179c2893p-54",
    "0x1.9d3e12dd8a18bp-54",
])
LOG_SQRT2 = _H("0x1.6a09e667f3bcdp+0")
LOG_LN2_HI = _H("0x1.62e42fefa3800p-1")
LOG_LN2_LO = _H("0x1.ef35793c76730p-45")
LOG_P = _hex_table([
    "0x1.5555555555555p-1",
    "0x1.9999999999998p-2",
    "0x1.249249249295bp-2",
    "0x1.c71c71c64c4b9p-3",
    "0x1.745d17d378427p-3",
    "0x1.3b137b291cc0dp-3",
    "0x1.111d29291fef6p-3",
    "0x1.debe85c9b376dp-4",
    "0x1.e6b2d29e10cebp-4",
])
TANH_SMALL = _H("0x1.0000000000000p-2")
TANH_U = _hex_table([
    "-0x1.5555555555555p-2",
    "0x1.1111111111110p-3",
    "-0x1.ba1ba1ba1b41ep-5",
    "0x1.664f488245e56p-6",
    "-0x1.226e350f0cce6p-7",
    "0x1.d6d39755b2859p-9",
    "-0x1.7d971c140d5d9p-10",
    "0x1.33cf3deecb286p-11",
    "-0x1.bff153c36cb39p-13",
])
ERF_SERIES_END = _H("0x1.0000000000000p+0")
ERF_S_HI = _hex_table([
    "0x1.20dd750429b6dp+0",
    "-0x1.812746b0379e7p-2",
    "0x1.ce2f21a042be2p-4",
    "-0x1.b82ce31288b51p-6",
])
ERF_S_LO = _hex_table([
    "0x1.1ae3a87d54725p-56",
    "0x1.ee15435779d7ap-57",
    "-0x1.2a04dddcbdcbcp-58",
    "0x1.5be6f247b1650p-60",
])
ERF_S = _hex_table([
    "0x1.565bcd0e6a530p-8",
    "-0x1.c02db400406a3p-11",
    "0x1.f9a326f9a7769p-14",
    "-0x1.f4d25c3b729a6p-17",
    "0x1.b9e6c9944bd7ep-20",
    "-0x1.5f74291398641p-23",
    "0x1.fcc4c8ec29638p-27",
    "-0x1.51cfe00be885fp-30",
    "0x1.9df7fd0b39a12p-34",
    "-0x1.d332e777f7344p-38",
    "0x1.cf915d8f3c685p-42",
    "-0x1.3aa422cc5d833p-46",
])
ERFC_BOUNDS = _hex_table([
    "0x1.0000000000000p+0",
    "0x1.4000000000000p+0",
    "0x1.8000000000000p+0",
    "0x1.c000000000000p+0",
    "0x1.0000000000000p+1",
    "0x1.4000000000000p+1",
    "0x1.8000000000000p+1",
    "0x1.e000000000000p+1",
    "0x1.3000000000000p+2",
    "0x1.8000000000000p+2",
])
ERFC_CENTER = _hex_table([
    "0x1.2000000000000p+0",
    "0x1.6000000000000p+0",
    "0x1.a000000000000p+0",
    "0x1.e000000000000p+0",
    "0x1.2000000000000p+1",
    "0x1.6000000000000p+1",
    "0x1.b000000000000p+1",
    "0x1.1000000000000p+2",
    "0x1.5800000000000p+2",
])
ERFC_G_HI = _hex_table([
    "0x1.9531e09b149b5p-2",
    "0x1.5f88f52f3c76bp-2",
    "0x1.3583f6644327bp-2",
    "0x1.13e5743b60480p-2",
    "0x1.d94446d627932p-3",
    "0x1.8c9eb68ff27d7p-3",
    "0x1.48f8f10299b71p-3",
    "0x1.08e62ce8c89adp-3",
    "0x1.a6dab49575b6dp-4",
])
ERFC_G_LO = _hex_table([
    "-0x1.aa513235e9c37p-58",
    "-0x1.b7eb97a02d0e7p-57",
    "-0x1.88eb8ebfdccaep-56",
    "0x1.ca1dfca5d5331p-56",
    "-0x1.a8198a8216449p-58",
    "-0x1.bb4e763c64a35p-57",
    "0x1.635e7b3452b79p-59",
    "-0x1.dc926b221fa47p-57",
    "0x1.c84c90cc5b214p-62",
])
ERFC_P = _hex_table([
    ["-0x1.e78b356770fbbp-3", "0x1.05e72521ca1b8p-3", "-0x1.01343a2c92265p-4", "0x1.d4e711a2df97dp-6", "-0x1.910a5d7c0a738p-7", "0x1.446c5166ccf5ep-8", "-0x1.f38c6d04fd9c1p-10", "0x1.6fd9a57ab5fedp-11", "-0x1.041e390ae41dbp-12", "0x1.62743c419b8c7p-14", "-0x1.d2b1c5eecc903p-16", "0x1.299727480f7f1p-17", "-0x1.7227a0a17361fp-19", "0x1.bd7061e2d39a9p-21"],
    ["-0x1.797a639d8129dp-3", "0x1.701342cbcea7bp-4", "-0x1.4bcdb9d9083c2p-5", "0x1.17eba60d31fcap-6", "-0x1.bdf24bccac627p-8", "0x1.51ab9ffce7490p-9", "-0x1.e8ae68b412543p-11", "0x1.535f57fdf2d8fp-12", "-0x1.c5fa6b4fb53e2p-14", "0x1.254ed210db8e7p-15", "-0x1.6f0559eb0d308p-17", "0x1.bdb65652f6e54p-19", "-0x1.08502d157ac4cp-20", "0x1.2fe72d6652099p-22"],
    ["-0x1.2b11e6959934cp-3", "0x1.0a15ac2adab35p-4", "-0x1.ba018e6428103p-6", "0x1.5a142948a9b2fp-7", "-0x1.014eae28304b3p-8", "0x1.6d609f6ab13b6p-10", "-0x1.f1b43d3aafd28p-12", "0x1.465ecd15a8687p-13", "-0x1.9d62285c75992p-15", "0x1.fafc8f70bd6a2p-17", "-0x1.2db32b0b8bb08p-18", "0x1.5d22cff17fc82p-20", "-0x1.8b1ac6469601ep-22", "0x1.b24bf09ff6a5ap-24"],
    ["-0x1.e36580c7f734ap-4", "0x1.8a6efeed233adp-5", "-0x1.2ef92f6f10797p-6", "0x1.b99589d40f23dp-8", "-0x1.33237c3eeacf2p-9", "0x1.99b60e42dd5a7p-11", "-0x1.070e0cb5df67cp-12", "0x1.4631c4b0af31ap-14", "-0x1.87a61e65f49dfp-16", "0x1.c859482569eb8p-18", "-0x1.0285d0db0a6fcp-19", "0x1.1d4ee35c6f90bp-21", "-0x1.344d550832a6dp-23", "0x1.442da9d9b786bp-25"],
    ["-0x1.6a70d2bb37411p-4", "0x1.0615670e25a7bp-5", "-0x1.6883f9919a179p-7", "0x1.da595561f7d32p-9", "-0x1.2bd251bb2f79bp-10", "0x1.6d7743d3b2f19p-12", "-0x1.aed7ebc6d3e2fp-14", "0x1.ec773cc6821b5p-16", "-0x1.117a6a5ff7b8ap-17", "0x1.27af465210754p-19", "-0x1.37b3d05220cc2p-21", "0x1.40e208dcb9c9cp-23", "-0x1.4739ce058989dp-25", "0x1.42391d5425db1p-27"],
    ["-0x1.0305781330099p-4", "0x1.43b98bac83823p-6", "-0x1.84e9ab30e6ab3p-8", "0x1.c2c72fd72763ep-10", "-0x1.f99e41ecb0dd6p-12", "0x1.131bb1612578fp-13", "-0x1.2312b25880247p-15", "0x1.2bfb5b0def1a1p-17", "-0x1.2da32c58b0d08p-19", "0x1.2856fcf2adc6dp-21", "-0x1.1ccbd45409db3p-23", "0x1.0c12b2a5954cbp-25", "-0x1.f442cbd29fb17p-28", "0x1.c4d139629292fp-30"],
    ["-0x1.696d353f008b5p-5", "0x1.804cc15714188p-7", "-0x1.8c84c13afb9bap-9", "0x1.8de5f26a7e649p-11", "-0x1.8511846da4241p-13", "0x1.7350e3a00140cp-15", "-0x1.5a61388064d99p-17", "0x1.3c3b6f9e22145p-19", "-0x1.1ae04ff68c436p-21", "0x1.f05b1b7ee0911p-24", "-0x1.ab6bf8393e73bp-26", "0x1.69b00139cf3bcp-28", "-0x1.3329162228fa6p-30", "0x1.f6984419ac00cp-33"],
    ["-0x1.da39533524970p-6", "0x1.9ef71691a5520p-8", "-0x1.6373226edf513p-10", "0x1.2a660fdec0435p-12", "-0x1.eb88e0e90abcep-15", "0x1.8d8e597558924p-17", "-0x1.3c077615e96b9p-19", "0x1.ee335e9a97c96p-22", "-0x1.7c56be7073e85p-24", "0x1.204b0b1c58208p-26", "-0x1.ae902779b0666p-29", "0x1.3d22a4404ce3cp-31", "-0x1.da0661002a033p-34", "0x1.53b5beb44e6eap-36"],
    ["-0x1.30a0ebefa7ff4p-6", "0x1.b04ef16d7ef9bp-9", "-0x1.2e52cf81e3f0ap-11", "0x1.a0faa96f4a7f0p-14", "-0x1.1bb8488e62a34p-16", "0x1.7d2054aba8a36p-19", "-0x1.f99c8bde633ddp-22", "0x1.4b59337c7fbd9p-24", "-0x1.ad3e0f8bc1d95p-27", "0x1.12e4c9d314959p-29", "-0x1.5c176cbef58f9p-32", "0x1.b44aaeade33b4p-35", "-0x1.17806f895d601p-37", "0x1.570089956d572p-40"],
])
TRIG_S1_HI = _H("-0x1.5555555555555p-3")
TRIG_S1_LO = _H("-0x1.555555541f853p-57")
TRIG_S = _hex_table([
    "0x1.1111111111111p-7",
    "-0x1.a01a01a01a01ap-13",
    "0x1.71de3a556c733p-19",
    "-0x1.ae64567f54148p-26",
    "0x1.61246139ffdd7p-33",
    "-0x1.ae7f3d009d07dp-41",
    "0x1.952a25ab8e46ap-49",
    "-0x1.2d492e3bf88d9p-57",
])
TRIG_C2_HI = _H("0x1.5555555555555p-5")
TRIG_C2_LO = _H("0x1.555552c359d65p-59")
TRIG_C = _hex_table([
    "-0x1.6c16c16c16c17p-10",
    "0x1.a01a01a01a019p-16",
    "-0x1.27e4fb7789d93p-22",
    "0x1.1eed8eff32b32p-29",
    "-0x1.9397495269c33p-37",
    "0x1.ae7ce67d816f8p-45",
    "-0x1.65d18fe933621p-53",
])
TRIG_INV_PIO2 = _H("0x1.45f306dc9c883p-1")
TRIG_PIO2_1 = _H("0x1.921fb54400000p+0")
TRIG_PIO2_2 = _H("0x1.0b4611a600000p-34")
TRIG_PIO2_3 = _H("0x1.3198a2e000000p-69")
TRIG_PIO2_4 = _H("0x1.b839a252049c1p-104")
TRIG_PIO2_HI = _H("0x1.921fb54442d18p+0")
TRIG_PIO2_LO = _H("0x1.1a62633145c07p-54")
TRIG_TWO_OVER_PI = np.array([
    0xA2F9836E, 0x4E441529, 0xFC2757D1, 0xF534DDC0, 0xDB629599, 0x3C439041,
    0xFE5163AB, 0xDEBBC561, 0xB7246E3A, 0x424DD2E0, 0x06492EEA, 0x09D1921C,
    0xFE1DEB1C, 0xB129A73E, 0xE88235F5, 0x2EBB4484, 0xE99C7026, 0xB45F7E41,
    0x3991D639, 0x835339F4, 0x9C845F8B, 0xBDF9283B, 0x1FF897FF, 0xDE05980F,
    0xEF2F118B, 0x5A0A6D1F, 0x6D367ECF, 0x27CB09B7, 0x4F463F66, 0x9E5FEA2D,
    0x7527BAC7, 0xEBE5F17B, 0x3D0739F7, 0x8A5292EA, 0x6BFB5FB1, 0x1F8D5D08,
    0x56033046, 0xFC7B6BAB, 0xF0CFBC20, 0x9AF4361D,
], dtype=np.uint64)

# Chosen by hand (not fitted): switch points and exact helpers.
ROUND_SHIFT = _H("0x1.8p+52")  # x + 0x1.8p52 - 0x1.8p52 = rint(x)
SPLITTER = _H("0x1.0000002p+27")  # 2^27 + 1: Dekker's split
EXP_OVERFLOW_ARG = _H("0x1.63p+9")  # 710
EXP_UNDERFLOW_ARG = _H("-0x1.75p+9")  # -746
TANH_TINY = _H("0x1p-30")
TANH_ONE = _H("0x1.6p+4")  # 22
ERF_TINY = _H("0x1p-32")
ERF_ONE = _H("0x1.8p+2")  # 6
TRIG_TINY = _H("0x1p-27")
TRIG_PIO4 = _H("0x1.921fb54442d18p-1")
TRIG_CODY_WAITE_END = _H("0x1p+20")

# --------------------------------------------------------------------------------------
# Bits and double-double arithmetic (the C file's helpers, with the same names)
# --------------------------------------------------------------------------------------
_SIGN_BIT = 0x8000000000000000
_ABS_MASK = 0x7FFFFFFFFFFFFFFF
_MANT_MASK = 0x000FFFFFFFFFFFFF
_ONE_BITS = 0x3FF0000000000000
_MASK32 = 0xFFFFFFFF
_SHIFT_BITS = 0x4338000000000000  # the bits of ROUND_SHIFT
_DBL_MAX = _H("0x1.fffffffffffffp+1023")
_TWO_P52, _TWO_P54, _TWO_P510, _TWO_P512 = 2.0**52, 2.0**54, 2.0**510, 2.0**512
_TWO_M512 = 2.0**-512
_TWO_M52, _TWO_M104, _TWO_M156, _TWO_M1022 = 2.0**-52, 2.0**-104, 2.0**-156, 2.0**-1022


def _bits(x):
    return x.view(np.uint64)


def _from_bits(u):
    return u.view(np.float64)


def _pow2(k):
    """2^k for -1022 <= k <= 1023 (int64 array), built from its exponent field."""
    return _from_bits((k + 1023).astype(np.uint64) << 52)


def _u52_to_double(c):
    """Integers 0 <= c < 2^52 (uint64) as doubles: c is the mantissa field of 2^52 + c."""
    return _from_bits(c | 0x4330000000000000) - _TWO_P52


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a, b):
    s = a + b
    return s, b - (s - a)


def _two_prod(a, b):
    """a * b as p + e exactly, by Dekker's split. The C computes e with one fused
    multiply-add where the target has one (EXACTC_FMA): the same e for every operand
    these functions meet (exactc_libm.c, two_prod)."""
    p = a * b
    ca = SPLITTER * a
    ah = ca - (ca - a)
    al = a - ah
    cb = SPLITTER * b
    bh = cb - (cb - b)
    bl = b - bh
    return p, (((ah * bh - p) + ah * bl) + al * bh) + al * bl


def _dd_add(a, b):
    s, e = _two_sum(a[0], b[0])
    return _fast_two_sum(s, e + (a[1] + b[1]))


def _dd_mul(a, b):
    p, e = _two_prod(a[0], b[0])
    return _fast_two_sum(p, e + (a[0] * b[1] + a[1] * b[0]))


def _dd_mul_d(a, b):
    p, e = _two_prod(a[0], b)
    return _fast_two_sum(p, e + a[1] * b)


def _dd_div(a, b):
    q1 = a[0] / b[0]
    p, e = _two_prod(q1, b[0])
    r = (((a[0] - p) - e) + a[1]) - q1 * b[1]
    return _fast_two_sum(q1, r / b[0])


_PROBE_LO = False


def _round_dd(hi, lo):
    """The final rounding of hi + lo; lo itself under probe_lo() (ROUND_DD in the C)."""
    return lo if _PROBE_LO else hi + lo


@contextlib.contextmanager
def probe_lo():
    """Within this block every twin returns the lo part of its final double-double, as
    exactc_libm.c built with -DEXACTC_LIBM_PROBE_LO does. lo's bits change with any
    change in the computation, long before the rounded result does: a test probe."""
    global _PROBE_LO
    saved, _PROBE_LO = _PROBE_LO, True
    try:
        yield
    finally:
        _PROBE_LO = saved


def _scale_below_2m1021(hi, lo):
    """(hi + lo) 2^-1022 rounded once, for 0 <= hi + lo < 2 (see the C)."""
    h = 1.0 + hi
    e = ((1.0 - h) + hi) + lo
    return np.where(hi < 1.0, _round_dd(h, e) - 1.0, _round_dd(hi, lo)) * _TWO_M1022


def _horner(c, z):
    """c[0] + z (c[1] + z (... + z c[n-1])); c is 1-D (shared) or 2-D (a row per element)."""
    if c.ndim == 1:
        p = c[-1]
        for i in range(len(c) - 2, -1, -1):
            p = c[i] + z * p
        return p
    p = c[:, -1]
    for i in range(c.shape[1] - 2, -1, -1):
        p = c[:, i] + z * p
    return p


def _as_flat_f64(x):
    x = np.asarray(x, dtype=np.float64)
    return x.shape, np.ascontiguousarray(x.ravel())


# --------------------------------------------------------------------------------------
# exp (see exactc_libm.c for the derivation of each step)
# --------------------------------------------------------------------------------------
def _exp_core(xh, xl):
    """exp(xh + xl) = 2^k (hi + lo), hi + lo in [0.989, 1.978)."""
    t = xh * EXP_INV_LN2_32 + ROUND_SHIFT
    nd = t - ROUND_SHIFT
    u = _bits(t) - _SHIFT_BITS + (1 << 20)  # n + 2^20 >= 0, wrapping like C's uint64_t
    j = (u & 31).astype(np.intp)
    k = (u >> 5).astype(np.int64) - (1 << 15)
    rh = xh - nd * EXP_LN2_32_HI
    rl = xl - nd * EXP_LN2_32_LO
    r = rh + rl
    rr = (rh - r) + rl
    q = r * r * _horner(EXP_Q, r)
    p = r + (rr + q)
    tail = EXP_T_LO[j] + EXP_T_HI[j] * p
    hi, lo = _fast_two_sum(EXP_T_HI[j], tail)
    return k, hi, lo


def _exp_finite(x):
    k, hi, lo = _exp_core(x, 0.0)
    y = np.empty_like(x)
    big = k > 1023
    normal = ~big & (k >= -1021)
    small = ~(big | normal)
    y[big] = (_round_dd(hi[big], lo[big]) * _pow2(k[big] - 1)) * 2.0
    y[normal] = _round_dd(hi[normal], lo[normal]) * _pow2(k[normal])
    s = _pow2(k[small] + 1022)
    y[small] = _scale_below_2m1021(hi[small] * s, lo[small] * s)
    return y


def exp(x):
    """exactc_exp, elementwise on a float64 array."""
    shape, x = _as_flat_f64(x)
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        nan = x != x
        over = x > EXP_OVERFLOW_ARG
        under = x < EXP_UNDERFLOW_ARG
        out[nan] = x[nan] + x[nan]
        out[over] = np.inf
        out[under] = 0.0
        rest = ~(nan | over | under)
        out[rest] = _exp_finite(x[rest])
    return out.reshape(shape)


# --------------------------------------------------------------------------------------
# log
# --------------------------------------------------------------------------------------
def _log_positive(x):
    ux = _bits(x)
    sub = ux < (1 << 52)
    ux = np.where(sub, _bits(x * _TWO_P54), ux)
    k = np.where(sub, -54, 0).astype(np.int64) + ((ux >> 52).astype(np.int64) - 1023)
    m = _from_bits((ux & _MANT_MASK) | _ONE_BITS)
    big = m > LOG_SQRT2
    m = np.where(big, m * 0.5, m)
    k = k + big
    f = m - 1.0
    dh, dl = _two_sum(m, 1.0)
    sh = f / dh
    ph, pl = _two_prod(sh, dh)
    sl = (((f - ph) - pl) - sh * dl) / dh
    z = sh * sh
    tail = sh * (z * _horner(LOG_P, z))
    kd = k.astype(np.float64)  # exact
    hh, hl = _two_sum(kd * LOG_LN2_HI, 2.0 * sh)
    lo = hl + (kd * LOG_LN2_LO + (2.0 * sl + tail))
    return _round_dd(hh, lo)


def log(x):
    """exactc_log, elementwise on a float64 array."""
    shape, x = _as_flat_f64(x)
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        nan = x != x
        neg = x < 0.0
        zero = x == 0.0
        inf = x > _DBL_MAX
        out[nan] = x[nan] + x[nan]
        out[neg] = np.nan
        out[zero] = -np.inf
        out[inf] = x[inf]
        rest = ~(nan | neg | zero | inf)
        out[rest] = _log_positive(x[rest])
    return out.reshape(shape)


# --------------------------------------------------------------------------------------
# tanh
# --------------------------------------------------------------------------------------
def _tanh_small(a):
    z = _two_prod(a, a)
    u = _horner(TANH_U, z[0])
    v = _dd_add((1.0, 0.0), _dd_mul_d(z, u))
    yh, yl = _dd_mul_d(v, a)
    return _round_dd(yh, yl)


def _tanh_mid(a):
    k, eh, el = _exp_core(2.0 * a, 0.0)
    s = _pow2(k)
    big = (eh * s, el * s)
    qh, ql = _dd_div(_dd_add(big, (-1.0, 0.0)), _dd_add(big, (1.0, 0.0)))
    return _round_dd(qh, ql)


def tanh(x):
    """exactc_tanh, elementwise on a float64 array."""
    shape, x = _as_flat_f64(x)
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        sign = _bits(x) & _SIGN_BIT
        a = _from_bits(_bits(x) & _ABS_MASK)
        nan = x != x
        tiny = a < TANH_TINY
        small = ~tiny & (a < TANH_SMALL)
        mid = ~tiny & ~small & (a < TANH_ONE)
        t = np.ones_like(x)
        t[small] = _tanh_small(a[small])
        t[mid] = _tanh_mid(a[mid])
        out[:] = _from_bits(_bits(t) | sign)
        out[tiny] = x[tiny]
        out[nan] = x[nan] + x[nan]
    return out.reshape(shape)


# --------------------------------------------------------------------------------------
# erf
# --------------------------------------------------------------------------------------
def _erf_series(a):
    z = _two_prod(a, a)
    t = _horner(ERF_S, z[0])
    s = _dd_add((ERF_S_HI[3], ERF_S_LO[3]), _dd_mul_d(z, t))
    for i in (2, 1, 0):
        s = _dd_add((ERF_S_HI[i], ERF_S_LO[i]), _dd_mul(z, s))
    eh, el = _dd_mul_d(s, a)
    return _round_dd(eh, el)


def _erf_via_erfc(a):
    i = np.zeros(a.shape, dtype=np.intp)
    for b in ERFC_BOUNDS[1:-1]:
        i += a >= b
    d = a - ERFC_CENTER[i]
    g = _fast_two_sum(ERFC_G_HI[i], ERFC_G_LO[i] + d * _horner(ERFC_P[i], d))
    zh, zl = _two_prod(a, a)
    k, eh, el = _exp_core(-zh, -zl)
    ch, cl = _dd_mul((eh, el), g)
    s = _pow2(k)
    rh, rl = _dd_add((1.0, 0.0), (-(ch * s), -(cl * s)))
    return _round_dd(rh, rl)


def _erf_tiny(a):
    b = a * _TWO_P512
    ph, pl = _two_prod(b, ERF_S_HI[0])
    eh, el = _fast_two_sum(ph, pl + b * ERF_S_LO[0])
    return np.where(
        a >= _TWO_M1022,
        _round_dd(eh, el) * _TWO_M512,
        _scale_below_2m1021(eh * _TWO_P510, el * _TWO_P510),
    )


def erf(x):
    """exactc_erf, elementwise on a float64 array."""
    shape, x = _as_flat_f64(x)
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        sign = _bits(x) & _SIGN_BIT
        a = _from_bits(_bits(x) & _ABS_MASK)
        nan = x != x
        tiny = a < ERF_TINY
        series = ~tiny & (a < ERF_SERIES_END)
        via_erfc = ~tiny & ~series & (a < ERF_ONE)
        y = np.ones_like(x)
        y[tiny] = _erf_tiny(a[tiny])
        y[series] = _erf_series(a[series])
        y[via_erfc] = _erf_via_erfc(a[via_erfc])
        out[:] = _from_bits(_bits(y) | sign)
        out[nan] = x[nan] + x[nan]
    return out.reshape(shape)


# --------------------------------------------------------------------------------------
# sin and cos
# --------------------------------------------------------------------------------------
_TWO_OVER_PI_PADDED = np.concatenate((np.zeros(2, dtype=np.uint64), TRIG_TWO_OVER_PI))


def _reduce_cody_waite(a):
    t = a * TRIG_INV_PIO2 + ROUND_SHIFT
    nd = t - ROUND_SHIFT
    n = ((_bits(t) - _SHIFT_BITS) & 3).astype(np.int64)
    u = a - nd * TRIG_PIO2_1
    s1h, s1l = _two_sum(u, -(nd * TRIG_PIO2_2))
    s2h, s2l = _two_sum(s1h, -(nd * TRIG_PIO2_3))
    lo = (s1l + s2l) - nd * TRIG_PIO2_4
    rh, rl = _fast_two_sum(s2h, lo)
    return n, rh, rl


def _limb_bits(acc, pos, count):
    """Bits [pos, pos + count) of the numbers held in 32-bit limbs acc[0..8] (count <= 52)."""
    cols = np.arange(acc.shape[1])
    limb = pos >> 5
    off = (pos & 31).astype(np.uint64)
    v = (acc[limb, cols] | (acc[limb + 1, cols] << 32)) >> off
    v |= (acc[limb + 2, cols] << 31) << (33 - off)
    return v & ((1 << count) - 1)


def _reduce_payne_hanek(a):
    ua = _bits(a)
    p = (ua >> 52).astype(np.int64) - 1075
    m = (ua & _MANT_MASK) | (1 << 52)
    mh = m >> 32
    ml = m & _MASK32
    i0 = (p + 62) >> 5
    w = p - 32 * i0 + 32
    acc = np.zeros((9, a.shape[0]), dtype=np.uint64)
    for j in range(7):
        v = _TWO_OVER_PI_PADDED[i0 + 6 - j]
        lo = ml * v
        hi = mh * v
        acc[j] += lo & _MASK32
        acc[j + 1] += (lo >> 32) + (hi & _MASK32)
        acc[j + 2] += hi >> 32
    for j in range(8):
        acc[j + 1] += acc[j] >> 32
        acc[j] &= _MASK32
    b = 192 - w
    n = _limb_bits(acc, b, 2).astype(np.int64)
    fa = _u52_to_double(_limb_bits(acc, b - 52, 52)) * _TWO_M52
    fb = _u52_to_double(_limb_bits(acc, b - 104, 52)) * _TWO_M104
    fc = _u52_to_double(_limb_bits(acc, b - 156, 52)) * _TWO_M156
    up = fa >= 0.5
    fa = np.where(up, fa - 1.0, fa)
    n = n + up
    f = _two_sum(fa, fb)
    f = _fast_two_sum(f[0], f[1] + fc)
    rh, rl = _dd_mul(f, (TRIG_PIO2_HI, TRIG_PIO2_LO))
    return n & 3, rh, rl


def _reduce_pio2(a):
    """a finite, >= 0: (n mod 4, rh, rl) with a = n pi/2 + rh + rl."""
    n = np.zeros(a.shape, dtype=np.int64)
    rh = a.copy()
    rl = np.zeros_like(a)
    cw = (a > TRIG_PIO4) & (a < TRIG_CODY_WAITE_END)
    ph = ~(a < TRIG_CODY_WAITE_END)
    for sel, reduce in ((cw, _reduce_cody_waite), (ph, _reduce_payne_hanek)):
        n[sel], rh[sel], rl[sel] = reduce(a[sel])
    return n, rh, rl


def _sin_kernel(rh, rl):
    r = (rh, rl)
    z = _dd_mul(r, r)
    t = _horner(TRIG_S, z[0])
    u = _dd_add((TRIG_S1_HI, TRIG_S1_LO), _dd_mul_d(z, t))
    v = _dd_add((1.0, 0.0), _dd_mul(z, u))
    yh, yl = _dd_mul(r, v)
    return _round_dd(yh, yl)


def _cos_kernel(rh, rl):
    r = (rh, rl)
    z = _dd_mul(r, r)
    t = _horner(TRIG_C, z[0])
    u = _dd_add((TRIG_C2_HI, TRIG_C2_LO), _dd_mul_d(z, t))
    v = _dd_add((-0.5, 0.0), _dd_mul(z, u))
    yh, yl = _dd_add((1.0, 0.0), _dd_mul(z, v))
    return _round_dd(yh, yl)


def _trig(x, quadrant_table, odd):
    """sin (odd) or cos: quadrant_table[n] = (kernel, negate) for |x| = n pi/2 + r."""
    shape, x = _as_flat_f64(x)
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        sign = _bits(x) & _SIGN_BIT
        a = _from_bits(_bits(x) & _ABS_MASK)
        tiny = a < TRIG_TINY
        bad = ~tiny & ~(a <= _DBL_MAX)  # inf, NaN
        rest = ~(tiny | bad)
        out[tiny] = x[tiny] if odd else 1.0
        out[bad] = x[bad] - x[bad]
        n, rh, rl = _reduce_pio2(a[rest])
        y = np.empty_like(rh)
        for q, (kernel, negate) in enumerate(quadrant_table):
            sel = n == q
            v = kernel(rh[sel], rl[sel])
            y[sel] = -v if negate else v
        out[rest] = _from_bits(_bits(y) ^ sign[rest]) if odd else y
    return out.reshape(shape)


def sin(x):
    """exactc_sin, elementwise on a float64 array."""
    table = ((_sin_kernel, False), (_cos_kernel, False), (_sin_kernel, True), (_cos_kernel, True))
    return _trig(x, table, odd=True)


def cos(x):
    """exactc_cos, elementwise on a float64 array."""
    table = ((_cos_kernel, False), (_sin_kernel, True), (_cos_kernel, True), (_sin_kernel, False))
    return _trig(x, table, odd=False)


# --------------------------------------------------------------------------------------
# f32 sites: float32(f(float64(x))), as exactc_expf ... in exactc_rt.h
# --------------------------------------------------------------------------------------
def f32_site(fn):
    """The f32-site form of a twin: widen exactly, compute in f64, round once to f32."""

    def site(x):
        x = np.asarray(x, dtype=np.float32)
        with np.errstate(all="ignore"):  # overflow to inf is the intended rounding
            return fn(x.astype(np.float64)).astype(np.float32)

    site.__name__ = fn.__name__ + "f"
    site.__doc__ = f"float32({fn.__name__}(float64(x))), as exactc_{fn.__name__}f."
    return site


expf = f32_site(exp)
logf = f32_site(log)
tanhf = f32_site(tanh)
erff = f32_site(erf)
sinf = f32_site(sin)
cosf = f32_site(cos)

FUNCTIONS = {"exp": exp, "log": log, "tanh": tanh, "erf": erf, "sin": sin, "cos": cos}
F32_FUNCTIONS = {"exp": expf, "log": logf, "tanh": tanhf, "erf": erff, "sin": sinf, "cos": cosf}
