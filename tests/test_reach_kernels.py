"""The kernel IR, its lowering, layouts, thread splits and plan files: the refusals and rare
paths that the kernel and program tests never take (docs/coverage.md).

Grouped by what they protect:

1. the IR's nodes: every malformed axis, buffer, expression and statement is refused
   when it is built, with a message that names the node and the rule;
2. the IR checker of a whole kernel: buffers and nests named twice, launches that do
   not match their nest, names introduced twice, scalars out of scope, unknown buffers
   and statements, accesses of the wrong type or rank or outside their buffer (a
   reversed index `3 - i` spans the other way, and is in bounds); and the kernel's
   text, whole;
3. lowering's own attribute and call checks (those the catalogue leaves to it), and the
   rank-0 transpose, whole;
4. layouts: a field given twice, a pack over its limit, blocks and integer sums of what
   is not a reduction (or not an integer sum), fresh names that avoid lo and hi;
5. thread splits: no pieces or too many, a bad `of`, an axis that follows the run-time
   length split without `of`;
6. plan files and `exactc plan`: every badly typed field, a missing file, the command's
   arguments and its refusals, run in process.
"""

from __future__ import annotations

import argparse
import importlib

import numpy as np
import pytest

from exactc.exporter import dims
from exactc.exporter.kernels import ir
from exactc.exporter.kernels.ir import REDUCE, Affine, IRError
from exactc.exporter.kernels.layouts import Layout, LayoutError, fresh_name, integer_sum_rule
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.plans import (
    NestPlan,
    Plan,
    PlanError,
    add_arguments,
    describe_choices,
    load_plan_option,
    parse_plan,
    show_command,
    validate_plan,
)
from exactc.exporter.kernels.splits import MAX_PIECES, Split
from exactc.exporter.primitives import PrimitiveError


T8 = dims.length(8)


F32 = ir.Const(1.0, "f32")

F64 = ir.Const(1.0, "f64")

I = Affine.var("i")

TRUE = ir.Binary("<", F32, F32)

