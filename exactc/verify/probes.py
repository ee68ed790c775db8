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

import argparse
import dataclasses
import json
import os
import platform
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from exactc.verify.callgrind import Profile, run_callgrind, run_callgrind_parts, toolchain_key
from exactc.programs import Build

BASELINES = Path(__file__).resolve().with_name("probe_baselines.json")

CC = "gcc"
# -DEXACTC_PROBE turns on the client requests the host prints around the entry's call in
# main (CALLGRIND_TOGGLE_COLLECT): callgrind, started with collection off, counts the
# network only. The code is compiled as `make OPENMP=0` compiles it for a user.
CFLAGS = "-O2 -DEXACTC_PROBE"
BUILD = Build(cc=CC, openmp=False, cflags=CFLAGS)
MAKE_ARGS = tuple(BUILD.make_args())
DEFAULT_THRESHOLD = 1.0  # percent: a count that rose more fails the regression check

# The growth probes' model: a gpt small enough to run under callgrind in a second.
GROWTH = {"vocab": 64, "positions": 64, "dim": 32, "heads": 2, "mlp": 64, "tokens": 8, "layers": 2}
LINEAR_PRIMITIVES = ("linear", "layernorm", "rmsnorm")
ATTENTION_PRIMITIVES = ("matmul", "scale", "softmax")

