"""The rounded constants of docs/semantics.md, printed from the code.

Every real constant a primitive rounds to its accumulator type (R_A), the values the
built-in models give the rounded attributes (eps, the attention scale, rope's theta),
and the attention scale of each head size, in hex at A = f64 and A = f32 (f32 and bf16
sites compute in f32). The values are read from the C lowering
(exactc/exporter/kernels/lower.py), the catalogue's defaults and the traced models;
each rounding is done by the lowering's rule and checked against the reference
backend's (exactc/exporter/reference/arith.py). Every constant the lowering puts into a
kernel must have its row, or this stops and names it: the table cannot fall behind.

    python tools/spec_constants.py            # print the block
    python tools/spec_constants.py --write    # replace the block in docs/semantics.md

tests/test_spec_constants.py fails when docs/semantics.md holds another block.
"""

from __future__ import annotations

import argparse
import math
import struct
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

from exactc.exporter import models, types
from exactc.exporter.kernels import ir
from exactc.exporter.kernels.lower import GELU_TANH_CUBIC, INV_SQRT_2, LARGEST, SQRT_2_OVER_PI, lower
from exactc.exporter.primitives import PRIMITIVES
from exactc.exporter.reference import arith, ops
from exactc.runtime import libm_twin

DOC = Path(__file__).resolve().parent.parent / "docs" / "semantics.md"
BEGIN = "<!-- begin: printed by `python tools/spec_constants.py` (--write); do not edit by hand -->"
END = "<!-- end: printed by `python tools/spec_constants.py` -->"
ACCS = ("f64", "f32")  # the accumulator types; a bf16 site's is f32

# The operands each primitive is lowered at to read its constants. Every extent is one of
# DIMS, so that R_A(extent) (layernorm's n) is told apart from a real constant.
DIMS = (2, 3, 4)
SHAPES = {
    **{p: {"a": (3,), "b": (3,)} for p in ("add", "sub", "mul")},
    **{p: {"x": (3,)} for p in ("scale", "silu", "gelu_tanh", "gelu_erf")},
    "linear": {"x": (2, 3), "w": (4, 3)},
    "matmul": {"a": (2, 2, 3), "b": (2, 3, 4)},
    "embedding": {"table": (4, 3), "ids": (2,)},
    "layernorm": {"x": (2, 3), "g": (3,), "b": (3,)},
    "rmsnorm": {"x": (2, 3), "g": (3,)},
    "l2norm": {"x": (2, 3)},
    "softmax": {"x": (2, 3, 4)},
    "rope": {"x": (3, 2, 4)},
    "mean_pool": {"x": (3, 4), "keep": (3,)},
    "argmax": {"x": (2, 3)},
    "reshape": {"x": (2, 3)},
    "transpose": {"x": (2, 3)},
    "slice": {"x": (2, 3)},
    "concat": {"a": (2, 3), "b": (2, 3)},
    "cache_write": {"cache": (2, 3, 2), "rows": (2, 1, 2)},
    "quantize": {"x": (2, 4)},
    "qlinear_w": {"x": (2, 4), "wq": (3, 4), "wd": (3, 2)},
    "qlinear_i": {"xq": (2, 4), "xd": (2, 2), "wq": (3, 4), "wd": (3, 2)},
    "linear_bar_x": {"x": (2, 3), "w": (4, 3), "dy": (2, 4), "acc": (2, 3)},
    "linear_bar_w": {"x": (2, 3), "dy": (2, 4), "acc": (4, 3)},
    "linear_bar_b": {"dy": (2, 4), "acc": (4,)},
    "matmul_bar_a": {"b": (2, 3, 4), "dy": (2, 2, 4), "acc": (2, 2, 3)},
    "matmul_bar_b": {"a": (2, 2, 3), "dy": (2, 2, 4), "acc": (2, 3, 4)},
    "embedding_bar": {"ids": (2,), "dy": (2, 3), "acc": (4, 3)},
    "norm_bar_g": {"x": (2, 3), "dy": (2, 3), "acc": (3,)},
    "mean_pool_bar": {"keep": (3,), "dy": (4,), "acc": (3, 4)},
    "sum_rows": {"x": (3,), "acc": ()},
    "layernorm_bar_x": {"x": (2, 3), "g": (3,), "dy": (2, 3)},
    "rmsnorm_bar_x": {"x": (2, 3), "g": (3,), "dy": (2, 3)},
    "softmax_bar": {"probs": (2, 3, 4), "dy": (2, 3, 4)},
    **{p: {"x": (3,), "dy": (3,)} for p in ("gelu_tanh_bar", "silu_bar")},
    "xent_rows": {"logits": (2, 3), "targets": (2,)},
    "xent_bar": {"logits": (2, 3), "targets": (2,), "r": ()},
    "adamw": {"param": (3,), "g": (3,), "m": (3,), "v": (3,), "h": (8,)},
    "fill": {},
    "iota": {},
    "xent_mean": {"x": (), "targets": (2, 5)},
}
ATTRS = {"reshape": {"shape": (3, 2)}, "transpose": {"perm": (1, 0)}, "quantize": {"block": 2},
         "qlinear_w": {"fmt": "q8", "block": 2}, "qlinear_i": {"fmt": "q8", "block": 2},
         "softmax_bar": {"causal": True}, "fill": {"shape": (2, 3)}, "iota": {"start": 0, "length": 5}}

