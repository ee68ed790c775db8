"""Training checkpoints, as `exactc train` writes them (docs/semantics.md section 17,
"The training loop"): one .safetensors file whose __metadata__ holds, under
"exactc.train", a JSON object of the run (the model, its config, the settings, the step,
the data position). Its tensors: the weights under exactc's names (one tensor per layer,
weights (out, in)), AdamW's moments under "adamw.m." and "adamw.v." plus the same names,
and the loss of every step so far as "train.loss" (F64). Read as a checkpoint, its
weights are the parameters (`exactc export --checkpoint FILE`); `exactc train --resume`
reads the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from exactc.exporter.checkpoints import hf
from exactc.exporter.checkpoints.base import Checkpoint, CheckpointError, Tensor

KEY = "exactc.train"
MOMENTS = ("adamw.m.", "adamw.v.")
LOSSES = "train.loss"
MODELS = ("gpt", "llama")


def looks_like(path: Path) -> bool:
    """Whether `path` is a .safetensors file whose metadata names a training run."""
    if path.suffix != ".safetensors" or not hf.regular_file(path):
        return False
    try:
        _, _, metadata = hf.read_header_and_metadata(path)
    except CheckpointError:
        return False  # not one: the Hugging Face reader says what is wrong with the file
    return KEY in metadata


def read(path: Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The run's record (the metadata's JSON object, its model and config checked) and
    every stored tensor under its stored name."""
    entries, data, metadata = hf.read_header_and_metadata(path)
    if KEY not in metadata:
        raise CheckpointError(f"{path}: not a checkpoint of exactc train (its __metadata__ has no {KEY!r})")
    try:
        record = json.loads(metadata[KEY])
    except ValueError as exc:
        raise CheckpointError(f"{path}: __metadata__ {KEY!r} is not JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("model") not in MODELS or not isinstance(record.get("config"), dict):
        raise CheckpointError(
            f"{path}: __metadata__ {KEY!r} must be an object with a model (gpt or llama) and a config"
        )
    tensors = {name: Tensor(e.dtype, e.shape, name, hf.tensor_reader(path, e, data)) for name, e in entries.items()}
    return record, tensors


def load(path: Path) -> Checkpoint:
    """The weights of a training checkpoint as a Checkpoint (the moments and losses aside)."""
    record, tensors = read(path)
    fields = {key: value for key, value in record["config"].items() if key != "tokens"}
    weights = {name: t for name, t in tensors.items() if not name.startswith(MOMENTS) and name != LOSSES}
    positions = fields.get("positions")  # GPT's learned positions bound the sequence; Llama's rope does not
    return Checkpoint(path, "exactc-train", record["model"], fields, weights, [], positions, {}, [path], path.stem)
