"""The differential harness for kernels: lower a batch of primitive cases, compile them in
one compiler call, run each in poisoned, red-zoned buffers in a child process, and compare
every output with the reference bit for bit.

A failing case comes back with a report that reproduces it: the case as Python, the first
differing element in hex, the inputs in hex, the kernel's IR and C text, the compiler
call; and a folder with the same as files (inputs and outputs as .npy).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import traceback
from pathlib import Path
from typing import Sequence

import numpy as np

from exactc.exporter import reference
from exactc.exporter.kernels import lower
from exactc.exporter.printer.kernels import print_kernel
from exactc.strategies.cases import Case
from exactc.verify.build import BuildOptions, cache_dir, load_library, runtime_source
from exactc.verify.compare import (
    GuardedBuffer,
    first_mismatch,
    hex_dump,
    numpy_dtype_of_ctype,
)

CDEF_PRELUDE = "typedef uint16_t exactc_bf16;\n"
CHILD_TIMEOUT = 300.0  # seconds for one batch in the child


@dataclasses.dataclass
class CaseOutcome:
    """What happened to one case. status: equal, mismatch, red zone, unwritten, crashed,
    timed out."""

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


def _prepare(cases: Sequence[Case]) -> list[_Prepared]:
    prepared = []
    for i, case in enumerate(cases):
        kernel = lower(case.primitive, case.site, case.shapes, case.attr_dict)
        prepared.append(_Prepared(case, kernel, print_kernel(kernel, f"c{i}"), case.inputs()))
    return prepared


def build_batch(prepared: Sequence[_Prepared], options: BuildOptions):
    """All kernels of a batch and the runtime's libm in one compiler call."""
    source = "\n".join(p.printed.source for p in prepared)
    cdef = CDEF_PRELUDE + "\n".join(p.printed.cdef for p in prepared)
    sources = {"kernels.c": source, "exactc_libm.c": runtime_source("exactc_libm.c")}
    return load_library(sources, cdef, options)


def _run_one(library, prep: _Prepared) -> dict:
    """Run one case's launches in guarded buffers; give outputs and damage."""
    buffers = {}
    for buf in prep.kernel.buffers:
        dtype = numpy_dtype_of_ctype(buf.ctype)
        if buf.role == "input":
            buffers[buf.name] = GuardedBuffer.holding(prep.inputs[buf.name].astype(dtype))
        else:
            buffers[buf.name] = GuardedBuffer.poisoned(buf.shape, dtype)
    ffi = library.ffi
    for launch, fn_name in zip(prep.kernel.launches, prep.printed.functions, strict=True):
        fn = getattr(library.lib, fn_name)
        args = [ffi.cast("void *", buffers[name].address) for name in launch.args]
        fn(*args, 0, launch.extent)
    result = {"outputs": {}, "damage": {}, "unwritten": {}}
    for buf in prep.kernel.buffers:
        guarded = buffers[buf.name]
        damage = guarded.red_zone_damage()
        if damage:
            result["damage"][buf.name] = damage[:8]
        if buf.role == "output":
            result["outputs"][buf.name] = guarded.body.copy()
            unwritten = guarded.unwritten()
            if unwritten.size:
                result["unwritten"][buf.name] = [int(i) for i in unwritten[:8]] + [int(unwritten.size)]
    return result


def _child(conn, library, prepared) -> None:
    try:
        conn.send(("ok", [_run_one(library, p) for p in prepared]))
    except Exception:  # a Python-side failure in the child is reported, not swallowed
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def run_in_child(library, prepared: Sequence[_Prepared], timeout: float = CHILD_TIMEOUT):
    """Run the batch in a forked child, so that a crash in C fails a case, not the run."""
    ctx = multiprocessing.get_context("fork")
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child_conn, library, prepared))
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
    if message is None:
        return ("crashed", f"the child process died with exit code {proc.exitcode}")
    return message


def _repro_dir(prep: _Prepared, expected: dict, actual: dict, options: BuildOptions) -> Path:
    key = hashlib.sha256(prep.printed.source.encode() + repr(prep.case).encode()).hexdigest()[:16]
    folder = cache_dir() / "repro" / key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "case.txt").write_text(prep.case.describe() + "\n")
    (folder / "kernel.c").write_text(prep.printed.source)
    (folder / "build.txt").write_text(options.describe() + "\n")
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
        f"  files: {_repro_dir(prep, expected, actual, options)}",
        f"  build: {options.describe()}",
        "  kernel (IR above each function):",
        *("    " + line for line in prep.printed.source.splitlines()),
    ]
    return "\n".join(lines)


def _record_stats(outcomes: Sequence[CaseOutcome]) -> None:
    folder = os.environ.get("EXACTC_STATS_DIR")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"cases-{os.getpid()}.jsonl", "a") as out:
        for o in outcomes:
            out.write(json.dumps({"family": "kernels", "primitive": o.case.primitive,
                                  "site": o.case.site, "status": o.status}) + "\n")


def run_cases(cases: Sequence[Case], options: BuildOptions = BuildOptions()) -> list[CaseOutcome]:
    """Compile `cases` together, run them in a child, compare with the reference."""
    prepared = _prepare(cases)
    library = build_batch(prepared, options)
    status, payload = run_in_child(library, prepared)
    if status != "ok":
        outcomes = [
            CaseOutcome(p.case, status, _report(p, f"batch {status}: {payload}", options, {}, {}))
            for p in prepared
        ]
        _record_stats(outcomes)
        return outcomes
    outcomes = []
    for prep, result in zip(prepared, payload, strict=True):
        expected = reference.run(prep.case.primitive, prep.case.site, prep.inputs, prep.case.attr_dict)
        actual = result["outputs"]
        problems, status = [], "equal"
        if result["damage"]:
            status = "red zone"
            problems.append(f"red zones written (buffer: offsets): {result['damage']}")
        if result["unwritten"]:
            status = "unwritten" if status == "equal" else status
            problems.append(f"output elements never written (flat indices..., count): {result['unwritten']}")
        for name, array in expected.items():
            mismatch = first_mismatch(name, array, actual[name])
            if mismatch is not None:
                status = "mismatch" if status == "equal" else status
                problems.append(str(mismatch))
        report = "" if status == "equal" else _report(prep, "\n  ".join(problems), options, expected, actual)
        outcomes.append(CaseOutcome(prep.case, status, report))
    _record_stats(outcomes)
    return outcomes


def assert_all_equal(outcomes: Sequence[CaseOutcome]) -> None:
    """Fail with the first bad case's full report and a count of the rest."""
    bad = [o for o in outcomes if not o.ok]
    if bad:
        raise AssertionError(f"{len(bad)} of {len(outcomes)} cases failed\n{bad[0].report}")
