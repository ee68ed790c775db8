"""The reference's fused multiply-add (exactc/exporter/reference/fma.py, docs/semantics.md
section 18) against two oracles nobody here wrote:

1. exact rational arithmetic: Python's fractions computes a·b + c exactly, and the
   rounding to the target format is written here from IEEE 754's definition (nearest,
   ties to even, gradual underflow, overflow to infinity), the special cases from its
   rules for infinities, NaN and the sign of zero;
2. the C library's fma and fmaf on this machine, called from a helper compiled with the
   STRICT flags, bit for bit.

Both on drawn triples (the project's tensor strategies, and drawn scalars near a
cancellation) and on adversarial families built here: exact ties at the target precision
after the product and ties missed by less than the sum's f64 precision (where rounding
twice goes wrong), massive cancellation, products beyond the largest finite value brought
back by c, subnormal results, and every triple of the edge values (signed zeros,
infinities, NaN, subnormals, the largest finites).
"""

from __future__ import annotations

import itertools
import math
import re
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exactc.exporter.reference.fma import fma
from exactc.strategies.tensors import dims, edge_values, tensor_specs
from exactc.verify.build import BuildOptions, load_library, pointer
from exactc.verify.compare import assert_bits_equal, hexval

# (precision, smallest normal exponent, largest exponent) of each format.
FORMATS = {np.float64: (53, -1022, 1023), np.float32: (24, -126, 127)}
SITES = {"f64": np.float64, "f32": np.float32}
BITS = {np.float64: np.uint64, np.float32: np.uint32}

LIBM_SOURCE = r"""
#include <math.h>
#include <stddef.h>
void fma_all(const double *a, const double *b, const double *c, double *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = fma(a[i], b[i], c[i]);
}
void fmaf_all(const float *a, const float *b, const float *c, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = fmaf(a[i], b[i], c[i]);
}
"""
LIBM_CDEF = """
void fma_all(const double *a, const double *b, const double *c, double *out, size_t n);
void fmaf_all(const float *a, const float *b, const float *c, float *out, size_t n);
"""


# ---- oracle 1: exact rational arithmetic, rounded by IEEE 754's definition --------------


def round_exact(q: Fraction, dtype) -> float:
    """The nonzero rational q rounded to the format: nearest, ties to even, on the grid
    of its binade (or the subnormal grid), infinity past the largest finite value."""
    precision, emin, emax = FORMATS[dtype]
    magnitude = abs(q)
    e = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** e > magnitude:
        e -= 1
    quantum = Fraction(2) ** (max(e, emin) - (precision - 1))
    units = magnitude / quantum
    n = math.floor(units)
    rest = units - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    value = n * quantum
    out = math.inf if value >= Fraction(2) ** (emax + 1) else float(value)
    return -out if q < 0 else out


def exact_fma(a: float, b: float, c: float, dtype) -> float:
    """IEEE 754's fusedMultiplyAdd(a, b, c), rounding to nearest even, in the format."""
    if math.isnan(a) or math.isnan(b) or math.isnan(c):
        return math.nan
    if (math.isinf(a) and b == 0) or (math.isinf(b) and a == 0):
        return math.nan  # invalid: ∞ × 0
    product_negative = (math.copysign(1, a) < 0) != (math.copysign(1, b) < 0)
    if math.isinf(a) or math.isinf(b):
        if math.isinf(c) and (c < 0) != product_negative:
            return math.nan  # invalid: ∞ - ∞
        return -math.inf if product_negative else math.inf
    if math.isinf(c):
        return c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        # An exact zero is -0 only when both addends are zeros of negative sign.
        both_negative = product_negative and math.copysign(1, c) < 0 and (a == 0 or b == 0)
        return -0.0 if both_negative else 0.0
    rounded = round_exact(exact, dtype)
    return rounded if rounded != 0 else math.copysign(0.0, float(exact.numerator))


def exact_fmas(a, b, c) -> np.ndarray:
    dtype = a.dtype.type
    out = [exact_fma(float(x), float(y), float(z), dtype) for x, y, z in zip(a, b, c)]
    return np.array(out, dtype=np.float64).astype(dtype)


