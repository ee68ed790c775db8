"""llama.cpp's GGUF files of the Llama architecture, read with the `gguf` package.

The config comes from the metadata (`llama.embedding_length`, `llama.feed_forward_length`,
`llama.block_count`, `llama.attention.head_count`, `llama.attention.head_count_kv`,
`llama.context_length`, `llama.attention.layer_norm_rms_epsilon`, `llama.rope.freq_base`);
the vocabulary from `token_embd.weight`'s rows. Tensor names are llama.cpp's, mapped to
Hugging Face's (NAMES); `output.weight` missing means the head is the token embedding.

Tensor types: F32 and F16 are floats (exact in f64); Q8_0 and Q4_0 are blocks of 32
along a row with an f16 scale each, read as exactc's q8 and q4 (docs/semantics.md
section 15: Q4_0's nibble order is exactc's, element j in the low nibble of byte j and
j + 16 in the high one, value nibble - 8; f16 scales widen exactly to f32, and an
infinite or NaN scale is refused). Q4_K, Q5_K and Q6_K (ggml's k-quants, super-blocks of
256 values) are dequantized to f32 as the file is read (quant.dequantize_k, exact: the
f32 values ggml's own dequantization gives), and the program computes with those f32
weights; an infinite or NaN d or dmin is refused. Any other type is refused by its name.
Q8_0 and Q4_0 linear weights reach the program as the file's blocks; a quantized
embedding table is dequantized (scale x value, exact in f32).

llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.permute) reorders the rows of
attn_q and attn_k from Hugging Face's rotate_half order to the interleaved pairs of
Meta's layout; exactc puts them back (llama2c.interleaved_to_half, the same permutation
as for llama2.c files), the rows of a quantized tensor with their blocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from exactc.exporter.checkpoints.base import (Checkpoint, CheckpointError, Tensor, finite_float, finite_scales,
                                         positive_int)
from exactc.exporter.checkpoints.llama2c import interleaved_to_half

MAGIC = b"GGUF"
BLOCK = 32  # Q8_0 and Q4_0 hold 32 values per block
QK_K = 256  # Q4_K, Q5_K and Q6_K hold 256 values per super-block
FLOAT_TYPES = ("F32", "F16")
QUANT_TYPES = {"Q8_0": "q8", "Q4_0": "q4"}  # GGUF type -> exactc format
K_QUANT_TYPES = ("Q4_K", "Q5_K", "Q6_K")  # read as their dequantized f32 values

# llama.cpp's name -> Hugging Face's ({l}: the layer)
NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "blk.{l}.attn_norm.weight": "model.layers.{l}.input_layernorm.weight",
    "blk.{l}.attn_q.weight": "model.layers.{l}.self_attn.q_proj.weight",
    "blk.{l}.attn_k.weight": "model.layers.{l}.self_attn.k_proj.weight",
    "blk.{l}.attn_v.weight": "model.layers.{l}.self_attn.v_proj.weight",
    "blk.{l}.attn_output.weight": "model.layers.{l}.self_attn.o_proj.weight",
    "blk.{l}.ffn_norm.weight": "model.layers.{l}.post_attention_layernorm.weight",
    "blk.{l}.ffn_gate.weight": "model.layers.{l}.mlp.gate_proj.weight",
    "blk.{l}.ffn_up.weight": "model.layers.{l}.mlp.up_proj.weight",
    "blk.{l}.ffn_down.weight": "model.layers.{l}.mlp.down_proj.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def looks_like(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def _field(reader: Any, path: Path, key: str, default: Any = None) -> Any:
    """A metadata value of the file at `path`, or `default`; a missing key without one is
    a refusal naming the file and the key."""
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise CheckpointError(f"{path}: metadata {key} is missing")
        return default
    value = field.contents()
    return int(value) if isinstance(value, np.integer) else float(value) if isinstance(value, np.floating) else value


def _hf_name(name: str) -> tuple[str, int | None] | None:
    """Hugging Face's name of a llama.cpp tensor name, and its layer; None if unknown."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
        template = ".".join(["blk", "{l}", *parts[2:]])
        return (NAMES[template].replace("{l}", parts[1]), int(parts[1])) if template in NAMES else None
    return (NAMES[name], None) if name in NAMES else None


