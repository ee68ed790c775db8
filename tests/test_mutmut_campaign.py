"""tools/mutmut_campaign.py: the staged config, the survivors' page section, and its
verdicts kept across runs. (The campaign itself is `make mutmut`; these are its cheap parts.)"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import shutil
import tarfile
import tomllib
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "mutmut_campaign.py"


@pytest.fixture(scope="module")
def campaign():
    spec = importlib.util.spec_from_file_location("mutmut_campaign", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_staged_config_is_valid_toml_that_mutmut_reads(campaign):
    text = (TOOL.parent.parent / "pyproject.toml").read_text()
    table = tomllib.loads(text + campaign.mutmut_table(2, ["tests/test_reference.py"]))
    mutmut = table["tool"]["mutmut"]
    assert mutmut["source_paths"] == ["exactc"]
    assert mutmut["only_mutate"] == campaign.MUTATE
    assert mutmut["pytest_add_cli_args_test_selection"] == ["tests/test_reference.py"]
    # the project's own pytest settings travel with it
    assert table["tool"]["pytest"]["ini_options"]["markers"]


def test_every_mutated_glob_matches_a_file(campaign):
    tree = TOOL.parent.parent
    for glob in campaign.FULL:
        assert list(tree.glob(glob)), glob


def test_function_names_read_back_from_mutant_names(campaign):
    assert campaign.function_of("exactc.exporter.types.x_round_to_site__mutmut_3") == "round_to_site"
    assert campaign.function_of("exactc.exporter.kernels.ir.xǁNestǁtext__mutmut_12") == "Nest.text"


def test_a_verdict_survives_a_rerun_only_while_its_mutant_is_the_same_change(campaign, tmp_path):
    page = tmp_path / "mutants.md"
    page.write_text("# Mutants\n\nthe runner's table\n")
    name = "exactc.exporter.types.x_bits__mutmut_1"
    results = {name: ("survived", "exactc/exporter/types.py"),
               "exactc.exporter.types.x_bits__mutmut_2": ("killed", "exactc/exporter/types.py")}
    diffs = {name: ["-    return a + b", "+    return b + a"]}
    unexplained = campaign.write_section(page, results, diffs, "make mutmut", 60.0, "")
    assert unexplained == [name]
    text = page.read_text()
    assert text.startswith("# Mutants\n\nthe runner's table\n\n## The mutmut campaign")
    assert "1/2 killed (50.0 %)" in text
    # a person writes the verdict into the page; the next run keeps it
    page.write_text(text.replace("NO VERDICT YET", "equivalent: + commutes, same bits"))
    assert campaign.write_section(page, results, diffs, "make mutmut", 60.0, "") == []
    assert "equivalent: + commutes, same bits" in page.read_text()
    # the same name, another change: the verdict no longer applies
    diffs = {name: ["-    return a + b", "+    return a - b"]}
    assert campaign.write_section(page, results, diffs, "make mutmut", 60.0, "") == [name]
    assert page.read_text().count("## The mutmut campaign") == 1


def test_a_campaign_of_own_selections_names_each_files_tests(campaign, tmp_path):
    page = tmp_path / "mutants.md"
    results = {"exactc.a.x_f__mutmut_1": ("killed", "exactc/a.py"),
               "exactc.b.x_g__mutmut_1": ("killed", "exactc/b.py"),
               "exactc.c.x_h__mutmut_1": ("killed", "exactc/c.py")}
    selections = {"exactc/a.py": ["tests/test_a.py", "tests/test_x.py"],
                  "exactc/b.py": ["tests/test_b.py", "tests/test_x.py"],
                  "exactc/c.py": ["tests/test_a.py", "tests/test_x.py"]}
    campaign.write_section(page, results, {}, "make mutmut-whole", 60.0, "", 0, selections)
    text = page.read_text()
    assert "  - a.py, c.py: `tests/test_a.py`, `tests/test_x.py`" in text
    assert "  - b.py: `tests/test_b.py`, `tests/test_x.py`" in text
    # one selection for every file: the one line, as a campaign of one stage writes it
    campaign.write_section(page, results, {}, "make mutmut", 60.0, "", 0,
                           dict.fromkeys(selections, campaign.TESTS))
    assert "each file its own" not in page.read_text()


def test_real_edit_retries_fold_into_the_results(campaign, tmp_path):
    (tmp_path / "mutants").mkdir()
    (tmp_path / "mutants" / "confirmed.json").write_text(
        '{"m.x_f__mutmut_1": "killed", "m.x_f__mutmut_2": "killed (new test)",'
        ' "m.x_f__mutmut_3": "survived", "m.x_f__mutmut_4": "killed"}')
    results = {f"m.x_f__mutmut_{i}": ("survived", "exactc/m.py") for i in (1, 2, 3)}
    results["m.x_f__mutmut_4"] = ("killed", "exactc/m.py")
    assert campaign.load_confirmed(tmp_path, results) == 1  # one import-time kill
    assert [results[f"m.x_f__mutmut_{i}"][0] for i in (1, 2, 3, 4)] == [
        "killed", "killed (new test)", "survived", "killed"]
    counts, killed, total = campaign.summary(results)
    assert (killed, total) == (3, 4)


def test_own_tests_take_each_file_s_protecting_tests(campaign):
    # the convention: tests/test_<module>.py, then tests/test_<package>.py
    assert campaign.own_tests("exactc/exporter/dims.py") == ["tests/test_dims.py"]
    assert campaign.own_tests("exactc/exporter/kernels/splits.py")[0] == "tests/test_splits.py"
    assert campaign.own_tests("exactc/exporter/reference/sampling.py")[:2] == [
        "tests/test_sampling.py", "tests/test_reference.py"]
    assert campaign.own_tests("exactc/exporter/checkpoints/hf.py")[:2] == ["tests/test_hf.py", "tests/test_checkpoints.py"]
    assert campaign.own_tests("exactc/exporter/checkpoints/__init__.py")[0] == "tests/test_checkpoints.py"
    # a test file that only shares the name is not the module's: tests/test_cache.py is programs.py's
    assert "tests/test_cache.py" not in campaign.own_tests("exactc/exporter/models/cache.py")
    assert campaign.own_tests("exactc/exporter/models/cache.py")[0] == "tests/test_models.py"
    # the extras: another name, another door
    assert campaign.own_tests("exactc/runtime/libm_twin.py") == ["tests/test_libm.py"]
    assert campaign.own_tests("exactc/exporter/printer/ctext.py") == [
        "tests/test_ctext.py", campaign.PRINTED, "tests/test_kernels_print.py"]
    assert campaign.own_tests("exactc/verify/build.py") == campaign.TESTS  # nothing: the default set
    # the loaders' quantized blocks: read only by the quantized files' tests
    assert ("tests/test_quant_programs.py::test_a_gguf_file_holds_the_blocks_exactc_makes_of_its_f32_twin"
            in campaign.own_tests("exactc/exporter/checkpoints/gguf_file.py"))
    tree = TOOL.parent.parent
    for glob, tests in campaign.OWN_EXTRAS:
        assert list(tree.glob(glob)), glob
        assert all((tree / t.partition("::")[0]).is_file() for t in tests), tests  # files, or node ids
    for path, tests in campaign.NOT_OWN.items():
        assert (tree / path).is_file() and all((tree / t).is_file() for t in tests)


def test_batches_take_a_file_each_largest_first_or_deal_them_round_robin(campaign):
    files = ["exactc/exporter/dims.py", "exactc/exporter/graph.py", "exactc/exporter/kernels/splits.py",
             "exactc/exporter/export.py"]
    sizes = {files[0]: 10, files[1]: 30, files[2]: 10, files[3]: 20}
    own = campaign.batches(files, ["tests/x.py"], 3, own=True, size=sizes.get)
    assert own == [
        (["exactc/exporter/graph.py"], campaign.own_tests("exactc/exporter/graph.py")),
        (["exactc/exporter/export.py"], campaign.own_tests("exactc/exporter/export.py")),
        (["exactc/exporter/dims.py"], ["tests/test_dims.py"]),  # ties by name
        (["exactc/exporter/kernels/splits.py"], campaign.own_tests("exactc/exporter/kernels/splits.py")),
    ]
    dealt = campaign.batches(files, ["tests/x.py"], 3, own=False)
    assert dealt == [(files[0::3], ["tests/x.py"]), (files[1::3], ["tests/x.py"]), (files[2::3], ["tests/x.py"])]


def test_the_whole_product_is_every_file_but_the_harness(campaign, monkeypatch):
    monkeypatch.setattr(campaign, "MUTATE", list(campaign.WHOLE))
    monkeypatch.setattr(campaign, "DO_NOT_MUTATE", list(campaign.HARNESS))
    files = campaign.files_to_mutate()
    for path in ("exactc/cli.py", "exactc/exporter/graph.py", "exactc/exporter/kernels/lower.py",
                 "exactc/exporter/checkpoints/hf.py", "exactc/runtime/keys_twin.py"):
        assert path in files
    assert not [f for f in files if f.startswith(("exactc/verify/", "exactc/mutants/", "exactc/strategies/"))]
    assert not [f for f in files if campaign.own_tests(f) == campaign.TESTS]  # each has its own tests


def test_own_tests_need_the_cluster(campaign, capsys):
    with pytest.raises(SystemExit):
        campaign.main(["--own-tests"])
    assert "--own-tests needs --cluster" in capsys.readouterr().err


def test_every_batch_stages_one_snapshot_taken_when_the_campaign_began(campaign, tmp_path, monkeypatch):
    """A batch that starts late must not stage the tree as it is being edited then: every
    batch's command is the tool of the snapshot STAGE/tree, copied once at the start."""
    seen = []
    monkeypatch.setattr(campaign, "MUTATE", ["exactc/exporter/dims.py", "exactc/exporter/kernels/splits.py"])
    monkeypatch.setattr(campaign.engine, "run_commands", lambda commands, workers, progress: seen.extend(commands)
                        or [(0, "")] * len(commands))
    stage = tmp_path / "stage"
    assert campaign.run_parts(stage, [], 2, 2, True, own=True) == 0
    assert len(seen) == 2
    snapshot = stage / "tree"
    assert all(c[1] == str(snapshot / "tools" / "mutmut_campaign.py") for c in seen)
    assert (snapshot / "tests" / "test_jsonfile.py").read_bytes() == \
        (TOOL.parent.parent / "tests" / "test_jsonfile.py").read_bytes()
    assert not (snapshot / ".git").exists() and not (snapshot / ".venv").exists()


