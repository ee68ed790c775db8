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
from exactc.exporter.primitives import PrimitiveError
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


# ---- the backward primitives: the rules' own functions, one adjoint each ------------------------

# backward primitive: (the forward primitive, the operand whose adjoint it gives)
ADJOINTS = {
    "linear_bar_x": ("linear", "x"),
    "linear_bar_w": ("linear", "w"),
    "linear_bar_b": ("linear", "b"),
    "matmul_bar_a": ("matmul", "a"),
    "matmul_bar_b": ("matmul", "b"),
    "embedding_bar": ("embedding", "table"),
    "norm_bar_g": ("layernorm", "g"),
    "mean_pool_bar": ("mean_pool", "x"),
    "layernorm_bar_x": ("layernorm", "x"),
    "rmsnorm_bar_x": ("rmsnorm", "x"),
    "softmax_bar": ("softmax", "x"),
    "gelu_tanh_bar": ("gelu_tanh", "x"),
    "silu_bar": ("silu", "x"),
}
TERMS = ("layernorm_bar_x", "rmsnorm_bar_x", "softmax_bar", "gelu_tanh_bar", "silu_bar")


def _adjoint_so_far(shape, site: str, seed: int) -> np.ndarray:
    """A drawn accumulator with signed zeros among its values: what a term must leave alone."""
    acc = np.random.default_rng(seed).standard_normal(shape).astype(np.dtype(site.replace("f", "float")))
    flat = acc.reshape(-1)
    flat[::3] = -0.0
    flat[1::5] = 0.0
    return acc


def _rule_and_primitive(name: str, forward: str, case_operands, attrs, site: str, seed: int):
    """(the rule's adjoint from acc, the primitive's: its y, or add(acc, term))."""
    dtype = np.dtype(site.replace("f", "float"))
    operands = {k: v.astype(dtype) if v.dtype.kind == "f" else v for k, v in case_operands.items()}
    if forward == "linear" and "b" not in operands:
        operands["b"] = np.zeros(operands["w"].shape[0], dtype)
        attrs = dict(attrs, has_b=True)
    y = reference.run(forward, site, operands, attrs)["y"]
    dy = np.random.default_rng(seed + 1).standard_normal(y.shape).astype(dtype)
    operand = ADJOINTS[name][1]
    acc = _adjoint_so_far(operands[operand].shape, site, seed)
    bars = {operand: acc.copy()}
    full = backward.get_primitive(forward).full_attrs(attrs)
    backward.apply(forward, dy, y, operands, full, bars, site)
    prim = backward.get_primitive(name)
    given_operands = {"dy": dy, "acc": acc, "probs": y, **operands}
    given_attrs = {k: v for k, v in full.items() if k in prim.attrs}
    if name == "norm_bar_g":
        given_attrs["kind"] = forward
    names = prim.operand_names(given_attrs)
    got = reference.run(name, site, {k: given_operands[k] for k in names}, given_attrs)["y"]
    if name in TERMS:
        got = reference.run("add", site, {"a": acc, "b": got})["y"]
    return bars[operand], got


@pytest.mark.parametrize("name", sorted(ADJOINTS))
@pytest.mark.parametrize("site", ["f64", "f32"])
@settings(deadline=None, max_examples=25)
@given(data=st.data())
def test_each_backward_primitive_gives_its_rule_s_adjoint_bit_for_bit(name, site, data):
    """An accumulating primitive from acc, or add(acc, term) for a term one, is the rule's
    ⊕= into acc, every bit (signed zeros in acc included)."""
    forward = ADJOINTS[name][0]
    if name == "norm_bar_g":
        forward = data.draw(st.sampled_from(["layernorm", "rmsnorm"]), label="kind")
    case = data.draw(gradient_cases(forward), label="case")
    rule, got = _rule_and_primitive(name, forward, case.inputs(), case.attr_dict, site, data.draw(st.integers(0, 99)))
    assert_bits_equal(rule, got, f"{name} at {site}", every_bit=True)


