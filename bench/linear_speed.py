"""The f32 linear of the benchmark (x (256, 384), w (1536, 384)): its kernels under the
plain nest and under layouts the strategies can express, built for speed, and a timer.

Used by bench/test_bench_linear.py (pytest-benchmark, `make bench`). Flags:
-std=c11 -ffp-contract=off -fno-fast-math -O2 -march=native -fopenmp (STRICT_FLAGS plus
the tunable ones; no FMA contraction, so peak is the separate mul+add peak of docs/design.md).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from exactc.exporter.kernels import lower
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.plans import NestPlan, Plan, validate_plan
from exactc.exporter.kernels.splits import Split, split_pieces
from exactc.exporter.primitives import CONTRACT_OFF
from exactc.exporter.printer.kernels import print_kernel
from exactc.verify.build import BuildOptions, load_library, runtime_source
from exactc.verify.kernels import CDEF_PRELUDE

M, K, N = 256, 384, 1536
FLOPS = 2 * M * N * K  # one multiply and one add per (m, n, k)
PEAK_GFLOPS = 115.0  # docs/design.md: one core, f32, no FMA, -O2 -march=native

SHAPES = {"x": (M, K), "w": (N, K)}


def kernel(contract: str = CONTRACT_OFF):
    """The linear in the products' realization `contract` (docs/semantics.md section 18)."""
    return lower("linear", "f32", SHAPES, {"has_b": False}, contract=contract)


def lanes_layout(lane_m: int, lane_n: int = 16) -> Layout:
    """n-chunks of lane_n outputs, each over lane_m rows at a time, w's rows for the
    chunk packed k-major (lane index innermost)."""
    lanes = ((("m", lane_m),) if lane_m > 1 else ()) + (("n", lane_n),)
    return Layout(order=("n", "m"), lanes=lanes, packs=("w",))


def plan_of(layout: Layout | None, pieces: int, narrow: Layout | None = None,
            contract: str = CONTRACT_OFF) -> Plan | None:
    """`layout` with a split of its first loop (depth 0) into `pieces` even pieces (and
    its narrow layout, printed under EXACTC_NARROW_LANES, or EXACTC_NARROW_FMA_LANES for
    the fused linear, if given)."""
    if layout is None:
        return None
    extent = {"m": M, "n": N}[layout.loop_order(kernel(contract).nests[0])[0]]
    cuts = [extent * i // pieces for i in range(1, pieces)]
    plan = Plan((("linear", NestPlan(layout, Split(0, split_pieces(extent, cuts)), narrow)),))
    validate_plan(kernel(contract), plan)
    return plan


class Built:
    """A compiled kernel and its operands; `run()` computes y once."""

    def __init__(self, layout: Layout | None, cc: str = "gcc", pieces: int = 2, narrow: Layout | None = None,
                 contract: str = CONTRACT_OFF):
        k = kernel(contract)
        self.plan = plan_of(layout, pieces, narrow, contract)
        printed = print_kernel(k, "bench", self.plan) if self.plan else print_kernel(k, "bench")
        self.options = BuildOptions(cc=cc, opt="-O2", march_native=True, openmp=True)
        cdef = CDEF_PRELUDE + printed.cdef + "void omp_set_num_threads(int);\n"
        sources = {"kernels.c": printed.source, "exactc_libm.c": runtime_source("exactc_libm.c")}
        self.library = load_library(sources, cdef, self.options)
        rng = np.random.default_rng(7)
        self.x = rng.standard_normal((M, K)).astype(np.float32)
        self.w = rng.standard_normal((N, K)).astype(np.float32)
        self.y = np.full((M, N), np.nan, dtype=np.float32)
        ffi = self.library.ffi
        self.args = [ffi.cast("void *", a.ctypes.data) for a in (self.x, self.w, self.y)]
        self.driver = printed.drivers[0] if printed.drivers else None
        self.function = printed.functions[0]

    def threads(self, count: int) -> None:
        """Cap the OpenMP team, as OMP_NUM_THREADS=count would."""
        try:
            self.library.lib.omp_set_num_threads(count)
        except AttributeError:  # no split: OpenMP not linked, one thread anyway
            pass

    def run(self) -> None:
        if self.driver:
            getattr(self.library.lib, self.driver)(*self.args)
        else:
            getattr(self.library.lib, self.function)(*self.args, 0, M)

    def seconds(self, repeats: int = 5, inner: int = 3) -> float:
        return best_seconds(self.run, repeats, inner)


def best_seconds(run, repeats: int = 5, inner: int = 3) -> float:
    """The best of `repeats` timings of `inner` calls of `run`, per call (one call first,
    untimed)."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            run()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def gflops(seconds: float) -> float:
    return FLOPS / seconds / 1e9


def compare_shapes(shapes: list[tuple[int, int]], cc: str, rounds: int = 6) -> dict[tuple[int, int], float]:
    """GFLOP/s of `lanes_layout(m, n)` for each (m, n) of `shapes`, one thread, timed in
    alternation for `rounds` rounds (the best of each), so that all see the same load."""
    built = {shape: Built(lanes_layout(*shape), cc) for shape in shapes}
    best = dict.fromkeys(shapes, 0.0)
    for b in built.values():
        b.threads(1)
    for _ in range(rounds):
        for shape, b in built.items():
            best[shape] = max(best[shape], gflops(b.seconds(3, 1)))
    return best


if __name__ == "__main__" and sys.argv[1:2] == ["--shapes"]:
    # e.g. --shapes 8x16,4x16,8x8: lane shapes m x n side by side, per compiler
    import os

    wanted = [tuple(int(v) for v in item.split("x")) for item in sys.argv[2].split(",")]
    for cc in ("gcc", "clang"):
        figures = compare_shapes(wanted, cc)
        print(f"{cc}: " + "  ".join(f"m:{m} n:{n} {g:.1f}" for (m, n), g in figures.items())
              + f"  GFLOP/s (1 thread; load average {os.getloadavg()[0]:.2f})", flush=True)
elif __name__ == "__main__":
    for cc in ("gcc", "clang"):
        for lane_m in (1, 2, 3, 4, 8, 16):
            built = Built(lanes_layout(lane_m), cc)
            built.threads(1)
            one = built.seconds(20, 1)
            built.threads(2)
            two = built.seconds(20, 1)
            print(f"{cc} lanes m:{lane_m} n:16  1 thread {gflops(one):6.1f} GFLOP/s ({gflops(one)/PEAK_GFLOPS:.0%})"
                  f"  2 threads {gflops(two):6.1f}  x{one/two:.2f}", flush=True)
        plain = Built(None, cc)
        print(f"{cc} plain {gflops(plain.seconds(2, 1)):.2f} GFLOP/s", flush=True)
