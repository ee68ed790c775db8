"""Dimensions that follow the run-time sequence length.

An exported program reads its sequence length T from its input's shape when it runs,
1 <= T <= T_max, where T_max is the config's `tokens` (docs/programs.md). Every dimension
or size that depends on T is a `Dim`: a polynomial in T with integer coefficients
(`T`, `T - 1`, `3 * T`, and sizes such as `4 * T * T` for attention's scores), which
knows its bound T_max (`top`). Everything else stays a plain int, so a program's static
extents print and compile exactly as before.

    T = dims.length(16)          # the symbol, 1 <= T <= 16
    T - 1, 3 * T, T * T          # Dims: T - 1, 3 * T, T * T
    (T * 4) // 2                 # 2 * T (a division must be exact)
    dims.at(T * T, 5)            # 25: its value when the program runs at T = 5
    dims.upper(3 * T)            # 48: its value at T_max, what buffers are sized for
    dims.le(T, 16)               # True: holds for every T in [1, 16]

A Dim is never an int: code that must choose between the run-time value and the bound
says which (`at`, `upper`), so that no loop is bounded by T_max by accident. A constant
result of arithmetic on Dims is a plain int again. Comparisons are not operators: `le`,
`lt` and `positive` hold when they hold for every T in [1, T_max] (exact for the
polynomials of degree at most 2 that shapes and sizes are made of).

A decode step with a key/value cache (one new token at a run-time position) would add a
second symbol, the position; `Dim` would then be a polynomial over named symbols. Nothing
here depends on there being one symbol but `SYMBOL` and `length`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Union

SYMBOL = "T"  # the name of the run-time length in the IR's indices and in the printed C


class DimError(ValueError):
    """Arithmetic or a comparison a Dim cannot do: the message names both sides."""


Extent = Union[int, "Dim"]


@dataclasses.dataclass(frozen=True)
class Dim:
    """sum(coefs[k] * T**k) for 1 <= T <= top; at least one coefficient past coefs[0] is
    non-zero (a constant is an int), and the last one is non-zero."""

    coefs: tuple[int, ...]
    top: int

    def __post_init__(self) -> None:
        if not isinstance(self.top, int) or isinstance(self.top, bool) or self.top < 1:
            raise DimError(f"a run-time length is bounded by an int >= 1, not {self.top!r}")
        if len(self.coefs) < 2 or self.coefs[-1] == 0:
            raise DimError(f"Dim coefficients {self.coefs} must end with a non-zero one past the constant")

    # ---- values ----------------------------------------------------------------------

    @property
    def degree(self) -> int:
        return len(self.coefs) - 1

    def at(self, length: int) -> int:
        """The value when the program runs at length `length`."""
        return sum(c * length**k for k, c in enumerate(self.coefs))

    @property
    def upper(self) -> int:
        """The value at T_max: what a buffer of this size is allocated for."""
        return self.at(self.top)

    # ---- arithmetic ------------------------------------------------------------------

    def _coefs_of(self, other: Any) -> tuple[int, ...] | None:
        if isinstance(other, Dim):
            if other.top != self.top:
                raise DimError(f"{self} (T <= {self.top}) and {other} (T <= {other.top}) follow different lengths")
            return other.coefs
        if isinstance(other, int) and not isinstance(other, bool):
            return (other,)
        return None

    def __add__(self, other: Any) -> Extent:
        theirs = self._coefs_of(other)
        if theirs is None:
            return NotImplemented
        width = max(len(self.coefs), len(theirs))
        pad = lambda c: c + (0,) * (width - len(c))  # noqa: E731
        return make(tuple(a + b for a, b in zip(pad(self.coefs), pad(theirs))), self.top)

    __radd__ = __add__

    def __neg__(self) -> Extent:
        return make(tuple(-c for c in self.coefs), self.top)

    def __sub__(self, other: Any) -> Extent:
        if self._coefs_of(other) is None:
            return NotImplemented
        return self + (-other)

    def __rsub__(self, other: Any) -> Extent:
        if self._coefs_of(other) is None:
            return NotImplemented
        return (-self) + other

    def __mul__(self, other: Any) -> Extent:
        theirs = self._coefs_of(other)
        if theirs is None:
            return NotImplemented
        out = [0] * (len(self.coefs) + len(theirs) - 1)
        for i, a in enumerate(self.coefs):
            for j, b in enumerate(theirs):
                out[i + j] += a * b
        return make(tuple(out), self.top)

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> Extent:
        if not isinstance(other, int) or isinstance(other, bool) or other == 0:
            return NotImplemented
        if any(c % other for c in self.coefs):
            raise DimError(f"{self} is not a multiple of {other} for every length T")
        return make(tuple(c // other for c in self.coefs), self.top)

    # ---- text ------------------------------------------------------------------------

    def text(self) -> str:
        """The C (and IR) spelling: `T`, `T - 1`, `3 * T`, `4 * T * T + 2 * T`."""
        parts: list[str] = []
        for k in range(len(self.coefs) - 1, -1, -1):
            c = self.coefs[k]
            if c == 0:
                continue
            factors = ([str(abs(c))] if abs(c) != 1 or k == 0 else []) + [SYMBOL] * k
            parts.append(("- " if c < 0 else "+ ") + " * ".join(factors))
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__


def make(coefs: tuple[int, ...], top: int) -> Extent:
    """The polynomial with these coefficients: an int when it is a constant."""
    coefs = tuple(coefs)
    while len(coefs) > 1 and coefs[-1] == 0:
        coefs = coefs[:-1]
    if len(coefs) == 1:
        return coefs[0]
    return Dim(coefs, top)


def length(top: int) -> Dim:
    """The run-time length itself: T, for 1 <= T <= top."""
    return Dim((0, 1), top)


# ---- taking values -------------------------------------------------------------------------


def is_symbolic(value: Any) -> bool:
    return isinstance(value, Dim)


def at(value: Extent, length: int) -> int:
    """An extent's value at run-time length `length` (an int is itself)."""
    return value.at(length) if isinstance(value, Dim) else value


