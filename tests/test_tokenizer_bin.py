"""llama2.c's tokenizer.bin (exactc/tokenizer_bin.py) and `exactc generate` with it: the
ids of run.c's encode, worked by hand on a small vocab (merges by score, the leftmost of
a tie, byte tokens for a codepoint that is no piece, the dummy prefix); decode's
leading-space rule and byte pieces; every refusal of a file that does not fit the model;
the text streamed whole when a character's bytes come in several tokens; and a tiny
llama2.c checkpoint prompted with text end to end.
"""

from __future__ import annotations

import json
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactc import cli, tokenizer_bin
from exactc.exporter import models
from exactc.exporter.checkpoints import llama2c
from exactc.exporter.reference import generation
from exactc.exporter.reference.generation import Generation
from exactc.tokenizer_bin import TokenizerError, read, write

from test_checkpoints import hf_tensors  # tests/test_checkpoints.py

# <unk>, <s>, </s>, the 256 byte tokens, then llama2.c-style pieces (a space, not "▁"):
# (piece, score). The ids below are 259 + the index here.
WORDS = [
    (" ", -1000.0),     # 259: the dummy prefix
    ("a", -1000.0),     # 260
    ("b", -1000.0),     # 261
    ("c", -1000.0),     # 262
    ("d", -1000.0),     # 263
    ("ab", -1.0),       # 264: beats bc
    ("bc", -2.0),       # 265: ties with cd
    ("cd", -2.0),       # 266
    (" ab", -0.5),      # 267: the dummy prefix merged with a word
    ("ba", -1e10),      # 268: at run.c's starting best: never merges
    ("é", -1000.0),     # 269: a two-byte codepoint that is a piece
]
SP, A, B, C, D, AB, BC, CD, SP_AB, BA, E_ACUTE = range(259, 270)
PIECES = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % i for i in range(256)] + [w.encode() for w, _ in WORDS]
SCORES = [0.0] * 259 + [s for _, s in WORDS]
VOCAB = len(PIECES)  # 270


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return read(write(tmp_path_factory.mktemp("tok") / "tokenizer.bin", PIECES, SCORES), VOCAB)


def byte(b: int) -> int:
    return b + 3


# ---- encode: run.c's ids, worked by hand ----------------------------------------------------


@pytest.mark.parametrize("text,ids", [
    # " ", a, b -> ab (-1) -> " ab" (-0.5)
    ("ab", [1, SP_AB]),
    # " ", a, b, c: ab (-1) beats bc (-2); then " ab"; "abc" and " abc" are no pieces
    ("abc", [1, SP_AB, C]),
    # " ", b, c, d: bc and cd tie at -2: the leftmost, bc, merges; "bcd" is no piece
    ("bcd", [1, SP, BC, D]),
    # ba scores -1e10, run.c's starting best: it never merges
    ("ba", [1, SP, B, A]),
    # z is no piece: its byte token <0x7A>
    ("z", [1, SP, byte(0x7A)]),
    # € is no piece: its three UTF-8 bytes E2 82 AC as byte tokens
    ("€", [1, SP, byte(0xE2), byte(0x82), byte(0xAC)]),
    # é is a piece: one id for its two bytes
    ("é", [1, SP, E_ACUTE]),
    # the dummy prefix comes before a leading space of the text's own
    (" ab", [1, SP, SP_AB]),
    # no dummy prefix for the empty text: BOS alone
    ("", [1]),
])
def test_encode_gives_run_c_ids(tok, text, ids):
    assert tok.encode(text) == ids


def test_encode_without_bos(tok):
    assert tok.encode("abc", bos=False) == [SP_AB, C]
    assert tok.encode("", bos=False) == []


def test_a_vocab_without_byte_tokens_or_the_dummy_prefix_refuses_text(tmp_path):
    small = read(write(tmp_path / "small.bin", [b"<unk>", b"<s>", b"</s>", b" ", b"a"], [0.0] * 5), 5)
    assert small.encode("aa") == [1, 3, 4, 4]
    with pytest.raises(TokenizerError, match=r"small\.bin: 'z' is no piece and the vocab of 5 has no byte token "
                                             r"<0x7A> \(id 125\)"):
        small.encode("z")
    none = read(write(tmp_path / "none.bin", [b"<unk>", b"<s>", b"</s>", b"a"], [0.0] * 4), 4)
    with pytest.raises(TokenizerError, match=r"none\.bin: no piece ' ' \(the dummy prefix\)"):
        none.encode("a")


