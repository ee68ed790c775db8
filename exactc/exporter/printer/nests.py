"""A loop nest (exporter/kernels/ir.py) as a C function: its parameters, the names of its
extents, the statements and expressions of its body, and the plain function (the nest
in its own loop order, no plan). printer/planned.py prints a nest under a plan with the
same pieces.

A nest function is

    void <name>(const float *restrict in..., float *restrict out..., [int64_t T,] int64_t lo, int64_t hi)

whose outermost parallel loop runs over [lo, hi), so a caller may run a piece of the
range (a thread split); every other bound is a constant, shapes being baked in, except
those that follow the run-time length: a kernel whose shapes do takes `T` and bounds
those loops by it (`m < T`, `jm < T`), its buffers packed at T (`x[bi * (T * T) + i * T
+ jm]`). The static extents are named after the axes that run over them (`enum { N =
48, K = 16 };`), and a buffer's strides are written as products of those names where
its dimensions have one: `w[n * K + k]`. The nest's IR text is a comment block above its function. The
printer adds no arithmetic: every operation, conversion and its order come from the IR,
one C operator per IR node, fully parenthesized, so the compiler (with -std=c11
-ffp-contract=off) rounds exactly where the IR says. The caller must not pass an output
(or temp) that overlaps another argument: the parameters are `restrict`.
"""

from __future__ import annotations

import math
import os
import re
from typing import Iterable, Mapping

from exactc.exporter import dims, types
from exactc.exporter.dims import SYMBOL
from exactc.exporter.kernels.ir import (
    REDUCE,
    Access,
    Affine,
    Assign,
    Axis,
    Binary,
    Buffer,
    Call,
    Fma,
    Const,
    Convert,
    CopyBits,
    Declare,
    Expr,
    FillBits,
    If,
    IRError,
    Kernel,
    Launch,
    Load,
    Loop,
    Nest,
    Select,
    Stmt,
    Unary,
    Var,
    Write,
)
from exactc.exporter.kernels.layouts import buffer_accesses, nest_names
from exactc.exporter.printer.ctext import INDENT, comment_block, constant, shape_text, signature_lines
from exactc.exporter.printer.dots import SuperBlockSum, block_sum, super_block_sum

# IR scalar type -> C type of a local.
LOCAL_CTYPE = {"f64": "double", "f32": "float", "i64": "int64_t", "bool": "int", "i32": "int32_t"}
# Buffer ctype -> the spelling cffi is given (exactc_bf16 is a uint16_t).
CDEF_CTYPE = {s.c: "uint16_t" if s.name == "bf16" else s.c for s in types.STORAGE.values()}
# Bit patterns of FillBits: the unsigned type holding them and its literal suffix.
BITS_CTYPE = {"f64": ("uint64_t", "UINT64_C"), "f32": ("uint32_t", "UINT32_C"), "i32": ("uint32_t", "UINT32_C")}

INT_MAX = 2**31 - 1  # an enum constant is an int
_UPPER = re.compile(r"[A-Z][A-Z0-9]*\Z")
# Macros the headers a kernel includes may define: no extent is named like them.
_MACRO_PREFIXES = ("FLT_", "DBL_", "LDBL_", "INT", "UINT", "FP_", "MATH_", "HUGE_", "SIZE_", "PTRDIFF_", "SIG_",
                   "WCHAR_", "WINT_", "DECIMAL_", "EXACTC", "ARENA", "RELEASE", "OMP")
_MACROS = {"NULL", "NAN", "INFINITY", "EOF", "BUFSIZ", "EDOM", "ERANGE", "EILSEQ"}


# ---- the names of the extents ------------------------------------------------------------


def run_time_bound(extent: dims.Extent) -> str:
    """The C text of a loop bound that follows the run-time length: its value at T (`T`,
    `4 * T`), never at T_max."""
    return dims.c_factor(extent)


