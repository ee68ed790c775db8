"""The backward rule of each differentiable primitive, a literal reading of
docs/semantics.md section 17.

A rule adds its terms into the adjoints of its operands, in place and in the order the
spec states: `bars` maps an operand's name to its accumulator (an array of the
accumulator type, the operand's shape), and an operand without one (an integer operand,
or a value that does not reach the loss) is absent. As in ops.py, parallel axes are
numpy axes and every ordered reduction is a Python loop, one rounded operation per step;
`acc[...] = acc + term` is the spec's `acc ⊕= term`.

    bars = {"x": zeros, "w": zeros, "b": zeros}
    backward.RULES["linear"](dy, y, {"x": x, "w": w, "b": b}, {"has_b": True}, bars, "f64")

`gradients` runs one primitive forward and backward from fresh accumulators, the form
the tests take it in.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable, Mapping

import numpy as np

from exactc.exporter import reference, types
from exactc.exporter.primitives import get_primitive
from exactc.exporter.reference import ops
from exactc.exporter.reference.arith import real, transcendental, zeros

TRAINING_SITES = ("f64", "f32")

Bars = dict[str, np.ndarray]
Rule = Callable[[np.ndarray, np.ndarray, Mapping[str, np.ndarray], Mapping[str, Any], Bars, str], None]


class BackwardError(ValueError):
    """A primitive or site the backward does not cover."""


def check_training_site(site: str) -> str:
    types.check_site(site)
    if site not in TRAINING_SITES:
        raise BackwardError(f"site {site}: gradients are computed at f64 or f32 (docs/semantics.md section 17)")
    return site


def _add(bars: Bars, name: str, term: np.ndarray) -> None:
    """bars[name] ⊕= term, element by element (no term when the operand has no adjoint)."""
    bar = bars.get(name)
    if bar is not None:
        bar[...] = bar + term


# ---- elementwise --------------------------------------------------------------------------


def add(dy, y, operands, attrs, bars, site):
    _add(bars, "a", dy)
    _add(bars, "b", dy)


def sub(dy, y, operands, attrs, bars, site):
    _add(bars, "a", dy)
    _add(bars, "b", -dy)  # negation is exact


def mul(dy, y, operands, attrs, bars, site):
    _add(bars, "a", dy * operands["b"])
    _add(bars, "b", dy * operands["a"])


def scale(dy, y, operands, attrs, bars, site):
    _add(bars, "x", dy * real(attrs["s"], site))


def silu(dy, y, operands, attrs, bars, site):
    """q = σ(x)·(1 + x·(1 - σ(x))), σ(x) = 1 ⊘ (1 ⊕ T(exp, ⊖x))."""
    x, one = operands["x"], real(1.0, site)
    e = transcendental("exp", -x, site)
    p = one / (one + e)
    q = one - p
    q = x * q
    q = one + q
    q = p * q
    _add(bars, "x", dy * q)


def gelu_tanh(dy, y, operands, attrs, bars, site):
    """PyTorch's tanh-approximate gelu_backward, in its order."""
    x, one, half = operands["x"], real(1.0, site), real(0.5, site)
    c0, c1 = real(ops.SQRT_2_OVER_PI, site), real(ops.GELU_TANH_CUBIC, site)
    c3 = real(3.0, site) * c1
    s, t = ops.gelu_tanh_inner(x, site)
    left = half * x
    right = one + t
    dl = half * right
    q = t * t
    q = one - q
    dr = left * q
    k = c3 * s
    k = one + k
    du = c0 * k
    q = dr * du
    q = dl + q
    _add(bars, "x", dy * q)


# ---- linear algebra -----------------------------------------------------------------------


def linear(dy, y, operands, attrs, bars, site):
    """x̄ over n in order, then w̄ and b̄ over the rows m in order."""
    x, w = operands["x"], operands["w"]
    if "x" in bars:
        for n in range(w.shape[0]):
            _add(bars, "x", dy[:, n, None] * w[None, n, :])
    if "w" in bars:
        for m in range(x.shape[0]):
            _add(bars, "w", dy[m, :, None] * x[None, m, :])
    if "b" in bars:
        for m in range(x.shape[0]):
            _add(bars, "b", dy[m])


