"""Lowering (exporter/kernels/lower.py): the attribute and call checks the catalogue leaves to
it, numpy attributes held as Python numbers, transposes of rank 0 and 1."""

from __future__ import annotations

import numpy as np
import pytest

from exactc.exporter.kernels.lower import lower
from exactc.exporter.primitives import PrimitiveError

# ---- lowering


# (primitive, site, operand shapes, attributes, the whole message)
LOWERINGS = [
    ("add", "f16", {"a": (2,), "b": (2,)}, {}, "add: unknown site type 'f16'; exactc knows f64, f32, bf16"),
    ("add", "f32", [("a", (2,)), ("b", (2,))], {}, "add: shapes must map operand names to shapes"),
    ("add", "f32", {"a": 2, "b": (2,)}, {}, "add: operand a has shape 2; give a tuple of ints"),
    ("add", "f32", {"a": (True,), "b": (1,)}, {}, "add: operand a has shape (True,); bools are not sizes"),
    ("linear", "f32", {"x": (2, 3), "w": (4, 3)}, {"has_b": 1},
     "linear: attribute has_b is 1; it must be True or False"),
    ("softmax", "f32", {"x": (1, 2, 3)}, {"causal": "yes"},
     "softmax: attribute causal is 'yes'; it must be True or False"),
    ("reshape", "f32", {"x": (2, 3)}, {"shape": 6}, "reshape: attribute shape is 6; it must be a tuple of ints"),
    ("transpose", "f32", {"x": (2, 3)}, {"perm": (1.0, 0)}, "transpose: attribute perm is (1.0, 0); it must be ints"),
    ("softmax", "f32", {"x": (1, 2, 3)}, {"offset": 1.5}, "softmax: attribute offset is 1.5; it must be an int"),
    ("slice", "f32", {"x": (2, 3)}, {"axis": True, "start": 0, "stop": 1},
     "slice: attribute axis is True; it must be an int"),
    ("rope", "f32", {"x": (2, 1, 4)}, {"theta": float("inf")}, "rope: attribute theta is inf; it must be finite"),
    # each primitive's own attributes, each checked under its own primitive's name
    ("scale", "f32", {"x": (2,)}, {"s": "2"}, "scale: attribute s is '2'; it must be a real number"),
    ("layernorm", "f32", {"x": (2, 3), "g": (3,), "b": (3,)}, {"eps": "a"},
     "layernorm: attribute eps is 'a'; it must be a real number"),
    ("rmsnorm", "f32", {"x": (2, 3), "g": (3,)}, {"eps": float("nan")},
     "rmsnorm: attribute eps is NaN; it must be a real number"),
    ("l2norm", "f32", {"x": (2, 3)}, {"eps": 10**400},
     "l2norm: attribute eps is an integer of 401 digits; it must be a real number within f64's range"),
    ("rope", "f32", {"x": (2, 1, 4)}, {"theta": None}, "rope: attribute theta is None; it must be a real number"),
    ("rope", "f32", {"x": (2, 1, 4)}, {"pairing": ["half"]},
     "rope: attribute pairing is ['half']; a list attribute holds ints (a shape, a permutation)"),
    ("softmax", "f32", {"x": (1, 2, 3)}, {"has_keep": 0}, "softmax: attribute has_keep is 0; it must be True or False"),
    ("matmul", "f32", {"a": (1, 2, 3), "b": (1, 3, 4)}, {"trans_a": 1},
     "matmul: attribute trans_a is 1; it must be True or False"),
    ("matmul", "f32", {"a": (1, 2, 3), "b": (1, 3, 4)}, {"trans_b": "no"},
     "matmul: attribute trans_b is 'no'; it must be True or False"),
    ("matmul", "f32", {"a": (1, 2, 3), "b": (1, 3, 4)}, {"group": 1.5}, "matmul: attribute group is 1.5; it must be an int"),
    ("slice", "f32", {"x": (2, 3)}, {"axis": 0, "start": 0.0, "stop": 1}, "slice: attribute start is 0.0; it must be an int"),
    ("slice", "f32", {"x": (2, 3)}, {"axis": 0, "start": 0, "stop": "1"}, "slice: attribute stop is '1'; it must be an int"),
    ("concat", "f32", {"a": (2, 3), "b": (2, 3)}, {"axis": 0.0}, "concat: attribute axis is 0.0; it must be an int"),
    ("quantize", "f32", {"x": (2, 8)}, {"block": 4.0}, "quantize: attribute block is 4.0; it must be an int"),
    ("qlinear_w", "f32", {"x": (2, 8), "wq": (3, 8), "wd": (3, 2)}, {"block": 4, "has_b": None},
     "qlinear_w: attribute has_b is None; it must be True or False"),
    ("qlinear_i", "f32", {"xq": (2, 8), "xd": (2, 2), "wq": (3, 8), "wd": (3, 2)}, {"block": "4"},
     "qlinear_i: attribute block is '4'; it must be an int"),
    ("rope", "f32", {"x": (2, 1, 4)}, {"inverse": 1}, "rope: attribute inverse is 1; it must be True or False"),
    # the backward: f64 and f32 only, and its own attributes
    ("linear_bar_b", "bf16", {"dy": (2, 3), "acc": (3,)}, {},
     "linear_bar_b at bf16: a backward primitive is computed at f64 or f32 (docs/semantics.md section 17)"),
    ("adamw", "f32", {"param": (2,), "g": (2,), "m": (2,), "v": (2,), "h": (8,)}, {"decays": "yes"},
     "adamw: attribute decays is 'yes'; it must be True or False"),
    ("xent_rows", "f64", {"logits": (2, 3), "targets": (2,)}, {"ignore": -1.0},
     "xent_rows: attribute ignore is -1.0; it must be an int"),
    ("norm_bar_g", "f32", {"x": (2, 3), "dy": (2, 3), "acc": (3,)}, {"eps": "a"},
     "norm_bar_g: attribute eps is 'a'; it must be a real number"),
    ("matmul_bar_a", "f32", {"b": (1, 3, 4), "dy": (1, 2, 4), "acc": (1, 2, 3)}, {"group": 1.5},
     "matmul_bar_a: attribute group is 1.5; it must be an int"),
]


