"""`exactc plan --tune`: each nest's candidate layouts timed on this machine, the fastest
kept in a table that `--plan auto` then uses.

    exactc plan --tune gpt --entry forward --dtype f32 --set tokens=256   # tune, write the table
    exactc plan --tune llama --entry decode --dtype f32 --weights q8 --cc clang

For every distinct kernel of the program (a primitive at its shapes), every nest with more
than one candidate (linear, the attention matmuls, the laned transcendentals, the
quantized nests; autoplan.py's lists, more lane shapes and the plain nest) is compiled
under each candidate layout with the flags the exported Makefile uses by default (-O2
-march=native, and 512-bit vectors where the CPU has them), run on drawn operands on one
thread in alternation for --rounds rounds, and the fastest kept. The table is JSON,
`$EXACTC_TUNED` or tune.json in the cache folder, keyed by the build (the compiler's
executable and version, those flags, the CPU) and each nest's signature (primitive, site
type, attributes, buffer shapes, nest). `--plan auto` reads the entries of the build
`$CC` (else `cc`) gives (autoplan.AutoPlan); `EXACTC_TUNED=` (empty) turns the table
off. Every layout gives the reference's bits (the layout property, docs/plans.md), so a
table changes speed only; the export's cache key holds its digest.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from exactc.exporter.kernels.tuned import (TABLE_ENV, TuneError, build_flags, build_identity, table_path,
                                          write_table)

ROUNDS = 5  # timing rounds: each times every candidate once (the best of 3 calls)


# ---- the candidates ---------------------------------------------------------------------

# Lane shapes (rows m, columns n) tried for linear and the matmuls, w's (b's) panel packed.
LANE_SHAPES = ((4, 16), (6, 16), (8, 16), (12, 16), (16, 16), (8, 8), (16, 8))
# Lane widths tried for the elementwise transcendentals and the softmax.
ELEMENT_LANES = (8, 16, 64, 256)


def candidates(kernel, nest) -> list:
    """The layouts timed for `nest`: the plain nest, autoplan's list and the lane shapes
    above, each legal and with lanes that fill; one (nothing to choose) or more."""
    from exactc.exporter.kernels import autoplan
    from exactc.exporter.kernels.layouts import Layout, LayoutError
    from exactc.exporter.kernels.plans import NestPlan, Plan, validate_plan

    extra = []
    if nest.name in ("linear", "matmul"):
        shapes = [Layout(order=("n", "m"), lanes=(("m", m), ("n", n)), packs=("w",)) for m, n in LANE_SHAPES]
        extra = autoplan.matmul_layouts(nest, shapes) if nest.name == "matmul" else shapes
    elif nest.name in autoplan.TRANSCENDENTAL_LAYOUTS and autoplan.candidate_layouts(kernel, nest):
        extra = [Layout(lanes=(("i", w),)) for w in ELEMENT_LANES]
    out = []
    for layout in [Layout(), *autoplan.candidate_layouts(kernel, nest), *extra]:
        if layout in out or not autoplan.lanes_fill(nest, layout):
            continue
        try:
            validate_plan(kernel, Plan(((nest.name, NestPlan(layout)),)))
        except LayoutError:
            continue
        out.append(layout)
    return out


def label(layout) -> str:
    return "plain" if layout.is_plain else layout.text()


# ---- timing -----------------------------------------------------------------------------


@dataclasses.dataclass
class Measured:
    """One nest's candidates and their best times (seconds per kernel call)."""

    signature: str
    kernel: object
    nest: str
    layouts: list
    seconds: dict = dataclasses.field(default_factory=dict)  # label -> best seconds
    variant: str | None = None  # the layout variant the build compiles ("narrow", "wide": compiled_variant)

    @property
    def winner(self):
        return min(self.layouts, key=lambda layout: self.seconds[label(layout)])

    @property
    def default(self):
        """The layout `--plan auto` would have this build compile without the table (its
        narrow or wide one where the build compiles that; the plain nest when it leaves
        the nest alone)."""
        from exactc.exporter.kernels import autoplan
        from exactc.exporter.kernels.layouts import Layout

        nest_plan = autoplan.auto_nest_plan(self.kernel, next(n for n in self.kernel.nests if n.name == self.nest))
        if nest_plan is None:
            return Layout()
        return dict(nest_plan.variants()).get(self.variant, nest_plan.layout)


