"""The kernel IR: loop nests over parallel and reduction axes.

A primitive at a site type is lowered (lower.py) to a Kernel: buffers, one or more Nests,
and the Launches that run them in order. The C printer (exporter/printer/kernels.py)
walks this IR and nothing else; a plan (below) is data it reads beside the IR, never a
rewrite of it. Every node is a small frozen dataclass, so trees compare by value and
print the same text every time.

The shape of a nest
-------------------

    nest linear: parallel m<3, n<5 | body: reduce k<7
      acc : f32 = 0.0f
      for k<7 (reduce):
        acc = acc + (x[m,k] * w[n,k])
      y[m,n] = acc

  In the fused realization (docs/semantics.md section 18) the step is one node,
  `acc = fma(x[m,k], w[n,k], acc)` (Fma), which every layout arranges as it does the
  default step.

- `axes` are the PARALLEL axes of a perfect loop nest, outermost first. Each point of
  their product runs `body` once and writes elements no other point writes, so the
  axes may be reordered, tiled, laned or split between threads without changing a bit.
  The plain nest function takes the outermost one as a [lo, hi) range, which a Launch
  runs whole; a thread split may divide any of them instead (splits.py).
- `body` is a sequence of statements. A `Loop` in the body is either a REDUCE loop (a
  sequential reduction: its iterations run in index order, always) or a PARALLEL loop
  (independent iterations, e.g. layernorm's output pass over d), printed as a plain
  sequential loop: a layout arranges the nest's axes only, never a loop of the body.
- Buffers are addressed by index tuples whose entries are `Affine` expressions: integer
  linear combinations of axis variables (and of i64 scalars, for gathers) plus a
  constant. An index of one entry into a buffer of higher rank addresses the element
  at that flat offset in C order (elementwise kernels and reshape use it). Affine
  indices are what tiling needs: substitute n = n_o*T + n_i and every access stays
  affine.
- Scalars are typed (`f64`, `f32`: the arithmetic types; `i64`: integers and indices;
  `bool`). Values of buffers are typed by the buffer (`bf16` and `i32` are storage
  types: they are converted before any arithmetic). Every rounding is a node: a
  `Binary` is one IEEE operation in its type, a `Convert` is one conversion, and the
  tree fixes the order. Nothing is implicit, so the text *is* the arithmetic.

Run-time extents
----------------

An extent or a buffer dimension may follow the program's run-time sequence length
(a dims.Dim: `m<T`, `x : f32[T, 16]`, the flat `i<16 * T`). T is then an i64 that every
index may name (slice's `t + T - 1`) and that the kernel's C function takes as a
parameter; the checker proves every access in bounds for every T in [1, T_max]. Only
loop bounds change with T, never the order of a reduction: a reduction over positions
runs from 0 to T in index order, whatever T_max is.

Plans (layouts.py, splits.py, plans.py) do not rewrite this IR: a layout is data the
printer reads (exporter/printer/planned.py) to arrange the loops of the parallel axes
(order, tiles, lanes as local arrays, packs into local scratch) and to cut reductions
into in-order blocks; a thread split divides one parallel axis, at any depth of the
layout's order, into [lo, hi) pieces.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Iterator, Mapping, Union

import numpy as np

from exactc.exporter import dims, types
from exactc.exporter.dims import SYMBOL


class IRError(ValueError):
    """A malformed IR tree: a bug in whatever built it (lowering or a layout)."""


# ---- types -------------------------------------------------------------------------

FLOAT_TYPES = ("f64", "f32")  # the arithmetic types (accumulator types)
INT_TYPES = ("i64", "i32")
STORAGE_TYPES = ("f64", "f32", "bf16", "i32", "i8", "u8")  # element types of buffers
TYPES = ("f64", "f32", "bf16", "i32", "i8", "u8", "i64", "bool")

# Buffer.ctype (the C spelling the interface uses) <-> IR element type.
CTYPE_TO_TYPE = {s.c: s.name for s in types.STORAGE.values()}
TYPE_TO_CTYPE = {v: k for k, v in CTYPE_TO_TYPE.items()}

PARALLEL = "parallel"
REDUCE = "reduce"
AXIS_KINDS = (PARALLEL, REDUCE)

ROLES = ("input", "output", "temp")

# Functions a `Call` may name: exactc's transcendentals (computed in f64 by the runtime;
# the f32 forms are (float)f((double)x)) and the correctly rounded square root.
TRANSCENDENTALS = ("exp", "log", "tanh", "erf", "sin", "cos")
FUNCTIONS = TRANSCENDENTALS + ("sqrt",)

# Conversions a `Convert` may do, each exact or one rounding to nearest even:
# bf16 -> f32 widens (exact); f32 -> bf16 stores (one rounding, NaN canonical);
# f64 -> f32 rounds (R_A of an f64 value); integers -> floats (mean_pool's count, rope's
# positions) are exact up to 2^24 into f32 and 2^53 into f64 (docs/semantics.md,
# section 11); i64 <-> i32 narrows/widens indices. For the integer operands
# (semantics.md, section 15): i8 and u8 widen to i32 (exact), i32 narrows to i8 (the
# values lowering writes fit), i32 -> f32 rounds to nearest even when |value| > 2^24,
# and f32/f64 -> i32 takes the integer part (C's conversion, truncation toward zero;
# lowering converts only values inside int32).
CONVERSIONS = frozenset(
    {
        ("bf16", "f32"),
        ("f32", "bf16"),
        ("f64", "f32"),
        ("f32", "f64"),
        ("i64", "f64"),
        ("i64", "f32"),
        ("i32", "f64"),
        ("i32", "f32"),
        ("i64", "i32"),
        ("i32", "i64"),
        ("i8", "i32"),
        ("u8", "i32"),
        ("i32", "i8"),
        ("f32", "i32"),
        ("f64", "i32"),
    }
)

ARITH_OPS = ("+", "-", "*", "/")
INT_OPS = ("+", "-", "*")
BIT_OPS = ("&", ">>")  # on integers: a nibble's mask and shift
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("&&", "||")

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Names the printed C uses or may call; no axis, scalar or buffer may take them, nor any
# name of the runtime's (every exactc_ name: check_name).
RESERVED_NAMES = frozenset(
    """auto break case char const continue default do double else enum extern float for
    goto if inline int long register restrict return short signed sizeof static struct
    switch typedef union unsigned void volatile while _Bool _Complex _Imaginary
    lo hi memcpy sqrt sqrtf isnan exp log tanh erf sin cos fma fmaf
    int8_t uint8_t int32_t int64_t uint16_t uint32_t uint64_t""".split()
) | {SYMBOL}  # the run-time length


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _IDENT.match(name):
        raise IRError(f"{what} name {name!r} is not a C identifier")
    if name in RESERVED_NAMES or name.startswith("exactc_"):
        raise IRError(f"{what} name {name!r} is reserved by the printed C")
    return name


# ---- axes and buffers ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Axis:
    """A loop variable over [0, extent); parallel or a reduction. The extent is an int
    or a dims.Dim (it follows the run-time length)."""

    name: str
    extent: dims.Extent
    kind: str = PARALLEL

    def __post_init__(self) -> None:
        check_name(self.name, "axis")
        if not dims.is_extent(self.extent) or not dims.positive(self.extent):
            raise IRError(f"axis {self.name}: extent {self.extent!r} must be an int >= 1 (at every run-time length)")
        if self.kind not in AXIS_KINDS:
            raise IRError(f"axis {self.name}: kind {self.kind!r} is not one of {AXIS_KINDS}")

    def text(self) -> str:
        return f"{self.name}<{self.extent}"


@dataclasses.dataclass(frozen=True)
class Buffer:
    """An array a kernel reads or writes. Inputs are named as the primitive's operands,
    the output is `y`; temps are scratch the caller allocates (contents undefined
    between kernels)."""

    name: str
    ctype: str  # 'double' | 'float' | 'exactc_bf16' | 'int32_t'
    shape: tuple[dims.Extent, ...]  # packed in C order at the run-time length
    role: str  # 'input' | 'output' | 'temp'

    def __post_init__(self) -> None:
        check_name(self.name, "buffer")
        if self.ctype not in CTYPE_TO_TYPE:
            raise IRError(f"buffer {self.name}: ctype {self.ctype!r} is not one of {tuple(CTYPE_TO_TYPE)}")
        if self.role not in ROLES:
            raise IRError(f"buffer {self.name}: role {self.role!r} is not one of {ROLES}")
        object.__setattr__(self, "shape", tuple(self.shape))

    @property
    def type(self) -> str:
        return CTYPE_TO_TYPE[self.ctype]

    @property
    def size(self) -> dims.Extent:
        return math.prod(self.shape)


# ---- expressions -------------------------------------------------------------------


class Expr:
    """An expression node; `type` is its IR type, `text()` its readable form."""

    type: str

    def text(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def children(self) -> tuple["Expr", ...]:
        return ()


@dataclasses.dataclass(frozen=True)
class Affine(Expr):
    """sum(coef * var) + const over i64 variables (axes, or i64 scalars); type i64."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    def __post_init__(self) -> None:
        merged: dict[str, int] = {}
        for name, coef in self.terms:
            if not isinstance(coef, int) or isinstance(coef, bool):
                raise IRError(f"affine coefficient {coef!r} of {name} must be an int")
            merged[name] = merged.get(name, 0) + coef  # first appearance fixes the order
        terms = tuple((n, c) for n, c in merged.items() if c != 0)
        object.__setattr__(self, "terms", terms)
        if not isinstance(self.const, int) or isinstance(self.const, bool):
            raise IRError(f"affine constant {self.const!r} must be an int")

    type = "i64"

    @staticmethod
    def var(name: str) -> "Affine":
        return Affine(((name, 1),), 0)

    @staticmethod
    def constant(value: int) -> "Affine":
        return Affine((), value)

    @staticmethod
    def of(extent: dims.Extent) -> "Affine":
        """An int, or a Dim of degree at most 1 (`T - 1`), as an affine form in T."""
        if not dims.is_symbolic(extent):
            return Affine((), extent)
        if extent.degree > 1:
            raise IRError(f"{extent} is not affine in {SYMBOL}; an index may name {SYMBOL} linearly only")
        return Affine(((SYMBOL, extent.coefs[1]),), extent.coefs[0])

    def __add__(self, other: Union["Affine", int]) -> "Affine":
        if isinstance(other, int):
            return Affine(self.terms, self.const + other)
        return Affine(self.terms + other.terms, self.const + other.const)

    __radd__ = __add__

    def __mul__(self, factor: int) -> "Affine":
        return Affine(tuple((n, c * factor) for n, c in self.terms), self.const * factor)

    __rmul__ = __mul__

    def variables(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.terms)

    def text(self) -> str:
        parts: list[str] = []
        for name, coef in self.terms:
            mag = abs(coef)
            term = name if mag == 1 else f"{mag}*{name}"
            parts.append(("- " if coef < 0 else "+ ") + term)
        if self.const or not parts:
            parts.append(("- " if self.const < 0 else "+ ") + str(abs(self.const)))
        out = " ".join(parts)
        return out[2:] if out.startswith("+ ") else "-" + out[2:]


