"""Strategies for quantized operands (docs/semantics.md, section 15).

A quantized tensor is drawn as small specs, each a seed and a few pattern names, that
make its arrays again on demand: the values (q8 int8, or q4 bytes), the scales, and the
real blocks the quantizer is given. Patterns are chosen per block, cycling through the
drawn ones, so that one case holds, say, a block of zeros next to a block at the limit.

Edge cases favoured: blocks that are all zero (of both signs), hold one non-zero, sit
every value at a limit (±127, -128 read from a file, -8 and 7), mix signs; real blocks
whose quotients are exact ties (x/d = n + 1/2), whose largest magnitude lands on ±127,
whose scale is subnormal or underflows to zero, that are huge, or that hold NaN or ±inf;
scales subnormal, huge, zero, negative (and NaN for activations); K that is and is not a
multiple of the block; q4 rows whose byte count is odd; q4 padding nibbles that hold
garbage (no kernel may read them).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

from exactc.exporter import quant, types
from exactc.exporter.primitives import K_FORMATS, K_SUPER_BLOCK, block_count, quantized_row_length, scale_columns
from exactc.strategies.tensors import dims, tensor_specs

# Block sizes favoured: ggml's 32, runq.c's 64, small and odd ones, and G/2 odd for q4
# (rows of an odd byte count); per channel (G = K) is drawn apart.
Q8_BLOCKS = (1, 2, 3, 4, 5, 7, 8, 16, 32, 33, 64)
Q4_BLOCKS = (2, 4, 6, 8, 10, 16, 18, 32, 34, 64)

VALUE_PATTERNS = ("random", "zero", "one", "limit", "max", "min", "mixed")
SCALE_PATTERNS = ("normal", "one", "power", "subnormal", "huge", "zero", "negative")
REAL_PATTERNS = ("random", "integers", "zero", "signed-zeros", "one", "limit", "ties", "subnormal",
                 "huge", "nonfinite", "wide")

_SMALLEST_SUBNORMAL = {"f64": 2.0**-1074, "f32": 2.0**-149, "bf16": 2.0**-133}
_LARGEST = {"f64": float(np.finfo(np.float64).max), "f32": float(np.finfo(np.float32).max),
            "bf16": 3.3895313892515355e38}


def _cycle(patterns: tuple[str, ...], count: int) -> list[str]:
    return [patterns[i % len(patterns)] for i in range(count)]


# ---- values ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ValueSpec:
    """The stored values of a quantized tensor of `rows` rows of `k` values: int8 (rows,
    k) for q8, uint8 bytes (rows, nb·G/2) for q4 (packed by exporter.quant.pack_q4)."""

    rows: int
    k: int
    fmt: str
    block: int
    seed: int
    patterns: tuple[str, ...]
    garbage_padding: bool = False  # q4: random nibbles where a short last block ends

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, quantized_row_length(self.fmt, self.k, self.block))

    def make(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        nb = block_count(self.k, self.block)
        low, high = (-127, 127) if self.fmt == "q8" else (quant.Q4_LOW, quant.Q4_HIGH)
        bottom = -128 if self.fmt == "q8" else low  # -128: a file may hold it
        values = np.zeros((self.rows, nb, self.block), dtype=np.int16)
        for index, pattern in enumerate(_cycle(self.patterns, self.rows * nb)):
            row, blk = divmod(index, nb)
            out = values[row, blk]
            if pattern == "random":
                out[:] = rng.integers(low, high + 1, self.block)
            elif pattern == "one":
                out[rng.integers(self.block)] = rng.choice([bottom, low, high, 1, -1])
            elif pattern == "limit":
                out[:] = rng.choice([low, high], self.block)
            elif pattern == "max":
                out[:] = high
            elif pattern == "min":
                out[:] = bottom
            elif pattern == "mixed":
                out[:] = np.where(np.arange(self.block) % 2, 1, -1) * rng.integers(1, high + 1, self.block)
        flat = values.reshape(self.rows, nb * self.block)
        if self.fmt == "q8":
            return flat[:, : self.k].astype(np.int8)
        nibbles = (values + quant.Q4_OFFSET).astype(np.uint8)
        padding = nibbles.reshape(self.rows, -1)[:, self.k :]
        padding[:] = rng.integers(0, 16, padding.shape) if self.garbage_padding else quant.Q4_OFFSET
        return quant.pack_q4(nibbles)


@st.composite
def value_specs(draw, rows: int, k: int, fmt: str, block: int) -> ValueSpec:
    """Values of a quantized tensor: 1 to 4 block patterns, cycled over the blocks."""
    patterns = tuple(draw(st.lists(st.sampled_from(VALUE_PATTERNS), min_size=1, max_size=4)))
    garbage = fmt == "q4" and k % block != 0 and draw(st.booleans())
    return ValueSpec(rows, k, fmt, block, draw(st.integers(0, 2**32 - 1)), patterns, garbage)


# ---- scales ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ScaleSpec:
    """Scales of shape (rows, nb) in f32 (weights) or the accumulator type (activations),
    each element of a drawn pattern, cycled."""

    shape: tuple[int, int]
    dtype: str  # "f32" or "f64"
    seed: int
    patterns: tuple[str, ...]

    def make(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        tiny = _SMALLEST_SUBNORMAL[self.dtype]
        size = int(np.prod(self.shape))
        values = np.empty(size)
        for i, pattern in enumerate(_cycle(self.patterns, size)):
            if pattern in ("normal", "negative"):
                value = abs(rng.standard_normal()) * (0.05 if pattern == "normal" else -0.05)
            elif pattern == "power":
                value = 2.0 ** int(rng.integers(-20, 4))
            elif pattern == "subnormal":
                value = tiny * int(rng.integers(1, 1 << 20)) * rng.choice([-1.0, 1.0])
            elif pattern == "huge":
                value = _LARGEST[self.dtype] / rng.uniform(128.0, 4e4) * rng.choice([-1.0, 1.0])
            else:
                value = {"one": 1.0, "zero": 0.0, "nan": np.nan}[pattern]
            values[i] = value
        return types.round_to_site(values.reshape(self.shape), self.dtype)


@st.composite
def scale_specs(draw, shape: tuple[int, int], dtype: str, nan: bool = False) -> ScaleSpec:
    """Scales: normal ones mostly, and subnormal, huge, zero, negative (NaN for
    activations, whose non-finite blocks have it)."""
    choices = SCALE_PATTERNS + (("nan",) if nan else ())
    patterns = tuple(draw(st.lists(st.sampled_from(choices), min_size=1, max_size=3)))
    return ScaleSpec(tuple(shape), dtype, draw(st.integers(0, 2**32 - 1)), patterns)


# ---- real blocks for the quantizer -------------------------------------------------------------


def _representable(value: Fraction, site: str) -> float | None:
    """`value` as a float if it is exactly a value of `site`, else None."""
    f = float(value)
    if Fraction(f) != value or not np.isfinite(f):
        return None
    return f if float(types.round_to_site(f, site)) == f else None


def _tie_block(rng, site: str, length: int) -> np.ndarray:
    """A block whose largest magnitude is amax and whose other values are exact ties of
    the quantizer: x = (n + 1/2)·d with d = amax ⊘ 127 computed in A, so x ⊘ d = n + 1/2."""
    acc = types.acc_dtype(site).type
    if site == "bf16":  # d = 2^e exactly: amax = 127·2^e has 7 bits, and so has every tie
        amax = 127.0 * 2.0 ** int(rng.integers(-30, 30))
    else:
        amax = float(types.round_to_site(rng.uniform(0.5, 2.0) * 2.0 ** int(rng.integers(-30, 30)), site))
    d = Fraction(float(acc(amax) / acc(127)))
    ties = [t for n in range(127) if (t := _representable(d * (2 * n + 1) / 2, site)) is not None]
    block = rng.choice(ties, length) * rng.choice([-1.0, 1.0], length)
    block[rng.integers(length)] = amax * rng.choice([-1.0, 1.0])
    return block


def _real_block(rng, pattern: str, site: str, length: int) -> np.ndarray:
    signs = rng.choice([-1.0, 1.0], length)
    tiny, largest = _SMALLEST_SUBNORMAL[site], _LARGEST[site]
    if pattern == "random":
        return rng.standard_normal(length) * rng.choice([1.0, 0.01, 30.0])
    if pattern == "integers":  # amax 127 gives d = 1: halves are ties
        block = rng.integers(-254, 255, length) / 2.0
        block[rng.integers(length)] = 127.0 * rng.choice([-1.0, 1.0])
        return block
    if pattern == "zero":
        return np.zeros(length)
    if pattern == "signed-zeros":
        return signs * 0.0
    if pattern == "one":
        block = signs * 0.0
        block[rng.integers(length)] = rng.choice([1.0, -3.5, tiny, -tiny * 77, largest, -largest / 3])
        return block
    if pattern == "limit":  # every magnitude equal: every value on ±127
        return signs * float(types.round_to_site(abs(rng.standard_normal()) + 0.1, site))
    if pattern == "ties":
        return _tie_block(rng, site, length)
    if pattern == "subnormal":  # d subnormal (a quotient past 127.5 clamps) or zero
        amax = tiny * int(rng.integers(1, 400 if site != "bf16" else 128))
        block = signs * tiny * rng.integers(0, int(amax / tiny) + 1, length)
        block[rng.integers(length)] = amax * rng.choice([-1.0, 1.0])
        return block
    if pattern == "huge":
        block = signs * largest * rng.uniform(0.0, 1.0, length)
        block[rng.integers(length)] = largest * rng.choice([-1.0, 1.0])
        return block
    if pattern == "nonfinite":
        block = rng.standard_normal(length)
        block[rng.integers(length)] = rng.choice([np.nan, np.inf, -np.inf])
        return block
    return signs * 2.0 ** rng.uniform(-40, 40, length)  # "wide"


@dataclasses.dataclass(frozen=True)
class RealBlockSpec:
    """Rows (rows, k) of site values cut into blocks of `block`, each block of a drawn
    pattern (cycled): what `quantize` is given."""

    shape: tuple[int, int]
    site: str
    block: int
    seed: int
    patterns: tuple[str, ...]

    def make(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        rows, k = self.shape
        out = np.zeros((rows, k))
        nb = block_count(k, self.block)
        for index, pattern in enumerate(_cycle(self.patterns, rows * nb)):
            row, blk = divmod(index, nb)
            start = blk * self.block
            length = min(self.block, k - start)
            out[row, start : start + length] = _real_block(rng, pattern, self.site, length)
        with np.errstate(over="ignore"):
            return types.round_to_site(out, self.site)


@st.composite
def real_block_specs(draw, shape: tuple[int, int], site: str, block: int) -> RealBlockSpec:
    patterns = tuple(draw(st.lists(st.sampled_from(REAL_PATTERNS), min_size=1, max_size=4)))
    return RealBlockSpec(tuple(shape), site, block, draw(st.integers(0, 2**32 - 1)), patterns)


# ---- shapes and cases ----------------------------------------------------------------------------


@st.composite
def blocked_lengths(draw, fmt: str, max_blocks: int = 6) -> tuple[int, int]:
    """(K, G): a block size of the format, and K a multiple of it or not (a short last
    block), sometimes one block per row (G = K, per channel)."""
    if draw(st.integers(0, 5)) == 0:  # per channel
        k = draw(dims(160))
        k += k % 2 if fmt == "q4" else 0
        return k, k
    block = draw(st.sampled_from(Q8_BLOCKS if fmt == "q8" else Q4_BLOCKS))
    blocks = draw(st.integers(1, max_blocks))
    short = draw(st.sampled_from([0, 0, 1, block // 2, block - 1])) if block > 1 else 0
    return max(1, blocks * block - short), block


def _work_rows(m: int, n: int, k: int, limit: int = 400_000) -> int:
    """m, shrunk so that a case costs the reference at most `limit` multiply-adds."""
    return max(1, min(m, limit // max(1, n * k)))


@st.composite
def quantize_operands(draw, site: str) -> tuple[dict, dict]:
    """(attrs, specs) of a `quantize` case: rows of real blocks at `site`, a q8 block."""
    k, block = draw(blocked_lengths("q8"))
    m = draw(dims(17))
    return {"block": block}, {"x": draw(real_block_specs((m, k), site, block))}


@st.composite
def qlinear_operands(draw, primitive: str, site: str) -> tuple[dict, dict]:
    """(attrs, specs) of a `qlinear_w` or `qlinear_i` case: q8 or q4 weights with f32
    scales, an optional bias, and x of the site type (weight-only) or q8 activations with
    their scales in A (integer)."""
    fmt = draw(st.sampled_from(["q8", "q4", *K_FORMATS]))
    if fmt in K_FORMATS:
        return draw(k_quant_linear_operands(primitive, site, fmt))
    k, block = draw(blocked_lengths(fmt))
    n = draw(dims(40))
    m = _work_rows(draw(dims(17)), n, k)
    nb = block_count(k, block)
    has_b = draw(st.booleans())
    specs = {}
    if primitive == "qlinear_w":
        specs["x"] = draw(tensor_specs((m, k), site))
    else:
        specs["xq"] = draw(value_specs(m, k, "q8", block))
        specs["xd"] = draw(scale_specs((m, nb), "f64" if site == "f64" else "f32", nan=True))
    specs["wq"] = draw(value_specs(n, k, fmt, block))
    specs["wd"] = draw(scale_specs((n, nb), "f32"))
    if has_b:
        specs["b"] = draw(tensor_specs((n,), site))
    return {"fmt": fmt, "block": block, "has_b": has_b}, specs


@st.composite
def stacked_q4(draw) -> tuple[int, int, int, int, int]:
    """(layers, rows, k, block, seed) of a stacked q4 parameter: blocks with an odd
    number of bytes and short last blocks favoured."""
    k, block = draw(blocked_lengths("q4", max_blocks=5))
    return draw(st.integers(1, 5)), draw(st.integers(1, 7)), k, block, draw(st.integers(0, 2**32 - 1))


# ---- ggml's k-quants: rows of super-blocks as a file holds them ----------------------------

K_BYTE_PATTERNS = ("random", "zeros", "ones")  # ones: every scale and min 63, every nibble 15


F16_FINITE_MAGNITUDES = 0x7BFF  # the bits of 65504, the largest finite f16; above: ±inf, NaN


def _f16_bytes(signs_and_magnitudes: list[tuple[bool, int]]) -> np.ndarray:
    bits = np.array([(0x8000 if negative else 0) | magnitude for negative, magnitude in signs_and_magnitudes],
                    dtype="<u2")
    return np.frombuffer(bits.tobytes(), dtype=np.uint8)


@st.composite
def k_quant_rows(draw, kind: str, max_rows: int = 3, max_blocks: int = 3) -> np.ndarray:
    """Rows of `kind` (Q4_K, Q5_K, Q6_K) super-blocks, uint8 (rows, nb·bytes): the bytes
    random, all zero or all 0xFF (a pattern per super-block), then each d (and dmin)
    overwritten by a drawn finite f16, drawn as its sign and magnitude bits (every finite
    f16 is one draw: zeros of both signs, subnormals, ±65504; no draw is rejected)."""
    rows, nb = draw(st.integers(1, max_rows)), draw(st.integers(1, max_blocks))
    size = quant.K_QUANT_BYTES[kind]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    patterns = _cycle(tuple(draw(st.lists(st.sampled_from(K_BYTE_PATTERNS), min_size=1, max_size=3))), rows * nb)
    fill = {"random": lambda: rng.integers(0, 256, size, dtype=np.uint8),
            "zeros": lambda: np.zeros(size, np.uint8), "ones": lambda: np.full(size, 0xFF, np.uint8)}
    blocks = np.stack([fill[p]() for p in patterns]).reshape(rows, nb, size)
    fields = (208,) if kind == "Q6_K" else (0, 2)  # byte offsets of d (and dmin)
    halves = st.tuples(st.booleans(), st.integers(0, F16_FINITE_MAGNITUDES))
    for at in fields:
        values = draw(st.lists(halves, min_size=rows * nb, max_size=rows * nb))
        blocks[..., at:at + 2] = _f16_bytes(values).reshape(rows, nb, 2)
    return blocks.reshape(rows, nb * size)


# f16 fields of a k-quant super-block as a program's wd holds them: drawn per super-block
F16_PATTERNS = ("random", "zero", "subnormal", "largest", "one")


@dataclasses.dataclass(frozen=True)
class KQuantSpec:
    """A k-quant weight of `rows` rows of `blocks` super-blocks of `fmt`: `part` "bytes"
    gives its wq, uint8 (rows, blocks·bytes), each super-block random, all zero or all
    0xFF (every scale and min 63, every quant at its top) by the drawn patterns, and its
    f16 d (and dmin) of the drawn f16 patterns (every finite f16: ±0, subnormals,
    ±65504); "fields" gives the same weight's wd, those f16 fields widened to f32 (rows,
    blocks·F), as the exporter takes them from a file."""

    rows: int
    blocks: int
    fmt: str
    seed: int
    patterns: tuple[str, ...]
    f16_patterns: tuple[str, ...]
    part: str = "bytes"

    @property
    def shape(self) -> tuple[int, int]:
        size, fields = K_FORMATS[self.fmt]
        return (self.rows, self.blocks * (size if self.part == "bytes" else fields))

    def _f16_bits(self, rng, pattern: str) -> int:
        sign = 0x8000 * int(rng.integers(2))
        magnitude = {"random": lambda: int(rng.integers(0, F16_FINITE_MAGNITUDES + 1)), "zero": lambda: 0,
                     "subnormal": lambda: int(rng.integers(1, 0x400)), "largest": lambda: F16_FINITE_MAGNITUDES,
                     "one": lambda: 0x3C00}[pattern]()
        return sign | magnitude

    def make(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        size, fields = K_FORMATS[self.fmt]
        count = self.rows * self.blocks
        fill = {"random": lambda: rng.integers(0, 256, size, dtype=np.uint8),
                "zeros": lambda: np.zeros(size, np.uint8), "ones": lambda: np.full(size, 0xFF, np.uint8)}
        blocks = np.stack([fill[p]() for p in _cycle(self.patterns, count)]).reshape(self.rows, self.blocks, size)
        halves = _cycle(self.f16_patterns, count * fields)
        bits = np.array([self._f16_bits(rng, p) for p in halves], dtype="<u2").reshape(self.rows, self.blocks, fields)
        for field, at in enumerate((size - 2,) if fields == 1 else (0, 2)):  # Q6_K's d is last
            blocks[..., at:at + 2] = np.frombuffer(bits[..., field].tobytes(), np.uint8).reshape(self.rows, self.blocks, 2)
        if self.part == "fields":
            return quant.k_quant_scales(quant.k_kind(self.fmt), blocks).reshape(self.rows, -1)
        return blocks.reshape(self.rows, -1)


@st.composite
def k_quant_specs(draw, rows: int, blocks: int, fmt: str) -> KQuantSpec:
    """wq of a k-quant weight: 1 to 3 byte patterns and f16 patterns, cycled."""
    patterns = tuple(draw(st.lists(st.sampled_from(K_BYTE_PATTERNS), min_size=1, max_size=3)))
    f16 = tuple(draw(st.lists(st.sampled_from(F16_PATTERNS), min_size=1, max_size=3)))
    return KQuantSpec(rows, blocks, fmt, draw(st.integers(0, 2**32 - 1)), patterns, f16)


@st.composite
def k_quant_linear_operands(draw, primitive: str, site: str, fmt: str) -> tuple[dict, dict]:
    """(attrs, specs) of a `qlinear_w` or `qlinear_i` case with `fmt` k-quant weights of
    1 to 3 super-blocks a row: wd the weight's own f16 fields (as a file gives them) or,
    a third of the time, drawn f32 scales (subnormal, huge, zero, negative: any f32 is a
    d the primitive takes)."""
    blocks = draw(st.integers(1, 3))
    k = blocks * K_SUPER_BLOCK
    n = draw(dims(24))
    m = _work_rows(draw(dims(9)), n, k)
    specs = {}
    if primitive == "qlinear_w":
        specs["x"] = draw(tensor_specs((m, k), site))
    else:
        specs["xq"] = draw(value_specs(m, k, "q8", K_SUPER_BLOCK))
        specs["xd"] = draw(scale_specs((m, blocks), "f64" if site == "f64" else "f32", nan=True))
    specs["wq"] = draw(k_quant_specs(n, blocks, fmt))
    if draw(st.integers(0, 2)):
        specs["wd"] = dataclasses.replace(specs["wq"], part="fields")
    else:
        specs["wd"] = draw(scale_specs((n, scale_columns(fmt, k, K_SUPER_BLOCK)), "f32"))
    has_b = draw(st.booleans())
    if has_b:
        specs["b"] = draw(tensor_specs((n,), site))
    return {"fmt": fmt, "block": K_SUPER_BLOCK, "has_b": has_b}, specs


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """A literal array (nested tuples) of a numpy dtype name: pinned examples whose
    values a person chose, in the same place as the drawn specs."""

    values: tuple
    dtype: str  # a site type (rounded to it) or a numpy dtype name (int8, uint8, ...)

    @property
    def shape(self) -> tuple[int, ...]:
        return np.asarray(self.values).shape

    def make(self) -> np.ndarray:
        if self.dtype in types.SITE_TYPES:
            with np.errstate(over="ignore"):
                return types.round_to_site(np.asarray(self.values, dtype=np.float64), self.dtype)
        return np.asarray(self.values, dtype=self.dtype)
