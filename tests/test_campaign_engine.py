"""The kernel campaign of `make verify` (verify/kernel_campaign.py): families of cases
that share one compiled kernel, tasks that count every case once, failures that come
back with their reproduction."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings

from exactc.exporter.primitives import BACKWARD_PRIMITIVES, CONTRACT_FMA, CONTRACT_OFF, FUSED_PRIMITIVES, PRIMITIVES
from exactc.exporter.reference.fma import fma
from exactc.exporter.types import SITE_TYPES, acc_dtype
from exactc.strategies.cases import Case, kernel_families, sibling, sibling_lengths
from exactc.strategies.fused import FusedOperandSpec
from exactc.strategies.tensors import TensorSpec
from exactc.verify import campaign, kernel_campaign
from exactc.verify.compare import assert_bits_equal
from exactc.verify.kernels import _prepare, assert_all_equal, kernel_key, run_cases


def _layernorm_case(length=5, top=8, d=3) -> Case:
    spec = lambda shape, seed: TensorSpec(shape, "f32", seed, "normal", 1.0)  # noqa: E731
    return Case("layernorm", "f32", (("eps", 1e-5),),
                (("x", spec((length, d), 1)), ("g", spec((d,), 2)), ("b", spec((d,), 3))), length, top)


def test_a_sibling_runs_the_same_kernel_on_fresh_inputs_at_another_length():
    case = _layernorm_case()
    other = sibling(case, 7, salt=1)
    assert other.length == 7 and other.shapes["x"] == (7, 3)
    assert kernel_key(other) == kernel_key(case)
    assert {n: s.seed for n, s in other.specs} == {"x": 2, "g": 3, "b": 4}


def test_a_sibling_never_runs_at_a_length_a_static_dimension_has():
    case = _layernorm_case()  # d = 3: at T = 3, x would be (T, T)
    assert 3 not in sibling_lengths(case) and sibling_lengths(case) == [1, 2, 4, 5, 6, 7, 8]
    with pytest.raises(ValueError, match="static"):
        sibling(case, 3, salt=1)


def test_a_family_compiles_one_kernel_and_every_case_equals_the_reference():
    family = [_layernorm_case()] + [sibling(_layernorm_case(), n, salt=n) for n in (1, 4, 8)]
    prepared = _prepare(family)
    assert len({id(p.printed) for p in prepared}) == 1
    outcomes = run_cases(family)
    assert_all_equal(outcomes)
    assert len(outcomes) == 4


@settings(max_examples=3, derandomize=True)
@given(family=kernel_families(siblings=4))
def test_drawn_families_share_their_kernel_and_differ_in_their_inputs(family):
    assert len(family) == 4 and len({kernel_key(c) for c in family}) == 1
    assert len(set(family)) == 4


@pytest.mark.parametrize("cases", [500, 10_000, 100_000])
def test_tasks_cover_the_cases_asked_for_and_every_primitive_and_site(cases):
    tasks = kernel_campaign.plan_tasks(cases, seed=3)
    forward = [t for t in tasks if t.contract == CONTRACT_OFF and t.primitive not in BACKWARD_PRIMITIVES]
    backward = [t for t in tasks if t.primitive in BACKWARD_PRIMITIVES]
    fused = [t for t in tasks if t.contract == CONTRACT_FMA]
    # the forward primitives' cases alone reach `cases`: the backward tasks run beside them
    assert sum(t.cases for t in forward) >= cases and sum(t.cases for t in fused) >= cases // 2
    assert len({t.seed for t in tasks}) == len(tasks)
    pairs = {(p, s, CONTRACT_OFF) for p in PRIMITIVES if p not in BACKWARD_PRIMITIVES for s in SITE_TYPES}
    pairs |= {(None, None, CONTRACT_OFF)}
    backward_pairs = {(p, s, CONTRACT_OFF) for p in BACKWARD_PRIMITIVES for s in PRIMITIVES[p].sites}
    fused_pairs = {(p, s, CONTRACT_FMA) for p in FUSED_PRIMITIVES for s in SITE_TYPES}
    assert {(t.primitive, t.site, t.contract) for t in tasks} == pairs | backward_pairs | fused_pairs
    assert len(forward) % len(pairs) == 0 and len(fused) % len(fused_pairs) == 0  # whole rounds
    # as many rounds and examples of each backward primitive as of each forward one
    assert len(backward) // len(backward_pairs) == len(forward) // len(pairs)
    assert {t.examples for t in backward} == {t.examples for t in forward}
    assert kernel_campaign.plan_tasks(0) == []


def test_make_verify_s_fma_line_plans_at_least_5000_fused_cases_at_the_default_size():
    """At make verify's default size the kernel phase plans at least MIN_FUSED_CASES
    (5,000) cases of the fused realization, the fma: line that the campaign requires."""
    from exactc.verify import campaign

    assert campaign.MIN_FUSED_CASES >= 5000
    tasks = kernel_campaign.plan_tasks(campaign.DEFAULT_CASES, seed=1)
    assert sum(t.cases for t in tasks if t.contract == CONTRACT_FMA) >= campaign.MIN_FUSED_CASES


@pytest.mark.parametrize("fused", [4999, 5000])
def test_make_verify_fails_when_its_fma_line_counts_fewer_fused_cases_than_required(monkeypatch, capsys, fused):
    from exactc.verify import campaign

    row = {"primitive": "linear", "site": "f32", "status": "equal"}
    grad = {"primitive": "linear_bar_w", "site": "f32", "status": "equal"}
    rows = [dict(row, family="kernels")] * 10_000 + [dict(row, family="fma")] * fused
    rows += [dict(grad, family=f) for f in ("kernels", "grad")] * campaign.MIN_KERNEL_FAMILY_CHECKS["grad"]
    monkeypatch.setattr(campaign, "kernel_phase", lambda *args: (rows, 1.0, [], "kernel phase: stubbed"))
    status = campaign.main(["--seed", "1", "--tests", "--no-sanitizers"])
    out, err = capsys.readouterr()
    assert f"fma: {fused} checked, 0 mismatches" in out
    if fused < campaign.MIN_FUSED_CASES:
        assert status == 1 and f"only {fused} fused kernel cases ran (fma:); at least 5000 required" in err
    else:
        assert status == 0 and err == ""


def test_a_task_counts_each_case_once():
    task = kernel_campaign.Task("scale", "bf16", seed=11, examples=2, kernels=2, siblings=3)
    result = kernel_campaign.run_task(task)
    assert result.failures == [] and result.cases == task.cases
    assert set(result.counts) == {("scale", "bf16", "equal")}
    assert result.kernels == task.examples * task.kernels  # no family twice in a batch
    rows, kernels, failures = kernel_campaign.merge([result, result])
    assert len(rows) == 2 * task.cases and kernels == 2 * result.kernels and failures == []


@settings(max_examples=3, derandomize=True)
@given(family=kernel_families(siblings=2, contract=CONTRACT_FMA))
def test_a_fused_family_runs_a_fused_primitive_in_the_fused_realization(family):
    assert all(c.contract == CONTRACT_FMA and c.primitive in FUSED_PRIMITIVES for c in family)


def _designed_triples(site: str, m: int = 2, n: int = 24, k: int = 240):
    """Every step's (x, w, acc) of a designed linear, in the accumulator type, and each
    step's result, followed with the reference's fma."""
    x = FusedOperandSpec((m, k), site, 5, "x", axis=1).make().astype(acc_dtype(site))
    w = FusedOperandSpec((n, k), site, 5, "w", axis=1).make().astype(acc_dtype(site))
    acc = np.zeros((m, n), dtype=acc_dtype(site))
    triples = []
    for step in range(k):
        a, b = np.broadcast_arrays(x[:, step, None], w[None, :, step])
        triples.append((a.ravel(), b.ravel(), acc.ravel()))
        acc = fma(a, b, acc)
    a, b, c = (np.concatenate(v) for v in zip(*triples))
    return a, b, c, fma(a, b, c)


def _is_tie(a: float, b: float, c: float, near, dtype) -> bool:
    """a·b + c exactly halfway between `near` (its fma) and a neighbour (exact arithmetic)."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0 or not np.isfinite(near):
        return False
    for other in (np.nextafter(near, dtype(-np.inf)), np.nextafter(near, dtype(np.inf))):
        if np.isfinite(other) and exact == (Fraction(float(near)) + Fraction(float(other))) / 2:
            return True
    return False


