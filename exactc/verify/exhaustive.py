"""Compare exactc's libm in C with its numpy twin over every float32 input.

    python -m exactc.verify.exhaustive [--functions exp,log,...] [--step N] [--jobs J]

For each function the f32-site form (float)exactc_f((double)x) in C and
libm_twin.<f>f in numpy are run on all 2^32 float32 bit patterns (or every N-th one
with --step N), in chunks spread over processes. Outputs must be the same bits by the
rule of verify/compare.py (two NaNs agree whatever their payloads). The last line is
`exhaustive: <n> inputs, <m> mismatches` and the exit status is 1 when m > 0.

This module also holds the one C wrapper that runs the libm over whole arrays (a cffi
call per element would dominate every check); tests/test_libm.py and
verify/accuracy.py load the library through `load_libm`.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import sys
import time

import numpy as np

from exactc.runtime import libm_twin
from exactc.verify.build import BuildOptions, load_library, runtime_source
from exactc.verify.compare import bit_equal_mask

FUNCTIONS = ("exp", "log", "tanh", "erf", "sin", "cos")

# Array-at-a-time entry points: exactc_<f>_array over doubles, exactc_<f>f_array over
# floats (the f32-site forms of exactc_rt.h).
LIBM_ARRAYS_C = '#include "exactc_rt.h"\n\n' + "".join(
    f"void exactc_{f}_array(const double *x, double *y, size_t n) {{\n"
    f"    for (size_t i = 0; i < n; i++) y[i] = exactc_{f}(x[i]);\n}}\n"
    f"void exactc_{f}f_array(const float *x, float *y, size_t n) {{\n"
    f"    for (size_t i = 0; i < n; i++) y[i] = exactc_{f}f(x[i]);\n}}\n"
    for f in FUNCTIONS
)
LIBM_ARRAYS_CDEF = "".join(
    f"void exactc_{f}_array(const double *x, double *y, size_t n);\n"
    f"void exactc_{f}f_array(const float *x, float *y, size_t n);\n"
    for f in FUNCTIONS
)


@dataclasses.dataclass
class LibmC:
    """exactc_libm.c compiled with the array wrappers; f64/f32 run one function."""

    library: object

    def f64(self, name: str, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float64)
        y = np.empty_like(x)
        ffi = self.library.ffi
        getattr(self.library.lib, f"exactc_{name}_array")(
            ffi.cast("const double *", x.ctypes.data), ffi.cast("double *", y.ctypes.data), x.size
        )
        return y

    def f32(self, name: str, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        y = np.empty_like(x)
        ffi = self.library.ffi
        getattr(self.library.lib, f"exactc_{name}f_array")(
            ffi.cast("const float *", x.ctypes.data), ffi.cast("float *", y.ctypes.data), x.size
        )
        return y


def load_libm(options: BuildOptions = BuildOptions()) -> LibmC:
    sources = {
        "exactc_libm.c": runtime_source("exactc_libm.c"),
        "exactc_libm_arrays.c": LIBM_ARRAYS_C,
    }
    return LibmC(load_library(sources, LIBM_ARRAYS_CDEF, options))


# ------------------------------------------------------------------------------------
# The exhaustive run
# ------------------------------------------------------------------------------------
_LIBM: LibmC | None = None


def _check_chunk(task):
    """Compare one function on bit patterns start, start+step, ... below stop."""
    global _LIBM
    name, start, stop, step = task
    if _LIBM is None:
        _LIBM = load_libm()
    x = np.arange(start, stop, step, dtype=np.uint64).astype(np.uint32).view(np.float32)
    c_out = _LIBM.f32(name, x)
    twin_out = libm_twin.F32_FUNCTIONS[name](x)
    bad = ~bit_equal_mask(twin_out, c_out)
    examples = [
        (int(x.view(np.uint32)[i]), int(c_out.view(np.uint32)[i]), int(twin_out.view(np.uint32)[i]))
        for i in np.flatnonzero(bad)[:3]
    ]
    return name, x.size, int(bad.sum()), examples


def run(functions, step: int, chunk: int, jobs: int, out=None) -> int:
    """Returns the number of mismatches; prints progress and the summary line."""
    out = out or sys.stdout
    load_libm()  # compile once, before the workers race for the cache
    span = chunk * step  # bit patterns covered by one chunk
    tasks = [
        (name, start, min(start + span, 1 << 32), step)
        for name in functions
        for start in range(0, 1 << 32, span)
    ]
    total = bad = 0
    t0 = shown = time.time()
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs) as pool:
        for done, (name, n, m, examples) in enumerate(
            pool.imap_unordered(_check_chunk, tasks), start=1
        ):
            total += n
            bad += m
            for xb, cb, tb in examples:
                x = np.array([xb], dtype=np.uint32).view(np.float32)[0]
                print(
                    f"MISMATCH {name}f x={float(x).hex()} (0x{xb:08x}): "
                    f"C 0x{cb:08x}, twin 0x{tb:08x}",
                    file=out,
                )
            if time.time() - shown > 1.0 or done == len(tasks):
                shown = time.time()
                print(
                    f"\r[{done}/{len(tasks)} chunks] {total} inputs, {bad} mismatches, "
                    f"{shown - t0:.0f} s",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    print(file=sys.stderr)
    print(f"exhaustive: {total} inputs, {bad} mismatches", file=out, flush=True)
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="C libm vs numpy twin over all float32 inputs")
    ap.add_argument("--functions", default=",".join(FUNCTIONS),
                    help="comma-separated subset of " + ",".join(FUNCTIONS))
    ap.add_argument("--step", type=int, default=1, help="check every N-th bit pattern")
    ap.add_argument("--chunk", type=int, default=1 << 22, help="inputs per work item")
    ap.add_argument("--jobs", type=int, default=multiprocessing.cpu_count())
    args = ap.parse_args(argv)
    functions = [f for f in args.functions.split(",") if f]
    unknown = sorted(set(functions) - set(FUNCTIONS))
    if unknown:
        ap.error(f"unknown function(s) {unknown}: choose from {','.join(FUNCTIONS)}")
    if args.step < 1 or args.chunk < 1:
        ap.error("--step and --chunk must be positive")
    return 1 if run(functions, args.step, args.chunk, args.jobs) else 0


if __name__ == "__main__":
    sys.exit(main())
