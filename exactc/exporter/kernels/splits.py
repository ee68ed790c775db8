"""Thread splits: one parallel loop of a launch divided into pieces [lo, hi).

A Split names the loop by its depth in the layout's loop order (0 = outermost) and
lists the pieces. The printer gives the nest function a (lo, hi) range on that axis
and prints a driver, `<function>_split(args...)`, that calls it once per piece
from an OpenMP team capped at omp_get_max_threads() (so OMP_NUM_THREADS=1 runs it on
one thread), or one piece after another when built without OpenMP. Pieces write
disjoint elements, so any legal split gives the same bits (docs/design.md, principle 2).

A legal split covers its axis exactly once: sorted, gapless, non-overlapping pieces
from 0 to the extent (empty pieces allowed). An axis whose extent follows the run-time
length (dims.Dim) is split in parts: with `of` = N the pieces cover [0, N) and piece
[a, b) runs [E * a / N, E * b / N) of the run-time extent E, computed when the driver
runs (floor division is monotone, so those pieces cover [0, E) exactly once too). `validate_split` refuses anything else
before printing; the checking build (-DEXACTC_CHECK_SPLITS) verifies the same in C at
every launch, which is what catches an overlap (it changes no output).
"""

from __future__ import annotations

import dataclasses

from exactc.exporter import dims
from exactc.exporter.kernels.ir import Nest
from exactc.exporter.kernels.layouts import Layout, LayoutError

MAX_PIECES = 4096


@dataclasses.dataclass(frozen=True)
class Split:
    """The pieces of the loop at `depth` of the layout's order."""

    depth: int
    pieces: tuple[tuple[int, int], ...]
    of: int = 0  # > 0: the pieces are parts of `of`, scaled to the run-time extent

    def __post_init__(self) -> None:
        object.__setattr__(self, "pieces", tuple((int(lo), int(hi)) for lo, hi in self.pieces))

    def to_json(self) -> dict:
        out = {"depth": self.depth, "pieces": [list(p) for p in self.pieces]}
        if self.of:
            out["of"] = self.of
        return out

    def text(self) -> str:
        parts = f" (parts of {self.of}, scaled to the run-time extent)" if self.of else ""
        return f"depth {self.depth}: " + " ".join(f"[{lo},{hi})" for lo, hi in self.pieces) + parts


def split_pieces(extent: int, cuts: list[int]) -> tuple[tuple[int, int], ...]:
    """The pieces between sorted cut points in [0, extent]: gapless, non-overlapping;
    repeated cuts give empty pieces."""
    points = [0, *sorted(cuts), extent]
    return tuple((points[i], points[i + 1]) for i in range(len(points) - 1))


def split_axis(nest: Nest, layout: Layout, split: Split) -> str:
    """The axis a split divides: the one at its depth of the layout's order."""
    return layout.loop_order(nest)[split.depth]


def coverage_problem(extent: int, pieces) -> str | None:
    """None when `pieces` cover [0, extent) exactly once, else what is wrong."""
    for lo, hi in pieces:
        if not (0 <= lo <= hi <= extent):
            return f"piece [{lo},{hi}) is not within [0,{extent}] with lo <= hi"
    ordered = sorted(pieces)
    position = 0
    for lo, hi in ordered:
        if lo == hi:
            continue
        if lo < position:
            return f"pieces overlap on [{lo},{min(hi, position)})"
        if lo > position:
            return f"pieces leave a gap [{position},{lo})"
        position = hi
    if position != extent:
        return f"pieces leave a gap [{position},{extent})"
    return None


def validate_split(nest: Nest, layout: Layout, split: Split) -> None:
    """Raise LayoutError unless `split` is a legal split of `nest` under `layout`."""
    axes = layout.loop_order(nest)
    depth = split.depth
    if not isinstance(depth, int) or isinstance(depth, bool) or not 0 <= depth < len(axes):
        raise LayoutError(
            nest.name, "split.depth",
            f"depth {depth!r} must be an integer in 0..{len(axes) - 1} (the loops {', '.join(axes)})",
        )
    if not 1 <= len(split.pieces) <= MAX_PIECES:
        raise LayoutError(nest.name, "split.pieces", f"{len(split.pieces)} pieces; give 1 to {MAX_PIECES}")
    extent = {a.name: a.extent for a in nest.axes}[axes[depth]]
    if not isinstance(split.of, int) or isinstance(split.of, bool) or split.of < 0:
        raise LayoutError(nest.name, "split.of", f"{split.of!r} must be an integer >= 1 (or absent)")
    if dims.is_symbolic(extent) and not split.of:
        raise LayoutError(
            nest.name, "split.of",
            f"{axes[depth]} runs over [0, {extent}), which follows the run-time length: give the pieces "
            "as parts of `of` (they are scaled to the extent when the program runs)",
        )
    whole = split.of or extent
    problem = coverage_problem(whole, split.pieces)
    if problem:
        raise LayoutError(
            nest.name, "split.pieces",
            f"{problem}; the pieces must cover {axes[depth]} in [0,{whole}) exactly once"
            + (" (parts of `of`)" if split.of else ""),
        )