def upper(value: Extent) -> int:
    """An extent's value at T_max (an int is itself): what storage is sized for."""
    return value.upper if isinstance(value, Dim) else value


def shape_at(shape: Iterable[Extent], length: int) -> tuple[int, ...]:
    return tuple(at(d, length) for d in shape)


def shape_upper(shape: Iterable[Extent]) -> tuple[int, ...]:
    return tuple(upper(d) for d in shape)


def top_of(*values: Any) -> int | None:
    """T_max of the Dims found in `values` (nested tuples, lists, dicts); None when there
    is none. Two different bounds are an error."""
    tops: set[int] = set()

    def visit(value: Any) -> None:
        if isinstance(value, Dim):
            tops.add(value.top)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (tuple, list)):
            for item in value:
                visit(item)

    for value in values:
        visit(value)
    if len(tops) > 1:
        raise DimError(f"values follow run-time lengths of different bounds {sorted(tops)}")
    return tops.pop() if tops else None


def substitute(value: Any, length: int) -> Any:
    """`value` (an attribute, a shape, nested tuples) with every Dim taken at `length`."""
    if isinstance(value, Dim):
        return value.at(length)
    if isinstance(value, tuple):
        return tuple(substitute(v, length) for v in value)
    if isinstance(value, list):
        return [substitute(v, length) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, length) for k, v in value.items()}
    return value


# ---- comparisons that hold for every length ---------------------------------------------------


def minimum(value: Extent) -> int:
    """The least value of `value` over T in [1, T_max]."""
    if not isinstance(value, Dim):
        return value
    if value.degree > 2:
        raise DimError(f"{value}: exactc compares polynomials of degree at most 2 in T")
    points = {1, value.top}
    if value.degree == 2:  # a parabola's minimum may lie between the ends
        a, b = value.coefs[2], value.coefs[1]
        vertex = -b / (2 * a)
        points |= {p for p in (int(vertex), int(vertex) + 1) if 1 <= p <= value.top}
    return min(value.at(p) for p in points)


def le(a: Extent, b: Extent) -> bool:
    """a <= b for every run-time length."""
    return minimum(b - a) >= 0


def lt(a: Extent, b: Extent) -> bool:
    """a < b for every run-time length."""
    return minimum(b - a) >= 1


def positive(a: Extent) -> bool:
    """a >= 1 for every run-time length."""
    return minimum(a) >= 1


def is_extent(value: Any) -> bool:
    """An int (not a bool) or a Dim: what a dimension may be."""
    return isinstance(value, Dim) or (isinstance(value, int) and not isinstance(value, bool))


def c_text(value: Extent) -> str:
    """An extent in C: `16`, `T`, `3 * T`."""
    return str(value)


def c_factor(value: Extent) -> str:
    """An extent as a factor of a C product: `T - 1` parenthesized."""
    text = str(value)
    return f"({text})" if isinstance(value, Dim) and (" + " in text or " - " in text) else text
