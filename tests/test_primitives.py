"""Every primitive x {f64, f32, bf16}: the printed C kernel equals the reference bit for
bit, with NaN-poisoned red zones around every buffer (docs/design.md, principles 1 and 6)."""

import os
import re

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exactc.exporter import dims, reference
from exactc.exporter.kernels import lower
from exactc.exporter.primitives import (
    BACKWARD_PRIMITIVES,
    CONTRACT_FMA,
    CONTRACT_OFF,
    FUSED_PRIMITIVES,
    PRIMITIVES,
    PrimitiveError,
    get_primitive,
)
from exactc.exporter.types import SITE_TYPES
from exactc.strategies.cases import Case, case_batches, cases, fused_cases
from exactc.strategies.quant import ArraySpec
from exactc.verify.kernels import assert_all_equal, run_cases

# Cases compiled together per example: more in the campaign, where a compiler call's
# fixed cost is shared by more cases.
BATCH = 8 if os.environ.get("HYPOTHESIS_PROFILE") == "campaign" else 4


@pytest.mark.parametrize("primitive, site", [(p, s) for p in sorted(PRIMITIVES) for s in PRIMITIVES[p].sites])
def test_c_equals_reference(primitive, site):
    @given(batch=case_batches(primitive, site, max_size=BATCH))
    def check(batch):
        assert_all_equal(run_cases(batch))

    check()


@given(batch=case_batches(max_size=8))
def test_mixed_batches(batch):
    """Kernels of different primitives and types compiled in one library."""
    assert_all_equal(run_cases(batch))


# ---- the fused realization (docs/semantics.md section 18)


@pytest.mark.parametrize("site", SITE_TYPES)
@pytest.mark.parametrize("primitive", FUSED_PRIMITIVES)
def test_fused_c_equals_reference(primitive, site):
    """The fused kernels (fma/fmaf written in the C) give the reference's fma_A bits."""

    @given(batch=st.lists(fused_cases(primitive, site), min_size=1, max_size=BATCH))
    def check(batch):
        assert_all_equal(run_cases(batch))

    check()


# fmaf(2^-24·(1 + 2^-23), 1 - 2^-23, -(1 + 2^-23)) of semantics.md section 18, as a
# linear's second step after acc = -(1 + 2^-23): fused, the exact sum just past the tie
# rounds to -(1 + 2^-23); by default the product rounds to 2^-24 and the sum, now a tie,
# to even, -1.
NEAR_TIE_X = ((-(1 + 2**-23), 2**-24 * (1 + 2**-23)),)
NEAR_TIE_W = ((1.0, 1 - 2**-23),)


def _near_tie_linear(contract: str) -> Case:
    specs = (("x", ArraySpec(NEAR_TIE_X, "f32")), ("w", ArraySpec(NEAR_TIE_W, "f32")))
    return Case("linear", "f32", (("has_b", False),), specs, contract=contract)


def test_fused_linear_rounds_once_where_the_default_rounds_twice():
    cases = [_near_tie_linear(CONTRACT_OFF), _near_tie_linear(CONTRACT_FMA)]
    assert_all_equal(run_cases(cases))
    default, fused = (reference.run("linear", "f32", c.inputs(), c.attr_dict, c.contract)["y"] for c in cases)
    assert default[0, 0] == np.float32(-1.0)
    assert fused[0, 0] == -(np.float32(1) + np.float32(2**-23))


@given(case=fused_cases())
def test_the_realizations_are_two_kernels_and_only_the_fused_primitives_differ(case):
    """A fused kernel calls fma where the default one multiplies and adds, and a batch
    holding both compiles each and gives each its own reference's bits."""
    default = dataclasses.replace(case, contract=CONTRACT_OFF)
    fused_text = lower(case.primitive, case.site, case.kernel_shapes, case.attr_dict, CONTRACT_FMA).text()
    default_text = lower(case.primitive, case.site, case.kernel_shapes, case.attr_dict).text()
    assert "fma(" in fused_text and "fma(" not in default_text
    assert_all_equal(run_cases([default, case]))


