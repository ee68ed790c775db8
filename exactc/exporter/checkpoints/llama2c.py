"""llama2.c's .bin checkpoints, read and written.

Two headers (github.com/karpathy/llama2.c, export.py and run.c):

- legacy (what run.c reads): seven int32s `dim, hidden_dim, n_layers, n_heads,
  n_kv_heads, vocab_size, seq_len`; a negative vocab_size means the classifier is stored
  apart (not shared with the token embedding). Then f32 weights: token embedding
  (V, D); attention rmsnorm (L, D); wq (L, D, D); wk, wv (L, KV*hd, D); wo (L, D, D);
  ffn rmsnorm (L, D); w1 (L, F, D); w2 (L, D, F); w3 (L, F, D); final rmsnorm (D);
  the rope tables cos and sin (seq_len, hd/2) each (ignored: exactc computes its own);
  then the classifier (V, D) when not shared.
- version 1: uint32 magic 0x616b3432 ("ak42"), int32 version 1, the same seven int32s
  (vocab_size positive), a uint8 shared_classifier, zeros to 256 bytes. Then f32: final
  rmsnorm; attention rmsnorms; ffn rmsnorms; token embedding; wq; wk; wv; wo; w1; w2;
  w3 (each over all layers); the classifier when not shared.
- version 2 (runq.c's int8 groups): the version-1 header with an int32 group_size G
  after shared_classifier (bytes 37-40). Then f32: attention rmsnorms, ffn rmsnorms,
  final rmsnorm. Then each quantized tensor as runq.c's init_quantized_tensors maps it:
  its int8 values, then its f32 scales (one per G consecutive values), for the token
  embedding, then wq of layer 0, 1, ..., then wk, wv, wo, w1, w2, w3 the same way, then
  the classifier when not shared (else the classifier is the quantized embedding).
  exactc holds these blocks as they are (q8, block G): every linear weight's values and
  scales go to the program unchanged, the embedding table is dequantized (scale x value,
  exact in f32). A group of runq.c runs over the flattened tensor; exactc's blocks are
  per row, the same when G divides every row, and a file where it does not is refused.

Rope pairing. llama2.c (like Meta's original) rotates interleaved pairs (2i, 2i+1) of
each head; Hugging Face's checkpoints rotate (i, i + hd/2) (rotate_half), with q and k
rows permuted to match. exactc reads llama2.c files by permuting the rows of wq and wk
into Hugging Face's order (the permutation of transformers' convert_llama_weights_to_hf)
and keeps one rope pairing, "half", for every Llama. The two routes then hold the very
same weights, so a llama2.c file written from a Hugging Face checkpoint (`write`, which
applies the inverse permutation as llama2.c's export.py does) exports to the same bits.
exactc does not reproduce run.c's bits: its dot products run in exactc's order.

llama2.c fixes rope theta at 10000 and the rmsnorm eps at 1e-5.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Mapping

import numpy as np

from exactc.exporter.checkpoints.base import Checkpoint, CheckpointError, Tensor, finite_scales

MAGIC = 0x616B3432
HEADER_V1 = 256  # the header of versions 1 and 2, in bytes
FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")


def looks_like(path: Path) -> bool:
    """A .bin file, or any file that starts with the version-1 magic."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return (len(head) == 4 and struct.unpack("<I", head)[0] == MAGIC) or path.suffix == ".bin"


