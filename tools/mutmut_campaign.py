"""The mutmut campaign: mutmut 3 over exactc's Python stages, in a staging copy of the tree.

    python tools/mutmut_campaign.py [--max-children 2] [--stage DIR] [--markdown docs/mutants.md]
    python tools/mutmut_campaign.py --rerun 'exactc.exporter.types.*'    (reuse the stage)
    python tools/mutmut_campaign.py --retry 'exactc.exporter.primitives.*' \
        --tests tests/test_primitives.py    (a new test against the stage's survivors)
    python tools/mutmut_campaign.py --report-only --markdown docs/mutants.md
    python tools/mutmut_campaign.py --cluster --own-tests --mutate exporter/dims.py ...
        (each file with the tests that protect it, own_tests())
    python tools/mutmut_campaign.py --whole --count    (each file's mutants, not run)

The hand-written catalog (mutants/, `make mutants`) breaks exactc in named ways a person
chose; mutmut breaks it in every small way a machine can think of (an operator swapped, a
constant nudged, an argument dropped), and asks whether some test notices. A survivor is
either a hole in the tests or an equivalent mutant (one that changes no observable bit);
docs/mutants.md keeps a one-line verdict for each.

Why a staging copy, and how the mutated `exactc` is what the tests import:

- mutmut 3 writes its work directory `mutants/` into the directory it runs in. It runs in
  STAGE, a copy of the checkout (exactc/, tests/, tools/, pyproject.toml plus a
  [tool.mutmut] table), never in the repository itself, so a run leaves the checkout as
  it was.
- With `source_paths = ["exactc"]` mutmut copies STAGE/exactc to STAGE/mutants/exactc and
  rewrites the files matched by `only_mutate` there (every function becomes a trampoline
  that dispatches on $MUTANT_UNDER_TEST); it copies tests/ and pyproject.toml beside it,
  and the folders tests read (tools/, docs/, fuzz/, bench/: `also_copy`). Its runner
  runs pytest in-process with cwd STAGE/mutants and
  puts STAGE/mutants first on sys.path, so `import exactc` finds STAGE/mutants/exactc
  before any installed exactc. A test's child process (the printer's determinism test
  starts a fresh `python -c`) runs in cwd STAGE/mutants, so it finds the same copy. (No
  PYTHONPATH: see stage_env.)
- Tests that find the checkout from their own __file__ (tests/test_libm.py's ROOT) find
  STAGE/mutants, the mutated copy.
- mutmut's own phases prove the wiring: "clean tests" must pass with no mutant active, and
  "forced fail" (every trampoline raises) must fail them; mutmut stops if either does not
  hold, and so does this script. It also checks, once mutmut has built its copy, that
  `import exactc` in the stage's environment loads STAGE/mutants/exactc.
- mutmut switches a mutant on when its function is called, in workers forked from a
  process that has imported exactc already; code that only runs at import cannot be
  switched, so its survivors are retried as real source edits (confirm_survivors), and a
  new test is shown to kill a survivor the same way (--retry).

What is mutated: the files matched by MUTATE (globs, relative to the stage), minus
DO_NOT_MUTATE. mutmut 3 mutates code inside functions and methods only; module-level
tables (libm_twin's coefficients, for instance) are left alone by mutmut itself, and are
the hand-written catalog's business. Nothing else is excluded.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from exactc.mutants.runner import COPY_IGNORED
from exactc.verify import engine
from exactc.runtime.toolchain import cache_dir

TREE = Path(__file__).resolve().parent.parent
SECTION = "## The mutmut campaign"  # docs/mutants.md keeps everything from this line on

# The Python stages: the exporter's types, primitives, reference backend, kernel IR and
# printers, and the runtime's numpy twin of the C libm. Files added to these folders are
# taken as they come. All of them make about 10,000 mutants, far beyond an hour on two
# cores (a kernel or printer mutant recompiles C for every test that reaches it), so
# `make mutmut` mutates the hour-sized SUBSET: the stages that define the bits in Python
# (site types, the primitive catalogue, the numpy reference, the libm twin). `--full`
# takes every stage; `--mutate` any globs.
SUBSET = [
    "exactc/exporter/types.py",
    "exactc/exporter/primitives.py",
    "exactc/exporter/reference/*.py",
    "exactc/runtime/libm_twin.py",
]
FULL = SUBSET + [
    "exactc/exporter/kernels/*.py",
    "exactc/exporter/printer/*.py",
]
# `--whole`: the whole product, everything but the harness itself (verify/, mutants/ and
# the Hypothesis strategies/, which are what judges a mutant), file by file with the
# tests that protect each (`--cluster --own-tests`). Globs in pathlib's sense (a `*`
# stays in its folder); HARNESS keeps them exact where fnmatch's `*` would cross a `/`.
WHOLE = [
    "exactc/*.py",
    "exactc/exporter/*.py",
    "exactc/exporter/*/*.py",
    "exactc/runtime/*.py",
]
HARNESS = ["exactc/verify/*", "exactc/mutants/*", "exactc/strategies/*"]
MUTATE = list(SUBSET)
DO_NOT_MUTATE: list[str] = []

# The tests mutmut may pick from; it runs, for each mutant, only those that called the
# mutated function while it collected its stats.
# The printed C text (tools/printed_text.py): for the files whose output a user reads, the
# check that sees a change first (tenths of a second, where the bits' tests build C).
PRINTED = "tests/test_printed_text.py"
TESTS = [
    "tests/test_reference.py",
    "tests/test_kernels_print.py",
    "tests/test_primitives.py",
    "tests/test_libm.py",
    # the rest of the stages' own files (own_tests()): what SUBSET's modules do at their edges
    "tests/test_types.py",
    "tests/test_sampling.py",
    "tests/test_generation.py",
]
# The tests that protect each file, for `--cluster --own-tests` (own_tests()), so that
# mutmut's stats phase and each mutant's run take the tests that reach it fast, not the
# whole set (the exporter file by file, docs/mutants.md: dims.py's 261 mutants in 33 s with
# its own tests, where the whole set's stats phase took half an hour). By the layout's
# convention the tests of exactc/a/b.py are tests/test_b.py, a package's __init__.py's are
# tests/test_<package>.py, and a file in a package takes its package's file too
# (checkpoints/hf.py: test_hf.py, and test_checkpoints.py, which reads every format
# through checkpoints.load). OWN_EXTRAS adds, per glob (every matching entry), what the
# convention cannot name: a test file named otherwise (runtime/libm_twin.py's test_libm.py),
# the check that sees a change first (PRINTED), and the tests that reach a file through
# another door (whole programs, the in-process refusals). NOT_OWN drops a test file that
# only shares the module's name. A file with no test at all takes TESTS.
# Every bad file's refusal (checkpoints, plans), in process: the rest of test_bad_inputs.py
# runs exactc as a process, which mutmut's stats cannot see.
API_REFUSALS = "tests/test_bad_inputs.py::test_refused_on_one_line_through_the_api"
# What the hosts and the arena answer to, after their printed text: whole programs against
# the reference (both hosts, every build; a program each of GPT, BERT and Llama), the checking
# build's arena and release checks, and the structured host's shape. Not all of
# test_programs.py: a survivor runs every selected test, and its 22 programs are minutes.
HOST_PROGRAMS = [f"tests/test_programs.py::{t}" for t in (
    "test_program_matches_reference[gpt-forward-f32]",
    "test_program_matches_reference[bert-embed-bf16]",
    "test_program_matches_reference[llama-decode-f32]",
    "test_c_at_a_drawn_length_equals_the_reference_at_that_length[llama-next_token-f32]",
    "test_an_arena_computed_too_small_is_caught_by_the_checking_build",
    "test_a_buffer_released_one_launch_early_fails_the_checking_build",
    "test_structured_host_prints_each_form_once_and_loops_over_layers",
    "test_fold_iteration_apart_runs_outside_the_loop",
    "test_one_process_runs_several_input_output_pairs",
    "test_a_plan_is_passed_through_to_the_kernels",
)]
QUANTIZED_FILES = [f"tests/test_quant_programs.py::{t}" for t in (
    "test_a_gguf_file_holds_the_blocks_exactc_makes_of_its_f32_twin",
    "test_a_gguf_tensor_of_another_type_is_refused_by_name",
    "test_a_llama2c_version_2_file_whose_groups_straddle_rows_is_refused",
)]
PLAN_PROGRAMS = ["tests/test_programs.py::test_a_plan_is_passed_through_to_the_kernels",
                 "tests/test_programs.py::test_a_plan_entry_that_matches_no_nest_is_refused"]
OWN_EXTRAS = [
    ("exactc/exporter/printer/ctext.py", [PRINTED, "tests/test_kernels_print.py"]),
    ("exactc/exporter/kernels/layouts.py", [PRINTED]),
    ("exactc/exporter/kernels/plans.py", [PRINTED, "tests/test_layouts.py", "tests/test_cli_docs.py",
                                          API_REFUSALS, *PLAN_PROGRAMS]),
    # a plan file's JSON, and the programs' plan files
    ("exactc/exporter/jsonfile.py", ["tests/test_plans.py", "tests/test_programs.py"]),
    ("exactc/exporter/types.py", ["tests/test_reference.py", "tests/test_primitives.py"]),
    ("exactc/exporter/primitives.py", ["tests/test_reference.py"]),
    ("exactc/exporter/reference/generation.py", ["tests/test_keys.py"]),
    ("exactc/exporter/reference/*.py", ["tests/test_primitives.py"]),
    ("exactc/runtime/libm_twin.py", ["tests/test_libm.py"]),
    ("exactc/runtime/keys_twin.py", ["tests/test_keys.py"]),
    ("exactc/runtime/__init__.py", ["tests/test_libm.py"]),
    # every bad file's refusal, in process (the rest of the file runs exactc); the quantized
    # files' blocks as read (GGUF's Q8_0 and Q4_0, llama2.c's version 2): the rest of the
    # file builds and runs their programs
    ("exactc/exporter/checkpoints/*.py", [API_REFUSALS, *QUANTIZED_FILES]),
    ("exactc/exporter/models/cache.py", ["tests/test_generation.py", "tests/test_generate_program.py"]),
    # the models' meaning: transformers' own (test_oracle.py)
    ("exactc/exporter/models/*.py", [PRINTED, "tests/test_generation.py", "tests/test_oracle.py"]),
    ("exactc/exporter/graph.py", [PRINTED, "tests/test_generation.py", "tests/test_oracle.py",
                                  # the builder's refusals and forms (the rest of the file builds C)
                                  "tests/test_programs.py::test_builder_refuses_bad_shapes_by_name",
                                  "tests/test_programs.py::test_builder_refuses_a_fold_over_the_wrong_layer_count",
                                  "tests/test_programs.py::test_builder_refuses_unused_parameters",
                                  "tests/test_programs.py::test_a_call_is_traced_once_per_form"]),
    ("exactc/exporter/export.py", ["tests/test_generate_program.py", "tests/test_prepack.py"]),
    # the atomic writer and the directory's text files: the export's tests and the doors'
    # (output paths, the Makefile's refusals)
    ("exactc/exporter/files.py", ["tests/test_export.py", "tests/test_bad_inputs.py"]),
    ("exactc/exporter/templates.py", ["tests/test_export.py", "tests/test_bad_inputs.py"]),
    ("exactc/exporter/launches.py", [PRINTED, "tests/test_kernel_table.py"]),
    ("exactc/exporter/kernels/tuned.py", ["tests/test_tune.py"]),
    # the compiler's facts and the cache folder: the foreign targets, the tuner, the cache
    ("exactc/runtime/toolchain.py", ["tests/test_compilers.py", "tests/test_tune.py", "tests/test_cache.py"]),
    ("exactc/exporter/__init__.py", ["tests/test_export.py"]),  # no code
    ("exactc/exporter/frames.py", [PRINTED, *HOST_PROGRAMS]),
    ("exactc/exporter/kernels/autoplan.py", [PRINTED, "tests/test_prepack.py"]),
    # The IR and its lowering: every change that reaches a kernel's C shows in the printed
    # text, first; the property of test_layouts.py (seconds of C a mutant) is the planners'.
    ("exactc/exporter/kernels/*.py", [PRINTED, "tests/test_kernels_print.py"]),
    ("exactc/exporter/printer/prepack.py", ["tests/test_host_runtime.py"]),
    # the hosts: their printed text, then a program of each architecture against the reference
    ("exactc/exporter/printer/host.py", HOST_PROGRAMS),
    ("exactc/exporter/printer/structured.py", HOST_PROGRAMS),
    ("exactc/exporter/printer/straight.py", HOST_PROGRAMS),
    # the planned nests and their integer sums: the layouts' property too
    ("exactc/exporter/printer/planned.py", ["tests/test_layouts.py"]),
    ("exactc/exporter/printer/sums.py", ["tests/test_layouts.py"]),
    # the kernel table applies a program's plan: the plan's two programs
    ("exactc/exporter/printer/kernel_table.py", PLAN_PROGRAMS),
    ("exactc/exporter/printer/*.py", [PRINTED, "tests/test_kernels_print.py"]),
    # the command line: its --help (docs/cli.md), then what its commands do in process
    ("exactc/embed.py", ["tests/test_cli_docs.py", "tests/test_checkpoints.py", "tests/test_minilm_programs.py"]),
    ("exactc/generate.py", ["tests/test_cli_docs.py", "tests/test_generation.py", "tests/test_tokenizer_bin.py",
                            "tests/test_generate_program.py"]),
    ("exactc/cli.py", ["tests/test_cli_docs.py", "tests/test_bad_inputs.py", "tests/test_checkpoints.py"]),
    ("exactc/commands.py", ["tests/test_cli_docs.py", "tests/test_bad_inputs.py", "tests/test_programs.py"]),
    ("exactc/*.py", ["tests/test_bad_inputs.py"]),
]
# models/cache.py's tests are test_models.py's; tests/test_cache.py is programs.py's cache.
NOT_OWN = {"exactc/exporter/models/cache.py": ["tests/test_cache.py"]}
TIMEOUT_CONSTANT = 60.0
TIMEOUT_MULTIPLIER = 4.0
PYTEST_ARGS = ["-m", "not slow", "-p", "no:cacheprovider"]
# What mutmut copies into STAGE/mutants beside exactc/ and tests/: every folder a test reads.
ALSO_COPY = ["tools/", "docs/", "fuzz/", "bench/"]

# What the copy leaves out: environments, caches and history, never source (the mutant
# runner's patterns, plus a stray stage).
IGNORED = shutil.ignore_patterns(*COPY_IGNORED, ".mutmut-stage")
# Each of these is listed with its diff; the rest ("no tests": no selected test reaches
# the function; "not checked": the run stopped first) are counted per function.
LISTED = ("survived", "timeout", "suspicious", "segfault", "killed (new test)")
KILLED = ("killed", "killed (new test)")
UNRUN = ("not checked", "no tests")  # mutants mutmut ran no test against; a retry runs them as real edits
STATUSES = ["killed", "killed (new test)", "survived", "timeout", "suspicious", "no tests", "skipped",
            "segfault", "caught by type check", "not checked", "check was interrupted by user"]


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def mutmut_table(max_children: int, tests: list[str]) -> str:
    return "\n".join([
        "",
        "# Added by tools/mutmut_campaign.py in the staging copy only.",
        "[tool.mutmut]",
        'source_paths = ["exactc"]',
        # the folders beside exactc/ and tests/ that tests read (docs/cli.md, fuzz/'s corpora)
        f"also_copy = {toml_list(ALSO_COPY)}",
        f"only_mutate = {toml_list(MUTATE)}",
        f"do_not_mutate = {toml_list(DO_NOT_MUTATE)}",
        f"pytest_add_cli_args_test_selection = {toml_list(tests)}",
        f"pytest_add_cli_args = {toml_list(PYTEST_ARGS)}",
        # A mutant's time limit is (its tests' time in the stats run + constant) * multiplier.
        # The stats run finds every kernel compiled in the cache; a mutant that changes the
        # printed C compiles afresh, hence the generous constant and the modest multiplier.
        f"timeout_constant = {TIMEOUT_CONSTANT}",
        f"timeout_multiplier = {TIMEOUT_MULTIPLIER}",
        # The stage is not a git checkout; compare nothing with a previous commit.
        "use_git_change_detection = false",
        "",
    ])


def stage_env(stage: Path) -> dict[str, str]:
    # No PYTHONPATH entry for STAGE/mutants: it does not exist yet when mutmut starts, and
    # a sys.path entry that is missing at the first import is cached as "no finder" for the
    # life of the process, which would let the editable install's exactc win.
    env = dict(os.environ)
    env["HYPOTHESIS_PROFILE"] = "mutmut"  # ci's examples, no shrinking (tests/conftest.py)
    env.pop("EXACTC_STATS_DIR", None)
    env.pop("MUTANT_UNDER_TEST", None)
    # Compiled libraries are cached by content hash, so sharing the tree's cache is safe.
    env.setdefault("EXACTC_CACHE", str(cache_dir()))
    return env


def make_stage(stage: Path, max_children: int, tests: list[str]) -> None:
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    shutil.copytree(TREE, stage, ignore=IGNORED, symlinks=True, dirs_exist_ok=True)
    text = (TREE / "pyproject.toml").read_text()
    (stage / "pyproject.toml").write_text(text + mutmut_table(max_children, tests))


def sync_tests(stage: Path) -> None:
    """Copy the checkout's tests, and the folders they read (ALSO_COPY: the printed text's
    tool and files, docs/cli.md), over the stage's (both the source copy and mutmut's)."""
    for root in (stage, stage / "mutants"):
        for folder in ("tests", *(f.rstrip("/") for f in ALSO_COPY)):
            shutil.copytree(TREE / folder, root / folder, ignore=IGNORED, dirs_exist_ok=True)


def mutmut_exe() -> str:
    exe = Path(sys.executable).parent / "mutmut"
    if not exe.exists():
        sys.exit("mutmut is not installed in this environment: pip install 'mutmut>=3,<4' "
                 "(or pip install -e '.[test]')")
    return str(exe)


def check_import(stage: Path, env: dict[str, str]) -> str:
    """'' when `import exactc` in the stage's environment loads the mutated copy."""
    code = "import exactc, sys; print(exactc.__file__)"
    # As a test's child process sees it: cwd STAGE/mutants (mutmut runs pytest there).
    out = subprocess.run([sys.executable, "-c", code], cwd=stage / "mutants", env=env,
                         capture_output=True, text=True)
    printed = out.stdout.strip()
    if not printed.startswith(str(stage / "mutants" / "exactc")):
        return f"the stage imports the wrong exactc: {printed or out.stderr.strip()}"
    return ""


