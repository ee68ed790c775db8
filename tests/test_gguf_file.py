"""GGUF files (exporter/checkpoints/gguf_file.py): the config read key by key and refused by
key, every tensor read back under its names and types, the files exactc cannot use refused
naming the field, the writer tests and benches use, and k-quant tensors (Q4_K, Q5_K, Q6_K)
read as the gguf package dequantizes them, alone or mixed with Q4_0 in one file."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Callable

import tempfile

import gguf
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exactc import programs
from exactc.exporter import checkpoints, export, graph, models, quant
from exactc.exporter.checkpoints import CheckpointError, gguf_file
from exactc.exporter.reference import walk
from exactc.strategies.files import llama_configs
from exactc.verify.compare import assert_bits_equal

from test_checkpoints import assert_logits_of_its_fields, llama_of_fields, llama_tensors

# ---- GGUF files (exporter/checkpoints/gguf_file.py): the config read key by key, each value
# refused by its key, every tensor read back under its names, the names mapped


_GGUF_KEYS = {  # key -> (exactc's field, the value written)
    "llama.embedding_length": ("dim", 8), "llama.feed_forward_length": ("mlp", 12), "llama.block_count": ("layers", 2),
    "llama.attention.head_count": ("heads", 4), "llama.attention.head_count_kv": ("kv_heads", 2),
    "llama.context_length": (None, 9), "llama.attention.layer_norm_rms_epsilon": ("eps", 0.25),
    "llama.rope.freq_base": ("theta", 500.0),
}


def test_a_gguf_files_config_is_read_key_by_key_and_refused_by_key(tmp_path):
    from exactc.exporter import checkpoints
    from exactc.exporter.checkpoints import CheckpointError


    metadata = {key: value for key, (_, value) in _GGUF_KEYS.items()}
    table = {"token_embd.weight": "F32"}  # (8, 32): a vocabulary of 8
    ckpt = checkpoints.load(raw_gguf(tmp_path / "m.gguf", table, metadata=metadata))
    assert ckpt.fields == {"dim": 8, "mlp": 12, "layers": 2, "heads": 4, "kv_heads": 2, "eps": 0.25, "theta": 500.0,
                           "vocab": 8}
    assert {k: type(v) for k, v in ckpt.fields.items()} == dict.fromkeys(ckpt.fields, int) | {"eps": float,
                                                                                              "theta": float}
    assert (ckpt.max_tokens, ckpt.format, ckpt.model, ckpt.name, ckpt.path, ckpt.content) == (
        9, "gguf", "llama", "m.gguf", tmp_path / "m.gguf", [tmp_path / "m.gguf"])
    # llama.attention.head_count_kv left out: the head count; llama.rope.freq_base left out: 10000
    ckpt = checkpoints.load(raw_gguf(tmp_path / "lean.gguf", table, metadata=metadata,
                                     drop=("llama.attention.head_count_kv", "llama.rope.freq_base")))
    assert (ckpt.fields["kv_heads"], ckpt.fields["theta"]) == (4, 10000.0)
    for key, (field, value) in _GGUF_KEYS.items():
        path = tmp_path / f"{key}.gguf"
        bad = -1.0 if isinstance(value, float) else 0
        raw_gguf(path, table, metadata=dict(metadata, **{key: bad}))
        with pytest.raises(CheckpointError) as caught:
            checkpoints.load(path)
        rule = "a positive number" if isinstance(value, float) else "a positive integer (at most 2,147,483,647)"
        assert str(caught.value) == f"{path}: {key}={bad!r} must be {rule}", key
        if key in ("llama.attention.head_count_kv", "llama.rope.freq_base"):
            continue
        raw_gguf(path, table, metadata=metadata, drop=(key,))
        with pytest.raises(CheckpointError) as caught:
            checkpoints.load(path)
        assert str(caught.value) == f"{path}: metadata {key} is missing", key
    raw_gguf(tmp_path / "text.gguf", table, metadata=dict(metadata, **{"llama.block_count": "2"}))
    with pytest.raises(CheckpointError) as caught:
        checkpoints.load(tmp_path / "text.gguf")
    assert str(caught.value) == f"{tmp_path / 'text.gguf'}: llama.block_count='2' must be a positive integer " \
                                "(at most 2,147,483,647)"


def test_every_gguf_tensor_reads_back_under_its_names(tmp_path):
    """Each tensor of a float file and of a Q8_0 file, under Hugging Face's name, with
    llama.cpp's as its source, its GGUF type and stored shape, and the values written (q
    and k rows in Hugging Face's order: heads of 4 and 2, where the permutation moves
    rows); another type refused with the whole list of those read."""
    import gguf

    from exactc.exporter import checkpoints
    from exactc.exporter.checkpoints import CheckpointError, gguf_file

    cfg = {"vocab": 5, "dim": 32, "heads": 4, "kv_heads": 2, "layers": 1, "mlp": 64, "tokens": 9}
    tensors = llama_tensors(cfg, seed=3)
    shapes = {name: values.shape for name, values in tensors.items()}
    to_gguf = {hf: name for name, hf in gguf_file.NAMES.items()}
    floats = checkpoints.load(gguf_file.write(tmp_path / "f.gguf", cfg, tensors))
    assert floats.fields["eps"] == float(np.float32(1e-5)) and floats.fields["theta"] == 10000.0
    assert (floats.ignored, floats.weights, sorted(floats.tensors)) == ([], None, sorted(shapes))
    for name, values in tensors.items():
        t = floats.tensors[name]
        assert (t.dtype, t.shape, t.source) == ("F32", shapes[name], to_gguf[name.replace(".0.", ".{l}.")].replace(
            "{l}", "0")), name
        assert np.array_equal(t.read(), values.astype(np.float64)) and t.read().dtype == np.float64, name
    linear = {n for n, s in shapes.items() if len(s) == 2 and n != "model.embed_tokens.weight"}
    blocks = checkpoints.load(gguf_file.write(tmp_path / "q.gguf", cfg, tensors, "Q8_0", linear))
    assert blocks.weights == ("q8", 32)
    reader = {t.name: t for t in gguf.GGUFReader(tmp_path / "q.gguf").tensors}
    for name in linear:
        t = blocks.tensors[name]
        assert (t.dtype, t.shape) == ("Q8_0", shapes[name]), name
        stored = gguf.quants.dequantize(reader[t.source].data, gguf.GGMLQuantizationType.Q8_0).reshape(shapes[name])
        if "q_proj" in name or "k_proj" in name:
            stored = checkpoints.llama2c.interleaved_to_half(stored, 4 if "q_proj" in name else 2)
        assert np.array_equal(t.read(), stored.astype(np.float64)), name
        assert np.array_equal(t.blocks().dequantize(), stored), name
    path = raw_gguf(tmp_path / "q5.gguf", {"token_embd.weight": "F32", "blk.0.attn_q.weight": "Q5_0"})
    with pytest.raises(CheckpointError) as caught:
        checkpoints.load(path)
    assert str(caught.value) == f"{path}: tensor blk.0.attn_q.weight is Q5_0; exactc reads F32, F16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"


def test_a_gguf_block_of_an_infinite_scale_is_refused_naming_its_tensor(tmp_path):
    import gguf

    from exactc.exporter import checkpoints

    path = raw_gguf(tmp_path / "m.gguf", {"token_embd.weight": "F32", "blk.0.attn_q.weight": "Q8_0"})
    start = next(t for t in gguf.GGUFReader(path).tensors if t.name == "blk.0.attn_q.weight").data_offset
    data = bytearray(path.read_bytes())
    data[start:start + 2] = np.float16(np.inf).tobytes()  # the first block's scale
    path.write_bytes(bytes(data))
    with pytest.raises(checkpoints.CheckpointError) as caught:
        checkpoints.load(path).tensors["model.layers.0.self_attn.q_proj.weight"].blocks()
    message = str(caught.value)  # refused as the file is read: the file, the tensor, the block, the value
    assert message.startswith(f"{path}: tensor blk.0.attn_q.weight: ")
    assert "the scale of block 0 of row 0 is inf" in message and "must be finite" in message


def test_llama_cpp_names_map_to_hugging_faces_by_layer():
    from exactc.exporter.checkpoints.gguf_file import _hf_name

    assert _hf_name("token_embd.weight") == ("model.embed_tokens.weight", None)
    assert _hf_name("blk.12.ffn_down.weight") == ("model.layers.12.mlp.down_proj.weight", 12)
    for unknown in ("blk.x.attn_q.weight", "blk.0", "blk.0.attn_q_norm.weight", "rope_freqs.weight", "blk",
                    "b.0.attn_q.weight"):
        assert _hf_name(unknown) is None, unknown


# ---- a GGUF file without general.architecture


def test_a_gguf_file_without_its_architecture_is_refused_naming_it(tmp_path):
    """A hand-made header (the gguf package's writer always writes the key): magic,
    version 3, no tensors, no metadata."""
    from exactc.exporter import checkpoints

    path = tmp_path / "bare.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
    with pytest.raises(checkpoints.CheckpointError) as caught:
        checkpoints.load(path)
    assert str(caught.value) == f"{path}: metadata general.architecture is missing"


# ---- a GGUF file of drawn fields: its program against the program of those fields


@given(fields=llama_configs(), seed=st.integers(0, 2**16))
@example(fields={"vocab": 11, "dim": 8, "heads": 2, "kv_heads": 1, "layers": 2, "mlp": 6, "eps": 1e-5,
                 "theta": 500000.0, "tied": True, "context": 7}, seed=1)
@example(fields={"vocab": 7, "dim": 12, "heads": 3, "kv_heads": 3, "layers": 1, "mlp": 5, "eps": 0.25,
                 "theta": 2.5, "tied": False, "context": 20}, seed=2)
def test_a_gguf_file_of_drawn_fields_gives_the_logits_of_those_fields(fields, seed):
    """Every field the reader takes drawn (dim, heads, kv_heads, layers, mlp, eps and theta
    stored as f32 as llama.cpp's converter stores them, the vocabulary, a tied head or
    not, the context): the file's program gives the bits of the program built from the
    fields themselves, at f32 and f64. A reader that drops theta, reads eps through
    another type than the file's f32, or mistakes any field fails here."""
    stored = dict(fields, eps=float(np.float32(fields["eps"])), theta=float(np.float32(fields["theta"])))
    program, params, tensors = llama_of_fields(stored, seed)
    with tempfile.TemporaryDirectory() as folder:
        path = gguf_file.write(Path(folder) / "m.gguf", dict(stored, tokens=stored["context"]), tensors)
        ckpt = checkpoints.load(path)
        assert ckpt.max_tokens == fields["context"]
        assert_logits_of_its_fields(ckpt, program, params)


# ---- the GGUF writer tests and benches use: a vocabulary only when asked for, every tensor
# stored F32


_GGUF_CFG = {"vocab": 300, "dim": 32, "heads": 4, "kv_heads": 2, "layers": 1, "mlp": 64, "tokens": 9}


def test_a_gguf_file_holds_a_vocabulary_only_when_asked_its_scores_zero(tmp_path):
    """No vocabulary named: no tokenizer key at all. With one: the placeholder pieces
    (<unk>, <s>, </s>, the 256 byte tokens, t0, ...), each scored 0.0, typed unknown,
    control, byte and normal, bos 1 and eos 2."""
    import gguf

    from exactc.exporter.checkpoints import gguf_file

    tensors = llama_tensors(_GGUF_CFG, seed=3)
    plain = gguf.GGUFReader(gguf_file.write(tmp_path / "plain.gguf", _GGUF_CFG, tensors))
    assert [k for k in plain.fields if k.startswith("tokenizer.")] == []
    assert plain.fields["general.architecture"].contents() == "llama"
    reader = gguf.GGUFReader(gguf_file.write(tmp_path / "vocab.gguf", _GGUF_CFG, tensors, vocabulary=True))
    pieces = reader.fields["tokenizer.ggml.tokens"].contents()
    assert pieces == ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [f"t{i}" for i in range(41)]
    scores = reader.fields["tokenizer.ggml.scores"].contents()
    assert scores == [0.0] * 300 and all(np.float32(s).tobytes() == bytes(4) for s in scores)  # +0.0 each
    assert reader.fields["tokenizer.ggml.token_type"].contents() == [2, 3, 3] + [6] * 256 + [1] * 41
    assert (reader.fields["tokenizer.ggml.model"].contents(), reader.fields["tokenizer.ggml.bos_token_id"].contents(),
            reader.fields["tokenizer.ggml.eos_token_id"].contents()) == ("llama", 1, 2)


def test_a_gguf_file_stores_every_float_tensor_as_f32(tmp_path):
    """f64 tensors given: each stored F32, their values rounded to f32, and the file loads."""
    import gguf

    from exactc.exporter import checkpoints
    from exactc.exporter.checkpoints import gguf_file

    tensors = {k: v.astype(np.float64) / 3 for k, v in llama_tensors(_GGUF_CFG, seed=3).items()}
    path = gguf_file.write(tmp_path / "m.gguf", _GGUF_CFG, tensors)
    stored = gguf.GGUFReader(path).tensors
    assert {t.tensor_type.name for t in stored} == {"F32"} and len(stored) == len(tensors)
    ckpt = checkpoints.load(path)
    for name, values in tensors.items():
        assert ckpt.tensors[name].dtype == "F32", name
        assert np.array_equal(ckpt.tensors[name].read(), values.astype(np.float32).astype(np.float64)), name


# ---- GGUF files


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


# ---- k-quants (Q4_K, Q5_K, Q6_K): read as the f32 values the gguf package dequantizes,
# tensor by tensor and type by type in one file, and the program computes with them

K_CFG = {"vocab": 8, "dim": 256, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 256}  # rows of super-blocks
K_FIELDS = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}  # byte offsets of d (and dmin)


