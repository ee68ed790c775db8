"""`exactc export --plan auto`: every nest laned and split by the automatic plan, and the
program still gives the reference's bits, on 1 and 2 threads, with gcc, clang and
without OpenMP (principle 2: a plan changes speed, never bits)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings

from exactc.exporter import dims, export, models
from exactc.exporter.kernels.autoplan import auto_kernel_plan, even_split, nest_signature
from exactc.exporter.kernels.layouts import Layout, LayoutError
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.plans import NestPlan, Plan, parse_plan, validate_plan
from exactc.exporter.kernels.splits import Split
from exactc.exporter.models import cache
from exactc.exporter.primitives import (
    BACKWARD_PRIMITIVES,
    CONTRACT_FMA,
    CONTRACT_OFF,
    block_count,
    quantized_row_length,
)
from exactc.exporter.printer.kernels import print_kernel
from exactc import programs
from exactc.strategies.cases import cases
from exactc.verify.build import BuildOptions
from exactc.verify.kernels import assert_all_equal, run_cases

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
    # n in lanes of 16: the pieces are whole chunks of 16 columns, the last one partial
    assert nest_plan.split.pieces == ((0, 16), (16, 32), (32, 40))


def test_a_laned_axis_is_split_between_chunks_of_its_lanes():
    """No piece but the last ends in a partial chunk: a piece's lanes stay full, and a
    weight packed at load (printer/prepack.py) finds chunk c at panel c."""
    for extent in (16, 17, 288, 768, 1000, 32000):
        split = even_split(extent, 8, 16)
        pieces = split.pieces if split else ((0, extent),)
        assert pieces[0][0] == 0 and pieces[-1][1] == extent
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
        assert all(lo % 16 == 0 for lo, _ in pieces), (extent, pieces)
        sizes = [-(-(hi - lo) // 16) for lo, hi in pieces]
        assert max(sizes) - min(sizes) <= 1, (extent, pieces)
    assert even_split(288, 8, 16).pieces[:3] == ((0, 32), (32, 64), (64, 96))
    assert even_split(16, 8, 16) is None


def test_att_v_at_a_run_time_length_gets_both_lanes_and_its_pack():
    """att v reads v's rows k < T: its pack is laid out for T_max, so the automatic plan
    keeps the linear's layout (before, the pack was refused and gcc ran the nest at a
    fifth of the speed)."""
    T = dims.length(256)
    kernel = lower("matmul", "f32", {"a": (6, T, T), "b": (6, T, 64)}, {"trans_a": False, "trans_b": False, "group": 1})
    (name, nest_plan), = auto_kernel_plan(kernel).nests
    assert dict(nest_plan.layout.lanes) == {"m": 8, "n": 16} and nest_plan.layout.packs == ("b",)


def test_elementwise_transcendentals_get_chunks_of_256_elements_or_16_where_256_do_not_fill():
    """gelu, gelu_erf and silu call exactc_<f>f_array once per chunk: 256 elements a call
    where the nest's elements can fill them (a run-time length: its T_max's), 16 where a
    static extent cannot."""
    T = dims.length(256)
    for primitive in ("gelu_tanh", "gelu_erf", "silu"):
        kernel = lower(primitive, "f32", {"x": (T, 1536)}, {})
        (_, wide), = auto_kernel_plan(kernel).nests
        assert dict(wide.layout.lanes) == {"i": 256}, primitive
        source = print_kernel(kernel, "k", auto_kernel_plan(kernel)).source
        assert re.search(r"exactc_\w+f_array\(\w+, \w+, 256\);", source), primitive
        # the run-time split cuts between chunks (a decode step's 1536 elements: six
        # pieces of 256, none point by point)
        for end in (0, 1):
            assert (f"pieces[p][{end}] = parts[p][{end}] == 8 ? 1536 * T : "
                    f"1536 * T * parts[p][{end}] / 8 / 256 * 256;") in source
        (_, short), = auto_kernel_plan(lower(primitive, "f32", {"x": (3, 40)}, {})).nests
        assert dict(short.layout.lanes) == {"i": 16}, primitive


def test_even_split_shares_an_axis_and_leaves_a_single_row_alone():
    assert even_split(1) is None
    assert even_split(3).pieces == ((0, 1), (1, 2), (2, 3))
    assert even_split(17).pieces[-1] == (14, 17)


# ---- the quantized nests (--weights q8|q4) -------------------------------------------------


def _quantized_plan(primitive: str, fmt: str, rows: int, k: int, cols: int, block: int = 32):
    """The automatic plan's one nest plan for qlinear_w or qlinear_i: x (rows, k) by a
    (cols, k) weight in `fmt`, blocks of `block`."""
    weight = {"wq": (cols, quantized_row_length(fmt, k, block)), "wd": (cols, block_count(k, block))}
    shapes = ({"x": (rows, k)} if primitive == "qlinear_w"
              else {"xq": (rows, k), "xd": (rows, block_count(k, block))}) | weight
    (name, nest_plan), = auto_kernel_plan(lower(primitive, "f32", shapes, {"fmt": fmt, "block": block})).nests
    assert name == primitive
    return nest_plan


def _text(nest_plan) -> str:
    return nest_plan.layout.text()


def test_quantized_linears_get_the_measured_layouts_split_on_their_outputs():
    """bench/quant_layouts.py's fastest legal layouts: a prompt's rows (10) in lanes of 8
    (q8) or 4 (q4), a decode step's one row n in lanes of 16, qlinear_w's values and
    scales packed (laid out at load in a program, printer/prepack.py), qlinear_i in
    blocks of 32 a prompt's rows in lanes of 4 over n in lanes of 8 (the runtime's tile
    kernel, 4 x 8 outputs of a block a call) and a decode step's n in lanes of 8 alone
    with both packed (its block kernel sums 8 rows of a block at once, its values' block
    panel laid out at load), and in other blocks its q8 form its plain body and its q4 form in lanes with the scales packed; the
    split always on n, between chunks of its lanes."""
    want = {
        ("qlinear_w", "q8", 10): "order n, m; lanes m:8, n:16; packs wq, wd",
        ("qlinear_w", "q8", 5): "order n, m; lanes m:4, n:16; packs wq, wd",
        ("qlinear_w", "q4", 10): "order n, m; lanes m:4, n:16; packs wq, wd",
        ("qlinear_w", "q8", 1): "order n, m; lanes n:16; packs wq, wd",
        ("qlinear_w", "q4", 1): "order n, m; lanes n:16; packs wq, wd",
        ("qlinear_i", "q8", 10): "order n, m; lanes m:4, n:8",
        ("qlinear_i", "q4", 10): "order n, m; lanes m:4, n:8",
        ("qlinear_i", "q8", 1): "order n, m; lanes n:8; packs wq, wd",
        ("qlinear_i", "q4", 1): "order n, m; lanes n:8; packs wq, wd",
        ("qlinear_i", "q4", 10, 16): "order n, m; lanes m:4, n:16; packs wd",
        ("qlinear_i", "q4", 1, 16): "order n, m; lanes n:8; packs wd",
        ("qlinear_i", "q8", 1, 16): "order n, m",
    }
    for (primitive, fmt, rows, *block), layout in want.items():
        nest_plan = _quantized_plan(primitive, fmt, rows, 64, 40, *block)
        assert _text(nest_plan) == layout, (primitive, fmt, rows)
        # n outermost, so the split shares the output columns, on one row as on ten
        assert nest_plan.layout.order[0] == "n" and nest_plan.split.depth == 0, (primitive, fmt, rows)
        width = dict(nest_plan.layout.lanes).get("n")
        if width:
            chunks = tuple((lo, min(lo + width, 40)) for lo in range(0, 40, width))
            assert nest_plan.split.pieces == chunks, (primitive, fmt, rows)
        else:
            assert nest_plan.split.pieces == tuple((5 * i, 5 * i + 5) for i in range(8)), (primitive, fmt, rows)


def test_a_quantized_linear_with_a_short_last_block_falls_back_to_lanes_without_packs():
    """K = 40 in blocks of 32: wq and wd are also read at the short block's index, so
    neither packs; the lanes stay (rows by 4, as measured without packs)."""
    assert _text(_quantized_plan("qlinear_w", "q8", 10, 40, 48)) == "order n, m; lanes m:4, n:16"
    assert _text(_quantized_plan("qlinear_w", "q4", 1, 40, 48)) == "order n, m; lanes n:16"
    assert _text(_quantized_plan("qlinear_i", "q8", 10, 40, 48)) == "order n, m; lanes m:4, n:8"
    assert _text(_quantized_plan("qlinear_i", "q4", 1, 64, 5)) == "order n, m"  # 5 outputs: no lane fills


def test_quantize_gets_rows_and_blocks_in_lanes_and_leaves_one_row_plain():
    def plan(rows: int, k: int):
        found = auto_kernel_plan(lower("quantize", "f32", {"x": (rows, k)}, {"block": 32}))
        return found and {name: (_text(p), len(p.split.pieces) if p.split else 0) for name, p in found.nests}

    assert plan(64, 288) == {"quantize": ("lanes m:8, b:8", 8)}
    assert plan(64, 48) == {"quantize": ("lanes m:8", 8), "quantize_tail": ("lanes m:8", 8)}
    assert plan(1, 288) is None  # a decode step's row: nothing to lane or share


QUANTIZED_CASES = [(entry, fmt, "weight-only") for entry in ("decode", "forward") for fmt in ("q8", "q4")]
QUANTIZED_CASES += [("decode", "q8", "integer"), ("forward", "q4", "integer")]
# the layout each form's linears take: qlinear_w laned across its outputs; qlinear_i in
# blocks of 32 a decode step's n in lanes of 8 (8 rows a call of the block kernel, with
# both packs where its blocks are whole), a forward's ten rows in lanes of 4 over n in
# lanes of 8 (the tile kernel)
QUANTIZED_LAYOUT = {("weight-only", "q8"): "layout: order n, m; lanes ", ("weight-only", "q4"): "layout: order n, m; lanes ",
                    ("integer", "q8"): "layout: order n, m; lanes n:8",
                    ("integer", "q4"): "layout: order n, m; lanes m:4, n:8\n"}


@pytest.mark.parametrize("entry,fmt,form", QUANTIZED_CASES, ids=[f"llama-{e}-{f}-{o}" for e, f, o in QUANTIZED_CASES])
def test_quantized_llama_under_the_automatic_plan_keeps_the_reference_bytes(tmp_path, entry, fmt, form):
    """A q8 or q4 llama's decode step (one row) and forward (ten rows), in either form:
    every quantized linear in its form's layout and split (but k and v, 16 columns: one
    chunk), and the program's bytes are the reference's on 1 and 2 threads."""
    prepared = export.ExportSpec("llama", entry, "f32", 5, SIZES["llama"], plan="auto", weights=(fmt, 32),
                                 form=form).prepare()
    root = export.write(prepared, tmp_path / "program")
    primitive = "qlinear_i" if form == "integer" else "qlinear_w"
    kernels = {path.stem: path.read_text() for path in (root / "kernels").glob(f"{primitive}*.c")}
    assert kernels, "no quantized linear was exported"
    for name, source in kernels.items():
        assert QUANTIZED_LAYOUT[form, fmt] in source, f"{name} is not in its layout"
    host = (root / "model.c").read_text()
    split = {name for name in kernels if f"{name}_split(" in host}
    assert split >= set(kernels) - {f"{primitive}_k_v"}, f"not split: {sorted(set(kernels) - split)}"
    program = build(root)
    for threads in (1, 2):
        conforms(program, prepared, threads)


# ---- the narrow and wide layouts (EXACTC_NARROW_LANES, EXACTC_WIDE_LANES) ------------------------


def variant_texts(source: str) -> dict[str, str]:
    """The functions of one nest's #if / #elif / #else block, by the macro they are under."""
    block = source.split("#if EXACTC_NARROW_LANES\n", 1)[1].split("\n#endif", 1)[0]
    narrow, rest = block.split("\n#elif EXACTC_WIDE_LANES\n") if "#elif" in block else (block, None)
    if rest is None:
        narrow, plain = narrow.split("\n#else\n")
        return {"narrow": narrow, "plain": plain}
    wide, plain = rest.split("\n#else\n")
    return {"narrow": narrow, "wide": wide, "plain": plain}


