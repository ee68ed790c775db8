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

Each rule is made of per-adjoint functions (`linear_w`, `norm_x_term`, ...), and the
backward primitives of the catalogue (exporter/primitives.py: `linear_bar_w`,
`layernorm_bar_x`, ...; FUNCTIONS below, which reference.run calls) are those same
functions on one adjoint: an accumulating primitive adds into a copy of its `acc`, a
term primitive gives the term the rule adds. The loss's rows and AdamW's element lines
live here too, for the same reason (reference/training.py calls them).
"""

from __future__ import annotations

import builtins
from typing import Any, Callable, Mapping

import numpy as np

from exactc.exporter import types
from exactc.exporter.primitives import ADAMW_SCALARS, TRAINING_SITES, get_primitive
from exactc.exporter.reference import ops
from exactc.exporter.reference.arith import full, real, transcendental, zeros

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


def silu_term(x: np.ndarray, dy: np.ndarray, site: str) -> np.ndarray:
    """ȳ ⊗ q, q = σ(x)·(1 + x·(1 - σ(x))), σ(x) = 1 ⊘ (1 ⊕ T(exp, ⊖x))."""
    one = real(1.0, site)
    e = transcendental("exp", -x, site)
    p = one / (one + e)
    q = one - p
    q = x * q
    q = one + q
    q = p * q
    return dy * q


def silu(dy, y, operands, attrs, bars, site):
    _add(bars, "x", silu_term(operands["x"], dy, site))


def gelu_tanh_term(x: np.ndarray, dy: np.ndarray, site: str) -> np.ndarray:
    """ȳ ⊗ q, q PyTorch's tanh-approximate gelu_backward, in its order."""
    one, half = real(1.0, site), real(0.5, site)
    c0, c1 = real(ops.SQRT_2_OVER_PI, site), real(ops.GELU_TANH_CUBIC, site)
    c3 = np.multiply(real(3.0, site), c1)  # one rounding in A
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
    return dy * q


def gelu_tanh(dy, y, operands, attrs, bars, site):
    _add(bars, "x", gelu_tanh_term(operands["x"], dy, site))


# ---- linear algebra -----------------------------------------------------------------------


def linear_x(bar: np.ndarray, dy: np.ndarray, w: np.ndarray) -> None:
    """x̄[m,k] ⊕= ȳ[m,n] ⊗ w[n,k] for n in order."""
    for n in range(w.shape[0]):
        bar[...] = bar + dy[:, n, None] * w[None, n, :]


def linear_w(bar: np.ndarray, dy: np.ndarray, x: np.ndarray) -> None:
    """w̄[n,k] ⊕= ȳ[m,n] ⊗ x[m,k] for the rows m in order."""
    for m in range(x.shape[0]):
        bar[...] = bar + dy[m, :, None] * x[None, m, :]


def linear_b(bar: np.ndarray, dy: np.ndarray) -> None:
    """b̄[n] ⊕= ȳ[m,n] for the rows m in order (linear's bias, layernorm's b)."""
    for m in range(dy.shape[0]):
        bar[...] = bar + dy[m]


def linear(dy, y, operands, attrs, bars, site):
    """x̄ over n in order, then w̄ and b̄ over the rows m in order."""
    if "x" in bars:
        linear_x(bars["x"], dy, operands["w"])
    if "w" in bars:
        linear_w(bars["w"], dy, operands["x"])
    if "b" in bars:
        linear_b(bars["b"], dy)


def _matmul_view(array: np.ndarray, transposed: bool) -> np.ndarray:
    return array.transpose(0, 2, 1) if transposed else array


