"""Linear weights packed once when the program loads them (exporter/printer/prepack.py):
which kernels read their w as panels laid out at load, which parameters map_weights lays
out, and that the printed kernels and host say so. That the programs keep the
reference's bits with it is the conformance of every `--plan auto` program
(tests/test_autoplan.py, tests/test_generate_program.py), and exactc_pack_panels' layout
is tests/test_host_runtime.py's."""

from __future__ import annotations

import pytest

from exactc.exporter import dims, export, graph
from exactc.exporter.kernels.autoplan import AutoPlan, auto_kernel_plan
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.plans import NestPlan, Plan
from exactc.exporter.kernels.splits import Split
from exactc.exporter.printer.host import print_program
from exactc.exporter.printer.kernel_table import KernelTable
from exactc.exporter.printer.kernels import print_kernel
from exactc.exporter.printer.prepack import panel_widths

SIZES = {
    "gpt": {"vocab": 40, "positions": 12, "dim": 32, "heads": 2, "layers": 2, "mlp": 40, "tokens": 10},
    "llama": {"vocab": 40, "dim": 32, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 40, "tokens": 10},
}


def program(model: str, entry: str, weights=None, form=None) -> graph.Program:
    return export.build_program(model, entry, "f32", 0, SIZES[model], None, weights, form)[0]


def linear_sources(table: KernelTable) -> dict[str, str]:
    return {use.name: use.printed.source for use in table.uses.values() if use.kernel.primitive == "linear"}


@pytest.mark.parametrize("model,entry", [("llama", "forward"), ("llama", "decode"), ("gpt", "forward")])
def test_every_weight_only_a_linear_reads_is_packed_at_load(model, entry):
    """Under the automatic plan, a parameter is laid out as its panels exactly when only
    linear kernels read it, as w (graph.linear_weights): GPT's tied head, also the
    embedding table, keeps its pack at every call."""
    p = program(model, entry)
    table = KernelTable(p, "f32", AutoPlan())
    assert set(table.packed) == set(graph.linear_weights(p))
    assert all(packed.lanes == 16 for packed in table.packed.values())
    for name, source in linear_sources(table).items():
        copies = "w_pack[" in source
        assert copies != ("packed at load" in source), name
        if model == "gpt" and name == "linear_logits":
            assert copies, "the tied head is also the embedding table: it cannot be laid out as panels"
        elif model == "llama":
            assert not copies, name
    model_c = print_program(p, "f32", plan=AutoPlan()).files["model.c"]
    assert model_c.count("exactc_pack_panels(") == len(table.packed)


def test_a_stacked_weight_is_laid_out_layer_by_layer():
    p = program("llama", "forward")
    packed = KernelTable(p, "f32", AutoPlan()).packed
    gate = next(packed[name] for name in packed if "gate_proj" in name)
    assert (gate.layers, gate.rows, gate.cols) == (2, 40, 32)


def test_nothing_is_packed_without_a_plan():
    assert KernelTable(program("llama", "forward"), "f32").packed == {}
    assert KernelTable(program("llama", "forward", ("q8", 32)), "f32").packed == {}
    model_c = print_program(program("llama", "forward"), "f32").files["model.c"]
    assert "exactc_pack_panels" not in model_c and "return 0;" in model_c


@pytest.mark.parametrize("entry", ["forward", "decode"])
def test_q8_values_and_scales_are_packed_and_q4_scales_alone(entry):
    """qlinear_w reads wq (q8: one byte a value, k innermost; q4: a byte of two values,
    read by the low- and the high-nibble loop alike) and wd (a scale per block) as rows
    of n in lanes: both are laid out as panels at load, a q4 row of K / 2 bytes."""
    table = KernelTable(program("llama", entry, ("q8", 32), "weight-only"), "f32", AutoPlan())
    values = table.packed["model.layers.{l}.self_attn.q_proj.weight"]
    scales = table.packed["model.layers.{l}.self_attn.q_proj.weight_scale"]
    assert (values.layers, values.rows, values.cols, values.lanes) == (2, 32, 32, 16)
    assert (scales.layers, scales.rows, scales.cols, scales.lanes) == (2, 32, 1, 16)
    assert "lm_head.weight" in table.packed
    q4 = KernelTable(program("llama", entry, ("q4", 32), "weight-only"), "f32", AutoPlan()).packed
    q4_values = q4["model.layers.{l}.self_attn.q_proj.weight"]
    assert (q4_values.layers, q4_values.rows, q4_values.cols, q4_values.lanes) == (2, 32, 16, 16)
    assert "model.layers.{l}.self_attn.q_proj.weight_scale" in q4
    # mlp 40 is not a multiple of the block: the down projection's last block is short,
    # read through a second index, and neither of its tensors is packed
    assert not any("down_proj" in name for name in q4 | table.packed)


