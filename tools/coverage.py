"""`make coverage`: branch coverage of the Python stages and of the C runtime's readers.

    python tools/coverage.py [--jobs 2] [--tests tests] [--out DIR]

- Python: the tests (make test's selection: the ci profile, not the slow ones) run under
  coverage.py in branch mode, the xdist workers and every Python subprocess included
  (coverage's `patch = subprocess`); the figure is covered branches over branches of
  exactc/exporter/, and the report lists every file of exactc/ with its missed branches.
- C: while the tests run, every runtime source that gcc compiles through verify/build.py
  is built with --coverage (EXACTC_GCOV_DIR, a folder of this run); then each fuzz
  harness of fuzz/ is built with gcc --coverage and replay.c's main and replays the seed
  corpus and the working corpus `make fuzz` keeps. gcov (JSON) gives each branch's count
  per object; a branch is covered when any object ran it. The figure is over the readers,
  runtime/exactc_npy.c and runtime/exactc_safetensors.c.

The uncovered branches go to DIR (python.txt: coverage's report with the missed branch
arcs; c.txt: file:line and the branches never taken), and the last line is

    coverage: python <p> % branches (exporter/), C runtime <c> % branches (readers)

It reports and fails only if a step cannot run: the figures are for a person to read.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS  # noqa: E402
from exactc.verify.build import GCOV_ENV  # noqa: E402
from exactc.runtime.toolchain import cache_dir  # noqa: E402

READERS = ("exactc_npy.c", "exactc_safetensors.c")
HARNESSES = ("npy", "safetensors")
# coverage.py's settings for this run: branch mode, every Python process of the run.
COVERAGE_RC = """\
[run]
branch = true
parallel = true
patch = subprocess
source = {root}/exactc
data_file = {data}
[report]
show_missing = true
skip_covered = false
precision = 1
"""


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    shown = [str(c) for c in cmd[:12]] + ([f"... ({len(cmd) - 12} more)"] if len(cmd) > 12 else [])
    print("coverage: $ " + " ".join(shown), flush=True)
    return subprocess.run(cmd, **kwargs)


def python_coverage(tests: list[str], jobs: int, out: Path, gcov: Path, work: Path) -> float:
    """Run the tests under coverage.py; the branch figure of exactc/exporter/."""
    rc = work / "coveragerc"
    rc.write_text(COVERAGE_RC.format(root=ROOT, data=work / ".coverage"))
    env = dict(os.environ, COVERAGE_RCFILE=str(rc), EXACTC_REQUIRE_INSTALLED="1", HYPOTHESIS_PROFILE="ci")
    env[GCOV_ENV] = str(gcov)
    coverage = [sys.executable, "-m", "coverage"]
    done = run([*coverage, "run", "-m", "pytest", "-q", "-n", str(jobs), "-m", "not slow", *tests], cwd=ROOT, env=env)
    if done.returncode not in (0, 1):  # 1: a test failed; the figures still mean something, and are said
        raise SystemExit(f"coverage: pytest could not run (exit {done.returncode})")
    if done.returncode == 1:
        print("coverage: some tests FAILED in this run (see above); the figures count what ran", flush=True)
    run([*coverage, "combine", "-q"], cwd=ROOT, env=env, check=True)
    with (out / "python.txt").open("w") as report:
        run([*coverage, "report"], cwd=ROOT, env=env, stdout=report, check=True)
    summary = work / "coverage.json"
    run([*coverage, "json", "-q", "-o", str(summary)], cwd=ROOT, env=env, check=True)
    files = json.loads(summary.read_text())["files"]
    exporter = [f for name, f in files.items() if "exactc/exporter/" in name.replace(os.sep, "/")]
    branches = sum(f["summary"]["num_branches"] for f in exporter)
    covered = sum(f["summary"]["covered_branches"] for f in exporter)
    worst = sorted(((f["summary"]["missing_branches"], name) for name, f in files.items()), reverse=True)[:8]
    print("coverage: python files with the most missed branches: "
          + ", ".join(f"{Path(n).relative_to(ROOT) if Path(n).is_absolute() else n} {m}" for m, n in worst))
    return 100.0 * covered / branches if branches else 0.0


def replay_corpora(gcov: Path) -> None:
    """Each fuzz harness built with gcc --coverage (replay.c's main) over the seed corpus
    and the working corpus of `make fuzz`."""
    fuzz = ROOT / "fuzz"
    for harness in HARNESSES:
        folder = gcov / f"fuzz-{harness}"
        folder.mkdir(parents=True, exist_ok=True)
        objects = []
        for source in [fuzz / f"{harness}_fuzz.c", fuzz / "replay.c", *(RUNTIME_DIR / r for r in READERS)]:
            obj = folder / (source.stem + ".o")
            run(["gcc", *STRICT_FLAGS, "-O2", "-g", f"-I{RUNTIME_DIR}", f"-I{fuzz}", "--coverage", "-c",
                 "-o", str(obj), str(source)], check=True)
            objects.append(str(obj))
        exe = folder / f"{harness}_replay"
        run(["gcc", "--coverage", "-o", str(exe), *objects, "-lm"], check=True)
        inputs = sorted((fuzz / "corpus" / harness).iterdir())
        working = cache_dir() / "fuzz" / "corpus" / harness
        if working.is_dir():
            inputs += sorted(working.iterdir())
        print(f"coverage: {harness}: {len(inputs)} corpus inputs", flush=True)
        with tempfile.TemporaryDirectory(prefix="exactc-coverage-fuzz-") as scratch:
            for start in range(0, len(inputs), 500):  # argument lists of a sane length
                run([str(exe), *map(str, inputs[start:start + 500])], check=True, stdout=subprocess.DEVNULL,
                    env=dict(os.environ, EXACTC_FUZZ_DIR=scratch))


def c_coverage(gcov: Path, out: Path) -> float:
    """Every .gcda of the run through gcov (JSON); the readers' branches, merged."""
    taken: dict[tuple[str, int, int], bool] = {}
    for data in sorted(gcov.rglob("*.gcda")):
        done = subprocess.run(["gcov", "--json-format", "--stdout", "-b", "-o", str(data.parent), str(data)],
                              capture_output=True, cwd=data.parent)
        if done.returncode != 0:
            raise SystemExit(f"coverage: gcov failed on {data}: {done.stderr.decode()[-500:]}")
        text = done.stdout
        if text[:2] == b"\x1f\x8b":
            text = gzip.decompress(text)
        for line in text.decode().splitlines():
            if not line.strip():
                continue
            for entry in json.loads(line)["files"]:
                name = Path(entry["file"]).name
                if name not in READERS:
                    continue
                for row in entry["lines"]:
                    for k, branch in enumerate(row["branches"]):
                        key = (name, row["line_number"], k)
                        taken[key] = taken.get(key, False) or branch["count"] > 0
    if not taken:
        raise SystemExit("coverage: no branch of the readers was recorded (did gcc build them with --coverage?)")
    missed: dict[tuple[str, int], list[int]] = {}
    for (name, line, k), hit in sorted(taken.items()):
        if not hit:
            missed.setdefault((name, line), []).append(k)
    sources = {name: (RUNTIME_DIR / name).read_text().splitlines() for name in READERS}
    with (out / "c.txt").open("w") as report:
        for name in READERS:
            total = sum(1 for key in taken if key[0] == name)
            hits = sum(1 for key, hit in taken.items() if key[0] == name and hit)
            report.write(f"{name}: {hits}/{total} branches taken ({100.0 * hits / total:.1f} %)\n")
        report.write("\nbranches never taken (file:line, the branch numbers gcov gives, the line):\n")
        for (name, line), ks in missed.items():
            report.write(f"{name}:{line} [{', '.join(map(str, ks))}]  {sources[name][line - 1].strip()}\n")
    return 100.0 * sum(taken.values()) / len(taken)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="pytest workers")
    parser.add_argument("--tests", nargs="+", default=["tests"], help="what pytest runs (default: every test)")
    parser.add_argument("--out", type=Path, default=cache_dir() / "coverage", help="where the listings go")
    args = parser.parse_args(argv)
    if shutil.which("gcov") is None:
        print("coverage: gcov is not installed (it comes with gcc)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="exactc-coverage-") as tmp:
        work = Path(tmp)
        gcov = work / "gcov"
        gcov.mkdir()
        python = python_coverage(args.tests, args.jobs, args.out, gcov, work)
        replay_corpora(gcov)
        c = c_coverage(gcov, args.out)
    print(f"coverage: uncovered branches listed in {args.out / 'python.txt'} and {args.out / 'c.txt'}")
    print(f"coverage: python {python:.1f} % branches (exporter/), C runtime {c:.1f} % branches (readers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
