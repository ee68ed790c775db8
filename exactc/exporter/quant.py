"""Quantized operands in numpy: q8 and q4 blocks, their scales, the nibble order, and the
quantizer of real tensors (docs/semantics.md, section 15).

This is the numpy side of the quantizer twins: the exporter quantizes weights with it,
and the reference backend quantizes activations with it (the `quantize` primitive). The
C side is the lowered `quantize` kernel (exporter/kernels/lower.py), written apart from
this file, from the same section.

    qt = quantize_tensor("layers.wq", w, "q4", block=32)   # (L, N, K) reals -> QuantizedTensor
    qt.layer(0).dequantize()                               # (N, K) f32, whole rows of whole blocks

Every quotient here is of finite values, so the arithmetic runs with numpy's invalid,
divide-by-zero and overflow flags raising: a division the rules forbid (a block of zeros
divided by its zero scale) is an error, never a NaN cast to an integer.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from exactc.exporter import types
from exactc.exporter.primitives import (
    K_FORMATS,
    K_SUPER_BLOCK,
    MAX_BLOCK,
    QUANT_FORMATS,
    block_count,
    quantized_row_length,
    scale_columns,
)

Q8_LIMIT = 127  # q8 values are in [-127, 127]
Q4_LOW, Q4_HIGH = -8, 7  # q4 values; the nibble is value + 8
Q4_OFFSET = 8


class QuantError(ValueError):
    """A tensor that cannot be quantized (or read as quantized): the message names the
    tensor, the element or field, and the rule."""


def check_block(fmt: str, block: int) -> None:
    if fmt in K_FORMATS:
        if block != K_SUPER_BLOCK:
            raise QuantError(f"block {block!r}: {fmt} is super-blocks of {K_SUPER_BLOCK} values")
        return
    if fmt not in QUANT_FORMATS:
        raise QuantError(f"format {fmt!r} is not one of {', '.join(QUANT_FORMATS)}")
    if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= MAX_BLOCK:
        raise QuantError(f"block {block!r} must be an int in 1..{MAX_BLOCK}")
    if fmt == "q4" and block % 2:
        raise QuantError(f"block {block}: a q4 block holds an even number of values (two to a byte)")


# ---- blocks -----------------------------------------------------------------------------


def _blocks(values: np.ndarray, block: int) -> np.ndarray:
    """(..., K) -> (..., nb, G): rows cut into blocks, a short last block padded with +0
    (a zero changes neither the largest magnitude nor any sum)."""
    k = values.shape[-1]
    nb = block_count(k, block)
    padded = np.zeros(values.shape[:-1] + (nb * block,), dtype=values.dtype)
    padded[..., :k] = values
    return padded.reshape(values.shape[:-1] + (nb, block))


def round_half_away(r: np.ndarray) -> np.ndarray:
    """Nearest integer, ties away from zero (C's round), for finite values: the integer
    part and the fraction are exact, so no addition of 0.5 can round first."""
    whole = np.trunc(r)
    fraction = r - whole  # exact: r and trunc(r) share their sign and binade or whole is 0
    one = r.dtype.type(1)
    step = np.where(fraction >= r.dtype.type(0.5), one, np.where(fraction <= r.dtype.type(-0.5), -one, 0))
    return whole + step.astype(r.dtype)


def _quotients(blocks: np.ndarray, scales: np.ndarray, skip: np.ndarray) -> np.ndarray:
    """blocks ⊘ scale, one IEEE division per value; blocks in `skip` (a zero scale, or a
    non-finite block, zeroed) are divided by 1, so their quotients (zeros, or values too
    small to reach one half) round to 0."""
    divisor = np.where(skip, blocks.dtype.type(1), scales)
    return blocks / divisor[..., None]


def quantize_q8_blocks(values: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """q8 of rows (..., K) of f32 or f64 values, in their own type: int8 values (..., K)
    and scales (..., nb). A block holding NaN or ±inf gets the scale NaN and values 0."""
    check_block("q8", block)
    values = np.asarray(values)
    if values.dtype not in (np.float32, np.float64):
        raise QuantError(f"values have dtype {values.dtype}; quantize f32 or f64 values")
    kind = values.dtype.type
    blocks = _blocks(values, block)  # (..., nb, G)
    nonfinite = ~np.isfinite(blocks).all(axis=-1)  # (..., nb)
    blocks = np.where(nonfinite[..., None], kind(0), blocks)
    amax = np.zeros(blocks.shape[:-1], dtype=values.dtype)
    for j in range(block):  # strict >, in order
        a = np.abs(blocks[..., j])
        amax = np.where(a > amax, a, amax)
    with np.errstate(divide="raise", invalid="raise", over="raise", under="ignore"):
        scales = amax / kind(Q8_LIMIT)
        zero = scales == 0
        quotients = _quotients(blocks, scales, zero | nonfinite)
        q = np.clip(round_half_away(quotients), -Q8_LIMIT, Q8_LIMIT)
    # a block of scale 0 (zeros, or values so small that amax / 127 underflows) and a
    # non-finite one (zeroed) are divided by 1: their quotients round to 0 already
    q = q.astype(np.int8)
    scales = np.where(nonfinite, kind(np.nan), scales)
    return q.reshape(values.shape[:-1] + (-1,))[..., : values.shape[-1]], scales


def quantize_q4_blocks(values: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """q4 of finite f32 rows (..., K): nibbles (..., nb, G) in 0..15 (value + 8; the
    padding of a short last block is 8) and f32 scales (..., nb)."""
    check_block("q4", block)
    values = np.asarray(values)
    if values.dtype != np.float32 or not np.isfinite(values).all():
        raise QuantError("q4 quantizes finite f32 values (quantize_tensor checks and rounds them)")
    blocks = _blocks(values, block)
    m = np.zeros(blocks.shape[:-1], dtype=np.float32)
    for j in range(block):  # the first largest magnitude, with its sign
        v = blocks[..., j]
        m = np.where(np.abs(v) > np.abs(m), v, m)
    with np.errstate(divide="raise", invalid="raise", over="raise", under="ignore"):
        scales = m / np.float32(-Q4_OFFSET)
        zero = scales == 0
        quotients = _quotients(blocks, scales, zero)
        q = np.clip(round_half_away(quotients), Q4_LOW, Q4_HIGH)
    # a block of scale 0 (zeros, or values so small that m / -8 underflows), divided by
    # 1, and a short last block's padding (+0, _blocks) round to 0: the nibble 8
    nibbles = (q.astype(np.int16) + Q4_OFFSET).astype(np.uint8)
    return nibbles, scales


# ---- the q4 byte order --------------------------------------------------------------------


def pack_q4(nibbles: np.ndarray) -> np.ndarray:
    """Nibbles (..., nb, G) -> bytes (..., nb·G/2): block element j in the low nibble of
    the block's byte j, element j + G/2 in its high nibble (ggml's Q4_0)."""
    half = nibbles.shape[-1] // 2
    low, high = nibbles[..., :half], nibbles[..., half:]
    packed = (low | (high << 4)).astype(np.uint8)
    return packed.reshape(nibbles.shape[:-2] + (-1,))


def unpack_q4(packed: np.ndarray, k: int, block: int) -> np.ndarray:
    """Bytes (..., nb·G/2) -> values (..., k) int8 in [-8, 7]: value = nibble - 8; the
    padding nibbles of a short last block are never looked at."""
    half = block // 2
    nb = block_count(k, block)
    if packed.shape[-1] != nb * half:
        raise QuantError(f"q4 row of {packed.shape[-1]} bytes; {k} values in blocks of {block} take {nb * half}")
    by_block = packed.reshape(packed.shape[:-1] + (nb, half))
    nibbles = np.concatenate([by_block & 0x0F, by_block >> 4], axis=-1)  # (..., nb, G)
    values = nibbles.astype(np.int8) - np.int8(Q4_OFFSET)
    return values.reshape(packed.shape[:-1] + (nb * block,))[..., :k]


def k_kind(fmt: str) -> str:
    """The GGUF type name of a k-quant weight format: q4_k -> Q4_K."""
    return fmt.upper()


def weight_values(fmt: str, stored: np.ndarray, k: int, block: int) -> np.ndarray:
    """The int8 values (..., k) of a stored quantized weight (q8 values, or q4 bytes)."""
    if fmt == "q8":
        return stored
    return unpack_q4(stored, k, block)


def dequantize(fmt: str, stored: np.ndarray, scales: np.ndarray, k: int, block: int) -> np.ndarray:
    """w = scale ⊗ f32(value), in f32, (..., k): what the weight-only linear multiplies by.
    A k-quant's values are its super-blocks' (dequantize_k), d and dmin from `scales`."""
    if fmt in K_FORMATS:
        return dequantize_k(k_kind(fmt), stored, scales)
    values = weight_values(fmt, stored, k, block).astype(np.float32)
    per_value = np.repeat(scales.astype(np.float32), block, axis=-1)[..., :k]
    with np.errstate(over="ignore"):  # a huge scale times a value may overflow: IEEE
        return per_value * values


# ---- quantized tensors --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class QuantizedTensor:
    """A quantized weight: leading axes (layers, rows) of whole rows, each row `k` values
    in blocks of `block`. `values` is int8 (..., k) for q8, uint8 (..., nb·G/2) for q4,
    uint8 (..., nb·bytes) super-blocks for a k-quant; `scales` is f32 (..., nb), a
    k-quant's d (and dmin) per super-block (..., nb·F). Indexing takes leading axes only, so a slice is whole rows
    of whole blocks: it starts on a byte and on a block boundary by construction."""

    fmt: str
    block: int
    k: int
    values: np.ndarray
    scales: np.ndarray

    def __post_init__(self) -> None:
        check_block(self.fmt, self.block)
        row = quantized_row_length(self.fmt, self.k, self.block)
        want = np.int8 if self.fmt == "q8" else np.uint8
        if self.values.dtype != want or self.values.shape[-1:] != (row,):
            raise QuantError(f"{self.fmt} values {self.values.dtype}{self.values.shape}: rows of {self.k} values "
                             f"in blocks of {self.block} are {np.dtype(want)} (..., {row})")
        nb = scale_columns(self.fmt, self.k, self.block)
        if self.scales.dtype != np.float32 or self.scales.shape != self.values.shape[:-1] + (nb,):
            raise QuantError(f"scales {self.scales.dtype}{self.scales.shape}: one f32 per row and block, "
                             f"{self.values.shape[:-1] + (nb,)}")

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape: leading axes, then k."""
        return self.values.shape[:-1] + (self.k,)

    def layer(self, index: int) -> "QuantizedTensor":
        """The slice at `index` of the first axis (a layer of a stacked parameter)."""
        if len(self.shape) < 2:
            raise QuantError("a row of blocks has no layer to take; index a stacked tensor")
        return QuantizedTensor(self.fmt, self.block, self.k, self.values[index], self.scales[index])

    def layer_byte_offset(self, index: int) -> int:
        """Where layer `index` starts in the flat values: a whole number of rows, so a
        multiple of the block's bytes (G for q8, G/2 for q4)."""
        return index * int(np.prod(self.values.shape[1:], dtype=np.int64)) * self.values.itemsize

    def dequantize(self) -> np.ndarray:
        return dequantize(self.fmt, self.values, self.scales, self.k, self.block)