# (the node, built; the whole message of its refusal)
NODES = [
    pytest.param(lambda: ir.Axis("1a", 3), "axis name '1a' is not a C identifier", id="axis-not-identifier"),
    pytest.param(lambda: ir.Axis("for", 3), "axis name 'for' is reserved by the printed C", id="axis-keyword"),
    pytest.param(lambda: ir.Buffer("exactc_x", "float", (3,), "input"),
                 "buffer name 'exactc_x' is reserved by the printed C", id="buffer-runtime-prefix"),
    pytest.param(lambda: ir.Axis("i", 0), "axis i: extent 0 must be an int >= 1 (at every run-time length)",
                 id="axis-empty"),
    pytest.param(lambda: ir.Axis("i", T8 - 1), "axis i: extent T - 1 must be an int >= 1 (at every run-time length)",
                 id="axis-empty-at-T-1"),
    pytest.param(lambda: ir.Axis("i", "3"), "axis i: extent '3' must be an int >= 1 (at every run-time length)",
                 id="axis-extent-text"),
    pytest.param(lambda: ir.Axis("i", 3, "serial"), "axis i: kind 'serial' is not one of ('parallel', 'reduce')",
                 id="axis-kind"),
    pytest.param(lambda: ir.Buffer("x", "half", (3,), "input"),
                 "buffer x: ctype 'half' is not one of ('double', 'float', 'exactc_bf16', 'int32_t', 'int8_t', "
                 "'uint8_t')", id="buffer-ctype"),
    pytest.param(lambda: ir.Buffer("x", "float", (3,), "scratch"),
                 "buffer x: role 'scratch' is not one of ('input', 'output', 'temp')", id="buffer-role"),
    pytest.param(lambda: Affine((("i", 1.5),)), "affine coefficient 1.5 of i must be an int", id="affine-coef"),
    pytest.param(lambda: Affine((("i", True),)), "affine coefficient True of i must be an int", id="affine-coef-bool"),
    pytest.param(lambda: Affine((), 2.0), "affine constant 2.0 must be an int", id="affine-const"),
    pytest.param(lambda: Affine.of(T8 * T8), "T * T is not affine in T; an index may name T linearly only",
                 id="affine-of-square"),
    pytest.param(lambda: ir.Const(1.0, "bf16"), "constant 1.0: type 'bf16' is not f64 or f32", id="const-type"),
    pytest.param(lambda: ir.Const(float("nan"), "f64"), "a constant may not be NaN (write NaN results with FillBits)",
                 id="const-nan"),
    pytest.param(lambda: ir.Var("v", "bf16"), "scalar v: type 'bf16' is not f64, f32, i64, i32 or bool",
                 id="var-type"),
    pytest.param(lambda: ir.Access("x", "f16", (0,)), "access to x: element type 'f16' unknown", id="access-type"),
    pytest.param(lambda: ir.Access("x", "f32", ()), "access to x has an empty index", id="access-empty"),
    pytest.param(lambda: ir.Binary("%", F32, F32), "unknown operator '%'", id="binary-unknown"),
    pytest.param(lambda: ir.Binary("/", I, I), "operator '/' on i64 and i64: i / i", id="binary-int-division"),
    pytest.param(lambda: ir.Binary("&", F32, F32), "operator '&' on f32 and f32: 0x1p+0f & 0x1p+0f",
                 id="binary-bits-of-floats"),
    pytest.param(lambda: ir.Binary("<", F32, F64), "operator '<' on f32 and f64: 0x1p+0f < 0x1p+0",
                 id="compare-mixed"),
    pytest.param(lambda: ir.Binary("&&", F32, F32), "operator '&&' on f32 and f32: 0x1p+0f && 0x1p+0f",
                 id="logic-of-floats"),
    pytest.param(lambda: ir.Unary("~", F32), "unknown unary operator '~'", id="unary-unknown"),
    pytest.param(lambda: ir.Unary("not", F32), "unary 'not' on f32: 0x1p+0f", id="unary-type"),
    pytest.param(lambda: ir.Call("pow", F32),
                 "unknown function 'pow'; the IR knows ('exp', 'log', 'tanh', 'erf', 'sin', 'cos', 'sqrt')",
                 id="call-unknown"),
    pytest.param(lambda: ir.Call("exp", I), "exp of a i64: i", id="call-of-index"),
    pytest.param(lambda: ir.Select(F32, F32, F32), "select condition is f32: 0x1p+0f", id="select-condition"),
    pytest.param(lambda: ir.Select(TRUE, F32, F64), "select of f32 and f64", id="select-mixed"),
    pytest.param(lambda: ir.Convert(F64, "bf16"), "no conversion from f64 to bf16: 0x1p+0", id="convert"),
    pytest.param(lambda: ir.Declare(ir.Var("v", "f32"), F64), "v : f32 initialized with a f64", id="declare"),
    pytest.param(lambda: ir.Assign(ir.Var("v", "f32"), I), "v : f32 assigned a i64", id="assign"),
    pytest.param(lambda: ir.CopyBits(ir.Access("y", "f32", (0,)), ir.Access("x", "f64", (0,))),
                 "bit copy from f64 to f32", id="copy-bits"),
    pytest.param(lambda: ir.FillBits(ir.Access("y", "bf16", (0,)), 0x10000), "bit pattern 0x10000 does not fit a bf16",
                 id="fill-too-wide"),
    pytest.param(lambda: ir.FillBits(ir.Access("y", "bf16", (0,)), -1), "bit pattern -0x1 does not fit a bf16",
                 id="fill-negative"),
    pytest.param(lambda: ir.If(F32, ()), "if condition is a f32: 0x1p+0f", id="if-condition"),
    pytest.param(lambda: ir.Nest("n", (), ()), "nest n has no parallel axis", id="nest-no-axis"),
    pytest.param(lambda: ir.Nest("n", (ir.Axis("k", 3, REDUCE),), ()), "nest n: axis k of the nest must be parallel",
                 id="nest-reduce-axis"),
]


@pytest.mark.parametrize("build, message", NODES)
def test_a_malformed_node_is_refused_by_name_and_rule(build, message):
    with pytest.raises(IRError) as caught:
        build()
    assert str(caught.value) == message


