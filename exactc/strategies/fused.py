"""Operands of a fused product (docs/semantics.md section 18) whose steps are the triples
where an fma is hardest to get right, inside a whole linear or matmul kernel.

A product's step k is `acc = fma_A(x[m,k], w[n,k], acc)`: the third operand is the running
sum, so an adversarial triple must be built against it. The two operands are built
together, step by step, following every column's running sum with the reference's fma:

- a **tie**: the product is half an ulp of acc (the step towards zero is half as big at a
  power of two), exactly, or just off it by a part of order 2^-2p that only a correct
  rounding sees (rounding the exact sum to f64 first lands on the tie; dropping the low
  part of an f64 product does too);
- a **cancellation**: the product is -acc rounded to the site, so the sum keeps only what
  the roundings left, or is exactly zero (the sign rules of zeros);
- an **overflow that comes back**: acc brought near the largest finite value, then a
  product past it of the other sign, whose sum is finite again;
- a **subnormal tie**: acc brought near the smallest normal, then ties on the
  subnormals' grid;
- resets (acc brought back to zero with its own negation) and plain random steps.

The left operand holds one row per step (`x_k`), shared by every output row up to a
sign and a power of two (which scale every running sum exactly, range allowed); the
right operand holds one value per output column and step, so every column of every row
meets the designed triples. Every draw comes from streams of STEPS values per column, so
the first k steps and the first n columns do not depend on K or N: a kernel's operands
of other lengths (a sibling at a run-time length, a cache's longer capacity) are
prefixes of the same design.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

from exactc.exporter import types
from exactc.exporter.reference.fma import fma

STEPS = 1024  # the longest reduction a design serves (kernel cases stay far below)

# Step programs: a few steps that set acc up and then meet the triple they name.
PROGRAMS = (
    ("tie",),
    ("near_tie",),
    ("cancel",),
    ("random",),
    ("reset", "set", "tie"),
    ("reset", "set", "near_tie", "cancel"),
    ("reset", "set_large", "overflow", "tie"),
    ("reset", "set_small", "tie", "near_tie"),
)
# Magnitudes of the shared factor of a tie or a cancellation, per accumulator type: one
# (the exact tie), 1 + 2^(1-p) (a product of 2p bits, just off the tie), 3, 1 - 2^-p.
SHAPES = {
    np.float32: (1.0, 1.0 + 2.0**-23, 3.0, 1.0 - 2.0**-24, 1.0 + 2.0**-7),
    np.float64: (1.0, 1.0 + 2.0**-52, 3.0, 1.0 - 2.0**-53, 1.0 + 2.0**-7),
}
LARGEST = {
    "f64": float(np.finfo(np.float64).max),
    "f32": float(np.finfo(np.float32).max),
    "bf16": 3.3895313892515355e38,
}
# Half the exponent of the largest finite value: the power of two each operand of an
# overflowing product carries.
HALF_EXPONENT = {np.float64: 512, np.float32: 64}
ROW_EXPONENTS = (0, 0, 0, 0, -1, -2)  # a row's copy of x_k: at most row 0's size, so no new overflow


def design(site: str, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The designed x_k (k,) and w (n, k), site values in the accumulator type."""
    if k > STEPS:
        raise ValueError(f"a fused design serves reductions of at most {STEPS} steps, not {k}")
    acc_type = types.acc_dtype(site).type
    rng = np.random.default_rng(seed)
    kinds = _kinds(rng)
    shared = rng.random((STEPS, 3))  # per step: the shape, the exponent, a sign
    column = rng.random((max(n, 1), 3, STEPS))  # per column and step; prefix-stable in n and k
    x = np.empty(k, dtype=acc_type)
    w = np.empty((n, k), dtype=acc_type)
    acc = np.zeros(n, dtype=acc_type)
    with np.errstate(all="ignore"):
        for step in range(k):
            x[step], w[:, step] = _step(kinds[step], acc, shared[step], column[:n, :, step], site, acc_type)
            acc = fma(np.full(n, x[step]), w[:, step], acc)
    return x, w


