"""The C text the exporter prints is the text held in tests/printed/ (tools/printed_text.py):
every kernel at every site type, planned kernels, the plan choices and whole programs.

What a user reads (the IR comment above each function, the shapes beside each pointer,
the layout and split notes, the host's banners) has no bits to check it by: only its text.
A change to any of it fails here with a diff, until `python tools/printed_text.py --write`
rewrites the files and the diff is committed with the change. Each file is its own test,
and prints only what it holds, so a change to one printer fails the files that show it
in a fraction of a second (the mutmut campaign runs these first: tests/conftest.py)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "printed_text.py"
DIFF_LINES = 60


def _tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("printed_text", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = _tool()


PRINTERS = sorted(tool.printers().items())


@pytest.mark.parametrize("name,printer", PRINTERS, ids=[name for name, _ in PRINTERS])
def test_printed_text_is_the_held_text(name, printer):
    held_path = tool.FOLDER / name
    assert held_path.is_file(), f"tests/printed/{name} is missing; `python tools/printed_text.py --write` writes it"
    held, printed = held_path.read_text(), printer()
    if held != printed:
        diff = list(difflib.unified_diff(held.splitlines(True), printed.splitlines(True), f"tests/printed/{name}",
                                         "what the code prints"))
        shown = "".join(diff[:DIFF_LINES]) + (f"... ({len(diff) - DIFF_LINES} more diff lines)\n"
                                               if len(diff) > DIFF_LINES else "")
        pytest.fail(f"tests/printed/{name} differs from what the exporter prints; if the change is meant, "
                    f"`python tools/printed_text.py --write` rewrites it (commit the diff):\n{shown}")


def test_the_held_files_are_exactly_the_printed_ones():
    assert sorted(p.name for p in tool.FOLDER.iterdir()) == [name for name, _ in PRINTERS]


def test_a_changed_text_is_found_and_named(tmp_path):
    """The comparison can fail: a held file with one character changed, one missing and
    one left over are each named by stale()."""
    texts = tool.texts()
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
    assert tool.stale(tmp_path, texts) == []
    first, second = sorted(texts)[:2]
    (tmp_path / first).write_text(texts[first].replace("*", "+", 1))
    (tmp_path / second).unlink()
    (tmp_path / "old.c").write_text("")
    assert tool.stale(tmp_path, texts) == sorted([first, second, "old.c"])
