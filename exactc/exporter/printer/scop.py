"""SCoP mode (`exactc export --mode scop`): every nest of every kernel at point zero (no
plan, no layout, one thread) as a standalone C function in a file of its own, in the
style of PolyBench/C, the input of a polyhedral tool (Polly, pet, PPCG, PLUTO):

    void linear_qkv(const float x[restrict 4][16], const float w[restrict 48][16],
                    float y[restrict 4][48]) {
    #pragma scop
        for (int64_t m = 0; m < 4; m++) {
            for (int64_t n = 0; n < 48; n++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < 16; k++) { /* reduction: in index order */
                    acc = acc + (x[m][k] * w[n][k]);
                ...
    #pragma endscop
    }

- every array a parameter of literal dimensions, indexed one axis at a time; a nest
  that addresses a buffer by its flat offset (an elementwise kernel) declares it flat;
- every bound a literal: the kernels are lowered at the run-time length the reference
  ran at (T_max, or `--set tokens=N`), so no extent is known only at run time;
- a branch that only assigns scalars (a running max, an argmax) is a selection, its
  condition computed once: `const int s = x > m; m = s ? x : m;`;
- the transcendentals and the bf16 conversions are calls of functions declared
  `__attribute__((const))` (exactc_scop.h; scop_rt.c defines them by the runtime's), so
  that a call does not end a SCoP;
- `-Wunknown-pragmas` is silenced around each function only.

The printer adds no arithmetic: every operation and its order are the IR's, printed by
printer/nests.py's BodyPrinter, so a nest computes the bits of the program's nest.
`nest_verdict` is exactc's own verdict from the IR: whether a nest is a static-control
part, and why not.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

from exactc.exporter import dims
from exactc.exporter.kernels.ir import (
    REDUCE,
    Access,
    Affine,
    Assign,
    Buffer,
    CopyBits,
    Declare,
    Expr,
    FillBits,
    If,
    Kernel,
    Launch,
    Load,
    Loop,
    Nest,
    Stmt,
    Var,
    accesses,
    walk_expr,
    walk_statements,
)
from exactc.exporter.kernels.layouts import fresh_name
from exactc.exporter.kernels.plans import function_name
from exactc.exporter.printer.ctext import INDENT, comment_block
from exactc.exporter.printer.nests import BITS_CTYPE, LOCAL_CTYPE, BodyPrinter, Extents, affine_text, nest_taken

SCOP_HEADER = "exactc_scop.h"  # the const declarations every nest file includes
NESTS_HEADER = "scop_nests.h"  # the nests' prototypes, for the driver
DRIVER = "scop_check.c"
NESTS_DIR = "nests"

# The runtime's functions a nest may call, as exactc_scop.h declares them const and
# scop_rt.c defines them: (C name, result, parameter).
CONST_FUNCTIONS = (
    *((f"exactc_{fn}", "double", "double") for fn in ("exp", "log", "tanh", "erf", "sin", "cos")),
    *((f"exactc_{fn}f", "float", "float") for fn in ("exp", "log", "tanh", "erf", "sin", "cos")),
    ("exactc_bf16_to_f32", "float", "exactc_bf16"),
    ("exactc_f32_to_bf16", "exactc_bf16", "float"),
)

LIBRARY_CONST = (
    "double sqrt(double x)",
    "float sqrtf(float x)",
    "double fma(double x, double y, double z)",
    "float fmaf(float x, float y, float z)",
)


# ---- exactc's verdict ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a nest is a static-control part, and (when not) why."""

    static: bool
    why: str = ""


def is_selection(stmt: Stmt) -> bool:
    """An If whose branches only assign scalars (a running max, an argmax): printed as a
    selection, so it is data flow, not control."""
    return isinstance(stmt, If) and all(isinstance(s, Assign) for s in stmt.then + stmt.orelse)


def loaded_scalars(nest: Nest) -> set[str]:
    """The i64 scalars whose value comes from a buffer (an index read from an array),
    directly or through another such scalar."""
    loaded: set[str] = set()
    for stmt in walk_statements(nest.body):
        if isinstance(stmt, (Declare, Assign)) and stmt.var.type == "i64":
            for node in walk_expr(stmt.init if isinstance(stmt, Declare) else stmt.value):
                from_buffer = isinstance(node, Load)
                from_loaded = isinstance(node, (Var, Affine)) and bool(_names(node) & loaded)
                if from_buffer or from_loaded:
                    loaded.add(stmt.var.name)
                    break
    return loaded


