"""`make fuzz`: build each harness of fuzz/ with libFuzzer, AddressSanitizer and UBSan
(clang), run each for a set time from the seed corpus and its dictionary, and end with

    fuzz: <executions> executions, <crashes> crashes

    python fuzz/run.py [--seconds 90] [--jobs 2] [--only npy]

The harnesses run side by side, `--jobs` at a time, each for `--seconds` (make's
FUZZ_SECONDS). New inputs that reach new code go to a working corpus in the cache folder
($EXACTC_CACHE/fuzz/corpus/<harness>, else the user's cache folder), kept from run to
run; the seed corpus in the tree is only read. A crash leaves its input in
$EXACTC_CACHE/fuzz/artifacts/<harness>/, printed with the command that replays it; the
exit status is 1 if any harness crashed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESSES = ("npy", "safetensors")
# The flags of every harness build besides STRICT (the runtime as the programs compile it):
# the sanitizers; a broken promise is a crash, never a report to skip.
FLAGS = ["-g", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
INSTALL_HINT = "clang's libFuzzer runtime is missing: `make install` installs it (Debian: libclang-rt-14-dev)"


def runtime_dir() -> Path:
    sys.path.insert(0, str(HERE.parent))
    from exactc.runtime import RUNTIME_DIR

    return Path(RUNTIME_DIR)


def strict_flags() -> list[str]:
    """The flags bit identity rests on (exactc/runtime), first on every harness build."""
    runtime_dir()
    from exactc.runtime import STRICT_FLAGS

    return list(STRICT_FLAGS)


def sources(harness: str, main: str | None = None) -> list[str]:
    """The C files of `harness`: its LLVMFuzzerTestOneInput, the runtime's readers, and
    `main` (replay.c) when it is built without libFuzzer."""
    runtime = runtime_dir()
    files = [HERE / f"{harness}_fuzz.c", runtime / "exactc_npy.c", runtime / "exactc_safetensors.c"]
    if main is not None:
        files.append(HERE / main)
    return [str(f) for f in files]


def build(harness: str, out: Path, cc: str = "clang", libfuzzer: bool = True) -> Path:
    """The harness's executable at `out`: with libFuzzer's main (clang only), or with
    replay.c's main (gcc or clang). Raises RuntimeError with the compiler's words."""
    sanitize = ["-fsanitize=fuzzer"] if libfuzzer else []
    cmd = [cc, *strict_flags(), *FLAGS, *sanitize, f"-I{runtime_dir()}", f"-I{HERE}", "-o", str(out),
           *sources(harness, None if libfuzzer else "replay.c")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or done.stderr.strip():
        hint = INSTALL_HINT if libfuzzer and "libclang_rt.fuzzer" in done.stderr else ""
        raise RuntimeError(f"{' '.join(cmd)}\n{done.stderr[-3000:]}\n{hint}".rstrip())
    return out


def corpus_files(harness: str) -> list[Path]:
    return sorted((HERE / "corpus" / harness).iterdir())


@dataclasses.dataclass
class Outcome:
    harness: str
    executions: int
    crashes: int
    seconds: float
    corpus: int  # files in the working corpus after the run
    artifacts: list[Path]
    log: str

    def line(self) -> str:
        return (f"{self.harness}: {self.executions:,} executions in {self.seconds:.0f} s, working corpus "
                f"{self.corpus} files, {self.crashes} crashes")


def cache_root() -> Path:
    sys.path.insert(0, str(HERE.parent))
    from exactc.runtime.toolchain import cache_dir

    return cache_dir() / "fuzz"


EXECUTED = re.compile(r"stat::number_of_executed_units:\s*(\d+)")
STATUS = re.compile(r"^#(\d+)\s", re.M)


def fuzz(harness: str, seconds: int, root: Path) -> Outcome:
    """Build and run one harness for `seconds`; count its executions and crashes."""
    exe = build(harness, root / "build" / f"{harness}_fuzz")
    work = root / "corpus" / harness
    artifacts = root / "artifacts" / harness
    for folder in (work, artifacts):
        folder.mkdir(parents=True, exist_ok=True)
    before = set(artifacts.iterdir())
    start = time.monotonic()
    memory = "/dev/shm" if os.path.isdir("/dev/shm") else None  # the round trip's file: no disk
    with tempfile.TemporaryDirectory(prefix=f"exactc-fuzz-{harness}-", dir=memory) as scratch:
        cmd = [str(exe), f"-max_total_time={seconds}", "-print_final_stats=1", f"-dict={HERE / (harness + '.dict')}",
               f"-artifact_prefix={artifacts}/", "-timeout=10", "-rss_limit_mb=2048", "-max_len=8192",
               str(work), str(HERE / "corpus" / harness)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, EXACTC_FUZZ_DIR=scratch),
                              timeout=seconds + 600)
    log = done.stdout + done.stderr
    stats = EXECUTED.findall(log)
    executions = int(stats[-1]) if stats else max((int(n) for n in STATUS.findall(log)), default=0)
    found = sorted(set(artifacts.iterdir()) - before)
    crashes = len(found) if found else int(done.returncode != 0)
    return Outcome(harness, executions, crashes, time.monotonic() - start, len(list(work.iterdir())), found, log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=90, help="per harness (make's FUZZ_SECONDS)")
    parser.add_argument("--jobs", type=int, default=2, help="harnesses run at once")
    parser.add_argument("--only", choices=HARNESSES, action="append", help="run only this harness (repeatable)")
    args = parser.parse_args(argv)
    if shutil.which("clang") is None:
        print("fuzz: clang is not installed; `make install` installs it", file=sys.stderr)
        return 2
    root = cache_root()
    (root / "build").mkdir(parents=True, exist_ok=True)
    harnesses = args.only or list(HARNESSES)
    print(f"fuzz: {', '.join(harnesses)}, {args.seconds} s each, {args.jobs} at a time; working corpus and crash "
          f"inputs under {root}", flush=True)
    try:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            outcomes = list(pool.map(lambda h: fuzz(h, args.seconds, root), harnesses))
    except RuntimeError as exc:
        print(f"fuzz: a harness does not build:\n{exc}", file=sys.stderr)
        return 2
    for outcome in outcomes:
        print(outcome.line())
        for artifact in outcome.artifacts:
            print(f"  crash input {artifact}; replay: {root / 'build' / (outcome.harness + '_fuzz')} {artifact}")
        if outcome.crashes:
            print("\n".join(outcome.log.splitlines()[-40:]))
    executions = sum(o.executions for o in outcomes)
    crashes = sum(o.crashes for o in outcomes)
    print(f"fuzz: {executions} executions, {crashes} crashes")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
