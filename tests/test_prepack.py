"""Linear weights packed once when the program loads them (exporter/printer/prepack.py):
which kernels read their w as panels laid out at load, which parameters map_weights lays
out, and that the printed kernels and host say so. That the programs keep the
reference's bits with it is the conformance of every `--plan auto` program
(tests/test_autoplan.py, tests/test_generate_program.py), and exactc_pack_panels' layout
is tests/test_host_runtime.py's."""

from __future__ import annotations

import pytest

from exactc.exporter import export, graph
from exactc.exporter.kernels.autoplan import AutoPlan, auto_kernel_plan
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.plans import NestPlan, Plan
from exactc.exporter.kernels.splits import Split
from exactc.exporter.printer.host import print_program
from exactc.exporter.printer.kernel_table import KernelTable
from exactc.exporter.printer.prepack import reads_w_in_panels

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


def test_nothing_is_packed_without_a_plan_or_with_quantized_weights():
    assert KernelTable(program("llama", "forward"), "f32").packed == {}
    assert KernelTable(program("llama", "forward", ("q8", 32)), "f32", AutoPlan()).packed == {}
    model_c = print_program(program("llama", "forward"), "f32").files["model.c"]
    assert "exactc_pack_panels" not in model_c and "return 0;" in model_c


def linear_plan(pieces) -> tuple:
    kernel = lower("linear", "f32", {"x": (3, 32), "w": (40, 32)}, {})
    layout = Layout(order=("n", "m"), lanes=(("n", 16),), packs=("w",))
    return kernel, Plan((("linear", NestPlan(layout, Split(0, pieces) if pieces else None)),))


def test_a_kernel_reads_panels_only_where_every_chunk_starts_on_one():
    """A split piece that starts inside a chunk would read panel c at a chunk that is not
    chunk c: such a kernel keeps its pack."""
    assert reads_w_in_panels(*linear_plan(None)) == 16
    assert reads_w_in_panels(*linear_plan(((0, 16), (16, 40)))) == 16
    assert reads_w_in_panels(*linear_plan(((0, 20), (20, 40)))) is None
    kernel = lower("linear", "f32", {"x": (3, 32), "w": (40, 32)}, {})
    assert reads_w_in_panels(kernel, None) is None
    assert reads_w_in_panels(kernel, auto_kernel_plan(kernel)) == 16
    tiled = Plan((("linear", NestPlan(Layout(order=("n", "m"), tiles=(("n", 32),), lanes=(("n", 16),),
                                                packs=("w",)))),))
    assert reads_w_in_panels(kernel, tiled) is None