def matmul_a(bar: np.ndarray, dy: np.ndarray, b: np.ndarray, attrs: Mapping[str, Any]) -> None:
    """Ā_i[m,k] ⊕= ȳ[i,m,n] ⊗ B_i[k,n] for n in order (Ā_i the view of ā[i])."""
    view = _matmul_view(bar, attrs["trans_a"])  # (I, M, K), a view: terms land in bar
    b_of = _matmul_view(b, attrs["trans_b"])[np.arange(view.shape[0]) // attrs["group"]]  # (I, K, N)
    for n in range(dy.shape[2]):
        view[...] = view + dy[:, :, n, None] * b_of[:, None, :, n]


def matmul_b(bar: np.ndarray, dy: np.ndarray, a: np.ndarray, attrs: Mapping[str, Any]) -> None:
    """B̄_j ⊕= over the query heads of group j in order, then m: ȳ[i,m,n] ⊗ A_i[m,k]."""
    view, a_view, group = _matmul_view(bar, attrs["trans_b"]), _matmul_view(a, attrs["trans_a"]), attrs["group"]
    kv = view.shape[0]
    for r in range(group):  # head j·group + r of every group j: in head order per j
        i = np.arange(kv) * group + r
        for m in range(dy.shape[1]):
            view[...] = view + a_view[i, m, :, None] * dy[i, m, None, :]


def matmul(dy, y, operands, attrs, bars, site):
    """Ā_i over n in order; B̄_j over the query heads of its group in order, then m."""
    if "a" in bars:
        matmul_a(bars["a"], dy, operands["b"], attrs)
    if "b" in bars:
        matmul_b(bars["b"], dy, operands["a"], attrs)


# ---- gathers, pooling ---------------------------------------------------------------------


def embedding_table(table_bar: np.ndarray, dy: np.ndarray, ids: np.ndarray) -> None:
    """tablē[ids[t]] ⊕= ȳ[t] for t in token order, a repeated token every time."""
    for t in range(ids.shape[0]):
        if 0 <= ids[t] < table_bar.shape[0]:
            table_bar[ids[t]] = table_bar[ids[t]] + dy[t]


def embedding(dy, y, operands, attrs, bars, site):
    if "table" in bars:
        embedding_table(bars["table"], dy, operands["ids"])


def mean_pool_x(bar: np.ndarray, dy: np.ndarray, keep: np.ndarray, site: str) -> None:
    """x̄[t] ⊕= ȳ ⊘ R_A(max(n, 1)) for every kept t."""
    count = real(builtins.max(int(np.count_nonzero(keep)), 1), site)
    term = dy / count  # (D,)
    for t in range(keep.shape[0]):
        if keep[t] != 0:
            bar[t] = bar[t] + term


def mean_pool(dy, y, operands, attrs, bars, site):
    if "x" in bars:
        mean_pool_x(bars["x"], dy, operands["keep"], site)


# ---- normalizations -----------------------------------------------------------------------


def norm_xhat(x: np.ndarray, kind: str, eps: float, site: str) -> tuple[np.ndarray, np.ndarray]:
    """xhat and rstd of each row of x (M, D), from the forward's stats (the same bits)."""
    if kind == "layernorm":
        mean, rstd = ops.layernorm_stats(x, site, eps)
        return (x - mean[:, None]) * rstd[:, None], rstd
    rstd = ops.rmsnorm_rstd(x, site, eps)
    return x * rstd[:, None], rstd


def _row_mean(values: np.ndarray, site: str) -> np.ndarray:
    """s = +0; for d in order: s = s ⊕ values[d]; s ⊘ R_A(D), per row of (M, D)."""
    by_d = ops.reduction_first(values, 1)
    s = zeros(values.shape[0], site)
    for d in range(values.shape[1]):
        s = s + by_d[d]
    return s / real(values.shape[1], site)


def norm_x_term(kind: str, x: np.ndarray, g: np.ndarray, dy: np.ndarray, eps: float, site: str) -> np.ndarray:
    """The term x̄ ⊕= adds: ((a ⊖ ma) ⊖ (xhat ⊗ mb)) ⊗ rstd (layernorm), (a ⊖ (xhat ⊗ mb))
    ⊗ rstd (rmsnorm), a = ȳ ⊗ g."""
    xhat, rstd = norm_xhat(x, kind, eps, site)
    a = dy * g[None, :]
    mb = _row_mean(a * xhat, site)
    centred = a - _row_mean(a, site)[:, None] if kind == "layernorm" else a
    return (centred - (xhat * mb[:, None])) * rstd[:, None]


def norm_g(bar: np.ndarray, dy: np.ndarray, x: np.ndarray, kind: str, eps: float, site: str) -> None:
    """ḡ[d] ⊕= ȳ[m,d] ⊗ xhat[m,d] for the rows m in order."""
    xhat, _ = norm_xhat(x, kind, eps, site)
    for m in range(x.shape[0]):
        bar[...] = bar + dy[m] * xhat[m]


def _norm(kind: str, dy, operands, attrs, bars, site) -> None:
    """x̄, then ḡ and b̄ over the rows in order (each row's two terms land in two
    accumulators, so ḡ's rows and then b̄'s are the same bits)."""
    x, g, eps = operands["x"], operands["g"], attrs["eps"]
    _add(bars, "x", norm_x_term(kind, x, g, dy, eps, site))
    if "g" in bars:
        norm_g(bars["g"], dy, x, kind, eps, site)
    if "b" in bars:
        linear_b(bars["b"], dy)


def layernorm(dy, y, operands, attrs, bars, site):
    _norm("layernorm", dy, operands, attrs, bars, site)


def rmsnorm(dy, y, operands, attrs, bars, site):
    _norm("rmsnorm", dy, operands, attrs, bars, site)


# ---- softmax, rope ------------------------------------------------------------------------


def softmax_term(y: np.ndarray, dy: np.ndarray, visible: np.ndarray, site: str) -> np.ndarray:
    """y[j] ⊗ (ȳ[j] ⊖ dot), dot the row's Σ y ⊗ ȳ over visible columns in order (masked
    columns' values are computed and not used)."""
    batches, rows, cols = y.shape
    y_j, dy_j = ops.reduction_first(y, 2), ops.reduction_first(dy, 2)  # (N, B, M)
    visible_j = ops.reduction_first(visible, 2)
    dot = zeros((batches, rows), site)
    for j in range(cols):
        dot = np.where(visible_j[j], dot + y_j[j] * dy_j[j], dot)
    term = y * (dy - dot[:, :, None])
    return term


def softmax_visible(y: np.ndarray, attrs: Mapping[str, Any], keep: np.ndarray | None) -> np.ndarray:
    rows, cols = y.shape[1:]
    return ops._visible(rows, cols, attrs["causal"], attrs["offset"], keep)[None]


def softmax(dy, y, operands, attrs, bars, site):
    """x̄[j] ⊕= y[j] ⊗ (ȳ[j] ⊖ dot) for visible j; masked columns get no term."""
    visible = softmax_visible(y, attrs, operands.get("keep"))
    term = softmax_term(y, dy, visible, site)
    if "x" in bars:
        bars["x"][...] = np.where(visible, bars["x"] + term, bars["x"])


def rope(dy, y, operands, attrs, bars, site):
    """The inverse rotation (the forward rope with inverse=True): x̄0 ⊕= ȳ0 c ⊕ ȳ1 s, then
    x̄1 ⊕= ȳ1 c ⊖ ȳ0 s."""
    rotated = ops.rope(dy, site=site, theta=attrs["theta"], pos0=attrs["pos0"], pairing=attrs["pairing"], inverse=True)
    _add(bars, "x", rotated)


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
    attrs = prim.full_attrs(attrs)
    names = prim.operand_names(attrs)
    forward = {k: v for k, v in attrs.items() if not k.startswith("has_")}
    y = ops.FUNCTIONS[primitive](*[operands[k] for k in names], site=site, **forward)
    bars = {name: zeros(operands[name].shape, site) for name in names if prim.operand_kind(name, attrs) == "x"}
    apply(primitive, dy, y, {k: operands[k] for k in names}, attrs, bars, site)
    return bars


# ---- the loss's rows ------------------------------------------------------------------------


def row_softmax_sums(x: np.ndarray, site: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of logits x (T, V): the maximum m, e = T(exp, x ⊖ m) and s = Σ e in order."""
    x_j = np.ascontiguousarray(x.T)  # (V, T)
    m = full(x.shape[0], -np.inf, site)
    for j in range(x.shape[1]):
        m = np.where(x_j[j] > m, x_j[j], m)
    e = transcendental("exp", x - m[:, None], site)
    e_j = np.ascontiguousarray(e.T)
    s = zeros(x.shape[0], site)
    for j in range(x.shape[1]):
        s = s + e_j[j]
    return m, e, s


def cross_entropy_rows(
    logits: np.ndarray, targets: np.ndarray, counts: np.ndarray, r: np.generic, site: str
) -> tuple[np.ndarray, np.ndarray]:
    """Each counted row's loss (T,) (+0 where it does not count) and the logits' terms
    ((e ⊘ s) ⊖ [j = y]) ⊗ r (T, V), +0 in rows that do not count."""
    m, e, s = row_softmax_sums(logits, site)
    rows = np.arange(logits.shape[0])
    target = np.where(counts, targets, 0)
    picked = logits[rows, target]
    losses = transcendental("log", s, site) - (picked - m)
    p = e / s[:, None]
    p[rows, target] = np.where(counts, p[rows, target] - real(1.0, site), p[rows, target])
    terms = p * r
    return np.where(counts, losses, zeros((), site)), np.where(counts[:, None], terms, zeros((), site))


def counted_rows(logits: np.ndarray, targets: np.ndarray, ignore: int) -> np.ndarray:
    """The rows that count: a target other than `ignore`, in [0, V) (loss_grad refuses any
    other target before it starts, so for its rows this is targets != ignore)."""
    return (targets != ignore) & (targets >= 0) & (targets < logits.shape[1])


def sum_in_order(total: np.ndarray, values: np.ndarray) -> np.ndarray:
    """total ⊕ values[0] ⊕ values[1] ⊕ ..., in index order."""
    for t in range(values.shape[0]):
        total = total + values[t]
    return total


# ---- AdamW's element lines ------------------------------------------------------------------


def adamw_elements(p, g, m, v, scalars: Mapping[str, Any], decays: bool):
    """One update of p with gradient g and moments m, v (arrays of A); `scalars` the
    step's R_A(...) values by the names of ADAMW_SCALARS, "clip" None when the gradients
    are used as they are. Gives (p, m, v)."""
    clip = scalars["clip"]
    if clip is not None:
        g = g * clip
    if decays:
        p = p * scalars["decay"]
    mt = m + (scalars["w1"] * (g - m))
    vt = (v * scalars["beta2"]) + (scalars["w2"] * (g * g))
    den = (np.sqrt(vt) / scalars["root"]) + scalars["eps"]
    p = p - (scalars["step"] * (mt / den))
    return p, mt, vt


# ---- the backward primitives of the catalogue ---------------------------------------------
# Each checks its operands against the catalogue and runs the rule's own function on one
# adjoint: the accumulating ones on a copy of acc, the term ones give the term.


def _accumulate(name: str, site: str, operands: Mapping[str, Any], attrs: Mapping[str, Any], add_terms) -> np.ndarray:
    ops.check_operands(name, site, operands, attrs)
    y = operands["acc"].copy()
    with np.errstate(all="ignore"):
        add_terms(y)
    return y


def _term(name: str, site: str, operands: Mapping[str, Any], attrs: Mapping[str, Any], make) -> np.ndarray:
    ops.check_operands(name, site, operands, attrs)
    with np.errstate(all="ignore"):
        return make()


def linear_bar_x(x, w, dy, acc, *, site):
    return _accumulate("linear_bar_x", site, {"x": x, "w": w, "dy": dy, "acc": acc}, {}, lambda y: linear_x(y, dy, w))


def linear_bar_w(x, dy, acc, *, site):
    return _accumulate("linear_bar_w", site, {"x": x, "dy": dy, "acc": acc}, {}, lambda y: linear_w(y, dy, x))


def linear_bar_b(dy, acc, *, site):
    return _accumulate("linear_bar_b", site, {"dy": dy, "acc": acc}, {}, lambda y: linear_b(y, dy))


def matmul_bar_a(b, dy, acc, *, site, trans_a=False, trans_b=False, group=1):
    attrs = {"trans_a": trans_a, "trans_b": trans_b, "group": group}
    return _accumulate("matmul_bar_a", site, {"b": b, "dy": dy, "acc": acc}, attrs, lambda y: matmul_a(y, dy, b, attrs))


def matmul_bar_b(a, dy, acc, *, site, trans_a=False, trans_b=False, group=1):
    attrs = {"trans_a": trans_a, "trans_b": trans_b, "group": group}
    return _accumulate("matmul_bar_b", site, {"a": a, "dy": dy, "acc": acc}, attrs, lambda y: matmul_b(y, dy, a, attrs))


def embedding_bar(ids, dy, acc, *, site):
    return _accumulate(
        "embedding_bar", site, {"ids": ids, "dy": dy, "acc": acc}, {}, lambda y: embedding_table(y, dy, ids)
    )


def norm_bar_g(x, dy, acc, *, site, kind="layernorm", eps=1e-5):
    return _accumulate(
        "norm_bar_g",
        site,
        {"x": x, "dy": dy, "acc": acc},
        {"kind": kind, "eps": eps},
        lambda y: norm_g(y, dy, x, kind, eps, site),
    )


def mean_pool_bar(keep, dy, acc, *, site):
    return _accumulate(
        "mean_pool_bar", site, {"keep": keep, "dy": dy, "acc": acc}, {}, lambda y: mean_pool_x(y, dy, keep, site)
    )


def sum_rows(x, acc, *, site):
    ops.check_operands("sum_rows", site, {"x": x, "acc": acc}, {})
    with np.errstate(all="ignore"):
        return np.asarray(sum_in_order(acc.copy(), x))


def layernorm_bar_x(x, g, dy, *, site, eps=1e-5):
    return _term(
        "layernorm_bar_x",
        site,
        {"x": x, "g": g, "dy": dy},
        {"eps": eps},
        lambda: norm_x_term("layernorm", x, g, dy, eps, site),
    )


def rmsnorm_bar_x(x, g, dy, *, site, eps=1e-5):
    return _term(
        "rmsnorm_bar_x",
        site,
        {"x": x, "g": g, "dy": dy},
        {"eps": eps},
        lambda: norm_x_term("rmsnorm", x, g, dy, eps, site),
    )


def softmax_bar(probs, dy, keep=None, *, site, causal=False, offset=0):
    """The rule's term where visible and -0 in masked columns: acc ⊕ (-0) is acc for every
    acc (-0 and NaN included), so add(acc, term) is the rule's np.where bit for bit."""
    attrs = {"causal": causal, "offset": offset, "has_keep": keep is not None}

    def make():
        visible = softmax_visible(probs, attrs, keep)
        return np.where(visible, softmax_term(probs, dy, visible, site), full((), -0.0, site))

    return _term("softmax_bar", site, {"probs": probs, "dy": dy, "keep": keep}, attrs, make)


def gelu_tanh_bar(x, dy, *, site):
    return _term("gelu_tanh_bar", site, {"x": x, "dy": dy}, {}, lambda: gelu_tanh_term(x, dy, site))


def silu_bar(x, dy, *, site):
    return _term("silu_bar", site, {"x": x, "dy": dy}, {}, lambda: silu_term(x, dy, site))


def xent_rows(logits, targets, *, site, ignore=-100):
    def make():
        counts = counted_rows(logits, targets, ignore)
        return cross_entropy_rows(logits, targets, counts, real(1.0, site), site)[0]

    return _term("xent_rows", site, {"logits": logits, "targets": targets}, {"ignore": ignore}, make)


def xent_bar(logits, targets, r, *, site, ignore=-100):
    def make():
        counts = counted_rows(logits, targets, ignore)
        return cross_entropy_rows(logits, targets, counts, r[()], site)[1]

    return _term("xent_bar", site, {"logits": logits, "targets": targets, "r": r}, {"ignore": ignore}, make)


def adamw(param, g, m, v, h, *, site, decays=False):
    """adamw_elements with the scalars of h (ADAMW_SCALARS, each R_A(...) of the host's
    f64 value); a clip of 1 is no clipping: g ⊗ 1 is g, bit for bit."""
    ops.check_operands("adamw", site, {"param": param, "g": g, "m": m, "v": v, "h": h}, {"decays": decays})
    scalars = {name: h[i] for i, name in enumerate(ADAMW_SCALARS)}
    with np.errstate(all="ignore"):
        param_out, m_out, v_out = adamw_elements(param, g, m, v, scalars, decays)
    return {"param_out": param_out, "m_out": m_out, "v_out": v_out}


FUNCTIONS = {
    f.__name__: f
    for f in [
        linear_bar_x, linear_bar_w, linear_bar_b, matmul_bar_a, matmul_bar_b,
        embedding_bar, norm_bar_g, mean_pool_bar, sum_rows,
        layernorm_bar_x, rmsnorm_bar_x, softmax_bar, gelu_tanh_bar, silu_bar,
        xent_rows, xent_bar, adamw,
    ]
}  # fmt: skip