@pytest.mark.parametrize("primitive", sorted(set(PRIMITIVES) - set(FUSED_PRIMITIVES)))
def test_the_fused_realization_leaves_every_other_primitive_as_it_is(primitive):
    @given(case=cases(primitive))
    def check(case):
        shapes, attrs = case.kernel_shapes, case.attr_dict
        fused = lower(case.primitive, case.site, shapes, attrs, CONTRACT_FMA)
        assert fused == lower(case.primitive, case.site, shapes, attrs)
        inputs = case.inputs()
        for name, y in reference.run(primitive, case.site, inputs, attrs, CONTRACT_FMA).items():
            expected = reference.run(primitive, case.site, inputs, attrs)[name]
            assert y.tobytes() == expected.tobytes()

    check()


def test_an_unknown_realization_is_refused_by_name():
    with pytest.raises(PrimitiveError, match="unknown realization --contract 'fast'; exactc knows off, fma"):
        lower("linear", "f32", {"x": (2, 3), "w": (4, 3)}, {}, "fast")


# ---- the catalogue's shape rules


T8 = dims.length(8)  # a run-time length of at most 8: the extents that follow it

# (primitive, operand shapes, attributes, the outputs)
OUTPUTS = [
    ("add", {"a": (2, 3), "b": (2, 3)}, {}, {"y": ((2, 3), "x")}),
    ("sub", {"a": (4,), "b": (4,)}, {}, {"y": ((4,), "x")}),
    ("mul", {"a": (1, 2, 3), "b": (1, 2, 3)}, {}, {"y": ((1, 2, 3), "x")}),
    ("scale", {"x": (5, 2)}, {"s": 3.0}, {"y": ((5, 2), "x")}),
    ("gelu_tanh", {"x": (3,)}, {}, {"y": ((3,), "x")}),
    ("gelu_erf", {"x": (2, 2)}, {}, {"y": ((2, 2), "x")}),
    ("silu", {"x": (7,)}, {}, {"y": ((7,), "x")}),
    ("linear", {"x": (2, 4), "w": (5, 4)}, {}, {"y": ((2, 5), "x")}),
    ("linear", {"x": (2, 4), "w": (5, 4), "b": (5,)}, {"has_b": True}, {"y": ((2, 5), "x")}),
    ("matmul", {"a": (3, 2, 4), "b": (3, 4, 5)}, {}, {"y": ((3, 2, 5), "x")}),
    # a (4, k=3, m=2) transposed, b (2, n=5, k=3) transposed, two a-batches per b-batch
    ("matmul", {"a": (4, 3, 2), "b": (2, 5, 3)},
     {"trans_a": True, "trans_b": True, "group": 2}, {"y": ((4, 2, 5), "x")}),
    ("embedding", {"table": (9, 4), "ids": (3,)}, {}, {"y": ((3, 4), "x")}),
    ("layernorm", {"x": (2, 3), "g": (3,), "b": (3,)}, {}, {"y": ((2, 3), "x")}),
    ("rmsnorm", {"x": (2, 3), "g": (3,)}, {}, {"y": ((2, 3), "x")}),
    ("softmax", {"x": (1, 2, 3)}, {"causal": True, "offset": -1}, {"y": ((1, 2, 3), "x")}),
    ("softmax", {"x": (1, 2, 3), "keep": (3,)}, {"has_keep": True}, {"y": ((1, 2, 3), "x")}),
    ("rope", {"x": (3, 2, 4)}, {"pairing": "interleaved", "pos0": 5}, {"y": ((3, 2, 4), "x")}),
    ("rope", {"x": (T8, 2, 4)}, {"pos0": T8 - 1}, {"y": ((T8, 2, 4), "x")}),  # affine, and >= 0 at T = 1
    ("mean_pool", {"x": (5, 3), "keep": (5,)}, {}, {"y": ((3,), "x")}),
    ("l2norm", {"x": (2, 6)}, {}, {"y": ((2, 6), "x")}),
    ("argmax", {"x": (4, 6)}, {}, {"y": ((4,), "i32")}),
    ("reshape", {"x": (2, 6)}, {"shape": (3, 1, 4)}, {"y": ((3, 1, 4), "x")}),
    ("transpose", {"x": (2, 3, 4)}, {"perm": (2, 0, 1)}, {"y": ((4, 2, 3), "x")}),
    ("slice", {"x": (2, 5, 3)}, {"axis": 1, "start": 1, "stop": 4}, {"y": ((2, 3, 3), "x")}),
    ("slice", {"x": (6,)}, {"axis": 0, "start": 0, "stop": 6}, {"y": ((6,), "x")}),
    ("concat", {"a": (2, 3, 4), "b": (2, 5, 4)}, {"axis": 1}, {"y": ((2, 8, 4), "x")}),
    ("cache_write", {"cache": (2, 8, 4), "rows": (2, 1, 4)}, {"pos": 7}, {"y": ((2, 8, 4), "x")}),
    ("cache_write", {"cache": (2, 8, 4), "rows": (2, 1, 4)}, {"pos": T8 - 1}, {"y": ((2, 8, 4), "x")}),
    # the scores of a decode step: q (2, 1, 4) over the first T8 + 1 rows of a cache of 9
    ("matmul", {"a": (2, 1, 4), "b": (2, 9, 4)}, {"trans_b": True, "b_rows": T8 + 1}, {"y": ((2, 1, T8 + 1), "x")}),
    ("matmul", {"a": (2, 1, T8 + 1), "b": (2, 9, 4)}, {"b_rows": T8 + 1}, {"y": ((2, 1, 4), "x")}),
    ("quantize", {"x": (2, 9)}, {"block": 4}, {"q": ((2, 9), "i8"), "d": ((2, 3), "acc")}),
    ("quantize", {"x": (2, 9)}, {"block": 65536}, {"q": ((2, 9), "i8"), "d": ((2, 1), "acc")}),  # the largest block
    ("qlinear_w", {"x": (2, 9), "wq": (3, 6), "wd": (3, 3)}, {"fmt": "q4", "block": 4}, {"y": ((2, 3), "x")}),
    ("qlinear_i", {"xq": (2, 8), "xd": (2, 2), "wq": (3, 8), "wd": (3, 2), "b": (3,)}, {"block": 4, "has_b": True},
     {"y": ((2, 3), "x")}),
]


