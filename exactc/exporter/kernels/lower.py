"""Lowering: each primitive at a site type becomes loop nests (ir.py).

Written from docs/semantics.md, the rule of each primitive quoted above its lowering,
and from nothing else (the reference backend is the other, independent reading of the
same page). Notation: W widens a site value to the accumulator type A, S stores an A
value to the site type, R_A rounds a real constant to A.

`lower(primitive, site, shapes, attrs)` checks the call against the catalogue
(exporter/primitives.py) and returns a Kernel. Every rounding is explicit in the IR, so
the printer adds none.

A shape may hold dims.Dim extents (the run-time length T): the lowering is the same
text with those extents symbolic, so a loop over positions runs to T and every reduction
over positions runs from 0 to T in index order (T_max appears nowhere in a kernel's
loops; only the checker's bounds and a pack's scratch size use it).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import numpy as np

from exactc.exporter import dims, types
from exactc.exporter.kernels.ir import (
    PARALLEL,
    REDUCE,
    Access,
    Affine,
    Assign,
    Axis,
    Binary,
    Buffer,
    Call,
    Const,
    Convert,
    CopyBits,
    Declare,
    Expr,
    FillBits,
    Fma,
    If,
    Kernel,
    Load,
    Loop,
    Nest,
    Select,
    Stmt,
    Unary,
    Var,
    Write,
    launch,
)
from exactc.exporter.primitives import (
    ADAMW_SCALARS,
    CONTRACT_OFF,
    K_FORMATS,
    K_SUPER_BLOCK,
    PrimitiveError,
    Shape,
    fuses,
    get_primitive,
)

# The quiet NaN an out-of-range embedding id gives (semantics.md, section 4).
QUIET_NAN_BITS = {"f64": 0x7FF8000000000000, "f32": 0x7FC00000, "bf16": 0x7FC0}

# Real constants, correctly rounded to f64 (checked against mpmath in the tests).
# Computing them as 1/np.sqrt(2) would give 0x1.6a09e667f3bccp-1, one ulp low.
SQRT_2_OVER_PI = float.fromhex("0x1.9884533d43651p-1")  # sqrt(2/pi)
INV_SQRT_2 = float.fromhex("0x1.6a09e667f3bcdp-1")  # 1/sqrt(2)
GELU_TANH_CUBIC = 0.044715


def lower(
    primitive: str,
    site: str,
    shapes: Mapping[str, Shape],
    attrs: Mapping[str, Any] | None = None,
    contract: str = CONTRACT_OFF,
) -> Kernel:
    """The kernel of `primitive` at site type `site` for operands of these shapes, in the
    realization `contract` (docs/semantics.md section 18)."""
    prim = get_primitive(primitive)
    if site not in types.SITE_TYPES:
        raise PrimitiveError(
            f"{primitive}: unknown site type {site!r}; exactc knows {', '.join(types.SITE_TYPES)}"
        )
    if not isinstance(shapes, Mapping):
        raise PrimitiveError(f"{primitive}: shapes must map operand names to shapes")
    for name, shape in shapes.items():
        if not isinstance(shape, (tuple, list)):
            raise PrimitiveError(f"{primitive}: operand {name} has shape {shape!r}; give a tuple of ints")
        if any(isinstance(d, bool) for d in shape):
            raise PrimitiveError(f"{primitive}: operand {name} has shape {tuple(shape)}; bools are not sizes")
    prim.check_site(site)
    full = _normalize_attrs(primitive, prim.full_attrs(attrs))
    outputs = prim.outputs(shapes, full)

    ctx = _Lowering(primitive, site, full, fuses(primitive, contract))
    for name in prim.operand_names(full):
        ctx.add_buffer(name, prim.operand_kind(name, full), tuple(shapes[name]), "input")
    for name, (out_shape, out_kind) in outputs.items():
        ctx.add_buffer(name, out_kind, tuple(out_shape), "output")
    nests = _LOWERINGS[primitive](ctx)
    buffers = tuple(ctx.buffers.values())
    return Kernel(
        primitive=primitive,
        site=site,
        attrs=full,
        buffers=buffers,
        nests=tuple(nests),
        launches=tuple(launch(n, buffers) for n in nests),
    )


# ---- attribute checks the catalogue leaves to the lowering ----------------------------


def _real(prim: str, attrs: Mapping[str, Any], name: str) -> None:
    value = attrs[name]
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise PrimitiveError(f"{prim}: attribute {name} is {value!r}; it must be a real number")
    try:
        real = float(value)
    except OverflowError:  # an int past f64's range: no constant of the kernel can hold it
        raise PrimitiveError(f"{prim}: attribute {name} is an integer of {len(str(abs(int(value))))} digits; it must "
                             "be a real number within f64's range") from None
    if math.isnan(real):
        raise PrimitiveError(f"{prim}: attribute {name} is NaN; it must be a real number")


def _flag(prim: str, attrs: Mapping[str, Any], name: str) -> None:
    if not isinstance(attrs[name], (bool, np.bool_)):
        raise PrimitiveError(f"{prim}: attribute {name} is {attrs[name]!r}; it must be True or False")


def _ints(prim: str, attrs: Mapping[str, Any], name: str, many: bool) -> None:
    value = attrs[name]
    items = value if many else (value,)
    if many and not isinstance(value, (tuple, list)):
        raise PrimitiveError(f"{prim}: attribute {name} is {value!r}; it must be a tuple of ints")
    if any(isinstance(v, bool) or not (isinstance(v, (int, np.integer)) or dims.is_symbolic(v)) for v in items):
        raise PrimitiveError(f"{prim}: attribute {name} is {value!r}; it must be {'ints' if many else 'an int'}")


def _normalize_attrs(prim: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """Check the attributes the catalogue does not; give plain Python values (numpy
    scalars become int, float and bool) so that the IR and its text are stable."""
    _check_attrs(prim, attrs)
    out: dict[str, Any] = {}
    for name, value in attrs.items():
        if isinstance(value, (bool, np.bool_)):
            out[name] = bool(value)
        elif isinstance(value, (int, np.integer)):
            out[name] = int(value)
        elif isinstance(value, (float, np.floating)):
            out[name] = float(value)
        elif isinstance(value, (tuple, list)):
            if any(isinstance(v, bool) or not (dims.is_symbolic(v) or isinstance(v, (int, np.integer))) for v in value):
                raise PrimitiveError(f"{prim}: attribute {name} is {value!r}; a list attribute holds ints (a shape, "
                                     "a permutation)")
            out[name] = tuple(v if dims.is_symbolic(v) else int(v) for v in value)
        else:
            out[name] = value
    return out


def _check_attrs(prim: str, attrs: Mapping[str, Any]) -> None:
    if prim == "scale":
        _real(prim, attrs, "s")
    elif prim in ("layernorm", "rmsnorm", "l2norm"):
        _real(prim, attrs, "eps")
    elif prim == "rope":
        _real(prim, attrs, "theta")
        _flag(prim, attrs, "inverse")
        if math.isinf(float(attrs["theta"])):
            raise PrimitiveError(f"rope: attribute theta is {attrs['theta']!r}; it must be finite")
    elif prim in ("layernorm_bar_x", "rmsnorm_bar_x", "norm_bar_g"):
        _real(prim, attrs, "eps")
    elif prim in ("matmul_bar_a", "matmul_bar_b"):
        _flag(prim, attrs, "trans_a")
        _flag(prim, attrs, "trans_b")
        _ints(prim, attrs, "group", many=False)
    elif prim in ("xent_rows", "xent_bar"):
        _ints(prim, attrs, "ignore", many=False)
    elif prim == "adamw":
        _flag(prim, attrs, "decays")
    elif prim in ("softmax", "softmax_bar"):
        _flag(prim, attrs, "causal")
        _flag(prim, attrs, "has_keep")
        _ints(prim, attrs, "offset", many=False)
    elif prim == "linear":
        _flag(prim, attrs, "has_b")
    elif prim == "matmul":
        _flag(prim, attrs, "trans_a")
        _flag(prim, attrs, "trans_b")
        _ints(prim, attrs, "group", many=False)
        _ints(prim, attrs, "b_rows", many=False)
    elif prim == "reshape":
        _ints(prim, attrs, "shape", many=True)
    elif prim == "transpose":
        _ints(prim, attrs, "perm", many=True)
    elif prim == "slice":
        for name in ("axis", "start", "stop"):
            _ints(prim, attrs, name, many=False)
    elif prim == "concat":
        _ints(prim, attrs, "axis", many=False)
    elif prim == "cache_write":
        _ints(prim, attrs, "pos", many=False)
    elif prim == "quantize":
        _ints(prim, attrs, "block", many=False)
    elif prim in ("qlinear_w", "qlinear_i"):
        _flag(prim, attrs, "has_b")
        _ints(prim, attrs, "block", many=False)
    elif prim == "fill":
        _ints(prim, attrs, "shape", many=True)
        _real(prim, attrs, "value")
    elif prim == "xent_mean":
        _ints(prim, attrs, "ignore", many=False)
    elif prim == "iota":
        _ints(prim, attrs, "start", many=False)
        _ints(prim, attrs, "length", many=False)


# ---- the lowering context: buffers, W, S, R_A ------------------------------------------


class _Lowering:
    def __init__(self, primitive: str, site: str, attrs: Mapping[str, Any], fused: bool = False):
        self.primitive = primitive
        self.fused = fused  # multiply-accumulate steps are fma_A (semantics.md section 18)
        self.site = site  # the site type, also the IR type of site buffers
        self.acc = "f64" if site == "f64" else "f32"  # A
        self.attrs = attrs
        self.buffers: dict[str, Buffer] = {}

    def add_buffer(self, name: str, kind: str, shape: Shape, role: str) -> Buffer:
        buf = Buffer(name=name, ctype=types.kind_ctype(kind, self.site), shape=shape, role=role)
        self.buffers[name] = buf
        return buf

    def add_temp(self, name: str, shape: Shape) -> Buffer:
        buf = Buffer(name=name, ctype=types.c_acc_type(self.site), shape=shape, role="temp")
        self.buffers[name] = buf
        return buf

    def shape(self, name: str) -> Shape:
        return self.buffers[name].shape

    def at(self, name: str, *index: Affine | int) -> Access:
        return Access(name, self.buffers[name].type, tuple(_affine(i) for i in index))

    def load(self, name: str, *index: Affine | int) -> Load:
        return Load(self.at(name, *index))

    def widen(self, value: Expr) -> Expr:
        """W(v): exact; the identity unless the site is bf16."""
        return value if value.type == self.acc else Convert(value, self.acc)

    def W(self, name: str, *index: Affine | int) -> Expr:
        return self.widen(self.load(name, *index))

    def S(self, value: Expr) -> Expr:
        """S(a): one rounding to bf16, the identity for f64 and f32 sites."""
        return value if self.site == self.acc else Convert(value, self.site)

    def R(self, real: float) -> Const:
        """R_A(c): the real rounded to f64, then (A = f32) to f32; nearest even each."""
        with np.errstate(over="ignore"):
            value = float(types.round_to_acc(np.float64(real), self.site))
        return Const(value, self.acc)

    def var(self, name: str, type_: str | None = None) -> Var:
        return Var(name, type_ or self.acc)


def _affine(i: Affine | int) -> Affine:
    return i if isinstance(i, Affine) else Affine.constant(i)


def ix(name: str) -> Affine:
    return Affine.var(name)


def add(a: Expr, b: Expr) -> Binary:
    return Binary("+", a, b)


def sub(a: Expr, b: Expr) -> Binary:
    return Binary("-", a, b)


def mul(a: Expr, b: Expr) -> Binary:
    return Binary("*", a, b)


def div(a: Expr, b: Expr) -> Binary:
    return Binary("/", a, b)


def _flat(ctx: _Lowering, name: str) -> Axis:
    """One parallel axis over every element of a buffer (elementwise kernels)."""
    return Axis("i", ctx.buffers[name].size)


# ---- 2. elementwise --------------------------------------------------------------------


def _binary(op: str) -> Callable[[_Lowering], list[Nest]]:
    def lower_binary(ctx: _Lowering) -> list[Nest]:
        # y = S(W(a) op W(b))
        i = _flat(ctx, "a")
        value = Binary(op, ctx.W("a", ix("i")), ctx.W("b", ix("i")))
        return [Nest(ctx.primitive, (i,), (Write(ctx.at("y", ix("i")), ctx.S(value)),))]

    lower_binary.__name__ = f"lower_{op}"
    return lower_binary


def lower_scale(ctx: _Lowering) -> list[Nest]:
    # y = S(W(x) ⊗ R_A(s))
    i = _flat(ctx, "x")
    value = mul(ctx.W("x", ix("i")), ctx.R(ctx.attrs["s"]))
    return [Nest("scale", (i,), (Write(ctx.at("y", ix("i")), ctx.S(value)),))]


def lower_silu(ctx: _Lowering) -> list[Nest]:
    # e = T(exp, ⊖W(x)),  y = S(W(x) ⊘ (1 ⊕ e))
    i = _flat(ctx, "x")
    v, e = ctx.var("v"), ctx.var("e")
    body = (
        Declare(v, ctx.W("x", ix("i"))),
        Declare(e, Call("exp", Unary("-", v))),
        Write(ctx.at("y", ix("i")), ctx.S(div(v, add(ctx.R(1.0), e)))),
    )
    return [Nest("silu", (i,), body)]


def lower_gelu_tanh(ctx: _Lowering) -> list[Nest]:
    # u = x⊗x; u = u⊗x; u = c1⊗u; u = x⊕u; u = c0⊗u; t = T(tanh, u)
    # y = S((0.5 ⊗ x) ⊗ (1 ⊕ t))
    i = _flat(ctx, "x")
    v, u, t = ctx.var("v"), ctx.var("u"), ctx.var("t")
    c0, c1 = ctx.R(SQRT_2_OVER_PI), ctx.R(GELU_TANH_CUBIC)
    cubic = mul(c1, mul(mul(v, v), v))
    body = (
        Declare(v, ctx.W("x", ix("i"))),
        Declare(u, mul(c0, add(v, cubic))),
        Declare(t, Call("tanh", u)),
        Write(ctx.at("y", ix("i")), ctx.S(mul(mul(ctx.R(0.5), v), add(ctx.R(1.0), t)))),
    )
    return [Nest("gelu_tanh", (i,), body)]


def lower_gelu_erf(ctx: _Lowering) -> list[Nest]:
    # e = T(erf, x ⊗ c),  y = S((0.5 ⊗ x) ⊗ (1 ⊕ e)),  c = R_A(1/√2)
    i = _flat(ctx, "x")
    v, e = ctx.var("v"), ctx.var("e")
    body = (
        Declare(v, ctx.W("x", ix("i"))),
        Declare(e, Call("erf", mul(v, ctx.R(INV_SQRT_2)))),
        Write(ctx.at("y", ix("i")), ctx.S(mul(mul(ctx.R(0.5), v), add(ctx.R(1.0), e)))),
    )
    return [Nest("gelu_erf", (i,), body)]


# ---- 3. linear algebra -----------------------------------------------------------------


def multiply_add(ctx: _Lowering, acc: Var, u: Expr, v: Expr) -> Expr:
    """One step of a product's sum: acc ⊕ (u ⊗ v); fma_A(u, v, acc) when fused."""
    return Fma(u, v, acc) if ctx.fused else add(acc, mul(u, v))


