"""The mutant catalog cannot rot: every anchor occurs exactly once in the tree, every
mutant names checks that exist, and the runner's copies import the copy, not the tree."""

from pathlib import Path

import pytest

from exactc.mutants.catalog import CATALOG, CHECKS
from exactc.mutants.model import CatalogError, Mutant
from exactc.mutants.runner import self_test

TREE = Path(__file__).resolve().parent.parent  # the checkout: exactc/, tests/, pyproject.toml


@pytest.mark.parametrize("mutant", CATALOG, ids=[m.name for m in CATALOG])
def test_anchor_occurs_once(mutant, tmp_path):
    # (a mutant whose CPU is not this one is still checked: its anchor must not rot here)
    if any(not (TREE / p).exists() for p in mutant.requires):
        pytest.skip(f"{mutant.name} needs {mutant.requires}")
    originals = {path: (TREE / path).read_text() for path, _, _ in mutant.edits()}
    for path, original in originals.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(original)
    mutant.apply(tmp_path)
    for path, original in originals.items():
        assert (tmp_path / path).read_text() != original, path
    assert set(mutant.checks) <= set(CHECKS), f"unknown checks: {sorted(set(mutant.checks) - set(CHECKS))}"


def test_a_rotten_anchor_is_an_error_that_names_the_mutant(tmp_path):
    (tmp_path / "f.py").write_text("x = 1\n")
    rotten = Mutant("rotten", "its anchor is gone", "f.py", "y = 2", "y = 3", ("npy",))
    with pytest.raises(CatalogError, match="rotten.*no longer occurs"):
        rotten.apply(tmp_path)
    # a second file's anchor rots the same way, naming that file
    (tmp_path / "g.py").write_text("z = 1\nz = 1\n")
    twice = Mutant("twice", "its second anchor is ambiguous", "f.py", "x = 1", "x = 2", ("npy",),
                   also=(("g.py", "z = 1", "z = 2"),))
    with pytest.raises(CatalogError, match="twice.*'z = 1' occurs 2 times in g.py"):
        twice.apply(tmp_path)


def test_a_mistake_this_cpu_cannot_show_does_not_apply_and_says_what_it_needs(tmp_path):
    """A mutant of code compiled only for a CPU feature (AVX-512, VNNI) cannot be seen
    on a CPU without it: its outcome there is "does not apply", naming the feature, not
    NOT CAUGHT; on a CPU with it, it runs."""
    from exactc.mutants.runner import run_mutant
    from exactc.runtime.toolchain import native_macros

    assert "__x86_64__" in native_macros("gcc") or "__aarch64__" in native_macros("gcc")
    present = sorted(native_macros("gcc") & {"__x86_64__", "__aarch64__"})[0]
    absent = "__EXACTC_NO_SUCH_FEATURE__"
    (tmp_path / "f.py").write_text("x = 1\n")
    lacking = Mutant("lacking", "needs a feature", "f.py", "x = 1", "x = 2", ("npy",),
                     cpu=(absent, f"{present}|{absent}"))
    assert not lacking.applies(tmp_path)
    assert lacking.missing(tmp_path) == [f"a CPU whose gcc -march=native defines {absent}"]
    either = Mutant("either", "needs one of two", "f.py", "x = 1", "x = 2", ("npy",), cpu=(f"{absent}|{present}",))
    assert either.applies(tmp_path) and either.missing(tmp_path) == []
    result = run_mutant(tmp_path, lacking, timeout=60)
    assert result.outcome == "does not apply" and absent in result.detail


def test_the_runner_patches_a_copy_that_python_imports():
    assert self_test(TREE) == ""
    assert (TREE / "exactc" / "__init__.py").exists()


def test_the_report_keeps_every_section_written_after_its_own(tmp_path):
    """make mutants-report rewrites its own sections and keeps what follows them as it
    was: the mutmut campaign's section and any other (a cluster run's notes)."""
    from exactc.mutants.runner import Result, write_markdown

    page = tmp_path / "mutants.md"
    page.write_text("# STALE\n\n## Descriptions\n\nSTALE\n\n## Where the harness is thin\n\nSTALE\n\n"
                    "## mutmut on the cluster engine\n\nkept 1\n\n## The mutmut campaign\n\nkept 2\n")
    write_markdown(page, [Result("fold-slice-previous-layer", "caught", ["programs"], 1.0)], 3.0, 1, 1)
    text = page.read_text()
    assert text.count("## Where the harness is thin") == 1 and "STALE" not in text
    assert text.endswith("## mutmut on the cluster engine\n\nkept 1\n\n## The mutmut campaign\n\nkept 2\n")