# ---- reading mutmut's results ---------------------------------------------------------

def load_results(stage: Path) -> dict[str, tuple[str, str]]:
    """mutant name -> (status, source path relative to the stage)."""
    from mutmut.stats import status_by_exit_code

    results = {}
    for meta in sorted((stage / "mutants").rglob("*.py.meta")):
        path = str(meta.relative_to(stage / "mutants"))[: -len(".meta")]
        if not any(fnmatch.fnmatch(path, g) for g in MUTATE):
            continue
        data = json.loads(meta.read_text())
        for name, code in data["exit_code_by_key"].items():
            results[name] = (status_by_exit_code[code], path)
    return results


@contextlib.contextmanager
def mutmut_in(folder: Path):
    """mutmut's own functions read its config and their paths from the working directory:
    run them in `folder` (a stage), the config read afresh, and come back. Not from two
    threads at once."""
    from mutmut.configuration import reset_config

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        reset_config()
        yield
    finally:
        os.chdir(cwd)


def mutant_diff(stage: Path, name: str, path: str) -> list[str]:
    """The changed lines of a mutant, '-' then '+', without the diff's headers."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    with mutmut_in(stage):
        diff = get_diff_for_mutant(name, path=path)
    return [line for line in diff.splitlines()
            if line[:1] in "-+" and not line.startswith(("---", "+++"))]


def function_of(name: str) -> str:
    """exactc.exporter.types.x_to_f32__mutmut_3 -> to_f32; xǁClassǁmethod -> Class.method."""
    mangled = name.rpartition(".")[2].partition("__mutmut_")[0]
    if mangled.startswith("x_"):
        return mangled[2:]
    return mangled.removeprefix("xǁ").replace("ǁ", ".")


def unlisted(results: dict[str, tuple[str, str]]) -> list[tuple[str, list[tuple[str, int]]]]:
    """(status, [(file:function, count)]) for the statuses that are counted, not listed."""
    by_status: dict[str, Counter] = {}
    for name, (status, path) in results.items():
        if status not in LISTED and status not in KILLED:
            where = f"{path.removeprefix('exactc/')}:{function_of(name)}"
            by_status.setdefault(status, Counter())[where] += 1
    return [(s, sorted(c.items())) for s, c in sorted(by_status.items())]


def compact(diff: list[str]) -> str:
    return " / ".join(f"{line[0]}`{line[1:].strip()}`" for line in diff)


def summary(results: dict[str, tuple[str, str]]) -> tuple[Counter, int, int]:
    counts = Counter(status for status, _ in results.values())
    return counts, sum(counts[s] for s in KILLED), sum(counts.values())


def score_line(counts: Counter, killed: int, total: int) -> str:
    pct = 100.0 * killed / total if total else 0.0
    parts = ", ".join(f"{s} {counts[s]}" for s in STATUSES if counts[s] or s in STATUSES[:7])
    return f"mutmut: {killed}/{total} killed ({pct:.1f} %); {parts}"


# ---- confirming survivors by real source edits -----------------------------------------
#
# mutmut switches a mutant on at call time, inside a process that imported exactc before
# it forked. Code that runs only at import (the primitive catalogue built by _p/_binary,
# libm_twin's constant tables built by _hex_table) has already run by then, so its mutants
# survive whatever the tests do (and its stats name whichever test ran first). Each such
# survivor is therefore tried once more the way the hand-written catalog tries a mutant:
# the mutated function written into a fresh copy of the source, the selection (less
# CONFIRM_SKIP) run in a fresh interpreter. A survivor that fails there is counted killed,
# and the report says how many were killed only this way.


CONFIRMED = "confirmed.json"  # in a stage's mutants/: the real-edit retries' verdicts


def applied_source(stage: Path, name: str, path: str) -> str:
    """The stage's original source of `path` with mutant `name` written in."""
    import libcst as cst
    from mutmut.mutation.diff_apply import read_functions_from_index, read_mutant_function, \
        read_mutants_module
    from mutmut.utils.format_utils import orig_function_and_class_names_from_key

    function_name, class_name = orig_function_and_class_names_from_key(name)
    with mutmut_in(stage):
        pair = read_functions_from_index(name, path)
        mutant = pair[1] if pair else read_mutant_function(read_mutants_module(path), name)
    module = cst.parse_module((stage / path).read_text())
    body = module.body
    if class_name:
        cls = next(c for c in module.body if isinstance(c, cst.ClassDef) and c.name.value == class_name)
        body = cls.body.body
    original = next(f for f in body if isinstance(f, cst.FunctionDef) and f.name.value == function_name)
    # keep the original's decorators (mutmut's copy of a method carries none of them)
    mutant = mutant.with_changes(decorators=original.decorators, leading_lines=original.leading_lines)
    return module.deep_replace(original, mutant).code


