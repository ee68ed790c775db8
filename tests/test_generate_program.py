"""The exported decode program's whole generation loop (`model generate`,
runtime/exactc_generate.c) against the reference's loop (docs/semantics.md section 16):
the prompt and the seed in, the same tokens, probability bits and step uniforms out, on
1 and 2 threads; and its refusals, one line each, nothing written.

The program feeds the prompt through decode steps, where the reference runs prefill:
that both give the same bits is the cache property itself, checked here end to end.
"""

from __future__ import annotations

import functools
import os
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactc.exporter import export, models
from exactc.exporter.reference import walk
from exactc.exporter.reference.sampling import SamplingOptions
from exactc.runtime import keys_twin
from exactc import programs as built
from exactc.verify import conformance
from exactc.verify.kernels import record_checks
from test_generation import TINY, parameters, programs, run
from test_generate import less_timing

CAMPAIGN = os.environ.get("HYPOTHESIS_PROFILE") == "campaign"
SEED = 5  # the parameters test_generation's reference runs draw


@functools.lru_cache(maxsize=None)
def decode_program(model: str, site: str, plan: str | None = None) -> built.Program:
    """The decode program, plain or under the automatic plan (lanes, splits, and its
    linear weights laid out as panels at load: exporter/printer/prepack.py)."""
    return built.exported(export.ExportSpec(model, "decode", site, SEED, TINY[model], plan=plan), built.Build())


def write_request(folder, prompt, seed: int | None = None, key: np.ndarray | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "prompt_ids.npy", np.asarray(prompt, np.int32))
    if seed is not None:
        np.save(folder / "seed.npy", np.array([seed], np.uint64).view(np.int64))
    if key is not None:
        np.save(folder / "key.npy", np.asarray(key, np.uint32).view(np.int32))
    return folder


def flags(count: int, options: SamplingOptions, stop: int | None) -> list[str]:
    return (["-n", str(count), "--temperature", repr(options.temperature), "--top-k", str(options.top_k),
             "--top-p", repr(options.top_p)] + (["--stop", str(stop)] if stop is not None else []))


@st.composite
def requests(draw):
    """A model and site, a prompt of 1 to 4 tokens, a count that fits tokens = 7, sampling
    options (greedy, top-k of 1, nucleus), a stop token or none, 1 or 2 threads, the plain
    program or the automatic plan's."""
    model = draw(st.sampled_from(sorted(TINY)))
    site = draw(st.sampled_from(("f32", "bf16")))
    prompt = draw(st.lists(st.integers(0, 39), min_size=1, max_size=4))
    count = draw(st.integers(1, 7 - len(prompt)))
    options = SamplingOptions(temperature=draw(st.sampled_from((0.0, 0.7, 1.5))),
                              top_k=draw(st.sampled_from((0, 1, 5))), top_p=draw(st.sampled_from((1.0, 0.8))))
    stop = draw(st.one_of(st.none(), st.integers(0, 39)))
    plan = draw(st.sampled_from((None, "auto")))
    return (model, site, prompt, count, draw(st.integers(0, 2**64 - 1)), options, stop, draw(st.sampled_from((1, 2))),
            plan)


@settings(max_examples=60 if CAMPAIGN else 16, deadline=None)
@given(requests())
def test_the_program_generates_the_reference_tokens(tmp_path_factory, request):
    model, site, prompt, count, seed, options, stop, threads, plan = request
    want = run(model, site, prompt, count, seed, options, stop=stop)
    program = decode_program(model, site, plan)
    folder = tmp_path_factory.mktemp("generate")
    streamed = []
    program.generate(write_request(folder / "in", prompt, seed), folder / "out", flags(count, options, stop),
                     threads=threads, on_token=streamed.append)
    got = conformance.load_outputs(folder / "out")
    same = (got["tokens"].tolist() == want.tokens == streamed
            and got["probabilities"].tobytes() == np.array(want.probabilities, np.float64).tobytes()
            and got["uniforms"].tobytes() == np.array(want.uniforms, np.float64).tobytes())
    record_checks("generate", f"{model} {site} model generate", ["equal" if same else "mismatch"])
    assert same, (f"{model} {site} plan={plan} prompt={prompt} count={count} seed={seed} {options} stop={stop} "
                  f"threads={threads}: program {got['tokens'].tolist()} {got['probabilities'].tolist()}, "
                  f"reference {want.tokens} {want.probabilities}; rerun: {program.path} generate "
                  f"{program.root / 'weights.safetensors'} IN OUT {' '.join(flags(count, options, stop))}")


