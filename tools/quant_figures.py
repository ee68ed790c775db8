"""Quality figures of quantized linear weights (docs/accuracy.md, "Quantized weights"):
how far `--weights q8` and `--weights q4` move a model's outputs from the float export.

Usage (repository root): .venv/bin/python tools/quant_figures.py [--block 32] [--skip-minilm]

- all-MiniLM-L6-v2 (the packaged checkpoint): the cosine of each sentence's embedding at
  q8 and q4 against f32, on the sentences of tests/minilm_sentences.py, each at its own
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


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (n, d) arrays, in f64."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def minilm(block: int) -> None:
    print(f"## all-MiniLM-L6-v2, f32 site, blocks of {block}: cosine of each sentence's embedding against f32\n")
    base = embed.embed(SENTENCES, dtype="f32")
    rows = {fmt: cosines(embed.embed(SENTENCES, dtype="f32", weights=(fmt, block)), base) for fmt in FORMATS}
    print("| sentence | " + " | ".join(FORMATS) + " |")
    print("|---|" + "---|" * len(FORMATS))
    for k, sentence in enumerate(SENTENCES):
        shown = sentence if len(sentence) <= 40 else sentence[:37] + "..."
        print(f"| {shown!r} | " + " | ".join(f"{rows[fmt][k]:.6f}" for fmt in FORMATS) + " |")
    print("| **min** | " + " | ".join(f"**{rows[fmt].min():.6f}**" for fmt in FORMATS) + " |")
    print("| mean | " + " | ".join(f"{rows[fmt].mean():.6f}" for fmt in FORMATS) + " |\n")


def logits(model: str, block: int) -> None:
    program = models.build(model, "forward")
    inputs = models.draw_inputs(program, 0)
    base = walk.evaluate(program, "f32", models.draw_parameters(program, 0, "f32"), inputs)["logits"]
    cfg = ", ".join(f"{k}={v}" for k, v in vars(program.config).items())
    print(f"## tiny {model} ({cfg}), f32 site, blocks of {block}: logits of {base.shape[0]} positions against f32\n")
    print("| weights | min cosine | mean cosine | max abs difference / max abs logit | argmax agrees |")
    print("|---|---|---|---|---|")
    for fmt in FORMATS:
        q_program, params = export.build_program(model, "forward", "f32", 0, None, None, (fmt, block))
        got = walk.evaluate(q_program, "f32", params, inputs)["logits"]
        c = cosines(got, base)
        relative = float(np.max(np.abs(got.astype(np.float64) - base)) / np.max(np.abs(base)))
        agree = int(np.sum(np.argmax(got, axis=1) == np.argmax(base, axis=1)))
        print(f"| {fmt} | {c.min():.6f} | {c.mean():.6f} | {relative:.4f} | {agree} of {len(c)} |")
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
