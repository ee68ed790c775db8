"""A whole program against the reference, and the report of a difference: the program-
level twin of the kernel harness's report (verify/kernels.py).

    assert_conforms(program, prepared, threads=2)   # run, compare, or fail with the report

For each output that differs the report gives its name, the first differing index (a
multi-index), both values in hex and decimal, how many elements differ, the export
directory, the build line and the command that reruns it; and, when the program folds
over layers, the first layer whose output differs.

How the layer is found. The checking build of the same directory (make CHECKING=1) writes
what each fold iteration carries out (EXACTC_TRACE_CARRY, runtime/exactc_npy.c) when
EXACTC_TRACE_DIR is set; the reference records the same values (walk.evaluate's
on_layer). They are compared in execution order with the one comparison: the first
iteration whose output differs while every earlier one is equal is the first layer that
computed wrongly, whatever the output's index. That layer is then run again in the
reference on its (equal) carry-in with each other layer's slice of the stacked
parameters: if one of them gives the C's values, the fold's slice for that layer points
at the other layer's parameters, and the report says which.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping

import numpy as np

from exactc.exporter import export

from exactc.exporter.reference import walk
from exactc.verify.compare import Mismatch, first_mismatch
from exactc.programs import Program, ProgramBuildError, load_outputs, make

TRACE = re.compile(r"^(\d+)-(\w+)-(\d+)-(\d+)\.npy$")


class ProgramMismatch(AssertionError):
    """A program's outputs differ from the reference's; the message is the report."""


def output_mismatches(expected: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray],
                      site: str) -> list[Mismatch | str]:
    """Each output that differs by the rule of verify/compare.py (a bf16 site's values,
    widened to f32 in the files, on every bit): a Mismatch, or a line for an output
    missing or of another dtype or shape."""
    out: list[Mismatch | str] = []
    for name, want in expected.items():
        want = export.npy_value(want)
        got = actual.get(name)
        if got is None:
            out.append(f"output {name}: not written")
        elif (got.dtype, got.shape) != (want.dtype, want.shape):
            out.append(f"output {name}: reference {want.dtype}{want.shape}, C {got.dtype}{got.shape}")
        else:
            mismatch = first_mismatch(name, want, got, site)
            if mismatch is not None:
                out.append(mismatch)
    return out


# ---- the first differing layer ---------------------------------------------------------------


def _write_inputs(folder: Path, inputs: Mapping[str, np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in inputs.items():
        (folder / f"{name}.npy").write_bytes(export.npy_bytes(array))
    return folder


def _layer_params(prepared: export.Export, step: walk.LayerStep) -> str:
    """The checkpoint names of the stacked parameters `step`'s layer reads."""
    program = prepared.program
    by_value = {id(v): spec for spec, v in zip(program.params, program.param_values)}
    names = [by_value[id(v)].layer_name(step.layer) for v in step.fold.stacked if id(v) in by_value]
    return ", ".join(names[:3]) + (f", ... ({len(names)} tensors)" if len(names) > 3 else "")


def _same(want: list[np.ndarray], got: list[np.ndarray], site: str) -> bool:
    return all(first_mismatch("", export.npy_value(w).reshape(-1), g, site) is None for w, g in zip(want, got))


def _slice_read(prepared: export.Export, step: walk.LayerStep, got: list[np.ndarray]) -> int | None:
    """The other layer whose slice of the stacked values gives the C's output of this
    layer from the same carry-in, if one does."""
    for other in range(step.fold.count):
        if other != step.layer and _same(walk.rerun_layer(step, prepared.site, other), got, prepared.site):
            return other
    return None


def _traces(program: Program, inputs: Mapping[str, np.ndarray]) -> list[tuple[str, int, int, np.ndarray]] | str:
    """(fold, layer, carry, values) in the order the checking build of a copy of the
    program's directory wrote them; or why it could not run."""
    with tempfile.TemporaryDirectory(prefix="exactc-layers-") as tmp:
        work = Path(tmp)
        root = work / "program"
        shutil.copytree(program.root, root, ignore=shutil.ignore_patterns("model", "model-checking", "compare"))
        try:
            checking = make(root, dataclasses.replace(program.build, checking=True))
        except ProgramBuildError as failed:
            return f"the checking build could not be made: {failed.summary}"
        trace = work / "trace"
        trace.mkdir()
        done = checking.run([(_write_inputs(work / "inputs", inputs), work / "out")], threads=1,
                            env={"EXACTC_TRACE_DIR": str(trace)})
        if done.returncode != 0:
            return f"the checking build exited with {done.returncode}: {done.stderr.strip()[-300:]}"
        found = []
        for path in sorted(trace.iterdir()):
            m = TRACE.match(path.name)
            if m:
                found.append((m.group(2), int(m.group(3)), int(m.group(4)), np.load(path)))
        return found