def test_a_key_file_is_the_key_the_seed_gives(tmp_path):
    program = decode_program("llama", "f32")
    options = flags(5, SamplingOptions(temperature=1.0), None)
    program.generate(write_request(tmp_path / "seed", [3, 4], seed=2**64 - 1), tmp_path / "a", options)
    program.generate(write_request(tmp_path / "key", [3, 4], key=keys_twin.key_from_seed(2**64 - 1)),
                     tmp_path / "b", options)
    a, b = conformance.load_outputs(tmp_path / "a"), conformance.load_outputs(tmp_path / "b")
    assert a["uniforms"].tobytes() == b["uniforms"].tobytes() and a["tokens"].tolist() == b["tokens"].tolist()
    want = run("llama", "f32", [3, 4], 5, 2**64 - 1, SamplingOptions(temperature=1.0))
    assert a["tokens"].tolist() == want.tokens


def generate_refusal(tmp_path, extra: list[str], prompt=(3, 4), seed: int | None = 1, key=None, files=(),
                     drop=()):
    """Run a request the program must refuse: the prompt, seed or key written, then `files`
    written over them and `drop` removed."""
    program = decode_program("gpt", "f32")
    folder = write_request(tmp_path / "in", list(prompt), seed, key)
    for name, array in files:
        np.save(folder / name, array)
    for name in drop:
        (folder / name).unlink()
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run([str(program.path), "generate", str(program.root / "weights.safetensors"), str(folder),
                           str(out), *extra], capture_output=True, text=True)
    return done, sorted(p.name for p in out.iterdir())


@pytest.mark.parametrize("extra,code,words", [
    (["-n", "0"], 2, "-n 0: give an integer >= 1"),
    (["-n", "two"], 2, "-n two: give an integer >= 1"),
    (["--temperature", "-1"], 2, "temperature"),
    (["--temperature", "nan"], 2, "--temperature nan: give a finite decimal number"),
    (["--top-p", "1.5"], 2, "top_p"),
    (["--top-k"], 2, "--top-k: a value must follow it"),
    (["--seed", "3"], 2, "--seed: not an option of generate"),
    (["--stop", "40"], 1, "--stop 40 is outside [0, 40)"),
    (["-n", "6"], 1, "the prompt's 2 tokens and 6 new ones make 8 positions; the program takes at most tokens=7"),
])
def test_the_program_refuses_a_bad_request_in_one_line(tmp_path, extra, code, words):
    done, written = generate_refusal(tmp_path, extra)
    assert done.returncode == code, done.stderr
    assert words in done.stderr.splitlines()[0], done.stderr
    assert written == [] and done.stdout == ""


@pytest.mark.parametrize("case,words", [
    (dict(drop=["prompt_ids.npy"]), "prompt_ids.npy: no such file"),
    (dict(files=[("prompt_ids.npy", np.zeros(0, np.int32))]), "give a 1-d int32 or int64 array of at least one id"),
    (dict(prompt=(3, 40)), "id 40 at index 1 is outside [0, 40)"),
    (dict(files=[("prompt_ids.npy", np.array([1.0, 2.0]))]), "give a 1-d int32 or int64 array"),
    (dict(seed=None), "holds neither seed.npy nor key.npy"),
    (dict(key=keys_twin.key_from_seed(1)), "holds key.npy and seed.npy; give one"),
    (dict(seed=None, files=[("key.npy", np.zeros(7, np.int32))]), "key.npy: give an int32 array of 8 elements"),
    (dict(seed=None, files=[("seed.npy", np.zeros(1, np.int32))]), "seed.npy: give an int64 array of one element"),
], ids=["no-prompt", "empty-prompt", "id-outside", "float-prompt", "no-key", "key-and-seed", "short-key",
        "int32-seed"])
def test_the_program_refuses_bad_inputs_in_one_line(tmp_path, case, words):
    done, written = generate_refusal(tmp_path, ["-n", "2"], **case)
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.splitlines()) == 1 and words in done.stderr, done.stderr
    assert written == [] and done.stdout == ""


