"""docs/cli.md: what `exactc --help` and each command's `--help` print, from the code.

    python tools/cli_docs.py            # print the page
    python tools/cli_docs.py --write    # rewrite docs/cli.md

The help is the command line's own reference: every option, its metavar, its default and
its words. The page is printed at WIDTH columns (argparse wraps to the terminal's width,
$COLUMNS), so it does not depend on the terminal it was made in. tests/test_cli_docs.py
fails when docs/cli.md holds another text.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from exactc import cli

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
WIDTH = 100

HEADER = """# The command line

What `exactc --help` and `exactc COMMAND --help` print, at {width} columns. This page is
written from the code by `python tools/cli_docs.py --write`, and tests/test_cli_docs.py
fails when it differs from what the code prints: it cannot fall behind an option.
"""


def helps() -> list[tuple[str, str]]:
    """(the command line, what its --help prints), `exactc` first, then each command in
    the order `exactc --help` lists them."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)  # argparse's formatter reads it when it is made
    try:
        parser = cli.build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out = [("exactc --help", parser.format_help())]
        out += [(f"exactc {name} --help", command.format_help()) for name, command in sub.choices.items()]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return out


def page() -> str:
    parts = [HEADER.format(width=WIDTH)]
    for line, text in helps():
        parts.append(f"\n## `{line}`\n\n```text\n{text.rstrip()}\n```\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {DOC.relative_to(DOC.parent.parent)}")
    args = parser.parse_args(argv)
    if args.write:
        DOC.write_text(page())
        print(f"wrote {DOC}")
    else:
        sys.stdout.write(page())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
