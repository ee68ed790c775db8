"""docs/cli.md is what the command line prints: `exactc --help` and every command's
`--help`, at tools/cli_docs.py's width, equal to the page (rewritten by `python
tools/cli_docs.py --write`). An option added, renamed, given another default or other
words changes the help, and this fails until the page says so too."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "cli_docs.py"


@pytest.fixture
def tool(monkeypatch):
    """tools/cli_docs.py as a module."""
    monkeypatch.syspath_prepend(str(TOOL.parent))
    return __import__(TOOL.stem)


def test_cli_md_is_what_every_help_prints(tool):
    held = tool.DOC.read_text()
    printed = tool.page()
    diff = "".join(difflib.unified_diff(held.splitlines(True), printed.splitlines(True), "docs/cli.md",
                                        "python tools/cli_docs.py"))
    assert held == printed, f"docs/cli.md is stale; `python tools/cli_docs.py --write` rewrites it:\n{diff}"


def test_the_page_covers_every_command_at_its_width_whatever_the_terminal(tool, monkeypatch):
    from exactc import cli
    monkeypatch.setenv("COLUMNS", "40")
    lines = [line for line, _ in tool.helps()]
    assert lines == ["exactc --help", *(f"exactc {c.name} --help" for c in cli.commands())]
    assert os.environ["COLUMNS"] == "40"  # the terminal's width given back
    page = tool.page()
    assert max(len(line) for line in page.split("```text", 1)[1].splitlines()) <= tool.WIDTH
    for command in cli.commands():
        assert f"\n## `exactc {command.name} --help`\n\n```text\nusage: exactc {command.name} " in page
    monkeypatch.delenv("COLUMNS")
    assert tool.page() == page and "COLUMNS" not in os.environ
