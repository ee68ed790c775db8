"""tests/printed/: the C text the exporter prints, held as files so that a change shows.

    python tools/printed_text.py            # list the files and say which differ
    python tools/printed_text.py --write    # rewrite tests/printed/ from the code

Generated C is code too (docs/design.md): a user reads it, and a diff of two exports should
show what changed. These files are that diff's other side: every primitive's kernel at
every site type (the cases of tests/test_kernels_print.py), the same kernels at f32
under their automatic plans and under hand-written plans of each layout field, each
kernel's `exactc plan --show` text, and the whole printed program (model.c, kernels.h,
kernels/*.c) of each architecture's entries, plain, straight-line, planned and with
quantized weights, and of three programs of the graph builder's own (BUILT).
tests/test_printed_text.py fails, with a diff, when the code prints anything else; a
change meant to print otherwise rewrites them with --write, and the diff goes in its
commit.

Printing is a pure function of its inputs (tests/test_kernels_print.py checks that in
fresh processes): these bytes do not depend on the machine, the compiler or a tune table.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Callable

from exactc.exporter import dims, export, graph
from exactc.exporter.kernels import lower
from exactc.exporter.kernels.autoplan import AutoPlan, auto_kernel_plan
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.plans import NestPlan, Plan, describe_choices, validate_plan
from exactc.exporter.primitives import PRIMITIVES
from exactc.exporter.kernels.splits import Split
from exactc.exporter.printer.host import print_program
from exactc.exporter.printer.kernels import print_kernel

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "tests" / "printed"
sys.path.insert(0, str(ROOT / "tests"))
from test_kernels_print import BACKWARD_CASES, FORWARD_CASES, LOSS_GRAD_CASES, SITES  # noqa: E402  (every primitive)

# Cases beside test_kernels_print.py's: branches of the lowering its cases leave out.
EXTRA_CASES = [
    ("qlinear_i", {"xq": (2, 8), "xd": (2, 2), "wq": (3, 4), "wd": (3, 2)}, {"fmt": "q4", "block": 4}),
    # a short last block of exactly half a block: its high nibbles hold nothing
    ("qlinear_i", {"xq": (2, 6), "xd": (2, 2), "wq": (3, 4), "wd": (3, 2)}, {"fmt": "q4", "block": 4}),
    ("qlinear_w", {"x": (2, 6), "wq": (3, 4), "wd": (3, 2)}, {"fmt": "q4", "block": 4}),
    # rope on heads of 2 and 4 values: a pair of 1 is printed side by side, a pair of 2 is not
    ("rope", {"x": (3, 1, 2)}, {}),
    ("rope", {"x": (3, 2, 4)}, {}),
]
GALLERY = FORWARD_CASES + EXTRA_CASES + BACKWARD_CASES + LOSS_GRAD_CASES

# Hand-written plans, one per layout field and split form, on kernels of test_kernels_print's
# shapes (each validated before it prints): what the automatic plan of these small shapes
# leaves out.
PLANNED = [
    ("linear: order, tiles, lanes, a pack, a reduction block and a split",
     ("linear", {"x": (5, 7), "w": (19, 7), "b": (19,)}, {"has_b": True}),
     NestPlan(Layout(order=("n", "m"), tiles=(("n", 8),), lanes=(("m", 2), ("n", 4)), packs=("w",),
                     blocks=(("k", 3),)), Split(0, ((0, 5), (5, 5), (5, 19))))),
    ("linear: one lane axis of width 16",
     ("linear", {"x": (3, 7), "w": (32, 7)}, {}), NestPlan(Layout(lanes=(("n", 16),)))),
    ("matmul: lanes on both parallel axes, b packed",
     ("matmul", {"a": (2, 3, 4), "b": (2, 4, 8)}, {}),
     NestPlan(Layout(order=("i", "m", "n"), lanes=(("m", 2), ("n", 4)), packs=("b",)))),
    ("qlinear_i: the integer sums in lanes and parts",
     ("qlinear_i", {"xq": (2, 7), "xd": (2, 3), "wq": (3, 7), "wd": (3, 3)}, {"fmt": "q8", "block": 3}),
     NestPlan(Layout(order=("n", "m"), sums=(("k", 8, 2), ("t", 3, 1))))),
    ("gelu_tanh: lanes over a split of whole chunks",
     ("gelu_tanh", {"x": (33,)}, {}), NestPlan(Layout(lanes=(("i", 4),)), Split(0, ((0, 16), (16, 33))))),
    ("linear over the run-time length T <= 32: rows in lanes of 8 (a narrow variant of 4), a split of T in "
     "halves (cuts between single rows: the two layouts' lanes differ)",
     ("linear", {"x": (dims.length(32), 16), "w": (32, 16)}, {}),
     NestPlan(Layout(order=("m", "n"), lanes=(("m", 8), ("n", 16))), Split(0, ((0, 1), (1, 2)), of=2),
              Layout(order=("m", "n"), lanes=(("m", 4), ("n", 16))))),
    ("softmax: a tiled row loop split in two",
     ("softmax", {"x": (2, 3, 5)}, {"causal": True, "offset": 1}),
     NestPlan(Layout(tiles=(("i", 2),)), Split(0, ((0, 1), (1, 2))))),
]

# (file stem, model, entry, site, plan, straight, quantized weights (fmt, block, form) or
# None, config overrides)
PROGRAMS = [
    ("gpt-forward-f32", "gpt", "forward", "f32", None, False, None),
    ("gpt-forward-bf16-straight", "gpt", "forward", "bf16", None, True, None),
    ("gpt-next_token-f64-auto", "gpt", "next_token", "f64", "auto", False, None),
    ("gpt-decode-f32-auto", "gpt", "decode", "f32", "auto", False, None),
    ("gpt-prefill-f32-q8", "gpt", "prefill", "f32", None, False, ("q8", 32, "weight-only")),
    # 32 tokens: rows enough for the wide lanes (EXACTC_WIDE_LANES) beside the narrow ones
    ("bert-embed-f32-auto", "bert", "embed", "f32", "auto", False, None, {"layers": 2, "tokens": 32}),
    ("bert-forward-bf16", "bert", "forward", "bf16", None, False, None),
    ("llama-forward-f32-q4-auto", "llama", "forward", "f32", "auto", False, ("q4", 32, "integer")),
    ("llama-decode-bf16-straight", "llama", "decode", "bf16", None, True, None),
    # the loss_grad graph: a fold over the batch, the layers' forward and their reverse fold
    ("gpt-loss_grad-f32-auto", "gpt", "loss_grad", "f32", "auto", False, None, {"layers": 2, "tokens": 8, "batch": 2}),
]
# Small enough to read, large enough that the automatic plan takes lanes, packs and splits.
OVERRIDES = {"layers": 2, "tokens": 8}


def banner(title: str) -> str:
    return f"/* {'=' * 86}\n * {title}\n * {'=' * 86} */\n"


def kernel_text(title: str, printed) -> str:
    return banner(title) + printed.source + "/* cffi declarations:\n" + printed.cdef + "*/\n\n"


def kernels(site: str) -> str:
    """Every case of test_kernels_print.py (and EXTRA_CASES) at `site`, plain, followed
    by its whole IR (Kernel.text: what a failure report shows)."""
    out = []
    for n, (primitive, shapes, attrs) in enumerate(GALLERY):
        if site not in PRIMITIVES[primitive].sites:
            continue  # the backward's: f64 and f32 only
        kernel = lower(primitive, site, shapes, attrs)
        ir_text = "/* the kernel's IR:\n" + kernel.text().replace("*/", "* /") + "\n */\n"
        out.append(kernel_text(f"k{n}: {primitive} {shapes} {attrs} at {site}", print_kernel(kernel, f"k{n}"))
                   + ir_text + "\n")
    return "".join(out)


def planned() -> str:
    """The cases at f32 under their automatic plan (where it is not the plain nest), then
    the hand-written plans of PLANNED, each with its plan's JSON."""
    out = []
    for n, (primitive, shapes, attrs) in enumerate(GALLERY):
        kernel = lower(primitive, "f32", shapes, attrs)
        plan = auto_kernel_plan(kernel, pieces=3)
        if plan is not None:
            out.append(kernel_text(f"k{n}: {primitive} {shapes} {attrs} at f32, --plan auto (3 pieces)\n"
                                   f" * plan: {plan.dumps()}", print_kernel(kernel, f"k{n}", plan)))
    for n, (title, (primitive, shapes, attrs), nest_plan) in enumerate(PLANNED):
        kernel = lower(primitive, "f32", shapes, attrs)
        plan = Plan(((kernel.nests[-1].name, nest_plan),))
        validate_plan(kernel, plan)
        out.append(kernel_text(f"p{n}: {title}\n * plan: {plan.dumps()}", print_kernel(kernel, f"p{n}", plan)))
    return "".join(out)


