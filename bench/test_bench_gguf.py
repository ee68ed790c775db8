"""`make bench`: GGUF files written by llama.cpp's own quantizer, read by exactc, against
oracles nobody here wrote.

A tiny Llama (dim 256, MLP 512: rows of whole 256-value super-blocks) is written as an F32
GGUF file (checkpoints/gguf_file.write) and quantized by llama.cpp's `llama_model_quantize`
(llama-cpp-python, built from source) to Q4_K_M, Q5_K_M and Q6_K, files that mix types per
tensor as the ones people download do. For each file:

- every tensor exactc reads equals the gguf package's own dequantization of it
  (`gguf.quants.dequantize`), bit for bit;
- the f64 export of the Llama forward read from the file passes its conformance check
  (the program's logits are the f64 reference's bits), and that reference's logits agree
  with transformers' LlamaForCausalLM in f64 loaded with the gguf package's dequantized
  weights, within TOLERANCE of the logits' scale (transformers computes RMSNorm, the
  softmax and the rotary tables in f32 whatever the model's type: 7e-7 off at a scale of 4).

llama.cpp is a bench peer, never a test dependency: without llama-cpp-python the checks skip
with the reason. A mismatch fails the bench run.
"""

from __future__ import annotations

import numpy as np
import pytest

from exactc.exporter import checkpoints, export
from exactc.exporter.checkpoints import gguf_file
from exactc.exporter.checkpoints.llama2c import interleaved_to_half
from exactc.runtime.toolchain import have_compiler

from programs_speed import build_exported, llama_cpp_missing, llama_cpp_quantize, llama_model

TINY = dict(vocab=512, dim=256, layers=2, heads=4, kv_heads=2, mlp=512, tokens=32)
# llama.cpp's file types, and the k-quant each must hold (the others it mixes in besides)
FTYPES = {"Q4_K_M": "Q4_K", "Q5_K_M": "Q5_K", "Q6_K": "Q6_K"}
PROMPT = 16  # the forward's tokens
TOLERANCE = 1e-5  # transformers' f32 steps inside its f64 model; a misread weight moves logits more


@pytest.fixture(scope="module")
def f32_file(tmp_path_factory):
    missing = llama_cpp_missing()
    if missing:
        pytest.skip(missing)
    model = llama_model(TINY)
    tensors = {name: t.numpy() for name, t in model.state_dict().items()}
    return gguf_file.write(tmp_path_factory.mktemp("gguf") / "tiny.f32.gguf", TINY, tensors, vocabulary=True)


@pytest.fixture(scope="module", params=sorted(FTYPES))
def quantized(request, f32_file):
    """A file of llama.cpp's quantizer, exactc's checkpoint of it, and the gguf package's
    dequantization of each tensor under Hugging Face's name, rows in its order."""
    import gguf

    path = llama_cpp_quantize(f32_file, f32_file.with_name(f"tiny-{request.param}.gguf"), request.param)
    ckpt = checkpoints.load(path, "llama")
    theirs, types = {}, {}
    for t in gguf.GGUFReader(path).tensors:
        name, _ = gguf_file._hf_name(t.name)
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        values = values.reshape(ckpt.tensors[name].shape)
        heads = TINY["heads"] if ".q_proj." in name else TINY["kv_heads"] if ".k_proj." in name else None
        theirs[name] = interleaved_to_half(values, heads) if heads is not None else values
        types[name] = t.tensor_type.name
    return request.param, ckpt, theirs, types


def test_llama_cpp_k_quant_files_read_as_gguf_dequantizes_them(quantized):
    ftype, ckpt, theirs, types = quantized
    assert FTYPES[ftype] in types.values(), f"{ftype}: llama.cpp wrote no {FTYPES[ftype]} tensor: {types}"
    for name, values in theirs.items():
        ours = ckpt.tensors[name].read()
        assert ours.shape == values.shape, f"{ftype} {name}: shape {ours.shape}, gguf's {values.shape}"
        differ = ours.view(np.uint64) != values.view(np.uint64)
        assert not differ.any(), (
            f"{ftype} {name} ({types[name]}): {int(differ.sum())} values are not the gguf "
            f"package's bits, the first at {np.argwhere(differ)[0]}"
        )


@pytest.mark.skipif(not have_compiler("gcc"), reason="gcc builds the program")
def test_llama_cpp_k_quant_file_exports_to_the_f64_logits_of_its_weights(quantized, tmp_path):
    ftype, ckpt, theirs, _ = quantized
    ids = np.random.default_rng(5).integers(3, TINY["vocab"], PROMPT).astype(np.int32)
    prepared = export.prepare(
        "llama", "forward", "f64", overrides={"tokens": PROMPT}, checkpoint=ckpt, inputs={"input_ids": ids}
    )
    build_exported(export.write(prepared, tmp_path / ftype), "gcc")  # the program's logits: the reference's bits
    ours = prepared.expected["logits"]
    peer = transformers_logits(theirs, ckpt.fields, ids)
    scale = max(1.0, float(np.abs(peer).max()))
    worst = float(np.abs(ours - peer).max())
    assert worst <= TOLERANCE * scale, (
        f"{ftype}: exactc's f64 logits are {worst:.3g} from transformers' (scale {scale:.3g})"
    )


def transformers_logits(weights: dict[str, np.ndarray], fields: dict, ids: np.ndarray) -> np.ndarray:
    """LlamaForCausalLM in f64 (but its f32 steps) with `weights` (Hugging Face's names), the file's eps and
    rope base: the logits of `ids`."""
    import torch
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=TINY["vocab"],
        hidden_size=TINY["dim"],
        intermediate_size=TINY["mlp"],
        num_hidden_layers=TINY["layers"],
        num_attention_heads=TINY["heads"],
        num_key_value_heads=TINY["kv_heads"],
        max_position_embeddings=TINY["tokens"],
        rms_norm_eps=float(fields["eps"]),
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    assert float(fields["theta"]) == 10000.0, "transformers' default rope base is 10000"
    model = transformers.LlamaForCausalLM(cfg).to(torch.float64).eval()
    state = {name: torch.from_numpy(values) for name, values in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in name for name in missing), (missing, unexpected)
    with torch.inference_mode():
        return model(input_ids=torch.from_numpy(ids.astype(np.int64))[None]).logits[0].numpy()
