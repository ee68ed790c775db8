"""The kernel printer: a Kernel (exporter/kernels/ir.py) as one C11 source file, each
nest one function (printer/nests.py), or under a plan its layout and thread split
(printer/planned.py).

A nest's function is named for its kernel (`plans.function_name`: `linear_qkv`, or
`rope_q_table` for one of several nests); a split nest also gets a driver
`<function>_split`. A nest whose plan has a narrow or wide layout is printed under each,
the narrow one under `#if EXACTC_NARROW_LANES`, the wide one under `EXACTC_WIDE_LANES`
(exactc_rt.h). `print_kernel(kernel, name).cdef` declares the functions for cffi
with exactc_bf16 spelled `uint16_t`, so it needs no typedef; `.declarations` are the
same in C, for the program's kernels.h.

The file includes exactc_rt.h, which refuses a build that would break bit identity
(FLT_EVAL_METHOD other than 0, -ffast-math) and holds what the split drivers share.
Printing is a pure function of the kernel, the name and the plan: same input, same
bytes.
"""

from __future__ import annotations

import dataclasses
import re

from exactc.exporter.kernels.ir import IRError, Kernel
from exactc.exporter.kernels.autoplan import fuses
from exactc.exporter.kernels.plans import function_name
from exactc.exporter.primitives import shown_attrs
from exactc.exporter.printer.ctext import comment_block, shape_text
from exactc.exporter.printer.nests import KernelBuffers, nest_declaration, plain_function
from exactc.exporter.printer.planned import planned_function, split_declaration, split_driver

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# The macro (exactc_rt.h) under which each target variant of a layout is compiled; a
# fused nest's narrow layout has its own (its accumulators spill with gcc too).
VARIANT_MACROS = {"narrow": "EXACTC_NARROW_LANES", "wide": "EXACTC_WIDE_LANES"}
FUSED_VARIANT_MACROS = {"narrow": "EXACTC_NARROW_FMA_LANES", "wide": "EXACTC_WIDE_LANES"}


@dataclasses.dataclass(frozen=True)
class PrintedKernel:
    """C source of one kernel, its declarations (C and cffi), and its functions in
    launch order."""

    source: str
    cdef: str
    functions: tuple[str, ...]
    # Per launch: the extent of the function's (lo, hi) range, and the name of its split
    # driver (None when it has no split).
    ranges: tuple[int, ...]
    drivers: tuple[str | None, ...]
    declarations: tuple[str, ...]


def print_kernel(kernel: Kernel, name: str, plan=None, ahead: frozenset[str] = frozenset()) -> PrintedKernel:
    """The C text of `kernel`, its functions named after `name`.

    With a `plan` (a validated exporter.kernels.plans.Plan), the nests it names are
    printed under their layout, and each split gets a driver; the others print plain.
    The packs of the buffers in `ahead` are read where they lie: the caller passes those
    buffers laid out as their panels (printer/prepack.py)."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise IRError(f"kernel name {name!r} is not a C identifier")
    buffers = KernelBuffers(kernel)
    names = [function_name(name, kernel.primitive, item.nest.name) for item in kernel.launches]
    bodies, ranges, drivers, declarations, cdef = [], [], [], [], []
    for fn, item in zip(names, kernel.launches):
        nest_plan = plan.for_nest(item.nest.name) if plan is not None else None
        declarations.append(nest_declaration(fn, item, buffers))
        cdef.append(nest_declaration(fn, item, buffers, c=False))
        if nest_plan is None:
            bodies.append(plain_function(fn, item, buffers))
            ranges.append(item.extent)
            drivers.append(None)
            continue
        lines, range_axis, extent = planned_function(fn, item, buffers, nest_plan.layout, nest_plan.split, ahead)
        if nest_plan.variants():
            # the same function under the narrow or wide layout where the target wants
            # it (exactc_rt.h); the validated plan gives them the same range and panels
            variants = []
            macros = FUSED_VARIANT_MACROS if fuses(item.nest) else VARIANT_MACROS
            for field, variant in nest_plan.variants():
                text, _, _ = planned_function(fn, item, buffers, variant, nest_plan.split, ahead)
                variants += [f"{'#elif' if variants else '#if'} {macros[field]}"] + text
            lines = variants + ["#else"] + lines + ["#endif"]
        ranges.append(extent)
        if nest_plan.split is not None:
            # a run-time split's cuts fall between chunks of the split axis's lanes (in
            # both layouts: a narrow one may change the outer lanes only)
            widths = {dict(layout.lanes).get(range_axis, 1)
                      for layout in (nest_plan.layout, *(v for _, v in nest_plan.variants()))}
            chunk = widths.pop() if len(widths) == 1 else 1
            lines = lines + [""] + split_driver(fn, item, buffers, nest_plan.split, range_axis, extent, chunk)
            declarations.append(split_declaration(fn, item, buffers))
            cdef.append(split_declaration(fn, item, buffers, c=False))
            drivers.append(f"{fn}_split")
        else:
            drivers.append(None)
        bodies.append(lines)

    out = kernel_comment(kernel, name, names)
    out += ['#include "exactc_rt.h"']
    if any("exactc_dot_" in line for lines in bodies for line in lines):
        out += ['#include "exactc_dot.h" /* the block sums (immintrin.h where the target has AVX2) */']
    for lines in bodies:
        out.append("")
        out.extend(lines)
    return PrintedKernel(
        source="\n".join(out) + "\n",
        cdef="".join(line + "\n" for line in cdef),
        functions=tuple(names),
        ranges=tuple(ranges),
        drivers=tuple(drivers),
        declarations=tuple(declarations),
    )


def kernel_comment(kernel: Kernel, name: str, functions: list[str]) -> list[str]:
    """What the file computes: the primitive, its attributes, its buffers."""
    attrs = ", ".join(f"{k}={v!r}" for k, v in shown_attrs(kernel.primitive, kernel.attrs).items())
    lines = [f"{name}: {kernel.primitive} at site type {kernel.site}" + (f" ({attrs})" if attrs else ""), ""]
    width = max(len(b.name) for b in kernel.buffers)
    for buf in kernel.buffers:
        lines.append(f"  {buf.role:<6} {buf.name:<{width}}  {buf.ctype} {shape_text(buf.shape)}")
    lines.append("")
    if len(functions) > 1:
        lines += [f"Functions, run in this order: {', '.join(functions)}.", ""]
    lines += [
        "Generated by exactc from the kernel IR (docs/semantics.md is the rule). Outputs and",
        "temps must not overlap any other argument.",
    ]
    return comment_block(lines)
