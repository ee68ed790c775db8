"""The structured host (the default): the network as C functions that mirror the model.

One C function per distinct traced function form (a module called fifty times is
printed once), callees first. A fold over layers is a C loop that slices the stacked
parameters at `w + l * chunk` (`fold_slice`) and alternates its carry between two
buffers; an iteration that differs runs apart. Every buffer lives in the arena at the
offset its frame gives it (exporter/frames.py). The table of a function's buffers is a
macro above it (`MLP_SCRATCH`) that declares each at its offset, and the function opens
with it, so that its body is the launches: a buffer's birth is one `BORN(name, count)`
before the launch that first writes it (checking builds check and NaN-fill it there,
other builds do nothing); a callee gets the arena above the bytes live at its call.
"""

from __future__ import annotations

import math

from exactc.exporter.dims import SYMBOL
from exactc.exporter.frames import Frame, align, by_node, ctype, is_view
from exactc.exporter.graph import Call, Fold, Function, Op, Program
from exactc.exporter.launches import read_args
from exactc.exporter.printer.ctext import INDENT, call_lines, shape_text, signature_lines, wrap_comment
from exactc.exporter.printer.kernel_table import KernelTable


# ---- the anchor: one place for what the mutant catalog changes -------------------------------


def length_parameter(max_length: int) -> tuple[str, str]:
    """The run-time length, a parameter of every function of the network (none holds it
    in a global: two handles of one library run at once, each at its own length)."""
    return f"int64_t {SYMBOL}", f"the run-time length, 1 <= {SYMBOL} <= {max_length}"


def fold_slice(base: str, index: str, chunk: int) -> str:
    """The slice of a stacked parameter for layer `index`: `w + l * chunk`."""
    return f"{base} + {index} * {chunk}"


