"""exactc's libm: the C functions and their numpy twins give the same bits, and both are
accurate to under 1 ulp.

Correctness of the twin contract (C == twin bit for bit):
  * per function, over 10^6+ inputs: random 64-bit patterns, special values, and the
    ranges where each algorithm switches branch or loses precision;
  * the f32-site forms on random float32 patterns and their hard ranges;
  * the same bits from gcc and clang at -O0, -O2, -O3 and -march=native;
  * the laned forms (exactc_<f>_array: exp, tanh, erf, sin, cos) on the same inputs, in
    every build, below the rounding too, and vectorized by both compilers;
  * every constant has the same value in both files and is what the generator derives.
Accuracy: a smoke test against mpmath (verify/accuracy.py has the full measurement).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS, libm_twin
from exactc.verify.build import BuildOptions, runtime_source
from exactc.runtime.toolchain import native_macros
from exactc.verify.compare import assert_bits_equal, first_mismatch, hexval
from exactc.verify.exhaustive import FUNCTIONS, LANED, LANED_BUILD, load_libm

from installed import need  # tests/installed.py

ROOT = Path(__file__).resolve().parent.parent
RANDOM_PATTERNS = 400_000  # per function, besides the hard ranges


@pytest.fixture(scope="module")
def libm():
    return load_libm()


@pytest.fixture(scope="module")
def laned():
    """The library with every form laned, vectorized for this CPU."""
    return load_libm(LANED_BUILD)


# ------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------
def f64(*values) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def from_bits(u) -> np.ndarray:
    return np.asarray(u, dtype=np.uint64).view(np.float64)


def around(values, k: int = 64) -> np.ndarray:
    """The 2k doubles nearest each value (stepping the bits of |value|), sign kept."""
    v = np.asarray(values, dtype=np.float64).ravel()
    mag = np.abs(v).view(np.int64)[:, None] + np.arange(-k, k, dtype=np.int64)[None, :]
    mag = np.clip(mag, 0, 0x7FF0000000000000).view(np.float64)
    return np.copysign(mag, v[:, None]).ravel()


def near(values, k: int = 64) -> np.ndarray:
    """Neighbours of |values|, and their negatives."""
    a = around(np.abs(np.asarray(values, dtype=np.float64)), k)
    return np.concatenate([a, -a])


def uniform(rng, lo, hi, n) -> np.ndarray:
    return rng.uniform(lo, hi, n)


def log_uniform(rng, lo_exp, hi_exp, n) -> np.ndarray:
    """Random mantissas with exponents uniform in [lo_exp, hi_exp), random signs."""
    mant = rng.integers(0, 1 << 52, n, dtype=np.uint64)
    exps = rng.integers(lo_exp + 1023, hi_exp + 1023, n).astype(np.uint64)
    sign = rng.integers(0, 2, n).astype(np.uint64) << np.uint64(63)
    return from_bits(sign | (exps << np.uint64(52)) | mant)


SPECIALS = np.concatenate(
    [
        f64(0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 0.5, 2.0),
        from_bits([0x7FF0000000000001, 0xFFF0000000000001, 0x7FF8000000000001,
                   0x7FFFFFFFFFFFFFFF, 0xFFF8000000000000]),  # NaN payloads, signalling
        around([5e-324, 2.2250738585072014e-308], 8),  # subnormal edges
        near([np.finfo(np.float64).max], 4),
        near([2.0**-1074 * 3, 2.0**-1060, 2.0**-600, 2.0**-60, 2.0**-30, 1e-300], 4),
    ]
)


def hard_inputs(name: str, rng) -> np.ndarray:
    """Where each function's algorithm switches branch, loses bits or changes binade."""
    tw = libm_twin
    if name == "exp":
        ln2_32 = np.log(2) / 32  # only to place test points; never a result
        n = rng.integers(-34440, 32770, 60_000)
        return np.concatenate([
            uniform(rng, -746, 710, 300_000),
            uniform(rng, -745.2, -708.3, 150_000),  # subnormal results (k <= -1022)
            uniform(rng, 708, 710, 50_000),  # k = 1024, overflow
            uniform(rng, -1, 1, 100_000),
            log_uniform(rng, -80, 0, 50_000),  # tiny arguments
            (n + 0.5) * ln2_32 + rng.uniform(-1e-12, 1e-12, n.size),  # n-rounding switch
            near([709.782712893384, 745.1332191019411, 708.3964185322641, 708.39641853226408,
                  744.44007192138122, 710, 746, 1022 * np.log(2), 1021 * np.log(2)], 256),
        ])
    if name == "log":
        m = np.abs(log_uniform(rng, -1075, 1024, 100_000))
        return np.concatenate([
            m,
            np.abs(from_bits(rng.integers(1, 1 << 52, 100_000, dtype=np.uint64))),  # subnormal
            uniform(rng, 0.5, 2.0, 250_000),
            1.0 + uniform(rng, -2.0**-20, 2.0**-20, 100_000),  # near 1
            around([1.0], 4096),
            # the sqrt2 switch, in many binades
            near([tw.LOG_SQRT2 * 2.0**e for e in range(-1070, 1023, 7)], 8),
            near([2.0**e for e in range(-1074, 1024, 3)], 2),  # powers of two
            uniform(rng, 0, 1e300, 50_000),
        ])
    if name == "tanh":
        return np.concatenate([
            uniform(rng, -25, 25, 250_000),
            uniform(rng, -0.3, 0.3, 200_000),
            uniform(rng, 0.2, 0.6, 100_000),
            log_uniform(rng, -40, 5, 100_000),
            near([tw.TANH_TINY, tw.TANH_SMALL, tw.TANH_ONE, 19.06, 18.7], 512),
            # exp_core's n switch for 2a
            (rng.integers(8, 2100, 30_000) + 0.5) * (np.log(2) / 64)
            + rng.uniform(-1e-13, 1e-13, 30_000),
        ])
    if name == "erf":
        return np.concatenate([
            uniform(rng, -7, 7, 250_000),
            uniform(rng, -1.2, 1.2, 200_000),
            uniform(rng, 0.9, 2.2, 100_000),
            log_uniform(rng, -40, 3, 100_000),
            near([tw.ERF_TINY, 2.0**-28, tw.ERF_SERIES_END, tw.ERF_ONE, 5.8636, 5.9215], 512),
            near(tw.ERFC_BOUNDS, 512),
            uniform(rng, 6, 30, 10_000),
        ])
    if name in ("sin", "cos"):
        pio2 = np.pi / 2
        k = rng.integers(1, 1 << 20, 100_000)
        big_k = np.exp2(rng.uniform(20, 70, 50_000)).round()
        worst = [6381956970095103 * 2.0**797]  # the double closest to a multiple of pi/2
        return np.concatenate([
            uniform(rng, -10, 10, 200_000),
            uniform(rng, -2.0**20, 2.0**20, 100_000),  # Cody-Waite
            (k * pio2) * (1 + rng.uniform(-2e-16, 2e-16, k.size)),  # near multiples of pi/2
            around(k[:2000] * pio2, 16),
            big_k * pio2,  # near multiples of pi/2, Payne-Hanek
            log_uniform(rng, 19, 75, 100_000),  # up to 1e22 and beyond
            log_uniform(rng, 75, 1024, 100_000),
            f64(1e22, -1e22, 1e300, 2.0**1023, *worst),
            near([tw.TRIG_TINY, tw.TRIG_PIO4, tw.TRIG_CODY_WAITE_END, pio2, np.pi, 3 * pio2,
                  2 * np.pi, 1e22], 512),
        ])
    raise KeyError(name)


