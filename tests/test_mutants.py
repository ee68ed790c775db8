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
