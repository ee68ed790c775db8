"""The run-time sequence length: loops bounded by T, pieces computed from T, the length
read from the inputs and checked, buffers placed for T_max."""

from exactc.mutants.model import Mutant

NESTS = "exactc/exporter/printer/nests.py"
PLANNED = "exactc/exporter/printer/planned.py"
FRAMES = "exactc/exporter/frames.py"
LAYOUTS = "exactc/exporter/kernels/layouts.py"
RUNTIME_HOST = "exactc/runtime/exactc_host.c"

MUTANTS = [
    Mutant(
        "loop-bound-at-t-max",
        "a loop over the sequence axis runs to T_max instead of the run-time length T: "
        "it writes past the live length (outputs sized at T show it in their red zones)",
        NESTS,
        "    return dims.c_factor(extent)\n\n\nclass Extents:",
        "    return str(dims.upper(extent))\n\n\nclass Extents:",
        ("layouts:run-time", "programs:lengths"),
        family="lengths",
        requires=(NESTS,),
    ),
    Mutant(
        "split-pieces-from-t-max",
        "a split of an axis that follows T computes its pieces from the extent at T_max: "
        "at a shorter length a piece runs past the extent (the coverage check sees it)",
        PLANNED,
        "    return dims.c_factor(extent)\n\n\ndef split_driver(",
        "    return f\"({dims.upper(extent)})\"\n\n\ndef split_driver(",
        ("layouts:run-time",),
        family="lengths",
        requires=(PLANNED,),
    ),
    Mutant(
        "split-rounds-the-extent-end-down",
        "a run-time split rounds every cut down to whole chunks of its lanes, the extent's "
        "end too: the elements of the last partial chunk are never computed",
        PLANNED,
        '            *(f"{INDENT * 2}pieces[p][{end}] = parts[p][{end}] == {split.of} ? {whole} : "\n'
        '              f"{whole} * parts[p][{end}] / {split.of} / {chunk} * {chunk};',
        '            *(f"{INDENT * 2}pieces[p][{end}] = "\n'
        '              f"{whole} * parts[p][{end}] / {split.of} / {chunk} * {chunk};',
        ("layouts:run-time",),
        family="lengths",
    ),
    Mutant(
        "length-check-off-by-one",
        "the program accepts an input one position longer than T_max",
        RUNTIME_HOST,
        "    return 1 <= length && length <= max_length;",
        "    return 1 <= length && length <= max_length + 1;",
        ("programs:lengths",),
        family="lengths",
        requires=(RUNTIME_HOST,),
    ),
    Mutant(
        "length-check-takes-empty",
        "the program accepts an empty input (T = 0)",
        RUNTIME_HOST,
        "    return 1 <= length && length <= max_length;",
        "    return 0 <= length && length <= max_length;",
        ("programs:lengths",),
        family="lengths",
        requires=(RUNTIME_HOST,),
    ),
    Mutant(
        "arena-slot-for-length-1",
        "a buffer that follows T gets the arena bytes it needs at T = 1, not at T_max: "
        "buffers overlap at longer lengths",
        FRAMES,
        "    return dims.upper(count) * size",
        "    return dims.at(count, 1) * size",
        ("programs",),
        family="lengths",
        requires=(FRAMES,),
    ),
    Mutant(
        "pack-sized-at-length-1",
        "a pack whose panel follows T (att v's rows of v, k < T) is sized for T = 1, not "
        "for T_max: at a longer length the copy runs past the pack's end",
        LAYOUTS,
        "        size *= dims.upper(extent)",
        "        size *= dims.at(extent, 1)",
        ("layouts:run-time",),
        family="lengths",
        requires=(LAYOUTS,),
    ),
]
