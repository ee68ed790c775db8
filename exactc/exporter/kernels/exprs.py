"""The kernel IR's vocabulary: element types and names, axes and buffers, expressions and
statements, the walks over them, and the exact literals the IR and the C text print.

ir.py makes nests and kernels of these and checks them; the printer and lowering read
both through ir, which names every piece of this module too.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Iterator, Union

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
    p pieces parts status team
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
        if not isinstance(extent, dims.Dim):
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


# ---- walking ---------------------------------------------------------------------


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


def accesses(body: tuple[Stmt, ...], reads: bool) -> Iterator[Access]:
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
