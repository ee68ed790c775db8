"""Hugging Face folders (exporter/checkpoints/hf.py): config.json read key by key, each
default and each refusal naming the key; safetensors files, shards and sentence-transformers
module lists read or refused naming the file; the names the reader drops or completes."""

from __future__ import annotations

import json
import re
import struct
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from hypothesis import example as pinned_example
from hypothesis import given, settings
from hypothesis import strategies as st

from exactc.exporter import checkpoints, models
from exactc.exporter.checkpoints import CheckpointError
from exactc.exporter.reference import walk
from exactc.strategies.files import gpt_configs, llama_configs

from test_checkpoints import drawn, hf_config, hf_tensors, write_hf

# ---- Hugging Face config.json fields: each key read, each default, each refusal whole


_LLAMA_CFG = {"hidden_size": 16, "num_attention_heads": 4, "vocab_size": 30, "num_hidden_layers": 2,
              "intermediate_size": 24}

_GPT_CFG = {"n_embd": 16, "n_positions": 12, "vocab_size": 30, "n_head": 4, "n_layer": 2}

_BERT_CFG = {"max_position_embeddings": 12, "vocab_size": 30, "hidden_size": 16, "num_attention_heads": 4,
             "num_hidden_layers": 2, "intermediate_size": 24}


def test_hf_llama_fields_defaults_and_every_key():
    from exactc.exporter.checkpoints import hf
    assert hf._llama_fields("w", dict(_LLAMA_CFG)) == (
        {"vocab": 30, "dim": 16, "heads": 4, "kv_heads": 4, "layers": 2, "mlp": 24, "eps": 1e-6, "theta": 10000.0},
        None)
    given = dict(_LLAMA_CFG, num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=64, head_dim=4,
                 hidden_act="silu", attention_bias=False, mlp_bias=False, pretraining_tp=1)
    fields, positions = hf._llama_fields("w", dict(given, rope_theta=500.0))  # transformers 4.x
    assert (fields["kv_heads"], fields["eps"], fields["theta"], positions) == (2, 1e-5, 500.0, 64)
    fields, _ = hf._llama_fields("w", dict(given, rope_theta=9.0, rope_parameters={"rope_type": "default",
                                                                                   "rope_theta": 70.0}))
    assert fields["theta"] == 70.0  # transformers 5's rope_parameters first
    for rope in ({"rope_scaling": {"type": "linear"}}, {"rope_scaling": {"rope_type": "yarn"}},
                 {"rope_parameters": {"rope_type": "llama3"}}):
        kind = next(iter(rope.values()))
        kind = kind.get("rope_type", kind.get("type"))
        with pytest.raises(hf.CheckpointError) as caught:
            hf._llama_fields("w", dict(_LLAMA_CFG, **rope))
        assert str(caught.value) == (f"w: rope_type={kind!r} (rope scaling) is not supported; exactc's rope is "
                                     "the default, unscaled")
    refusals = [({"hidden_act": "gelu"}, "w: hidden_act='gelu' is not supported (exactc computes hidden_act='silu')"),
                ({"attention_bias": True}, "w: attention_bias=True is not supported (exactc computes "
                                           "attention_bias=False)"),
                ({"mlp_bias": True}, "w: mlp_bias=True is not supported (exactc computes mlp_bias=False)"),
                ({"pretraining_tp": 2}, "w: pretraining_tp=2 is not supported (exactc computes pretraining_tp=1)"),
                ({"head_dim": 8}, "w: head_dim=8 is not hidden_size / num_attention_heads = 4; exactc's llama "
                                  "derives it"),
                ({"rope_parameters": [1]}, "w: rope_parameters must be an object, not a list"),
                ({"rope_scaling": "x"}, "w: rope_scaling must be an object, not a string")]
    for extra, message in refusals:
        with pytest.raises(hf.CheckpointError) as caught:
            hf._llama_fields("w", dict(_LLAMA_CFG, **extra))
        assert str(caught.value) == message
    for key in _LLAMA_CFG:
        with pytest.raises(hf.CheckpointError) as caught:
            hf._llama_fields("w", {k: v for k, v in _LLAMA_CFG.items() if k != key})
        assert str(caught.value) == f"w: no {key}"


