"""Tests of the numpy reference backend itself, independent of C.

Grouped by what they protect:

1. hand cases with closed forms: the rules of docs/semantics.md that a reader can check
   on paper (masking, NaN, signed zeros, summation order, identities);
2. bf16: accumulation in f32, one rounding on store, constants reaching bf16 through f32;
3. reasonableness: every primitive at f64 against numpy's own float64 formula, within a
   tolerance (numpy's exp and sums are fine here, never in the backend): this catches a
   reference that misreads a formula (a wrong constant, 2i for i, a lost bias);
4. a scalar transcription: the spec's pseudo-code for the reductions, one element at a
   time with typed numpy scalars, equal bit for bit to the vectorized backend on messy
   inputs (NaN, infinities, signed zeros, overflow) at every site type;
5. the catalogue: every primitive at every site type gives its catalogue's dtype and
   shape, through `run` and through its plain function, bit for bit the same.

Plus a guard that the backend's source calls none of numpy's pairwise, BLAS or
transcendental functions (docs/design.md, principles 1-3).
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from exactc.exporter import reference, types
from exactc.exporter import reference as ref
from exactc.exporter.primitives import PRIMITIVES, PrimitiveError, get_primitive
from exactc.exporter.reference import arith
from exactc.runtime import libm_twin
from exactc.verify.compare import assert_bits_equal

SITES = types.SITE_TYPES
NAN_BITS = {"f64": 0x7FF8000000000000, "f32": 0x7FC00000, "bf16": 0x7FC0}
# A signalling NaN with a payload: views and gathers must copy it unchanged.
ODD_NAN_BITS = {"f64": 0x7FF0000000000001, "f32": 0x7F800001, "bf16": 0x7F81}
# An integer whose successor is a tie that rounds back to it, in each accumulator type.
BIG = {"f64": 2.0**53, "f32": 2.0**24, "bf16": 2.0**24}

relaxed = settings(deadline=None)


# ---- helpers -----------------------------------------------------------------------------


def site(values, site_type: str) -> np.ndarray:
    """Reals (floats, given exactly as f64) rounded to a site type."""
    return types.round_to_site(values, site_type)


def f64(values: np.ndarray) -> np.ndarray:
    """Site values as f64, exactly (for comparisons)."""
    return np.asarray(values).astype(np.float64)


def from_bits(pattern: int, site_type: str, shape=()) -> np.ndarray:
    width = {"f64": np.uint64, "f32": np.uint32, "bf16": np.uint16}[site_type]
    return np.full(shape, pattern, dtype=width).view(types.numpy_dtype(site_type))


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal by the one comparison (verify/compare.py): every bit, but any f64/f32 NaN
    equals any other (their payload is unspecified); bf16 on all 16 bits."""
    assert_bits_equal(want, got, "reference", labels=("want", "got"))


def is_positive_zero(values: np.ndarray) -> bool:
    v = f64(values)
    return bool(np.all((v == 0) & ~np.signbit(v)))


def is_negative_zero(values: np.ndarray) -> bool:
    v = f64(values)
    return bool(np.all((v == 0) & np.signbit(v)))


def acc_store(value, site_type: str) -> np.ndarray:
    """An accumulator value (built in the test with typed numpy scalars) stored to a site."""
    return types.store(np.asarray(value, dtype=types.acc_dtype(site_type)), site_type)


def keep_mask(bits: int, n: int) -> np.ndarray:
    """Bit j of `bits` as keep[j] (int32 0 or 1)."""
    return np.array([(bits >> j) & 1 for j in range(n)], dtype=np.int32)


all_sites = pytest.mark.parametrize("site_type", SITES)
seeds = st.integers(0, 2**32 - 1)
small = st.integers(1, 5)
pairings = st.sampled_from(["half", "interleaved"])


# ---- 1. hand cases -----------------------------------------------------------------------


@all_sites
def test_elementwise_signed_zeros_follow_ieee(site_type):
    pz, nz = site([0.0], site_type), site([-0.0], site_type)
    assert is_negative_zero(ref.add(nz, nz, site=site_type))
    assert is_positive_zero(ref.add(pz, nz, site=site_type))
    assert is_positive_zero(ref.sub(nz, nz, site=site_type))
    assert is_negative_zero(ref.mul(site([3.0], site_type), nz, site=site_type))
    assert is_negative_zero(ref.scale(pz, site=site_type, s=-2.0))


@all_sites
def test_elementwise_nan_rules(site_type):
    inf = site([np.inf], site_type)
    assert np.isnan(f64(ref.sub(inf, inf, site=site_type))).all()
    assert np.isnan(f64(ref.mul(inf, site([0.0], site_type), site=site_type))).all()
    if site_type == "bf16":  # every bf16 store canonicalizes, whatever NaN came in
        for pattern in (0x7F81, 0xFFC0, 0xFFFF):
            y = ref.add(from_bits(pattern, "bf16", (1,)), site([1.0], "bf16"), site="bf16")
            assert types.bits(y)[0] == 0x7FC0
        assert types.bits(ref.sub(inf, inf, site="bf16"))[0] == 0x7FC0


@all_sites
def test_activations_at_special_points(site_type):
    x = site([0.0, -0.0, np.inf, -np.inf, -20.0], site_type)
    silu, gt, ge = (f(x, site=site_type) for f in (ref.silu, ref.gelu_tanh, ref.gelu_erf))
    for y in (silu, gt, ge):
        assert is_positive_zero(y[0]) and is_negative_zero(y[1])
        assert f64(y[2]) == np.inf
    assert np.isnan(f64(silu[3]))  # -∞ ⊘ ∞: the rule, not an accident
    # (0.5 ⊗ -∞) ⊗ (1 ⊕ -1) = -∞ ⊗ 0: NaN for both GELUs too
    assert np.isnan(f64(gt[3])) and np.isnan(f64(ge[3]))
    # far left, tanh and erf are exactly -1: (0.5 ⊗ x) ⊗ +0 = -0
    assert is_negative_zero(gt[4]) and is_negative_zero(ge[4])


@all_sites
def test_linear_of_negative_zero_products_is_positive_zero(site_type):
    x = site([[1.0, 2.0], [-0.0, 5.0]], site_type)
    w = site([[-0.0, -0.0]], site_type)
    y = ref.linear(x, w, site=site_type)
    assert is_positive_zero(y)
    # the bias is added to the +0 sum: +0 ⊕ -0 = +0
    assert is_positive_zero(ref.linear(x, w, site([-0.0], site_type), site=site_type))
    # matmul's sum starts at +0 too
    y = ref.matmul(x[None], w[None], site=site_type, trans_b=True)
    assert y.shape == (1, 2, 1) and is_positive_zero(y)


@all_sites
def test_linear_sums_in_index_order_then_adds_the_bias(site_type):
    big = BIG[site_type]
    x = site([[1.0, 1.0, 1.0]], site_type)
    # (1 ⊕ big) is a tie that rounds back to big; then ⊖ big gives 0. Any other order
    # (reversed, pairwise, exact) gives 1.
    assert f64(ref.linear(x, site([[1.0, big, -big]], site_type), site=site_type)) == 0.0
    # the bias after the sum: (big ⊖ big) ⊕ 1 = 1, while a bias added first is lost
    x2 = site([[1.0, 1.0]], site_type)
    y = ref.linear(x2, site([[big, -big]], site_type), site([1.0], site_type), site=site_type)
    assert f64(y) == 1.0


@all_sites
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_matmul_sums_in_index_order(site_type, trans_a, trans_b):
    big = BIG[site_type]
    a = site([[[1.0, 1.0, 1.0]]], site_type)  # A (1, 1, 3)
    b = site([[[1.0], [big], [-big]]], site_type)  # B (1, 3, 1)
    if trans_a:
        a = np.ascontiguousarray(a.transpose(0, 2, 1))
    if trans_b:
        b = np.ascontiguousarray(b.transpose(0, 2, 1))
    y = ref.matmul(a, b, site=site_type, trans_a=trans_a, trans_b=trans_b)
    assert y.shape == (1, 1, 1) and f64(y) == 0.0


