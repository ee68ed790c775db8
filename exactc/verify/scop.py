"""Polly's verdict beside exactc's, nest by nest, on the directories of `exactc export
--mode scop` (docs/scop.md).

Each nest file is compiled by clang-19 with Polly's SCoP detection only, at its early
position (before LLVM's loop passes rewrite the loops), the whole function allowed as a
SCoP, non-affine branches not (a branch on data ends a SCoP rather than hiding inside
one), no branch speculated into a select and no selection's value sunk into a branch
(so Polly sees the control the printed C has: a selection is data, an `if` that does
work is control), and its remarks read: Polly says a nest is a static-control part when exactly one
SCoP is found in its file and it covers the nest's loops, from the outermost `for` to
the function's closing brace. They agree on a nest when exactc's verdict (printer/
scop.py's nest_verdict, in scop.json) says the same; no other nest may be one SCoP.

    python -m exactc.verify.scop            # every entry of gpt, bert, llama at f64, f32, bf16,
                                            # each forward with q8 and q4 weights, and
                                            # gpt's and llama's loss_grad at f64 and f32
    python -m exactc.verify.scop --reduced  # make verify's set: each forward and gpt's
                                            # loss_grad, at f32
    python -m exactc.verify.scop DIR ...    # directories already exported

ends with `scop: <nests> nests, <s> static-control, <a> agree with Polly`, and exits 1
when a nest disagrees or a directory's scop_check finds bits that differ.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from exactc.runtime import STRICT_FLAGS

POLLY_CC = "clang-19"
POLLY_FLAGS = (
    "-O2",
    *("-mllvm", "-polly"),
    *("-mllvm", "-polly-position=early"),
    *("-mllvm", "-polly-process-unprofitable"),
    *("-mllvm", "-polly-only-scop-detection"),
    *("-mllvm", "-polly-detect-full-functions"),
    *("-mllvm", "-polly-allow-nonaffine-branches=false"),
    # the control of the printed C stays as printed: a branch is not speculated into a
    # select (simplifycfg), nor a selection's value sunk into a branch (instcombine)
    *("-mllvm", "-phi-node-folding-threshold=0"),
    *("-mllvm", "-two-entry-phi-node-folding-threshold=0"),
    *("-mllvm", "-instcombine-code-sinking=false"),
    "-Rpass-analysis=polly-scops",
)
# Polly's optimizer, as docs/scop.md's comparison builds the nests: its schedule
# (tiling on by default) and its vectorizer's strip-mining, unprofitable SCoPs too.
POLLY_OPTIMIZE = (
    *("-mllvm", "-polly"),
    *("-mllvm", "-polly-vectorizer=stripmine"),
    *("-mllvm", "-polly-process-unprofitable"),
)
_REMARK = re.compile(r":(\d+):\d+: remark: SCoP (begins|ends) here\.")
# The directories `make scop` checks (requests()), small.
MODELS = ("gpt", "bert", "llama")
SITES = ("f64", "f32", "bf16")
GRAD_SITES = ("f64", "f32")  # a backward primitive is computed at f64 or f32 (semantics.md section 17)
SMALL = ("layers=1",)


@functools.lru_cache(maxsize=None)
def polly_missing(cc: str = POLLY_CC) -> str | None:
    """Why Polly cannot run here (None when it can)."""
    try:
        done = subprocess.run(
            [cc, *STRICT_FLAGS, *POLLY_FLAGS, "-x", "c", "-c", "-o", os.devnull, "-"],
            input="void f(void) {}\n",
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        return (
            f"{cc} is not installed: `make install` installs it with Polly (apt-get install clang-19 libpolly-19-dev)"
        )
    if done.returncode != 0:
        return (
            f"{cc} does not run Polly ({done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}): "
            "`make install` installs it (apt-get install libpolly-19-dev)"
        )
    return None


def polly_scops(path: Path, cc: str = POLLY_CC) -> list[tuple[int, int]]:
    """The SCoPs Polly detects in a nest file: (first line, last line) each."""
    done = subprocess.run(
        [cc, *STRICT_FLAGS, *POLLY_FLAGS, "-I", str(path.parent.parent), "-c", "-o", os.devnull, str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{cc} failed on {path}:\n{done.stderr}")
    scops, begin = [], None
    for line, what in _REMARK.findall(done.stderr):
        if what == "begins":
            begin = int(line)
        elif begin is not None:
            scops.append((begin, int(line)))
            begin = None
    return scops


# Lines that leave no instruction of their own where the nest begins: the header of a
# loop of one iteration (its test folds away) and a scalar declared at a literal. Polly's
# remark places a SCoP's beginning at its first instruction, so a nest that opens with
# them (xent_mean: `for i < 1`, `count = 0`, `for b < 1`) is covered from the first
# line past them.
_NO_CODE = re.compile(
    r"\s*(for \(int64_t (\w+) = 0; \2 < 1; \2\+\+\) \{.*"
    r"|(const )?\w+ \w+ = \(?-?[\w.+]+\)?( /\* [^*]* \*/)?;)$"
)


def nest_span(source: str) -> tuple[int, int]:
    """The lines where the nest's code begins (its outermost `for`, or the first line past
    those that leave no instruction there) and of its function's closing brace."""
    lines = source.splitlines()
    first = lines.index("#pragma scop") + 1  # 0-based: the line after the pragma
    end = lines.index("#pragma endscop") + 2
    while first + 1 < end - 1 and _NO_CODE.fullmatch(lines[first]):
        first += 1
    return first + 1, end


