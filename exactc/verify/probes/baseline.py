"""Regression baselines: the counts of a fixed set of small exports and kernels, per
toolchain key, in verify/probe_baselines.json; a count that rose more than the threshold
fails, and a toolchain without a baseline fails too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from exactc.verify.probes.counting import count_export, count_kernel, key_text, quantized_kernel

BASELINES = Path(__file__).resolve().parent.parent / "probe_baselines.json"
DEFAULT_THRESHOLD = 1.0  # percent: a count that rose more fails the regression check

# The regression set: every architecture's forward at f32, and gpt at bf16.
SMALL = {
    "gpt": {"vocab": 48, "positions": 8, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "bert": {"vocab": 48, "positions": 8, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "llama": {"vocab": 48, "dim": 16, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 20, "tokens": 6},
}
REGRESSION_SET = (
    ("gpt", "forward", "f32"),
    ("bert", "forward", "f32"),
    ("llama", "forward", "f32"),
    ("gpt", "forward", "bf16"),
)

# The kernels of quantized operands alone: the regression set of the new kernels (f32,
# blocks of 32, a short last one).
QUANT_SET = {"m": 4, "k": 80, "n": 16, "block": 32}


def measure_kernel_baseline() -> dict[str, int]:
    """The inclusive count of each kernel of quantized operands at QUANT_SET's sizes."""
    dims = QUANT_SET
    rows = {
        "quantize": count_kernel(quantized_kernel("quantize", "q8", dims["m"], dims["k"], dims["n"], dims["block"]))
    }
    for primitive in ("qlinear_w", "qlinear_i"):
        for fmt in ("q8", "q4"):
            kernel = quantized_kernel(primitive, fmt, dims["m"], dims["k"], dims["n"], dims["block"])
            rows[f"{primitive}.{fmt}"] = count_kernel(kernel)
    return rows


# ---- regression baselines ---------------------------------------------------------------------

ENTRY_ROW = "(entry, inclusive)"
RECORD_BASELINE = "make probes-baseline"  # python -m exactc.verify.probes --update --baseline-only


def measure_baseline(workdir: Path) -> dict[str, dict[str, int]]:
    """Per export of the regression set: the entry's inclusive count and the self count
    of every function collected inside it."""
    out = {}
    for model, entry, site in REGRESSION_SET:
        counted = count_export(workdir, model, entry, site, SMALL[model])
        rows = {f"{counted.entry} {ENTRY_ROW}": counted.entry_count}
        for name, cost in sorted(counted.profile.functions.items()):
            if cost.self_ir:
                rows[name] = cost.self_ir
        out[f"{model}.{entry}.{site}"] = rows
    out["kernels.f32"] = measure_kernel_baseline()
    return out


@dataclasses.dataclass
class Change:
    export: str
    row: str
    before: int | None
    after: int | None

    @property
    def ratio(self) -> float | None:
        if not self.before or self.after is None:
            return None
        return self.after / self.before


def compare(
    baseline: dict[str, dict[str, int]], current: dict[str, dict[str, int]], threshold: float = DEFAULT_THRESHOLD
) -> tuple[list[Change], list[Change]]:
    """Every changed row, and those that rose more than `threshold` percent (a row that
    is new counts in its entry's inclusive row, so it is reported, not failed)."""
    changes, failures = [], []
    for export in sorted(set(baseline) | set(current)):
        before, after = baseline.get(export, {}), current.get(export, {})
        for row in sorted(set(before) | set(after)):
            b, a = before.get(row), after.get(row)
            if a == b:
                continue
            change = Change(export, row, b, a)
            changes.append(change)
            if change.ratio is not None and change.ratio > 1 + threshold / 100:
                failures.append(change)
    return changes, failures


def change_table(changes: list[Change], threshold: float) -> list[str]:
    if not changes:
        return ["    no count changed"]
    lines = [f"    {'export':<18} {'function':<36} {'baseline':>12} {'now':>12} {'ratio':>8}"]
    for c in changes:
        ratio = c.ratio
        text = "new" if c.before is None else "gone" if c.after is None else f"{ratio:.4f}"
        flag = "  FAILS" if ratio is not None and ratio > 1 + threshold / 100 else ""
        lines.append(
            f"    {c.export:<18} {c.row:<36} {c.before if c.before is not None else '-':>12} "
            f"{c.after if c.after is not None else '-':>12} {text:>8}{flag}"
        )
    return lines


def load_baselines(path: Path = BASELINES) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return json.loads(path.read_text())["baselines"]


def baseline_for(key: dict[str, str], path: Path = BASELINES) -> dict[str, dict[str, int]] | None:
    for entry in load_baselines(path):
        if entry["key"] == key:
            return entry["counts"]
    return None


def write_baseline(key: dict[str, str], counts: dict[str, dict[str, int]], path: Path = BASELINES) -> None:
    entries = [e for e in load_baselines(path) if e["key"] != key]
    entries.append({"key": key, "counts": counts})
    entries.sort(key=lambda e: key_text(e["key"]))
    doc = {
        "about": "Instruction counts (callgrind Ir) of the regression set, per toolchain key: each "
        "function's self count inside the entry, and the entry's inclusive count. "
        "Written by `python -m exactc.verify.probes --update`.",
        "exports": {**{f"{m}.{e}.{s}": SMALL[m] for m, e, s in REGRESSION_SET}, "kernels.f32": QUANT_SET},
        "baselines": entries,
    }
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")


@dataclasses.dataclass
class Regression:
    holds: bool
    lines: list[str]
    failures: list[Change]


def check_regression(
    current: dict[str, dict[str, int]], key: dict[str, str], threshold: float, path: Path = BASELINES
) -> Regression:
    baseline = baseline_for(key, path)
    if baseline is None:
        # No baseline is no check: it fails, so that a new toolchain cannot pass unchecked.
        known = [key_text(e["key"]) for e in load_baselines(path)]
        lines = [
            f"regression: FAILS: no baseline for this toolchain ({key_text(key)}).",
            *(f"    baselines exist for: {k}" for k in known),
            f"    `{RECORD_BASELINE}` records one (commit {BASELINES.name} with it).",
        ]
        return Regression(False, lines, [])
    changes, failures = compare(baseline, current, threshold)
    verdict = "holds" if not failures else f"FAILS: {len(failures)} count(s) rose more than {threshold:g} %"
    lines = [f"regression: against the baseline of this toolchain, threshold {threshold:g} %: {verdict}"]
    lines += change_table(changes, threshold)
    return Regression(not failures, lines, failures)
