"""The checkpoint readers' and the quantizer's refusals and rare paths: each input below
is either refused with a message that names the file, the field or tensor and the rule,
or read to the exact result its rare path must give.

Grouped by what they protect:

1. GGUF files (checkpoints/gguf_file.py): a file the gguf package cannot read, another
   architecture, metadata missing, a tensor missing or not of whole blocks, names exactc
   does not use (ignored, listed); which format a tied head and a quantized embedding
   give the program, and the refusal of two formats in one program; the writer's
   placeholder vocabulary;
2. Hugging Face folders (checkpoints/hf.py): a folder without config.json or without
   safetensors (pytorch_model.bin said by name), an architecture of another model, a
   sentence-transformers module list that is not one or starts elsewhere; the names the
   reader drops or completes (a tied head stored anyway, rope buffers, LlamaModel's names
   without `model.`), and an embed entry refused for a pipeline without Pooling;
3. llama2.c files (checkpoints/llama2c.py): a path that cannot be read, the writer's
   refusals, and a version-2 file with a shared classifier (no classifier stored);
4. the dispatch (checkpoints/__init__.py): a file of no known kind, a special file, and a
   check that finds tensors missing only (its message lists nothing else);
5. the quantizer (exporter/quant.py): every refusal of a bad format, dtype, shape or
   scale, with its whole message, and given blocks that do not fit the program.

The tiny checkpoints are written as in tests/test_checkpoints.py (its helpers) and, for
GGUF, with the gguf package directly where a file must differ from what llama.cpp's
converter writes (checkpoints.gguf_file.write).
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Callable

import gguf
import numpy as np
import pytest

from exactc.exporter import checkpoints, export, graph, models, quant
from exactc.exporter.checkpoints import CheckpointError, gguf_file, llama2c
from test_checkpoints import drawn, hf_config, hf_tensors, write_hf  # tests/test_checkpoints.py


# ---- 1. GGUF files ---------------------------------------------------------------------------

GGUF_CFG = {"vocab": 8, "dim": 32, "heads": 4, "kv_heads": 2, "layers": 1, "mlp": 64, "tokens": 6}
GGUF_METADATA = {
    "llama.embedding_length": 32, "llama.feed_forward_length": 64, "llama.block_count": 1,
    "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2, "llama.context_length": 6,
    "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.freq_base": 10000.0,
}
# llama.cpp tensor name -> shape (rows, k), as exactc reads it
GGUF_SHAPES = {"token_embd.weight": (8, 32), "output.weight": (8, 32), "blk.0.attn_q.weight": (32, 32),
               "output_norm.weight": (32,), "rope_freqs.weight": (4,), "blk.0.attn_q_norm.weight": (8,)}


def raw_gguf(path: Path, types: dict[str, str], arch: str = "llama", drop: tuple[str, ...] = (),
             metadata: dict | None = None) -> Path:
    """A GGUF file written with the gguf package: GGUF_METADATA with the values of
    `metadata` (an int as uint32, a float as float32, a str as a string) less the keys
    in `drop`, under `arch`, and one tensor per entry of `types` (llama.cpp name -> GGUF
    type name: F32, Q8_0, Q4_0, ...), of its GGUF_SHAPES shape, values drawn from a
    fixed seed."""
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in {**GGUF_METADATA, **(metadata or {})}.items():
        if key not in drop:
            {int: writer.add_uint32, float: writer.add_float32, str: writer.add_string}[type(value)](key, value)
    rng = np.random.default_rng(7)
    for name, kind in types.items():
        values = rng.standard_normal(GGUF_SHAPES[name]).astype(np.float32)
        if kind == "F32":
            writer.add_tensor(name, values)
        else:
            qtype = getattr(gguf.GGMLQuantizationType, kind)
            writer.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gguf_bytes(data: bytes) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.write_bytes(data)
        return path

    return make


def gguf_of(types: dict[str, str], **options) -> Callable[[Path], Path]:
    return lambda path: raw_gguf(path, types, **options)


LINEAR_Q8 = {"token_embd.weight": "F32", "blk.0.attn_q.weight": "Q8_0"}

# (case, how the file is made, the significant part of the message)
GGUF_REFUSALS = [
    ("magic then no version the package reads", gguf_bytes(b"GGUF" + b"\x07" * 40),
     "not a GGUF file the gguf package reads (Sorry, file appears to be version"),
    ("the magic alone", gguf_bytes(b"GGUF"), "not a GGUF file the gguf package reads ("),
    ("another architecture", gguf_of(LINEAR_Q8, arch="gpt2"),
     "general.architecture is 'gpt2'; exactc reads GGUF files of 'llama'"),
    *((f"no {key}", gguf_of(LINEAR_Q8, drop=(key,)), f"metadata {key} is missing")
      for key in ("llama.embedding_length", "llama.attention.head_count", "llama.context_length")),
    ("no token embedding", gguf_of({"blk.0.attn_q.weight": "Q8_0"}), "tensor token_embd.weight is missing"),
    ("a quantized vector", gguf_of(dict(LINEAR_Q8, **{"output_norm.weight": "Q8_0"})),
     "tensor output_norm.weight is Q8_0 of shape (32,); rows of whole blocks of 32 are expected"),
    ("a tied q4 head with q8 linear weights", gguf_of({"token_embd.weight": "Q4_0", "blk.0.attn_q.weight": "Q8_0"}),
     "its linear weights mix q4 and q8; exactc exports one format per program"),
]


@pytest.mark.parametrize("case, make, message", GGUF_REFUSALS,
                         ids=[row[0] for row in GGUF_REFUSALS])
def test_a_gguf_file_exactc_cannot_use_is_refused_naming_the_field(tmp_path, case, make, message):
    path = make(tmp_path / "model.gguf")
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}: {re.escape(message)}"):
        checkpoints.load(path)


# (token_embd, output (None: absent, the head tied), attn_q) -> the program's weights format
GGUF_HEADS = [
    (("F32", None, "F32"), None),
    (("F32", None, "Q8_0"), ("q8", 32)),
    (("Q8_0", None, "Q8_0"), ("q8", 32)),
    (("Q4_0", None, "F32"), ("q4", 32)),  # the tied head is the only quantized linear weight
    (("Q4_0", "Q8_0", "Q8_0"), ("q8", 32)),  # a quantized embedding alone is no linear weight
]


@pytest.mark.parametrize("kinds, weights", GGUF_HEADS, ids=["-".join(map(str, k)) for k, _ in GGUF_HEADS])
def test_a_gguf_tied_head_is_the_embedding_and_counts_as_a_linear_weight(tmp_path, kinds, weights):
    embed, head, attn_q = kinds
    types = {"token_embd.weight": embed, "blk.0.attn_q.weight": attn_q}
    if head is not None:
        types["output.weight"] = head
    ckpt = checkpoints.load(raw_gguf(tmp_path / "model.gguf", types))
    assert ckpt.weights == weights
    assert (ckpt.tensors["lm_head.weight"] is ckpt.tensors["model.embed_tokens.weight"]) == (head is None)
    assert ckpt.fields["vocab"] == 8 and ckpt.max_tokens == 6


def test_gguf_tensors_exactc_does_not_use_are_listed_as_ignored(tmp_path):
    types = dict(LINEAR_Q8, **{"rope_freqs.weight": "F32", "blk.0.attn_q_norm.weight": "F32"})
    ckpt = checkpoints.load(raw_gguf(tmp_path / "model.gguf", types))
    assert ckpt.ignored == ["rope_freqs.weight", "blk.0.attn_q_norm.weight"]
    assert sorted(ckpt.tensors) == ["lm_head.weight", "model.embed_tokens.weight",
                                    "model.layers.0.self_attn.q_proj.weight"]


def test_the_gguf_writer_adds_a_placeholder_vocabulary_that_exactc_ignores(tmp_path):
    cfg = dict(GGUF_CFG, vocab=300)  # the 3 special pieces, 256 bytes, then t0 .. t40
    table = np.arange(300 * 32, dtype=np.float32).reshape(300, 32)
    path = gguf_file.write(tmp_path / "vocab.gguf", cfg, {"model.embed_tokens.weight": table}, vocabulary=True)
    fields = gguf.GGUFReader(path).fields
    pieces = fields["tokenizer.ggml.tokens"].contents()
    assert len(pieces) == 300
    assert pieces[:4] == ["<unk>", "<s>", "</s>", "<0x00>"] and pieces[258:261] == ["<0xFF>", "t0", "t1"]
    assert pieces[-1] == "t40"
    token_types = fields["tokenizer.ggml.token_type"].contents()
    assert token_types[:4] == [2, 3, 3, 6] and token_types[258:260] == [6, 1] and len(token_types) == 300
    assert fields["tokenizer.ggml.model"].contents() == "llama"
    assert [fields[f"tokenizer.ggml.{key}_token_id"].contents() for key in ("bos", "eos")] == [1, 2]
    ckpt = checkpoints.load(path)
    assert ckpt.fields["vocab"] == 300 and ckpt.ignored == []
    assert np.array_equal(ckpt.tensors["model.embed_tokens.weight"].read(), table)


# ---- 2. Hugging Face folders -------------------------------------------------------------------

GPT_CONFIG = hf_config("gpt", models.build("gpt", "forward", {"vocab": 40, "positions": 10, "dim": 16, "heads": 2,
                                                              "layers": 2, "mlp": 24, "tokens": 6}).config)
TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}


def folder_with(files: dict[str, str | bytes]) -> Callable[[Path], Path]:
    """A folder holding `files` (name -> text or bytes)."""

    def make(folder: Path) -> Path:
        folder.mkdir()
        for name, content in files.items():
            (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        return folder

    return make


# (case, how the folder is made, the file the message names, the significant part of the message)
HF_REFUSALS = [
    ("an empty folder", folder_with({}), "",
     ": no config.json (a Hugging Face checkpoint folder has one)"),
    ("pytorch_model.bin only", folder_with({"config.json": json.dumps(GPT_CONFIG), "pytorch_model.bin": b"\0"}), "",
     " holds pytorch_model.bin only: exactc reads .safetensors (convert it with transformers: "
     "model.save_pretrained(dir, safe_serialization=True))"),
    ("config.json and no weights", folder_with({"config.json": json.dumps(GPT_CONFIG)}), "",
     ": no model.safetensors (or model.safetensors.index.json)"),
    ("an architecture of another head", folder_with(
        {"config.json": json.dumps(dict(GPT_CONFIG, architectures=["GPT2ForSequenceClassification"]))}),
     "config.json", ": architectures ['GPT2ForSequenceClassification'] are not gpt models exactc reads "
                    "(GPT2LMHeadModel, GPT2Model)"),
    ("a module without a type", folder_with({"modules.json": json.dumps([{"path": ""}])}), "modules.json",
     ": not a sentence-transformers module list (each module an object with a type and a path, both strings)"),
    ("a module path not a string", folder_with({"modules.json": json.dumps([dict(TRANSFORMER, path=1)])}),
     "modules.json", ": not a sentence-transformers module list"),
    ("Pooling first", folder_with({"modules.json": json.dumps(
        [{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}, TRANSFORMER])}),
     "modules.json", ": the first module is Pooling; exactc reads a Transformer module first"),
    ("no module", folder_with({"modules.json": "[]"}), "modules.json",
     ": the first module is missing; exactc reads a Transformer module first"),
]


@pytest.mark.parametrize("case, make, named, message", HF_REFUSALS, ids=[c for c, _, _, _ in HF_REFUSALS])
def test_a_folder_exactc_cannot_read_is_refused_naming_the_file(tmp_path, case, make, named, message):
    folder = make(tmp_path / "ckpt")
    where = str(folder / named) if named else str(folder)
    with pytest.raises(CheckpointError, match=f"^{re.escape(where + message)}"):
        checkpoints.load(folder)


def test_a_gpt_head_stored_although_tied_is_ignored(tmp_path):
    program, params = drawn("gpt")
    tensors = hf_tensors("gpt", program, params)
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"].copy()
    ckpt = checkpoints.load(write_hf(tmp_path / "gpt", "gpt", hf_config("gpt", program.config), tensors))
    assert ckpt.ignored == ["lm_head.weight"] and "lm_head.weight" not in ckpt.tensors
    ckpt.check(program.params)  # no extra tensor


def test_llama_model_names_without_model_and_rope_buffers_are_read(tmp_path):
    """LlamaModel's own names (layers.0..., embed_tokens, norm) get `model.`; the
    rotary_emb.inv_freq buffers of older checkpoints are ignored (exactc computes rope)."""
    program, params = drawn("llama")
    tensors = {k.removeprefix("model."): v for k, v in hf_tensors("llama", program, params).items()}
    buffers = [f"model.layers.{layer}.self_attn.rotary_emb.inv_freq" for layer in range(2)]
    for name in buffers:
        tensors[name] = np.ones(3, np.float32)
    ckpt = checkpoints.load(write_hf(tmp_path / "llama", "llama", hf_config("llama", program.config), tensors))
    assert ckpt.ignored == buffers
    assert ckpt.tensors["model.norm.weight"].source == "norm.weight"
    assert ckpt.tensors["model.layers.1.mlp.up_proj.weight"].source == "layers.1.mlp.up_proj.weight"
    stored = ckpt.parameters(program, "f32")
    assert np.array_equal(stored["model.norm.weight"], tensors["norm.weight"])


def test_a_tied_llama_reads_its_embedding_as_the_head_and_ignores_a_stored_one(tmp_path):
    program, params = drawn("llama")
    tensors = hf_tensors("llama", program, params)
    config = dict(hf_config("llama", program.config), tie_word_embeddings=True)
    ckpt = checkpoints.load(write_hf(tmp_path / "llama", "llama", config, tensors))
    assert ckpt.tensors["lm_head.weight"] is ckpt.tensors["model.embed_tokens.weight"]
    assert ckpt.ignored == ["lm_head.weight"]


def test_a_sentence_transformers_folder_without_pooling_refuses_embed_only(tmp_path):
    program, params = drawn("bert", "embed")
    tensors = hf_tensors("bert", program, params)
    folder = write_hf(tmp_path / "minilm", "bert", hf_config("bert", program.config), tensors)
    (folder / "modules.json").write_text(json.dumps([TRANSFORMER]))
    ckpt = checkpoints.load(folder)
    assert ckpt.format == "sentence-transformers"
    ckpt.check_entry("forward")
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(folder / 'modules.json'))}: no Pooling module after "
                                              "the Transformer; exactc's embed entry pools by mean$"):
        ckpt.check_entry("embed")


# ---- 3. llama2.c files -------------------------------------------------------------------------


def test_a_llama2c_path_that_cannot_be_read_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(tmp_path))}: not readable \\(Is a directory\\)$"):
        llama2c.load(tmp_path)


@pytest.fixture(scope="module")
def llama():
    """A drawn Llama (SMALL of tests/test_checkpoints.py: dim 24, mlp 20, vocab 40) under
    Hugging Face's names, and its exactc Config fields."""
    program, params = drawn("llama")
    cfg = program.config
    fields = {"vocab": cfg.vocab, "dim": cfg.dim, "heads": cfg.heads, "kv_heads": cfg.kv_heads,
              "layers": cfg.layers, "mlp": cfg.mlp}
    return hf_tensors("llama", program, params), fields