def test_the_stage_runs_hypothesis_without_shrinking(campaign, tmp_path):
    """A killed mutant's failing example would be shrunk (tens of runs of the test) for a
    verdict already known: the stage's profile keeps ci's examples and drops the shrink."""
    from hypothesis import Phase, settings
    env = campaign.stage_env(tmp_path)
    assert env["HYPOTHESIS_PROFILE"] == "mutmut"
    mutmut, ci = settings.get_profile("mutmut"), settings.get_profile("ci")
    assert Phase.shrink not in mutmut.phases and Phase.generate in mutmut.phases
    assert (mutmut.max_examples, mutmut.derandomize) == (ci.max_examples, ci.derandomize)
    assert mutmut.database is None


def test_the_stage_copies_every_folder_the_tests_read(campaign):
    """The tests run in STAGE/mutants, where mutmut copies exactc/, tests/ and also_copy
    only: a folder a test reads (docs/cli.md, fuzz/'s corpora) left out fails the clean
    run, and the whole batch with it."""
    tree = TOOL.parent.parent
    copied = {p.rstrip("/") for p in tomllib.loads(campaign.mutmut_table(1, []))["tool"]["mutmut"]["also_copy"]}
    generated = ("exactc", "tests", "build", "dist", "mutants")  # the package, and what builds and runs leave
    folders = {p.name for p in tree.iterdir() if p.is_dir() and not p.name.startswith(".")
               and p.name not in generated and not p.name.endswith(".egg-info")}
    text = "\n".join(p.read_text() for p in (tree / "tests").glob("*.py"))
    read = {f for f in folders if re.search(rf'"{f}"|\b{f}/', text)}
    assert {"docs", "tools", "fuzz"} <= read
    assert read <= copied, f"tests read {sorted(read - copied)}, which the stage does not copy"


