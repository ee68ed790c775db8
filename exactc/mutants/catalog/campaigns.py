"""Mistakes in the campaign's own machinery (verify/kernel_campaign.py and the families of
cases that share a kernel): a campaign that counts cases it never ran, or runs a case on
another case's kernel, says more than it checked, and so does one that counts a batch that
died (its worker killed, its child killed or hung) as one that ran. `campaign`
(tests/test_campaign_engine.py) and `dask-cluster` (tests/test_dask_cluster.py) must catch them."""

from exactc.mutants.model import Mutant

CASES = "exactc/strategies/cases.py"
KERNELS = "exactc/verify/kernels.py"
ENGINE = "exactc/verify/engine.py"
TASKS = "exactc/verify/kernel_campaign.py"

MUTANTS = [
    Mutant(
        "k-quant-line-counts-every-quantized-linear",
        "make verify's k-quants line counts every case of a quantized linear, q8 and q4 weights "
        "too: it says more k-quant cases were checked than ran",
        TASKS,
        '                        if o.case.attr_dict.get("fmt") in K_FORMATS)\n',
        '                        if "fmt" in o.case.attr_dict)\n',
        ("campaign",),
        family="campaigns",
    ),
    Mutant(
        "backward-tasks-thin-the-forward",
        "the backward primitives' cases count toward make verify's --cases: each forward "
        "primitive and site type runs fewer cases than asked for once the backward arrived",
        TASKS,
        "    return contract == CONTRACT_OFF and primitive not in BACKWARD_PRIMITIVES\n",
        "    return contract == CONTRACT_OFF\n",
        ("campaign",),
        family="campaigns",
    ),
    Mutant(
        "sibling-keeps-the-inputs",
        "a case's siblings keep its seeds: the campaign counts the same inputs again as new cases",
        CASES,
        '        changes = {"seed": (spec.seed + salt) % 2**32} if "seed" in fields else {}\n',
        "        changes = {}\n",
        ("campaign",),
        family="campaigns",
    ),
    Mutant(
        "kernel-key-leaves-out-the-shapes",
        "cases of one primitive and attributes share a compiled kernel whatever their shapes: "
        "a case runs on a kernel printed for another",
        KERNELS,
        "    return (case.primitive, case.site, case.attrs, repr(case.kernel_shapes), ",
        "    return (case.primitive, case.site, case.attrs, ",
        ("campaign",),
        family="campaigns",
    ),
    Mutant(
        "batch-repeats-a-family",
        "a batch may draw the same family twice (Hypothesis's first, simplest example draws "
        "every family alike): the campaign counts the same cases again",
        TASKS,
        "                          unique_by=lambda family: kernel_key(family[0])))",
        "                          ))",
        ("campaign",),
        family="campaigns",
    ),
    Mutant(
        "campaign-forgets-its-failures",
        "a kernel task runs without the example database: a failure found on a worker is not "
        "replayed by the next campaign",
        TASKS,
        "              database=DirectoryBasedExampleDatabase(task.database) if task.database else None,\n",
        "              database=None,\n",
        ("campaign",),
        family="campaigns",
    ),
    Mutant(
        "engine-merges-equal-batches",
        "the engine hands dask its batches as pure: two equal batches get one key, one runs and "
        "the campaign comes back a batch short",
        ENGINE,
        "        futures = connected.map(fn, list(items), pure=False)\n",
        "        futures = connected.map(fn, list(items), pure=True)\n",
        ("dask-cluster",),
        family="campaigns",
    ),
    Mutant(
        "engine-queues-batches-on-busy-workers",
        "the LocalCluster keeps dask's default worker saturation: each busy worker is handed "
        "one batch more, which waits behind its long batch while the other worker runs the "
        "later ones (a mutmut campaign's export.py waited an hour behind graph.py)",
        ENGINE,
        '                          "distributed.scheduler.worker-saturation": 1.0,\n',
        "",
        ("dask-cluster",),
        family="campaigns",
    ),
    Mutant(
        "engine-lost-command-counted-finished",
        "the engine gives back a command whose dask worker died under it with exit code 0: a "
        "mutmut batch lost with its worker (SIGKILL, the OOM killer) counts as finished",
        ENGINE,
        "    return run_all(run_command, commands, jobs, progress, lost=lambda argv, why: (LOST, why))",
        "    return run_all(run_command, commands, jobs, progress, lost=lambda argv, why: (0, why))",
        ("dask-cluster",),
        family="campaigns",
    ),
    Mutant(
        "engine-gives-up-at-the-first-worker-death",
        "the engine lets dask rerun no batch whose worker died: one worker killed under a batch "
        "(by another process's memory, say) loses that batch instead of running it again",
        ENGINE,
        "ALLOWED_FAILURES = 1\n",
        "ALLOWED_FAILURES = 0\n",
        ("dask-cluster",),
        family="campaigns",
    ),
    Mutant(
        "kernel-task-lost-counted-clean",
        "a kernel task that did not come back from the engine (its worker died under it) is a "
        "task without failures: make verify passes with the task's cases never run",
        TASKS,
        '    return TaskResult(task, {}, 0, [f"{task.describe()}\\nthe task did not come back: {why}"])',
        "    return TaskResult(task, {}, 0, [])",
        ("campaign",),
        family="campaigns",
    ),
    Mutant(
        "kernel-child-exit-0-without-results",
        "a batch's forked child that exits 0 before it sent its results is taken for one that "
        "ran: only a non-zero exit code is a crash",
        KERNELS,
        "    if message is None:  # whatever its exit code, even 0: a child that sent nothing crashed",
        "    if message is None and proc.exitcode != 0:",
        ("campaign",),
        family="campaigns",
    ),
    Mutant(
        "engine-keeps-finished-results-on-workers",
        "the engine leaves each finished batch's result on its worker until the campaign ends: "
        "a worker that dies later takes it along, and dask runs the finished batch again (a "
        "mutmut batch over its own stage)",
        ENGINE,
        "            future.release()\n",
        "",
        ("dask-cluster",),
        family="campaigns",
    ),
    Mutant(
        "campaign-builds-the-integer-linear-portable",
        "qlinear_i's own campaign tasks build without -march=native like every other task, so "
        "the campaign never runs exactc_dot.h's vector path, only its plain loops",
        TASKS,
        'NATIVE_PRIMITIVES = ("qlinear_i",)',
        "NATIVE_PRIMITIVES: tuple[str, ...] = ()",
        ("campaign",),
        family="campaigns",
    ),
]
