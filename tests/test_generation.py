"""Generation with a key/value cache (docs/semantics.md section 16): the cache gives the
bits of recomputing the whole sequence at every step, each step draws from its own child
key, the stop token and the length bound are honoured, and the decode step's run-time
position reaches the positions it must (rope's pos0, GPT's position row).

Everything here runs in the reference backend on tiny configs (a fraction of a second an
example); the exported prefill and decode programs against the reference are make
verify's `generate:` campaign (tests/test_generate_program.py's slow tests).
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactc.exporter import graph, models

from exactc.exporter.reference import walk
from exactc.exporter.reference.generation import GenerationError, generate
from exactc.exporter.reference.sampling import SamplingOptions
from exactc.runtime import keys_twin
from exactc.verify.kernels import record_checks
from test_generate import less_timing

CAMPAIGN = os.environ.get("HYPOTHESIS_PROFILE") == "campaign"

TINY = {
    "gpt": {"vocab": 40, "positions": 8, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 7},
    "llama": {"vocab": 40, "dim": 16, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 20, "tokens": 7},
}


@functools.lru_cache(maxsize=None)
def programs(model: str) -> dict[str, graph.Program]:
    return {e: models.build(model, e, TINY[model]) for e in ("prefill", "decode", "forward")}


@functools.lru_cache(maxsize=None)
def parameters(model: str, site: str) -> dict[str, np.ndarray]:
    return models.draw_parameters(programs(model)["forward"], 5, site)


def run(model: str, site: str, prompt, count: int, seed: int, options: SamplingOptions, **kwargs):
    p = programs(model)
    return generate(p["prefill"], p["decode"], site, parameters(model, site), prompt, count,
                    keys_twin.key_from_seed(seed), options, **kwargs)


@st.composite
def requests(draw):
    """A model, a site, a prompt of 1 to 4 tokens and a count that fits tokens = 7."""
    model = draw(st.sampled_from(sorted(TINY)))
    site = draw(st.sampled_from(("f64", "f32", "bf16")))
    prompt = draw(st.lists(st.integers(0, 39), min_size=1, max_size=4))
    count = draw(st.integers(1, 7 - len(prompt)))
    options = SamplingOptions(temperature=draw(st.sampled_from((0.0, 0.7, 1.5))), top_k=draw(st.sampled_from((0, 5))))
    return model, site, prompt, count, draw(st.integers(0, 2**64 - 1)), options


@settings(max_examples=60 if CAMPAIGN else 8, deadline=None)
@given(requests())
def test_cache_gives_the_bits_of_recompute(request):
    """Every step's logits from prefill and decode equal the last row of forward run on
    the whole sequence so far, bit for bit, and so do the tokens drawn from them."""
    model, site, prompt, count, seed, options = request
    cached = run(model, site, prompt, count, seed, options)
    full = run(model, site, prompt, count, seed, options, recompute=programs(model)["forward"])
    same = [a.tobytes() == b.tobytes() for a, b in zip(cached.logits, full.logits)]
    record_checks("generate", f"{model} cache", ["equal" if s else "mismatch" for s in same])
    assert cached.tokens == full.tokens
    assert cached.probabilities == full.probabilities
    for step, equal in enumerate(same):
        assert equal, f"{model} {site}: step {step}'s logits differ ({request})"


def test_each_step_draws_from_its_own_child_key():
    """Step i's u is the first draw of fold_in(key, i) (section 16), not a shared key's."""
    out = run("llama", "f32", [1, 2], 5, 11, SamplingOptions(temperature=1.0))
    key = keys_twin.key_from_seed(11)
    want = [float(keys_twin.uniform(keys_twin.draw(keys_twin.fold_in(key, i), 0, 0, 0))) for i in range(5)]
    assert out.uniforms == want
    assert len(set(want)) == 5


def test_the_stop_token_ends_generation_and_is_kept():
    free = run("gpt", "f32", [3], 6, 2, SamplingOptions(temperature=1.0))
    stop = free.tokens[2]
    first = free.tokens.index(stop)
    stopped = run("gpt", "f32", [3], 6, 2, SamplingOptions(temperature=1.0), stop=stop)
    assert stopped.tokens == free.tokens[: first + 1]


@pytest.mark.parametrize("prompt,count,stop,rule", [
    ([], 1, None, "empty"),
    ([40], 1, None, "outside"),
    ([1, 2, 3], 5, None, "at most tokens=7"),
    ([1], 0, None, ">= 1"),
    ([1], 1, 99, "stop token"),
])
def test_requests_outside_the_bounds_are_refused(prompt, count, stop, rule):
    with pytest.raises(GenerationError, match=rule):
        run("gpt", "f32", prompt, count, 0, SamplingOptions(), stop=stop)


def test_a_decode_step_is_the_last_row_of_forward_at_every_position():
    """decode at each run-time length T (its token at position T) against forward at
    T + 1: rope's run-time pos0 and GPT's position row at every position up to T_max."""
    for model in sorted(TINY):
        p = programs(model)
        params = parameters(model, "f32")
        ids = np.arange(1, 8, dtype=np.int32)
        pre = walk.evaluate(p["prefill"], "f32", params, {"input_ids": ids})  # every position's rows
        capacity = p["decode"].config.tokens
        for T in range(1, 7):
            # rows T on of the cache hold garbage (NaN): a step reads rows 0 … T only
            past = {name: np.full(pre[name].shape[:2] + (capacity,) + pre[name].shape[3:], np.nan, np.float32)
                    for name in ("k", "v")}
            for name in past:
                past[name][:, :, :T] = pre[name][:, :, :T]
            step = walk.evaluate(p["decode"], "f32", params, {
                "token": ids[T:T + 1], "position": np.array([T], np.int32),
                "past_k": past["k"], "past_v": past["v"]})
            full = walk.evaluate(p["forward"], "f32", params, {"input_ids": ids[:T + 1]})
            assert step["logits"][0].tobytes() == full["logits"][-1].tobytes(), (model, T)
            # the step's keys and values went to row T, every other row as it came
            for name in past:
                assert step[name][:, :, T].tobytes() == pre[name][:, :, T].tobytes(), (model, T, name)
                assert np.delete(step[name], T, axis=2).tobytes() == np.delete(past[name], T, axis=2).tobytes()


def test_decode_needs_room_for_one_cached_position():
    with pytest.raises(models.ModelError, match="tokens >= 2"):
        models.build("gpt", "decode", dict(TINY["gpt"], tokens=1))


# ---- exactc generate ------------------------------------------------------------------------

SMALL_LLAMA = ["llama", "--set", "layers=2", "--set", "dim=16", "--set", "heads=4", "--set", "kv_heads=2",
               "--set", "vocab=40", "--set", "mlp=20"]


def test_generate_command_writes_the_document(tmp_path, capsys):
    from exactc import cli

    doc = tmp_path / "run.json"
    assert cli.main(["generate", *SMALL_LLAMA, "--prompt-ids", "1,2,3", "-n", "4", "--temperature", "0.7",
                     "--seed", "9", "--json", str(doc)]) == 0
    got = json.loads(doc.read_text())
    assert got["prompt_ids"] == [1, 2, 3] and len(got["new_tokens"]) == 4
    assert [s["token"] for s in got["steps"]] == got["new_tokens"]
    assert capsys.readouterr().out.split() == [str(t) for t in got["new_tokens"]]  # streamed as drawn
    p = programs_for(SMALL_LLAMA)
    want = generate(p["prefill"], p["decode"], "f32", models.draw_parameters(p["prefill"], 0, "f32"), [1, 2, 3], 4,
                    keys_twin.key_from_seed(9), SamplingOptions(temperature=0.7))
    assert got["new_tokens"] == want.tokens and [s["probability"] for s in got["steps"]] == want.probabilities


def test_generate_command_serves_a_gpt_of_fewer_positions_than_the_default_length(capsys):
    """T_max comes from the prompt and -n; the vocabulary, read before the prompt, must not
    check the config at the default 16 positions (a GPT of 8 was refused)."""
    from exactc import cli

    gpt = ["gpt", "--set", "layers=1", "--set", "dim=8", "--set", "heads=2", "--set", "vocab=16", "--set", "mlp=8",
           "--set", "positions=8"]
    assert cli.main(["generate", *gpt, "--prompt-ids", "1,2", "-n", "3"]) == 0
    assert len(capsys.readouterr().out.split()) == 3
    assert cli.main(["generate", *gpt, "--set", "tokens=9", "--prompt-ids", "1", "-n", "1"]) == 2  # asked for: refused
    assert "tokens 9 > positions 8" in capsys.readouterr().err


def programs_for(argv: list[str]) -> dict[str, graph.Program]:
    overrides = dict(item.split("=") for item in argv[2::2])
    overrides["tokens"] = "7"
    return {e: models.build(argv[0], e, overrides) for e in ("prefill", "decode")}


@pytest.mark.parametrize("extra,rule", [
    ([], "give the prompt once"),
    (["--prompt", "hello"], "needs a checkpoint with a tokenizer.json"),
    (["--prompt-ids", "1,x"], "integers separated by commas"),
    (["--prompt-ids", "1", "--top-p", "2"], "--top-p 2.0: must be in [0, 1]"),
])
def test_generate_command_refuses_with_one_line(capsys, extra, rule):
    from exactc import cli

    assert cli.main(["generate", *SMALL_LLAMA, "-n", "2", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and rule in err[0], err


# Options the reference took and the C program refused with its usage message: one
# validation judges them for both backends, with the same bounds and the same line.
@pytest.mark.parametrize("extra,line", [
    (["--top-k", "99999999999999999999"], "--top-k 99999999999999999999: must be an integer in [0, 2^63)"),
    (["-n", "100000000000000000000"], "-n 100000000000000000000: give an integer from 1 to 2,147,483,646"),
    (["-n", "0"], "-n 0: give an integer from 1 to 2,147,483,646"),
    (["--top-p", "1.5"], "--top-p 1.5: must be in [0, 1]"),
    (["--temperature", "nan"], "--temperature nan: must be finite and >= 0"),
])
def test_generate_command_refuses_an_option_the_same_way_in_both_backends(capsys, extra, line):
    from exactc import cli

    for backend in ("reference", "c"):
        assert cli.main(["generate", *SMALL_LLAMA, "--prompt-ids", "1", *extra, "--backend", backend]) == 2, backend
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"exactc generate: error: {line}"), (backend, err)


def test_generate_command_takes_subnormal_options_in_both_backends(tmp_path, capsys):
    """A temperature or top-p of 1e-320 is a number (the C program's strtod says ERANGE for
    it): both backends generate, with the same document."""
    from exactc import cli

    docs = {}
    for backend in ("reference", "c"):
        docs[backend] = tmp_path / f"{backend}.json"
        argv = ["generate", *SMALL_LLAMA, "--prompt-ids", "1,2", "-n", "3", "--temperature", "1e-320", "--top-p",
                "1e-320", "--top-k", str(2**63 - 1), "--backend", backend, "--json", str(docs[backend])]
        assert cli.main(argv) == 0, capsys.readouterr().err
    assert docs["reference"].read_bytes() == less_timing(docs["c"])
    assert json.loads(docs["c"].read_text())["options"]["temperature"] == 1e-320


# ---- the generation loop's request and its listeners (reference/generation.py)


def test_generation_request_bounds_whole():
    from exactc.exporter.reference.generation import GenerationError, check_request
    assert check_request(7, 40, np.array([[1, 2], [3, 39]]), 3, 0) == [1, 2, 3, 39]  # any shape, flat; stop 0
    assert check_request(7, 40, [5], 6, 39) == [5]  # the last token of the vocabulary, the last position
    for prompt, count, stop, message in (
            ([], 1, None, "the prompt is empty; give at least one token"),
            ([1], True, None, "count True must be an integer >= 1"),
            ([1, 2, 3], 5, None, "the prompt's 3 tokens and 5 new ones make 8 positions; the programs take at "
                                 "most tokens=7"),
            ([1], 1, 40, "stop token 40 is outside [0, 40) (the vocabulary)"),
            ([1], 1, -1, "stop token -1 is outside [0, 40) (the vocabulary)")):
        with pytest.raises(GenerationError) as caught:
            check_request(7, 40, prompt, count, stop)
        assert str(caught.value) == message


def test_generation_recompute_runs_forward_and_each_token_is_heard_with_its_probability(monkeypatch):
    from exactc.exporter.reference import generation
    from exactc.exporter.reference.sampling import SamplingOptions
    from exactc.runtime import keys_twin
    p = programs("llama")
    ran = []
    evaluate = generation.walk.evaluate
    monkeypatch.setattr(generation.walk, "evaluate",
                        lambda program, *a: ran.append(program.entry) or evaluate(program, *a))
    options = SamplingOptions(temperature=1.0)
    key = keys_twin.key_from_seed(3)
    out = generation.generate(p["prefill"], p["decode"], "f32", parameters("llama", "f32"), [1, 2], 3, key, options,
                              recompute=p["forward"])
    assert ran == ["forward"] * 3
    heard = []
    run = generation.reference_runner(p, "f32", parameters("llama", "f32"))
    again = generation.run_loop(run, p["prefill"].config, [1, 2], 3, key, options,
                                on_token=lambda token, probability: heard.append((token, probability)))
    assert heard == list(zip(again.tokens, again.probabilities)) and again.tokens == out.tokens
    assert ran[3:] == ["prefill", "decode", "decode"]
