"""The `exactc` command line: the face of the project, above every stage.

Every subcommand is one row of commands(): its name, its help, and the function that
imports its module when the command is chosen (the Face: the function that adds its
options to its parser, the handler that runs it). Every refusal goes through main's one
error path: one line on stderr, `exactc COMMAND: error: ...`, and exit 2 when the input
is the user's to fix (a model, a type, a plan, a checkpoint, a file), 1 when a build or
a program run failed. SIGINT (Ctrl-C) and SIGTERM stop a command the same way: the
clean-ups run (an export's half-written directory is removed), one line says so, and
the exit status is 130 or 143 (128 + the signal's number), as a shell reports them. A
reader of stdout that closes it early (`| head`) ends a command quietly, status 141, as
SIGPIPE would.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import select
import signal
import sys
from typing import Callable

from exactc import __version__


@dataclasses.dataclass(frozen=True)
class Face:
    """What a command's module gives the command line."""

    arguments: Callable[[argparse.ArgumentParser], None]  # adds the command's options
    handler: Callable[[argparse.Namespace], int]  # runs it: the exit status
    description: str | None = None


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    help: str
    load: Callable[[], Face]  # imports the command's module: called for the chosen command only

    @property
    def handler(self) -> Callable[[argparse.Namespace], int]:
        return self.load().handler


def commands() -> list[Command]:
    """The subcommands, in the order `exactc --help` lists them. A command's module is
    imported when the command is chosen, not to list it: each imports numpy, the exporter
    or the harness, and a command (or --help) waits only for what it uses."""
    return [
        Command("export", "export a model entry as a directory of C", _program_command("export")),
        Command("run", "run a model entry and write its outputs as .npy", _program_command("run")),
        Command("check", "build an exported directory and run its conformance check", _program_command("check")),
        Command("info", "nests, launches, arena peak and parameter count of an entry", _program_command("info")),
        Command("cache", "list the cache folder's built programs, or clear them", _program_command("cache")),
        Command("embed", "embed sentences with a sentence-transformers checkpoint, in C", _embed),
        Command("generate", "generate tokens with a GPT or Llama (key/value cache), by the reference or in C",
                _generate),
        Command("serve", "serve embeddings and completions over HTTP, OpenAI's endpoints, from the C programs",
                _serve),
        Command("train", "train a GPT or Llama on a token stream (AdamW), checkpoints that resume bit for bit",
                _train),
        Command("plan", "list a kernel's nests and legal layouts and splits, check a plan file, or tune --plan auto",
                _plan),
        Command("mutants", "run the mutant catalog: every check must catch its mutants", _mutants),
    ]


def _program_command(name: str) -> Callable[[], Face]:
    """export, run, check, info, cache: exactc/commands.py's NAME_arguments and cmd_NAME."""

    def load() -> Face:
        from exactc import commands as program_commands

        description = program_commands.CACHE_DESCRIPTION if name == "cache" else None
        return Face(getattr(program_commands, f"{name}_arguments"), getattr(program_commands, f"cmd_{name}"),
                    description)

    return load


def _embed() -> Face:
    from exactc import embed

    return Face(embed.add_arguments, embed.cmd_embed)


def _generate() -> Face:
    from exactc import generate

    return Face(generate.add_arguments, generate.cmd_generate, generate.__doc__)


def _serve() -> Face:
    from exactc import serve

    return Face(serve.add_arguments, serve.cmd_serve, serve.__doc__)


def _train() -> Face:
    from exactc import train

    return Face(train.add_arguments, train.cmd_train, train.__doc__)


def _plan() -> Face:
    from exactc import plan

    return Face(plan.add_arguments, plan_or_tune, plan.SHOW_DESCRIPTION)


def _mutants() -> Face:
    from exactc.mutants import runner

    return Face(runner.add_arguments, runner.run, runner.__doc__)


def plan_or_tune(args: argparse.Namespace) -> int:
    """`exactc plan`, or with --tune the timing runs of the harness (exactc/verify/tune.py),
    which sit above the product: only the command line reaches both."""
    from exactc import plan

    if not args.tune:
        return plan.show_command(args)
    from exactc.verify import tune

    return tune.tune_command(args)


