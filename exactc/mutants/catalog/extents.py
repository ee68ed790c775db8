"""Mistakes in exporter/dims.py's refusals: arithmetic on run-time extents that must hold
for every length T. `dims` (tests/test_dims.py, added for branches no other test takes)
must catch them."""

from exactc.mutants.model import Mutant

DIMS = "exactc/exporter/dims.py"

MUTANTS = [
    Mutant(
        "dim-division-not-exact",
        "a Dim divides by an int without checking that every coefficient is a multiple: "
        "(3 * T) // 2 becomes T, wrong at every T",
        DIMS,
        "        if any(c % other for c in self.coefs):\n",
        "        if False:\n",
        ("dims",),
        family="extents",
    ),
    Mutant(
        "dims-of-two-bounds-mix",
        "extents that follow run-time lengths of different bounds are added as one",
        DIMS,
        "            if other.top != self.top:\n",
        "            if False:\n",
        ("dims",),
        family="extents",
    ),
]
