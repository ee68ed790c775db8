"""Shape rules: a model config or a catalogue operand taken where its kernels cannot take
it (the position table read past its rows, a normalized row that follows T)."""

from exactc.mutants.model import Mutant

MUTANTS: list[Mutant] = [
    Mutant(
        "bert-tokens-past-the-positions",
        "a BERT config takes up to twice as many tokens as it has positions: the position "
        "embedding is read past its last row",
        "exactc/exporter/models/bert.py",
        "if self.tokens > self.positions:",
        "if self.tokens > 2 * self.positions:",
        ("models",),
        family="shapes",
    ),
    Mutant(
        "normalized-row-checked-on-the-wrong-axis",
        "layernorm's and rmsnorm's static-row rule looks at the rows, not the normalized "
        "dimension: a row whose length follows T is taken",
        "exactc/exporter/primitives.py",
        'if dims.is_symbolic(shapes["x"][1]):',
        'if dims.is_symbolic(shapes["x"][0]) and dims.is_symbolic(shapes["x"][1]):',
        ("primitives:catalogue",),
        family="shapes",
    ),
]
