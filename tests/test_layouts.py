"""Layouts, plans and thread splits change speed, never bits (docs/design.md, principle 2).

The property: for every primitive case x site type x legal layout x valid split, the C
kernel equals the reference bit for bit, red zones on, built with and without OpenMP
(team capped at 1 or 2 threads, or uncapped), with the coverage check of the pieces
on. Then the checks that must be able to fail: an illegal plan is refused by name; a
split with a gap fails the property with a reproduction; a split whose pieces overlap
fails the coverage check (its outputs are right, so nothing else can see it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exactc.exporter.kernels import ir, lower
from exactc.exporter.kernels.autoplan import auto_kernel_plan
from exactc.exporter.kernels.ir import REDUCE, Affine
from exactc.exporter.kernels.layouts import Layout, LayoutError, fresh_name, integer_sum_rule, validate_layout
from exactc.exporter.kernels.plans import NestPlan, Plan, parse_plan, validate_plan
from exactc.exporter.kernels.splits import Split
from exactc.exporter.primitives import CONTRACT_FMA, FUSED_PRIMITIVES, PRIMITIVES
from exactc.exporter.printer.kernels import print_kernel
from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS
from exactc.strategies.cases import Case, cases, fused_cases, run_time_cases
from exactc.strategies.layouts import planned_cases
from exactc.strategies.tensors import TensorSpec
from exactc.verify.build import BuildOptions
from exactc.verify.kernels import CHECK_SPLITS, assert_all_equal, run_cases

CAMPAIGN = os.environ.get("HYPOTHESIS_PROFILE") == "campaign"
BATCH = 10 if CAMPAIGN else 3
COMPILERS = ("gcc", "clang")
# The property draws both compilers, with and without OpenMP (tests/installed.py).
needs_compilers = pytest.mark.needs("gcc", "clang", "libomp")
EACH_COMPILER = [pytest.param(cc, marks=pytest.mark.needs(cc, *(("libomp",) if cc == "clang" else ())), id=cc)
                 for cc in COMPILERS]


# Which layout of a nest with target variants is compiled: the compiler's own choice
# (None), or one forced (EXACTC_NARROW_LANES, a fused nest's EXACTC_NARROW_FMA_LANES and
# EXACTC_WIDE_LANES, exactc_rt.h).
VARIANT_DEFINES = {
    None: (),
    "plain": ("EXACTC_NARROW_LANES=0", "EXACTC_NARROW_FMA_LANES=0", "EXACTC_WIDE_LANES=0"),
    "narrow": ("EXACTC_NARROW_LANES=1", "EXACTC_NARROW_FMA_LANES=1"),
    "wide": ("EXACTC_NARROW_LANES=0", "EXACTC_NARROW_FMA_LANES=0", "EXACTC_WIDE_LANES=1"),
}


def _builds():
    """A build: compiler, OpenMP or not, the team cap in the child, and which layout of a
    nest with narrow or wide variants is compiled (VARIANT_DEFINES)."""
    return st.tuples(st.sampled_from(COMPILERS), st.booleans(), st.sampled_from([None, 1, 2]),
                     st.sampled_from(list(VARIANT_DEFINES)))


def _run(batch, build):
    cc, openmp, threads, variant = build
    defines = (CHECK_SPLITS, *VARIANT_DEFINES[variant])
    options = BuildOptions(cc=cc, openmp=openmp, defines=defines)
    return run_cases([c for c, _ in batch], options, plans=[p for _, p in batch], threads=threads)


def _linear_case(m=5, k=7, n=19, seed=1) -> Case:
    spec = lambda shape, s: TensorSpec(shape, "f32", s, "normal", 1.0)  # noqa: E731
    return Case("linear", "f32", (("has_b", True),),
                (("x", spec((m, k), seed)), ("w", spec((n, k), seed + 1)), ("b", spec((n,), seed + 2))))


LANED_LINEAR = NestPlan(
    Layout(order=("n", "m"), tiles=(("n", 8),), lanes=(("m", 2), ("n", 4)), packs=("w",), blocks=(("k", 3),)),
    Split(0, ((0, 5), (5, 5), (5, 19))),
)


# ---- the property ------------------------------------------------------------------------


@needs_compilers
@pytest.mark.parametrize("primitive", sorted(PRIMITIVES))
def test_every_layout_and_split_gives_the_reference_bits(primitive):
    @given(batch=st.lists(planned_cases(cases(primitive)), min_size=1, max_size=BATCH), build=_builds())
    def check(batch, build):
        assert_all_equal(_run(batch, build))

    check()


@st.composite
def _k_quant_cases(draw, primitive: str) -> Case:
    """A qlinear_w or qlinear_i case over Q4_K, Q5_K or Q6_K weights (strategies/quant.py)."""
    from exactc.strategies.quant import k_quant_linear_operands

    fmt, site = draw(st.sampled_from(["q4_k", "q5_k", "q6_k"])), draw(st.sampled_from(["f32", "f64", "bf16"]))
    attrs, specs = draw(k_quant_linear_operands(primitive, site, fmt))
    return Case(primitive, site, tuple(sorted(attrs.items())), tuple(specs.items()))


@needs_compilers
@pytest.mark.parametrize("primitive", ["qlinear_w", "qlinear_i"])
def test_every_layout_and_split_of_a_k_quant_linear_gives_the_reference_bits(primitive):
    """The property on k-quant weights: their nests (a loop per sub-block, the integer
    form's sums beside its scale and min terms) under every drawn layout and split."""

    @given(batch=st.lists(planned_cases(_k_quant_cases(primitive)), min_size=1, max_size=BATCH), build=_builds())
    def check(batch, build):
        assert_all_equal(_run(batch, build))

    check()


@needs_compilers
@pytest.mark.parametrize("primitive", FUSED_PRIMITIVES)
def test_every_layout_and_split_gives_the_fused_reference_bits(primitive):
    """The fused realization's step (ir.Fma) under every layout feature: the reference's
    fma_A bits, as the default step's."""

    @given(batch=st.lists(planned_cases(fused_cases(primitive)), min_size=1, max_size=BATCH), build=_builds())
    def check(batch, build):
        assert_all_equal(_run(batch, build))

    check()


def _run_time_softmax(length: int = 3, top: int = 5) -> Case:
    """Causal attention's softmax over (2, T, T) at T = length, T_max = top."""
    spec = TensorSpec((2, length, length), "f32", 4, "normal", 1.0)
    return Case("softmax", "f32", (("causal", True), ("has_keep", False), ("offset", 0)), (("x", spec),),
                length=length, top=top)


def _run_time_att_v(length: int = 11, top: int = 13) -> Case:
    """Attention's att v over a run-time length: a (2, T, T) by b (2, T, 19)."""
    spec = lambda shape, s: TensorSpec(shape, "f32", s, "normal", 1.0)  # noqa: E731
    return Case("matmul", "f32", (("group", 1), ("trans_a", False), ("trans_b", False)),
                (("a", spec((2, length, length), 3)), ("b", spec((2, length, 19), 4))), length=length, top=top)


def _run_time_gelu(length: int = 3, top: int = 5) -> Case:
    """gelu over (T, 7) at T = length: 21 elements, in lanes of 4 the last chunk partial."""
    return Case("gelu_tanh", "f32", (), (("x", TensorSpec((length, 7), "f32", 6, "normal", 1.0)),),
                length=length, top=top)


# A run-time split of a laned axis: its cuts rounded down to whole chunks of 4, the
# extent's end kept (the last piece holds the partial chunk).
CHUNKED_PARTS = NestPlan(Layout(lanes=(("i", 4),)), Split(0, tuple((k, k + 1) for k in range(8)), of=8))

# b's panel runs over k < T: the pack is sized for T_max and filled to T (layouts.pack_size).
PACK_OVER_T = NestPlan(Layout(order=("i", "n", "m"), lanes=(("m", 4), ("n", 8)), packs=("b",)),
                       Split(0, ((0, 1), (1, 2))))


@needs_compilers
@given(batch=st.lists(planned_cases(run_time_cases()), min_size=1, max_size=BATCH), build=_builds())
@example(batch=[(_run_time_softmax(), Plan(()))], build=("gcc", True, 2, None))
@example(batch=[(_run_time_att_v(), Plan((("matmul", PACK_OVER_T),)))], build=("gcc", True, 2, None))
@example(batch=[(_run_time_softmax(), Plan((("softmax", NestPlan(Layout(), Split(1, ((0, 1), (1, 3)), of=3))),)))],
         build=("gcc", True, 2, None))
@example(batch=[(_run_time_gelu(), Plan((("gelu_tanh", CHUNKED_PARTS),)))], build=("gcc", True, 2, None))
def test_every_layout_and_split_gives_the_reference_bits_at_a_run_time_length(batch, build):
    """The property with the length drawn too: a kernel whose shapes follow T (1 <= T <=
    T_max), under a drawn layout and split (pieces in parts, scaled when it runs), run at
    a drawn T with its outputs sized and red-zoned at T: the reference's bits at T, every
    element written once (the coverage check sees the pieces computed at run time)."""
    assert_all_equal(_run(batch, build))


@needs_compilers
@given(batch=st.lists(planned_cases(cases()), min_size=1, max_size=BATCH), build=_builds())
@example(batch=[(_linear_case(), Plan((("linear", LANED_LINEAR),)))], build=("gcc", True, 2, None))
def test_mixed_planned_batches(batch, build):
    """Planned kernels of different primitives and types compiled in one library."""
    assert_all_equal(_run(batch, build))


@needs_compilers
def test_same_bits_with_and_without_openmp_and_any_team():
    """One laned, packed, split linear: OpenMP off, on with a team of 1, 2, uncapped; gcc
    and clang; each equal to the reference (so to each other)."""
    case = _linear_case(m=9, k=33, n=37, seed=5)
    plan = Plan((("linear", NestPlan(LANED_LINEAR.layout, Split(1, ((0, 2), (2, 2), (2, 9))))),))
    for cc in COMPILERS:
        for openmp, threads in ((False, None), (True, 1), (True, 2), (True, None)):
            assert_all_equal(_run([(case, plan)], (cc, openmp, threads, None)))


def test_omp_num_threads_variable_is_obeyed():
    """OMP_NUM_THREADS=1, 2 and unset, read by the OpenMP runtime itself (a fresh process
    each): the same bits as the reference every time, and the split's team has as many
    threads as the variable allows (counted in /proc/self/task: an OpenMP worker thread
    outlives its parallel region)."""
    code = f"""
import json, os, sys
import numpy as np
sys.path.insert(0, {os.path.dirname(__file__)!r})
from test_layouts import _linear_case, LANED_LINEAR
from exactc.exporter.kernels.plans import Plan
from exactc.verify.build import BuildOptions
from exactc.verify.kernels import CHECK_SPLITS, _prepare, build_batch, run_cases
case, plan = _linear_case(m=6, k=16, n=19), Plan((("linear", LANED_LINEAR),))
options = BuildOptions(openmp=True, defines=(CHECK_SPLITS,))
statuses = [o.status for o in run_cases([case], options, plans=[plan])]  # runs in a child
(prep,) = _prepare([case], [plan])
library = build_batch([prep], options)
arrays = [np.ascontiguousarray(prep.inputs[name]) for name in ("x", "w", "b")] + [np.empty((6, 19), np.float32)]
before = len(os.listdir("/proc/self/task"))
status = getattr(library.lib, prep.printed.drivers[0])(*[library.ffi.cast("void *", a.ctypes.data) for a in arrays])
after = len(os.listdir("/proc/self/task"))
print(json.dumps({{"statuses": statuses, "status": status, "new_threads": after - before}}))
"""
    pieces = len(LANED_LINEAR.split.pieces)
    for value, team in (("1", 1), ("2", 2), (None, min(pieces, os.cpu_count() or 1))):
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        if value is not None:
            env["OMP_NUM_THREADS"] = value
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result == {"statuses": ["equal"], "status": 0, "new_threads": team - 1}, (value, result)


# ---- bad splits: each caught, with a reproduction ---------------------------------------------


def test_a_split_with_a_gap_fails_with_a_reproduction():
    case = _linear_case()
    bad = Plan((("linear", NestPlan(Layout(), Split(1, ((0, 7), (9, 19))))),))
    with pytest.raises(LayoutError, match=r"nest linear, field split.pieces: pieces leave a gap \[7,9\)"):
        validate_plan(lower("linear", "f32", case.shapes, case.attr_dict), bad)
    for openmp in (False, True):
        (outcome,) = run_cases([case], BuildOptions(openmp=openmp), plans=[bad], validate_plans=False)
        assert outcome.status == "unwritten", outcome.report
        report = outcome.report
        assert "output elements never written" in report
        assert '"split": {"depth": 1, "pieces": [[0, 7], [9, 19]]}' in report  # the plan
        assert "x = float32(5, 7) [0x" in report  # the inputs in hex
        assert "int c0_split(" in report  # the kernel text
        with pytest.raises(AssertionError, match="output elements never written"):
            assert_all_equal([outcome])  # the property's own verdict


def test_a_split_whose_pieces_overlap_fails_the_coverage_check():
    case = _linear_case()
    bad = Plan((("linear", NestPlan(LANED_LINEAR.layout, Split(0, ((0, 12), (5, 19))))),))
    with pytest.raises(LayoutError, match=r"pieces overlap on \[5,12\)"):
        validate_plan(lower("linear", "f32", case.shapes, case.attr_dict), bad)
    # Without the check the outputs are right: an overlap writes the same bits twice.
    (unchecked,) = run_cases([case], BuildOptions(), plans=[bad], validate_plans=False)
    assert unchecked.status == "equal"
    for openmp in (False, True):
        options = BuildOptions(openmp=openmp, defines=(CHECK_SPLITS,))
        (outcome,) = run_cases([case], options, plans=[bad], validate_plans=False)
        assert outcome.status == "coverage", outcome.report
        assert (
            "split coverage check failed in launch c0 (nest linear, axis n in [0, 19)): "
            "pieces overlap (pieces overlap on [5,12)); pieces [0,12) [5,19)"
        ) in outcome.report
        assert '"pieces": [[0, 12], [5, 19]]' in outcome.report
        with pytest.raises(AssertionError, match="split coverage check failed"):
            assert_all_equal([outcome])


def test_a_piece_out_of_range_is_refused_and_checked():
    case = _linear_case()
    bad = Plan((("linear", NestPlan(Layout(), Split(0, ((0, 3), (3, 6))))),))  # m has extent 5
    with pytest.raises(LayoutError, match=r"piece \[3,6\) is not within \[0,5\]"):
        validate_plan(lower("linear", "f32", case.shapes, case.attr_dict), bad)
    (outcome,) = run_cases([case], BuildOptions(defines=(CHECK_SPLITS,)), plans=[bad], validate_plans=False)
    assert outcome.status == "coverage"
    assert "a piece out of range" in outcome.report


# ---- illegal layouts and plans are refused by name -----------------------------------------------

LINEAR = lower("linear", "f32", {"x": (5, 7), "w": (19, 7)}, {})
LAYERNORM = lower("layernorm", "f32", {"x": (3, 8), "g": (8,), "b": (8,)}, {})
EMBEDDING = lower("embedding", "f32", {"table": (10, 4), "ids": (6,)}, {})
QLINEAR_I = lower("qlinear_i", "f32", {"xq": (3, 10), "xd": (3, 3), "wq": (5, 6), "wd": (5, 3)},
                  {"fmt": "q4", "block": 4})


@pytest.mark.parametrize(
    "kernel, plan, message",
    [
        (LINEAR, {"nests": {"linear": {"layout": {"order": ["k", "m"]}}}},
         "plan: nest linear, field layout.order.k: k is a reduction axis; orders apply to parallel axes only"),
        (LINEAR, {"nests": {"linear": {"layout": {"lanes": {"k": 8}}}}},
         "plan: nest linear, field layout.lanes.k: k is a reduction axis; lanes apply to parallel axes only"),
        (LINEAR, {"nests": {"linear": {"layout": {"tiles": {"k": 8}}}}},
         "plan: nest linear, field layout.tiles.k: k is a reduction axis; tiles apply to parallel axes only"),
        (LINEAR, {"nests": {"linear": {"layout": {"tiles": {"q": 8}}}}},
         "plan: nest linear, field layout.tiles.q: the nest has no axis 'q'; its parallel axes are m, n"),
        (LINEAR, {"nests": {"linear": {"layout": {"lanes": {"n": 17}}}}},
         "plan: nest linear, field layout.lanes.n: lane width 17 must be an integer in 2..16, "
         "or one of 32, 64, 128, 256 on a nest's only lane axis"),
        (LINEAR, {"nests": {"linear": {"layout": {"lanes": {"n": 1}}}}},
         "plan: nest linear, field layout.lanes.n: lane width 1 must be an integer in 2..16"),
        (LINEAR, {"nests": {"linear": {"layout": {"lanes": {"m": 4, "n": 32}}}}},
         "plan: nest linear, field layout.lanes.n: lane width 32 must be an integer in 2..16, "
         "or one of 32, 64, 128, 256 on a nest's only lane axis"),
        (LINEAR, {"nests": {"linear": {"layout": {"order": ["m"]}}}},
         "plan: nest linear, field layout.order: ['m'] is not an order of the parallel axes m, n"),
        (LINEAR, {"nests": {"linear": {"layout": {"tiles": {"n": 0}}}}},
         "plan: nest linear, field layout.tiles.n: tile size 0 must be an integer >= 1"),
        (LINEAR, {"nests": {"linear": {"layout": {"packs": ["w"]}}}},
         "plan: nest linear, field layout.packs.w: a pack feeds the lanes; give the layout lanes first"),
        (LINEAR, {"nests": {"linear": {"layout": {"lanes": {"m": 4}, "packs": ["w"]}}}},
         "plan: nest linear, field layout.packs.w: w does not depend on the lane axes m"),
        (LINEAR, {"nests": {"linear": {"layout": {"lanes": {"n": 4}, "packs": ["y"]}}}},
         "plan: nest linear, field layout.packs.y: the nest reads no buffer 'y'"),
        (LINEAR, {"nests": {"linear": {"layout": {"blocks": {"m": 4}}}}},
         "plan: nest linear, field layout.blocks.m: m is a parallel axis; blocks apply to reductions"),
        (LINEAR, {"nests": {"linear": {"layout": {"lanes": {"m": 2, "n": 2, "x": 2}}}}},
         "plan: nest linear, field layout.lanes: 3 lane axes; at most 2"),
        (LINEAR, {"nests": {"linear": {"layout": {"spin": 1}}}},
         "plan: nest linear, field layout.spin: unknown field"),
        (LINEAR, {"nests": {"matmul": {}}},
         "plan: nest matmul, field nests.matmul: the kernel linear has no nest matmul; its nests are linear"),
        (LINEAR, {"nests": {"linear": {"split": {"depth": 2, "pieces": [[0, 5]]}}}},
         "plan: nest linear, field split.depth: depth 2 must be an integer in 0..1 (the loops m, n)"),
        (LINEAR, {"nests": {"linear": {"split": {"depth": 0, "pieces": [[0, 2], [1, 5]]}}}},
         "plan: nest linear, field split.pieces: pieces overlap on [1,2)"),
        (LINEAR, {"nests": {"linear": {"split": {"depth": 0, "pieces": [[0, 2], [3, 5]]}}}},
         "plan: nest linear, field split.pieces: pieces leave a gap [2,3)"),
        (LINEAR, {"nests": {"linear": {"split": {"depth": 0, "pieces": [[0, 4]]}}}},
         "plan: nest linear, field split.pieces: pieces leave a gap [4,5)"),
        (LINEAR, {"nests": {"linear": {"split": {"depth": "0", "pieces": [[0, 5]]}}}},
         "plan: nest linear, field split.depth: depth must be an integer, not '0'"),
        (LAYERNORM, {"nests": {"layernorm": {"layout": {"lanes": {"dy": 4}}}}},
         "plan: nest layernorm, field layout.lanes.dy: dy is a loop of the body; lanes apply to the nest's"),
        (LAYERNORM, {"nests": {"layernorm": {"layout": {"order": ["ds"]}}}},
         "plan: nest layernorm, field layout.order.ds: ds is a reduction axis"),
        (EMBEDDING, {"nests": {"embedding": {"layout": {"lanes": {"d": 4}, "packs": ["table"]}}}},
         "plan: nest embedding, field layout.packs.table: table is indexed by the scalar row (a gather)"),
        (LINEAR, {"nests": {"linear": {"layout": {"sums": {"k": {"lanes": 4}}}}}},
         "plan: nest linear, field layout.sums.k: k is not an integer sum (its body does more than s = s + term"),
        (QLINEAR_I, {"nests": {"qlinear_i": {"layout": {"sums": {"blk": {"lanes": 4}}}}}},
         "plan: nest qlinear_i, field layout.sums.blk: blk is not an integer sum"),
        (QLINEAR_I, {"nests": {"qlinear_i": {"layout": {"sums": {"m": {"parts": 2}}}}}},
         "plan: nest qlinear_i, field layout.sums.m: m is a parallel axis; sums apply to integer reductions "
         "(the nest's reductions: blk, k, kh, t)"),
        (QLINEAR_I, {"nests": {"qlinear_i": {"layout": {"sums": {"k": {"lanes": 65}}}}}},
         "plan: nest qlinear_i, field layout.sums.k: lanes 65 must be an integer in 1..64"),
        (QLINEAR_I, {"nests": {"qlinear_i": {"layout": {"sums": {"k": {"parts": 0}}}}}},
         "plan: nest qlinear_i, field layout.sums.k: parts 0 must be an integer in 1..8"),
        (QLINEAR_I, {"nests": {"qlinear_i": {"layout": {"lanes": {"n": 4}, "sums": {"k": {"lanes": 4}}}}}},
         "plan: nest qlinear_i, field layout.sums.k: sums and lanes on parallel axes do not combine"),
        (QLINEAR_I, {"nests": {"qlinear_i": {"layout": {"blocks": {"k": 1}, "sums": {"k": {"lanes": 4}}}}}},
         "plan: nest qlinear_i, field layout.sums.k: k is blocked too"),
        (QLINEAR_I, {"nests": {"qlinear_i": {"layout": {"sums": {"k": {"lanes": 4, "order": 1}}}}}},
         "plan: nest qlinear_i, field layout.sums.k: give an object with 'lanes' and/or 'parts'"),
    ],
)
def test_illegal_plans_are_refused_by_nest_field_and_rule(kernel, plan, message):
    with pytest.raises(LayoutError) as caught:
        validate_plan(kernel, parse_plan(plan))
    assert str(caught.value).startswith(message), str(caught.value)


def test_no_plan_and_an_empty_plan_print_the_plain_nests():
    """A plan that names no nest, or gives a nest no layout and no split, prints the plain
    function byte for byte (only the plain kernel's text is byte-identical to the
    printer without a plan; tests/test_kernels_print.py pins that text)."""
    plain = print_kernel(LINEAR, "k")
    assert print_kernel(LINEAR, "k", Plan()).source == plain.source
    assert print_kernel(LINEAR, "k", Plan()).cdef == plain.cdef


def test_lanes_print_as_local_arrays_in_reduction_order():
    plan = Plan((("linear", LANED_LINEAR),))
    validate_plan(LINEAR, plan)
    source = print_kernel(LINEAR, "k", plan).source
    assert "float acc[2][4];" in source
    assert "acc[m_l][n_l] = acc[m_l][n_l] + (x[m_c * K + m_l * K + k] * w_p[n_l + k * 4]);" in source
    assert "w_p[n_l + k * 4] = w[n_c * K + n_l * K + k];" in source
    assert "enum { K = 7, M = 5, N = 19 };" in source
    assert "int k_split(" in source
    assert "num_threads(team)" in source and "omp_get_max_threads()" in source


def test_plan_json_round_trips():
    plan = Plan((("linear", LANED_LINEAR),))
    assert parse_plan(json.loads(plan.dumps())) == plan
    summed = Plan((("qlinear_i", NestPlan(Layout(order=("n", "m"), sums=(("k", 8, 2), ("t", 3, 1))))),))
    assert parse_plan(json.loads(summed.dumps())) == summed


def test_integer_sums_in_every_grouping_give_the_reference_bits():
    """qlinear_i in q8 and q4, K = 77 in blocks of 34 (loops of 34, 17 and a tail of 9),
    values at the limits: every integer sum in lanes 1, 3, 4, 5, 64 and parts 1, 2, 3
    (most part lengths are not a multiple of the lanes, so the remainders run), C
    against the reference."""
    from exactc.strategies.quant import ScaleSpec, ValueSpec

    batch = []
    for fmt in ("q8", "q4"):
        k, block = 77, 34
        row = {"q8": k, "q4": 3 * block // 2}[fmt]
        specs = (("xq", ValueSpec(3, k, "q8", block, 1, ("max", "random", "min"))),
                 ("xd", ScaleSpec((3, 3), "f32", 2, ("power",))),
                 ("wq", ValueSpec(5, k, fmt, block, 3, ("min", "limit", "random"))),
                 ("wd", ScaleSpec((5, 3), "f32", 4, ("power", "normal"))))
        case = Case("qlinear_i", "f32", (("block", block), ("fmt", fmt), ("has_b", False)), specs)
        assert dict(case.specs)["wq"].shape == (5, row)
        kernel = lower("qlinear_i", "f32", case.shapes, case.attr_dict)
        loops = [a for a in kernel.nests[0].reduce_axes() if a.name != "blk"]
        for lanes in (1, 3, 4, 5, 64):
            for parts in (1, 2, 3):
                layout = Layout(order=("n", "m"), sums=tuple((a.name, lanes, parts) for a in loops))
                batch.append((case, Plan((("qlinear_i", NestPlan(layout)),))))
    assert_all_equal(_run(batch, ("gcc", False, None, None)))


def block_kernel_cases() -> list[Case]:
    """qlinear_i in q8 and q4, G = 32, 19 outputs (two chunks of 8 and 3 more): three
    whole blocks (exactc_dot.h's kernels, one row or 8 at once) and a
    short last one (its loops: 13 values, under a q4 block's half, or 24, its high half
    short), the values at the extremes (activations -128, -127 and 127, q8 weights -128,
    q4 nibbles 0 and 15), random nibbles in q4's padding."""
    from exactc.strategies.quant import ScaleSpec, ValueSpec

    out = []
    for fmt in ("q8", "q4"):
        for k in (96 + 13, 96 + 24):
            specs = (("xq", ValueSpec(5, k, "q8", 32, 1, ("max", "random", "min", "limit"))),
                     ("xd", ScaleSpec((5, 4), "f32", 2, ("power",))),
                     ("wq", ValueSpec(19, k, fmt, 32, 3, ("min", "limit", "random", "max"), garbage_padding=True)),
                     ("wd", ScaleSpec((19, 4), "f32", 4, ("power", "normal"))))
            out.append(Case("qlinear_i", "f32", (("block", 32), ("fmt", fmt), ("has_b", False)), specs))
    return out


BLOCK_KERNEL_LAYOUTS = [
    NestPlan(Layout()),
    NestPlan(Layout(order=("n", "m")), Split(0, ((0, 3), (3, 19)))),
    NestPlan(Layout(order=("n", "m"), lanes=(("n", 4),))),  # the laned body keeps its loops, the rest calls
    NestPlan(Layout(order=("n", "m"), lanes=(("n", 8),)), Split(0, ((0, 8), (8, 19)))),  # 8 rows a call
    # 4 x 8 outputs a call of the tile kernel; the last row and the last 3 outputs not
    NestPlan(Layout(order=("n", "m"), lanes=(("m", 4), ("n", 8))), Split(0, ((0, 8), (8, 19)))),
    NestPlan(Layout(order=("m", "n"), lanes=(("m", 4), ("n", 8))), Split(0, ((0, 4), (4, 5)))),
    NestPlan(Layout(order=("n", "m"), tiles=(("n", 2),), lanes=(("m", 2),))),
    NestPlan(Layout(sums=(("k", 4, 2),))),  # the layout's sums keep the loop
    NestPlan(Layout(blocks=(("k", 8),))),
]


@needs_compilers
@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
def test_block_kernels_under_layouts_give_the_reference_bits(native):
    """The whole blocks' sums as exactc_dot.h's calls, in the plain body and in every
    place a layout prints it, built for this CPU (its vector path) or not (the plain
    loops): the reference's bits."""
    batch = [(case, Plan((("qlinear_i", plan),))) for case in block_kernel_cases() for plan in BLOCK_KERNEL_LAYOUTS]
    for case, plan in batch[:2]:
        source = print_kernel(lower("qlinear_i", "f32", case.shapes, case.attr_dict), "q", plan).source
        assert "exactc_dot_q8_32(" in source or "exactc_dot_q4_32(" in source
    for case in block_kernel_cases():
        tiled = NestPlan(Layout(order=("n", "m"), lanes=(("m", 4), ("n", 8))))
        source = print_kernel(lower("qlinear_i", "f32", case.shapes, case.attr_dict), "q", Plan((("qlinear_i", tiled),))).source
        assert f"exactc_qtile_{case.attr_dict['fmt']}(4, " in source
    options = BuildOptions(cc="gcc", openmp=True, march_native=native, defines=(CHECK_SPLITS,))
    assert_all_equal(run_cases([c for c, _ in batch], options, plans=[p for _, p in batch], threads=2))
# Whole blocks (k = 96), so that wq and wd pack: wq's pack is a block panel (the lanes'
# rows' blocks one after another, layouts.RUN_PANELS), read by the x8 call with the rows
# a run apart under n:8 and by the laned loops through its offsets under n:4.
BLOCK_PANEL_LAYOUTS = [
    NestPlan(Layout(order=("n", "m"), lanes=(("n", 8),), packs=("wq", "wd")), Split(0, ((0, 8), (8, 19)))),
    NestPlan(Layout(order=("n", "m"), lanes=(("n", 4),), packs=("wq",))),
    NestPlan(Layout(order=("n", "m"), lanes=(("m", 2), ("n", 8)), packs=("wq", "wd"))),
]


@needs_compilers
@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
def test_block_kernels_from_block_panels_give_the_reference_bits(native):
    """qlinear_i's values packed as block panels (copied at every call, in the order a
    program lays them out at load): the reference's bits wherever the lanes read them."""
    from exactc.strategies.quant import ScaleSpec, ValueSpec

    cases = []
    for fmt in ("q8", "q4"):
        specs = (("xq", ValueSpec(5, 96, "q8", 32, 1, ("max", "random", "min", "limit"))),
                 ("xd", ScaleSpec((5, 3), "f32", 2, ("power",))),
                 ("wq", ValueSpec(19, 96, fmt, 32, 3, ("min", "limit", "random", "max"))),
                 ("wd", ScaleSpec((19, 3), "f32", 4, ("power", "normal"))))
        cases.append(Case("qlinear_i", "f32", (("block", 32), ("fmt", fmt), ("has_b", False)), specs))
    batch = [(case, Plan((("qlinear_i", plan),))) for case in cases for plan in BLOCK_PANEL_LAYOUTS]
    case, plan = batch[0]
    source = print_kernel(lower("qlinear_i", "f32", case.shapes, case.attr_dict), "q", plan).source
    assert "exactc_dot_q8_32x8(&xq[m * 96 + blk * 32], &wq_p[blk * 256], 32, s_rows);" in source
    options = BuildOptions(cc="gcc", openmp=True, march_native=native, defines=(CHECK_SPLITS,))
    assert_all_equal(run_cases([c for c, _ in batch], options, plans=[p for _, p in batch], threads=2))


def test_k_quant_integer_sums_in_every_grouping_give_the_reference_bits():
    """qlinear_i over Q4_K, Q5_K and Q6_K weights, two super-blocks, all-0xFF blocks (every
    scale and min 63, every quant at its top) beside random ones, activations at the
    limits: every sub-block's integer sums (s_j, and x_j beside it for Q4_K and Q5_K) in
    lanes 1, 3, 5, 64 and parts 1, 2, 3, C against the reference."""
    from exactc.strategies.quant import KQuantSpec, ScaleSpec, ValueSpec

    batch = []
    for fmt in ("q4_k", "q5_k", "q6_k"):
        wq = KQuantSpec(5, 2, fmt, 3, ("ones", "random"), ("random", "largest"))
        specs = (("xq", ValueSpec(3, 512, "q8", 256, 1, ("max", "random", "min"))),
                 ("xd", ScaleSpec((3, 2), "f32", 2, ("power",))),
                 ("wq", wq), ("wd", dataclasses.replace(wq, part="fields")))
        case = Case("qlinear_i", "f32", (("block", 256), ("fmt", fmt), ("has_b", False)), specs)
        kernel = lower("qlinear_i", "f32", case.shapes, case.attr_dict)
        loops = [a for a in kernel.nests[0].reduce_axes() if a.name != "blk"]
        assert len(loops) == (16 if fmt == "q6_k" else 8)
        for lanes in (1, 3, 5, 64):
            for parts in (1, 2, 3):
                layout = Layout(order=("n", "m"), sums=tuple((a.name, lanes, parts) for a in loops))
                batch.append((case, Plan((("qlinear_i", NestPlan(layout)),))))
    assert_all_equal(_run(batch, ("gcc", False, None, None)))


def k_quant_extreme_cases(rows: int = 3) -> list[Case]:
    """qlinear_i over each k-quant, two super-blocks, all-0xFF blocks beside random ones,
    activations at ±127 and -128."""
    from exactc.strategies.quant import KQuantSpec, ScaleSpec, ValueSpec

    out = []
    for fmt in ("q4_k", "q5_k", "q6_k"):
        wq = KQuantSpec(9, 2, fmt, 3, ("ones", "random"), ("random", "largest"))
        specs = (("xq", ValueSpec(rows, 512, "q8", 256, 1, ("max", "random", "min"))),
                 ("xd", ScaleSpec((rows, 2), "f32", 2, ("power",))),
                 ("wq", wq), ("wd", dataclasses.replace(wq, part="fields")))
        out.append(Case("qlinear_i", "f32", (("block", 256), ("fmt", fmt), ("has_b", False)), specs))
    return out


@pytest.mark.parametrize("native", [False, True], ids=["plain", "native"])
def test_k_quant_super_block_kernels_under_the_automatic_layouts_give_the_reference_bits(native):
    """The automatic plan's layout of each k-quant qlinear_i prints every super-block's
    sums as one call of exactc_dot.h's kernel; built for this CPU (its AVX2 path) or not
    (the plain loops), at 2 threads: the reference's bits."""
    batch = []
    for case in k_quant_extreme_cases(1) + k_quant_extreme_cases(3):
        kernel = lower("qlinear_i", "f32", case.shapes, case.attr_dict)
        plan = auto_kernel_plan(kernel)
        fmt = case.attr_dict["fmt"]
        assert f"exactc_dot_{fmt}_256(" in print_kernel(kernel, "q", plan).source
        batch.append((case, plan))
    options = BuildOptions(cc="gcc", openmp=True, march_native=native, defines=(CHECK_SPLITS,))
    assert_all_equal(run_cases([c for c, _ in batch], options, plans=[p for _, p in batch], threads=2))


def test_integer_sums_print_as_partial_sums_added_last_first():
    """An integer sum in parts and lanes: int32 partial sums (one row per part, one
    column per lane), the full chunks laned, the rest of each part into the first lanes,
    then every partial sum added into s, last part and last lane first."""
    plan = Plan((("qlinear_i", NestPlan(Layout(sums=(("k", 4, 2),)))),))
    validate_plan(QLINEAR_I, plan)
    source = print_kernel(QLINEAR_I, "q", plan).source
    assert "int32_t s_k[2][4];" in source
    assert "s_k[k_p][k_l] = s_k[k_p][k_l] + (((int32_t)xq[m * 10 + blk * 4 + k_c + k_l]) * " in source
    assert "s_k[k_p][k - k_e] = s_k[k_p][k - k_e] + " in source
    assert "for (int64_t k_p = 2 - 1; k_p >= 0; k_p--) {" in source and "s = s + s_k[k_p][k_l];" in source
    assert "for (int64_t kh = 0; kh < KH; kh++) { /* reduction: in index order */" in source  # not summed


def test_plan_show_and_check_commands(tmp_path):
    exe = [sys.executable, "-m", "exactc.cli"]
    show = subprocess.run(exe + ["plan", "--show", "linear", "--dtype", "f32", "--shape", "x=3,4",
                                 "--shape", "w=5,4"], capture_output=True, text=True)
    assert show.returncode == 0, show.stderr
    assert "parallel axes (outermost first): m<3, n<5" in show.stdout
    assert "body loops: reduce k<4" in show.stdout
    assert "layout.packs: w (with lanes on n)" in show.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nests": {"linear": {"layout": {"order": ["k", "m"]}}}}))
    check = subprocess.run(exe + ["plan", "--check", str(bad), "linear", "--shape", "x=3,4", "--shape", "w=5,4"],
                           capture_output=True, text=True)
    assert check.returncode == 2 and len(check.stderr.strip().splitlines()) == 1, check.stderr
    assert "plan: nest linear, field layout.order.k: k is a reduction axis" in check.stderr
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"nests": {"linear": {"layout": {"lanes": {"n": 4}, "packs": ["w"]},
                                                     "split": {"depth": 0, "pieces": [[0, 1], [1, 3]]}}}}))
    check = subprocess.run(exe + ["plan", "--check", str(good), "linear", "--shape", "x=3,4", "--shape", "w=5,4"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("cc", EACH_COMPILER)
def test_lanes_are_vectorized_at_O2(cc, tmp_path):
    """The laned linear is vectorized by gcc and clang at plain -O2 with the strict flags
    and no -march: its assembly adds packed floats (addps), which the plain nest, whose
    sums are reductions in index order, never does (it may multiply packed, not add)."""
    kernel = lower("linear", "f32", {"x": (64, 96), "w": (128, 96)}, {})
    plan = Plan((("linear", NestPlan(Layout(order=("n", "m"), lanes=(("m", 2), ("n", 16)), packs=("w",)))),))
    validate_plan(kernel, plan)
    runtime = str(RUNTIME_DIR)

    def assembly(source: str) -> str:
        path = tmp_path / "kernel.c"
        path.write_text(source)
        proc = subprocess.run([cc, *STRICT_FLAGS, "-O2", "-S", f"-I{runtime}", str(path),
                               "-o", "-"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "addps" not in assembly(print_kernel(kernel, "k").source)
    assert "addps" in assembly(print_kernel(kernel, "k", plan).source)


@pytest.mark.parametrize("site, packed", [("f32", "ps"), ("f64", "pd")])
@pytest.mark.parametrize("cc", EACH_COMPILER)
def test_fused_lanes_are_vectorized_into_fma_instructions(cc, site, packed, tmp_path):
    """On a target with FMA (-march=haswell) the laned fused linear's written fma/fmaf
    compiles, under the strict flags at -O2, to packed fused multiply-adds (vfmadd..ps/pd
    on ymm registers) and no call of the C library's function is left in the lanes."""
    kernel = lower("linear", site, {"x": (64, 96), "w": (128, 96)}, {}, CONTRACT_FMA)
    plan = Plan((("linear", NestPlan(Layout(order=("n", "m"), lanes=(("m", 2), ("n", 8)), packs=("w",)))),))
    validate_plan(kernel, plan)
    path = tmp_path / "kernel.c"
    path.write_text(print_kernel(kernel, "k", plan).source)
    proc = subprocess.run([cc, *STRICT_FLAGS, "-O2", "-march=haswell", "-S", f"-I{RUNTIME_DIR}", str(path), "-o", "-"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert re.search(rf"vfmadd\d+{packed}\s+.*%ymm", proc.stdout), proc.stdout
    assert not re.search(r"(call|jmp)\s+fmaf?(@PLT)?\b", proc.stdout)


def test_the_fused_linear_s_automatic_layout_keeps_its_sums_in_registers_on_avx2():
    """The automatic plan of the fused GPT-2-like MLP linear at f32, compiled by gcc for an
    AVX2 target without AVX-512 (-march=haswell: 16 ymm registers): the loop of its fused
    multiply-adds reads and writes no stack slot (in 8-row lanes gcc kept two of the 16
    accumulators on the stack, a store and a load on every step)."""
    site, packed = "f32", "ps"
    kernel = lower("linear", site, {"x": (256, 384), "w": (1536, 384), "b": (1536,)}, {"has_b": True}, CONTRACT_FMA)
    source = print_kernel(kernel, "k", auto_kernel_plan(kernel)).source
    proc = subprocess.run(["gcc", *STRICT_FLAGS, "-O2", "-march=haswell", "-S", f"-I{RUNTIME_DIR}", "-x", "c", "-",
                           "-o", "-"], input=source, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    blocks = re.split(r"\n(?=\.L\w+:)", proc.stdout)  # the assembly's basic blocks, label to label
    blocks = [block.split("\n\tj", 1)[0] for block in blocks]  # up to its first jump: the loop's own
    loop = max(blocks, key=lambda block: len(re.findall(rf"vfmadd\w*{packed}\s+[^\n]*%ymm", block)))
    assert len(re.findall(rf"vfmadd\w*{packed}", loop)) >= 12, loop
    assert "(%rsp)" not in loop, f"the fused multiply-adds' loop spills to the stack:\n{loop}"


def _full_plan(kernel) -> Plan:
    """Every layout feature at once on every nest: order reversed, a tile on the first
    axis, lanes on the last two, every packable buffer packed, every reduction blocked,
    a split of the outer loop in three uneven pieces (one empty)."""
    from exactc.exporter.kernels.layouts import packable
    from exactc.exporter.kernels.splits import split_pieces

    items = []
    for nest in kernel.nests:
        names = [a.name for a in nest.axes]
        order = tuple(reversed(names))
        lanes = tuple((a, w) for a, w in zip(order[-2:], (2, 4)))
        layout = Layout(order=order, tiles=((order[0], 3),), lanes=lanes)
        buffers = {b.name: b for b in kernel.buffers}
        packs = tuple(b for b in nest.reads() if packable(nest, layout, b, buffers) is None)
        blocks = tuple((a.name, 2) for a in nest.reduce_axes())
        layout = Layout(order, layout.tiles, lanes, packs, blocks)
        extent = {a.name: a.extent for a in nest.axes}[order[0]]
        items.append((nest.name, NestPlan(layout, Split(0, split_pieces(extent, [extent // 3, extent // 3])))))
    plan = Plan(tuple(items))
    validate_plan(kernel, plan)
    return plan


@pytest.mark.parametrize("openmp", [False, True])
@pytest.mark.parametrize("opt, native", [("-O0", False), ("-O3", True)])
@pytest.mark.parametrize("cc", EACH_COMPILER)
def test_planned_kernels_compile_warning_free(cc, opt, native, openmp):
    """Every primitive under a plan that uses every feature: no warning (-Wall -Wextra
    -Werror) with gcc and clang, -O0 and -O3 -march=native, with and without OpenMP, in
    the checking build."""
    from exactc.verify.build import compile_shared, runtime_source

    from test_kernels_print import CASES

    sources = []
    for n, (primitive, shapes, attrs) in enumerate(CASES):
        for site in (s for s in ("f32", "bf16") if s in PRIMITIVES[primitive].sites):
            kernel = lower(primitive, site, shapes, attrs)
            sources.append(print_kernel(kernel, f"p{n}_{site}", _full_plan(kernel)).source)
    options = BuildOptions(cc=cc, opt=opt, march_native=native, openmp=openmp, defines=(CHECK_SPLITS,))
    compile_shared({"kernels.c": "\n".join(sources), "exactc_libm.c": runtime_source("exactc_libm.c")}, options)


# ---- layouts (kernels/layouts.py): sums given as a dict, one pack for several reads only when
# each is the first renamed loop for loop, and packable's and the sums' refusals whole


def test_a_layouts_sums_given_as_a_dict_are_held_as_triples():
    assert Layout(sums={"k": (4, 2)}).sums == (("k", 4, 2),)
    assert Layout(sums=(("k", 4, 2),)).sums == (("k", 4, 2),)


def _two_reads(first, other, extents=None):
    """A nest over n whose body loops k and k2 read w twice: w[first] then w[other],
    each index a tuple of affine forms."""
    extents = extents or {"k": 4, "k2": 4}
    read = ir.Binary("+", ir.Load(ir.Access("w", "f32", first)), ir.Load(ir.Access("w", "f32", other)))
    write = ir.Write(ir.Access("y", "f32", (ir.Affine.var("n"),)), read)
    inner = ir.Loop(ir.Axis("k2", extents["k2"], ir.REDUCE), (write,))
    return ir.Nest("t", (ir.Axis("n", 4),), (ir.Loop(ir.Axis("k", extents["k"], ir.REDUCE), (inner,)),))


def test_one_pack_serves_two_reads_only_when_each_loop_is_renamed_alike():
    from exactc.exporter.kernels.layouts import pack_accesses
    n, k, k2 = (ir.Affine.var(a) for a in ("n", "k", "k2"))
    found = pack_accesses(_two_reads((n, k), (n, k2)), "w")
    assert found[1][ir.Access("w", "f32", (n, k2))] == {"k": "k2"}
    refused = "w is read through 2 different indices; a pack needs one"
    for first, other, extents in (((n, k), (n, k2), {"k": 4, "k2": 5}),  # a loop of another extent
                                  ((n, k), (n, n), None),  # a parallel axis is no body loop to rename to
                                  ((k, k), (k2, k), None),  # k renamed k2, then k read as itself
                                  ((n, k), (n, 2 * k), None)):  # another coefficient
        assert pack_accesses(_two_reads(first, other, extents), "w") == refused, other


def test_packable_refusals_whole():
    from exactc.exporter.kernels.layouts import integer_sum_rule, packable
    kernel = lower("linear", "f32", {"x": (3, 4), "w": (5, 4)})
    nest, buffers = kernel.nests[0], {b.name: b for b in kernel.buffers}
    lanes = Layout(lanes=(("m", 2), ("n", 4)))
    assert packable(nest, lanes, "q", buffers) == "the nest reads no buffer 'q'; it reads x, w"
    output = ir.Buffer("x", "float", (3, 4), "output")
    assert packable(nest, lanes, "x", {**buffers, "x": output}) == "x is an output; only inputs are packed"
    temp = ir.Buffer("x", "float", (3, 4), "temp")
    assert packable(nest, lanes, "x", {**buffers, "x": temp}) == "x is a temp; only inputs are packed"
    assert packable(nest, Layout(lanes=(("n", 4),)), "w", buffers) is None
    assert packable(nest, Layout(lanes=(("m", 2), ("z", 4))), "w", buffers) == (
        "w does not depend on the lane axes m, z; nothing to gather")
    assert integer_sum_rule(nest, "k") == ("k is not an integer sum (its body does more than s = s + term into "
                                           "int32 accumulators); a floating-point reduction runs in index order, "
                                           "always")


# ---- a layout's text of two tiles and two blocks; the refusals that list two parallel axes or
# two reductions


def test_a_layouts_text_joins_two_tiles_and_two_blocks():
    # the layout line of a planned function's C comment and of `exactc tune`'s labels
    assert Layout(tiles=(("m", 2), ("n", 8))).text() == "tiles m:2, n:8"
    assert Layout(blocks=(("k", 3), ("kh", 2))).text() == "blocks k:3, kh:2"


def _refusal(nest, layout, buffers):
    with pytest.raises(LayoutError) as caught:
        validate_layout(nest, layout, buffers)
    return str(caught.value)


def test_layout_refusals_list_two_parallel_axes_and_two_reductions_whole():
    # softmax's nest: parallel axes bi, i; body loops jm, js (reductions) and jy
    softmax = lower("softmax", "f32", {"x": (2, 3, 4)}, {})
    nest = softmax.nests[0]
    assert _refusal(nest, Layout(lanes=(("jy", 4),)), softmax.buffers) == (
        "plan: nest softmax, field layout.lanes.jy: jy is a loop of the body; lanes apply to the nest's "
        "parallel axes bi, i")
    assert _refusal(nest, Layout(blocks=(("q", 2),)), softmax.buffers) == (
        "plan: nest softmax, field layout.blocks.q: the nest has no reduction 'q'; its reductions are jm, js")
    linear = lower("linear", "f32", {"x": (3, 4), "w": (5, 4)}, {})
    assert _refusal(linear.nests[0], Layout(order=("m",)), linear.buffers) == (
        "plan: nest linear, field layout.order: ['m'] is not an order of the parallel axes m, n "
        "(each exactly once)")


# ---- layouts


ADD = lower("add", "f32", {"a": (3,), "b": (3,)}, {})

# w's panel for one chunk of 8 lanes on n: 8 * 8193 elements, over the pack's limit by 8
LINEAR_WIDE = lower("linear", "f32", {"x": (1, 8193), "w": (8, 8193)}, {})


def validate(kernel: ir.Kernel, layout: Layout = Layout(), split: Split | None = None) -> None:
    validate_plan(kernel, Plan(((kernel.nests[0].name, NestPlan(layout, split)),)))


# (kernel, layout, the start of the message)
LAYOUTS = [
    pytest.param(LINEAR, Layout(tiles=(("n", 4), ("n", 8))), "plan: nest linear, field layout.tiles: an axis is tiled "
                 "twice", id="tiled-twice"),
    pytest.param(LINEAR, Layout(lanes=(("n", 4), ("n", 8))), "plan: nest linear, field layout.lanes: an axis has lanes "
                 "twice", id="laned-twice"),
    pytest.param(LINEAR, Layout(lanes=(("n", 4),), packs=("w", "w")),
                 "plan: nest linear, field layout.packs: a buffer is packed twice", id="packed-twice"),
    pytest.param(LINEAR_WIDE, Layout(lanes=(("n", 8),), packs=("w",)),
                 "plan: nest linear, field layout.packs.w: the panel of w has 65544 elements; a pack holds at most "
                 "65536", id="pack-over-its-limit"),
    pytest.param(LINEAR, Layout(blocks=(("q", 4),)),
                 "plan: nest linear, field layout.blocks.q: the nest has no reduction 'q'; its reductions are k",
                 id="block-of-no-axis"),
    pytest.param(ADD, Layout(blocks=(("q", 4),)),
                 "plan: nest add, field layout.blocks.q: the nest has no reduction 'q'; its reductions are none",
                 id="block-without-reductions"),
    pytest.param(LAYERNORM, Layout(blocks=(("dy", 4),)),
                 "plan: nest layernorm, field layout.blocks.dy: dy is a parallel axis; blocks apply to reductions "
                 "(tile a parallel axis)", id="block-of-a-parallel-body-loop"),
    pytest.param(LINEAR, Layout(blocks=(("k", 0),)),
                 "plan: nest linear, field layout.blocks.k: block size 0 must be an integer >= 1", id="block-0"),
    pytest.param(LINEAR, Layout(blocks=(("k", True),)),
                 "plan: nest linear, field layout.blocks.k: block size True must be an integer >= 1", id="block-bool"),
    pytest.param(LINEAR, Layout(blocks=(("k", 2), ("k", 3))),
                 "plan: nest linear, field layout.blocks: a reduction is blocked twice", id="blocked-twice"),
    pytest.param(LAYERNORM, Layout(sums=(("dy", 1, 1),)),
                 "plan: nest layernorm, field layout.sums.dy: dy is a parallel loop of the body; sums apply to integer "
                 "reductions (the nest's reductions: ds, dv)", id="sum-of-a-parallel-body-loop"),
    pytest.param(LAYERNORM, Layout(sums=(("q", 1, 1),)),
                 "plan: nest layernorm, field layout.sums.q: q is not a loop of the nest; sums apply to integer "
                 "reductions (the nest's reductions: ds, dv)", id="sum-of-no-loop"),
    pytest.param(ADD, Layout(sums=(("i", 1, 1),)),
                 "plan: nest add, field layout.sums.i: i is a parallel axis; sums apply to integer reductions "
                 "(the nest's reductions: none)", id="sum-without-reductions"),
    pytest.param(QLINEAR_I, Layout(sums=(("k", 2, 1), ("k", 4, 1))),
                 "plan: nest qlinear_i, field layout.sums: a reduction is summed twice", id="summed-twice"),
]


@pytest.mark.parametrize("kernel, layout, message", LAYOUTS)
def test_an_illegal_layout_is_refused_by_nest_field_and_rule(kernel, layout, message):
    with pytest.raises(LayoutError) as caught:
        validate(kernel, layout)
    assert str(caught.value) == message


def test_a_pack_at_its_limit_is_legal():
    validate(lower("linear", "f32", {"x": (1, 8192), "w": (8, 8192)}, {}), Layout(lanes=(("n", 8),), packs=("w",)))


def _two_sums(coupled: bool) -> ir.Kernel:
    """s and t summed over k<4 from q; coupled, s adds t (a term that reads an accumulator)."""
    q = ir.Buffer("q", "int32_t", (4,), "input")
    y = ir.Buffer("y", "int32_t", (1,), "output")
    k = Affine.var("k")
    s, t = ir.Var("s", "i32"), ir.Var("t", "i32")
    zero = ir.Convert(Affine.constant(0), "i32")
    term = ir.Load(ir.Access("q", "i32", (k,)))
    body = (
        ir.Declare(s, zero),
        ir.Declare(t, zero),
        ir.Loop(ir.Axis("k", 4, REDUCE), (ir.Assign(s, ir.Binary("+", s, t if coupled else term)),
                                         ir.Assign(t, ir.Binary("+", t, term)))),
        ir.Write(ir.Access("y", "i32", (Affine.var("m"),)), ir.Binary("+", s, t)),
    )
    nest = ir.Nest("isum", (ir.Axis("m", 1),), body)
    return ir.Kernel("isum", "f32", {}, (q, y), (nest,), (ir.launch(nest, (q, y)),))


def test_an_integer_sum_whose_term_reads_an_accumulator_is_not_reassociated():
    assert integer_sum_rule(_two_sums(coupled=False).nests[0], "k") is None
    validate(_two_sums(coupled=False), Layout(sums=(("k", 4, 2),)))
    coupled = _two_sums(coupled=True)
    assert integer_sum_rule(coupled.nests[0], "k") == "k: a term of the sum reads an accumulator, so its order matters"
    with pytest.raises(LayoutError, match="field layout.sums.k: k: a term of the sum reads an accumulator"):
        validate(coupled, Layout(sums=(("k", 4, 2),)))


def test_a_layout_given_as_dicts_is_the_layout_of_pairs():
    assert Layout(tiles={"n": 4}, lanes={"n": 2}, blocks={"k": 3}) == Layout(
        tiles=(("n", 4),), lanes=(("n", 2),), blocks=(("k", 3),))


@pytest.mark.parametrize("base, taken, expected", [
    ("acc", {"acc", "acc2"}, "acc3"),  # the first free number
    ("lo", set(), "lo2"),  # the nest function's range parameters are never taken
    ("hi", {"hi2"}, "hi3"),
    ("n_c", {"acc"}, "n_c"),
])
def test_a_fresh_name_avoids_the_taken_names_and_the_range_parameters(base, taken, expected):
    taken = set(taken)
    assert fresh_name(base, taken) == expected
    assert expected in taken