def test_retries_write_each_mutant_in_the_calling_thread(campaign, tmp_path, monkeypatch):
    """applied_source changes the working directory (mutmut's index is read relative to
    the stage): called from two worker threads at once, one read the other's directory."""
    import threading
    (tmp_path / "mutants").mkdir()
    names = [f"m.x_f__mutmut_{i}" for i in range(1, 5)]
    monkeypatch.setattr(campaign, "sync_tests", lambda stage: None)
    monkeypatch.setattr(campaign, "stage_env", lambda stage: {})
    monkeypatch.setattr(campaign, "load_results", lambda stage: {n: ("survived", "exactc/m.py") for n in names})
    threads = []
    monkeypatch.setattr(campaign, "applied_source",
                        lambda stage, name, path: threads.append(threading.current_thread()) or f"# {name}")
    monkeypatch.setattr(campaign, "confirm_one", lambda stage, source, path, tests, env, timeout:
                        "killed" if source.endswith(("_1", "_3")) else "survived")
    (tmp_path / "exactc").mkdir()
    (tmp_path / "exactc" / "m.py").write_text("# m\n")
    assert campaign.retry_named(tmp_path, ["m.*"], ["tests/t.py"], 2) == 2
    assert threads == [threading.main_thread()] * 4


def test_a_retry_finishes_what_a_stopped_run_left_unchecked(campaign, tmp_path, monkeypatch):
    """A run stopped half way leaves mutants unchecked: a retry takes them as real edits,
    beside the survivors, and leaves alone what mutmut killed."""
    (tmp_path / "mutants").mkdir()
    (tmp_path / "exactc").mkdir()
    (tmp_path / "exactc" / "m.py").write_text("# m\n")
    statuses = {"m.x_f__mutmut_1": "survived", "m.x_f__mutmut_2": "not checked", "m.x_f__mutmut_3": "killed",
                "m.x_f__mutmut_4": "no tests", "m.x_f__mutmut_5": "timeout"}
    monkeypatch.setattr(campaign, "sync_tests", lambda stage: None)
    monkeypatch.setattr(campaign, "stage_env", lambda stage: {})
    monkeypatch.setattr(campaign, "load_results", lambda stage: {n: (s, "exactc/m.py") for n, s in statuses.items()})
    monkeypatch.setattr(campaign, "applied_source", lambda stage, name, path: f"# {name}")
    tried = []
    monkeypatch.setattr(campaign, "confirm_one", lambda stage, source, path, tests, env, timeout:
                        tried.append(source) or ("survived" if source == "# m\n" else "killed"))
    assert campaign.retry_named(tmp_path, ["m.*"], ["tests/t.py"], 1) == 4
    assert sorted(tried[1:]) == ["# m.x_f__mutmut_1", "# m.x_f__mutmut_2", "# m.x_f__mutmut_4", "# m.x_f__mutmut_5"]
    assert json.loads((tmp_path / "mutants" / "confirmed.json").read_text()) == {
        f"m.x_f__mutmut_{i}": "killed (new test)" for i in (1, 2, 4, 5)}


