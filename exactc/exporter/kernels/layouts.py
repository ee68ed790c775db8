"""Layouts of a nest: how its loops are arranged, never what they compute.

A Layout is data the printer reads (exporter/printer/planned.py). Every field may only
move the work of the nest's PARALLEL axes around, or cut a reduction into blocks that
still run in index order, so that every legal layout gives the plain nest's bits
(docs/design.md, principle 2):

- `order`: the loop order of the nest's parallel axes, outermost first.
- `tiles`: axis -> tile size (>= 1, any size; the last tile holds the remainder). The
  tile loops of all tiled axes run outermost, in `order`; the point loops inside them.
- `lanes`: axis -> width (2..16; a nest's only lane axis may also be 32, 64, 128 or
  256 wide), at most two axes, the last one innermost. A laned axis
  is computed `width` points at a time: every scalar of the body becomes a local array
  (`float acc[4][16]`) and every statement a short loop over the lanes, placed inside
  the body's loops, so each lane still runs its own statements, its reductions in
  index order; gcc and clang vectorize the innermost lane loop at -O2. A chunk that is
  not full (the remainder) runs the plain body; with two lane axes, a partial chunk of
  the outer one whose inner chunk is full runs point by point with the inner in lanes.
- `packs`: input buffers whose panel is copied to contiguous scratch before the loops
  that read it: the panel is every element the laned body reads for one chunk of the
  lane axes it depends on, laid out with the lane index innermost (e.g. linear's w
  rows for the current n chunk, transposed). Bits are copied, nothing computed. The
  panel may follow the run-time length (attention's att v reads v's rows k < T): the
  pack is laid out for T_max and filled up to T.
- `blocks`: reduction axis -> block size: the reduction loop is cut into consecutive
  blocks run in order, one after another; the partial sum stays in the accumulator.
- `sums`: integer reduction axis -> (lanes, parts): an exact int32 sum (the block sums
  of quantized operands, docs/semantics.md section 15) reassociated: the loop is cut
  into `parts` contiguous parts, each summed in `lanes` interleaved partial sums, and
  the partial sums are added last part first. Integer addition is associative and the
  sum cannot overflow, so every grouping gives the same bits; a floating-point
  reduction is refused.

What is refused (LayoutError, naming the nest, the field and the rule): anything that
names a reduction where a parallel axis is needed (reordering, tiling or laning a
reduction changes the order of its rounded operations), an axis the nest does not have,
a lane width outside 2..16 (and the wide ones), more than two lane axes, a pack of a buffer the laned body
does not read through the lanes or of a panel over MAX_PACK_ELEMENTS, a block of a
parallel axis, sums of a reduction that is not an integer sum (or together with parallel
lanes, or a block of the same loop).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from exactc.exporter import dims
from exactc.exporter.kernels.ir import (
    REDUCE,
    Access,
    Assign,
    Binary,
    Buffer,
    CopyBits,
    Load,
    Loop,
    Nest,
    Var,
    statement_exprs,
    walk_expr,
    walk_statements,
)

LANE_WIDTHS = range(2, 17)
# The widths a nest's only lane axis may also have: the elementwise transcendentals'
# lanes, where each chunk makes one call of exactc_<f>_array, whose setup (its constants
# in vector registers) a longer chunk pays for once (printer/planned.py).
WIDE_LANE_WIDTHS = (32, 64, 128, 256)
SUM_LANES = range(1, 65)  # interleaved partial sums of an integer sum
SUM_PARTS = range(1, 9)  # contiguous parts of an integer sum
MAX_LANE_AXES = 2
MAX_PACK_ELEMENTS = 1 << 16  # a pack lives on the stack of the thread running the piece


class LayoutError(ValueError):
    """An illegal layout or split: the message names the nest, the field and the rule."""

    def __init__(self, nest: str, field: str, rule: str):
        self.nest, self.field, self.rule = nest, field, rule
        super().__init__(f"plan: nest {nest}, field {field}: {rule}")


@dataclasses.dataclass(frozen=True)
class Layout:
    """The arrangement of one nest's loops; the default is the plain nest."""

    order: tuple[str, ...] = ()  # empty: the nest's own order
    tiles: tuple[tuple[str, int], ...] = ()
    lanes: tuple[tuple[str, int], ...] = ()  # outer lane axis first
    packs: tuple[str, ...] = ()
    blocks: tuple[tuple[str, int], ...] = ()
    sums: tuple[tuple[str, int, int], ...] = ()  # (integer reduction, lanes, parts)

    def __post_init__(self) -> None:
        for name in ("order", "packs"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("tiles", "lanes", "blocks"):
            value = getattr(self, name)
            if isinstance(value, dict):
                value = value.items()
            object.__setattr__(self, name, tuple((a, w) for a, w in value))
        # sums: a dict axis -> (lanes, parts), or (axis, lanes, parts) triples
        pairs = self.sums.items() if isinstance(self.sums, dict) else ((a, (w, p)) for a, w, p in self.sums)
        object.__setattr__(self, "sums", tuple((a, w, p) for a, (w, p) in pairs))

    @property
    def is_plain(self) -> bool:
        return not (self.order or self.tiles or self.lanes or self.packs or self.blocks or self.sums)

    def loop_order(self, nest: Nest) -> tuple[str, ...]:
        return self.order or tuple(a.name for a in nest.axes)

    def to_json(self) -> dict:
        out: dict = {}
        if self.order:
            out["order"] = list(self.order)
        for name in ("tiles", "lanes", "blocks"):
            if getattr(self, name):
                out[name] = dict(getattr(self, name))
        if self.packs:
            out["packs"] = list(self.packs)
        if self.sums:
            out["sums"] = {a: {"lanes": w, "parts": p} for a, w, p in self.sums}
        return out

    def text(self) -> str:
        parts = []
        if self.order:
            parts.append("order " + ", ".join(self.order))
        if self.tiles:
            parts.append("tiles " + ", ".join(f"{a}:{t}" for a, t in self.tiles))
        if self.lanes:
            parts.append("lanes " + ", ".join(f"{a}:{w}" for a, w in self.lanes))
        if self.packs:
            parts.append("packs " + ", ".join(self.packs))
        if self.blocks:
            parts.append("blocks " + ", ".join(f"{a}:{b}" for a, b in self.blocks))
        if self.sums:
            parts.append("sums " + ", ".join(f"{a}:{w} lanes x {p} parts" for a, w, p in self.sums))
        return "; ".join(parts) if parts else "plain"


# ---- what a nest offers -----------------------------------------------------------------


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _axis_rule(nest: Nest, name, field: str, what: str) -> None:
    """Refuse `name` unless it is one of the nest's parallel axes."""
    parallel = [a.name for a in nest.axes]
    if name in parallel:
        return
    for axis in nest.body_axes():
        if axis.name == name:
            if axis.kind == REDUCE:
                raise LayoutError(
                    nest.name, field,
                    f"{name} is a reduction axis; {what} apply to parallel axes only "
                    "(a reduction runs in index order, always)",
                )
            raise LayoutError(
                nest.name, field,
                f"{name} is a loop of the body; {what} apply to the nest's parallel axes "
                f"{', '.join(parallel)}",
            )
    raise LayoutError(
        nest.name, field, f"the nest has no axis {name!r}; its parallel axes are {', '.join(parallel)}"
    )


def buffer_accesses(nest: Nest, buffer: str) -> list[Access]:
    """Every access of `buffer` in the nest's body, reads and writes."""
    found = []
    for stmt in walk_statements(nest.body):
        if isinstance(stmt, CopyBits) and stmt.src.buffer == buffer:
            found.append(stmt.src)
        dst = getattr(stmt, "dst", None)
        if isinstance(dst, Access) and dst.buffer == buffer:
            found.append(dst)
        for expr in statement_exprs(stmt):
            for node in walk_expr(expr):
                if isinstance(node, Load) and node.access.buffer == buffer:
                    found.append(node.access)
    return found


def pack_accesses(nest: Nest, buffer: str) -> tuple[Access, dict[Access, dict[str, str]]] | str:
    """The access a pack of `buffer` copies (its first, in body order) and, for every
    access of it, the renaming of that first access's body loops that gives it (none for
    the first itself); or the rule they break. One pack serves several accesses when each
    is the first with body loops renamed to loops of the same extent, term by term: q4's
    two nibble loops over one byte, wq[n, 16 blk + k] and wq[n, 16 blk + kh]."""
    accesses = list(dict.fromkeys(buffer_accesses(nest, buffer)))
    first = accesses[0]
    extents = {a.name: a.extent for a in nest.body_axes()}
    renamings: dict[Access, dict[str, str]] = {first: {}}
    for other in accesses[1:]:
        mapping: dict[str, str] = {}
        same = len(other.index) == len(first.index)
        for a, b in zip(first.index, other.index):
            same = same and a.const == b.const and len(a.terms) == len(b.terms)
            for (u, cu), (v, cv) in zip(a.terms, b.terms) if same else ():
                renamed = u != v and u in extents and extents.get(v) == extents[u]
                if cu != cv or not (u == v or renamed) or mapping.get(u, v) != v:
                    same = False
                elif u != v:
                    mapping[u] = v
        if not same or len(set(mapping.values())) != len(mapping):
            return f"{buffer} is read through {len(accesses)} different indices; a pack needs one"
        renamings[other] = mapping
    return first, renamings


def pack_panel(nest: Nest, layout: Layout, buffer: str) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The panel a pack of `buffer` copies: (body loop axes, lane axes) the index of its
    first access uses (pack_accesses), each with its extent; the pack has their product
    of elements."""
    access = buffer_accesses(nest, buffer)[0]
    used = {name for entry in access.index for name in entry.variables()}
    body = [(a.name, a.extent) for a in nest.body_axes() if a.name in used]
    lanes = [(a, w) for a, w in layout.lanes if a in used]
    return body, lanes


# The packs whose panel keeps the run of its innermost body loop together, the lanes
# outside it, by nest: qlinear_i's values, a block's bytes of each of the lanes' rows one
# after another, which the x8 block kernels read as one run of memory (exactc_dot.h,
# printer/planned.py); every other pack has its lane index innermost.
RUN_PANELS = {"qlinear_i": ("wq",)}


def panel_dims(nest: Nest, layout: Layout, buffer: str, lane_names: dict[str, str]) -> list[tuple[str, int]]:
    """A pack's dimensions in memory order, last fastest: its panel's body loops, then its
    lanes (named by `lane_names`), or for a RUN_PANELS pack the lanes before the
    innermost body loop."""
    body, lanes = pack_panel(nest, layout, buffer)
    laned = [(lane_names.get(a, a), w) for a, w in lanes]
    if buffer in RUN_PANELS.get(nest.name, ()) and body:
        return body[:-1] + laned + body[-1:]
    return body + laned


def packable(nest: Nest, layout: Layout, buffer: str, buffers: dict[str, Buffer]) -> str | None:
    """None if `buffer` may be packed under `layout`, else the rule it breaks."""
    buf = buffers.get(buffer)
    if buf is None or buffer not in nest.reads():
        return f"the nest reads no buffer {buffer!r}; it reads {', '.join(nest.reads())}"
    if buf.role != "input":
        return f"{buffer} is a{'n' if buf.role == 'output' else ''} {buf.role}; only inputs are packed"
    if not layout.lanes:
        return "a pack feeds the lanes; give the layout lanes first"
    served = pack_accesses(nest, buffer)
    if isinstance(served, str):
        return served
    access = served[0]
    body_names = {a.name for a in nest.body_axes()}
    parallel = {a.name for a in nest.axes}
    used = [name for entry in access.index for name in entry.variables()]
    for name in used:
        if name not in body_names and name not in parallel:
            return f"{buffer} is indexed by the scalar {name} (a gather); only affine panels are packed"
    lane_axes = {a for a, _ in layout.lanes}
    if not lane_axes & set(used):
        return f"{buffer} does not depend on the lane axes {', '.join(sorted(lane_axes))}; nothing to gather"
    body, lanes = pack_panel(nest, layout, buffer)
    size = pack_size(body + lanes)
    if size > MAX_PACK_ELEMENTS:
        return f"the panel of {buffer} has {size} elements; a pack holds at most {MAX_PACK_ELEMENTS}"
    return None


def pack_size(panel: list[tuple[str, dims.Extent]]) -> int:
    """The elements a pack of `panel` holds: each dimension at T_max where it follows the
    run-time length (its strides are T_max's too; the copy and the reads stop at T)."""
    size = 1
    for _, extent in panel:
        size *= dims.upper(extent)
    return size


def integer_sum_rule(nest: Nest, axis: str) -> str | None:
    """None if the reduction loop `axis` is an exact integer sum, which `sums` may
    reassociate: its body only adds, to i32 accumulators, terms that read none of them
    (`s = s + term`). Else the rule it breaks."""
    loop = next((s for s in walk_statements(nest.body) if isinstance(s, Loop) and s.axis.name == axis), None)
    if loop is None or loop.axis.kind != REDUCE:
        if loop is not None:
            what = "a parallel loop of the body"
        elif axis in [a.name for a in nest.axes]:
            what = "a parallel axis"
        else:
            what = "not a loop of the nest"
        reductions = ", ".join(a.name for a in nest.reduce_axes()) or "none"
        return f"{axis} is {what}; sums apply to integer reductions (the nest's reductions: {reductions})"
    accumulators = {s.var.name for s in loop.body if isinstance(s, Assign)}
    for stmt in loop.body:
        value = getattr(stmt, "value", None)
        if not (isinstance(stmt, Assign) and stmt.var.type == "i32" and isinstance(value, Binary)
                and value.op == "+" and value.a == stmt.var):
            return (f"{axis} is not an integer sum (its body does more than s = s + term into int32 "
                    "accumulators); a floating-point reduction runs in index order, always")
        if any(isinstance(node, Var) and node.name in accumulators for node in walk_expr(value.b)):
            return f"{axis}: a term of the sum reads an accumulator, so its order matters"
    return None


# ---- validation ----------------------------------------------------------------------


def validate_layout(nest: Nest, layout: Layout, buffers: Iterable[Buffer]) -> None:
    """Raise LayoutError unless `layout` is legal for `nest`."""
    buffers = {b.name: b for b in buffers}
    name = nest.name
    parallel = [a.name for a in nest.axes]
    if layout.order:
        for item in layout.order:
            _axis_rule(nest, item, f"layout.order.{item}", "orders")
        if sorted(layout.order) != sorted(parallel):
            raise LayoutError(
                name, "layout.order",
                f"{list(layout.order)} is not an order of the parallel axes {', '.join(parallel)} "
                "(each exactly once)",
            )
    for axis, size in layout.tiles:
        _axis_rule(nest, axis, f"layout.tiles.{axis}", "tiles")
        if not _is_int(size) or size < 1:
            raise LayoutError(name, f"layout.tiles.{axis}", f"tile size {size!r} must be an integer >= 1")
    if len({a for a, _ in layout.tiles}) != len(layout.tiles):
        raise LayoutError(name, "layout.tiles", "an axis is tiled twice")
    if len(layout.lanes) > MAX_LANE_AXES:
        raise LayoutError(name, "layout.lanes", f"{len(layout.lanes)} lane axes; at most {MAX_LANE_AXES}")
    for axis, width in layout.lanes:
        _axis_rule(nest, axis, f"layout.lanes.{axis}", "lanes")
        if not _is_int(width) or (width not in LANE_WIDTHS and
                                  (len(layout.lanes) > 1 or width not in WIDE_LANE_WIDTHS)):
            raise LayoutError(name, f"layout.lanes.{axis}", f"lane width {width!r} must be an integer in 2..16, "
                              f"or one of {', '.join(map(str, WIDE_LANE_WIDTHS))} on a nest's only lane axis")
    if len({a for a, _ in layout.lanes}) != len(layout.lanes):
        raise LayoutError(name, "layout.lanes", "an axis has lanes twice")
    for buffer in layout.packs:
        rule = packable(nest, layout, buffer, buffers)
        if rule:
            raise LayoutError(name, f"layout.packs.{buffer}", rule)
    if len(set(layout.packs)) != len(layout.packs):
        raise LayoutError(name, "layout.packs", "a buffer is packed twice")
    reduce_names = [a.name for a in nest.reduce_axes()]
    for axis, size in layout.blocks:
        field = f"layout.blocks.{axis}"
        if axis not in reduce_names:
            if axis in parallel or axis in [a.name for a in nest.body_axes()]:
                raise LayoutError(
                    name, field, f"{axis} is a parallel axis; blocks apply to reductions (tile a parallel axis)"
                )
            raise LayoutError(
                name, field,
                f"the nest has no reduction {axis!r}; its reductions are {', '.join(reduce_names) or 'none'}",
            )
        if not _is_int(size) or size < 1:
            raise LayoutError(name, field, f"block size {size!r} must be an integer >= 1")
    if len({a for a, _ in layout.blocks}) != len(layout.blocks):
        raise LayoutError(name, "layout.blocks", "a reduction is blocked twice")
    for axis, lanes, parts in layout.sums:
        field = f"layout.sums.{axis}"
        rule = integer_sum_rule(nest, axis)
        if rule:
            raise LayoutError(name, field, rule)
        if not _is_int(lanes) or lanes not in SUM_LANES:
            raise LayoutError(name, field, f"lanes {lanes!r} must be an integer in 1..{SUM_LANES.stop - 1}")
        if not _is_int(parts) or parts not in SUM_PARTS:
            raise LayoutError(name, field, f"parts {parts!r} must be an integer in 1..{SUM_PARTS.stop - 1}")
        if layout.lanes:
            raise LayoutError(name, field, "sums and lanes on parallel axes do not combine; give one or the other")
        if axis in dict(layout.blocks):
            raise LayoutError(name, field, f"{axis} is blocked too; a loop is blocked or summed, not both")
    if len({a for a, _, _ in layout.sums}) != len(layout.sums):
        raise LayoutError(name, "layout.sums", "a reduction is summed twice")


# ---- names the printed layout introduces -------------------------------------------------


def nest_names(nest: Nest, buffers: Iterable[Buffer]) -> set[str]:
    """Every name a nest's C function already uses: axes, scalars, buffers."""
    names = {a.name for a in nest.axes} | {a.name for a in nest.body_axes()}
    names |= {b.name for b in buffers}
    for stmt in walk_statements(nest.body):
        var = getattr(stmt, "var", None)
        if isinstance(var, Var):
            names.add(var.name)
    return names


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or `base2`, `base3`, ... : the first not in `taken` (which it joins)."""
    candidate, n = base, 1
    while candidate in taken or candidate in ("lo", "hi"):
        n += 1
        candidate = f"{base}{n}"
    taken.add(candidate)
    return candidate
