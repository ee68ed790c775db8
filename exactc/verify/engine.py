"""Where a campaign's batches run: dask.distributed, on a LocalCluster of this machine's
cores by default, or on the cluster whose scheduler EXACTC_SCHEDULER names
(tcp://host:port), so a campaign goes past one machine on an existing engine.

`run_all(fn, items, jobs)` calls fn(item) for every item on the cluster's workers and gives
the results in the items' order, reporting each as it comes back (a progress line). A
batch may fork children of its own (verify/kernels.py runs each batch in one), so the
workers must not be daemonic processes: the LocalCluster is made so, and the workers of
a named cluster are started with DASK_DISTRIBUTED__WORKER__DAEMON=False (CONTRIBUTING.md,
"Campaigns on a cluster"). A worker takes a batch only when it is free (worker-saturation
1.0; a named cluster's scheduler started with DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION=1.0).
Each worker imports exactc from its own installation: the items and the functions travel
by reference to their module.
"""

from __future__ import annotations

import contextlib
import logging
import os
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


SCHEDULER_ENV = "EXACTC_SCHEDULER"


@contextlib.contextmanager
def client(jobs: int = 2):
    """A dask Client: to EXACTC_SCHEDULER's cluster when it is set, else to a LocalCluster
    of `jobs` single-threaded, non-daemonic worker processes, closed on exit."""
    import dask
    from distributed import Client, LocalCluster

    address = os.environ.get(SCHEDULER_ENV)
    if address:
        with Client(address) as connected:
            yield connected
        return
    # worker-saturation 1.0: a worker is handed a batch only when it is free, so the batches
    # start in their order (the longest first) and none waits behind another's long batch
    # while a worker idles (dask's default queues one more on each busy worker).
    with dask.config.set({"distributed.worker.daemon": False, "distributed.admin.system-monitor.gil.enabled": False,
                          "distributed.scheduler.worker-saturation": 1.0}):
        with LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as connected:
            yield connected


def run_all(fn: Callable[[T], R], items: Sequence[T], jobs: int = 2, progress: Progress | None = None,
            on_result: Callable[[int, R], None] | None = None) -> list[R]:
    """fn over items on the cluster (`client`); the results in the items' order. Each
    result is handed to `on_result(index, result)` and `progress` as it comes back."""
    from distributed import as_completed

    if not items:
        return []
    results: dict[int, R] = {}
    with client(jobs) as connected:
        futures = connected.map(fn, list(items), pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        for future in as_completed(futures):
            i = index[future.key]
            results[i] = future.result()
            if on_result is not None:
                on_result(i, results[i])
            if progress is not None:
                progress.update(results[i])
    return collect(results, len(items))


def collect(results: dict[int, R], count: int) -> list[R]:
    """The results in the items' order; one missing or one too many is an error, never a
    quietly shorter campaign."""
    if sorted(results) != list(range(count)):
        missing = sorted(set(range(count)) - set(results))
        raise RuntimeError(f"the engine gave back {len(results)} results for {count} batches; missing {missing[:10]}")
    return [results[i] for i in range(count)]


def run_command(argv: list[str]) -> tuple[int, str]:
    """A batch that is a command (a part of the mutmut campaign): its exit code and the
    last lines of its output."""
    import subprocess

    proc = subprocess.run(argv, capture_output=True, text=True)
    return proc.returncode, (proc.stdout + proc.stderr)[-4000:]