def first_differing_layer(program: Program, prepared: export.Export,
                          inputs: Mapping[str, np.ndarray] | None = None) -> str | None:
    """Which fold iteration is the first whose carried-out values differ from the
    reference's (see the module's docstring); None when the program has no fold."""
    inputs = dict(prepared.inputs if inputs is None else inputs)
    steps: list[walk.LayerStep] = []
    walk.evaluate(prepared.program, prepared.site, prepared.params, inputs, on_layer=steps.append)
    if not steps:
        return None
    traces = _traces(program, inputs)
    if isinstance(traces, str):
        return traces
    wanted = [(step.fold.body.name, step.layer, k) for step in steps for k in range(len(step.carry_out))]
    if [t[:3] for t in traces] != wanted:
        return (f"the checking build traced {len(traces)} layer outputs, the reference {len(wanted)}; "
                f"they do not line up (first traced: {[t[:3] for t in traces[:3]]})")
    at = 0
    for step in steps:
        got = [t[3] for t in traces[at: at + len(step.carry_out)]]
        at += len(step.carry_out)
        for want, value, values in zip(step.carry_out, step.fold.outs, got):
            mismatch = first_mismatch(value.name, export.npy_value(want).reshape(-1), values, prepared.site)
            if mismatch is None:
                continue
            mismatch.index = tuple(int(i) for i in np.unravel_index(mismatch.index[0], want.shape))
            fold, layer = step.fold.body.name, step.layer
            earlier = ("it is the first layer" if layer == 0 else "layer 0 gives the reference's values"
                       if layer == 1 else f"layers 0 to {layer - 1} give the reference's values")
            text = (f"layer {layer} of the fold over {fold} ({step.fold.count} layers) is the first whose output "
                    f"differs ({earlier}): its {mismatch}")
            other = _slice_read(prepared, step, got)
            if other is not None:
                return (text + f". It equals what layer {layer} computes from layer {other}'s parameters: the "
                        f"fold's slice for layer {layer} points at layer {other}'s, not at {_layer_params(prepared, step)}")
            return text + f". Layer {layer} reads {_layer_params(prepared, step)}"
    return ("every layer's output equals the reference's in the checking build: the difference arises outside "
            "the fold over layers, or in this build only")


# ---- the report ----------------------------------------------------------------------------


def report(program: Program, prepared: export.Export, problems: list[Mismatch | str], inputs_dir: Path,
           threads: int | None, inputs: Mapping[str, np.ndarray] | None = None) -> str:
    """The reproduction of a program that differs from the reference on `inputs` (the
    export's conformance inputs when None), read from `inputs_dir`."""
    m = prepared.manifest()
    lines = [f"C != reference: {m['model']}.{m['entry']} at {m['dtype']} ({m['host']} host"
             f"{', planned' if m['planned'] else ''})"]
    lines += [f"  {p}" for p in problems]
    finding = first_differing_layer(program, prepared, inputs)
    if finding is not None:
        lines.append(f"  layers: {finding}")
    threads_text = f"OMP_NUM_THREADS={threads} " if threads is not None else ""
    lines += [
        f"  export: {program.root}",
        f"  build: {program.make_line()}",
        f"  run: {threads_text}{program.path} {program.root / 'weights.safetensors'} {inputs_dir} OUTPUT_DIR",
    ]
    if inputs is None:
        lines.append(f"  check: {threads_text}{program.root / 'conformance' / 'check.sh'} {program.path}")
    return "\n".join(lines)


def assert_conforms(program: Program, prepared: export.Export, out: Path | None = None, threads: int | None = 1,
                    inputs: Mapping[str, np.ndarray] | None = None,
                    expected: Mapping[str, np.ndarray] | None = None) -> subprocess.CompletedProcess:
    """Run `program` on `inputs` (default: the export's conformance inputs, and those of
    every other run-time length conformance/lengths/ holds, all in one process) into
    `out` (default: a temporary folder) and compare its outputs with `expected`
    (default: the reference's for those inputs); raise a ProgramMismatch with the report
    if one differs. Returns the run (its stderr holds what a checking build reports)."""
    with tempfile.TemporaryDirectory(prefix="exactc-conforms-") as tmp:
        folder = Path(tmp) / "out" if out is None else Path(out)
        cases: list[tuple[Path, Path, Mapping[str, np.ndarray], Mapping[str, np.ndarray] | None]] = []
        if inputs is None:
            inputs_dir = program.root / "conformance" / "inputs"
            cases.append((inputs_dir, folder, prepared.expected if expected is None else expected, None))
            if expected is None:
                for length, (at, want) in sorted(prepared.lengths.items()):
                    case = program.root / "conformance" / "lengths" / f"T{length}" / "inputs"
                    cases.append((case, Path(tmp) / f"out-T{length}", want, at))
        else:
            inputs_dir = _write_inputs(Path(tmp) / "in", inputs)
            cases.append((inputs_dir, folder, expected if expected is not None else walk.evaluate(
                prepared.program, prepared.site, prepared.params, inputs), inputs))
        for _, target, _, _ in cases:
            target.mkdir(parents=True, exist_ok=True)
        done = program.run([(source, target) for source, target, _, _ in cases], threads)
        if done.returncode != 0:
            raise ProgramMismatch(f"{program.path} exited with {done.returncode}:\n{done.stderr}\n"
                                  f"  build: {program.make_line()}")
        for source, target, want, given in cases:
            problems = output_mismatches(want, load_outputs(target), prepared.site)
            if problems:
                raise ProgramMismatch(report(program, prepared, problems, source, threads, given))
        return done