@pytest.mark.parametrize("site", SITE_TYPES)
def test_designed_fused_operands_meet_ties_cancellations_and_overflows_in_every_column(site):
    """strategies/fused.py: in one designed linear, the steps of every output meet exact
    ties, ties missed by less than rounding twice resolves, sums that cancel to zero,
    products past the largest finite value brought back, and subnormal results."""
    a, b, c, out = _designed_triples(site)
    dtype = acc_dtype(site).type
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    with np.errstate(all="ignore"):
        wide = a.astype(np.float64) * b.astype(np.float64)
        twice = (wide + c).astype(dtype) if dtype == np.float32 else a * b + c
        past = np.abs(wide) > np.finfo(dtype).max if dtype == np.float32 else np.isinf(a * b)
    ties = np.array([bool(f) and _is_tie(float(x), float(y), float(z), r, dtype)
                     for x, y, z, r, f in zip(a, b, c, out, finite)])
    steps, outputs = a.size, 2 * 24  # step-major: triple i is output i % outputs
    assert np.count_nonzero(finite) > 0.9 * steps
    assert np.count_nonzero(ties) > steps // 10
    assert set(np.flatnonzero(ties) % outputs) == set(range(outputs))  # every output meets ties
    if site != "bf16":  # bf16 products have 16 bits: their f32 sums are exact in f64
        assert np.count_nonzero(finite & (twice != out)) > steps // 200
    assert np.count_nonzero(finite & (out == 0) & (a != 0) & (b != 0)) > steps // 20
    assert np.count_nonzero(finite & past & np.isfinite(out)) > steps // 100
    assert np.count_nonzero((out != 0) & (np.abs(out) < np.finfo(dtype).tiny)) > steps // 100


