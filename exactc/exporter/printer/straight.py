"""The straight-line host (`straight=True`), the oracle: every launch in order in one
function, every buffer its own bytes of the arena, one after another, nothing released.
Both hosts write the same output file; the tests compare them.
"""

from __future__ import annotations

import math

from exactc.exporter.dims import SYMBOL
from exactc.exporter.frames import ITEMSIZE, align, ctype, is_view, itemsize, slot_bytes
from exactc.exporter.graph import Call, Function, Op, Program
from exactc.exporter.launches import values_read
from exactc.exporter.printer.ctext import INDENT, shape_text, signature_lines
from exactc.exporter.printer.kernel_table import KernelTable
from exactc.exporter.printer.structured import length_parameter


class StraightLineHost:
    """Every launch in order in one function; every buffer its own bytes."""

    def __init__(self, program: Program, site: str, table: KernelTable):
        self.program = program
        self.site = site
        self.table = table
        self.lines: list[str] = []
        self.offset = 0
        self.launches = 0
        self.names: set[str] = table.function_names()
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
        program = self.program
        env: dict[int, str] = {}
        for v in program.param_values:
            env[id(v)] = f"w->{v.name}"
            self.names.add(v.name)
        for v in program.input_values:
            env[id(v)] = v.name
            self.names.add(v.name)
        for v in program.function.outputs:
            env[id(v)] = v.name
            self.names.add(v.name)
        self.run(program.function, env, "")
        used = values_read(program.function)
        for v in program.input_values:
            if id(v) not in used:
                self.lines.insert(0, f"{INDENT}(void){v.name};")
        if not any(id(v) in used for v in program.param_values):
            self.lines.insert(0, f"{INDENT}(void)w;")  # a program of no parameters

    def run(self, fn: Function, env: dict[int, str], where: str) -> None:
        site = self.site
        outputs = {id(v) for v in fn.outputs}
        for node in fn.nodes:
            if isinstance(node, Op):
                if is_view(node) and id(node.out) not in outputs:
                    env[id(node.out)] = env[id(node.args[0])]
                    continue
                for v in node.outs:
                    if id(v) not in env:
                        env[id(v)] = self.alloc(v.name + where, ctype(v, site), v.size,
                                                slot_bytes(v.size, itemsize(v, site)), v.shape)
                use = self.table.get(node)
                names = {k: env[id(v)] for k, v in node.operands().items()}
                names.update({k: env[id(v)] for k, v in node.results().items()})
                for kb in use.kernel.buffers:
                    if kb.role == "temp":
                        names[kb.name] = self.alloc(f"{node.outs[0].name}{where}_{kb.name}", kb.ctype, kb.size,
                                                    slot_bytes(kb.size, ITEMSIZE[kb.type]), kb.shape)
                self.lines.extend(INDENT + line for line in use.calls(node, names))
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
                for v in node.row_outs:
                    if id(v) not in env:
                        env[id(v)] = self.alloc(v.name + where, ctype(v, site), v.size,
                                                slot_bytes(v.size, itemsize(v, site)), v.shape)
                for layer in node.order():
                    body = node.body_of(layer)
                    inner: dict[int, str] = {}
                    formals = body.inputs
                    for f, v in zip(body.outputs[len(node.carry):], node.row_outs):  # slice `layer` of each
                        inner[id(f)] = f"{env[id(v)]} + {layer * math.prod(v.shape[1:])}"
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
                    carry = [inner[id(f)] for f in body.outputs[: len(node.carry)]]
                    for k, (c, v) in enumerate(zip(carry, node.carry_outs)):
                        self.lines.append(f'{INDENT}EXACTC_TRACE_CARRY("{node.body.name}", {layer}, {k}, {c}, {v.size});')
                for v, c in zip(node.carry_outs, carry):  # never an output: the builder copies a fold's results
                    env[id(v)] = c

    def function(self) -> list[str]:
        program = self.program
        params = [("const Weights *w", "the parameters")]
        for v in program.input_values:
            params.append((f"const {ctype(v, self.site)} *{v.name}", shape_text(v.shape)))
        for v in program.function.outputs:
            params.append((f"{ctype(v, self.site)} *{v.name}", shape_text(v.shape) + ", written"))
        params.append(("unsigned char *arena", f"{self.peak} bytes: every buffer its own"))
        if program.max_length:
            params.append(length_parameter(program.max_length))
        out = [f"/* {program.entry}, straight-line: {self.launches} launches in order, nothing released. */"]
        out.extend(signature_lines(f"static void {program.function.name}", params))
        if program.max_length:
            out.append(f"{INDENT}(void){SYMBOL};")
        out.extend(self.lines)
        out.append("}")
        return out
