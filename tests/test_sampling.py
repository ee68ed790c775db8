"""Sampling (docs/semantics.md section 14): the C runtime's sampler and the numpy reference
give the same token, the same probability bits and the same refusals.

Three kinds of checks. The spec's own examples, worked by hand from the text (greedy's
first index, infinities, tiny and huge temperatures, top-k of 1 and V, top-p of 0 and 1
and on its boundary, top-k before top-p, the draw's strict `>`, the refusals), each run on
both implementations. C against the reference over Hypothesis-drawn logits (ties,
infinities, NaN, every site type) and options (edges of every range, and outside them).
And both implementations against an outside oracle, transformers' logits warpers in
generate's order, on drawn and hand-made logits: a mistake both share (top-p before
top-k) is invisible to C against the reference.
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
from exactc.strategies.sampling import LogitsSpec, SamplingCase, sampling_cases, warper_cases
from exactc.verify.build import EXTREME_BUILDS, build_label
from exactc.verify.kernels import record_checks
from exactc.verify.sampling import compare_cases, load_sampler

from installed import need, need_module  # tests/installed.py

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


def test_spec_top_k_comes_before_top_p(draw_token):
    """Seven weights of 1 and one of 0, K = 4, P = 0.5: top-k leaves r_0 .. r_3 (indices 0,
    1, 2, 4), S = 4, P S = 2; q_0 = 1 < 2 keeps c_1, q_1 = 2 does not keep c_2: indices 0
    and 1, each drawn with p = 1/2. (Top-p first would keep 4 of the 7 and top-k all 4 of
    them: p = 1/4.)"""
    logits = f64(0, 0, 0, -INF, 0, 0, 0, 0)
    both = options(top_k=4, top_p=0.5)
    assert [draw_token(logits, both, u) for u in (0.0, 0.5 - 2.0**-54, 0.5, 1.0 - 2.0**-53)] == [
        (0, 0.5), (0, 0.5), (1, 0.5), (1, 0.5)]


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


# ------------------------------------------------------------------------------------
# transformers' logits warpers as the outside oracle
# ------------------------------------------------------------------------------------
def warped_probabilities(logits: np.ndarray, opts: SamplingOptions) -> np.ndarray:
    """transformers' sampling distribution over `logits`, in f64: TemperatureLogitsWarper,
    TopKLogitsWarper and TopPLogitsWarper, each added when generate adds it (temperature
    not 1, top_k not 0, top_p below 1: GenerationMixin._get_logits_processor) and in its
    order, then a softmax; greedy (T = 0) is argmax's one-hot, as generate(do_sample=False)."""
    torch = need_module("torch")
    transformers = need_module("transformers")
    scores = torch.from_numpy(np.asarray(logits, np.float64).copy())[None]
    if opts.temperature == 0:
        return np.eye(scores.shape[1])[int(torch.argmax(scores[0]))]
    warpers = []
    if opts.temperature != 1.0:
        warpers.append(transformers.TemperatureLogitsWarper(opts.temperature))
    if opts.top_k != 0:
        warpers.append(transformers.TopKLogitsWarper(top_k=int(opts.top_k)))
    if opts.top_p < 1.0:
        warpers.append(transformers.TopPLogitsWarper(top_p=opts.top_p))
    for warp in warpers:
        scores = warp(None, scores)
    return torch.softmax(scores, dim=-1)[0].numpy()


def ties_cut_by_index(logits: np.ndarray, top_k: int) -> np.ndarray:
    """The logits with the tokens exactc's top-k leaves out of a tie at the K-th rank set
    to -inf: transformers keeps every token tied with the K-th, exactc exactly K, the
    lower indices first (docs/semantics.md section 14)."""
    x = np.asarray(logits, np.float64).copy()
    if not 1 <= top_k < x.size:
        return x
    rank = np.lexsort((np.arange(x.size), -x))  # logits descending, ties by index
    x[rank[top_k:][x[rank[top_k:]] == x[rank[top_k - 1]]]] = -np.inf
    return x


