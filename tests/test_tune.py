"""`exactc plan --tune` (exactc/verify/tune.py): the candidates of a program's nests timed on this
machine, the fastest kept in the tune table, and `--plan auto` then choosing them for the
build they were measured for, and only for it; a tuned program keeps the reference's bits."""

from __future__ import annotations

import io
import itertools
import json
import platform
import re
import subprocess

import numpy as np
import pytest

from exactc.exporter import export
from exactc.exporter.kernels import tuned

from exactc.verify import tune
from exactc.exporter import dims, export
from exactc.exporter.kernels import autoplan
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.autoplan import load_plan_option
from exactc.runtime import STRICT_FLAGS
from exactc.verify.build import BuildOptions

from test_llama2c import tiny_llama2c
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


# ---- exactc plan --tune's table, candidates and timing


def _tune_buffer(name, type_, shape, role="input"):
    from types import SimpleNamespace
    return SimpleNamespace(name=name, type=type_, shape=shape, role=role)


def test_tune_operands_are_drawn_in_their_documented_ranges():
    from exactc.verify import tune
    top = dims.length(64)
    draw = lambda name, type_, shape=(top, 512): tune._operand(_tune_buffer(name, type_, shape), 50,
                                                               np.random.default_rng(3))
    i8, u8, i32 = draw("w", "i8"), draw("w", "u8"), draw("ids", "i32")
    assert (i8.dtype, u8.dtype, i32.dtype) == (np.int8, np.uint8, np.int32)
    assert i8.shape == u8.shape == i32.shape == (50, 512)  # the extent at the run-time length
    assert (int(i8.min()), int(i8.max()), int(u8.min()), int(u8.max())) == (-128, 127, 0, 255)
    assert (u8.view(np.int8) == i8).all()  # one stream of bytes, viewed as the type
    assert set(np.unique(i32)) == {0, 1}
    x, scale = draw("x", "f32"), draw("wd", "f32")
    assert x.dtype == np.float32 and -2.0 <= x.min() < -1.99 and 1.99 < x.max() < 2.0
    assert 1e-3 <= scale.min() < 1e-3 + 1e-4 and 1e-3 + 1.99 / 64 < scale.max() <= 1e-3 + 2 / 64
    assert (draw("X", "f32") == x).all() and (draw("xD", "f32") == x).all()  # only a trailing d is a scale
    bf16 = draw("x", "bf16")
    assert bf16.dtype == np.uint16 and (bf16 == (x.view(np.uint32) >> 16)).all()


def test_tune_cpu_name_reads_the_first_processor_and_falls_back(tmp_path, monkeypatch):
    from exactc.exporter.kernels import tuned
    info = tmp_path / "cpuinfo"
    info.write_bytes(b"processor\t: 0\nvendor\t: \xff\nmodel name\t: Some CPU  \ncpu family\t: 25\nmodel\t\t: 17\n"
                     b"flags: x model: 3\n\nprocessor\t: 1\nmodel name\t: Other\ncpu family\t: 9\nmodel\t: 8\n")
    real = tuned.Path
    monkeypatch.setattr(tuned, "Path", lambda p: info if p == "/proc/cpuinfo" else real(p))
    assert tuned.cpu_name() == "Some CPU (family 25, model 17)"
    info.write_text("model name: Bare\n")
    assert tuned.cpu_name() == "Bare (family ?, model ?)"
    info.write_text("cpu family: 25\n")
    monkeypatch.setattr(tuned.platform, "processor", lambda: "")
    monkeypatch.setattr(tuned.platform, "machine", lambda: "m68k")
    assert tuned.cpu_name() == "m68k"
    monkeypatch.setattr(tuned.platform, "processor", lambda: "proc")
    assert tuned.cpu_name() == "proc"
    monkeypatch.setattr(tuned.platform, "processor", lambda: "")
    monkeypatch.setattr(tuned.platform, "machine", lambda: "")
    assert tuned.cpu_name() == "unknown"
    info.unlink()  # no /proc: the platform's answer
    assert tuned.cpu_name() == "unknown"


