"""Growth probes of the exported code: a program's instructions against its layers, its
run-time length, a decode step's position and a generation's length; its text against the
layers; the quantized linear's kernel alone against K and N."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from exactc.verify.callgrind import run_callgrind
from exactc.verify.probes.counting import (
    CFLAGS,
    MAKE_ARGS,
    Counted,
    ProbeError,
    build_probe,
    count_export,
    count_kernel,
    count_program,
    export_program,
    kernel_primitives,
    quantized_kernel,
)
from exactc.verify.probes.growth import GROWTH, Growth, Measured, Rule, Series, config_text, judge

LINEAR_PRIMITIVES = ("linear", "layernorm", "rmsnorm")
ATTENTION_PRIMITIVES = ("matmul", "scale", "softmax")

# The integer-form quantized linear alone, its growth in K and in N (f32, blocks of 32).
QUANT_GROWTH = {"m": 2, "k": 256, "n": 64, "block": 32}


LAYERS = (Series("program/layers", "layers", Rule("fitted", 2.0, 0.05), "fixed part fitted and subtracted"),)


def measure_layers(workdir: Path, sizes: Sequence[int]) -> Measured:
    counts = [count_export(workdir, "gpt", "forward", "f32", dict(GROWTH, layers=n)).entry_count for n in sizes]
    command = (
        f"gpt forward f32 {config_text(GROWTH, 'layers')}, make {' '.join(MAKE_ARGS)}, "
        "valgrind --tool=callgrind --collect-atstart=no"
    )
    return Measured(list(sizes), {"program/layers": counts}, {"program/layers": command})


def probe_layers(workdir: Path, sizes: Sequence[int]) -> Growth:
    return judge(LAYERS, measure_layers(workdir, sizes))[0]


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


TOKENS = (
    Series("program/tokens-linear", "tokens", Rule("counts", 2.0, 0.05), "linear and norm kernels"),
    Series(
        "program/tokens-attention",
        "tokens",
        Rule("counts", 4.0, 0.25, largest_only=True, floor=2.0),
        "QK and AV matmuls, scale, causal softmax",
    ),
)


def measure_tokens(workdir: Path, sizes: Sequence[int]) -> Measured:
    counted = count_lengths(workdir, sizes)
    groups = {"program/tokens-linear": LINEAR_PRIMITIVES, "program/tokens-attention": ATTENTION_PRIMITIVES}
    return tokens_measured("gpt forward f32", sizes, counted, groups)


def tokens_measured(
    program: str, sizes: Sequence[int], counted: list, groups: Mapping[str, tuple[str, ...]]
) -> Measured:
    """The kernels' inclusive counts of each group of primitives, of one program for the
    largest T run at each T in `sizes` (`counted`, in order), with the command named."""
    command = (
        f"{program} {config_text(GROWTH, 'tokens')}, one program for T_max = {max(sizes)} run at "
        f"each T, make {' '.join(MAKE_ARGS)}, valgrind --tool=callgrind --collect-atstart=no; kernels' "
        "inclusive counts"
    )
    counts = {name: [c.kernels(primitives) for c in counted] for name, primitives in groups.items()}
    return Measured(list(sizes), counts, dict.fromkeys(counts, command))


def probe_tokens(workdir: Path, sizes: Sequence[int]) -> list[Growth]:
    return judge(TOKENS, measure_tokens(workdir, sizes))


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
            found.append(f"{op.outs[0].name} ({op.primitive})")
    return found


DECODE_SERIES = (
    Series(
        "program/decode-attention",
        "position",
        Rule("fitted", 2.0, 0.05),
        "attention over the cache; fixed part fitted and subtracted",
    ),
    Series("program/decode-rest", "position", Rule("counts", 1.0, 0.01), "the rest of the step"),
)
GENERATE = (
    Series(
        "program/generate-rest",
        "new tokens",
        Rule("fitted", 2.0, 0.05),
        "the loop but attention; fixed part fitted and subtracted",
    ),
)


def measure_decode(workdir: Path, sizes: Sequence[int]) -> Measured:
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
    command = (
        f"llama decode f32 {config_text(overrides, 'tokens')}, one program run at each cached length T, "
        f"make {' '.join(MAKE_ARGS)}, valgrind --tool=callgrind --collect-atstart=no"
    )
    counts = {"program/decode-attention": attention, "program/decode-rest": rest}
    return Measured(list(sizes), counts, dict.fromkeys(counts, command))


def probe_decode(workdir: Path, sizes: Sequence[int]) -> list[Growth]:
    return judge(DECODE_SERIES, measure_decode(workdir, sizes))


def measure_generate(workdir: Path, sizes: Sequence[int]) -> Measured:
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
            profile = run_callgrind(
                [
                    str(binary),
                    "generate",
                    str(root / "weights.safetensors"),
                    str(folder),
                    out,
                    "-n",
                    str(n),
                    "--temperature",
                    "0",
                ],
                collect_at_start=False,
            )
        if profile.total == 0:
            raise ProbeError(f"{root}: nothing collected around the generation loop (EXACTC_PROBE in {CFLAGS}?)")
        counted.append(Counted(profile, "generate", kernel_primitives(root)))
    attention = [c.kernels(DECODE_ATTENTION) for c in counted]
    rest = [c.entry_count - a for c, a in zip(counted, attention)]
    command = (
        f"llama decode f32 {config_text(overrides, 'tokens')}, `model generate -n N --temperature 0` "
        f"on a one-token prompt, make {' '.join(MAKE_ARGS)}, valgrind --tool=callgrind --collect-atstart=no"
    )
    return Measured(list(sizes), {"program/generate-rest": rest}, {"program/generate-rest": command})


def probe_generate(workdir: Path, sizes: Sequence[int]) -> list[Growth]:
    return judge(GENERATE, measure_generate(workdir, sizes))


TEXT = (
    Series("text/structured", "layers", Rule("counts", 1.0, 0.01), "constant", "model.c bytes"),
    Series(
        "text/straight-line", "layers", Rule("fitted", 2.0, 0.05), "fixed part fitted and subtracted", "model.c bytes"
    ),
)


def measure_text(sizes: Sequence[int]) -> Measured:
    from exactc.exporter import models
    from exactc.exporter.printer.host import print_program

    structured, straight = [], []
    for n in sizes:
        program = models.build("gpt", "forward", dict(GROWTH, layers=n))
        structured.append(len(print_program(program, "f32").files["model.c"].encode()))
        straight.append(len(print_program(program, "f32", straight=True).files["model.c"].encode()))
    command = f"print_program(gpt forward f32 {config_text(GROWTH, 'layers')}).files['model.c'], bytes"
    return Measured(
        list(sizes),
        {"text/structured": structured, "text/straight-line": straight},
        {"text/structured": command, "text/straight-line": command.replace("f32 ", "f32, straight=True ", 1)},
    )


def probe_text(sizes: Sequence[int]) -> list[Growth]:
    return judge(TEXT, measure_text(sizes))


QUANTIZED_LINEAR = {
    size: Series(
        f"kernel/qlinear_i-{size}",
        size.upper(),
        Rule("fitted", 2.0, 0.05),
        "q8 and q4 kernels summed, fixed part fitted and subtracted",
    )
    for size in ("k", "n")
}


def measure_quantized_linear(size: str, sizes: Sequence[int]) -> Measured:
    """The integer-form linear's count (q8 and q4 kernels summed) against `size`, K or N."""
    counts = []
    for value in sizes:
        dims = {**QUANT_GROWTH, size: value}
        kernels = [
            quantized_kernel("qlinear_i", fmt, dims["m"], dims["k"], dims["n"], dims["block"]) for fmt in ("q8", "q4")
        ]
        counts.append(sum(count_kernel(kernel) for kernel in kernels))
    name = QUANTIZED_LINEAR[size].name
    command = (
        f"qlinear_i f32 {config_text(QUANT_GROWTH, size)} in a driver, gcc {CFLAGS}, "
        "valgrind --tool=callgrind --toggle-collect=probe*"
    )
    return Measured(list(sizes), {name: counts}, {name: command})