def drawn_distribution(draw_token, logits: np.ndarray, opts: SamplingOptions) -> dict[int, float]:
    """Every token the sampler draws with its probability, found by walking u up the
    running sum: each token found moves u to the sum of the probabilities found so far,
    and u steps on by a few ulps where rounding leaves it inside the last token's share.
    (A token whose share is narrower than that step may be stepped over.)"""
    found: dict[int, float] = {}
    u, last, step = 0.0, -1, 2.0**-53
    while u < 1.0:
        token, p = draw_token(logits, opts, u)
        if token <= last:  # still inside the last token's share (or, after a step over tiny shares, before it)
            u, step = u + step, step * 2
            continue
        found[token], last, step = p, token, 2.0**-53
        u = max(u, math.fsum(found.values()))
    return found


def top_p_boundary_is_close(logits: np.ndarray, opts: SamplingOptions) -> bool:
    """Whether the nucleus's boundary lies within rounding of P: a sum of probabilities
    within 1e-9 of 1 - P, where a softmax's rounding and exactc's sums of weights may
    decide either way (section 14: "the same rule as step 8 up to rounding")."""
    if opts.temperature == 0 or opts.top_p == 1.0:
        return False
    top_k = SamplingOptions(opts.temperature, opts.top_k, 1.0)
    q = np.sort(warped_probabilities(ties_cut_by_index(logits, opts.top_k), top_k))
    return bool(np.any(np.abs(np.cumsum(q) - (1.0 - opts.top_p)) < 1e-9))


SHARE = 1e-12  # tokens of a smaller probability may be stepped over by drawn_distribution


def assert_agrees_with_warpers(draw_token, logits: np.ndarray, opts: SamplingOptions, label: str) -> None:
    """The kept set and every probability, against transformers' warpers on the logits
    with exactc's top-k ties cut by index. Among tokens of equal probability at the
    nucleus's boundary, which are kept is each one's own tie rule: there only their
    number and probabilities are compared."""
    want = warped_probabilities(ties_cut_by_index(logits, opts.top_k), opts)
    got = drawn_distribution(draw_token, logits, opts)
    theirs = {i: float(want[i]) for i in np.flatnonzero(want > SHARE)}
    ours = {i: p for i, p in got.items() if p > SHARE}
    report = f"{label}: exactc {ours}, transformers {theirs}"
    assert len(ours) == len(theirs), report
    assert np.allclose(sorted(ours.values()), sorted(theirs.values()), rtol=1e-9, atol=0), report
    boundary = [j for j, q in theirs.items() if math.isclose(q, min(theirs.values()), rel_tol=1e-9)]
    for i, q in theirs.items():
        if i not in boundary:
            assert i in ours and math.isclose(ours[i], q, rel_tol=1e-9), f"token {i}: {report}"
    for i in ours.keys() - theirs.keys():
        assert any(logits[i] == logits[j] for j in boundary), f"token {i}, not tied at the boundary: {report}"


@given(cases=st.lists(warper_cases(), min_size=MIN_BATCH, max_size=BATCH))
@example(cases=[SamplingCase(LogitsSpec(12, "f32", 8, "normal", 2.0), options(t, top_k=k, top_p=p), 0.0)
                for t in (0.0, 0.7, 1.0) for k in (0, 1, 3, 12) for p in (0.0, 0.3, 0.9, 1.0)])
def test_warpers_agree_on_drawn_logits(draw_token, cases):
    """Every combination of temperature (and greedy), top-k and top-p on drawn logits
    (ties, -inf, every site type): the kept set and the probabilities transformers'
    warpers give, but where the nucleus's boundary is within rounding of P."""
    compared = 0
    for case in cases:
        logits = case.logits.make()
        if np.all(logits == -np.inf) or top_p_boundary_is_close(logits, case.options):
            continue
        assert_agrees_with_warpers(draw_token, logits, case.options, case.describe())
        compared += 1
    assert compared or len(cases) < 4, "every case was too close to call"