def test_a_matrix_nest_gets_rows_in_lanes_of_4_as_its_narrow_layout_and_16_as_its_wide_one():
    """linear and the attention matmuls in 8-row lanes get 4-row lanes for targets with 16
    vector registers, 16-row lanes for gcc with AVX-512's 32 (exactc_rt.h), printed under
    #if and #elif; the plan's JSON carries both."""
    kernel = lower("linear", "f32", {"x": (20, 32), "w": (40, 32)}, {})
    (name, nest_plan), = auto_kernel_plan(kernel).nests
    assert dict(nest_plan.narrow.lanes) == {"m": 4, "n": 16} and nest_plan.narrow.packs == ("w",)
    assert dict(nest_plan.wide.lanes) == {"m": 16, "n": 16} and nest_plan.wide.packs == ("w",)
    assert parse_plan(auto_kernel_plan(kernel).to_json()) == auto_kernel_plan(kernel)
    texts = variant_texts(print_kernel(kernel, "lin", auto_kernel_plan(kernel)).source)
    assert "layout: order n, m; lanes m:4, n:16; packs w" in texts["narrow"]
    assert "layout: order n, m; lanes m:16, n:16; packs w" in texts["wide"]
    assert "layout: order n, m; lanes m:8, n:16; packs w" in texts["plain"]
    one_row = lower("linear", "f32", {"x": (1, 32), "w": (40, 32)}, {})
    assert all(p.narrow is None and p.wide is None for _, p in auto_kernel_plan(one_row).nests)
    # 10 rows fill 4- and 8-row lanes, not 16; nor do at most 10 at a run-time length
    for rows in (10, dims.length(10)):
        (name, short), = auto_kernel_plan(lower("linear", "f32", {"x": (rows, 32), "w": (40, 32)}, {})).nests
        assert short.narrow is not None and short.wide is None


