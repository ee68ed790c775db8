"""Instruction-count probes: costs that must grow linearly do, and no count moved.

    python -m exactc.verify.probes [--update] [--baseline-only] [--only PROBE ...] [--threshold 1.0] [--quick]
                                   [--json F] [--plot PNG]

Some mistakes change no output: an exporter pass gone quadratic, a fold unrolled, a
kernel that computes twice. Only a count of the work sees them. Every count here is
callgrind's instruction count (docs/design.md, principle 7) or a byte count, and every
figure is printed with the toolchain it depends on (`probe_key`).

Growth probes (each prints its ratio per doubling of the size):

- program/layers: the exported gpt `forward` (f32), the instructions of its call in
  main (client requests around it under -DEXACTC_PROBE), for L = 2, 4, 8, 16 layers. The fixed part (embedding, head) is fitted from the data by
  least squares (a + b·L) and subtracted: (c(2L) - a) / (c(L) - a) = 2.00 within 0.05.
- program/tokens-linear: one program exported for T_max = 64 (one binary), run at
  T = 8 ... 64 (the sequence axis is bound at run time); the linear and norm kernels'
  counts summed: c(2T) / c(T) = 2.00 within 0.05.
- program/tokens-attention: the QK and AV matmuls, the scale and the causal softmax
  (with the exp it calls): 4.00 for a full causal pass, within 0.25 at the largest
  doubling (the per-row and per-call work, linear in T, pulls smaller sizes below 4,
  and so does the exp pass's laned form, whose cost per element falls as a row's
  visible prefix passes its 16-element blocks: 3.82 at 32 -> 64).
- program/decode-attention and program/decode-rest: one llama `decode` (a generation
  step with a key/value cache) exported for T_max = 64 cached positions, run at T = 8
  ... 64: its attention kernels (the scores and weighted values, the scale, the softmax,
  the cache copied ahead of the step's row) grow linearly with T (fixed part fitted and
  subtracted, 2.00 within 0.05), the rest of the step does not (1.00 within 0.01).
- program/generate-rest: the same program's whole generation loop (`model generate`,
  greedy, a one-token prompt) for N = 8 ... 64 new tokens: everything but the attention
  kernels (the other kernels, the sampler, the cache's moves) costs the same per step,
  so it grows linearly with N (fixed part fitted and subtracted, 2.00 within 0.05); a
  loop that recomputed the whole sequence at every step, the same bits, grows as N^2.
- exporter/straight-line: the exporter's own cost (trace and print, straight-line host)
  for L = 4 ... 32, the Python process under callgrind with instrumentation on only
  around the call. The fixed part (the structured host, the kernels' lowering, both
  independent of L) cancels in the increments: d(2L) / d(L), d(L) = c(2L) - c(L), at
  most 2.3.
- text/structured: the structured host's model.c bytes, constant in L (ratio 1.00
  within 0.01; only the digits of L and of the arena size change).
- text/straight-line: the straight-line host's model.c bytes, linear in L (fitted
  ratio 2.00 within 0.05).
- kernel/qlinear_i-k and kernel/qlinear_i-n: the integer-form quantized linear alone
  (its q8 and q4 kernels, summed), in a small driver program, the kernel functions'
  inclusive count, for K = 512 ... 4096 and for N = 64 ... 512: fitted ratio 2.00
  within 0.05 (the fixed part, per output, fitted and subtracted).

Regression baselines: for a fixed set of small exports, the self count of every
function collected inside the entry (each kernel's nest functions, the libm
functions) and the entry's inclusive count; and the kernels of quantized operands alone
(`quantize`, `qlinear_w` and `qlinear_i` in q8 and q4, in a driver program), stored in
verify/probe_baselines.json under
the toolchain key (compiler, flags, valgrind, architecture, C library). A count that
rose more than the threshold (1 %) fails; every change is printed with its ratio; with
no baseline for this key the check fails, naming `make probes-baseline`; --update
rewrites this key's entry (with --baseline-only, without running the growth probes:
what `make probes-baseline` runs).

The last line is `probes: <held>/<total> hold`; the exit status is 0 when all hold.
"""

from __future__ import annotations

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from exactc.verify.probes.baseline import (
    BASELINES,
    DEFAULT_THRESHOLD,
    Regression,
    check_regression,
    measure_baseline,
    write_baseline,
)
from exactc.verify.probes.counting import key_text, probe_key
from exactc.verify.probes.exported import (
    probe_decode,
    probe_generate,
    probe_grad_layers,
    probe_grad_tokens,
    probe_layers,
    probe_quantized_linear,
    probe_text,
    probe_tokens,
)
from exactc.verify.probes.exporter import probe_exporter, probe_nodes, run_exporter_worker, run_nodes_worker
from exactc.verify.probes.growth import SIZES, Growth, fitted_ratios

# ---- the command ------------------------------------------------------------------------------


# what --only names
GROWTH_PROBES = ("layers", "tokens", "grad", "decode", "generate", "exporter", "nodes", "text", "quant")


def run_growth(
    workdir: Path,
    sizes: Mapping[str, Sequence[int]],
    log: Callable[[str], None] = print,
    only: Sequence[str] = GROWTH_PROBES,
) -> list[Growth]:
    probes: list[Growth] = []
    steps = {
        "layers": lambda: [probe_layers(workdir, sizes["layers"])],
        "tokens": lambda: probe_tokens(workdir, sizes["tokens"]),
        "grad": lambda: [
            *probe_grad_layers(workdir, sizes["grad_layers"]),
            *probe_grad_tokens(workdir, sizes["grad_tokens"]),
        ],
        "decode": lambda: probe_decode(workdir, sizes["decode"]),
        "generate": lambda: probe_generate(workdir, sizes["generate"]),
        "exporter": lambda: [probe_exporter(sizes["exporter"])],
        "nodes": lambda: probe_nodes(sizes["nodes"]),
        "text": lambda: probe_text(sizes["text"]),
        "quant": lambda: probe_quantized_linear(sizes["quant_k"], sizes["quant_n"]),
    }
    for name in GROWTH_PROBES:
        if name not in only:
            continue
        for g in steps[name]():
            probes.append(g)
            for line in g.lines():
                log(line)
    return probes


