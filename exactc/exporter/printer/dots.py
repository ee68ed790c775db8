"""Printing a whole block's int32 sum of qlinear_i (kernels/lower.py, lower_qlinear_i)
as one call of the runtime's block kernel (runtime/exactc_dot.h), where the block has
G = 32 values:

    q8:  for k < 32:  s = s + i32(xq[.., b + k]) * i32(wq[.., b + k])
         ->  s = s + exactc_dot_q8_32(&xq[.., b], &wq[.., b]);
    q4:  for k < 16:  s = s + i32(xq[.., b + k]) * ((i32(wq[.., c + k]) & 15) - 8)
         for kh < 16: s = s + i32(xq[.., b + kh + 16]) * ((i32(wq[.., c + kh]) >> 4) - 8)
         ->  s = s + exactc_dot_q4_32(&xq[.., b], &wq[.., c]);

The sum is exact in any order (docs/semantics.md section 15), so the call gives the
loops' bits whichever instruction the header picks. Only these exact loops are replaced:
a short last block (fewer than 32 values, or a q4 block whose high half is short) and
any other G keep their loops.

A k-quant super-block's sums (lower_qlinear_i_k: S = 0 [, M = 0], then per sub-block
its sums, S = S + sc·s [, M = M + m·xs]) are one call where a layout prints the nest
(planned.py; the plain nest keeps the lowering's loops, the definition the layout
property compares against):

    q4_k, q5_k:  exactc_dot_q4_k_256(&xq[.., 256 blk], &wq[.., size blk], &S, &M);
    q6_k:        exactc_dot_q6_k_256(&xq[.., 256 blk], &wq[.., size blk], &S);
"""

from __future__ import annotations

import dataclasses

from exactc.exporter.kernels.exprs import walk_expr
from exactc.exporter.kernels.ir import Access, Affine, Assign, Binary, Convert, Declare, Load, Loop, Stmt, Var

BLOCK = 32  # the values of a block the header's kernels sum
ROWS = 8  # the rows the x8 kernels sum at once (a laned body's n in lanes of 8)
TILE_M = 4  # the activation rows of a tile kernel (EXACTC_QTILE_M), by ROWS weight rows
Q4_OFFSET = 8
NIBBLE_MASK, NIBBLE_SHIFT = 15, 4


@dataclasses.dataclass(frozen=True)
class BlockSum:
    """`var = var + exactc_dot_<fmt>_32(&x, &w)`: the accesses at the block's first value
    and byte; the axes of the loops it stands for (the first statements of the body)."""

    fmt: str
    var: Var
    x: Access
    w: Access
    axes: tuple[str, ...]

    def function(self, rows: int = 1) -> str:
        return f"exactc_dot_{self.fmt}_32" + (f"x{rows}" if rows > 1 else "")


def _i32_constant(expr, value: int) -> bool:
    return isinstance(expr, Convert) and expr.to == "i32" and expr.a == Affine.constant(value)


def _loaded(expr, type_: str) -> Access | None:
    """The access of `i32(buffer[...])` of element type `type_`."""
    if isinstance(expr, Convert) and expr.to == "i32" and isinstance(expr.a, Load) and expr.a.access.type == type_:
        return expr.a.access
    return None


def _at_start(access: Access, axis: str) -> Access | None:
    """The access with `axis` at 0, where `axis` steps the last index by one (and no
    other entry names it)."""
    *outer, last = access.index
    if any(axis in entry.variables() for entry in outer) or dict(last.terms).get(axis) != 1:
        return None
    return Access(
        access.buffer, access.type, (*outer, Affine(tuple(t for t in last.terms if t[0] != axis), last.const))
    )


def _term(loop: Stmt) -> tuple[Var, Access, Binary | Access] | None:
    """(s, the activation access at the loop's start, the weight term) of a loop of
    extent BLOCK or BLOCK / 2 whose one statement is `s = s + i32(xq[..]) * value`."""
    if not isinstance(loop, Loop) or len(loop.body) != 1 or not isinstance(loop.axis.extent, int):
        return None
    (stmt,) = loop.body
    if not (
        isinstance(stmt, Assign)
        and stmt.var.type == "i32"
        and isinstance(stmt.value, Binary)
        and stmt.value.op == "+"
        and stmt.value.a == stmt.var
    ):
        return None
    product = stmt.value.b
    if not (isinstance(product, Binary) and product.op == "*"):
        return None
    x = _loaded(product.a, "i8")
    x = _at_start(x, loop.axis.name) if x else None
    if x is None:
        return None
    q8 = _loaded(product.b, "i8")
    return stmt.var, x, (_at_start(q8, loop.axis.name) if q8 else product.b)  # type: ignore[return-value]


