"""`make bench`: the f32 linear 256x384 by 384x1536, the plain nest against the best
layouts the strategies express, one and two threads; GFLOP/s and the share of this
machine's f32 peak without FMA (docs/design.md: about 115 GFLOP/s on one core at
-O2 -march=native). A benchmark, not a test of speed: it asserts bits, never times.

Build: STRICT_FLAGS (-std=c11 -ffp-contract=off -fno-fast-math) + -O2 -march=native
-fopenmp, gcc or clang. Threads: omp_set_num_threads, which is what OMP_NUM_THREADS sets.
"""

from __future__ import annotations

import os

import pytest

from exactc.runtime.toolchain import have_compiler
from exactc.verify.compare import assert_bits_equal

from exactc.exporter.kernels.layouts import Layout
from linear_speed import FLOPS, PEAK_GFLOPS, Built, gflops, lanes_layout

# The best layout found for both compilers (bench/linear_speed.py tries the others):
# n in chunks of 16 lanes over 8 rows of m, w packed; the split gives each thread half of n.
BEST = {"gcc": lanes_layout(8), "clang": lanes_layout(8)}
COMPILERS = [cc for cc in ("gcc", "clang") if have_compiler(cc)]


@pytest.fixture(scope="module")
def plain_bits():
    plain = Built(None, "gcc")
    plain.run()
    return plain.y.copy()


def _line(name: str, seconds: float) -> str:
    rate = gflops(seconds)
    return f"{name:<34} {seconds * 1e3:8.2f} ms {rate:7.1f} GFLOP/s {rate / PEAK_GFLOPS:6.1%} of peak"


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("variant", ["plain", "best"])
def test_linear(benchmark, capsys, plain_bits, variant, cc, threads):
    # The plain nest, split in two pieces of m like the best layout's split of n.
    built = Built(BEST[cc] if variant == "best" else Layout(), cc)
    built.threads(threads)
    built.run()
    assert_bits_equal(plain_bits, built.y, "y (a layout or split changed the bits)", labels=("plain", "laid out"))
    rounds = 3 if variant == "plain" else 20
    benchmark.extra_info["gflops"] = None
    benchmark.pedantic(built.run, rounds=rounds, iterations=1, warmup_rounds=1)
    seconds = benchmark.stats.stats.min
    benchmark.extra_info["gflops"] = gflops(seconds)
    benchmark.extra_info["share_of_peak"] = gflops(seconds) / PEAK_GFLOPS
    with capsys.disabled():
        print("\n" + _line(f"{variant} {cc} {threads} thread(s)", seconds))
    assert_bits_equal(plain_bits, built.y, "y", labels=("plain", "laid out"))


@pytest.mark.parametrize("cc", COMPILERS)
def test_two_threads_against_one(benchmark, capsys, plain_bits, cc):
    """The ratio, measured side by side: one thread, two threads, alternately."""
    built = Built(BEST[cc], cc)
    one, two = [], []
    for _ in range(20):  # best of many short runs: the machine is shared, the other core often busy
        built.threads(1)
        one.append(built.seconds(repeats=10, inner=1))
        built.threads(2)
        two.append(built.seconds(repeats=10, inner=1))
    assert_bits_equal(plain_bits, built.y, "y", labels=("plain", "laid out"))
    benchmark.pedantic(built.run, rounds=5, iterations=1)
    ratio = min(one) / min(two)
    benchmark.extra_info["speedup_2_threads"] = ratio
    with capsys.disabled():
        print(f"\nload average {os.getloadavg()[0]:.2f}; {cc} best layout: 1 thread {gflops(min(one)):.1f} GFLOP/s, 2 threads "
              f"{gflops(min(two)):.1f} GFLOP/s: x{ratio:.2f}  ({FLOPS / 1e9:.3f} GFLOP per run)")