@dataclasses.dataclass(frozen=True)
class Const(Expr):
    """A real constant already rounded to its type (f64 or f32): R_A(c) in the spec."""

    value: float
    type: str

    def __post_init__(self) -> None:
        if self.type not in FLOAT_TYPES:
            raise IRError(f"constant {self.value!r}: type {self.type!r} is not f64 or f32")
        value = float(self.value)
        if math.isnan(value):
            raise IRError("a constant may not be NaN (write NaN results with FillBits)")
        if self.type == "f32" and not math.isinf(value) and float(np.float32(value)) != value:
            raise IRError(f"constant {value!r} is not an f32 value; round it first")
        object.__setattr__(self, "value", value)

    def text(self) -> str:
        return float_literal(self.value, self.type, c=False)


@dataclasses.dataclass(frozen=True)
class Var(Expr):
    """A scalar temporary (declared by `Declare`)."""

    name: str
    type: str

    def __post_init__(self) -> None:
        check_name(self.name, "scalar")
        if self.type not in ("f64", "f32", "i64", "i32", "bool"):
            raise IRError(f"scalar {self.name}: type {self.type!r} is not f64, f32, i64, i32 or bool")

    def text(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True)
class Access:
    """One element of a buffer: `buffer[index]`; `type` is the buffer's element type."""

    buffer: str
    type: str
    index: tuple[Affine, ...]

    def __post_init__(self) -> None:
        if self.type not in STORAGE_TYPES:
            raise IRError(f"access to {self.buffer}: element type {self.type!r} unknown")
        index = tuple(i if isinstance(i, Affine) else Affine.constant(i) for i in self.index)
        object.__setattr__(self, "index", index)
        if not index:
            raise IRError(f"access to {self.buffer} has an empty index")

    def text(self) -> str:
        return f"{self.buffer}[{','.join(i.text() for i in self.index)}]"


