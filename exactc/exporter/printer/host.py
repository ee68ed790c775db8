"""The host printers: a traced Program (exporter/graph.py) at a site type as the C that
runs its kernels, reads its weights and inputs, and writes its outputs.

Two hosts, one output file:

- the **structured host** (the default) mirrors the model: one C function per distinct
  traced function form (a module called fifty times is printed once), a fold over
  layers is a C loop that slices the stacked parameters at `w + l * chunk`, an
  iteration that differs runs apart. Buffers live in one arena. Each function lays out
  its own frame: a buffer is placed at an offset fixed here, lives from the node that
  makes it to the node that last reads it, then is released (its bytes may hold the
  next buffer); a callee's frame starts above the bytes live at its call. The arena size
  is the peak of that structure, computed here (`Layout.peak`).
- the **straight-line host** (`straight=True`) is the oracle: every launch in order in
  one function, every buffer its own bytes, nothing released.

Checking builds (-DEXACTC_CHECKING) fill the arena with NaN bytes (0xFF) before the run
and every released buffer again at its release, check every allocation against the
arena's end, and report the peak the program reaches: a buffer read after its release,
or a frame placed wrong, shows.

A launch calls a per-launch function `launch_<nest function>` (section "Launches"): it
runs the nest over (lo, hi) = (0, extent); a plan's split driver replaces that body.

Printing is a pure function of its inputs: same program, same bytes.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Iterable

from exactc.exporter import graph, types
from exactc.exporter.graph import Call, Fold, Function, Op, Program, Value
from exactc.exporter.kernels import lower
from exactc.exporter.kernels.ir import Kernel
from exactc.exporter.printer.kernels import PrintedKernel, print_kernel

INDENT = "    "
ALIGN = 64  # every buffer starts on a 64-byte boundary (a cache line, a zmm register)

_ITEMSIZE = {kind: s.itemsize for kind, s in types.STORAGE.items()}


class HostError(ValueError):
    """A program the host printer cannot print."""


# ---- the anchors: one place each for what the mutant catalog changes -----------------------


def fold_slice(base: str, index: str, chunk: int) -> str:
    """The slice of a stacked parameter for layer `index`: `w + l * chunk`."""
    return f"{base} + {index} * {chunk}"


def release_point(last_use: int) -> int:
    """The node after which a buffer is released: the last node that reads it."""
    return last_use


def align(offset: int) -> int:
    return (offset + ALIGN - 1) // ALIGN * ALIGN


# ---- kernels: each distinct (primitive, shapes, attributes) lowered and printed once ------


@dataclasses.dataclass
class KernelUse:
    prefix: str  # k03: functions are k03_<nest name>
    kernel: Kernel
    printed: PrintedKernel
    prototypes: dict[str, str]  # function name -> its C parameter list


def op_shapes(op: Op) -> dict[str, tuple[int, ...]]:
    return {k: v.shape for k, v in op.operands().items()}


def _kernel_key(op: Op) -> tuple:
    return (op.primitive, tuple(sorted(op_shapes(op).items())), tuple(sorted((k, repr(v)) for k, v in op.attrs.items())))


_PROTOTYPE = re.compile(r"^(?:void|int) (\w+)\(([^;{}]*)\);$", re.M)


class KernelTable:
    """The kernels of a program at a site type, numbered in order of first use."""

    def __init__(self, site: str, plan: Any = None):
        self.site = site
        self.plan = plan
        self.plan_used: set[str] = set()
        self.uses: dict[tuple, KernelUse] = {}

    def get(self, op: Op) -> KernelUse:
        key = _kernel_key(op)
        use = self.uses.get(key)
        if use is None:
            prefix = f"k{len(self.uses):02d}"
            kernel = lower(op.primitive, self.site, op_shapes(op), op.attrs)
            plan = self.plan_for(kernel, prefix)
            printed = print_kernel(kernel, prefix) if plan is None else print_kernel(kernel, prefix, plan)
            prototypes = {m.group(1): m.group(2) for m in _PROTOTYPE.finditer(printed.source)}
            missing = [f for f in printed.functions if f not in prototypes]
            if missing:
                raise HostError(f"kernel {prefix} ({op.primitive}): no prototype printed for {missing}")
            use = KernelUse(prefix, kernel, printed, prototypes)
            self.uses[key] = use
        return use

    def plan_for(self, kernel: Kernel, prefix: str) -> Any:
        """The part of the program's plan (a plan file's, or the automatic one) for this
        kernel, validated; None when it has none."""
        if self.plan is None:
            return None
        plan, used = self.plan.for_kernel(kernel, prefix)
        self.plan_used |= used
        return plan

    def check_plan_used(self) -> None:
        if self.plan is None:
            return
        unused = [name for name in self.plan.entry_names() if name not in self.plan_used]
        if unused:
            raise HostError(f"plan: nest(s) {', '.join(unused)} match no nest of this program")

    def collect(self, program: Program) -> None:
        """Number every kernel the program launches, in the order the host runs them."""
        def visit(fn: Function) -> None:
            for node in fn.nodes:
                if isinstance(node, Op):
                    if not is_view(node):
                        self.get(node)
                elif isinstance(node, Call):
                    visit(node.function)
                else:
                    for _, _, body in node.segments():
                        visit(body)
        visit(program.function)

    def header(self) -> str:
        lines = [
            "/* The kernels' functions (kernels/), one per nest: each runs its nest over",
            " * [lo, hi) of its outermost parallel axis. Generated by exactc. */",
            "#ifndef EXACTC_KERNELS_H",
            "#define EXACTC_KERNELS_H",
            "",
            '#include "exactc_rt.h"',
            "",
        ]
        for use in self.uses.values():
            lines.append(f"/* {use.prefix}: {use.kernel.primitive} */")
            for name in use.printed.functions:
                lines.append(f"void {name}({use.prototypes[name]});")
            for name in getattr(use.printed, "drivers", ()) or ():
                if name:
                    lines.append(f"int {name}({use.prototypes[name]});")
        lines += ["", "#endif"]
        return "\n".join(lines) + "\n"

    def sources(self) -> dict[str, str]:
        return {f"{use.prefix}_{use.kernel.primitive}.c": use.printed.source for use in self.uses.values()}

    def nest_count(self) -> int:
        return sum(len(use.printed.functions) for use in self.uses.values())


def is_view(op: Op) -> bool:
    """A reshape that is free: the same bytes under another shape (no launch)."""
    return op.primitive == "reshape" and not op.copy


# ---- C spellings -------------------------------------------------------------------------


def ctype(value: Value, site: str) -> str:
    return "int32_t" if value.kind == "i32" else types.c_site_type(site)


def itemsize(value: Value, site: str) -> int:
    return 4 if value.kind == "i32" else _ITEMSIZE[site]


def shape_text(shape: Iterable[int]) -> str:
    shape = tuple(shape)
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(d) for d in shape) + ")"


def param_field(spec: graph.ParamSpec) -> str:
    return graph._c_name(spec.key)


# ---- frames: where each buffer of a function lives, and the peak -----------------------------


@dataclasses.dataclass
class Buffer:
    """Bytes of a function's frame: [offset, offset + nbytes), live over nodes
    [first, last] (inclusive)."""

    name: str
    ctype: str
    count: int
    nbytes: int
    first: int
    last: int
    shape: tuple[int, ...]
    offset: int = -1


@dataclasses.dataclass
class Layout:
    """A function's frame: its buffers, the live bytes at each node, its peak (with its
    callees' frames above)."""

    buffers: list[Buffer]
    high: list[int]  # per node: the end of the bytes live during it
    peak: int


