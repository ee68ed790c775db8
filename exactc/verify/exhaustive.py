"""Compare exactc's libm in C with its numpy twin over every float32 input.

    python -m exactc.verify.exhaustive [--functions exp,log,...] [--step N] [--jobs J] [--laned]

For each function the f32-site form (float)exactc_f((double)x) in C and
libm_twin.<f>f in numpy are run on all 2^32 float32 bit patterns (or every N-th one
with --step N), in chunks spread over processes. Outputs must be the same bits by the
rule of verify/compare.py (two NaNs agree whatever their payloads). With --laned, the C
side is the runtime's laned form exactc_<f>f_array (exp, tanh, erf), built for this CPU
with every form laned (LANED_BUILD). The last line is `exhaustive: <n> inputs, <m>
mismatches` and the exit status is 1 when m > 0.

This module also holds the one C wrapper that runs the scalar libm over whole arrays
(a cffi call per element would dominate every check); tests/test_libm.py and
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
# The functions whose laned forms the runtime has: exactc_<f>_array, exactc_<f>f_array.
LANED = ("exp", "tanh", "erf", "sin", "cos")
# Every form laned (whatever the target would choose), vectorized for this CPU.
LANED_BUILD = BuildOptions(march_native=True, defines=("EXACTC_LANES=1",))

# The scalar functions over arrays, one call each: exactc_<f>_each over doubles,
# exactc_<f>f_each over floats (the f32-site forms of exactc_rt.h).
LIBM_ARRAYS_C = '#include "exactc_rt.h"\n\n' + "".join(
    f"void exactc_{f}_each(const double *x, double *y, size_t n) {{\n"
    f"    for (size_t i = 0; i < n; i++) y[i] = exactc_{f}(x[i]);\n}}\n"
    f"void exactc_{f}f_each(const float *x, float *y, size_t n) {{\n"
    f"    for (size_t i = 0; i < n; i++) y[i] = exactc_{f}f(x[i]);\n}}\n"
    for f in FUNCTIONS
)
LIBM_ARRAYS_CDEF = "".join(
    f"void exactc_{f}_each(const double *x, double *y, size_t n);\n"
    f"void exactc_{f}f_each(const float *x, float *y, size_t n);\n"
    for f in FUNCTIONS
) + "".join(
    f"void exactc_{f}_array(const double *x, double *y, int64_t n);\n"
    f"void exactc_{f}f_array(const float *x, float *y, int64_t n);\n"
    for f in LANED
)


@dataclasses.dataclass
class LibmC:
    """exactc_libm.c compiled with the array wrappers; f64/f32 run one function, the
    scalar one on each element, or (laned=True) the runtime's laned form."""

    library: object

    def _run(self, symbol: str, ctype: str, x: np.ndarray) -> np.ndarray:
        y = np.empty_like(x)
        ffi = self.library.ffi
        getattr(self.library.lib, symbol)(
            ffi.cast(f"const {ctype} *", x.ctypes.data), ffi.cast(f"{ctype} *", y.ctypes.data), x.size
        )
        return y

    def f64(self, name: str, x: np.ndarray, laned: bool = False) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float64)
        return self._run(f"exactc_{name}_{'array' if laned else 'each'}", "double", x)

    def f32(self, name: str, x: np.ndarray, laned: bool = False) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        return self._run(f"exactc_{name}f_{'array' if laned else 'each'}", "float", x)


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
    name, start, stop, step, laned = task
    if _LIBM is None:
        _LIBM = load_libm(LANED_BUILD if laned else BuildOptions())
    x = np.arange(start, stop, step, dtype=np.uint64).astype(np.uint32).view(np.float32)
    c_out = _LIBM.f32(name, x, laned)
    twin_out = libm_twin.F32_FUNCTIONS[name](x)
    bad = ~bit_equal_mask(twin_out, c_out)
    examples = [
        (int(x.view(np.uint32)[i]), int(c_out.view(np.uint32)[i]), int(twin_out.view(np.uint32)[i]))
        for i in np.flatnonzero(bad)[:3]
    ]
    return name, x.size, int(bad.sum()), examples


def run(functions, step: int, chunk: int, jobs: int, out=None, laned: bool = False) -> int:
    """Returns the number of mismatches; prints progress and the summary line."""
    out = out or sys.stdout
    load_libm(LANED_BUILD if laned else BuildOptions())  # compile once, before the workers race for the cache
    span = chunk * step  # bit patterns covered by one chunk
    tasks = [
        (name, start, min(start + span, 1 << 32), step, laned)
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
                    f"MISMATCH {name}f{' (laned)' if laned else ''} x={float(x).hex()} (0x{xb:08x}): "
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
    ap.add_argument("--functions", default="",
                    help="comma-separated subset of " + ",".join(FUNCTIONS) + " (default: all; with --laned, "
                    + ",".join(LANED) + ")")
    ap.add_argument("--step", type=int, default=1, help="check every N-th bit pattern")
    ap.add_argument("--chunk", type=int, default=1 << 22, help="inputs per work item")
    ap.add_argument("--jobs", type=int, default=multiprocessing.cpu_count())
    ap.add_argument("--laned", action="store_true",
                    help="check the laned forms exactc_<f>f_array (" + ",".join(LANED) + ") instead")
    args = ap.parse_args(argv)
    known = LANED if args.laned else FUNCTIONS
    functions = [f for f in args.functions.split(",") if f] if args.functions else list(known)
    unknown = sorted(set(functions) - set(known))
    if unknown:
        ap.error(f"unknown function(s) {unknown}: choose from {','.join(known)}")
    if args.step < 1 or args.chunk < 1:
        ap.error("--step and --chunk must be positive")
    return 1 if run(functions, args.step, args.chunk, args.jobs, laned=args.laned) else 0


if __name__ == "__main__":
    sys.exit(main())
