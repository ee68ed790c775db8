"""`exactc plan --tune` (exactc/verify/tune.py) and the tuned layouts `--plan auto` takes
(exactc/exporter/kernels/tuned.py)."""

from exactc.mutants.model import Mutant

TUNE = "exactc/verify/tune.py"
TABLE = "exactc/exporter/kernels/tuned.py"
AUTOPLAN = "exactc/exporter/kernels/autoplan.py"
RT = "exactc/runtime/exactc_rt.h"
PLANS = "exactc/exporter/kernels/plans.py"
KERNELS = "exactc/exporter/printer/kernels.py"

MUTANTS = [
    Mutant(
        "tune-table-of-any-build",
        "--plan auto takes the tuned layouts of whatever build the table holds first: layouts "
        "measured for another compiler, flags or CPU",
        TABLE,
        'table["builds"].get(identity, {"nests": {}})["nests"]',
        'next(iter(table["builds"].values()), {"nests": {}})["nests"]',
        ("tune",),
        family="tune",
    ),
    Mutant(
        "tune-keeps-the-slowest",
        "the tuner keeps the slowest candidate of each nest",
        TUNE,
        "return min(self.layouts, key=lambda layout: self.seconds[label(layout)])",
        "return max(self.layouts, key=lambda layout: self.seconds[label(layout)])",
        ("tune",),
        family="tune",
    ),
    Mutant(
        "tune-times-the-plain-range",
        "a timed candidate runs each launch over the plain nest's outermost extent, not its "
        "printed range: a layout that reorders the loops computes part of its outputs and looks fast",
        TUNE,
        "zip(kernel.launches, printed.functions, printed.ranges, strict=True)",
        "zip(kernel.launches, printed.functions, [launch.extent for launch in kernel.launches], strict=True)",
        ("tune",),
        family="tune",
    ),
    Mutant(
        "export-cache-ignores-the-tune-table",
        "an export's cache key names `auto` alone: the program exported before the table (or "
        "under another one) is served again",
        AUTOPLAN,
        '        if not self.tuned:\n            return "auto"',
        '        if True:\n            return "auto"',
        ("tune",),
        family="tune",
    ),
    Mutant(
        "tuned-layout-taken-unchecked",
        "a tuned layout is taken without checking that the nest can take it",
        AUTOPLAN,
        "    layout = _first_legal(kernel, nest, candidates)",
        "    layout = candidates[0] if measured is not None else _first_legal(kernel, nest, candidates)",
        ("tune",),
        family="tune",
    ),
    Mutant(
        "narrow-layout-of-another-panel",
        "a narrow or wide layout may change its innermost lane: its kernel reads w's panels in "
        "another width than the program laid them out in at load",
        PLANS,
        "            and variant.lanes[-1:] == layout.lanes[-1:]\n",
        "\n",
        ("autoplan:variants",),
        family="tune",
    ),
    Mutant(
        "variants-printed-as-the-plain-layout",
        "the functions under #if EXACTC_NARROW_LANES and #elif EXACTC_WIDE_LANES are printed "
        "with the plain layout: the targets they are for run the 8-row lanes as before",
        KERNELS,
        "                text, _, _ = planned_function(fn, item, buffers, variant, nest_plan.split, ahead)",
        "                text, _, _ = planned_function(fn, item, buffers, nest_plan.layout, nest_plan.split, ahead)",
        ("autoplan:variants",),
        family="tune",
    ),
    Mutant(
        "variant-reads-panels-it-packs-itself",
        "the narrow and wide variants are printed without the buffers laid out at load: they "
        "pack w's panel from a weight already rearranged into panels, and read it wrongly",
        KERNELS,
        "                text, _, _ = planned_function(fn, item, buffers, variant, nest_plan.split, ahead)",
        "                text, _, _ = planned_function(fn, item, buffers, variant, nest_plan.split, frozenset())",
        ("autoplan:variants",),
        family="tune",
    ),
    Mutant(
        "tune-report-names-the-plain-layout-on-a-variant-build",
        "the tuner takes autoplan's plain layout for its own choice on a build that compiles "
        "the narrow or wide one: the report marks the wrong row and miscounts what the table "
        "changes",
        TUNE,
        "        return dict(nest_plan.variants()).get(self.variant, nest_plan.layout)",
        "        return nest_plan.layout",
        ("tune",),
        family="tune",
    ),
    Mutant(
        "wide-layout-on-aliasing-rows",
        "the wide layout is given also where the rows lie 4 KiB apart: 16 rows' streams in one "
        "set of the level-1 cache, the Llama-like linear over 1024 inputs twice as slow",
        AUTOPLAN,
        "    if stride is not None and stride % ALIASING_STRIDE == 0:\n        return None\n",
        "",
        ("autoplan:variants",),
        family="tune",
    ),
    Mutant(
        "wide-layout-rows-never-filled",
        "a nest whose rows never reach 16, even at T_max, gets 16-row lanes as its wide layout: "
        "every row runs in the remainder",
        AUTOPLAN,
        "    if dims.upper(next(a.extent for a in nest.axes if a.name == \"m\")) < rows[lanes[\"m\"]]:\n"
        "        return None  # lanes no row count up to T_max fills\n",
        "",
        ("autoplan:variants",),
        family="tune",
    ),
    Mutant(
        "wide-lanes-for-clang",
        "exactc_rt.h sets EXACTC_WIDE_LANES for clang with AVX-512 too, which spills 16 rows' "
        "accumulators and ran some linears twice as slow (caught on an AVX-512 CPU only)",
        RT,
        "#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)\n#define EXACTC_WIDE_LANES 1",
        "#if defined(__AVX512F__)\n#define EXACTC_WIDE_LANES 1",
        ("tune",),
        family="tune",
        cpu=("__AVX512F__",),
    ),
]