# ---- decode ---------------------------------------------------------------------------------


def test_decode_drops_a_leading_space_after_bos_only(tok):
    assert tok.decode(1, SP_AB) == b"ab"
    assert tok.decode(C, SP_AB) == b" ab"
    assert tok.decode(1, SP) == b""
    assert tok.decode(1, AB) == b"ab"


def test_decode_turns_a_byte_piece_into_its_byte(tok):
    assert tok.decode(C, byte(0x41)) == b"A"
    assert tok.decode(1, byte(0x20)) == b" "  # a byte token is not a piece with a leading space
    assert tok.decode(C, byte(0xE2)) == b"\xe2"
    assert tok.decode(C, 1) == b"<s>"


@settings(max_examples=40, deadline=None)
@given(text=st.text(alphabet="abcdéz€ ", max_size=12))
def test_decoding_the_ids_gives_back_the_text(tok, text):
    """After BOS, the dummy prefix's space is dropped: the text comes back byte for byte."""
    assert tok.decode_ids(tok.encode(text)) == b"<s>" + text.encode()


# ---- refusals: one line, the file, the token and the rule ------------------------------------


def good_bytes(tmp_path) -> bytes:
    return write(tmp_path / "good.bin", PIECES, SCORES).read_bytes()


@pytest.mark.parametrize("cut,rule", [
    (lambda d: d[:2], r"ends before max_token_length"),
    (lambda d: d[:-2], rf"token {VOCAB - 1} of the model's {VOCAB}: the file ends early \(its piece of 2 bytes has 0 "),
    (lambda d: d[:-7], rf"token {VOCAB - 1} of the model's {VOCAB}: the file ends early \(3 bytes left, a score and "),
    (lambda d: d + b"\0", rf"1 bytes left over after token {VOCAB - 1}, the model's last"),
    (lambda d: struct.pack("<i", -1) + d[4:], r"max_token_length -1 is negative"),
    (lambda d: d[:4] + struct.pack("<fi", 0.0, -1) + d[4 + 8 + 5:], r"token 0 of the model's 270: length -1 is negative"),
    (lambda d: struct.pack("<i", 2) + d[4:], r"token 0 of the model's 270: length 5 is over max_token_length 2"),
])
def test_a_file_that_does_not_fit_the_model_is_refused(tmp_path, cut, rule):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(cut(good_bytes(tmp_path)))
    with pytest.raises(TokenizerError, match=rule) as info:
        read(bad, VOCAB)
    message = str(info.value)
    assert message.startswith(f"{bad}: ") and "\n" not in message


def test_a_file_for_another_vocab_is_refused_both_ways(tmp_path):
    path = write(tmp_path / "tokenizer.bin", PIECES, SCORES)
    with pytest.raises(TokenizerError, match="left over after token 268"):
        read(path, VOCAB - 1)
    with pytest.raises(TokenizerError, match="token 270 of the model's 271: the file ends early"):
        read(path, VOCAB + 1)


# ---- exactc generate -------------------------------------------------------------------------

TINY_LLAMA = {"vocab": VOCAB, "dim": 16, "heads": 4, "kv_heads": 2, "layers": 1, "mlp": 20}


def tiny_llama2c(folder, tokenizer: bool = True):
    """A drawn tiny Llama as a llama2.c .bin, with a tokenizer.bin beside it."""
    program = models.build("llama", "forward", dict(TINY_LLAMA, tokens=6))
    tensors = hf_tensors("llama", program, models.draw_parameters(program, 5, "f32"))
    path = llama2c.write(folder / "model.bin", tensors, TINY_LLAMA, seq_len=16)
    if tokenizer:
        write(folder / "tokenizer.bin", PIECES, SCORES)
    return path


