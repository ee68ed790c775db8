"""`exactc generate` in process (exactc/generate.py): the JSON document under every option,
the C backend's document equal to the reference's, a checkpoint's own tokenizer, each token's
text printed as it is drawn, every refusal."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from test_cli import run_cli
from test_commands import gpt_checkpoint

# ---- exactc generate in process: the document whole, the defaults, the C backend


_GEN_LLAMA = ["llama", "--set", "layers=1", "--set", "dim=16", "--set", "heads=4", "--set", "kv_heads=2",
              "--set", "vocab=24", "--set", "mlp=20"]


def _gen_reference(prompt, count, seed, options, stop=None, site="f32", tokens=None):
    from exactc.exporter import models
    from exactc.exporter.reference.generation import generate
    from exactc.runtime import keys_twin
    overrides = dict(item.split("=") for item in _GEN_LLAMA[2::2])
    overrides["tokens"] = str(tokens or max(2, len(prompt) + count))
    p = {e: models.build("llama", e, overrides) for e in ("prefill", "decode")}
    return generate(p["prefill"], p["decode"], site, models.draw_parameters(p["prefill"], 0, site), prompt, count,
                    keys_twin.key_from_seed(seed), options, stop)


def _gen_document(prompt, seed, options, count, stop, site, out):
    from exactc.runtime import keys_twin
    return {"model": "llama", "dtype": site, "seed": seed,
            "key": np.asarray(keys_twin.key_from_seed(seed), "<u4").tobytes().hex(),
            "options": {"temperature": options.temperature, "top_k": options.top_k, "top_p": options.top_p,
                        "max_new_tokens": count, "stop": stop},
            "prompt_ids": list(prompt), "new_tokens": out.tokens,
            "steps": [{"token": t, "probability": p, "u": u}
                      for t, p, u in zip(out.tokens, out.probabilities, out.uniforms)]}


# The members of a C backend's timing (generate.timing): the program's own line, read.
TIMING_FIELDS = {"prompt_tokens", "prompt_seconds", "prompt_tokens_per_second", "new_tokens", "new_seconds",
                 "new_tokens_per_second"}


def less_timing(c_json: Path) -> bytes:
    """A C backend's --json document less its last member, the program's timing: the
    reference's document, byte for byte (its members checked on the way)."""
    doc = json.loads(c_json.read_text())
    assert list(doc)[-1] == "timing" and set(doc["timing"]) == TIMING_FIELDS, doc.get("timing")
    del doc["timing"]
    return (json.dumps(doc, indent=1) + "\n").encode()


def test_generate_document_whole_with_every_option(tmp_path, capsys):
    from exactc import cli
    from exactc.exporter.reference.sampling import SamplingOptions
    seed, options = 2**64 - 1, SamplingOptions(0.8, 5, 0.9)
    want = _gen_reference([3, 1, 4], 5, seed, options, site="bf16")
    stop = want.tokens[2]  # stops there: fewer than 5
    want = _gen_reference([3, 1, 4], 5, seed, options, stop=stop, site="bf16")
    doc = tmp_path / "run.json"
    assert cli.main(["generate", *_GEN_LLAMA, "--prompt-ids", "3,1,4", "-n", "5", "--temperature", "0.8",
                     "--top-k", "5", "--top-p", "0.9", "--seed", str(seed), "--stop", str(stop), "--dtype", "bf16",
                     "--json", str(doc)]) == 0
    assert doc.read_text() == json.dumps(_gen_document([3, 1, 4], seed, options, 5, stop, "bf16", want), indent=1) + "\n"
    assert capsys.readouterr().out == " ".join(map(str, want.tokens)) + " \n"