def test_hf_gpt_and_bert_fields_defaults_and_every_key():
    from exactc.exporter.checkpoints import hf
    assert hf._gpt_fields("w", dict(_GPT_CFG)) == (
        {"vocab": 30, "positions": 12, "dim": 16, "heads": 4, "layers": 2, "mlp": 64, "eps": 1e-5, "tied": True}, 12)
    fields, _ = hf._gpt_fields("w", dict(_GPT_CFG, n_inner=20, layer_norm_epsilon=1e-4, tie_word_embeddings=False,
                                         activation_function="gelu_pytorch_tanh"))
    assert (fields["mlp"], fields["eps"], fields["tied"]) == (20, 1e-4, False)
    for extra, key, value, wanted in [({"activation_function": "relu"}, "activation_function", "relu",
                                       ("gelu_new", "gelu_pytorch_tanh")),
                                      ({"scale_attn_weights": False}, "scale_attn_weights", False, True),
                                      ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx",
                                       True, False),
                                      ({"add_cross_attention": True}, "add_cross_attention", True, False)]:
        with pytest.raises(hf.CheckpointError) as caught:
            hf._gpt_fields("w", dict(_GPT_CFG, **extra))
        assert str(caught.value) == f"w: {key}={value!r} is not supported (exactc computes {key}={wanted!r})"
    assert hf._bert_fields("w", dict(_BERT_CFG)) == (
        {"vocab": 30, "positions": 12, "type_vocab": 2, "dim": 16, "heads": 4, "layers": 2, "mlp": 24,
         "eps": 1e-12}, 12)
    assert hf._bert_fields("w", dict(_BERT_CFG, type_vocab_size=3, layer_norm_eps=1e-7))[0]["type_vocab"] == 3
    for extra, key, value, wanted in [({"hidden_act": "relu"}, "hidden_act", "relu", "gelu"),
                                      ({"position_embedding_type": "relative_key"}, "position_embedding_type",
                                       "relative_key", "absolute"),
                                      ({"is_decoder": True}, "is_decoder", True, False)]:
        with pytest.raises(hf.CheckpointError) as caught:
            hf._bert_fields("w", dict(_BERT_CFG, **extra))
        assert str(caught.value) == f"w: {key}={value!r} is not supported (exactc computes {key}={wanted!r})"
    for config, reader in ((_GPT_CFG, hf._gpt_fields), (_BERT_CFG, hf._bert_fields)):
        for key in config:
            with pytest.raises(hf.CheckpointError) as caught:
                reader("w", {k: v for k, v in config.items() if k != key})
            assert str(caught.value) == f"w: no {key}"


# ---- config.json's refusals by key, BERT's dropped names, llama's head_dim, the header's
# length, a load filled whole, shards


def test_hf_config_readers_refuse_each_bad_value_by_its_key():
    from exactc.exporter import models
    from exactc.exporter.checkpoints import hf
    count = f"must be a positive integer (at most {models.MAX_COUNT:,})"
    for config, reader, keys in (
            (_GPT_CFG, hf._gpt_fields, {"n_embd": -1, "n_positions": -1, "vocab_size": -1, "n_head": -1,
                                        "n_layer": -1, "n_inner": -1, "layer_norm_epsilon": -1.0,
                                        "tie_word_embeddings": "yes"}),
            (_LLAMA_CFG, hf._llama_fields, {"hidden_size": -1, "num_attention_heads": -1, "vocab_size": -1,
                                            "num_key_value_heads": -1, "num_hidden_layers": -1,
                                            "intermediate_size": -1, "rms_norm_eps": -1.0, "rope_theta": -1.0,
                                            "max_position_embeddings": -1}),
            (_BERT_CFG, hf._bert_fields, {"max_position_embeddings": -1, "vocab_size": -1, "type_vocab_size": -1,
                                          "hidden_size": -1, "num_attention_heads": -1, "num_hidden_layers": -1,
                                          "intermediate_size": -1, "layer_norm_eps": -1.0})):
        for key, bad in keys.items():
            rule = ("must be true or false" if isinstance(bad, str) else
                    "must be a positive number" if isinstance(bad, float) else count)
            with pytest.raises(hf.CheckpointError) as caught:
                reader("w", dict(config, **{key: bad}))
            assert str(caught.value) == f"w: {key}={bad!r} {rule}", (reader.__name__, key)


