"""The program's C files: a traced Program (exporter/graph.py) at a site type as model.c,
kernels.h and kernels/*.c.

model.c is cut into sections, each a stage of the data flow: the parameters (the Weights
struct, the table of tensors the weights file must hold, `map_weights`), the network
(printed by the structured host, printer/structured.py, over the frames of
exporter/frames.py; or by the straight-line host, printer/straight.py) and the program
(the inputs and outputs, `run`, and PROGRAM, their description: the runtime's main,
exactc_main.c, hands it to exactc_main, where exactc_host.c reads the weights and inputs,
runs, and writes the outputs; the library, exactc_api.c, opens handles of it). Nothing
of the program is a global that changes: the weights' pointers and the run-time length
live with each handle, so two handles run at once.
The kernels are printer/kernel_table.py's.

Checking builds (-DEXACTC_CHECKING) fill the arena with NaN bytes (0xFF) before the run
and every released buffer again at its release, check every allocation against the
arena's end, and report the peak the program reaches: a buffer read after its release,
or a frame placed wrong, shows.

Printing is a pure function of its inputs: same program, same bytes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from exactc.exporter import dims, types
from exactc.exporter.dims import SYMBOL
from exactc.exporter.frames import Frame, plan_frames
from exactc.exporter.graph import Program, Value
from exactc.exporter.printer.ctext import INDENT, banner, shape_text
from exactc.exporter.printer.kernel_table import HostError, KernelTable
from exactc.exporter.printer.straight import StraightLineHost
from exactc.exporter.printer.structured import StructuredHost

__all__ = ["HostError", "PrintedProgram", "print_program"]

# A value's kind in the runtime's terms (exactc_rt.h, exactc_kind).
KIND = {"i32": "EXACTC_KIND_I32", "f64": "EXACTC_KIND_F64", "f32": "EXACTC_KIND_F32", "bf16": "EXACTC_KIND_BF16",
        "i8": "EXACTC_KIND_I8", "u8": "EXACTC_KIND_U8"}
PARAM_ALIGN = 64  # every parameter starts on a 64-byte boundary of the block


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
    table = KernelTable(program, site, plan)
    frames = program_frames(program, site, table)
    structured = StructuredHost(program, site, table, frames)
    line = StraightLineHost(program, site, table)
    structured_peak = frames[id(program.function)].peak
    peak = line.peak if straight else structured_peak

    out = head(program, site, straight)
    out += parameters(program, site, table.packed)
    out += banner(("The network: every launch in order (the straight-line oracle)." if straight else
                   "The network: one function per module form, callees first; a fold over layers is a loop.")
                  + "\nA kernel call runs its nest over [lo, hi) = [0, extent) of its outer loop; a split\n"
                  "driver (`_split`) runs the pieces of a plan's thread split.")
    out.append(f"#define ARENA_BYTES ((size_t){peak}) /* the scratch one run needs (exactc_rt.h: ARENA, RELEASE)"
               + (f",\n * at T_max = {program.max_length}: buffers that follow T are placed for their largest size */"
                  if program.max_length else " */"))
    out.append("")
    if straight:
        out.extend(line.function())
        out.append("")
    else:
        out.extend(structured.functions())
    out += main_section(program, site)
    files = {"model.c": "\n".join(out) + "\n", "kernels.h": table.header()}
    for name, text in table.sources().items():
        files[f"kernels/{name}"] = text
    return PrintedProgram(files, peak, structured_peak, line.peak, table.nest_count(), line.launches, len(table.uses))


def program_frames(program: Program, site: str, table: KernelTable) -> dict[int, Frame]:
    """The frame of every function (exporter/frames.py): the kernels' temps placed with
    the values, clear of the kernels' function names."""
    return plan_frames(program, site, lambda op: [b for b in table.get(op).kernel.buffers if b.role == "temp"],
                       table.function_names())