class Extents:
    """The named extents of one nest: each axis's extent, and each buffer dimension that
    an axis runs over whole, named after that axis in capitals (axes that run over the
    same dimension share a name: ds, dv, dy over a row of 16 are all D)."""

    def __init__(self, nest: Nest, buffers: Mapping[str, Buffer], taken: set[str]):
        axes = {a.name: a for a in list(nest.axes) + nest.body_axes()}
        group = {name: name for name in axes}  # union-find over axes

        def root(name: str) -> str:
            while group[name] != name:
                name = group[name]
            return name

        over: dict[tuple[str, int], str] = {}  # (buffer, dimension) -> an axis over it
        for buffer in sorted({b for b in buffers}):
            buf = buffers[buffer]
            for access in buffer_accesses(nest, buffer):
                if len(access.index) != len(buf.shape):
                    continue
                for d, entry in enumerate(access.index):
                    if entry.const != 0 or len(entry.terms) != 1 or entry.terms[0][1] != 1:
                        continue
                    axis = axes.get(entry.terms[0][0])
                    if axis is None or axis.extent != buf.shape[d]:
                        continue
                    other = over.setdefault((buffer, d), axis.name)
                    group[root(axis.name)] = root(other)
        members: dict[str, list[Axis]] = {}
        for name, axis in axes.items():
            members.setdefault(root(name), []).append(axis)

        self.value: dict[str, int] = {}  # name -> extent
        self.of_axis: dict[str, str] = {}
        for rooted in members.values():
            extent = rooted[0].extent
            if dims.is_symbolic(extent):  # it follows the run-time length: T, 3 * T
                for axis in rooted:
                    self.of_axis[axis.name] = run_time_bound(extent)
                continue
            if extent > INT_MAX:
                continue
            prefix = os.path.commonprefix([a.name for a in rooted]).upper()
            for candidate in (prefix, rooted[0].name.upper()):
                if self._usable(candidate, extent, taken):
                    self.value[candidate] = extent
                    for axis in rooted:
                        self.of_axis[axis.name] = candidate
                    break
        self.of_dim = {key: self.of_axis[axis] for key, axis in over.items() if axis in self.of_axis}
        taken.update(self.value)

    def _usable(self, name: str, extent: int, taken: set[str]) -> bool:
        if not _UPPER.match(name) or name in taken or name in _MACROS or name.startswith(_MACRO_PREFIXES):
            return False
        return self.value.get(name, extent) == extent

    def axis(self, name: str, extent: dims.Extent) -> str:
        """The text of an axis's extent: its name, the number, or (run-time) `T`."""
        return self.of_axis.get(name, dims.c_factor(extent))

    def stride(self, buffer: str, shape: tuple[dims.Extent, ...], dim: int) -> list[str]:
        """The stride of `dim` in C order as factors: the extents after it, each its name,
        its run-time text (`T`), or (runs of unnamed static ones multiplied out) a
        number; [] for 1."""
        factors: list[str] = []
        number = 1
        for d in range(dim + 1, len(shape)):
            name = self.of_dim.get((buffer, d))
            if name is None and dims.is_symbolic(shape[d]):
                name = dims.c_factor(shape[d])
            if name is None:
                number *= shape[d]
                continue
            if number != 1:
                factors.append(str(number))
            factors.append(name)
            number = 1
        if number != 1:
            factors.append(str(number))
        return factors

    def declaration(self, lines: Iterable[str]) -> list[str]:
        """`enum { N = 48, K = 16 };` for the names `lines` use, in order of first use."""
        text = "\n".join(lines)
        used = sorted((m.start(), name) for name in self.value
                      for m in [re.search(rf"\b{name}\b", text)] if m is not None)
        if not used:
            return []
        return [f"{INDENT}enum {{ {', '.join(f'{name} = {self.value[name]}' for _, name in used)} }};"]


# ---- integer offsets ---------------------------------------------------------------------


def affine_text(value: Affine, rename: Mapping[str, str] | None = None) -> str:
    """An integer affine form in C: `m * 7 + k - 1`; every variable is an int64_t."""
    return _terms_text([(name, coef, []) for name, coef in value.terms], value.const, rename or {})


def _terms_text(terms: list[tuple[str, int, list[str]]], const: int, rename: Mapping[str, str]) -> str:
    """`var * coef * NAME ...` terms and a constant, with their signs; a term without a
    variable ("") is a constant times run-time factors (`2 * T`)."""
    parts: list[str] = []
    for name, coef, factors in terms:
        if coef == 0:
            continue
        shown = [rename.get(name, name)] if name else []
        factor = [str(abs(coef))] if abs(coef) != 1 or not (shown or factors) else []
        parts.append(("- " if coef < 0 else "+ ") + " * ".join([*shown, *factor, *factors]))
    if const or not parts:
        parts.append(("- " if const < 0 else "+ ") + str(abs(const)))
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


