"""Mistakes in the refusals tests/test_reach_models.py reaches: model configs, the
catalogue's static-row rule, the printers' text helpers."""

from exactc.mutants.model import Mutant

MUTANTS = [
    Mutant(
        "bert-tokens-past-the-positions",
        "a BERT config takes up to twice as many tokens as it has positions: the position "
        "embedding is read past its last row",
        "exactc/exporter/models/bert.py",
        "if self.tokens > self.positions:",
        "if self.tokens > 2 * self.positions:",
        ("reach:models",),
        family="reach",
    ),
    Mutant(
        "normalized-row-checked-on-the-wrong-axis",
        "layernorm's and rmsnorm's static-row rule looks at the rows, not the normalized "
        "dimension: a row whose length follows T is taken",
        "exactc/exporter/primitives.py",
        'if dims.is_symbolic(shapes["x"][1]):',
        'if dims.is_symbolic(shapes["x"][0]) and dims.is_symbolic(shapes["x"][1]):',
        ("reach:models",),
        family="reach",
    ),
    Mutant(
        "input-dimension-quadratic-in-t-taken",
        "an input dimension quadratic in T is written as if affine (its T^2 term dropped)",
        "exactc/exporter/printer/host.py",
        "if d.degree != 1:",
        "if d.degree > 2:",
        ("reach:models",),
        family="reach",
    ),
    Mutant(
        "comment-opening-inside-a-comment",
        "a comment's text may hold `/*`, which some compilers warn about and -Werror refuses",
        "exactc/exporter/printer/ctext.py",
        'if "*/" in line or "/*" in line:',
        'if "*/" in line:',
        ("reach:models",),
        family="reach",
    ),
]