def test_tune_table_path_from_the_environment(tmp_path, monkeypatch):
    from exactc.exporter.kernels import tuned
    from exactc.runtime.toolchain import user_cache_dir
    monkeypatch.setenv(tuned.TABLE_ENV, str(tmp_path / "t.json"))
    assert tuned.table_path() == tmp_path / "t.json"
    monkeypatch.setenv(tuned.TABLE_ENV, "")
    assert tuned.table_path() is None
    monkeypatch.delenv(tuned.TABLE_ENV)
    monkeypatch.setenv("EXACTC_CACHE", str(tmp_path / "cache"))
    assert tuned.table_path() == tmp_path / "cache" / "tune.json"
    monkeypatch.delenv("EXACTC_CACHE")
    assert tuned.table_path() == user_cache_dir() / "tune.json"


def test_tune_build_identity_names_the_executable_version_flags_and_cpu(monkeypatch, tmp_path):
    import exactc.runtime.toolchain as build
    from exactc.exporter.kernels import tuned
    monkeypatch.setattr(tuned, "cpu_name", lambda: "CPU")
    monkeypatch.setattr(tuned, "build_flags", lambda cc, march="native": ("-O2", "-march=native"))
    gcc = tuned.shutil.which("gcc")
    for version, shown in [("gcc (Debian 12.2.0-14) 12.2.0", "(Debian 12.2.0-14) 12.2.0"),
                           ("gcc", ""), ("cc gcc x", "cc gcc x"), ("gcc 1 2", "1 2")]:
        monkeypatch.setattr(build, "compiler_version", lambda cc, v=version: v)
        assert tuned.build_identity("gcc") == f"{tuned.os.path.realpath(gcc)} {shown} | -O2 -march=native | CPU"
    monkeypatch.setattr(build, "compiler_version", lambda cc: "cc 1")
    assert tuned.build_identity(str(tmp_path / "cc")) == f"{tmp_path / 'cc'} 1 | -O2 -march=native | CPU"


def test_tune_tuned_layouts_take_the_build_cc_names(tmp_path, monkeypatch):
    from exactc.exporter.kernels import tuned
    kernel, nest = _tune_linear()
    seen = []
    monkeypatch.setattr(tuned, "build_identity", lambda cc: seen.append(cc) or f"build {cc}")
    monkeypatch.setenv(tuned.TABLE_ENV, str(tmp_path / "t.json"))
    m = _tune_measured(kernel, nest, 1)
    tuned.write_table(tmp_path / "t.json", "build mycc", [m])
    monkeypatch.setenv("CC", "mycc")
    assert tuned.tuned_layouts() == {m.signature: m.winner}
    monkeypatch.delenv("CC")
    assert tuned.tuned_layouts() == {} and tuned.tuned_layouts("mycc") == {m.signature: m.winner}
    assert seen == ["mycc", "cc", "mycc"]
    # --plan auto of a command that builds with --cc mycc (generate, run, embed): mycc's layouts
    spec = export.ExportSpec("llama", "decode", "f32", plan="auto", cc="mycc")
    assert spec.loaded_plan().tuned == {m.signature: m.winner}
    assert export.ExportSpec("llama", "decode", "f32", plan="auto").loaded_plan().tuned == {}


def _tune_linear():
    from test_tune import _linear  # tests/test_tune.py's linear kernel and its nest
    return _linear()


def _tune_measured(kernel, nest, fastest: int):
    from exactc.verify import tune
    from exactc.exporter.kernels import autoplan
    layouts = tune.candidates(kernel, nest)
    m = tune.Measured(autoplan.nest_signature(kernel, nest), kernel, nest.name, layouts)
    m.seconds = {tune.label(layout): (0.5e-6 if i == fastest else 2e-6 + i * 1.234567891234e-6)
                 for i, layout in enumerate(layouts)}
    return m


