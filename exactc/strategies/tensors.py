"""Strategies for site types, dimensions and tensors with edge values.

Tensors are drawn as a seed and a few distribution choices, then filled by numpy: a
failing case shrinks to a small seed, a small shape and few edge values, and its
reproduction is the strategy's arguments, not thousands of floats.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

from exactc.exporter.types import SITE_TYPES, round_to_site

# Dimensions the harness favours: 1, odd, primes, powers of two and their neighbours.
FAVOURED_DIMS = (1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 32, 33, 64, 97, 127, 128, 211, 256, 307)


def site_types() -> st.SearchStrategy[str]:
    """f64, f32 or bf16; shrinks towards f64."""
    return st.sampled_from(SITE_TYPES)


def dims(max_dim: int = 64) -> st.SearchStrategy[int]:
    """A dimension in [1, max_dim]: favoured sizes half the time; shrinks towards 1."""
    favoured = [d for d in FAVOURED_DIMS if d <= max_dim]
    return st.one_of(st.sampled_from(favoured), st.integers(1, max_dim))


def edge_values(site: str) -> list[float]:
    """The values where rounding and IEEE rules are most likely to go wrong at `site`."""
    info = {
        "f64": (np.finfo(np.float64).max, np.finfo(np.float64).tiny, 2.0**-1074),
        "f32": (float(np.finfo(np.float32).max), 2.0**-126, 2.0**-149),
        "bf16": (3.3895313892515355e38, 2.0**-126, 2.0**-133),
    }[site]
    largest, tiny, smallest_subnormal = info
    values = [
        0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0,
        largest, -largest, tiny, -tiny, smallest_subnormal, -smallest_subnormal,
        tiny - smallest_subnormal,  # the largest subnormal
    ]
    # Values on a rounding tie one format down (exact at this site): an f32 value halfway
    # between two bf16 neighbours, even and odd below; an f64 value halfway between f32s.
    if site in ("f64", "f32"):
        values += [1.0 + 2.0**-8, 1.0 + 2.0**-7 + 2.0**-8, -(3.0 + 2.0**-7)]
    if site == "f64":
        values += [1.0 + 2.0**-24, 1.0 + 2.0**-23 + 2.0**-24]
    return values


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """How a tensor is filled: everything needed to make it again, and small to print."""

    shape: tuple[int, ...]
    site: str
    seed: int
    distribution: str  # "normal", "uniform", "integers", "wide"
    scale: float
    edges: tuple[tuple[int, float], ...] = ()  # (flat index mod size, value)

    def make(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        size = int(np.prod(self.shape, dtype=np.int64))
        if self.distribution == "normal":
            values = rng.standard_normal(size) * self.scale
        elif self.distribution == "uniform":
            values = rng.uniform(-self.scale, self.scale, size)
        elif self.distribution == "integers":
            values = rng.integers(-3, 4, size).astype(np.float64)
        else:  # "wide": magnitudes over many binades, both signs
            values = rng.choice([-1.0, 1.0], size) * 2.0 ** rng.uniform(-40, 40, size)
        for index, value in self.edges:
            values[index % size] = value
        return round_to_site(values.reshape(self.shape), self.site)


@st.composite
def tensor_specs(draw, shape, site: str, *, edges: bool = True, scales=(1.0, 0.01, 30.0)):
    """A TensorSpec of `shape` at `site`: normal, uniform, small integers (ties, exact
    sums) or wide magnitudes, with up to a few edge values (signed zeros, subnormals,
    infinities, NaN, the largest finites, rounding ties) at drawn positions."""
    distribution = draw(st.sampled_from(["normal", "uniform", "integers", "wide"]))
    scale = draw(st.sampled_from(scales))
    n_edges = draw(st.sampled_from([0, 0, 0, 1, 2, 4])) if edges else 0
    chosen = tuple(
        (draw(st.integers(0, 2**20)), draw(st.sampled_from(edge_values(site))))
        for _ in range(n_edges)
    )
    seed = draw(st.integers(0, 2**32 - 1))
    return TensorSpec(tuple(shape), site, seed, distribution, scale, chosen)


@dataclasses.dataclass(frozen=True)
class IntSpec:
    """An int32 tensor: ids in [lo, hi) with a few drawn outliers, or a keep mask."""

    shape: tuple[int, ...]
    seed: int
    lo: int
    hi: int
    outliers: tuple[tuple[int, int], ...] = ()

    def make(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        size = int(np.prod(self.shape, dtype=np.int64))
        values = rng.integers(self.lo, self.hi, size, dtype=np.int64)
        for index, value in self.outliers:
            values[index % size] = value
        return values.astype(np.int32).reshape(self.shape)


@st.composite
def id_specs(draw, length: int, vocab: int):
    """Token ids in [0, vocab), sometimes with ids outside it (negative, vocab, huge)."""
    n_out = draw(st.sampled_from([0, 0, 0, 1, 2]))
    outliers = tuple(
        (draw(st.integers(0, 2**16)), draw(st.sampled_from([-1, vocab, vocab + 7, -(2**31), 2**31 - 1])))
        for _ in range(n_out)
    )
    return IntSpec((length,), draw(st.integers(0, 2**32 - 1)), 0, vocab, outliers)


@st.composite
def keep_specs(draw, length: int):
    """A keep mask: mostly 0/1 (all kept, a padded tail, random, none kept), and
    sometimes other non-zero values, which also keep."""
    kind = draw(st.sampled_from(["all", "tail", "random", "none", "nonbinary"]))
    seed = draw(st.integers(0, 2**32 - 1))
    if kind == "all":
        return IntSpec((length,), seed, 1, 2)
    if kind == "none":
        return IntSpec((length,), seed, 0, 1)
    if kind == "tail":
        cut = draw(st.integers(0, length))
        return IntSpec((length,), seed, 1, 2, tuple((i, 0) for i in range(cut, length)))
    if kind == "random":
        return IntSpec((length,), seed, 0, 2)
    return IntSpec((length,), seed, -2, 3)
