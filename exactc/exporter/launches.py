"""The launches of a program: every primitive op the host runs (views are not), and what
makes two of them the same kernel. The printers, the weight layouts at load and the tuner
all name kernels this way.
"""

from __future__ import annotations

from exactc.exporter.frames import is_view
from exactc.exporter.graph import Call, Function, Op, Program


def op_shapes(op: Op) -> dict[str, tuple[int, ...]]:
    return {k: v.shape for k, v in op.operands().items()}


def kernel_key(op: Op) -> tuple:
    """What makes two launches the same kernel."""
    return (op.primitive, tuple(sorted(op_shapes(op).items())), tuple(sorted((k, repr(v)) for k, v in op.attrs.items())))


def launched_ops(program: Program) -> list[Op]:
    """Every launch of the program (views are not), each traced op once, in the order
    the host first runs them."""
    ops: list[Op] = []
    seen: set[int] = set()

    def visit(fn: Function) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        for node in fn.nodes:
            if isinstance(node, Op):
                if not is_view(node):
                    ops.append(node)
            elif isinstance(node, Call):
                visit(node.function)
            else:
                for _, _, body in node.segments():
                    visit(body)

    visit(program.function)
    return ops