def test_tune_table_written_whole_and_merged(tmp_path, monkeypatch):
    from exactc.exporter.kernels import tuned
    from exactc.verify import tune
    kernel, nest = _tune_linear()
    m = _tune_measured(kernel, nest, 2)
    path = tmp_path / "deep" / "er" / "t.json"  # folders made
    monkeypatch.setattr(tune.time, "gmtime", lambda: tune.time.struct_time((2026, 12, 3, 8, 9, 10, 3, 337, 0)))
    tuned.write_table(path, "build B", [m])
    text = path.read_text()
    table = json.loads(text)
    assert text == json.dumps(table, indent=1, sort_keys=True) + "\n"
    entry = table["builds"]["build B"]["nests"][m.signature]
    assert entry["measured"] == "2026-12-03 08:09:10 UTC" and entry["layout"] == m.winner.to_json()
    assert entry["seconds"] == {k: round(s, 9) for k, s in m.seconds.items()}
    assert entry["seconds"][tune.label(m.layouts[3])] == 5.704e-06  # 5.7037037e-06 to the nanosecond
    tuned.write_table(path, "build C", [m])  # merged: the first build stays
    assert set(json.loads(path.read_text())["builds"]) == {"build B", "build C"}


def test_tune_damaged_tables_are_refused_whole(tmp_path):
    from exactc.exporter.kernels import tuned
    path = tmp_path / "t.json"
    again = "; remove it or run `exactc plan --tune` again"
    for text in ['[]', '{"version": 2, "builds": {}}', '{"version": 1, "builds": []}', '{"version": 1}']:
        path.write_text(text)
        with pytest.raises(tuned.TuneError) as caught:
            tuned.read_table(path)
        assert str(caught.value) == f"{path}: not an exactc tune table of version 1" + again, text
    for text in ['{"version": 1, "builds": {"b": []}}', '{"version": 1, "builds": {"b": {"nests": 1}}}']:
        path.write_text(text)
        with pytest.raises(tuned.TuneError) as caught:
            tuned.read_table(path)
        assert str(caught.value) == f"{path}: build 'b' has no nests object"
    path.write_text("{")
    with pytest.raises(tuned.TuneError) as caught:
        tuned.read_table(path)
    assert str(caught.value).startswith(f"{path}: ") and str(caught.value).endswith(again)
    table = {"version": 1, "builds": {"b": {"nests": {"linear|x": {"layout": {"lanes": "no"}}}}}}
    with pytest.raises(tuned.TuneError) as caught:
        tuned.layouts_of(table, "b", path)
    assert str(caught.value).startswith(f"{path}: the entry 'linear|x' has no valid layout (")
    assert tuned.layouts_of(table, "other", path) == {}


def test_tune_candidates_of_each_kind_of_nest():
    from exactc.verify import tune
    from exactc.exporter.kernels.lower import lower
    shapes = ["lanes m:8, n:16; packs {p}", "lanes n:16; packs {p}", "lanes n:16", "lanes m:4, n:16; packs {p}",
              "lanes m:6, n:16; packs {p}", "lanes m:12, n:16; packs {p}", "lanes m:16, n:16; packs {p}",
              "lanes m:8, n:8; packs {p}", "lanes m:16, n:8; packs {p}"]
    kernel, nest = _tune_linear()
    assert [tune.label(lay) for lay in tune.candidates(kernel, nest)] == \
        ["plain", *("order n, m; " + s.format(p="w") for s in shapes)]
    mm = lower("matmul", "f32", {"a": (2, 32, 32), "b": (2, 32, 32)}, {})
    assert [tune.label(lay) for lay in tune.candidates(mm, mm.nests[0])] == \
        ["plain", *("order i, n, m; " + s.format(p="b") for s in shapes)]
    gelu = lower("gelu_tanh", "f32", {"x": (64, 64)}, {})
    labels = [tune.label(lay) for lay in tune.candidates(gelu, gelu.nests[0])]
    assert labels[0] == "plain" and all(f"lanes i:{w}" in labels for w in (8, 16, 64, 256)), labels
    assert len(labels) == len(set(labels))
    silu = lower("silu", "f32", {"x": (4, 8)}, {})  # 32 elements: only the lanes that fill
    assert [tune.label(lay) for lay in tune.candidates(silu, silu.nests[0])] == ["plain", "lanes i:16", "lanes i:8"]
    tiny = lower("silu", "f32", {"x": (1, 4)}, {})
    assert [tune.label(lay) for lay in tune.candidates(tiny, tiny.nests[0])] == ["plain"]
    add = lower("add", "f32", {"a": (4, 8), "b": (4, 8)}, {})  # no transcendental: no lanes to try
    assert [tune.label(lay) for lay in tune.candidates(add, add.nests[0])] == ["plain"]