def choices() -> str:
    """`exactc plan --show` of every case at f32."""
    out = []
    for n, (primitive, shapes, attrs) in enumerate(GALLERY):
        kernel = lower(primitive, "f32", shapes, attrs)
        out.append(f"# k{n}: {primitive} {shapes} {attrs}\n{describe_choices(kernel)}\n\n")
    return "".join(out)


def program(model: str, entry: str, site: str, plan: str | None, straight: bool, weights,
            overrides: dict = OVERRIDES) -> str:
    quantized, form = (weights[:2], weights[2]) if weights else (None, None)
    traced = export.trace(model, entry, overrides, quantized, form=form)  # quantized as an export does
    printed = print_program(traced, site, AutoPlan() if plan == "auto" else None, straight)
    head = (f"{model} {entry} at {site}, {overrides}, " + ("--plan auto" if plan else "no plan")
            + (", straight-line host" if straight else "")
            + (f", --weights {weights[0]} --block {weights[1]} --form {weights[2]}" if weights else "")
            + f"\n * arena peak {printed.arena_peak} bytes (structured {printed.structured_peak}, straight-line "
            f"{printed.straight_peak}); {printed.nests} nests, {printed.launches} launches, {printed.kernels} kernels")
    return banner(head) + files_text(printed.files)


