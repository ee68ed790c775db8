"""Printing a nest under a plan: its layout (order, tiles, lanes, packs, blocks) and its
thread split. exporter/printer/kernels.py calls this for the nests a plan names; the
others print exactly as without a plan.

The function of a planned nest keeps the plain signature, `(args..., lo, hi)`, but its
(lo, hi) range is on the split's axis (or the first loop of the layout's order when the
nest has no split). The statements are the IR's, printed by the same expression
printer: a layout only decides where they sit in the loops. A laned statement runs in
a short loop over the lanes, with every scalar of the body a local array, so each lane
runs the plain body's operations in the plain body's order.
"""

from __future__ import annotations

from exactc.exporter.kernels.ir import (
    REDUCE,
    Access,
    Affine,
    Assign,
    Buffer,
    Declare,
    Expr,
    If,
    Launch,
    Loop,
    Nest,
    Stmt,
    Var,
    walk_expr,
    walk_statements,
)
from exactc.exporter.kernels.layouts import Layout, buffer_accesses, fresh_name, nest_names, pack_panel
from exactc.exporter.kernels.splits import Split, split_axis
from exactc.exporter.printer.sums import print_integer_sum
from exactc.exporter.printer.kernels import (
    _LOCAL_CTYPE,
    _PREAMBLE,
    INDENT,
    PrintedKernel,
    _BodyPrinter,
    _comment_block,
    _function,
    _kernel_comment,
    _params,
    signature_lines,
)

SPLIT_CHECK = """\
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef EXACTC_CHECK_SPLITS
#ifndef EXACTC_CHECK_SPLITS_DEFINED
#define EXACTC_CHECK_SPLITS_DEFINED
/* The coverage check of a split, in checking builds (-DEXACTC_CHECK_SPLITS): 0 when the
 * pieces cover [0, extent) exactly once; 1 for a piece out of range, 2 for two pieces
 * that overlap, 3 for a gap. An overlap changes no output (both writes give the same
 * bits), so only this check sees it. */
static int exactc_check_pieces(int64_t extent, const int64_t (*pieces)[2], int count)
{
    int64_t covered = 0;
    for (int p = 0; p < count; p++) {
        int64_t lo = pieces[p][0], hi = pieces[p][1];
        if (lo < 0 || lo > hi || hi > extent) return 1;
        for (int q = 0; q < p; q++) {
            if (lo < hi && pieces[q][0] < pieces[q][1] && lo < pieces[q][1] && pieces[q][0] < hi) return 2;
        }
        covered += hi - lo;
    }
    return covered == extent ? 0 : 3;
}
#endif
#endif
"""

# What the C check's status means, for the harness's report.
SPLIT_STATUS = {1: "a piece out of range", 2: "pieces overlap", 3: "pieces leave a gap"}


def _affine_text(value: Affine, rename: dict[str, str]) -> str:
    parts: list[str] = []
    for name, coef in value.terms:
        shown = rename.get(name, name)
        term = shown if abs(coef) == 1 else f"{shown} * {abs(coef)}"
        parts.append(("- " if coef < 0 else "+ ") + term)
    if value.const or not parts:
        parts.append(("- " if value.const < 0 else "+ ") + str(abs(value.const)))
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


