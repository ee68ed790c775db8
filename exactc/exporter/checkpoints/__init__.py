"""Real checkpoints: the parameters of a built-in architecture read from the files people have.

    from exactc.exporter import checkpoints
    ckpt = checkpoints.load("path/to/all-MiniLM-L6-v2", model="bert")   # or a llama2.c .bin
    program = models.build("bert", "embed", ckpt.overrides({"tokens": 12}))
    params = ckpt.parameters(program, "f32")        # ParamSpec.name -> stacked site array

The readers: `hf` (a Hugging Face folder: config.json and model.safetensors, or a
sharded index; GPT-2, BERT with sentence-transformers folders, Llama), `llama2c`
(llama2.c's .bin files, legacy and version-1 headers), `gguf_file`, and `trained` (the
.safetensors file `exactc train` writes, its weights under exactc's names). Each maps its config onto the
exactc Config fields (refusing, by name, what exactc does not compute) and renames its
tensors to exactc's names and orientations (weights (out, in); GPT-2's Conv1D
transposed; llama2.c's interleaved q/k rows permuted to Hugging Face's half layout).

`Checkpoint.check` compares every tensor's name, shape and dtype with the ParamSpecs the
config gives, before anything runs, and lists every missing, extra and mis-shaped tensor
in one CheckpointError. Values are converted as reals: each stored value (f64, f32, f16
or bf16, all exact in f64) is rounded to the site type as a drawn parameter is
(real -> f64 -> f32 -> bf16).
"""

from __future__ import annotations

from pathlib import Path

from exactc.exporter import models
from exactc.exporter.checkpoints import hf, trained
from exactc.exporter.checkpoints.base import (FLOAT_DTYPES, Checkpoint, CheckpointError, Tensor, boolean,
                                              finite_float, finite_scales, json_kind, json_object, positive_int,
                                              read_json)

__all__ = ["load", "FLOAT_DTYPES", "Checkpoint", "CheckpointError", "Tensor", "boolean", "finite_float",
           "finite_scales", "json_kind", "json_object", "positive_int", "read_json"]


def load(path: str | Path, model: str | None = None) -> Checkpoint:
    """Read a checkpoint's config and tensor index (not yet its values): a Hugging Face
    folder (or its config.json), a GGUF file, a llama2.c .bin file or a checkpoint of
    `exactc train`. `model`, when given, must be the checkpoint's architecture."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path}: no such file or directory")
    if path.is_file() and trained.looks_like(path):
        ckpt = trained.load(path)  # exactc train's checkpoint: one file, its weights the parameters
    else:
        ckpt = _load_other(path)
    if model is not None and model != ckpt.model:
        models.architecture(model)
        raise CheckpointError(f"checkpoint {path} holds a {ckpt.model} model ({ckpt.name}); not {model}")
    return ckpt


def _load_other(path: Path) -> Checkpoint:
    """A Hugging Face folder (or one of its files), a GGUF file or a llama2.c .bin."""
    if path.is_file() and (path.name == "config.json" or path.suffix == ".safetensors" or
                           path.name == "model.safetensors.index.json"):
        path = path.parent  # a file of a Hugging Face folder: the folder
    if path.is_dir():
        return hf.load(path)
    if not hf.regular_file(path):  # a FIFO would block the format's sniffing, /dev/zero never end it
        raise CheckpointError(f"checkpoint {path}: no such file or directory")
    return _load_file(path)


def _load_file(path: Path) -> Checkpoint:
    """A checkpoint that is one file: GGUF or llama2.c's .bin. Their readers are imported
    here, for a file: a Hugging Face folder's commands do without them."""
    from exactc.exporter.checkpoints import gguf_file, llama2c

    if gguf_file.looks_like(path):
        return gguf_file.load(path)
    if llama2c.looks_like(path):
        return llama2c.load(path)
    raise CheckpointError(
        f"checkpoint {path}: not a Hugging Face folder (config.json + model.safetensors), a GGUF file or a "
        "llama2.c .bin file (a header of seven int32s, or the version-1 magic 0x616b3432)")
