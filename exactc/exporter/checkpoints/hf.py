"""Hugging Face folders: config.json and model.safetensors (or a sharded index).

- GPT-2 (`model_type` gpt2): Conv1D weights are stored (in, out); exactc's `linear`
  takes (out, in), so c_attn, c_proj and c_fc weights are transposed when read (their
  stored shape is checked as stored). Names without `transformer.` (GPT2Model, the hub's
  gpt2) get it; the causal-mask buffers `attn.bias`/`attn.masked_bias` are ignored.
  `activation_function` gelu_new or gelu_pytorch_tanh is exactc's gelu_tanh.
- BERT (`model_type` bert): names without `bert.`; the pooler, the pretraining heads
  (`cls.`) and the `position_ids` buffer are ignored. A sentence-transformers folder
  (modules.json) decides the `embed` entry: Transformer, then Pooling with mean tokens
  only, then Normalize is exactc's embed (masked mean, l2norm); any other pipeline (CLS
  or max pooling, no Normalize, a Dense module) is refused by name for `embed`.
- Llama (`model_type` llama): Hugging Face stores q/k rows in the rotate_half order,
  which is exactc's rope pairing "half": the weights are used as they are. A tied head
  (`tie_word_embeddings`) reads model.embed_tokens.weight as lm_head.weight.

Whatever exactc does not compute (another activation, rope scaling, biases on
attention, relative positions, ...) is refused with the config key that asks for it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np

from exactc.exporter.checkpoints.base import (
    Checkpoint,
    CheckpointError,
    Tensor,
    boolean,
    finite_float,
    json_kind,
    json_object,
    positive_int,
    read_json,
)

MODEL_TYPES = {"gpt2": "gpt", "bert": "bert", "llama": "llama"}
ARCHITECTURES = {
    "gpt": ("GPT2LMHeadModel", "GPT2Model"),
    "bert": ("BertModel", "BertForMaskedLM", "BertForPreTraining"),
    "llama": ("LlamaForCausalLM", "LlamaModel"),
}

_NUMPY = {"F64": np.float64, "F32": np.float32, "F16": np.float16}
_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
          "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


# ---- safetensors ---------------------------------------------------------------------------

MAX_HEADER = 100_000_000  # bytes: the safetensors library's limit, as in exactc's C reader


@dataclasses.dataclass(frozen=True)
class Stored:
    """One entry of a safetensors header, checked: its name, dtype tag, shape and byte
    range [begin, end) relative to the data's start."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def regular_file(path: Path) -> bool:
    """Whether `path` names a regular file (through symlinks): False if nothing is there,
    and a refusal saying what it is if it is something else. Such a file is never opened:
    a FIFO blocks its reader until someone writes, and /dev/zero has no end."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode):
        return True
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    link = f" (a symlink to {os.readlink(path)})" if path.is_symlink() else ""
    raise CheckpointError(f"{path} is {kind}{link}, not a regular file; exactc reads a checkpoint from regular files")


def read_header(path: Path) -> tuple[dict[str, Stored], int]:
    """The tensor index of a .safetensors file (name -> Stored) and where its data starts.
    Each entry is checked (dtype a string, shape and offsets non-negative integers, the
    byte count of a known dtype), no name twice, and the entries tile the data section
    exactly: sorted by offset, the first begins at 0, each where the one before ends, the
    last at the file's end, as the safetensors library and exactc's C reader require."""
    entries, data, _ = read_header_and_metadata(path)
    return entries, data


def read_header_and_metadata(path: Path) -> tuple[dict[str, Stored], int, dict[str, str]]:
    """read_header's index and data offset, and the header's __metadata__ ({} if none)."""
    regular_file(path)  # a shard that is a FIFO or a device: refused before it is opened
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: {len(head)} bytes, too short for a .safetensors file (its first 8 "
                                      "bytes are the header length)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER:
                raise CheckpointError(f"{path}: header length {n} is more than the {MAX_HEADER:,} bytes a "
                                      "safetensors header may have")
            if n > size - 8:
                raise CheckpointError(f"{path}: header length {n} runs past the end of the file ({size} bytes)")
            raw = f.read(n)
    except OSError as exc:
        raise CheckpointError(f"{path}: not a readable .safetensors file ({exc.strerror or exc})") from None
    header = json_object(raw, f"{path}: the header")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and (not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values())):
        raise CheckpointError(f"{path}: __metadata__ must be an object of strings (or null)")
    entries = {name: _stored(path, name, entry) for name, entry in header.items()}
    _check_tiling(path, list(entries.values()), size - 8 - n)
    return entries, 8 + n, metadata or {}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _stored(path: Path, name: str, entry: Any) -> Stored:
    where = f"{path}: tensor {name}"
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
        raise CheckpointError(f"{where} has no dtype, shape and data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str):
        raise CheckpointError(f"{where}: dtype {dtype!r} must be a string such as \"F32\"")
    if not isinstance(shape, list) or not all(_count(d) for d in shape):
        raise CheckpointError(f"{where}: shape {shape!r} must be a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_count(o) for o in offsets)
            or offsets[0] > offsets[1]):
        raise CheckpointError(f"{where}: data_offsets {offsets!r} must be [begin, end], integers with "
                              "0 <= begin <= end")
    begin, end = offsets
    if dtype in _SIZES and end - begin != math.prod(shape) * _SIZES[dtype]:
        raise CheckpointError(f"{where}: data_offsets [{begin}, {end}] hold {end - begin} bytes; a {dtype} tensor "
                              f"of shape {tuple(shape)} needs {math.prod(shape) * _SIZES[dtype]}")
    return Stored(name, dtype, tuple(shape), begin, end)


def _check_tiling(path: Path, entries: list[Stored], data_len: int) -> None:
    at, before = 0, None
    for t in sorted(entries, key=lambda t: (t.begin, t.end, t.name)):
        if t.begin > at:
            raise CheckpointError(f"{path}: tensor {t.name}: data_offsets [{t.begin}, {t.end}] leave data bytes "
                                  f"[{at}, {t.begin}) to no tensor; a file's tensors must tile its data section "
                                  "exactly")
        if t.begin < at:
            raise CheckpointError(f"{path}: tensor {t.name}: data_offsets [{t.begin}, {t.end}] overlap tensor "
                                  f"{before.name}'s [{before.begin}, {before.end}]; a file's tensors must tile its "
                                  "data section exactly")
        at, before = t.end, t
    if at > data_len:
        raise CheckpointError(f"{path}: tensor {before.name}: data_offsets [{before.begin}, {before.end}] outside "
                              f"the {data_len} data bytes (a header length too large, or a truncated file)")
    if at < data_len:
        raise CheckpointError(f"{path}: the tensors end at data byte {at} and the file goes on (a header length "
                              "too small, or trailing bytes); a file's tensors must tile its data section exactly")


def tensor_reader(path: Path, entry: Stored, data: int, transform: Callable[[np.ndarray], np.ndarray] | None = None):
    """A function reading one stored tensor as f64 (exact), in exactc's orientation."""

    def read() -> np.ndarray:
        raw = np.fromfile(path, dtype=np.uint8, count=entry.end - entry.begin, offset=data + entry.begin)
        if entry.dtype == "BF16":
            values = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            values = raw.view(np.dtype(_NUMPY[entry.dtype]).newbyteorder("<"))
        values = values.astype(np.float64).reshape(entry.shape)
        return transform(values) if transform is not None else values

    return read


