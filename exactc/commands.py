"""The program subcommands of `exactc`: export, run, check, info.

cli.py registers them (`add_commands`) and dispatches to `run_command`. Every refusal
(an unknown model, entry or type, a bad option) is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

COMMANDS = ("export", "run", "check", "info", "embed")


class UsageError(ValueError):
    """A refusal that is the user's to fix: reported on one line, exit code 2."""


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="gpt, bert or llama (with --checkpoint: checked against it, or inferred)")
    p.add_argument("--entry", required=True, help="gpt/llama: forward, next_token; bert: forward, embed")
    p.add_argument("--dtype", required=True, help="the site type: f64, f32 or bf16")
    p.add_argument("--seed", type=int, default=0, help="seed of the drawn parameters and inputs (default 0)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a config field, e.g. --set layers=2 (repeatable)")
    p.add_argument("--plan", metavar="P", help="a plan file (layouts and thread splits, docs/plans.md), or `auto`: the benchmark's layout for linear nests and an 8-piece thread split of every nest")
    p.add_argument("--checkpoint", metavar="PATH",
                   help="the parameters: a Hugging Face folder (GPT-2, BERT, sentence-transformers, Llama) or a "
                        "llama2.c .bin; the config comes from it (--set tokens=N only)")


def add_commands(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("export", help="export a model entry as a directory of C")
    _model_options(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the directory to write")
    p.add_argument("--straight-line", action="store_true", help="print the straight-line host (the oracle)")
    p.add_argument("--force", action="store_true", help="replace DIR if it exists")

    p = commands.add_parser("run", help="run a model entry and write its outputs as .npy")
    _model_options(p)
    p.add_argument("--backend", choices=("reference", "c"), default="reference")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input (default: drawn from --seed)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="where to write <output>.npy")
    p.add_argument("--cc", default="cc", help="the C compiler of --backend c")

    p = commands.add_parser("check", help="build an exported directory and run its conformance check")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--cc", default=None, help="the C compiler (default: make's)")
    p.add_argument("--no-openmp", action="store_true", help="build with OPENMP=0")

    p = commands.add_parser("info", help="nests, launches, arena peak and parameter count of an entry")
    _model_options(p)

    from exactc.embed import add_parser as add_embed_parser  # exactc embed "a sentence" ...

    add_embed_parser(commands)


def run_command(args: argparse.Namespace) -> int:
    from exactc.embed import EmbedError, cmd_embed
    from exactc.exporter import graph, models, types
    from exactc.exporter.checkpoints import CheckpointError
    from exactc.exporter.export import ExportError
    from exactc.exporter.primitives import PrimitiveError
    from exactc.exporter.printer.host import HostError

    errors: tuple = (UsageError, models.ModelError, types.SiteTypeError, ExportError, graph.GraphError, PrimitiveError, HostError,
                     CheckpointError, EmbedError)
    try:
        from exactc.exporter.kernels.plans import PlanError

        errors += (PlanError,)
    except ImportError:
        pass
    handler = {"export": cmd_export, "run": cmd_run, "check": cmd_check, "info": cmd_info, "embed": cmd_embed}[args.command]
    try:
        return handler(args)
    except errors as exc:
        print(f"exactc {args.command}: error: {exc}", file=sys.stderr)
        return 2


def _overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: write FIELD=VALUE, e.g. --set layers=2")
        out[key.strip()] = value.strip()
    return out


def _plan(path: str | None) -> Any:
    if path is None:
        return None
    if path == "auto":  # a layout and thread split per nest, from its shapes
        from exactc.exporter.kernels.autoplan import AutoPlan

        return AutoPlan()
    try:
        from exactc.exporter.kernels import plans
    except ImportError:
        raise UsageError("--plan is not yet supported: exporter/kernels/plans.py (the layouts work) is not there") from None
    loader = getattr(plans, "load_plan", None)
    if loader is None:
        raise UsageError("--plan is not yet supported: exactc.exporter.kernels.plans has no load_plan(path)")
    if not Path(path).is_file():
        raise UsageError(f"--plan {path}: no such file")
    return loader(path)


def _prepare(args: argparse.Namespace, straight: bool = False, inputs=None):
    from exactc.exporter import checkpoints, export, models, types

    types.check_site(args.dtype)
    checkpoint = None
    if args.checkpoint is not None:
        if args.model is not None:
            models.architecture(args.model)
        checkpoint = checkpoints.load(args.checkpoint, args.model)
        args.model = checkpoint.model
    elif args.model is None:
        raise UsageError("give the MODEL (gpt, bert or llama), or a --checkpoint to read it from")
    models.architecture(args.model)
    return export.prepare(args.model, args.entry, args.dtype, args.seed, _overrides(args.set),
                          plan=_plan(args.plan), straight=straight, inputs=inputs, checkpoint=checkpoint)


def cmd_export(args: argparse.Namespace) -> int:
    from exactc.exporter import export

    start = time.perf_counter()
    prepared = _prepare(args, straight=args.straight_line)
    target = export.write(prepared, args.output, force=args.force)
    m = prepared.manifest()
    print(f"exported {m['model']}.{m['entry']} at {m['dtype']} to {target} in {time.perf_counter() - start:.2f} s: "
          f"{m['kernels']} kernels, {m['launches']} launches, arena {m['arena_peak']} bytes")
    if prepared.checkpoint is not None:
        ckpt = prepared.checkpoint
        print(f"parameters from {ckpt.path} ({ckpt.format}, {m['parameters']} values)"
              + (f"; not used by exactc: {', '.join(ckpt.ignored)}" if ckpt.ignored else ""))
    return 0


def _read_inputs(items: list[str]) -> dict[str, np.ndarray] | None:
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise UsageError(f"--input {item!r}: write NAME=FILE.npy")
        try:
            out[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--input {name}: cannot read {path}: {exc}") from None
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from exactc.exporter import export

    prepared = _prepare(args, inputs=_read_inputs(args.input))
    outdir = Path(args.output)
    outdir.mkdir(parents=True, exist_ok=True)
    if args.backend == "reference":
        for name, array in prepared.expected.items():
            (outdir / f"{name}.npy").write_bytes(export.npy_bytes(array))
            print(f"wrote {outdir / name}.npy")
        return 0
    with tempfile.TemporaryDirectory(prefix="exactc-run-") as tmp:
        target = export.write(prepared, Path(tmp) / "program")
        build = subprocess.run(["make", "-s", "-C", str(target), f"CC={args.cc}"], capture_output=True, text=True)
        if build.returncode != 0:
            print(f"exactc run: the C build failed:\n{build.stderr}", file=sys.stderr)
            return 1
        proc = subprocess.run([str(target / "model"), str(target / "weights.safetensors"),
                               str(target / "conformance" / "inputs"), str(outdir.resolve())],
                              capture_output=True, text=True)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            return proc.returncode
    for name in prepared.expected:
        print(f"wrote {outdir / name}.npy")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    root = Path(args.directory)
    if not (root / "Makefile").is_file() or not (root / "conformance" / "check.sh").is_file():
        raise UsageError(f"{root} is not an exported directory (no Makefile or conformance/check.sh)")
    make = ["make", "-s", "-C", str(root)]
    if args.cc:
        make.append(f"CC={args.cc}")
    if args.no_openmp:
        make.append("OPENMP=0")
    build = subprocess.run(make, capture_output=True, text=True)
    sys.stderr.write(build.stderr)
    if build.returncode != 0:
        print("exactc check: the build failed", file=sys.stderr)
        return 1
    check = subprocess.run([str(root / "conformance" / "check.sh")], capture_output=True, text=True)
    sys.stdout.write(check.stdout)
    sys.stderr.write(check.stderr)
    print("conformance: " + ("bit-identical" if check.returncode == 0 else "FAILED"))
    return 0 if check.returncode == 0 else 1


def cmd_info(args: argparse.Namespace) -> int:
    prepared = _prepare(args)
    m = prepared.manifest()
    rows = [
        ("model", f"{m['model']}.{m['entry']} at {m['dtype']}"),
        ("config", ", ".join(f"{k}={v}" for k, v in (m["config"] or {}).items())),
        ("parameters", f"{m['parameters']}"),
        ("kernels", f"{m['kernels']}"),
        ("nests", f"{m['nests']} (one C function each)"),
        ("launches", f"{m['launches']} per run"),
        ("arena peak", f"{m['structured_arena_peak']} bytes (structured host)"),
        ("straight-line", f"{m['straight_line_arena_peak']} bytes (every buffer its own)"),
    ]
    for key, value in rows:
        print(f"{key:<14} {value}")
    return 0