def test_a_fused_matrix_nest_gets_rows_in_lanes_of_6_as_its_narrow_layout_under_its_own_macro():
    """The fused realization's linear and matmuls: rows in lanes of 6 for x86 without
    AVX-512, gcc and clang alike (EXACTC_NARROW_FMA_LANES), where 8-row lanes' fused sums
    spill; the default realization's keep their 4 rows under EXACTC_NARROW_LANES."""
    for primitive, shapes in (("linear", {"x": (20, 32), "w": (40, 32)}), ("matmul", {"a": (2, 20, 32), "b": (2, 32, 40)})):
        kernel = lower(primitive, "f32", shapes, {}, CONTRACT_FMA)
        plan = auto_kernel_plan(kernel)
        (name, nest_plan), = plan.nests
        assert dict(nest_plan.layout.lanes) == {"m": 8, "n": 16} and dict(nest_plan.narrow.lanes) == {"m": 6, "n": 16}
        source = print_kernel(kernel, "k", plan).source
        assert "#if EXACTC_NARROW_FMA_LANES\n" in source and "#if EXACTC_NARROW_LANES\n" not in source
        narrow = source.split("#if EXACTC_NARROW_FMA_LANES\n", 1)[1].split("\n#elif", 1)[0]
        assert "lanes m:6, n:16" in narrow
    default = lower("linear", "f32", {"x": (20, 32), "w": (40, 32)}, {})
    assert dict(auto_kernel_plan(default).nests[0][1].narrow.lanes) == {"m": 4, "n": 16}