def place(buffers: list[Buffer]) -> None:
    """First fit: each buffer (in order of birth) at the lowest aligned offset that
    overlaps no placed buffer alive at the same time."""
    placed: list[Buffer] = []
    for buf in sorted(buffers, key=lambda b: (b.first, -b.nbytes)):
        rivals = sorted((b for b in placed if not (b.last < buf.first or buf.last < b.first)), key=lambda b: b.offset)
        offset = 0
        for other in rivals:
            if offset + buf.nbytes <= other.offset:
                break
            offset = max(offset, align(other.offset + other.nbytes))
        buf.offset = offset
        placed.append(buf)


# ---- the structured host: storage of each value in one function ----------------------------


@dataclasses.dataclass
class _Frame:
    """The printed storage of one traced function."""

    fn: Function
    site: str
    expr: dict[int, str]  # id(value) -> C expression of its pointer
    buffers: list[Buffer]
    by_value: dict[int, Buffer]  # temps: id(value) -> its buffer (the root of views)
    kernel_temps: dict[tuple[int, str], Buffer]  # (node index, kernel temp name) -> buffer
    carries: dict[int, list[list[Buffer]]]  # fold node index -> per carry, its buffers
    layout: Layout | None = None
    taken: set[str] = dataclasses.field(default_factory=set)

    def fresh(self, base: str) -> str:
        """A local name no value, function or other local of this function uses."""
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}{k}"
        self.taken.add(name)
        return name