def confirm_one(stage: Path, source: str, path: str, tests: list[str], env: dict[str, str],
                timeout: float) -> str:
    """'killed', 'survived' or 'timeout' with `source` (a mutant written in: applied_source,
    called in the caller's thread, since mutmut_in changes the working directory) as `path`
    in a fresh copy of the stage; for tests killed by a signal, mutmut's word for it
    ('segfault', 'suspicious')."""
    with tempfile.TemporaryDirectory(prefix="exactc-mutmut-confirm-") as tmp:
        root = Path(tmp) / "tree"
        shutil.copytree(stage, root, ignore=stage_copy_ignored(stage), symlinks=True)
        (root / path).write_text(source)
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               "-p", "no:randomly", *PYTEST_ARGS, *tests]
        env = {**env, "PYTHONPATH": str(root)}
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout"
    if proc.returncode < 0:  # the tests died (the OOM killer's SIGKILL): no verdict on the mutant
        from mutmut.stats import status_by_exit_code

        return status_by_exit_code[proc.returncode]
    return "survived" if proc.returncode == 0 else "killed"


# The files a survivor of import-time code is retried against: the selection without
# test_primitives.py, whose C builds take most of the selection's time (documented).
CONFIRM_SKIP = ("tests/test_primitives.py",)


def stage_copy_ignored(stage: Path):
    """What a copy of the stage leaves out: what a copy of the checkout leaves out, and
    mutmut's work directory STAGE/mutants (not the package's own exactc/mutants)."""
    def ignored(folder: str, names: list[str]) -> set[str]:
        skipped = set(IGNORED(folder, names))
        if Path(folder) == stage:
            skipped.add("mutants")
        return skipped
    return ignored

