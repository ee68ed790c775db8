"""Measure the accuracy of exactc's libm against mpmath, and write docs/accuracy.md.

    python -m exactc.verify.accuracy [--samples N] [--seed S] [--out docs/accuracy.md]

For each function, and for its f32-site form, a fixed random sample (SAMPLE_PLAN below
says exactly which) is run through the C library (gcc, the strict flags, -O2), and every
result is compared with the correctly rounded truth: mpmath evaluated with 128 bits
beyond the argument's own magnitude (so that sin and cos of huge arguments are reduced
exactly), then rounded to the nearest double (or float) by this module, subnormals and
overflow included. Reported: the largest error in ulps of the true result and the share
of results that are the correctly rounded ones. The numpy twin is run on the same sample
and must give the same bits (tests/test_libm.py checks that on far more inputs).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import mpmath
import numpy as np

from exactc.runtime import libm_twin
from exactc.verify.build import BuildOptions
from exactc.runtime.toolchain import compiler_version
from exactc.verify.compare import first_mismatch
from exactc.verify.exhaustive import FUNCTIONS, load_libm

# name -> list of (share of the sample, kind, low, high). Kinds:
#   uniform     x uniform in [low, high)
#   loguniform  |x| = 2^u with u uniform in [low, high), random sign
#   bits        random bit patterns: 64-bit for f64, 32-bit for f32, non-finite ones
#               redrawn; for log the sign bit is cleared
# The second and third parts aim at each algorithm's hard spots: subnormal results of
# exp, log near 1, the switch between tanh's two paths (0.25) and erf's (1), and
# Payne-Hanek reduction for sin and cos.
SAMPLE_PLAN = {
    "exp": [(0.4, "uniform", -745.2, 709.8), (0.2, "uniform", -1.0, 1.0),
            (0.2, "uniform", -745.2, -708.4), (0.2, "bits", 0, 0)],
    "log": [(0.4, "uniform", 0.0, 4.0), (0.2, "uniform", 0.7, 1.42),
            (0.2, "uniform", 1 - 2.0**-10, 1 + 2.0**-10), (0.2, "bits", 0, 0)],
    "tanh": [(0.4, "uniform", -22.0, 22.0), (0.2, "uniform", -1.0, 1.0),
             (0.2, "uniform", 0.2, 0.3), (0.2, "bits", 0, 0)],
    "erf": [(0.4, "uniform", -6.0, 6.0), (0.2, "uniform", -2.0, 2.0),
            (0.2, "uniform", 0.9, 1.6), (0.2, "bits", 0, 0)],
    "sin": [(0.4, "uniform", -100.0, 100.0), (0.2, "uniform", -2.0**20, 2.0**20),
            (0.2, "loguniform", 20, 1024), (0.2, "bits", 0, 0)],
    "cos": [(0.4, "uniform", -100.0, 100.0), (0.2, "uniform", -2.0**20, 2.0**20),
            (0.2, "loguniform", 20, 1024), (0.2, "bits", 0, 0)],
}


def _clamp_f32(name: str, kind: str, lo: float, hi: float) -> tuple[float, float]:
    """The plan's ranges for f32 inputs: exp's results beyond [-103.9, 88.7) are 0 or inf
    in f32, exp's subnormal part moves to f32's subnormal results, and floats stop at
    2^128."""
    if name == "exp":
        return (-103.9, -87.3) if hi == -708.4 else (max(lo, -103.9), min(hi, 88.7))
    if kind == "loguniform":
        return lo, min(hi, 128)
    return lo, hi

MPMATH = {"exp": mpmath.exp, "log": mpmath.log, "tanh": mpmath.tanh, "erf": mpmath.erf,
          "sin": mpmath.sin, "cos": mpmath.cos}


@dataclasses.dataclass(frozen=True)
class Format:
    name: str
    precision: int  # significand bits, the implicit one included
    emin: int  # exponent of the smallest normal
    emax: int  # exponent of the largest finite


F64 = Format("f64", 53, -1022, 1023)
F32 = Format("f32", 24, -126, 127)


# ------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------
def _random_bits(rng, n: int, fmt: Format, positive: bool) -> np.ndarray:
    uint, flt = (np.uint64, np.float64) if fmt is F64 else (np.uint32, np.float32)
    out = np.empty(0, dtype=flt)
    while out.size < n:
        b = rng.integers(0, 1 << (64 if fmt is F64 else 32), n, dtype=np.uint64).astype(uint)
        if positive:
            b &= uint((1 << (63 if fmt is F64 else 31)) - 1)
        x = b.view(flt)
        out = np.concatenate([out, x[np.isfinite(x)]])
    return out[:n]


def sample(name: str, n: int, fmt: Format = F64, seed: int = 0) -> np.ndarray:
    """The sample SAMPLE_PLAN describes, n points, in the format's dtype."""
    rng = np.random.default_rng([seed, FUNCTIONS.index(name), fmt.precision])
    parts = []
    for i, (share, kind, lo, hi) in enumerate(SAMPLE_PLAN[name]):
        k = n - sum(p.size for p in parts) if i == len(SAMPLE_PLAN[name]) - 1 else int(n * share)
        if fmt is F32:
            lo, hi = _clamp_f32(name, kind, lo, hi)
        if kind in ("uniform", "loguniform"):
            x = rng.uniform(lo, hi, k)
            if kind == "loguniform":
                x = np.exp2(x) * rng.choice([-1.0, 1.0], k)  # inputs only, not results
            with np.errstate(over="ignore"):
                parts.append(x if fmt is F64 else x.astype(np.float32))
        else:
            parts.append(_random_bits(rng, k, fmt, positive=(name == "log")))
    return np.concatenate(parts)