class StructuredHost:
    """Prints the network section of the structured host."""

    def __init__(self, program: Program, site: str, table: KernelTable):
        self.program = program
        self.site = site
        self.table = table
        self.frames: dict[int, _Frame] = {}
        for fn in program.function.walk():  # callees first: their peaks are known
            self.frames[id(fn)] = self._frame(fn)

    @property
    def peak(self) -> int:
        return self.frames[id(self.program.function)].layout.peak

    def peak_of(self, fn: Function) -> int:
        return self.frames[id(fn)].layout.peak

    # -- storage and liveness --

    def _frame(self, fn: Function) -> _Frame:
        site = self.site
        outputs = {id(v) for v in fn.outputs}
        last_use: dict[int, int] = {}  # the last node that reads a value's bytes
        frame = _Frame(fn, site, {}, [], {}, {}, {})
        frame.taken = {f.name for f in self.program.function.walk()} | {v.name for v in fn.inputs + fn.outputs}
        for node in fn.nodes:
            frame.taken.update(v.name for v in ((node.out,) if isinstance(node, Op) else node.outs))
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
            outs = (node.out,) if isinstance(node, Op) else node.outs
            for v in outs:
                if id(v) not in outputs:
                    temps.append((v, index))

        for v, index in temps:
            if isinstance(fn.nodes[index], Fold):
                continue  # fold results live in the carry buffers below
            last = release_point(last_use.get(id(v), index))
            buf = Buffer(v.name, ctype(v, site), v.size, v.size * itemsize(v, site), index, max(index, last), v.shape)
            frame.buffers.append(buf)
            frame.by_value[id(v)] = buf
        for index, node in enumerate(fn.nodes):
            if isinstance(node, Op) and not is_view(node):
                use = self.table.get(node)
                for kb in use.kernel.buffers:
                    if kb.role == "temp":
                        name = frame.fresh(f"{node.out.name}_{kb.name}")
                        buf = Buffer(name, kb.ctype, kb.size, kb.size * _ITEMSIZE[kb.type], index, index, kb.shape)
                        frame.buffers.append(buf)
                        frame.kernel_temps[(index, kb.name)] = buf
            if isinstance(node, Fold):
                per_carry = []
                for k, v in enumerate(node.outs):
                    count = min(node.count, 2)
                    final = (node.count - 1) % 2
                    bufs = []
                    for b in range(count):
                        if b == final and id(v) not in outputs:
                            last = max(index, release_point(last_use.get(id(v), index)))
                        else:
                            last = index
                        buf = Buffer(frame.fresh(f"{v.name}_{'ab'[b]}"), ctype(v, site), v.size, v.size * itemsize(v, site),
                                     index, last, v.shape)
                        bufs.append(buf)
                        frame.buffers.append(buf)
                    per_carry.append(bufs)
                    if id(v) not in outputs:
                        frame.by_value[id(v)] = bufs[final]
                frame.carries[index] = per_carry
        place(frame.buffers)

        high = []
        peak = 0
        for index, node in enumerate(fn.nodes):
            live = [b.offset + b.nbytes for b in frame.buffers if b.first <= index <= b.last]
            hw = max(live, default=0)
            high.append(hw)
            peak = max(peak, hw)
            callee = self._callee_peak(node)
            if callee:
                peak = max(peak, align(hw) + callee)
        frame.layout = Layout(frame.buffers, high, peak)
        return frame

    def _callee_peak(self, node) -> int:
        if isinstance(node, Call):
            return self.peak_of(node.function)
        if isinstance(node, Fold):
            return max(self.peak_of(body) for _, _, body in node.segments())
        return 0

    # -- printing --

    def signature(self, fn: Function, entry: bool) -> list[str]:
        """The parameters of fn's C function, each with its shape."""
        site = self.site
        params = []
        if entry:
            params.append(("const Weights *w", "the parameters"))
            formals = self.program.input_values
        else:
            formals = fn.inputs
        for v in formals:
            params.append((f"const {ctype(v, site)} *{v.name}", shape_text(v.shape)))
        for v in fn.outputs:
            params.append((f"{ctype(v, site)} *{v.name}", shape_text(v.shape) + ", written"))
        if self.peak_of(fn) or entry:
            params.append(("unsigned char *arena", f"{self.peak_of(fn)} bytes of scratch"))
        return params

    def function(self, fn: Function) -> list[str]:
        entry = fn is self.program.function
        frame = self.frames[id(fn)]
        site = self.site
        out = []
        params = self.signature(fn, entry)
        doc = f"/* {fn.name}: " + (f"{fn.doc.rstrip('.')}. " if fn.doc else "") + f"Frame {frame.layout.peak} bytes"
        doc += " (its callees' frames included)." if any(not isinstance(n, Op) for n in fn.nodes) else "."
        out.extend(_wrap_comment(doc.replace("*/", "* /") + " */"))
        out.extend(_print_signature(f"static void {fn.name}", params))
        out.append("{")
        expr: dict[int, str] = {}
        if entry:
            for spec, v in zip(self.program.params, self.program.param_values):
                expr[id(v)] = f"w->{param_field(spec)}"
            for v in self.program.input_values:
                expr[id(v)] = v.name
        else:
            for v in fn.inputs:
                expr[id(v)] = v.name
        for v in fn.outputs:
            expr[id(v)] = v.name
        used_inputs = {id(a) for node in fn.nodes for a in node.args}
        for v in (self.program.input_values if entry else fn.inputs):
            if id(v) not in used_inputs:
                out.append(f"{INDENT}(void){v.name};")
        if entry and not frame.layout.peak:
            out.append(f"{INDENT}(void)arena;")

        for index, node in enumerate(fn.nodes):
            # allocate what this node makes
            born = [b for b in frame.buffers if b.first == index]
            for buf in born:
                out.append(f"{INDENT}{buf.ctype} *{buf.name} = ARENA({buf.ctype}, arena + {buf.offset}, {buf.count});"
                           f"  /* {shape_text(buf.shape)} */")
            for v_id, buf in frame.by_value.items():
                if buf.first == index and not isinstance(node, Fold):
                    expr[v_id] = buf.name
            if isinstance(node, Op):
                if is_view(node) and id(node.out) not in {id(v) for v in fn.outputs}:
                    src = expr[id(node.args[0])]
                    out.append(f"{INDENT}const {ctype(node.out, site)} *{node.out.name} = {src};"
                               f"  /* {shape_text(node.out.shape)}: a view of {node.args[0].name} */")
                    expr[id(node.out)] = node.out.name
                else:
                    out.extend(self.launch(node, index, frame, expr, INDENT))
            elif isinstance(node, Call):
                out.extend(self.call(node, index, frame, expr))
            else:
                out.extend(self.fold(node, index, frame, expr))
            # release what dies here
            for buf in frame.buffers:
                if buf.last == index:
                    out.append(f"{INDENT}RELEASE({buf.name}, {buf.count});")
        out.append("}")
        return out

    def launch(self, op: Op, index: int, frame: _Frame, expr: dict[int, str], pad: str) -> list[str]:
        use = self.table.get(op)
        operands = op.operands()
        names = {k: expr[id(v)] for k, v in operands.items()}
        names["y"] = expr[id(op.out)]
        for kb in use.kernel.buffers:
            if kb.role == "temp":
                names[kb.name] = frame.kernel_temps[(index, kb.name)].name
        return [f"{pad}{line}" for line in launch_lines(op, use, names)]

    def call(self, node: Call, index: int, frame: _Frame, expr: dict[int, str]) -> list[str]:
        args = [expr[id(v)] for v in node.args] + [expr[id(v)] for v in node.outs]
        if self.peak_of(node.function):
            args.append(f"arena + {align(frame.layout.high[index])}")
        return call_lines(node.function.name, args, INDENT)

    def fold(self, node: Fold, index: int, frame: _Frame, expr: dict[int, str]) -> list[str]:
        out = []
        site = self.site
        carries = frame.carries[index]
        outputs = {id(v) for v in frame.fn.outputs}
        names = [frame.fresh(f"{v.name}_l") for v in node.outs]
        nexts = [frame.fresh(f"{v.name}_next") for v in node.outs]
        stacked = [(expr[id(v)], math.prod(v.shape[1:])) for v in node.stacked]
        carried = ", ".join(v.name for v in node.outs)
        out.append(f"{INDENT}/* The layers: {node.body.name} for l < {node.count}, the carry ({carried}) alternating")
        out.append(f"{INDENT} * between two buffers; layer l's parameters start at l * chunk of the stacked ones. */")
        for k, v in enumerate(node.carry):
            out.append(f"{INDENT}const {ctype(v, site)} *{names[k]} = {expr[id(v)]};  /* {shape_text(v.shape)} */")

        base = align(frame.layout.high[index])
        for start, stop, body in node.segments():
            layer = "l" if stop - start > 1 else str(start)
            pad = INDENT * 2 if stop - start > 1 else INDENT
            body_lines = []
            dst = []
            for k, v in enumerate(node.outs):
                bufs = carries[k]
                if len(bufs) == 1:
                    d = bufs[0].name
                elif layer == "l":
                    d = f"({layer} % 2 == 0 ? {bufs[0].name} : {bufs[1].name})"
                else:
                    d = bufs[start % 2].name
                dst.append(d)
            args = [names[k] for k in range(len(node.carry))]
            args += [fold_slice(b, layer, chunk) for b, chunk in stacked]
            args += [expr[id(v)] for v in node.shared]
            for k, v in enumerate(node.outs):
                body_lines.append(f"{pad}{ctype(v, site)} *{nexts[k]} = {dst[k]};")
            call_args = args + nexts
            if self.peak_of(body):
                call_args.append(f"arena + {base}")
            body_lines.extend(call_lines(body.name, call_args, pad))
            for k, v in enumerate(node.outs):
                body_lines.append(f"{pad}{names[k]} = {nexts[k]};")
                body_lines.append(f'{pad}EXACTC_TRACE_CARRY("{node.body.name}", {layer}, {k}, {names[k]}, {v.size});')
            if stop - start > 1:
                out.append(f"{INDENT}for (int l = {start}; l < {stop}; l++) {{")
                out.extend(body_lines)
                out.append(f"{INDENT}}}")
            else:
                out.append(f"{INDENT}{{  /* layer {start} runs apart: {body.name} */" if body is not node.body
                           else f"{INDENT}{{  /* layer {start} */")
                out.extend(INDENT + line for line in body_lines)
                out.append(f"{INDENT}}}")
        for k, v in enumerate(node.outs):
            if id(v) in outputs:
                raise HostError("a fold's result is a function output; graph tracing copies it")
            expr[id(v)] = carries[k][(node.count - 1) % 2].name
        return out


