"""`exactc plan --tune` (exactc/verify/tune.py): the candidates of a program's nests timed on this
machine, the fastest kept in the tune table, and `--plan auto` then choosing them for the
build they were measured for, and only for it; a tuned program keeps the reference's bits."""

from __future__ import annotations

import json
import platform
import subprocess

import numpy as np
import pytest

from exactc.exporter.kernels import tuned

from exactc.verify import tune
from exactc.exporter import export
from exactc.exporter.kernels import autoplan
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.autoplan import load_plan_option
from exactc.runtime import STRICT_FLAGS
from exactc.verify.build import BuildOptions
from test_programs import build, conforms, exactc

SIZES = {"vocab": 40, "positions": 20, "dim": 32, "heads": 2, "layers": 1, "mlp": 40, "tokens": 20}
SIXTEEN_ROWS = Layout(order=("n", "m"), lanes=(("m", 16), ("n", 16)), packs=("w",))


@pytest.fixture
def table(tmp_path, monkeypatch):
    """A tune table of its own for the test (conftest turns the user's off)."""
    path = tmp_path / "tune.json"
    monkeypatch.setenv(tuned.TABLE_ENV, str(path))
    return path


def _linear():
    kernel = lower("linear", "f32", {"x": (20, 32), "w": (40, 32), "b": (40,)}, {"has_b": True})
    return kernel, kernel.nests[0]


def _measured(kernel, nest, seconds: dict) -> tune.Measured:
    layouts = tune.candidates(kernel, nest)
    m = tune.Measured(autoplan.nest_signature(kernel, nest), kernel, nest.name, layouts)
    m.seconds = {tune.label(layout): seconds.get(tune.label(layout), 1.0) for layout in layouts}
    return m


def test_the_candidates_are_legal_and_the_fastest_is_kept(table):
    kernel, nest = _linear()
    layouts = tune.candidates(kernel, nest)
    assert Layout() in layouts and SIXTEEN_ROWS in layouts and len(layouts) == len(set(layouts))
    m = _measured(kernel, nest, {tune.label(SIXTEEN_ROWS): 0.25, "plain": 0.5})
    assert m.winner == SIXTEEN_ROWS
    tuned.write_table(table, "build A", [m])
    entry = json.loads(table.read_text())["builds"]["build A"]["nests"][m.signature]
    assert entry["layout"] == SIXTEEN_ROWS.to_json() and entry["seconds"]["plain"] == 0.5
    report = tune.report([m])
    assert report.splitlines()[1].endswith("<- kept") and "(auto without the table)" in report


def test_auto_uses_the_table_of_this_build_only(table, monkeypatch):
    kernel, nest = _linear()
    m = _measured(kernel, nest, {tune.label(SIXTEEN_ROWS): 0.25})
    tuned.write_table(table, "another compiler | -O2 | another CPU", [m])
    assert tuned.tuned_layouts("gcc") == {}, "a layout measured for another build was taken"
    assert dict(autoplan.auto_kernel_plan(kernel).nests[0][1].layout.lanes) == {"m": 8, "n": 16}
    tuned.write_table(table, tuned.build_identity("gcc"), [m])
    assert tuned.tuned_layouts("gcc") == {m.signature: SIXTEEN_ROWS}
    monkeypatch.setenv("CC", "gcc")
    plan = load_plan_option("auto")
    assert plan.for_kernel(kernel, "k")[0].nests[0][1].layout == SIXTEEN_ROWS
    # the split still follows the chosen lanes: pieces of whole chunks of 16 columns
    assert all(lo % 16 == 0 for lo, _ in plan.for_kernel(kernel, "k")[0].nests[0][1].split.pieces)
    monkeypatch.setenv(tuned.TABLE_ENV, "")
    assert tuned.tuned_layouts("gcc") == {}


def test_a_tuned_layout_the_nest_cannot_take_is_passed_over(table):
    kernel, nest = _linear()
    illegal = Layout(lanes=(("k", 8),))  # k is a reduction, not a parallel axis
    plan = autoplan.auto_kernel_plan(kernel, tuned={autoplan.nest_signature(kernel, nest): illegal})
    assert dict(plan.nests[0][1].layout.lanes) == {"m": 8, "n": 16}