def test_tune_report_lines_whole():
    from exactc.verify import tune
    kernel, nest = _tune_linear()
    m = _tune_measured(kernel, nest, 4)  # lanes m:4, n:16 kept; auto's own is m:8, n:16
    lines = tune.report([m]).splitlines()
    assert lines[0] == "linear at f32 (x 20x32, w 40x32, b 40), nest linear:"
    assert lines[1] == "          0.5 us  x 1.00  order n, m; lanes m:4, n:16; packs w <- kept"
    assert lines[2] == "          2.0 us  x 4.00  plain"
    assert lines[3] == "          3.2 us  x 6.47  order n, m; lanes m:8, n:16; packs w (auto without the table)"
    assert len(lines) == 1 + len(m.layouts)


def test_tune_timed_compiles_its_layout_with_its_options(monkeypatch):
    import exactc.exporter.printer.kernels as printer_kernels
    import exactc.verify.build as build
    from exactc.verify import tune
    from exactc.verify.build import BuildOptions
    kernel, nest = _tune_linear()
    calls, options_seen = [], []
    real_print, real_load = printer_kernels.print_kernel, build.load_library
    monkeypatch.setattr(printer_kernels, "print_kernel", lambda *a: calls.append(a) or real_print(*a))
    monkeypatch.setattr(build, "load_library", lambda s, c, o=None: options_seen.append(o) or real_load(s, c, o))
    options = BuildOptions(cc="gcc", opt="-O1", warnings=False)
    laned = tune.candidates(kernel, nest)[1]  # lanes m:8, n:16; packs w
    first = tune.Timed(kernel, "linear", Layout(), options, 20)
    second = tune.Timed(kernel, "linear", laned, options, 20)
    assert len(calls) == 2 and calls[0][1:] == ("tune",)
    name, plan, ahead = calls[1][1:]
    assert (name, dict(plan.nests)["linear"].layout, ahead) == ("tune", laned, frozenset({"w"}))
    assert options_seen == [options, options]
    assert all((first.arrays[k] == second.arrays[k]).all() for k in first.arrays)  # drawn from one seed
    assert [hi for _, _, hi in first.calls] == [20]


def test_tune_timed_at_a_run_time_length():
    """A kernel whose rows follow T is timed at the length asked: operands and ranges."""
    from exactc.verify import tune
    from exactc.exporter.kernels.lower import lower
    from exactc.verify.build import BuildOptions
    kernel = lower("gelu_tanh", "f32", {"x": (dims.length(32), 16)}, {})
    timed = tune.Timed(kernel, "gelu_tanh", Layout(), BuildOptions(cc="gcc", opt="-O1", warnings=False), 7)
    assert timed.arrays["x"].shape == (7, 16) and timed.calls[0][1][-1] == 7  # the length passed last
    assert [hi for _, _, hi in timed.calls] == [dims.at(kernel.launches[0].extent, 7)]


_TUNE_TINY = {"vocab": 4, "dim": 4, "heads": 1, "kv_heads": 1, "layers": 1, "mlp": 4, "tokens": 1}