_IMPORT_PROBE = """
import importlib, json, sys
from mutmut.state import state
for module in sys.argv[1:]:
    importlib.import_module(module)
print(json.dumps(sorted(state()._stats)))
"""


def staged_table(stage: Path) -> dict:
    """A stage's own mutmut table (what it mutates, the tests it selects): in a campaign
    of batches each has its own, which the campaign-wide MUTATE and TESTS are not."""
    import tomllib

    return tomllib.loads((stage / "pyproject.toml").read_text())["tool"]["mutmut"]


def import_time_functions(stage: Path, env: dict[str, str]) -> set[str]:
    """The mutated functions that run while exactc's modules are imported."""
    modules = []
    for glob in staged_table(stage)["only_mutate"]:
        for path in sorted((stage / "mutants").glob(glob)):
            rel = path.relative_to(stage / "mutants").with_suffix("")
            modules.append(".".join(rel.parts).removesuffix(".__init__"))
    probe_env = {**env, "MUTANT_UNDER_TEST": "stats"}
    out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, *modules], cwd=stage / "mutants",
                         env=probe_env, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def confirm_survivors(stage: Path, results: dict[str, tuple[str, str]], jobs: int,
                      env: dict[str, str]) -> dict[str, str]:
    """Retry every survivor as a real source edit; returns the new status of each."""
    import concurrent.futures

    stats = json.loads((stage / "mutants" / "mutmut-stats.json").read_text())
    duration = stats["duration_by_test"]
    at_import = import_time_functions(stage, env)
    tests = [t for t in staged_table(stage)["pytest_add_cli_args_test_selection"] if t not in CONFIRM_SKIP]
    limit = (sum(d for t, d in duration.items() if t.split("::")[0] in tests)
             + TIMEOUT_CONSTANT) * TIMEOUT_MULTIPLIER
    record = stage / "mutants" / CONFIRMED
    done = json.loads(record.read_text()) if record.exists() else {}
    todo = sorted(n for n, (s, _) in results.items() if s == "survived" and n not in done
                  and n.partition("__mutmut_")[0] in at_import)
    print(f"mutmut: retrying {len(todo)} survivors of import-time code as real source edits "
          f"against {' '.join(tests)} ...", file=sys.stderr, flush=True)
    outcome: dict[str, str] = {}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {}
        for name in todo:
            path = results[name][1]
            try:
                source = applied_source(stage, name, path)
            except Exception as error:  # a mutant that cannot be written back stays a survivor
                print(f"  {name}: could not confirm: {error!r}", file=sys.stderr)
                outcome[name] = "survived"
                continue
            futures[pool.submit(confirm_one, stage, source, path, tests, env, limit)] = name
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            name = futures[future]
            try:
                outcome[name] = future.result()
            except Exception as error:  # a mutant that cannot be written back stays a survivor
                print(f"  {name}: could not confirm: {error!r}", file=sys.stderr)
                outcome[name] = "survived"
            print(f"  [{done}/{len(todo)}] {name}: {outcome[name]}", file=sys.stderr, flush=True)
    merged = json.loads(record.read_text()) if record.exists() else {}
    record.write_text(json.dumps({**merged, **outcome}, indent=1))
    return outcome


def retry_named(stage: Path, patterns: list[str], tests: list[str], jobs: int) -> int:
    """Retry the survivors matching `patterns` as real source edits against `tests` (say,
    a new test written to kill them), and fold the outcomes into the confirmation record.
    The mutants a stopped run left unchecked (or whose functions no selected test reached)
    are retried the same way: a real edit is the mutant itself, so a stopped run is
    finished against the tests that protect those functions (a help text's mutants against
    tests/test_cli_docs.py, say) without running the rest of its selection again. The
    record is written after each mutant, so a retry stopped half way keeps what it found."""
    import concurrent.futures

    sync_tests(stage)
    env = stage_env(stage)
    results = load_results(stage)
    record = stage / "mutants" / CONFIRMED
    outcome = json.loads(record.read_text()) if record.exists() else {}
    todo = sorted(n for n, (s, _) in results.items() if s in (*LISTED, *UNRUN)
                  and outcome.get(n, "survived") == "survived"
                  and any(fnmatch.fnmatch(n, p) for p in patterns))
    if todo:
        # The tests must pass on the stage's own source first: a test that needs a fix made
        # after the stage was taken fails on every mutant, and would be counted as killing it.
        path = results[todo[0]][1]
        if confirm_one(stage, (stage / path).read_text(), path, tests, env, 900.0) != "survived":
            sys.exit(f"mutmut: {' '.join(tests)} fail on the stage's own source ({stage}, no mutant): they "
                     "cannot judge its mutants (a fix made since the run? rerun the campaign)")
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(confirm_one, stage, applied_source(stage, n, results[n][1]), results[n][1], tests,
                               env, 900.0): n for n in todo}
        for future in concurrent.futures.as_completed(futures):
            name = futures[future]
            verdict = future.result()
            outcome[name] = "killed (new test)" if verdict == "killed" else verdict
            print(f"  {name}: {outcome[name]}", file=sys.stderr, flush=True)
            record.write_text(json.dumps(outcome, indent=1))
    return sum(outcome[n] == "killed (new test)" for n in todo)


def load_confirmed(stage: Path, results: dict[str, tuple[str, str]]) -> int:
    """Fold the real-edit retries into results; returns how many import-time survivors
    they killed (a kill by a new test keeps its own status, and is listed). A mutant
    mutmut ran no test against (UNRUN) and a retry ran is what the retry found, survived
    included."""
    path = stage / "mutants" / CONFIRMED
    if not path.exists():
        return 0
    on_import = 0
    for name, status in json.loads(path.read_text()).items():
        if name not in results or results[name][0] == "killed":
            continue
        if status == "survived" and results[name][0] not in UNRUN:
            continue
        results[name] = (status, results[name][1])
        on_import += status == "killed"
    return on_import


# ---- the docs section -----------------------------------------------------------------

NEW_TESTS_VERDICT = "killed by a new test"
ROW = re.compile(r"^\| `([^`]+)` \| (.*) \| (.*) \| (.*) \|$")