def files_text(files: dict[str, str]) -> str:
    """A printed program's files (model.c, kernels.h, kernels/*.c), each under its name."""
    return "".join(banner(f"file {path}") + text for path, text in sorted(files.items()))


# Programs of the graph builder's own (docs/programs.md), printed under both hosts: what no
# architecture's entry has. A static one (no run-time length, no parameters) whose values
# take the names of a function ("block"), of a kernel ("scale_2") and of the entry's input
# and output, with a value never read, an input never read, a view that is also returned,
# and docstrings; one whose parameters' names hold "%" (the PARAMS table is a format), with
# a fold over 3 layers whose result is never read and one of two carried values whose
# layer 0 runs apart; and one of no inputs (its output a function of the weights alone).
def _block(x):
    """x */ 2 through GELU (tanh): a docstring that would end the C comment."""
    return graph.gelu_tanh(graph.scale(x, 0.5, name="block"), name="scale_2")


def _pair(x):
    """A view returned and read, its values named like the entry's input and output: X."""
    r = graph.reshape(graph.gelu_tanh(graph.scale(x, 2.0, name="z"), name="l2norm"), (4, 3))
    return r, graph.silu(r)


def _static_entry(params, x, z):
    graph.silu(x, name="unused")
    r, u = graph.call(_pair, x)
    return {"y": graph.l2norm(graph.call(_block, graph.call(_block, graph.call(_block, x)))), "r": r, "u": u}


