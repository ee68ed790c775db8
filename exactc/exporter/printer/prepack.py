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

A kernel reads its w packed (`ahead`) when
- its nest is linear with n in lanes of W, w's panel is exactly (k) x (n's lanes), n is
  not tiled and every piece of its thread split starts at a multiple of W: every chunk
  of n starts at a multiple of W, so chunk c is panel c, and a chunk that is not full
  holds rows of the last N mod W only, which the remainder reads in place;
- every launch passes a parameter, or a layer of a stacked one, of the shape (N, K);
and a parameter is packed when every kernel operand it reaches is such a w, of one W.
Anything else (a tied head that is also the embedding table, a weight that is not a
parameter) keeps the copy at every call.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from exactc.exporter.graph import Program, parameter_reach
from exactc.exporter.kernels.ir import Kernel
from exactc.exporter.kernels.layouts import pack_panel


@dataclasses.dataclass(frozen=True)
class PackedParameter:
    """A parameter laid out as panels at load: `layers` (1: not stacked) of rows x cols."""

    layers: int
    rows: int
    cols: int
    lanes: int


def parameter_uses(program: Program) -> tuple[dict[str, set[tuple[Any, str]]], dict[Any, list[str | None]]]:
    """Which kernel operands each parameter reaches (by kernel_key and operand name), and
    for each linear kernel the parameter each launch passes as `w` (None: not one)."""
    from exactc.exporter.printer.kernel_table import kernel_key

    uses: dict[str, set[tuple[Any, str]]] = {spec.name: set() for spec in program.params}
    weights: dict[Any, list[str | None]] = {}
    for op, params in parameter_reach(program):
        key = kernel_key(op)
        for operand, name in params.items():
            if name is not None:
                uses[name].add((key, operand))
        if op.primitive == "linear":
            weights.setdefault(key, []).append(params["w"])
    return uses, weights


def reads_w_in_panels(kernel: Kernel, plan: Any) -> int | None:
    """W, if `kernel` (a linear) under `plan` reads w chunk by chunk as (k) x (n in lanes
    of W) panels whose chunks all start at multiples of W; else None."""
    if kernel.primitive != "linear" or plan is None or len(kernel.nests) != 1:
        return None
    nest = kernel.nests[0]
    nest_plan = plan.for_nest(nest.name)
    if nest_plan is None or "w" not in nest_plan.layout.packs:
        return None
    layout, split = nest_plan.layout, nest_plan.split
    lanes = dict(layout.lanes)
    width = lanes.get("n")
    if width is None or "n" in dict(layout.tiles):
        return None
    body, lane_dims = pack_panel(nest, layout, "w")
    if [a for a, _ in body] != ["k"] or lane_dims != [("n", width)]:
        return None
    if split is not None:
        order = layout.loop_order(nest)
        if split.of or order[split.depth] != "n" or any(lo % width for lo, _ in split.pieces):
            return None
    return width


def packed_ahead(program: Program, kernels: dict[Any, tuple[Kernel, Any]]) -> tuple[set[Any], dict[str, PackedParameter]]:
    """The kernels (by kernel_key) that read w packed at load, and the parameters packed
    at load. `kernels` maps each kernel_key to its kernel and its plan (None: plain)."""
    width = {key: reads_w_in_panels(kernel, plan) for key, (kernel, plan) in kernels.items()}
    if all(w is None for w in width.values()):  # no kernel could: no walk over the program's ops
        return set(), {}
    uses, weights = parameter_uses(program)
    specs = {spec.name: spec for spec in program.params}
    shape = {key: next(b.shape for b in kernel.buffers if b.name == "w") for key, (kernel, _) in kernels.items()
             if kernel.primitive == "linear"}
    ahead = {key for key, w in width.items() if w is not None and all(weights.get(key, [None]))}
    while True:
        packed = {}
        for name, used in uses.items():
            keys = {key for key, _ in used}
            if (not used or any(operand != "w" or key not in ahead for key, operand in used)
                    or len({width[k] for k in keys}) != 1
                    or any(tuple(specs[name].shape) != tuple(shape[k]) for k in keys)):
                continue
            rows, cols = specs[name].shape
            packed[name] = PackedParameter(max(specs[name].layers, 1), rows, cols, width[next(iter(keys))])
        keep = {key for key in ahead if all(p in packed for p in weights[key])}
        if keep == ahead:
            return ahead, packed
        ahead = keep
