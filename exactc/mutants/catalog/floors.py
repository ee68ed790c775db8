"""The floors (docs/design.md): a module that reaches up into the harness, or a circle of
imports, changes no output; only tests/test_imports.py, which reads the imports, sees it."""

from exactc.mutants.model import Mutant

MUTANTS = [
    Mutant(
        "product-builds-through-the-harness",
        "exactc/programs.py takes the compiler's facts from the harness's verify/build.py: the "
        "product's commands reach up a floor (the same bits, the same behaviour)",
        "exactc/programs.py",
        "from exactc.runtime.toolchain import CacheError, CompileError, cache_dir, compiler_version\n",
        "from exactc.runtime.toolchain import CacheError\n"
        "from exactc.verify.build import CompileError, cache_dir, compiler_version\n",
        ("imports",),
        family="floors",
    ),
    Mutant(
        "graph-imports-the-reference",
        "the graph imports the reference's walk of it, which imports the graph: a circle",
        "exactc/exporter/graph.py",
        "    top = program.max_length\n",
        "    from exactc.exporter.reference import walk  # noqa: F401\n\n    top = program.max_length\n",
        ("imports",),
        family="floors",
    ),
]