@dataclasses.dataclass(frozen=True)
class Load(Expr):
    access: Access

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.access.type

    def text(self) -> str:
        return self.access.text()

    def children(self) -> tuple[Expr, ...]:
        return tuple(self.access.index)


@dataclasses.dataclass(frozen=True)
class Binary(Expr):
    """One operation. Arithmetic on floats is one IEEE rounding in the operands' type
    (both the same); on integers it is exact integer arithmetic, in i32 when both
    operands are i32 (integer sums of quantized values: lowering keeps them inside
    int32), else in i64; `&` and `>>` are on integers only. Comparisons give bool (IEEE:
    false when a NaN is involved)."""

    op: str
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        ta, tb = self.a.type, self.b.type
        if self.op in ARITH_OPS:
            if ta in FLOAT_TYPES and ta == tb:
                return
            if ta in INT_TYPES and tb in INT_TYPES and self.op in INT_OPS:
                return
        elif self.op in BIT_OPS:
            if ta in INT_TYPES and tb in INT_TYPES:
                return
        elif self.op in COMPARE_OPS:
            if (ta in FLOAT_TYPES and ta == tb) or (ta in INT_TYPES and tb in INT_TYPES):
                return
        elif self.op in LOGIC_OPS:
            if ta == tb == "bool":
                return
        else:
            raise IRError(f"unknown operator {self.op!r}")
        raise IRError(f"operator {self.op!r} on {ta} and {tb}: {self.a.text()} {self.op} {self.b.text()}")

    @property
    def type(self) -> str:  # type: ignore[override]
        if self.op in ARITH_OPS or self.op in BIT_OPS:
            if self.a.type in FLOAT_TYPES:
                return self.a.type
            return "i32" if self.a.type == self.b.type == "i32" else "i64"
        return "bool"

    def text(self) -> str:
        return f"({self.a.text()} {self.op} {self.b.text()})"

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)


