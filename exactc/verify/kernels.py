"""The differential harness for kernels: lower a batch of primitive cases, compile them in
one compiler call, run each in poisoned, red-zoned buffers in a child process, and compare
every output with the reference bit for bit.

A failing case comes back with a report that reproduces it: the case as Python, the first
differing element in hex, the inputs in hex, the kernel's IR and C text, the compiler
call; and a folder with the same as files (inputs and outputs as .npy).

A case may follow a run-time length (Case.top > 0): its kernel is lowered with the
length as a dims.Dim and run at the case's length, the outputs sized (and red-zoned) at
that length, so a loop that runs past it shows.

A case may come with a plan (exporter/kernels/plans.py): its nests are printed under their
layouts, and a launch with a split runs through its driver, whose coverage check (in a
build with -DEXACTC_CHECK_SPLITS) is read back; `threads` sets the OpenMP team cap in the
child (omp_set_num_threads, as OMP_NUM_THREADS would). Planned cases are counted in the
"layouts" and "splits" families of the campaign's summary.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import traceback
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from exactc.exporter import dims, reference
from exactc.exporter.types import STORAGE
from exactc.exporter.kernels import lower
from exactc.exporter.kernels.plans import Plan, validate_plan
from exactc.exporter.primitives import BACKWARD_PRIMITIVES, CONTRACT_FMA
from exactc.exporter.kernels.splits import coverage_problem, split_axis
from exactc.exporter.printer.kernels import print_kernel
from exactc.exporter.primitives import IN_PLACE
from exactc.exporter.printer.nests import KernelBuffers, takes_length
from exactc.exporter.printer.planned import SPLIT_STATUS
from exactc.strategies.cases import Case
from exactc.verify.build import BuildOptions, load_library, runtime_source
from exactc.verify.engine import ending
from exactc.runtime.toolchain import cache_dir
from exactc.verify.compare import (
    RED_ZONE,
    GuardedBuffer,
    first_mismatch,
    hex_dump,
    numpy_dtype_of_ctype,
)

CDEF_PRELUDE = "typedef uint16_t exactc_bf16;\n"
# The primitives of quantized operands (docs/semantics.md, section 15): their cases also
# count in the campaign's "quant" family.
QUANTIZED_PRIMITIVES = ("quantize", "qlinear_w", "qlinear_i")

# compare.py's buffers hold floats and int32; quantized operands add int8 and uint8. A
# byte has no spare NaN to poison with, so the poison is 0x80: as int8 it is -128, a value
# no quantizer writes, so an int8 output element left unwritten shows.
BYTE_DTYPES = {s.c: s.numpy for s in STORAGE.values() if s.itemsize == 1}
BYTE_POISON = 0x80


class GuardedBytes(GuardedBuffer):
    """A GuardedBuffer of one-byte elements, poisoned with BYTE_POISON."""

    @classmethod
    def poisoned(cls, shape, dtype) -> "GuardedBytes":
        size = int(np.prod(shape, dtype=np.int64))
        storage = np.empty(size + 2 * RED_ZONE, dtype=dtype)
        storage.view(np.uint8)[:] = BYTE_POISON
        return cls(storage, tuple(shape))

    def red_zone_damage(self) -> list[int]:
        raw, size = self.storage.view(np.uint8), self.storage.size - 2 * RED_ZONE
        before = np.flatnonzero(raw[:RED_ZONE] != BYTE_POISON) - RED_ZONE
        after = np.flatnonzero(raw[RED_ZONE + size :] != BYTE_POISON) + size
        return [int(i) for i in np.concatenate([before, after])]

    def unwritten(self) -> np.ndarray:
        return np.flatnonzero(self.body.reshape(-1).view(np.uint8) == BYTE_POISON)


def _guarded(buf, inputs: dict, length: int) -> GuardedBuffer:
    """A kernel buffer in red zones: an input holding its array, else poisoned, sized at
    the run-time length (red zones right after: a loop bounded by T_max shows)."""
    if buf.ctype in BYTE_DTYPES:
        kind, dtype = GuardedBytes, BYTE_DTYPES[buf.ctype]
    else:
        kind, dtype = GuardedBuffer, numpy_dtype_of_ctype(buf.ctype)
    if buf.role == "input":
        return kind.holding(inputs[buf.name].astype(dtype))
    return kind.poisoned(dims.shape_at(buf.shape, length), dtype)
CHILD_TIMEOUT = 300.0  # seconds for one batch in the child
CHECK_SPLITS = "EXACTC_CHECK_SPLITS"  # the define of the checking build of splits


@dataclasses.dataclass
class CaseOutcome:
    """What happened to one case. status: equal, mismatch, coverage (a split's pieces
    overlap or leave a gap), red zone, unwritten, crashed, timed out."""

    case: Case
    status: str
    report: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "equal"


@dataclasses.dataclass
class _Prepared:
    case: Case
    kernel: object
    printed: object
    inputs: dict
    plan: Plan | None = None


def kernel_key(case: Case, plan: Plan | None = None) -> tuple:
    """What a case's compiled kernel depends on: cases with equal keys share one kernel
    in a batch (strategies/cases.py, `sibling`: fresh inputs, another run-time length)."""
    return (case.primitive, case.site, case.attrs, repr(case.kernel_shapes), plan.dumps() if plan is not None else None,
            case.contract)


def _prepare(cases: Sequence[Case], plans=None, validate: bool = True) -> list[_Prepared]:
    """Lower and print each distinct kernel of the batch once; every case gets its inputs."""
    prepared, kernels = [], {}
    plans = list(plans) if plans is not None else [None] * len(cases)
    for case, plan in zip(cases, plans, strict=True):
        key = kernel_key(case, plan)
        if key not in kernels:
            kernel = lower(case.primitive, case.site, case.kernel_shapes, case.attr_dict, case.contract)
            if plan is not None and validate:
                validate_plan(kernel, plan)
            name = f"c{len(kernels)}"
            printed = print_kernel(kernel, name, plan) if plan is not None else print_kernel(kernel, name)
            kernels[key] = (kernel, printed)
        kernel, printed = kernels[key]
        prepared.append(_Prepared(case, kernel, printed, case.inputs(), plan))
    return prepared


def build_batch(prepared: Sequence[_Prepared], options: BuildOptions):
    """All kernels of a batch and the runtime's libm in one compiler call."""
    printed = list({id(p.printed): p.printed for p in prepared}.values())  # each kernel once
    source = "\n".join(p.source for p in printed)
    cdef = CDEF_PRELUDE + "\n".join(p.cdef for p in printed)
    if options.openmp:
        cdef += "void omp_set_num_threads(int);\n"
    sources = {"kernels.c": source, "exactc_libm.c": runtime_source("exactc_libm.c")}
    return load_library(sources, cdef, options)