# ---- oracle 2: the C library's fma and fmaf ----------------------------------------------


@pytest.fixture(scope="module")
def libm():
    return load_library({"fma_libm.c": LIBM_SOURCE}, LIBM_CDEF)


def libm_fmas(library, a, b, c) -> np.ndarray:
    a, b, c = (np.ascontiguousarray(v) for v in (a, b, c))
    out = np.empty_like(a)
    name, ctype = ("fma_all", "double") if a.dtype == np.float64 else ("fmaf_all", "float")
    getattr(library.lib, name)(*(pointer(library.ffi, v, ctype) for v in (a, b, c, out)), a.size)
    return out


def assert_fmas(expected, actual, a, b, c, oracle: str) -> None:
    """The one comparison (f64/f32 NaNs equal, all other bits), the triple in hex on failure."""
    try:
        assert_bits_equal(expected, actual, f"fma against {oracle}", every_bit=False)
    except AssertionError as failure:
        bad = np.flatnonzero(expected.view(BITS[expected.dtype.type]) != actual.view(BITS[actual.dtype.type]))
        bad = [i for i in bad if not (np.isnan(expected[i]) and np.isnan(actual[i]))]
        i = bad[0]
        raise AssertionError(f"{failure}\n  fma({hexval(a[i])}, {hexval(b[i])}, {hexval(c[i])})") from None


# ---- the runtime's software fma (exactc/runtime/exactc_fma.h) -------------------------------
# What the fused kernels run on a target without the FMA instruction: checked against the
# hardware's fma (a build for this CPU, where gcc compiles fma to vfmadd) and the C
# library's, bit for bit, on every family and on drawn triples, built by both compilers.

SOFT_SOURCE = r"""
#include "exactc_rt.h"
void fma_all(const double *a, const double *b, const double *c, double *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = exactc_soft_fma(a[i], b[i], c[i]);
}
void fmaf_all(const float *a, const float *b, const float *c, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = exactc_soft_fmaf(a[i], b[i], c[i]);
}
"""
SOFT_BUILDS = {"gcc": BuildOptions("gcc", "-O2"), "clang-native": BuildOptions("clang", "-O2", march_native=True)}


@pytest.fixture(scope="module", params=sorted(SOFT_BUILDS))
def soft(request):
    return load_library({"fma_soft.c": SOFT_SOURCE}, LIBM_CDEF, SOFT_BUILDS[request.param])


@pytest.fixture(scope="module")
def hardware():
    """C's fma built for this CPU: the FMA instruction itself (the build's assembly shows it)."""
    if "fma" not in Path("/proc/cpuinfo").read_text().split():
        pytest.skip("this CPU has no FMA instruction")
    options = BuildOptions("gcc", "-O2", march_native=True)
    library = load_library({"fma_hardware.c": LIBM_SOURCE}, LIBM_CDEF, options)
    assembly = compile_assembly(LIBM_SOURCE, options)
    assert re.search(r"\bvfmadd\w*sd\b", assembly) and re.search(r"\bvfmadd\w*ss\b", assembly)
    return library


def compile_assembly(source: str, options: BuildOptions) -> str:
    flags = [f for f in options.flags() if f not in ("-shared", "-fPIC")]
    done = subprocess.run([options.cc, *flags, "-S", "-o", "-", "-x", "c", "-"], input=source, text=True,
                          capture_output=True, check=True)
    return done.stdout


# ---- the adversarial families --------------------------------------------------------------

SIZE = 50_000  # triples per family and format against the C library
EXACT_SIZE = 2_000  # of which this many against exact arithmetic (a Python loop)


def mantissas(rng, n: int, dtype) -> np.ndarray:
    """Random significands in [1, 2) with every bit of the format drawn."""
    precision = FORMATS[dtype][0]
    return (1 + rng.integers(0, 2 ** (precision - 1), n) / 2.0 ** (precision - 1)).astype(dtype)


def signs(rng, n: int) -> np.ndarray:
    return rng.choice([-1.0, 1.0], n)