def test_fused_families_of_linear_and_matmul_draw_designed_operands():
    """Half of the fused campaign's linear and matmul kernels run on designed operands."""
    from hypothesis import find

    for primitive, operand in (("linear", "w"), ("matmul", "b")):
        families = kernel_families(primitive, "f32", siblings=1, contract=CONTRACT_FMA)
        family = find(families, lambda f: isinstance(dict(f[0].specs)[operand], FusedOperandSpec),  # noqa: B023
                      settings=settings(database=None, max_examples=50))
        assert family[0].contract == CONTRACT_FMA


def test_designed_operands_of_shorter_kernels_are_prefixes_and_groups_share_a_design():
    """A sibling at a shorter run-time length, or a cache's longer capacity, holds the
    same design: the first rows, columns and steps do not depend on the sizes."""
    long = FusedOperandSpec((40, 70), "f32", 9, "w", axis=1).make()
    short = FusedOperandSpec((25, 33), "f32", 9, "w", axis=1).make()
    assert_bits_equal(long[:25, :33], short)
    a = FusedOperandSpec((4, 3, 20), "f64", 9, "x", axis=2, group=2).make()  # (I, M, K)
    a_t = FusedOperandSpec((4, 20, 3), "f64", 9, "x", axis=1, group=2).make()  # trans_a: (I, K, M)
    assert_bits_equal(a, a_t.transpose(0, 2, 1))
    first_rows = a[:, 0, :]  # each batch's first row is x_k as designed
    assert_bits_equal(first_rows[0], first_rows[1])
    assert not np.array_equal(first_rows[0], first_rows[2])


def test_a_fused_task_on_designed_operands_equals_the_reference():
    task = kernel_campaign.Task("matmul", "f64", seed=4, examples=2, kernels=2, siblings=2, contract=CONTRACT_FMA)
    result = kernel_campaign.run_task(task)
    assert result.failures == [] and result.cases == task.cases