def _layout(p: dict[str, int], version: int, shared: bool) -> list[tuple[str, tuple[int, ...]]]:
    """The stored arrays in file order: (llama2.c name, shape)."""
    D, F, L, H, KV, V, S = (p[k] for k in FIELDS)
    hd = D // H
    kv = KV * hd
    layers = {
        "wq": (L, H * hd, D), "wk": (L, kv, D), "wv": (L, kv, D), "wo": (L, D, H * hd),
        "w1": (L, F, D), "w2": (L, D, F), "w3": (L, F, D),
    }
    if version == 2:  # f32 first; the quantized tensors are _quantized_layout's
        return [("rms_att_weight", (L, D)), ("rms_ffn_weight", (L, D)), ("rms_final_weight", (D,))]
    if version == 0:
        order = [("token_embedding_table", (V, D)), ("rms_att_weight", (L, D))]
        order += [(k, layers[k]) for k in ("wq", "wk", "wv", "wo")]
        order += [("rms_ffn_weight", (L, D))] + [(k, layers[k]) for k in ("w1", "w2", "w3")]
        order += [("rms_final_weight", (D,)), ("freq_cis_real", (S, hd // 2)), ("freq_cis_imag", (S, hd // 2))]
    else:
        order = [("rms_final_weight", (D,)), ("rms_att_weight", (L, D)), ("rms_ffn_weight", (L, D)),
                 ("token_embedding_table", (V, D))]
        order += [(k, layers[k]) for k in ("wq", "wk", "wv", "wo", "w1", "w2", "w3")]
    if not shared:
        order.append(("wcls", (V, D)))
    return order


def _quantized_layout(p: dict[str, int], shared: bool) -> list[tuple[str, int, tuple[int, int]]]:
    """Version 2's quantized tensors in file order: (llama2.c name, how many (one per
    layer), shape of each)."""
    D, F, L, H, KV, V, S = (p[k] for k in FIELDS)
    hd = D // H
    order = [("token_embedding_table", 1, (V, D)), ("wq", L, (H * hd, D)), ("wk", L, (KV * hd, D)),
             ("wv", L, (KV * hd, D)), ("wo", L, (D, H * hd)), ("w1", L, (F, D)), ("w2", L, (D, F)), ("w3", L, (F, D))]
    if not shared:
        order.append(("wcls", 1, (V, D)))
    return order


# llama2.c name -> Hugging Face name ({l}: the layer), and whether its rows are permuted
_NAMES = {
    "token_embedding_table": "model.embed_tokens.weight",
    "rms_att_weight": "model.layers.{l}.input_layernorm.weight",
    "wq": "model.layers.{l}.self_attn.q_proj.weight",
    "wk": "model.layers.{l}.self_attn.k_proj.weight",
    "wv": "model.layers.{l}.self_attn.v_proj.weight",
    "wo": "model.layers.{l}.self_attn.o_proj.weight",
    "rms_ffn_weight": "model.layers.{l}.post_attention_layernorm.weight",
    "w1": "model.layers.{l}.mlp.gate_proj.weight",
    "w2": "model.layers.{l}.mlp.down_proj.weight",
    "w3": "model.layers.{l}.mlp.up_proj.weight",
    "rms_final_weight": "model.norm.weight",
    "wcls": "lm_head.weight",
}


def interleaved_to_half(w: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a q or k weight from the interleaved pair order to rotate_half's:
    row j*hd/2 + i of a head is row 2i + j (transformers' convert_llama_weights_to_hf)."""
    rows, cols = w.shape
    return np.ascontiguousarray(w.reshape(heads, rows // heads // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols))


def half_to_interleaved(w: np.ndarray, heads: int) -> np.ndarray:
    """The inverse: Hugging Face's q/k rows back to llama2.c's (its export.py)."""
    rows, cols = w.shape
    return np.ascontiguousarray(w.reshape(heads, 2, rows // heads // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols))


def read_header(path: Path) -> tuple[dict[str, int], int, bool, int]:
    """(params, version, shared classifier, where the weights start)."""
    try:
        with open(path, "rb") as f:
            data = f.read(HEADER_V1)
    except OSError as exc:
        raise CheckpointError(f"{path}: not readable ({exc.strerror or exc})") from None
    if len(data) >= 8 and struct.unpack("<I", data[:4])[0] == MAGIC:
        (version,) = struct.unpack("<i", data[4:8])
        if version not in (1, 2):
            raise CheckpointError(f"{path}: llama2.c version {version} is not supported (exactc reads the legacy "
                                  "header, version 1 (f32) and version 2 (int8 groups))")
        if len(data) < HEADER_V1:
            raise CheckpointError(f"{path}: a version-{version} header is {HEADER_V1} bytes; the file has {len(data)}")
        params = dict(zip(FIELDS, struct.unpack("<7i", data[8:36])))
        shared = bool(data[36])
        if version == 2:
            (params["group_size"],) = struct.unpack("<i", data[37:41])
        start = HEADER_V1
    else:
        if len(data) < 28:
            raise CheckpointError(f"{path}: too short for llama2.c's header of seven int32s")
        params = dict(zip(FIELDS, struct.unpack("<7i", data[:28])))
        version, shared, start = 0, params["vocab_size"] > 0, 28
        params["vocab_size"] = abs(params["vocab_size"])
    for key, value in params.items():
        if value < 1:
            raise CheckpointError(f"{path}: header field {key}={value} must be positive")
    if params["dim"] % params["n_heads"] or (params["dim"] // params["n_heads"]) % 2:
        raise CheckpointError(f"{path}: dim {params['dim']} / n_heads {params['n_heads']} must be an even integer")
    return params, version, shared, start


def load(path: Path) -> Checkpoint:
    params, version, shared, start = read_header(path)
    layout = _layout(params, version, shared)
    group = params.get("group_size", 0)
    quantized = _quantized_layout(params, shared) if version == 2 else []
    for name, _, (rows, k) in quantized:
        if k % group:
            raise CheckpointError(f"{path}: group_size {group} does not divide the rows of {name} ({k} values): "
                                  "runq.c's groups would straddle rows, and exactc's q8 blocks are per row")
    need = start + 4 * sum(math.prod(shape) for _, shape in layout)  # Python ints: no overflow
    need += sum(n * (rows * k + 4 * rows * (k // group)) for _, n, (rows, k) in quantized)
    size = path.stat().st_size
    if size != need:
        desc = ", ".join(f"{k}={params[k]}" for k in FIELDS) + (f", group_size={group}" if version == 2 else "")
        kind = "f32 weights" if version != 2 else f"f32 norms and int8 groups of {group}"
        raise CheckpointError(
            f"{path}: the header ({f'version {version}' if version else 'legacy'}; {desc}; "
            f"{'shared' if shared else 'separate'} classifier) needs {need} bytes of header and {kind}; "
            f"the file has {size}")
    H, KV, L = params["n_heads"], params["n_kv_heads"], params["n_layers"]
    tensors: dict[str, Tensor] = {}
    ignored: list[str] = []
    offset = start
    for name, shape in layout:
        count = int(np.prod(shape))
        if name in _NAMES:
            stacked = "{l}" in _NAMES[name]
            per = shape[1:] if stacked else shape
            step = int(np.prod(per))
            for layer in range(L if stacked else 1):
                heads = {"wq": H, "wk": KV}.get(name)
                where = offset + 4 * layer * step
                source = f"{name}[{layer}]" if stacked else name
                tensors[_NAMES[name].replace("{l}", str(layer))] = Tensor(
                    "F32", tuple(per), source, _reader(path, where, per, heads))
        else:
            ignored.append(name)
        offset += 4 * count
    for name, n, shape in quantized:
        heads = {"wq": H, "wk": KV}.get(name)
        for layer in range(n):
            source = f"{name}[{layer}]" if n > 1 else name
            blocks = _blocks_reader(path, source, offset, shape, group, heads)
            tensors[_NAMES[name].replace("{l}", str(layer))] = Tensor(
                "Q8", shape, source, lambda blocks=blocks: blocks().dequantize().astype(np.float64), blocks=blocks)
            offset += shape[0] * shape[1] + 4 * shape[0] * (shape[1] // group)
    if shared:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    fields = {"vocab": params["vocab_size"], "dim": params["dim"], "heads": H, "kv_heads": KV, "layers": L,
              "mlp": params["hidden_dim"], "eps": 1e-5, "theta": 10000.0}
    return Checkpoint(path, "llama2c", "llama", fields, tensors, ignored, params["seq_len"], {}, [path], path.name,
                      weights=("q8", group) if version == 2 else None)


def _reader(path: Path, offset: int, shape: tuple[int, ...], heads: int | None):
    def read() -> np.ndarray:
        values = np.fromfile(path, dtype="<f4", count=int(np.prod(shape)), offset=offset).astype(np.float64)
        values = values.reshape(shape)
        return interleaved_to_half(values, heads) if heads is not None else values

    return read


def _blocks_reader(path: Path, source: str, offset: int, shape: tuple[int, int], group: int,
                   heads: int | None):
    """The reader of one version-2 tensor: a q8 QuantizedTensor (rows permuted to
    Hugging Face's order for wq and wk: values and scales together, whole rows)."""

    def read():
        from exactc.exporter import quant

        rows, k = shape
        values = np.fromfile(path, dtype=np.int8, count=rows * k, offset=offset).reshape(rows, k)
        scales = np.fromfile(path, dtype="<f4", count=rows * (k // group), offset=offset + rows * k)
        scales = scales.astype(np.float32).reshape(rows, k // group)
        finite_scales(path, source, scales, "group")  # rows as stored, before the q/k permutation
        if heads is not None:
            values, scales = interleaved_to_half(values, heads), interleaved_to_half(scales, heads)
        return quant.QuantizedTensor("q8", group, k, values, scales)

    return read


def write(path: str | Path, tensors: Mapping[str, np.ndarray], fields: Mapping[str, int], seq_len: int,
          version: int = 0, shared: bool | None = None, group: int = 64) -> Path:
    """A llama2.c .bin file of a Llama given under Hugging Face names (f32 values; q/k
    rows in Hugging Face's order, permuted back to llama2.c's). `fields`: exactc's
    llama Config fields (vocab, dim, heads, kv_heads, layers, mlp). `shared`: the
    classifier is the token embedding (default: when lm_head.weight equals it).
    Version 2 quantizes in groups of `group` with exactc's q8 quantizer (export.py's
    rounds ties to even, exactc's away from zero: they differ on exact ties only)."""
    if version not in (0, 1, 2):
        raise ValueError(f"llama2.c version {version}: write 0 (legacy), 1 or 2")
    D, H, KV, L = fields["dim"], fields["heads"], fields["kv_heads"], fields["layers"]
    params = {"dim": D, "hidden_dim": fields["mlp"], "n_layers": L, "n_heads": H, "n_kv_heads": KV,
              "vocab_size": fields["vocab"], "seq_len": seq_len}
    f32 = {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}
    if shared is None:
        shared = "lm_head.weight" not in f32 or np.array_equal(f32["lm_head.weight"], f32["model.embed_tokens.weight"])
    hd = D // H
    inv = 1.0 / (10000.0 ** (np.arange(0, hd, 2)[: hd // 2].astype(np.float32) / hd))
    angles = np.outer(np.arange(seq_len, dtype=np.float32), inv).astype(np.float32)
    chunks = []
    for name, shape in _layout(params, version, shared):
        if name == "freq_cis_real":
            chunks.append(np.cos(angles))
            continue
        if name == "freq_cis_imag":
            chunks.append(np.sin(angles))
            continue
        hf = _NAMES[name]
        heads = {"wq": H, "wk": KV}.get(name)
        if "{l}" in hf:
            parts = [f32[hf.replace("{l}", str(layer))] for layer in range(L)]
            if heads is not None:
                parts = [half_to_interleaved(p, heads) for p in parts]
            array = np.stack(parts)
        else:
            array = f32[hf]
        if array.shape != tuple(shape):
            raise ValueError(f"{hf} is {array.shape}; llama2.c's {name} is {shape}")
        chunks.append(array)
    if version == 2:
        from exactc.exporter import quant

        for name, n, shape in _quantized_layout(params, shared):
            hf = _NAMES[name]
            heads = {"wq": H, "wk": KV}.get(name)
            for layer in range(n):
                w = f32[hf.replace("{l}", str(layer))]
                w = half_to_interleaved(w, heads) if heads is not None else w
                qt = quant.quantize_tensor(f"{name}[{layer}]", w, "q8", group)
                chunks += [qt.values, qt.scales]
        header = struct.pack("<Ii7iBi", MAGIC, 2, D, fields["mlp"], L, H, KV, fields["vocab"], seq_len, int(shared),
                             group)
        header += b"\0" * (HEADER_V1 - len(header))
    elif version == 0:
        header = struct.pack("<7i", D, fields["mlp"], L, H, KV, fields["vocab"] if shared else -fields["vocab"], seq_len)
    else:
        header = struct.pack("<Ii7iB", MAGIC, 1, D, fields["mlp"], L, H, KV, fields["vocab"], seq_len, int(shared))
        header += b"\0" * (HEADER_V1 - len(header))
    path = Path(path)
    with open(path, "wb") as f:
        f.write(header)
        for array in chunks:  # int8 values as they are, everything else f32
            f.write(np.ascontiguousarray(array, dtype=np.int8 if array.dtype == np.int8 else "<f4").tobytes())
    return path
