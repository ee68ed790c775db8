"""The program subcommands of `exactc`: export, run, check, info, cache.

Each has an `*_arguments` function that adds its options and a `cmd_*` handler; cli.py
lists them in its one table and reports every refusal (UsageError and the stages' own
errors: exit 2; a failed build or run: exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:  # imported where used: `exactc COMMAND --help` and `exactc cache` need no numpy
    import numpy as np


class UsageError(ValueError):
    """A refusal that is the user's to fix: reported on one line, exit code 2."""


def _note(command: str) -> Callable[[str], None]:
    """What `exactc COMMAND` says on stderr on the way, one line each (a cache entry
    rebuilt)."""
    return lambda message: print(f"exactc {command}: {message}", file=sys.stderr, flush=True)


def _model_options(p: argparse.ArgumentParser, plan: str | None = None) -> None:
    """The options that name an export; `plan` the default of --plan (None: the plain nests)."""
    p.add_argument("model", nargs="?", help="gpt, bert or llama (with --checkpoint: checked against it, or inferred)")
    p.add_argument("--entry", required=True, help="gpt/llama: forward, next_token, prefill, decode, loss_grad (--set batch=B); "
                        "bert: forward, embed")
    p.add_argument("--dtype", required=True, help="the site type: f64, f32 or bf16")
    p.add_argument("--seed", type=int, default=0, help="seed of the drawn parameters and inputs (default 0)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a config field, e.g. --set layers=2 (repeatable); tokens=N is T_max: the "
                        "program reads its length T from input_ids' shape and takes any 1 <= T <= N")
    p.add_argument("--plan", metavar="P", default=plan,
                   help="a plan file (layouts and thread splits, docs/plans.md), `auto` (the benchmark's layout for "
                        "linear nests, or the tune table's where `exactc plan --tune` wrote one, and an 8-piece "
                        f"thread split of every nest) or `none` (default {plan or 'none'})")
    p.add_argument("--checkpoint", metavar="PATH",
                   help="the parameters: a Hugging Face folder (GPT-2, BERT, sentence-transformers, Llama) or a "
                        "llama2.c .bin; the config comes from it (--set tokens=N only)")
    weights_options(p)
    contract_option(p)


# exporter.primitives.CONTRACTS, the default first, spelled here so that `--help` imports
# no exporter module (tests/test_cli.py checks that the two agree).
CONTRACT_CHOICES = ("off", "fma")


def contract_option(p: argparse.ArgumentParser) -> None:
    """--contract: the realization of the products (docs/semantics.md, section 18)."""
    p.add_argument("--contract", choices=CONTRACT_CHOICES, default=CONTRACT_CHOICES[0],
                   help="the products' realization: off (each product rounded, then the sum; the default) or fma "
                        "(linear, matmul and qlinear_w accumulate with fma, one rounding per step)")


def weights_options(p: argparse.ArgumentParser) -> None:
    """--weights and --block: the linear weights quantized (docs/semantics.md, section 15)."""
    p.add_argument("--weights", choices=("float", "q8", "q4", "file"), default="float",
                   help="the linear weights: at the site type (float, the default), or quantized to q8 (int8) or "
                        "q4 (4 bits) with an f32 scale per block, or (file) in the format the checkpoint stores "
                        "each one, a GGUF file's Q4_K, Q5_K and Q6_K included; embeddings, norms and biases stay "
                        "float")
    p.add_argument("--block", type=int, default=None, metavar="G",
                   help="values per scale of --weights q8|q4 (default 32, ggml's Q8_0 and Q4_0; q4: even)")
    p.add_argument("--form", choices=("integer", "weight-only"), default=None,
                   help="the quantized linears: integer (the default: activations quantized to q8 in the weights' "
                        "blocks, exact int32 block sums) or weight-only (the weights widened to f32, the activations "
                        "as they are); docs/semantics.md section 15")


def weights_choice(args: argparse.Namespace) -> tuple[str, int] | None:
    """(fmt, block) of --weights and --block, or None for float weights."""
    if args.weights == "float":
        if args.block is not None:
            raise UsageError("--block G goes with --weights q8 or q4")
        return None
    if args.weights == "file":
        if args.block is not None:
            raise UsageError("--block G goes with --weights q8 or q4; --weights file keeps the file's blocks")
        from exactc.exporter.export import FILE_WEIGHTS

        return FILE_WEIGHTS
    return args.weights, 32 if args.block is None else args.block


