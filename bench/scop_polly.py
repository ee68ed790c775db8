"""Polly's optimizer beside exactc's plans (docs/scop.md, "Polly's optimizer"):

1. the bits: every forward at f64, f32 and bf16 and gpt's and llama's loss_grad at f64
   and f32 (small, as `make scop` exports them) built with clang-19 and Polly's optimizer on (its tiling and its vectorizer's
   strip-mining, -ffp-contract=off kept by STRICT), each driver comparing every nest's
   outputs with the reference's;
2. the time of every static-control nest that has plans to choose from (the linears, the
   attention matmuls, the laned transcendentals and softmax) at point zero, under Polly,
   and under exactc's automatic plan and its tuned one (the fastest of `exactc plan
   --tune`'s candidates), all built by clang-19 -O2 -march=native on one thread and timed
   in alternation, round after round, so that each column sees the same machine load.

    python bench/scop_polly.py                      # the benchmark's GPT-2-like shapes, one layer
    python bench/scop_polly.py --set tokens=64 --rounds 3
    python bench/scop_polly.py --schedules          # Polly's schedule of each timed nest (JSCoP)

prints a markdown table (seconds per call, the best of the rounds, and each column's
ratio to point zero) and the machine it ran on.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from exactc.exporter import export, models
from exactc.runtime import STRICT_FLAGS
from exactc.runtime.toolchain import compiler_version
from exactc.verify import scop, tune
from exactc.verify.build import BuildOptions

CC = "clang-19"
BUILD = ("-O2", "-march=native")
# The scoreboard's GPT-2-like forward (docs/design.md, "The benchmark's models"), one layer.
BENCH_GPT = {"vocab": "4096", "positions": "256", "dim": "384", "heads": "6", "mlp": "1536", "tokens": "256",
             "layers": "1"}


def bits_under_polly(work: Path, entries: tuple[str, ...] = ("forward", models.LOSS_GRAD)) -> list[str]:
    """Each forward directory, and each causal LM's loss_grad, built with Polly's
    optimizer: one line per directory."""
    lines = []
    make_args = (f"CC={CC}", "CFLAGS=" + " ".join([*BUILD, *scop.POLLY_OPTIMIZE]))
    chosen = [(m, "forward", site) for m in scop.MODELS for site in scop.SITES if "forward" in entries]
    chosen += [(m, models.LOSS_GRAD, site) for m in models.CAUSAL_LMS for site in scop.GRAD_SITES
               if models.LOSS_GRAD in entries]
    for model, entry, site in chosen:
        target = work / f"{model}-{entry}-{site}"
        made = export.prepare_scop(model, entry, site, overrides=dict(item.split("=") for item in scop.SMALL))
        export.write(made, target)
        problem = scop.run_driver(target, make_args)
        lines.append(f"{model}.{entry} {site}: {len(made.nests)} nests, "
                     + ("every output equal" if problem is None else problem.strip()))
    return lines


class ScopNestCall:
    """One SCoP nest file compiled into a shared library, called on drawn operands."""

    def __init__(self, directory: Path, nest, kernel, extra: tuple[str, ...], arrays: dict):
        library = directory / f"{nest.function}{'_polly' if extra else ''}.so"
        sources = [directory / nest.path, directory / "scop_rt.c", directory / "exactc_libm.c"]
        subprocess.run([CC, *STRICT_FLAGS, *BUILD, *extra, "-fPIC", "-shared", f"-I{directory}", "-o", str(library),
                        *map(str, sources), "-lm"], check=True, capture_output=True, text=True)
        self.function = getattr(ctypes.CDLL(str(library)), nest.function)
        self.arrays = arrays  # kept alive while the pointers below are used
        args = next(item.args for item in kernel.launches)
        self.args = [ctypes.c_void_p(arrays[name].ctypes.data) for name in args]

    def best(self, inner: int = 3) -> float:
        best = float("inf")
        for _ in range(inner):
            start = time.perf_counter()
            self.function(*self.args)
            best = min(best, time.perf_counter() - start)
        return best


def timed_nests(made: export.ScopExport):
    """The kernels timed: one static-control nest with plans to choose from; (name,
    kernel, the SCoP nest, the IR nest, its candidate layouts) each."""
    for name, kernel, _ in made.kernels:
        nests = [n for n in made.nests if n.kernel == name]
        if len(nests) != 1 or not nests[0].verdict.static:
            continue
        (ir_nest,) = kernel.nests
        layouts = tune.candidates(kernel, ir_nest)
        if len(layouts) >= 2:
            yield name, kernel, nests[0], ir_nest, layouts


def timed_directory(overrides: dict, work: Path) -> tuple[export.ScopExport, Path]:
    made = export.prepare_scop("gpt", "forward", "f32", overrides=overrides)
    directory = work / "timed"
    export.write(made, directory)
    return made, directory


def schedules(overrides: dict, work: Path) -> list[str]:
    """Polly's schedule of every statement of each timed nest, as its optimizer leaves it:
    each nest compiled as the timing builds it, with `-polly-export` writing the SCoP's
    JSCoP (domain, accesses and the optimized schedule of every statement)."""
    made, directory = timed_directory(overrides, work)
    lines = []
    for name, _, nest, _, _ in timed_nests(made):
        out = work / "jscop" / name
        out.mkdir(parents=True)
        subprocess.run([CC, *STRICT_FLAGS, *BUILD, *scop.POLLY_OPTIMIZE, *("-mllvm", "-polly-export"),
                        f"-I{directory}", "-c", "-o", os.devnull, str(directory / nest.path)],
                       check=True, capture_output=True, text=True, cwd=out)
        for path in sorted(out.glob("*.jscop")):
            for stmt in json.loads(path.read_text())["statements"]:
                lines.append(f"{name} {stmt['name']}: {stmt['domain']}")
                lines.append(f"    schedule {stmt['schedule']}")
                lines += [f"    {a['kind']} {a['relation']}" for a in stmt["accesses"]]
    return lines


def timings(overrides: dict, rounds: int, work: Path) -> list[tuple[str, dict[str, float]]]:
    """Per nest with a choice of plans: the best seconds of each column."""
    made, directory = timed_directory(overrides, work)
    options = BuildOptions(cc=CC, opt="-O2", march_native=True, warnings=False)
    variant = tune.compiled_variant(CC)
    columns: list[tuple[str, dict]] = []
    for name, kernel, nest, ir_nest, layouts in timed_nests(made):
        rng = np.random.default_rng(5)
        arrays = {b.name: tune._operand(b, made.length or 1, rng) for b in kernel.buffers}
        measured = tune.Measured(name, kernel, ir_nest.name, layouts, variant=variant)
        calls = {"point zero": ScopNestCall(directory, nest, kernel, (), arrays),
                 "Polly": ScopNestCall(directory, nest, kernel, scop.POLLY_OPTIMIZE, arrays)}
        plans = {tune.label(layout): tune.Timed(kernel, ir_nest.name, layout, options, made.length or 1)
                 for layout in layouts}
        auto = measured.default
        if tune.label(auto) not in plans:
            plans[tune.label(auto)] = tune.Timed(kernel, ir_nest.name, auto, options, made.length or 1)
        columns.append((name, {"calls": calls, "plans": plans, "auto": tune.label(auto)}))
    best: dict[tuple[str, str], float] = {}
    for _ in range(rounds):
        for name, c in columns:
            for label, timed in [*c["calls"].items(), *c["plans"].items()]:
                best[(name, label)] = min(best.get((name, label), float("inf")), timed.best())
    rows = []
    for name, c in columns:
        plans = {label: best[(name, label)] for label in c["plans"]}
        rows.append((name, {"point zero": best[(name, "point zero")], "Polly": best[(name, "Polly")],
                            "exactc auto": plans[c["auto"]], "exactc tuned": min(plans.values()),
                            "tuned layout": min(plans, key=plans.__getitem__)}))
    return rows


def table(rows: list[tuple[str, dict]]) -> str:
    head = "| nest | point zero | Polly | exactc auto | exactc tuned | tuned layout |\n|---|---|---|---|---|---|\n"
    lines = []
    for name, r in rows:
        zero = r["point zero"]
        cells = [f"{zero * 1e3:.3f} ms"] + [f"{r[k] * 1e3:.3f} ms ({zero / r[k]:.1f}x)"
                                             for k in ("Polly", "exactc auto", "exactc tuned")]
        lines.append(f"| {name} | {' | '.join(cells)} | `{r['tuned layout']}` |")
    return head + "\n".join(lines)


def machine() -> str:
    fields = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return (f"{fields.get('model name', platform.processor())} (cpu family {fields.get('cpu family')}, model "
            f"{fields.get('model')}), {compiler_version(CC)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a config field")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-bits", action="store_true", help="time only, without the bits under Polly")
    parser.add_argument("--schedules", action="store_true",
                        help="print Polly's optimized schedule of each timed nest's statements, nothing else")
    args = parser.parse_args(argv)
    missing = scop.polly_missing(CC)
    if missing:
        print(f"scop_polly: {missing}", file=sys.stderr)
        return 2
    overrides = {**BENCH_GPT, **dict(item.split("=", 1) for item in args.set)}
    if args.schedules:
        with tempfile.TemporaryDirectory(prefix="exactc-polly-") as work:
            print("\n".join(schedules(overrides, Path(work))))
        return 0
    with tempfile.TemporaryDirectory(prefix="exactc-polly-") as work:
        for line in [] if args.no_bits else bits_under_polly(Path(work)):
            print(line)
        rows = timings(overrides, args.rounds, Path(work))
    print()
    print(f"gpt.forward at f32, {', '.join(f'{k}={v}' for k, v in overrides.items())}; one thread; "
          f"best of {args.rounds} rounds; {machine()}")
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