def test_a_fused_task_counts_its_cases_in_the_fma_family_alone():
    """make verify's `fma:` line: the fused tasks' cases, outside the primitive x type
    table of the default realization."""
    task = kernel_campaign.Task("linear", "f32", seed=11, examples=1, kernels=2, siblings=2, contract=CONTRACT_FMA)
    result = kernel_campaign.run_task(task)
    assert result.failures == [] and result.cases == task.cases
    rows, _, _ = kernel_campaign.merge([result])
    assert [r["family"] for r in rows] == ["fma"] * task.cases
    assert "contract='fma'" in task.describe()


def test_integer_linear_tasks_build_for_this_cpu_and_mixed_tasks_portable():
    """qlinear_i's block sums take exactc_dot.h's vector path where the build's target has
    one: its own tasks build with -march=native, the mixed and other tasks without, so
    the campaign runs both the vector path and the plain loops."""
    assert kernel_campaign.task_build(kernel_campaign.Task("qlinear_i", "f32", seed=1)).march_native
    assert not kernel_campaign.task_build(kernel_campaign.Task(None, None, seed=1)).march_native
    assert not kernel_campaign.task_build(kernel_campaign.Task("qlinear_w", "f32", seed=1)).march_native
    task = kernel_campaign.Task("qlinear_i", "f32", seed=3, examples=1, kernels=2, siblings=2)
    result = kernel_campaign.run_task(task)
    assert result.failures == [] and set(result.counts) == {("qlinear_i", "f32", "equal")}


def test_a_failing_task_returns_the_report_of_the_bad_case(monkeypatch):
    from exactc.exporter import reference

    real = reference.run

    def off_by_one_ulp(primitive, site, inputs, attrs, contract):  # the reference moved: C disagrees
        out = real(primitive, site, inputs, attrs, contract)
        return {k: (v.view("uint32") ^ 1).view(v.dtype) if v.dtype.itemsize == 4 else v for k, v in out.items()}

    monkeypatch.setattr(reference, "run", off_by_one_ulp)
    task = dataclasses.replace(kernel_campaign.Task("add", "f32", seed=5, examples=1, kernels=1, siblings=2))
    result = kernel_campaign.run_task(task)
    assert len(result.failures) == 1
    report = result.failures[0]
    assert report.startswith(task.describe()) and "C != reference: add at f32" in report
    assert "reproduce: Case(" in report and "@reproduce_failure" in report
    assert "Failing test case" not in report  # the whole batch as a call: the report has the bad case


def test_cases_of_one_primitive_at_other_shapes_get_their_own_kernels():
    spec = lambda shape, seed: TensorSpec(shape, "f32", seed, "normal", 1.0)  # noqa: E731
    batch = [Case("add", "f32", (), (("a", spec(shape, 1)), ("b", spec(shape, 2)))) for shape in ((3,), (5,), (2, 4))]
    assert len({id(p.printed) for p in _prepare(batch)}) == 3
    assert_all_equal(run_cases(batch))


def test_a_failure_saved_in_the_database_is_replayed_first_by_a_task_of_another_seed(monkeypatch, tmp_path):
    from exactc.exporter import reference

    real = reference.run
    seen = []

    def wrong_for_long_inputs(primitive, site, inputs, attrs, contract):  # only some draws fail
        out = real(primitive, site, inputs, attrs, contract)
        wrong = max(a.size for a in inputs.values()) > 40
        seen.append((wrong, tuple(a.tobytes() for a in inputs.values())))
        return {k: v + 1 if wrong else v for k, v in out.items()}

    monkeypatch.setattr(reference, "run", wrong_for_long_inputs)
    first = kernel_campaign.Task("add", "f64", seed=1, examples=5, kernels=1, siblings=1, database=str(tmp_path))
    assert kernel_campaign.run_task(first).failures
    failed = next(inputs for wrong, inputs in seen if wrong)
    seen.clear()
    result = kernel_campaign.run_task(dataclasses.replace(first, seed=2, examples=1))
    assert result.failures and seen[0] == (True, failed)  # the saved example ran before any new draw


