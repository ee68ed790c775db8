"""The benchmarks import their helpers (linear_speed, programs_speed) from this folder.

The scoreboard (bench/test_scoreboard.py): the machine is printed before the first row,
each row as it is measured, and after pytest's own summary the rows again, the worst
row, and `bench: <rows> rows, worst ratio <r>` as the last line of the run (a ratio is
exactc's time over PyTorch's: above 1, exactc is slower).
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


class Scoreboard:
    """The rows measured in this run: (name, ratio, the line printed)."""

    def __init__(self, reporter):
        self.reporter = reporter
        self.rows: list[tuple[str, float, str]] = []
        self.seconds: dict[str, float] = {}  # exactc's best time per row

    def write(self, line: str) -> None:
        if self.reporter is not None:
            self.reporter.write_line(line)

    def add(self, name: str, ratio: float, line: str, seconds: float | None = None) -> None:
        self.rows.append((name, ratio, line))
        if seconds is not None:
            self.seconds[name] = seconds
        self.write("")
        self.write(line)

    def threads(self) -> list[str]:
        """Does exactc pay for a second thread? Each row at 2 threads (` 2t`) against its
        row at 1: the speed-up, and the rows where 2 threads were slower."""
        pairs = [(name, self.seconds[name.replace(" 2t", " 1t")] / seconds) for name, seconds in self.seconds.items()
                 if " 2t" in name and name.replace(" 2t", " 1t") in self.seconds]
        if not pairs:
            return []
        slower = [f"{name} (x{gain:.2f})" for name, gain in pairs if gain < 1.0]
        return [f"threads: 2 threads against 1, exactc's speed-up {min(g for _, g in pairs):.2f} to "
                f"{max(g for _, g in pairs):.2f}; slower in {len(slower)} of {len(pairs)} rows"
                + (": " + ", ".join(slower) if slower else "")]

    def summary(self) -> list[str]:
        if not self.rows:
            return ["bench: 0 rows"]
        worst = max(self.rows, key=lambda row: row[1])
        return [line for _, _, line in self.rows] + self.threads() + [
            f"worst row: {worst[0]}", f"bench: {len(self.rows)} rows, worst ratio {worst[1]:.2f}"]


_BOARD: list[Scoreboard] = []


@pytest.fixture(scope="session")
def scoreboard(request):
    """The run's scoreboard; the machine's lines are printed once, first."""
    from programs_speed import machine_lines

    board = Scoreboard(request.config.pluginmanager.get_plugin("terminalreporter"))
    board.write("")
    for line in machine_lines():
        board.write(line)
    _BOARD.append(board)
    return board


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    """After pytest's own summary: the rows again, then the last line."""
    result = yield
    if _BOARD:
        from programs_speed import load_average

        board = _BOARD[0]
        board.write(f"load average at end: {load_average()}")
        for line in board.summary():
            board.write(line)
    return result