X = ir.Buffer("x", "float", (4,), "input")

Y = ir.Buffer("y", "float", (4,), "output")

AXIS = ir.Axis("i", 4)


def load(buffer: str, *index, type_: str = "f32") -> ir.Load:
    return ir.Load(ir.Access(buffer, type_, index))


def write(value: ir.Expr, *index) -> ir.Write:
    return ir.Write(ir.Access("y", "f32", index or (I,)), value)


COPY = (write(load("x", I)),)


def copy_nest(*body: ir.Stmt, name: str = "copy") -> ir.Nest:
    return ir.Nest(name, (AXIS,), body or COPY)


def copy_kernel(*nests: ir.Nest, buffers=(X, Y), launches=None) -> ir.Kernel:
    """y = x over i<4 (or the nests given), each nest launched whole unless told."""
    nests = nests or (copy_nest(),)
    if launches is None:
        launches = tuple(ir.launch(n, buffers) for n in nests)
    return ir.Kernel("copy", "f32", {}, buffers, nests, launches)


T32 = ir.Var("t", "f32")

IN_LOOP = ir.Loop(ir.Axis("k", 2, REDUCE), (ir.Declare(T32, load("x", I)),))

# (the kernel, built; the whole message of the checker's refusal)
KERNELS = [
    pytest.param(lambda: copy_kernel(buffers=(X, X, Y)), "kernel copy: buffer x declared twice", id="buffer-twice"),
    pytest.param(lambda: copy_kernel(copy_nest(), copy_nest()),
                 "kernel copy: nest names ['copy', 'copy'] are not unique",
                 id="nest-twice"),
    pytest.param(lambda: copy_kernel(launches=(ir.launch(copy_nest(name="other"), (X, Y)),)),
                 "launch of nest other, which the kernel does not hold", id="launch-of-a-stranger"),
    pytest.param(lambda: copy_kernel(launches=(ir.Launch(copy_nest(), ("y", "x"), 4),)),
                 "launch of copy: args ('y', 'x') extent 4; expected ('x', 'y') extent 4", id="launch-args"),
    pytest.param(lambda: copy_kernel(launches=(ir.Launch(copy_nest(), ("x", "y"), 3),)),
                 "launch of copy: args ('x', 'y') extent 3; expected ('x', 'y') extent 4", id="launch-extent"),
    pytest.param(lambda: copy_kernel(copy_nest(ir.Loop(ir.Axis("i", 4, REDUCE), COPY))),
                 "nest copy: name i is introduced twice (or is also a buffer)", id="axis-twice"),
    pytest.param(lambda: copy_kernel(copy_nest(ir.Declare(ir.Var("x", "f32"), load("x", I)),
                                               write(ir.Var("x", "f32")))),
                 "nest copy: name x is introduced twice (or is also a buffer)", id="scalar-named-as-a-buffer"),
    pytest.param(lambda: copy_kernel(copy_nest(ir.Assign(T32, F32), *COPY)),
                 "nest copy: assignment to t, not a scalar in scope", id="assign-undeclared"),
    pytest.param(lambda: copy_kernel(copy_nest(ir.Declare(T32, F32), ir.Assign(ir.Var("t", "f64"), F64),
                                               write(T32))),
                 "nest copy: assignment to t, not a scalar in scope", id="assign-of-another-type"),
    pytest.param(lambda: copy_kernel(copy_nest(ir.Stmt(), *COPY)), "nest copy: unknown statement", id="unknown-stmt"),
    pytest.param(lambda: copy_kernel(copy_nest(IN_LOOP, write(T32))),
                 "nest copy: scalar t : f32 read out of its scope", id="scalar-after-its-loop"),
    pytest.param(lambda: copy_kernel(copy_nest(write(load("x", I), Affine.var("j")))),
                 "nest copy: index variable j is neither an axis nor an i64 scalar in scope", id="index-unknown"),
    pytest.param(lambda: copy_kernel(copy_nest(ir.Declare(T32, F32), write(load("x", Affine.var("t"))))),
                 "nest copy: index variable t is neither an axis nor an i64 scalar in scope", id="index-by-a-float"),
    pytest.param(lambda: copy_kernel(copy_nest(write(ir.Convert(Affine.var("j"), "f32")))),
                 "nest copy: index variable j is neither an axis nor an i64 scalar in scope",
                 id="affine-value-unknown"),
    pytest.param(lambda: copy_kernel(copy_nest(write(load("z", I)))), "nest copy: access to unknown buffer z",
                 id="unknown-buffer"),
    pytest.param(lambda: copy_kernel(copy_nest(write(ir.Convert(load("x", I, type_="f64"), "f32")))),
                 "nest copy: x[i] typed f64; the buffer holds f32", id="access-type"),
    pytest.param(lambda: copy_kernel(copy_nest(write(load("x", I, I)))),
                 "nest copy: x[i,i]: 2 indices into a buffer of shape (4,)", id="access-rank"),
    pytest.param(lambda: copy_kernel(copy_nest(write(load("x", 2 + I * -1)))),
                 "nest copy: x[-i + 2]: index -i + 2 spans [-1, 2], outside [0, 4)", id="reversed-index-below-0"),
]