class _PlannedBodyPrinter(_BodyPrinter):
    """The plain body printer, with reduction blocks, and (in the laned path) lane
    axes substituted by chunk + lane, scalars as lane arrays, packed loads."""

    def __init__(self, buffers: dict[str, Buffer], blocks: dict[str, tuple[int, str, str]],
                 sums: dict[str, tuple[int, int]] | None = None, taken: set[str] | None = None):
        super().__init__(buffers)
        self.blocks = blocks
        self.sums, self.taken = sums or {}, taken or set()  # integer sums: axis -> (lanes, parts)
        self.substitute: dict[str, Affine] = {}  # lane axis -> chunk + lane
        self.rename: dict[str, str] = {}  # laned scalar -> name[a_l][b_l]
        self.packs: dict[str, tuple[str, list[tuple[str, int]]]] = {}  # buffer -> (pack, dims)

    # -- indices --
    def _subst(self, value: Affine) -> Affine:
        out = Affine.constant(value.const)
        for name, coef in value.terms:
            out = out + (self.substitute[name] * coef if name in self.substitute else Affine(((name, coef),)))
        return out

    def access(self, access: Access) -> str:
        if access.buffer in self.packs:
            pack, dims = self.packs[access.buffer]
            offset, stride = Affine(), 1
            for var, extent in reversed(dims):
                offset = offset + Affine.var(var) * stride
                stride *= extent
            return f"{pack}[{_affine_text(offset, self.rename)}]"
        buf = self.buffers[access.buffer]
        index = [self._subst(i) for i in access.index]
        if len(index) == len(buf.shape):
            offset = Affine()
            for entry, stride in zip(index, buf.strides()):
                offset = offset + entry * stride
        else:
            (offset,) = index
        return f"{access.buffer}[{_affine_text(offset, self.rename)}]"

    def expr(self, expr: Expr) -> str:
        if isinstance(expr, Var):
            return self.rename.get(expr.name, expr.name)
        if isinstance(expr, Affine):
            value = self._subst(expr)
            text = _affine_text(value, self.rename)
            simple = len(value.terms) == 0 and value.const >= 0
            simple |= len(value.terms) == 1 and value.terms[0][1] == 1 and value.const == 0
            return text if simple else f"({text})"
        return super().expr(expr)

    # -- statements --
    def statement(self, stmt: Stmt, depth: int) -> list[str]:
        pad = INDENT * depth
        if isinstance(stmt, Declare) and stmt.var.name in self.rename:
            return [f"{pad}{self.rename[stmt.var.name]} = {self.bare(stmt.init)};"]
        if isinstance(stmt, Assign) and stmt.var.name in self.rename:
            return [f"{pad}{self.rename[stmt.var.name]} = {self.bare(stmt.value)};"]
        if isinstance(stmt, Loop) and stmt.axis.name in self.sums:
            lanes, parts = self.sums[stmt.axis.name]
            return print_integer_sum(self, stmt, depth, lanes, parts, self.taken, _LOCAL_CTYPE["i32"])
        if isinstance(stmt, Loop) and stmt.axis.name in self.blocks:
            size, block, end = self.blocks[stmt.axis.name]
            axis = stmt.axis
            out = [
                f"{pad}for (int64_t {block} = 0; {block} < {axis.extent}; {block} += {size}) "
                "{ /* reduction in blocks, each in index order, the blocks in order */",
                f"{pad}{INDENT}const int64_t {end} = {block} + {size} < {axis.extent} ? {block} + {size} : {axis.extent};",
                f"{pad}{INDENT}for (int64_t {axis.name} = {block}; {axis.name} < {end}; {axis.name}++) {{",
            ]
            for inner in stmt.body:
                out.extend(self.statement(inner, depth + 2))
            out += [f"{pad}{INDENT}}}", f"{pad}}}"]
            return out
        return super().statement(stmt, depth)


def _uses_lanes(expr: Expr, laned: set[str]) -> bool:
    for node in walk_expr(expr):
        if isinstance(node, Var) and node.name in laned:
            return True
        if isinstance(node, Affine) and set(node.variables()) & laned:
            return True
    return False


