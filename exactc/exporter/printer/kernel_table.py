"""The kernels of a program: each distinct (primitive, shapes, attributes) lowered and
printed once, under its part of the program's plan, and named for what it computes.

A kernel's name comes from the graph: the primitive alone when the program has one
kernel of it (`layernorm`, `softmax`), else the primitive and the names of the values
its launches make (`linear_qkv`, `linear_fc`, `slice_q`). Names are a function of the
program only (its traversal order, never a hash or an id), so the same program gives
the same names on every run; they never collide with each other or with any name of
the host (its functions, values and locals).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterable

from exactc.exporter import dims
from exactc.exporter.dims import SYMBOL
from exactc.exporter.primitives import shown_attrs
from exactc.exporter.graph import Op, Program
from exactc.exporter.kernels import lower
from exactc.exporter.kernels.ir import Kernel
from exactc.exporter.kernels.plans import function_name
from exactc.exporter.printer.ctext import call_lines
from exactc.exporter.printer.kernels import PrintedKernel, print_kernel
from exactc.exporter.printer.nests import KernelBuffers, takes_length
from exactc.exporter.printer.prepack import packed_ahead
from exactc.exporter.launches import kernel_key, launched_ops, op_shapes

# Names a kernel never takes: C keywords and what model.c, exactc_rt.h and the C library
# already use.
C_RESERVED = frozenset(
    """auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch
    typedef union unsigned void volatile while main arena w l lo hi T run map_weights weights
    Weights PARAMS INPUTS OUTPUTS ARENA_BYTES ARENA RELEASE SCRATCH BORN IN_PLACE abs exp log sqrt sin cos tanh
    erf memcpy memset free malloc""".split()
)
MAX_LABELS = 3  # value names a kernel's name joins at most


class HostError(ValueError):
    """A program the host printer cannot print."""


@dataclasses.dataclass
class KernelUse:
    name: str  # linear_qkv: its functions are linear_qkv (or linear_qkv_<nest>)
    kernel: Kernel
    printed: PrintedKernel

    def calls(self, op: Op, names: dict[str, str]) -> list[str]:
        """The host's lines that run this kernel for `op`: a comment saying what it
        computes, then each nest over its whole range, or through its split driver."""
        attrs = ", ".join(f"{k}={v!r}" for k, v in shown_attrs(op.primitive, op.attrs).items() if not k.startswith("has_"))
        operands = ", ".join(f"{v.name}{list(v.shape)}" for v in op.args)
        made = ", ".join(f"{v.name}{list(v.shape)}" for v in op.outs)
        lines = [f"/* {made} = {op.primitive}({operands}{', ' + attrs if attrs else ''}) */"]
        length = [SYMBOL] if takes_length(KernelBuffers(self.kernel)) else []
        for item, fn, extent, driver in zip(self.kernel.launches, self.printed.functions, self.printed.ranges,
                                            self.printed.drivers):
            args = [names[a] for a in item.args] + length
            if driver:
                lines.extend(call_lines(driver, args, ""))
            else:
                lines.extend(call_lines(fn, args + ["0", dims.c_text(extent)], ""))
        return lines


def joined_labels(names: list[str]) -> str:
    """The names of the values a kernel makes, as one name: `qkv`; `q_k_v_t` for q_t,
    k_t, v_t (a common prefix or suffix, cut at an underscore, written once); at most
    MAX_LABELS of them."""
    names = names[:MAX_LABELS]
    if len(names) == 1:
        return names[0]
    prefix = os.path.commonprefix(names)
    prefix = prefix[: prefix.rfind("_") + 1]
    suffix = os.path.commonprefix([name[::-1] for name in names])[::-1]
    suffix = suffix[suffix.find("_"):] if "_" in suffix else ""
    stems = [name[len(prefix): len(name) - len(suffix)] for name in names]
    if not all(stems):
        prefix, suffix, stems = "", "", names
    return prefix + "_".join(stems) + suffix


def kernel_names(ops: list[Op], kernels: dict[tuple, Kernel], taken: Iterable[str]) -> dict[tuple, str]:
    """The name of each kernel (by kernel_key) of the launches `ops`: unique, and its
    functions clear of `taken` and of each other kernel's."""
    first_use: dict[tuple, dict[str, None]] = {}  # a dict for its order and its lookups
    for op in ops:
        first_use.setdefault(kernel_key(op), {})[op.outs[0].name] = None
    labels = {key: list(names) for key, names in first_use.items()}  # each once, in order of first use
    per_primitive: dict[str, int] = {}
    for kernel in kernels.values():
        per_primitive[kernel.primitive] = per_primitive.get(kernel.primitive, 0) + 1
    used = set(taken) | C_RESERVED
    out = {}
    for key, names in labels.items():
        kernel = kernels[key]
        prim = kernel.primitive
        if per_primitive[prim] == 1:
            base = prim
        elif len(names) == 1 and names[0].startswith(prim):
            base = names[0]
        else:
            base = f"{prim}_{joined_labels(names)}"
        name, k = base, 1
        while True:
            functions = [function_name(name, prim, nest.name) for nest in kernel.nests]
            functions += [f"{f}_split" for f in functions]
            if not any(f in used or f.startswith("exactc_") for f in functions):
                break
            k += 1
            name = f"{base}_{k}"
        used.update(functions)
        out[key] = name
    return out


