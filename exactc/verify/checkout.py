"""Where the harness finds exactc's checkout: the tests, tools and pyproject.toml that sit
beside the `exactc/` package folder in the repository, and are not installed with it.

`make mutants`, `make mutmut` and `make verify` run the checkout's tests; an installed
exactc (a wheel) has none, so the commands that need them take `--tree DIR` or look in
the current directory, and refuse with a message that says so when neither is one.
"""

from __future__ import annotations

import os
from pathlib import Path

import exactc


class CheckoutError(RuntimeError):
    """No checkout of exactc where one is needed."""


def is_checkout(folder: Path) -> bool:
    """A repository of exactc: its package folder, tests/ and pyproject.toml."""
    return (folder / "exactc" / "__init__.py").is_file() and (folder / "tests").is_dir() \
        and (folder / "pyproject.toml").is_file()


def checkout_root(explicit: str | os.PathLike | None = None) -> Path:
    """The checkout to work on: `explicit` if given; else the one this package was
    imported from (an editable install or a run from the repository); else the current
    directory. A CheckoutError names what is missing."""
    if explicit is not None:
        root = Path(explicit).resolve()
        if not is_checkout(root):
            raise CheckoutError(f"--tree {explicit}: not a checkout of exactc (it needs exactc/, tests/ "
                                "and pyproject.toml)")
        return root
    for root in (Path(exactc.__file__).resolve().parent.parent, Path.cwd().resolve()):
        if is_checkout(root):
            return root
    raise CheckoutError("this command runs the tests of a checkout of exactc, and this exactc is installed "
                        "without one: run it from a clone of the repository, or pass --tree DIR")