class _LanedBlock:
    """The laned path: statements grouped into loops over the lanes, inside the body's
    own loops; a statement whose control depends on a lane runs whole in one lane."""

    def __init__(self, printer: _PlannedBodyPrinter, lanes: list[tuple[str, int, str]], laned: set[str]):
        self.printer = printer
        self.lanes = lanes  # (axis, width, lane variable), innermost last
        self.laned = laned  # names whose value differs between lanes

    def block(self, body: tuple[Stmt, ...], depth: int) -> list[str]:
        out: list[str] = []
        run: list[Stmt] = []
        for stmt in body:
            if isinstance(stmt, Loop):
                out.extend(self.per_lane(run, depth))
                run = []
                out.extend(self.loop(stmt, depth))
            elif isinstance(stmt, If) and not _uses_lanes(stmt.cond, self.laned):
                out.extend(self.per_lane(run, depth))
                run = []
                out.append(f"{INDENT * depth}if ({self.printer.bare(stmt.cond)}) {{")
                out.extend(self.block(stmt.then, depth + 1))
                if stmt.orelse:
                    out.append(f"{INDENT * depth}}} else {{")
                    out.extend(self.block(stmt.orelse, depth + 1))
                out.append(f"{INDENT * depth}}}")
            else:
                run.append(stmt)
        out.extend(self.per_lane(run, depth))
        return out

    def loop(self, stmt: Loop, depth: int) -> list[str]:
        pad, axis = INDENT * depth, stmt.axis
        note = " /* reduction: in index order, each lane its own */" if axis.kind == REDUCE else ""
        if axis.name in self.printer.blocks:
            size, block, end = self.printer.blocks[axis.name]
            out = [
                f"{pad}for (int64_t {block} = 0; {block} < {axis.extent}; {block} += {size}) "
                "{ /* reduction in blocks, each in index order, the blocks in order */",
                f"{pad}{INDENT}const int64_t {end} = {block} + {size} < {axis.extent} ? {block} + {size} : {axis.extent};",
                f"{pad}{INDENT}for (int64_t {axis.name} = {block}; {axis.name} < {end}; {axis.name}++) {{",
            ]
            out.extend(self.block(stmt.body, depth + 2))
            return out + [f"{pad}{INDENT}}}", f"{pad}}}"]
        out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {axis.extent}; {axis.name}++) {{{note}"]
        out.extend(self.block(stmt.body, depth + 1))
        return out + [f"{pad}}}"]

    def per_lane(self, run: list[Stmt], depth: int) -> list[str]:
        if not run:
            return []
        out = []
        for k, (_, width, lane) in enumerate(self.lanes):
            if k < len(self.lanes) - 1:
                # Outer lanes unrolled, so that each row of accumulators can stay in
                # registers; the innermost lane loop is the one compilers vectorize.
                out.append(f"{INDENT * (depth + k)}#pragma GCC unroll {width}")
            out.append(f"{INDENT * (depth + k)}for (int64_t {lane} = 0; {lane} < {width}; {lane}++) {{")
        inner = depth + len(self.lanes)
        for stmt in run:
            out.extend(self.printer.statement(stmt, inner))
        for k in range(len(self.lanes) - 1, -1, -1):
            out.append(f"{INDENT * (depth + k)}}}")
        return out


def print_planned_function(name: str, item: Launch, buffers: dict[str, Buffer], layout: Layout,
                           split: Split | None) -> tuple[list[str], int]:
    """The C function of a nest under `layout`; returns its lines and the extent of its
    (lo, hi) range axis."""
    nest = item.nest
    order = layout.loop_order(nest)
    extents = {a.name: a.extent for a in nest.axes}
    range_axis = split_axis(nest, layout, split) if split else order[0]
    taken = nest_names(nest, buffers.values())
    tiles, lanes = dict(layout.tiles), dict(layout.lanes)
    blocks = {a: (size, fresh_name(f"{a}_b", taken), fresh_name(f"{a}_be", taken)) for a, size in layout.blocks}
    tile_var = {a: fresh_name(f"{a}_t", taken) for a in order if a in tiles}
    tile_end = {a: fresh_name(f"{a}_te", taken) for a in order if a in tiles}
    chunk_var = {a: fresh_name(f"{a}_c", taken) for a in lanes}
    lane_var = {a: fresh_name(f"{a}_l", taken) for a in lanes}
    pack_var = {b: fresh_name(f"{b}_p", taken) for b in layout.packs}

    def start(a: str) -> str:
        return "lo" if a == range_axis else "0"

    def stop(a: str) -> str:
        return "hi" if a == range_axis else str(extents[a])

    def inner_stop(a: str) -> str:
        return tile_end[a] if a in tiles else stop(a)

    # The comment: the IR, then the plan.
    lines = nest.text().splitlines() + ["", f"layout: {layout.text()}"]
    if split:
        lines.append(f"split of {range_axis}: {split.text()}")
    out = _comment_block(lines)
    out.extend(signature_lines(name, item, buffers, range_axis, extents[range_axis]))

    printer = _PlannedBodyPrinter(buffers, blocks, {a: (w, p) for a, w, p in layout.sums}, taken)
    depth = 1
    opened = 0
    # Tile loops, outermost, in the layout's order.
    for a in order:
        if a in tiles:
            t, e, size = tile_var[a], tile_end[a], tiles[a]
            out.append(f"{INDENT * depth}for (int64_t {t} = {start(a)}; {t} < {stop(a)}; {t} += {size}) {{")
            depth += 1
            out.append(f"{INDENT * depth}const int64_t {e} = {t} + {size} < {stop(a)} ? {t} + {size} : {stop(a)};")
            opened += 1
    # Point loops (chunk loops for laned axes); packs right after the innermost loop
    # whose axis their panel depends on.
    pack_after: dict[str, str] = {}
    for buffer in layout.packs:
        (access,) = set(_accesses_of(nest, buffer))
        used = {n for entry in access.index for n in entry.variables()}
        pack_after[buffer] = [a for a in order if a in used][-1]
    for a in order:
        first = tile_var[a] if a in tiles else start(a)
        if a in lanes:
            c = chunk_var[a]
            out.append(f"{INDENT * depth}for (int64_t {c} = {first}; {c} < {inner_stop(a)}; {c} += {lanes[a]}) {{")
        else:
            out.append(f"{INDENT * depth}for (int64_t {a} = {first}; {a} < {inner_stop(a)}; {a}++) {{")
        depth += 1
        opened += 1
        for buffer in layout.packs:
            if pack_after[buffer] == a:
                out.extend(_pack(printer, nest, layout, buffers[buffer], pack_var[buffer], chunk_var, lane_var,
                                 inner_stop, depth))
    if not lanes:
        for stmt in nest.body:
            out.extend(printer.statement(stmt, depth))
    else:
        lane_list = [(a, w, lane_var[a]) for a, w in layout.lanes]
        full = " && ".join(f"{chunk_var[a]} + {w} <= {inner_stop(a)}" for a, w in layout.lanes)
        out.append(f"{INDENT * depth}if ({full}) {{ /* full lanes */")
        laned_scalars = [s.var for s in walk_statements(nest.body) if isinstance(s, Declare)]
        suffix = "".join(f"[{w}]" for _, w in layout.lanes)
        index = "".join(f"[{lane_var[a]}]" for a, _ in layout.lanes)
        for var in laned_scalars:
            out.append(f"{INDENT * (depth + 1)}{_LOCAL_CTYPE[var.type]} {var.name}{suffix};")
        printer.substitute = {a: Affine.var(chunk_var[a]) + Affine.var(lane_var[a]) for a in lanes}
        printer.rename = {var.name: f"{var.name}{index}" for var in laned_scalars}
        for buffer in layout.packs:
            body_dims, lane_dims = pack_panel(nest, layout, buffer)
            printer.packs[buffer] = (pack_var[buffer], body_dims + [(lane_var[a], w) for a, w in lane_dims])
        laned = set(lanes) | {v.name for v in laned_scalars}
        out.extend(_LanedBlock(printer, lane_list, laned).block(nest.body, depth + 1))
        printer.substitute, printer.rename, printer.packs = {}, {}, {}
        out.append(f"{INDENT * depth}}} else {{ /* the remainder: the plain body, point by point */")
        rdepth = depth + 1
        for a, w in layout.lanes:
            c = chunk_var[a]
            out.append(
                f"{INDENT * rdepth}for (int64_t {a} = {c}; {a} < {c} + {w} && {a} < {inner_stop(a)}; {a}++) {{"
            )
            rdepth += 1
        for stmt in nest.body:
            out.extend(printer.statement(stmt, rdepth))
        for _ in layout.lanes:
            rdepth -= 1
            out.append(f"{INDENT * rdepth}}}")
        out.append(f"{INDENT * depth}}}")
    for _ in range(opened):
        depth -= 1
        out.append(f"{INDENT * depth}}}")
    out.append("}")
    return out, extents[range_axis]


def _accesses_of(nest: Nest, buffer: str) -> list[Access]:
    return buffer_accesses(nest, buffer)


def _pack(printer: _PlannedBodyPrinter, nest: Nest, layout: Layout, buf: Buffer, pack: str,
          chunk_var: dict[str, str], lane_var: dict[str, str], inner_stop, depth: int) -> list[str]:
    """Copy the panel of `buf` for the current chunk of its lane axes into `pack`."""
    body_dims, lane_dims = pack_panel(nest, layout, buf.name)
    dims = body_dims + [(lane_var[a], w) for a, w in lane_dims]
    size = 1
    for _, extent in dims:
        size *= extent
    pad = INDENT * depth
    full = " && ".join(f"{chunk_var[a]} + {w} <= {inner_stop(a)}" for a, w in lane_dims)
    out = [
        f"{pad}{buf.ctype} {pack}[{size}]; /* pack: the panel of {buf.name} the lanes read, lane index innermost */",
        f"{pad}if ({full}) {{",
    ]
    d = depth + 1
    for var, extent in dims:
        out.append(f"{INDENT * d}for (int64_t {var} = 0; {var} < {extent}; {var}++) {{")
        d += 1
    (access,) = set(_accesses_of(nest, buf.name))
    printer.substitute = {a: Affine.var(chunk_var[a]) + Affine.var(lane_var[a]) for a, _ in layout.lanes}
    source = printer.access(access)
    printer.substitute = {}
    offset, stride = Affine(), 1
    for var, extent in reversed(dims):
        offset = offset + Affine.var(var) * stride
        stride *= extent
    out.append(f"{INDENT * d}{pack}[{_affine_text(offset, {})}] = {source};")
    for _ in dims:
        d -= 1
        out.append(f"{INDENT * d}}}")
    # A chunk that is not full never reads the pack (it runs the plain body); filling it
    # anyway keeps compilers from warning that it may be read uninitialized.
    out.append(f"{pad}}} else {{")
    out.append(f"{pad}{INDENT}memset({pack}, 0, sizeof {pack});")
    out.append(f"{pad}}}")
    return out


def print_split_driver(name: str, item: Launch, buffers: dict[str, Buffer], split: Split,
                       range_axis: str, extent: int) -> tuple[list[str], str]:
    """The driver that runs `name` once per piece; returns its lines and cdef line."""
    params = _params(item, buffers, c=True)[:-2]
    args = ", ".join(item.args)
    count = len(split.pieces)
    table = ", ".join(f"{{{lo}, {hi}}}" for lo, hi in split.pieces)
    out = [
        f"/* Thread split of {name}: {count} piece(s) [lo, hi) of {range_axis} in [0, {extent}),",
        " * run by an OpenMP team of at most omp_get_max_threads() threads (OMP_NUM_THREADS),",
        " * or one after another without OpenMP. Returns 0, or in checking builds",
        " * (-DEXACTC_CHECK_SPLITS) the coverage check's complaint (1 range, 2 overlap, 3 gap). */",
        f"int {name}_split({', '.join(params)})",
        "{",
        f"{INDENT}static const int64_t pieces[{count}][2] = {{{table}}};",
        f"{INDENT}int status = 0;",
        "#ifdef EXACTC_CHECK_SPLITS",
        f"{INDENT}status = exactc_check_pieces({extent}, pieces, {count});",
        "#endif",
        "#ifdef _OPENMP",
        f"{INDENT}int team = omp_get_max_threads() < {count} ? omp_get_max_threads() : {count};",
        "#pragma omp parallel for num_threads(team) schedule(static)",
        "#endif",
        f"{INDENT}for (int p = 0; p < {count}; p++) {{",
        f"{INDENT * 2}{name}({args}, pieces[p][0], pieces[p][1]);",
        f"{INDENT}}}",
        f"{INDENT}return status;",
        "}",
    ]
    cparams = _params(item, buffers, c=False)[:-2]
    cdef = f"int {name}_split({', '.join(cparams)});\n"
    return out, cdef


def print_planned_kernel(kernel, prefix: str, plan) -> PrintedKernel:
    """print_kernel under a plan: the nests the plan names under their layout and split,
    the others plain. The plan must have been validated against the kernel."""
    buffers = {b.name: b for b in kernel.buffers}
    names = [f"{prefix}_{item.nest.name}" for item in kernel.launches]
    plans = [plan.for_nest(item.nest.name) for item in kernel.launches]
    has_split = any(p is not None and p.split is not None for p in plans)

    out = ['#include "exactc_rt.h"', ""]
    out.extend(_kernel_comment(kernel))
    out.append(_PREAMBLE)
    if has_split:
        out.append(SPLIT_CHECK)
    out.append("/* Functions, run in this order, each over (lo, hi) = (0, extent) or pieces of it. */")
    bodies, ranges, drivers, cdef = [], [], [], []
    for name, item, nest_plan in zip(names, kernel.launches, plans):
        c_params = ", ".join(_params(item, buffers, c=True))
        out.append(f"void {name}({c_params});")
        cdef.append(f"void {name}({', '.join(_params(item, buffers, c=False))});\n")
        if nest_plan is None:
            bodies.append(_function(name, item, buffers))
            ranges.append(item.extent)
            drivers.append(None)
            continue
        lines, extent = print_planned_function(name, item, buffers, nest_plan.layout, nest_plan.split)
        ranges.append(extent)
        if nest_plan.split is not None:
            axis = split_axis(item.nest, nest_plan.layout, nest_plan.split)
            driver, driver_cdef = print_split_driver(name, item, buffers, nest_plan.split, axis, extent)
            lines = lines + [""] + driver
            cdef.append(driver_cdef)
            drivers.append(f"{name}_split")
        else:
            drivers.append(None)
        bodies.append(lines)
    for name, item, driver in zip(names, kernel.launches, drivers):
        if driver:
            out.append(f"int {driver}({', '.join(_params(item, buffers, c=True)[:-2])});")
    for lines in bodies:
        out.append("")
        out.extend(lines)
    return PrintedKernel(
        source="\n".join(out) + "\n",
        cdef="".join(cdef),
        functions=tuple(names),
        ranges=tuple(ranges),
        drivers=tuple(drivers),
    )