@pytest.mark.parametrize("name, shapes, attrs, expected", OUTPUTS)
def test_every_output_has_its_shape_and_kind(name, shapes, attrs, expected):
    assert get_primitive(name).outputs(shapes, attrs) == expected


# (primitive, operand shapes, attributes, the whole message)
REFUSALS = [
    ("add", {"a": (2, 3), "b": (3, 2)}, {}, "add: a (2, 3) and b (3, 2) must have the same shape"),
    ("sub", {"a": (2,), "b": (3,)}, {}, "sub: a (2,) and b (3,) must have the same shape"),
    ("mul", {"a": (1,), "b": (2,)}, {}, "mul: a (1,) and b (2,) must have the same shape"),
    ("linear", {"x": (2, 3, 4), "w": (5, 4)}, {}, "linear: x has shape (2, 3, 4); it must have rank 2"),
    ("linear", {"x": (2, 4), "w": (5,)}, {}, "linear: w has shape (5,); it must have rank 2"),
    ("linear", {"x": (2, 3), "w": (5, 4)}, {},
     "linear: x (2, 3) and w (5, 4) (out, in) disagree on in: 3 != 4"),
    ("linear", {"x": (2, 4), "w": (5, 4), "b": (4,)}, {"has_b": True},
     "linear: b has shape (4,); it must be (5,)"),
    ("matmul", {"a": (2, 3), "b": (1, 3, 4)}, {}, "matmul: a has shape (2, 3); it must have rank 3"),
    ("matmul", {"a": (1, 2, 3), "b": (3, 4)}, {}, "matmul: b has shape (3, 4); it must have rank 3"),
    ("matmul", {"a": (1, 2, 3), "b": (1, 3, 4)}, {"group": 0},
     "matmul: group is 0; it must be a positive int"),
    ("matmul", {"a": (1, 2, 3), "b": (1, 3, 4)}, {"group": 1.0},
     "matmul: group is 1.0; it must be a positive int"),
    ("matmul", {"a": (1, 2, 3), "b": (1, 4, 5)}, {},
     "matmul: a (1, 2, 3) and b (1, 4, 5) disagree on the reduced axis: 3 != 4"),
    ("matmul", {"a": (1, 3, 2), "b": (1, 3, 4)}, {"trans_a": True, "trans_b": True},
     "matmul: a (1, 3, 2) and b (1, 3, 4) disagree on the reduced axis: 3 != 4"),
    ("matmul", {"a": (3, 2, 3), "b": (1, 3, 4)}, {"group": 2},
     "matmul: a has 3 batches; it must have b's 1 times group 2"),
    ("embedding", {"table": (5,), "ids": (3,)}, {}, "embedding: table has shape (5,); it must have rank 2"),
    ("embedding", {"table": (5, 4), "ids": (3, 1)}, {},
     "embedding: ids has shape (3, 1); it must have rank 1"),
    ("layernorm", {"x": (3,), "g": (3,), "b": (3,)}, {}, "layernorm: x has shape (3,); it must have rank 2"),
    ("layernorm", {"x": (2, 3), "g": (2,), "b": (3,)}, {}, "layernorm: g has shape (2,); it must be (3,)"),
    ("layernorm", {"x": (2, 3), "g": (3,), "b": (3, 1)}, {},
     "layernorm: b has shape (3, 1); it must be (3,)"),
    ("layernorm", {"x": (2, T8), "g": (T8,), "b": (T8,)}, {},
     "layernorm: x (2, T): the normalized dimension follows the run-time length; it must be static"),
    ("rmsnorm", {"x": (1, 2, 3), "g": (3,)}, {}, "rmsnorm: x has shape (1, 2, 3); it must have rank 2"),
    ("rmsnorm", {"x": (2, T8), "g": (T8,)}, {},
     "rmsnorm: x (2, T): the normalized dimension follows the run-time length; it must be static"),
    ("rmsnorm", {"x": (2, 3), "g": (2,)}, {}, "rmsnorm: g has shape (2,); it must be (3,)"),
    ("softmax", {"x": (2, 3)}, {}, "softmax: x has shape (2, 3); it must have rank 3"),
    ("softmax", {"x": (1, 2, 3), "keep": (2,)}, {"has_keep": True},
     "softmax: keep has shape (2,); it must be (3,)"),
    ("softmax", {"x": (1, 2, 3)}, {"offset": 1.0}, "softmax: offset is 1.0; it must be an int"),
    ("rope", {"x": (2, 4)}, {}, "rope: x has shape (2, 4); it must have rank 3"),
    ("rope", {"x": (2, 1, 5)}, {}, "rope: x (2, 1, 5): the head dimension must be even"),
    ("rope", {"x": (2, 1, T8)}, {},
     "rope: x (2, 1, T): the head dimension follows the run-time length; it must be static"),
    ("rope", {"x": (T8, 1, 4)}, {"pos0": T8 * T8},
     "rope: pos0 is T * T; it must be an int >= 0, or >= 0 and affine in the run-time length"),
    ("rope", {"x": (T8, 1, 4)}, {"pos0": T8 - 2},  # -1 at T = 1
     "rope: pos0 is T - 2; it must be an int >= 0, or >= 0 and affine in the run-time length"),
    ("rope", {"x": (2, 1, 4)}, {"pairing": "halves"},
     "rope: pairing is 'halves'; it must be 'half' or 'interleaved'"),
    ("rope", {"x": (2, 1, 4)}, {"pos0": -1}, "rope: pos0 is -1; it must be an int >= 0, or >= 0 and affine in the run-time length"),
    ("rope", {"x": (2, 1, 4)}, {"pos0": 1.0}, "rope: pos0 is 1.0; it must be an int >= 0, or >= 0 and affine in the run-time length"),
    ("rope", {"x": (2, 1, 4)}, {"theta": 1.0}, "rope: theta is 1.0; it must be > 1"),
    ("mean_pool", {"x": (4,), "keep": (4,)}, {}, "mean_pool: x has shape (4,); it must have rank 2"),
    ("mean_pool", {"x": (4, 3), "keep": (3,)}, {}, "mean_pool: keep has shape (3,); it must be (4,)"),
    ("l2norm", {"x": (4,)}, {}, "l2norm: x has shape (4,); it must have rank 2"),
    ("argmax", {"x": (1, 2, 3)}, {}, "argmax: x has shape (1, 2, 3); it must have rank 2"),
    ("reshape", {"x": (2, 3)}, {"shape": (4, 2)}, "reshape: x (2, 3) cannot be viewed as (4, 2)"),
    ("reshape", {"x": (2, 3)}, {"shape": (-2, -3)}, "reshape: x (2, 3) cannot be viewed as (-2, -3)"),
    ("transpose", {"x": (2, 3)}, {"perm": (1, 1)},
     "transpose: perm (1, 1) is not a permutation of the 2 axes of x"),
    ("transpose", {"x": (2, 3)}, {"perm": (0, 1, 2)},
     "transpose: perm (0, 1, 2) is not a permutation of the 2 axes of x"),
    ("slice", {"x": (2, 3)}, {"axis": 2}, "slice: axis 2 is not an axis of x (2, 3)"),
    ("slice", {"x": (2, 3)}, {"axis": -1}, "slice: axis -1 is not an axis of x (2, 3)"),
    ("slice", {"x": (2, 3)}, {"axis": 1, "start": 2, "stop": 2},
     "slice: [2, 2) is not a non-empty range inside axis 1 of x (2, 3)"),
    ("slice", {"x": (2, 3)}, {"axis": 1, "start": 1, "stop": 4},
     "slice: [1, 4) is not a non-empty range inside axis 1 of x (2, 3)"),
    ("slice", {"x": (2, 3)}, {"axis": 0, "start": -1, "stop": 1},
     "slice: [-1, 1) is not a non-empty range inside axis 0 of x (2, 3)"),
    ("concat", {"a": (2, 3), "b": (2,)}, {"axis": 0},
     "concat: a (2, 3) and b (2,) with axis 0: same rank and a valid axis needed"),
    ("concat", {"a": (2, 3), "b": (2, 3)}, {"axis": 2},
     "concat: a (2, 3) and b (2, 3) with axis 2: same rank and a valid axis needed"),
    ("concat", {"a": (2, 3), "b": (2, 3)}, {"axis": -1},
     "concat: a (2, 3) and b (2, 3) with axis -1: same rank and a valid axis needed"),
    ("concat", {"a": (2, 3), "b": (4, 5)}, {"axis": 0}, "concat: a (2, 3) and b (4, 5) differ off axis 0"),
    ("cache_write", {"cache": (2, 8, 4), "rows": (2, 1, 4)}, {"pos": 8},
     "cache_write: rows [8, 9) are not inside the 8 rows of cache (2, 8, 4)"),
    ("cache_write", {"cache": (2, 8, 4), "rows": (2, 1, 4)}, {"pos": T8},
     "cache_write: rows [T, T + 1) are not inside the 8 rows of cache (2, 8, 4)"),
    ("cache_write", {"cache": (2, 8, 4), "rows": (2, 1, 3)}, {"pos": 0},
     "cache_write: rows (2, 1, 3) and cache (2, 8, 4) differ off axis 1"),
    ("matmul", {"a": (2, 1, 4), "b": (2, 9, 4)}, {"trans_b": True, "b_rows": 10},
     "matmul: b_rows 10 is not in [1, 9], the rows of b (2, 9, 4)"),
    # the quantized primitives: each operand's rank and length, the block and the format
    ("quantize", {"x": (2, 3, 4)}, {"block": 4}, "quantize: x has shape (2, 3, 4); it must have rank 2"),
    ("quantize", {"x": (2, 8)}, {"block": 0}, "quantize: block is 0; it must be an int in 1..65536"),
    ("quantize", {"x": (2, 8)}, {"block": True}, "quantize: block is True; it must be an int in 1..65536"),
    ("quantize", {"x": (2, 8)}, {"block": 65537}, "quantize: block is 65537; it must be an int in 1..65536"),
    ("qlinear_w", {"x": (2,), "wq": (3, 8), "wd": (3, 2)}, {"block": 4}, "qlinear_w: x has shape (2,); it must have rank 2"),
    ("qlinear_w", {"x": (2, 8), "wq": (3,), "wd": (3, 2)}, {"block": 4},
     "qlinear_w: wq has shape (3,); it must have rank 2"),
    ("qlinear_w", {"x": (2, 8), "wq": (3, 8), "wd": (3,)}, {"block": 4},
     "qlinear_w: wd has shape (3,); it must have rank 2"),
    ("qlinear_w", {"x": (2, 8), "wq": (3, 7), "wd": (3, 2)}, {"block": 4},
     "qlinear_w: wq has shape (3, 7); a q8 row of 8 values in blocks of 4 is 8 int8 values"),
    ("qlinear_w", {"x": (2, 9), "wq": (3, 9), "wd": (3, 3)}, {"fmt": "q4", "block": 4},
     "qlinear_w: wq has shape (3, 9); a q4 row of 9 values in blocks of 4 is 6 bytes (3 blocks of 2)"),
    ("qlinear_w", {"x": (2, 8), "wq": (3, 8), "wd": (3, 3)}, {"block": 4},
     "qlinear_w: wd has shape (3, 3); it must be (3, 2): one scale per row and block of 4"),
    ("qlinear_w", {"x": (2, 8), "wq": (3, 8), "wd": (3, 2), "b": (2,)}, {"block": 4, "has_b": True},
     "qlinear_w: b has shape (2,); it must be (3,)"),
    ("qlinear_w", {"x": (2, 8), "wq": (3, 8), "wd": (3, 2)}, {"fmt": "q5", "block": 4},
     "qlinear_w: fmt is 'q5'; it must be one of q8, q4, q4_k, q5_k, q6_k"),
    ("qlinear_w", {"x": (2, 256), "wq": (3, 144), "wd": (3, 2)}, {"fmt": "q4_k", "block": 32},
     "qlinear_w: block is 32; q4_k is super-blocks of 256"),
    ("qlinear_w", {"x": (2, 300), "wq": (3, 288), "wd": (3, 4)}, {"fmt": "q4_k", "block": 256},
     "qlinear_w: K is 300; q4_k rows are whole super-blocks of 256 values"),
    ("qlinear_i", {"xq": (2, 512), "xd": (2, 2), "wq": (3, 352), "wd": (3, 2)}, {"fmt": "q5_k", "block": 256},
     "qlinear_i: wd has shape (3, 2); it must be (3, 4): d and dmin per row and block of 256"),
    ("qlinear_w", {"x": (2, 512), "wq": (3, 400), "wd": (3, 2)}, {"fmt": "q6_k", "block": 256},
     "qlinear_w: wq has shape (3, 400); a q6_k row of 512 values in blocks of 256 is 420 bytes (2 blocks of 210)"),
    ("qlinear_w", {"x": (2, 8), "wq": (3, 8), "wd": (3, 2)}, {"fmt": "q4", "block": 3},
     "qlinear_w: block is 3; a q4 block is an even number of values (two to a byte)"),
    ("qlinear_i", {"xq": (2,), "xd": (2, 2), "wq": (3, 8), "wd": (3, 2)}, {"block": 4},
     "qlinear_i: xq has shape (2,); it must have rank 2"),
    ("qlinear_i", {"xq": (2, 8), "xd": (2, 2), "wq": (3, 8, 1), "wd": (3, 2)}, {"block": 4},
     "qlinear_i: wq has shape (3, 8, 1); it must have rank 2"),
    ("qlinear_i", {"xq": (2, 8), "xd": (2, 3), "wq": (3, 8), "wd": (3, 2)}, {"block": 4},
     "qlinear_i: xd has shape (2, 3); it must be (2, 2): one activation scale per row and block of 4"),
    ("qlinear_i", {"xq": (2, 8), "xd": (2, 2), "wq": (3, 8), "wd": (3, 3)}, {"block": 4},
     "qlinear_i: wd has shape (3, 3); it must be (3, 2): one scale per row and block of 4"),
]


