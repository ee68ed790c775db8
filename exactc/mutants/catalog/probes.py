"""Mistakes that change no output: only the instruction-count probes see them.

Each leaves every exported program's bytes and results as they were (the programs check
passes under each); what changes is a cost: the exporter's time grows quadratically with
the graph, the structured host's text grows with the layers, a kernel does its work
twice, a pass over one function's nodes rescans them. `probes:growth`, `probes:nodes` and
`probes:baseline` (tests/test_probes.py) must catch them.
The baseline check compares against the counts recorded for this machine's toolchain:
on another toolchain it fails (naming `make probes-baseline`) until a baseline is
recorded, so the kernel mutant is never passed over by a skip.
"""

from exactc.mutants.model import Mutant

STRAIGHT = "exactc/exporter/printer/straight.py"
STRUCTURED = "exactc/exporter/printer/structured.py"
NESTS = "exactc/exporter/printer/nests.py"
FRAMES = "exactc/exporter/frames.py"
GRAPH = "exactc/exporter/graph.py"
KERNEL_TABLE = "exactc/exporter/printer/kernel_table.py"
BACKPROP = "exactc/exporter/backprop.py"
# A pass over one function's nodes made quadratic: the same output, a cost that only the
# node-count probe (exporter/nodes-*, N = 64 ... 512) sees; the layer probes do not,
# since a layer adds no node to a function (a fold is one node).
NODE_CHECKS = ("probes:nodes", "probes:growth", "programs")

MUTANTS = [
    Mutant(
        "exporter-quadratic-name-rescan",
        "the straight-line host checks each new buffer's name against every line printed so "
        "far: a rescan per buffer, quadratic in the launches, the same output",
        STRAIGHT,
        "        while name in self.names:\n",
        "        while name in self.names or any(line.split(\" = \", 1)[0].endswith(f\" *{name}\") for line in self.lines):\n",
        ("probes:growth", "programs"),  # programs must stay green: only a count sees it
        family="probes",
        requires=(STRAIGHT,),
    ),
    Mutant(
        "structured-host-fold-unrolled",
        "the structured host prints the fold over layers as one block per layer instead of "
        "a loop: the same launches and bits, text that grows with the layers",
        STRUCTURED,
        "        segments = node.segments()\n",
        "        segments = [(i, i + 1, node.body_of(i)) for i in range(node.count)]\n",
        ("probes:growth", "programs"),
        family="probes",
        requires=(STRUCTURED,),
    ),
    Mutant(
        "kernel-nest-runs-twice",
        "every printed nest function runs its loop nest twice: the same writes, twice the "
        "instructions",
        NESTS,
        "    body = []\n    depth = 1\n",
        "    body = [f\"{INDENT}for (int twice = 0; twice < 2; twice++)  /* the nest, run twice */\"]\n"
        "    depth = 1\n",
        ("probes:baseline", "programs", "kernels:linear"),
        family="probes",
    ),
    Mutant(
        "structured-host-births-rescan",
        "the structured host finds the buffers born at each node by rescanning every buffer "
        "of the function: quadratic in its nodes, the same text",
        STRUCTURED,
        "            for buf in born.get(index, ()):\n",
        "            for buf in [b for b in frame.buffers if b.first == index]:\n",
        NODE_CHECKS,
        family="probes",
        requires=(STRUCTURED,),
    ),
    Mutant(
        "frames-placement-rescan",
        "first-fit placement compares each buffer with every buffer placed before it, dead "
        "ones included (filtered by lifetime each time): quadratic, the same offsets",
        FRAMES,
        "        live = [b for b in live if b.last >= buf.first]\n"
        "        rivals = sorted(live, key=lambda b: b.offset)\n",
        "        rivals = sorted((b for b in live if b.last >= buf.first), key=lambda b: b.offset)\n",
        NODE_CHECKS,
        family="probes",
    ),
    Mutant(
        "frames-high-water-rescan",
        "the high-water mark of each node rescans every buffer of the function: quadratic, "
        "the same marks and peak",
        FRAMES,
        "        high = ends[index]\n",
        "        high = max((b.offset + b.nbytes for b in frame.buffers if b.first <= index <= b.last), default=0)\n",
        NODE_CHECKS,
        family="probes",
    ),
    Mutant(
        "trace-name-rescan",
        "the tracer's fresh name tries base2, base3, ... from the start for every value: "
        "quadratic in the values of one primitive, the same names",
        GRAPH,
        "        name, k = base, tried.get(base, 1)\n",
        "        name, k = base, 1\n",
        NODE_CHECKS,
        family="probes",
    ),
    Mutant(
        "loss_grad-backward-recomputes-the-forward",
        "each sequence of loss_grad traces the forward again before its backward, which reads "
        "the second pass's values and residuals: the same bits, a forward more of instructions",
        BACKPROP,
        "        _backward(forward.function, scope, ())\n",
        "        _forward(forward.function, list(params.values()) + [tokens], scope, ())\n"
        "        _backward(forward.function, scope, ())\n",
        ("probes:grad",),
        family="probes",
    ),
]