def test_a_panel_must_walk_its_rows_in_order():
    """wq[n, 32 blk + k] under the body loops blk, k: its panel is the row in order;
    under a layout whose lanes are not on n there is nothing to read in panels."""
    kernel = lower("qlinear_w", "f32", {"x": (1, 64), "wq": (40, 64), "wd": (40, 2)},
                   {"fmt": "q8", "block": 32, "has_b": False})
    laned = Layout(order=("n", "m"), lanes=(("n", 16),), packs=("wq", "wd"))
    assert panel_widths(kernel, Plan((("qlinear_w", NestPlan(laned)),))) == {"wq": 16, "wd": 16}
    rows = Layout(lanes=(("m", 2),), packs=("wd",))
    assert panel_widths(kernel, Plan((("qlinear_w", NestPlan(rows)),))) == {}


def linear_plan(pieces) -> tuple:
    kernel = lower("linear", "f32", {"x": (3, 32), "w": (40, 32)}, {})
    layout = Layout(order=("n", "m"), lanes=(("n", 16),), packs=("w",))
    return kernel, Plan((("linear", NestPlan(layout, Split(0, pieces) if pieces else None)),))


def test_a_kernel_reads_panels_only_where_every_chunk_starts_on_one():
    """A split piece that starts inside a chunk would read panel c at a chunk that is not
    chunk c: such a kernel keeps its pack."""
    assert panel_widths(*linear_plan(None)) == {"w": 16}
    assert panel_widths(*linear_plan(((0, 16), (16, 40)))) == {"w": 16}
    assert panel_widths(*linear_plan(((0, 20), (20, 40)))) == {}
    kernel = lower("linear", "f32", {"x": (3, 32), "w": (40, 32)}, {})
    assert panel_widths(kernel, None) == {}
    assert panel_widths(kernel, auto_kernel_plan(kernel)) == {"w": 16}
    tiled = Plan((("linear", NestPlan(Layout(order=("n", "m"), tiles=(("n", 32),), lanes=(("n", 16),),
                                                packs=("w",)))),))
    assert panel_widths(kernel, tiled) == {}


def test_panels_only_where_the_plan_lays_the_nest_out_and_the_row_is_static_and_read_once():
    """No entry for the nest, a row whose length follows T, a weight read through two
    different indices (a short last block: the tail loop reads wq at another index):
    none is read as panels laid out at load."""
    laned = Layout(order=("n", "m"), lanes=(("n", 16),), packs=("wq", "wd"))
    kernel = lower("qlinear_w", "f32", {"x": (1, 64), "wq": (40, 64), "wd": (40, 2)},
                   {"fmt": "q8", "block": 32, "has_b": False})
    assert panel_widths(kernel, Plan(())) == {}
    short = lower("qlinear_w", "f32", {"x": (1, 70), "wq": (40, 70), "wd": (40, 3)},
                  {"fmt": "q8", "block": 32, "has_b": False})
    assert panel_widths(short, Plan((("qlinear_w", NestPlan(laned)),))) == {}
    T = dims.length(8)
    symbolic = lower("linear", "f32", {"x": (3, T), "w": (40, T)}, {})
    packed_w = Layout(order=("n", "m"), lanes=(("n", 16),), packs=("w",))
    assert panel_widths(symbolic, Plan((("linear", NestPlan(packed_w)),))) == {}


def test_int8_panels_laid_out_at_load_are_asked_for_ahead():
    """A one-row q8 or q4 linear reads 16 bytes of its values a k step: the kernel asks
    for the panel's lines a few blocks on (EXACTC_PREFETCH, a hint: 2.9 times the tokens
    per second at stories110M's shape, where the hardware's prefetchers fell behind). Not
    for float panels, nor for a pack copied at every call (it is read from the copy)."""
    for fmt, row_bytes, step, ahead in (("q8", 64, 512, 4), ("q4", 32, 256, 8)):
        kernel = lower("qlinear_w", "f32", {"x": (1, 64), "wq": (40, row_bytes), "wd": (40, 2)},
                       {"fmt": fmt, "block": 32, "has_b": False})
        plan = Plan((("qlinear_w", NestPlan(Layout(order=("n", "m"), lanes=(("n", 16),), packs=("wq", "wd")))),))
        source = print_kernel(kernel, "k", plan, frozenset({"wq", "wd"})).source
        assert f"EXACTC_PREFETCH(wq_p + (blk + {ahead}) * {step} + pf);" in source, (fmt, source)
        assert "wd_p + (blk" not in source  # the scales: a line a block, the hardware keeps up
        assert "EXACTC_PREFETCH" not in print_kernel(kernel, "k", plan).source
    linear = lower("linear", "f32", {"x": (1, 32), "w": (40, 32)}, {})
    laned = Plan((("linear", NestPlan(Layout(order=("n", "m"), lanes=(("n", 16),), packs=("w",)))),))
    assert "EXACTC_PREFETCH" not in print_kernel(linear, "k", laned, frozenset({"w"})).source


