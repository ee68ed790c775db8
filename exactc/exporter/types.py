"""Site types and the conversions between them (docs/semantics.md, "Types").

A site is a place in the graph that holds values: an input, a weight, an output. Its type
is f64, f32 or bf16. Arithmetic runs in the site's accumulator type (f64 -> f64,
f32 and bf16 -> f32) and rounds to the site type when a value is stored.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

import numpy as np

SITE_TYPES = ("f64", "f32", "bf16")

BF16_CANONICAL_NAN = 0x7FC0


@functools.cache
def bf16_dtype() -> np.dtype:
    """bf16's numpy dtype, ml_dtypes' bfloat16: imported on first use, not with this module,
    because importing ml_dtypes takes most of a second and most commands never use bf16."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def __getattr__(name: str) -> np.dtype:
    """`types.BF16` (and `from exactc.exporter.types import BF16`) is bf16_dtype(), made on
    first use (PEP 562)."""
    if name == "BF16":
        return bf16_dtype()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_bf16(dtype: np.dtype) -> bool:
    """Whether `dtype` is bf16, without importing ml_dtypes: before it is imported, no
    array can have its type."""
    return "ml_dtypes" in sys.modules and dtype == bf16_dtype()


@dataclasses.dataclass(frozen=True)
class Storage:
    """How values of one element type are held: in numpy, in C, in the files a program
    reads and writes. The one table of these spellings (STORAGE)."""

    name: str  # f64, f32, bf16 (the site types), i32 (token ids, masks), i8 and u8 (quantized weights)
    c: str  # the C element type of buffers and parameters
    itemsize: int  # bytes per element, in memory and in weights.safetensors
    safetensors: str  # the dtype tag in weights.safetensors
    npy: str  # the descr in a program's .npy inputs and outputs (bf16 travels widened to f32)

    @property
    def numpy(self) -> np.dtype:
        """In memory, the reference's arrays (bf16's: ml_dtypes', imported here on first use)."""
        return bf16_dtype() if self.name == "bf16" else _NUMPY[self.name]


_NUMPY = {
    "f64": np.dtype(np.float64),
    "f32": np.dtype(np.float32),
    "i32": np.dtype(np.int32),
    "i8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
}


STORAGE = {
    "f64": Storage("f64", "double", 8, "F64", "<f8"),
    "f32": Storage("f32", "float", 4, "F32", "<f4"),
    "bf16": Storage("bf16", "exactc_bf16", 2, "BF16", "<f4"),
    "i32": Storage("i32", "int32_t", 4, "I32", "<i4"),
    "i8": Storage("i8", "int8_t", 1, "I8", "|i1"),  # q8 values
    "u8": Storage("u8", "uint8_t", 1, "U8", "|u1"),  # q4 bytes, two values each
}
# The kinds of values whatever the site type: "f32" among them is a weight scale's.
FIXED_KINDS = ("i32", "i8", "u8", "f32")

_ACC = {"f64": np.dtype(np.float64), "f32": np.dtype(np.float32), "bf16": np.dtype(np.float32)}
_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_C_ACC = {"f64": "double", "f32": "float", "bf16": "float"}


class SiteTypeError(ValueError):
    """An unknown site type; the message lists the known ones."""


def check_site(site: str) -> str:
    if site not in SITE_TYPES:
        raise SiteTypeError(f"unknown site type {site!r}; exactc knows {', '.join(SITE_TYPES)}")
    return site


def storage(kind: str) -> Storage:
    """The spellings of a site type or of a fixed kind (STORAGE)."""
    if kind in FIXED_KINDS:
        return STORAGE[kind]
    return STORAGE[check_site(kind)]


def numpy_dtype(site: str) -> np.dtype:
    """The numpy dtype that holds values of `site`."""
    return STORAGE[check_site(site)].numpy


def acc_dtype(site: str) -> np.dtype:
    """The accumulator type of `site`: f64 for f64, f32 for f32 and bf16."""
    return _ACC[check_site(site)]


def c_site_type(site: str) -> str:
    return STORAGE[check_site(site)].c


def c_acc_type(site: str) -> str:
    return _C_ACC[check_site(site)]


# Operand kinds of the primitive catalogue (exporter/primitives.py) and of values: "x" (the
# site type), "acc" (the accumulator type), or one of FIXED_KINDS (STORAGE's spellings).


def kind_storage(kind: str, site: str) -> Storage:
    """The spellings of a value or operand of `kind` at `site`."""
    if kind == "x":
        return STORAGE[check_site(site)]
    if kind == "acc":
        return STORAGE["f64" if check_site(site) == "f64" else "f32"]
    return STORAGE[kind]


def kind_dtype(kind: str, site: str) -> np.dtype:
    """The numpy dtype of an operand of `kind` at `site`."""
    return kind_storage(kind, site).numpy


def kind_ctype(kind: str, site: str) -> str:
    """The C element type of an operand of `kind` at `site`."""
    return kind_storage(kind, site).c


def bits(array: np.ndarray) -> np.ndarray:
    """The raw bit patterns of a floating array, as unsigned integers of its width."""
    array = np.ascontiguousarray(array)
    return array.view(_BITS[array.dtype.itemsize])


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round f32 to bf16, nearest even; every NaN becomes the canonical quiet NaN."""
    values = np.asarray(values, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        out = values.astype(bf16_dtype())
    nan = np.isnan(values)
    if nan.any():
        out_bits = out.view(np.uint16)
        out_bits[nan] = BF16_CANONICAL_NAN
    return out


def round_to_site(values, site: str) -> np.ndarray:
    """Round reals to `site`: reals -> f64 -> f32 -> bf16, nearest even at each step."""
    as_f64 = np.asarray(values, dtype=np.float64)
    if site == "f64":
        return as_f64.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        as_f32 = as_f64.astype(np.float32)
    if site == "f32":
        return as_f32
    check_site(site)
    return f32_to_bf16(as_f32)


def round_to_acc(values, site: str) -> np.ndarray:
    """Round reals (a constant such as eps or a scale) to the accumulator type."""
    return round_to_site(values, "f64" if site == "f64" else "f32")


def widen(values: np.ndarray, site: str) -> np.ndarray:
    """Site values to the accumulator type; exact."""
    return np.asarray(values).astype(acc_dtype(site))


def store(values: np.ndarray, site: str) -> np.ndarray:
    """Accumulator values to the site type: identity for f64 and f32, one rounding to bf16."""
    if site == "bf16":
        return f32_to_bf16(values)
    return np.asarray(values, dtype=acc_dtype(site))
