"""Mistakes in the refusals and rare paths that tests/test_reach_checkpoints.py reaches."""

from exactc.mutants.model import Mutant

GGUF = "exactc/exporter/checkpoints/gguf_file.py"
HF = "exactc/exporter/checkpoints/hf.py"
LLAMA2C = "exactc/exporter/checkpoints/llama2c.py"
QUANT = "exactc/exporter/quant.py"

MUTANTS: list[Mutant] = [
    Mutant(
        "gguf-tied-head-format-not-counted",
        "a GGUF file without output.weight reads its quantized embedding as the head but does not "
        "count its format: a Q4_0 table with Q8_0 linear weights passes as q8, and a Q4_0 table "
        "with F32 linear weights as a float program",
        GGUF,
        "        if tensors[\"lm_head.weight\"].blocks is not None:\n"
        "            formats.add((QUANT_TYPES[tensors[\"lm_head.weight\"].dtype], BLOCK))\n",
        "",
        ("reach:checkpoints",),
        family="reach",
    ),
    Mutant(
        "gguf-quantized-embedding-counted-as-linear",
        "a GGUF file's quantized token embedding counts as a linear weight even with its own "
        "output.weight: a Q4_0 table beside Q8_0 weights is refused as a mix of formats",
        GGUF,
        '        if name != "model.embed_tokens.weight":\n',
        "        if True:\n",
        ("reach:checkpoints",),
        family="reach",
    ),
    Mutant(
        "hf-tied-llama-stored-head-not-listed",
        "a tied Llama folder that stores lm_head.weight anyway drops it without listing it as ignored",
        HF,
        "            ignored.append(tensors[\"lm_head.weight\"].source)  # tied: the head is the embedding\n",
        "            pass\n",
        ("reach:checkpoints",),
        family="reach",
    ),
    Mutant(
        "llama2c-writer-shape-unchecked",
        "llama2c.write does not compare a tensor's shape with the header's: a vocab or mlp that "
        "disagrees with the tensors writes a file its own header does not describe",
        LLAMA2C,
        "        if array.shape != tuple(shape):\n",
        "        if array.ndim != len(shape):\n",
        ("reach:checkpoints",),
        family="reach",
    ),
    Mutant(
        "quant-given-blocks-block-unchecked",
        "quantize_parameters takes a checkpoint's blocks in any block size: only their format is "
        "compared with the program's",
        QUANT,
        "            if (qt.fmt, qt.block, qt.shape) != (fmt, block, np.shape(array)):\n",
        "            if (qt.fmt, qt.shape) != (fmt, np.shape(array)):\n",
        ("reach:checkpoints",),
        family="reach",
    ),
    Mutant(
        "gguf-missing-key-unnamed-file",
        "a GGUF file without a required metadata key is refused without naming the file",
        GGUF,
        '            raise CheckpointError(f"{path}: metadata {key} is missing")',
        '            raise CheckpointError(f"metadata {key} is missing")',
        ("reach:checkpoints",),
        family="reach",
    ),
]