def k_quant_bytes(kind: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Rows (or a vector) of `kind` super-blocks as a file holds them: random bytes, each
    d (and dmin) a small finite f16 (so that a model's values stay finite); no quantizer
    made them."""
    *lead, k = shape
    blocks = (*lead, k // 256)
    raw = rng.integers(0, 256, (*blocks, quant.K_QUANT_BYTES[kind]), dtype=np.uint8)
    for at in K_FIELDS[kind]:
        small = (rng.standard_normal(blocks) * 2.0**-12).astype("<f2")
        raw[..., at:at + 2] = small.view(np.uint8).reshape(*blocks, 2)
    return raw.reshape(*lead, -1)


def k_quant_llama(path: Path, kinds: dict[str, str], seed: int = 5, qtype: str | None = None) -> Path:
    """A GGUF Llama of K_CFG: the tensors named in `kinds` (Hugging Face name -> Q4_K, Q5_K,
    Q6_K, or `qtype` for the gguf package's Q8_0/Q4_0 quantizer) stored so, drawn bytes
    for k-quants, the others F32 (the norms drawn near 1)."""
    program = models.build("llama", "forward", dict(K_CFG, tokens=6))
    params = models.draw_parameters(program, seed, "f32")
    rng = np.random.default_rng(seed)
    tensors, stored = {}, {}
    for spec in program.params:
        for layer in range(spec.layers or 1):
            name = spec.layer_name(layer)
            values = params[spec.name][layer] if spec.layers else params[spec.name]
            if kinds.get(name) in K_FIELDS:
                values, stored[name] = k_quant_bytes(kinds[name], values.shape, rng), kinds[name]
            tensors[name] = values
    quantized = {n for n, kind in kinds.items() if kind == qtype}
    return gguf_file.write(path, dict(K_CFG, tokens=6), tensors, qtype, quantized, stored=stored)


def gguf_package_values(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a GGUF Llama as the gguf package dequantizes it, f64, under Hugging
    Face's names, attn_q's and attn_k's rows put back in Hugging Face's order."""
    out = {}
    for t in gguf.GGUFReader(path).tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        values = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)
        name, _ = gguf_file._hf_name(t.name)
        if "q_proj" in name or "k_proj" in name:
            values = checkpoints.llama2c.interleaved_to_half(values, K_CFG["heads" if "q_proj" in name else "kv_heads"])
        out[name] = values
    return out


def stacked(program, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Values under Hugging Face's names -> a program's parameters, stacked over layers."""
    return {spec.name: np.stack([values[spec.layer_name(i)] for i in range(spec.layers)]) if spec.layers
            else values[spec.name] for spec in program.params}


# Q4_K_M's mix: Q4_K for most, Q6_K for attn_v and ffn_down of some layers and the head,
# here with Q5_K too, and a k-quant token embedding (read by rows, the tied head's table)
K_MIX = {"model.embed_tokens.weight": "Q6_K", "lm_head.weight": "Q6_K",
         "model.layers.0.self_attn.q_proj.weight": "Q4_K", "model.layers.1.self_attn.q_proj.weight": "Q5_K",
         "model.layers.0.self_attn.k_proj.weight": "Q5_K", "model.layers.1.self_attn.k_proj.weight": "Q4_K",
         "model.layers.0.self_attn.v_proj.weight": "Q6_K", "model.layers.1.self_attn.v_proj.weight": "Q4_K",
         "model.layers.0.self_attn.o_proj.weight": "Q4_K", "model.layers.1.mlp.gate_proj.weight": "Q5_K",
         "model.layers.0.mlp.up_proj.weight": "Q4_K", "model.layers.0.mlp.down_proj.weight": "Q6_K",
         "model.layers.1.mlp.down_proj.weight": "Q4_K"}


def test_k_quant_tensors_read_as_the_gguf_packages_values(tmp_path):
    """Each k-quant tensor of a file that mixes Q4_K, Q5_K, Q6_K and F32 per tensor reads
    back as the gguf package's f32 values of its bytes (attn_q and attn_k rows in Hugging
    Face's order), under its GGUF type, marked dequantized; no program format comes of
    them by default. Their blocks (what --weights file keeps) dequantize to the same
    values."""
    path = k_quant_llama(tmp_path / "mix.gguf", K_MIX)
    ckpt = checkpoints.load(path)
    theirs = gguf_package_values(path)
    assert ckpt.weights is None and sorted(ckpt.tensors) == sorted(theirs)
    for name, values in theirs.items():
        t = ckpt.tensors[name]
        assert (t.dtype, t.dequantized, t.blocks is None) == (K_MIX.get(name, "F32"), name in K_MIX, name not in K_MIX)
        assert t.read().dtype == np.float64
        if name in K_MIX:
            assert t.stored_format == (K_MIX[name].lower(), 256)
            assert_bits_equal(values, t.blocks().dequantize().astype(np.float64), name, every_bit=True,
                              labels=("gguf.quants", "the blocks"))
        assert_bits_equal(values, t.read(), name, every_bit=True, labels=("gguf.quants", "the reader"))


def test_a_k_quant_super_block_of_an_infinite_d_or_dmin_is_refused(tmp_path):
    path = k_quant_llama(tmp_path / "m.gguf", {"model.layers.1.self_attn.q_proj.weight": "Q5_K"})
    start = next(t for t in gguf.GGUFReader(path).tensors if t.name == "blk.1.attn_q.weight").data_offset
    data = bytearray(path.read_bytes())
    for at, value in ((2 + 176, np.inf), (176, np.nan)):  # dmin, then d, of row 1's super-block
        data[start + at:start + at + 2] = np.float16(value).tobytes()
        path.write_bytes(bytes(data))
        with pytest.raises(CheckpointError) as caught:
            checkpoints.load(path).tensors["model.layers.1.self_attn.q_proj.weight"].read()
        assert str(caught.value) == (f"{path}: tensor blk.1.attn_q.weight: the scale of super-block 0 of row 1 is "
                                     f"{value}; every scale must be finite (1 of its 256 are not)")


def test_a_k_quant_vector_is_refused_naming_its_super_blocks(tmp_path):
    path = k_quant_llama(tmp_path / "m.gguf", {"model.norm.weight": "Q6_K"})
    with pytest.raises(CheckpointError) as caught:
        checkpoints.load(path)
    assert str(caught.value) == (f"{path}: tensor output_norm.weight is Q6_K of shape (256,); rows of whole "
                                 "blocks of 256 are expected")


def test_a_k_quant_files_logits_are_those_of_its_dequantized_weights():
    """The program of a Q4_K_M-like file (K_MIX) gives, at f32 and at f64, the logits of
    the Llama whose weights are the gguf package's dequantization of the file."""
    with tempfile.TemporaryDirectory() as folder:
        path = k_quant_llama(Path(folder) / "mix.gguf", K_MIX)
        # eps as the file stores it, in f32
        program = models.build("llama", "forward", dict(K_CFG, tokens=6, eps=float(np.float32(1e-5))))
        assert_logits_of_its_fields(checkpoints.load(path), program, stacked(program, gguf_package_values(path)))


def test_a_q4_0_file_with_a_q6_k_head_keeps_its_blocks_and_computes_the_head_in_f32(tmp_path):
    """llama.cpp's Q4_0 files keep output.weight in Q6_K: the Q4_0 linear weights reach the
    program as the file's blocks, the head as its f32 values; in the weight-only form the
    program's logits are those of the gguf package's dequantized weights, at f32 (the
    integer form quantizes the activations too), and its C program conforms."""
    program = models.build("llama", "forward", dict(K_CFG, tokens=6))
    linear = [spec.layer_name(i) for spec in program.params if spec.name in graph.linear_weights(program)
              for i in range(spec.layers or 1)]
    kinds = dict.fromkeys(linear, "Q4_0") | {"lm_head.weight": "Q6_K"}
    path = k_quant_llama(tmp_path / "q4.gguf", kinds, qtype="Q4_0")
    ckpt = checkpoints.load(path)
    assert ckpt.weights == ("q4", 32)
    prepared = export.ExportSpec("llama", "forward", "f32", 5, {"tokens": 6}, checkpoint=ckpt,
                                 form="weight-only").prepare()
    assert sorted(prepared.program.quantized) == sorted(n for n in graph.linear_weights(program) if n != "lm_head.weight")
    assert_bits_equal(ckpt.tensors["lm_head.weight"].read().astype(np.float32), prepared.params["lm_head.weight"],
                      "lm_head.weight", every_bit=True)
    inputs = models.draw_inputs(program, 1)
    theirs = {k: v.astype(np.float32) for k, v in stacked(program, gguf_package_values(path)).items()}
    want = walk.evaluate(program, "f32", theirs, inputs)["logits"]
    got = walk.evaluate(prepared.program, "f32", prepared.params, inputs)["logits"]
    assert_bits_equal(want, got, "logits at f32", labels=("the dequantized weights", "the Q4_0 + Q6_K file"))
    done = programs.make(export.write(prepared, tmp_path / "q"), programs.Build(cc="gcc")).check(2)
    assert done.returncode == 0, done.stdout + done.stderr


def test_weights_quantize_a_k_quant_files_float_linear_weights_only(tmp_path):
    """`--weights q8` on a file of k-quants and F32: the F32 linear weights are quantized,
    a parameter with a k-quant tensor in any layer stays the f32 weight it was read as."""
    kinds = {"lm_head.weight": "Q6_K", "model.layers.1.mlp.down_proj.weight": "Q4_K"}
    ckpt = checkpoints.load(k_quant_llama(tmp_path / "m.gguf", kinds))
    assert ckpt.weights is None
    prepared = export.ExportSpec("llama", "forward", "f32", 5, {"tokens": 6}, checkpoint=ckpt,
                                 weights=("q8", 32)).prepare()
    linear = graph.linear_weights(models.build("llama", "forward", dict(K_CFG, tokens=6)))
    kept = {"lm_head.weight", "model.layers.{l}.mlp.down_proj.weight"}
    assert kept < set(linear) and sorted(prepared.program.quantized) == sorted(set(linear) - kept)
    down = np.stack([ckpt.tensors[f"model.layers.{i}.mlp.down_proj.weight"].read() for i in range(2)])
    assert_bits_equal(down.astype(np.float32), prepared.params["model.layers.{l}.mlp.down_proj.weight"],
                      "down_proj", every_bit=True)


# Q4_K_M's kinds with every layer of a parameter in one format, so that each keeps it
# under --weights file; ffn_down mixes Q6_K and Q4_K over its layers, as Q4_K_M's does
K_BY_PARAMETER = {"self_attn.q_proj": "Q4_K", "self_attn.k_proj": "Q5_K", "self_attn.v_proj": "Q6_K",
                  "self_attn.o_proj": "Q4_K", "mlp.gate_proj": "Q5_K", "mlp.up_proj": "Q4_K"}
K_KEPT = {"model.embed_tokens.weight": "Q6_K", "lm_head.weight": "Q6_K",
          "model.layers.0.mlp.down_proj.weight": "Q6_K", "model.layers.1.mlp.down_proj.weight": "Q4_K",
          **{f"model.layers.{i}.{part}.weight": kind for part, kind in K_BY_PARAMETER.items() for i in range(2)}}


def _file_weights_logits_and_programs(path: Path, tmp_path: Path, want_formats: dict[str, tuple[str, int]]):
    """Export `path` with --weights file: the program holds `want_formats`; in the
    weight-only form its logits at f32 and f64 are those of the float Llama over the gguf
    package's dequantized weights, bit for bit (the weight-only form is the f32 linear of
    the weights); in the integer form (the default: the activations quantized too) its f64
    program's logits keep the argmax and a cosine above 0.995 against them. Both f64
    programs conform at 1 and 2 threads with gcc, once with clang."""
    ckpt = checkpoints.load(path)
    program = models.build("llama", "forward", dict(K_CFG, tokens=6, eps=float(np.float32(1e-5))))
    inputs = models.draw_inputs(program, 1)
    folders = []
    for form in (graph.WEIGHT_ONLY, None):
        for site in ("f32", "f64"):
            prepared = export.ExportSpec("llama", "forward", site, 5, {"tokens": 6}, checkpoint=ckpt,
                                         weights=export.FILE_WEIGHTS, form=form).prepare()
            assert prepared.program.quantized == want_formats
            theirs = {k: v.astype(np.float32).astype(np.float64 if site == "f64" else np.float32)
                      for k, v in stacked(program, gguf_package_values(path)).items()}
            want = walk.evaluate(program, site, theirs, inputs)["logits"]
            got = walk.evaluate(prepared.program, site, prepared.params, inputs)["logits"]
            if form == graph.WEIGHT_ONLY:
                assert_bits_equal(want, got, f"logits at {site}", every_bit=True,
                                  labels=("the dequantized weights", "--weights file"))
            elif site == "f64":
                assert prepared.program.form == graph.INTEGER
                assert "qlinear_i" in {op.primitive for op in prepared.program.function.ops()}
                assert (got.argmax(-1) == want.argmax(-1)).all()
                cosine = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
                assert cosine.min() > 0.995, cosine
        folder = export.write(prepared, tmp_path / f"kept-{form or graph.INTEGER}")  # the f64 program
        for cc, threads in (("gcc", 1), ("gcc", 2), ("clang", 2)):
            done = programs.make(folder, programs.Build(cc=cc)).check(threads)
            assert done.returncode == 0, f"{form}, {cc}, {threads} thread(s): " + done.stdout + done.stderr
        folders.append(folder)
    return folders[0]


def test_k_quant_file_weights_keep_each_tensors_format(tmp_path):
    """--weights file on a Q4_K_M-like file: each linear weight keeps its k-quant (q4_k,
    q5_k, q6_k: the head Q6_K), ffn_down, Q6_K in one layer and Q4_K in the other, is the
    f32 weight it reads as; exactc.json lists each tensor's format."""
    path = k_quant_llama(tmp_path / "km.gguf", K_KEPT)
    want = {f"model.layers.{{l}}.{part}.weight": (kind.lower(), 256) for part, kind in K_BY_PARAMETER.items()}
    want["lm_head.weight"] = ("q6_k", 256)
    folder = _file_weights_logits_and_programs(path, tmp_path, want)
    manifest = json.loads((folder / "exactc.json").read_text())
    assert manifest["weights"]["format"] == "mixed"
    assert manifest["weights"]["tensors"]["lm_head.weight"] == {"format": "q6_k", "block": 256}


def test_k_quant_file_program_under_the_automatic_plan_takes_the_super_block_kernels(tmp_path):
    """--weights file --plan auto on the Q4_K_M-like file: the integer form's k-quant
    linears print each super-block's sums as calls of exactc_dot.h's kernels, 8 rows a call
    (Q4_K, Q5_K and Q6_K alike), and the f32 and f64 programs conform at 1 and 2 threads."""
    ckpt = checkpoints.load(k_quant_llama(tmp_path / "km.gguf", K_KEPT))
    for site in ("f32", "f64"):
        prepared = export.ExportSpec("llama", "forward", site, 5, {"tokens": 6}, checkpoint=ckpt,
                                     weights=export.FILE_WEIGHTS, plan="auto").prepare()
        source = "\n".join(prepared.printed.files.values())
        for fmt in ("q4_k", "q5_k", "q6_k"):
            assert f"exactc_dot_{fmt}_256x8(" in source, fmt
        folder = export.write(prepared, tmp_path / f"auto-{site}")
        for threads in (1, 2):
            done = programs.make(folder, programs.Build(cc="gcc")).check(threads)
            assert done.returncode == 0, f"{site}, {threads} thread(s): " + done.stdout + done.stderr


def test_k_quant_file_weights_keep_a_q4_0_files_q6_k_head(tmp_path):
    """--weights file on llama.cpp's Q4_0 layout (Q4_0 linear weights, a Q6_K output): the
    q4 blocks and the q6_k head, each as the file holds it."""
    program = models.build("llama", "forward", dict(K_CFG, tokens=6))
    linear = [spec.layer_name(i) for spec in program.params if spec.name in graph.linear_weights(program)
              for i in range(spec.layers or 1)]
    path = k_quant_llama(tmp_path / "q4.gguf", dict.fromkeys(linear, "Q4_0") | {"lm_head.weight": "Q6_K"},
                         qtype="Q4_0")
    want = {name: ("q4", 32) for name in graph.linear_weights(program)} | {"lm_head.weight": ("q6_k", 256)}
    _file_weights_logits_and_programs(path, tmp_path, want)


def test_k_quant_file_weights_need_a_checkpoint():
    with pytest.raises(export.ExportError, match=r"^--weights file keeps the formats a checkpoint stores: "
                                                 r"give --checkpoint$"):
        export.ExportSpec("llama", "forward", "f32", 5, {"tokens": 6}, weights=export.FILE_WEIGHTS).prepare()


def test_k_quant_file_weights_from_the_command_line(tmp_path, capsys):
    """`exactc export --checkpoint F.gguf --weights file`: the exported directory's
    exactc.json lists each linear weight's format, the k-quants among them."""
    from exactc import cli

    path = k_quant_llama(tmp_path / "km.gguf", K_KEPT)
    code = cli.main(["export", "--checkpoint", str(path), "--entry", "forward", "--dtype", "f32",
                     "--set", "tokens=6", "--weights", "file", "--plan", "none", "-o", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    weights = json.loads((tmp_path / "out" / "exactc.json").read_text())["weights"]
    assert weights["format"] == "mixed"
    assert {name: w["format"] for name, w in weights["tensors"].items()} == {
        "lm_head.weight": "q6_k", **{f"model.layers.{{l}}.{part}.weight": kind.lower()
                                    for part, kind in K_BY_PARAMETER.items()}}