def _names(node: Expr) -> set[str]:
    if isinstance(node, Var):
        return {node.name}
    if isinstance(node, Affine):
        return set(node.variables())
    return set()


def nest_verdict(nest: Nest) -> Verdict:
    """exactc's verdict on `nest` from its IR: static control unless an access is
    indexed by a value read from an array (a gather, a scatter) or a branch that does
    more than select scalars tests such a value or any other data."""
    loaded = loaded_scalars(nest)
    for access in accesses(nest.body, reads=False):
        if _indexed_by(access, loaded):
            return Verdict(False, f"a scatter: {access.buffer} written at an index read from an array")
    for access in accesses(nest.body, reads=True):
        if _indexed_by(access, loaded):
            return Verdict(False, f"a gather: {access.buffer} read at an index read from an array")
    axes = {a.name for a in nest.axes} | {a.name for a in nest.body_axes()}
    for stmt in walk_statements(nest.body):
        if isinstance(stmt, If) and not is_selection(stmt) and not _affine_condition(stmt.cond, axes):
            return Verdict(False, "a branch on data that does more than select scalars")
    return Verdict(True)


def _indexed_by(access: Access, loaded: set[str]) -> bool:
    return any(set(entry.variables()) & loaded for entry in access.index)


def _affine_condition(cond: Expr, axes: set[str]) -> bool:
    """A condition built of comparisons of affine forms of the loop counters only."""
    for node in walk_expr(cond):
        if isinstance(node, (Load, Var)):
            return False
        if isinstance(node, Affine) and not set(node.variables()) <= axes:
            return False
    return True


# ---- the body ------------------------------------------------------------------------------


def literal_shape(shape: Sequence[dims.Extent]) -> tuple[int, ...]:
    """A shape of literal dimensions; a ValueError for one that follows the run-time length."""
    out = []
    for d in shape:
        if not isinstance(d, int):
            raise ValueError(f"shape {shape}: SCoP mode takes kernels lowered at a run-time length")
        out.append(d)
    return tuple(out)


def declared_shapes(nest: Nest, buffers: Mapping[str, Buffer]) -> dict[str, tuple[int, ...]]:
    """Each buffer's dimensions as the nest's function declares it: its own shape, or
    flat (its size) where the nest addresses it by a flat offset, or [1] for a scalar."""
    out = {}
    for name, buf in buffers.items():
        shape = literal_shape(buf.shape)
        uses = [a for a in accesses(nest.body, True)] + [a for a in accesses(nest.body, False)]
        flat = any(a.buffer == name and len(a.index) != len(shape) for a in uses)
        if shape == () or flat:
            shape = (math.prod(shape),)
        out[name] = shape
    return out