def _tune_program(**changes):
    from exactc.exporter import export
    return export.trace("llama", "forward", {**_TUNE_TINY, **changes}, None)


def test_tune_times_every_candidate_in_rounds_keeping_the_best(monkeypatch):
    from exactc.verify import tune
    runs, bests = [], {}
    monkeypatch.setattr(tune.Timed, "run", lambda self: runs.append(id(self)))
    script = iter([3.0, 1.0, 2.0] * 100)  # per candidate: rounds 1, 2, 3 of best()

    def best(self):
        bests.setdefault(id(self), []).append(next(script) * (1 + len(bests)))
        return bests[id(self)][-1]
    monkeypatch.setattr(tune.Timed, "best", best)
    notes = []
    measured = tune.tune(_tune_program(), "f32", "gcc", rounds=3, progress=notes.append)
    total = sum(len(m.layouts) for m in measured)
    assert [m.nest for m in measured] == ["matmul", "silu"] and total == 15
    assert notes[0] == "compiled 1/15 candidates (matmul matmul: plain)"
    assert notes[total - 1].startswith("compiled 15/15 candidates (silu silu: lanes i:")
    assert notes[total:] == ["timed round 1/3", "timed round 2/3", "timed round 3/3"]
    assert len(runs) == total == len(set(runs))  # each warmed once, in the first round only
    assert sorted(min(v) for v in bests.values()) == sorted(s for m in measured for s in m.seconds.values())
    assert all(len(v) == 3 for v in bests.values())
    assert tune.tune(_tune_program(), "f32", "gcc", rounds=1, length=1)  # a length asked for
    assert all(m.variant == tune.compiled_variant("gcc") for m in measured)


def test_tune_nothing_to_tune_when_no_nest_has_a_choice(monkeypatch):
    from exactc.verify import tune
    monkeypatch.setattr(tune, "candidates", lambda kernel, nest: [Layout()])
    assert tune.tune(_tune_program(), "f32", "gcc", rounds=1) == []


def _tune_cli(*args):
    from exactc import cli
    return cli.main(["plan", "--tune", "llama", "--entry", "forward", "--dtype", "f32", "--cc", "gcc", *args,
                     *[a for k, v in _TUNE_TINY.items() for a in ("--set", f"{k}={v}")]])


def test_tune_command_in_process_reports_and_writes_the_table(tmp_path, monkeypatch, capsys):
    from exactc.exporter.kernels import tuned
    from exactc.verify import tune
    path = tmp_path / "sub" / "t.json"
    assert _tune_cli("--rounds", "1", "--table", str(path)) == 0
    out = capsys.readouterr().out.splitlines()
    identity = tuned.build_identity("gcc")
    last = re.fullmatch(r"tune: 2 nests, 15 candidates in [0-9.]+ s; ([0-9]) differ from auto's own choice; "
                        r"table (.*) \(build: (.*)\)", out[-1])
    assert last and last.group(2) == str(path) and last.group(3) == identity, out[-1]
    nests = json.loads(path.read_text())["builds"][identity]["nests"]
    assert len(nests) == 2 and out[0] == "matmul at f32 (a 1xTx4, b 1xTx4), nest matmul:"
    kept = [line for line in out if "<- kept" in line]
    assert len(kept) == 2
    differ = sum("(auto without the table)" not in line for line in kept)
    assert int(last.group(1)) == differ
    monkeypatch.setenv(tuned.TABLE_ENV, str(tmp_path / "env.json"))  # no --table: the table_path()
    assert _tune_cli("--rounds", "1") == 0 and (tmp_path / "env.json").is_file()
    capsys.readouterr()
    monkeypatch.setattr(tune, "candidates", lambda kernel, nest: [Layout()])
    assert _tune_cli("--rounds", "1", "--table", str(tmp_path / "none.json")) == 0
    assert capsys.readouterr().out == "llama.forward at f32: no nest has a choice of layout; nothing to tune\n"
    assert not (tmp_path / "none.json").exists()


