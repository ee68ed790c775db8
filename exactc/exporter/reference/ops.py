"""One function per primitive, each a literal reading of docs/semantics.md.

Parallel axes (rows, batches, output columns) are numpy array axes; reduction axes are
Python loops in index order, one rounded numpy operation per step in the accumulator type
(so never np.sum, np.dot, @ or einsum: their order is pairwise or BLAS's). Comparisons
that pick a value (the softmax maximum, argmax) are strict-`>` loops as the spec writes
them. Views move bits, never values: they work on the raw bit patterns.

Every function takes arrays already of the site dtype (`types.numpy_dtype(site)`; int32
for ids and keep masks), checks them against the catalogue in exporter/primitives.py, and
returns an array of the site dtype (int32 for argmax).
"""

from __future__ import annotations

import builtins
import functools
from typing import Any, Mapping

import numpy as np

from exactc.exporter import quant, types
from exactc.exporter.primitives import K_FORMATS, K_SUPER_BLOCK, PrimitiveError, block_count, get_primitive
from exactc.exporter.reference import fma
from exactc.exporter.reference.arith import (
    full,
    libm64,
    quiet_nan_bits,
    real,
    store,
    transcendental,
    widen,
    zeros,
)

# The real constants of the GELUs (semantics.md section 2), as the f64 nearest to the
# real: sqrt(2/pi) = 0.79788456080286535588..., 1/sqrt(2) = 0.70710678118654752440...
# (hex literals, so that no f64 expression such as 1/math.sqrt(2), which is one ulp
# below, can creep in).
SQRT_2_OVER_PI = float.fromhex("0x1.9884533d43651p-1")
SQRT_1_2 = float.fromhex("0x1.6a09e667f3bcdp-1")
GELU_TANH_CUBIC = 0.044715


# ---- checking, bit patterns, reduction loops, IEEE mode ---------------------------------


def check_operands(
    name: str, site: str, operands: Mapping[str, Any], attrs: Mapping[str, Any]
) -> dict[str, tuple[tuple[int, ...], str]]:
    """Check operands (None = absent) against the catalogue; give the output shapes."""
    prim = get_primitive(name)
    prim.check_site(site)
    present = {k: v for k, v in operands.items() if v is not None}
    for k, v in present.items():
        if not isinstance(v, np.ndarray):
            raise PrimitiveError(
                f"{name}: operand {k} is a {type(v).__name__}; it must be a numpy array"
            )
    outputs = prim.outputs({k: v.shape for k, v in present.items()}, attrs)
    for k, v in present.items():
        kind = prim.operand_kind(k, attrs)
        want = types.kind_dtype(kind, site)
        if kind == "x":
            fix = f"round reals to the site with exactc.exporter.types.round_to_site(v, {site!r})"
        elif kind in ("i8", "u8", "f32", "acc"):
            fix = "quantize with exactc.exporter.quant"
        else:
            fix = f"convert it with .astype(np.{want})"
        if v.dtype != want:
            raise PrimitiveError(
                f"{name} at {site}: operand {k} has dtype {v.dtype}; it must be {want} ({fix})"
            )
    return outputs


def _bit_patterns(x: np.ndarray) -> np.ndarray:
    """The raw bits of x as unsigned integers of its width, same shape (0-d included)."""
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def reduction_first(x: np.ndarray, axis: int) -> np.ndarray:
    """x with the reduced axis moved first, contiguous: step k of a reduction loop reads
    the slice [k] in one sweep (pure data movement; the order of the sum is unchanged)."""
    return np.ascontiguousarray(np.moveaxis(x, axis, 0))


