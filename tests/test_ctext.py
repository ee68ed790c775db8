"""The printers' C text helpers (exporter/printer/ctext.py): shapes, comments, banners,
signatures, calls and constants, each pinned to the exact text."""

from __future__ import annotations

import re

import numpy as np
import pytest

from exactc.exporter.kernels.ir import IRError
from exactc.exporter.printer import ctext

# ---- the printers' C text


def test_ctext_shapes_as_python_writes_tuples():
    assert ctext.shape_text((16,)) == "(16,)"
    assert ctext.shape_text((6, 16)) == "(6, 16)"
    assert ctext.shape_text([2, 3, 4]) == "(2, 3, 4)"


def test_ctext_comment_block_and_its_refusals():
    assert ctext.comment_block(["a", "b", ""]) == ["/* a", " * b", " *", " */"]
    assert ctext.comment_block(["only"]) == ["/* only", " */"]
    assert ctext.comment_block(["one", "two "]) == ["/* one", " * two", " */"]  # trailing spaces dropped
    for bad in ("x */", "/* x", "a */ b", "/* nested"):
        with pytest.raises(IRError, match=re.escape(f"comment text {bad!r} would break the C comment")):
            ctext.comment_block(["fine", bad])
        with pytest.raises(IRError, match=re.escape(f"comment text {bad!r} would break the C comment")):
            ctext.comment_block([bad])


def test_ctext_wrapped_comment_and_banner():
    assert ctext.wrap_comment("one two three four five six seven", width=10) == [
        "one two", " * three", " * four", " * five", " * six", " * seven"]
    assert ctext.wrap_comment("short") == ["short"]
    assert ctext.wrap_comment("aaaa bbbbb", width=10) == ["aaaa bbbbb"]  # exactly the width: one line
    assert ctext.wrap_comment("x" * 45 + " " + "y" * 46) == ["x" * 45 + " " + "y" * 46]  # 92 columns
    assert ctext.wrap_comment("x" * 46 + " " + "y" * 46) == ["x" * 46, " * " + "y" * 46]  # 93: split
    dashes = "-" * 84
    assert ctext.banner("a\nb ") == [f"/* {dashes}", " * a", " * b", f" * {dashes[:-2]} */"]


def test_ctext_signature_aligns_its_notes():
    assert ctext.signature_lines("void k", []) == ["void k(void) {"]
    assert ctext.signature_lines("static void run", []) == ["static void run(void) {"]
    assert ctext.signature_lines("void k", [("float *x", "in"), ("int64_t n", "count")]) == [
        "void k(float *x,     /* in */",
        "       int64_t n) {  /* count */",
    ]


def test_ctext_calls_split_past_100_columns():
    assert ctext.call_lines("f", ["a", "b"], "    ") == ["    f(a, b);"]
    args = ["x" * 30, "y" * 30, "z" * 29]  # 100 columns on one line: kept
    assert ctext.call_lines("fn", args, "  ") == [f"  fn({', '.join(args)});"]
    args[-1] += "z"  # 101: one argument a line, aligned under the first
    assert ctext.call_lines("fn", args, "  ") == [
        f"  fn({args[0]},", f"     {args[1]},", f"     {args[2]});"]
    long = "f" * 90  # past 100 columns with its one argument: the argument once
    assert ctext.call_lines(long, ["y" * 20], "    ") == [f"    {long}({'y' * 20});"]


def test_ctext_constants_and_their_decimals():
    f32 = float(np.float32(1e-05))
    assert ctext.constant(f32, "f32") == "0x1.4f8b58p-17f /* 1e-05 */"
    assert ctext.constant(16.0, "f64") == "0x1p+4 /* 16 */"
    assert ctext.constant(0.0, "f32") == "0.0f"
    assert ctext.decimal_text(256.0, "f64") == "256"
    assert ctext.decimal_text(0.5, "f64") == "0.5"
    assert ctext.decimal_text(1 / 3, "f64") == "0.3333333333333333"  # not the float's 0.33333334
    assert ctext.decimal_text(1 / 3, "f32") == "0.33333334"
