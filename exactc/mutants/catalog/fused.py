"""Mistakes in the reference's fused multiply-add (exactc/exporter/reference/fma.py): the
emulation rounds twice, or loses the bits that make one rounding exact."""

from exactc.mutants.model import Mutant

FMA = "exactc/exporter/reference/fma.py"

MUTANTS = [
    Mutant(
        "fma-f32-sum-rounded-to-nearest",
        "the f32 emulation rounds the f64 sum of the product and c to nearest instead of to "
        "odd, then to f32: a double rounding, wrong only on a tie missed by less than f64 resolves",
        FMA,
        "        odd = add_odd(p, c64)\n",
        "        odd = p + c64\n",
        ("fma",),
        family="fused",
    ),
    Mutant(
        "fma-parity-fix-wrong-way",
        "rounding to odd moves an inexact even sum one ulp away from the exact sum instead of towards it",
        FMA,
        "    step = np.where((err > 0) == (s > 0), 1, -1)",
        "    step = np.where((err > 0) == (s > 0), -1, 1)",
        ("fma",),
        family="fused",
    ),
    Mutant(
        "fma-f64-product-low-part-dropped",
        "Dekker's product returns the rounded product with a zero error term: the f64 fma adds "
        "c to the product rounded once already",
        FMA,
        "    return p, (((xh * yh - p) + xh * yl) + xl * yh) + xl * yl",
        "    return p, 0.0 * p",
        ("fma",),
        family="fused",
    ),
]
