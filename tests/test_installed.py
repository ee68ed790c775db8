"""The harness cannot pass green with a check missing: under `make test`
(EXACTC_REQUIRE_INSTALLED=1) a piece that `make install` provides, found missing, fails
the test with a message that names the install step; by hand it is a skip with the same
reason; and the run's last line counts the skips and their reasons (tests/installed.py,
tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

import installed
from installed import PIECES, REQUIRE, need

ROOT = Path(__file__).resolve().parent.parent


def outcome(name: str) -> BaseException | None:
    """What `need(name)` raised: pytest's fail or skip outcome, or None."""
    try:
        need(name)
    except (pytest.fail.Exception, pytest.skip.Exception) as raised:
        return raised
    return None


@pytest.fixture
def empty_path(tmp_path, monkeypatch):
    """A PATH with nothing on it: every command is missing."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.mark.parametrize("command,package", [("valgrind", "valgrind"), ("clang", "clang")])
def test_a_missing_command_fails_under_make_test_naming_make_install(empty_path, monkeypatch, command, package):
    monkeypatch.setenv(REQUIRE, "1")
    raised = outcome(command)
    assert isinstance(raised, pytest.fail.Exception), f"{command} missing under {REQUIRE}=1 gave {raised!r}"
    assert f"{command} is not installed: `make install` installs it (apt-get install {package})" in raised.msg


@pytest.mark.parametrize("command", ["valgrind", "clang"])
def test_by_hand_a_missing_command_is_a_skip_with_the_same_reason(empty_path, monkeypatch, command):
    monkeypatch.delenv(REQUIRE, raising=False)
    raised = outcome(command)
    assert isinstance(raised, pytest.skip.Exception), f"{command} missing by hand gave {raised!r}"
    assert "`make install` installs it" in raised.msg


@pytest.mark.parametrize("name,kind,message", [
    ("probe-baseline", pytest.fail.Exception, "`make probes-baseline` records one"),
    ("/dev/full", pytest.skip.Exception, "this system has no /dev/full"),  # no install step provides it
])
def test_a_missing_baseline_fails_and_a_piece_no_step_provides_skips(monkeypatch, name, kind, message):
    monkeypatch.setenv(REQUIRE, "1")
    monkeypatch.setitem(PIECES, name, dataclasses.replace(PIECES[name], present=lambda: False))
    raised = outcome(name)
    assert isinstance(raised, kind), f"{name} missing under {REQUIRE}=1 gave {raised!r}"
    assert message in raised.msg


def test_present_pieces_pass_and_only_0_or_unset_means_by_hand(monkeypatch):
    assert outcome("gcc") is None  # make install requires gcc; the harness runs on it
    for value, required in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv(REQUIRE, value)
        assert installed.required() is required, value


def test_every_piece_names_a_step_or_is_a_plain_skip():
    for piece in PIECES.values():
        assert piece.missing, piece.name
        assert piece.step is None or "`" in piece.step, f"{piece.name}: the step must name a command"


# ---- through pytest, as make test runs it -------------------------------------------------


def _pytest_without_commands(tmp_path: Path, require: bool) -> subprocess.CompletedProcess:
    """tests/test_callgrind.py (it needs valgrind) in a child pytest whose PATH is empty."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != REQUIRE}
    env["PATH"] = str(empty)
    if require:
        env[REQUIRE] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           "tests/test_callgrind.py"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_make_test_fails_without_valgrind_and_says_make_install(tmp_path):
    done = _pytest_without_commands(tmp_path, require=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "valgrind is not installed: `make install` installs it (apt-get install valgrind)" in done.stdout
    assert " passed" not in done.stdout.splitlines()[-2], done.stdout


def test_by_hand_the_run_skips_and_its_last_line_counts_the_skips(tmp_path):
    done = _pytest_without_commands(tmp_path, require=False)
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.rstrip().splitlines()[-1]
    reason = "valgrind is not installed: `make install` installs it (apt-get install valgrind)"
    assert last.startswith("skips: ") and f"({reason}: " in last, last
    count = int(last.split()[1])
    assert count >= 5 and last.endswith(f"{reason}: {count})"), last