def load(path: Path) -> Checkpoint:
    import gguf

    try:
        # The package adds a tensor's offset to the data section's start in uint64 (2^64 - 32
        # wraps to 32 bytes before it) and numpy warns on stderr; _check_offsets refuses
        # such an offset, computed again in Python ints.
        with np.errstate(over="ignore"):
            reader = gguf.GGUFReader(path)
    except (ValueError, OSError, IndexError) as exc:
        raise CheckpointError(f"{path}: not a GGUF file the gguf package reads ({exc})") from None
    _check_offsets(path, reader)
    arch = _field(reader, path, "general.architecture")
    if arch != "llama":
        raise CheckpointError(f"{path}: general.architecture is {arch!r}; exactc reads GGUF files of 'llama'")
    where = str(path)
    H = positive_int(where, "llama.attention.head_count", _field(reader, path, "llama.attention.head_count"))
    KV = positive_int(where, "llama.attention.head_count_kv", _field(reader, path, "llama.attention.head_count_kv", H))
    fields = {
        "dim": positive_int(where, "llama.embedding_length", _field(reader, path, "llama.embedding_length")),
        "heads": H,
        "kv_heads": KV,
        "layers": positive_int(where, "llama.block_count", _field(reader, path, "llama.block_count")),
        "mlp": positive_int(where, "llama.feed_forward_length", _field(reader, path, "llama.feed_forward_length")),
        "eps": finite_float(where, "llama.attention.layer_norm_rms_epsilon",
                            _field(reader, path, "llama.attention.layer_norm_rms_epsilon")),
        "theta": finite_float(where, "llama.rope.freq_base", _field(reader, path, "llama.rope.freq_base", 10000.0)),
    }
    max_tokens = positive_int(where, "llama.context_length", _field(reader, path, "llama.context_length"))
    tensors: dict[str, Tensor] = {}
    ignored: list[str] = []
    formats: set[tuple[str, int]] = set()
    for t in reader.tensors:
        kind = t.tensor_type.name
        mapped = _hf_name(t.name)
        if mapped is None:
            ignored.append(t.name)
            continue
        if kind not in FLOAT_TYPES and kind not in QUANT_TYPES and kind not in K_QUANT_TYPES:
            raise CheckpointError(f"{path}: tensor {t.name} is {kind}; exactc reads "
                                  f"{', '.join(FLOAT_TYPES + tuple(QUANT_TYPES) + K_QUANT_TYPES)}")
        name, _ = mapped
        shape = tuple(int(d) for d in reversed(t.shape))  # GGUF lists the innermost dimension first
        heads = H if ".self_attn.q_proj." in name else KV if ".self_attn.k_proj." in name else None
        if kind in FLOAT_TYPES:
            tensors[name] = Tensor(kind, shape, t.name, _float_reader(t, shape, heads))
            continue
        if kind in K_QUANT_TYPES:
            _check_rows(path, t.name, kind, shape, QK_K)
            tensors[name] = Tensor(kind, shape, t.name, _k_quant_reader(path, t, kind, shape, heads),
                                   dequantized=True, blocks=_k_blocks_reader(path, t, kind, shape, heads),
                                   stored_format=(kind.lower(), QK_K))
            continue
        _check_rows(path, t.name, kind, shape, BLOCK)
        blocks = _blocks_reader(path, t, QUANT_TYPES[kind], shape, heads)
        tensors[name] = Tensor(kind, shape, t.name, lambda blocks=blocks: blocks().dequantize().astype(np.float64),
                               blocks=blocks, stored_format=(QUANT_TYPES[kind], BLOCK))
        if name != "model.embed_tokens.weight":
            formats.add((QUANT_TYPES[kind], BLOCK))
    if "model.embed_tokens.weight" not in tensors:
        raise CheckpointError(f"{path}: tensor token_embd.weight is missing")
    fields["vocab"] = tensors["model.embed_tokens.weight"].shape[0]
    if "lm_head.weight" not in tensors:  # a tied head: the embedding table, a linear weight too
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
        if tensors["lm_head.weight"].dtype in QUANT_TYPES:
            formats.add((QUANT_TYPES[tensors["lm_head.weight"].dtype], BLOCK))
    if len(formats) > 1:
        raise CheckpointError(f"{path}: its linear weights mix {' and '.join(sorted(f for f, _ in formats))}; "
                              "exactc exports one format per program")
    weights = formats.pop() if formats else None
    return Checkpoint(path, "gguf", "llama", fields, tensors, ignored, max_tokens, {}, [path], path.name,
                      weights=weights)


