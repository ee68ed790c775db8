"""The kernel printer: a Kernel (exporter/kernels/ir.py) as C11 source.

Each nest becomes one function

    void <prefix>_<nest>(const T *restrict in..., T *restrict out..., int64_t lo, int64_t hi)

whose outermost parallel loop runs over [lo, hi), so a caller may run a piece of the
range (a thread split); every other bound is a literal, shapes being baked in. The
nest's IR text is a comment block above its function. The printer adds no arithmetic:
every operation, conversion and its order come from the IR, one C operator per IR node,
fully parenthesized, so the compiler (with -std=c11 -ffp-contract=off) rounds exactly
where the IR says.

`print_kernel(kernel, prefix).cdef` declares the functions for cffi with exactc_bf16
spelled `uint16_t`, so it needs no typedef. The caller must not pass an output (or
temp) that overlaps another argument: the parameters are `restrict`.

Printing is a pure function of the kernel and the prefix: same input, same bytes.
"""

from __future__ import annotations

import dataclasses
import re

from exactc.exporter.kernels.ir import (
    REDUCE,
    Access,
    Affine,
    Assign,
    Binary,
    Buffer,
    Call,
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
    Select,
    Stmt,
    Unary,
    Var,
    Write,
    float_literal,
)

INDENT = "    "

# IR scalar type -> C type of a local.
_LOCAL_CTYPE = {"f64": "double", "f32": "float", "i64": "int64_t", "bool": "int", "i32": "int32_t"}
# Buffer ctype -> the spelling cffi is given (exactc_bf16 is a uint16_t).
_CDEF_CTYPE = {"double": "double", "float": "float", "exactc_bf16": "uint16_t", "int32_t": "int32_t",
               "int8_t": "int8_t", "uint8_t": "uint8_t"}
# Bit patterns of FillBits: the unsigned type holding them and its literal suffix.
_BITS_CTYPE = {"f64": ("uint64_t", "UINT64_C"), "f32": ("uint32_t", "UINT32_C"), "i32": ("uint32_t", "UINT32_C")}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_PREAMBLE = """\
#include <float.h>
#include <math.h>

/* Bit identity rests on each float and double operation rounding to its own type
 * (FLT_EVAL_METHOD 0: SSE2 on x86-64, AArch64) and on nothing being reassociated or
 * fused: build with -std=c11 -ffp-contract=off, never -ffast-math. */
#if FLT_EVAL_METHOD != 0
#error "exactc kernels need FLT_EVAL_METHOD == 0 (x86-64 SSE2, AArch64)"
#endif
#ifdef __FAST_MATH__
#error "exactc kernels must not be built with -ffast-math"
#endif
"""


@dataclasses.dataclass(frozen=True)
class PrintedKernel:
    """C source of one kernel, its cffi declarations, and its functions in launch order."""

    source: str
    cdef: str
    functions: tuple[str, ...]
    # Per launch, under a plan (exporter/kernels/plans.py): the extent of the function's
    # (lo, hi) range, and the name of its split driver (None when it has no split).
    ranges: tuple[int, ...] = ()
    drivers: tuple[str | None, ...] = ()


def print_kernel(kernel: Kernel, prefix: str, plan=None) -> PrintedKernel:
    """The C text of `kernel`; its functions are named `<prefix>_<nest name>`.

    With a `plan` (a validated exporter.kernels.plans.Plan), the nests it names are
    printed under their layout, and each split gets a driver `<prefix>_<nest>_split`;
    without one, the plain nests (exporter/printer/planned.py)."""
    if not isinstance(prefix, str) or not _IDENT.match(prefix):
        raise IRError(f"kernel prefix {prefix!r} is not a C identifier")
    if plan is not None:
        from exactc.exporter.printer.planned import print_planned_kernel

        return print_planned_kernel(kernel, prefix, plan)
    buffers = {b.name: b for b in kernel.buffers}
    names = [f"{prefix}_{item.nest.name}" for item in kernel.launches]

    out = ['#include "exactc_rt.h"', ""]
    out.extend(_kernel_comment(kernel))
    out.append(_PREAMBLE)
    out.append("/* Functions, run in this order, each over (lo, hi) = (0, extent) or pieces of it. */")
    for name, item in zip(names, kernel.launches):
        out.append(f"void {name}({', '.join(_params(item, buffers, c=True))});")
    for name, item in zip(names, kernel.launches):
        out.append("")
        out.extend(_function(name, item, buffers))
    source = "\n".join(out) + "\n"

    cdef = "".join(
        f"void {name}({', '.join(_params(item, buffers, c=False))});\n"
        for name, item in zip(names, kernel.launches)
    )
    return PrintedKernel(source=source, cdef=cdef, functions=tuple(names))


# ---- comments and signatures ----------------------------------------------------------


def _comment_block(lines: list[str]) -> list[str]:
    for line in lines:
        if "*/" in line or "/*" in line:
            raise IRError(f"comment text {line!r} would break the C comment")
    return ["/* " + lines[0]] + [(" * " + line).rstrip() for line in lines[1:]] + [" */"]


