"""SCoP mode (exporter/printer/scop.py): each nest a PolyBench-style function of literal
dimensions whose bits the directory's driver checks, and exactc's verdict on it, which
Polly's SCoP detection checks (exactc/verify/scop.py)."""

from exactc.mutants.model import Mutant

SCOP = "exactc/exporter/printer/scop.py"
VERIFY = "exactc/verify/scop.py"
BITS = "scop:bits"
POLLY = "scop:polly"

MUTANTS = [
    Mutant(
        "scop-linearized-index",
        "a nest indexes its arrays by one linearized offset (x[m * 7 + k]) where it declares "
        "them with one dimension per axis: not the PolyBench form, and no longer C that builds",
        SCOP,
        "        if len(access.index) == len(shape):\n",
        "        if len(access.index) == len(shape) == 1:\n",
        (BITS,),
        family="scop",
    ),
    Mutant(
        "scop-selection-as-if",
        "a branch that only assigns scalars is printed as an `if` whose arms compute the new "
        "values (a masked sum): the compiler keeps the branch, and Polly cuts the nest",
        SCOP,
        "        if isinstance(stmt, If) and is_selection(stmt):\n",
        "        if isinstance(stmt, If) and is_selection(stmt) and False:\n",
        (POLLY,),
        family="scop",
    ),
    Mutant(
        "scop-dimension-off-by-one",
        "an array parameter's inner dimensions are declared one larger than the buffer's: "
        "every row after the first is read and written at the wrong place",
        SCOP,
        '"".join(f"[{d}]" for d in shape[1:])',
        '"".join(f"[{d + 1}]" for d in shape[1:])',
        (BITS,),
        family="scop",
    ),
    Mutant(
        "scop-reduction-reversed",
        "a SCoP nest's reduction loop runs from its last index to its first: the float sum "
        "is added in the other order (docs/design.md, principle 2)",
        SCOP,
        '        out = [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < {self.extent(axis)}; {axis.name}++) '
        '{{{note}"]\n',
        '        out = [f"{pad}for (int64_t {axis.name} = {self.extent(axis)} - 1; {axis.name} >= 0; {axis.name}--) '
        '{{{note}"] if axis.kind == REDUCE else [f"{pad}for (int64_t {axis.name} = 0; {axis.name} < '
        '{self.extent(axis)}; {axis.name}++) {{"]\n',
        (BITS,),
        family="scop",
    ),
    Mutant(
        "scop-gather-classified-static",
        "exactc's verdict calls a nest that reads an array at an index read from another "
        "(the embedding) static control: Polly finds no SCoP over it",
        SCOP,
        '            return Verdict(False, f"a gather: {access.buffer} read at an index read from an array")\n',
        "            return Verdict(True)\n",
        (POLLY,),
        family="scop",
    ),
    Mutant(
        "scop-scatter-classified-static",
        "exactc's verdict calls a nest that writes an array at an index read from another "
        "(the embedding's gradient) static control: Polly finds no SCoP over it",
        SCOP,
        '            return Verdict(False, f"a scatter: {access.buffer} written at an index read from an array")\n',
        "            return Verdict(True)\n",
        (POLLY,),
        family="scop",
    ),
    Mutant(
        "scop-span-from-the-outermost-for",
        "Polly's SCoP is required to begin at the nest's outermost for even where that loop "
        "runs once and leaves no instruction (xent_mean): a SCoP over the whole nest is "
        "taken for a cut one",
        VERIFY,
        "    while first + 1 < end - 1 and _NO_CODE.fullmatch(lines[first]):\n",
        "    while False:\n",
        (POLLY,),
        family="scop",
    ),
]