def polly_static(scops: list[tuple[int, int]], span: tuple[int, int]) -> bool:
    """Polly's verdict: one SCoP, covering the nest's loops to the function's end."""
    return len(scops) == 1 and scops[0][0] <= span[0] and scops[0][1] >= span[1]


@dataclasses.dataclass(frozen=True)
class Agreement:
    """One nest: exactc's verdict, Polly's SCoPs and verdict."""

    directory: str
    function: str
    exactc: bool
    why: str
    scops: tuple[tuple[int, int], ...]
    polly: bool

    @property
    def agree(self) -> bool:
        return self.exactc == self.polly


def check_directory(directory: Path, cc: str = POLLY_CC, jobs: int = 2) -> list[Agreement]:
    """Polly's verdict on every nest of a SCoP directory, beside exactc's (scop.json)."""
    table = json.loads((directory / "scop.json").read_text())["nests"]

    def one(row: dict) -> Agreement:
        path = directory / row["file"]
        scops = polly_scops(path, cc)
        return Agreement(
            directory.name,
            row["function"],
            row["static"],
            row["why"],
            tuple(scops),
            polly_static(scops, nest_span(path.read_text())),
        )

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, table))


def summary(rows: list[Agreement]) -> str:
    static = sum(r.exactc for r in rows)
    agree = sum(r.agree for r in rows)
    return f"scop: {len(rows)} nests, {static} static-control, {agree} agree with Polly"


def disagreement(row: Agreement) -> str:
    said = "static" if row.exactc else f"not static ({row.why})"
    return f"DISAGREE {row.directory}/{row.function}: exactc says {said}; Polly finds SCoPs at lines {list(row.scops)}"


def run_driver(directory: Path, make_args: tuple[str, ...] = ()) -> str | None:
    """Build the directory's scop_check (`make_args`: CC=..., CFLAGS=...) and run it: None
    when every output agrees, else what it printed."""
    built = subprocess.run(["make", "-s", "-j2", "-C", str(directory), *make_args], capture_output=True, text=True)
    if built.returncode != 0:
        return built.stdout + built.stderr
    ran = subprocess.run([str(directory / "scop_check")], capture_output=True, text=True)
    return None if ran.returncode == 0 else ran.stdout + ran.stderr


def requests() -> list[tuple[str, str, str, tuple[str, int] | None]]:
    """What `make scop` exports: every entry of every architecture at every type, each
    forward at f32 with q8 and with q4 linear weights, and each causal LM's loss_grad at
    the types of its backward primitives; (model, entry, site, weights)."""
    from exactc.exporter import models

    out: list[tuple[str, str, str, tuple[str, int] | None]] = []
    for model in MODELS:
        out += [(model, entry, site, None) for entry in models.entries(model) for site in SITES]
        out += [(model, "forward", "f32", (fmt, 32)) for fmt in ("q8", "q4")]
        if model in models.CAUSAL_LMS:
            out += [(model, models.LOSS_GRAD, site, None) for site in GRAD_SITES]
    return out


# The set `make verify` ends with (`--reduced`): each architecture's forward and gpt's
# loss_grad, at f32: every kind of nest exactc's verdict tells apart (a gather, a branch
# on a padding mask, a scatter, a label's gather) in under a minute; `make scop` runs all.
REDUCED = (
    ("gpt", "forward", "f32", None),
    ("bert", "forward", "f32", None),
    ("llama", "forward", "f32", None),
    ("gpt", "loss_grad", "f32", None),
)


def export_directories(root: Path, chosen: Sequence[tuple[str, str, str, tuple[str, int] | None]]) -> list[Path]:
    """The directories of `chosen` (requests(), or REDUCED), small, exported in SCoP mode
    under `root`."""
    from exactc.exporter import export

    out = []
    for model, entry, site, weights in chosen:
        overrides = dict(item.split("=") for item in SMALL)
        target = root / "-".join([model, entry, site] + ([weights[0]] if weights else []))
        export.write(export.prepare_scop(model, entry, site, overrides=overrides, weights=weights), target)
        out.append(target)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exactc.verify.scop", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directories", nargs="*", type=Path, help="SCoP directories (default: export them)")
    parser.add_argument("--cc", default=POLLY_CC, help=f"the clang that runs Polly (default {POLLY_CC})")
    parser.add_argument(
        "--reduced", action="store_true", help="make verify's set: each forward and gpt's loss_grad, at f32"
    )
    args = parser.parse_args(argv)
    missing = polly_missing(args.cc)
    if missing:
        print(f"scop: {missing}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="exactc-scop-") as work:
        directories = args.directories or export_directories(Path(work), REDUCED if args.reduced else requests())
        rows, failed = [], 0
        for directory in directories:
            problem = run_driver(directory)
            if problem:
                print(f"BITS     {directory.name}: {problem.strip()}")
                failed += 1
            rows += check_directory(directory, args.cc)
        for row in rows:
            if not row.agree:
                print(disagreement(row))
        print(summary(rows))
    return 1 if failed or not all(r.agree for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