def test_hf_bert_names_drop_the_heads_and_buffers_and_llama_head_dim_is_a_floor():
    from exactc.exporter.checkpoints import hf
    for name in ("cls.predictions.bias", "bert.pooler.dense.weight", "pooler.dense.bias",
                 "embeddings.position_ids", "bert.embeddings.token_type_ids"):
        assert hf._bert_name(name, {}) is None, name
    assert hf._bert_name("bert.embeddings.word_embeddings.weight", {}) == "embeddings.word_embeddings.weight"
    assert hf._bert_name("embeddings.token_type_embeddings.weight", {}) == "embeddings.token_type_embeddings.weight"
    # head_dim is compared with dim // heads: 10 // 3 = 3 passes here (the model's own check refuses 10 / 3 later)
    fields, _ = hf._llama_fields("w", dict(_LLAMA_CFG, hidden_size=10, num_attention_heads=3, head_dim=3))
    assert (fields["dim"], fields["heads"]) == (10, 3)


def test_hf_header_length_is_unsigned(tmp_path):
    from exactc.exporter.checkpoints import hf
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"\xff" * 8 + b"{}")  # 2^64 - 1 as <Q; as <q it would be -1
    with pytest.raises(hf.CheckpointError) as caught:
        hf.read_header(path)
    assert str(caught.value) == (f"{path}: header length {2**64 - 1} is more than the {hf.MAX_HEADER:,} bytes a "
                                 "safetensors header may have")


def test_hf_load_fills_the_checkpoint_whole_names_it_and_ties_a_llama_head(tmp_path):
    from exactc.exporter.checkpoints import hf

    from test_checkpoints import drawn, hf_config, hf_tensors, write_hf
    program, params = drawn("llama")
    tensors = hf_tensors("llama", program, params)
    config = hf_config("llama", program.config)
    folder = write_hf(tmp_path / "tiny-llama", "llama", config, tensors)
    ck = hf.load(folder)
    assert (ck.path, ck.format, ck.model, ck.name) == (folder, "hf", "llama", "tiny-llama")
    assert ck.content == [folder / "model.safetensors", folder / "config.json"]
    assert ck.tensors["lm_head.weight"].source == "lm_head.weight" and ck.ignored == []
    inner = write_hf(tmp_path / "repo" / "model", "llama", config, tensors)  # a folder named model: its parent names it
    assert hf.load(inner).name == "repo"
    # tie_word_embeddings: the head is the embedding table, and the stored head is not used
    tied = hf.load(write_hf(tmp_path / "tied", "llama", dict(config, tie_word_embeddings=True), tensors))
    assert tied.tensors["lm_head.weight"] is tied.tensors["model.embed_tokens.weight"]
    assert tied.ignored == ["lm_head.weight"]
    untold = hf.load(write_hf(tmp_path / "untold", "llama",
                              {k: v for k, v in config.items() if k != "tie_word_embeddings"}, tensors))
    assert untold.tensors["lm_head.weight"].source == "lm_head.weight"  # a llama's head is its own unless tied
    with pytest.raises(hf.CheckpointError) as caught:
        hf.load(write_hf(tmp_path / "bad", "llama", dict(config, tie_word_embeddings="yes"), tensors))
    assert str(caught.value) == f"{tmp_path / 'bad' / 'config.json'}: tie_word_embeddings='yes' must be true or false"