def _dot(ctx: _Lowering, k: Axis, left: Callable[[Affine], Expr], right: Callable[[Affine], Expr]) -> list[Stmt]:
    """acc = +0; for k in order: acc = acc ⊕ (left[k] ⊗ right[k]) (fused: fma_A)."""
    acc = ctx.var("acc")
    return [
        Declare(acc, ctx.R(0.0)),
        Loop(k, (Assign(acc, multiply_add(ctx, acc, left(ix(k.name)), right(ix(k.name)))),)),
    ]


def lower_linear(ctx: _Lowering) -> list[Nest]:
    # acc = +0; for k: acc = acc ⊕ (W(x[m,k]) ⊗ W(w[n,k])); if b: acc = acc ⊕ W(b[n])
    # y[m,n] = S(acc)
    (m_ext, k_ext), (n_ext, _) = ctx.shape("x"), ctx.shape("w")
    m, n = ix("m"), ix("n")
    k = Axis("k", k_ext, REDUCE)
    body = _dot(ctx, k, lambda kk: ctx.W("x", m, kk), lambda kk: ctx.W("w", n, kk))
    acc = ctx.var("acc")
    total: Expr = add(acc, ctx.W("b", n)) if ctx.attrs["has_b"] else acc
    body.append(Write(ctx.at("y", m, n), ctx.S(total)))
    return [Nest("linear", (Axis("m", m_ext), Axis("n", n_ext)), tuple(body))]


def lower_matmul(ctx: _Lowering) -> list[Nest]:
    # y[i] = A_i B_i with A_i = a[i] (transposed when trans_a), B_i = b[i // group]
    # (transposed when trans_b); acc = +0, acc = acc ⊕ (W(A_i[m,k]) ⊗ W(B_i[k,n])).
    # The batch index i is written i = ib*group + g, so every index stays affine.
    # b_rows > 0: only b's first b_rows rows along axis 1 are read, in place (b keeps its
    # shape, so their stride is the whole axis: a cache's capacity).
    trans_a, trans_b, group = ctx.attrs["trans_a"], ctx.attrs["trans_b"], ctx.attrs["group"]
    batches, a1, a2 = ctx.shape("a")
    b_batches, b1, b2 = ctx.shape("b")
    b1 = ctx.attrs["b_rows"] or b1
    m_ext, k_ext = (a2, a1) if trans_a else (a1, a2)
    n_ext = b1 if trans_b else b2
    if group == 1:
        axes = [Axis("i", batches)]
        batch_a, batch_b = ix("i"), ix("i")
    else:
        axes = [Axis("ib", b_batches), Axis("g", group)]
        batch_a, batch_b = ix("ib") * group + ix("g"), ix("ib")
    m, n = ix("m"), ix("n")
    axes += [Axis("m", m_ext), Axis("n", n_ext)]
    k = Axis("k", k_ext, REDUCE)

    def left(kk: Affine) -> Expr:
        return ctx.W("a", batch_a, kk, m) if trans_a else ctx.W("a", batch_a, m, kk)

    def right(kk: Affine) -> Expr:
        return ctx.W("b", batch_b, n, kk) if trans_b else ctx.W("b", batch_b, kk, n)

    body = _dot(ctx, k, left, right)
    body.append(Write(ctx.at("y", batch_a, m, n), ctx.S(ctx.var("acc"))))
    return [Nest("matmul", tuple(axes), tuple(body))]


# ---- 4. gathers ------------------------------------------------------------------------


def lower_embedding(ctx: _Lowering) -> list[Nest]:
    # y[t, :] = table[ids[t], :] bit for bit; an id outside [0, V) gives a row of the
    # site type's quiet NaN, and nothing is read out of bounds.
    vocab, dim = ctx.shape("table")
    (tokens,) = ctx.shape("ids")
    t, d = ix("t"), ix("d")
    row = ctx.var("row", "i64")
    in_range = Binary("&&", Binary(">=", row, Affine.constant(0)), Binary("<", row, Affine.constant(vocab)))
    body = (
        Declare(row, Convert(ctx.load("ids", t), "i64")),
        If(
            in_range,
            (CopyBits(ctx.at("y", t, d), ctx.at("table", ix("row"), d)),),
            (FillBits(ctx.at("y", t, d), QUIET_NAN_BITS[ctx.site]),),
        ),
    )
    return [Nest("embedding", (Axis("t", tokens), Axis("d", dim)), body)]


# ---- 5. normalizations -----------------------------------------------------------------


def _row_sum_of_squares(ctx: _Lowering, axis: str, extent: int) -> list[Stmt]:
    """ss = +0; for d in order: ss = ss ⊕ (W(x[d]) ⊗ W(x[d]))."""
    ss, v = ctx.var("ss"), ctx.var("v")
    return [
        Declare(ss, ctx.R(0.0)),
        Loop(
            Axis(axis, extent, REDUCE),
            (Declare(v, ctx.W("x", ix("m"), ix(axis))), Assign(ss, add(ss, mul(v, v)))),
        ),
    ]


def _layernorm_stats(ctx: _Lowering) -> tuple[Stmt, ...]:
    """Row m's mean and rstd as layernorm computes them (its backward reads the same bits):
    s = +0; for d: s = s ⊕ W(x[d]); mean = s ⊘ n;  v = +0; for d: t = W(x[d]) ⊖ mean;
    v = v ⊕ (t ⊗ t); var = v ⊘ n;  rstd = 1 ⊘ √(var ⊕ R_A(eps))."""
    dim = ctx.shape("x")[1]
    m, n = ix("m"), ctx.R(float(dim))
    s, mean, v, t, var, rstd = (ctx.var(nm) for nm in ("s", "mean", "v", "t", "var", "rstd"))
    ds, dv = ix("ds"), ix("dv")
    return (
        Declare(s, ctx.R(0.0)),
        Loop(Axis("ds", dim, REDUCE), (Assign(s, add(s, ctx.W("x", m, ds))),)),
        Declare(mean, div(s, n)),
        Declare(v, ctx.R(0.0)),
        Loop(
            Axis("dv", dim, REDUCE),
            (Declare(t, sub(ctx.W("x", m, dv), mean)), Assign(v, add(v, mul(t, t)))),
        ),
        Declare(var, div(v, n)),
        Declare(rstd, div(ctx.R(1.0), Call("sqrt", add(var, ctx.R(ctx.attrs["eps"]))))),
    )


