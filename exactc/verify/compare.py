"""Bit comparison, red zones and mismatch reports: the one way exactc compares.

Two results are equal when their bit patterns are equal, with one exception fixed by
docs/semantics.md: the payload and sign of an f64 or f32 NaN are not specified, so any
NaN equals any NaN there. bf16 and int32 results are compared on every bit. Every bit
comparison in exactc goes through bit_equal_mask (the kernel harness, the libm checks,
the reference and program tests); exported programs compare with conformance/compare
(runtime/exactc_compare.c), which applies the same rule and is tested against this one.

Buffers handed to C sit between red zones and start filled with a *poison* pattern: a
signalling NaN with a payload no computation produces (arithmetic quiets NaNs), so an
output element that is never written, or a red zone element that is written, shows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from exactc.exporter.types import BF16, STORAGE, bits

RED_ZONE = 64  # elements on each side of every buffer

# Poison bit patterns per element width: signalling NaNs with a distinctive payload.
POISON = {
    8: np.uint64(0x7FF4A5A5A5A5A5A5),
    4: np.uint32(0x7FA5A5A5),
    2: np.uint16(0x7FA5),
}
# A C buffer's element type -> its numpy dtype: the site types' own, int32, int8 and uint8.
_C_DTYPES = {s.c: s.numpy for s in STORAGE.values()}


def numpy_dtype_of_ctype(ctype: str) -> np.dtype:
    return _C_DTYPES[ctype]


@dataclasses.dataclass
class GuardedBuffer:
    """A C buffer between two red zones, filled with poison before use."""

    storage: np.ndarray  # RED_ZONE + size + RED_ZONE elements
    shape: tuple[int, ...]

    @classmethod
    def poisoned(cls, shape, dtype) -> GuardedBuffer:
        dtype = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64))
        storage = np.empty(size + 2 * RED_ZONE, dtype=dtype)
        storage.view(np.dtype(f"u{dtype.itemsize}"))[:] = POISON[dtype.itemsize]
        return cls(storage, tuple(shape))

    @classmethod
    def holding(cls, array: np.ndarray) -> GuardedBuffer:
        buffer = cls.poisoned(array.shape, array.dtype)
        buffer.body.reshape(-1)[:] = np.ascontiguousarray(array).reshape(-1)
        return buffer

    @property
    def body(self) -> np.ndarray:
        return self.storage[RED_ZONE : self.storage.size - RED_ZONE].reshape(self.shape)

    @property
    def address(self) -> int:
        return self.storage.ctypes.data + RED_ZONE * self.storage.itemsize

    def red_zone_damage(self) -> list[int]:
        """Offsets (relative to the first element; negative before it) written in the
        red zones."""
        raw = self.storage.view(np.dtype(f"u{self.storage.itemsize}"))
        poison = POISON[self.storage.itemsize]
        size = self.storage.size - 2 * RED_ZONE
        before = np.flatnonzero(raw[:RED_ZONE] != poison) - RED_ZONE
        after = np.flatnonzero(raw[RED_ZONE + size :] != poison) + size
        return [int(i) for i in np.concatenate([before, after])]

    def unwritten(self) -> np.ndarray:
        """Flat indices of body elements still holding the poison pattern."""
        raw = self.body.reshape(-1).view(np.dtype(f"u{self.storage.itemsize}"))
        return np.flatnonzero(raw == POISON[self.storage.itemsize])


def decimal(value) -> str:
    """A value in decimal with the digits that name it exactly: 17 significant digits
    for f64, 9 for f32 and bf16 (C's %.17g and %.9g, as conformance/compare prints)."""
    array = np.asarray(value)
    if array.dtype.kind in "iu":
        return str(int(array))
    with np.errstate(invalid="ignore"):
        as_f64 = float(np.asarray(array, dtype=np.float64))
    return format(as_f64, ".17g" if array.dtype == np.float64 else ".9g")


def hexval(value) -> str:
    """A value as its raw bits and in decimal: '0x3f8ccccd (1.10000002)'."""
    array = np.asarray(value)
    raw = int(bits(array.reshape(1))[0]) if array.dtype.kind == "f" or array.dtype == BF16 else int(array)
    width = array.dtype.itemsize * 2
    return f"0x{raw & ((1 << (4 * width)) - 1):0{width}x} ({decimal(array)})"


def bit_equal_mask(expected: np.ndarray, actual: np.ndarray, site: str | None = None,
                   every_bit: bool = False) -> np.ndarray:
    """Elementwise equality by docs/semantics.md's rule: equal bit patterns, except that
    any f64 or f32 NaN equals any other; bf16 and integers on every bit. `site` names
    the site type when the arrays hold another's values: a bf16 site's values travel
    widened to f32 in .npy files, and are still compared on every bit. `every_bit`
    drops the NaN exception, for copies (views, gathers, readers and writers of files),
    which must keep a NaN's payload."""
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        raise ValueError(
            f"cannot compare {expected.dtype}{expected.shape} with {actual.dtype}{actual.shape}"
        )
    if expected.dtype.kind in "iu":
        return expected == actual
    same = bits(expected) == bits(actual)
    if every_bit or expected.dtype == BF16 or site == "bf16":
        return same
    return same | (np.isnan(expected) & np.isnan(actual))


@dataclasses.dataclass
class Mismatch:
    """The first differing element of an output and how many differ."""

    output: str
    index: tuple[int, ...]
    expected: str
    actual: str
    count: int
    size: int
    labels: tuple[str, str] = ("reference", "C")  # who computed `expected` and `actual`

    def __str__(self) -> str:
        return (
            f"output {self.output}: {self.count} of {self.size} elements differ; first at "
            f"index {self.index}: {self.labels[0]} {self.expected}, {self.labels[1]} {self.actual}"
        )


def first_mismatch(name: str, expected: np.ndarray, actual: np.ndarray, site: str | None = None,
                   labels: tuple[str, str] = ("reference", "C"), every_bit: bool = False) -> Mismatch | None:
    """The first element (in C order) where `actual` differs from `expected` by the rule
    of bit_equal_mask, with the count of differing elements; None when none differs."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    equal = bit_equal_mask(expected, actual, site, every_bit)
    if equal.all():
        return None
    flat = int(np.flatnonzero(~equal.reshape(-1))[0])
    index = tuple(int(i) for i in np.unravel_index(flat, expected.shape))
    return Mismatch(
        name,
        index,
        hexval(expected[index]),
        hexval(actual[index]),
        int((~equal).sum()),
        int(expected.size),
        labels,
    )


def assert_bits_equal(expected: np.ndarray, actual: np.ndarray, what: str = "values", site: str | None = None,
                      labels: tuple[str, str] = ("expected", "got"), every_bit: bool = False) -> None:
    """Fail, naming the first differing index, both values in hex and the count, unless
    `actual` equals `expected` by the rule of bit_equal_mask (types and shapes first)."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if (expected.dtype, expected.shape) != (actual.dtype, actual.shape):
        raise AssertionError(f"{what}: {labels[0]} {expected.dtype}{expected.shape}, "
                             f"{labels[1]} {actual.dtype}{actual.shape}")
    mismatch = first_mismatch(what, expected, actual, site, labels, every_bit)
    if mismatch is not None:
        raise AssertionError(str(mismatch))


def hex_dump(array: np.ndarray, limit: int = 64) -> str:
    """The first `limit` elements of an array in hex, for a reproduction."""
    flat = array.reshape(-1)
    shown = ", ".join(hexval(v).split(" ")[0] for v in flat[:limit])
    more = f", ... ({flat.size - limit} more)" if flat.size > limit else ""
    return f"{array.dtype}{tuple(array.shape)} [{shown}{more}]"