def inputs_for(name: str) -> np.ndarray:
    rng = np.random.default_rng(sum(map(ord, name)))
    random_bits = from_bits(rng.integers(0, 1 << 64, RANDOM_PATTERNS, dtype=np.uint64))
    return np.concatenate([SPECIALS, random_bits, hard_inputs(name, rng)])


# ------------------------------------------------------------------------------------
# The one comparison
# ------------------------------------------------------------------------------------
def assert_same_bits(label: str, x: np.ndarray, c_out: np.ndarray, twin_out: np.ndarray):
    """The one comparison (verify/compare.py), with the input at the first difference."""
    differ = first_mismatch(label, twin_out, c_out, labels=("twin", "C"))
    if differ is not None:
        pytest.fail(f"{label}: C and twin differ on {differ.count} of {x.size} inputs; first: "
                    f"x = {hexval(x[differ.index])}: C = {differ.actual}, twin = {differ.expected}")


@pytest.mark.parametrize("name", FUNCTIONS)
def test_c_equals_twin_f64(libm, name):
    x = inputs_for(name)
    assert x.size >= 1_000_000
    assert_same_bits(name, x, libm.f64(name, x), libm_twin.FUNCTIONS[name](x))


def f32_inputs(name: str) -> np.ndarray:
    """Random float32 patterns, the function's interesting range, the specials."""
    rng = np.random.default_rng(7 + sum(map(ord, name)))
    random_bits = rng.integers(0, 1 << 32, 300_000, dtype=np.uint64).astype(np.uint32)
    interesting = {
        "exp": (-104, 89), "log": (0, 4), "tanh": (-10, 10),
        "erf": (-4, 4), "sin": (-1e4, 1e4), "cos": (-1e4, 1e4),
    }[name]
    with np.errstate(all="ignore"):  # SPECIALS overflow to f32 infinities
        specials = SPECIALS.astype(np.float32)
    x = np.concatenate([
        random_bits.view(np.float32),
        rng.uniform(*interesting, 100_000).astype(np.float32),
        specials,
    ])
    return x