def test_tune_command_refusals_whole(tmp_path, monkeypatch, capsys):
    from exactc.exporter.kernels import tuned
    assert _tune_cli("--rounds", "0", "--table", str(tmp_path / "t.json")) == 2
    assert capsys.readouterr().err == "exactc plan: error: --rounds 0: give at least 1\n"
    monkeypatch.setenv(tuned.TABLE_ENV, "")
    assert _tune_cli("--rounds", "1") == 2
    assert capsys.readouterr().err == ("exactc plan: error: EXACTC_TUNED is empty (the table is off): give "
                                       "--table FILE to write one\n")


def test_tune_progress_note_only_on_a_terminal(monkeypatch):
    from exactc.verify import tune

    class Terminal(io.StringIO):
        tty = True

        def isatty(self):
            return self.tty
    err = Terminal()
    monkeypatch.setattr(tune.sys, "stderr", err)
    tune._note("compiled 1/2")
    assert err.getvalue() == "\r\033[Kcompiled 1/2"
    err.tty = False
    tune._note("more")
    assert err.getvalue() == "\r\033[Kcompiled 1/2"


def test_tune_build_identity_strips_only_the_name_and_one_space(monkeypatch):
    import exactc.runtime.toolchain as build
    from exactc.exporter.kernels import tuned
    monkeypatch.setattr(tuned, "cpu_name", lambda: "CPU")
    monkeypatch.setattr(tuned, "build_flags", lambda cc, march="native": ("-O2",))
    exe = tuned.os.path.realpath(tuned.shutil.which("gcc"))
    for version, shown in [("gcc\t1", "gcc\t1"), ("gcc  1", " 1")]:  # a tab is no separator; one space only
        monkeypatch.setattr(build, "compiler_version", lambda cc, v=version: v)
        assert tuned.build_identity("gcc") == f"{exe} {shown} | -O2 | CPU", version


def test_tune_compiled_variant_reads_the_header_s_answer(monkeypatch):
    from types import SimpleNamespace

    from exactc.exporter.kernels import tuned

    from exactc.verify import tune
    answers = iter([SimpleNamespace(returncode=0, stdout="x\nexactc_lanes = 1 0;\n", stderr=""),
                    SimpleNamespace(returncode=0, stdout="exactc_lanes = 0 1;", stderr=""),
                    SimpleNamespace(returncode=0, stdout="exactc_lanes = 0 0;", stderr=""),
                    SimpleNamespace(returncode=0, stdout="nothing", stderr=""),
                    SimpleNamespace(returncode=1, stdout="exactc_lanes = 0 0;", stderr=" " + "e" * 400 + " ")])
    monkeypatch.setattr(tune, "build_flags", lambda cc, march="native": ("-O2",))  # no compiler run of its own
    monkeypatch.setattr(tune.subprocess, "run", lambda *a, **k: next(answers))
    assert [tune.compiled_variant("mycc") for _ in range(3)] == ["narrow", "wide", None]
    with pytest.raises(tuned.TuneError) as caught:
        tune.compiled_variant("mycc")
    assert str(caught.value) == "mycc could not preprocess exactc_rt.h: "
    with pytest.raises(tuned.TuneError) as caught:
        tune.compiled_variant("mycc")
    assert str(caught.value) == "mycc could not preprocess exactc_rt.h: " + "e" * 300


def test_tune_cpu_name_keeps_a_colon_in_the_value(tmp_path, monkeypatch):
    from exactc.exporter.kernels import tuned
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Vendor: Model 9\ncpu family\t: 6\nmodel\t: 1\n")
    real = tuned.Path
    monkeypatch.setattr(tuned, "Path", lambda p: info if p == "/proc/cpuinfo" else real(p))
    assert tuned.cpu_name() == "Vendor: Model 9 (family 6, model 1)"


