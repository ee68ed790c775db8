"""The pieces GPT and Llama share for generation with a key/value cache.

Generation is two entries (docs/programs.md, "Generation"):

- `prefill` runs the prompt input_ids (T,) as `forward` does and gives the last
  position's logits (1, V) and every layer's keys and values k, v (L, KV, T, hd);
- `decode` runs one token (1,) at position T (the input `position`, 0 < T < tokens)
  over a cache past_k, past_v (L, KV, C, hd) of fixed capacity C = tokens whose rows
  0 … T - 1 hold the earlier positions: it writes its own keys and values at row T of
  each run (cache_write) and gives its logits (1, V) and the caches k, v so written.
  A C program writes them in place: k and v take past_k's and past_v's buffers.

A decode step's attention reads rows 0 … T of the cache where they lie (matmul's
b_rows) and sums over the T + 1 positions in index order, as the last row of the full
sequence's causal attention does: the step's logits are the bits of `forward` at length
T + 1, last row. No row of the cache is copied.

The layers are a fold whose body also gives rows (graph.fold's `rows`): layer l reads
slice l of the stacked parameters and of the cache, and writes slice l of the stacked
keys and values.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from exactc.exporter import dims
from exactc.exporter import graph as g
from exactc.exporter.graph import InputSpec

CACHED_ENTRIES = ("prefill", "decode")


def longest(tokens: int, entry: str) -> int:
    """T_max of `entry`: a decode step holds at most tokens - 1 cached positions (its
    token is the last of `tokens`); every other entry takes up to `tokens` positions."""
    return tokens - 1 if entry == "decode" else tokens


# decode's outputs written in place over its inputs (graph.Program.in_place)
IN_PLACE = {"k": "past_k", "v": "past_v"}


def cache_shape(cfg, length) -> tuple:
    """(L, KV, T, hd): KV the key/value heads (GPT: all heads; Llama: kv_heads); a decode
    step's cache has T = cfg.tokens rows per run, its capacity."""
    return (cfg.layers, getattr(cfg, "kv_heads", cfg.heads), length, cfg.dim // cfg.heads)


def decode_inputs(cfg, length) -> list[InputSpec]:
    """The token (1,), its position (1,) whose value is the run-time length T, and the
    caches (L, KV, tokens, hd)."""
    shape = cache_shape(cfg, cfg.tokens)
    return [InputSpec("token", (1,), "i32"), InputSpec("position", (1,), "i32", length=length),
            InputSpec("past_k", shape, "x"), InputSpec("past_v", shape, "x")]


def draw_decode_inputs(cfg, rng: np.random.Generator, length: int) -> dict[str, np.ndarray]:
    """A token at position `length` and caches of normal reals (the site rounds them),
    every row drawn: the rows from `length` on are the ones a step must not read."""
    shape = cache_shape(cfg, cfg.tokens)
    return {"token": rng.integers(0, cfg.vocab, 1).astype(np.int32), "position": np.array([length], np.int32),
            "past_k": rng.standard_normal(shape), "past_v": rng.standard_normal(shape)}


def step_position(cfg) -> dims.Dim:
    """T, the position of a decode step: the run-time length its `position` gives."""
    return dims.length(longest(cfg.tokens, "decode"))


def run_layers(block: Callable, cfg, x, layers, past_k, past_v, position=0):
    """x through the fold of `block(x, p, cfg, position) -> (x, (k, v))` over cfg.layers
    layers, layer l seeing slice l of `layers` and of the cache (under p["past_k"],
    p["past_v"], when there is one); each layer's k and v stacked by the fold:
    (L, KV, S, hd), or with a cache the caches written at row `position`."""
    if past_k is not None:
        layers = dict(layers, past_k=past_k, past_v=past_v)
    x, (keys, values) = g.fold(block, cfg.layers, x, layers, cfg, position, rows=True)
    return x, keys, values