@pytest.mark.parametrize("build, message", KERNELS)
def test_a_malformed_kernel_is_refused_by_the_checker(build, message):
    with pytest.raises(IRError) as caught:
        build()
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_reversed_index_spans_the_other_way_and_the_kernel_prints_whole():
    """x[3 - i] over i<4 reads [0, 3]: in bounds. A kernel without attributes prints its
    header without parentheses; its buffers are found by name, and only by name."""
    kernel = copy_kernel(copy_nest(write(load("x", 3 + I * -1))))
    assert kernel.text() == (
        "kernel copy at f32\n"
        "  input x : f32[4]\n"
        "  output y : f32[4]\n"
        "nest copy: parallel i<4\n"
        "  y[i] = x[-i + 3]"
    )
    assert kernel.buffer("y") is Y
    with pytest.raises(KeyError, match="'z'"):
        kernel.buffer("z")


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


LINEAR = lower("linear", "f32", {"x": (5, 7), "w": (19, 7)}, {})

LAYERNORM = lower("layernorm", "f32", {"x": (3, 8), "g": (8,), "b": (8,)}, {})

ADD = lower("add", "f32", {"a": (3,), "b": (3,)}, {})

ADD_OVER_T = lower("add", "f32", {"a": (T8, 4), "b": (T8, 4)}, {})

QLINEAR_I = lower("qlinear_i", "f32", {"xq": (3, 10), "xd": (3, 3), "wq": (5, 6), "wd": (5, 3)},
                  {"fmt": "q4", "block": 4})

# w's panel for one chunk of 8 lanes on n: 8 * 8193 elements, over the pack's limit by 8
LINEAR_WIDE = lower("linear", "f32", {"x": (1, 8193), "w": (8, 8193)}, {})


def validate(kernel: ir.Kernel, layout: Layout = Layout(), split: Split | None = None) -> None:
    validate_plan(kernel, Plan(((kernel.nests[0].name, NestPlan(layout, split)),)))