def _ieee(fn):
    """Run `fn` with numpy's floating-point warnings off: NaN and ∞ are values here."""

    @functools.wraps(fn)
    def quiet(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return quiet


# ---- 2. elementwise ----------------------------------------------------------------------


@_ieee
def add(a: np.ndarray, b: np.ndarray, *, site: str) -> np.ndarray:
    """y = S(W(a) ⊕ W(b))"""
    check_operands("add", site, {"a": a, "b": b}, {})
    return store(widen(a, site) + widen(b, site), site)


@_ieee
def sub(a: np.ndarray, b: np.ndarray, *, site: str) -> np.ndarray:
    """y = S(W(a) ⊖ W(b))"""
    check_operands("sub", site, {"a": a, "b": b}, {})
    return store(widen(a, site) - widen(b, site), site)


@_ieee
def mul(a: np.ndarray, b: np.ndarray, *, site: str) -> np.ndarray:
    """y = S(W(a) ⊗ W(b))"""
    check_operands("mul", site, {"a": a, "b": b}, {})
    return store(widen(a, site) * widen(b, site), site)


@_ieee
def scale(x: np.ndarray, *, site: str, s: float = 1.0) -> np.ndarray:
    """y = S(W(x) ⊗ R_A(s))"""
    check_operands("scale", site, {"x": x}, {"s": s})
    return store(widen(x, site) * real(s, site), site)


@_ieee
def silu(x: np.ndarray, *, site: str) -> np.ndarray:
    """e = T(exp, ⊖W(x));  y = S(W(x) ⊘ (1 ⊕ e))"""
    check_operands("silu", site, {"x": x}, {})
    x = widen(x, site)
    e = transcendental("exp", -x, site)
    return store(x / (real(1.0, site) + e), site)


@_ieee
def gelu_tanh(x: np.ndarray, *, site: str) -> np.ndarray:
    """GPT-2's GELU: 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))), in the spec's order."""
    check_operands("gelu_tanh", site, {"x": x}, {})
    x = widen(x, site)
    _, t = gelu_tanh_inner(x, site)
    return store((real(0.5, site) * x) * (real(1.0, site) + t), site)


def gelu_tanh_inner(x: np.ndarray, site: str) -> tuple[np.ndarray, np.ndarray]:
    """x ⊗ x and the tanh of gelu_tanh, in the spec's order, from the widened x (its
    backward reads both: docs/semantics.md section 17)."""
    c0, c1 = real(SQRT_2_OVER_PI, site), real(GELU_TANH_CUBIC, site)
    square = x * x
    u = square * x
    u = c1 * u
    u = x + u
    u = c0 * u
    return square, transcendental("tanh", u, site)


@_ieee
def gelu_erf(x: np.ndarray, *, site: str) -> np.ndarray:
    """BERT's GELU: e = T(erf, x ⊗ R_A(1/√2));  y = S((0.5 ⊗ x) ⊗ (1 ⊕ e))"""
    check_operands("gelu_erf", site, {"x": x}, {})
    x = widen(x, site)
    e = transcendental("erf", x * real(SQRT_1_2, site), site)
    return store((real(0.5, site) * x) * (real(1.0, site) + e), site)


# ---- 3. linear algebra -------------------------------------------------------------------


def multiply_add(acc: np.ndarray, u: np.ndarray, v: np.ndarray, fused: bool) -> np.ndarray:
    """One step of a product's sum: acc ⊕ (u ⊗ v), two roundings; fused (semantics.md
    section 18), fma_A(u, v, acc), one."""
    if fused:
        u, v, acc = np.broadcast_arrays(u, v, acc)
        return fma.fma(u, v, acc)
    return acc + u * v


@_ieee
def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *, site: str,
           fused: bool = False) -> np.ndarray:
    """y[m,n] = S((Σ_k in order W(x[m,k]) ⊗ W(w[n,k])) ⊕ W(b[n])), the sum from +0;
    `fused`: each step fma_A(W(x[m,k]), W(w[n,k]), acc)."""
    check_operands("linear", site, {"x": x, "w": w, "b": b}, {"has_b": b is not None})
    x_k = reduction_first(widen(x, site), 1)  # (K, M)
    w_k = reduction_first(widen(w, site), 1)  # (K, N)
    acc = zeros((x_k.shape[1], w_k.shape[1]), site)  # (M, N)
    for k in range(x_k.shape[0]):
        acc = multiply_add(acc, x_k[k][:, None], w_k[k][None, :], fused)
    if b is not None:
        acc = acc + widen(b, site)[None, :]  # the bias after the sum
    return store(acc, site)