# The regression set: every architecture's forward at f32, and gpt at bf16.
SMALL = {
    "gpt": {"vocab": 48, "positions": 8, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "bert": {"vocab": 48, "positions": 8, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "llama": {"vocab": 48, "dim": 16, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 20, "tokens": 6},
}
REGRESSION_SET = (("gpt", "forward", "f32"), ("bert", "forward", "f32"), ("llama", "forward", "f32"),
                  ("gpt", "forward", "bf16"))

# The kernels of quantized operands, alone: the integer-form linear's growth (K and N
# vary), and the regression set of the new kernels (f32, blocks of 32, a short last one).
QUANT_GROWTH = {"m": 2, "k": 256, "n": 64, "block": 32}
QUANT_SET = {"m": 4, "k": 80, "n": 16, "block": 32}

# Sizes: full (make probes) and quick (tests/test_probes.py, the mutant runner).
SIZES = {
    "full": {"layers": (2, 4, 8, 16), "tokens": (8, 16, 32, 64), "decode": (8, 16, 32, 64), "generate": (8, 16, 32, 64),
             "exporter": (4, 8, 16, 32), "text": (2, 4, 8, 16), "quant_k": (512, 1024, 2048, 4096), "quant_n": (64, 128, 256, 512), "nodes": (64, 128, 256, 512)},
    "quick": {"layers": (1, 2, 4), "tokens": (16, 32, 64), "decode": (8, 16, 32), "generate": (8, 16, 32),
              "exporter": (4, 8, 16), "text": (2, 4, 8), "quant_k": (512, 1024, 2048), "quant_n": (64, 128, 256), "nodes": (64, 128, 256, 512)},
}
# The node-count probe's synthetic functions: one function of N primitives on a small
# tensor, in two shapes (SHAPES), so that only the exporter's cost per node is counted.
NODE_TENSOR = (4, 8)
NODE_SHAPES = ("chain", "diamonds")


class ProbeError(RuntimeError):
    """A probe could not be measured (a build failed, valgrind is missing)."""


# ---- the toolchain key ------------------------------------------------------------------------


def probe_key() -> dict[str, str]:
    """What every count here depends on besides the program and its input."""
    key = toolchain_key(CC, [CFLAGS, "OPENMP=0"])
    libc, version = platform.libc_ver()
    key["libc"] = f"{libc} {version}".strip()
    return key


def key_text(key: dict[str, str]) -> str:
    return "; ".join(f"{k}: {key[k]}" for k in sorted(key))


# ---- exported programs under callgrind ----------------------------------------------------------


@dataclasses.dataclass
class Counted:
    """One exported program run under callgrind, collection limited to its entry."""

    profile: Profile
    entry: str  # the C function of the entry (`forward`)
    primitives: dict[str, str]  # a kernel's C function (linear_qkv) -> its primitive (linear)

    @property
    def entry_count(self) -> int:
        """Everything collected: the entry's call with what it calls."""
        return self.profile.total

    def kernels(self, primitives: Sequence[str]) -> int:
        """Inclusive counts of the kernels of these primitives (their nest functions,
        with the libm functions they call)."""
        return sum(c.inclusive_ir for name, c in self.profile.functions.items()
                   if self.primitives.get(name) in primitives)


def export_program(workdir: Path, model: str, entry: str, site: str, overrides: dict, straight: bool = False):
    """Export into `workdir` (a folder of its own: tests patch its sources); the root and
    the entry's C function."""
    from exactc.exporter import export

    prepared = export.ExportSpec(model, entry, site, 0, overrides, straight=straight).prepare()
    name = f"{model}-{entry}-{site}-" + "-".join(f"{k}{v}" for k, v in sorted(overrides.items()))
    root = export.write(prepared, workdir / name, force=True)
    return root, prepared.program.function.name


def build_probe(root: Path) -> Path:
    """`make OPENMP=0 CFLAGS=...` in the exported directory (programs.py, cached)."""
    from exactc.programs import ProgramBuildError, make

    try:
        return make(root, BUILD).path
    except ProgramBuildError as error:
        raise ProbeError(str(error)) from None


def kernel_primitives(root: Path) -> dict[str, str]:
    """Each kernel function of kernels.h and its primitive: the declarations under a
    kernel's `/* linear_qkv: linear */` line."""
    out, primitive = {}, None
    for line in (root / "kernels.h").read_text().splitlines():
        head = re.match(r"/\* (\w+): (\w+) \*/$", line)
        if head:
            primitive = head.group(2)
            continue
        declared = re.match(r"(?:void|int) (\w+)\(", line)
        if declared and primitive:
            out[declared.group(1)] = primitive
    return out


def count_program(root: Path, entry: str, inputs: Path | None = None) -> Counted:
    """The counts of one run of the exported program at `root` on `inputs` (default: its
    conformance inputs)."""
    program = build_probe(root)
    with tempfile.TemporaryDirectory(prefix="exactc-probe-out-") as out:
        profile = run_callgrind([str(program), str(root / "weights.safetensors"),
                                 str(inputs or root / "conformance" / "inputs"), out], collect_at_start=False)
    if profile.total == 0:
        raise ProbeError(f"{root}: nothing collected around {entry} (is EXACTC_PROBE in CFLAGS {CFLAGS}?)")
    return Counted(profile, entry, kernel_primitives(root))


def count_export(workdir: Path, model: str, entry: str, site: str, overrides: dict) -> Counted:
    root, fn = export_program(workdir, model, entry, site, overrides)
    return count_program(root, fn)


# ---- growth -----------------------------------------------------------------------------------


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


def probe_layers(workdir: Path, sizes: Sequence[int]) -> Growth:
    counts = [count_export(workdir, "gpt", "forward", "f32", dict(GROWTH, layers=n)).entry_count for n in sizes]
    _, ratios = fitted_ratios(sizes, counts)
    holds = all(abs(r - 2.0) <= 0.05 for r in ratios)
    return Growth("program/layers", "layers", list(sizes), counts, ratios,
                  "fixed part fitted and subtracted; 2.00 within 0.05", holds,
                  f"gpt forward f32 {_config_text(GROWTH, 'layers')}, make {' '.join(MAKE_ARGS)}, "
                  "valgrind --tool=callgrind --collect-atstart=no")


def count_lengths(workdir: Path, sizes: Sequence[int]) -> list[Counted]:
    """One gpt `forward` exported for T_max = max(sizes), built once, run at each length
    T of `sizes` (the first T tokens of its conformance input)."""
    root, fn = export_program(workdir, "gpt", "forward", "f32", dict(GROWTH, tokens=max(sizes)))
    ids = np.load(root / "conformance" / "inputs" / "input_ids.npy")
    counted = []
    for n in sizes:
        folder = workdir / f"input-T{n}"
        folder.mkdir(exist_ok=True)
        np.save(folder / "input_ids.npy", ids[:n])
        counted.append(count_program(root, fn, folder))
    return counted


def probe_tokens(workdir: Path, sizes: Sequence[int]) -> list[Growth]:
    counted = count_lengths(workdir, sizes)
    command = (f"gpt forward f32 {_config_text(GROWTH, 'tokens')}, one program for T_max = {max(sizes)} run at "
               f"each T, make {' '.join(MAKE_ARGS)}, valgrind --tool=callgrind --collect-atstart=no; kernels' "
               "inclusive counts")
    linear = [c.kernels(LINEAR_PRIMITIVES) for c in counted]
    attention = [c.kernels(ATTENTION_PRIMITIVES) for c in counted]
    lr, ar = plain_ratios(linear), plain_ratios(attention)
    return [
        Growth("program/tokens-linear", "tokens", list(sizes), linear, lr,
               "linear and norm kernels; 2.00 within 0.05", all(abs(r - 2.0) <= 0.05 for r in lr), command),
        Growth("program/tokens-attention", "tokens", list(sizes), attention, ar,
               "QK and AV matmuls, scale, causal softmax; 4.00 within 0.25 at the largest doubling",
               abs(ar[-1] - 4.0) <= 0.25 and all(r > 2.0 for r in ar), command),
    ]


# A decode step (docs/semantics.md section 16): its attention over the cache (the scores,
# the scale, the softmax, the weighted values, read in place) grows with the position T;
# nothing else may: a step that copied the cache's past rows (a concat, a whole-cache
# copy) would grow in the rest.
DECODE = {"vocab": 64, "dim": 32, "heads": 4, "kv_heads": 2, "mlp": 64, "layers": 2}
DECODE_ATTENTION = ("matmul", "scale", "softmax")


def decode_loops_over_position(program) -> list[str]:
    """The launches of a decode step outside its attention (DECODE_ATTENTION) that run a
    loop whose extent follows the position T: a copy of the cache's past rows, a table of
    every position. The counts of probe_decode hardly show such a copy at its sizes (a
    compiler turns it into a memcpy of a few hundred bytes, about as dear at any T); its
    loop shows in the kernel IR."""
    from exactc.exporter import dims
    from exactc.exporter.kernels import lower
    from exactc.exporter.launches import launched_ops, op_shapes

    found = []
    for op in launched_ops(program):
        if op.primitive in DECODE_ATTENTION:
            continue
        kernel = lower(op.primitive, "f32", op_shapes(op), op.attrs)
        if any(dims.is_symbolic(a.extent) for nest in kernel.nests for a in nest.axes + tuple(nest.body_axes())):
            found.append(f"{op.out.name} ({op.primitive})")
    return found


def probe_decode(workdir: Path, sizes: Sequence[int]) -> list[Growth]:
    """One llama `decode` exported for up to max(sizes) cached positions, run at each T of
    `sizes` (a drawn token and cache): the attention kernels' counts, fixed part fitted
    and subtracted, double with T; the rest of the step's count is the same at every T."""
    from exactc.exporter import export, models

    overrides = dict(DECODE, tokens=max(sizes) + 1)
    root, fn = export_program(workdir, "llama", "decode", "f32", overrides)
    program = models.build("llama", "decode", overrides)

    counted = []
    for n in sizes:
        folder = workdir / f"decode-T{n}"
        folder.mkdir(exist_ok=True)
        for name, array in export.check_inputs(program, "f32", models.draw_inputs(program, 0, n)).items():
            np.save(folder / f"{name}.npy", array)
        counted.append(count_program(root, fn, folder))
    attention = [c.kernels(DECODE_ATTENTION) for c in counted]
    rest = [c.entry_count - a for c, a in zip(counted, attention)]
    _, ar = fitted_ratios(sizes, attention)
    rr = plain_ratios(rest)
    command = (f"llama decode f32 {_config_text(overrides, 'tokens')}, one program run at each cached length T, "
               f"make {' '.join(MAKE_ARGS)}, valgrind --tool=callgrind --collect-atstart=no")
    return [
        Growth("program/decode-attention", "position", list(sizes), attention, ar,
               "attention over the cache; fixed part fitted and subtracted; 2.00 within 0.05",
               all(abs(r - 2.0) <= 0.05 for r in ar), command),
        Growth("program/decode-rest", "position", list(sizes), rest, rr,
               "the rest of the step; 1.00 within 0.01", all(abs(r - 1.0) <= 0.01 for r in rr), command),
    ]


def probe_generate(workdir: Path, sizes: Sequence[int]) -> list[Growth]:
    """The llama decode program's whole generation loop (`model generate`, greedy, a
    one-token prompt) for N new tokens of `sizes`: every step but its attention costs
    the same at every position, so that part of the loop doubles with N; a loop that
    recomputed the sequence at every step (the same bits) would make it quadruple."""
    overrides = dict(DECODE, tokens=max(sizes) + 1)
    root, _ = export_program(workdir, "llama", "decode", "f32", overrides)
    binary = build_probe(root)
    folder = workdir / "generate-in"
    folder.mkdir(exist_ok=True)
    np.save(folder / "prompt_ids.npy", np.array([1], np.int32))
    np.save(folder / "seed.npy", np.array([0], np.int64))
    counted = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="exactc-probe-out-") as out:
            profile = run_callgrind([str(binary), "generate", str(root / "weights.safetensors"), str(folder), out,
                                     "-n", str(n), "--temperature", "0"], collect_at_start=False)
        if profile.total == 0:
            raise ProbeError(f"{root}: nothing collected around the generation loop (EXACTC_PROBE in {CFLAGS}?)")
        counted.append(Counted(profile, "generate", kernel_primitives(root)))
    attention = [c.kernels(DECODE_ATTENTION) for c in counted]
    rest = [c.entry_count - a for c, a in zip(counted, attention)]
    _, rr = fitted_ratios(sizes, rest)
    command = (f"llama decode f32 {_config_text(overrides, 'tokens')}, `model generate -n N --temperature 0` "
               f"on a one-token prompt, make {' '.join(MAKE_ARGS)}, valgrind --tool=callgrind --collect-atstart=no")
    return [Growth("program/generate-rest", "new tokens", list(sizes), rest, rr,
                   "the loop but attention; fixed part fitted and subtracted; 2.00 within 0.05",
                   all(abs(r - 2.0) <= 0.05 for r in rr), command)]


def _config_text(config: dict, varied: str) -> str:
    return "(" + ", ".join(f"{k}={v}" for k, v in config.items() if k != varied) + f"; {varied} varies)"


# The exporter under callgrind: a tiny library whose two functions are the client requests.
_REGION_C = """\
#include <valgrind/callgrind.h>
/* exactc's probe region: instrumentation on from start to stop, then one dump. */
void exactc_probe_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void exactc_probe_stop(const char *label) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(label); }
"""


def region_library() -> Path:
    from exactc.verify.build import BuildOptions, compile_shared

    if not Path("/usr/include/valgrind/callgrind.h").exists():
        raise ProbeError("valgrind/callgrind.h is missing (Debian's valgrind package installs it)")
    return compile_shared({"exactc_probe_region.c": _REGION_C},
                          BuildOptions(cc=CC, warnings=False, instrumentable=False))


def exporter_work(layers: int):
    """What the exporter probe counts: trace the gpt forward at `layers` and print it
    with the straight-line host (print_program prints the structured host too)."""
    from exactc.exporter import models
    from exactc.exporter.printer.host import print_program

    program = models.build("gpt", "forward", dict(GROWTH, layers=layers))
    return print_program(program, "f32", straight=True)


def _exporter_worker(library: str, sizes: Sequence[int]) -> None:
    """Run under callgrind: a warm-up (imports, caches), then one region per size."""
    import ctypes
    import gc

    lib = ctypes.CDLL(library)
    lib.exactc_probe_stop.argtypes = [ctypes.c_char_p]
    exporter_work(2)
    for n in sizes:
        gc.collect()
        lib.exactc_probe_start()
        exporter_work(n)
        lib.exactc_probe_stop(f"layers={n}".encode())


def probe_exporter(sizes: Sequence[int]) -> Growth:
    library = region_library()
    env = dict(os.environ, PYTHONHASHSEED="0")
    command = [sys.executable, "-m", "exactc.verify.probes", "--exporter-worker", str(library),
               *(str(n) for n in sizes)]
    parts = run_callgrind_parts(command, env=env)
    counts = [p.total for _, p in parts]
    if len(counts) != len(sizes):
        raise ProbeError(f"the exporter probe dumped {len(counts)} regions for {len(sizes)} sizes")
    ratios = increment_ratios(counts)
    return Growth("exporter/straight-line", "layers", list(sizes), counts, ratios,
                  "increments d(2L)/d(L), fixed part cancelled; at most 2.3", all(r <= 2.3 for r in ratios),
                  "PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no python -m exactc.verify.probes "
                  "--exporter-worker LIB " + " ".join(map(str, sizes)) +
                  f" (models.build + print_program(straight=True), gpt {_config_text(GROWTH, 'layers')})",
                  first=2)


# ---- the exporter against a function's size -----------------------------------------------


def synthetic_program(shape: str, nodes: int):
    """A program whose one function is `nodes` primitives on one small tensor x:
    `chain`, each primitive reading the one before (scale, silu, add of x, in turn); or
    `diamonds`, each four primitives a diamond with a skip (a = silu(y), b = scale(y),
    c = a + b, y = c * y), so that three values are live at once and the placement has
    rivals. Three (chain) or four (diamonds) kernels whatever `nodes` is: the cost that
    grows is the host's and the tracer's, per node."""
    from exactc.exporter import graph

    if shape not in NODE_SHAPES or nodes % 4:
        raise ValueError(f"synthetic_program({shape!r}, {nodes}): shape is one of {NODE_SHAPES}, nodes a multiple of 4")

    def chain(params, x):
        """A chain of primitives."""
        y = x
        for k in range(nodes):
            y = graph.scale(y, 0.5) if k % 3 == 0 else graph.silu(y) if k % 3 == 1 else graph.add(y, x)
        return {"y": y}

    def diamonds(params, x):
        """Diamonds with a skip, four primitives each."""
        y = x
        for _ in range(nodes // 4):
            a = graph.silu(y)
            b = graph.scale(y, 0.5)
            c = graph.add(a, b)
            y = graph.mul(c, y)
        return {"y": y}

    body = chain if shape == "chain" else diamonds
    return graph.trace("synthetic", shape, body, [], [graph.InputSpec("x", NODE_TENSOR, "x")])


def _nodes_worker(library: str, sizes: Sequence[int]) -> None:
    """Run under callgrind: a warm-up, then per shape and size three regions: the trace,
    the whole print (the structured host, the default export), and the frame planning
    alone (the kernels' table built outside the region)."""
    import ctypes
    import gc

    from exactc.exporter.printer.host import print_program, program_frames
    from exactc.exporter.printer.kernel_table import KernelTable

    lib = ctypes.CDLL(library)
    lib.exactc_probe_stop.argtypes = [ctypes.c_char_p]

    def region(label: str, work: Callable[[], Any]) -> Any:
        gc.collect()
        lib.exactc_probe_start()
        out = work()
        lib.exactc_probe_stop(label.encode())
        return out

    for shape in NODE_SHAPES:
        print_program(synthetic_program(shape, 8), "f32")
    for shape in NODE_SHAPES:
        for n in sizes:
            program = region(f"{shape} nodes={n} trace", lambda: synthetic_program(shape, n))
            region(f"{shape} nodes={n} print", lambda: print_program(program, "f32"))
            table = KernelTable(program, "f32")
            region(f"{shape} nodes={n} frames", lambda: program_frames(program, "f32", table))


NODE_REGIONS = ("trace", "print", "frames")


def probe_nodes(sizes: Sequence[int]) -> list[Growth]:
    """The exporter's cost against the node count of one function, per shape: trace and
    print (the export), and the frame planning alone (a small part of the whole, so that
    a pass of it gone quadratic shows at these sizes); the increments ratio per doubling
    at most 2.3 (as for the layers)."""
    library = region_library()
    command = [sys.executable, "-m", "exactc.verify.probes", "--nodes-worker", str(library), *(str(n) for n in sizes)]
    parts = run_callgrind_parts(command, env=dict(os.environ, PYTHONHASHSEED="0"))
    counts: dict[tuple[str, str], list[int]] = {}
    for label, profile in parts:
        shape, _, stage = label.split()
        counts.setdefault((shape, stage), []).append(profile.total)
    if len(parts) != len(NODE_SHAPES) * len(sizes) * len(NODE_REGIONS):
        raise ProbeError(f"the node-count probe dumped {len(parts)} regions for {len(NODE_SHAPES)} shapes x "
                         f"{len(sizes)} sizes x {len(NODE_REGIONS)} stages")
    out = []
    worker = ("PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no python -m exactc.verify.probes "
              "--nodes-worker LIB " + " ".join(map(str, sizes)))
    for shape in NODE_SHAPES:
        export = [t + p for t, p in zip(counts[(shape, "trace")], counts[(shape, "print")])]
        frames = counts[(shape, "frames")]
        # print_program alone too: a host pass gone quadratic hides less in it than in the
        # whole export, whose trace is as large again.
        for name, what, series in ((f"exporter/nodes-{shape}", "graph.trace + print_program", export),
                                   (f"exporter/print-{shape}", "print_program", counts[(shape, "print")]),
                                   (f"exporter/frames-{shape}", "program_frames (frames.plan_frames)", frames)):
            ratios = increment_ratios(series)
            out.append(Growth(name, "nodes", list(sizes), series, ratios,
                              "increments d(2N)/d(N), fixed part cancelled; at most 2.3", all(r <= 2.3 for r in ratios),
                              f"{worker} ({what}, one function of N primitives on x{list(NODE_TENSOR)}, {shape})",
                              first=2))
    return out


def probe_text(sizes: Sequence[int]) -> list[Growth]:
    from exactc.exporter import models
    from exactc.exporter.printer.host import print_program

    structured, straight = [], []
    for n in sizes:
        program = models.build("gpt", "forward", dict(GROWTH, layers=n))
        structured.append(len(print_program(program, "f32").files["model.c"].encode()))
        straight.append(len(print_program(program, "f32", straight=True).files["model.c"].encode()))
    sr = plain_ratios(structured)
    _, lr = fitted_ratios(sizes, straight)
    command = f"print_program(gpt forward f32 {_config_text(GROWTH, 'layers')}).files['model.c'], bytes"
    return [
        Growth("text/structured", "layers", list(sizes), structured, sr, "constant: 1.00 within 0.01",
               all(abs(r - 1.0) <= 0.01 for r in sr), command, "model.c bytes"),
        Growth("text/straight-line", "layers", list(sizes), straight, lr,
               "fixed part fitted and subtracted; 2.00 within 0.05", all(abs(r - 2.0) <= 0.05 for r in lr),
               command.replace("f32 ", "f32, straight=True ", 1), "model.c bytes"),
    ]


# ---- kernels alone: the quantized linear --------------------------------------------------------

_FILL = {  # how the driver fills an input buffer of each C type: a pattern, never NaN
    "float": "(float)(i % 7) * 0.25f - 0.5f",
    "double": "(double)(i % 7) * 0.25 - 0.5",
    "exactc_bf16": "(exactc_bf16)(0x3f00u + (unsigned)(i % 7))",
    "int8_t": "(int8_t)((i * 37) % 255 - 127)",
    "uint8_t": "(uint8_t)(i * 37)",
    "int32_t": "(int32_t)(i % 3)",
}


def kernel_driver(kernel, printed) -> str:
    """A main() for one printed kernel: its buffers allocated and filled, each launch
    called over its whole range, a checksum of the outputs printed (so that nothing is
    dead code). Callgrind counts the kernel's functions only (toggle-collect)."""
    lines = ["#include <stdio.h>", "#include <stdlib.h>", "", "int main(void)", "{"]
    for buf in kernel.buffers:
        lines.append(f"    {buf.ctype} *{buf.name} = calloc({buf.size}, sizeof *{buf.name});")
        if buf.role == "input":
            lines.append(f"    for (int64_t i = 0; i < {buf.size}; i++) {buf.name}[i] = {_FILL[buf.ctype]};")
    for name, item in zip(printed.functions, kernel.launches):
        lines.append(f"    {name}({', '.join(item.args)}, 0, {item.extent});")
    lines.append("    double sum = 0.0;")
    for buf in kernel.buffers:
        if buf.role == "output":
            lines.append(f"    for (int64_t i = 0; i < {buf.size}; i++) sum += (double){buf.name}[i];")
    lines += ['    printf("%g\\n", sum);', *(f"    free({b.name});" for b in kernel.buffers), "    return 0;", "}"]
    return "\n".join(lines) + "\n"


def count_kernel(kernel) -> int:
    """Callgrind's inclusive count of a kernel's functions, called once each from a
    driver built as `make OPENMP=0` builds a program (gcc, CFLAGS, the strict flags)."""
    from exactc.exporter.printer.kernels import print_kernel
    from exactc.verify.build import BuildOptions, compile_shared, runtime_source

    printed = print_kernel(kernel, "probe")  # functions probe, probe_tail (plans.function_name)
    sources = {"probe.c": printed.source + kernel_driver(kernel, printed),
               "exactc_libm.c": runtime_source("exactc_libm.c")}
    program = compile_shared(sources, BuildOptions(cc=CC, opt="-O2", warnings=False, instrumentable=False),
                             executable=True)
    profile = run_callgrind([str(program)], toggle_collect="probe*")
    if profile.total == 0:
        raise ProbeError(f"nothing collected in the kernel {kernel.primitive}'s functions probe*")
    return profile.total


def quantized_kernel(primitive: str, fmt: str, m: int, k: int, n: int, block: int):
    """The f32 kernel of a quantized primitive at these sizes (docs/semantics.md, section 15)."""
    from exactc.exporter.kernels import lower
    from exactc.exporter.primitives import block_count, quantized_row_length

    nb = block_count(k, block)
    if primitive == "quantize":
        return lower("quantize", "f32", {"x": (m, k)}, {"block": block})
    weights = {"wq": (n, quantized_row_length(fmt, k, block)), "wd": (n, nb)}
    activations = {"x": (m, k)} if primitive == "qlinear_w" else {"xq": (m, k), "xd": (m, nb)}
    return lower(primitive, "f32", {**activations, **weights}, {"fmt": fmt, "block": block})


def probe_quantized_linear(sizes_k: Sequence[int], sizes_n: Sequence[int]) -> list[Growth]:
    """The integer-form linear's count against K and against N (q8 and q4 kernels summed)."""
    base = QUANT_GROWTH
    out = []
    for size, sizes in (("k", sizes_k), ("n", sizes_n)):
        counts = []
        for value in sizes:
            dims = {**base, size: value}
            counts.append(sum(count_kernel(quantized_kernel("qlinear_i", fmt, dims["m"], dims["k"], dims["n"],
                                                            dims["block"])) for fmt in ("q8", "q4")))
        _, ratios = fitted_ratios(sizes, counts)
        out.append(Growth(f"kernel/qlinear_i-{size}", size.upper(), list(sizes), counts, ratios,
                          "q8 and q4 kernels summed, fixed part fitted and subtracted; 2.00 within 0.05",
                          all(abs(r - 2.0) <= 0.05 for r in ratios),
                          f"qlinear_i f32 {_config_text(base, size)} in a driver, gcc {CFLAGS}, "
                          "valgrind --tool=callgrind --toggle-collect=probe*"))
    return out


def measure_kernel_baseline() -> dict[str, int]:
    """The inclusive count of each kernel of quantized operands at QUANT_SET's sizes."""
    dims = QUANT_SET
    rows = {"quantize": count_kernel(quantized_kernel("quantize", "q8", dims["m"], dims["k"], dims["n"],
                                                      dims["block"]))}
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


def compare(baseline: dict[str, dict[str, int]], current: dict[str, dict[str, int]],
            threshold: float = DEFAULT_THRESHOLD) -> tuple[list[Change], list[Change]]:
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
        lines.append(f"    {c.export:<18} {c.row:<36} {c.before if c.before is not None else '-':>12} "
                     f"{c.after if c.after is not None else '-':>12} {text:>8}{flag}")
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


def check_regression(current: dict[str, dict[str, int]], key: dict[str, str], threshold: float,
                     path: Path = BASELINES) -> Regression:
    baseline = baseline_for(key, path)
    if baseline is None:
        # No baseline is no check: it fails, so that a new toolchain cannot pass unchecked.
        known = [key_text(e["key"]) for e in load_baselines(path)]
        lines = [f"regression: FAILS: no baseline for this toolchain ({key_text(key)}).",
                 *(f"    baselines exist for: {k}" for k in known),
                 f"    `{RECORD_BASELINE}` records one (commit {BASELINES.name} with it)."]
        return Regression(False, lines, [])
    changes, failures = compare(baseline, current, threshold)
    verdict = "holds" if not failures else f"FAILS: {len(failures)} count(s) rose more than {threshold:g} %"
    lines = [f"regression: against the baseline of this toolchain, threshold {threshold:g} %: {verdict}"]
    lines += change_table(changes, threshold)
    return Regression(not failures, lines, failures)


# ---- the command ------------------------------------------------------------------------------


GROWTH_PROBES = ("layers", "tokens", "decode", "generate", "exporter", "nodes", "text", "quant")  # what --only names


def run_growth(workdir: Path, sizes: dict[str, Sequence[int]], log: Callable[[str], None] = print,
               only: Sequence[str] = GROWTH_PROBES) -> list[Growth]:
    probes: list[Growth] = []
    steps = {"layers": lambda: [probe_layers(workdir, sizes["layers"])],
             "tokens": lambda: probe_tokens(workdir, sizes["tokens"]),
             "decode": lambda: probe_decode(workdir, sizes["decode"]),
             "generate": lambda: probe_generate(workdir, sizes["generate"]),
             "exporter": lambda: [probe_exporter(sizes["exporter"])],
             "nodes": lambda: probe_nodes(sizes["nodes"]),
             "text": lambda: probe_text(sizes["text"]),
             "quant": lambda: probe_quantized_linear(sizes["quant_k"], sizes["quant_n"])}
    for name in GROWTH_PROBES:
        if name not in only:
            continue
        for g in steps[name]():
            probes.append(g)
            for line in g.lines():
                log(line)
    return probes


# The growth each probe expects, as the exponent of the size (the dotted line of the plot).
EXPECTED_SLOPE = {"program/layers": 1, "program/tokens-linear": 1, "program/tokens-attention": 2,
                  "program/decode-attention": 1, "program/decode-rest": 0, "program/generate-rest": 1,
                  "exporter/straight-line": 1, "exporter/nodes-chain": 1, "exporter/nodes-diamonds": 1,
                  "exporter/frames-chain": 1, "exporter/frames-diamonds": 1,
                  "exporter/print-chain": 1, "exporter/print-diamonds": 1,
                  "text/structured": 0, "text/straight-line": 1,
                  "kernel/qlinear_i-k": 1, "kernel/qlinear_i-n": 1}


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
        if g.name in ("program/layers", "program/decode-attention", "exporter/straight-line", "text/straight-line", "kernel/qlinear_i-k",
                      "kernel/qlinear_i-n") or g.name.startswith(("exporter/nodes-", "exporter/frames-")):
            a, _ = fitted_ratios(g.sizes, g.counts)
            ax.loglog(sizes, counts - a, "s--", base=2, label="count - fixed part")
            shown.append(counts - a)
        slope = EXPECTED_SLOPE.get(g.name)
        if slope is not None:
            top = shown[-1][-1]
            ax.loglog(sizes, top * (sizes / sizes[-1]) ** slope, ":", color="gray", base=2,
                      label=f"size^{slope}")
        low, high = min(float(s.min()) for s in shown), max(float(s.max()) for s in shown)
        ax.set_ylim(min(low, high / 16) / 1.3, high * 1.3)
        ax.set_title(f"{g.name}: {'holds' if g.holds else 'FAILS'}", fontsize=9)
        ax.set_xlabel(g.size)
        ax.set_ylabel(g.unit, fontsize=8)
        ax.legend(fontsize=7)
    for ax in np.ravel(axes)[len(probes):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exactc.verify.probes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="rewrite this toolchain's regression baseline")
    parser.add_argument("--baseline-only", action="store_true",
                        help="measure the regression set only, not the growth probes (with --update: make probes-baseline)")
    parser.add_argument("--only", nargs="+", choices=GROWTH_PROBES, metavar="PROBE",
                        help=f"these growth probes only ({', '.join(GROWTH_PROBES)}), without the regression set")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="percent a count may rise before the regression check fails (default 1.0)")
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
        _exporter_worker(args.exporter_worker[0], [int(n) for n in args.exporter_worker[1:]])
        return 0
    if args.nodes_worker:
        _nodes_worker(args.nodes_worker[0], [int(n) for n in args.nodes_worker[1:]])
        return 0

    key = probe_key()
    print(f"toolchain: {key_text(key)}")
    with tempfile.TemporaryDirectory(prefix="exactc-probes-") as tmp:
        workdir = Path(tmp)
        probes = [] if args.baseline_only else run_growth(workdir, SIZES["quick" if args.quick else "full"],
                                                          only=args.only or GROWTH_PROBES)
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
        args.json.write_text(json.dumps({"key": key, "growth": [dataclasses.asdict(g) for g in probes],
                                         "regression": current}, indent=1) + "\n")
    if args.plot:
        plot(probes, args.plot)
    held = sum(g.holds for g in probes) + (regression is not None and regression.holds)
    total = len(probes) + (regression is not None)
    print(f"probes: {held}/{total} hold")
    return 0 if held == total else 1


if __name__ == "__main__":
    sys.exit(main())