# ---- weights laid out as panels at load (printer/prepack.py)


def one_weight_two_linears():
    """One weight w (40 x 32) that two linear kernels read: x of one row, z of three."""
    def entry(params, x, z):
        return {"a": graph.linear(x, params["w"]), "c": graph.linear(z, params["w"])}

    return graph.trace("m", "e", entry, [graph.ParamSpec("w", (40, 32), 0)],
                       [graph.InputSpec("x", (1, 32), "x"), graph.InputSpec("z", (3, 32), "x")])


def _laned_kernels(program, widths):
    """The program's kernels (by kernel_key, in order of first launch), each under
    lanes n:W with w packed, W from `widths`."""
    from exactc.exporter.printer.kernel_table import kernel_key, launched_ops, op_shapes
    kernels = {}
    for op in launched_ops(program):
        kernels.setdefault(kernel_key(op), lower(op.primitive, "f32", op_shapes(op), op.attrs))
    return {key: (kernel, Plan((("linear", NestPlan(Layout(order=("n", "m"), lanes=(("n", w),), packs=("w",)))),)))
            for (key, kernel), w in zip(kernels.items(), widths, strict=True)}


def test_prepack_lays_out_a_weight_of_one_width_as_one_layer():
    from exactc.exporter.printer import prepack
    program = one_weight_two_linears()
    ahead, packed = prepack.packed_ahead(program, _laned_kernels(program, [16, 16]))
    assert packed == {"w": prepack.PackedParameter(1, 40, 32, 16)}  # not stacked: one layer
    assert list(ahead.values()) == [frozenset({"w"})] * 2
    # read in lanes of 16 by one kernel and of 8 by the other: no one layout serves both
    assert prepack.packed_ahead(program, _laned_kernels(program, [16, 8])) == ({}, {})


def test_prepack_split_axis_from_the_nest_order_and_no_scaled_split():
    from exactc.exporter.kernels.splits import Split
    from exactc.exporter.printer.prepack import panel_widths
    kernel = lower("linear", "f32", {"x": (3, 32), "w": (40, 32)}, {})

    def widths(layout, split):
        return panel_widths(kernel, Plan((("linear", NestPlan(layout, split)),)))
    # no order given: the nest's own (m, n), so depth 0 cuts m and depth 1 cuts n
    natural = Layout(lanes=(("n", 16),), packs=("w",))
    assert widths(natural, Split(0, ((0, 1), (1, 3)))) == {}
    assert widths(natural, Split(1, ((0, 16), (16, 40)))) == {"w": 16}
    # pieces of a run-time extent are scaled when the program runs: they may fall anywhere
    ordered = Layout(order=("n", "m"), lanes=(("n", 16),), packs=("w",))
    assert widths(ordered, Split(0, ((0, 16), (16, 40)))) == {"w": 16}
    assert widths(ordered, Split(0, ((0, 16), (16, 40)), of=40)) == {}


# ---- a q8 weight's panels packed at load, of rows shorter than one block


def test_a_q8_weight_of_rows_shorter_than_a_block_reads_its_panels_packed_at_load():
    # K = 16 < block 32: wq's panel loop is the tail loop t (no name: its number), wd's has
    # no body loop (a row of one)
    kernel = lower("qlinear_w", "f32", {"x": (3, 16), "wq": (40, 16), "wd": (40, 1)}, {"fmt": "q8", "block": 32})
    plan = auto_kernel_plan(kernel)
    assert plan.for_nest("qlinear_w").layout == Layout(order=("n", "m"), lanes=(("n", 16),), packs=("wq", "wd"))
    source = print_kernel(kernel, "ql", plan, frozenset({"wq", "wd"})).source
    assert [line for line in source.splitlines() if "packed at load */" in line] == [
        "        const int8_t *restrict wq_p = wq + n_c * 16; /* the chunk's panel, packed at load */",
        "        const float *restrict wd_p = wd + n_c * 1; /* the chunk's panel, packed at load */",
    ]


# ---- weights laid out as panels at load, continued (printer/prepack.py): a q4 row shorter than
# half a block is read only in part, so its values keep their pack