def test_a_tuned_program_keeps_the_reference_bytes_and_its_own_cache_key(table, tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "gcc")
    spec = export.ExportSpec("gpt", "forward", "f32", 3, SIZES, plan="auto")
    untuned = spec.digest()
    program = export.trace("gpt", "forward", SIZES, None)
    chosen = []
    for kernel in tune.program_kernels(program, "f32"):
        for nest in kernel.nests:
            if nest.name == "linear":
                chosen.append(_measured(kernel, nest, {tune.label(SIXTEEN_ROWS): 0.25}))
    assert chosen, "the program has no linear nest"
    tuned.write_table(table, tuned.build_identity("gcc"), chosen)
    assert spec.digest() != untuned, "the export cache would serve the program exported before the table"
    prepared = spec.prepare()
    root = export.write(prepared, tmp_path / "program")
    texts = [p.read_text() for p in (root / "kernels").glob("linear*.c")]
    assert texts and all("lanes m:16, n:16; packs w" in text for text in texts)
    built = build(root, cc="gcc")
    for threads in (1, 2):
        conforms(built, prepared, threads)


@pytest.mark.parametrize("site", ["f32", "bf16"])
def test_every_timed_candidate_computes_every_output(site):
    """Timing a candidate runs the whole kernel: each launch over its printed range (a
    laned nest's outermost loop is not the plain nest's), every output element written."""
    kernel = lower("linear", site, {"x": (20, 32), "w": (40, 32)}, {"has_b": False})
    options = BuildOptions(cc="gcc", opt="-O2", march_native=True, warnings=False)
    for layout in tune.candidates(kernel, kernel.nests[0]):
        timed = tune.Timed(kernel, "linear", layout, options, 20)
        y = timed.arrays["y"]
        y[...] = 0x7FC0 if site == "bf16" else np.nan
        timed.run()
        written = y != 0x7FC0 if site == "bf16" else ~np.isnan(y)
        assert written.all(), f"{tune.label(layout)}: {int((~written).sum())} of {y.size} outputs not computed"


def test_tune_command_writes_the_table_and_auto_follows_it(table, tmp_path):
    done = exactc("plan", "--tune", "gpt", "--entry", "forward", "--dtype", "f32", "--cc", "gcc", "--rounds", "1",
                  *[a for k, v in SIZES.items() for a in ("--set", f"{k}={v}")])
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("tune: ") and str(table) in last, done.stdout
    layouts = tuned.tuned_layouts("gcc")
    assert layouts and all(sig.split("|")[0] in ("linear", "matmul", "gelu_tanh", "softmax") for sig in layouts)


@pytest.mark.parametrize("args,message", [
    (["plan", "--tune", "gpt", "--dtype", "f32"], "--entry"),
    (["plan", "--tune", "gpt", "--entry", "forward", "--dtype", "f32", "--rounds", "0"], "--rounds 0"),
    (["plan", "--tune", "nosuch", "--entry", "forward", "--dtype", "f32"], "nosuch"),
])
def test_tune_refusals_are_one_line_and_exit_2(table, args, message):
    done = exactc(*args)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_damaged_table_is_refused_on_one_line(table, tmp_path):
    table.write_text('{"version": 1, "builds": {"b": {"nests": []}}}')
    done = exactc("export", "gpt", "--entry", "forward", "--dtype", "f32", "--plan", "auto", "-o", str(tmp_path / "p"))
    assert done.returncode == 2 and "tune.json" in done.stderr and len(done.stderr.strip().splitlines()) == 1, \
        done.stderr
    table.write_text("{not json")
    done = exactc("export", "gpt", "--entry", "forward", "--dtype", "f32", "--plan", "auto", "-o", str(tmp_path / "p"))
    assert done.returncode == 2 and "exactc plan --tune" in done.stderr, done.stderr


def test_auto_without_the_table_names_the_layout_the_build_compiles():
    """On a build that compiles narrow or wide layouts (EXACTC_NARROW_LANES,
    EXACTC_WIDE_LANES, exactc_rt.h) the report's 'auto without the table' is that one;
    what a build sets is the header's answer under its flags: narrow for clang on x86
    without AVX-512, wide for gcc with it."""
    kernel, nest = _linear()
    plain, narrow, wide = (_measured(kernel, nest, {}) for _ in range(3))
    narrow.variant, wide.variant = "narrow", "wide"
    assert dict(plain.default.lanes) == {"m": 8, "n": 16} and dict(narrow.default.lanes) == {"m": 4, "n": 16}
    assert dict(wide.default.lanes) == {"m": 16, "n": 16}
    assert "lanes m:4, n:16; packs w (auto without the table)" in tune.report([narrow])
    assert "lanes m:16, n:16; packs w (auto without the table)" in tune.report([wide])
    x86 = platform.machine() in ("x86_64", "i686")
    for cc in ("gcc", "clang"):
        flags = tune.build_flags(cc)
        avx512 = "__AVX512F__" in subprocess.run([cc, *STRICT_FLAGS, *flags, "-dM", "-E", "-x", "c", "/dev/null"],
                                                 capture_output=True, text=True).stdout
        expected = ("narrow" if x86 and not avx512 else None) if cc == "clang" else ("wide" if avx512 else None)
        assert tune.compiled_variant(cc) == expected, cc