def _refuse_nonfinite(name: str, values: np.ndarray, what: str) -> None:
    bad = np.argwhere(~np.isfinite(values))
    if bad.size:
        index = tuple(int(i) for i in bad[0])
        raise QuantError(f"tensor {name}: {what} at index {index} is {values[index]}; quantized weights must be "
                         f"finite ({len(bad)} element(s) are not)")


def quantize_tensor(name: str, values, fmt: str, block: int) -> QuantizedTensor:
    """Reals (..., K) rounded to f32, then quantized along the last axis. NaN and ±inf
    (before or after the rounding to f32) are refused, naming the tensor and the index."""
    check_block(fmt, block)
    if fmt in K_FORMATS:
        raise QuantError(f"tensor {name}: exactc does not quantize to {fmt}; a k-quant weight comes from a file")
    f32 = types.round_to_site(values, "f32")
    if f32.ndim < 1:
        raise QuantError(f"tensor {name}: a scalar has no reduction axis to quantize along")
    _refuse_nonfinite(name, f32, "element")
    k = f32.shape[-1]
    if fmt == "q8":
        stored, scales = quantize_q8_blocks(f32, block)
    else:
        nibbles, scales = quantize_q4_blocks(f32, block)
        stored = pack_q4(nibbles)
    return QuantizedTensor(fmt, block, k, stored, scales.astype(np.float32))