def _run_one(library, prep: _Prepared) -> dict:
    """Run one case's launches in guarded buffers; give outputs and damage."""
    length = prep.case.length  # the run-time length T (0: static shapes)
    buffers = {buf.name: _guarded(buf, prep.inputs, length) for buf in prep.kernel.buffers}
    in_place = IN_PLACE.get(prep.kernel.primitive)
    if in_place:  # the output starts as the operand whose storage it takes (poison would never show)
        output, operand = in_place
        buffers[output].body[...] = buffers[operand].body
    ffi = library.ffi
    statuses = {}
    ranges = prep.printed.ranges or tuple(item.extent for item in prep.kernel.launches)
    drivers = prep.printed.drivers or (None,) * len(prep.kernel.launches)
    takes = [length] if takes_length(KernelBuffers(prep.kernel)) else []
    for launch, fn_name, extent, driver in zip(
        prep.kernel.launches, prep.printed.functions, ranges, drivers, strict=True
    ):
        args = [ffi.cast("void *", buffers[name].address) for name in launch.args] + takes
        if driver is None:
            getattr(library.lib, fn_name)(*args, 0, dims.at(extent, length))
        else:
            statuses[fn_name] = int(getattr(library.lib, driver)(*args))
    result = {"outputs": {}, "damage": {}, "unwritten": {}, "split_status": statuses}
    for buf in prep.kernel.buffers:
        guarded = buffers[buf.name]
        damage = guarded.red_zone_damage()
        if damage:
            result["damage"][buf.name] = damage[:8]
        if buf.role == "output":
            result["outputs"][buf.name] = guarded.body.copy()
            unwritten = guarded.unwritten()
            if unwritten.size and not in_place:
                result["unwritten"][buf.name] = [int(i) for i in unwritten[:8]] + [int(unwritten.size)]
    return result