def test_a_q4_weight_of_rows_shorter_than_half_a_block_keeps_the_pack_of_its_values():
    # A q4 row of K values in blocks of 32 is one block's 16 bytes. At K = 8 the tail loop
    # t reads wq[n, t] over the first 8 bytes only: laid out at load as panels of 16-byte
    # rows, chunk c lies at 16 c W, but the kernel would step its chunks by 8 (its panel
    # is its body loops, t). So wq keeps its copy at every call and only wd is laid out.
    # At K = 16 the tail loop reads the whole row: both are.
    from exactc.exporter.printer.prepack import panel_widths
    laned = Plan((("qlinear_w", NestPlan(Layout(order=("n", "m"), lanes=(("n", 16),), packs=("wq", "wd")))),))
    for k, widths in ((8, {"wd": 16}), (16, {"wq": 16, "wd": 16})):
        kernel = lower("qlinear_w", "f32", {"x": (1, k), "wq": (40, 16), "wd": (40, 1)},
                       {"fmt": "q4", "block": 32, "has_b": False})
        assert panel_widths(kernel, laned) == widths, k


def test_a_q4_model_of_dim_8_lays_out_only_the_scales_of_its_weights():
    # llama of dim 8 in the weight-only form in q4 blocks of 32 under the automatic plan: gate, up and the head
    # (40 rows of 8 values, one kernel) have their scales laid out at load and their
    # values copied at every call; q, k, v and o (8 and 4 rows) and down (rows of 40
    # values, which end in a short block) lay out nothing
    from exactc.exporter import export
    from exactc.exporter.kernels.autoplan import AutoPlan
    from exactc.exporter.printer.kernel_table import KernelTable
    sizes = {"vocab": 40, "dim": 8, "heads": 2, "kv_heads": 1, "layers": 2, "mlp": 40, "tokens": 10}
    program = export.build_program("llama", "forward", "f32", 0, sizes, None, ("q4", 32), "weight-only")[0]
    assert sorted(KernelTable(program, "f32", AutoPlan()).packed) == [
        "lm_head.weight_scale",
        "model.layers.{l}.mlp.gate_proj.weight_scale",
        "model.layers.{l}.mlp.up_proj.weight_scale",
    ]


# ---- qlinear_i's values as block panels laid out at load (layouts.RUN_PANELS)


@pytest.mark.parametrize("fmt,row_bytes,run", [("q8", 32, 32), ("q4", 16, 16)])
def test_integer_form_values_are_laid_out_as_block_panels_read_by_the_x8_kernel(fmt, row_bytes, run):
    """In blocks of 32 the integer form reads n in lanes of 8, each block's 8 rows one call
    of the x8 kernel: its values (wq) are laid out at load as panels whose blocks hold the 8
    rows' bytes of one block one after another (a run of 32 bytes for q8, 16 for q4), its
    scales (wd) as the plain panels; map_weights lays them out so, and the kernel hands
    the x8 call the chunk's block in the panel with the rows a run apart."""
    p = program("llama", "decode", (fmt, 32))
    table = KernelTable(p, "f32", AutoPlan())
    values = table.packed["model.layers.{l}.self_attn.q_proj.weight"]
    scales = table.packed["model.layers.{l}.self_attn.q_proj.weight_scale"]
    assert (values.layers, values.rows, values.cols, values.lanes, values.run) == (2, 32, row_bytes, 8, run)
    assert (scales.layers, scales.rows, scales.cols, scales.lanes, scales.run) == (2, 32, 1, 8, 1)
    sources = {use.name: use.printed.source for use in table.uses.values() if use.kernel.primitive == "qlinear_i"}
    call = f"exactc_dot_{fmt}_32x8(&xq[m * 32 + blk * 32], &wq_p[blk * {8 * run}], {run}, s_rows);"
    assert any(call in source for source in sources.values()), sources
    model_c = print_program(p, "f32", plan=AutoPlan()).files["model.c"]
    assert "exactc_pack_block_panels(data + PARAMS[" in model_c and f", 8, {run}, 1) != 0" in model_c


def test_a_copied_block_panels_pack_is_read_as_the_one_laid_out_at_load():
    """Not a parameter (a kernel printed alone), wq's pack is copied at every call in the
    same block-by-block order, and the x8 call reads the copy the same way."""
    kernel = lower("qlinear_i", "f32", {"xq": (1, 64), "xd": (1, 2), "wq": (40, 64), "wd": (40, 2)},
                   {"fmt": "q8", "block": 32, "has_b": False})
    plan = auto_kernel_plan(kernel)
    assert plan.for_nest("qlinear_i").layout.packs == ("wq", "wd")
    source = print_kernel(kernel, "k", plan).source
    assert "wq_p[k + n_l * 32 + blk * 256] = wq[n_c * 64 + n_l * 64 + blk * 32 + k];" in source
    assert "each lane's run of the innermost loop together" in source
    assert "exactc_dot_q8_32x8(&xq[m * 64 + blk * 32], &wq_p[blk * 256], 32, s_rows);" in source
    assert panel_widths(kernel, plan) == {"wq": 8, "wd": 8}