def old_verdicts(page: Path) -> dict[str, tuple[str, str]]:
    """mutant -> (its diff as the page shows it, the verdict): a verdict stays only while
    its mutant is the same change."""
    if not page.exists():
        return {}
    text = page.read_text()
    if SECTION not in text:
        return {}
    verdicts = {}
    for line in text[text.index(SECTION):].splitlines():
        m = ROW.match(line)
        if m:
            verdicts[m.group(1)] = (m.group(3), m.group(4))
    return verdicts


def write_section(page: Path, results, diffs, command: str, wall: float, note: str,
                  on_import: int = 0, selections: dict[str, list[str]] | None = None) -> list[str]:
    """Rewrite the section; returns the survivors that have no verdict yet. `selections`:
    file -> its tests, for a campaign whose batches each took their own (--own-tests)."""
    counts, killed, total = summary(results)
    previous = old_verdicts(page)
    rows, unexplained = [], []
    for name in sorted(n for n, (s, _) in results.items() if s in LISTED):
        status, path = results[name]
        shown = compact(diffs[name]).replace("|", "\\|")
        old_diff, verdict = previous.get(name, ("", ""))
        if status == "killed (new test)":
            verdict = verdict if old_diff == shown and verdict else NEW_TESTS_VERDICT
        elif old_diff != shown or not verdict:
            verdict = "NO VERDICT YET"
            unexplained.append(name)
        where = f"{path.removeprefix('exactc/')}:{function_of(name)} ({status})"
        rows.append(f"| `{name}` | {where} | {shown} | {verdict} |")
    checked = total - counts["not checked"]
    lines = [
        SECTION,
        "",
        "mutmut 3 over exactc's Python stages, run by `make mutmut` or `make mutmut-whole` "
        "(tools/mutmut_campaign.py) in a staging copy of the checkout, never in the repository "
        "itself (mutmut writes its own `mutants/` work directory where it runs). A survivor is "
        "either killed by a new test (in the test file of the module it protects; status `killed (new test)`: "
        "the mutant written into a copy of the source for real, and that test failing there) "
        "or explained as equivalent in the table. mutmut switches a mutant on when the "
        "function is called, so code that only runs at import (the primitive catalogue's "
        "builders, libm_twin's table and f32-site factories) cannot be switched in its "
        "forked workers: those survivors are retried as real source edits against the "
        "selection (less test_primitives.py), and counted killed when that fails.",
        "",
        f"- score: **{killed}/{total} killed ({100.0 * killed / max(total, 1):.1f} %)**"
        + (f"; of the {checked} mutants checked, {100.0 * killed / max(checked, 1):.1f} % killed"
           if checked != total else ""),
        f"- of the killed: {counts['killed (new test)']} by the new tests, {on_import} only as "
        "real source edits of import-time code",
        "- by status: " + ", ".join(f"{s} {counts[s]}" for s in STATUSES if counts[s] or s in STATUSES[:7]),
        f"- command: `{command}`",
        f"- wall time: {wall / 60:.0f} min on this machine's 2 cores",
        "- mutated: " + ", ".join(f"`{g.removeprefix('exactc/')}`" for g in MUTATE)
        + (("; not mutated: " + ", ".join(DO_NOT_MUTATE)) if DO_NOT_MUTATE else "; nothing excluded"),
        ]
    by_tests: dict[tuple[str, ...], list[str]] = {}
    for path, tests in sorted((selections or {}).items()):
        by_tests.setdefault(tuple(tests), []).append(path.removeprefix("exactc/"))
    if len(by_tests) > 1:
        lines.append("- tests mutmut picks from (per mutant, the ones that reach the mutated function), "
                     "each file its own (tools/mutmut_campaign.py's own_tests()):")
        lines += [f"  - {', '.join(paths)}: " + ", ".join(f"`{t}`" for t in tests)
                  for tests, paths in sorted(by_tests.items(), key=lambda item: item[1])]
    else:
        lines.append("- tests mutmut picks from (per mutant, the ones that reach the mutated function): "
                     + ", ".join(f"`{t}`" for t in TESTS))
    if note:
        lines.append(f"- note: {note}")
    for status, where in unlisted(results):
        if status == "no tests":
            lines.append(f"- {status}, per function: " + ", ".join(f"{w} ({n})" for w, n in where))
    lines += ["", "| file | mutants | killed | killed (new test) | survived | other | not checked |",
              "|---|---|---|---|---|---|---|"]
    by_file: dict[str, Counter] = {}
    for status, path in results.values():
        by_file.setdefault(path.removeprefix("exactc/"), Counter())[status] += 1
    for path, c in sorted(by_file.items()):
        other = sum(c.values()) - sum(c[s] for s in ("killed", "killed (new test)", "survived", "not checked"))
        lines.append(f"| {path} | {sum(c.values())} | {c['killed']} | {c['killed (new test)']} | "
                     f"{c['survived']} | {other} | {c['not checked']} |")
    lines += ["", "| mutant | where (status) | mutation | verdict |", "|---|---|---|---|", *rows, ""]
    text = page.read_text() if page.exists() else ""
    head = text[: text.index(SECTION)] if SECTION in text else text
    if head and not head.endswith("\n\n"):
        head = head.rstrip("\n") + "\n\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(head + "\n".join(lines))
    return unexplained


