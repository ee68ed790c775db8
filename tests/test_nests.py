"""The plain nests' printer (exporter/printer/nests.py): prefix guards, array functions'
loops, extents and their names, strides, bit fills, renamed indices."""

from __future__ import annotations

import pytest

from exactc.exporter import dims
from exactc.exporter.kernels import ir
from exactc.exporter.kernels.ir import IRError

# ---- the plain nests' printer: a prefix guard, renamed scalars inside an index, isnan kept
# whole, no extent named like a C macro


def _guarded(cond, then, orelse=()):
    """for j < 8: if (cond) then [else orelse]"""
    return ir.Loop(ir.Axis("j", 8), (ir.If(cond, tuple(then), tuple(orelse)),))


def test_a_prefix_guard_is_exactly_j_at_most_a_bound_free_of_j():
    from exactc.exporter.printer.nests import array_loop, prefix_guard

    j, i = ir.Affine.var("j"), ir.Affine.var("i")
    fill = ir.FillBits(ir.Access("y", "f32", (j,)), 0)
    assert prefix_guard(_guarded(ir.Binary("<=", j, i), [fill])) == (i, (fill,), ())
    for cond in (ir.Binary("<", j, i),  # another comparison
                 ir.Binary("<=", ir.Affine((("j", 1),), 1), i),  # j + 1 <= i
                 ir.Binary("<=", ir.Affine((("j", 2),), 0), i),  # 2 j <= i
                 ir.Binary("<=", j, ir.Affine((("i", 1), ("j", 1)), 0))):  # a bound that moves with j
        assert prefix_guard(_guarded(cond, [fill])) is None, cond.text()
    # an array function's loop: a guarded exp with an else is not one
    x = ir.Load(ir.Access("x", "f32", (j,)))
    write = ir.Write(ir.Access("y", "f32", (j,)), ir.Call("exp", x))
    assert array_loop(_guarded(ir.Binary("<=", j, i), [write])) == (write, i)
    assert array_loop(_guarded(ir.Binary("<=", j, i), [write], [fill])) is None


def test_the_body_printer_renames_inside_an_index_and_keeps_isnan_whole():
    from exactc.exporter.printer.nests import BodyPrinter

    printer = BodyPrinter({}, None)
    printer.rename = {"j": "j_0"}
    assert printer.expr(ir.Affine((("j", 2), ("i", 1)), 1)) == "(j_0 * 2 + i + 1)"
    v = ir.Var("v", "f32")
    assert printer.bare(ir.Unary("isnan", v)) == "isnan(v)"
    assert printer.bare(ir.Unary("-", v)) == "-v"


def test_no_extent_is_named_like_a_macro_of_the_c_headers():
    from exactc.exporter.printer.nests import Extents

    def names(axis_name: str, taken=()) -> dict:
        axis = ir.Axis(axis_name, 3)
        fill = ir.FillBits(ir.Access("y", "f32", (ir.Affine.var(axis_name),)), 0)
        nest = ir.Nest("k", (axis,), (fill,))
        return Extents(nest, {"y": ir.Buffer("y", "float", (3,), "output")}, set(taken)).value

    assert names("n") == {"N": 3}
    assert names("nan") == {} and names("eof") == {}  # macros of their own
    assert names("flt_x") == {} and names("int8") == {}  # the prefixes of the headers' families
    assert names("n", taken={"N"}) == {}  # a name the kernel already holds


# ---- the plain nests' printer, continued (printer/nests.py): extents named past an unnamed
# one, a shared name only at one extent, a bit fill at its type's width, an index renamed and a
# constant times a run-time stride, the refusals whole


def _extents(axes, body_axes, reads, shapes, taken=()):
    """Extents of a nest over `axes` whose body loops `body_axes` (reductions, nested)
    write y[axes[0]] from the reads (buffer, axis) of buffers of `shapes`."""
    from exactc.exporter.printer.nests import Extents
    value = None
    for buffer, axis in reads:
        load = ir.Load(ir.Access(buffer, "f32", (ir.Affine.var(axis),)))
        value = load if value is None else ir.Binary("+", value, load)
    body = (ir.Write(ir.Access("y", "f32", (ir.Affine.var(axes[0][0]),)), value),)
    for name, extent in reversed(body_axes):
        body = (ir.Loop(ir.Axis(name, extent, ir.REDUCE), body),)
    nest = ir.Nest("k", tuple(ir.Axis(n, e) for n, e in axes), body)
    buffers = {name: ir.Buffer(name, "float", shape, "output" if name == "y" else "input")
               for name, shape in shapes.items()}
    return Extents(nest, buffers, set(taken))


