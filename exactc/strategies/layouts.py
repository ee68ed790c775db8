"""Strategies for layouts and plans: every legal layout of a nest is reachable, and small
ones are favoured (each feature shrinks to off, sizes shrink towards 1)."""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from exactc.exporter import dims

from exactc.exporter.kernels.ir import Kernel, Nest
from exactc.exporter.kernels.layouts import (LANE_WIDTHS, MAX_LANE_AXES, WIDE_LANE_WIDTHS, Layout, LayoutError,
                                             integer_sum_rule, packable)
from exactc.exporter.kernels.plans import NestPlan, Plan, validate_plan
from exactc.strategies.cases import Case


def _size(extent) -> st.SearchStrategy[int]:
    """A tile or block size: small ones, the extent's neighbours, or any up to past it
    (an extent that follows the run-time length: its T_max's)."""
    extent = dims.upper(extent)
    return st.one_of(st.integers(1, 4), st.sampled_from([extent - 1 or 1, extent, extent + 1]),
                     st.integers(1, extent + 2))


@st.composite
def layouts(draw, nest: Nest, buffers) -> Layout:
    """A legal layout of `nest`: an order, tiles, up to two lane axes of width 2..16 (a
    single one also of WIDE_LANE_WIDTHS), packs of the buffers the lanes may gather,
    reduction blocks, and (without lanes) integer sums in lanes and parts; each
    optional."""
    names = [a.name for a in nest.axes]
    extents = {a.name: a.extent for a in nest.axes}
    order = tuple(draw(st.permutations(names))) if len(names) > 1 and draw(st.booleans()) else ()
    tiles = tuple((a, draw(_size(extents[a]))) for a in names if draw(st.booleans()))
    lanes: tuple[tuple[str, int], ...] = ()
    if draw(st.booleans()):
        count = draw(st.integers(1, min(MAX_LANE_AXES, len(names))))
        axes = draw(st.permutations(names))[:count]
        widths = st.one_of(st.sampled_from([2, 4, 8, 16]), st.integers(LANE_WIDTHS.start, LANE_WIDTHS.stop - 1))
        if count == 1:  # an only lane axis may also be wide
            widths = st.one_of(widths, st.sampled_from(WIDE_LANE_WIDTHS))
        lanes = tuple((a, draw(widths)) for a in axes)
    packs: tuple[str, ...] = ()
    if lanes:
        candidate = Layout(order, tiles, lanes)
        by_name = {b.name: b for b in buffers}
        able = [b for b in nest.reads() if packable(nest, candidate, b, by_name) is None]
        packs = tuple(b for b in able if draw(st.booleans()))
    sums: tuple[tuple[str, int, int], ...] = ()
    if not lanes:
        integer = [a for a in nest.reduce_axes() if integer_sum_rule(nest, a.name) is None]
        sums = tuple((a.name, draw(st.sampled_from([1, 2, 3, 4, 8, 16, 32])), draw(st.integers(1, 4)))
                     for a in integer if draw(st.booleans()))
    summed = {a for a, _, _ in sums}
    blocks = tuple((a.name, draw(_size(a.extent))) for a in nest.reduce_axes()
                   if a.name not in summed and draw(st.booleans()))
    return Layout(order, tiles, lanes, packs, blocks, sums)


@st.composite
def plans(draw, kernel: Kernel, with_splits: bool = True) -> Plan:
    """A legal plan of `kernel`: each nest a drawn layout and, four times in five (unless
    `with_splits` is False), a split (exactc.strategies.splits)."""
    from exactc.strategies.splits import splits

    items = []
    for nest in kernel.nests:
        layout = draw(layouts(nest, kernel.buffers))
        split = draw(splits(nest, layout)) if with_splits and draw(st.integers(0, 4)) > 0 else None
        items.append((nest.name, NestPlan(layout, split, draw(variant_layouts(kernel, nest, layout, split)),
                                          draw(variant_layouts(kernel, nest, layout, split)))))
    return Plan(tuple(items))


@st.composite
def variant_layouts(draw, kernel: Kernel, nest: Nest, layout: Layout, split) -> Layout | None:
    """Half the time, for a layout with two lane axes, a narrow or wide layout (the C
    prints it under EXACTC_NARROW_LANES or EXACTC_WIDE_LANES): the outer lane drawn
    anew, where the nest takes it."""
    if len(layout.lanes) < 2 or not draw(st.booleans()):
        return None
    (outer, _), inner = layout.lanes[0], layout.lanes[1:]
    width = draw(st.one_of(st.sampled_from([2, 4, 16]), st.integers(LANE_WIDTHS.start, LANE_WIDTHS.stop - 1)))
    variant = dataclasses.replace(layout, lanes=((outer, width), *inner))
    try:
        validate_plan(kernel, Plan(((nest.name, NestPlan(layout, split, variant)),)))
    except LayoutError:
        return None
    return variant


@st.composite
def planned_cases(draw, case_strategy) -> tuple[Case, Plan]:
    """A primitive case and a legal plan for its kernel."""
    from exactc.exporter.kernels import lower

    case = draw(case_strategy)
    kernel = lower(case.primitive, case.site, case.kernel_shapes, case.attr_dict, case.contract)
    return case, draw(plans(kernel))