# ---- main -----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-children", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--stage", type=Path,
                        default=Path(tempfile.gettempdir()) / "exactc-mutmut-stage",
                        help="the staging directory (rebuilt unless --rerun; kept for `mutmut show`)")
    parser.add_argument("--tests", nargs="*", default=None,
                        help="test files relative to the checkout, or pytest node ids FILE::TEST (default: %s)" % " ".join(TESTS))
    parser.add_argument("--mutate", nargs="*", default=None, metavar="GLOB",
                        help="mutate only these files (globs relative to the tree), a documented subset")
    parser.add_argument("--full", action="store_true",
                        help="mutate every Python stage, kernels and printers too (hours)")
    parser.add_argument("--whole", action="store_true",
                        help="mutate the whole product, everything but the harness (with --cluster "
                        "--own-tests: each file with its own tests; hours on two cores)")
    parser.add_argument("--rerun", nargs="*", default=None, metavar="MUTANT",
                        help="reuse the stage, refresh its tests, rerun these mutants (globs)")
    parser.add_argument("--retry", nargs="*", default=None, metavar="MUTANT",
                        help="retry these non-killed mutants (globs), and those a stopped run left "
                        "unchecked, as real source edits against --tests (a new test that kills them, say); "
                        "then report")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: print (and --markdown) the results in the stage")
    parser.add_argument("--wall", type=float, default=None,
                        help="with --report-only: the wall time to report, in seconds")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="write the score and survivors into this page's mutmut section")
    parser.add_argument("--no-confirm", action="store_true",
                        help="skip retrying survivors as real source edits")
    parser.add_argument("--confirm-only", action="store_true",
                        help="run no mutmut: retry the stage's survivors as real edits, report")
    parser.add_argument("--cluster", action="store_true",
                        help="split the files to mutate into --parts batches, each run by this script in a "
                        "stage of its own (STAGE/part-NNN) on dask (a LocalCluster of --max-children workers, "
                        "or EXACTC_SCHEDULER's cluster); then report over every part")
    parser.add_argument("--parts", type=int, default=None,
                        help="with --cluster: the number of batches (default: --max-children)")
    parser.add_argument("--resume", action="store_true",
                        help="with --cluster: go on with the stopped campaign in STAGE (its snapshot of the "
                        "tree, its finished batches kept; a stopped batch goes on at its first unrun mutant); "
                        "the wall time reported is the sum of its runs'")
    parser.add_argument("--save-record", type=Path, default=None, metavar="FILE",
                        help="write the --cluster campaign in STAGE (stopped or finished) to FILE (.tar.xz): its "
                        "ledger and mutmut's verdicts, not the copies of the tree, so that another machine goes on with it")
    parser.add_argument("--restore-record", type=Path, default=None, metavar="FILE",
                        help="make STAGE (which must not exist) again from a record and --tree, a checkout of the "
                        "tree the campaign began with; with --cluster --resume, then go on with it")
    parser.add_argument("--tree", type=Path, default=None,
                        help="with --restore-record: the checkout of the campaign's tree (default: this one)")
    parser.add_argument("--own-tests", action="store_true",
                        help="with --cluster: each file with the tests that protect it (tests/test_<module>.py, "
                        "tests/test_<package>.py and OWN_EXTRAS), one batch per file, instead of --tests for all")
    parser.add_argument("--count", action="store_true",
                        help="print how many mutants each selected file makes, and the total, without running")
    parser.add_argument("--command", default=None, help="the command to name on the page")
    parser.add_argument("--note", default="", help="a line for the page (a subset run, say)")
    args = parser.parse_args(argv)

    if args.own_tests and not args.cluster:
        parser.error("--own-tests needs --cluster (its batches are what take a test set each)")
    stage = args.stage.resolve()
    if stage == TREE or TREE in stage.parents:
        parser.error("the stage must lie outside the repository")
    if args.save_record:
        print(save_record(stage, args.save_record.resolve()))
        return 0
    if args.restore_record:
        print(restore_record(args.restore_record.resolve(), stage, (args.tree or TREE).resolve()), flush=True)
        if not (args.resume and args.cluster):
            return 0
    if args.full:
        MUTATE[:] = FULL
    if args.whole:
        MUTATE[:] = WHOLE
        DO_NOT_MUTATE[:] = HARNESS
    if args.mutate is not None:
        MUTATE[:] = [f"exactc/{g}" for g in args.mutate]
    if args.resume and args.cluster:
        begun = read_ledger(args.stage)  # what the campaign mutates is what it began with
        if begun is None:
            parser.error(f"--resume needs a stopped --cluster campaign's stage at {args.stage} (it has no {LEDGER})")
        MUTATE[:], DO_NOT_MUTATE[:] = begun["mutate"], begun["do_not_mutate"]
    tests = TESTS if args.tests is None else list(args.tests)
    tests = [t for t in tests if (TREE / t.partition("::")[0]).exists()]  # files, or pytest node ids
    TESTS[:] = tests
    if args.count:
        counts = count_mutants(files_to_mutate())
        width = max(len(f) for f in counts)
        for f, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            print(f"{f:<{width}}  {n:6d}")
        print(f"mutmut: {sum(counts.values())} mutants in {len(counts)} files (not run)")
        return 0
    exe = mutmut_exe()
    env = stage_env(stage)

    start = time.monotonic()
    if args.report_only or args.confirm_only or args.retry or args.rerun is not None:
        stages = sorted(stage.glob("part-*")) or [stage]  # a --cluster run: one stage per batch
        if not all((s / "pyproject.toml").is_file() for s in stages):
            parser.error(f"no previous run's stage at {stage}")
        staged = [staged_table(s) for s in stages]
        MUTATE[:] = [g for table in staged for g in table["only_mutate"]]
        TESTS[:] = staged[0]["pytest_add_cli_args_test_selection"]
        begun = read_ledger(stage)
        if begun is not None:  # a --cluster campaign: what it mutates, as it was asked (globs)
            MUTATE[:], DO_NOT_MUTATE[:] = begun["mutate"], begun["do_not_mutate"]
    if args.retry:
        killed = retry_named(stage, args.retry, tests, args.max_children)
        print(f"mutmut: {killed} of the retried mutants killed as real source edits")
        return report(stage, args, argv, args.wall or 0.0)
    if args.report_only or args.confirm_only:
        wall, ledger = args.wall, read_ledger(stage)
        if wall is None and ledger is not None:  # a --cluster campaign's runs, stopped or not
            wall = sum(ledger["walls"])
        return report(stage, args, argv, wall or 0.0, confirm=args.confirm_only)
    if args.cluster:
        status = run_parts(stage, tests, args.parts or args.max_children, args.max_children, args.no_confirm,
                           own=args.own_tests, resume=args.resume)
        walls = read_ledger(stage)["walls"]
        if len(walls) > 1:
            runs = " + ".join(f"{w:.0f}" for w in walls)
            args.note = (args.note + " " if args.note else "") + f"Run in {len(walls)} parts ({runs} s), resumed."
        if status:
            return status
        return report(stage, args, argv, sum(walls))
    if args.resume and (stage / "mutants").is_dir():  # a stopped batch: mutmut goes on where it stopped
        print(f"mutmut: resuming the run in {stage}", file=sys.stderr, flush=True)
        cmd = [exe, "run", "--max-children", str(args.max_children)]
    elif args.rerun is None:
        print(f"mutmut: staging the tree in {stage}", file=sys.stderr, flush=True)
        make_stage(stage, args.max_children, tests)
        cmd = [exe, "run", "--max-children", str(args.max_children)]
    else:
        if not (stage / "mutants").is_dir():
            parser.error(f"--rerun needs a previous run's stage at {stage}")
        sync_tests(stage)
        cmd = [exe, "run", "--max-children", str(args.max_children), *args.rerun]
    print("mutmut: " + " ".join(cmd[1:]) + f"  (in {stage})", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, cwd=stage, env=env)
    # The import check needs mutmut's copy, which exists once it has generated mutants.
    checked = ""
    while proc.poll() is None:
        if not checked and (stage / "mutants" / "mutmut-stats.json").exists():
            problem = check_import(stage, env)
            if problem:
                proc.terminate()
                proc.wait()
                print(f"mutmut: {problem}", file=sys.stderr)
                return 2
            checked = "yes"
        time.sleep(2)
    wall = time.monotonic() - start
    if proc.returncode != 0 and holds_no_mutant(stage):
        # mutmut 3 stops with exit 1 when no test reaches a mutant, and so when there is none:
        # a package's __init__.py without a function is a batch with nothing to run
        print(f"mutmut: {', '.join(MUTATE)}: no mutant (no function or method to mutate); nothing to run",
              file=sys.stderr, flush=True)
    elif proc.returncode != 0:
        print(f"mutmut: `mutmut run` failed ({engine.ending(proc.returncode)}): no score", file=sys.stderr)
        return 2
    if not checked:
        problem = check_import(stage, env)
        if problem:
            print(f"mutmut: {problem}", file=sys.stderr)
            return 2
    mark_finished(stage, wall)

    return report(stage, args, argv, wall, confirm=not args.no_confirm)


def files_to_mutate() -> list[str]:
    """The files MUTATE's globs match in the checkout, less DO_NOT_MUTATE's."""
    files = {str(p.relative_to(TREE)) for g in MUTATE for p in TREE.glob(g) if p.is_file()}
    return sorted(f for f in files if not any(fnmatch.fnmatch(f, g) for g in DO_NOT_MUTATE))


def count_mutants(files: list[str]) -> dict[str, int]:
    """How many mutants mutmut makes of each file (its own generator, no test run): the
    size of a campaign before it starts."""
    from mutmut.mutation.file_mutation import mutate_file_contents

    with tempfile.TemporaryDirectory(prefix="exactc-mutmut-count-") as tmp:
        (Path(tmp) / "exactc").mkdir()
        (Path(tmp) / "pyproject.toml").write_text(mutmut_table(1, []))
        with mutmut_in(Path(tmp)):
            return {f: len(mutate_file_contents(f, (TREE / f).read_text()).mutant_names) for f in files}


def in_glob(path: str, glob: str) -> bool:
    """pathlib's sense of a glob: each `*` matches within one folder's name."""
    parts, pattern = path.split("/"), glob.split("/")
    return len(parts) == len(pattern) and all(map(fnmatch.fnmatchcase, parts, pattern))


def convention_tests(path: str) -> list[str]:
    """The test files the layout's convention gives `path` that exist: tests/test_<module>.py,
    then tests/test_<package>.py (a package's __init__.py has the second only)."""
    *folders, name = path.split("/")
    stem = name.removesuffix(".py")
    names = [] if stem == "__init__" else [f"tests/test_{stem}.py"]
    if len(folders) > 1:  # exactc/ itself is no package of its own tests
        names.append(f"tests/test_{folders[-1]}.py")
    return [t for t in names if (TREE / t).is_file() and t not in NOT_OWN.get(path, ())]


