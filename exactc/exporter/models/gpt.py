"""A GPT-2-style decoder: learned positions, pre-LayerNorm blocks, causal attention,
a gelu-tanh MLP, a tied or untied head.

Parameter names are Hugging Face's GPT2LMHeadModel names, with one difference: every
weight is (out, in), as the `linear` primitive takes it (Hugging Face's Conv1D stores
(in, out); a checkpoint loader transposes).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from exactc.exporter import graph as g
from exactc.exporter.graph import InputSpec, ParamSpec
from exactc.exporter.models import cache


@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = 512
    positions: int = 64  # rows of the position table
    dim: int = 64
    heads: int = 4
    layers: int = 4
    mlp: int = 256
    tokens: int = 16  # T_max: the program takes 1 to `tokens` positions at run time
    eps: float = 1e-5
    tied: bool = True  # the head is the token embedding (GPT-2) or its own lm_head.weight

    def check(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"gpt config: dim {self.dim} is not a multiple of heads {self.heads}")
        if self.tokens > self.positions:
            raise ValueError(f"gpt config: tokens {self.tokens} > positions {self.positions}")


def parameters(cfg: Config) -> list[ParamSpec]:
    D, L = cfg.dim, cfg.layers
    h = "transformer.h.{l}."
    specs = [
        ParamSpec("transformer.wte.weight", (cfg.vocab, D), std=1.0),
        ParamSpec("transformer.wpe.weight", (cfg.positions, D), std=0.5),
        ParamSpec(h + "ln_1.weight", (D,), L, "gain"),
        ParamSpec(h + "ln_1.bias", (D,), L, std=0.1),
        ParamSpec(h + "attn.c_attn.weight", (3 * D, D), L, std=1 / math.sqrt(D)),
        ParamSpec(h + "attn.c_attn.bias", (3 * D,), L, std=0.1),
        ParamSpec(h + "attn.c_proj.weight", (D, D), L, std=1 / math.sqrt(D)),
        ParamSpec(h + "attn.c_proj.bias", (D,), L, std=0.1),
        ParamSpec(h + "ln_2.weight", (D,), L, "gain"),
        ParamSpec(h + "ln_2.bias", (D,), L, std=0.1),
        ParamSpec(h + "mlp.c_fc.weight", (cfg.mlp, D), L, std=1 / math.sqrt(D)),
        ParamSpec(h + "mlp.c_fc.bias", (cfg.mlp,), L, std=0.1),
        ParamSpec(h + "mlp.c_proj.weight", (D, cfg.mlp), L, std=1 / math.sqrt(cfg.mlp)),
        ParamSpec(h + "mlp.c_proj.bias", (D,), L, std=0.1),
        ParamSpec("transformer.ln_f.weight", (D,), init="gain"),
        ParamSpec("transformer.ln_f.bias", (D,), std=0.1),
    ]
    if not cfg.tied:
        specs.append(ParamSpec("lm_head.weight", (cfg.vocab, D), std=1 / math.sqrt(D)))
    return specs


def inputs(cfg: Config, length) -> list[InputSpec]:
    """input_ids of `length` positions (the run-time length T, at most cfg.tokens)."""
    return [InputSpec("input_ids", (length,), "i32")]


def draw_inputs(cfg: Config, rng: np.random.Generator, length: int) -> dict[str, np.ndarray]:
    return {"input_ids": rng.integers(0, cfg.vocab, length).astype(np.int32)}


# ---- the network ------------------------------------------------------------------------


def project(cfg: Config, x, p):
    """q, k, v of x (S, D): each (H, S, hd)."""
    (S, D), H = x.shape, cfg.heads
    hd = D // H
    qkv = g.linear(x, p["attn.c_attn.weight"], p["attn.c_attn.bias"], name="qkv")  # (S, 3D)
    heads = []
    for part, name in enumerate(("q", "k", "v")):
        t = g.slice(qkv, 1, part * D, (part + 1) * D, name=name)  # (S, D)
        t = g.reshape(t, (S, H, hd), name=name + "_heads")
        heads.append(g.transpose(t, (1, 0, 2), name=name + "_t"))  # (H, S, hd)
    return heads


def attend(cfg: Config, q, k, v, p, causal: bool, rows=0):
    """softmax(q kᵀ / √hd) v over the keys and values k, v (H, P, hd) for the queries
    q (H, S, hd), then the output projection: (S, D). rows > 0: over the first `rows`
    of the P rows of k and v only (a cache's filled ones)."""
    H, S, hd = q.shape
    scores = g.matmul(q, k, trans_b=True, b_rows=rows, name="scores")  # (H, S, rows or P)
    scores = g.scale(scores, 1.0 / math.sqrt(hd), name="scaled")
    att = g.softmax(scores, causal=causal, name="att")
    y = g.matmul(att, v, b_rows=rows, name="mixed")  # (H, S, hd)
    y = g.transpose(y, (1, 0, 2), name="mixed_t")  # (S, H, hd)
    y = g.reshape(y, (S, H * hd), name="merged")
    return g.linear(y, p["attn.c_proj.weight"], p["attn.c_proj.bias"], name="attn_out")


def attention(cfg: Config, x, p):
    """Causal self-attention of x (T, D): per head softmax(q kᵀ / √hd) v."""
    q, k, v = project(cfg, x, p)
    return attend(cfg, q, k, v, p, causal=True)


def attention_cached(cfg: Config, x, p, past_k=None, past_v=None, position=0):
    """Attention that also gives its keys and values for the cache. Without a past,
    causal self-attention of the S positions (a prefill), and their k, v (H, S, hd); with
    the cache past_k, past_v (H, C, hd), one new position (S = 1) at `position` T: its
    row written at row T, attention over rows 0 … T, and the caches so written."""
    q, k, v = project(cfg, x, p)
    if past_k is None:
        return attend(cfg, q, k, v, p, causal=True), k, v
    keys = g.cache_write(past_k, k, position, name="keys")  # (H, C, hd), row T this step's
    values = g.cache_write(past_v, v, position, name="values")
    return attend(cfg, q, keys, values, p, causal=False, rows=position + 1), keys, values


def mlp(cfg: Config, x, p):
    """The MLP: c_proj(gelu_tanh(c_fc(x)))."""
    h = g.linear(x, p["mlp.c_fc.weight"], p["mlp.c_fc.bias"], name="fc")  # (T, 4D)
    h = g.gelu_tanh(h, name="act")
    return g.linear(h, p["mlp.c_proj.weight"], p["mlp.c_proj.bias"], name="mlp_out")


def block_cached(x, p, cfg: Config, position=0):
    """`block` that also gives this layer's keys and values (attention_cached), writing
    this layer's cache p["past_k"], p["past_v"] at `position` when there is one."""
    h = g.layernorm(x, p["ln_1.weight"], p["ln_1.bias"], eps=cfg.eps, name="ln_1")
    a, k, v = attention_cached(cfg, h, p, p.get("past_k"), p.get("past_v"), position)
    x = g.add(x, a, name="x_attn")
    h = g.layernorm(x, p["ln_2.weight"], p["ln_2.bias"], eps=cfg.eps, name="ln_2")
    return g.add(x, g.call(mlp, cfg, h, p), name="x_mlp"), (k, v)


def block(x, p, cfg: Config):
    """x + attn(ln_1(x)), then + mlp(ln_2(.)): the pre-LayerNorm block."""
    h = g.layernorm(x, p["ln_1.weight"], p["ln_1.bias"], eps=cfg.eps, name="ln_1")
    x = g.add(x, g.call(attention, cfg, h, p), name="x_attn")
    h = g.layernorm(x, p["ln_2.weight"], p["ln_2.bias"], eps=cfg.eps, name="ln_2")
    return g.add(x, g.call(mlp, cfg, h, p), name="x_mlp")


def embed(cfg: Config, params, ids, start=0):
    """Token and position embeddings of ids (S,) at positions start, ..., start + S - 1."""
    tok = g.embedding(params["transformer.wte.weight"], ids, name="tok")  # (S, D)
    pos = g.slice(params["transformer.wpe.weight"], 0, start, start + ids.shape[0], name="pos")  # (S, D)
    return g.add(tok, pos, name="x")


def trunk(cfg: Config, params, input_ids):
    """Token and position embeddings, then the blocks: the hidden states (T, D)."""
    x = embed(cfg, params, input_ids)
    return g.fold(block, cfg.layers, x, g.group_layers(params, "transformer.h."), cfg)


def head(cfg: Config, params, x):
    x = g.layernorm(x, params["transformer.ln_f.weight"], params["transformer.ln_f.bias"], eps=cfg.eps, name="ln_f")
    w = params["transformer.wte.weight"] if cfg.tied else params["lm_head.weight"]
    return g.linear(x, w, name="logits")  # (rows, V)


def forward(cfg: Config, params, input_ids):
    """The logits (T, V) of every position."""
    x = trunk(cfg, params, input_ids)
    return {"logits": head(cfg, params, x)}


def next_token(cfg: Config, params, input_ids):
    """The greedy next token: argmax of the last position's logits, (1,) int32."""
    x = trunk(cfg, params, input_ids)
    T = x.shape[0]
    last = g.slice(x, 0, T - 1, T, name="last")  # (1, D)
    return {"next_token": g.argmax(head(cfg, params, last), name="next_token")}


def prefill(cfg: Config, params, input_ids):
    """The prompt's pass of generation: the last position's logits (1, V) and every
    layer's keys and values (L, H, T, hd), the cache a decode step reads."""
    x = embed(cfg, params, input_ids)
    x, keys, values = cache.run_layers(block_cached, cfg, x, g.group_layers(params, "transformer.h."), None, None)
    T = x.shape[0]
    last = g.slice(x, 0, T - 1, T, name="last")  # (1, D)
    return {"logits": head(cfg, params, last), "k": keys, "v": values}


def decode(cfg: Config, params, token, position, past_k, past_v):
    """One step of generation: the token (1,) at `position` T after the T cached ones,
    rows 0 … T - 1 of past_k, past_v (L, H, tokens, hd); its logits (1, V) and the caches
    with its keys and values written at row T (in place)."""
    T = cache.step_position(cfg)
    x = embed(cfg, params, token, start=T)
    layers = g.group_layers(params, "transformer.h.")
    x, keys, values = cache.run_layers(block_cached, cfg, x, layers, past_k, past_v, T)
    return {"logits": head(cfg, params, x), "k": keys, "v": values}


ENTRIES = {"forward": forward, "next_token": next_token, "prefill": prefill, "decode": decode}
