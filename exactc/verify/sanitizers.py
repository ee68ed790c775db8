"""Exported programs under AddressSanitizer and UndefinedBehaviorSanitizer, and under
valgrind's memcheck: part of `make verify`.

A sample of whole programs, every architecture's forward in f32 and bf16, plain and with
`--plan auto`, is exported at small dimensions and built by its own Makefile (the one
build path, programs.py, and its export cache) with

    CFLAGS='-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all'

under gcc and clang. The sanitizers add checks, not value-changing flags: the Makefile's
STRICT flags still come last and its guard accepts them. Each program runs its
conformance (conformance/check.sh: the program and the comparer, both sanitized) at
OMP_NUM_THREADS=1 and 3. A run *reports* when a sanitizer wrote a report (a bad read or
write, a leak, undefined behaviour); it *fails* when check.sh exits non-zero otherwise
(the bits differ). The summary lines are

    sanitizers: <n> programs, <m> reports
    memcheck: <n> programs, <m> errors

the second from one program per architecture (f32, plain, gcc -O2 -g) run under
`valgrind --tool=memcheck --leak-check=full` on its conformance inputs, its outputs
compared with the reference's by the one comparison. The exit status is 0 only when
every run is clean and conformant.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from exactc.exporter import export
from exactc.verify.conformance import load_outputs, output_mismatches
from exactc.verify.probes.baseline import SMALL
from exactc.programs import Build, Program, ProgramFailure, exported

SANITIZE = "-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
MEMCHECK_CFLAGS = "-O2 -g"
ARCHITECTURES = ("gpt", "bert", "llama")
SITES = ("f32", "bf16")
PLANS = (None, "auto")
COMPILERS = ("gcc", "clang")
THREADS = (1, 3)
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}
# The first line of a sanitizer's report; what follows it is the report.
REPORT = re.compile(r"ERROR: (Address|Leak)Sanitizer|runtime error:|UndefinedBehaviorSanitizer|AddressSanitizer:")
REPORT_LINES = 8  # lines of a report shown in the summary
ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
VALGRIND_BANNER = re.compile(r"==\d+== (Memcheck|Copyright|Using|Command)")


@dataclasses.dataclass(frozen=True)
class Sample:
    """One exported program of the sample."""

    model: str
    site: str
    plan: str | None = None
    entry: str = "forward"

    def spec(self) -> export.ExportSpec:
        return export.ExportSpec(self.model, self.entry, self.site, 3, SMALL[self.model], plan=self.plan)

    def __str__(self) -> str:
        return f"{self.model}.{self.entry} {self.site} {'planned' if self.plan else 'plain'}"


SAMPLE = tuple(Sample(m, s, p) for m in ARCHITECTURES for s in SITES for p in PLANS)
MEMCHECK_SAMPLE = tuple(Sample(m, "f32") for m in ARCHITECTURES)


@dataclasses.dataclass
class Run:
    """One program run: its conformance at a thread count, and what went wrong."""

    sample: Sample
    cc: str
    threads: int | None  # None: it did not run (its build failed)
    report: list[str]  # the first lines of a sanitizer's (or memcheck's) report; [] when none
    failure: str = ""  # a non-zero exit or a difference from the reference, without a report
    tool: str = "sanitizer"  # who wrote the report: a sanitizer or memcheck

    @property
    def clean(self) -> bool:
        return not self.report and not self.failure

    def describe(self) -> str:
        head = f"{self.sample}, {self.cc}" + (f", OMP_NUM_THREADS={self.threads}" if self.threads else "")
        lines = [f"{head}: {f'{self.tool} report' if self.report else self.failure}"]
        return "\n".join(lines + [f"    {line}" for line in self.report])


def sanitizer_report(stderr: str) -> list[str]:
    """The first REPORT_LINES lines of the first sanitizer report in `stderr`; [] if none."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if REPORT.search(line):
            return [text.rstrip() for text in lines[i: i + REPORT_LINES]]
    return []


def sanitized_build(cc: str) -> Build:
    return Build(cc=cc, openmp=True, cflags=SANITIZE)


def _last_words(done: subprocess.CompletedProcess) -> str:
    text = (done.stdout + done.stderr).strip().splitlines()
    return f"check.sh exited with {done.returncode}: {text[-1].strip() if text else '(no message)'}"


def run_sanitized(program: Program, sample: Sample, threads: Sequence[int]) -> list[Run]:
    """check.sh on a sanitized program at each thread count."""
    runs = []
    for n in threads:
        done = program.check(n, env=SANITIZER_ENV)
        report = sanitizer_report(done.stderr)
        runs.append(Run(sample, program.build.cc, n, report, "" if done.returncode == 0 or report else
                        _last_words(done)))
    return runs


