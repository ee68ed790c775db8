"""Printing an integer sum under a layout's `sums` (exporter/kernels/layouts.py): the
loop `for k: s = s + term(k)` cut into parts, each summed in interleaved lanes.

    { /* k: an integer sum in 2 parts of 4 lanes, added last part first ... */
        int32_t s_k[2][4];
        for (int64_t k_p = 0; k_p < 2; k_p++) {
            ... s_k[k_p][k_l] = s_k[k_p][k_l] + term(k_c + k_l) over the part's full chunks,
            ... s_k[k_p][k - k_e] = ... + term(k) over the rest of the part
        }
        ... s = s + s_k[k_p][k_l], last part and last lane first
    }

Only exact int32 sums are given to it (layouts.integer_sum_rule), so every grouping
gives the sum's bits; the innermost lane loop is what compilers vectorize.
"""

from __future__ import annotations

from exactc.exporter.kernels.ir import Affine, Assign, Loop
from exactc.exporter.kernels.layouts import fresh_name
from exactc.exporter.printer.ctext import INDENT


def print_integer_sum(printer, loop: Loop, depth: int, lanes: int, parts: int, taken: set[str],
                      ctype: str) -> list[str]:
    """The C of `loop` (each statement `s = s + term`) as `parts` x `lanes` partial sums
    of C type `ctype`; `printer` prints the terms (a planned body printer: its
    `substitute` maps the loop axis to chunk + lane)."""
    axis, extent = loop.axis.name, printer.extent(loop.axis)
    part, lane, chunk, lo, hi, end = (fresh_name(f"{axis}_{x}", taken) for x in ("p", "l", "c", "lo", "hi", "e"))
    partial = {stmt.var.name: fresh_name(f"{stmt.var.name}_{axis}", taken) for stmt in loop.body}
    pad = INDENT * depth

    def adds(index: str, body_depth: int) -> list[str]:
        out = []
        for stmt in loop.body:
            assert isinstance(stmt, Assign)
            cell = f"{partial[stmt.var.name]}[{part}][{index}]"
            out.append(f"{INDENT * body_depth}{cell} = {cell} + {printer.expr(stmt.value.b)};")
        return out

    out = [f"{pad}{{ /* {axis}: an integer sum in {parts} part(s) of {lanes} lane(s), added last part first: "
           "exact in any order */"]
    out += [f"{pad}{INDENT}{ctype} {name}[{parts}][{lanes}];" for name in partial.values()]
    out.append(f"{pad}{INDENT}for (int64_t {part} = 0; {part} < {parts}; {part}++) {{")
    inner = INDENT * (depth + 2)
    out.append(f"{inner}for (int64_t {lane} = 0; {lane} < {lanes}; {lane}++) {{")
    out += [f"{inner}{INDENT}{name}[{part}][{lane}] = 0;" for name in partial.values()]
    out.append(f"{inner}}}")
    out.append(f"{inner}const int64_t {lo} = {part} * {extent} / {parts}, {hi} = ({part} + 1) * {extent} / {parts};")
    out.append(f"{inner}const int64_t {end} = {lo} + ({hi} - {lo}) / {lanes} * {lanes}; /* the full chunks end */")
    out.append(f"{inner}for (int64_t {chunk} = {lo}; {chunk} < {end}; {chunk} += {lanes}) {{")
    out.append(f"{inner}{INDENT}for (int64_t {lane} = 0; {lane} < {lanes}; {lane}++) {{")
    printer.substitute = {**printer.substitute, axis: Affine.var(chunk) + Affine.var(lane)}
    out += adds(lane, depth + 4)
    del printer.substitute[axis]
    out += [f"{inner}{INDENT}}}", f"{inner}}}"]
    out.append(f"{inner}for (int64_t {axis} = {end}; {axis} < {hi}; {axis}++) {{")
    out += adds(f"{axis} - {end}", depth + 3)
    out += [f"{inner}}}", f"{pad}{INDENT}}}"]
    out.append(f"{pad}{INDENT}for (int64_t {part} = {parts} - 1; {part} >= 0; {part}--) {{")
    out.append(f"{inner}for (int64_t {lane} = {lanes} - 1; {lane} >= 0; {lane}--) {{")
    for stmt in loop.body:
        var = printer.rename.get(stmt.var.name, stmt.var.name)
        out.append(f"{inner}{INDENT}{var} = {var} + {partial[stmt.var.name]}[{part}][{lane}];")
    out += [f"{inner}}}", f"{pad}{INDENT}}}", f"{pad}}}"]
    return out
