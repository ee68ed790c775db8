"""Building programs (programs.py, the one way) and the command line's exit codes."""

from exactc.mutants.model import Mutant

EXPORT = "exactc/exporter/export.py"
PROGRAMS = "exactc/programs.py"
CLI = "exactc/cli.py"
COMMANDS = "exactc/commands.py"
AUTOPLAN = "exactc/exporter/kernels/autoplan.py"
EMBED = "exactc/embed.py"

MUTANTS = [
    Mutant(
        "make-keeps-a-stale-program",
        "the build runs make without removing its targets: make, which compares times and not "
        "arguments, keeps a program built by another compiler or without OpenMP",
        PROGRAMS,
        "    for p in products:\n        (root / p).unlink(missing_ok=True)\n",
        "",
        ("programs:build",),
        family="building",
    ),
    Mutant(
        "runtime-objects-keyed-without-their-sources",
        "the runtime objects' cache key leaves out the runtime's files: an export whose runtime "
        "source changed links the object compiled from the old one",
        PROGRAMS,
        'for name in ("Makefile", *export.RUNTIME_FILES):',
        'for name in ("Makefile",):',
        ("programs:build",),
        family="building",
    ),
    Mutant(
        "export-cache-ignores-the-plan",
        "the export cache's key leaves out the plan: `--plan auto` gets the plain program cached before it",
        EXPORT,
        '"plan": plan_text(self.loaded_plan()), ',
        '"plan": "", ',
        ("programs:build", "generate:fast"),
        family="building",
    ),
    Mutant(
        "run-builds-without-a-plan",
        "exactc run --backend c builds the plain nests by default, not the automatic plan's program",
        COMMANDS,
        '_model_options(p, plan="auto")',
        "_model_options(p)",
        ("commands:run-plan",),
        family="building",
    ),
    Mutant(
        "auto-plan-tuned-for-the-default-compiler",
        "--plan auto reads the tune table's layouts for $CC or cc whatever compiler the command "
        "builds with (generate, run, embed --cc): another compiler's layouts, or none",
        AUTOPLAN,
        "return AutoPlan(tuned=tuned_layouts(cc))",
        "return AutoPlan(tuned=tuned_layouts())",
        ("tune",),
        family="building",
    ),
    Mutant(
        "embed-program-tuned-for-the-default-compiler",
        "exactc embed --cc asks for its program without naming the compiler whose tune table --plan auto reads",
        EMBED,
        "weights=weights, cc=cc, contract=contract, form=form)",
        "weights=weights, contract=contract, form=form)",
        ("embed:program",),
        family="building",
    ),
    Mutant(
        "cli-failed-build-exits-2",
        "a failed build exits with 2, the code of a refused input",
        CLI,
        "        print(f\"exactc {args.command}: error: {exc.summary}\", file=sys.stderr)\n"
        "        return 1\n",
        "        print(f\"exactc {args.command}: error: {exc.summary}\", file=sys.stderr)\n"
        "        return 2\n",
        ("cli",),
        family="building",
    ),
]
