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
"""

from __future__ import annotations

import dataclasses

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