def safetensors_files(folder: Path) -> list[Path]:
    single = folder / "model.safetensors"
    if regular_file(single):
        return [single]
    index = folder / "model.safetensors.index.json"
    if regular_file(index):
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(f"{index}: weight_map must be an object tensor name -> shard file name, not "
                                  f"{json_kind(weight_map)}")
        for name in sorted(set(weight_map.values())):
            if name in ("", ".", "..") or "/" in name or "\\" in name:
                raise CheckpointError(f"{index}: weight_map names the shard {name!r}; a shard is a file name in "
                                      f"{folder}")
        return [folder / name for name in sorted(set(weight_map.values()))]
    if (folder / "pytorch_model.bin").is_file():
        raise CheckpointError(
            f"{folder} holds pytorch_model.bin only: exactc reads .safetensors (convert it with transformers: "
            "model.save_pretrained(dir, safe_serialization=True))")
    raise CheckpointError(f"{folder}: no model.safetensors (or model.safetensors.index.json)")


# ---- the folder ----------------------------------------------------------------------------


def load(folder: Path) -> Checkpoint:
    modules = _sentence_transformers(folder)
    model_folder = folder / modules["transformer"] if modules else folder
    config_path = model_folder / "config.json"
    if not regular_file(config_path):
        raise CheckpointError(f"{folder}: no config.json (a Hugging Face checkpoint folder has one)")
    config = read_json(config_path)
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise CheckpointError(f"{config_path}: model_type {model_type!r} is not one exactc reads "
                              f"({', '.join(MODEL_TYPES)})")
    model = MODEL_TYPES[model_type]
    archs = config.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise CheckpointError(f"{config_path}: architectures={archs!r} must be a list of class names, e.g. "
                              f"[{ARCHITECTURES[model][0]!r}]")
    unknown = [a for a in archs if a not in ARCHITECTURES[model]]
    if unknown:
        raise CheckpointError(f"{config_path}: architectures {unknown} are not {model} models exactc reads "
                              f"({', '.join(ARCHITECTURES[model])})")
    where = str(config_path)
    fields, max_tokens = {"gpt": _gpt_fields, "bert": _bert_fields, "llama": _llama_fields}[model](where, config)

    files = safetensors_files(model_folder)
    stored: dict[str, tuple[Path, Stored, int]] = {}
    for path in files:
        header, data = read_header(path)
        for name, entry in header.items():
            if name in stored:
                raise CheckpointError(f"{path}: tensor {name} is also in {stored[name][0]}; a tensor is stored once")
            stored[name] = (path, entry, data)
    rename = {"gpt": _gpt_name, "bert": _bert_name, "llama": _llama_name}[model]
    tensors: dict[str, Tensor] = {}
    ignored: list[str] = []
    for source, (path, entry, data) in stored.items():
        name = rename(source, fields)
        if name is None:
            ignored.append(source)
            continue
        transform, expected = None, (lambda shape: shape)
        if model == "gpt" and _CONV1D.search(name):
            transform, expected = (lambda a: np.ascontiguousarray(a.T)), (lambda shape: (shape[1], shape[0]))
        tensors[name] = Tensor(entry.dtype, entry.shape, source, tensor_reader(path, entry, data, transform), expected)
    tied_llama = model == "llama" and boolean(where, "tie_word_embeddings", config.get("tie_word_embeddings", False))
    if tied_llama and "model.embed_tokens.weight" in tensors:
        if "lm_head.weight" in tensors:
            ignored.append(tensors["lm_head.weight"].source)  # tied: the head is the embedding
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    # A plain BertModel folder may be exported with embed (exactc's masked mean, then
    # l2norm); a sentence-transformers folder only if its pipeline is that.
    entries = modules["refusals"] if modules else {}
    name = folder.name if folder.name not in ("model", "") else folder.parent.name
    return Checkpoint(folder, "sentence-transformers" if modules else "hf", model, fields, tensors, sorted(ignored),
                      max_tokens, entries, files + [config_path], str(name))


