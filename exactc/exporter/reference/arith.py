"""The notation of docs/semantics.md section 1, as numpy operations.

Every arithmetic step of the reference is a numpy elementwise operation on arrays of the
accumulator dtype `A`: one IEEE operation rounded to nearest even in `A` per element, the
spec's ⊕ ⊖ ⊗ ⊘ (and `np.sqrt`, the spec's √). What numpy must never be allowed to do is
promote: a float64 scalar next to a float32 array makes the operation f64 and rounds
twice. So constants are built here, typed in `A`, and `store` refuses any array whose
dtype is not `A`, which catches a promotion before it can change a bit.

| spec        | here                          |
|-------------|-------------------------------|
| `W(v)`      | `widen(v, site)`              |
| `S(a)`      | `store(a, site)`              |
| `R_A(c)`    | `real(c, site)`               |
| `T(f, a)`   | `transcendental(f, a, site)`  |
| `+0`, `-∞`  | `zeros(shape, site)`, `full(shape, -inf, site)` |
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from exactc.exporter import types
from exactc.runtime import libm_twin

# The quiet NaN of each site type, as bits: what an embedding id out of range yields.
QUIET_NAN_BITS = {"f64": 0x7FF8000000000000, "f32": 0x7FC00000, "bf16": types.BF16_CANONICAL_NAN}


def acc_dtype(site: str) -> np.dtype:
    return types.acc_dtype(site)


def widen(values: np.ndarray, site: str) -> np.ndarray:
    """W: site values to the accumulator type; exact."""
    out = types.widen(values, site)
    _expect_acc(out, site, "widen")
    return out


def store(values: np.ndarray, site: str) -> np.ndarray:
    """S: accumulator values to the site type (one rounding to bf16, NaN -> 0x7FC0)."""
    _expect_acc(values, site, "store")
    return np.asarray(types.store(values, site))


def real(constant: float, site: str) -> np.generic:
    """R_A: a real constant rounded to f64, then to f32 when A is f32; a typed scalar."""
    scalar = types.round_to_acc(constant, site)[()]
    _expect_acc(scalar, site, "real")
    return scalar


def zeros(shape, site: str) -> np.ndarray:
    """An accumulator array of +0."""
    return np.zeros(shape, dtype=acc_dtype(site))


def full(shape, value: float, site: str) -> np.ndarray:
    """An accumulator array filled with `value`, a value exact in A (±∞, ±0, 1)."""
    return np.full(shape, value, dtype=acc_dtype(site))


def libm(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """exactc's own f64 function `name` (exp, log, tanh, erf, sin, cos)."""
    return getattr(libm_twin, name)


def libm64(name: str, values: np.ndarray) -> np.ndarray:
    """exactc's own f64 function applied to f64 values; used where the spec computes in f64."""
    values = np.asarray(values)
    if values.dtype != np.float64:
        raise TypeError(f"libm64({name}): values have dtype {values.dtype}; they must be float64")
    flat = np.ascontiguousarray(values).reshape(-1)
    out = np.asarray(libm(name)(flat))
    if out.dtype != np.float64 or out.shape != flat.shape:
        raise TypeError(
            f"libm_twin.{name} returned {out.dtype} {out.shape} for float64 {flat.shape}; "
            "it must return float64 of the same shape"
        )
    return out.reshape(values.shape)


def transcendental(name: str, values: np.ndarray, site: str) -> np.ndarray:
    """T(f, a): f in f64 at `a` widened to f64 (exact), the result rounded to A."""
    _expect_acc(values, site, f"transcendental({name})")
    return libm64(name, values.astype(np.float64)).astype(acc_dtype(site))


def quiet_nan_bits(site: str) -> int:
    return QUIET_NAN_BITS[types.check_site(site)]


def _expect_acc(values, site: str, where: str) -> None:
    dtype = np.asarray(values).dtype
    if dtype != acc_dtype(site):
        raise TypeError(
            f"{where} at {site}: got {dtype}, the accumulator type is {acc_dtype(site)}; "
            "an operand was promoted (a float64 constant next to a float32 array?)"
        )
