"""Where a campaign's batches run: worker processes of this machine, one per core.

`run_all(fn, items, jobs)` calls fn(item) for every item in worker processes and gives
the results in the items' order, printing a progress line as they come back. A worker
may fork children of its own (verify/kernels.py runs each batch in one), so the workers
are plain processes, not daemons.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import sys
import time
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Progress:
    """A progress line on stderr: done/total, and what `describe` says of the results so
    far; redrawn in place on a terminal, every tenth of the way otherwise."""

    def __init__(self, label: str, total: int, describe: Callable[[list], str] | None = None):
        self.label, self.total, self.describe = label, total, describe
        self.start = time.monotonic()
        self.done: list = []
        self.tty = sys.stderr.isatty()
        self.step = max(1, total // 10)

    def update(self, result) -> None:
        self.done.append(result)
        n = len(self.done)
        if not (self.tty or n % self.step == 0 or n == self.total):
            return
        seconds = time.monotonic() - self.start
        extra = f", {self.describe(self.done)}" if self.describe else ""
        line = f"{self.label}: {n}/{self.total} batches in {seconds:.0f} s{extra}"
        print(("\r" + line) if self.tty else line, end="\n" if not self.tty or n == self.total else "",
              file=sys.stderr, flush=True)


def run_all(fn: Callable[[T], R], items: Sequence[T], jobs: int = 2, progress: Progress | None = None) -> list[R]:
    """fn over items in `jobs` local worker processes; the results in the items' order."""
    context = multiprocessing.get_context("fork")
    results: dict[int, R] = {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        for future in concurrent.futures.as_completed(futures):
            results[futures[future]] = future.result()
            if progress is not None:
                progress.update(results[futures[future]])
    return [results[i] for i in range(len(items))]