@dataclasses.dataclass(frozen=True)
class Fma(Expr):
    """fma_A(a, b, c) = a·b + c rounded once in the operands' float type (all three the
    same): the fused realization's multiply-accumulate step (docs/semantics.md section
    18), printed as a call of C's fma/fmaf, never left to the compiler to contract."""

    a: Expr
    b: Expr
    c: Expr

    def __post_init__(self) -> None:
        types = {self.a.type, self.b.type, self.c.type}
        if len(types) != 1 or self.a.type not in FLOAT_TYPES:
            raise IRError(f"fma of {self.a.type}, {self.b.type} and {self.c.type}: {self.text()}")

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.a.type

    def text(self) -> str:
        return f"fma({_bare(self.a)}, {_bare(self.b)}, {_bare(self.c)})"

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b, self.c)


@dataclasses.dataclass(frozen=True)
class Unary(Expr):
    """'-' negates a float (exact), 'not' a bool, 'isnan' tests a float."""

    op: str
    a: Expr

    def __post_init__(self) -> None:
        ok = {"-": FLOAT_TYPES, "not": ("bool",), "isnan": FLOAT_TYPES}
        if self.op not in ok:
            raise IRError(f"unknown unary operator {self.op!r}")
        if self.a.type not in ok[self.op]:
            raise IRError(f"unary {self.op!r} on {self.a.type}: {self.a.text()}")

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.a.type if self.op == "-" else "bool"

    def text(self) -> str:
        if self.op == "-":
            return f"(-{self.a.text()})"
        return f"{self.op}({_bare(self.a)})"

    def children(self) -> tuple[Expr, ...]:
        return (self.a,)


@dataclasses.dataclass(frozen=True)
class Call(Expr):
    """f(a) in a's type: a transcendental T(f, a) (exactc's f64 function; at f32 the
    value is widened to f64 and the result rounded to f32) or the IEEE square root."""

    fn: str
    a: Expr

    def __post_init__(self) -> None:
        if self.fn not in FUNCTIONS:
            raise IRError(f"unknown function {self.fn!r}; the IR knows {FUNCTIONS}")
        if self.a.type not in FLOAT_TYPES:
            raise IRError(f"{self.fn} of a {self.a.type}: {self.a.text()}")

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.a.type

    def text(self) -> str:
        return f"{self.fn}({_bare(self.a)})"

    def children(self) -> tuple[Expr, ...]:
        return (self.a,)


@dataclasses.dataclass(frozen=True)
class Select(Expr):
    """`a if cond else b`; no arithmetic."""

    cond: Expr
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        if self.cond.type != "bool":
            raise IRError(f"select condition is {self.cond.type}: {self.cond.text()}")
        if self.a.type != self.b.type:
            raise IRError(f"select of {self.a.type} and {self.b.type}")

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.a.type

    def text(self) -> str:
        return f"select({_bare(self.cond)}, {_bare(self.a)}, {_bare(self.b)})"

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.a, self.b)


