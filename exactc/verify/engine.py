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

No batch is lost and none counts as run when it did not: a batch whose worker dies under it
(SIGKILL, the OOM killer) is rerun once on a worker that is alive (ALLOWED_FAILURES; a named
cluster's scheduler started with DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=1), and one
that does not come back (its worker died again, fn raised, its result could not be
unpickled) is handed to the caller's `lost`, which makes the result that says so (a failed
kernel task, a crashed mutant, a failed mutmut batch), named.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
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
# A batch whose worker dies under it runs once more, elsewhere; a second death is its own
# doing (it fills the memory, say), reported rather than run again (a mutmut batch is an hour).
ALLOWED_FAILURES = 1


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
                          "distributed.scheduler.worker-saturation": 1.0,
                          "distributed.scheduler.allowed-failures": ALLOWED_FAILURES}):
        with LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as connected:
            yield connected


def run_all(fn: Callable[[T], R], items: Sequence[T], jobs: int = 2, progress: Progress | None = None,
            on_result: Callable[[int, R], None] | None = None,
            lost: Callable[[T, str], R] | None = None) -> list[R]:
    """fn over items on the cluster (`client`); the results in the items' order. Each
    result is handed to `on_result(index, result)` and `progress` as it comes back. A
    batch that does not come back is `lost(item, why)` (settle)."""
    from distributed import as_completed

    if not items:
        return []
    results: dict[int, R] = {}
    with client(jobs) as connected:
        futures = connected.map(fn, list(items), pure=False)
        index = {future.key: i for i, future in enumerate(futures)}
        for future in as_completed(futures):
            i = index[future.key]
            results[i] = settle(future, items[i], lost)
            # Forgotten by the cluster once its result is here: a worker that dies later would
            # take the result with it, and dask would run the finished batch again.
            future.release()
            if on_result is not None:
                on_result(i, results[i])
            if progress is not None:
                progress.update(results[i])
    return collect(results, len(items))


class BatchLost(RuntimeError):
    """A batch that did not come back, where the caller gave no `lost` to report it."""


def settle(future, item: T, lost: Callable[[T, str], R] | None) -> R:
    """A batch's result; for one that did not come back (its worker died under it on each
    of its runs, fn raised, or its result could not be unpickled), `lost(item, why)`: the
    result that reports it, never one that counts it as run. Without `lost`, BatchLost."""
    from distributed import KilledWorker

    try:
        return future.result()
    except KilledWorker as error:  # the scheduler's count: a named cluster's may differ from ours
        why = f"its dask worker died under it on each of its {error.allowed_failures + 1} runs"
    except Exception as error:
        why = f"{type(error).__name__}: {error}"
    if lost is None:
        raise BatchLost(f"batch {item!r} did not come back: {why}")
    return lost(item, why)


def collect(results: dict[int, R], count: int) -> list[R]:
    """The results in the items' order; one missing or one too many is an error, never a
    quietly shorter campaign."""
    if sorted(results) != list(range(count)):
        missing = sorted(set(range(count)) - set(results))
        raise RuntimeError(f"the engine gave back {len(results)} results for {count} batches; missing {missing[:10]}")
    return [results[i] for i in range(count)]


LOST = -256  # run_commands' code for a command that did not come back: no exit code, no signal of its own


def run_command(argv: list[str]) -> tuple[int, str]:
    """A batch that is a command (a part of the mutmut campaign): its exit code (negative:
    the signal that killed it) and the last lines of its output."""
    import subprocess

    proc = subprocess.run(argv, capture_output=True, text=True)
    return proc.returncode, (proc.stdout + proc.stderr)[-4000:]


def run_commands(commands: Sequence[list[str]], jobs: int = 2, progress: Progress | None = None) -> list[tuple[int, str]]:
    """Commands as batches (run_command); one that does not come back (its worker died
    under it, it could not start) is (LOST, why): a failure, like any code but 0."""
    return run_all(run_command, commands, jobs, progress, lost=lambda argv, why: (LOST, why))


def ending(code: int) -> str:
    """How a process with this exit code ended, in words (run_command's codes)."""
    if code == LOST:
        return "lost (it did not come back)"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"
