"""Rounded constants that move where the C lowering and the reference still agree, and
words of the command line's help that say what the code does not.

A model that computes a constant another way changes the bits of every output of the
programs that use it, but both implementations read the same graph, so no C-against-
reference check can see it. docs/semantics.md lists each constant's bits, and
`spec-constants` (tests/test_spec_constants.py) compares that list with the code. The
help's words change no bit either; docs/cli.md quotes every command's `--help`, and
`cli-docs` (tests/test_cli_docs.py) compares the page with what the code prints.
"""

from exactc.mutants.model import Mutant

BERT = "exactc/exporter/models/bert.py"
GENERATE = "exactc/generate.py"

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
    Mutant(
        "generate-help-names-another-default",
        "exactc generate --help says -n defaults to 32 new tokens where the command makes 16: "
        "the help is the command line's reference, and docs/cli.md quotes it",
        GENERATE,
        'help="new tokens at most (default 16)")',
        'help="new tokens at most (default 32)")',
        ("cli-docs",),
        family="constants",
    ),
]