def test_tune_table_errors_name_the_table_file(tmp_path, monkeypatch):
    from exactc.exporter.kernels import tuned
    path = tmp_path / "t.json"
    path.write_text('{"version": 1, "builds": {"build cc": {"nests": {"linear|x": {"layout": {"lanes": "no"}}}}}}')
    monkeypatch.setenv(tuned.TABLE_ENV, str(path))
    monkeypatch.setattr(tuned, "build_identity", lambda cc: f"build {cc}")
    with pytest.raises(tuned.TuneError) as caught:
        tuned.tuned_layouts("cc")
    assert str(caught.value) == (f"{path}: the entry 'linear|x' has no valid layout (plan: nest linear|x, field "
                                 "layout.lanes: give an object axis -> lane width, not 'no')")


def test_tune_report_in_microseconds_to_a_tenth():
    from exactc.verify import tune
    kernel, nest = _tune_linear()
    m = _tune_measured(kernel, nest, 0)
    m.seconds = {k: 0.125 for k in m.seconds}
    assert tune.report([m]).splitlines()[1].startswith("     125000.0 us  x 1.00  plain")


def test_tune_times_with_the_default_build_each_nest_at_the_length(monkeypatch):
    from exactc.verify import tune
    from exactc.verify.build import BuildOptions
    made, events = [], []

    class Recorder:
        def __init__(self, kernel, nest, layout, options, length):
            made.append((kernel.primitive, nest, options, length))

        def run(self):
            events.append(("run", id(self)))

        def best(self):
            events.append(("best", id(self)))
            return 1.0
    monkeypatch.setattr(tune, "Timed", Recorder)
    program = _tune_program(dim=16, mlp=16, vocab=16, tokens=3)
    tune.tune(program, "f32", "clang", rounds=1)  # not the default compiler
    assert made and all(opt == BuildOptions(cc="clang", opt="-O2", march_native=True, warnings=False)
                        for _, _, opt, _ in made)
    assert {(p, n) for p, n, _, _ in made} == {("matmul", "matmul"), ("silu", "silu"), ("linear", "linear")}
    assert {length for *_, length in made} == {3}  # T_max, no length asked
    first = {}
    for kind, who in events:
        first.setdefault(who, kind)
    assert set(first.values()) == {"run"}  # warmed before its first timing, in round 1 of 1
    made.clear()
    tune.tune(program, "f32", "gcc", rounds=1, length=2)
    assert {length for *_, length in made} == {2}
    made.clear()
    laned = Layout(lanes=(("i", 8),))
    monkeypatch.setattr(tune, "candidates", lambda kernel, nest: [Layout(), laned])  # two: still a choice
    two = tune.tune(program, "f32", "gcc", rounds=1)
    assert len(two) > 3 and all(len(m.layouts) == 2 for m in two)


def test_tune_command_passes_its_options_on(tmp_path, monkeypatch, capsys):
    from exactc.verify import tune
    calls, notes = [], []
    monkeypatch.setattr(tune, "tune", lambda *a: calls.append(a) or [])
    monkeypatch.setattr(tune, "_note", notes.append)
    assert _tune_cli("--rounds", "2", "--length", "1", "--weights", "q8", "--table", str(tmp_path / "t.json")) == 0
    (program, site, cc, rounds, length, progress), = calls[:1]
    assert (site, cc, rounds, length, progress) == ("f32", "gcc", 2, 1, tune._note)
    assert {"quantize", "qlinear_i"} <= {k.primitive for k in tune.program_kernels(program, "f32")}  # integer form
    assert notes == [""]  # the progress line cleared
    assert _tune_cli("--weights", "q8", "--form", "weight-only", "--table", str(tmp_path / "t.json")) == 0
    assert "qlinear_w" in {k.primitive for k in tune.program_kernels(calls[-1][0], "f32")}  # the form asked for


