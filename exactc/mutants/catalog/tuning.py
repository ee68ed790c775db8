"""`exactc plan --tune` (exactc/tune.py) and the tuned layouts `--plan auto` takes."""

from exactc.mutants.model import Mutant

TUNE = "exactc/tune.py"
AUTOPLAN = "exactc/exporter/kernels/autoplan.py"
PLANS = "exactc/exporter/kernels/plans.py"
KERNELS = "exactc/exporter/printer/kernels.py"

MUTANTS = [
    Mutant(
        "tune-table-of-any-build",
        "--plan auto takes the tuned layouts of whatever build the table holds first: layouts "
        "measured for another compiler, flags or CPU",
        TUNE,
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
        "ranges = printed.ranges or tuple(launch.extent for launch in kernel.launches)",
        "ranges = tuple(launch.extent for launch in kernel.launches)",
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
        "a narrow layout may change its innermost lane: its kernel reads w's panels in "
        "another width than the program laid them out in at load",
        PLANS,
        "            and narrow.lanes[-1:] == layout.lanes[-1:]\n",
        "\n",
        ("autoplan:narrow",),
        family="tune",
    ),
    Mutant(
        "narrow-variant-printed-as-the-wide-one",
        "the function under #if EXACTC_NARROW_LANES is printed with the wide layout: the "
        "targets it is for spill the 8-row lanes' accumulators as before",
        KERNELS,
        "            narrow, _, _ = planned_function(fn, item, buffers, nest_plan.narrow, nest_plan.split, ahead)",
        "            narrow, _, _ = planned_function(fn, item, buffers, nest_plan.layout, nest_plan.split, ahead)",
        ("autoplan:narrow",),
        family="tune",
    ),
    Mutant(
        "narrow-variant-reads-panels-it-packs-itself",
        "the narrow variant is printed without the buffers laid out at load: it packs w's "
        "panel from a weight already rearranged into panels, and reads it wrongly",
        KERNELS,
        "            narrow, _, _ = planned_function(fn, item, buffers, nest_plan.narrow, nest_plan.split, ahead)",
        "            narrow, _, _ = planned_function(fn, item, buffers, nest_plan.narrow, nest_plan.split, frozenset())",
        ("autoplan:narrow",),
        family="tune",
    ),
    Mutant(
        "tune-report-names-the-wide-layout-on-a-narrow-build",
        "the tuner takes autoplan's wide layout for its own choice on a build that compiles "
        "the narrow one: the report marks the wrong row and miscounts what the table changes",
        TUNE,
        "        return nest_plan.narrow if self.narrow and nest_plan.narrow is not None else nest_plan.layout",
        "        return nest_plan.layout",
        ("tune",),
        family="tune",
    ),
]
