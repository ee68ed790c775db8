"""Loop bounds: a nest's bound one short or one long."""

from exactc.mutants.model import Mutant

NESTS = "exactc/exporter/printer/nests.py"
STRUCTURED = "exactc/exporter/printer/structured.py"

MUTANTS = [
    Mutant(
        "body-loop-bound-one-short",
        "every loop inside a nest body (reductions and inner passes) stops one early",
        NESTS,
        'out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {self.extent(axis)}; {axis.name}++) {{{note}"]',
        'out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {self.extent(axis)} - 1; {axis.name}++) {{{note}"]',
        ("kernels:layernorm", "kernels:linear"),
        family="loop bounds",
    ),
    Mutant(
        "body-loop-bound-one-long",
        "every loop inside a nest body runs one index past its extent",
        NESTS,
        'out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {self.extent(axis)}; {axis.name}++) {{{note}"]',
        'out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} <= {self.extent(axis)}; {axis.name}++) {{{note}"]',
        ("kernels:layernorm", "kernels:linear"),
        family="loop bounds",
    ),
    Mutant(
        "guarded-prefix-one-past-its-guard",
        "a body loop whose body is `if (j <= bound)`, printed as the loop over its prefix "
        "(the causal softmax's passes), runs the prefix one index past the bound: each "
        "row's max and sum take in the first masked score",
        NESTS,
        'split, stop = f"{j}_split", f"{self.expr(bound)} + 1"',
        'split, stop = f"{j}_split", f"{self.expr(bound)} + 2"',
        ("kernels:softmax",),
        family="loop bounds",
    ),
    Mutant(
        "split-loop-rest-starts-one-late",
        "a body loop `if (j <= bound) A else B`, printed as A's loop then B's, starts B's "
        "one index late: the first masked column of the causal softmax keeps its exp "
        "instead of zero",
        NESTS,
        'out.append(f"{pad}{INDENT}for (int64_t {j} = {split}; {j} < {extent}; {j}++) {{{note}")',
        'out.append(f"{pad}{INDENT}for (int64_t {j} = {split} + 1; {j} < {extent}; {j}++) {{{note}")',
        ("kernels:softmax",),
        family="loop bounds",
    ),
    Mutant(
        "reduction-run-backwards",
        "reductions run from the last index down to the first: same sum in exact arithmetic, "
        "different roundings",
        NESTS,
        'out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {self.extent(axis)}; {axis.name}++) {{{note}"]',
        'out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {self.extent(axis)}; {axis.name}++) {{{note}"]'
        ' if axis.kind != REDUCE else [f"{pad}for (int64_t {axis.name} = {axis.extent} - 1; '
        '{axis.name} >= 0; {axis.name}--) {{{note}"]',
        ("kernels:linear", "kernels:layernorm", "kernels:softmax"),
        family="layouts",
    ),
    Mutant(
        "fold-layer-loop-one-short",
        "the structured host's loop over layers stops one layer early",
        STRUCTURED,
        'else f"l = {start}; l < {stop}; l++"',
        'else f"l = {start}; l < {stop} - 1; l++"',
        ("programs",),
        family="loop bounds",
        requires=(STRUCTURED,),
    ),
]