def test_no_wide_layout_where_the_rows_stride_aliases_in_the_cache():
    """16 rows 4 KiB apart fall in one set of the 8-way level-1 cache: a linear over 1024
    f32 inputs (or 2048 bf16 ones) keeps its 8-row lanes; one over 1536 gets 16."""
    T = dims.length(256)
    for site, k, wide in (("f32", 1024, False), ("bf16", 2048, False), ("f32", 1536, True), ("f32", 384, True),
                          ("bf16", 1024, True)):
        (name, nest_plan), = auto_kernel_plan(lower("linear", site, {"x": (T, k), "w": (384, k)}, {})).nests
        assert (nest_plan.wide is not None) is wide, (site, k)


def test_a_tuned_layout_has_no_narrow_or_wide_one():
    kernel = lower("linear", "f32", {"x": (20, 32), "w": (40, 32)}, {})
    tuned = Layout(order=("n", "m"), lanes=(("m", 2), ("n", 16)), packs=("w",))
    signature = nest_signature(kernel, kernel.nests[0])
    (name, nest_plan), = auto_kernel_plan(kernel, tuned={signature: tuned}).nests
    assert nest_plan.layout == tuned and nest_plan.narrow is None and nest_plan.wide is None


@pytest.mark.parametrize("field", ["narrow", "wide"])
@pytest.mark.parametrize("variant", [
    Layout(order=("n", "m"), lanes=(("m", 4), ("n", 8)), packs=("w",)),   # another panel width
    Layout(order=("n", "m"), lanes=(("m", 4), ("n", 16))),                # no pack
    Layout(order=("m", "n"), lanes=(("m", 4), ("n", 16)), packs=("w",)),  # another order: another split axis
    Layout(order=("n", "m"), lanes=(("n", 4), ("m", 16)), packs=("w",)),  # the lanes swapped
], ids=["panel", "packs", "order", "axes"])
def test_a_narrow_or_wide_layout_changing_more_than_the_outer_lanes_is_refused(variant, field):
    kernel = lower("linear", "f32", {"x": (10, 32), "w": (40, 32)}, {})
    layout = Layout(order=("n", "m"), lanes=(("m", 8), ("n", 16)), packs=("w",))
    with pytest.raises(LayoutError) as refused:
        validate_plan(kernel, Plan((("linear", NestPlan(layout, None, **{field: variant})),)))
    assert refused.value.field == field


