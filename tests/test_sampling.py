"""Sampling (docs/semantics.md section 14): the C runtime's sampler and the numpy reference
give the same token, the same probability bits and the same refusals.

Two kinds of checks. The spec's own examples, worked by hand from the text (greedy's
first index, infinities, tiny and huge temperatures, top-k of 1 and V, top-p of 0 and 1
and on its boundary, the draw's strict `>`, the refusals), each run on both
implementations. And C against the reference over Hypothesis-drawn logits (ties,
infinities, NaN, every site type) and options (edges of every range, and outside them).
"""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exactc.exporter.reference.sampling import RULES, SamplingError, SamplingOptions, sample
from exactc.runtime import RUNTIME_DIR, libm_twin
from exactc.strategies.sampling import LogitsSpec, SamplingCase, sampling_cases
from exactc.verify.build import EXTREME_BUILDS, build_label
from exactc.verify.kernels import record_checks
from exactc.verify.sampling import compare_cases, load_sampler

from installed import need  # tests/installed.py

# Cases per example: many more in the campaign (make verify).
CAMPAIGN = os.environ.get("HYPOTHESIS_PROFILE") == "campaign"
BATCH = 32 if CAMPAIGN else 16
MIN_BATCH = BATCH // 2 if CAMPAIGN else 1
INF = float("inf")


@pytest.fixture(scope="module")
def sampler():
    return load_sampler()


@pytest.fixture(scope="module", params=["c", "reference"])
def draw_token(request, sampler):
    """Either implementation, as sample(logits, options, u) -> (token, probability)."""
    return sampler.sample if request.param == "c" else sample


def f64(*values) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def options(temperature=1.0, top_k=0, top_p=1.0) -> SamplingOptions:
    return SamplingOptions(temperature=temperature, top_k=top_k, top_p=top_p)


def exp(x: float) -> float:
    """exactc's exp, the spec's `exp`."""
    return float(libm_twin.exp(f64(x))[0])


# ------------------------------------------------------------------------------------
# The spec's examples, on both implementations
# ------------------------------------------------------------------------------------
def test_spec_greedy_takes_the_first_index_of_the_maximum(draw_token):
    assert draw_token(f64(1, 3, 3, 2), options(0.0), 0.9) == (1, 1.0)
    assert draw_token(f64(-0.0, 0.0), options(0.0), 0.0) == (0, 1.0)  # -0 == +0: the earlier
    # Top-k, top-p and u play no part in greedy.
    assert draw_token(f64(1, 3, 3, 2), options(0.0, top_k=1, top_p=0.0), 0.0) == (1, 1.0)


def test_spec_plus_infinities_share_the_draw(draw_token):
    logits = f64(0, INF, 5, INF)
    assert draw_token(logits, options(0.0), 0.5) == (1, 1.0)
    assert draw_token(logits, options(), 0.0) == (1, 0.5)
    assert draw_token(logits, options(), 0.5) == (3, 0.5)  # c_1 = 1 is not > 0.5 * 2
    assert draw_token(logits, options(7.0, top_k=1), 0.9) == (1, 1.0)


def test_spec_the_draw_needs_a_running_sum_strictly_above(draw_token):
    # weights 1, 1: u * total = 1 exactly at u = 0.5, and c_0 = 1 is not above it
    assert draw_token(f64(0, 0), options(), 0.5) == (1, 0.5)
    assert draw_token(f64(0, 0), options(), 0.5 - 2.0**-54) == (0, 0.5)


def test_spec_weights_of_zero_are_never_drawn(draw_token):
    largest_u = 1.0 - 2.0**-53
    assert draw_token(f64(0, -INF, 0, -INF), options(), largest_u) == (2, 0.5)
    assert draw_token(f64(-INF, 0, -INF), options(), 0.0) == (1, 1.0)


def test_spec_temperature_divides_the_logits_before_exp(draw_token):
    e1 = exp((-1.0 - 0.0) / 0.5)
    total = 1.0 + e1
    assert draw_token(f64(0, -1), options(0.5), 0.0) == (0, 1.0 / total)
    assert draw_token(f64(0, -1), options(0.5), 1.0 - 2.0**-53) == (1, e1 / total)
    e1 = exp(-1.0 / 3.0)
    assert draw_token(f64(0, -1), options(3.0), 0.0) == (0, 1.0 / (1.0 + e1))


def test_spec_tiny_temperature_shares_the_draw_among_tied_maxima(draw_token):
    logits = f64(2, 5, 5, 1)
    for t in (5e-324, 1e-300):
        assert draw_token(logits, options(t), 0.0) == (1, 0.5)
        assert draw_token(logits, options(t), 0.75) == (2, 0.5)


