"""The launches of a program: every primitive op the host runs (views are not), and what
makes two of them the same kernel. The printers, the weight layouts at load and the tuner
all name kernels this way.
"""

from __future__ import annotations

from exactc.exporter.frames import is_view
from exactc.exporter.graph import Call, Fold, Function, Op, Program, Value
from exactc.exporter.primitives import IN_PLACE


def op_shapes(op: Op) -> dict[str, tuple[int, ...]]:
    return {k: v.shape for k, v in op.operands().items()}


def kernel_key(op: Op) -> tuple:
    """What makes two launches the same kernel."""
    return (op.primitive, tuple(sorted(op_shapes(op).items())), tuple(sorted((k, repr(v)) for k, v in op.attrs.items())))


def read_args(node: Op | Call | Fold) -> tuple[Value, ...]:
    """The arguments the host hands a node's C: an op's operands but the one its output is
    written over in place (primitives.IN_PLACE: the kernel is given the output's pointer
    only, which is that operand's buffer); a call's or fold's every argument."""
    if isinstance(node, Op) and node.primitive in IN_PLACE:
        written = IN_PLACE[node.primitive][1]
        return tuple(v for name, v in node.operands().items() if name != written)
    return node.args


def values_read(fn: Function) -> set[int]:
    """The ids of `fn`'s values some launch reads, looking through calls and folds into
    their bodies (the straight-line host inlines them): an argument is read when its
    formal is."""
    read: set[int] = set()
    for node in fn.nodes:
        if isinstance(node, Op):
            read |= {id(v) for v in read_args(node)}
            continue
        bodies = [node.function] if isinstance(node, Call) else [body for _, _, body in node.segments()]
        for body in bodies:
            inner = values_read(body)
            read |= {id(v) for v, formal in zip(node.args, body.inputs) if id(formal) in inner}
    return read


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