def _rmsnorm_rstd(ctx: _Lowering) -> list[Stmt]:
    """Row m's rstd = 1 ⊘ √((ss ⊘ n) ⊕ R_A(eps)) as rmsnorm computes it."""
    dim = ctx.shape("x")[1]
    ss, rstd = ctx.var("ss"), ctx.var("rstd")
    return _row_sum_of_squares(ctx, "ds", dim) + [
        Declare(rstd, div(ctx.R(1.0), Call("sqrt", add(div(ss, ctx.R(float(dim))), ctx.R(ctx.attrs["eps"]))))),
    ]


def lower_layernorm(ctx: _Lowering) -> list[Nest]:
    # s = +0; for d: s = s ⊕ W(x[d]);  mean = s ⊘ n
    # v = +0; for d: t = W(x[d]) ⊖ mean; v = v ⊕ (t ⊗ t);  var = v ⊘ n
    # rstd = 1 ⊘ √(var ⊕ R_A(eps))
    # y[d] = S((((W(x[d]) ⊖ mean) ⊗ rstd) ⊗ W(g[d])) ⊕ W(b[d]))
    rows, dim = ctx.shape("x")
    m = ix("m")
    mean, rstd = ctx.var("mean"), ctx.var("rstd")
    dy = ix("dy")
    body = (
        *_layernorm_stats(ctx),
        Loop(
            Axis("dy", dim, PARALLEL),
            (
                Write(
                    ctx.at("y", m, dy),
                    ctx.S(add(mul(mul(sub(ctx.W("x", m, dy), mean), rstd), ctx.W("g", dy)), ctx.W("b", dy))),
                ),
            ),
        ),
    )
    return [Nest("layernorm", (Axis("m", rows),), body)]


def lower_rmsnorm(ctx: _Lowering) -> list[Nest]:
    # ss = +0; for d: ss = ss ⊕ (W(x[d]) ⊗ W(x[d]))
    # rstd = 1 ⊘ √((ss ⊘ n) ⊕ R_A(eps));  y[d] = S((W(x[d]) ⊗ rstd) ⊗ W(g[d]))
    rows, dim = ctx.shape("x")
    m, dy = ix("m"), ix("dy")
    rstd = ctx.var("rstd")
    body = _rmsnorm_rstd(ctx) + [
        Loop(
            Axis("dy", dim, PARALLEL),
            (Write(ctx.at("y", m, dy), ctx.S(mul(mul(ctx.W("x", m, dy), rstd), ctx.W("g", dy)))),),
        ),
    ]
    return [Nest("rmsnorm", (Axis("m", rows),), tuple(body))]


def lower_l2norm(ctx: _Lowering) -> list[Nest]:
    # ss as rmsnorm; r = √ss; den = R_A(eps) if r < R_A(eps) else r; y[d] = S(W(x[d]) ⊘ den)
    rows, dim = ctx.shape("x")
    m, dy = ix("m"), ix("dy")
    ss, r, den = ctx.var("ss"), ctx.var("r"), ctx.var("den")
    eps = ctx.R(ctx.attrs["eps"])
    body = _row_sum_of_squares(ctx, "ds", dim) + [
        Declare(r, Call("sqrt", ss)),
        Declare(den, Select(Binary("<", r, eps), eps, r)),
        Loop(Axis("dy", dim, PARALLEL), (Write(ctx.at("y", m, dy), ctx.S(div(ctx.W("x", m, dy), den))),)),
    ]
    return [Nest("l2norm", (Axis("m", rows),), tuple(body))]


# ---- 6. softmax ------------------------------------------------------------------------


def _when_visible(ctx: _Lowering, i: Affine, j: Affine, then: tuple[Stmt, ...],
                  orelse: tuple[Stmt, ...] = ()) -> tuple[Stmt, ...]:
    """`then` where column j of row i is visible (not causal-masked, j <= i + offset, nor
    keep[j] == 0), `orelse` where it is not; `then` alone when nothing masks."""
    conds: list[Expr] = []
    if ctx.attrs["causal"]:
        conds.append(Binary("<=", j, i + ctx.attrs["offset"]))
    if ctx.attrs["has_keep"]:
        conds.append(Binary("!=", ctx.load("keep", j), Affine.constant(0)))
    if not conds:
        return then
    cond = conds[0] if len(conds) == 1 else Binary("&&", conds[0], conds[1])
    return (If(cond, then, orelse),)


def lower_softmax(ctx: _Lowering) -> list[Nest]:
    # Row (bi, i); column j visible unless (causal and j > i + offset) or
    # (has_keep and keep[j] == 0). Masked columns are never read.
    # m = -∞; for visible j in order: if W(x[j]) > m: m = W(x[j])
    # e[j] = T(exp, W(x[j]) ⊖ m);  s = +0; for visible j in order: s = s ⊕ e[j]
    # y[j] = S(e[j] ⊘ s) for visible j, +0 for masked j.
    # A row with no visible column needs no case of its own: every column is masked,
    # so every output is +0.
    # Where the site type is A (f64, f32), e[j] waits in y[j] between the passes;
    # for bf16 it is recomputed in the last pass (the same operations, the same bits).
    # A causal row without keep computes its exps in a pass of their own, then sums y.
    batches, rows, cols = ctx.shape("x")
    bi, i = ix("bi"), ix("i")

    def when_visible(j: Affine, then: tuple[Stmt, ...], orelse: tuple[Stmt, ...] = ()) -> tuple[Stmt, ...]:
        return _when_visible(ctx, i, j, then, orelse)

    mx, v, e, s = ctx.var("mx"), ctx.var("v"), ctx.var("e"), ctx.var("s")
    jm, js, jy = ix("jm"), ix("js"), ix("jy")
    e_in_y = ctx.site == ctx.acc

    max_pass = Loop(
        Axis("jm", cols, REDUCE),
        when_visible(jm, (Declare(v, ctx.W("x", bi, i, jm)), If(Binary(">", v, mx), (Assign(mx, v),)))),
    )
    sum_step: tuple[Stmt, ...] = (
        Declare(e, Call("exp", sub(ctx.W("x", bi, i, js), mx))),
        Assign(s, add(s, e)),
    )
    if e_in_y:
        sum_step += (Write(ctx.at("y", bi, i, js), e),)
        out_value: Expr = div(ctx.load("y", bi, i, jy), s)
    else:
        out_value = ctx.S(div(Call("exp", sub(ctx.W("x", bi, i, jy), mx)), s))
    out_pass = Loop(
        Axis("jy", cols, PARALLEL),
        when_visible(
            jy,
            (Write(ctx.at("y", bi, i, jy), out_value),),
            (Write(ctx.at("y", bi, i, jy), ctx.S(ctx.R(0.0))),),
        ),
    )
    if e_in_y and ctx.attrs["causal"] and not ctx.attrs["has_keep"]:
        # The visible columns are a prefix, j <= i + offset: the exps first, each into
        # y[j] (a parallel pass the printer gives to exp's laned form), then their sum
        # read back from y in order; e[j] is y[j] exactly, so the same bits.
        je = ix("je")
        sum_passes: tuple[Stmt, ...] = (
            Loop(Axis("je", cols, PARALLEL),
                 when_visible(je, (Write(ctx.at("y", bi, i, je), Call("exp", sub(ctx.W("x", bi, i, je), mx))),))),
            Declare(s, ctx.R(0.0)),
            Loop(Axis("js", cols, REDUCE), when_visible(js, (Assign(s, add(s, ctx.load("y", bi, i, js))),))),
        )
    else:
        sum_passes = (Declare(s, ctx.R(0.0)), Loop(Axis("js", cols, REDUCE), when_visible(js, sum_step)))
    body = (
        Declare(mx, ctx.R(-math.inf)),
        max_pass,
        *sum_passes,
        out_pass,
    )
    return [Nest("softmax", (Axis("bi", batches), Axis("i", rows)), body)]


# ---- 7. positions ----------------------------------------------------------------------


def lower_rope(ctx: _Lowering) -> list[Nest]:
    # Table nest, in f64 with exactc's functions, for i < h = D/2 and, inside, t < T:
    #   l = exactc_log(theta); a = f64(2i) ⊘ f64(D); freq = exactc_exp(-(a ⊗ l))
    #   angle = f64(pos0 + t) ⊗ freq; c = R_A(exactc_cos(angle)); s = R_A(exactc_sin(angle))
    # Rotate nest, in A, pair (x0, x1) = (x[t,hd,i], x[t,hd,i+h]) for "half",
    # (x[t,hd,2i], x[t,hd,2i+1]) for "interleaved":
    #   y0 = S((W(x0) ⊗ c) ⊖ (W(x1) ⊗ s));  y1 = S((W(x0) ⊗ s) ⊕ (W(x1) ⊗ c))
    # inverse (rope's backward, the rotation by -angle):
    #   y0 = S((W(x0) ⊗ c) ⊕ (W(x1) ⊗ s));  y1 = S((W(x1) ⊗ c) ⊖ (W(x0) ⊗ s))
    # A pos0 that follows the run-time length (a decode step's position T) indexes the
    # tables by absolute position, rows [pos0, pos0 + positions) of pos0 + positions.
    positions, heads, dim = ctx.shape("x")
    half = dim // 2
    pos0 = ctx.attrs["pos0"]
    row = Affine.of(pos0) if dims.is_symbolic(pos0) else 0
    rows = pos0 + positions if dims.is_symbolic(pos0) else positions
    ctx.add_temp("cos_table", (rows, half))
    ctx.add_temp("sin_table", (rows, half))
    t, i, hd = ix("t"), ix("i"), ix("hd")

    def rounded(value: Expr) -> Expr:  # R_A of an f64 value
        return value if ctx.acc == "f64" else Convert(value, ctx.acc)

    a, freq = Var("a", "f64"), Var("freq", "f64")
    log_theta = Call("log", Const(float(ctx.attrs["theta"]), "f64"))

    def table_loop(fn: str, name: str) -> Loop:  # table[p, i] = R_A(fn(f64(pos0 + p) ⊗ freq))
        p = ix(name)
        angle = mul(Convert(p + Affine.of(pos0), "f64"), freq)
        write = Write(ctx.at(f"{fn}_table", p + row, i), rounded(Call(fn, angle)))
        return Loop(Axis(name, positions, PARALLEL), (write,))

    # i outermost: a frequency (an exp and a log) is computed once per pair index, and
    # each of the positions then costs a product, a cos and a sin: a loop over the
    # positions per table (t for cos, u for sin), each `table = R_A(f(angle))`, which the
    # printer gives to f's laned form (printer/nests.py, array_loop).
    table_body = (
        Declare(a, div(Convert(i * 2, "f64"), Const(float(dim), "f64"))),
        Declare(freq, Call("exp", Unary("-", mul(a, log_theta)))),
        table_loop("cos", "t"),
        table_loop("sin", "u"),
    )
    table = Nest("rope_table", (Axis("i", half),), table_body)

    if ctx.attrs["pairing"] == "half":
        first, second = i, i + half
    else:
        first, second = i * 2, i * 2 + 1
    x0, x1, c, s = ctx.var("x0"), ctx.var("x1"), ctx.var("c"), ctx.var("s")
    if ctx.attrs["inverse"]:  # rope's backward, the rotation by -angle
        y0, y1 = add(mul(x0, c), mul(x1, s)), sub(mul(x1, c), mul(x0, s))
    else:
        y0, y1 = sub(mul(x0, c), mul(x1, s)), add(mul(x0, s), mul(x1, c))
    rotate_body = (
        Declare(x0, ctx.W("x", t, hd, first)),
        Declare(x1, ctx.W("x", t, hd, second)),
        Declare(c, ctx.load("cos_table", t + row, i)),
        Declare(s, ctx.load("sin_table", t + row, i)),
        Write(ctx.at("y", t, hd, first), ctx.S(y0)),
        Write(ctx.at("y", t, hd, second), ctx.S(y1)),
    )
    # A pair side by side (interleaved, or half of a head of 2) is what gcc fuses (exactc_rt.h).
    side_by_side = ctx.attrs["pairing"] == "interleaved" or half == 1
    rotate = Nest("rope_rotate", (Axis("t", positions), Axis("hd", heads), Axis("i", half)), rotate_body,
                  gcc_unvectorized=ROTATION_FUSED if side_by_side else "")
    return [table, rotate]


