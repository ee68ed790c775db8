"""The mutation runner: a baseline, a self-test, then every mutant in its own copy.

    exactc mutants [-j 2] [--only NAME ...] [--json FILE] [--markdown FILE]

Outcomes are kept apart: caught, NOT CAUGHT, crashed (the checks could not run: an import
or collection error, a pytest killed by a signal, a batch whose dask worker died under it),
timed out, does not apply (the mutant's feature is absent, or this CPU cannot show it: a
mistake in code compiled for AVX-512 only), and catalog error (its anchor is gone). Only a
check that fails (pytest's exit 1) catches; a crash or a timeout names the check and how it
ended. The exit status is non-zero if the baseline fails or any mutant is anything but
caught or does not apply. The last line is

    mutants: <caught>/<total> caught
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from exactc.mutants.catalog import CATALOG, CHECKS
from exactc.mutants.model import CatalogError, Mutant
from exactc.verify import engine
from exactc.runtime.toolchain import cache_dir
from exactc.verify.checkout import checkout_root

# What a copy leaves out: environments, caches and history, never source.
COPY_IGNORED = (
    ".venv", ".git", ".exactc-cache", ".hypothesis", ".pytest_cache", "__pycache__",
    "*.egg-info", "*.so", ".benchmarks", "build",
)
IGNORED = shutil.ignore_patterns(*COPY_IGNORED)
DEFAULT_TIMEOUT = 900.0
MUTMUT_SECTION = "## The mutmut campaign"
THIN_SECTION = "## Where the harness is thin"  # the last section the runner writes


@dataclasses.dataclass
class Result:
    mutant: str
    outcome: str  # caught, NOT CAUGHT, crashed, timed out, does not apply, catalog error
    caught_by: list[str]
    seconds: float
    detail: str = ""


def make_copy(tree: Path, workdir: Path) -> Path:
    """A copy of the checkout `tree` in workdir/tree: its package folder, tree/exactc, is
    what `import exactc` finds in the copy's environment (copy_env)."""
    root = workdir / "tree"
    shutil.copytree(tree, root, ignore=IGNORED, symlinks=True)
    return root


def copy_env(root: Path) -> dict[str, str]:
    """The environment of a check in the copy at `root`: the copy goes first on
    PYTHONPATH, ahead of any installed exactc."""
    env = dict(os.environ)
    # no empty entry: Python reads one as the current directory
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    env["HYPOTHESIS_PROFILE"] = "ci"
    env.pop("EXACTC_STATS_DIR", None)
    env["COLUMNS"] = "400"  # pytest's short summary then keeps each failure's message
    # Compiled libraries are cached by content hash, so a shared cache is safe and fast.
    env.setdefault("EXACTC_CACHE", str(cache_dir()))
    return env


def run_check(name: str, root: Path, env: dict, timeout: float) -> str:
    """'pass', 'fail', 'error' (pytest could not run the tests, or died by a signal) or
    'timeout'."""
    return run_check_detail(name, root, env, timeout)[0]


def _failure_lines(output: str) -> str:
    """pytest's short summary lines (FAILED/ERROR ...), which name the test and why; not
    the captured log lines above them, which begin with ERROR too (dask's scheduler logs a
    worker's death so)."""
    summary = output.rpartition("short test summary info")[2]
    lines = [ln for ln in summary.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return "; ".join(ln[:300] for ln in lines[:3])


def run_check_detail(name: str, root: Path, env: dict, timeout: float) -> tuple[str, str]:
    """The verdict and, when it is not 'pass', what pytest said failed. Only exit 0 passes
    and only exit 1 (tests failed) fails: a pytest killed by a signal (the OOM killer) is an
    'error' that says which signal, never a pass or a catch."""
    check = CHECKS[name]
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           "-p", "no:randomly", *check.pytest_args()]
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", f"{name}: ran past {timeout:.0f} s"
    if proc.returncode == 0:
        return "pass", ""
    detail = _failure_lines(proc.stdout) or proc.stdout[-500:] + proc.stderr[-500:]
    if proc.returncode == 1:
        return "fail", f"{name}: {detail}"
    return "error", f"{name}: pytest {engine.ending(proc.returncode)}: {detail}"


