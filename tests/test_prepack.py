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


def program(model: str, entry: str, weights=None) -> graph.Program:
    return export.build_program(model, entry, "f32", 0, SIZES[model], None, weights)[0]


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
    table = KernelTable(program("llama", entry, ("q8", 32)), "f32", AutoPlan())
    values = table.packed["model.layers.{l}.self_attn.q_proj.weight"]
    scales = table.packed["model.layers.{l}.self_attn.q_proj.weight_scale"]
    assert (values.layers, values.rows, values.cols, values.lanes) == (2, 32, 32, 16)
    assert (scales.layers, scales.rows, scales.cols, scales.lanes) == (2, 32, 1, 16)
    assert "lm_head.weight" in table.packed
    q4 = KernelTable(program("llama", entry, ("q4", 32)), "f32", AutoPlan()).packed
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
