"""Speed that must not cost a bit: the exported Makefile's default build (for the CPU at
hand, the STRICT flags kept) and the laned code's shape that lets gcc keep its
accumulators in registers."""

from exactc.mutants.model import Mutant

EXPORT = "exactc/exporter/export.py"
PLANNED = "exactc/exporter/printer/planned.py"
RUNTIME = "exactc/runtime/__init__.py"

MUTANTS = [
    Mutant(
        "makefile-default-not-native",
        "the exported Makefile's default CFLAGS lose -march=native: `make` builds SSE2-only "
        "code on x86-64, several times slower, and nothing else shows it",
        EXPORT,
        "CFLAGS  ?= -O2 $(NATIVE)\n",
        "CFLAGS  ?= -O2\n",
        ("fast-build",),
        family="speed",
        requires=(EXPORT,),
    ),
    Mutant(
        "makefile-strict-allows-contraction",
        "the STRICT flags (exactc/runtime, the one place the exported Makefile takes them "
        "from) lose -ffp-contract=off: clang contracts a*b+c into an FMA wherever "
        "-march=native offers one",
        RUNTIME,
        'STRICT_FLAGS = ("-std=c11", "-ffp-contract=off", "-fno-fast-math")\n',
        'STRICT_FLAGS = ("-std=c11", "-fno-fast-math")\n',
        ("fast-build",),
        family="speed",
        requires=(RUNTIME,),
    ),
    Mutant(
        "pack-read-by-its-array",
        "the laned body reads the pack by the array's own name, not through its pointer: "
        "gcc then keeps every lane accumulator in memory (the same bits, half the speed)",
        PLANNED,
        "            printer.packs[buffer] = (pack_var[buffer][1], body_dims",
        "            printer.packs[buffer] = (pack_var[buffer][0], body_dims",
        ("fast-build",),
        family="speed",
        requires=(PLANNED,),
    ),
]