# ---- statements and expressions ----------------------------------------------------------


# The transcendentals the runtime evaluates lanes at a time: exactc_<f>_array (f64) and
# exactc_<f>f_array (f32), the scalar function's bits (exactc_rt.h).
ARRAY_FUNCTIONS = ("exp", "tanh", "erf", "sin", "cos")
ARRAY_CHUNK = 64  # elements per call of a laned form in an array loop


def prefix_guard(stmt: Loop) -> tuple[Affine, tuple[Stmt, ...], tuple[Stmt, ...]] | None:
    """(bound, then, orelse) if `stmt` is `for j: if (j <= bound) then [else orelse]` with
    bound free of j (the causal softmax's passes): the printer runs `then` over the prefix
    j < min(bound + 1, extent) and `orelse` over the rest, the same iterations in the same
    order without the test. Else None."""
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], If):
        return None
    (inner,), j = stmt.body, stmt.axis.name
    cond = inner.cond
    if not (isinstance(cond, Binary) and cond.op == "<="):
        return None
    if not (isinstance(cond.a, Affine) and cond.a.terms == ((j, 1),) and cond.a.const == 0):
        return None
    if not isinstance(cond.b, Affine) or j in cond.b.variables():
        return None
    return cond.b, inner.then, inner.orelse


def array_loop(stmt: Loop) -> tuple[Write, Expr | None] | None:
    """(write, bound) if `stmt` is a parallel loop `for j: [if (j <= bound)] dst = f(arg)`
    with f in ARRAY_FUNCTIONS and dst of f's type or f's result converted to dst's (rope's
    tables, R_A of an f64 cos), bound free of j (the causal softmax's exp pass): the
    printer calls f's laned form on the loop's prefix. Else None."""
    if stmt.axis.kind == REDUCE or len(stmt.body) != 1:
        return None
    (inner,), bound = stmt.body, None
    guard = prefix_guard(stmt)
    if guard:
        bound, then, orelse = guard
        if orelse or len(then) != 1:
            return None
        (inner,) = then
    if not isinstance(inner, Write):
        return None
    value = inner.value.a if isinstance(inner.value, Convert) else inner.value
    if not (isinstance(value, Call) and value.fn in ARRAY_FUNCTIONS):
        return None
    if inner.dst.type != inner.value.type:
        return None
    return inner, bound


