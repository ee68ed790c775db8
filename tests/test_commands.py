"""The commands in process (exactc/commands.py): what `exactc info`, `export`, `run` and
`check` print and write, their options, and --plan handed to the export."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from exactc.verify.compare import assert_bits_equal

from test_cli import SMALL_GPT, run_cli

# ---- what `exactc info`, `export` and `run` print and write, in process


def test_exactc_info_prints_its_rows(capsys):
    from exactc.exporter.export import ExportSpec

    code, out, err = run_cli(capsys, "info", *SMALL_GPT)
    assert code == 0 and err == ""
    m = ExportSpec("gpt", "forward", "f32", 0, {"layers": "1", "tokens": "4"}).prepare().manifest()
    config = ", ".join(f"{k}={v}" for k, v in m["config"].items())
    assert out.splitlines() == [
        "model          gpt.forward at f32",
        f"config         {config}",
        f"parameters     {m['parameters']}",
        f"kernels        {m['kernels']}",
        f"nests          {m['nests']} (one C function each)",
        f"launches       {m['launches']} per run",
        f"arena peak     {m['structured_arena_peak']} bytes (structured host)",
        f"straight-line  {m['straight_line_arena_peak']} bytes (every buffer its own)",
    ]


def test_exactc_info_mode_scop_prints_the_verdict_of_every_nest(capsys):
    code, out, err = run_cli(capsys, "info", *SMALL_GPT, "--mode", "scop")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["function", "kernel", "static", "why", "not"]
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert rows["embedding"].split()[2] == "no" and "a gather: table read at an index read from an array" in rows[
        "embedding"]
    assert rows["linear_qkv"].split()[1:] == ["linear_qkv", "static"]
    static = sum(line.split()[2] == "static" for line in lines[1:-1])
    assert lines[-1] == f"scop: {len(lines) - 2} nests, {static} static-control (exactc's verdict)"


def test_exactc_export_mode_scop_says_what_it_wrote_and_refuses_a_plan(capsys, tmp_path):
    code, out, err = run_cli(capsys, "export", *SMALL_GPT, "--mode", "scop", "-o", str(tmp_path / "s"))
    table = json.loads((tmp_path / "s" / "scop.json").read_text())["nests"]
    assert code == 0 and err == ""
    assert f"{len(table)} nests, {sum(row['static'] for row in table)} static-control" in out
    assert sorted(p.name for p in (tmp_path / "s" / "nests").iterdir()) == sorted(
        Path(row["file"]).name for row in table)
    code, out, err = run_cli(capsys, "export", *SMALL_GPT, "--mode", "scop", "--plan", "auto", "-o",
                             str(tmp_path / "p"))
    assert code == 2 and err == ("exactc export: error: --mode scop prints every nest at point zero: leave out "
                                 "--plan and --straight-line\n")
    assert not (tmp_path / "p").exists()


def test_exactc_export_says_what_it_wrote(capsys, tmp_path):
    code, out, err = run_cli(capsys, "export", *SMALL_GPT, "-o", str(tmp_path / "g"))
    assert code == 0 and err == ""
    manifest = json.loads((tmp_path / "g" / "exactc.json").read_text())
    assert re.fullmatch(
        rf"exported gpt\.forward at f32 to {re.escape(str(tmp_path / 'g'))} in \d+\.\d\d s: {manifest['kernels']} "
        rf"kernels, {manifest['launches']} launches, arena {manifest['arena_peak']} bytes\n", out), out
    # again without --force: refused, the first export kept
    code, out, err = run_cli(capsys, "export", *SMALL_GPT, "-o", str(tmp_path / "g"))
    assert code == 2 and out == "" and err.startswith("exactc export: error: ") and err.count("\n") == 1
    code, out, err = run_cli(capsys, "export", *SMALL_GPT, "-o", str(tmp_path / "g"), "--force", "--straight-line")
    assert code == 0 and json.loads((tmp_path / "g" / "exactc.json").read_text())["host"] == "straight-line"


def test_weights_choice_defaults_to_blocks_of_32():
    from types import SimpleNamespace

    from exactc.commands import weights_choice

    assert weights_choice(SimpleNamespace(weights="float", block=None)) is None
    assert weights_choice(SimpleNamespace(weights="q8", block=None)) == ("q8", 32)
    assert weights_choice(SimpleNamespace(weights="q4", block=64)) == ("q4", 64)


def test_exactc_run_writes_every_output_or_names_the_unreadable_input(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "-o", str(tmp_path / "out"))
    assert code == 0 and err == ""
    names = sorted(p.stem for p in (tmp_path / "out").glob("*.npy"))
    assert names and out == "".join(f"wrote {tmp_path / 'out' / n}.npy\n" for n in names)
    missing = tmp_path / "none.npy"
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "--input", f"input_ids={missing}", "-o", str(tmp_path / "o2"))
    assert code == 2 and out == ""
    assert err.startswith(f"exactc run: error: --input input_ids: cannot read {missing}: ")
    assert not (tmp_path / "o2").exists()
    np.save(tmp_path / "ids.npy", np.array([1, 2], dtype=np.int32))
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "--input", f"input_ids={tmp_path / 'ids.npy'}",
                          "-o", str(tmp_path / "o3"))
    assert code == 0 and sorted(p.stem for p in (tmp_path / "o3").glob("*.npy")) == names


# ---- a checkpoint's export, run's options, info's config, the C backend and `exactc check`


def gpt_checkpoint(folder: Path, stored_head: bool) -> Path:
    from test_checkpoints import drawn, hf_config, hf_tensors, write_hf

    program, params = drawn("gpt")
    tensors = hf_tensors("gpt", program, params)
    if stored_head:
        tensors["lm_head.weight"] = tensors["transformer.wte.weight"].copy()  # tied: not used
    return write_hf(folder, "gpt", hf_config("gpt", program.config), tensors)


def test_exactc_export_from_a_checkpoint_names_it_and_the_tensors_it_does_not_use(capsys, tmp_path):
    for stored_head, note in ((True, "; not used by exactc: lm_head.weight"), (False, "")):
        folder = gpt_checkpoint(tmp_path / f"gpt-{stored_head}", stored_head)
        target = tmp_path / f"out-{stored_head}"
        code, out, err = run_cli(capsys, "export", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32",
                              "-o", str(target))
        assert code == 0 and err == ""
        m = json.loads((target / "exactc.json").read_text())
        first, second = out.splitlines()
        assert first.startswith(f"exported gpt.forward at f32 to {target} in ")
        assert second == f"parameters from {folder} (hf, {m['parameters']} values){note}"
        seconds = float(first.split(" in ")[1].split(" s: ")[0])
        assert 0 < seconds < 600  # the time the export took, not a clock reading
    # the model given is checked against the checkpoint's; none given: the checkpoint's
    code, out, err = run_cli(capsys, "info", "llama", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32")
    assert (code, out) == (2, "") and err == (f"exactc info: error: checkpoint {folder} holds a gpt model "
                                              f"({folder.name}); not llama\n")
    code, out, err = run_cli(capsys, "info", "gpt", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32")
    assert code == 0 and out.startswith("model          gpt.forward at f32\n")


def test_exactc_run_options_seed_set_block_and_inputs(capsys, tmp_path, monkeypatch):
    from exactc import programs

    def run(*argv):
        out = tmp_path / f"o{len(list(tmp_path.iterdir()))}"
        code, printed, err = run_cli(capsys, "run", *SMALL_GPT, *argv, "-o", str(out))
        assert (code, err) == (0, ""), err
        return {p.stem: np.load(p) for p in out.glob("*.npy")}

    def no_build(*args, **kwargs):
        raise AssertionError("the reference backend builds no program")

    monkeypatch.setattr(programs, "exported", no_build)  # the default backend is the reference
    plain = run()
    assert_bits_equal(run("--seed", "0")["logits"], plain["logits"])  # 0 is the default seed
    assert not np.array_equal(run("--seed", "1")["logits"], plain["logits"])
    quantized = run("--weights", "q8", "--block", "16")
    assert not np.array_equal(quantized["logits"], plain["logits"])
    # an input file whose path holds "=": the name is what comes before the first one
    ids = tmp_path / "ids=1.npy"
    np.save(ids, np.array([3, 1, 2], dtype=np.int32))
    assert run("--input", f"input_ids={ids}")["logits"].shape[0] == 3
    pickled = tmp_path / "objects.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "--input", f"input_ids={pickled}", "-o", str(tmp_path / "x"))
    assert (code, out) == (2, "") and err == (f"exactc run: error: --input input_ids: cannot read {pickled}: Object "
                                              "arrays cannot be loaded when allow_pickle=False\n")
    # an output that cannot be written: a folder in its place
    blocked = tmp_path / "blocked"
    (blocked / "logits.npy").mkdir(parents=True)
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "-o", str(blocked))
    assert (code, out) == (2, "") and err == f"exactc run: error: -o {blocked}: cannot write logits.npy (Is a directory)\n"


def test_exactc_info_takes_the_default_config_and_refuses_a_field_written_twice(capsys):
    from exactc.exporter.export import ExportSpec

    code, out, err = run_cli(capsys, "info", "gpt", "--entry", "forward", "--dtype", "f32")
    assert code == 0 and err == ""
    m = ExportSpec("gpt", "forward", "f32", 0, {}).prepare().manifest()
    assert f"parameters     {m['parameters']}\n" in out
    code, out, err = run_cli(capsys, "info", *SMALL_GPT, "--set", "layers=2=3")
    assert (code, out) == (2, "") and err.startswith("exactc info: error: ") and "layers" in err and "'2=3'" in err


def test_exactc_run_by_the_c_backend_and_check_in_process(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "-o", str(tmp_path / "ref"))
    assert code == 0
    code, out, err = run_cli(capsys, "run", *SMALL_GPT, "--backend", "c", "--cc", "gcc", "-o", str(tmp_path / "c"))
    assert (code, err) == (0, "") and out == f"wrote {tmp_path / 'c' / 'logits'}.npy\n"
    assert_bits_equal(np.load(tmp_path / "c" / "logits.npy"), np.load(tmp_path / "ref" / "logits.npy"), "logits")

    root = tmp_path / "g"
    assert run_cli(capsys, "export", *SMALL_GPT, "-o", str(root))[0] == 0
    code, out, err = run_cli(capsys, "check", str(root))
    assert code == 0 and out.endswith("conformance: bit-identical\n") and "build:" not in out
    expected = root / "conformance" / "expected" / "logits.npy"
    logits = np.load(expected)
    logits.flat[0] = -logits.flat[0]
    np.save(expected, logits)
    code, out, err = run_cli(capsys, "check", str(root), "--cc", "gcc", "--no-openmp")
    assert code == 1
    assert "conformance: FAILED\nbuild: make -C " in out and "CC=gcc" in out and "OPENMP=0" in out


@pytest.mark.parametrize("command", ["run", "embed", "generate"])
def test_every_program_command_refuses_an_unknown_contract_as_export_does(capsys, command):
    """--contract takes the realizations export takes, and refuses others in export's words."""
    from exactc import cli

    argv = {"run": [*SMALL_GPT, "-o", "out"], "embed": ["a cat"], "generate": ["gpt", "--prompt-ids", "1"]}[command]
    said = {}
    for name, args in ((command, argv), ("export", [*SMALL_GPT, "-o", "out"])):
        with pytest.raises(SystemExit) as exited:
            cli.main([name, *args, "--contract", "fast"])
        out, err = capsys.readouterr()
        assert (exited.value.code, out) == (2, "")
        said[name] = err.splitlines()[-1]
    assert said[command] == said["export"].replace("exactc export", f"exactc {command}") == (
        f"exactc {command}: error: argument --contract: invalid choice: 'fast' (choose from 'off', 'fma')")


