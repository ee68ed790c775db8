"""The host: which launches run, where their buffers live, when buffers are released."""

from exactc.mutants.model import Mutant

FRAMES = "exactc/exporter/frames.py"
STRAIGHT = "exactc/exporter/printer/straight.py"
TABLE = "exactc/exporter/printer/kernel_table.py"
RUNTIME_HOST = "exactc/runtime/exactc_host.c"
HOST = "exactc/exporter/printer/host.py"
STRUCTURED = "exactc/exporter/printer/structured.py"
GRAPH = "exactc/exporter/graph.py"

MUTANTS = [
    Mutant(
        "host-comments-a-layers-shape-for-the-stack",
        "the Weights struct's comment beside a stacked parameter gives one layer's shape, not "
        "the stack's (the pointer's shape comment, design.md's style): no bit moves, only "
        "the text a reader relies on",
        HOST,
        'out.append(f"{INDENT}{field:<{width}} /* {shape_text(spec.full_shape)}: {where} */")',
        'out.append(f"{INDENT}{field:<{width}} /* {shape_text(spec.shape)}: {where} */")',
        ("printed-text",),
        family="host",
    ),
    Mutant(
        "host-drops-residual-adds",
        "the straight-line host skips every launch of an add (the residual connections): "
        "live launches dropped",
        STRAIGHT,
        "                self.lines.extend(INDENT + line for line in use.calls(node, names))",
        "                if node.primitive != \"add\":\n"
        "                    self.lines.extend(INDENT + line for line in use.calls(node, names))",
        ("programs",),
        family="host",
        requires=(STRAIGHT,),
    ),
    Mutant(
        "arena-overlaps-a-buffer-still-read",
        "the arena places a launch's output over a buffer whose last read is that same "
        "launch: two live buffers share bytes",
        FRAMES,
        "live = [b for b in live if b.last >= buf.first]",
        "live = [b for b in live if b.last > buf.first]",
        ("programs",),
        family="host",
        requires=(FRAMES,),
    ),
    Mutant(
        "fold-rows-copied-to-the-output",
        "an output made by a fold's stacked rows (prefill's and decode's keys and values) is "
        "not written through the output pointer but copied there by an identity reshape at "
        "the end of every run: the same bits, one more copy and its arena bytes",
        GRAPH,
        "    made_here |= {id(v) for n in function.nodes if isinstance(n, Fold) for v in n.row_outs}\n",
        "",
        ("printed-text",),
        family="host",
        requires=(GRAPH,),
    ),
    Mutant(
        "born-fills-nothing-in-checking-builds",
        "a checking build's BORN neither checks nor NaN-fills a buffer at its birth: a read of "
        "a region reused before it is written sees the dead buffer's last values",
        "exactc/runtime/exactc_rt.h",
        "#define BORN(p, count) ((void)exactc_arena_take((unsigned char *)(void *)(p), (size_t)(count) * sizeof *(p)))",
        "#define BORN(p, count) ((void)(p), (void)(count))",
        ("host-runtime", "programs"),
        family="host",
    ),
    Mutant(
        "births-at-the-function-start",
        "the structured host marks every buffer born where its function starts, not before the "
        "launch that first writes it: a checking build fills a reused region before the "
        "buffer that held it is dead, and no more once the region is reused",
        STRUCTURED,
        '                out.append(f"{INDENT}BORN({buf.name}, {buf.count});")',
        '                out.insert(out.index(f"{INDENT}{self.scratch[id(fn)]}(arena);") + 1,\n'
        '                           f"{INDENT}BORN({buf.name}, {buf.count});")',
        ("structured",),
        family="host",
        requires=(STRUCTURED,),
    ),
    Mutant(
        "buffer-released-one-launch-early",
        "a buffer is released after the launch before its last read",
        FRAMES,
        "    return last_use\n",
        "    return last_use - 1\n",
        ("programs",),
        family="host",
        requires=(FRAMES,),
    ),
    Mutant(
        "plan-entries-never-checked",
        "a plan entry that applies to no nest is ignored: a misspelt kernel function exports "
        "a plain program without a word",
        TABLE,
        "        unused = [name for name in self.plan.entry_names() if name not in self.plan_used]\n",
        "        unused: list[str] = []\n",
        ("programs:plans",),
        family="host",
        requires=(TABLE,),
    ),
    Mutant(
        "host-input-dimensions-unchecked",
        "the runtime reads an input whose .npy file has the right dtype and rank but other "
        "dimensions: a mis-shaped input runs instead of being refused by name",
        RUNTIME_HOST,
        "    for (int d = 0; ok && d < spec->ndim; d++) ok = a->shape[d] == spec->shape[d];\n",
        "",
        ("host-runtime",),
        family="host",
        requires=(RUNTIME_HOST,),
    ),
    Mutant(
        "host-leaves-the-weights-pointer-unused",
        "the structured host prints no `(void)w;` in a program of no parameters: its strict "
        "build warns of an unused parameter (no architecture is without parameters; a "
        "builder's program is)",
        STRUCTURED,
        '            out.append(f"{INDENT}(void)w;")  # a program of no parameters\n',
        "            pass\n",
        ("programs:builder",),
        family="host",
        requires=(STRUCTURED,),
    ),
    Mutant(
        "function-named-like-a-host-global",
        "a network function may take a name model.c uses itself (an entry named `weights` "
        "beside the global `weights`): the program does not compile",
        GRAPH,
        "    weights Weights map_weights run length in out PARAMS INPUTS OUTPUTS PARAM_BYTES ARENA_BYTES ARENA\n",
        "    Weights map_weights run length in out PARAMS INPUTS OUTPUTS PARAM_BYTES ARENA_BYTES ARENA\n",
        ("programs:builder",),
        family="host",
        requires=(GRAPH,),
    ),
    Mutant(
        "input-dimension-quadratic-in-t-taken",
        "an input dimension quadratic in T is written as if affine (its T^2 term dropped)",
        "exactc/exporter/printer/host.py",
        "if d.degree != 1:",
        "if d.degree > 2:",
        ("host-printer",),
        family="host",
    ),
    Mutant(
        "comment-opening-inside-a-comment",
        "a comment's text may hold `/*`, which some compilers warn about and -Werror refuses",
        "exactc/exporter/printer/ctext.py",
        'if "*/" in line or "/*" in line:',
        'if "*/" in line:',
        ("ctext",),
        family="ctext",
    ),
    Mutant(
        "long-call-with-one-argument-given-it-twice",
        "a call past 100 columns is broken one argument a line, its first and last each printed: a "
        "one-argument call (a fill kernel's split driver) gets its argument twice and does not compile",
        "exactc/exporter/printer/ctext.py",
        "    if len(args) == 1:  # a long name with one argument (a fill kernel's): nothing to break\n"
        '        return [f"{head}{args[0]});"]\n',
        "",
        ("ctext", "programs:plans"),
        family="ctext",
    ),
]