def run_mutant(tree: Path, mutant: Mutant, timeout: float) -> Result:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"exactc-mutant-{mutant.name}-") as tmp:
        root = make_copy(tree, Path(tmp))
        missing = mutant.missing(root)
        if missing:
            return Result(mutant.name, "does not apply", [], time.monotonic() - start,
                          f"needs {', '.join(missing)}")
        try:
            mutant.apply(root)
        except CatalogError as error:
            return Result(mutant.name, "catalog error", [], time.monotonic() - start, str(error))
        env = copy_env(root)
        details = {name: run_check_detail(name, root, env, timeout) for name in mutant.checks}
    seconds = time.monotonic() - start
    verdicts = {name: verdict for name, (verdict, _) in details.items()}
    failed = [n for n, v in verdicts.items() if v == "fail"]
    if failed:
        said = " | ".join(details[n][1] for n in failed)
        return Result(mutant.name, "caught", failed, seconds, said)
    for verdict, outcome in (("timeout", "timed out"), ("error", "crashed")):
        named = [details[n][1] for n, v in verdicts.items() if v == verdict]
        if named:
            return Result(mutant.name, outcome, [], seconds, " | ".join(named))
    return Result(mutant.name, "NOT CAUGHT", [], seconds)


def lost_mutant(mutant: Mutant, why: str) -> Result:
    """A mutant whose batch did not come back from the engine (its worker died under it):
    crashed, never caught or NOT CAUGHT."""
    return Result(mutant.name, "crashed", [], 0.0, f"its batch did not come back: {why}")


def run_mutants(tree: Path, catalog: list[Mutant], timeout: float, jobs: int) -> list[Result]:
    """Every mutant of `catalog` in the order given, one a batch, on dask (verify/engine.py:
    a LocalCluster of `jobs` workers, or EXACTC_SCHEDULER's cluster, whose workers must see
    the same tree path); a progress line as each comes back."""
    done: list[Result] = []
    return engine.run_all(functools.partial(run_mutant, tree, timeout=timeout), catalog, jobs,
                          on_result=lambda _, r: (done.append(r), progress(len(done), len(catalog), r)),
                          lost=lost_mutant)


def baseline(tree: Path, check_names: list[str], timeout: float, jobs: int) -> dict[str, tuple[str, str]]:
    """Every check on an unmutated copy: each must pass, or no verdict means anything.
    Each check's verdict and, if it did not pass, what failed."""
    with tempfile.TemporaryDirectory(prefix="exactc-baseline-") as tmp:
        root = make_copy(tree, Path(tmp))
        env = copy_env(root)
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = {n: pool.submit(run_check_detail, n, root, env, timeout) for n in check_names}
            return {n: f.result() for n, f in futures.items()}


def self_test(tree: Path) -> str:
    """A patch must change the copy, not the tree, and `import exactc` in the copy's
    environment must load the copy. Returns '' when all holds, else what failed."""
    probe = Mutant("self-test", "a marker line in the package docstring", "exactc/__init__.py",
                   '__version__ = "', '__mutant_marker__ = True\n__version__ = "', ())
    original = (tree / "exactc" / "__init__.py").read_text()
    with tempfile.TemporaryDirectory(prefix="exactc-selftest-") as tmp:
        root = make_copy(tree, Path(tmp))
        probe.apply(root)
        if (tree / "exactc" / "__init__.py").read_text() != original:
            return "the patch changed the working tree"
        code = "import exactc; print(exactc.__file__, getattr(exactc, '__mutant_marker__', False))"
        out = subprocess.run([sys.executable, "-c", code], env=copy_env(root), cwd=tmp,
                             capture_output=True, text=True)
        printed = out.stdout.strip()
        if not printed.endswith("True") or str(root) not in printed:
            return f"the copy's environment imports the wrong exactc: {printed or out.stderr.strip()}"
    return ""


def progress(done: int, total: int, last: Result) -> None:
    width = 30
    filled = width * done // max(total, 1)
    bar = "#" * filled + "." * (width - filled)
    line = f"[{bar}] {done}/{total} {last.mutant}: {last.outcome} ({last.seconds:.0f} s)"
    end = "\r" if sys.stderr.isatty() and done < total else "\n"
    print(line.ljust(100), end=end, file=sys.stderr, flush=True)


def table(results: list[Result]) -> str:
    """The report table, in markdown (readable as plain text too)."""
    mutants = {m.name: m for m in CATALOG}
    lines = ["| mutant | family | outcome | caught by | seconds |", "|---|---|---|---|---|"]
    for r in results:
        family = mutants[r.mutant].family if r.mutant in mutants else ""
        caught_by = ", ".join(r.caught_by) or (r.detail if r.outcome != "caught" else "")
        lines.append(f"| {r.mutant} | {family} | {r.outcome} | {caught_by} | {r.seconds:.0f} |")
    return "\n".join(lines)


