"""A Llama-style decoder: rmsnorm, rotary positions (Hugging Face's rotate_half
pairing), SwiGLU (silu(gate) * up), grouped-query attention (matmul's `group`), an
untied head.

Parameter names are Hugging Face's LlamaForCausalLM names; weights are (out, in).
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
    dim: int = 64
    heads: int = 4
    kv_heads: int = 2
    layers: int = 4
    mlp: int = 172
    tokens: int = 16  # T_max: the program takes 1 to `tokens` positions at run time
    eps: float = 1e-5
    theta: float = 10000.0

    def check(self) -> None:
        if self.dim % self.heads or (self.dim // self.heads) % 2:
            raise ValueError(f"llama config: dim {self.dim} / heads {self.heads} must be an even integer")
        if self.heads % self.kv_heads:
            raise ValueError(f"llama config: heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")


def parameters(cfg: Config) -> list[ParamSpec]:
    D, L = cfg.dim, cfg.layers
    kv = cfg.kv_heads * (D // cfg.heads)
    h = "model.layers.{l}."
    lin = 1 / math.sqrt(D)
    return [
        ParamSpec("model.embed_tokens.weight", (cfg.vocab, D), std=1.0),
        ParamSpec(h + "input_layernorm.weight", (D,), L, "gain"),
        ParamSpec(h + "self_attn.q_proj.weight", (D, D), L, std=lin),
        ParamSpec(h + "self_attn.k_proj.weight", (kv, D), L, std=lin),
        ParamSpec(h + "self_attn.v_proj.weight", (kv, D), L, std=lin),
        ParamSpec(h + "self_attn.o_proj.weight", (D, D), L, std=lin),
        ParamSpec(h + "post_attention_layernorm.weight", (D,), L, "gain"),
        ParamSpec(h + "mlp.gate_proj.weight", (cfg.mlp, D), L, std=lin),
        ParamSpec(h + "mlp.up_proj.weight", (cfg.mlp, D), L, std=lin),
        ParamSpec(h + "mlp.down_proj.weight", (D, cfg.mlp), L, std=1 / math.sqrt(cfg.mlp)),
        ParamSpec("model.norm.weight", (D,), init="gain"),
        ParamSpec("lm_head.weight", (cfg.vocab, D), std=lin),
    ]


def inputs(cfg: Config, length) -> list[InputSpec]:
    """input_ids of `length` positions (the run-time length T, at most cfg.tokens)."""
    return [InputSpec("input_ids", (length,), "i32")]


def draw_inputs(cfg: Config, rng: np.random.Generator, length: int) -> dict[str, np.ndarray]:
    return {"input_ids": rng.integers(0, cfg.vocab, length).astype(np.int32)}


# ---- the network ------------------------------------------------------------------------


def project(cfg: Config, x, p, start=0):
    """q (H, S, hd), k and v (KV, S, hd) of x (S, D) at positions start, ..., start + S - 1,
    rotary positions on q and k."""
    (S, D), H, KV = x.shape, cfg.heads, cfg.kv_heads
    hd = D // H
    q = g.linear(x, p["self_attn.q_proj.weight"], name="q")  # (S, H*hd)
    k = g.linear(x, p["self_attn.k_proj.weight"], name="k")  # (S, KV*hd)
    v = g.linear(x, p["self_attn.v_proj.weight"], name="v")
    q = g.rope(g.reshape(q, (S, H, hd), name="q_heads"), theta=cfg.theta, pos0=start, name="q_rot")
    k = g.rope(g.reshape(k, (S, KV, hd), name="k_heads"), theta=cfg.theta, pos0=start, name="k_rot")
    v = g.reshape(v, (S, KV, hd), name="v_heads")
    q = g.transpose(q, (1, 0, 2), name="q_t")  # (H, S, hd)
    k = g.transpose(k, (1, 0, 2), name="k_t")  # (KV, S, hd)
    v = g.transpose(v, (1, 0, 2), name="v_t")
    return q, k, v


def attend(cfg: Config, q, k, v, p, causal: bool, rows=0):
    """Grouped-query softmax(q kᵀ / √hd) v over the keys and values k, v (KV, P, hd) for
    the queries q (H, S, hd), then the output projection: (S, D). rows > 0: over the
    first `rows` of the P rows of k and v only (a cache's filled ones)."""
    H, S, hd = q.shape
    group = H // cfg.kv_heads
    scores = g.matmul(q, k, trans_b=True, group=group, b_rows=rows, name="scores")  # (H, S, rows or P)
    scores = g.scale(scores, 1.0 / math.sqrt(hd), name="scaled")
    att = g.softmax(scores, causal=causal, name="att")
    y = g.matmul(att, v, group=group, b_rows=rows, name="mixed")  # (H, S, hd)
    y = g.reshape(g.transpose(y, (1, 0, 2), name="mixed_t"), (S, H * hd), name="merged")
    return g.linear(y, p["self_attn.o_proj.weight"], name="attn_out")


def attention(cfg: Config, x, p):
    """Causal grouped-query attention: `heads` query heads share `kv_heads` key/value
    heads, rotary positions on q and k."""
    q, k, v = project(cfg, x, p)
    return attend(cfg, q, k, v, p, causal=True)


def attention_cached(cfg: Config, x, p, past_k=None, past_v=None, position=0):
    """Attention that also gives its keys and values for the cache. Without a past,
    causal self-attention of the S positions (a prefill), and their k, v (KV, S, hd);
    with the cache past_k, past_v (KV, C, hd), one new position (S = 1) at `position` T:
    its row written at row T, attention over rows 0 … T, and the caches so written."""
    if past_k is None:
        q, k, v = project(cfg, x, p)
        return attend(cfg, q, k, v, p, causal=True), k, v
    q, k, v = project(cfg, x, p, start=position)
    keys = g.cache_write(past_k, k, position, name="keys")  # (KV, C, hd), row T this step's
    values = g.cache_write(past_v, v, position, name="values")
    return attend(cfg, q, keys, values, p, causal=False, rows=position + 1), keys, values


def mlp(cfg: Config, x, p):
    """SwiGLU: down(silu(gate(x)) * up(x))."""
    gate = g.silu(g.linear(x, p["mlp.gate_proj.weight"], name="gate"), name="gate_act")
    up = g.linear(x, p["mlp.up_proj.weight"], name="up")
    return g.linear(g.mul(gate, up, name="swiglu"), p["mlp.down_proj.weight"], name="mlp_out")


def layer_cached(x, p, cfg: Config, position=0):
    """`decoder_layer` that also gives this layer's keys and values (attention_cached),
    writing this layer's cache p["past_k"], p["past_v"] at `position` when there is one."""
    h = g.rmsnorm(x, p["input_layernorm.weight"], eps=cfg.eps, name="attn_norm")
    a, k, v = attention_cached(cfg, h, p, p.get("past_k"), p.get("past_v"), position)
    x = g.add(x, a, name="x_attn")
    h = g.rmsnorm(x, p["post_attention_layernorm.weight"], eps=cfg.eps, name="mlp_norm")
    return g.add(x, g.call(mlp, cfg, h, p), name="x_mlp"), (k, v)


def decoder_layer(x, p, cfg: Config):
    """The pre-norm block: x + attn(rmsnorm(x)), then + mlp(rmsnorm(.))."""
    h = g.rmsnorm(x, p["input_layernorm.weight"], eps=cfg.eps, name="attn_norm")
    x = g.add(x, g.call(attention, cfg, h, p), name="x_attn")
    h = g.rmsnorm(x, p["post_attention_layernorm.weight"], eps=cfg.eps, name="mlp_norm")
    return g.add(x, g.call(mlp, cfg, h, p), name="x_mlp")


def trunk(cfg: Config, params, input_ids):
    x = g.embedding(params["model.embed_tokens.weight"], input_ids, name="x")  # (T, D)
    return g.fold(decoder_layer, cfg.layers, x, g.group_layers(params, "model.layers."), cfg)


def head(cfg: Config, params, x):
    x = g.rmsnorm(x, params["model.norm.weight"], eps=cfg.eps, name="norm")
    return g.linear(x, params["lm_head.weight"], name="logits")


def forward(cfg: Config, params, input_ids):
    """The logits (T, V) of every position."""
    return {"logits": head(cfg, params, trunk(cfg, params, input_ids))}


def next_token(cfg: Config, params, input_ids):
    """The greedy next token: argmax of the last position's logits, (1,) int32."""
    x = trunk(cfg, params, input_ids)
    T = x.shape[0]
    last = g.slice(x, 0, T - 1, T, name="last")
    return {"next_token": g.argmax(head(cfg, params, last), name="next_token")}


def prefill(cfg: Config, params, input_ids):
    """The prompt's pass of generation: the last position's logits (1, V) and every
    layer's keys and values (L, KV, T, hd), the cache a decode step reads."""
    x = g.embedding(params["model.embed_tokens.weight"], input_ids, name="x")  # (T, D)
    x, keys, values = cache.run_layers(layer_cached, cfg, x, g.group_layers(params, "model.layers."), None, None)
    T = x.shape[0]
    last = g.slice(x, 0, T - 1, T, name="last")
    return {"logits": head(cfg, params, last), "k": keys, "v": values}


def decode(cfg: Config, params, token, position, past_k, past_v):
    """One step of generation: the token (1,) at `position` T after the T cached ones,
    rows 0 … T - 1 of past_k, past_v (L, KV, tokens, hd); its logits (1, V) and the
    caches with its keys and values written at row T (in place)."""
    x = g.embedding(params["model.embed_tokens.weight"], token, name="x")  # (1, D)
    layers = g.group_layers(params, "model.layers.")
    x, keys, values = cache.run_layers(layer_cached, cfg, x, layers, past_k, past_v, cache.step_position(cfg))
    return {"logits": head(cfg, params, x), "k": keys, "v": values}


ENTRIES = {"forward": forward, "next_token": next_token, "prefill": prefill, "decode": decode}