# Refusals of the user's input (exit code 2), each class by the module that defines it.
USER_ERRORS = (
    ("exactc.commands", "UsageError"),
    ("exactc.exporter.models", "ModelError"),
    ("exactc.exporter.types", "SiteTypeError"),
    ("exactc.exporter.export", "ExportError"),
    ("exactc.exporter.graph", "GraphError"),
    ("exactc.exporter.primitives", "PrimitiveError"),
    ("exactc.exporter.printer.kernel_table", "HostError"),
    ("exactc.exporter.checkpoints.base", "CheckpointError"),
    ("exactc.embed", "EmbedError"),
    ("exactc.generate", "GenerateError"),
    ("exactc.serve", "ServeError"),
    ("exactc.train", "TrainError"),
    ("exactc.exporter.training", "TrainingError"),
    ("exactc.exporter.kernels.layouts", "LayoutError"),  # plans.PlanError is this class
    ("exactc.verify.checkout", "CheckoutError"),
    ("exactc.mutants.runner", "MutantsError"),
    ("exactc.runtime.toolchain", "CacheError"),
    ("exactc.exporter.kernels.tuned", "TuneError"),
)


def user_errors() -> tuple[type[BaseException], ...]:
    """Refusals of the user's input: exit code 2. Those of the modules already imported
    only: a command cannot have raised the error of a module it never imported, and a
    refusal then imports nothing more (importing them all would load the exporter and the
    harness to report a mistyped --dtype)."""
    return tuple(getattr(sys.modules[module], name) for module, name in USER_ERRORS if module in sys.modules)


def failures() -> tuple[type[BaseException], ...]:
    """A build or a program run that failed: exit code 1."""
    from exactc.programs import ProgramFailure

    return (ProgramFailure,)


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or with `chosen` the parser that holds the options of
    that command alone (the others listed by name and help, their modules not imported)."""
    parser = argparse.ArgumentParser(
        prog="exactc",
        description=(
            "Export small transformer models to standalone C programs whose outputs are "
            "the bit-for-bit twins of a numpy reference."
        ),
        epilog="See README.md and docs/ for the guarantees and the harness (make verify).",
    )
    parser.add_argument("--version", action="version", version=f"exactc {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in commands():
        if chosen is not None and command.name != chosen:
            subparsers.add_parser(command.name, help=command.help)
            continue
        face = command.load()
        sub = subparsers.add_parser(command.name, help=command.help, description=face.description or command.help,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        face.arguments(sub)
        sub.set_defaults(handler=face.handler)
    return parser


def chosen_command(argv: list[str]) -> str:
    """The command `argv` names: its first word that is not an option (exactc's own
    options, -h and --version, take no value). "" when there is none."""
    return next((word for word in argv if not word.startswith("-")), "")


class Terminated(BaseException):
    """SIGTERM, raised in the main thread as Ctrl-C raises KeyboardInterrupt: so that the
    same clean-ups run (a BaseException, for the same reason)."""


def _terminate(signum, frame) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` (default: the process's own arguments): its exit status."""
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.getsignal(number) for number in stops}
    signal.signal(signal.SIGTERM, _terminate)
    command = "exactc"
    try:
        words = sys.argv[1:] if argv is None else argv
        parser = build_parser(chosen_command(words))
        args = parser.parse_args(words)
        if args.command is None:
            parser.print_help()
            return 0
        command = f"exactc {args.command}"
        code = _run(args)
        if argv is None:
            # The process's own command: what is still buffered is written here, inside the
            # error path. Left to the interpreter's exit, a closed pipe would be "Exception
            # ignored ... BrokenPipeError" and status 120.
            sys.stdout.flush()
        return code
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # another pipe (a child's): a bug, and its traceback says where
        # The reader of stdout has gone (`exactc embed ... | head -c 1`): there is no one to
        # tell, so stop quietly as `yes | head` does, with the status a shell reports for a
        # tool SIGPIPE stopped. (Python ignores SIGPIPE: the write raised instead, and the
        # clean-ups on the way here have run.) stdout is pointed at /dev/null so that the
        # flush at the interpreter's exit does not fail again.
        _silence_stdout()
        return 128 + signal.SIGPIPE.value
    except (KeyboardInterrupt, Terminated) as exc:
        for number in stops:  # a second signal must not cut this line
            signal.signal(number, signal.SIG_IGN)
        stop = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
        print(f"{command}: stopped by {stop.name}", file=sys.stderr)
        return 128 + stop.value
    finally:
        for number in stops:
            # The process's own command is done: a signal that comes now changes nothing (and
            # must not end in a traceback on the way out). Called in-process: as it was.
            signal.signal(number, signal.SIG_IGN if argv is None else previous[number])


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed: poll reports an error on it."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # replaced by an object without one (a test's capture)
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _silence_stdout() -> None:
    """Point stdout's descriptor at /dev/null (Python's documented idiom, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _run(args: argparse.Namespace) -> int:
    """The command's handler behind the one error path."""
    try:
        return args.handler(args)
    except user_errors() as exc:
        print(f"exactc {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except failures() as exc:
        print(f"exactc {args.command}: error: {exc.summary}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
