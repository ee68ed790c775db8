"""`make verify`: run the campaign profile of the differential checks, then print a
summary a person reads at a glance.

First the kernel cases: `--cases` of them (make verify CASES=...), and half as many of the
fused realization (the `fma:` line, at least `--min-fused-cases`), drawn by Hypothesis in
tasks (verify/kernel_campaign.py: families of cases that share one compiled kernel) that
run in worker processes (verify/engine.py). Then the other checks: they record one line
per case in EXACTC_STATS_DIR (verify/kernels.py); this module runs pytest over both
cores, gathers those lines and prints a table of cases per
primitive x type, a line per family of other checks (layouts, splits, keys, sampling:
`keys: <n> checked, <m> mismatches`; generate: cache against recompute and the
exported prefill and decode programs; quant: the cases of the quantized primitives;
k-quants: those of them whose weights are Q4_K, Q5_K or Q6_K), the
sanitized and memchecked programs of verify/sanitizers.py (`sanitizers: <n> programs,
<m> reports`, `memcheck: <n> programs, <m> errors`), and the last line

    verify: <cases> cases, <mismatches> mismatches, <rate> cases/s

whose rate is the kernel phase's: its cases over its wall time.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from exactc.exporter.types import SITE_TYPES
from exactc.verify import engine, kernel_campaign, sanitizers

# The kernel cases of tests/test_primitives.py run in the kernel phase, not under pytest.
CAMPAIGN_TESTS = [
    "tests/test_compilers.py",
    "tests/test_conversions.py",
    "tests/test_libm.py",
    "tests/test_layouts.py",
    "tests/test_keys.py",
    "tests/test_sampling.py",
    "tests/test_quant.py",
    "tests/test_generation.py",
    "tests/test_generate_program.py",
]

# The fused realization's kernel cases (the fma: line, docs/semantics.md section 18) a run
# must reach: at the default --cases, the kernel phase plans half as many as the default
# realization's, half of their linear and matmul kernels on designed adversarial operands.
MIN_FUSED_CASES = 5000
DEFAULT_CASES = 10_000  # make verify's CASES

# Families a run must check at least this often when the test file that feeds them runs.
MIN_FAMILY_CHECKS = {
    "layouts": ("tests/test_layouts.py", 2000),
    "splits": ("tests/test_layouts.py", 2000),
    "keys": ("tests/test_keys.py", 10000),  # blocks, draws, uniforms, keys: C, twin, oracle
    "sampling": ("tests/test_sampling.py", 2000),  # sampler calls, C against the reference
    "quant": ("tests/test_quant.py", 2000),  # cases of the quantized primitives, C against the reference
    # steps of cache against recompute, and exported prefill / decode runs against the reference
    "generate": ("tests/test_generation.py", 100),
}


# Families of the kernel phase a run at its default size (or more) must check this often:
# the backward primitives' cases, C against the reference at f64 and f32.
DEFAULT_CASES = 10_000
MIN_KERNEL_FAMILY_CHECKS = {"grad": 2000}


def read_stats(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        rows.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return rows


def summary(rows: list[dict], seconds: float, rated: tuple[int, float] | None = None) -> tuple[str, int, int]:
    """The table and the verdict line; returns (text, cases, mismatches). `rated`: the
    (cases, seconds) the rate is taken from, else every kernel case over `seconds`."""
    kernel_rows = [r for r in rows if r["family"] == "kernels"]
    counts = collections.Counter((r["primitive"], r["site"]) for r in kernel_rows)
    bad = collections.Counter((r["primitive"], r["site"]) for r in kernel_rows if r["status"] != "equal")
    primitives = sorted({p for p, _ in counts})
    width = max([len(p) for p in primitives] + [9])
    lines = [f"{'primitive':<{width}}  " + "  ".join(f"{s:>12}" for s in SITE_TYPES)]
    for p in primitives:
        cells = []
        for s in SITE_TYPES:
            n, m = counts[(p, s)], bad[(p, s)]
            cells.append(f"{n:>12}" if not m else f"{f'{n} ({m} BAD)':>12}")
        lines.append(f"{p:<{width}}  " + "  ".join(cells))
    families = collections.Counter(r["family"] for r in rows)
    family_bad = collections.Counter(r["family"] for r in rows if r["status"] != "equal")
    for family in sorted(families):
        if family != "kernels":
            lines.append(f"{family}: {families[family]} checked, {family_bad[family]} mismatches")
    cases = len(kernel_rows)
    mismatches = sum(bad.values())
    rated_cases, rated_seconds = rated or (cases, seconds)
    rate = rated_cases / rated_seconds if rated_seconds > 0 else 0.0
    status_note = "all equal" if mismatches == 0 else f"{mismatches} NOT equal"
    lines.append(f"kernel cases: {cases} in {seconds:.0f} s on both cores, {status_note}")
    lines.append(f"verify: {cases} cases, {mismatches} mismatches, {rate:.1f} cases/s")
    return "\n".join(lines), cases, mismatches


def kernel_phase(cases: int, jobs: int, seed: int, fused_cases: int | None = None
                 ) -> tuple[list[dict], float, list[str], str]:
    """Run the kernel cases: (rows, seconds, failure reports, a line saying what ran)."""
    database = str(kernel_campaign.database_dir())
    tasks = kernel_campaign.plan_tasks(cases, seed=seed, database=database, fused_cases=fused_cases)
    progress = engine.Progress("kernel cases", len(tasks),
                               lambda done: f"{sum(r.cases for r in done)} cases")
    start = time.monotonic()
    results = engine.run_all(kernel_campaign.run_task, tasks, jobs, progress, lost=kernel_campaign.lost_task)
    seconds = time.monotonic() - start
    rows, kernels, failures = kernel_campaign.merge(results)
    ran = sum(r["family"] == "kernels" for r in rows)
    line = (f"kernel phase: {ran} cases on {kernels} compiled kernels in {len(tasks)} tasks (seed {seed}), "
            f"{seconds:.0f} s on {jobs} workers")
    return rows, seconds, failures, line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exactc.verify.campaign", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2, help="pytest-xdist workers (default 2)")
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES,
                        help="kernel cases of the kernel phase (default 10000; 0: none)")
    parser.add_argument("--seed", type=int, default=None, help="the kernel phase's seed (default: drawn)")
    parser.add_argument("--min-cases", type=int, default=10_000,
                        help="fail unless at least this many kernel cases ran (default 10000)")
    parser.add_argument("--fused-cases", type=int, default=None,
                        help="kernel cases of the fused realization (default: half of --cases)")
    parser.add_argument("--min-fused-cases", type=int, default=MIN_FUSED_CASES,
                        help=f"fail unless at least this many fused cases ran (the fma: line; default {MIN_FUSED_CASES})")
    parser.add_argument("--tests", nargs="*", default=CAMPAIGN_TESTS, help="test files to run")
    parser.add_argument("--no-sanitizers", action="store_true",
                        help="skip the sanitizer and memcheck runs of exported programs (verify/sanitizers.py)")
    args = parser.parse_args(argv)

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    kernel_rows, kernel_seconds, failures, kernel_line = kernel_phase(args.cases, args.jobs, seed, args.fused_cases)
    status, rows, seconds = 0, list(kernel_rows), kernel_seconds
    if args.tests:
        stats = Path(tempfile.mkdtemp(prefix="exactc-stats-"))
        env = dict(os.environ, HYPOTHESIS_PROFILE="campaign", EXACTC_STATS_DIR=str(stats))
        cmd = [sys.executable, "-m", "pytest", "-q", "-n", str(args.jobs), *args.tests]
        print("running:", " ".join(cmd), flush=True)
        start = time.monotonic()
        status = subprocess.run(cmd, env=env).returncode
        seconds += time.monotonic() - start
        rows += read_stats(stats)
    ran = sum(r["family"] == "kernels" for r in kernel_rows)
    text, cases, mismatches = summary(rows, seconds, (ran, kernel_seconds))
    *table, last = text.splitlines()
    text = "\n".join(table + [kernel_line, *failures, last])
    clean = True
    if not args.no_sanitizers:
        lines, clean = sanitizers.verify(progress=lambda line: print(line, flush=True))
        *table, last = text.splitlines()
        text = "\n".join(table + lines + [last])
    print(text)
    if status != 0:
        print(f"verify: pytest exited {status}", file=sys.stderr)
        return status
    if failures:
        print(f"verify: {len(failures)} kernel tasks failed (their reports above)", file=sys.stderr)
        return 1
    if cases < args.min_cases:
        print(f"verify: only {cases} kernel cases ran; at least {args.min_cases} required", file=sys.stderr)
        return 1
    for family, least in MIN_KERNEL_FAMILY_CHECKS.items():
        checked = sum(r["family"] == family for r in kernel_rows)
        if args.cases >= DEFAULT_CASES and checked < least:
            print(f"verify: only {checked} {family} checked; at least {least} required", file=sys.stderr)
            return 1
    fused = sum(r["family"] == "fma" for r in kernel_rows)
    if args.cases > 0 and fused < args.min_fused_cases:
        print(f"verify: only {fused} fused kernel cases ran (fma:); at least {args.min_fused_cases} required",
              file=sys.stderr)
        return 1
    for family, (test, least) in MIN_FAMILY_CHECKS.items():
        checked = sum(r["family"] == family for r in rows)
        if test in args.tests and checked < least:
            print(f"verify: only {checked} {family} checked; at least {least} required", file=sys.stderr)
            return 1
    mismatches += sum(r["family"] != "kernels" and r["status"] != "equal" for r in rows)
    if not clean:
        print("verify: a sanitized or memchecked program reported or failed (above)", file=sys.stderr)
    return 1 if mismatches or not clean else 0


if __name__ == "__main__":
    sys.exit(main())
