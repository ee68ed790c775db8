"""Arena planning: where each buffer of a traced function lives, and the arena's size.

The structured host (printer/structured.py) runs every traced function in a frame of
the arena. A buffer is placed at an offset fixed here, lives from the node that makes
it to the node that last reads it (`release_point`), then is released: its bytes may
hold a later buffer. Placement is first fit over lifetimes (`place`). A callee's frame
starts above the bytes live at its call (`Frame.high`), so a function's peak is the
largest of its own live bytes and, at each call, those bytes plus the callee's peak.
The arena size is the entry's peak.

A fold's carry alternates between two buffers (one when it runs once): layer l writes
buffer l % 2 and reads the other. The buffer that holds the last layer's result lives
on to that value's last read.

Planning is a pure function of the program, the site type and the kernels' temps: same
input, same frames.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Callable, Iterable, Sequence

from exactc.exporter import dims, types
from exactc.exporter.graph import Call, Fold, Function, Op, Program, Value
from exactc.exporter.kernels import ir
from exactc.exporter.kernels.layouts import fresh_name

ALIGN = 64  # every buffer starts on a 64-byte boundary (a cache line, a zmm register)
ITEMSIZE = {kind: s.itemsize for kind, s in types.STORAGE.items()}  # bytes of an element of each type


# ---- the anchors: one place each for what the mutant catalog changes -----------------------


def release_point(last_use: int) -> int:
    """The node after which a buffer is released: the last node that reads it."""
    return last_use


def align(offset: int) -> int:
    return (offset + ALIGN - 1) // ALIGN * ALIGN


def slot_bytes(count: dims.Extent, size: int) -> int:
    """The bytes a buffer of `count` elements of `size` bytes holds in the arena: its
    count at T_max when it follows the run-time length, so that one placement serves
    every length (a buffer at length T uses the first count(T) elements of its slot)."""
    return dims.upper(count) * size


# ---- values ---------------------------------------------------------------------------------


def is_view(op: Op) -> bool:
    """A reshape that is free: the same bytes under another shape (no launch)."""
    return op.primitive == "reshape" and not op.copy


def ctype(value: Value, site: str) -> str:
    """The C type of a value's elements."""
    return types.kind_ctype(value.kind, site)


def itemsize(value: Value, site: str) -> int:
    return types.kind_storage(value.kind, site).itemsize


# ---- frames ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Buffer:
    """Bytes of a function's frame: [offset, offset + nbytes), live over nodes
    [first, last] (inclusive)."""

    name: str
    ctype: str
    count: dims.Extent  # elements at the run-time length (an int, or a dims.Dim)
    nbytes: int  # the slot's bytes: at T_max
    first: int
    last: int
    shape: tuple[dims.Extent, ...]
    offset: int = -1


def by_node(buffers: list[Buffer], end: str) -> dict[int, list[Buffer]]:
    """The buffers by the node at their `end` ("first": born, "last": released), each
    node's in the given order."""
    out: dict[int, list[Buffer]] = {}
    for buf in buffers:
        out.setdefault(getattr(buf, end), []).append(buf)
    return out


def place(buffers: list[Buffer]) -> None:
    """First fit: each buffer (in order of birth) at the lowest aligned offset that
    overlaps no placed buffer alive at the same time.

    Buffers come in order of birth, so a placed buffer is alive with this one exactly
    when it is still alive at this one's birth; one that died before can meet no later
    buffer either and leaves the live list for good. Each buffer is compared with the
    buffers live at its birth only: linear in a function's nodes for a graph of bounded
    width (the probes exporter/nodes-* of verify/probes/exporter.py)."""
    live: list[Buffer] = []  # placed and alive at the current birth, in order of placement
    for buf in sorted(buffers, key=lambda b: (b.first, -b.nbytes)):
        live = [b for b in live if b.last >= buf.first]
        rivals = sorted(live, key=lambda b: b.offset)
        offset = 0
        for other in rivals:
            if offset + buf.nbytes <= other.offset:
                break
            offset = max(offset, align(other.offset + other.nbytes))
        buf.offset = offset
        live.append(buf)


@dataclasses.dataclass
class Frame:
    """The storage of one traced function: its buffers, placed; the end of the bytes
    live during each node; its peak, callees' frames included."""

    buffers: list[Buffer]
    by_value: dict[int, Buffer]  # temps: id(value) -> its buffer (a fold's stacked rows, not its carries)
    kernel_temps: dict[tuple[int, str], Buffer]  # (node index, kernel temp name) -> buffer
    carries: dict[int, list[list[Buffer]]]  # fold node index -> per carry, its buffers
    taken: set[str]  # the C names used in the function
    high: list[int] = dataclasses.field(default_factory=list)
    peak: int = 0

    def fresh(self, base: str) -> str:
        """A local name no value, function or other local of this function uses."""
        return fresh_name(base, self.taken)


