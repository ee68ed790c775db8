"""docs/semantics.md's table of rounded constants is what the code gives now: the block
between its markers equals the output of tools/spec_constants.py, which reads the
constants from the C lowering, the catalogue and the traced models."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "spec_constants.py"


@pytest.fixture
def tool(monkeypatch):
    """tools/spec_constants.py as a module."""
    monkeypatch.syspath_prepend(str(TOOL.parent))
    return __import__(TOOL.stem)


def test_semantics_md_lists_the_constants_the_code_gives(tool):
    done = subprocess.run([sys.executable, str(TOOL)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    held = tool.current()
    assert held, f"docs/semantics.md has no block between the markers {tool.BEGIN!r} and {tool.END!r}"
    diff = "".join(difflib.unified_diff(held.splitlines(True), done.stdout.splitlines(True),
                                        "docs/semantics.md", "python tools/spec_constants.py"))
    assert held == done.stdout, f"the table is stale; `python tools/spec_constants.py --write` rewrites it:\n{diff}"


def test_a_constant_the_reference_holds_otherwise_stops_the_tool(tool, monkeypatch):
    monkeypatch.setattr(tool, "INV_SQRT_2", float.fromhex("0x1.6a09e667f3bccp-1"))  # 1/np.sqrt(2), one ulp low
    with pytest.raises(SystemExit, match="the lowering holds 0x1.6a09e667f3bccp-1, the reference 0x1.6a09e667f3bcdp-1"):
        tool.primitive_table()


def test_scales_are_told_apart_from_the_nearest_f64(tool):
    assert tool.nearest_f64(0.25, 16)
    assert not tool.nearest_f64(float.fromhex("0x1.6a09e667f3bccp-3"), 32)
    assert tool.nearest_f64(float.fromhex("0x1.6a09e667f3bcdp-3"), 32)
