"""Strategies for primitive cases: a primitive, a site type, attributes and the specs of
its input tensors. A case is small to print and makes its inputs again on demand."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from hypothesis import strategies as st

from exactc.exporter import dims as dimensions
from exactc.exporter.primitives import CONTRACT_FMA, CONTRACT_OFF, FUSED_PRIMITIVES, PRIMITIVES, get_primitive
from exactc.strategies.fused import designed_operands
from exactc.strategies.quant import (
    ArraySpec,
    KQuantSpec,
    RealBlockSpec,
    ScaleSpec,
    ValueSpec,
    qlinear_operands,
    quantize_operands,
)
from exactc.strategies.tensors import (
    IntSpec,
    TensorSpec,
    dims,
    id_specs,
    keep_specs,
    tensor_specs,
)

# The work one case may cost the reference (multiply-adds); keeps a campaign brisk.
MAX_WORK = 1_500_000


@dataclasses.dataclass(frozen=True)
class Case:
    """One primitive applied once: enough to lower it, run the reference and rebuild
    the inputs bit for bit."""

    primitive: str
    site: str
    attrs: tuple[tuple[str, Any], ...]
    specs: tuple[tuple[str, TensorSpec | IntSpec | ValueSpec | ScaleSpec | RealBlockSpec | KQuantSpec | ArraySpec], ...]
    # A run-time length: the kernel is lowered with every dimension equal to `length`
    # following T (1 <= T <= top) and run at T = length; 0: static shapes.
    length: int = 0
    top: int = 0
    # The products' realization (docs/semantics.md section 18) both backends run it in.
    contract: str = CONTRACT_OFF

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The operands' shapes as the case runs them (at its length)."""
        return {name: spec.shape for name, spec in self.specs}

    @property
    def kernel_shapes(self) -> dict[str, tuple]:
        """The shapes the kernel is lowered for: `shapes`, with every dimension equal to
        the run-time length a dims.Dim (T, bounded by `top`) when the case has one."""
        if not self.top:
            return self.shapes
        T = dimensions.length(self.top)
        return {name: tuple(T if d == self.length else d for d in shape) for name, shape in self.shapes.items()}

    def inputs(self) -> dict[str, np.ndarray]:
        return {name: spec.make() for name, spec in self.specs}

    def describe(self) -> str:
        """One line a person can read and paste: the case as Python."""
        return repr(self)


def _case(primitive: str, site: str, attrs: dict, specs: dict) -> Case:
    get_primitive(primitive).outputs({k: v.shape for k, v in specs.items()}, attrs)
    return Case(primitive, site, tuple(sorted(attrs.items())), tuple(specs.items()))