def host_names(program: Program) -> set[str]:
    """The names the host gives its functions and values."""
    names = set()
    for fn in program.function.walk():
        names.add(fn.name)
        names.update(v.name for v in fn.inputs + fn.outputs)
        for node in fn.nodes:
            names.update(v.name for v in node.outs)
    return names


class KernelTable:
    """The kernels of a program at a site type, in order of first use."""

    def __init__(self, program: Program, site: str, plan: Any = None):
        self.site = site
        self.plan = plan
        self.plan_used: set[str] = set()
        ops = launched_ops(program)
        kernels: dict[tuple, Kernel] = {}
        for op in ops:
            key = kernel_key(op)
            if key not in kernels:
                kernels[key] = lower(op.primitive, site, op_shapes(op), op.attrs, program.contract)
        names = kernel_names(ops, kernels, host_names(program))
        plans = {key: self.plan_for(kernel, names[key]) for key, kernel in kernels.items()}
        # Linear weights (and q8 values and scales) laid out as their panels at load (prepack.py).
        ahead, self.packed = packed_ahead(program, {key: (kernels[key], plans[key]) for key in kernels})
        self.uses: dict[tuple, KernelUse] = {}
        for key, kernel in kernels.items():
            printed = print_kernel(kernel, names[key], plans[key], ahead.get(key, frozenset()))
            self.uses[key] = KernelUse(names[key], kernel, printed)
        self.check_plan_used()

    def get(self, op: Op) -> KernelUse:
        return self.uses[kernel_key(op)]

    def function_names(self) -> set[str]:
        """Every C function the kernels define: the host's names must stay clear of them."""
        return {f for use in self.uses.values() for f in use.printed.functions} | {
            d for use in self.uses.values() for d in use.printed.drivers if d}

    def plan_for(self, kernel: Kernel, name: str) -> Any:
        """The part of the program's plan (a plan file's, or the automatic one) for this
        kernel, validated; None when it has none."""
        if self.plan is None:
            return None
        plan, used = self.plan.for_kernel(kernel, name)
        self.plan_used |= used
        return plan

    def check_plan_used(self) -> None:
        if self.plan is None:
            return
        unused = [name for name in self.plan.entry_names() if name not in self.plan_used]
        if unused:
            raise HostError(f"plan: nest(s) {', '.join(unused)} match no nest of this program")

    def header(self) -> str:
        """kernels.h: every kernel's functions, each under the primitive it computes."""
        lines = [
            "/* The kernels (kernels/), one file each: its functions, each a nest run over",
            " * [lo, hi) of its outermost loop, and a split driver where the plan splits the",
            " * nest. Generated by exactc. */",
            "#ifndef EXACTC_KERNELS_H",
            "#define EXACTC_KERNELS_H",
            "",
            '#include "exactc_rt.h"',
            "",
        ]
        for use in self.uses.values():
            lines.append(f"/* {use.name}: {use.kernel.primitive} */")
            lines.extend(use.printed.declarations)
        lines += ["", "#endif"]
        return "\n".join(lines) + "\n"

    def sources(self) -> dict[str, str]:
        return {f"{use.name}.c": use.printed.source for use in self.uses.values()}

    def nest_count(self) -> int:
        return sum(len(use.printed.functions) for use in self.uses.values())