def _operand(buf, length: int, rng: np.random.Generator) -> np.ndarray:
    """A drawn value for one buffer at the run-time length: floats in [-2, 2) (scales
    positive and small), integers as random bytes (int32: 0 or 1, safe as an index)."""
    from exactc.exporter import dims, types

    shape = tuple(dims.at(d, length) for d in buf.shape)
    dtype = types.STORAGE[buf.type].numpy
    if buf.type in ("i8", "u8"):
        return rng.integers(0, 256, size=shape, dtype=np.uint8).view(dtype)
    if buf.type == "i32":
        return rng.integers(0, 2, size=shape).astype(np.int32)
    values = rng.uniform(-2.0, 2.0, size=shape)
    if buf.name.endswith("d"):  # a scale (qlinear's wd, xd)
        values = np.abs(values) / 64 + 1e-3
    if buf.type == "bf16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(dtype)


class Timed:
    """One kernel compiled under one candidate layout of one nest, its operands drawn."""

    def __init__(self, kernel, nest: str, layout, options, length: int):
        from exactc.exporter import dims
        from exactc.exporter.kernels.plans import NestPlan, Plan
        from exactc.exporter.printer.kernels import print_kernel
        from exactc.exporter.printer.nests import KernelBuffers, takes_length
        from exactc.exporter.printer.prepack import panel_widths
        from exactc.verify.build import load_library, runtime_source
        from exactc.verify.kernels import CDEF_PRELUDE

        plan = None if layout.is_plain else Plan(((nest, NestPlan(layout)),))
        ahead = frozenset(panel_widths(kernel, plan))  # the weights as map_weights lays them out
        printed = print_kernel(kernel, "tune", plan, ahead) if plan else print_kernel(kernel, "tune")
        sources = {"kernels.c": printed.source, "exactc_libm.c": runtime_source("exactc_libm.c")}
        self.library = load_library(sources, CDEF_PRELUDE + printed.cdef, options)
        rng = np.random.default_rng(5)
        self.arrays = {b.name: _operand(b, length, rng) for b in kernel.buffers}
        ffi = self.library.ffi
        takes = [length] if takes_length(KernelBuffers(kernel)) else []
        self.calls = []
        # print_kernel gives every launch its function and the extent of its (lo, hi) range
        for launch, function, extent in zip(kernel.launches, printed.functions, printed.ranges, strict=True):
            args = [ffi.cast("void *", self.arrays[name].ctypes.data) for name in launch.args] + takes
            self.calls.append((getattr(self.library.lib, function), args, dims.at(extent, length)))

    def run(self) -> None:
        for function, args, hi in self.calls:
            function(*args, 0, hi)

    def best(self, inner: int = 3) -> float:
        """The best of `inner` calls, in seconds."""
        best = float("inf")
        for _ in range(inner):
            start = time.perf_counter()
            self.run()
            best = min(best, time.perf_counter() - start)
        return best


def program_kernels(program, site: str) -> list:
    """The distinct kernels of a program at a site type, in order of first launch (as the
    exported C has them, printer/kernel_table.py)."""
    from exactc.exporter.kernels import lower
    from exactc.exporter.launches import kernel_key, launched_ops, op_shapes

    kernels = {}
    for op in launched_ops(program):
        key = kernel_key(op)
        if key not in kernels:
            kernels[key] = lower(op.primitive, site, op_shapes(op), op.attrs, program.contract)
    return list(kernels.values())


def compiled_variant(cc: str, march: str = "native") -> str | None:
    """The layout variant `cc` with the default flags (for this CPU, or the one `march`
    names) compiles: "narrow" where it sets EXACTC_NARROW_LANES (exactc_rt.h), "wide"
    where it sets EXACTC_WIDE_LANES, else None; the header's own answer, from the
    preprocessor under the program's own flags, STRICT included."""
    from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS

    done = subprocess.run([cc, *STRICT_FLAGS, *build_flags(cc, march), f"-I{RUNTIME_DIR}", "-E", "-P", "-x", "c", "-"],
                          input='#include "exactc_rt.h"\nexactc_lanes = EXACTC_NARROW_LANES EXACTC_WIDE_LANES;\n',
                          capture_output=True, text=True)
    found = re.search(r"exactc_lanes = (\d+) (\d+);", done.stdout)
    if done.returncode != 0 or found is None:
        raise TuneError(f"{cc} could not preprocess exactc_rt.h: {done.stderr.strip()[:300]}")
    if found.group(1) != "0":
        return "narrow"
    return "wide" if found.group(2) != "0" else None


