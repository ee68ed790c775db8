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

The layers run as one call each (layer l's parameters sliced from the stacked ones): a
fold's carry has one shape for every layer, so it cannot hand out each layer's rows.
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


def decode_inputs(layers: int, kv_heads: int, length, head_dim: int) -> list[InputSpec]:
    """The token (1,) and the cache of `length` positions, (L, KV, T, hd) each."""
    return [
        InputSpec("token", (1,), "i32"),
        InputSpec("past_k", (layers, kv_heads, length, head_dim), "x"),
        InputSpec("past_v", (layers, kv_heads, length, head_dim), "x"),
    ]


def draw_decode_inputs(vocab: int, layers: int, kv_heads: int, length: int, head_dim: int,
                       rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A token and a cache of normal reals (the site rounds them)."""
    shape = (layers, kv_heads, length, head_dim)
    return {"token": rng.integers(0, vocab, 1).astype(np.int32),
            "past_k": rng.standard_normal(shape), "past_v": rng.standard_normal(shape)}


def run_layers(block: Callable, cfg, x, layers, past_k, past_v):
    """x through `block(cfg, x, p, past_k, past_v) -> (x, k, v)` for each of the
    cfg.layers layers, as one call each; the layers' k and v stacked: (L, KV, S, hd)."""
    keys, values = [], []
    for index in range(cfg.layers):
        p = g.layer_of(layers, index)
        if past_k is None:
            x, k, v = g.call(block, cfg, x, p)
        else:
            past = g.layer_of({"past_k": past_k, "past_v": past_v}, index)
            x, k, v = g.call(block, cfg, x, p, past["past_k"], past["past_v"])
        keys.append(k)
        values.append(v)
    return x, stack(keys, "k"), stack(values, "v")


def stack(parts: list, name: str):
    """(count, ...) from `count` values of one shape, in order."""
    rows = [g.reshape(part, (1,) + tuple(part.shape), name=f"{name}_{index}") for index, part in enumerate(parts)]
    out = rows[0]
    for row in rows[1:]:
        out = g.concat(out, row, axis=0, name=name)
    return out