def test_extents_past_int_max_stay_numbers_and_the_rest_are_still_named():
    big = 2**31
    ex = _extents([("m", big)], [("n", 4)], [("x", "n")], {"y": (big,), "x": (4,)})
    assert ex.value == {"N": 4} and ex.of_axis == {"n": "N"}
    ex = _extents([("m", big - 1)], [], [("x", "m")], {"y": (big - 1,), "x": (big - 1,)})
    assert ex.value == {"M": big - 1}


def test_extents_share_a_name_at_one_extent_only_and_fall_back_to_the_first_axis_name():
    # ab and ac run over x's one dimension: one group, named by their common prefix, or
    # (A taken) by the first axis's name
    ex = _extents([("ab", 4)], [("ac", 4)], [("x", "ab"), ("x", "ac")], {"y": (4,), "x": (4,)}, taken={"A"})
    assert ex.value == {"AB": 4} and ex.of_axis == {"ab": "AB", "ac": "AB"}
    # na and nb over x (prefix N) and n over z: N is shared at the same extent, not at another
    shapes = {"y": (4,), "x": (4,), "z": (4,)}
    ex = _extents([("na", 4)], [("nb", 4), ("n", 4)], [("x", "na"), ("x", "nb"), ("z", "n")], shapes)
    assert ex.value == {"N": 4} and ex.of_axis == {"na": "N", "nb": "N", "n": "N"}
    ex = _extents([("na", 4)], [("nb", 4), ("n", 5)], [("x", "na"), ("x", "nb"), ("z", "n")], {**shapes, "z": (5,)})
    assert ex.value == {"N": 4} and ex.of_axis == {"na": "N", "nb": "N"}


def test_a_stride_multiplies_a_run_of_unnamed_extents():
    ex = _extents([("m", 4)], [], [("x", "m")], {"y": (4,), "x": (4,)})
    assert ex.stride("q", (2, 3, 4), 0) == ["12"] and ex.stride("q", (2, 3, 4), 2) == []


def test_the_body_printer_fills_bits_at_their_width_and_renames_inside_any_index():
    from exactc.exporter.printer.nests import BodyPrinter, Extents, _terms_text, affine_text
    length, j = dims.length(8), ir.Affine.var("j")
    y = ir.Buffer("y", "double", (2, length), "output")
    fill = ir.FillBits(ir.Access("y", "f64", (ir.Affine.constant(1), j)), 1)
    nest = ir.Nest("k", (ir.Axis("j", 3),), (fill,))
    printer = BodyPrinter({"y": y}, Extents(nest, {"y": y}, set()))
    assert printer.statement(fill, 1) == [
        "    memcpy(&y[T + j], &(const uint64_t){UINT64_C(0x0000000000000001)}, sizeof *y);"]
    printer.rename = {"j": "j_0"}
    assert printer.access(ir.Access("y", "f64", (ir.Affine.constant(1), j))) == "y[T + j_0]"
    assert printer.access(ir.Access("y", "f64", (j,))) == "y[j_0]"  # one entry: the flat offset
    assert _terms_text([("", 2, ["T"])], 0, {}) == "2 * T"
    assert affine_text(ir.Affine((("m", -1),), 5)) == "-m + 5"
    assert affine_text(ir.Affine((("m", -2), ("n", 1)), 0)) == "-m * 2 + n"
    with pytest.raises(IRError) as caught:
        printer.statement("pass", 0)
    assert str(caught.value) == "the printer does not know statement 'pass'"
    with pytest.raises(IRError) as caught:
        printer.expr("x + 1")
    assert str(caught.value) == "the printer does not know expression 'x + 1'"