def sample_f64(name: str, n: int, seed: int = 0) -> np.ndarray:
    return sample(name, n, F64, seed)


# ------------------------------------------------------------------------------------
# Truth and error
# ------------------------------------------------------------------------------------
def truth(name: str, x: float):
    """f(x) as an mpf, 128 bits beyond the magnitude of x (exact reduction for sin/cos)."""
    _, e = mpmath.frexp(mpmath.mpf(x)) if x != 0 else (0, 0)
    with mpmath.workprec(128 + max(0, int(e))):
        return +MPMATH[name](mpmath.mpf(x))


def spacing(t, fmt: Format):
    """The distance between consecutive numbers of fmt around the real t."""
    if t == 0:
        return mpmath.ldexp(1, fmt.emin - fmt.precision + 1)
    _, e = mpmath.frexp(t)  # |t| in [2^(e-1), 2^e)
    return mpmath.ldexp(1, max(int(e) - 1, fmt.emin) - fmt.precision + 1)


def correctly_rounded(t, fmt: Format) -> float:
    """t rounded to the nearest number of fmt, ties to even; inf past the largest."""
    if t == 0:
        return 0.0
    u = spacing(t, fmt)
    r = mpmath.nint(t / u) * u  # mpmath.nint rounds half to even
    largest = mpmath.ldexp(2 * mpmath.ldexp(1, fmt.precision) - 1, fmt.emax - fmt.precision)
    if abs(r) > largest:
        return float("inf") if t > 0 else float("-inf")
    return float(r)


@dataclasses.dataclass
class Stats:
    name: str
    fmt: str
    n: int
    max_ulp: float
    worst_x: float
    correctly_rounded: float  # share


def measure(name: str, x: np.ndarray, y: np.ndarray, fmt: Format = F64,
            progress: str | None = None) -> Stats:
    worst, worst_x, exact = 0.0, 0.0, 0
    last = time.time()
    for i, (xi, yi) in enumerate(zip(x.tolist(), y.tolist())):
        t = truth(name, xi)
        want = correctly_rounded(t, fmt)
        if yi == want or (yi != yi and want != want):
            exact += 1
            err = float(abs(mpmath.mpf(yi) - t) / spacing(t, fmt)) if np.isfinite(yi) else 0.0
        elif not np.isfinite(yi):
            err = float("inf")
        else:
            err = float(abs(mpmath.mpf(yi) - t) / spacing(t, fmt))
        if err > worst:
            worst, worst_x = err, xi
        if progress and (time.time() - last > 0.5 or i + 1 == len(x)):
            last = time.time()
            print(f"\r{progress}: {i + 1}/{len(x)}, max {worst:.4f} ulp", end="",
                  file=sys.stderr, flush=True)
    return Stats(name, fmt.name, len(x), worst, worst_x, exact / len(x))


