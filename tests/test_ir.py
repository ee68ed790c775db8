"""The kernel IR (exporter/kernels/ir.py): its nodes refused when malformed, held in their
own types, float literals in C and in the IR text, and the checker of a whole kernel."""

from __future__ import annotations

import pytest

from exactc.exporter import dims
from exactc.exporter.kernels import ir
from exactc.exporter.kernels.ir import REDUCE, Affine, IRError

# ---- the kernel IR: its statements, literals, nodes and checker


def test_fill_bits_takes_every_pattern_of_its_type_and_no_wider():
    for type_, width, digits in (("f64", 64, 16), ("f32", 32, 8), ("bf16", 16, 4), ("i32", 32, 8)):
        dst = ir.Access("y", type_, (0,))
        for bits in (0, (1 << width) - 1):
            assert ir.FillBits(dst, bits).lines(1) == [f"  y[0] = bits(0x{bits:0{digits}x})"]
        for bits in (-1, 1 << width):
            with pytest.raises(IRError) as caught:
                ir.FillBits(dst, bits)
            assert str(caught.value) == f"bit pattern {bits:#x} does not fit a {type_}"


def test_loops_and_ifs_hold_their_bodies_as_tuples():
    fill = ir.FillBits(ir.Access("y", "f32", (ir.Affine.var("j"),)), 0)
    loop = ir.Loop(ir.Axis("j", 4), [fill])
    assert loop.body == (fill,)
    cond = ir.Binary("<=", ir.Affine.var("j"), ir.Affine.constant(2))
    branch = ir.If(cond, [fill], [fill, fill])
    assert branch.then == (fill,) and branch.orelse == (fill, fill)


def test_float_literals_in_c_and_in_the_ir_text():
    inf = float("inf")
    assert [ir.float_literal(v, t) for v, t in ((inf, "f32"), (inf, "f64"), (-inf, "f32"), (-inf, "f64"))] == [
        "HUGE_VALF", "HUGE_VAL", "(-HUGE_VALF)", "(-HUGE_VAL)"]
    assert [ir.float_literal(v, "f64", c=False) for v in (inf, -inf)] == ["inf", "(-inf)"]
    assert [ir.Const(v, "f32").text() for v in (inf, -inf)] == ["inf", "(-inf)"]
    assert [ir.float_literal(v, t) for v, t in ((0.0, "f64"), (-0.0, "f64"), (0.0, "f32"), (-0.0, "f32"))] == [
        "0.0", "(-0.0)", "0.0f", "(-0.0f)"]
    assert [ir.float_literal(v, "f64") for v in (0.5, 1.0, -0.5, 1.5)] == [
        "0x1p-1", "0x1p+0", "(-0x1p-1)", "0x1.8p+0"]
    assert ir.float_literal(-3.0, "f32") == "(-0x1.8p+1f)"


def test_ir_nodes_hold_what_they_are_given_in_their_own_types():
    buf = ir.Buffer("x", "float", [2, 3], "input")
    assert buf.shape == (2, 3) and isinstance(buf.shape, tuple)
    const = ir.Const(1, "f64")
    assert const.value == 1.0 and type(const.value) is float
    assert ir.Var("ok", "bool").type == "bool"
    for name, rule in (("1v", "is not a C identifier"), ("exactc_v", "is reserved by the printed C")):
        with pytest.raises(IRError) as caught:
            ir.Var(name, "f32")
        assert str(caught.value) == f"scalar name {name!r} {rule}"
    with pytest.raises(IRError) as caught:
        ir.Var("v", "f16")
    assert str(caught.value) == "scalar v: type 'f16' is not f64, f32, i64, i32 or bool"
    # integers and floats never meet in one operation, nor in a comparison or a bit operation
    i, f = ir.Affine.var("i"), ir.Var("v", "f32")
    for op in ("&", "<"):
        for a, b in ((i, f), (f, i)):
            with pytest.raises(IRError) as caught:
                ir.Binary(op, a, b)
            assert str(caught.value) == f"operator {op!r} on {a.type} and {b.type}: {a.text()} {op} {b.text()}"
    assert ir.Affine((("i", -2), ("j", 1)), -3).text() == "-2*i + j - 3"
    assert ir.Affine((("j", 1), ("i", -1)), 0).text() == "j - i"


def test_an_affine_merges_repeated_names_and_drops_zero_terms():
    assert ir.Affine((("i", 1), ("j", 3), ("i", 2)), 4).terms == (("i", 3), ("j", 3))
    assert ir.Affine((("i", 1), ("j", 0), ("i", -1)), 0).terms == ()
    assert ir.Affine((("k", 0),), 2).text() == "2"