def scales_from_f16(name: str, scales: np.ndarray) -> np.ndarray:
    """f16 scales (ggml's Q8_0 and Q4_0 store them) as f32: widening is exact; an
    infinite or NaN scale is refused, naming the tensor and the block."""
    scales = np.asarray(scales)
    if scales.dtype != np.float16:
        raise QuantError(f"tensor {name}: scales of dtype {scales.dtype}; this reads f16 scales")
    _refuse_nonfinite(name, scales, "scale")
    return scales.astype(np.float32)


# ---- ggml's k-quants: super-blocks of 256 values (docs/semantics.md, section 15) ----------


QK_K = 256  # values per super-block
K_SCALE_BYTES = 12  # Q4_K's and Q5_K's eight 6-bit scales and eight 6-bit mins
K_QUANT_BYTES = {fmt.upper(): size for fmt, (size, _) in K_FORMATS.items()}  # bytes per super-block


def _f16_field(raw: np.ndarray, at: int) -> np.ndarray:
    """The little-endian f16 at byte `at` of each super-block (..., bytes), widened to
    f32 (exact)."""
    return np.ascontiguousarray(raw[..., at:at + 2]).view("<f2")[..., 0].astype(np.float32)


def k_scales_and_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Twelve bytes (..., 12) -> eight 6-bit scales and eight 6-bit mins (..., 8) each.
    Bytes 0-3 hold scales 0-3 in their low 6 bits, bytes 4-7 mins 0-3; scales 4-7 are
    the low nibbles of bytes 8-11 with the top 2 bits of bytes 0-3 above them, mins 4-7
    the high nibbles of bytes 8-11 with the top 2 bits of bytes 4-7."""
    first, second, third = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    high_scales = (third & 0x0F) | ((first >> 6) << 4)
    high_mins = (third >> 4) | ((second >> 6) << 4)
    scales = np.concatenate([first & 0x3F, high_scales], axis=-1)
    mins = np.concatenate([second & 0x3F, high_mins], axis=-1)
    return scales, mins


def _nibble_planes(qs: np.ndarray) -> np.ndarray:
    """128 bytes (..., 128) -> eight sub-blocks of 32 values (..., 8, 32): sub-block 2p is
    the low nibbles of bytes 32p .. 32p + 31, sub-block 2p + 1 their high nibbles."""
    pairs = qs.reshape(qs.shape[:-1] + (4, 1, 32))
    return ((pairs >> np.array([0, 4], np.uint8).reshape(2, 1)) & 0x0F).reshape(qs.shape[:-1] + (8, 32))


def _q4_k(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K: d, dmin (f16), 12 bytes of scales and mins, 128 bytes of nibbles."""
    return (_nibble_planes(raw[..., 16:144]), *k_scales_and_mins(raw[..., 4:4 + K_SCALE_BYTES]))