# ---- 8. pooling and selection ------------------------------------------------------------


def lower_mean_pool(ctx: _Lowering) -> list[Nest]:
    # for each d: s = +0; n = 0
    #   for t in order: if keep[t] != 0: s = s ⊕ W(x[t,d]); n = n + 1
    #   y[d] = S(s ⊘ R_A(max(n, 1)))
    tokens, dim = ctx.shape("x")
    d, t = ix("d"), ix("t")
    s, count = ctx.var("s"), ctx.var("count", "i64")
    one = Affine.constant(1)
    body = (
        Declare(s, ctx.R(0.0)),
        Declare(count, Affine.constant(0)),
        Loop(
            Axis("t", tokens, REDUCE),
            (
                If(
                    Binary("!=", ctx.load("keep", t), Affine.constant(0)),
                    (Assign(s, add(s, ctx.W("x", t, d))), Assign(count, Binary("+", count, one))),
                ),
            ),
        ),
        # The count is an integer <= T, so converting it rounds as R_A does (exactly,
        # up to 2^24 at A = f32: docs/semantics.md, section 11).
        Write(ctx.at("y", d), ctx.S(div(s, Convert(Select(Binary("<", count, one), one, count), ctx.acc)))),
    )
    return [Nest("mean_pool", (Axis("d", dim),), body)]


def lower_argmax(ctx: _Lowering) -> list[Nest]:
    # The index of the row's first NaN if it has one; else the first index of the
    # maximum (strict >, so ties, -0 against +0 included, keep the earlier index).
    rows, cols = ctx.shape("x")
    m, j = ix("m"), ix("j")
    mx, v = ctx.var("mx"), ctx.var("v")
    best, first_nan = ctx.var("best", "i64"), ctx.var("first_nan", "i64")
    none = Affine.of(cols)  # no NaN seen yet
    body = (
        Declare(mx, ctx.W("x", m, 0)),
        Declare(best, Affine.constant(0)),
        Declare(first_nan, none),
        Loop(
            Axis("j", cols, REDUCE),
            (
                Declare(v, ctx.W("x", m, j)),
                If(Binary("&&", Unary("isnan", v), Binary("==", first_nan, none)), (Assign(first_nan, j),)),
                If(Binary(">", v, mx), (Assign(mx, v), Assign(best, j))),
            ),
        ),
        Write(ctx.at("y", m), Convert(Select(Binary("<", first_nan, none), first_nan, best), "i32")),
    )
    return [Nest("argmax", (Axis("m", rows),), body)]


# ---- 17. the loss_grad graph's own ------------------------------------------------------


def lower_fill(ctx: _Lowering) -> list[Nest]:
    # y = S(R_A(value)) everywhere
    i = _flat(ctx, "y")
    return [Nest("fill", (i,), (Write(ctx.at("y", ix("i")), ctx.S(ctx.R(ctx.attrs["value"]))),))]


def lower_iota(ctx: _Lowering) -> list[Nest]:
    # y[i] = start + i, int32
    (length,) = ctx.shape("y")
    value = Convert(ix("i") + ctx.attrs["start"], "i32")
    return [Nest("iota", (Axis("i", length),), (Write(ctx.at("y", ix("i")), value),))]


def lower_xent_mean(ctx: _Lowering) -> list[Nest]:
    # n = 0;  for b, t in order: if targets[b,t] != ignore: n = n + 1
    # y = S(W(x) ⊘ R_A(n))
    batch, tokens = ctx.shape("targets")
    count, one = ctx.var("count", "i64"), Affine.constant(1)
    counted = If(Binary("!=", ctx.load("targets", ix("b"), ix("t")), Affine.constant(ctx.attrs["ignore"])),
                 (Assign(count, Binary("+", count, one)),))
    body = (
        Declare(count, Affine.constant(0)),
        Loop(Axis("b", batch, REDUCE), (Loop(Axis("t", tokens, REDUCE), (counted,)),)),
        # The count is an integer <= B·T, so converting it rounds as R_A does (exactly,
        # up to 2^24 at A = f32, as mean_pool's count).
        Write(ctx.at("y", 0), ctx.S(div(ctx.W("x", 0), Convert(count, ctx.acc)))),
    )
    return [Nest("xent_mean", (Axis("i", 1),), body)]


# ---- 9. views --------------------------------------------------------------------------


def _index_axes(shape: Shape) -> tuple[list[Axis], list[Affine]]:
    """Parallel axes i0, i1, ... over a shape (one flat axis for a rank-0 shape)."""
    if not shape:
        return [Axis("i0", 1)], [ix("i0")]
    axes = [Axis(f"i{k}", extent) for k, extent in enumerate(shape)]
    return axes, [ix(a.name) for a in axes]


def lower_reshape(ctx: _Lowering) -> list[Nest]:
    # The same elements in C order: a flat bit copy.
    i = _flat(ctx, "x")
    return [Nest("reshape", (i,), (CopyBits(ctx.at("y", ix("i")), ctx.at("x", ix("i"))),))]


def lower_transpose(ctx: _Lowering) -> list[Nest]:
    # y[j_0, ..., j_r-1] = x[...] with x's axis perm[k] at j_k.
    perm = tuple(ctx.attrs["perm"])
    axes, out = _index_axes(ctx.shape("y"))
    if not perm:
        src = out
    else:
        src = [out[0]] * len(perm)
        for k, p in enumerate(perm):
            src[p] = out[k]
    return [Nest("transpose", tuple(axes), (CopyBits(ctx.at("y", *out), ctx.at("x", *src)),))]


def lower_slice(ctx: _Lowering) -> list[Nest]:
    # y = x[..., start:stop, ...] along axis.
    axis, start = ctx.attrs["axis"], ctx.attrs["start"]
    axes, out = _index_axes(ctx.shape("y"))
    src = list(out)
    src[axis] = out[axis] + Affine.of(start)
    return [Nest("slice", tuple(axes), (CopyBits(ctx.at("y", *out), ctx.at("x", *src)),))]


def lower_concat(ctx: _Lowering) -> list[Nest]:
    # a then b along axis: one copy nest per operand.
    axis = ctx.attrs["axis"]
    nests = []
    for name, shift in (("a", 0), ("b", ctx.shape("a")[axis])):
        axes, src = _index_axes(ctx.shape(name))
        dst = list(src)
        dst[axis] = src[axis] + Affine.of(shift)
        nests.append(Nest(f"concat_{name}", tuple(axes), (CopyBits(ctx.at("y", *dst), ctx.at(name, *src)),)))
    return nests


def lower_cache_write(ctx: _Lowering) -> list[Nest]:
    # y[i0, pos + i1, i2] = rows[i0, i1, i2]; y is the cache's own storage (in place), so
    # the rows of y this copy does not write are the cache's.
    axes, src = _index_axes(ctx.shape("rows"))
    dst = list(src)
    dst[1] = src[1] + Affine.of(ctx.attrs["pos"])
    return [Nest("cache_write", tuple(axes), (CopyBits(ctx.at("y", *dst), ctx.at("rows", *src)),))]


# ---- 11. integer operands ------------------------------------------------------------------

Q8_LIMIT = 127
Q4_OFFSET = 8
# The largest finite value of each accumulator type: |v| <= it is false for NaN and ±inf.
LARGEST = {"f32": float(np.finfo(np.float32).max), "f64": float(np.finfo(np.float64).max)}


def _i32(value: int) -> Expr:
    """An int32 constant."""
    return Convert(Affine.constant(value), "i32")


def _block_runs(k: int, block: int) -> tuple[int, int]:
    """(full blocks, length of the short last block, 0 if none) of a row of k values."""
    return k // block, k % block


