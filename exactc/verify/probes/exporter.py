"""Growth probes of the exporter itself: its instructions (the Python process under
callgrind, counted between two client requests) against the layers of a model and against
the node count of one function."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Sequence

from exactc.verify.callgrind import run_callgrind_parts
from exactc.verify.probes.counting import ProbeError, region_library
from exactc.verify.probes.growth import GROWTH, Growth, Measured, Rule, Series, config_text, judge

# The node-count probe's synthetic functions: one function of N primitives on a small
# tensor, in two shapes (NODE_SHAPES), so that only the exporter's cost per node is counted.
NODE_TENSOR = (4, 8)
NODE_SHAPES = ("chain", "diamonds")


def exporter_work(layers: int):
    """What the exporter probe counts: trace the gpt forward at `layers` and print it
    with the straight-line host (print_program prints the structured host too)."""
    from exactc.exporter import models
    from exactc.exporter.printer.host import print_program

    program = models.build("gpt", "forward", dict(GROWTH, layers=layers))
    return print_program(program, "f32", straight=True)


def run_exporter_worker(library: str, sizes: Sequence[int]) -> None:
    """Run under callgrind: a warm-up (imports, caches), then one region per size."""
    import ctypes
    import gc

    lib = ctypes.CDLL(library)
    lib.exactc_probe_stop.argtypes = [ctypes.c_char_p]
    exporter_work(2)
    for n in sizes:
        gc.collect()
        lib.exactc_probe_start()
        exporter_work(n)
        lib.exactc_probe_stop(f"layers={n}".encode())


# The exporter's instructions against the layers, each increment no more than about twice the last.
EXPORTER = (
    Series(
        "exporter/straight-line",
        "layers",
        Rule("increments", 2.0, 0.3, at_most=True),
        "increments d(2L)/d(L), fixed part cancelled",
    ),
)


def measure_exporter(sizes: Sequence[int]) -> Measured:
    library = region_library()
    env = dict(os.environ, PYTHONHASHSEED="0")
    command = [
        sys.executable,
        "-m",
        "exactc.verify.probes",
        "--exporter-worker",
        str(library),
        *(str(n) for n in sizes),
    ]
    parts = run_callgrind_parts(command, env=env)
    counts = [p.total for _, p in parts]
    if len(counts) != len(sizes):
        raise ProbeError(f"the exporter probe dumped {len(counts)} regions for {len(sizes)} sizes")
    text = (
        "PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no python -m exactc.verify.probes "
        "--exporter-worker LIB "
        + " ".join(map(str, sizes))
        + f" (models.build + print_program(straight=True), gpt {config_text(GROWTH, 'layers')})"
    )
    name = EXPORTER[0].name
    return Measured(list(sizes), {name: counts}, {name: text})


def probe_exporter(sizes: Sequence[int]) -> Growth:
    return judge(EXPORTER, measure_exporter(sizes))[0]


# ---- the exporter against a function's size -----------------------------------------------


def synthetic_program(shape: str, nodes: int):
    """A program whose one function is `nodes` primitives on one small tensor x:
    `chain`, each primitive reading the one before (scale, silu, add of x, in turn); or
    `diamonds`, each four primitives a diamond with a skip (a = silu(y), b = scale(y),
    c = a + b, y = c * y), so that three values are live at once and the placement has
    rivals. Three (chain) or four (diamonds) kernels whatever `nodes` is: the cost that
    grows is the host's and the tracer's, per node."""
    from exactc.exporter import graph

    if shape not in NODE_SHAPES or nodes % 4:
        raise ValueError(f"synthetic_program({shape!r}, {nodes}): shape is one of {NODE_SHAPES}, nodes a multiple of 4")

    def chain(params, x):
        """A chain of primitives."""
        y = x
        for k in range(nodes):
            y = graph.scale(y, 0.5) if k % 3 == 0 else graph.silu(y) if k % 3 == 1 else graph.add(y, x)
        return {"y": y}

    def diamonds(params, x):
        """Diamonds with a skip, four primitives each."""
        y = x
        for _ in range(nodes // 4):
            a = graph.silu(y)
            b = graph.scale(y, 0.5)
            c = graph.add(a, b)
            y = graph.mul(c, y)
        return {"y": y}

    body = chain if shape == "chain" else diamonds
    return graph.trace("synthetic", shape, body, [], [graph.InputSpec("x", NODE_TENSOR, "x")])


def run_nodes_worker(library: str, sizes: Sequence[int]) -> None:
    """Run under callgrind: a warm-up, then per shape and size three regions: the trace,
    the whole print (the structured host, the default export), and the frame planning
    alone (the kernels' table built outside the region)."""
    import ctypes
    import gc

    from exactc.exporter.printer.host import print_program, program_frames
    from exactc.exporter.printer.kernel_table import KernelTable

    lib = ctypes.CDLL(library)
    lib.exactc_probe_stop.argtypes = [ctypes.c_char_p]

    def region(label: str, work: Callable[[], Any]) -> Any:
        gc.collect()
        lib.exactc_probe_start()
        out = work()
        lib.exactc_probe_stop(label.encode())
        return out

    for shape in NODE_SHAPES:
        print_program(synthetic_program(shape, 8), "f32")
    for shape in NODE_SHAPES:
        for n in sizes:
            program = region(f"{shape} nodes={n} trace", lambda: synthetic_program(shape, n))
            region(f"{shape} nodes={n} print", lambda: print_program(program, "f32"))
            table = KernelTable(program, "f32")
            region(f"{shape} nodes={n} frames", lambda: program_frames(program, "f32", table))


NODE_REGIONS = ("trace", "print", "frames")


# The exporter's instructions against one function's node count, per shape: trace and
# print (the export), print_program alone (a host pass gone quadratic hides less in it than
# in the whole export, whose trace is as large again), and the frame planning alone (a
# small part of the whole, so that a pass of it gone quadratic shows at these sizes).
NODE_SERIES = tuple(
    Series(
        f"exporter/{part}-{shape}",
        "nodes",
        Rule("increments", 2.0, 0.3, at_most=True),
        f"{what}; increments d(2N)/d(N), fixed part cancelled",
    )
    for shape in NODE_SHAPES
    for part, what in (
        ("nodes", "graph.trace + print_program"),
        ("print", "print_program"),
        ("frames", "program_frames (frames.plan_frames)"),
    )
)


def measure_nodes(sizes: Sequence[int]) -> Measured:
    """The node-count worker's regions under callgrind, as NODE_SERIES's series (the whole
    export is the trace and the print summed)."""
    library = region_library()
    command = [sys.executable, "-m", "exactc.verify.probes", "--nodes-worker", str(library), *(str(n) for n in sizes)]
    parts = run_callgrind_parts(command, env=dict(os.environ, PYTHONHASHSEED="0"))
    regions: dict[tuple[str, str], list[int]] = {}
    for label, profile in parts:
        shape, _, stage = label.split()
        regions.setdefault((shape, stage), []).append(profile.total)
    if len(parts) != len(NODE_SHAPES) * len(sizes) * len(NODE_REGIONS):
        raise ProbeError(
            f"the node-count probe dumped {len(parts)} regions for {len(NODE_SHAPES)} shapes x "
            f"{len(sizes)} sizes x {len(NODE_REGIONS)} stages"
        )
    worker = (
        "PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no python -m exactc.verify.probes "
        "--nodes-worker LIB " + " ".join(map(str, sizes))
    )
    counts, commands = {}, {}
    for shape in NODE_SHAPES:
        export = [t + p for t, p in zip(regions[(shape, "trace")], regions[(shape, "print")])]
        for part, series in (
            ("nodes", export),
            ("print", regions[(shape, "print")]),
            ("frames", regions[(shape, "frames")]),
        ):
            counts[f"exporter/{part}-{shape}"] = series
            commands[f"exporter/{part}-{shape}"] = (
                f"{worker} (one function of N primitives on x{list(NODE_TENSOR)}, {shape})"
            )
    return Measured(list(sizes), counts, commands)


def probe_nodes(sizes: Sequence[int]) -> list[Growth]:
    """The exporter's cost against the node count of one function (NODE_SERIES): the
    increments ratio per doubling at most 2.3, as for the layers."""
    return judge(NODE_SERIES, measure_nodes(sizes))