def _nibble(value, axis: str) -> tuple[str, Access] | None:
    """("low" or "high", the byte's access at the loop's start) of `nibble - 8`."""
    if not (isinstance(value, Binary) and value.op == "-" and _i32_constant(value.b, Q4_OFFSET)):
        return None
    part = value.a
    if not isinstance(part, Binary):
        return None
    byte = _loaded(part.a, "u8")
    byte = _at_start(byte, axis) if byte else None
    if byte is None:
        return None
    if part.op == "&" and _i32_constant(part.b, NIBBLE_MASK):
        return "low", byte
    if part.op == ">>" and _i32_constant(part.b, NIBBLE_SHIFT):
        return "high", byte
    return None


def block_sum(body: tuple[Stmt, ...]) -> BlockSum | None:
    """The whole block's sum that `body` starts with, or None."""
    first = _term(body[0])
    if first is None:
        return None
    var, x, w = first
    head = body[0]
    assert isinstance(head, Loop)
    if isinstance(w, Access):
        return BlockSum("q8", var, x, w, (head.axis.name,)) if head.axis.extent == BLOCK else None
    low = _nibble(w, head.axis.name)
    if low is None or low[0] != "low" or head.axis.extent != BLOCK // 2 or len(body) < 2:
        return None
    second, tail = _term(body[1]), body[1]
    if second is None or second[0] != var or not isinstance(tail, Loop) or tail.axis.extent != BLOCK // 2:
        return None
    high = _nibble(second[2], tail.axis.name)
    shifted = Access(x.buffer, x.type, (*x.index[:-1], x.index[-1] + BLOCK // 2))
    if high is None or high != ("high", low[1]) or second[1] != shifted:
        return None
    return BlockSum("q4", var, x, low[1], (head.axis.name, tail.axis.name))


# ---- k-quant super-blocks ----
# per format: its sub-blocks, their values, and the byte of sub-block 0's first quant's
# low bits (the first byte its quant reads)
K_SUB_BLOCKS = {"q4_k": (8, 32, 16), "q5_k": (8, 32, 48), "q6_k": (16, 16, 0)}


@dataclasses.dataclass(frozen=True)
class SuperBlockSum:
    """A super-block's S (and M) as one call of exactc_dot_<fmt>_256: the accesses at its
    first activation and first byte; the statements it stands for, after S's (and M's)
    declarations."""

    fmt: str
    total: Var
    mins: Var | None
    x: Access
    w: Access
    declared: int
    length: int
    axes: tuple[str, ...]

    def function(self) -> str:
        return f"exactc_dot_{self.fmt}_256"


def _zero_i32(stmt: Stmt) -> Var | None:
    if isinstance(stmt, Declare) and stmt.var.type == "i32" and _i32_constant(stmt.init, 0):
        return stmt.var
    return None


def _adds_product(stmt: Stmt, var: Var, factor: Var) -> bool:
    """Whether `stmt` is `var = var + (scale * factor)`."""
    return (
        isinstance(stmt, Assign)
        and stmt.var == var
        and isinstance(stmt.value, Binary)
        and stmt.value.op == "+"
        and stmt.value.a == var
        and isinstance(stmt.value.b, Binary)
        and stmt.value.b.op == "*"
        and stmt.value.b.b == factor
    )


def _sub_block(body: tuple[Stmt, ...], total: Var, mins: Var | None, values: int) -> Loop | None:
    """The loop of one sub-block's statements at the start of `body`: s = 0 [, xs = 0],
    its loop of `values` (s = s + i32(xq) · quant [, xs = xs + i32(xq)]), S = S + sc·s
    [, M = M + m·xs]."""
    size = 3 if mins is None else 5
    if len(body) < size:
        return None
    s = _zero_i32(body[0])
    xs = _zero_i32(body[1]) if mins is not None else None
    loop = body[2 if mins is not None else 1]
    if s is None or (mins is not None and xs is None) or not isinstance(loop, Loop) or loop.axis.extent != values:
        return None
    if len(loop.body) != (1 if mins is None else 2) or _term_of(loop) is None:
        return None
    if not _adds_product(body[size - (2 if mins is not None else 1)], total, s):
        return None
    if mins is not None and not (xs is not None and _adds_product(body[4], mins, xs)):
        return None
    return loop


def _term_of(loop: Loop) -> tuple[Var, Access, Binary | Access] | None:
    """_term of the loop's first statement alone (a sub-block's loop also sums xs)."""
    return _term(Loop(loop.axis, loop.body[:1]))


def super_block_sum(body: tuple[Stmt, ...]) -> SuperBlockSum | None:
    """The whole super-block's sums `body` starts with, or None."""
    total = _zero_i32(body[0]) if body else None
    if total is None:
        return None
    # S, M, then a sub-block's s and xs: four declarations (Q6_K: S, then s and its loop)
    mins = _zero_i32(body[1]) if len(body) > 3 and isinstance(body[3], Declare) else None
    declared = 2 if mins is not None else 1
    rest, loops = body[declared:], []
    size = 5 if mins is not None else 3
    count, values, _ = K_SUB_BLOCKS["q4_k" if mins is not None else "q6_k"]  # Q5_K's are Q4_K's
    for group in range(count):
        loop = _sub_block(rest[size * group :], total, mins, values)
        if loop is None:
            return None
        loops.append(loop)
    found = _term_of(loops[0])
    if found is None or not isinstance(found[2], Binary):
        return None
    quant = found[2]
    fmt = "q6_k" if mins is None else "q5_k" if quant.op == "+" else "q4_k"
    first = next(
        (node.access for node in walk_expr(quant) if isinstance(node, Load) and node.access.type == "u8"), None
    )
    byte = _at_start(first, loops[0].axis.name) if first else None
    offset = K_SUB_BLOCKS[fmt][2]
    if byte is None or byte.index[-1].const < offset:
        return None
    w = Access(byte.buffer, byte.type, (*byte.index[:-1], byte.index[-1] + (-offset)))
    axes = tuple(loop.axis.name for loop in loops)
    return SuperBlockSum(fmt, total, mins, found[1], w, declared, declared + size * count, axes)


@dataclasses.dataclass(frozen=True)
class BlockTile:
    """A whole block's sum that starts from 0 and is then combined into the f32
    accumulator, `acc = acc + f32(s) * (xd[..] * wd[..])`, and used nowhere else: in a
    tile of TILE_M x ROWS outputs the sums and the combine are one call of
    exactc_qtile_<fmt> (runtime/exactc_dot.h)."""

    sum: BlockSum
    acc: Var
    xd: Access
    wd: Access

    def function(self) -> str:
        return f"exactc_qtile_{self.sum.fmt}"


def _f32_load(expr) -> Access | None:
    return expr.access if isinstance(expr, Load) and expr.access.type == "f32" else None


def block_tile(start: Stmt | None, body: tuple[Stmt, ...]) -> BlockTile | None:
    """The tile `body` is: `start` declares the sum at 0, the body is the block's sum
    then its combine and nothing more (the sum is read nowhere else), in f32; or None."""
    found = block_sum(body)
    if found is None or len(body) != len(found.axes) + 1:
        return None
    if not (isinstance(start, Declare) and start.var == found.var and start.init == Convert(Affine.constant(0), "i32")):
        return None
    step = body[-1]
    if not (isinstance(step, Assign) and step.var.type == "f32" and isinstance(step.value, Binary)):
        return None
    total = step.value
    if not (total.op == "+" and total.a == step.var and isinstance(total.b, Binary) and total.b.op == "*"):
        return None
    term = total.b
    if term.a != Convert(found.var, "f32") or not (isinstance(term.b, Binary) and term.b.op == "*"):
        return None
    xd, wd = _f32_load(term.b.a), _f32_load(term.b.b)
    if xd is None or wd is None:
        return None
    return BlockTile(found, step.var, xd, wd)