def probe_quantized_linear(sizes_k: Sequence[int], sizes_n: Sequence[int]) -> list[Growth]:
    """The integer-form linear's count against K and against N (q8 and q4 kernels summed)."""
    return [
        *judge([QUANTIZED_LINEAR["k"]], measure_quantized_linear("k", sizes_k)),
        *judge([QUANTIZED_LINEAR["n"]], measure_quantized_linear("n", sizes_n)),
    ]


# ---- loss_grad: the forward, the loss and the backward of one batch --------------------------

# The backward primitives beside the forward's they differentiate: the linear and norm
# kernels' (each row's work independent of T), the attention's (quadratic in T).
GRAD_LINEAR_PRIMITIVES = LINEAR_PRIMITIVES + (
    "linear_bar_x",
    "linear_bar_w",
    "linear_bar_b",
    "layernorm_bar_x",
    "rmsnorm_bar_x",
    "norm_bar_g",
)
GRAD_ATTENTION_PRIMITIVES = ATTENTION_PRIMITIVES + ("matmul_bar_a", "matmul_bar_b", "softmax_bar")

# loss_grad's count over the forward's, at the same model and tokens (batch 1): measured
# 3.72 at L = 2 (3.85 at L = 1, 3.59 at L = 16: the loss and the gradients' zeroing are a
# fixed part, the ratio of one layer's increments is 3.57). A backward that recomputed its
# layer's forward instead of reading the residuals kept adds about one forward: 4.6 and up.
GRAD_RATIO = Series(
    "program/grad-over-forward",
    "layers",
    Rule("values", 3.7, 0.25),
    "loss_grad's count over the forward's, per mille",
    "per mille of the forward",
)
GRAD_LAYERS = (
    Series("program/grad-layers", "layers", Rule("fitted", 2.0, 0.05), "fixed part fitted and subtracted"),
    GRAD_RATIO,
)


