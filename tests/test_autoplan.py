"""`exactc export --plan auto`: every nest laned and split by the automatic plan, and the
program still gives the reference's bits, on 1 and 2 threads, with gcc, clang and
without OpenMP (principle 2: a plan changes speed, never bits)."""

from __future__ import annotations

import pytest

from exactc.exporter import dims, export, models
from exactc.exporter.models import cache
from exactc.exporter.kernels.autoplan import auto_kernel_plan, even_split
from exactc.exporter.kernels.lower import lower
from test_programs import build, conforms, needs_clang

# Dimensions where lanes of 8 rows and 16 columns are both full and partial.
SIZES = {
    "gpt": {"vocab": 40, "positions": 12, "dim": 32, "heads": 2, "layers": 2, "mlp": 40, "tokens": 10},
    "bert": {"vocab": 40, "positions": 12, "dim": 32, "heads": 2, "layers": 2, "mlp": 40, "tokens": 10},
    "llama": {"vocab": 40, "dim": 32, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 40, "tokens": 10},
}
CASES = [(m, e, s) for m in ("gpt", "bert", "llama") for e in models.entries(m) if e not in cache.CACHED_ENTRIES
         for s in ("f32", "bf16")]


@needs_clang
@pytest.mark.parametrize("model,entry,site", CASES, ids=[f"{m}-{e}-{s}" for m, e, s in CASES])
def test_auto_plan_keeps_the_reference_bytes(tmp_path, model, entry, site):
    prepared = export.ExportSpec(model, entry, site, 5, SIZES[model], plan="auto").prepare()
    root = export.write(prepared, tmp_path / "program")
    source = (root / "model.c").read_text()
    assert "_split(" in source, "the automatic plan split no launch"
    for cc, openmp in (("gcc", True), ("clang", True), ("gcc", False)):
        program = build(root, cc=cc, openmp=openmp)
        for threads in (1, 2):
            conforms(program, prepared, threads)


def test_linear_gets_the_benchmark_layout_and_every_split_covers_its_axis():
    kernel = lower("linear", "f32", {"x": (10, 32), "w": (40, 32)}, {})
    plan = auto_kernel_plan(kernel)
    (name, nest_plan), = plan.nests
    assert dict(nest_plan.layout.lanes) == {"m": 8, "n": 16} and nest_plan.layout.packs == ("w",)
    assert nest_plan.split.pieces == ((0, 5), (5, 10), (10, 15), (15, 20), (20, 25), (25, 30), (30, 35), (35, 40))


def test_att_v_at_a_run_time_length_gets_both_lanes_and_its_pack():
    """att v reads v's rows k < T: its pack is laid out for T_max, so the automatic plan
    keeps the linear's layout (before, the pack was refused and gcc ran the nest at a
    fifth of the speed)."""
    T = dims.length(256)
    kernel = lower("matmul", "f32", {"a": (6, T, T), "b": (6, T, 64)}, {"trans_a": False, "trans_b": False, "group": 1})
    (name, nest_plan), = auto_kernel_plan(kernel).nests
    assert dict(nest_plan.layout.lanes) == {"m": 8, "n": 16} and nest_plan.layout.packs == ("b",)


def test_even_split_shares_an_axis_and_leaves_a_single_row_alone():
    assert even_split(1) is None
    assert even_split(3).pieces == ((0, 1), (1, 2), (2, 3))
    assert even_split(17).pieces[-1] == (14, 17)
