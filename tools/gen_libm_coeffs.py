"""Derive every constant of exactc's libm with mpmath, and print them as C and Python.

    .venv/bin/python tools/gen_libm_coeffs.py            # C block, then Python block
    .venv/bin/python tools/gen_libm_coeffs.py --report   # fit errors only

The constants are pasted by hand into runtime/exactc_libm.c and runtime/libm_twin.py:
each file keeps its own copy (tests/test_libm.py compares the two copies, and compares
both with `derive()` below, so a constant changed on one side, or edited without
re-deriving it, fails a test).

What is derived, and how:
  * polynomials: Chebyshev interpolation (mpmath.chebyfit, a near-minimax fit) at
    300-bit precision of the *remainder* each kernel evaluates (for example
    (exp(r) - 1 - r) / r^2), then rounded to double.  Coefficients that a kernel uses in
    double-double arithmetic are split as hi = double(c), lo = double(c - hi).
    `fit_error` re-measures the error with the rounded coefficients.
  * Cody-Waite splits of ln2/32, ln2 and pi/2: the leading parts are rounded to so few
    bits that their products with the reduction's integer are exact.
  * tables: 2^(j/32) as double-double, and 2/pi in 32-bit words for Payne-Hanek.
"""

from __future__ import annotations

import argparse
import struct

import mpmath
from mpmath import mp, mpf

mp.prec = 300

# ----------------------------------------------------------------------------------
# Rounding helpers
# ----------------------------------------------------------------------------------


def to_double(v) -> float:
    """Round an mpf to the nearest double (mpmath rounds to nearest, ties to even)."""
    return float(mpf(v))


def split_dd(v) -> tuple[float, float]:
    hi = to_double(v)
    lo = to_double(mpf(v) - mpf(hi))
    return hi, lo


def round_bits(v, bits: int) -> float:
    """v rounded to `bits` significant bits (for Cody-Waite leading parts)."""
    v = mpf(v)
    e = int(mpmath.floor(mpmath.log(abs(v), 2)))
    scale = mpf(2) ** (bits - 1 - e)
    return to_double(mpmath.nint(v * scale) / scale)


def significant_bits(x: float) -> int:
    m, e = mpmath.frexp(mpf(x))
    n = int(m * 2**53)
    while n and n % 2 == 0:
        n //= 2
    return n.bit_length()


def fit(f, a, b, ncoef: int) -> list:
    """Coefficients (ascending) of a degree ncoef-1 Chebyshev fit of f on [a, b]."""
    # mpmath 1.3 (which torch's sympy pins) returns the highest degree first and has no
    # `asc` option; the coefficients are the same either way.
    coefs = mpmath.chebyfit(f, [mpf(a), mpf(b)], ncoef)
    return list(reversed(coefs))


def fit_error(f, coefs, a, b, weight=lambda t: 1, samples=2001) -> float:
    """max |(f(t) - sum c_i t^i) * weight(t)| over a grid, with coefficients as given."""
    a, b = mpf(a), mpf(b)
    worst = mpf(0)
    for i in range(samples):
        t = a + (b - a) * i / (samples - 1)
        p = mpf(0)
        for c in reversed(coefs):
            p = p * t + mpf(c)
        worst = max(worst, abs((f(t) - p) * weight(t)))
    return float(worst)


# ----------------------------------------------------------------------------------
# The derivations, one per function
# ----------------------------------------------------------------------------------


def derive_exp() -> dict:
    ln2_32 = mp.ln2 / 32
    # n = round(x * 32/ln2) has |n| < 2^16 for |x| < 746: 36-bit L_HI makes n*L_HI exact.
    l_hi = round_bits(ln2_32, 36)
    l_lo = to_double(ln2_32 - mpf(l_hi))
    h = mp.ln2 / 64 * mpf("1.002")  # |r| <= ln2/64, plus slack for the rounded n

    def q(r):  # exp(r) = 1 + r + r^2 q(r)
        if r == 0:
            return mpf(1) / 2
        return (mpmath.exp(r) - 1 - r) / r**2

    coefs = [to_double(c) for c in fit(q, -h, h, 5)]
    err = fit_error(q, coefs, -h, h, weight=lambda r: r * r)
    table = [split_dd(mpf(2) ** (mpf(j) / 32)) for j in range(32)]
    return {
        "EXP_INV_LN2_32": to_double(32 / mp.ln2),
        "EXP_LN2_32_HI": l_hi,
        "EXP_LN2_32_LO": l_lo,
        "EXP_Q": coefs,
        "EXP_T_HI": [t[0] for t in table],
        "EXP_T_LO": [t[1] for t in table],
        "_err": {"exp: |exp(r) - poly| (relative)": err},
    }