# Rows that fill 16-row lanes and leave a partial chunk.
WIDE_SIZES = {model: {**sizes, "tokens": 20, **({"positions": 24} if "positions" in sizes else {})}
              for model, sizes in SIZES.items()}


@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_every_layout_of_a_program_gives_the_reference_bytes(tmp_path, model):
    """The program built with each layout forced (the narrow, the wide and the plain one),
    its weights laid out as panels at load for any: the reference's bytes on 1 and 2
    threads."""
    prepared = export.ExportSpec(model, "forward", "f32", 5, WIDE_SIZES[model], plan="auto").prepare()
    root = export.write(prepared, tmp_path / "program")
    sources = "".join(path.read_text() for path in (root / "kernels").glob("*.c"))
    assert sources.count("#if EXACTC_NARROW_LANES") >= 3, "the matrix nests got no narrow layout"
    assert sources.count("#elif EXACTC_WIDE_LANES") >= 3, "the matrix nests got no wide layout"
    for narrow, wide in ((0, 0), (1, 0), (0, 1)):
        cflags = f"-O2 -DEXACTC_NARROW_LANES={narrow} -DEXACTC_WIDE_LANES={wide}"
        program = programs.make(root, programs.Build(cc="gcc", cflags=cflags), refuse_warnings=True)
        for threads in (1, 2):
            conforms(program, prepared, threads)


# ---- the automatic plan's tuned layouts and row variants (kernels/autoplan.py)