def test_each_batch_confirms_its_import_time_survivors_against_its_own_selection(campaign, tmp_path, monkeypatch):
    """A campaign of batches (--own-tests) confirmed afterwards (--confirm-only): each
    batch's import-time survivors are retried against that batch's tests and probed for
    that batch's files, not the campaign's first batch's (the campaign-wide TESTS)."""
    for part, (mutated, tests) in {"part-000": ("exactc/a.py", ["tests/test_a.py", "tests/test_primitives.py"]),
                                   "part-001": ("exactc/b.py", ["tests/test_b.py"])}.items():
        stage = tmp_path / part
        (stage / "mutants" / "exactc").mkdir(parents=True)
        (stage / "mutants" / mutated).write_text("# mutated\n")
        (stage / "mutants" / "mutmut-stats.json").write_text('{"duration_by_test": {}}')
        (stage / "pyproject.toml").write_text(
            campaign.mutmut_table(1, tests).replace("only_mutate = ", f"only_mutate = [\"{mutated}\"] #"))
    monkeypatch.setattr(campaign, "TESTS", ["tests/test_first_batch.py"])
    probed, judged = [], []

    def probe(argv, cwd, **kwargs):
        probed.append(argv[3:])
        return type("Out", (), {"stdout": json.dumps([f"exactc.{argv[3][7:]}.x_f"])})()

    monkeypatch.setattr(campaign.subprocess, "run", probe)
    monkeypatch.setattr(campaign, "applied_source", lambda stage, name, path: "# mutant\n")
    monkeypatch.setattr(campaign, "confirm_one", lambda stage, source, path, tests, env, timeout:
                        judged.append(tests) or "killed")
    for part, name in (("part-000", "exactc.a.x_f__mutmut_1"), ("part-001", "exactc.b.x_f__mutmut_1")):
        results = {name: ("survived", f"exactc/{name[7]}.py")}
        assert campaign.confirm_survivors(tmp_path / part, results, 1, {}) == {name: "killed"}
    assert probed == [["exactc.a"], ["exactc.b"]]
    assert judged == [["tests/test_a.py"], ["tests/test_b.py"]]  # test_primitives.py left out (CONFIRM_SKIP)


def test_a_retried_unchecked_mutant_is_reported_as_the_retry_found_it(campaign, tmp_path):
    (tmp_path / "mutants").mkdir()
    (tmp_path / "mutants" / "confirmed.json").write_text(json.dumps(
        {"m.a": "survived", "m.b": "survived", "m.c": "killed (new test)", "m.d": "killed", "m.f": "survived"}))
    results = {"m.a": ("not checked", "p"), "m.b": ("survived", "p"), "m.c": ("not checked", "p"),
               "m.d": ("survived", "p"), "m.e": ("not checked", "p"), "m.f": ("no tests", "p")}
    assert campaign.load_confirmed(tmp_path, results) == 1
    assert {n: s for n, (s, _) in results.items()} == {
        "m.a": "survived", "m.b": "survived", "m.c": "killed (new test)", "m.d": "killed", "m.e": "not checked", "m.f": "survived"}