class ScopBodyPrinter(BodyPrinter):
    """The BodyPrinter of SCoP mode: literal bounds, one subscript per axis, every loop
    a plain loop in index order, scalar branches as selections."""

    block_sums = False  # a polyhedral tool reads the loops, not a call

    def __init__(
        self, buffers: Mapping[str, Buffer], shapes: Mapping[str, tuple[int, ...]], taken: set[str], hoist: bool
    ):
        super().__init__(buffers, _NoExtents())
        self.shapes = shapes
        self.taken = taken
        self.hoist = hoist  # a static-control nest: selections compute their values first

    def extent(self, axis) -> str:
        return str(axis.extent)

    def access(self, access: Access) -> str:
        shape = self.shapes[access.buffer]
        if len(access.index) == len(shape):
            return access.buffer + "".join(f"[{affine_text(e, self.rename)}]" for e in access.index)
        # an element of a multi-dimensional buffer the nest declares flat: its C-order offset
        full = literal_shape(self.buffers[access.buffer].shape)
        strides = [math.prod(full[d + 1 :]) for d in range(len(access.index))]
        offset = Affine.constant(0)
        for entry, stride in zip(access.index, strides):
            offset = offset + entry * stride  # type: ignore[assignment]
        return f"{access.buffer}[{affine_text(offset, self.rename)}]"

    def loop(self, stmt: Loop, depth: int) -> list[str]:
        pad, axis = INDENT * depth, stmt.axis
        note = " /* reduction: in index order */" if axis.kind == REDUCE else ""
        out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {self.extent(axis)}; {axis.name}++) {{{note}"]
        for inner in stmt.body:
            out.extend(self.statement(inner, depth + 1))
        out.append(f"{pad}}}")
        return out

    def statement(self, stmt: Stmt, depth: int) -> list[str]:
        pad = INDENT * depth
        if isinstance(stmt, If) and is_selection(stmt):
            return self.selection(stmt, depth)
        if isinstance(stmt, CopyBits) and stmt.dst.type in ("f64", "f32"):
            dst, src = self.access(stmt.dst), self.access(stmt.src)
            return [f"{pad}memcpy(&{dst}, &{src}, sizeof {dst});"]  # every bit, signaling NaNs too
        if isinstance(stmt, FillBits) and stmt.dst.type in BITS_CTYPE:
            dst = self.access(stmt.dst)
            ctype, make = BITS_CTYPE[stmt.dst.type]
            digits = 16 if ctype == "uint64_t" else 8
            return [f"{pad}memcpy(&{dst}, &(const {ctype}){{{make}(0x{stmt.bits:0{digits}x})}}, sizeof {dst});"]
        return super().statement(stmt, depth)

    def selection(self, stmt: If, depth: int) -> list[str]:
        """`if (c) { a = x; } else { b = y; }` as `const int s = c; a = s ? x : a;
        b = s ? b : y;`: the condition computed once, each scalar selected. In a
        static-control nest (`hoist`) each new value is computed before its selection,
        so that the selection is data flow with no branch: every access of such a nest
        is in bounds at every point (the IR's checker proves it), so computing a value
        the condition does not choose reads nothing it may not."""
        pad = INDENT * depth
        chosen = fresh_name("select", self.taken)
        out = [f"{pad}const int {chosen} = {self.bare(stmt.cond)};"]
        for branch, taken in ((stmt.then, True), (stmt.orelse, False)):
            for assign in branch:
                assert isinstance(assign, Assign)
                name = self.rename.get(assign.var.name, assign.var.name)
                new = self.expr(assign.value)
                if self.hoist:
                    value = fresh_name(f"{name}_new", self.taken)
                    out.append(f"{pad}const {LOCAL_CTYPE[assign.var.type]} {value} = {self.bare(assign.value)};")
                    new = value
                arms = (new, name) if taken else (name, new)
                out.append(f"{pad}{name} = {chosen} ? {arms[0]} : {arms[1]};")
        return out


class _NoExtents(Extents):
    """SCoP mode names no extent: every bound and dimension is a literal."""

    def __init__(self) -> None:
        self.value, self.of_axis, self.of_dim = {}, {}, {}


# ---- one nest's file -------------------------------------------------------------------------


def array_parameter(buf: Buffer, shape: Sequence[int], written: bool) -> str:
    """`const float x[restrict 4][16]`: a parameter of literal dimensions."""
    const = "" if written else "const "
    dims_text = f"[restrict {shape[0]}]" + "".join(f"[{d}]" for d in shape[1:])
    return f"{const}{buf.ctype} {buf.name}{dims_text}"


def scop_head(name: str, item: Launch, buffers: Mapping[str, Buffer]) -> str:
    """`void name(params)`: the function's head, its prototype without the `;`."""
    shapes = declared_shapes(item.nest, {a: buffers[a] for a in item.args})
    writes = set(item.nest.writes())
    params = [array_parameter(buffers[a], shapes[a], a in writes) for a in item.args]
    return f"void {name}({', '.join(params)})"


def scop_function(name: str, item: Launch, buffers: Mapping[str, Buffer]) -> list[str]:
    """The nest as a standalone function: its IR and verdict as a comment, its loops
    between `#pragma scop` and `#pragma endscop`, the unknown-pragma warning silenced
    around it alone."""
    nest = item.nest
    used = {a: buffers[a] for a in item.args}
    shapes = declared_shapes(nest, used)
    verdict = nest_verdict(nest)
    printer = ScopBodyPrinter(used, shapes, nest_taken(nest, used), verdict.static)
    said = "static control" if verdict.static else f"not static control: {verdict.why}"
    out = comment_block(nest.text().splitlines() + ["", f"exactc's verdict: {said}."])
    out += ["#pragma GCC diagnostic push", '#pragma GCC diagnostic ignored "-Wunknown-pragmas"']
    out.append(scop_head(name, item, buffers) + " {")
    out.append("#pragma scop")
    depth = 1
    for axis in nest.axes:
        out.append(f"{INDENT * depth}for (int64_t {axis.name} = 0; {axis.name} < {axis.extent}; {axis.name}++) {{")
        depth += 1
    for stmt in nest.body:
        out.extend(printer.statement(stmt, depth))
    for depth in range(len(nest.axes), 0, -1):
        out.append(f"{INDENT * depth}}}")
    out += ["#pragma endscop", "}", "#pragma GCC diagnostic pop"]
    return out


def check_static_shapes(kernel: Kernel) -> None:
    """SCoP mode prints kernels lowered at a run-time length: no extent may follow T."""
    extents = [d for b in kernel.buffers for d in b.shape]
    extents += [a.extent for n in kernel.nests for a in n.axes + tuple(n.body_axes())]
    if any(dims.is_symbolic(e) for e in extents):
        raise ValueError(f"kernel {kernel.primitive}: SCoP mode takes kernels lowered at a run-time length")


# ---- the directory ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ScopNest:
    """One printed nest: its function, its kernel's name, its verdict, its file."""

    function: str
    kernel: str
    verdict: Verdict
    path: str
    source: str
    prototype: str


def scop_nests(name: str, kernel: Kernel) -> list[ScopNest]:
    """Each nest of `kernel` (named `name`) as its own file, in launch order."""
    check_static_shapes(kernel)
    buffers = {b.name: b for b in kernel.buffers}
    out = []
    for item in kernel.launches:
        fn = function_name(name, kernel.primitive, item.nest.name)
        lines = [
            f"/* {fn}: a nest of {name} ({kernel.primitive} at {kernel.site}), at point zero. */",
            "#include <math.h>",
            "#include <stdint.h>",
            "#include <string.h>",
            "",
            f'#include "../{SCOP_HEADER}"',
            "",
        ]
        lines += scop_function(fn, item, buffers)
        out.append(
            ScopNest(
                fn,
                name,
                nest_verdict(item.nest),
                f"{NESTS_DIR}/{fn}.c",
                "\n".join(lines) + "\n",
                scop_head(fn, item, buffers) + ";",
            )
        )
    return out


def scop_header() -> str:
    """exactc_scop.h: the runtime's functions a nest calls, declared const (their value
    depends on their argument alone, and they touch no memory), so that a call stays
    inside a SCoP."""
    lines = [
        "/* The runtime's functions a nest of SCoP mode calls, declared const: each returns a value",
        " * of its argument alone and reads or writes no memory, so a call does not end a SCoP.",
        " * scop_rt.c defines them by exactc_rt.h's own. Generated by exactc. */",
        "#ifndef EXACTC_SCOP_H",
        "#define EXACTC_SCOP_H",
        "",
        "#include <stdint.h>",
        "",
        "typedef uint16_t exactc_bf16;",
        "",
    ]
    lines += [f"__attribute__((const)) {result} {fn}({arg} x);" for fn, result, arg in CONST_FUNCTIONS]
    lines += [
        "",
        "/* The C library's correctly rounded square root and fused multiply-add: no nest reads",
        " * errno, so they too are functions of their arguments alone. */",
        "#include <math.h>",
    ]
    lines += [f"__attribute__((const)) {decl};" for decl in LIBRARY_CONST]
    lines += ["", "#endif"]
    return "\n".join(lines) + "\n"


def scop_runtime() -> str:
    """scop_rt.c: the const functions of exactc_scop.h, each exactc_rt.h's function of
    that name (its static inline ones renamed while the header is read)."""
    inline = [fn for fn, result, _ in CONST_FUNCTIONS if result != "double"]  # the f32 forms, the conversions
    lines = [
        "/* The functions exactc_scop.h declares, defined by exactc_rt.h's (whose static inline",
        " * ones are renamed exactc_rt_* while it is read). Generated by exactc. */",
    ]
    lines += [f"#define {fn} {fn.replace('exactc_', 'exactc_rt_', 1)}" for fn in inline]
    lines += ['#include "exactc_rt.h"']
    lines += [f"#undef {fn}" for fn in inline]
    lines += [f'#include "{SCOP_HEADER}"', ""]
    for fn, result, arg in CONST_FUNCTIONS:
        if fn in inline:
            lines.append(f"{result} {fn}({arg} x) {{ return {fn.replace('exactc_', 'exactc_rt_', 1)}(x); }}")
    return "\n".join(lines) + "\n"


def nests_header(nests: Sequence[ScopNest]) -> str:
    lines = [
        "/* The nests of SCoP mode (nests/), one function each. Generated by exactc. */",
        "#ifndef SCOP_NESTS_H",
        "#define SCOP_NESTS_H",
        "",
        "#include <stdint.h>",
        "",
        "typedef uint16_t exactc_bf16;",
        "",
    ]
    lines += [n.prototype for n in nests]
    lines += ["", "#endif"]
    return "\n".join(lines) + "\n"


# ---- the driver ------------------------------------------------------------------------------

# Per IR storage type: the driver's kind number (scop_check.c's KINDS table).
DRIVER_KINDS = {"f64": 0, "f32": 1, "bf16": 2, "i32": 3, "i8": 4, "u8": 5}


def npy_name(kernel: str, buffer: str) -> str:
    """The file of a kernel's buffer in inputs/, expected/ and actual/."""
    return f"{kernel}.{buffer}.npy"


def kernel_runner(name: str, kernel: Kernel, nests: Sequence[ScopNest], initial: frozenset[str]) -> list[str]:
    """`static void run_<kernel>(void)`: its buffers (inputs read, outputs in `initial`
    read from their initial value, the others NaN bits), every nest in launch order,
    every output compared with the reference's."""
    out = [f"static void run_{name}(void) {{"]
    for buf in kernel.buffers:
        given = buf.role == "input" or buf.name in initial
        part = '"inputs"' if given else "NULL"
        out.append(
            f'{INDENT}void *{buf.name} = take({part}, "{npy_name(name, buf.name)}", '
            f"{DRIVER_KINDS[buf.type]}, {buf.size});"
        )
    for nest, item in zip(nests, kernel.launches):
        out.append(f"{INDENT}{nest.function}({', '.join(item.args)});")
    for buf in kernel.buffers:
        if buf.role == "output":
            shape = ", ".join(str(d) for d in buf.shape) or "1"
            out.append(
                f'{INDENT}check("{npy_name(name, buf.name)}", {DRIVER_KINDS[buf.type]}, {buf.name}, '
                f"(const int64_t[]){{{shape}}}, {len(buf.shape)});"
            )
    out += [f"{INDENT}free({b.name});" for b in kernel.buffers]
    out.append("}")
    return out


def scop_driver(kernels: Sequence[tuple[str, Kernel, frozenset[str]]], nests: Sequence[ScopNest], site: str) -> str:
    """scop_check.c: every kernel's nests run on the reference's inputs, every output
    compared with the reference's by the comparison rule (exactc_compare.c's, linked in
    as exactc_compare_main)."""
    by_kernel: dict[str, list[ScopNest]] = {}
    for nest in nests:
        by_kernel.setdefault(nest.kernel, []).append(nest)
    lines = [DRIVER_HEAD.replace("@SITE@", site)]
    for name, kernel, initial in kernels:
        lines += kernel_runner(name, kernel, by_kernel[name], initial) + [""]
    lines.append("int main(int argc, char **argv) {")
    lines.append(f"{INDENT}find_dir(argc, argv);")
    lines += [f"{INDENT}run_{name}();" for name, _, _ in kernels]
    lines.append(
        f'{INDENT}printf("scop_check: %d nests in %d kernels, %d outputs, %d differ\\n", '
        f"{len(nests)}, {len(kernels)}, outputs, differ);"
    )
    lines += [f"{INDENT}return differ ? 1 : 0;", "}"]
    return "\n".join(lines) + "\n"


DRIVER_HEAD = r"""/* scop_check: every nest of nests/ run on the reference's inputs (inputs/), each kernel's
 * nests in launch order, and every output compared with the reference's (expected/) by
 * exactc's comparison rule (exactc_compare.c, linked in as exactc_compare_main): every
 * bit, except that any f64 or f32 NaN equals any other; bf16 on every bit. Outputs and
 * temps start as NaN bits, so an element never written shows as a difference.
 * Usage: scop_check [DIR] (default: the directory of the program). Generated by exactc. */
#include "exactc_rt.h"
#include "scop_nests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int exactc_compare_main(int argc, char **argv);

/* Per kind: f64, f32, bf16, i32, i8, u8: the bytes of an element, the .npy dtype it
 * travels as (bf16 widened to f32, the integers as int32). */
static const size_t KIND_SIZE[] = {8, 4, 2, 4, 1, 1};
static const exactc_dtype KIND_NPY[] = {EXACTC_F64, EXACTC_F32, EXACTC_F32, EXACTC_I32, EXACTC_I32, EXACTC_I32};
static const char *SITE = "@SITE@";

static char dir[4096] = ".";
static int outputs, differ;

static void find_dir(int argc, char **argv) {
    const char *given = argc > 1 ? argv[1] : argv[0];
    const char *slash = argc > 1 ? given + strlen(given) : strrchr(given, '/');
    if (slash != NULL) snprintf(dir, sizeof dir, "%.*s", (int)(slash - given), given);
}

static void stop(const char *what, const char *err) {
    fprintf(stderr, "scop_check: %s: %s\n", what, err);
    exit(2);
}

/* An element of a .npy array of `kind`'s travel dtype, stored at `kind`. */
static void store(int kind, void *dst, size_t i, const unsigned char *src) {
    unsigned char *p = (unsigned char *)dst + i * KIND_SIZE[kind];
    if (kind == 0 || kind == 1 || kind == 3) {
        memcpy(p, src + i * KIND_SIZE[kind], KIND_SIZE[kind]);
    } else if (kind == 2) {
        float f;
        memcpy(&f, src + i * 4, 4);
        exactc_bf16 h = exactc_f32_to_bf16(f); /* exact: the value is a bf16's */
        memcpy(p, &h, 2);
    } else {
        int32_t v;
        memcpy(&v, src + i * 4, 4);
        if (kind == 4) *(int8_t *)p = (int8_t)v;
        else *p = (unsigned char)v;
    }
}

/* A buffer of `count` elements of `kind`: `part`/`file` read into it, or (part NULL) NaN bits. */
static void *take(const char *part, const char *file, int kind, size_t count) {
    void *p = malloc(count * KIND_SIZE[kind]);
    if (p == NULL) stop(file, "out of memory");
    memset(p, 0xff, count * KIND_SIZE[kind]);
    if (part == NULL) return p;
    char path[8192], err[512];
    snprintf(path, sizeof path, "%s/%s/%s", dir, part, file);
    exactc_array a;
    if (exactc_npy_read(path, &a, err, sizeof err) != 0) stop(path, err);
    if (a.dtype != KIND_NPY[kind] || a.nbytes != count * exactc_dtype_size(a.dtype)) stop(path, "another dtype or size");
    for (size_t i = 0; i < count; i++) store(kind, p, i, a.data);
    exactc_array_free(&a);
    return p;
}

/* Write the output to actual/`file` at its travel dtype and compare it with expected/`file`. */
static void check(const char *file, int kind, const void *p, const int64_t *shape, int ndim) {
    exactc_array a = {.dtype = KIND_NPY[kind], .ndim = ndim};
    size_t count = 1;
    for (int d = 0; d < ndim; d++) count *= (size_t)(a.shape[d] = shape[d]);
    a.nbytes = count * exactc_dtype_size(a.dtype);
    a.data = malloc(a.nbytes);
    if (a.data == NULL) stop(file, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const unsigned char *q = (const unsigned char *)p + i * KIND_SIZE[kind];
        unsigned char *r = (unsigned char *)a.data + i * exactc_dtype_size(a.dtype);
        if (kind == 2) {
            exactc_bf16 h;
            memcpy(&h, q, 2);
            float f = exactc_bf16_to_f32(h);
            memcpy(r, &f, 4);
        } else if (kind == 4 || kind == 5) {
            int32_t v = kind == 4 ? *(const int8_t *)q : *q;
            memcpy(r, &v, 4);
        } else {
            memcpy(r, q, KIND_SIZE[kind]);
        }
    }
    char want[8192], got[8192], err[512];
    snprintf(want, sizeof want, "%s/expected/%s", dir, file);
    snprintf(got, sizeof got, "%s/actual/%s", dir, file);
    if (exactc_npy_write(got, &a, err, sizeof err) != 0) stop(got, err);
    exactc_array_free(&a);
    char *args[] = {"compare", "--site", (char *)SITE, want, got, NULL};
    outputs++;
    if (exactc_compare_main(5, args) != 0) differ++;
}
"""