# (kernel, layout, the start of the message)
LAYOUTS = [
    pytest.param(LINEAR, Layout(tiles=(("n", 4), ("n", 8))), "plan: nest linear, field layout.tiles: an axis is tiled "
                 "twice", id="tiled-twice"),
    pytest.param(LINEAR, Layout(lanes=(("n", 4), ("n", 8))), "plan: nest linear, field layout.lanes: an axis has lanes "
                 "twice", id="laned-twice"),
    pytest.param(LINEAR, Layout(lanes=(("n", 4),), packs=("w", "w")),
                 "plan: nest linear, field layout.packs: a buffer is packed twice", id="packed-twice"),
    pytest.param(LINEAR_WIDE, Layout(lanes=(("n", 8),), packs=("w",)),
                 "plan: nest linear, field layout.packs.w: the panel of w has 65544 elements; a pack holds at most "
                 "65536", id="pack-over-its-limit"),
    pytest.param(LINEAR, Layout(blocks=(("q", 4),)),
                 "plan: nest linear, field layout.blocks.q: the nest has no reduction 'q'; its reductions are k",
                 id="block-of-no-axis"),
    pytest.param(ADD, Layout(blocks=(("q", 4),)),
                 "plan: nest add, field layout.blocks.q: the nest has no reduction 'q'; its reductions are none",
                 id="block-without-reductions"),
    pytest.param(LAYERNORM, Layout(blocks=(("dy", 4),)),
                 "plan: nest layernorm, field layout.blocks.dy: dy is a parallel axis; blocks apply to reductions "
                 "(tile a parallel axis)", id="block-of-a-parallel-body-loop"),
    pytest.param(LINEAR, Layout(blocks=(("k", 0),)),
                 "plan: nest linear, field layout.blocks.k: block size 0 must be an integer >= 1", id="block-0"),
    pytest.param(LINEAR, Layout(blocks=(("k", True),)),
                 "plan: nest linear, field layout.blocks.k: block size True must be an integer >= 1", id="block-bool"),
    pytest.param(LINEAR, Layout(blocks=(("k", 2), ("k", 3))),
                 "plan: nest linear, field layout.blocks: a reduction is blocked twice", id="blocked-twice"),
    pytest.param(LAYERNORM, Layout(sums=(("dy", 1, 1),)),
                 "plan: nest layernorm, field layout.sums.dy: dy is a parallel loop of the body; sums apply to integer "
                 "reductions (the nest's reductions: ds, dv)", id="sum-of-a-parallel-body-loop"),
    pytest.param(LAYERNORM, Layout(sums=(("q", 1, 1),)),
                 "plan: nest layernorm, field layout.sums.q: q is not a loop of the nest; sums apply to integer "
                 "reductions (the nest's reductions: ds, dv)", id="sum-of-no-loop"),
    pytest.param(ADD, Layout(sums=(("i", 1, 1),)),
                 "plan: nest add, field layout.sums.i: i is a parallel axis; sums apply to integer reductions "
                 "(the nest's reductions: none)", id="sum-without-reductions"),
    pytest.param(QLINEAR_I, Layout(sums=(("k", 2, 1), ("k", 4, 1))),
                 "plan: nest qlinear_i, field layout.sums: a reduction is summed twice", id="summed-twice"),
]


@pytest.mark.parametrize("kernel, layout, message", LAYOUTS)
def test_an_illegal_layout_is_refused_by_nest_field_and_rule(kernel, layout, message):
    with pytest.raises(LayoutError) as caught:
        validate(kernel, layout)
    assert str(caught.value) == message


def test_a_pack_at_its_limit_is_legal():
    validate(lower("linear", "f32", {"x": (1, 8192), "w": (8, 8192)}, {}), Layout(lanes=(("n", 8),), packs=("w",)))


def _two_sums(coupled: bool) -> ir.Kernel:
    """s and t summed over k<4 from q; coupled, s adds t (a term that reads an accumulator)."""
    q = ir.Buffer("q", "int32_t", (4,), "input")
    y = ir.Buffer("y", "int32_t", (1,), "output")
    k = Affine.var("k")
    s, t = ir.Var("s", "i32"), ir.Var("t", "i32")
    zero = ir.Convert(Affine.constant(0), "i32")
    term = ir.Load(ir.Access("q", "i32", (k,)))
    body = (
        ir.Declare(s, zero),
        ir.Declare(t, zero),
        ir.Loop(ir.Axis("k", 4, REDUCE), (ir.Assign(s, ir.Binary("+", s, t if coupled else term)),
                                         ir.Assign(t, ir.Binary("+", t, term)))),
        ir.Write(ir.Access("y", "i32", (Affine.var("m"),)), ir.Binary("+", s, t)),
    )
    nest = ir.Nest("isum", (ir.Axis("m", 1),), body)
    return ir.Kernel("isum", "f32", {}, (q, y), (nest,), (ir.launch(nest, (q, y)),))


def test_an_integer_sum_whose_term_reads_an_accumulator_is_not_reassociated():
    assert integer_sum_rule(_two_sums(coupled=False).nests[0], "k") is None
    validate(_two_sums(coupled=False), Layout(sums=(("k", 4, 2),)))
    coupled = _two_sums(coupled=True)
    assert integer_sum_rule(coupled.nests[0], "k") == "k: a term of the sum reads an accumulator, so its order matters"
    with pytest.raises(LayoutError, match="field layout.sums.k: k: a term of the sum reads an accumulator"):
        validate(coupled, Layout(sums=(("k", 4, 2),)))