@pytest.mark.parametrize("name", FUNCTIONS)
def test_c_equals_twin_f32_site(libm, name):
    x = f32_inputs(name)
    out = libm_twin.F32_FUNCTIONS[name](x)
    assert out.dtype == np.float32
    assert_same_bits(name + "f", x, libm.f32(name, x), out)


# ------------------------------------------------------------------------------------
# The laned forms: the same inputs, the same bits, in blocks of lanes. Every input set
# is run at an offset of 0 to 15 elements too, so that each input meets each lane.
# ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", LANED)
def test_laned_c_equals_twin_f64(laned, name):
    x = inputs_for(name)
    assert_same_bits(f"{name} (laned)", x, laned.f64(name, x, laned=True), libm_twin.FUNCTIONS[name](x))
    for shift in (1, 7, 15):
        part = x[shift: shift + 200_003]
        assert_same_bits(f"{name} (laned, from element {shift})", part, laned.f64(name, part, laned=True),
                         libm_twin.FUNCTIONS[name](part))


@pytest.mark.parametrize("name", LANED)
def test_laned_c_equals_twin_f32_site(laned, name):
    x = f32_inputs(name)
    assert_same_bits(f"{name}f (laned)", x, laned.f32(name, x, laned=True), libm_twin.F32_FUNCTIONS[name](x))


def test_f32_tanh_lanes_need_no_series(laned):
    """tanh's f32 lanes compute the exp branch alone where the scalar function takes the
    series (exactc_libm.c, tanhf_lane): every float in [2^-30, 0.25) gets the scalar
    function's bits from them, all 234,881,024 (their negatives every 7th)."""
    lo = int(np.float32(2.0**-30).view(np.uint32))
    hi = int(np.float32(0.25).view(np.uint32))
    assert hi - lo == 234_881_024
    chunk = 1 << 24
    for start in range(lo, hi, chunk):
        bits = np.arange(start, min(start + chunk, hi), dtype=np.uint32)
        for x in (bits.view(np.float32), -bits[::7].view(np.float32)):
            assert_same_bits("tanhf (laned, the series range)", x, laned.f32("tanh", x, laned=True),
                             laned.f32("tanh", x))


def test_f32_site_is_f64_rounded_once():
    x = np.array([0.1, -3.5, 1e-40, 80.0], dtype=np.float32)
    with np.errstate(all="ignore"):
        want = libm_twin.exp(x.astype(np.float64)).astype(np.float32)
    assert_same_bits("expf", x, libm_twin.expf(x), want)


def test_special_values():
    t = libm_twin
    inf, nan = np.inf, np.nan
    cases = {
        "exp": [(nan, nan), (inf, inf), (-inf, 0.0), (0.0, 1.0), (-0.0, 1.0), (-746.0, 0.0),
                (710.0, inf), (-745.1332191019411, 5e-324), (-745.1332191019412, 0.0)],
        "log": [(nan, nan), (-1.0, nan), (-0.0, -inf), (0.0, -inf), (inf, inf), (1.0, 0.0),
                (-inf, nan)],
        "tanh": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (30.0, 1.0),
                 (-5e-324, -5e-324)],
        "erf": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (6.5, 1.0)],
        "sin": [(nan, nan), (inf, nan), (-inf, nan), (0.0, 0.0), (-0.0, -0.0),
                (-5e-324, -5e-324)],
        "cos": [(nan, nan), (inf, nan), (-inf, nan), (0.0, 1.0), (-0.0, 1.0)],
    }
    for name, pairs in cases.items():
        x = f64(*[p[0] for p in pairs])
        want = f64(*[p[1] for p in pairs])
        got = t.FUNCTIONS[name](x)
        assert_same_bits(name, x, got, want)


