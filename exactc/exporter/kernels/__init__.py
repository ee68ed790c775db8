"""Kernel IR and lowering: each primitive at a site type becomes loop nests.

    from exactc.exporter.kernels import lower
    kernel = lower("linear", "f32", {"x": (3, 7), "w": (5, 7)})
    print(kernel.text())

ir.py holds the IR (axes, buffers, expressions, statements, nests, kernels) and its
checker; lower.py lowers every primitive of exporter/primitives.py following
docs/semantics.md. The C printer is exporter/printer/kernels.py. layouts.py, splits.py and
plans.py give nests a layout and a thread split (docs/plans.md), printed by
exporter/printer/planned.py; autoplan.py chooses them from the shapes (`--plan auto`).
"""

from exactc.exporter.kernels.ir import (
    Axis,
    Buffer,
    IRError,
    Kernel,
    Launch,
    Nest,
)
from exactc.exporter.kernels.lower import lower

__all__ = ["Axis", "Buffer", "IRError", "Kernel", "Launch", "Nest", "lower"]
