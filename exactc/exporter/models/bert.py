"""A BERT-style encoder: word, position and token-type embeddings, post-LayerNorm
blocks, a padding mask (softmax's keep operand), gelu-erf; the `embed` entry pools as
sentence-transformers' all-MiniLM-L6-v2 does (masked mean, then l2 normalization).

Parameter names are Hugging Face's BertModel names as sentence-transformers stores
them (no `bert.` prefix); weights are (out, in) as nn.Linear keeps them.
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
    positions: int = 64
    type_vocab: int = 2
    dim: int = 64
    heads: int = 4
    layers: int = 4
    mlp: int = 256
    tokens: int = 16  # T_max: the program takes 1 to `tokens` positions at run time
    eps: float = 1e-12  # BERT's LayerNorm eps

    def check(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"bert config: dim {self.dim} is not a multiple of heads {self.heads}")
        if self.tokens > self.positions:
            raise ValueError(f"bert config: tokens {self.tokens} > positions {self.positions}")


def parameters(cfg: Config) -> list[ParamSpec]:
    D, L = cfg.dim, cfg.layers
    e, h = "embeddings.", "encoder.layer.{l}."
    lin = 1 / math.sqrt(D)
    return [
        ParamSpec(e + "word_embeddings.weight", (cfg.vocab, D), std=1.0),
        ParamSpec(e + "position_embeddings.weight", (cfg.positions, D), std=0.5),
        ParamSpec(e + "token_type_embeddings.weight", (cfg.type_vocab, D), std=0.5),
        ParamSpec(e + "LayerNorm.weight", (D,), init="gain"),
        ParamSpec(e + "LayerNorm.bias", (D,), std=0.1),
        ParamSpec(h + "attention.self.query.weight", (D, D), L, std=lin),
        ParamSpec(h + "attention.self.query.bias", (D,), L, std=0.1),
        ParamSpec(h + "attention.self.key.weight", (D, D), L, std=lin),
        ParamSpec(h + "attention.self.key.bias", (D,), L, std=0.1),
        ParamSpec(h + "attention.self.value.weight", (D, D), L, std=lin),
        ParamSpec(h + "attention.self.value.bias", (D,), L, std=0.1),
        ParamSpec(h + "attention.output.dense.weight", (D, D), L, std=lin),
        ParamSpec(h + "attention.output.dense.bias", (D,), L, std=0.1),
        ParamSpec(h + "attention.output.LayerNorm.weight", (D,), L, "gain"),
        ParamSpec(h + "attention.output.LayerNorm.bias", (D,), L, std=0.1),
        ParamSpec(h + "intermediate.dense.weight", (cfg.mlp, D), L, std=lin),
        ParamSpec(h + "intermediate.dense.bias", (cfg.mlp,), L, std=0.1),
        ParamSpec(h + "output.dense.weight", (D, cfg.mlp), L, std=1 / math.sqrt(cfg.mlp)),
        ParamSpec(h + "output.dense.bias", (D,), L, std=0.1),
        ParamSpec(h + "output.LayerNorm.weight", (D,), L, "gain"),
        ParamSpec(h + "output.LayerNorm.bias", (D,), L, std=0.1),
    ]


def inputs(cfg: Config, length) -> list[InputSpec]:
    """input_ids, token_type_ids, attention_mask of `length` positions (the run-time
    length T, at most cfg.tokens)."""
    T = (length,)
    return [InputSpec("input_ids", T, "i32"), InputSpec("token_type_ids", T, "i32"),
            InputSpec("attention_mask", T, "i32")]


def draw_inputs(cfg: Config, rng: np.random.Generator, length: int) -> dict[str, np.ndarray]:
    """A padded pair of segments: the last quarter of the positions is padding."""
    T = length
    ids = rng.integers(0, cfg.vocab, T).astype(np.int32)
    types_ = (np.arange(T) >= T // 2).astype(np.int32)
    mask = (np.arange(T) < T - max(1, T // 4)).astype(np.int32)
    return {"input_ids": ids, "token_type_ids": types_ % cfg.type_vocab, "attention_mask": mask}


# ---- the network ------------------------------------------------------------------------


def attention(cfg: Config, x, p, mask):
    """Self-attention of x (T, D), padding columns masked: softmax(q kᵀ / √hd) v."""
    (T, D), H = x.shape, cfg.heads
    hd = D // H
    heads = []
    for name in ("query", "key", "value"):
        t = g.linear(x, p[f"attention.self.{name}.weight"], p[f"attention.self.{name}.bias"], name=name[0])
        t = g.reshape(t, (T, H, hd), name=name[0] + "_heads")
        heads.append(g.transpose(t, (1, 0, 2), name=name[0] + "_t"))  # (H, T, hd)
    q, k, v = heads
    scores = g.matmul(q, k, trans_b=True, name="scores")  # (H, T, T)
    scores = g.scale(scores, 1.0 / math.sqrt(hd), name="scaled")
    att = g.softmax(scores, keep=mask, name="att")
    y = g.matmul(att, v, name="mixed")  # (H, T, hd)
    y = g.transpose(y, (1, 0, 2), name="mixed_t")
    y = g.reshape(y, (T, D), name="merged")
    return g.linear(y, p["attention.output.dense.weight"], p["attention.output.dense.bias"], name="attn_out")


def mlp(cfg: Config, x, p):
    """The feed-forward: output.dense(gelu_erf(intermediate.dense(x)))."""
    h = g.linear(x, p["intermediate.dense.weight"], p["intermediate.dense.bias"], name="inter")
    h = g.gelu_erf(h, name="act")
    return g.linear(h, p["output.dense.weight"], p["output.dense.bias"], name="mlp_out")


def layer(x, p, cfg: Config, mask):
    """The post-LayerNorm block: LN(x + attn(x)), then LN(. + mlp(.))."""
    x = g.add(x, g.call(attention, cfg, x, p, mask), name="x_attn")
    x = g.layernorm(x, p["attention.output.LayerNorm.weight"], p["attention.output.LayerNorm.bias"], eps=cfg.eps, name="ln_attn")
    x = g.add(x, g.call(mlp, cfg, x, p), name="x_mlp")
    return g.layernorm(x, p["output.LayerNorm.weight"], p["output.LayerNorm.bias"], eps=cfg.eps, name="ln_out")


def encode(cfg: Config, params, input_ids, token_type_ids, attention_mask):
    e = "embeddings."
    x = g.embedding(params[e + "word_embeddings.weight"], input_ids, name="words")
    pos = g.slice(params[e + "position_embeddings.weight"], 0, 0, input_ids.shape[0], name="pos")
    x = g.add(x, pos, name="x_pos")
    x = g.add(x, g.embedding(params[e + "token_type_embeddings.weight"], token_type_ids, name="segment"), name="x_seg")
    x = g.layernorm(x, params[e + "LayerNorm.weight"], params[e + "LayerNorm.bias"], eps=cfg.eps, name="emb")
    return g.fold(layer, cfg.layers, x, g.group_layers(params, "encoder.layer."), cfg, attention_mask)


def forward(cfg: Config, params, input_ids, token_type_ids, attention_mask):
    """The last hidden states (T, D)."""
    return {"last_hidden_state": encode(cfg, params, input_ids, token_type_ids, attention_mask)}


def embed(cfg: Config, params, input_ids, token_type_ids, attention_mask):
    """The sentence embedding (D,): mean of the kept tokens' states, l2-normalized."""
    x = encode(cfg, params, input_ids, token_type_ids, attention_mask)
    pooled = g.mean_pool(x, attention_mask, name="pooled")  # (D,)
    pooled = g.reshape(pooled, (1, cfg.dim), name="pooled_row")
    unit = g.l2norm(pooled, name="unit")  # (1, D)
    return {"sentence_embedding": g.reshape(unit, (cfg.dim,), name="sentence_embedding")}


ENTRIES = {"forward": forward, "embed": embed}