def test_generate_defaults(tmp_path, capsys):
    from exactc import cli
    from exactc.exporter.reference.sampling import SamplingOptions
    doc = tmp_path / "run.json"
    assert cli.main(["generate", *_GEN_LLAMA, "--prompt-ids", str(tmp_path / "p.npy"), "--json", str(doc)]) == 2
    capsys.readouterr()
    np.save(tmp_path / "p.npy", np.array([2, 7], np.int64))
    assert cli.main(["generate", *_GEN_LLAMA, "--prompt-ids", str(tmp_path / "p.npy"), "--json", str(doc)]) == 0
    want = _gen_reference([2, 7], 16, 0, SamplingOptions())
    assert json.loads(doc.read_text()) == _gen_document([2, 7], 0, SamplingOptions(), 16, None, "f32", want)


def test_generate_the_c_backend_gives_the_reference_document(tmp_path, capsys):
    from exactc import cli
    ref, c = tmp_path / "ref.json", tmp_path / "c.json"
    argv = ["generate", *_GEN_LLAMA, "--prompt-ids", "5,6", "-n", "3", "--temperature", "0.9", "--top-k", "4",
            "--top-p", "0.95", "--seed", "11"]
    assert cli.main([*argv, "--json", str(ref)]) == 0
    streamed = capsys.readouterr().out
    assert cli.main([*argv, "--json", str(c), "--backend", "c", "--cc", "gcc"]) == 0
    assert less_timing(c) == ref.read_bytes()
    assert capsys.readouterr().out == streamed  # each token as it is drawn, from the program's loop too
    stop = int(json.loads(ref.read_text())["new_tokens"][0])
    assert cli.main([*argv[:-2], "--seed", "11", "--stop", str(stop), "--json", str(c), "--backend", "c"]) == 0
    assert json.loads(c.read_text())["new_tokens"] == [stop]
    capsys.readouterr()
    for backend in ("reference", "c"):  # the reference's refusal, word for word, before anything is built
        assert cli.main([*argv, "--stop", "999", "--backend", backend]) == 2
        assert capsys.readouterr().err == "exactc generate: error: stop token 999 is outside [0, 24) (the vocabulary)\n"