def test_a_nest_is_named_like_c_and_holds_tuples():
    axis = ir.Axis("i", 2)
    fill = ir.FillBits(ir.Access("y", "f32", (ir.Affine.var("i"),)), 0)
    nest = ir.Nest("n", [axis], [fill])
    assert nest.axes == (axis,) and nest.body == (fill,)
    with pytest.raises(IRError) as caught:
        ir.Nest("2n", [axis], [fill])
    assert str(caught.value) == "nest name '2n' is not a C identifier"


def _checked_kernel(body, x_shape=(2, 3), axes=(("i", 2),)):
    """A kernel of one nest over `axes` reading x of `x_shape` and writing y (2,): the IR
    checker runs as it is made."""
    bufs = (ir.Buffer("x", "float", x_shape, "input"), ir.Buffer("y", "float", (2,), "output"))
    nest = ir.Nest("n", tuple(ir.Axis(a, e) for a, e in axes), tuple(body))
    return ir.Kernel("add", "f32", {}, list(bufs), [nest], [ir.launch(nest, bufs)])  # lists: held as tuples


def test_the_ir_checker_bounds_every_index_by_its_own_dimension_and_the_run_time_length():
    i, T = ir.Affine.var("i"), ir.Affine.var(dims.SYMBOL)

    def load(*index):
        return ir.Load(ir.Access("x", "f32", index))

    def write(value):
        return ir.Write(ir.Access("y", "f32", (i,)), value)

    def refusal(body, **shape) -> str:
        with pytest.raises(IRError) as caught:
            _checked_kernel(body, **shape)
        return str(caught.value)

    _checked_kernel([write(load(i, ir.Affine.constant(2)))])
    assert refusal([write(load(i, ir.Affine.constant(3)))]) == "nest n: x[i,3]: index 3 spans [3, 3], outside [0, 3)"
    # a scalar buffer: one index, 0
    _checked_kernel([write(load(ir.Affine.constant(0)))], x_shape=())
    assert refusal([write(load(ir.Affine.constant(1)))], x_shape=()) == (
        "nest n: x[1]: index 1 spans [1, 1], outside [0, 1)")
    assert refusal([write(load(i, ir.Affine.constant(0)))], x_shape=()) == (
        "nest n: x[i,0]: 2 indices into a buffer of shape ()")
    # the run-time length: T - 1 is the last row, T and T + i - 1 are past it
    rows = {"x_shape": (dims.length(4),)}
    _checked_kernel([write(load(T + ir.Affine.constant(-1)))], **rows)
    assert refusal([write(load(T))], **rows) == "nest n: x[T]: index T spans [T, T], outside [0, T)"
    assert refusal([write(load(ir.Affine(((dims.SYMBOL, 1), ("i", 1)), -1)))], **rows) == (
        "nest n: x[T + i - 1]: index T + i - 1 spans [T - 1, T], outside [0, T)")
    assert refusal([write(load(ir.Affine.var("q")))], **rows) == (
        "nest n: index variable q is neither an axis nor an i64 scalar in scope")
    # T in a kernel that has no run-time length is an unknown name
    assert refusal([write(load(T))], x_shape=(4,)) == (
        "nest n: index variable T is neither an axis nor an i64 scalar in scope")


def test_the_ir_checker_counts_an_index_as_a_read_and_names_every_unread_scalar():
    i = ir.Affine.var("i")
    k, a, b = ir.Var("k", "i64"), ir.Var("a", "f32"), ir.Var("b", "f32")
    x = lambda col: ir.Load(ir.Access("x", "f32", (i, col)))  # noqa: E731
    y = lambda value: ir.Write(ir.Access("y", "f32", (i,)), value)  # noqa: E731
    _checked_kernel([ir.Declare(k, ir.Affine.constant(1)), y(x(ir.Affine.var("k")))])  # k read as an index
    with pytest.raises(IRError) as caught:
        _checked_kernel([ir.Declare(a, x(ir.Affine.constant(0))), ir.Declare(b, x(ir.Affine.constant(1))),
                         y(x(ir.Affine.constant(2)))])
    assert str(caught.value) == "nest n: scalar(s) a, b declared but never read"
    kernel = _checked_kernel([y(x(ir.Affine.constant(2)))])
    assert all(isinstance(v, tuple) for v in (kernel.buffers, kernel.nests, kernel.launches))
    assert kernel.nests[0].writes() == ["y"]


T8 = dims.length(8)


# ---- the IR's nodes


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


# ---- the IR checker of a kernel


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