SEPARATED = np.log(f64(0.4, 0.3, 0.2, 0.1))  # weights near 1, 3/4, 1/2, 1/4


@pytest.mark.parametrize("opts, kept", [
    (options(top_k=2, top_p=0.5), {0}),  # top-p over the two candidates: 0.4 / 0.7 > 0.5 alone
    (options(top_k=3, top_p=0.6), {0, 1}),  # 0.4 / 0.9 < 0.6, 0.7 / 0.9 > 0.6
    (options(top_k=1, top_p=0.99), {0}),  # a kept set of one
    (options(0.5, top_k=3, top_p=0.8), {0, 1}),  # weights 1, 9/16, 1/4: 1 / 1.8125 < 0.8
    (options(top_k=0, top_p=0.65), {0, 1}),
    (options(top_k=4, top_p=0.0), {0}),
], ids=["k2-p0.5", "k3-p0.6", "k1", "t0.5-k3-p0.8", "p0.65", "p0"])
def test_warpers_agree_on_separated_weights(draw_token, opts, kept):
    """Hand-made: probabilities apart by far more than rounding, where top-k then top-p
    and top-p then top-k keep different sets; the kept set is worked out by hand."""
    assert set(drawn_distribution(draw_token, SEPARATED, opts)) == kept
    assert set(np.flatnonzero(warped_probabilities(SEPARATED, opts) > 0)) == kept
    assert_agrees_with_warpers(draw_token, SEPARATED, opts, "separated")


def test_warpers_keep_every_token_tied_at_the_kth_and_exactc_exactly_k(draw_token):
    """The documented difference: logits 1, 3, 2, 3, 3 and K = 2. transformers keeps the
    three 3s (1/3 each); exactc keeps indices 1 and 3, the first two in index order (1/2
    each), which is transformers' answer once index 4 is -inf."""
    logits = f64(1, 3, 2, 3, 3)
    opts = options(top_k=2)
    assert np.allclose(warped_probabilities(logits, opts), [0, 1 / 3, 0, 1 / 3, 1 / 3], rtol=1e-15, atol=0)
    assert drawn_distribution(draw_token, logits, opts) == {1: 0.5, 3: 0.5}
    assert np.array_equal(warped_probabilities(ties_cut_by_index(logits, 2), opts), [0, 0.5, 0, 0.5, 0])


def test_warpers_reach_p_exactly_and_keep_as_many_as_exactc(draw_token):
    """P reached exactly: four weights of 1 and P = 1/2 (every sum exact on both sides).
    Both keep two tokens, each 1/2: exactc the first two in index order (0, 1); transformers
    the two its ascending sort puts last. With top-k 3 first, S = 3 and P S = 3/2: exactc
    keeps two of the three candidates, as transformers does."""
    logits = f64(0, 0, -INF, 0, 0)
    # (options, transformers' kept tokens: the higher indices of the tie)
    for opts, higher in ((options(top_p=0.5), [3, 4]), (options(top_k=3, top_p=0.5), [1, 3])):
        assert drawn_distribution(draw_token, logits, opts) == {0: 0.5, 1: 0.5}
        theirs = warped_probabilities(ties_cut_by_index(logits, opts.top_k), opts)
        assert np.flatnonzero(theirs).tolist() == higher and np.all(theirs[higher] == 0.5)
        assert_agrees_with_warpers(draw_token, logits, opts, "P reached exactly")


def test_warpers_greedy_is_the_first_index_of_the_maximum(draw_token):
    logits = f64(2, 7, -INF, 7, 1)
    for opts in (options(0.0), options(0.0, top_k=1, top_p=0.1)):
        assert drawn_distribution(draw_token, logits, opts) == {1: 1.0}
        assert np.array_equal(warped_probabilities(logits, opts), [0, 1, 0, 0, 0])