def launch_lines(op: Op, use: KernelUse, names: dict[str, str]) -> list[str]:
    """The calls of a kernel's launch functions, with a comment naming the primitive."""
    lines = []
    attrs = ", ".join(f"{k}={v!r}" for k, v in op.attrs.items() if not k.startswith("has_"))
    operands = ", ".join(f"{v.name}{list(v.shape)}" for v in op.args)
    note = f"/* {op.out.name}{list(op.out.shape)} = {op.primitive}({operands}{', ' + attrs if attrs else ''}) */"
    lines.append(note)
    for item, fn in zip(use.kernel.launches, use.printed.functions):
        lines.extend(call_lines(f"launch_{fn}", [names[a] for a in item.args], ""))
    return lines


def call_lines(name: str, args: list[str], pad: str) -> list[str]:
    """`name(args);`, one argument per line when the call is long."""
    one = f"{pad}{name}({', '.join(args)});"
    if len(one) <= 100:
        return [one]
    head = f"{pad}{name}("
    lead = " " * len(head)
    return [head + args[0] + ","] + [f"{lead}{a}," for a in args[1:-1]] + [f"{lead}{args[-1]});"]


def _wrap_comment(text: str, width: int = 92) -> list[str]:
    """A one-paragraph C comment, wrapped."""
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = " *"
        line = f"{line} {word}" if line else word
    lines.append(line)
    return lines


def _print_signature(head: str, params: list[tuple[str, str]]) -> list[str]:
    if not params:
        return [f"{head}(void)"]
    width = max(len(p) for p, _ in params) + 1
    out = [f"{head}("]
    for k, (param, note) in enumerate(params):
        sep = ")" if k == len(params) - 1 else ","
        out.append(f"{INDENT}{(param + sep):<{width}} /* {note} */")
    return out


# ---- the straight-line host ----------------------------------------------------------------


