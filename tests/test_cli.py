"""The command line in process (exactc/cli.py): the parser and its handlers, `exactc` alone,
a refusal on one line with exit 2, a stop or a failure with its exit code, the signal
handlers given back. (test_bad_inputs.py runs exactc as a process.)"""

from __future__ import annotations

# ---- the command line in process (cli.py, commands.py, embed.py): what it prints, its exit
# codes


SMALL_GPT = ["gpt", "--entry", "forward", "--dtype", "f32", "--set", "layers=1", "--set", "tokens=4"]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    from exactc import cli

    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