def test_generate_refusals_whole(tmp_path, capsys):
    from exactc import cli
    cases = [
        (["--prompt-ids", "1", "--seed", str(2**64)], f"--seed {2**64}: give an integer in [0, 2^64)"),
        (["--prompt-ids", "1", "--seed", "-1"], "--seed -1: give an integer in [0, 2^64)"),
        (["--prompt-ids", "1,a"], "--prompt-ids '1,a': write integers separated by commas, e.g. 1,2,3"),
        (["--prompt-ids", "1", "--prompt", "x"], "give the prompt once: --prompt TEXT or --prompt-ids IDS"),
        (["--prompt", "x"], "--prompt needs a checkpoint with a tokenizer.json (or a llama2.c .bin with a "
                            "tokenizer.bin beside it) or --tokenizer PATH; give --prompt-ids"),
        (["--prompt", "x", "--tokenizer", str(tmp_path / "none.bin")],
         f"--tokenizer {tmp_path / 'none.bin'}: no such file; give a tokenizer.json or a tokenizer.bin"),
        (["--prompt-ids", "1", "--json", str(tmp_path / "no" / "such" / "x.json")],
         f"--json {tmp_path / 'no' / 'such' / 'x.json'}: cannot write it (No such file or directory)"),
        # --block and --plan as exactc export refuses them, whichever backend is asked for
        (["--prompt-ids", "1", "--block", "8"], "--block G goes with --weights q8 or q4"),
        (["--prompt-ids", "1", "--weights", "q4", "--block", "7"],
         "--weights q4 --block 7: block 7: a q4 block holds an even number of values (two to a byte)"),
        (["--prompt-ids", "1", "--form", "weight-only"],
         "--form weight-only goes with quantized weights: --weights q8 or q4, or a checkpoint that holds them"),
        (["--prompt-ids", "1", "--plan", str(tmp_path / "none.json")],
         f"plan: nest -, field (file): {tmp_path / 'none.json'}: no such file; give a plan file, `auto` or `none`"),
    ]
    for extra, message in cases:
        assert cli.main(["generate", *_GEN_LLAMA, "-n", "1", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err == f"exactc generate: error: {message}\n", err
    np.save(tmp_path / "f.npy", np.zeros(2, np.float32))
    np.save(tmp_path / "m.npy", np.zeros((1, 2), np.int32))
    for path, held in [("f.npy", "float32 (2,)"), ("m.npy", "int32 (1, 2)")]:
        assert cli.main(["generate", *_GEN_LLAMA, "-n", "1", "--prompt-ids", str(tmp_path / path)]) == 2
        assert capsys.readouterr().err == (f"exactc generate: error: --prompt-ids {tmp_path / path}: holds {held}; "
                                           "give a 1-d array of integers\n")
    (tmp_path / "bad.npy").write_bytes(b"not npy")
    assert cli.main(["generate", *_GEN_LLAMA, "-n", "1", "--prompt-ids", str(tmp_path / "bad.npy")]) == 2
    assert capsys.readouterr().err.startswith(f"exactc generate: error: --prompt-ids {tmp_path / 'bad.npy'}: "
                                              "cannot read it (")
    assert cli.main(["generate", "bert", "--prompt-ids", "1"]) == 2
    assert capsys.readouterr().err == "exactc generate: error: model 'bert': exactc generates with gpt or llama\n"


def test_generate_with_a_tokenizer_json_prints_the_text(tmp_path, capsys):
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers import models as tk_models

    from exactc import cli
    from exactc.exporter.reference.sampling import SamplingOptions
    words = {f"w{i}": i for i in range(24)}
    tok = Tokenizer(tk_models.WordLevel(words, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # joins with spaces
    tok.save(str(tmp_path / "tokenizer.json"))
    doc = tmp_path / "run.json"
    assert cli.main(["generate", *_GEN_LLAMA, "--tokenizer", str(tmp_path / "tokenizer.json"), "--prompt", "w3 w5",
                     "-n", "3", "--seed", "4", "--json", str(doc)]) == 0
    want = _gen_reference([3, 5], 3, 4, SamplingOptions())
    assert json.loads(doc.read_text())["new_tokens"] == want.tokens
    text = tok.decode([3, 5, *want.tokens])
    assert capsys.readouterr().out == text[len(tok.decode([3, 5])):] + "\n"
    (tmp_path / "bad.json").write_text("{}")
    assert cli.main(["generate", *_GEN_LLAMA, "--tokenizer", str(tmp_path / "bad.json"), "--prompt", "w1"]) == 2
    assert capsys.readouterr().err.startswith(f"exactc generate: error: {tmp_path / 'bad.json'}: the tokenizers "
                                              "package cannot read it (")


# ---- the program `exactc generate` builds: the automatic plan, --weights, its timing line


def _exports_planned(cache: Path) -> list[bool]:
    """Whether each program in the cache folder's exports/ was exported with a plan, sorted."""
    return sorted(json.loads((entry / "exactc.json").read_text())["planned"]
                  for entry in (cache / "exports").iterdir() if not entry.name.startswith("."))


def test_generate_builds_the_automatic_plan_by_default_and_one_program_per_plan(tmp_path, capsys, monkeypatch):
    """--backend c builds the decode program with --plan auto unless told otherwise, and the
    cache keeps one program per plan: the plain program built for --plan none is not the one
    a later default run gets. Every plan gives the same tokens."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("EXACTC_CACHE", str(cache))
    monkeypatch.setenv("EXACTC_TUNED", "")  # no tune table: `auto` is the benchmark's layouts
    argv = ["generate", *_GEN_LLAMA, "--prompt-ids", "5,6", "-n", "3", "--seed", "2", "--backend", "c", "--cc", "gcc"]
    tokens = set()
    for plan, planned in ((["--plan", "none"], [False]), ([], [False, True]), (["--plan", "auto"], [False, True])):
        code, out, err = run_cli(capsys, *argv, *plan)
        assert code == 0, err
        assert _exports_planned(cache) == planned, plan
        tokens.add(out)
    assert len(tokens) == 1


@pytest.mark.parametrize("weights", [["--weights", "q8"], ["--weights", "q4", "--block", "8", "--form", "weight-only"]])
def test_generate_quantized_weights_give_the_same_document_from_both_backends(tmp_path, capsys, weights):
    """--weights q8|q4 (in the integer form, the default, or weight-only): the reference runs
    the quantized graph the C program runs, so the documents are the same bytes (less the
    program's timing), and not the float weights'."""
    from exactc import cli
    argv = ["generate", *_GEN_LLAMA, "--prompt-ids", "5,6,7", "-n", "4", "--temperature", "0.9", "--seed", "6"]
    ref, c, floats = tmp_path / "ref.json", tmp_path / "c.json", tmp_path / "float.json"
    assert cli.main([*argv, *weights, "--json", str(ref)]) == 0
    assert cli.main([*argv, *weights, "--json", str(c), "--backend", "c", "--cc", "gcc"]) == 0
    assert less_timing(c) == ref.read_bytes()
    assert cli.main([*argv, "--json", str(floats)]) == 0
    assert json.loads(floats.read_text())["steps"] != json.loads(ref.read_text())["steps"]
    capsys.readouterr()
    for extra, message in (([], "--block G goes with --weights q8 or q4"),  # the C backend refuses as export does
                           (["--weights", "q4"], "--weights q4 --block 7: block 7: a q4 block holds an even number "
                                                 "of values (two to a byte)")):
        assert run_cli(capsys, *argv, *extra, "--block", "7", "--backend", "c", "--cc", "gcc") == (
            2, "", f"exactc generate: error: {message}\n")


def test_generate_with_contract_fma_gives_the_same_document_from_both_backends(tmp_path, capsys):
    """--contract fma: the reference runs the fused prefill and decode the C program runs,
    so the documents are the same bytes (less the program's timing), and not the default's."""
    from exactc import cli
    argv = ["generate", *_GEN_LLAMA, "--prompt-ids", "5,6,7", "-n", "4", "--temperature", "0.9", "--seed", "6"]
    ref, c, default = tmp_path / "ref.json", tmp_path / "c.json", tmp_path / "default.json"
    assert cli.main([*argv, "--contract", "fma", "--json", str(ref)]) == 0
    assert cli.main([*argv, "--contract", "fma", "--json", str(c), "--backend", "c", "--cc", "gcc"]) == 0
    assert less_timing(c) == ref.read_bytes()
    assert cli.main([*argv, "--json", str(default)]) == 0
    assert json.loads(default.read_text())["steps"] != json.loads(ref.read_text())["steps"]
    capsys.readouterr()


def test_generate_prints_the_programs_timing_with_verbose_and_ends_its_json_with_it(tmp_path, capsys):
    """The C program's timing line: on stderr with --verbose only, as numbers at the end of
    the --json document; the reference runs no program and reports none."""
    from exactc import cli, generate
    argv = ["generate", *_GEN_LLAMA, "--prompt-ids", "5,6", "-n", "3", "--seed", "4"]
    doc = tmp_path / "c.json"
    assert cli.main([*argv, "--backend", "c", "--cc", "gcc"]) == 0  # built into the cache, if it was not
    capsys.readouterr()
    assert run_cli(capsys, *argv, "--backend", "c", "--cc", "gcc")[2] == ""
    code, out, err = run_cli(capsys, *argv, "--backend", "c", "--cc", "gcc", "--verbose", "--json", str(doc))
    timing = json.loads(doc.read_text())["timing"]
    assert err == f"exactc generate: {generate.timing_line(timing)}\n"
    assert re.fullmatch(r"exactc generate: 2 prompt tokens in \d+\.\d{6} s \((\d+\.\d\d|-) tokens/s\), 3 new in "
                        r"\d+\.\d{6} s \((\d+\.\d\d|-) tokens/s\)\n", err), err
    assert (timing["prompt_tokens"], timing["new_tokens"]) == (2, 3)
    code, out, err = run_cli(capsys, *argv, "--verbose", "--json", str(tmp_path / "ref.json"))
    assert (code, err) == (0, "") and "timing" not in json.loads((tmp_path / "ref.json").read_text())


def test_generate_reads_the_programs_timing_line():
    """runtime/exactc_generate.c's line as numbers; a rate with nothing to divide is None."""
    from exactc import generate
    from exactc.programs import ProgramRunError
    line = "exactc: generate: 12 prompt tokens in 0.250000 s, 101 new in 2.000000 s (50.00 tokens/s)\n"
    assert generate.timing(line) == {"prompt_tokens": 12, "prompt_seconds": 0.25, "prompt_tokens_per_second": 48.0,
                                     "new_tokens": 101, "new_seconds": 2.0, "new_tokens_per_second": 50.0}
    one = generate.timing("exactc: generate: 1 prompt tokens in 0.000000 s, 1 new in 0.000001 s (0.00 tokens/s)")
    assert (one["prompt_tokens_per_second"], one["new_tokens_per_second"]) == (None, None)
    assert generate.timing_line(one) == "1 prompt tokens in 0.000000 s (- tokens/s), 1 new in 0.000001 s (- tokens/s)"
    with pytest.raises(ProgramRunError, match="printed no timing line"):
        generate.timing("exactc: arena peak reached 10 bytes of 10 computed\n")


# ---- a fresh C build's progress; GPT generates, BERT does not


def test_generate_a_fresh_c_build_reports_progress_and_gpt_generates_bert_does_not(tmp_path, capsys, monkeypatch):
    from exactc import cli
    monkeypatch.setenv("EXACTC_CACHE", str(tmp_path / "cache"))  # nothing built yet: the build is reported
    argv = ["generate", *_GEN_LLAMA, "--prompt-ids", "5,6", "-n", "2", "--seed", "3"]
    assert cli.main([*argv, "--backend", "c", "--cc", "gcc"]) == 0
    captured = capsys.readouterr()
    notes = captured.err.splitlines()
    assert notes and all(line.startswith("exactc generate: ") and len(line) > len("exactc generate: ")
                         for line in notes), captured.err
    assert captured.out.strip()  # the tokens on stdout, the notes on stderr only
    gpt = ["generate", "gpt", "--set", "layers=1", "--set", "dim=8", "--set", "heads=2", "--set", "vocab=16",
           "--set", "mlp=8", "--set", "positions=16", "--prompt-ids", "1", "-n", "1"]
    assert cli.main(gpt) == 0
    capsys.readouterr()
    assert cli.main(["generate", "bert", "--prompt-ids", "1", "-n", "1"]) == 2
    assert capsys.readouterr().err == "exactc generate: error: model 'bert': exactc generates with gpt or llama\n"


# ---- exactc generate from a checkpoint and as a stream (generate.py): the folder's own
# tokenizer and parameters, the model and fields it refuses, each token flushed


def _word_tokenizer(path: Path, vocab: int):
    """A tokenizer.json of the words w0 ... w{vocab-1}, written to `path`."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers import models as tk_models
    tok = Tokenizer(tk_models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # joins with spaces
    tok.save(str(path))
    return tok


def _gpt_folder_with_words(folder: Path):
    """tests/test_checkpoints.py's small GPT as a Hugging Face folder (vocab 40, 10
    positions, drawn at seed 5), with a tokenizer.json of its 40 words beside it."""
    gpt_checkpoint(folder, stored_head=False)
    return _word_tokenizer(folder / "tokenizer.json", 40)


def _gen_from_checkpoint(folder: Path, prompt, count, seed, options):
    """The reference generation with the checkpoint's own parameters, at prompt + count positions."""
    from exactc.exporter import checkpoints, models
    from exactc.exporter.reference.generation import generate
    from exactc.runtime import keys_twin
    ckpt = checkpoints.load(str(folder), None)
    overrides = ckpt.overrides({"tokens": str(len(prompt) + count)})
    p = {e: models.build("gpt", e, overrides) for e in ("prefill", "decode")}
    return generate(p["prefill"], p["decode"], "f32", ckpt.parameters(p["prefill"], "f32"), prompt, count,
                    keys_twin.key_from_seed(seed), options, None)


def test_generate_from_a_hugging_face_folder_reads_its_tokenizer_json_and_its_parameters(tmp_path, capsys):
    """--prompt TEXT through the folder's own tokenizer.json (no --tokenizer), the tokens
    and the document those of the checkpoint's parameters (not drawn ones), the text
    printed; the model named is checked against the folder's, and --set refused but for
    tokens, which the folder's positions bound."""
    from exactc.exporter.reference.sampling import SamplingOptions
    folder = tmp_path / "gpt"
    tok = _gpt_folder_with_words(folder)
    doc = tmp_path / "run.json"
    code, out, err = run_cli(capsys, "generate", "--checkpoint", str(folder), "--prompt", "w3 w5", "-n", "3",
                          "--seed", "4", "--json", str(doc))
    assert (code, err) == (0, ""), err
    want = _gen_from_checkpoint(folder, [3, 5], 3, 4, SamplingOptions())
    assert doc.read_text() == json.dumps(dict(_gen_document([3, 5], 4, SamplingOptions(), 3, None, "f32", want),
                                              model="gpt"), indent=1) + "\n"
    assert out == tok.decode([3, 5, *want.tokens])[len(tok.decode([3, 5])):] + "\n"
    refusals = [
        (["llama", "--checkpoint", str(folder), "--prompt-ids", "1"],
         f"checkpoint {folder} holds a gpt model ({folder.name}); not llama"),
        (["--checkpoint", str(folder), "--set", "layers=2", "--prompt-ids", "1"],
         f"--set layers: with a checkpoint the config comes from {folder.name}; only tokens (the sequence length "
         "the program is exported for) can be set"),
        (["--checkpoint", str(folder), "--prompt-ids", "1,2", "-n", "9"],  # 11 positions of the folder's 10
         f"tokens 11 > 10, the most positions {folder.name} has"),
    ]
    for argv, message in refusals:
        assert run_cli(capsys, "generate", *argv) == (2, "", f"exactc generate: error: {message}\n"), argv


def test_generate_from_a_checkpoint_by_the_c_backend_gives_the_reference_document(tmp_path, capsys):
    """The exported decode program holds the checkpoint's parameters at its config: the
    same document, byte for byte, as the reference's."""
    folder = tmp_path / "gpt"
    _gpt_folder_with_words(folder)
    ref, c = tmp_path / "ref.json", tmp_path / "c.json"
    argv = ["generate", "--checkpoint", str(folder), "--prompt-ids", "3,5", "-n", "3", "--seed", "9"]
    assert run_cli(capsys, *argv, "--json", str(ref))[0] == 0
    code, out, err = run_cli(capsys, *argv, "--json", str(c), "--backend", "c", "--cc", "gcc")
    assert code == 0, err
    assert less_timing(c) == ref.read_bytes()


class _Terminal(io.StringIO):
    """A stdout that keeps what had been written at each flush."""

    def __init__(self):
        super().__init__()
        self.flushed: list[str] = []

    def flush(self):
        self.flushed.append(self.getvalue())
        super().flush()


def test_generate_flushes_each_token_as_it_is_drawn(tmp_path, monkeypatch):
    """Without a tokenizer each id, with one each token's text, is flushed as it is drawn:
    a terminal's line-buffered stdout would show nothing until the last newline."""
    from exactc import cli
    from exactc.exporter.reference.sampling import SamplingOptions
    want = _gen_reference([5, 6], 3, 11, SamplingOptions())
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert cli.main(["generate", *_GEN_LLAMA, "--prompt-ids", "5,6", "-n", "3", "--seed", "11"]) == 0
    shown = [" ".join(map(str, want.tokens[:k])) + " " for k in (1, 2, 3)]
    assert (terminal.flushed, terminal.getvalue()) == (shown, shown[-1] + "\n")

    tok = _word_tokenizer(tmp_path / "tokenizer.json", 24)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert cli.main(["generate", *_GEN_LLAMA, "--tokenizer", str(tmp_path / "tokenizer.json"), "--prompt", "w5 w6",
                     "-n", "3", "--seed", "11"]) == 0
    prompt = len(tok.decode([5, 6]))
    shown = [tok.decode([5, 6, *want.tokens[:k]])[prompt:] for k in (1, 2, 3)]
    assert (terminal.flushed, terminal.getvalue()) == (shown, shown[-1] + "\n")


def test_generate_prints_after_a_prompt_that_ends_inside_a_character_or_in_a_space(tmp_path, capsys, monkeypatch):
    """A prompt whose last byte tokens start a character (E2 82 of €): the token that
    completes it prints the whole character, not nothing; a prompt that ends in a space:
    the next token's text is printed without the space again."""
    from exactc import cli
    from exactc.tokenizer_bin import write

    from test_tokenizer_bin import PIECES, SCORES, SP, SP_AB, TINY_LLAMA, C, byte, drawing
    tokenizer = write(tmp_path / "tokenizer.bin", PIECES, SCORES)
    for prompt, drawn, printed in [([1, SP_AB, byte(0xE2), byte(0x82)], [byte(0xAC), C], ["€", "c"]),
                                   ([1, SP_AB, SP], [C, C], ["c", "c"])]:
        seen, _ = drawing(monkeypatch, capsys, drawn)
        assert cli.main(["generate", "llama", *[f"--set={k}={v}" for k, v in TINY_LLAMA.items()],
                         "--tokenizer", str(tokenizer), "--prompt-ids", ",".join(map(str, prompt)),
                         "-n", str(len(drawn))]) == 0
        assert (seen, capsys.readouterr().out) == (printed, "\n"), prompt


def test_generate_refuses_a_prompt_its_tokenizer_bin_cannot_encode_whole(tmp_path, capsys):
    """The tokenizer's own message is generate's one-line refusal: a file with no ' '
    piece for the dummy prefix, and one with no byte token for a codepoint it lacks."""
    from exactc.tokenizer_bin import write
    specials = [b"<unk>", b"<s>", b"</s>"]
    no_space = write(tmp_path / "no-space.bin", specials + [bytes([c]) for c in b"abcdefghijklmnopqrstu"], [0.0] * 24)
    no_bytes = write(tmp_path / "no-bytes.bin", specials + [bytes([c]) for c in b" abcdefghijklmnopqrst"], [0.0] * 24)
    for path, text, message in [
            (no_space, "ab", f"{no_space}: no piece ' ' (the dummy prefix); a llama2.c tokenizer has one"),
            (no_bytes, "az", f"{no_bytes}: 'z' is no piece and the vocab of 24 has no byte token <0x7A> (id 125)")]:
        assert run_cli(capsys, "generate", *_GEN_LLAMA, "--tokenizer", str(path), "--prompt", text, "-n", "1") == \
            (2, "", f"exactc generate: error: {message}\n")


# ---- exactc generate's printed text at its edges (generate.py): text ending in X is no
# unfinished character, a GPT of 2 positions generates one token after a one-token prompt


def _words_ending_in_x(path):
    """A tokenizer.json of 24 words, w0 ... w23 but for id 7, "maX", and id 9, "X"."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers import models as tk_models
    words = [f"w{i}" for i in range(24)]
    words[7], words[9] = "maX", "X"
    tok = Tokenizer(tk_models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # joins with spaces
    tok.save(str(path))
    return tok


def test_generate_prints_text_that_ends_in_a_capital_x_as_it_is_drawn(tmp_path, capsys, monkeypatch):
    """Only a trailing U+FFFD is held back as a character still to be finished: a prompt
    whose text ends in X is not printed again with the first token, and a drawn token
    whose text ends in X is printed as it is drawn, not with the next one."""
    from exactc import cli

    from test_tokenizer_bin import drawing
    tok = _words_ending_in_x(tmp_path / "tokenizer.json")
    drawn = [9, 4, 7]
    assert tok.decode([3, 7, *drawn]) == "w3 maX X w4 maX"
    seen, prompts = drawing(monkeypatch, capsys, drawn)
    assert cli.main(["generate", *_GEN_LLAMA, "--tokenizer", str(tmp_path / "tokenizer.json"),
                     "--prompt", "w3 maX", "-n", "3"]) == 0
    assert (prompts, seen, capsys.readouterr().out) == ([[3, 7]], [" X", " w4", " maX"], "\n")


def test_generate_one_token_after_a_one_token_prompt_on_a_gpt_of_two_positions(tmp_path, capsys):
    """The programs' T_max is the prompt and -n, at least 2: a one-token prompt with -n 1
    fits a GPT of exactly 2 positions (not refused as 3 > 2), and draws the token of a
    program of T_max 2."""
    from exactc.exporter import models
    from exactc.exporter.reference.generation import generate
    from exactc.exporter.reference.sampling import SamplingOptions
    from exactc.runtime import keys_twin
    fields = {"layers": "1", "dim": "16", "heads": "4", "vocab": "24", "mlp": "20", "positions": "2"}
    doc = tmp_path / "run.json"
    code, out, err = run_cli(capsys, "generate", "gpt", *[f"--set={k}={v}" for k, v in fields.items()],
                          "--prompt-ids", "5", "-n", "1", "--seed", "3", "--json", str(doc))
    assert (code, err) == (0, ""), err
    p = {e: models.build("gpt", e, {**fields, "tokens": "2"}) for e in ("prefill", "decode")}
    want = generate(p["prefill"], p["decode"], "f32", models.draw_parameters(p["prefill"], 0, "f32"), [5], 1,
                    keys_twin.key_from_seed(3), SamplingOptions(), None)
    assert out == f"{want.tokens[0]} \n"
    assert json.loads(doc.read_text())["new_tokens"] == want.tokens


def test_generate_traces_a_k_quant_head_as_f32_weights_in_prefill_and_decode(tmp_path):
    """A Q4_0 GGUF file with a Q6_K head: the prefill and decode programs both hold the
    Q4_0 linear weights as q4 and the head as the f32 weight it was read as, so that the
    decode program takes the prefill's parameters."""
    from exactc import generate
    from exactc.exporter import checkpoints, graph, models

    from test_gguf_file import K_CFG, k_quant_llama

    program = models.build("llama", "forward", dict(K_CFG, tokens=6))
    linear = [spec.layer_name(i) for spec in program.params if spec.name in graph.linear_weights(program)
              for i in range(spec.layers or 1)]
    path = k_quant_llama(tmp_path / "q4.gguf", dict.fromkeys(linear, "Q4_0") | {"lm_head.weight": "Q6_K"},
                         qtype="Q4_0")
    programs, params = generate.reference_programs("llama", "f32", {}, checkpoints.load(path), None)
    want = sorted(n for n in graph.linear_weights(program) if n != "lm_head.weight")
    assert [sorted(programs[entry].quantized) for entry in ("prefill", "decode")] == [want, want]
    assert {spec.name for spec in programs["decode"].params} <= set(params)