def test_tune_command_times_in_seconds_and_best_is_a_duration(tmp_path, capsys, monkeypatch):
    from exactc.verify import tune
    from exactc.verify.build import BuildOptions
    # A clock far from zero that ticks a quarter second a call: the command's whole run on
    # a fast machine with its kernels cached takes less than the 0.1 s its line shows.
    clock = itertools.count(1e6, 0.25)
    monkeypatch.setattr(tune.time, "perf_counter", lambda: next(clock))
    assert _tune_cli("--rounds", "1", "--table", str(tmp_path / "t.json")) == 0
    seconds = float(re.search(r"candidates in ([0-9.]+) s;", capsys.readouterr().out).group(1))
    assert 0 < seconds < 600
    monkeypatch.undo()
    kernel, nest = _tune_linear()
    timed = tune.Timed(kernel, "linear", Layout(), BuildOptions(cc="gcc", opt="-O1", warnings=False), 20)
    assert 0 < timed.best() < 1.0


def test_tune_command_reads_the_checkpoint_config(tmp_path, capsys, monkeypatch):
    # The nests tuned are the checkpoint's own (mlp 8).
    path = tiny_llama2c(tmp_path / "m.bin")
    from exactc import cli
    assert cli.main(["plan", "--tune", "llama", "--entry", "forward", "--dtype", "f32", "--cc", "gcc",
                     "--checkpoint", str(path), "--rounds", "1", "--table", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    nests = [line for line in out if not line.startswith(" ")]
    assert nests[:-1] == ["matmul at f32 (a 1xTx4, b 1xTx4), nest matmul:", "linear at f32 (x Tx4, w 8x4), nest linear:",
                          "silu at f32 (x Tx8), nest silu:"], out
    assert nests[-1].startswith("tune: 3 nests, 18 candidates in ")
    # A checkpoint that refuses the entry (a sentence-transformers folder's modules do) is
    # refused before anything is tuned.
    import dataclasses

    from exactc.exporter import checkpoints
    load = checkpoints.load
    monkeypatch.setattr(checkpoints, "load",
                        lambda *a: dataclasses.replace(load(*a), entries={"forward": "no forward in this file"}))
    assert cli.main(["plan", "--tune", "llama", "--entry", "forward", "--dtype", "f32", "--cc", "gcc",
                     "--checkpoint", str(path), "--rounds", "1", "--table", str(tmp_path / "u.json")]) == 2
    assert "no forward in this file" in capsys.readouterr().err and not (tmp_path / "u.json").exists()


def test_tune_progress_note_is_flushed(monkeypatch):
    from exactc.verify import tune

    class Terminal(io.StringIO):
        flushed = 0

        def isatty(self):
            return True

        def flush(self):
            Terminal.flushed += 1
    monkeypatch.setattr(tune.sys, "stderr", Terminal())
    tune._note("x")
    assert Terminal.flushed == 1


# ---- exactc plan --tune's candidates of a quantized linear with a short last block (tune.py)


def test_tune_candidates_of_a_quantized_linear_with_a_short_last_block():
    """llama's default mlp of 172 at --weights q8, block 32 (five blocks and one of 12):
    the packed layouts are refused by the plan's checks, and the unpacked lane shapes
    after them are still candidates; with whole blocks (160) the packed ones are too."""
    from exactc.verify import tune
    from exactc.exporter import dims

    def labels(k):
        kernel = lower("qlinear_w", "f32", {"x": (dims.length(8), k), "wq": (64, k), "wd": (64, -(-k // 32))},
                       {"fmt": "q8", "block": 32})
        return [tune.label(layout) for layout in tune.candidates(kernel, kernel.nests[0])]

    assert labels(172) == ["plain", "order n, m; lanes m:4, n:16", "order n, m; lanes n:16"]
    assert labels(160) == ["plain", "order n, m; lanes m:8, n:16; packs wq, wd",
                           "order n, m; lanes m:4, n:16; packs wq, wd", "order n, m; lanes n:16; packs wq, wd",
                           "order n, m; lanes m:4, n:16; packs wd", "order n, m; lanes n:16; packs wd",
                           "order n, m; lanes m:4, n:16", "order n, m; lanes n:16"]