MODES = ("program", "scop")


def mode_option(p: argparse.ArgumentParser) -> None:
    """--mode: the program, or every nest on its own as a static-control part (docs/scop.md)."""
    p.add_argument("--mode", choices=MODES, default=MODES[0],
                   help="program (the default): the C program; scop: every nest at point zero as a standalone "
                        "function in a file of its own, between #pragma scop and #pragma endscop, with a driver "
                        "that checks its bits (docs/scop.md)")


def export_arguments(p: argparse.ArgumentParser) -> None:
    _model_options(p)
    mode_option(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the directory to write")
    p.add_argument("--straight-line", action="store_true", help="print the straight-line host (the oracle)")
    p.add_argument("--force", action="store_true", help="replace DIR if an earlier export wrote it (nothing else)")


def run_arguments(p: argparse.ArgumentParser) -> None:
    _model_options(p, plan="auto")  # the program built for the user: the fast one (a plan changes no bit)
    p.add_argument("--backend", choices=("reference", "c"), default="reference")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input (default: drawn from --seed)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="where to write <output>.npy")
    p.add_argument("--cc", default="cc", help="the C compiler of --backend c")


def check_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--cc", default=None, help="the C compiler (default: make's)")
    p.add_argument("--no-openmp", action="store_true", help="build with OPENMP=0")


def info_arguments(p: argparse.ArgumentParser) -> None:
    _model_options(p)
    mode_option(p)


CACHE_DESCRIPTION = """The built programs in the cache folder ($EXACTC_CACHE, else ~/.cache/exactc): the
exports of `exactc run --backend c`, `embed` and `generate` (exports/), the builds
(builds/) and the runtime's objects (objects/). Each entry is checked against its
manifest when it is used and rebuilt if it fails. When one is added, the least
recently used go until all fit in $EXACTC_CACHE_MAX_MB megabytes (default 4000); an
entry that a running command uses is never removed."""


def cache_arguments(p: argparse.ArgumentParser) -> None:
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true",
                      help="print each entry: its size, its last use and what it is, least recently used first")
    what.add_argument("--clear", action="store_true",
                      help="remove every entry that no running command uses, and say how much was freed")


def _overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: write FIELD=VALUE, e.g. --set layers=2")
        out[key.strip()] = value.strip()
    return out


def _spec(args: argparse.Namespace, straight: bool = False, inputs=None, cc: str | None = None):
    """The export the options ask for (export.ExportSpec), its model, type and
    checkpoint checked; `cc` the compiler whose tune table `--plan auto` reads."""
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
    return export.ExportSpec(args.model, args.entry, args.dtype, args.seed, _overrides(args.set), plan=args.plan,
                             straight=straight, checkpoint=checkpoint, inputs=inputs, weights=weights_choice(args),
                             cc=cc, contract=getattr(args, "contract", CONTRACT_CHOICES[0]), form=args.form)


def cmd_export(args: argparse.Namespace) -> int:
    from exactc.exporter import export

    start = time.perf_counter()
    if args.mode == "scop":
        return export_scop(args, start)
    prepared = _spec(args, straight=args.straight_line).prepare()
    target = export.write(prepared, args.output, force=args.force)
    m = prepared.manifest()
    print(f"exported {m['model']}.{m['entry']} at {m['dtype']} to {target} in {time.perf_counter() - start:.2f} s: "
          f"{m['kernels']} kernels, {m['launches']} launches, arena {m['arena_peak']} bytes")
    if prepared.checkpoint is not None:
        ckpt = prepared.checkpoint
        print(f"parameters from {ckpt.path} ({ckpt.format}, {m['parameters']} values)"
              + (f"; not used by exactc: {', '.join(ckpt.ignored)}" if ckpt.ignored else ""))
    return 0


def export_scop(args: argparse.Namespace, start: float) -> int:
    from exactc.exporter import export

    prepared = _spec(args, straight=args.straight_line).prepare_scop()
    target = export.write(prepared, args.output, force=args.force)
    static = sum(n.verdict.static for n in prepared.nests)
    p = prepared.program
    print(f"exported {p.model}.{p.entry} at {prepared.site} in SCoP mode to {target} in "
          f"{time.perf_counter() - start:.2f} s: {len(prepared.kernels)} kernels, {len(prepared.nests)} nests, "
          f"{static} static-control; build and check: make -C {target} && {target}/scop_check")
    return 0