# ------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------
def describe_sample(name: str, n: int, fmt: Format) -> str:
    parts = []
    for share, kind, lo, hi in SAMPLE_PLAN[name]:
        if fmt is F32:
            lo, hi = _clamp_f32(name, kind, lo, hi)
        if kind == "uniform":
            parts.append(f"{share:.0%} U[{lo:.12g}, {hi:.12g})")
        elif kind == "loguniform":
            parts.append(f"{share:.0%} ±2^U[{lo:g}, {hi:g})")
        else:
            what = "positive finite" if name == "log" else "finite"
            parts.append(f"{share:.0%} random {what} {fmt.name} bit patterns")
    return f"{n}: " + ", ".join(parts)


def run(n: int, seed: int) -> tuple[list[Stats], str]:
    options = BuildOptions()
    libm = load_libm(options)
    rows = []
    for fmt in (F64, F32):
        for name in FUNCTIONS:
            x = sample(name, n, fmt, seed)
            if fmt is F64:
                y, twin = libm.f64(name, x), libm_twin.FUNCTIONS[name](x)
            else:
                y, twin = libm.f32(name, x), libm_twin.F32_FUNCTIONS[name](x)
            differ = first_mismatch(name, twin, y, labels=("twin", "C"))
            if differ is not None:
                raise AssertionError(f"{name} ({fmt.name}): C and twin differ on this sample: {differ}")
            label = name if fmt is F64 else name + "f"
            stats = measure(name, x.astype(np.float64), y.astype(np.float64), fmt,
                            progress=f"[{label}]")
            print(file=sys.stderr)
            rows.append((stats, describe_sample(name, n, fmt)))
    toolchain = f"{compiler_version(options.cc)}; `{options.describe()}`"
    return rows, toolchain


def write_report(rows, toolchain: str, command: str, path: Path) -> None:
    lines = [
        "# Accuracy of exactc's libm",
        "",
        "Generated by `verify/accuracy.py`; do not edit by hand. Command:",
        "",
        f"    {command}",
        "",
        "| function | sample (points: what) | max error (ulp) | correctly rounded |",
        "| --- | --- | --- | --- |",
    ]
    for stats, what in rows:
        label = stats.name if stats.fmt == "f64" else f"{stats.name}f (f32 site)"
        lines.append(
            f"| {label} | {what} | {stats.max_ulp:.4f} (x = {stats.worst_x.hex()}) "
            f"| {stats.correctly_rounded:.4%} |"
        )
    lines += [
        "",
        "## Method",
        "",
        "Each function of `runtime/exactc_libm.c` runs on a fixed random sample "
        "(numpy's default generator seeded with the seed, the function's index and the "
        "format's precision); the sample column says what it is made of. The truth is "
        "mpmath's value computed with 128 bits beyond the argument's magnitude (enough "
        "to reduce sin and cos of huge arguments exactly), rounded to the nearest double "
        "(or float, for the f32-site forms `(float)f((double)x)`) with ties to even, "
        "subnormals and overflow to infinity included. The error of a result is its "
        "distance to the unrounded truth in units of the spacing of doubles (floats) "
        "around the truth; a correctly rounded result has error at most 0.5. A result is "
        "counted as correctly rounded when it equals the rounded truth (two NaNs agree). "
        "The numpy twin (`runtime/libm_twin.py`) gave the same bits on every sampled "
        "point. The f32-site forms round exactc's double result once more, so their "
        "error is at most 0.5 float ulp plus a vanishing part, and they are correctly "
        "rounded except where the double result lies within its own error of a midpoint "
        "between two floats.",
        "",
        f"Toolchain: {toolchain}.",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="accuracy of exactc's libm against mpmath")
    ap.add_argument("--samples", type=int, default=20_000, help="points per function")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("docs/accuracy.md"))
    args = ap.parse_args(argv)
    rows, toolchain = run(args.samples, args.seed)
    command = "python -m exactc.verify.accuracy " + " ".join(
        [f"--samples {args.samples}", f"--seed {args.seed}", f"--out {args.out}"]
    )
    write_report(rows, toolchain, command, args.out)
    for stats, _ in rows:
        print(f"{stats.name:5s} {stats.fmt}: max {stats.max_ulp:.4f} ulp, "
              f"{stats.correctly_rounded:.4%} correctly rounded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
