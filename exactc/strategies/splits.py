"""Strategies for thread splits: a depth, 1 to 8 pieces, cut points uneven, repeated
(empty pieces) and at the ends. Only valid splits: gapless and non-overlapping. An axis
that follows the run-time length is cut in parts of a drawn `of` (1 to 8)."""

from __future__ import annotations

from hypothesis import strategies as st

from exactc.exporter import dims

from exactc.exporter.kernels.ir import Nest
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.splits import Split, split_pieces


@st.composite
def splits(draw, nest: Nest, layout: Layout = Layout(), max_pieces: int = 8) -> Split:
    """A valid split of `nest` under `layout`: the loop at a drawn depth of the layout's
    order cut into 1..max_pieces pieces; shrinks to one piece at depth 0."""
    order = layout.loop_order(nest)
    depth = draw(st.integers(0, len(order) - 1))
    extent = {a.name: a.extent for a in nest.axes}[order[depth]]
    count = draw(st.integers(1, max_pieces))
    of = draw(st.integers(1, 8)) if dims.is_symbolic(extent) else 0  # run-time: parts of `of`
    whole = of or extent
    cut = st.one_of(st.integers(0, whole), st.sampled_from([0, whole, whole // 2]))
    cuts = sorted(draw(cut) for _ in range(count - 1))
    return Split(depth, split_pieces(whole, cuts), of)