@pytest.mark.parametrize("change, options, message", [
    ({}, {"version": 3}, "llama2.c version 3: write 0 (legacy), 1 or 2"),
    ({"vocab": 41}, {}, "model.embed_tokens.weight is (40, 24); llama2.c's token_embedding_table is (41, 24)"),
    ({"mlp": 21}, {"version": 1}, "model.layers.{l}.mlp.gate_proj.weight is (2, 20, 24); llama2.c's w1 is (2, 21, 24)"),
], ids=["version 3", "vocab not the table's", "mlp not the weights'"])
def test_the_llama2c_writer_refuses_what_it_cannot_write(tmp_path, llama, change, options, message):
    tensors, fields = llama
    path = tmp_path / "m.bin"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        llama2c.write(path, tensors, dict(fields, **change), seq_len=16, **options)
    assert not path.exists()


def test_a_version_2_file_with_a_shared_classifier_stores_none(tmp_path, llama):
    tensors, fields = llama
    group = 4  # divides dim 24 and mlp 20
    shared = llama2c.write(tmp_path / "shared.bin", tensors, fields, seq_len=16, version=2, shared=True, group=group)
    apart = llama2c.write(tmp_path / "apart.bin", tensors, fields, seq_len=16, version=2, shared=False, group=group)
    V, D = fields["vocab"], fields["dim"]
    assert apart.stat().st_size - shared.stat().st_size == V * D + 4 * V * (D // group)  # wcls: int8s and scales
    ckpt = checkpoints.load(shared)
    assert ckpt.weights == ("q8", group)
    assert ckpt.tensors["lm_head.weight"] is ckpt.tensors["model.embed_tokens.weight"]
    assert ckpt.tensors["lm_head.weight"].source == "token_embedding_table"
    blocks = ckpt.tensors["lm_head.weight"].blocks()
    assert blocks.fmt == "q8" and blocks.block == group and blocks.shape == (V, D)


# ---- 4. the dispatch -----------------------------------------------------------------------------

UNKNOWN_KIND = ("not a Hugging Face folder (config.json + model.safetensors), a GGUF file or a llama2.c .bin file "
                "(a header of seven int32s, or the version-1 magic 0x616b3432)")


def test_a_file_of_no_known_kind_is_refused_saying_what_is_read(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("a checkpoint, surely")
    with pytest.raises(CheckpointError, match=f"^checkpoint {re.escape(str(path))}: {re.escape(UNKNOWN_KIND)}$"):
        checkpoints.load(path)


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix-domain sockets")
def test_a_file_that_cannot_be_opened_is_no_gguf_or_llama2c_file(tmp_path, monkeypatch):
    """A socket exists, is no folder, and cannot be opened: both readers say it is not theirs."""
    monkeypatch.chdir(tmp_path)  # a short relative name: socket paths are limited to ~100 bytes
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("model.bin")
        path = tmp_path / "model.bin"
        assert not gguf_file.looks_like(path) and not llama2c.looks_like(path)
        with pytest.raises(CheckpointError, match=f"^checkpoint {re.escape(str(path))}: not a Hugging Face folder"):
            checkpoints.load(path)


def test_a_check_that_finds_tensors_missing_only_lists_nothing_else(tmp_path):
    program, params = drawn("llama")
    tensors = hf_tensors("llama", program, params)
    del tensors["model.norm.weight"], tensors["model.layers.1.mlp.down_proj.weight"]
    ckpt = checkpoints.load(write_hf(tmp_path / "llama", "llama", hf_config("llama", program.config), tensors))
    with pytest.raises(CheckpointError, match=r"does not match the llama config \(vocab=40, .*\): missing "
                                              r"model\.layers\.1\.mlp\.down_proj\.weight, model\.norm\.weight$"):
        ckpt.check(program.params)


# ---- 5. the quantizer ----------------------------------------------------------------------------

F32 = np.float32
# (case, the call, the whole message)
QUANT_REFUSALS = [
    ("an unknown format", lambda: quant.check_block("q5", 32), "format 'q5' is not one of q8, q4"),
    ("q8 of integers", lambda: quant.quantize_q8_blocks(np.arange(4), 4),
     "values have dtype int64; quantize f32 or f64 values"),
    ("q4 of f64", lambda: quant.quantize_q4_blocks(np.ones(4), 4),
     "q4 quantizes finite f32 values (quantize_tensor checks and rounds them)"),
    ("q4 of an infinity", lambda: quant.quantize_q4_blocks(np.array([1, np.inf], F32), 2),
     "q4 quantizes finite f32 values (quantize_tensor checks and rounds them)"),
    ("a q4 row a byte short", lambda: quant.unpack_q4(np.zeros(3, np.uint8), 8, 8),
     "q4 row of 3 bytes; 8 values in blocks of 8 take 4"),
    ("a scale per row, not per block", lambda: quant.QuantizedTensor("q8", 4, 8, np.zeros((2, 8), np.int8),
                                                                     np.zeros((2, 1), F32)),
     "scales float32(2, 1): one f32 per row and block, (2, 2)"),
    ("f64 scales", lambda: quant.QuantizedTensor("q4", 4, 8, np.zeros((2, 4), np.uint8), np.zeros((2, 2))),
     "scales float64(2, 2): one f32 per row and block, (2, 2)"),
    ("a scalar", lambda: quant.quantize_tensor("norm.g", 1.5, "q8", 4),
     "tensor norm.g: a scalar has no reduction axis to quantize along"),
    ("f32 scales for f16", lambda: quant.scales_from_f16("blk.0.attn_q.weight", np.ones(2, F32)),
     "tensor blk.0.attn_q.weight: scales of dtype float32; this reads f16 scales"),
]


@pytest.mark.parametrize("case, call, message", QUANT_REFUSALS, ids=[c for c, _, _ in QUANT_REFUSALS])
def test_the_quantizer_refuses_with_the_whole_message(case, call, message):
    with pytest.raises(quant.QuantError, match=f"^{re.escape(message)}$"):
        call()


def test_given_blocks_that_do_not_fit_the_program_are_refused():
    """A checkpoint's own blocks are used as they are only in the program's format and
    block; in blocks of 4 for a program of blocks of 8 they are refused by name."""
    overrides = {"vocab": 40, "positions": 10, "dim": 16, "heads": 2, "layers": 1, "mlp": 24, "tokens": 6}
    program = export.trace("gpt", "forward", overrides, ("q8", 8))
    reals = models.draw_parameters(models.build("gpt", "forward", overrides), 5, "f64")
    name = "transformer.h.{l}.attn.c_attn.weight"  # stacked over layers, as ParamSpecs name it
    assert name in program.quantized
    fitting = quant.quantize_tensor(name, reals[name], "q8", 8)
    out = quant.quantize_parameters(program, reals, "f32", {name: fitting})
    assert out[name] is fitting.values and out[name + graph.SCALE_SUFFIX] is fitting.scales
    shape = tuple(np.shape(reals[name]))
    message = (f"tensor {name}: q8 in blocks of 4, shape {shape}; the program holds it as q8 in blocks of 8, "
               f"shape {shape}")
    with pytest.raises(quant.QuantError, match=f"^{re.escape(message)}$"):
        quant.quantize_parameters(program, reals, "f32", {name: quant.quantize_tensor(name, reals[name], "q8", 4)})