@st.composite
def _shape(draw, rank_lo: int = 1, rank_hi: int = 3, max_size: int = 20_000, max_dim: int = 64):
    rank = draw(st.integers(rank_lo, rank_hi))
    shape = []
    for _ in range(rank):
        room = max(1, max_size // max(1, math.prod(shape)))
        shape.append(min(draw(dims(max_dim)), room))
    return tuple(shape)


def _elementwise(name: str, operands: tuple[str, ...], wide: bool = False):
    @st.composite
    def build(draw, site):
        shape = draw(_shape())
        scales = (1.0, 0.01, 30.0, 300.0) if wide else (1.0, 0.01, 30.0)
        specs = {op: draw(tensor_specs(shape, site, scales=scales)) for op in operands}
        attrs = {}
        if name == "scale":
            attrs["s"] = draw(
                st.one_of(
                    st.sampled_from([0.125, 0.17677669529663687, -0.0, 3.0, 1e-30]),
                    st.floats(-1e3, 1e3, allow_nan=False),
                )
            )
        return _case(name, site, attrs, specs)

    return build


@st.composite
def _linear(draw, site):
    m, k, n = draw(dims(64)), draw(dims(320)), draw(dims(128))
    k = min(k, max(1, MAX_WORK // (m * n)))
    has_b = draw(st.booleans())
    specs = {"x": draw(tensor_specs((m, k), site)), "w": draw(tensor_specs((n, k), site))}
    if has_b:
        specs["b"] = draw(tensor_specs((n,), site))
    return _case("linear", site, {"has_b": has_b}, specs)


@st.composite
def _matmul(draw, site):
    group = draw(st.sampled_from([1, 1, 2, 3]))
    bb, m, k, n = draw(st.integers(1, 4)), draw(dims(32)), draw(dims(64)), draw(dims(32))
    trans_a, trans_b = draw(st.booleans()), draw(st.booleans())
    a_shape = (bb * group, k, m) if trans_a else (bb * group, m, k)
    b_shape = (bb, n, k) if trans_b else (bb, k, n)
    attrs = {"trans_a": trans_a, "trans_b": trans_b, "group": group}
    if draw(st.booleans()):  # b is the prefix of a longer b: a cache of some capacity
        attrs["b_rows"] = b_shape[1]
        b_shape = (bb, b_shape[1] + draw(st.integers(0, 9)), b_shape[2])
    specs = {"a": draw(tensor_specs(a_shape, site)), "b": draw(tensor_specs(b_shape, site))}
    return _case("matmul", site, attrs, specs)


@st.composite
def _embedding(draw, site):
    v, d, t = draw(dims(97)), draw(dims(64)), draw(dims(33))
    specs = {"table": draw(tensor_specs((v, d), site)), "ids": draw(id_specs(t, v))}
    return _case("embedding", site, {}, specs)


_EPS = st.sampled_from([1e-5, 1e-6, 1e-12, 0.0, 1.0, 0.1])


@st.composite
def _rows(draw, name: str, site, params: tuple[str, ...], eps_default=None):
    m, d = draw(dims(33)), draw(dims(307))
    specs = {"x": draw(tensor_specs((m, d), site))}
    for p in params:
        specs[p] = draw(tensor_specs((d,), site))
    attrs = {"eps": draw(_EPS)} if eps_default is not None else {}
    return _case(name, site, attrs, specs)


@st.composite
def _softmax(draw, site):
    b, m, n = draw(st.integers(1, 3)), draw(dims(33)), draw(dims(97))
    causal = draw(st.booleans())
    offset = draw(st.integers(-2, n + 1)) if causal else 0
    has_keep = draw(st.booleans())
    specs = {"x": draw(tensor_specs((b, m, n), site, scales=(1.0, 10.0, 100.0)))}
    if has_keep:
        specs["keep"] = draw(keep_specs(n))
    attrs = {"causal": causal, "offset": offset, "has_keep": has_keep}
    return _case("softmax", site, attrs, specs)


@st.composite
def _rope(draw, site):
    t, h, half = draw(dims(33)), draw(st.integers(1, 4)), draw(dims(32))
    attrs = {
        "theta": draw(st.sampled_from([10000.0, 500000.0, 10.0, 1e6])),
        "pos0": draw(st.sampled_from([0, 0, 1, 7, 1000, 4095, 100_000])),
        "pairing": draw(st.sampled_from(["half", "interleaved"])),
        "inverse": draw(st.booleans()),
    }
    specs = {"x": draw(tensor_specs((t, h, 2 * half), site))}
    return _case("rope", site, attrs, specs)


@st.composite
def _mean_pool(draw, site):
    t, d = draw(dims(64)), draw(dims(128))
    specs = {"x": draw(tensor_specs((t, d), site)), "keep": draw(keep_specs(t))}
    return _case("mean_pool", site, {}, specs)


@st.composite
def _argmax(draw, site):
    m, n = draw(dims(33)), draw(dims(211))
    return _case("argmax", site, {}, {"x": draw(tensor_specs((m, n), site))})


def _factor_shape(draw, total: int) -> tuple[int, ...]:
    """A shape with `total` elements: `total` split into up to three drawn factors."""
    shape, rest = [], total
    for _ in range(draw(st.integers(0, 2))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        factor = draw(st.sampled_from(divisors))
        shape.append(factor)
        rest //= factor
    shape.append(rest)
    return tuple(shape)


@st.composite
def _reshape(draw, site):
    shape = draw(_shape(max_dim=33))
    target = _factor_shape(draw, math.prod(shape))
    specs = {"x": draw(tensor_specs(shape, site))}
    return _case("reshape", site, {"shape": target}, specs)


@st.composite
def _transpose(draw, site):
    shape = draw(_shape(rank_lo=2, rank_hi=4, max_size=8000, max_dim=33))
    perm = tuple(draw(st.permutations(range(len(shape)))))
    return _case("transpose", site, {"perm": perm}, {"x": draw(tensor_specs(shape, site))})


@st.composite
def _slice(draw, site):
    shape = draw(_shape(max_dim=33))
    axis = draw(st.integers(0, len(shape) - 1))
    start = draw(st.integers(0, shape[axis] - 1))
    stop = draw(st.integers(start + 1, shape[axis]))
    attrs = {"axis": axis, "start": start, "stop": stop}
    return _case("slice", site, attrs, {"x": draw(tensor_specs(shape, site))})


@st.composite
def _concat(draw, site):
    shape = draw(_shape(max_dim=33))
    axis = draw(st.integers(0, len(shape) - 1))
    other = shape[:axis] + (draw(dims(17)),) + shape[axis + 1 :]
    specs = {"a": draw(tensor_specs(shape, site)), "b": draw(tensor_specs(other, site))}
    return _case("concat", site, {"axis": axis}, specs)


@st.composite
def _cache_write(draw, site):
    b, r, w = draw(st.integers(1, 4)), draw(dims(3)), draw(dims(33))
    capacity = r + draw(st.integers(0, 9))
    pos = draw(st.integers(0, capacity - r))
    specs = {"cache": draw(tensor_specs((b, capacity, w), site)), "rows": draw(tensor_specs((b, r, w), site))}
    return _case("cache_write", site, {"pos": pos}, specs)


# ---- the backward (docs/semantics.md section 17): f64 and f32 only ----------------------


def _specs(draw, site, **shapes) -> dict:
    return {name: draw(tensor_specs(shape, site)) for name, shape in shapes.items()}


@st.composite
def _linear_bar(draw, name: str, site):
    m, k, n = draw(dims(64)), draw(dims(97)), draw(dims(64))
    k = min(k, max(1, MAX_WORK // (m * n)))
    shapes = {
        "linear_bar_x": {"x": (m, k), "w": (n, k), "dy": (m, n), "acc": (m, k)},
        "linear_bar_w": {"x": (m, k), "dy": (m, n), "acc": (n, k)},
        "linear_bar_b": {"dy": (m, n), "acc": (n,)},
    }[name]
    return _case(name, site, {}, _specs(draw, site, **shapes))


@st.composite
def _matmul_bar(draw, name: str, site):
    group = draw(st.sampled_from([1, 1, 2, 3]))
    bb, m, k, n = draw(st.integers(1, 4)), draw(dims(32)), draw(dims(33)), draw(dims(32))
    trans_a, trans_b = draw(st.booleans()), draw(st.booleans())
    a_shape = (bb * group, k, m) if trans_a else (bb * group, m, k)
    b_shape = (bb, n, k) if trans_b else (bb, k, n)
    attrs = {"trans_a": trans_a, "trans_b": trans_b, "group": group}
    dy = (bb * group, m, n)
    shapes = {"b": b_shape, "dy": dy, "acc": a_shape} if name == "matmul_bar_a" else {"a": a_shape, "dy": dy, "acc": b_shape}
    return _case(name, site, attrs, _specs(draw, site, **shapes))


@st.composite
def _embedding_bar(draw, site):
    """More tokens than rows half the time (repeated tokens), and ids out of range."""
    v, d = draw(dims(31)), draw(dims(64))
    t = draw(dims(97))
    specs = {"ids": draw(id_specs(t, v)), **_specs(draw, site, dy=(t, d), acc=(v, d))}
    return _case("embedding_bar", site, {}, specs)


@st.composite
def _norm_bar(draw, name: str, site):
    m, d = draw(dims(33)), draw(dims(307))
    attrs = {"eps": draw(_EPS)}
    if name == "norm_bar_g":
        attrs["kind"] = draw(st.sampled_from(["layernorm", "rmsnorm"]))
        return _case(name, site, attrs, _specs(draw, site, x=(m, d), dy=(m, d), acc=(d,)))
    return _case(name, site, attrs, _specs(draw, site, x=(m, d), g=(d,), dy=(m, d)))


@st.composite
def _mean_pool_bar(draw, site):
    t, d = draw(dims(64)), draw(dims(128))
    specs = {"keep": draw(keep_specs(t)), **_specs(draw, site, dy=(d,), acc=(t, d))}
    return _case("mean_pool_bar", site, {}, specs)


@st.composite
def _sum_rows(draw, site):
    return _case("sum_rows", site, {}, _specs(draw, site, x=(draw(dims(307)),), acc=()))


@st.composite
def _softmax_bar(draw, site):
    b, m, n = draw(st.integers(1, 3)), draw(dims(33)), draw(dims(97))
    causal = draw(st.booleans())
    offset = draw(st.integers(-2, n + 1)) if causal else 0
    has_keep = draw(st.booleans())
    specs = _specs(draw, site, probs=(b, m, n), dy=(b, m, n))
    if has_keep:
        specs["keep"] = draw(keep_specs(n))
    return _case("softmax_bar", site, {"causal": causal, "offset": offset, "has_keep": has_keep}, specs)


@st.composite
def _activation_bar(draw, name: str, site):
    shape = draw(_shape())
    specs = {"x": draw(tensor_specs(shape, site, scales=(1.0, 0.01, 30.0, 300.0))), "dy": draw(tensor_specs(shape, site))}
    return _case(name, site, {}, specs)


@st.composite
def _xent(draw, name: str, site):
    """Targets in range, some the ignore index (rows that do not count), some out of range."""
    t, v = draw(dims(33)), draw(dims(211))
    ignore = draw(st.sampled_from([-100, -1, 0]))
    outliers = tuple((draw(st.integers(0, 2**16)), draw(st.sampled_from([ignore, ignore, -7, v, v + 3])))
                     for _ in range(draw(st.sampled_from([0, 1, 3]))))
    specs = {"logits": draw(tensor_specs((t, v), site, scales=(1.0, 10.0, 100.0))),
             "targets": IntSpec((t,), draw(st.integers(0, 2**32 - 1)), 0, v, outliers)}
    if name == "xent_bar":
        specs["r"] = draw(tensor_specs((), site))
    return _case(name, site, {"ignore": ignore}, specs)


@st.composite
def _adamw(draw, site):
    shape = draw(_shape(max_dim=97))
    specs = _specs(draw, site, param=shape, g=shape, m=shape, v=shape, h=(8,))
    return _case("adamw", site, {"decays": draw(st.booleans())}, specs)
@st.composite
def _fill(draw, site):
    shape = draw(_shape(rank_lo=0))
    value = draw(st.one_of(st.sampled_from([0.0, -0.0, 1.0, 1e-30, 1e300]), st.floats(-1e3, 1e3, allow_nan=False)))
    return _case("fill", site, {"shape": shape, "value": value}, {})


@st.composite
def _iota(draw, site):
    attrs = {"start": draw(st.sampled_from([0, 0, 1, 7, 4095])), "length": draw(dims(97))}
    return _case("iota", site, attrs, {})


@st.composite
def _xent_mean(draw, site):
    b, t = draw(st.integers(1, 4)), draw(dims(33))
    ignore = draw(st.sampled_from([-100, -100, 0, 3]))  # with 0 or 3, about a fifth of the targets are ignored
    ignored = tuple((draw(st.integers(0, 2**16)), -100) for _ in range(draw(st.integers(0, 4))))
    targets = IntSpec((b, t), draw(st.integers(0, 2**32 - 1)), 0, 5, ignored)
    specs = {"x": draw(tensor_specs((), site)), "targets": targets}
    return _case("xent_mean", site, {"ignore": ignore}, specs)


def _quantized(name: str, operands):
    """The case builder of a primitive of quantized operands (strategies/quant.py)."""

    @st.composite
    def build(draw, site):
        attrs, specs = draw(operands(site))
        return _case(name, site, attrs, specs)

    return build


CASE_BUILDERS = {
    "add": _elementwise("add", ("a", "b")),
    "sub": _elementwise("sub", ("a", "b")),
    "mul": _elementwise("mul", ("a", "b")),
    "scale": _elementwise("scale", ("x",)),
    "linear": _linear,
    "matmul": _matmul,
    "embedding": _embedding,
    "layernorm": lambda site: _rows("layernorm", site, ("g", "b"), eps_default=1e-5),
    "rmsnorm": lambda site: _rows("rmsnorm", site, ("g",), eps_default=1e-5),
    "l2norm": lambda site: _rows("l2norm", site, (), eps_default=1e-12),
    "softmax": _softmax,
    "gelu_tanh": _elementwise("gelu_tanh", ("x",), wide=True),
    "gelu_erf": _elementwise("gelu_erf", ("x",), wide=True),
    "silu": _elementwise("silu", ("x",), wide=True),
    "rope": _rope,
    "mean_pool": _mean_pool,
    "argmax": _argmax,
    "reshape": _reshape,
    "transpose": _transpose,
    "slice": _slice,
    "concat": _concat,
    "cache_write": _cache_write,
    "quantize": _quantized("quantize", quantize_operands),
    "qlinear_w": _quantized("qlinear_w", lambda site: qlinear_operands("qlinear_w", site)),
    "qlinear_i": _quantized("qlinear_i", lambda site: qlinear_operands("qlinear_i", site)),
    **{name: (lambda name: lambda site: _linear_bar(name, site))(name)
       for name in ("linear_bar_x", "linear_bar_w", "linear_bar_b")},
    **{name: (lambda name: lambda site: _matmul_bar(name, site))(name) for name in ("matmul_bar_a", "matmul_bar_b")},
    **{name: (lambda name: lambda site: _norm_bar(name, site))(name)
       for name in ("norm_bar_g", "layernorm_bar_x", "rmsnorm_bar_x")},
    **{name: (lambda name: lambda site: _activation_bar(name, site))(name) for name in ("gelu_tanh_bar", "silu_bar")},
    **{name: (lambda name: lambda site: _xent(name, site))(name) for name in ("xent_rows", "xent_bar")},
    "embedding_bar": _embedding_bar,
    "mean_pool_bar": _mean_pool_bar,
    "sum_rows": _sum_rows,
    "softmax_bar": _softmax_bar,
    "adamw": _adamw,
    "fill": _fill,
    "iota": _iota,
    "xent_mean": _xent_mean,
}
assert sorted(CASE_BUILDERS) == sorted(PRIMITIVES), "every primitive needs a case builder"


@st.composite
def cases(draw, primitive: str | None = None, site: str | None = None) -> Case:
    """A primitive case: any primitive and site type unless fixed; small shapes favoured."""
    primitive = primitive or draw(st.sampled_from(sorted(PRIMITIVES)))
    site = site or draw(st.sampled_from(PRIMITIVES[primitive].sites))
    return draw(CASE_BUILDERS[primitive](site))


@st.composite
def fused_cases(draw, primitive: str | None = None, site: str | None = None) -> Case:
    """A case of a fused primitive (linear, matmul, qlinear_w) in the fused realization."""
    case = draw(cases(primitive or draw(st.sampled_from(FUSED_PRIMITIVES)), site))
    return dataclasses.replace(case, contract=CONTRACT_FMA)


def case_batches(primitive: str | None = None, site: str | None = None, max_size: int = 6):
    """Lists of cases compiled together in one compiler call."""
    return st.lists(cases(primitive, site), min_size=1, max_size=max_size)


# Primitives the run-time length property draws: their attributes hold no length, so a
# case at length L is the kernel over T run at T = L.
RUN_TIME_PRIMITIVES = ("add", "embedding", "gelu_tanh", "layernorm", "linear", "matmul", "rmsnorm", "softmax",
                       "transpose")


@st.composite
def run_time_cases(draw, primitive: str | None = None, max_extra: int = 6, site: str | None = None) -> Case:
    """A case whose kernel follows a run-time length: a drawn case, its first operand's
    first dimension taken as the length L, every dimension equal to L bound at run time
    (T_max drawn in [L + 1, L + max_extra]: the run is shorter than the bound, so a loop
    that runs to T_max shows), run at T = L. Cases whose kernel cannot follow
    T (a rule that holds at L only) are filtered."""
    from hypothesis import assume

    from exactc.exporter.kernels import lower
    from exactc.exporter.primitives import PrimitiveError

    case = draw(cases(primitive or draw(st.sampled_from([p for p in RUN_TIME_PRIMITIVES if p in PRIMITIVES])), site))
    length = next(iter(case.shapes.values()))[0]
    top = length + draw(st.integers(1, max_extra))
    case = dataclasses.replace(case, length=length, top=top)
    try:
        lower(case.primitive, case.site, case.kernel_shapes, case.attr_dict)
    except (PrimitiveError, ValueError):
        assume(False)
    return case


def sibling(case: Case, length: int, salt: int) -> Case:
    """The case's kernel run on fresh inputs: every spec's seed moved by `salt`, and, for
    a case that follows a run-time length, every dimension equal to its length set to
    `length` (1 <= length <= top). The kernel is the same (Case.kernel_shapes), so one
    compiled object serves every sibling."""

    def moved(spec):
        fields = {f.name for f in dataclasses.fields(spec)}
        changes = {"seed": (spec.seed + salt) % 2**32} if "seed" in fields else {}
        if case.top and "shape" in fields:
            changes["shape"] = tuple(length if d == case.length else d for d in spec.shape)
        return dataclasses.replace(spec, **changes)

    if case.top and length not in sibling_lengths(case):
        raise ValueError(f"a sibling of {case.describe()} runs at a length in 1 <= T <= {case.top} that no static "
                         f"dimension has (it would follow T too), not {length}")
    specs = tuple((name, moved(spec)) for name, spec in case.specs)
    return dataclasses.replace(case, specs=specs, length=length if case.top else 0)


def sibling_lengths(case: Case) -> list[int]:
    """The lengths a sibling of a run-time case may run at: 1..top, but none a static
    dimension of its shapes has (Case.kernel_shapes would make that dimension follow T)."""
    static = {d for shape in case.shapes.values() for d in shape if d != case.length}
    return [n for n in range(1, case.top + 1) if n not in static]

# The fused primitives whose two operands strategies/fused.py designs together.
DESIGNED_PRIMITIVES = ("linear", "matmul")


@st.composite
def kernel_families(draw, primitive: str | None = None, site: str | None = None, siblings: int = 8,
                    salt: int = 0, contract: str = CONTRACT_OFF) -> list[Case]:
    """A drawn case and `siblings - 1` more on the same kernel (`sibling`): fresh inputs,
    and a drawn run-time length in [1, T_max] when the primitive follows one (half of
    the draws of RUN_TIME_PRIMITIVES). What the campaign runs: one compiled kernel
    serves the whole family. `salt` moves every seed of the family: a campaign's tasks
    give each its own, so the example Hypothesis tries first in every run (the simplest)
    does not repeat the same inputs. `contract`: the realization the family runs in (a
    fused one draws among FUSED_PRIMITIVES, and half of its linear and matmul cases take
    designed operands whose steps meet ties, cancellations and overflows that come back:
    strategies/fused.py)."""
    fused = contract != CONTRACT_OFF
    primitive = primitive or draw(st.sampled_from(FUSED_PRIMITIVES if fused else sorted(PRIMITIVES)))
    site = site or draw(st.sampled_from(PRIMITIVES[primitive].sites))
    if primitive in RUN_TIME_PRIMITIVES and draw(st.booleans()):
        case = draw(run_time_cases(primitive, site=site))
    else:
        case = draw(cases(primitive, site))
    case = dataclasses.replace(case, contract=contract)
    if fused and primitive in DESIGNED_PRIMITIVES and draw(st.booleans()):
        case = draw(designed_operands(case))
    family = [sibling(case, case.length, salt) if salt else case]
    for j in range(1, siblings):
        length = draw(st.sampled_from(sibling_lengths(case))) if case.top else 0
        family.append(sibling(case, length, salt + j))
    return family
