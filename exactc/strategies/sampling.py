"""Strategies for sampling: logits with ties, infinities and NaN, options at the edges of
their ranges (and sometimes outside, to compare refusals), and uniforms from draws.

Logits are drawn as a LogitsSpec (a seed and a few choices) so that a failing case
prints as a few numbers, not thousands of floats.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
from hypothesis import strategies as st

from exactc.exporter.reference.sampling import SamplingOptions
from exactc.exporter.types import round_to_site
from exactc.runtime import keys_twin
from exactc.strategies.tensors import dims, site_types

DBL_MAX = sys.float_info.max

# Temperatures: greedy, tiny (every weight below the maximum underflows), ordinary, huge
# (every weight rounds to 1), the largest finite.
TEMPERATURES = (0.0, 5e-324, 1e-300, 1e-8, 0.25, 0.5, 1.0, 2.0, 1e8, 1e300, DBL_MAX)
# Top-p values: the two ends, dyadic fractions (on which a running sum of equal weights
# lands exactly), the usual 0.9 and 0.95, one ulp from each end.
TOP_PS = (0.0, 2.0**-53, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0 - 2.0**-53, 1.0)
# Values outside each option's range: the refusals must agree too.
BAD_TEMPERATURES = (-1.0, -5e-324, float("inf"), float("nan"))
BAD_TOP_PS = (-2.0**-60, 1.0 + 2.0**-52, float("nan"), float("inf"))
BAD_UNIFORMS = (1.0, -2.0**-60, float("nan"))

# Logit values placed at drawn positions: infinities, NaN, signed zeros, the largest
# finites and 3.0 (the largest of the "integers" distribution: a tie at the maximum).
LOGIT_EDGES = (float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 3.0, DBL_MAX, -DBL_MAX)


@dataclasses.dataclass(frozen=True)
class LogitsSpec:
    """How one row of logits is made: everything needed to make it again."""

    size: int
    site: str
    seed: int
    # "normal" (scale), "integers" (-3..3: many ties), "levels" (0 or -inf: weights 1 and
    # 0, whose sums are exact), "wide" (magnitudes over many binades)
    distribution: str
    scale: float = 1.0
    edges: tuple[tuple[int, float], ...] = ()  # (index mod size, value)

    def make(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        if self.distribution == "normal":
            values = rng.standard_normal(self.size) * self.scale
        elif self.distribution == "integers":
            values = rng.integers(-3, 4, self.size).astype(np.float64)
        elif self.distribution == "levels":
            values = np.where(rng.integers(0, 2, self.size) == 1, 0.0, -np.inf)
        else:
            values = rng.choice([-1.0, 1.0], self.size) * 2.0 ** rng.uniform(-40, 40, self.size)
        for index, value in self.edges:
            values[index % self.size] = value
        return round_to_site(values, self.site)


# The edges a softmax in floating point takes as they are (no NaN, no +inf, nothing whose
# quotient by a temperature overflows): the logits transformers' warpers are compared on.
WARPER_EDGES = (float("-inf"), 0.0, -0.0, 3.0)
# Temperatures whose weights neither underflow nor round to 1 wholesale (where exactc's
# limits of section 14 and a softmax's rounding part ways by design).
WARPER_TEMPERATURES = (0.25, 0.5, 0.7, 1.0, 2.0)


@st.composite
def logits_specs(draw, max_size: int = 300, edge_values: tuple[float, ...] = LOGIT_EDGES) -> LogitsSpec:
    """A row of 1..max_size logits at any site type; ties, sometimes edge values."""
    n_edges = draw(st.sampled_from([0, 0, 0, 1, 2, 5]))
    edges = tuple((draw(st.integers(0, 2**16)), draw(st.sampled_from(edge_values))) for _ in range(n_edges))
    return LogitsSpec(
        size=draw(dims(max_size)),
        site=draw(site_types()),
        seed=draw(st.integers(0, 2**32 - 1)),
        distribution=draw(st.sampled_from(["normal", "integers", "levels", "wide"])),
        scale=draw(st.sampled_from([1.0, 0.01, 30.0])),
        edges=edges,
    )


def temperatures(valid: bool = True) -> st.SearchStrategy[float]:
    """A temperature: the edge values half the time; with valid=False sometimes one that
    must be refused."""
    good = st.one_of(st.sampled_from(TEMPERATURES), st.floats(0.05, 4.0))
    return good if valid else st.one_of(good, st.sampled_from(BAD_TEMPERATURES))


def top_ks(size: int, valid: bool = True) -> st.SearchStrategy[int]:
    """A top-k for `size` logits: off (0), 1, 2, size - 1, size, size + 1, or any."""
    good = st.one_of(st.sampled_from([0, 1, 2, max(size - 1, 0), size, size + 1]), st.integers(0, size + 2))
    return good if valid else st.one_of(good, st.just(-1))


def top_ps(valid: bool = True) -> st.SearchStrategy[float]:
    """A top-p: the ends, dyadic fractions, 0.9, 0.95, one ulp inside each end, or any."""
    good = st.one_of(st.sampled_from(TOP_PS), st.floats(0.0, 1.0))
    return good if valid else st.one_of(good, st.sampled_from(BAD_TOP_PS))


def uniforms(valid: bool = True) -> st.SearchStrategy[float]:
    """A uniform as generation makes it, from a 64-bit draw (keys_twin.uniform): 0,
    the largest (1 - 2^-53), one half, or any draw."""
    draws = st.one_of(st.sampled_from([0, 2**64 - 1, 2**63]), st.integers(0, 2**64 - 1))
    good = draws.map(lambda d: float(keys_twin.uniform(d)))
    return good if valid else st.one_of(good, st.sampled_from(BAD_UNIFORMS))


@dataclasses.dataclass(frozen=True)
class SamplingCase:
    """One call of the sampler: the logits, the options and the uniform."""

    logits: LogitsSpec
    options: SamplingOptions
    u: float

    def describe(self) -> str:
        return f"SamplingCase({self.logits!r}, {self.options!r}, u={self.u!r} ({self.u.hex()}))"


@st.composite
def sampling_cases(draw, max_size: int = 300, valid: bool = False) -> SamplingCase:
    """Logits, options and a uniform; with valid=False an option is sometimes out of
    range (about one case in eight), so that the refusals are compared too."""
    logits = draw(logits_specs(max_size))
    bad = not valid and draw(st.integers(0, 7)) == 0
    options = SamplingOptions(
        temperature=draw(temperatures(valid=not bad)),
        top_k=draw(top_ks(logits.size, valid=not bad)),
        top_p=draw(top_ps(valid=not bad)),
    )
    return SamplingCase(logits, options, draw(uniforms(valid=not bad)))


@st.composite
def warper_cases(draw, max_size: int = 64) -> SamplingCase:
    """Logits and options for the comparison with transformers' logits warpers: no NaN or
    +inf logit (refused, or the limit of step 2, where a softmax gives NaN), ordinary
    temperatures and greedy, every top-k and top-p; never every logit -inf."""
    logits = draw(logits_specs(max_size, WARPER_EDGES))
    temperature = draw(st.one_of(st.just(0.0), st.sampled_from(WARPER_TEMPERATURES), st.floats(0.25, 4.0)))
    options = SamplingOptions(temperature, draw(top_ks(logits.size)), draw(top_ps()))
    return SamplingCase(logits, options, 0.0)
