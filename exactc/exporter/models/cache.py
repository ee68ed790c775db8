"""The pieces GPT and Llama share for generation with a key/value cache.

Generation is two entries (docs/programs.md, "Generation"):

- `prefill` runs the prompt input_ids (T,) as `forward` does and gives the last
  position's logits (1, V) and every layer's keys and values k, v (L, H, T, hd);
- `decode` runs one token (1,) at position T after the T cached positions past_k,
  past_v (L, H, T, hd) and gives its logits (1, V) and its keys and values (L, H, 1, hd),
  which the generation loop appends to the cache.

A decode step's attention concatenates the cached keys with its own and sums over the
T + 1 positions in index order, as the last row of the full sequence's causal attention
does: the step's logits are the bits of `forward` at length T + 1, last row.

The layers are a fold whose body also gives rows (graph.fold's `rows`): layer l reads
slice l of the stacked parameters and of the cache, and writes slice l of the stacked
keys and values.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from exactc.exporter import graph as g
from exactc.exporter.graph import InputSpec

CACHED_ENTRIES = ("prefill", "decode")


def longest(tokens: int, entry: str) -> int:
    """T_max of `entry`: a decode step holds at most tokens - 1 cached positions (its
    token is the last of `tokens`); every other entry takes up to `tokens` positions."""
    return tokens - 1 if entry == "decode" else tokens


def cache_shape(cfg, length) -> tuple:
    """(L, KV, T, hd): KV the key/value heads (GPT: all heads; Llama: kv_heads)."""
    return (cfg.layers, getattr(cfg, "kv_heads", cfg.heads), length, cfg.dim // cfg.heads)


def decode_inputs(cfg, length) -> list[InputSpec]:
    """The token (1,) and the cache of `length` positions, (L, KV, T, hd) each."""
    shape = cache_shape(cfg, length)
    return [InputSpec("token", (1,), "i32"), InputSpec("past_k", shape, "x"), InputSpec("past_v", shape, "x")]


def draw_decode_inputs(cfg, rng: np.random.Generator, length: int) -> dict[str, np.ndarray]:
    """A token and a cache of normal reals (the site rounds them)."""
    shape = cache_shape(cfg, length)
    return {"token": rng.integers(0, cfg.vocab, 1).astype(np.int32),
            "past_k": rng.standard_normal(shape), "past_v": rng.standard_normal(shape)}


def run_layers(block: Callable, cfg, x, layers, past_k, past_v):
    """x through the fold of `block(x, p, cfg) -> (x, (k, v))` over cfg.layers layers,
    layer l seeing slice l of `layers` and of the cache (under p["past_k"], p["past_v"],
    when there is one); each layer's k and v stacked by the fold: (L, KV, S, hd)."""
    if past_k is not None:
        layers = dict(layers, past_k=past_k, past_v=past_v)
    x, (keys, values) = g.fold(block, cfg.layers, x, layers, cfg, rows=True)
    return x, keys, values