@pytest.mark.parametrize("primitive, site, shapes, attrs, message", LOWERINGS,
                         ids=[f"{row[0]}-{i}" for i, row in enumerate(LOWERINGS)])
def test_lowering_refuses_what_the_catalogue_leaves_to_it(primitive, site, shapes, attrs, message):
    with pytest.raises(PrimitiveError) as caught:
        lower(primitive, site, shapes, attrs)
    assert str(caught.value) == message


def test_lowering_holds_numpy_attributes_as_python_numbers():
    """A shape given as numpy integers is held (and printed in the IR text) as ints."""
    kernel = lower("reshape", "f32", {"x": (2, 3)}, {"shape": (np.int64(3), np.int32(2))})
    assert kernel.attrs["shape"] == (3, 2) and [type(d) for d in kernel.attrs["shape"]] == [int, int]
    assert kernel.text().startswith("kernel reshape at f32 (shape=(3, 2))\n")


def test_a_rank_0_transpose_is_one_bit_copy():
    """A scalar has one axis of extent 1 and an empty permutation: y = x, every bit."""
    kernel = lower("transpose", "f64", {"x": ()}, {"perm": ()})
    assert kernel.text() == (
        "kernel transpose at f64 (perm=())\n"
        "  input x : f64[]\n"
        "  output y : f64[]\n"
        "nest transpose: parallel i0<1\n"
        "  y[i0] = bits(x[i0])"
    )


def test_a_rank_1_transpose_is_one_bit_copy():
    """One axis, the identity permutation: y = x, every bit (no second axis to index)."""
    kernel = lower("transpose", "f32", {"x": (3,)}, {"perm": (0,)})
    assert kernel.text() == (
        "kernel transpose at f32 (perm=(0,))\n"
        "  input x : f32[3]\n"
        "  output y : f32[3]\n"
        "nest transpose: parallel i0<3\n"
        "  y[i0] = bits(x[i0])"
    )


# ---- the backward (docs/semantics.md section 17)


def test_an_accumulating_kernel_starts_each_element_from_acc():
    """linear_bar_w: y[n,k] is acc[n,k] with the rows' terms added in order, its nest
    parallel over the output's elements and the rows a reduction."""
    kernel = lower("linear_bar_w", "f32", {"x": (5, 3), "dy": (5, 2), "acc": (2, 3)})
    (nest,) = kernel.nests
    assert [a.name for a in nest.axes] == ["n", "k"] and [a.name for a in nest.reduce_axes()] == ["m"]
    assert nest.text().splitlines()[1:] == [
        "  v : f32 = acc[n,k]",
        "  for m<5 (reduce):",
        "    v = v + (dy[m,n] * x[m,k])",
        "  y[n,k] = v",
    ]


def test_the_scatter_add_is_parallel_over_the_columns_alone():
    """embedding_bar stores at a loaded row: its nest splits over d only, and the tokens
    are a reduction (in order, a repeated one every time)."""
    kernel = lower("embedding_bar", "f64", {"ids": (7,), "dy": (7, 4), "acc": (5, 4)})
    (nest,) = kernel.nests
    assert [a.name for a in nest.axes] == ["d"] and [a.name for a in nest.reduce_axes()] == ["t"]
    assert "y[row,d] = y[row,d] + dy[t,d]" in nest.text()


def test_rope_inverse_turns_by_minus_the_angle():
    forward = lower("rope", "f32", {"x": (2, 1, 4)}).nests[1].text()
    inverse = lower("rope", "f32", {"x": (2, 1, 4)}, {"inverse": True}).nests[1].text()
    assert "y[t,hd,i] = (x0 * c) - (x1 * s)" in forward and "y[t,hd,i + 2] = (x0 * s) + (x1 * c)" in forward
    assert "y[t,hd,i] = (x0 * c) + (x1 * s)" in inverse and "y[t,hd,i + 2] = (x1 * c) - (x0 * s)" in inverse