def tune(program, site: str, cc: str, rounds: int = ROUNDS, length: int | None = None,
         progress: Callable[[str], None] | None = None) -> list[Measured]:
    """Time every candidate of every nest with a choice, `rounds` rounds in alternation."""
    from exactc.exporter.kernels.autoplan import nest_signature
    from exactc.verify.build import BuildOptions

    options = BuildOptions(cc=cc, opt="-O2", march_native=True, warnings=False)
    variant = compiled_variant(cc)
    todo = {}
    for kernel in program_kernels(program, site):
        for nest in kernel.nests:
            layouts = candidates(kernel, nest)
            if len(layouts) > 1 and nest_signature(kernel, nest) not in todo:
                todo[nest_signature(kernel, nest)] = Measured(nest_signature(kernel, nest), kernel, nest.name, layouts,
                                                              variant=variant)
    total = sum(len(m.layouts) for m in todo.values())
    if not total:
        return []
    top = length or program.max_length or 1
    built, done = {}, 0
    for m in todo.values():
        for layout in m.layouts:
            built[(m.signature, label(layout))] = Timed(m.kernel, m.nest, layout, options, top)
            done += 1
            if progress:
                progress(f"compiled {done}/{total} candidates ({m.kernel.primitive} {m.nest}: {label(layout)})")
    for r in range(rounds):
        for m in todo.values():
            for layout in m.layouts:
                timed = built[(m.signature, label(layout))]
                if r == 0:
                    timed.run()  # warm: pages touched, caches filled
                seconds = timed.best()
                m.seconds[label(layout)] = min(m.seconds.get(label(layout), float("inf")), seconds)
        if progress:
            progress(f"timed round {r + 1}/{rounds}")
    return list(todo.values())


def report(measured: list[Measured]) -> str:
    """A table a person can read: each nest's candidates, fastest first, the winner and
    what auto chose without the table."""
    lines = []
    for m in measured:
        kernel = m.kernel
        shapes = ", ".join(f"{b.name} {'x'.join(str(d) for d in b.shape)}" for b in kernel.buffers if b.role == "input")
        lines.append(f"{kernel.primitive} at {kernel.site} ({shapes}), nest {m.nest}:")
        default_label = label(m.default)
        fastest = min(m.seconds.values())
        for layout in sorted(m.layouts, key=lambda layout: m.seconds[label(layout)]):
            name = label(layout)
            marks = (" <- kept" if layout == m.winner else "") + (" (auto without the table)" if name == default_label
                                                                   else "")
            lines.append(f"  {m.seconds[name] * 1e6:11.1f} us  x{m.seconds[name] / fastest:5.2f}  {name}{marks}")
    return "\n".join(lines)


def _note(text: str) -> None:
    if sys.stderr.isatty():
        print(f"\r\033[K{text}", end="", file=sys.stderr, flush=True)


def tune_command(args) -> int:
    """`exactc plan --tune MODEL --entry E --dtype T [...]`: tune, print the report, write
    the table."""
    from exactc import commands
    from exactc.exporter import export

    if not args.primitive or not args.entry:
        from exactc.exporter.kernels.plans import PlanError

        raise PlanError("-", "--tune", "name the program: exactc plan --tune MODEL --entry ENTRY --dtype TYPE")
    if args.rounds < 1:
        raise TuneError(f"--rounds {args.rounds}: give at least 1")
    path = Path(args.table) if args.table else table_path()
    if path is None:
        raise TuneError(f"{TABLE_ENV} is empty (the table is off): give --table FILE to write one")
    args.model = args.primitive
    args.plan, args.seed = None, 0
    spec = commands._spec(args)
    overrides, weights = export.checkpoint_request(spec.checkpoint, spec.entry, spec.overrides, spec.weights)
    program = dataclasses.replace(export.trace(spec.model, spec.entry, overrides, weights, spec.checkpoint, spec.form),
                                  contract=spec.contract)
    identity = build_identity(args.cc)
    start = time.perf_counter()
    measured = tune(program, spec.site, args.cc, args.rounds, args.length, _note)
    _note("")  # the progress line cleared
    if not measured:
        print(f"{spec.model}.{spec.entry} at {spec.site}: no nest has a choice of layout; nothing to tune")
        return 0
    print(report(measured))
    write_table(path, identity, measured)
    changed = sum(1 for m in measured if m.winner != m.default)
    print(f"tune: {len(measured)} nests, {sum(len(m.layouts) for m in measured)} candidates in "
          f"{time.perf_counter() - start:.1f} s; {changed} differ from auto's own choice; table {path} "
          f"(build: {identity})")
    return 0
