"""Rounding mistakes: conversions, the runtime's transcendentals and their numpy twins,
and the bytes of the .npy writer."""

from exactc.mutants.model import Mutant

RT = "exactc/runtime/exactc_rt.h"
LIBM = "exactc/runtime/exactc_libm.c"
TWIN = "exactc/runtime/libm_twin.py"
NPY = "exactc/runtime/exactc_npy.c"
LOWER = "exactc/exporter/kernels/lower.py"

MUTANTS = [
    Mutant(
        "q4-integer-linear-compiled-with-the-vectorizer",
        "the q4 integer linear is compiled with gcc's vectorizer, whose AVX-VNNI code at -O2 "
        "sums its nibble products wrong (caught on a CPU with AVX-VNNI only)",
        LOWER,
        '    if ctx.attrs["fmt"] == "q4":\n        nest = dataclasses.replace(nest, gcc_unvectorized=NIBBLE_SUMS_WRONG)',
        '    if False:\n        nest = dataclasses.replace(nest, gcc_unvectorized=NIBBLE_SUMS_WRONG)',
        ("compilers",),
        family="rounding",
        cpu=("__AVXVNNI__|__AVX512VNNI__",),
    ),
    Mutant(
        "rotation-compiled-with-the-vectorizer",
        "rope's rotation with its pairs side by side is compiled with gcc's vectorizer, which "
        "fuses each pair into a multiply-add (vfmaddsub) under -march=native on x86-64 with FMA or "
        "AVX-512 (caught on such a machine only: elsewhere gcc emits no fused instruction)",
        LOWER,
        "                  gcc_unvectorized=ROTATION_FUSED if side_by_side else \"\")",
        "                  gcc_unvectorized=\"\")",
        ("compilers",),
        family="rounding",
    ),
    Mutant(
        "bf16-store-truncates",
        "f32 -> bf16 drops the low half instead of rounding to nearest even",
        RT,
        "u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; carries into inf */",
        "/* truncated: no rounding */",
        ("conversions", "kernels:add", "kernels:linear"),
        family="rounding",
    ),
    Mutant(
        "bf16-input-one-rounding",
        "a real reaches bf16 with one rounding (Veltkamp split of the double) instead of "
        "two (through f32)",
        RT,
        "    return exactc_f32_to_bf16((float)d);",
        "    double p = d * 35184372088833.0; /* 2^45 + 1: split off the top 8 bits */\n"
        "    double hi = p - (p - d);\n"
        "    return exactc_f32_to_bf16((float)hi);",
        ("conversions",),
        family="rounding",
    ),
    Mutant(
        "npy-f32-i32-big-endian",
        "the .npy writer stores 4-byte elements (f32, int32) most significant byte first",
        NPY,
        "            for (int b = 0; b < 4; b++) dst[b] = (unsigned char)(u >> (8 * b));",
        "            for (int b = 0; b < 4; b++) dst[3 - b] = (unsigned char)(u >> (8 * b));",
        ("npy",),
        family="rounding",
    ),
    Mutant(
        "libm-exp-coefficient-c-only",
        "one polynomial coefficient of exp mistyped in the C runtime (a digit in the "
        "middle), the numpy twin left right",
        LIBM,
        "    0x1.555555554dc4ep-3,",
        "    0x1.555555555dc4ep-3,",
        ("libm-twin", "kernels:softmax"),
        family="rounding",
    ),
    Mutant(
        "two-prod-fused-form-unfused",
        "two_prod's fused form writes its error term as a * b - p, as if the compiler would "
        "fuse it: under -ffp-contract=off it is a rounded product minus itself, 0, and every "
        "double-double product loses its low half (on a CPU with FMA, where the form is used)",
        LIBM,
        "    return dd_make(p, __builtin_fma(a, b, -p));",
        "    return dd_make(p, a * b - p);",
        ("libm-twin",),
        family="rounding",
    ),
    Mutant(
        "dd-mul-cross-terms-fused",
        "dd_mul adds its cross terms with a fused multiply-add: one rounding where the twin "
        "rounds a product and then a sum",
        LIBM,
        "    return fast_two_sum(p.hi, p.lo + (a.hi * b.lo + a.lo * b.hi));",
        "    return fast_two_sum(p.hi, p.lo + __builtin_fma(a.hi, b.lo, a.lo * b.hi));",
        ("libm-twin",),
        family="rounding",
    ),
    Mutant(
        "twin-trig-reduction-two-parts",
        "the numpy twin reduces sin/cos arguments with two parts of pi/2 instead of four",
        TWIN,
        "    s2h, s2l = _two_sum(s1h, -(nd * TRIG_PIO2_3))\n    lo = (s1l + s2l) - nd * TRIG_PIO2_4",
        "    s2h, s2l = _two_sum(s1h, 0.0 * nd)\n    lo = s1l + s2l",
        ("libm-twin", "kernels:rope"),
        family="rounding",
    ),
]