def _quantize_block(ctx: _Lowering, base: Affine, length: int, scale_at: Access) -> tuple[Stmt, ...]:
    """q8 of the block x[m, base : base + length] (semantics.md, section 15):
    a NaN or ±inf in it gives d = NaN and values 0; else d = amax ⊘ 127, and values
    0 if d == 0, else clamp(round(W(x) ⊘ d), -127, 127) with ties away from zero."""
    m = ix("m")
    work = ctx.acc  # the type of the scale and the quotients: A, as the rule says

    def in_work(value: Expr) -> Expr:
        return value if value.type == work else Convert(value, work)

    amax, bad, v, a = ctx.var("amax"), ctx.var("bad", "i64"), ctx.var("v"), ctx.var("a")
    d, r, f = Var("d_b", work), Var("r", work), Var("f", work)
    whole, near, value = ctx.var("whole", "i32"), ctx.var("near", "i32"), ctx.var("value", "i32")

    def fill(name: str, write_value: Callable[[Affine], Stmt]) -> Loop:
        return Loop(Axis(name, length, PARALLEL), (write_value(base + ix(name)),))

    def zero(at: Affine) -> Stmt:
        return Write(ctx.at("q", m, at), Convert(_i32(0), "i8"))

    scan = Loop(Axis("ja", length, REDUCE), (
        Declare(v, ctx.W("x", m, base + ix("ja"))),
        Declare(a, Select(Binary("<", v, ctx.R(0.0)), Unary("-", v), v)),
        If(Unary("not", Binary("<=", a, Const(LARGEST[ctx.acc], ctx.acc))), (Assign(bad, Affine.constant(1)),)),
        If(Binary(">", a, amax), (Assign(amax, a),)),
    ))
    # round(r), ties away from zero: the integer part (exact), then one step away from
    # zero when the fraction (exact) is at least one half.
    jq = base + ix("jq")
    rounded = (
        Declare(r, div(in_work(ctx.W("x", m, jq)), d)),
        Declare(whole, Convert(r, "i32")),
        Declare(f, sub(r, Convert(whole, work))),
        Declare(near, Binary("+", whole, Select(Binary(">=", f, Const(0.5, work)), _i32(1),
                                                Select(Binary("<=", f, Const(-0.5, work)), _i32(-1), _i32(0))))),
        Declare(value, Select(Binary("<", near, _i32(-Q8_LIMIT)), _i32(-Q8_LIMIT),
                              Select(Binary(">", near, _i32(Q8_LIMIT)), _i32(Q8_LIMIT), near))),
        Write(ctx.at("q", m, jq), Convert(value, "i8")),
    )
    return (
        Declare(amax, ctx.R(0.0)),
        Declare(bad, Affine.constant(0)),
        scan,
        If(
            Binary("!=", bad, Affine.constant(0)),
            (FillBits(scale_at, QUIET_NAN_BITS[ctx.acc]), fill("jn", zero)),
            (
                Declare(d, div(in_work(amax), Const(float(Q8_LIMIT), work))),
                Write(scale_at, d if work == ctx.acc else Convert(d, ctx.acc)),
                If(Binary("==", d, Const(0.0, work)), (fill("jz", zero),), (Loop(Axis("jq", length, PARALLEL), rounded),)),
            ),
        ),
    )


def lower_quantize(ctx: _Lowering) -> list[Nest]:
    # Per row and block: the q8 rule of _quantize_block. The full blocks are one nest over
    # (m, b); a short last block (G does not divide K) is a nest of its own over m.
    rows, k = ctx.shape("x")
    block = ctx.attrs["block"]
    full, tail = _block_runs(k, block)
    nests = []
    if full:
        body = _quantize_block(ctx, ix("b") * block, block, ctx.at("d", ix("m"), ix("b")))
        nests.append(Nest("quantize", (Axis("m", rows), Axis("b", full)), body))
    if tail:
        body = _quantize_block(ctx, Affine.constant(full * block), tail, ctx.at("d", ix("m"), full))
        nests.append(Nest("quantize_tail", (Axis("m", rows),), body))
    return nests


def _weight_terms(ctx: _Lowering, blk: Affine | int, length: int, names: tuple[str, str],
                  step: Callable[[Affine, Expr], Stmt]) -> list[Stmt]:
    """The reduction over the first `length` values of block `blk` (k = blk·G + j): one
    loop for q8; for q4 the block's low nibbles (its first G/2 values), then its high
    nibbles (the rest), value j and value j + G/2 both in byte j of the block (ggml's
    Q4_0 order), value = nibble − 8. `step(k, value)` is the statement that adds the
    term of value k."""
    n = ix("n")
    block = ctx.attrs["block"]
    start = _affine(blk) * block
    if ctx.attrs["fmt"] == "q8":
        k = Axis(names[0], length, REDUCE)
        at = start + ix(k.name)
        return [Loop(k, (step(at, Convert(ctx.load("wq", n, at), "i32")),))]
    half = block // 2
    first_byte = _affine(blk) * half
    loops = []
    for name, offset, count in ((names[0], 0, min(length, half)), (names[1], half, length - half)):
        if count <= 0:
            continue
        byte = Convert(ctx.load("wq", n, first_byte + ix(name)), "i32")
        nibble = Binary("&", byte, _i32(0x0F)) if offset == 0 else Binary(">>", byte, _i32(4))
        value = Binary("-", nibble, _i32(Q4_OFFSET))
        loops.append(Loop(Axis(name, count, REDUCE), (step(start + offset + ix(name), value),)))
    return loops


def _blockwise_linear(ctx: _Lowering, name: str, rows: int, k: int,
                      block_steps: Callable[[Affine | int, int, tuple[str, str], str], list[Stmt]]) -> list[Nest]:
    """The nest of a quantized linear over (m, n): acc = +0, then the statements of each
    block in order (`block_steps(blk, length, loop names, suffix)`: the full blocks in a
    loop over blk, the short last block after it), the bias, y = S(acc)."""
    cols = ctx.shape("wq")[0]
    full, tail = _block_runs(k, ctx.attrs["block"])
    acc, n = ctx.var("acc"), ix("n")
    body: list[Stmt] = [Declare(acc, ctx.R(0.0))]
    if full:
        body.append(Loop(Axis("blk", full, REDUCE), tuple(block_steps(ix("blk"), ctx.attrs["block"], ("k", "kh"), ""))))
    if tail:
        body += block_steps(full, tail, ("t", "th"), "_tail")
    total: Expr = add(acc, ctx.W("b", n)) if ctx.attrs["has_b"] else acc
    body.append(Write(ctx.at("y", ix("m"), n), ctx.S(total)))
    return [Nest(name, (Axis("m", rows), Axis("n", cols)), tuple(body))]


def lower_qlinear_w(ctx: _Lowering) -> list[Nest]:
    # w = wd[n, b] ⊗ f32(value[n, k]) in f32;  acc = +0
    # for k in order: acc = acc ⊕ (W(x[m,k]) ⊗ W(w));  if b: acc = acc ⊕ W(b[n]);  y = S(acc)
    # k runs block by block (blk, then the values of the block), which is index order.
    if ctx.attrs["fmt"] in K_FORMATS:
        return lower_qlinear_w_k(ctx)
    rows, k = ctx.shape("x")
    m, n, acc = ix("m"), ix("n"), ctx.var("acc")

    def block_steps(blk: Affine | int, length: int, names: tuple[str, str], suffix: str) -> list[Stmt]:
        def step(at: Affine, value: Expr) -> Stmt:
            w = mul(ctx.load("wd", n, blk), Convert(value, "f32"))  # a rounded product, fused or not
            return Assign(acc, multiply_add(ctx, acc, ctx.W("x", m, at), ctx.widen(w)))

        return _weight_terms(ctx, blk, length, names, step)

    return _blockwise_linear(ctx, "qlinear_w", rows, k, block_steps)


# Nests gcc's vectorizer is seen to compile to other values, by the instructions it does
# it with (ir.Nest.gcc_unvectorized): the attribute of exactc_rt.h that turns it off
# where the target has them, and why.
ROTATION_FUSED, NIBBLE_SUMS_WRONG = "fma", "vnni"
GCC_UNVECTORIZED = {
    ROTATION_FUSED: ("EXACTC_GCC_NO_VECTORS_WITH_FMA",
                     "it fuses the rotation pairs stored side by side into multiply-adds (vfmaddsub)"),
    NIBBLE_SUMS_WRONG: ("EXACTC_GCC_NO_VECTORS_WITH_VNNI",
                        "gcc 12 at -O2 with AVX-VNNI sums the int8 times nibble products wrong"),
}


def lower_qlinear_i(ctx: _Lowering) -> list[Nest]:
    # acc = +0; for each block b in order:
    #   s = Σ int32(xq[m,k]) · int32(value[n,k]) over the block (exact, any order)
    #   acc = acc ⊕ (A(s) ⊗ (W(xd[m,b]) ⊗ W(wd[n,b])))
    # if b: acc = acc ⊕ W(b[n]);  y = S(acc)
    if ctx.attrs["fmt"] in K_FORMATS:
        return lower_qlinear_i_k(ctx)
    rows, k = ctx.shape("xq")
    m, n, acc = ix("m"), ix("n"), ctx.var("acc")

    def block_steps(blk: Affine | int, length: int, names: tuple[str, str], suffix: str) -> list[Stmt]:
        sum_name = "s" + suffix
        s = ctx.var(sum_name, "i32")

        def step(at: Affine, value: Expr) -> Stmt:
            return Assign(s, Binary("+", s, Binary("*", Convert(ctx.load("xq", m, at), "i32"), value)))

        scale = mul(ctx.W("xd", m, blk), ctx.W("wd", n, blk))
        return [
            Declare(s, _i32(0)),
            *_weight_terms(ctx, blk, length, names, step),
            Assign(acc, add(acc, mul(Convert(s, ctx.acc), scale))),
        ]

    (nest,) = _blockwise_linear(ctx, "qlinear_i", rows, k, block_steps)
    if ctx.attrs["fmt"] == "q4":
        nest = dataclasses.replace(nest, gcc_unvectorized=NIBBLE_SUMS_WRONG)
    return [nest]


# ---- ggml's k-quants as weights (semantics.md, section 15) ----------------------------------
# wq holds each row's super-blocks of 256 values as their bytes, wd their d (and dmin) in
# f32. A super-block is cut into sub-blocks, each with its integer scale (and min) and its
# quants; the functions below read them from the bytes, one sub-block at a time, unrolled
# (a sub-block's scale sits in a different byte and bit field for each).


@dataclasses.dataclass(frozen=True)
class _SubBlock:
    """Sub-block `index` of a super-block: values start … start + length − 1 of it, its
    integer scale (and min: None for Q6_K), and quant(v), its value v, as i32 Exprs."""

    index: int
    start: int
    length: int
    scale: Expr
    min: Expr | None
    quant: Callable[[Affine], Expr]


def _k_byte(ctx: _Lowering, blk: Affine, offset: Affine | int) -> Expr:
    """Byte `offset` of super-block `blk` of row n, as an i32."""
    size = K_FORMATS[ctx.attrs["fmt"]][0]
    return Convert(ctx.load("wq", ix("n"), blk * size + _affine(offset)), "i32")


def _bits(value: Expr, shift: int, mask: int) -> Expr:
    """(value >> shift) & mask, in i32."""
    shifted = value if shift == 0 else Binary(">>", value, _i32(shift))
    return Binary("&", shifted, _i32(mask))


def _above(low: Expr, high: Expr, bits: int) -> Expr:
    """low | (high << bits) for a low part below 2^bits: low + high·2^bits, in i32 (the
    IR's integer operators are +, −, ·, & and >>)."""
    return Binary("+", low, Binary("*", high, _i32(1 << bits)))


