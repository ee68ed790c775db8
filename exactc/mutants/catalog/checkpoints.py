"""Checkpoints: names, orientations and config keys read wrong (exporter/checkpoints/)."""

from exactc.mutants.model import Mutant

HF = "exactc/exporter/checkpoints/hf.py"
LLAMA2C = "exactc/exporter/checkpoints/llama2c.py"
CHECKPOINTS = "exactc/exporter/checkpoints/__init__.py"
BASE = "exactc/exporter/checkpoints/base.py"
GGUF = "exactc/exporter/checkpoints/gguf_file.py"
REQUIRES = (HF, LLAMA2C, CHECKPOINTS)

MUTANTS = [
    Mutant(
        "gpt2-conv1d-read-untransposed",
        "GPT-2's Conv1D weights (stored (in, out)) are read as if they were (out, in)",
        HF,
        'if model == "gpt" and _CONV1D.search(name):',
        'if model == "gpt" and _CONV1D.search(name) and False:',
        ("checkpoints", "oracle"),
        family="checkpoints",
        requires=REQUIRES,
    ),
    Mutant(
        "llama2c-qk-rows-not-permuted",
        "llama2.c's wq and wk are used in their interleaved row order with the half rope "
        "pairing",
        LLAMA2C,
        "return interleaved_to_half(values, heads) if heads is not None else values",
        "return values",
        ("checkpoints",),
        family="checkpoints",
        requires=REQUIRES,
    ),
    Mutant(
        "llama2c-permutation-is-its-own-inverse",
        "the interleaved-to-half permutation is written as its inverse",
        LLAMA2C,
        "w.reshape(heads, rows // heads // 2, 2, cols).transpose(0, 2, 1, 3)",
        "w.reshape(heads, 2, rows // heads // 2, cols).transpose(0, 2, 1, 3)",
        ("checkpoints",),
        family="checkpoints",
        requires=REQUIRES,
    ),
    Mutant(
        "checkpoint-shapes-not-checked",
        "a tensor's stored shape is not compared with the config's",
        BASE,
        "if tuple(t.shape) != tuple(stored) or (t.dtype not in FLOAT_DTYPES and t.blocks is None and not t.dequantized):",
        "if t.dtype not in FLOAT_DTYPES and t.blocks is None and not t.dequantized:",
        ("checkpoints",),
        family="checkpoints",
        requires=REQUIRES,
    ),
    Mutant(
        "gpt2-layer-norm-epsilon-ignored",
        "GPT-2's layer_norm_epsilon is not read: every GPT-2 runs with eps 1e-5",
        HF,
        '"eps": finite_float(where, "layer_norm_epsilon", c.get("layer_norm_epsilon", 1e-5)),',
        '"eps": 1e-5,',
        ("oracle", "hf:drawn"),
        family="checkpoints",
        requires=REQUIRES,
    ),
    Mutant(
        "llama-rope-theta-ignored",
        "Llama's rope_theta is not read: every Llama rotates with theta 10000",
        HF,
        'theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))',
        "theta = 10000.0",
        ("oracle", "hf:drawn", "checkpoints"),
        family="checkpoints",
        requires=REQUIRES,
    ),
    Mutant(
        "bert-layer-norm-eps-ignored",
        "BERT's layer_norm_eps is not read: every BERT runs with 1e-12, all-MiniLM-L6-v2's own "
        "value, so only a BERT of another eps (the drawn one of the oracle) shows it",
        HF,
        '"eps": finite_float(where, "layer_norm_eps", c.get("layer_norm_eps", 1e-12)),',
        '"eps": 1e-12,',
        ("oracle", "hf:drawn"),
        family="checkpoints",
        requires=REQUIRES,
    ),
    Mutant(
        "gguf-tied-head-format-not-counted",
        "a GGUF file without output.weight reads its quantized embedding as the head but does not "
        "count its format: a Q4_0 table with Q8_0 linear weights passes as q8, and a Q4_0 table "
        "with F32 linear weights as a float program",
        GGUF,
        "        if tensors[\"lm_head.weight\"].dtype in QUANT_TYPES:\n"
        "            formats.add((QUANT_TYPES[tensors[\"lm_head.weight\"].dtype], BLOCK))\n",
        "",
        ("gguf",),
        family="checkpoints",
    ),
    Mutant(
        "gguf-quantized-embedding-counted-as-linear",
        "a GGUF file's quantized token embedding counts as a linear weight even with its own "
        "output.weight: a Q4_0 table beside Q8_0 weights is refused as a mix of formats",
        GGUF,
        '        if name != "model.embed_tokens.weight":\n',
        "        if True:\n",
        ("gguf",),
        family="checkpoints",
    ),
    Mutant(
        "hf-tied-llama-stored-head-not-listed",
        "a tied Llama folder that stores lm_head.weight anyway drops it without listing it as ignored",
        HF,
        "            ignored.append(tensors[\"lm_head.weight\"].source)  # tied: the head is the embedding\n",
        "            pass\n",
        ("hf",),
        family="checkpoints",
    ),
    Mutant(
        "llama2c-writer-shape-unchecked",
        "llama2c.write does not compare a tensor's shape with the header's: a vocab or mlp that "
        "disagrees with the tensors writes a file its own header does not describe",
        LLAMA2C,
        "        if array.shape != tuple(shape):\n",
        "        if array.ndim != len(shape):\n",
        ("llama2c",),
        family="checkpoints",
    ),
    Mutant(
        "gguf-missing-key-unnamed-file",
        "a GGUF file without a required metadata key is refused without naming the file",
        GGUF,
        '            raise CheckpointError(f"{path}: metadata {key} is missing")',
        '            raise CheckpointError(f"metadata {key} is missing")',
        ("gguf",),
        family="checkpoints",
    ),
    Mutant(
        "gguf-rope-freq-base-ignored",
        "a GGUF file's llama.rope.freq_base is not read: every GGUF Llama rotates with theta 10000",
        GGUF,
        '"theta": finite_float(where, "llama.rope.freq_base", _field(reader, path, "llama.rope.freq_base", 10000.0)),',
        '"theta": 10000.0,',
        ("gguf:drawn", "gguf"),
        family="checkpoints",
    ),
    Mutant(
        "gguf-f32-eps-read-as-its-decimal",
        "a GGUF file's f32 eps is read as the f64 nearest its shortest decimal (1e-05 for the f32 "
        "nearest 1e-5, as a config.json's decimal is read), not as the f32 the file holds",
        GGUF,
        '                            _field(reader, path, "llama.attention.layer_norm_rms_epsilon")),',
        '                            float(str(np.float32(_field(reader, path, '
        '"llama.attention.layer_norm_rms_epsilon"))))),',
        ("gguf:drawn", "gguf"),
        family="checkpoints",
    ),
    Mutant(
        "llama2c-wk-permuted-by-query-heads",
        "llama2.c's wk rows are put back in Hugging Face's order by the query heads, not the "
        "key/value heads: a file of fewer key/value heads than query heads rotates its keys wrong",
        LLAMA2C,
        '                heads = {"wq": H, "wk": KV}.get(name)\n'
        "                where = offset + 4 * layer * step\n",
        '                heads = {"wq": H, "wk": H}.get(name)\n'
        "                where = offset + 4 * layer * step\n",
        ("llama2c:drawn", "llama2c"),
        family="checkpoints",
    ),
    Mutant(
        "hf-llama-tie-word-embeddings-ignored",
        "a Llama folder's tie_word_embeddings is not read: a tied Llama, which stores no "
        "lm_head.weight, is refused as missing its head",
        HF,
        'tied_llama = model == "llama" and boolean(where, "tie_word_embeddings", '
        'config.get("tie_word_embeddings", False))',
        "tied_llama = False",
        ("hf:drawn", "oracle"),
        family="checkpoints",
        requires=REQUIRES,
    ),
]