def _child(conn, library, prepared, threads=None) -> None:
    try:
        if threads is not None and library.options.openmp:
            try:  # absent when no kernel of the batch has a split (libgomp not linked)
                set_threads = library.lib.omp_set_num_threads
            except AttributeError:
                set_threads = None
            if set_threads is not None:
                set_threads(int(threads))
        conn.send(("ok", [_run_one(library, p) for p in prepared]))
    except Exception:  # a Python-side failure in the child is reported, not swallowed
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def run_in_child(library, prepared: Sequence[_Prepared], timeout: float = CHILD_TIMEOUT, threads=None):
    """Run the batch in a forked child, so that a crash in C fails a case, not the run."""
    ctx = multiprocessing.get_context("fork")
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child_conn, library, prepared, threads))
    proc.start()
    child_conn.close()
    message = None
    if parent_conn.poll(timeout):
        try:
            message = parent_conn.recv()
        except EOFError:
            message = None
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return ("timed out", f"the batch ran past {timeout:.0f} s")
    if message is None:  # whatever its exit code, even 0: a child that sent nothing crashed
        return ("crashed", f"the child process died ({ending(proc.exitcode)}) before it sent its results")
    return message


def _repro_dir(prep: _Prepared, expected: dict, actual: dict, options: BuildOptions) -> Path:
    key = hashlib.sha256(prep.printed.source.encode() + repr(prep.case).encode()).hexdigest()[:16]
    folder = cache_dir() / "repro" / key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "case.txt").write_text(prep.case.describe() + "\n")
    (folder / "kernel.c").write_text(prep.printed.source)
    (folder / "build.txt").write_text(options.describe() + "\n")
    if prep.plan is not None:
        (folder / "plan.json").write_text(prep.plan.dumps() + "\n")
    for name, array in prep.inputs.items():
        np.save(folder / f"input_{name}.npy", array)
    for name, array in expected.items():
        np.save(folder / f"reference_{name}.npy", array)
    for name, array in actual.items():
        np.save(folder / f"c_{name}.npy", array)
    return folder


def _report(prep: _Prepared, problem: str, options: BuildOptions, expected, actual) -> str:
    case = prep.case
    lines = [
        f"C != reference: {case.primitive} at {case.site}, attrs {case.attr_dict}",
        f"  {problem}",
        "  inputs:",
        *(f"    {name} = {hex_dump(array)}" for name, array in prep.inputs.items()),
        f"  reproduce: {case.describe()}",
        *([f"  plan: {prep.plan.dumps()}"] if prep.plan is not None else []),
        f"  files: {_repro_dir(prep, expected, actual, options)}",
        f"  build: {options.describe()}",
        "  kernel (IR above each function):",
        *("    " + line for line in prep.printed.source.splitlines()),
    ]
    return "\n".join(lines)


def _families(case: Case, plan: Plan | None) -> list[str]:
    """The campaign families a case counts in: kernels (no plan), layouts, splits; and
    quant for the primitives of quantized operands, grad for the backward's, fma for
    the fused realization."""
    tagged = ["quant"] if case.primitive in QUANTIZED_PRIMITIVES else []
    tagged += ["grad"] if case.primitive in BACKWARD_PRIMITIVES else []
    tagged += ["fma"] if case.contract == CONTRACT_FMA else []
    if plan is None:
        return ["kernels"] + tagged
    families = list(tagged)
    if any(not p.layout.is_plain for _, p in plan.nests):
        families.append("layouts")
    if any(p.split is not None for _, p in plan.nests):
        families.append("splits")
    return families if len(families) > len(tagged) else families + ["layouts"]


def _write_stats(rows: Iterable[dict]) -> None:
    """Append rows (family, primitive, site, status) for `make verify`'s summary, when
    EXACTC_STATS_DIR names a folder."""
    folder = os.environ.get("EXACTC_STATS_DIR")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"cases-{os.getpid()}.jsonl", "a") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")


def _record_stats(outcomes: Sequence[CaseOutcome], plans=None) -> None:
    plans = list(plans) if plans is not None else [None] * len(outcomes)
    _write_stats({"family": family, "primitive": o.case.primitive, "site": o.case.site, "status": o.status}
                 for o, plan in zip(outcomes, plans) for family in _families(o.case, plan))


def record_checks(family: str, what: str, statuses: Iterable[str]) -> None:
    """Count checks made outside the kernel cases (family "keys", "sampling", ...) in
    `make verify`'s summary: one row per check, `what` naming the function checked and
    each status "equal" or what differed."""
    _write_stats({"family": family, "primitive": what, "site": "", "status": s} for s in statuses)