def test_a_masked_column_s_term_is_minus_zero_so_add_keeps_the_adjoint():
    """softmax's rule gives a masked column no term; the primitive's -0 there keeps every
    acc through add (acc ⊕ -0 = acc, -0 included), where +0 would turn a -0 into +0."""
    y = reference.run("softmax", "f32", {"x": _f32(1, 3, 4)}, {"causal": True})["y"]
    term = reference.run("softmax_bar", "f32", {"probs": y, "dy": _f32(1, 3, 4, seed=1)}, {"causal": True})["y"]
    masked = ~np.tril(np.ones((3, 4), bool))[None]
    assert np.all(term[masked] == 0) and np.all(np.signbit(term[masked]))
    acc = np.full((1, 3, 4), -0.0, np.float32)
    assert np.all(np.signbit(reference.run("add", "f32", {"a": acc, "b": term})["y"][masked]))
    assert not np.any(np.signbit(acc + np.float32(0.0)))


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_rope_s_backward_is_the_forward_rope_inverse_added(pairing):
    x, dy = _f32(5, 2, 6), _f32(5, 2, 6, seed=1)
    attrs = {"theta": 10000.0, "pos0": 3, "pairing": pairing}
    acc = _adjoint_so_far(x.shape, "f32", 4)
    bars = {"x": acc.copy()}
    backward.apply("rope", dy, None, {"x": x}, attrs, bars, "f32")
    inverse = reference.run("rope", "f32", {"x": dy}, dict(attrs, inverse=True))["y"]
    assert_bits_equal(bars["x"], reference.run("add", "f32", {"a": acc, "b": inverse})["y"], "rope", every_bit=True)
    # and it is the rotation back: rope then its inverse is x up to rounding
    there = reference.run("rope", "f64", {"x": x.astype(np.float64)}, attrs)["y"]
    back = reference.run("rope", "f64", {"x": there}, dict(attrs, inverse=True))["y"]
    assert np.allclose(back, x, rtol=1e-12, atol=1e-12)


def test_the_loss_primitives_are_cross_entropy_rows():
    """xent_rows and xent_bar give cross_entropy_rows' losses and terms; a target equal to
    ignore does not count, nor one outside [0, V); sum_rows adds in order from acc."""
    logits = _f32(6, 7)
    targets = np.array([3, -100, 0, 6, 9, -2], np.int32)
    r = np.array(np.float32(1.0) / np.float32(3.0))
    counts = np.array([True, False, True, True, False, False])
    losses, terms = backward.cross_entropy_rows(logits, targets, counts, r[()], "f32")
    got_rows = reference.run("xent_rows", "f32", {"logits": logits, "targets": targets})["y"]
    got_bar = reference.run("xent_bar", "f32", {"logits": logits, "targets": targets, "r": r})["y"]
    assert_bits_equal(losses, got_rows, "xent_rows", every_bit=True)
    assert_bits_equal(terms, got_bar, "xent_bar", every_bit=True)
    assert not np.any(got_rows[~counts]) and not np.any(got_bar[~counts])
    total = reference.run("sum_rows", "f32", {"x": got_rows, "acc": np.array(np.float32(0.5))})["y"]
    want = np.float32(0.5)
    for value in got_rows:
        want = np.float32(want + value)
    assert total.shape == () and total == want


@pytest.mark.parametrize("decays", [False, True])
def test_the_adamw_primitive_is_adamw_step_s_element_lines(decays):
    """h holds the step's scalars rounded to the site; a clip of 1 is no clipping."""
    p, g, m, v = (_f32(4, 5, seed=s) for s in range(4))
    v = np.abs(v)
    host = {"clip": 1.0, "decay": 0.999, "w1": 0.1, "beta2": 0.999, "w2": 1e-3, "root": 0.03, "eps": 1e-8,
            "step": 3e-3}
    h = np.array([host[name] for name in backward.ADAMW_SCALARS]).astype(np.float32)
    got = reference.run("adamw", "f32", {"param": p, "g": g, "m": m, "v": v, "h": h}, {"decays": decays})
    at_site = {name: np.float32(host[name]) for name in backward.ADAMW_SCALARS} | {"clip": None}
    want = backward.adamw_elements(p, g, m, v, at_site, decays)
    for out, expected in zip(("param_out", "m_out", "v_out"), want):
        assert_bits_equal(expected, got[out], f"adamw {out}", every_bit=True)


def test_a_backward_primitive_refuses_bf16_in_one_line():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(PrimitiveError, match="f64 or f32") as info:
        reference.run("linear_bar_b", "bf16", {"dy": x, "acc": np.zeros(3, np.float32)})
    assert "\n" not in str(info.value)