# The rounded attributes: primitive -> attribute.
ROUNDED_ATTRS = {"scale": "s", "layernorm": "eps", "rmsnorm": "eps", "l2norm": "eps", "rope": "theta",
                 "layernorm_bar_x": "eps", "rmsnorm_bar_x": "eps", "norm_bar_g": "eps"}

# Head sizes whose attention scale is listed, with where they occur.
HEAD_SIZES = {16: "the built-in models' default config", 32: "all-MiniLM-L6-v2 (384 / 12 heads)",
              48: "-", 64: "-", 80: "-", 96: "-", 128: "-"}


def fail(message: str) -> None:
    raise SystemExit(f"spec_constants: {message}")


def bits(value: float, acc: str) -> int:
    if acc == "f64":
        return struct.unpack("<Q", struct.pack("<d", value))[0]
    return int(np.float32(value).view(np.uint32))


def rounded(value: float, acc: str) -> float:
    """R_A(value) by the lowering's rule, checked against the reference backend's."""
    with np.errstate(over="ignore"):
        ours = float(types.round_to_acc(np.float64(value), acc))
    theirs = float(arith.real(value, acc))
    if bits(ours, acc) != bits(theirs, acc):
        fail(f"R_A({value!r}) at {acc}: the lowering gives {ours.hex()}, the reference {theirs.hex()}")
    return ours


def at(value, acc: str) -> float:
    """A row's value at `acc`: the same real at every A, or one per A ({acc: value})."""
    return value[acc] if isinstance(value, dict) else value


def cell(value, acc: str) -> str:
    """R_A(value) as the C kernels print it, and its bits."""
    r = rounded(at(value, acc), acc)
    width = 16 if acc == "f64" else 8
    return f"`{ir.float_literal(r, acc)}` `0x{bits(r, acc):0{width}x}`"


def lowered_constants() -> tuple[dict[tuple[str, int], set[str]], dict[tuple[str, int], set[str]]]:
    """The Consts of every primitive's kernels at every A, with the catalogue's default
    attributes, as (type, bits) -> primitives: those of the rounded attribute (eps, s,
    theta) apart from the others; R_A of an operand extent (layernorm's n) left out."""
    real: dict[tuple[str, int], set[str]] = {}
    attribute: dict[tuple[str, int], set[str]] = {}
    extents = {float(d) for d in DIMS}
    for primitive in sorted(PRIMITIVES):
        attr = ROUNDED_ATTRS.get(primitive)
        for acc in ACCS:
            kernel = lower(primitive, acc, SHAPES[primitive], ATTRS.get(primitive))
            for nest in kernel.nests:
                for stmt in ir.walk_statements(nest.body):
                    for expr in ir.statement_exprs(stmt):
                        for node in ir.walk_expr(expr):
                            if not isinstance(node, ir.Const) or node.value in extents:
                                continue
                            key = (node.type, bits(node.value, node.type))
                            own = attr is not None and key in keys(kernel.attrs[attr], (node.type,))
                            (attribute if own else real).setdefault(key, set()).add(primitive)
    return real, attribute


