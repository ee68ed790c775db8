"""Mistakes in the harness itself: a check that can no longer fail the run.

The test helper tests/installed.py turns a missing piece (valgrind, clang, torch, the
packaged checkpoint, the probe baseline) into a failure under `make test`; if it skipped
instead, a broken install step would turn checks into skips and CI would stay green.
`installed` (tests/test_installed.py) must catch it.

A growth probe can only hold more easily when its ratios are dropped or its tolerance
widened: the planted faults of tests/test_probes.py (a cost one power faster at the
largest size, and one just past the rule) must fail under each rule, with every ratio
printed.
"""

from exactc.mutants.model import Mutant

INSTALLED = "tests/installed.py"
PROBES_BASELINE = "exactc/verify/probes/baseline.py"
PROBES_COUNTING = "exactc/verify/probes/counting.py"
PROBES_GROWTH = "exactc/verify/probes/growth.py"
PROBES_EXPORTED = "exactc/verify/probes/exported.py"
PROBES_EXPORTER = "exactc/verify/probes/exporter.py"
BUILD = "exactc/verify/build.py"
RUNNER = "exactc/mutants/runner.py"
MUTMUT = "tools/mutmut_campaign.py"

MUTANTS = [
    Mutant(
        "missing-piece-always-skips",
        "the helper that says what a test needs skips when a piece is missing, even under "
        "make test (EXACTC_REQUIRE_INSTALLED=1)",
        INSTALLED,
        "    if piece.step is not None and required():\n",
        "    if piece.step is not None and required() and False:\n",
        ("installed",),
        family="harness",
    ),
    Mutant(
        "missing-baseline-passes",
        "the regression check passes when this toolchain has no baseline: a new machine kind "
        "runs no regression check and says it held",
        PROBES_BASELINE,
        "        return Regression(False, lines, [])\n",
        "        return Regression(True, lines, [])\n",
        ("probes:baseline",),
        family="harness",
    ),
    Mutant(
        "coverage-build-keyed-without-its-folder",
        "an instrumented build's cache key leaves out make coverage's folder: a second run "
        "links the first run's objects, whose counts go to a folder that no longer exists",
        BUILD,
        '        h.update(b"\\0--coverage\\0" + str(gcov_dir(options)).encode())',
        '        h.update(b"\\0--coverage")',
        ("gcov-builds",),
        family="harness",
    ),
    Mutant(
        "coverage-instruments-counted-builds",
        "make coverage instruments the builds whose instructions the probes count: their "
        "counts rise against the baseline under make coverage",
        BUILD,
        "return Path(root) if root and plain and options.instrumentable else None",
        "return Path(root) if root and plain else None",
        ("gcov-builds",),
        family="harness",
    ),
    Mutant(
        "probes-kernels-instrumentable",
        "the probes' kernel driver is built as an ordinary build, instrumented under make coverage",
        PROBES_COUNTING,
        'BuildOptions(cc=CC, opt="-O2", warnings=False, instrumentable=False)',
        'BuildOptions(cc=CC, opt="-O2", warnings=False)',
        ("gcov-builds",),
        family="harness",
    ),
    Mutant(
        "coverage-object-compiled-by-every-worker",
        "make coverage's workers each compile an instrumented object they all need, at once: "
        "its notes and counts end with stamps that disagree",
        BUILD,
        "            fcntl.flock(lock, fcntl.LOCK_EX)\n",
        "            pass\n",
        ("gcov-builds",),
        family="harness",
    ),
    Mutant(
        "cpu-the-mistake-needs-ignored",
        "the mutant runner ignores the CPU a mistake needs to show (AVX-512, VNNI): on a CPU "
        "without it, such a mutant is NOT CAUGHT and make mutants fails, where it does not apply",
        "exactc/mutants/model.py",
        '        lacking = [need for need in self.cpu if not set(need.split("|")) & native_macros("gcc")]',
        '        lacking = []',
        ("mutants-cpu",),
        family="harness",
    ),
    Mutant(
        "mutants-report-keeps-only-the-mutmut-section",
        "make mutants-report keeps only the mutmut campaign's section of the page it rewrites: "
        "a section written after its own (a cluster run's notes) is lost",
        RUNNER,
        '    following = previous.find("\\n## ", own_last + 1)',
        '    following = previous.find("\\n" + MUTMUT_SECTION)',
        ("mutants-report",),
        family="harness",
    ),
    Mutant(
        "own-tests-batches-take-the-default-tests",
        "the mutmut campaign's --own-tests gives every file the default test set, not the "
        "tests that protect it: the file-by-file campaign's stats phase takes half an hour again",
        MUTMUT,
        "    return tests or list(TESTS)",
        "    return list(TESTS)",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "own-tests-batches-smallest-first",
        "the mutmut campaign's --own-tests starts the smallest files first: the largest (lower.py, "
        "graph.py) start last and one worker runs them alone while the others wait",
        MUTMUT,
        "    return [([path], own_tests(path)) for path in sorted(files, key=lambda p: (-size(p), p))]",
        "    return [([path], own_tests(path)) for path in sorted(files, key=lambda p: (size(p), p))]",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-resume-restages-stopped-batches",
        "the mutmut campaign's --resume starts its stopped batches afresh: every verdict a batch "
        "wrote before the stop is judged again (a whole-exporter campaign repeats its hours)",
        MUTMUT,
        '    commands = [b["command"] + (["--resume"] if resume else []) for b in todo]',
        '    commands = [b["command"] for b in todo]',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-resume-reruns-finished-batches",
        "the mutmut campaign's --resume runs its finished batches again (each one's clean "
        "tests, stats check and forced fail: minutes a batch for nothing)",
        MUTMUT,
        '    todo = [b for b in ledger["batches"] if not (Path(b["stage"]) / FINISHED).is_file()]',
        '    todo = list(ledger["batches"])',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-stopped-batch-marked-finished",
        "a mutmut batch stopped by ^C (mutmut ends well, mutants left unrun) is marked "
        "finished: --resume never runs its unrun mutants, and the score counts them as never made",
        MUTMUT,
        '    if any(status == "not checked" for status, _ in load_results(stage).values()):\n        return False\n',
        '    if any(status == "not checked" for status, _ in load_results(stage).values()):\n        pass\n',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-resume-reports-the-last-run-only",
        "a resumed mutmut campaign reports the wall time of its last run alone, not the sum of "
        "its runs': a campaign of three sessions says it took one",
        MUTMUT,
        "        return report(stage, args, argv, sum(walls))",
        "        return report(stage, args, argv, walls[-1])",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-report-forgets-the-campaign-s-runs",
        "the mutmut campaign's --report-only over a --cluster stage reports a wall time of 0 s, "
        "not the sum of the campaign's runs kept in its ledger",
        MUTMUT,
        '        if wall is None and ledger is not None:',
        '        if wall is None and False:',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-report-hides-the-batches-not-begun",
        "a stopped mutmut campaign's report counts the mutants of the batches that began and "
        "names no other: a partial score reads as the whole exporter's",
        MUTMUT,
        '    waiting = [b for b in ledger["batches"] if not Path(b["stage"]).is_dir()]',
        '    waiting = []',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-confirm-takes-the-first-batch-s-tests",
        "a mutmut campaign of batches confirmed afterwards (--confirm-only) retries every batch's "
        "import-time survivors against the first batch's tests, not the batch's own: libm_twin's "
        "table mutants judged by the lowering's tests",
        MUTMUT,
        '    tests = [t for t in staged_table(stage)["pytest_add_cli_args_test_selection"] if t not in CONFIRM_SKIP]',
        '    tests = [t for t in TESTS if t not in CONFIRM_SKIP]',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-empty-batch-fails-the-campaign",
        "a mutmut batch of a file without a function (a package's __init__.py: no mutant, and "
        "mutmut 3 stops with exit 1) is counted a failed batch: the whole-exporter campaign ends "
        "with `no score` though every mutant was run",
        MUTMUT,
        "    if proc.returncode != 0 and holds_no_mutant(stage):",
        "    if proc.returncode != 0 and False:",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-record-leaves-the-verdicts-out",
        "a mutmut campaign's record keeps its ledger but not mutmut's verdicts: restored on "
        "another machine, every mutant a sitting judged is judged again",
        MUTMUT,
        '        kept = [*mutants.rglob("*.py.meta"), mutants / "mutmut-stats.json", mutants / CONFIRMED]',
        '        kept = [mutants / "mutmut-stats.json", mutants / CONFIRMED]',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-record-leaves-the-retries-out",
        "a mutmut campaign's record leaves out the real-edit retries' verdicts (confirmed.json): "
        "restored, the survivors they killed (import-time code, new tests) count as survivors again",
        MUTMUT,
        '        kept = [*mutants.rglob("*.py.meta"), mutants / "mutmut-stats.json", mutants / CONFIRMED]',
        '        kept = [*mutants.rglob("*.py.meta"), mutants / "mutmut-stats.json"]',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-record-leaves-the-finished-marks-out",
        "a mutmut campaign's record forgets which batches finished: restored, --resume runs "
        "every finished batch again (its clean tests, stats and forced fail)",
        MUTMUT,
        '        members += [f.relative_to(stage) for f in (part / "pyproject.toml", part / FINISHED) if f.is_file()]',
        '        members += [f.relative_to(stage) for f in (part / "pyproject.toml",) if f.is_file()]',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-restore-keeps-the-recorded-paths",
        "a restored mutmut campaign's batches keep the stage paths of the machine that recorded "
        "it: --resume starts each stopped batch afresh there, and the restored verdicts go unused",
        MUTMUT,
        '        batch["stage"] = batch["stage"].replace(old, str(stage), 1)\n'
        '        batch["command"] = [sys.executable, *(a.replace(old, str(stage), 1) for a in batch["command"][1:])]\n',
        '        batch["command"] = [sys.executable, *batch["command"][1:]]\n',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-restore-takes-any-tree",
        "a mutmut campaign's record is restored over a checkout whose files differ from the "
        "campaign's: verdicts judged on one source are counted for another",
        MUTMUT,
        "        if changes:\n            shutil.rmtree(stage)\n",
        "        if False:\n            shutil.rmtree(stage)\n",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-restore-takes-any-mutmut",
        "a mutmut campaign's record is restored with another mutmut, whose names for mutants "
        "are another generator's: verdicts land on other mutants",
        MUTMUT,
        '        if index["mutmut"] != mutmut_version:',
        '        if False:',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-stage-leaves-docs-out",
        "the mutmut campaign's stage copies tools/ alone beside exactc/ and tests/: the tests that "
        "read docs/cli.md and docs/semantics.md fail the clean run, and every batch that selects "
        "them (the command line's files) ends with no score",
        MUTMUT,
        'ALSO_COPY = ["tools/", "docs/", "fuzz/", "bench/"]',
        'ALSO_COPY = ["tools/", "fuzz/", "bench/"]',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-retry-syncs-tests-alone",
        "a mutmut retry copies today's tests/ into the stage but not the folders they read: "
        "tests/printed/'s tool prints the stage's day, every retried mutant of a printer is "
        "compared with the wrong text, and the retry stops on the stage's own source",
        MUTMUT,
        '        for folder in ("tests", *(f.rstrip("/") for f in ALSO_COPY)):',
        '        for folder in ("tests",):',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-runs-slowest-tests-first",
        "under mutmut the tests run slowest first: a mutant the printed text kills in a tenth "
        "of a second waits behind builds of C (its verdict the same, the campaign hours longer)",
        "tests/conftest.py",
        "items.sort(key=lambda item: durations.get(item.nodeid, float(\"inf\")))",
        "items.sort(key=lambda item: durations.get(item.nodeid, float(\"inf\")), reverse=True)",
        ("mutmut-campaign",),
        family="harness",
    ),
    Mutant(
        "mutmut-retries-write-mutants-in-threads",
        "the mutmut campaign's retries write each mutant into its source in the worker thread "
        "that then runs its tests: applied_source changes the working directory, and two at once "
        "read each other's (a retry stopped on 'No such file: mutants/exactc/...')",
        MUTMUT,
        "        futures = {pool.submit(confirm_one, stage, applied_source(stage, n, results[n][1]), results[n][1], tests,",
        "        futures = {pool.submit(lambda n, *rest: confirm_one(stage, applied_source(stage, n, results[n][1]), *rest), "
        "n, results[n][1], tests,",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-calls-leave-their-directory",
        "the mutmut campaign runs mutmut's own functions in a stage (or --count's temporary "
        "folder) and stays there: the folder is removed under the process, and every later "
        "relative path fails",
        MUTMUT,
        "    finally:\n        os.chdir(cwd)\n",
        "    finally:\n        pass\n",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-retry-trusts-failing-tests",
        "the mutmut campaign's --retry does not first run the new tests on the stage's own source: "
        "a test that needs a fix made after the run fails on every mutant, and all are counted killed",
        MUTMUT,
        '        if confirm_one(stage, (stage / path).read_text(), path, tests, env, 900.0) != "survived":',
        "        if False:",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-batches-stage-the-live-tree",
        "every batch of a mutmut cluster campaign stages the checkout as it is when the batch "
        "starts, not the snapshot taken when the campaign began: a test file half edited an hour "
        "in fails a late batch's clean run, and the batches score different trees",
        MUTMUT,
        "    tool = snapshot / Path(__file__).resolve().relative_to(TREE)",
        "    tool = Path(__file__).resolve()",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-stage-shrinks-failing-examples",
        "the mutmut campaign's stage runs Hypothesis under the ci profile: every killed mutant's "
        "failing example is shrunk, tens of runs of the test for a verdict already known",
        MUTMUT,
        '    env["HYPOTHESIS_PROFILE"] = "mutmut"  # ci\'s examples, no shrinking (tests/conftest.py)',
        '    env["HYPOTHESIS_PROFILE"] = "ci"',
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "stage-tests-glob-crosses-folders",
        "the mutmut campaign matches its globs with fnmatch, whose `*` crosses a `/`: "
        "exactc/*.py takes the harness's own files, and a file gets the extra tests (OWN_EXTRAS) "
        "of an entry meant for another folder",
        MUTMUT,
        "    return len(parts) == len(pattern) and all(map(fnmatch.fnmatchcase, parts, pattern))",
        "    return fnmatch.fnmatch(path, glob)",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "probe-increment-ratios-first-only",
        "the exporter's probes keep the first of their increments ratios: a pass gone quadratic "
        "at the largest size is never judged, and the report prints one ratio fewer",
        PROBES_GROWTH,
        "    return [d[k + 1] / d[k] for k in range(len(d) - 1)]\n",
        "    return [d[k + 1] / d[k] for k in range(len(d) - 1)][:1]\n",
        ("probes:nodes",),
        family="harness",
    ),
    Mutant(
        "probe-count-ratios-first-only",
        "the probes that take c(2s)/c(s) judge the first doubling only (tokens, attention, "
        "decode-rest, the structured text)",
        PROBES_GROWTH,
        "    return [counts[k + 1] / counts[k] for k in range(len(counts) - 1)]\n",
        "    return [counts[k + 1] / counts[k] for k in range(len(counts) - 1)][:1]\n",
        ("probes:growth",),
        family="harness",
    ),
    Mutant(
        "probe-fitted-ratios-first-only",
        "the probes with a fitted fixed part judge the first doubling only (layers, "
        "decode-attention, generate-rest, the straight-line text, the quantized linear)",
        PROBES_GROWTH,
        "    return float(a), [(counts[k + 1] - a) / (counts[k] - a) for k in range(len(counts) - 1)]\n",
        "    return float(a), [(counts[k + 1] - a) / (counts[k] - a) for k in range(len(counts) - 1)][:1]\n",
        ("probes:growth",),
        family="harness",
    ),
    Mutant(
        "probe-layers-tolerance-tenfold",
        "the layers probe holds its ratio to 2.00 within 0.5 instead of 0.05: a layer whose "
        "cost grows by a quarter at the largest size passes",
        PROBES_EXPORTED,
        'LAYERS = (Series("program/layers", "layers", Rule("fitted", 2.0, 0.05),',
        'LAYERS = (Series("program/layers", "layers", Rule("fitted", 2.0, 0.5),',
        ("probes:growth",),
        family="harness",
    ),
    Mutant(
        "probe-exporter-bound-tenfold",
        "the exporter's probe against the layers allows increments ratios up to 5.0 instead of "
        "2.3: an exporter pass gone quadratic passes",
        PROBES_EXPORTER,
        '        "layers",\n        Rule("increments", 2.0, 0.3, at_most=True),\n',
        '        "layers",\n        Rule("increments", 2.0, 3.0, at_most=True),\n',
        ("probes:growth",),
        family="harness",
    ),
    Mutant(
        "probe-decode-rest-tolerance-tenfold",
        "the rest of a decode step may grow 10 % a doubling of the position instead of 1 %",
        PROBES_EXPORTED,
        'Series("program/decode-rest", "position", Rule("counts", 1.0, 0.01),',
        'Series("program/decode-rest", "position", Rule("counts", 1.0, 0.1),',
        ("probes:decode",),
        family="harness",
    ),
    Mutant(
        "mutmut-batch-killed-counted-finished",
        "the mutmut campaign fails a batch only on a positive exit code: a batch killed by a "
        "signal (the OOM killer's SIGKILL, negative) counts as finished, and the campaign reports "
        "a score as if it had run its mutants",
        MUTMUT,
        "    failed = [(b, code, tail) for b, (code, tail) in zip(todo, outcomes) if code != 0]",
        "    failed = [(b, code, tail) for b, (code, tail) in zip(todo, outcomes) if code > 0]",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutmut-retry-death-counted-killed",
        "a survivor retried as a real edit whose tests die by SIGKILL (the OOM killer) is "
        "counted killed: only a segfault is taken for a death",
        MUTMUT,
        "    if proc.returncode < 0:  # the tests died (the OOM killer's SIGKILL): no verdict on the mutant",
        "    if proc.returncode == -11:  # the tests died (the OOM killer's SIGKILL): no verdict on the mutant",
        ("mutmut-campaign",),
        family="harness",
        requires=(MUTMUT,),
    ),
    Mutant(
        "mutant-check-killed-by-a-signal-passes",
        "the mutant runner passes a check whose pytest died by a signal (exit code <= 0): the "
        "baseline holds with a check the OOM killer stopped, and a mutant whose check died is "
        "NOT CAUGHT, not crashed",
        RUNNER,
        '    if proc.returncode == 0:\n        return "pass", ""',
        '    if proc.returncode <= 0:\n        return "pass", ""',
        ("mutants-deaths",),
        family="harness",
    ),
    Mutant(
        "mutant-check-past-its-time-catches",
        "the mutant runner counts a check that ran past its time as one that failed: a mutant "
        "that only makes a test slow (or hang) is caught",
        RUNNER,
        '    failed = [n for n, v in verdicts.items() if v == "fail"]',
        '    failed = [n for n, v in verdicts.items() if v in ("fail", "timeout")]',
        ("mutants-deaths",),
        family="harness",
    ),
    Mutant(
        "mutant-batch-lost-ends-the-run",
        "the mutant runner gives the engine no `lost`: a mutant whose dask worker dies under it "
        "ends the whole run in a traceback, with no report of the mutants that ran",
        RUNNER,
        "                          lost=lost_mutant)",
        "                          )",
        ("mutants-deaths",),
        family="harness",
    ),
    Mutant(
        "mutant-detail-takes-log-lines",
        "the mutant runner takes every line that begins with FAILED or ERROR for pytest's "
        "summary: a check whose tests log at ERROR (dask, on a worker's death) names the log "
        "lines, not the test that failed",
        RUNNER,
        '    summary = output.rpartition("short test summary info")[2]\n',
        "    summary = output\n",
        ("mutants-detail",),
        family="harness",
    ),
]