class StructuredHost:
    """Prints the network section of the structured host from the program's frames."""

    def __init__(self, program: Program, site: str, table: KernelTable, frames: dict[int, Frame]):
        self.program = program
        self.site = site
        self.table = table
        self.frames = frames
        # each function's table macro: its name upper-cased (`MLP_SCRATCH`), numbered when
        # two functions' names differ only in case
        self.scratch: dict[int, str] = {}
        for fn in program.function.walk():
            name, k = f"{fn.name.upper()}_SCRATCH", 1
            while name in self.scratch.values():
                k += 1
                name = f"{fn.name.upper()}_{k}_SCRATCH"
            self.scratch[id(fn)] = name

    def peak_of(self, fn: Function) -> int:
        return self.frames[id(fn)].peak

    def signature(self, fn: Function, entry: bool) -> list[tuple[str, str]]:
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
        if self.program.max_length:
            params.append(length_parameter(self.program.max_length))
        return params

    def functions(self) -> list[str]:
        """Every function, callees first, each followed by a blank line."""
        out = []
        for fn in self.program.function.walk():
            out.extend(self.function(fn))
            out.append("")
        return out

    def function(self, fn: Function) -> list[str]:
        entry = fn is self.program.function
        frame = self.frames[id(fn)]
        site = self.site
        out = []
        doc = f"/* {fn.name}: " + (f"{fn.doc.rstrip('.')}. " if fn.doc else "") + f"Frame {frame.peak} bytes"
        doc += " (its callees' frames included)." if any(not isinstance(n, Op) for n in fn.nodes) else "."
        scratch = self.scratch_macro(fn, frame)
        out.extend(scratch)
        out.extend(wrap_comment(doc.replace("*/", "* /") + " */"))
        out.extend(signature_lines(f"static void {fn.name}", self.signature(fn, entry)))
        if scratch:
            out.append(f"{INDENT}{self.scratch[id(fn)]}(arena);")
        if self.program.max_length:
            out.append(f"{INDENT}(void){SYMBOL};")
        expr: dict[int, str] = {}
        if entry:
            for v in self.program.param_values:
                expr[id(v)] = f"w->{v.name}"
            for v in self.program.input_values:
                expr[id(v)] = v.name
        else:
            for v in fn.inputs:
                expr[id(v)] = v.name
        for v in fn.outputs:
            expr[id(v)] = v.name
        used_inputs = {id(a) for node in fn.nodes for a in read_args(node)}
        for v in (self.program.input_values if entry else fn.inputs):
            if id(v) not in used_inputs:
                out.append(f"{INDENT}(void){v.name};")
        if entry and not any(id(v) in used_inputs for v in self.program.param_values):
            out.append(f"{INDENT}(void)w;")  # a program of no parameters
        if entry and not frame.peak:
            out.append(f"{INDENT}(void)arena;")

        outputs = {id(v) for v in fn.outputs}
        # Each node's births, looked up by index: one pass over the buffers instead of one
        # per node (a function of N nodes costs N, not N squared).
        born, named = by_node(frame.buffers, "first"), {}
        for v_id, buf in frame.by_value.items():
            named.setdefault(buf.first, []).append((v_id, buf))
        for index, node in enumerate(fn.nodes):
            # the buffers this node makes are born here
            for buf in born.get(index, ()):
                out.append(f"{INDENT}BORN({buf.name}, {buf.count});")
            for v_id, buf in named.get(index, ()):  # a fold's: its stacked rows (frames names no carry)
                expr[v_id] = buf.name
            if isinstance(node, Op):
                if is_view(node) and id(node.out) not in outputs:
                    src = expr[id(node.args[0])]
                    out.append(f"{INDENT}const {ctype(node.out, site)} *{node.out.name} = {src};"
                               f"  /* {shape_text(node.out.shape)}: a view of {node.args[0].name} */")
                    expr[id(node.out)] = node.out.name
                else:
                    out.extend(self.launch(node, index, frame, expr))
            elif isinstance(node, Call):
                out.extend(self.call(node, index, frame, expr))
            else:
                out.extend(self.fold(node, index, frame, expr))
        out.append("}")
        return out

    def scratch_macro(self, fn: Function, frame: Frame) -> list[str]:
        """fn's table of scratch, out of the way of its text: a macro that declares every
        buffer at the offset its frame gives it, in the order they are born."""
        if not frame.buffers:
            return []
        bufs = sorted(frame.buffers, key=lambda b: (b.first, b.offset))
        decls = [f"{b.ctype} *{b.name} = SCRATCH({b.ctype}, (arena) + {b.offset})" for b in bufs]
        width = max(len(d) for d in decls) + 1
        out = wrap_comment(f"/* {fn.name}'s scratch (exporter/frames.py): each buffer at its byte offset in the "
                           "arena, in the order the buffers are born; buffers that share bytes are never live "
                           "together. */")
        out.append(f"#define {self.scratch[id(fn)]}(arena) \\")
        for k, (d, b) in enumerate(zip(decls, bufs)):
            end = "" if k == len(bufs) - 1 else "; \\"
            out.append(f"{INDENT}{d + end[:1]:<{width}} /* {shape_text(b.shape)} */{end[1:]}")
        out.append("")
        return out

    def launch(self, op: Op, index: int, frame: Frame, expr: dict[int, str]) -> list[str]:
        use = self.table.get(op)
        names = {k: expr[id(v)] for k, v in op.operands().items()}
        names.update({k: expr[id(v)] for k, v in op.results().items()})
        for kb in use.kernel.buffers:
            if kb.role == "temp":
                names[kb.name] = frame.kernel_temps[(index, kb.name)].name
        return [f"{INDENT}{line}" for line in use.calls(op, names)]

    def call(self, node: Call, index: int, frame: Frame, expr: dict[int, str]) -> list[str]:
        args = [expr[id(v)] for v in node.args] + [expr[id(v)] for v in node.outs]
        if self.peak_of(node.function):
            args.append(f"arena + {align(frame.high[index])}")
        if self.program.max_length:
            args.append(SYMBOL)
        return call_lines(node.function.name, args, INDENT)

    def fold(self, node: Fold, index: int, frame: Frame, expr: dict[int, str]) -> list[str]:
        out = []
        site = self.site
        carries = frame.carries[index]
        names = [frame.fresh(f"{v.name}_l") for v in node.carry_outs]
        nexts = [frame.fresh(f"{v.name}_next") for v in node.carry_outs]
        stacked = [(expr[id(v)], math.prod(v.shape[1:])) for v in node.stacked]
        rows = [(expr[id(v)], math.prod(v.shape[1:])) for v in node.row_outs]  # layer l writes slice l
        carried = ", ".join(v.name for v in node.carry_outs)
        order = f"from l = {node.count - 1} down to 0" if node.reverse else f"for l < {node.count}"
        out.append(f"{INDENT}/* The layers: {node.body.name} {order}, the carry ({carried}) alternating")
        out.append(f"{INDENT} * between two buffers; layer l's parameters start at l * chunk of the stacked ones. */")
        for k, v in enumerate(node.carry):
            out.append(f"{INDENT}const {ctype(v, site)} *{names[k]} = {expr[id(v)]};  /* {shape_text(v.shape)} */")

        base = align(frame.high[index])
        segments = node.segments()
        for start, stop, body in reversed(segments) if node.reverse else segments:
            layer = "l" if stop - start > 1 else str(start)
            pad = INDENT * 2 if stop - start > 1 else INDENT
            body_lines = []
            dst = []
            for k, v in enumerate(node.carry_outs):
                bufs = carries[k]
                if len(bufs) == 1:
                    d = bufs[0].name
                elif layer == "l":  # the step's parity: the step is l, or count - 1 - l when reversed
                    step = f"({node.count - 1} - l)" if node.reverse else "l"
                    d = f"({step} % 2 == 0 ? {bufs[0].name} : {bufs[1].name})"
                else:
                    d = bufs[(node.count - 1 - start if node.reverse else start) % 2].name
                dst.append(d)
            args = [names[k] for k in range(len(node.carry))]
            args += [fold_slice(b, layer, chunk) for b, chunk in stacked]
            args += [expr[id(v)] for v in node.shared]
            for k, v in enumerate(node.carry_outs):
                body_lines.append(f"{pad}{ctype(v, site)} *{nexts[k]} = {dst[k]};")
            call_args = args + nexts + [fold_slice(b, layer, chunk) for b, chunk in rows]
            if self.peak_of(body):
                call_args.append(f"arena + {base}")
            if self.program.max_length:
                call_args.append(SYMBOL)
            body_lines.extend(call_lines(body.name, call_args, pad))
            for k, v in enumerate(node.carry_outs):
                body_lines.append(f"{pad}{names[k]} = {nexts[k]};")
                body_lines.append(f'{pad}EXACTC_TRACE_CARRY("{node.body.name}", {layer}, {k}, {names[k]}, {v.size});')
            if stop - start > 1:
                loop = f"l = {stop - 1}; l >= {start}; l--" if node.reverse else f"l = {start}; l < {stop}; l++"
                out.append(f"{INDENT}for (int {loop}) {{")
                out.extend(body_lines)
                out.append(f"{INDENT}}}")
            else:
                out.append(f"{INDENT}{{ /* layer {start} runs apart: {body.name} */" if body is not node.body
                           else f"{INDENT}{{ /* layer {start} */")
                out.extend(INDENT + line for line in body_lines)
                out.append(f"{INDENT}}}")
        for k, v in enumerate(node.carry_outs):  # never an output: the builder copies a fold's results
            expr[id(v)] = carries[k][(node.count - 1) % 2].name
        return out
