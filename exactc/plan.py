"""`exactc plan`: a kernel's nests and the legal layouts and splits (--show), or the
verdict on a plan file (--check); with --tune, the timing runs of exactc/verify/tune.py,
which the command line (exactc/cli.py) hands the request to.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any


def _shape_arg(text: str) -> tuple[str, tuple[int, ...]]:
    try:
        name, dims = text.split("=", 1)
        return name, tuple(int(d) for d in dims.split(",") if d.strip() != "")
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: give name=d0,d1,... (e.g. x=3,4)") from None


def _attr_arg(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--attr {text!r}: give name=value (JSON value, e.g. has_b=true)")
    name, raw = text.split("=", 1)
    try:
        return name, json.loads(raw)
    except json.JSONDecodeError:
        return name, raw


SHOW_DESCRIPTION = (textwrap.fill("Show a kernel's nests, axes and the legal plan choices (--show), or validate a "
                                  "plan JSON file against that kernel (--check). Schema: docs/plans.md.", 79) + "\n\n"
                    + textwrap.fill("With --tune MODEL --entry E: time every nest's candidate layouts of that program "
                                    "on this machine (the exported Makefile's default flags, one thread) and keep the "
                                    "fastest in the tune table ($EXACTC_TUNED, else tune.json in the cache folder), "
                                    "which `--plan auto` then uses for the same compiler, flags and CPU. A layout "
                                    "never changes a bit; the table changes speed only.", 79))


# exporter.primitives.CONTRACTS, the default first, spelled here so that `--help` imports
# no exporter module (tests/test_cli.py checks that the two agree).
CONTRACT_CHOICES = ("off", "fma")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `exactc plan` (cli.py's table registers it)."""
    parser.add_argument("primitive", nargs="?", help="the primitive, e.g. linear")
    parser.add_argument("--show", metavar="PRIMITIVE", help="show this primitive's nests and choices")
    parser.add_argument("--check", metavar="PLAN.json", help="validate this plan against the kernel")
    parser.add_argument("--dtype", default="f32", help="site type: f64, f32 or bf16 (default f32)")
    parser.add_argument("--shape", action="append", type=_shape_arg, default=[], help="operand shape: x=3,4")
    parser.add_argument("--attr", action="append", type=_attr_arg, default=[], help="attribute: has_b=true")
    tune = parser.add_argument_group("tuning (--tune: the positional is a model, gpt, bert or llama)")
    tune.add_argument("--tune", action="store_true", help="time the candidate layouts of a program's nests and keep "
                      "the fastest for --plan auto")
    tune.add_argument("--entry", help="the entry to tune: forward, next_token, prefill, decode, embed")
    tune.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a config field")
    tune.add_argument("--checkpoint", metavar="PATH", help="take the shapes from this checkpoint's config")
    tune.add_argument("--weights", choices=("float", "q8", "q4"), default="float", help="the linear weights' format")
    tune.add_argument("--block", type=int, default=None, metavar="G", help="values per scale of --weights q8|q4")
    tune.add_argument("--form", choices=("integer", "weight-only"), default=None,
                      help="the quantized linears' form to tune (default integer; docs/semantics.md section 15)")
    tune.add_argument("--contract", choices=CONTRACT_CHOICES, default=CONTRACT_CHOICES[0],
                      help="the products' realization to tune (docs/semantics.md section 18; default off)")
    tune.add_argument("--cc", default="cc", help="the compiler to tune for (default cc, as the exported Makefile)")
    tune.add_argument("--rounds", type=int, default=5, help="timing rounds, candidates in alternation (default 5)")
    tune.add_argument("--length", type=int, default=None, metavar="T",
                      help="the run-time length to time at (default T_max)")
    tune.add_argument("--table", metavar="FILE", help="the table to write (default $EXACTC_TUNED, else the cache "
                      "folder's tune.json)")


def show_command(args: argparse.Namespace) -> int:
    """`exactc plan`: the choices, or the verdict on a plan file; a PlanError or a
    PrimitiveError (exit 2 from the CLI) when the kernel or the plan is refused."""
    from exactc.exporter.kernels.lower import lower
    from exactc.exporter.kernels.plans import describe_choices, load_plan, validate_plan
    from exactc.exporter.primitives import PrimitiveError

    primitive = args.show or args.primitive
    if not primitive:
        raise PrimitiveError("name a primitive (--show linear --shape x=3,4 --shape w=5,4)")
    try:
        kernel = lower(primitive, args.dtype, dict(args.shape), dict(args.attr))
    except (KeyError, ValueError) as err:
        if isinstance(err, PrimitiveError):
            raise
        raise PrimitiveError(str(err)) from None
    if args.check:
        validate_plan(kernel, load_plan(args.check))
        print(f"plan {args.check}: valid for {primitive} at {args.dtype}")
        return 0
    print(describe_choices(kernel))
    return 0
