"""Rounded constants that move where the C lowering and the reference still agree.

A model that computes a constant another way changes the bits of every output of the
programs that use it, but both implementations read the same graph, so no C-against-
reference check can see it. docs/semantics.md lists each constant's bits, and
`spec-constants` (tests/test_spec_constants.py) compares that list with the code.
"""

from exactc.mutants.model import Mutant

BERT = "exactc/exporter/models/bert.py"

MUTANTS = [
    Mutant(
        "bert-attention-scale-as-root-of-reciprocal",
        "BERT's attention scale is written sqrt(1/hd) instead of 1/sqrt(hd): at head size 32 "
        "(all-MiniLM-L6-v2) one ulp higher, and the attention of every program exported from it "
        "moves with it",
        BERT,
        'scores = g.scale(scores, 1.0 / math.sqrt(hd), name="scaled")',
        'scores = g.scale(scores, math.sqrt(1.0 / hd), name="scaled")',
        ("spec-constants",),
        family="constants",
    ),
]
