"""A growth probe's figures and verdict: counts at doubling sizes, the ratio per
doubling (plain, with the fixed part fitted and subtracted, or of the increments), and
the rule the ratios must keep."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

# The growth probes' model: a gpt small enough to run under callgrind in a second.
GROWTH = {"vocab": 64, "positions": 64, "dim": 32, "heads": 2, "mlp": 64, "tokens": 8, "layers": 2}

# Sizes: full (make probes) and quick (tests/test_probes.py, the mutant runner).
SIZES: dict[str, dict[str, tuple[int, ...]]] = {
    "full": {
        "layers": (2, 4, 8, 16),
        "tokens": (8, 16, 32, 64),
        "decode": (8, 16, 32, 64),
        "generate": (8, 16, 32, 64),
        "exporter": (4, 8, 16, 32),
        "text": (2, 4, 8, 16),
        "quant_k": (512, 1024, 2048, 4096),
        "quant_n": (64, 128, 256, 512),
        "nodes": (64, 128, 256, 512),
    },
    "quick": {
        "layers": (1, 2, 4),
        "tokens": (16, 32, 64),
        "decode": (8, 16, 32),
        "generate": (8, 16, 32),
        "exporter": (4, 8, 16),
        "text": (2, 4, 8),
        "quant_k": (512, 1024, 2048),
        "quant_n": (64, 128, 256),
        "nodes": (64, 128, 256, 512),
    },
}


@dataclasses.dataclass
class Growth:
    """One growth probe: counts at doubling sizes and the ratio per doubling."""

    name: str
    size: str  # what doubles: layers, tokens
    sizes: list[int]
    counts: list[int]
    ratios: list[float]
    rule: str  # what must hold, in words
    holds: bool
    command: str
    unit: str = "instructions"
    first: int = 1  # the row of the first ratio (2 for increments: d(2L)/d(L) needs 3 sizes)

    def lines(self) -> list[str]:
        out = [f"{self.name}: {self.unit} against {self.size} ({self.rule}): {'holds' if self.holds else 'FAILS'}"]
        for k, (s, c) in enumerate(zip(self.sizes, self.counts)):
            ratio = ""
            if 0 <= k - self.first < len(self.ratios):
                ratio = f"  ratio {self.ratios[k - self.first]:.3f}"
            out.append(f"    {self.size} = {s:>3}  {c:>14,}{ratio}")
        return out


def fitted_ratios(sizes: Sequence[int], counts: Sequence[int]) -> tuple[float, list[float]]:
    """The fixed part a of a + b·size, least squares, and (c(2s) - a) / (c(s) - a)."""
    b, a = np.polyfit(np.asarray(sizes, float), np.asarray(counts, float), 1)
    return float(a), [(counts[k + 1] - a) / (counts[k] - a) for k in range(len(counts) - 1)]


def plain_ratios(counts: Sequence[int]) -> list[float]:
    return [counts[k + 1] / counts[k] for k in range(len(counts) - 1)]


def increment_ratios(counts: Sequence[int]) -> list[float]:
    """d(2s) / d(s) with d(s) = c(2s) - c(s): any fixed part cancels."""
    d = [counts[k + 1] - counts[k] for k in range(len(counts) - 1)]
    return [d[k + 1] / d[k] for k in range(len(d) - 1)]


def config_text(config: dict, varied: str) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in config.items() if k != varied) + f"; {varied} varies)"