def derive_log() -> dict:
    sqrt2 = to_double(mpmath.sqrt(2))
    s_max = (mpf(sqrt2) - 1) / (mpf(sqrt2) + 1) * mpf("1.0001")

    def p(z):  # log((1+s)/(1-s)) = 2s + s^3 P(s^2)
        if z == 0:
            return mpf(2) / 3
        s = mpmath.sqrt(z)
        return (2 * mpmath.atanh(s) - 2 * s) / (s * z)

    coefs = [to_double(c) for c in fit(p, 0, s_max**2, 9)]
    # relative to the leading term 2s: s^2/2 * |err(P)|
    err = fit_error(p, coefs, 0, s_max**2, weight=lambda z: z / 2)
    # |k| <= 1075 + 54: an 11-bit k times a 42-bit LN2_HI is exact.
    ln2_hi = round_bits(mp.ln2, 42)
    return {
        "LOG_SQRT2": sqrt2,
        "LOG_LN2_HI": ln2_hi,
        "LOG_LN2_LO": to_double(mp.ln2 - mpf(ln2_hi)),
        "LOG_P": coefs,
        "_err": {"log: |2atanh(s) - 2s - s^3 P| / 2s": err},
    }


TANH_SMALL = 0.25


def derive_tanh() -> dict:
    zmax = mpf(TANH_SMALL) ** 2

    def u(z):  # tanh(a) = a (1 + z U(z)),  z = a^2
        if z == 0:
            return mpf(-1) / 3
        a = mpmath.sqrt(z)
        return (mpmath.tanh(a) / a - 1) / z

    coefs = [to_double(c) for c in fit(u, 0, zmax, 9)]
    err = fit_error(u, coefs, 0, zmax, weight=lambda z: z)
    return {
        "TANH_SMALL": TANH_SMALL,
        "TANH_U": coefs,
        "_err": {"tanh: |tanh(a)/a - 1 - z U| on a < 0.25": err},
    }


ERF_SERIES_END = 1.0
# erfc(a) = exp(-a^2) G(a) on [1, 6): one polynomial in d = a - center per piece.
ERFC_BOUNDS = [1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.75, 4.75, 6.0]
ERFC_NCOEF = 14  # the same degree in every piece keeps one code path


