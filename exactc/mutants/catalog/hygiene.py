"""Hygiene: mistakes that change no output but make the code worse to read or trust; only
the lint run (tests/test_lint.py: ruff and mypy) sees them."""

from exactc.mutants.model import Mutant

MUTANTS = [
    Mutant(
        "unused-import-left-behind",
        "an import nothing uses is left in a product module",
        "exactc/runtime/toolchain.py",
        "import functools\n",
        "import functools\nimport json\n",
        ("lint",),
        family="hygiene",
    ),
    Mutant(
        "compiler-version-returns-a-list",
        "compiler_version returns its first line in a list where its signature says str (a "
        "cache key that joins it still builds)",
        "exactc/runtime/toolchain.py",
        "    return lines[0].strip()\n",
        "    return [lines[0].strip()][0:1]\n",
        ("lint",),
        family="hygiene",
    ),
]