def own_tests(path: str) -> list[str]:
    """The tests that protect the file `path`: the convention's files, then OWN_EXTRAS of
    every glob it matches, each once; TESTS if that is nothing."""
    tests = convention_tests(path)
    for glob, extras in OWN_EXTRAS:
        if in_glob(path, glob):
            tests += [t for t in extras if t not in tests]
    return tests or list(TESTS)


def batches(files: list[str], tests: list[str], parts: int, own: bool,
            size=lambda path: (TREE / path).stat().st_size) -> list[tuple[list[str], list[str]]]:
    """(files, tests) per batch: the files dealt round-robin into `parts` groups that all
    take `tests`; with `own`, one batch per file with its own_tests, the largest file
    first (the longest batches start first, so that no worker is left with one at the
    end while the others wait)."""
    if not own:
        return [(files[i::parts], list(tests)) for i in range(min(parts, len(files)))]
    return [([path], own_tests(path)) for path in sorted(files, key=lambda p: (-size(p), p))]


LEDGER = "campaign.json"  # a --cluster stage's batches and the wall time of each run of it
FINISHED = "finished"  # in a batch's stage once mutmut has run every one of its mutants


def run_parts(stage: Path, tests: list[str], parts: int, workers: int, no_confirm: bool,
              own: bool = False, resume: bool = False) -> int:
    """The campaign in batches on dask (batches()), each mutated by this script in
    STAGE/part-NNN (its own mutmut work directory) with its batch's tests. STAGE/LEDGER
    keeps the batches and each run's wall time (rewritten every HEARTBEAT seconds, so a
    run that is killed leaves its time behind); with `resume`, the batches of a stopped
    campaign that have not finished run again (mutmut keeps every verdict it wrote)."""
    if resume:
        ledger = read_ledger(stage)
    else:
        files = files_to_mutate()
        groups = batches(files, tests, parts, own)
        if stage.exists():
            shutil.rmtree(stage)
        stage.mkdir(parents=True)
        # One snapshot of the checkout for every batch: a batch that starts an hour in stages
        # the tree as it was when the campaign began, not as it is being edited then.
        snapshot = stage / "tree"
        shutil.copytree(TREE, snapshot, ignore=IGNORED, symlinks=True)
        tool = snapshot / Path(__file__).resolve().relative_to(TREE)
        ledger = {"mutate": MUTATE, "do_not_mutate": DO_NOT_MUTATE, "walls": [], "batches": [
            {"files": group, "stage": str(stage / f"part-{i:03d}"),
             "command": [sys.executable, str(tool), "--stage", str(stage / f"part-{i:03d}"),
                         "--max-children", "1", "--mutate", *(f.removeprefix("exactc/") for f in group),
                         "--tests", *group_tests, *(["--no-confirm"] if no_confirm else [])]}
            for i, (group, group_tests) in enumerate(groups)]}
    todo = [b for b in ledger["batches"] if not (Path(b["stage"]) / FINISHED).is_file()]
    commands = [b["command"] + (["--resume"] if resume else []) for b in todo]
    files = sum(len(b["files"]) for b in ledger["batches"])
    done = len(ledger["batches"]) - len(todo)
    print(f"mutmut: {files} files in {len(ledger['batches'])} batches on dask"
          + (f", {done} finished before, {len(todo)} to go on with" if resume else ""), file=sys.stderr, flush=True)
    with wall_clock(stage / LEDGER, ledger):
        progress = engine.Progress("mutmut", len(commands))
        outcomes = engine.run_commands(commands, workers, progress)
    # Any code but 0 is a failure: a batch killed by a signal (negative: the OOM killer's
    # SIGKILL) or lost with its worker (engine.LOST) did not finish, whatever it printed.
    failed = [(b, code, tail) for b, (code, tail) in zip(todo, outcomes) if code != 0]
    for b, code, tail in failed:
        print(f"mutmut: batch {Path(b['stage']).name} ({' '.join(b['files'])}) failed, "
              f"{engine.ending(code)}:\n{tail}", file=sys.stderr)
    if failed:
        print(f"mutmut: {len(failed)} of {len(commands)} batches failed (above): no score; "
              "`--resume` runs them again", file=sys.stderr)
    return 2 if failed else 0


def read_ledger(stage: Path) -> dict | None:
    """A --cluster stage's LEDGER, or None in a stage that has none."""
    path = stage / LEDGER
    return json.loads(path.read_text()) if path.is_file() else None


def batches_line(ledger: dict) -> str:
    """How far a --cluster campaign got: its batches finished, begun (stopped, or running
    still) and not begun, these last with their files (their mutants are in no count yet)."""
    finished = [b for b in ledger["batches"] if (Path(b["stage"]) / FINISHED).is_file()]
    begun = [b for b in ledger["batches"] if Path(b["stage"]).is_dir() and b not in finished]
    waiting = [b for b in ledger["batches"] if not Path(b["stage"]).is_dir()]
    files = [f.removeprefix("exactc/") for b in waiting for f in b["files"]]
    return (f"batches: {len(finished)} finished, {len(begun)} begun and not finished, {len(waiting)} not begun"
            + (f" ({', '.join(files)}: `--resume` runs them)" if waiting else ""))


def holds_no_mutant(stage: Path) -> bool:
    """True when mutmut made its mutants of the stage's files and there are none."""
    metas = [m for m in (stage / "mutants").rglob("*.py.meta")
             if any(fnmatch.fnmatch(str(m.relative_to(stage / "mutants"))[: -len(".meta")], g) for g in MUTATE)]
    return bool(metas) and not any(json.loads(m.read_text())["exit_code_by_key"] for m in metas)


def mark_finished(stage: Path, wall: float) -> bool:
    """Mark a batch's stage finished (a resumed campaign skips it) if mutmut ran every one
    of its mutants: a run stopped by ^C also ends well, with mutants left unrun."""
    if any(status == "not checked" for status, _ in load_results(stage).values()):
        return False
    (stage / FINISHED).write_text(f"mutmut ran every mutant of this stage ({wall:.0f} s)\n")
    return True


# ---- a campaign's record: its verdicts carried to another machine ---------------------
#
# A whole-exporter campaign takes more hours than a sitting, and a sitting may end on one
# machine and the next begin on another, whose /tmp is empty. A record keeps what mutmut
# decided and what the ledger counted (campaign.json; each batch's mutmut table, verdicts
# and function hashes (.meta), test stats, real-edit retries and finished mark), not the
# copies of the tree or the mutated sources, which the restore makes again from a checkout
# of the same tree with the same mutmut: mutmut's names for mutants are its generator's
# and a verdict stands only for the source it was judged on, so the restore refuses
# another mutmut, or a tree whose files differ from the campaign's snapshot.

RECORD_INDEX = "record.json"