def matmul(dy, y, operands, attrs, bars, site):
    """Ā_i over n in order; B̄_j over the query heads of its group in order, then m."""
    a, b = operands["a"], operands["b"]
    group = attrs["group"]
    a_view = a.transpose(0, 2, 1) if attrs["trans_a"] else a  # (I, M, K)
    b_view = b.transpose(0, 2, 1) if attrs["trans_b"] else b  # (J, K, N)
    views: Bars = {}
    if "a" in bars:
        views["a"] = bars["a"].transpose(0, 2, 1) if attrs["trans_a"] else bars["a"]
    if "b" in bars:
        views["b"] = bars["b"].transpose(0, 2, 1) if attrs["trans_b"] else bars["b"]
    heads = a_view.shape[0]
    if "a" in views:
        b_of = b_view[np.arange(heads) // group]  # (I, K, N)
        for n in range(dy.shape[2]):
            _add(views, "a", dy[:, :, n, None] * b_of[:, None, :, n])
    if "b" in views:
        kv = b_view.shape[0]
        for r in range(group):  # head j·group + r of every group j: in head order per j
            i = np.arange(kv) * group + r
            for m in range(dy.shape[1]):
                _add(views, "b", a_view[i, m, :, None] * dy[i, m, None, :])


# ---- gathers, pooling ---------------------------------------------------------------------


def embedding(dy, y, operands, attrs, bars, site):
    """tablē[ids[t]] ⊕= ȳ[t] for t in token order, a repeated token every time."""
    table_bar = bars.get("table")
    if table_bar is None:
        return
    ids = operands["ids"]
    for t in range(ids.shape[0]):
        if 0 <= ids[t] < table_bar.shape[0]:
            table_bar[ids[t]] = table_bar[ids[t]] + dy[t]


def mean_pool(dy, y, operands, attrs, bars, site):
    keep = operands["keep"]
    count = real(builtins.max(int(np.count_nonzero(keep)), 1), site)
    term = dy / count  # (D,)
    for t in range(keep.shape[0]):
        if keep[t] != 0 and "x" in bars:
            bars["x"][t] = bars["x"][t] + term


# ---- normalizations -----------------------------------------------------------------------


def layernorm(dy, y, operands, attrs, bars, site):
    x, g = operands["x"], operands["g"]
    mean, rstd = ops.layernorm_stats(x, site, attrs["eps"])  # the forward's bits
    n = real(x.shape[1], site)
    xhat = (x - mean[:, None]) * rstd[:, None]
    a = dy * g[None, :]
    a_d, ax_d = ops.reduction_first(a, 1), ops.reduction_first(a * xhat, 1)
    sa, sb = zeros(x.shape[0], site), zeros(x.shape[0], site)
    for d in range(x.shape[1]):
        sa = sa + a_d[d]
    for d in range(x.shape[1]):
        sb = sb + ax_d[d]
    ma, mb = sa / n, sb / n
    _add(bars, "x", ((a - ma[:, None]) - (xhat * mb[:, None])) * rstd[:, None])
    for m in range(x.shape[0]):
        _add(bars, "g", dy[m] * xhat[m])
        _add(bars, "b", dy[m])


def rmsnorm(dy, y, operands, attrs, bars, site):
    x, g = operands["x"], operands["g"]
    rstd = ops.rmsnorm_rstd(x, site, attrs["eps"])  # the forward's bits
    n = real(x.shape[1], site)
    xhat = x * rstd[:, None]
    a = dy * g[None, :]
    ax_d = ops.reduction_first(a * xhat, 1)
    sb = zeros(x.shape[0], site)
    for d in range(x.shape[1]):
        sb = sb + ax_d[d]
    mb = sb / n
    _add(bars, "x", (a - (xhat * mb[:, None])) * rstd[:, None])
    for m in range(x.shape[0]):
        _add(bars, "g", dy[m] * xhat[m])


# ---- softmax, rope ------------------------------------------------------------------------


def softmax(dy, y, operands, attrs, bars, site):
    """x̄[j] ⊕= y[j] ⊗ (ȳ[j] ⊖ dot), dot the row's Σ y ⊗ ȳ over visible columns in order."""
    batches, rows, cols = y.shape
    visible = ops._visible(rows, cols, attrs["causal"], attrs["offset"], operands.get("keep"))[None]
    y_j, dy_j = ops.reduction_first(y, 2), ops.reduction_first(dy, 2)  # (N, B, M)
    visible_j = ops.reduction_first(visible, 2)
    dot = zeros((batches, rows), site)
    for j in range(cols):
        dot = np.where(visible_j[j], dot + y_j[j] * dy_j[j], dot)
    term = y * (dy - dot[:, :, None])
    if "x" in bars:
        bars["x"][...] = np.where(visible, bars["x"] + term, bars["x"])


def rope(dy, y, operands, attrs, bars, site):
    """The inverse rotation: x̄0 ⊕= ȳ0 c ⊕ ȳ1 s, then x̄1 ⊕= ȳ1 c ⊖ ȳ0 s."""
    positions, _, dim = dy.shape
    c, s = ops.rope_tables(positions, dim, site=site, theta=attrs["theta"], pos0=attrs["pos0"])
    c, s = c[:, None, :], s[:, None, :]
    i0, i1 = ops._pair_indices(dim, attrs["pairing"])
    dy0, dy1 = dy[:, :, i0], dy[:, :, i1]
    bar = bars.get("x")
    if bar is not None:
        bar[:, :, i0] = bar[:, :, i0] + ((dy0 * c) + (dy1 * s))
        bar[:, :, i1] = bar[:, :, i1] + ((dy1 * c) - (dy0 * s))


# ---- views: the adjoint moved back to where each element came from -----------------------


def reshape(dy, y, operands, attrs, bars, site):
    _add(bars, "x", dy.reshape(operands["x"].shape))


def transpose(dy, y, operands, attrs, bars, site):
    _add(bars, "x", dy.transpose(np.argsort(attrs["perm"])))


def slice(dy, y, operands, attrs, bars, site):
    bar = bars.get("x")
    if bar is not None:
        index = [builtins.slice(None)] * bar.ndim
        index[attrs["axis"]] = builtins.slice(attrs["start"], attrs["stop"])
        bar[tuple(index)] = bar[tuple(index)] + dy


def concat(dy, y, operands, attrs, bars, site):
    axis, first = attrs["axis"], operands["a"].shape[attrs["axis"]]
    _add(bars, "a", np.take(dy, np.arange(first), axis=axis))
    _add(bars, "b", np.take(dy, np.arange(first, dy.shape[axis]), axis=axis))


RULES: dict[str, Rule] = {
    f.__name__: f
    for f in [
        add, sub, mul, scale, silu, gelu_tanh,
        linear, matmul, embedding, mean_pool,
        layernorm, rmsnorm, softmax, rope,
        reshape, transpose, slice, concat,
    ]
}  # fmt: skip


def apply(
    primitive: str,
    dy: np.ndarray,
    y: np.ndarray,
    operands: Mapping[str, np.ndarray],
    attrs: Mapping[str, Any],
    bars: Bars,
    site: str,
) -> None:
    """Add the terms of `primitive`'s backward into `bars`, with IEEE values quiet."""
    rule = RULES.get(primitive)
    if rule is None:
        raise BackwardError(f"{primitive} has no backward rule; exactc differentiates {', '.join(sorted(RULES))}")
    with np.errstate(all="ignore"):
        rule(dy, y, operands, attrs, bars, site)


def gradients(
    primitive: str, site: str, operands: Mapping[str, np.ndarray], attrs: Mapping[str, Any] | None, dy: np.ndarray
) -> Bars:
    """The adjoints of `primitive`'s float operands for the output adjoint `dy`, from
    accumulators at +0: the forward by the reference, then the rule."""
    check_training_site(site)
    prim = get_primitive(primitive)
    full = prim.full_attrs(attrs)
    y = reference.run(primitive, site, operands, full)["y"]
    bars = {
        name: zeros(operands[name].shape, site)
        for name in prim.operand_names(full)
        if prim.operand_kind(name, full) == "x"
    }
    apply(primitive, dy, y, {k: operands[k] for k in prim.operand_names(full)}, full, bars, site)
    return bars