@pytest.mark.parametrize("name, shapes, attrs, message", REFUSALS)
def test_every_refusal_names_the_primitive_the_operand_and_the_rule(name, shapes, attrs, message):
    with pytest.raises(PrimitiveError, match=f"^{re.escape(message)}$"):
        get_primitive(name).outputs(shapes, attrs)


def test_the_catalogue_refuses_unknown_attributes_operands_and_dimensions():
    linear = get_primitive("linear")
    with pytest.raises(PrimitiveError, match=r"^linear: unknown attribute\(s\) bias, k; it takes has_b$"):
        linear.outputs({"x": (2, 4), "w": (5, 4)}, {"k": 1, "bias": True})
    with pytest.raises(PrimitiveError, match=re.escape(
            "matmul: unknown attribute(s) axis; it takes trans_a, trans_b, group")):
        get_primitive("matmul").full_attrs({"axis": 1})
    with pytest.raises(PrimitiveError, match=r"^argmax: unknown attribute\(s\) axis; it takes none$"):
        get_primitive("argmax").outputs({"x": (2, 4)}, {"axis": 0})
    with pytest.raises(PrimitiveError, match=re.escape(
            "linear: operands ['w', 'x'] given; with these attributes it takes ['x', 'w', 'b']")):
        linear.outputs({"x": (2, 4), "w": (5, 4)}, {"has_b": True})
    with pytest.raises(PrimitiveError, match=re.escape(
            "linear: operand w has shape (5, 0); every dimension must be a positive int")):
        linear.outputs({"x": (2, 4), "w": (5, 0)})
    with pytest.raises(PrimitiveError, match=re.escape("operand x has shape (2.0, 4)")):
        linear.outputs({"x": (2.0, 4), "w": (5, 4)})
    with pytest.raises(PrimitiveError, match=r"^unknown primitive 'conv'; exactc knows adamw, add, argmax, "):
        get_primitive("conv")


