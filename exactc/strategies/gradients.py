"""Strategies for gradient cases: one differentiable primitive at f64 on small operands
of odd and prime extents (the favoured dimensions up to 7), finite values only, so
that central differences can check its backward rule (docs/semantics.md section 17).
A case is the forward's Case (strategies/cases.py), made again from its seeds."""

from __future__ import annotations

from hypothesis import strategies as st

from exactc.strategies.cases import Case, _case
from exactc.strategies.tensors import IntSpec, TensorSpec, dims

GRADIENT_PRIMITIVES = (
    "add",
    "sub",
    "mul",
    "scale",
    "silu",
    "gelu_tanh",
    "linear",
    "matmul",
    "embedding",
    "layernorm",
    "rmsnorm",
    "softmax",
    "rope",
    "mean_pool",
)


def _reals(draw, shape, spread: float = 1.0) -> TensorSpec:
    distribution = draw(st.sampled_from(["normal", "uniform"]))
    return TensorSpec(tuple(shape), "f64", draw(st.integers(0, 2**32 - 1)), distribution, spread)


def _small(draw) -> int:
    return draw(dims(7))


@st.composite
def gradient_cases(draw, primitive: str | None = None) -> Case:
    """A case of `primitive` (drawn from GRADIENT_PRIMITIVES when None) at f64."""
    name = primitive or draw(st.sampled_from(GRADIENT_PRIMITIVES))
    m, n, k = _small(draw), _small(draw), _small(draw)
    if name in ("add", "sub", "mul"):
        return _case(name, "f64", {}, {"a": _reals(draw, (m, n)), "b": _reals(draw, (m, n))})
    if name in ("scale", "silu", "gelu_tanh"):
        attrs = {"s": draw(st.sampled_from([0.25, -3.0, 0.17677669529663687]))} if name == "scale" else {}
        return _case(name, "f64", attrs, {"x": _reals(draw, (m, n), 2.0)})
    if name == "linear":
        has_b = draw(st.booleans())
        specs = {"x": _reals(draw, (m, k)), "w": _reals(draw, (n, k))}
        if has_b:
            specs["b"] = _reals(draw, (n,))
        return _case(name, "f64", {"has_b": has_b}, specs)
    if name == "matmul":
        group, heads = draw(st.sampled_from([1, 2, 3])), draw(st.integers(1, 2))
        trans_a, trans_b = draw(st.booleans()), draw(st.booleans())
        a = (heads * group, k, m) if trans_a else (heads * group, m, k)
        b = (heads, n, k) if trans_b else (heads, k, n)
        return _case(
            name,
            "f64",
            {"trans_a": trans_a, "trans_b": trans_b, "group": group},
            {"a": _reals(draw, a), "b": _reals(draw, b)},
        )
    if name == "embedding":  # more positions than rows: repeated tokens
        return _case(
            name,
            "f64",
            {},
            {"table": _reals(draw, (m, n)), "ids": IntSpec((m + k,), draw(st.integers(0, 2**32 - 1)), 0, m)},
        )
    if name in ("layernorm", "rmsnorm"):
        specs = {"x": _reals(draw, (m, n + 1)), "g": _reals(draw, (n + 1,))}
        if name == "layernorm":
            specs["b"] = _reals(draw, (n + 1,))
        return _case(name, "f64", {"eps": draw(st.sampled_from([1e-5, 1e-12, 0.1]))}, specs)
    if name == "softmax":
        causal = draw(st.booleans())
        return _case(
            name,
            "f64",
            {"causal": causal, "offset": draw(st.integers(0, 2)) if causal else 0, "has_keep": False},
            {"x": _reals(draw, (draw(st.integers(1, 2)), m, n), 3.0)},
        )
    if name == "rope":
        attrs = {
            "theta": draw(st.sampled_from([10000.0, 10.0])),
            "pos0": draw(st.sampled_from([0, 5])),
            "pairing": draw(st.sampled_from(["half", "interleaved"])),
        }
        return _case(name, "f64", attrs, {"x": _reals(draw, (m, draw(st.integers(1, 2)), 2 * k))})
    if name == "mean_pool":
        keep = IntSpec((m,), draw(st.integers(0, 2**32 - 1)), 0, 2)
        return _case(name, "f64", {}, {"x": _reals(draw, (m, n)), "keep": keep})
    raise ValueError(f"no gradient cases for {name}; the primitives with a backward are {GRADIENT_PRIMITIVES}")
