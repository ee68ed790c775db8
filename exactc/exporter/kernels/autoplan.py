"""The automatic plan (`exactc export --plan auto`): a layout and a thread split for
every nest of a program, chosen from its shapes alone.

- linear nests get the layout the benchmark found fastest (bench/,
  docs/performance.md): the output columns in lanes of 16 over rows in lanes of 8, the
  weight panel packed; each output's sum still runs in index order (docs/design.md,
  principle 2). A layout the nest's shapes make illegal falls back to fewer lanes, then
  to the plain nest; so does one whose lanes an axis cannot fill (rows in lanes of 8 for
  one row).
- matmul nests (attention's q kᵀ and att v) get the same, per batch: the batch axes
  outermost (the split's), then n in lanes of 16 over m in lanes of 8, b's panel packed.
  Both also get rows in lanes of 4 as their narrow layout, which the C compiles instead
  for clang on x86 without AVX-512 (EXACTC_NARROW_LANES, exactc_rt.h; narrow_layout);
  in the fused realization rows in lanes of 6, compiled instead by gcc and clang on x86
  without AVX-512 (EXACTC_NARROW_FMA_LANES: the 8-row lanes' fused sums spill there),
  and rows in lanes of 16 as their wide layout, compiled instead by gcc with AVX-512
  (EXACTC_WIDE_LANES; wide_layout: not where the rows never fill 16 lanes or lie 4 KiB
  apart).
- the quantized linears (qlinear_w, qlinear_i; docs/semantics.md section 15) get the
  output columns outermost (the split's), in lanes across outputs: n in lanes of 16 (8
  for qlinear_i's q4 form on one row), over rows in lanes of 8 or 4 where they fill,
  with the weight's values (wq) and scales (wd) packed where they can be (laid out at
  load in a program: printer/prepack.py); each
  output's float sum still runs block by block in index order. In blocks of 32
  qlinear_i gets rows in lanes of 4 over n in lanes of 8 where the rows fill them (a
  prompt), each block's 4 x 8 outputs one call of the runtime's tile kernel, else n in
  lanes of 8 alone with both packs, each block's 8 rows one call of its block kernel
  (exactc_dot.h) on its values' block panel. In other blocks its q8 form keeps its plain body under n
  outermost, whose exact int32 block sums then vectorize along k, faster than lanes
  across outputs. quantize gets
  rows in lanes of 8 over blocks in lanes of 8, quantize_tail rows in lanes of 8
  (bench/quant_layouts.py measured all of these).
- the nests whose transcendental has a laned form in the runtime (gelu_tanh, gelu_erf,
  silu, and softmax without a causal mask) get lanes on their elements or rows, 256
  elements (16 where 256 do not fill) or 16 rows: the printer then calls
  exactc_<f>f_array once per chunk (printer/planned.py). A causal
  softmax keeps its plain loops: its visibility test depends on the row, so lanes of
  rows would gain nothing; its exps are a pass over each row's visible prefix, which
  the printer gives to exp's laned form (printer/nests.py, array_loop).
- the backward's products (docs/semantics.md section 17) whose ordered sum runs down a
  column of both operands, linear_bar_w, linear_bar_x and matmul_bar_b, get their output
  elements in lanes of 4 x 16, the sum inside each lane in its order; the attention's
  dscores (matmul_bar_a) the forward matmuls' layout, V's panel packed; gelu's backward
  the laned tanh, in chunks of 256 elements, as gelu.
  Every other nest keeps its plain loops.
- every nest whose outermost loop has at least two iterations is split into up to
  PIECES even pieces, which an OpenMP team of at most omp_get_max_threads() threads runs;
  a laned outer loop is cut between chunks of its lanes (no piece ends in a partial
  chunk but the last).

A tuned table (`exactc plan --tune`, exactc/tune.py) overrides the first choice where it
names a nest: its layout, measured fastest on this machine for this compiler and flags,
is used when it is legal for the nest (else the list above decides).

Any legal plan gives the reference's bits, so this choice is about speed only; the
tests export with it and compare bytes with OMP_NUM_THREADS 1 and 2 and without OpenMP.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

from exactc.exporter import dims
from exactc.exporter.kernels.ir import CTYPE_TO_TYPE, Fma, Kernel, Nest, statement_exprs, walk_expr, walk_statements
from exactc.exporter.kernels.layouts import Layout, LayoutError
from exactc.exporter.kernels.plans import NestPlan, Plan, PlanError, load_plan, validate_plan
from exactc.exporter.kernels.splits import Split, split_pieces
from exactc.exporter.primitives import shown_attrs
from exactc.exporter.types import STORAGE

PIECES = 8  # pieces per split: enough for 8 threads, cheap on 1

# Candidate layouts for nests with a reduction over rows x columns, fastest first.
_MATRIX_LAYOUTS = {
    "linear": [
        Layout(order=("n", "m"), lanes=(("m", 8), ("n", 16)), packs=("w",)),
        Layout(order=("n", "m"), lanes=(("n", 16),), packs=("w",)),
        Layout(order=("n", "m"), lanes=(("n", 16),)),
    ],
    # The backward's products whose ordered sum runs down a column of both operands
    # (a weight's gradient over the positions, an input's over the outputs, the attention
    # values' over the rows): each output element its own lane, 4 x 16 of them, the sum
    # inside, so that every step reads a row of one operand along the lanes' k and a few
    # of the other. Plain, the weights' gradients alone took 83 % of a GPT-2-like loss_grad.
    "linear_bar_w": [
        Layout(order=("n", "k"), lanes=(("n", 4), ("k", 16))),
        Layout(order=("n", "k"), lanes=(("k", 16),)),
    ],
    "linear_bar_x": [
        Layout(order=("m", "k"), lanes=(("m", 4), ("k", 16))),
        Layout(order=("m", "k"), lanes=(("k", 16),)),
    ],
    "matmul_bar_b": [
        Layout(order=("j", "n", "k"), lanes=(("n", 4), ("k", 16))),
        Layout(order=("j", "n", "k"), lanes=(("k", 16),)),
    ],
    # The attention's dscores, dy against V reduced along the head's elements: the forward
    # matmuls' layout, per head, V's panel packed.
    "matmul_bar_a": [
        Layout(order=("i", "k", "m"), lanes=(("m", 8), ("k", 16)), packs=("b",)),
        Layout(order=("i", "k", "m"), lanes=(("k", 16),), packs=("b",)),
        Layout(order=("i", "k", "m"), lanes=(("k", 16),)),
    ],
}


def even_split(extent: dims.Extent, pieces: int = PIECES, lanes: int = 1) -> Split | None:
    """`extent` cut into min(pieces, chunks) pieces of whole chunks of `lanes` (the
    last piece ends at the extent), their chunk counts differing by at most one; None
    when there is nothing to share (one chunk). Whole chunks keep every piece's lanes
    full but in the last one, and let a kernel read a weight packed at load
    (printer/prepack.py). An extent that follows the run-time length is cut in `pieces`
    equal parts, scaled to it when the program runs (a part is empty where the extent
    is short)."""
    if dims.is_symbolic(extent):
        return Split(0, tuple((k, k + 1) for k in range(pieces)), of=pieces) if pieces >= 2 else None
    chunks = -(-extent // lanes)
    count = min(pieces, chunks)
    if count < 2:
        return None
    cuts = [chunks * k // count * lanes for k in range(1, count)]
    return Split(0, split_pieces(extent, cuts))


# Lanes that make the printer call a transcendental's laned form (printer/planned.py).
# The elementwise ones in chunks of 256: one call of exactc_<f>f_array per chunk, whose
# setup a chunk of 16 paid for 16 elements (exactc plan --tune, GPT-2-like gelu_tanh on
# a Zen 4: lanes of 256 1.27 times faster than 16 with clang 14, 1.03 with gcc 12).
ELEMENT_LANES = (Layout(lanes=(("i", 256),)), Layout(lanes=(("i", 16),)))
TRANSCENDENTAL_LAYOUTS = {
    "gelu_tanh": list(ELEMENT_LANES),
    "gelu_erf": list(ELEMENT_LANES),
    "silu": list(ELEMENT_LANES),
    # gelu's backward: the same tanh of the same u; plain, its scalar calls were 7 % of a
    # GPT-2-like loss_grad
    "gelu_tanh_bar": list(ELEMENT_LANES),
    "softmax": [Layout(lanes=(("i", 16),))],
}


# Candidate layouts of the quantized nests per weight format, fastest first, as
# bench/quant_layouts.py measured them (docs/performance.md): the q8 weight-only form
# gains most from both packs over rows in lanes of 8; for q4 (a byte holds two values,
# its two nibble loops read one pack) rows in lanes of 4 were faster than 8. One row
# leaves n in lanes of 16 with both packs: a program lays the values and the scales out
# as their panels at load (printer/prepack.py), which made a decode step twice as fast
# (copied at every call, packing the values was slower than reading them in place:
# nothing reuses the panel). A short last block (G not dividing K) reads wq and wd
# through a second index, so neither packs: the plain lanes follow.
_QUANTIZED_LAYOUTS = {
    "qlinear_w": {
        "q8": [
            Layout(order=("n", "m"), lanes=(("m", 8), ("n", 16)), packs=("wq", "wd")),
            Layout(order=("n", "m"), lanes=(("m", 4), ("n", 16)), packs=("wq", "wd")),
            Layout(order=("n", "m"), lanes=(("n", 16),), packs=("wq", "wd")),
            Layout(order=("n", "m"), lanes=(("m", 4), ("n", 16)), packs=("wd",)),
            Layout(order=("n", "m"), lanes=(("n", 16),), packs=("wd",)),
            Layout(order=("n", "m"), lanes=(("m", 4), ("n", 16))),
            Layout(order=("n", "m"), lanes=(("n", 16),)),
        ],
        "q4": [
            Layout(order=("n", "m"), lanes=(("m", 4), ("n", 16)), packs=("wq", "wd")),
            Layout(order=("n", "m"), lanes=(("n", 16),), packs=("wq", "wd")),
            Layout(order=("n", "m"), lanes=(("m", 4), ("n", 16)), packs=("wd",)),
            Layout(order=("n", "m"), lanes=(("n", 16),), packs=("wd",)),
            Layout(order=("n", "m"), lanes=(("m", 4), ("n", 16))),
            Layout(order=("n", "m"), lanes=(("n", 16),)),
        ],
    },
    # qlinear_i's q8 form: its plain body with n outermost, whose int32 block sums
    # vectorize along k (any order is exact): 2.8x lanes across outputs on one row, as
    # fast as the best lanes on 64 rows. Its q4 form keeps lanes across outputs where the
    # block sums stay loops (G other than 32: BLOCK_KERNEL_LAYOUTS below): gcc 12.2 at -O2
    # with AVX-VNNI vectorizes the plain body's nibble sums into wrong bits (its function
    # is compiled without gcc's vectorizer there, exactc_rt.h), which the lanes do not
    # (built without VNNI, that body was about 2x the lanes on one row). On one row, n in
    # lanes of 8 beat 16 in the Makefile's 512-bit build.
    "qlinear_i": {
        "q8": [Layout(order=("n", "m"))],
        "q4": [
            Layout(order=("n", "m"), lanes=(("m", 4), ("n", 16)), packs=("wd",)),
            Layout(order=("n", "m"), lanes=(("n", 8),), packs=("wd",)),
            Layout(order=("n", "m"), lanes=(("m", 4), ("n", 16))),
            Layout(order=("n", "m"), lanes=(("n", 8),)),
        ],
        # a layout prints each super-block's sums as one call of exactc_dot.h's kernel
        # (printer/dots.py), n outermost: 8 rows a call where n fills lanes of 8, else one.
        # One thread on an AVX2 Zen 2, Q4_K at 1x768 by 768x2048: 72.7 us (n:8), 108.9
        # (one row a call), 403.8 (the plain loops) (bench/quant_speed.py)
        **{fmt: [Layout(order=("n", "m"), lanes=(("n", 8),)), Layout(order=("n", "m"))]
           for fmt in ("q4_k", "q5_k", "q6_k")},
    },
    # quantize has one format (the activations' q8); its rows split, a decode step's one
    # row stays plain (1.3 us of work: no split, no lanes pays).
    "quantize": {"q8": [Layout(lanes=(("m", 8), ("b", 8))), Layout(lanes=(("m", 8),))]},
    "quantize_tail": {"q8": [Layout(lanes=(("m", 8),))]},
}


# Blocks of 32, whose whole blocks' sums the printer makes calls of the runtime's block
# kernels (runtime/exactc_dot.h, printer/dots.py): qlinear_i with n in lanes of 8, each
# block's 8 rows one call of the x8 kernel (x's block loaded once, the 8 sums reduced
# together, the f32 combine in lanes), else (fewer than 8 outputs) its plain body with n
# outermost, one call a block. bench/quant_layouts.py, one thread on an AVX2 Zen 2 (the
# kernels' vpmaddubsw path), in us, n:8 against the plain body: q8 12.2 / 18.5 and q4
# 12.5 / 21.0 at 1x288 by 288x768, q8 536 / 763 and q4 464 / 827 at 1x288 by 288x32000,
# q8 671 / 1087 and q4 691 / 1257 on 64 rows; the scales' pack beside it 1.04x to 1.08x
# slower on one row, 1.01x to 1.09x faster on 64 (docs/performance.md). Where the rows
# fill lanes of 4 (a prompt), rows in lanes of 4 over n in lanes of 8 come first: each
# block of a 4 x 8 tile one call of the tile kernel (x's blocks loaded once, |w| made
# once, the combine in 8 float lanes), 64x288 by 288x768 q8 432 us and q4 508 us
# against n:8's 676 and 690 (bench/quant_layouts.py, the same Zen 2); on one row its lanes
# never fill and the plan takes n:8 with both packs: in a program they are laid out at
# load (wq as block panels, printer/prepack.py), not copied, and a stories110M-shaped
# decode program generates 2.1x as fast (45.7 to 95.9 tokens/s in q8, 1 thread, the same
# Zen 2; docs/performance.md "Generation").
BLOCK_KERNEL_VALUES = 32
BLOCK_KERNEL_LAYOUTS = {"qlinear_i": [Layout(order=("n", "m"), lanes=(("m", 4), ("n", 8))),
                                      Layout(order=("n", "m"), lanes=(("n", 8),), packs=("wq", "wd")),
                                      Layout(order=("n", "m"), lanes=(("n", 8),)), Layout(order=("n", "m"))]}


def quantized_layouts(kernel: Kernel, nest: Nest) -> list[Layout]:
    """The quantized nest's candidates for its kernel's weight format and block (none for
    others)."""
    if kernel.attrs.get("block") == BLOCK_KERNEL_VALUES and nest.name in BLOCK_KERNEL_LAYOUTS:
        return BLOCK_KERNEL_LAYOUTS[nest.name]
    return _QUANTIZED_LAYOUTS.get(nest.name, {}).get(kernel.attrs.get("fmt", "q8"), [])


def matmul_layouts(nest: Nest, linear: list[Layout] | None = None) -> list[Layout]:
    """linear's candidates (or the `linear` layouts given) for a batched matmul: its batch
    axes (i, or ib and g) first, b's panel for w's."""
    batch = tuple(a.name for a in nest.axes if a.name not in ("m", "n"))
    return [Layout(order=batch + layout.order, lanes=layout.lanes,
                   packs=tuple("b" for _ in layout.packs)) for layout in linear or _MATRIX_LAYOUTS["linear"]]


def candidate_layouts(kernel: Kernel, nest: Nest) -> list[Layout]:
    """The layouts to try for `nest`, fastest first (none: the plain nest)."""
    if nest.name == "softmax" and kernel.attrs.get("causal"):
        return []
    if nest.name == "matmul":
        return [layout for layout in matmul_layouts(nest) if lanes_fill(nest, layout)]
    return [layout for layout in _MATRIX_LAYOUTS.get(nest.name, []) + TRANSCENDENTAL_LAYOUTS.get(nest.name, [])
            + quantized_layouts(kernel, nest) if lanes_fill(nest, layout)]


def lanes_fill(nest: Nest, layout: Layout) -> bool:
    """No axis of a static extent smaller than its lane count: such lanes are never
    filled, and every element runs in the remainder's scalar loops (a decode step's
    one-row linear with rows in lanes of 8)."""
    extents = {a.name: a.extent for a in nest.axes}
    return all(dims.is_symbolic(extents.get(axis, count)) or extents.get(axis, count) >= count
               for axis, count in layout.lanes)


def _first_legal(kernel: Kernel, nest: Nest, layouts: list[Layout]) -> Layout:
    for layout in layouts:
        try:
            validate_plan(kernel, Plan(((nest.name, NestPlan(layout)),)))
            return layout
        except LayoutError:
            continue
    return Layout()


def nest_signature(kernel: Kernel, nest: Nest) -> str:
    """What a tuned layout is keyed by: the kernel's primitive, site type, attributes and
    buffer shapes (its shape, whatever program it is in), and the nest's name; `|fma`
    after it for a nest of the fused realization, whose speed is its own. A quiet
    attribute at its default is left out (Primitive.quiet), so tables measured before
    it existed still match."""
    shown = shown_attrs(kernel.primitive, kernel.attrs)
    attrs = ",".join(f"{k}={shown[k]!r}" for k in sorted(shown))
    shapes = ",".join(f"{b.name}:{'x'.join(str(d) for d in b.shape)}" for b in kernel.buffers)
    fused = "|fma" if fuses(nest) else ""
    return f"{kernel.primitive}|{kernel.site}|{attrs}|{shapes}|{nest.name}{fused}"


def fuses(nest: Nest) -> bool:
    """Whether the nest computes a step as fma_A (the fused realization's ir.Fma)."""
    return any(isinstance(node, Fma) for stmt in walk_statements(nest.body) for expr in statement_exprs(stmt)
               for node in walk_expr(expr))


def auto_nest_plan(kernel: Kernel, nest: Nest, pieces: int = PIECES,
                   tuned: Mapping[str, Layout] | None = None) -> NestPlan | None:
    """The layout and split chosen for one nest, or None to leave it plain: the tuned
    layout of its signature when there is one and it is legal, else the first legal
    candidate."""
    candidates = candidate_layouts(kernel, nest)
    measured = tuned.get(nest_signature(kernel, nest)) if tuned else None
    if measured is not None:
        candidates = [measured, *candidates]
    layout = _first_legal(kernel, nest, candidates)
    if not nest.axes:
        return None
    first = layout.loop_order(nest)[0]
    extent = next(a.extent for a in nest.axes if a.name == first)
    split = even_split(extent, pieces, dict(layout.lanes).get(first, 1))
    if split is None and layout.is_plain:
        return None
    if layout == measured:  # measured for one build: it needs no second choice
        return NestPlan(layout, split)
    return NestPlan(layout, split, narrow_layout(kernel, nest, layout, split),
                    wide_layout(kernel, nest, layout, split))


# The narrow layout of the matrix nests' 8-row lanes (exactc_rt.h, EXACTC_NARROW_LANES):
# rows in lanes of 4 (bench/linear_speed.py --shapes: on an AVX2 Zen 2 with clang 14,
# m:4 by n:16 1.6 to 1.9 times m:8 by n:16; measured at f32).
NARROW_ROWS = {8: 4}
# A fused nest's narrow layout (EXACTC_NARROW_FMA_LANES: x86 without AVX-512, gcc and
# clang alike): rows in lanes of 6. Its 6 x 2 ymm accumulators, the two weight vectors
# and the broadcast row value fit AVX2's 16 registers, so gcc's fused multiply-adds run
# from registers; in 8-row lanes gcc keeps two accumulators on the stack, a store and a
# load on every step of their sums (docs/performance.md, "The fused realization").
NARROW_FMA_ROWS = {8: 6}
# The wide layout (EXACTC_WIDE_LANES, gcc with AVX-512): rows in lanes of 16 (exactc plan
# --tune on a Zen 4 with gcc 12: m:16 by n:16 0.86 to 0.91 times the time of m:8 by n:16
# for the GPT-2-like and Llama-like linears, 0.82 to 0.99 for the attention matmuls),
# except where the rows' stride is a multiple of 4 KiB (ALIASING_STRIDE): there the 16
# rows' streams fall in one set of the 8-way level-1 cache and evict each other (the
# Llama-like linear over 1024 inputs ran 2.1 times slower in 16-row lanes).
WIDE_ROWS = {8: 16}
ALIASING_STRIDE = 4096


def row_stride(kernel: Kernel, nest: Nest) -> int | None:
    """Bytes between consecutive rows (m) of the operand a matrix nest reads by rows: x
    of a linear, a of a matmul; None where its rows are not strided so (a transposed,
    m contiguous) or the stride follows the run-time length."""
    buffers = {b.name: b for b in kernel.buffers}
    if nest.name == "linear":
        x = buffers["x"]
    elif nest.name == "matmul" and not kernel.attrs.get("trans_a"):
        x = buffers["a"]
    else:
        return None
    k = x.shape[-1]
    return None if dims.is_symbolic(k) else int(k) * STORAGE[CTYPE_TO_TYPE[x.ctype]].itemsize


def rows_variant(kernel: Kernel, nest: Nest, layout: Layout, split: Split | None,
                 rows: Mapping[int, int]) -> Layout | None:
    """`layout` with its rows in the lanes `rows` maps its width to, for linear and
    matmul nests in lanes of m over n; None where there is none or the nest cannot take
    it."""
    lanes = dict(layout.lanes)
    if nest.name not in ("linear", "matmul") or [a for a, _ in layout.lanes] != ["m", "n"] \
            or lanes["m"] not in rows:
        return None
    variant = dataclasses.replace(layout, lanes=(("m", rows[lanes["m"]]), ("n", lanes["n"])))
    if dims.upper(next(a.extent for a in nest.axes if a.name == "m")) < rows[lanes["m"]]:
        return None  # lanes no row count up to T_max fills
    try:
        validate_plan(kernel, Plan(((nest.name, NestPlan(layout, split, variant)),)))
    except LayoutError:
        return None
    return variant


def narrow_layout(kernel: Kernel, nest: Nest, layout: Layout, split: Split | None) -> Layout | None:
    """The layout's narrow variant (NARROW_ROWS), printed for EXACTC_NARROW_LANES builds;
    a fused nest's (NARROW_FMA_ROWS), for EXACTC_NARROW_FMA_LANES builds."""
    return rows_variant(kernel, nest, layout, split, NARROW_FMA_ROWS if fuses(nest) else NARROW_ROWS)


def wide_layout(kernel: Kernel, nest: Nest, layout: Layout, split: Split | None) -> Layout | None:
    """The layout's wide variant (WIDE_ROWS), printed for EXACTC_WIDE_LANES builds; none
    where the rows' stride is a multiple of ALIASING_STRIDE."""
    stride = row_stride(kernel, nest)
    if stride is not None and stride % ALIASING_STRIDE == 0:
        return None
    return rows_variant(kernel, nest, layout, split, WIDE_ROWS)


def auto_kernel_plan(kernel: Kernel, pieces: int = PIECES, tuned: Mapping[str, Layout] | None = None) -> Plan | None:
    """The automatic plan of every nest of `kernel`, validated; None if all stay plain."""
    chosen = []
    for nest in kernel.nests:
        nest_plan = auto_nest_plan(kernel, nest, pieces, tuned)
        if nest_plan is not None:
            chosen.append((nest.name, nest_plan))
    if not chosen:
        return None
    plan = Plan(tuple(chosen))
    validate_plan(kernel, plan)
    return plan


class AutoPlan:
    """The plan `--plan auto` stands for: each kernel's part is chosen when the host meets
    the kernel (KernelTable.plan_for), from its shapes and the tuned layouts (nest
    signature -> layout) of the build at hand. It answers as a Plan does."""

    def __init__(self, pieces: int = PIECES, tuned: Mapping[str, Layout] | None = None):
        self.pieces = pieces
        self.tuned = dict(tuned or {})

    def for_kernel(self, kernel: Kernel, name: str) -> tuple[Plan | None, set[str]]:
        return auto_kernel_plan(kernel, self.pieces, self.tuned), set()

    def text(self) -> str:
        """What names this plan in an export's cache key: `auto`, and the digest of the
        tuned layouts when there are any."""
        if not self.tuned:
            return "auto"
        table = json.dumps({k: v.to_json() for k, v in sorted(self.tuned.items())}, sort_keys=True)
        return "auto+tuned:" + hashlib.sha256(table.encode()).hexdigest()[:16]

    def entry_names(self) -> tuple[str, ...]:
        return ()  # it names no nest, so none can go unused


def load_plan_option(option: str | None, cc: str | None = None) -> Any:
    """The plan a `--plan` option names: None for no option or `none` (the plain nests),
    the automatic plan (autoplan.AutoPlan) for `auto`, with the tune table's layouts for
    the compiler `cc` (default $CC, else cc) on this CPU, else the plan file at that path.
    Every command and test that takes a plan reads it here (the automatic plan, with the
    tune table's layouts, is this module's; a plan file is plans.py's)."""
    if option is None or option == "none":
        return None
    if option == "auto":
        from exactc.exporter.kernels.tuned import tuned_layouts  # the table of `exactc plan --tune`, if any

        return AutoPlan(tuned=tuned_layouts(cc))
    if not Path(option).is_file():
        raise PlanError("-", "(file)", f"{option}: no such file; give a plan file, `auto` or `none`")
    return load_plan(option)