@dataclasses.dataclass(frozen=True)
class Convert(Expr):
    """`a` converted to type `to` (see CONVERSIONS): W, S, R_A and index casts."""

    a: Expr
    to: str

    def __post_init__(self) -> None:
        if (self.a.type, self.to) not in CONVERSIONS:
            raise IRError(f"no conversion from {self.a.type} to {self.to}: {self.a.text()}")

    @property
    def type(self) -> str:  # type: ignore[override]
        return self.to

    def text(self) -> str:
        return f"{self.to}({_bare(self.a)})"

    def children(self) -> tuple[Expr, ...]:
        return (self.a,)


# ---- statements --------------------------------------------------------------------


class Stmt:
    def lines(self, depth: int) -> list[str]:  # pragma: no cover - overridden
        raise NotImplementedError


def _pad(depth: int) -> str:
    return "  " * depth


@dataclasses.dataclass(frozen=True)
class Declare(Stmt):
    """A new scalar with its initial value; it lives until the end of its block."""

    var: Var
    init: Expr

    def __post_init__(self) -> None:
        if self.init.type != self.var.type:
            raise IRError(f"{self.var.name} : {self.var.type} initialized with a {self.init.type}")

    def lines(self, depth: int) -> list[str]:
        return [f"{_pad(depth)}{self.var.name} : {self.var.type} = {_bare(self.init)}"]


@dataclasses.dataclass(frozen=True)
class Assign(Stmt):
    var: Var
    value: Expr

    def __post_init__(self) -> None:
        if self.value.type != self.var.type:
            raise IRError(f"{self.var.name} : {self.var.type} assigned a {self.value.type}")

    def lines(self, depth: int) -> list[str]:
        return [f"{_pad(depth)}{self.var.name} = {_bare(self.value)}"]


@dataclasses.dataclass(frozen=True)
class Write(Stmt):
    """buffer[index] = value; value has the buffer's element type (convert first)."""

    dst: Access
    value: Expr

    def __post_init__(self) -> None:
        if self.value.type != self.dst.type:
            raise IRError(f"writing a {self.value.type} into {self.dst.text()} of {self.dst.type}")

    def lines(self, depth: int) -> list[str]:
        return [f"{_pad(depth)}{self.dst.text()} = {_bare(self.value)}"]


@dataclasses.dataclass(frozen=True)
class CopyBits(Stmt):
    """dst = src, every bit (NaN payloads included); no arithmetic."""

    dst: Access
    src: Access

    def __post_init__(self) -> None:
        if self.dst.type != self.src.type:
            raise IRError(f"bit copy from {self.src.type} to {self.dst.type}")

    def lines(self, depth: int) -> list[str]:
        return [f"{_pad(depth)}{self.dst.text()} = bits({self.src.text()})"]


@dataclasses.dataclass(frozen=True)
class FillBits(Stmt):
    """dst = the element whose bit pattern is `bits` (e.g. a canonical NaN)."""

    dst: Access
    bits: int

    def __post_init__(self) -> None:
        width = {"f64": 64, "f32": 32, "bf16": 16, "i32": 32}[self.dst.type]
        if not 0 <= self.bits < (1 << width):
            raise IRError(f"bit pattern {self.bits:#x} does not fit a {self.dst.type}")

    def lines(self, depth: int) -> list[str]:
        digits = {"f64": 16, "f32": 8, "bf16": 4, "i32": 8}[self.dst.type]
        return [f"{_pad(depth)}{self.dst.text()} = bits(0x{self.bits:0{digits}x})"]


@dataclasses.dataclass(frozen=True)
class Loop(Stmt):
    """A loop over `axis` inside the body: a reduction (in index order) or an inner
    parallel loop."""

    axis: Axis
    body: tuple[Stmt, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "body", tuple(self.body))

    def lines(self, depth: int) -> list[str]:
        out = [f"{_pad(depth)}for {self.axis.text()} ({self.axis.kind}):"]
        for stmt in self.body:
            out.extend(stmt.lines(depth + 1))
        return out


@dataclasses.dataclass(frozen=True)
class If(Stmt):
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()

    def __post_init__(self) -> None:
        if self.cond.type != "bool":
            raise IRError(f"if condition is a {self.cond.type}: {self.cond.text()}")
        object.__setattr__(self, "then", tuple(self.then))
        object.__setattr__(self, "orelse", tuple(self.orelse))

    def lines(self, depth: int) -> list[str]:
        out = [f"{_pad(depth)}if {_bare(self.cond)}:"]
        for stmt in self.then:
            out.extend(stmt.lines(depth + 1))
        if self.orelse:
            out.append(f"{_pad(depth)}else:")
            for stmt in self.orelse:
                out.extend(stmt.lines(depth + 1))
        return out