def test_hf_shard_names_and_stored_entries_refused_whole(tmp_path):
    import json as json_
    import struct

    from exactc.exporter.checkpoints import hf
    index = tmp_path / "model.safetensors.index.json"
    for shard in ("", ".", "..", "a\\b", "a/b"):
        index.write_text(json_.dumps({"weight_map": {"w": shard}}))
        with pytest.raises(hf.CheckpointError) as caught:
            hf.safetensors_files(tmp_path)
        assert str(caught.value) == (f"{index}: weight_map names the shard {shard!r}; a shard is a file name in "
                                     f"{tmp_path}")
    where = f"{tmp_path}: tensor w"
    for entry, rule in (
            ([1], " has no dtype, shape and data_offsets"),
            ({"dtype": "F32", "shape": [1]}, " has no dtype, shape and data_offsets"),
            ({"dtype": "F32", "shape": [1], "data_offsets": [0]},
             ": data_offsets [0] must be [begin, end], integers with 0 <= begin <= end"),
            ({"dtype": "F32", "shape": [1], "data_offsets": [0, 1, 2]},
             ": data_offsets [0, 1, 2] must be [begin, end], integers with 0 <= begin <= end"),
            ({"dtype": "F32", "shape": [1], "data_offsets": [5, 4]},
             ": data_offsets [5, 4] must be [begin, end], integers with 0 <= begin <= end")):
        with pytest.raises(hf.CheckpointError) as caught:
            hf._stored(tmp_path, "w", entry)
        assert str(caught.value) == where + rule
    empty = hf._stored(tmp_path, "w", {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]})  # begin == end: allowed
    assert (empty.name, empty.begin, empty.end) == ("w", 4, 4)
    # header lengths at the edges: the largest allowed, and one that ends exactly at the file's end
    path = tmp_path / "m.safetensors"
    header = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    entries, start = hf.read_header(path)
    assert entries["w"].name == "w" and start == 8 + len(header)
    path.write_bytes(struct.pack("<Q", len(header) + 5) + header + bytes(4))  # 1 byte past the end
    with pytest.raises(hf.CheckpointError) as caught:
        hf.read_header(path)
    assert str(caught.value) == (f"{path}: header length {len(header) + 5} runs past the end of the file "
                                 f"({8 + len(header) + 4} bytes)")
    bad = b'{"w":{"dtype":"F32","shape":[1]}}'
    path.write_bytes(struct.pack("<Q", len(bad)) + bad + bytes(4))
    with pytest.raises(hf.CheckpointError) as caught:
        hf.read_header(path)
    assert str(caught.value) == f"{path}: tensor w has no dtype, shape and data_offsets"
    gap = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
    path.write_bytes(struct.pack("<Q", len(gap)) + gap + bytes(8))
    with pytest.raises(hf.CheckpointError) as caught:
        hf.read_header(path)
    assert str(caught.value).startswith(f"{path}: tensor w: data_offsets [4, 8] leave data bytes [0, 4) to no tensor")


# ---- sentence-transformers folders read where their modules say, a data range of the wrong
# size, a shard index


def _bert_folder(folder, modules=None, pooling_modes=("pooling_mode_mean_tokens",), subfolder=""):
    """A BERT checkpoint (written by tests/test_checkpoints.py's helpers) in `folder /
    subfolder`, and, given `modules` (type, path), a sentence-transformers modules.json
    in `folder` (a None path left out of the module), with a Pooling config of the modes
    given in each Pooling module's own folder."""
    from test_checkpoints import drawn, hf_config, hf_tensors, write_hf

    program, params = drawn("bert", "embed")
    write_hf(folder / subfolder, "bert", hf_config("bert", program.config), hf_tensors("bert", program, params))
    if modules is not None:
        listed = [{"idx": k, "name": str(k), "type": kind} | ({} if path is None else {"path": path})
                  for k, (kind, path) in enumerate(modules)]
        (folder / "modules.json").write_text(json.dumps(listed))
        for kind, path in modules:
            if kind.endswith("Pooling") and path is not None:
                (folder / path).mkdir(exist_ok=True)
                modes = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False}
                (folder / path / "config.json").write_text(json.dumps(modes | dict.fromkeys(pooling_modes, True)))
    return folder


_ST = "sentence_transformers.models."


def test_a_sentence_transformers_transformer_is_read_from_its_subfolder(tmp_path):
    """The Transformer module's path in modules.json (0_Transformer, as the library's
    save writes it) is where config.json and the weights are; the folder names the
    checkpoint, and embed is allowed (mean pooling, then Normalize)."""
    from exactc.exporter.checkpoints import hf

    folder = _bert_folder(tmp_path / "st", [(_ST + "Transformer", "0_Transformer"), (_ST + "Pooling", "1_Pooling"),
                                            (_ST + "Normalize", "2_Normalize")], subfolder="0_Transformer")
    ck = hf.load(folder)
    inner = folder / "0_Transformer"
    assert (ck.path, ck.format, ck.model, ck.name) == (folder, "sentence-transformers", "bert", "st")
    assert ck.content == [inner / "model.safetensors", inner / "config.json"]
    assert ck.entries == {} and ck.fields["dim"] == 16