def test_a_retry_refuses_tests_that_fail_without_a_mutant(campaign, tmp_path, monkeypatch):
    """A new test that needs a fix made after the stage was taken fails on the stage's
    own source, and so on every mutant: each would be counted killed by it."""
    (tmp_path / "mutants").mkdir()
    (tmp_path / "exactc").mkdir()
    (tmp_path / "exactc" / "m.py").write_text("# the stage's own m.py\n")
    monkeypatch.setattr(campaign, "sync_tests", lambda stage: None)
    monkeypatch.setattr(campaign, "stage_env", lambda stage: {})
    monkeypatch.setattr(campaign, "load_results", lambda stage: {"m.x_f__mutmut_1": ("survived", "exactc/m.py")})
    monkeypatch.setattr(campaign, "applied_source", lambda stage, name, path: "# mutated\n")
    sources = []
    monkeypatch.setattr(campaign, "confirm_one", lambda stage, source, path, tests, env, timeout:
                        sources.append(source) or "killed")
    with pytest.raises(SystemExit, match="fail on the stage's own source"):
        campaign.retry_named(tmp_path, ["m.*"], ["tests/t.py"], 1)
    assert sources == ["# the stage's own m.py\n"]  # no mutant was tried


def test_count_mutants_uses_mutmut_s_own_generator_and_keeps_the_directory(campaign, tmp_path, monkeypatch):
    (tmp_path / "exactc").mkdir()
    (tmp_path / "exactc" / "m.py").write_text("def f(a, b):\n    return a + b\n\n\ndef g():\n    return 'x'\n")
    (tmp_path / "exactc" / "n.py").write_text("TABLE = [1, 2]  # module level: not mutated\n")
    monkeypatch.setattr(campaign, "TREE", tmp_path)
    here = Path.cwd()
    counts = campaign.count_mutants(["exactc/m.py", "exactc/n.py"])
    assert counts["exactc/n.py"] == 0 and counts["exactc/m.py"] >= 2 and Path.cwd() == here


def test_a_retry_brings_the_tests_and_the_folders_they_read_into_the_stage(campaign, tmp_path, monkeypatch):
    """A retry runs today's tests on the stage's source: tests/printed/ and the tool that
    prints it (tools/printed_text.py) must come with them, or the printed text of the
    stage's day is compared with today's held files."""
    tree, stage = tmp_path / "tree", tmp_path / "stage"
    for folder in ("tests", "tools", "docs", "fuzz", "bench"):
        (tree / folder).mkdir(parents=True)
        (tree / folder / f"{folder}.txt").write_text(f"today's {folder}")
    for root in (stage, stage / "mutants"):
        (root / "tools").mkdir(parents=True)
        (root / "tools" / "tools.txt").write_text("the stage's day")
    monkeypatch.setattr(campaign, "TREE", tree)
    campaign.sync_tests(stage)
    for root in (stage, stage / "mutants"):
        for folder in ("tests", "tools", "docs", "fuzz", "bench"):
            assert (root / folder / f"{folder}.txt").read_text() == f"today's {folder}", (root, folder)


def test_under_mutmut_the_fastest_tests_run_first(tmp_path, monkeypatch):
    """A mutant's run stops at its first failing test: the quick ones (the printed text)
    go first, by mutmut's own timings; outside a mutmut stage the order is pytest's."""
    import json
    from types import SimpleNamespace

    import conftest

    (tmp_path / "mutmut-stats.json").write_text(json.dumps(
        {"duration_by_test": {"t::slow": 30.0, "t::quick": 0.1, "t::middle": 2.0}}))
    monkeypatch.chdir(tmp_path)
    names = ["t::slow", "t::unknown", "t::middle", "t::quick"]
    items = [SimpleNamespace(nodeid=n) for n in names]
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == names
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "mutmut")
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == ["t::quick", "t::middle", "t::slow", "t::unknown"]
    (tmp_path / "mutmut-stats.json").unlink()
    items.reverse()
    conftest.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == ["t::unknown", "t::slow", "t::middle", "t::quick"]


# ---- a stopped campaign goes on where it stopped (--resume) -----------------------------

JSON_TESTS = [f"tests/test_jsonfile.py::{t}" for t in (
    "test_json_files_are_refused_whole_by_rule", "test_a_bad_json_file_is_named_by_its_path")]


def score(out: str) -> str:
    return re.findall(r"^mutmut: \d+/\d+ killed.*$", out, re.M)[-1]