def _check_offsets(path: Path, reader: Any) -> None:
    """Every tensor's offset (relative to the data section) is a multiple of the file's
    alignment, its bytes lie inside the data section, and no two tensors share a byte:
    llama.cpp's gguf reader refuses a file that breaks any of these, and the gguf package
    reads it anyway (a misaligned or overlapping tensor as other bytes, an offset of
    2^64 - 32 as the 32 bytes before the data section)."""
    alignment = int(reader.alignment)
    data_len = len(reader.data) - int(reader.data_offset)
    spans = []
    for t in reader.tensors:
        offset, size = int(t.field.parts[-1][0]), int(t.n_bytes)  # Python ints: no wrap
        if offset % alignment:
            raise CheckpointError(f"{path}: tensor {t.name}: offset {offset} is not a multiple of the alignment "
                                  f"{alignment} (general.alignment, default 32); llama.cpp refuses a tensor "
                                  "that is not aligned")
        if offset + size > data_len:
            raise CheckpointError(f"{path}: tensor {t.name}: offset {offset} and its {size} bytes end past the "
                                  f"data section's {data_len} bytes; a tensor must lie inside the data section")
        spans.append((offset, offset + size, t.name))
    at, before = 0, None
    for begin, end, name in sorted(spans, key=lambda span: span[0]):  # ties in file order: the later one is named
        if begin < at:
            raise CheckpointError(f"{path}: tensor {name}: offset {begin} overlaps tensor {before[2]}'s bytes "
                                  f"[{before[0]}, {before[1]}); two tensors must not share bytes")
        if end > at:
            at, before = end, (begin, end, name)


def _check_rows(path: Path, name: str, kind: str, shape: tuple[int, ...], block: int) -> None:
    if len(shape) != 2 or shape[1] % block:
        raise CheckpointError(f"{path}: tensor {name} is {kind} of shape {shape}; rows of whole blocks of "
                              f"{block} are expected")


def _float_reader(t: Any, shape: tuple[int, ...], heads: int | None):
    def read() -> np.ndarray:
        values = np.asarray(t.data).astype(np.float64).reshape(shape)
        return interleaved_to_half(values, heads) if heads is not None else values

    return read


def _blocks_reader(path: Path, t: Any, fmt: str, shape: tuple[int, int], heads: int | None):
    """The reader of a Q8_0 or Q4_0 tensor: a QuantizedTensor, rows in Hugging Face's order."""

    def read():
        from exactc.exporter import quant

        rows, k = shape
        nb = k // BLOCK
        raw = np.asarray(t.data, dtype=np.uint8).reshape(rows, nb, -1)  # per block: f16 scale, then its values
        f16 = np.ascontiguousarray(raw[..., :2]).view("<f2")[..., 0]
        finite_scales(path, t.name, f16, "block")  # rows as stored, before the q/k permutation
        scales = quant.scales_from_f16(t.name, f16)
        payload = np.ascontiguousarray(raw[..., 2:]).reshape(rows, -1)
        values = payload.view(np.int8) if fmt == "q8" else payload
        if heads is not None:
            values, scales = interleaved_to_half(values, heads), interleaved_to_half(scales, heads)
        return quant.QuantizedTensor(fmt, BLOCK, k, np.ascontiguousarray(values), np.ascontiguousarray(scales))

    return read