def _bare(expr: Expr) -> str:
    """An expression's text without its outermost parentheses."""
    text = expr.text()
    if isinstance(expr, Binary) or (isinstance(expr, Unary) and expr.op == "-"):
        return text[1:-1]
    if isinstance(expr, Const) and text.startswith("("):
        return text[1:-1]
    return text


# ---- nests, launches, kernels --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Nest:
    """A perfect nest of parallel `axes` (outermost first) around `body`."""

    name: str
    axes: tuple[Axis, ...]
    body: tuple[Stmt, ...]
    # A body gcc's vectorizer is seen to compile to other values: which instructions it
    # does it with (kernels/lower.py GCC_UNVECTORIZED), and so where its function is
    # compiled without the vectorizer (exactc_rt.h); "": nowhere.
    gcc_unvectorized: str = ""

    def __post_init__(self) -> None:
        check_name(self.name, "nest")
        object.__setattr__(self, "axes", tuple(self.axes))
        object.__setattr__(self, "body", tuple(self.body))
        if not self.axes:
            raise IRError(f"nest {self.name} has no parallel axis")
        for axis in self.axes:
            if axis.kind != PARALLEL:
                raise IRError(f"nest {self.name}: axis {axis.name} of the nest must be parallel")

    def body_axes(self) -> list[Axis]:
        """The axes of the loops inside the body, in program order."""
        return [s.axis for s in walk_statements(self.body) if isinstance(s, Loop)]

    def reduce_axes(self) -> list[Axis]:
        return [a for a in self.body_axes() if a.kind == REDUCE]

    def reads(self) -> list[str]:
        """Buffers read, in order of first appearance."""
        names: dict[str, None] = {}
        for access in _accesses(self.body, reads=True):
            names[access.buffer] = None
        return list(names)

    def writes(self) -> list[str]:
        """Buffers written, in order of first appearance."""
        names: dict[str, None] = {}
        for access in _accesses(self.body, reads=False):
            names[access.buffer] = None
        return list(names)

    def header(self) -> str:
        head = f"nest {self.name}: parallel {', '.join(a.text() for a in self.axes)}"
        inner = self.body_axes()
        if inner:
            head += " | body: " + ", ".join(f"{a.kind} {a.text()}" for a in inner)
        return head

    def text(self) -> str:
        out = [self.header()]
        for stmt in self.body:
            out.extend(stmt.lines(1))
        return "\n".join(out)


@dataclasses.dataclass(frozen=True)
class Launch:
    """Run `nest` over [0, extent) of its outermost axis (a thread split, when a plan
    gives one, runs the pieces instead); `args` are the buffers in the C function's
    parameter order (read-only ones first, then written ones, each group in the
    kernel's buffer order)."""

    nest: Nest
    args: tuple[str, ...]
    extent: dims.Extent


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A primitive at a site type: its buffers and the launches, run in order."""

    primitive: str
    site: str
    attrs: Mapping  # the full attributes, defaults filled in
    buffers: tuple[Buffer, ...]
    nests: tuple[Nest, ...]
    launches: tuple[Launch, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "buffers", tuple(self.buffers))
        object.__setattr__(self, "nests", tuple(self.nests))
        object.__setattr__(self, "launches", tuple(self.launches))
        check_kernel(self)

    @property
    def top(self) -> int | None:
        """T_max when an extent of the kernel follows the run-time length, else None:
        the kernel's functions then take T."""
        return dims.top_of([b.shape for b in self.buffers], [[a.extent for a in n.axes + tuple(n.body_axes())]
                                                              for n in self.nests])

    def buffer(self, name: str) -> Buffer:
        for buf in self.buffers:
            if buf.name == name:
                return buf
        raise KeyError(name)

    def text(self) -> str:
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        out = [f"kernel {self.primitive} at {self.site}" + (f" ({attrs})" if attrs else "")]
        for buf in self.buffers:
            out.append(f"  {buf.role} {buf.name} : {buf.type}{list(buf.shape)}")
        for nest in self.nests:
            out.append(nest.text())
        return "\n".join(out)


def launch(nest: Nest, buffers: tuple[Buffer, ...]) -> Launch:
    """The launch of `nest` over its whole outermost axis, with the argument order of
    the printed function."""
    reads, writes = set(nest.reads()), set(nest.writes())
    args = [b.name for b in buffers if b.name in reads and b.name not in writes]
    args += [b.name for b in buffers if b.name in writes]
    return Launch(nest=nest, args=tuple(args), extent=nest.axes[0].extent)


