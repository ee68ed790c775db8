"""The `exactc` command line: the face of the project, above every stage."""

from __future__ import annotations

import argparse
import sys

from exactc import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="exactc",
        description=(
            "Export small transformer models to standalone C programs whose outputs are "
            "the bit-for-bit twins of a numpy reference."
        ),
        epilog="See README.md and docs/ for the guarantees and the harness (make verify).",
    )
    parser.add_argument("--version", action="version", version=f"exactc {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser(
        "mutants",
        help="run the mutant catalog: every check must catch its mutants",
        add_help=False,
    )
    from exactc.commands import add_commands  # export, run, check, info

    add_commands(commands)
    from exactc.exporter.kernels.plans import add_plan_parser  # exactc plan --show/--check

    add_plan_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mutants"]:  # the runner owns its options (exactc mutants --help)
        from exactc.mutants.runner import main as mutants_main

        return mutants_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "plan":
        from exactc.exporter.kernels.plans import show_command

        return show_command(args)
    from exactc.commands import COMMANDS, run_command

    if args.command in COMMANDS:
        return run_command(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