class StraightLineHost:
    """Every launch in order in one function; every buffer its own bytes."""

    def __init__(self, program: Program, site: str, table: KernelTable):
        self.program = program
        self.site = site
        self.table = table
        self.lines: list[str] = []
        self.offset = 0
        self.launches = 0
        self.names: set[str] = set()
        self._print()

    @property
    def peak(self) -> int:
        return self.offset

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def alloc(self, base: str, ct: str, count: int, nbytes: int, shape) -> str:
        name = self.fresh(base)
        offset = align(self.offset)
        self.lines.append(f"{INDENT}{ct} *{name} = ARENA({ct}, arena + {offset}, {count});  /* {shape_text(shape)} */")
        self.offset = offset + nbytes
        return name

    def _print(self) -> None:
        program, site = self.program, self.site
        env: dict[int, str] = {}
        for spec, v in zip(program.params, program.param_values):
            env[id(v)] = f"w->{param_field(spec)}"
            self.names.add(v.name)
        for v in program.input_values:
            env[id(v)] = v.name
            self.names.add(v.name)
        for v in program.function.outputs:
            env[id(v)] = v.name
            self.names.add(v.name)
        self.run(program.function, env, "")
        used = {id(a) for node in program.function.nodes for a in node.args}
        for v in program.input_values:
            if id(v) not in used:
                self.lines.insert(0, f"{INDENT}(void){v.name};")

    def run(self, fn: Function, env: dict[int, str], where: str) -> None:
        site = self.site
        outputs = {id(v) for v in fn.outputs}
        for node in fn.nodes:
            if isinstance(node, Op):
                if is_view(node) and id(node.out) not in outputs:
                    env[id(node.out)] = env[id(node.args[0])]
                    continue
                if id(node.out) not in env:
                    v = node.out
                    env[id(v)] = self.alloc(v.name + where, ctype(v, site), v.size, v.size * itemsize(v, site), v.shape)
                use = self.table.get(node)
                names = {k: env[id(v)] for k, v in node.operands().items()}
                names["y"] = env[id(node.out)]
                for kb in use.kernel.buffers:
                    if kb.role == "temp":
                        names[kb.name] = self.alloc(f"{node.out.name}{where}_{kb.name}", kb.ctype, kb.size,
                                                    kb.size * _ITEMSIZE[kb.type], kb.shape)
                self.lines.extend(INDENT + line for line in launch_lines(node, use, names))
                self.launches += len(use.kernel.launches)
            elif isinstance(node, Call):
                inner = {id(f): env[id(a)] for f, a in zip(node.function.inputs, node.args)}
                for f, v in zip(node.function.outputs, node.outs):
                    if id(v) in outputs:
                        inner[id(f)] = env[id(v)]
                self.lines.append(f"{INDENT}/* {node.function.name}{where} */")
                self.run(node.function, inner, where)
                for f, v in zip(node.function.outputs, node.outs):
                    env[id(v)] = inner[id(f)]
            else:
                carry = [env[id(v)] for v in node.carry]
                for layer in range(node.count):
                    body = node.body_of(layer)
                    inner: dict[int, str] = {}
                    formals = body.inputs
                    nc, ns = len(node.carry), len(node.stacked)
                    for f, c in zip(formals[:nc], carry):
                        inner[id(f)] = c
                    for f, v in zip(formals[nc: nc + ns], node.stacked):
                        chunk = math.prod(v.shape[1:])
                        inner[id(f)] = f"{env[id(v)]} + {layer * chunk}"
                    for f, v in zip(formals[nc + ns:], node.shared):
                        inner[id(f)] = env[id(v)]
                    self.lines.append(f"{INDENT}/* {body.name}, layer {layer} */")
                    self.run(body, inner, f"{where}_l{layer}")
                    carry = [inner[id(f)] for f in body.outputs]
                    for k, (c, v) in enumerate(zip(carry, node.outs)):
                        self.lines.append(f'{INDENT}EXACTC_TRACE_CARRY("{node.body.name}", {layer}, {k}, {c}, {v.size});')
                for v, c in zip(node.outs, carry):
                    env[id(v)] = c
                    if id(v) in outputs:
                        raise HostError("a fold's result is a function output; graph tracing copies it")

    def function(self) -> list[str]:
        program = self.program
        params = [("const Weights *w", "the parameters")]
        for v in program.input_values:
            params.append((f"const {ctype(v, self.site)} *{v.name}", shape_text(v.shape)))
        for v in program.function.outputs:
            params.append((f"{ctype(v, self.site)} *{v.name}", shape_text(v.shape) + ", written"))
        params.append(("unsigned char *arena", f"{self.peak} bytes: every buffer its own"))
        out = [f"/* {program.entry}, straight-line: {self.launches} launches in order, nothing released. */"]
        out.extend(_print_signature(f"static void {program.function.name}", params))
        out.append("{")
        out.extend(self.lines)
        out.append("}")
        return out


def launch_count(program: Program, table: KernelTable) -> int:
    """Launches one run executes (the structured and straight-line hosts run the same)."""
    def count(fn: Function) -> int:
        total = 0
        for node in fn.nodes:
            if isinstance(node, Op):
                total += 0 if is_view(node) else len(table.get(node).kernel.launches)
            elif isinstance(node, Call):
                total += count(node.function)
            else:
                total += sum(count(node.body_of(i)) for i in range(node.count))
        return total
    return count(program.function)


# ---- the whole host file -------------------------------------------------------------------


_ARENA_SECTION = """\
/* ------------------------------------------------------------------------------------
 * The arena: every buffer of the network lives here, at an offset fixed by the exporter.
 * ARENA_BYTES is the peak computed from the structure. Checking builds
 * (-DEXACTC_CHECKING) fill it with NaN bytes (0xFF) before the run and each released
 * buffer again at its release, so a buffer read after its release shows; they also check
 * every allocation against the arena's end and record the peak the program reaches.
 * ---------------------------------------------------------------------------------- */
#define ARENA_BYTES ((size_t){peak})

#ifdef EXACTC_CHECKING
static unsigned char *arena_base;
static size_t arena_reached;

static inline void *arena_take(unsigned char *at, size_t bytes)
{
    size_t end = (size_t)(at - arena_base) + bytes;
    if (at < arena_base || end > ARENA_BYTES) {
        fprintf(stderr, "exactc: arena overflow: %zu bytes at offset %td of %zu\\n", bytes,
                at - arena_base, ARENA_BYTES);
        abort();
    }
    if (end > arena_reached) arena_reached = end;
    memset(at, 0xff, bytes); /* NaN in every float type: an unwritten element shows */
    return at;
}

static inline void arena_release(void *p, size_t bytes)
{
    memset(p, 0xff, bytes);
}
#define ARENA(type, at, count) ((type *)arena_take((at), (size_t)(count) * sizeof(type)))
#define RELEASE(p, count) arena_release((p), (size_t)(count) * sizeof *(p))
#else
#define ARENA(type, at, count) ((type *)(void *)(at))
#define RELEASE(p, count) ((void)(p), (void)(count))
#endif
"""


