"""Thread splits (exporter/kernels/splits.py): their text and JSON, the pieces between cuts,
the axis a depth names, and the refusals of an illegal split."""

from __future__ import annotations

import numpy as np
import pytest

from exactc.exporter import dims
from exactc.exporter.kernels import splits
from exactc.exporter.kernels.layouts import Layout, LayoutError
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.plans import NestPlan, Plan, validate_plan
from exactc.exporter.kernels.splits import MAX_PIECES, Split

from test_layouts import LINEAR, validate

# ---- thread splits


SPLIT_LINEAR = lower("linear", "f32", {"x": (5, 7), "w": (19, 7)}, {})  # loops m, n

SPLIT_OVER_T = lower("add", "f32", {"a": (dims.length(8), 4), "b": (dims.length(8), 4)}, {})


def split_refusal(kernel, split) -> str | None:
    try:
        validate_plan(kernel, Plan(((kernel.nests[0].name, NestPlan(Layout(), split)),)))
    except LayoutError as e:
        return str(e)
    return None


def test_split_text_json_and_pieces():
    split = splits.Split(1, [[0, np.int64(2)], (2, 5)])
    assert split.pieces == ((0, 2), (2, 5)) and all(type(v) is int for p in split.pieces for v in p)
    assert split.text() == "depth 1: [0,2) [2,5)"
    assert split.to_json() == {"depth": 1, "pieces": [[0, 2], [2, 5]]}
    parts = splits.Split(0, ((0, 3), (3, 8)), of=8)
    assert parts.text() == "depth 0: [0,3) [3,8) (parts of 8, scaled to the run-time extent)"
    assert parts.to_json() == {"depth": 0, "pieces": [[0, 3], [3, 8]], "of": 8}
    assert splits.split_pieces(10, [7, 3, 3]) == ((0, 3), (3, 3), (3, 7), (7, 10))
    assert splits.split_pieces(4, []) == ((0, 4),)
    assert splits.split_axis(SPLIT_LINEAR.nests[0], Layout(), splits.Split(1, ((0, 19),))) == "n"


@pytest.mark.parametrize("depth", [2, True, -1])
def test_split_depth_refused_past_the_last_loop_and_as_a_bool(depth):
    assert split_refusal(SPLIT_LINEAR, splits.Split(depth, ((0, 5),))) == (
        f"plan: nest linear, field split.depth: depth {depth!r} must be an integer in 0..1 (the loops m, n)")


def test_split_pieces_up_to_the_limit_and_overlaps_by_their_span():
    assert split_refusal(SPLIT_LINEAR, splits.Split(0, ((0, 5),) + ((5, 5),) * (splits.MAX_PIECES - 1))) is None
    assert split_refusal(SPLIT_LINEAR, splits.Split(0, ((0, 3), (2, 5)))) == (
        "plan: nest linear, field split.pieces: pieces overlap on [2,3); the pieces must cover m in [0,5) "
        "exactly once")
    assert split_refusal(SPLIT_OVER_T, splits.Split(0, ((0, 1), (0, 2)), of=2)) == (
        "plan: nest add, field split.pieces: pieces overlap on [0,1); the pieces must cover i in [0,2) "
        "exactly once (parts of `of`)")


T8 = dims.length(8)


ADD_OVER_T = lower("add", "f32", {"a": (T8, 4), "b": (T8, 4)}, {})


# (kernel, split, the whole message)
SPLITS = [
    pytest.param(LINEAR, Split(0, ()), f"plan: nest linear, field split.pieces: 0 pieces; give 1 to {MAX_PIECES}",
                 id="no-pieces"),
    pytest.param(LINEAR, Split(0, ((0, 5),) + ((5, 5),) * MAX_PIECES),
                 f"plan: nest linear, field split.pieces: {MAX_PIECES + 1} pieces; give 1 to {MAX_PIECES}",
                 id="too-many-pieces"),
    pytest.param(LINEAR, Split(0, ((0, 5),), of=-1),
                 "plan: nest linear, field split.of: -1 must be an integer >= 1 (or absent)", id="of-negative"),
    pytest.param(LINEAR, Split(0, ((0, 5),), of=True),
                 "plan: nest linear, field split.of: True must be an integer >= 1 (or absent)", id="of-bool"),
    pytest.param(ADD_OVER_T, Split(0, ((0, 5),)),
                 "plan: nest add, field split.of: i runs over [0, 4 * T), which follows the run-time length: give "
                 "the pieces as parts of `of` (they are scaled to the extent when the program runs)",
                 id="run-time-axis-without-of"),
    pytest.param(ADD_OVER_T, Split(0, ((0, 1),), of=2),
                 "plan: nest add, field split.pieces: pieces leave a gap [1,2); the pieces must cover i in [0,2) "
                 "exactly once (parts of `of`)", id="parts-of-of-with-a-gap"),
]


@pytest.mark.parametrize("kernel, split, message", SPLITS)
def test_an_illegal_split_is_refused_by_nest_field_and_rule(kernel, split, message):
    with pytest.raises(LayoutError) as caught:
        validate(kernel, split=split)
    assert str(caught.value) == message


def test_a_run_time_axis_is_split_in_parts_of_of():
    validate(ADD_OVER_T, split=Split(0, ((0, 1), (1, 1), (1, 2)), of=2))
