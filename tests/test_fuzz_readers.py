"""Fuzzing the Python readers: a checkpoint's safetensors header, config.json, llama2.c
header and a plan's JSON. For every drawn file the answer is the reader's own error (a
CheckpointError, ModelError or PlanError, on one line) or a correct result, never another
exception: no TypeError from a list where a string was expected, no RecursionError, no
OverflowError, no MemoryError.

A correct result is checked against what it claims: a safetensors index the
`safetensors` library reads the same way (names, dtypes, shapes, bytes), a config whose
fields are within the bounds models.config states and equal to the file's, a llama2.c
checkpoint whose tensors read at their shapes, a plan that survives its own JSON. The
strategies are in exactc/strategies/files.py; the fixed table of bad inputs that once
failed is tests/test_bad_inputs.py.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, example, given, settings
from safetensors import SafetensorError, safe_open

from exactc.exporter import checkpoints, models
from exactc.exporter.checkpoints import CheckpointError, hf, llama2c
from exactc.exporter.kernels import plans
from exactc.exporter.kernels.plans import PlanError
from exactc.exporter.models import ModelError
from exactc.strategies import files

# Each example is a small file and a parse: many of them cost seconds, not minutes.
FUZZ = settings(max_examples=200)


@pytest.fixture(scope="module")
def work():
    with tempfile.TemporaryDirectory(prefix="exactc-fuzz-") as tmp:
        yield Path(tmp)


def one_line(exc: Exception) -> None:
    """A refusal: one line, counted by its first words (--hypothesis-show-statistics)."""
    assert str(exc) and "\n" not in str(exc), repr(exc)
    event(f"refused: {type(exc).__name__}")


def library_index(path: Path):
    """name -> (dtype, shape, bytes) as the safetensors library reads the file, or None
    if it refuses it."""
    try:
        with safe_open(str(path), "np") as f:
            return {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape())) for k in f.keys()}
    except (SafetensorError, ValueError, OSError):
        return None


@FUZZ
@given(files.safetensors_images())
@example(b"\x0c\0\0\0\0\0\0\0" + b"[" * 12)
@example(b"\x02\0\0\0\0\0\0\0{}\0")
def test_safetensors_headers(work, image):
    path = work / "model.safetensors"
    path.write_bytes(image)
    by_library = library_index(path)
    try:
        entries, start = hf.read_header(path)
    except CheckpointError as exc:
        one_line(exc)
        assert str(path) in str(exc)
        # The library refuses it too, unless exactc refused a name given twice (the
        # library keeps the last) or a NaN it will not parse.
        assert by_library is None or "appears twice" in str(exc), (str(exc), by_library)
        return
    event("read")
    assert by_library is not None, "exactc read a file the safetensors library refuses"
    assert {k: (e.dtype, e.shape) for k, e in entries.items()} == by_library
    data = image[start:]
    ranges = sorted((e.begin, e.end) for e in entries.values())
    assert sum(hi - lo for lo, hi in ranges) == len(data)  # tiled: no gap, no overlap, nothing after
    for entry in entries.values():
        if entry.dtype in ("F64", "F32", "F16"):
            values = hf.tensor_reader(path, entry, start)()
            stored = np.frombuffer(data[entry.begin:entry.end], dtype=hf._NUMPY[entry.dtype]).reshape(entry.shape)
            assert np.array_equal(values, stored.astype(np.float64), equal_nan=True)


@FUZZ
@given(files.hf_configs())
@example(["GPT2LMHeadModel"])
@example(dict(files.GPT2_CONFIG, architectures="GPT2LMHeadModel"))
@example(dict(files.GPT2_CONFIG, vocab_size=2_000_000_000))
def test_config_json(work, config):
    folder = work / "checkpoint"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0{}")
    try:
        ckpt = checkpoints.load(folder)
        cfg = models.config(ckpt.model, ckpt.overrides())
    except (CheckpointError, ModelError) as exc:
        one_line(exc)
        return
    event("read")
    key = {"gpt": ("n_embd", "vocab_size"), "bert": ("hidden_size", "vocab_size"),
           "llama": ("hidden_size", "vocab_size")}[ckpt.model]
    assert (cfg.dim, cfg.vocab) == (config[key[0]], config[key[1]])
    for name, value in vars(cfg).items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            assert 1 <= value <= models.MAX_COUNT, (name, value)
        else:
            assert math.isfinite(value) and value > 0, (name, value)


@FUZZ
@given(files.llama2c_files())
def test_llama2c_headers(work, image):
    path = work / "model.bin"
    path.write_bytes(image)
    try:
        ckpt = llama2c.load(path)
        cfg = models.config("llama", ckpt.overrides())
    except (CheckpointError, ModelError) as exc:
        one_line(exc)
        return
    event("read")
    assert (cfg.dim, cfg.heads, cfg.layers) == tuple(int.from_bytes(image[o:o + 4], "little", signed=True)
                                                    for o in ((0, 12, 8) if image[:4] != b"24ka" else (8, 20, 16)))
    with np.errstate(invalid="ignore"):  # drawn bytes hold signalling NaNs; widening quiets them
        for tensor in list(ckpt.tensors.values())[:4]:
            assert tensor.read().shape == tuple(tensor.shape)


@FUZZ
@given(files.plan_values())
@example([])
@example({"nests": {"linear": {"split": {"depth": 0, "pieces": [[0.5, 2]]}}}})
def test_plan_values(work, value):
    try:
        plan = plans.parse_plan(value)
    except PlanError as exc:
        one_line(exc)
    else:
        event("read")
        for name, nest_plan in plan.nests:
            assert plans.parse_nest_plan(name, nest_plan.to_json()) == nest_plan
    path = work / "plan.json"
    text = json.dumps(value).encode()
    for data in (text, text[: len(text) // 2], text.replace(b'"', b"\xff", 1)):
        path.write_bytes(data)
        try:
            plans.load_plan(path)
        except PlanError as exc:
            one_line(exc)
