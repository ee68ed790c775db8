"""Mistakes in the harness itself: a check that can no longer fail the run.

The test helper tests/installed.py turns a missing piece (valgrind, clang, torch, the
packaged checkpoint, the probe baseline) into a failure under `make test`; if it skipped
instead, a broken install step would turn checks into skips and CI would stay green.
`installed` (tests/test_installed.py) must catch it.
"""

from exactc.mutants.model import Mutant

INSTALLED = "tests/installed.py"
PROBES = "exactc/verify/probes.py"

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
        PROBES,
        "        return Regression(False, lines, [])\n",
        "        return Regression(True, lines, [])\n",
        ("probes:baseline",),
        family="harness",
    ),
]
