"""The code's hygiene, as `make lint` runs it (pyproject.toml says what each covers): ruff's
lint rules over the code and the tests, ruff's format check over the files that are
formatted, and mypy over exactc/ (the modules not yet clean are listed there, and leave the
list when they type-check)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(sys.executable).parent  # ruff and mypy come with the test extra, beside python


def tool(name: str) -> str:
    path = TOOLS / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: `make install` installs it (pip install -e '.[test]')")
    return found


@pytest.mark.parametrize("command", [
    ["ruff", "check", "exactc", "tests", "tools", "bench", "fuzz"],
    ["ruff", "format", "--check", "exactc"],
    ["mypy"],
], ids=["ruff-check", "ruff-format", "mypy"])
def test_lint(command):
    done = subprocess.run([tool(command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
