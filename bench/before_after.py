"""Before and after, side by side in one run: the decoders' forwards exported by another
checkout of exactc (BEFORE: a folder holding its `exactc/` package, e.g. made by
`git archive main exactc | tar -x -C BEFORE`) and by this tree, from the same
checkpoint, each built with the Makefile's defaults by gcc and clang and checked by its
conformance check; then ROUNDS rounds, each timing before, after and PyTorch eager at 1
and at 2 threads (3 runs each), the best of each kept.

    .venv/bin/python bench/before_after.py BEFORE [gpt,llama] [ROUNDS]

Run it from the repository root (bench/ and this tree's exactc on the path; the export
of BEFORE runs in /tmp, so that the current folder's exactc does not shadow it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from programs_speed import (  # noqa: E402
    DecoderBench,
    best_of,
    build_exported,
    load_average,
    machine_lines,
    program_seconds,
    torch_threads,
)

COMPILERS = ("gcc", "clang")


def export_before(before: Path, kind: str, checkpoint: Path, out: Path) -> None:
    command = ["export", kind, "--entry", "forward", "--dtype", "f32", "--checkpoint", str(checkpoint),
               "--set", "tokens=256", "--plan", "auto", "-o", str(out)]
    subprocess.run([sys.executable, "-c", "import sys; from exactc.cli import main; sys.exit(main())", *command],
                   env=dict(os.environ, PYTHONPATH=str(before)), check=True, cwd="/tmp")


def main(before: Path, kinds: list[str], rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="exactc-before-after-"))
    print("\n".join(machine_lines()), flush=True)
    rows: dict[tuple[str, str, int], tuple[float, float, float]] = {}
    for kind in kinds:
        bench = DecoderBench(kind, work / kind, list(COMPILERS))
        old = work / kind / "before-export"
        export_before(before, kind, work / kind / f"{kind}-checkpoint", old)
        programs = {}
        for cc in COMPILERS:
            shutil.copytree(old, work / kind / f"before-{cc}")
            programs[cc] = build_exported(work / kind / f"before-{cc}", cc)
        for r in range(rounds):
            for threads in (1, 2):
                torch_threads(threads)
                for cc in COMPILERS:
                    inputs = bench.programs[cc].parent / "conformance" / "inputs"
                    times = (program_seconds(programs[cc], inputs, bench.out, threads, 3),
                             program_seconds(bench.programs[cc], inputs, bench.out, threads, 3),
                             best_of(bench.torch_logits, 3))
                    best = rows.get((kind, cc, threads), (float("inf"),) * 3)
                    rows[(kind, cc, threads)] = tuple(min(a, b) for a, b in zip(best, times))
            print(f"{kind}: round {r + 1} done, load average {load_average()}", flush=True)
    print(f"load average at end: {load_average()}")
    print("| row | before | after | PyTorch | before / PyTorch | after / PyTorch |")
    print("|---|---|---|---|---|---|")
    for (kind, cc, threads), (b, a, t) in rows.items():
        print(f"| {kind} forward {cc} {threads}t | {b * 1e3:.1f} ms | {a * 1e3:.1f} ms | {t * 1e3:.1f} ms "
              f"| x{b / t:.2f} | x{a / t:.2f} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), (sys.argv[2] if len(sys.argv) > 2 else "gpt,llama").split(","),
         int(sys.argv[3]) if len(sys.argv) > 3 else 4)