# ---- walking and checking ------------------------------------------------------------


def walk_statements(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    for stmt in body:
        yield stmt
        if isinstance(stmt, Loop):
            yield from walk_statements(stmt.body)
        elif isinstance(stmt, If):
            yield from walk_statements(stmt.then)
            yield from walk_statements(stmt.orelse)


def walk_expr(expr: Expr) -> Iterator[Expr]:
    yield expr
    for child in expr.children():
        yield from walk_expr(child)


def statement_exprs(stmt: Stmt) -> tuple[Expr, ...]:
    """The expressions a statement evaluates (not those of nested statements)."""
    if isinstance(stmt, (Declare,)):
        return (stmt.init,)
    if isinstance(stmt, Assign):
        return (stmt.value,)
    if isinstance(stmt, Write):
        return (stmt.value, *stmt.dst.index)
    if isinstance(stmt, CopyBits):
        return (*stmt.dst.index, *stmt.src.index)
    if isinstance(stmt, FillBits):
        return tuple(stmt.dst.index)
    if isinstance(stmt, If):
        return (stmt.cond,)
    return ()


def _accesses(body: tuple[Stmt, ...], reads: bool) -> Iterator[Access]:
    for stmt in walk_statements(body):
        if not reads:
            if isinstance(stmt, (Write, CopyBits, FillBits)):
                yield stmt.dst
            continue
        if isinstance(stmt, CopyBits):
            yield stmt.src
        for expr in statement_exprs(stmt):
            for node in walk_expr(expr):
                if isinstance(node, Load):
                    yield node.access


def check_kernel(kernel: Kernel) -> None:
    """Raise IRError unless every nest is well formed against the kernel's buffers."""
    buffers = {}
    for buf in kernel.buffers:
        if buf.name in buffers:
            raise IRError(f"kernel {kernel.primitive}: buffer {buf.name} declared twice")
        buffers[buf.name] = buf
    names = [n.name for n in kernel.nests]
    if len(set(names)) != len(names):
        raise IRError(f"kernel {kernel.primitive}: nest names {names} are not unique")
    top = kernel.top
    for nest in kernel.nests:
        _NestChecker(nest, buffers, top).run()
    for item in kernel.launches:
        if item.nest not in kernel.nests:
            raise IRError(f"launch of nest {item.nest.name}, which the kernel does not hold")
        expected = launch(item.nest, kernel.buffers)
        if item.args != expected.args or item.extent != expected.extent:
            raise IRError(
                f"launch of {item.nest.name}: args {item.args} extent {item.extent}; "
                f"expected {expected.args} extent {expected.extent}"
            )
    for buf in kernel.buffers:
        if buf.role == "input" and any(buf.name in n.writes() for n in kernel.nests):
            raise IRError(f"kernel {kernel.primitive} writes its input {buf.name}")


class _NestChecker:
    """Scopes, types, bounds and use of every name in one nest."""

    def __init__(self, nest: Nest, buffers: Mapping[str, Buffer], top: int | None = None):
        self.nest = nest
        self.buffers = buffers
        self.top = top  # T_max when the kernel takes the run-time length T
        self.seen: set[str] = set()  # every name introduced in the nest: unique
        self.declared: list[str] = []
        self.read: set[str] = set()

    def fail(self, message: str) -> None:
        raise IRError(f"nest {self.nest.name}: {message}")

    def introduce(self, name: str) -> None:
        if name in self.seen or name in self.buffers:
            self.fail(f"name {name} is introduced twice (or is also a buffer)")
        self.seen.add(name)

    def run(self) -> None:
        scope: dict[str, object] = {}
        for axis in self.nest.axes:
            self.introduce(axis.name)
            scope[axis.name] = axis
        self.block(self.nest.body, scope)
        unread = [n for n in self.declared if n not in self.read]
        if unread:
            self.fail(f"scalar(s) {', '.join(unread)} declared but never read")

    def block(self, body: tuple[Stmt, ...], scope: dict[str, object]) -> None:
        scope = dict(scope)
        for stmt in body:
            for expr in statement_exprs(stmt):
                self.expr(expr, scope)
            if isinstance(stmt, Declare):
                self.introduce(stmt.var.name)
                self.declared.append(stmt.var.name)
                scope[stmt.var.name] = stmt.var
            elif isinstance(stmt, Assign):
                if scope.get(stmt.var.name) != stmt.var:
                    self.fail(f"assignment to {stmt.var.name}, not a scalar in scope")
            elif isinstance(stmt, (Write, CopyBits, FillBits)):
                buf = self.access(stmt.dst, scope)
                if buf.role == "input":
                    self.fail(f"writes input buffer {buf.name}")
                if isinstance(stmt, CopyBits):
                    self.access(stmt.src, scope)
            elif isinstance(stmt, Loop):
                self.introduce(stmt.axis.name)
                inner = dict(scope)
                inner[stmt.axis.name] = stmt.axis
                self.block(stmt.body, inner)
            elif isinstance(stmt, If):
                self.block(stmt.then, scope)
                self.block(stmt.orelse, scope)
            else:
                self.fail(f"unknown statement {stmt!r}")

    def expr(self, expr: Expr, scope: Mapping[str, object]) -> None:
        for node in walk_expr(expr):
            if isinstance(node, Var):
                if scope.get(node.name) != node:
                    self.fail(f"scalar {node.name} : {node.type} read out of its scope")
                self.read.add(node.name)
            elif isinstance(node, Affine):
                for name in node.variables():
                    self.index_variable(name, scope)
            elif isinstance(node, Load):
                self.access(node.access, scope)

    def index_variable(self, name: str, scope: Mapping[str, object]) -> None:
        if name == SYMBOL and self.top is not None:
            return
        item = scope.get(name)
        if isinstance(item, Axis):
            return
        if isinstance(item, Var) and item.type == "i64":
            self.read.add(name)
            return
        self.fail(f"index variable {name} is neither an axis nor an i64 scalar in scope")

    def access(self, access: Access, scope: Mapping[str, object]) -> Buffer:
        buf = self.buffers.get(access.buffer)
        if buf is None:
            self.fail(f"access to unknown buffer {access.buffer}")
        if access.type != buf.type:
            self.fail(f"{access.text()} typed {access.type}; the buffer holds {buf.type}")
        if len(access.index) == len(buf.shape) or (len(access.index) == 1 and buf.shape != ()):
            limits = buf.shape if len(access.index) == len(buf.shape) else (buf.size,)
        elif len(access.index) == 1 and buf.shape == ():
            limits = (1,)
        else:
            self.fail(f"{access.text()}: {len(access.index)} indices into a buffer of shape {buf.shape}")
        for entry, limit in zip(access.index, limits):
            for name in entry.variables():
                self.index_variable(name, scope)
            bounds = _interval(entry, scope, self.top)
            if bounds is not None and not (dims.le(0, bounds[0]) and dims.lt(bounds[1], limit)):
                self.fail(
                    f"{access.text()}: index {entry.text()} spans [{bounds[0]}, {bounds[1]}], "
                    f"outside [0, {limit})"
                )
        return buf


def _interval(entry: Affine, scope: Mapping[str, object], top: int | None = None
              ) -> tuple[dims.Extent, dims.Extent] | None:
    """The exact range of an affine index over its axes, as extents that may follow the
    run-time length T (a term in T is T itself; an axis over [0, extent) spans
    coef * (extent - 1) on the side of its sign); None when a term is a scalar (a gather
    index, guarded by an If the checker does not interpret)."""
    lo = hi = entry.const
    for name, coef in entry.terms:
        if name == SYMBOL and top is not None:
            lo, hi = lo + coef * dims.length(top), hi + coef * dims.length(top)
            continue
        axis = scope.get(name)
        if not isinstance(axis, Axis):
            return None
        span = coef * (axis.extent - 1)
        if coef < 0:
            lo = lo + span
        else:
            hi = hi + span
    return lo, hi


# ---- literals ----------------------------------------------------------------------


def float_literal(value: float, type_: str, c: bool = True) -> str:
    """The exact literal of an f64 or f32 value: hexadecimal, suffixed f for f32.

    Zeros print as 0.0 / -0.0; infinities as HUGE_VAL(F) in C and inf in the IR text."""
    suffix = "f" if type_ == "f32" else ""
    if math.isinf(value):
        if c:
            text = "HUGE_VALF" if type_ == "f32" else "HUGE_VAL"
        else:
            text = "inf"
        return f"(-{text})" if value < 0 else text
    if value == 0.0:
        text = "0.0" + suffix
        return f"(-{text})" if math.copysign(1.0, value) < 0 else text
    mantissa, exponent = float(abs(value)).hex().split("p")
    mantissa = mantissa.rstrip("0").rstrip(".")
    text = f"{mantissa}p{exponent}{suffix}"
    return f"(-{text})" if value < 0 else text
