"""Slicing: a stacked parameter's layer slice, a view's offset."""

from exactc.mutants.model import Mutant

HOST = "exactc/exporter/printer/host.py"
LOWER = "exactc/exporter/kernels/lower.py"

MUTANTS = [
    Mutant(
        "fold-slice-previous-layer",
        "each layer after the first reads the stacked parameters of the layer before it",
        HOST,
        '    return f"{base} + {index} * {chunk}"',
        '    return f"{base} + ({index} == 0 ? 0 : {index} - 1) * {chunk}"',
        ("programs",),
        family="slicing",
        requires=(HOST,),
    ),
    Mutant(
        "slice-view-offset-off-by-one",
        "a slice view starts one element late along its axis",
        LOWER,
        "    src[axis] = out[axis] + start\n",
        "    src[axis] = out[axis] + (start + 1)\n",
        ("kernels:slice",),
        family="slicing",
    ),
]