def test_a_layout_given_as_dicts_is_the_layout_of_pairs():
    assert Layout(tiles={"n": 4}, lanes={"n": 2}, blocks={"k": 3}) == Layout(
        tiles=(("n", 4),), lanes=(("n", 2),), blocks=(("k", 3),))


@pytest.mark.parametrize("base, taken, expected", [
    ("acc", {"acc", "acc2"}, "acc3"),  # the first free number
    ("lo", set(), "lo2"),  # the nest function's range parameters are never taken
    ("hi", {"hi2"}, "hi3"),
    ("n_c", {"acc"}, "n_c"),
])
def test_a_fresh_name_avoids_the_taken_names_and_the_range_parameters(base, taken, expected):
    taken = set(taken)
    assert fresh_name(base, taken) == expected
    assert expected in taken


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


SPLIT_RULE = ("give an object with exactly 'depth' and 'pieces' (and 'of' for an axis that follows the run-time "
              "length)")

# (decoded JSON, the whole message)
PLAN_FILES = [
    pytest.param([], 'plan: nest -, field (top): a plan is an object {"nests": {...}} (and an optional "comment")',
                 id="not-an-object"),
    pytest.param({"nests": []}, "plan: nest -, field nests: give an object nest name -> nest plan", id="nests-list"),
    pytest.param({"nests": {"linear": 3}},
                 "plan: nest linear, field nests.linear: give an object with 'layout' and/or 'split'",
                 id="nest-number"),
    pytest.param({"nests": {"linear": {"layout": []}}},
                 "plan: nest linear, field layout: give an object with fields order, tiles, lanes, packs, blocks, sums",
                 id="layout-list"),
    pytest.param({"nests": {"linear": {"layout": {"sums": [1]}}}},
                 'plan: nest linear, field layout.sums: give an object axis -> {"lanes": W, "parts": P}, not [1]',
                 id="sums-list"),
    pytest.param({"nests": {"linear": {"layout": {"sums": {"k": {"lanes": 1.5}}}}}},
                 "plan: nest linear, field layout.sums.k: lanes must be an integer, not 1.5", id="sum-lanes-float"),
    pytest.param({"nests": {"linear": {"layout": {"tiles": [["n", 4]]}}}},
                 "plan: nest linear, field layout.tiles: give an object axis -> tile size, not [['n', 4]]",
                 id="tiles-list"),
    pytest.param({"nests": {"linear": {"split": [0]}}}, f"plan: nest linear, field split: {SPLIT_RULE}",
                 id="split-list"),
    pytest.param({"nests": {"linear": {"split": {"depth": 0}}}}, f"plan: nest linear, field split: {SPLIT_RULE}",
                 id="split-without-pieces"),
    pytest.param({"nests": {"linear": {"split": {"depth": 0, "pieces": [[0, 5]], "cut": 1}}}},
                 f"plan: nest linear, field split: {SPLIT_RULE}", id="split-unknown-field"),
    pytest.param({"nests": {"linear": {"split": {"depth": 0, "pieces": [[0, 5.0]]}}}},
                 "plan: nest linear, field split.pieces.0: hi must be an integer, not 5.0", id="piece-float"),
    pytest.param({"nests": {"linear": {"split": {"depth": 0, "pieces": [[0, 5]], "of": "2"}}}},
                 "plan: nest linear, field split.of: of must be an integer, not '2'", id="of-text"),
]


@pytest.mark.parametrize("value, message", PLAN_FILES)
def test_a_badly_typed_plan_is_refused_by_nest_and_field(value, message):
    with pytest.raises(PlanError) as caught:
        parse_plan(value)
    assert str(caught.value) == message