def _sentence_transformers(folder: Path) -> dict[str, Any] | None:
    """A sentence-transformers folder's pipeline: where the Transformer module is, and
    why `embed` is refused (if it is)."""
    path = folder / "modules.json"
    if not path.is_file():
        return None
    mods = read_json(path, kind=list)
    if not all(isinstance(m, dict) and isinstance(m.get("type"), str) and isinstance(m.get("path", ""), str)
               for m in mods):
        raise CheckpointError(f"{path}: not a sentence-transformers module list (each module an object with a "
                              "type and a path, both strings)")
    kinds = [(m["type"].rsplit(".", 1)[-1], m.get("path", "")) for m in mods]
    if not kinds or kinds[0][0] != "Transformer":
        raise CheckpointError(f"{path}: the first module is {kinds[0][0] if kinds else 'missing'}; exactc reads "
                              "a Transformer module first")
    refusals: dict[str, str] = {}
    names = [k for k, _ in kinds[1:]]
    if names[:1] == ["Pooling"]:
        pool_path = folder / kinds[1][1] / "config.json"
        pooling = read_json(pool_path)
        modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode_") and v)
        if modes != ["pooling_mode_mean_tokens"]:
            refusals["embed"] = (f"{pool_path}: pooling {', '.join(modes) or 'none'}; exactc's embed entry pools by "
                                 "masked mean only (pooling_mode_mean_tokens); export --entry forward instead")
    else:
        refusals["embed"] = f"{path}: no Pooling module after the Transformer; exactc's embed entry pools by mean"
    if not refusals and names[1:] != ["Normalize"]:
        rest = ", ".join(names[1:]) or "nothing"
        refusals["embed"] = (f"{path}: Pooling is followed by {rest}; exactc's embed entry is Pooling (mean) then "
                             "Normalize only")
    return {"transformer": kinds[0][1], "refusals": refusals}


