"""Semantic mistakes in the C lowering: the formula is wrong, every rounding is right."""

from exactc.mutants.model import Mutant

LOWER = "exactc/exporter/kernels/lower.py"

MUTANTS = [
    Mutant(
        "layernorm-eps-outside-sqrt",
        "layernorm adds eps after the square root: 1/(sqrt(var) + eps)",
        LOWER,
        'Declare(rstd, div(ctx.R(1.0), Call("sqrt", add(var, ctx.R(ctx.attrs["eps"]))))),',
        'Declare(rstd, div(ctx.R(1.0), add(Call("sqrt", var), ctx.R(ctx.attrs["eps"])))),',
        ("kernels:layernorm",),
        family="semantics",
    ),
    Mutant(
        "softmax-no-max-subtraction",
        "softmax exponentiates x instead of x - max (overflows, and rounds differently)",
        LOWER,
        'Declare(e, Call("exp", sub(ctx.W("x", bi, i, js), mx))),',
        'Declare(e, Call("exp", ctx.W("x", bi, i, js))),',
        ("kernels:softmax",),
        family="semantics",
    ),
    Mutant(
        "softmax-causal-off-by-one",
        "the causal mask lets each row see one future position (j <= i + offset + 1)",
        LOWER,
        'conds.append(Binary("<=", j, i + ctx.attrs["offset"]))',
        'conds.append(Binary("<=", j, i + (ctx.attrs["offset"] + 1)))',
        ("kernels:softmax",),
        family="semantics",
    ),
    Mutant(
        "rope-frequency-index-off-by-one",
        "rope's frequency uses pair index i + 1: theta^(-2(i+1)/D)",
        LOWER,
        'Declare(a, div(Convert(i * 2, "f64"), Const(float(dim), "f64"))),',
        'Declare(a, div(Convert(i * 2 + 2, "f64"), Const(float(dim), "f64"))),',
        ("kernels:rope",),
        family="semantics",
    ),
    Mutant(
        "mean-pool-counts-padding",
        "mean pooling divides by every token, padded ones included",
        LOWER,
        "(Assign(s, add(s, ctx.W(\"x\", t, d))), Assign(count, Binary(\"+\", count, one))),\n"
        "                ),\n"
        "            ),\n",
        "(Assign(s, add(s, ctx.W(\"x\", t, d))),),\n"
        "                ),\n"
        "                Assign(count, Binary(\"+\", count, one)),\n"
        "            ),\n",
        ("kernels:mean_pool",),
        family="semantics",
    ),
]