def test_a_plan_option_naming_no_file_is_refused(tmp_path):
    missing = tmp_path / "plan.json"
    with pytest.raises(PlanError) as caught:
        load_plan_option(str(missing))
    assert str(caught.value) == (f"plan: nest -, field (file): {missing}: no such file; "
                                 "give a plan file, `auto` or `none`")
    assert load_plan_option(None) is None and load_plan_option("none") is None


def plan_arguments(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="exactc plan")
    add_arguments(parser)
    return parser.parse_args(argv)


def test_plan_arguments_read_shapes_and_json_attributes():
    """An --attr value is JSON when it parses as JSON, else the text itself."""
    args = plan_arguments("rope", "--shape", "x=2,1,4", "--shape", "s=", "--attr", "pairing=interleaved",
                          "--attr", "pos0=3", "--attr", "has_b=true")
    assert args.shape == [("x", (2, 1, 4)), ("s", ())]
    assert args.attr == [("pairing", "interleaved"), ("pos0", 3), ("has_b", True)]


@pytest.mark.parametrize("argv, message", [
    (("--shape", "x"), "argument --shape: --shape 'x': give name=d0,d1,... (e.g. x=3,4)"),
    (("--shape", "x=3,four"), "argument --shape: --shape 'x=3,four': give name=d0,d1,... (e.g. x=3,4)"),
    (("--attr", "has_b"), "argument --attr: --attr 'has_b': give name=value (JSON value, e.g. has_b=true)"),
])
def test_a_malformed_plan_argument_is_a_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        plan_arguments("linear", *argv)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_plan_show_without_a_primitive_is_refused():
    with pytest.raises(PrimitiveError) as caught:
        show_command(plan_arguments())
    assert str(caught.value) == "name a primitive (--show linear --shape x=3,4 --shape w=5,4)"


@pytest.mark.parametrize("argv, message", [
    (("add", "--dtype", "f16", "--shape", "a=2", "--shape", "b=2"),
     "add: unknown site type 'f16'; exactc knows f64, f32, bf16"),
    (("--show", "linear", "--shape", "x=2,3"),
     "linear: operands ['x'] given; with these attributes it takes ['x', 'w']"),
])
def test_plan_show_passes_a_refused_call_on_whole(argv, message):
    with pytest.raises(PrimitiveError) as caught:
        show_command(plan_arguments(*argv))
    assert str(caught.value) == message


@pytest.mark.parametrize("attr, message", [
    ('pairing=["half"]', "rope: attribute pairing is ['half']; a list attribute holds ints (a shape, a permutation)"),
    ("theta=1" + "0" * 400, "rope: attribute theta is an integer of 401 digits; it must be a real number within "
                            "f64's range"),
])
def test_plan_show_refuses_an_attribute_the_lowering_cannot_read(attr, message):
    """An attribute list of names, or an integer past f64's range: a refusal naming the
    attribute and the rule (the CLI's exit 2 with one line), not a bare ValueError."""
    with pytest.raises(PrimitiveError) as caught:
        show_command(plan_arguments("rope", "--shape", "x=2,1,4", "--attr", attr))
    assert str(caught.value) == message


def test_plan_show_turns_any_other_lowering_error_into_a_refusal(monkeypatch):
    """A ValueError or KeyError of the lowering that is not a PrimitiveError becomes one,
    its cause suppressed: one line, whatever the lowering raised."""
    lowering = importlib.import_module("exactc.exporter.kernels.lower")  # the module, not its function

    def broken(*args, **kwargs):
        raise KeyError("nests")

    monkeypatch.setattr(lowering, "lower", broken)
    with pytest.raises(PrimitiveError) as caught:
        show_command(plan_arguments("--show", "add", "--shape", "a=3", "--shape", "b=3"))
    assert "nests" in str(caught.value) and caught.value.__suppress_context__


def test_plan_show_lists_no_body_loops_for_a_nest_without_them(capsys):
    assert show_command(plan_arguments("--show", "add", "--shape", "a=3", "--shape", "b=3")) == 0
    shown = capsys.readouterr().out
    assert shown == describe_choices(ADD) + "\n"
    assert shown.splitlines()[:4] == ["kernel add at f32", "nest add", "  parallel axes (outermost first): i<3",
                                      "  layout.order: any order of i"]
    assert "body loops" not in shown