def _kernel_comment(kernel: Kernel) -> list[str]:
    attrs = ", ".join(f"{k}={v!r}" for k, v in kernel.attrs.items())
    lines = [f"exactc kernel: {kernel.primitive} at site type {kernel.site}" + (f" ({attrs})" if attrs else ""), ""]
    width = max(len(b.name) for b in kernel.buffers)
    for buf in kernel.buffers:
        lines.append(f"  {buf.role:<6} {buf.name:<{width}}  {buf.ctype} {_shape(buf)}")
    lines += [
        "",
        "Generated from the kernel IR (docs/semantics.md is the rule). Outputs and temps",
        "must not overlap any other argument.",
    ]
    return _comment_block(lines)


def _shape(buf: Buffer) -> str:
    if len(buf.shape) == 1:
        return f"({buf.shape[0]},)"
    return "(" + ", ".join(str(d) for d in buf.shape) + ")"


def _params(item: Launch, buffers: dict[str, Buffer], c: bool) -> list[str]:
    writes = set(item.nest.writes())
    params = []
    for name in item.args:
        buf = buffers[name]
        const = "" if name in writes else "const "
        if c:
            params.append(f"{const}{buf.ctype} *restrict {name}")
        else:
            params.append(f"{const}{_CDEF_CTYPE[buf.ctype]} *{name}")
    return params + ["int64_t lo", "int64_t hi"]


def signature_lines(name: str, item: Launch, buffers: dict[str, Buffer], range_axis: str,
                    extent: int) -> list[str]:
    """A nest function's head: one parameter a line with its role and shape, then the
    [lo, hi) piece of `range_axis`, and the opening brace."""
    params = _params(item, buffers, c=True)
    notes = [f"{buffers[a].role} {_shape(buffers[a])}" for a in item.args]
    notes.append(f"the piece of {range_axis} in [0, {extent})")
    params[-2:] = [", ".join(params[-2:])]
    width = max(len(p) for p in params) + 1
    out = [f"void {name}("]
    for k, (param, note) in enumerate(zip(params, notes)):
        sep = ")" if k == len(params) - 1 else ","
        out.append(f"{INDENT}{(param + sep):<{width}} /* {note} */")
    out.append("{")
    return out


def _function(name: str, item: Launch, buffers: dict[str, Buffer]) -> list[str]:
    nest = item.nest
    out = _comment_block(nest.text().splitlines())
    outer = nest.axes[0]
    out.extend(signature_lines(name, item, buffers, outer.name, outer.extent))
    printer = _BodyPrinter(buffers)
    depth = 1
    for k, axis in enumerate(nest.axes):
        start, stop = ("lo", "hi") if k == 0 else ("0", str(axis.extent))
        out.append(f"{INDENT * depth}for (int64_t {axis.name} = {start}; {axis.name} < {stop}; {axis.name}++) {{")
        depth += 1
    for stmt in nest.body:
        out.extend(printer.statement(stmt, depth))
    for depth in range(len(nest.axes), 0, -1):
        out.append(f"{INDENT * depth}}}")
    out.append("}")
    return out


# ---- statements and expressions ------------------------------------------------------


class _BodyPrinter:
    def __init__(self, buffers: dict[str, Buffer]):
        self.buffers = buffers

    def statement(self, stmt: Stmt, depth: int) -> list[str]:
        pad = INDENT * depth
        if isinstance(stmt, Declare):
            return [f"{pad}{_LOCAL_CTYPE[stmt.var.type]} {stmt.var.name} = {self.bare(stmt.init)};"]
        if isinstance(stmt, Assign):
            return [f"{pad}{stmt.var.name} = {self.bare(stmt.value)};"]
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
            ctype, make = _BITS_CTYPE[stmt.dst.type]
            digits = 16 if ctype == "uint64_t" else 8
            bits = f"(const {ctype}){{{make}(0x{stmt.bits:0{digits}x})}}"
            return [f"{pad}memcpy(&{dst}, &{bits}, sizeof *{stmt.dst.buffer});"]
        if isinstance(stmt, Loop):
            axis = stmt.axis
            note = " /* reduction: in index order */" if axis.kind == REDUCE else ""
            out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {axis.extent}; {axis.name}++) {{{note}"]
            for inner in stmt.body:
                out.extend(self.statement(inner, depth + 1))
            out.append(f"{pad}}}")
            return out
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

    def access(self, access: Access) -> str:
        buf = self.buffers[access.buffer]
        if len(access.index) == len(buf.shape):
            offset = Affine()
            for entry, stride in zip(access.index, buf.strides()):
                offset = offset + entry * stride
        else:  # one entry: the flat C-order offset
            (offset,) = access.index
        return f"{access.buffer}[{_affine(offset)}]"

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
            return float_literal(expr.value, expr.type, c=True)
        if isinstance(expr, Var):
            return expr.name
        if isinstance(expr, Affine):
            text = _affine(expr)
            simple = len(expr.terms) == 0 and expr.const >= 0
            simple |= len(expr.terms) == 1 and expr.terms[0][1] == 1 and expr.const == 0
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


def _affine(value: Affine) -> str:
    """An integer affine form in C: `m * 7 + k - 1`; every variable is an int64_t."""
    parts: list[str] = []
    for name, coef in value.terms:
        term = name if abs(coef) == 1 else f"{name} * {abs(coef)}"
        parts.append(("- " if coef < 0 else "+ ") + term)
    if value.const or not parts:
        parts.append(("- " if value.const < 0 else "+ ") + str(abs(value.const)))
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]
