"""Printing a nest under a plan: its layout (order, tiles, lanes, packs, blocks) and its
thread split. printer/kernels.py calls this for the nests a plan names; the others print
exactly as without a plan (printer/nests.py).

The function of a planned nest keeps the plain signature, `(args..., lo, hi)`, but its
(lo, hi) range is on the split's axis (or the first loop of the layout's order when the
nest has no split). The statements are the IR's, printed by the same body printer: a
layout only decides where they sit in the loops. A laned statement runs in a short loop
over the lanes, with every scalar of the body a local array, so each lane runs the plain
body's operations in the plain body's order. A transcendental with a laned form in the
runtime (exp, tanh, erf: exactc_rt.h) that initializes a scalar of a one-axis laned body
is printed as one call of that form over the chunk's lanes, its argument first gathered
into a lane array: the same value in each lane, the scalar function's bits, and the
compilers vectorize the function (exactc_libm.c).
"""

from __future__ import annotations

import math
from typing import Mapping

from exactc.exporter import dims
from exactc.exporter.kernels.ir import (
    REDUCE,
    Access,
    Affine,
    Buffer,
    Call,
    Declare,
    Expr,
    If,
    Launch,
    Loop,
    Nest,
    Stmt,
    Var,
    Write,
    walk_expr,
    walk_statements,
)
from exactc.exporter.kernels.layouts import Layout, fresh_name, pack_accesses, pack_panel, pack_size, panel_dims
from exactc.exporter.kernels.splits import Split, split_axis
from exactc.exporter.printer.ctext import INDENT, comment_block
from exactc.exporter.printer.dots import (BLOCK, ROWS, TILE_M, BlockSum, BlockTile, SuperBlockSum, block_sum,
                                              block_tile, super_block_sum)
from exactc.exporter.printer.nests import (
    ARRAY_FUNCTIONS,
    LOCAL_CTYPE,
    BodyPrinter,
    Extents,
    affine_text,
    length_params,
    nest_head,
    nest_params,
    vectorizer_guard,
    nest_taken,
    unused_length,
)
from exactc.exporter.printer.sums import print_integer_sum

# What the C check's status means (exactc_rt.h, exactc_check_pieces), for the harness.
SPLIT_STATUS = {1: "a piece out of range", 2: "pieces overlap", 3: "pieces leave a gap"}


def pack_offset(panel: list[tuple[str, dims.Extent]]) -> Affine:
    """The offset in a pack of the element at `panel` (variable, extent), last fastest;
    the strides are the extents at T_max (layouts.pack_size), so they stay constants."""
    offset, stride = Affine(), 1
    for var, extent in reversed(panel):
        offset = offset + Affine.var(var) * stride
        stride *= dims.upper(extent)
    return offset


class PlannedBodyPrinter(BodyPrinter):
    """The plain body printer, with reduction blocks, and (in the laned path) lane
    axes substituted by chunk + lane, scalars as lane arrays, packed loads."""

    super_block_sums = True

    def __init__(self, buffers: Mapping[str, Buffer], extents: Extents, blocks: dict[str, tuple[int, str, str]],
                 sums: dict[str, tuple[int, int]] | None = None, taken: set[str] | None = None):
        super().__init__(buffers, extents)
        self.blocks = blocks
        self.sums, self.taken = sums or {}, taken or set()  # integer sums: axis -> (lanes, parts)
        self.substitute: dict[str, Affine] = {}  # lane axis -> chunk + lane
        # body loop -> (pack pointer, elements a step of the loop reads, steps ahead): the
        # int8 panels laid out at load, prefetched ahead (prefetch_lines)
        self.prefetch: dict[str, list[tuple[str, int, int]]] = {}
        self.prefetch_var = "pf"
        # buffer -> (pack, dims, the renaming of the dims' loops for each access it serves)
        self.packs: dict[str, tuple[str, list[tuple[str, int]], dict[Access, dict[str, str]]]] = {}

    def index(self, entry: Affine) -> Affine:
        out = Affine.constant(entry.const)
        for name, coef in entry.terms:
            out = out + (self.substitute[name] * coef if name in self.substitute else Affine(((name, coef),)))
        return out

    def access(self, access: Access) -> str:
        if access.buffer in self.packs:
            pack, dims, renamings = self.packs[access.buffer]
            return f"{pack}[{affine_text(pack_offset(dims), {**self.rename, **renamings[access]})}]"
        return super().access(access)

    def block_loop(self, stmt: Loop, depth: int, inner: list[str]) -> list[str]:
        """A reduction loop in blocks of its plan's size, around `inner` (its body)."""
        pad, axis = INDENT * depth, stmt.axis
        size, block, end = self.blocks[axis.name]
        extent = self.extent(axis)
        return [
            f"{pad}for (int64_t {block} = 0; {block} < {extent}; {block} += {size}) "
            "{ /* reduction in blocks, each in index order, the blocks in order */",
            f"{pad}{INDENT}const int64_t {end} = {block} + {size} < {extent} ? {block} + {size} : {extent};",
            f"{pad}{INDENT}for (int64_t {axis.name} = {block}; {axis.name} < {end}; {axis.name}++) {{",
            *inner,
            f"{pad}{INDENT}}}",
            f"{pad}}}",
        ]

    def keeps_loop(self, axis: str) -> bool:
        return axis in self.sums or axis in self.blocks

    def loop(self, stmt: Loop, depth: int) -> list[str]:
        if stmt.axis.name in self.sums:
            lanes, parts = self.sums[stmt.axis.name]
            return print_integer_sum(self, stmt, depth, lanes, parts, self.taken, LOCAL_CTYPE["i32"])
        if stmt.axis.name not in self.blocks:
            return super().loop(stmt, depth)
        return self.block_loop(stmt, depth, self.statements(stmt.body, depth + 2))


