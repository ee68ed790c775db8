"""Generation with a key/value cache, in the reference backend: docs/semantics.md
section 16 read literally.

    programs = models.build("llama", "prefill", cfg), models.build("llama", "decode", cfg)
    result = generate(*programs, "f32", params, prompt, count=8, key=key_from_seed(0),
                      options=SamplingOptions(temperature=0.8))
    result.tokens, result.probabilities

The prompt runs through `prefill` once, its keys and values the first rows of a cache
of `tokens` rows per run; every new token after the first runs through `decode` at its
position T with that cache, and the cache the step gives back (its rows written at row
T) is the next step's. Token i is drawn by `sample` (section 14) with the uniform of step i's
child key, `fold_in(key, i)`. The same loop with `recompute=forward` runs the whole
sequence through `forward` at every step instead of reading a cache: the logits must be
the same bits (tests/test_generation.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import numpy as np

from exactc.exporter import graph

from exactc.exporter.reference import walk
from exactc.exporter.reference.sampling import SamplingOptions, sample
from exactc.runtime import keys_twin


class GenerationError(ValueError):
    """A prompt, count or stop token outside the program's bounds: the message names it."""


@dataclasses.dataclass
class Generation:
    prompt: list[int]
    tokens: list[int]  # the new tokens, the stop token included when it was drawn
    probabilities: list[float]  # each new token's probability (section 14's p)
    logits: list[np.ndarray]  # the (V,) logits each token was drawn from
    uniforms: list[float]  # each step's u (step_uniform)


def step_uniform(key: np.ndarray, step: int) -> float:
    """The uniform of step `step`: the first draw of its child key, fold_in(key, step),
    on stream 0 at counter 0."""
    child = keys_twin.fold_in(key, step)
    return float(keys_twin.uniform(keys_twin.draw(child, 0, 0, 0)))


def check_request(tokens: int, vocab: int, prompt, count: int, stop: int | None) -> list[int]:
    """The prompt as a list of ints, if the request fits the programs, else a GenerationError."""
    ids = [int(t) for t in np.asarray(prompt).reshape(-1)]
    if not ids:
        raise GenerationError("the prompt is empty; give at least one token")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise GenerationError(f"prompt token {bad[0]} is outside [0, {vocab}) (the vocabulary)")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise GenerationError(f"count {count!r} must be an integer >= 1")
    if len(ids) + count > tokens:
        raise GenerationError(f"the prompt's {len(ids)} tokens and {count} new ones make {len(ids) + count} "
                              f"positions; the programs take at most tokens={tokens}")
    if stop is not None and not 0 <= stop < vocab:
        raise GenerationError(f"stop token {stop} is outside [0, {vocab}) (the vocabulary)")
    return ids


Runner = Callable[[str, Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


def reference_runner(programs: Mapping[str, graph.Program], site: str, params: Mapping[str, np.ndarray]) -> Runner:
    """run(entry, inputs) -> outputs of the reference backend for the programs by entry."""
    return lambda entry, inputs: walk.evaluate(programs[entry], site, params, inputs)


def generate(prefill: graph.Program, decode: graph.Program, site: str, params: Mapping[str, np.ndarray],
             prompt, count: int, key: np.ndarray, options: SamplingOptions = SamplingOptions(),
             stop: int | None = None, recompute: graph.Program | None = None) -> Generation:
    """Up to `count` new tokens after `prompt`, stopping after `stop` when it is drawn;
    with `recompute` (the forward program), every step runs the whole sequence instead."""
    programs = {"prefill": prefill, "decode": decode}
    if recompute is not None:
        programs["forward"] = recompute
    return run_loop(reference_runner(programs, site, params), prefill.config, prompt, count, key, options, stop,
                    recompute is not None)


def with_capacity(rows: np.ndarray, capacity: int) -> np.ndarray:
    """prefill's keys or values (L, KV, n, hd) as the first n rows of a decode cache of
    `capacity` rows per run (the rows after them zero: no step reads them)."""
    cache = np.zeros(rows.shape[:2] + (capacity,) + rows.shape[3:], rows.dtype)
    cache[:, :, : rows.shape[2]] = rows
    return cache


def run_loop(run: Runner, cfg, prompt, count: int, key: np.ndarray, options: SamplingOptions = SamplingOptions(),
             stop: int | None = None, recompute: bool = False,
             on_token: Callable[[int, float], None] | None = None) -> Generation:
    """The loop of section 16 over `run(entry, inputs)` (the reference's evaluate, or an
    exported program's run: the same bits); `on_token` hears each token as it is drawn."""
    ids = check_request(cfg.tokens, cfg.vocab, prompt, count, stop)
    sequence = list(ids)
    out = Generation(list(ids), [], [], [], [])
    past: dict[str, np.ndarray] = {}
    for step in range(count):
        if recompute:
            logits = run("forward", {"input_ids": np.array(sequence, np.int32)})["logits"][-1]
        elif step == 0:
            got = run("prefill", {"input_ids": np.array(sequence, np.int32)})
            logits, past = got["logits"][0], {"past_k": with_capacity(got["k"], cfg.tokens),
                                              "past_v": with_capacity(got["v"], cfg.tokens)}
        else:
            position = np.array([len(sequence) - 1], np.int32)
            got = run("decode", {"token": np.array(sequence[-1:], np.int32), "position": position, **past})
            logits, past = got["logits"][0], {"past_k": got["k"], "past_v": got["v"]}
        u = step_uniform(key, step)
        token, probability = sample(logits, options, u)
        out.uniforms.append(u)
        out.tokens.append(token)
        out.probabilities.append(probability)
        out.logits.append(logits)
        sequence.append(token)
        if on_token is not None:
            on_token(token, probability)
        if token == stop:
            break
    return out