def test_spec_huge_temperature_is_uniform(draw_token):
    logits = f64(1, 2, 3)
    for t in (1e300, 1.7976931348623157e308):
        assert draw_token(logits, options(t), 0.5) == (1, 1.0 / 3.0)
    # weights all round to 1: top-k of 1 keeps index 0, the first of the equally probable
    assert draw_token(logits, options(1e300, top_k=1), 0.5) == (0, 1.0)


def test_spec_top_k(draw_token):
    logits = f64(1, 3, 2, 3)
    assert draw_token(logits, options(top_k=1), 0.99) == (1, 1.0)  # ties by index
    # K = 2 keeps both 3s: the draw is over indices 1 and 3
    e = exp(0.0)
    assert draw_token(logits, options(top_k=2), 0.0) == (1, e / (e + e))
    assert draw_token(logits, options(top_k=2), 0.5) == (3, 0.5)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(50)
    for u in (0.0, 0.3, 0.999):
        off = draw_token(x, options(0.7), u)
        assert draw_token(x, options(0.7, top_k=50), u) == off  # K = V is no top-k
        assert draw_token(x, options(0.7, top_k=51), u) == off


def test_spec_top_p_ends(draw_token):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(40)
    best = int(np.argmax(x))
    for u in (0.0, 0.5, 0.999):
        assert draw_token(x, options(1.3, top_p=0.0), u) == (best, 1.0)
        assert draw_token(x, options(1.3, top_p=1.0), u) == draw_token(x, options(1.3), u)


def test_spec_top_p_stops_where_the_kept_sum_reaches_p_times_s(draw_token):
    # weights 1, 1, 0, 1, 1: S = 4, P S = 2. q_0 = 1 < 2 keeps r_1; q_1 = 2 is not < 2.
    logits = f64(0, 0, -INF, 0, 0)
    assert draw_token(logits, options(top_p=0.5), 0.75) == (1, 0.5)
    # just above one half, the third weight is kept too
    assert draw_token(logits, options(top_p=0.5 + 2.0**-53), 0.75) == (3, 1.0 / 3.0)


REFUSALS = [
    (f64(), options(), 0.5, "size"),
    (f64(1, 2), options(-1.0), 0.5, "temperature"),
    (f64(1, 2), options(math.nan), 0.5, "temperature"),
    (f64(1, 2), options(INF), 0.5, "temperature"),
    (f64(1, 2), options(top_k=-1), 0.5, "top_k"),
    (f64(1, 2), options(top_p=1.5), 0.5, "top_p"),
    (f64(1, 2), options(top_p=math.nan), 0.5, "top_p"),
    (f64(1, 2), options(), 1.0, "u"),
    (f64(1, 2), options(), math.nan, "u"),
    (f64(1, math.nan, 2, math.nan), options(0.0), 0.5, "nan"),
    (f64(-INF, -INF), options(), 0.5, "all -inf"),
    (f64(-INF), options(0.0), 0.5, "all -inf"),
    # the table's order: a bad temperature is named before a NaN logit
    (f64(math.nan), options(-1.0), 0.5, "temperature"),
]


@pytest.mark.parametrize("logits, opts, u, rule", REFUSALS, ids=[f"{r[3]}-{i}" for i, r in enumerate(REFUSALS)])
def test_spec_refusals_name_the_rule(draw_token, logits, opts, u, rule):
    with pytest.raises(SamplingError) as refused:
        draw_token(logits, opts, u)
    assert refused.value.rule == rule
    if rule == "nan":
        assert "logit 1 is NaN" in str(refused.value)


def test_spec_draw_is_the_inverse_of_the_running_sum(draw_token):
    """Over a grid of u, each token is drawn about p N times (within one)."""
    logits = f64(0.3, -1.2, 2.0, 0.0, -INF, 1.1)
    grid = 1000
    counts = np.zeros(logits.size, dtype=int)
    probabilities = np.zeros(logits.size)
    for j in range(grid):
        token, p = draw_token(logits, options(0.9), (j + 0.5) / grid)
        counts[token] += 1
        probabilities[token] = p
    assert counts[4] == 0
    assert np.all(np.abs(counts - probabilities * grid) <= 1.0), (counts, probabilities * grid)


def test_spec_rules_match_the_runtime_statuses():
    """exactc_sample.h's statuses 1, 2, ... are the reference's RULES in order."""
    header = (RUNTIME_DIR / "exactc_sample.h").read_text()
    names = re.findall(r"EXACTC_SAMPLE_(\w+) = (\d+)", header)
    assert [int(v) for _, v in names] == list(range(len(RULES) + 1))
    expected = ["OK", "BAD_SIZE", "BAD_TEMPERATURE", "BAD_TOP_K", "BAD_TOP_P", "BAD_U", "NAN_LOGIT", "ALL_NEG_INF"]
    assert [n for n, _ in names] == expected


