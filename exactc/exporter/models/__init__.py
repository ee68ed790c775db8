"""The built-in architectures, on drawn parameters.

    from exactc.exporter import models
    program = models.build("gpt", "forward", {"layers": 2})
    params = models.draw_parameters(program, seed=0, site="f32")
    inputs = models.draw_inputs(program, seed=0, length=5)

Each architecture module (gpt, bert, llama) has a frozen `Config`, `parameters(cfg)`
(ParamSpecs with Hugging Face names), `inputs(cfg, length)`, `draw_inputs(cfg, rng,
length)` and `ENTRIES` (entry name -> function of (cfg, params, *inputs)).

The generation entries `prefill` and `decode` of gpt and llama (models/cache.py) take
the same parameters; decode's inputs are a token, its position T <= tokens - 1 (the
run-time length, given by the input's value) and a key/value cache of `tokens` rows per
run whose first T are filled (cache.decode_inputs); it writes row T in place.

An entry is traced once for every length: its inputs are (T, ...) with T the run-time
length (dims.length(cfg.tokens): 1 <= T <= tokens), and the network reads T from the
shapes of its values. The config's `tokens` is T_max.

Parameters are drawn from a seeded generator as f64 reals, then rounded to the site
type (real -> f64 -> f32 -> bf16). Nothing is drawn as zero: biases and LayerNorm
shifts that an initializer would zero are drawn too, so no output is trivially zero.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types as pytypes
from typing import Any, Mapping

import numpy as np

from exactc.exporter import backprop, dims, graph, training, types
from exactc.exporter.models import bert, cache, gpt, llama

ARCHITECTURES: dict[str, pytypes.ModuleType] = {"gpt": gpt, "bert": bert, "llama": llama}


class ModelError(ValueError):
    """An unknown model, entry or configuration field."""


def architecture(model: str) -> pytypes.ModuleType:
    try:
        return ARCHITECTURES[model]
    except KeyError:
        raise ModelError(f"unknown model {model!r}; exactc knows {', '.join(sorted(ARCHITECTURES))}") from None


# The bounds of every config: a count (vocab, dim, heads, layers, tokens, ...) is an
# integer from 1 to MAX_COUNT (token ids and positions are int32 in the programs); a
# real (eps, theta) is positive and finite; a flag is true or false. And the parameters
# hold at most MAX_PARAMETERS elements in all: the reference keeps them as f64, 32 GiB
# at this bound (raise it on a machine where that fits).
MAX_COUNT = 2**31 - 1
MAX_PARAMETERS = 2**32
# A seed of the drawn parameters and inputs: what numpy's generators take, bounded so
# that it also fits the exported manifest's JSON as an unsigned 64-bit number.
MAX_SEED = 2**64 - 1


def config(model: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """The model's Config with `overrides` (field -> value; strings are parsed as the
    field's type), every field within its bounds."""
    arch = architecture(model)
    fields = {f.name: f for f in dataclasses.fields(arch.Config)}
    values: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        if key not in fields:
            raise ModelError(f"{model} config has no field {key!r}; its fields are {', '.join(fields)}")
        default = getattr(arch.Config(), key)
        values[key] = _bounded(model, key, _parse(model, key, value, type(default)), type(default))
    cfg = arch.Config(**values)
    try:
        cfg.check()
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    count = sum(math.prod(spec.full_shape) for spec in arch.parameters(cfg))
    if count > MAX_PARAMETERS:
        raise ModelError(f"{model} config: the parameters have {count:,} elements; exactc exports at most "
                         f"{MAX_PARAMETERS:,} (2^32)")
    return cfg


def _parse(model: str, key: str, value: Any, kind: type) -> Any:
    if not isinstance(value, str):
        return value
    try:
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
        return kind(value)
    except ValueError:
        raise ModelError(f"{model} config field {key}={value!r} is not a {kind.__name__}") from None


