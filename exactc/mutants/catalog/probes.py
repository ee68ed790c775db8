"""Mistakes that change no output: only the instruction-count probes see them.

Each leaves every exported program's bytes and results as they were (the programs check
passes under each); what changes is a cost: the exporter's time grows quadratically with
the graph, the structured host's text grows with the layers, a kernel does its work
twice. `probes:growth` and `probes:baseline` (tests/test_probes.py) must catch them.
The baseline check compares against the counts recorded for this machine's toolchain:
on another toolchain it skips, and the kernel mutant is not caught there until
`python -m exactc.verify.probes --update` records a baseline.
"""

from exactc.mutants.model import Mutant

STRAIGHT = "exactc/exporter/printer/straight.py"
STRUCTURED = "exactc/exporter/printer/structured.py"
NESTS = "exactc/exporter/printer/nests.py"

MUTANTS = [
    Mutant(
        "exporter-quadratic-name-rescan",
        "the straight-line host checks each new buffer's name against every line printed so "
        "far: a rescan per buffer, quadratic in the launches, the same output",
        STRAIGHT,
        "        while name in self.names:\n",
        "        while name in self.names or any(line.split(\" = \", 1)[0].endswith(f\" *{name}\") for line in self.lines):\n",
        ("probes:growth", "programs"),  # programs must stay green: only a count sees it
        family="probes",
        requires=(STRAIGHT,),
    ),
    Mutant(
        "structured-host-fold-unrolled",
        "the structured host prints the fold over layers as one block per layer instead of "
        "a loop: the same launches and bits, text that grows with the layers",
        STRUCTURED,
        "        for start, stop, body in node.segments():\n"
        "            layer = \"l\" if stop - start > 1 else str(start)\n",
        "        for start, stop, body in [(i, i + 1, node.body_of(i)) for i in range(node.count)]:\n"
        "            layer = \"l\" if stop - start > 1 else str(start)\n",
        ("probes:growth", "programs"),
        family="probes",
        requires=(STRUCTURED,),
    ),
    Mutant(
        "kernel-nest-runs-twice",
        "every printed nest function runs its loop nest twice: the same writes, twice the "
        "instructions",
        NESTS,
        "    body = []\n    depth = 1\n",
        "    body = [f\"{INDENT}for (int twice = 0; twice < 2; twice++)  /* the nest, run twice */\"]\n"
        "    depth = 1\n",
        ("probes:baseline", "programs", "kernels:linear"),
        family="probes",
    ),
]