# ------------------------------------------------------------------------------------
# Compilers and optimization levels change nothing
# ------------------------------------------------------------------------------------
BUILDS = [
    BuildOptions(cc=cc, opt=opt, march_native=native)
    for cc in ("gcc", "clang")
    for opt, native in (("-O0", False), ("-O2", False), ("-O3", False), ("-O2", True),
                        ("-O3", True))
]


@pytest.mark.parametrize(
    "options", BUILDS, ids=lambda o: f"{o.cc}{o.opt}{'-native' if o.march_native else ''}"
)
def test_same_bits_every_build(options):
    need(options.cc)
    libm = load_libm(options)  # -Wall -Wextra -Werror: the build itself is warning-free
    for name in FUNCTIONS:
        rng = np.random.default_rng(3)
        x = np.concatenate([SPECIALS, hard_inputs(name, rng)[::5],
                            from_bits(rng.integers(0, 1 << 64, 20_000, dtype=np.uint64))])
        assert_same_bits(f"{name} [{options.describe()}]", x, libm.f64(name, x),
                         libm_twin.FUNCTIONS[name](x))


@pytest.mark.parametrize(
    "options", BUILDS, ids=lambda o: f"{o.cc}{o.opt}{'-native' if o.march_native else ''}"
)
def test_laned_forms_same_bits_every_build(options):
    """The laned forms, every one forced to lanes (-DEXACTC_LANES=1, whatever the target
    would choose), in each build: SSE2's 2 lanes, AVX's 4, unoptimized."""
    need(options.cc)
    libm = load_libm(dataclasses.replace(options, defines=("EXACTC_LANES=1",)))
    for name in LANED:
        rng = np.random.default_rng(5)
        x = np.concatenate([SPECIALS, hard_inputs(name, rng)[::5],
                            from_bits(rng.integers(0, 1 << 64, 20_000, dtype=np.uint64))])
        assert_same_bits(f"{name} laned [{options.describe()}]", x, libm.f64(name, x, laned=True),
                         libm_twin.FUNCTIONS[name](x))


def native_avx() -> bool:
    """Whether -march=native gives this CPU's AVX (4 doubles a vector), where the laned
    forms are vectorized."""
    return "__AVX__" in native_macros("gcc")


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_laned_forms_are_vectorized(cc, tmp_path):
    """gcc and clang at -O2 -march=native with the strict flags vectorize each laned
    form: its body does packed double arithmetic on whole vector registers (a scalar
    loop would add with addsd, never with addpd on a ymm or zmm register)."""
    need(cc)
    if not native_avx():
        pytest.skip("this CPU has no AVX: the laned forms of tanh and erf are the scalar loop here")
    source = tmp_path / "exactc_libm.c"
    source.write_text(runtime_source("exactc_libm.c"))
    done = subprocess.run([cc, *STRICT_FLAGS, "-O2", "-march=native", f"-I{RUNTIME_DIR}", "-S", "-o", "-",
                           str(source)], capture_output=True, text=True, check=True)
    for name in LANED:
        for form in (f"exactc_{name}_array", f"exactc_{name}f_array"):
            body = re.search(rf"^{form}:[^\n]*\n(.*?)^\s*\.size\s+{form},", done.stdout, re.S | re.M)
            assert body, f"{cc}: no function {form} in the assembly"
            packed = re.findall(r"\bv(?:add|mul|sub)pd\s+[^\n]*%[yz]mm", body.group(1))
            assert len(packed) >= 8, f"{cc}: {form} does no packed double arithmetic: not vectorized"


def test_c_source_uses_no_libm():
    src = runtime_source("exactc_libm.c")
    assert "#include <math.h>" not in src
    code = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    for fn in ("fabs", "floor", "ldexp", "frexp", "sqrt", "fma", "rint", "scalbn", "long double"):
        assert not re.search(rf"\b{fn}\b", code), f"exactc_libm.c uses {fn}"
    # a fused multiply-add only in two_prod's error term, under EXACTC_FMA (its other form
    # is Dekker's): anywhere else it would round once where the twin rounds twice
    two_prod = re.search(r"static inline dd two_prod\(double a, double b\) \{\n(.*?)\n\}", code, re.S)
    assert two_prod and "#if EXACTC_FMA" in two_prod.group(1)
    for fused in re.finditer(r"fma\w*\s*\(", code):
        assert two_prod.start(1) < fused.start() < two_prod.end(1), \
            f"exactc_libm.c has a fused multiply-add outside two_prod: {fused.group(0)}"