def derive_erf() -> dict:
    zmax = mpf(ERF_SERIES_END) ** 2

    def s(z):  # erf(a) = a S(a^2)
        if z == 0:
            return 2 / mpmath.sqrt(mp.pi)
        a = mpmath.sqrt(z)
        return mpmath.erf(a) / a

    raw = fit(s, 0, zmax, 16)
    # the first four are used in double-double, the rest in double
    dd = [split_dd(c) for c in raw[:4]]
    rest = [to_double(c) for c in raw[4:]]
    as_used = [mpf(hi) + mpf(lo) for hi, lo in dd] + rest
    err_series = fit_error(s, as_used, 0, zmax, weight=lambda z: 1 / s(z))

    def g(a):  # erfc(a) = exp(-a^2) G(a)
        return mpmath.erfc(a) * mpmath.exp(a * a)

    centers, g_hi, g_lo, pieces, errs = [], [], [], [], []
    for lo_b, hi_b in zip(ERFC_BOUNDS, ERFC_BOUNDS[1:]):
        c = (lo_b + hi_b) / 2  # a short binary number: a - c is exact
        gc = g(mpf(c))
        gh, gl = split_dd(gc)
        half = mpf(hi_b - lo_b) / 2 * mpf("1.0001")

        def slope(d, c=c, gc=gc):  # G(c + d) = G(c) + d P(d)
            if d == 0:
                return mpmath.diff(g, mpf(c))
            return (g(mpf(c) + d) - gc) / d

        coefs = [to_double(v) for v in fit(slope, -half, half, ERFC_NCOEF)]
        # error of G relative to G, then weighted by erfc/erf: what erf's result sees
        wt = mpmath.erfc(mpf(lo_b)) / mpmath.erf(mpf(lo_b)) / gc
        errs.append(float(fit_error(slope, coefs, -half, half, weight=lambda d: d * wt,
                                    samples=401)))
        centers.append(c)
        g_hi.append(gh)
        g_lo.append(gl)
        pieces.append(coefs)
    return {
        "ERF_SERIES_END": ERF_SERIES_END,
        "ERF_S_HI": [d[0] for d in dd],
        "ERF_S_LO": [d[1] for d in dd],
        "ERF_S": rest,
        "ERFC_BOUNDS": ERFC_BOUNDS,
        "ERFC_CENTER": centers,
        "ERFC_G_HI": g_hi,
        "ERFC_G_LO": g_lo,
        "ERFC_P": pieces,
        "_err": {
            "erf: |erf(a)/a - S| / S on a < 1": err_series,
            "erf: worst erfc piece error as seen by erf (relative)": max(errs),
        },
    }


def derive_trig() -> dict:
    rmax = mp.pi / 4 * mpf("1.001")
    zmax = rmax**2

    def s(z):  # sin(r) = r (1 + z S(z))
        if z == 0:
            return mpf(-1) / 6
        r = mpmath.sqrt(z)
        return (mpmath.sin(r) / r - 1) / z

    def c(z):  # cos(r) = 1 - z/2 + z^2 C(z)
        if z == 0:
            return mpf(1) / 24
        r = mpmath.sqrt(z)
        return (mpmath.cos(r) - 1 + z / 2) / z**2

    s_raw = fit(s, 0, zmax, 9)
    c_raw = fit(c, 0, zmax, 8)
    s_as_used = [mpf(split_dd(s_raw[0])[0]) + mpf(split_dd(s_raw[0])[1])] + [
        to_double(v) for v in s_raw[1:]
    ]
    c_as_used = [mpf(split_dd(c_raw[0])[0]) + mpf(split_dd(c_raw[0])[1])] + [
        to_double(v) for v in c_raw[1:]
    ]
    err_s = fit_error(s, s_as_used, 0, zmax, weight=lambda z: z)
    err_c = fit_error(c, c_as_used, 0, zmax, weight=lambda z: z * z)

    pio2 = mp.pi / 2
    # Cody-Waite: |n| < 2^20, so 33-bit parts make n*PIO2_k exact.
    p1 = round_bits(pio2, 33)
    p2 = round_bits(pio2 - mpf(p1), 33)
    p3 = round_bits(pio2 - mpf(p1) - mpf(p2), 33)
    p4 = to_double(pio2 - mpf(p1) - mpf(p2) - mpf(p3))
    # 2/pi as 32-bit words, 2/pi = sum w[i] 2^(-32 (i+1)): enough for |x| < 2^1024
    # (the window starts at word (q - 52 + 62) / 32 - 2 and spans 6 words).
    nwords = 40
    with mpmath.workprec(32 * nwords + 64):
        bits = int(mpmath.floor(2 / mpmath.pi() * mpf(2) ** (32 * nwords)))
    words = [(bits >> (32 * (nwords - 1 - i))) & 0xFFFFFFFF for i in range(nwords)]
    pio2_hi, pio2_lo = split_dd(pio2)
    return {
        "TRIG_S1_HI": split_dd(s_raw[0])[0],
        "TRIG_S1_LO": split_dd(s_raw[0])[1],
        "TRIG_S": [to_double(v) for v in s_raw[1:]],
        "TRIG_C2_HI": split_dd(c_raw[0])[0],
        "TRIG_C2_LO": split_dd(c_raw[0])[1],
        "TRIG_C": [to_double(v) for v in c_raw[1:]],
        "TRIG_INV_PIO2": to_double(2 / mp.pi),
        "TRIG_PIO2_1": p1,
        "TRIG_PIO2_2": p2,
        "TRIG_PIO2_3": p3,
        "TRIG_PIO2_4": p4,
        "TRIG_PIO2_HI": pio2_hi,
        "TRIG_PIO2_LO": pio2_lo,
        "TRIG_TWO_OVER_PI": words,
        "_err": {
            "sin: |sin(r)/r - 1 - z S| (relative)": err_s,
            "cos: |cos(r) - 1 + z/2 - z^2 C|": err_c,
        },
    }


