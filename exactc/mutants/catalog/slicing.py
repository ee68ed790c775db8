"""Slicing: a stacked parameter's layer slice, a view's offset."""

from exactc.mutants.model import Mutant

STRUCTURED = "exactc/exporter/printer/structured.py"
LOWER = "exactc/exporter/kernels/lower.py"
NESTS = "exactc/exporter/printer/nests.py"

MUTANTS = [
    Mutant(
        "fold-slice-previous-layer",
        "each layer after the first reads the stacked parameters of the layer before it",
        STRUCTURED,
        '    return f"{base} + {index} * {chunk}"',
        '    return f"{base} + ({index} == 0 ? 0 : {index} - 1) * {chunk}"',
        ("programs",),
        family="slicing",
        requires=(STRUCTURED,),
    ),
    Mutant(
        "slice-view-offset-off-by-one",
        "a slice view starts one element late along its axis",
        LOWER,
        "    src[axis] = out[axis] + Affine.of(start)\n",
        "    src[axis] = out[axis] + (Affine.of(start) + 1)\n",
        ("kernels:slice",),
        family="slicing",
    ),
    Mutant(
        "stride-named-after-a-shorter-axis",
        "a buffer dimension takes the name of any axis that indexes it, even one that runs "
        "over part of it (a slice's source): its stride is written with the shorter extent",
        NESTS,
        "                    if axis is None or axis.extent != buf.shape[d]:\n",
        "                    if axis is None:\n",
        ("kernels:slice", "kernel-print"),
        family="slicing",
        requires=(NESTS,),
    ),
]