def test_a_sentence_transformers_module_without_a_path_or_a_dotted_type_is_read(tmp_path):
    """A module may leave out its path (modules.json's check allows it): it is the folder
    itself; a type without a dot (hand-written, or a custom module's) is its own last
    part. The Transformer at the top, its Pooling in the folder itself (whose config.json
    is the model's: no pooling mode set, so embed is refused naming it)."""
    from exactc.exporter.checkpoints import hf

    for kind in ("Transformer", _ST + "Transformer"):
        folder = _bert_folder(tmp_path / kind, [(kind, None), (_ST + "Pooling", "1_Pooling"),
                                                (_ST + "Normalize", "2_Normalize")])
        ck = hf.load(folder)
        assert (ck.format, ck.model, ck.entries) == ("sentence-transformers", "bert", {}), kind
        assert ck.content == [folder / "model.safetensors", folder / "config.json"], kind
    folder = _bert_folder(tmp_path / "pool-at-top", [("Transformer", ""), ("Pooling", None), ("Normalize", None)])
    ck = hf.load(folder)
    assert ck.entries == {"embed": f"{folder / 'config.json'}: pooling none; exactc's embed entry pools by masked "
                                   "mean only (pooling_mode_mean_tokens); export --entry forward instead"}


def test_the_embed_refusal_names_every_module_after_pooling(tmp_path):
    from exactc.exporter.checkpoints import hf

    head = [(_ST + "Transformer", ""), (_ST + "Pooling", "1_Pooling")]
    for after, named in ((["Dense", "Normalize"], "Dense, Normalize"), (["Dense"], "Dense"), ([], "nothing")):
        folder = _bert_folder(tmp_path / named, head + [(_ST + kind, f"{k + 2}_{kind}")
                                                                     for k, kind in enumerate(after)])
        assert hf.load(folder).entries == {
            "embed": f"{folder / 'modules.json'}: Pooling is followed by {named}; exactc's embed entry is Pooling "
                     "(mean) then Normalize only"}, named


def _safetensors(path, header: dict, data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_a_data_range_of_the_wrong_size_is_refused_with_its_byte_count(tmp_path):
    """end - begin bytes, for a tensor that does not start at data byte 0."""
    from exactc.exporter.checkpoints import hf

    path = tmp_path / "model.safetensors"
    _safetensors(path, {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                        "b": {"dtype": "F32", "shape": [3], "data_offsets": [4, 12]}}, bytes(12))
    with pytest.raises(hf.CheckpointError) as caught:
        hf.read_header(path)
    assert str(caught.value) == (f"{path}: tensor b: data_offsets [4, 12] hold 8 bytes; a F32 tensor of shape (3,) "
                                 "needs 12")


def test_a_shard_index_is_refused_naming_what_it_found_and_the_first_shard(tmp_path):
    from exactc.exporter.checkpoints import hf

    index = tmp_path / "model.safetensors.index.json"
    for weight_map, kind in (([], "a list"), ("shard", "a string"), (None, "null"), ({"w": 1}, "an object")):
        index.write_text(json.dumps({"weight_map": weight_map}))
        with pytest.raises(hf.CheckpointError) as caught:
            hf.safetensors_files(tmp_path)
        assert str(caught.value) == f"{index}: weight_map must be an object tensor name -> shard file name, not {kind}"
    # one tensor in two shards: the second names the first's file
    folder = _bert_folder(tmp_path / "sharded")
    (folder / "model.safetensors").unlink()
    one = {"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    for shard in ("a.safetensors", "b.safetensors"):
        _safetensors(folder / shard, one, bytes(4))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "a.safetensors",
                                                                                    "v": "b.safetensors"}}))
    with pytest.raises(hf.CheckpointError) as caught:
        hf.load(folder)
    assert str(caught.value) == (f"{folder / 'b.safetensors'}: tensor w is also in {folder / 'a.safetensors'}; "
                                 "a tensor is stored once")