class BodyPrinter:
    """The C of a nest's statements, expressions and buffer accesses."""

    block_sums = True  # whole blocks' integer sums as calls of exactc_dot.h (SCoP keeps loops)
    super_block_sums = False  # k-quant super-blocks' sums as calls: a layout's (planned.py)

    def __init__(self, buffers: Mapping[str, Buffer], extents: Extents):
        self.buffers = buffers
        self.extents = extents
        self.rename: dict[str, str] = {}  # a scalar -> the C that holds it (planned: lanes)

    def index(self, entry: Affine) -> Affine:
        """An index entry as printed (planned: lane axes substituted)."""
        return entry

    def extent(self, axis: Axis) -> str:
        return self.extents.axis(axis.name, axis.extent)

    def statement(self, stmt: Stmt, depth: int) -> list[str]:
        pad = INDENT * depth
        if isinstance(stmt, Declare):
            if stmt.var.name in self.rename:
                return [f"{pad}{self.rename[stmt.var.name]} = {self.bare(stmt.init)};"]
            return [f"{pad}{LOCAL_CTYPE[stmt.var.type]} {stmt.var.name} = {self.bare(stmt.init)};"]
        if isinstance(stmt, Assign):
            return [f"{pad}{self.rename.get(stmt.var.name, stmt.var.name)} = {self.bare(stmt.value)};"]
        if isinstance(stmt, Write):
            return [f"{pad}{self.access(stmt.dst)} = {self.bare(stmt.value)};"]
        if isinstance(stmt, CopyBits):
            dst, src = self.access(stmt.dst), self.access(stmt.src)
            if stmt.dst.type in ("f64", "f32"):
                # memcpy, not a float assignment: every bit moves, signaling NaNs too.
                return [f"{pad}memcpy(&{dst}, &{src}, sizeof *{stmt.dst.buffer});"]
            return [f"{pad}{dst} = {src};"]
        if isinstance(stmt, FillBits):
            dst = self.access(stmt.dst)
            if stmt.dst.type == "bf16":
                return [f"{pad}{dst} = (exactc_bf16)0x{stmt.bits:04x}u;"]
            ctype, make = BITS_CTYPE[stmt.dst.type]
            digits = 16 if ctype == "uint64_t" else 8
            bits = f"(const {ctype}){{{make}(0x{stmt.bits:0{digits}x})}}"
            return [f"{pad}memcpy(&{dst}, &{bits}, sizeof *{stmt.dst.buffer});"]
        if isinstance(stmt, Loop):
            return self.loop(stmt, depth)
        if isinstance(stmt, If):
            out = [f"{pad}if ({self.bare(stmt.cond)}) {{"]
            for inner in stmt.then:
                out.extend(self.statement(inner, depth + 1))
            if stmt.orelse:
                out.append(f"{pad}}} else {{")
                for inner in stmt.orelse:
                    out.extend(self.statement(inner, depth + 1))
            out.append(f"{pad}}}")
            return out
        raise IRError(f"the printer does not know statement {stmt!r}")

    def loop(self, stmt: Loop, depth: int) -> list[str]:
        pad, axis = INDENT * depth, stmt.axis
        found = array_loop(stmt)
        if found:
            return self.array_loop(stmt, depth, *found)
        note = " /* reduction: in index order */" if axis.kind == REDUCE else ""
        guard = prefix_guard(stmt)
        if guard:
            return self.guarded_loop(stmt, depth, note, *guard)
        out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {self.extent(axis)}; {axis.name}++) {{{note}"]
        out.extend(self.statements(stmt.body, depth + 1))
        out.append(f"{pad}}}")
        return out

    def statements(self, body: tuple[Stmt, ...], depth: int) -> list[str]:
        """The C of a sequence of statements: a whole block's integer sum of qlinear_i as
        one call of its runtime kernel where block_sums is on (printer/dots.py)."""
        out: list[str] = []
        at = 0
        while at < len(body):
            whole = super_block_sum(body[at:]) if self.super_block_sums else None
            if whole is not None and not any(self.keeps_loop(axis) for axis in whole.axes):
                out.extend(self.super_block_call(body[at:], whole, depth))
                at += whole.length
                continue
            found = block_sum(body[at:]) if self.block_sums else None
            if found is None or any(self.keeps_loop(axis) for axis in found.axes):
                out.extend(self.statement(body[at], depth))
                at += 1
                continue
            var = self.rename.get(found.var.name, found.var.name)
            call = f"{found.function()}(&{self.access(found.x)}, &{self.access(found.w)})"
            out.append(f"{INDENT * depth}{var} = {var} + {call}; /* the block's exact sum (exactc_dot.h) */")
            at += len(found.axes)
        return out

    def super_block_call(self, body: tuple[Stmt, ...], found: SuperBlockSum, depth: int) -> list[str]:
        """S's (and M's) declarations, then the super-block's sums as one call."""
        out = [line for stmt in body[:found.declared] for line in self.statement(stmt, depth)]
        sums = [found.total] + ([found.mins] if found.mins is not None else [])
        pointers = ", ".join(f"&{self.rename.get(var.name, var.name)}" for var in sums)
        call = f"{found.function()}(&{self.access(found.x)}, &{self.access(found.w)}, {pointers});"
        out.append(f"{INDENT * depth}{call} /* the super-block's exact sums (exactc_dot.h) */")
        return out

    def keeps_loop(self, axis: str) -> bool:
        """Whether a layout prints the loop over `axis` its own way (planned: blocks, sums)."""
        return False

    def guarded_loop(self, stmt: Loop, depth: int, note: str, bound: Affine,
                     then: tuple[Stmt, ...], orelse: tuple[Stmt, ...]) -> list[str]:
        """`for j: if (j <= bound) A [else B]` as A's loop over j < split and B's over
        split <= j < extent, split = min(max(bound + 1, 0), extent) (prefix_guard)."""
        pad, j, extent = INDENT * depth, stmt.axis.name, self.extent(stmt.axis)
        split, stop = f"{j}_split", f"{self.expr(bound)} + 1"
        rest = ", then the rest" if orelse else " only"
        out = [f"{pad}{{ /* {j} <= {self.bare(bound)}{rest} */",
               f"{pad}{INDENT}const int64_t {split} = {stop} < 0 ? 0 : {stop} < {extent} ? {stop} : {extent};",
               f"{pad}{INDENT}for (int64_t {j} = 0; {j} < {split}; {j}++) {{{note}"]
        for inner in then:
            out.extend(self.statement(inner, depth + 2))
        out.append(f"{pad}{INDENT}}}")
        if orelse:
            out.append(f"{pad}{INDENT}for (int64_t {j} = {split}; {j} < {extent}; {j}++) {{{note}")
            for inner in orelse:
                out.extend(self.statement(inner, depth + 2))
            out.append(f"{pad}{INDENT}}}")
        out.append(f"{pad}}}")
        return out

    def array_loop(self, stmt: Loop, depth: int, write: Write, bound: Expr | None) -> list[str]:
        """`for j: [if (j <= bound)] dst[j] = f(arg)` as calls of f's laned form over
        chunks of ARRAY_CHUNK elements: the arguments gathered in order, one call, the
        results stored (converted, where the write converts f's result); each element
        gets the scalar function's bits (exactc_rt.h)."""
        pad, axis, value = INDENT * depth, stmt.axis, write.value
        call = value.a if isinstance(value, Convert) else value
        j, ctype = axis.name, LOCAL_CTYPE[call.type]
        end, chunk, width, xs, ys = (f"{j}_{suffix}" for suffix in ("end", "c", "w", "x", "y"))
        extent = self.extent(axis)
        if bound is None:
            last = f"{pad}{INDENT}const int64_t {end} = {extent};"
        else:
            limit = f"{self.expr(bound)} + 1"
            last = f"{pad}{INDENT}const int64_t {end} = {limit} < {extent} ? {limit} : {extent};"
        form = f"exactc_{call.fn}{'' if call.type == 'f64' else 'f'}_array"
        inner = INDENT * (depth + 3)
        rule = f" for {j} <= {self.bare(bound)}" if bound is not None else ""
        result = f"{ys}[{j} - {chunk}]"
        if isinstance(value, Convert):  # the result as the write converts it
            self.rename[ys] = result
            result = self.bare(Convert(Var(ys, call.type), value.to))
            del self.rename[ys]
        return [
            f"{pad}{{ /* {self.access(write.dst)} = {self.bare(value)}{rule}, by {form} */",
            last,
            f"{pad}{INDENT}for (int64_t {chunk} = 0; {chunk} < {end}; {chunk} += {ARRAY_CHUNK}) {{",
            f"{pad}{INDENT * 2}const int64_t {width} = {end} - {chunk} < {ARRAY_CHUNK} ? {end} - {chunk} : {ARRAY_CHUNK};",
            f"{pad}{INDENT * 2}{ctype} {xs}[{ARRAY_CHUNK}], {ys}[{ARRAY_CHUNK}];",
            f"{pad}{INDENT * 2}for (int64_t {j} = {chunk}; {j} < {chunk} + {width}; {j}++) {{",
            f"{inner}{xs}[{j} - {chunk}] = {self.bare(call.a)};",
            f"{pad}{INDENT * 2}}}",
            f"{pad}{INDENT * 2}{form}({xs}, {ys}, {width});",
            f"{pad}{INDENT * 2}for (int64_t {j} = {chunk}; {j} < {chunk} + {width}; {j}++) {{",
            f"{inner}{self.access(write.dst)} = {result};",
            f"{pad}{INDENT * 2}}}",
            f"{pad}{INDENT}}}",
            f"{pad}}}",
        ]

    def access(self, access: Access) -> str:
        buf = self.buffers[access.buffer]
        index = [self.index(entry) for entry in access.index]
        if len(index) != len(buf.shape):  # one entry: the flat C-order offset
            (offset,) = index
            return f"{access.buffer}[{affine_text(offset, self.rename)}]"
        terms: list[tuple[str, int, list[str]]] = []
        const = 0
        for d, entry in enumerate(index):
            factors = self.extents.stride(access.buffer, buf.shape, d)
            terms.extend((name, coef, factors) for name, coef in entry.terms)
            stride = math.prod(buf.shape[d + 1:])
            if dims.is_symbolic(stride):  # a constant index times a run-time stride
                terms.append(("", entry.const, factors))
            else:
                const += entry.const * stride
        return f"{access.buffer}[{_terms_text(terms, const, self.rename)}]"

    def bare(self, expr: Expr) -> str:
        """An expression without its outermost parentheses (a statement's right side,
        a condition: clang warns about `if ((a == b))`)."""
        text = self.expr(expr)
        strip = isinstance(expr, (Binary, Select)) or (isinstance(expr, Unary) and expr.op != "isnan")
        strip |= isinstance(expr, (Affine, Convert)) and text.startswith("(")
        if strip:
            return text[1:-1]
        return text

    def expr(self, expr: Expr) -> str:
        """C text that is safe as an operand of any operator."""
        if isinstance(expr, Const):
            return constant(expr.value, expr.type)
        if isinstance(expr, Var):
            return self.rename.get(expr.name, expr.name)
        if isinstance(expr, Affine):
            value = self.index(expr)
            text = affine_text(value, self.rename)
            simple = len(value.terms) == 0 and value.const >= 0
            simple |= len(value.terms) == 1 and value.terms[0][1] == 1 and value.const == 0
            return text if simple else f"({text})"
        if isinstance(expr, Load):
            return self.access(expr.access)
        if isinstance(expr, Binary):
            return f"({self.expr(expr.a)} {expr.op} {self.expr(expr.b)})"
        if isinstance(expr, Unary):
            if expr.op == "-":
                return f"(-{self.expr(expr.a)})"
            if expr.op == "not":
                return f"(!{self.expr(expr.a)})"
            return f"isnan({self.bare(expr.a)})"
        if isinstance(expr, Call):
            if expr.fn == "sqrt":
                name = "sqrt" if expr.type == "f64" else "sqrtf"
            else:
                name = f"exactc_{expr.fn}" + ("" if expr.type == "f64" else "f")
            return f"{name}({self.bare(expr.a)})"
        if isinstance(expr, Fma):  # written, so that no compiler option decides the rounding
            name = "exactc_fma" if expr.type == "f64" else "exactc_fmaf"  # C's, or exactc_fma.h's
            return f"{name}({self.bare(expr.a)}, {self.bare(expr.b)}, {self.bare(expr.c)})"
        if isinstance(expr, Select):
            return f"({self.expr(expr.cond)} ? {self.expr(expr.a)} : {self.expr(expr.b)})"
        if isinstance(expr, Convert):
            return self.convert(expr)
        raise IRError(f"the printer does not know expression {expr!r}")

    def convert(self, expr: Convert) -> str:
        source, target = expr.a.type, expr.to
        if (source, target) == ("bf16", "f32"):
            return f"exactc_bf16_to_f32({self.bare(expr.a)})"
        if (source, target) == ("f32", "bf16"):
            return f"exactc_f32_to_bf16({self.bare(expr.a)})"
        ctype = {"f64": "double", "f32": "float", "i32": "int32_t", "i64": "int64_t", "i8": "int8_t"}[target]
        return f"(({ctype}){self.expr(expr.a)})"


# ---- parameters and the plain function ---------------------------------------------------


class KernelBuffers(dict):
    """A kernel's buffers by name, and `top`, the T_max of its run-time length (None: it
    has none; Kernel.top): a buffer's shape follows T, or an attribute does (a
    cache_write at row T of a cache of fixed capacity, whose shapes are all static)."""

    def __init__(self, kernel: Kernel):
        super().__init__((b.name, b) for b in kernel.buffers)
        self.top = kernel.top


def length_top(buffers: Mapping[str, Buffer]) -> int | None:
    if isinstance(buffers, KernelBuffers):
        return buffers.top
    return dims.top_of([b.shape for b in buffers.values()])


def takes_length(buffers: Mapping[str, Buffer]) -> bool:
    """Whether a kernel's functions take the run-time length T (`int64_t T`, before the
    range): a buffer's shape follows it, or an attribute. Every function of such a
    kernel takes it."""
    return length_top(buffers) is not None


def length_params(buffers: Mapping[str, Buffer]) -> list[str]:
    return [f"int64_t {SYMBOL}"] if takes_length(buffers) else []


def nest_params(item: Launch, buffers: Mapping[str, Buffer], c: bool = True) -> list[str]:
    """The buffers a launch passes, read-only ones const; `c=False` spells them for cffi."""
    writes = set(item.nest.writes())
    params = []
    for name in item.args:
        buf = buffers[name]
        const = "" if name in writes else "const "
        if c:
            params.append(f"{const}{buf.ctype} *restrict {name}")
        else:
            params.append(f"{const}{CDEF_CTYPE[buf.ctype]} *{name}")
    return params


def nest_declaration(name: str, item: Launch, buffers: Mapping[str, Buffer], c: bool = True) -> str:
    params = nest_params(item, buffers, c) + length_params(buffers) + ["int64_t lo", "int64_t hi"]
    return f"void {name}({', '.join(params)});"


def nest_head(name: str, item: Launch, buffers: Mapping[str, Buffer], range_axis: str,
              extent: dims.Extent) -> list[str]:
    """A nest function's head: one parameter a line with its role and shape, the
    run-time length when the kernel takes it, then the [lo, hi) piece of `range_axis`,
    and the opening brace."""
    params = [(p, f"{buffers[a].role} {shape_text(buffers[a].shape)}")
              for p, a in zip(nest_params(item, buffers), item.args)]
    top = length_top(buffers)
    if top is not None:
        params.append((f"int64_t {SYMBOL}", f"the run-time length, 1 <= {SYMBOL} <= {top}"))
    params.append(("int64_t lo, int64_t hi", f"the piece of {range_axis} in [0, {extent})"))
    return signature_lines(f"void {name}", params)


def vectorizer_guard(nest: Nest) -> list[str]:
    """Above a nest function gcc's vectorizer compiles to other values (ir.Nest
    .gcc_unvectorized): why, and the attribute that turns it off (exactc_rt.h)."""
    from exactc.exporter.kernels.lower import GCC_UNVECTORIZED

    if not nest.gcc_unvectorized:
        return []
    macro, why = GCC_UNVECTORIZED[nest.gcc_unvectorized]
    return [f"/* Not vectorized by gcc where {macro} says so: {why} (exactc_rt.h). */", macro]


def unused_length(buffers: Mapping[str, Buffer], body: list[str]) -> list[str]:
    """`(void)T;` for a function that takes T and whose body never names it (its only
    run-time bound is the [lo, hi) range the caller passes)."""
    if takes_length(buffers) and not any(re.search(rf"\b{SYMBOL}\b", line) for line in body):
        return [f"{INDENT}(void){SYMBOL};"]
    return []


def nest_taken(nest: Nest, buffers: Mapping[str, Buffer]) -> set[str]:
    """Every name the nest's function already uses (and `lo`, `hi`, `T`)."""
    return nest_names(nest, buffers.values()) | {"lo", "hi", SYMBOL}


def plain_function(name: str, item: Launch, buffers: Mapping[str, Buffer]) -> list[str]:
    """The nest's function in its own loop order: its IR, its head, its loops."""
    nest = item.nest
    out = vectorizer_guard(nest) + comment_block(nest.text().splitlines())
    outer = nest.axes[0]
    out.extend(nest_head(name, item, buffers, outer.name, outer.extent))
    extents = Extents(nest, buffers, nest_taken(nest, buffers))
    printer = BodyPrinter(buffers, extents)
    body = []
    depth = 1
    for k, axis in enumerate(nest.axes):
        start, stop = ("lo", "hi") if k == 0 else ("0", printer.extent(axis))
        body.append(f"{INDENT * depth}for (int64_t {axis.name} = {start}; {axis.name} < {stop}; {axis.name}++) {{")
        depth += 1
    body.extend(printer.statements(nest.body, depth))
    for depth in range(len(nest.axes), 0, -1):
        body.append(f"{INDENT * depth}}}")
    return out + extents.declaration(body) + unused_length(buffers, body) + body + ["}"]