def test_operands_and_defaults_are_the_catalogue_s():
    assert get_primitive("softmax").operand_names({"has_keep": True}) == ["x", "keep"]
    assert get_primitive("softmax").operand_names({}) == ["x"]
    assert get_primitive("embedding").operand_kind("ids") == "i32"
    assert get_primitive("embedding").operand_kind("table") == "x"
    # a quantized weight's kind follows the format it is given, q8's by default
    assert get_primitive("qlinear_w").operand_kind("wq", {"fmt": "q4", "block": 4}) == "u8"
    assert get_primitive("qlinear_w").operand_kind("wq", {"fmt": "q8"}) == "i8"
    assert get_primitive("qlinear_w").operand_kind("wq") == "i8"
    assert get_primitive("matmul").full_attrs({"group": 2}) == {
        "trans_a": False, "trans_b": False, "group": 2, "b_rows": 0}
    # b_rows, added after programs with matmuls were printed, is shown only when set
    assert get_primitive("matmul").shown_attrs({"group": 2, "b_rows": 0}) == {"group": 2}
    assert get_primitive("matmul").shown_attrs({"group": 2, "b_rows": 3}) == {"group": 2, "b_rows": 3}
    assert sorted(PRIMITIVES) == sorted(p.name for p in PRIMITIVES.values())
    # every primitive documents itself in one line (the CLI and the docs list them)
    for p in PRIMITIVES.values():
        assert isinstance(p.doc, str) and p.doc and "\n" not in p.doc, p.name
    assert get_primitive("add").doc == "y = a + b, elementwise"