def test_exactc_run_with_contract_fma_gives_the_fused_reference_bits_by_the_c_backend(capsys, tmp_path):
    """`exactc run --contract fma`: the C program and the reference in the fused
    realization, bit for bit, and other bits than the default realization's."""
    outputs = {}
    for name, extra in (("ref", []), ("c", ["--backend", "c", "--cc", "gcc"])):
        for contract in ("off", "fma"):
            out = tmp_path / f"{name}-{contract}"
            assert run_cli(capsys, "run", *SMALL_GPT, *extra, "--contract", contract, "-o", str(out))[0] == 0
            outputs[name, contract] = np.load(out / "logits.npy")
    assert_bits_equal(outputs["ref", "fma"], outputs["c", "fma"], "fused logits")
    assert not np.array_equal(outputs["ref", "fma"], outputs["ref", "off"])


# ---- the command line in process, continued (commands.py): --plan, the unused tensors, run's
# --cc


def test_exactc_export_follows_a_plan_file_and_every_command_refuses_one_that_does_not_fit(capsys, tmp_path):
    """--plan FILE reaches the export: linear_qkv split in two pieces is printed with its
    driver, and exactc.json says the export is planned; a plan whose pieces do not cover
    the rows is refused whole, with exit 2, by export, run and info alike, nothing written."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nests": {"linear_qkv": {"split": {"depth": 0, "pieces": [[0, 1], [1, 2]], "of": 2}}}}))
    planned, plain = tmp_path / "planned", tmp_path / "plain"
    assert run_cli(capsys, "export", *SMALL_GPT, "--plan", str(plan), "-o", str(planned))[0] == 0
    assert run_cli(capsys, "export", *SMALL_GPT, "-o", str(plain))[0] == 0
    assert "linear_qkv_split(" in (planned / "model.c").read_text()
    assert "linear_qkv_split(" not in (plain / "model.c").read_text()
    assert json.loads((planned / "exactc.json").read_text())["planned"] is True
    assert json.loads((plain / "exactc.json").read_text())["planned"] is False

    plan.write_text(json.dumps({"nests": {"linear_qkv": {"split": {"depth": 0, "pieces": [[0, 1], [1, 3]], "of": 2}}}}))
    refusal = ("plan: nest linear, field split.pieces: piece [1,3) is not within [0,2] with lo <= hi; the pieces "
               "must cover m in [0,2) exactly once (parts of `of`)\n")
    for command, output in (("export", ["-o", str(tmp_path / "bad")]), ("run", ["-o", str(tmp_path / "bad")]),
                            ("info", [])):
        assert run_cli(capsys, command, *SMALL_GPT, "--plan", str(plan), *output) == (
            2, "", f"exactc {command}: error: {refusal}")
        assert not (tmp_path / "bad").exists()


def test_exactc_export_names_every_tensor_it_does_not_use_separated_by_commas(capsys, tmp_path):
    """An older GPT-2 folder: its causal-mask buffers h.N.attn.bias and a tied lm_head.weight
    are read past, and export's second line names them all, sorted, ", " between them."""
    from test_checkpoints import drawn, hf_config, hf_tensors, write_hf

    program, params = drawn("gpt")  # 2 layers
    tensors = hf_tensors("gpt", program, params)
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"].copy()  # tied: not used
    mask = np.tril(np.ones((program.config.positions,) * 2, dtype=np.float32))[None, None]
    for layer in (1, 0):
        tensors[f"h.{layer}.attn.bias"] = mask
    folder = write_hf(tmp_path / "gpt2", "gpt", hf_config("gpt", program.config), tensors)
    target = tmp_path / "out"
    code, out, err = run_cli(capsys, "export", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32",
                          "-o", str(target))
    assert (code, err) == (0, "")
    m = json.loads((target / "exactc.json").read_text())
    assert out.splitlines()[1] == (f"parameters from {folder} (hf, {m['parameters']} values); not used by exactc: "
                                   "h.0.attn.bias, h.1.attn.bias, lm_head.weight")