@all_sites
def test_matmul_group_shares_one_b_per_group(site_type):
    rng = np.random.default_rng(3)
    a = site(rng.normal(size=(6, 2, 3)), site_type)
    b = site(rng.normal(size=(2, 3, 4)), site_type)
    y = ref.matmul(a, b, site=site_type, group=3)
    for i in range(6):
        alone = ref.matmul(a[i : i + 1].copy(), b[i // 3 : i // 3 + 1].copy(), site=site_type)
        assert_same_bits(y[i : i + 1], alone)


@all_sites
def test_matmul_transposes_are_views_of_the_operands(site_type):
    rng = np.random.default_rng(4)
    a = site(rng.normal(size=(2, 3, 5)), site_type)
    b = site(rng.normal(size=(2, 5, 4)), site_type)
    plain = ref.matmul(a, b, site=site_type)
    at = np.ascontiguousarray(a.transpose(0, 2, 1))
    bt = np.ascontiguousarray(b.transpose(0, 2, 1))
    assert_same_bits(ref.matmul(at, bt, site=site_type, trans_a=True, trans_b=True), plain)
    # and matmul of one batch is linear without bias (w is (out, in) = Bᵀ)
    assert_same_bits(plain[0], ref.linear(a[0].copy(), bt[0].copy(), site=site_type))


@all_sites
def test_attention_over_a_written_cache_is_attention_over_the_concatenation(site_type):
    # a decode step's two readings: its row written at row T of a cache of capacity C
    # and the first T + 1 rows read in place, or the T cached rows and its row joined
    rng = np.random.default_rng(5)
    T, C = 3, 6
    cache = site(rng.normal(size=(2, C, 4)), site_type)
    row, q = site(rng.normal(size=(2, 1, 4)), site_type), site(rng.normal(size=(4, 1, 4)), site_type)
    written = ref.cache_write(cache, row, site=site_type, pos=T)
    assert_same_bits(written[:, T : T + 1], row)
    assert_same_bits(np.delete(written, T, axis=1), np.delete(cache, T, axis=1))
    joined = ref.concat(cache[:, :T].copy(), row, site=site_type, axis=1)
    scores = ref.matmul(q, written, site=site_type, trans_b=True, group=2, b_rows=T + 1)
    assert_same_bits(scores, ref.matmul(q, joined, site=site_type, trans_b=True, group=2))
    att = site(rng.normal(size=(4, 1, T + 1)), site_type)
    mixed = ref.matmul(att, written, site=site_type, group=2, b_rows=T + 1)
    assert_same_bits(mixed, ref.matmul(att, joined, site=site_type, group=2))


@all_sites
def test_embedding_out_of_range_ids_give_quiet_nan_rows(site_type):
    table = site([[1.0, -0.0], [2.0, 3.0], [4.0, 5.0]], site_type)
    table[1, 1] = from_bits(ODD_NAN_BITS[site_type], site_type)
    ids = np.array([-1, 0, 3, 1, 2**31 - 1, -(2**31), 2], dtype=np.int32)
    y = ref.embedding(table, ids, site=site_type)
    rows = types.bits(y)
    for t in (0, 2, 4, 5):
        assert (rows[t] == NAN_BITS[site_type]).all()
    for t in (1, 3, 6):  # in range: the row's bits, a signalling NaN payload included
        assert (rows[t] == types.bits(table)[ids[t]]).all()


@all_sites
def test_layernorm_of_a_constant_row_is_b(site_type):
    x = site([[3.0, 3.0, 3.0, 3.0]], site_type)
    g = site([2.0, -1.0, 0.5, 7.0], site_type)
    b = site([0.5, -1.0, 0.0, 7.0], site_type)
    y = ref.layernorm(x, g, b, site=site_type, eps=1e-5)
    assert (f64(y) == f64(b)[None]).all()


@all_sites
def test_layernorm_closed_form(site_type):
    # mean 2, biased variance 1, eps 0: rstd = 1 exactly
    x = site([[1.0, 3.0]], site_type)
    g = site([2.0, 3.0], site_type)
    b = site([0.25, 0.5], site_type)
    y = ref.layernorm(x, g, b, site=site_type, eps=0.0)
    assert (f64(y) == [[-1.75, 3.5]]).all()


@all_sites
def test_rmsnorm_closed_form(site_type):
    x = site([[2.0, -2.0, 2.0, 2.0]], site_type)  # mean square 4, rms 2
    g = site([1.0, 3.0, -0.5, 8.0], site_type)
    y = ref.rmsnorm(x, g, site=site_type, eps=0.0)
    assert (f64(y) == [[1.0, -3.0, -0.5, 8.0]]).all()


@all_sites
def test_l2norm_of_zeros_is_zeros_and_keeps_the_sign(site_type):
    y = ref.l2norm(site([[0.0, -0.0, 0.0]], site_type), site=site_type)
    assert is_positive_zero(y[0, [0, 2]]) and is_negative_zero(y[0, 1])


@all_sites
def test_l2norm_closed_form(site_type):
    acc = types.acc_dtype(site_type).type
    y = ref.l2norm(site([[3.0, -4.0]], site_type), site=site_type)  # norm 5, exact
    assert_same_bits(y[0], acc_store([acc(3) / acc(5), acc(-4) / acc(5)], site_type))
    # below eps the norm is replaced by eps (tiny values stay well above f32's subnormals)
    tiny = 2.0**-60
    y = ref.l2norm(site([[tiny]], site_type), site=site_type, eps=2.0**-50)
    assert f64(y) == 2.0**-10
    # a NaN norm stays NaN
    assert np.isnan(f64(ref.l2norm(site([[np.nan, 1.0]], site_type), site=site_type))).all()


@all_sites
def test_softmax_of_two_zeros_is_a_half_each(site_type):
    y = ref.softmax(site(np.zeros((1, 1, 2)), site_type), site=site_type)
    assert (f64(y) == 0.5).all()


@all_sites
def test_softmax_causal_rows(site_type):
    acc = types.acc_dtype(site_type).type
    third = float(acc_store(acc(1) / acc(3), site_type))
    x = site(np.zeros((2, 3, 3)), site_type)
    y = f64(ref.softmax(x, site=site_type, causal=True))
    want = [[1, 0, 0], [0.5, 0.5, 0], [third, third, third]]
    assert (y == np.array([want, want])).all()
    assert is_positive_zero(y[:, 0, 1:])
    # offset 1: row 0 sees columns 0 and 1
    y = f64(ref.softmax(x, site=site_type, causal=True, offset=1))
    assert (y[0, 0] == [0.5, 0.5, 0]).all() and (y[0, 1] == [third] * 3).all()


@all_sites
def test_softmax_row_with_no_visible_column_is_positive_zero(site_type):
    x = site([[[1.0, np.nan, -np.inf], [2.0, 3.0, np.inf]]], site_type)
    y = ref.softmax(x, np.zeros(3, dtype=np.int32), site=site_type)
    assert is_positive_zero(y)
    # causal with a negative offset: row 0 sees nothing, row 1 sees column 0
    x = site(np.zeros((1, 2, 2)), site_type)
    y = ref.softmax(x, site=site_type, causal=True, offset=-1)
    assert is_positive_zero(y[0, 0]) and (f64(y[0, 1]) == [1.0, 0.0]).all()


@all_sites
def test_softmax_never_reads_masked_columns(site_type):
    keep = np.array([0, 1, 0, 1], dtype=np.int32)
    x = site([[[np.nan, 0.0, np.inf, 0.0]]], site_type)
    y = ref.softmax(x, keep, site=site_type)
    assert (f64(y) == [[[0.0, 0.5, 0.0, 0.5]]]).all() and is_positive_zero(y[..., ::2])
    # any non-zero keep value keeps
    y = ref.softmax(x[..., 1:], np.array([7, 0, -1], dtype=np.int32), site=site_type)
    assert (f64(y) == [[[0.5, 0.0, 0.5]]]).all()
    # the maximum is over visible columns only: were the masked column taken into it,
    # exp(-1000 ⊖ m) would underflow to 0 and the row would be 0 ⊘ 0
    x = site([[[-1000.0, 7.0, -1000.0]]], site_type)
    y = ref.softmax(x, np.array([1, 0, 1], dtype=np.int32), site=site_type)
    assert (f64(y) == [[[0.5, 0.0, 0.5]]]).all()


@all_sites
@pytest.mark.parametrize(
    "row",
    [[0.0, np.nan, 1.0], [np.inf, 0.0, 1.0], [-np.inf, -np.inf, -np.inf]],
    ids=["nan", "plus-inf", "all-minus-inf"],
)
def test_softmax_rows_that_are_nan(site_type, row):
    keep = np.array([1, 1, 1, 0], dtype=np.int32)
    y = ref.softmax(site([[row + [5.0]]], site_type), keep, site=site_type)
    assert np.isnan(f64(y[..., :3])).all() and is_positive_zero(y[..., 3])


@all_sites
def test_softmax_minus_inf_column_gets_zero(site_type):
    y = ref.softmax(site([[[-np.inf, 0.0, 0.0]]], site_type), site=site_type)
    assert (f64(y) == [[[0.0, 0.5, 0.5]]]).all()


@all_sites
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_rope_at_position_zero_is_the_identity(site_type, pairing):
    # finite non-zero values: x ⊗ 1 ⊖ y ⊗ 0 = x (a zero could lose its sign: -0 ⊖ -0 = +0)
    rng = np.random.default_rng(5)
    values = rng.normal(size=(1, 3, 8))
    values[values == 0] = 1.0
    x = site(values, site_type)
    assert_same_bits(ref.rope(x, site=site_type, pos0=0, pairing=pairing), x)


@all_sites
def test_rope_pairings_agree_on_a_permuted_head(site_type):
    # "half" pairs (i, i+h), "interleaved" pairs (2i, 2i+1): the same rotation after
    # moving the elements of each pair next to each other
    rng = np.random.default_rng(6)
    x = site(rng.normal(size=(4, 2, 6)), site_type)
    perm = np.array([0, 3, 1, 4, 2, 5])  # interleaved position -> half position
    half = ref.rope(x, site=site_type, pos0=3, pairing="half")
    x_inter = np.ascontiguousarray(x[:, :, perm])
    inter = ref.rope(x_inter, site=site_type, pos0=3, pairing="interleaved")
    assert_same_bits(inter, np.ascontiguousarray(half[:, :, perm]))


def test_rope_first_frequency_is_one():
    # i = 0: a = +0, freq = exp(-(0 · l)) = 1 exactly, so the angle is the position
    c, s = ref.rope_tables(3, 4, site="f64", theta=10000.0, pos0=7)
    assert (s[:, 0] == libm_twin.sin(np.array([7.0, 8.0, 9.0]))).all()
    assert (c[:, 0] == libm_twin.cos(np.array([7.0, 8.0, 9.0]))).all()


@all_sites
def test_mean_pool_hand_cases(site_type):
    x = site([[1.0, -0.0], [100.0, np.nan], [3.0, -0.0]], site_type)
    y = ref.mean_pool(x, np.array([1, 0, -5], dtype=np.int32), site=site_type)
    # any non-zero keep keeps; the sum starts at +0, so kept -0 rows pool to +0; the
    # masked NaN is never read
    assert f64(y[0]) == 2.0 and is_positive_zero(y[1])
    y = ref.mean_pool(x, np.zeros(3, dtype=np.int32), site=site_type)
    assert is_positive_zero(y)  # no kept token: +0 ⊘ 1


@all_sites
def test_mean_pool_sums_in_order(site_type):
    big = BIG[site_type]
    x = site([[1.0], [big], [-big]], site_type)
    assert f64(ref.mean_pool(x, np.ones(3, dtype=np.int32), site=site_type)) == 0.0


@all_sites
@pytest.mark.parametrize(
    "row, want",
    [
        ([1.0, np.nan, 3.0, np.nan], 1),
        ([2.0, 5.0, 5.0], 1),
        ([-0.0, 0.0], 0),
        ([0.0, -0.0], 0),
        ([-np.inf, -np.inf], 0),
        ([-np.inf, -1.0], 1),
        ([np.inf, np.nan], 1),
        ([np.nan], 0),
    ],
)
def test_argmax_hand_cases(site_type, row, want):
    y = ref.argmax(site([row], site_type), site=site_type)
    assert y.dtype == np.int32 and y.tolist() == [want]


@all_sites
def test_views_copy_bits_including_nan_payloads(site_type):
    x = site(np.arange(24.0).reshape(2, 3, 4) - 5, site_type)
    x[0, 1, 2] = from_bits(ODD_NAN_BITS[site_type], site_type)
    x[1, 2, 3] = site(-0.0, site_type)
    xb = types.bits(x)
    views = [
        (ref.reshape(x, site=site_type, shape=(4, 6)), xb.reshape(4, 6)),
        (ref.transpose(x, site=site_type, perm=(2, 0, 1)), xb.transpose(2, 0, 1)),
        (ref.slice(x, site=site_type, axis=2, start=1, stop=3), xb[:, :, 1:3]),
        (ref.concat(x, x[:, :1].copy(), site=site_type, axis=1), np.hstack([xb, xb[:, :1]])),
    ]
    for y, want in views:
        assert y.dtype == x.dtype and (types.bits(y) == want).all()


@all_sites
def test_scale_rounds_the_constant_to_the_accumulator(site_type):
    # R_A(0.1) at f32 is f32(0.1): x ⊗ f32(0.1), not f32(x · 0.1)
    acc = types.acc_dtype(site_type).type
    x = site(np.arange(1.0, 200.0), site_type)
    want = acc_store(f64(x).astype(acc) * acc(0.1), site_type)
    assert_same_bits(ref.scale(x, site=site_type, s=0.1), want)


def test_f32_scale_differs_from_an_f64_computation():
    # the case above is not vacuous: promoting to f64 would change some of these bits
    x = site(np.arange(1.0, 200.0), "f32")
    promoted = (f64(x) * 0.1).astype(np.float32)
    assert (types.bits(ref.scale(x, site="f32", s=0.1)) != types.bits(promoted)).any()


# ---- 2. bf16: f32 accumulation, one rounding on store, constants through f32 -------------


def test_bf16_store_rounds_once_ties_to_even():
    one, half_ulp = site([1.0], "bf16"), site([2.0**-8], "bf16")
    # 1 + 2^-8 is exact in f32 and a tie in bf16: to even, 1
    assert f64(ref.add(one, half_ulp, site="bf16")) == 1.0
    # 1 + 3·2^-8 is a tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even)
    y = ref.add(site([1.0 + 2.0**-7], "bf16"), half_ulp, site="bf16")
    assert f64(y) == 1.0 + 2.0**-6


def test_bf16_linear_accumulates_in_f32():
    # in f32: 1 + 2^-8 + 2^-8 = 1 + 2^-7, exact in bf16. Rounding each step to bf16
    # would lose both halves (1 + 2^-8 ties to 1).
    x = site([[1.0, 1.0, 1.0]], "bf16")
    w = site([[1.0, 2.0**-8, 2.0**-8]], "bf16")
    assert f64(ref.linear(x, w, site="bf16")) == 1.0 + 2.0**-7
    # and so does mean_pool: (1 + 2^-7) ⊘ 4, where bf16 steps would give 1 ⊘ 4
    x = site([[1.0], [2.0**-8], [2.0**-8], [0.0]], "bf16")
    assert f64(ref.mean_pool(x, np.ones(4, np.int32), site="bf16")) == 0.25 + 2.0**-9


def test_bf16_constant_reaches_bf16_through_f32():
    # s = 1 + 2^-8 + 2^-30: R_A(s) = f32 1 + 2^-8 (the 2^-30 is lost), and storing
    # 1 ⊗ that is a bf16 tie, to even: 1. Rounding the real directly would give 1 + 2^-7.
    s = 1.0 + 2.0**-8 + 2.0**-30
    assert f64(ref.scale(site([1.0], "bf16"), site="bf16", s=s)) == 1.0
    assert f64(ref.scale(site([1.0], "f32"), site="f32", s=s)) == 1.0 + 2.0**-8


def test_bf16_overflow_on_store_is_infinity():
    bf16_max = from_bits(0x7F7F, "bf16", (1,))  # 3.3895e38
    # 1.003 ⊗ max = 3.3997e38 is finite in f32, but past the midpoint to 2^128 in bf16
    assert f64(ref.scale(bf16_max, site="bf16", s=1.003)) == np.inf
    assert f64(ref.scale(bf16_max.astype(np.float32), site="f32", s=1.003)) < np.inf
    assert f64(ref.scale(-bf16_max, site="bf16", s=1.003)) == -np.inf


# ---- 3. reasonableness: f64 against numpy's own float64 formulas -------------------------


def normal(seed: int, shape, scale: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape) * scale


def assert_close(got: np.ndarray, want: np.ndarray, *, rtol=1e-12, atol=0.0) -> None:
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


@relaxed
@given(seed=seeds, shape=st.lists(small, min_size=0, max_size=3))
def test_elementwise_are_numpys_f64_and_f32_operations(seed, shape):
    a, b = normal(seed, shape), normal(seed + 1, shape)
    for site_type, dtype in (("f64", np.float64), ("f32", np.float32)):
        sa, sb = site(a, site_type), site(b, site_type)
        assert_same_bits(ref.add(sa, sb, site=site_type), np.asarray(sa + sb, dtype))
        assert_same_bits(ref.sub(sa, sb, site=site_type), np.asarray(sa - sb, dtype))
        assert_same_bits(ref.mul(sa, sb, site=site_type), np.asarray(sa * sb, dtype))
        assert_same_bits(ref.scale(sa, site=site_type, s=-1.5), np.asarray(sa * dtype(-1.5), dtype))
    sa, sb = site(a, "bf16"), site(b, "bf16")
    want = types.f32_to_bf16(sa.astype(np.float32) + sb.astype(np.float32))
    assert_same_bits(ref.add(sa, sb, site="bf16"), np.asarray(want))


@relaxed
@given(seed=seeds, n=st.integers(1, 40))
def test_activations_near_numpy(seed, n):
    x = normal(seed, (n,), 3.0)
    erf = np.vectorize(math.erf)
    want = {
        "silu": x / (1 + np.exp(-x)),
        "gelu_tanh": 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        "gelu_erf": 0.5 * x * (1 + erf(x / math.sqrt(2))),
    }
    for name, w in want.items():
        # near the left tail 1 + t cancels: a 1-ulp difference in t is absolute there
        assert_close(getattr(ref, name)(x.copy(), site="f64"), w, atol=1e-14)


@relaxed
@given(seed=seeds, m=small, n=small, k=st.integers(1, 40), has_b=st.booleans())
def test_linear_near_numpy(seed, m, n, k, has_b):
    x, w, b = normal(seed, (m, k)), normal(seed + 1, (n, k)), normal(seed + 2, (n,))
    want = x @ w.T + (b if has_b else 0.0)
    got = ref.linear(x, w, b if has_b else None, site="f64")
    assert_close(got, want, atol=1e-14 * k)


@relaxed
@given(
    seed=seeds, heads=small, group=st.integers(1, 3), m=small, n=small, k=st.integers(1, 12),
    trans_a=st.booleans(), trans_b=st.booleans(),
)  # fmt: skip
def test_matmul_near_numpy(seed, heads, group, m, n, k, trans_a, trans_b):
    a = normal(seed, (heads * group, k, m) if trans_a else (heads * group, m, k))
    b = normal(seed + 1, (heads, n, k) if trans_b else (heads, k, n))
    a_mats = a.transpose(0, 2, 1) if trans_a else a
    b_mats = b.transpose(0, 2, 1) if trans_b else b
    want = np.stack([a_mats[i] @ b_mats[i // group] for i in range(heads * group)])
    got = ref.matmul(a, b, site="f64", trans_a=trans_a, trans_b=trans_b, group=group)
    assert_close(got, want, atol=1e-14 * k)


@relaxed
@given(seed=seeds, vocab=small, dim=small, ids=st.lists(st.integers(-3, 8), min_size=1, max_size=6))
def test_embedding_is_numpy_take(seed, vocab, dim, ids):
    table = normal(seed, (vocab, dim))
    ids = np.array(ids, dtype=np.int32)
    got = ref.embedding(table, ids, site="f64")
    inside = (ids >= 0) & (ids < vocab)
    assert_same_bits(got[inside], table[ids[inside]])
    assert np.isnan(got[~inside]).all()


@relaxed
@given(seed=seeds, m=small, d=st.integers(1, 30), eps=st.sampled_from([1e-5, 1e-12, 0.5]))
def test_normalizations_near_numpy(seed, m, d, eps):
    x, g, b = normal(seed, (m, d), 2.0), normal(seed + 1, (d,)), normal(seed + 2, (d,))
    x = x + 1.0  # a mean away from zero, so that a lost mean shows
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    want = (x - mean) / np.sqrt(var + eps) * g + b
    assert_close(ref.layernorm(x, g, b, site="f64", eps=eps), want, atol=1e-13)
    ms = (x * x).mean(axis=1, keepdims=True)
    assert_close(ref.rmsnorm(x, g, site="f64", eps=eps), x / np.sqrt(ms + eps) * g, atol=1e-13)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    assert_close(ref.l2norm(x, site="f64", eps=eps), x / np.maximum(norm, eps), atol=1e-14)


@relaxed
@given(
    seed=seeds, batches=small, m=small, n=st.integers(1, 8), causal=st.booleans(),
    offset=st.integers(-2, 4), keep_bits=st.integers(0, 255) | st.just(255),
)  # fmt: skip
def test_softmax_near_numpy(seed, batches, m, n, causal, offset, keep_bits):
    x = normal(seed, (batches, m, n), 3.0)
    keep = keep_mask(keep_bits, n)
    future = np.arange(n)[None, :] > np.arange(m)[:, None] + offset  # (M, N)
    visible = (keep != 0)[None, :] & ~(causal & future)
    with np.errstate(all="ignore"):
        masked = np.where(visible, x, -np.inf)
        e = np.exp(masked - masked.max(axis=-1, keepdims=True))
        want = np.where(visible, e / e.sum(axis=-1, keepdims=True), 0.0)
    got = ref.softmax(x, keep, site="f64", causal=causal, offset=offset)
    assert_close(got, want)
    assert is_positive_zero(got[:, ~visible])


def _rope_numpy(x: np.ndarray, theta: float, pos0: int, pairing: str) -> np.ndarray:
    """Hugging Face's rotate_half and llama2.c's interleaved loop, in float64."""
    positions, _, dim = x.shape
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2) / dim)  # (D/2,)
    angle = np.outer(np.arange(pos0, pos0 + positions), inv_freq)[:, None, :]  # (T, 1, D/2)
    cos, sin = np.cos(angle), np.sin(angle)
    if pairing == "half":
        x1, x2 = x[..., : dim // 2], x[..., dim // 2 :]
        cos2, sin2 = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
        return x * cos2 + np.concatenate([-x2, x1], -1) * sin2
    y = np.empty_like(x)
    v0, v1 = x[..., 0::2], x[..., 1::2]
    y[..., 0::2] = v0 * cos - v1 * sin
    y[..., 1::2] = v0 * sin + v1 * cos
    return y


@relaxed
@given(
    seed=seeds, positions=small, heads=small, half=small, pos0=st.integers(0, 100),
    theta=st.sampled_from([10000.0, 500000.0, 2.5]), pairing=pairings,
)  # fmt: skip
def test_rope_near_numpy(seed, positions, heads, half, pos0, theta, pairing):
    x = normal(seed, (positions, heads, 2 * half))
    got = ref.rope(x, site="f64", theta=theta, pos0=pos0, pairing=pairing)
    assert_close(got, _rope_numpy(x, theta, pos0, pairing), atol=1e-12)


@relaxed
@given(seed=seeds, t=small, d=small, keep=st.lists(st.integers(0, 2), min_size=5, max_size=5))
def test_mean_pool_near_numpy(seed, t, d, keep):
    x = normal(seed, (t, d))
    keep = np.array(keep[:t], dtype=np.int32)
    want = x[keep != 0].mean(axis=0) if (keep != 0).any() else np.zeros(d)
    assert_close(ref.mean_pool(x, keep, site="f64"), want, atol=1e-15)


special_floats = st.sampled_from([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.5])


@all_sites
@relaxed
@given(
    rows=st.lists(st.lists(special_floats | st.floats(-4, 4), min_size=3, max_size=3), min_size=1)
)
def test_argmax_is_numpys_rule(site_type, rows):
    x = site(rows, site_type)
    assert ref.argmax(x, site=site_type).tolist() == np.argmax(f64(x), axis=1).tolist()


@relaxed
@given(seed=seeds, shape=st.lists(small, min_size=1, max_size=4), data=st.data())
def test_views_are_numpys(seed, shape, data):
    x = normal(seed, shape)
    new_shape = data.draw(st.permutations(shape))
    assert_same_bits(ref.reshape(x, site="f64", shape=tuple(new_shape)), x.reshape(new_shape))
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    assert_same_bits(ref.transpose(x, site="f64", perm=perm), x.transpose(perm))
    axis = data.draw(st.integers(0, len(shape) - 1))
    start = data.draw(st.integers(0, shape[axis] - 1))
    stop = data.draw(st.integers(start + 1, shape[axis]))
    index = tuple(slice(start, stop) if i == axis else slice(None) for i in range(len(shape)))
    assert_same_bits(ref.slice(x, site="f64", axis=axis, start=start, stop=stop), x[index])
    both = np.concatenate([x, x[index]], axis)
    assert_same_bits(ref.concat(x, x[index], site="f64", axis=axis), both)


# ---- 4. a scalar transcription: the spec's pseudo-code, one element at a time -------------
#
# The backend is vectorized over parallel axes; these loops are not. Each follows the text
# of semantics.md line by line with typed numpy scalars, so an operation done in a wrong
# order, a broadcast along the wrong axis or an f64 promotion shows as a bit difference
# (section 3 only sees misread formulas, within a tolerance).


class Spec:
    """The notation of semantics.md section 1 for one site type, on numpy scalars."""

    def __init__(self, site_type: str):
        self.site = site_type
        self.A = types.acc_dtype(site_type).type
        self.zero = self.A(0.0)  # +0

    def W(self, v):
        return self.A(v)

    def R(self, c):
        return self.A(types.round_to_acc(c, self.site)[()])

    def T(self, name, a):
        return self.A(getattr(libm_twin, name)(np.array([np.float64(a)]))[0])

    def S(self, a):
        assert type(a) is self.A, f"{type(a)} is not the accumulator type {self.A}"
        return types.store(np.array([a], dtype=self.A), self.site)[0]

    def array(self, values, shape) -> np.ndarray:
        return np.array(values, dtype=types.numpy_dtype(self.site)).reshape(shape)


def spec_activation(sp: Spec, name: str, v) -> np.generic:
    """semantics.md section 2 at one site value `v`."""
    x, one, half = sp.W(v), sp.R(1.0), sp.R(0.5)
    if name == "silu":
        return sp.S(x / (one + sp.T("exp", -x)))
    if name == "gelu_tanh":
        # math.sqrt(2 / math.pi) happens to be the f64 nearest to √(2/π)
        c0, c1 = sp.R(math.sqrt(2.0 / math.pi)), sp.R(0.044715)
        u = x * x
        u = u * x
        u = c1 * u
        u = x + u
        u = c0 * u
        return sp.S((half * x) * (one + sp.T("tanh", u)))
    # math.sqrt(0.5) is the f64 nearest to 1/√2 (1 / math.sqrt(2) is one ulp below)
    e = sp.T("erf", x * sp.R(math.sqrt(0.5)))
    return sp.S((half * x) * (one + e))


activations = pytest.mark.parametrize("name", ["silu", "gelu_tanh", "gelu_erf"])


@activations
@all_sites
@relaxed
@given(v=st.floats(width=64) | st.floats(-12, 12))
@example(v=1.0)
@example(v=-3.5)
def test_activations_are_the_scalar_transcription(name, site_type, v):
    x, sp = site([v], site_type), Spec(site_type)
    with np.errstate(all="ignore"):
        want = sp.array([spec_activation(sp, name, x[0])], (1,))
    assert_same_bits(getattr(ref, name)(x, site=site_type), want)


@activations
@all_sites
def test_activations_are_the_scalar_transcription_on_a_grid(name, site_type):
    # a dense grid where the functions bend, then the ends: subnormals, near-overflow
    extremes = [-0.0, 1e-30, -1e-30, 60.0, -60.0, 1e-40, 1e-310, 3e38, -3e38, 1.7e308, -1.7e308]
    x, sp = site(np.concatenate([np.linspace(-9, 9, 1201), extremes]), site_type), Spec(site_type)
    with np.errstate(all="ignore"):
        want = sp.array([spec_activation(sp, name, v) for v in x], x.shape)
    assert_same_bits(getattr(ref, name)(x, site=site_type), want)


def spec_linear(sp: Spec, x, w, b=None):
    (rows, k_in), cols = x.shape, w.shape[0]
    out = []
    for m in range(rows):
        for n in range(cols):
            acc = sp.zero
            for k in range(k_in):
                acc = acc + (sp.W(x[m, k]) * sp.W(w[n, k]))
            if b is not None:
                acc = acc + sp.W(b[n])
            out.append(sp.S(acc))
    return sp.array(out, (rows, cols))


def spec_matmul(sp: Spec, a, b, trans_a, trans_b, group):
    out = []
    for i in range(a.shape[0]):
        a_i = a[i].T if trans_a else a[i]
        b_i = b[i // group].T if trans_b else b[i // group]
        for m in range(a_i.shape[0]):
            for n in range(b_i.shape[1]):
                acc = sp.zero
                for k in range(a_i.shape[1]):
                    acc = acc + (sp.W(a_i[m, k]) * sp.W(b_i[k, n]))
                out.append(sp.S(acc))
    return sp.array(out, (a.shape[0], a_i.shape[0], b_i.shape[1]))


def spec_layernorm(sp: Spec, x, g, b, eps):
    out = []
    n = sp.R(x.shape[1])
    for row in x:
        s = sp.zero
        for v in row:
            s = s + sp.W(v)
        mean = s / n
        var = sp.zero
        for v in row:
            t = sp.W(v) - mean
            var = var + (t * t)
        var = var / n
        rstd = sp.A(1.0) / np.sqrt(var + sp.R(eps))
        for d, v in enumerate(row):
            t = sp.W(v) - mean
            t = t * rstd
            t = t * sp.W(g[d])
            t = t + sp.W(b[d])
            out.append(sp.S(t))
    return sp.array(out, x.shape)


def spec_rmsnorm(sp: Spec, x, g, eps):
    out = []
    n = sp.R(x.shape[1])
    for row in x:
        ss = sp.zero
        for v in row:
            ss = ss + (sp.W(v) * sp.W(v))
        rstd = sp.A(1.0) / np.sqrt((ss / n) + sp.R(eps))
        out += [sp.S((sp.W(v) * rstd) * sp.W(g[d])) for d, v in enumerate(row)]
    return sp.array(out, x.shape)


def spec_l2norm(sp: Spec, x, eps):
    out = []
    for row in x:
        ss = sp.zero
        for v in row:
            ss = ss + (sp.W(v) * sp.W(v))
        r = np.sqrt(ss)
        den = sp.R(eps) if r < sp.R(eps) else r
        out += [sp.S(sp.W(v) / den) for v in row]
    return sp.array(out, x.shape)


def spec_softmax(sp: Spec, x, keep, causal, offset):
    out = []
    batches, rows, cols = x.shape
    for bi in range(batches):
        for i in range(rows):
            visible = [
                not (causal and j > i + offset) and not (keep is not None and keep[j] == 0)
                for j in range(cols)
            ]
            if not any(visible):
                out += [sp.S(sp.zero)] * cols
                continue
            m = sp.A(-np.inf)
            for j in range(cols):
                if visible[j] and sp.W(x[bi, i, j]) > m:
                    m = sp.W(x[bi, i, j])
            e = {j: sp.T("exp", sp.W(x[bi, i, j]) - m) for j in range(cols) if visible[j]}
            s = sp.zero
            for j in range(cols):
                if visible[j]:
                    s = s + e[j]
            out += [sp.S(e[j] / s) if visible[j] else sp.S(sp.zero) for j in range(cols)]
    return sp.array(out, x.shape)


def spec_rope(sp: Spec, x, theta, pos0, pairing):
    positions, heads, dim = x.shape
    h = dim // 2
    y = np.empty(x.shape, dtype=x.dtype)
    l = libm_twin.log(np.array([np.float64(theta)]))[0]
    for t in range(positions):
        for i in range(h):
            a = np.float64(2 * i) / np.float64(dim)
            freq = libm_twin.exp(np.array([-(a * l)]))[0]
            angle = np.float64(pos0 + t) * freq
            c = sp.A(libm_twin.cos(np.array([angle]))[0])
            s = sp.A(libm_twin.sin(np.array([angle]))[0])
            j0, j1 = (i, i + h) if pairing == "half" else (2 * i, 2 * i + 1)
            for hd in range(heads):
                x0, x1 = sp.W(x[t, hd, j0]), sp.W(x[t, hd, j1])
                y[t, hd, j0] = sp.S((x0 * c) - (x1 * s))
                y[t, hd, j1] = sp.S((x0 * s) + (x1 * c))
    return y


def spec_mean_pool(sp: Spec, x, keep):
    out = []
    for d in range(x.shape[1]):
        s, n = sp.zero, 0
        for t in range(x.shape[0]):
            if keep[t] != 0:
                s = s + sp.W(x[t, d])
                n = n + 1
        out.append(sp.S(s / sp.R(max(n, 1))))
    return sp.array(out, (x.shape[1],))


def spec_argmax(sp: Spec, x):
    out = []
    for row in x:
        nans = [j for j, v in enumerate(row) if np.isnan(sp.W(v))]
        if nans:
            out.append(nans[0])
            continue
        best = 0
        for j in range(len(row)):
            if sp.W(row[j]) > sp.W(row[best]):
                best = j
        out.append(best)
    return np.array(out, dtype=np.int32)


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e-30, 3.0e38])


def messy(rng: np.random.Generator, shape, site_type: str, specials: float) -> np.ndarray:
    """Normal values with a share of zeros, infinities, NaN and extremes, at a site."""
    values = rng.normal(size=shape) * 3
    hit = rng.random(size=shape) < specials
    values[hit] = rng.choice(SPECIALS, size=int(hit.sum()))
    return site(values, site_type)


specials_share = st.sampled_from([0.0, 0.0, 0.1, 0.5])


@all_sites
@relaxed
@given(
    seed=seeds, m=small, n=small, k=st.integers(1, 9), has_b=st.booleans(), specials=specials_share
)
def test_linear_is_the_scalar_transcription(site_type, seed, m, n, k, has_b, specials):
    rng, sp = np.random.default_rng(seed), Spec(site_type)
    x, w, b = (messy(rng, shape, site_type, specials) for shape in ((m, k), (n, k), (n,)))
    b = b if has_b else None
    with np.errstate(all="ignore"):
        assert_same_bits(ref.linear(x, w, b, site=site_type), spec_linear(sp, x, w, b))


@all_sites
@relaxed
@given(
    seed=seeds, heads=st.integers(1, 2), group=st.integers(1, 3), m=small, n=small,
    k=st.integers(1, 6), trans_a=st.booleans(), trans_b=st.booleans(), specials=specials_share,
)  # fmt: skip
def test_matmul_is_the_scalar_transcription(
    site_type, seed, heads, group, m, n, k, trans_a, trans_b, specials
):
    rng, sp = np.random.default_rng(seed), Spec(site_type)
    a = messy(rng, (heads * group, k, m) if trans_a else (heads * group, m, k), site_type, specials)
    b = messy(rng, (heads, n, k) if trans_b else (heads, k, n), site_type, specials)
    got = ref.matmul(a, b, site=site_type, trans_a=trans_a, trans_b=trans_b, group=group)
    with np.errstate(all="ignore"):
        assert_same_bits(got, spec_matmul(sp, a, b, trans_a, trans_b, group))


@all_sites
@relaxed
@given(
    seed=seeds, m=small, d=st.integers(1, 9), eps=st.sampled_from([1e-5, 1e-12, 0.0, 0.3]),
    specials=specials_share,
)  # fmt: skip
def test_normalizations_are_the_scalar_transcription(site_type, seed, m, d, eps, specials):
    rng, sp = np.random.default_rng(seed), Spec(site_type)
    x, g, b = (messy(rng, shape, site_type, specials) for shape in ((m, d), (d,), (d,)))
    with np.errstate(all="ignore"):
        want = spec_layernorm(sp, x, g, b, eps)
        assert_same_bits(ref.layernorm(x, g, b, site=site_type, eps=eps), want)
        assert_same_bits(ref.rmsnorm(x, g, site=site_type, eps=eps), spec_rmsnorm(sp, x, g, eps))
        assert_same_bits(ref.l2norm(x, site=site_type, eps=eps), spec_l2norm(sp, x, eps))


@all_sites
@relaxed
@given(
    seed=seeds, batches=st.integers(1, 2), m=small, n=st.integers(1, 7), causal=st.booleans(),
    offset=st.integers(-2, 3), keep_bits=st.none() | st.integers(0, 127), specials=specials_share,
)  # fmt: skip
def test_softmax_is_the_scalar_transcription(
    site_type, seed, batches, m, n, causal, offset, keep_bits, specials
):
    rng, sp = np.random.default_rng(seed), Spec(site_type)
    x = messy(rng, (batches, m, n), site_type, specials)
    keep = None if keep_bits is None else keep_mask(keep_bits, n)
    got = ref.softmax(x, keep, site=site_type, causal=causal, offset=offset)
    with np.errstate(all="ignore"):
        assert_same_bits(got, spec_softmax(sp, x, keep, causal, offset))


@all_sites
@relaxed
@given(
    seed=seeds, positions=small, heads=st.integers(1, 3), half=small, pos0=st.integers(0, 3000),
    theta=st.sampled_from([10000.0, 500000.0, 1.5]), pairing=pairings,
    specials=specials_share,
)  # fmt: skip
def test_rope_is_the_scalar_transcription(
    site_type, seed, positions, heads, half, pos0, theta, pairing, specials
):
    rng, sp = np.random.default_rng(seed), Spec(site_type)
    x = messy(rng, (positions, heads, 2 * half), site_type, specials)
    got = ref.rope(x, site=site_type, theta=theta, pos0=pos0, pairing=pairing)
    with np.errstate(all="ignore"):
        assert_same_bits(got, spec_rope(sp, x, theta, pos0, pairing))


@all_sites
@relaxed
@given(
    seed=seeds, t=st.integers(1, 7), d=small, keep_bits=st.integers(0, 127), specials=specials_share
)
def test_pooling_and_selection_are_the_scalar_transcription(
    site_type, seed, t, d, keep_bits, specials
):
    rng, sp = np.random.default_rng(seed), Spec(site_type)
    x = messy(rng, (t, d), site_type, specials)
    keep = keep_mask(keep_bits, t) * np.int32(rng.integers(1, 4))  # any non-zero keeps
    with np.errstate(all="ignore"):
        assert_same_bits(ref.mean_pool(x, keep, site=site_type), spec_mean_pool(sp, x, keep))
        assert ref.argmax(x, site=site_type).tolist() == spec_argmax(sp, x).tolist()


# ---- 5. the catalogue: every primitive at every site type ---------------------------------

# (primitive, operand shapes, attributes): small cases touching every operand and flag
CASES = [
    ("add", {"a": (2, 3), "b": (2, 3)}, {}),
    ("sub", {"a": (4,), "b": (4,)}, {}),
    ("mul", {"a": (1, 2, 3), "b": (1, 2, 3)}, {}),
    ("scale", {"x": (2, 3)}, {"s": 0.125}),
    ("silu", {"x": (5,)}, {}),
    ("silu", {"x": ()}, {}),
    ("gelu_tanh", {"x": (2, 2, 2)}, {}),
    ("gelu_erf", {"x": (3, 1)}, {}),
    ("linear", {"x": (2, 3), "w": (4, 3), "b": (4,)}, {"has_b": True}),
    ("linear", {"x": (1, 5), "w": (2, 5)}, {}),
    ("matmul", {"a": (4, 2, 3), "b": (2, 4, 3)}, {"trans_b": True, "group": 2}),
    ("matmul", {"a": (2, 3, 2), "b": (2, 3, 4)}, {"trans_a": True}),
    ("embedding", {"table": (5, 3), "ids": (4,)}, {}),
    ("layernorm", {"x": (2, 4), "g": (4,), "b": (4,)}, {"eps": 1e-6}),
    ("rmsnorm", {"x": (3, 4), "g": (4,)}, {}),
    ("l2norm", {"x": (2, 3)}, {}),
    ("softmax", {"x": (2, 3, 4), "keep": (4,)}, {"has_keep": True, "causal": True, "offset": 1}),
    ("softmax", {"x": (1, 2, 5)}, {}),
    ("rope", {"x": (3, 2, 4)}, {"pos0": 5, "pairing": "interleaved"}),
    ("rope", {"x": (2, 1, 6)}, {"theta": 500000.0}),
    ("mean_pool", {"x": (3, 4), "keep": (3,)}, {}),
    ("argmax", {"x": (2, 5)}, {}),
    ("reshape", {"x": (2, 3)}, {"shape": (3, 1, 2)}),
    ("transpose", {"x": (2, 3, 4)}, {"perm": (2, 0, 1)}),
    ("transpose", {"x": ()}, {"perm": ()}),
    ("slice", {"x": (2, 5)}, {"axis": 1, "start": 1, "stop": 4}),
    ("concat", {"a": (2, 3), "b": (1, 3)}, {"axis": 0}),
    ("cache_write", {"cache": (2, 5, 3), "rows": (2, 1, 3)}, {"pos": 4}),
    ("quantize", {"x": (2, 7)}, {"block": 3}),
    ("qlinear_w", {"x": (2, 7), "wq": (3, 4), "wd": (3, 2), "b": (3,)}, {"fmt": "q4", "block": 4, "has_b": True}),
    ("qlinear_i", {"xq": (2, 7), "xd": (2, 3), "wq": (3, 7), "wd": (3, 3)}, {"fmt": "q8", "block": 3}),
    ("rope", {"x": (3, 2, 4)}, {"pos0": 2, "inverse": True}),
    # the backward (section 17): f64 and f32 only
    ("linear_bar_x", {"x": (2, 3), "w": (4, 3), "dy": (2, 4), "acc": (2, 3)}, {}),
    ("linear_bar_w", {"x": (2, 3), "dy": (2, 4), "acc": (4, 3)}, {}),
    ("linear_bar_b", {"dy": (2, 4), "acc": (4,)}, {}),
    ("matmul_bar_a", {"b": (2, 4, 3), "dy": (4, 2, 4), "acc": (4, 2, 3)}, {"trans_b": True, "group": 2}),
    ("matmul_bar_b", {"a": (2, 3, 2), "dy": (2, 2, 4), "acc": (2, 3, 4)}, {"trans_a": True}),
    ("embedding_bar", {"ids": (4,), "dy": (4, 3), "acc": (5, 3)}, {}),
    ("norm_bar_g", {"x": (3, 4), "dy": (3, 4), "acc": (4,)}, {"kind": "rmsnorm"}),
    ("mean_pool_bar", {"keep": (3,), "dy": (4,), "acc": (3, 4)}, {}),
    ("sum_rows", {"x": (5,), "acc": ()}, {}),
    ("layernorm_bar_x", {"x": (2, 4), "g": (4,), "dy": (2, 4)}, {"eps": 1e-6}),
    ("rmsnorm_bar_x", {"x": (3, 4), "g": (4,), "dy": (3, 4)}, {}),
    ("softmax_bar", {"probs": (2, 3, 4), "dy": (2, 3, 4), "keep": (4,)}, {"has_keep": True, "causal": True}),
    ("gelu_tanh_bar", {"x": (2, 3), "dy": (2, 3)}, {}),
    ("silu_bar", {"x": (5,), "dy": (5,)}, {}),
    ("xent_rows", {"logits": (3, 5), "targets": (3,)}, {}),
    ("xent_bar", {"logits": (3, 5), "targets": (3,), "r": ()}, {"ignore": 0}),
    ("adamw", {"param": (2, 3), "g": (2, 3), "m": (2, 3), "v": (2, 3), "h": (8,)}, {"decays": True}),
    ("fill", {}, {"shape": (2, 3), "value": -0.0}),
    ("xent_mean", {"x": (), "targets": (2, 3)}, {"ignore": 0}),
    ("iota", {}, {"start": 2, "length": 3}),
]


def case_inputs(name: str, shapes, site_type: str, seed: int = 0, attrs=None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    prim = get_primitive(name)
    inputs = {}
    for operand, shape in shapes.items():
        kind = prim.operand_kind(operand, attrs)
        if kind == "i32":
            high = {"ids": shapes.get("table", shapes.get("acc", (2,)))[0] + 1, "targets": 6}.get(operand, 2)
            inputs[operand] = rng.integers(-1, high, size=shape).astype(np.int32)
        elif kind in ("i8", "u8"):
            low, high = (-127, 128) if kind == "i8" else (0, 256)
            inputs[operand] = rng.integers(low, high, size=shape).astype(types.kind_dtype(kind, site_type))
        elif kind in ("f32", "acc"):
            inputs[operand] = (rng.normal(size=shape) * 0.01).astype(types.kind_dtype(kind, site_type))
        else:
            inputs[operand] = site(rng.normal(size=shape) * 2, site_type)
    return inputs


@pytest.mark.parametrize("site_type", ["f64", "f32"])
def test_fill_iota_and_xent_mean_give_the_loss_grad_graph_its_constants_rows_and_mean(site_type):
    zero = ref.run("fill", site_type, {}, {"shape": (2, 3)})["y"]
    assert zero.shape == (2, 3) and not np.signbit(zero).any() and (zero == 0).all()  # +0: an adjoint's start
    assert ref.run("fill", site_type, {}, {"shape": (), "value": 0.1})["y"] == types.round_to_site(0.1, site_type)
    targets = np.array([[3, -100, 0], [-100, 7, 7]], np.int32)  # 4 of 6 count
    total = site(10.0, site_type)
    want = types.round_to_site(10.0, site_type) / types.round_to_site(4.0, site_type)
    assert ref.run("xent_mean", site_type, {"x": np.asarray(total), "targets": targets})["y"] == want
    assert ref.run("xent_mean", site_type, {"x": np.asarray(total), "targets": targets}, {"ignore": 3})["y"] == 2.0
    one = ref.run("fill", site_type, {}, {"shape": (), "value": 1.0})["y"]
    r = ref.run("xent_mean", site_type, {"x": one, "targets": targets[:, :1] * 0}, {"ignore": 5})["y"]
    assert r == 0.5  # r = 1 ⊘ n, n = 2
    rows = ref.run("iota", site_type, {}, {"start": 3, "length": 4})["y"]  # a slice's rows [3, 7)
    assert rows.dtype == np.int32 and rows.tolist() == [3, 4, 5, 6]


def test_cases_cover_the_catalogue():
    assert {c[0] for c in CASES} == set(PRIMITIVES) == set(ref.FUNCTIONS)


@all_sites
@pytest.mark.parametrize("name, shapes, attrs", CASES, ids=[c[0] for c in CASES])
def test_every_primitive_gives_its_catalogue_dtype_and_shape(site_type, name, shapes, attrs):
    inputs = case_inputs(name, shapes, site_type, attrs=attrs)
    if site_type not in get_primitive(name).sites:  # the backward's: refused in one line
        with pytest.raises(PrimitiveError, match=f"^{name} at {site_type}: .* f64 or f32 [^\n]*$"):
            ref.run(name, site_type, inputs, attrs)
        return
    before = {k: v.copy() for k, v in inputs.items()}
    outputs = ref.run(name, site_type, inputs, attrs)
    expected = get_primitive(name).outputs(shapes, attrs)
    assert sorted(outputs) == sorted(expected)
    for k in inputs:  # inputs are never written
        assert_bits_equal(before[k], inputs[k], f"input {k}", every_bit=True)
    # the plain function is the same computation
    full = get_primitive(name).full_attrs(attrs)
    operands = [inputs[o] for o in get_primitive(name).operand_names(full)]
    kwargs = {k: v for k, v in attrs.items() if not k.startswith("has_")}
    plain = ref.FUNCTIONS[name](*operands, site=site_type, **kwargs)
    plain = plain if isinstance(plain, dict) else {"y": plain}
    for out, (shape, kind) in expected.items():
        y = outputs[out]
        assert y.shape == shape
        assert y.dtype == types.kind_dtype(kind, site_type)
        if y.dtype.kind == "i":
            assert (plain[out] == y).all()
        else:
            assert_same_bits(plain[out], y)
        if site_type == "bf16" and kind == "x":  # every bf16 result NaN is canonical (the inputs hold none)
            nan = np.isnan(y.astype(np.float32))
            assert (types.bits(y)[nan] == 0x7FC0).all()


Z12 = np.zeros((1, 2))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ref.add(np.zeros(2, np.float32), np.zeros(2, np.float32), site="f64"), "float32"),
        (lambda: ref.run("add", "f64", {"a": np.zeros(2), "b": np.zeros(3)}), "same shape"),
        (lambda: ref.run("linear", "f64", {"x": Z12, "w": Z12, "b": np.zeros(1)}), "takes"),
        (lambda: ref.run("softmax", "f64", {"x": Z12[None]}, {"temp": 2.0}), "unknown attribute"),
        (lambda: ref.embedding(Z12, np.zeros(2, np.int64), site="f64"), "int32"),
        (lambda: ref.run("nope", "f64", {}), "unknown primitive"),
        (lambda: ref.linear(np.zeros((1, 2)), np.zeros((3, 2)), site="f16"), "unknown site type"),
        (lambda: ref.rope(np.zeros((1, 1, 3)), site="f64"), "even"),
    ],
)
def test_bad_calls_are_refused_with_the_rule(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- 6. the backend's own discipline ---------------------------------------------------------

FORBIDDEN_NUMPY = {
    # pairwise or BLAS order
    "sum", "mean", "dot", "matmul", "einsum", "cumsum", "prod", "inner", "outer", "tensordot",
    "vdot", "linalg", "var", "std", "average", "nansum", "nanmean", "trace",
    # the platform's transcendentals
    "exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "tanh", "sinh", "cosh",
    "sin", "cos", "tan", "arctan", "power", "float_power", "emath",
    # reductions that pick a value: the spec writes strict-> loops
    "max", "min", "amax", "amin", "argmax", "argmin", "nanmax", "maximum", "minimum", "fmax",
}  # fmt: skip
# reductions as methods, whatever they are called on (x.sum(), x.max(), ...)
FORBIDDEN_METHODS = {
    "sum", "mean", "dot", "cumsum", "prod", "var", "std", "max", "min", "argmax",
    "reduce", "accumulate",
}  # fmt: skip


def test_backend_calls_no_pairwise_blas_or_platform_transcendental():
    folder = Path(ref.__file__).parent
    problems = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "np" and node.attr in FORBIDDEN_NUMPY:
                    problems.append(f"{where} np.{node.attr}")
                if node.value.id in ("math", "scipy"):
                    problems.append(f"{where} {node.value.id}.{node.attr}")
            if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_METHODS:
                if not (isinstance(node.value, ast.Name) and node.value.id in ("np", "builtins")):
                    problems.append(f"{where} .{node.attr}")
            operator = getattr(node, "op", None)
            if isinstance(operator, (ast.MatMult, ast.Pow)):  # BLAS; the platform's pow
                problems.append(f"{where} {type(node.op).__name__}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] in ("math", "scipy", "torch") for n in names):
                    problems.append(f"{where} import {names}")
    assert not problems, problems


# ---- the reference's guards, and conversions given a wider type


PROMOTED = "an operand was promoted (a float64 constant next to a float32 array?)"


def test_store_refuses_a_promoted_array_with_the_whole_rule():
    with pytest.raises(TypeError, match=re.escape(
            f"store at f32: got float64, the accumulator type is float32; {PROMOTED}")):
        arith.store(np.zeros(2), "f32")
    with pytest.raises(TypeError, match=re.escape(
            f"store at bf16: got float64, the accumulator type is float32; {PROMOTED}")):
        arith.store(np.zeros(2), "bf16")


def test_transcendental_refuses_a_promoted_array_naming_the_function():
    with pytest.raises(TypeError, match=re.escape(
            f"transcendental(tanh) at f32: got float64, the accumulator type is float32; {PROMOTED}")):
        arith.transcendental("tanh", np.zeros(3), "f32")


def test_libm64_takes_float64_only_and_checks_what_the_twin_returns(monkeypatch):
    with pytest.raises(TypeError, match=re.escape(
            "libm64(exp): values have dtype float32; they must be float64")):
        arith.libm64("exp", np.zeros(3, dtype=np.float32))
    monkeypatch.setattr(libm_twin, "exp", lambda x: np.asarray(x, dtype=np.float32))
    with pytest.raises(TypeError, match=re.escape(
            "libm_twin.exp returned float32 (3,) for float64 (3,); "
            "it must return float64 of the same shape")):
        arith.libm64("exp", np.zeros(3))
    monkeypatch.setattr(libm_twin, "exp", lambda x: np.asarray(x)[:2])
    with pytest.raises(TypeError, match=re.escape("libm_twin.exp returned float64 (2,) for float64 (3,)")):
        arith.libm64("exp", np.zeros(3))


def test_run_checks_the_backend_against_the_catalogue(monkeypatch):
    a = types.round_to_site([1.0, 2.0], "f32")
    wrong_dtype = lambda a, b, site: np.zeros(2, dtype=np.float64)  # noqa: E731
    monkeypatch.setitem(reference.FUNCTIONS, "add", wrong_dtype)
    with pytest.raises(AssertionError, match=re.escape(
            "reference add at f32 gave float64 (2,); the catalogue says float32 (2,)")):
        reference.run("add", "f32", {"a": a, "b": a})
    wrong_shape = lambda a, b, site: np.zeros(3, dtype=np.float32)  # noqa: E731
    monkeypatch.setitem(reference.FUNCTIONS, "add", wrong_shape)
    with pytest.raises(AssertionError, match=re.escape(
            "reference add at f32 gave float32 (3,); the catalogue says float32 (2,)")):
        reference.run("add", "f32", {"a": a, "b": a})


def test_bf16_is_reached_through_f32_even_from_a_float64_argument():
    # 1 + 2^-8 + 2^-30: f32 drops the 2^-30, leaving a bf16 tie that goes to even (1.0);
    # rounding the f64 straight to bf16 would see no tie and give 1 + 2^-7.
    x = [1.0 + 2.0**-8 + 2.0**-30, -(1.0 + 2.0**-8 + 2.0**-30)]
    assert types.bits(types.f32_to_bf16(x)).tolist() == [0x3F80, 0xBF80]
    assert types.bits(types.f32_to_bf16(np.array(x))).tolist() == [0x3F80, 0xBF80]


def test_store_gives_the_site_type_whatever_it_is_given():
    for site, dtype in (("f32", np.float32), ("f64", np.float64)):
        out = types.store(np.array([0.1, 1e30]), site)
        assert out.dtype == dtype
        assert out.tolist() == np.array([0.1, 1e30]).astype(dtype).tolist()


# ---- the reference's refusals of bad operands


def test_the_reference_names_a_bad_operand_and_the_fix():
    x = types.round_to_site([[1.0, 2.0]], "f32")
    with pytest.raises(PrimitiveError, match=re.escape(
            "argmax: operand x is a list; it must be a numpy array")):
        reference.run("argmax", "f32", {"x": [[1.0, 2.0]]})
    with pytest.raises(PrimitiveError, match=re.escape(
            "argmax at f64: operand x has dtype float32; it must be float64 (round reals to "
            "the site with exactc.exporter.types.round_to_site(v, 'f64'))")):
        reference.run("argmax", "f64", {"x": x})
    table = types.round_to_site([[1.0], [2.0]], "f32")
    with pytest.raises(PrimitiveError, match=re.escape(
            "embedding at f32: operand ids has dtype int64; it must be int32 "
            "(convert it with .astype(np.int32))")):
        reference.run("embedding", "f32", {"table": table, "ids": np.array([0, 1])})


def test_an_unknown_site_type_is_refused_with_the_known_ones():
    with pytest.raises(types.SiteTypeError, match=re.escape(
            "unknown site type 'f16'; exactc knows f64, f32, bf16")):
        types.check_site("f16")


# ---- a quantized operand of the wrong dtype, refused whole


_QUANTIZE = "(quantize with exactc.exporter.quant)"

_X32 = types.round_to_site(np.zeros((2, 8)), "f32")

_QI = {"xq": np.zeros((2, 8), np.int8), "xd": np.zeros((2, 2), np.float64),
       "wq": np.zeros((3, 8), np.int8), "wd": np.zeros((3, 2), np.float32)}  # qlinear_i at f64, block 4

_QW = {"x": _X32, "wq": np.zeros((3, 4), np.uint8), "wd": np.zeros((3, 2), np.float32)}  # qlinear_w q4 at f32


# (primitive, site, attributes, the operands, the whole message): one operand of each
# quantized kind (i8, acc, u8, f32) given in another dtype
QUANTIZED_DTYPES = [
    ("qlinear_i", "f64", {"block": 4}, {**_QI, "xq": _QI["xq"].astype(np.int16)},
     f"qlinear_i at f64: operand xq has dtype int16; it must be int8 {_QUANTIZE}"),
    ("qlinear_i", "f64", {"block": 4}, {**_QI, "xd": _QI["xd"].astype(np.float32)},
     f"qlinear_i at f64: operand xd has dtype float32; it must be float64 {_QUANTIZE}"),
    ("qlinear_w", "f32", {"fmt": "q4", "block": 4}, {**_QW, "wq": _QW["wq"].astype(np.int8)},
     f"qlinear_w at f32: operand wq has dtype int8; it must be uint8 {_QUANTIZE}"),
    ("qlinear_w", "f32", {"fmt": "q4", "block": 4}, {**_QW, "wd": _QW["wd"].astype(np.float64)},
     f"qlinear_w at f32: operand wd has dtype float64; it must be float32 {_QUANTIZE}"),
]


@pytest.mark.parametrize("name, site, attrs, operands, message", QUANTIZED_DTYPES,
                         ids=["i8", "acc", "u8", "f32"])
def test_the_reference_refuses_a_quantized_operand_of_another_dtype_whole(name, site, attrs, operands, message):
    with pytest.raises(PrimitiveError, match=re.escape(message) + r"\Z"):
        reference.run(name, site, operands, attrs)


# ---- the reference's check of a backend against the catalogue, continued


def test_run_refuses_a_backend_whose_outputs_are_named_unlike_the_catalogue(monkeypatch):
    a = types.round_to_site([1.0, 2.0], "f32")
    monkeypatch.setitem(reference.FUNCTIONS, "add", lambda a, b, site: {"z": a + b})
    with pytest.raises(AssertionError) as caught:
        reference.run("add", "f32", {"a": a, "b": a})
    assert str(caught.value) == "reference add at f32 gave ['z']; the catalogue says ['y']"


def test_run_names_the_output_of_a_backend_that_gives_it_the_wrong_dtype(monkeypatch):
    # quantize has two outputs, q and d: a wrong one is named in the message (y is not)
    quantize = reference.FUNCTIONS["quantize"]

    def wide_scales(x, site, block):
        out = quantize(x, site=site, block=block)
        return {"q": out["q"], "d": out["d"].astype(np.float64)}

    monkeypatch.setitem(reference.FUNCTIONS, "quantize", wide_scales)
    x = types.round_to_site(np.arange(16.0).reshape(2, 8), "f32")
    with pytest.raises(AssertionError, match=re.escape(
            "reference quantize at f32 gave d = float64 (2, 2); the catalogue says float32 (2, 2)")):
        reference.run("quantize", "f32", {"x": x}, {"block": 4})
