"""The C runtime's bf16 conversions against exporter/types.py: widening every bf16
pattern, narrowing f32 (random patterns and rounding ties), and f64 -> bf16 through f32
(two roundings, which a direct rounding gets wrong on the cases below)."""

import numpy as np
import pytest

from exactc.exporter.types import BF16, bits, f32_to_bf16, round_to_site
from exactc.verify.build import load_library
from exactc.verify.compare import assert_bits_equal, first_mismatch, hexval

WRAPPER = r"""
#include "exactc_rt.h"
void widen_all(const exactc_bf16 *in, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = exactc_bf16_to_f32(in[i]);
}
void narrow_f32(const float *in, exactc_bf16 *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = exactc_f32_to_bf16(in[i]);
}
void narrow_f64(const double *in, exactc_bf16 *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = exactc_f64_to_bf16(in[i]);
}
"""
CDEF = """
typedef uint16_t exactc_bf16;
void widen_all(const exactc_bf16 *in, float *out, size_t n);
void narrow_f32(const float *in, exactc_bf16 *out, size_t n);
void narrow_f64(const double *in, exactc_bf16 *out, size_t n);
"""


@pytest.fixture(scope="module")
def conv():
    return load_library({"conversions.c": WRAPPER}, CDEF)


def _call(conv, name, array, out_dtype):
    array = np.ascontiguousarray(array)
    out = np.empty(array.shape, dtype=out_dtype)
    getattr(conv.lib, name)(conv.ffi.cast("void *", array.ctypes.data),
                            conv.ffi.cast("void *", out.ctypes.data), array.size)
    return out





def test_widening_every_bf16_pattern(conv):
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    expected = patterns.view(BF16).astype(np.float32)
    actual = _call(conv, "widen_all", patterns, np.float32)
    assert_bits_equal(expected, actual, "bf16 -> f32 widening", every_bit=True)


def _ties_f32():
    """f32 values exactly halfway between two bf16 neighbours, both parities, all binades."""
    rng = np.random.default_rng(1)
    upper = rng.integers(0, 1 << 16, 200_000, dtype=np.uint32)
    return ((upper << 16) | 0x8000).view(np.float32)


def assert_narrowed(inputs, expected, actual, what: str) -> None:
    """The one comparison (bf16: every bit), with the input at the first difference."""
    differ = first_mismatch(what, expected, actual)
    assert differ is None, f"{differ}; its input {hexval(inputs[differ.index])}"


def test_narrowing_f32_rounds_to_nearest_even(conv):
    rng = np.random.default_rng(0)
    inputs = np.concatenate([
        rng.integers(0, 1 << 32, 1_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        _ties_f32(),
        np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 3.3961776e38, 3.4028235e38],
                 dtype=np.float32),
    ])
    actual = _call(conv, "narrow_f32", inputs, np.uint16).view(BF16)
    expected = f32_to_bf16(inputs)
    assert_narrowed(inputs, expected, actual, "f32 -> bf16 (round to nearest even, canonical NaN 0x7fc0)")


def test_narrowing_f64_rounds_twice(conv):
    # 1 + 2^-8 + 2^-30 rounds to the f32 tie 1 + 2^-8, then to even (1.0): a single
    # rounding would give 1 + 2^-7. The cases below differ between one and two roundings.
    rng = np.random.default_rng(2)
    with np.errstate(invalid="ignore"):  # the ties include NaN patterns
        ties = _ties_f32().astype(np.float64)
    nudged = ties + ties * rng.choice([-1.0, 1.0], ties.size) * 2.0**-30
    inputs = np.concatenate([
        rng.integers(0, 1 << 63, 500_000, dtype=np.uint64).view(np.float64),
        nudged,
        np.array([1 + 2.0**-8 + 2.0**-30, np.nan, -np.inf, 1e300, -1e-300, 5e-324]),
    ])
    actual = _call(conv, "narrow_f64", inputs, np.uint16).view(BF16)
    expected = round_to_site(inputs, "bf16")
    assert_narrowed(inputs, expected, actual, "f64 -> bf16 (reals reach bf16 through f32: two roundings)")
    assert int(bits(actual)[-6]) == 0x3F80, "1 + 2^-8 + 2^-30 must reach bf16 as 1.0"
