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
from typing import Mapping

from exactc.exporter import dims
from exactc.exporter.dims import SYMBOL
from exactc.exporter.kernels.exprs import (  # the vocabulary, named here too: see __all__
    IRError,
    FLOAT_TYPES,
    INT_TYPES,
    STORAGE_TYPES,
    TYPES,
    CTYPE_TO_TYPE,
    TYPE_TO_CTYPE,
    PARALLEL,
    REDUCE,
    AXIS_KINDS,
    ROLES,
    TRANSCENDENTALS,
    FUNCTIONS,
    CONVERSIONS,
    ARITH_OPS,
    INT_OPS,
    BIT_OPS,
    COMPARE_OPS,
    LOGIC_OPS,
    RESERVED_NAMES,
    check_name,
    Axis,
    Buffer,
    Expr,
    Affine,
    Const,
    Var,
    Access,
    Load,
    Binary,
    Unary,
    Call,
    Select,
    Convert,
    Stmt,
    Declare,
    Assign,
    Write,
    CopyBits,
    FillBits,
    Fma,
    Loop,
    If,
    walk_statements,
    walk_expr,
    statement_exprs,
    accesses,
    float_literal,
)
from exactc.exporter.primitives import shown_attrs

__all__ = [
    "IRError",
    "FLOAT_TYPES",
    "INT_TYPES",
    "STORAGE_TYPES",
    "TYPES",
    "CTYPE_TO_TYPE",
    "TYPE_TO_CTYPE",
    "PARALLEL",
    "REDUCE",
    "AXIS_KINDS",
    "ROLES",
    "TRANSCENDENTALS",
    "FUNCTIONS",
    "CONVERSIONS",
    "ARITH_OPS",
    "INT_OPS",
    "BIT_OPS",
    "COMPARE_OPS",
    "LOGIC_OPS",
    "RESERVED_NAMES",
    "check_name",
    "Axis",
    "Buffer",
    "Expr",
    "Affine",
    "Const",
    "Var",
    "Access",
    "Load",
    "Binary",
    "Unary",
    "Call",
    "Select",
    "Convert",
    "Stmt",
    "Declare",
    "Assign",
    "Write",
    "CopyBits",
    "FillBits",
    "Fma",
    "Loop",
    "If",
    "walk_statements",
    "walk_expr",
    "statement_exprs",
    "accesses",
    "float_literal",
    "Nest",
    "Launch",
    "Kernel",
    "launch",
    "check_kernel",
]


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
        for access in accesses(self.body, reads=True):
            names[access.buffer] = None
        return list(names)

    def writes(self) -> list[str]:
        """Buffers written, in order of first appearance."""
        names: dict[str, None] = {}
        for access in accesses(self.body, reads=False):
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
        """T_max when an extent or an attribute of the kernel follows the run-time
        length (cache_write's row T), else None: the kernel's functions then take T."""
        return dims.top_of([b.shape for b in self.buffers], [[a.extent for a in n.axes + tuple(n.body_axes())]
                                                              for n in self.nests], self.attrs)

    def buffer(self, name: str) -> Buffer:
        for buf in self.buffers:
            if buf.name == name:
                return buf
        raise KeyError(name)

    def text(self) -> str:
        attrs = ", ".join(f"{k}={v!r}" for k, v in shown_attrs(self.primitive, self.attrs).items())
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


# ---- checking ----------------------------------------------------------------------


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