# ------------------------------------------------------------------------------------
# Constants: two copies, equal, and derived
# ------------------------------------------------------------------------------------
def c_constants() -> dict[str, list[int]]:
    """Every `static const` in exactc_libm.c as a list of bit patterns."""
    src = re.sub(r"/\*.*?\*/", "", runtime_source("exactc_libm.c"), flags=re.S)
    out = {}
    for m in re.finditer(
        r"static const (double|uint32_t) (\w+)((?:\[\d+\])*) = (\{.*?\}|[^;]+);", src, re.S
    ):
        ctype, name, _, body = m.groups()
        items = re.findall(r"-?0x[0-9a-fA-F.]+(?:p[+-]?\d+)?u?", body)
        if ctype == "double":
            out[name] = [
                int(np.array(float.fromhex(v)).view(np.uint64)) for v in items
            ]
        else:
            out[name] = [int(v.rstrip("u"), 16) for v in items]
    return out


def twin_bits(value) -> list[int]:
    a = np.asarray(value)
    if a.dtype == np.float64:
        return [int(b) for b in a.ravel().view(np.uint64)]
    return [int(b) for b in a.ravel()]


def test_constants_are_the_same_in_c_and_twin():
    c = c_constants()
    assert len(c) > 30
    twin_names = {n for n in dir(libm_twin) if re.fullmatch(r"[A-Z][A-Z0-9_]*", n)} - {
        "FUNCTIONS", "F32_FUNCTIONS"
    }
    assert set(c) == twin_names, (set(c) ^ twin_names)
    for name, bits in c.items():
        assert twin_bits(getattr(libm_twin, name)) == bits, f"{name} differs between C and twin"


