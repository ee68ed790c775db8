"""`make bench`: q8 and q4 linears (the weight-only and the integer form) against exactc's
f32 linear and PyTorch's f32 and dynamic int8 linears, and (where K is whole super-blocks)
Q4_K, Q5_K and Q6_K, at the benchmark's shapes and decode-shaped matrix-vector products,
on 1 and 2 threads (bench/quant_speed.py). A
benchmark, not a test of speed: every exactc row's output is checked against the numpy
reference's bits before it is timed; the table is printed, nothing asserts a time.
"""

from __future__ import annotations

import pytest

from exactc.runtime.toolchain import have_compiler
from quant_speed import machine, measure, table


@pytest.mark.skipif(not have_compiler("gcc"), reason="gcc builds the kernels")
def test_quantized_linears(capsys):
    pytest.importorskip("torch")
    rows = [(threads, shape, name, seconds) for threads in (1, 2) for shape, name, seconds in measure(threads)]
    with capsys.disabled():
        print("\n" + machine() + "\n" + "\n".join(table(rows)))
    assert len(rows) == 2 * (2 * 13 + 2 * (13 + 12))  # the k-quants' 12 rows where K is whole super-blocks


@pytest.mark.skipif(not have_compiler("gcc"), reason="gcc builds the program")
def test_rows_repacked_at_load(capsys):
    """bench/quant_rows.py: qlinear_i's q8 decode product row by row against 8 rows at
    once, in place and interleaved at load; the three give the same bits."""
    from pathlib import Path

    if "avx2" not in Path("/proc/cpuinfo").read_text().split():
        pytest.skip("the program's intrinsics need AVX2")
    from quant_rows import measure

    times = measure()
    with capsys.disabled():
        print("\n" + ", ".join(f"{way}: {us:.1f} us" for way, us in times.items()))
