"""Candidate layouts of the quantized nests (qlinear_w, qlinear_i, quantize), side by side,
at a llama decode step's shapes (1 x 288 by 288 x 768, the head's 1 x 288 by 288 x 32000)
and a prompt's (64 x 288 by 288 x 768), q8 and q4, blocks of 32, one thread: the figures
the automatic plan's quantized tables (exporter/kernels/autoplan.py) were chosen by.
A candidate whose output differs from the reference is listed as WRONG BITS (a
compiler's mistake or exactc's: it is never timed, and must be looked into).

Each candidate runs with its first loop split in 8 even pieces (as the automatic plan
splits it), built with bench/quant_speed.py's kernels by gcc with an exported
Makefile's default flags (STRICT_FLAGS + -O2 -march=native, -mprefer-vector-width=512
where the CPU has AVX-512, -fopenmp), and its output is checked against the numpy
reference's bits before it is timed (best of 7 runs of 3, one process). A candidate the
nest's shapes make illegal is listed as such.

`--generate` instead times the whole decode program, before and after: a stories15M-
shaped llama (drawn weights) exported `--plan auto --weights q8|q4` with the quantized
tables and with them emptied (the plan before them), `model generate` of 200 greedy
tokens (bench/programs_speed.py's GenerateBench), 1 and 2 threads, the best of 3 rounds
taken in turn; tokens per second.

Usage: cd bench && ../.venv/bin/python quant_layouts.py [--threads N] [--generate]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import tempfile
from pathlib import Path

from exactc.exporter import quant, reference
from exactc.exporter.kernels import autoplan
from exactc.exporter.kernels.autoplan import even_split
from exactc.exporter.kernels.layouts import Layout, LayoutError
from exactc.exporter.kernels.plans import NestPlan, Plan
from exactc.verify.build import BuildOptions
from exactc.runtime.toolchain import wide_vectors
from exactc.verify.compare import assert_bits_equal
from linear_speed import best_seconds
from quant_speed import BLOCK, Kernel, operands


@dataclasses.dataclass(frozen=True)
class MakefileDefaults(BuildOptions):
    """gcc -O2 -march=native -fopenmp, and the exported Makefile's WIDE: 512-bit vectors
    preferred where -march=native has AVX-512 (exporter/export.py, MAKEFILE)."""

    def flags(self) -> list[str]:
        return super().flags() + wide_flags(self.cc)


@functools.cache
def wide_flags(cc: str) -> list[str]:
    return list(wide_vectors(cc))


OPTIONS = MakefileDefaults(cc="gcc", opt="-O2", march_native=True, openmp=True)

SHAPES = {"decode ffn": (1, 288, 768), "decode head": (1, 288, 32000), "prompt": (64, 288, 768)}  # (M, K, N)


def _lanes(m: int, n: int) -> tuple:
    return ((("m", m),) if m else ()) + ((("n", n),) if n else ())


def linear_candidates(primitive: str, fmt: str) -> dict[str, Layout]:
    """Lane shapes over outputs (n outermost) by which buffers are packed; for qlinear_i
    also its integer sums regrouped instead of lanes (layout.sums)."""
    out = {"plain, n outer": Layout(order=("n", "m"))}
    weights = ("wq", "wd")
    packs = [(), ("wq",), ("wd",), weights]
    if primitive == "qlinear_i":
        packs += [weights + ("xq", "xd")]
    for m, n in ((8, 16), (4, 16), (0, 16), (0, 8)):
        for pack in packs:
            name = f"lanes {'m:%d ' % m if m else ''}n:{n}" + (f", packs {' '.join(pack)}" if pack else "")
            out[name] = Layout(order=("n", "m"), lanes=_lanes(m, n), packs=pack)
    if primitive == "qlinear_i":  # rows in lanes of 4 over n in lanes of 8: the tile kernel (exactc_dot.h)
        out["lanes m:4 n:8"] = Layout(order=("n", "m"), lanes=(("m", 4), ("n", 8)))
        out["lanes m:4 n:8, m outer"] = Layout(order=("m", "n"), lanes=(("m", 4), ("n", 8)))
        loops = ("k",) if fmt == "q8" else ("k", "kh")
        for width in (8, 16, 32):
            out[f"sums {'+'.join(loops)}:{width}"] = Layout(order=("n", "m"), sums=tuple((a, width, 1) for a in loops))
    return out


def quantize_candidates() -> dict[str, Layout]:
    return {"plain": Layout(), "plain, b outer": Layout(order=("b", "m")),
            "lanes m:8": Layout(lanes=(("m", 8),)), "lanes m:16": Layout(lanes=(("m", 16),)),
            "lanes b:8": Layout(order=("b", "m"), lanes=(("b", 8),)),
            "lanes m:8 b:8": Layout(lanes=(("m", 8), ("b", 8)))}


def split_plan(kernel, layout: Layout) -> Plan:
    """`layout` for every nest of `kernel`, its first loop split in 8 even pieces."""
    nests = []
    for nest in kernel.nests:
        first = layout.loop_order(nest)[0]
        extent = next(a.extent for a in nest.axes if a.name == first)
        nests.append((nest.name, NestPlan(layout, even_split(extent))))
    return Plan(tuple(nests))


def timed(primitive: str, arrays: dict, attrs: dict, layout: Layout, want: dict, threads: int) -> float | str:
    """Seconds per call of the kernel under `layout` (its outputs checked first), or why
    it was not timed: the layout refused, or outputs that differ from the reference."""
    try:
        kernel = Kernel(primitive, arrays, attrs, lambda k: split_plan(k, layout), OPTIONS)
    except LayoutError as err:
        return f"refused ({err.rule})"
    kernel.threads(threads)
    kernel.run()
    for name, value in want.items():
        try:
            assert_bits_equal(value, kernel.buffers[name], f"{primitive} {layout.text()} {name}")
        except AssertionError as err:
            return f"WRONG BITS, not timed ({str(err).splitlines()[0]})"
    return best_seconds(kernel.run, 7)


def measure(threads: int) -> list[tuple[str, str, str, str, float | str]]:
    """(shape, format, primitive, layout, seconds or refusal) for every candidate."""
    rows = []
    for shape, (m, k, n) in SHAPES.items():
        x, w = operands(m, k, n)
        refq = reference.run("quantize", "f32", {"x": x}, {"block": BLOCK})
        if shape != "decode head":  # quantize sees the same x at both decode shapes
            for name, layout in quantize_candidates().items():
                rows.append((shape, "q8", "quantize", name,
                             timed("quantize", {"x": x}, {"block": BLOCK}, layout, refq, threads)))
        for fmt in ("q8", "q4"):
            qt = quant.quantize_tensor("w", w, fmt, BLOCK)
            attrs = {"fmt": fmt, "block": BLOCK, "has_b": False}
            inputs = {"qlinear_w": {"x": x, "wq": qt.values, "wd": qt.scales},
                      "qlinear_i": {"xq": refq["q"], "xd": refq["d"], "wq": qt.values, "wd": qt.scales}}
            for primitive, arrays in inputs.items():
                want = reference.run(primitive, "f32", arrays, attrs)
                for name, layout in linear_candidates(primitive, fmt).items():
                    rows.append((shape, fmt, primitive, name, timed(primitive, arrays, attrs, layout, want, threads)))
    return rows


def table(rows) -> list[str]:
    """One markdown table; "plain / row" is the time of the group's first plain row (n
    outermost for the linears) over the row's, per shape, format and nest."""
    lines = ["| shape | fmt | nest | layout | time (us) | plain / row |", "|---|---|---|---|---|---|"]
    first = {(s, f, p): sec for s, f, p, name, sec in reversed(rows) if name.startswith("plain")}
    for s, f, p, name, sec in rows:
        m, k, n = SHAPES[s]
        where = f"{m}x{k} by {k}x{n}" if p != "quantize" else f"{m}x{k}"
        if isinstance(sec, float):
            base = first[(s, f, p)]
            ratio = f"{base / sec:.2f}" if isinstance(base, float) else "-"
            lines.append(f"| {where} | {f} | {p} | {name} | {sec * 1e6:.1f} | {ratio} |")
        else:
            lines.append(f"| {where} | {f} | {p} | {name} | {sec} | |")
    return lines