def test_constants_are_derived_by_the_generator():
    spec = importlib.util.spec_from_file_location("gen", ROOT / "tools" / "gen_libm_coeffs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    derived = gen.derive()
    derived.pop("_err")
    c = c_constants()
    for name, value in derived.items():
        want = twin_bits(np.asarray(value, dtype=np.float64 if name != "TRIG_TWO_OVER_PI"
                                    else np.uint64))
        assert c[name] == want, f"{name} in exactc_libm.c is not what the generator derives"


# ------------------------------------------------------------------------------------
# Accuracy smoke test (verify/accuracy.py measures more points and writes the report)
# ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FUNCTIONS)
def test_accuracy_under_one_ulp(libm, name):
    from exactc.verify.accuracy import measure, sample_f64

    x = sample_f64(name, 2000, seed=11)
    stats = measure(name, x, libm.f64(name, x))
    assert stats.max_ulp < 1.0, f"{name}: {stats.max_ulp:.3f} ulp at x = {stats.worst_x.hex()}"
    assert stats.correctly_rounded > 0.95


# ------------------------------------------------------------------------------------
# Below the final rounding: the probe build returns the lo part of each final
# double-double, whose bits change with any change in the computation (a reordered sum,
# a constant changed by one ulp) that the rounded results almost never show.
# ------------------------------------------------------------------------------------
def native_fma() -> bool:
    """Whether -march=native gives this CPU's fused multiply-add (two_prod's fused form)."""
    return "__FMA__" in native_macros("gcc")


# two_prod's two forms (exactc_libm.c, EXACTC_FMA): Dekker's split, the twin's, and the
# fused multiply-add, which -march=native picks where the CPU has one.
PRODUCTS = {
    "dekker": BuildOptions(defines=("EXACTC_LIBM_PROBE_LO",)),
    "dekker-native": BuildOptions(march_native=True, defines=("EXACTC_LIBM_PROBE_LO", "EXACTC_FMA=0")),
    "fused": BuildOptions(march_native=True, defines=("EXACTC_LIBM_PROBE_LO", "EXACTC_FMA=1")),
}


def probe_build(products: str) -> BuildOptions:
    if products == "fused" and not native_fma():
        pytest.skip("this CPU has no fused multiply-add: two_prod's fused form cannot run here")
    return PRODUCTS[products]


@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_c_equals_twin_below_the_rounding(name, products):
    libm = load_libm(probe_build(products))
    x = inputs_for(name)[::3]
    with libm_twin.probe_lo():
        twin_out = libm_twin.FUNCTIONS[name](x)
    assert_same_bits(f"{name} (lo probe, {products} products)", x, libm.f64(name, x), twin_out)


@pytest.mark.parametrize("products", ["dekker-native", "fused"])
@pytest.mark.parametrize("name", LANED)
def test_laned_c_equals_twin_below_the_rounding(name, products):
    options = probe_build(products)
    libm = load_libm(dataclasses.replace(options, defines=(*options.defines, "EXACTC_LANES=1")))
    x = inputs_for(name)[::3]
    with libm_twin.probe_lo():
        twin_out = libm_twin.FUNCTIONS[name](x)
    assert_same_bits(f"{name} laned (lo probe, {products} products)", x, libm.f64(name, x, laned=True), twin_out)


# ------------------------------------------------------------------------------------
# verify/exhaustive.py, with a big step (the full run is `make verify` material)
# ------------------------------------------------------------------------------------
def test_exhaustive_with_a_big_step(capsys):
    from exactc.verify import exhaustive

    assert exhaustive.main(["--step", "65521", "--jobs", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    n = 6 * len(range(0, 1 << 32, 65521))
    assert last == f"exhaustive: {n} inputs, 0 mismatches"


def test_exhaustive_laned_with_a_big_step(capsys):
    from exactc.verify import exhaustive

    assert exhaustive.main(["--laned", "--step", "65521", "--jobs", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    n = len(LANED) * len(range(0, 1 << 32, 65521))
    assert last == f"exhaustive: {n} inputs, 0 mismatches"


def test_exhaustive_reports_a_mismatch(capsys, monkeypatch):
    from exactc.verify import exhaustive

    def off_by_one_ulp(x):
        y = libm_twin.expf(x)
        return np.where(x == np.float32(1.0), np.nextafter(y, np.float32(np.inf)), y)

    monkeypatch.setitem(libm_twin.F32_FUNCTIONS, "exp", off_by_one_ulp)
    # 1.0f is 0x3f800000, a multiple of 128: the step reaches it
    assert exhaustive.main(["--functions", "exp", "--step", "128", "--chunk", "1048576",
                            "--jobs", "1"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH expf x=0x1.0000000000000p+0 (0x3f800000)" in out
    assert out.strip().splitlines()[-1] == f"exhaustive: {1 << 25} inputs, 1 mismatches"


# ---- the libm twins' array contract


SAMPLES = np.array([[-3.5, -0.75, 0.0], [1e-300, 0.5, 2.0]])


@pytest.mark.parametrize("name", sorted(libm_twin.FUNCTIONS))
def test_a_twin_keeps_the_shape_of_its_argument(name):
    f64, f32 = libm_twin.FUNCTIONS[name], libm_twin.F32_FUNCTIONS[name]
    x = np.abs(SAMPLES) + 0.25 if name == "log" else SAMPLES
    for arg in (x, x[0, 1], x.reshape(3, 2, 1)):
        for fn, dtype in ((f64, np.float64), (f32, np.float32)):
            out = fn(arg)
            assert out.shape == np.shape(arg) and out.dtype == dtype, (fn.__name__, np.shape(arg))
    # elementwise: the 2-D result is the flat result, reshaped
    assert_bits_equal(f64(x).ravel(), f64(x.ravel()), "elementwise")


@pytest.mark.parametrize("name", sorted(libm_twin.FUNCTIONS))
def test_a_twin_computes_in_f64_whatever_it_is_given(name):
    fn = libm_twin.FUNCTIONS[name]
    values = [0.1, 0.7, 1.3, 2.9]  # f32 (or a list) widened to f64 exactly, then f(x) in f64
    expected = fn(np.array(values, dtype=np.float32).astype(np.float64))
    out = fn(np.array(values, dtype=np.float32))
    assert out.dtype == np.float64 and out.tolist() == expected.tolist()
    assert fn(values).tolist() == fn(np.array(values)).tolist()


@pytest.mark.parametrize("name", sorted(libm_twin.FUNCTIONS))
def test_an_f32_site_rounds_its_argument_to_f32_first(name):
    site = libm_twin.F32_FUNCTIONS[name]
    x = np.array([0.1, 0.7, 1.3, 2.9])  # none of them is an f32
    rounded = x.astype(np.float32)
    expected = libm_twin.FUNCTIONS[name](rounded.astype(np.float64)).astype(np.float32)
    assert_bits_equal(expected, site(x), f"{name}f")
    assert site.__name__ == f"{name}f"
    assert site.__doc__ == f"float32({name}(float64(x))), as exactc_{name}f."