def test_exactc_run_by_the_c_backend_builds_with_cc_unless_told_otherwise(capsys, tmp_path, monkeypatch):
    """The Build `exactc run --backend c` hands to programs.exported: CC=cc by default,
    --cc's compiler when given (here a stand-in for the build that reports the compiler it
    was given, exit 1, no output folder left)."""
    from exactc import programs

    def exported(spec, build=programs.Build(), *args, **kwargs):  # the real one's default
        raise programs.ProgramBuildError(f"CC={build.cc}: the build this test stands in for")

    monkeypatch.setattr(programs, "exported", exported)
    for given, cc in (([], "cc"), (["--cc", "gcc"], "gcc")):
        assert run_cli(capsys, "run", *SMALL_GPT, "--backend", "c", *given, "-o", str(tmp_path / "out")) == (
            1, "", f"exactc run: error: CC={cc}: the build this test stands in for\n")
        assert not (tmp_path / "out").exists()


def test_exactc_run_by_the_c_backend_builds_the_automatic_plan_unless_told_otherwise(capsys, tmp_path, monkeypatch):
    """The export `exactc run --backend c` hands to programs.exported: --plan auto by default
    (the fast program; a plan changes no bit), the plan given otherwise, and --cc's compiler
    as the one whose tune table `auto` reads (a stand-in for the build reports them)."""
    from exactc import programs

    def exported(spec, build=programs.Build(), *args, **kwargs):
        raise programs.ProgramBuildError(f"plan {spec.plan}, tuned for {spec.cc}, {spec.loaded_plan().__class__.__name__}")

    monkeypatch.setattr(programs, "exported", exported)
    monkeypatch.setenv("EXACTC_TUNED", "")
    for given, plan in (([], "auto, tuned for gcc, AutoPlan"), (["--plan", "none"], "none, tuned for gcc, NoneType")):
        assert run_cli(capsys, "run", *SMALL_GPT, "--backend", "c", "--cc", "gcc", *given, "-o",
                       str(tmp_path / "out")) == (1, "", f"exactc run: error: plan {plan}\n")


def test_exactc_run_by_the_c_backend_refuses_a_cc_that_is_no_compiler(capsys, tmp_path):
    """--cc /bin/false: its --version fails before anything is exported or built; exit 1,
    the whole line, no output folder."""
    assert run_cli(capsys, "run", *SMALL_GPT, "--backend", "c", "--cc", "/bin/false", "-o", str(tmp_path / "out")) == (
        1, "", "exactc run: error: CC=/bin/false: `/bin/false --version` exited with 1; is it a C compiler?\n")
    assert not (tmp_path / "out").exists()
