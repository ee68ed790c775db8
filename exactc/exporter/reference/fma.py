"""The fused multiply-add of docs/semantics.md section 18, `fma_A(a, b, c)`: the real
a·b + c rounded once to A, nearest even. numpy has no fma (and must not reach one through
a BLAS), so it is emulated here with error-free transformations whose exactness is proved:

- f32 (and bf16, computed in f32): the product of two f32 values is exact in f64 (48 bits,
  exponents far inside f64's range). Their sum is rounded to odd in f64 (TwoSum, then the
  parity fix), and that value rounded to f32: rounding to odd with 53 >= 24 + 2 bits,
  then to nearest, is the correct rounding of the exact sum (Boldo and Melquiond,
  "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd",
  IEEE Transactions on Computers 57(4), 2008). f32 subnormals and overflow fall out of
  the final conversion: the exact sum is a multiple of 2^-298, far above f64's subnormals.
- f64: the operands are scaled to mantissas in [0.5, 1) and c by the same power of two, so
  that Dekker's product (Veltkamp's split) is exact and nothing underflows or overflows;
  then Boldo and Melquiond's emulation of the fma: TwoSum(c, uh), the low parts added with
  rounding to odd, one rounding of the high part plus that. Their proof holds for every
  rounding of that last sum, so its truncation and its sticky bit (inexact or not) are
  the exact sum's. The scale comes back exactly, except for a subnormal result, which is
  rounded once on the subnormal grid from that truncation and sticky bit.

Operands are arrays of the accumulator type (f32 or f64), all three the same dtype, and
broadcast as numpy does. Every step is one IEEE operation of numpy's elementwise
arithmetic or an exact one (frexp, ldexp within range, floor, rint); the ulp steps are
integer arithmetic on the bits.
"""

from __future__ import annotations

import numpy as np

# Veltkamp's splitter 2^27 + 1: splits a double into two halves of at most 26 bits.
SPLITTER = float.fromhex("0x1.0000002p+27")
# b' below 2^-200 (scaled units, where the product lies in [2^-2, 1)) only counts as a
# sticky bit below every rounding point of the 106-bit product: it is replaced by a proxy
# of its sign, so that no scaled value underflows.
TINY_EXPONENT = -200
TINY_PROXY = float.fromhex("0x1p-201")
# b with an exponent more than this above the product's: the product is below a quarter
# of b's ulp (below and above b), so the sum rounds to b.
DOMINANT_EXPONENT = 55
# The exponent of the smallest f64 subnormal: the grid of every result below 2^-1022.
SUBNORMAL_QUANTUM = -1074
SMALLEST_NORMAL = float.fromhex("0x1p-1022")


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a·b + c with one rounding, in the dtype of the operands (float32 or float64)."""
    a, b, c = (np.asarray(v) for v in (a, b, c))
    dtypes = {a.dtype, b.dtype, c.dtype}
    if len(dtypes) != 1 or a.dtype not in (np.float32, np.float64):
        raise TypeError(
            f"fma: operands have dtypes {a.dtype}, {b.dtype}, {c.dtype}; "
            "all three must be float32 or all three float64 (the accumulator type)"
        )
    a, b, c = np.broadcast_arrays(a, b, c)
    return fma32(a, b, c) if a.dtype == np.float32 else fma64(a, b, c)


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """f32 fma: the exact product in f64, the sum rounded to odd, then to f32."""
    with np.errstate(invalid="ignore", over="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)  # exact: 48 bits, |p| <= 2^256
        c64 = c.astype(np.float64)
        odd = add_odd(p, c64)
        # Infinities and NaN: the f64 sum of an exact product follows IEEE's rules already.
        s = np.where(np.isfinite(p) & np.isfinite(c64), odd, p + c64)
        return s.astype(np.float32)


def add_odd(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y rounded to odd in f64 (finite operands): the nearest sum, moved one ulp
    towards the exact sum when it is inexact and its last bit is even."""
    s, err = two_sum(x, y)
    bits = s.view(np.int64)
    even = (bits & 1) == 0
    # The exact sum is beyond s (further from zero) when err has s's sign: one ulp up in
    # magnitude is +1 on the sign-magnitude bits, one ulp down is -1.
    step = np.where((err > 0) == (s > 0), 1, -1)
    fixed = bits + np.where((err != 0) & even, step, 0)
    return fixed.view(np.float64)