def uses_lanes(expr: Expr, laned: set[str]) -> bool:
    for node in walk_expr(expr):
        if isinstance(node, Var) and node.name in laned:
            return True
        if isinstance(node, Affine) and set(node.variables()) & laned:
            return True
    return False


class LanedBlock:
    """The laned path: statements grouped into loops over the lanes, inside the body's
    own loops; a statement whose control depends on a lane runs whole in one lane. With
    one lane axis, a scalar initialized by a transcendental of ARRAY_FUNCTIONS is one
    call of its laned form (`array_call`); `arguments` lists the lane arrays made for
    their arguments, which the caller declares."""

    def __init__(self, printer: PlannedBodyPrinter, lanes: list[tuple[str, int, str]], laned: set[str],
                 taken: set[str]):
        self.printer = printer
        self.lanes = lanes  # (axis, width, lane variable), innermost last
        self.laned = laned  # names whose value differs between lanes
        self.taken = taken  # the function's names (fresh ones for the argument arrays)
        self.arguments: list[Var] = []
        self.replaced: set[str] = set()  # the scalars of the statements a kernel call stands for
        self.tiled: list[Var] = []  # the sums a tile call declared and summed (one a call)

    def block(self, body: tuple[Stmt, ...], depth: int) -> list[str]:
        out: list[str] = []
        run: list[Stmt] = []
        at = 0
        while at < len(body):
            stmt = body[at]
            at += 1
            tile = self.block_tile(body[at - 2] if at >= 2 else None, body[at - 1:])
            if tile is not None:
                run.pop()  # the sum's `= 0`: the tile kernel starts its sums from 0
                self.tiled.append(tile.sum.var)
                out.extend(self.per_lane(run, depth))
                run = []
                out.extend(self.tile_call(tile, depth))
                at = len(body)
                continue
            whole = self.super_block_rows(body[at - 1:])
            if whole is not None:
                out.extend(self.per_lane(run, depth))
                run = []
                out.extend(self.super_block_call(body[at - 1:], whole, depth))
                at += whole.length - 1
                continue
            rows = self.block_rows(body[at - 1:])
            if rows is not None:
                out.extend(self.per_lane(run, depth))
                run = []
                out.extend(self.rows_call(rows, depth))
                at += len(rows.axes) - 1
            elif isinstance(stmt, Loop):
                out.extend(self.per_lane(run, depth))
                run = []
                out.extend(self.loop(stmt, depth))
            elif isinstance(stmt, If) and not uses_lanes(stmt.cond, self.laned):
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

    def block_rows(self, body: tuple[Stmt, ...]) -> BlockSum | None:
        """The whole block's sum `body` starts with, where the body has n alone in lanes
        of ROWS and the weight's row is the lane's output (read in place, not packed):
        the ROWS rows' sums are one call of the x8 kernel (printer/dots.py)."""
        if len(self.lanes) != 1 or self.lanes[0][1] != ROWS:
            return None
        found = block_sum(body)
        axis = self.lanes[0][0]
        if found is None or found.var.name not in self.laned:
            return None
        if found.w.buffer in self.printer.packs:
            return found if self.run_panel(found) is not None else None
        if any(self.printer.keeps_loop(a) for a in found.axes) or any(axis in e.variables() for e in found.x.index):
            return None
        row, *rest = found.w.index
        shape = self.printer.buffers[found.w.buffer].shape
        if row != Affine.var(axis) or any(axis in e.variables() for e in rest) or dims.is_symbolic(math.prod(shape[1:])):
            return None
        return found

    def run_panel(self, found: BlockSum) -> tuple[str, int] | None:
        """Where the block's weight is read through a pack whose panel holds, block by
        block, the lanes' rows' blocks one after another (layouts.RUN_PANELS): the C of
        the chunk's first row's block in it, and the bytes from one row's block to the
        next; else None."""
        pointer, dims, _ = self.printer.packs[found.w.buffer]
        axis, width, lane = self.lanes[0]
        values = BLOCK if found.fmt == "q8" else BLOCK // 2
        if (len(dims) < 2 or dims[-2] != (lane, width) or dims[-1] != (found.axes[0], values)
                or any(self.printer.keeps_loop(a) for a in found.axes)
                or any(axis in e.variables() for e in found.x.index)):
            return None
        offset = pack_offset(dims)
        start = Affine(tuple(t for t in offset.terms if t[0] not in (lane, found.axes[0])), offset.const)
        return f"{pointer}[{affine_text(start, self.printer.rename)}]", values

    def rows_of(self, x: Access, w: Access) -> bool:
        """Whether the body has n alone in lanes of ROWS, and `w`, read in place (not
        packed), has the lane's output as its row and `x` is the same in every lane."""
        if len(self.lanes) != 1 or self.lanes[0][1] != ROWS or w.buffer in self.printer.packs:
            return False
        axis = self.lanes[0][0]
        row, *rest = w.index
        shape = self.printer.buffers[w.buffer].shape
        return (row == Affine.var(axis) and not any(axis in e.variables() for e in (*rest, *x.index))
                and not dims.is_symbolic(math.prod(shape[1:])))

    def super_block_rows(self, body: tuple[Stmt, ...]) -> SuperBlockSum | None:
        """The k-quant super-block's sums `body` starts with, where the ROWS rows' sums
        are one call of its x8 kernel (printer/dots.py)."""
        found = super_block_sum(body) if self.printer.super_block_sums else None
        if found is None or found.total.name not in self.laned or any(self.printer.keeps_loop(a) for a in found.axes):
            return None
        return found if self.rows_of(found.x, found.w) else None

    def first_row(self, accesses: tuple[Access, ...]) -> list[str]:
        """The accesses' C at the chunk's first row (the lane at 0)."""
        axis, _, lane = self.lanes[0]
        laned = self.printer.substitute[axis]
        first = Affine(tuple(t for t in laned.terms if t[0] != lane), laned.const)
        self.printer.substitute = {**self.printer.substitute, axis: first}
        texts = [self.printer.access(a) for a in accesses]
        self.printer.substitute = {**self.printer.substitute, axis: laned}
        return texts

    def super_block_call(self, body: tuple[Stmt, ...], found: SuperBlockSum, depth: int) -> list[str]:
        """S = 0 (and M = 0) in each lane, then the ROWS rows' super-block sums as one
        call of the x8 kernel at the chunk's first row, added lane by lane."""
        _, width, lane = self.lanes[0]
        x, w = self.first_row((found.x, found.w))
        stride = math.prod(self.printer.buffers[found.w.buffer].shape[1:])
        sums = [found.total] + ([found.mins] if found.mins is not None else [])
        arrays = [fresh_name(f"{var.name}_rows", self.taken) for var in sums]
        pad = INDENT * depth
        self.replaced |= {stmt.var.name for stmt in body[found.declared:found.length] if isinstance(stmt, Declare)}
        out = self.lane_loop(list(body[:found.declared]), depth)
        out += [f"{pad}{{ /* the super-block's exact sums, {width} rows at once (exactc_dot.h) */",
                f"{pad}{INDENT}int32_t {', '.join(f'{a}[{width}]' for a in arrays)};",
                f"{pad}{INDENT}{found.function()}x{width}(&{x}, &{w}, {stride}, {', '.join(arrays)});",
                f"{pad}{INDENT}for (int64_t {lane} = 0; {lane} < {width}; {lane}++) {{"]
        for var, array in zip(sums, arrays):
            name = self.printer.rename.get(var.name, var.name)
            out.append(f"{pad}{INDENT * 2}{name} = {name} + {array}[{lane}];")
        return out + [f"{pad}{INDENT}}}", f"{pad}}}"]

    def block_tile(self, start: Stmt | None, body: tuple[Stmt, ...]) -> BlockTile | None:
        """The tile `body` is (printer/dots.py), where the body has the activations' rows in
        lanes of TILE_M over the weight's rows in lanes of ROWS, each operand read in place
        (not packed) at its row, the rows' lengths static: the TILE_M x ROWS outputs' sums
        and combine are one call of the tile kernel."""
        if [(a, w) for a, w, _ in self.lanes] not in ([(a, TILE_M), (b, ROWS)] for a, b in [self.axes()]):
            return None
        found = block_tile(start, body)
        if found is None or found.acc.name not in self.laned or found.sum.var.name not in self.laned:
            return None
        if any(self.printer.keeps_loop(a) for a in found.sum.axes):
            return None
        m, n = self.axes()
        rows = ((found.sum.x, m), (found.xd, m), (found.sum.w, n), (found.wd, n))
        return found if all(self.at_row(access, axis) for access, axis in rows) else None

    def axes(self) -> tuple[str, str]:
        return (self.lanes[0][0], self.lanes[-1][0])

    def at_row(self, access: Access, axis: str) -> bool:
        """Whether `access` reads its buffer in place at row `axis`, the other lane axes
        nowhere in its index, a row's length static."""
        row, *rest = access.index
        lanes = {a for a, _, _ in self.lanes}
        shape = self.printer.buffers[access.buffer].shape
        return (access.buffer not in self.printer.packs and row == Affine.var(axis)
                and not any(lanes & set(e.variables()) for e in rest) and not dims.is_symbolic(math.prod(shape[1:])))

    def tile_call(self, found: BlockTile, depth: int) -> list[str]:
        """The block's step of the TILE_M x ROWS outputs as one call of the tile kernel at
        the chunks' first rows: its int32 sums and their combine into acc."""
        laned = self.printer.substitute
        self.printer.substitute = {a: Affine(tuple(t for t in laned[a].terms if t[0] != lane), laned[a].const)
                                   for a, _, lane in self.lanes}
        operands = []
        for access in (found.sum.x, found.xd, found.sum.w, found.wd):
            stride = math.prod(self.printer.buffers[access.buffer].shape[1:])
            operands += [f"&{self.printer.access(access)}", str(stride)]
        self.printer.substitute = laned
        acc = found.acc.name
        return [
            f"{INDENT * depth}/* {acc} = {acc} + f32({found.sum.var.name}) * (xd * wd), {found.sum.var.name} the "
            f"block's exact sum, {TILE_M} x {ROWS} outputs at once (exactc_dot.h) */",
            f"{INDENT * depth}{found.function()}({TILE_M}, {', '.join(operands)}, &{acc}[0][0]);",
        ]

    def rows_call(self, found: BlockSum, depth: int) -> list[str]:
        """`s = s + <block sum>` in each of the ROWS lanes as one call of the x8 kernel at
        the chunk's first row, its sums then added lane by lane."""
        axis, width, lane = self.lanes[0]
        laned = self.printer.substitute[axis]
        first = Affine(tuple(t for t in laned.terms if t[0] != lane), laned.const)
        self.printer.substitute = {**self.printer.substitute, axis: first}
        panel = self.run_panel(found) if found.w.buffer in self.printer.packs else None
        x = self.printer.access(found.x)
        # the weight in place (row stride apart), or its pack (the rows' blocks one after another)
        w, stride = panel or (self.printer.access(found.w), math.prod(self.printer.buffers[found.w.buffer].shape[1:]))
        self.printer.substitute = {**self.printer.substitute, axis: laned}
        sums = fresh_name(f"{found.var.name}_rows", self.taken)
        var = self.printer.rename.get(found.var.name, found.var.name)
        pad = INDENT * depth
        return [
            f"{pad}{{ /* {found.var.name} = {found.var.name} + the block's exact sum, {width} rows at once (exactc_dot.h) */",
            f"{pad}{INDENT}int32_t {sums}[{width}];",
            f"{pad}{INDENT}{found.function(ROWS)}(&{x}, &{w}, {stride}, {sums});",
            f"{pad}{INDENT}for (int64_t {lane} = 0; {lane} < {width}; {lane}++) {{",
            f"{pad}{INDENT * 2}{var} = {var} + {sums}[{lane}];",
            f"{pad}{INDENT}}}",
            f"{pad}}}",
        ]

    def loop(self, stmt: Loop, depth: int) -> list[str]:
        pad, axis = INDENT * depth, stmt.axis
        if axis.name in self.printer.blocks:
            return self.printer.block_loop(stmt, depth, self.block(stmt.body, depth + 2))
        note = " /* reduction: in index order, each lane its own */" if axis.kind == REDUCE else ""
        extent = self.printer.extent(axis)
        out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {extent}; {axis.name}++) {{{note}"]
        out.extend(prefetch_lines(self.printer, axis.name, pad + INDENT))
        out.extend(self.block(stmt.body, depth + 1))
        return out + [f"{pad}}}"]

    def per_lane(self, run: list[Stmt], depth: int) -> list[str]:
        """A run of statements in lane loops, each laned-form call on its own."""
        out: list[str] = []
        pending: list[Stmt] = []
        for stmt in run:
            if self.is_array_call(stmt):
                out.extend(self.lane_loop(pending, depth))
                pending = []
                out.extend(self.array_call(stmt, depth))
            else:
                pending.append(stmt)
        return out + self.lane_loop(pending, depth)

    def is_array_call(self, stmt: Stmt) -> bool:
        return (len(self.lanes) == 1 and isinstance(stmt, Declare) and isinstance(stmt.init, Call)
                and stmt.init.fn in ARRAY_FUNCTIONS and stmt.var.name in self.laned)

    def array_call(self, stmt: Declare, depth: int) -> list[str]:
        """`v = f(arg)` in every lane as exactc_<f>[f]_array(arg lanes, v, width)."""
        call, ((_, width, lane),) = stmt.init, self.lanes
        out = []
        if isinstance(call.a, Var) and call.a.name in self.laned:
            source = call.a.name
        else:  # the argument, lane by lane, into an array of its own
            source = fresh_name(f"{stmt.var.name}_x", self.taken)
            self.arguments.append(Var(source, call.type))
            self.printer.rename[source] = f"{source}[{lane}]"
            out.extend(self.lane_loop([Declare(Var(source, call.type), call.a)], depth))
        form = f"exactc_{call.fn}{'' if call.type == 'f64' else 'f'}_array"
        text = " ".join(line.strip() for line in stmt.lines(0))
        out.append(f"{INDENT * depth}{form}({source}, {stmt.var.name}, {width}); /* {text}, in each lane */")
        return out

    def lane_loop(self, run: list[Stmt], depth: int) -> list[str]:
        if not run:
            return []
        out = []
        # Outer lanes unrolled, so that each row of accumulators can stay in registers;
        # the innermost lane loop is the one compilers vectorize. Not where the run only
        # writes the lanes out: unrolled there, gcc 12 stores the rows through 128-bit
        # pieces read back from the stack and keeps a row of accumulators in memory for
        # the whole reduction (m:4 by n:16 at 31 GFLOP/s on an AVX2 Zen 2, 59 without).
        unrolled = not all(isinstance(stmt, Write) for stmt in run)
        for k, (_, width, lane) in enumerate(self.lanes):
            if k < len(self.lanes) - 1 and unrolled:
                out.append(f"{INDENT * (depth + k)}#pragma GCC unroll {width}")
            out.append(f"{INDENT * (depth + k)}for (int64_t {lane} = 0; {lane} < {width}; {lane}++) {{")
        inner = depth + len(self.lanes)
        for stmt in run:
            out.extend(self.printer.statement(stmt, inner))
        for k in range(len(self.lanes) - 1, -1, -1):
            out.append(f"{INDENT * (depth + k)}}}")
        return out


def planned_function(name: str, item: Launch, buffers: Mapping[str, Buffer], layout: Layout,
                     split: Split | None, ahead: frozenset[str] = frozenset()) -> tuple[list[str], str, int]:
    """The C function of a nest under `layout`: its lines, the axis of its (lo, hi)
    range (the split's, else the first of the layout's order) and that axis's extent.
    A pack of a buffer in `ahead` is the caller's: the buffer arrives as its panels."""
    nest = item.nest
    order = layout.loop_order(nest)
    extents = {a.name: a.extent for a in nest.axes}
    range_axis = split_axis(nest, layout, split) if split else order[0]
    taken = nest_taken(nest, buffers)
    names = Extents(nest, buffers, taken)
    tiles, lanes = dict(layout.tiles), dict(layout.lanes)
    blocks = {a: (size, fresh_name(f"{a}_b", taken), fresh_name(f"{a}_be", taken)) for a, size in layout.blocks}
    tile_var = {a: fresh_name(f"{a}_t", taken) for a in order if a in tiles}
    tile_end = {a: fresh_name(f"{a}_te", taken) for a in order if a in tiles}
    chunk_var = {a: fresh_name(f"{a}_c", taken) for a in lanes}
    lane_var = {a: fresh_name(f"{a}_l", taken) for a in lanes}
    # A pack: its storage, and the pointer every access goes through (pack() says why).
    pack_var = {b: (fresh_name(f"{b}_pack", taken), fresh_name(f"{b}_p", taken)) for b in layout.packs}

    def start(a: str) -> str:
        return "lo" if a == range_axis else "0"

    def stop(a: str) -> str:
        return "hi" if a == range_axis else names.axis(a, extents[a])

    def inner_stop(a: str) -> str:
        return tile_end[a] if a in tiles else stop(a)

    printer = PlannedBodyPrinter(buffers, names, blocks, {a: (w, p) for a, w, p in layout.sums}, taken)
    printer.prefetch = panel_prefetches(nest, layout, buffers, ahead, pack_var)
    printer.prefetch_var = fresh_name("pf", taken) if printer.prefetch else "pf"
    body: list[str] = []
    depth = 1
    opened = 0
    # Tile loops, outermost, in the layout's order.
    for a in order:
        if a in tiles:
            t, e, size = tile_var[a], tile_end[a], tiles[a]
            body.append(f"{INDENT * depth}for (int64_t {t} = {start(a)}; {t} < {stop(a)}; {t} += {size}) {{")
            depth += 1
            body.append(f"{INDENT * depth}const int64_t {e} = {t} + {size} < {stop(a)} ? {t} + {size} : {stop(a)};")
            opened += 1
    # Point loops (chunk loops for laned axes); packs right after the innermost loop
    # whose axis their panel depends on.
    pack_after: dict[str, str] = {}
    for buffer in layout.packs:
        access = pack_accesses(nest, buffer)[0]
        used = {n for entry in access.index for n in entry.variables()}
        pack_after[buffer] = [a for a in order if a in used][-1]
    for a in order:
        first = tile_var[a] if a in tiles else start(a)
        if a in lanes:
            c = chunk_var[a]
            body.append(f"{INDENT * depth}for (int64_t {c} = {first}; {c} < {inner_stop(a)}; {c} += {lanes[a]}) {{")
        else:
            body.append(f"{INDENT * depth}for (int64_t {a} = {first}; {a} < {inner_stop(a)}; {a}++) {{")
        depth += 1
        opened += 1
        for buffer in layout.packs:
            if pack_after[buffer] == a:
                if buffer in ahead:
                    body.extend(packed_panel(printer, nest, layout, buffers[buffer], pack_var[buffer], chunk_var,
                                             depth))
                else:
                    body.extend(pack(printer, nest, layout, buffers[buffer], pack_var[buffer], chunk_var,
                                     lane_var, inner_stop, depth))
    if not lanes:
        body.extend(printer.statements(nest.body, depth))
    else:
        full = " && ".join(f"{chunk_var[a]} + {w} <= {inner_stop(a)}" for a, w in layout.lanes)
        body.append(f"{INDENT * depth}if ({full}) {{ /* full lanes */")
        body.extend(laned_body(printer, nest, layout, layout.lanes, lane_var, chunk_var, pack_var, taken, depth + 1))
        if len(layout.lanes) == 2:
            # The outer lane axis's last, partial chunk: its points one at a time, the
            # inner axis still in lanes (linear's rows past the last multiple of 8).
            (outer, width), inner = layout.lanes
            c = chunk_var[outer]
            body.append(f"{INDENT * depth}}} else if ({chunk_var[inner[0]]} + {inner[1]} <= {inner_stop(inner[0])}) {{"
                        f" /* the last chunk of {outer}, {inner[0]} in lanes */")
            body.append(f"{INDENT * (depth + 1)}for (int64_t {outer} = {c}; {outer} < {c} + {width} && "
                        f"{outer} < {inner_stop(outer)}; {outer}++) {{")
            body.extend(laned_body(printer, nest, layout, (inner,), lane_var, chunk_var, pack_var, taken, depth + 2))
            body.append(f"{INDENT * (depth + 1)}}}")
        body.append(f"{INDENT * depth}}} else {{ /* the remainder: the plain body, point by point */")
        rdepth = depth + 1
        for a, w in layout.lanes:
            c = chunk_var[a]
            body.append(
                f"{INDENT * rdepth}for (int64_t {a} = {c}; {a} < {c} + {w} && {a} < {inner_stop(a)}; {a}++) {{"
            )
            rdepth += 1
        body.extend(printer.statements(nest.body, rdepth))
        for _ in layout.lanes:
            rdepth -= 1
            body.append(f"{INDENT * rdepth}}}")
        body.append(f"{INDENT * depth}}}")
    for _ in range(opened):
        depth -= 1
        body.append(f"{INDENT * depth}}}")

    # The comment: the IR, then the plan.
    lines = nest.text().splitlines() + ["", f"layout: {layout.text()}"]
    if split:
        lines.append(f"split of {range_axis}: {split.text()}")
    for buffer in sorted(ahead & set(layout.packs)):
        lines.append(f"{buffer}: packed when the weights load (its panels in place: printer/prepack.py)")
    out = vectorizer_guard(nest) + comment_block(lines)
    out.extend(nest_head(name, item, buffers, range_axis, extents[range_axis]))
    return (out + names.declaration(body) + unused_length(buffers, body) + body + ["}"], range_axis,
            extents[range_axis])


PREFETCH_BYTES = 2048  # how far ahead in a panel to ask for: 4 blocks of q8's 512 bytes
LINE_BYTES = 64


def panel_prefetches(nest: Nest, layout: Layout, buffers: Mapping[str, Buffer], ahead: frozenset[str],
                     pack_var: dict[str, tuple[str, str]]) -> dict[str, list[tuple[str, int, int]]]:
    """For each int8 panel laid out at load (a quantized weight's values), the body loop
    that walks it outermost, the elements one of its steps reads (the panel's other body
    loops times the lanes) and how many steps ahead PREFETCH_BYTES is. A panel laid out
    at load has static extents (prepack.py checks them)."""
    out: dict[str, list[tuple[str, int, int]]] = {}
    for buffer in sorted(ahead & set(layout.packs)):
        body_dims, lane_dims = pack_panel(nest, layout, buffer)
        if buffers[buffer].ctype not in ("int8_t", "uint8_t") or not body_dims:
            continue
        step = 1
        for _, extent in body_dims[1:] + lane_dims:
            step *= extent
        out.setdefault(body_dims[0][0], []).append((pack_var[buffer][1], step, max(1, PREFETCH_BYTES // step)))
    return out


def prefetch_lines(printer: PlannedBodyPrinter, axis: str, pad: str) -> list[str]:
    """At the top of a step of body loop `axis`: ask for the lines of the panels it walks,
    `ahead` steps on (past the panel's end lies the next chunk's panel, or other weights:
    a hint never faults)."""
    out, pf = [], printer.prefetch_var
    for pointer, step, ahead in printer.prefetch.get(axis, []):
        out.append(f"{pad}for (int64_t {pf} = 0; {pf} < {step}; {pf} += {LINE_BYTES}) {{ /* {pointer}'s lines "
                   f"{ahead} step(s) on: a hint */")
        out.append(f"{pad}{INDENT}EXACTC_PREFETCH({pointer} + ({axis} + {ahead}) * {step} + {pf});")
        out.append(f"{pad}}}")
    return out


def laned_body(printer: PlannedBodyPrinter, nest: Nest, layout: Layout, lanes: tuple[tuple[str, int], ...],
               lane_var: dict[str, str], chunk_var: dict[str, str], pack_var: dict[str, tuple[str, str]],
               taken: set[str], depth: int) -> list[str]:
    """The body with `lanes` (all of the layout's lane axes, or its inner one alone) in
    lanes: every scalar a local array over them, every statement a loop over them. A
    pack is read where its panel's lanes are all among `lanes` (it is filled whenever
    their chunks are full); a buffer whose panel follows another lane axis is read
    where it lies."""
    laned_scalars = [s.var for s in walk_statements(nest.body) if isinstance(s, Declare)]
    suffix = "".join(f"[{w}]" for _, w in lanes)
    index = "".join(f"[{lane_var[a]}]" for a, _ in lanes)
    printer.substitute = {a: Affine.var(chunk_var[a]) + Affine.var(lane_var[a]) for a, _ in lanes}
    printer.rename = {var.name: f"{var.name}{index}" for var in laned_scalars}
    for buffer in layout.packs:
        _, lane_dims = pack_panel(nest, layout, buffer)
        if {a for a, _ in lane_dims} <= {a for a, _ in lanes}:  # else its pack is not filled: read the buffer
            printer.packs[buffer] = (pack_var[buffer][1], panel_dims(nest, layout, buffer, lane_var),
                                     pack_accesses(nest, buffer)[1])
    laned = {a for a, _ in lanes} | {v.name for v in laned_scalars}
    block = LanedBlock(printer, [(a, w, lane_var[a]) for a, w in lanes], laned, taken)
    out = block.block(nest.body, depth)
    # A sum every one of whose declarations a tile call took is not declared, nor the
    # scalars of the statements a super-block call stands for.
    kept = [var for var in laned_scalars
            if block.tiled.count(var) < laned_scalars.count(var) and var.name not in block.replaced]
    declared = [f"{INDENT * depth}{LOCAL_CTYPE[var.type]} {var.name}{suffix};" for var in kept + block.arguments]
    printer.substitute, printer.rename, printer.packs = {}, {}, {}
    return declared + out


def pack(printer: PlannedBodyPrinter, nest: Nest, layout: Layout, buf: Buffer, names: tuple[str, str],
         chunk_var: dict[str, str], lane_var: dict[str, str], inner_stop, depth: int) -> list[str]:
    """Copy the panel of `buf` for the current chunk of its lane axes into the pack.

    The pack is a local array reached only through a (restrict) pointer to it. Read by
    the array's own name, gcc walks it with an integer induction variable, forgets which
    object the reads touch, and must assume they may read the lanes' accumulators: it
    keeps every accumulator in memory, a load and a store per reduction step (41 against
    clang's 87 GFLOP/s, docs/performance.md). Through a pointer it knows, and keeps them
    in registers."""
    storage, pack_name = names
    _, lane_dims = pack_panel(nest, layout, buf.name)
    dims = panel_dims(nest, layout, buf.name, lane_var)
    size = pack_size(dims)
    pad = INDENT * depth
    order = "lane index innermost" if dims[-len(lane_dims):] == [(lane_var[a], w) for a, w in lane_dims] else \
        "each lane's run of the innermost loop together"
    full = " && ".join(f"{chunk_var[a]} + {w} <= {inner_stop(a)}" for a, w in lane_dims)
    out = [
        f"{pad}{buf.ctype} {storage}[{size}]; /* pack: the panel of {buf.name} the lanes read, {order} */",
        f"{pad}{buf.ctype} *restrict {pack_name} = {storage}; /* only this pointer touches it: the lanes stay in registers */",
        f"{pad}if ({full}) {{",
    ]
    d = depth + 1
    for var, extent in dims:
        out.append(f"{INDENT * d}for (int64_t {var} = 0; {var} < {printer.extents.axis(var, extent)}; {var}++) {{")
        d += 1
    access = pack_accesses(nest, buf.name)[0]
    printer.substitute = {a: Affine.var(chunk_var[a]) + Affine.var(lane_var[a]) for a, _ in layout.lanes}
    source = printer.access(access)
    printer.substitute = {}
    out.append(f"{INDENT * d}{pack_name}[{affine_text(pack_offset(dims))}] = {source};")
    for _ in dims:
        d -= 1
        out.append(f"{INDENT * d}}}")
    # A chunk that is not full never reads the pack (it runs the plain body, or lanes of
    # the other axis, which read only packs whose panel their lanes fill); filling it
    # anyway keeps compilers from warning that it may be read uninitialized.
    out.append(f"{pad}}} else {{")
    out.append(f"{pad}{INDENT}memset({pack_name}, 0, sizeof {storage});")
    out.append(f"{pad}}}")
    return out


def packed_panel(printer: PlannedBodyPrinter, nest: Nest, layout: Layout, buf: Buffer, names: tuple[str, str],
                 chunk_var: dict[str, str], depth: int) -> list[str]:
    """The pack of a buffer the caller laid out as its panels (printer/prepack.py): the
    current chunk's panel is where it lies, chunk c at c times the panel's size, read
    through a restrict pointer as a copied pack is (pack() says why)."""
    _, pack_name = names
    body_dims, lane_dims = pack_panel(nest, layout, buf.name)
    ((axis, width),) = lane_dims
    panel = " * ".join(printer.extents.axis(a, extent) for a, extent in body_dims) or "1"  # no body loop: a row of one
    return [f"{INDENT * depth}const {buf.ctype} *restrict {pack_name} = {buf.name} + {chunk_var[axis]} * {panel};"
            f" /* the chunk's panel, packed at load */"]


def split_extent(extent: dims.Extent) -> str:
    """The C text of the extent a run-time split scales its parts to: the run-time one
    (the coverage check compares the pieces with the extent's own text)."""
    return dims.c_factor(extent)


def split_driver(name: str, item: Launch, buffers: Mapping[str, Buffer], split: Split, range_axis: str,
                 extent: dims.Extent, chunk: int = 1) -> list[str]:
    """`<name>_split`: runs `name` once per piece of the split (exactc_rt.h, "Thread
    splits"); returns the coverage check's status, 0 unless built to check. A split in
    parts of `of` computes its pieces from the run-time extent when it runs, each cut
    but the extent's end rounded down to whole chunks of the axis's `chunk` lanes: no
    piece but the last ends in a partial chunk, which runs point by point (parts that
    round to the same cut are empty pieces).

    The team takes the pieces one at a time as its threads come free (schedule
    dynamic), not in fixed shares: on a machine shared with other work, a thread that
    is descheduled no longer holds back the pieces it would have been given
    (docs/performance.md, "Threads"). Which thread runs a piece never changes a bit."""
    args = ", ".join(list(item.args) + [a.split()[-1] for a in length_params(buffers)])
    count = len(split.pieces)
    table = ", ".join(f"{{{lo}, {hi}}}" for lo, hi in split.pieces)
    if split.of:
        whole = split_extent(extent)
        pieces = [
            f"{INDENT}static const int64_t parts[{count}][2] = {{{table}}};  /* in parts of {split.of} */",
            f"{INDENT}int64_t pieces[{count}][2];",
            f"{INDENT}for (int p = 0; p < {count}; p++) {{",
            *(f"{INDENT * 2}pieces[p][{end}] = {whole} * parts[p][{end}] / {split.of};" for end in (0, 1)
              if chunk == 1),
            *(f"{INDENT * 2}pieces[p][{end}] = parts[p][{end}] == {split.of} ? {whole} : "
              f"{whole} * parts[p][{end}] / {split.of} / {chunk} * {chunk};  /* whole chunks of {chunk} */"
              for end in (0, 1) if chunk > 1),
            f"{INDENT}}}",
        ]
        checked = dims.c_factor(extent)
    else:
        pieces = [f"{INDENT}static const int64_t pieces[{count}][2] = {{{table}}};"]
        checked = str(extent)
    return [
        f"/* Thread split of {name}: {count} piece(s) [lo, hi) of {range_axis} in [0, {extent}). */",
        f"{split_declaration(name, item, buffers)[:-1]} {{",
        *pieces,
        f"{INDENT}int status = 0;",
        "#ifdef EXACTC_CHECK_SPLITS",
        f"{INDENT}status = exactc_check_pieces({checked}, (const int64_t (*)[2])pieces, {count});",
        "#endif",
        "#ifdef _OPENMP",
        f"{INDENT}int team = omp_get_max_threads() < {count} ? omp_get_max_threads() : {count};",
        "#pragma omp parallel for num_threads(team) schedule(dynamic)",
        "#endif",
        f"{INDENT}for (int p = 0; p < {count}; p++) {{",
        f"{INDENT * 2}{name}({args}, pieces[p][0], pieces[p][1]);",
        f"{INDENT}}}",
        f"{INDENT}return status;",
        "}",
    ]


def split_declaration(name: str, item: Launch, buffers: Mapping[str, Buffer], c: bool = True) -> str:
    return f"int {name}_split({', '.join(nest_params(item, buffers, c) + length_params(buffers))});"