def _split_problems(prep: _Prepared, statuses: dict, checked: bool) -> list[str]:
    """The coverage check's complaints, each naming the launch, its axis and pieces."""
    problems = []
    for item, fn_name in zip(prep.kernel.launches, prep.printed.functions):
        nest_plan = prep.plan.for_nest(item.nest.name) if prep.plan is not None else None
        if nest_plan is None or nest_plan.split is None:
            continue
        status = statuses.get(fn_name, 0)
        if status == 0:
            continue
        axis = split_axis(item.nest, nest_plan.layout, nest_plan.split)
        extent = dims.at({a.name: a.extent for a in item.nest.axes}[axis], prep.case.length)
        split = nest_plan.split
        pieces = [(extent * lo // split.of, extent * hi // split.of) for lo, hi in split.pieces] if split.of \
            else split.pieces
        detail = coverage_problem(extent, pieces) or "no problem found in Python"
        problems.append(
            f"split coverage check failed in launch {fn_name} (nest {item.nest.name}, axis {axis} in "
            f"[0, {extent})): {SPLIT_STATUS.get(status, status)} ({detail}); pieces "
            + " ".join(f"[{lo},{hi})" for lo, hi in pieces)
            + (f" (parts of {split.of} at the run-time length {prep.case.length})" if split.of else "")
        )
    return problems if checked else []


def run_cases(
    cases: Sequence[Case],
    options: BuildOptions = BuildOptions(),
    plans: Sequence[Plan | None] | None = None,
    threads: int | None = None,
    validate_plans: bool = True,
) -> list[CaseOutcome]:
    """Compile `cases` together, run them in a child, compare with the reference.

    `plans`, one per case (or None), are validated and printed with the cases;
    `threads` caps the OpenMP team in the child (with options.openmp); a build whose
    defines hold EXACTC_CHECK_SPLITS reads back every split's coverage check.
    `validate_plans=False` lets a test hand over a split that a plan would refuse; such
    deliberately bad runs are not counted in the campaign's statistics."""
    prepared = _prepare(cases, plans, validate_plans)
    plans = [p.plan for p in prepared]
    library = build_batch(prepared, options)
    status, payload = run_in_child(library, prepared, threads=threads)
    if status != "ok":
        outcomes = [
            CaseOutcome(p.case, status, _report(p, f"batch {status}: {payload}", options, {}, {}))
            for p in prepared
        ]
        if validate_plans:
            _record_stats(outcomes, plans)
        return outcomes
    outcomes = []
    for prep, result in zip(prepared, payload, strict=True):
        expected = reference.run(prep.case.primitive, prep.case.site, prep.inputs, prep.case.attr_dict,
                                 prep.case.contract)
        actual = result["outputs"]
        problems, status = [], "equal"
        coverage = _split_problems(prep, result["split_status"], CHECK_SPLITS in options.defines)
        if coverage:
            status = "coverage"
            problems.extend(coverage)
        if result["damage"]:
            status = "red zone" if status == "equal" else status
            problems.append(f"red zones written (buffer: offsets): {result['damage']}")
        if result["unwritten"]:
            status = "unwritten" if status == "equal" else status
            problems.append(f"output elements never written (flat indices..., count): {result['unwritten']}")
        for name, array in expected.items():
            mismatch = first_mismatch(name, array, actual[name])
            if mismatch is not None:
                status = "mismatch" if status == "equal" else status
                problems.append(str(mismatch))
        if status != "equal" and threads is not None and options.openmp:
            problems.append(f"run with the OpenMP team capped at {threads} (omp_set_num_threads)")
        report = "" if status == "equal" else _report(prep, "\n  ".join(problems), options, expected, actual)
        outcomes.append(CaseOutcome(prep.case, status, report))
    if validate_plans:
        _record_stats(outcomes, plans)
    return outcomes


def assert_all_equal(outcomes: Sequence[CaseOutcome]) -> None:
    """Fail with the first bad case's full report and a count of the rest."""
    bad = [o for o in outcomes if not o.ok]
    if bad:
        statuses = ", ".join(sorted({o.status for o in bad}))
        raise AssertionError(f"{len(bad)} of {len(outcomes)} cases failed ({statuses})\n{bad[0].report}")
