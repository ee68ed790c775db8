"""Weights packed once, when the program loads them, instead of at every call.

A linear kernel laid out with its output columns in lanes of W and w's panel packed
(printer/planned.py, `pack`) copies, for every chunk of W columns, those W rows of w into
a local panel, k-major with the lane index innermost, at every call: in a decode step
(one row) that copy is nearly all of the kernel's time, a gather of W rows per k. When w
is a parameter the panel never changes, so the program lays the parameter out as its
panels once, in map_weights (exactc_pack_panels, runtime/exactc_host.c), and the kernel
reads each chunk's panel where it lies. Every value and every operation is the one the
copy gave the kernel, in the same order: only where a weight element sits in memory
changes, so the bits stay.

A packed parameter (each layer of a stacked one), of N rows and K columns in lanes of W:
the first N - N mod W rows as N div W panels, element (c W + j, k) of panel c at
c W K + k W + j; the last N mod W rows where they were.

The same holds for the weight-only quantized linear (qlinear_w): its values wq (q8: an
int8 a value; q4: a byte of two, which its low- and high-nibble loops read through one
pack, layouts.pack_accesses) and its scales wd (f32, one per row and block) are read by
rows of n in lanes of W, block by block, so each is laid out as its panels the same way
(N rows of K bytes, K / 2 for q4, or of K / G scales).

The integer-form quantized linear (qlinear_i) reads its values wq and scales wd the
same way where n is in lanes of 8 in whole blocks of 32 (autoplan.BLOCK_KERNEL_LAYOUTS),
but its x8 block kernel wants a block's 8 rows each in one piece: its values' panels
keep the run of their innermost body loop together (layouts.RUN_PANELS; a block's 32
bytes for q8, 16 for q4), the lanes outside it, so chunk c's block b is the 8 rows'
bytes of the block one after another (PackedParameter.run;
exactc_pack_block_panels). Its scales are the plain panels.

A kernel reads an operand packed (`ahead`) when
- the operand is linear's w, or qlinear_w's or qlinear_i's wq or wd, with n in lanes of W; its panel is
  (the body loops that index its row) x (n's lanes), and those loops, in order, walk
  the row's columns one after another (w[n, k]; wq[n, G blk + k], q4's wq[n, G/2 blk + k];
  wd[n, blk]), so that
  the panel of chunk c is c W times the row's length into the layout; n is not tiled,
  and every piece of the nest's thread split starts at a multiple of W;
- every launch passes a parameter, or a layer of a stacked one, of the operand's shape;
and a parameter is packed when every kernel operand it reaches is such an operand, of
one W. Anything else (a tied head that is also the embedding table, a weight that is
not a parameter) keeps the copy at every call.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from exactc.exporter.graph import Program, parameter_reach
from exactc.exporter.launches import kernel_key
from exactc.exporter.kernels.ir import Affine, Kernel
from exactc.exporter.kernels.layouts import RUN_PANELS, Layout, pack_accesses, pack_panel


@dataclasses.dataclass(frozen=True)
class PackedParameter:
    """A parameter laid out as panels at load: `layers` (1: not stacked) of rows x cols."""

    layers: int
    rows: int
    cols: int
    lanes: int
    run: int = 1  # the columns kept together in a panel (layouts.RUN_PANELS), lanes outside them


# The operands a kernel may read as panels laid out at load, by primitive.
PANEL_OPERANDS = {"linear": ("w",), "qlinear_w": ("wq", "wd"), "qlinear_i": ("wq", "wd")}


def parameter_uses(program: Program) -> tuple[dict[str, set[tuple[Any, str]]], dict[tuple[Any, str], list[str | None]]]:
    """Which kernel operands each parameter reaches (by kernel_key and operand name), and
    for each kernel operand that can be read as panels the parameter each launch passes
    as it (None: not one)."""
    uses: dict[str, set[tuple[Any, str]]] = {spec.name: set() for spec in program.params}
    passed: dict[tuple[Any, str], list[str | None]] = {}
    for op, params in parameter_reach(program):
        key = kernel_key(op)
        for operand, name in params.items():
            if name is not None:
                uses[name].add((key, operand))
        for operand in PANEL_OPERANDS.get(op.primitive, ()):
            passed.setdefault((key, operand), []).append(params[operand])
    return uses, passed


def _walks_its_rows(nest, layout, kernel: Kernel, operand: str, width: int) -> bool:
    """The pack of `operand` is (body loops) x (n in lanes of `width`), the operand is
    indexed [n, c] and the body loops, in order, give c = 0, 1, ... to the row's end."""
    body, lane_dims = pack_panel(nest, layout, operand)
    if lane_dims != [("n", width)] or any(not isinstance(extent, int) for _, extent in body):
        return False
    served = pack_accesses(nest, operand)
    if isinstance(served, str):
        return False
    access = served[0]
    if len(access.index) != 2 or access.index[0] != Affine.var("n"):
        return False
    strides, stride = {}, 1
    for axis, extent in reversed(body):
        strides[axis] = stride
        stride *= extent
    column = access.index[1]
    return column.const == 0 and dict(column.terms) == strides and stride == kernel.buffer(operand).shape[-1]