# ---- checks and batches that die: crashed or timed out, named, never passed or caught ----

DYING_TESTS = {
    # pytest itself killed by a signal (the OOM killer's SIGKILL), half way through its tests
    "signal": "import os, signal\n\ndef test_dies():\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    # the dask worker that runs the mutant's batch killed under it (the check's parent)
    "worker": "import os, signal\n\ndef test_kills_its_worker():\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    "sleeps": "import time\n\ndef test_sleeps():\n    time.sleep(60)\n",
}


def _dying_tree(tmp_path, how: str) -> tuple[Path, Mutant]:
    """A tree whose `npy` check (tests/test_npy.py) dies as `how` says, and a mutant of it."""
    from exactc.mutants.catalog import CHECKS

    assert CHECKS["npy"].pytest_args() == ["tests/test_npy.py"]  # the whole file, nothing selected
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "f.py").write_text("x = 1\n")
    (tree / "tests" / "test_npy.py").write_text(DYING_TESTS[how])
    return tree, Mutant(f"dies-by-{how}", "a check that dies", "f.py", "x = 1", "x = 2", ("npy",))


def test_a_check_killed_by_a_signal_is_an_error_that_names_it_never_a_pass(tmp_path):
    """A pytest killed by SIGKILL (the OOM killer) neither passes nor catches: the baseline
    refuses it and a mutant whose check died is crashed, each naming the check and the signal."""
    from exactc.mutants.runner import baseline, copy_env, run_check_detail, run_mutant

    tree, mutant = _dying_tree(tmp_path, "signal")
    verdict, said = run_check_detail("npy", tree, copy_env(tree), timeout=60)
    assert (verdict, said.split(":")[0]) == ("error", "npy") and "pytest killed by SIGKILL" in said
    assert baseline(tree, ["npy"], timeout=60, jobs=1)["npy"][0] == "error"
    result = run_mutant(tree, mutant, timeout=60)
    assert (result.outcome, result.caught_by) == ("crashed", [])
    assert result.detail.startswith("npy: pytest killed by SIGKILL")


def test_a_check_past_its_time_is_timed_out_and_named_never_caught(tmp_path):
    from exactc.mutants.runner import run_mutant

    tree, mutant = _dying_tree(tmp_path, "sleeps")
    result = run_mutant(tree, mutant, timeout=3)
    assert (result.outcome, result.caught_by, result.detail) == ("timed out", [], "npy: ran past 3 s")


def test_a_mutant_whose_worker_is_killed_under_it_is_crashed_and_named(tmp_path, monkeypatch):
    """A real LocalCluster of one worker, whose mutant's check kills that worker: dask runs
    the batch once more on the restarted worker, which dies too; the mutant comes back
    crashed, saying so, and the campaign has its row."""
    from exactc.mutants.runner import run_mutants
    from exactc.verify import engine

    monkeypatch.delenv(engine.SCHEDULER_ENV, raising=False)
    tree, mutant = _dying_tree(tmp_path, "worker")
    [result] = run_mutants(tree, [mutant], timeout=60, jobs=1)
    assert (result.mutant, result.outcome, result.caught_by) == ("dies-by-worker", "crashed", [])
    assert result.detail == "its batch did not come back: its dask worker died under it on each of its 2 runs"


def test_a_report_names_the_failed_test_not_the_log_lines_before_it():
    """A check whose tests log at ERROR (dask's scheduler, on a worker's death) prints
    those lines above pytest's summary: the mutant's row names the failed test."""
    from exactc.mutants.runner import _failure_lines

    output = ("ERROR    distributed.scheduler:scheduler.py:5658 Task t marked as failed because 2 workers died\n"
              "ERROR    distributed.scheduler:scheduler.py:6419 Couldn't gather keys\n"
              "=========================== short test summary info ============================\n"
              "FAILED tests/test_dask_cluster.py::test_x - AssertionError: assert 1 == 2\n"
              "!!!!!!!!!!!!!!!!!!!!!!!!!! stopping after 1 failures !!!!!!!!!!!!!!!!!!!!!!!!!!!\n")
    assert _failure_lines(output) == "FAILED tests/test_dask_cluster.py::test_x - AssertionError: assert 1 == 2"