@_ieee
def matmul(
    a: np.ndarray,
    b: np.ndarray,
    *,
    site: str,
    trans_a: bool = False,
    trans_b: bool = False,
    group: int = 1,
    b_rows: int = 0,
    fused: bool = False,
) -> np.ndarray:
    """y[i] = A_i B_i with A_i = a[i] (ᵀ), B_i = b[i // group] (ᵀ), summed as linear;
    b_rows > 0: b is its first b_rows rows along axis 1 (a cache's filled prefix)."""
    attrs = {"trans_a": trans_a, "trans_b": trans_b, "group": group, "b_rows": b_rows}
    check_operands("matmul", site, {"a": a, "b": b}, attrs)
    if b_rows:
        b = b[:, :b_rows, :]
    a, b = widen(a, site), widen(b, site)
    if trans_a:
        a = a.transpose(0, 2, 1)
    if trans_b:
        b = b.transpose(0, 2, 1)
    batches = a.shape[0]  # a: (I, M, K)
    b = b[np.arange(batches) // group]  # (I, K, N): query head i reads key/value head i // group
    a_k, b_k = reduction_first(a, 2), reduction_first(b, 1)  # (K, I, M), (K, I, N)
    acc = zeros((batches, a_k.shape[2], b_k.shape[2]), site)  # (I, M, N)
    for k in range(a_k.shape[0]):
        acc = multiply_add(acc, a_k[k][:, :, None], b_k[k][:, None, :], fused)
    return store(acc, site)


# ---- 4. gathers --------------------------------------------------------------------------


@_ieee
def embedding(table: np.ndarray, ids: np.ndarray, *, site: str) -> np.ndarray:
    """y[t] = table[ids[t]] bit for bit; an id outside [0, V) gives a row of quiet NaN."""
    check_operands("embedding", site, {"table": table, "ids": ids}, {})
    vocab = table.shape[0]
    inside = (ids >= 0) & (ids < vocab)  # (T,)
    rows = _bit_patterns(table)[np.where(inside, ids, 0)]  # (T, D) bit patterns, copied
    rows[~inside] = quiet_nan_bits(site)
    return rows.view(types.numpy_dtype(site))


# ---- 5. normalizations -------------------------------------------------------------------


@_ieee
def layernorm(
    x: np.ndarray, g: np.ndarray, b: np.ndarray, *, site: str, eps: float = 1e-5
) -> np.ndarray:
    """Rows to mean 0 and (biased) variance 1, eps inside the square root, then ⊗ g ⊕ b."""
    check_operands("layernorm", site, {"x": x, "g": g, "b": b}, {"eps": eps})
    x = widen(x, site)  # (M, D)
    mean, rstd = layernorm_stats(x, site, eps)  # (M,) each
    t = x - mean[:, None]  # (M, D)
    t = t * rstd[:, None]
    t = t * widen(g, site)[None, :]
    t = t + widen(b, site)[None, :]
    return store(t, site)


def layernorm_stats(x: np.ndarray, site: str, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The mean and rstd of each row of an A array (M, D), as layernorm computes them
    (its backward reads them too: docs/semantics.md section 17)."""
    x_d = reduction_first(x, 1)  # (D, M)
    n = real(x.shape[1], site)
    s = zeros(x.shape[0], site)
    for d in range(x_d.shape[0]):
        s = s + x_d[d]
    mean = s / n  # (M,)
    v = zeros(x.shape[0], site)
    for d in range(x_d.shape[0]):
        t = x_d[d] - mean
        v = v + t * t
    var = v / n
    rstd = real(1.0, site) / np.sqrt(var + real(eps, site))  # (M,)
    return mean, rstd


def rmsnorm_rstd(x: np.ndarray, site: str, eps: float) -> np.ndarray:
    """rstd = 1 ⊘ √((ss ⊘ n) ⊕ R_A(eps)) of each row of an A array (M, D)."""
    n = real(x.shape[1], site)
    return real(1.0, site) / np.sqrt((_sum_of_squares(x, site) / n) + real(eps, site))


def _sum_of_squares(x: np.ndarray, site: str) -> np.ndarray:
    """ss = +0; for d in order: ss = ss ⊕ (x[d] ⊗ x[d]), per row of an A array (M, D)."""
    x_d = reduction_first(x, 1)  # (D, M)
    ss = zeros(x.shape[0], site)
    for d in range(x_d.shape[0]):
        ss = ss + x_d[d] * x_d[d]
    return ss


@_ieee
def rmsnorm(x: np.ndarray, g: np.ndarray, *, site: str, eps: float = 1e-5) -> np.ndarray:
    """rstd = 1 ⊘ √((ss ⊘ n) ⊕ R_A(eps));  y = S((W(x) ⊗ rstd) ⊗ W(g))"""
    check_operands("rmsnorm", site, {"x": x, "g": g}, {"eps": eps})
    x = widen(x, site)  # (M, D)
    rstd = rmsnorm_rstd(x, site, eps)  # (M,)
    return store((x * rstd[:, None]) * widen(g, site)[None, :], site)


@_ieee
def l2norm(x: np.ndarray, *, site: str, eps: float = 1e-12) -> np.ndarray:
    """PyTorch's F.normalize: y = S(W(x) ⊘ max(√ss, R_A(eps))), a NaN norm staying NaN."""
    check_operands("l2norm", site, {"x": x}, {"eps": eps})
    x = widen(x, site)  # (M, D)
    r = np.sqrt(_sum_of_squares(x, site))  # (M,)
    floor = real(eps, site)
    den = np.where(r < floor, floor, r)  # IEEE <: false for NaN, so NaN stays
    return store(x / den[:, None], site)


# ---- 6. softmax --------------------------------------------------------------------------


def _visible(rows: int, cols: int, causal: bool, offset: int, keep: np.ndarray | None):
    """(M, N) bool: column j of row i is visible unless causal and j > i + offset, or
    keep[j] == 0."""
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    visible = np.ones((rows, cols), dtype=bool)
    if causal:
        visible &= ~(j > i + offset)
    if keep is not None:
        visible &= (keep != 0)[None, :]
    return visible


@_ieee
def softmax(
    x: np.ndarray,
    keep: np.ndarray | None = None,
    *,
    site: str,
    causal: bool = False,
    offset: int = 0,
) -> np.ndarray:
    """Softmax over the last axis of x (B, M, N), masked columns +0 and never read."""
    attrs = {"causal": causal, "offset": offset, "has_keep": keep is not None}
    check_operands("softmax", site, {"x": x, "keep": keep}, attrs)
    x = widen(x, site)  # (B, M, N)
    batches, rows, cols = x.shape
    visible = _visible(rows, cols, causal, offset, keep)[None]  # (1, M, N)
    x = np.where(visible, x, zeros((), site))  # masked columns are never read

    x_j, visible_j = reduction_first(x, 2), reduction_first(visible, 2)  # (N, B, M), (N, 1, M)

    m = full((batches, rows), -np.inf, site)  # (B, M)
    for j in range(cols):
        taken = visible_j[j] & (x_j[j] > m)  # strict >: a NaN is never taken
        m = np.where(taken, x_j[j], m)
    e = transcendental("exp", x - m[:, :, None], site)  # (B, M, N); masked ones unused
    e_j = reduction_first(e, 2)  # (N, B, M)
    s = zeros((batches, rows), site)
    for j in range(cols):
        s = np.where(visible_j[j], s + e_j[j], s)
    # A row with no visible column gives +0 everywhere: every column of it is masked.
    y = np.where(visible, e / s[:, :, None], zeros((), site))
    return store(y, site)


# ---- 7. positions ------------------------------------------------------------------------


def rope_tables(
    positions: int, dim: int, *, site: str, theta: float, pos0: int
) -> tuple[np.ndarray, np.ndarray]:
    """The cos and sin tables (T, D/2) in A, computed in f64 with exactc's functions."""
    half = dim // 2
    log_theta = libm64("log", np.array([float(theta)]))[0]  # theta as f64
    a = np.arange(half, dtype=np.float64) * 2.0 / np.float64(dim)  # f64(2i) exact, one ⊘
    freq = libm64("exp", -(a * log_theta))  # one rounded product, negated
    pos = (np.arange(positions, dtype=np.int64) + pos0).astype(np.float64)
    angle = pos[:, None] * freq[None, :]  # (T, D/2), one rounded product
    acc = types.acc_dtype(site)
    return libm64("cos", angle).astype(acc), libm64("sin", angle).astype(acc)


def _pair_indices(dim: int, pairing: str) -> tuple[np.ndarray, np.ndarray]:
    """Where x0 and x1 of each pair i sit along the head dimension."""
    half = dim // 2
    i = np.arange(half)
    if pairing == "half":  # Hugging Face's rotate_half
        return i, i + half
    return 2 * i, 2 * i + 1  # "interleaved": llama2.c, Meta's original


@_ieee
def rope(
    x: np.ndarray, *, site: str, theta: float = 10000.0, pos0: int = 0, pairing: str = "half",
    inverse: bool = False,
) -> np.ndarray:
    """Rotary embedding of x (T, H, D): each pair (x0, x1) turned by angle (pos0+t)·freq_i;
    `inverse`, by -angle (rope's backward): y0 = (x0 ⊗ c) ⊕ (x1 ⊗ s), y1 = (x1 ⊗ c) ⊖ (x0 ⊗ s)."""
    attrs = {"theta": theta, "pos0": pos0, "pairing": pairing, "inverse": inverse}
    check_operands("rope", site, {"x": x}, attrs)
    x = widen(x, site)  # (T, H, D)
    positions, _, dim = x.shape
    c, s = rope_tables(positions, dim, site=site, theta=theta, pos0=pos0)  # (T, D/2)
    c, s = c[:, None, :], s[:, None, :]  # (T, 1, D/2)
    i0, i1 = _pair_indices(dim, pairing)
    x0, x1 = x[:, :, i0], x[:, :, i1]  # (T, H, D/2)
    y = np.empty_like(x)
    if inverse:
        y[:, :, i0] = (x0 * c) + (x1 * s)
        y[:, :, i1] = (x1 * c) - (x0 * s)
    else:
        y[:, :, i0] = (x0 * c) - (x1 * s)
        y[:, :, i1] = (x0 * s) + (x1 * c)
    return store(y, site)


# ---- 8. pooling and selection ------------------------------------------------------------


@_ieee
def mean_pool(x: np.ndarray, keep: np.ndarray, *, site: str) -> np.ndarray:
    """y[d] = S(s ⊘ R_A(max(n, 1))): the kept rows of x (T, D) summed in order, counted."""
    check_operands("mean_pool", site, {"x": x, "keep": keep}, {})
    x = widen(x, site)  # (T, D)
    s = zeros(x.shape[1], site)  # (D,)
    n = 0
    for t in range(x.shape[0]):
        if keep[t] != 0:
            s = s + x[t]
            n = n + 1
    return store(s / real(builtins.max(n, 1), site), site)


@_ieee
def argmax(x: np.ndarray, *, site: str) -> np.ndarray:
    """Per row of x (M, N): the first NaN's index if any, else the first maximum's."""
    check_operands("argmax", site, {"x": x}, {})
    x_j = reduction_first(widen(x, site), 1)  # (N, M); widening is exact
    cols, rows = x_j.shape
    first_nan = np.full(rows, -1, dtype=np.int32)
    best, best_at = x_j[0], np.zeros(rows, dtype=np.int32)
    for j in range(cols):
        first_nan = np.where((first_nan < 0) & np.isnan(x_j[j]), np.int32(j), first_nan)
        taken = x_j[j] > best  # strict >: the earlier of equal values (-0 == +0) wins
        best = np.where(taken, x_j[j], best)
        best_at = np.where(taken, np.int32(j), best_at)
    return np.where(first_nan >= 0, first_nan, best_at).astype(np.int32)


# ---- 9. views: bits moved, never values --------------------------------------------------


def _as_site(bit_patterns: np.ndarray, site: str) -> np.ndarray:
    """Fresh C-ordered bit patterns seen as site values (0-d arrays stay 0-d)."""
    assert bit_patterns.flags.c_contiguous
    return bit_patterns.view(types.numpy_dtype(site))


@_ieee
def reshape(x: np.ndarray, *, site: str, shape: tuple[int, ...]) -> np.ndarray:
    """The same elements in C order, with the new shape."""
    check_operands("reshape", site, {"x": x}, {"shape": shape})
    return _as_site(_bit_patterns(x).reshape(tuple(shape)).copy(), site)


@_ieee
def transpose(x: np.ndarray, *, site: str, perm: tuple[int, ...]) -> np.ndarray:
    """y = x.transpose(perm): y.shape[k] = x.shape[perm[k]]."""
    check_operands("transpose", site, {"x": x}, {"perm": perm})
    return _as_site(_bit_patterns(x).transpose(tuple(perm)).copy(), site)


@_ieee
def slice(x: np.ndarray, *, site: str, axis: int = 0, start: int = 0, stop: int = 1) -> np.ndarray:
    """y = x[..., start:stop, ...] along axis, step 1."""
    check_operands("slice", site, {"x": x}, {"axis": axis, "start": start, "stop": stop})
    index = [builtins.slice(None)] * x.ndim
    index[axis] = builtins.slice(start, stop)
    return _as_site(_bit_patterns(x)[tuple(index)].copy(), site)


@_ieee
def concat(a: np.ndarray, b: np.ndarray, *, site: str, axis: int = 0) -> np.ndarray:
    """a then b along axis."""
    check_operands("concat", site, {"a": a, "b": b}, {"axis": axis})
    return _as_site(np.concatenate([_bit_patterns(a), _bit_patterns(b)], axis=axis), site)


@_ieee
def cache_write(cache: np.ndarray, rows: np.ndarray, *, site: str, pos: int = 0) -> np.ndarray:
    """cache with rows [pos, pos + R) of axis 1 replaced by rows (R = rows.shape[1])."""
    check_operands("cache_write", site, {"cache": cache, "rows": rows}, {"pos": pos})
    out = _bit_patterns(cache).copy()
    out[:, pos : pos + rows.shape[1], :] = _bit_patterns(rows)
    return _as_site(out, site)


# ---- 11. integer operands --------------------------------------------------------------


@_ieee
def quantize(x: np.ndarray, *, site: str, block: int = 32) -> dict[str, np.ndarray]:
    """Rows of W(x) to q8 in A: int8 values q (M, K) and scales d (M, nb) (exporter.quant)."""
    check_operands("quantize", site, {"x": x}, {"block": block})
    q, d = quant.quantize_q8_blocks(widen(x, site), block)
    return {"q": q, "d": d}


@_ieee
def qlinear_w(
    x: np.ndarray, wq: np.ndarray, wd: np.ndarray, b: np.ndarray | None = None, *,
    site: str, fmt: str = "q8", block: int = 32, fused: bool = False,
) -> np.ndarray:
    """w = wd ⊗ f32(value) in f32, then linear: acc ⊕ (W(x[m,k]) ⊗ W(w[n,k])) for k in order
    (`fused`: fma_A(W(x[m,k]), W(w[n,k]), acc); w stays a rounded product)."""
    attrs = {"fmt": fmt, "block": block, "has_b": b is not None}
    check_operands("qlinear_w", site, {"x": x, "wq": wq, "wd": wd, "b": b}, attrs)
    w = quant.dequantize(fmt, wq, wd, x.shape[1], block)  # (N, K) f32
    x_k = reduction_first(widen(x, site), 1)  # (K, M)
    w_k = reduction_first(widen(w, site), 1)  # (K, N): f32 stays f32, widens exactly to f64
    acc = zeros((x_k.shape[1], w_k.shape[1]), site)  # (M, N)
    for k in range(x_k.shape[0]):
        acc = multiply_add(acc, x_k[k][:, None], w_k[k][None, :], fused)
    if b is not None:
        acc = acc + widen(b, site)[None, :]
    return store(acc, site)


@_ieee
def qlinear_i(
    xq: np.ndarray, xd: np.ndarray, wq: np.ndarray, wd: np.ndarray, b: np.ndarray | None = None, *,
    site: str, fmt: str = "q8", block: int = 32,
) -> np.ndarray:
    """Per block b in order: s = exact integer sum of xq ⋅ value over the block;
    acc = acc ⊕ (A(s) ⊗ (W(xd[m,b]) ⊗ W(wd[n,b])))."""
    attrs = {"fmt": fmt, "block": block, "has_b": b is not None}
    check_operands("qlinear_i", site, {"xq": xq, "xd": xd, "wq": wq, "wd": wd, "b": b}, attrs)
    if fmt in K_FORMATS:
        acc = _k_quant_blocks(xq, xd, wq, wd, site, fmt)
        if b is not None:
            acc = acc + widen(b, site)[None, :]
        return store(acc, site)
    k_total = xq.shape[1]
    x_k = reduction_first(xq.astype(np.int64), 1)  # (K, M)
    w_k = reduction_first(quant.weight_values(fmt, wq, k_total, block).astype(np.int64), 1)  # (K, N)
    acc = zeros((xq.shape[0], wq.shape[0]), site)  # (M, N)
    for blk in range(block_count(k_total, block)):
        s = np.zeros(acc.shape, dtype=np.int64)  # integers: exact in any order
        for k in range(blk * block, builtins.min(blk * block + block, k_total)):
            s = s + x_k[k][:, None] * w_k[k][None, :]
        scale = widen(xd[:, blk], site)[:, None] * widen(wd[:, blk], site)[None, :]  # W(xd) ⊗ W(wd)
        acc = acc + s.astype(np.int32).astype(acc.dtype) * scale  # A(s) ⊗ scale, then ⊕
    if b is not None:
        acc = acc + widen(b, site)[None, :]
    return store(acc, site)


def _k_quant_sums(xq: np.ndarray, wq: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The exact integer sums of a k-quant integer linear, (M, N, nb) each: S = Σ_j sc_j ·
    Σ xq·q over sub-block j, and for Q4_K, Q5_K M = Σ_j m_j · Σ xq over sub-block j
    (int64 below 2^28: exact, in any order)."""
    q, sc, mins = quant.k_quant_integers(quant.k_kind(fmt), wq.reshape(wq.shape[0], -1, K_FORMATS[fmt][0]))
    n, nb, subs, length = q.shape
    x_k = reduction_first(xq.astype(np.int64), 1)  # (K, M)
    w_k = reduction_first(q.reshape(n, -1).astype(np.int64), 1)  # (K, N)
    sums = np.zeros((xq.shape[0], n, nb), dtype=np.int64)
    min_sums = np.zeros_like(sums)
    for blk in range(nb):
        for j in range(subs):
            s, xs = np.zeros(sums.shape[:2], np.int64), np.zeros((xq.shape[0], 1), np.int64)
            for k in range(blk * K_SUPER_BLOCK + j * length, blk * K_SUPER_BLOCK + (j + 1) * length):
                s = s + x_k[k][:, None] * w_k[k][None, :]
                xs = xs + x_k[k][:, None]
            sums[:, :, blk] += s * sc[:, blk, j].astype(np.int64)[None, :]
            if mins is not None:
                min_sums[:, :, blk] += xs * mins[:, blk, j].astype(np.int64)[None, :]
    return sums, None if mins is None else min_sums


def _k_quant_blocks(xq: np.ndarray, xd: np.ndarray, wq: np.ndarray, wd: np.ndarray, site: str,
                    fmt: str) -> np.ndarray:
    """acc over the super-blocks in order: acc = acc ⊕ (A(S) ⊗ (W(xd) ⊗ W(d))), then for
    Q4_K, Q5_K acc = acc ⊖ (A(M) ⊗ (W(xd) ⊗ W(dmin)))."""
    sums, min_sums = _k_quant_sums(xq, wq, fmt)
    fields = wd.reshape(wd.shape[0], sums.shape[2], K_FORMATS[fmt][1])  # (N, nb, d [and dmin])
    acc = zeros(sums.shape[:2], site)
    for blk in range(sums.shape[2]):
        x_scale = widen(xd[:, blk], site)[:, None]
        acc = acc + sums[:, :, blk].astype(np.int32).astype(acc.dtype) * (x_scale * widen(fields[:, blk, 0], site))
        if min_sums is not None:
            term = min_sums[:, :, blk].astype(np.int32).astype(acc.dtype) * (x_scale * widen(fields[:, blk, 1], site))
            acc = acc - term
    return acc


# ---- the loss_grad graph's own (docs/semantics.md section 17) ---------------------------


@_ieee
def fill(*, site: str, shape: tuple = (), value: float = 0.0) -> np.ndarray:
    """Every element R_A(value): +0 is an adjoint before its first term (+0 ⊕ t, as the
    reverse walk's Cell), 1 the numerator of the loss's r = 1 ⊘ n."""
    check_operands("fill", site, {}, {"shape": shape, "value": value})
    return store(full(shape, real(value, site), site), site)


def iota(*, site: str, start: int = 0, length: int = 1) -> np.ndarray:
    """y[i] = start + i, int32: the rows [start, start + length) a slice took."""
    check_operands("iota", site, {}, {"start": start, "length": length})
    return np.arange(start, start + length, dtype=np.int32)


@_ieee
def xent_mean(x: np.ndarray, targets: np.ndarray, *, site: str, ignore: int = -100) -> np.ndarray:
    """x ⊘ n, n = R_A(the count of targets that are not `ignore`)."""
    check_operands("xent_mean", site, {"x": x, "targets": targets}, {"ignore": ignore})
    n = real(int(np.count_nonzero(targets != ignore)), site)
    return store(np.asarray(widen(x, site) / n), site)


FUNCTIONS = {
    f.__name__: f
    for f in [
        add, sub, mul, scale, silu, gelu_tanh, gelu_erf,
        linear, matmul, embedding,
        layernorm, rmsnorm, l2norm,
        softmax, rope, mean_pool, argmax,
        reshape, transpose, slice, concat, cache_write,
        quantize, qlinear_w, qlinear_i,
        fill, iota, xent_mean,
    ]
}  # fmt: skip