def _bounded(model: str, key: str, value: Any, kind: type) -> Any:
    """`value` as a `kind` within the bounds above, else a ModelError that says them."""
    where = f"{model} config field {key}={value!r}"
    if kind is bool:
        if not isinstance(value, bool):
            raise ModelError(f"{where} must be true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= MAX_COUNT:
            raise ModelError(f"{where} must be an integer from 1 to {MAX_COUNT:,} (2^31 - 1)")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ModelError(f"{where} must be a positive finite number")
    return float(value)


def entries(model: str) -> tuple[str, ...]:
    """The entries traced from the architecture's functions (loss_grad, made from a causal
    LM's forward, apart)."""
    return tuple(architecture(model).ENTRIES)


def build(model: str, entry: str, overrides: Mapping[str, Any] | None = None,
          quantized: Mapping[str, tuple[str, int]] | None = None, form: str = graph.INTEGER) -> graph.Program:
    """Trace `entry` of `model` at its config (defaults with `overrides`), the weights
    in `quantized` (name -> (fmt, block)) held quantized, their linears in `form`
    (graph.trace)."""
    arch = architecture(model)
    if entry == LOSS_GRAD and model in CAUSAL_LMS:
        return _loss_grad_program(model, overrides, quantized)
    if entry not in arch.ENTRIES:
        also = f" and {LOSS_GRAD}" if model in CAUSAL_LMS else ""
        raise ModelError(f"{model} has no entry {entry!r}; its entries are {', '.join(entries(model))}{also}")
    cfg = config(model, overrides)
    top = cache.longest(cfg.tokens, entry)
    if top < 1:
        raise ModelError(f"{model}.{entry}: tokens={cfg.tokens} leaves no room for a cached position; "
                         "a decode step needs tokens >= 2")
    length = dims.length(top)  # the run-time length T, 1 <= T <= top
    specs = cache.decode_inputs(cfg, length) if entry == "decode" else arch.inputs(cfg, length)
    program = graph.trace(model, entry, arch.ENTRIES[entry], arch.parameters(cfg), specs, cfg,
                          quantized=quantized, form=form)
    program.config = cfg
    if entry == "decode":
        program.in_place = dict(cache.IN_PLACE)
    return program


CAUSAL_LMS = ("gpt", "llama")


def build_loss_grad(model: str, overrides: Mapping[str, Any] | None = None,
                    ignore: int = training.IGNORE_INDEX) -> training.LossGrad:
    """The causal LM's loss_grad entry (exporter/training.py), made from `model`'s
    forward at its config: tokens and targets (B, T) in, the loss and every gradient out."""
    if model not in CAUSAL_LMS:
        architecture(model)
        raise ModelError(f"{model} has no loss_grad: the causal LM loss is for {' and '.join(CAUSAL_LMS)}")
    return training.loss_grad(build(model, "forward", overrides), ignore)


LOSS_GRAD = "loss_grad"  # the graph of a causal LM's loss and gradients (exporter/backprop.py)


def _loss_grad_program(model: str, overrides: Mapping[str, Any] | None,
                       quantized: Mapping[str, tuple[str, int]] | None) -> graph.Program:
    """The loss_grad entry as a graph: the config's overrides, and `batch` (default 1), the
    sequences B of its tokens and targets (B, T)."""
    rest = dict(overrides or {})
    batch = _bounded(model, "batch", _parse(model, "batch", rest.pop("batch", 1), int), int)
    lg = training.loss_grad(build(model, "forward", rest, quantized))
    try:
        return backprop.loss_grad_program(lg, batch)
    except training.TrainingError as exc:
        raise ModelError(str(exc)) from None


def check_seed(seed: Any) -> int:
    """`seed` if it is an integer from 0 to MAX_SEED, else a ModelError that says so."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_SEED:
        raise ModelError(f"seed {seed!r} must be an integer from 0 to {MAX_SEED:,} (2^64 - 1)")
    return int(seed)


def draw_parameters(program: graph.Program, seed: int, site: str) -> dict[str, np.ndarray]:
    """Every parameter of `program`, drawn from `seed` and rounded to `site`, keyed by
    its name (the `{l}` template for stacked ones), of its full (stacked) shape."""
    types.check_site(site)
    rng = np.random.default_rng(check_seed(seed))
    out = {}
    try:
        for spec in program.params:
            reals = rng.standard_normal(spec.full_shape) * spec.std
            if spec.init == "gain":
                reals = 1.0 + 0.1 * rng.standard_normal(spec.full_shape)
            out[spec.name] = types.round_to_site(reals, site)
    except MemoryError:
        count = sum(math.prod(spec.full_shape) for spec in program.params)
        raise ModelError(f"{program.model}: its {count:,} parameters, drawn as f64, do not fit in this machine's "
                         "memory") from None
    return out


def draw_inputs(program: graph.Program, seed: int, length: int | None = None) -> dict[str, np.ndarray]:
    """The entry's inputs at run-time length `length` (default: T_max, the config's
    tokens; tokens - 1 cached positions for decode) drawn from `seed` (a different
    stream from the parameters)."""
    arch = architecture(program.model)
    top = cache.longest(program.config.tokens, program.entry)
    length = top if length is None else length
    if not 1 <= length <= top:
        raise ModelError(f"{program.model}.{program.entry}: length {length} is outside [1, {top}] "
                         f"({top} is the longest the program takes at tokens={program.config.tokens})")
    rng = np.random.default_rng([check_seed(seed), 1])
    if program.entry == LOSS_GRAD:
        return draw_batch(program, rng, length)
    if program.entry == "decode":
        return cache.draw_decode_inputs(program.config, rng, length)
    return arch.draw_inputs(program.config, rng, length)


def draw_batch(program: graph.Program, rng: np.random.Generator, length: int) -> dict[str, np.ndarray]:
    """loss_grad's tokens and targets (B, length): targets in [0, V), about one in five
    the ignore index, the first always counted (the mean needs one)."""
    (batch, _), vocab = program.inputs[0].shape, program.config.vocab
    tokens = rng.integers(0, vocab, (batch, length)).astype(np.int32)
    targets = rng.integers(0, vocab, (batch, length)).astype(np.int32)
    targets[(rng.random((batch, length)) < 0.2)] = training.IGNORE_INDEX
    targets[0, 0] = rng.integers(0, vocab)
    return {"tokens": tokens, "targets": targets}