def test_generate_prompts_a_llama2c_checkpoint_with_text(tmp_path, capsys):
    path = tiny_llama2c(tmp_path)
    doc = tmp_path / "run.json"
    assert cli.main(["generate", "--checkpoint", str(path), "--prompt", "abc", "-n", "3", "--backend", "reference",
                     "--seed", "3", "--json", str(doc)]) == 0
    got = json.loads(doc.read_text())
    assert got["prompt_ids"] == [1, SP_AB, C] and len(got["new_tokens"]) == 3
    tok = read(tmp_path / "tokenizer.bin", VOCAB)
    ids = got["prompt_ids"] + got["new_tokens"]
    want = tok.decode_ids(ids)[len(tok.decode_ids(got["prompt_ids"])):].decode("utf-8", "replace")
    assert capsys.readouterr().out == want + "\n"


def test_generate_takes_tokenizer_from_the_option(tmp_path, capsys):
    path = tiny_llama2c(tmp_path, tokenizer=False)
    assert cli.main(["generate", "--checkpoint", str(path), "--prompt", "abc", "-n", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--prompt needs a checkpoint with a tokenizer.json" in err[0], err
    elsewhere = write(tmp_path / "other.tok", PIECES, SCORES)
    doc = tmp_path / "run.json"
    assert cli.main(["generate", "--checkpoint", str(path), "--tokenizer", str(elsewhere), "--prompt", "bcd",
                     "-n", "1", "--json", str(doc)]) == 0
    assert json.loads(doc.read_text())["prompt_ids"] == [1, SP, BC, D]


@pytest.mark.parametrize("extra,rule", [
    (["--tokenizer", "MISSING"], "missing.bin: no such file; give a tokenizer.json or a tokenizer.bin"),
    (["--tokenizer", "SHORT"], "token 259 of the model's 270: the file ends early"),
    (["--prompt", "\udcff"], "--prompt is not UTF-8 text (byte 0 is 0xff)"),
])
def test_generate_refuses_a_tokenizer_with_one_line(tmp_path, capsys, extra, rule):
    path = tiny_llama2c(tmp_path)
    short = write(tmp_path / "short.bin", PIECES[:259], SCORES[:259])
    extra = [{"SHORT": str(short), "MISSING": str(tmp_path / "missing.bin")}.get(e, e) for e in extra]
    prompt = [] if "--prompt" in extra else ["--prompt", "ab"]
    assert cli.main(["generate", "--checkpoint", str(path), *prompt, *extra, "-n", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and rule in err[0], err


def drawing(monkeypatch, capsys, drawn: list[int]) -> tuple[list[str], list[list[int]]]:
    """generate's loop replaced by one that draws `drawn`, whatever the model: returns what
    each token printed as it was drawn, and the prompt ids each generation was given (both
    filled as generate runs)."""
    printed, prompts = [], []

    def fake_loop(run, cfg, prompt, count, key, options, stop, on_token):
        prompts.append(list(prompt))
        for token in drawn:
            on_token(token, 1.0)
            printed.append(capsys.readouterr().out)
        return Generation(list(prompt), drawn, [1.0] * len(drawn), [], [0.5] * len(drawn))

    monkeypatch.setattr(generation, "run_loop", fake_loop)  # generate imports it when it runs
    return printed, prompts


def test_a_character_in_byte_tokens_is_printed_once_whole(tmp_path, capsys, monkeypatch):
    """BOS, then " ab" (its space dropped after BOS), then € as three byte tokens: the
    stream prints "ab", nothing for the first two bytes, then "€", and never U+FFFD."""
    seen, _ = drawing(monkeypatch, capsys, [SP_AB, byte(0xE2), byte(0x82), byte(0xAC), C])
    tokenizer = write(tmp_path / "tokenizer.bin", PIECES, SCORES)
    assert cli.main(["generate", "llama", *[f"--set={k}={v}" for k, v in TINY_LLAMA.items()],
                     "--tokenizer", str(tokenizer), "--prompt", "", "-n", "5"]) == 0
    assert seen == ["ab", "", "", "€", "c"]
    assert capsys.readouterr().out == "\n"


def test_bytes_that_never_make_a_character_are_printed_at_the_end(tmp_path, capsys, monkeypatch):
    seen, _ = drawing(monkeypatch, capsys, [C, byte(0xE2)])
    tokenizer = write(tmp_path / "tokenizer.bin", PIECES, SCORES)
    assert cli.main(["generate", "llama", *[f"--set={k}={v}" for k, v in TINY_LLAMA.items()],
                     "--tokenizer", str(tokenizer), "--prompt-ids", "1,5", "-n", "2"]) == 0
    assert (seen, capsys.readouterr().out) == (["c", ""], "\ufffd\n")


# ---- llama2.c's tokenizer.bin


def test_tokenizer_bin_files_at_their_edges(tmp_path):
    empty = tokenizer_bin.write(tmp_path / "empty.bin", [], [])
    assert empty.read_bytes() == b"\0\0\0\0"  # max_token_length 0, no token
    tok = tokenizer_bin.read(empty, 0)
    assert tok.pieces == () and tok.max_token_length == 0
    blank = tokenizer_bin.read(tokenizer_bin.write(tmp_path / "blank.bin", [b"", b"ab", b""], [0.0, 1.0, 2.0]), 3)
    assert blank.pieces == (b"", b"ab", b"") and blank.max_token_length == 2
    only = tokenizer_bin.read(tokenizer_bin.write(tmp_path / "zero.bin", [b""], [0.0]), 1)
    assert only.max_token_length == 0
    given = tokenizer_bin.read(tokenizer_bin.write(tmp_path / "given.bin", [b"a"], [0.5], max_token_length=10), 1)
    assert given.max_token_length == 10 and given.scores == (0.5,)
    with pytest.raises(ValueError):
        tokenizer_bin.write(tmp_path / "bad.bin", [b"a", b"b"], [0.0])  # a score per piece


def test_tokenizer_bin_refusals_whole(tmp_path):
    with pytest.raises(tokenizer_bin.TokenizerError) as caught:
        tokenizer_bin.read(tmp_path, 1)
    assert str(caught.value) == f"{tmp_path}: not readable (Is a directory)"
    negative = tokenizer_bin.write(tmp_path / "negative.bin", [b"a"], [0.0], max_token_length=-1)
    with pytest.raises(tokenizer_bin.TokenizerError, match=re.escape("max_token_length -1 is negative")):
        tokenizer_bin.read(negative, 1)
    two = tokenizer_bin.write(tmp_path / "two.bin", [b"a", b"bc"], [0.0, 1.0])
    with pytest.raises(tokenizer_bin.TokenizerError) as caught:
        tokenizer_bin.read(two, 3)
    assert str(caught.value) == (f"{two}: token 2 of the model's 3: the file ends early (0 bytes left, a score "
                                 "and a length need 8); is the tokenizer for a smaller vocab?")
    with pytest.raises(tokenizer_bin.TokenizerError) as caught:
        tokenizer_bin.read(two, 1)
    assert str(caught.value) == (f"{two}: 10 bytes left over after token 0, the model's last; is the tokenizer "
                                 "for a larger vocab than 1?")


def test_tokenizer_bin_first_token_decoded_whole_and_the_last_byte_token(tmp_path):
    pieces = [b"<unk>", b"<s>", b"</s>", b"<0x00>", b" "]
    tok = tokenizer_bin.read(tokenizer_bin.write(tmp_path / "t.bin", pieces, [0.0] * 5), 5)
    assert tok.decode_ids([4, 4]) == b"  "  # the first token after none keeps its space
    assert tok.decode_ids([1, 4]) == b"<s>"  # after BOS the space is lost
    assert tok.encode("\x00") == [1, 4, 3]
    with pytest.raises(tokenizer_bin.TokenizerError) as caught:
        tok.encode("\x02")  # id 5 would be <0x02>: one past the vocab
    assert str(caught.value) == (f"{tmp_path / 't.bin'}: '\\x02' is no piece and the vocab of 5 has no byte "
                                 "token <0x02> (id 5)")