def _banner(title: str) -> list[str]:
    return [
        "/* ------------------------------------------------------------------------------------",
        f" * {title}",
        " * ---------------------------------------------------------------------------------- */",
    ]


@dataclasses.dataclass
class PrintedProgram:
    files: dict[str, str]  # path in the exported directory -> text
    arena_peak: int  # of the host printed
    structured_peak: int
    straight_peak: int
    nests: int
    launches: int
    kernels: int


def print_program(program: Program, site: str, plan: Any = None, straight: bool = False) -> PrintedProgram:
    """The C sources of `program` at `site`: kernels/*.c, kernels.h and model.c."""
    types.check_site(site)
    table = KernelTable(site, plan)
    table.collect(program)
    table.check_plan_used()
    structured = StructuredHost(program, site, table)
    line = StraightLineHost(program, site, table)
    host = line if straight else structured
    peak = host.peak
    st = site
    site_c = types.c_site_type(site)
    out: list[str] = []
    cfg = getattr(program, "config", None)
    out += [
        f"/* exactc: {program.model} `{program.entry}` at site type {site}, "
        f"{'straight-line' if straight else 'structured'} host.",
        " *",
    ]
    if cfg is not None:
        out.append(f" * config: {cfg}")
        out.append(" *")
    out += [
        " * usage: ./model WEIGHTS.safetensors INPUT_DIR OUTPUT_DIR",
        " * reads INPUT_DIR/<input>.npy, writes OUTPUT_DIR/<output>.npy; see README.md.",
        " *",
        " * Sections: parameters, the arena, launches, the network (" + ("one function, every launch in order"
                                                                         if straight else "one function per module form, callees first")
        + "), reading the weights, main.",
        " */",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "#include <time.h>",
        "",
        '#include "exactc_rt.h"',
        '#include "kernels.h"',
        "#ifdef EXACTC_PROBE /* instruction-count probes (exactc's verify/probes.py) */",
        "#include <valgrind/callgrind.h>",
        "#endif",
        "",
    ]
    # parameters
    out += _banner("The parameters: one block read from the .safetensors file; stacked parameters hold\n"
                   " * every layer's tensor one after the other (layer l at l * chunk).")
    out.append("typedef struct {")
    offset = 0
    table_rows = []
    for spec in program.params:
        size = math.prod(spec.full_shape)
        where = f"{spec.name}, stacked over {spec.layers} layers" if spec.layers else spec.name
        out.append(f"{INDENT}{site_c} *{param_field(spec)};  /* {shape_text(spec.full_shape)}: {where} */")
        shape = ", ".join(str(d) for d in spec.shape)
        name = spec.name.replace("%", "%%").replace("{l}", "%d")
        table_rows.append(f'{INDENT}{{"{name}", {spec.layers}, {len(spec.shape)}, {{{shape}}}, {offset}}},')
        offset += size
    out.append("} Weights;")
    out.append("")
    out.append(f"#define PARAM_COUNT ((size_t){offset})")
    out.append(f'#define PARAM_DTYPE "{types.STORAGE[site].safetensors}"')
    out.append("")
    out.append("/* Each tensor in the file, the shape it must have, where it goes in the block. */")
    out.append("static const struct {")
    out.append(f"{INDENT}const char *name; /* printf format: %d is the layer */")
    out.append(f"{INDENT}int layers;       /* 0: not stacked */")
    out.append(f"{INDENT}int ndim;")
    out.append(f"{INDENT}int64_t shape[EXACTC_ST_MAX_DIMS];")
    out.append(f"{INDENT}size_t offset;    /* in elements, from the block's start */")
    out.append("} PARAMS[] = {")
    out.extend(table_rows)
    out.append("};")
    out.append("")
    out.append(_ARENA_SECTION.replace("{peak}", str(peak)))
    # launches
    out += _banner("Launches: one per nest. Each runs its nest over (lo, hi) = (0, extent), the whole\n"
                   " * range on the calling thread; a plan's thread split replaces the body with a driver.")
    for use in table.uses.values():
        out.extend(launch_function(use))
    out.append("")
    # network
    out += _banner("The network" + (": every launch in order (the straight-line oracle)." if straight else
                                   ": one function per module form; a fold over layers is a loop."))
    if straight:
        out.extend(line.function())
        out.append("")
    else:
        for fn in program.function.walk():
            out.extend(structured.function(fn))
            out.append("")
    out.extend(_main_section(program, site))
    model_c = "\n".join(out) + "\n"

    files = {"model.c": model_c, "kernels.h": table.header()}
    for name, text in table.sources().items():
        files[f"kernels/{name}"] = text
    return PrintedProgram(files, peak, structured.peak, line.peak, table.nest_count(), line.launches, len(table.uses))


def launch_function(use: KernelUse) -> list[str]:
    """`launch_<function>`: the hook a thread split replaces."""
    out = []
    buffers = {b.name: b for b in use.kernel.buffers}
    ranges = getattr(use.printed, "ranges", ()) or ()
    drivers = getattr(use.printed, "drivers", ()) or ()
    for k, (item, fn) in enumerate(zip(use.kernel.launches, use.printed.functions)):
        writes = set(item.nest.writes())
        params = []
        for a in item.args:
            b = buffers[a]
            params.append(f"{'' if a in writes else 'const '}{b.ctype} *{a}")
        extent = ranges[k] if k < len(ranges) else item.extent
        driver = drivers[k] if k < len(drivers) else None
        out.append(f"static void launch_{fn}({', '.join(params)})")
        out.append("{")
        if driver:
            out.append(f"{INDENT}int status = {driver}({', '.join(item.args)});  /* the plan's thread split */")
            out.append(f"{INDENT}if (status != 0) {{")
            out.append(f'{INDENT * 2}fprintf(stderr, "exactc: {driver}: the split\'s pieces fail their coverage check (%d)\\n", status);')
            out.append(f"{INDENT * 2}abort();")
            out.append(f"{INDENT}}}")
        else:
            out.append(f"{INDENT}{fn}({', '.join(item.args)}, 0, {extent});")
        out.append("}")
    return out


