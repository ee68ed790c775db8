"""Bit comparison, red zones and mismatch reports: the one way exactc compares.

Two results are equal when their bit patterns are equal, with one exception fixed by
docs/semantics.md: the payload and sign of an f64 or f32 NaN are not specified, so any
NaN equals any NaN there. bf16 and int32 results are compared on every bit.

Buffers handed to C sit between red zones and start filled with a *poison* pattern: a
signalling NaN with a payload no computation produces (arithmetic quiets NaNs), so an
output element that is never written, or a red zone element that is written, shows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from exactc.exporter.types import BF16, SITE_TYPES, bits, c_site_type, numpy_dtype

RED_ZONE = 64  # elements on each side of every buffer

# Poison bit patterns per element width: signalling NaNs with a distinctive payload.
POISON = {
    8: np.uint64(0x7FF4A5A5A5A5A5A5),
    4: np.uint32(0x7FA5A5A5),
    2: np.uint16(0x7FA5),
}
# A C buffer's element type -> its numpy dtype: the site types' own, and int32.
_C_DTYPES = {c_site_type(site): numpy_dtype(site) for site in SITE_TYPES} | {"int32_t": np.dtype(np.int32)}


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


def hexval(value) -> str:
    """A value as its raw bits and, for floats, its float.hex: '0x3f800000 (0x1.0p+0)'."""
    array = np.asarray(value)
    if array.dtype.kind == "i":
        return f"{int(array)} (0x{int(array) & 0xFFFFFFFF:08x})"
    raw = int(bits(array.reshape(1))[0])
    width = array.dtype.itemsize * 2
    with np.errstate(invalid="ignore"):
        as_f64 = float(np.asarray(array, dtype=np.float64))
    return f"0x{raw:0{width}x} ({as_f64.hex() if np.isfinite(as_f64) else as_f64})"


def bit_equal_mask(expected: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """Elementwise equality by the semantics' rule (any NaN equals any NaN in f64/f32)."""
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        raise ValueError(
            f"cannot compare {expected.dtype}{expected.shape} with {actual.dtype}{actual.shape}"
        )
    if expected.dtype.kind == "i":
        return expected == actual
    if expected.dtype == BF16:
        return bits(expected) == bits(actual)
    both_nan = np.isnan(expected) & np.isnan(actual)
    return (bits(expected) == bits(actual)) | both_nan


@dataclasses.dataclass
class Mismatch:
    """The first differing element of an output and how many differ."""

    output: str
    index: tuple[int, ...]
    expected: str
    actual: str
    count: int
    size: int

    def __str__(self) -> str:
        return (
            f"output {self.output}: {self.count} of {self.size} elements differ; first at "
            f"index {self.index}: reference {self.expected}, C {self.actual}"
        )


def first_mismatch(name: str, expected: np.ndarray, actual: np.ndarray) -> Mismatch | None:
    equal = bit_equal_mask(expected, actual)
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
    )


def hex_dump(array: np.ndarray, limit: int = 64) -> str:
    """The first `limit` elements of an array in hex, for a reproduction."""
    flat = array.reshape(-1)
    shown = ", ".join(hexval(v).split(" ")[0] for v in flat[:limit])
    more = f", ... ({flat.size - limit} more)" if flat.size > limit else ""
    return f"{array.dtype}{tuple(array.shape)} [{shown}{more}]"