class MutantsError(ValueError):
    """A request the runner refuses (an unknown mutant name): exit code 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `exactc mutants` (cli.py's table registers it)."""
    parser.add_argument("-j", "--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME", help="run these mutants only")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per check run")
    parser.add_argument("--json", type=Path, default=None,
                        help="where the JSON report goes (default: mutants.json in the cache folder)")
    parser.add_argument("--tree", metavar="DIR", default=None,
                        help="the checkout of exactc to mutate (default: the one exactc is imported from, "
                             "else the current directory)")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also write the report as a markdown page (docs/mutants.md)")
    parser.add_argument("--list", action="store_true", help="list the catalog and exit")


def run(args: argparse.Namespace) -> int:
    """Run the catalog (or --only NAME ...): 0 when every applicable mutant is caught."""
    catalog = [m for m in CATALOG if args.only is None or m.name in args.only]
    if args.only:
        unknown = sorted(set(args.only) - {m.name for m in CATALOG})
        if unknown:
            raise MutantsError(f"unknown mutant(s): {', '.join(unknown)}; see --list")
    if args.list:
        for m in catalog:
            print(f"{m.name:<36} {m.family:<12} {m.description}  [{', '.join(m.checks)}]")
        return 0

    tree = checkout_root(args.tree)
    args.json = args.json or cache_dir() / "mutants.json"
    start = time.monotonic()
    problem = self_test(tree)
    if problem:
        print(f"mutants: self-test failed: {problem}", file=sys.stderr)
        return 2
    checks = sorted({c for m in catalog for c in m.checks})
    print(f"baseline: {len(checks)} checks on the unmutated tree ...", file=sys.stderr, flush=True)
    details = baseline(tree, checks, args.timeout, args.jobs)
    verdicts = {n: verdict for n, (verdict, _) in details.items()}
    broken = {n: v for n, v in verdicts.items() if v != "pass"}
    if broken:
        print(f"baseline FAILED, so no mutant verdict means anything: {broken}", file=sys.stderr)
        for name in broken:
            print(f"  {details[name][1]}", file=sys.stderr)
        return 2
    print(f"baseline: all {len(checks)} checks pass", file=sys.stderr, flush=True)

    results = run_mutants(tree, catalog, args.timeout, args.jobs)
    wall = time.monotonic() - start

    text = table(results)
    print(text)
    caught = sum(r.outcome == "caught" for r in results)
    applicable = [r for r in results if r.outcome != "does not apply"]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(
        {"wall_seconds": round(wall, 1), "baseline": verdicts,
         "results": [dataclasses.asdict(r) for r in results]}, indent=2) + "\n")
    if args.markdown:
        write_markdown(args.markdown, results, wall, caught, len(applicable))
    print(f"report: {args.json}; wall time {wall:.0f} s with -j {args.jobs}")
    print(f"mutants: {caught}/{len(applicable)} caught")
    return 0 if caught == len(applicable) else 1


def write_markdown(path: Path, results: list[Result], wall: float, caught: int, total: int) -> None:
    thin = [r for r in results if r.outcome == "caught" and len(r.caught_by) == 1]
    lines = [
        "# The mutant catalog and what catches it",
        "",
        "Every check in exactc's harness must be seen to fail. Each mutant below is a small,",
        "real mistake applied to a copy of the tree; the runner runs the checks listed for it",
        "(ci profile) and records which failed. Regenerate this page with `make mutants-report`.",
        "",
        f"Last run: {caught}/{total} caught, wall time {wall:.0f} s on 2 cores "
        "(`make mutants-report`).",
        "",
        table(results),
        "",
        "## Descriptions",
        "",
        *(f"- **{m.name}** ({m.family}): {m.description}" for m in CATALOG),
        "",
        THIN_SECTION,
        "",
        "Mutants that exactly one check catches: removing that check would let them through.",
        "",
        *(f"- {r.mutant}: only `{r.caught_by[0]}`" for r in thin),
        "",
    ]
    if not thin:
        lines.insert(-1, "None in the last run.")
    previous = path.read_text() if path.exists() else ""
    kept = sections_kept(previous)
    path.write_text("\n".join(lines) + ("\n" + kept if kept else ""))


def sections_kept(previous: str) -> str:
    """What follows the runner's own sections in the page it rewrites: the mutmut
    campaign's (make mutmut) and any other written after them, kept as they were."""
    own_last = previous.find(THIN_SECTION)
    if own_last < 0:
        return previous[previous.find(MUTMUT_SECTION):] if MUTMUT_SECTION in previous else ""
    following = previous.find("\n## ", own_last + 1)
    return previous[following + 1:] if following >= 0 else ""