def _object_field(where: str, config: dict[str, Any], key: str) -> dict[str, Any]:
    """An optional object-valued config key ({} when absent or null)."""
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise CheckpointError(f"{where}: {key} must be an object, not {json_kind(value)}")
    return value


def _need(where: str, config: dict[str, Any], key: str, wanted: Any, default: Any = None) -> None:
    value = config.get(key, default)
    if value != wanted and not (isinstance(wanted, tuple) and value in wanted):
        raise CheckpointError(f"{where}: {key}={value!r} is not supported (exactc computes {key}={wanted!r})")


def _get(where: str, config: dict[str, Any], key: str) -> Any:
    if key not in config:
        raise CheckpointError(f"{where}: no {key}")
    return config[key]


def _gpt_fields(where: str, c: dict[str, Any]) -> tuple[dict[str, Any], int]:
    _need(where, c, "activation_function", ("gelu_new", "gelu_pytorch_tanh"), "gelu_new")
    _need(where, c, "scale_attn_weights", True, True)
    _need(where, c, "scale_attn_by_inverse_layer_idx", False, False)
    _need(where, c, "add_cross_attention", False, False)
    dim = positive_int(where, "n_embd", _get(where, c, "n_embd"))
    positions = positive_int(where, "n_positions", _get(where, c, "n_positions"))
    fields = {
        "vocab": positive_int(where, "vocab_size", _get(where, c, "vocab_size")),
        "positions": positions,
        "dim": dim,
        "heads": positive_int(where, "n_head", _get(where, c, "n_head")),
        "layers": positive_int(where, "n_layer", _get(where, c, "n_layer")),
        "mlp": positive_int(where, "n_inner", c.get("n_inner") or 4 * dim),
        "eps": finite_float(where, "layer_norm_epsilon", c.get("layer_norm_epsilon", 1e-5)),
        "tied": boolean(where, "tie_word_embeddings", c.get("tie_word_embeddings", True)),
    }
    return fields, positions