KernelTemps = Callable[[Op], Sequence[ir.Buffer]]


def plan_frames(program: Program, site: str, kernel_temps: KernelTemps, reserved: Iterable[str]) -> dict[int, Frame]:
    """The frame of every function of `program` (by id), callees first. `kernel_temps`
    gives the scratch buffers a launch's kernel needs; `reserved` are C names no buffer
    may take (the program's functions, the kernels')."""
    reserved = set(reserved) | {f.name for f in program.function.walk()}
    frames: dict[int, Frame] = {}
    for fn in program.function.walk():  # callees first: their peaks are known
        frames[id(fn)] = plan_frame(fn, site, kernel_temps, reserved, frames)
    return frames


def plan_frame(fn: Function, site: str, kernel_temps: KernelTemps, reserved: set[str],
               frames: dict[int, Frame]) -> Frame:
    """One function's frame; `frames` holds its callees'."""
    outputs = {id(v) for v in fn.outputs}
    last_use: dict[int, int] = {}  # the last node that reads a value's bytes
    frame = Frame([], {}, {}, {}, set(reserved) | {v.name for v in fn.inputs + fn.outputs})
    for node in fn.nodes:
        frame.taken.update(v.name for v in node.outs)
    temps: list[tuple[Value, int]] = []
    root_value: dict[int, Value] = {}  # a view -> the value whose bytes it shows

    def base(v: Value) -> int:
        while id(v) in root_value:
            v = root_value[id(v)]
        return id(v)

    for index, node in enumerate(fn.nodes):
        for v in node.args:
            last_use[base(v)] = index
        if isinstance(node, Op) and is_view(node) and id(node.out) not in outputs:
            root_value[id(node.out)] = node.args[0]
            continue
        for v in node.outs:
            if id(v) not in outputs:
                temps.append((v, index))

    for v, index in temps:
        node = fn.nodes[index]
        if isinstance(node, Fold) and v not in node.row_outs:
            continue  # fold results live in the carry buffers below (its stacked rows in their own)
        last = release_point(last_use.get(id(v), index))
        buf = Buffer(v.name, ctype(v, site), v.size, slot_bytes(v.size, itemsize(v, site)), index, max(index, last),
                     v.shape)
        frame.buffers.append(buf)
        frame.by_value[id(v)] = buf
    for index, node in enumerate(fn.nodes):
        if isinstance(node, Op) and not is_view(node):
            for kb in kernel_temps(node):
                name = frame.fresh(f"{node.outs[0].name}_{kb.name}")
                buf = Buffer(name, kb.ctype, kb.size, slot_bytes(kb.size, ITEMSIZE[kb.type]), index, index, kb.shape)
                frame.buffers.append(buf)
                frame.kernel_temps[(index, kb.name)] = buf
        if isinstance(node, Fold):
            per_carry = []
            for v in node.carry_outs:
                count = min(node.count, 2)
                final = (node.count - 1) % 2
                bufs = []
                for b in range(count):
                    if b == final:  # a fold's result is never an output: the builder copies it
                        last = max(index, release_point(last_use.get(id(v), index)))
                    else:
                        last = index
                    buf = Buffer(frame.fresh(f"{v.name}_{'ab'[b]}"), ctype(v, site), v.size,
                                 slot_bytes(v.size, itemsize(v, site)), index, last, v.shape)
                    bufs.append(buf)
                    frame.buffers.append(buf)
                per_carry.append(bufs)
            frame.carries[index] = per_carry
    place(frame.buffers)

    ends = high_water(frame.buffers, len(fn.nodes))
    for index, node in enumerate(fn.nodes):
        high = ends[index]
        frame.high.append(high)
        frame.peak = max(frame.peak, high)
        callee = callee_peak(node, frames)
        if callee:
            frame.peak = max(frame.peak, align(high) + callee)
    return frame


def high_water(buffers: list[Buffer], nodes: int) -> list[int]:
    """For each node, the end of the highest buffer live during it (0 when none is): one
    sweep in node order, each buffer entering a heap at its birth and leaving it lazily
    once dead, so the cost is linear in the nodes and buffers (up to a log), not their
    product."""
    born = by_node(buffers, "first")
    heap: list[tuple[int, int]] = []  # (-end, last node alive) of the buffers born so far
    ends = []
    for index in range(nodes):
        for buf in born.get(index, ()):
            heapq.heappush(heap, (-(buf.offset + buf.nbytes), buf.last))
        while heap and heap[0][1] < index:
            heapq.heappop(heap)
        ends.append(-heap[0][0] if heap else 0)
    return ends


def callee_peak(node, frames: dict[int, Frame]) -> int:
    """The largest frame a node's calls need above the caller's live bytes."""
    if isinstance(node, Call):
        return frames[id(node.function)].peak
    if isinstance(node, Fold):
        return max(frames[id(body)].peak for _, _, body in node.segments())
    return 0

