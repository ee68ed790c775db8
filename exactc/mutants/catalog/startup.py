"""Start-up: a command that imports what it does not use prints the same bytes, only later
(ml_dtypes alone is most of a second); only the import-time tests, which read what a fresh
interpreter imports (tests/test_cli.py, tests/test_types.py), see it."""

from exactc.mutants.model import Mutant

MUTANTS = [
    Mutant(
        "bf16-imported-by-every-command",
        "the site types import ml_dtypes at the top again: every command, --help included, waits "
        "for bf16's dtype whether it uses bf16 or not",
        "exactc/exporter/types.py",
        "import numpy as np\n\nSITE_TYPES",
        "import ml_dtypes  # noqa: F401\nimport numpy as np\n\nSITE_TYPES",
        ("cli:imports", "types:bf16"),
        family="startup",
    ),
    Mutant(
        "bf16-told-by-importing-it",
        "is_bf16 compares with bf16's dtype without first asking whether ml_dtypes is loaded: "
        "writing an f32 .npy imports ml_dtypes",
        "exactc/exporter/types.py",
        '    return "ml_dtypes" in sys.modules and dtype == bf16_dtype()\n',
        "    return dtype == bf16_dtype()\n",
        ("types:bf16",),
        family="startup",
    ),
    Mutant(
        "harness-imported-by-the-command-line",
        "the command line imports the mutants runner at its start: every command loads the "
        "harness (verify.engine, the catalog)",
        "exactc/cli.py",
        "from exactc import __version__\n",
        "from exactc import __version__\nfrom exactc.mutants import runner  # noqa: F401\n",
        ("cli:imports",),
        family="startup",
    ),
    Mutant(
        "every-command-loaded-to-parse-one",
        "main builds the parser of every command: each command's module, numpy and the exporter "
        "are imported to run one of them",
        "exactc/cli.py",
        "        parser = build_parser(chosen_command(words))\n",
        "        parser = build_parser()\n",
        ("cli:imports",),
        family="startup",
    ),
    Mutant(
        "printer-imported-to-name-a-cached-export",
        "export.py imports the C printer at its top again: an embedding from a cached program "
        "loads the printer and the kernels it never uses",
        "exactc/exporter/export.py",
        "from exactc.exporter.files import signals_held, umask\n",
        "from exactc.exporter.files import signals_held, umask\n"
        "from exactc.exporter.printer.host import print_program  # noqa: F401\n",
        ("cli:imports",),
        family="startup",
    ),
    Mutant(
        "every-checkpoint-reader-imported",
        "the checkpoints package imports the GGUF and llama2.c readers with itself: a Hugging "
        "Face folder's embedding loads readers it never uses",
        "exactc/exporter/checkpoints/__init__.py",
        "from exactc.exporter.checkpoints import hf, trained\n",
        "from exactc.exporter.checkpoints import gguf_file, hf, llama2c, trained  # noqa: F401\n",
        ("cli:imports",),
        family="startup",
    ),
    Mutant(
        "plan-shown-through-the-tuner",
        "exactc plan imports the harness's tuner before it knows whether --tune was given: "
        "showing a kernel's choices loads the harness",
        "exactc/cli.py",
        "    if not args.tune:\n        return plan.show_command(args)\n    from exactc.verify import tune\n",
        "    from exactc.verify import tune\n\n    if not args.tune:\n        return plan.show_command(args)\n",
        ("cli:imports",),
        family="startup",
    ),
    Mutant(
        "refusal-imports-every-stage",
        "the error path imports the module of every refusal to report one: a mistyped --dtype "
        "loads the exporter's printer and the harness before its one line",
        "exactc/cli.py",
        "    return tuple(getattr(sys.modules[module], name) for module, name in USER_ERRORS if module in sys.modules)\n",
        "    return tuple(getattr(__import__(module, fromlist=[name]), name) for module, name in USER_ERRORS)\n",
        ("cli:imports",),
        family="startup",
    ),
]
