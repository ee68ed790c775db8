"""Whole programs: every entry of the three architectures, exported at small dimensions in
f64, f32 and bf16, built by its own Makefile without a warning (gcc and clang, with and
without OpenMP, the checking build), gives the numpy reference's bytes on 1 and 2
threads; the straight-line host writes the same file; the arena peak the checking build
reaches is the computed one. And the checks can fail: a fold that skips a layer, a
buffer released one launch too early, a missing or mis-shaped tensor.

Builds are cached by the content of the exported directory and the make arguments, so
a second run compiles nothing it has compiled before.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactc.exporter import export, graph, models
from exactc.exporter.primitives import CONTRACT_FMA, CONTRACT_OFF

from exactc.exporter.reference import walk
from exactc.exporter import frames
from exactc.exporter.models import cache
from exactc.exporter.printer import host, structured
from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS
from exactc import programs
from exactc.verify import conformance
from exactc.verify.compare import assert_bits_equal

# Small dimensions: every code path (stacked layers, GQA, padding, rope) at a size a
# compiler and the numpy reference get through in seconds.
SMALL = {
    "gpt": {"vocab": 48, "positions": 8, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "bert": {"vocab": 48, "positions": 8, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "llama": {"vocab": 48, "dim": 16, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 20, "tokens": 6},
}
# The generation entries (prefill, decode) at f32 here (every site and length, both hosts
# and the command line's backends in make verify's generate campaign).
ENTRIES = [(m, e) for m in ("gpt", "bert", "llama") for e in models.entries(m) if e not in cache.CACHED_ENTRIES]
SITES = ("f64", "f32", "bf16")
CASES = ([(m, e, s) for m, e in ENTRIES for s in SITES]
         + [(m, e, "f32") for m in ("gpt", "llama") for e in cache.CACHED_ENTRIES]
         + [(m, models.LOSS_GRAD, s) for m in models.CAUSAL_LMS for s in ("f64", "f32")])  # a batch of 2


def _export(tmp: Path, model: str, entry: str, site: str, straight: bool = False, name: str | None = None,
            **overrides) -> tuple[export.Export, Path]:
    """The export (its reference outputs included) and the directory written."""
    batch = {"batch": 2} if entry == models.LOSS_GRAD else {}
    prepared = export.ExportSpec(model, entry, site, 3, dict(SMALL[model], **batch, **overrides),
                                 straight=straight).prepare()
    return prepared, export.write(prepared, tmp / (name or f"{model}-{entry}-{site}{'-straight' if straight else ''}"))


def build(root: Path, cc: str = "gcc", openmp: bool = True, checking: bool = False,
          quiet: bool = True) -> programs.Program:
    """make in `root` (programs.py, cached); fails on any warning when `quiet`."""
    try:
        return programs.make(root, programs.Build(cc=cc, openmp=openmp, checking=checking), refuse_warnings=quiet)
    except programs.ProgramBuildError as error:
        failure = str(error)
    pytest.fail(failure, pytrace=False)


def conforms(program: programs.Program, prepared: export.Export, threads: int = 1, **kwargs):
    """Run and compare with the one comparison; on a difference, fail with the report
    (first differing index, hex values, count, the first differing layer, the build)."""
    try:
        return conformance.assert_conforms(program, prepared, threads=threads, **kwargs)
    except conformance.ProgramMismatch as mismatch:
        report = str(mismatch)
    pytest.fail(report, pytrace=False)


def outputs(out: Path) -> dict[str, np.ndarray]:
    return conformance.load_outputs(out)


def assert_same_outputs(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray], site: str) -> None:
    """The same output files, equal by the one comparison (the report names the first
    differing index, both values in hex and the count)."""
    problems = conformance.output_mismatches(expected, actual, site)
    assert sorted(expected) == sorted(actual) and not problems, "\n".join(map(str, problems))


# gcc with OpenMP, clang with OpenMP (Debian's libomp), gcc without: tests/installed.py
needs_clang = pytest.mark.needs("clang", "libomp")


# ---- correctness: the reference's bits -------------------------------------------------------


@needs_clang
@pytest.mark.parametrize("model,entry,site", CASES, ids=[f"{m}-{e}-{s}" for m, e, s in CASES])
def test_program_matches_reference(tmp_path, model, entry, site):
    prepared, root = _export(tmp_path, model, entry, site)

    # gcc with OpenMP, on 1 and 2 threads; clang; gcc without OpenMP on 1 and 2 threads:
    # the one comparison in Python (with the report), and conformance/check.sh in C.
    for cc, openmp in (("gcc", True), ("clang", True), ("gcc", False)):
        program = build(root, cc=cc, openmp=openmp)
        for threads in (1, 2):
            conforms(program, prepared, threads)
            done = program.check(threads)
            assert done.returncode == 0, f"{cc} openmp={openmp} threads={threads}:\n{done.stdout}{done.stderr}"

    # The checking build: NaN-filled arena, the same bits, the computed peak reached.
    manifest = json.loads((root / "exactc.json").read_text())
    done = conforms(build(root, checking=True), prepared)
    reached = re.search(r"arena peak reached (\d+) bytes of (\d+) computed", done.stderr)
    assert reached, done.stderr
    assert int(reached.group(1)) == int(reached.group(2)) == manifest["arena_peak"]

    # The straight-line host: the oracle gives the same bits.
    straight_prepared, straight = _export(tmp_path, model, entry, site, straight=True)
    assert json.loads((straight / "exactc.json").read_text())["host"] == "straight-line"
    done = conforms(build(straight, checking=True), straight_prepared, expected=prepared.expected)
    reached = re.search(r"arena peak reached (\d+) bytes of (\d+) computed", done.stderr)
    assert int(reached.group(1)) == int(reached.group(2)) == manifest["straight_line_arena_peak"]
    assert manifest["straight_line_arena_peak"] > manifest["arena_peak"]


LOSS_GRAD_PLANNED = [("gpt", {}), ("llama", {}), ("gpt", {"positions": SMALL["gpt"]["tokens"]})]


@pytest.mark.parametrize("model,overrides", LOSS_GRAD_PLANNED, ids=["gpt", "llama", "gpt-every-position"])
def test_loss_grad_under_the_automatic_plan_conforms_on_1_and_2_threads(tmp_path, model, overrides):
    """Its kernels split and laid out (the fill kernels' one-argument drivers included);
    GPT's position slice reaching the table's end (its backward an embedding_bar)."""
    config = dict(SMALL[model], batch=2, **overrides)
    spec = export.ExportSpec(model, models.LOSS_GRAD, "f32", 3, config, plan="auto")
    prepared = spec.prepare()
    program = build(export.write(prepared, tmp_path / model))
    for threads in (1, 2):
        conforms(program, prepared, threads)


def test_loss_grad_with_more_positions_than_tokens_conforms_at_every_length(tmp_path):
    """GPT's position slice [0, T) of a longer table: at every run-time length (the
    lengths/T<n> cases) the rows after T keep their adjoint, in a checking build (its
    arena's bounds) of the plain program, where a part sized at T_max would overflow."""
    config = dict(SMALL["gpt"], positions=SMALL["gpt"]["tokens"] + 9, layers=1)
    prepared = export.ExportSpec("gpt", models.LOSS_GRAD, "f32", 3, config).prepare()
    conforms(build(export.write(prepared, tmp_path / "gpt"), openmp=False, checking=True), prepared)


FUSED_CASES = [(m, s) for m in ("gpt", "bert", "llama") for s in SITES]


@needs_clang
@pytest.mark.parametrize("model,site", FUSED_CASES, ids=[f"{m}-{s}" for m, s in FUSED_CASES])
def test_fused_program_matches_reference(tmp_path, model, site):
    """--contract fma under the automatic plan (lanes, packs, splits): the reference's
    fused bits from gcc and clang at 1 and 2 threads, bits the default realization does
    not give (at f32 and f64); the kernels call fma, the manifest names the realization."""
    spec = export.ExportSpec(model, "forward", site, 3, SMALL[model], plan="auto", contract=CONTRACT_FMA)
    prepared = spec.prepare()
    root = export.write(prepared, tmp_path / f"{model}-{site}-fma")
    default = dataclasses.replace(spec, contract=CONTRACT_OFF).prepare()
    differs = any(prepared.expected[n].tobytes() != default.expected[n].tobytes() for n in prepared.expected)
    assert differs or site == "bf16"  # the one rounding to bf16 may hide the last bits of every output
    assert json.loads((root / "exactc.json").read_text())["contract"] == CONTRACT_FMA
    call = "fma(" if site == "f64" else "fmaf("
    products = [text for path, text in prepared.printed.files.items() if path.startswith(("kernels/linear",
                                                                                            "kernels/matmul"))]
    assert products and all(call in text for text in products)
    for cc in ("gcc", "clang"):
        program = build(root, cc=cc)
        for threads in (1, 2):
            conforms(program, prepared, threads)
            done = program.check(threads)
            assert done.returncode == 0, f"{cc} threads={threads}:\n{done.stdout}{done.stderr}"


# glibc picks its fma by the CPU (an ifunc); this hides FMA from it. A program built
# without FMA calls no C library fma at all (exactc_fma.h's software fma), which this shows.
NO_FMA_CPU = {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-FMA,-FMA4,-AVX2"}


@pytest.mark.parametrize("site", ["f64", "f32"])
def test_fused_program_on_a_target_without_fma_runs_exactc_s_software_fma(tmp_path, site):
    """Built for the baseline x86-64 (no -march: no FMA instruction), the fused kernels
    run exactc's own software fma (exactc_fma.h), not the C library's: the program calls
    no fma or fmaf, and conforms."""
    spec = export.ExportSpec("gpt", "forward", site, 3, SMALL["gpt"], plan="auto", contract=CONTRACT_FMA)
    prepared = spec.prepare()
    root = export.write(prepared, tmp_path / f"gpt-{site}-fma-portable")
    program = programs.make(root, programs.Build(cc="gcc", cflags="-O2"))
    undefined = subprocess.run(["nm", "-u", str(program.path)], capture_output=True, text=True, check=True).stdout
    assert not re.search(r"\bfmaf?\b", undefined), f"the program calls the C library's fma:\n{undefined}"
    for env in (None, NO_FMA_CPU):
        for threads in (1, 2):
            done = program.check(threads, env=env)
            assert done.returncode == 0, f"{env} threads={threads}:\n{done.stdout}{done.stderr}"


def test_export_is_deterministic(tmp_path):
    _, a = _export(tmp_path, "llama", "forward", "bf16", name="a")
    _, b = _export(tmp_path, "llama", "forward", "bf16", name="b")
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


# ---- structure: the host mirrors the model -----------------------------------------------------


def test_structured_host_prints_each_form_once_and_loops_over_layers(tmp_path):
    overrides = dict(SMALL["gpt"], layers=3)
    program = models.build("gpt", "forward", overrides)
    printed = host.print_program(program, "f32")
    text = printed.files["model.c"]
    assert text.count("static void attention(") == 1
    assert text.count("static void block(") == 1
    assert "for (int l = 0; l < 3; l++)" in text
    assert "w->transformer_h_attn_c_attn_weight + l * 768" in text  # (3D, D) = (48, 16) per layer
    # the body was traced once: one Function for three layers
    folds = [n for n in program.function.nodes if isinstance(n, graph.Fold)]
    assert len(folds) == 1 and folds[0].count == 3
    straight = host.print_program(program, "f32", straight=True).files["model.c"]
    assert "for (int l = 0; l < 3" not in straight and "static void block(" not in straight
    assert "w->transformer_h_attn_c_attn_weight + 1536" in straight  # layer 2, unrolled


def test_fold_iteration_apart_runs_outside_the_loop(tmp_path):
    """An iteration that differs runs apart: same bits as the reference."""
    from exactc.exporter.models import gpt

    cfg = models.config("gpt", dict(SMALL["gpt"], layers=3))

    def last_block(x, p, cfg):  # the last layer skips its MLP
        h = graph.layernorm(x, p["ln_1.weight"], p["ln_1.bias"], eps=cfg.eps)
        return graph.add(x, graph.call(gpt.attention, cfg, h, p))

    def entry(cfg, params, input_ids):
        tok = graph.embedding(params["transformer.wte.weight"], input_ids)
        pos = graph.slice(params["transformer.wpe.weight"], 0, 0, cfg.tokens)
        x = graph.fold(gpt.block, cfg.layers, graph.add(tok, pos), graph.group_layers(params, "transformer.h."), cfg,
                       apart={2: last_block})
        return {"logits": gpt.head(cfg, params, x)}

    # traced at a static length (cfg.tokens): a program without a run-time length still prints
    program = graph.trace("gpt", "apart", entry, gpt.parameters(cfg), gpt.inputs(cfg, cfg.tokens), cfg)
    program.config = cfg
    params = models.draw_parameters(program, 0, "f32")
    inputs = models.draw_inputs(program, 0)
    prepared = export.Export(program, "f32", 0, host.print_program(program, "f32"), params, inputs,
                             walk.evaluate(program, "f32", params, inputs), False)
    root = export.write(prepared, tmp_path / "apart")
    text = (root / "model.c").read_text()
    assert "for (int l = 0; l < 2; l++)" in text and "layer 2 runs apart: last_block" in text
    conforms(build(root, checking=True), prepared)


# ---- every check can fail --------------------------------------------------------------------


HEX = r"0x[0-9a-f]{8} \([-+0-9.e]+\)"


@pytest.mark.parametrize("site", ["f32", "bf16"])
def test_a_fold_that_skips_a_layer_fails_with_the_index_the_values_and_the_layer(tmp_path, monkeypatch, site):
    """Layer 2 of 3 reads layer 1's parameters (layer 2's are skipped): check.sh prints
    the first differing index, both values in hex and the count; the harness's report
    adds the layer whose slice was misread, the export and the build line."""
    monkeypatch.setattr(structured, "fold_slice", lambda base, index, chunk: f"{base} + ({index} == 2 ? 1 : {index}) * {chunk}")
    prepared, root = _export(tmp_path, "gpt", "forward", site, layers=3)
    assert "(l == 2 ? 1 : l)" in (root / "model.c").read_text()
    program = build(root)
    done = program.check()
    assert done.returncode != 0
    assert re.search(rf"^DIFFERS  logits\.npy: \d+ of 288 elements differ; first at index \(\d+, \d+\): "
                     rf"expected {HEX}, got {HEX}$", done.stdout, re.M), done.stdout
    with pytest.raises(conformance.ProgramMismatch) as failed:
        conformance.assert_conforms(program, prepared)
    text = str(failed.value)
    assert re.search(rf"output logits: \d+ of 288 elements differ; first at index \(\d+, \d+\): "
                     rf"reference {HEX}, C {HEX}", text), text
    assert "layer 2 of the fold over block (3 layers) is the first whose output differs" in text, text
    assert re.search(r"its output x_out: \d+ of 96 elements differ; first at index \(\d+, \d+\)", text), text
    assert "the fold's slice for layer 2 points at layer 1's, not at transformer.h.2.ln_1.weight" in text, text
    assert f"export: {root}" in text and f"build: make -C {root} CC=gcc OPENMP=1  (gcc" in text, text


def test_a_buffer_released_one_launch_early_fails_the_checking_build(tmp_path, monkeypatch):
    monkeypatch.setattr(frames, "release_point", lambda last_use: last_use - 1)
    _, root = _export(tmp_path, "llama", "forward", "f32")
    done = build(root, checking=True).check()
    assert done.returncode != 0 and "DIFFERS  logits.npy: " in done.stdout


def test_missing_and_misshaped_tensors_are_named(tmp_path):
    _, root = _export(tmp_path, "gpt", "forward", "f32")
    program = build(root)
    prepared = export.prepare("gpt", "forward", "f32", seed=3, overrides=SMALL["gpt"])
    tensors = export.weight_tensors(prepared.program, prepared.params, "f32")
    del tensors["transformer.h.1.ln_2.bias"]
    tag, array = tensors["transformer.wpe.weight"]
    tensors["transformer.wpe.weight"] = (tag, array[:4])
    (root / "weights.safetensors").write_bytes(export.safetensors_bytes(tensors))
    done = program.run_conformance_inputs(tmp_path / "out")
    assert done.returncode != 0
    assert "tensor transformer.h.1.ln_2.bias is missing" in done.stderr
    assert "tensor transformer.wpe.weight is F32 (4, 16); it must be F32 (8, 16)" in done.stderr
    assert "2 tensor(s) missing or wrong" in done.stderr


def test_a_wrong_input_is_refused_by_name(tmp_path):
    _, root = _export(tmp_path, "bert", "embed", "f32")
    program = build(root)
    inputs = tmp_path / "inputs"
    shutil.copytree(root / "conformance" / "inputs", inputs)
    np.save(inputs / "attention_mask.npy", np.ones(5, dtype=np.int64))
    done = program.run([(inputs, tmp_path / "out")])
    assert done.returncode != 0
    assert "input attention_mask must be int32" in done.stderr


@pytest.mark.parametrize("array,holds", [(np.zeros(3, np.int64), "int64 (<i8) of shape (3,)"),
                                         (np.zeros((2, 3), np.int32), "int32 (<i4) of shape (2, 3)")])
def test_an_input_refused_before_the_length_is_known_names_t_and_its_range(tmp_path, array, holds):
    """No input has given T yet (the only one that follows it has another dtype or rank):
    the refusal writes the shape with T and T's range, not the shape at length 0."""
    _, root = _export(tmp_path, "gpt", "forward", "f32")
    program = build(root)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    np.save(inputs / "input_ids.npy", array)
    done = program.run([(inputs, tmp_path / "out")])
    assert done.returncode == 1, done.stderr
    assert (f"input input_ids must be int32 (<i4) of shape (T,); the file holds {holds} (T is the length, 1 to "
            "T_max = 6)") in done.stderr, done.stderr


@pytest.mark.parametrize("length", [0, 7])
def test_a_length_outside_1_to_t_max_is_refused_and_nothing_is_written(tmp_path, length):
    """The program takes 1 to T_max positions: an empty input or one longer than T_max is
    refused with the rule, exit 1, no output written; T_max itself runs."""
    prepared, root = _export(tmp_path, "gpt", "forward", "f32")
    assert prepared.program.max_length == SMALL["gpt"]["tokens"] == 6
    program = build(root)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    np.save(inputs / "input_ids.npy", np.zeros(length, dtype=np.int32))
    done = program.run([(inputs, tmp_path / "out")])
    assert done.returncode == 1, done.stderr
    assert f"dimension 0 is {length}, which is no length T in [1, 6]" in done.stderr, done.stderr
    assert not list((tmp_path / "out").iterdir())
    np.save(inputs / "input_ids.npy", np.zeros(6, dtype=np.int32))
    assert program.run([(inputs, tmp_path / "out6")]).returncode == 0


@pytest.mark.parametrize("model", ["gpt", "bert", "llama"])
def test_a_program_at_length_t_gives_the_bytes_of_the_program_exported_for_t(tmp_path, model):
    """One program for every length: run at T, it writes the same bytes as the program
    exported for exactly T (T_max = T), and the reference's at T (check.sh runs its
    conformance inputs at 1, 2 and T_max, all of them equal)."""
    long_prepared, long_root = _export(tmp_path, model, "forward", "f32", name="long")
    short_prepared, short_root = _export(tmp_path, model, "forward", "f32", name="short", tokens=2)
    assert sorted(long_prepared.lengths) == [1, 2] and long_prepared.manifest()["conformance_lengths"] == [1, 2, 6]
    long_program, short_program = build(long_root), build(short_root)
    done = long_program.check(2)
    assert done.returncode == 0 and "T1/" in done.stdout and "T2/" in done.stdout, done.stdout + done.stderr
    short_inputs = short_root / "conformance" / "inputs"
    long_program.run_or_fail([(short_inputs, tmp_path / "at-long")])
    short_program.run_or_fail([(short_inputs, tmp_path / "at-short")])
    for name in short_prepared.expected:
        assert (tmp_path / "at-long" / f"{name}.npy").read_bytes() == (tmp_path / "at-short" / f"{name}.npy").read_bytes()
    assert_same_outputs(short_prepared.expected, outputs(tmp_path / "at-long"), "f32")


LENGTH_CASES = [(m, e, s) for m, e in ENTRIES for s in ("f32", "bf16")]


@pytest.mark.parametrize("model,entry,site", LENGTH_CASES, ids=[f"{m}-{e}-{s}" for m, e, s in LENGTH_CASES])
def test_c_at_a_drawn_length_equals_the_reference_at_that_length(tmp_path_factory, model, entry, site):
    """One program (T_max = 6), Hypothesis draws the run-time length T in [1, T_max], the
    inputs' seed and 1 or 2 threads: C at T gives the reference's bytes at T. The
    conformance lengths (1, 2, T_max) are fixed; this reaches the others."""
    prepared, root = _export(tmp_path_factory.mktemp("lengths"), model, entry, site)
    program, top = build(root), prepared.program.max_length
    assert top == SMALL[model]["tokens"]

    @settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(length=st.integers(1, top), seed=st.integers(0, 2**32 - 1), threads=st.sampled_from((1, 2)))
    def at_length(length, seed, threads):
        inputs = export.check_inputs(prepared.program, site, models.draw_inputs(prepared.program, seed, length))
        assert graph.run_length(prepared.program, inputs) == length
        conforms(program, prepared, threads, inputs=inputs)

    at_length()


def test_safetensors_parser_survives_mutated_headers(tmp_path):
    """Fuzz: mutated and truncated files are refused or read, never read out of bounds
    (built with AddressSanitizer and UBSan)."""
    prepared = export.prepare("gpt", "forward", "f32", seed=3, overrides=SMALL["gpt"])
    good = export.safetensors_bytes(export.weight_tensors(prepared.program, prepared.params, "f32"))
    n = int.from_bytes(good[:8], "little")
    rng = np.random.default_rng(0)
    cases = [good, good[:5], good[: 8 + n // 2], good[:8] + b"{" + good[9:], b"\xff" * 8 + good[8:]]
    for _ in range(400):
        data = bytearray(good[: 8 + n + 64])
        for _ in range(int(rng.integers(1, 4))):
            k = int(rng.integers(0, 8 + n))
            data[k] = int(rng.integers(0, 256)) if rng.random() < 0.5 else ord(rng.choice(list('{}[]",:\\u0 9')))
        cases.append(bytes(data[: int(rng.integers(8, len(data) + 1))]))
    folder = tmp_path / "cases"
    folder.mkdir()
    for k, data in enumerate(cases):
        (folder / f"{k:04d}.safetensors").write_bytes(data)
    driver = tmp_path / "driver.c"
    driver.write_text(
        '#include "exactc_rt.h"\n#include <stdio.h>\n'
        "int main(int argc, char **argv) {\n"
        "    int ok = 0;\n"
        "    for (int i = 1; i < argc; i++) {\n"
        "        exactc_safetensors st; char err[256];\n"
        "        if (exactc_st_open(argv[i], &st, err, sizeof err) == 0) { ok++; exactc_st_close(&st); }\n"
        "    }\n"
        '    printf("%d\\n", ok);\n'
        "    return 0;\n}\n")
    runtime = RUNTIME_DIR
    exe = tmp_path / "driver"
    cmd = ["gcc", *STRICT_FLAGS, "-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           f"-I{runtime}", "-o", str(exe), str(driver), str(runtime / "exactc_safetensors.c"),
           str(runtime / "exactc_npy.c")]
    subprocess.run(cmd, check=True)
    files = sorted(str(p) for p in folder.iterdir())
    done = subprocess.run([str(exe), *files], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert 1 <= int(done.stdout) < len(files)  # the good file reads; most mutants do not


# ---- the command line ------------------------------------------------------------------------


def exactc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exactc.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args,message", [
    (["export", "gptx", "--entry", "forward", "--dtype", "f32"], "unknown model 'gptx'"),
    (["export", "gpt", "--entry", "embed", "--dtype", "f32"], "gpt has no entry 'embed'"),
    (["export", "gpt", "--entry", "forward", "--dtype", "f16"], "unknown site type 'f16'"),
    (["export", "gpt", "--entry", "forward", "--dtype", "f32", "--set", "layer=2"], "gpt config has no field 'layer'"),
    (["info", "llama", "--entry", "forward", "--dtype", "f32", "--set", "kv_heads=3"], "not a multiple of kv_heads"),
])
def test_cli_refusals_are_one_line_and_exit_2(tmp_path, args, message):
    done = exactc(*args, *(["-o", str(tmp_path / "out")] if args[0] == "export" else []))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_cli_export_check_info_and_run(tmp_path):
    small = [f"--set={k}={v}" for k, v in SMALL["bert"].items()]
    target = tmp_path / "b"
    done = exactc("export", "bert", "--entry", "embed", "--dtype", "bf16", "--seed", "3", *small, "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert exactc("export", "bert", "--entry", "embed", "--dtype", "bf16", *small, "-o", str(target)).returncode == 2
    done = exactc("check", str(target))
    assert done.returncode == 0 and "bit-identical" in done.stdout, done.stdout + done.stderr
    info = exactc("info", "bert", "--entry", "embed", "--dtype", "bf16", *small)
    manifest = json.loads((target / "exactc.json").read_text())
    assert f"arena peak     {manifest['arena_peak']} bytes" in info.stdout
    assert f"parameters     {manifest['parameters']}" in info.stdout
    for backend in ("reference", "c"):
        done = exactc("run", "bert", "--entry", "embed", "--dtype", "bf16", "--seed", "3", *small,
                      "--backend", backend, "-o", str(tmp_path / backend))
        assert done.returncode == 0, done.stderr
    expected = outputs(target / "conformance" / "expected")
    assert_same_outputs(expected, outputs(tmp_path / "reference"), "bf16")
    assert_same_outputs(expected, outputs(tmp_path / "c"), "bf16")


def test_cli_failed_builds_exit_1_on_one_line(tmp_path):
    _, root = _export(tmp_path, "gpt", "forward", "f32")
    (root / "model.c").write_text("this is not C\n")
    done = exactc("check", str(root), "--cc", "gcc")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert len(lines) == 1 and lines[0].startswith(f"exactc check: error: make -C {root} CC=gcc") and "failed" in lines[0]


def test_cli_check_prints_the_first_difference(tmp_path):
    _, root = _export(tmp_path, "bert", "embed", "f32")
    expected = root / "conformance" / "expected" / "sentence_embedding.npy"
    values = np.load(expected)
    values[3] = -values[3]
    np.save(expected, values)
    done = exactc("check", str(root), "--cc", "gcc")
    assert done.returncode == 1
    assert re.search(rf"^DIFFERS  sentence_embedding\.npy: 1 of 16 elements differ; first at index \(3,\): "
                     rf"expected {HEX}, got {HEX}$", done.stdout, re.M), done.stdout
    assert "conformance: FAILED" in done.stdout and f"build: make -C {root} CC=gcc OPENMP=1" in done.stdout


# ---- building: one way, cached, safe when concurrent ----------------------------------------------


@pytest.mark.needs("gcc", "clang")
def test_a_directory_rebuilds_with_each_compiler(tmp_path):
    """make compares file times, not arguments: the one build removes its targets first,
    so one directory built with gcc, then clang, gives a gcc program, then a clang one."""
    _, root = _export(tmp_path, "gpt", "forward", "f32")
    made = {}
    for cc in ("gcc", "clang", "gcc"):
        made[cc] = programs.make(root, programs.Build(cc=cc), cached=False).path.read_bytes()
    assert b"clang version" not in made["gcc"], "the gcc build kept clang's program"
    assert b"clang version" in made["clang"], "the clang build kept gcc's program"


def test_a_changed_runtime_source_rebuilds_instead_of_taking_the_cached_object(tmp_path, monkeypatch):
    """The runtime's objects are shared between exports through the cache: a build of an
    export whose runtime source differs must compile it, not link the cached object."""
    monkeypatch.setenv("EXACTC_CACHE", str(tmp_path / "cache"))
    _, first = _export(tmp_path, "gpt", "forward", "f32")
    build(first)
    assert len(list((tmp_path / "cache" / "objects").glob("*/*/exactc_libm.o"))) == 1
    prepared, second = _export(tmp_path, "llama", "forward", "f32")
    conforms(build(second), prepared)  # the same runtime: its objects from the cache
    assert len(list((tmp_path / "cache" / "objects").iterdir())) == 1
    _, third = _export(tmp_path, "llama", "forward", "f32", name="changed")
    source = third / "exactc_libm.c"
    source.write_text(source.read_text() + "\n#error a changed runtime source is compiled\n")
    with pytest.raises(programs.ProgramBuildError, match="exactc_libm.c"):
        programs.make(third, programs.Build(cc="gcc"))


def test_an_export_is_cached_by_what_it_depends_on(tmp_path, monkeypatch):
    monkeypatch.setenv("EXACTC_CACHE", str(tmp_path / "cache"))
    spec = export.ExportSpec("gpt", "forward", "f32", 3, SMALL["gpt"])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nests": {"linear_qkv": {"split": {"depth": 0, "pieces": [[0, 3], [3, 6]]}}}}))
    variants = [dataclasses.replace(spec, seed=4), dataclasses.replace(spec, overrides=dict(SMALL["gpt"], tokens=5)),
                dataclasses.replace(spec, straight=True), dataclasses.replace(spec, plan="auto"),
                dataclasses.replace(spec, plan=str(plan)), dataclasses.replace(spec, inputs={"input_ids": np.zeros(6, np.int32)}),
                dataclasses.replace(spec, contract=CONTRACT_FMA)]
    digests = [v.digest() for v in [spec, *variants]]
    assert len(set(digests)) == len(digests), f"variants with the same key: {digests}"
    plan.write_text(json.dumps({"nests": {"linear_qkv": {"split": {"depth": 0, "pieces": [[0, 2], [2, 6]]}}}}))
    assert dataclasses.replace(spec, plan=str(plan)).digest() not in digests  # the plan's content, not its name
    first = programs.exported(spec, programs.Build(cc="gcc"))
    assert programs.exported(spec, programs.Build(cc="gcc")) == first
    planned = programs.exported(dataclasses.replace(spec, plan="auto"), programs.Build(cc="gcc"))
    assert planned.root != first.root and "_split(" in (planned.root / "model.c").read_text()
    assert planned.check(2).returncode == 0


def test_concurrent_builders_of_one_export_share_it(tmp_path):
    small = [f"--set={k}={v}" for k, v in SMALL["llama"].items()]
    env = dict(os.environ, EXACTC_CACHE=str(tmp_path / "cache"))
    runs = [subprocess.Popen([sys.executable, "-m", "exactc.cli", "run", "llama", "--entry", "forward", "--dtype", "bf16",
                              *small, "--backend", "c", "--cc", "gcc", "-o", str(tmp_path / f"out{i}")],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    for proc in runs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    exports = [p for p in (tmp_path / "cache" / "exports").iterdir() if not p.name.startswith(".")]
    assert len(exports) == 1 and not [p for p in (tmp_path / "cache" / "exports").iterdir() if p.name.startswith(".")]
    for i in (1, 2):
        assert_same_outputs(outputs(tmp_path / "out0"), outputs(tmp_path / f"out{i}"), "bf16")


# ---- the builder -----------------------------------------------------------------------------


def _params(*specs):
    return [graph.ParamSpec(name, shape, layers) for name, shape, layers in specs]


def test_builder_refuses_bad_shapes_by_name():
    def entry(params, x):
        return {"y": graph.linear(x, params["w"])}

    with pytest.raises(graph.GraphError, match=r"in bad: linear: x \(3, 4\) and w \(5, 6\).*operands x=x\[3, 4\], w=w_\[5, 6\]"):
        graph.trace("m", "bad", entry, _params(("w", (5, 6), 0)), [graph.InputSpec("x", (3, 4), "x")])


def test_builder_refuses_a_fold_over_the_wrong_layer_count():
    def body(x, p):
        return graph.linear(x, p["w"])

    def entry(params, x):
        return {"y": graph.fold(body, 3, x, graph.group_layers(params, "h."))}

    with pytest.raises(graph.GraphError, match=r"stacked value w .* must have 3 \(the layer count\)"):
        graph.trace("m", "fold", entry, _params(("h.{l}.w", (4, 4), 2)), [graph.InputSpec("x", (2, 4), "x")])


def test_builder_refuses_unused_parameters():
    def entry(params, x):
        return {"y": graph.silu(x)}

    with pytest.raises(graph.GraphError, match="parameter\\(s\\) w are never used"):
        graph.trace("m", "e", entry, _params(("w", (4, 4), 0)), [graph.InputSpec("x", (2, 4), "x")])


def test_a_call_is_traced_once_per_form():
    calls = []

    def module(x, w):
        calls.append(x.shape)
        return graph.linear(x, w)

    def entry(params, x, z):
        a = graph.call(module, x, params["w"])
        b = graph.call(module, a, params["w"])  # same form: not traced again
        c = graph.call(module, z, params["w"])  # another row count: a second form
        return {"a": b, "c": c}

    program = graph.trace("m", "e", entry, _params(("w", (4, 4), 0)),
                          [graph.InputSpec("x", (2, 4), "x"), graph.InputSpec("z", (3, 4), "x")])
    assert calls == [(2, 4), (3, 4)]
    assert [f.name for f in program.function.walk()] == ["module", "module_2", "e"]


@pytest.mark.parametrize("straight", [False, True], ids=["structured", "straight"])
@pytest.mark.parametrize("entry", ["static", "folds", "weights"])
def test_the_builders_printed_programs_build_and_equal_the_reference(tmp_path, entry, straight):
    """The builder's programs of tests/printed/ (tools/printed_text.py BUILT), built
    strict and checking: no parameters (the weights pointer unused), none of the
    architectures' names, a fold whose result is never read, parameter names holding "%"
    (the PARAMS table is a format the runtime reads), an entry named like the host's
    `weights` and no inputs at all."""
    from test_printed_text import tool

    fn, specs, input_specs = tool.BUILT[entry]
    program = graph.trace("built", entry, fn, specs, input_specs)
    rng = np.random.default_rng(2)
    params = models.draw_parameters(program, 0, "f32")
    inputs = export.check_inputs(program, "f32", {s.name: rng.standard_normal(s.shape).astype(np.float32)
                                                  for s in input_specs})
    prepared = export.Export(program, "f32", 0, host.print_program(program, "f32", None, straight), params, inputs,
                             walk.evaluate(program, "f32", params, inputs), straight)
    conforms(build(export.write(prepared, tmp_path / entry), checking=True), prepared)


@pytest.mark.parametrize("site", SITES)
def test_float_inputs_are_read_at_their_type(tmp_path, site):
    """A program with a float input: f64 and f32 read as given; bf16 read from f32 and
    rounded to nearest even, as the reference rounds it."""

    def entry(params, x):
        y = graph.linear(x, params["w"])
        return {"y": y, "x_back": x}  # an input returned: the host copies it

    program = graph.trace("m", "floats", entry, _params(("w", (5, 7), 0)), [graph.InputSpec("x", (3, 7), "x")])
    rng = np.random.default_rng(1)
    raw = rng.standard_normal((3, 7)).astype(np.float64 if site == "f64" else np.float32)
    params = models.draw_parameters(program, 0, site)
    inputs = export.check_inputs(program, site, {"x": raw})
    expected = walk.evaluate(program, site, params, inputs)
    prepared = export.Export(program, site, 0, host.print_program(program, site), params, inputs, expected, False)
    root = export.write(prepared, tmp_path / "floats")
    np.save(root / "conformance" / "inputs" / "x.npy", raw)  # not pre-rounded: the program rounds
    conforms(build(root, checking=True), prepared)


def test_weights_file_reads_with_the_safetensors_package(tmp_path):
    """An independent reader agrees on every tensor of the file the program reads."""
    from safetensors.numpy import load_file

    prepared, root = _export(tmp_path, "llama", "forward", "f32")
    loaded = load_file(str(root / "weights.safetensors"))
    tensors = export.weight_tensors(prepared.program, prepared.params, "f32")
    assert sorted(loaded) == sorted(tensors)
    assert "model.layers.1.self_attn.k_proj.weight" in loaded
    for name, (_, array) in tensors.items():
        assert_bits_equal(array, loaded[name], name, every_bit=True)


def test_untied_head_and_given_inputs(tmp_path):
    """GPT with its own lm_head.weight; `exactc run --input` takes the inputs given."""
    small = [f"--set={k}={v}" for k, v in SMALL["gpt"].items()] + ["--set=tied=false"]
    ids = np.array([5, 0, 47, 3, 3, 1], dtype=np.int32)
    np.save(tmp_path / "ids.npy", ids)
    for backend in ("reference", "c"):
        done = exactc("run", "gpt", "--entry", "forward", "--dtype", "f32", *small, "--backend", backend,
                      "--input", f"input_ids={tmp_path / 'ids.npy'}", "-o", str(tmp_path / backend))
        assert done.returncode == 0, done.stderr
    assert_same_outputs(outputs(tmp_path / "reference"), outputs(tmp_path / "c"), "f32")
    program = models.build("gpt", "forward", dict(SMALL["gpt"], tied=False))
    assert "lm_head.weight" in [p.name for p in program.params]
    prepared = export.prepare("gpt", "forward", "f32", overrides=dict(SMALL["gpt"], tied=False), inputs={"input_ids": ids})
    assert_same_outputs(prepared.expected, outputs(tmp_path / "c"), "f32")
    done = exactc("run", "gpt", "--entry", "forward", "--dtype", "f32", *small, "--input", "input_ids=/nonexistent.npy",
                  "-o", str(tmp_path / "x"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


def test_an_arena_computed_too_small_is_caught_by_the_checking_build(tmp_path, monkeypatch):
    """If the structure's peak forgot the callees' frames, the checking build stops at
    the first allocation past the arena's end."""
    monkeypatch.setattr(frames, "callee_peak", lambda node, frames: 0)
    _, root = _export(tmp_path, "bert", "forward", "f32")
    # (gcc may see the overflow too and warn: that is the same mistake caught earlier)
    done = build(root, checking=True, quiet=False).run_conformance_inputs(tmp_path / "out")
    assert done.returncode != 0 and "arena overflow" in done.stderr


SAFETENSORS_ERRORS = [
    (b"\x10\x00\x00\x00\x00\x00\x00\x00{}", "runs past the file"),
    (b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
     "tensor a appears twice"),
    (b'{"a":{"dtype":"F32","shape":[20],"data_offsets":[0,80]}}', "outside the 8 data bytes"),
    (b'{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', "8 data bytes for a F32 tensor needing 12"),
    (b'{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}', 'unknown dtype "Q4"'),
    (b'{"a":{"dtype":"F32","shape":[2]}}', "tensor a: missing data_offsets"),
    (b'{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', "must be a non-negative integer"),
    (b'{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}}', "its shape overflows"),
    (b'{"a\\ud800":{}}', "high surrogate"),
    (b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x', "bytes after the header"),
    (b"[" * 40, "expected the header's object"),
    # deep nesting inside a tensor's entry (a __metadata__ value must be a string, refused first)
    (b'{"a": {"x":' + b'{"k":' * 20 + b'"v"' + b"}" * 20 + b"}}", "nested deeper than 16"),
]


def test_safetensors_errors_name_the_field(tmp_path):
    cases = []
    for k, (header, _) in enumerate(SAFETENSORS_ERRORS):
        data = header if header.startswith(b"\x10") else len(header).to_bytes(8, "little") + header + bytes(8)
        path = tmp_path / f"{k}.safetensors"
        path.write_bytes(data)
        cases.append(str(path))
    driver = tmp_path / "errors.c"
    driver.write_text(
        '#include "exactc_rt.h"\n#include <stdio.h>\n'
        "int main(int argc, char **argv) {\n"
        "    for (int i = 1; i < argc; i++) {\n"
        "        exactc_safetensors st; char err[256];\n"
        '        if (exactc_st_open(argv[i], &st, err, sizeof err) == 0) { puts("ok"); exactc_st_close(&st); }\n'
        "        else puts(err);\n"
        "    }\n    return 0;\n}\n")
    exe = tmp_path / "errors"
    runtime = RUNTIME_DIR
    subprocess.run(["gcc", *STRICT_FLAGS, "-fsanitize=address,undefined", f"-I{runtime}", "-o", str(exe), str(driver),
                    str(runtime / "exactc_safetensors.c"), str(runtime / "exactc_npy.c")], check=True)
    lines = subprocess.run([str(exe), *cases], capture_output=True, text=True, check=True).stdout.splitlines()
    for line, (_, message) in zip(lines, SAFETENSORS_ERRORS):
        assert message in line, (line, message)


def test_a_plan_is_passed_through_to_the_kernels(tmp_path):
    """--plan: the split nest runs through its driver on 2 threads, same bytes; a plan
    that does not fit is refused on one line, nothing written."""
    small = [f"--set={k}={v}" for k, v in SMALL["gpt"].items()]
    plan = tmp_path / "plan.json"
    # linear_qkv's rows follow the run-time length: its pieces are parts of 2, scaled to T
    plan.write_text(json.dumps({"nests": {"linear_qkv": {"split": {"depth": 0, "pieces": [[0, 1], [1, 2]], "of": 2}}}}))
    target = tmp_path / "planned"
    done = exactc("export", "gpt", "--entry", "forward", "--dtype", "f32", "--seed", "3", *small,
                  "--plan", str(plan), "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert "linear_qkv_split(" in (target / "model.c").read_text()
    program = build(target)
    for threads in (1, 2):
        done = program.check(threads)
        assert done.returncode == 0, done.stdout + done.stderr
    plan.write_text(json.dumps({"nests": {"linear_qkv": {"split": {"depth": 0, "pieces": [[0, 1], [1, 3]], "of": 2}}}}))
    done = exactc("export", "gpt", "--entry", "forward", "--dtype", "f32", *small, "--plan", str(plan),
                  "-o", str(tmp_path / "bad"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "split.pieces" in done.stderr
    assert not (tmp_path / "bad").exists()


def test_one_process_runs_several_input_output_pairs(tmp_path):
    """The weights load once; each INPUT_DIR OUTPUT_DIR pair is one run, with the same
    bytes as a run of its own; an odd count of directories is a usage error."""
    prepared, root = _export(tmp_path, "gpt", "forward", "f32")
    program = build(root)
    single = tmp_path / "single"
    assert program.run_conformance_inputs(single).returncode == 0
    inputs = root / "conformance" / "inputs"
    done = program.run([(inputs, tmp_path / "a"), (inputs, tmp_path / "b")])
    assert done.returncode == 0, done.stderr
    for folder in ("a", "b"):
        assert_same_outputs(outputs(single), outputs(tmp_path / folder), "f32")
    odd = subprocess.run([str(program.path), str(root / "weights.safetensors"), str(inputs), str(tmp_path / "a"),
                          str(inputs)], capture_output=True, text=True)
    assert odd.returncode == 2 and "usage" in odd.stderr


def test_a_plan_entry_that_matches_no_nest_is_refused(tmp_path):
    """A plan's entry must apply somewhere: a misspelt or foreign kernel function is an
    error naming it, not a silently plain program."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"nests": {"linear_nothing": {"layout": {}}}}))
    with pytest.raises(host.HostError, match="linear_nothing match no nest"):
        export.ExportSpec("gpt", "forward", "f32", overrides=SMALL["gpt"], plan=str(path)).prepare()
    # every such entry, named in one message
    path.write_text(json.dumps({"nests": {"linear_nothing": {"layout": {}}, "softmax_nothing": {"layout": {}}}}))
    with pytest.raises(host.HostError, match="^plan: nest\\(s\\) linear_nothing, softmax_nothing match no nest of this program$"):
        export.ExportSpec("gpt", "forward", "f32", overrides=SMALL["gpt"], plan=str(path)).prepare()