def _main_section(program: Program, site: str) -> list[str]:
    site_c = types.c_site_type(site)
    out = _banner("Reading the weights: every tensor checked for its name, dtype and shape; all\n"
                  " * problems listed, then a non-zero exit.")
    out += [
        "static int load_weights(const char *path, Weights *w, void **block)",
        "{",
        "    char err[512];",
        "    exactc_safetensors st;",
        "    if (exactc_st_open(path, &st, err, sizeof err) != 0) {",
        '        fprintf(stderr, "exactc: %s: %s\\n", path, err);',
        "        return -1;",
        "    }",
        f"    {site_c} *data = malloc(PARAM_COUNT * sizeof *data);",
        "    if (data == NULL) {",
        '        fprintf(stderr, "exactc: out of memory for %zu parameters\\n", PARAM_COUNT);',
        "        exactc_st_close(&st);",
        "        return -1;",
        "    }",
        "    int bad = 0;",
        "    for (size_t i = 0; i < sizeof PARAMS / sizeof PARAMS[0]; i++) {",
        "        size_t chunk = 1;",
        "        for (int d = 0; d < PARAMS[i].ndim; d++) chunk *= (size_t)PARAMS[i].shape[d];",
        "        int layers = PARAMS[i].layers > 0 ? PARAMS[i].layers : 1;",
        "        for (int l = 0; l < layers; l++) {",
        "            char name[512];",
        "            snprintf(name, sizeof name, PARAMS[i].name, l);",
        "            if (exactc_st_read(&st, name, PARAM_DTYPE, PARAMS[i].ndim, PARAMS[i].shape,",
        "                               data + PARAMS[i].offset + (size_t)l * chunk, err, sizeof err) != 0) {",
        '                fprintf(stderr, "exactc: %s: %s\\n", path, err);',
        "                bad++;",
        "            }",
        "        }",
        "    }",
        "    exactc_st_close(&st);",
        "    if (bad) {",
        '        fprintf(stderr, "exactc: %s: %d tensor(s) missing or wrong\\n", path, bad);',
        "        free(data);",
        "        return -1;",
        "    }",
    ]
    for k, spec in enumerate(program.params):
        out.append(f"    w->{param_field(spec)} = data + PARAMS[{k}].offset;")
    out += ["    *block = data;", "    return 0;", "}", ""]

    out += _banner("main: read the inputs (.npy), run the network, write the outputs (.npy). bf16 inputs\n"
                   " * are read as f32 and rounded to bf16 (nearest even); bf16 outputs are written\n"
                   " * widened to f32, which is exact.")
    # input readers
    out += [
        "/* Read an .npy input of exactly `count` elements with this shape into `dst`. */",
        "static int read_input(const char *dir, const char *name, int ndim, const int64_t *shape, int kind,",
        "                      void *dst)",
        "{",
        "    char path[4096], err[512];",
        '    if (snprintf(path, sizeof path, "%s/%s.npy", dir, name) >= (int)sizeof path) {',
        '        fprintf(stderr, "exactc: input path too long: %s/%s.npy\\n", dir, name);',
        "        return -1;",
        "    }",
        "    exactc_array a;",
        "    if (exactc_npy_read(path, &a, err, sizeof err) != 0) {",
        '        fprintf(stderr, "exactc: %s: %s\\n", path, err);',
        "        return -1;",
        "    }",
        "    /* kind 0: int32; 1: f64; 2: f32; 3: bf16, given as f32 */",
        "    static const exactc_dtype want[] = {EXACTC_I32, EXACTC_F64, EXACTC_F32, EXACTC_F32};",
        '    static const char *want_name[] = {"int32 (<i4)", "f64 (<f8)", "f32 (<f4)", "f32 (<f4), rounded to bf16"};',
        "    int ok = a.dtype == want[kind] && a.ndim == ndim;",
        "    for (int d = 0; ok && d < ndim; d++) ok = a.shape[d] == shape[d];",
        "    if (!ok) {",
        '        char got[160] = "", need[160] = "";',
        "        for (int d = 0; d < a.ndim; d++)",
        '            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)a.shape[d]);',
        "        for (int d = 0; d < ndim; d++)",
        '            snprintf(need + strlen(need), sizeof need - strlen(need), "%s%lld", d ? ", " : "", (long long)shape[d]);',
        '        fprintf(stderr, "exactc: %s: input %s must be %s of shape (%s); the file holds dtype %d of shape (%s)\\n",',
        "                path, name, want_name[kind], need, (int)a.dtype, got);",
        "        exactc_array_free(&a);",
        "        return -1;",
        "    }",
        "    if (kind == 3) {",
        "        size_t n = a.nbytes / sizeof(float);",
        "        const float *src = a.data;",
        "        exactc_bf16 *out = dst;",
        "        for (size_t i = 0; i < n; i++) out[i] = exactc_f32_to_bf16(src[i]);",
        "    } else {",
        "        memcpy(dst, a.data, a.nbytes);",
        "    }",
        "    exactc_array_free(&a);",
        "    return 0;",
        "}",
        "",
        "/* Write an output; bf16 is widened to f32 (exact). */",
        "static int write_output(const char *dir, const char *name, int ndim, const int64_t *shape, int kind,",
        "                        const void *src, size_t count)",
        "{",
        "    char path[4096], err[512];",
        '    if (snprintf(path, sizeof path, "%s/%s.npy", dir, name) >= (int)sizeof path) {',
        '        fprintf(stderr, "exactc: output path too long: %s/%s.npy\\n", dir, name);',
        "        return -1;",
        "    }",
        "    static const exactc_dtype as[] = {EXACTC_I32, EXACTC_F64, EXACTC_F32, EXACTC_F32};",
        "    exactc_array a;",
        "    memset(&a, 0, sizeof a);",
        "    a.dtype = as[kind];",
        "    a.ndim = ndim;",
        "    for (int d = 0; d < ndim; d++) a.shape[d] = shape[d];",
        "    a.nbytes = count * exactc_dtype_size(a.dtype);",
        "    float *wide = NULL;",
        "    if (kind == 3) {",
        "        wide = malloc(count * sizeof *wide);",
        "        if (wide == NULL) return -1;",
        "        const exactc_bf16 *h = src;",
        "        for (size_t i = 0; i < count; i++) wide[i] = exactc_bf16_to_f32(h[i]);",
        "        a.data = wide;",
        "    } else {",
        "        a.data = (void *)(uintptr_t)src;",
        "    }",
        "    int rc = exactc_npy_write(path, &a, err, sizeof err);",
        "    if (rc != 0) fprintf(stderr, \"exactc: %s: %s\\n\", path, err);",
        "    free(wide);",
        "    return rc;",
        "}",
        "",
    ]
    kind_of = {"f64": 1, "f32": 2, "bf16": 3}

    def kind(v: Value) -> int:
        return 0 if v.kind == "i32" else kind_of[site]

    out += ["int main(int argc, char **argv)", "{"]
    out += [
        "    if (argc < 4 || argc % 2 != 0) {",
        '        fprintf(stderr, "usage: %s WEIGHTS.safetensors INPUT_DIR OUTPUT_DIR [INPUT_DIR OUTPUT_DIR ...]\\n", argv[0]);',
        "        return 2;",
        "    }",
        "    Weights w;",
        "    void *block = NULL;",
        "    if (load_weights(argv[1], &w, &block) != 0) return 1;",
        "    int rc = 0;",
    ]
    entry = program.function
    io = []
    for spec, v in zip(program.inputs, program.input_values):
        io.append(("in", spec.name, v))
    for name, v in zip(program.output_names, entry.outputs):
        io.append(("out", name, v))
    for direction, name, v in io:
        c = ctype(v, site)
        dims = ", ".join(str(d) for d in v.shape)
        out.append(f"    static const int64_t {v.name}_shape[] = {{{dims}}};")
        out.append(f"    {c} *{v.name} = malloc({v.size} * sizeof *{v.name});  /* {shape_text(v.shape)} */")
    allocated = " || ".join(f"{v.name} == NULL" for _, _, v in io)
    out += [
        "    unsigned char *arena = aligned_alloc(64, (ARENA_BYTES + 63) / 64 * 64 + 64);",
        f"    if (arena == NULL || {allocated}) {{",
        '        fprintf(stderr, "exactc: out of memory\\n");',
        "        return 1;",
        "    }",
    ]
    out += [
        "    /* Each INPUT_DIR OUTPUT_DIR pair is one run of the network; the weights load once. */",
        "    for (int pair = 2; rc == 0 && pair + 1 < argc; pair += 2) {",
        "    const char *in_dir = argv[pair], *out_dir = argv[pair + 1];",
    ]
    run_start = len(out) - 1
    for direction, name, v in io:
        if direction == "in":
            out.append(f'    if (rc == 0 && read_input(in_dir, "{name}", {len(v.shape)}, {v.name}_shape, {kind(v)}, {v.name}) != 0) rc = 1;')
    args = ["&w"] + [v.name for d, _, v in io if d == "in"] + [v.name for d, _, v in io if d == "out"]
    fn_has_arena = True
    out += [
        "    if (rc == 0) {",
        "#ifdef EXACTC_CHECKING",
        "        arena_base = arena;",
        "        memset(arena, 0xff, ARENA_BYTES);",
        "#endif",
        '        const char *repeat = getenv("EXACTC_REPEAT"); /* timing: run the network N times */',
        "        long runs = repeat != NULL ? strtol(repeat, NULL, 10) : 1;",
        "        if (runs < 1) runs = 1;",
        "        struct timespec t0, t1;",
        "        timespec_get(&t0, TIME_UTC);",
        "#ifdef EXACTC_PROBE",
        "        CALLGRIND_TOGGLE_COLLECT; /* callgrind counts the network only */",
        "#endif",
        "        for (long r = 0; r < runs; r++)",
        f"            {entry.name}({', '.join(args + (['arena'] if fn_has_arena else []))});",
        "#ifdef EXACTC_PROBE",
        "        CALLGRIND_TOGGLE_COLLECT;",
        "#endif",
        "        timespec_get(&t1, TIME_UTC);",
        "        if (repeat != NULL)",
        '            fprintf(stderr, "exactc: %s: %.9f s per run (%ld runs)\\n", argv[0],',
        "                    ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) / (double)runs, runs);",
        "#ifdef EXACTC_CHECKING",
        '        fprintf(stderr, "exactc: arena peak reached %zu bytes of %zu computed\\n", arena_reached, ARENA_BYTES);',
        "#endif",
        "    }",
    ]
    for direction, name, v in io:
        if direction == "out":
            out.append(f'    if (rc == 0 && write_output(out_dir, "{name}", {len(v.shape)}, {v.name}_shape, {kind(v)}, {v.name}, {v.size}) != 0) rc = 1;')
    # The run's lines sit inside the loop over pairs: one level deeper (directives stay
    # in column 0).
    out[run_start:] = [line if line.startswith("#") else "    " + line for line in out[run_start:]]
    out.append("    }")
    for _, _, v in io:
        out.append(f"    free({v.name});")
    out += ["    free(arena);", "    free(block);", "    return rc;", "}"]
    return out