def two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's TwoSum: s = x ⊕ y and err with s + err = x + y exactly (no overflow)."""
    s = x + y
    yy = s - x
    return s, (x - (s - yy)) + (y - yy)


def two_prod(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's product: p = x ⊗ y and err with p + err = x·y exactly, for operands whose
    split neither overflows nor whose partial products underflow (here: |x|, |y| in [0.5, 1))."""
    p = x * y
    xh, xl = split(x)
    yh, yl = split(y)
    return p, (((xh * yh - p) + xh * yl) + xl * yh) + xl * yl


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split: x = hi + lo exactly, each of at most 26 significant bits."""
    t = SPLITTER * x
    hi = t - (t - x)
    return hi, x - hi


def fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """f64 fma, by cases: special operands, a product that cannot matter, the scaled
    emulation."""
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
        nonzero = (a != 0) & (b != 0)
        ma, ea = np.frexp(np.where(finite & nonzero, a, 0.5))
        mb, eb = np.frexp(np.where(finite & nonzero, b, 0.5))
        exponent = ea.astype(np.int64) + eb  # |a·b| in [2^(exponent-2), 2^exponent)
        _, ec = np.frexp(c)
        scaled = fma_scaled(ma, mb, c, exponent, ec - exponent)
        return np.select(
            [
                ~finite | ~nonzero,  # IEEE's rules for ±∞ and NaN; an exact ±0 product
                c == 0,  # the product alone, rounded once (its sign kept on underflow)
                ec - exponent > DOMINANT_EXPONENT,
            ],
            [special(a, b, c), a * b, c],
            scaled,
        )


def special(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """An operand ±∞ or NaN, or an exact zero product: the product is a*b itself (∞·0 is
    NaN, ±0 and ±∞ are exact), and a finite product next to an infinite c gives c."""
    product = np.where(np.isfinite(a) & np.isfinite(b) & ~np.isfinite(c), 0.0, a * b)
    return product + c


def fma_scaled(ma, mb, c, exponent, gap) -> np.ndarray:
    """RN(ma·mb·2^exponent + c) for mantissas ma, mb in [0.5, 1) and c at most 2^55 times
    the product (gap is c's exponent minus the product's), computed at scale 2^-exponent."""
    cs = np.where(gap < TINY_EXPONENT, np.copysign(TINY_PROXY, c), np.ldexp(c, -exponent))
    uh, ul = two_prod(ma, mb)
    th, tl = two_sum(cs, uh)
    v = add_odd(tl, ul)
    z, err = two_sum(th, v)  # z: Boldo and Melquiond's result, at scale 2^-exponent
    truncated = toward_zero(z, err)
    # Exact: 2^(-1022-exponent) underflows only where the result is far above 2^-1022.
    below_normal = np.abs(truncated) < np.ldexp(SMALLEST_NORMAL, -exponent)
    return np.where(below_normal, round_subnormal(truncated, err != 0, exponent), np.ldexp(z, exponent))


def toward_zero(z: np.ndarray, err: np.ndarray) -> np.ndarray:
    """z + err (exact, z its nearest) rounded toward zero: z, or one ulp nearer zero."""
    inward = (err != 0) & ((err > 0) != (z > 0))
    return (z.view(np.int64) - inward).view(np.float64)


def round_subnormal(truncated: np.ndarray, sticky: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """A result below 2^-1022: the exact sum is `truncated` (scaled, toward zero) plus
    something below its last bit when `sticky`, rounded to the multiples of 2^-1074,
    nearest even. Its midpoints lie on the 53-bit grid, so only a midpoint with a sticky
    bit rounds otherwise than `truncated` does: away from zero."""
    units = np.ldexp(np.abs(truncated), exponent - SUBNORMAL_QUANTUM)  # exact: in 2^-1074
    whole = np.floor(units)
    nearest = np.rint(units)  # ties to even
    count = np.where(sticky & (units - whole == 0.5), whole + 1, nearest)
    return np.copysign(np.ldexp(count, SUBNORMAL_QUANTUM), truncated)
