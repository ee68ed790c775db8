"""Whether rows repacked at load pay at the decode matrix-vector product: qlinear_i's q8
form at stories110M's feed-forward shape (1x768 by 768x2048, blocks of 32), one thread,
three ways in one C program built by gcc with STRICT_FLAGS + -O2 -march=native:

- `row by row`: what the printed nest does, each output's blocks in order, each block's
  sum one call of exactc_dot_q8_32 (runtime/exactc_dot.h), the f32 combine in scalars;
- `8 rows in place`: 8 outputs at once, x's block loaded once for the 8, the 8 rows read
  where they lie (8 streams), their sums reduced into one vector by vphaddd, the f32
  combine in 8 lanes (each lane one output, its blocks in order: the same roundings);
- `8 rows interleaved`: the same with the weights repacked at load as ggml's repacked
  Q8_0x8 would hold them: for each chunk of 8 rows and each block, the 8 rows' 32 bytes
  one after another (one stream), the scales likewise.

The program checks that the three give the same bits, then prints the best of 200 runs
of each, taken in turn. It needs AVX2 (the intrinsics are written out).

Usage: cd bench && ../.venv/bin/python quant_rows.py   (bench/test_bench_quant.py runs it)
"""

from __future__ import annotations

import subprocess

from exactc.verify.build import BuildOptions, compile_shared

SOURCE = r"""
#define _POSIX_C_SOURCE 199309L
#include "exactc_dot.h"
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { K = 768, N = 2048, NB = K / 32, RUNS = 200 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void row_by_row(const int8_t *xq, const float *xd, const int8_t *wq, const float *wd, float *y) {
    for (int64_t n = 0; n < N; n++) {
        float acc = 0.0f;
        for (int64_t b = 0; b < NB; b++) {
            int32_t s = exactc_dot_q8_32(xq + 32 * b, wq + n * K + 32 * b);
            acc = acc + ((float)s) * (xd[b] * wd[n * NB + b]);
        }
        y[n] = acc;
    }
}

static inline __m256i block_lanes(__m256i vx, const int8_t *w) {
    const __m256i vw = _mm256_loadu_si256((const __m256i *)w);
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(vw, vw), _mm256_sign_epi8(vx, vw));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

/* Row r's eight int32 lanes summed into lane r. */
static inline __m256i row_sums(const __m256i v[8]) {
    const __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

static void eight_rows(const int8_t *xq, const float *xd, const int8_t *wq, const float *wd8, float *y,
                       int interleaved) {
    for (int64_t c = 0; c < N / 8; c++) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < NB; b++) {
            const __m256i vx = _mm256_loadu_si256((const __m256i *)(xq + 32 * b));
            __m256i v[8];
            for (int64_t r = 0; r < 8; r++) {
                const int8_t *w = interleaved ? wq + ((c * NB + b) * 8 + r) * 32 : wq + (c * 8 + r) * K + 32 * b;
                v[r] = block_lanes(vx, w);
            }
            const __m256 s = _mm256_cvtepi32_ps(row_sums(v));
            const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(xd[b]), _mm256_loadu_ps(wd8 + (c * NB + b) * 8));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(s, scale));
        }
        _mm256_storeu_ps(y + 8 * c, acc);
    }
}

int main(void) {
    int8_t *xq = malloc(K), *wq = malloc((size_t)N * K), *wi = malloc((size_t)N * K);
    float *xd = malloc(NB * sizeof(float)), *wd = malloc((size_t)N * NB * sizeof(float));
    float *wd8 = malloc((size_t)N * NB * sizeof(float));
    float *y[3] = {malloc(N * sizeof(float)), malloc(N * sizeof(float)), malloc(N * sizeof(float))};
    srand(1);
    for (int64_t i = 0; i < K; i++) xq[i] = (int8_t)(rand() % 255 - 127);
    for (int64_t i = 0; i < (int64_t)N * K; i++) wq[i] = (int8_t)(rand() % 256 - 128);
    for (int64_t i = 0; i < NB; i++) xd[i] = (float)(rand() % 1000) * 1e-5f;
    for (int64_t i = 0; i < (int64_t)N * NB; i++) wd[i] = (float)(rand() % 1000) * 1e-5f;
    for (int64_t c = 0; c < N / 8; c++) {
        for (int64_t b = 0; b < NB; b++) {
            for (int64_t r = 0; r < 8; r++) {
                memcpy(wi + ((c * NB + b) * 8 + r) * 32, wq + (c * 8 + r) * K + 32 * b, 32);
                wd8[(c * NB + b) * 8 + r] = wd[(c * 8 + r) * NB + b];
            }
        }
    }
    double best[3] = {1e9, 1e9, 1e9};
    for (int run = 0; run < RUNS; run++) {
        for (int way = 0; way < 3; way++) {
            const double t = now();
            if (way == 0) row_by_row(xq, xd, wq, wd, y[0]);
            else eight_rows(xq, xd, way == 1 ? wq : wi, wd8, y[way], way == 2);
            const double dt = now() - t;
            best[way] = dt < best[way] ? dt : best[way];
        }
    }
    const int same = !memcmp(y[0], y[1], N * sizeof(float)) && !memcmp(y[0], y[2], N * sizeof(float));
    printf("%s %.1f %.1f %.1f\n", same ? "same" : "DIFFER", best[0] * 1e6, best[1] * 1e6, best[2] * 1e6);
    return same ? 0 : 1;
}
"""
WAYS = ("row by row", "8 rows in place", "8 rows interleaved")


def measure() -> dict[str, float]:
    """Microseconds of each way, best of 200; an AssertionError if their bits differ."""
    program = compile_shared(
        {"quant_rows.c": SOURCE}, BuildOptions(cc="gcc", opt="-O2", march_native=True), executable=True
    )
    done = subprocess.run([str(program)], capture_output=True, text=True)
    verdict, *times = done.stdout.split()
    assert done.returncode == 0 and verdict == "same", done.stdout + done.stderr
    return dict(zip(WAYS, map(float, times)))


if __name__ == "__main__":
    for way, us in measure().items():
        print(f"{way}: {us:.1f} us")