# ---- Hugging Face folders' refusals to their last word: a safetensors file too short, missing,
# with a gap or an overlap; a model_type or architectures exactc does not read; a Pooling of two
# modes


def test_a_safetensors_file_too_short_or_missing_is_refused_whole(tmp_path):
    """4 bytes cannot hold the header length; a missing file is named with the system's
    words for why (its strerror, not the OSError's whole text)."""
    from exactc.exporter.checkpoints import hf

    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\0" * 4)
    with pytest.raises(hf.CheckpointError) as caught:
        hf.read_header(short)
    assert str(caught.value) == (f"{short}: 4 bytes, too short for a .safetensors file (its first 8 bytes are "
                                 "the header length)")
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(hf.CheckpointError) as caught:
        hf.read_header(missing)
    assert str(caught.value) == f"{missing}: not a readable .safetensors file (No such file or directory)"


def test_a_gap_or_an_overlap_in_the_data_section_is_refused_whole(tmp_path):
    from exactc.exporter.checkpoints import hf

    path = tmp_path / "model.safetensors"
    _safetensors(path, {"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8))
    with pytest.raises(hf.CheckpointError) as caught:
        hf.read_header(path)
    assert str(caught.value) == (f"{path}: tensor a: data_offsets [4, 8] leave data bytes [0, 4) to no tensor; a "
                                 "file's tensors must tile its data section exactly")
    _safetensors(path, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                        "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8))
    with pytest.raises(hf.CheckpointError) as caught:
        hf.read_header(path)
    assert str(caught.value) == (f"{path}: tensor b: data_offsets [4, 8] overlap tensor a's [0, 8]; a file's "
                                 "tensors must tile its data section exactly")


def test_a_model_type_or_architectures_exactc_does_not_read_is_refused_whole(tmp_path):
    """The model types listed, and the example of architectures each model's first class
    (its head model for GPT-2 and llama, BertModel for BERT)."""
    from exactc.exporter.checkpoints import hf

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "mistral"}))
    with pytest.raises(hf.CheckpointError) as caught:
        hf.load(tmp_path)
    assert str(caught.value) == f"{config}: model_type 'mistral' is not one exactc reads (gpt2, bert, llama)"
    for model_type, example in (("gpt2", "GPT2LMHeadModel"), ("bert", "BertModel"), ("llama", "LlamaForCausalLM")):
        config.write_text(json.dumps({"model_type": model_type, "architectures": "Model"}))
        with pytest.raises(hf.CheckpointError) as caught:
            hf.load(tmp_path)
        assert str(caught.value) == (f"{config}: architectures='Model' must be a list of class names, e.g. "
                                     f"['{example}']"), model_type