def _kinds(rng: np.random.Generator) -> list[str]:
    picks = rng.integers(0, len(PROGRAMS), STEPS)
    kinds: list[str] = []
    for pick in picks:
        kinds += PROGRAMS[pick]
        if len(kinds) >= STEPS:
            break
    return kinds[:STEPS]


def _step(kind: str, acc: np.ndarray, shared: np.ndarray, column: np.ndarray, site: str, acc_type):
    """One step's shared x and its column of w, against the running sums `acc`."""
    finite = np.isfinite(acc)
    sign = np.where(column[:, 0] < 0.5, -1.0, 1.0)
    if kind == "reset":
        return acc_type(1.0), _site(np.where(finite, -acc, 0.0), site, acc_type)
    if kind in ("set", "set_large", "set_small"):
        target = _target(kind, sign, column[:, 1], site, acc_type)
        return acc_type(1.0), _site(np.where(finite, target - acc.astype(np.float64), 0.0), site, acc_type)
    if kind == "random":
        x = _site(np.float64(shared[0] * 4 - 2), site, acc_type)
        # Of acc's size, but never so large that this step overflows (|x| <= 2).
        size = np.abs(np.where(finite, acc, 0).astype(np.float64))
        scale = np.where(size != 0, np.minimum(size, (LARGEST[site] - size) / 4), 1.0)
        return x, _site(sign * column[:, 1] * scale, site, acc_type)
    if kind == "overflow":
        return _overflow(acc, column[:, 1], site, acc_type)
    # tie, near_tie, cancel: the product x * w is a target per column.
    shapes = SHAPES[acc_type]
    shape = shapes[0] if kind == "tie" else shapes[1 + int(shared[0] * (len(shapes) - 1))]
    if kind == "cancel":
        product = np.where(finite, -acc.astype(np.float64), 0.0)
    else:
        product = _half_ulp(acc, sign, acc_type) * sign
    # A power of two on x keeps w in range where the product is far from 1 (a subnormal
    # half ulp is below the site's smallest value): the first column's exponent, halved.
    exponent = _exponent(product[0]) // 2 if product.size and abs(_exponent(product[0])) > 60 else 0
    x = _site(np.float64(shape * (1.0 if shared[2] < 0.5 else -1.0)) * 2.0**exponent, site, acc_type)
    w = _site(product / np.float64(x), site, acc_type)
    # x's power of two fits the first column: where it takes another's w out of range,
    # that column's step adds a zero product instead.
    return x, np.where(np.isfinite(w), w, acc_type(0))


def _target(kind: str, sign: np.ndarray, fraction: np.ndarray, site: str, acc_type) -> np.ndarray:
    """Where a set step brings acc: near the largest finite value, near the smallest
    normal, or a value of a few binades around one."""
    if kind == "set_large":
        return sign * LARGEST[site] * (1.0 - fraction / 4)
    tiny = float(np.finfo(acc_type).tiny)
    if kind == "set_small":
        return sign * tiny * (0.25 + 2 * fraction)
    return sign * 2.0 ** (fraction * 16 - 8)


def _overflow(acc: np.ndarray, fraction: np.ndarray, site: str, acc_type):
    """A product past the largest finite value, of the sign opposite to acc, with |acc|
    + a part of the largest value: alone it overflows, with acc it comes back."""
    half = HALF_EXPONENT[acc_type]
    x = acc_type(2.0**half)
    # Scaled before the sum: |acc| + a part of the largest f64 overflows f64 itself.
    magnitude = np.abs(acc.astype(np.float64)) / 2.0**half + fraction * (LARGEST[site] / 2.0**half)
    w = -np.sign(acc.astype(np.float64)) * magnitude
    return x, _site(np.where(np.isfinite(acc), w, 0.0), site, acc_type)