def _read_inputs(items: list[str]) -> dict[str, np.ndarray] | None:
    import numpy as np

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


@contextlib.contextmanager
def _output_folder(path: Path) -> Iterator[None]:
    """`path` made for a command's outputs once they are ready to be written (a folder
    that cannot be made is the user's to fix); if the writing fails, a folder made here
    is removed again, so that a failed command leaves no empty folder behind."""
    made = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"-o {path}: cannot make the folder ({exc.strerror or exc})") from None
    try:
        yield
    except BaseException:
        if made:
            with contextlib.suppress(OSError):
                path.rmdir()  # only if empty: what the command wrote, it removed
        raise


def cmd_run(args: argparse.Namespace) -> int:
    from exactc.exporter import export
    from exactc.exporter import files

    spec = _spec(args, inputs=_read_inputs(args.input), cc=args.cc)
    outdir = Path(args.output)
    if args.backend == "reference":
        expected = spec.prepare().expected
        with _output_folder(outdir):
            for name, array in expected.items():
                try:
                    files.replace_file(outdir / f"{name}.npy", export.npy_bytes(array))
                except OSError as exc:
                    raise UsageError(f"-o {outdir}: cannot write {name}.npy ({exc.strerror or exc})") from None
                print(f"wrote {outdir / name}.npy")
        return 0
    from exactc import programs

    program = programs.exported(spec, programs.Build(cc=args.cc), note=_note("run"))
    with _output_folder(outdir):  # the program writes every output, or none (exactc_host.c)
        program.run_or_fail([(program.root / "conformance" / "inputs", outdir.resolve())])
    for name in sorted(p.stem for p in (program.root / "conformance" / "expected").glob("*.npy")):
        print(f"wrote {outdir / name}.npy")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from exactc import programs

    root = Path(args.directory)
    if not (root / "Makefile").is_file() or not (root / "conformance" / "check.sh").is_file():
        raise UsageError(f"{root} is not an exported directory (no Makefile or conformance/check.sh)")
    program = programs.make(root, programs.Build(cc=args.cc or "cc", openmp=not args.no_openmp), note=_note("check"))
    check = program.check()
    sys.stdout.write(check.stdout)
    sys.stderr.write(check.stderr)
    print("conformance: " + ("bit-identical" if check.returncode == 0 else "FAILED"))
    if check.returncode != 0:
        print(f"build: {program.make_line()}")
    return 0 if check.returncode == 0 else 1


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def cmd_cache(args: argparse.Namespace) -> int:
    from exactc import programs
    from exactc.runtime.toolchain import cache_dir

    folder = cache_dir()
    bound = programs.max_bytes()
    if args.clear:
        removed, freed, kept = programs.clear_cache()
        print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {folder}, freed {_mb(freed)}"
              + (f"; kept {kept} that a running command uses" if kept else ""))
        return 0
    entries = programs.cache_entries()
    for e in entries:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_use))
        print(f"{e.path.relative_to(folder)}  {_mb(e.size):>9}  used {used}  {e.what}")
    total = sum(e.size for e in entries)
    print(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} in {folder}, {_mb(total)} of at most "
          f"{_mb(bound)} ({programs.MAX_MB})")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    if args.mode == "scop":
        return info_scop(args)
    prepared = _spec(args).prepare()
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


def info_scop(args: argparse.Namespace) -> int:
    """exactc's verdict per nest in SCoP mode, one row each, and the count."""
    prepared = _spec(args).prepare_scop()
    rows = [(n.function, n.kernel, "static" if n.verdict.static else "no", n.verdict.why) for n in prepared.nests]
    width = [max(len(r[k]) for r in rows + [("function", "kernel", "static", "")]) for k in range(3)]
    print(f"{'function':<{width[0]}}  {'kernel':<{width[1]}}  {'static':<{width[2]}}  why not")
    for row in rows:
        print(f"{row[0]:<{width[0]}}  {row[1]:<{width[1]}}  {row[2]:<{width[2]}}  {row[3]}".rstrip())
    static = sum(n.verdict.static for n in prepared.nests)
    print(f"scop: {len(rows)} nests, {static} static-control (exactc's verdict)")
    return 0