def sanitize(samples: Sequence[Sample] = SAMPLE, compilers: Sequence[str] = COMPILERS,
             threads: Sequence[int] = THREADS, progress: Callable[[str], None] = print) -> tuple[int, list[Run]]:
    """Build each sample with each compiler under the sanitizers and run it: (programs
    built, runs)."""
    runs: list[Run] = []
    built = 0
    total = len(samples) * len(compilers)
    for sample in samples:
        for cc in compilers:
            start = time.monotonic()
            try:
                program = exported(sample.spec(), sanitized_build(cc), progress=None)
            except ProgramFailure as failed:
                runs.append(Run(sample, cc, None, [], f"build failed: {failed.summary}"))
                progress(f"sanitizers [{built + 1}/{total}] {sample}, {cc}: build failed")
                built += 1
                continue
            built += 1
            mine = run_sanitized(program, sample, threads)
            runs += mine
            verdicts = ", ".join(f"{r.threads} thread{'s' * (r.threads > 1)} "
                                 f"{'ok' if r.clean else 'REPORT' if r.report else 'FAILED'}" for r in mine)
            progress(f"sanitizers [{built}/{total}] {sample}, {cc}: {verdicts} "
                     f"({time.monotonic() - start:.0f} s)")
    return built, runs


def memcheck_report(stderr: str) -> list[str]:
    """The first REPORT_LINES of valgrind's lines after its banner: the first error."""
    lines = [line for line in stderr.splitlines() if line.startswith("==")]
    first = next((i for i, line in enumerate(lines) if re.match(r"==\d+== \S", line)
                  and not VALGRIND_BANNER.match(line)), len(lines))
    return lines[first: first + REPORT_LINES]


def memcheck_one(program: Program, sample: Sample) -> tuple[int, Run]:
    """The program under memcheck on its conformance inputs, one thread: (errors, run)."""
    if shutil.which("valgrind") is None:
        raise ProgramFailure("valgrind is not installed (make install installs it)")
    with tempfile.TemporaryDirectory(prefix="exactc-memcheck-") as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        command = ["valgrind", "--tool=memcheck", "--leak-check=full", "--errors-for-leak-kinds=definite",
                   "--show-leak-kinds=definite", "--error-exitcode=99", str(program.path),
                   str(program.root / "weights.safetensors"), str(program.root / "conformance" / "inputs"), str(out)]
        done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        found = ERROR_SUMMARY.search(done.stderr)
        errors = int(found.group(1)) if found else 0
        report = memcheck_report(done.stderr) if errors else []
        failure = ""
        if not found:
            failure = f"valgrind printed no error summary (exit {done.returncode})"
        elif done.returncode not in (0, 99):
            failure = f"exited with {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}"
        else:
            problems = output_mismatches(load_outputs(program.root / "conformance" / "expected"),
                                         load_outputs(out), sample.site)
            failure = "; ".join(map(str, problems))
        return errors, Run(sample, program.build.cc, 1, report, failure, tool="memcheck")


def memcheck(samples: Sequence[Sample] = MEMCHECK_SAMPLE, cc: str = "gcc",
             progress: Callable[[str], None] = print) -> tuple[int, int, list[Run]]:
    """Each sample under memcheck: (programs, errors, runs)."""
    errors, runs = 0, []
    for i, sample in enumerate(samples, 1):
        start = time.monotonic()
        try:
            program = exported(sample.spec(), Build(cc=cc, openmp=True, cflags=MEMCHECK_CFLAGS))
            count, run = memcheck_one(program, sample)
        except ProgramFailure as failed:
            count, run = 0, Run(sample, cc, None, [], f"failed: {failed.summary}", tool="memcheck")
        errors += count
        runs.append(run)
        verdict = "ok" if run.clean else f"{count} errors" if count else "FAILED"
        progress(f"memcheck [{i}/{len(samples)}] {sample}, {cc}: {verdict} ({time.monotonic() - start:.0f} s)")
    return len(samples), errors, runs


def summary_lines(programs: int, runs: list[Run], memchecked: int, errors: int, memcheck_runs: list[Run]) -> list[str]:
    """The report of every run that was not clean, then the two summary lines."""
    lines = [run.describe() for run in runs + memcheck_runs if not run.clean]
    reports = sum(bool(run.report) for run in runs)
    failed = sum(bool(run.failure) for run in runs + memcheck_runs)
    if failed:
        lines.append(f"sanitizers and memcheck: {failed} runs failed without a report")
    lines.append(f"sanitizers: {programs} programs, {reports} reports")
    lines.append(f"memcheck: {memchecked} programs, {errors} errors")
    return lines


def verify(progress: Callable[[str], None] = print, with_memcheck: bool = True) -> tuple[list[str], bool]:
    """The whole run of `make verify`: (summary lines, every run clean)."""
    programs, runs = sanitize(progress=progress)
    memchecked, errors, memcheck_runs = memcheck(progress=progress) if with_memcheck else (0, 0, [])
    clean = all(run.clean for run in runs + memcheck_runs)
    return summary_lines(programs, runs, memchecked, errors, memcheck_runs), clean


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exactc.verify.sanitizers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-memcheck", action="store_true", help="skip the memcheck runs")
    args = parser.parse_args(argv)
    start = time.monotonic()
    lines, clean = verify(progress=lambda line: print(line, flush=True), with_memcheck=not args.no_memcheck)
    print("\n".join(lines))
    print(f"sanitizers and memcheck: {time.monotonic() - start:.0f} s")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