def keys(value, accs: tuple[str, ...] = ACCS) -> set[tuple[str, int]]:
    """(A, bits of R_A(value)) at each of `accs`."""
    return {(acc, bits(rounded(at(value, acc), acc), acc)) for acc in accs}


def primitive_table() -> list[str]:
    """The real constants of the lowering (each the same as the reference backend's
    copy), then the catalogue's defaults of the rounded attributes."""
    pairs = [
        ("`c0 = R_A(√(2/π))`", "nearest f64 to √(2/π)", SQRT_2_OVER_PI, ops.SQRT_2_OVER_PI),
        ("`c1 = R_A(0.044715)`", "0.044715", GELU_TANH_CUBIC, ops.GELU_TANH_CUBIC),
        ("`c = R_A(1/√2)`", "nearest f64 to 1/√2", INV_SQRT_2, ops.SQRT_1_2),
    ]
    for label, _, ours, theirs in pairs:
        if bits(ours, "f64") != bits(theirs, "f64"):
            fail(f"{label}: the lowering holds {ours.hex()}, the reference {theirs.hex()}")
    rows = [(label, given, value) for label, given, value, _ in pairs]
    rows += [("`0.5`", "exact", 0.5), ("`-0.5`", "exact", -0.5), ("`1`", "exact", 1.0), ("`127`", "exact", 127.0),
             ("`+0`", "exact", 0.0), ("`-0`", "exact", -0.0), ("`-∞`", "exact", -math.inf),
             ("the largest finite value of `A`", "DBL_MAX, FLT_MAX", LARGEST)]
    real, attribute = lowered_constants()
    out = ["| constant | given as | used by | A = f64 | A = f32 (f32 and bf16 sites) |", "|---|---|---|---|---|"]
    listed: set[tuple[str, int]] = set()
    for label, given, value in rows:
        users = set().union(*(real.get(k, set()) for k in keys(value)))
        if not users:
            fail(f"{label} ({value!r}) occurs in no lowered kernel; is its row still true?")
        listed |= keys(value)
        out.append(f"| {label} | {given} | {', '.join(sorted(users))} | {cell(value, 'f64')} | {cell(value, 'f32')} |")
    unlisted = sorted(set(real) - listed)
    if unlisted:
        named = "; ".join(f"{t} 0x{b:x} in {', '.join(sorted(real[(t, b)]))}" for t, b in unlisted)
        fail(f"constants of the lowering without a row: {named}")
    for primitive, attr in ROUNDED_ATTRS.items():
        default = PRIMITIVES[primitive].attrs[attr]
        accs = ("f64",) if attr == "theta" else ACCS
        if not all(primitive in attribute.get(k, set()) for k in keys(default, accs)):
            fail(f"{primitive}'s default {attr} = {default!r} is not in its lowered kernels")
        f32 = "f64 at every site (the rope table)" if attr == "theta" else cell(default, "f32")
        out.append(f"| `{attr}`, its default | {default!r} | {primitive} | {cell(default, 'f64')} | {f32} |")
    return out


