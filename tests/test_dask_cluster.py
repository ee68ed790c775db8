"""Campaigns on dask.distributed (verify/engine.py): a real `dask scheduler` and two
`dask worker` processes on localhost, each worker in its own working directory, run a
small kernel campaign; its counts and verdicts equal a local run's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exactc.verify import engine, kernel_campaign

DASK = Path(sys.executable).with_name("dask")


def _start(args, cwd: Path, env: dict) -> subprocess.Popen:
    log = open(cwd / "log.txt", "w")
    return subprocess.Popen([str(DASK), *args], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def cluster(tmp_path):
    """The scheduler's address; the scheduler and both workers torn down after."""
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False",
               DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION="1.0",
               DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=str(engine.ALLOWED_FAILURES))  # as CONTRIBUTING.md says
    env.pop(engine.SCHEDULER_ENV, None)
    folders = {name: tmp_path / name for name in ("scheduler", "worker-1", "worker-2")}
    for folder in folders.values():
        folder.mkdir()
    info = tmp_path / "scheduler.json"
    procs = [_start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
                     str(info)], folders["scheduler"], env)]
    try:
        for name in ("worker-1", "worker-2"):
            procs.append(_start(["worker", "--scheduler-file", str(info), "--nthreads", "1", "--no-dashboard",
                                 "--local-directory", str(folders[name]), "--name", name], folders[name], env))
        from distributed import Client

        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        with Client(address) as connected:
            connected.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for proc in reversed(procs):
            _stop(proc)


TASKS = [kernel_campaign.Task(p, s, seed=i, examples=2, kernels=2, siblings=3)
         for i, (p, s) in enumerate([("add", "bf16"), ("softmax", "f32"), ("embedding", "f64"), (None, None)])]


def test_a_campaign_on_a_scheduler_and_two_workers_equals_a_local_run(cluster, monkeypatch):
    monkeypatch.setenv(engine.SCHEDULER_ENV, cluster)
    tasks = TASKS + [TASKS[0]]  # the same batch twice runs twice: no result dropped or merged
    remote = engine.run_all(kernel_campaign.run_task, tasks)
    local = [kernel_campaign.run_task(t) for t in tasks]
    assert [r.counts for r in remote] == [r.counts for r in local]
    assert [r.failures for r in remote] == [r.failures for r in local] == [[]] * len(tasks)
    assert kernel_campaign.merge(remote)[:2] == kernel_campaign.merge(local)[:2]
    assert sum(r.cases for r in remote) == sum(t.cases for t in tasks)


def test_the_engine_refuses_a_campaign_missing_a_batch():
    with pytest.raises(RuntimeError, match="2 results for 3 batches; missing \\[1\\]"):
        engine.collect({0: "a", 2: "c"}, 3)


def test_batches_start_in_their_order_and_none_waits_behind_a_long_one(monkeypatch):
    """A worker takes a batch only when it is free, the scheduler keeping the rest in their
    order: were a batch handed ahead of time to a busy worker, it would wait behind that
    worker's long batch while the other worker ran the later ones (a campaign of long
    batches, mutmut's files or the mutants, then ends with one worker running alone).
    Each batch prints when it started."""
    monkeypatch.delenv(engine.SCHEDULER_ENV, raising=False)
    batches = [["sh", "-c", "date +%s%N; sleep 5"]] + [["sh", "-c", "date +%s%N; sleep 0.3"]] * 5
    starts = [int(tail) for code, tail in engine.run_all(engine.run_command, batches, jobs=2)]
    short = starts[1:]  # the other worker's, one after another while the long one runs
    assert short == sorted(short), f"started out of order (ns after the first): {[s - starts[0] for s in starts]}"


def test_a_batch_whose_worker_is_killed_is_rerun_once_then_reported_never_lost(tmp_path, monkeypatch):
    """Real kills on a LocalCluster of one worker, restarted by its nanny after each: a
    command that SIGKILLs its worker (its parent) the first time it runs is run again and
    comes back; one that does it every time comes back LOST, saying why; one that SIGKILLs
    itself comes back with its signal. None is dropped or counted as run, and the batch
    that finished before the worker died is not run again (its result kept on the worker
    would have died with it, and dask would have made it again)."""
    monkeypatch.delenv(engine.SCHEDULER_ENV, raising=False)
    runs, marker = tmp_path / "runs", tmp_path / "killed-once"
    first = ["sh", "-c", f"echo ran >> {runs}"]
    # (a second after `first` ended: its result is here by then, no longer only on the worker)
    once = ["sh", "-c", f"if [ ! -e {marker} ]; then touch {marker}; sleep 2; kill -KILL $PPID; fi; echo ran"]
    always = ["sh", "-c", "kill -KILL $PPID"]
    itself = ["sh", "-c", "echo half way; kill -KILL $$"]
    start = time.monotonic()
    outcomes = engine.run_commands([first, once, always, itself], jobs=1)
    assert time.monotonic() - start < 120
    assert marker.exists()  # the first run of `once` did kill its worker
    assert outcomes == [(0, ""), (0, "ran\n"), (engine.LOST, "its dask worker died under it on each of its 2 runs"),
                        (-9, "half way\n")]
    assert runs.read_text() == "ran\n", "a batch that had finished ran again when its worker died"
    assert [engine.ending(code) for code, _ in outcomes[2:]] == ["lost (it did not come back)", "killed by SIGKILL"]


def test_a_batch_that_raises_is_handed_to_lost_or_refused_by_name(monkeypatch):
    """A batch whose function raises on the worker (a command that cannot start) does not
    come back: with `lost`, its result is what `lost` makes of it; without, the engine
    raises, naming the batch."""
    monkeypatch.delenv(engine.SCHEDULER_ENV, raising=False)
    missing = ["/nonexistent/exactc-command"]
    [(code, why)] = engine.run_commands([missing], jobs=1)
    assert code == engine.LOST and why.startswith("FileNotFoundError: ") and missing[0] in why
    with pytest.raises(engine.BatchLost, match=r"batch \['/nonexistent/exactc-command'\] did not come back: "
                       "FileNotFoundError"):
        engine.run_all(engine.run_command, [["true"], missing], jobs=1)