def _half_ulp(acc: np.ndarray, sign: np.ndarray, acc_type) -> np.ndarray:
    """Half the gap from acc to its neighbour in the direction of `sign` (f64 values)."""
    magnitude = np.abs(np.where(np.isfinite(acc), acc, 0)).astype(acc_type)
    outward = (sign > 0) == (np.signbit(acc) == 0)
    neighbour = np.where(outward, np.nextafter(magnitude, acc_type(np.inf)), np.nextafter(magnitude, acc_type(0)))
    gap = np.abs(neighbour.astype(np.float64) - magnitude.astype(np.float64))
    gap = np.where(gap == 0, float(np.nextafter(acc_type(0), acc_type(1))), gap)  # acc is zero
    return gap / 2


def _exponent(value: float) -> int:
    return int(np.frexp(value)[1]) if value != 0 and np.isfinite(value) else 0


def _site(values, site: str, acc_type) -> np.ndarray:
    """Values rounded to the site, in the accumulator type (exact)."""
    with np.errstate(all="ignore"):
        return np.asarray(types.round_to_site(values, site)).astype(acc_type)


@dataclasses.dataclass(frozen=True)
class FusedOperandSpec:
    """One operand of a designed fused product, made again from its seed.

    `role` "x": the left operand, each batch's rows copies of x_k (sign and a power of
    two drawn per row); "w": the right, each batch's columns the designed w. `axis` is
    the reduction axis of `shape`; a 3-d shape's first axis is the batch, and a left batch
    i reads the design of right batch i // group (grouped attention)."""

    shape: tuple[int, ...]
    site: str
    seed: int
    role: str
    axis: int
    group: int = 1

    def make(self) -> np.ndarray:
        batched = len(self.shape) == 3
        shape = self.shape if batched else (1, *self.shape)
        axis = self.axis + (0 if batched else 1)
        other = 3 - axis  # the axis of rows (x) or columns (w)
        k, count = shape[axis], shape[other]
        out = np.empty((shape[0], count, k), dtype=types.acc_dtype(self.site))
        rng = np.random.default_rng(self.seed ^ 0x5EED)
        signs = rng.choice([-1.0, 1.0], size=(shape[0], STEPS))[:, :count]
        exponents = rng.choice(ROW_EXPONENTS, size=(shape[0], STEPS))[:, :count]
        signs[:, 0], exponents[:, 0] = 1.0, 0  # the first row meets the design as built
        for batch in range(shape[0]):
            design_seed = (self.seed + (batch // self.group) * 0x9E3779B1) % 2**32
            if self.role == "w":
                out[batch] = design(self.site, count, k, design_seed)[1]
            else:
                x = design(self.site, 1, k, design_seed)[0]
                out[batch] = (signs[batch] * 2.0 ** exponents[batch])[:, None] * x[None, :]
        laid = out if other == 1 else out.transpose(0, 2, 1)
        values = types.round_to_site(laid if batched else laid[0], self.site)
        return np.ascontiguousarray(values)


@st.composite
def designed_operands(draw, case):
    """The case (a linear or matmul) with its two product operands replaced by a design
    of one drawn seed; its other operands (a bias) as drawn."""
    specs = dict(case.specs)
    seed = draw(st.integers(0, 2**32 - 1))
    attrs = case.attr_dict
    if case.primitive == "linear":
        specs["x"] = FusedOperandSpec(specs["x"].shape, case.site, seed, "x", axis=1)
        specs["w"] = FusedOperandSpec(specs["w"].shape, case.site, seed, "w", axis=1)
    else:
        a_axis = 1 if attrs["trans_a"] else 2
        b_axis = 2 if attrs["trans_b"] else 1
        specs["a"] = FusedOperandSpec(specs["a"].shape, case.site, seed, "x", axis=a_axis, group=attrs["group"])
        specs["b"] = FusedOperandSpec(specs["b"].shape, case.site, seed, "w", axis=b_axis)
    return dataclasses.replace(case, specs=tuple(specs.items()))