def test_a_pooling_of_two_modes_refuses_embed_naming_both(tmp_path):
    """CLS and mean both set (the pipeline concatenates them): the modes sorted, joined
    by a comma, and the refusal whole to its fix."""
    from exactc.exporter.checkpoints import hf

    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "type": "sentence_transformers.models.Transformer", "path": ""},
        {"idx": 1, "name": "1", "type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]))
    (tmp_path / "1_Pooling").mkdir()
    pool = tmp_path / "1_Pooling" / "config.json"
    pool.write_text(json.dumps({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True,
                                "pooling_mode_max_tokens": False}))
    assert hf._sentence_transformers(tmp_path) == {"transformer": "", "refusals": {
        "embed": f"{pool}: pooling pooling_mode_cls_token, pooling_mode_mean_tokens; exactc's embed entry pools by "
                 "masked mean only (pooling_mode_mean_tokens); export --entry forward instead"}}


# ---- Hugging Face folders


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


# ---- a folder of drawn fields, written by transformers, against transformers' own logits


def transformers_model(model: str, fields: dict):
    """The transformers model of `fields` (drawn: exactc.strategies.files), every
    parameter drawn (tests/test_oracle.py's randomize), eager attention, f32."""
    from test_oracle import randomize, transformers

    common = {"vocab_size": fields["vocab"], "num_hidden_layers": fields["layers"], "attn_implementation": "eager"}
    if model == "llama":
        config = transformers.LlamaConfig(
            hidden_size=fields["dim"], intermediate_size=fields["mlp"], num_attention_heads=fields["heads"],
            num_key_value_heads=fields["kv_heads"], rms_norm_eps=fields["eps"], rope_theta=fields["theta"],
            max_position_embeddings=fields["context"], tie_word_embeddings=fields["tied"], **common)
        built = transformers.LlamaForCausalLM(config)
    elif model == "gpt":
        config = transformers.GPT2Config(
            n_positions=fields["positions"], n_embd=fields["dim"], n_head=fields["heads"], n_inner=fields["mlp"],
            layer_norm_epsilon=fields["eps"], activation_function="gelu_new", tie_word_embeddings=fields["tied"],
            vocab_size=fields["vocab"], n_layer=fields["layers"], attn_implementation="eager")
        built = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.BertConfig(
            hidden_size=fields["dim"], intermediate_size=fields["mlp"], num_attention_heads=fields["heads"],
            max_position_embeddings=fields["positions"], type_vocab_size=fields["type_vocab"],
            layer_norm_eps=fields["eps"], hidden_act="gelu", **common)
        built = transformers.BertModel(config, add_pooling_layer=False)
    randomize(built, 7)
    return built.eval()


def transformers_output(built, inputs: dict[str, np.ndarray]) -> np.ndarray:
    from test_oracle import torch

    with torch.no_grad():
        given_ = {k: torch.from_numpy(v.astype(np.int64))[None] for k, v in inputs.items()}
        out = built(**given_)
    return (out.logits if hasattr(out, "logits") else out.last_hidden_state)[0].numpy()


DRAWN_LLAMA = {"vocab": 13, "dim": 12, "heads": 3, "kv_heads": 1, "layers": 2, "mlp": 10, "eps": 0.25, "theta": 2.5,
               "tied": True, "context": 9}
DRAWN_GPT = {"vocab": 11, "positions": 7, "dim": 8, "heads": 2, "layers": 2, "mlp": 5, "eps": 0.25, "tied": False}
DRAWN_BERT = {"vocab": 11, "positions": 9, "dim": 12, "heads": 2, "layers": 1, "mlp": 7, "eps": 0.25,
              "type_vocab": 3}
DRAWN_FIELDS = {"llama": llama_configs(), "gpt": gpt_configs(), "bert": gpt_configs("bert")}


@pytest.mark.parametrize("model", ["llama", "gpt", "bert"])
@settings(max_examples=4, deadline=None)
@given(data=st.data())
@pinned_example(data=None)
def test_a_folder_of_drawn_fields_gives_transformers_outputs(model, data):
    """Every field a reader takes drawn (eps, theta, heads and key/value heads, a tied head
    or not, the vocabulary, the positions or context, BERT's segment vocabulary), the model
    built by transformers and saved by it: exactc's reading of the folder gives
    transformers' logits (Llama, GPT-2) or last hidden states (BERT, at the positions
    not padded) within 1e-4. transformers reads its own config.json; exactc's reader must
    agree with it on every field."""
    pinned = {"llama": DRAWN_LLAMA, "gpt": DRAWN_GPT, "bert": DRAWN_BERT}[model]
    fields = pinned if data is None else data.draw(DRAWN_FIELDS[model], label="fields")
    built = transformers_model(model, fields)
    with tempfile.TemporaryDirectory() as folder:
        built.save_pretrained(folder, safe_serialization=True)
        ckpt = checkpoints.load(Path(folder), model)
        program = models.build(model, "forward", ckpt.overrides())
        inputs = models.draw_inputs(program, 3)
        if model == "bert" and not inputs["attention_mask"].any():  # one position: padding it leaves none
            inputs["attention_mask"][:] = 1
        ours = walk.evaluate(program, "f32", ckpt.parameters(program, "f32"), inputs)
    if model == "bert":
        kept = inputs["attention_mask"] == 1
        ours, theirs = ours["last_hidden_state"][kept], transformers_output(built, inputs)[kept]
    else:
        ours, theirs = ours["logits"], transformers_output(built, inputs)
    assert ours.shape == theirs.shape and np.abs(ours - theirs).max() < 1e-4, (fields, np.abs(ours - theirs).max())
