"""The comparison: the rule of docs/semantics.md in Python (verify/compare.py) and in C
(conformance/compare), check.sh that applies it, and the report of a program that
differs (verify/conformance.py)."""

from exactc.mutants.model import Mutant

EXPORT = "exactc/exporter/export.py"
COMPARER = "exactc/runtime/exactc_compare.c"
COMPARE = "exactc/verify/compare.py"
CONFORMANCE = "exactc/verify/conformance.py"
HOST_RUNTIME = "exactc/runtime/exactc_host.c"

MUTANTS = [
    Mutant(
        "check-sh-ignores-a-difference",
        "conformance/check.sh reports an output that differs but still exits 0: the exported "
        "check compares nothing",
        "exactc/exporter/templates.py",
        "            status=1\n        fi\n    done\n",
        "            :\n        fi\n    done\n",
        ("compare",),
        family="comparison",
    ),
    Mutant(
        "check-sh-compares-bf16-as-f32",
        "check.sh hands the comparer the site type f32 whatever the export's: a bf16 output's "
        "NaN payload goes unchecked",
        EXPORT,
        'check.write_text(CHECK_SH.replace("@SITE@", export.site))',
        'check.write_text(CHECK_SH.replace("@SITE@", "f32"))',
        ("compare",),
        family="comparison",
    ),
    Mutant(
        "c-comparer-bf16-nan-payload-blind",
        "conformance/compare treats a bf16 site's NaNs as equal whatever their payload (the f32 "
        "rule), where bf16 NaN is canonical and compared on every bit",
        COMPARER,
        "            all_bits = 1;\n",
        "            all_bits = 0;\n",
        ("compare",),
        family="comparison",
    ),
    Mutant(
        "c-comparer-nan-equals-anything",
        "conformance/compare takes an element for equal when either side is a NaN",
        COMPARER,
        "    return !all_bits && is_nan_bits(t, e) && is_nan_bits(t, a);\n",
        "    return !all_bits && (is_nan_bits(t, e) || is_nan_bits(t, a));\n",
        ("compare",),
        family="comparison",
    ),
    Mutant(
        "comparison-bf16-nan-payload-blind",
        "the Python comparison treats bf16 NaNs as equal whatever their payload",
        COMPARE,
        '    if every_bit or expected.dtype == BF16 or site == "bf16":\n',
        "    if every_bit:\n",
        ("compare",),
        family="comparison",
    ),
    Mutant(
        "layer-trace-never-written",
        "the checking build's layer traces are never written, EXACTC_TRACE_DIR set or not: the "
        "report can no longer name a layer",
        HOST_RUNTIME,
        "    if (dir == NULL || *dir == '\\0' || arena_check == NULL) return;\n",
        "    return;\n",
        ("programs:report",),
        family="comparison",
    ),
    Mutant(
        "program-report-names-the-layer-before",
        "the program-level report names the layer before the first one whose output differs",
        CONFORMANCE,
        "            fold, layer = step.fold.body.name, step.layer\n",
        "            fold, layer = step.fold.body.name, step.layer - 1\n",
        ("programs:report",),
        family="comparison",
    ),
]