def test_a_tuned_layout_is_found_by_its_signature_and_names_the_plan():
    import hashlib

    from exactc.exporter.kernels import autoplan

    kernel = lower("linear", "f32", {"x": (32, 64), "w": (32, 64), "b": (32,)}, {"has_b": True})
    nest = kernel.nests[0]
    signature = autoplan.nest_signature(kernel, nest)
    assert signature == "linear|f32|has_b=True|x:32x64,w:32x64,b:32,y:32x32|linear"
    measured = Layout(order=("n", "m"), lanes=(("m", 4), ("n", 8)))
    plan = autoplan.AutoPlan(tuned={signature: measured})
    chosen, used = plan.for_kernel(kernel, "k")
    assert used == set()
    # the measured layout, split evenly in whole lanes, and no second choice beside it
    assert chosen.nests == (("linear", NestPlan(measured, autoplan.even_split(32, autoplan.PIECES, 8))),)
    assert chosen.nests[0][1].split is not None
    table = json.dumps({signature: {"order": ["n", "m"], "lanes": {"m": 4, "n": 8}}}, sort_keys=True)
    assert plan.text() == "auto+tuned:" + hashlib.sha256(table.encode()).hexdigest()[:16]
    assert autoplan.AutoPlan().text() == "auto" and autoplan.AutoPlan(tuned={}).text() == "auto"
    untuned, _ = autoplan.AutoPlan().for_kernel(kernel, "k")
    assert untuned.nests[0][1].layout != measured


def test_a_signature_lists_every_attribute():
    from exactc.exporter.kernels import autoplan

    kernel = lower("matmul", "f32", {"a": (2, 3, 4), "b": (2, 4, 5)}, {})
    assert autoplan.nest_signature(kernel, kernel.nests[0]) == (
        "matmul|f32|group=1,trans_a=False,trans_b=False|a:2x3x4,b:2x4x5,y:2x3x5|matmul")
    # b_rows shows once set: a prefix of b is another kernel than the whole of it
    prefix = lower("matmul", "f32", {"a": (2, 3, 4), "b": (2, 6, 5)}, {"b_rows": 4})
    assert autoplan.nest_signature(prefix, prefix.nests[0]) == (
        "matmul|f32|b_rows=4,group=1,trans_a=False,trans_b=False|a:2x3x4,b:2x6x5,y:2x3x5|matmul")


def test_a_fused_nest_is_tuned_apart_from_the_default_one():
    """The fused realization's nests (ir.Fma steps) have a signature of their own: a
    layout tuned for one realization is never taken for the other."""
    from exactc.exporter.kernels import autoplan

    shapes = {"a": (2, 3, 4), "b": (2, 4, 5)}
    default, fused = (lower("matmul", "f32", shapes, {}, contract) for contract in (CONTRACT_OFF, CONTRACT_FMA))
    signature = autoplan.nest_signature(default, default.nests[0])
    assert autoplan.nest_signature(fused, fused.nests[0]) == signature + "|fma"
    measured = Layout(order=("i", "n", "m"), lanes=(("n", 4),))
    plan = autoplan.AutoPlan(tuned={signature: measured})
    assert plan.for_kernel(default, "k")[0].nests[0][1].layout == measured
    assert plan.for_kernel(fused, "k")[0].nests[0][1].layout != measured


def test_the_rows_stride_of_the_matrix_nests():
    from exactc.exporter.kernels import autoplan

    def stride(primitive, shapes, attrs=None, site="f32"):
        kernel = lower(primitive, site, shapes, attrs or {})
        return autoplan.row_stride(kernel, kernel.nests[0])

    assert stride("linear", {"x": (3, 1024), "w": (8, 1024)}) == 4096
    assert stride("linear", {"x": (3, 1024), "w": (8, 1024)}, site="bf16") == 2048
    assert stride("matmul", {"a": (2, 3, 5), "b": (2, 5, 4)}) == 20  # a's rows: its last axis, not its second
    assert stride("matmul", {"a": (2, 5, 3), "b": (2, 5, 4)}, {"trans_a": True}) is None
    assert stride("softmax", {"x": (2, 3, 5)}) is None
    # a 4 KiB stride has no wide variant (the 16 rows' streams alias in the level-1 cache)
    layout = Layout(order=("n", "m"), lanes=(("m", 8), ("n", 16)))
    aliased = lower("linear", "f32", {"x": (32, 1024), "w": (32, 1024)}, {})
    assert autoplan.wide_layout(aliased, aliased.nests[0], layout, None) is None
    assert autoplan.narrow_layout(aliased, aliased.nests[0], layout, None).lanes == (("m", 4), ("n", 16))