def _layer(h, p):
    return graph.linear(h, p["w%"])


def _two_layer(carry, p):
    h, g = carry
    return graph.linear(h, p["w%"]), graph.silu(g)


def _first_layer(carry, p):
    h, g = carry
    return graph.linear(g, p["w%"]), h


def _folds_entry(params, x):
    layers = graph.group_layers(params, "h.")
    graph.fold(_layer, 3, x, layers, name="dead")
    h, g = graph.fold(_two_layer, 3, (x, x), layers, apart={0: _first_layer})
    return {"y": graph.rmsnorm(graph.add(h, g), params["g%s"])}


def _weights_entry(params):
    return {"y": graph.l2norm(graph.silu(params["w"]))}


X = [graph.InputSpec("x", (3, 4), "x")]
BUILT = {
    "static": (_static_entry, [], X + [graph.InputSpec("z", (2,), "x")]),  # z: an input never read
    "folds": (_folds_entry, [graph.ParamSpec("h.{l}.w%", (4, 4), 3), graph.ParamSpec("g%s", (4,), 0, init="gain")], X),
    "weights": (_weights_entry, [graph.ParamSpec("w", (2, 4))], []),
}


def built(entry: str) -> str:
    """The structured host's files, then the straight-line host's that differ from them
    (its model.c: both hosts launch the same kernels)."""
    fn, params, inputs = BUILT[entry]
    traced = graph.trace("built", entry, fn, params, inputs)
    structured, straight = (print_program(traced, "f32", None, s) for s in (False, True))
    apart = {path: text for path, text in straight.files.items() if structured.files.get(path) != text}
    return (banner(f"the builder's `{entry}` at f32, structured host; arena peak {structured.arena_peak} bytes")
            + files_text(structured.files)
            + banner(f"the builder's `{entry}` at f32, straight-line host; arena peak {straight.arena_peak} bytes; "
                     f"its files that differ")
            + files_text(apart))


def printers() -> dict[str, Callable[[], str]]:
    """Every file of tests/printed/: its name -> the function that prints its text."""
    out: dict[str, Callable[[], str]] = {f"kernels-{site}.c": functools.partial(kernels, site) for site in SITES}
    out["planned-f32.c"] = planned
    out["choices.txt"] = choices
    for stem, *spec in PROGRAMS:
        out[f"program-{stem}.c"] = functools.partial(program, *spec)
    for entry in BUILT:
        out[f"program-built-{entry}.c"] = functools.partial(built, entry)
    return out


def texts() -> dict[str, str]:
    """Every file of tests/printed/ (its name -> its text), from the code."""
    return {name: printer() for name, printer in printers().items()}


def stale(held: Path, printed: dict[str, str]) -> list[str]:
    """The files of the folder `held` that differ from `printed` (texts()), or are missing
    or left over."""
    on_disk = {p.name for p in held.glob("*")} if held.is_dir() else set()
    wrong = [n for n, t in printed.items() if n not in on_disk or (held / n).read_text() != t]
    return sorted(wrong + sorted(on_disk - set(printed)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite tests/printed/ from the code")
    args = parser.parse_args(argv)
    if args.write:
        FOLDER.mkdir(exist_ok=True)
        printed = texts()
        for old in FOLDER.glob("*"):
            if old.name not in printed:
                old.unlink()
        for name, text in printed.items():
            (FOLDER / name).write_text(text)
        print(f"wrote {len(printed)} files, {sum(len(t) for t in printed.values())} bytes, to {FOLDER}")
        return 0
    printed = texts()
    wrong = stale(FOLDER, printed)
    for name in sorted(printed):
        print(f"{'differs' if name in wrong else 'same':8} tests/printed/{name}")
    print(f"{len(wrong)} of tests/printed/ differ from the code" + ("; --write rewrites them" if wrong else ""))
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