def model_table() -> list[str]:
    """The rounded attributes at every site of the built-in models (default configs)."""
    sites: dict[tuple[str, str, str, float], list[str]] = {}
    for model in models.ARCHITECTURES:
        for entry in models.entries(model):
            for op in models.build(model, entry).function.ops():
                attr = ROUNDED_ATTRS.get(op.primitive)
                if attr is not None:
                    names = sites.setdefault((model, op.primitive, attr, op.attrs[attr]), [])
                    if op.out.name not in names:
                        names.append(op.out.name)
    out = ["| model | sites | attribute | given as | A = f64 | A = f32 (f32 and bf16 sites) |",
           "|---|---|---|---|---|---|"]
    for (model, primitive, attr, value), names in sites.items():
        f32 = "f64 at every site" if attr == "theta" else cell(value, "f32")
        out.append(f"| {model} | {', '.join(names)} | {primitive} `{attr}` | {value!r} | {cell(value, 'f64')} | {f32} |")
    return out


def nearest_f64(value: float, n: int) -> bool:
    """Whether `value` is the f64 nearest to 1/√n (exact rational arithmetic)."""
    _, exponent = math.frexp(value)
    half_ulp = Fraction(2) ** (exponent - 54)
    low, high = Fraction(value) - half_ulp, Fraction(value) + half_ulp
    return low * low < Fraction(1, n) < high * high


def scale_of(model: str, head: int) -> float:
    """The `s` of the scale the model's attention applies, traced at one head of size `head`."""
    program = models.build(model, "forward", {"dim": head, "heads": 1, "layers": 1, "kv_heads": 1}
                           if model == "llama" else {"dim": head, "heads": 1, "layers": 1})
    (s,) = {op.attrs["s"] for op in program.function.ops() if op.primitive == "scale"}
    return s


def scale_table() -> list[str]:
    out = ["| head size hd | where | s (f64, as the models compute it) | nearest f64 to 1/√hd? | "
           "A = f64 | A = f32 (f32 and bf16 sites) |", "|---|---|---|---|---|---|"]
    for head, where in HEAD_SIZES.items():
        values = {model: scale_of(model, head) for model in models.ARCHITECTURES}
        if len({bits(v, "f64") for v in values.values()}) != 1:
            fail(f"the models scale attention differently at head size {head}: {values}")
        s = values["gpt"]
        verdict = "yes"
        if not nearest_f64(s, head):
            above = nearest_f64(math.nextafter(s, 0), head)
            verdict = f"no: one ulp {'above' if above else 'below'}"
        out.append(f"| {head} | {where} | {s!r} | {verdict} | {cell(s, 'f64')} | {cell(s, 'f32')} |")
    return out


def block() -> str:
    theta = PRIMITIVES["rope"].attrs["theta"]
    log_theta = float(libm_twin.log(np.array([theta]))[0])
    lines = [
        BEGIN,
        "",
        "Each constant as the C kernels print it (a hex float, `f` for f32) and its bits.",
        "",
        *primitive_table(),
        "",
        "At the sites of the built-in models (`exactc/exporter/models/`, default configurations):",
        "",
        *model_table(),
        "",
        "Attention's scale is `s = 1.0 / math.sqrt(hd)` computed in f64 by the model (two",
        "roundings: the square root, then the quotient), then `R_A(s)`; at the head sizes:",
        "",
        *scale_table(),
        "",
        f"rope at its default theta = {theta!r}: `l = exactc_log(theta)` = `{log_theta.hex()}`, then",
        "`freq_i = exactc_exp(-((f64(2i) ⊘ f64(D)) ⊗ l))` in f64 (section 7).",
        "",
        END,
    ]
    return "\n".join(lines) + "\n"


def write(doc: Path = DOC) -> None:
    text = doc.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        fail(f"{doc} must hold the markers once each:\n{BEGIN}\n{END}")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END + "\n")
    doc.write_text(head + block() + tail)


def current(doc: Path = DOC) -> str:
    """The block docs/semantics.md holds now (markers included)."""
    text = doc.read_text()
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < 0:
        return ""
    return text[start:stop + len(END)] + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"replace the block in {DOC.name}")
    args = parser.parse_args(argv)
    if args.write:
        write()
    else:
        sys.stdout.write(block())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
