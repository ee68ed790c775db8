"""The kernel cases of `make verify`, in tasks an engine runs anywhere (verify/engine.py).

A task is one Hypothesis run: a seed, a number of examples, a primitive and a site type
(or any, for the mixed batches). Each example is a batch of kernel families
(strategies/cases.py, `kernel_families`): a drawn case and its siblings, the same kernel
on fresh inputs and, where the primitive follows a run-time length, at other lengths.
A batch is one compiler call and one child process (verify/kernels.py, `run_cases`), so
a compiled kernel serves every case of its family: where the campaign's time went
(about 0.1 s of gcc per kernel, against a millisecond to run and compare a case).

A task returns its counts and, for a failure, the full report of the first bad case and
Hypothesis's reproduction (the `@reproduce_failure` blob); the failing example is also
saved in the example database the task names, so a rerun of the campaign replays it.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Callable

from exactc.exporter.primitives import (
    BACKWARD_PRIMITIVES,
    CONTRACT_FMA,
    CONTRACT_OFF,
    FUSED_PRIMITIVES,
    K_FORMATS,
    PRIMITIVES,
)
from exactc.exporter.types import SITE_TYPES

KERNELS_PER_BATCH = 6  # distinct kernels per compiler call
SIBLINGS = 16  # cases per kernel: the drawn one and its siblings
EXAMPLES_PER_TASK = 4  # Hypothesis examples (batches) per task


# Primitives whose own tasks build for this CPU (-march=native), where the C the kernel
# includes takes a path the target decides: qlinear_i's whole blocks are summed by
# runtime/exactc_dot.h, AVX2's or VNNI's instructions where the CPU has them. The mixed
# tasks keep the portable build (the header's plain loops), so the campaign runs both.
NATIVE_PRIMITIVES = ("qlinear_i",)


def task_build(task: "Task"):
    """The build of a task's batches: for this CPU for a primitive of NATIVE_PRIMITIVES,
    else the portable default."""
    from exactc.verify.build import BuildOptions

    return BuildOptions(march_native=task.primitive in NATIVE_PRIMITIVES)


# No shrinking: each shrink step is a compiler call, and a batch's failure report already
# holds the bad case whole (its inputs in hex, the kernel, the case as Python).
CAMPAIGN_PHASES = ("explicit", "reuse", "generate")


@dataclasses.dataclass(frozen=True)
class Task:
    """One Hypothesis run of `examples` batches; primitive and site None: any (mixed)."""

    primitive: str | None
    site: str | None
    seed: int
    examples: int = EXAMPLES_PER_TASK
    kernels: int = KERNELS_PER_BATCH
    siblings: int = SIBLINGS
    database: str | None = None  # a folder for Hypothesis's example database
    # Moves every input seed of the task's cases (kernel_families): the campaign's round,
    # so that the example Hypothesis tries first in every run (the simplest) brings fresh
    # inputs in each round, and a rerun's task of the same round replays a saved failure.
    salt: int = 0
    contract: str = CONTRACT_OFF  # the realization its cases run in (docs/semantics.md section 18)

    @property
    def cases(self) -> int:
        """The cases the task runs when no draw is filtered."""
        return self.examples * self.kernels * self.siblings

    def describe(self) -> str:
        fused = "" if self.contract == CONTRACT_OFF else f", contract={self.contract!r}"
        return (f"Task(primitive={self.primitive!r}, site={self.site!r}, seed={self.seed}, "
                f"examples={self.examples}, kernels={self.kernels}, siblings={self.siblings}{fused})")


@dataclasses.dataclass
class TaskResult:
    """Counts by (primitive, site, status); the failure reports; the kernels compiled;
    the counts of the cases whose weights are a k-quant (make verify's `k-quants:` line)."""

    task: Task
    counts: dict[tuple[str, str, str], int]
    kernels: int
    failures: list[str]
    k_quants: dict[tuple[str, str, str], int] = dataclasses.field(default_factory=dict)

    @property
    def cases(self) -> int:
        return sum(self.counts.values())


def database_dir():
    """The campaign's Hypothesis example database: a folder of the cache, shared by every
    worker of this machine (a failing example saved there is replayed first next time)."""
    from exactc.runtime.toolchain import cache_dir

    return cache_dir() / "hypothesis-campaign"


def _counted(primitive: str | None, contract: str) -> bool:
    """Whether a task's cases count toward plan_tasks' `cases`: the forward primitives' (and
    the mixed task's) in the default realization."""
    return contract == CONTRACT_OFF and primitive not in BACKWARD_PRIMITIVES


def plan_tasks(cases: int, seed: int = 0, database: str | None = None, fused_cases: int | None = None,
               **sizes) -> list[Task]:
    """Tasks that together run at least `cases` cases of the forward primitives in the
    default realization and `fused_cases` (default: half of `cases`) of the fused one, in
    whole rounds: every forward primitive x site type in turn and a mixed task; then every
    backward primitive x site type it is defined at (f64 and f32), in as many rounds and
    examples as the forward's, beside them, so adding the backward never thins the forward;
    then every fused primitive x site type. Each task has its own seed; a task runs fewer
    examples when a round of the forward tasks would pass `cases`. `cases` is make
    verify's --min-cases, `fused_cases` its --min-fused-cases."""
    if cases <= 0:
        return []
    fused_cases = -(-cases // 2) if fused_cases is None else fused_cases
    forward = [(p, s, CONTRACT_OFF) for p in sorted(PRIMITIVES) if _counted(p, CONTRACT_OFF) for s in SITE_TYPES]
    forward += [(None, None, CONTRACT_OFF)]
    backward = [(p, s, CONTRACT_OFF) for p in sorted(BACKWARD_PRIMITIVES) for s in PRIMITIVES[p].sites]
    fused = [(p, s, CONTRACT_FMA) for p in FUSED_PRIMITIVES for s in SITE_TYPES]
    per_example = sizes.get("kernels", KERNELS_PER_BATCH) * sizes.get("siblings", SIBLINGS)
    sizes.setdefault("examples", max(1, min(EXAMPLES_PER_TASK, -(-cases // (len(forward) * per_example)))))
    tasks: list[Task] = []

    def add_rounds(pairs: list, done: Callable[[int, int], bool]) -> int:
        """Whole rounds of `pairs` until done(rounds, cases planned): the rounds."""
        planned = 0
        for i, (primitive, site, contract) in enumerate(itertools.cycle(pairs)):
            if i % len(pairs) == 0 and done(i // len(pairs), planned):
                return i // len(pairs)
            salt = (i // len(pairs)) * 0x9E3779B1 % 2**32
            tasks.append(Task(primitive, site, seed * 1_000_003 + len(tasks), database=database, salt=salt,
                              contract=contract, **sizes))
            planned += tasks[-1].cases
        raise AssertionError("unreachable: itertools.cycle never ends")

    rounds = add_rounds(forward, lambda _, planned: planned >= cases)
    add_rounds(backward, lambda done, _: done >= rounds)
    add_rounds(fused, lambda _, planned: planned >= fused_cases)
    return tasks


def run_task(task: Task) -> TaskResult:
    """Run one task's Hypothesis examples; counts every case run, shrinking runs included."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st
    from hypothesis.database import DirectoryBasedExampleDatabase

    from exactc.strategies.cases import kernel_families
    from exactc.verify.kernels import assert_all_equal, kernel_key, run_cases

    counts: collections.Counter = collections.Counter()
    k_quants: collections.Counter = collections.Counter()
    kernels = 0

    # Distinct kernels in a batch (no family twice); the task's salt in every input seed.
    families = kernel_families(task.primitive, task.site, task.siblings, task.salt, task.contract)
    options = task_build(task)

    @settings(max_examples=task.examples, deadline=None, print_blob=True,
              database=DirectoryBasedExampleDatabase(task.database) if task.database else None,
              suppress_health_check=list(HealthCheck), phases=[Phase[p] for p in CAMPAIGN_PHASES])
    @seeded(task.seed)
    @given(batch=st.lists(families, min_size=task.kernels, max_size=task.kernels,
                          unique_by=lambda family: kernel_key(family[0])))
    def check(batch):
        nonlocal kernels
        cases = [case for family in batch for case in family]
        outcomes = run_cases(cases, options)
        kernels += len({kernel_key(c) for c in cases})
        counts.update((o.case.primitive, o.case.site, o.status) for o in outcomes)
        k_quants.update((o.case.primitive, o.case.site, o.status) for o in outcomes
                        if o.case.attr_dict.get("fmt") in K_FORMATS)
        assert_all_equal(outcomes)

    # The example database's key: one per strategy (primitive, site type, sizes), not per
    # source of `check`, so a later task of the same pair, on any worker and with any
    # seed, replays a failure saved here first (Hypothesis's "reuse" phase).
    check._hypothesis_internal_database_key = (  # type: ignore[attr-defined]
        f"exactc-kernel-campaign:{task.primitive}:{task.site}:{task.kernels}:{task.siblings}:{task.contract}".encode())
    failures = []
    try:
        check()
    except Exception as exc:  # noqa: BLE001 - every failure goes back with its report
        # Hypothesis's notes: the blob that replays the example (kept), and the example
        # as a call (left out: the report above holds the bad case, and a batch is long).
        notes = "\n".join(n for n in getattr(exc, "__notes__", []) if not n.startswith(("Falsifying example", "Failing test case")))
        failures.append(f"{task.describe()}\n{type(exc).__name__}: {exc}\n{notes}".rstrip())
    return TaskResult(task, dict(counts), kernels, failures, dict(k_quants))


def lost_task(task: Task, why: str) -> TaskResult:
    """A task that did not come back from the engine (verify/engine.py's `lost`): a failure
    that names it, counting no case."""
    return TaskResult(task, {}, 0, [f"{task.describe()}\nthe task did not come back: {why}"])


def merge(results: list[TaskResult]) -> tuple[list[dict], int, list[str]]:
    """The campaign's rows (verify/campaign.py's summary), kernels compiled, failures."""
    rows, kernels, failures = [], 0, []
    for result in results:
        # A fused task's cases count in the fma family alone: the primitive x type table
        # is the default realization's. A backward primitive's cases count in grad too
        # (make verify's `grad:` line).
        fused = result.task.contract != CONTRACT_OFF
        for (primitive, site, status), n in sorted(result.counts.items()):
            families = ["fma" if fused else "kernels"]
            families += ["quant"] if primitive in ("quantize", "qlinear_w", "qlinear_i") else []
            families += ["grad"] if primitive in BACKWARD_PRIMITIVES else []
            rows.extend({"family": f, "primitive": primitive, "site": site, "status": status}
                        for _ in range(n) for f in families)
        for (primitive, site, status), n in sorted(result.k_quants.items()):  # within quant's
            rows.extend({"family": "k-quants", "primitive": primitive, "site": site, "status": status}
                        for _ in range(n))
        kernels += result.kernels
        failures.extend(result.failures)
    return rows, kernels, failures