def tree_digest(folder: Path) -> dict[str, str]:
    """Each file of a copy of the tree (relative path) -> its sha256."""
    return {str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*")) if f.is_file() and not f.is_symlink()}


def record_members(stage: Path) -> list[Path]:
    """What a record keeps of a --cluster stage (relative to it)."""
    members = [Path(LEDGER)]
    for part in sorted(stage.glob("part-*")):
        members += [f.relative_to(stage) for f in (part / "pyproject.toml", part / FINISHED) if f.is_file()]
        mutants = part / "mutants"
        kept = [*mutants.rglob("*.py.meta"), mutants / "mutmut-stats.json", mutants / CONFIRMED]
        members += sorted(f.relative_to(stage) for f in kept if f.is_file())
    return members


def save_record(stage: Path, path: Path) -> str:
    """Write `stage`'s record to `path` (a .tar.xz); the line that says what it holds."""
    import tarfile
    from mutmut import __version__ as mutmut_version

    ledger = read_ledger(stage)
    if ledger is None:
        sys.exit(f"mutmut: {stage} holds no --cluster campaign ({LEDGER}): nothing to record")
    MUTATE[:] = ledger["mutate"]  # what load_results counts: what the campaign mutates
    index = {"stage": str(stage), "mutmut": mutmut_version, "tree": tree_digest(stage / "tree")}
    members = record_members(stage)
    decided = sum(verdicts_in(part) for part in stage.glob("part-*"))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w:xz") as tar:
        data = (json.dumps(index, indent=1) + "\n").encode()
        info = tarfile.TarInfo(RECORD_INDEX)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for member in members:
            tar.add(stage / member, arcname=str(member))
    partial.replace(path)
    return (f"mutmut: recorded {stage} in {path} ({path.stat().st_size / 1e3:.0f} kB): "
            f"{decided} verdicts, {batches_line(ledger)}, wall time {sum(ledger['walls']):.0f} s")


def verdicts_in(part: Path) -> int:
    """How many of a batch's mutants mutmut has decided."""
    return sum(1 for status, _ in load_results(part).values() if status != "not checked")


def tree_changes(recorded: dict[str, str], found: dict[str, str]) -> list[str]:
    """How the tree at hand differs from a record's: 'changed F', 'missing F', 'new F'."""
    return ([f"changed {f}" for f in sorted(recorded) if f in found and found[f] != recorded[f]]
            + [f"missing {f}" for f in sorted(recorded) if f not in found]
            + [f"new {f}" for f in sorted(found) if f not in recorded])


def mutmut_main():
    """mutmut.__main__ (its mutant generation), imported without this script's folder on
    sys.path: tools/coverage.py would stand in for the coverage package mutmut imports."""
    here = str(Path(__file__).resolve().parent)
    path = sys.path[:]
    sys.path[:] = [p for p in path if Path(p or ".").resolve() != Path(here)]
    try:
        import mutmut.__main__ as main_module
    finally:
        sys.path[:] = path
    return main_module


def restore_record(path: Path, stage: Path, tree: Path) -> str:
    """Make `stage` again from the record at `path` and a checkout `tree` of the campaign's
    tree: its snapshot, each begun batch's stage (the tree, its mutmut table, mutmut's
    verdicts, its mutated sources made again), the ledger with its paths moved to `stage`
    and its batches run by this interpreter. --resume then goes on with it."""
    import tarfile
    from mutmut import __version__ as mutmut_version

    if stage.exists():
        sys.exit(f"mutmut: {stage} exists: a record is restored into a stage of its own (remove it first)")
    with tarfile.open(path, "r:xz") as tar:
        index = json.loads(tar.extractfile(RECORD_INDEX).read())
        if index["mutmut"] != mutmut_version:
            sys.exit(f"mutmut: the record was made with mutmut {index['mutmut']}, this is {mutmut_version}: "
                     f"its mutants would not be the same (pip install mutmut=={index['mutmut']})")
        shutil.copytree(tree, stage / "tree", ignore=IGNORED, symlinks=True)
        changes = tree_changes(index["tree"], tree_digest(stage / "tree"))
        if changes:
            shutil.rmtree(stage)
            sys.exit(f"mutmut: {tree} is not the tree the recorded campaign mutated ({len(changes)} files: "
                     + ", ".join(changes[:8]) + (", ..." if len(changes) > 8 else "")
                     + "): check out the commit it began at")
        tar.extractall(stage, members=[m for m in tar.getmembers() if m.name != RECORD_INDEX],
                       filter="data")
    old = index["stage"]
    ledger = json.loads((stage / LEDGER).read_text())
    for batch in ledger["batches"]:
        batch["stage"] = batch["stage"].replace(old, str(stage), 1)
        batch["command"] = [sys.executable, *(a.replace(old, str(stage), 1) for a in batch["command"][1:])]
    (stage / LEDGER).write_text(json.dumps(ledger, indent=1) + "\n")
    MUTATE[:] = ledger["mutate"]  # what load_results counts: what the campaign mutates
    verdicts = 0
    for batch in ledger["batches"]:
        part = Path(batch["stage"])
        if not part.is_dir():
            continue  # not begun when the record was made
        table = (part / "pyproject.toml").read_text()
        shutil.copytree(stage / "tree", part, ignore=IGNORED, symlinks=True, dirs_exist_ok=True)
        (part / "pyproject.toml").write_text(table)  # the batch's own, with its mutmut table
        print(f"mutmut: restoring {part.name} ({', '.join(batch['files'])})", file=sys.stderr, flush=True)
        # mutmut's generation phase, as `mutmut run` begins (it reads its config when first
        # imported), without the list of what it copies
        with mutmut_in(part), contextlib.redirect_stdout(io.StringIO()):
            from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir

            copy_src_dir()
            copy_also_copy_files()
            for name in batch["files"]:
                result = mutmut_main().create_file_mutants(Path(name))
                if result.error:
                    raise result.error
        verdicts += verdicts_in(part)
    return (f"mutmut: restored {path} into {stage}: {verdicts} verdicts, {batches_line(ledger)}, "
            f"wall time so far {sum(ledger['walls']):.0f} s (`--resume` goes on with it)")


HEARTBEAT = 30.0


@contextlib.contextmanager
def wall_clock(path: Path, ledger: dict):
    """This run's wall time appended to ledger["walls"] and the ledger written to `path`
    now, every HEARTBEAT seconds and at the end: a campaign stopped by a kill keeps all
    but the last beat of its time."""
    import threading

    start, stop = time.monotonic(), threading.Event()
    ledger["walls"].append(0.0)

    def write() -> None:
        ledger["walls"][-1] = round(time.monotonic() - start, 1)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(ledger, indent=1) + "\n")
        partial.replace(path)

    def beat() -> None:
        while not stop.wait(HEARTBEAT):
            write()

    write()
    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        write()


def report(stage: Path, args, argv, wall: float, confirm: bool = False) -> int:
    results, diffs, on_import, selections = {}, {}, 0, {}
    for part in sorted(stage.glob("part-*")) or [stage]:  # a cluster run's batches, else the one stage
        table = staged_table(part)
        selections.update(dict.fromkeys(table["only_mutate"], table["pytest_add_cli_args_test_selection"]))
        found = load_results(part)
        if confirm and any(s == "survived" for s, _ in found.values()):
            begin = time.monotonic()
            confirm_survivors(part, found, args.max_children, stage_env(part))
            wall += time.monotonic() - begin
        on_import += load_confirmed(part, found)
        diffs.update({n: mutant_diff(part, n, p) for n, (s, p) in found.items() if s in LISTED})
        results.update(found)
    counts, killed, total = summary(results)
    print()
    print(f"survivors, timeouts, suspicious ({len(diffs)}):")
    for name in sorted(diffs):
        status, path = results[name]
        print(f"  [{status}] {path.removeprefix('exactc/')}:{function_of(name)}  {name}")
        for line in diffs[name]:
            print(f"      {line}")
    for status, where in unlisted(results):
        print(f"{status}: " + ", ".join(f"{w} ({n})" for w, n in where))
    ledger = read_ledger(stage)
    if ledger is not None:
        print(batches_line(ledger))
    print(f"wall time: {wall:.0f} s; stage kept at {stage} (`cd {stage} && mutmut show NAME`)")
    if args.markdown:
        command = args.command or ("make mutmut" if args.rerun is None and args.tests is None
                                   and args.mutate is None and not args.full and not args.whole else "python tools/mutmut_campaign.py "
                                   + " ".join(argv if argv is not None else sys.argv[1:]))
        unexplained = write_section(args.markdown, results, diffs, command, wall, args.note,
                                    on_import, selections)
        print(f"wrote {args.markdown}: {len(unexplained)} survivors without a verdict yet")
    if on_import:
        print(f"of the killed, {on_import} only as real source edits (code run at import)")
    print(score_line(counts, killed, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