def derive() -> dict:
    """Every constant, by name (the same names in the C file and the twin)."""
    out: dict = {}
    errs: dict = {}
    for part in (derive_exp(), derive_log(), derive_tanh(), derive_erf(), derive_trig()):
        errs.update(part.pop("_err"))
        out.update(part)
    out["_err"] = errs
    return out


# ----------------------------------------------------------------------------------
# Printing
# ----------------------------------------------------------------------------------


def hexd(x: float) -> str:
    """A double as a C99 hex literal with a full 13-digit mantissa (0.0 as 0x0p+0)."""
    if x == 0:
        return "-0x0p+0" if struct.pack(">d", x)[0] & 0x80 else "0x0p+0"
    return float(x).hex()


def print_c(consts: dict) -> str:
    lines = []
    for name, v in consts.items():
        if name.startswith("_"):
            continue
        if name == "TRIG_TWO_OVER_PI":
            body = ",\n    ".join(
                ", ".join(f"0x{w:08X}u" for w in v[i : i + 6]) for i in range(0, len(v), 6)
            )
            lines.append(f"static const uint32_t {name}[{len(v)}] = {{\n    {body}\n}};")
        elif isinstance(v, list) and v and isinstance(v[0], list):
            rows = ",\n".join(
                "    {" + ", ".join(hexd(c) for c in row) + "}" for row in v
            )
            lines.append(f"static const double {name}[{len(v)}][{len(v[0])}] = {{\n{rows}\n}};")
        elif isinstance(v, list):
            body = ",\n    ".join(hexd(c) for c in v)
            lines.append(f"static const double {name}[{len(v)}] = {{\n    {body}\n}};")
        else:
            lines.append(f"static const double {name} = {hexd(v)};")
    return "\n".join(lines)


def print_py(consts: dict) -> str:
    lines = []
    for name, v in consts.items():
        if name.startswith("_"):
            continue
        if name == "TRIG_TWO_OVER_PI":
            body = ",\n    ".join(
                ", ".join(f"0x{w:08X}" for w in v[i : i + 6]) for i in range(0, len(v), 6)
            )
            lines.append(f"{name} = np.array([\n    {body},\n], dtype=np.uint64)")
        elif isinstance(v, list) and v and isinstance(v[0], list):
            rows = "\n".join(
                "    [" + ", ".join(f'"{hexd(c)}"' for c in row) + "]," for row in v
            )
            lines.append(f"{name} = _hex_table([\n{rows}\n])")
        elif isinstance(v, list):
            body = "\n".join(f'    "{hexd(c)}",' for c in v)
            lines.append(f"{name} = _hex_table([\n{body}\n])")
        else:
            lines.append(f'{name} = _H("{hexd(v)}")')
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", action="store_true", help="print the fit errors only")
    args = ap.parse_args()
    consts = derive()
    for what, err in consts["_err"].items():
        bits = mpmath.log(err, 2) if err else float("-inf")
        print(f"// {what}: {err:.3e} (2^{float(bits):.1f})")
    for name in ("EXP_LN2_32_HI", "LOG_LN2_HI", "TRIG_PIO2_1", "TRIG_PIO2_2", "TRIG_PIO2_3"):
        print(f"// {name}: {significant_bits(consts[name])} significant bits")
    if args.report:
        return
    print("/* ---- C ---- */")
    print(print_c(consts))
    print("# ---- Python ----")
    print(print_py(consts))


if __name__ == "__main__":
    main()
