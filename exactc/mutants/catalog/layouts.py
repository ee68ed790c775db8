"""Layouts and thread splits: speed changes that must never change bits, and pieces that
must cover their range exactly once."""

from exactc.mutants.model import Mutant

PLANNED = "exactc/exporter/printer/planned.py"
SPLITS = "exactc/exporter/kernels/splits.py"
REQUIRES = (PLANNED, SPLITS)

MUTANTS = [
    Mutant(
        "lanes-drop-the-remainder",
        "a laned axis whose extent is not a multiple of the lane width skips the last, "
        "partial chunk",
        PLANNED,
        'f"{INDENT * rdepth}for (int64_t {a} = {c}; {a} < {c} + {w} && {a} < {inner_stop(a)}; {a}++) {{"',
        'f"{INDENT * rdepth}for (int64_t {a} = {c}; {a} < {c}; {a}++) {{"',
        ("layouts:property",),
        family="layouts",
        requires=REQUIRES,
    ),
    Mutant(
        "tile-remainder-skipped",
        "a tiled axis runs whole tiles only: the last, partial tile is skipped",
        PLANNED,
        'body.append(f"{INDENT * depth}for (int64_t {t} = {start(a)}; {t} < {stop(a)}; {t} += {size}) {{")',
        'body.append(f"{INDENT * depth}for (int64_t {t} = {start(a)}; {t} + {size} <= {stop(a)}; {t} += {size}) {{")',
        ("layouts:property",),
        family="layouts",
        requires=REQUIRES,
    ),
    Mutant(
        "split-pieces-leave-a-gap",
        "the first non-empty piece of every split ends one index early",
        SPLITS,
        "    return tuple((points[i], points[i + 1]) for i in range(len(points) - 1))",
        "    first = next((i for i in range(len(points) - 1) if points[i + 1] > points[i]), 0)\n"
        "    return tuple((points[i], points[i + 1] - (i == first)) for i in range(len(points) - 1))",
        ("layouts:property",),
        family="splits",
        requires=REQUIRES,
    ),
    Mutant(
        "split-pieces-overlap",
        "every piece after the first starts one index early: elements computed twice, with "
        "the same bits, so only the coverage check can see it",
        SPLITS,
        "    return tuple((points[i], points[i + 1]) for i in range(len(points) - 1))",
        "    return tuple((max(points[i] - (i > 0), 0), points[i + 1]) for i in range(len(points) - 1))",
        ("layouts:property",),
        family="splits",
        requires=REQUIRES,
    ),
    Mutant(
        "split-driver-pieces-overlap",
        "the printed split driver starts every piece after the first one index early (the "
        "plan itself is valid): only the C coverage check of the checking build sees it",
        PLANNED,
        '    table = ", ".join(f"{{{lo}, {hi}}}" for lo, hi in split.pieces)',
        '    table = ", ".join(f"{{{max(lo - (k > 0), 0)}, {hi}}}" for k, (lo, hi) in enumerate(split.pieces))',
        ("layouts:property",),
        family="splits",
        requires=REQUIRES,
    ),
]