def _q45_scale_and_min(ctx: _Lowering, blk: Affine, j: int) -> tuple[Expr, Expr]:
    """Q4_K's and Q5_K's 6-bit scale and min of sub-block j from the 12 bytes p at 4:
    j < 4: p[j] & 63 and p[j + 4] & 63; j ≥ 4: the low and high nibbles of p[j + 4]
    with the top 2 bits of p[j − 4] (scale) and of p[j] (min) at bits 4–5."""
    def p(i: int) -> Expr:
        return _k_byte(ctx, blk, 4 + i)

    if j < 4:
        return _bits(p(j), 0, 63), _bits(p(j + 4), 0, 63)
    scale = _above(_bits(p(j + 4), 0, 15), _bits(p(j - 4), 6, 3), 4)
    return scale, _above(_bits(p(j + 4), 4, 15), _bits(p(j), 6, 3), 4)


def _k_subblocks(ctx: _Lowering, blk: Affine) -> list[_SubBlock]:
    """The sub-blocks of super-block `blk` in value order: Q4_K and Q5_K eight of 32,
    value v of sub-block j the nibble j mod 2 of qs[32·(j div 2) + v] (Q5_K: bit j of
    qh[v] at bit 4); Q6_K sixteen of 16, q − 32 with q's low 4 bits from ql and its top 2
    from qh (quarters of 32 values, two sub-blocks each), the scale an int8."""
    fmt = ctx.attrs["fmt"]
    if fmt == "q6_k":
        return [_q6_subblock(ctx, blk, j) for j in range(16)]
    qs = 16 if fmt == "q4_k" else 48
    out = []
    for j in range(8):
        def quant(v: Affine, j: int = j) -> Expr:
            low = _bits(_k_byte(ctx, blk, qs + 32 * (j // 2) + v), 4 * (j % 2), 15)
            if fmt == "q4_k":
                return low
            return _above(low, _bits(_k_byte(ctx, blk, 16 + v), j, 1), 4)

        scale, low_min = _q45_scale_and_min(ctx, blk, j)
        out.append(_SubBlock(j, 32 * j, 32, scale, low_min, quant))
    return out


def _q6_subblock(ctx: _Lowering, blk: Affine, j: int) -> _SubBlock:
    """Q6_K's sub-block j = 8·half + 2·quarter + part: values 128·half + 32·quarter +
    16·part + v; low 4 bits the nibble quarter div 2 of ql[64·half + 32·(quarter mod 2)
    + 16·part + v], top 2 bits 2·quarter of qh[32·half + 16·part + v]; scale int8 j."""
    half, rest = divmod(j, 8)
    quarter, part = divmod(rest, 2)

    def quant(v: Affine) -> Expr:
        at = 16 * part + v
        low = _bits(_k_byte(ctx, blk, 64 * half + 32 * (quarter % 2) + at), 4 * (quarter // 2), 15)
        high = _bits(_k_byte(ctx, blk, 128 + 32 * half + at), 2 * quarter, 3)
        return Binary("-", _above(low, high, 4), _i32(32))

    byte = _k_byte(ctx, blk, 192 + j)
    signed = Select(Binary(">", byte, _i32(127)), Binary("-", byte, _i32(256)), byte)
    return _SubBlock(j, 128 * half + 32 * quarter + 16 * part, 16, signed, None, quant)


def _k_field(ctx: _Lowering, blk: Affine, field: int) -> Load:
    """d (field 0) or dmin (field 1) of super-block blk of row n, f32 from wd."""
    return ctx.load("wd", ix("n"), blk * K_FORMATS[ctx.attrs["fmt"]][1] + field)


def _k_quant_nest(ctx: _Lowering, name: str, rows: int, block_body: Callable[[Affine], list[Stmt]]) -> Nest:
    """The nest over (m, n) of a k-quant linear: acc = +0, each super-block's statements
    in order, the bias, y = S(acc)."""
    cols = ctx.shape("wq")[0]
    k = ctx.shape("x" if name == "qlinear_w" else "xq")[1]
    acc, n = ctx.var("acc"), ix("n")
    body: list[Stmt] = [Declare(acc, ctx.R(0.0)),
                        Loop(Axis("blk", k // K_SUPER_BLOCK, REDUCE), tuple(block_body(ix("blk"))))]
    total: Expr = add(acc, ctx.W("b", n)) if ctx.attrs["has_b"] else acc
    body.append(Write(ctx.at("y", ix("m"), n), ctx.S(total)))
    return Nest(name, (Axis("m", rows), Axis("n", cols)), tuple(body))


def lower_qlinear_w_k(ctx: _Lowering) -> list[Nest]:
    # per sub-block j: step = d ⊗ f32(sc_j), off = dmin ⊗ f32(m_j) (f32);
    # w = step ⊗ f32(q) ⊖ off (Q6_K: w = step ⊗ f32(q − 32)); acc = acc ⊕ (W(x[m,k]) ⊗ W(w))
    # for k in index order: the super-blocks in order, their sub-blocks in value order.
    rows, acc, m = ctx.shape("x")[0], ctx.var("acc"), ix("m")

    def block_body(blk: Affine) -> list[Stmt]:
        d, dmin = ctx.var("d", "f32"), ctx.var("dmin", "f32")
        stmts: list[Stmt] = [Declare(d, _k_field(ctx, blk, 0))]
        if ctx.attrs["fmt"] != "q6_k":
            stmts.append(Declare(dmin, _k_field(ctx, blk, 1)))
        for part in _k_subblocks(ctx, blk):
            step, off, v = ctx.var(f"step{part.index}", "f32"), ctx.var(f"off{part.index}", "f32"), f"v{part.index}"
            stmts.append(Declare(step, mul(d, Convert(part.scale, "f32"))))
            w: Expr = mul(step, Convert(part.quant(ix(v)), "f32"))
            if part.min is not None:
                stmts.append(Declare(off, mul(dmin, Convert(part.min, "f32"))))
                w = sub(w, off)
            x = ctx.W("x", m, blk * K_SUPER_BLOCK + part.start + ix(v))
            stmts.append(Loop(Axis(v, part.length, REDUCE), (Assign(acc, multiply_add(ctx, acc, x, ctx.widen(w))),)))
        return stmts

    return [_k_quant_nest(ctx, "qlinear_w", rows, block_body)]


def lower_qlinear_i_k(ctx: _Lowering) -> list[Nest]:
    # per super-block: S = Σ_j sc_j · Σ xq·q and (Q4_K, Q5_K) M = Σ_j m_j · Σ xq, over
    # sub-block j, exact int32 in any order; then
    # acc = acc ⊕ (A(S) ⊗ (W(xd[m,b]) ⊗ W(d)));  acc = acc ⊖ (A(M) ⊗ (W(xd[m,b]) ⊗ W(dmin)))
    rows, acc, m = ctx.shape("xq")[0], ctx.var("acc"), ix("m")

    def block_body(blk: Affine) -> list[Stmt]:
        total, mins = ctx.var("S", "i32"), ctx.var("M", "i32")
        stmts: list[Stmt] = [Declare(total, _i32(0))]
        if ctx.attrs["fmt"] != "q6_k":
            stmts.append(Declare(mins, _i32(0)))
        for part in _k_subblocks(ctx, blk):
            s, xs, v = ctx.var(f"s{part.index}", "i32"), ctx.var(f"xs{part.index}", "i32"), f"v{part.index}"
            xq = Convert(ctx.load("xq", m, blk * K_SUPER_BLOCK + part.start + ix(v)), "i32")
            terms: list[Stmt] = [Assign(s, Binary("+", s, Binary("*", xq, part.quant(ix(v)))))]
            stmts.append(Declare(s, _i32(0)))
            if part.min is not None:
                stmts.append(Declare(xs, _i32(0)))
                terms.append(Assign(xs, Binary("+", xs, xq)))
            stmts.append(Loop(Axis(v, part.length, REDUCE), tuple(terms)))
            stmts.append(Assign(total, Binary("+", total, Binary("*", part.scale, s))))
            if part.min is not None:
                stmts.append(Assign(mins, Binary("+", mins, Binary("*", part.min, xs))))
        x_scale = ctx.W("xd", m, blk)
        stmts.append(Assign(acc, add(acc, mul(Convert(total, ctx.acc), mul(x_scale, ctx.widen(_k_field(ctx, blk, 0)))))))
        if ctx.attrs["fmt"] != "q6_k":
            min_term = mul(Convert(mins, ctx.acc), mul(x_scale, ctx.widen(_k_field(ctx, blk, 1))))
            stmts.append(Assign(acc, sub(acc, min_term)))
        return stmts

    # int8 activations times small unsigned quants: the sums gcc 12 is seen to get wrong
    return [dataclasses.replace(_k_quant_nest(ctx, "qlinear_i", rows, block_body), gcc_unvectorized=NIBBLE_SUMS_WRONG)]


# ---- 17. the backward ----------------------------------------------------------------------
# Training sites only (f64, f32): A is the site type, so W and S are the identity. An
# accumulating primitive starts each output element from acc (the adjoint so far) and
# adds the rule's terms in the rule's order; its nests are parallel over the output's
# elements only, so a layout or a thread split never reorders a sum.


def _accumulated(ctx: _Lowering, out: tuple[Affine, ...], reduce: list[Axis],
                 term: Callable[[], Expr]) -> list[Stmt]:
    """v = acc[out]; for each reduce axis nested in order: v = v ⊕ term(); y[out] = v."""
    v = ctx.var("v")
    step: Stmt = Assign(v, add(v, term()))
    for axis in reversed(reduce):
        step = Loop(axis, (step,))
    return [Declare(v, ctx.load("acc", *out)), step, Write(ctx.at("y", *out), v)]


def lower_linear_bar_x(ctx: _Lowering) -> list[Nest]:
    # y[m,k] = acc[m,k]; for n in order: y[m,k] = y[m,k] ⊕ (dy[m,n] ⊗ w[n,k])
    (rows, k_ext), (n_ext, _) = ctx.shape("x"), ctx.shape("w")
    m, k, n = ix("m"), ix("k"), ix("n")
    body = _accumulated(ctx, (m, k), [Axis("n", n_ext, REDUCE)], lambda: mul(ctx.load("dy", m, n), ctx.load("w", n, k)))
    return [Nest("linear_bar_x", (Axis("m", rows), Axis("k", k_ext)), tuple(body))]


def lower_linear_bar_w(ctx: _Lowering) -> list[Nest]:
    # y[n,k] = acc[n,k]; for the rows m in order: y[n,k] = y[n,k] ⊕ (dy[m,n] ⊗ x[m,k])
    (rows, k_ext), n_ext = ctx.shape("x"), ctx.shape("dy")[1]
    m, k, n = ix("m"), ix("k"), ix("n")
    body = _accumulated(ctx, (n, k), [Axis("m", rows, REDUCE)], lambda: mul(ctx.load("dy", m, n), ctx.load("x", m, k)))
    return [Nest("linear_bar_w", (Axis("n", n_ext), Axis("k", k_ext)), tuple(body))]


def lower_linear_bar_b(ctx: _Lowering) -> list[Nest]:
    # y[n] = acc[n]; for the rows m in order: y[n] = y[n] ⊕ dy[m,n]
    rows, n_ext = ctx.shape("dy")
    body = _accumulated(ctx, (ix("n"),), [Axis("m", rows, REDUCE)], lambda: ctx.load("dy", ix("m"), ix("n")))
    return [Nest("linear_bar_b", (Axis("n", n_ext),), tuple(body))]


def _matmul_batches(ctx: _Lowering, batches: dims.Extent, kv: dims.Extent) -> tuple[list[Axis], Affine, Affine]:
    """The batch axes of a matmul adjoint: query head i = ib·group + g reads key/value
    head ib (every index affine)."""
    group = ctx.attrs["group"]
    if group == 1:
        return [Axis("i", batches)], ix("i"), ix("i")
    return [Axis("ib", kv), Axis("g", group)], ix("ib") * group + ix("g"), ix("ib")


def lower_matmul_bar_a(ctx: _Lowering) -> list[Nest]:
    # Ā_i[m,k] = acc (Ā_i = acc[i], transposed when trans_a); for n in order:
    #   Ā_i[m,k] = Ā_i[m,k] ⊕ (dy[i,m,n] ⊗ B_i[k,n]),  B_i = b[i // group] (transposed when trans_b)
    trans_a, trans_b = ctx.attrs["trans_a"], ctx.attrs["trans_b"]
    batches, m_ext, n_ext = ctx.shape("dy")
    k_ext = ctx.shape("acc")[1] if trans_a else ctx.shape("acc")[2]
    axes, head, kv = _matmul_batches(ctx, batches, ctx.shape("b")[0])
    m, k, n = ix("m"), ix("k"), ix("n")
    out = (head, k, m) if trans_a else (head, m, k)
    b_at = (kv, n, k) if trans_b else (kv, k, n)
    body = _accumulated(ctx, out, [Axis("n", n_ext, REDUCE)], lambda: mul(ctx.load("dy", head, m, n), ctx.load("b", *b_at)))
    return [Nest("matmul_bar_a", (*axes, Axis("m", m_ext), Axis("k", k_ext)), tuple(body))]


def lower_matmul_bar_b(ctx: _Lowering) -> list[Nest]:
    # B̄_j[k,n] = acc (B̄_j = acc[j], transposed when trans_b); for the query heads
    # i = j·group + r of group j, r in order, then the rows m in order:
    #   B̄_j[k,n] = B̄_j[k,n] ⊕ (A_i[m,k] ⊗ dy[i,m,n]),  A_i = a[i] (transposed when trans_a)
    trans_a, trans_b, group = ctx.attrs["trans_a"], ctx.attrs["trans_b"], ctx.attrs["group"]
    _, m_ext, n_ext = ctx.shape("dy")
    kv = ctx.shape("acc")[0]
    k_ext = ctx.shape("acc")[2] if trans_b else ctx.shape("acc")[1]
    j, k, n, m = ix("j"), ix("k"), ix("n"), ix("m")
    head = j * group + ix("r")
    out = (j, n, k) if trans_b else (j, k, n)
    a_at = (head, k, m) if trans_a else (head, m, k)
    body = _accumulated(ctx, out, [Axis("r", group, REDUCE), Axis("m", m_ext, REDUCE)],
                        lambda: mul(ctx.load("a", *a_at), ctx.load("dy", head, m, n)))
    return [Nest("matmul_bar_b", (Axis("j", kv), Axis("k", k_ext), Axis("n", n_ext)), tuple(body))]


def lower_embedding_bar(ctx: _Lowering) -> list[Nest]:
    # Column d: y[:, d] = acc[:, d]; then for t in token order, row = ids[t]:
    #   if 0 <= row < V: y[row, d] = y[row, d] ⊕ dy[t, d]
    # The scatter writes at a loaded index, so the nest is parallel over d alone: a
    # repeated token adds every time, in token order, whatever the layout or split.
    vocab, dim = ctx.shape("acc")
    (tokens,) = ctx.shape("ids")
    d, t, row = ix("d"), ix("t"), ctx.var("row", "i64")
    in_range = Binary("&&", Binary(">=", row, Affine.constant(0)), Binary("<", row, Affine.constant(vocab)))
    at = ctx.at("y", ix("row"), d)
    body = (
        Loop(Axis("v", vocab, PARALLEL), (CopyBits(ctx.at("y", ix("v"), d), ctx.at("acc", ix("v"), d)),)),
        Loop(Axis("t", tokens, REDUCE), (
            Declare(row, Convert(ctx.load("ids", t), "i64")),
            If(in_range, (Write(at, add(Load(at), ctx.load("dy", t, d))),)),
        )),
    )
    return [Nest("embedding_bar", (Axis("d", dim),), body)]


def _xhat(ctx: _Lowering, kind: str, m: Affine, d: Affine) -> Expr:
    """xhat[m,d] from row m's stats: (x ⊖ mean) ⊗ rstd (layernorm), x ⊗ rstd (rmsnorm)."""
    x = ctx.load("x", m, d)
    if kind == "layernorm":
        return mul(sub(x, ctx.var("mean")), ctx.var("rstd"))
    return mul(x, ctx.var("rstd"))


def _row_stats(ctx: _Lowering, kind: str) -> tuple[Stmt, ...]:
    """Row m's mean and rstd (layernorm) or rstd (rmsnorm), as the forward computes them."""
    return _layernorm_stats(ctx) if kind == "layernorm" else tuple(_rmsnorm_rstd(ctx))


def lower_norm_bar_g(ctx: _Lowering) -> list[Nest]:
    # Nest 1, per row m: the forward's stats into the temporaries mean_t, rstd_t.
    # Nest 2: y[d] = acc[d]; for the rows m in order: y[d] = y[d] ⊕ (dy[m,d] ⊗ xhat[m,d]).
    kind = ctx.attrs["kind"]
    rows, dim = ctx.shape("x")
    m, d = ix("m"), ix("d")
    ctx.add_temp("rstd_t", (rows,))
    saved: tuple[Stmt, ...] = (Write(ctx.at("rstd_t", m), ctx.var("rstd")),)
    if kind == "layernorm":
        ctx.add_temp("mean_t", (rows,))
        saved = (Write(ctx.at("mean_t", m), ctx.var("mean")),) + saved
    stats = Nest("norm_bar_g_stats", (Axis("m", rows),), _row_stats(ctx, kind) + saved)
    rstd = ctx.load("rstd_t", m)
    x = ctx.load("x", m, d)
    xhat = mul(sub(x, ctx.load("mean_t", m)), rstd) if kind == "layernorm" else mul(x, rstd)
    body = _accumulated(ctx, (d,), [Axis("m", rows, REDUCE)], lambda: mul(ctx.load("dy", m, d), xhat))
    return [stats, Nest("norm_bar_g", (Axis("d", dim),), tuple(body))]


def lower_mean_pool_bar(ctx: _Lowering) -> list[Nest]:
    # Column d: n = the kept rows (an integer count); term = dy[d] ⊘ R_A(max(n, 1));
    # y[t,d] = acc[t,d] ⊕ term for kept t, acc[t,d] for the others.
    tokens, dim = ctx.shape("acc")
    d, t = ix("d"), ix("t")
    count, term, one = ctx.var("count", "i64"), ctx.var("term"), Affine.constant(1)
    kept = Binary("!=", ctx.load("keep", t), Affine.constant(0))
    body = (
        Declare(count, Affine.constant(0)),
        Loop(Axis("tc", tokens, REDUCE), (
            If(Binary("!=", ctx.load("keep", ix("tc")), Affine.constant(0)), (Assign(count, Binary("+", count, one)),)),
        )),
        Declare(term, div(ctx.load("dy", d), Convert(Select(Binary("<", count, one), one, count), ctx.acc))),
        Loop(Axis("t", tokens, PARALLEL), (
            If(kept, (Write(ctx.at("y", t, d), add(ctx.load("acc", t, d), term)),),
               (CopyBits(ctx.at("y", t, d), ctx.at("acc", t, d)),)),
        )),
    )
    return [Nest("mean_pool_bar", (Axis("d", dim),), body)]


def lower_sum_rows(ctx: _Lowering) -> list[Nest]:
    # y = acc; for t in order: y = y ⊕ x[t]
    (length,) = ctx.shape("x")
    body = _accumulated(ctx, (ix("i0"),), [Axis("t", length, REDUCE)], lambda: ctx.load("x", ix("t")))
    return [Nest("sum_rows", (Axis("i0", 1),), tuple(body))]


def _norm_bar_x(ctx: _Lowering, kind: str) -> list[Nest]:
    # Per row m, with the forward's stats, a[d] = dy[d] ⊗ g[d], n = R_A(D):
    #   sa = +0; for d: sa = sa ⊕ a[d];  ma = sa ⊘ n                       (layernorm only)
    #   sb = +0; for d: sb = sb ⊕ (a[d] ⊗ xhat[d]);  mb = sb ⊘ n
    #   y[d] = ((a[d] ⊖ ma) ⊖ (xhat[d] ⊗ mb)) ⊗ rstd   (rmsnorm: (a[d] ⊖ (xhat[d] ⊗ mb)) ⊗ rstd)
    rows, dim = ctx.shape("x")
    m, n = ix("m"), ctx.R(float(dim))
    rstd, sa, sb, ma, mb = (ctx.var(name) for name in ("rstd", "sa", "sb", "ma", "mb"))

    def a(d: Affine) -> Expr:
        return mul(ctx.load("dy", m, d), ctx.load("g", d))

    body: list[Stmt] = list(_row_stats(ctx, kind))
    d = ix("d")
    centred = a(d)
    if kind == "layernorm":  # the gradient's mean, ma
        body += [Declare(sa, ctx.R(0.0)), Loop(Axis("da", dim, REDUCE), (Assign(sa, add(sa, a(ix("da")))),)),
                 Declare(ma, div(sa, n))]
        centred = sub(centred, ma)
    body += [
        Declare(sb, ctx.R(0.0)),
        Loop(Axis("db", dim, REDUCE), (Assign(sb, add(sb, mul(a(ix("db")), _xhat(ctx, kind, m, ix("db"))))),)),
        Declare(mb, div(sb, n)),
    ]
    term = mul(sub(centred, mul(_xhat(ctx, kind, m, d), mb)), rstd)
    body.append(Loop(Axis("d", dim, PARALLEL), (Write(ctx.at("y", m, d), term),)))
    return [Nest(ctx.primitive, (Axis("m", rows),), tuple(body))]


def lower_softmax_bar(ctx: _Lowering) -> list[Nest]:
    # Row (bi, i), probs the forward's output: dot = +0; for visible j in order:
    # dot = dot ⊕ (probs[j] ⊗ dy[j]);  y[j] = probs[j] ⊗ (dy[j] ⊖ dot) for visible j,
    # -0 for masked j (so acc ⊕ y[j] is acc).
    batches, rows, cols = ctx.shape("probs")
    bi, i, dot = ix("bi"), ix("i"), ctx.var("dot")
    jd, jy = ix("jd"), ix("jy")
    body = (
        Declare(dot, ctx.R(0.0)),
        Loop(Axis("jd", cols, REDUCE), _when_visible(
            ctx, i, jd, (Assign(dot, add(dot, mul(ctx.load("probs", bi, i, jd), ctx.load("dy", bi, i, jd)))),))),
        Loop(Axis("jy", cols, PARALLEL), _when_visible(
            ctx, i, jy,
            (Write(ctx.at("y", bi, i, jy), mul(ctx.load("probs", bi, i, jy), sub(ctx.load("dy", bi, i, jy), dot))),),
            (Write(ctx.at("y", bi, i, jy), ctx.R(-0.0)),))),
    )
    return [Nest("softmax_bar", (Axis("bi", batches), Axis("i", rows)), body)]


def lower_gelu_tanh_bar(ctx: _Lowering) -> list[Nest]:
    # s = x ⊗ x; u = s ⊗ x; u = c1 ⊗ u; u = x ⊕ u; u = c0 ⊗ u; t = T(tanh, u)
    # left = 0.5 ⊗ x; right = 1 ⊕ t; dl = 0.5 ⊗ right; q = t ⊗ t; q = 1 ⊖ q; dr = left ⊗ q
    # k = c3 ⊗ s (c3 = R_A(3) ⊗ c1, one rounding); k = 1 ⊕ k; du = c0 ⊗ k
    # q = dr ⊗ du; q = dl ⊕ q;  y = dy ⊗ q
    i = _flat(ctx, "x")
    x, sq, u, t, dl, dr, du = (ctx.var(nm) for nm in ("xv", "sq", "u", "t", "dl", "dr", "du"))
    c0, c1, one, half = ctx.R(SQRT_2_OVER_PI), ctx.R(GELU_TANH_CUBIC), ctx.R(1.0), ctx.R(0.5)
    body = (
        Declare(x, ctx.load("x", ix("i"))),
        Declare(sq, mul(x, x)),
        Declare(u, mul(c0, add(x, mul(c1, mul(sq, x))))),
        Declare(t, Call("tanh", u)),
        Declare(dl, mul(half, add(one, t))),
        Declare(dr, mul(mul(half, x), sub(one, mul(t, t)))),
        Declare(du, mul(c0, add(one, mul(mul(ctx.R(3.0), c1), sq)))),
        Write(ctx.at("y", ix("i")), mul(ctx.load("dy", ix("i")), add(dl, mul(dr, du)))),
    )
    return [Nest("gelu_tanh_bar", (i,), body)]


def lower_silu_bar(ctx: _Lowering) -> list[Nest]:
    # e = T(exp, ⊖x); p = 1 ⊘ (1 ⊕ e); q = 1 ⊖ p; q = x ⊗ q; q = 1 ⊕ q; q = p ⊗ q;  y = dy ⊗ q
    i = _flat(ctx, "x")
    x, p = ctx.var("xv"), ctx.var("pr")
    one = ctx.R(1.0)
    body = (
        Declare(x, ctx.load("x", ix("i"))),
        Declare(p, div(one, add(one, Call("exp", Unary("-", x))))),
        Write(ctx.at("y", ix("i")), mul(ctx.load("dy", ix("i")), mul(p, add(one, mul(x, sub(one, p)))))),
    )
    return [Nest("silu_bar", (i,), body)]


def _xent_row(ctx: _Lowering) -> tuple[list[Stmt], Expr]:
    """Row t of the logits: its target, whether it counts (a target other than ignore,
    in [0, V)), m = its maximum (strict >), s = Σ T(exp, x[j] ⊖ m) in order."""
    rows, vocab = ctx.shape("logits")
    t = ix("t")
    target, mx, v, s = ctx.var("target", "i64"), ctx.var("mx"), ctx.var("v"), ctx.var("s")
    counts = Binary("&&", Binary("!=", target, Affine.constant(ctx.attrs["ignore"])),
                    Binary("&&", Binary(">=", target, Affine.constant(0)), Binary("<", target, Affine.constant(vocab))))
    body: list[Stmt] = [
        Declare(target, Convert(ctx.load("targets", t), "i64")),
        Declare(mx, ctx.R(-math.inf)),
        Loop(Axis("jm", vocab, REDUCE), (
            Declare(v, ctx.load("logits", t, ix("jm"))), If(Binary(">", v, mx), (Assign(mx, v),)))),
        Declare(s, ctx.R(0.0)),
        Loop(Axis("js", vocab, REDUCE), (Assign(s, add(s, Call("exp", sub(ctx.load("logits", t, ix("js")), mx)))),)),
    ]
    return body, counts


def lower_xent_rows(ctx: _Lowering) -> list[Nest]:
    # loss = T(log, s) ⊖ (x[target] ⊖ m) where the row counts, +0 where it does not.
    body, counts = _xent_row(ctx)
    t = ix("t")
    picked = ctx.load("logits", t, ix("target"))
    loss = sub(Call("log", ctx.var("s")), sub(picked, ctx.var("mx")))
    body.append(If(counts, (Write(ctx.at("y", t), loss),), (Write(ctx.at("y", t), ctx.R(0.0)),)))
    return [Nest("xent_rows", (Axis("t", ctx.shape("logits")[0]),), tuple(body))]


def lower_xent_bar(ctx: _Lowering) -> list[Nest]:
    # Where the row counts: p = T(exp, x[j] ⊖ m) ⊘ s; p = p ⊖ 1 at j = target; y[j] = p ⊗ r.
    # Where it does not: y[j] = +0.
    body, counts = _xent_row(ctx)
    rows, vocab = ctx.shape("logits")
    t, j, p = ix("t"), ix("j"), ctx.var("pr")
    r = ctx.var("rv")
    column = (
        Declare(p, div(Call("exp", sub(ctx.load("logits", t, j), ctx.var("mx"))), ctx.var("s"))),
        If(Binary("==", j, ctx.var("target", "i64")), (Assign(p, sub(p, ctx.R(1.0))),)),
        Write(ctx.at("y", t, j), mul(p, r)),
    )
    body += [
        Declare(r, ctx.load("r", 0)),
        If(counts, (Loop(Axis("j", vocab, PARALLEL), column),),
           (Loop(Axis("jz", vocab, PARALLEL), (Write(ctx.at("y", t, ix("jz")), ctx.R(0.0)),)),)),
    ]
    return [Nest("xent_bar", (Axis("t", rows),), tuple(body))]


def lower_adamw(ctx: _Lowering) -> list[Nest]:
    # With h's scalars (clip, decay, w1, β2, w2, root, eps, step), per element:
    #   g = g ⊗ clip;  p = param ⊗ decay (decays only);  m = m ⊕ (w1 ⊗ (g ⊖ m))
    #   v = (v ⊗ β2) ⊕ (w2 ⊗ (g ⊗ g));  den = (√v ⊘ root) ⊕ eps;  param_out = p ⊖ (step ⊗ (m ⊘ den))
    i = ix("i")
    h = {name: ctx.load("h", k) for k, name in enumerate(ADAMW_SCALARS)}
    g, p, mt, vt = ctx.var("gc"), ctx.var("pd"), ctx.var("mt"), ctx.var("vt")
    decayed: Expr = mul(ctx.load("param", i), h["decay"]) if ctx.attrs["decays"] else ctx.load("param", i)
    den = add(div(Call("sqrt", vt), h["root"]), h["eps"])
    body = (
        Declare(g, mul(ctx.load("g", i), h["clip"])),
        Declare(p, decayed),
        Declare(mt, add(ctx.load("m", i), mul(h["w1"], sub(g, ctx.load("m", i))))),
        Declare(vt, add(mul(ctx.load("v", i), h["beta2"]), mul(h["w2"], mul(g, g)))),
        Write(ctx.at("m_out", i), mt),
        Write(ctx.at("v_out", i), vt),
        Write(ctx.at("param_out", i), sub(p, mul(h["step"], div(mt, den)))),
    )
    return [Nest("adamw", (_flat(ctx, "param"),), body)]


_LOWERINGS: dict[str, Callable[[_Lowering], list[Nest]]] = {
    "add": _binary("+"),
    "sub": _binary("-"),
    "mul": _binary("*"),
    "scale": lower_scale,
    "linear": lower_linear,
    "matmul": lower_matmul,
    "embedding": lower_embedding,
    "layernorm": lower_layernorm,
    "rmsnorm": lower_rmsnorm,
    "softmax": lower_softmax,
    "gelu_tanh": lower_gelu_tanh,
    "gelu_erf": lower_gelu_erf,
    "silu": lower_silu,
    "rope": lower_rope,
    "mean_pool": lower_mean_pool,
    "l2norm": lower_l2norm,
    "argmax": lower_argmax,
    "reshape": lower_reshape,
    "transpose": lower_transpose,
    "slice": lower_slice,
    "concat": lower_concat,
    "cache_write": lower_cache_write,
    "quantize": lower_quantize,
    "qlinear_w": lower_qlinear_w,
    "qlinear_i": lower_qlinear_i,
    "linear_bar_x": lower_linear_bar_x,
    "linear_bar_w": lower_linear_bar_w,
    "linear_bar_b": lower_linear_bar_b,
    "matmul_bar_a": lower_matmul_bar_a,
    "matmul_bar_b": lower_matmul_bar_b,
    "embedding_bar": lower_embedding_bar,
    "norm_bar_g": lower_norm_bar_g,
    "mean_pool_bar": lower_mean_pool_bar,
    "sum_rows": lower_sum_rows,
    "layernorm_bar_x": lambda ctx: _norm_bar_x(ctx, "layernorm"),
    "rmsnorm_bar_x": lambda ctx: _norm_bar_x(ctx, "rmsnorm"),
    "softmax_bar": lower_softmax_bar,
    "gelu_tanh_bar": lower_gelu_tanh_bar,
    "silu_bar": lower_silu_bar,
    "xent_rows": lower_xent_rows,
    "xent_bar": lower_xent_bar,
    "adamw": lower_adamw,
    "fill": lower_fill,
    "iota": lower_iota,
    "xent_mean": lower_xent_mean,
}