def measure_grad_layers(workdir: Path, sizes: Sequence[int]) -> Measured:
    """The exported gpt `loss_grad` (batch 1) and `forward` at L layers of `sizes`: the
    loss_grad's count, and its ratio to the forward's (per mille)."""
    grad, ratio = [], []
    for n in sizes:
        config = dict(GROWTH, layers=n)
        forward = count_export(workdir, "gpt", "forward", "f32", config).entry_count
        grad.append(count_export(workdir, "gpt", "loss_grad", "f32", dict(config, batch=1)).entry_count)
        ratio.append(round(1000 * grad[-1] / forward))
    command = (
        f"gpt loss_grad f32 batch=1 {config_text(GROWTH, 'layers')}, and its forward, make {' '.join(MAKE_ARGS)}, "
        "valgrind --tool=callgrind --collect-atstart=no"
    )
    counts = {"program/grad-layers": grad, "program/grad-over-forward": ratio}
    return Measured(list(sizes), counts, dict.fromkeys(counts, command))


def probe_grad_layers(workdir: Path, sizes: Sequence[int]) -> list[Growth]:
    return judge(GRAD_LAYERS, measure_grad_layers(workdir, sizes))


GRAD_TOKENS = (
    Series(
        "program/grad-tokens-linear",
        "tokens",
        Rule("fitted", 2.0, 0.05),
        "linear and norm kernels and their backward; fixed part (a weight gradient's per-element work) fitted "
        "and subtracted",
    ),
    Series(
        "program/grad-tokens-attention",
        "tokens",
        Rule("counts", 4.0, 0.25, largest_only=True, floor=2.0),
        "QK and AV matmuls, scale, causal softmax and their backward",
    ),
)


def measure_grad_tokens(workdir: Path, sizes: Sequence[int]) -> Measured:
    """One gpt `loss_grad` (batch 1) exported for T_max = max(sizes), built once, run on
    the first T tokens and targets of its conformance input for each T of `sizes`."""
    root, fn = export_program(workdir, "gpt", "loss_grad", "f32", dict(GROWTH, tokens=max(sizes), batch=1))
    inputs = {name: np.load(root / "conformance" / "inputs" / f"{name}.npy") for name in ("tokens", "targets")}
    counted = []
    for n in sizes:
        folder = workdir / f"grad-input-T{n}"
        folder.mkdir(exist_ok=True)
        for name, array in inputs.items():
            np.save(folder / f"{name}.npy", array[:, :n])
        counted.append(count_program(root, fn, folder))
    groups = {
        "program/grad-tokens-linear": GRAD_LINEAR_PRIMITIVES,
        "program/grad-tokens-attention": GRAD_ATTENTION_PRIMITIVES,
    }
    return tokens_measured("gpt loss_grad f32 batch=1", sizes, counted, groups)


def probe_grad_tokens(workdir: Path, sizes: Sequence[int]) -> list[Growth]:
    return judge(GRAD_TOKENS, measure_grad_tokens(workdir, sizes))