# The growth each probe expects, as the exponent of the size (the dotted line of the plot).
EXPECTED_SLOPE = {
    "program/layers": 1,
    "program/tokens-linear": 1,
    "program/tokens-attention": 2,
    "program/grad-layers": 1,
    "program/grad-over-forward": 0,
    "program/grad-tokens-linear": 1,
    "program/grad-tokens-attention": 2,
    "program/decode-attention": 1,
    "program/decode-rest": 0,
    "program/generate-rest": 1,
    "exporter/straight-line": 1,
    "exporter/nodes-chain": 1,
    "exporter/nodes-diamonds": 1,
    "exporter/frames-chain": 1,
    "exporter/frames-diamonds": 1,
    "exporter/print-chain": 1,
    "exporter/print-diamonds": 1,
    "text/structured": 0,
    "text/straight-line": 1,
    "kernel/qlinear_i-k": 1,
    "kernel/qlinear_i-n": 1,
}


def plot(probes: list[Growth], path: Path) -> None:
    """Log-log: each probe's count against its size, the count less its fixed part
    (least squares a + b·size) where the probe subtracts one, and the expected growth
    (dotted, through the largest size)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    rows = (len(probes) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(11, 3.4 * rows))
    for ax, g in zip(np.ravel(axes), probes):
        sizes = np.asarray(g.sizes, float)
        counts = np.asarray(g.counts, float)
        ax.loglog(sizes, counts, "o-", base=2, label="count")
        shown = [counts]
        if g.name in (
            "program/layers",
            "program/grad-layers",
            "program/decode-attention",
            "exporter/straight-line",
            "text/straight-line",
            "kernel/qlinear_i-k",
            "kernel/qlinear_i-n",
        ) or g.name.startswith(("exporter/nodes-", "exporter/frames-")):
            a, _ = fitted_ratios(g.sizes, g.counts)
            ax.loglog(sizes, counts - a, "s--", base=2, label="count - fixed part")
            shown.append(counts - a)
        slope = EXPECTED_SLOPE.get(g.name)
        if slope is not None:
            top = shown[-1][-1]
            ax.loglog(sizes, top * (sizes / sizes[-1]) ** slope, ":", color="gray", base=2, label=f"size^{slope}")
        low, high = min(float(s.min()) for s in shown), max(float(s.max()) for s in shown)
        ax.set_ylim(min(low, high / 16) / 1.3, high * 1.3)
        ax.set_title(f"{g.name}: {'holds' if g.holds else 'FAILS'}", fontsize=9)
        ax.set_xlabel(g.size)
        ax.set_ylabel(g.unit, fontsize=8)
        ax.legend(fontsize=7)
    for ax in np.ravel(axes)[len(probes) :]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exactc.verify.probes", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--update", action="store_true", help="rewrite this toolchain's regression baseline")
    parser.add_argument(
        "--baseline-only",
        action="store_true",
        help="measure the regression set only, not the growth probes (with --update: make probes-baseline)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=GROWTH_PROBES,
        metavar="PROBE",
        help=f"these growth probes only ({', '.join(GROWTH_PROBES)}), without the regression set",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help="percent a count may rise before the regression check fails (default 1.0)",
    )
    parser.add_argument("--quick", action="store_true", help="the smaller sizes of tests/test_probes.py")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    parser.add_argument("--plot", type=Path, help="write the log-log plot (PNG; needs matplotlib)")
    parser.add_argument("--plot-from", type=Path, metavar="JSON", help="only plot the figures of a --json file")
    parser.add_argument("--exporter-worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--nodes-worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.only and (args.update or args.baseline_only):
        parser.error("--only runs growth probes without the regression set: it cannot --update the baseline")
    if args.plot_from:
        figures = json.loads(args.plot_from.read_text())["growth"]
        plot([Growth(**g) for g in figures], args.plot or Path("probes.png"))
        return 0
    if args.exporter_worker:
        run_exporter_worker(args.exporter_worker[0], [int(n) for n in args.exporter_worker[1:]])
        return 0
    if args.nodes_worker:
        run_nodes_worker(args.nodes_worker[0], [int(n) for n in args.nodes_worker[1:]])
        return 0

    key = probe_key()
    print(f"toolchain: {key_text(key)}")
    with tempfile.TemporaryDirectory(prefix="exactc-probes-") as tmp:
        workdir = Path(tmp)
        probes = (
            []
            if args.baseline_only
            else run_growth(workdir, SIZES["quick" if args.quick else "full"], only=args.only or GROWTH_PROBES)
        )
        current = {} if args.only else measure_baseline(workdir)
    if args.only:
        regression = None
    elif args.update:
        write_baseline(key, current)
        print(f"regression: baseline for this toolchain written to {BASELINES}; commit it")
        regression = Regression(True, [], [])
    else:
        regression = check_regression(current, key, args.threshold)
        for line in regression.lines:
            print(line)
    if args.json:
        args.json.write_text(
            json.dumps({"key": key, "growth": [dataclasses.asdict(g) for g in probes], "regression": current}, indent=1)
            + "\n"
        )
    if args.plot:
        plot(probes, args.plot)
    held = sum(g.holds for g in probes) + (regression is not None and regression.holds)
    total = len(probes) + (regression is not None)
    print(f"probes: {held}/{total} hold")
    return 0 if held == total else 1