@pytest.mark.parametrize("name, shapes, attrs, message", [
    ("layernorm", {"x": (3, T8), "g": (T8,), "b": (T8,)}, {},
     "layernorm: x (3, T): the normalized dimension follows the run-time length; it must be static"),
    ("rmsnorm", {"x": (3, T8), "g": (T8,)}, {},
     "rmsnorm: x (3, T): the normalized dimension follows the run-time length; it must be static"),
    ("rope", {"x": (3, 2, T8)}, {},
     "rope: x (3, 2, T): the head dimension follows the run-time length; it must be static"),
    ("qlinear_w", {"x": (2, 32), "wq": (4, 32), "wd": (4, 1), "b": (5,)}, {"fmt": "q8", "block": 32, "has_b": True},
     "qlinear_w: b has shape (5,); it must be (4,)"),
])
def test_the_catalogue_refuses_shapes_its_kernels_cannot_take(name, shapes, attrs, message):
    with pytest.raises(PrimitiveError) as err:
        get_primitive(name).outputs(shapes, get_primitive(name).full_attrs(attrs))
    assert str(err.value) == message


def test_the_backward_primitives_are_defined_at_the_training_sites_only():
    """docs/semantics.md section 17: gradients and updates are computed at f64 or f32."""
    assert BACKWARD_PRIMITIVES and set(BACKWARD_PRIMITIVES) <= set(PRIMITIVES)
    for name, prim in PRIMITIVES.items():
        assert prim.sites == (("f64", "f32") if name in BACKWARD_PRIMITIVES else SITE_TYPES), name
    with pytest.raises(PrimitiveError, match=r"^adamw at bf16: a backward primitive is computed at f64 or f32 "):
        get_primitive("adamw").check_site("bf16")
    assert get_primitive("linear_bar_w").outputs({"x": (5, 3), "dy": (5, 2), "acc": (2, 3)}) == {"y": ((2, 3), "x")}
    with pytest.raises(PrimitiveError, match=re.escape("linear_bar_w: acc has shape (3, 2); the adjoint it holds is (2, 3)")):
        get_primitive("linear_bar_w").outputs({"x": (5, 3), "dy": (5, 2), "acc": (3, 2)})
    # a refusal of the forward's shape rule names the backward primitive first
    with pytest.raises(PrimitiveError, match=re.escape(
            "matmul_bar_b: the forward's operands do not fit: matmul: a (4, 3, 8) and b (2, 5, 3) disagree on the "
            "reduced axis: 8 != 3")):
        get_primitive("matmul_bar_b").outputs({"a": (4, 3, 8), "dy": (4, 3, 5), "acc": (2, 5, 3)},
                                              {"trans_b": True, "group": 2})
    with pytest.raises(PrimitiveError, match=r"^layernorm_bar_x: the forward's operands do not fit: layernorm: g "):
        get_primitive("layernorm_bar_x").outputs({"x": (4, 3), "g": (4,), "dy": (4, 3)})
