"""Speed that must not cost a bit: the exported Makefile's default build (for the CPU at
hand, the STRICT flags kept) and the laned code's shape that lets gcc keep its
accumulators in registers."""

from exactc.mutants.model import Mutant

EXPORT = "exactc/exporter/export.py"
PLANNED = "exactc/exporter/printer/planned.py"
RUNTIME = "exactc/runtime/__init__.py"
PREPACK = "exactc/exporter/printer/prepack.py"
AUTOPLAN = "exactc/exporter/kernels/autoplan.py"
HOST = "exactc/runtime/exactc_host.c"

MUTANTS = [
    Mutant(
        "makefile-default-not-wide",
        "the exported Makefile's default CFLAGS leave out -mprefer-vector-width=512 on a CPU "
        "with AVX-512: the laned kernels run in 256-bit vectors (caught on such a CPU only)",
        "exactc/exporter/templates.py",
        "CFLAGS  ?= -O2 $(NATIVE) $(WIDE)\n",
        "CFLAGS  ?= -O2 $(NATIVE)\n",
        ("fast-build",),
        family="speed",
        cpu=("__AVX512F__",),
    ),
    Mutant(
        "pack-panels-not-transposed",
        "exactc_pack_panels lays each panel out in panels of one row, its rows as they were: "
        "the kernels that read w as panels laid out at load read row-major weights",
        HOST,
        "    return exactc_pack_block_panels(data, layers, rows, cols, lanes, 1, size);",
        "    return exactc_pack_block_panels(data, layers, rows, cols, 1, 1, size);",
        ("host-runtime", "prepack"),
        family="speed",
    ),
    Mutant(
        "pack-block-panels-rows-as-they-were",
        "exactc_pack_block_panels puts each row's blocks back one after another: the x8 kernel "
        "reads, as the 8 rows of a block, 8 blocks of the chunk's first row",
        HOST,
        "                    memcpy(at + ((size_t)b * (size_t)lanes + (size_t)j) * bytes,",
        "                    memcpy(at + ((size_t)j * (size_t)(cols / run) + (size_t)b) * bytes,",
        ("host-runtime", "quant:block-panels"),
        family="speed",
    ),
    Mutant(
        "prepack-scales-as-block-panels",
        "map_weights lays qlinear_i's scales out as block panels too (a run of the row's "
        "blocks): the kernel reads row r's scale of block blk where another row's lies",
        PREPACK,
        "    if operand not in RUN_PANELS.get(nest.name, ()):\n        return 1\n",
        "",
        ("prepack", "quant:block-panels"),
        family="speed",
    ),
    Mutant(
        "prepack-q4-run-in-values",
        "a q4 block panel's run is the block's 32 values, not its 16 bytes: map_weights keeps "
        "two blocks of a row together, and the x8 kernel reads row r + 1's nibbles from row "
        "r's next block",
        PREPACK,
        "    return int(body[-1][1])",
        "    return 32",
        ("prepack", "quant:block-panels"),
        family="speed",
    ),
    Mutant(
        "prepack-ignores-other-uses",
        "a parameter is laid out as panels when any kernel operand it reaches is a packed w, "
        "not every one: GPT's tied head is packed, and the embedding reads its table scrambled",
        PREPACK,
        '        for name, used in uses.items():\n            if (not used',
        '        for name, used in uses.items():\n            used = {read for read in used if read in width}\n'
        '            if (not used',
        ("prepack",),
        family="speed",
    ),
    Mutant(
        "prepack-accepts-a-split-inside-a-chunk",
        "a kernel whose split starts a piece inside a chunk of lanes reads w as panels laid out "
        "at load: that piece reads panel c at a chunk that is not chunk c",
        PREPACK,
        ' or any(lo % width for lo, _ in split.pieces):',
        ':',
        ("prepack",),
        family="speed",
    ),
    Mutant(
        "split-cut-inside-a-chunk",
        "the automatic plan cuts a laned axis into even pieces whatever its lanes: pieces end "
        "in partial chunks (run point by point) and no weight can be packed at load",
        AUTOPLAN,
        "    split = even_split(extent, pieces, dict(layout.lanes).get(first, 1))",
        "    split = even_split(extent, pieces)",
        ("prepack",),
        family="speed",
    ),
    Mutant(
        "element-lanes-of-16-only",
        "gelu, gelu_erf and silu keep lanes of 16: one call of the laned tanh, erf or exp "
        "per 16 elements, whose setup (clang spills its constants) costs a quarter of gelu",
        AUTOPLAN,
        "ELEMENT_LANES = (Layout(lanes=((\"i\", 256),)), Layout(lanes=((\"i\", 16),)))",
        "ELEMENT_LANES = (Layout(lanes=((\"i\", 16),)),)",
        ("autoplan:elements",),
        family="speed",
    ),
    Mutant(
        "makefile-default-not-native",
        "the exported Makefile's default CFLAGS lose -march=native: `make` builds SSE2-only "
        "code on x86-64, several times slower, and nothing else shows it",
        "exactc/exporter/templates.py",
        "CFLAGS  ?= -O2 $(NATIVE) $(WIDE)\n",
        "CFLAGS  ?= -O2 $(WIDE)\n",
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
        "            printer.packs[buffer] = (pack_var[buffer][1], panel_dims",
        "            printer.packs[buffer] = (pack_var[buffer][0], panel_dims",
        ("fast-build",),
        family="speed",
        requires=(PLANNED,),
    ),
    Mutant(
        "q8-values-not-laid-out-at-load",
        "qlinear_w's q8 values are never laid out as panels at load: a decode step gathers 16 "
        "rows a step again, half the speed, and no output shows it",
        PREPACK,
        '"qlinear_w": ("wq", "wd"), "qlinear_i"',
        '"qlinear_w": ("wd",), "qlinear_i"',
        ("prepack",),
        family="speed",
    ),
    Mutant(
        "panel-of-a-one-value-row-at-zero",
        "a packed operand whose row is one value (a scale per row: one block) finds every "
        "chunk's panel at the first",
        PLANNED,
        'for a, extent in body_dims) or "1"',
        'for a, extent in body_dims) or "0"',
        ("quant:programs",),
        family="speed",
    ),
    Mutant(
        "pack-read-not-renamed-to-its-loop",
        "a pack serving two accesses (q4's low- and high-nibble loops) is read with the first "
        "one's loop in both: the high nibbles are read at the low loop's index",
        PLANNED,
        'return f"{pack}[{affine_text(pack_offset(dims), {**self.rename, **renamings[access]})}]"',
        'return f"{pack}[{affine_text(pack_offset(dims), self.rename)}]"',
        ("quant",),
        family="speed",
    ),
    Mutant(
        "int8-panels-not-asked-for-ahead",
        "the kernels reading int8 panels laid out at load no longer prefetch them: a "
        "stories110M-shaped q8 decode falls to a third of its speed, and no output shows it",
        PLANNED,
        "        out.extend(prefetch_lines(self.printer, axis.name, pad + INDENT))\n",
        "",
        ("prepack",),
        family="speed",
    ),
    Mutant(
        "autoplan-weight-grad-plain",
        "the automatic plan leaves a weight's gradient (linear_bar_w) in its plain loops: the "
        "sum over the positions runs down a column of both operands, 4.7x slower in a "
        "GPT-2-like loss_grad, the same bits",
        AUTOPLAN,
        '    "linear_bar_w": [\n',
        '    "linear_bar_w_unplanned": [\n',
        ("autoplan:backward",),
        family="speed",
    ),
    Mutant(
        "autoplan-gelu-grad-scalar-tanh",
        "the automatic plan leaves gelu's backward in its plain loop: one scalar tanh call an "
        "element instead of the laned array form, the same bits",
        AUTOPLAN,
        '    "gelu_tanh_bar": list(ELEMENT_LANES),\n',
        "",
        ("autoplan:backward",),
        family="speed",
    ),
]