def generate_rows(rounds: int = 3) -> list[str]:
    """Tokens per second of the stories15M-shaped decode program's `model generate`,
    q8 and q4, with the quantized tables and without, 1 and 2 threads."""
    import programs_speed

    tables = dict(autoplan._QUANTIZED_LAYOUTS)
    best: dict[tuple[str, str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = programs_speed.llama_model(programs_speed.STORIES["stories15M"])
        benches = {}
        try:
            for weights in ("q8", "q4"):
                for label, chosen in (("without the tables", {}), ("with the tables", tables)):
                    autoplan._QUANTIZED_LAYOUTS = chosen
                    work = Path(tmp) / f"{weights}-{len(chosen)}"
                    work.mkdir()
                    benches[weights, label] = programs_speed.GenerateBench("stories15M", weights, work, "gcc",
                                                                           model=model)
        finally:
            autoplan._QUANTIZED_LAYOUTS = tables
        for _ in range(rounds):
            for (weights, label), bench in benches.items():
                for threads in (1, 2):
                    seconds = programs_speed.generate_seconds(bench.program, bench.inputs, bench.out, threads,
                                                              programs_speed.GENERATED)
                    key = (weights, label, threads)
                    best[key] = max(best.get(key, 0.0), programs_speed.GENERATED / seconds)
    lines = ["| weights | plan | threads | tokens/s |", "|---|---|---|---|"]
    lines += [f"| {w} | {label} | {t} | {tps:.1f} |" for (w, label, t), tps in best.items()]
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--generate", action="store_true", help="time the whole decode program instead")
    args = parser.parse_args()
    print("\n".join(generate_rows() if args.generate else table(measure(args.threads))))
