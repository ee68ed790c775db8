"""Checkpoints: names, orientations and config keys read wrong (exporter/checkpoints/)."""

from exactc.mutants.model import Mutant

HF = "exactc/exporter/checkpoints/hf.py"
LLAMA2C = "exactc/exporter/checkpoints/llama2c.py"
CHECKPOINTS = "exactc/exporter/checkpoints/__init__.py"
BASE = "exactc/exporter/checkpoints/base.py"
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
        "if tuple(t.shape) != tuple(stored) or (t.dtype not in FLOAT_DTYPES and t.blocks is None):",
        "if t.dtype not in FLOAT_DTYPES and t.blocks is None:",
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
        ("oracle",),
        family="checkpoints",
        requires=REQUIRES,
    ),
    Mutant(
        "llama-rope-theta-ignored",
        "Llama's rope_theta is not read: every Llama rotates with theta 10000",
        HF,
        'theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))',
        "theta = 10000.0",
        ("oracle",),
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
        ("oracle",),
        family="checkpoints",
        requires=REQUIRES,
    ),
]