def scaled(rng, n, dtype, low: int, high: int) -> np.ndarray:
    """Random values with exponents in [low, high], both signs, rounded to the format."""
    values = signs(rng, n) * mantissas(rng, n, dtype).astype(np.float64) * np.ldexp(1.0, rng.integers(low, high + 1, n))
    with np.errstate(over="ignore", under="ignore"):
        return values.astype(dtype)


def ties(rng, n: int, dtype):
    """c, and a product of ±half c's ulp times (1 - i²·2^-2(p-1)): for i = 0 an exact tie
    at the format's precision, else a tie missed by less than f64 resolves, which the
    f64 sum rounded to nearest turns into a tie (and ties to even goes the wrong way half
    the time); a product of either sign lands on both sides of a tie."""
    precision = FORMATS[dtype][0]
    c = scaled(rng, n, dtype, -60, 60)
    half = (np.spacing(np.abs(c)) / 2).astype(dtype)
    i = np.where(rng.random(n) < 0.2, 0, rng.integers(1, 2 ** (precision // 2 - 2), n)).astype(np.float64)
    shift = np.ldexp(1.0, rng.integers(-8, 9, n))
    a = (signs(rng, n) * half.astype(np.float64) * (1 + i * 2.0 ** (1 - precision)) * shift).astype(dtype)
    b = ((1 - i * 2.0 ** (1 - precision)) / shift).astype(dtype)
    return a, b, c


def cancellations(rng, n: int, dtype):
    """c the negated product rounded to the format, give or take two ulps: the result is
    the product's rounding error (plus those ulps), everything else cancels."""
    low, high = (-500, 500) if dtype == np.float64 else (-60, 60)
    a, b = scaled(rng, n, dtype, low, high), scaled(rng, n, dtype, low, high)
    with np.errstate(over="ignore", under="ignore"):
        product = -(a * b)
        c = product + rng.integers(-2, 3, n).astype(dtype) * np.spacing(np.abs(product)).astype(dtype)
    return a, b, c.astype(dtype)


def overflows(rng, n: int, dtype):
    """Products past the largest finite value (up to 4 times it), c near minus that value
    or smaller: some come back below it, some stay infinite."""
    emax = FORMATS[dtype][2]
    half = emax // 2 + 1
    a = np.abs(scaled(rng, n, dtype, half - 1, half))
    b = np.abs(scaled(rng, n, dtype, half - 1, half))
    largest = np.finfo(dtype).max
    c = -(largest * rng.choice([1.0, 0.75, 0.5, 2.0**-30], n)).astype(dtype)
    flip = signs(rng, n).astype(dtype)
    return a * flip, b, c * flip


def subnormals(rng, n: int, dtype):
    """Products around the subnormal range and c subnormal or tiny: results rounded on the
    subnormal grid, or underflowing to a signed zero; half with c the negated product, so
    that only the product's rounding error (below the grid) is left."""
    precision, emin, _ = FORMATS[dtype]
    bottom = emin - precision + 1
    a = scaled(rng, n, dtype, emin // 2 - 30, emin // 2 + 10)
    b = scaled(rng, n, dtype, emin // 2 - 30, emin // 2 + 10)
    c = scaled(rng, n, dtype, bottom, emin + 2)
    with np.errstate(under="ignore"):
        c = np.where(rng.random(n) < 0.5, c, -(a * b)).astype(dtype)
    return a, b, c


def sticky(rng, n: int, dtype):
    """Products exactly halfway between two neighbours of the format (a = 1 + odd·2^(1-p),
    b = 1.5, both scaled) and c far below the product's ulp, down to the smallest
    subnormal, of either sign: c alone decides which way the tie goes."""
    precision = FORMATS[dtype][0]
    bottom = FORMATS[dtype][1] - precision + 1
    odd = 2 * rng.integers(0, 2 ** (precision - 4), n) + 1
    shift = rng.integers(-(precision + 20), precision + 21, n)
    a = (signs(rng, n) * np.ldexp(1 + odd * 2.0 ** (1 - precision), shift)).astype(dtype)
    b = np.ldexp(1.5, rng.integers(-20, 21, n) - shift).astype(dtype)
    exponent = np.frexp(a.astype(np.float64) * b)[1]
    below = np.maximum(exponent - rng.integers(precision + 3, 60 - bottom, n), bottom)
    c = (signs(rng, n) * mantissas(rng, n, dtype).astype(np.float64) * np.ldexp(1.0, below)).astype(dtype)
    return a, b, c


def wide(rng, n: int, dtype):
    """Any two operands, c the product scaled by up to ±(p + 10) binades: every overlap of
    the product's bits and c's."""
    precision = FORMATS[dtype][0]
    low, high = (-1000, 1000) if dtype == np.float64 else (-120, 120)
    a = scaled(rng, n, dtype, low // 2, high // 2)
    b = scaled(rng, n, dtype, low // 2, high // 2)
    with np.errstate(over="ignore", under="ignore"):
        shift = np.ldexp(1.0, rng.integers(-precision - 10, precision + 11, n))
        c = (signs(rng, n) * a.astype(np.float64) * b.astype(np.float64) * shift).astype(dtype)
        c = c * mantissas(rng, n, dtype)
    return a, b, c


def edges(dtype):
    """Every triple of the edge values: signed zeros, ±∞, NaN, ±1, the largest finites,
    the smallest normal and subnormal, rounding ties one format down."""
    site = "f64" if dtype == np.float64 else "f32"
    values = np.array(edge_values(site), dtype=dtype)
    triples = np.array(list(itertools.product(range(values.size), repeat=3)))
    return tuple(values[triples[:, k]] for k in range(3))


FAMILIES = {
    "ties": ties,
    "sticky": sticky,
    "cancellations": cancellations,
    "overflows": overflows,
    "subnormals": subnormals,
    "wide": wide,
}


def family(name: str, dtype, n: int = SIZE):
    if name == "edges":
        return edges(dtype)
    rng = np.random.default_rng([sorted(FAMILIES).index(name), FORMATS[dtype][0]])
    return FAMILIES[name](rng, n, dtype)


# ---- the tests -----------------------------------------------------------------------------

ALL = [*FAMILIES, "edges"]


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("name", ALL)
def test_fma_equals_exact_rational_arithmetic(name, site):
    limit = None if name == "edges" else EXACT_SIZE  # every edge triple
    a, b, c = (v[:limit] for v in family(name, SITES[site]))
    assert_fmas(exact_fmas(a, b, c), fma(a, b, c), a, b, c, "exact rational arithmetic")


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("name", ALL)
def test_fma_equals_the_c_librarys_fma(libm, name, site):
    a, b, c = family(name, SITES[site])
    assert_fmas(libm_fmas(libm, a, b, c), fma(a, b, c), a, b, c, "the C library's fma")


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("name", ALL)
def test_software_fma_equals_the_hardware_fma_and_the_c_librarys(soft, hardware, libm, name, site):
    a, b, c = family(name, SITES[site])
    actual = libm_fmas(soft, a, b, c)
    assert_fmas(libm_fmas(hardware, a, b, c), actual, a, b, c, "the hardware fma")
    assert_fmas(libm_fmas(libm, a, b, c), actual, a, b, c, "the C library's fma")


@given(site=st.sampled_from(sorted(SITES)), data=st.data(), n=dims(256))
def test_software_fma_on_drawn_tensors_equals_the_hardware_fma(soft, hardware, site, data, n):
    a, b, c = (data.draw(tensor_specs((n,), site)).make() for _ in range(3))
    assert_fmas(libm_fmas(hardware, a, b, c), libm_fmas(soft, a, b, c), a, b, c, "the hardware fma")


def test_the_families_reach_the_cases_they_are_named_after():
    """Each family holds what it promises: ties the nearest f64 sum makes exact, ties of
    the product that c decides, results below the smallest normal, products past the
    largest finite value brought back."""
    for dtype in (np.float32, np.float64):
        a, b, c = family("ties", dtype)
        with np.errstate(under="ignore"):
            twice = (a.astype(np.float64) * b + c).astype(dtype) if dtype == np.float32 else a * b + c
        assert np.count_nonzero(twice != fma(a, b, c)) > SIZE // 10
        a, b, c = family("sticky", dtype)
        product = (a.astype(np.float64) * b).astype(dtype) if dtype == np.float32 else a * b
        assert np.count_nonzero(product != fma(a, b, c)) > SIZE // 4
        tiny = np.abs(fma(*family("subnormals", dtype)))
        assert np.count_nonzero((tiny > 0) & (tiny < np.finfo(dtype).tiny)) > SIZE // 10
        a, b, c = family("overflows", dtype)
        with np.errstate(over="ignore"):
            back = np.isinf(a.astype(np.float64) * b if dtype == np.float32 else a * b) & np.isfinite(fma(a, b, c))
        if dtype == np.float64:
            assert np.count_nonzero(back) > SIZE // 10
        else:  # f64 holds every f32 product: past f32's largest value, brought back in f32
            assert (
                np.count_nonzero((np.abs(a.astype(np.float64) * b) > np.finfo(dtype).max) & np.isfinite(fma(a, b, c)))
                > SIZE // 10
            )


@given(site=st.sampled_from(sorted(SITES)), data=st.data(), n=dims(256))
def test_fma_on_drawn_tensors_equals_both_oracles(libm, site, data, n):
    a, b, c = (data.draw(tensor_specs((n,), site)).make() for _ in range(3))
    actual = fma(a, b, c)
    assert_fmas(exact_fmas(a, b, c), actual, a, b, c, "exact rational arithmetic")
    assert_fmas(libm_fmas(libm, a, b, c), actual, a, b, c, "the C library's fma")


@given(
    site=st.sampled_from(sorted(SITES)),
    a=st.floats(),
    b=st.floats(),
    ulps=st.integers(-3, 3),
    scale=st.integers(-60, 60),
)
@example(site="f64", a=1.0 + 2.0**-52, b=1.0 - 2.0**-52, ulps=0, scale=0)  # the product's error alone
# c = -1 - 2^-23 and a·b = 2^-24 - 2^-70: the tie 1 + 2^-24 missed by 2^-70, below f64's resolution
@example(site="f32", a=2.0**-24 * (1 + 2.0**-23), b=1.0 - 2.0**-23, ulps=-1, scale=24)
@example(site="f64", a=2.0**600, b=2.0**500, ulps=0, scale=0)  # a product past DBL_MAX, cancelled
def test_fma_near_a_cancellation_equals_both_oracles(libm, site, a, b, ulps, scale):
    """Drawn a and b, and c a power-of-two multiple of their negated product, moved by a
    few ulps: scale 0 cancels, others overlap the product's bits with c's."""
    dtype = SITES[site]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        x, y = np.array([a], dtype=dtype), np.array([b], dtype=dtype)
        product = -(x.astype(np.float64) * y)
        c = np.ldexp(product, scale).astype(dtype)
        c = c + dtype(ulps) * np.spacing(np.abs(c)).astype(dtype)
    actual = fma(x, y, c)
    assert_fmas(exact_fmas(x, y, c), actual, x, y, c, "exact rational arithmetic")
    assert_fmas(libm_fmas(libm, x, y, c), actual, x, y, c, "the C library's fma")


def test_fma_broadcasts_and_keeps_the_accumulator_type():
    out = fma(np.float32([1.5, 2.0]), np.float32(2.0), np.float32([0.25]))
    assert out.dtype == np.float32 and out.tolist() == [3.25, 4.25]


@pytest.mark.parametrize(
    "operands",
    [
        (np.float32(1), np.float64(1), np.float32(1)),
        (np.float16(1), np.float16(1), np.float16(1)),
        (np.int32(1), np.int32(1), np.int32(1)),
    ],
)
def test_fma_refuses_mixed_or_other_dtypes_in_one_line(operands):
    with pytest.raises(
        TypeError,
        match=r"^fma: operands have dtypes .* all three must be float32 or all three "
        r"float64 \(the accumulator type\)$",
    ):
        fma(*operands)