def test_a_row_variant_needs_as_many_rows_as_its_lanes():
    from exactc.exporter.kernels import autoplan

    layout = Layout(order=("n", "m"), lanes=(("m", 8), ("n", 16)))
    for rows, wide in ((16, (("m", 16), ("n", 16))), (15, None)):
        kernel = lower("linear", "f32", {"x": (rows, 64), "w": (32, 64)}, {})
        variant = autoplan.wide_layout(kernel, kernel.nests[0], layout, None)
        assert (variant.lanes if variant else None) == wide, rows


# ---- a run-time extent split in 1 and 2 pieces


def test_even_split_of_a_run_time_extent_into_one_and_two_pieces():
    """Two pieces are two parts of 2; one piece is nothing to share (None), as for a
    static extent of one chunk."""
    from exactc.exporter.kernels.autoplan import even_split

    t = dims.length(64)
    assert even_split(t, 2) == Split(0, ((0, 1), (1, 2)), of=2)
    assert even_split(t, 1) is None
    assert even_split(t, 0) is None


@pytest.mark.parametrize("primitive", BACKWARD_PRIMITIVES)
def test_the_automatic_plan_of_a_backward_kernel_keeps_the_reference_bits(primitive):
    """The backward's kernels laned and split by the automatic plan, on 1 and 2 threads:
    their splits cut output elements only, so every ordered sum keeps its order."""

    @settings(max_examples=3, deadline=None)
    @given(case=cases(primitive))
    def check(case):
        plan = auto_kernel_plan(lower(case.primitive, case.site, case.kernel_shapes, case.attr_dict))
        for threads in (1, 2):
            assert_all_equal(run_cases([case], BuildOptions(openmp=True), plans=[plan], threads=threads))

    check()


# The backward's products whose ordered sum runs down a column of both operands, and the
# lanes each output element gets (the sum inside them, in its order); and the attention's
# dscores, laned as the forward's matmuls.
BACKWARD_PRODUCTS = {
    "linear_bar_w": ({"x": (10, 32), "dy": (10, 40), "acc": (40, 32)}, {"n": 4, "k": 16}),
    "linear_bar_x": ({"x": (10, 32), "dy": (10, 40), "w": (40, 32), "acc": (10, 32)}, {"m": 4, "k": 16}),
    "matmul_bar_b": ({"a": (2, 10, 32), "dy": (2, 10, 12), "acc": (2, 32, 12)}, {"n": 4, "k": 16}),
    "matmul_bar_a": ({"b": (2, 20, 32), "dy": (2, 10, 32), "acc": (2, 10, 20)}, {"m": 8, "k": 16}),
}


@pytest.mark.parametrize("primitive", sorted(BACKWARD_PRODUCTS))
def test_a_backward_product_gets_its_output_elements_in_lanes_with_the_sum_inside(primitive):
    shapes, lanes = BACKWARD_PRODUCTS[primitive]
    kernel = lower(primitive, "f32", shapes, {})
    plan = auto_kernel_plan(kernel)
    (name, nest_plan), = plan.nests
    assert dict(nest_plan.layout.lanes) == lanes, nest_plan.layout
    assert "reduction: in index order, each lane its own" in print_kernel(kernel, "bar", plan).source


def test_gelu_s_backward_gets_chunks_of_256_elements_and_calls_the_laned_tanh():
    kernel = lower("gelu_tanh_bar", "f32", {"x": (4, 384), "dy": (4, 384)}, {})
    plan = auto_kernel_plan(kernel)
    (name, nest_plan), = plan.nests
    assert dict(nest_plan.layout.lanes) == {"i": 256}, nest_plan.layout
    assert "exactc_tanhf_array(u, t, 256)" in print_kernel(kernel, "bar", plan).source
