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

import json
import re
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np

from exactc.exporter.checkpoints import Checkpoint, CheckpointError, Tensor, finite_float, positive_int

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


def read_header(path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """The tensor index of a .safetensors file (name -> dtype, shape, offsets) and where
    its data starts; every entry checked against the file's size."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: too short for a .safetensors file")
            (n,) = struct.unpack("<Q", head)
            size = path.stat().st_size
            if n > size - 8:
                raise CheckpointError(f"{path}: header length {n} runs past the end of the file ({size} bytes)")
            header = json.loads(f.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: not a readable .safetensors file ({exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the header is not a JSON object")
    header.pop("__metadata__", None)
    data = 8 + n
    for name, entry in header.items():
        try:
            dtype, shape, (lo, hi) = entry["dtype"], tuple(int(d) for d in entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: tensor {name} has no dtype, shape and data_offsets") from None
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if dtype in _SIZES and (hi - lo != count * _SIZES[dtype] or lo < 0 or data + hi > size):
            raise CheckpointError(f"{path}: tensor {name} ({dtype} {shape}) has data_offsets [{lo}, {hi}] that do not fit")
    return header, data


def tensor_reader(path: Path, entry: dict[str, Any], data: int, transform: Callable[[np.ndarray], np.ndarray] | None = None):
    """A function reading one stored tensor as f64 (exact), in exactc's orientation."""

    def read() -> np.ndarray:
        lo, hi = entry["data_offsets"]
        shape = tuple(entry["shape"])
        raw = np.fromfile(path, dtype=np.uint8, count=hi - lo, offset=data + lo)
        if entry["dtype"] == "BF16":
            values = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            values = raw.view(np.dtype(_NUMPY[entry["dtype"]]).newbyteorder("<"))
        values = values.astype(np.float64).reshape(shape)
        return transform(values) if transform is not None else values

    return read


def safetensors_files(folder: Path) -> list[Path]:
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError) as exc:
            raise CheckpointError(f"{index}: not a safetensors index ({exc})") from None
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
    try:
        config = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{folder}: no config.json (a Hugging Face checkpoint folder has one)") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{config_path}: not readable JSON ({exc})") from None
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise CheckpointError(f"{config_path}: model_type {model_type!r} is not one exactc reads "
                              f"({', '.join(MODEL_TYPES)})")
    model = MODEL_TYPES[model_type]
    archs = config.get("architectures") or []
    unknown = [a for a in archs if a not in ARCHITECTURES[model]]
    if unknown:
        raise CheckpointError(f"{config_path}: architectures {unknown} are not {model} models exactc reads "
                              f"({', '.join(ARCHITECTURES[model])})")
    where = str(config_path)
    fields, max_tokens = {"gpt": _gpt_fields, "bert": _bert_fields, "llama": _llama_fields}[model](where, config)

    files = safetensors_files(model_folder)
    stored: dict[str, tuple[Path, dict[str, Any], int]] = {}
    for path in files:
        header, data = read_header(path)
        for name, entry in header.items():
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
        tensors[name] = Tensor(entry["dtype"], tuple(int(d) for d in entry["shape"]), source,
                               tensor_reader(path, entry, data, transform), expected)
    if model == "llama" and config.get("tie_word_embeddings", False) and "model.embed_tokens.weight" in tensors:
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
    try:
        mods = json.loads(path.read_text())
        kinds = [(m["type"].rsplit(".", 1)[-1], m.get("path", "")) for m in mods]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{path}: not a sentence-transformers module list ({exc})") from None
    if not kinds or kinds[0][0] != "Transformer":
        raise CheckpointError(f"{path}: the first module is {kinds[0][0] if kinds else 'missing'}; exactc reads "
                              "a Transformer module first")
    refusals: dict[str, str] = {}
    names = [k for k, _ in kinds[1:]]
    if names[:1] == ["Pooling"]:
        pool_path = folder / kinds[1][1] / "config.json"
        try:
            pooling = json.loads(pool_path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{pool_path}: the pooling config is not readable ({exc})") from None
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
        "tied": bool(c.get("tie_word_embeddings", True)),
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
    rope = c.get("rope_parameters") or {}
    scaling = c.get("rope_scaling") or {}
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
