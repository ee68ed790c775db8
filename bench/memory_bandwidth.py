"""The machine's memory bandwidth, and the decode rate it allows at the stories shapes.

A STREAM-like C program (compiled by gcc with STRICT_FLAGS, -O3 -march=native -fopenmp: at -O2 gcc 12
leaves the read loop's sum unvectorized, and it measures the adds, 8.6 GB/s against 11.4)
times two loops over arrays of 256 MiB, far past any cache: `read` sums an array's
64-bit words in 8 streams at once, as a linear reads its weight rows (integer adds, which
the compiler may vectorize: the loop is bound by the loads; one stream at a time
measures the prefetcher instead, 11.2 GB/s against 21.5 on one Zen 2 core), `copy` copies one array to another (STREAM's count: the bytes read plus the bytes
written). Best of 10 passes, OMP_NUM_THREADS threads (1 and 2 here).

A decode step reads every linear weight once (the embedding table is one row per token):
WEIGHT_BYTES gives the bytes per weight of each format (q8: 32 int8 and an f16 scale per
block of 32, 34 / 32; q4: 18 / 32; Q4_K: 144 bytes per super-block of 256; f32: 4), so the
read bandwidth over the bytes per token is the rate no program reading its weights from
memory can pass.

Usage: cd bench && ../.venv/bin/python memory_bandwidth.py
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from exactc.runtime import STRICT_FLAGS
from programs_speed import STORIES, cpu_field, load_average

SOURCE = r"""
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORDS ((size_t)32 << 20) /* 256 MiB of 64-bit words */
#define STREAMS 8 /* read at once, as a linear reads its rows */

static double best_of(int passes, int copy, uint64_t *a, const uint64_t *b, uint64_t *sink) {
    double best = 1e30;
    for (int pass = 0; pass < passes; pass++) {
        double start = omp_get_wtime();
        uint64_t sum = 0;
        if (copy) {
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < WORDS; i++) a[i] = b[i];
        } else {
            const size_t part = WORDS / STREAMS;
#pragma omp parallel for schedule(static) reduction(+ : sum)
            for (size_t i = 0; i < part; i++)
                for (size_t s = 0; s < STREAMS; s++) sum += b[s * part + i];
        }
        double seconds = omp_get_wtime() - start;
        *sink += sum + a[pass];
        if (seconds < best) best = seconds;
    }
    return best;
}

int main(void) {
    uint64_t *a = malloc(WORDS * sizeof *a), *b = malloc(WORDS * sizeof *b), sink = 0;
    if (!a || !b) { fprintf(stderr, "out of memory\n"); return 1; }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < WORDS; i++) { a[i] = 0; b[i] = i * 2654435761u; } /* each thread's pages its own */
    double bytes = (double)WORDS * sizeof *a;
    double read = best_of(10, 0, a, b, &sink), copy = best_of(10, 1, a, b, &sink);
    printf("read %.2f GB/s copy %.2f GB/s (check %llu)\n", bytes / read / 1e9, 2 * bytes / copy / 1e9,
           (unsigned long long)(sink & 1));
    free(a); free(b);
    return 0;
}
"""

WEIGHT_BYTES = {"f32": 4.0, "q8": 34 / 32, "q4": 18 / 32, "Q4_K": 144 / 256}


def linear_weights(shape: dict) -> int:
    """The weights a decode step of a Llama of `shape` reads: every layer's q, k, v, o,
    gate, up and down, and the head."""
    hd = shape["dim"] // shape["heads"]
    attention = 2 * shape["dim"] * shape["dim"] + 2 * shape["dim"] * shape["kv_heads"] * hd
    return shape["layers"] * (attention + 3 * shape["dim"] * shape["mlp"]) + shape["vocab"] * shape["dim"]


def bandwidth(threads: int) -> tuple[float, float]:
    """(read, copy) GB/s at `threads` threads."""
    with tempfile.TemporaryDirectory() as folder:
        source, program = Path(folder) / "stream.c", Path(folder) / "stream"
        source.write_text(SOURCE)
        subprocess.run(
            ["gcc", *STRICT_FLAGS, "-O3", "-march=native", "-fopenmp", str(source), "-o", str(program)], check=True
        )
        done = subprocess.run(
            [str(program)],
            env=dict(os.environ, OMP_NUM_THREADS=str(threads)),
            capture_output=True,
            text=True,
            check=True,
        )
    fields = done.stdout.split()
    return float(fields[1]), float(fields[4])


def main() -> None:
    print(
        f"cpu: {cpu_field('model name')}, cpu family {cpu_field('cpu family')}, model {cpu_field('model')}; "
        f"load average at start: {load_average()}"
    )
    reads = {}
    for threads in (1, 2):
        reads[threads], copy = bandwidth(threads)
        print(f"{threads} thread(s): read {reads[threads]:.2f} GB/s, copy {copy:.2f} GB/s")
    for name, shape in STORIES.items():
        count = linear_weights(shape)
        for fmt, per in WEIGHT_BYTES.items():
            mb = count * per / 1e6
            limits = " / ".join(f"{reads[t] * 1e3 / mb:.0f}" for t in (1, 2))
            print(
                f"{name} {fmt}: {count / 1e6:.1f} M linear weights, {mb:.1f} MB per token; "
                f"at most {limits} tokens/s (1 / 2 threads' read bandwidth)"
            )
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
