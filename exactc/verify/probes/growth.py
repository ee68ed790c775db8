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
        "grad_layers": (2, 4, 8, 16),
        "grad_tokens": (8, 16, 32, 64),
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
        "grad_layers": (1, 2, 4),
        "grad_tokens": (16, 32, 64),
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
    """One growth probe: counts at doubling sizes, the ratio per doubling and the verdict."""

    name: str
    size: str  # what doubles: layers, tokens
    sizes: list[int]
    counts: list[int]
    ratios: list[float]
    rule: str  # what must hold, in words
    holds: bool
    command: str
    unit: str = "instructions"
    first: int = 1  # the row of the first ratio (2 for increments: d(2L)/d(L) needs 3 sizes; 0 for values)
    broken: list[int] = dataclasses.field(default_factory=list)  # the ratios out of the rule, by index

    def lines(self) -> list[str]:
        verdict = "holds" if self.holds else "FAILS: " + "; ".join(self.failures())
        out = [f"{self.name}: {self.unit} against {self.size} ({self.rule}): {verdict}"]
        for k, (s, c) in enumerate(zip(self.sizes, self.counts)):
            ratio = ""
            if 0 <= k - self.first < len(self.ratios):
                ratio = f"  ratio {self.ratios[k - self.first]:.3f}"
            out.append(f"    {self.size} = {s:>3}  {c:>14,}{ratio}")
        return out

    def failures(self) -> list[str]:
        """Each ratio out of the rule, with the size of the row it is printed on."""
        return [f"ratio {self.ratios[k]:.3f} at {self.size} = {self.sizes[k + self.first]}" for k in self.broken]


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a growth probe's ratios must keep, and how they are taken from its counts."""

    # "counts": c(2s)/c(s); "fitted": (c(2s) - a)/(c(s) - a); "increments": d(2s)/d(s);
    # "values": each count itself, a ratio stated per mille (c(s) / 1000)
    of: str
    target: float
    tolerance: float
    at_most: bool = False  # the upper bound only: at most target + tolerance
    largest_only: bool = False  # the bound holds at the largest doubling; every ratio must exceed `floor`
    floor: float | None = None

    def ratios(self, sizes: Sequence[int], counts: Sequence[int]) -> list[float]:
        if self.of == "fitted":
            return fitted_ratios(sizes, counts)[1]
        if self.of == "values":
            return [c / 1000 for c in counts]
        return increment_ratios(counts) if self.of == "increments" else plain_ratios(counts)

    def broken(self, ratios: Sequence[float]) -> list[int]:
        """The indices of the ratios out of the rule."""
        low = float("-inf") if self.at_most else self.target - self.tolerance
        high = self.target + self.tolerance
        out = []
        for k, r in enumerate(ratios):
            bounded = not self.largest_only or k == len(ratios) - 1
            if (bounded and not low <= r <= high) or (self.floor is not None and r <= self.floor):
                out.append(k)
        return out

    def text(self) -> str:
        bound = (
            f"at most {self.target + self.tolerance:.2f}"
            if self.at_most
            else (f"{self.target:.2f} within {self.tolerance:g}")
        )
        if self.largest_only:
            bound += " at the largest doubling"
        if self.floor is not None:
            bound += f", every ratio above {self.floor:g}"
        return bound


@dataclasses.dataclass(frozen=True)
class Series:
    """One series of a probe: what it counts, against which size, and its rule."""

    name: str
    size: str
    rule: Rule
    what: str  # what is counted and how the ratio is taken, in words
    unit: str = "instructions"

    def judge(self, sizes: Sequence[int], counts: Sequence[int], command: str) -> Growth:
        ratios = self.rule.ratios(sizes, counts)
        broken = self.rule.broken(ratios)
        return Growth(
            self.name,
            self.size,
            list(sizes),
            list(counts),
            ratios,
            f"{self.what}; {self.rule.text()}",
            not broken,
            command,
            self.unit,
            {"increments": 2, "values": 0}.get(self.rule.of, 1),
            broken,
        )


@dataclasses.dataclass
class Measured:
    """A probe's counts before any verdict: each series' counts at the same sizes, and the
    command that measured it."""

    sizes: list[int]
    counts: dict[str, list[int]]  # series name -> counts
    commands: dict[str, str]  # series name -> command


def judge(table: Sequence[Series], measured: Measured) -> list[Growth]:
    """The verdict of each series of `table` on the measured counts."""
    return [s.judge(measured.sizes, measured.counts[s.name], measured.commands[s.name]) for s in table]


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
