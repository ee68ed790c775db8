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


def attention(cfg: Config, x, p):
    """Causal self-attention of x (T, D): per head softmax(q kᵀ / √hd) v."""
    (T, D), H = x.shape, cfg.heads
    hd = D // H
    qkv = g.linear(x, p["attn.c_attn.weight"], p["attn.c_attn.bias"], name="qkv")  # (T, 3D)
    heads = []
    for part, name in enumerate(("q", "k", "v")):
        t = g.slice(qkv, 1, part * D, (part + 1) * D, name=name)  # (T, D)
        t = g.reshape(t, (T, H, hd), name=name + "_heads")
        heads.append(g.transpose(t, (1, 0, 2), name=name + "_t"))  # (H, T, hd)
    q, k, v = heads
    scores = g.matmul(q, k, trans_b=True, name="scores")  # (H, T, T)
    scores = g.scale(scores, 1.0 / math.sqrt(hd), name="scaled")
    att = g.softmax(scores, causal=True, name="att")
    y = g.matmul(att, v, name="mixed")  # (H, T, hd)
    y = g.transpose(y, (1, 0, 2), name="mixed_t")  # (T, H, hd)
    y = g.reshape(y, (T, D), name="merged")
    return g.linear(y, p["attn.c_proj.weight"], p["attn.c_proj.bias"], name="attn_out")


def mlp(cfg: Config, x, p):
    """The MLP: c_proj(gelu_tanh(c_fc(x)))."""
    h = g.linear(x, p["mlp.c_fc.weight"], p["mlp.c_fc.bias"], name="fc")  # (T, 4D)
    h = g.gelu_tanh(h, name="act")
    return g.linear(h, p["mlp.c_proj.weight"], p["mlp.c_proj.bias"], name="mlp_out")


def block(x, p, cfg: Config):
    """x + attn(ln_1(x)), then + mlp(ln_2(.)): the pre-LayerNorm block."""
    h = g.layernorm(x, p["ln_1.weight"], p["ln_1.bias"], eps=cfg.eps, name="ln_1")
    x = g.add(x, g.call(attention, cfg, h, p), name="x_attn")
    h = g.layernorm(x, p["ln_2.weight"], p["ln_2.bias"], eps=cfg.eps, name="ln_2")
    return g.add(x, g.call(mlp, cfg, h, p), name="x_mlp")


def trunk(cfg: Config, params, input_ids):
    """Token and position embeddings, then the blocks: the hidden states (T, D)."""
    tok = g.embedding(params["transformer.wte.weight"], input_ids, name="tok")  # (T, D)
    pos = g.slice(params["transformer.wpe.weight"], 0, 0, input_ids.shape[0], name="pos")  # (T, D)
    x = g.add(tok, pos, name="x")
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


ENTRIES = {"forward": forward, "next_token": next_token}