def head(program: Program, site: str, straight: bool) -> list[str]:
    """What the file is, how to run it, what it includes."""
    out = [
        f"/* exactc: {program.model} `{program.entry}` at site type {site}, "
        f"{'straight-line' if straight else 'structured'} host.",
        " *",
    ]
    cfg = program.config
    if cfg is not None:
        out += [f" * config: {cfg}", " *"]
    out += [
        " * usage: ./model WEIGHTS.safetensors INPUT_DIR OUTPUT_DIR [INPUT_DIR OUTPUT_DIR ...]",
        " * reads INPUT_DIR/<input>.npy, writes OUTPUT_DIR/<output>.npy; see README.md.",
        " *",
        " * Sections: the parameters, the network, the program. The kernels are in kernels/;",
        " * the readers, the writers and main's loop in the runtime (exactc_host.c, exactc_main.c);",
        " * the library's handles in exactc_api.c (model.h: `make lib`).",
        " */",
        '#include "exactc_rt.h"',
        '#include "kernels.h"',
        "",
    ]
    return out


def parameters(program: Program, site: str, packed: dict | None = None) -> list[str]:
    """The Weights struct, the table of the file's tensors, and map_weights."""
    out = banner("The parameters: one block read from the .safetensors file; a stacked parameter holds\n"
                 "every layer's tensor one after the other (layer l at l * chunk).")
    out.append("typedef struct {")
    fields = [(f"{types.kind_ctype(spec.kind, site)} *{v.name};", spec)
              for spec, v in zip(program.params, program.param_values)]
    width = max((len(f) for f, _ in fields), default=0)
    for field, spec in fields:
        where = f"{spec.name}, stacked over {spec.layers} layers" if spec.layers else spec.name
        out.append(f"{INDENT}{field:<{width}} /* {shape_text(spec.full_shape)}: {where} */")
    out += ["} Weights;", ""]
    if program.params:
        out += ["/* Each tensor of the file: its name (%d: the layer), kind (its dtype), layers (0: not",
                " * stacked), shape, and where it goes in the block, in bytes. */",
                "static const exactc_param_spec PARAMS[] = {"]
    offset = 0
    for spec in program.params:
        shape = ", ".join(str(d) for d in spec.shape)
        name = spec.name.replace("%", "%%").replace("{l}", "%d")
        kind = KIND[site if spec.kind == "x" else spec.kind]
        out.append(f'{INDENT}{{"{name}", {kind}, {spec.layers}, {len(spec.shape)}, {{{shape}}}, {offset}}},')
        size = math.prod(spec.full_shape) * types.kind_storage(spec.kind, site).itemsize
        offset += -(-size // PARAM_ALIGN) * PARAM_ALIGN
    if program.params:
        out.append("};")
    out += [f"#define PARAM_BYTES ((size_t){offset})", "",
            "/* Point each field of `mapped` (a Weights of its handle: no global holds the weights)\n"
            " * at its tensor in the block read from the file"
            + (", and lay out the linear weights its kernels\n * read packed as their panels (printer/prepack.py). "
               "0, or -1 when memory runs out. */" if packed else ". 0 always. */"),
            "static int map_weights(void *block, void *mapped) {"]
    if program.params:
        out.append(f"{INDENT}unsigned char *data = block;")
        out.append(f"{INDENT}Weights *weights = mapped;")
    else:
        out.append(f"{INDENT}(void)block;")
        out.append(f"{INDENT}(void)mapped;")
    for k, (spec, v) in enumerate(zip(program.params, program.param_values)):
        out.append(f"{INDENT}weights->{v.name} = ({types.kind_ctype(spec.kind, site)} *)(data + PARAMS[{k}].offset);")
    for k, spec in enumerate(program.params):
        if spec.name in (packed or {}):
            p = packed[spec.name]
            size = types.kind_storage(spec.kind, site).itemsize
            call, run = ("exactc_pack_panels", "") if p.run == 1 else ("exactc_pack_block_panels", f"{p.run}, ")
            out.append(f"{INDENT}if ({call}(data + PARAMS[{k}].offset, {p.layers}, {p.rows}, {p.cols}, "
                       f"{p.lanes}, {run}{size}) != 0) return -1;")
    out += [f"{INDENT}return 0;", "}", ""]
    return out


def spec_dims(name: str, shape) -> tuple[list[str], list[str]]:
    """An input's or output's dimensions for exactc_tensor_spec: the static part and the
    multiple of the run-time length T of each (a dimension is b + a * T)."""
    static, per = [], []
    for d in shape:
        if not dims.is_symbolic(d):
            static.append(str(d))
            per.append("0")
            continue
        if d.degree != 1:
            raise HostError(f"{name}: dimension {d} is not affine in {SYMBOL}; an input's or output's dimensions "
                            f"are b + a * {SYMBOL}")
        static.append(str(d.coefs[0]))
        per.append(str(d.coefs[1]))
    return static, per


def main_section(program: Program, site: str) -> list[str]:
    """The inputs and outputs, `run`, and main."""
    out = banner("The program: its inputs and outputs (.npy files named after them), one run of the\n"
                 "network, and its description, which main and the library hand to the runtime.")

    def specs(array: str, named: list[tuple[str, Value]]) -> list[str]:
        if not named:
            return []
        lines = [f"static const exactc_tensor_spec {array}[] = {{"]
        for name, v in named:
            kind = KIND["i32" if v.kind == "i32" else site]
            static, per = spec_dims(name, v.shape)
            per_text = f", {{{', '.join(per)}}}"
            lines.append(f'{INDENT}{{"{name}", {kind}, {len(v.shape)}, {{{", ".join(static)}}}{per_text}}},')
        return lines + ["};"]

    inputs = [(spec.name, v) for spec, v in zip(program.inputs, program.input_values)]
    outputs = list(zip(program.output_names, program.function.outputs))
    length_from = [spec.name for spec in program.inputs if spec.length is not None]
    out += specs("INPUTS", inputs) + specs("OUTPUTS", outputs)
    if program.in_place:
        written = ", ".join(f'"{program.in_place[name]}"' if name in program.in_place else "NULL"
                            for name in program.output_names)
        out.append("/* Per output, the input it is written over in place: the network writes that")
        out.append(" * input's buffer, and the output is that buffer after the run. */")
        out.append(f"static const char *const IN_PLACE[] = {{{written}}};")
    out.append("")
    top = program.max_length
    out.append("/* One run of the network, on buffers in the order INPUTS and OUTPUTS list them"
               + (f", at the\n * run-time length the inputs give (1 <= T <= {top}). */" if top else ". */"))
    out.append("static void run(const void *weights, int64_t length, void *const *in, void *const *out,\n"
               "                unsigned char *arena) {")
    if not top:
        out.append(f"{INDENT}(void)length;")
    if not inputs:
        out.append(f"{INDENT}(void)in;")
    args = ["weights"] + [f"in[{k}]" for k in range(len(inputs))] + [f"out[{k}]" for k in range(len(outputs))]
    args += ["arena"] + (["length"] if top else [])
    out.append(f"{INDENT}{program.function.name}({', '.join(args)});")
    out += ["}", ""]
    fields = [
        ("model", json.dumps(program.model)),
        ("entry", json.dumps(program.entry)),
        ("site", KIND[site]),
        ("params", "PARAMS" if program.params else "NULL"),
        ("param_count", "sizeof PARAMS / sizeof PARAMS[0]" if program.params else "0"),
        ("param_bytes", "PARAM_BYTES"),
        ("inputs", "INPUTS" if inputs else "NULL"),
        ("input_count", str(len(inputs))),
        ("outputs", "OUTPUTS"),
        ("output_count", str(len(outputs))),
        ("arena_bytes", "ARENA_BYTES"),
        ("max_length", str(top or 0)),
        *([("length_from", f'"{length_from[0]}"')] if length_from else []),
        *([("in_place", "IN_PLACE")] if program.in_place else []),
        ("weights_bytes", "sizeof(Weights)"),
        ("map_weights", "map_weights"),
        ("run", "run"),
    ]
    # The program's description, whole: main (runtime/exactc_main.c) hands it to the
    # runtime, and the library (runtime/exactc_api.c, model.h) opens handles of it. A
    # decode entry's program also runs the whole generation loop (`./model generate ...`,
    # runtime/exactc_generate.c).
    out.append("static const exactc_program PROGRAM = {")
    out.extend(f"{INDENT}.{field} = {value}," for field, value in fields)
    out.append("};")
    out.append("")
    out.append("const exactc_program *exactc_model_program(void) {")
    out.append(f"{INDENT}return &PROGRAM;")
    out.append("}")
    return out
