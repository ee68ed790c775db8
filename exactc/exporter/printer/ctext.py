"""Pieces of C text every printer uses (the kernels', the planned kernels', the hosts'):
indentation, shapes, comments, parameter lists, calls, constants.

The printed C has one brace style, llama2.c's and the runtime's: every opening brace on
the line that opens the block, functions included.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from exactc.exporter.kernels.ir import IRError, float_literal

INDENT = "    "


def shape_text(shape: Iterable[int]) -> str:
    """A shape as Python writes a tuple: `(6, 16)`, `(16,)`."""
    shape = tuple(shape)
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(d) for d in shape) + ")"


def comment_block(lines: list[str]) -> list[str]:
    """A C comment of several lines; refuses text that would close it early."""
    for line in lines:
        if "*/" in line or "/*" in line:
            raise IRError(f"comment text {line!r} would break the C comment")
    return ["/* " + lines[0]] + [(" * " + line).rstrip() for line in lines[1:]] + [" */"]


def wrap_comment(text: str, width: int = 92) -> list[str]:
    """A one-paragraph C comment, wrapped."""
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = " *"
        line = f"{line} {word}" if line else word
    lines.append(line)
    return lines


def banner(title: str) -> list[str]:
    """A section's banner, as the runtime's files cut theirs."""
    return [
        "/* ------------------------------------------------------------------------------------",
        *(f" * {line}".rstrip() for line in title.splitlines()),
        " * ---------------------------------------------------------------------------------- */",
    ]


def signature_lines(head: str, params: list[tuple[str, str]]) -> list[str]:
    """A function's head, one parameter a line with its note aligned beside it, ending
    with the body's opening brace: `head(p1,  /* note */ ... pn) {  /* note */`."""
    if not params:
        return [f"{head}(void) {{"]
    lead = " " * (len(head) + 1)
    texts = [p + ("," if k < len(params) - 1 else ") {") for k, (p, _) in enumerate(params)]
    width = max(len(t) for t in texts) + 1
    out = []
    for k, (text, (_, note)) in enumerate(zip(texts, params)):
        start = f"{head}(" if k == 0 else lead
        out.append(f"{start}{text:<{width}} /* {note} */")
    return out


def call_lines(name: str, args: list[str], pad: str) -> list[str]:
    """`name(args);`, one argument per line when the call is long."""
    one = f"{pad}{name}({', '.join(args)});"
    if len(one) <= 100:
        return [one]
    head = f"{pad}{name}("
    if len(args) == 1:  # a long name with one argument (a fill kernel's): nothing to break
        return [f"{head}{args[0]});"]
    lead = " " * len(head)
    return [head + args[0] + ","] + [f"{lead}{a}," for a in args[1:-1]] + [f"{lead}{args[-1]});"]


def decimal_text(value: float, type_: str) -> str:
    """The shortest decimal that reads back as `value` at `type_`: 1e-05, 0.5, 16."""
    text = str(np.float32(value)) if type_ == "f32" else repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def constant(value: float, type_: str) -> str:
    """An f64 or f32 constant: its exact hexadecimal literal, and beside it, when that is
    not already plain, the decimal it stands for: `0x1.4f8b58p-17f /* 1e-05 */`."""
    literal = float_literal(value, type_, c=True)
    if "0x" not in literal:
        return literal
    return f"{literal} /* {decimal_text(value, type_)} */"