def _bert_fields(where: str, c: dict[str, Any]) -> tuple[dict[str, Any], int]:
    _need(where, c, "hidden_act", "gelu", "gelu")
    _need(where, c, "position_embedding_type", "absolute", "absolute")
    _need(where, c, "is_decoder", False, False)
    positions = positive_int(where, "max_position_embeddings", _get(where, c, "max_position_embeddings"))
    fields = {
        "vocab": positive_int(where, "vocab_size", _get(where, c, "vocab_size")),
        "positions": positions,
        "type_vocab": positive_int(where, "type_vocab_size", c.get("type_vocab_size", 2)),
        "dim": positive_int(where, "hidden_size", _get(where, c, "hidden_size")),
        "heads": positive_int(where, "num_attention_heads", _get(where, c, "num_attention_heads")),
        "layers": positive_int(where, "num_hidden_layers", _get(where, c, "num_hidden_layers")),
        "mlp": positive_int(where, "intermediate_size", _get(where, c, "intermediate_size")),
        "eps": finite_float(where, "layer_norm_eps", c.get("layer_norm_eps", 1e-12)),
    }
    return fields, positions


def _llama_fields(where: str, c: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    _need(where, c, "hidden_act", "silu", "silu")
    _need(where, c, "attention_bias", False, False)
    _need(where, c, "mlp_bias", False, False)
    _need(where, c, "pretraining_tp", 1, 1)
    dim = positive_int(where, "hidden_size", _get(where, c, "hidden_size"))
    heads = positive_int(where, "num_attention_heads", _get(where, c, "num_attention_heads"))
    if c.get("head_dim") not in (None, dim // heads):
        raise CheckpointError(f"{where}: head_dim={c['head_dim']} is not hidden_size / num_attention_heads = "
                              f"{dim // heads}; exactc's llama derives it")
    # rope: transformers 5 keeps theta and type in rope_parameters, 4.x in rope_theta/rope_scaling
    rope = _object_field(where, c, "rope_parameters")
    scaling = _object_field(where, c, "rope_scaling")
    kind = rope.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if kind != "default":
        raise CheckpointError(f"{where}: rope_type={kind!r} (rope scaling) is not supported; exactc's rope is "
                              "the default, unscaled")
    theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
    fields = {
        "vocab": positive_int(where, "vocab_size", _get(where, c, "vocab_size")),
        "dim": dim,
        "heads": heads,
        "kv_heads": positive_int(where, "num_key_value_heads", c.get("num_key_value_heads") or heads),
        "layers": positive_int(where, "num_hidden_layers", _get(where, c, "num_hidden_layers")),
        "mlp": positive_int(where, "intermediate_size", _get(where, c, "intermediate_size")),
        "eps": finite_float(where, "rms_norm_eps", c.get("rms_norm_eps", 1e-6)),
        "theta": finite_float(where, "rope_theta", theta),
    }
    positions = c.get("max_position_embeddings")
    return fields, positive_int(where, "max_position_embeddings", positions) if positions is not None else None


# ---- names ---------------------------------------------------------------------------------

_CONV1D = re.compile(r"\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$")


def _gpt_name(name: str, fields: dict[str, Any]) -> str | None:
    if re.search(r"\.attn\.(masked_)?bias$", name):
        return None  # the causal mask buffers of older GPT-2 checkpoints
    if name.split(".")[0] in ("h", "wte", "wpe", "ln_f"):
        name = "transformer." + name
    if name == "lm_head.weight" and fields["tied"]:
        return None  # the head is transformer.wte.weight (tie_word_embeddings)
    return name


def _bert_name(name: str, fields: dict[str, Any]) -> str | None:
    if name.startswith("bert."):
        name = name[len("bert."):]
    if name.startswith(("pooler.", "cls.")) or name in ("embeddings.position_ids", "embeddings.token_type_ids"):
        return None  # the pooler and pretraining heads: no exactc entry reads them; buffers
    return name


def _llama_name(name: str, fields: dict[str, Any]) -> str | None:
    if name.endswith("rotary_emb.inv_freq"):
        return None  # a buffer: exactc computes its rope table from rope_theta
    if name.split(".")[0] in ("layers", "embed_tokens", "norm"):
        name = "model." + name
    return name