def test_a_step_reads_its_position_and_writes_its_cache_rows_in_place(tmp_path):
    """exactc_main on a decode step: T from the input `position`, the outputs k and v the
    caches written over past_k and past_v (model.c's IN_PLACE), only row T of each run
    new, the logits the reference's; a position outside [1, tokens - 1] refused by name."""
    program = decode_program("gpt", "f32")
    decode = programs("gpt")["decode"]
    drawn = models.draw_inputs(decode, 1, 4)
    inputs = export.check_inputs(decode, "f32", drawn)
    want = walk.evaluate(decode, "f32", parameters("gpt", "f32"), inputs)
    folder = tmp_path / "in"
    folder.mkdir()
    for name, array in inputs.items():
        np.save(folder / f"{name}.npy", array)
    program.run_or_fail([(folder, tmp_path / "out")])
    got = conformance.load_outputs(tmp_path / "out")
    assert got["logits"].tobytes() == want["logits"].tobytes()
    for name, past in (("k", "past_k"), ("v", "past_v")):
        assert got[name].tobytes() == want[name].tobytes()
        assert np.delete(got[name], 4, axis=2).tobytes() == np.delete(inputs[past], 4, axis=2).tobytes()
    np.save(folder / "position.npy", np.array([7], np.int32))
    done = program.run([(folder, tmp_path / "refused")])
    assert done.returncode == 1 and "position.npy: input position: give one int32 in [1, 6]" in done.stderr


def test_the_program_stops_after_the_stop_token(tmp_path):
    """Greedy, so the run without a stop is known: its third token as the stop ends the
    run there, the stop token kept (section 16), as the reference's loop does."""
    program = decode_program("gpt", "f32")
    greedy = SamplingOptions(temperature=0.0)
    free = run("gpt", "f32", [7], 5, 0, greedy)
    stop = free.tokens[2]
    want = run("gpt", "f32", [7], 5, 0, greedy, stop=stop)
    program.generate(write_request(tmp_path / "in", [7], 0), tmp_path / "out", flags(5, greedy, stop))
    got = conformance.load_outputs(tmp_path / "out")["tokens"].tolist()
    assert got == want.tokens == free.tokens[:free.tokens.index(stop) + 1]
    assert len(got) < 5


# ---- the campaign's side (slow: make verify runs it, make test skips it) -------------------
# Each program builds in about a minute: the exported prefill and decode programs against
# the reference, and `exactc generate --backend c` against `--backend reference`, byte for
# byte, at every type and host.


@pytest.mark.slow
@pytest.mark.parametrize("model,site", [(m, s) for m in sorted(TINY) for s in ("f32", "bf16")])
def test_exported_prefill_and_decode_match_the_reference(tmp_path, model, site):
    """The exported prefill and decode programs, structured and straight-line hosts, at
    every run-time length the export's conformance/ holds, on 1 and 2 threads, against
    the reference."""
    for entry, straight in (("prefill", False), ("decode", False), ("prefill", True), ("decode", True)):
        prepared = export.ExportSpec(model, entry, site, 3, TINY[model], straight=straight).prepare()
        program = built.make(export.write(prepared, tmp_path / f"{entry}{'-straight' if straight else ''}"),
                             built.Build())
        for threads in (1, 2):
            try:
                conformance.assert_conforms(program, prepared, threads=threads)
                status = "equal"
            except conformance.ProgramMismatch as mismatch:
                status = "mismatch"
                report = str(mismatch)
            host = "straight-line" if straight else "structured"
            record_checks("generate", f"{model} {entry} {host}", [status] * (1 + len(prepared.lengths)))
            assert status == "equal", report


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_generate_command_gives_the_same_bytes_from_both_backends(tmp_path, monkeypatch, model):
    """--backend c against --backend reference: byte-identical --json (less the program's
    timing at its end), sampled and greedy, on 1 and 2 threads."""
    from exactc import cli

    argv = ["generate", model, "--set", "layers=2", "--set", "dim=16", "--set", "heads=2", "--set", "vocab=40",
            "--set", "mlp=20", "--prompt-ids", "4,5", "-n", "5"]
    if model == "llama":
        argv += ["--set", "kv_heads=1"]
    for options in (["--temperature", "0"], ["--temperature", "0.9", "--top-k", "8", "--seed", "3"]):
        assert cli.main([*argv, *options, "--json", str(tmp_path / "ref.json")]) == 0
        want = (tmp_path / "ref.json").read_bytes()
        for threads in ("1", "2"):
            monkeypatch.setenv("OMP_NUM_THREADS", threads)
            assert cli.main([*argv, *options, "--backend", "c", "--json", str(tmp_path / "c.json")]) == 0
            same = less_timing(tmp_path / "c.json") == want
            record_checks("generate", f"{model} exactc generate --backend c", ["equal" if same else "mismatch"])
            assert same
