"""Training's entries, made from a model's forward (docs/semantics.md section 17).

`loss_grad(program)` turns a traced `forward` (input_ids (T,) -> logits (T, V)) into the
causal language model's loss-and-gradient entry: inputs tokens and targets (B, T),
outputs the mean cross-entropy over the positions that count and the gradient of every
parameter. The graph itself is the forward's: the backward is its reverse walk, which
the reference runs (exporter/reference/training.py). `decays` says which parameters
AdamW decays, `check_batch` refuses a batch the loss cannot take, in one line.

    lg = training.loss_grad(models.build("gpt", "forward", {"layers": 2}))
"""

from __future__ import annotations

import dataclasses

import numpy as np

from exactc.exporter.graph import ParamSpec, Program

IGNORE_INDEX = -100  # PyTorch's ignore_index


class TrainingError(ValueError):
    """A program or a batch training cannot take: the message names it and the rule."""


@dataclasses.dataclass(frozen=True)
class LossGrad:
    """The loss-and-gradient entry of a forward program."""

    forward: Program
    ignore: int = IGNORE_INDEX

    @property
    def params(self) -> tuple[ParamSpec, ...]:
        return self.forward.params

    @property
    def output_names(self) -> tuple[str, ...]:
        return ("loss",) + tuple(spec.name for spec in self.params)

    @property
    def vocab(self) -> int:
        vocab = self.forward.function.outputs[self.forward.output_names.index("logits")].shape[-1]
        assert isinstance(vocab, int), "the logits' last axis is the vocabulary, never the run-time length"
        return vocab


def loss_grad(program: Program, ignore: int = IGNORE_INDEX) -> LossGrad:
    """The loss_grad entry of `program`, a causal LM's forward: input_ids (T,) to logits (T, V)."""
    where = f"{program.model}.{program.entry}"
    if [spec.name for spec in program.inputs] != ["input_ids"] or program.output_names != ("logits",):
        raise TrainingError(
            f"{where}: loss_grad is made from a forward of input_ids to logits; this entry takes "
            f"{[s.name for s in program.inputs]} and gives {list(program.output_names)}"
        )
    if program.quantized:
        raise TrainingError(
            f"{where}: weights held quantized ({', '.join(program.quantized)}) have no gradient; "
            "train with float weights"
        )
    return LossGrad(program, ignore)


def decays(spec: ParamSpec) -> bool:
    """AdamW decays the 2-D weights only (the linears' matrices, the embedding tables), as
    nanoGPT and llm.c do; biases and norm gains are not decayed."""
    return len(spec.shape) == 2


def check_batch(lg: LossGrad, tokens: np.ndarray, targets: np.ndarray) -> int:
    """The number of positions that count in tokens, targets (B, T); a TrainingError
    naming the rule and the first position that breaks it otherwise."""
    top = lg.forward.max_length or lg.forward.inputs[0].shape[0]
    for name, array in (("tokens", tokens), ("targets", targets)):
        if not isinstance(array, np.ndarray) or array.dtype != np.int32 or array.ndim != 2:
            raise TrainingError(f"{name} must be an int32 array (B, T)")
    if tokens.shape != targets.shape or not 1 <= tokens.shape[1] <= top or tokens.shape[0] < 1:
        raise TrainingError(
            f"tokens {tokens.shape} and targets {targets.shape} must both be (B, T) with B >= 1 and 1 <= T <= {top}"
        )
    vocab = lg.vocab
    bad = np.argwhere((tokens < 0) | (tokens >= vocab))
    if len(bad):
        b, t = bad[0]
        raise TrainingError(f"tokens[{b}, {t}] = {tokens[b, t]} is outside [0, {vocab})")
    counts = targets != lg.ignore
    bad = np.argwhere(counts & ((targets < 0) | (targets >= vocab)))
    if len(bad):
        b, t = bad[0]
        raise TrainingError(
            f"targets[{b}, {t}] = {targets[b, t]} is neither in [0, {vocab}) nor the ignore index {lg.ignore}"
        )
    count = int(counts.sum())
    if count == 0:
        raise TrainingError(f"every target is the ignore index {lg.ignore}: no position counts, the mean is undefined")
    return count
