"""Quality figures of quantized linear weights (docs/accuracy.md, "Quantized weights"):
how far `--weights q8` and `--weights q4`, in each form (`--form integer`, the default,
and `--form weight-only`), move a model's outputs from the float export.

Usage (repository root): .venv/bin/python tools/quant_figures.py [--block 32] [--skip-minilm]

- all-MiniLM-L6-v2 (the packaged checkpoint): the cosine of each sentence's embedding at
  q8 and q4 in each form against f32, on the sentences of tests/minilm_sentences.py, each at its own
  length, computed by the exported C programs (`exactc embed --weights ...`, f32 site).
- the tiny GPT and Llama (the default configs, parameters and 16 input tokens drawn from
  seed 0, f32 site): per position, the cosine of the logits against f32's, the largest
  difference over the largest |logit|, and how often the argmax (the greedy next token)
  agrees. Computed by the numpy reference, whose bits the programs reproduce.

Cosines are computed in f64 from the f32 outputs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from exactc import embed
from exactc.exporter import export, models
from exactc.exporter.reference import walk

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from minilm_sentences import SENTENCES  # noqa: E402  (the sentences of the tests)

FORMATS = ("q8", "q4")
FORMS = ("weight-only", "integer")
# the columns: each format in each form, the weight-only one first (the form made before)
CHOICES = [(fmt, form) for fmt in FORMATS for form in FORMS]


def label(choice: tuple[str, str]) -> str:
    return f"{choice[0]} {choice[1]}"


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (n, d) arrays, in f64."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def minilm(block: int) -> None:
    print(f"## all-MiniLM-L6-v2, f32 site, blocks of {block}: cosine of each sentence's embedding against f32\n")
    base = embed.embed(SENTENCES, dtype="f32")
    rows = {c: cosines(embed.embed(SENTENCES, dtype="f32", weights=(c[0], block), form=c[1]), base) for c in CHOICES}
    print("| sentence | " + " | ".join(map(label, CHOICES)) + " |")
    print("|---|" + "---|" * len(CHOICES))
    for k, sentence in enumerate(SENTENCES):
        shown = sentence if len(sentence) <= 40 else sentence[:37] + "..."
        print(f"| {shown!r} | " + " | ".join(f"{rows[c][k]:.6f}" for c in CHOICES) + " |")
    print("| **min** | " + " | ".join(f"**{rows[c].min():.6f}**" for c in CHOICES) + " |")
    print("| mean | " + " | ".join(f"{rows[c].mean():.6f}" for c in CHOICES) + " |\n")


def logits(model: str, block: int) -> None:
    program = models.build(model, "forward")
    inputs = models.draw_inputs(program, 0)
    base = walk.evaluate(program, "f32", models.draw_parameters(program, 0, "f32"), inputs)["logits"]
    cfg = ", ".join(f"{k}={v}" for k, v in vars(program.config).items())
    print(f"## tiny {model} ({cfg}), f32 site, blocks of {block}: logits of {base.shape[0]} positions against f32\n")
    print("| weights | form | min cosine | mean cosine | max abs difference / max abs logit | argmax agrees |")
    print("|---|---|---|---|---|---|")
    for fmt, form in CHOICES:
        q_program, params = export.build_program(model, "forward", "f32", 0, None, None, (fmt, block), form)
        got = walk.evaluate(q_program, "f32", params, inputs)["logits"]
        c = cosines(got, base)
        relative = float(np.max(np.abs(got.astype(np.float64) - base)) / np.max(np.abs(base)))
        agree = int(np.sum(np.argmax(got, axis=1) == np.argmax(base, axis=1)))
        print(f"| {fmt} | {form} | {c.min():.6f} | {c.mean():.6f} | {relative:.4f} | {agree} of {len(c)} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--skip-minilm", action="store_true")
    args = parser.parse_args()
    for model in ("gpt", "llama"):
        logits(model, args.block)
    if not args.skip_minilm:
        minilm(args.block)


if __name__ == "__main__":
    main()