def test_a_task_that_does_not_come_back_is_a_failure_that_names_it(monkeypatch):
    """make verify's kernel phase hands the engine `lost_task`: a task whose worker died
    under it (or that raised on the worker) counts no case and fails the campaign, named."""
    from exactc.verify import campaign, engine

    why = "its dask worker died under it on each of its 2 runs"
    monkeypatch.setattr(engine, "run_all", lambda fn, tasks, jobs, progress, lost: [lost(t, why) for t in tasks])
    rows, seconds, failures, line = campaign.kernel_phase(500, jobs=1, seed=3)
    tasks = kernel_campaign.plan_tasks(500, seed=3)
    assert rows == [] and len(failures) == len(tasks)
    assert failures[0] == f"{tasks[0].describe()}\nthe task did not come back: {why}"


@pytest.mark.parametrize("how", ["signal", "exit 0", "sleeps"])
def test_a_batch_child_that_dies_or_hangs_is_crashed_or_timed_out_never_ok(how):
    """The forked child that runs a batch's kernels (verify/kernels.py), killed by SIGKILL
    (the OOM killer), ending with exit 0 before it sent its results, or hanging: the batch
    is crashed (naming how the child ended) or timed out, never a batch that ran."""
    import os
    import signal
    import time
    from types import SimpleNamespace

    from exactc.verify.kernels import run_in_child

    ends = {"signal": lambda n: os.kill(os.getpid(), signal.SIGKILL), "exit 0": lambda n: os._exit(0),
            "sleeps": lambda n: time.sleep(60)}
    # the child's first step: the OpenMP team's size, set through the library it was handed
    library = SimpleNamespace(options=SimpleNamespace(openmp=True), lib=SimpleNamespace(omp_set_num_threads=ends[how]))
    said = {"signal": ("crashed", "the child process died (killed by SIGKILL) before it sent its results"),
            "exit 0": ("crashed", "the child process died (exit 0) before it sent its results"),
            "sleeps": ("timed out", "the batch ran past 2 s")}
    assert run_in_child(library, [], timeout=2, threads=1) == said[how]


def test_a_backward_task_counts_in_the_grad_line_of_make_verify():
    """make verify's `grad: <n> checked, <m> mismatches`: the backward primitives' cases,
    beside their rows of the primitive x type table; at the default size at least 2000."""
    task = kernel_campaign.Task("linear_bar_w", "f32", seed=7, examples=1, kernels=2, siblings=2)
    result = kernel_campaign.run_task(task)
    assert result.failures == [] and result.cases == task.cases
    rows, _, _ = kernel_campaign.merge([result])
    assert sorted(r["family"] for r in rows) == ["grad"] * task.cases + ["kernels"] * task.cases
    text, cases, mismatches = campaign.summary(rows, 1.0)
    assert f"grad: {task.cases} checked, 0 mismatches" in text.splitlines()
    assert (cases, mismatches) == (task.cases, 0)
    planned = kernel_campaign.plan_tasks(campaign.DEFAULT_CASES)
    grad = sum(t.cases for t in planned if t.primitive in BACKWARD_PRIMITIVES and t.contract == CONTRACT_OFF)
    assert grad >= campaign.MIN_KERNEL_FAMILY_CHECKS["grad"] == 2000
    assert {t.site for t in planned if t.primitive in BACKWARD_PRIMITIVES} == {"f64", "f32"}


def test_k_quant_cases_count_in_their_own_line_of_make_verify():
    """make verify's `k-quants: <n> checked, <m> mismatches`: the quantized linears' cases
    whose weights are q4_k, q5_k or q6_k, beside their rows of the table and the quant line."""
    task = kernel_campaign.Task("qlinear_i", "f32", seed=3, examples=2, kernels=3, siblings=2)
    result = kernel_campaign.run_task(task)
    assert result.failures == [] and result.cases == task.cases
    k_quants = sum(result.k_quants.values())
    assert 0 < k_quants < task.cases
    rows, _, _ = kernel_campaign.merge([result])
    text, _, _ = campaign.summary(rows, 1.0)
    assert f"k-quants: {k_quants} checked, 0 mismatches" in text.splitlines()