def test_a_stopped_campaign_goes_on_where_it_stopped(campaign, tmp_path, monkeypatch, capsys):
    """A real campaign (jsonfile.py against two of its tests, on a LocalCluster),
    stopped as a kill at a session's end leaves it: some mutants unrun, the batch not
    marked finished; then recorded, its stage lost (another machine's empty /tmp) and
    restored elsewhere from the record and this checkout. --resume runs the unrun mutants
    only (a verdict written before the stop stands, even a wrong one planted here), marks
    the batch finished, and adds the runs' wall times; a second --resume, after a second
    record and restore, runs no batch at all."""
    monkeypatch.setattr(campaign, "MUTATE", list(campaign.MUTATE))
    monkeypatch.setattr(campaign, "DO_NOT_MUTATE", list(campaign.DO_NOT_MUTATE))
    monkeypatch.setattr(campaign, "TESTS", list(campaign.TESTS))
    first_stage = tmp_path / "stage"
    common = ["--cluster", "--max-children", "1", "--no-confirm", "--stage"]
    assert campaign.main([*common, str(first_stage), "--mutate", "exporter/jsonfile.py", "--tests", *JSON_TESTS]) == 0
    first = score(capsys.readouterr().out)
    killed, total = map(int, re.match(r"mutmut: (\d+)/(\d+)", first).groups())
    part = first_stage / "part-000"
    assert (part / campaign.FINISHED).is_file()

    meta = part / "mutants" / "exactc" / "exporter" / "jsonfile.py.meta"
    data = json.loads(meta.read_text())
    decided = [n for n, code in data["exit_code_by_key"].items() if code not in (None, 0)]
    planted, unrun = decided[0], decided[1:4]
    data["exit_code_by_key"][planted] = 0  # "survived": only a rerun of it would undo this
    for name in unrun:
        data["exit_code_by_key"][name] = None
    meta.write_text(json.dumps(data))
    (part / campaign.FINISHED).unlink()
    # a real-edit retry's verdict (confirm_survivors, --retry) on the planted survivor
    (part / "mutants" / campaign.CONFIRMED).write_text(json.dumps({planted: "killed (new test)"}))

    stage = move_by_record(campaign, first_stage, tmp_path / "elsewhere", capsys)
    assert f"{total - len(unrun)} verdicts, batches: 0 finished, 1 begun and not finished" in stage.restored
    meta = stage / "part-000" / "mutants" / "exactc" / "exporter" / "jsonfile.py.meta"
    assert campaign.main([*common, str(stage), "--resume"]) == 0
    out = capsys.readouterr()
    assert "0 finished before, 1 to go on with" in out.err
    assert score(out.out).startswith(f"mutmut: {killed}/{total} killed")  # the retry's kill counted
    after = json.loads(meta.read_text())["exit_code_by_key"]
    assert after[planted] == 0 and all(after[n] not in (None, 0) for n in unrun)
    assert (stage / "part-000" / campaign.FINISHED).is_file()
    walls = json.loads((stage / campaign.LEDGER).read_text())["walls"]
    assert len(walls) == 2 and all(w > 0 for w in walls)
    assert f"wall time: {sum(walls):.0f} s" in out.out
    assert campaign.main(["--report-only", "--stage", str(stage)]) == 0  # its runs' time, read back
    out = capsys.readouterr().out
    assert f"wall time: {sum(walls):.0f} s" in out and "batches: 1 finished, 0 begun and not finished, 0 not begun" in out

    record = tmp_path / "second.tar.xz"  # recorded again, and restored as --resume begins (make mutmut-whole RECORD=)
    assert campaign.main(["--save-record", str(record), "--stage", str(stage)]) == 0
    shutil.rmtree(stage)
    stage = tmp_path / "third"
    assert campaign.main([*common, str(stage), "--resume", "--restore-record", str(record)]) == 0
    out = capsys.readouterr()
    assert f"mutmut: restored {record} into {stage}: {total} verdicts, batches: 1 finished" in out.out
    assert "1 finished before, 0 to go on with" in out.err
    assert score(out.out).startswith(f"mutmut: {killed}/{total} killed")
    assert len(json.loads((stage / campaign.LEDGER).read_text())["walls"]) == 3


class Restored(type(Path())):
    restored = ""


def move_by_record(campaign, stage: Path, to: Path, capsys) -> Path:
    """`stage` recorded, removed, and restored at `to` from the record and this checkout."""
    record = stage.parent / (stage.name + ".tar.xz")
    assert campaign.main(["--save-record", str(record), "--stage", str(stage)]) == 0
    assert "recorded" in capsys.readouterr().out
    shutil.rmtree(stage)
    assert campaign.main(["--restore-record", str(record), "--stage", str(to)]) == 0
    moved = Restored(to)
    moved.restored = capsys.readouterr().out
    return moved


