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
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
