"""Sampling one token from logits: docs/semantics.md section 14, read literally in numpy.

This is the reference the C runtime's sampler (runtime/exactc_sample.c) must match bit
for bit: the same token and the same f64 probability, or the same refusal. Every value is
f64; weights come from exactc's own exp (runtime/libm_twin.py); the maximum and every
running sum are Python loops in the order the spec states (a Python float is an IEEE
double, so each `+` is one rounded f64 addition), as the rest of the backend writes its
reductions.

    token, p = sample(logits, SamplingOptions(temperature=0.8, top_k=40, top_p=0.95), u)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from exactc.exporter import types
from exactc.exporter.reference.arith import libm64

# The rules a refusal names, in the order of the spec's table (the C runtime's statuses
# 1, 2, ... are these rules in this order).
RULES = ("size", "temperature", "top_k", "top_p", "u", "nan", "all -inf")

_WIDENABLE = (np.dtype(np.float64), np.dtype(np.float32))  # and bf16 (types.is_bf16)


class SamplingError(ValueError):
    """A refused sampling call; `rule` is one of RULES."""

    def __init__(self, rule: str, message: str):
        assert rule in RULES, rule
        super().__init__(f"sampling: {message}")
        self.rule = rule


@dataclasses.dataclass(frozen=True)
class SamplingOptions:
    """temperature 0 is greedy; top_k 0 and top_p 1 switch those filters off."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


MAX_TOP_K = (1 << 63) - 1  # the C program holds top_k in an int64


def check_options(options: SamplingOptions, u: float) -> None:
    """Refuse options and u outside the spec's ranges, naming the rule."""
    t, k, p = options.temperature, options.top_k, options.top_p
    if not (np.isfinite(t) and t >= 0):
        raise SamplingError("temperature", f"temperature {t!r} must be finite and >= 0 (0 is greedy)")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= MAX_TOP_K:
        raise SamplingError("top_k", f"top_k {k!r} must be an integer in [0, 2^63) (0 is no top-k)")
    if not 0.0 <= p <= 1.0:  # false for NaN too
        raise SamplingError("top_p", f"top_p {p!r} must be in [0, 1] (1 is no top-p)")
    if not 0.0 <= u < 1.0:
        raise SamplingError("u", f"u {u!r} must be in [0, 1)")


def widen_logits(logits: np.ndarray) -> np.ndarray:
    """Step 1: the logits of one position, (V,) f64, f32 or bf16, as f64 (exact)."""
    logits = np.asarray(logits)
    if logits.ndim != 1 or logits.size < 1:
        raise SamplingError("size", f"logits must be one row of V >= 1 values; got shape {logits.shape}")
    if logits.dtype not in _WIDENABLE and not types.is_bf16(logits.dtype):
        raise SamplingError("size", f"logits of dtype {logits.dtype}; expected float64, float32 or bfloat16")
    return logits.astype(np.float64)


def running_sum(values: np.ndarray) -> np.ndarray:
    """Every partial sum of (…((+0 ⊕ v_0) ⊕ v_1) …), in index order."""
    out = np.empty(values.size, dtype=np.float64)
    t = 0.0
    for i, v in enumerate(values.tolist()):
        t = t + v
        out[i] = t
    return out


def rank_order(e: np.ndarray) -> np.ndarray:
    """Step 6: indices by weight descending, equal weights by index ascending."""
    # A stable sort keeps equal keys in index order; weights are >= 0 and never NaN.
    return np.argsort(-e, kind="stable")


def nucleus(candidates: np.ndarray, e: np.ndarray, top_p: float) -> np.ndarray:
    """Step 8: the prefix of the candidates (in rank order) that top-p keeps."""
    if top_p == 1.0:
        return candidates
    q = running_sum(e[candidates])  # q_j, in rank order
    threshold = np.float64(top_p) * q[-1]  # P ⊗ S
    kept = 1
    while kept < candidates.size and q[kept - 1] < threshold:
        kept += 1
    return candidates[:kept]


def sample(logits: np.ndarray, options: SamplingOptions, u: float) -> tuple[int, float]:
    """The token drawn from `logits` (V,) with `options` and the uniform `u`, and its
    probability; a SamplingError names the rule a refused call breaks."""
    x = widen_logits(logits)
    check_options(options, u)
    nan = np.flatnonzero(np.isnan(x))
    if nan.size:
        raise SamplingError("nan", f"logit {int(nan[0])} is NaN; nothing is drawn from NaN logits")
    if np.all(x == -np.inf):
        raise SamplingError("all -inf", "every logit is -inf; there is no token to draw")
    if np.any(x == np.inf):  # step 2: only the +inf tokens can be drawn, equally
        x = np.where(x == np.inf, 0.0, -np.inf)

    m, a = -np.inf, 0  # step 3: the maximum and its first index (strict >)
    for i, v in enumerate(x.tolist()):
        if v > m:
            m, a = v, i
    if options.temperature == 0:  # step 4: greedy
        return a, 1.0

    with np.errstate(all="ignore"):  # IEEE: a tiny temperature's quotient may be -inf
        e = libm64("exp", (x - m) / np.float64(options.temperature))  # step 5: weights
    order = rank_order(e)
    k = int(options.top_k)
    candidates = order[:k] if 1 <= k < x.size else order  # step 7: top-k
    kept = np.zeros(x.size, dtype=bool)
    kept[nucleus(candidates, e, options.top_p)] = True  # step 8: top-p

    # Step 9: the running sum over the kept tokens in index order. Adding +0 for a token
    # not kept leaves a sum >= +0 unchanged, so a zero weight stands in for "skipped".
    c = running_sum(np.where(kept, e, 0.0))
    total = c[-1]
    token = int(np.flatnonzero(kept & (c > np.float64(u) * total))[0])
    return token, float(e[token] / total)