def tampered(record: Path, change) -> Path:
    """A copy of `record` whose index `change` has changed."""
    out = record.with_name("tampered.tar.xz")
    with tarfile.open(record, "r:xz") as src, tarfile.open(out, "w:xz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()
            if member.name == "record.json":
                index = json.loads(data)
                change(index)
                data = json.dumps(index).encode()
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    return out


def test_a_record_is_restored_only_over_the_tree_and_the_mutmut_it_was_made_with(campaign, tmp_path, monkeypatch, capsys):
    """A recorded verdict holds for the source it was judged on, and the mutants one mutmut
    makes: a record restored over a checkout whose files differ, or with another mutmut,
    is refused, naming the difference, and leaves no stage behind."""
    monkeypatch.setattr(campaign, "MUTATE", list(campaign.MUTATE))
    stage = tmp_path / "stage"
    (stage / "tree").mkdir(parents=True)
    shutil.copytree(campaign.TREE / "exactc" / "exporter", stage / "tree" / "exactc" / "exporter",
                    ignore=campaign.IGNORED)
    (stage / campaign.LEDGER).write_text(json.dumps({"mutate": ["exactc/exporter/jsonfile.py"],
                                                     "do_not_mutate": [], "walls": [1.0], "batches": []}))
    record = tmp_path / "record.tar.xz"
    assert campaign.main(["--save-record", str(record), "--stage", str(stage)]) == 0
    tree = stage / "tree"
    elsewhere = tmp_path / "elsewhere"
    assert campaign.main(["--restore-record", str(record), "--stage", str(elsewhere), "--tree", str(tree)]) == 0
    assert "0 verdicts, batches: 0 finished, 0 begun and not finished, 0 not begun" in capsys.readouterr().out

    def edited(index):
        index["tree"]["exactc/exporter/jsonfile.py"] = "0" * 64

    for change, said in ((edited, "(1 files: changed exactc/exporter/jsonfile.py)"),
                         (lambda index: index.update(mutmut="2.4.5"), "made with mutmut 2.4.5")):
        with pytest.raises(SystemExit) as refused:
            campaign.main(["--restore-record", str(tampered(record, change)), "--stage",
                           str(tmp_path / "refused"), "--tree", str(tree)])
        assert said in str(refused.value)
        assert not (tmp_path / "refused").exists()


def test_a_batch_with_unrun_mutants_is_not_marked_finished(campaign, tmp_path, monkeypatch):
    """mutmut ends well when ^C stops it, its unrun mutants left without a verdict: such a
    batch must not be marked finished, or --resume would never run them."""
    monkeypatch.setattr(campaign, "MUTATE", ["exactc/exporter/jsonfile.py"])
    meta = tmp_path / "mutants" / "exactc" / "exporter" / "jsonfile.py.meta"
    meta.parent.mkdir(parents=True)
    codes = {"exactc.exporter.jsonfile.x_parse__mutmut_1": 1, "exactc.exporter.jsonfile.x_parse__mutmut_2": None}
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    assert not campaign.mark_finished(tmp_path, 5.0)
    assert not (tmp_path / campaign.FINISHED).exists()
    codes["exactc.exporter.jsonfile.x_parse__mutmut_2"] = 0
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    assert campaign.mark_finished(tmp_path, 5.0)
    assert (tmp_path / campaign.FINISHED).is_file()


def test_a_batch_of_a_file_without_a_function_is_finished_with_nothing_to_run(campaign, tmp_path, monkeypatch, capsys):
    """A package's __init__.py without a function gives mutmut no mutant, and mutmut 3 then
    stops with exit 1 (no test reaches a mutant): that batch is finished, not failed (the
    whole-exporter campaign's five __init__.py batches each ended it with `no score`).
    A batch whose mutants exist and whose mutmut fails is still a failure."""
    for name in ("MUTATE", "DO_NOT_MUTATE", "TESTS"):
        monkeypatch.setattr(campaign, name, list(getattr(campaign, name)))
    stage = tmp_path / "part"
    meta = stage / "mutants" / "exactc" / "runtime" / "__init__.py.meta"
    meta.parent.mkdir(parents=True)
    monkeypatch.setattr(campaign, "mutmut_exe", lambda: "mutmut")
    monkeypatch.setattr(campaign, "check_import", lambda stage, env: "")
    monkeypatch.setattr(campaign.subprocess, "Popen", lambda cmd, cwd, env: type(
        "Run", (), {"returncode": 1, "poll": lambda self: 1, "wait": lambda self: 1})())
    argv = ["--stage", str(stage), "--resume", "--mutate", "runtime/__init__.py", "--tests", "tests/test_libm.py",
            "--no-confirm"]
    (stage / "pyproject.toml").write_text('[tool.mutmut]\nonly_mutate = ["exactc/runtime/__init__.py"]\n'
                                          'pytest_add_cli_args_test_selection = ["tests/test_libm.py"]\n')
    meta.write_text(json.dumps({"exit_code_by_key": {}}))
    assert campaign.main(argv) == 0
    assert (stage / campaign.FINISHED).is_file()
    assert "runtime/__init__.py: no mutant (no function or method to mutate); nothing to run" in capsys.readouterr().err
    (stage / campaign.FINISHED).unlink()
    meta.write_text(json.dumps({"exit_code_by_key": {"exactc.runtime.x_f__mutmut_1": None}}))
    assert campaign.main(argv) == 2
    assert not (stage / campaign.FINISHED).exists()
    assert "`mutmut run` failed (exit 1): no score" in capsys.readouterr().err


def test_a_campaign_s_report_names_the_batches_not_yet_run(campaign, tmp_path):
    """A stopped campaign's report counts only the mutants of the batches that began: the
    others are named by file, so a partial score is not read as the whole one."""
    batches = [{"files": files, "stage": str(tmp_path / f"part-00{i}")}
               for i, files in enumerate((["exactc/graph.py"], ["exactc/embed.py"], ["exactc/cli.py", "exactc/verify/tune.py"]))]
    (tmp_path / "part-000").mkdir()
    (tmp_path / "part-000" / campaign.FINISHED).write_text("")
    (tmp_path / "part-001").mkdir()
    assert campaign.batches_line({"batches": batches}) == \
        "batches: 1 finished, 1 begun and not finished, 1 not begun (cli.py, verify/tune.py: `--resume` runs them)"


def test_resume_needs_a_campaign_s_stage(campaign, tmp_path, capsys):
    with pytest.raises(SystemExit):
        campaign.main(["--cluster", "--resume", "--stage", str(tmp_path / "none")])
    assert "--resume needs a stopped --cluster campaign's stage" in capsys.readouterr().err


# ---- batches that die: failures, named, never finished -----------------------------------

def test_a_batch_killed_by_a_signal_or_lost_with_its_worker_fails_the_campaign_by_name(campaign, tmp_path,
                                                                                         monkeypatch, capsys):
    """A stopped campaign's batches, run for real on a LocalCluster of one worker: one
    SIGKILLs itself (the OOM killer's signal) after printing, one SIGKILLs its worker each
    time it runs, one ends well. The campaign reports no score, exits 2, and names each
    failed batch and how it ended; the one that ended well is not among them."""
    monkeypatch.delenv(campaign.engine.SCHEDULER_ENV, raising=False)
    monkeypatch.setattr(campaign, "MUTATE", list(campaign.MUTATE))
    monkeypatch.setattr(campaign, "DO_NOT_MUTATE", list(campaign.DO_NOT_MUTATE))
    monkeypatch.setattr(campaign, "TESTS", list(campaign.TESTS))
    monkeypatch.setattr(campaign, "report", lambda *args, **kwargs: pytest.fail("a score for a campaign that lost batches"))
    stage = tmp_path / "stage"
    stage.mkdir()
    commands = {"signal.py": ["sh", "-c", "echo half way; kill -KILL $$"], "worker.py": ["sh", "-c", "kill -KILL $PPID"],
                "fine.py": ["true"]}
    batches = [{"files": [f"exactc/{name}"], "stage": str(stage / f"part-00{i}"), "command": command}
               for i, (name, command) in enumerate(commands.items())]
    (stage / campaign.LEDGER).write_text(json.dumps({"mutate": ["exactc/*.py"], "do_not_mutate": [], "walls": [],
                                                     "batches": batches}))
    assert campaign.main(["--cluster", "--resume", "--max-children", "1", "--stage", str(stage)]) == 2
    err = capsys.readouterr().err
    assert "mutmut: batch part-000 (exactc/signal.py) failed, killed by SIGKILL:\nhalf way\n" in err
    assert ("mutmut: batch part-001 (exactc/worker.py) failed, lost (it did not come back):\n"
            "its dask worker died under it on each of its 2 runs") in err
    assert "part-002" not in err and "mutmut: 2 of 3 batches failed (above): no score" in err


def test_a_real_edit_retry_whose_tests_die_is_no_kill(campaign, tmp_path):
    """A mutant retried as a real edit (confirm_one) whose tests are killed by a signal (the
    OOM killer) is what mutmut calls a test process that died, never killed; a test that
    fails kills it."""
    stage = tmp_path / "stage"
    (stage / "tests").mkdir(parents=True)
    (stage / "exactc").mkdir()
    (stage / "tests" / "test_m.py").write_text(
        "import os, signal\nfrom exactc import m\n\ndef test_m():\n"
        "    if m.X == 2:\n        os.kill(os.getpid(), signal.SIGKILL)\n    assert m.X == 1\n")
    verdicts = {source: campaign.confirm_one(stage, source, "exactc/m.py", ["tests/test_m.py"], {}, 60.0)
                for source in ("X = 1\n", "X = 2\n", "X = 3\n")}
    assert verdicts == {"X = 1\n": "survived", "X = 2\n": "segfault", "X = 3\n": "killed"}
