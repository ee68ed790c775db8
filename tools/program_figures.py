"""Figures of docs/programs.md: export time, C source size, arena peaks per type, and the C
program's forward time against the numpy reference's on the same input (one run, side
by side). Usage, from the repository root: .venv/bin/python tools/program_figures.py
[--repeat N] (tools/ is not part of the installed package).
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

from exactc.exporter import export

from exactc.exporter.reference import walk
from exactc import programs
from exactc.runtime.toolchain import compiler_version

MODELS = (("gpt", "forward"), ("bert", "forward"), ("llama", "forward"))
SITES = ("f64", "f32", "bf16")


def source_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.suffix in (".c", ".h"))


def generated_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in [root / "model.c", root / "kernels.h", *(root / "kernels").glob("*.c")])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20, help="runs of the C network timed")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, entry in MODELS:
            for site in SITES:
                start = time.perf_counter()
                prepared = export.prepare(model, entry, site, seed=0)
                root = export.write(prepared, Path(tmp) / f"{model}-{site}")
                export_s = time.perf_counter() - start
                program = programs.make(root, programs.Build(cc="gcc"), cached=False)
                done = program.run_or_fail([(root / "conformance" / "inputs", Path(tmp) / f"out-{model}-{site}")],
                                           threads=1, env={"EXACTC_REPEAT": str(args.repeat)})
                c_s = float(done.stderr.split(": ")[-1].split(" s per run")[0])
                start = time.perf_counter()
                walk.evaluate(prepared.program, site, prepared.params, prepared.inputs)
                ref_s = time.perf_counter() - start
                m = prepared.manifest()
                rows.append((model, entry, site, export_s, generated_bytes(root), source_bytes(root),
                             m["arena_peak"], m["straight_line_arena_peak"], m["parameters"], c_s, ref_s))
    print(f"toolchain: {compiler_version('gcc')}, -O2 (the Makefile's default CFLAGS), 1 thread; "
          f"{platform.processor() or platform.machine()}")
    print()
    print("| model | type | export (s) | generated C (bytes) | with runtime (bytes) | arena peak (bytes) | "
          "straight-line arena (bytes) | parameters | C forward (ms) | numpy reference (ms) | reference / C |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model, entry, site, export_s, gen, src, peak, straight, params, c_s, ref_s in rows:
        print(f"| {model}.{entry} | {site} | {export_s:.2f} | {gen} | {src} | {peak} | {straight} | {params} | "
              f"{c_s * 1e3:.3f} | {ref_s * 1e3:.1f} | {ref_s / c_s:.0f} |")


if __name__ == "__main__":
    main()