# ------------------------------------------------------------------------------------
# C against the reference
# ------------------------------------------------------------------------------------
def assert_c_equals_reference(sampler, cases) -> None:
    outcomes = compare_cases(sampler, cases)
    record_checks("sampling", "sample", [o.status for o in outcomes])
    bad = [o for o in outcomes if not o.ok]
    assert not bad, f"{len(bad)} of {len(outcomes)} cases differ\n{bad[0].report}"


TIES = LogitsSpec(size=8, site="f32", seed=3, distribution="levels")


@given(cases=st.lists(sampling_cases(), min_size=MIN_BATCH, max_size=BATCH))
@example(cases=[SamplingCase(TIES, options(top_p=p), u) for p in (0.25, 0.5, 0.75) for u in (0.0, 0.5, 0.99)])
@example(cases=[SamplingCase(LogitsSpec(9, "bf16", 4, "integers"), options(t, top_k=k), 0.3)
                for t in (0.0, 1e-300, 1.0, 1e300) for k in (0, 1, 3)])
def test_c_equals_reference_drawn_cases(sampler, cases):
    assert_c_equals_reference(sampler, cases)


@pytest.mark.parametrize("opts", [options(0.8, top_k=40), options(0.8, top_p=0.9), options(1.0),
                                  options(0.6, top_k=200, top_p=0.95)], ids=["top-k", "top-p", "plain", "both"])
def test_c_equals_reference_vocabulary_32000(sampler, opts):
    """A real vocabulary's size: the merge sort's many passes, sums of 32000 weights."""
    cases = [SamplingCase(LogitsSpec(32000, "f32", seed, "normal", 3.0), opts, u)
             for seed, u in ((0, 0.0), (1, 0.5), (2, 1.0 - 2.0**-53))]
    assert_c_equals_reference(sampler, cases)


@pytest.mark.parametrize("build", EXTREME_BUILDS, ids=build_label)
@given(cases=st.lists(sampling_cases(max_size=64, valid=True), min_size=MIN_BATCH, max_size=BATCH))
def test_c_equals_reference_every_build(build, cases):
    need(build.cc)
    assert_c_equals_reference(load_sampler(build), cases)


# ---- the sampler's refusals, and its silence at a tiny temperature


def test_sampling_refusals_whole():
    from exactc.exporter.reference.sampling import SamplingError, SamplingOptions, sample
    row = np.array([0.5, 1.0], np.float32)
    cases = [
        (row, SamplingOptions(float("inf"), 0, 1.0), 0.5, "temperature",
         "temperature inf must be finite and >= 0 (0 is greedy)"),
        (row, SamplingOptions(1.0, True, 1.0), 0.5, "top_k", "top_k True must be an integer in [0, 2^63) (0 is no top-k)"),
        (row, SamplingOptions(1.0, 2.0, 1.0), 0.5, "top_k", "top_k 2.0 must be an integer in [0, 2^63) (0 is no top-k)"),
        (row, SamplingOptions(1.0, 0, 1.5), 0.5, "top_p", "top_p 1.5 must be in [0, 1] (1 is no top-p)"),
        (row, SamplingOptions(1.0, 0, 1.0), 1.0, "u", "u 1.0 must be in [0, 1)"),
        (np.full(2, -np.inf), SamplingOptions(1.0, 0, 1.0), 0.5, "all -inf",
         "every logit is -inf; there is no token to draw"),
        (np.zeros((1, 2)), SamplingOptions(1.0, 0, 1.0), 0.5, "size",
         "logits must be one row of V >= 1 values; got shape (1, 2)"),
    ]
    for logits, options, u, rule, message in cases:
        with pytest.raises(SamplingError) as caught:
            sample(logits, options, u)
        assert (caught.value.rule, str(caught.value)) == (rule, f"sampling: {message}")


def test_sampling_a_tiny_temperature_warns_of_nothing():
    """A temperature of 1e-310 makes (x - m) / T overflow to -inf, as IEEE says it must:
    the reference computes it without a RuntimeWarning reaching the caller."""
    import warnings

    from exactc.exporter.reference.sampling import SamplingOptions, sample
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sample(np.array([0.0, -1.0, 3.0]), SamplingOptions(1e-310, 0, 1.0), 0.5) == (2, 1.0)


def test_the_sampler_refuses_logits_of_an_integer_dtype():
    import numpy as np

    from exactc.exporter.reference.sampling import SamplingError, widen_logits

    with pytest.raises(SamplingError, match="logits of dtype int32; expected float64, float32 or bfloat16"):
        widen_logits(np.arange(4, dtype=np.int32))