def panel_widths(kernel: Kernel, plan: Any) -> dict[str, int]:
    """The operands `kernel` under `plan` reads chunk by chunk as panels laid out at load,
    each with its lane count W (none: {})."""
    if kernel.primitive not in PANEL_OPERANDS or plan is None or len(kernel.nests) != 1:
        return {}
    nest = kernel.nests[0]
    nest_plan = plan.for_nest(nest.name)
    if nest_plan is None:
        return {}
    layout, split = nest_plan.layout, nest_plan.split
    width = dict(layout.lanes).get("n")
    if width is None or "n" in dict(layout.tiles):
        return {}
    if split is not None:
        order = layout.loop_order(nest)
        if split.of or order[split.depth] != "n" or any(lo % width for lo, _ in split.pieces):
            return {}
    return {operand: width for operand in PANEL_OPERANDS[kernel.primitive]
            if operand in layout.packs and _walks_its_rows(nest, layout, kernel, operand, width)}


def panel_run(kernel: Kernel, operand: str) -> int:
    """The columns a panel of `operand` keeps together (1: the lane index innermost): a
    RUN_PANELS operand's innermost body loop, which walks its row's columns one by one."""
    nest = kernel.nests[0]
    if operand not in RUN_PANELS.get(nest.name, ()):
        return 1
    body, _ = pack_panel(nest, Layout(), operand)
    return int(body[-1][1])


def packed_ahead(program: Program, kernels: dict[Any, tuple[Kernel, Any]]
                 ) -> tuple[dict[Any, frozenset[str]], dict[str, PackedParameter]]:
    """The operands each kernel (by kernel_key) reads as panels laid out at load, and the
    parameters laid out so. `kernels` maps each kernel_key to its kernel and its plan
    (None: plain)."""
    width = {(key, operand): (w, panel_run(kernel, operand)) for key, (kernel, plan) in kernels.items()
             for operand, w in panel_widths(kernel, plan).items()}
    if not width:  # no kernel could: no walk over the program's ops
        return {}, {}
    uses, passed = parameter_uses(program)
    specs = {spec.name: spec for spec in program.params}
    shape = {(key, operand): kernels[key][0].buffer(operand).shape for key, operand in width}
    ahead = {read for read in width if all(passed.get(read, [None]))}
    while True:
        packed = {}
        for name, used in uses.items():
            if (not used or any(read not in ahead for read in used)
                    or len({width[read] for read in used}) != 1
                    or any(tuple(specs[name].shape) != tuple(shape[read]) for read in used)):
                continue
            rows, cols = specs[name].shape
            packed[name] = PackedParameter(max(specs[name].layers, 1), rows, cols, *width[next(iter(used))])
        keep = {read for read in ahead if all(p in packed for p in passed[read])}
        if keep == ahead:
            reads: dict[Any, set[str]] = {}
            for key, operand in ahead:
                reads.setdefault(key, set()).add(operand)
            return {key: frozenset(operands) for key, operands in reads.items()}, packed
        ahead = keep