def _k_quant_reader(path: Path, t: Any, kind: str, shape: tuple[int, int], heads: int | None):
    """The reader of a Q4_K, Q5_K or Q6_K tensor: its values dequantized to f32 (exact),
    as f64, rows in Hugging Face's order."""

    def read() -> np.ndarray:
        from exactc.exporter import quant

        rows, k = shape
        raw = np.asarray(t.data, dtype=np.uint8).reshape(rows, k // QK_K, -1)
        fields = quant.k_quant_scales(kind, raw)  # (rows, super-blocks, d [and dmin])
        for field in range(fields.shape[-1]):  # rows as stored, before the q/k permutation
            finite_scales(path, t.name, fields[..., field], "super-block")
        values = quant.dequantize_k(kind, raw.reshape(rows, -1)).astype(np.float64)
        return interleaved_to_half(values, heads) if heads is not None else values

    return read


def _k_blocks_reader(path: Path, t: Any, kind: str, shape: tuple[int, int], heads: int | None):
    """The blocks of a Q4_K, Q5_K or Q6_K tensor as the program format q4_k, q5_k, q6_k (its
    super-blocks' bytes, their f16 d and dmin widened): a QuantizedTensor, rows in Hugging
    Face's order (`--weights file`)."""

    def read():
        from exactc.exporter import quant

        rows, k = shape
        raw = np.asarray(t.data, dtype=np.uint8).reshape(rows, k // QK_K, -1)
        fields = quant.k_quant_scales(kind, raw)  # (rows, super-blocks, d [and dmin])
        for field in range(fields.shape[-1]):  # rows as stored, before the q/k permutation
            finite_scales(path, t.name, fields[..., field], "super-block")
        values, scales = raw.reshape(rows, -1), fields.reshape(rows, -1)
        if heads is not None:
            values, scales = interleaved_to_half(values, heads), interleaved_to_half(scales, heads)
        return quant.QuantizedTensor(kind.lower(), QK_K, k, np.ascontiguousarray(values), np.ascontiguousarray(scales))

    return read


def write(path: Path, cfg: dict, tensors: dict[str, np.ndarray], qtype: str | None = None,
          quantized: set[str] | frozenset[str] = frozenset(), vocabulary: bool = False,
          stored: dict[str, str] | None = None) -> Path:
    """A GGUF Llama file as llama.cpp's converter writes one: the metadata of `cfg` (dim,
    mlp, layers, heads, kv_heads, tokens; eps and theta, default 1e-5 and 10000, stored as
    f32 as the converter stores them), `tensors` (Hugging Face names, Hugging Face's
    row order, f32) under llama.cpp's names with attn_q's and attn_k's rows permuted to
    the interleaved order, those named in `quantized` stored as `qtype` (Q8_0, Q4_0) by
    the gguf package's quantizer. Those named in `stored` (Hugging Face name -> GGUF type,
    Q4_K ...) are given as the file's own bytes, uint8 rows of whole blocks, and written as
    they are (no permutation: they are already in the file's row order). With `vocabulary`, placeholder pieces (<unk>, <s>,
    </s>, the 256 byte tokens, then t0, t1, ...) so that llama.cpp loads the file; exactc
    reads none of it."""
    import gguf

    from exactc.exporter.checkpoints.llama2c import half_to_interleaved

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(cfg["layers"])
    writer.add_embedding_length(cfg["dim"])
    writer.add_feed_forward_length(cfg["mlp"])
    writer.add_head_count(cfg["heads"])
    writer.add_head_count_kv(cfg["kv_heads"])
    writer.add_context_length(cfg["tokens"])
    writer.add_layer_norm_rms_eps(cfg.get("eps", 1e-5))
    writer.add_rope_freq_base(cfg.get("theta", 10000.0))
    if vocabulary:
        pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        pieces += [f"t{i}" for i in range(cfg["vocab"] - len(pieces))]
        writer.add_tokenizer_model("llama")
        writer.add_token_list(pieces)
        writer.add_token_scores([0.0] * len(pieces))
        writer.add_token_types([2, 3, 3] + [6] * 256 + [1] * (len(pieces) - 259))  # unknown, control, byte, normal
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
    to_gguf = {hf: name for name, hf in NAMES.items()}
    for hf_name, array in tensors.items():
        layer = next((part for part in hf_name.split(".") if part.isdigit()), None)
        generic = hf_name.replace(f".{layer}.", ".{l}.", 1) if layer is not None else hf_name
        name = to_gguf[generic].replace("{l}", layer or "")
        if hf_name in (stored or {}):
            kind = getattr(gguf.GGMLQuantizationType, stored[hf_name])
            writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.uint8), raw_dtype=kind)
            continue
        array = np.asarray(array, dtype=np.float32)
        if "q_proj" in hf_name or "k_proj" in hf_name:
            array = half_to_interleaved(array, cfg["heads"] if "q_proj" in hf_name else cfg["kv_heads"])
        if hf_name in quantized and qtype is not None:
            kind = getattr(gguf.GGMLQuantizationType, qtype)
            writer.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