def _q5_k(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q5_K: Q4_K's fields with 32 bytes of high bits after the scales: bit j of byte l
    is the fifth bit (16) of value l of sub-block j."""
    low = _nibble_planes(raw[..., 48:176])
    qh = raw[..., 16:48]  # (..., 32)
    high = (qh[..., None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1  # (..., 8, 32)
    return (low | (high << 4), *k_scales_and_mins(raw[..., 4:4 + K_SCALE_BYTES]))


def _q6_k(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, None]:
    """Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 int8 scales (one
    per 16 values), d (f16); the quants q − 32 as sixteen sub-blocks of 16. Each half of
    128 values takes 64 low-nibble bytes and 32 high bytes: its quarter i (32 values,
    l = 0..31) is nibble i // 2 of low byte l + 32·(i mod 2), with bits 2i, 2i + 1 of
    high byte l above."""
    lead = raw.shape[:-1]
    ql = raw[..., 0:128].reshape(lead + (2, 1, 2, 32))  # (half, nibble, byte group, l)
    low = (ql >> np.array([0, 4], np.uint8).reshape(2, 1, 1)) & 0x0F  # (..., 2, 2, 2, 32): quarter 2n + g
    qh = raw[..., 128:192].reshape(lead + (2, 1, 32))
    high = (qh >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)) & 0x03  # (..., 2, 4, 32)
    q = (low.reshape(lead + (2, 4, 32)) | (high << 4)).astype(np.int16) - 32
    return q.reshape(lead + (16, 16)), raw[..., 192:208].view(np.int8), None


_K_FIELDS = {"Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}


def k_quant_integers(kind: str, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The integers of super-blocks (..., bytes) of `kind`: the quants (..., sub-blocks,
    values) (Q4_K, Q5_K: 8 of 32, unsigned; Q6_K: 16 of 16, q − 32), the sub-block scales
    (..., sub-blocks) and the mins (..., 8) (None for Q6_K)."""
    return _K_FIELDS[kind](blocks)


def _k_values(kind: str, blocks: np.ndarray, fields: np.ndarray) -> np.ndarray:
    """The f32 values (..., 256) of super-blocks (..., bytes) whose d (and dmin) are
    `fields` (..., 1 or 2) f32: (d·scale)·q, less (dmin·min) for Q4_K and Q5_K, each
    operation in f32, the order ggml's dequantize_row_q4_K writes."""
    q, scales, mins = k_quant_integers(kind, blocks)
    step = fields[..., 0, None] * scales.astype(np.float32)  # (..., sub-blocks)
    values = step[..., None] * q.astype(np.float32)
    if mins is not None:
        offset = fields[..., 1, None] * mins.astype(np.float32)
        values = values - offset[..., None]
    return values.reshape(blocks.shape[:-1] + (QK_K,))


def k_quant_scales(kind: str, raw: np.ndarray) -> np.ndarray:
    """The f16 fields of each super-block (..., nb, bytes), widened: (..., nb, 2) d and
    dmin for Q4_K and Q5_K, (..., nb, 1) d for Q6_K."""
    if kind == "Q6_K":
        return _f16_field(raw, 208)[..., None]
    return np.stack([_f16_field(raw, 0), _f16_field(raw, 2)], axis=-1)


def _super_blocks(kind: str, raw: np.ndarray) -> np.ndarray:
    """Rows (..., nb·bytes) of `kind` as super-blocks (..., nb, bytes), checked."""
    if kind not in _K_FIELDS:
        raise QuantError(f"{kind!r} is not a k-quant exactc reads ({', '.join(_K_FIELDS)})")
    size = K_QUANT_BYTES[kind]
    raw = np.asarray(raw)
    if raw.dtype != np.uint8 or raw.shape[-1] % size:
        raise QuantError(f"{kind} rows of {raw.dtype}{raw.shape}: uint8 rows of whole super-blocks of {size} bytes")
    return raw.reshape(raw.shape[:-1] + (raw.shape[-1] // size, size))


def dequantize_k(kind: str, raw: np.ndarray, fields: np.ndarray | None = None) -> np.ndarray:
    """Rows of `kind` (Q4_K, Q5_K, Q6_K) super-blocks, uint8 (..., nb·bytes), as f32
    (..., nb·256): every value a product (and for Q4_K, Q5_K a difference) of f32
    roundings, in ggml's order. d (and dmin) are the bytes' own f16 fields, widened, or
    `fields` (..., nb·F) f32 when given (a program's wd operand)."""
    blocks = _super_blocks(kind, raw)
    if fields is None:
        fields = k_quant_scales(kind, blocks)
    else:
        fields = np.asarray(fields, np.float32).reshape(blocks.shape[:-1] + (-1,))
    with np.errstate(over="ignore"):  # finite f16 fields keep every product finite; IEEE if not
        values = _k_values(kind, blocks, fields)
    return values.reshape(blocks.shape[:-2] + (-1,))


# ---- a program's parameters ----------------------------------------------------------------


def quantize_parameters(program, reals: dict[str, np.ndarray], site: str,
                        given: dict[str, QuantizedTensor] | None = None) -> dict[str, np.ndarray]:
    """The parameters of `program`, traced with quantized weights (graph.trace's
    `quantized`), from `reals`: the float program's parameters (ParamSpec name -> values
    as f64). A float parameter is rounded to `site`; a quantized weight is held as its
    values and its scales: the blocks `given` for it (a checkpoint's own), else its reals
    rounded to f32 and quantized (quantize_tensor)."""
    from exactc.exporter.graph import SCALE_SUFFIX

    given = given or {}
    out = {}
    for name, array in reals.items():
        if name in program.quantized:
            fmt, block = program.quantized[name]
            qt = given.get(name) or quantize_tensor(name, array, fmt, block)
            if (qt.fmt, qt.block, qt.shape) != (fmt, block, np.shape(array)):
                raise QuantError(f"tensor {name}: {qt.fmt} in blocks of {qt.block}, shape {qt.shape}; the program "
                                 f"holds it as {fmt} in blocks of {block}, shape {np.shape(array)}")
            out[name] = qt.values
            out[name + SCALE_SUFFIX] = qt.scales
        else:
            out[name] = types.round_to_site(array, site)
    return out
