"""The backward rules of exactc/exporter/reference/backward.py (docs/semantics.md
section 17): each against central finite differences of the reference's own forward at
f64 (an oracle that needs no torch), on fixed cases and on drawn ones of odd and prime
extents; and the orders the spec states, pinned at f32 against explicit loops written
from its text (a reordered sum changes bits, not values)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactc.exporter import reference
from exactc.exporter.reference import backward
from exactc.strategies.gradients import GRADIENT_PRIMITIVES, gradient_cases
from exactc.verify.compare import assert_bits_equal


def _weighted_sum(primitive, operands, attrs, dy) -> float:
    y = reference.run(primitive, "f64", operands, attrs)["y"]
    return math.fsum((dy * y).ravel())


def finite_differences(primitive, operands, attrs, dy, name) -> np.ndarray:
    """d(Σ dy ⊙ y)/d operand[name], element by element, by central differences."""
    base = operands[name]
    out = np.zeros(base.shape)
    for index in np.ndindex(base.shape):
        h = 1e-6 * max(1.0, abs(base[index]))
        values = []
        for step in (h, -h):
            moved = base.copy()
            moved[index] += step
            values.append(_weighted_sum(primitive, dict(operands, **{name: moved}), attrs, dy))
        out[index] = (values[0] - values[1]) / (2 * h)
    return out


def check_against_differences(primitive, operands, attrs) -> None:
    y = reference.run(primitive, "f64", operands, attrs)["y"]
    dy = np.random.default_rng(7).standard_normal(y.shape)
    bars = backward.gradients(primitive, "f64", operands, attrs, dy)
    assert bars, f"{primitive}: no float operand"
    for name, got in bars.items():
        want = finite_differences(primitive, operands, attrs, dy, name)
        error = np.linalg.norm(got - want)
        assert error <= 1e-6 * np.linalg.norm(want) + 1e-8, (
            f"{primitive}: the adjoint of {name} is {error:.3g} from central differences "
            f"(norm {np.linalg.norm(want):.3g})\nrule:\n{got}\ndifferences:\n{want}"
        )


def _reals(*shape, seed=0, spread=1.0):
    return np.random.default_rng([seed, *shape]).standard_normal(shape) * spread


FIXED = {
    "add": ({"a": _reals(3, 5), "b": _reals(3, 5, seed=1)}, {}),
    "sub": ({"a": _reals(3, 5), "b": _reals(3, 5, seed=1)}, {}),
    "mul": ({"a": _reals(3, 5), "b": _reals(3, 5, seed=1)}, {}),
    "scale": ({"x": _reals(7, 3)}, {"s": -0.3}),
    "silu": ({"x": _reals(5, 7, spread=3.0)}, {}),
    "gelu_tanh": ({"x": _reals(5, 7, spread=3.0)}, {}),
    "linear": ({"x": _reals(5, 7), "w": _reals(3, 7, seed=1), "b": _reals(3, seed=2)}, {"has_b": True}),
    "matmul": ({"a": _reals(4, 3, 5), "b": _reals(2, 7, 5, seed=1)}, {"trans_b": True, "group": 2}),
    "embedding": ({"table": _reals(5, 3), "ids": np.array([1, 4, 1, 1, 0, 3, 4], np.int32)}, {}),
    "layernorm": ({"x": _reals(3, 7, spread=2.0), "g": _reals(7, seed=1), "b": _reals(7, seed=2)}, {"eps": 1e-5}),
    "rmsnorm": ({"x": _reals(3, 7, spread=2.0), "g": _reals(7, seed=1)}, {"eps": 1e-5}),
    "softmax": ({"x": _reals(2, 5, 5, spread=3.0)}, {"causal": True}),
    "rope": ({"x": _reals(5, 2, 6)}, {"theta": 10000.0, "pos0": 3}),
    "mean_pool": ({"x": _reals(5, 3), "keep": np.array([1, 0, 1, 1, 0], np.int32)}, {}),
    "reshape": ({"x": _reals(3, 4)}, {"shape": (2, 6)}),
    "transpose": ({"x": _reals(2, 3, 5)}, {"perm": (2, 0, 1)}),
    "slice": ({"x": _reals(5, 3)}, {"axis": 0, "start": 1, "stop": 4}),
    "concat": ({"a": _reals(2, 3), "b": _reals(4, 3, seed=1)}, {"axis": 0}),
}


def test_every_rule_has_a_fixed_case():
    assert sorted(FIXED) == sorted(backward.RULES)
    assert set(GRADIENT_PRIMITIVES) <= set(backward.RULES)


@pytest.mark.parametrize("primitive", sorted(FIXED))
def test_each_rule_matches_central_differences(primitive):
    operands, attrs = FIXED[primitive]
    check_against_differences(primitive, operands, attrs)


@pytest.mark.parametrize("primitive", GRADIENT_PRIMITIVES)
@settings(deadline=None)
@given(data=st.data())
def test_drawn_rules_match_central_differences(primitive, data):
    case = data.draw(gradient_cases(primitive), label="case")
    check_against_differences(case.primitive, case.inputs(), case.attr_dict)


def test_a_repeated_token_adds_every_one_of_its_rows():
    table = np.zeros((3, 2))
    dy = np.array([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]])
    ids = np.array([2, 0, 2, 3, -1], np.int32)  # the last two outside [0, V): no term
    dy = np.concatenate([dy, np.full((2, 2), 1000.0)])
    bars = backward.gradients("embedding", "f64", {"table": table, "ids": ids}, {}, dy)
    assert bars["table"].tolist() == [[10.0, 20.0], [0.0, 0.0], [101.0, 202.0]]


# ---- the orders of the spec, bit for bit at f32 -----------------------------------------------


def _f32(*shape, seed=0):
    return (np.random.default_rng([seed, *shape]).standard_normal(shape) * 3).astype(np.float32)


def test_linear_adjoints_sum_in_the_spec_order_at_f32():
    """x̄ over n in order, w̄ and b̄ over the rows m in order, each from its accumulator."""
    M, K, N = 37, 5, 3
    x, w, b, dy = _f32(M, K), _f32(N, K, seed=1), _f32(N, seed=2), _f32(M, N, seed=3)
    bars = backward.gradients("linear", "f32", {"x": x, "w": w, "b": b}, {"has_b": True}, dy)
    want_x, want_w, want_b = np.zeros((M, K), np.float32), np.zeros((N, K), np.float32), np.zeros(N, np.float32)
    for m in range(M):
        for k in range(K):
            for n in range(N):
                want_x[m, k] = np.float32(want_x[m, k] + np.float32(dy[m, n] * w[n, k]))
    for n in range(N):
        for m in range(M):
            want_b[n] = np.float32(want_b[n] + dy[m, n])
            for k in range(K):
                want_w[n, k] = np.float32(want_w[n, k] + np.float32(dy[m, n] * x[m, k]))
    for name, want in (("x", want_x), ("w", want_w), ("b", want_b)):
        assert_bits_equal(want, bars[name], f"linear {name}̄", every_bit=True)


def test_the_embedding_scatter_adds_in_token_order_at_f32():
    V, D, T = 3, 4, 29
    table, dy = _f32(V, D), _f32(T, D, seed=1)
    ids = np.random.default_rng(3).integers(0, V, T).astype(np.int32)
    bars = backward.gradients("embedding", "f32", {"table": table, "ids": ids}, {}, dy)
    want = np.zeros((V, D), np.float32)
    for t in range(T):
        for d in range(D):
            want[ids[t], d] = np.float32(want[ids[t], d] + dy[t, d])
    assert_bits_equal(want, bars["table"], "embedding tablē", every_bit=True)


def test_a_grouped_key_head_sums_its_query_heads_in_head_order_at_f32():
    group, heads, M, K, N = 3, 2, 11, 2, 3
    a, b, dy = _f32(heads * group, M, K), _f32(heads, K, N, seed=1), _f32(heads * group, M, N, seed=2)
    bars = backward.gradients("matmul", "f32", {"a": a, "b": b}, {"group": group}, dy)
    want = np.zeros((heads, K, N), np.float32)
    for j in range(heads):
        for k in range(K):
            for n in range(N):
                for i in range(j * group, j * group + group):
                    for m in range(M):
                        want[j, k, n] = np.float32(want[j, k, n] + np.float32(dy[i, m, n] * a[i, m, k]))
    assert_bits_equal(want, bars["b"], "matmul b̄", every_bit=True)


def test_bf16_is_not_a_training_site():
    with pytest.raises(backward.BackwardError, match="f64 or f32"):
        backward.gradients("add", "bf16", {}, {}, np.zeros(1))
